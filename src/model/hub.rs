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
    // huggingface_hub validate_repo_id: at most 96 characters.
    let part = |p: &str| p.len() <= 96 && is_name_part(p);
    s.split_once('/').is_some_and(|(org, name)| part(org) && part(name) && !name.ends_with(".gguf"))
}

/// One part of an id or a ref name: letters, digits, `-`, `_`, `.`, not empty nor starting with `.`.
fn is_name_part(p: &str) -> bool {
    !p.is_empty() && !p.starts_with('.') && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
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

/// A revision as a branch or tag name: `/`-separated parts of letters, digits, `-`, `_`, `.`,
/// none empty or starting with `.` (so never `..`, never absolute), at most 256 bytes. It names a
/// file under `refs/` (huggingface_hub keeps `refs/pr/1` as that path), so it must never leave it.
fn is_ref_name(s: &str) -> bool {
    s.len() <= MAX_REF && s.split('/').all(is_name_part)
}

/// The longest ref name, and the most of a ref file read or echoed.
const MAX_REF: usize = 256;

/// `s` for an error message: at most 64 characters, escaped.
fn echo(s: &str) -> String {
    crate::error::echo(s, 64)
}

/// The commit sha a ref file holds (huggingface_hub writes the 40-digit sha and nothing else);
/// `Ok(None)` when there is no such file. A FIFO, a file past [`MAX_REF`] bytes or anything but
/// a sha is an input error naming the file.
fn read_ref(ref_file: &Path) -> Result<Option<String>> {
    if !ref_file.exists() {
        return Ok(None);
    }
    let what = ref_file.display().to_string();
    let bytes = crate::files::read_prefix(ref_file, MAX_REF as u64 + 1)?;
    if bytes.len() > MAX_REF {
        return Err(Error::input(
            what,
            format!("holds more than {MAX_REF} bytes; a hub ref holds one commit sha"),
        ));
    }
    let text = String::from_utf8_lossy(&bytes);
    let sha = text.trim();
    if !is_commit_sha(sha) {
        return Err(Error::input(
            what,
            format!(
                "holds `{}`, not a commit sha (40 hex digits, as huggingface_hub writes a ref)",
                echo(sha)
            ),
        ));
    }
    Ok(Some(sha.to_string()))
}

/// `snap` when it resolves inside `repo` (a snapshot symlinked elsewhere is refused: the cache
/// is what was asked for).
fn inside(snap: PathBuf, repo: &Path) -> Result<PathBuf> {
    let (Ok(real), Ok(root)) = (snap.canonicalize(), repo.canonicalize()) else { return Ok(snap) };
    let real_config = snap.join("config.json").canonicalize().unwrap_or_else(|_| real.clone());
    if real.starts_with(&root) && real_config.starts_with(&root) {
        return Ok(snap);
    }
    Err(Error::input(
        snap.display().to_string(),
        format!(
            "resolves to {}, outside the model's hub cache folder {}: a snapshot (and its config.json) \
             lives in the cache",
            real_config.display(),
            root.display()
        ),
    ))
}

fn find_snapshot(id: &str, revision: &str, cache: &CacheDir) -> Result<PathBuf> {
    if !is_ref_name(revision) {
        return Err(Error::usage(format!(
            "--revision `{}`: a branch, tag or commit sha (letters, digits, `-`, `_`, `.` and `/` between \
             parts; never a path)",
            echo(revision)
        )));
    }
    let repo = cache.path.join(format!("models--{}", id.replace('/', "--")));
    let ref_file = repo.join("refs").join(revision);
    let mut looked = vec![format!("{} (no such folder here)", id)];
    let sha = if is_commit_sha(revision) {
        Some(revision.to_string())
    } else {
        let sha = read_ref(&ref_file)?;
        if sha.is_none() {
            looked.push(format!("{} (from {}): no such file", ref_file.display(), cache.from));
        }
        sha
    };
    if let Some(sha) = sha {
        let snap = repo.join("snapshots").join(&sha);
        if snap.join("config.json").is_file() {
            return inside(snap, &repo);
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
        assert!(
            is_repo_id(&format!("a/{}", "x".repeat(96))) && !is_repo_id(&format!("a/{}", "x".repeat(97)))
        );
        assert!(is_commit_sha(&"0123456789abcdef".repeat(3)[..40]));
        assert!(!is_commit_sha("main"));
        for r in ["main", "v1.0", "refs/pr/1", "release_2"] {
            assert!(is_ref_name(r), "{r}");
        }
        for r in ["/etc/hostname", "../x", "a/../b", "", "a//b", ".hidden", "a b", &"x".repeat(257)] {
            assert!(!is_ref_name(r), "{r}");
        }
    }
}
