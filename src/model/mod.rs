//! The float32 reference: config, weights, the instrumented decoder, tokenizer, synthesis.

pub mod config;
#[cfg(feature = "crosscheck")]
pub mod crosscheck;
pub mod decoder;
pub mod hooks;
pub mod memory;
pub mod rope;
pub mod run;
pub mod synth;
pub mod tokenizer;
pub mod weights;

pub use config::{Arch, ModelConfig};
pub use decoder::Decoder;
pub use weights::Checkpoint;
