//! The one rendering layer: a small document every command builds — headings, lines, facts,
//! labelled items, tables, notes, figures — and three back-ends that print it (hyperfine's
//! `export/` is the model: one document, many formats).
//!
//! - [`Doc::terminal`]: comfy-table's `UTF8_FULL_CONDENSED`, colour only when asked;
//! - [`Doc::markdown`]: GitHub Markdown, `|` escaped in text (and in code inside table cells,
//!   where it would end the cell);
//! - [`Doc::json`]: serde of the document itself, for commands with no schema of their own;
//!   text is plain words there (code and emphasis are presentation), cells plain strings.
//!
//! A builder says where blank lines go ([`Doc::blank`]); back-ends add none of their own except
//! the one after a Markdown heading. That keeps every command's output exactly as it was when
//! each printed its own tables, and makes spacing visible in the builder.

use comfy_table::{presets, Cell as ComfyCell, Color, ContentArrangement, Table as ComfyTable};
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;

/// Schema of [`Doc::json`].
pub const DOC_SCHEMA: &str = "hefprobe.doc/1";

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Doc {
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// Markdown: `#` × level and a blank line after; a terminal prints the text.
    Heading {
        level: u8,
        text: Text,
    },
    /// One line of prose.
    Line(Text),
    /// One fact of a header block: a bullet in Markdown, a plain line on a terminal.
    Fact(Text),
    /// A labelled item (an audit finding): `WARNING text` on a terminal, `- **warning** text`
    /// in Markdown.
    Labelled {
        label: String,
        text: Text,
    },
    /// An aside, printed in parentheses.
    Note(Text),
    Table(Table),
    /// A link to a file (an SVG plot): an image in Markdown, the path on a terminal.
    Figure {
        path: String,
    },
    /// Blocks folded away in Markdown (`<details>`); a terminal prints the summary, then them.
    Details {
        summary: String,
        blocks: Vec<Block>,
    },
    /// An empty line.
    Blank,
}

/// Inline text: plain words, code (tap, fault and file names) and strong emphasis.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Text(pub Vec<Span>);

#[derive(Debug, Clone, PartialEq)]
pub enum Span {
    Plain(String),
    /// Inline code in Markdown; plain on a terminal.
    Code(String),
    /// Bold in Markdown; plain on a terminal.
    Strong(String),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Table {
    /// No header: Markdown still prints an empty one (GitHub needs it), a terminal none.
    pub header: Vec<Text>,
    /// Per column; only Markdown shows it (`---:`). Missing columns are left-aligned.
    pub align: Vec<Align>,
    pub rows: Vec<Vec<Cell>>,
    /// Markdown source padded into columns (comfy-table's `ASCII_MARKDOWN`), as audit and diff
    /// pages have always been printed; other tables are compact, with alignment markers.
    #[serde(skip)]
    pub padded: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Align {
    Left,
    Right,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    pub text: Text,
    pub tone: Tone,
}

/// What a cell says about the result; a colour terminal shows it, the other back-ends don't.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tone {
    #[default]
    Plain,
    /// Passed (green).
    Good,
    /// Failed (red).
    Bad,
    /// Not checked (grey).
    Muted,
    /// Beyond a bound but accepted by a person (yellow): never shown as a pass.
    Warn,
}

impl Tone {
    fn color(self) -> Option<Color> {
        match self {
            Tone::Plain => None,
            Tone::Good => Some(Color::Green),
            Tone::Bad => Some(Color::Red),
            Tone::Muted => Some(Color::DarkGrey),
            Tone::Warn => Some(Color::Yellow),
        }
    }
}

impl Text {
    pub fn code(s: impl Into<String>) -> Text {
        Text(vec![Span::Code(s.into())])
    }

    pub fn strong(s: impl Into<String>) -> Text {
        Text(vec![Span::Strong(s.into())])
    }

    /// This text followed by `more`.
    pub fn and(mut self, more: impl Into<Text>) -> Text {
        self.0.extend(more.into().0);
        self
    }

    /// The words without markup, as a terminal shows them.
    pub fn plain(&self) -> String {
        self.0
            .iter()
            .map(|s| match s {
                Span::Plain(t) | Span::Code(t) | Span::Strong(t) => t.as_str(),
            })
            .collect()
    }

    /// Markdown; `in_cell` also escapes `|` inside code, which would end the cell there.
    fn markdown(&self, in_cell: bool) -> String {
        let esc = |s: &str| s.replace('|', "\\|");
        self.0
            .iter()
            .map(|s| match s {
                Span::Plain(t) => esc(t),
                Span::Strong(t) => format!("**{}**", esc(t)),
                Span::Code(t) if in_cell => format!("`{}`", esc(t)),
                Span::Code(t) => format!("`{t}`"),
            })
            .collect()
    }
}

impl Serialize for Text {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.plain())
    }
}

impl Serialize for Cell {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(s)
    }
}

impl<T: Into<String>> From<T> for Text {
    fn from(s: T) -> Text {
        Text(vec![Span::Plain(s.into())])
    }
}

impl Cell {
    pub fn tone(mut self, tone: Tone) -> Cell {
        self.tone = tone;
        self
    }
}

impl<T: Into<Text>> From<T> for Cell {
    fn from(text: T) -> Cell {
        Cell { text: text.into(), tone: Tone::Plain }
    }
}

impl Table {
    pub fn new<T: Into<Text>>(header: impl IntoIterator<Item = T>) -> Table {
        Table { header: header.into_iter().map(Into::into).collect(), ..Table::default() }
    }

    /// A table of key–value rows with no header.
    pub fn headless() -> Table {
        Table::default()
    }

    /// Column alignment as one letter per column: `l` or `r`.
    pub fn align(mut self, spec: &str) -> Table {
        self.align = spec.chars().map(|c| if c == 'r' { Align::Right } else { Align::Left }).collect();
        self
    }

    pub fn padded(mut self) -> Table {
        self.padded = true;
        self
    }

    pub fn row<C: Into<Cell>>(&mut self, cells: impl IntoIterator<Item = C>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    fn columns(&self) -> usize {
        self.rows.iter().map(Vec::len).chain([self.header.len(), self.align.len()]).max().unwrap_or(0)
    }

    /// Within `width` columns when one is given: cells wrap (comfy-table's dynamic arrangement),
    /// and a table that still cannot fit has its widest cells cut with an ellipsis.
    fn terminal(&self, color: bool, width: Option<usize>) -> String {
        let mut t = ComfyTable::new();
        t.load_preset(presets::UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Disabled);
        if let Some(w) = width {
            t.set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(u16::try_from(w).unwrap_or(u16::MAX));
        }
        if color {
            t.enforce_styling();
        } else {
            t.force_no_tty();
        }
        if !self.header.is_empty() {
            t.set_header(self.header.iter().map(Text::plain));
        }
        for row in &self.rows {
            t.add_row(row.iter().map(|c| {
                let cell = ComfyCell::new(c.text.plain());
                match c.tone.color().filter(|_| color) {
                    Some(fg) => cell.fg(fg),
                    None => cell,
                }
            }));
        }
        t.to_string()
    }

    fn markdown(&self) -> String {
        let cells = |row: &[Text]| row.iter().map(|c| c.markdown(true)).collect::<Vec<_>>();
        let rows = self.rows.iter().map(|row| row.iter().map(|c| c.text.markdown(true)).collect::<Vec<_>>());
        if self.padded {
            let mut t = ComfyTable::new();
            t.load_preset(presets::ASCII_MARKDOWN).set_content_arrangement(ContentArrangement::Disabled);
            t.set_header(cells(&self.header)).add_rows(rows);
            return t.to_string();
        }
        let n = self.columns();
        let mut o = String::new();
        if self.header.is_empty() {
            o += &format!("|{}", " |".repeat(n));
        } else {
            o += &format!("| {} |", cells(&self.header).join(" | "));
        }
        o += "\n|";
        for i in 0..n {
            o += if self.align.get(i) == Some(&Align::Right) { "---:|" } else { "---|" };
        }
        for texts in rows {
            o += &format!("\n| {} |", texts.join(" | "));
        }
        o
    }
}

impl Doc {
    pub fn new() -> Doc {
        Doc::default()
    }

    fn push(&mut self, b: Block) -> &mut Doc {
        self.blocks.push(b);
        self
    }

    pub fn heading(&mut self, level: u8, text: impl Into<Text>) -> &mut Doc {
        self.push(Block::Heading { level, text: text.into() })
    }

    pub fn line(&mut self, text: impl Into<Text>) -> &mut Doc {
        self.push(Block::Line(text.into()))
    }

    pub fn fact(&mut self, text: impl Into<Text>) -> &mut Doc {
        self.push(Block::Fact(text.into()))
    }

    pub fn labelled(&mut self, label: impl Into<String>, text: impl Into<Text>) -> &mut Doc {
        self.push(Block::Labelled { label: label.into(), text: text.into() })
    }

    pub fn note(&mut self, text: impl Into<Text>) -> &mut Doc {
        self.push(Block::Note(text.into()))
    }

    pub fn table(&mut self, table: Table) -> &mut Doc {
        self.push(Block::Table(table))
    }

    pub fn figure(&mut self, path: impl Into<String>) -> &mut Doc {
        self.push(Block::Figure { path: path.into() })
    }

    pub fn details(&mut self, summary: impl Into<String>, inner: Doc) -> &mut Doc {
        self.push(Block::Details { summary: summary.into(), blocks: inner.blocks })
    }

    pub fn blank(&mut self) -> &mut Doc {
        self.push(Block::Blank)
    }

    /// "Produced by `COMMAND` (hefprobe VERSION)." and a blank line.
    pub fn produced_by(&mut self, command: &str) -> &mut Doc {
        let version = format!(" (hefprobe {}).", env!("CARGO_PKG_VERSION"));
        self.line(Text::from("Produced by ").and(Text::code(command)).and(version)).blank()
    }

    /// Every block of `other`, after these.
    pub fn append(&mut self, other: Doc) -> &mut Doc {
        self.blocks.extend(other.blocks);
        self
    }

    pub fn terminal(&self, color: bool) -> String {
        self.terminal_fit(color, None)
    }

    /// [`Doc::terminal`] within `width` columns (a terminal's, or `COLUMNS`): tables wrap their
    /// cells, lines wrap at spaces (continued two columns in); `None` leaves every line whole.
    pub fn terminal_fit(&self, color: bool, width: Option<usize>) -> String {
        let mut o = String::new();
        terminal_blocks(&self.blocks, (color, width), &mut o);
        o
    }

    pub fn markdown(&self) -> String {
        let mut o = String::new();
        markdown_blocks(&self.blocks, &mut o);
        o
    }

    pub fn json(&self) -> String {
        #[derive(Serialize)]
        struct Versioned<'a> {
            schema: &'static str,
            blocks: &'a [Block],
        }
        let v = Versioned { schema: DOC_SCHEMA, blocks: &self.blocks };
        serde_json::to_string_pretty(&v).expect("documents serialize") + "\n"
    }
}

fn terminal_blocks(blocks: &[Block], (color, width): (bool, Option<usize>), o: &mut String) {
    let put = |o: &mut String, text: String| {
        let _ = writeln!(o, "{}", width.map_or(text.clone(), |w| wrap(&text, w)));
    };
    for b in blocks {
        match b {
            Block::Heading { text, .. } | Block::Line(text) | Block::Fact(text) => put(o, text.plain()),
            // Wide enough for WARNING, so the finding ids line up.
            Block::Labelled { label, text } => {
                put(o, format!("{:<7} {}", label.to_uppercase(), text.plain()))
            }
            Block::Note(text) => put(o, format!("({})", text.plain())),
            // A table that cannot fit even with its cells wrapped is cut, never wrapped across rows.
            Block::Table(t) => {
                let text = t.terminal(color, width);
                let _ = match width {
                    Some(w) if !color => {
                        writeln!(o, "{}", text.lines().map(|l| cut(l, w)).collect::<Vec<_>>().join("\n"))
                    }
                    _ => writeln!(o, "{text}"),
                };
            }
            Block::Figure { path } => put(o, path.clone()),
            // The summary, then what it folds, four columns in.
            Block::Details { summary, blocks } => {
                put(o, summary.clone());
                let mut inner = String::new();
                terminal_blocks(blocks, (color, width.map(|w| w.saturating_sub(4))), &mut inner);
                for line in inner.lines() {
                    let _ = writeln!(o, "{}{line}", if line.is_empty() { "" } else { "    " });
                }
            }
            Block::Blank => o.push('\n'),
        }
    }
}

/// `text` broken at spaces into lines of at most `width` characters, each continuation two
/// columns in; a word longer than a line is cut with an ellipsis.
pub fn wrap(text: &str, width: usize) -> String {
    let width = width.max(20);
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.chars().count() <= width {
            out.push(line.to_string());
            continue;
        }
        let (mut cur, mut first) = (String::new(), true);
        for word in line.split(' ') {
            let word = cut(word, width - 2);
            let len = cur.chars().count();
            if len > 0 && len + 1 + word.chars().count() > width {
                out.push(std::mem::take(&mut cur));
                first = false;
            }
            if !cur.is_empty() {
                cur.push(' ');
            } else if !first {
                cur.push_str("  ");
            }
            cur.push_str(&word);
        }
        out.push(cur);
    }
    out.join("\n")
}

/// `s` in at most `n` characters: cut with an ellipsis when longer.
pub fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).chain(['…']).collect()
    }
}

fn markdown_blocks(blocks: &[Block], o: &mut String) {
    for b in blocks {
        let _ = match b {
            Block::Heading { level, text } => {
                writeln!(o, "{} {}\n", "#".repeat(usize::from(*level)), text.markdown(false))
            }
            Block::Line(text) => writeln!(o, "{}", text.markdown(false)),
            Block::Fact(text) => writeln!(o, "- {}", text.markdown(false)),
            Block::Labelled { label, text } => writeln!(o, "- **{label}** {}", text.markdown(false)),
            Block::Note(text) => writeln!(o, "({})", text.markdown(false)),
            Block::Table(t) => writeln!(o, "{}", t.markdown()),
            Block::Figure { path } => writeln!(o, "![{path}]({path})"),
            Block::Details { summary, blocks } => {
                let summary = summary.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
                let _ = writeln!(o, "<details><summary>{summary}</summary>\n");
                markdown_blocks(blocks, o);
                writeln!(o, "\n</details>")
            }
            Block::Blank => writeln!(o),
        };
    }
}

/// Path of `target` relative to the folder `from` is in (for Markdown links).
pub fn relative_to(target: &Path, from: Option<&Path>) -> String {
    let dir = from.and_then(Path::parent).unwrap_or(Path::new(""));
    target.strip_prefix(dir).unwrap_or(target).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Doc {
        let mut t = Table::new(["tap", "max |Δ|", "verdict"]).align("lrl");
        t.row([Cell::from(Text::code("a|b")), "0.5".into(), Cell::from("FAIL cosine").tone(Tone::Bad)]);
        t.row([Cell::from("c"), "".into(), "ok".into()]);
        let mut d = Doc::new();
        d.heading(2, "Title").fact(Text::from("uses ").and(Text::code("x|y"))).table(t);
        d.labelled("warning", Text::code("id").and(": why")).note("aside");
        d
    }

    #[test]
    fn markdown_escapes_pipes_in_cells_and_prose_but_not_in_prose_code() {
        let md = sample().markdown();
        assert_eq!(
            md,
            "## Title\n\n- uses `x|y`\n| tap | max \\|Δ\\| | verdict |\n|---|---:|---|\n\
             | `a\\|b` | 0.5 | FAIL cosine |\n| c |  | ok |\n- **warning** `id`: why\n(aside)\n"
        );
    }

    #[test]
    fn headless_markdown_table_has_an_empty_header_row() {
        let mut t = Table::headless();
        t.row(["command", "x"]);
        let mut d = Doc::new();
        d.table(t);
        assert_eq!(d.markdown(), "| | |\n|---|---|\n| command | x |\n");
    }

    #[test]
    fn terminal_is_plain_and_coloured_only_when_asked() {
        let plain = sample().terminal(false);
        assert!(plain.starts_with("Title\nuses x|y\n┌"), "{plain}");
        assert!(plain.contains("┆ FAIL cosine ┆") || plain.contains("┆ FAIL cosine │"), "{plain}");
        assert!(plain.ends_with("WARNING id: why\n(aside)\n"), "{plain}");
        assert!(!plain.contains('\u{1b}'));
        assert!(sample().terminal(true).contains('\u{1b}'));
    }

    #[test]
    fn padded_markdown_is_comfy_tables_ascii_markdown() {
        let mut t = Table::new(["severity", "id"]).padded();
        t.row(["warning", "output-order"]);
        let mut d = Doc::new();
        d.table(t);
        assert!(d.markdown().contains("| warning  | output-order |"), "{}", d.markdown());
    }

    #[test]
    fn json_is_the_document_with_a_schema() {
        let v: serde_json::Value = serde_json::from_str(&sample().json()).unwrap();
        assert_eq!(v["schema"], DOC_SCHEMA);
        assert_eq!(v["blocks"][0]["heading"]["level"], 2);
        assert_eq!(v["blocks"][1]["fact"], "uses x|y");
        assert_eq!(v["blocks"][2]["table"]["rows"][0], serde_json::json!(["a|b", "0.5", "FAIL cosine"]));
        assert_eq!(v["blocks"][2]["table"]["align"][1], "right");
    }
}
