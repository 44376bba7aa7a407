//! One budget per key across processes (issue 23), end to end through real Pi, the fault
//! server's per-route concurrency cap and the real stores: three shards of one batch running at
//! once against one key share its slots through Redis (three "machines", each with an agent
//! dir of its own) or through the file store (three processes on one machine); a SIGKILLed
//! runner's slot comes back when its lease runs out.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::batch::{jobs, successes, write_file};
use crate::support::*;
use pi_ccswitch_run::capacity::DEFAULT_LEASE_TTL_MS;
use pi_ccswitch_run::health::store::{FileStore, HealthStore, RedisStore};

fn glm() -> Vec<ProviderSpec> {
    vec![ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")])]
}

const FROM_GLM: [&str; 5] = ["--no-tools", "--provider", "glm", "--model", "m"];

const SHARDS: usize = 3;
/// What the key takes; requests beyond it are refused with GLM's 1302.
const CAP: usize = 3;

/// How the shards share health.
enum Sharing {
    /// One Redis, each shard with an agent dir of its own (no file shared).
    Redis(RedisServer),
    /// One agent dir, so one state file and one capacity file.
    File,
}

/// The agent dir of shard `i` in `round` (each round starts from an empty store): one for all
/// shards when they share the file store, else one each.
fn agent_dir(env: &TestEnv, sharing: &Sharing, round: &str, i: usize) -> PathBuf {
    // Under the env's agent dir path (`…/agent-…`), so the env's marker finds every process of
    // these shards too.
    let dir = match sharing {
        Sharing::File => format!("{}-{round}", env.agent_dir.display()),
        Sharing::Redis(_) => format!("{}-{round}-host-{i}", env.agent_dir.display()),
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("agent dir");
    write_models_json(&dir, &env.llm, &glm());
    dir
}

fn redis_prefix(round: &str) -> String {
    format!("{round}:")
}

/// Runs the [`SHARDS`] shards of `n` jobs at once, `--jobs workers` each, with `extra` flags;
/// their outputs, in shard order.
fn run_shards(
    env: &TestEnv,
    sharing: &Sharing,
    round: &str,
    n: usize,
    workers: usize,
    extra: &[&str],
) -> Vec<Output> {
    let input = write_file(env, &format!("{round}.jsonl"), &jobs(n));
    let cmds: Vec<Command> = (0..SHARDS)
        .map(|i| {
            let (shard, workers) = (format!("{i}/{SHARDS}"), workers.to_string());
            let mut args: Vec<String> = ["--batch", &input, "--shard", &shard, "--jobs", &workers]
                .into_iter()
                .chain(FROM_GLM)
                .chain(extra.iter().copied())
                .map(str::to_string)
                .collect();
            if let Sharing::Redis(server) = sharing {
                args.extend(["--health-url".to_string(), server.url()]);
            }
            let mut cmd = env.cmd(args);
            cmd.env("PI_CODING_AGENT_DIR", agent_dir(env, sharing, round, i))
                .env("CCSWITCH_HEALTH_PREFIX", redis_prefix(round));
            cmd
        })
        .collect();
    std::thread::scope(|s| {
        let running: Vec<_> = cmds
            .into_iter()
            .map(|cmd| s.spawn(move || run_command(cmd, None, RUN_TIMEOUT)))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().expect("shard"))
            .collect()
    })
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis(),
    )
    .expect("ms")
}

/// The shared store's capacity record of glm after `round`: (requests in flight, limit).
fn glm_after(env: &TestEnv, sharing: &Sharing, round: &str) -> (u32, u32) {
    let now = now_ms();
    let mut store: Box<dyn HealthStore> = match sharing {
        Sharing::File => Box::new(FileStore::open(&agent_dir(env, sharing, round, 0))),
        Sharing::Redis(server) => {
            Box::new(RedisStore::open(&server.url(), &redis_prefix(round)).expect("url"))
        }
    };
    let records = store.load_capacity(now).expect("load capacity");
    let glm = records.get("glm").expect("glm's record");
    (glm.in_flight(now), glm.limit)
}

/// Every shard exited 0 and, together, answered each of the `n` jobs exactly once; their
/// result lines.
fn every_job_answered_once(outs: &[Output], n: usize) -> Vec<Value> {
    let mut all = Vec::new();
    for (i, out) in outs.iter().enumerate() {
        out.assert_success()
            .assert_stderr_lacks("breaker open")
            .assert_stderr_lacks("health is not shared");
        let lines = out.json_lines();
        assert!(!lines.is_empty(), "shard {i} ran no job\n{}", out.dump());
        all.extend(lines);
    }
    assert_eq!(all.len(), n, "one line per job");
    let answered = successes(&all);
    assert_eq!(answered.len(), n, "every job answered");
    assert!(answered.values().all(|&k| k == 1), "{answered:?}");
    all
}

/// Attempts marked as capacity signals in `results`.
fn capacity_signals(results: &[Value]) -> usize {
    results
        .iter()
        .flat_map(|r| r["attempts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["capacity_signal"] == true)
        .count()
}

/// Three shards, `--jobs 4` each, against one key that takes [`CAP`]: they learn the cap
/// together (the key refuses a request or so, no job fails, each refusal is a capacity signal
/// on its job's line), and every slot comes back when they exit. Then, from an empty store,
/// three shards of two workers under `--max-inflight` at the cap: the key never sees more than
/// [`CAP`] requests at once from the three together, where each on its own budget would send
/// two.
fn three_shards_share_one_key(v: &str, sharing: &Sharing) {
    const N: usize = 24;
    let env = TestEnv::new(v, &glm());
    env.llm.set_concurrency_cap("a", Some(CAP));
    env.llm.set_default(Behaviour::Ok.delayed(250));
    let started = Instant::now();
    let outs = run_shards(&env, sharing, "learn", N, 4, &[]);
    let all = || outs.iter().map(Output::dump).collect::<String>();
    let results = every_job_answered_once(&outs, N);
    let requests = env.llm.requests().len();
    let rejected = env.llm.rejections("a");
    eprintln!(
        "{SHARDS} shards, {N} jobs, cap {CAP}: {requests} requests, {rejected} rejected, {:?}",
        started.elapsed()
    );
    // Finding the cap costs a refused request or two (slow start goes one past it, and the
    // shards' requests sent at that moment see it too). Shards on budgets of their own start
    // at two each, six against three, and pay for it (five refused, measured).
    assert!(
        rejected <= SHARDS,
        "{rejected} of {requests} rejected\n{}",
        all()
    );
    assert_eq!(
        capacity_signals(&results),
        rejected,
        "each refusal is a capacity signal on its job's line\n{}",
        all()
    );
    let (in_flight, limit) = glm_after(&env, sharing, "learn");
    assert_eq!(in_flight, 0, "every slot came back");
    assert!((1..=4).contains(&limit), "limit {limit}");

    env.llm.set_concurrency_cap("a", None);
    env.llm.reset_max_in_flight("a");
    let started = Instant::now();
    let outs = run_shards(&env, sharing, "capped", 12, 2, &["--max-inflight", "glm=3"]);
    every_job_answered_once(&outs, 12);
    let most = env.llm.max_in_flight("a");
    eprintln!(
        "{SHARDS} shards × 2 workers, --max-inflight glm={CAP}, uncapped key: at most {most} in \
         flight, {:?}",
        started.elapsed()
    );
    assert!(
        most <= CAP,
        "{most} in flight at once\n{}",
        outs.iter().map(Output::dump).collect::<String>()
    );
    env.assert_no_orphans();
}

#[test]
fn three_shards_share_one_key_through_redis() {
    three_shards_share_one_key(PI_NEWEST, &Sharing::Redis(RedisServer::start()));
}

#[test]
fn three_shards_share_one_key_through_the_file_store() {
    three_shards_share_one_key(PI_MIN, &Sharing::File);
}

/// A runner SIGKILLed while its request holds the key's only slot (`--max-inflight glm=1`)
/// renews it no more: its lease runs out within the TTL, and the next run, waiting meanwhile,
/// takes the slot then and answers.
#[test]
fn a_killed_runners_slot_comes_back_when_its_lease_runs_out() {
    let env = TestEnv::new(PI_NEWEST, &glm());
    env.llm
        .script("a", "m", vec![Behaviour::Ok.delayed(60_000), Behaviour::Ok]);
    let run = |prompt: &'static str| {
        FROM_GLM
            .into_iter()
            .chain(["--json", "--max-inflight", "glm=1", prompt])
            .collect::<Vec<_>>()
    };
    let mut first = env.cmd(run("first"));
    first
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut first = first.spawn().expect("spawn the first run");
    let pid = i32::try_from(first.id()).expect("pid");
    assert_eq!(
        env.llm.wait_in_flight("a", 1, Duration::from_secs(30)),
        1,
        "the first run's request"
    );
    let status = env.run(["--status", "--json", "--max-inflight", "glm=1"]);
    let held = &status.json()["capacity"][0];
    assert_eq!(
        (&held["provider"], &held["in_flight"], &held["max_inflight"]),
        (&Value::from("glm"), &Value::from(1), &Value::from(1)),
        "{held}"
    );
    // The dead run's lease, as the store holds it (slot ids start `host:pid`).
    let pid_text = pid.to_string();
    let killed_lease = || {
        FileStore::open(&env.agent_dir)
            .load_capacity(now_ms())
            .expect("load capacity")
            .get("glm")
            .and_then(|r| {
                r.leases
                    .iter()
                    .find(|(id, _)| id.split(':').any(|part| part == pid_text))
                    .map(|(_, lease)| lease.until)
            })
    };
    assert!(killed_lease().is_some(), "the first run holds its slot");
    // SAFETY: kill(2) on the runner this test started (its Pi goes with it: the reaper).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    first.wait().expect("wait for the killed run");
    let killed = Instant::now();
    let ttl = Duration::from_millis(DEFAULT_LEASE_TTL_MS);
    let (second, freed) = std::thread::scope(|s| {
        let second = s.spawn(|| env.run(run("second")));
        while killed_lease().is_some() {
            assert!(
                killed.elapsed() < 2 * ttl,
                "the dead run's lease never ran out"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let freed = Instant::now();
        (second.join().expect("second run"), freed)
    });
    let freed_after = freed - killed;
    second.assert_success();
    let j = second.json();
    assert_eq!(j["answer"], DEFAULT_TEXT, "{}", second.dump());
    let reqs = env.llm.requests_to("a", "m");
    assert_eq!(reqs.len(), 2, "{}", second.dump());
    let waited = j["capacity_wait_ms"].as_u64().expect("capacity_wait_ms");
    eprintln!(
        "the killed run's lease ran out {freed_after:?} after the kill; the next run waited \
         {waited} ms and sent {:?} after the kill",
        reqs[1].at - killed
    );
    // Renewed every third of its TTL, the dead run's lease had at least two thirds of it left,
    // and never more than all of it.
    assert!(
        ttl / 2 <= freed_after && freed_after <= ttl + Duration::from_secs(1),
        "freed {freed_after:?} after the kill"
    );
    // The next run sent nothing until then (this test looks every 50 ms; it every 250 ms).
    assert!(
        reqs[1].at + Duration::from_millis(250) >= freed,
        "sent {:?} before the lease ran out\n{}",
        freed - reqs[1].at,
        second.dump()
    );
    // It found the slot still held (how long it waited depends on how long it took to start:
    // seconds on a loaded machine).
    assert!(waited > 0, "{}", second.dump());
    assert_eq!(env.llm.rejections("a"), 0);
    let status = env.run(["--status", "--json"]);
    assert_eq!(status.json()["capacity"][0]["in_flight"], 0);
    // SAFETY: kill(2) on the process group this test started, should anything be left of it.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    env.assert_no_orphans();
}
