//! A Redis server as the [`HealthStore`], so runs on many machines share one set of breakers
//! (`--health-url` / `CCSWITCH_HEALTH_URL`). Same semantics as the state file, proven by the
//! shared behaviour suite (`tests/testsuite/health/backends.rs`). The only module that talks to Redis.
//!
//! Theory of operation:
//! - Layout (see `layout`): one key per breaker record, an index set per scope, one key per
//!   probe lease with a server-side TTL, an `INCRBY` switch counter and an `LPUSH`/`LTRIM` switch
//!   log, all under the prefix (`CCSWITCH_HEALTH_PREFIX`).
//! - Deltas are applied with optimistic transactions: `WATCH` the records a batch of deltas
//!   touches, read them, apply the deltas in Rust with [`Health::apply`] (the very code the file
//!   store uses, so cooldown doubling, caps and the one-outage rule exist once), write the
//!   difference between `MULTI` and `EXEC`. When another process changed a watched record in
//!   between, `EXEC` does nothing and the attempt is repeated, with a short random pause; the
//!   attempts are bounded in number and time (the caller's lock wait). A Lua script would never
//!   retry, but it would be a second implementation of the breaker rules, in another language.
//! - The half-open probe lease is `SET lease NX PX 120000` inside such a transaction, after
//!   [`claim_for`] decided on the freshly read record. It expires on the server if its holder
//!   dies; the success or failure the probe reports deletes it (as `Health::apply` clears
//!   `lease_until`). Reads turn the remaining TTL (`PTTL`) into `lease_until`, so
//!   [`Health::blocked`] sees leases held on other machines without any clock agreement.
//! - Management edits (`update`) watch everything, read everything, let the edit run, and write
//!   the difference; an edit that leaves nothing (`--reset all`) also deletes every key under
//!   the prefix with `SCAN` (never `KEYS`, which blocks the server).
//! - Bounded like the file: `Health::prune` after every write (records beyond
//!   `MAX_RECORDS_PER_SCOPE` deleted in a transaction of their own), at most 64 KiB read per
//!   record, index sets read with `SSCAN` up to a cap.
//! - Redis failing never costs the answer: nothing connects until the first use, connecting is
//!   bounded by [`CONNECT_BUDGET`] and each command by [`COMMAND_TIMEOUT`], and every failure is
//!   a [`StoreError::Unavailable`] (the health thread warns once, carries on in memory and tries
//!   again after its pause). Credentials never appear in [`HealthStore::location`] or errors.

mod capacity;
mod conn;
mod layout;
mod pace;
mod reply;
pub mod url;

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use self::conn::{Conn, ConnectError, server_error_text};
use self::layout::{BATCH, KeySpace, Write};
use self::reply::{bytes, getrange, int, scan_index};
use self::url::Addr;
use super::api::{Check, Claim, HealthStore, Loaded, StoreError, claim_for};
use super::file::{scrub_delta, scrub_health};
use crate::clock;
use crate::health::Scope;
use crate::health::cooldown::PROBE_LEASE_MS;
use crate::health::{
    BREAKER_SCOPES, Delta, Health, MAX_RECORDS_PER_SCOPE, ProbeTarget, SWITCH_LOG_LEN,
};

pub use self::conn::{COMMAND_TIMEOUT, CONNECT_BUDGET};
pub use self::url::{RedisUrl, UrlError};

/// How long a transaction keeps retrying under contention unless told otherwise.
pub const DEFAULT_CONTENTION_WAIT: Duration = Duration::from_secs(5);
/// Transaction attempts before giving up, whatever the time.
const MAX_ATTEMPTS: u32 = 500;
/// Most keys read from one index set (a set grown by someone else must not grow our memory).
const MAX_INDEX_READ: usize = 4 * MAX_RECORDS_PER_SCOPE;

/// The Redis store of one health URL and prefix. Cheap to create; connects on first use.
pub struct RedisStore {
    conn: Conn,
    keys: KeySpace,
    prefix: String,
    cooldown_scale: f64,
    contention_wait: Duration,
    retries: u64,
    rng: u64,
}

/// Everything under the prefix, as read.
struct Snapshot {
    health: Health,
    /// The raw value of every indexed record (empty: missing), to re-check before deleting.
    raw: HashMap<(Scope, String), Vec<u8>>,
    /// Index entries without a readable record.
    orphans: Vec<(Scope, String)>,
    /// The models the pace index names (read or not).
    pace_indexed: Vec<String>,
}

impl RedisStore {
    /// A store for `url` with keys under `prefix`. Parses the URL; does no I/O.
    pub fn open(url: &str, prefix: &str) -> Result<RedisStore, UrlError> {
        let url = url::parse(url)?;
        Ok(RedisStore {
            conn: Conn::new(url),
            keys: KeySpace::new(prefix),
            prefix: prefix.to_string(),
            cooldown_scale: 1.0,
            contention_wait: DEFAULT_CONTENTION_WAIT,
            retries: 0,
            rng: seed(),
        })
    }

    /// `CCSWITCH_COOLDOWN_SCALE` for the deltas this store applies.
    pub fn with_cooldown_scale(mut self, scale: f64) -> RedisStore {
        self.cooldown_scale = scale;
        self
    }

    /// How long a transaction may keep retrying while other processes change the same records.
    pub fn with_contention_wait(mut self, wait: Duration) -> RedisStore {
        self.contention_wait = wait;
        self
    }

    /// Overrides the connect budget and the command timeout.
    pub fn with_timeouts(mut self, connect: Duration, command: Duration) -> RedisStore {
        self.conn.connect_budget = connect;
        self.conn.command_timeout = command;
        self
    }

    /// Overrides how long a connection may sit idle before its first command may find it
    /// dropped by the server (`conn::IDLE_CHECK`); tests pass zero to have any earlier use count
    /// as idle, instead of waiting a real second.
    pub fn with_idle_check(mut self, idle: Duration) -> RedisStore {
        self.conn.idle_check = idle;
        self
    }

    /// Transactions repeated so far because another process got there first.
    pub fn retries(&self) -> u64 {
        self.retries
    }

    pub fn url(&self) -> &RedisUrl {
        self.conn.url()
    }

    fn unavailable(&self, reason: impl Into<String>) -> StoreError {
        StoreError::Unavailable {
            store: HealthStore::location(self),
            reason: reason.into(),
        }
    }

    /// Runs `f` on the connection (opening it first); any failure drops the connection.
    fn run<T>(
        &mut self,
        mut f: impl FnMut(&mut redis::Connection, &KeySpace) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        for fresh in [false, true] {
            let conn = match self.conn.get() {
                Ok(c) => c,
                Err(e) => return Err(self.unavailable(e.to_string())),
            };
            match f(conn, &self.keys) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let dropped_while_idle = !fresh
                        && self.conn.stale()
                        && !e.is_timeout()
                        && (e.is_connection_dropped() || e.is_io_error());
                    self.conn.reset();
                    if dropped_while_idle {
                        // The server dropped the idle connection: nothing was done on it.
                        continue;
                    }
                    let reason = self.describe(&e);
                    return Err(self.unavailable(reason));
                }
            }
        }
        Err(self.unavailable("the connection was lost twice"))
    }

    fn describe(&self, e: &redis::RedisError) -> String {
        let text = if e.is_timeout() {
            format!(
                "no reply within {} ms (the server is overloaded or unreachable)",
                self.conn.command_timeout.as_millis()
            )
        } else if e.is_connection_dropped() || e.is_io_error() {
            format!("connection lost: {e}")
        } else if e.code().is_some() {
            format!("the server refused a command: {}", server_error_text(e))
        } else {
            e.to_string()
        };
        self.conn.scrub(&text)
    }

    /// Repeats `attempt` until it completes (`Some`), within the contention budget.
    fn transact<T>(
        &mut self,
        mut attempt: impl FnMut(&mut redis::Connection, &KeySpace) -> redis::RedisResult<Option<T>>,
    ) -> Result<T, StoreError> {
        let started = clock::now().instant;
        let mut tries = 0u32;
        loop {
            tries += 1;
            if let Some(done) = self.run(&mut attempt)? {
                return Ok(done);
            }
            self.retries += 1;
            let spent = clock::now().instant.saturating_duration_since(started);
            if tries >= MAX_ATTEMPTS || spent >= self.contention_wait {
                return Err(self.unavailable(format!(
                    "gave up after {tries} attempts in {} ms: other runs kept changing the same \
                     breaker records",
                    spent.as_millis()
                )));
            }
            // Jitter spreads the contenders out; the cap keeps a retry cheap.
            let pause = self.next_random() % u64::from(tries.min(8) + 1);
            std::thread::sleep(Duration::from_millis(pause));
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64: only needs to differ between processes, not to be unpredictable.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Current health, and prunes the store when it has grown past its bounds.
    fn load_all(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        let snapshot = self.run(|con, keys| read_all(con, keys, now_ms, false))?;
        let health = self.maintain(snapshot, now_ms)?;
        Ok(Loaded {
            health,
            ..Loaded::default()
        })
    }

    /// Deletes what `Health::prune` would drop and index entries without a record, each only
    /// if it is still exactly as read (a transaction of its own; skipped under contention).
    fn maintain(&mut self, snapshot: Snapshot, now_ms: u64) -> Result<Health, StoreError> {
        let Snapshot {
            health,
            raw,
            orphans,
            pace_indexed,
        } = snapshot;
        let pace_victims = pace::victims(&pace_indexed, &health.pace);
        if !pace_victims.is_empty() {
            // Lists are only ever appended to: deleting one a peer just pushed to loses one
            // answer of pace, never a breaker.
            self.run(|con, keys| {
                let mut tx = redis::pipe();
                tx.atomic();
                for m in &pace_victims {
                    tx.cmd("DEL").arg(keys.pace(m)).ignore();
                    tx.cmd("SREM").arg(keys.pace_index()).arg(m).ignore();
                }
                tx.query::<()>(con)
            })?;
        }
        let mut health = health;
        health.pace.retain(|k, _| !pace_victims.contains(k));
        let mut pruned = health.clone();
        pruned.prune(now_ms, &|_, _| true);
        let mut victims = orphans;
        for scope in BREAKER_SCOPES {
            let (Some(all), Some(kept)) = (health.records(scope), pruned.records(scope)) else {
                continue;
            };
            victims.extend(
                all.keys()
                    .filter(|k| !kept.contains_key(*k))
                    .map(|k| (scope, k.clone())),
            );
        }
        if victims.is_empty() {
            return Ok(health);
        }
        let expected: Vec<Vec<u8>> = victims
            .iter()
            .map(|v| raw.get(v).cloned().unwrap_or_default())
            .collect();
        self.run(|con, keys| {
            let record_keys: Vec<String> =
                victims.iter().map(|(s, k)| keys.record(*s, k)).collect();
            let mut read = redis::pipe();
            read.cmd("WATCH").arg(&record_keys).ignore();
            for key in &record_keys {
                getrange(&mut read, key);
            }
            let now: Vec<Value> = read.ignore_errors().query(con)?;
            if now.iter().map(bytes).ne(expected.iter().cloned()) {
                redis::cmd("UNWATCH").query::<()>(con)?;
                return Ok(());
            }
            let mut write = redis::pipe();
            write.atomic();
            for (scope, key) in &victims {
                write
                    .cmd("DEL")
                    .arg(keys.record(*scope, key))
                    .arg(keys.lease(*scope, key))
                    .ignore();
                write.cmd("SREM").arg(keys.index(*scope)).arg(key).ignore();
            }
            write.query::<Option<()>>(con)?;
            Ok(())
        })?;
        Ok(pruned)
    }

    /// Deletes every key under the prefix (`SCAN`, in batches).
    fn wipe(&mut self) -> Result<(), StoreError> {
        self.run(|con, keys| {
            let pattern = keys.scan_pattern();
            let mut cursor = 0u64;
            loop {
                let (next, found): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(BATCH)
                    .query(con)?;
                if !found.is_empty() {
                    redis::cmd("DEL").arg(&found).query::<()>(con)?;
                }
                if next == 0 {
                    return Ok(());
                }
                cursor = next;
            }
        })
    }

    fn addr_text(&self) -> String {
        match &self.conn.url().addr {
            Addr::Tcp { host, port, tls } => {
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.clone()
                };
                format!("{host}:{port}{}", if *tls { " (TLS)" } else { "" })
            }
            Addr::Unix { path } => format!("unix socket {}", path.display()),
        }
    }
}

impl HealthStore for RedisStore {
    fn location(&self) -> String {
        format!("{} (prefix {})", self.conn.url().redacted(), self.prefix)
    }

    fn load(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        self.load_all(now_ms)
    }

    fn commit(&mut self, deltas: &[Delta], now_ms: u64) -> Result<Loaded, StoreError> {
        let deltas: Vec<Delta> = deltas.iter().map(scrub_delta).collect();
        let targets = layout::touched(&deltas);
        let switches: Vec<Vec<u8>> = deltas
            .iter()
            .filter_map(|d| match d {
                Delta::Switch(e) => Some(layout::encode_switch(e)),
                _ => None,
            })
            .collect();
        let skipped = deltas
            .iter()
            .filter(|d| matches!(d, Delta::SkippedStart))
            .count();
        let paced = deltas.iter().any(|d| matches!(d, Delta::Pace { .. }));
        if !targets.is_empty() || !switches.is_empty() || skipped > 0 || paced {
            let scale = self.cooldown_scale;
            self.transact(|con, keys| {
                let (mut after, _) = read_records(con, keys, &targets, &[], now_ms, true)?;
                let before = after.clone();
                for d in &deltas {
                    after.apply(d, scale);
                }
                scrub_health(&mut after);
                let mut tx = redis::pipe();
                tx.atomic();
                add_writes(&mut tx, keys, &layout::plan(&before, &after, now_ms));
                pace::add_pushes(&mut tx, keys, &deltas);
                if skipped > 0 {
                    tx.cmd("INCRBY")
                        .arg(keys.skipped_starts())
                        .arg(skipped)
                        .ignore();
                }
                if !switches.is_empty() {
                    tx.cmd("INCRBY")
                        .arg(keys.switches())
                        .arg(switches.len())
                        .ignore();
                    for entry in &switches {
                        tx.cmd("LPUSH").arg(keys.switch_log()).arg(entry).ignore();
                    }
                    tx.cmd("LTRIM")
                        .arg(keys.switch_log())
                        .arg(0)
                        .arg(SWITCH_LOG_LEN - 1)
                        .ignore();
                }
                tx.query::<Option<()>>(con)
            })?;
        }
        self.load_all(now_ms)
    }

    fn claim_probe(
        &mut self,
        target: &ProbeTarget,
        now_ms: u64,
    ) -> Result<(Claim, Loaded), StoreError> {
        let (scope, key) = (target.scope, target.key.as_str());
        let record = [(scope, key.to_string())];
        let until = now_ms.saturating_add(PROBE_LEASE_MS);
        let claim = self.transact(|con, keys| {
            let (health, _) = read_records(con, keys, &record, &[], now_ms, true)?;
            let claim = claim_for(&health, target, now_ms);
            if claim != Claim::Claimed {
                redis::cmd("UNWATCH").query::<()>(con)?;
                return Ok(Some(claim));
            }
            let taken: Option<(Value,)> = redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(keys.lease(scope, key))
                .arg(until)
                .arg("NX")
                .arg("PX")
                .arg(PROBE_LEASE_MS)
                .query(con)?;
            Ok(taken.map(|(reply,)| {
                if matches!(reply, Value::Nil) {
                    Claim::Held
                } else {
                    Claim::Claimed
                }
            }))
        })?;
        let mut loaded = self.load_all(now_ms)?;
        if claim == Claim::Claimed
            && let Some(r) = loaded
                .health
                .records_mut(scope)
                .and_then(|m| m.get_mut(key))
        {
            // Exactly what was just written; the TTL read back may already be a tick lower.
            r.lease_until = Some(until);
        }
        Ok((claim, loaded))
    }

    fn update(
        &mut self,
        now_ms: u64,
        edit: &mut dyn FnMut(&mut Health),
    ) -> Result<Loaded, StoreError> {
        let mut emptied = false;
        self.transact(|con, keys| {
            let snapshot = read_all(con, keys, now_ms, true)?;
            let before = snapshot.health;
            let mut after = before.clone();
            // Called again on a retry, on fresh health: edits set values, they do not add.
            edit(&mut after);
            scrub_health(&mut after);
            after.prune(now_ms, &|_, _| true);
            emptied = after == Health::default();
            let mut tx = redis::pipe();
            tx.atomic();
            add_writes(&mut tx, keys, &layout::plan(&before, &after, now_ms));
            pace::add_edits(&mut tx, keys, &before.pace, &after.pace);
            if after.switches != before.switches {
                tx.cmd("SET")
                    .arg(keys.switches())
                    .arg(after.switches)
                    .ignore();
            }
            if after.skipped_starts != before.skipped_starts {
                tx.cmd("SET")
                    .arg(keys.skipped_starts())
                    .arg(after.skipped_starts)
                    .ignore();
            }
            if after.switch_log != before.switch_log {
                tx.cmd("DEL").arg(keys.switch_log()).ignore();
                for entry in after.switch_log.iter().rev().take(SWITCH_LOG_LEN).rev() {
                    tx.cmd("LPUSH")
                        .arg(keys.switch_log())
                        .arg(layout::encode_switch(entry))
                        .ignore();
                }
            }
            tx.query::<Option<()>>(con)
        })?;
        if emptied {
            self.wipe()?;
        }
        self.load_all(now_ms)
    }

    fn set_deadline(&mut self, deadline: Option<std::time::Instant>) {
        self.conn.deadline = deadline;
    }

    fn capacity(
        &mut self,
        op: &crate::capacity::ops::CapacityOp,
        now_ms: u64,
    ) -> Result<crate::capacity::ops::CapacityReply, StoreError> {
        self.capacity_op(op, now_ms)
    }

    fn load_capacity(
        &mut self,
        now_ms: u64,
    ) -> Result<std::collections::BTreeMap<String, crate::capacity::Capacity>, StoreError> {
        self.capacity_records(now_ms)
    }

    fn reset_all(&mut self, now_ms: u64) -> Result<Loaded, StoreError> {
        // Whatever type each key has: a wrong-typed index set would make any read fail.
        self.wipe()?;
        self.load_all(now_ms)
    }

    fn diagnose(&mut self, now_ms: u64) -> Vec<Check> {
        let mut checks = vec![Check::new("health store", true, self.location())];
        let addr = self.addr_text();
        let opened = self.conn.reconnect();
        let connection = |ok: bool, detail: String| Check::new("redis connection", ok, detail);
        match opened {
            Err(ConnectError::Unreachable(e)) => {
                checks.push(connection(
                    false,
                    format!("cannot reach {addr}: {e}; runs will warn and keep health in memory"),
                ));
                return checks;
            }
            Err(ConnectError::Auth(e)) => {
                checks.push(connection(true, format!("{addr} answers")));
                let hint = if self.conn.url().password.is_some() {
                    "check the password (and user) in the health URL"
                } else {
                    "the server wants a password: redis://:PASSWORD@host or ?password="
                };
                checks.push(Check::new(
                    "redis auth",
                    false,
                    format!("the server refused the login ({e}); {hint}"),
                ));
                return checks;
            }
            Err(ConnectError::Select(e)) => {
                checks.push(connection(true, format!("{addr} answers")));
                checks.push(Check::new("redis auth", true, "accepted"));
                checks.push(Check::new(
                    "redis database",
                    false,
                    format!("cannot select database {}: {e}", self.conn.url().db),
                ));
                return checks;
            }
            Ok(opened) => {
                checks.push(connection(
                    true,
                    format!("{addr} connected in {:.1} ms", opened.connect_ms),
                ));
                checks.push(Check::new(
                    "redis auth",
                    true,
                    if opened.authenticated {
                        match &self.conn.url().username {
                            Some(u) => format!("password accepted for user {u}"),
                            None => "password accepted".to_string(),
                        }
                    } else {
                        "no password given, and the server needs none".to_string()
                    },
                ));
            }
        }
        let rtt = self.run(|con, _| {
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t0 = clock::now().instant;
                redis::cmd("PING").query::<()>(con)?;
                let ms = clock::now()
                    .instant
                    .saturating_duration_since(t0)
                    .as_secs_f64()
                    * 1000.0;
                best = best.min(ms);
            }
            Ok(best)
        });
        checks.push(match rtt {
            Ok(ms) => Check::new("redis round trip", true, format!("PING {ms:.2} ms")),
            Err(e) => Check::new("redis round trip", false, e.to_string()),
        });
        let info = self.run(|con, _| redis::cmd("INFO").arg("server").query::<String>(con));
        checks.push(match info {
            Ok(text) => {
                let field = |name: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                        .map(|v| crate::redact::redact_capped(v.trim(), 40))
                };
                match field("redis_version") {
                    Some(v) => Check::new(
                        "redis version",
                        true,
                        format!(
                            "{v} ({})",
                            field("redis_mode").unwrap_or_else(|| "unknown mode".into())
                        ),
                    ),
                    None => Check::new("redis version", false, "INFO server names no version"),
                }
            }
            Err(e) => Check::new("redis version", false, e.to_string()),
        });
        checks.push(match self.load_all(now_ms) {
            Ok(l) => {
                let h = &l.health;
                Check::new(
                    "redis health",
                    true,
                    format!(
                        "{} model, {} provider and {} endpoint records, {} switches",
                        h.models.len(),
                        h.providers.len(),
                        h.endpoints.len(),
                        h.switches
                    ),
                )
            }
            Err(e) => Check::new("redis health", false, e.to_string()),
        });
        checks
    }
}

/// Reads `targets` (optionally watching them first, in the same round trip) into a partial
/// health holding the records that exist; also returns each raw value.
/// The pace lists of `paced` models are read in the same round trip.
fn read_records(
    con: &mut redis::Connection,
    keys: &KeySpace,
    targets: &[(Scope, String)],
    paced: &[String],
    now_ms: u64,
    watch: bool,
) -> redis::RedisResult<(Health, Vec<Vec<u8>>)> {
    let mut health = Health::default();
    if targets.is_empty() && paced.is_empty() {
        return Ok((health, Vec::new()));
    }
    let mut p = redis::pipe();
    if watch {
        for chunk in targets.chunks(BATCH) {
            let watched: Vec<String> = chunk
                .iter()
                .flat_map(|(s, k)| [keys.record(*s, k), keys.lease(*s, k)])
                .collect();
            p.cmd("WATCH").arg(watched).ignore();
        }
        for chunk in paced.chunks(BATCH) {
            let watched: Vec<String> = chunk.iter().map(|m| keys.pace(m)).collect();
            p.cmd("WATCH").arg(watched).ignore();
        }
    }
    for (scope, key) in targets {
        getrange(&mut p, &keys.record(*scope, key));
        p.cmd("PTTL").arg(keys.lease(*scope, key));
    }
    pace::queue_reads(&mut p, keys, paced);
    // A key of the wrong type reads as missing (and is overwritten by the next write).
    let replies: Vec<Value> = p.ignore_errors().query(con)?;
    let (record_replies, pace_replies) = replies.split_at(replies.len().min(2 * targets.len()));
    health.pace = pace::parse(paced, pace_replies);
    let mut raw = Vec::with_capacity(targets.len());
    for ((scope, key), pair) in targets.iter().zip(record_replies.chunks(2)) {
        let value = pair.first().map(bytes).unwrap_or_default();
        let pttl = pair.get(1).and_then(int).unwrap_or(-2);
        if let Some(mut record) = layout::decode_record(&value)
            && let Some(map) = health.records_mut(*scope)
        {
            record.lease_until = layout::lease_until(now_ms, pttl);
            map.insert(key.clone(), record);
        }
        raw.push(value);
    }
    Ok((health, raw))
}

/// Reads everything under the prefix; with `watch`, watches all of it first (management edits).
fn read_all(
    con: &mut redis::Connection,
    keys: &KeySpace,
    now_ms: u64,
    watch: bool,
) -> redis::RedisResult<Snapshot> {
    let mut first = redis::pipe();
    if watch {
        let mut watched: Vec<String> = BREAKER_SCOPES.iter().map(|s| keys.index(*s)).collect();
        watched.extend([keys.switches(), keys.switch_log(), keys.pace_index()]);
        first.cmd("WATCH").arg(watched).ignore();
    }
    for scope in BREAKER_SCOPES {
        first
            .cmd("SSCAN")
            .arg(keys.index(scope))
            .arg(0)
            .arg("COUNT")
            .arg(BATCH);
    }
    // The switch counter and log in the same round trip: a load is two round trips (the
    // indexes, then the records), which is what a store far away costs per load.
    first
        .cmd("GET")
        .arg(keys.switches())
        .cmd("LRANGE")
        .arg(keys.switch_log())
        .arg(0)
        .arg(SWITCH_LOG_LEN - 1)
        .cmd("GET")
        .arg(keys.skipped_starts())
        .cmd("SSCAN")
        .arg(keys.pace_index())
        .arg(0)
        .arg("COUNT")
        .arg(BATCH);
    // A key of the wrong type reads as empty (`--reset all` deletes it whatever it is).
    let replies: Vec<Value> = first.ignore_errors().query(con)?;
    let mut members = Vec::new();
    for (scope, reply) in BREAKER_SCOPES.into_iter().zip(&replies) {
        let seen = scan_index(con, &keys.index(scope), reply, MAX_INDEX_READ)?;
        members.extend(seen.into_iter().map(|k| (scope, k)));
    }
    let pace_indexed = match replies.get(BREAKER_SCOPES.len() + 3) {
        Some(reply) => scan_index(con, &keys.pace_index(), reply, pace::MAX_INDEX_READ)?,
        None => Vec::new(),
    };
    let paced: Vec<String> = pace_indexed
        .iter()
        .filter(|m| crate::pace::key_ok(m))
        .cloned()
        .collect();
    let (mut health, raw) = read_records(con, keys, &members, &paced, now_ms, watch)?;
    // Breaker times and pace alike bounded by what the rules could have written.
    health.clamp_times(now_ms);
    let tail = replies.get(BREAKER_SCOPES.len()..).unwrap_or(&[]);
    health.switches = tail
        .first()
        .and_then(int)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0);
    let log: Vec<Vec<u8>> = match tail.get(1) {
        Some(Value::Array(items)) => items.iter().map(bytes).collect(),
        _ => Vec::new(),
    };
    health.switch_log = layout::decode_switch_log(&log);
    health.skipped_starts = tail
        .get(2)
        .and_then(int)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0);
    let mut orphans = Vec::new();
    let mut raws = HashMap::with_capacity(members.len());
    for ((scope, key), value) in members.into_iter().zip(raw) {
        let present = health.records(scope).is_some_and(|m| m.contains_key(&key));
        if !present {
            orphans.push((scope, key.clone()));
        }
        raws.insert((scope, key), value);
    }
    Ok(Snapshot {
        health,
        raw: raws,
        orphans,
        pace_indexed,
    })
}

/// Adds a plan's writes to a transaction.
fn add_writes(tx: &mut redis::Pipeline, keys: &KeySpace, writes: &[Write]) {
    for w in writes {
        match w {
            Write::Record { scope, key, json } => {
                tx.cmd("SET")
                    .arg(keys.record(*scope, key))
                    .arg(json)
                    .ignore();
                tx.cmd("SADD").arg(keys.index(*scope)).arg(key).ignore();
            }
            Write::Remove { scope, key } => {
                tx.cmd("DEL")
                    .arg(keys.record(*scope, key))
                    .arg(keys.lease(*scope, key))
                    .ignore();
                tx.cmd("SREM").arg(keys.index(*scope)).arg(key).ignore();
            }
            Write::Lease {
                scope,
                key,
                ttl_ms,
                until,
            } => {
                tx.cmd("SET")
                    .arg(keys.lease(*scope, key))
                    .arg(*until)
                    .arg("PX")
                    .arg(*ttl_ms)
                    .ignore();
            }
            Write::Release { scope, key } => {
                tx.cmd("DEL").arg(keys.lease(*scope, key)).ignore();
            }
        }
    }
}

/// A per-process seed for the retry jitter.
fn seed() -> u64 {
    let now = clock::now().wall_ms;
    let pid = u64::from(std::process::id());
    (now ^ (pid << 32) ^ pid.rotate_left(17)) | 1
}
