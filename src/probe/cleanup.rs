//! What an interrupted run leaves. Spill folders that outlive their run: removed when the run is
//! interrupted (Ctrl-C, SIGTERM, SIGHUP), and swept at the next spilled run when their run was
//! killed outright (SIGKILL, the kernel's OOM killer; a spilled run is the one most likely to meet it). A spilled run's
//! files can be tens of GB, too much to leave in a temporary folder.
//!
//! Each spill folder holds an `owner` file, `PID HOST`; a folder is swept only when its HOST is
//! this machine's and no process PID runs here (a `--spill-dir` shared between hosts keeps
//! other hosts' folders). The handler is installed with the first spill folder, or by a
//! command that rewrites partial reports as it goes (`suite`, [`install`]); runs that do neither
//! keep the default signal behaviour. Such a command says what its files hold ([`leave`]) and
//! replaces them inside [`writing`], so a signal never cuts a report in half: the handler waits
//! for the write, says what was left, and exits 130.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// The prefix of every spill folder (`tempfile` adds a random suffix).
pub const PREFIX: &str = "hefprobe-spill-";
const OWNER: &str = "owner";
/// Exit status of a run stopped by a signal, as a shell reports SIGINT (128 + 2).
const INTERRUPTED: i32 = 130;

/// Spill folders of this process that exist now.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Bundles being written (their temporary folders), which an interrupted run leaves nothing of.
static STAGED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();
/// What the files written so far hold, said when interrupted.
static LEFT: Mutex<Option<String>> = Mutex::new(None);
/// Held while a partial report is replaced.
static WRITING: Mutex<()> = Mutex::new(());

/// The host process keeps its signals (the Python module: Ctrl-C is Python's
/// KeyboardInterrupt, and stops the work through `error::interrupt`, whose unwinding removes
/// the spill folders): no handler is ever installed here.
static HOST_KEEPS_SIGNALS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Never install a signal handler in this process (see [`HOST_KEEPS_SIGNALS`]).
pub fn leave_signals_to_host() {
    HOST_KEEPS_SIGNALS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Handle Ctrl-C, SIGTERM and SIGHUP here (idempotent).
pub fn install() {
    if HOST_KEEPS_SIGNALS.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    HANDLER.call_once(|| {
        // Another handler already installed (a library user's own) is left in charge; a spill
        // folder is then still swept by the next spilled run here.
        let _ = ctrlc::set_handler(on_signal);
    });
}

/// Say `note` (what the reports written so far hold) if the run is interrupted.
pub fn leave(note: String) {
    *LEFT.lock().unwrap_or_else(|e| e.into_inner()) = Some(note);
}

/// Run `f` (a write of files the handler reports on) without being cut short by a signal.
pub fn writing<T>(f: impl FnOnce() -> T) -> T {
    let _held = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    f()
}

/// Mark `dir` (a new spill folder) as this process's: write its owner file, and remove it if
/// the run is interrupted. Errors only when the owner file cannot be written.
pub fn watch(dir: &Path) -> std::io::Result<()> {
    // The handler first, the owner file last: once the file says the folder is a run's, a
    // signal removes it (a test waits for the file, then interrupts).
    install();
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).push(dir.to_path_buf());
    std::fs::write(dir.join(OWNER), format!("{} {}\n", std::process::id(), host()))
}

/// `dir` is gone (or about to be, by its owner): no longer removed on a signal.
pub fn unwatch(dir: &Path) {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|d| d != dir);
    STAGED.lock().unwrap_or_else(|e| e.into_inner()).retain(|d| d != dir);
}

/// Remove `dir`, a bundle's temporary folder, if the run is interrupted ([`unwatch`] it once it
/// is renamed into place).
pub fn staging(dir: &Path) {
    install();
    STAGED.lock().unwrap_or_else(|e| e.into_inner()).push(dir.to_path_buf());
}

/// Set once the handler runs: the work's own end (an error from a file removed under it, or
/// success) waits for the handler's exit instead of racing it ([`await_handler`]).
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Where the command is about to exit: if the signal handler runs, wait for its exit (130, its
/// message) rather than exit with what the interrupted work ended in.
pub fn await_handler() {
    while STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::park_timeout(std::time::Duration::from_secs(1));
    }
}

fn on_signal() {
    STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
    // A report being replaced is finished first; none is started after (the lock is kept).
    let _held = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    // Nor any other file: a spilled capture's temporary file would make its folder again.
    crate::files::stop_new_files();
    for d in std::mem::take(&mut *STAGED.lock().unwrap_or_else(|e| e.into_inner())) {
        let _ = std::fs::remove_dir_all(&d);
        crate::errln!("hefprobe: interrupted; removed the unfinished bundle {}", d.display());
    }
    let dirs = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for d in &dirs {
        match std::fs::remove_dir_all(d) {
            Ok(()) => crate::errln!("hefprobe: interrupted; removed the spill folder {}", d.display()),
            Err(e) => {
                crate::errln!("hefprobe: interrupted; could not remove the spill folder {}: {e}", d.display())
            }
        }
    }
    match LEFT.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(note) => crate::errln!("hefprobe: interrupted; {note}"),
        None if dirs.is_empty() => crate::errln!("hefprobe: interrupted"),
        None => {}
    }
    std::process::exit(INTERRUPTED);
}

/// Remove this process's spill folders now (the process is about to exit: its stdout went away).
pub fn remove_spill_folders() {
    crate::files::stop_new_files();
    let staged = std::mem::take(&mut *STAGED.lock().unwrap_or_else(|e| e.into_inner()));
    let dirs = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for d in staged.iter().chain(&dirs) {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Remove the spill folders in `parent` left by runs on this host that no longer run; returns
/// what was removed and its size, for the run's note.
pub fn sweep(parent: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(parent) else { return Vec::new() };
    let me = host();
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let named = e.file_name().to_str().is_some_and(|n| n.starts_with(PREFIX));
        if !named || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Some((pid, owner_host)) =
            std::fs::read_to_string(path.join(OWNER)).ok().and_then(|s| parse_owner(&s))
        else {
            continue; // no owner file: not ours to judge (an older version's, or being created)
        };
        if owner_host != me || alive(pid) != Some(false) {
            continue;
        }
        let bytes = size_of(&path);
        if std::fs::remove_dir_all(&path).is_ok() {
            removed.push((path, bytes));
        }
    }
    removed
}

fn parse_owner(s: &str) -> Option<(u32, String)> {
    let mut it = s.split_whitespace();
    let pid = it.next()?.parse().ok()?;
    let host = it.next()?.to_string();
    it.next().is_none().then_some((pid, host))
}

/// Whether process `pid` runs on this machine; None where that cannot be told.
fn alive(pid: u32) -> Option<bool> {
    cfg!(target_os = "linux").then(|| Path::new("/proc").join(pid.to_string()).exists())
}

/// This machine's name (the kernel's; "unknown" where it cannot be read).
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
        .unwrap_or_else(|| "unknown".into())
}

/// Bytes of the files under `dir` (one level deep: a spill folder is flat).
fn size_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| {
            it.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(parent: &Path, name: &str, owner: Option<&str>) -> PathBuf {
        let d = parent.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("reference.npz"), vec![0u8; 1000]).unwrap();
        if let Some(o) = owner {
            std::fs::write(d.join(OWNER), o).unwrap();
        }
        d
    }

    #[test]
    fn sweep_removes_only_folders_of_dead_runs_on_this_host() {
        if !cfg!(target_os = "linux") {
            return; // liveness is read from /proc
        }
        let parent = tempfile::tempdir().unwrap();
        let p = parent.path();
        let me = host();
        // A pid above the kernel's largest (2^22) cannot be running.
        let dead = folder(p, "hefprobe-spill-dead", Some(&format!("4194305 {me}")));
        let live = folder(p, "hefprobe-spill-live", Some(&format!("{} {me}", std::process::id())));
        let elsewhere = folder(p, "hefprobe-spill-other", Some("4194305 some-other-host"));
        let no_owner = folder(p, "hefprobe-spill-old", None);
        let garbled = folder(p, "hefprobe-spill-garbled", Some("not a pid"));
        let not_ours = folder(p, "other-tool-dead", Some(&format!("4194305 {me}")));
        let removed = sweep(p);
        // Its size counts every file, the owner file too.
        assert_eq!(removed, vec![(dead.clone(), 1000 + format!("4194305 {me}").len() as u64)]);
        assert!(!dead.exists());
        for kept in [live, elsewhere, no_owner, garbled, not_ours] {
            assert!(kept.exists(), "{} was removed", kept.display());
        }
        assert!(sweep(&p.join("missing")).is_empty());
    }

    #[test]
    fn a_watched_folder_has_an_owner_file_naming_this_process() {
        let d = tempfile::tempdir().unwrap();
        watch(d.path()).unwrap();
        let owner = std::fs::read_to_string(d.path().join(OWNER)).unwrap();
        assert_eq!(parse_owner(&owner), Some((std::process::id(), host())));
        assert!(LIVE.lock().unwrap().iter().any(|p| p == d.path()));
        unwatch(d.path());
        assert!(!LIVE.lock().unwrap().iter().any(|p| p == d.path()));
    }
}
