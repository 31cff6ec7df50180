//! JSON: every figure, in a versioned schema (`schema: "hefprobe.report/1"`), keys in a
//! stable order — what nightly jobs read.

use super::run::Report;

pub fn render(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).expect("reports serialize");
    s.push('\n');
    s
}
