//! JUnit XML, in the dialect of the Jenkins xUnit plugin's `junit-10.xsd` (which GitLab, GitHub
//! test-report actions and Jenkins all read; the schema is committed under tests/data/ and the
//! output is validated against it in a test). One `<testsuite>` per target, one `<testcase>`
//! per probe × target:
//! - regressed / failed: `<failure type=STATUS message=WHY>` — the regression or located
//!   sentence with the explain verdict;
//! - unstable and errors: `<error type=…>` (the pair could not be judged);
//! - flaky: a passing testcase with a `<flakyFailure>` carrying the first run;
//! - known: a passing testcase, the known failure in `<system-out>`;
//! - skipped: `<skipped message=…>`.

use super::figures::first_seen;
use super::result::{ErrorKind, PairResult, Status, SuiteResult};
use super::summary::{device_line, verdict_line, why};
use std::fmt::Write;

/// XML 1.0 text or attribute value: the five escapes, and the characters XML 1.0 cannot hold
/// at all (C0 controls but tab, newline, carriage return) dropped.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            '\t' | '\n' | '\r' => o.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => o.push(c),
        }
    }
    o
}

/// Seconds as SUREFIRE_TIME (junit-10.xsd): digits, a point, digits.
fn time(s: f64) -> String {
    format!("{:.3}", s.max(0.0))
}

fn testcase(o: &mut String, p: &PairResult) {
    let class = format!("hefprobe.{}", p.target);
    let _ = write!(
        o,
        "    <testcase name=\"{}\" classname=\"{}\" time=\"{}\"",
        escape(&p.probe),
        escape(&class),
        time(p.seconds)
    );
    // The message is the verdict line (what a CI page shows beside the test's name); the body
    // holds everything behind it.
    let message = verdict_line(p);
    let body = format!("{}\n{}", why(p), details(p));
    let element = |tag: &str, kind: &str| {
        Some(format!(
            "      <{tag} type=\"{kind}\" message=\"{}\">{}</{tag}>\n",
            escape(&message),
            escape(&body)
        ))
    };
    let inner = match p.status {
        Status::Pass => None,
        Status::Regressed | Status::Failed => element("failure", p.status.name()),
        Status::Unstable => element("error", "unstable"),
        Status::Error => match p.error.as_ref().map(|e| e.kind) {
            Some(ErrorKind::Device) => element("error", "device"),
            _ => element("error", "input"),
        },
        Status::Flaky => Some(format!(
            "      <flakyFailure type=\"flaky\" message=\"{}\"/>\n      <system-out>{}</system-out>\n",
            escape(p.first_run.as_deref().unwrap_or("")),
            escape(&body)
        )),
        Status::Known => {
            Some(format!("      <system-out>{}</system-out>\n", escape(&format!("{message}\n{body}"))))
        }
        Status::Skipped => Some(format!("      <skipped message=\"{}\"/>\n", escape(&message))),
    };
    match inner {
        None => o.push_str("/>\n"),
        Some(inner) => {
            o.push_str(">\n");
            o.push_str(&inner);
            o.push_str("    </testcase>\n");
        }
    }
}

/// The figures behind a verdict, one per line, for the failure's body.
fn details(p: &PairResult) -> String {
    let mut lines = vec![format!("{} × {}: {}", p.probe, p.target, p.status.name())];
    lines.extend(p.probe_file.as_ref().map(|f| format!("probe file: {f}")));
    let regressions = p.regressions.iter().map(super::summary::regression_sentence);
    lines.extend(regressions.map(|r| format!("regression: {r}")));
    lines.extend(p.gate.as_ref().map(|g| {
        format!(
            "gate: {} runs, logits cosine ≥ {}, argmax agreement {}, max |Δ| {}",
            g.runs, g.cosine, g.argmax, g.max_abs
        )
    }));
    lines.extend(p.device.as_ref().map(|d| format!("device: {}", device_line(d))));
    lines.extend(p.hef_revision.as_ref().map(|r| format!("HEF revision: {r}")));
    lines.join("\n")
}

pub fn render(r: &SuiteResult) -> String {
    let unfinished = r.unfinished.iter().map(|e| e.target.as_str());
    let targets = first_seen(r.pairs.iter().map(|p| p.target.as_str()).chain(unfinished));
    let failures = |ps: &[&PairResult]| {
        ps.iter().filter(|p| matches!(p.status, Status::Regressed | Status::Failed)).count()
    };
    let errors = |ps: &[&PairResult]| {
        ps.iter().filter(|p| matches!(p.status, Status::Unstable | Status::Error)).count()
    };
    let all: Vec<&PairResult> = r.pairs.iter().collect();
    let total: f64 = r.pairs.iter().map(|p| p.seconds).sum();
    let not_run = |t: &str| r.unfinished.iter().filter(|e| e.target == t).count();
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        o,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">",
        escape(&format!("hefprobe suite {}", r.suite)),
        all.len() + r.unfinished.len(),
        failures(&all),
        errors(&all),
        time(total)
    );
    for target in targets {
        let ps: Vec<&PairResult> = r.pairs.iter().filter(|p| p.target == target).collect();
        let skipped = ps.iter().filter(|p| p.status == Status::Skipped).count() + not_run(target);
        let _ = writeln!(
            o,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{skipped}\" time=\"{}\" \
             timestamp=\"{}\">",
            escape(target),
            ps.len() + not_run(target),
            failures(&ps),
            errors(&ps),
            time(ps.iter().map(|p| p.seconds).sum()),
            escape(&r.date)
        );
        let mut props: Vec<(String, String)> = Vec::new();
        if let Some(t) = r.targets.iter().find(|t| t.label == target) {
            props.push(("kind".into(), t.kind.to_string()));
            props.extend(t.path.clone().map(|p| ("path".to_string(), p)));
            props.extend(t.revision.clone().map(|v| ("revision".to_string(), v)));
        }
        if let Some(d) = ps.iter().find_map(|p| p.device.as_ref()) {
            props.push(("device".into(), device_line(d)));
        }
        if !props.is_empty() {
            o.push_str("    <properties>\n");
            for (k, v) in props {
                let _ = writeln!(o, "      <property name=\"{}\" value=\"{}\"/>", escape(&k), escape(&v));
            }
            o.push_str("    </properties>\n");
        }
        for p in ps {
            testcase(&mut o, p);
        }
        // An interrupted run's file: the pairs it did not reach.
        for e in r.unfinished.iter().filter(|e| e.target == target) {
            let _ = writeln!(
                o,
                "    <testcase name=\"{}\" classname=\"hefprobe.{}\" time=\"0.000\">\n      \
                 <skipped message=\"not run: the suite was interrupted\"/>\n    </testcase>",
                escape(&e.probe),
                escape(target)
            );
        }
        o.push_str("  </testsuite>\n");
    }
    findings(&mut o, r);
    o.push_str("</testsuites>\n");
    o
}

/// One `<testcase>` per finding × target in a `findings` testsuite: a failure when the
/// finding's status fails the run, skipped when it did not run.
fn findings(o: &mut String, r: &SuiteResult) {
    use super::findings::{sentence, FindingStatus};
    if r.findings.is_empty() {
        return;
    }
    let failures = r.findings.iter().filter(|f| f.fails).count();
    let skipped = r.findings.iter().filter(|f| f.status == FindingStatus::NotRun).count();
    let _ = writeln!(
        o,
        "  <testsuite name=\"findings\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" \
         time=\"0.000\" timestamp=\"{}\">",
        r.findings.len(),
        escape(&r.date)
    );
    for f in &r.findings {
        let _ = write!(
            o,
            "    <testcase name=\"finding {}\" classname=\"hefprobe.findings.{}\" time=\"0.000\"",
            f.claim.id,
            escape(&f.target)
        );
        let said = escape(&sentence(f));
        if f.fails {
            let _ = writeln!(o, ">\n      <failure type=\"finding\" message=\"{said}\"/>\n    </testcase>");
        } else if f.status == FindingStatus::NotRun {
            let _ = writeln!(o, ">\n      <skipped message=\"{said}\"/>\n    </testcase>");
        } else {
            let _ = writeln!(o, ">\n      <system-out>{said}</system-out>\n    </testcase>");
        }
    }
    o.push_str("  </testsuite>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_xml_well_formed() {
        assert_eq!(escape("a<b & \"c\" 'd'>\u{1}\t"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;\t");
        assert_eq!(time(1.23456), "1.235");
    }
}
