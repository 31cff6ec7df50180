//! The memory budget: how much memory one command may plan to use, and sizes as people
//! write them. Every size that comes from a file, a flag or a probe is checked against it
//! before anything that large is allocated, so a bad number is an exit-2 message in
//! milliseconds instead of an abort ("memory allocation failed") or a swapping machine.
//!
//! The small public API, for every reader and command that sizes an allocation from input:
//! - [`Bytes`] sums and multiplies sizes with checked arithmetic (an overflow is a need
//!   larger than any budget, never a wrapped small number);
//! - [`current`] is the budget in force: the command line's `--max-memory SIZE` ([`set`] once
//!   by `cli`), otherwise [`Budget::detect`] (MemAvailable from /proc/meminfo; physical memory
//!   where there is no /proc);
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

/// The budget in force: the one [`set`], or what the machine has.
pub fn current() -> Budget {
    BUDGET.get().cloned().unwrap_or_else(Budget::detect)
}

impl Budget {
    pub fn new(bytes: u64, from: impl Into<String>) -> Self {
        Budget { bytes, from: from.into() }
    }

    /// What the machine has for us: MemAvailable (free memory plus reclaimable cache, the
    /// kernel's own estimate of what can be allocated without swapping), else the physical
    /// memory, else no known limit.
    pub fn detect() -> Self {
        if let Some(kb) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| meminfo_available(&t)) {
            return Budget::new(kb.saturating_mul(1024), "MemAvailable in /proc/meminfo; set --max-memory");
        }
        if let Some(b) = physical_memory() {
            return Budget::new(b, "physical memory; set --max-memory");
        }
        Budget::new(u64::MAX, "no limit known on this system; set --max-memory")
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

fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
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
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       24683656 kB\nMemFree:        1 kB\nMemAvailable:   23144900 kB\n";
        assert_eq!(meminfo_available(text), Some(23144900));
        assert!(Budget::detect().bytes > 0);
    }
}
