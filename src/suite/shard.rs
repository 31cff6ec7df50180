//! Sharding: the CI system's matrix is the distributed engine (GitHub Actions `matrix`, GitLab
//! `parallel:`, Kubernetes Indexed Jobs); hefprobe only splits the pairs the same way on every
//! host. Each pair is ranked by a stable hash — xxh3-64 of `probe name \0 target label`, never
//! Rust's per-process randomized hasher — and shard K of N takes the ranks ≡ K−1 (mod N). Ranking
//! rather than taking the hash mod N keeps shards within one pair of each other in size (with 16
//! pairs, hash mod 3 can leave one host twice the work of another), and every shard sees the
//! whole plan, so every host ranks alike.
//!
//! Where the shard comes from, first match wins:
//! - `--shard K/N` (K is 1-based: `1/3`, `2/3`, `3/3`);
//! - `CI_NODE_INDEX` (1-based) and `CI_NODE_TOTAL`: what GitLab sets for a job with `parallel: N`;
//! - `JOB_COMPLETION_INDEX` (0-based): what Kubernetes sets in each pod of an Indexed Job; the
//!   total is not in the pod's environment, so it comes from `--shard-total N` or
//!   `HEFPROBE_SHARD_TOTAL` (set it to the Job's `completions`).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Shard `index` (1-based) of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    pub index: usize,
    pub total: usize,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.total)
    }
}

fn number(s: &str, what: &str) -> Result<usize> {
    s.trim().parse::<usize>().map_err(|_| Error::usage(format!("{what}: `{s}` is not a whole number")))
}

impl Shard {
    pub fn new(index: usize, total: usize, what: &str) -> Result<Shard> {
        if total == 0 || index == 0 || index > total {
            return Err(Error::usage(format!(
                "{what}: shard {index} of {total}; shards are numbered 1..={total} (K/N with 1 ≤ K ≤ N)"
            )));
        }
        Ok(Shard { index, total })
    }

    /// `K/N`.
    pub fn parse(s: &str) -> Result<Shard> {
        let (k, n) = s
            .split_once('/')
            .ok_or_else(|| Error::usage(format!("--shard `{s}`: expected K/N, e.g. 2/3")))?;
        Shard::new(number(k, "--shard")?, number(n, "--shard")?, "--shard")
    }

    /// The shard the CI system's environment names, if any (see the module doc); `get` reads a
    /// variable, `total` is `--shard-total`.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>, total: Option<usize>) -> Result<Option<Shard>> {
        if let Some(index) = get("CI_NODE_INDEX") {
            let n = get("CI_NODE_TOTAL").ok_or_else(|| {
                Error::usage("CI_NODE_INDEX is set without CI_NODE_TOTAL (GitLab sets both for `parallel:`)")
            })?;
            let n = number(&n, "CI_NODE_TOTAL")?;
            return (n > 1)
                .then(|| Shard::new(number(&index, "CI_NODE_INDEX")?, n, "CI_NODE_INDEX"))
                .transpose();
        }
        if let Some(index) = get("JOB_COMPLETION_INDEX") {
            let n = match total {
                Some(n) => n,
                None => number(
                    &get("HEFPROBE_SHARD_TOTAL").ok_or_else(|| {
                        Error::usage(
                            "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but the number of shards is not: \
                             pass --shard-total N or set HEFPROBE_SHARD_TOTAL to the Job's completions",
                        )
                    })?,
                    "HEFPROBE_SHARD_TOTAL",
                )?,
            };
            let k = number(&index, "JOB_COMPLETION_INDEX")? + 1;
            return (n > 1).then(|| Shard::new(k, n, "JOB_COMPLETION_INDEX")).transpose();
        }
        Ok(None)
    }

    /// The flag, else the environment.
    pub fn resolve(
        flag: Option<Shard>,
        total: Option<usize>,
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Shard>> {
        // A total of 0 is no shard count at all, not "run everything" (--shard 1/0 is refused).
        if total == Some(0) {
            return Err(Error::usage("--shard-total 0: give the number of shards, at least 1"));
        }
        if get("HEFPROBE_SHARD_TOTAL").as_deref().map(str::trim) == Some("0") {
            return Err(Error::usage("HEFPROBE_SHARD_TOTAL=0: give the number of shards, at least 1"));
        }
        flag.map_or_else(|| Shard::from_env(get, total), |s| Ok(Some(s)))
    }

    /// Which of `keys` (probe, target) this shard takes, as a mask in `keys`' order.
    pub fn select(&self, keys: &[(String, String)]) -> Vec<bool> {
        let mut ranked: Vec<(u64, usize)> =
            keys.iter().enumerate().map(|(i, (p, t))| (hash(p, t), i)).collect();
        ranked.sort();
        let mut mine = vec![false; keys.len()];
        for (rank, (_, i)) in ranked.into_iter().enumerate() {
            mine[i] = rank % self.total == self.index - 1;
        }
        mine
    }
}

/// The stable hash of a pair: xxh3-64 of the probe name, a NUL, and the target label.
pub fn hash(probe: &str, target: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("{probe}\0{target}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn every_ci_convention_names_the_same_shard() {
        let none = env(&[]);
        let flag = |s: &str| Some(Shard::parse(s).unwrap());
        assert_eq!(Shard::resolve(flag("2/3"), None, &none).unwrap(), Some(Shard { index: 2, total: 3 }));
        let gitlab = env(&[("CI_NODE_INDEX", "2"), ("CI_NODE_TOTAL", "3")]);
        assert_eq!(Shard::resolve(None, None, &gitlab).unwrap(), Some(Shard { index: 2, total: 3 }));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "1"), ("HEFPROBE_SHARD_TOTAL", "3")]);
        assert_eq!(Shard::resolve(None, None, &k8s).unwrap(), Some(Shard { index: 2, total: 3 }));
        let k8s_flag = env(&[("JOB_COMPLETION_INDEX", "1")]);
        assert_eq!(Shard::resolve(None, Some(3), &k8s_flag).unwrap(), Some(Shard { index: 2, total: 3 }));
        // A GitLab job without `parallel:` has CI_NODE_TOTAL = 1: no sharding.
        let single = env(&[("CI_NODE_INDEX", "1"), ("CI_NODE_TOTAL", "1")]);
        assert_eq!(Shard::resolve(None, None, &single).unwrap(), None);
        assert_eq!(Shard::resolve(None, None, &none).unwrap(), None);
        // The flag wins over the environment.
        assert_eq!(Shard::resolve(flag("1/2"), None, &gitlab).unwrap(), Some(Shard { index: 1, total: 2 }));
    }

    #[test]
    fn bad_shards_are_usage_errors_naming_the_source() {
        for (flag, want) in
            [("0/3", "1 ≤ K ≤ N"), ("4/3", "1 ≤ K ≤ N"), ("x/3", "whole number"), ("3", "K/N")]
        {
            let e = Shard::parse(flag).unwrap_err().to_string();
            assert!(e.contains("--shard") && e.contains(want), "{flag}: {e}");
        }
        let e = Shard::resolve(None, None, &env(&[("JOB_COMPLETION_INDEX", "0")])).unwrap_err().to_string();
        assert!(e.contains("--shard-total") && e.contains("HEFPROBE_SHARD_TOTAL"), "{e}");
        let e = Shard::resolve(None, None, &env(&[("CI_NODE_INDEX", "1")])).unwrap_err().to_string();
        assert!(e.contains("CI_NODE_TOTAL"), "{e}");
    }

    #[test]
    fn shards_partition_the_pairs_evenly_and_stably() {
        let keys: Vec<(String, String)> = (0..17)
            .map(|i| (format!("probe-{i}"), if i % 2 == 0 { "tonight" } else { "release" }.to_string()))
            .collect();
        let masks: Vec<Vec<bool>> = (1..=3).map(|k| Shard { index: k, total: 3 }.select(&keys)).collect();
        for i in 0..keys.len() {
            assert_eq!(masks.iter().filter(|m| m[i]).count(), 1, "pair {i} in exactly one shard");
        }
        let sizes: Vec<usize> = masks.iter().map(|m| m.iter().filter(|x| **x).count()).collect();
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        // The hash is xxh3, not a per-process hasher: fixed across runs and hosts.
        assert_eq!(hash("shared-softmax", "tonight"), xxhash_rust::xxh3::xxh3_64(b"shared-softmax\0tonight"));
        assert_eq!(Shard { index: 1, total: 3 }.select(&keys), masks[0]);
    }
}
