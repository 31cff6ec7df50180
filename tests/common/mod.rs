//! Helpers several test files share (each test binary compiles this module; a binary that
//! uses only some of them leaves the rest unused, hence the allow).
#![allow(dead_code)]

use assert_cmd::Command;
use hefprobe::backend::hef::HefBackend;
use hefprobe::device::driver::LlmDriver;
use hefprobe::device::sim::SimDevice;
use hefprobe::device::synth_hef::sim_spec;
use hefprobe::hef::Hef;
use std::path::{Path, PathBuf};

/// The hefprobe binary of this build.
pub fn hefprobe() -> Command {
    Command::cargo_bin("hefprobe").unwrap()
}

/// `hefprobe synth` of a tiny llama (hidden 64, 2 layers, 4 heads, 2 KV heads) with `vocab`
/// tokens, into `dir/name`.
pub fn small_checkpoint(dir: &Path, name: &str, vocab: usize) -> PathBuf {
    small_checkpoint_of(dir, name, vocab, 2)
}

/// [`small_checkpoint`] with `layers` blocks.
pub fn small_checkpoint_of(dir: &Path, name: &str, vocab: usize, layers: usize) -> PathBuf {
    let out = dir.join(name);
    hefprobe()
        .args([
            "synth",
            "--arch",
            "llama",
            "--hidden",
            "64",
            "--layers",
            &layers.to_string(),
            "--heads",
            "4",
            "--kv-heads",
            "2",
        ])
        .args(["--vocab", &vocab.to_string(), "-o"])
        .arg(&out)
        .assert()
        .code(0);
    out
}

/// The HEF on a simulated Hailo device (its own profile from the HEF), behind the driver.
pub fn sim_backend(h: &Hef) -> HefBackend {
    let spec = sim_spec(h, "sim.hef").unwrap().unwrap();
    let mut dev: Box<dyn hefprobe::device::Device> =
        Box::new(SimDevice::from_hef(h.clone(), spec, "sim.hef".into()).unwrap());
    let driver = LlmDriver::open(dev.as_mut(), h, "sim.hef").unwrap();
    HefBackend::from_parts("device", dev, driver, h.clone())
}

/// `n` prompt tokens below 300 (the tiny checkpoints' vocabulary).
pub fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 37 + 5) % 300) as u32).collect()
}

/// Drive the device through `inputs`, keeping every tap it returns.
pub fn drive(
    dev: &mut HefBackend,
    inputs: &hefprobe::inputs::InputSet,
    record: &mut hefprobe::model::run::RunRecord,
) -> hefprobe::capture::Capture {
    let mut sink = hefprobe::capture::MemorySink::new(hefprobe::tap::TapSelection::all());
    dev.drive(inputs, &hefprobe::tap::TapSelection::all(), &mut sink, record).unwrap();
    sink.capture
}

/// Every array of an `.npz` as a capture in memory (integer, bool and f64 arrays as f32).
pub fn read_npz(path: &Path) -> hefprobe::Result<hefprobe::capture::Capture> {
    use hefprobe::capture::{Capture, CaptureFile, Store};
    let file = CaptureFile::open(path)?;
    let mut cap = Capture::default();
    for key in file.keys() {
        if let Some(a) = file.get(&key)? {
            cap.insert(key, a.into_owned());
        }
    }
    Ok(cap)
}
