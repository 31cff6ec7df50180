//! Recorded dumps: an `.npz` made elsewhere (a device host, the Hailo DFC emulator from
//! Python) plus an optional name map onto canonical taps, with layout transforms where the
//! recorder's layout differs (e.g. NHWC `[1, 1, T, F]` → `[T, F]`).
//!
//! Map file (TOML):
//! ```toml
//! phase = "prefill"            # phase for names that do not carry one (default: prefill)
//! [taps]
//! "model/softmax1" = "layers.0.attn.probs"
//! "model/output"   = { tap = "decode.0/logits", squeeze = true }
//! "model/q_rot"    = { tap = "layers.0.attn.q", squeeze = true, permute = [1, 0, 2] }
//! ```
//! Transforms apply in the order squeeze (drop size-1 axes), permute, reshape (-1 allowed).

use super::{Backend, BackendRun, Capabilities};
use crate::capture::Capture;
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::run::RunRecord;
use crate::tap::{Phase, Tap, TapSelection};
use ndarray::{ArrayD, IxDyn};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Transform {
    tap: String,
    #[serde(default)]
    squeeze: bool,
    permute: Option<Vec<usize>>,
    reshape: Option<Vec<i64>>,
}

pub struct DumpBackend {
    name: String,
    path: PathBuf,
    capture: Capture,
}

fn canonical_key(target: &str, default_phase: Phase, what: &str) -> Result<String> {
    let (phase, tap) = match target.split_once('/') {
        Some((p, t)) => (
            Phase::parse(p).ok_or_else(|| {
                Error::input(what, format!("`{p}` is not a phase (prefill, prefill.C, decode.K)"))
            })?,
            t,
        ),
        None => (default_phase, target),
    };
    if Tap::parse(tap).is_none() {
        return Err(Error::input(
            what,
            format!("`{tap}` is not a canonical tap (embed, layers.I.attn.probs, layers.I.out, final_norm, logits, ...)"),
        ));
    }
    Ok(format!("{phase}/{tap}"))
}

fn apply(a: ArrayD<f32>, t: &Transform, what: &str) -> Result<ArrayD<f32>> {
    let mut a = a;
    if t.squeeze {
        let dims: Vec<usize> = a.shape().iter().copied().filter(|&d| d != 1).collect();
        let dims = if dims.is_empty() { vec![1] } else { dims };
        a = a.into_shape_with_order(IxDyn(&dims)).map_err(|e| Error::input(what, format!("squeeze: {e}")))?;
    }
    if let Some(p) = &t.permute {
        let mut sorted = p.clone();
        sorted.sort();
        if sorted != (0..a.ndim()).collect::<Vec<_>>() {
            return Err(Error::input(
                what,
                format!(
                    "permute {p:?} is not a permutation of the {} axes of shape {:?}",
                    a.ndim(),
                    a.shape()
                ),
            ));
        }
        a = a.permuted_axes(IxDyn(p)).as_standard_layout().to_owned();
    }
    if let Some(r) = &t.reshape {
        let shape = a.shape().to_vec();
        let misfit = || Error::input(what, format!("reshape {r:?} does not fit shape {shape:?}"));
        if r.iter().any(|&d| d < -1) || r.iter().filter(|&&d| d == -1).count() > 1 {
            return Err(Error::input(what, format!("reshape {r:?}: dims are ≥ 0, with at most one -1")));
        }
        // Checked: a map is input, and a product of its dims once overflowed.
        let known = r.iter().filter(|&&d| d != -1).try_fold(1usize, |acc, &d| acc.checked_mul(d as usize));
        let known = known.ok_or_else(misfit)?;
        let dims: Vec<usize> = r
            .iter()
            .map(|&d| if d == -1 { a.len().checked_div(known).unwrap_or(0) } else { d as usize })
            .collect();
        a = a.into_shape_with_order(IxDyn(&dims)).map_err(|_| misfit())?;
    }
    Ok(a)
}

impl DumpBackend {
    pub fn open(name: &str, path: &Path, map: Option<&Path>) -> Result<Self> {
        let raw = Capture::read_npz(path)?;
        let capture = match map {
            None => raw,
            Some(m) => Self::mapped(raw, path, m)?,
        };
        Ok(DumpBackend { name: name.to_string(), path: path.to_path_buf(), capture })
    }

    fn mapped(raw: Capture, npz: &Path, map_path: &Path) -> Result<Capture> {
        let text = crate::error::read_text(map_path)?;
        Self::map_capture(raw, &text, &map_path.display().to_string(), &npz.display().to_string())
    }

    /// Apply a name map (the TOML text of `map_what`) to the arrays of a dump (`npz_what`):
    /// canonical keys, layout transforms. Every map entry is checked; what a file says is never
    /// trusted (this is what `fuzz/fuzz_targets/dump_map.rs` drives).
    pub fn map_capture(mut raw: Capture, text: &str, map_what: &str, npz_what: &str) -> Result<Capture> {
        let map: MapFile =
            toml::from_str(text).map_err(|e| Error::input(map_what, e.to_string().trim_end().to_string()))?;
        let default_phase = match &map.phase {
            None => Phase::Prefill,
            Some(p) => Phase::parse(p).ok_or_else(|| {
                Error::input(format!("{map_what} key `phase`"), format!("`{p}` is not a phase"))
            })?,
        };
        let mut out = Capture::default();
        for (theirs, entry) in map.taps {
            let what = format!("{map_what} entry `{theirs}`");
            let Some(a) = raw.remove_key(&theirs) else {
                let have: Vec<&str> = raw.keys().into_iter().take(12).collect();
                return Err(Error::input(
                    what,
                    format!("points at nothing in {npz_what}; it holds: {}", have.join(", ")),
                ));
            };
            let (key, a) = match entry {
                MapEntry::Name(t) => (canonical_key(&t, default_phase, &what)?, a),
                MapEntry::Full(tr) => (canonical_key(&tr.tap, default_phase, &what)?, apply(a, &tr, &what)?),
            };
            out.insert(key, a);
        }
        Ok(out)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Backend for DumpBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { all_taps: false, overrides: false }
    }

    fn run(&mut self, _inputs: &InputSet, taps: &TapSelection) -> BackendRun {
        let mut capture = Capture::default();
        for (k, v) in self.capture.iter() {
            let tap = k.split_once('/').map_or(k.as_str(), |(_, t)| t);
            if taps.matches(tap) {
                capture.insert(k.clone(), v.clone());
            }
        }
        BackendRun { capture, record: RunRecord::default(), error: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_renames_and_transforms() {
        let dir = tempfile::tempdir().unwrap();
        let npz = dir.path().join("d.npz");
        let mut c = Capture::default();
        c.insert(
            "net/out".into(),
            ArrayD::from_shape_vec(IxDyn(&[1, 1, 2, 3]), (0..6).map(|x| x as f32).collect()).unwrap(),
        );
        c.insert("net/q".into(), ArrayD::zeros(IxDyn(&[1, 4, 2, 8])));
        c.write_npz(&npz).unwrap();
        let map = dir.path().join("m.toml");
        std::fs::write(
            &map,
            "[taps]\n\"net/out\" = { tap = \"decode.1/logits\", squeeze = true }\n\
             \"net/q\" = { tap = \"layers.0.attn.q\", squeeze = true, permute = [1, 0, 2] }\n",
        )
        .unwrap();
        let d = DumpBackend::open("dump", &npz, Some(&map)).unwrap();
        assert_eq!(d.capture.get_key("decode.1/logits").unwrap().shape(), &[2, 3]);
        assert_eq!(d.capture.get_key("prefill/layers.0.attn.q").unwrap().shape(), &[2, 4, 8]);
    }

    #[test]
    fn map_pointing_at_nothing_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let npz = dir.path().join("d.npz");
        let mut c = Capture::default();
        c.insert("a".into(), ArrayD::zeros(IxDyn(&[2])));
        c.write_npz(&npz).unwrap();
        let map = dir.path().join("m.toml");
        std::fs::write(&map, "[taps]\n\"b\" = \"logits\"\n").unwrap();
        let e = DumpBackend::open("dump", &npz, Some(&map)).err().unwrap().to_string();
        assert!(e.contains("entry `b`") && e.contains("points at nothing") && e.contains("holds: a"), "{e}");
        std::fs::write(&map, "[taps]\n\"a\" = \"logit\"\n").unwrap();
        let e = DumpBackend::open("dump", &npz, Some(&map)).err().unwrap().to_string();
        assert!(e.contains("`logit` is not a canonical tap"), "{e}");
    }
}
