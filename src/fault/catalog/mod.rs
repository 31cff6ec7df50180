//! The fault catalog. Each fault names the finding it models and defines precisely what it
//! computes, so it can be re-implemented on HF's attention and give the same tensors.
//!
//! [`REGISTRY`] lists one [`Entry`] per fault; everything here (parsing, the grid `explain`
//! ranks, which faults it narrows per layer, the findings) reads it. Adding a fault is one
//! [`Mechanism`] with its `ENTRY`, its hooks on a [`Run`](super::Run), and its line in [`REGISTRY`].

pub mod attention;
pub mod cache;
pub mod output;
pub mod rope;
pub mod width;

use super::quant::QuantFault;
use super::spec::FaultSpec;
use super::{Entry, Fault, Mechanism, OnDevice, Parsed};
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;

/// Every fault, in the order `hefprobe faults` lists them and `explain`'s grid ranks them.
pub const REGISTRY: &[Entry] = &[
    attention::SharedSoftmax::ENTRY,
    attention::MaskRepeat::ENTRY,
    rope::RopeFault::ENTRY,
    rope::PositionShift::ENTRY,
    cache::CacheLayout::ENTRY,
    output::NoLmHead::ENTRY,
    output::FirstSlot::ENTRY,
    output::LmHeadShards::ENTRY,
    QuantFault::ENTRY,
    width::TileSum::ENTRY,
    width::NormAcc::ENTRY,
    width::NormWidth::ENTRY,
    width::TileScale::ENTRY,
];

/// The entry named `name`.
pub fn entry(name: &str) -> Option<&'static Entry> {
    REGISTRY.iter().find(|e| e.name == name)
}

pub fn finding_of(name: &str) -> Option<u32> {
    entry(name).and_then(|e| e.finding)
}

/// What the fault `spec` names means for a device; an unknown name (refused wherever it is
/// built) as computed on the frames.
pub fn on_device(spec: &FaultSpec) -> OnDevice {
    entry(&spec.name).map_or(OnDevice::Frames, |e| e.device)
}

/// What a fault implies about a device's logits whatever the weights: evidence a recorded figure
/// gives against it without any run (`explain --pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsClaim {
    /// The output is the final-norm hidden state, not vocabulary logits (`no-lm-head`): no
    /// column's largest value can be the reference's token but by chance.
    NotVocabulary,
    /// Shard 0 keeps its own scale and every other shard takes shard 0's
    /// (`lm-head-shards:N,scale=shard0`): shard 0 is exact but for its quantization, so it is
    /// never the worse shard.
    FirstShardExact,
}

/// The claim `spec` makes about the logits, if any.
pub fn logits_claim(spec: &FaultSpec) -> Option<LogitsClaim> {
    if is::<output::NoLmHead>(spec) {
        return Some(LogitsClaim::NotVocabulary);
    }
    let shard0 = spec.get("scale", None) == Some(output::ShardScale::Shard0.name());
    (is::<output::LmHeadShards>(spec) && shard0).then_some(LogitsClaim::FirstShardExact)
}

/// Whether `spec` names the fault `M` (e.g. a `cache-layout:interleave` spec, `CacheLayout`).
pub fn is<M: Mechanism>(spec: &FaultSpec) -> bool {
    spec.name == M::ENTRY.name
}

/// Parse one spec's text into a fault, checking it applies to this architecture.
pub fn parse(text: &str, cfg: &ModelConfig) -> Result<Box<dyn Fault>> {
    build(&FaultSpec::parse(text)?, cfg)
}

/// The fault a spec names, checked against this architecture.
pub fn build(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Box<dyn Fault>> {
    match entry(&spec.name) {
        Some(e) => (e.parse)(spec.clone(), cfg),
        None => {
            let names: Vec<&str> = REGISTRY.iter().map(|e| e.name).collect();
            let hint = crate::tap::suggest(&spec.name, names.iter().copied());
            Err(Error::usage(format!(
                "unknown fault `{}`{hint}; known faults: {}",
                spec.name,
                names.join(", ")
            )))
        }
    }
}

pub fn build_all(specs: &[FaultSpec], cfg: &ModelConfig) -> Result<Vec<Box<dyn Fault>>> {
    specs.iter().map(|s| build(s, cfg)).collect()
}

/// One spec as the fault `M`, keeping its typed parameters (the device simulator reads
/// cache-layout's layout this way). A spec naming another fault is refused.
pub fn parse_as<M: Mechanism>(spec: &FaultSpec, cfg: &ModelConfig) -> Result<Parsed<M>> {
    if spec.name != M::ENTRY.name {
        return Err(spec.err(format!("expected a `{}` fault", M::ENTRY.name)));
    }
    Parsed::new(spec.clone(), cfg)
}

/// The parameter grid `explain` ranks first: every fault with its main parameters, over all
/// layers. `explain` then refines the best per-layer faults layer by layer ([`per_layer`]).
pub fn grid(cfg: &ModelConfig) -> Vec<FaultSpec> {
    REGISTRY.iter().flat_map(|e| e.grid_specs(cfg)).collect()
}

/// Faults that act per layer, narrowed to each single layer: `spec@layers=l` for every l.
/// Empty when the spec is not per layer or already names layers.
pub fn per_layer(spec: &FaultSpec, cfg: &ModelConfig) -> Vec<FaultSpec> {
    let per_layer = entry(&spec.name).is_some_and(|e| e.per_layer);
    if !per_layer || spec.layers.is_some() || cfg.num_layers < 2 {
        return Vec::new();
    }
    (0..cfg.num_layers).map(|l| spec.at_layer(l)).collect()
}

/// The first block `spec` acts in: the blocks below it compute what a clean run of the same
/// inputs computes (`explain` starts a candidate there, from the clean run's residual). A
/// per-layer fault's lowest layer, the number of blocks for a fault on the output alone, 0
/// for every other (and an unknown) fault. `tests.rs` checks it for every entry.
pub fn first_block(spec: &FaultSpec, cfg: &ModelConfig) -> usize {
    match entry(&spec.name) {
        Some(e) if e.on_output => cfg.num_layers,
        Some(e) if e.per_layer => spec.layers.as_ref().and_then(|l| l.iter().min().copied()).unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
