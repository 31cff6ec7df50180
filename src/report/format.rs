//! Numbers and the sentences built around them. `compare` keeps typed figures (a failed bound,
//! the located drift); every word and digit a user reads is chosen here, once.

use crate::compare::locate::Located;
use crate::compare::thresholds::Dir;
use crate::compare::{Failure, RowStatus, TapRow};
use crate::tap::Phase;

/// A number in 4 significant digits, or "inf".
pub fn num(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v.is_nan() {
        return "nan".into();
    }
    if v == 0.0 || (v.abs() >= 1e-3 && v.abs() < 1e5) {
        let s = format!("{v:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        return if s.is_empty() || s == "-" { "0".into() } else { s.to_string() };
    }
    format!("{v:.3e}")
}

/// A cosine to 6 decimals, or "-" when there is none.
pub fn cos(v: Option<f64>) -> String {
    v.map_or("-".into(), |c| format!("{c:.6}"))
}

/// A row's cosine: "n/a" when the row was compared but had nothing finite to compare (all NaN
/// or one-sided inf; docs/METRICS.md), "-" when it was not compared.
pub fn row_cos(row: Option<&TapRow>) -> String {
    match row {
        Some(r) if r.metrics.is_some() && r.cosine().is_none() => "n/a".into(),
        r => cos(r.and_then(TapRow::cosine)),
    }
}

/// A row's SQNR, "n/a" on the same condition as [`row_cos`].
pub fn row_sqnr(row: &TapRow) -> String {
    match row.metrics.as_ref() {
        Some(m) if m.sqnr_opt().is_none() => "n/a".into(),
        m => sqnr(m.and_then(|m| m.sqnr_opt())),
    }
}

pub fn sqnr(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| if s.is_infinite() { "inf".into() } else { format!("{s:.1}") })
}

pub fn sci(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| if x == 0.0 { "0".into() } else { format!("{x:.2e}") })
}

/// A share as a percentage, or "-" when undefined (no logits to compare).
pub fn pct(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{:.0}%", v * 100.0)
    }
}

/// One failed bound: `cosine 0.95 < 0.99 (by 0.04)`; judged on the excess over an expected
/// quantization, the bound as a reader takes it, then the figures it was judged on:
/// `cosine 0.95, expected after quantization ≥ 0.999 (quantization alone 0.98; excess 0.97, by 0.029)`.
pub fn failure(f: &Failure) -> String {
    let judged = f.expected.map_or(f.value, |(_, x)| x);
    let by = match f.dir {
        Dir::Min => f.bound - judged,
        Dir::Max => judged - f.bound,
    };
    match f.expected {
        None => format!("{} {} {} {} (by {})", f.metric, num(f.value), op(f), num(f.bound), num(by)),
        Some((e, x)) => {
            format!("{} (quantization alone {}; excess {}, by {})", failure_short(f), num(e), num(x), num(by))
        }
    }
}

fn op(f: &Failure) -> &'static str {
    match f.dir {
        Dir::Min => "<",
        Dir::Max => ">",
    }
}

/// A failed bound in the fewest words, for a one-line verdict: `cosine 0.95 < 0.999`, or on the
/// excess over an expected quantization `cosine 0.95, expected after quantization ≥ 0.999`.
pub fn failure_short(f: &Failure) -> String {
    match f.expected {
        None => format!("{} {} {} {}", f.metric, num(f.value), op(f), num(f.bound)),
        Some(_) => {
            let want = if f.dir == Dir::Min { "≥" } else { "≤" };
            format!("{} {}, expected after quantization {want} {}", f.metric, num(f.value), num(f.bound))
        }
    }
}

/// The verdict cell text of a row.
pub fn verdict(row: &TapRow) -> String {
    match row.status {
        RowStatus::OnlyInReference => "unchecked: reference only".into(),
        RowStatus::OnlyInCandidate => "unchecked: candidate only".into(),
        RowStatus::ShapeMismatch => format!("FAIL shape {:?}", row.cand_shape),
        RowStatus::Compared if row.failures.is_empty() => "ok".into(),
        RowStatus::Compared => {
            let names: Vec<&str> = row.failures.iter().map(|f| f.metric.as_str()).collect();
            format!("FAIL {}", names.join(", "))
        }
    }
}

/// Where drift starts, in one sentence: the failed bounds, the worst heads and positions, the
/// row sums of attention probabilities, and the first flipped token.
pub fn located_sentence(l: &Located) -> String {
    let mut s = format!("{}: first drift at {}", l.phase, l.tap);
    if let Some((cand, reference)) = &l.shape_mismatch {
        s += &format!(" — shape {cand:?} where the reference has {reference:?}");
        return s;
    }
    // A failed row-sum bound is said below in words ("per-head sums ≠ 1").
    let said: Vec<String> = l.failures.iter().filter(|f| f.metric != "prob_sum_err").map(failure).collect();
    if !said.is_empty() {
        s += &format!(" — {}", said.join("; "));
    } else {
        s += " —";
    }
    if !l.worst_heads.is_empty() {
        let h: Vec<String> = l.worst_heads.iter().map(|(h, c)| format!("{h} ({})", num(*c))).collect();
        s += &format!("; worst heads {}", h.join(", "));
    }
    if let Some(e) = l.prob_sum_err.filter(|e| *e > 1e-3) {
        let sep = if said.is_empty() { "" } else { ";" };
        s += &format!("{sep} per-head sums ≠ 1 (max |Σp − 1| = {})", num(e));
    }
    if let Some(n) = l.mask_leak.filter(|n| *n > 0) {
        s += &format!("; {n} probabilities where the reference masks");
    }
    if !l.worst_positions.is_empty() && l.positions > 1 {
        let p: Vec<String> = l.worst_positions.iter().map(|(p, c)| format!("{p} ({})", num(*c))).collect();
        s += &format!("; worst positions {}", p.join(", "));
    }
    if let Some(f) = &l.first_flip {
        s += &format!(
            "; first argmax flip at position {} (token {} → {}, reference top-1 margin {})",
            f.position,
            f.reference_token,
            f.candidate_token,
            num(f.margin)
        );
    }
    s
}

pub fn blame_sentence(layers: &[usize]) -> String {
    match layers {
        [] => "local view (each layer fed the reference's input): no layer fails on its own — the drift is inherited or enters outside the blocks".into(),
        [l] => format!("local view (each layer fed the reference's input): only layer {l} fails on its own"),
        ls => format!(
            "local view (each layer fed the reference's input): layers {} fail on their own",
            ls.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Where the logit lens's top-1 token first parts between the two sides, per phase.
pub fn lens_sentence(rows: &[crate::compare::lens::LensRow]) -> String {
    let flips = crate::compare::lens::first_lens_flip(rows);
    if flips.is_empty() {
        return "logit lens (last position of each phase): every layer's top-1 token agrees".into();
    }
    let shown: Vec<String> = flips.iter().take(4).map(|(p, l)| format!("{p} at layer {l}")).collect();
    let more = if flips.len() > 4 { format!(" (+{} more phases)", flips.len() - 4) } else { String::new() };
    format!(
        "logit lens (last position of each phase): the top-1 token first differs {}{more}",
        shown.join(", ")
    )
}

/// "logits" or "63 taps: embed … logits".
pub fn taps_summary(taps: &[crate::tap::TapName]) -> String {
    match taps {
        [] => "no taps".into(),
        [t] => format!("matched on {t}"),
        ts if ts.len() <= 4 => {
            format!("matched on {}", ts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
        }
        ts => format!("matched on {} taps, {} … {}", ts.len(), ts[0], ts[ts.len() - 1]),
    }
}

/// `prefill, decode.0..7` rather than every phase.
pub fn phase_span(phases: &[Phase]) -> String {
    let prefill: Vec<String> = phases.iter().filter(|p| !p.is_decode()).map(|p| p.to_string()).collect();
    let decode: Vec<usize> =
        phases.iter().filter_map(|p| if let Phase::Decode(k) = p { Some(*k) } else { None }).collect();
    let mut parts = prefill;
    match decode.as_slice() {
        [] => {}
        [k] => parts.push(format!("decode.{k}")),
        [a, .., b] => parts.push(format!("decode.{a}..{b}")),
    }
    parts.join(", ")
}

/// What a reader of a reference's capture must know about its config.json: each default of
/// transformers' applied for a missing key, then the unknown keys' line (`hefprobe reference`,
/// the Python module's `reference`).
pub fn config_notes(c: &crate::model::config::ModelConfig) -> Vec<String> {
    let mut notes: Vec<String> = c
        .defaults_applied
        .iter()
        .map(|(k, v)| format!("config.json has no `{k}`: transformers' default {v} applied"))
        .collect();
    notes.extend(unknown_keys_line(&c.unknown_keys));
    notes
}

/// The one line every command that loads a model prints when config.json carries keys
/// hefprobe does not know: each key with its value, and how to refuse them.
pub fn unknown_keys_line(keys: &[crate::model::config::UnknownKey]) -> Option<String> {
    if keys.is_empty() {
        return None;
    }
    let list: Vec<String> = keys.iter().map(|k| format!("`{}` = {}", k.key, k.value)).collect();
    Some(format!(
        "note: config.json has {} key{} hefprobe does not read, accepted as not changing the forward pass: {} \
         (--strict-config refuses them)",
        keys.len(),
        if keys.len() == 1 { "" } else { "s" },
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_four_significant_digits_and_name_infinities() {
        assert_eq!(num(0.0), "0");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(0.6666667461395264), "0.666667");
        assert_eq!(num(2.546e-8), "2.546e-8");
        assert_eq!(num(f64::INFINITY), "inf");
        assert_eq!(num(f64::NAN), "nan");
        assert_eq!(
            (cos(None), sqnr(Some(f64::INFINITY)), sci(Some(0.0)), pct(f64::NAN)),
            ("-".to_string(), "inf".to_string(), "0".to_string(), "-".to_string())
        );
    }

    #[test]
    fn an_all_nan_row_shows_n_a_never_a_perfect_cosine_and_fails() {
        use crate::capture::Capture;
        use crate::compare::{compare, thresholds::Thresholds, Settings};
        use crate::tap::Tap;
        use ndarray::{ArrayD, IxDyn};
        let (mut r, mut x) = (Capture::default(), Capture::default());
        r.put(Phase::Prefill, Tap::Embed, ArrayD::from_shape_vec(IxDyn(&[1, 2]), vec![1.0, 2.0]).unwrap());
        x.put(Phase::Prefill, Tap::Embed, ArrayD::from_elem(IxDyn(&[1, 2]), f32::NAN));
        let th = Thresholds::default();
        let pair = compare(&r, &x, ("r", "x"), &Settings::new(&th)).unwrap();
        let row = &pair.rows[0];
        assert_eq!((row_cos(Some(row)), row_sqnr(row)), ("n/a".to_string(), "n/a".to_string()));
        assert!(row.failed() && row.has_nonfinite(), "{:?}", row.failures);
        // A clean row still shows its figure; a missing row shows "-".
        let same = compare(&r, &r, ("r", "r"), &Settings::new(&th)).unwrap();
        assert_eq!(row_cos(Some(&same.rows[0])), "1.000000");
        assert_eq!(row_cos(None), "-");
    }

    #[test]
    fn a_failure_says_metric_value_bound_and_margin() {
        let f = Failure {
            metric: "prob_sum_err".into(),
            dir: Dir::Max,
            bound: 0.05,
            value: 0.5,
            rule: "d".into(),
            expected: None,
        };
        assert_eq!(failure(&f), "prob_sum_err 0.5 > 0.05 (by 0.45)");
        // On the excess over an expected quantization: both values, and the excess judged.
        let f = Failure {
            metric: "cosine".into(),
            dir: Dir::Min,
            bound: 0.999,
            value: 0.95,
            expected: Some((0.98, 0.97)),
            ..f
        };
        assert_eq!(
            failure(&f),
            "cosine 0.95, expected after quantization ≥ 0.999 (quantization alone 0.98; excess 0.97, by 0.029)"
        );
        assert_eq!(failure_short(&f), "cosine 0.95, expected after quantization ≥ 0.999");
    }
}
