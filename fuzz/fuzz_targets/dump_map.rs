//! Fuzz the dump name map: any map text applied to a small dump must give a mapped capture or
//! a typed error naming the map entry, never a panic (squeeze, permute and reshape take their
//! numbers from the file).

#![no_main]

use hefprobe::backend::dump::DumpBackend;
use hefprobe::capture::Capture;
use libfuzzer_sys::fuzz_target;
use ndarray::{ArrayD, IxDyn};

fn dump() -> Capture {
    let mut c = Capture::default();
    let arr = |dims: &[usize]| {
        let n: usize = dims.iter().product();
        ArrayD::from_shape_vec(IxDyn(dims), (0..n).map(|i| i as f32).collect()).expect("shape")
    };
    c.insert("model/softmax1".into(), arr(&[2, 3, 4]));
    c.insert("model/output".into(), arr(&[1, 1, 2, 5]));
    c.insert("model/q_rot".into(), arr(&[1, 3, 2, 4]));
    c.insert("prefill/logits".into(), arr(&[2, 5]));
    c.insert("x".into(), arr(&[6]));
    c.insert("empty".into(), arr(&[0, 3]));
    c
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(mapped) = DumpBackend::map_capture(dump(), text, "map.toml", "dump.npz") {
        let _ = mapped.keys();
        let _ = mapped.phases();
    }
});
