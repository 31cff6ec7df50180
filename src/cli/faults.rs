//! `hefprobe faults`: the fault catalog, and with `--matrix` the proof that each fault is
//! located and ranked first (reports/fault-localization.md is its output).

use super::run::command_line;
use crate::error::Result;
use crate::explain::matrix::{doc, matrix_model, run_matrix_on, setup_of, synth_setup};
use crate::fault::catalog::REGISTRY;
use crate::model::Checkpoint;
use crate::probe::run::build_inputs;
use crate::probe::schema::InputsSpec;
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
    /// Run the matrix on this checkpoint (HF folder or .gguf) instead of the synthesized model.
    #[arg(long, value_name = "PATH", requires = "matrix")]
    pub checkpoint: Option<PathBuf>,
    /// Prompt text for --checkpoint, with its tokenizer (default: 12 fixed token ids).
    #[arg(long, requires = "checkpoint")]
    pub text: Option<String>,
    /// Greedy decode steps for --checkpoint, then teacher-forced in every run.
    #[arg(long, default_value_t = 3, requires = "checkpoint")]
    pub decode: usize,
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
    let (ckpt, inputs, setup) = match &a.checkpoint {
        None => {
            let (ckpt, inputs) = matrix_model()?;
            (ckpt, inputs, synth_setup())
        }
        Some(path) => {
            let ckpt = Checkpoint::load(path)?;
            // Without text: the synthesized matrix's token pattern, within this vocabulary.
            let vocab = ckpt.config.vocab_size as u32;
            let spec = InputsSpec {
                tokens: a.text.is_none().then(|| (0..12).map(|i| (i * 41 + 7) % vocab).collect()),
                text: a.text.clone(),
                decode: Some(a.decode),
                ..Default::default()
            };
            let inputs = build_inputs(&spec, &ckpt)?;
            let setup = setup_of(&ckpt, &inputs);
            (ckpt, inputs, setup)
        }
    };
    let rows = run_matrix_on(&ckpt, &inputs)?;
    let d = doc(&rows, &command_line(), &setup, &ckpt.config);
    match &a.markdown {
        Some(p) => {
            crate::error::write_file(p, d.markdown())?;
            println!("wrote {}", p.display());
        }
        None => print!("{}", if a.json { d.json() } else { d.markdown() }),
    }
    Ok(if rows.iter().all(|r| r.ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
