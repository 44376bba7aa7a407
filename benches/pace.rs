//! Slow is not dead (issue 31's benchmarks): watchdogs from each provider's pace, a deadline
//! shared among the candidates, a primary back as soon as it recovers. Through real Pi 0.84.4
//! and the fault server on loopback, with the runner's default settings (no `CCSWITCH_*`
//! variables), every ratio against a baseline measured in the same run:
//!
//! 1. A hanging primary: 24 jobs, `--jobs 4`, ~1 s answers; 1 request in 8 to the primary is
//!    silent and 1 in 8 stalls after 10 tokens (then 150 s of nothing); a healthy backup. Wall
//!    time against the same batch with no slow requests (target ≤ 2×), every job answered.
//! 2. A primary that answers every request steadily 12 s after it (12 jobs, `--jobs 4`): every
//!    job answered by the primary, none cut by a watchdog; wall time against the same batch
//!    with the watchdogs out of the way (both ceilings at 10 minutes).
//! 3. A silent primary, `--timeout-ms 20000`, a healthy backup, single runs one after the
//!    other on one agent dir: exit 0 from the backup well inside the deadline, and the second
//!    run goes to the backup without waiting; times against a run whose primary is healthy.
//! 4. The primary down (503) for the first 20 s of a 60-job batch (`--jobs 2`, ~1.2 s answers
//!    as in the issue): the share of the requests sent 10 s or more after it recovered that went
//!    to it (target ≥ 80%), and when it was sent requests while it was down (at most one per
//!    cooldown, besides the jobs in flight when it went down).
//!
//! With `PACEBENCH_PREV_BIN` set to a release binary from before issue 31, cases 1, 3 and 4
//! also run it on the same setups — the "today" of the issue.
//!
//! Run: `cargo bench --bench pace` (`-- 1 3` for some cases only).

#![allow(clippy::disallowed_methods, clippy::print_stdout)]

#[path = "../tests/testsuite/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/testsuite/support/pi_env.rs"]
mod pi_env;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_llm::{Behaviour, FakeLlm, ModelSpec, ProviderSpec, write_models_json};

const BIN: &str = env!("CARGO_BIN_EXE_pi-ccswitch-run");
/// Every run is killed past this (a bench must end).
const RUN_LIMIT: Duration = Duration::from_secs(400);
/// The primary (its route on the fault server) and the backup.
const PRIMARY: (&str, &str) = ("glm", "a");
const BACKUP: (&str, &str) = ("ds", "b");

/// A ~1 s answer: the first token at once, 20 tokens 50 ms apart.
fn one_second() -> Behaviour {
    Behaviour::Paced {
        first_ms: 50,
        tokens: 20,
        gap_ms: 50,
    }
}

/// A fresh fault server: the primary answering `primary` (a whole cycle), the backup ~1 s.
fn server(primary: Vec<Behaviour>) -> FakeLlm {
    let llm = FakeLlm::start();
    llm.set_hang_limit(Duration::from_secs(150));
    llm.script_cycle(PRIMARY.1, "*", primary);
    llm.script(BACKUP.1, "*", vec![one_second()]);
    llm
}

/// A fresh (cold) agent dir with both providers on `llm`.
fn agent_dir(llm: &FakeLlm) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("pccr-pacebench-")
        .tempdir()
        .expect("temp dir");
    let specs = [PRIMARY, BACKUP]
        .map(|(name, route)| ProviderSpec::new(name, route, vec![ModelSpec::text("m")]));
    write_models_json(dir.path(), llm, &specs);
    dir
}

struct Proc {
    stdout: String,
    stderr: String,
    code: Option<i32>,
    wall: Duration,
}

/// Runs `bin` with `args` in a fresh environment rooted at `agent_dir`, feeding `stdin`.
fn run(bin: &Path, agent_dir: &Path, args: &[String], env: &[(&str, &str)], stdin: &str) -> Proc {
    let pi = pi_env::pi(pi_env::PI_MIN);
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_clear()
        .env("PATH", pi.path_env())
        .env("PI_BIN", &pi.pi_bin)
        .env("PI_CODING_AGENT_DIR", agent_dir)
        .env("HOME", agent_dir)
        .env("LANG", "C.UTF-8")
        .current_dir(agent_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let mut child = cmd.spawn().expect("spawn the runner");
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(data.as_bytes());
    });
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t.elapsed() > RUN_LIMIT {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let wall = t.elapsed();
    let _ = writer.join();
    Proc {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        code: status.code(),
        wall,
    }
}

fn jobs_input(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"id\":\"doc-{i}\",\"prompt\":\"Summarise document {i}.\"}}\n"))
        .collect()
}

/// Results answered, and of them by the primary.
fn answered(stdout: &str) -> (usize, usize) {
    let ok: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["ok"] == true)
        .collect();
    let primary = ok
        .iter()
        .filter(|v| v["model"]["provider"] == PRIMARY.0)
        .count();
    (ok.len(), primary)
}

/// One batch of `jobs` jobs from the primary on `llm`, cold.
fn batch(bin: &Path, llm: &FakeLlm, jobs: usize, workers: usize, env: &[(&str, &str)]) -> Proc {
    let dir = agent_dir(llm);
    let argv: Vec<String> = [
        "--batch",
        "-",
        "--no-tools",
        "--jobs",
        &workers.to_string(),
        "--model",
        &format!("{}/m", PRIMARY.0),
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    run(bin, dir.path(), &argv, env, &jobs_input(jobs))
}

/// The summary's "attempts cut for silence" line, if any.
fn silence_line(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| {
            l.find("attempts cut for silence")
                .map(|at| l[at..].to_string())
        })
        .unwrap_or_else(|| "none cut for silence".to_string())
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

struct Prev {
    bin: PathBuf,
    label: String,
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let wanted = |n: &str| args.is_empty() || args.iter().any(|a| a == n);
    let pi = pi_env::pi(pi_env::PI_MIN);
    let bin = PathBuf::from(BIN);
    let prev = std::env::var_os("PACEBENCH_PREV_BIN").map(|p| {
        let bin = PathBuf::from(p);
        let out = Command::new(&bin)
            .arg("--version")
            .output()
            .expect("previous binary");
        Prev {
            label: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            bin,
        }
    });
    println!(
        "Pace benchmarks through Pi {} (fault server on loopback; default settings; every run \
         cold unless said)\nmachine: {} cores, load {} at the start",
        pi.version,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    let mut runs: Vec<(&str, &Path)> = vec![("this build", bin.as_path())];
    if let Some(p) = &prev {
        println!("previous release: {} ({})", p.label, p.bin.display());
        runs.push(("previous release", p.bin.as_path()));
    }
    if wanted("1") {
        hanging_primary(&runs);
    }
    if wanted("2") {
        steady_slow_primary(&bin);
    }
    if wanted("3") {
        silent_primary_inside_a_deadline(&runs);
    }
    if wanted("4") {
        primary_that_recovers(&runs);
    }
}

fn hanging_primary(runs: &[(&str, &Path)]) {
    println!(
        "\n1. 24 jobs, --jobs 4, ~1 s answers; 1 in 8 requests to the primary silent, 1 in 8 \
         stalling after 10 tokens (load {})\n",
        load()
    );
    println!(
        "| run | answered | wall time | vs no slow requests | target ≤ 2× | cut for silence |"
    );
    println!("|---|---|---|---|---|---|");
    let base = batch(runs[0].1, &server(vec![one_second()]), 24, 4, &[]);
    let (ok, _) = answered(&base.stdout);
    println!(
        "| no slow requests (baseline) | {ok}/24 | {:.1} s | 1.00× | — | {} |",
        base.wall.as_secs_f64(),
        silence_line(&base.stderr)
    );
    let stall = Behaviour::StallAfter {
        first_ms: 50,
        tokens: 20,
        gap_ms: 50,
        after: 10,
    };
    let mut cycle = vec![one_second(); 8];
    cycle[3] = Behaviour::Hang;
    cycle[7] = stall;
    for (label, bin) in runs {
        let m = batch(bin, &server(cycle.clone()), 24, 4, &[]);
        let (ok, _) = answered(&m.stdout);
        let r = ratio(m.wall, base.wall);
        println!(
            "| {label} | {ok}/24 | {:.1} s | {r:.2}× | {} | {} |",
            m.wall.as_secs_f64(),
            verdict(r <= 2.0 && ok == 24),
            silence_line(&m.stderr)
        );
    }
}

fn steady_slow_primary(bin: &Path) {
    println!(
        "\n2. 12 jobs, --jobs 4, the primary's first token 12 s after every request (load {})\n",
        load()
    );
    println!(
        "| run | answered | by the primary | wall time | vs watchdogs out of the way | cut for silence | target |"
    );
    println!("|---|---|---|---|---|---|---|");
    let slow = vec![Behaviour::Paced {
        first_ms: 12_000,
        tokens: 10,
        gap_ms: 20,
    }];
    let off = [
        ("CCSWITCH_FIRST_RESPONSE_MS", "600000"),
        ("CCSWITCH_STALL_MS", "600000"),
        ("CCSWITCH_WATCHDOG_FLOOR_MS", "600000"),
    ];
    let base = batch(bin, &server(slow.clone()), 12, 4, &off);
    let (ok, primary) = answered(&base.stdout);
    println!(
        "| watchdogs at 10 min (baseline) | {ok}/12 | {primary} | {:.1} s | 1.00× | {} | — |",
        base.wall.as_secs_f64(),
        silence_line(&base.stderr)
    );
    let m = batch(bin, &server(slow), 12, 4, &[]);
    let (ok, primary) = answered(&m.stdout);
    let cut = silence_line(&m.stderr);
    println!(
        "| default settings | {ok}/12 | {primary} | {:.1} s | {:.2}× | {cut} | {} |",
        m.wall.as_secs_f64(),
        ratio(m.wall, base.wall),
        verdict(ok == 12 && primary == 12 && cut.starts_with("none"))
    );
}

fn silent_primary_inside_a_deadline(runs: &[(&str, &Path)]) {
    println!(
        "\n3. --timeout-ms 20000, a silent primary and a healthy backup, two runs one after \
         the other on one agent dir (load {})\n",
        load()
    );
    println!(
        "| run | exit | answered by | wall time | vs a healthy primary | requests to the primary | target |"
    );
    println!("|---|---|---|---|---|---|---|");
    let argv: Vec<String> = [
        "--timeout-ms",
        "20000",
        "--no-tools",
        "--model",
        "glm/m",
        "--json",
        "Summarise the plan.",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    let served = |p: &Proc| {
        serde_json::from_str::<serde_json::Value>(p.stdout.trim())
            .ok()
            .and_then(|v| {
                let m = &v["model"];
                Some(format!("{}/{}", m["provider"].as_str()?, m["id"].as_str()?))
            })
            .unwrap_or_else(|| "—".to_string())
    };
    let llm = server(vec![one_second()]);
    let dir = agent_dir(&llm);
    let base = run(runs[0].1, dir.path(), &argv, &[], "");
    println!(
        "| healthy primary (baseline) | {:?} | {} | {:.1} s | 1.00× | {} | — |",
        base.code.unwrap_or(-1),
        served(&base),
        base.wall.as_secs_f64(),
        llm.requests_to(PRIMARY.1, "m").len()
    );
    for (label, bin) in runs {
        let llm = server(vec![Behaviour::Hang]);
        let dir = agent_dir(&llm);
        for n in 1..=2 {
            let before = llm.requests_to(PRIMARY.1, "m").len();
            let m = run(bin, dir.path(), &argv, &[], "");
            let to_primary = llm.requests_to(PRIMARY.1, "m").len() - before;
            let met = m.code == Some(0)
                && m.wall < Duration::from_secs(15)
                && (n == 1 || to_primary == 0);
            println!(
                "| {label}, run {n} | {:?} | {} | {:.1} s | {:.2}× | {to_primary} | {} |",
                m.code.unwrap_or(-1),
                served(&m),
                m.wall.as_secs_f64(),
                ratio(m.wall, base.wall),
                verdict(met)
            );
        }
    }
}

/// A ~1.2 s answer (the 60-job batch took 37 s at `--jobs 2`).
fn answer_1200() -> Behaviour {
    Behaviour::Paced {
        first_ms: 50,
        tokens: 24,
        gap_ms: 50,
    }
}

fn primary_that_recovers(runs: &[(&str, &Path)]) {
    println!(
        "\n4. 60 jobs, --jobs 2, the primary answering 503 for the first 20 s (load {})\n",
        load()
    );
    println!(
        "| run | answered | wall time | vs a healthy primary | to the primary ≥ 10 s after it recovered | target ≥ 80% | requests to it while down |"
    );
    println!("|---|---|---|---|---|---|---|");
    let base = batch(runs[0].1, &server(vec![answer_1200()]), 60, 2, &[]);
    let (ok, _) = answered(&base.stdout);
    println!(
        "| healthy primary (baseline) | {ok}/60 | {:.1} s | 1.00× | — | — | — |",
        base.wall.as_secs_f64()
    );
    for (label, bin) in runs {
        let llm = FakeLlm::start();
        llm.script(BACKUP.1, "*", vec![answer_1200()]);
        // The 20 s count from the batch's first request (Pi's start-up left out).
        let down = Duration::from_secs(20);
        let started = Instant::now();
        let dir = agent_dir(&llm);
        let recovery = std::sync::Arc::new(std::sync::Mutex::new(None::<Instant>));
        let m = std::thread::scope(|s| {
            let llm = &llm;
            let recovery = recovery.clone();
            s.spawn(move || {
                llm.script_cycle(PRIMARY.1, "*", vec![Behaviour::Status503]);
                // Down from the first request on.
                let first = loop {
                    if let Some(r) = llm.requests().first() {
                        break r.at;
                    }
                    if started.elapsed() > RUN_LIMIT {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                };
                std::thread::sleep((first + down).saturating_duration_since(Instant::now()));
                llm.script_cycle(PRIMARY.1, "*", vec![answer_1200()]);
                *recovery.lock().expect("lock") = Some(Instant::now());
            });
            let argv: Vec<String> = [
                "--batch",
                "-",
                "--no-tools",
                "--jobs",
                "2",
                "--model",
                "glm/m",
            ]
            .into_iter()
            .map(str::to_string)
            .collect();
            run(bin, dir.path(), &argv, &[], &jobs_input(60))
        });
        let (ok, _) = answered(&m.stdout);
        let recovered = recovery.lock().expect("lock").unwrap_or(started);
        let requests = llm.requests();
        let after: Vec<_> = requests
            .iter()
            .filter(|r| r.at >= recovered + Duration::from_secs(10))
            .collect();
        let share = if after.is_empty() {
            0.0
        } else {
            after.iter().filter(|r| r.route == PRIMARY.1).count() as f64 / after.len() as f64
        };
        let first = requests.first().map_or(started, |r| r.at);
        let down_at: Vec<String> = requests
            .iter()
            .filter(|r| r.route == PRIMARY.1 && r.at < recovered)
            .map(|r| format!("{:.1}", r.at.saturating_duration_since(first).as_secs_f64()))
            .collect();
        let while_down = format!("{} (at {} s)", down_at.len(), down_at.join(", "));
        println!(
            "| {label} | {ok}/60 | {:.1} s | {:.2}× | {:.0}% of {} | {} | {while_down} |",
            m.wall.as_secs_f64(),
            ratio(m.wall, base.wall),
            100.0 * share,
            after.len(),
            verdict(share >= 0.8),
        );
    }
    println!(
        "\nWhile it is down the primary's endpoint cooldowns run 10 s, 15 s, 22.5 s, …: in 20 s \
         that is the jobs in flight when it failed (and their one immediate retry of a 5xx), then \
         one probe at 10 s; the next, at 25 s, finds it back."
    );
}
