//! A finding's record as data (`probes/findings/N.toml`): every observation its pages record —
//! the checkpoint's shape (hidden, layers, heads, kv heads, vocabulary, lm_head shards, tied
//! embeddings), the recipe it was quantized with, what ran on the chip (the base-scope frame, or
//! a prefill), the prompt where there is one, and what happened: coherent, a token repeated, off
//! the reference without repeating, or figures (a cosine, per shard, an argmax at a position) —
//! and the causes the finding cleared. `hefprobe explain --pattern` judges every hypothesis of the
//! catalog against each observation on its own shape and recipe ([`judge`], on stand-ins from
//! [`bed`]), and names the shapes whose outcomes would decide between the survivors
//! ([`decide`]). Unknown keys, values out of bounds and a record that would cost more than
//! [`MAX_COST`] are refused naming the file and the key, with the fix (exit 2).

pub mod bed;
pub mod decide;
pub mod doc;
pub mod judge;
mod record;

pub use record::{
    At, Cause, Cleared, Defaults, Figure, Metric, Observation, Outcome, Pattern, Scope, MAX_COST,
    MAX_OBSERVATIONS, MAX_PROMPT, MAX_TOKENS, PATTERN_VERSION,
};

use crate::error::{Error, Result};

/// Judge every hypothesis of the catalog and every cleared cause against `p` (observations of
/// the checkpoint's shape on `ckpt`, the others on synthesized stand-ins), on `threads` threads,
/// and name the deciding experiment.
pub fn explain(p: &Pattern, ckpt: &crate::model::Checkpoint, threads: usize) -> Result<doc::Explained> {
    // The hypotheses ranked on `ckpt`: the catalog's grid on this model (every fault over all
    // layers, with its searched parameters; see [`judge::grid_note`]).
    let specs = crate::fault::catalog::grid(&ckpt.config);
    p.check_cost(specs.len() + 1, &p.path.display().to_string())?;
    for (i, o) in p.observations.iter().enumerate() {
        if let Some(r) = o.recipe(&p.defaults) {
            crate::fault::catalog::build(r, &ckpt.config).map_err(|e| {
                Error::input(
                    format!("{} {} key `recipe`", p.path.display(), p.observation_name(i)),
                    e.to_string(),
                )
            })?;
        }
    }
    let (mut judged, stood_in, emulations) = judge::judge_catalog(p, ckpt, &specs, threads)?;
    judge::rank(&mut judged);
    Ok(doc::Explained {
        finding: p.finding,
        summary: p.summary.clone(),
        record: p.path.display().to_string(),
        checkpoint: ckpt.source.to_string(),
        defaults: p.defaults.clone(),
        observations: p.observations.clone(),
        stood_in,
        grid: judge::grid_note(ckpt, specs.len()),
        cleared: p.cleared.iter().map(|c| judge::judge_cause(p, c.cause)).collect(),
        experiment: decide::experiment(p, &judged),
        hypotheses: judged,
        emulations,
        command: String::new(),
        svg: None,
    })
}

#[cfg(test)]
mod tests;
