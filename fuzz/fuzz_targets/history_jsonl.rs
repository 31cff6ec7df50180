//! Fuzz the history file (`--history`, `trend`): any bytes must give history lines or a typed
//! error naming the file and line, never a panic. A history that reads is plotted as `trend`
//! does, for every figure: the trends, the band chart's SVG and the table.

#![no_main]

#[path = "scratch.rs"]
mod scratch;

use hefprobe::suite::figures::Figure;
use hefprobe::suite::history::{self, TrendSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = scratch::file("history.jsonl", data);
    let Ok(lines) = history::read(&path) else { return };
    for figure in [Figure::Cosine, Figure::SqnrDb, Figure::Kl, Figure::Argmax] {
        let spec = TrendSpec { figure, tap: "logits".into(), pairs: vec![] };
        let trends = history::trends(&lines, &spec);
        if trends.is_empty() {
            continue;
        }
        let _ = hefprobe::report::band::render(&history::plot(&trends, &spec));
        let _ = history::doc(&trends, &spec).markdown();
    }
});
