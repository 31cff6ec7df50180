//! The probe catalog, as the nightly job runs it: every probe in probes/ parses, runs, locates
//! its drift, and (for the emulated stand-ins) explain names the planted fault.

use hefprobe::probe::run::{run_probe, RunOptions};
use hefprobe::probe::schema::Probe;
use std::path::Path;

#[test]
fn every_probe_runs_locates_and_explains_its_planted_fault() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("probes");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.retain(|p| p.extension().is_some_and(|e| e == "toml"));
    paths.sort();
    assert!(paths.len() >= 8, "{paths:?}");
    let mut failures = Vec::new();
    for path in paths {
        let probe = Probe::load(&path).unwrap();
        if probe.backends.is_empty() || probe.explain.is_none() {
            continue; // sweep probes are exercised by tests/sweep.rs
        }
        let planted = probe.backends[0].faults.first().map(ToString::to_string).unwrap_or_default();
        let run = run_probe(&probe, &RunOptions::default()).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        if run.report.located[0].is_empty() {
            failures.push(format!("{name}: no drift located"));
        }
        let explain = run.report.explain.as_ref().unwrap();
        let best = &explain.rows[0];
        if best.fault != planted && !best.ties.contains(&planted) {
            failures.push(format!("{name}: explain ranked {} first, planted {planted}", best.fault));
        }
        if !explain.conclusion.starts_with("best explanation") {
            failures.push(format!("{name}: {}", explain.conclusion));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
