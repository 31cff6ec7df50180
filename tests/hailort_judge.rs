//! HailoRT's own code as the judge of what hefprobe writes: opt-in, against a HailoRT 5.2
//! built from its public sources (no device needed). Not part of the default `cargo test`:
//!
//! ```sh
//! HEFPROBE_HAILORT=DIR cargo test --test hailort_judge -- --include-ignored
//! ```
//!
//! DIR holds `bin/hailortcli` and `lib/libhailort.so*` (a HailoRT install prefix). The
//! recipe that builds one offline lives outside this repository (docs/DEVICE.md, "HailoRT as the
//! judge").

mod common;

use common::hefprobe;
use std::path::PathBuf;
use std::process::Command;

const NEEDS: &str = "needs HEFPROBE_HAILORT=DIR (a HailoRT 5.2 install prefix with bin/hailortcli)";

fn hailortcli(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let dir = PathBuf::from(std::env::var_os("HEFPROBE_HAILORT").expect(NEEDS));
    let out = Command::new(dir.join("bin/hailortcli"))
        .args(args)
        .env("LD_LIBRARY_PATH", dir.join("lib"))
        // HailoRT logs into the working folder; keep it out of the repository.
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Every shape of HEF synth-hef writes is opened by HailoRT's own parser: header, hashes,
/// network groups, edge layers and their quant infos, as `hailortcli parse-hef` reads them.
#[test]
#[ignore = "needs HEFPROBE_HAILORT=DIR (a HailoRT 5.2 install prefix with bin/hailortcli)"]
fn hailort_parses_every_hef_synth_hef_writes() {
    let t = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 4] = [
        ("default", &[]),
        ("base-scope", &["--no-tbt"]),
        ("sharded-lm-head", &["--lm-head-shards", "3"]),
        ("small-frames", &["--prefill-tokens", "16", "--kv-cache-size", "256"]),
    ];
    let mut failures = Vec::new();
    for (name, extra) in cases {
        let hef = t.path().join(format!("{name}.hef"));
        hefprobe()
            .args(["synth-hef", "--synth", "tinystories", "-o"])
            .arg(&hef)
            .args(extra)
            .assert()
            .success();
        let (ok, text) = hailortcli(&["parse-hef".as_ref(), hef.as_os_str(), "--parse-streams".as_ref()]);
        eprintln!("== {name}\n{text}");
        let groups_named = text.contains("hefprobe_sim__prefill")
            && (extra.contains(&"--no-tbt") || text.contains("hefprobe_sim__tbt"));
        if !ok || !groups_named {
            failures.push(format!("{name}: hailortcli parse-hef failed or named other groups:\n{text}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
