//! Records dependency versions for reports and, with feature `hailo`, builds the C++ shim
//! over HailoRT's InferModel API.

fn lock_version(lock: &str, name: &str) -> String {
    let needle = format!("name = \"{name}\"\nversion = \"");
    lock.find(&needle)
        .map(|i| {
            let rest = &lock[i + needle.len()..];
            rest[..rest.find('"').unwrap_or(0)].to_string()
        })
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=build.rs");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    println!("cargo:rustc-env=HEFPROBE_CANDLE_VERSION={}", lock_version(&lock, "candle-core"));
}
