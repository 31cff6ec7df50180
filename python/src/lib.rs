//! `hefprobe._native`: the Python module. Every function builds the request the command line
//! builds (`hefprobe::request`), from keyword arguments, and returns its typed result: no
//! diagnostic is written here. What is here is the glue Python needs: captures shared with numpy
//! without a copy, errors as exceptions named after the exit-code kinds, the GIL released during
//! the work, and Ctrl-C turned into a clean stop.

mod capture;
mod llm;
mod progress;
mod report;

use capture::{open, side, PyCapture};
use hefprobe::error::Error;
use hefprobe::model::CheckpointRef;
use hefprobe::probe::schema::InputsSpec;
use hefprobe::request;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt};
use pyo3::prelude::*;
use report::{json_value, PyAudit, PyReport};
use std::path::PathBuf;

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
pub(crate) fn to_py(e: Error) -> PyErr {
    let text = std::iter::once(e.to_string()).chain(e.causes()).collect::<Vec<_>>().join("\n  caused by: ");
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
pub(crate) fn work<T: Send>(py: Python<'_>, f: impl FnOnce() -> hefprobe::Result<T> + Send) -> PyResult<T> {
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

/// The checkpoint a `checkpoint=` (and `revision=`) argument names.
fn checkpoint_ref(checkpoint: Option<PathBuf>, revision: Option<String>) -> Option<CheckpointRef> {
    let revision = revision.unwrap_or_else(|| hefprobe::model::hub::DEFAULT_REVISION.to_string());
    checkpoint.map(|path| CheckpointRef::Path { path, revision, strict_config: false })
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
    let model =
        hefprobe::model::CheckpointRef::given(checkpoint_ref(checkpoint, revision), synth.as_deref(), seed)
            .map_err(to_py)?;
    let inputs = InputsSpec {
        tokens,
        text,
        tokenizer,
        add_special_tokens,
        decode: decode_tokens.is_none().then_some(decode),
        decode_tokens,
        chunk,
        start_position,
    };
    let taps = taps.unwrap_or_else(|| vec!["*".into()]);
    let taps = hefprobe::tap::TapSelection::parse(&taps).map_err(to_py)?;
    let r = request::reference::Reference { model, inputs, taps, out: None, crosscheck: false };
    let done = work(py, || r.run())?;
    if let Some(e) = done.error {
        return Err(to_py(e));
    }
    let notes = hefprobe::report::format::config_notes(&done.ckpt.config);
    Ok(PyCapture { inner: done.capture.unwrap_or_default(), notes })
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
    let scratch = tempfile::Builder::new()
        .prefix("hefprobe-py-")
        .tempdir()
        .map_err(|e| DeviceError::new_err(format!("cannot make a temporary folder: {e}")))?;
    let (r, c) = (side(reference, "reference")?, side(candidate, "candidate")?);
    let bounds = bounds(thresholds)?;
    let report = work(py, || {
        let names = ("reference", "candidate");
        let (r, c) = (open(&r, None, scratch.path())?, open(&c, map.as_deref(), scratch.path())?);
        let pair = hefprobe::compare::captures(r.store(), c.store(), (names, names), &bounds, None)?;
        let command = "hefprobe.compare(...)".to_string();
        let mut report =
            hefprobe::report::Report::new(hefprobe::report::ProbeInfo { command, ..Default::default() });
        report.add_comparison(pair);
        Ok(report)
    })?;
    Ok(PyReport::new(report))
}

/// The `thresholds=` bounds, read as `--threshold` reads them.
fn bounds(thresholds: Option<Vec<String>>) -> PyResult<Vec<hefprobe::compare::thresholds::Bound>> {
    hefprobe::compare::thresholds::Bound::parse_all(&thresholds.unwrap_or_default()).map_err(to_py)
}

/// A probe run's report, or its error (the report of a run that stopped is not returned).
fn probe_report(
    py: Python<'_>,
    run: impl FnOnce() -> hefprobe::error::Result<hefprobe::probe::run::ProbeRun> + Send,
) -> PyResult<PyReport> {
    Ok(PyReport::new(work(py, move || run()?.ok().map(|r| r.report))?))
}

#[pyfunction]
#[pyo3(signature = (probe, *, backend=None, fault=None, checkpoint=None, revision=None,
    thresholds=None, explain=true, spill_dir=None, save_captures=None, llm=None))]
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
    llm: Option<Bound<'_, PyAny>>,
) -> PyResult<PyReport> {
    let backends =
        hefprobe::backend::BackendSpec::from_flags(&backend.unwrap_or_default(), &fault.unwrap_or_default());
    let request = request::run::Run {
        command: format!("hefprobe.run({:?})", probe.display().to_string()),
        record: hefprobe::probe::record::RunRecord {
            probe,
            backends: backends.map_err(to_py)?,
            checkpoint: checkpoint_ref(checkpoint, revision),
            thresholds: bounds(thresholds)?,
            no_explain: !explain,
        },
        save_captures,
        spill_dir,
        ..Default::default()
    };
    match llm {
        None => probe_report(py, move || request.run()),
        Some(obj) => served_report(py, request, &obj),
    }
}

/// A run with an `LLM` object as one more backend, a served model (`llm.rs`): the request's
/// plan, the object's spec added, and the object handed to the run where that spec is opened.
fn served_report(py: Python<'_>, request: request::run::Run, obj: &Bound<'_, PyAny>) -> PyResult<PyReport> {
    use hefprobe::backend::serve::{Api, ServeBackend};
    use hefprobe::backend::{make_backend, Backend, BackendKind, BackendSpec};
    let server = llm::PyLlm::new(obj)?;
    let scratch = tempfile::Builder::new()
        .prefix("hefprobe-py-")
        .tempdir()
        .map_err(|e| DeviceError::new_err(format!("cannot make a temporary folder: {e}")))?;
    let mut spec =
        BackendSpec { name: Some("llm".into()), api: Some(Api::Llm), ..BackendSpec::new(BackendKind::Serve) };
    if let Some(t) = server.template(py) {
        let path = scratch.path().join("prompt_template.jinja");
        std::fs::write(&path, t).map_err(|e| DeviceError::new_err(format!("{}: {e}", path.display())))?;
        spec.template = Some(path);
    }
    let report = probe_report(py, move || {
        let (probe, mut opts) = request.plan()?;
        opts.probe.backends.push(spec);
        let mut server = Some(server);
        let mut open = |spec: &BackendSpec, ckpt: &hefprobe::model::Checkpoint, model: &_| {
            if spec.api != Some(Api::Llm) {
                return make_backend(spec, ckpt, model);
            }
            let server =
                server.take().ok_or_else(|| Error::usage("llm=: one LLM object serves one backend"))?;
            let tokenizer = hefprobe::model::tokenizer::Tokenizer::for_checkpoint(ckpt)?;
            Ok(Box::new(ServeBackend::new(&spec.label(), Box::new(server), std::sync::Arc::new(tokenizer)))
                as Box<dyn Backend>)
        };
        hefprobe::probe::run::run_probe_with(&probe, &opts, &mut open)
    });
    drop(scratch);
    report
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
    let request = request::run::Explain {
        command: format!("hefprobe.explain({:?})", probe.display().to_string()),
        probe,
        observed: hefprobe::backend::BackendSpec::observed(observed, map, hef, backend.as_deref())
            .map_err(to_py)?,
        faults: hefprobe::fault::spec::parse_all(&faults.unwrap_or_default()).map_err(to_py)?,
        pairs,
        quant: quant.as_deref().map(hefprobe::fault::spec::quantization).transpose().map_err(to_py)?,
        exhaustive,
        checkpoint: checkpoint_ref(checkpoint, revision),
        thresholds: bounds(thresholds)?,
        spill_dir,
        reports: Vec::new(),
    };
    probe_report(py, move || request.run())
}

#[pyfunction]
#[pyo3(signature = (hef, *, against=None))]
fn audit(py: Python<'_>, hef: PathBuf, against: Option<PathBuf>) -> PyResult<PyAudit> {
    let request = request::audit::Audit { hef, against, ..Default::default() };
    Ok(PyAudit(work(py, || request.run())?))
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
    use hefprobe::device::synth_hef::Calibrate;
    use hefprobe::device::synth_hef::ExposeQuant;
    let Some(expose_quant) = ExposeQuant::from_name(&expose_quant) else {
        let names = ExposeQuant::ALL.map(ExposeQuant::name).join(", ");
        return Err(InputError::new_err(format!(
            "synth_hef: expose_quant=`{expose_quant}`: give one of {names}"
        )));
    };
    let calibration = match (calib_tokens, calib_text) {
        (Some(_), Some(_)) => {
            return Err(InputError::new_err("synth_hef: give calib_tokens= or calib_text=, not both"))
        }
        (Some(prompts), None) => Calibrate::Tokens(prompts),
        (None, Some(text)) => Calibrate::Text(text),
        (None, None) => Calibrate::Default,
    };
    let model =
        hefprobe::model::CheckpointRef::given(checkpoint_ref(checkpoint, revision), synth.as_deref(), seed)
            .map_err(to_py)?;
    let opts = hefprobe::device::synth_hef::SynthHefOptions {
        prefill_tokens,
        kv_cache_size,
        tbt,
        faults: hefprobe::fault::spec::parse_all(&fault.unwrap_or_default()).map_err(to_py)?,
        quant: hefprobe::device::synth_hef::Quant::parse(&quant).map_err(to_py)?,
        lm_head_shards,
        mistakes: mistakes
            .unwrap_or_default()
            .iter()
            .map(|m| hefprobe::device::synth_hef::Mistake::parse(m))
            .collect::<hefprobe::error::Result<_>>()
            .map_err(to_py)?,
        expose_quant,
        layers,
        ..Default::default()
    };
    let expose = expose.map(|globs| hefprobe::tap::TapSelection::parse(&globs)).transpose().map_err(to_py)?;
    let request = request::synth_hef::SynthHef { model, out, opts, calibration, expose };
    let written = work(py, || request.run())?;
    json_value(py, &written)
}

/// Where progress bars go: "auto" (stderr when it is a terminal), "off", or "on" (Python's
/// sys.stderr, which a notebook shows).
#[pyfunction]
fn set_progress(mode: &str) -> PyResult<()> {
    use hefprobe::progress::Target;
    let target = match mode {
        "auto" => Target::Auto,
        "off" => Target::Hidden,
        "on" => Target::Custom(std::sync::Arc::new(|| Box::new(progress::PyStderr::default()))),
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
    let code = work(py, || Ok(hefprobe::main_code(argv)))?;
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
