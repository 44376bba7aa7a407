//! Health that outlives the run, through real Pi: a dead provider is skipped by later runs, one
//! probe after the cooldown, bad state files, secrets, and the management flags.

use crate::support::*;
use serde_json::Value;

const STATE: &str = "pi-ccswitch-run-state.json";
const LOG: &str = "pi-ccswitch-run.log";
const SECRET: &str = "sk-proj-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1";
const BEARER: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl";

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("prov-a", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("prov-b", "b", vec![ModelSpec::text("m")]),
    ]
}

fn run(env: &TestEnv) -> Output {
    env.run([
        "--no-tools",
        "--provider",
        "prov-a",
        "--model",
        "m",
        "hello",
    ])
}

fn state(env: &TestEnv) -> Value {
    let text = std::fs::read_to_string(env.agent_dir.join(STATE)).expect("state file");
    serde_json::from_str(&text).expect("state parses")
}

/// Ends every cooldown in the state file now (as if the cooldown had passed), so tests never
/// wait for real time.
fn expire_cooldowns(env: &TestEnv) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let mut s = state(env);
    for scope in ["models", "providers", "endpoints"] {
        if let Some(map) = s[scope].as_object_mut() {
            for record in map.values_mut() {
                if record["cooldown_until"].is_u64() {
                    record["cooldown_until"] = serde_json::json!(now - 1);
                }
            }
        }
    }
    std::fs::write(
        env.agent_dir.join(STATE),
        serde_json::to_vec_pretty(&s).expect("json"),
    )
    .expect("write state");
}

#[test]
fn a_dead_provider_is_skipped_by_the_next_run_and_probed_once_after_the_cooldown() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script("a", "m", vec![Behaviour::Status402]);

    let first = run(&env);
    first
        .assert_success()
        .assert_stderr_contains("switch prov-a/m → prov-b/m (quota)");
    assert_eq!(env.llm.requests_to("a", "m").len(), 1);
    assert_eq!(state(&env)["providers"]["prov-a"]["last_class"], "quota");

    // A new process: not a single request to the dead provider.
    let second = run(&env);
    second
        .assert_success()
        .assert_stderr_contains("start: prov-a/m is provider breaker open");
    assert_eq!(second.stdout, "Hello from the fake LLM.\n");
    assert_eq!(env.llm.requests_to("a", "m").len(), 1, "{}", second.dump());

    // After the cooldown, two concurrent runs: exactly one probes prov-a (it is still dead).
    expire_cooldowns(&env);
    let a = env.cmd([
        "--no-tools",
        "--provider",
        "prov-a",
        "--model",
        "m",
        "-v",
        "one",
    ]);
    let b = env.cmd([
        "--no-tools",
        "--provider",
        "prov-a",
        "--model",
        "m",
        "-v",
        "two",
    ]);
    let ta = std::thread::spawn(move || run_command(a, None, RUN_TIMEOUT));
    let tb = std::thread::spawn(move || run_command(b, None, RUN_TIMEOUT));
    let (oa, ob) = (ta.join().expect("run a"), tb.join().expect("run b"));
    oa.assert_success();
    ob.assert_success();
    let probes = env.llm.requests_to("a", "m").len() - 1;
    assert_eq!(probes, 1, "exactly one probe\n{}\n{}", oa.dump(), ob.dump());
    let s = state(&env);
    assert_eq!(s["providers"]["prov-a"]["total_failures"], 2);
    assert_eq!(
        s["providers"]["prov-a"]["consecutive_failures"], 2,
        "cooldown doubled"
    );
    assert_eq!(s["models"]["prov-b/m"]["total_successes"], 4);
}

#[test]
fn a_successful_probe_closes_the_breakers() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.script(
        "a",
        "m",
        vec![Behaviour::Status402, Behaviour::text("a is back")],
    );
    run(&env).assert_success();
    expire_cooldowns(&env);
    let out = run(&env);
    out.assert_success();
    assert_eq!(out.stdout, "a is back\n");
    let s = state(&env);
    assert_eq!(s["providers"]["prov-a"]["consecutive_failures"], 0);
    assert_eq!(s["providers"]["prov-a"]["cooldown_until"], Value::Null);
}

#[test]
fn secrets_in_provider_errors_never_reach_state_log_or_output() {
    let env = TestEnv::new(PI_MIN, &providers());
    let body = format!(
        r#"{{"error":{{"message":"quota exceeded for key {SECRET}; request had Authorization: Bearer {BEARER}","type":"insufficient_quota"}}}}"#
    );
    env.llm.script("a", "m", vec![Behaviour::Status(402, body)]);
    let out = env.run([
        "--no-tools",
        "--provider",
        "prov-a",
        "--model",
        "m",
        "-v",
        "hello",
    ]);
    out.assert_success();
    let status = env.run(["--status"]);
    let json_status = env.run(["--status", "--json"]);
    let files = [
        std::fs::read_to_string(env.agent_dir.join(STATE)).expect("state"),
        std::fs::read_to_string(env.agent_dir.join(LOG)).expect("log"),
    ];
    for (what, text) in [
        ("stdout", &out.stdout),
        ("stderr", &out.stderr),
        ("status", &status.stdout),
        ("status json", &json_status.stdout),
        ("state", &files[0]),
        ("log", &files[1]),
    ] {
        for secret in [SECRET, BEARER, "Zz9Yy8Xx", "c2lnbmF0dXJl"] {
            assert!(!text.contains(secret), "{what} leaks {secret}: {text}");
        }
    }
    assert!(out.stderr.contains("[redacted]"), "{}", out.dump());
    assert!(files[0].contains("[redacted]"));
}

#[test]
fn corrupt_state_is_quarantined_and_the_run_still_answers() {
    let env = TestEnv::new(PI_MIN, &providers());
    std::fs::write(env.agent_dir.join(STATE), "{ not json").expect("write");
    let out = run(&env);
    out.assert_success().assert_stderr_contains("moved it to");
    assert_eq!(out.stdout, "Hello from the fake LLM.\n");
    let moved: Vec<_> = std::fs::read_dir(&env.agent_dir)
        .expect("list")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{STATE}.corrupt-"))
        })
        .collect();
    assert_eq!(moved.len(), 1);
    assert_eq!(
        std::fs::read_to_string(moved[0].path()).expect("read"),
        "{ not json"
    );
    assert_eq!(state(&env)["schema_version"], 1);
}

#[test]
fn a_newer_schema_is_never_overwritten() {
    let env = TestEnv::new(PI_MIN, &providers());
    let future = r#"{"schema_version": 99, "something": "from the future"}"#;
    std::fs::write(env.agent_dir.join(STATE), future).expect("write");
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let out = run(&env);
    out.assert_success()
        .assert_stderr_contains("schema version 99");
    assert_eq!(out.stdout, "Hello from the fake LLM.\n");
    assert_eq!(
        std::fs::read_to_string(env.agent_dir.join(STATE)).expect("read"),
        future
    );
}

#[test]
fn an_unwritable_state_dir_warns_and_the_run_still_answers() {
    let env = TestEnv::new(PI_MIN, &providers());
    // Root ignores permissions, so make the lock file impossible to open instead: a directory
    // where the lock file should be fails the same way a read-only directory does.
    std::fs::create_dir(env.agent_dir.join("pi-ccswitch-run-state.lock")).expect("mkdir");
    env.llm.script("a", "m", vec![Behaviour::Status402]);
    let out = run(&env);
    out.assert_success()
        .assert_stderr_contains("health is not shared this run")
        .assert_stderr_contains("switch prov-a/m → prov-b/m (quota)");
    assert_eq!(out.stdout, "Hello from the fake LLM.\n");
    assert!(!env.agent_dir.join(STATE).exists());
}

#[test]
fn management_flags_disable_reactivate_reset_and_status() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.run(["--disable", "prov-a/m"])
        .assert_success()
        .assert_stdout_contains("disabled prov-a/m");
    let out = run(&env);
    out.assert_success()
        .assert_stderr_contains("start: prov-a/m is disabled");
    assert!(env.llm.requests_to("a", "m").is_empty());

    let status = env.run(["--status"]);
    status.assert_success();
    assert!(status.stdout.starts_with("MODEL"), "{}", status.dump());
    assert!(status.stdout.contains("prov-a/m"), "{}", status.dump());
    assert!(status.stdout.contains("disabled"), "{}", status.dump());
    assert!(
        status
            .stdout
            .contains("2 models: 1 healthy, 0 cooling, 1 disabled"),
        "{}",
        status.dump()
    );
    let j: Value = serde_json::from_str(&env.run(["--status", "--json"]).stdout).expect("json");
    assert_eq!(j["disabled"], 1);
    assert_eq!(j["healthy"], 1);
    // Starting elsewhere because a model is disabled or cooling is not a failover: the shared
    // switch log only records switches after real failures.
    assert_eq!(j["switches"], 0);

    env.run(["--reactivate", "prov-a/m"]).assert_success();
    run(&env).assert_success();
    assert_eq!(
        env.llm.requests_to("a", "m").len(),
        1,
        "prov-a is used again"
    );

    env.run(["--reset", "all"]).assert_success();
    let j: Value = serde_json::from_str(&env.run(["--status", "--json"]).stdout).expect("json");
    assert_eq!(j["switches"], 0);
    assert!(
        j["models"]
            .as_array()
            .expect("models")
            .iter()
            .all(|m| m["state"] == "healthy")
    );
}

#[test]
fn doctor_checks_each_part_and_fails_with_exit_2() {
    let env = TestEnv::new(PI_MIN, &providers());
    let out = env.run(["--doctor"]);
    out.assert_success();
    for line in [
        "ok   pi:",
        "ok   node: v22",
        "ok   pi version: 0.84.4",
        "ok   agent dir:",
        "ok   models: 2 available",
        "ok   state file:",
    ] {
        assert!(
            out.stdout.contains(line),
            "missing {line:?}\n{}",
            out.dump()
        );
    }
    let mut cmd = env.cmd(["--doctor"]);
    cmd.env("PATH", "/usr/bin:/bin");
    let out = run_command(cmd, None, RUN_TIMEOUT);
    out.assert_code(2);
    assert!(out.stdout.contains("FAIL node"), "{}", out.dump());
}
