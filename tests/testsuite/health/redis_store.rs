//! The Redis store on its own, against a real `redis-server`: URLs and credentials, a dead or
//! wedged server (bounded cost), an outage and recovery, `--doctor`'s checks, and 16 processes
//! committing at once. What every store must do is in `backends.rs`.
//!
//! The multi-process test re-runs this test binary as worker processes ([`worker_process`]):
//! the worker is an `#[ignore]`d test that takes its orders from the environment.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::redis::{RedisServer, Resp, redis_cmd};
use crate::support::{BlackHole, closed_port, worker_order, worker_process};
use pi_ccswitch_run::failover::classify::{FailureClass, Scope};
use pi_ccswitch_run::health::store::{HealthStore, RedisStore, StoreError};
use pi_ccswitch_run::health::{Delta, Keys, SWITCH_LOG_LEN, SwitchEntry};

const T0: u64 = 1_700_000_000_000;
const PREFIX: &str = "t:";

const ENV_MODE: &str = "PCR_REDIS_STORE_WORKER";
const ENV_URL: &str = "PCR_REDIS_STORE_URL";
const ENV_ID: &str = "PCR_REDIS_STORE_ID";
const STRESS_PROCESSES: usize = 16;
const STRESS_COMMITS: u64 = 50;
const STRESS_SUCCESS_EVERY: u64 = 5;

/// What a dead Redis may add to one operation (the product's promise).
const DEAD_BUDGET: Duration = Duration::from_millis(250);

fn quota(at: u64, provider: &str) -> Delta {
    Delta::Failure {
        at,
        key: provider.to_string(),
        scope: Scope::Provider,
        class: FailureClass::Quota,
        error: "402: quota".into(),
    }
}

fn store(url: &str) -> RedisStore {
    RedisStore::open(url, PREFIX).expect("url parses")
}

fn unavailable(e: StoreError) -> String {
    match e {
        StoreError::Unavailable { .. } => e.to_string(),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn location_and_errors_never_show_the_password() {
    let server = RedisServer::start();
    let pw = server.password().to_string();
    let s = store(&server.url());
    assert_eq!(
        s.location(),
        format!(
            "redis://:***@127.0.0.1:{}/0 (prefix {PREFIX})",
            server.port()
        )
    );
    assert!(!format!("{:?}", s.url()).contains(&pw));
    let s = store(&server.unix_url());
    assert_eq!(
        s.location(),
        format!(
            "unix://:***@{} (prefix {PREFIX})",
            server.socket_path().display()
        )
    );
    // A wrong password: refused, said so, and the (wrong) password is not repeated.
    let wrong = format!("redis://:{pw}x@127.0.0.1:{}/0", server.port());
    let err = unavailable(store(&wrong).load(T0).expect_err("wrong password"));
    assert!(err.contains("login refused: WRONGPASS"), "{err}");
    assert!(!err.contains(&pw), "{err}");
    // No password at all: the server wants one.
    let none = format!("redis://127.0.0.1:{}/0", server.port());
    let err = unavailable(store(&none).load(T0).expect_err("no password"));
    assert!(err.contains("login refused: NOAUTH"), "{err}");
    // Parse errors name the part, not the text.
    let bad = format!("redis://:{pw}@127.0.0.1:99999/0");
    let e = RedisStore::open(&bad, PREFIX)
        .err()
        .expect("bad port")
        .to_string();
    assert_eq!(e, "the port is not a number from 1 to 65535");
}

#[test]
fn every_url_form_reaches_the_same_data() {
    let server = RedisServer::start();
    let pw = server.password();
    let forms = [
        server.url(),
        server.url_with_user(),
        server.unix_url(),
        format!("unix://{}?password={pw}", server.socket_path().display()),
        format!("redis://127.0.0.1:{}?password={pw}&db=0", server.port()),
    ];
    for (i, url) in forms.iter().enumerate() {
        let mut s = store(url);
        let h = s
            .commit(&[quota(T0 + i as u64, "p")], T0 + i as u64)
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .health;
        assert_eq!(h.providers["p"].total_failures, i as u64 + 1, "{url}");
    }
    // Another database is another store.
    let mut other = store(&format!("redis://:{pw}@127.0.0.1:{}/3", server.port()));
    assert!(other.load(T0).expect("load").health.providers.is_empty());
    other.commit(&[quota(T0, "p")], T0).expect("commit");
    assert_eq!(
        redis_cmd(&server, &["EXISTS", &format!("{PREFIX}v1:rec:provider:p")]),
        Resp::Int(1)
    );
}

#[test]
fn nothing_connects_before_first_use_and_a_dead_server_costs_little() {
    // Closed port: refused at once.
    let port = closed_port();
    let mut s = store(&format!("redis://:pw@127.0.0.1:{port}/0"));
    let t = Instant::now();
    let err = unavailable(s.load(T0).expect_err("refused"));
    let refused = t.elapsed();
    assert!(err.contains("cannot connect"), "{err}");
    assert!(refused < DEAD_BUDGET, "{refused:?}");

    // A listener that accepts and never answers.
    let hole = BlackHole::start();
    let mut s = store(&hole.redis_url());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(hole.accepted(), 0, "open() does not connect");
    let t = Instant::now();
    let err = unavailable(s.commit(&[quota(T0, "p")], T0).expect_err("no answer"));
    let wedged = t.elapsed();
    assert_eq!(hole.wait_accepted(1, Duration::from_secs(1)), 1);
    assert!(err.contains("cannot connect"), "{err}");
    assert!(wedged < DEAD_BUDGET, "{wedged:?}");
    eprintln!(
        "dead redis: refused in {:.1} ms, black hole gave up after {:.1} ms",
        refused.as_secs_f64() * 1000.0,
        wedged.as_secs_f64() * 1000.0
    );
    // Every later use tries again (the health thread decides how often).
    let t = Instant::now();
    assert!(s.load(T0).is_err());
    assert!(t.elapsed() < DEAD_BUDGET);
}

#[test]
fn an_outage_fails_fast_and_the_store_recovers_after_a_restart() {
    let mut server = RedisServer::start();
    let mut s = store(&server.url());
    s.commit(&[quota(T0, "p")], T0).expect("commit");
    server.kill();
    let t = Instant::now();
    let err = unavailable(s.commit(&[quota(T0 + 1, "p")], T0 + 1).expect_err("down"));
    assert!(t.elapsed() < DEAD_BUDGET, "{:?}", t.elapsed());
    assert!(
        err.contains("connection lost") || err.contains("cannot connect"),
        "{err}"
    );
    server.restart();
    // A new, empty server on the same address: the store reconnects by itself.
    let h = s
        .commit(&[quota(T0 + 2, "p")], T0 + 2)
        .expect("after restart")
        .health;
    assert_eq!(h.providers["p"].total_failures, 1);

    // A restart while the store is idle goes unnoticed: a connection idle past the idle check
    // is retried once on a fresh one if its first command finds it lost. (An idle check of
    // zero makes any earlier use idle, so no real second has to pass.)
    let mut idle = store(&server.url()).with_idle_check(Duration::ZERO);
    idle.load(T0 + 2).expect("load");
    server.restart();
    let h = idle
        .commit(&[quota(T0 + 3, "p")], T0 + 3)
        .expect("after an idle restart")
        .health;
    assert_eq!(h.providers["p"].total_failures, 1);
    drop(idle);
    // So is a server that closes idle clients, with the default idle check (a server's
    // `timeout` is whole seconds, at least the check's 1 s). That timeout is the real server's
    // own timer: wait until it has closed the store's connection.
    assert_eq!(
        redis_cmd(&server, &["CONFIG", "SET", "timeout", "1"]),
        Resp::ok()
    );
    let mut s = store(&server.url());
    s.load(T0 + 4).expect("load");
    wait_for_only_this_client(&server);
    let h = s
        .commit(&[quota(T0 + 5, "p")], T0 + 5)
        .expect("after an idle timeout")
        .health;
    assert_eq!(h.providers["p"].total_failures, 2);
}

/// Polls `CLIENT LIST` until the only connection left is the one asking (the server has closed
/// every other), within 10 s.
#[track_caller]
fn wait_for_only_this_client(server: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let list = redis_cmd(server, &["CLIENT", "LIST"]);
        let text = list.as_str().expect("CLIENT LIST is text").to_string();
        // This poll's own connection is the one running `client|list`.
        if text.lines().all(|l| l.contains("cmd=client")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server kept other clients:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn doctor_checks_connection_login_round_trip_and_version() {
    let server = RedisServer::start();
    let mut s = store(&server.url());
    s.commit(&[quota(T0, "p")], T0).expect("commit");
    let checks = s.diagnose(T0);
    let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "health store",
            "redis connection",
            "redis auth",
            "redis round trip",
            "redis version",
            "redis health"
        ]
    );
    assert!(checks.iter().all(|c| c.ok), "{checks:?}");
    assert!(
        checks[1]
            .detail
            .starts_with(&format!("127.0.0.1:{} connected in ", server.port()))
    );
    assert_eq!(checks[2].detail, "password accepted");
    assert!(checks[3].detail.starts_with("PING ") && checks[3].detail.ends_with(" ms"));
    assert!(checks[4].detail.starts_with("7.") || checks[4].detail.starts_with('6'));
    assert!(
        checks[4].detail.ends_with("(standalone)"),
        "{}",
        checks[4].detail
    );
    assert_eq!(
        checks[5].detail,
        "0 model, 1 provider and 0 endpoint records, 0 switches"
    );

    let wrong = format!("redis://:nope1234@127.0.0.1:{}/0", server.port());
    let checks = store(&wrong).diagnose(T0);
    assert_eq!(checks.len(), 3, "{checks:?}");
    assert!(checks[1].ok);
    assert!(!checks[2].ok);
    assert!(
        checks[2]
            .detail
            .starts_with("the server refused the login (WRONGPASS"),
        "{}",
        checks[2].detail
    );
    assert!(!checks.iter().any(|c| c.detail.contains("nope1234")));

    let dead = format!("redis://127.0.0.1:{}/0", closed_port());
    let checks = store(&dead).diagnose(T0);
    assert_eq!(checks.len(), 2);
    assert!(!checks[1].ok);
    assert!(checks[1].detail.starts_with("cannot reach 127.0.0.1:"));
}

#[test]
fn garbage_under_the_prefix_is_survived() {
    let server = RedisServer::start();
    let mut s = store(&server.url());
    for (k, v) in [
        ("t:v1:rec:provider:p", "{not json"),
        ("t:v1:switches", "many"),
        ("t:v1:lease:provider:p", "x"),
    ] {
        assert_eq!(redis_cmd(&server, &["SET", k, v]), Resp::ok());
    }
    redis_cmd(&server, &["SADD", "t:v1:idx:provider", "p", "ghost"]);
    redis_cmd(&server, &["HSET", "t:v1:rec:model:a/b", "f", "v"]);
    redis_cmd(&server, &["SADD", "t:v1:idx:model", "a/b"]);
    redis_cmd(&server, &["RPUSH", "t:v1:switch_log", "junk"]);
    let h = s.load(T0).expect("load").health;
    assert!(h.providers.is_empty() && h.models.is_empty(), "{h:?}");
    assert_eq!(h.switches, 0);
    assert!(h.switch_log.is_empty());
    // Unreadable index entries are cleaned up; writes replace what is not ours.
    assert_eq!(
        redis_cmd(&server, &["SCARD", "t:v1:idx:provider"]),
        Resp::Int(0)
    );
    let h = s
        .commit(
            &[
                quota(T0, "p"),
                Delta::Success {
                    at: T0,
                    keys: Keys {
                        model: "a/b".into(),
                        provider: "a".into(),
                        endpoint: "a@x".into(),
                    },
                },
            ],
            T0,
        )
        .expect("commit")
        .health;
    assert_eq!(h.providers["p"].total_failures, 1);
    assert_eq!(h.models["a/b"].total_successes, 1);
}

/// Worker body for the stress test: 50 commits of failures, switches and some successes.
#[test]
#[ignore = "a worker process of stress_16_processes_lose_no_count"]
fn stress_worker() {
    assert_eq!(worker_order(ENV_MODE), "stress");
    let url = worker_order(ENV_URL);
    let id: u64 = worker_order(ENV_ID).parse().expect("id");
    let mut s = store(&url)
        .with_timeouts(Duration::from_secs(5), Duration::from_secs(5))
        .with_contention_wait(Duration::from_secs(60));
    let mut sink = Vec::new();
    std::io::stdin()
        .read_to_end(&mut sink)
        .expect("start signal");
    for i in 0..STRESS_COMMITS {
        let at = T0 + i;
        let mut deltas = vec![
            quota(at, "p"),
            Delta::Failure {
                at,
                key: format!("p/w{id}"),
                scope: Scope::Model,
                class: FailureClass::Model,
                error: "404".into(),
            },
            Delta::Switch(SwitchEntry {
                at,
                from: format!("p/w{id}"),
                to: "q/m".into(),
                reason: "quota".into(),
            }),
        ];
        if i % STRESS_SUCCESS_EVERY == 0 {
            deltas.push(Delta::Success {
                at,
                keys: Keys {
                    model: "p/m".into(),
                    provider: "p".into(),
                    endpoint: "p@x".into(),
                },
            });
        }
        s.commit(&deltas, at)
            .unwrap_or_else(|e| panic!("worker {id} commit {i}: {e}"));
    }
    println!("\nRETRIES={}", s.retries());
}

#[test]
fn stress_16_processes_lose_no_count() {
    let server = RedisServer::start();
    let started = Instant::now();
    let children: Vec<_> = (0..STRESS_PROCESSES)
        .map(|id| {
            worker_process(module_path!(), "stress_worker")
                .env(ENV_MODE, "stress")
                .env(ENV_URL, server.url())
                .env(ENV_ID, id.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    let mut children = children;
    for c in &mut children {
        drop(c.stdin.take());
    }
    let mut retries = 0u64;
    for (id, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().expect("worker");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker {id}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        retries += stdout
            .lines()
            .find_map(|l| l.strip_prefix("RETRIES="))
            .and_then(|n| n.parse::<u64>().ok())
            .expect("worker reports its retries");
    }
    let elapsed = started.elapsed();
    let n = STRESS_PROCESSES as u64;
    eprintln!(
        "redis stress: {STRESS_PROCESSES} processes x {STRESS_COMMITS} commits = {} commits in {} ms, {retries} transaction retries",
        n * STRESS_COMMITS,
        elapsed.as_millis()
    );
    let h = store(&server.url()).load(T0 + 10_000).expect("load").health;
    assert_eq!(h.providers["p"].total_failures, n * STRESS_COMMITS);
    assert_eq!(h.switches, n * STRESS_COMMITS);
    assert_eq!(h.switch_log.len(), SWITCH_LOG_LEN);
    assert_eq!(
        h.models["p/m"].total_successes,
        n * STRESS_COMMITS / STRESS_SUCCESS_EVERY
    );
    for id in 0..STRESS_PROCESSES {
        let r = &h.models[&format!("p/w{id}")];
        assert_eq!(r.total_failures, STRESS_COMMITS, "worker {id}");
        assert_eq!(r.consecutive_failures, 1, "worker {id}: one outage");
    }
    assert_eq!(
        redis_cmd(&server, &["LLEN", "t:v1:switch_log"]),
        Resp::Int(SWITCH_LOG_LEN as i64)
    );
}
