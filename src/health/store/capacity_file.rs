//! The capacity records of the file store: `pi-ccswitch-run-capacity.json` beside the state
//! file, under a lock of its own (`pi-ccswitch-run-capacity.lock`), so slot traffic never waits
//! behind a breaker commit's fsync and never makes the state file churn.
//!
//! Leases are judged by one clock, the file system's (the lock file's modification time set to
//! "now" by the kernel, under the lock), not by each caller's: processes that share the file
//! but not a clock (a skewed container, `faketime`, a network file system's clients) still
//! agree on when a lease runs out (issue 29).
//!
//! The records are ephemeral — leases last seconds, a learned limit is relearned in a few
//! answers — so the file is replaced atomically (temp file, rename) but not fsynced, and one
//! that does not parse (a crash mid-write, a foreign file) counts as empty and is overwritten by
//! the next write: there is nothing in it worth a quarantine. Like the state file it is never
//! opened through a symlink or as anything but a regular file, and what is read is bounded.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::api::{StoreError, io_err};
use super::disk::{lock_store_file, replace_file, store_clock_ms};
use crate::capacity::Capacity;
use crate::capacity::ops::{CapacityOp, CapacityReply, apply_op, prune};
use crate::lockfile;

pub const CAPACITY_FILE: &str = "pi-ccswitch-run-capacity.json";
pub const CAPACITY_LOCK_FILE: &str = "pi-ccswitch-run-capacity.lock";
/// Ours stays well under this (64 providers × 256 leases at most); a bigger file is not ours.
const MAX_BYTES: u64 = 4 * 1024 * 1024;
/// The layout of the file; another one is read as empty.
const VERSION: u64 = 1;

#[derive(Serialize, Deserialize)]
struct CapacityOnDisk {
    version: u64,
    providers: BTreeMap<String, Capacity>,
}

#[derive(Debug, Clone)]
pub struct CapacityFile {
    dir: PathBuf,
    lock_wait: Duration,
}

impl CapacityFile {
    pub fn new(dir: &Path, lock_wait: Duration) -> CapacityFile {
        CapacityFile {
            dir: dir.to_path_buf(),
            lock_wait,
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(CAPACITY_FILE)
    }

    /// Under the lock: re-read, apply `op`, write back what changed.
    pub fn apply(&self, op: &CapacityOp, now_ms: u64) -> Result<CapacityReply, StoreError> {
        fs::create_dir_all(&self.dir).map_err(io_err("create state directory", &self.dir))?;
        let guard = lock_store_file(self.dir.join(CAPACITY_LOCK_FILE), self.lock_wait)?;
        // One clock for every process sharing the file: the file system's (see `store_clock`).
        let now = store_clock_ms(guard.file()).unwrap_or(now_ms);
        let mut records = self.read()?;
        let (reply, changed) = apply_op(&mut records, op, now);
        let reply = reply.on_caller_clock(now, now_ms);
        if !changed.is_empty() {
            self.write(&records)?;
        }
        Ok(reply)
    }

    /// `--reset all`: forgets every learned limit and lease.
    pub fn clear(&self) -> Result<(), StoreError> {
        match fs::remove_file(self.path()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove capacity file", &self.path())(e)),
        }
    }

    /// The records as they are (lock-free: writers replace the file whole).
    pub fn load(&self, now_ms: u64) -> Result<BTreeMap<String, Capacity>, StoreError> {
        let mut records = self.read()?;
        prune(&mut records, now_ms);
        Ok(records)
    }

    fn read(&self) -> Result<BTreeMap<String, Capacity>, StoreError> {
        let path = self.path();
        let file = match lockfile::open_private(OpenOptions::new().read(true), &path) {
            Ok(f) => f,
            Err(e) if lockfile::is_symlink_error(&e) => return Err(StoreError::Symlink { path }),
            // Not a regular file: not ours either; the next write replaces it.
            Err(e) if lockfile::is_not_regular_error(&e) => return Ok(BTreeMap::new()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(BTreeMap::new());
            }
            Err(e) => return Err(io_err("read capacity file", &path)(e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err("read capacity file", &path))?;
        if bytes.len() as u64 > MAX_BYTES {
            return Ok(BTreeMap::new());
        }
        Ok(match serde_json::from_slice::<CapacityOnDisk>(&bytes) {
            Ok(d) if d.version == VERSION => d.providers,
            _ => BTreeMap::new(),
        })
    }

    fn write(&self, records: &BTreeMap<String, Capacity>) -> Result<(), StoreError> {
        let path = self.path();
        let mut bytes = serde_json::to_vec(&CapacityOnDisk {
            version: VERSION,
            providers: records.clone(),
        })
        .map_err(StoreError::Encode)?;
        bytes.push(b'\n');
        replace_file(&self.dir, CAPACITY_FILE, &bytes, false)
            .map_err(io_err("write capacity file", &path))
    }
}
