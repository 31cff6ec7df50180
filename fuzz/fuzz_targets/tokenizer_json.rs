//! Fuzz tokenizer.json loading: any bytes must give a tokenizer or a typed error naming the
//! file, never a panic. A tokenizer that loads encodes and decodes a short text, as `run
//! --text` does, and says its vocabulary size (checked against a model's when a run starts).

#![no_main]

#[path = "scratch.rs"]
mod scratch;

use hefprobe::model::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = scratch::file("tokenizer.json", data);
    let Ok(t) = Tokenizer::load(&path) else { return };
    let _ = t.vocab_size();
    if let Ok(e) = t.encode("The quick brown fox, 12 ü ", true) {
        let _ = t.decode(&e.ids);
    }
});
