//! The run log `pi-ccswitch-run.log` in the agent dir: one redacted line per failure and switch,
//! rotated at [`ROTATE_BYTES`] keeping [`GENERATIONS`] old files. It is a local file on every
//! machine, whatever health store is used (a Redis store shares breakers, not logs).
//!
//! Best effort: a log that cannot be written never costs a run. The one problem worth telling the
//! user about is a log (or its lock) that is a symlink: it is refused, never followed.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::lockfile::{self, LockError};
use crate::redact::redact_capped;
use crate::timefmt::iso_utc;

/// The log file's name.
pub const LOG_FILE: &str = "pi-ccswitch-run.log";
/// Rotation takes the state file's lock, so two processes never rotate at once.
pub const ROTATE_LOCK_FILE: &str = "pi-ccswitch-run-state.lock";
/// The log is rotated when it is larger than this before an append.
pub const ROTATE_BYTES: u64 = 512 * 1024;
/// Rotated logs kept: `.1` (newest) to `.3`.
pub const GENERATIONS: u32 = 3;

/// Cap for one log line after redaction.
const LINE_MAX_CHARS: usize = 2000;
/// Rotation is best-effort: it waits this long for the lock, then skips.
const ROTATE_LOCK_WAIT: Duration = Duration::from_millis(500);

/// Why a line was not logged.
#[derive(Debug)]
pub enum LogError {
    /// The log or its lock is a symlink: refused.
    Symlink(PathBuf),
    /// The log is a FIFO, a device or a directory: refused (a FIFO would block every write).
    NotRegular(PathBuf),
    Io(io::Error),
}

impl std::fmt::Display for LogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogError::Symlink(p) => write!(
                f,
                "{} is a symlink; refusing to write the run log through it",
                p.display()
            ),
            LogError::NotRegular(p) => write!(
                f,
                "{} is not a regular file; not writing the run log",
                p.display()
            ),
            LogError::Io(e) => write!(f, "cannot write the run log: {e}"),
        }
    }
}

/// The run log of one agent dir. Does no I/O until used.
#[derive(Debug, Clone)]
pub struct RunLog {
    dir: PathBuf,
}

impl RunLog {
    pub fn new(agent_dir: &Path) -> RunLog {
        RunLog {
            dir: agent_dir.to_path_buf(),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// Appends `<ISO-8601 UTC> <redacted line>`, rotating first when the log is too big.
    pub fn append(&self, now_ms: u64, line: &str) -> Result<(), LogError> {
        fs::create_dir_all(&self.dir).map_err(LogError::Io)?;
        let path = self.path();
        if too_big(&path) {
            self.rotate(&path)?;
        }
        let text = format!(
            "{} {}\n",
            iso_utc(now_ms),
            redact_capped(line, LINE_MAX_CHARS)
        );
        let mut file = lockfile::open_private(OpenOptions::new().create(true).append(true), &path)
            .map_err(|e| symlink_or_io(e, &path))?;
        // One write of the whole line: O_APPEND keeps concurrent writers' lines whole.
        file.write_all(text.as_bytes()).map_err(LogError::Io)
    }

    fn rotate(&self, path: &Path) -> Result<(), LogError> {
        let lock = self.dir.join(ROTATE_LOCK_FILE);
        let _guard = match lockfile::lock_path(&lock, ROTATE_LOCK_WAIT) {
            Ok(g) => g,
            Err(LockError::Open(e)) if lockfile::is_symlink_error(&e) => {
                return Err(LogError::Symlink(lock));
            }
            // Someone else is busy; the log just grows a little past the limit this time.
            Err(_) => return Ok(()),
        };
        // A peer may have rotated while we waited.
        if !too_big(path) {
            return Ok(());
        }
        let generation = |n: u32| self.dir.join(format!("{LOG_FILE}.{n}"));
        for n in (1..GENERATIONS).rev() {
            let _ = fs::rename(generation(n), generation(n + 1));
        }
        let _ = fs::rename(path, generation(1));
        Ok(())
    }
}

fn symlink_or_io(e: io::Error, path: &Path) -> LogError {
    if lockfile::is_symlink_error(&e) {
        LogError::Symlink(path.to_path_buf())
    } else if lockfile::is_not_regular_error(&e) || e.kind() == io::ErrorKind::IsADirectory {
        LogError::NotRegular(path.to_path_buf())
    } else {
        LogError::Io(e)
    }
}

fn too_big(path: &Path) -> bool {
    // symlink_metadata: a symlinked log is refused at open, not measured through.
    fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() > ROTATE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlinked_log_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        fs::write(&target, "precious\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(LOG_FILE)).unwrap();
        let err = RunLog::new(dir.path()).append(0, "fail x").unwrap_err();
        assert!(matches!(err, LogError::Symlink(_)), "{err}");
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious\n");
    }

    #[test]
    fn lines_are_stamped_and_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let log = RunLog::new(dir.path());
        log.append(0, "401 Authorization: Bearer abc.def.ghi")
            .unwrap();
        assert_eq!(
            fs::read_to_string(log.path()).unwrap(),
            "1970-01-01T00:00:00.000Z 401 Authorization: [redacted]\n"
        );
    }
}
