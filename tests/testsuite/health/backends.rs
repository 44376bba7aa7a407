//! One behaviour suite, run against every health store: the state file and a real Redis.
//! Each behaviour is a function over a [`Backend`]; `behaviours!` instantiates it once per
//! store (`file::NAME`, `redis::NAME`), so both are held to exactly the same assertions.
//!
//! Time is simulated (fixed wall-clock milliseconds passed in) except for one thing the server
//! owns: a Redis lease's TTL. Where a behaviour needs a lease to have run out, it asks the
//! backend to [`Backend::expire_leases`]: a no-op for the file (the simulated clock is enough),
//! and for Redis a 1 ms TTL on every lease key, after which the server drops them by itself.
//!
//! Redis-only behaviour (timeouts, outages, URLs, many processes) is in `health_redis_store.rs`.
//! The capacity records (issue 23) have their own part of the suite, on the in-memory store as
//! well, in `backends/capacity.rs`.

use std::sync::Barrier;
use std::time::Duration;

use crate::support::redis::{RedisServer, Resp, redis_cmd};
use pi_ccswitch_run::failover::classify::{FailureClass, Scope};
use pi_ccswitch_run::health::cooldown::PROBE_LEASE_MS;
use pi_ccswitch_run::health::store::{Claim, FileStore, HealthStore, RedisStore, STATE_FILE};
use pi_ccswitch_run::health::{
    Delta, Health, Keys, MAX_RECORDS_PER_SCOPE, ProbeTarget, SWITCH_LOG_LEN, StatedReset,
    SwitchEntry,
};

/// Claims the probe lease on `target` at `at`; only the verdict.
fn try_claim(store: &mut dyn HealthStore, target: &ProbeTarget, at: u64) -> Claim {
    store.claim_probe(target, at).expect("claim").0
}

/// A probe target written as in messages: `provider:NAME`, `endpoint:KEY`, `model:P/ID`; a bare
/// name is a provider.
fn probe(text: &str) -> ProbeTarget {
    for scope in [Scope::Provider, Scope::Endpoint, Scope::Model] {
        if let Some(key) = text
            .strip_prefix(scope.as_str())
            .and_then(|r| r.strip_prefix(':'))
        {
            return ProbeTarget::new(scope, key);
        }
    }
    ProbeTarget::new(Scope::Provider, text)
}

/// A fixed wall-clock base: tests pass time in.
const T0: u64 = 1_700_000_000_000;
const MIN: u64 = 60_000;
const PREFIX: &str = "suite:";
const SECRET: &str = "sk-proj-Qq1Ww2Ee3Rr4Tt5Yy6Uu7Ii8Oo9Pp0";
const BEARER: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwaSJ9.c2lnbmF0dXJlLXZhbHVlLXg";

/// A health store under test, with what the suite needs to reach around it.
trait Backend: Sync {
    /// A new handle on the same stored health, as another process would open it.
    fn store(&self, cooldown_scale: f64) -> Box<dyn HealthStore>;
    /// Makes every probe lease run out now, by the store's own expiry mechanism.
    fn expire_leases(&self);
    /// Everything the store holds, as text (for secret scans).
    fn dump(&self) -> String;
    /// How many keys/files hold state (0 after `--reset all`).
    fn items(&self) -> usize;
}

struct File {
    dir: tempfile::TempDir,
}

impl File {
    fn new() -> File {
        File {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }
}

impl Backend for File {
    fn store(&self, cooldown_scale: f64) -> Box<dyn HealthStore> {
        Box::new(FileStore::open(self.dir.path()).with_cooldown_scale(cooldown_scale))
    }
    fn expire_leases(&self) {}
    fn dump(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(STATE_FILE)).unwrap_or_default()
    }
    fn items(&self) -> usize {
        let h = FileStore::open(self.dir.path())
            .load(T0)
            .expect("load")
            .health;
        h.models.len() + h.providers.len() + h.endpoints.len() + h.switch_log.len()
    }
}

struct Redis {
    server: RedisServer,
}

impl Redis {
    fn new() -> Redis {
        Redis {
            server: RedisServer::start(),
        }
    }

    fn keys(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let reply = redis_cmd(
                &self.server,
                &[
                    "SCAN",
                    &cursor,
                    "MATCH",
                    &format!("{PREFIX}*"),
                    "COUNT",
                    "1000",
                ],
            );
            let Resp::Array(parts) = reply else {
                panic!("SCAN: {reply:?}")
            };
            cursor = parts[0].as_str().expect("cursor").to_string();
            if let Resp::Array(keys) = &parts[1] {
                out.extend(keys.iter().filter_map(|k| k.as_str().map(str::to_string)));
            }
            if cursor == "0" {
                out.sort();
                return out;
            }
        }
    }
}

impl Backend for Redis {
    fn store(&self, cooldown_scale: f64) -> Box<dyn HealthStore> {
        Box::new(
            RedisStore::open(&self.server.url(), PREFIX)
                .expect("url parses")
                .with_cooldown_scale(cooldown_scale)
                // Parallel tests on two busy cores: never let a slow scheduler fail a test.
                .with_timeouts(Duration::from_secs(5), Duration::from_secs(5))
                .with_contention_wait(Duration::from_secs(30)),
        )
    }
    fn expire_leases(&self) {
        for key in self.keys().iter().filter(|k| k.contains(":lease:")) {
            assert_eq!(
                redis_cmd(&self.server, &["PEXPIRE", key, "1"]),
                Resp::Int(1)
            );
        }
        // The server expires them; wait until it has (bounded).
        for _ in 0..200 {
            if !self.keys().iter().any(|k| k.contains(":lease:")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("leases did not expire");
    }
    fn dump(&self) -> String {
        let mut out = String::new();
        for key in self.keys() {
            let kind = redis_cmd(&self.server, &["TYPE", &key]);
            let value = match kind.as_str() {
                Some("string") => redis_cmd(&self.server, &["GET", &key]),
                Some("list") => redis_cmd(&self.server, &["LRANGE", &key, "0", "-1"]),
                Some("set") => redis_cmd(&self.server, &["SMEMBERS", &key]),
                other => panic!("unexpected type {other:?} of {key}"),
            };
            out.push_str(&format!("{key} = {value:?}\n"));
            if let Resp::Bulk(b) = &value {
                out.push_str(&String::from_utf8_lossy(b));
                out.push('\n');
            }
            if let Resp::Array(items) = &value {
                for i in items {
                    out.push_str(i.as_str().unwrap_or_default());
                    out.push('\n');
                }
            }
        }
        out
    }
    fn items(&self) -> usize {
        self.keys().len()
    }
}

macro_rules! behaviours {
    ($($name:ident),* $(,)?) => {
        mod file { $( #[test] fn $name() { super::$name(&super::File::new()) } )* }
        mod redis { $( #[test] fn $name() { super::$name(&super::Redis::new()) } )* }
    };
}

mod capacity;
mod histories;
mod pace;

behaviours!(
    deltas_add_up,
    cooldowns_double_up_to_the_cap,
    concurrent_failures_of_one_outage_do_not_compound,
    probe_lease_has_one_claimant,
    probe_result_releases_the_lease,
    a_released_lease_lets_another_claim_at_once,
    lease_expires_by_itself,
    switch_log_is_bounded_and_the_counter_exact,
    management_edits_go_through_update,
    secrets_are_never_stored,
    records_are_bounded_per_scope,
    a_stated_reset_is_stored_and_reopens_then,
);

fn failure(at: u64, key: &str, scope: Scope, class: FailureClass, error: &str) -> Delta {
    Delta::Failure {
        at,
        key: key.to_string(),
        scope,
        class,
        error: error.to_string(),
    }
}

fn quota(at: u64, provider: &str) -> Delta {
    failure(
        at,
        provider,
        Scope::Provider,
        FailureClass::Quota,
        "402: quota",
    )
}

fn keys(provider: &str, model: &str) -> Keys {
    Keys {
        model: format!("{provider}/{model}"),
        provider: provider.to_string(),
        endpoint: format!("{provider}@http://127.0.0.1:9/v1"),
    }
}

fn success(at: u64, provider: &str, model: &str) -> Delta {
    Delta::Success {
        at,
        keys: keys(provider, model),
    }
}

fn switch(at: u64) -> Delta {
    Delta::Switch(SwitchEntry {
        at,
        from: "a/x".into(),
        to: "b/y".into(),
        reason: "quota".into(),
    })
}

fn load(b: &dyn Backend, now: u64) -> Health {
    b.store(1.0).load(now).expect("load").health
}

/// Runs `f` on `n` threads, each with its own store handle, released together.
fn together<T: Send>(
    b: &dyn Backend,
    n: usize,
    scale: f64,
    f: impl Fn(usize, &mut dyn HealthStore) -> T + Sync,
) -> Vec<T> {
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (barrier, f) = (&barrier, &f);
                let mut store = b.store(scale);
                s.spawn(move || {
                    barrier.wait();
                    f(i, store.as_mut())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    })
}

fn stated(provider: &str, class: FailureClass, at_ms: u64, spread_ms: u64, words: &str) -> Delta {
    Delta::Stated {
        key: provider.to_string(),
        scope: Scope::Provider,
        class,
        reset: StatedReset {
            at_ms,
            spread_ms,
            words: words.to_string(),
        },
    }
}

/// Issue 24: a quota failure that states its reset keeps the provider breaker open until
/// then plus the spread — what one process writes, another reads back, reset words redacted —
/// then one probe; a success forgets the statement. Records stored before it existed (no
/// `stated_*` fields) read as before.
fn a_stated_reset_is_stored_and_reopens_then(b: &dyn Backend) {
    let mut one = b.store(1.0);
    let reset = T0 + 3 * MIN;
    let words = format!("您的限额将在 2026-12-02 03:36:54 重置 {SECRET}");
    one.commit(
        &[
            quota(T0, "zai"),
            stated("zai", FailureClass::Quota, reset, 1234, &words),
        ],
        T0,
    )
    .expect("commit");
    let h = load(b, T0 + 1);
    let r = &h.providers["zai"];
    assert_eq!(r.cooldown_until, Some(reset + 1234), "not 30 minutes");
    assert_eq!(r.stated_reset, Some(reset));
    let kept = r.stated_words.as_deref().expect("words kept");
    assert!(
        kept.starts_with("您的限额将在 2026-12-02 03:36:54 重置"),
        "{kept}"
    );
    assert!(!b.dump().contains(SECRET), "{}", b.dump());
    // Another process's claim: cooling until the stated reset, then one claimant.
    let mut two = b.store(1.0);
    let target = probe("zai");
    assert_eq!(
        try_claim(two.as_mut(), &target, reset + 1233),
        Claim::Cooling
    );
    assert_eq!(
        try_claim(two.as_mut(), &target, reset + 1234),
        Claim::Claimed
    );
    assert_eq!(try_claim(one.as_mut(), &target, reset + 1235), Claim::Held);
    // The probe answers: closed, the statement forgotten.
    two.commit(&[success(reset + 2000, "zai", "glm")], reset + 2000)
        .expect("commit");
    let r = &load(b, reset + 2001).providers["zai"];
    assert_eq!(
        (r.cooldown_until, r.stated_reset, r.stated_words.as_deref()),
        (None, None, None)
    );
    // A rate limit's stated delay is only the least cooldown.
    one.commit(
        &[
            failure(T0, "kimi", Scope::Provider, FailureClass::RateLimit, "429"),
            stated(
                "kimi",
                FailureClass::RateLimit,
                T0 + 1000,
                0,
                "try again in 1s",
            ),
        ],
        T0,
    )
    .expect("commit");
    let r = &load(b, T0 + 1).providers["kimi"];
    assert_eq!(
        (r.cooldown_until, r.stated_reset),
        (Some(T0 + 5 * MIN), None)
    );
}

fn deltas_add_up(b: &dyn Backend) {
    let mut one = b.store(1.0);
    let mut two = b.store(1.0);
    one.commit(&[quota(T0, "p")], T0).expect("commit");
    two.commit(&[quota(T0 + 1, "p"), success(T0 + 2, "q", "m")], T0 + 2)
        .expect("commit");
    let merged = one
        .commit(
            &[
                failure(T0 + 3, "p/m", Scope::Model, FailureClass::Model, "404"),
                success(T0 + 4, "q", "m"),
            ],
            T0 + 4,
        )
        .expect("commit")
        .health;
    assert_eq!(merged, load(b, T0 + 5), "a commit returns what a load sees");
    assert_eq!(merged.providers["p"].total_failures, 2);
    assert_eq!(merged.models["p/m"].total_failures, 1);
    assert_eq!(merged.models["q/m"].total_successes, 2);
    assert_eq!(merged.models["q/m"].last_success_at, Some(T0 + 4));
    // A success creates the model's record only: provider and endpoint breakers that never
    // tripped stay absent.
    assert!(!merged.providers.contains_key("q"));
    assert!(merged.endpoints.is_empty());
    assert_eq!(
        merged.providers.keys().collect::<Vec<_>>(),
        ["p"],
        "nothing else was recorded"
    );
    // Nothing to commit writes nothing and still returns the health.
    assert_eq!(one.commit(&[], T0 + 6).expect("refresh").health, merged);

    // Many threads, many commits each: every count lands.
    together(b, 6, 1.0, |i, s| {
        for n in 0..10u64 {
            s.commit(
                &[
                    quota(T0 + 10 + n, "busy"),
                    success(T0 + 10 + n, "ok", &format!("m{i}")),
                ],
                T0 + 10 + n,
            )
            .expect("commit");
        }
    });
    let h = load(b, T0 + 100);
    assert_eq!(h.providers["busy"].total_failures, 60);
    for i in 0..6 {
        assert_eq!(h.models[&format!("ok/m{i}")].total_successes, 10);
    }
}

fn cooldowns_double_up_to_the_cap(b: &dyn Backend) {
    let mut s = b.store(1.0);
    let h = s.commit(&[quota(T0, "p")], T0).expect("commit").health;
    assert_eq!(h.providers["p"].cooldown_until, Some(T0 + 30 * MIN));
    assert_eq!(h.providers["p"].consecutive_failures, 1);
    // A probe after each cooldown fails again: 60 min, 2 h, 4 h, then the 6 h cap.
    let mut at = T0;
    let mut until = T0 + 30 * MIN;
    for (n, want) in [(2u32, 60), (3, 120), (4, 240), (5, 360), (6, 360)] {
        at = until;
        let h = s.commit(&[quota(at, "p")], at).expect("commit").health;
        until = at + want * MIN;
        assert_eq!(h.providers["p"].consecutive_failures, n, "failure {n}");
        assert_eq!(h.providers["p"].cooldown_until, Some(until), "failure {n}");
    }
    // A success closes the breaker; the next failure starts from the base again.
    let h = s
        .commit(&[success(until + 1, "p", "m")], until + 1)
        .expect("commit")
        .health;
    assert_eq!(h.providers["p"].consecutive_failures, 0);
    assert_eq!(h.providers["p"].cooldown_until, None);
    let h = s
        .commit(&[quota(until + 2, "p")], until + 2)
        .expect("commit")
        .health;
    assert_eq!(h.providers["p"].cooldown_until, Some(until + 2 + 30 * MIN));
    assert_eq!(h.providers["p"].total_failures, 7);
    assert_eq!(load(b, at).providers["p"], h.providers["p"]);
}

fn concurrent_failures_of_one_outage_do_not_compound(b: &dyn Backend) {
    together(b, 8, 1.0, |i, s| {
        s.commit(&[quota(T0 + i as u64, "p")], T0 + i as u64)
            .expect("commit");
    });
    let r = &load(b, T0 + 10).providers["p"];
    assert_eq!(r.total_failures, 8, "every failure is counted");
    assert_eq!(r.consecutive_failures, 1, "one outage");
    let first = r.cooldown_until.expect("cooling");
    assert!(
        (T0 + 30 * MIN..=T0 + 7 + 30 * MIN).contains(&first),
        "one base cooldown from the first failure: {first}"
    );
}

/// Opens `p` for 1.8 s (quota at scale 0.001) at T0.
fn open_breaker(b: &dyn Backend) {
    b.store(0.001)
        .commit(&[quota(T0, "p")], T0)
        .expect("commit");
}

const HALF_OPEN: u64 = T0 + 2_000;

fn probe_lease_has_one_claimant(b: &dyn Backend) {
    open_breaker(b);
    let mut s = b.store(0.001);
    assert_eq!(
        try_claim(&mut *s, &probe("provider:p"), T0 + 1),
        Claim::Cooling
    );
    assert_eq!(
        try_claim(&mut *s, &probe("provider:never-failed"), T0 + 1),
        Claim::NotNeeded
    );
    let claims = together(b, 8, 0.001, |_, s| {
        try_claim(&mut *s, &probe("provider:p"), HALF_OPEN)
    });
    assert_eq!(
        claims.iter().filter(|c| **c == Claim::Claimed).count(),
        1,
        "{claims:?}"
    );
    assert_eq!(
        claims.iter().filter(|c| **c == Claim::Held).count(),
        7,
        "{claims:?}"
    );
    // Everyone sees the lease, until when it runs (a server TTL reads back a tick lower).
    let until = load(b, HALF_OPEN).providers["p"]
        .lease_until
        .expect("leased");
    assert!(
        (HALF_OPEN + PROBE_LEASE_MS - 1_000..=HALF_OPEN + PROBE_LEASE_MS).contains(&until),
        "{until}"
    );
    let (claim, loaded) = s
        .claim_probe(&probe("provider:p"), HALF_OPEN + PROBE_LEASE_MS - 5_000)
        .expect("claim");
    assert_eq!(claim, Claim::Held, "the lease is exclusive while it runs");
    assert!(loaded.health.providers["p"].leased(HALF_OPEN + 1));
    // The claim of an endpoint or model breaker works the same way.
    s.commit(
        &[failure(
            T0,
            "p@x",
            Scope::Endpoint,
            FailureClass::Endpoint,
            "503",
        )],
        T0,
    )
    .expect("commit");
    let later = T0 + 10_000;
    let (claim, loaded) = s.claim_probe(&probe("endpoint:p@x"), later).expect("claim");
    assert_eq!(claim, Claim::Claimed);
    assert_eq!(
        loaded.health.endpoints["p@x"].lease_until,
        Some(later + PROBE_LEASE_MS),
        "the claimant is told exactly what it wrote"
    );
    assert_eq!(
        try_claim(&mut *s, &probe("endpoint:p@x"), later + 1),
        Claim::Held
    );
}

fn probe_result_releases_the_lease(b: &dyn Backend) {
    open_breaker(b);
    let mut s = b.store(0.001);
    assert_eq!(
        try_claim(&mut *s, &probe("provider:p"), HALF_OPEN),
        Claim::Claimed
    );
    // The probe fails: the breaker opens again (doubled), the lease is gone.
    let h = s
        .commit(&[quota(HALF_OPEN + 10, "p")], HALF_OPEN + 10)
        .expect("commit")
        .health;
    assert_eq!(h.providers["p"].lease_until, None);
    assert_eq!(h.providers["p"].consecutive_failures, 2);
    assert_eq!(
        h.providers["p"].cooldown_until,
        Some(HALF_OPEN + 10 + 3_600),
        "1.8 s doubled"
    );
    assert_eq!(
        try_claim(&mut *s, &probe("provider:p"), HALF_OPEN + 20),
        Claim::Cooling
    );
    // After that cooldown a new probe may go at once (no stale lease in the way) and succeeds.
    let again = HALF_OPEN + 10 + 3_600;
    assert_eq!(
        try_claim(&mut *b.store(0.001), &probe("provider:p"), again),
        Claim::Claimed
    );
    let h = s
        .commit(&[success(again + 5, "p", "m")], again + 5)
        .expect("commit")
        .health;
    assert_eq!(h.providers["p"].lease_until, None);
    assert_eq!(h.providers["p"].cooldown_until, None);
    assert_eq!(load(b, again + 6).providers["p"].lease_until, None);
    assert_eq!(
        try_claim(&mut *s, &probe("provider:p"), again + 7),
        Claim::NotNeeded,
        "closed breaker: no lease needed"
    );
}

fn a_released_lease_lets_another_claim_at_once(b: &dyn Backend) {
    open_breaker(b);
    let mut s = b.store(0.001);
    assert_eq!(
        try_claim(&mut *s, &probe("provider:p"), HALF_OPEN),
        Claim::Claimed
    );
    // The probe failed in another scope (a connection error on the endpoint): the provider's
    // breaker is still half-open and its lease is handed back, not left to expire.
    let h = s
        .commit(
            &[Delta::Release {
                target: probe("provider:p"),
            }],
            HALF_OPEN + 10,
        )
        .expect("commit")
        .health;
    assert_eq!(h.providers["p"].lease_until, None);
    assert_eq!(load(b, HALF_OPEN + 11).providers["p"].lease_until, None);
    assert_eq!(
        try_claim(&mut *b.store(0.001), &probe("provider:p"), HALF_OPEN + 20),
        Claim::Claimed,
        "the next run may probe at once"
    );
}

fn lease_expires_by_itself(b: &dyn Backend) {
    open_breaker(b);
    let mut holder = b.store(0.001);
    assert_eq!(
        try_claim(&mut *holder, &probe("provider:p"), HALF_OPEN),
        Claim::Claimed
    );
    // The holder dies without reporting. Once its lease has run out, someone else may probe.
    drop(holder);
    b.expire_leases();
    let expired = HALF_OPEN + PROBE_LEASE_MS;
    let mut other = b.store(0.001);
    assert!(!load(b, expired).providers["p"].leased(expired));
    let (claim, loaded) = other
        .claim_probe(&probe("provider:p"), expired)
        .expect("claim");
    assert_eq!(claim, Claim::Claimed);
    assert_eq!(
        loaded.health.providers["p"].lease_until,
        Some(expired + PROBE_LEASE_MS)
    );
}

fn switch_log_is_bounded_and_the_counter_exact(b: &dyn Backend) {
    let mut s = b.store(1.0);
    s.commit(&(0..12).map(|i| switch(T0 + i)).collect::<Vec<_>>(), T0)
        .expect("commit");
    together(b, 4, 1.0, |i, s| {
        for n in 0..5u64 {
            let at = T0 + 100 + i as u64 * 10 + n;
            s.commit(&[switch(at)], at).expect("commit");
        }
    });
    let h = s
        .commit(&[switch(T0 + 1_000)], T0 + 1_000)
        .expect("commit")
        .health;
    assert_eq!(h.switches, 12 + 20 + 1, "every switch counted");
    assert_eq!(h.switch_log.len(), SWITCH_LOG_LEN);
    assert_eq!(h.switch_log.last().map(|e| e.at), Some(T0 + 1_000));
    assert!(
        h.switch_log.iter().all(|e| e.at >= T0 + 100),
        "the oldest went first: {:?}",
        h.switch_log
    );
    assert!(h.switch_log.windows(2).all(|w| w[0].at <= w[1].at));
    assert_eq!(load(b, T0 + 1_001), h);
}

fn management_edits_go_through_update(b: &dyn Backend) {
    let mut s = b.store(1.0);
    s.commit(
        &[
            quota(T0, "p"),
            failure(T0, "p/m", Scope::Model, FailureClass::Model, "404"),
            failure(
                T0,
                "p@http://h/v1",
                Scope::Endpoint,
                FailureClass::Endpoint,
                "503",
            ),
            success(T0, "q", "n"),
            switch(T0),
        ],
        T0,
    )
    .expect("commit");
    // --disable
    let h = s
        .update(T0 + 1, &mut |h| {
            h.models.entry("q/n".into()).or_default().disabled = true
        })
        .expect("update")
        .health;
    assert!(h.models["q/n"].disabled);
    assert!(load(b, T0 + 1).models["q/n"].disabled);
    // --reactivate p/m closes its model, provider and endpoint breakers, history kept.
    let mut changed = 0;
    let h = s
        .update(T0 + 2, &mut |h| {
            changed = pi_ccswitch_run::manage::reactivate(h, "p/m", &[], T0 + 2)
        })
        .expect("update")
        .health;
    assert_eq!(changed, 3);
    for r in [
        &h.models["p/m"],
        &h.providers["p"],
        &h.endpoints["p@http://h/v1"],
    ] {
        assert_eq!(r.cooldown_until, None);
        assert_eq!(r.consecutive_failures, 0);
        assert_eq!(r.total_failures, 1);
    }
    assert_eq!(load(b, T0 + 3), h);
    // --reset MODEL forgets the model's record only.
    let h = s
        .update(T0 + 4, &mut |h| {
            h.models.remove("p/m");
        })
        .expect("update")
        .health;
    assert!(!h.models.contains_key("p/m"));
    assert!(h.providers.contains_key("p"));
    assert_eq!(load(b, T0 + 4), h);
    // A lease cleared by an edit is gone for everyone.
    s.commit(&[quota(T0 + 5, "r")], T0 + 5).expect("commit");
    let late = T0 + 5 + 31 * MIN;
    assert_eq!(
        try_claim(&mut *s, &probe("provider:r"), late),
        Claim::Claimed
    );
    let _ = s
        .update(late, &mut |h| {
            pi_ccswitch_run::manage::reactivate(h, "all", &[], late);
        })
        .expect("update");
    assert_eq!(load(b, late).providers["r"].lease_until, None);
    // --reset all
    let h = s
        .update(late + 1, &mut |h| *h = Health::default())
        .expect("update")
        .health;
    assert_eq!(h, Health::default());
    assert_eq!(load(b, late + 2), Health::default());
    assert_eq!(b.items(), 0, "nothing left under the prefix");
    // And it works from there.
    let h = s
        .commit(&[switch(late + 3)], late + 3)
        .expect("commit")
        .health;
    assert_eq!(h.switches, 1);
}

fn secrets_are_never_stored(b: &dyn Backend) {
    let mut s = b.store(1.0);
    let error = format!("401: bad key {SECRET}; Authorization: Bearer {BEARER}");
    s.commit(
        &[
            failure(T0, "p", Scope::Provider, FailureClass::Auth, &error),
            failure(T0, "p/m", Scope::Model, FailureClass::Unknown, &error),
            Delta::Switch(SwitchEntry {
                at: T0,
                from: "p/m".into(),
                to: "q/m".into(),
                reason: format!("auth: Bearer {BEARER}"),
            }),
        ],
        T0,
    )
    .expect("commit");
    s.update(T0 + 1, &mut |h| {
        h.models.entry("q/m".into()).or_default().last_error = Some(format!("key={SECRET}"));
    })
    .expect("update");
    let stored = b.dump();
    assert!(stored.contains("[redacted]"), "{stored}");
    for secret in [SECRET, BEARER] {
        let chars: Vec<char> = secret.chars().collect();
        for w in chars.windows(8) {
            let w: String = w.iter().collect();
            assert!(!stored.contains(&w), "{w:?} stored:\n{stored}");
        }
    }
    let h = load(b, T0 + 2);
    assert_eq!(
        h.providers["p"].last_error.as_deref(),
        Some("401: bad key [redacted]; Authorization: [redacted]")
    );
}

fn records_are_bounded_per_scope(b: &dyn Backend) {
    let mut s = b.store(1.0);
    let extra = 25;
    let n = MAX_RECORDS_PER_SCOPE + extra;
    let deltas: Vec<Delta> = (0..n)
        .map(|i| {
            failure(
                T0 + i as u64,
                &format!("p/m{i:05}"),
                Scope::Model,
                FailureClass::Model,
                "404",
            )
        })
        .collect();
    let h = s.commit(&deltas, T0 + n as u64).expect("commit").health;
    assert_eq!(h.models.len(), MAX_RECORDS_PER_SCOPE);
    // All are cooling, so the ones idle longest went first.
    assert!(!h.models.contains_key("p/m00000"));
    assert!(!h.models.contains_key(&format!("p/m{:05}", extra - 1)));
    assert!(h.models.contains_key(&format!("p/m{extra:05}")));
    assert_eq!(
        load(b, T0 + n as u64 + 1).models.len(),
        MAX_RECORDS_PER_SCOPE
    );
    // Growing one by one stays bounded too.
    for i in 0..5u64 {
        let at = T0 + n as u64 + 10 + i;
        let h = s
            .commit(
                &[failure(
                    at,
                    &format!("q/new{i}"),
                    Scope::Model,
                    FailureClass::Model,
                    "404",
                )],
                at,
            )
            .expect("commit")
            .health;
        assert_eq!(h.models.len(), MAX_RECORDS_PER_SCOPE, "commit {i}");
        assert!(h.models.contains_key(&format!("q/new{i}")));
    }
    assert_eq!(
        load(b, T0 + 2 * n as u64).models.len(),
        MAX_RECORDS_PER_SCOPE
    );
}
