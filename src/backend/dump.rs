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

use super::map::{plan, Entry};
use super::runner::{no_feed, Backend, Ran};
use crate::capture::npz::NpzFile;
use crate::capture::{Capture, Store, TapSink};
use crate::error::Result;
use crate::fault::expected::Expected;
use crate::inputs::InputSet;
use crate::model::run::RunRecord;
use crate::model::Checkpoint;
use crate::tap::{Key, TapSelection};
use ndarray::ArrayD;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// The logits' shard widths it declares (`shards`); else its HEF's.
    pub shards: Option<Vec<usize>>,
}

/// A dump read through a name map (renames, squeezes, permutes) as a capture: mapped into a
/// temporary `.npz` in `scratch` one array at a time (`hefprobe compare --map`, the Python
/// module's `compare(map=...)`).
pub fn mapped(path: &Path, map: &Path, scratch: &Path) -> Result<Box<dyn Store>> {
    let mut d = DumpBackend::open("candidate", path, Some(map))?;
    let place = crate::capture::Place::Temporary(scratch.to_path_buf());
    let run = super::runner::run_to(&mut d, &InputSet::new(vec![0]), &TapSelection::all(), None, &place)?;
    run.error.map_or(Ok(run.capture), Err)
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
                let text = crate::files::read_text(m, crate::files::Kind::NameMap)?;
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
            shards: None,
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

impl Backend for DumpBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn expected(&mut self, ckpt: &Checkpoint) -> Result<Option<Arc<Expected>>> {
        self.quantized_as.as_mut().map(|h| h.expected(ckpt)).transpose()
    }

    /// A dump captured from a HEF is emulated as that HEF computes (its frames).
    fn emulation(&self) -> Option<super::runner::Emulation> {
        self.quantized_as.as_deref().and_then(Backend::emulation)
    }

    fn logits_shards(&self) -> Option<Vec<usize>> {
        self.shards.clone().or_else(|| self.quantized_as.as_deref().and_then(Backend::logits_shards))
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
    use ndarray::IxDyn;

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
        crate::capture::save(&c, &npz, false).unwrap();
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
