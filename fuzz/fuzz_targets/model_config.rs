//! Fuzz config.json parsing: any bytes must give a model config or a typed error naming the
//! key, never a panic. A config that parses is sized (checked arithmetic: absurd dims are a
//! need larger than any budget, never a wrapped number), and its tensor list is built only
//! when its weights fit a small budget, as a load would.

#![no_main]

use hefprobe::budget::{self, Budget};
use hefprobe::model::{memory, ModelConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    budget::set(Budget::new(64 << 20, "fuzz"));
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(cfg) = ModelConfig::from_json_str(text, "config.json") else { return };
    let _ = cfg.to_hf_json();
    if memory::check_weights(&cfg, "fuzz").is_ok() {
        let _ = hefprobe::model::weights::expected_tensors(&cfg);
        let _ = hefprobe::model::rope::Rope::new(&cfg.rope, cfg.head_dim);
    }
});
