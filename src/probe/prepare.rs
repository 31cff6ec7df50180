//! Stage 1 of a run: load the checkpoint (the command line's replaces the probe's), build the
//! InputSet, parse taps and thresholds, pick the backends and plan where the captures live,
//! everything checked before anything runs.

use super::schema::Probe;
use super::spill::{spill_plan, CaptureOptions, SpillPlan};
use crate::backend::BackendSpec;
use crate::compare::thresholds::Thresholds;
use crate::error::{Error, Result};
use crate::explain::ExplainSpec;
use crate::inputs::InputSet;
use crate::model::chat::ChatTemplate;
use crate::model::memory::{self, TapsHeld};
use crate::model::{Checkpoint, CheckpointRef, Decoder};
use crate::output::Outputs;
use crate::report::{CheckpointInfo, ProbeInfo};
use crate::tap::TapSelection;
use std::sync::Arc;

/// What the command line changes in a probe, and where its captures go.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub probe: ProbeOverrides,
    pub captures: CaptureOptions,
    /// The command line that reproduces the run, for the Markdown report.
    pub command: String,
}

/// The probe's settings the command line replaces ([`prepare`]).
#[derive(Debug, Clone, Default)]
pub struct ProbeOverrides {
    /// Replace the probe's backends.
    pub backends: Vec<BackendSpec>,
    /// Replace the probe's `[checkpoint]` (`--checkpoint`).
    pub checkpoint: Option<CheckpointRef>,
    /// Extra bounds (`--threshold`).
    pub thresholds: Vec<crate::compare::thresholds::Bound>,
    pub explain: ExplainChoice,
}

/// Whether the run ranks faults: as the probe says, never, or with these settings.
#[derive(Debug, Clone, Default)]
pub enum ExplainChoice {
    #[default]
    AsProbe,
    Off,
    With(ExplainSpec),
}

/// config.json's unknown keys on stderr, for commands whose output has no header (sweep).
pub fn note_unknown_keys(ckpt: &Checkpoint) {
    if let Some(line) = crate::report::format::unknown_keys_line(&ckpt.config.unknown_keys) {
        crate::errln!("{line}");
    }
}

/// Say which probe (and table) a budget or usage refusal came from.
fn in_probe(e: Error, what: &str) -> Error {
    match e {
        Error::Budget { what: w, needs, budget, budget_from, fix } => {
            Error::Budget { what: format!("{what}: {w}"), needs, budget, budget_from, fix }
        }
        Error::Usage(msg) => Error::Usage(format!("{what}: {msg}")),
        other => other,
    }
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

/// Taps the reference must record beyond the probe's selection: what the local view and
/// the attention masks need.
pub(super) fn reference_selection(probe_taps: &[String]) -> Result<TapSelection> {
    let mut globs = probe_taps.to_vec();
    globs.extend(["embed", "layers.*.out", "layers.*.attn.scores", "logits"].map(String::from));
    TapSelection::parse(&globs)
}

/// Stage 1's output: everything a run needs, checked before anything runs.
pub struct Prepared {
    pub ckpt: Checkpoint,
    pub model: Arc<Decoder>,
    pub inputs: InputSet,
    pub selection: TapSelection,
    pub thresholds: Thresholds,
    pub specs: Vec<BackendSpec>,
    /// The command line replaced the probe's backends (explain then observes the first one,
    /// unless it names one of them).
    pub replaced_backends: bool,
    /// The probe's `[compare]` settings.
    pub local: bool,
    pub lens: bool,
    /// The explain settings of this run (the command line's, else the probe's), if it explains.
    pub explain: Option<ExplainSpec>,
    pub probe: ProbeInfo,
    /// Set when the captures do not fit the budget in memory and go to disk instead.
    pub spill: Option<SpillPlan>,
    /// The chat template the prompt was rendered in for a served model, when it was.
    pub chat: Option<ChatTemplate>,
}

/// The chat template a served model's server applies, which the reference's prompt is
/// rendered in too: the first serve backend's `template`, else the checkpoint's own. None
/// without a serve backend; refused for a server that templates by itself (hailo-ollama) when
/// there is none, since the reference would read another prompt than the model.
fn served_template(
    specs: &[BackendSpec],
    ckpt: &Checkpoint,
    inputs: &crate::probe::schema::InputsSpec,
) -> Result<Option<ChatTemplate>> {
    use crate::backend::{serve::Api, BackendKind};
    let served: Vec<&BackendSpec> = specs.iter().filter(|s| s.kind == BackendKind::Serve).collect();
    let Some(first) = served.first() else { return Ok(None) };
    if inputs.decode_tokens.is_some() {
        return Err(Error::usage(format!(
            "backend `{}`: a served model generates greedily and is judged against the reference's greedy \
             continuation: give `decode = N` (greedy steps), not `decode_tokens`",
            first.label()
        )));
    }
    if let Some(path) = served.iter().find_map(|s| s.template.as_ref()) {
        return ChatTemplate::load(path).map(Some);
    }
    let own = ChatTemplate::of_checkpoint(&ckpt.source)?;
    if own.is_none() && served.iter().any(|s| s.api.unwrap_or(Api::Ollama) == Api::Ollama) {
        return Err(Error::usage(format!(
            "backend `{}`: hailo-ollama applies its model's chat template to every prompt, and the checkpoint \
             ({}) has none: give the template the server applies (template=PATH: a .jinja, tokenizer_config.json, \
             hailo-config.json or .hef)",
            first.label(),
            ckpt.source
        )));
    }
    Ok(own)
}

/// Stage 1: load the checkpoint (the command line's replaces the probe's), build the InputSet,
/// parse taps and thresholds, pick the backends (the command line's replace the probe's), and
/// plan where the captures live.
pub fn prepare(probe: &Probe, opts: &RunOptions) -> Result<Prepared> {
    let what = probe.path.display().to_string();
    let over = &opts.probe;
    // Thresholds first: a bad `--threshold` is refused before a model is built.
    let mut thresholds: Thresholds = probe.thresholds.build()?;
    for b in &over.thresholds {
        thresholds.add(b);
    }
    let specs: Vec<BackendSpec> =
        if over.backends.is_empty() { probe.backends.clone() } else { over.backends.clone() };
    if specs.is_empty() {
        return Err(Error::usage(format!(
            "{what}: no backend to compare with the reference; add a [[backend]] or pass --backend"
        )));
    }
    let ckpt = match &over.checkpoint {
        Some(c) => c.load()?,
        None => {
            probe.checkpoint.to_ref()?.load().map_err(|e| in_probe(e, &format!("{what} [checkpoint]")))?
        }
    };
    let layers = ckpt.config.num_layers;
    let chat = served_template(&specs, &ckpt, &probe.inputs)?;
    let inputs = probe.inputs.input_set_in(&ckpt, chat.as_ref())?;
    let selection = TapSelection::parse(&probe.taps)?;
    selection.check_against(layers)?;
    thresholds.check_globs(&crate::tap::tap_names(layers), layers).map_err(|e| in_probe(e, &what))?;
    let explain = match &over.explain {
        ExplainChoice::AsProbe => probe.explain.clone(),
        ExplainChoice::Off => None,
        ExplainChoice::With(e) => Some(e.clone()),
    };
    let spill = plan_memory(&ckpt, &inputs, (probe, &specs), explain.is_some(), &opts.captures)
        .map_err(|e| in_probe(e, &format!("{what} [inputs]")))?;
    let model = Arc::new(Decoder::new(&ckpt)?);
    Ok(Prepared {
        ckpt,
        model,
        inputs,
        selection,
        thresholds,
        specs,
        replaced_backends: !over.backends.is_empty(),
        local: probe.compare.local,
        lens: probe.compare.lens,
        explain,
        probe: ProbeInfo {
            name: probe.name.clone(),
            question: probe.question.clone(),
            finding: probe.finding,
            file: Some(probe.path.display().to_string()),
            command: opts.command.clone(),
        },
        spill,
        chat,
    })
}

/// Whether the captures fit the memory budget held in memory (None), or are spilled to disk
/// (the plan); refused when neither fits. The reference and every backend keep their
/// captures (a local view is one more each); explain holds one emulation at a time, two while
/// it checks a tie. The weights count once, in their stored dtype: emulators share them.
fn plan_memory(
    ckpt: &Checkpoint,
    inputs: &InputSet,
    (probe, specs): (&Probe, &[BackendSpec]),
    explain: bool,
    opts: &CaptureOptions,
) -> Result<Option<SpillPlan>> {
    let captures = 1 + 2 * specs.len() as u64 + if explain { 2 } else { 0 };
    let ref_taps = reference_selection(&probe.taps)?;
    let held = memory::estimate(&ckpt.config, inputs, &ref_taps, TapsHeld::InMemory { captures })
        .with_weights(memory::held(ckpt));
    let in_memory = held.total();
    let budget = crate::budget::current();
    if budget.allows(in_memory) || !opts.spill {
        memory::check(&held, inputs)?;
        return Ok(None);
    }
    let run = crate::probe::spill::Planned { ckpt, inputs, ref_taps: &ref_taps, specs };
    spill_plan(&run, (probe.compare.local, explain), (in_memory, budget), opts).map(Some)
}

/// What a probe run reads: the probe, its checkpoint (the given `checkpoint` in its place) and
/// tokenizer, every backend's HEF, dump, name map and the HEF a dump came from (the probe's and
/// the given ones).
pub fn register_inputs(
    probe: &Probe,
    checkpoint: Option<&CheckpointRef>,
    backends: &[BackendSpec],
    outs: &mut Outputs,
) -> Result<()> {
    outs.input("the probe", &probe.path);
    // A checkpoint that does not resolve is the run's to report, naming it.
    let _ = match checkpoint {
        Some(c) => c.register("the checkpoint", outs),
        None => probe.checkpoint.to_ref()?.register("the checkpoint", outs),
    };
    if let Some(t) = &probe.inputs.tokenizer {
        outs.input("the tokenizer", t);
    }
    for ck in probe.sweep.iter().flat_map(|s| &s.checkpoints) {
        outs.checkpoint("a [sweep] checkpoint", ck);
    }
    for b in probe.backends.iter().chain(backends) {
        for (what, p) in [("input", &b.path), ("name map", &b.map), ("HEF", &b.hef)] {
            if let Some(p) = p {
                outs.input(&format!("backend `{}`'s {what}", b.label()), p);
            }
        }
    }
    Ok(())
}
