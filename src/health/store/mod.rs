//! Where breaker health lives between runs: one interface, [`HealthStore`], with a state file in
//! the agent dir ([`file::FileStore`], the default), a Redis server shared by many machines
//! ([`redis_store`]) and process memory ([`Memory`], when there is no agent dir). Every store gives
//! the same semantics, proven by one behaviour test suite run against each:
//!
//! - deltas are applied atomically on top of what other processes wrote, so counts add up;
//! - a half-open breaker's probe lease can be taken by one process at a time and expires by
//!   itself (a probe that dies never blocks the provider for longer than the lease);
//! - the switch log is bounded; stored error text is redacted.
//!
//! Everything here blocks (file locks, fsync, network round trips): the run drives a store from
//! a thread of its own (`health::service`), never from the async event loop.

pub mod api;
pub mod capacity_file;
mod disk;
pub mod file;
pub mod redis_store;

use std::time::Duration;

use super::{Delta, Health, ProbeTarget};

pub use api::{
    Check, Claim, HealthStore, Loaded, SCHEMA_VERSION, StoreError, StoreWarning, claim_for,
};
pub use file::{FileStore, LOCK_FILE, STATE_FILE};
pub use redis_store::RedisStore;

/// The store a run or a management command uses: Redis when a health URL is set, else the
/// state file in the agent dir, else process memory.
pub fn open(
    settings: &crate::settings::Settings,
    lock_wait: Duration,
) -> Result<Box<dyn HealthStore>, String> {
    if let Some(url) = &settings.health_url {
        // `lock_wait` bounds how long a transaction retries under contention, as it bounds the
        // wait for the state file's lock.
        let store = RedisStore::open(url, &settings.health_prefix)
            .map_err(|e| format!("invalid health URL (--health-url or CCSWITCH_HEALTH_URL): {e}"))?
            .with_contention_wait(lock_wait)
            .with_cooldown_scale(settings.cooldown_scale);
        return Ok(Box::new(store));
    }
    Ok(match &settings.agent_dir {
        Some(dir) => Box::new(
            FileStore::open(dir)
                .with_lock_wait(lock_wait)
                .with_cooldown_scale(settings.cooldown_scale),
        ),
        None => Box::new(Memory::new(settings.cooldown_scale)),
    })
}

/// The password of a Redis health URL as the server gets it (%-escapes decoded), if it parses.
pub fn redis_url_password(url: &str) -> Option<String> {
    redis_store::url::parse(url).ok()?.password
}

/// The password in a health URL as written (`redis://user:PASSWORD@host`,
/// `unix://:PASSWORD@/path`, `…?password=PASSWORD`, still %-escaped), for masking; read by the
/// same parser as [`redis_url_password`].
pub fn url_password(url: &str) -> Option<String> {
    redis_store::url::written_password(url)
}

/// Health that lives as long as the process: the store when there is no agent dir, and the
/// fallback every run keeps in case the real store fails.
#[derive(Debug, Default)]
pub struct Memory {
    pub health: Health,
    pub cooldown_scale: f64,
    /// Per-process capacity records: with no store (or a store that is down) the limits are
    /// this process's own.
    pub capacity: std::collections::BTreeMap<String, crate::capacity::Capacity>,
}

impl Memory {
    pub fn new(cooldown_scale: f64) -> Memory {
        Memory {
            health: Health::default(),
            cooldown_scale,
            capacity: std::collections::BTreeMap::new(),
        }
    }

    /// What a read returns at `now_ms`: pace bounded as the shared stores bound it on read.
    fn loaded(&mut self, now_ms: u64) -> Loaded {
        self.health.clamp_pace(now_ms);
        Loaded {
            health: self.health.clone(),
            ..Loaded::default()
        }
    }
}

impl HealthStore for Memory {
    fn location(&self) -> String {
        "memory (not shared)".to_string()
    }

    fn capacity(
        &mut self,
        op: &crate::capacity::ops::CapacityOp,
        now_ms: u64,
    ) -> Result<crate::capacity::ops::CapacityReply, StoreError> {
        Ok(crate::capacity::ops::apply_op(&mut self.capacity, op, now_ms).0)
    }

    fn load_capacity(
        &mut self,
        _now_ms: u64,
    ) -> Result<std::collections::BTreeMap<String, crate::capacity::Capacity>, StoreError> {
        Ok(self.capacity.clone())
    }

    fn load(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        Ok(self.loaded(now_ms))
    }

    fn commit(&mut self, deltas: &[Delta], now_ms: u64) -> Result<Loaded, StoreError> {
        for d in deltas {
            self.health.apply(d, self.cooldown_scale);
        }
        Ok(self.loaded(now_ms))
    }

    fn claim_probe(
        &mut self,
        target: &ProbeTarget,
        now_ms: u64,
    ) -> Result<(Claim, Loaded), StoreError> {
        let claim = claim_for(&self.health, target, now_ms);
        if claim == Claim::Claimed {
            self.health.apply(
                &Delta::Lease {
                    at: now_ms,
                    target: target.clone(),
                },
                self.cooldown_scale,
            );
        }
        Ok((claim, self.loaded(now_ms)))
    }

    fn update(
        &mut self,
        now_ms: u64,
        edit: &mut dyn FnMut(&mut Health),
    ) -> Result<Loaded, StoreError> {
        edit(&mut self.health);
        Ok(self.loaded(now_ms))
    }

    fn diagnose(&mut self, _now_ms: u64) -> Vec<Check> {
        vec![Check::new(
            "health store",
            false,
            "memory only: no agent directory (set PI_CODING_AGENT_DIR or HOME)",
        )]
    }
}
