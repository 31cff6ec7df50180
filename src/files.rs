//! Files: every input read whole with its path named in the error, and every output written
//! through a temporary file in its own folder, renamed into place and announced.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Open an input file for reading, with the path in the error. Only a regular file (or a
/// symlink to one) is opened: `open` on a FIFO blocks until a writer comes, and a device or a
/// socket is no input file, so those are refused first, from their metadata, naming what they are.
pub fn open(path: impl AsRef<Path>) -> Result<std::fs::File> {
    let path = path.as_ref();
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::input(
            path.display().to_string(),
            format!("is {}, not a regular file: give the file itself", kind(&meta.file_type())),
        ));
    }
    std::fs::File::open(path).map_err(|e| Error::io(path, e))
}

/// What a non-regular file is, for the error that refuses it.
fn kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
    }
    if t.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    }
}

/// Read a whole file with the path in the error (a regular file only, see [`open`]).
pub fn read_file(path: impl AsRef<Path>) -> Result<Vec<u8>> {
    use std::io::Read;
    let path = path.as_ref();
    let mut bytes = Vec::new();
    open(path)?.read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// Read a whole UTF-8 file with the path in the error (a regular file only, see [`open`]).
pub fn read_text(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    String::from_utf8(read_file(path)?).map_err(|e| {
        Error::input(path.display().to_string(), format!("is not UTF-8 text: {}", e.utf8_error()))
    })
}

/// At most the first `max` bytes of an input file (a regular file only, see [`open`]): for
/// magic numbers and files that must be short, never reading more than that.
pub fn read_prefix(path: impl AsRef<Path>, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let path = path.as_ref();
    let mut bytes = Vec::new();
    open(path)?.take(max).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// Write a whole file, creating parent directories, with the path in the error: through a
/// temporary file in the same folder, renamed into place, then announced ("wrote PATH").
pub fn write_file(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> Result<()> {
    write_file_quiet(path.as_ref(), bytes)?;
    announce(path.as_ref());
    Ok(())
}

/// [`write_file`] without the announcement: for a file rewritten as a run goes (a suite's
/// partial reports), announced once when it is final.
pub fn write_file_quiet(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> Result<()> {
    use std::io::Write;
    let mut f = AtomicFile::create(path.as_ref())?;
    let tmp = f.temp_path().to_path_buf();
    f.file().write_all(bytes.as_ref()).map_err(|e| Error::io(&tmp, e))?;
    f.commit_quiet()
}

/// Append `text` to the file at `path`, creating it if missing, with the path in the error.
pub fn append(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f =
        std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| Error::io(path, e))?;
    f.write_all(text.as_bytes()).map_err(|e| Error::io(path, e))
}

/// Say on stderr that a file was written. Every writer calls this once the file is in place,
/// so a run whose reports all go to files still says where they went.
pub fn announce(path: &Path) {
    eprintln!("wrote {}", path.display());
}

/// A file written under a temporary name in its own folder (`.NAME.tmp-PID`) and renamed
/// over `path` by [`AtomicFile::commit`]: a rename within one folder is atomic, so readers
/// see the old file or the new one, never half of one. Dropped without a commit, the
/// temporary file is removed and `path` is left as it was.
pub struct AtomicFile {
    path: PathBuf,
    temp: PathBuf,
    file: Option<std::fs::File>,
}

impl AtomicFile {
    pub fn create(path: &Path) -> Result<Self> {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let name = path
            .file_name()
            .ok_or_else(|| Error::usage(format!("`{}` is not a file name to write to", path.display())))?;
        let temp_name = format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id());
        let temp = parent.map_or_else(|| PathBuf::from(&temp_name), |p| p.join(&temp_name));
        let file = std::fs::File::create(&temp).map_err(|e| Error::io(&temp, e))?;
        Ok(AtomicFile { path: path.to_path_buf(), temp, file: Some(file) })
    }

    pub fn file(&mut self) -> &mut std::fs::File {
        self.file.as_mut().expect("open until commit")
    }

    /// Take the open file (e.g. for a writer that owns it); [`AtomicFile::commit`] still renames.
    pub fn take_file(&mut self) -> std::fs::File {
        self.file.take().expect("open until commit")
    }

    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flush, rename over the destination and announce it.
    pub fn commit(self) -> Result<()> {
        let path = self.path.clone();
        self.commit_quiet()?;
        announce(&path);
        Ok(())
    }

    /// [`AtomicFile::commit`] without the announcement: for files nobody asked for by name
    /// (a run's captures spilled to a temporary folder).
    pub fn commit_quiet(mut self) -> Result<()> {
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(|e| Error::io(&self.temp, e))?;
        }
        std::fs::rename(&self.temp, &self.path).map_err(|e| Error::io(&self.path, e))?;
        self.temp = PathBuf::new();
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_atomic_and_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_file(&p, "one").unwrap();
        write_file(&p, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        // An abandoned write leaves the old file in place and no temporary behind.
        let f = AtomicFile::create(&p).unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
