//! The files a nightly job lives on — baselines, histories, shard summaries — are input, checked
//! as strictly as a probe when read: every figure finite and in its range, every date RFC 3339,
//! every duration finite and plausible, a shard inside its total. A violation is an input error
//! naming the file, the pair, the tap and the key, never a figure carried into tonight's verdict
//! (a baseline cosine of 1e300 would call every pair regressed; a KL of −1e300 none).

use super::figures::{Band, Figures};
use super::result::SuiteResult;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// The longest plausible duration in a summary, in seconds (a year).
const MAX_SECONDS: f64 = 365.0 * 86_400.0;

/// One value: finite and within `lo..=hi`.
fn value(what: &str, key: &str, v: f64, lo: f64, hi: f64, meaning: &str) -> Result<()> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        return Ok(());
    }
    let range = if hi == f64::MAX { format!("≥ {lo}") } else { format!("{lo}…{hi}") };
    Err(Error::input(format!("{what} key `{key}`"), format!("{v:e} is not {meaning} ({range})")))
}

/// The rounding margin on the bounded figures: they are computed in floating point.
const E: f64 = 1e-6;

/// A cosine: −1…1, within [`E`].
fn cosine(what: &str, key: &str, c: f64) -> Result<()> {
    value(what, key, c, -1.0 - E, 1.0 + E, "a cosine")
}

/// A tap's figures: cosine −1…1, argmax agreement 0…1, KL ≥ 0, SQNR finite (the bounded ones
/// within [`E`]).
pub fn figures(what: &str, f: &Figures) -> Result<()> {
    let checks = [
        ("cosine", f.cosine, -1.0 - E, 1.0 + E, "a cosine"),
        ("argmax", f.argmax, -E, 1.0 + E, "an agreement fraction"),
        ("agreement", f.agreement, -E, 1.0 + E, "an agreement fraction"),
        ("kl", f.kl, -E, f64::MAX, "a KL divergence"),
        ("sqnr_db", f.sqnr_db, -1e4, 1e4, "an SQNR in dB"),
    ];
    checks
        .into_iter()
        .try_for_each(|(key, v, lo, hi, meaning)| v.map_or(Ok(()), |v| value(what, key, v, lo, hi, meaning)))
}

/// Figures per tap.
pub fn taps(what: &str, taps: &BTreeMap<String, Figures>) -> Result<()> {
    taps.iter().try_for_each(|(tap, f)| figures(&format!("{what} tap `{tap}`"), f))
}

/// A noise band: every width finite and ≥ 0.
pub fn band(what: &str, b: &Band) -> Result<()> {
    let what = format!("{what} band");
    value(&what, "cosine", b.cosine, 0.0, 2.0, "a cosine width")?;
    value(&what, "kl", b.kl, 0.0, f64::MAX, "a KL width")?;
    value(&what, "argmax", b.argmax, 0.0, 1.0, "an agreement width")?;
    value(&what, "sqnr_db", b.sqnr_db, 0.0, 1e4, "an SQNR width in dB")?;
    b.noise_sqnr_db.map_or(Ok(()), |n| value(&what, "noise_sqnr_db", n, -1e4, 1e4, "an SQNR in dB"))
}

/// A duration in seconds.
pub fn seconds(what: &str, key: &str, s: f64) -> Result<()> {
    value(what, key, s, 0.0, MAX_SECONDS, "a duration in seconds")
}

/// An RFC 3339 date-time as the suite writes it (`2026-12-02T07:52:49Z`; fractional seconds
/// and a `±HH:MM` offset accepted).
pub fn date(what: &str, s: &str) -> Result<()> {
    if is_rfc3339(s) {
        return Ok(());
    }
    let shown: String = s.chars().take(40).flat_map(char::escape_default).collect();
    Err(Error::input(
        format!("{what} key `date`"),
        format!("`{shown}` is not an RFC 3339 date-time (YYYY-MM-DDTHH:MM:SSZ)"),
    ))
}

fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let t = s.get(r)?;
        t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse().ok())?
    };
    let fixed = b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't')
        && b[13] == b':'
        && b[16] == b':';
    if !fixed {
        return false;
    }
    let (Some(_), Some(mo), Some(d), Some(h), Some(mi), Some(se)) =
        (num(0..4), num(5..7), num(8..10), num(11..13), num(14..16), num(17..19))
    else {
        return false;
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit())
                && (*h1 - b'0') * 10 + (*h2 - b'0') < 24
                && (*m1 - b'0') * 10 + (*m2 - b'0') < 60
        }
        _ => false,
    }
}

/// A shard summary (`suite --report json=`), as `merge` reads it.
pub fn result(what: &str, r: &SuiteResult) -> Result<()> {
    date(what, &r.date)?;
    if let Some(s) = r.shard {
        if s.total == 0 || s.index == 0 || s.index > s.total {
            return Err(Error::input(
                format!("{what} key `shard`"),
                format!("{}/{} is not a shard: K/N with 1 ≤ K ≤ N", s.index, s.total),
            ));
        }
    }
    let t = &r.timing;
    let timing = format!("{what} timing");
    for (key, v) in [
        ("total", t.total),
        ("probes", t.probes),
        ("devices", t.devices),
        ("gate", t.gate),
        ("reruns", t.reruns),
        ("explain", t.explain),
    ] {
        seconds(&timing, key, v)?;
    }
    for p in &r.pairs {
        let pair = format!("{what} pair {} × {}", p.probe, p.target);
        seconds(&pair, "seconds", p.seconds)?;
        taps(&pair, &p.figures)?;
        if let Some(b) = &p.baseline {
            taps(&format!("{pair} baseline"), b)?;
        }
        if let Some(b) = &p.band {
            band(&pair, b)?;
        }
        for s in &p.series {
            for (phase, c) in &s.points {
                cosine(&format!("{pair} series `{}` phase `{phase}`", s.tap), "cosine", *c)?;
            }
        }
        if let Some(g) = &p.gate {
            let gate = format!("{pair} gate");
            cosine(&gate, "cosine", g.cosine)?;
            value(&gate, "argmax", g.argmax, 0.0, 1.0, "an agreement fraction")?;
            value(&gate, "kl", g.kl, -E, f64::MAX, "a KL divergence")?;
            value(&gate, "max_abs", g.max_abs, 0.0, f64::MAX, "a difference")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339() {
        for ok in ["2026-12-02T07:52:49Z", "2026-01-31T23:59:60.5+05:30", "2026-12-02t00:00:00z"] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for no in [
            "not a date",
            "2026-13-02T07:52:49Z",
            "2026-12-02 07:52:49Z",
            "2026-12-02T07:52:49",
            "",
            "2026-12-02T07:52:49.Z",
        ] {
            assert!(!is_rfc3339(no), "{no}");
        }
    }

    #[test]
    fn figures_out_of_range_are_named() {
        let f = Figures { cosine: Some(1e300), ..Default::default() };
        let e = figures("b.json pair p × t tap `logits`", &f).unwrap_err().to_string();
        assert!(e.contains("tap `logits` key `cosine`") && e.contains("1e300"), "{e}");
        assert!(figures("x", &Figures { kl: Some(-1e300), ..Default::default() }).is_err());
        assert!(figures("x", &Figures { cosine: Some(0.5), kl: Some(0.0), ..Default::default() }).is_ok());
    }
}
