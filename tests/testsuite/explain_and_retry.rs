//! What script and CI users expect (issue 13), through real Pi: `@-` attaches standard input,
//! `--explain` shows the candidate order and every exclusion without sending anything, and an
//! exhausted run says whether a retry could help and when.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::support::*;
use serde_json::{Value, json};

both_versions!(
    stdin_text_is_attached_as_a_file_named_stdin,
    stdin_with_an_image_is_sent_as_an_image,
    explain_names_every_exclusion_and_sends_nothing,
    explain_with_images_and_a_small_window,
);

fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::vision("m")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("m")]),
    ]
}

fn stdin_text_is_attached_as_a_file_named_stdin(v: &str) {
    let env = TestEnv::new(v, &providers());
    let diff = "diff --git a/x b/x\n+added line\n";
    let out = env.run_stdin(
        [
            "--no-tools",
            "--provider",
            "fake-a",
            "--model",
            "m",
            "review this diff",
            "@-",
        ],
        diff.as_bytes(),
    );
    out.assert_success().assert_answer(DEFAULT_TEXT);
    let text = env.llm.requests()[0]
        .last_user_text()
        .expect("user text")
        .to_string();
    assert_eq!(
        text,
        format!("<file name=\"stdin\">\n{diff}\n</file>\n\nreview this diff")
    );
}

fn stdin_with_an_image_is_sent_as_an_image(v: &str) {
    let env = TestEnv::new(v, &providers());
    let png = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/attachments/tiny.png"),
    )
    .expect("fixture");
    let out = env.run_stdin(
        [
            "--no-tools",
            "--provider",
            "fake-a",
            "--model",
            "m",
            "describe",
            "@-",
        ],
        &png,
    );
    out.assert_success();
    let req = &env.llm.requests()[0];
    assert_eq!(req.images.len(), 1, "{}", out.dump());
    assert_eq!(req.images[0].mime, "image/png");
}

#[test]
fn stdin_on_a_terminal_is_a_usage_error_and_no_stdin_is_never_read() {
    let env = TestEnv::new(PI_MIN, &providers());
    // Under a pseudo-terminal (util-linux `script`), stdin is a terminal.
    let line = env.shell_line(["--no-tools", "summarise", "@-"]);
    let script = env.other_cmd("script", ["-qec", &line, "/dev/null"]);
    let out = run_command(script, None, RUN_TIMEOUT);
    out.assert_code(2);
    assert!(
        out.stdout.contains("nothing piped in: stdin"),
        "{}",
        out.dump()
    );
    // A run without `@-` never reads stdin: an open pipe that never closes cannot hang it.
    let mut cmd = env.cmd(["--no-tools", "--provider", "fake-a", "--model", "m", "hi"]);
    cmd.stdin(std::process::Stdio::piped());
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Keep our end of stdin open while the run goes.
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{DEFAULT_TEXT}\n")
    );
}

/// Issue 20: `@-` with standard input closed (`<&-`) or `/dev/null` is an error (it attached
/// nothing, silently, and the model answered about nothing). Issue 28: an empty pipe as the only
/// attachment is nothing to send (exit 2, nothing sent); an empty file beside another
/// attachment is skipped with a warning (the drop-in behaviour), and `--explain` lists it.
#[test]
fn a_closed_stdin_is_an_error_and_an_empty_one_warns() {
    let env = TestEnv::new(PI_NEWEST, &providers());
    let args = [
        "--no-tools",
        "--provider",
        "fake-a",
        "--model",
        "m",
        "summarise",
        "@-",
    ];
    let line = env.shell_line(args);
    for redirect in ["<&-", "</dev/null"] {
        let sh = env.other_cmd("sh", ["-c", &format!("exec {line} {redirect}")]);
        run_command(sh, None, RUN_TIMEOUT).assert_fails_with(
            2,
            "nothing piped in: stdin (@- reads standard input, but it is closed or /dev/null",
        );
    }
    assert!(env.llm.requests().is_empty(), "nothing was sent");
    let out = env.run_stdin(args, b"");
    out.assert_fails_with(2, "stdin is empty: nothing to send");
    assert!(env.llm.requests().is_empty(), "nothing was sent");
    // An empty file beside a real one warns, and the rest is sent.
    let empty = env.cwd.join("empty.md");
    std::fs::write(&empty, "").expect("empty file");
    let real = env.cwd.join("real.md");
    std::fs::write(&real, "Q3 revenue grew.").expect("real file");
    let at = format!("@{}", empty.display());
    let at_real = format!("@{}", real.display());
    let flags = ["--provider", "fake-a", "--model", "m"];
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = extra.to_vec();
        a.extend(flags);
        a.extend([at.as_str(), at_real.as_str(), "summarise"]);
        env.run(a)
    };
    with(&["--no-tools"])
        .assert_success()
        .assert_stderr_contains(&format!(
            "warning: {} is empty; nothing of it was sent",
            empty.display()
        ));
    assert_eq!(env.llm.requests().len(), 1);
    // --explain shows it too.
    with(&["--explain", "--no-tools"])
        .assert_success()
        .assert_stdout_contains(&format!("empty attachments, not sent: {}", empty.display()));
    let out = with(&["--explain", "--json"]);
    assert_eq!(
        out.json()["empty_attachments"][0],
        empty.display().to_string(),
        "{}",
        out.dump()
    );
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn write_state(env: &TestEnv, v: Value) {
    let mut state = v;
    state["schema_version"] = json!(1);
    state["updated_at"] = json!(now_ms());
    std::fs::write(
        env.agent_dir.join("pi-ccswitch-run-state.json"),
        serde_json::to_vec_pretty(&state).expect("json"),
    )
    .expect("write state");
}

fn explain_names_every_exclusion_and_sends_nothing(v: &str) {
    let env = TestEnv::new(
        v,
        &[
            ProviderSpec::new("start", "s", vec![ModelSpec::text("glm-4.6")]),
            ProviderSpec::new("relay", "r", vec![ModelSpec::text("glm-4.6-air")]),
            ProviderSpec::new("cool", "c", vec![ModelSpec::text("qwen-max")]),
            ProviderSpec::new("lease", "l", vec![ModelSpec::text("kimi-k2")]),
            ProviderSpec::new("off", "o", vec![ModelSpec::text("gpt-x")]),
            ProviderSpec::new("ok", "k", vec![ModelSpec::text("deepseek-chat")]),
            ProviderSpec::new("other", "x", vec![ModelSpec::text("mistral-large")]),
        ],
    );
    let now = now_ms();
    write_state(
        &env,
        json!({
            "models": {
                // The start model refused content a minute ago: its family is avoided too.
                "start/glm-4.6": {"consecutive_failures": 1, "total_failures": 1,
                    "last_failure_at": now - 60_000, "cooldown_until": now + 60_000,
                    "last_class": "content_policy"},
                "off/gpt-x": {"disabled": true}
            },
            "providers": {
                "cool": {"consecutive_failures": 1, "total_failures": 1,
                    "last_failure_at": now, "cooldown_until": now + 283_000,
                    "last_class": "rate_limit"},
                "lease": {"consecutive_failures": 1, "total_failures": 1,
                    "last_failure_at": now - 400_000, "cooldown_until": now - 100_000,
                    "lease_until": now + 90_000, "last_class": "rate_limit"}
            }
        }),
    );
    let args = [
        "--explain",
        "--no-tools",
        "--provider",
        "start",
        "--model",
        "glm-4.6",
        "--models",
        "start/*,relay/*,cool/*,lease/*,off/*,ok/*",
        "Summarise the report.",
    ];
    let out = env.run(args);
    out.assert_success();
    for phrase in [
        "start model: start/glm-4.6 — skipped before sending: model breaker open",
        "1. ok/deepseek-chat",
        "relay/glm-4.6-air",
        "family glm avoided",
        "cool/qwen-max",
        "open provider breaker (rate_limit), 4m4",
        "another run holds its probe lease",
        "disabled (pi-ccswitch-run --reactivate to use it again)",
        "other/mistral-large",
        "outside --models",
        "watchdogs: first response 1m30s, stall 2m00s",
        "nothing was sent to any provider",
    ] {
        out.assert_stdout_contains(phrase);
    }
    let mut json_args = vec!["--json"];
    json_args.extend(args);
    let out = env.run(json_args);
    out.assert_success();
    let j = out.json();
    assert_eq!(j["ok"], true);
    assert_eq!(j["candidates"][0]["model"], "ok/deepseek-chat");
    let codes: Vec<(String, String)> = j["excluded"]
        .as_array()
        .expect("excluded")
        .iter()
        .map(|x| {
            (
                x["model"].as_str().unwrap_or_default().to_string(),
                x["code"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for (model, code) in [
        ("relay/glm-4.6-air", "family_avoided"),
        ("cool/qwen-max", "breaker_open"),
        ("lease/kimi-k2", "probe_leased"),
        ("off/gpt-x", "disabled"),
        ("other/mistral-large", "outside_models"),
    ] {
        assert!(
            codes.contains(&(model.to_string(), code.to_string())),
            "{model} {code}: {codes:?}"
        );
    }
    assert!(
        env.llm.requests().is_empty(),
        "the fault server saw nothing"
    );
}

fn explain_with_images_and_a_small_window(v: &str) {
    let env = TestEnv::new(
        v,
        &[
            ProviderSpec::new("txt", "t", vec![ModelSpec::text("m")]),
            ProviderSpec::new("tiny", "y", vec![ModelSpec::vision("m").context(60)]),
            ProviderSpec::new("vis", "v", vec![ModelSpec::vision("m")]),
        ],
    );
    let png =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/attachments/tiny.png");
    let long_prompt = "Describe every detail of this picture carefully. ".repeat(10);
    let out = env.run([
        "--explain",
        "--json",
        "--provider",
        "txt",
        "--model",
        "m",
        &format!("@{}", png.display()),
        &long_prompt,
    ]);
    out.assert_success();
    let j = out.json();
    assert_eq!(j["images"], 1);
    assert_eq!(j["start_skipped"], "text-only and the request has images");
    assert_eq!(j["candidates"][0]["model"], "vis/m");
    let excluded = j["excluded"].to_string();
    assert!(
        excluded.contains(r#""code":"no_image_input""#),
        "{excluded}"
    );
    assert!(
        excluded.contains(r#""code":"window_too_small""#),
        "{excluded}"
    );
    assert!(env.llm.requests().is_empty());
    // Nothing left to try: exit 1, still nothing sent.
    let out = env.run([
        "--explain",
        "--provider",
        "txt",
        "--model",
        "m",
        "--models",
        "txt/*",
        &format!("@{}", png.display()),
        "describe",
    ]);
    out.assert_code(1)
        .assert_stdout_contains("no candidate would be tried (exit 1)");
    assert!(env.llm.requests().is_empty());
}

// ----- retry hints: every exit-1 kind says whether trying later could help ------------------

fn hint_run(behaviour: Behaviour, extra: &[&str]) -> (Output, Value) {
    let env = TestEnv::new(
        PI_MIN,
        &[ProviderSpec::new("only", "o", vec![ModelSpec::text("m")])],
    );
    env.write_settings(&json!({"retry": {"enabled": false}}));
    env.llm.set_default(behaviour);
    let mut args = vec!["--json", "--no-tools", "--provider", "only", "--model", "m"];
    args.extend_from_slice(extra);
    args.push("hello");
    let out = env.run(args);
    out.assert_code(1);
    let j = out.json();
    (out, j["retry"].clone())
}

#[test]
fn a_rate_limit_says_retry_later_and_when() {
    let (out, retry) = hint_run(Behaviour::rate_limited(), &[]);
    assert_eq!(retry["could_help"], true, "{}", out.dump());
    let after = retry["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!((299_000..=300_000).contains(&after), "{after}");
    out.assert_stderr_contains("retry: retrying later could help: only/m is usable again in 5m00s");
}

#[test]
fn an_outage_says_retry_later() {
    let (out, retry) = hint_run(Behaviour::Status503, &[]);
    assert_eq!(retry["could_help"], true, "{}", out.dump());
    assert!(retry["retry_after_ms"].as_u64().is_some());
}

#[test]
fn auth_quota_and_content_policy_say_a_retry_will_not_help() {
    for (behaviour, tip) in [
        (Behaviour::Status401, "check the API keys"),
        (Behaviour::Status402, "top up or raise the quota"),
        (Behaviour::ContentPolicy, "refused the content"),
    ] {
        let (out, retry) = hint_run(behaviour, &[]);
        assert_eq!(retry["could_help"], false, "{}", out.dump());
        assert!(retry["retry_after_ms"].is_null());
        let reason = retry["reason"].as_str().expect("reason");
        assert!(reason.contains("will not help"), "{reason}");
        assert!(reason.contains(tip), "{reason}");
        out.assert_stderr_contains(&format!("retry: {reason}"));
    }
}

#[test]
fn no_image_capable_model_says_a_retry_will_not_help() {
    let png =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/attachments/tiny.png");
    let (out, retry) = hint_run(Behaviour::Ok, &[&format!("@{}", png.display())]);
    assert_eq!(retry["could_help"], false, "{}", out.dump());
    assert_eq!(
        retry["reason"],
        "no model that accepts images is available; retrying will not help"
    );
}
