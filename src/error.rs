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
    /// The work was stopped from outside ([`interrupt`]: Ctrl-C in the Python module).
    #[error("interrupted")]
    Interrupted,
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

    /// The causes its own message does not already say, outermost first: a candle error is
    /// part of `Compute`'s message, and printing it again as a cause printed its backtrace twice.
    pub fn causes(&self) -> Vec<String> {
        let top = self.to_string();
        std::iter::successors(std::error::Error::source(self), |s| s.source())
            .map(|s| s.to_string())
            .filter(|text| !top.contains(text.trim()))
            .collect()
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
                | K::ReadOnlyFilesystem
                | K::InvalidFilename => 2,
                // A loop of symbolic links (ELOOP; its ErrorKind is not stable) is a path the
                // user gave, like one that does not exist.
                #[cfg(unix)]
                _ if source.raw_os_error() == Some(libc::ELOOP) => 2,
                _ => 3,
            },
            Error::Compute { .. } | Error::Device(_) => 3,
            // 128 + SIGINT, as a shell reports a run stopped by Ctrl-C.
            Error::Interrupted => 130,
        }
    }
}

/// Set by [`interrupt`], read by [`check_interrupt`] between layers, decode steps, emulations
/// and compared taps: how a host that keeps its own signal handling (the Python module) stops
/// a long run cleanly. The command line never sets it (its Ctrl-C ends the process).
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Ask the work running now to stop at its next check (`on`), or clear the request.
pub fn interrupt(on: bool) {
    INTERRUPTED.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// `Err(Interrupted)` once [`interrupt`] was asked.
pub fn check_interrupt() -> Result<()> {
    if INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed) {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// Text read from a file, for a message: at most `max` characters, `…` after a cut, and every
/// character but printable ASCII escaped (a crafted file cannot fill the terminal or drive it).
pub fn echo(s: &str, max: usize) -> String {
    let mut e: String = s.chars().take(max).flat_map(char::escape_default).collect();
    if s.chars().nth(max).is_some() {
        e += "…";
    }
    e
}

/// Text from a file for a table or a message, whole: every control character (and each that
/// reorders text: bidirectional overrides, zero-width marks) escaped, the rest kept, so forged
/// text cannot drive or redraw the terminal it is printed on.
pub fn printable(s: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    s.chars().fold(String::with_capacity(s.len()), |mut out, c| {
        match hidden(c) {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
        out
    })
}

/// A byte count for people: `512 B`, `3.2 MiB`, `128.0 GiB` (powers of 1024, as
/// /proc/meminfo's kB are).
pub fn format_size(bytes: u64) -> String {
    Size(bytes).to_string()
}

/// A byte count as [`format_size`] writes it, without allocating (the allocator's refusal
/// message is written with it).
pub struct Size(pub u64);

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let (mut v, mut unit) = (self.0 as f64 / 1024.0, 0);
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        write!(f, "{v:.1} {}", UNITS[unit])
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

/// `f` run where a panic is a value: `None` when it panicked. For third-party readers that
/// `expect` on malformed input (candle's GGUF header, the tokenizers crate's decoder field), so
/// a hostile file becomes an input error. The panic's message is not printed: the default hook
/// is skipped on this thread while `f` runs (a hook installed once; every other panic, on any
/// thread, still reaches the previous hook).
pub fn contained<T>(f: impl FnOnce() -> T) -> Option<T> {
    use std::cell::Cell;
    thread_local!(static QUIET: Cell<bool> = const { Cell::new(false) });
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info)
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    out.ok()
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
        let looped = Error::io("a.hef", std::io::Error::from_raw_os_error(libc::ELOOP));
        assert_eq!(looped.exit_code(), 2, "a symbolic link loop is the path given");
    }

    #[test]
    fn sizes_read_like_meminfo() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(3 << 20), "3.0 MiB");
        assert_eq!(format_size(128 << 30), "128.0 GiB");
    }
}
