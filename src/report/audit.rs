//! The HEF audit and the diff as documents: the same tables on a terminal and in a findings
//! page, only the back-end differs.

use serde_json::Value;

use super::doc::{Doc, Table, Text};
use super::document::{Document, Format};
use crate::hef::audit::{AuditReport, GroupReport, LayerRow, QuantRow};
use crate::hef::diff::{value_text, Difference};
use crate::hef::finding::{Finding, Severity};

/// A HEF's audit, or its diff against a reference HEF: the JSON (schema hefprobe.audit/1, or
/// the differences), the document, and whether a check failed (an error-severity finding or
/// difference).
pub struct Audited {
    pub json: String,
    pub doc: Doc,
    pub failed: bool,
}

impl Document for Audited {
    const COMMAND: &'static str = "audit";
    const FORMATS: &'static [Format] = &[Format::Terminal, Format::Markdown, Format::Json];

    fn doc(&self, _to: Option<&std::path::Path>) -> Doc {
        self.doc.clone()
    }

    fn json(&self) -> String {
        format!("{}\n", self.json)
    }
}

/// Header facts, one table per group, the cache layers, resources, the effective
/// hailo-config.json, and the findings.
pub fn audit_doc(r: &AuditReport) -> Doc {
    let mut doc = Doc::new();
    let title = format!("HEF audit{}", r.source.as_deref().map(|s| format!(" of {s}")).unwrap_or_default());
    doc.heading(2, title);
    header_section(&mut doc, r);
    for g in &r.groups {
        group_section(&mut doc, g);
    }
    cache_section(&mut doc, r);
    resource_section(&mut doc, r);
    config_section(&mut doc, r);
    findings_section(&mut doc, &r.findings);
    let s = &r.summary;
    doc.blank().line(format!("{} error(s), {} warning(s), {} info", s.errors, s.warnings, s.infos));
    doc
}

fn header_section(doc: &mut Doc, r: &AuditReport) {
    let h = &r.header;
    let exts: Vec<String> = h
        .extensions
        .iter()
        .map(|e| if e.supported { e.name.clone() } else { format!("{} (unsupported)", e.name) })
        .collect();
    doc.fact(format!(
        "HEF V{}, hw_arch {} ({}), SDK {}",
        h.version,
        h.hw_arch,
        h.hw_arch_name,
        if h.sdk_version.is_empty() { "?" } else { &h.sdk_version }
    ));
    if let Some(c) = &r.container {
        doc.fact(format!("integrity: {}", serde_json::to_string(&c.integrity).unwrap_or_default()));
    }
    doc.fact(format!("extensions: {}", exts.join(", ")));
    let sel = &r.selection;
    let name = |n: &Option<String>| n.as_deref().map_or(Text::from("none"), Text::code);
    doc.fact(
        Text::from(format!("{} group(s); genai picks prefill = ", sel.group_count))
            .and(name(&sel.prefill))
            .and(" (suffix ")
            .and(Text::code(&sel.prefill_suffix))
            .and("), tbt = ")
            .and(name(&sel.tbt))
            .and(" (suffix ")
            .and(Text::code(&sel.tbt_suffix))
            .and(")"),
    );
    let v = &r.vocab;
    let opt = |x: Option<u64>| x.map_or("-".to_string(), |x| x.to_string());
    doc.fact(format!(
        "vocab: checkpoint {}, tokenizer {}, embeddings rows {}, logits prefill {} / tbt {}; theta length {}, mask on-value {}",
        opt(v.expected.map(u64::from)),
        opt(v.tokenizer.map(u64::from)),
        opt(v.embeddings_rows),
        opt(v.prefill_logits),
        opt(v.tbt_logits),
        opt(r.rope.theta_length),
        r.rope.mask_on_value.map_or("-".to_string(), |x| x.to_string())
    ));
}

fn shape(d: [u32; 3]) -> String {
    format!("[{}, {}, {}]", d[0], d[1], d[2])
}

fn quant_cell(q: &QuantRow) -> String {
    match q.scale_range {
        Some([lo, hi]) => format!(
            "per-feature ×{} (scale {lo:.3e}..{hi:.3e}, limvals [{}, {}])",
            q.per_feature, q.min, q.max
        ),
        None => format!("scale {:.4e} zp {} [{}, {}]", q.scale, q.zp, q.min, q.max),
    }
}

fn layer_rows(t: &mut Table, kind: &str, layers: &[LayerRow]) {
    for l in layers {
        t.row([
            kind.to_string(),
            l.role.clone().unwrap_or_default(),
            l.name.clone(),
            shape(l.shape),
            shape(l.padded),
            l.rows.to_string(),
            l.order.clone(),
            l.dtype.clone(),
            quant_cell(&l.quant),
        ]);
    }
}

fn group_section(doc: &mut Doc, g: &GroupReport) {
    let role = g.role.map(|r| format!(" — {r}")).unwrap_or_default();
    doc.blank().heading(3, format!("Group {}{role} ({} context(s))", g.name, g.contexts));
    let mut t =
        Table::new(["", "role", "name", "shape", "padded", "rows", "order", "dtype", "quant"]).padded();
    layer_rows(&mut t, "in", &g.inputs);
    layer_rows(&mut t, "out", &g.outputs);
    doc.table(t);
}

fn cache_section(doc: &mut Doc, r: &AuditReport) {
    let mut t =
        Table::new(["group", "id", "side", "name", "shape", "entry bytes", "order", "dtype"]).padded();
    for g in &r.groups {
        for c in &g.caches {
            t.row([
                g.name.clone(),
                c.cache_id.to_string(),
                c.side.to_string(),
                c.name.clone(),
                shape(c.shape),
                c.entry_bytes.to_string(),
                c.order.clone(),
                c.dtype.clone(),
            ]);
        }
    }
    if t.rows.is_empty() {
        return;
    }
    doc.blank().heading(3, "Cache layers").table(t);
    let shared = match r.caches.shared {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "n/a (no tbt group)",
    };
    doc.line(format!("prefill and tbt share cache ids: {shared}"));
}

fn resource_section(doc: &mut Doc, r: &AuditReport) {
    let mut t = Table::new(["name", "bytes", "xxh3", "stored xxh3"]).padded();
    for x in &r.resources {
        t.row([x.name.clone(), x.size.to_string(), x.xxh3.clone(), x.stored_xxh3.clone()]);
    }
    doc.blank().heading(3, "Resources").table(t);
}

/// Every effective hailo-config.json value, marked with where it came from.
fn config_section(doc: &mut Doc, r: &AuditReport) {
    let Some(config) = &r.config else { return };
    let mut t = Table::new(["key", "value", "from"]).padded();
    for (path, value) in config.values() {
        t.row(config_row(&path, &value, &config.defaults_applied));
    }
    doc.blank().heading(3, "hailo-config.json (effective)").table(t);
}

fn config_row(path: &str, value: &Value, defaults: &[String]) -> [String; 3] {
    let from = if defaults.iter().any(|d| d == path) { "HailoRT default" } else { "file" };
    let mut text = value_text(value);
    if text.len() > 60 {
        text = format!("{}… ({} chars)", text.chars().take(57).collect::<String>(), text.len());
    }
    [path.to_string(), text, from.to_string()]
}

fn findings_section(doc: &mut Doc, findings: &[Finding]) {
    doc.blank().heading(3, "Findings");
    if findings.is_empty() {
        doc.line("none");
    }
    for f in findings {
        let table = f.finding.map(|n| format!(", finding {n}")).unwrap_or_default();
        let group = f.group.as_deref().map(|g| format!(" [{g}]")).unwrap_or_default();
        doc.labelled(f.severity.name(), Text::code(f.id).and(format!("{table}{group}: {}", f.message)));
    }
}

/// `audit A --against B`: one row per structural difference.
pub fn diff_doc(diffs: &[Difference]) -> Doc {
    let mut doc = Doc::new();
    doc.blank().heading(3, "HEF differences (A → B)");
    if diffs.is_empty() {
        doc.line("no structural differences");
        return doc;
    }
    let mut t = Table::new(["severity", "id", "what", "A", "B", "note"]).padded();
    for d in diffs {
        t.row([
            d.severity.to_string(),
            d.id.to_string(),
            d.subject.clone(),
            d.a.clone(),
            d.b.clone(),
            d.message.clone(),
        ]);
    }
    doc.table(t);
    let count = |s| diffs.iter().filter(|d| d.severity == s).count();
    doc.line(format!(
        "{} error(s), {} warning(s), {} info",
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Info)
    ));
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hef::audit::{audit, Expectations};
    use crate::hef::diff::diff;
    use crate::hef::synth::LlmSpec;

    /// Moved from `hef/audit/tests.rs` with the renderer.
    #[test]
    fn renderers_show_tables_and_findings() {
        let spec = LlmSpec::tiny();
        let mut hef = spec.build().unwrap();
        for g in &mut hef.groups {
            g.outputs[0].shape.features = spec.hidden;
        }
        let report = audit(&hef, &Expectations::default());
        let terminal = audit_doc(&report).terminal(false);
        assert!(
            terminal.contains("tiny_llm__prefill/input_layer1")
                && terminal.contains("ERROR   logits-width, finding 1"),
            "{terminal}"
        );
        let markdown = audit_doc(&report).markdown();
        assert!(
            markdown.contains("| in ") && markdown.contains("- **error** `logits-width`, finding 1"),
            "{markdown}"
        );
    }

    /// Moved from `hef/diff.rs`'s `output_order_change_is_a_warning` with the renderer.
    #[test]
    fn diff_markdown_pads_its_table() {
        let mut a = LlmSpec::tiny().build().unwrap();
        let mut second = a.groups[0].outputs[0].clone();
        second.name = "tiny_llm__prefill/output_layer2".into();
        a.groups[0].outputs.push(second);
        let mut b = a.clone();
        b.groups[0].outputs.reverse();
        let rendered = diff_doc(&diff(&a, &b)).markdown();
        assert!(rendered.contains("| warning  | output-order |"), "{rendered}");
    }
}
