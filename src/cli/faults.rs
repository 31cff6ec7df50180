//! `hefprobe faults`: the fault catalog, and with `--matrix` the proof that each fault is
//! located and ranked first (reports/fault-localization.md is its output).

use super::run::command_line;
use crate::error::Result;
use crate::explain::matrix::{doc, run_matrix};
use crate::fault::catalog::REGISTRY;
use crate::report::doc::{Doc, Table};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct FaultsArgs {
    /// Inject every fault into a synthesized model and check it is located and ranked first.
    #[arg(long)]
    pub matrix: bool,
    /// Write the matrix as Markdown here (default: print it).
    #[arg(long, value_name = "PATH", requires = "matrix")]
    pub markdown: Option<PathBuf>,
    /// Print the catalog (or the matrix) as JSON (schema hefprobe.doc/1) instead.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
}

pub fn run(a: FaultsArgs) -> Result<ExitCode> {
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
        print!("{}", if a.json { d.json() } else { d.terminal(false) });
        return Ok(ExitCode::SUCCESS);
    }
    let rows = run_matrix()?;
    let d = doc(&rows, &command_line());
    match &a.markdown {
        Some(p) => {
            crate::error::write_file(p, d.markdown())?;
            println!("wrote {}", p.display());
        }
        None => print!("{}", if a.json { d.json() } else { d.markdown() }),
    }
    Ok(if rows.iter().all(|r| r.ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
