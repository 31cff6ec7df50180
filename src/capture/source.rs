//! A capture read one tap at a time: held in memory, or an `.npz` whose members are read on
//! demand ([`NpzFile`]), so that a caller matching two captures key by key holds one tap of
//! each side rather than two whole captures (explain on a spilled run).

use super::npz::NpzFile;
use super::Capture;
use crate::error::Result;
use crate::tap::key_order;
use ndarray::ArrayD;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;

/// A capture's taps by key: borrowed from memory, or read from a file when asked for.
pub enum Source<'a> {
    Memory(&'a Capture),
    File { file: RefCell<NpzFile>, keys: BTreeSet<String> },
}

impl<'a> Source<'a> {
    /// The `.npz` at `path`: its directory is read now, its arrays by [`Source::get`].
    pub fn open(path: &Path) -> Result<Self> {
        let file = NpzFile::open(path)?;
        let keys = file.keys().into_iter().collect();
        Ok(Source::File { file: RefCell::new(file), keys })
    }

    /// Every key, in the order [`Capture::keys`] gives the same capture in memory.
    pub fn keys(&self) -> Vec<String> {
        match self {
            Source::Memory(c) => c.keys().into_iter().map(String::from).collect(),
            Source::File { keys, .. } => {
                let mut k: Vec<String> = keys.iter().cloned().collect();
                k.sort_by_cached_key(|k| key_order(k));
                k
            }
        }
    }

    /// The tap `key` (None when the capture does not hold it): a borrow from memory, or an
    /// array read from the file now and dropped by the caller.
    pub fn get(&self, key: &str) -> Result<Option<Cow<'a, ArrayD<f32>>>> {
        match self {
            Source::Memory(c) => Ok(c.get_key(key).map(Cow::Borrowed)),
            Source::File { file, keys } if keys.contains(key) => {
                Ok(Some(Cow::Owned(file.borrow_mut().read(key)?)))
            }
            Source::File { .. } => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tap::{Phase, Tap};
    use ndarray::IxDyn;

    #[test]
    fn a_file_gives_the_keys_and_taps_the_capture_in_memory_gives() {
        let mut c = Capture::default();
        for (i, tap) in ["logits", "layers.10.out", "embed", "layers.2.out"].iter().enumerate() {
            let a = ArrayD::from_shape_vec(IxDyn(&[1, 3]), vec![i as f32, -0.5, f32::NEG_INFINITY]).unwrap();
            c.put(Phase::Decode(0), Tap::parse(tap).unwrap(), a.clone());
            c.put(Phase::Prefill, Tap::parse(tap).unwrap(), a);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.npz");
        c.write_npz_quiet(&path).unwrap();
        let (memory, file) = (Source::Memory(&c), Source::open(&path).unwrap());
        assert_eq!(memory.keys(), file.keys());
        assert_eq!(file.keys()[..2], ["prefill/embed", "prefill/layers.2.out"], "execution order");
        for k in memory.keys() {
            assert_eq!(memory.get(&k).unwrap(), file.get(&k).unwrap(), "{k}");
        }
        assert!(file.get("prefill/layers.3.out").unwrap().is_none());
    }
}
