//! Health store costs, in one run: the latency of one health commit (a failure and a switch,
//! applied on top of what is stored and read back) for the state file and for Redis over TCP
//! and a unix socket; and the wall time a dead Redis adds to a real run through Pi 0.84.4 —
//! a closed port and a black hole (accepts, never answers) — against the same run with no
//! Redis (the state file), runs interleaved so drift hits every column alike.
//!
//! Run: `cargo bench --bench health` (add `-- N` for N runs per column, default 7).

#![allow(clippy::disallowed_methods)]

#[path = "../tests/testsuite/support/blackhole.rs"]
mod blackhole;
#[path = "../tests/testsuite/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/testsuite/support/pi_env.rs"]
mod pi_env;
#[path = "../tests/testsuite/support/redis.rs"]
mod redis;

use std::process::Command;
use std::time::Instant;

use fake_llm::{FakeLlm, ModelSpec, ProviderSpec, closed_port, write_models_json};
use pi_ccswitch_run::failover::classify::{FailureClass, Scope};
use pi_ccswitch_run::health::store::{FileStore, HealthStore, RedisStore};
use pi_ccswitch_run::health::{Delta, SwitchEntry};

const BIN: &str = env!("CARGO_BIN_EXE_pi-ccswitch-run");
const T0: u64 = 1_700_000_000_000;
const COMMITS: usize = 500;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

/// p50 and p99 of `COMMITS` commits, in ms.
fn commit_latency(store: &mut dyn HealthStore) -> (f64, f64) {
    let mut ms = Vec::with_capacity(COMMITS);
    for i in 0..COMMITS as u64 {
        let at = T0 + i * 1000;
        let deltas = [
            Delta::Failure {
                at,
                key: format!("p{}", i % 7),
                scope: Scope::Provider,
                class: FailureClass::RateLimit,
                error: "429: slow down".into(),
            },
            Delta::Switch(SwitchEntry {
                at,
                from: format!("p{}/m", i % 7),
                to: "q/m".into(),
                reason: "rate_limit".into(),
            }),
        ];
        let t = Instant::now();
        store.commit(&deltas, at).expect("commit");
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    (percentile(&ms, 0.5), percentile(&ms, 0.99))
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(7);

    let server = redis::RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let rows = [
        (
            "state file (lock, fsync, rename)",
            commit_latency(&mut FileStore::open(dir.path())),
        ),
        (
            "Redis, TCP loopback",
            commit_latency(&mut RedisStore::open(&server.url(), "bench-tcp:").expect("url")),
        ),
        (
            "Redis, unix socket",
            commit_latency(&mut RedisStore::open(&server.unix_url(), "bench-unix:").expect("url")),
        ),
    ];
    println!("Health commit latency ({COMMITS} commits of a failure and a switch, read back)\n");
    println!("| store | p50 | p99 |");
    println!("|---|---|---|");
    for (name, (p50, p99)) in rows {
        println!("| {name} | {p50:.2} ms | {p99:.2} ms |");
    }

    let hole = blackhole::BlackHole::start();
    let closed = format!("redis://:pw@127.0.0.1:{}/0", closed_port());
    println!(
        "\nFirst store operation against a dead Redis: time until it gives up (median of {n})\n"
    );
    println!("| address | gives up after |");
    println!("|---|---|");
    for (name, url) in [("closed port", &closed), ("black hole", &hole.redis_url())] {
        let times: Vec<f64> = (0..n)
            .map(|_| {
                let mut store = RedisStore::open(url, "bench:").expect("url");
                let t = Instant::now();
                assert!(store.load(T0).is_err(), "a dead Redis cannot answer");
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        println!("| {name} | {:.1} ms |", median(times));
    }

    let pi = pi_env::pi(pi_env::PI_MIN);
    let agent = tempfile::tempdir().expect("temp dir");
    let llm = FakeLlm::start();
    write_models_json(
        agent.path(),
        &llm,
        &[ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m")])],
    );
    let columns: [(&str, Option<String>); 4] = [
        ("no Redis (state file)", None),
        ("live Redis (TCP loopback)", Some(server.url())),
        ("dead Redis: closed port", Some(closed)),
        ("dead Redis: black hole", Some(hole.redis_url())),
    ];
    let run = |url: &Option<String>| -> f64 {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "--no-tools",
            "--provider",
            "fake-a",
            "--model",
            "m",
            "Say hello.",
        ])
        .env_clear()
        .env("PATH", pi.path_env())
        .env("PI_BIN", &pi.pi_bin)
        .env("PI_CODING_AGENT_DIR", agent.path())
        .env("HOME", agent.path())
        .current_dir(agent.path());
        if let Some(u) = url {
            cmd.args(["--health-url", u]);
        }
        let t = Instant::now();
        let out = cmd.output().expect("run the runner");
        let took = t.elapsed();
        assert!(out.status.success(), "run failed: {out:?}");
        let warned = String::from_utf8_lossy(&out.stderr).contains("health is not shared this run");
        let live = url.as_deref() == Some(server.url().as_str());
        assert_eq!(
            warned,
            url.is_some() && !live,
            "a dead Redis warns, a live one does not"
        );
        took.as_secs_f64() * 1000.0
    };
    run(&None); // warm-up: Node's compile cache, the page cache
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); columns.len()];
    for _ in 0..n {
        for (i, (_, url)) in columns.iter().enumerate() {
            times[i].push(run(url));
        }
    }
    let fastest: Vec<f64> = times
        .iter()
        .map(|t| t.iter().copied().fold(f64::INFINITY, f64::min))
        .collect();
    let medians: Vec<f64> = times.into_iter().map(median).collect();
    println!(
        "\nWall time of one run through Pi {} with a dead Redis ({n} runs each, interleaved)\n",
        pi.version
    );
    println!("| health store | median | added (median) | fastest | added (fastest) |");
    println!("|---|---|---|---|---|");
    for (i, (name, _)) in columns.iter().enumerate() {
        println!(
            "| {name} | {:.0} ms | {:+.0} ms | {:.0} ms | {:+.0} ms |",
            medians[i],
            medians[i] - medians[0],
            fastest[i],
            fastest[i] - fastest[0]
        );
    }
}
