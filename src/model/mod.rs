//! The float32 reference: config, weights (safetensors folders and GGUF files), the
//! instrumented decoder, tokenizer, synthesis.

pub mod attention;
pub mod cache;
pub mod chat;
pub mod config;
#[cfg(feature = "crosscheck")]
pub mod crosscheck;
pub mod decoder;
pub mod gguf;
pub mod hooks;
pub mod hub;
pub mod kernels;
pub mod memory;
pub mod pool;
pub mod profile;
pub mod resolve;
pub mod rope;
pub mod run;
pub mod synth;
pub mod tokenizer;
pub mod weights;

pub use config::{Arch, ModelConfig};
pub use decoder::Decoder;
pub use resolve::CheckpointRef;
pub use weights::Checkpoint;
