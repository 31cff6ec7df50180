//! `hefprobe faults`: the fault catalog, and with `--matrix` the proof that each fault is
//! located and ranked first (reports/fault-localization.md is its output).

use super::run::command_line;
use super::{deliver_all, deprecated};
use crate::error::Result;
use crate::explain::matrix::{matrix_model, run_matrix_on, setup_of, synth_setup};
use crate::fault::catalog::REGISTRY;
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::schema::InputsSpec;
use crate::report::doc::{Doc, Table};
use crate::report::matrix::doc;
use crate::report::{only, Format, ReportTarget};
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

fn render(d: &Doc, t: &ReportTarget) -> String {
    match t.format {
        Format::Json => d.json(),
        Format::Markdown => d.markdown(),
        _ => d.terminal(false),
    }
}

/// Exit 1 when the matrix finds a fault that is not located or not ranked first (a failed check).
pub fn run(a: FaultsArgs) -> Result<ExitCode> {
    let targets = a.targets();
    only(&targets, "faults", &[Format::Terminal, Format::Markdown, Format::Json])?;
    let checkpoint = a.checkpoint.as_deref().map(CheckpointRef::path);
    let mut outs = Outputs::new();
    if let Some(c) = &checkpoint {
        c.register("the checkpoint", &mut outs)?;
    }
    crate::report::register(&targets, &mut outs);
    outs.check()?;
    if !a.matrix {
        let mut t = Table::new(["fault", "finding", "what it computes"]);
        for f in REGISTRY {
            t.row([
                f.name.to_string(),
                f.finding.map_or("-".into(), |f| f.to_string()),
                f.summary.to_string(),
            ]);
        }
        let mut d = Doc::new();
        d.table(t).line(
            "spec: NAME[:PARAMS][@layers=RANGE], e.g. shared-softmax@layers=0, rope:interleaved,target=q, position-shift:1",
        );
        deliver_all(&targets, |t| render(&d, t))?;
        return Ok(ExitCode::SUCCESS);
    }
    let (ckpt, inputs, setup) = match &checkpoint {
        None => {
            let (ckpt, inputs) = matrix_model()?;
            (ckpt, inputs, synth_setup())
        }
        Some(c) => {
            let ckpt = c.load()?;
            // Without text: the synthesized matrix's token pattern, within this vocabulary.
            let vocab = ckpt.config.vocab_size as u32;
            let spec = InputsSpec {
                tokens: a.text.is_none().then(|| (0..12).map(|i| (i * 41 + 7) % vocab).collect()),
                text: a.text.clone(),
                decode: Some(a.decode),
                ..Default::default()
            };
            let inputs = spec.input_set(&ckpt)?;
            let setup = setup_of(&ckpt, &inputs);
            (ckpt, inputs, setup)
        }
    };
    let rows = run_matrix_on(&ckpt, &inputs)?;
    let d = doc(&rows, &command_line(), &setup, crate::fault::catalog::grid(&ckpt.config).len());
    deliver_all(&targets, |t| render(&d, t))?;
    Ok(if rows.iter().all(|r| r.ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
