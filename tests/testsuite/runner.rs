//! Single runs through real Pi (0.84.4 and 1.6.0): the answer, attachments, the exit-code
//! contract (timeout, signals, Pi killed, provider error), stdout hygiene, no orphans.

use std::os::unix::fs::symlink;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

both_versions!(
    answers_with_only_the_final_text,
    text_attachments_reach_the_model_wrapped,
    timeout_exits_124_and_stops_pi,
    sigint_exits_130_without_failover,
    sigterm_exits_143,
    pi_killed_mid_run_is_exit_2,
    provider_error_without_fallback_is_exit_1_redacted,
    pi_stderr_never_reaches_stdout,
    only_the_final_answer_after_tool_turns,
    works_through_a_symlink,
);

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new(
            "fake-a",
            "a",
            vec![ModelSpec::vision("alpha-1"), ModelSpec::text("alpha-2")],
        ),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("beta-1")]),
    ]
}

fn only_a() -> Vec<ProviderSpec> {
    vec![ProviderSpec::new(
        "fake-a",
        "a",
        vec![ModelSpec::text("alpha-1")],
    )]
}

const START: [&str; 5] = ["--no-tools", "--provider", "fake-a", "--model", "alpha-1"];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    START.iter().copied().chain(extra.iter().copied()).collect()
}

fn answers_with_only_the_final_text(v: &str) {
    let env = TestEnv::new(v, &providers());
    env.llm.set_default(Behaviour::text("  The answer.  "));
    let out = env.run(args(&["say", "hello"]));
    out.assert_success();
    assert_eq!(out.stdout, "The answer.\n", "{}", out.dump());
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "one request");
    assert_eq!(reqs[0].model, "alpha-1");
    assert_eq!(reqs[0].last_user_text(), Some("say hello"));
    assert_eq!(reqs[0].tools, 0, "--no-tools forwarded");
    env.assert_no_orphans();
}

fn text_attachments_reach_the_model_wrapped(v: &str) {
    let env = TestEnv::new(v, &providers());
    std::fs::write(env.cwd.join("notes.md"), "\u{feff}line one\nline two").expect("write");
    let out = env.run(args(&["@notes.md", "summarise", "this"]));
    out.assert_success();
    let reqs = env.llm.requests();
    let abs = env.cwd.join("notes.md");
    let expected = format!(
        "<file name=\"{}\">\nline one\nline two\n</file>\n\nsummarise this",
        abs.display()
    );
    assert_eq!(reqs[0].last_user_text(), Some(expected.as_str()));
}

/// Starts the runner on a hanging provider and waits until the request reached the server.
fn start_hanging(env: &TestEnv, extra: &[&str]) -> std::process::Child {
    env.llm.set_default(Behaviour::Hang);
    let mut cmd = env.cmd(args(extra));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn runner");
    let reqs = env.llm.wait_requests(1, Duration::from_secs(30));
    assert_eq!(reqs.len(), 1, "the request reached the provider");
    child
}

fn finish(child: std::process::Child, limit: Duration) -> (i32, String, String, Duration) {
    let start = Instant::now();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            // SAFETY: plain kill(2) of a child that overstayed.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("runner did not exit within {limit:?}");
        }
    };
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed(),
    )
}

fn timeout_exits_124_and_stops_pi(v: &str) {
    let env = TestEnv::new(v, &providers());
    env.llm.set_default(Behaviour::Hang);
    let out = env.run(args(&["--timeout-ms", "2500", "say", "hello"]));
    out.assert_code(124).assert_stderr_contains("timed out");
    assert!(out.stdout.is_empty(), "{}", out.dump());
    assert!(out.elapsed < Duration::from_secs(10), "{}", out.dump());
    env.assert_no_orphans();
}

fn signal_case(v: &str, signal: i32, code: i32) {
    let env = TestEnv::new(v, &providers());
    let child = start_hanging(&env, &["say", "hello"]);
    // SAFETY: plain kill(2) to our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let (got, stdout, stderr, took) = finish(child, Duration::from_secs(15));
    assert_eq!(got, code, "stderr: {stderr}");
    assert!(stdout.is_empty(), "stdout: {stdout}");
    assert!(took < Duration::from_secs(5), "stopping took {took:?}");
    assert!(
        !stderr.contains("] switch"),
        "no failover on a user abort: {stderr}"
    );
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "no other model was asked: {reqs:?}");
    env.assert_no_orphans();
}

fn sigint_exits_130_without_failover(v: &str) {
    signal_case(v, libc::SIGINT, 130);
}

fn sigterm_exits_143(v: &str) {
    signal_case(v, libc::SIGTERM, 143);
}

fn pi_killed_mid_run_is_exit_2(v: &str) {
    let env = TestEnv::new(v, &providers());
    let child = start_hanging(&env, &["say", "hello"]);
    let runner = child.id();
    let pis: Vec<u32> = pids_with_env_marker(&env.marker())
        .into_iter()
        .filter(|p| *p != runner)
        .collect();
    assert!(!pis.is_empty(), "Pi is running");
    for p in pis {
        // SAFETY: plain kill(2) of the Pi process the runner started.
        unsafe { libc::kill(p as i32, libc::SIGKILL) };
    }
    let (code, stdout, stderr, _) = finish(child, Duration::from_secs(15));
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("Pi exited before answering"), "{stderr}");
    env.assert_no_orphans();
}

fn provider_error_without_fallback_is_exit_1_redacted(v: &str) {
    let env = TestEnv::new(v, &only_a());
    let secret = "sk-proj-Abc123Def456Ghi789Jkl012Mno345";
    env.llm.set_default(Behaviour::Status(
        401,
        format!(r#"{{"error":{{"message":"Incorrect API key provided: {secret}.","type":"invalid_request_error","code":"invalid_api_key"}}}}"#),
    ));
    let out = env.run(args(&["say", "hello"]));
    out.assert_code(1)
        .assert_stderr_contains("failover exhausted")
        .assert_stderr_contains("fake-a/alpha-1")
        .assert_stderr_contains("401");
    assert!(out.stdout.is_empty());
    assert!(
        !out.stderr.contains(secret),
        "secret leaked: {}",
        out.dump()
    );
    assert!(
        !out.stderr.contains("Abc123Def456"),
        "secret leaked: {}",
        out.dump()
    );
}

fn pi_stderr_never_reaches_stdout(v: &str) {
    let env = TestEnv::new(v, &providers());
    // An unknown model id with a known provider makes Pi warn on stderr and go on with that id
    // as a custom one; the runner refuses it (issue 15) and passes Pi's warning on — on stderr.
    let out = env.run([
        "--no-tools",
        "--provider",
        "fake-a",
        "--model",
        "no-such-id",
        "hi",
    ]);
    out.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains("Pi: Warning: Model \"no-such-id\" not found")
        .assert_stderr_contains("unknown model 'no-such-id'");
    assert!(env.llm.requests().is_empty(), "nothing was sent");
}

fn only_the_final_answer_after_tool_turns(v: &str) {
    let env = TestEnv::new(v, &providers());
    env.llm.script(
        "a",
        "alpha-1",
        vec![
            Behaviour::tool("ls", serde_json::json!({"path": "."})),
            Behaviour::text("Final answer after the tool."),
        ],
    );
    let out = env.run([
        "--provider",
        "fake-a",
        "--model",
        "alpha-1",
        "list",
        "files",
    ]);
    out.assert_success();
    assert_eq!(
        out.stdout,
        "Final answer after the tool.\n",
        "{}",
        out.dump()
    );
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1].roles().contains(&"tool"),
        "the tool result went back: {:?}",
        reqs[1].roles()
    );
}

fn works_through_a_symlink(v: &str) {
    let env = TestEnv::new(v, &providers());
    let link = env.dir.path().join("bin-link");
    symlink(BIN, &link).expect("symlink");
    let real = env.other_cmd(&link, args(&["hi"]));
    let out = run_command(real, None, RUN_TIMEOUT);
    out.assert_success();
    assert_eq!(out.stdout, "Hello from the fake LLM.\n");
}

/// The `--json` object is a public interface: exactly these keys, these types.
#[test]
fn json_schema_is_pinned() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "alpha-1", vec![Behaviour::Status402]);
    let out = env.run(args(&["--json", "say", "hello"]));
    out.assert_success();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON object");
    assert_eq!(out.stdout.lines().count(), 1, "one line");
    let keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "answer",
            "attempts",
            "capacity_wait_ms",
            "elapsed_ms",
            "error",
            "exit_code",
            "failed_usage",
            "model",
            "ok",
            "partial",
            "permanent",
            "primary_wait_ms",
            "rejected_answer",
            "retry",
            "schema_errors",
            "structured_output",
            "switches",
            "usage",
            "wait_ms",
            "warnings"
        ]
    );
    assert_eq!(v["ok"], true);
    assert_eq!(v["answer"], "Hello from the fake LLM.");
    assert_eq!(
        v["model"],
        serde_json::json!({"provider": "fake-b", "id": "beta-1"})
    );
    assert_eq!(v["switches"], 1);
    assert_eq!(v["exit_code"], 0);
    assert!(v["error"].is_null());
    assert!(v["elapsed_ms"].as_u64().is_some());
    let attempts = v["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2);
    for a in attempts {
        let keys: Vec<&str> = a
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "capacity_signal",
                "class",
                "duration_ms",
                "error",
                "marker",
                "model",
                "ok",
                "scope",
                "usage"
            ]
        );
    }
    assert_eq!(v["capacity_wait_ms"], 0, "its providers had room");
    assert_eq!(attempts[0]["capacity_signal"], false);
    assert_eq!(attempts[0]["model"], "fake-a/alpha-1");
    assert_eq!(attempts[0]["class"], "quota");
    assert_eq!(attempts[0]["scope"], "provider");
    assert_eq!(attempts[0]["marker"], "status 402");
    assert!(
        attempts[0]["error"]
            .as_str()
            .expect("error")
            .starts_with("402: ")
    );
    assert_eq!(attempts[1]["ok"], true);

    // Failures keep the exit code and still print the object.
    let env = TestEnv::new(PI_MIN, &only_a());
    env.llm.set_default(Behaviour::Status402);
    let out = env.run(args(&["--json", "say", "hello"]));
    out.assert_code(1);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["ok"], false);
    assert!(v["answer"].is_null() && v["model"].is_null());
    assert!(
        v["error"]
            .as_str()
            .expect("error")
            .contains("failover exhausted")
    );
    // An attachment error is exit 2 with the object too.
    let out = env.run(args(&["--json", "@missing.txt", "hi"]));
    out.assert_code(2);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v["exit_code"], 2);
}

/// The live status line appears only on a terminal.
#[test]
fn live_status_only_on_a_terminal() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::Slow);
    let out = env.run(args(&["say", "hello"]));
    out.assert_success();
    assert!(
        !out.stderr.contains('\r') && !out.stderr.contains('⟳'),
        "{}",
        out.dump()
    );
    // Under a pseudo-terminal (util-linux `script`), stderr is a terminal.
    let line = env.shell_line(args(&["say", "hello"]));
    let script = env.other_cmd(
        "script",
        ["-qec", &format!("{line} 2>&1 >/dev/null"), "/dev/null"],
    );
    let out = run_command(script, None, RUN_TIMEOUT);
    out.assert_success();
    assert!(
        out.stdout.contains("⟳ fake-a/alpha-1 · attempt 1"),
        "{}",
        out.dump()
    );
}

/// Real Pi under the system's Node: this machine kind ships Node 20, on which Pi crashes at
/// start-up; the runner must say that Pi needs Node >= 22.19 (exit 2). Where the system Node
/// is new enough, the same run must simply work.
#[test]
fn real_pi_under_the_system_node() {
    let env = TestEnv::new(PI_MIN, &providers());
    let system_node = std::process::Command::new("/usr/bin/env")
        .args(["PATH=/usr/local/bin:/usr/bin:/bin", "node", "--version"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut cmd = env.cmd(args(&["hi"]));
    cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let out = run_command(cmd, None, RUN_TIMEOUT);
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut it = v
            .trim_start_matches('v')
            .split('.')
            .map(|p| p.parse::<u64>().ok());
        Some((it.next()??, it.next()??))
    };
    match parse(&system_node) {
        Some(v) if v >= (22, 19) => {
            out.assert_success();
        }
        _ => {
            out.assert_code(2)
                .assert_stderr_contains("Pi needs Node.js >= 22.19");
            assert!(out.stdout.is_empty());
        }
    }
}
