//! `hefprobe faults`: the fault catalog, and with `--matrix` the proof that each fault is
//! located and ranked first (reports/fault-localization.md is its output).

use super::run::command_line;
use crate::error::Result;
use crate::explain::matrix::{render_markdown, run_matrix};
use crate::fault::catalog::REGISTRY;
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
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
}

pub fn run(a: FaultsArgs) -> Result<ExitCode> {
    if !a.matrix {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).force_no_tty();
        t.set_header(vec!["fault", "finding", "what it computes"]);
        for f in REGISTRY {
            t.add_row(vec![
                f.name.to_string(),
                f.finding.map_or("-".into(), |f| f.to_string()),
                f.summary.to_string(),
            ]);
        }
        println!("{t}");
        println!("spec: NAME[:PARAMS][@layers=RANGE], e.g. shared-softmax@layers=0, rope:interleaved,target=q, position-shift:1");
        return Ok(ExitCode::SUCCESS);
    }
    let rows = run_matrix()?;
    let md = render_markdown(&rows, &command_line());
    match &a.markdown {
        Some(p) => {
            crate::error::write_file(p, &md)?;
            println!("wrote {}", p.display());
        }
        None => print!("{md}"),
    }
    Ok(if rows.iter().all(|r| r.ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
