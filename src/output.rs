//! Output paths, checked before any compute: a run that would end by failing to write its
//! report, or by overwriting the file it read, is refused in the first millisecond.
//!
//! Every command that writes lists what it reads and what it writes in an [`Outputs`] and calls
//! [`Outputs::check`] before loading a model. An output must be in a folder that exists and can
//! be written now, must not be a folder, must not be any input (compared canonicalized, so
//! `./x.hef` and `x.hef` are one file, and by inode, so a hard link is too) nor a file of a
//! checkpoint folder being read, and two outputs must not be the same file. What its path is now
//! decides how it is written ([`crate::files::Dest`], the one writer contract): `-` is stdout
//! (text only), a device or FIFO is written into in place (a binary `.npz` only where it seeks),
//! a socket or block device is refused. Writing itself goes through [`crate::files::write_file`]
//! / [`crate::files::AtomicFile`].

use crate::error::{Error, Result};
use crate::files;
use std::path::{Path, PathBuf};

/// Files a checkpoint load reads from its folder (`model/weights.rs`, `model/tokenizer.rs`).
fn is_checkpoint_file(name: &str) -> bool {
    name == "config.json"
        || name == "tokenizer.json"
        || name == "tokenizer_config.json"
        || name == "generation_config.json"
        || name.ends_with(".safetensors")
        || name.ends_with(".safetensors.index.json")
        || name.ends_with(".gguf")
}

/// A checkpoint folder: what `hefprobe synth` writes and `--checkpoint` reads.
pub fn is_checkpoint_dir(dir: &Path) -> bool {
    dir.is_dir() && (dir.join("config.json").is_file() || dir.join("model.safetensors").is_file())
}

#[derive(Debug, Default)]
pub struct Outputs {
    inputs: Vec<(PathBuf, String)>,
    checkpoints: Vec<(PathBuf, String)>,
    /// Each output file, the flag that asks for it, and whether it is an `.npz` (binary, written
    /// with seeks).
    files: Vec<(PathBuf, String, bool)>,
    dirs: Vec<(PathBuf, String)>,
}

/// The canonical form of a path that may not exist yet: its folder canonicalized, its name kept.
fn canonical(p: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(p) {
        return Some(c);
    }
    Some(std::fs::canonicalize(folder(p)).ok()?.join(p.file_name()?))
}

/// Two existing paths that are one file (a hard link: canonical paths differ, the inode is one).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
    }
    false
}

impl Outputs {
    pub fn new() -> Self {
        Self::default()
    }

    /// A file the command reads (`what` names it for messages: "the probe", "--inputs").
    pub fn input(&mut self, what: &str, p: &Path) -> &mut Self {
        self.inputs.push((p.to_path_buf(), what.to_string()));
        self
    }

    /// A checkpoint folder the command reads: none of its files may be written.
    pub fn checkpoint(&mut self, what: &str, dir: &Path) -> &mut Self {
        self.checkpoints.push((dir.to_path_buf(), what.to_string()));
        self
    }

    /// A file the command writes; `flag` names the option that asked for it.
    pub fn file(&mut self, flag: &str, p: &Path) -> &mut Self {
        self.files.push((p.to_path_buf(), flag.to_string(), false));
        self
    }

    /// An `.npz` or a HEF the command writes: a binary file, so never stdout, and never a FIFO
    /// or a terminal (an `.npz` is written with seeks).
    pub fn binary(&mut self, flag: &str, p: &Path) -> &mut Self {
        self.files.push((p.to_path_buf(), flag.to_string(), true));
        self
    }

    /// A folder the command writes files into (created if missing, inside an existing folder).
    pub fn dir(&mut self, flag: &str, p: &Path) -> &mut Self {
        self.dirs.push((p.to_path_buf(), flag.to_string()));
        self
    }

    pub fn check(&self) -> Result<()> {
        let inputs: Vec<(PathBuf, &str)> =
            self.inputs.iter().filter_map(|(p, w)| Some((canonical(p)?, w.as_str()))).collect();
        let ckpts: Vec<(PathBuf, &str)> =
            self.checkpoints.iter().filter_map(|(p, w)| Some((canonical(p)?, w.as_str()))).collect();
        let mut seen: Vec<(PathBuf, &str)> = Vec::new();
        for (p, flag) in &self.dirs {
            parent_exists(flag, p)?;
            if p.exists() && !p.is_dir() {
                return Err(Error::usage(format!("{}: exists and is not a folder", named(flag, p))));
            }
            let writable = if p.is_dir() { p.as_path() } else { folder(p) };
            files::check_writable(writable).map_err(|e| unwritable(flag, p, e))?;
        }
        for (p, flag, binary) in &self.files {
            let Some(c) = self.destination(p, flag, *binary)? else { continue };
            if let Some((_, what)) = inputs.iter().find(|(i, _)| *i == c || same_file(i, &c)) {
                return Err(Error::usage(format!(
                    "{}: is {what}, which this command reads; writing it would destroy the input \
                     (choose another output path)",
                    named(flag, p)
                )));
            }
            let name = c.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            if let Some((dir, what)) = ckpts.iter().find(|(d, _)| c.parent() == Some(d.as_path())) {
                if is_checkpoint_file(&name) {
                    return Err(Error::usage(format!(
                        "{}: is a file of {what} {}, which this command reads (choose a path outside \
                         the checkpoint folder)",
                        named(flag, p),
                        dir.display()
                    )));
                }
            }
            if let Some((_, other)) = seen.iter().find(|(s, _)| *s == c) {
                return Err(Error::usage(format!(
                    "{flag} and {other} both write {}; give each output its own path",
                    p.display()
                )));
            }
            seen.push((c, flag));
        }
        Ok(())
    }

    /// How the output at `p` will be written ([`files::Dest`]), checked now: the canonical file
    /// to compare with the inputs, or None for stdout. A file to replace needs a folder that
    /// exists and can be written; a binary output needs a file or a device that seeks.
    fn destination(&self, p: &Path, flag: &str, binary: bool) -> Result<Option<PathBuf>> {
        if p.as_os_str().is_empty() {
            return Err(Error::usage(format!("{flag}: the path is empty")));
        }
        let dest = files::Dest::of(p).map_err(|e| Error::usage(format!("{flag}: {e}")))?;
        if binary && !dest.seekable() {
            return Err(Error::usage(format!("{flag}: {}", files::not_seekable(p))));
        }
        match dest {
            files::Dest::Stdout => Ok(None),
            files::Dest::InPlace(_) => Ok(canonical(p)),
            files::Dest::Replace(target) => {
                parent_exists(flag, &target)?;
                files::check_writable(folder(&target)).map_err(|e| unwritable(flag, p, e))?;
                Ok(canonical(&target))
            }
        }
    }
}

/// The folder a path is in (`.` for a bare name).
fn folder(p: &Path) -> &Path {
    p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

fn unwritable(flag: &str, p: &Path, e: Error) -> Error {
    Error::usage(format!(
        "{}: its folder cannot be written ({e}); choose a folder you can write",
        named(flag, p)
    ))
}

/// `-o x.npz`, or the flag alone when it already says the path (`--report markdown=r.md`).
fn named(flag: &str, p: &Path) -> String {
    let shown = p.display().to_string();
    if flag.ends_with(&shown) {
        flag.to_string()
    } else {
        format!("{flag} {shown}")
    }
}

fn parent_exists(flag: &str, p: &Path) -> Result<()> {
    if p.as_os_str().is_empty() {
        return Err(Error::usage(format!("{flag}: the path is empty")));
    }
    match p.parent() {
        Some(parent) if !parent.as_os_str().is_empty() && !parent.is_dir() => Err(Error::usage(format!(
            "{}: folder `{}` does not exist (create it first)",
            named(flag, p),
            parent.display()
        ))),
        _ => Ok(()),
    }
}

/// A checkpoint folder about to be written (`synth -o DIR`): refuse to overwrite an existing
/// checkpoint unless `force`, and refuse a path that is a file.
pub fn check_checkpoint_out(flag: &str, dir: &Path, force: bool) -> Result<()> {
    parent_exists(flag, dir)?;
    if dir.exists() && !dir.is_dir() {
        return Err(Error::usage(format!("{flag} {}: exists and is not a folder", dir.display())));
    }
    if is_checkpoint_dir(dir) && !force {
        return Err(Error::usage(format!(
            "{flag} {}: already holds a checkpoint (config.json / model.safetensors); give --force to \
             overwrite it, or another folder",
            dir.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_that_is_an_input_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let hef = t.path().join("x.hef");
        std::fs::write(&hef, b"hef").unwrap();
        let dotted = t.path().join(".").join("x.hef");
        let e = Outputs::new().input("the HEF", &hef).file("-o", &dotted).check().unwrap_err().to_string();
        assert!(e.contains("-o") && e.contains("the HEF"), "{e}");
        assert!(Outputs::new().input("the HEF", &hef).file("-o", &t.path().join("y.npz")).check().is_ok());
    }

    #[test]
    fn files_of_a_checkpoint_being_read_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let ck = t.path().join("ck");
        std::fs::create_dir(&ck).unwrap();
        std::fs::write(ck.join("config.json"), "{}").unwrap();
        let mut o = Outputs::new();
        o.checkpoint("the checkpoint", &ck).file("-o", &ck.join("model.safetensors"));
        assert!(o.check().unwrap_err().to_string().contains("the checkpoint"));
        let mut o = Outputs::new();
        o.checkpoint("the checkpoint", &ck).file("-o", &ck.join("capture.npz"));
        assert!(o.check().is_ok());
    }

    #[test]
    fn missing_folders_duplicates_and_existing_checkpoints() {
        let t = tempfile::tempdir().unwrap();
        let e = Outputs::new().file("--report markdown", &t.path().join("no/r.md")).check().unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let r = t.path().join("r.md");
        let e = Outputs::new().file("--report markdown", &r).file("--report json", &r).check().unwrap_err();
        assert!(e.to_string().contains("both write"), "{e}");
        let ck = t.path().join("ck");
        std::fs::create_dir(&ck).unwrap();
        assert!(check_checkpoint_out("-o", &ck, false).is_ok(), "an empty folder is fine");
        std::fs::write(ck.join("config.json"), "{}").unwrap();
        assert!(check_checkpoint_out("-o", &ck, false).unwrap_err().to_string().contains("--force"));
        assert!(check_checkpoint_out("-o", &ck, true).is_ok());
    }
}
