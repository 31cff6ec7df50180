//! One error type for the library. Every variant names the file, key, tensor or field at
//! fault and says what would fix it; the binary maps all of them to exit code 2.

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

/// Write a whole file, creating parent directories, with the path in the error.
pub fn write_file(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> Result<()> {
    let path = path.as_ref();
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
    }
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
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
    fn closest_finds_the_finding_5_misspelling() {
        let keys = ["prefill_input_tokens_count", "kv_cache_size", "num_attention_heads"];
        assert_eq!(closest("prefill_input_tokens_size", keys), Some("prefill_input_tokens_count"));
        assert_eq!(closest("completely_else", keys), None);
    }
}
