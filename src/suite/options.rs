//! How a suite run is set up: the command line's settings and the clock its times and date
//! come from.

use super::shard::Shard;
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

/// Where times and the date come from. `Fixed` makes a run's outputs a function of its
/// results alone (durations 0, the given date), as the merge test needs to compare bytes.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Clock {
    #[default]
    System,
    Fixed(String),
}

impl Clock {
    pub fn date(&self) -> String {
        match self {
            Clock::System => rfc3339(SystemTime::now()),
            Clock::Fixed(d) => d.clone(),
        }
    }

    pub(super) fn start(&self) -> Stopwatch {
        Stopwatch((*self == Clock::System).then(Instant::now))
    }
}

pub(super) struct Stopwatch(Option<Instant>);

impl Stopwatch {
    pub(super) fn secs(&self) -> f64 {
        self.0.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }
}

/// UTC, to the second: `2025-01-31T02:00:00Z` (the civil date from days since 1970, after
/// Howard Hinnant's `civil_from_days`).
pub fn rfc3339(t: SystemTime) -> String {
    let [y, m, d, hh, mm, ss] = crate::model::chat::utc_fields(t);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// Command-line settings of a suite run.
#[derive(Debug, Clone, Default)]
pub struct SuiteOptions {
    pub baseline: Option<PathBuf>,
    /// The baseline is about to be written: a missing file is an empty baseline.
    pub update_baseline: bool,
    pub shard: Option<Shard>,
    /// The HEF build's revision, for targets whose suite entry and sidecar do not say.
    pub hef_revision: Option<String>,
    /// The command that runs the whole suite.
    pub command: String,
    pub clock: Clock,
    pub no_explain: bool,
    /// Where captures over the memory budget are spilled (`--spill-dir`; default the system's
    /// temporary folder).
    pub spill_dir: Option<PathBuf>,
    /// Every probe's checkpoint instead of its own (`--checkpoint`): the catalog on your model.
    pub checkpoint: Option<crate::model::CheckpointRef>,
}
