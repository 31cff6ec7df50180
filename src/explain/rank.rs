//! `explain`: run the reference with each catalog fault injected and rank the faults by how
//! closely each emulation reproduces the observed capture — the step every row of the
//! findings table was solved by, done by the tool.
//!
//! The captures are [`Store`]s matched key by key, one tap of each side at a time: in memory,
//! or (a run spilled to disk) `.npz` files, each emulation then written to a temporary file
//! and deleted once matched. Both give the same figures: the same f32 values in the same order.

use super::emulate::{sort, Candidate, Emulator, CONTENDERS};
pub use super::emulate::{Setting, Target};
use super::matching::{
    aligned, first_drift_layer, match_captures, nonfinite_keys, shared_keys, signatures_agree, Match,
    CLEAN_EPS,
};
use crate::capture::Store;
use crate::compare::metrics;
use crate::error::Result;
use crate::explain::ExplainSpec;
use crate::explain::{AttributionRow, Baseline, ExplainReport, ExplainRow};
use crate::fault::spec::FaultSpec;
use crate::tap::{Key, TapName, TapSelection};
use ndarray::ArrayD;

/// The verdict when the observation holds non-finite values: no fault is ranked, because no
/// numeric fault the catalog emulates produces NaN, and a cosine over NaN means nothing.
fn refuse_nonfinite(observed_name: &str, taps: Vec<TapName>, bad: &[(Key, usize)]) -> ExplainReport {
    let total: usize = bad.iter().map(|(_, n)| n).sum();
    let (first, n) = &bad[0];
    let more =
        if bad.len() > 1 { format!("; {} keys in all, {total} values", bad.len()) } else { String::new() };
    ExplainReport {
        observed: observed_name.to_string(),
        taps,
        conclusion: format!(
            "explain refuses to rank: `{observed_name}` holds non-finite values (NaN or ±inf where the reference is \
             finite), first at {first} ({n} values{more}). No fault in the catalog computes NaN or inf, so none is \
             ranked; a non-finite output is a device or runtime failure (overflow, a wrong output quantization, \
             uninitialized memory) to fix before explaining drift."
        ),
        nonfinite: bad.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        ..ExplainReport::default()
    }
}

/// How many of the best per-layer faults are narrowed to single layers.
const REFINE: usize = 4;
/// Rows whose ties are resolved (each tie check re-runs the pair's emulations, and is tried
/// only on candidates whose [`signature`](super::matching::signature)s agree).
const TIE_ROWS: usize = 5;
/// The best faults paired when pairs are ranked.
const PAIR_TOP: usize = 5;
// A candidate stops only when it cannot be among the rows these read (emulate's CONTENDERS).
const _: () = assert!(REFINE <= CONTENDERS && TIE_ROWS <= CONTENDERS && PAIR_TOP <= CONTENDERS);

/// Emulations the per-layer search may spend when the observation holds no layer tap (a HEF's
/// logits): every layer of every per-layer fault of the grid, when that fits (SmolLM2's 33 such
/// faults on 30 layers: 990; a 36-layer model: 1188). Beside its own layer a fault seen through
/// the logits matches by chance: planted in simulated HEFs of SmolLM2, shared-softmax at layer 2
/// matched its own family best at layer 20 of every 5th, and norm-acc:16 and norm-width:384 at
/// layer 13 were missed by a search of every 5th layer, every layer of the 5 best faults and the
/// layers beside each other's best (520 emulations). Halving the layers on the match figure was
/// measured wrong too (a fault at layer 2 emulated over layers 0-14 matches worse than over
/// 15-29: the other 14 faulted layers swamp it). Past the budget the search is a stride over the
/// layers within two fifths of it, then [`refine_plan`]'s passes.
pub const LAYER_SEARCH_BUDGET: usize = 1200;

/// Rank the faults of `spec` (default: the catalog's grid, narrowed per layer) against
/// `observed` (its name and capture), on the inputs and checkpoint of `at`.
pub fn explain(
    at: &Setting,
    reference: &dyn Store,
    (observed_name, observed): (&str, &dyn Store),
    spec: &ExplainSpec,
) -> Result<ExplainReport> {
    let (keys, focused) = focus_keys(shared_keys(observed), at);
    if keys.is_empty() {
        return Err(crate::error::Error::usage(format!(
            "explain: `{observed_name}` holds no canonical PHASE/TAP keys to match emulations against"
        )));
    }
    let tap_names: Vec<TapName> = keys
        .iter()
        .filter_map(Key::tap)
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let bad = nonfinite_keys(reference, observed, &keys)?;
    if !bad.is_empty() {
        return Ok(refuse_nonfinite(observed_name, tap_names, &bad));
    }
    let taps = TapSelection::parse(&tap_names.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    // Each candidate is one emulated run: seconds or more on a real model, so the emulator says
    // where it is (on crate::progress's target: nothing when stderr is not a terminal, by default).
    let emu = Emulator::new(at, (reference, observed), keys, taps, spec.exhaustive)?;
    let base = match_captures(emu.clean(), observed, &emu.keys)?;
    let (results, mut search) = rank_all(&emu, spec)?;
    emu.progress.finish_and_clear();
    if focused {
        search = Some(focus_note(&emu.keys, observed_name, search));
    }
    let rows = rows_with_ties(&emu, &results)?;
    let against = if at.target.is_some() { Baseline::ExpectedQuantization } else { Baseline::CleanReference };
    let baseline = baseline_row(against, &base);
    let noise = match &at.target {
        Some(t) => Some(quantization_noise(
            match_captures(reference, t.float, &emu.keys)?.cosine,
            match_captures(reference, t.realization, &emu.keys)?.cosine,
        )),
        None => None,
    };
    let (mut conclusion, explained) = conclude(&rows, &baseline, against, observed_name, noise);
    if emu.by_kl() && explained {
        if let Some(best) = rows.first() {
            conclusion += &format!(
                "; ranked by KL to the observation: {:.6} (expected quantization {:.6})",
                best.kl_mean, baseline.kl_mean
            );
        }
    }
    let attribution = match &spec.quant {
        Some(q) => attribute(&emu, q)?,
        None => Vec::new(),
    };
    let best = rows.first().filter(|_| explained).map(|r| r.fault.clone());
    Ok(ExplainReport {
        observed: observed_name.to_string(),
        taps: tap_names,
        rows,
        baseline: Some(baseline),
        against,
        conclusion,
        best,
        attribution,
        search,
        spent: emu.spent.into_inner().expect("spent"),
        ..ExplainReport::default()
    })
}

/// The baseline's row: what "no fault" matches, labelled with its name.
fn baseline_row(against: Baseline, base: &super::matching::Match) -> ExplainRow {
    ExplainRow {
        rank: 0,
        fault: format!("({})", against.name()),
        finding: None,
        match_cosine: base.cosine,
        argmax_agreement: base.argmax,
        kl_mean: base.kl,
        ties: Vec::new(),
        note: None,
    }
}

/// The keys explain matches on: with a quantized target, only those where its judge failed
/// ([`Target::focus`]) when any of them is shared; and whether it narrowed them.
fn focus_keys(mut keys: Vec<Key>, at: &Setting) -> (Vec<Key>, bool) {
    let focus = at.target.as_ref().map_or(&[][..], |t| &t.focus[..]);
    let focused = focus.iter().any(|k| keys.contains(k));
    if focused {
        keys.retain(|k| focus.contains(k));
    }
    (keys, focused)
}

/// The table's note when explain matched on the focus keys alone (before the search's note).
fn focus_note(keys: &[Key], observed: &str, search: Option<String>) -> String {
    let on: Vec<String> = keys.iter().map(ToString::to_string).collect();
    let note = format!(
        "matched on the {} key(s) where `{observed}` is beyond its expected quantization ({}); \
         elsewhere it differs from every emulation only by the quantization's noise",
        on.len(),
        on.join(", ")
    );
    match search {
        Some(s) => format!("{note}; {s}"),
        None => note,
    }
}

/// Every candidate, ranked: the faults of the spec (or the grid), then per-layer narrowings
/// (at the layer where the observation first departs from the reference, when it holds layer
/// taps, and at every layer for the best few families: the family finds the mechanism, the
/// sweep finds where), then, if asked, pairs of the best five.
fn rank_all(emu: &Emulator, spec: &ExplainSpec) -> Result<(Vec<Candidate>, Option<String>)> {
    let cfg = &emu.at.ckpt.config;
    let mut candidates: Vec<FaultSpec> =
        spec.faults.clone().unwrap_or_else(|| crate::fault::catalog::grid(cfg));
    if emu.at.target.is_some() && spec.faults.is_none() {
        // The baseline is the target's quantization already: quantizing again explains nothing.
        candidates.retain(|c| !crate::fault::catalog::is::<crate::fault::quant::QuantFault>(c));
    }
    // Without a layer tap the layer search takes every per-layer family in this stage's order:
    // none is stopped, so that order is the exhaustive one.
    let layer_taps = emu.keys.iter().any(|k| k.tap().and_then(TapName::layer).is_some());
    let mut results = emu.evaluate_all(candidates.iter().map(|c| vec![c.clone()]).collect(), layer_taps)?;
    sort(&mut results, emu.by_kl());
    let mut search = None;
    let mut narrowed: Vec<FaultSpec> = Vec::new();
    match first_drift_layer(emu.reference, emu.observed, &emu.keys)? {
        Some(layer) => {
            for c in &candidates {
                narrowed.extend(crate::fault::catalog::per_layer(c, cfg).into_iter().nth(layer));
            }
            for c in results.iter().filter(|c| !c.clean_like).take(REFINE) {
                if let [one] = c.specs.as_slice() {
                    narrowed.extend(crate::fault::catalog::per_layer(one, cfg));
                }
            }
        }
        None if emu.keys.iter().all(|k| k.tap().and_then(TapName::layer).is_none()) => {
            search = Some(search_layers(emu, &mut results)?);
        }
        None => {}
    }
    let mut seen: Vec<FaultSpec> =
        results.iter().filter(|c| c.specs.len() == 1).map(|c| c.specs[0].clone()).collect();
    narrowed.retain(|spec| {
        let new = !seen.contains(spec);
        seen.push(spec.clone());
        new
    });
    results.extend(emu.evaluate_all(narrowed.into_iter().map(|s| vec![s]).collect(), true)?);
    if spec.pairs {
        sort(&mut results, emu.by_kl());
        let top: Vec<FaultSpec> =
            results.iter().filter(|c| !c.clean_like).take(PAIR_TOP).map(|c| c.specs[0].clone()).collect();
        let pairs = (0..top.len()).flat_map(|i| (i + 1..top.len()).map(move |j| (i, j)));
        let pairs = pairs.map(|(i, j)| vec![top[i].clone(), top[j].clone()]).collect();
        results.extend(emu.evaluate_all(pairs, true)?);
    }
    sort(&mut results, emu.by_kl());
    Ok((results, search))
}

/// Where an observation holds no layer tap, nothing locates the layer a per-layer fault acts
/// on; so each per-layer fault of the ranking is emulated at single layers: every layer when
/// all of them fit [`LAYER_SEARCH_BUDGET`], else every s-th layer (s the smallest stride that
/// fits half the budget), then the layers within s of each fault's best: every fault's likelier
/// side first (in the order of its best coarse match), then beside its best by cosine, then the
/// other sides, as the rest allows ([`refine_plan`]).
/// Returns the sentence the table states the search with.
fn search_layers(emu: &Emulator, results: &mut Vec<Candidate>) -> Result<String> {
    let layers = emu.at.ckpt.config.num_layers;
    let per_layer = |c: &Candidate| match c.specs.as_slice() {
        [one] if one.layers.is_none() => crate::fault::catalog::entry(&one.name).is_some_and(|e| e.per_layer),
        _ => false,
    };
    let families: Vec<FaultSpec> =
        results.iter().filter(|c| per_layer(c)).map(|c| c.specs[0].clone()).collect();
    if layers < 2 || families.is_empty() {
        return Ok("the observation holds no layer tap and no per-layer fault was ranked".to_string());
    }
    let at = |layer_set: &mut dyn Iterator<Item = usize>, f: &FaultSpec| -> Vec<Vec<FaultSpec>> {
        layer_set.map(|l| vec![f.at_layer(l)]).collect()
    };
    let all = families.len() * layers;
    if all <= LAYER_SEARCH_BUDGET {
        let specs = families.iter().flat_map(|f| at(&mut (0..layers), f)).collect();
        results.extend(emu.evaluate_all(specs, true)?);
        return Ok(format!(
            "the observation holds no layer tap: each of {} per-layer faults emulated at every one of the {layers} \
             layers, {all} emulations (budget {LAYER_SEARCH_BUDGET})",
            families.len()
        ));
    }
    let stride = all.div_ceil(LAYER_SEARCH_BUDGET * 2 / 5).max(2);
    let coarse: Vec<Vec<FaultSpec>> =
        families.iter().flat_map(|f| at(&mut (0..layers).step_by(stride), f)).collect();
    let mut spent = coarse.len();
    // The coarse pass runs whole (none is stopped); its ranking decides where and in which order
    // the fine search looks ([`refine_plan`]). Refining both sides in the whole-model ranking's
    // order, as before, spent the budget before the last 8 of SmolLM2's 33 faults (norm-acc:16
    // and tile-scale:384 planted at layer 7 came out unexplained).
    let mut found = emu.evaluate_all(coarse, false)?;
    sort(&mut found, emu.by_kl());
    let (fine, sides) = refine_plan(&found, &families, stride, layers, LAYER_SEARCH_BUDGET - spent);
    spent += fine.len();
    let fine = fine.into_iter().map(|(fi, l)| vec![families[fi].at_layer(l)]).collect();
    results.extend(found);
    results.extend(emu.evaluate_all(fine, true)?);
    Ok(format!(
        "the observation holds no layer tap: {} per-layer faults emulated at every {stride}th of the {layers} layers, \
         then {} of them (the best) at every layer, {} at the layers on the likelier side of their best, {} beside \
         their best by cosine too and {} on the other side, {spent} emulations (budget {LAYER_SEARCH_BUDGET})",
        families.len(),
        sides[0],
        sides[1],
        sides[2],
        sides[3]
    ))
}

/// The fine layer search's emulations, (family index, layer), within `left`: `found` holds the
/// coarse emulations (each family at every `stride`th layer) in ranking order. Four passes, best
/// family first, as far as `left` goes: every layer of the [`CONTENDERS`] best families (a
/// family tied with a better one's figures, as norm-width:256,pad and 384,pad are on a 576-wide
/// model, rides along), the likelier side of each other family's best coarse layer, then that of
/// its best by cosine where that is another layer, then the other side of its best. Returns them
/// and how many families each pass refined.
fn refine_plan(
    found: &[Candidate],
    families: &[FaultSpec],
    stride: usize,
    layers: usize,
    left: usize,
) -> (Vec<(usize, usize)>, [usize; 4]) {
    let family_of = |f: &FaultSpec| families.iter().position(|g| g.name == f.name && g.params == f.params);
    let layer_of = |f: &FaultSpec| f.layers.as_ref().and_then(|v| v.first().copied());
    let rank_at = |fi: usize, l: usize| {
        found.iter().position(|c| family_of(&c.specs[0]) == Some(fi) && layer_of(&c.specs[0]) == Some(l))
    };
    // Each family's best coarse layer, best family first.
    let mut order: Vec<(usize, usize)> = Vec::new();
    for c in found {
        if let (Some(fi), Some(l)) = (family_of(&c.specs[0]), layer_of(&c.specs[0])) {
            if !order.iter().any(|(g, _)| *g == fi) {
                order.push((fi, l));
            }
        }
    }
    // The two sides of coarse layer `l` of family `fi`, the likelier first.
    let sides_of = |fi: usize, l: usize| -> (Vec<usize>, Vec<usize>) {
        let below: Vec<usize> = (l.saturating_sub(stride - 1)..l).collect();
        let above: Vec<usize> = (l + 1..(l + stride).min(layers)).collect();
        let rb = l.checked_sub(stride).and_then(|n| rank_at(fi, n));
        let ra = if l + stride < layers { rank_at(fi, l + stride) } else { None };
        // Below first where there is nothing above, or its neighbour ranks better (or alone).
        if !below.is_empty() && (above.is_empty() || rb.is_none_or(|b| ra.is_some_and(|a| b < a))) {
            (below, above)
        } else {
            (above, below)
        }
    };
    // A family's best coarse layer by cosine alone, where the ranking weighs the KL: on SmolLM2
    // tile-sum:512 planted at layer 7 matches best by KL at layer 20, by cosine at layer 5.
    let by_cosine = |fi: usize| {
        let mine = found.iter().filter(|c| family_of(&c.specs[0]) == Some(fi));
        mine.max_by(|a, b| a.m.cosine.total_cmp(&b.m.cosine)).and_then(|c| layer_of(&c.specs[0]))
    };
    let mut plan: Vec<(usize, usize)> = Vec::new();
    let add = |plan: &mut Vec<(usize, usize)>, fi: usize, near: &[usize]| -> bool {
        let new: Vec<usize> = near.iter().copied().filter(|&l| !plan.contains(&(fi, l))).collect();
        if new.is_empty() || plan.len() + new.len() > left {
            return false;
        }
        plan.extend(new.into_iter().map(|l| (fi, l)));
        true
    };
    // On SmolLM2 a shared-softmax planted at layer 2 and seen through the logits matches its own
    // family best at layer 20 of the coarse layers, then 10, 5, 25, 15 and 0: beside a wrong layer
    // a fault is noise, so only every layer of the likeliest families finds it.
    let mut swept: Vec<Match> = Vec::new();
    let mut passes = [0; 4];
    let mut rest = Vec::new();
    let all: Vec<usize> = (0..layers).filter(|n| n % stride != 0).collect();
    for &(fi, l) in &order {
        let m = rank_at(fi, l).map(|r| found[r].m);
        let tied = m.is_some_and(|m| swept.iter().any(|s| s.kl == m.kl && s.cosine == m.cosine));
        if (tied || swept.len() < CONTENDERS) && add(&mut plan, fi, &all) {
            passes[0] += 1;
            swept.extend(m.filter(|_| !tied));
        } else {
            rest.push((fi, l));
        }
    }
    for &(fi, l) in &rest {
        passes[1] += usize::from(add(&mut plan, fi, &sides_of(fi, l).0));
    }
    for &(fi, l) in &rest {
        if let Some(c) = by_cosine(fi).filter(|&c| c != l) {
            passes[2] += usize::from(add(&mut plan, fi, &sides_of(fi, c).0));
        }
    }
    for &(fi, l) in &rest {
        passes[3] += usize::from(add(&mut plan, fi, &sides_of(fi, l).1));
    }
    (plan, passes)
}

/// The table's rows: faults whose emulations agree on these inputs (to float noise) are one
/// row with ties (checked for the first few rows).
fn rows_with_ties(emu: &Emulator, results: &[Candidate]) -> Result<Vec<ExplainRow>> {
    let mut rows: Vec<ExplainRow> = Vec::new();
    let mut used = vec![false; results.len()];
    for i in 0..results.len() {
        if used[i] {
            continue;
        }
        used[i] = true;
        let mut ties = Vec::new();
        // A clean-like row's note says more than its ties would (each is a clean run to float
        // noise), and on a clean HEF of SmolLM2 checking them took 60 whole emulations (17 s).
        if rows.len() < TIE_ROWS && !results[i].clean_like {
            let mut kept = None;
            for j in i + 1..results.len() {
                let close = (results[j].m.cosine - results[i].m.cosine).abs() <= CLEAN_EPS
                    && signatures_agree(&results[i].signature, &results[j].signature);
                if !used[j] && close && emu.tied(&results[i], &results[j], &mut kept)? {
                    used[j] = true;
                    // The same fault asked for twice (given, and found by the layer search).
                    if results[j].name() != results[i].name() {
                        ties.push(results[j].name());
                    }
                }
            }
        }
        let c = &results[i];
        rows.push(ExplainRow {
            rank: rows.len() + 1,
            finding: crate::fault::catalog::finding_of(&c.specs[0].name),
            fault: c.name(),
            match_cosine: c.m.cosine,
            argmax_agreement: c.m.argmax,
            kl_mean: c.m.kl,
            ties,
            note: c.clean_like.then(|| "indistinguishable from a clean run on these inputs".to_string()),
        });
    }
    Ok(rows)
}

/// Share of the observed drift (1 − baseline cosine) a match removes.
pub fn explained_share(best: f64, baseline: f64) -> f64 {
    let drift = 1.0 - baseline;
    if drift <= 1e-12 {
        return 1.0;
    }
    (1.0 - (1.0 - best) / drift).clamp(0.0, 1.0)
}

/// How far (1 − cosine) an observation may lie from its expected quantization and still be
/// that quantization, as the judge allows it (`thresholds::allowed_angle`): the quantization's
/// own angle to the float reference (`to_float`, a cosine) plus twice the angle between two
/// draws of it (`draws`): the device and the emulation each round the same floats, and the
/// float order decides on which side of a boundary. With the first term alone, the
/// attention-mask-broadcast probe through a clean a16 HEF of SmolLM2 (Zen guest) read "nothing
/// in the catalog explains" at 1 − cosine 0.0064 to the expected, no fault closer: its
/// prefill frames sum in another order than the emulation's rows, and 30 layers amplify it.
fn quantization_noise(to_float: f64, draws: f64) -> f64 {
    1.0 - crate::compare::thresholds::allowed_angle(to_float, Some(draws)).min(std::f64::consts::PI).cos()
}

/// The share of the drift a fault must take to be the explanation (90%).
const EXPLAINED_SHARE: f64 = 0.9;

/// A match this close to the expected quantization is the quantization (float order and
/// rounding boundaries differ between a device's frames and an emulation's rows).
const EXPECTED_EPS: f64 = 1e-5;

/// `noise`: where the target is quantized, how far (1 − cosine) an observation may lie from
/// its expected quantization and still be that quantization ([`quantization_noise`]). An
/// observation no farther than that, which no fault explains (takes [`EXPLAINED_SHARE`] of the
/// drift), is the quantization's noise: two quantized implementations differ at rounding
/// boundaries the float order decides.
fn conclude(
    rows: &[ExplainRow],
    baseline: &ExplainRow,
    against: Baseline,
    observed: &str,
    noise: Option<f64>,
) -> (String, bool) {
    let argmax_agrees = baseline.argmax_agreement.is_nan() || baseline.argmax_agreement >= 1.0;
    let share = |r: &ExplainRow| explained_share(r.match_cosine, baseline.match_cosine);
    let nearer = |r: &&ExplainRow| r.note.is_none() && r.match_cosine > baseline.match_cosine;
    let explains = |r: &ExplainRow| nearer(&r) && share(r) >= EXPLAINED_SHARE;
    if let Some(noise) = noise {
        // Within the quantization's own noise, the quantization is the answer unless a fault
        // explains the observation by the rule a best explanation meets everywhere: of a few
        // hundred candidates, some land nearer a noisy observation by chance (a clean a16 HEF
        // of SmolLM2 on the shared-softmax probe: mask-repeat@layers=29 took 51% of a drift
        // of 0.0082 that was noise).
        let off = 1.0 - baseline.match_cosine;
        if off <= noise.max(EXPECTED_EPS) && !rows.first().is_some_and(explains) {
            let partial = rows.first().filter(nearer).map_or(String::new(), |r| {
                format!(
                    " No fault explains it: the best, {}, would take {:.0}% of the drift.",
                    r.fault,
                    share(r) * 100.0
                )
            });
            return (format!(
                "`{observed}` matches its expected quantization (match cosine {:.6}, within the quantization's own \
                 noise of {:.6}): expected quantization noise, the quantization alone explains the drift from the \
                 float reference.{partial}",
                baseline.match_cosine,
                1.0 - noise
            ), false);
        }
    }
    if baseline.match_cosine >= 1.0 - 1e-9 && argmax_agrees {
        return (format!("`{observed}` matches the clean reference: nothing to explain."), false);
    }
    let clean = against.name();
    let Some(best) = rows.first() else { return ("no fault was ranked.".into(), false) };
    let ties =
        if best.ties.is_empty() { String::new() } else { format!(" (tied with {})", best.ties.join(", ")) };
    if best.note.is_some() {
        return (format!(
            "nothing in the catalog explains `{observed}`: the best match is indistinguishable from a clean run (match cosine {:.6}).",
            best.match_cosine
        ), false);
    }
    let share = share(best);
    if explains(best) {
        (
            format!(
            "best explanation: {}{ties} — match cosine {:.6} ({clean} {:.6}; explains {:.0}% of the drift)",
            best.fault,
            best.match_cosine,
            baseline.match_cosine,
            share * 100.0
        ),
            true,
        )
    } else {
        (format!(
            "nothing in the catalog explains `{observed}`: the best, {}, reaches match cosine {:.6} against the {clean}'s {:.6} ({:.0}% of the drift).",
            best.fault,
            best.match_cosine,
            baseline.match_cosine,
            share * 100.0
        ), false)
    }
}

/// Three-way attribution: per shared key, fp32 ↔ quant emulation ↔ observed.
fn attribute(emu: &Emulator, quant: &FaultSpec) -> Result<Vec<AttributionRow>> {
    let emulated = emu.run(std::slice::from_ref(quant))?;
    let cos = |a: Option<&ArrayD<f32>>, b: Option<&ArrayD<f32>>| -> f64 {
        match (a, b) {
            (Some(x), Some(y)) => aligned(x, y).map_or(0.0, |(x, y, _)| metrics::basic(&x, &y, None).cosine),
            _ => f64::NAN,
        }
    };
    let mut rows = Vec::new();
    for k in &emu.keys {
        let Some((phase, tap)) = k.canonical() else { continue };
        // One tap of each of the three captures at a time.
        let (r, o, q) = (emu.reference.get(k)?, emu.observed.get(k)?, emulated.get(k)?);
        let (r, o, q) = (r.as_deref(), o.as_deref(), q.as_deref());
        let (ro, rq, qo) = (cos(r, o), cos(r, q), cos(q, o));
        rows.push(AttributionRow {
            phase,
            tap: tap.into(),
            reference_vs_observed: ro,
            reference_vs_quant: rq,
            quant_vs_observed: qo,
            explained: explained_share(qo, ro),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::decoder::DecoderBackend;
    use crate::capture::CaptureFile;

    #[test]
    fn an_observation_within_the_draws_spread_of_its_quantization_is_that_noise() {
        let row = |fault: &str, cosine: f64| ExplainRow {
            rank: 1,
            finding: None,
            fault: fault.into(),
            match_cosine: cosine,
            argmax_agreement: 1.0,
            kl_mean: 0.0,
            ties: Vec::new(),
            note: None,
        };
        let base = |cosine| row("(expected quantization)", cosine);
        let near = [row("mask-repeat@layers=28", 0.990)];
        // The expected 0.999 from the float, two draws 0.998 apart: 0.9936 to the expected is
        // noise, which the distance to the float alone (0.001) would not call it.
        let noise = quantization_noise(0.999, 0.998);
        assert!(noise > 0.0064 && noise < 0.02, "{noise}");
        let (text, explained) =
            conclude(&near, &base(0.9936), Baseline::ExpectedQuantization, "hef", Some(noise));
        assert!(!explained && text.contains("expected quantization noise"), "{text}");
        let (text, _) = conclude(
            &near,
            &base(0.9936),
            Baseline::ExpectedQuantization,
            "hef",
            Some(quantization_noise(0.999, 1.0)),
        );
        assert!(text.contains("nothing in the catalog explains"), "{text}");
        // Beyond it: not noise.
        let (text, explained) =
            conclude(&near, &base(0.97), Baseline::ExpectedQuantization, "hef", Some(noise));
        assert!(!explained && text.contains("nothing in the catalog explains"), "{text}");
        // Within it, but a fault reproduces the observation: that fault (cache-layout on SmolLM2).
        let exact = [row("cache-layout:transpose@layers=2", 1.0)];
        let (text, explained) =
            conclude(&exact, &base(0.9936), Baseline::ExpectedQuantization, "hef", Some(noise));
        assert!(explained && text.contains("best explanation: cache-layout"), "{text}");
        // Within it, and a fault lands nearer by chance but explains half: still the noise.
        let half = [row("mask-repeat@layers=29", 0.9968)];
        let (text, explained) =
            conclude(&half, &base(0.9936), Baseline::ExpectedQuantization, "hef", Some(noise));
        assert!(!explained && text.contains("expected quantization noise"), "{text}");
        assert!(text.contains("the best, mask-repeat@layers=29, would take 50% of the drift"), "{text}");
    }

    /// The fine layer search past the budget: every layer of the five best families (and of a
    /// family tied with one of them), then each other family's likelier side, its best layer by
    /// cosine, and its other side, as far as the emulations left go.
    #[test]
    fn the_fine_search_sweeps_the_best_families_then_the_sides_of_the_others() {
        let names = ["shared-softmax", "mask-repeat", "tile-sum:512", "norm-acc:16", "norm-width:384"];
        let mut families: Vec<FaultSpec> = names.iter().map(|n| FaultSpec::parse(n).unwrap()).collect();
        families.extend(["tile-scale:384", "cache-layout:transpose"].map(|n| FaultSpec::parse(n).unwrap()));
        // Family f matches best nearest layer best[f] (coarse layers every 5th of 30); by KL,
        // families in order; by cosine the same, but family 6's is best at coarse layer 5.
        let best: [usize; 7] = [2, 7, 13, 20, 27, 12, 18];
        let mut found = Vec::new();
        for (f, family) in families.iter().enumerate() {
            for l in (0..30).step_by(5) {
                let kl = f as f64 * 0.1 + best[f].abs_diff(l) as f64 * 0.001;
                let cosine = if f == 6 && l == 5 { 0.999 } else { 0.9 - kl };
                let spec = FaultSpec::parse(&format!("{}@layers={l}", family)).unwrap();
                let m = Match { cosine, argmax: 1.0, kl };
                found.push(Candidate { specs: vec![spec], m, clean_like: false, signature: Vec::new() });
            }
        }
        found.sort_by(|a, b| a.m.kl.total_cmp(&b.m.kl));
        let layers_of = |plan: &[(usize, usize)], f: usize| -> Vec<usize> {
            plan.iter().filter(|p| p.0 == f).map(|p| p.1).collect()
        };
        let fine: Vec<usize> = (0..30).filter(|l| l % 5 != 0).collect();
        let (plan, passes) = refine_plan(&found, &families, 5, 30, usize::MAX);
        assert_eq!(passes, [5, 2, 1, 2]);
        for f in 0..5 {
            assert_eq!(layers_of(&plan, f), fine, "family {f}: every layer");
        }
        // Family 5 is best at 10, and 15 (nearer 12) ranks above 5: that side first.
        assert_eq!(layers_of(&plan, 5), [11, 12, 13, 14, 6, 7, 8, 9]);
        // Family 6 is best at 20, 15 (nearer 18) above 25; by cosine at 5, whose likelier side
        // (10 ranks above 0) is 6-9.
        assert_eq!(layers_of(&plan, 6), [16, 17, 18, 19, 6, 7, 8, 9, 21, 22, 23, 24]);
        // As far as the emulations left go: the sweep, then one side.
        let (plan, passes) = refine_plan(&found, &families, 5, 30, 5 * 24 + 4);
        assert_eq!((plan.len(), passes), (5 * 24 + 4, [5, 1, 0, 0]));
        // A family tied with a swept one rides along.
        found.iter_mut().filter(|c| c.specs[0].name == "tile-scale").for_each(|c| c.m = found_m(0.0));
        found
            .iter_mut()
            .filter(|c| c.specs[0].name == "shared-softmax" && c.specs[0].layers == Some(vec![0]))
            .for_each(|c| c.m = found_m(0.0));
        found.sort_by(|a, b| a.m.kl.total_cmp(&b.m.kl));
        let (_, passes) = refine_plan(&found, &families, 5, 30, usize::MAX);
        assert_eq!(passes[0], 6, "the tied family is swept too");
    }

    fn found_m(kl: f64) -> Match {
        Match { cosine: 0.95, argmax: 1.0, kl }
    }

    #[test]
    fn ranking_from_files_equals_ranking_in_memory_and_leaves_no_emulation_behind() {
        let (ckpt, inputs) = crate::explain::matrix::matrix_model().unwrap();
        let model = std::sync::Arc::new(crate::model::Decoder::new(&ckpt).unwrap());
        let all = TapSelection::all();
        let reference =
            crate::backend::collect(&mut DecoderBackend::reference(model.clone()), &inputs, &all, None)
                .capture;
        let fault = [FaultSpec::parse("shared-softmax@layers=1").unwrap()];
        let mut emulator = DecoderBackend::emulator("obs", &ckpt, &fault, None).unwrap();
        let observed = crate::backend::collect(&mut emulator, &inputs, &all, None).capture;
        // `@layers=1-1` is `@layers=1`: a tie, checked on two emulations at once.
        let faults = ["shared-softmax@layers=1-1", "shared-softmax", "mask-repeat", "no-lm-head"];
        let spec = ExplainSpec {
            faults: Some(faults.iter().map(|f| FaultSpec::parse(f).unwrap()).collect()),
            pairs: true,
            quant: Some(crate::fault::spec::quantization("w8a16").unwrap()),
            ..Default::default()
        };
        let at = Setting { ckpt: &ckpt, inputs: &inputs, scratch: None, target: None };
        let held = explain(&at, &reference, ("obs", &observed), &spec).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (r, o, scratch) =
            (dir.path().join("r.npz"), dir.path().join("o.npz"), dir.path().join("scratch"));
        crate::capture::save(&reference, &r, false).unwrap();
        crate::capture::save(&observed, &o, false).unwrap();
        std::fs::create_dir(&scratch).unwrap();
        let (r, o) = (CaptureFile::open(&r).unwrap(), CaptureFile::open(&o).unwrap());
        let at = Setting { scratch: Some(&scratch), ..at };
        let from_files = explain(&at, &r, ("obs", &o), &spec).unwrap();
        assert_eq!(format!("{held:?}"), format!("{from_files:?}"));
        assert!(!held.rows[0].ties.is_empty() && !held.attribution.is_empty(), "{held:?}");
        assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0, "an emulation was left behind");
    }
}
