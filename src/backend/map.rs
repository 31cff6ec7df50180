//! Name maps: their name → a canonical tap, with layout transforms where the recorder's layout
//! differs. One TOML form for a dump's members (`backend::dump`) and a HEF's outputs
//! (`backend::hef`); see `dump.rs` for the form.

use crate::error::{Error, Result};
use crate::tap::{Key, Phase, Tap};
use ndarray::{ArrayD, IxDyn};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    phase: Option<String>,
    taps: BTreeMap<String, MapEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum MapEntry {
    Name(String),
    Full(Transform),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Transform {
    tap: String,
    #[serde(default)]
    squeeze: bool,
    permute: Option<Vec<usize>>,
    reshape: Option<Vec<i64>>,
}

/// One array of the dump as it enters the capture.
pub(super) struct Entry {
    pub member: String,
    pub key: Key,
    pub transform: Option<Transform>,
}

impl Entry {
    pub(super) fn mapped(&self, a: ArrayD<f32>, map_what: &str) -> Result<ArrayD<f32>> {
        match &self.transform {
            None => Ok(a),
            Some(t) => apply(a, t, &format!("{map_what} entry `{}`", self.member)),
        }
    }
}

fn canonical_key(target: &str, default_phase: Phase, what: &str) -> Result<Key> {
    let (phase, tap) = match target.split_once('/') {
        Some((p, t)) => (
            Phase::parse(p).ok_or_else(|| {
                Error::input(what, format!("`{p}` is not a phase (prefill, prefill.C, decode.K)"))
            })?,
            t,
        ),
        None => (default_phase, target),
    };
    let Some(tap) = Tap::parse(tap) else {
        return Err(Error::input(
            what,
            format!("`{tap}` is not a canonical tap (embed, layers.I.attn.probs, layers.I.out, final_norm, logits, ...)"),
        ));
    };
    Ok(Key::new(phase, tap))
}

fn product(dims: impl Iterator<Item = usize>) -> Option<usize> {
    dims.into_iter().try_fold(1usize, |acc, d| acc.checked_mul(d))
}

fn squeezed(shape: &[usize]) -> Vec<usize> {
    let dims: Vec<usize> = shape.iter().copied().filter(|&d| d != 1).collect();
    if dims.is_empty() {
        vec![1]
    } else {
        dims
    }
}

/// The shape `t` turns `shape` into, or why it cannot: checked before any data is read.
pub(super) fn transformed_shape(shape: &[usize], t: &Transform, what: &str) -> Result<Vec<usize>> {
    let mut dims = if t.squeeze { squeezed(shape) } else { shape.to_vec() };
    if let Some(p) = &t.permute {
        let mut sorted = p.clone();
        sorted.sort();
        if sorted != (0..dims.len()).collect::<Vec<_>>() {
            return Err(Error::input(
                what,
                format!("permute {p:?} is not a permutation of the {} axes of shape {dims:?}", dims.len()),
            ));
        }
        dims = p.iter().map(|&i| dims[i]).collect();
    }
    if let Some(r) = &t.reshape {
        let misfit = || Error::input(what, format!("reshape {r:?} does not fit shape {dims:?}"));
        if r.iter().any(|&d| d < -1) || r.iter().filter(|&&d| d == -1).count() > 1 {
            return Err(Error::input(what, format!("reshape {r:?}: dims are ≥ 0, with at most one -1")));
        }
        // Checked: a map is input, and a product of its dims once overflowed.
        let len = product(dims.iter().copied()).ok_or_else(misfit)?;
        let known = product(r.iter().filter(|&&d| d != -1).map(|&d| d as usize)).ok_or_else(misfit)?;
        let new: Vec<usize> = r
            .iter()
            .map(|&d| if d == -1 { len.checked_div(known).unwrap_or(0) } else { d as usize })
            .collect();
        if product(new.iter().copied()) != Some(len) {
            return Err(misfit());
        }
        dims = new;
    }
    Ok(dims)
}

pub(super) fn apply(a: ArrayD<f32>, t: &Transform, what: &str) -> Result<ArrayD<f32>> {
    let out = transformed_shape(a.shape(), t, what)?;
    let fail = |e: ndarray::ShapeError| Error::input(what, format!("{e}"));
    let mut a = if t.squeeze {
        let dims = squeezed(a.shape());
        a.into_shape_with_order(IxDyn(&dims)).map_err(fail)?
    } else {
        a
    };
    if let Some(p) = &t.permute {
        a = a.permuted_axes(IxDyn(p)).as_standard_layout().into_owned();
    }
    a.into_shape_with_order(IxDyn(&out)).map_err(fail)
}

/// A name map (the TOML text of `map_what`) checked against a dump's members (`npz_what`)
/// and their shapes (`shape_of`): every entry names a member, a canonical tap no other entry
/// in the same `family` names, and a transform that fits. No data is read. (A dump is one
/// family; a HEF's outputs are one per network group, prefill and tbt each giving a tap.)
pub(super) fn plan(
    text: &str,
    map_what: &str,
    npz_what: &str,
    members: &[String],
    mut shape_of: impl FnMut(&str) -> Result<Vec<usize>>,
    family: impl Fn(&str) -> String,
) -> Result<Vec<Entry>> {
    let map: MapFile =
        toml::from_str(text).map_err(|e| Error::input(map_what, e.to_string().trim_end().to_string()))?;
    let default_phase = match &map.phase {
        None => Phase::Prefill,
        Some(p) => Phase::parse(p).ok_or_else(|| {
            Error::input(format!("{map_what} key `phase`"), format!("`{p}` is not a phase"))
        })?,
    };
    let mut entries: Vec<Entry> = Vec::new();
    for (theirs, entry) in map.taps {
        let what = format!("{map_what} entry `{theirs}`");
        if !members.contains(&theirs) {
            let have: Vec<&str> = members.iter().take(12).map(String::as_str).collect();
            return Err(Error::input(
                what,
                format!("points at nothing in {npz_what}; it holds: {}", have.join(", ")),
            ));
        }
        // Every member's shape (its header, for a file): a damaged member is refused here.
        let shape = shape_of(&theirs)?;
        let (key, transform) = match entry {
            MapEntry::Name(t) => (canonical_key(&t, default_phase, &what)?, None),
            MapEntry::Full(tr) => {
                let key = canonical_key(&tr.tap, default_phase, &what)?;
                transformed_shape(&shape, &tr, &what)?;
                (key, Some(tr))
            }
        };
        if let Some(other) = entries.iter().find(|e| e.key == key && family(&e.member) == family(&theirs)) {
            return Err(Error::input(
                what,
                format!("maps onto {key}, as entry `{}` does already; keep one of them", other.member),
            ));
        }
        entries.push(Entry { member: theirs, key, transform });
    }
    Ok(entries)
}
