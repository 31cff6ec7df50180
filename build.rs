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

    println!("cargo:rerun-if-env-changed=HEFPROBE_SKIP_SHIM");
    if std::env::var_os("CARGO_FEATURE_HAILO").is_some() && std::env::var_os("HEFPROBE_SKIP_SHIM").is_none() {
        build_hailo_shim();
    }
}

/// Compiles shim/hefprobe_shim.cpp (the C ABI over HailoRT's C++ InferModel API) and links it
/// with libhailort. HAILORT_INCLUDE_DIR is the directory holding `hailo/hailort.hpp` (default
/// /usr/include, where HailoRT's packages install it); HAILORT_LIB_DIR the one holding
/// libhailort.so (default /usr/lib). With HEFPROBE_SKIP_SHIM set nothing is compiled or linked,
/// so `cargo check --features hailo` works without HailoRT (it never links).
#[cfg(feature = "hailo")]
fn build_hailo_shim() {
    for var in ["HAILORT_INCLUDE_DIR", "HAILORT_LIB_DIR"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=shim/hefprobe_shim.cpp");
    println!("cargo:rerun-if-changed=shim/hefprobe_shim.h");
    let include = std::env::var("HAILORT_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let lib = std::env::var("HAILORT_LIB_DIR").unwrap_or_else(|_| "/usr/lib".into());
    if !std::path::Path::new(&include).join("hailo/hailort.hpp").is_file() {
        println!(
            "cargo:warning=hailo/hailort.hpp not found under {include}: install HailoRT 5.x, set \
             HAILORT_INCLUDE_DIR, or set HEFPROBE_SKIP_SHIM=1 to only type-check"
        );
    }
    // cc also emits the static library and the C++ standard library link lines.
    cc::Build::new()
        .cpp(true)
        .flag_if_supported("-std=c++17")
        .file("shim/hefprobe_shim.cpp")
        .include("shim")
        .include(&include)
        .compile("hefprobe_shim");
    // After the shim, so the linker resolves the shim's references to libhailort.
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=dylib=hailort");
}

#[cfg(not(feature = "hailo"))]
fn build_hailo_shim() {}
