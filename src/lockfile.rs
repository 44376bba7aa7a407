//! Files in directories other programs share (the agent dir, a batch's output dir): advisory
//! locks with bounded waits, and owner-only files opened without following symlinks. The only
//! user of file locks.
//!
//! Why no symlinks: the agent dir may be writable by others (a shared CI home, a mounted volume).
//! A planted `pi-ccswitch-run.log` → `~/.bashrc` symlink would otherwise get our lines appended to
//! its target, and a dangling lock symlink would create a file wherever it points. Every open
//! here uses `O_NOFOLLOW`; a symlink is an error ([`is_symlink_error`]) the caller reports once.
//!
//! Why only regular files: a FIFO planted at one of these paths would make a plain `open` wait
//! forever for a writer (deaf to signals, since it blocks the thread), and a device such as
//! `/dev/zero` would feed endless bytes. Every open here is non-blocking and checks what it
//! opened on the descriptor itself (no race with a swap in between); anything but a regular
//! file is an error ([`is_not_regular_error`]).

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Holds an advisory lock until dropped.
#[derive(Debug)]
pub struct LockGuard {
    file: File,
}

impl LockGuard {
    /// The locked file (for a lock taken on a data file itself, e.g. `--output FILE`).
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first just makes it prompt.
        let _ = self.file.unlock();
    }
}

/// Why a lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// The lock file could not be opened (a symlink in the way shows up here, see
    /// [`is_symlink_error`]).
    Open(io::Error),
    /// Locking failed.
    Io(io::Error),
    /// Someone else held it for longer than we were willing to wait.
    Timeout,
}

/// Opens `path` owner-only (0600 when created) without following a symlink at its last
/// component, and only if it is a regular file (see the module doc).
pub fn open_private(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    options
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = options.open(path).map_err(fifo_without_reader)?;
    regular_only(file)
}

/// Opens `path` for reading without blocking, following symlinks (files the user points at),
/// only if it is a regular file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(fifo_without_reader)?;
    regular_only(file)
}

/// A non-blocking write-only open of a FIFO nobody reads fails with `ENXIO`: not a regular
/// file either, and the message should say so.
fn fifo_without_reader(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ENXIO) {
        io::Error::other(NOT_REGULAR)
    } else {
        e
    }
}

/// `file` if it is a regular file, back in blocking mode (a regular file never blocks, but
/// the flag would otherwise be inherited by anything the descriptor is handed to).
fn regular_only(file: File) -> io::Result<File> {
    use std::os::fd::AsRawFd as _;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(NOT_REGULAR));
    }
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// The error text of a path that is not a regular file (a FIFO, a device, a socket).
const NOT_REGULAR: &str = "not a regular file";

/// The error the opens here give for something that is not a regular file.
pub fn is_not_regular_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Other && e.to_string() == NOT_REGULAR
}

/// The error `open_private` gives for a symlink (Linux reports `ELOOP` for `O_NOFOLLOW`).
pub fn is_symlink_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::EMLINK)
}

/// Opens (creating) the lock file at `path` and takes its exclusive lock, waiting at most `wait`.
pub fn lock_path(path: &Path, wait: Duration) -> Result<LockGuard, LockError> {
    let file = open_private(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
        path,
    )
    .map_err(LockError::Open)?;
    lock_file(file, wait)
}

/// Takes the exclusive lock of an open file, waiting at most `wait` (zero: try once).
///
/// Polling `try_lock` starves under contention (the lock is free only for moments and a sleeping
/// poller misses them), so a contended lock is waited for with a blocking `lock()` on a helper
/// thread, which the kernel wakes at every release. The helper holds a duplicate of the same open
/// file description, so the lock it takes is ours. If we give up first, the helper releases the
/// lock as soon as it gets it and exits.
pub fn lock_file(file: File, wait: Duration) -> Result<LockGuard, LockError> {
    match file.try_lock() {
        Ok(()) => return Ok(LockGuard { file }),
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(e)) => return Err(LockError::Io(e)),
    }
    if wait.is_zero() {
        return Err(LockError::Timeout);
    }
    let waiter = file.try_clone().map_err(LockError::Io)?;
    let (tx, rx) = mpsc::sync_channel::<io::Result<()>>(1);
    thread::Builder::new()
        .name("file-lock".into())
        .spawn(move || {
            let locked = waiter.lock();
            let got_it = locked.is_ok();
            if tx.send(locked).is_err() && got_it {
                // Nobody is waiting any more: hand the lock straight back.
                let _ = waiter.unlock();
            }
        })
        .map_err(LockError::Io)?;
    match rx.recv_timeout(wait) {
        Ok(Ok(())) => Ok(LockGuard { file }),
        Ok(Err(e)) => Err(LockError::Io(e)),
        // If the helper gets the lock right after this, it either sees the channel closed and
        // unlocks, or its message is dropped with the channel and closing the last descriptor
        // of the file releases the lock.
        Err(_) => Err(LockError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_are_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        let link = dir.path().join("x.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = lock_path(&link, Duration::ZERO).unwrap_err();
        let LockError::Open(e) = err else {
            panic!("not an open error")
        };
        assert!(is_symlink_error(&e), "{e}");
        assert!(
            !target.exists(),
            "a dangling symlink's target is never created"
        );
    }

    /// A FIFO at a lock or data path is refused at once (a blocking open would wait forever for
    /// a writer), and so is a device; a regular file opens and is blocking again.
    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("state.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for opts in [
            OpenOptions::new().read(true).clone(),
            OpenOptions::new().read(true).write(true).clone(),
            OpenOptions::new().append(true).create(true).clone(),
        ] {
            let err = open_private(&mut opts.clone(), &fifo).unwrap_err();
            assert!(is_not_regular_error(&err), "{err}");
        }
        let err = lock_path(&fifo, Duration::ZERO).unwrap_err();
        assert!(
            matches!(&err, LockError::Open(e) if is_not_regular_error(e)),
            "{err:?}"
        );
        assert!(is_not_regular_error(&open_regular(&fifo).unwrap_err()));
        let err = open_regular(Path::new("/dev/zero")).unwrap_err();
        assert!(is_not_regular_error(&err), "{err}");
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let f = open_regular(&file).unwrap();
        use std::os::fd::AsRawFd as _;
        // SAFETY: F_GETFL on an open descriptor.
        let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0, "back in blocking mode");
    }

    #[test]
    fn a_held_lock_times_out_and_is_free_again_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.lock");
        let held = lock_path(&path, Duration::ZERO).unwrap();
        assert!(matches!(
            lock_path(&path, Duration::from_millis(20)),
            Err(LockError::Timeout)
        ));
        drop(held);
        assert!(lock_path(&path, Duration::from_millis(20)).is_ok());
    }
}
