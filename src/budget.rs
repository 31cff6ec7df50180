//! The memory budget: how much memory one command may plan to use, and sizes as people
//! write them. Every size that comes from a file, a flag or a probe is checked against it
//! before anything that large is allocated, so a bad number is an exit-2 message in
//! milliseconds instead of an abort ("memory allocation failed") or a swapping machine.
//!
//! The small public API, for every reader and command that sizes an allocation from input:
//! - [`Bytes`] sums and multiplies sizes with checked arithmetic (an overflow is a need
//!   larger than any budget, never a wrapped small number);
//! - [`current`] is the budget in force: the command line's `--max-memory SIZE` ([`set`] once
//!   by `cli`), otherwise [`Budget::detect`]: the least of what the process may still take under
//!   each limit it has (MemAvailable from /proc/meminfo, the address-space and data limits
//!   `ulimit -v`/`-d` less what it maps, a cgroup v2 or v1 memory limit less what the group
//!   uses: where containers and CI runners are held; physical memory where there is no /proc).
//!   `--max-memory` replaces MemAvailable (the user may know better), never a hard limit: past
//!   one the kernel refuses the allocation whatever the flag says;
//! - [`Budget::check`] turns a planned allocation into [`Error::Budget`] ("needs 128.0 GiB,
//!   budget 23.0 GiB") naming what needs it and the flag or key that would shrink it;
//! - [`parse_size`] reads `512M`, `23G`, `1.5GiB`, `8GB`, `4000000000`.
//!
//! ```
//! use hefprobe::budget::{Budget, Bytes};
//! let b = Budget::new(1 << 30, "--max-memory");
//! let frame = Bytes::product(&[96, 1_000_000_000]).times(4); // prefill rows × width × f32
//! let e = b.check("hailo-config.json prefill_input_tokens_count = 1000000000", frame,
//!                 "lower the key").unwrap_err();
//! assert!(e.to_string().contains("needs 357.6 GiB, budget 1.0 GiB"));
//! ```

use crate::error::{format_size, Error, Result};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A byte count computed with checked arithmetic: `None` once it overflowed 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub Option<u64>);

impl Bytes {
    pub const ZERO: Bytes = Bytes(Some(0));

    pub fn new(n: u64) -> Self {
        Bytes(Some(n))
    }

    /// The product of dimensions (elements of a tensor of this shape).
    pub fn product(dims: &[usize]) -> Self {
        dims.iter().fold(Bytes::new(1), |acc, &d| acc.times(d as u64))
    }

    pub fn times(self, n: u64) -> Self {
        Bytes(self.0.and_then(|v| v.checked_mul(n)))
    }

    pub fn plus(self, other: Bytes) -> Self {
        Bytes(self.0.zip(other.0).and_then(|(a, b)| a.checked_add(b)))
    }

    pub fn get(self) -> Option<u64> {
        self.0
    }
}

impl std::iter::Sum for Bytes {
    fn sum<I: Iterator<Item = Bytes>>(iter: I) -> Self {
        iter.fold(Bytes::ZERO, Bytes::plus)
    }
}

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => f.write_str(&format_size(n)),
            None => f.write_str("> 16 EiB"),
        }
    }
}

/// How much memory a command may plan to use, and where that figure came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub bytes: u64,
    /// `--max-memory`, `MemAvailable in /proc/meminfo`, ...: said in every refusal.
    pub from: String,
}

static BUDGET: OnceLock<Budget> = OnceLock::new();

/// Set the budget for this process (the command line's `--max-memory`). The first call wins.
pub fn set(b: Budget) {
    let _ = BUDGET.set(b);
}

/// The budget in force: the one [`set`] (lowered to a hard limit under it), or what the process
/// may take ([`Budget::detect`]).
pub fn current() -> Budget {
    let b = match BUDGET.get() {
        Some(set) => hard_limits().into_iter().fold(set.clone(), |b, l| match l.bytes < b.bytes {
            true => Budget::new(
                l.bytes,
                format!("{}, lowered from {} to {}", b.from, format_size(b.bytes), l.from),
            ),
            false => b,
        }),
        None => Budget::detect(),
    };
    crate::alloc::note_budget(b.bytes);
    b
}

impl Budget {
    pub fn new(bytes: u64, from: impl Into<String>) -> Self {
        Budget { bytes, from: from.into() }
    }

    /// What the process may take: the least of MemAvailable (free memory plus reclaimable
    /// cache, the kernel's own estimate of what can be allocated without swapping) and what
    /// each hard limit leaves ([`hard_limits`]); without /proc the physical memory, else no
    /// known limit.
    pub fn detect() -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let available = match status_kib(&meminfo, "MemAvailable:") {
            Some(kb) => {
                Budget::new(kb.saturating_mul(1024), "MemAvailable in /proc/meminfo; set --max-memory")
            }
            None => match physical_memory() {
                Some(b) => Budget::new(b, "physical memory; set --max-memory"),
                None => Budget::new(u64::MAX, "no limit known on this system; set --max-memory"),
            },
        };
        hard_limits().into_iter().fold(available, |b, l| if l.bytes < b.bytes { l } else { b })
    }

    /// Refuse `needs` beyond the budget: `what` names what needs it (the flag, key or file and
    /// its value), `fix` says what to change.
    pub fn check(&self, what: impl Into<String>, needs: Bytes, fix: impl Into<String>) -> Result<()> {
        match needs.0 {
            Some(n) if n <= self.bytes => Ok(()),
            _ => Err(Error::Budget {
                what: what.into(),
                needs: needs.0,
                budget: self.bytes,
                budget_from: self.from.clone(),
                fix: fix.into(),
            }),
        }
    }

    pub fn allows(&self, needs: Bytes) -> bool {
        needs.0.is_some_and(|n| n <= self.bytes)
    }
}

/// What each limit the kernel enforces on this process leaves it now: the address-space and
/// data limits (`setrlimit`, `ulimit -v` / `-d`, `prlimit --as`) less what the process maps,
/// and its cgroup's memory limit (v2 `memory.max`, v1 `memory.limit_in_bytes`, the group's and
/// every parent's) less what the group uses. Past any of them an allocation fails whatever
/// MemAvailable says.
pub fn hard_limits() -> Vec<Budget> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut out = Vec::new();
    #[cfg(unix)]
    for (resource, field, what) in [
        (libc::RLIMIT_AS, "VmSize:", "the address-space limit (ulimit -v)"),
        (libc::RLIMIT_DATA, "VmData:", "the data limit (ulimit -d)"),
    ] {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one rlimit struct, which `r` is.
        if unsafe { libc::getrlimit(resource, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY {
            continue;
        }
        let used = status_kib(&status, field).unwrap_or(0).saturating_mul(1024);
        let limit: u64 = r.rlim_cur;
        out.push(Budget::new(
            limit.saturating_sub(used),
            format!(
                "what {what} of {} leaves past the {} mapped; raise the limit",
                format_size(limit),
                format_size(used)
            ),
        ));
    }
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    out.extend(cgroup_limit(Path::new("/sys/fs/cgroup"), &cgroups));
    out
}

/// The tightest memory limit of the cgroups `proc_cgroup` (the text of /proc/self/cgroup) names
/// under `root` (where cgroupfs is mounted), as what it leaves: v2's `memory.max` less
/// `memory.current`, or v1's `memory.limit_in_bytes` less `memory.usage_in_bytes`, of the group
/// and each parent (a parent's limit holds its children too).
pub fn cgroup_limit(root: &Path, proc_cgroup: &str) -> Option<Budget> {
    let read = |p: PathBuf| std::fs::read_to_string(p).ok().and_then(|t| t.trim().parse::<u64>().ok());
    let mut best: Option<Budget> = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (base, max, current, version) = match controllers {
            "" => (root.to_path_buf(), "memory.max", "memory.current", "v2 memory.max"),
            c if c.split(',').any(|c| c == "memory") => (
                root.join("memory"),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "v1 memory.limit_in_bytes",
            ),
            _ => continue,
        };
        // The group and every parent up to the mount's root (a container sees its own as `/`).
        let mut dir = Some(Path::new(path.trim_start_matches('/')));
        while let Some(d) = dir {
            let at = base.join(d);
            // v1 reports no limit as a page-rounded i64::MAX; v2 as `max` (not a number).
            if let Some(limit) = read(at.join(max)).filter(|&l| l < 1 << 60) {
                let left = limit.saturating_sub(read(at.join(current)).unwrap_or(0));
                if best.as_ref().is_none_or(|b| left < b.bytes) {
                    let from = format!(
                        "what the cgroup's {version} of {} leaves ({}); raise the container's memory limit",
                        format_size(limit),
                        at.display()
                    );
                    best = Some(Budget::new(left, from));
                }
            }
            dir = d.parent();
        }
    }
    best
}

fn status_kib(text: &str, field: &str) -> Option<u64> {
    text.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(unix)]
fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads system configuration; it has no memory-safety preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    (pages > 0 && page > 0).then(|| (pages as u64).saturating_mul(page as u64))
}

#[cfg(not(unix))]
fn physical_memory() -> Option<u64> {
    None
}

/// A size as people write it: a byte count, or a number with a unit. `K`, `M`, `G`, `T`
/// (and `KiB` … `TiB`) are powers of 1024, as `ulimit` and /proc/meminfo count; `KB`, `MB`,
/// `GB`, `TB` are powers of 1000. Case does not matter; `1.5G` is allowed.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let mult: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
            "`{s}` is not a size: give bytes or a number with K, M, G, T (powers of 1024) or KB, MB, GB, TB"
        ))
        }
    };
    let v: f64 = num.parse().map_err(|_| format!("`{s}` is not a size: `{num}` is not a number"))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("`{s}` is not a usable size: give at least 1 byte and less than 16 EiB"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("23G"), Ok(23 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("8gb"), Ok(8_000_000_000));
        assert_eq!(parse_size("512 M"), Ok(512 << 20));
        for bad in ["", "G", "-1G", "nan", "1.2.3G", "5Q", "0", "inf"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overflow_is_larger_than_any_budget() {
        let b = Budget::new(u64::MAX, "test");
        let huge = Bytes::product(&[usize::MAX, 3]);
        assert_eq!(huge.get(), None);
        let e = b.check("--hidden 1e30", huge, "lower it").unwrap_err().to_string();
        assert!(e.contains("overflows") && e.contains("--hidden"), "{e}");
        assert!(b.check("x", Bytes::new(10).plus(Bytes::new(5)).times(2), "").is_ok());
    }

    #[test]
    fn refusal_names_need_budget_and_source() {
        let b = Budget::new(23 << 30, "--max-memory");
        let e = b.check("synth --hidden 1000000", Bytes::new(128 << 30), "lower --hidden").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "synth --hidden 1000000: needs 128.0 GiB, budget 23.0 GiB (--max-memory); lower --hidden"
        );
    }

    #[test]
    fn cgroup_limits_are_read_for_the_group_and_its_parents_v2_and_v1() {
        let t = tempfile::tempdir().unwrap();
        let put = |p: &str, text: &str| {
            let p = t.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        put("ci/job/memory.max", "max\n");
        put("ci/job/memory.current", "100\n");
        put("ci/memory.max", "4000\n");
        put("ci/memory.current", "1000\n");
        let b = cgroup_limit(t.path(), "0::/ci/job\n").unwrap();
        assert_eq!(b.bytes, 3000, "the parent's limit holds the job");
        assert!(b.from.contains("v2 memory.max"), "{}", b.from);
        assert_eq!(cgroup_limit(t.path(), "0::/elsewhere\n"), None, "no limit anywhere");
        put("memory/memory.limit_in_bytes", "9223372036854771712\n");
        put("memory/box/memory.limit_in_bytes", "2048\n");
        put("memory/box/memory.usage_in_bytes", "48\n");
        let v1 = cgroup_limit(t.path(), "12:cpu:/x\n4:memory:/box\n").unwrap();
        assert_eq!((v1.bytes, v1.from.contains("v1")), (2000, true), "{}", v1.from);
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       24683656 kB\nMemFree:        1 kB\nMemAvailable:   23144900 kB\n";
        assert_eq!(status_kib(text, "MemAvailable:"), Some(23144900));
        assert!(Budget::detect().bytes > 0);
    }
}
