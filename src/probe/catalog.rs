//! The probe catalog a user names on the command line: a file as given, or, when no such file
//! exists, the installed catalog (`/usr/share/hefprobe/probes` from the Debian package), so
//! `hefprobe run probes/shared-softmax.toml` (or `run shared-softmax`) works outside a checkout.

use crate::error::{Error, Result};
use crate::probe::schema::Probe;
use std::path::{Path, PathBuf};

/// Where an installed hefprobe keeps its catalog: `$HEFPROBE_PROBES` when set, the `share`
/// folder beside the binary's `bin` (`cargo install --root`, a package's `/usr`), then `/usr`.
fn installed_folders() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os("HEFPROBE_PROBES") {
        out.push(PathBuf::from(dir));
    }
    if let Some(prefix) = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.parent()?.to_path_buf()))
    {
        out.push(prefix.join("share/hefprobe/probes"));
    }
    out.push(PathBuf::from("/usr/share/hefprobe/probes"));
    out.dedup();
    out
}

/// The file a probe argument names: itself when it exists; else, for a relative path, the
/// installed catalog's probe of that name (`probes/NAME.toml`, `NAME.toml` or `NAME`), said on
/// stderr. Nothing found names every place looked.
pub fn locate(arg: &Path) -> Result<PathBuf> {
    if arg.exists() || arg.is_absolute() {
        return Ok(arg.to_path_buf());
    }
    let name = arg.strip_prefix("probes").unwrap_or(arg);
    let name = if name.extension().is_none() { name.with_extension("toml") } else { name.to_path_buf() };
    let folders = installed_folders();
    if let Some(found) = folders.iter().map(|d| d.join(&name)).find(|p| p.is_file()) {
        eprintln!("probe: {} is not here; using the installed catalog's {}", arg.display(), found.display());
        return Ok(found);
    }
    let looked: Vec<String> = folders.iter().map(|d| d.display().to_string()).collect();
    Err(Error::input(
        arg.display().to_string(),
        format!(
            "no such probe file here, nor `{}` in the installed catalog ({}); give the probe's path \
             (`hefprobe faults` lists the fault models, the catalog is `probes/*.toml` in a checkout)",
            name.display(),
            looked.join(", ")
        ),
    ))
}

/// [`Probe::load`] of the probe a command-line argument names ([`locate`]).
pub fn open(arg: &Path) -> Result<Probe> {
    Probe::load(&locate(arg)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_probe_is_found_in_the_catalog_by_path_or_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("only-here.toml"), "x").unwrap();
        std::env::set_var("HEFPROBE_PROBES", dir.path());
        let want = dir.path().join("only-here.toml");
        for arg in ["probes/only-here.toml", "only-here.toml", "only-here"] {
            assert_eq!(locate(Path::new(arg)).unwrap(), want, "{arg}");
        }
        let e = locate(Path::new("probes/not-anywhere.toml")).unwrap_err().to_string();
        assert!(e.contains("not-anywhere.toml") && e.contains(&dir.path().display().to_string()), "{e}");
        std::env::remove_var("HEFPROBE_PROBES");
    }
}
