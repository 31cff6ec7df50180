//! One error type for the library. Every variant names the file, key, tensor or field at
//! fault and says what would fix it. The binary maps each variant to an exit code by its type
//! ([`Error::exit_code`]): 2 for input and usage errors, 3 for device and runtime errors.
//!
//! Files are written here too ([`write_file`], [`AtomicFile`]): through a temporary file in
//! the same folder, renamed into place, so a failed or interrupted write never leaves a
//! half-written file where a good one was; every file written is announced on stderr.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The content of an input file (config.json, safetensors, probe, npz, HEF, ...) is wrong.
    /// `what` is the file (and key/tensor inside it), `msg` says what is wrong and how to fix it.
    #[error("{what}: {msg}")]
    Input { what: String, msg: String },
    /// The command line asks for something inconsistent.
    #[error("{0}")]
    Usage(String),
    /// The request is valid but hefprobe does not implement it (yet); says what is supported.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A tensor computation failed; `context` names the layer/tap being computed.
    #[error("{context}: {source}")]
    Compute {
        context: String,
        #[source]
        source: candle_core::Error,
    },
    /// The device (simulated or real) refused or failed an operation.
    #[error("device: {0}")]
    Device(String),
    /// The work asked for needs more memory than the budget (`--max-memory`, default what the
    /// machine has available). `needs` is `None` when the size does not even fit in 64 bits.
    #[error(
        "{what}: needs {}, budget {} ({budget_from}); {fix}",
        .needs.map_or("more than 16 EiB (the size overflows)".to_string(), format_size),
        format_size(*.budget)
    )]
    Budget { what: String, needs: Option<u64>, budget: u64, budget_from: String, fix: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn input(what: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Input { what: what.into(), msg: msg.into() }
    }

    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().to_path_buf(), source }
    }

    pub fn usage(msg: impl Into<String>) -> Self {
        Error::Usage(msg.into())
    }

    /// The process exit code for this error, decided by its type (never by its text):
    /// 2 when the input or the command line is at fault (the user fixes a file or a flag),
    /// 3 when the device or the runtime failed (a device error, a tensor computation, a disk
    /// that filled up).
    pub fn exit_code(&self) -> u8 {
        use std::io::ErrorKind as K;
        match self {
            Error::Input { .. } | Error::Usage(_) | Error::Unsupported(_) | Error::Budget { .. } => 2,
            Error::Io { source, .. } => match source.kind() {
                K::NotFound
                | K::PermissionDenied
                | K::AlreadyExists
                | K::InvalidInput
                | K::InvalidData
                | K::UnexpectedEof
                | K::IsADirectory
                | K::NotADirectory
                | K::DirectoryNotEmpty
                | K::ReadOnlyFilesystem => 2,
                _ => 3,
            },
            Error::Compute { .. } | Error::Device(_) => 3,
        }
    }
}

/// A byte count for people: `512 B`, `3.2 MiB`, `128.0 GiB` (powers of 1024, as
/// /proc/meminfo's kB are).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Attach a context (layer, tap) to candle errors, which otherwise say only "shape mismatch".
pub trait ComputeContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> ComputeContext<T> for std::result::Result<T, candle_core::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Compute { context: context(), source })
    }
}

impl From<candle_core::Error> for Error {
    fn from(source: candle_core::Error) -> Self {
        Error::Compute { context: "tensor computation".into(), source }
    }
}

/// Read a whole file with the path in the error.
pub fn read_file(path: impl AsRef<Path>) -> Result<Vec<u8>> {
    std::fs::read(path.as_ref()).map_err(|e| Error::io(path, e))
}

/// Read a whole UTF-8 file with the path in the error.
pub fn read_text(path: impl AsRef<Path>) -> Result<String> {
    std::fs::read_to_string(path.as_ref()).map_err(|e| Error::io(path, e))
}

/// Write a whole file, creating parent directories, with the path in the error: through a
/// temporary file in the same folder, renamed into place, then announced ("wrote PATH").
pub fn write_file(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> Result<()> {
    use std::io::Write;
    let mut f = AtomicFile::create(path.as_ref())?;
    let tmp = f.temp_path().to_path_buf();
    f.file().write_all(bytes.as_ref()).map_err(|e| Error::io(&tmp, e))?;
    f.commit()
}

/// Say on stderr that a file was written. Every writer calls this once the file is in place,
/// so a run whose reports all go to files still says where they went.
pub fn announce(path: &Path) {
    eprintln!("wrote {}", path.display());
}

/// A file written under a temporary name in its own folder (`.NAME.tmp-PID`) and renamed
/// over `path` by [`AtomicFile::commit`]: a rename within one folder is atomic, so readers
/// see the old file or the new one, never half of one. Dropped without a commit, the
/// temporary file is removed and `path` is left as it was.
pub struct AtomicFile {
    path: PathBuf,
    temp: PathBuf,
    file: Option<std::fs::File>,
}

impl AtomicFile {
    pub fn create(path: &Path) -> Result<Self> {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let name = path
            .file_name()
            .ok_or_else(|| Error::usage(format!("`{}` is not a file name to write to", path.display())))?;
        let temp_name = format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id());
        let temp = parent.map_or_else(|| PathBuf::from(&temp_name), |p| p.join(&temp_name));
        let file = std::fs::File::create(&temp).map_err(|e| Error::io(&temp, e))?;
        Ok(AtomicFile { path: path.to_path_buf(), temp, file: Some(file) })
    }

    pub fn file(&mut self) -> &mut std::fs::File {
        self.file.as_mut().expect("open until commit")
    }

    /// Take the open file (e.g. for a writer that owns it); [`AtomicFile::commit`] still renames.
    pub fn take_file(&mut self) -> std::fs::File {
        self.file.take().expect("open until commit")
    }

    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flush, rename over the destination and announce it.
    pub fn commit(self) -> Result<()> {
        let path = self.path.clone();
        self.commit_quiet()?;
        announce(&path);
        Ok(())
    }

    /// [`AtomicFile::commit`] without the announcement: for files nobody asked for by name
    /// (a run's captures spilled to a temporary folder).
    pub fn commit_quiet(mut self) -> Result<()> {
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(|e| Error::io(&self.temp, e))?;
        }
        std::fs::rename(&self.temp, &self.path).map_err(|e| Error::io(&self.path, e))?;
        self.temp = PathBuf::new();
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The closest candidate by edit distance, for "did you mean" hints (finding 5 was a
/// misspelled key that nobody noticed).
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (levenshtein(word, c), c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_type() {
        assert_eq!(Error::usage("x").exit_code(), 2);
        assert_eq!(Error::input("f", "x").exit_code(), 2);
        assert_eq!(Error::Device("x".into()).exit_code(), 3);
        let missing = Error::io("nowhere", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(missing.exit_code(), 2);
        let full = Error::io("out", std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert_eq!(full.exit_code(), 3);
    }

    #[test]
    fn writes_are_atomic_and_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_file(&p, "one").unwrap();
        write_file(&p, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        // An abandoned write leaves the old file in place and no temporary behind.
        let f = AtomicFile::create(&p).unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn sizes_read_like_meminfo() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(3 << 20), "3.0 MiB");
        assert_eq!(format_size(128 << 30), "128.0 GiB");
    }

    #[test]
    fn closest_finds_the_finding_5_misspelling() {
        let keys = ["prefill_input_tokens_count", "kv_cache_size", "num_attention_heads"];
        assert_eq!(closest("prefill_input_tokens_size", keys), Some("prefill_input_tokens_count"));
        assert_eq!(closest("completely_else", keys), None);
    }
}
