//! Durable batches through real Pi (issue 11): `--output FILE` written one whole, synced line
//! per finished job; `--resume` after SIGKILLs never pays for an answered job twice; shards
//! running at once answer every job exactly once and share breaker health; usage and cost in
//! every result; the batch flags' usage errors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::batch::*;
use crate::support::*;
use serde_json::Value;

fn spawn(env: &TestEnv, args: &[String], stderr: &Path) -> Child {
    let mut cmd = env.cmd(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).expect("stderr file"));
    cmd.spawn().expect("spawn the batch")
}

/// Lines of `path` ending in `\n`, each of which must be JSON; a torn tail is returned apart.
fn complete_lines(path: &Path) -> (Vec<Value>, usize) {
    let text = std::fs::read(path).unwrap_or_default();
    let end = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let lines = String::from_utf8_lossy(&text[..end])
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "line {} of {} is not JSON ({e}): {l}",
                    i + 1,
                    path.display()
                )
            })
        })
        .collect();
    (lines, text.len() - end)
}

/// A small xorshift, seeded from the clock and printed, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("BATCH_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            });
        eprintln!("kill moments seeded with BATCH_KILL_SEED={seed}");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Issue 11, done-when 1: 120 jobs, `--jobs 4`, SIGKILLed at three random moments and resumed
/// each time; no answered job is ever sent again, no torn line is ever visible, and in the end
/// every job has exactly one success line.
#[test]
fn killed_three_times_and_resumed_every_job_is_answered_exactly_once() {
    let env = TestEnv::new(PI_MIN, &providers());
    // A little latency per answer, so that kills land with jobs in flight.
    env.llm.set_default(Behaviour::Ok.delayed(20));
    let jobs_file = write_file(&env, "jobs.jsonl", &jobs(120));
    let out = env.dir.path().join("results.jsonl");
    let mut args: Vec<String> = ["--batch", &jobs_file, "--jobs", "4", "--output"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(out.to_str().unwrap().to_string());
    args.push("--resume".to_string());
    args.extend(FROM_PRIM.map(String::from));
    let mut rng = Rng::new();
    let mut target = 0u64;
    for round in 0..4 {
        let before: BTreeSet<String> = successes(&complete_lines(&out).0).into_keys().collect();
        let seen = env.llm.requests().len();
        let stderr = env.dir.path().join(format!("stderr-{round}.txt"));
        let started = Instant::now();
        let mut child = spawn(&env, &args, &stderr);
        if round < 3 {
            // Kill once 5 to 29 more jobs are recorded than at the previous kill.
            target += 5 + rng.below(25);
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let (lines, _) = complete_lines(&out);
                if lines.len() as u64 >= target {
                    break;
                }
                assert!(
                    child.try_wait().expect("wait").is_none(),
                    "the batch ended before {target} lines: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
                assert!(Instant::now() < deadline, "no progress to {target} lines");
                std::thread::sleep(Duration::from_millis(5));
            }
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
            // Pi dies with the runner (PR_SET_PDEATHSIG).
            let left = wait_no_pids_with_env_marker(&env.marker(), Duration::from_secs(10));
            assert!(left.is_empty(), "Pi outlived the killed runner: {left:?}");
        } else {
            let status = child.wait().expect("wait");
            assert_eq!(
                status.code(),
                Some(0),
                "{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        let (lines, torn) = complete_lines(&out);
        assert_eq!(torn, 0, "a torn line is visible after round {round}");
        for r in &env.llm.requests()[seen..] {
            let job = job_of(r).expect("a job's request");
            assert!(
                !before.contains(&job),
                "round {round}: {job} was answered before this run and was sent again"
            );
        }
        eprintln!(
            "round {round}: {} lines, {} requests, {:.1} s",
            lines.len(),
            env.llm.requests().len(),
            started.elapsed().as_secs_f64()
        );
    }
    let done = successes(&read_results(&out));
    assert_eq!(done.len(), 120);
    assert!(done.values().all(|n| *n == 1), "{done:?}");
    env.assert_no_orphans();
}

/// Issue 11, done-when 2: three shards of one job file at once, one agent dir.
#[test]
fn three_shards_at_once_answer_every_job_exactly_once_and_share_health() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let jobs_file = write_file(&env, "jobs.jsonl", &jobs(30));
    let outs: Vec<_> = (0..3)
        .map(|i| env.dir.path().join(format!("out-{i}.jsonl")))
        .collect();
    let children: Vec<Child> = (0..3)
        .map(|i| {
            let mut args: Vec<String> = ["--batch", &jobs_file, "--jobs", "2", "--shard"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.push(format!("{i}/3"));
            args.push("--output".into());
            args.push(outs[i].to_str().unwrap().into());
            args.extend(FROM_PRIM.map(String::from));
            spawn(&env, &args, &env.dir.path().join(format!("stderr-{i}.txt")))
        })
        .collect();
    for (i, mut c) in children.into_iter().enumerate() {
        let status = c.wait().expect("wait");
        let stderr =
            std::fs::read_to_string(env.dir.path().join(format!("stderr-{i}.txt"))).unwrap();
        assert_eq!(status.code(), Some(0), "shard {i}: {stderr}");
    }
    let mut answered: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_shard = Vec::new();
    for out in &outs {
        let rs = read_results(out);
        per_shard.push(rs.len());
        for r in &rs {
            assert_eq!(r["ok"], true, "{r}");
            *answered
                .entry(r["id"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
    }
    assert_eq!(answered.len(), 30, "{answered:?}");
    assert!(answered.values().all(|n| *n == 1), "{answered:?}");
    assert!(per_shard.iter().all(|n| *n > 0), "{per_shard:?}");
    let primary = env.llm.requests_to("a", "m").len();
    assert!(
        (1..=6).contains(&primary),
        "the 402 primary got {primary} requests: at most one per worker (3 × 2)"
    );
    env.assert_no_orphans();
}

/// `--resume` re-runs failed and missing jobs only; the recorded answer of a changed job
/// stands; a torn tail and stray lines are dealt with; the exit code covers the whole shard;
/// a second run on a FILE in use is refused.
#[test]
fn resume_runs_what_is_missing_and_the_exit_code_covers_the_shard() {
    let env = TestEnv::new(PI_MIN, &providers());
    let out = env.dir.path().join("out.jsonl");
    let out_arg = out.to_str().unwrap().to_string();
    let with_file = |jobs: &str| {
        let mut lines: Vec<String> = jobs.lines().map(String::from).collect();
        lines[2] = r#"{"id":"doc-2","prompt":"Summarise document 2.","files":["notes.md"]}"#.into();
        lines.join("\n") + "\n"
    };
    let jobs_file = write_file(&env, "jobs.jsonl", &with_file(&jobs(5)));
    let run = |resume: bool| {
        let mut args = vec!["--batch", &jobs_file, "--jobs", "1", "--output", &out_arg];
        if resume {
            args.push("--resume");
        }
        args.extend(FROM_PRIM);
        env.run(args)
    };
    let first = run(false);
    first.assert_code(2).assert_stdout_empty();
    let rs = read_results(&out);
    assert_eq!(rs.len(), 5);
    assert_eq!(successes(&rs).len(), 4, "doc-2's attachment is missing");

    // Meanwhile: the attachment appears, doc-0's prompt changes, doc-5 is added, and the file
    // gets a stray line and a torn tail.
    std::fs::write(env.cwd.join("notes.md"), "Notes.").unwrap();
    let mut changed = with_file(&jobs(6));
    changed = changed.replace("Summarise document 0.", "Summarise document 0 again.");
    std::fs::write(&jobs_file, changed).unwrap();
    let mut raw = std::fs::read(&out).unwrap();
    raw.extend_from_slice(b"this is not a result\n{\"id\":\"doc-9\",\"ok\":tr");
    std::fs::write(&out, raw).unwrap();
    env.llm.clear_requests();
    let second = run(true);
    second.assert_success().assert_stdout_empty();
    let sent: Vec<String> = env.llm.requests().iter().filter_map(job_of).collect();
    assert_eq!(sent, ["doc-2", "doc-5"], "{}", second.dump());
    second
        .assert_stderr_contains(&format!(
            "pi-ccswitch-run: --output {out_arg}: cut off a torn last line (21 bytes without a \
             newline, left by an interrupted run)\n"
        ))
        .assert_stderr_contains(&format!(
            "pi-ccswitch-run: --output {out_arg}: ignored 1 line(s) that are not results\n"
        ))
        .assert_stderr_contains(&format!(
            "pi-ccswitch-run: job doc-0 (input line 1): its input changed since its answer was \
             recorded in {out_arg}; the recorded answer stands (to run it again, delete its \
             line from {out_arg} or give the job a new id)\n"
        ))
        .assert_stderr_contains(
            "[ccswitch] batch: 6 of 6 jobs done, 2 ok, 0 failed, 4 skipped (already done), in ",
        );
    // The stray line stays (the runner never rewrites what it did not write); the rest parses.
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.ends_with('\n'));
    let rs: Vec<Value> = text
        .lines()
        .filter(|l| *l != "this is not a result")
        .map(|l| serde_json::from_str(l).expect("a result line"))
        .collect();
    let done = successes(&rs);
    assert_eq!(done.len(), 6);
    assert!(done.values().all(|n| *n == 1), "{done:?}");

    env.llm.clear_requests();
    let third = run(true);
    third.assert_success().assert_stderr_contains(
        "[ccswitch] batch: 6 of 6 jobs done, 0 ok, 0 failed, 6 skipped (already done), in ",
    );
    assert_eq!(env.llm.requests().len(), 0);

    // Another process holds FILE: refused at once, before any Pi starts.
    let held = std::fs::File::open(&out).unwrap();
    held.lock().unwrap();
    let refused = run(true);
    refused.assert_fails_with(2, "is in use by another pi-ccswitch-run");
    assert_eq!(refused.stderr_lines().len(), 1, "{}", refused.dump());
    drop(held);
}

/// Issue 11, done-when 4: usage and cost in results and in the summary are what Pi reported
/// for what the provider sent.
#[test]
fn usage_and_cost_are_what_pi_reported() {
    let providers = vec![
        ProviderSpec::new("prim", "a", vec![ModelSpec::text("m").cost(2.0, 8.0)]),
        ProviderSpec::new("back", "b", vec![ModelSpec::text("m").cost(3.0, 15.0)]),
    ];
    let env = TestEnv::new(PI_MIN, &providers);
    // prim answers job 0 with nothing (a failed attempt that still cost tokens; its model
    // breaker opens), so back answers both jobs.
    env.llm
        .script("a", "m", vec![Behaviour::text_with_usage("", 40, 0)]);
    env.llm.script(
        "b",
        "m",
        vec![
            Behaviour::text_with_usage("First.", 1000, 200),
            Behaviour::text_with_usage("Second.", 1200, 300),
        ],
    );
    let out = env.dir.path().join("out.jsonl");
    let jobs_file = write_file(&env, "jobs.jsonl", &jobs(2));
    let mut args = vec![
        "--batch",
        &jobs_file,
        "--jobs",
        "1",
        "--output",
        out.to_str().unwrap(),
    ];
    args.extend(FROM_PRIM);
    let run = env.run(args);
    run.assert_success();
    let rs = read_results(&out);
    let by_id = |id: &str| rs.iter().find(|r| r["id"] == id).expect("result").clone();
    let cost = |(i, o): (u64, u64), (pi, po): (f64, f64)| i as f64 * pi / 1e6 + o as f64 * po / 1e6;
    let sent = |route: &str, n: usize| {
        env.llm.requests_to(route, "m")[n]
            .usage_sent
            .expect("usage sent")
    };
    let check = |u: &Value, tokens: (u64, u64), price: (f64, f64)| {
        assert_eq!(u["input_tokens"], tokens.0, "{u}");
        assert_eq!(u["output_tokens"], tokens.1, "{u}");
        assert_eq!(u["total_tokens"], tokens.0 + tokens.1, "{u}");
        let c = u["cost"].as_f64().unwrap();
        assert!((c - cost(tokens, price)).abs() < 1e-12, "{u}");
    };
    let first = by_id("doc-0");
    assert_eq!(first["answer"], "First.", "{first}");
    check(&first["usage"], sent("b", 0), (3.0, 15.0));
    check(&first["failed_usage"], sent("a", 0), (2.0, 8.0));
    check(&first["attempts"][0]["usage"], sent("a", 0), (2.0, 8.0));
    check(&first["attempts"][1]["usage"], sent("b", 0), (3.0, 15.0));
    let second = by_id("doc-1");
    assert_eq!(second["answer"], "Second.");
    check(&second["usage"], sent("b", 1), (3.0, 15.0));
    check(&second["failed_usage"], (0, 0), (0.0, 0.0));
    assert_eq!(
        env.llm.requests_to("a", "m").len(),
        1,
        "prim's open breaker is skipped"
    );
    let total = cost((1000, 200), (3.0, 15.0)) + cost((1200, 300), (3.0, 15.0));
    let failed = cost((40, 0), (2.0, 8.0));
    run.assert_stderr_contains(&format!(
        "batch: answers by model: back/m 2; tokens: 2200 input, 500 output, 0 cache \
         read, 0 cache write, 2700 total; cost {total:.6}; failed attempts: 1 (unknown 1), 40 \
         tokens, cost {failed:.6}\n"
    ));
}

/// Issue 11, done-when 5: the batch flags' usage errors name the argument (exit 2, no Pi).
#[test]
fn batch_flag_usage_errors_name_the_argument() {
    let env = TestEnv::new(PI_MIN, &providers());
    for (args, phrase) in [
        (vec!["--batch", "-", "--resume"], "--output"),
        (
            vec!["--batch", "-", "--shard", "3/3"],
            "--shard expects I/N with whole numbers 0 <= I < N, e.g. 0/4 (got '3/3')",
        ),
        (
            vec!["--batch", "-", "--shard", "0/0"],
            "--shard expects I/N with whole numbers 0 <= I < N, e.g. 0/4 (got '0/0')",
        ),
    ] {
        let out = env.run(&args);
        out.assert_fails_with(2, phrase);
    }
    // An --output that would lose data: the job file itself, or `-` (not stdout).
    let jobs = env.dir.path().join("jobs.jsonl");
    let line = "{\"id\":1,\"prompt\":\"x\"}\n";
    std::fs::write(&jobs, line).unwrap();
    let jobs = jobs.to_str().unwrap();
    env.run(["--batch", jobs, "--output", jobs, "--resume"])
        .assert_fails_with(2, "is the job file itself");
    env.run(["--batch", jobs, "--output", "-"])
        .assert_fails_with(2, "--output -: results go to stdout without --output");
    assert_eq!(std::fs::read_to_string(jobs).unwrap(), line, "untouched");
    assert_eq!(env.llm.requests().len(), 0);
}
