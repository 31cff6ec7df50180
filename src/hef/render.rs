//! Terminal and Markdown renderings of an audit report and of a diff. Both use the same tables;
//! only the preset and the headings differ, so what a terminal shows is what a findings page gets.

use comfy_table::{presets, ContentArrangement, Table};
use serde_json::Value;

use super::audit::{AuditReport, CacheRow, GroupReport, LayerRow, QuantRow};
use super::diff::Difference;
use super::finding::{Finding, Severity};

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Terminal,
    Markdown,
}

/// A document being rendered in one style.
struct Doc {
    style: Style,
    out: String,
}

impl Doc {
    fn new(style: Style) -> Self {
        Doc { style, out: String::new() }
    }

    fn heading(&mut self, text: &str) {
        match self.style {
            Style::Terminal => self.out.push_str(&format!("\n{text}\n")),
            Style::Markdown => self.out.push_str(&format!("\n### {text}\n\n")),
        }
    }

    fn line(&mut self, text: &str) {
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// One fact of the header block: a bullet in Markdown so the lines do not run together.
    fn fact(&mut self, text: &str) {
        match self.style {
            Style::Terminal => self.line(text),
            Style::Markdown => self.line(&format!("- {text}")),
        }
    }

    fn table(&mut self, header: &[&str], rows: Vec<Vec<String>>) {
        let mut table = Table::new();
        let markdown = self.style == Style::Markdown;
        table.load_preset(if markdown { presets::ASCII_MARKDOWN } else { presets::UTF8_FULL_CONDENSED });
        table.set_content_arrangement(ContentArrangement::Disabled);
        let cell = |s: &str| if markdown { s.replace('|', "\\|") } else { s.to_string() };
        table.set_header(header.iter().map(|h| cell(h)));
        for row in rows {
            table.add_row(row.iter().map(|c| cell(c)));
        }
        self.out.push_str(&table.to_string());
        self.out.push('\n');
    }

    fn code(&self, text: &str) -> String {
        match self.style {
            Style::Terminal => text.to_string(),
            Style::Markdown => format!("`{text}`"),
        }
    }
}

impl AuditReport {
    /// Tables and the findings list for a terminal.
    pub fn to_terminal(&self) -> String {
        render_audit(self, Style::Terminal)
    }

    /// The same content as Markdown, pasteable into a findings page.
    pub fn to_markdown(&self) -> String {
        render_audit(self, Style::Markdown)
    }
}

fn render_audit(r: &AuditReport, style: Style) -> String {
    let mut doc = Doc::new(style);
    let title = format!("HEF audit{}", r.source.as_deref().map(|s| format!(" of {s}")).unwrap_or_default());
    match style {
        Style::Terminal => doc.line(&title),
        Style::Markdown => doc.line(&format!("## {title}\n")),
    }
    header_section(&mut doc, r);
    for g in &r.groups {
        group_section(&mut doc, g);
    }
    cache_section(&mut doc, r);
    resource_section(&mut doc, r);
    config_section(&mut doc, r);
    findings_section(&mut doc, &r.findings);
    let s = &r.summary;
    doc.line(&format!("\n{} error(s), {} warning(s), {} info", s.errors, s.warnings, s.infos));
    doc.out
}

fn header_section(doc: &mut Doc, r: &AuditReport) {
    let h = &r.header;
    let exts: Vec<String> = h
        .extensions
        .iter()
        .map(|e| if e.supported { e.name.clone() } else { format!("{} (unsupported)", e.name) })
        .collect();
    doc.fact(&format!(
        "HEF V{}, hw_arch {} ({}), SDK {}",
        h.version,
        h.hw_arch,
        h.hw_arch_name,
        if h.sdk_version.is_empty() { "?" } else { &h.sdk_version }
    ));
    if let Some(c) = &r.container {
        doc.fact(&format!("integrity: {}", serde_json::to_string(&c.integrity).unwrap_or_default()));
    }
    doc.fact(&format!("extensions: {}", exts.join(", ")));
    let sel = &r.selection;
    let name = |n: &Option<String>| n.as_deref().map_or("none".to_string(), |n| doc.code(n));
    doc.fact(&format!(
        "{} group(s); genai picks prefill = {} (suffix {}), tbt = {} (suffix {})",
        sel.group_count,
        name(&sel.prefill),
        doc.code(&sel.prefill_suffix),
        name(&sel.tbt),
        doc.code(&sel.tbt_suffix)
    ));
    let v = &r.vocab;
    let opt = |x: Option<u64>| x.map_or("-".to_string(), |x| x.to_string());
    doc.fact(&format!(
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

fn layer_rows(kind: &str, layers: &[LayerRow]) -> Vec<Vec<String>> {
    layers
        .iter()
        .map(|l| {
            vec![
                kind.to_string(),
                l.role.clone().unwrap_or_default(),
                l.name.clone(),
                shape(l.shape),
                shape(l.padded),
                l.rows.to_string(),
                l.order.clone(),
                l.dtype.clone(),
                quant_cell(&l.quant),
            ]
        })
        .collect()
}

fn group_section(doc: &mut Doc, g: &GroupReport) {
    let role = g.role.map(|r| format!(" — {r}")).unwrap_or_default();
    doc.heading(&format!("Group {}{role} ({} context(s))", g.name, g.contexts));
    let mut rows = layer_rows("in", &g.inputs);
    rows.extend(layer_rows("out", &g.outputs));
    doc.table(&["", "role", "name", "shape", "padded", "rows", "order", "dtype", "quant"], rows);
}

fn cache_rows(group: &str, caches: &[CacheRow]) -> Vec<Vec<String>> {
    caches
        .iter()
        .map(|c| {
            vec![
                group.to_string(),
                c.cache_id.to_string(),
                c.side.to_string(),
                c.name.clone(),
                shape(c.shape),
                c.entry_bytes.to_string(),
                c.order.clone(),
                c.dtype.clone(),
            ]
        })
        .collect()
}

fn cache_section(doc: &mut Doc, r: &AuditReport) {
    let rows: Vec<Vec<String>> = r.groups.iter().flat_map(|g| cache_rows(&g.name, &g.caches)).collect();
    if rows.is_empty() {
        return;
    }
    doc.heading("Cache layers");
    doc.table(&["group", "id", "side", "name", "shape", "entry bytes", "order", "dtype"], rows);
    let shared = match r.caches.shared {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "n/a (no tbt group)",
    };
    doc.line(&format!("prefill and tbt share cache ids: {shared}"));
}

fn resource_section(doc: &mut Doc, r: &AuditReport) {
    doc.heading("Resources");
    let rows = r
        .resources
        .iter()
        .map(|x| vec![x.name.clone(), x.size.to_string(), x.xxh3.clone(), x.stored_xxh3.clone()])
        .collect();
    doc.table(&["name", "bytes", "xxh3", "stored xxh3"], rows);
}

/// Every effective hailo-config.json value, marked with where it came from.
fn config_section(doc: &mut Doc, r: &AuditReport) {
    let Some(config) = &r.config else { return };
    let Ok(Value::Object(map)) = serde_json::to_value(config) else { return };
    doc.heading("hailo-config.json (effective)");
    let mut rows = Vec::new();
    for (key, value) in &map {
        if key == "defaults_applied" || key == "findings" {
            continue;
        }
        match value {
            Value::Object(section) => {
                for (k, v) in section {
                    let path = format!("{key}.{k}");
                    rows.push(config_row(&path, v, &config.defaults_applied));
                }
            }
            v => rows.push(config_row(key, v, &config.defaults_applied)),
        }
    }
    doc.table(&["key", "value", "from"], rows);
}

fn config_row(path: &str, value: &Value, defaults: &[String]) -> Vec<String> {
    let from = if defaults.iter().any(|d| d == path) { "HailoRT default" } else { "file" };
    let mut text = value_text(value);
    if text.len() > 60 {
        text = format!("{}… ({} chars)", text.chars().take(57).collect::<String>(), text.len());
    }
    vec![path.to_string(), text, from.to_string()]
}

/// JSON text of a config value; f32 values (stored as f64 in a `Value`) print as f32 (0.8, not
/// 0.800000011920929).
pub(crate) fn value_text(value: &Value) -> String {
    match value.as_f64() {
        Some(x) if value.is_f64() && f64::from(x as f32) == x => format!("{}", x as f32),
        _ => value.to_string(),
    }
}

fn findings_section(doc: &mut Doc, findings: &[Finding]) {
    doc.heading("Findings");
    if findings.is_empty() {
        doc.line("none");
        return;
    }
    for f in findings {
        let table = f.finding.map(|n| format!(", finding {n}")).unwrap_or_default();
        let group = f.group.as_deref().map(|g| format!(" [{g}]")).unwrap_or_default();
        match doc.style {
            Style::Terminal => doc.line(&format!(
                "{:<7} {}{table}{group}: {}",
                f.severity.name().to_uppercase(),
                f.id,
                f.message
            )),
            Style::Markdown => {
                doc.line(&format!("- **{}** `{}`{table}{group}: {}", f.severity, f.id, f.message))
            }
        }
    }
}

fn render_diff(diffs: &[Difference], style: Style) -> String {
    let mut doc = Doc::new(style);
    doc.heading("HEF differences (A → B)");
    if diffs.is_empty() {
        doc.line("no structural differences");
        return doc.out;
    }
    let rows = diffs
        .iter()
        .map(|d| {
            vec![
                d.severity.to_string(),
                d.id.to_string(),
                d.subject.clone(),
                d.a.clone(),
                d.b.clone(),
                d.message.clone(),
            ]
        })
        .collect();
    doc.table(&["severity", "id", "what", "A", "B", "note"], rows);
    let count = |s| diffs.iter().filter(|d| d.severity == s).count();
    doc.line(&format!(
        "{} error(s), {} warning(s), {} info",
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Info)
    ));
    doc.out
}

/// A diff for a terminal.
pub fn diff_to_terminal(diffs: &[Difference]) -> String {
    render_diff(diffs, Style::Terminal)
}

/// A diff as Markdown.
pub fn diff_to_markdown(diffs: &[Difference]) -> String {
    render_diff(diffs, Style::Markdown)
}
