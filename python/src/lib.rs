//! `hefprobe._native`: the Python module. Every function fills the same typed arguments the
//! command line's parser fills (or calls the same library function the command calls) and
//! returns typed results: no diagnostic is written here. What is here is the glue Python needs:
//! captures shared with numpy without a copy, errors as exceptions named after the exit-code
//! kinds, the GIL released during the work, and Ctrl-C turned into a clean stop.

use hefprobe::capture::{self, CaptureFile, MemorySink, Store};
use hefprobe::cli::run::{BackendArgs, ReportArgs, RunArgs};
use hefprobe::cli::{CheckpointArgs, Ids, ModelArgs, PromptArgs};
use hefprobe::error::Error;
use hefprobe::report::{Format, ReportTarget};
use hefprobe::tap::Key;
use numpy::{PyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyException, PyKeyError, PyKeyboardInterrupt};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pyo3::create_exception!(hefprobe, HefprobeError, PyException, "Base of every hefprobe error.");
pyo3::create_exception!(
    hefprobe,
    InputError,
    HefprobeError,
    "Exit code 2's kind: a file, key, tensor, field or argument is wrong (the message names it and the fix)."
);
pyo3::create_exception!(
    hefprobe,
    DeviceError,
    HefprobeError,
    "Exit code 3's kind: the device, a tensor computation or the disk failed."
);

/// The error and the causes its own message does not already say (as the command line prints).
fn to_py(e: Error) -> PyErr {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        let cause = s.to_string();
        if !text.contains(cause.trim()) {
            text = format!("{text}\n  caused by: {cause}");
        }
        source = s.source();
    }
    match e.exit_code() {
        2 => InputError::new_err(text),
        130 => PyKeyboardInterrupt::new_err(text),
        _ => DeviceError::new_err(text),
    }
}

/// Run `f` with the GIL released, on a worker thread, while this thread watches for Ctrl-C:
/// Python's SIGINT handler only sets a flag, which `check_signals` turns into KeyboardInterrupt
/// here; the work is then asked to stop (`hefprobe::error::interrupt`), stops at its next check
/// (between layers, decode steps, emulations, compared taps), unwinds (spill folders removed),
/// and the interrupt is raised.
fn work<T: Send>(py: Python<'_>, f: impl FnOnce() -> hefprobe::Result<T> + Send) -> PyResult<T> {
    // The decoder's frames are deep for a 2 MiB thread: the main thread's 8 MiB, as the CLI has.
    const STACK: usize = 8 << 20;
    let (joined, interrupted) = py.detach(|| {
        std::thread::scope(|s| {
            let handle = std::thread::Builder::new().stack_size(STACK).spawn_scoped(s, f);
            let handle = match handle {
                Ok(h) => h,
                Err(e) => {
                    return (Ok(Err(Error::Device(format!("cannot start a worker thread: {e}")))), None)
                }
            };
            let mut interrupted = None;
            while !handle.is_finished() {
                std::thread::sleep(std::time::Duration::from_millis(20));
                if interrupted.is_none() {
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        hefprobe::error::interrupt(true);
                        interrupted = Some(e);
                    }
                }
            }
            let joined = handle.join();
            hefprobe::error::interrupt(false);
            (joined, interrupted)
        })
    });
    match (joined, interrupted) {
        (_, Some(e)) => Err(e),
        (Ok(r), None) => r.map_err(to_py),
        (Err(panic), None) => std::panic::resume_unwind(panic),
    }
}

/// A capture: `"PHASE/TAP"` → float32 array, held by Rust and shown to numpy without a copy
/// (read-only views that keep the capture alive).
#[pyclass(frozen, module = "hefprobe", name = "Capture")]
struct PyCapture {
    inner: capture::Capture,
    notes: Vec<String>,
}

#[pymethods]
impl PyCapture {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, key: &str) -> bool {
        self.inner.get(&Key::parse(key)).is_some()
    }

    fn __getitem__<'py>(slf: &Bound<'py, Self>, key: &str) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let Some(a) = slf.get().inner.get(&Key::parse(key)) else {
            return Err(PyKeyError::new_err(key.to_string()));
        };
        // SAFETY: the array lives in a frozen object that is never changed, and the view keeps
        // that object alive (its base).
        let view = unsafe { PyArray::borrow_from_array(a, slf.clone().into_any()) };
        view.getattr("flags")?.setattr("writeable", false)?;
        Ok(view)
    }

    /// The keys, in execution order (phase, then layer and tap).
    fn keys(&self) -> Vec<String> {
        self.inner.keys().map(ToString::to_string).collect()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        PyList::new(py, self.keys())?.into_any().try_iter()
    }

    /// What the reader must know (config.json keys hefprobe does not know, defaults applied).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// Write the capture as `.npz` (the command line's format: `hefprobe compare` reads it).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        work(py, || capture::save(&self.inner, &path, true))
    }

    /// Read an `.npz` capture (`hefprobe reference -o`, `capture`, `run --save-captures`).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyCapture> {
        let inner = work(py, || {
            let file = CaptureFile::open(&path)?;
            let mut c = capture::Capture::default();
            for key in file.keys() {
                if let Some(a) = file.get(&key)? {
                    c.insert(key, a.into_owned());
                }
            }
            Ok(c)
        })?;
        Ok(PyCapture { inner, notes: Vec::new() })
    }

    fn __repr__(&self) -> String {
        let phases: Vec<String> = capture::phases(&self.inner).iter().map(ToString::to_string).collect();
        format!("<hefprobe.Capture: {} taps, phases {}>", self.inner.len(), phases.join(", "))
    }
}

/// A `dict[str, ndarray]` read in place: each array's data (C-contiguous float32, made so by
/// the Python layer) is copied out one tap at a time when the comparison asks for it, as a
/// capture file's is read.
struct Arrays {
    entries: Vec<(Key, usize, Vec<usize>)>,
    _owners: Vec<Py<PyAny>>,
}

impl Arrays {
    fn from_dict(d: &Bound<'_, PyDict>, what: &str) -> PyResult<Arrays> {
        let (mut entries, mut owners) = (Vec::new(), Vec::new());
        for (k, v) in d.iter() {
            let name: String =
                k.extract().map_err(|_| InputError::new_err(format!("{what}: a key is not a str")))?;
            let a: PyReadonlyArrayDyn<'_, f32> = v
                .extract()
                .map_err(|_| InputError::new_err(format!("{what}[{name:?}]: not a float32 numpy array")))?;
            let data = a.as_slice().map_err(|_| {
                InputError::new_err(format!(
                    "{what}[{name:?}]: not C-contiguous (np.ascontiguousarray makes it so)"
                ))
            })?;
            entries.push((Key::parse(&name), data.as_ptr() as usize, a.shape().to_vec()));
            owners.push(v.unbind());
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Arrays { entries, _owners: owners })
    }
}

impl Store for Arrays {
    fn keys(&self) -> Vec<Key> {
        self.entries.iter().map(|e| e.0.clone()).collect()
    }

    fn contains(&self, key: &Key) -> bool {
        self.entries.binary_search_by(|e| e.0.cmp(key)).is_ok()
    }

    fn get(&self, key: &Key) -> hefprobe::Result<Option<Cow<'_, ndarray::ArrayD<f32>>>> {
        let Ok(i) = self.entries.binary_search_by(|e| e.0.cmp(key)) else { return Ok(None) };
        let (_, ptr, shape) = &self.entries[i];
        // SAFETY: the pointer is a C-contiguous float32 buffer of `shape`, kept alive by
        // `_owners` (as numpy's own functions, the data may be changed by another Python thread
        // while the GIL is released; the comparison then reads what is there).
        let view = unsafe { ndarray::ArrayViewD::from_shape_ptr(ndarray::IxDyn(shape), *ptr as *const f32) };
        Ok(Some(Cow::Owned(view.to_owned())))
    }
}

/// One side of a comparison, as Python gave it.
enum Side {
    Held(Py<PyCapture>),
    File(PathBuf),
    Arrays(Arrays),
}

/// A side from a Capture, a `dict` or a path (str or os.PathLike) to an `.npz`.
fn side(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Side> {
    if let Ok(c) = obj.cast::<PyCapture>() {
        Ok(Side::Held(c.clone().unbind()))
    } else if let Ok(d) = obj.cast::<PyDict>() {
        Ok(Side::Arrays(Arrays::from_dict(d, what)?))
    } else if let Ok(p) = obj.extract::<PathBuf>() {
        Ok(Side::File(p))
    } else {
        Err(InputError::new_err(format!(
            "{what}: a hefprobe.Capture, a dict of numpy arrays or an .npz path, not {}",
            obj.get_type().name()?
        )))
    }
}

/// The side as a capture to read; through the name map `map` when given (a held side is
/// written to `scratch` first: a map reads an `.npz`).
fn open<'a>(side: &'a Side, map: Option<&Path>, scratch: &Path) -> hefprobe::Result<Opened<'a>> {
    let held: &dyn Store = match side {
        Side::File(p) => match map {
            None => return Ok(Opened::Owned(Box::new(CaptureFile::open(p)?))),
            Some(m) => return hefprobe::backend::dump::mapped(p, m, scratch).map(Opened::Owned),
        },
        Side::Held(c) => &c.get().inner,
        Side::Arrays(a) => a,
    };
    let Some(m) = map else { return Ok(Opened::Borrowed(held)) };
    let file = scratch.join("candidate.npz");
    capture::save(held, &file, false)?;
    hefprobe::backend::dump::mapped(&file, m, scratch).map(Opened::Owned)
}

enum Opened<'a> {
    Borrowed(&'a dyn Store),
    Owned(Box<dyn Store>),
}

impl Opened<'_> {
    fn store(&self) -> &dyn Store {
        match self {
            Opened::Borrowed(s) => *s,
            Opened::Owned(b) => b.as_ref(),
        }
    }
}

/// A report: what `hefprobe run` / `compare` / `explain` print, as a value.
#[pyclass(frozen, module = "hefprobe", name = "Report")]
struct PyReport {
    inner: Mutex<hefprobe::report::Report>,
}

impl PyReport {
    fn new(r: hefprobe::report::Report) -> Self {
        PyReport { inner: Mutex::new(r) }
    }

    fn render(&self, format: Format, path: Option<PathBuf>) -> PyResult<String> {
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        hefprobe::report::emit(&mut r, &[ReportTarget { format, path }], false).map_err(to_py)
    }
}

fn json_value<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| DeviceError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl PyReport {
    /// True when every comparison is within its thresholds and explain, where it ran, names no
    /// fault (`hefprobe` exit code 0).
    #[getter]
    fn passed(&self) -> bool {
        !self.inner.lock().unwrap_or_else(|e| e.into_inner()).failed()
    }

    /// The first failing tap of the first drifting comparison's first phase, as a dict (phase,
    /// tap, cosine, failures, worst_heads, sentence, ...), or None.
    #[getter]
    fn first_drift<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let first = r.located.iter().flatten().next();
        first.map(|l| json_value(py, l)).transpose()
    }

    /// The fault explain ranked first, when it explains the drift (else None).
    #[getter]
    fn best_explanation(&self) -> Option<String> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).explain.as_ref().and_then(|e| e.best.clone())
    }

    /// Every compared tap, one dict each (the JSON report's rows), with the pair it belongs to.
    #[getter]
    fn rows<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let out = PyList::empty(py);
        for pair in &r.comparisons {
            for row in &pair.rows {
                let d = json_value(py, row)?;
                d.set_item("reference", &pair.reference)?;
                d.set_item("candidate", &pair.candidate)?;
                out.append(d)?;
            }
        }
        Ok(out)
    }

    /// The whole report as a dict (schema hefprobe.report/1, the JSON report).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_value(py, &*self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn to_json(&self) -> PyResult<String> {
        self.render(Format::Json, None)
    }

    fn to_markdown(&self) -> PyResult<String> {
        self.render(Format::Markdown, None)
    }

    fn to_terminal(&self) -> PyResult<String> {
        self.render(Format::Terminal, None)
    }

    /// Write the report's SVG figures as PREFIX-*.svg; returns their paths.
    fn to_svg(&self, prefix: PathBuf) -> PyResult<Vec<String>> {
        self.render(Format::Svg, Some(prefix))?;
        Ok(self.inner.lock().unwrap_or_else(|e| e.into_inner()).svg.clone())
    }

    fn __repr__(&self) -> PyResult<String> {
        self.to_terminal()
    }
}

/// A HEF audit (`hefprobe audit`), or a diff against a reference HEF.
#[pyclass(frozen, module = "hefprobe", name = "Audit")]
struct PyAudit {
    json: String,
    markdown: String,
    terminal: String,
    passed: bool,
}

#[pymethods]
impl PyAudit {
    /// True when no error-severity finding (or difference) was found.
    #[getter]
    fn passed(&self) -> bool {
        self.passed
    }

    /// The findings (or differences), as the JSON report's dicts.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?.call_method1("loads", (self.json.as_str(),))
    }

    fn to_json(&self) -> String {
        self.json.clone()
    }

    fn to_markdown(&self) -> String {
        self.markdown.clone()
    }

    fn __repr__(&self) -> String {
        self.terminal.clone()
    }
}

fn checkpoint_args(checkpoint: Option<PathBuf>, revision: Option<String>) -> CheckpointArgs {
    CheckpointArgs {
        checkpoint,
        revision: revision.unwrap_or_else(|| hefprobe::model::hub::DEFAULT_REVISION.to_string()),
        strict_config: false,
    }
}

#[pyfunction]
#[pyo3(signature = (checkpoint=None, *, revision=None, synth=None, seed=0, tokens=None, text=None,
    tokenizer=None, taps=None, decode=0, decode_tokens=None, chunk=None, start_position=0,
    add_special_tokens=false))]
#[allow(clippy::too_many_arguments)]
fn reference(
    py: Python<'_>,
    checkpoint: Option<PathBuf>,
    revision: Option<String>,
    synth: Option<String>,
    seed: u64,
    tokens: Option<Vec<u32>>,
    text: Option<String>,
    tokenizer: Option<PathBuf>,
    taps: Option<Vec<String>>,
    decode: usize,
    decode_tokens: Option<Vec<u32>>,
    chunk: Option<usize>,
    start_position: usize,
    add_special_tokens: bool,
) -> PyResult<PyCapture> {
    let model = ModelArgs { from: checkpoint_args(checkpoint, revision), synth, synth_seed: seed };
    let prompt = PromptArgs {
        tokens: tokens.map(Ids),
        text,
        tokenizer,
        add_special_tokens,
        decode: decode_tokens.is_none().then_some(decode),
        decode_tokens: decode_tokens.map(Ids),
        chunk,
        start_position,
    };
    let taps = taps.unwrap_or_else(|| vec!["*".into()]);
    work(py, || {
        let held = hefprobe::model::memory::TapsHeld::InMemory { captures: 1 };
        let (ckpt, inputs, selection, decoder) =
            hefprobe::cli::reference::prepare(&model, &prompt, &taps, held)?;
        let mut sink = MemorySink::new(selection);
        let mut record = hefprobe::model::run::RunRecord::default();
        let mut hooks = hefprobe::model::hooks::NoHooks;
        hefprobe::model::run::run_inputs(&decoder, &inputs, &mut sink, &mut hooks, &mut record)?;
        let notes = hefprobe::report::format::config_notes(&ckpt.config);
        Ok(PyCapture { inner: sink.capture, notes })
    })
}

#[pyfunction]
#[pyo3(signature = (reference, candidate, *, thresholds=None, map=None))]
fn compare(
    py: Python<'_>,
    reference: &Bound<'_, PyAny>,
    candidate: &Bound<'_, PyAny>,
    thresholds: Option<Vec<String>>,
    map: Option<PathBuf>,
) -> PyResult<PyReport> {
    let scratch = tempdir()?;
    let (r, c) = (side(reference, "reference")?, side(candidate, "candidate")?);
    let bounds = thresholds.unwrap_or_default();
    let report = work(py, || {
        let names = ("reference", "candidate");
        let (r, c) = (open(&r, None, scratch.path())?, open(&c, map.as_deref(), scratch.path())?);
        let pair = hefprobe::compare::captures(r.store(), c.store(), (names, names), &bounds)?;
        let command = "hefprobe.compare(...)".to_string();
        let mut report =
            hefprobe::report::Report::new(hefprobe::report::ProbeInfo { command, ..Default::default() });
        report.add_comparison(pair);
        Ok(report)
    })?;
    Ok(PyReport::new(report))
}

fn tempdir() -> PyResult<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("hefprobe-py-")
        .tempdir()
        .map_err(|e| DeviceError::new_err(format!("cannot make a temporary folder: {e}")))
}

/// A probe run's report, or its error (the report of a run that stopped is not returned).
fn probe_report(
    py: Python<'_>,
    plan: impl FnOnce() -> hefprobe::Result<(hefprobe::probe::schema::Probe, hefprobe::probe::run::RunOptions)>
        + Send,
    command: String,
) -> PyResult<PyReport> {
    let report = work(py, || {
        let (probe, mut opts) = plan()?;
        opts.command = command;
        let run = hefprobe::probe::run::run_probe(&probe, &opts)?;
        match run.error {
            Some(e) => Err(e),
            None => Ok(run.report),
        }
    })?;
    Ok(PyReport::new(report))
}

#[pyfunction]
#[pyo3(signature = (probe, *, backend=None, fault=None, checkpoint=None, revision=None,
    thresholds=None, explain=true, spill_dir=None, save_captures=None))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    probe: PathBuf,
    backend: Option<Vec<String>>,
    fault: Option<Vec<String>>,
    checkpoint: Option<PathBuf>,
    revision: Option<String>,
    thresholds: Option<Vec<String>>,
    explain: bool,
    spill_dir: Option<PathBuf>,
    save_captures: Option<PathBuf>,
) -> PyResult<PyReport> {
    let command = format!("hefprobe.run({:?})", probe.display().to_string());
    let a = RunArgs {
        probe,
        backend: BackendArgs { backends: backend.unwrap_or_default(), faults: fault.unwrap_or_default() },
        out: ReportArgs { reports: Vec::new(), thresholds: thresholds.unwrap_or_default() },
        save_inputs: None,
        save_captures,
        spill_dir,
        no_explain: !explain,
        checkpoint: checkpoint_args(checkpoint, revision),
        bundle: None,
        bundle_cap: None,
    };
    probe_report(py, || hefprobe::cli::run::plan(&a), command)
}

#[pyfunction]
#[pyo3(signature = (probe, *, observed=None, map=None, hef=None, backend=None, faults=None,
    pairs=false, quant=None, checkpoint=None, revision=None, thresholds=None, spill_dir=None,
    exhaustive=false))]
#[allow(clippy::too_many_arguments)]
fn explain(
    py: Python<'_>,
    probe: PathBuf,
    observed: Option<PathBuf>,
    map: Option<PathBuf>,
    hef: Option<PathBuf>,
    backend: Option<String>,
    faults: Option<Vec<String>>,
    pairs: bool,
    quant: Option<String>,
    checkpoint: Option<PathBuf>,
    revision: Option<String>,
    thresholds: Option<Vec<String>>,
    spill_dir: Option<PathBuf>,
    exhaustive: bool,
) -> PyResult<PyReport> {
    if observed.is_some() && backend.is_some() {
        return Err(InputError::new_err("explain: give observed= or backend=, not both"));
    }
    if observed.is_none() && (map.is_some() || hef.is_some()) {
        return Err(InputError::new_err("explain: map= and hef= describe observed=; give it"));
    }
    let command = format!("hefprobe.explain({:?})", probe.display().to_string());
    let a = hefprobe::cli::explain::ExplainArgs {
        probe,
        observed,
        map,
        hef,
        backend,
        faults: faults.unwrap_or_default(),
        pairs,
        quant,
        exhaustive,
        checkpoint: checkpoint_args(checkpoint, revision),
        spill_dir,
        out: ReportArgs { reports: Vec::new(), thresholds: thresholds.unwrap_or_default() },
    };
    probe_report(py, || hefprobe::cli::explain::plan(&a), command)
}

#[pyfunction]
#[pyo3(signature = (hef, *, against=None))]
fn audit(py: Python<'_>, hef: PathBuf, against: Option<PathBuf>) -> PyResult<PyAudit> {
    work(py, || {
        let expect = hefprobe::hef::Expectations::default();
        let (json, doc, failed) = hefprobe::cli::audit::outcome(&hef, against.as_deref(), &expect)?;
        Ok(PyAudit { json, markdown: doc.markdown(), terminal: doc.terminal(false), passed: !failed })
    })
}

#[pyfunction]
#[pyo3(signature = (out, *, checkpoint=None, revision=None, synth=None, seed=0, fault=None,
    quant="a16".to_string(), prefill_tokens=96, kv_cache_size=2048, tbt=true, lm_head_shards=1,
    mistakes=None, calib_tokens=None, calib_text=None, expose=None, expose_quant="per-feature".to_string(),
    layers=None))]
#[allow(clippy::too_many_arguments)]
fn synth_hef<'py>(
    py: Python<'py>,
    out: PathBuf,
    checkpoint: Option<PathBuf>,
    revision: Option<String>,
    synth: Option<String>,
    seed: u64,
    fault: Option<Vec<String>>,
    quant: String,
    prefill_tokens: usize,
    kv_cache_size: usize,
    tbt: bool,
    lm_head_shards: usize,
    mistakes: Option<Vec<String>>,
    calib_tokens: Option<Vec<Vec<u32>>>,
    calib_text: Option<PathBuf>,
    expose: Option<Vec<String>>,
    expose_quant: String,
    layers: Option<(usize, usize)>,
) -> PyResult<Bound<'py, PyAny>> {
    use hefprobe::device::synth_hef::ExposeQuant;
    let Some(expose_quant) = ExposeQuant::from_name(&expose_quant) else {
        let names = ExposeQuant::ALL.map(ExposeQuant::name).join(", ");
        return Err(InputError::new_err(format!(
            "synth_hef: expose_quant=`{expose_quant}`: give one of {names}"
        )));
    };
    if calib_tokens.is_some() && calib_text.is_some() {
        return Err(InputError::new_err("synth_hef: give calib_tokens= or calib_text=, not both"));
    }
    let a = hefprobe::cli::synth_hef::SynthHefArgs {
        model: ModelArgs { from: checkpoint_args(checkpoint, revision), synth, synth_seed: seed },
        out,
        prefill_tokens,
        kv_cache_size,
        no_tbt: !tbt,
        faults: fault.unwrap_or_default(),
        quant,
        lm_head_shards,
        mistakes: mistakes.unwrap_or_default(),
        calibration: calib_tokens.unwrap_or_default().into_iter().map(Ids).collect(),
        calib_text,
        calib_random: false,
        noise: None,
        noise_seed: 0,
        expose: expose.map(|globs| globs.join(",")),
        expose_quant,
        layers,
    };
    let written = work(py, || hefprobe::cli::synth_hef::write(&a))?;
    json_value(py, &written)
}

/// A progress bar's terminal that is Python's `sys.stderr` (a notebook shows it there): each
/// redraw is a carriage return and the bar's line, as tqdm draws, written when indicatif
/// flushes (it moves no cursor: a bar is one line).
#[derive(Debug, Default)]
struct PyStderr {
    line: Mutex<String>,
}

impl PyStderr {
    fn put(&self, s: &str) -> std::io::Result<()> {
        let mut line = self.line.lock().unwrap_or_else(|e| e.into_inner());
        line.push_str(s.trim_end_matches('\n'));
        Ok(())
    }
}

impl indicatif::TermLike for PyStderr {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.line.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        let line = std::mem::take(&mut *self.line.lock().unwrap_or_else(|e| e.into_inner()));
        let text = format!("\r{line:<100}");
        // A bar that cannot be drawn is not worth failing the work for.
        Python::attach(|py| {
            if let Ok(err) = py.import("sys").and_then(|sys| sys.getattr("stderr")) {
                let _ = err.call_method1("write", (text,));
                let _ = err.call_method0("flush");
            }
        });
        Ok(())
    }
}

/// Where progress bars go: "auto" (stderr when it is a terminal), "off", or "on" (Python's
/// sys.stderr, which a notebook shows).
#[pyfunction]
fn set_progress(mode: &str) -> PyResult<()> {
    use hefprobe::progress::Target;
    let target = match mode {
        "auto" => Target::Auto,
        "off" => Target::Hidden,
        "on" => Target::Custom(std::sync::Arc::new(|| Box::new(PyStderr::default()))),
        _ => {
            return Err(InputError::new_err(format!(
                "set_progress: `{mode}`: give \"auto\", \"on\" or \"off\""
            )))
        }
    };
    hefprobe::progress::set_target(target);
    Ok(())
}

/// The command line (`hefprobe ARGS...`: the wheel's console script); returns its exit code.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let code = work(py, || Ok(hefprobe::cli::main_code(argv)))?;
    Ok(i32::from(code))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Ctrl-C stays Python's (KeyboardInterrupt); `work` turns it into a clean stop.
    hefprobe::probe::cleanup::leave_signals_to_host();
    m.add("HefprobeError", m.py().get_type::<HefprobeError>())?;
    m.add("InputError", m.py().get_type::<InputError>())?;
    m.add("DeviceError", m.py().get_type::<DeviceError>())?;
    m.add_class::<PyCapture>()?;
    m.add_class::<PyReport>()?;
    m.add_class::<PyAudit>()?;
    for f in [
        wrap_pyfunction!(reference, m)?,
        wrap_pyfunction!(compare, m)?,
        wrap_pyfunction!(run, m)?,
        wrap_pyfunction!(explain, m)?,
        wrap_pyfunction!(audit, m)?,
        wrap_pyfunction!(synth_hef, m)?,
        wrap_pyfunction!(set_progress, m)?,
        wrap_pyfunction!(main, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
