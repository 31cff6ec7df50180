//! GGUF checkpoints (llama.cpp's one-file format) for the llama, qwen2 and qwen3 architectures,
//! loaded the way transformers 5.23 loads them with `from_pretrained(dir, gguf_file=...)`:
//! config from the metadata ([`config`]), every tensor dequantized to float32 and renamed to
//! its HF name, llama's Q/K rows un-permuted ([`tensors`]), and the tokenizer rebuilt from
//! `tokenizer.ggml.*` ([`tokenizer`]). The result is an ordinary [`Checkpoint`].
//!
//! transformers 5.23 routes these three architectures through its legacy GGUF reader
//! (`modeling_gguf_pytorch_utils.load_gguf_checkpoint`: they are not in
//! `integrations/gguf/gguf_conversion_mapping.GGUF_ARCHS`), which dequantizes every tensor with
//! gguf-py's `dequantize` into a plain dense model; hefprobe dequantizes with candle's reader.
//!
//! Every size read from the file is untrusted (the contract of `src/hef/container.rs`): candle's
//! reader bounds strings, arrays and header counts by the file length, and before any tensor is
//! read its byte size is computed here with overflow-checked arithmetic and bounded by the file
//! length. A violation is an `Error::input` naming the file and the tensor or key.

pub mod config;
mod file;
mod tensors;
pub mod tokenizer;

pub use file::{GgufFile, MAGIC};

use crate::error::Result;
use crate::model::weights::{check_tensors, Checkpoint, CheckpointSource};
use std::path::Path;

/// Load a GGUF file as a float32 checkpoint.
pub fn load(path: &Path) -> Result<Checkpoint> {
    let mut file = GgufFile::open(path)?;
    let config = config::from_metadata(&file)?;
    // Every tensor is dequantized to f32: the weights take that, whatever the file's size.
    crate::model::memory::check_weights(&config, &path.display().to_string())?;
    let (raw, quant, stored) = tensors::read_all(&mut file, &config)?;
    let source = CheckpointSource::Gguf { path: path.to_path_buf(), quant };
    let tensors = check_tensors(&config, raw, &source.to_string())?;
    Ok(Checkpoint { config, tensors, hash: file.hash()?, source, stored_dtype: stored })
}

#[cfg(test)]
mod tests;
