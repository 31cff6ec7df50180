//! Fuzz `hailo-config.json` parsing as genai reads it: any bytes must give a config (with its
//! findings) or a typed error naming the key, never a panic.

#![no_main]

use hefprobe::hef::llm_config::LlmConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = LlmConfig::parse(data, "hailo-config.json") {
        let _ = c.input_layers_names_suffixes.roles();
        let _ = format!("{c:?}");
    }
});
