//! A capture: `PHASE/TAP` → f32 tensor, the plain data every backend produces and every
//! comparison consumes. Stored as `.npz` (numpy's own format, so Python tools read it).
//!
//! One read interface, [`Store`], whatever holds the bytes: a [`Capture`] in memory, or a
//! [`CaptureFile`] whose arrays are read from the `.npz` one at a time when asked for. Compare,
//! the logit lens and explain are written once over it; the caller picks where a run's capture
//! lives ([`Place`]). The sinks the decoder hands tapped tensors to (none, memory, streaming
//! npz) fill one.

use crate::error::{Error, Result};
use crate::files::AtomicFile;
use crate::tap::{Key, Phase, Tap, TapSelection};
use candle_core::Tensor;
use ndarray::{ArrayD, IxDyn};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub mod npz;

/// A capture's taps by key, read one at a time: what every comparison reads.
pub trait Store: Sync {
    /// Every key, in execution order ([`Key`]'s order).
    fn keys(&self) -> Vec<Key>;
    fn contains(&self, key: &Key) -> bool;
    /// The tap `key` (None when the capture does not hold it): borrowed from memory, or read
    /// from the file now and dropped by the caller.
    fn get(&self, key: &Key) -> Result<Option<Cow<'_, ArrayD<f32>>>>;
    /// The `.npz` the capture is read from, when it is one.
    fn file(&self) -> Option<&Path> {
        None
    }
}

/// The phases a capture holds, in run order.
pub fn phases(store: &dyn Store) -> Vec<Phase> {
    let mut p: Vec<Phase> = store.keys().iter().filter_map(Key::phase).collect();
    p.dedup();
    p
}

/// Write every tap of `store` to `to`, announced on stderr when it is one of the user's files
/// (`announce`; a scratch file is not): a copy of the file when it already is one.
pub fn save(store: &dyn Store, to: &Path, announce: bool) -> Result<()> {
    if let Some(from) = store.file() {
        if from != to {
            crate::files::copy(from, to)?;
        }
        if announce {
            crate::files::announce(to);
        }
        return Ok(());
    }
    let (out, mut w) = create_npz(to)?;
    for key in store.keys() {
        if let Some(a) = store.get(&key)? {
            w.add(&key.to_string(), &*a)?;
        }
    }
    close_npz(w, out, announce)
}

#[derive(Debug, Clone, Default)]
pub struct Capture {
    entries: BTreeMap<Key, ArrayD<f32>>,
}

pub fn tensor_to_array(t: &Tensor) -> Result<ArrayD<f32>> {
    with_view(t, |v| v.to_owned())
}

/// Call `f` with an f32 view of `t`: no copy when `t` is contiguous f32 (every tap the decoder
/// emits), so a streamed tap is written straight from the decoder's buffer.
pub fn with_view<R>(t: &Tensor, f: impl FnOnce(ndarray::ArrayViewD<f32>) -> R) -> Result<R> {
    let t = t.to_dtype(candle_core::DType::F32)?.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let n = t.elem_count();
    match &*storage {
        candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) => {
            let data = &v[layout.start_offset()..layout.start_offset() + n];
            Ok(f(ndarray::ArrayViewD::from_shape(IxDyn(t.dims()), data).expect("element count matches dims")))
        }
        _ => Err(Error::usage(format!("a tap of {:?} is not an f32 CPU tensor", t.dims()))),
    }
}

pub fn array_to_tensor(a: &ArrayD<f32>) -> Result<Tensor> {
    let data: Vec<f32> = a.iter().copied().collect();
    Ok(Tensor::from_vec(data, a.shape(), &candle_core::Device::Cpu)?)
}

impl Capture {
    pub fn insert(&mut self, key: Key, a: ArrayD<f32>) {
        self.entries.insert(key, a);
    }

    pub fn put(&mut self, phase: Phase, tap: Tap, a: ArrayD<f32>) {
        self.entries.insert(Key::new(phase, tap), a);
    }

    pub fn get(&self, key: &Key) -> Option<&ArrayD<f32>> {
        self.entries.get(key)
    }

    pub fn at(&self, phase: Phase, tap: Tap) -> Option<&ArrayD<f32>> {
        self.entries.get(&Key::new(phase, tap))
    }

    pub fn remove(&mut self, key: &Key) -> Option<ArrayD<f32>> {
        self.entries.remove(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys in execution order (phase, then tap).
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.entries.keys()
    }

    /// Phases present, in run order.
    pub fn phases(&self) -> Vec<Phase> {
        phases(self)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &ArrayD<f32>)> {
        self.entries.iter()
    }

    pub fn extend(&mut self, other: Capture) {
        self.entries.extend(other.entries);
    }

    /// Write every entry as an `.npz`, through a temporary file renamed into place.
    pub fn write_npz(&self, path: &Path) -> Result<()> {
        save(self, path, true)
    }
}

/// Read every array of an `.npz` (the tests' reader; integration tests have theirs in
/// `tests/common`).
#[cfg(test)]
impl Capture {
    pub fn read_npz(path: &Path) -> Result<Self> {
        let file = CaptureFile::open(path)?;
        let mut cap = Capture::default();
        for key in file.keys() {
            if let Some(a) = file.get(&key)? {
                cap.entries.insert(key, a.into_owned());
            }
        }
        Ok(cap)
    }
}

impl Store for Capture {
    fn keys(&self) -> Vec<Key> {
        self.entries.keys().cloned().collect()
    }
    fn contains(&self, key: &Key) -> bool {
        self.entries.contains_key(key)
    }
    fn get(&self, key: &Key) -> Result<Option<Cow<'_, ArrayD<f32>>>> {
        Ok(self.entries.get(key).map(Cow::Borrowed))
    }
}

/// A capture in an `.npz`: its directory read at open, each array read when asked for, by
/// as many threads at once as ask (each borrows a reader of its own from a small pool).
pub struct CaptureFile {
    path: PathBuf,
    /// Key → the archive member that holds it.
    members: BTreeMap<Key, String>,
    readers: std::sync::Mutex<Vec<npz::NpzFile>>,
    /// A temporary file, deleted when this is dropped.
    _temporary: Option<tempfile::TempPath>,
}

impl CaptureFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = npz::NpzFile::open(path)?;
        let members = file.keys().into_iter().map(|m| (Key::parse(&m), m)).collect();
        Ok(CaptureFile {
            path: path.to_path_buf(),
            members,
            readers: std::sync::Mutex::new(vec![file]),
            _temporary: None,
        })
    }

    /// A temporary `.npz`, deleted when the capture is dropped.
    pub fn temporary(path: tempfile::TempPath) -> Result<Self> {
        let mut c = CaptureFile::open(&path)?;
        c._temporary = Some(path);
        Ok(c)
    }

    /// The shape of `key` from its header (no data read).
    pub fn shape(&self, key: &Key) -> Result<Option<Vec<usize>>> {
        self.with_reader(key, |r, m| r.shape(m))
    }

    fn with_reader<T>(
        &self,
        key: &Key,
        f: impl FnOnce(&mut npz::NpzFile, &str) -> Result<T>,
    ) -> Result<Option<T>> {
        let Some(member) = self.members.get(key) else { return Ok(None) };
        let pooled = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut reader = pooled.map_or_else(|| npz::NpzFile::open(&self.path), Ok)?;
        let out = f(&mut reader, member);
        self.readers.lock().unwrap_or_else(|e| e.into_inner()).push(reader);
        out.map(Some)
    }
}

impl Store for CaptureFile {
    fn keys(&self) -> Vec<Key> {
        self.members.keys().cloned().collect()
    }
    fn contains(&self, key: &Key) -> bool {
        self.members.contains_key(key)
    }
    fn get(&self, key: &Key) -> Result<Option<Cow<'_, ArrayD<f32>>>> {
        Ok(self.with_reader(key, |r, m| r.read(m))?.map(Cow::Owned))
    }
    fn file(&self) -> Option<&Path> {
        Some(&self.path)
    }
}

/// Where a run's capture goes: kept in memory, streamed to the `.npz` at a path, or streamed
/// to a temporary `.npz` in a folder (deleted when the capture is dropped).
#[derive(Debug, Clone)]
pub enum Place {
    Memory,
    File(PathBuf),
    Temporary(PathBuf),
}

/// The sink a run at `place` fills, and how it becomes the run's [`Store`] once finished.
pub enum PlaceSink {
    Memory(MemorySink),
    File(NpzSink, Option<tempfile::TempPath>),
}

impl PlaceSink {
    pub fn create(place: &Place, taps: &TapSelection) -> Result<Self> {
        Ok(match place {
            Place::Memory => PlaceSink::Memory(MemorySink::new(taps.clone())),
            Place::File(path) => PlaceSink::File(NpzSink::create(path, taps.clone())?.quiet(), None),
            Place::Temporary(dir) => {
                let temp = tempfile::Builder::new()
                    .prefix("capture-")
                    .suffix(".npz")
                    .tempfile_in(dir)
                    .map_err(|e| Error::io(dir, e))?
                    .into_temp_path();
                PlaceSink::File(NpzSink::create(&temp, taps.clone())?.quiet(), Some(temp))
            }
        })
    }

    pub fn sink(&mut self) -> &mut dyn TapSink {
        match self {
            PlaceSink::Memory(m) => m,
            PlaceSink::File(s, _) => s,
        }
    }

    /// Close the file (what was written stays, whether the run finished or not) and open what
    /// the run captured.
    pub fn finish(self) -> Result<Box<dyn Store + Send>> {
        match self {
            PlaceSink::Memory(m) => Ok(Box::new(m.capture)),
            PlaceSink::File(mut s, temp) => {
                s.finish()?;
                match temp {
                    Some(t) => Ok(Box::new(CaptureFile::temporary(t)?)),
                    None => Ok(Box::new(CaptureFile::open(&s.path)?)),
                }
            }
        }
    }
}

/// Receives tapped tensors. `wants` is asked first so that unselected taps cost nothing.
pub trait TapSink {
    fn wants(&self, tap: Tap) -> bool;
    fn put(&mut self, phase: Phase, tap: Tap, t: &Tensor) -> Result<()>;
    /// An array a backend read or received whole (a dump's member, a device's output).
    fn put_array(&mut self, key: Key, a: ArrayD<f32>) -> Result<()>;
}

/// Records nothing.
pub struct NoTaps;

impl TapSink for NoTaps {
    fn wants(&self, _tap: Tap) -> bool {
        false
    }
    fn put(&mut self, _: Phase, _: Tap, _: &Tensor) -> Result<()> {
        Ok(())
    }
    fn put_array(&mut self, _: Key, _: ArrayD<f32>) -> Result<()> {
        Ok(())
    }
}

/// Keeps the selected taps in memory.
pub struct MemorySink {
    pub selection: TapSelection,
    pub capture: Capture,
}

impl MemorySink {
    pub fn new(selection: TapSelection) -> Self {
        MemorySink { selection, capture: Capture::default() }
    }
}

impl TapSink for MemorySink {
    fn wants(&self, tap: Tap) -> bool {
        tap.is_captured() && self.selection.matches(&tap.to_string())
    }
    fn put(&mut self, phase: Phase, tap: Tap, t: &Tensor) -> Result<()> {
        self.capture.put(phase, tap, tensor_to_array(t)?);
        Ok(())
    }
    fn put_array(&mut self, key: Key, a: ArrayD<f32>) -> Result<()> {
        self.capture.insert(key, a);
        Ok(())
    }
}

/// An `.npz` being written, one array at a time. Given up unfinished (an error on the way),
/// its zip writer is never finalized: zip's own drop would write the central directory into a
/// file being given up, and on a full disk fail again and print "ZipWriter drop failed" on
/// stderr; its buffer and descriptor go with the process instead.
pub struct NpzOut {
    w: std::mem::ManuallyDrop<ndarray_npy::NpzWriter<std::io::BufWriter<std::fs::File>>>,
    what: String,
}

impl NpzOut {
    /// An npz writer over `file`, its failures named after `path`.
    pub fn new(file: std::fs::File, path: &Path) -> Self {
        let w = ndarray_npy::NpzWriter::new(std::io::BufWriter::new(file));
        NpzOut { w: std::mem::ManuallyDrop::new(w), what: path.display().to_string() }
    }

    pub fn add<A, S, D>(&mut self, key: &str, a: &ndarray::ArrayBase<S, D>) -> Result<()>
    where
        A: ndarray_npy::WritableElement,
        S: ndarray::Data<Elem = A>,
        D: ndarray::Dimension,
    {
        self.w.add_array(key, a).map_err(|e| npz_error(&self.what, &format!("writing {key}"), &e))
    }

    /// The central directory, then the buffered bytes, each failure named.
    pub fn finish(self) -> Result<()> {
        let what = self.what.clone();
        let mut inner = std::mem::ManuallyDrop::into_inner(self.w)
            .finish()
            .map_err(|e| npz_error(&what, "closing npz", &e))?;
        std::io::Write::flush(&mut inner).map_err(|e| Error::io(&what, e))
    }
}

/// A failed npz write: the file system's error where one caused it (a full disk is a runtime
/// failure, exit 3), else what the writer said.
fn npz_error(what: &str, doing: &str, e: &(dyn std::error::Error + 'static)) -> Error {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            let copy = match io.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(io.kind(), io.to_string()),
            };
            return Error::io(what, copy);
        }
        cause = c.source();
    }
    Error::input(what, format!("{doing}: {e}"))
}

/// An `.npz` written one array at a time: a temporary file in place of `path` (renamed into
/// place by [`close_npz`]; dropped unfinished, it leaves nothing) and an npz writer over it.
pub(crate) fn create_npz(path: &Path) -> Result<(AtomicFile, NpzOut)> {
    let mut out = AtomicFile::create_seekable(path)?;
    let w = NpzOut::new(out.take_file(), path);
    Ok((out, w))
}

/// Close an npz ([`NpzOut::finish`]), then rename it into place (`announce`: say "wrote PATH").
pub(crate) fn close_npz(w: NpzOut, out: AtomicFile, announce: bool) -> Result<()> {
    w.finish()?;
    if announce {
        out.commit()
    } else {
        out.commit_quiet()
    }
}

/// Taps handed to the writer thread and not yet written, in bytes, past which the sink waits
/// (one batch always goes, however large): the decoder computes on while the last taps go to
/// disk, and what waits in memory stays bounded.
const IN_FLIGHT: u64 = 64 << 20;

/// Taps are handed over in batches of about this many bytes: a decode step emits hundreds of
/// small taps, and waking the writer for each cost more than writing them.
const BATCH: u64 = 4 << 20;

/// Streams the selected taps into an `.npz` as they are produced, so that all-layer attention
/// taps of a long prompt never sit in memory together. A writer thread does the writing (the
/// tensors are shared, not copied: candle's are immutable), so the decoder does not wait for
/// the file system. The archive is written under a temporary name and renamed into place by
/// [`NpzSink::finish`].
pub struct NpzSink {
    selection: TapSelection,
    path: PathBuf,
    writer: Option<Writer>,
    /// Taps not yet handed to the writer, and their bytes.
    batch: Batch,
    batch_bytes: u64,
    /// Taps handed to the sink so far.
    pub written: usize,
    /// Say "wrote PATH" once in place (not for a spilled run's temporary files).
    announce: bool,
}

/// A tap on its way to the file: a decoder's tensor (shared, not copied) or an array.
enum Item {
    Tensor(Tensor),
    Array(ArrayD<f32>),
}

impl Item {
    fn bytes(&self) -> u64 {
        4 * match self {
            Item::Tensor(t) => t.elem_count(),
            Item::Array(a) => a.len(),
        } as u64
    }
}

type Batch = Vec<(String, Item)>;

struct Writer {
    out: AtomicFile,
    tx: std::sync::mpsc::Sender<Batch>,
    thread: std::thread::JoinHandle<Result<NpzOut>>,
    /// Bytes handed over and not yet written, and the signal that some were.
    pending: std::sync::Arc<(std::sync::Mutex<u64>, std::sync::Condvar)>,
}

impl NpzSink {
    pub fn create(path: &Path, selection: TapSelection) -> Result<Self> {
        let (out, mut w) = create_npz(path)?;
        let (tx, rx) = std::sync::mpsc::channel::<Batch>();
        let pending = std::sync::Arc::new((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
        let shared = pending.clone();
        let thread = std::thread::Builder::new()
            .name("npz-writer".into())
            .spawn(move || {
                for batch in rx {
                    let bytes: u64 = batch.iter().map(|(_, t)| t.bytes()).sum();
                    let wrote = batch.iter().try_for_each(|(key, item)| match item {
                        Item::Tensor(t) => with_view(t, |arr| w.add(key, &arr))?,
                        Item::Array(a) => w.add(key, a),
                    });
                    drop(batch);
                    let (lock, cv) = &*shared;
                    *lock.lock().unwrap_or_else(|e| e.into_inner()) -= bytes;
                    cv.notify_all();
                    wrote?;
                }
                Ok(w)
            })
            .map_err(|e| Error::io(path, e))?;
        Ok(NpzSink {
            selection,
            path: path.to_path_buf(),
            writer: Some(Writer { out, tx, thread, pending }),
            batch: Vec::new(),
            batch_bytes: 0,
            written: 0,
            announce: true,
        })
    }

    /// Put the archive in place without saying "wrote PATH".
    pub fn quiet(mut self) -> Self {
        self.announce = false;
        self
    }

    /// Hand the batch to the writer, first waiting while more than [`IN_FLIGHT`] bytes are
    /// still to be written. False when the writer has stopped (on an error, which
    /// [`NpzSink::finish`] returns).
    fn hand_over(&mut self) -> bool {
        let Some(w) = self.writer.as_ref() else { return false };
        if self.batch.is_empty() {
            return true;
        }
        let bytes = std::mem::take(&mut self.batch_bytes);
        {
            let (lock, cv) = &*w.pending;
            let mut pending = lock.lock().unwrap_or_else(|e| e.into_inner());
            while *pending > 0 && *pending + bytes > IN_FLIGHT && !w.thread.is_finished() {
                pending = cv.wait(pending).unwrap_or_else(|e| e.into_inner());
            }
            *pending += bytes;
        }
        w.tx.send(std::mem::take(&mut self.batch)).is_ok() && !w.thread.is_finished()
    }

    /// Wait for every tap to be written, close the archive and put it in place. Called on
    /// success and on failure alike: what was written stays.
    pub fn finish(&mut self) -> Result<()> {
        self.hand_over();
        if let Some(Writer { out, tx, thread, .. }) = self.writer.take() {
            drop(tx);
            let w = thread
                .join()
                .map_err(|_| Error::usage(format!("{}: the npz writer panicked", self.path.display())))??;
            close_npz(w, out, self.announce)?;
        }
        Ok(())
    }

    fn push(&mut self, key: String, item: Item) -> Result<()> {
        if self.writer.is_none() {
            return Err(Error::usage("npz sink already finished"));
        }
        self.batch_bytes += item.bytes();
        self.batch.push((key, item));
        self.written += 1;
        if self.batch_bytes >= BATCH && !self.hand_over() {
            // The writer stopped on an error: finish() joins it and returns that error.
            self.finish()?;
            return Err(Error::usage(format!("{}: the npz writer stopped", self.path.display())));
        }
        Ok(())
    }
}

impl TapSink for NpzSink {
    fn wants(&self, tap: Tap) -> bool {
        tap.is_captured() && self.selection.matches(&tap.to_string())
    }
    fn put(&mut self, phase: Phase, tap: Tap, t: &Tensor) -> Result<()> {
        self.push(Key::new(phase, tap).to_string(), Item::Tensor(t.clone()))
    }
    fn put_array(&mut self, key: Key, a: ArrayD<f32>) -> Result<()> {
        self.push(key.to_string(), Item::Array(a))
    }
}

impl Drop for NpzSink {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npz_round_trip_keeps_keys_and_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.npz");
        let mut c = Capture::default();
        c.put(
            Phase::Prefill,
            Tap::Logits,
            ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1., 2., 3., 4., 5., 6.]).unwrap(),
        );
        c.put(Phase::Decode(0), Tap::Embed, ArrayD::zeros(IxDyn(&[1, 4])));
        c.write_npz(&path).unwrap();
        let back = Capture::read_npz(&path).unwrap();
        let keys: Vec<String> = back.keys().map(Key::to_string).collect();
        assert_eq!(keys, vec!["prefill/logits", "decode.0/embed"]);
        assert_eq!(back.at(Phase::Prefill, Tap::Logits), c.at(Phase::Prefill, Tap::Logits));
    }

    #[test]
    fn not_an_npz_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.npz");
        std::fs::write(&path, b"definitely not a zip").unwrap();
        let e = Capture::read_npz(&path).unwrap_err().to_string();
        assert!(e.contains("bad.npz") && e.contains("npz"), "{e}");
    }
}
