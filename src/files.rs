//! Files: one reader for every input read whole ([`read_text`]: a regular file, at most its
//! [`Kind`]'s cap and the memory budget, the path named in every error), and one writer contract
//! for every output ([`Dest`]): `-` is stdout, a new or regular file is written through a
//! temporary file in its own folder and renamed into place, a character device or a FIFO (or a
//! link to one, `/dev/stdout`) is written into in place, and anything else is refused; every
//! file written is announced.

use crate::budget::{self, Bytes};
use crate::error::{format_size, Error, Result};
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
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_char_device() {
            return "a character device";
        }
    }
    if t.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    }
}

/// What an input file read whole is, and so the most bytes hefprobe reads of it. Each cap is far
/// past any real file of its kind (the largest tokenizer.json of a hub model, Gemma's, is 34 MB;
/// a real config.json is a few KB), so a file past it is the wrong file, never a big right one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Probe,
    Suite,
    /// An evidence bundle's `bundle.json`.
    Manifest,
    /// A report hefprobe wrote and reads back: `report.json`, a shard, a sweep's points.
    Report,
    Baseline,
    History,
    /// A dump's name map or a HEF's output map.
    NameMap,
    /// `synth-hef --calib-text`.
    Calibration,
    Tokenizer,
    /// A checkpoint's config.json.
    Config,
    /// model.safetensors.index.json.
    WeightIndex,
    /// A HEF's `.rev` sidecar.
    Revision,
    /// A chat template (Jinja text).
    ChatTemplate,
}

impl Kind {
    /// How errors name it, and its cap in bytes.
    pub fn limit(self) -> (&'static str, u64) {
        const MIB: u64 = 1 << 20;
        match self {
            Kind::Probe => ("a probe", 16 * MIB),
            Kind::Suite => ("a suite file", 16 * MIB),
            Kind::Manifest => ("a bundle manifest", 64 * MIB),
            Kind::Report => ("a hefprobe report", 256 * MIB),
            Kind::Baseline => ("a baseline", 256 * MIB),
            Kind::History => ("a history", 1024 * MIB),
            Kind::NameMap => ("a name map", 16 * MIB),
            Kind::Calibration => ("a calibration text", MIB),
            Kind::Tokenizer => ("a tokenizer.json", 256 * MIB),
            Kind::Config => ("a config.json", 16 * MIB),
            Kind::WeightIndex => ("a safetensors index", 64 * MIB),
            Kind::Revision => ("a revision sidecar", 4096),
            Kind::ChatTemplate => ("a chat template", MIB),
        }
    }
}

/// Read a whole UTF-8 input file of `kind`: a regular file only (see [`open`]), its size checked
/// against the kind's cap and against the memory budget (`--max-memory`) before a byte is read,
/// and never more than the cap read (a file growing while it is read is stopped there).
pub fn read_text(path: impl AsRef<Path>, kind: Kind) -> Result<String> {
    use std::io::Read;
    let path = path.as_ref();
    let (name, cap) = kind.limit();
    let too_big = |n: u64| {
        Error::input(
            path.display().to_string(),
            format!(
                "is {} but {name} is read whole and may be at most {}: this is not {name}, or give a smaller one",
                format_size(n),
                format_size(cap)
            ),
        )
    };
    let f = open(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > cap {
        return Err(too_big(len));
    }
    budget::current().check(
        format!("reading {} ({name})", path.display()),
        Bytes::new(len),
        "give a smaller file, or raise --max-memory",
    )?;
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(cap + 1).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > cap {
        return Err(too_big(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| {
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

/// Where an output goes: the one writer contract, decided from what its path is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// `-`: standard output (text only).
    Stdout,
    /// A new file, or a regular one (a symlink's target, the link kept): written under a
    /// temporary name in its folder and renamed over it.
    Replace(PathBuf),
    /// A character device or a FIFO, or a link to one (`/dev/stdout`, `/proc/self/fd/1`):
    /// written into as it is, never replaced.
    InPlace(PathBuf),
}

impl Dest {
    pub fn of(path: &Path) -> Result<Dest> {
        if path == Path::new("-") {
            return Ok(Dest::Stdout);
        }
        let (Ok(link), Ok(meta)) = (std::fs::symlink_metadata(path), std::fs::metadata(path)) else {
            // Nothing there (or a link to nothing): a new file.
            return Ok(Dest::Replace(path.to_path_buf()));
        };
        if meta.is_file() {
            return Ok(match (link.file_type().is_symlink(), through_fd(path)) {
                (false, _) => Dest::Replace(path.to_path_buf()),
                // A descriptor's file (`/dev/stdout` redirected to one): the process holding it
                // would keep writing into the replaced file, so it is written into.
                (true, true) => Dest::InPlace(path.to_path_buf()),
                (true, false) => Dest::Replace(std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?),
            });
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            if t.is_char_device() || t.is_fifo() {
                return Ok(Dest::InPlace(path.to_path_buf()));
            }
        }
        let what = kind(&meta.file_type());
        let fix = if meta.is_dir() {
            "give a file name to write"
        } else {
            "hefprobe writes into a character device (/dev/null, a terminal) or a FIFO in place and \
             replaces only regular files: give another path"
        };
        Err(Error::usage(format!("`{}` is {what}; {fix}", path.display())))
    }

    /// Whether an `.npz` (written with seeks) can go here: a file, or a device that seeks
    /// (`/dev/null`), never a FIFO or a terminal.
    pub fn seekable(&self) -> bool {
        match self {
            Dest::Stdout => false,
            Dest::Replace(_) => true,
            Dest::InPlace(p) => {
                use std::io::Seek;
                open_in_place(p).is_ok_and(|mut f| f.stream_position().is_ok())
            }
        }
    }
}

/// Whether following `path`'s links passes through a process's descriptor table
/// (`/dev/stdout` → `/proc/self/fd/1`).
fn through_fd(path: &Path) -> bool {
    let mut p = path.to_path_buf();
    for _ in 0..16 {
        if p.starts_with("/proc") || p.starts_with("/dev/fd") {
            return true;
        }
        match std::fs::read_link(&p) {
            Ok(next) => p = p.parent().map_or(next.clone(), |d| d.join(&next)),
            Err(_) => return false,
        }
    }
    false
}

/// Open a device, FIFO or descriptor's file to write into. Never blocks: a FIFO nobody reads is
/// refused (`open` would wait for a reader), and a file is appended to, not truncated.
fn open_in_place(path: &Path) -> Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    let f = o.open(path).map_err(|e| match e.raw_os_error() {
        #[cfg(unix)]
        Some(libc::ENXIO) => Error::usage(format!(
            "`{}` is a FIFO that nobody reads: start its reader first, or give a file",
            path.display()
        )),
        _ => Error::io(path, e),
    })?;
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor this function owns; F_GETFL/F_SETFL touch only its flags.
        unsafe {
            let fd = f.as_raw_fd();
            libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK);
        }
    }
    Ok(f)
}

/// Write a whole file through the writer contract ([`Dest`]), with the path in the error, then
/// announce it ("wrote PATH"); `-` prints it on stdout.
pub fn write_file(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> Result<()> {
    if write_stdout(path.as_ref(), bytes.as_ref())? {
        return Ok(());
    }
    write_file_quiet(path.as_ref(), bytes)?;
    announce(path.as_ref());
    Ok(())
}

/// `bytes` on stdout when `path` is `-` (true), else nothing (false).
fn write_stdout(path: &Path, bytes: &[u8]) -> Result<bool> {
    if path != Path::new("-") {
        return Ok(false);
    }
    crate::console::write(crate::console::Stream::Stdout, bytes).map_err(|e| Error::io("stdout", e))?;
    Ok(true)
}

/// [`write_file`] without the announcement: for a file rewritten as a run goes (a suite's
/// partial reports), announced once when it is final.
pub fn write_file_quiet(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> Result<()> {
    use std::io::Write;
    if write_stdout(path.as_ref(), bytes.as_ref())? {
        return Ok(());
    }
    let mut f = AtomicFile::create(path.as_ref())?;
    let at = f.temp_path().to_path_buf();
    f.file().write_all(bytes.as_ref()).map_err(|e| Error::io(&at, e))?;
    f.commit_quiet()
}

/// Append `text` to the file at `path` (created if missing; a device or FIFO written into, `-`
/// stdout), with the path in the error.
pub fn append(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f = match Dest::of(path)? {
        Dest::Stdout => return write_stdout(path, text.as_bytes()).map(|_| ()),
        Dest::InPlace(p) => open_in_place(&p)?,
        Dest::Replace(p) => {
            std::fs::OpenOptions::new().create(true).append(true).open(&p).map_err(|e| Error::io(&p, e))?
        }
    };
    f.write_all(text.as_bytes()).map_err(|e| Error::io(path, e))
}

/// Copy the file at `from` to `to` through the writer contract (a capture already on disk saved
/// where the user asked).
pub fn copy(from: &Path, to: &Path) -> Result<()> {
    let mut f = AtomicFile::create(to)?;
    std::io::copy(&mut open(from)?, f.file()).map_err(|e| Error::io(to, e))?;
    f.commit_quiet()
}

/// Say on stderr that a file was written. Every writer calls this once the file is in place,
/// so a run whose reports all go to files still says where they went.
pub fn announce(path: &Path) {
    crate::errln!("wrote {}", path.display());
}

/// A file written through the writer contract: a new or regular file under a temporary name in
/// its own folder (`.NAME.tmp-PID`), renamed over the destination by [`AtomicFile::commit`] (a
/// rename within one folder is atomic, so readers see the old file or the new one, never half of
/// one; dropped without a commit, the temporary file is removed and the destination left as it
/// was); a device or FIFO written into in place.
pub struct AtomicFile {
    path: PathBuf,
    /// The temporary file; empty once renamed, or for a destination written in place.
    temp: PathBuf,
    file: Option<std::fs::File>,
}

impl AtomicFile {
    /// A destination of binary bytes (`-`, stdout, is for text: refused).
    pub fn create(path: &Path) -> Result<Self> {
        let (target, temp, file) = match Dest::of(path)? {
            Dest::Stdout => {
                return Err(Error::usage(
                    "`-` (stdout) takes text reports; this output is a binary file: give a path",
                ))
            }
            Dest::InPlace(p) => {
                let f = open_in_place(&p)?;
                (p, PathBuf::new(), f)
            }
            Dest::Replace(p) => {
                let (temp, f) = temporary(&p)?;
                (p, temp, f)
            }
        };
        Ok(AtomicFile { path: target, temp, file: Some(file) })
    }

    /// [`AtomicFile::create`] for a writer that seeks (an `.npz`): a FIFO or a terminal is refused.
    pub fn create_seekable(path: &Path) -> Result<Self> {
        let f = Self::create(path)?;
        if f.temp.as_os_str().is_empty() && !Dest::InPlace(f.path.clone()).seekable() {
            return Err(not_seekable(path));
        }
        Ok(f)
    }

    pub fn file(&mut self) -> &mut std::fs::File {
        self.file.as_mut().expect("open until commit")
    }

    /// Take the open file (e.g. for a writer that owns it); [`AtomicFile::commit`] still renames.
    pub fn take_file(&mut self) -> std::fs::File {
        self.file.take().expect("open until commit")
    }

    /// Where the bytes are being written (the temporary file, or the destination in place).
    pub fn temp_path(&self) -> &Path {
        if self.temp.as_os_str().is_empty() {
            &self.path
        } else {
            &self.temp
        }
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
        if self.temp.as_os_str().is_empty() {
            return Ok(()); // written in place
        }
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(|e| Error::io(&self.temp, e))?;
        }
        std::fs::rename(&self.temp, &self.path).map_err(|e| Error::io(&self.path, e))?;
        self.temp = PathBuf::new();
        Ok(())
    }
}

pub(crate) fn not_seekable(path: &Path) -> Error {
    Error::usage(format!(
        "`{}` cannot be written with seeks, as an .npz is (a FIFO, a terminal or stdout): give a file",
        path.display()
    ))
}

/// Held (shared) while a temporary file and its folder are made; taken for good by
/// [`stop_new_files`].
static CREATING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// No file is started by this process after this returns (those being started are finished
/// first; a later one waits for ever). For a process about to exit: the signal handler removes
/// the spill folders after it, since a write's temporary file would make its folder again.
pub fn stop_new_files() {
    std::mem::forget(CREATING.write().unwrap_or_else(|e| e.into_inner()));
}

/// A new temporary file beside `path` (its folder created if missing).
fn temporary(path: &Path) -> Result<(PathBuf, std::fs::File)> {
    let _starting = CREATING.read().unwrap_or_else(|e| e.into_inner());
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
    Ok((temp, file))
}

/// Give `path` the mode every file hefprobe creates gets (0666 less the umask), for a file a
/// library wrote through a private temporary file (safetensors' is 0600), so one command's
/// outputs never differ in who may read them.
pub fn default_mode(path: &Path) -> Result<()> {
    let (temp, file) = temporary(path)?;
    let mode = file.metadata().map(|m| m.permissions());
    let _ = std::fs::remove_file(&temp);
    std::fs::set_permissions(path, mode.map_err(|e| Error::io(&temp, e))?).map_err(|e| Error::io(path, e))
}

/// Whether files can be written into the folder `dir` now: a temporary file made there and
/// removed (what every write does first), so a read-only folder is refused before any compute.
pub fn check_writable(dir: &Path) -> Result<()> {
    let (temp, _) = temporary(&dir.join("hefprobe-write-check"))?;
    let _ = std::fs::remove_file(&temp);
    Ok(())
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

    #[cfg(unix)]
    #[test]
    fn special_files_are_written_in_place_or_refused_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Dest::of(Path::new("-")).unwrap(), Dest::Stdout);
        assert_eq!(Dest::of(Path::new("/dev/null")).unwrap(), Dest::InPlace("/dev/null".into()));
        assert!(Dest::of(Path::new("/dev/stdout")).is_ok_and(|d| matches!(d, Dest::InPlace(_))));
        // Through a link of our own: were the contract broken, the link is what would be replaced.
        let null = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &null).unwrap();
        write_file(&null, "x").unwrap();
        assert!(
            std::fs::symlink_metadata(&null).unwrap().file_type().is_symlink(),
            "the link to /dev/null is kept"
        );
        // A link to a regular file: the file is replaced, the link kept.
        let target = dir.path().join("t.txt");
        std::fs::write(&target, "old").unwrap();
        let link = dir.path().join("l.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_file(&link, "new").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        // A FIFO nobody reads is refused at once rather than waited on.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let e = write_file(&fifo, "x").unwrap_err();
        assert!(e.to_string().contains("nobody reads") && e.exit_code() == 2, "{e}");
        assert!(!Dest::InPlace(fifo).seekable());
        let sock = std::os::unix::net::UnixListener::bind(dir.path().join("s")).unwrap();
        let e = write_file(dir.path().join("s"), "x").unwrap_err();
        assert!(e.to_string().contains("a socket"), "{e}");
        drop(sock);
    }

    #[test]
    fn reads_are_bounded_by_their_kind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r");
        std::fs::File::create(&p).unwrap().set_len(5000).unwrap();
        let e = read_text(&p, Kind::Revision).unwrap_err().to_string();
        assert!(e.contains("a revision sidecar") && e.contains("at most 4.0 KiB"), "{e}");
        assert_eq!(read_text(&p, Kind::Probe).unwrap().len(), 5000);
    }
}
