//! Running a probe: build the InputSet, run the reference and every backend into captures,
//! then compare, locate, explain — and keep whatever finished if something fails.

use crate::backend::decoder::DecoderBackend;
use crate::backend::dump::DumpBackend;
use crate::backend::overrides::Overrides;
use crate::backend::{Backend, BackendRun};
use crate::capture::Capture;
use crate::compare::thresholds::Thresholds;
use crate::compare::{compare_selected, lens, locate, RowStatus, View};
use crate::error::{Error, Result};
use crate::model::synth::{SynthOverrides, SynthSpec};
use crate::model::tokenizer::{Tokenizer, SYNTH_TOKENIZER_VOCAB};
use crate::model::{Arch, Checkpoint, Decoder};
use crate::probe::inputs::{DecodeSpec, InputSet};
use crate::probe::schema::{BackendSpec, CheckpointSpec, InputsSpec, Probe};
use crate::report::{BackendInfo, CheckpointInfo, InputInfo, ProbeInfo, Report};
use crate::tap::TapSelection;
use std::path::PathBuf;
use std::sync::Arc;

/// Command-line adjustments to a probe.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Replace the probe's backends.
    pub backends: Vec<BackendSpec>,
    /// Extra bounds, `METRIC=V` or `GLOB:METRIC=V`.
    pub thresholds: Vec<String>,
    pub save_inputs: Option<PathBuf>,
    /// Write every capture (`NAME.npz`) into this folder.
    pub save_captures: Option<PathBuf>,
    /// The command line that reproduces the run, for the Markdown report.
    pub command: String,
    /// Skip the explain step even if the probe asks for it.
    pub no_explain: bool,
    /// Run explain with these settings whatever the probe says.
    pub explain: Option<crate::probe::schema::ExplainSpec>,
}

pub fn synth_spec(c: &CheckpointSpec) -> Result<SynthSpec> {
    let preset = c.synth.as_deref().expect("synth checkpoint");
    let mut s = SynthSpec::preset(preset, c.seed)?;
    let arch = match &c.arch {
        None => None,
        Some(a) => Some(Arch::parse(a).ok_or_else(|| {
            Error::usage(format!("[checkpoint] arch `{a}`: expected llama, mistral, qwen2 or qwen3"))
        })?),
    };
    s.apply(&SynthOverrides {
        arch,
        hidden: c.hidden,
        layers: c.layers,
        heads: c.heads,
        kv_heads: c.kv_heads,
        head_dim: c.head_dim,
        intermediate: c.intermediate,
        vocab: c.vocab,
        sliding_window: c.sliding_window,
        weight_scale: c.weight_scale,
        massive_channels: c.massive_channels,
        massive_scale: c.massive_scale,
    });
    Ok(s)
}

pub fn load_checkpoint(c: &CheckpointSpec) -> Result<Checkpoint> {
    match &c.path {
        Some(p) => Checkpoint::load(p),
        None => synth_spec(c)?.build(),
    }
}

/// The InputSet of a probe's `[inputs]` (the command line's prompt flags build the same spec).
pub fn build_inputs(spec: &InputsSpec, ckpt: &Checkpoint) -> Result<InputSet> {
    let (prompt, bos_added) = match (&spec.tokens, &spec.text) {
        (Some(t), _) => (t.clone(), None),
        (None, Some(text)) => {
            let tok = match (&spec.tokenizer, &ckpt.source) {
                (Some(p), _) => Tokenizer::load(p)?,
                (None, crate::model::weights::CheckpointSource::Dir(d)) => Tokenizer::load(&d.join("tokenizer.json"))?,
                (None, _) if ckpt.config.vocab_size >= SYNTH_TOKENIZER_VOCAB => Tokenizer::synth(),
                (None, _) => {
                    return Err(Error::usage(format!(
                        "text needs a tokenizer: this synthesized model's vocabulary ({}) is too small for the \
                         byte-level one; give token ids (--tokens 1,2,3, or tokens = [...] in a probe)",
                        ckpt.config.vocab_size
                    )))
                }
            };
            let enc = tok.encode(text, spec.add_special_tokens)?;
            (enc.ids, Some(enc.bos_added))
        }
        (None, None) => {
            return Err(Error::usage(
                "no prompt: give token ids (--tokens 1,2,3, or tokens = [...] in a probe) or text (--text / text = \"...\")",
            ))
        }
    };
    let decode = match (&spec.decode_tokens, spec.decode) {
        (Some(t), _) => DecodeSpec::Forced(t.clone()),
        (None, Some(n)) => DecodeSpec::Greedy(n),
        (None, None) => DecodeSpec::Forced(Vec::new()),
    };
    let inputs =
        InputSet { prompt, chunk: spec.chunk, decode, start_position: spec.start_position, bos_added };
    inputs.validate(ckpt.config.vocab_size, ckpt.config.max_position_embeddings)?;
    Ok(inputs)
}

pub fn checkpoint_info(ckpt: &Checkpoint) -> CheckpointInfo {
    let c = &ckpt.config;
    CheckpointInfo {
        source: ckpt.source.to_string(),
        hash: ckpt.hash.clone(),
        arch: c.arch.name().into(),
        layers: c.num_layers,
        hidden: c.hidden_size,
        heads: c.num_heads,
        kv_heads: c.num_kv_heads,
        head_dim: c.head_dim,
        vocab: c.vocab_size,
        stored_dtype: ckpt.stored_dtype.clone(),
        defaults_applied: c.defaults_applied.clone(),
    }
}

/// Build a backend from its spec.
pub fn make_backend(spec: &BackendSpec, ckpt: &Checkpoint, model: &Arc<Decoder>) -> Result<Box<dyn Backend>> {
    let label = spec.label();
    match spec.kind.as_str() {
        "reference" => Ok(Box::new(DecoderBackend::reference(model.clone()))),
        "emulator" => {
            let faults = crate::fault::catalog::parse_all(&spec.faults, &ckpt.config)?;
            let mut b = DecoderBackend::emulator(&label, ckpt, faults)?;
            if let Some(q) = &spec.quant {
                b = b.with_quant(q, ckpt)?;
            }
            Ok(Box::new(b))
        }
        "dump" => {
            let path = spec
                .path
                .as_ref()
                .ok_or_else(|| Error::usage(format!("backend `{label}`: a dump needs `path`")))?;
            Ok(Box::new(DumpBackend::open(&label, path, spec.map.as_deref())?))
        }
        "hef" => crate::device::backend::open(&label, spec, ckpt),
        other => Err(Error::usage(format!("backend kind `{other}` is not known"))),
    }
}

/// Taps the reference must record beyond the probe's selection: what the local view and
/// the attention masks need.
fn reference_selection(probe_taps: &[String]) -> Result<TapSelection> {
    let mut globs = probe_taps.to_vec();
    globs.extend(["embed", "layers.*.out", "layers.*.attn.scores", "logits"].map(String::from));
    TapSelection::parse(&globs)
}

fn status_of(run: &BackendRun) -> String {
    match &run.error {
        None => "ok".into(),
        Some(e) => {
            let done = run
                .record
                .phases
                .last()
                .map(|(p, _, _)| format!("after {p}"))
                .unwrap_or_else(|| "before the first phase".into());
            format!("stopped {done}: {e}")
        }
    }
}

pub struct ProbeRun {
    pub report: Report,
    pub captures: Vec<(String, Capture)>,
    pub inputs: InputSet,
    /// The first error that stopped a backend (the report is still complete up to it).
    pub error: Option<Error>,
}

pub fn run_probe(probe: &Probe, opts: &RunOptions) -> Result<ProbeRun> {
    let ckpt = load_checkpoint(&probe.checkpoint)?;
    let model = Arc::new(Decoder::new(&ckpt)?);
    let mut inputs = build_inputs(&probe.inputs, &ckpt)?;
    let selection = TapSelection::parse(&probe.taps)?;
    selection.check_against(ckpt.config.num_layers)?;
    let mut thresholds: Thresholds = probe.thresholds.build()?;
    for t in &opts.thresholds {
        thresholds.add_cli(t)?;
    }
    let specs: Vec<BackendSpec> =
        if opts.backends.is_empty() { probe.backends.clone() } else { opts.backends.clone() };
    if specs.is_empty() {
        return Err(Error::usage(format!(
            "{}: no backend to compare with the reference; add a [[backend]] or pass --backend",
            probe.path.display()
        )));
    }

    let mut report = Report::new(ProbeInfo {
        name: probe.name.clone(),
        question: probe.question.clone(),
        finding: probe.finding,
        file: Some(probe.path.display().to_string()),
        command: opts.command.clone(),
    });
    report.checkpoint = Some(checkpoint_info(&ckpt));

    let progress = indicatif::ProgressBar::new(specs.len() as u64 + 1);
    progress.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{pos}/{len}]").expect("template"),
    );
    progress.set_message("reference");
    let mut reference = DecoderBackend::reference(model.clone());
    let ref_run = reference.run(&inputs, &reference_selection(&probe.taps)?);
    if let Some(e) = ref_run.error {
        progress.finish_and_clear();
        return Err(e);
    }
    // Greedy decoding is resolved once, by the reference; every backend is teacher-forced.
    if let DecodeSpec::Greedy(_) = inputs.decode {
        inputs.decode = DecodeSpec::Forced(ref_run.record.decode_tokens.clone());
    }
    report.inputs = Some(InputInfo {
        prompt_tokens: inputs.prompt.len(),
        bos: crate::cli::bos_note(inputs.bos_added).to_string(),
        chunk: inputs.chunk,
        phases: ref_run.record.phases.iter().map(|(p, _, _)| *p).collect(),
        decode_tokens: ref_run.record.decode_tokens.clone(),
    });
    if let Some(p) = &opts.save_inputs {
        inputs.to_npz(p)?;
    }
    let ref_capture = ref_run.capture;
    let mut captures = vec![("reference".to_string(), ref_capture.clone())];
    let mut first_error = None;

    for spec in &specs {
        let label = spec.label();
        progress.inc(1);
        progress.set_message(label.clone());
        let mut backend = match make_backend(spec, &ckpt, &model) {
            Ok(b) => b,
            Err(e) => {
                progress.finish_and_clear();
                return Err(e);
            }
        };
        if let Err(why) = backend.check() {
            progress.finish_and_clear();
            return Err(Error::usage(format!("backend `{label}` cannot run here: {why}")));
        }
        let run = backend.run(&inputs, &selection);
        report.backends.push(BackendInfo {
            name: label.clone(),
            kind: spec.kind.clone(),
            status: status_of(&run),
        });
        let cumulative = compare_selected(
            &ref_capture,
            &run.capture,
            ("reference", &label),
            View::Cumulative,
            &thresholds,
            Some(&selection),
        );
        if spec.kind == "dump" {
            if let Some(bad) = cumulative.rows.iter().find(|r| r.status == RowStatus::ShapeMismatch) {
                progress.finish_and_clear();
                return Err(Error::input(
                    format!("backend `{label}` tap {}", bad.key()),
                    format!(
                        "shape {:?} cannot be aligned with the reference's {:?}; fix the dump or add a layout \
                         transform (squeeze, permute, reshape) for it in the name map",
                        bad.cand_shape, bad.ref_shape
                    ),
                ));
            }
        }
        if probe.compare.lens && backend.capabilities().all_taps {
            report.lens.push((label.clone(), lens::logit_lens(&model, &ref_capture, &run.capture)?));
        }
        let failed_any = !cumulative.passed();
        report.add_comparison(cumulative);
        if probe.compare.local && backend.capabilities().overrides && run.error.is_none() {
            let local_taps = TapSelection::parse(
                &[probe.taps.clone(), Overrides::required_taps(ckpt.config.num_layers)].concat(),
            )?;
            if let Some(local) = backend.run_local(&inputs, &local_taps, &ref_capture) {
                let pair = compare_selected(
                    &ref_capture,
                    &local.capture,
                    ("reference", &label),
                    View::Local,
                    &thresholds,
                    Some(&local_taps),
                );
                if failed_any {
                    report.blame.push((label.clone(), locate::blamed_layers(&pair)));
                }
                report.add_comparison(pair);
            }
        }
        if let Some(e) = run.error {
            report.incomplete.push(format!("backend `{label}`: {e}"));
            first_error.get_or_insert(e);
        }
        captures.push((label, run.capture));
    }
    progress.finish_and_clear();

    let explain_spec = opts.explain.as_ref().or(probe.explain.as_ref()).filter(|_| !opts.no_explain);
    if let Some(explain) = explain_spec {
        // The probe names its own backend; backends replaced on the command line are observed
        // instead (the first one).
        let observed = match &explain.observed {
            Some(o) if opts.backends.is_empty() || specs.iter().any(|b| b.label() == *o) => o.clone(),
            _ => specs[0].label(),
        };
        let observed_capture =
            captures.iter().find(|(n, _)| *n == observed).map(|(_, c)| c.clone()).ok_or_else(|| {
                Error::usage(format!("[explain] observed `{observed}` is not a backend of this probe"))
            })?;
        report.explain = Some(crate::fault::explain::explain(
            &ckpt,
            &model,
            &inputs,
            &ref_capture,
            &observed,
            &observed_capture,
            explain,
        )?);
    }
    if let Some(dir) = &opts.save_captures {
        for (name, cap) in &captures {
            let safe: String = name
                .chars()
                .map(|c| if c.is_alphanumeric() || c == '-' || c == '.' { c } else { '_' })
                .collect();
            cap.write_npz(&dir.join(format!("{safe}.npz")))?;
        }
    }
    Ok(ProbeRun { report, captures, inputs, error: first_error })
}
