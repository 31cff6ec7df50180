//! Fuzz the GGUF reader: any bytes must give a checkpoint or a typed error naming the file and
//! the key or tensor, never a panic or an allocation beyond what the bytes hold. Each input is
//! taken as far as a load goes: the header, the config from the metadata, the tokenizer rebuilt
//! from `tokenizer.ggml.*` (then used once), every tensor dequantized and checked.

#![no_main]

#[path = "scratch.rs"]
mod scratch;

use hefprobe::budget::{self, Budget};
use hefprobe::model::gguf::{self, GgufFile};
use hefprobe::model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    budget::set(Budget::new(64 << 20, "fuzz"));
    let path = scratch::file("model.gguf", data);
    let Ok(file) = GgufFile::open(&path) else { return };
    let _ = gguf::config::from_metadata(&file);
    drop(file);
    if let Ok(t) = Tokenizer::from_gguf(&path) {
        let _ = t.encode("Hello, world", true).map(|e| t.decode(&e.ids));
    }
    let _ = gguf::load(&path);
});
