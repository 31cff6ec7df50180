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

use super::{no_feed, Backend, Capabilities, Ran};
use crate::capture::npz::NpzFile;
use crate::capture::{Capture, Store, TapSink};
use crate::error::{Error, Result};
use crate::fault::expected::Expected;
use crate::inputs::InputSet;
use crate::model::run::RunRecord;
use crate::model::Checkpoint;
use crate::tap::{Key, Phase, Tap, TapSelection};
use ndarray::{ArrayD, IxDyn};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A dump opened lazily: its directory and the map checked against the members' headers at
/// open, each array read (and transformed) only when a run asks for it, one at a time, so a
/// run that spills holds one tap of it, and one that does not holds one copy.
pub struct DumpBackend {
    name: String,
    path: PathBuf,
    file: NpzFile,
    entries: Vec<Entry>,
    /// The HEF the dump was captured from, when given: its quantization is the dump's.
    pub quantized_as: Option<Box<super::hef::HefBackend>>,
}

/// One array of the dump as it enters the capture.
pub(super) struct Entry {
    pub member: String,
    pub key: Key,
    pub transform: Option<Transform>,
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

impl DumpBackend {
    pub fn open(name: &str, path: &Path, map: Option<&Path>) -> Result<Self> {
        let mut file = NpzFile::open(path)?;
        let members = file.keys();
        // Every member's header is read now (by `plan`, or here without a map), so a damaged
        // dump is refused at open (exit 2), not half-way through a run; the data is read when a
        // run asks for it.
        let entries = match map {
            None => {
                for k in &members {
                    file.shape(k)?;
                }
                members
                    .into_iter()
                    .map(|k| Entry { key: Key::parse(&k), member: k, transform: None })
                    .collect()
            }
            Some(m) => {
                let text = crate::files::read_text(m)?;
                let (map_what, npz_what) = (m.display().to_string(), path.display().to_string());
                plan(&text, &map_what, &npz_what, &members, |k| file.shape(k), |_| String::new())?
            }
        };
        Ok(DumpBackend {
            name: name.to_string(),
            path: path.to_path_buf(),
            file,
            entries,
            quantized_as: None,
        })
    }

    /// Apply a name map (the TOML text of `map_what`) to the arrays of a dump held in memory
    /// (`npz_what`): canonical keys, layout transforms. Every map entry is checked; what a
    /// file says is never trusted (this is what `fuzz/fuzz_targets/dump_map.rs` drives).
    pub fn map_capture(mut raw: Capture, text: &str, map_what: &str, npz_what: &str) -> Result<Capture> {
        let members: Vec<String> = raw.keys().map(Key::to_string).collect();
        let shape_of = |k: &str| Ok(raw.get(&Key::parse(k)).map(|a| a.shape().to_vec()).unwrap_or_default());
        let entries = plan(text, map_what, npz_what, &members, shape_of, |_| String::new())?;
        let mut out = Capture::default();
        for e in entries {
            let a = raw.remove(&Key::parse(&e.member)).expect("plan checked the member");
            out.insert(e.key.clone(), e.mapped(a, map_what)?);
        }
        Ok(out)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entries `taps` selects, in the dump's order.
    fn selected(&self, taps: &TapSelection) -> Vec<usize> {
        (0..self.entries.len()).filter(|&i| taps.selects(&self.entries[i].key)).collect()
    }

    fn read(&mut self, i: usize) -> Result<ArrayD<f32>> {
        let a = self.file.read(&self.entries[i].member)?;
        let what = self.path.display().to_string();
        self.entries[i].mapped(a, &what)
    }
}

impl Entry {
    pub(super) fn mapped(&self, a: ArrayD<f32>, map_what: &str) -> Result<ArrayD<f32>> {
        match &self.transform {
            None => Ok(a),
            Some(t) => apply(a, t, &format!("{map_what} entry `{}`", self.member)),
        }
    }
}

impl Backend for DumpBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { all_taps: false, overrides: false, fed: false }
    }

    fn expected(&mut self, ckpt: &Checkpoint) -> Result<Option<Arc<Expected>>> {
        self.quantized_as.as_mut().map(|h| h.expected(ckpt)).transpose()
    }

    /// One array at a time from the dump into the sink: a run into a file holds one tap of it.
    fn run(
        &mut self,
        _inputs: &InputSet,
        taps: &TapSelection,
        feed: Option<&dyn Store>,
        sink: &mut dyn TapSink,
    ) -> Ran {
        if feed.is_some() {
            return no_feed(&self.name);
        }
        let error = self.selected(taps).into_iter().try_for_each(|i| {
            let a = self.read(i)?;
            sink.put_array(self.entries[i].key.clone(), a)
        });
        Ran { record: RunRecord::default(), error: error.err() }
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
        let mut d = DumpBackend::open("dump", &npz, Some(&map)).unwrap();
        let (inputs, all) = (InputSet::new(vec![0]), TapSelection::all());
        let run = crate::backend::collect(&mut d, &inputs, &all, None);
        assert!(run.error.is_none());
        assert_eq!(run.capture.get(&"decode.1/logits".into()).unwrap().shape(), &[2, 3]);
        let q = run.capture.get(&"prefill/layers.0.attn.q".into()).unwrap();
        assert_eq!(q.shape(), &[2, 4, 8]);
        // Streamed to a file, the same arrays.
        let out = dir.path().join("out.npz");
        let place = crate::capture::Place::File(out.clone());
        assert!(crate::backend::run_to(&mut d, &inputs, &all, None, &place).unwrap().error.is_none());
        assert_eq!(Capture::read_npz(&out).unwrap().get(&"prefill/layers.0.attn.q".into()), Some(q));
    }

    #[test]
    fn a_map_is_checked_against_headers_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let npz = dir.path().join("d.npz");
        let mut c = Capture::default();
        c.insert("a".into(), ArrayD::zeros(IxDyn(&[1, 2, 3])));
        c.insert("b".into(), ArrayD::zeros(IxDyn(&[6])));
        c.write_npz_quiet(&npz).unwrap();
        let map = dir.path().join("m.toml");
        let err = |text: &str| {
            std::fs::write(&map, text).unwrap();
            DumpBackend::open("dump", &npz, Some(&map)).err().expect("refused").to_string()
        };
        // Two entries onto one tap: which one would win was the archive's order; now refused.
        let e = err("[taps]\n\"a\" = \"logits\"\n\"b\" = \"logits\"\n");
        assert!(
            e.contains("entry `b`") && e.contains("maps onto prefill/logits") && e.contains("`a`"),
            "{e}"
        );
        // A transform that does not fit the member's shape, from its header alone.
        let e = err("[taps]\n\"a\" = { tap = \"logits\", permute = [1, 0] }\n");
        assert!(
            e.contains("entry `a`") && e.contains("not a permutation of the 3 axes of shape [1, 2, 3]"),
            "{e}"
        );
        let e = err("[taps]\n\"b\" = { tap = \"logits\", reshape = [4, -1] }\n");
        assert!(e.contains("reshape [4, -1] does not fit shape [6]"), "{e}");
        // A member whose data is cut short is refused at open, not half-way through a run.
        let bytes = std::fs::read(&npz).unwrap();
        let cut = dir.path().join("cut.npz");
        let mut w = zip::ZipWriter::new(std::fs::File::create(&cut).unwrap());
        let mut arch = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
        for i in 0..arch.len() {
            let mut f = arch.by_index(i).unwrap();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut data).unwrap();
            if f.name() == "b.npy" {
                data.truncate(data.len() - 4);
            }
            w.start_file(f.name(), zip::write::SimpleFileOptions::default()).unwrap();
            std::io::Write::write_all(&mut w, &data).unwrap();
        }
        w.finish().unwrap();
        let e = DumpBackend::open("dump", &cut, None).err().expect("refused").to_string();
        assert!(e.contains("member `b`") && e.contains("truncated"), "{e}");
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
