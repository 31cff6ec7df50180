//! The one place hefprobe prints: stdout and stderr are written through [`write`] (the `outln!`,
//! `out!`, `errln!` and `err!` macros), never `println!` and its kin, which panic when their
//! stream fails.
//!
//! A stream that fails ends the command as the tools beside it end: a reader that went away
//! (`hefprobe verify b | head -1`) quietly, with status [`CLOSED`] (128 + SIGPIPE, what a shell
//! reports for a coreutils command stopped by the closed pipe, as 130 is for Ctrl-C); any other
//! failure (a full disk, `/dev/full`) with exit 3 and `error: stdout: …` (or `stderr`) said on
//! the other stream. Only the command line ends its process ([`end_process_on_failure`]); in a
//! host that embeds the library (the Python module) the failure is kept ([`failed`]), the
//! stream is not written again, and [`write`] returns the error.

use std::fmt;
use std::io::{ErrorKind, Write};
use std::sync::{Mutex, OnceLock};

/// The exit status of a command whose stdout or stderr reader went away: 128 + SIGPIPE (13).
pub const CLOSED: u8 = 141;

/// Exit status of a stream that failed otherwise (a runtime error, as a full disk is).
pub const FAILED: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn other(self) -> Stream {
        match self {
            Stream::Stdout => Stream::Stderr,
            Stream::Stderr => Stream::Stdout,
        }
    }
}

/// How each stream failed, once it did.
static FAILURES: Mutex<[Option<ErrorKind>; 2]> = Mutex::new([None, None]);
/// What ends the process when a stream fails (the command line's; none in an embedding host).
static END: OnceLock<fn(u8) -> !> = OnceLock::new();

/// End the process with `end(status)` when a stream fails (`end` removes what the run must
/// not leave behind, then exits). Set once, by the command line.
pub fn end_process_on_failure(end: fn(u8) -> !) {
    let _ = END.set(end);
}

/// How `stream` failed, if it did.
pub fn failed(stream: Stream) -> Option<ErrorKind> {
    FAILURES.lock().unwrap_or_else(|e| e.into_inner())[stream as usize]
}

/// `bytes` on `stream`, flushed. A failure ends the command (see the module's doc) or, in an
/// embedding host, is kept and returned; a stream that failed is not written again.
pub fn write(stream: Stream, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(kind) = failed(stream) {
        return Err(kind.into());
    }
    let result = match stream {
        Stream::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(bytes).and_then(|()| o.flush())
        }
        Stream::Stderr => std::io::stderr().lock().write_all(bytes),
    };
    if let Err(e) = &result {
        fail(stream, e);
    }
    result
}

/// [`write`] of formatted text, its error kept (the macros' entry).
pub fn print(stream: Stream, args: fmt::Arguments) {
    let _ = match args.as_str() {
        Some(s) => write(stream, s.as_bytes()),
        None => write(stream, args.to_string().as_bytes()),
    };
}

/// `stream` failed with `e`: kept, and the command ended where it ends on a failure.
pub fn fail(stream: Stream, e: &std::io::Error) {
    FAILURES.lock().unwrap_or_else(|e| e.into_inner())[stream as usize].get_or_insert(e.kind());
    let Some(end) = END.get() else { return };
    if e.kind() == ErrorKind::BrokenPipe {
        end(CLOSED);
    }
    // Said on the other stream, unless it failed too.
    let _ = write(stream.other(), format!("error: {}: {e}\n", stream.name()).as_bytes());
    end(FAILED)
}

/// `println!` on stdout, through [`write`].
#[macro_export]
macro_rules! outln {
    () => { $crate::console::print($crate::console::Stream::Stdout, format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::console::print($crate::console::Stream::Stdout, format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` on stdout, through [`write`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::console::print($crate::console::Stream::Stdout, format_args!($($arg)*)) };
}

/// `eprintln!`, through [`write`].
#[macro_export]
macro_rules! errln {
    () => { $crate::console::print($crate::console::Stream::Stderr, format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::console::print($crate::console::Stream::Stderr, format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!`, through [`write`].
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::console::print($crate::console::Stream::Stderr, format_args!($($arg)*)) };
}
