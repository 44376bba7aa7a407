//! `--batch` through real Pi: input order, shared health across workers, Pi restarted when it
//! dies, invalid lines, per-job attachment errors, and process reuse.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::batch::job;
use crate::support::*;
use serde_json::Value;

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("prim", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("back", "b", vec![ModelSpec::text("m")]),
    ]
}

fn jobs(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"id\":\"doc-{i}\",\"prompt\":\"Summarise document {i}.\"}}\n"))
        .collect()
}

/// `--batch FILE --jobs N` from prim/m, with `n` jobs written to FILE.
fn batch_args(env: &TestEnv, n: usize, workers: &str) -> Vec<String> {
    let path = env.dir.path().join("jobs.jsonl");
    std::fs::write(&path, jobs(n)).expect("write jobs");
    [
        "--batch",
        path.to_str().expect("utf-8 path"),
        "--jobs",
        workers,
        "--no-tools",
        "--provider",
        "prim",
        "--model",
        "m",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect()
}

/// Starts a batch in the background, stdout and stderr piped.
fn spawn_batch(env: &TestEnv, n: usize, workers: &str) -> std::process::Child {
    let mut cmd = env.cmd(batch_args(env, n, workers));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.spawn().expect("spawn")
}

fn results(out: &Output) -> Vec<Value> {
    out.stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{}", out.dump()))
        })
        .collect()
}

#[test]
fn fifty_jobs_two_workers_primary_dead_from_the_start_pi_min() {
    fifty_jobs(PI_MIN);
}

#[test]
fn fifty_jobs_two_workers_primary_dead_from_the_start_pi_newest() {
    fifty_jobs(PI_NEWEST);
}

fn fifty_jobs(v: &str) {
    let env = TestEnv::new(v, &providers());
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--jobs",
            "2",
            "--no-tools",
            "--provider",
            "prim",
            "--model",
            "m",
        ],
        jobs(50).as_bytes(),
    );
    out.assert_success();
    let rs = results(&out);
    assert_eq!(rs.len(), 50, "{}", out.dump());
    let primary = env.llm.requests_to("a", "m").len();
    assert!(
        (1..=2).contains(&primary),
        "primary got {primary} requests\n{}",
        out.dump()
    );
    let mut met_402 = 0;
    for (i, r) in rs.iter().enumerate() {
        assert_eq!(r["id"], format!("doc-{i}"), "input order");
        assert_eq!(r["line"], i + 1);
        assert_eq!(r["exit_code"], 0);
        assert_eq!(r["answer"], "Hello from the fake LLM.");
        assert_eq!(r["model"]["provider"], "back");
        assert_eq!(r["model"]["id"], "m");
        let attempts = r["attempts"].as_array().expect("attempts");
        if attempts.len() == 2 {
            met_402 += 1;
            assert_eq!(attempts[0]["model"], "prim/m");
            assert_eq!(attempts[0]["class"], "quota");
            assert_eq!(attempts[0]["scope"], "provider");
            assert_eq!(attempts[0]["marker"], "status 402");
            assert_eq!(r["switches"], 1);
        } else {
            assert_eq!(attempts.len(), 1, "{r}");
        }
        assert_eq!(attempts.last().expect("attempt")["ok"], true);
    }
    assert_eq!(met_402, primary, "each job that met the 402 says so");
    assert_eq!(env.llm.requests_to("b", "m").len(), 50);
    // Every fallback request is a fresh conversation: one user message, this job's prompt.
    for r in env.llm.requests_to("b", "m") {
        let users = r.messages.iter().filter(|m| m.role == "user").count();
        assert_eq!(users, 1, "{:?}", r.messages);
    }
    out.assert_stderr_contains("batch: 50 of 50 jobs done, 50 ok, 0 failed");
    env.assert_no_orphans();
}

#[test]
fn killing_pi_mid_batch_loses_no_job() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Slow);
    // One worker: the Pi killed is the one whose request is in flight (a Pi killed while still
    // starting is restarted without a word, like one that cannot start).
    let child = spawn_batch(&env, 4, "1");
    env.llm.wait_requests(1, Duration::from_secs(30));
    let runner = child.id();
    let pis: Vec<u32> = pids_with_env_marker(&env.marker())
        .into_iter()
        .filter(|p| *p != runner)
        .collect();
    let all: Vec<String> = pids_with_env_marker(&env.marker())
        .into_iter()
        .map(cmdline)
        .collect();
    assert!(!pis.is_empty(), "Pi processes are running: {all:?}");
    // SAFETY: plain kill(2) of one Pi process the runner started.
    unsafe { libc::kill(pis[0] as i32, libc::SIGKILL) };
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let rs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(rs.len(), 4, "stdout: {stdout}\nstderr: {stderr}");
    for (i, r) in rs.iter().enumerate() {
        assert_eq!(r["id"], format!("doc-{i}"));
        assert_eq!(r["exit_code"], 0, "{r}\nstderr: {stderr}");
    }
    assert!(
        stderr.contains("restarting it and retrying the job"),
        "{stderr}"
    );
    env.assert_no_orphans();
}

#[test]
fn invalid_lines_and_bad_attachments_are_reported_and_the_rest_still_runs() {
    let env = TestEnv::new(PI_MIN, &providers());
    let input = "{\"id\":1,\"prompt\":\"first\"}\nthis is not json\n{\"id\":3,\"prompt\":\"third\",\"files\":[\"missing.md\"]}\n{\"id\":4,\"prompt\":\"fourth\"}\n";
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--jobs",
            "1",
            "--no-tools",
            "--provider",
            "prim",
            "--model",
            "m",
        ],
        input.as_bytes(),
    );
    out.assert_code(2);
    let rs = results(&out);
    assert_eq!(rs.len(), 4);
    assert_eq!(rs[0]["exit_code"], 0);
    assert_eq!(rs[1]["exit_code"], 2);
    assert_eq!(rs[1]["line"], 2);
    assert_eq!(rs[1]["id"], Value::Null);
    assert!(
        rs[1]["error"].as_str().expect("error").contains("line 2"),
        "{}",
        rs[1]
    );
    assert_eq!(rs[2]["exit_code"], 2);
    assert!(
        rs[2]["error"]
            .as_str()
            .expect("error")
            .contains("file not found"),
        "{}",
        rs[2]
    );
    assert_eq!(rs[3]["exit_code"], 0);
    assert_eq!(
        env.llm.requests().len(),
        2,
        "only the valid jobs reached a model"
    );
}

#[test]
fn an_exhausted_job_makes_the_batch_exit_1() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Status402);
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--jobs",
            "1",
            "--no-tools",
            "--provider",
            "prim",
            "--model",
            "m",
        ],
        jobs(2).as_bytes(),
    );
    out.assert_code(1);
    let rs = results(&out);
    assert_eq!(rs.len(), 2);
    assert!(
        rs.iter()
            .all(|r| r["exit_code"] == 1 && r["answer"].is_null())
    );
}

#[test]
fn each_worker_keeps_one_pi_for_all_its_jobs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("pi.log");
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-pi/pi");
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["--batch", "-", "--jobs", "2"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir.path())
        .env("PI_CODING_AGENT_DIR", dir.path().join("agent"))
        .env("PI_BIN", &fake)
        .env("FAKE_PI_LOG", &log)
        .current_dir(dir.path());
    let out = run_command(cmd, Some(jobs(6).as_bytes()), RUN_TIMEOUT);
    out.assert_success();
    assert_eq!(results(&out).len(), 6);
    let log = std::fs::read_to_string(&log).expect("log");
    let spawns = log.lines().filter(|l| *l == "spawn").count();
    let sessions = log
        .lines()
        .filter(|l| l.contains(r#""type":"new_session""#))
        .count();
    let prompts = log
        .lines()
        .filter(|l| l.contains(r#""type":"prompt""#))
        .count();
    assert_eq!(spawns, 2, "one Pi per worker\n{log}");
    assert_eq!(prompts, 6);
    assert_eq!(
        sessions, 4,
        "a fresh session for every job after a worker's first\n{log}"
    );
}

#[test]
fn sigterm_mid_batch_exits_143_and_printed_results_stay_valid_jsonl() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm
        .script("a", "m", vec![Behaviour::Ok, Behaviour::Hang]);
    let child = spawn_batch(&env, 3, "1");
    env.llm.wait_requests(2, Duration::from_secs(30));
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSONL"))
        .collect();
    assert_eq!(rs[0]["exit_code"], 0);
    assert_eq!(rs[0]["id"], "doc-0");
    assert_eq!(
        rs.len(),
        1,
        "the interrupted job is unfinished and prints nothing: {stdout}"
    );
    env.assert_no_orphans();
}

#[test]
fn task_complexity_is_estimated_per_job() {
    let env = TestEnv::new(
        PI_MIN,
        &[ProviderSpec::new(
            "r",
            "a",
            vec![ModelSpec::text("thinker").reasoning()],
        )],
    );
    let input = "{\"id\":1,\"prompt\":\"Say hi\"}\n{\"id\":2,\"prompt\":\"Summarise the notes\"}\n{\"id\":3,\"prompt\":\"Compare the two proposals across sources\"}\n{\"id\":4,\"prompt\":\"Say bye\"}\n";
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--jobs",
            "1",
            "--no-tools",
            "--task-complexity",
            "auto",
        ],
        input.as_bytes(),
    );
    out.assert_success();
    let effort = |text: &str| {
        env.llm
            .requests()
            .into_iter()
            .find(|r| r.last_user_text() == Some(text))
            .and_then(|r| r.reasoning_effort)
    };
    assert_eq!(effort("Say hi").as_deref(), Some("low"), "{}", out.dump());
    assert_eq!(effort("Summarise the notes").as_deref(), Some("medium"));
    assert_eq!(
        effort("Compare the two proposals across sources").as_deref(),
        Some("high")
    );
    assert_eq!(
        effort("Say bye").as_deref(),
        Some("low"),
        "a later job is not stuck at high"
    );
}

/// A closed stdout stops the batch quietly, but with exit 2, not 0, while jobs were never run
/// (issue 29); the exit is the runner's own, as `PIPESTATUS` shows it.
#[test]
fn a_closed_stdout_stops_the_batch() {
    let env = TestEnv::new(PI_MIN, &providers());
    let line = env.shell_line(batch_args(&env, 20, "1"));
    let sh = env.other_cmd(
        "bash",
        [
            "-c",
            &format!("{line} | head -n 1; exit ${{PIPESTATUS[0]}}"),
        ],
    );
    let out = run_command(sh, None, RUN_TIMEOUT);
    out.assert_code(2)
        .assert_stderr_contains("stdout was closed before every job ran");
    assert_eq!(out.stdout.lines().count(), 1);
    let sent = env.llm.requests().len();
    assert!(
        sent < 20,
        "jobs kept running after stdout closed: {sent} requests"
    );
}

#[test]
fn a_line_that_is_not_utf8_is_one_invalid_line() {
    let env = TestEnv::new(PI_MIN, &providers());
    let mut input = b"\xEF\xBB\xBF{\"id\":1,\"prompt\":\"first\"}\n".to_vec();
    input
        .extend_from_slice(b"{\"id\":2,\"prompt\":\"caf\xe9\"}\n{\"id\":3,\"prompt\":\"third\"}\n");
    let out = env.run_stdin(["--batch", "-", "--jobs", "1", "--no-tools"], &input);
    out.assert_code(2);
    let rs = results(&out);
    assert_eq!(rs.len(), 3);
    assert_eq!(rs[0]["exit_code"], 0, "a BOM does not spoil line 1");
    assert_eq!(rs[1]["exit_code"], 2);
    assert!(
        rs[1]["error"]
            .as_str()
            .expect("error")
            .contains("not UTF-8")
    );
    assert_eq!(rs[2]["exit_code"], 0);
}

/// Starting Pi never blocks the event loop (issue 30): while the first job streams its answer
/// (a chunk every 0.5 s), seven more jobs arrive and the other seven of eight workers start
/// their Pi at once, each start held back 6 s by the reaper (`CCSWITCH_TEST_REAPER_DELAY_MS`,
/// as a loaded machine may hold it back). A start that waited for the reaper on the event loop
/// would run the seven starts one after another (their requests 6 s apart, 36 s from first to
/// last) and freeze the running job meanwhile (its run at least 6 s longer than its stream).
/// Here the seven requests come together, and the first job is done well within one hold-back.
#[test]
fn eight_workers_starting_at_once_keep_every_stream_flowing() {
    use std::io::Write as _;
    const HOLD_BACK_MS: u64 = 6000;
    let mut env = TestEnv::new(PI_MIN, &providers());
    env.env("CCSWITCH_TEST_REAPER_DELAY_MS", HOLD_BACK_MS.to_string());
    env.llm.set_default(Behaviour::Slow);
    let mut cmd = env.cmd([
        "--batch",
        "-",
        "--jobs",
        "8",
        "--no-tools",
        "--provider",
        "prim",
        "--model",
        "m",
    ]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = std::time::Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(job(0).as_bytes()).expect("write");
    stdin.flush().expect("flush");
    // The first job's answer is streaming: now the other seven workers start.
    env.llm.wait_requests(1, Duration::from_secs(60));
    let rest: String = (1..8).map(job).collect();
    stdin.write_all(rest.as_bytes()).expect("write");
    drop(stdin);
    let done = child.wait_with_output().expect("wait");
    let out = Output {
        code: done.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&done.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&done.stderr).into_owned(),
        elapsed: started.elapsed(),
    };
    out.assert_success();
    let rs = results(&out);
    assert_eq!(rs.len(), 8, "{}", out.dump());
    for r in &rs {
        assert_eq!(r["ok"], true, "{r}\n{}", out.dump());
        assert_eq!(r["attempts"].as_array().map(Vec::len), Some(1), "{r}");
    }
    let first = rs.iter().find(|r| r["id"] == "doc-0").expect("doc-0");
    let first_ms = first["elapsed_ms"].as_u64().expect("elapsed_ms");
    assert!(
        first_ms < HOLD_BACK_MS,
        "the first job's run took {first_ms} ms: held up while other workers' Pi started\n{}",
        out.dump()
    );
    let later: Vec<std::time::Instant> = env.llm.requests().iter().skip(1).map(|r| r.at).collect();
    assert_eq!(later.len(), 7, "{}", out.dump());
    let spread = later
        .iter()
        .max()
        .expect("some")
        .duration_since(*later.iter().min().expect("some"));
    assert!(
        spread < Duration::from_millis(HOLD_BACK_MS),
        "the seven starts ran one after another ({spread:?} from the first request to the last)\n{}",
        out.dump()
    );
}
