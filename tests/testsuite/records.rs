//! One result record (issue 28): `--json` prints the same keys for every exit code — an answer,
//! failover exhausted, an attachment error, a usage error, only empty attachments, a spend cap,
//! the deadline, SIGINT and SIGTERM — and a batch writes those keys plus its job's own for
//! every job, whatever it came to. A single run whose attachments are all empty (stdin
//! included) fails like a batch job: exit 2, nothing sent.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::batch::*;
use crate::support::*;

/// A single run's record, as README documents it.
const RUN_KEYS: [&str; 20] = [
    "ok",
    "answer",
    "structured_output",
    "partial",
    "rejected_answer",
    "schema_errors",
    "model",
    "attempts",
    "switches",
    "elapsed_ms",
    "capacity_wait_ms",
    "wait_ms",
    "primary_wait_ms",
    "usage",
    "failed_usage",
    "exit_code",
    "error",
    "retry",
    "permanent",
    "warnings",
];

/// What a batch record adds.
const JOB_KEYS: [&str; 6] = [
    "id",
    "line",
    "input_hash",
    "line_hash",
    "attachments",
    "content_hash",
];

fn key_set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_string()).collect()
}

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// The one line of stdout, as printed: a record whose keys come in README's order.
#[track_caller]
fn record(out: &Output, code: i32) -> Value {
    out.assert_code(code).assert_no_panic();
    assert_eq!(out.stdout.lines().count(), 1, "one line: {}", out.dump());
    assert!(
        out.stdout.starts_with("{\"ok\":"),
        "keys in README's order: {}",
        out.stdout
    );
    let v: Value = serde_json::from_str(&out.stdout).expect("a JSON record");
    assert_eq!(keys_of(&v), key_set(&RUN_KEYS), "exit {code}: {v}");
    assert_eq!(v["exit_code"], code, "{v}");
    assert_eq!(v["ok"], code == 0, "{v}");
    if code == 0 {
        assert!(v["error"].is_null());
    } else {
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    v
}

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("prim", "a", vec![ModelSpec::text("m").cost(10.0, 0.0)]),
        ProviderSpec::new("back", "b", vec![ModelSpec::text("m").cost(10.0, 0.0)]),
    ]
}

fn run(env: &TestEnv, extra: &[&str]) -> Output {
    let mut args = FROM_PRIM.to_vec();
    args.push("--json");
    args.extend_from_slice(extra);
    env.run(args)
}

/// Runs `args` and sends `signal` once the request reached the provider.
fn signalled(env: &TestEnv, args: &[&str], signal: i32) -> Output {
    let mut cmd: Command = env.cmd(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn the runner");
    let pid = child.id();
    assert_eq!(env.llm.wait_requests(1, Duration::from_secs(30)).len(), 1);
    // SAFETY: plain kill(2) to our own child.
    unsafe { libc::kill(pid as i32, signal) };
    let out = child.wait_with_output().expect("wait for the runner");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: Duration::ZERO,
    }
}

#[test]
fn every_exit_code_prints_one_record_with_the_same_keys() {
    let env = TestEnv::new(PI_MIN, &providers());
    // 0: an answer after a failover.
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let v = record(&run(&env, &["say", "hello"]), 0);
    assert_eq!(v["answer"], DEFAULT_TEXT);
    assert_eq!(v["permanent"], false);
    assert_eq!(v["warnings"], serde_json::json!([]));

    // 1: every candidate out of quota.
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "*", vec![Behaviour::Status402]);
    env.llm.script("b", "*", vec![Behaviour::Status402]);
    let v = record(&run(&env, &["--no-wait", "say", "hello"]), 1);
    assert!(v["retry"]["could_help"].is_boolean(), "{v}");

    // 2: a missing attachment (it was built by hand before, without capacity_wait_ms), a
    // binary one (permanent), a mistyped flag, and a bad PI_BIN.
    let env = TestEnv::new(PI_MIN, &providers());
    let v = record(&run(&env, &["@/nonexistent", "hi"]), 2);
    assert_eq!(v["error"], "file not found: /nonexistent");
    assert_eq!(v["permanent"], false);
    let pdf = write_file(&env, "scan.md", "%PDF-1.4 binary");
    let v = record(&run(&env, &[&format!("@{pdf}"), "hi"]), 2);
    assert_eq!(v["permanent"], true, "{v}");
    let out = env.run(["--json", "--modle", "glm-4.6", "hi"]);
    let v = record(&out, 2);
    assert_eq!(
        v["error"],
        "unsupported option: --modle (did you mean --model?)"
    );
    out.assert_stderr_contains("unsupported option: --modle (did you mean --model?)");
    // `--json` after the mistake counts too; after `--` it is prompt text.
    record(&env.run(["--modle", "x", "--json", "hi"]), 2);
    let out = env.run(["--modle", "x", "--", "--json"]);
    out.assert_code(2).assert_stdout_empty();
    let mut bad_pi = TestEnv::new(PI_MIN, &providers());
    bad_pi.env("PI_BIN", "/bin/false");
    let v = record(&run(&bad_pi, &["hi"]), 2);
    assert!(v["error"].as_str().unwrap().contains("PI_BIN"), "{v}");

    // 3: a spend cap reached by the first attempt.
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm
        .script("a", "m", vec![Behaviour::text_with_usage("", 1000, 0)]);
    record(&run(&env, &["--max-cost", "0.005", "hi"]), 3);

    // 124: the deadline, with the request pending.
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Hang);
    let v = record(&run(&env, &["--timeout-ms", "1500", "hi"]), 124);
    assert_eq!(v["attempts"][0]["marker"], "timeout", "{v}");

    // 130 and 143: a signal while the request is pending.
    for (signal, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let env = TestEnv::new(PI_MIN, &providers());
        env.llm.set_default(Behaviour::Hang);
        let mut args = FROM_PRIM.to_vec();
        args.extend(["--json", "hi"]);
        record(&signalled(&env, &args, signal), code);
        env.assert_no_orphans();
    }
}

/// `git diff A...A | pi-ccswitch-run … @- "Review this diff"`: nothing to review, so nothing is
/// sent and the run fails (exit 2) as a batch job would — with an empty file too, and with
/// `--explain`; one empty attachment beside a real one is still skipped with a warning.
#[test]
fn a_single_run_with_only_empty_attachments_fails_and_sends_nothing() {
    let env = TestEnv::new(PI_MIN, &providers());
    let mut args = FROM_PRIM.to_vec();
    args.extend(["@-", "Review this diff"]);
    let out = env.run_stdin(&args, b"");
    out.assert_fails_with(2, "stdin is empty: nothing to send")
        .assert_stdout_empty();
    let empty = write_file(&env, "empty.md", "");
    let out = run(&env, &[&format!("@{empty}"), "Summarise"]);
    let v = record(&out, 2);
    assert_eq!(
        v["error"],
        format!("{empty} is empty: nothing to send").as_str()
    );
    assert_eq!(v["permanent"], true);
    let at_empty = format!("@{empty}");
    let mut args = FROM_PRIM.to_vec();
    args.extend(["--explain", &at_empty, "Summarise"]);
    env.run(&args)
        .assert_fails_with(2, "is empty: nothing to send");
    assert!(env.llm.requests().is_empty(), "nothing was sent");
    // Beside a real attachment the empty one is skipped, as before, and said so.
    let real = write_file(&env, "real.md", "Q3 revenue grew.");
    let at_real = format!("@{real}");
    let mut args = FROM_PRIM.to_vec();
    args.extend([at_empty.as_str(), at_real.as_str(), "Summarise"]);
    env.run(&args)
        .assert_success()
        .assert_stderr_contains(&format!(
            "warning: {empty} is empty; nothing of it was sent"
        ));
    assert_eq!(env.llm.requests().len(), 1);
}

/// Every batch result has the single run's keys plus the job's own, whatever the job came to:
/// an answer (with and without files), a missing file, an empty file, an invalid line, exhausted
/// failover and the deadline.
#[test]
fn every_batch_result_has_the_same_keys() {
    let mut expected = key_set(&RUN_KEYS);
    expected.extend(key_set(&JOB_KEYS));
    let batch = |env: &TestEnv, lines: &[String], extra: &[&str], code: i32| -> Vec<Value> {
        let jobs = write_file(env, "jobs.jsonl", &(lines.join("\n") + "\n"));
        let mut args = FROM_PRIM.to_vec();
        args.extend(["--batch", jobs.as_str(), "--jobs", "2", "--no-wait"]);
        args.extend_from_slice(extra);
        let out = env.run(&args);
        out.assert_code(code).assert_no_panic();
        let results = out.json_lines();
        assert_eq!(results.len(), lines.len(), "{}", out.dump());
        for r in &results {
            assert_eq!(keys_of(r), expected, "{r}");
        }
        results
    };
    let env = TestEnv::new(PI_MIN, &providers());
    let report = write_file(&env, "r.md", "Q3 revenue grew.");
    let empty = write_file(&env, "empty.md", "");
    let lines = [
        job(0).trim_end().to_string(),
        serde_json::json!({"id": "doc-1", "prompt": "Summarise document 1.", "files": [report]})
            .to_string(),
        serde_json::json!({"id": "doc-2", "prompt": "Summarise document 2.", "files": ["/nonexistent"]})
            .to_string(),
        serde_json::json!({"id": "doc-3", "prompt": "Summarise document 3.", "files": [empty]})
            .to_string(),
        r#"{"id":"doc-4","promt":"typo"}"#.to_string(),
        "not json".to_string(),
    ];
    let results = batch(&env, &lines, &[], 2);
    let codes: Vec<i64> = results
        .iter()
        .map(|r| r["exit_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [0, 0, 2, 2, 2, 2]);
    assert_eq!(
        results[1]["attachments"][0]["sha256"]
            .as_str()
            .map(str::len),
        Some(64)
    );
    assert_eq!(results[0]["attachments"], serde_json::json!([]));
    assert!(results[0]["line_hash"].is_null() && results[0]["content_hash"].is_null());
    assert!(results[5]["line_hash"].is_string() && results[5]["input_hash"].is_null());
    let permanent: Vec<bool> = results.iter().map(|r| r["permanent"] == true).collect();
    assert_eq!(permanent, [false, false, false, true, true, true]);

    // Failover exhausted (1), then the deadline (124).
    env.llm.script("a", "*", vec![Behaviour::Status402]);
    env.llm.script("b", "*", vec![Behaviour::Status402]);
    let results = batch(&env, &[job(0).trim_end().to_string()], &[], 1);
    assert_eq!(results[0]["exit_code"], 1);
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Hang);
    let results = batch(
        &env,
        &[job(0).trim_end().to_string()],
        &["--timeout-ms", "1500"],
        124,
    );
    assert_eq!(results[0]["exit_code"], 124);
}
