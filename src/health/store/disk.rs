//! The file store's disk primitives, shared by the state file and the capacity file: the
//! advisory lock as a store error, and replacing a file whole.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::api::{StoreError, io_err};
use crate::lockfile::{self, LockError, LockGuard};

/// Distinguishes temp files of concurrent writers inside one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Takes the advisory lock at `path`, waiting at most `wait`; a symlinked lock file is refused.
/// (The state file's lock and the capacity file's.)
pub fn lock_store_file(path: PathBuf, wait: Duration) -> Result<LockGuard, StoreError> {
    lockfile::lock_path(&path, wait).map_err(|e| match e {
        LockError::Open(e) if lockfile::is_symlink_error(&e) => StoreError::Symlink { path },
        LockError::Open(e) => io_err("open lock file", &path)(e),
        LockError::Io(e) => io_err("lock", &path)(e),
        LockError::Timeout => StoreError::LockTimeout { path, waited: wait },
    })
}

/// The store's clock for a file store: the kernel's time as the file system stamps it, read by
/// setting `lock`'s modification time to "now" (`futimens` with `UTIME_NOW`) and reading it
/// back — one clock for every process that shares the file, whatever their own clocks say
/// (and, on a network file system, the server's). `None` when the file system will not say
/// (the caller's clock is used then).
pub fn store_clock_ms(lock: &File) -> Option<u64> {
    use std::os::fd::AsRawFd as _;
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    };
    let times = [now, now];
    // SAFETY: `futimens` reads two timespecs from a valid array and acts on an open fd that
    // `lock` owns for the whole call.
    if unsafe { libc::futimens(lock.as_raw_fd(), times.as_ptr()) } != 0 {
        return None;
    }
    let stamped = lock.metadata().ok()?.modified().ok()?;
    let ms = stamped
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis();
    u64::try_from(ms).ok()
}

/// Replaces `dir/name` whole with `bytes`: a private temp file in the same directory renamed
/// over it, so readers see the old file or the new one. `durable`: fsync the data before the
/// rename and the directory after it (the state file; the capacity file's leases last seconds).
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8], durable: bool) -> io::Result<()> {
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file =
            lockfile::open_private(OpenOptions::new().write(true).create_new(true), &tmp)?;
        file.write_all(bytes)?;
        if durable {
            file.sync_all()?;
        }
        drop(file);
        fs::rename(&tmp, dir.join(name))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    if durable {
        // Makes the rename itself durable. Not possible on every platform (Windows cannot open
        // a directory this way); the data is already safe, so failures are ignored.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}
