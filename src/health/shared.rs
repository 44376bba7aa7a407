//! The health backend shared by every run on the machine: the state file in the agent dir.
//! When the file cannot be used (read-only dir, newer schema, lock timeout) the run warns once
//! and carries on with in-memory health: losing shared health must never lose the answer.

use std::path::Path;

use super::store::{Store, StoreError};
use super::{Backend, Delta, Health, Memory};

/// Longest wait for the state-file lock during a run.
pub const IN_RUN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(1000);

pub struct Shared {
    store: Store,
    cooldown_scale: f64,
    /// Mirror of everything this process committed, used when the file is unusable.
    memory: Memory,
    broken: bool,
    warn: Box<dyn FnMut(&str)>,
}

impl Shared {
    /// `warn` receives one line per problem (the caller prints it on stderr).
    pub fn new(agent_dir: &Path, cooldown_scale: f64, warn: Box<dyn FnMut(&str)>) -> Shared {
        Shared {
            // Runs hold the lock for milliseconds; waiting longer than this would stall Pi's
            // event stream (and its auto-retry race), so past it the run goes on in memory.
            store: Store::open(agent_dir).with_lock_wait(IN_RUN_LOCK_WAIT),
            cooldown_scale,
            memory: Memory::new(cooldown_scale),
            broken: false,
            warn,
        }
    }

    fn fail(&mut self, what: &str, e: &StoreError) {
        if !self.broken {
            (self.warn)(&format!(
                "warning: health is not shared this run ({what} failed: {e}); continuing in memory"
            ));
        }
        self.broken = true;
    }

    fn log(&self, now_ms: u64, deltas: &[Delta]) {
        for d in deltas {
            match d {
                Delta::Failure {
                    key,
                    scope,
                    class,
                    error,
                    ..
                } => self.store.log_line(
                    now_ms,
                    &format!("fail {} {key} ({class}): {error}", scope.as_str()),
                ),
                Delta::Switch(e) => self.store.log_line(
                    now_ms,
                    &format!("switch {} -> {} ({})", e.from, e.to, e.reason),
                ),
                Delta::Success { .. } | Delta::Lease { .. } => {}
            }
        }
    }
}

impl Backend for Shared {
    fn load(&mut self, now_ms: u64) -> Health {
        match self.store.load(now_ms) {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    (self.warn)(&format!("warning: {w}"));
                    // Already explained: nothing will be saved, and once is enough.
                    if matches!(w, super::store::Warning::NewerSchema { .. }) {
                        self.broken = true;
                    }
                }
                self.memory.health = loaded.health.clone();
                loaded.health
            }
            Err(e) => {
                self.fail("reading the health state", &e);
                self.memory.load(now_ms)
            }
        }
    }

    fn commit(&mut self, deltas: &[Delta], now_ms: u64) -> Option<Health> {
        self.memory.commit(deltas, now_ms);
        if self.broken {
            return None;
        }
        match self.store.commit(deltas, self.cooldown_scale, now_ms) {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    (self.warn)(&format!("warning: {w}"));
                }
                self.log(now_ms, deltas);
                self.memory.health = loaded.health.clone();
                Some(loaded.health)
            }
            Err(e) => {
                self.fail("saving the health state", &e);
                None
            }
        }
    }

    fn claim_probe(&mut self, target: &str, now_ms: u64) -> bool {
        if self.broken {
            return self.memory.claim_probe(target, now_ms);
        }
        match self.store.claim_lease(target, now_ms, self.cooldown_scale) {
            Ok((claim, loaded)) => {
                self.memory.health = loaded.health;
                claim.granted()
            }
            // Someone else is busy with the file: assume they may be probing.
            Err(StoreError::LockTimeout { .. }) => false,
            Err(e) => {
                self.fail("claiming a probe lease", &e);
                self.memory.claim_probe(target, now_ms)
            }
        }
    }
}
