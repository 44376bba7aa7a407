//! The state file in the Pi agent directory, the default [`HealthStore`]: lock, re-read, merge,
//! atomic replace, quarantine of bad files. The only module that does I/O on the state file.
//!
//! Theory of operation:
//! - Runs persist *deltas*, never snapshots. Every read-modify-write happens in one critical
//!   section under an advisory lock on a separate `pi-ccswitch-run-state.lock` (the data file
//!   itself is replaced, so it cannot carry the lock): re-read what is on disk, apply this run's
//!   deltas on top, write a temp file in the same directory, fsync, rename over the data file,
//!   fsync the directory. Counters therefore add up exactly across processes.
//! - Waiting for the lock is bounded (5 s by default, 1 s during a run): a stuck peer turns into
//!   a [`StoreError::LockTimeout`], never a hang. Nothing slow (Pi, the network) happens while
//!   the lock is held. Everything here blocks: runs call it from the health thread.
//! - The lock file and the state file are never opened through a symlink (see `lockfile`).
//! - A corrupt file, or one with a missing/unknown `schema_version`, is renamed to
//!   `<name>.corrupt-<unix ms>` with a [`StoreWarning`], and the run continues from empty health.
//!   A file with a *newer* schema version belongs to a newer build: it is never moved or
//!   overwritten; reads see empty health plus a warning, writes fail with
//!   [`StoreError::NewerSchema`].
//! - What one file may hold is bounded (`Health::prune`); error text is redacted again on the way
//!   in (defence in depth: callers redact too).
//! - Wall-clock time is passed in (unix ms); this module never reads a clock itself.

use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::api::{
    Check, Claim, HealthStore, Loaded, SCHEMA_VERSION, StoreError, StoreWarning, claim_for, io_err,
};
use super::disk::{lock_store_file, replace_file};
use crate::health::{Delta, Health, ProbeTarget, Record, SwitchEntry};
use crate::lockfile::{self, LockError, LockGuard};
use crate::redact::{redact, redact_capped};

/// The data file (deliberately not the Pi extension's `ccswitch-auto-switch-state.json`).
pub const STATE_FILE: &str = "pi-ccswitch-run-state.json";
/// The advisory lock guarding every read-modify-write of [`STATE_FILE`]. Never deleted.
pub const LOCK_FILE: &str = "pi-ccswitch-run-state.lock";
/// How long a read-modify-write waits for the lock before giving up.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// A state file bigger than this is not ours (ours is a few KiB): treated as corrupt.
const MAX_STATE_BYTES: u64 = 16 * 1024 * 1024;
/// Cap for a switch reason.
const REASON_MAX_CHARS: usize = 200;

/// The state file of one agent dir. Cheap to create; does no I/O until used.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    lock_wait: Duration,
    cooldown_scale: f64,
    /// The models Pi lists, when known (see `HealthStore::note_listed`).
    listed: Option<std::collections::BTreeSet<String>>,
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

impl FileStore {
    /// A store over `agent_dir`. No I/O happens until a method is called.
    pub fn open(agent_dir: &Path) -> FileStore {
        FileStore {
            dir: agent_dir.to_path_buf(),
            lock_wait: DEFAULT_LOCK_WAIT,
            cooldown_scale: 1.0,
            listed: None,
        }
    }

    /// Overrides how long read-modify-writes wait for the lock.
    pub fn with_lock_wait(mut self, wait: Duration) -> FileStore {
        self.lock_wait = wait;
        self
    }

    /// `CCSWITCH_COOLDOWN_SCALE` for the deltas this store applies.
    pub fn with_cooldown_scale(mut self, scale: f64) -> FileStore {
        self.cooldown_scale = scale;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The capacity records beside the state file (see `capacity_file`).
    pub fn capacity_file(&self) -> super::capacity_file::CapacityFile {
        super::capacity_file::CapacityFile::new(&self.dir, self.lock_wait)
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
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
            OnDisk::Good {
                mut health,
                updated_at,
            } => Ok(Loaded {
                health: {
                    health.clamp_times(now_ms);
                    health
                },
                updated_at: Some(updated_at),
                warnings: Vec::new(),
            }),
            OnDisk::Newer(found) => Ok(Loaded {
                warnings: vec![StoreWarning::NewerSchema { path, found }],
                ..Loaded::default()
            }),
            OnDisk::Bad(_) => {
                // Moving the file aside must happen under the lock, after a re-read: a peer may
                // have replaced the bad file with a good one since we looked.
                match self.read_modify_write(now_ms, |_| (false, ())) {
                    Ok(((), loaded)) => Ok(loaded),
                    Err(StoreError::NewerSchema { path, found }) => Ok(Loaded {
                        warnings: vec![StoreWarning::NewerSchema { path, found }],
                        ..Loaded::default()
                    }),
                    Err(e) => {
                        let reason = match self.read_state() {
                            Ok(OnDisk::Bad(reason)) => reason,
                            _ => "unreadable".to_string(),
                        };
                        Ok(Loaded {
                            warnings: vec![StoreWarning::NotQuarantined {
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
    pub fn commit(&self, deltas: &[Delta], now_ms: u64) -> Result<Loaded, StoreError> {
        let scale = self.cooldown_scale;
        let ((), loaded) = self.read_modify_write(now_ms, |health| {
            for delta in deltas {
                health.apply(&scrub_delta(delta), scale);
            }
            (!deltas.is_empty(), ())
        })?;
        Ok(loaded)
    }

    /// Under the lock: decides whether this process may probe `target` now, and if the breaker
    /// is half-open and nobody holds its lease, writes the lease ([`Claim::Claimed`]).
    pub fn claim_lease(
        &self,
        target: &ProbeTarget,
        now_ms: u64,
    ) -> Result<(Claim, Loaded), StoreError> {
        let scale = self.cooldown_scale;
        self.read_modify_write(now_ms, |health| {
            let claim = claim_for(health, target, now_ms);
            if claim == Claim::Claimed {
                let lease = Delta::Lease {
                    at: now_ms,
                    target: target.clone(),
                };
                health.apply(&lease, scale);
            }
            (claim == Claim::Claimed, claim)
        })
    }

    /// Under the lock: lets a management command (`--reactivate`, `--disable`, `--reset`) edit
    /// the current health, then writes it back.
    pub fn update(
        &self,
        now_ms: u64,
        f: &mut dyn FnMut(&mut Health),
    ) -> Result<Loaded, StoreError> {
        let ((), loaded) = self.read_modify_write(now_ms, |health| {
            f(health);
            (true, ())
        })?;
        Ok(loaded)
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
                warnings.push(StoreWarning::Quarantined { moved_to, reason });
                (Health::default(), None)
            }
        };
        health.clamp_pace(now_ms);
        let (write, out) = f(&mut health);
        if write {
            scrub_health(&mut health);
            let listed = self.listed.as_ref();
            health.prune(now_ms, &|scope, key| {
                scope != crate::health::Scope::Model || listed.is_none_or(|l| l.contains(key))
            });
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

    /// Takes the advisory lock, waiting at most `wait`; a symlinked lock file is refused.
    fn lock(&self, wait: Duration) -> Result<LockGuard, StoreError> {
        lock_store_file(self.lock_path(), wait)
    }

    fn read_state(&self) -> Result<OnDisk, StoreError> {
        let path = self.state_path();
        let opened = lockfile::open_private(OpenOptions::new().read(true), &path);
        let file = match opened {
            Ok(f) => f,
            Err(e) if lockfile::is_symlink_error(&e) => return Err(StoreError::Symlink { path }),
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
        replace_file(&self.dir, STATE_FILE, &bytes, true).map_err(io_err("write state file", &path))
    }
}

impl HealthStore for FileStore {
    fn location(&self) -> String {
        format!("state file {}", self.state_path().display())
    }

    fn load(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        FileStore::load(self, now_ms)
    }

    fn commit(&mut self, deltas: &[Delta], now_ms: u64) -> Result<Loaded, StoreError> {
        FileStore::commit(self, deltas, now_ms)
    }

    fn claim_probe(
        &mut self,
        target: &ProbeTarget,
        now_ms: u64,
    ) -> Result<(Claim, Loaded), StoreError> {
        self.claim_lease(target, now_ms)
    }

    fn update(
        &mut self,
        now_ms: u64,
        edit: &mut dyn FnMut(&mut Health),
    ) -> Result<Loaded, StoreError> {
        FileStore::update(self, now_ms, edit)
    }

    fn note_listed(&mut self, models: &[String]) {
        self.listed = Some(models.iter().cloned().collect());
    }

    fn capacity(
        &mut self,
        op: &crate::capacity::ops::CapacityOp,
        now_ms: u64,
    ) -> Result<crate::capacity::ops::CapacityReply, StoreError> {
        self.capacity_file().apply(op, now_ms)
    }

    fn load_capacity(
        &mut self,
        now_ms: u64,
    ) -> Result<std::collections::BTreeMap<String, crate::capacity::Capacity>, StoreError> {
        self.capacity_file().load(now_ms)
    }

    fn reset_all(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        let loaded = FileStore::update(self, now_ms, &mut |h| *h = Health::default())?;
        self.capacity_file().clear()?;
        Ok(loaded)
    }

    fn diagnose(&mut self, now_ms: u64) -> Vec<Check> {
        let lock = self.lock_path();
        let lock_check = match lockfile::lock_path(&lock, Duration::ZERO) {
            Ok(_guard) => Check::new("state lock", true, format!("{} (usable)", lock.display())),
            Err(LockError::Timeout) => Check::new(
                "state lock",
                true,
                format!("{} (held by another run right now)", lock.display()),
            ),
            Err(LockError::Open(e)) if lockfile::is_symlink_error(&e) => Check::new(
                "state lock",
                false,
                format!("{} is a symlink; refusing to use it", lock.display()),
            ),
            Err(LockError::Open(e) | LockError::Io(e)) => Check::new(
                "state lock",
                false,
                format!(
                    "cannot open or lock {}: {e} (health would not be shared)",
                    lock.display()
                ),
            ),
        };
        let state = self.state_path();
        let state_check = match FileStore::load(self, now_ms) {
            Ok(l) if l.warnings.is_empty() => Check::new(
                "state file",
                true,
                format!(
                    "{} ({})",
                    state.display(),
                    if state.exists() {
                        "ok"
                    } else {
                        "not created yet"
                    }
                ),
            ),
            Ok(l) => Check::new(
                "state file",
                false,
                l.warnings
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            Err(e) => Check::new("state file", false, e.to_string()),
        };
        vec![lock_check, state_check]
    }
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
pub(super) fn scrub_delta(delta: &Delta) -> Delta {
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
        Delta::Stated {
            key,
            scope,
            class,
            reset,
        } => Delta::Stated {
            key: key.clone(),
            scope: *scope,
            class: *class,
            reset: crate::health::StatedReset {
                words: redact(&reset.words),
                ..reset.clone()
            },
        },
        Delta::Switch(entry) => Delta::Switch(SwitchEntry {
            reason: redact_capped(&entry.reason, REASON_MAX_CHARS),
            ..entry.clone()
        }),
        Delta::Success { .. }
        | Delta::Lease { .. }
        | Delta::Release { .. }
        | Delta::SkippedStart
        | Delta::Pace { .. } => delta.clone(),
    }
}

/// Redacts every stored error once more before it is written (covers `update` closures).
pub(super) fn scrub_health(health: &mut Health) {
    let records = health
        .models
        .values_mut()
        .chain(health.providers.values_mut())
        .chain(health.endpoints.values_mut());
    for Record {
        last_error,
        stated_words,
        ..
    } in records
    {
        for text in [last_error, stated_words].into_iter().flatten() {
            *text = redact(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            scope: crate::health::Scope::Provider,
            class: crate::health::FailureClass::Auth,
            error: "401 Authorization: Bearer abc.def.ghi\nmore".into(),
        };
        let Delta::Failure { error, .. } = scrub_delta(&d) else {
            panic!("kind kept");
        };
        assert_eq!(error, "401 Authorization: [redacted] more");
    }

    mod random_files {
        use proptest::prelude::*;
        use serde_json::{Value, json};

        use super::super::*;

        /// JSON of any shape, biased towards what a state file holds.
        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<f64>().prop_map(|f| json!(f)),
                "[a-z_/:@.0-9 -]{0,16}".prop_map(Value::from),
                any::<String>().prop_map(Value::from),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                    proptest::collection::btree_map(
                        prop_oneof![
                            proptest::sample::select(vec![
                                "schema_version",
                                "updated_at",
                                "models",
                                "providers",
                                "endpoints",
                                "switches",
                                "switch_log",
                                "consecutive_failures",
                                "total_failures",
                                "cooldown_until",
                                "lease_until",
                                "last_class",
                                "last_error",
                                "disabled",
                                "a/m",
                                "p",
                            ])
                            .prop_map(String::from),
                            "[a-z]{1,6}",
                        ],
                        inner,
                        0..6,
                    )
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #![proptest_config(crate::fuzz::config(3000))]

            /// Whatever JSON is on disk, reading it never panics; a version-1 object is either
            /// read or called bad, never both.
            #[test]
            fn any_json_is_read_or_refused(v in value(), version in prop_oneof![Just(None), (0u64..3).prop_map(Some)]) {
                let mut v = v;
                if let (Some(n), Some(obj)) = (version, v.as_object_mut()) {
                    obj.insert("schema_version".into(), json!(n));
                }
                let bytes = serde_json::to_vec(&v).expect("json");
                match parse_state(&bytes) {
                    OnDisk::Good { health, .. } => {
                        prop_assert_eq!(v["schema_version"].as_u64(), Some(SCHEMA_VERSION));
                        // What was read can be written back and read again unchanged.
                        let again = serde_json::to_vec(&FileOut {
                            schema_version: SCHEMA_VERSION,
                            updated_at: 0,
                            health: &health,
                        })
                        .expect("encode");
                        match parse_state(&again) {
                            OnDisk::Good { health: h2, .. } => prop_assert_eq!(h2, health),
                            other => prop_assert!(false, "re-read failed: {:?}", other),
                        }
                    }
                    OnDisk::Newer(n) => prop_assert!(n > SCHEMA_VERSION),
                    OnDisk::Bad(reason) => prop_assert!(!reason.is_empty()),
                    OnDisk::Missing => prop_assert!(false, "bytes are never missing"),
                }
            }

            /// Arbitrary bytes, too.
            #[test]
            fn any_bytes_are_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
                let _ = parse_state(&bytes);
            }
        }
    }
}
