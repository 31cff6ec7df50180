//! Fuzz safetensors loading: any bytes must give tensors or a typed error naming the file and
//! tensor, never a panic or an allocation beyond what the bytes hold. Whatever loads is checked
//! against a small llama's tensor list, as a checkpoint load does.

#![no_main]

use hefprobe::model::synth::SynthSpec;
use hefprobe::model::weights::{check_tensors, tensors_from_bytes};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn config() -> &'static hefprobe::model::ModelConfig {
    static CFG: OnceLock<hefprobe::model::ModelConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let mut s = SynthSpec::arch(hefprobe::model::Arch::Llama, 0);
        (s.hidden, s.layers, s.heads, s.kv_heads, s.vocab) = (8, 1, 2, 1, Some(8));
        s.config().expect("a tiny llama")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok((tensors, _dtypes)) = tensors_from_bytes(data, "model.safetensors") else { return };
    let _ = check_tensors(config(), tensors, "fuzz");
});
