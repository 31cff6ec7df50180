//! `hefprobe merge`: the shards' JSON summaries back into the one result an unsharded run
//! gives — every pair of the plan exactly once, in plan order, counts recomputed, times added
//! up, the earliest shard's date — so every output rendered from it (JUnit, JSON, Markdown,
//! HTML, history, baseline) is the unsharded run's, timings aside.

use super::result::{Counts, PairResult, SuiteResult, Timing, SUITE_SCHEMA};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub fn read(path: &Path) -> Result<SuiteResult> {
    let what = path.display().to_string();
    let text = crate::files::read_text(path, crate::files::Kind::Report)?;
    let r: SuiteResult = serde_json::from_str(&text)
        .map_err(|e| Error::input(&what, format!("not a `hefprobe suite --report json=` file: {e}")))?;
    if r.schema != SUITE_SCHEMA {
        return Err(Error::input(
            format!("{what} key `schema`"),
            format!("`{}`; this hefprobe merges `{SUITE_SCHEMA}`", r.schema),
        ));
    }
    super::check::result(&what, &r)?;
    Ok(r)
}

pub fn merge_files(paths: &[PathBuf], baseline: Option<&Path>) -> Result<SuiteResult> {
    let shards =
        paths.iter().map(|p| read(p).map(|r| (p.display().to_string(), r))).collect::<Result<Vec<_>>>()?;
    let mut merged = merge(shards)?;
    if let Some(path) = baseline {
        rejudge(&mut merged, &super::baseline::Baseline::load(path)?, path);
    }
    Ok(merged)
}

/// Judge every pair of a merged night against `baseline`, as an unsharded run with
/// `--baseline` does: figures worse than the baseline by more than the pair's noise band are
/// `regressed`; a drift no worse than it is `known` where a person accepted it by name. A pair a shard already judged against
/// another baseline is judged again against this one; pairs that stopped or were flaky keep
/// what they said.
pub fn rejudge(r: &mut SuiteResult, baseline: &super::baseline::Baseline, path: &Path) {
    use super::result::Status;
    for pair in &mut r.pairs {
        if !matches!(pair.status, Status::Pass | Status::Failed | Status::Known | Status::Regressed) {
            continue;
        }
        let (Some(base), Some(band)) = (baseline.get(&pair.probe, &pair.target), pair.band) else { continue };
        // Within thresholds: passed, or regressed with no drift located.
        let passed =
            pair.status == Status::Pass || pair.status == Status::Regressed && pair.located.is_none();
        pair.regressions = super::figures::regressions(&pair.figures, base, &band);
        pair.baseline = Some(base.clone());
        let accepted = baseline.is_known(&pair.probe, &pair.target);
        pair.status = Status::judged(passed, accepted, !pair.regressions.is_empty());
    }
    r.counts = Counts::of(&r.pairs);
    r.baseline = Some(path.display().to_string());
}

/// Merge shard results (named by where they came from, for errors).
pub fn merge(mut shards: Vec<(String, SuiteResult)>) -> Result<SuiteResult> {
    let Some((first_name, _)) = shards.first() else {
        return Err(Error::usage("merge: give the shards' JSON files (hefprobe suite --report json=PATH)"));
    };
    let first_name = first_name.clone();
    shards.sort_by_key(|(_, r)| r.shard.map(|s| s.index));
    let plan = shards[0].1.plan.clone();
    for (name, r) in &shards {
        if !r.unfinished.is_empty() {
            return Err(Error::input(
                name,
                format!(
                    "is an interrupted shard: {}; run that shard again",
                    super::summary::unfinished_sentence(r)
                ),
            ));
        }
        if r.plan != plan || r.suite != shards[0].1.suite {
            return Err(Error::input(
                name,
                format!("is a shard of another suite or plan than {first_name}; merge shards of one run"),
            ));
        }
    }
    let mut pairs: Vec<Option<PairResult>> = vec![None; plan.len()];
    let mut holder: Vec<Option<&str>> = vec![None; plan.len()];
    for (name, r) in &shards {
        for p in &r.pairs {
            let i =
                plan.iter().position(|e| e.probe == p.probe && e.target == p.target).ok_or_else(|| {
                    Error::input(name, format!("pair {} × {} is not in the plan", p.probe, p.target))
                })?;
            if let Some(other) = holder[i] {
                return Err(Error::input(
                    name,
                    format!("pair {} × {} is also in {other}: each shard once, please", p.probe, p.target),
                ));
            }
            holder[i] = Some(name);
            pairs[i] = Some(p.clone());
        }
    }
    let missing: Vec<String> = plan
        .iter()
        .zip(&pairs)
        .filter(|(_, p)| p.is_none())
        .map(|(e, _)| format!("{} × {}", e.probe, e.target))
        .collect();
    if !missing.is_empty() {
        let totals: Vec<String> = shards.iter().filter_map(|(_, r)| r.shard.map(|s| s.to_string())).collect();
        return Err(Error::input(
            "merge",
            format!(
                "{} pairs of the plan are in no shard given (shards given: {}): {}; is a shard's file missing?",
                missing.len(),
                if totals.is_empty() { "none marked".into() } else { totals.join(", ") },
                missing.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    let pairs: Vec<PairResult> = pairs.into_iter().flatten().collect();
    let mut timing = Timing::default();
    for (_, r) in &shards {
        timing.add(&r.timing);
    }
    let date = shards.iter().map(|(_, r)| r.date.clone()).min().unwrap_or_default();
    let findings = super::findings::merge(shards.iter().map(|(_, r)| r.findings.clone()));
    let base = shards.swap_remove(0).1;
    Ok(SuiteResult { date, shard: None, counts: Counts::of(&pairs), timing, pairs, findings, ..base })
}
