//! The shared health state file in the Pi agent directory: lock, re-read, merge, atomic replace,
//! quarantine of bad files, and the rotated run log beside it. The only module that does I/O in
//! the state directory, and the only user of file locks.
//!
//! Theory of operation:
//! - Runs persist *deltas*, never snapshots. Every read-modify-write happens in one critical
//!   section under an advisory lock on a separate `pi-ccswitch-run-state.lock` (the data file
//!   itself is replaced, so it cannot carry the lock): re-read what is on disk, apply this run's
//!   deltas on top, write a temp file in the same directory, fsync, rename over the data file,
//!   fsync the directory. Counters therefore add up exactly across processes.
//! - Waiting for the lock is bounded (5 s by default): a stuck peer turns into a
//!   [`StoreError::LockTimeout`], never a hang. The lock is released when the critical section
//!   ends; nothing slow (Pi, the network) happens while it is held.
//! - Everything here blocks: async callers use `spawn_blocking`.
//! - A corrupt file, or one with a missing/unknown `schema_version`, is renamed to
//!   `<name>.corrupt-<unix ms>` with a [`Warning`], and the run continues from empty health.
//!   A file with a *newer* schema version belongs to a newer build: it is never moved or
//!   overwritten; reads see empty health plus a warning, writes fail with
//!   [`StoreError::NewerSchema`].
//! - Error text is redacted again on the way in (defence in depth: callers redact too).
//! - Wall-clock time is passed in (unix ms); this module never reads a clock itself.

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::{Delta, Health, Record, SwitchEntry};
use crate::redact::{redact, redact_capped};

/// The data file (deliberately not the Pi extension's `ccswitch-auto-switch-state.json`).
pub const STATE_FILE: &str = "pi-ccswitch-run-state.json";
/// The advisory lock guarding every read-modify-write of [`STATE_FILE`]. Never deleted.
pub const LOCK_FILE: &str = "pi-ccswitch-run-state.lock";
/// The run log.
pub const LOG_FILE: &str = "pi-ccswitch-run.log";
/// Version of the file layout this build reads and writes.
pub const SCHEMA_VERSION: u64 = 1;
/// How long a read-modify-write waits for the lock before giving up.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);
/// The log is rotated when it is larger than this before an append.
pub const LOG_ROTATE_BYTES: u64 = 512 * 1024;
/// Rotated logs kept: `.1` (newest) to `.3`.
pub const LOG_GENERATIONS: u32 = 3;

/// A state file bigger than this is not ours (ours is a few KiB): treated as corrupt.
const MAX_STATE_BYTES: u64 = 16 * 1024 * 1024;
/// Cap for one log line after redaction.
const LOG_LINE_MAX_CHARS: usize = 2000;
/// Cap for a switch reason.
const REASON_MAX_CHARS: usize = 200;
/// Log rotation is best-effort: it waits this long for the lock, then skips.
const LOG_ROTATE_LOCK_WAIT: Duration = Duration::from_millis(500);

/// Distinguishes temp files of concurrent writers inside one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The state directory (the Pi agent dir). Cheap to create; does no I/O until used.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    lock_wait: Duration,
}

/// Health as found (or as just written), with anything the user should be told on stderr.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    pub health: Health,
    /// `updated_at` of the file, if there was a valid one.
    pub updated_at: Option<u64>,
    pub warnings: Vec<Warning>,
}

/// Result of asking for a provider's half-open probe lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The provider was half-open and this call wrote the lease: send the probe, and treat the
    /// lease as this process's own (`Health::blocked(.., own_leases)`).
    Claimed,
    /// The provider's breaker is closed (no failures, or a peer's probe succeeded): no lease is
    /// needed, send normally.
    NotNeeded,
    /// Another process holds an unexpired lease (or this process already does: the file does not
    /// record owners, so callers remember their own claims).
    Held,
    /// The breaker re-opened meanwhile (a peer's probe failed).
    Cooling,
}

impl Claim {
    /// May the caller send to this provider now?
    pub fn granted(self) -> bool {
        matches!(self, Claim::Claimed | Claim::NotNeeded)
    }
}

/// Something wrong with the state file that did not stop the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// Unreadable file moved aside; health starts empty.
    Quarantined { moved_to: PathBuf, reason: String },
    /// Unreadable file that could not be moved aside (no lock, read-only dir); health is empty
    /// for this read and the next successful write moves it.
    NotQuarantined {
        path: PathBuf,
        reason: String,
        error: String,
    },
    /// File written by a newer build: ignored, left untouched, nothing will be saved.
    NewerSchema { path: PathBuf, found: u64 },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Quarantined { moved_to, reason } => write!(
                f,
                "health state file was unreadable ({reason}); moved it to {} and started with empty health",
                moved_to.display()
            ),
            Warning::NotQuarantined {
                path,
                reason,
                error,
            } => write!(
                f,
                "health state file {} is unreadable ({reason}) and could not be moved aside \
                 ({error}); using empty health",
                path.display()
            ),
            Warning::NewerSchema { path, found } => write!(
                f,
                "health state file {} has schema version {found}, newer than this build's \
                 {SCHEMA_VERSION}; ignoring it and not saving health (upgrade pi-ccswitch-run)",
                path.display()
            ),
        }
    }
}

/// Why the state could not be read or saved. The caller warns and carries on in memory.
#[derive(Debug)]
pub enum StoreError {
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    LockTimeout {
        path: PathBuf,
        waited: Duration,
    },
    NewerSchema {
        path: PathBuf,
        found: u64,
    },
    Encode(serde_json::Error),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
            StoreError::LockTimeout { path, waited } => write!(
                f,
                "gave up waiting {} ms for the health state lock {}; another pi-ccswitch-run \
                 may be stuck holding it",
                waited.as_millis(),
                path.display()
            ),
            StoreError::NewerSchema { path, found } => write!(
                f,
                "health state file {} has schema version {found} but this build understands \
                 {SCHEMA_VERSION}; not overwriting it (upgrade pi-ccswitch-run or move the file \
                 away)",
                path.display()
            ),
            StoreError::Encode(e) => write!(f, "cannot encode health state: {e}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            StoreError::Encode(e) => Some(e),
            StoreError::LockTimeout { .. } | StoreError::NewerSchema { .. } => None,
        }
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// What the data file holds.
#[derive(Debug, PartialEq)]
enum OnDisk {
    Missing,
    Good { health: Health, updated_at: u64 },
    Bad(String),
    Newer(u64),
}

/// The file layout: a version header, then the health fields (snake_case, as `Health`).
#[derive(Serialize)]
struct FileOut<'a> {
    schema_version: u64,
    updated_at: u64,
    #[serde(flatten)]
    health: &'a Health,
}

/// Holds the advisory lock until dropped.
struct LockGuard {
    file: File,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking first just makes it prompt.
        let _ = self.file.unlock();
    }
}

impl Store {
    /// A store over `agent_dir`. No I/O happens until a method is called.
    pub fn open(agent_dir: &Path) -> Store {
        Store {
            dir: agent_dir.to_path_buf(),
            lock_wait: DEFAULT_LOCK_WAIT,
        }
    }

    /// Overrides how long read-modify-writes wait for the lock.
    pub fn with_lock_wait(mut self, wait: Duration) -> Store {
        self.lock_wait = wait;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// Reads the current health without the lock (writers replace the file atomically, so a
    /// read always sees a whole file). A missing directory or file is empty health. An
    /// unreadable file is moved aside under the lock (needs `now_ms` for its name); if that is
    /// impossible the read still succeeds, with a warning. Errors only when the file exists but
    /// cannot be read at all.
    pub fn load(&self, now_ms: u64) -> Result<Loaded, StoreError> {
        let path = self.state_path();
        match self.read_state()? {
            OnDisk::Missing => Ok(Loaded::default()),
            OnDisk::Good { health, updated_at } => Ok(Loaded {
                health,
                updated_at: Some(updated_at),
                warnings: Vec::new(),
            }),
            OnDisk::Newer(found) => Ok(Loaded {
                warnings: vec![Warning::NewerSchema { path, found }],
                ..Loaded::default()
            }),
            OnDisk::Bad(_) => {
                // Moving the file aside must happen under the lock, after a re-read: a peer may
                // have replaced the bad file with a good one since we looked.
                match self.read_modify_write(now_ms, |_| (false, ())) {
                    Ok(((), loaded)) => Ok(loaded),
                    Err(StoreError::NewerSchema { path, found }) => Ok(Loaded {
                        warnings: vec![Warning::NewerSchema { path, found }],
                        ..Loaded::default()
                    }),
                    Err(e) => {
                        let reason = match self.read_state() {
                            Ok(OnDisk::Bad(reason)) => reason,
                            _ => "unreadable".to_string(),
                        };
                        Ok(Loaded {
                            warnings: vec![Warning::NotQuarantined {
                                path,
                                reason,
                                error: redact(&e.to_string()),
                            }],
                            ..Loaded::default()
                        })
                    }
                }
            }
        }
    }

    /// Under the lock: re-reads the file, applies `deltas` on top of it, writes it back
    /// atomically and returns the merged health. With no deltas nothing is written (a locked
    /// refresh). Creates the directory if it is missing.
    pub fn commit(
        &self,
        deltas: &[Delta],
        cooldown_scale: f64,
        now_ms: u64,
    ) -> Result<Loaded, StoreError> {
        let ((), loaded) = self.read_modify_write(now_ms, |health| {
            for delta in deltas {
                health.apply(&scrub_delta(delta), cooldown_scale);
            }
            (!deltas.is_empty(), ())
        })?;
        Ok(loaded)
    }

    /// Under the lock: decides whether this process may probe `provider` now, and if the
    /// provider is half-open and nobody holds its lease, writes the lease ([`Claim::Claimed`]).
    /// `cooldown_scale` is passed to [`Health::apply`] like for any other delta.
    pub fn claim_lease(
        &self,
        target: &str,
        now_ms: u64,
        cooldown_scale: f64,
    ) -> Result<(Claim, Loaded), StoreError> {
        self.read_modify_write(now_ms, |health| {
            let claim = match health.target_record(target) {
                Some(r) if r.leased(now_ms) => Claim::Held,
                Some(r) if r.cooling(now_ms) => Claim::Cooling,
                Some(r) if r.half_open(now_ms) => Claim::Claimed,
                _ => Claim::NotNeeded,
            };
            if claim == Claim::Claimed {
                let lease = Delta::Lease {
                    at: now_ms,
                    target: target.to_string(),
                };
                health.apply(&lease, cooldown_scale);
            }
            (claim == Claim::Claimed, claim)
        })
    }

    /// Under the lock: lets a management command (`--reactivate`, `--disable`, `--reset`) edit
    /// the current health, then writes it back.
    pub fn update<F: FnOnce(&mut Health)>(&self, now_ms: u64, f: F) -> Result<Loaded, StoreError> {
        let ((), loaded) = self.read_modify_write(now_ms, |health| {
            f(health);
            (true, ())
        })?;
        Ok(loaded)
    }

    /// Appends `<ISO-8601 UTC> <redacted line>` to the log, rotating it when it is over
    /// [`LOG_ROTATE_BYTES`]. Best-effort: every failure is ignored.
    pub fn log_line(&self, now_ms: u64, line: &str) {
        let _ = self.try_log_line(now_ms, line);
    }

    fn try_log_line(&self, now_ms: u64, line: &str) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let path = self.log_path();
        if log_too_big(&path) {
            self.rotate_log(&path);
        }
        let text = format!(
            "{} {}\n",
            iso_utc(now_ms),
            redact_capped(line, LOG_LINE_MAX_CHARS)
        );
        let mut file = open_private(OpenOptions::new().create(true).append(true), &path)?;
        // One write of the whole line: O_APPEND keeps concurrent writers' lines whole.
        file.write_all(text.as_bytes())
    }

    fn rotate_log(&self, path: &Path) {
        // Under the state lock so two processes do not both rotate (losing a generation); the
        // size is checked again because a peer may have rotated while we waited.
        let Ok(_guard) = self.lock(LOG_ROTATE_LOCK_WAIT) else {
            return;
        };
        if !log_too_big(path) {
            return;
        }
        let generation = |n: u32| self.dir.join(format!("{LOG_FILE}.{n}"));
        for n in (1..LOG_GENERATIONS).rev() {
            let _ = fs::rename(generation(n), generation(n + 1));
        }
        let _ = fs::rename(path, generation(1));
    }

    /// The one critical section: lock, re-read (moving a bad file aside), let `f` change the
    /// health, write it back if `f` says so.
    fn read_modify_write<T>(
        &self,
        now_ms: u64,
        f: impl FnOnce(&mut Health) -> (bool, T),
    ) -> Result<(T, Loaded), StoreError> {
        fs::create_dir_all(&self.dir).map_err(io_err("create state directory", &self.dir))?;
        let _guard = self.lock(self.lock_wait)?;
        let path = self.state_path();
        let mut warnings = Vec::new();
        let (mut health, mut updated_at) = match self.read_state()? {
            OnDisk::Missing => (Health::default(), None),
            OnDisk::Good { health, updated_at } => (health, Some(updated_at)),
            OnDisk::Newer(found) => return Err(StoreError::NewerSchema { path, found }),
            OnDisk::Bad(reason) => {
                let moved_to = self
                    .quarantine(now_ms)
                    .map_err(io_err("move aside unreadable state file", &path))?;
                warnings.push(Warning::Quarantined { moved_to, reason });
                (Health::default(), None)
            }
        };
        let (write, out) = f(&mut health);
        if write {
            scrub_health(&mut health);
            let stamp = updated_at.map_or(now_ms, |t| t.max(now_ms));
            self.write_state(&health, stamp)?;
            updated_at = Some(stamp);
        }
        Ok((
            out,
            Loaded {
                health,
                updated_at,
                warnings,
            },
        ))
    }

    /// Takes the advisory lock, waiting at most `wait`.
    ///
    /// Polling `try_lock` starves under contention (the lock is free only for moments and a
    /// sleeping poller misses them), so a contended lock is waited for with a blocking
    /// `lock()` on a helper thread, which the kernel wakes at every release. The helper holds a
    /// duplicate of the same open file description, so the lock it takes is ours. If we give up
    /// first, the helper releases the lock as soon as it gets it and exits.
    fn lock(&self, wait: Duration) -> Result<LockGuard, StoreError> {
        let path = self.lock_path();
        let file = open_private(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )
        .map_err(io_err("open lock file", &path))?;
        match file.try_lock() {
            Ok(()) => return Ok(LockGuard { file }),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
        }
        let timeout = || StoreError::LockTimeout {
            path: path.clone(),
            waited: wait,
        };
        if wait.is_zero() {
            return Err(timeout());
        }
        let waiter = file.try_clone().map_err(io_err("lock", &path))?;
        let (tx, rx) = mpsc::sync_channel::<io::Result<()>>(1);
        thread::Builder::new()
            .name("state-lock".into())
            .spawn(move || {
                let locked = waiter.lock();
                let got_it = locked.is_ok();
                if tx.send(locked).is_err() && got_it {
                    // Nobody is waiting any more: hand the lock straight back.
                    let _ = waiter.unlock();
                }
            })
            .map_err(io_err("lock", &path))?;
        match rx.recv_timeout(wait) {
            Ok(Ok(())) => Ok(LockGuard { file }),
            Ok(Err(e)) => Err(io_err("lock", &path)(e)),
            // If the helper gets the lock right after this, it either sees the channel closed
            // and unlocks, or its message is dropped with the channel and closing the last
            // descriptor of the file releases the lock.
            Err(_) => Err(timeout()),
        }
    }

    fn read_state(&self) -> Result<OnDisk, StoreError> {
        let path = self.state_path();
        let file = match File::open(&path) {
            Ok(f) => f,
            // A path through a regular file cannot hold a state file either.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(OnDisk::Missing);
            }
            Err(e) => return Err(io_err("read state file", &path)(e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_STATE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err("read state file", &path))?;
        if bytes.len() as u64 > MAX_STATE_BYTES {
            return Ok(OnDisk::Bad(format!(
                "larger than {} MiB",
                MAX_STATE_BYTES / 1024 / 1024
            )));
        }
        Ok(parse_state(&bytes))
    }

    /// Renames the data file to `<name>.corrupt-<now_ms>` (or `-<n>` after it if taken).
    fn quarantine(&self, now_ms: u64) -> io::Result<PathBuf> {
        let path = self.state_path();
        for n in 0..1000u32 {
            let name = if n == 0 {
                format!("{STATE_FILE}.corrupt-{now_ms}")
            } else {
                format!("{STATE_FILE}.corrupt-{now_ms}-{n}")
            };
            let target = self.dir.join(name);
            // Under the lock, so nobody else creates `target` between the check and the rename.
            if fs::symlink_metadata(&target).is_ok() {
                continue;
            }
            fs::rename(&path, &target)?;
            return Ok(target);
        }
        Err(io::Error::other("too many quarantined state files"))
    }

    /// Temp file in the same directory, fsync, rename over the data file, fsync the directory.
    fn write_state(&self, health: &Health, updated_at: u64) -> Result<(), StoreError> {
        let path = self.state_path();
        let mut bytes = serde_json::to_vec_pretty(&FileOut {
            schema_version: SCHEMA_VERSION,
            updated_at,
            health,
        })
        .map_err(StoreError::Encode)?;
        bytes.push(b'\n');
        let tmp = self.dir.join(format!(
            ".{STATE_FILE}.tmp-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| {
            let mut file = open_private(OpenOptions::new().write(true).create_new(true), &tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            drop(file);
            fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_err("write state file", &path)(e));
        }
        // Makes the rename itself durable. Not possible on every platform (Windows cannot open
        // a directory this way); the data is already safe, so failures are ignored.
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

fn log_too_big(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES)
}

/// Files we create hold error text about the user's providers: owner-only on Unix.
fn open_private(options: &mut OpenOptions, path: &Path) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Classifies the bytes of a data file.
fn parse_state(bytes: &[u8]) -> OnDisk {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return OnDisk::Bad(format!("not valid JSON: {e}")),
    };
    let Value::Object(mut map) = value else {
        return OnDisk::Bad("not a JSON object".to_string());
    };
    let version = match map.remove("schema_version") {
        None => return OnDisk::Bad("no schema_version".to_string()),
        Some(v) => v,
    };
    let Some(version) = version.as_u64() else {
        return OnDisk::Bad(format!(
            "schema_version {} is not a version number",
            redact_capped(&version.to_string(), 40)
        ));
    };
    if version > SCHEMA_VERSION {
        return OnDisk::Newer(version);
    }
    if version != SCHEMA_VERSION {
        return OnDisk::Bad(format!("unknown schema_version {version}"));
    }
    let updated_at = map
        .remove("updated_at")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    match serde_json::from_value::<Health>(Value::Object(map)) {
        Ok(health) => OnDisk::Good { health, updated_at },
        // serde's message may quote file content: redact it before it reaches a warning.
        Err(e) => OnDisk::Bad(format!("unexpected content: {}", redact(&e.to_string()))),
    }
}

/// Redacts the free text a delta carries (callers should have done it already).
fn scrub_delta(delta: &Delta) -> Delta {
    match delta {
        Delta::Failure {
            at,
            key,
            scope,
            class,
            error,
        } => Delta::Failure {
            at: *at,
            key: key.clone(),
            scope: *scope,
            class: *class,
            error: redact(error),
        },
        Delta::Switch(entry) => Delta::Switch(SwitchEntry {
            reason: redact_capped(&entry.reason, REASON_MAX_CHARS),
            ..entry.clone()
        }),
        Delta::Success { .. } | Delta::Lease { .. } => delta.clone(),
    }
}

/// Redacts every stored error once more before it is written (covers `update` closures).
fn scrub_health(health: &mut Health) {
    let records = health
        .models
        .values_mut()
        .chain(health.providers.values_mut())
        .chain(health.endpoints.values_mut());
    for Record { last_error, .. } in records {
        if let Some(e) = last_error.as_mut() {
            *e = redact(e);
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for unix milliseconds (clamped to year 9999).
pub fn iso_utc(ms: u64) -> String {
    const MAX_MS: u64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    let ms = ms.min(MAX_MS);
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01. Works in 400-year
/// eras counted from 0000-03-01, so that the leap day is the last day of its year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    const DAYS_1970_FROM_0000_03_01: u64 = 719_468;
    const ERA_DAYS: u64 = 146_097;
    let z = days + DAYS_1970_FROM_0000_03_01;
    let era = z / ERA_DAYS;
    let doe = z % ERA_DAYS; // day of era, [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year from March 1, [0, 365]
    let mp = (5 * doy + 2) / 153; // month from March, [0, 11]
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_utc(68_169_600_000), "1972-02-29T00:00:00.000Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_utc(1_234_567_890_001), "2009-02-13T23:31:30.001Z");
        assert_eq!(iso_utc(1_709_210_096_789), "2024-02-29T12:34:56.789Z");
        assert_eq!(iso_utc(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(iso_utc(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(iso_utc(u64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn civil_dates_round_trip_day_by_day() {
        // Every day from 1970 to 2500 follows the previous one.
        let mut prev = civil_from_days(0);
        assert_eq!(prev, (1970, 1, 1));
        for days in 1..194_000 {
            let cur = civil_from_days(days);
            let (y, m, d) = prev;
            let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            let month_len = match m {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let expected = if d < month_len {
                (y, m, d + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            assert_eq!(cur, expected, "day {days}");
            prev = cur;
        }
    }

    #[test]
    fn classifies_file_contents() {
        let good = br#"{"schema_version":1,"updated_at":5,"switches":3,"future_field":true}"#;
        match parse_state(good) {
            OnDisk::Good { health, updated_at } => {
                assert_eq!(health.switches, 3);
                assert_eq!(updated_at, 5);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_state(br#"{"schema_version":7}"#), OnDisk::Newer(7));
        for bad in [
            &b""[..],
            b"{",
            b"[1,2]",
            b"null",
            br#"{"schemaVersion":2,"models":{}}"#,
            br#"{"schema_version":0}"#,
            br#"{"schema_version":"1"}"#,
            br#"{"schema_version":-1}"#,
            br#"{"schema_version":1.5}"#,
            br#"{"schema_version":1,"models":[]}"#,
            br#"{"schema_version":1,"switches":"many"}"#,
        ] {
            assert!(
                matches!(parse_state(bad), OnDisk::Bad(_)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn bad_file_reasons_carry_no_secrets() {
        let raw = br#"{"schema_version":1,"switches":"sk-proj-AbCdEfGh1234567890XyZ"}"#;
        let OnDisk::Bad(reason) = parse_state(raw) else {
            panic!("should be bad");
        };
        assert!(!reason.contains("AbCdEfGh"), "{reason}");
    }

    #[test]
    fn deltas_are_scrubbed() {
        let d = Delta::Failure {
            at: 1,
            key: "p".into(),
            scope: crate::failover::classify::Scope::Provider,
            class: crate::failover::classify::FailureClass::Auth,
            error: "401 Authorization: Bearer abc.def.ghi\nmore".into(),
        };
        let Delta::Failure { error, .. } = scrub_delta(&d) else {
            panic!("kind kept");
        };
        assert_eq!(error, "401 Authorization: [redacted] more");
    }
}
