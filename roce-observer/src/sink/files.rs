//! Files the sinks create and read in directories that other users may be able to write
//! (`--log-dir`, `--prom-file`), opened so that a planted link or foreign file is never followed:
//!
//! - temporary files get an unpredictable name and are created exclusively (`O_CREAT|O_EXCL`)
//!   with `O_NOFOLLOW`, so a link planted at any name is never written through;
//! - a file is read only when it is a regular file owned by the effective user, checked on the
//!   open descriptor (`O_NOFOLLOW`, then `fstat`), so a swap between a check and the open cannot
//!   lead elsewhere;
//! - new files get mode 0666 filtered by the umask, as `open(2)` does (the service unit's
//!   `UMask=0027` makes them 0640).

use std::{
    fmt,
    fs::{self, File, OpenOptions},
    io,
    os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

/// Why a file is not ours to open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Symlink,
    /// A directory, FIFO, socket or device.
    NotRegular(&'static str),
    /// A regular file owned by another user.
    Foreign {
        uid: u32,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Symlink => f.write_str("is a symbolic link"),
            Refusal::NotRegular(kind) => write!(f, "is a {kind}, not a regular file"),
            Refusal::Foreign { uid } => {
                write!(
                    f,
                    "is owned by uid {uid}, not by this user (uid {})",
                    euid()
                )
            }
        }
    }
}

/// The effective user id: the owner of every file we create.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `meta` (from `symlink_metadata` or `fstat`) is a regular file of ours.
pub fn check_ours(meta: &fs::Metadata) -> Result<(), Refusal> {
    let t = meta.file_type();
    if t.is_symlink() {
        return Err(Refusal::Symlink);
    }
    if !t.is_file() {
        let kind = if t.is_dir() {
            "directory"
        } else if t.is_fifo() {
            "FIFO"
        } else if t.is_socket() {
            "socket"
        } else {
            "device"
        };
        return Err(Refusal::NotRegular(kind));
    }
    if meta.uid() != euid() {
        return Err(Refusal::Foreign { uid: meta.uid() });
    }
    Ok(())
}

/// What kept a file from being opened.
#[derive(Debug)]
pub enum OpenError {
    Refused(Refusal),
    Io(io::Error),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// Open `path` for reading if it is a regular file of ours. Never follows a link and never
/// blocks on a FIFO; the check is made on the opened descriptor.
pub fn open_ours(path: &Path) -> Result<File, OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                OpenError::Refused(Refusal::Symlink)
            } else {
                OpenError::Io(e)
            }
        })?;
    check_ours(&file.metadata()?).map_err(OpenError::Refused)?;
    Ok(file)
}

/// Create a new file for appending at `path`; fails if anything (a link included) is there.
pub fn create_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create_new(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// 16 hex digits from the kernel's random source.
fn random_tag() -> io::Result<String> {
    let mut buf = [0u8; 8];
    // SAFETY: buf is valid for writes of buf.len() bytes for the duration of the call.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if usize::try_from(n).ok() != Some(buf.len()) {
        return Err(io::Error::last_os_error());
    }
    Ok(format!("{:016x}", u64::from_ne_bytes(buf)))
}

/// Create a temporary file `DIR/{prefix}{random}{suffix}` exclusively, for writing; returns it
/// with its path. The caller renames it into place or removes it.
pub fn create_temp(dir: &Path, prefix: &str, suffix: &str) -> io::Result<(File, PathBuf)> {
    // A clash with an existing name is only possible when someone planted one (64 random bits),
    // so a few tries are plenty.
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..4 {
        let path = dir.join(format!("{prefix}{}{suffix}", random_tag()?));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    fn tempdir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "roce-observer-files-{tag}-{}-{}",
            std::process::id(),
            random_tag().expect("random")
        ));
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn temp_names_differ_and_a_planted_name_is_never_written_through() {
        let dir = tempdir("temp");
        let (_, a) = create_temp(&dir, "x.", ".tmp").expect("create");
        let (_, b) = create_temp(&dir, "x.", ".tmp").expect("create");
        assert_ne!(a, b);
        let name = a.file_name().expect("name").to_string_lossy().into_owned();
        assert!(name.starts_with("x.") && name.ends_with(".tmp") && name.len() == 22);
        // create_exclusive refuses a dangling link and a link to a file alike.
        let victim = dir.join("victim");
        fs::write(&victim, b"secret").expect("write");
        symlink(&victim, dir.join("live")).expect("symlink");
        symlink(dir.join("nowhere"), dir.join("dangling")).expect("symlink");
        assert!(create_exclusive(&dir.join("live")).is_err());
        assert!(create_exclusive(&dir.join("dangling")).is_err());
        assert!(!dir.join("nowhere").exists());
        assert_eq!(fs::read(&victim).expect("read"), b"secret");
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn only_regular_files_of_ours_are_opened() {
        let dir = tempdir("open");
        let mine = dir.join("mine");
        fs::write(&mine, b"ok").expect("write");
        assert!(open_ours(&mine).is_ok());
        symlink(&mine, dir.join("link")).expect("symlink");
        assert!(matches!(
            open_ours(&dir.join("link")),
            Err(OpenError::Refused(Refusal::Symlink))
        ));
        assert!(matches!(
            open_ours(&dir),
            Err(OpenError::Refused(Refusal::NotRegular("directory")))
        ));
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            open_ours(&fifo),
            Err(OpenError::Refused(Refusal::NotRegular("FIFO")))
        ));
        if euid() == 0 {
            let theirs = dir.join("theirs");
            fs::write(&theirs, b"not ours").expect("write");
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
            fs::set_permissions(&theirs, fs::Permissions::from_mode(0o644)).expect("chmod");
            assert!(matches!(
                open_ours(&theirs),
                Err(OpenError::Refused(Refusal::Foreign { uid: 65534 }))
            ));
        }
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
