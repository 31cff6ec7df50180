//! Every result a command writes is a [`Document`]: a probe report, a suite result, a
//! diagnosis, an audit, the fault matrix, a sweep, a trend, a bisection. It yields its document
//! model (terminal and Markdown), its JSON and its figures; [`deliver`] writes every
//! `--report FORMAT=PATH` of it and the terminal's share (ripgrep's one printer trait is the
//! model). A new format is one [`Format`] variant and one arm of [`render`], the one place a
//! format is matched.

use super::doc::Doc;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where reports go: `FORMAT=PATH` (`-` for stdout).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportTarget {
    pub format: Format,
    pub path: Option<PathBuf>,
}

crate::named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Format {
        Terminal = "terminal",
        Markdown = "markdown",
        Json = "json",
        Svg = "svg",
        /// JUnit XML (`hefprobe suite` and `merge`).
        Junit = "junit",
        /// One self-contained HTML page (`hefprobe suite` and `merge`).
        Html = "html",
    }
}

impl Format {
    /// `formats`' names as a sentence lists them: `terminal, markdown or json`.
    pub fn listed(formats: &[Format]) -> String {
        let names: Vec<&str> = formats.iter().map(|f| f.name()).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.concat(),
        }
    }
}

impl ReportTarget {
    /// `targets`, or `format` on stdout when none was asked for.
    pub fn or(mut targets: Vec<ReportTarget>, format: Format) -> Vec<ReportTarget> {
        if targets.is_empty() {
            targets.push(ReportTarget { format, path: None });
        }
        targets
    }

    /// `FORMAT`, `FORMAT=-` (stdout) or `FORMAT=PATH`; the one parser every reporting command's
    /// `--report` uses. An empty path is refused here, when the flags are read, not after a run.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let (f, p) = s.split_once('=').unwrap_or((s, "-"));
        if p.trim().is_empty() {
            return Err(format!("`{s}`: the path after `=` is empty; give {f}=PATH, or {f}=- for stdout"));
        }
        let format = match f {
            "table" => Format::Terminal,
            "md" => Format::Markdown,
            _ => Format::from_name(f)
                .ok_or_else(|| format!("report format `{f}`: expected {}", Format::listed(&Format::ALL)))?,
        };
        if format == Format::Svg && p == "-" {
            return Err(
                "svg reports need a path: svg=r.svg (the layer plot, r-heads-*.svg beside it) or a prefix, \
                 svg=reports/NAME (NAME-layers.svg, NAME-heads-*.svg)"
                    .into(),
            );
        }
        Ok(ReportTarget { format, path: (p != "-").then(|| PathBuf::from(p)) })
    }

    /// The flag as typed, for messages: `--report markdown=r.md`.
    pub fn flag(&self) -> String {
        let f = self.format.name();
        match &self.path {
            Some(p) => format!("--report {f}={}", p.display()),
            None => format!("--report {f}"),
        }
    }
}

/// A result that can be written. Formats beyond [`Document::FORMATS`] are refused before the
/// command runs ([`check`]); the default methods are the shared document's.
pub trait Document {
    /// The command that writes it (named when a format is refused).
    const COMMAND: &'static str;
    /// The formats it writes.
    const FORMATS: &'static [Format];
    /// Its figures are several files: `svg=r.svg` is the main one, `svg=NAME` a prefix
    /// (`NAME-layers.svg`, ...); see `report::svg::layers_path`.
    const FIGURE_PREFIX: bool = false;
    /// JUnit XML and one HTML page: a suite's alone.
    const SUITE_PAGES: Option<SuitePages<Self>> = None;

    /// Why `target` is refused: the formats [`Document::COMMAND`] writes.
    fn refusal(target: &ReportTarget) -> String {
        let names: Vec<&str> = Self::FORMATS.iter().map(|f| f.name()).collect();
        format!("{}: `{}` writes {}", target.flag(), Self::COMMAND, names.join(", "))
    }

    /// The document a terminal shows; `to` is the file it goes to (None: stdout), which files it
    /// names are relative to.
    fn doc(&self, to: Option<&Path>) -> Doc;

    /// The Markdown document; the terminal's unless it differs.
    fn markdown(&self, to: Option<&Path>) -> Doc {
        self.doc(to)
    }

    /// JSON: the document itself (schema hefprobe.doc/1) unless the result has a schema of its own.
    fn json(&self) -> String {
        self.doc(None).json()
    }

    /// Write the figures at `path`; the documents rendered after may link them.
    fn figures(&mut self, _path: &Path) -> Result<()> {
        Ok(())
    }
}

/// The pages only a suite writes (`hefprobe suite` and `merge`): its renderers, in `suite/`
/// above this layer.
pub struct SuitePages<D: ?Sized> {
    pub junit: fn(&D) -> String,
    pub html: fn(&D) -> Result<String>,
}

/// Refuse, before anything runs, a format `D` is not written in, and a second report on stdout
/// (two documents run together there, which no reader can take apart).
pub fn check<D: Document>(targets: &[ReportTarget]) -> Result<()> {
    if let Some(t) = targets.iter().find(|t| !D::FORMATS.contains(&t.format)) {
        return Err(Error::usage(D::refusal(t)));
    }
    match targets.iter().filter(|t| t.path.is_none()).collect::<Vec<_>>().as_slice() {
        [a, b, ..] => Err(Error::usage(format!(
            "{} and {} both go to stdout; one report at most goes there: give the other a PATH",
            a.flag(),
            b.flag()
        ))),
        _ => Ok(()),
    }
}

/// Check the formats and register every file the targets write with the output checks made
/// before any compute (a figure prefix by the first file it writes).
pub fn register<D: Document>(targets: &[ReportTarget], outputs: &mut crate::output::Outputs) -> Result<()> {
    check::<D>(targets)?;
    for t in targets {
        let Some(p) = &t.path else { continue };
        if t.format == Format::Svg && D::FIGURE_PREFIX {
            outputs.file(&t.flag(), &super::svg::layers_path(p).0);
        } else {
            outputs.file(&t.flag(), p);
        }
    }
    Ok(())
}

/// The width text printed on stdout must fit: `COLUMNS` when set (a number of at least 20),
/// else the terminal's own when stdout is one, else none (a pipe or a file: lines stay whole).
pub fn terminal_width() -> Option<usize> {
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok());
    columns.filter(|c| *c >= 20).or_else(|| comfy_table::Table::new().width().map(usize::from))
}

/// One target's text. `color`: the terminal's own colours, for stdout on a terminal; terminal
/// text on stdout fits [`terminal_width`].
pub fn render<D: Document>(d: &D, target: &ReportTarget, color: bool) -> Result<String> {
    let to = target.path.as_deref();
    Ok(match target.format {
        Format::Terminal => {
            d.doc(to).terminal_fit(color && to.is_none(), to.map_or_else(terminal_width, |_| None))
        }
        Format::Markdown => d.markdown(to).markdown(),
        Format::Json => d.json(),
        Format::Junit | Format::Html => {
            let refused = || Error::usage(D::refusal(&ReportTarget { format: target.format, path: None }));
            let pages = D::SUITE_PAGES.ok_or_else(refused)?;
            if target.format == Format::Junit {
                (pages.junit)(d)
            } else {
                (pages.html)(d)?
            }
        }
        Format::Svg => {
            return Err(Error::usage(format!("{}: figures are written, not printed", target.flag())))
        }
    })
}

/// Write every target: the figures first (the documents link them), then each format to its
/// file (written atomically, announced) or to stdout, which is returned.
pub fn write<D: Document>(d: &mut D, targets: &[ReportTarget], color: bool) -> Result<String> {
    let (figures, texts): (Vec<&ReportTarget>, Vec<&ReportTarget>) =
        targets.iter().partition(|t| t.format == Format::Svg);
    for t in figures {
        d.figures(t.path.as_deref().unwrap_or(Path::new(D::COMMAND)))?;
    }
    let mut stdout = String::new();
    for t in texts {
        let text = render(d, t, color)?;
        match &t.path {
            None => stdout.push_str(&text),
            Some(p) => crate::files::write_file(p, text)?,
        }
    }
    Ok(stdout)
}

/// [`write`] every target, and print stdout's share once all are written (in colour on a
/// terminal).
pub fn deliver<D: Document>(d: &mut D, targets: &[ReportTarget]) -> Result<()> {
    use std::io::IsTerminal;
    crate::out!("{}", write(d, targets, std::io::stdout().is_terminal())?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Plain;
    impl Document for Plain {
        const COMMAND: &'static str = "plain";
        const FORMATS: &'static [Format] = &[Format::Terminal];
        fn doc(&self, _to: Option<&Path>) -> Doc {
            Doc::new()
        }
    }

    #[test]
    fn junit_and_html_are_refused_without_suite_pages() {
        let to = |format| ReportTarget { format, path: Some(PathBuf::from("x")) };
        let refused = render(&Plain, &to(Format::Junit), false).unwrap_err().to_string();
        assert!(refused.contains("--report junit: `plain` writes terminal"), "{refused}");
        assert!(render(&Plain, &to(Format::Html), false).unwrap_err().to_string().contains("--report html:"));
    }

    #[test]
    fn format_lists_are_made_from_the_formats() {
        let unknown = ReportTarget::parse("pdf").unwrap_err();
        assert_eq!(unknown, "report format `pdf`: expected terminal, markdown, json, svg, junit or html");
        let run = crate::report::Report::refusal(&ReportTarget { format: Format::Junit, path: None });
        assert_eq!(
            run,
            "--report junit: JUnit and HTML reports are written by `hefprobe suite` and `hefprobe merge`; \
             a single run writes terminal, markdown, json or svg"
        );
        assert_eq!(Format::listed(&[Format::Json]), "json");
    }
}
