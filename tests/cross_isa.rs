//! The same probe on two CPUs: this build's hefprobe (x86_64 in CI) and another ISA's build of
//! it (`HEFPROBE_CROSS_EXE`, the aarch64 binary, run through `HEFPROBE_CROSS_RUNNER`, e.g.
//! `qemu-aarch64 -L /usr/aarch64-linux-gnu`), their captures compared tap by tap.
//!
//! Every tap is bit-identical (docs/ARCHITECTURE.md, "The same bits on every CPU"): the
//! matrix-vector products have AVX-512, AVX2 and NEON builds of one summation order, norms,
//! RoPE, softmax and silu are plain code without fused multiply-adds, and every gemm call is one
//! depth block clear of gemm's ISA-specific kernels. So a bundle recorded on one CPU verifies on
//! the other with every figure the same.
//!
//! Ignored by default: it needs the other build. `.ci/run` builds the aarch64 binary and runs
//! these with `--include-ignored`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn other() -> (PathBuf, Vec<String>) {
    let exe = std::env::var_os("HEFPROBE_CROSS_EXE").expect(
        "HEFPROBE_CROSS_EXE names another ISA's hefprobe binary (and HEFPROBE_CROSS_RUNNER how to run it)",
    );
    let runner = std::env::var("HEFPROBE_CROSS_RUNNER").unwrap_or_default();
    (exe.into(), runner.split_whitespace().map(String::from).collect())
}

/// This build's hefprobe (`native`) or the other ISA's, through its runner.
fn command(native: bool) -> Command {
    if native {
        return Command::new(env!("CARGO_BIN_EXE_hefprobe"));
    }
    let (exe, runner) = other();
    let mut c = Command::new(runner.first().map_or(exe.as_os_str(), |r| r.as_ref()));
    c.args(runner.iter().skip(1));
    if !runner.is_empty() {
        c.arg(&exe);
    }
    c
}

/// `hefprobe ARGS` (exit 0 or 1: drift is what probes find); stdout.
fn hefprobe(native: bool, args: &[&str], cwd: &Path) -> String {
    let out = command(native).args(args).current_dir(cwd).output().unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{} {args:?}: {}",
        isa(native),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every array of every capture of a run, by file and key.
type Arrays = Vec<(String, Vec<f32>)>;

/// [`Arrays`] of the captures in `dir`.
fn captures(dir: &Path) -> Arrays {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in files {
        let mut z = ndarray_npy::NpzReader::new(std::fs::File::open(&f).unwrap()).unwrap();
        let mut names = z.names().unwrap();
        names.sort();
        for name in names {
            let a: ndarray::ArrayD<f32> = z.by_name(&name).unwrap();
            out.push((
                format!("{}:{name}", f.file_name().unwrap().to_string_lossy()),
                a.iter().copied().collect(),
            ));
        }
    }
    out
}

/// `run PROBE --save-captures` by both builds; the two sets of captures and reports.
fn both(probe: &Path, dir: &Path) -> [(Arrays, String); 2] {
    [true, false].map(|native| {
        let caps = dir.join(if native { "native" } else { "other" });
        let args =
            ["run", probe.to_str().unwrap(), "--no-explain", "--save-captures", caps.to_str().unwrap()];
        let report = hefprobe(native, &args, dir);
        (captures(&caps), report)
    })
}

fn short_probe(dir: &Path, checkpoint: &str) -> PathBuf {
    let p = dir.join("short.toml");
    std::fs::write(
        &p,
        format!(
            "version = 1\nname = \"cross-isa\"\nquestion = \"same bits on every CPU?\"\n\n[checkpoint]\n{checkpoint}\n\n\
             [inputs]\ntokens = [1, 17, 42, 99]\ndecode = 6\n\n[[backend]]\nname = \"device\"\nkind = \"emulator\"\n\
             faults = [\"shared-softmax@layers=0\", \"quant:w8a16\"]\n"
        ),
    )
    .unwrap();
    p
}

/// Every capture of both builds, array by array, bit for bit.
fn assert_same_bits(a: &Arrays, b: &Arrays, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: the two builds captured different taps");
    assert!(a.iter().any(|(k, _)| k.contains("decode.")), "{what}: no decode taps captured");
    for ((ka, va), (kb, vb)) in a.iter().zip(b) {
        assert_eq!(ka, kb, "{what}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(va) == bits(vb), "{what}: {ka} differs between the two ISAs");
    }
}

#[test]
#[ignore = "needs HEFPROBE_CROSS_EXE: another ISA's hefprobe (.ci/run builds the aarch64 one)"]
fn a_short_prompt_gives_the_same_bits_on_both_isas_for_every_weight_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let mut cases = vec![("f32".to_string(), "synth = \"tinystories\"\nseed = 0".to_string())];
    for dtype in ["bf16", "f16"] {
        let ck = dir.path().join(dtype);
        let args = ["synth", "--preset", "tinystories", "--dtype", dtype, "-o", ck.to_str().unwrap()];
        hefprobe(true, &args, dir.path());
        cases.push((dtype.to_string(), format!("path = \"{}\"", ck.display())));
    }
    for (dtype, checkpoint) in cases {
        let probe = short_probe(dir.path(), &checkpoint);
        let [(a, report_a), (b, report_b)] = both(&probe, dir.path());
        assert_same_bits(&a, &b, &dtype);
        assert_eq!(report_a, report_b, "{dtype}: the printed reports differ");
        std::fs::remove_dir_all(dir.path().join("native")).unwrap();
        std::fs::remove_dir_all(dir.path().join("other")).unwrap();
    }
}

#[test]
#[ignore = "needs HEFPROBE_CROSS_EXE: another ISA's hefprobe (.ci/run builds the aarch64 one)"]
fn a_prefill_through_gemm_gives_the_same_bits_on_both_isas() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/shared-softmax.toml");
    let [(a, report_a), (b, report_b)] = both(&probe, dir.path());
    assert_same_bits(&a, &b, "shared-softmax (41-token prefill)");
    assert_eq!(report_a, report_b, "the printed reports differ");
}

#[test]
#[ignore = "needs HEFPROBE_CROSS_EXE: another ISA's hefprobe (.ci/run builds the aarch64 one)"]
fn a_bundle_recorded_on_one_isa_verifies_on_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/shared-softmax.toml");
    for (record, verify) in [(true, false), (false, true)] {
        let bundle = dir.path().join(format!("bundle-{record}"));
        let args = ["run", probe.to_str().unwrap(), "--no-explain", "--bundle", bundle.to_str().unwrap()];
        hefprobe(record, &args, dir.path());
        let out = verify_exit(verify, &bundle, dir.path());
        assert_eq!(out.0, Some(0), "recorded on {}, verified on {}: {}", isa(record), isa(verify), out.1);
    }
}

fn isa(native: bool) -> &'static str {
    if native {
        "this build's CPU"
    } else {
        "the other ISA"
    }
}

/// `hefprobe verify BUNDLE`'s exit code and output.
fn verify_exit(native: bool, bundle: &Path, cwd: &Path) -> (Option<i32>, String) {
    let out = command(native).arg("verify").arg(bundle).current_dir(cwd).output().unwrap();
    (
        out.status.code(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}
