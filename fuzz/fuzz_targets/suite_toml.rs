//! Fuzz the suite file: any text must give a suite or a typed error naming the file and key,
//! never a panic, a walk outside the suite's folder or an unbounded plan. The scratch folder
//! holds two catalog probes for the globs to find; a suite that loads is planned and sharded,
//! as `suite --shard` does before any pair runs.

#![no_main]

#[path = "scratch.rs"]
mod scratch;

use hefprobe::suite::run::plan;
use hefprobe::suite::shard::Shard;
use hefprobe::suite::spec::Suite;
use libfuzzer_sys::fuzz_target;
use std::sync::Once;

const PROBES: [(&str, &str); 2] = [
    ("shared-softmax.toml", include_str!("../../probes/shared-softmax.toml")),
    ("kv-cache-layout.toml", include_str!("../../probes/kv-cache-layout.toml")),
];

fuzz_target!(|data: &[u8]| {
    static PROBE_FILES: Once = Once::new();
    PROBE_FILES.call_once(|| {
        std::fs::create_dir_all(scratch::dir().join("probes")).expect("a probes folder");
        for (name, text) in PROBES {
            scratch::file(&format!("probes/{name}"), text.as_bytes());
        }
    });
    let path = scratch::file("suite.toml", data);
    let Ok(suite) = Suite::load(&path) else { return };
    let planned = plan(&suite);
    let keys: Vec<(String, String)> = planned
        .iter()
        .map(|(i, t)| (suite.probes[*i].name.clone(), t.as_ref().map_or_else(String::new, |t| t.label.clone())))
        .collect();
    if let Ok(shard) = Shard::parse("2/3") {
        let _ = shard.select(&keys);
    }
});
