//! What a suite run decides, as plain data: one [`PairResult`] per probe × target with a typed
//! [`Status`], and the [`SuiteResult`] around them. Serialized, it is the JSON summary
//! (`hefprobe.suite/1`) and also a shard's file: `hefprobe merge` reads shards back and renders
//! every output from them, so everything a report shows is in here.

use super::figures::{Band, Figures, PhaseSeries, Regression};
use super::shard::Shard;
use super::spec::{BandFloors, GateSpec};
use crate::backend::BackendKind;
use crate::device::DeviceFacts;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SUITE_SCHEMA: &str = "hefprobe.suite/1";

crate::named_enum! {
    /// How a pair ended. Decided once, in `suite::run`; exit codes and every report read it.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Status {
        /// Worse than its baseline by more than the noise band (confirmed by a re-run).
        Regressed = "regressed",
        /// Beyond its thresholds, and not accepted as known by name (confirmed by a re-run).
        Failed = "failed",
        /// The device disagreed with itself in the repeatability gate: not compared.
        Unstable = "unstable",
        /// The pair could not run (input, device or runtime error).
        Error = "error",
        /// Failed once, passed on the re-run.
        Flaky = "flaky",
        /// Beyond its thresholds, accepted as known by a person (`--known PROBE/TARGET`), and no
        /// worse than its baseline.
        Known = "known",
        #[default]
        Pass = "pass",
        /// Nothing to run (a sweep probe).
        Skipped = "skipped",
    }
}

impl Status {
    /// A compared pair's verdict: within its thresholds or not, accepted as a known failure by
    /// a person (by name, in the baseline) or not, and with figures worse than its baseline
    /// (beyond the band) or not. A regression outranks the rest; a failure nobody accepted by
    /// name is "failed" whatever the baseline holds.
    pub fn judged(passed: bool, accepted: bool, regressed: bool) -> Status {
        match (passed, accepted, regressed) {
            (_, _, true) => Status::Regressed,
            (true, _, _) => Status::Pass,
            (false, true, false) => Status::Known,
            (false, false, false) => Status::Failed,
        }
    }

    /// Fails the run (and the pull request).
    pub fn is_failure(self) -> bool {
        matches!(self, Status::Regressed | Status::Failed | Status::Unstable | Status::Error)
    }
}

crate::named_enum! {
    /// What a run says of one finding on one target.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum FindingStatus {
        /// Every criterion of the claim holds.
        Reproduces = "reproduces",
        /// The pair drifts, but elsewhere or explained otherwise than claimed.
        Changed = "changed",
        /// The pair ran within its thresholds.
        Fixed = "fixed",
        /// The pair did not run here (another shard, an error, an unstable device, not planned).
        #[default]
        NotRun = "not-run",
    }
}

/// One finding on one target, as a run (or a merge) saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindingResult {
    pub claim: super::spec::Claim,
    pub target: String,
    pub status: FindingStatus,
    /// What the pair said that decided the status.
    pub why: String,
    /// Fails the run: expected fixed and reproducing, or stopped with `fail_if_stops`.
    pub fails: bool,
    /// From the history (when one is given): the last run it reproduced in, and the date its
    /// current status began.
    #[serde(default)]
    pub last_reproduced: Option<String>,
    #[serde(default)]
    pub since: Option<String>,
}

/// Why a pair could not run, and whose fault that is (the exit code: input 2, device 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorKind {
    /// A file, key or flag is wrong (a HEF for another architecture or checkpoint, a probe the
    /// HEF cannot take).
    Input,
    /// The device or runtime failed.
    Device,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairError {
    pub kind: ErrorKind,
    pub message: String,
}

impl PairError {
    pub fn from_error(e: &crate::error::Error) -> PairError {
        use crate::error::Error as E;
        let kind = match e {
            E::Device(_) | E::Compute { .. } => ErrorKind::Device,
            _ => ErrorKind::Input,
        };
        PairError { kind, message: e.to_string() }
    }
}

/// The repeatability gate of one pair: the same InputSet `runs` times on the device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateResult {
    pub runs: usize,
    /// Largest |Δ logit| between run 1 and a later run, and where.
    pub max_abs: f64,
    pub worst_key: Option<String>,
    /// Run 1 against the later runs: lowest logits cosine, SQNR (None: identical), highest KL,
    /// lowest argmax agreement.
    pub cosine: f64,
    pub sqnr_db: Option<f64>,
    pub kl: f64,
    pub argmax: f64,
    pub stable: bool,
}

/// One probe × target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairResult {
    pub probe: String,
    pub probe_file: Option<String>,
    pub finding: Option<u32>,
    pub target: String,
    pub kind: Option<BackendKind>,
    pub status: Status,
    /// The first drift beyond thresholds, as the run report words it ("prefill: first drift at
    /// logits — cosine …").
    pub located: Option<String>,
    /// The first failed bound at the first drift, in the fewest words (the verdict line's
    /// figure: `cosine 0.52628, expected after quantization ≥ 0.999`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_bound: Option<String>,
    /// Figures worse than the baseline by more than the band, taps in network order.
    pub regressions: Vec<Regression>,
    /// The first drifting tap (of `located`).
    #[serde(default)]
    pub first_drift: Option<String>,
    /// The explain verdict of a confirmed failure.
    pub explanation: Option<String>,
    /// The fault explain ranked first, when it explains the drift (of `explanation`).
    #[serde(default)]
    pub best_explanation: Option<String>,
    /// What the first run said, when a failing pair was re-run (flaky, or confirmed).
    pub first_run: Option<String>,
    /// Why a pair was skipped; or, for a pair that ran, how (its captures spilled to disk).
    pub note: Option<String>,
    pub gate: Option<GateResult>,
    pub band: Option<Band>,
    /// Worst figures per tap over the run's phases.
    pub figures: BTreeMap<String, Figures>,
    /// The baseline the pair was judged against.
    pub baseline: Option<BTreeMap<String, Figures>>,
    /// Cosine per phase of `logits` and of the located tap, for the plots.
    pub series: Vec<PhaseSeries>,
    /// The device that ran it (each shard may run on another host).
    pub device: Option<DeviceFacts>,
    pub hef_revision: Option<String>,
    pub error: Option<PairError>,
    /// Wall time of this pair: its share of the probe run plus its own gate, re-run, explain.
    pub seconds: f64,
}

impl PairResult {
    /// A pair with nothing decided yet.
    pub fn new(probe: &crate::probe::schema::Probe, target: &str, kind: Option<BackendKind>) -> PairResult {
        PairResult {
            probe: probe.name.clone(),
            probe_file: Some(probe.path.display().to_string()),
            finding: probe.finding,
            target: target.to_string(),
            kind,
            ..PairResult::default()
        }
    }

    pub fn key(&self) -> (String, String) {
        (self.probe.clone(), self.target.clone())
    }
}

/// A pair of the whole suite, in report order (every shard carries the whole plan).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEntry {
    pub probe: String,
    pub target: String,
}

impl PlanEntry {
    pub fn new(probe: &str, target: &str) -> PlanEntry {
        PlanEntry { probe: probe.into(), target: target.into() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetInfo {
    pub label: String,
    pub kind: BackendKind,
    pub path: Option<String>,
    pub revision: Option<String>,
}

/// Pairs per status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    pub pairs: usize,
    pub pass: usize,
    pub known: usize,
    pub flaky: usize,
    pub regressed: usize,
    pub failed: usize,
    pub unstable: usize,
    pub error: usize,
    pub skipped: usize,
}

impl Counts {
    pub fn of(pairs: &[PairResult]) -> Counts {
        let mut c = Counts { pairs: pairs.len(), ..Counts::default() };
        for p in pairs {
            *c.slot(p.status) += 1;
        }
        c
    }

    fn slot(&mut self, s: Status) -> &mut usize {
        match s {
            Status::Pass => &mut self.pass,
            Status::Known => &mut self.known,
            Status::Flaky => &mut self.flaky,
            Status::Regressed => &mut self.regressed,
            Status::Failed => &mut self.failed,
            Status::Unstable => &mut self.unstable,
            Status::Error => &mut self.error,
            Status::Skipped => &mut self.skipped,
        }
    }

    pub fn get(&self, s: Status) -> usize {
        let mut c = self.clone();
        *c.slot(s)
    }
}

/// Where the time went. `probes` is what `hefprobe run` would have spent on the same pairs
/// (prepare, reference, backends, compare); the rest is the suite's own work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    pub total: f64,
    pub probes: f64,
    /// Opening each device once, reading its facts.
    pub devices: f64,
    pub gate: f64,
    pub reruns: f64,
    pub explain: f64,
}

impl Timing {
    pub fn add(&mut self, o: &Timing) {
        self.total += o.total;
        self.probes += o.probes;
        self.devices += o.devices;
        self.gate += o.gate;
        self.reruns += o.reruns;
        self.explain += o.explain;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteResult {
    pub schema: String,
    pub hefprobe: String,
    pub suite: String,
    pub file: Option<String>,
    /// The command that runs the whole suite (a `--shard` flag left out).
    pub command: String,
    /// When the run started (UTC, RFC 3339); a merge keeps the earliest shard's.
    pub date: String,
    /// This file's shard; None for a whole run or a merge.
    pub shard: Option<Shard>,
    pub plan: Vec<PlanEntry>,
    pub targets: Vec<TargetInfo>,
    pub gate: GateSpec,
    pub floors: BandFloors,
    /// The baseline file the pairs were judged against.
    pub baseline: Option<String>,
    pub counts: Counts,
    pub timing: Timing,
    pub pairs: Vec<PairResult>,
    /// Pairs of this shard not run when the file was written: the run was interrupted (the
    /// reports are rewritten after each probe). Empty in a finished run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfinished: Vec<PlanEntry>,
    /// The suite's `[[finding]]` claims, judged on this run's pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<FindingResult>,
}

impl SuiteResult {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("suite results serialize") + "\n"
    }

    /// The exit code every command shares: 2 an input or usage error, 3 a device or runtime
    /// error (an unstable device included), 1 a regression or failed probe, 0 otherwise (known
    /// failures and flaky pairs included). A shard's drift is 0: its pairs are judged when the
    /// shards are merged (`merge` exits 1 for them), so `suite --shard K/N ... && hefprobe merge`
    /// reaches the merge; errors still fail a shard.
    pub fn exit_code(&self) -> u8 {
        let any = |f: &dyn Fn(&PairResult) -> bool| self.pairs.iter().any(f);
        if any(&|p| p.error.as_ref().is_some_and(|e| e.kind == ErrorKind::Input)) {
            2
        } else if any(&|p| p.status == Status::Unstable || p.status == Status::Error) {
            3
        } else if self.drifts() && self.shard.is_none() {
            1
        } else {
            0
        }
    }

    /// A regression, a failed pair or a failing finding: exit 1 for a whole run.
    pub fn drifts(&self) -> bool {
        self.pairs.iter().any(|p| matches!(p.status, Status::Regressed | Status::Failed))
            || self.findings.iter().any(|f| f.fails)
    }
}
