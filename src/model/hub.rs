//! A Hugging Face model id (`HuggingFaceTB/SmolLM2-135M`) given where a checkpoint folder is
//! expected resolves, offline, to its snapshot in the local hub cache. Nothing downloads: a
//! model that is not there is an input error listing every place looked at and the command
//! that fetches it.
//!
//! The cache layout and its location follow huggingface_hub (`constants.py`, `file_download.py`):
//! the cache is `$HF_HUB_CACHE`, else the older `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`,
//! where `HF_HOME` defaults to `$XDG_CACHE_HOME/huggingface` and that to `~/.cache/huggingface`.
//! A model lives in `models--ORG--NAME/`; `refs/<revision>` holds the commit sha a branch or tag
//! points at, and `snapshots/<sha>/` the files of that commit (symlinks into `blobs/`).

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The revision a plain id means: huggingface_hub's `DEFAULT_REVISION`.
pub const DEFAULT_REVISION: &str = "main";

/// Where a checkpoint argument points: an existing path wins; otherwise an id-shaped argument
/// (`ORG/NAME`) is looked up in the hub cache; anything else is returned unchanged so the
/// loader names it as a missing folder.
pub fn resolve(arg: &Path, revision: &str) -> Result<PathBuf> {
    resolve_in(arg, revision, &cache_dir_from_env())
}

/// As [`resolve`], with the cache directory given (tests, and callers that know it).
pub fn resolve_in(arg: &Path, revision: &str, cache: &CacheDir) -> Result<PathBuf> {
    if arg.exists() {
        return Ok(arg.to_path_buf());
    }
    match arg.to_str().filter(|s| is_repo_id(s)) {
        Some(id) => find_snapshot(id, revision, cache),
        None => Ok(arg.to_path_buf()),
    }
}

/// A model id as the Hub writes it: `ORG/NAME`, each part letters, digits, `-`, `_`, `.`,
/// not starting with `.` (so `./x` and `../x` stay paths). A bare `NAME` (the Hub's few legacy
/// ids like `gpt2`) is not taken as an id: it reads as a folder name, and a missing folder is
/// the clearer message there.
pub fn is_repo_id(s: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.len() <= 96 // huggingface_hub validate_repo_id: at most 96 characters
            && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    match s.split_once('/') {
        Some((org, name)) => part(org) && part(name) && !name.ends_with(".gguf"),
        None => false,
    }
}

/// The hub cache directory and which setting chose it (named in messages).
#[derive(Debug, Clone)]
pub struct CacheDir {
    pub path: PathBuf,
    pub from: String,
}

/// huggingface_hub's rule for the cache directory, from the environment.
pub fn cache_dir_from_env() -> CacheDir {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = var("HF_HUB_CACHE") {
        return CacheDir { path: p, from: "$HF_HUB_CACHE".into() };
    }
    if let Some(p) = var("HUGGINGFACE_HUB_CACHE") {
        return CacheDir { path: p, from: "$HUGGINGFACE_HUB_CACHE (the older name of HF_HUB_CACHE)".into() };
    }
    if let Some(p) = var("HF_HOME") {
        return CacheDir { path: p.join("hub"), from: "$HF_HOME/hub".into() };
    }
    if let Some(p) = var("XDG_CACHE_HOME") {
        return CacheDir { path: p.join("huggingface/hub"), from: "$XDG_CACHE_HOME/huggingface/hub".into() };
    }
    let home = var("HOME").unwrap_or_else(|| PathBuf::from("~"));
    CacheDir {
        path: home.join(".cache/huggingface/hub"),
        from: "the default ~/.cache/huggingface/hub".into(),
    }
}

/// A full commit sha: huggingface_hub's `REGEX_COMMIT_HASH` (40 lowercase hex digits).
fn is_commit_sha(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

fn find_snapshot(id: &str, revision: &str, cache: &CacheDir) -> Result<PathBuf> {
    let repo = cache.path.join(format!("models--{}", id.replace('/', "--")));
    let ref_file = repo.join("refs").join(revision);
    let mut looked = vec![format!("{} (no such folder here)", id)];
    let sha = if is_commit_sha(revision) {
        Some(revision.to_string())
    } else {
        match std::fs::read_to_string(&ref_file) {
            Ok(s) => Some(s.trim().to_string()),
            Err(_) => {
                looked.push(format!("{} (from {}): no such file", ref_file.display(), cache.from));
                None
            }
        }
    };
    if let Some(sha) = sha {
        let snap = repo.join("snapshots").join(&sha);
        if snap.join("config.json").is_file() {
            return Ok(snap);
        }
        let what = if snap.is_dir() { "has no config.json" } else { "no such folder" };
        looked.push(format!("{} (from {}): {what}", snap.display(), cache.from));
    }
    let rev = if revision == DEFAULT_REVISION { String::new() } else { format!(" --revision {revision}") };
    Err(Error::input(
        format!("checkpoint `{id}`"),
        format!(
            "not a folder, and not in the Hugging Face hub cache at revision `{revision}`. Looked at: {}. \
             hefprobe never downloads; fetch it with `hf download {id}{rev}` (huggingface_hub's CLI; \
             `huggingface-cli download` in releases before 0.34), or point HF_HUB_CACHE / HF_HOME at \
             the cache that holds it",
            looked.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_paths() {
        for id in ["HuggingFaceTB/SmolLM2-135M", "Qwen/Qwen2.5-0.5B", "a/b.c_d"] {
            assert!(is_repo_id(id), "{id}");
        }
        for p in ["gpt2", "./x", "../x/y", "/abs/x", "a/b/c", "a/", "/b", "a/x.gguf", "a b/c", ".a/b"] {
            assert!(!is_repo_id(p), "{p}");
        }
        assert!(is_commit_sha(&"0123456789abcdef".repeat(3)[..40]));
        assert!(!is_commit_sha("main"));
    }
}
