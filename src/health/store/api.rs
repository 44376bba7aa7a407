//! The interface every health store implements ([`HealthStore`]) and what its operations
//! return: loaded health, probe claims, warnings and errors. A leaf of `store`: the stores
//! (`file`, `redis`, `Memory`) use it and `store` re-exports it, so no store reaches back up
//! into `store` while `store` opens them.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use std::collections::BTreeMap;

use crate::capacity::Capacity;
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::health::{Delta, Health, ProbeTarget};

/// The state-file schema this build reads and writes; a newer one is left alone
/// ([`StoreError::NewerSchema`], [`StoreWarning::NewerSchema`]).
pub const SCHEMA_VERSION: u64 = 1;

/// One place health is kept. Implementations are used from one thread at a time.
pub trait HealthStore: Send {
    /// Where health lives, for messages (`state file /…/pi-ccswitch-run-state.json`,
    /// `redis://127.0.0.1:6379/0 (prefix pi-ccswitch-run:)`); never contains credentials.
    fn location(&self) -> String;
    /// Current health. Reads may be lock-free; they always see whole updates.
    fn load(&mut self, now_ms: u64) -> Result<Loaded, StoreError>;
    /// Applies `deltas` atomically on top of the stored health and returns the result.
    fn commit(&mut self, deltas: &[Delta], now_ms: u64) -> Result<Loaded, StoreError>;
    /// Decides whether this process may probe `target` now and, if the
    /// breaker is half-open and nobody holds its lease, takes the lease.
    fn claim_probe(
        &mut self,
        target: &ProbeTarget,
        now_ms: u64,
    ) -> Result<(Claim, Loaded), StoreError>;
    /// Lets a management command edit the stored health (`--reactivate`, `--disable`, `--reset`).
    fn update(
        &mut self,
        now_ms: u64,
        edit: &mut dyn FnMut(&mut Health),
    ) -> Result<Loaded, StoreError>;
    /// `--reset all`: forgets everything this store holds. The recovery command must work on
    /// a store in any state, so stores override this to delete what is theirs without reading
    /// it first (a key of the wrong type, a record that does not parse).
    fn reset_all(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        self.update(now_ms, &mut |h| *h = Health::default())
    }
    /// `--doctor`'s checks of this store (reachable, writable, readable).
    fn diagnose(&mut self, now_ms: u64) -> Vec<Check>;
    /// Applies a capacity operation (a slot admission, or a renewal, release, answer or refusal
    /// on one provider's record) atomically with [`crate::capacity::ops::apply_op`], on top of
    /// what other processes wrote. Capacity records are ephemeral (leases last seconds): a store
    /// may keep them apart from the breakers and less durably.
    fn capacity(&mut self, op: &CapacityOp, now_ms: u64) -> Result<CapacityReply, StoreError>;
    /// Every provider's capacity record, for `--status` and the batch summary.
    fn load_capacity(&mut self, now_ms: u64) -> Result<BTreeMap<String, Capacity>, StoreError>;
    /// The models Pi lists now (`provider/id`): when the store must drop records to stay
    /// bounded, records of models Pi no longer lists go first.
    fn note_listed(&mut self, _models: &[String]) {}
    /// The operations that follow should end by `deadline`: a networked store bounds each
    /// round trip by what is left of it, so a slow server frees the caller sooner.
    fn set_deadline(&mut self, _deadline: Option<std::time::Instant>) {}
}

/// One line of `--doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

impl Check {
    pub fn new(name: &str, ok: bool, detail: impl Into<String>) -> Check {
        Check {
            name: name.to_string(),
            ok,
            detail: detail.into(),
        }
    }
}

/// The claim rule every store applies to the breaker record named by `target`.
pub fn claim_for(health: &Health, target: &ProbeTarget, now_ms: u64) -> Claim {
    match health.target_record(target) {
        Some(r) if r.leased(now_ms) => Claim::Held,
        Some(r) if r.cooling(now_ms) => Claim::Cooling,
        Some(r) if r.half_open(now_ms) => Claim::Claimed,
        _ => Claim::NotNeeded,
    }
}

/// Health as found (or as just written), with anything the user should be told on stderr.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    pub health: Health,
    /// `updated_at` of the file, if there was a valid one.
    pub updated_at: Option<u64>,
    pub warnings: Vec<StoreWarning>,
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
pub enum StoreWarning {
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

impl fmt::Display for StoreWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreWarning::Quarantined { moved_to, reason } => write!(
                f,
                "health state file was unreadable ({reason}); moved it to {} and started with empty health",
                moved_to.display()
            ),
            StoreWarning::NotQuarantined {
                path,
                reason,
                error,
            } => write!(
                f,
                "health state file {} is unreadable ({reason}) and could not be moved aside \
                 ({error}); using empty health",
                path.display()
            ),
            StoreWarning::NewerSchema { path, found } => write!(
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
    /// A lock or state file that is a symlink: refused, never followed.
    Symlink {
        path: PathBuf,
    },
    /// A networked store could not be reached or refused a command (URL already redacted).
    Unavailable {
        store: String,
        reason: String,
    },
    /// The store did not finish an operation within the budget (see `health::service`).
    Slow {
        budget: Duration,
    },
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
            StoreError::Symlink { path } => write!(
                f,
                "{} is a symlink; refusing to use it (remove it, or point PI_CODING_AGENT_DIR \
                 elsewhere)",
                path.display()
            ),
            StoreError::Unavailable { store, reason } => write!(f, "{store}: {reason}"),
            StoreError::Slow { budget } => write!(
                f,
                "the health store did not answer within {} ms (slow or unreachable)",
                budget.as_millis()
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            StoreError::Encode(e) => Some(e),
            StoreError::LockTimeout { .. }
            | StoreError::NewerSchema { .. }
            | StoreError::Symlink { .. }
            | StoreError::Unavailable { .. }
            | StoreError::Slow { .. } => None,
        }
    }
}

pub(crate) fn io_err<'a>(
    action: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}
