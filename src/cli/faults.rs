//! `hefprobe faults`: the fault catalog, and with `--matrix` the proof that each fault is
//! located and ranked first (reports/fault-localization.md is its output).

use super::args::{command_line, deprecated};
use crate::error::Result;
use crate::model::CheckpointRef;
use crate::report::{deliver, Format, ReportTarget};
use crate::request::faults::FaultList;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct FaultsArgs {
    /// Inject every fault into a synthesized model and check it is located and ranked first.
    #[arg(long)]
    pub matrix: bool,
    /// FORMAT=PATH, several allowed; FORMAT: terminal, markdown, json (schema hefprobe.doc/1);
    /// PATH `-` is stdout. Default: the catalog as a table, the matrix as Markdown.
    #[arg(long = "report", value_name = "FORMAT=PATH", value_parser = ReportTarget::parse)]
    pub reports: Vec<ReportTarget>,
    /// Deprecated: --report markdown=PATH.
    #[arg(long, value_name = "PATH", requires = "matrix", hide = true)]
    pub markdown: Option<PathBuf>,
    /// Run the matrix on this checkpoint (HF folder or .gguf) instead of the synthesized model.
    #[arg(long, value_name = "PATH", requires = "matrix")]
    pub checkpoint: Option<PathBuf>,
    /// Prompt text for --checkpoint, with its tokenizer (default: 12 fixed token ids).
    #[arg(long, requires = "checkpoint")]
    pub text: Option<String>,
    /// Greedy decode steps for --checkpoint, then teacher-forced in every run.
    #[arg(long, default_value_t = 3, requires = "checkpoint")]
    pub decode: usize,
    /// Deprecated: --report json.
    #[arg(long, conflicts_with = "markdown", hide = true)]
    pub json: bool,
}

impl FaultsArgs {
    fn targets(&self) -> Vec<ReportTarget> {
        let mut t = self.reports.clone();
        t.extend(self.markdown.as_ref().map(|p| deprecated("--markdown", Format::Markdown, Some(p))));
        t.extend(self.json.then(|| deprecated("--json", Format::Json, None)));
        ReportTarget::or(t, if self.matrix { Format::Markdown } else { Format::Terminal })
    }
}

/// Exit 1 when the matrix finds a fault that is not located or not ranked first (a failed check).
pub fn run(a: FaultsArgs) -> Result<ExitCode> {
    let request = FaultList {
        reports: a.targets(),
        matrix: a.matrix,
        checkpoint: a.checkpoint.as_deref().map(CheckpointRef::path),
        text: a.text,
        decode: a.decode,
        command: command_line(),
    };
    let mut faults = request.run()?;
    deliver(&mut faults, &request.reports)?;
    Ok(if faults.failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
