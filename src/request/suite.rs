//! `hefprobe suite` (probes × targets against a baseline, for nightly jobs) and `hefprobe merge`
//! (shards back into one result): the night's result, its baseline ratcheted and its history
//! appended as asked.

use crate::backend::BackendSpec;
use crate::error::Result;
use crate::model::CheckpointRef;
use crate::output::Outputs;
use crate::probe::record::{Paths, SuiteRecord};
use crate::suite::outputs::{partial_reports, Night, SuiteOutputs};
use crate::suite::result::SuiteResult;
use crate::suite::run::{run_suite_with, Clock, SuiteOptions};
use crate::suite::shard::Shard;
use crate::suite::spec::Suite;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct SuiteRun {
    /// A SUITE.toml, or probe files.
    pub inputs: Vec<PathBuf>,
    /// Targets instead of the suite's (or each probe's own backends).
    pub backends: Vec<BackendSpec>,
    /// Shard `K/N`, and the shard count when the index comes from the environment.
    pub shard: Option<Shard>,
    pub shard_total: Option<usize>,
    pub hef_revision: Option<String>,
    pub no_explain: bool,
    pub spill_dir: Option<PathBuf>,
    /// Every probe's checkpoint instead of its own.
    pub checkpoint: Option<CheckpointRef>,
    pub out: SuiteOutputs,
    /// An evidence bundle's new (or empty) folder.
    pub bundle: Option<PathBuf>,
    /// The command that runs the whole suite (the same in every shard and in the merge).
    pub command: String,
}

/// `hefprobe merge`: the shards' JSON summaries into the outputs one run would give.
#[derive(Debug, Clone, Default)]
pub struct Merge {
    pub shards: Vec<PathBuf>,
    pub out: SuiteOutputs,
}

impl SuiteRun {
    pub fn run(&self) -> Result<Night> {
        crate::report::check::<SuiteResult>(&self.out.reports)?;
        let suite = Suite::open(&self.inputs, &self.backends)?;
        self.out.check(suite.inputs(self.checkpoint.as_ref(), self.spill_dir.as_deref())?)?;
        // A typo in --known is refused before the night's work, not after it.
        let labels = crate::suite::run::labels(&suite);
        let pairs: Vec<(String, String)> =
            suite.probes.iter().flat_map(|p| labels.iter().map(|t| (p.name.clone(), t.clone()))).collect();
        if !labels.is_empty() {
            for k in &self.out.known {
                crate::suite::baseline::known_pair(k, &pairs)?;
            }
        }
        let env = |k: &str| std::env::var(k).ok();
        let opts = SuiteOptions {
            baseline: self.out.baseline.clone(),
            update_baseline: self.out.update_baseline,
            shard: Shard::resolve(self.shard, self.shard_total, &env)?,
            hef_revision: self.hef_revision.clone(),
            command: self.command.clone(),
            clock: Clock::System,
            no_explain: self.no_explain,
            spill_dir: self.spill_dir.clone(),
            checkpoint: self.checkpoint.clone(),
        };
        if let Some(dir) = &self.bundle {
            crate::probe::bundle::check_new_folder(dir)?;
        }
        let result = run_suite_with(&suite, &opts, &mut partial_reports(&self.out))?;
        if let Some(dir) = &self.bundle {
            crate::suite::bundle::write(&result, &suite, &self.record().absolute(), dir)?;
        }
        self.out.finish(result)
    }

    /// What a bundle of this night records it asked for: what decides its pairs' figures.
    pub fn record(&self) -> SuiteRecord {
        SuiteRecord {
            inputs: self.inputs.clone(),
            backends: self.backends.clone(),
            checkpoint: self.checkpoint.clone(),
            baseline: self.out.baseline.clone(),
            no_explain: self.no_explain,
        }
    }
}

impl Merge {
    pub fn run(&self) -> Result<Night> {
        crate::report::check::<SuiteResult>(&self.out.reports)?;
        let mut outs = Outputs::new();
        for s in &self.shards {
            outs.input("a shard", s);
        }
        self.out.check(outs)?;
        let result = crate::suite::merge::merge_files(&self.shards, self.out.baseline.as_deref())?;
        self.out.finish(result)
    }
}
