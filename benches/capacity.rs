//! Batches at the providers' speed (issue 23's benchmarks), through real Pi 0.84.4 and the fault
//! server's per-route concurrency caps (a request beyond a route's cap is answered at once with
//! 429 and that vendor's body: GLM's 1302, Qwen's and DeepSeek's `rate_limit_exceeded`), every
//! ratio against a baseline measured in the same run:
//!
//! 1. 60 jobs, `--jobs 8`, three providers capped 3/2/2, 1 s answers, against the same batch on
//!    uncapped providers with 7 requests in flight from the start (`--jobs 7 --max-inflight
//!    glm=7`: no slow start, the concurrency the keys allow): wall-time ratio and the share of
//!    requests rejected. The same uncapped batch at plain `--jobs 7` shows what slow start (the
//!    limit learned from 2 up) costs against a provider with no cap.
//! 2. One provider capped at 2, 30 jobs, `--jobs 8`, against uncapped at `--jobs 2`.
//! 3. Three concurrent processes (`--shard i/3`, `--jobs 4` each) sharing one real Redis, one
//!    provider capped at 3: every job answered, share rejected (against one process with 3 in
//!    flight on the uncapped provider, `--jobs 3 --max-inflight glm=3`, for the time).
//! 4. Case 1 with `--max-inflight` at the true caps: requests rejected, and the time.
//! 5. The runner's own CPU time and peak RSS for case 2's batch and for the same 30 jobs on a
//!    fast uncapped provider, per job.
//!
//! Every measured run starts cold: a fresh agent dir (so a fresh state file and capacity file),
//! a fresh Redis key prefix, a fresh fault server; what a run learns it learns in the run.
//!
//! *The runner's own CPU* is `utime + stime` of the runner process (all its threads) from
//! `/proc/<pid>/stat`, read once it has exited but before it is reaped (`waitid(WNOWAIT)`):
//! Pi's processes are its children, whose time the kernel keeps apart (`cutime`, `cstime`), so
//! none of Pi's CPU is in it. *Peak RSS* is the runner's `VmHWM`, sampled every 10 ms.
//!
//! With `CAPBENCH_PREV_BIN` set to a release binary built from before the capacity work
//! (`git log` names it: the parent of "Capacity slots (issue 23, core)"), cases 1, 2, 3 and 5
//! also run it on the same setups — the "today" of the issue (`CAPBENCH_PREV_LABEL` names it in
//! the tables; default: its `--version`).
//!
//! Run: `cargo bench --bench capacity` (`-- 1 2 …` for some cases only; `CAPBENCH_KEEP=DIR` keeps
//! every batch's output and request log, see [`keep`]).

#![allow(clippy::disallowed_methods)]

#[path = "../tests/testsuite/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/testsuite/support/pi_env.rs"]
mod pi_env;
#[path = "../tests/testsuite/support/redis.rs"]
mod redis;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_llm::{Behaviour, FakeLlm, ModelSpec, ProviderSpec, bodies, write_models_json};

const BIN: &str = env!("CARGO_BIN_EXE_pi-ccswitch-run");
/// Provider name and fault-server route of the three providers, in preference order.
const PROVIDERS: [(&str, &str); 3] = [("glm", "a"), ("qwen", "b"), ("ds", "c")];

/// What a provider answers a request over its cap with: GLM its 1302, Qwen and DeepSeek the
/// OpenAI-style `rate_limit_exceeded` their compatible endpoints send (all HTTP 429).
fn capacity_body(route: &str) -> String {
    match route {
        "a" => bodies::glm_1302(),
        _ => bodies::openai_rate_limit_requests(),
    }
}
/// Every run is killed past this (a bench must end).
const RUN_LIMIT: Duration = Duration::from_secs(180);
/// Answer time of the slow cases.
const ANSWER_MS: u64 = 1000;

/// What the fault server does: per provider (in [`PROVIDERS`] order, a prefix of it is used)
/// its concurrency cap, and the answer delay.
#[derive(Clone)]
struct Setup {
    caps: Vec<Option<usize>>,
    answer_ms: u64,
}

impl Setup {
    fn new(caps: &[Option<usize>], answer_ms: u64) -> Setup {
        Setup {
            caps: caps.to_vec(),
            answer_ms,
        }
    }

    fn providers(&self) -> &[(&'static str, &'static str)] {
        &PROVIDERS[..self.caps.len()]
    }

    /// A fresh fault server configured for this setup.
    fn server(&self) -> FakeLlm {
        let llm = FakeLlm::start();
        for (&(_, route), cap) in self.providers().iter().zip(&self.caps) {
            llm.set_concurrency_cap(route, *cap);
            llm.set_capacity_body(route, 429, capacity_body(route));
            let answer = if self.answer_ms > 0 {
                Behaviour::Ok.delayed(self.answer_ms)
            } else {
                Behaviour::Ok
            };
            llm.script(route, "*", vec![answer]);
        }
        llm
    }

    /// A fresh (cold) agent dir with `models.json` for this setup's providers on `llm`.
    fn agent_dir(&self, llm: &FakeLlm) -> tempfile::TempDir {
        let dir = tempfile::Builder::new()
            .prefix("pccr-capbench-")
            .tempdir()
            .expect("temp dir");
        let specs: Vec<ProviderSpec> = self
            .providers()
            .iter()
            .map(|&(name, route)| ProviderSpec::new(name, route, vec![ModelSpec::text("m")]))
            .collect();
        write_models_json(dir.path(), llm, &specs);
        dir
    }
}

/// One runner process's result.
struct Proc {
    stdout: String,
    stderr: String,
    success: bool,
    /// The runner's own user + system CPU time (its threads; not its children).
    cpu: Duration,
    /// The runner's peak RSS (kB).
    peak_kb: u64,
}

/// One measured batch (one or more processes against one fault server).
///
/// Its time is told twice: the whole wall time (what the targets are about), and the
/// time after the first request reached the fault server. The first request waits for Pi's
/// start-up, which on a small machine grows with the number of Pi processes started at once
/// (8 workers start 8 Pi processes, a baseline at 2 workers only 2; three shards 12): the
/// second figure is the batch's pace with that left out.
struct Measured {
    wall: Duration,
    /// From the start to the first request reaching the fault server (Pi's start-up, mostly).
    first_request: Option<Duration>,
    jobs: usize,
    answered: usize,
    requests: usize,
    rejected: usize,
    max_in_flight: Vec<usize>,
    success: bool,
    procs: Vec<Proc>,
}

impl Measured {
    fn rejected_share(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.rejected as f64 / self.requests as f64
        }
    }

    fn cpu(&self) -> Duration {
        self.procs.iter().map(|p| p.cpu).sum()
    }

    fn peak_kb(&self) -> u64 {
        self.procs.iter().map(|p| p.peak_kb).max().unwrap_or(0)
    }

    /// The summary's "batch: capacity: …" lines, if any.
    fn capacity_lines(&self) -> Vec<String> {
        self.procs
            .iter()
            .flat_map(|p| p.stderr.lines())
            .filter_map(|l| l.find("batch: capacity: ").map(|at| l[at..].to_string()))
            .collect()
    }

    /// The wall time after the first request: the batch's own pace, without Pi's start-up.
    fn after_first(&self) -> Option<Duration> {
        self.first_request.map(|f| self.wall.saturating_sub(f))
    }

    fn in_flight_text(&self) -> String {
        self.max_in_flight
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("/")
    }
}

fn jobs_input(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"id\":\"doc-{i}\",\"prompt\":\"Summarise document {i}.\"}}\n"))
        .collect()
}

/// `/proc/<pid>/stat`'s utime + stime.
fn own_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read stat");
    // Fields after the command name (which may hold spaces) start with field 3, the state.
    let rest = &stat[stat.rfind(')').expect("stat has a comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Has `pid` (our child) exited? Leaves it unreaped, so its /proc entry still holds its times.
fn exited(pid: u32) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child, with a valid siginfo pointer.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
        )
    };
    assert_eq!(rc, 0, "waitid: {}", std::io::Error::last_os_error());
    // SAFETY: waitid filled info (si_pid is 0 when the child has not exited).
    unsafe { info.si_pid() != 0 }
}

/// Runs `bin` with `args` in a fresh environment rooted at `agent_dir`, feeding `stdin`.
fn run(bin: &Path, agent_dir: &Path, args: &[String], env: &[(&str, String)], stdin: &str) -> Proc {
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
    let pid = child.id();
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
    let mut peak_kb = 0;
    while !exited(pid) {
        if let Some(kb) = vm_hwm_kb(pid) {
            peak_kb = peak_kb.max(kb);
        }
        if t.elapsed() > RUN_LIMIT {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let cpu = own_cpu(pid);
    let status = child.wait().expect("wait");
    let _ = writer.join();
    Proc {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        success: status.success(),
        cpu,
        peak_kb,
    }
}

fn answered(stdout: &str) -> usize {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["ok"] == true)
        .count()
}

/// One batch of `jobs` jobs from glm (the first provider) through `bin`, `shards` processes at
/// once (`--shard i/N` each when more than one), each with `args` and `env`, cold.
fn batch(
    bin: &Path,
    setup: &Setup,
    jobs: usize,
    shards: usize,
    args: &[&str],
    env: &[(&str, String)],
) -> Measured {
    let llm = setup.server();
    let dirs: Vec<tempfile::TempDir> = (0..shards).map(|_| setup.agent_dir(&llm)).collect();
    let input = jobs_input(jobs);
    let t = Instant::now();
    let procs: Vec<Proc> = std::thread::scope(|s| {
        let handles: Vec<_> = dirs
            .iter()
            .enumerate()
            .map(|(i, dir)| {
                let mut argv: Vec<String> = ["--batch", "-", "--no-tools", "--provider", "glm"]
                    .into_iter()
                    .chain(["--model", "m"])
                    .chain(args.iter().copied())
                    .map(str::to_string)
                    .collect();
                if shards > 1 {
                    argv.extend(["--shard".to_string(), format!("{i}/{shards}")]);
                }
                let input = &input;
                s.spawn(move || run(bin, dir.path(), &argv, env, input))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("runner thread"))
            .collect()
    });
    let wall = t.elapsed();
    keep(&llm, t, &procs);
    let routes: Vec<&str> = setup.providers().iter().map(|&(_, r)| r).collect();
    let requests = llm
        .requests()
        .iter()
        .filter(|r| routes.contains(&r.route.as_str()))
        .count();
    let first_request = llm
        .requests()
        .iter()
        .map(|r| r.at.saturating_duration_since(t))
        .min();
    Measured {
        wall,
        first_request,
        jobs,
        answered: procs.iter().map(|p| answered(&p.stdout)).sum(),
        requests,
        rejected: routes.iter().map(|r| llm.rejections(r)).sum(),
        max_in_flight: routes.iter().map(|r| llm.max_in_flight(r)).collect(),
        success: procs.iter().all(|p| p.success),
        procs,
    }
}

/// With `CAPBENCH_KEEP=DIR`, each measured batch leaves in `DIR` its processes' stdout and
/// stderr and the fault server's request log (ms since the batch started, route, rejected or
/// not, the prompt), as `NN-…`, numbered in the order the batches ran.
fn keep(llm: &FakeLlm, started: Instant, procs: &[Proc]) {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(dir) = std::env::var_os("CAPBENCH_KEEP").map(PathBuf::from) else {
        return;
    };
    let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    std::fs::create_dir_all(&dir).expect("CAPBENCH_KEEP dir");
    for (i, p) in procs.iter().enumerate() {
        std::fs::write(dir.join(format!("{n:02}-{i}.stdout")), &p.stdout).expect("keep stdout");
        std::fs::write(dir.join(format!("{n:02}-{i}.stderr")), &p.stderr).expect("keep stderr");
    }
    let log: String = llm
        .requests()
        .iter()
        .map(|r| {
            format!(
                "{:>6} {} {} {}\n",
                r.at.saturating_duration_since(started).as_millis(),
                r.route,
                if r.rejected_for_capacity {
                    "429"
                } else {
                    "ok "
                },
                r.last_user_text().unwrap_or("")
            )
        })
        .collect();
    std::fs::write(dir.join(format!("{n:02}-requests")), log).expect("keep requests");
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A row of the time-and-rejections tables.
/// `time_target`: the wall-time ratio to meet (`None`: none set); `share_target`: the share of
/// requests rejected.
fn row(
    how: &str,
    m: &Measured,
    base: Option<&Measured>,
    time_target: Option<f64>,
    share_target: f64,
) {
    let ratio = base.map(|b| secs(m.wall) / secs(b.wall));
    let after = match (m.after_first(), base.map(Measured::after_first)) {
        (Some(a), Some(Some(b))) => format!("{:.1} s ({:.2}×)", secs(a), secs(a) / secs(b)),
        (Some(a), None) => format!("{:.1} s (1.00×)", secs(a)),
        _ => "—".to_string(),
    };
    let share = m.rejected_share();
    let verdicts = match ratio {
        Some(r) => format!(
            "{} / {}",
            time_target.map_or("—", |t| verdict(r <= t)),
            verdict(share <= share_target)
        ),
        None => "baseline".to_string(),
    };
    println!(
        "| {how} | {}/{} | {:.1} s | {} | {} | {after} | {} | {} of {} ({}) | {} | {verdicts} |",
        m.answered,
        m.jobs,
        secs(m.wall),
        m.first_request
            .map_or_else(|| "—".to_string(), |d| format!("{:.1} s", secs(d))),
        ratio.map_or_else(|| "1.00×".to_string(), |r| format!("{r:.2}×")),
        m.in_flight_text(),
        m.rejected,
        m.requests,
        pct(share),
        if m.success { "0" } else { "≠0" },
    );
}

fn header(title: &str) {
    println!("\n{title} (load {})\n", load());
    println!(
        "| run | answered | wall time | first request | vs baseline | after the first request | most in flight | rejected (429) | exit | time / rejected target |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
}

fn notes(ms: &[(&str, &Measured)]) {
    for (how, m) in ms {
        for line in m.capacity_lines() {
            println!("  - {how}: {line}");
        }
    }
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
    let prev = std::env::var_os("CAPBENCH_PREV_BIN").map(|p| {
        let bin = PathBuf::from(p);
        let out = Command::new(&bin)
            .arg("--version")
            .output()
            .expect("previous binary");
        let label = std::env::var("CAPBENCH_PREV_LABEL")
            .unwrap_or_else(|_| String::from_utf8_lossy(&out.stdout).trim().to_string());
        Prev { bin, label }
    });
    let started = Instant::now();
    println!(
        "Capacity benchmarks through Pi {} (fault server on loopback; {} ms answers unless said; \
         every run cold: fresh agent dir, state and capacity files, Redis prefix and server)\n\
         machine: {} cores, load {} at the start",
        pi.version,
        ANSWER_MS,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    if let Some(p) = &prev {
        println!("previous release: {} ({})", p.label, p.bin.display());
    }

    let three_capped = Setup::new(&[Some(3), Some(2), Some(2)], ANSWER_MS);
    let three_open = Setup::new(&[None, None, None], ANSWER_MS);
    let one_capped = Setup::new(&[Some(2)], ANSWER_MS);
    let one_open = Setup::new(&[None], ANSWER_MS);
    let mut case2 = None;

    if wanted("1") || wanted("4") {
        header("1. 60 jobs, three providers capped 3/2/2 (true capacity 7 in flight)");
        let base = batch(
            &bin,
            &three_open,
            60,
            1,
            &["--jobs", "7", "--max-inflight", "glm=7"],
            &[],
        );
        row(
            "uncapped, `--jobs 7 --max-inflight glm=7` (baseline)",
            &base,
            None,
            Some(1.2),
            0.05,
        );
        let mut done = vec![("baseline", base)];
        if wanted("1") {
            let m = batch(&bin, &three_open, 60, 1, &["--jobs", "7"], &[]);
            row(
                "uncapped, `--jobs 7` (limit learned: slow start from 2)",
                &m,
                Some(&done[0].1),
                None,
                0.0,
            );
            done.push(("slow start", m));
            let m = batch(&bin, &three_capped, 60, 1, &["--jobs", "8"], &[]);
            row(
                "capped 3/2/2, `--jobs 8`",
                &m,
                Some(&done[0].1),
                Some(1.2),
                0.05,
            );
            done.push(("capped", m));
            if let Some(p) = &prev {
                let m = batch(&p.bin, &three_capped, 60, 1, &["--jobs", "8"], &[]);
                row(
                    &format!("capped 3/2/2, `--jobs 8`, previous release ({})", p.label),
                    &m,
                    Some(&done[0].1),
                    Some(1.2),
                    0.05,
                );
                done.push(("previous release", m));
            }
        }
        if wanted("4") {
            let m = batch(
                &bin,
                &three_capped,
                60,
                1,
                &["--jobs", "8", "--max-inflight", "glm=3,qwen=2,ds=2"],
                &[],
            );
            row(
                "4. capped 3/2/2, `--jobs 8 --max-inflight glm=3,qwen=2,ds=2`",
                &m,
                Some(&done[0].1),
                None,
                0.0,
            );
            done.push(("--max-inflight", m));
        }
        let refs: Vec<(&str, &Measured)> = done.iter().map(|(h, m)| (*h, m)).collect();
        notes(&refs);
    }

    if wanted("2") || wanted("5") {
        header("2. 30 jobs, one provider capped at 2");
        let base = batch(&bin, &one_open, 30, 1, &["--jobs", "2"], &[]);
        row(
            "uncapped, `--jobs 2` (baseline)",
            &base,
            None,
            Some(1.2),
            0.05,
        );
        let m = batch(&bin, &one_capped, 30, 1, &["--jobs", "8"], &[]);
        row("capped at 2, `--jobs 8`", &m, Some(&base), Some(1.2), 0.05);
        let mut done = vec![("capped", m)];
        if let Some(p) = &prev {
            let m = batch(&p.bin, &one_capped, 30, 1, &["--jobs", "8"], &[]);
            row(
                &format!("capped at 2, `--jobs 8`, previous release ({})", p.label),
                &m,
                Some(&base),
                Some(1.2),
                0.05,
            );
            done.push(("previous release", m));
        }
        let refs: Vec<(&str, &Measured)> = done.iter().map(|(h, m)| (*h, m)).collect();
        notes(&refs);
        case2 = Some(done);
    }

    if wanted("3") {
        let server = redis::RedisServer::start();
        let one_at_3 = Setup::new(&[Some(3)], ANSWER_MS);
        header(
            "3. 36 jobs, three processes (`--shard i/3`, `--jobs 4` each) on one Redis, one provider capped at 3",
        );
        let base = batch(
            &bin,
            &one_open,
            36,
            1,
            &["--jobs", "3", "--max-inflight", "glm=3"],
            &[],
        );
        row(
            "one process, uncapped, `--jobs 3 --max-inflight glm=3` (baseline)",
            &base,
            None,
            None,
            0.10,
        );
        let env = [
            ("CCSWITCH_HEALTH_URL", server.url()),
            ("CCSWITCH_HEALTH_PREFIX", "capbench-shards:".to_string()),
        ];
        let m = batch(&bin, &one_at_3, 36, 3, &["--jobs", "4"], &env);
        row(
            "3 shards × `--jobs 4`, capped at 3, Redis",
            &m,
            Some(&base),
            None,
            0.10,
        );
        let mut done = vec![("shards", m)];
        if let Some(p) = &prev {
            let env = [
                ("CCSWITCH_HEALTH_URL", server.url()),
                (
                    "CCSWITCH_HEALTH_PREFIX",
                    "capbench-shards-prev:".to_string(),
                ),
            ];
            let m = batch(&p.bin, &one_at_3, 36, 3, &["--jobs", "4"], &env);
            row(
                &format!(
                    "3 shards × `--jobs 4`, capped at 3, Redis, previous release ({})",
                    p.label
                ),
                &m,
                Some(&base),
                None,
                0.10,
            );
            done.push(("previous release", m));
        }
        for (how, m) in &done {
            println!(
                "  - {how}: every job answered: {}",
                if m.answered == m.jobs {
                    "yes"
                } else {
                    "**no**"
                }
            );
        }
        let refs: Vec<(&str, &Measured)> = done.iter().map(|(h, m)| (*h, m)).collect();
        notes(&refs);
    }

    if wanted("5") {
        let fast = Setup::new(&[None], 0);
        println!(
            "\n5. The runner's own CPU (user+sys of the runner process, Pi excluded) and peak RSS, \
             30 jobs, `--jobs 8` (load {})\n",
            load()
        );
        println!("| batch | binary | wall time | runner CPU | CPU per job | runner peak RSS |");
        println!("|---|---|---|---|---|---|");
        let cpu_row = |what: &str, which: &str, m: &Measured| {
            println!(
                "| {what} | {which} | {:.1} s | {:.0} ms | {:.1} ms | {:.1} MiB |",
                secs(m.wall),
                secs(m.cpu()) * 1000.0,
                secs(m.cpu()) * 1000.0 / m.jobs as f64,
                m.peak_kb() as f64 / 1024.0
            );
        };
        let this = "this branch";
        let m = batch(&bin, &fast, 30, 1, &["--jobs", "8"], &[]);
        cpu_row("fast, uncapped", this, &m);
        if let Some(p) = &prev {
            let m = batch(&p.bin, &fast, 30, 1, &["--jobs", "8"], &[]);
            cpu_row("fast, uncapped", &p.label, &m);
        }
        if let Some(done) = &case2 {
            for (how, m) in done {
                let which = match &prev {
                    Some(p) if *how != "capped" => p.label.as_str(),
                    _ => this,
                };
                cpu_row("case 2: capped at 2, 1 s answers", which, m);
            }
        }
    }
    println!(
        "\nwhole bench: {:.0} s; load {} at the end",
        secs(started.elapsed()),
        load()
    );
}
