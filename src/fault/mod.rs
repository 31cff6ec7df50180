//! Fault models: known mechanisms of numeric drift, each injectable into the reference so the
//! emulator can reproduce (and `explain` can rank) what a device does.
//!
//! A fault of the catalog is a [`Mechanism`]: its typed parameters, parsed once from the spec,
//! and the hooks they drive (on a [`Run`]). Its [`Entry`] (name, finding, summary, parameters,
//! grid, per-layer rule) is the one place that says everything else about it;
//! [`catalog::REGISTRY`] lists them.

pub mod catalog;
pub mod expected;
pub mod quant;
pub mod spec;

use crate::error::Result;
use crate::inputs::InputSet;
use crate::model::config::ModelConfig;
use crate::model::hooks::Hooks;
use crate::model::Decoder;
use candle_core::Tensor;
use spec::FaultSpec;

/// A fault model. `hooks` is called once per run, so stateful hooks start fresh.
pub trait Fault: Send + Sync {
    /// The spec that reproduces this fault: `NAME[:PARAMS][@layers=RANGE]`.
    fn spec(&self) -> &FaultSpec;
    /// Change how the model reads its weights before the run (weight quantization); the
    /// weights themselves are shared, never copied.
    fn transform_weights(&self, _model: &mut Decoder) -> Result<()> {
        Ok(())
    }
    /// Calibrate on these inputs (quantization); called before every run with the run's own.
    fn prepare(&self, _model: &Decoder, _inputs: &[InputSet]) -> Result<()> {
        Ok(())
    }
    fn hooks(&self) -> Box<dyn Hooks + '_>;
    /// What the fault did, for reports (e.g. each quantizer's scale, zero point, clip rate).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A fault of the catalog: its typed parameters and what they change, less `spec()`, which
/// [`Parsed`] answers from the spec it keeps, so no fault stores or returns its own spec. Its
/// hooks are the model's [`Hooks`], implemented on [`Run`] (`impl Hooks for Run<'_, TileSum>`).
pub trait Mechanism: Send + Sync + Sized + 'static {
    /// Everything the catalog says about this fault.
    const ENTRY: Entry;
    /// The typed parameters of a spec naming this fault; the registry has already refused
    /// unknown keys and layers it does not take ([`Entry::keys`], [`Entry::per_layer`]).
    fn parse(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Self>;
    fn transform_weights(&self, _model: &mut Decoder) -> Result<()> {
        Ok(())
    }
    fn prepare(&self, _model: &Decoder, _inputs: &[InputSet]) -> Result<()> {
        Ok(())
    }
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// One run of the catalog fault `M`, made fresh for each ([`Fault::hooks`]): every fault
/// implements the model's [`Hooks`] on it.
pub struct Run<'a, M> {
    pub fault: &'a M,
    /// The spec it was parsed from: which layers it applies to ([`FaultSpec::applies`]).
    pub spec: &'a FaultSpec,
    /// A tensor kept from one tap for a later one of the step (no-lm-head: the final norm, for
    /// the logits).
    pub kept: Option<Tensor>,
}

/// One registry entry: what the catalog says about one fault.
pub struct Entry {
    /// The NAME of `NAME[:PARAMS][@layers=RANGE]`.
    pub name: &'static str,
    /// The finding it models, as `hefprobe faults` and `explain` number them.
    pub finding: Option<u32>,
    /// What it computes, in one line (`hefprobe faults`); the type's doc comment is precise.
    pub summary: &'static str,
    /// The parameter keys it takes, the positional ones first, in the order errors list them.
    pub keys: &'static [&'static str],
    /// How many of `keys` may be given without their name.
    pub positional: usize,
    /// It acts per layer: it takes `@layers=`, and `explain` narrows it to each layer in turn.
    pub per_layer: bool,
    /// It acts on the final norm and the logits alone, after the last block: every block
    /// computes what a clean run computes (`explain` starts its emulation there).
    pub on_output: bool,
    /// What it means for a (simulated) device running a HEF made with it.
    pub device: OnDevice,
    /// Where the tool is shown to locate it and rank it first.
    pub proof: Proof,
    /// What `explain` ranks by default on this model: the PARAMS of each spec ("" for the bare
    /// name). Empty when the fault cannot apply to the model.
    pub grid: fn(&ModelConfig) -> Vec<String>,
    /// The spec (its name already matched) parsed into the fault: [`parse_boxed`].
    pub parse: fn(FaultSpec, &ModelConfig) -> Result<Box<dyn Fault>>,
}

/// What a fault means for a device: the simulated device (`device::sim`), `synth-hef --fault`
/// and the device-backed candidates of `explain` read it from the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDevice {
    /// The device computes it on the frames it runs, through the same hooks as the emulator.
    Frames,
    /// It is realized in the device's KV cache ring (how prefill writes it), so the cache
    /// buffers show it as a device's would.
    Ring,
    /// It changes the graph's output (no lm_head: hidden-wide logits), which a HEF compiled
    /// without it cannot hold: only a HEF made with it computes it.
    Graph,
    /// It acts on positions, which a device never receives (genai feeds it RoPE tables): it
    /// belongs to the emulator alone.
    Never,
}

/// Where a fault is proved found: located at the tap it acts on and ranked first by `explain`.
#[derive(Debug, Clone, Copy)]
pub enum Proof {
    /// Its cases of the fault-localization matrix (`explain::matrix`, `hefprobe faults
    /// --matrix`): a spec and the first drift it causes as PHASE/TAP (a trailing `*` matches
    /// any tap of that prefix).
    Matrix(&'static [(&'static str, &'static str)]),
    /// Its cases of the matrix, run on the matrix's wide model (hidden 128): a width fault is a
    /// bit-exact no-op on rows narrower than its tile, which the narrow model's 64 are.
    WideMatrix(&'static [(&'static str, &'static str)]),
    /// A test of its own (the matrix model is too narrow for it), by its path in the repository.
    Test(&'static str),
}

impl Entry {
    /// This fault's grid as full specs.
    pub fn grid_specs(&self, cfg: &ModelConfig) -> Vec<FaultSpec> {
        (self.grid)(cfg)
            .into_iter()
            .map(|p| if p.is_empty() { self.name.to_string() } else { format!("{}:{p}", self.name) })
            .map(|text| FaultSpec::parse(&text).expect("the registry's grid specs parse"))
            .collect()
    }

    /// The grid of a fault whose bare name is its only setting.
    fn bare(_: &ModelConfig) -> Vec<String> {
        vec![String::new()]
    }
}

/// A catalog fault as parsed: the spec it came from and its typed mechanism.
pub struct Parsed<M> {
    pub spec: FaultSpec,
    pub mechanism: M,
}

impl<M: Mechanism> Parsed<M> {
    /// Check `spec` against `M`'s entry (keys, then layers), then parse its typed parameters.
    pub fn new(spec: FaultSpec, cfg: &ModelConfig) -> Result<Self> {
        spec.allow(M::ENTRY.keys, M::ENTRY.positional)?;
        spec.check_layers(cfg.num_layers, M::ENTRY.per_layer)?;
        let mechanism = M::parse(&spec, cfg)?;
        Ok(Parsed { spec, mechanism })
    }
}

/// [`Entry::parse`] of every mechanism.
pub fn parse_boxed<M: Mechanism>(spec: FaultSpec, cfg: &ModelConfig) -> Result<Box<dyn Fault>>
where
    for<'a> Run<'a, M>: Hooks,
{
    Ok(Box::new(Parsed::<M>::new(spec, cfg)?))
}

impl<M: Mechanism> Fault for Parsed<M>
where
    for<'a> Run<'a, M>: Hooks,
{
    fn spec(&self) -> &FaultSpec {
        &self.spec
    }
    fn transform_weights(&self, model: &mut Decoder) -> Result<()> {
        self.mechanism.transform_weights(model)
    }
    fn prepare(&self, model: &Decoder, inputs: &[InputSet]) -> Result<()> {
        self.mechanism.prepare(model, inputs)
    }
    fn hooks(&self) -> Box<dyn Hooks + '_> {
        Box::new(Run { fault: &self.mechanism, spec: &self.spec, kept: None })
    }
    fn notes(&self) -> Vec<String> {
        self.mechanism.notes()
    }
}
