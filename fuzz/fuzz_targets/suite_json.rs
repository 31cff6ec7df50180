//! Fuzz the nightly job's JSON inputs: a baseline (`--baseline`) and a shard's summary (`merge`)
//! from the same bytes. Either must load or give a typed error naming the file and key, never a
//! panic: every figure, band, date and count a file claims is checked. What loads is used as the
//! job uses it: a shard is merged and rendered in every report format; a baseline is written
//! back and re-judges the shard when both parse.

#![no_main]

#[path = "scratch.rs"]
mod scratch;

use hefprobe::report::Format;
use hefprobe::suite::baseline::Baseline;
use hefprobe::suite::{merge, render};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = scratch::file("night.json", data);
    let baseline = Baseline::load(&path).ok();
    if let Some(b) = &baseline {
        let _ = b.to_json();
    }
    let Ok(shard) = merge::read(&path) else { return };
    let Ok(mut merged) = merge::merge(vec![("night.json".into(), shard)]) else { return };
    if let Some(b) = &baseline {
        merge::rejudge(&mut merged, b, &path);
    }
    for format in [Format::Terminal, Format::Markdown, Format::Json, Format::Junit, Format::Html] {
        let _ = render(&merged, format, false);
    }
});
