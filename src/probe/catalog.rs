//! The probe catalog a user names on the command line: a file as given, or, when no such file
//! exists, a catalog's probe of that name: the checkout's `probes/` (the current folder's, then
//! the one the binary was built in, `target/<profile>/hefprobe`), then the installed catalog
//! (`/usr/share/hefprobe/probes` from the Debian package). So `hefprobe run shared-softmax` and
//! `run probes/shared-softmax.toml` work the same in a checkout and from a package, and stderr
//! says which file was used. A name stays inside the catalog: `../x` is refused, never resolved
//! outside it.

use crate::error::{Error, Result};
use crate::probe::schema::Probe;
use std::path::{Component, Path, PathBuf};

/// Where a probe name is looked up, in order: `$HEFPROBE_PROBES` when set, the current folder's
/// `probes/` (a checkout), the checkout the binary was built in (`target/<profile>/` or
/// `target/<triple>/<profile>/` below it), the `share` folder beside the binary's `bin`
/// (`cargo install --root`, a package's `/usr`), then `/usr`.
fn catalog_folders() -> Vec<PathBuf> {
    let mut out = Vec::new();
    out.extend(std::env::var_os("HEFPROBE_PROBES").map(PathBuf::from));
    out.push(PathBuf::from("probes"));
    if let Ok(exe) = std::env::current_exe() {
        let built_in = exe.ancestors().skip(1).find(|a| a.file_name().is_some_and(|n| n == "target"));
        out.extend(built_in.and_then(Path::parent).map(|checkout| checkout.join("probes")));
        out.extend(exe.parent().and_then(Path::parent).map(|prefix| prefix.join("share/hefprobe/probes")));
    }
    out.push(PathBuf::from("/usr/share/hefprobe/probes"));
    out.dedup();
    out
}

/// The file a probe argument names: itself when it exists; else, for a relative path, a
/// catalog's probe of that name (`probes/NAME.toml`, `NAME.toml` or `NAME`), said on stderr.
/// Nothing found names every place looked.
pub fn locate(arg: &Path) -> Result<PathBuf> {
    if arg.exists() || arg.is_absolute() {
        return Ok(arg.to_path_buf());
    }
    let name = arg.strip_prefix("probes").unwrap_or(arg);
    let name = if name.extension().is_none() { name.with_extension("toml") } else { name.to_path_buf() };
    let folders = catalog_folders();
    let looked: Vec<String> = folders.iter().map(|d| d.display().to_string()).collect();
    // `..` (or a root) would leave the catalog: a name is a path inside it, nothing else.
    if !name.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(Error::input(
            arg.display().to_string(),
            format!(
                "no such probe file here, and a catalog name stays inside the catalog ({}): `{}` leaves it; \
                 give the probe's path",
                looked.join(", "),
                name.display()
            ),
        ));
    }
    if let Some((folder, found)) = folders.iter().map(|d| (d, d.join(&name))).find(|(_, p)| inside(p, &name))
    {
        let whose = if folder.ends_with("share/hefprobe/probes")
            || std::env::var_os("HEFPROBE_PROBES").is_some_and(|d| folder == Path::new(&d))
        {
            "the installed catalog's"
        } else {
            "the checkout's"
        };
        crate::errln!("probe: {} is not here; using {whose} {}", arg.display(), found.display());
        return Ok(found);
    }
    Err(Error::input(
        arg.display().to_string(),
        format!(
            "no such probe file here, nor `{}` in a probe catalog ({}); give the probe's path \
             (`hefprobe faults` lists the fault models, the catalog is `probes/*.toml` in a checkout)",
            name.display(),
            looked.join(", ")
        ),
    ))
}

/// Whether `path` (a catalog folder joined with `name`) is a file that stays in that folder once
/// links are followed: a link inside a catalog pointing out of it is not the catalog's probe.
fn inside(path: &Path, name: &Path) -> bool {
    let folder = path.ancestors().nth(name.components().count());
    match (path.canonicalize(), folder.map(Path::canonicalize)) {
        (Ok(p), Some(Ok(f))) => p.is_file() && p.starts_with(f),
        _ => false,
    }
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
        // A name that climbs out of the catalog is refused, even where the file it reaches exists.
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("x.toml"), "x").unwrap();
        std::env::set_var("HEFPROBE_PROBES", dir.path().join("catalog"));
        std::fs::create_dir(dir.path().join("catalog")).unwrap();
        let e = locate(Path::new("../outside/x")).unwrap_err().to_string();
        assert!(e.contains("leaves it") && e.contains("catalog"), "{e}");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside.join("x.toml"), dir.path().join("catalog/linked.toml"))
                .unwrap();
            assert!(locate(Path::new("linked")).is_err(), "a link out of the catalog is not its probe");
        }
        std::env::remove_var("HEFPROBE_PROBES");
    }
}
