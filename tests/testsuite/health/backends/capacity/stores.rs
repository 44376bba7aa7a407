//! The stores the capacity behaviours run on, as they reach around them: the in-memory store
//! shared by every handle (one process's workers), and what the file store and Redis need
//! besides [`Backend`] (their stored records, and how a worker process opens them).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::super::{Backend, File, PREFIX, Redis};
use crate::support::RedisConn;
use crate::support::redis::{Resp, redis_cmd};
use pi_ccswitch_run::capacity::Capacity;
use pi_ccswitch_run::capacity::ops::{CapacityOp, CapacityReply};
use pi_ccswitch_run::health::store::capacity_file::CAPACITY_FILE;
use pi_ccswitch_run::health::store::{
    Check, Claim, FileStore, HealthStore, Loaded, Memory as MemoryStore, RedisStore, StoreError,
};
use pi_ccswitch_run::health::{Delta, Health, ProbeTarget};

/// What the behaviours of shared stores need besides [`Backend`].
pub(super) trait SharedBackend: Backend {
    /// `provider`'s capacity as stored (the file: the whole capacity file; Redis: the value
    /// of its `cap:` key), `None` when nothing is.
    fn capacity_raw(&self, provider: &str) -> Option<Vec<u8>>;
    /// Puts `raw` where [`SharedBackend::capacity_raw`] reads (a foreign or corrupt record).
    fn put_capacity_raw(&self, provider: &str, raw: &[u8]);
    /// How a worker process opens this store: `(kind, location)` for [`open_store`].
    fn worker_orders(&self) -> (&'static str, String);
}

impl SharedBackend for File {
    fn capacity_raw(&self, _provider: &str) -> Option<Vec<u8>> {
        std::fs::read(self.dir.path().join(CAPACITY_FILE)).ok()
    }
    fn put_capacity_raw(&self, _provider: &str, raw: &[u8]) {
        std::fs::write(self.dir.path().join(CAPACITY_FILE), raw).expect("write capacity file");
    }
    fn worker_orders(&self) -> (&'static str, String) {
        ("file", self.dir.path().to_str().expect("utf-8").to_string())
    }
}

/// Where the Redis store keeps `provider`'s record (its key layout `v1:` under the prefix; a
/// wrong guess fails `a_corrupt_or_foreign_record_counts_as_empty_and_is_overwritten`, which
/// reads the record back after the store wrote it).
fn redis_capacity_key(provider: &str) -> String {
    format!("{PREFIX}v1:cap:{provider}")
}

impl SharedBackend for Redis {
    fn capacity_raw(&self, provider: &str) -> Option<Vec<u8>> {
        match redis_cmd(&self.server, &["GET", &redis_capacity_key(provider)]) {
            Resp::Bulk(b) => Some(b),
            _ => None,
        }
    }
    fn put_capacity_raw(&self, provider: &str, raw: &[u8]) {
        let mut con = RedisConn::tcp(self.server.addr(), Duration::from_secs(5)).expect("connect");
        con.auth(self.server.password()).expect("auth");
        let key = redis_capacity_key(provider);
        assert_eq!(
            con.cmd_bytes(&[b"SET", key.as_bytes(), raw]).expect("SET"),
            Resp::ok()
        );
        let index = format!("{PREFIX}v1:caps");
        con.cmd(&["SADD", &index, provider]).expect("SADD");
    }
    fn worker_orders(&self) -> (&'static str, String) {
        ("redis", self.server.url())
    }
}

/// A store as a worker process opens it: `kind` `file` (an agent dir) or `redis` (a URL).
pub(super) fn open_store(kind: &str, at: &str) -> Box<dyn HealthStore> {
    match kind {
        "file" => Box::new(
            FileStore::open(std::path::Path::new(at))
                // Processes on two busy cores: never let a slow scheduler fail a test.
                .with_lock_wait(Duration::from_secs(30)),
        ),
        "redis" => Box::new(
            RedisStore::open(at, PREFIX)
                .expect("url parses")
                .with_timeouts(Duration::from_secs(5), Duration::from_secs(5))
                .with_contention_wait(Duration::from_secs(30)),
        ),
        other => panic!("no store kind {other:?}"),
    }
}

/// The in-memory store: one process's records, shared by every handle as by every worker of
/// one process.
pub(crate) struct Memory(Arc<Mutex<MemoryStore>>);

impl Memory {
    pub(crate) fn new() -> Memory {
        Memory(Arc::new(Mutex::new(MemoryStore::new(1.0))))
    }
}

/// One handle on a [`Memory`] store.
struct MemoryHandle(Arc<Mutex<MemoryStore>>);

impl MemoryHandle {
    fn inner(&self) -> MutexGuard<'_, MemoryStore> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl HealthStore for MemoryHandle {
    fn location(&self) -> String {
        self.inner().location()
    }
    fn load(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        self.inner().load(now_ms)
    }
    fn commit(&mut self, deltas: &[Delta], now_ms: u64) -> Result<Loaded, StoreError> {
        self.inner().commit(deltas, now_ms)
    }
    fn claim_probe(
        &mut self,
        target: &ProbeTarget,
        now_ms: u64,
    ) -> Result<(Claim, Loaded), StoreError> {
        self.inner().claim_probe(target, now_ms)
    }
    fn update(
        &mut self,
        now_ms: u64,
        edit: &mut dyn FnMut(&mut Health),
    ) -> Result<Loaded, StoreError> {
        self.inner().update(now_ms, edit)
    }
    fn diagnose(&mut self, now_ms: u64) -> Vec<Check> {
        self.inner().diagnose(now_ms)
    }
    fn capacity(&mut self, op: &CapacityOp, now_ms: u64) -> Result<CapacityReply, StoreError> {
        self.inner().capacity(op, now_ms)
    }
    fn load_capacity(
        &mut self,
        now_ms: u64,
    ) -> Result<std::collections::BTreeMap<String, Capacity>, StoreError> {
        self.inner().load_capacity(now_ms)
    }
}

impl Backend for Memory {
    fn store(&self, _cooldown_scale: f64) -> Box<dyn HealthStore> {
        Box::new(MemoryHandle(Arc::clone(&self.0)))
    }
    fn expire_leases(&self) {}
    fn dump(&self) -> String {
        format!(
            "{:?}",
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        )
    }
    fn items(&self) -> usize {
        let m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        m.capacity.len() + m.health.models.len() + m.health.providers.len()
    }
}
