//! A run whose captures do not fit the memory budget: its plan (what stays in memory, what
//! goes to disk, whether the disk has room), its folders, and the report's notes. The stages
//! in [`super::run`] stream each capture to a file in the [`SpillDir`] and read it from there.

use crate::backend::overrides::Overrides;
use crate::backend::BackendSpec;
use crate::budget::{Budget, Bytes};
use crate::capture::Store;
use crate::error::{Error, Result};
use crate::inputs::InputSet;
use crate::model::memory::{self, Estimate, TapsHeld};
use crate::model::Checkpoint;
use crate::tap::TapSelection;
use std::path::{Path, PathBuf};

/// How a spilled run's note begins: it says where and under what budget this machine ran the
/// probe, not what it measured (`verify` leaves it out when it compares reports).
pub const SPILL_NOTE: &str = "captures spilled to disk";

/// Where captures live ([`prepare`] plans it, [`run_backends`] and [`save`] use it).
#[derive(Debug, Clone, Default)]
pub struct CaptureOptions {
    /// When the captures do not fit the memory budget, spill them to disk instead of refusing
    /// the run (`run`, `explain` and the suite do).
    pub spill: bool,
    /// Where spilled captures go (`--spill-dir`); default the system's temporary folder.
    pub spill_dir: Option<PathBuf>,
    /// Write every capture (`NAME.npz`) into this folder.
    pub save_captures: Option<PathBuf>,
    pub save_inputs: Option<PathBuf>,
    /// Save them without saying "wrote PATH" (a bundle's temporary folder: the bundle is
    /// announced once it is renamed into place).
    pub quiet: bool,
}

/// A run whose captures exceed the memory budget, planned with its captures on disk.
#[derive(Debug, Clone)]
pub struct SpillPlan {
    /// What holding every capture in memory would need, and the budget it exceeds.
    pub in_memory: Bytes,
    pub budget: Budget,
    /// What the spilled run plans to use, and how much it writes to disk.
    pub needs: Estimate,
    pub on_disk: Bytes,
    /// Comparison workers: each holds one tap of each side (and a probs tap's scores).
    pub workers: usize,
    /// The folder the temporary one is made in: `--spill-dir`, else the system's temp folder.
    pub parent: PathBuf,
}

/// The folders of a spilled run: `tmp` (deleted when dropped) holds the local views, and the
/// cumulative captures too unless `--save-captures` names a folder (`captures`) to keep them.
pub struct SpillDir {
    pub tmp: tempfile::TempDir,
    pub captures: PathBuf,
    /// Spill folders of killed runs removed from the same parent folder (path, bytes).
    pub swept: Vec<(PathBuf, u64)>,
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        // `tmp` is removed right after this, by its own drop.
        super::cleanup::unwatch(self.tmp.path());
    }
}

impl SpillDir {
    pub(super) fn create(plan: &SpillPlan, opts: &CaptureOptions) -> Result<Self> {
        std::fs::create_dir_all(&plan.parent).map_err(|e| Error::io(&plan.parent, e))?;
        let swept = super::cleanup::sweep(&plan.parent);
        let tmp = tempfile::Builder::new()
            .prefix(super::cleanup::PREFIX)
            .tempdir_in(&plan.parent)
            .map_err(|e| Error::io(&plan.parent, e))?;
        super::cleanup::watch(tmp.path()).map_err(|e| Error::io(tmp.path(), e))?;
        let captures = match &opts.save_captures {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
                d.clone()
            }
            None => tmp.path().to_path_buf(),
        };
        Ok(SpillDir { tmp, captures, swept })
    }
}

/// The run being planned: its checkpoint, inputs, the reference's taps and the backends.
pub(super) struct Planned<'a> {
    pub ckpt: &'a Checkpoint,
    pub inputs: &'a InputSet,
    pub ref_taps: &'a TapSelection,
    pub specs: &'a [BackendSpec],
}

/// The plan of a run whose captures do not fit `budget` in memory (`in_memory` held there):
/// each capture written to disk tap by tap and compared from the files. Refused (exit 2) when
/// even that does not fit the budget, or its files do not fit the disk. `(local, explain)`:
/// the run makes local views, and explains (ranks faults by emulating them, each emulation a
/// capture on disk matched one tap of each side at a time; the tie check holds two at once).
pub(super) fn spill_plan(
    run: &Planned,
    (local, explain): (bool, bool),
    (in_memory, budget): (Bytes, Budget),
    opts: &CaptureOptions,
) -> Result<SpillPlan> {
    let Planned { ckpt, inputs, ref_taps, specs } = *run;
    let cfg = &ckpt.config;
    // What stays in memory beside the spilled taps: the reference's `embed` and `layers.*.out`
    // that feed a local view's overrides. The weights are held once, in their stored dtype, and
    // shared by every emulator (weight quantization is applied as they are read).
    let overrides = if local {
        let sel = TapSelection::parse(&Overrides::required_taps(cfg.num_layers))?;
        memory::estimate(cfg, inputs, &sel, TapsHeld::InMemory { captures: 1 }).taps
    } else {
        Bytes::ZERO
    };
    let plan_with = |workers: usize| {
        // The tap being written, and per comparison worker one tap of each side, the scores
        // masking a probs tap, and that mask (one byte an element): four taps, rounded up.
        let copies = 1 + 4 * workers as u64;
        let mut e = memory::estimate(cfg, inputs, ref_taps, TapsHeld::Spilled { copies })
            .with_weights(memory::held(ckpt));
        e.taps = e.taps.plus(overrides);
        e
    };
    // As many comparison workers as rayon has threads, fewer if that is what fits.
    let threads = rayon::current_num_threads().max(1);
    let workers = (1..=threads).rev().find(|&w| budget.allows(plan_with(w).total())).unwrap_or(1);
    let needs = plan_with(workers);
    budget.check(
        format!(
            "a run of {} prompt tokens and {} decode steps on this model, even with its captures spilled to disk \
             ({}; {in_memory} with the captures in memory)",
            inputs.prompt.len(),
            inputs.decode.steps(),
            needs.breakdown()
        ),
        needs.total(),
        "shorten the prompt or --decode / decode, record fewer taps (--taps / taps = [...]), or raise --max-memory",
    )?;
    // On disk: every capture, a local view each (deleted once compared, but counted), and
    // explain's two emulations (no larger than the reference's capture).
    let captures = 1 + 2 * specs.len() as u64 + if explain { 2 } else { 0 };
    let on_disk = memory::estimate(cfg, inputs, ref_taps, TapsHeld::InMemory { captures }).taps;
    let parent = opts.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dest = opts.save_captures.as_deref().unwrap_or(&parent);
    let free = [&parent, dest].into_iter().filter_map(|d| Some((d, free_disk(d)?))).min_by_key(|(_, f)| *f);
    check_disk(on_disk, free, in_memory, &budget)?;
    Ok(SpillPlan { in_memory, budget, needs, on_disk, workers, parent })
}

/// Refuse a spill whose files (`on_disk`) do not fit the folder with the least room (`free`:
/// the folder and its free bytes; None where that cannot be asked).
fn check_disk(on_disk: Bytes, free: Option<(&Path, u64)>, in_memory: Bytes, budget: &Budget) -> Result<()> {
    let Some((folder, free)) = free else { return Ok(()) };
    if on_disk.get().is_some_and(|n| n <= free) {
        return Ok(());
    }
    Err(Error::usage(format!(
        "the captures do not fit the memory budget ({in_memory} > {} from {}), and spilled to disk they need \
         about {on_disk}, but {} has {} free; give a folder with room (--spill-dir DIR), record fewer taps \
         (--taps), shorten the prompt, or raise --max-memory",
        Bytes::new(budget.bytes),
        budget.from,
        folder.display(),
        Bytes::new(free)
    )))
}

/// Free bytes on the file system holding `path` (None where it cannot be asked, or `path`
/// does not exist yet).
#[cfg(unix)]
fn free_disk(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value for it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a statvfs the call fills; nothing else is
    // read or kept.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| (st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(not(unix))]
fn free_disk(_path: &Path) -> Option<u64> {
    None
}

/// What a spilled run says on stderr as it starts: a long run fills the disk meanwhile.
pub(super) fn spill_start(plan: &SpillPlan, dir: &SpillDir) -> String {
    format!(
        "note: the captures ({}) exceed the memory budget ({} from {}): writing them to {} (about {})",
        plan.in_memory,
        Bytes::new(plan.budget.bytes),
        plan.budget.from,
        dir.captures.display(),
        plan.on_disk
    )
}

/// The report's one note on a spilled run: how much went where, and why.
pub fn spill_note<'a>(
    plan: &SpillPlan,
    dir: &SpillDir,
    captures: impl Iterator<Item = &'a dyn Store>,
) -> String {
    let bytes: u64 = captures.filter_map(|c| std::fs::metadata(c.file()?).ok()).map(|m| m.len()).sum();
    let kept = if dir.captures != dir.tmp.path() {
        format!(
            "kept there (--save-captures); local views in {}, deleted when the run ends",
            dir.tmp.path().display()
        )
    } else {
        "deleted when the run ends".to_string()
    };
    let swept = match dir.swept.len() {
        0 => String::new(),
        n => format!(
            "; removed {n} spill folder(s) left by killed runs on this host ({}): {}",
            Bytes::new(dir.swept.iter().map(|(_, b)| b).sum()),
            dir.swept.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    };
    format!(
        "{SPILL_NOTE}: {} in {} (estimate {} > budget {} from {}; spilled, the run plans {}: {}), {kept}{swept}",
        Bytes::new(bytes),
        dir.captures.display(),
        plan.in_memory,
        Bytes::new(plan.budget.bytes),
        plan.budget.from,
        plan.needs.total(),
        plan.needs.breakdown(),
    )
}

/// How [`explain_note`] begins.
const FROM_DISK: &str = "EXPLAIN READ FROM DISK";

/// Whether a note of a report is one of those that say how this machine ran it ([`spill_note`],
/// [`explain_note`]: its memory budget, the folders it wrote) rather than what it measured: a
/// bundle's documents leave them out, as what a replay on another machine must give again
/// character by character.
pub fn says_how_it_ran(note: &str) -> bool {
    note.starts_with(SPILL_NOTE) || note.starts_with(FROM_DISK)
}

/// The report's note on explain reading a spilled run from disk (emulations in `dir`).
pub(super) fn explain_note(dir: &str) -> String {
    format!(
        "{FROM_DISK}: this run's captures were spilled, so explain read the observed capture and \
         the reference from their files one tap at a time, and wrote each fault's emulation to a temporary \
         file in {dir} (deleted once matched); the ranking is the one memory would give, at the cost of one \
         capture written and read back per fault"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spill_that_does_not_fit_the_disk_is_refused_naming_the_folder() {
        let budget = Budget::new(1 << 30, "--max-memory");
        let (need, held) = (Bytes::new(40 << 30), Bytes::new(43 << 30));
        let folder = Path::new("spill-here");
        let err = check_disk(need, Some((folder, 8 << 30)), held, &budget).unwrap_err();
        let msg = err.to_string();
        assert_eq!(err.exit_code(), 2, "{msg}");
        for part in ["spill-here has 8.0 GiB free", "need about 40.0 GiB", "--spill-dir DIR", "--max-memory"]
        {
            assert!(msg.contains(part), "{part:?} missing from: {msg}");
        }
        assert!(check_disk(need, Some((folder, 41 << 30)), held, &budget).is_ok());
        assert!(check_disk(need, None, held, &budget).is_ok(), "free space unknown: not refused");
        // A size that overflowed its estimate never fits.
        assert!(check_disk(Bytes(None), Some((folder, u64::MAX)), held, &budget).is_err());
    }
}
