//! Backends: everything that turns an InputSet into a Capture.

pub mod decoder;
pub mod dump;
mod generation;
pub mod hef;
mod map;
pub mod overrides;
mod runner;
pub mod serve;
pub mod spec;

pub use runner::{collect, run_to, Backend, Capabilities, Emulation, Ran, Run};
pub use spec::{BackendKind, BackendSpec};

use crate::error::Result;
use crate::model::{Checkpoint, Decoder};
use decoder::DecoderBackend;
use std::sync::Arc;

/// Build a backend from its spec. `model` is the reference decoder of `ckpt`.
pub fn make_backend(spec: &BackendSpec, ckpt: &Checkpoint, model: &Arc<Decoder>) -> Result<Box<dyn Backend>> {
    let label = spec.label();
    Ok(match spec.kind {
        BackendKind::Reference => Box::new(DecoderBackend::reference(model.clone())),
        BackendKind::Emulator => {
            Box::new(DecoderBackend::emulator(&label, ckpt, &spec.faults, spec.quant.as_ref())?)
        }
        BackendKind::Dump => {
            let mut d = dump::DumpBackend::open(&label, spec.path()?, spec.map.as_deref())?;
            d.shards = spec.shard_widths()?;
            if let Some(h) = &spec.hef {
                let mut b = hef::open(&label, h, (None, spec.group.as_deref()), ckpt)?;
                b.declared = spec.quant.clone();
                d.quantized_as = Some(Box::new(b));
            }
            Box::new(d)
        }
        BackendKind::Hef => {
            let mut b = hef::open(&label, spec.path()?, (spec.device, spec.group.as_deref()), ckpt)?;
            b.declared = spec.quant.clone();
            if let Some(m) = &spec.map {
                b.set_output_map(m)?;
                b.check_made_from(spec.path()?, ckpt)?; // the mapped taps, inside the model
            }
            b.declare_first_layer(spec.first_layer, ckpt.config.num_layers)?;
            Box::new(b)
        }
        BackendKind::Serve => {
            let what = format!("backend `{label}`");
            spec.check_serve(&what)?;
            let server = serve::open(spec, &what)?;
            let tokenizer = Arc::new(crate::model::tokenizer::Tokenizer::for_checkpoint(ckpt)?);
            Box::new(serve::ServeBackend::new(&label, server, tokenizer))
        }
    })
}
