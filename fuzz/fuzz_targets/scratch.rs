//! A file for the path-based readers: each fuzz process writes its input to its own scratch
//! folder, so a target runs the reader exactly as the command line does (through
//! `files::open`, size checks and all), not a text-only shortcut.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This process's scratch folder (created once; left for the OS to clean, as libFuzzer exits
/// without unwinding).
pub fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("hefprobe-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a scratch folder in the temp dir");
        d
    })
}

/// `data` written to `name` in the scratch folder.
pub fn file(name: &str, data: &[u8]) -> PathBuf {
    let path = dir().join(name);
    std::fs::write(&path, data).expect("a scratch file in the temp dir");
    path
}
