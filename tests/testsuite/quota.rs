//! Quota windows that say when they reset (issue 24), through real Pi (0.84.4 and 1.6.0) and the
//! fault server with the vendors' real bodies: the breaker stays open until the stated reset,
//! the retry hint says when (in local time and UTC), a quota failure is never left to Pi's own
//! retry, a batch waits for a window that reopens within its deadline, and several keys of
//! one provider (one provider entry each, same base URL) stand in for each other.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::*;
use serde_json::Value;

both_versions!(
    glm_1308_in_new_york,
    glm_1308_in_utc,
    zai_1310_iso_z,
    minimax_2056_plus_0800,
    utc_plus_8_is_beijing_time,
    a_monthly_window_beyond_the_bound_leaves_the_five_hour_one,
    an_unstated_quota_on_the_last_candidate_ends_at_once,
    a_batch_waits_for_the_earliest_stated_reset,
    a_failed_key_moves_to_the_same_model_on_the_other_key,
    a_server_error_skips_every_key_of_the_server,
);

const PROMPT: &str = "Summarise the plan.";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// A whole second `secs` from now (the bodies state whole seconds).
fn reset_in(secs: u64) -> u64 {
    (now_ms() / 1000 + secs) * 1000
}

/// `YYYY-MM-DD HH:MM:SS ±HH:MM` of `unix_ms` in zone `tz`, as `date` (coreutils and the
/// system's zone database, not our code) prints it.
fn date_in(tz: &str, unix_ms: u64) -> String {
    let out = std::process::Command::new("date")
        .env("TZ", tz)
        .args([
            "-d",
            &format!("@{}", unix_ms / 1000),
            "+%Y-%m-%d %H:%M:%S %:z",
        ])
        .output()
        .expect("date runs");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

fn utc(unix_ms: u64) -> String {
    date_in("UTC", unix_ms)
        .strip_suffix(" +00:00")
        .expect("UTC offset")
        .to_string()
}

#[track_caller]
fn within(actual: u64, expected: u64, slack: u64, what: &str, dump: &str) {
    assert!(
        actual.abs_diff(expected) <= slack,
        "{what}: {actual} is not within {slack} of {expected}\n{dump}"
    );
}

/// One provider `coding` whose only model answers `body(reset)`, a reset 3 minutes ahead: exit
/// 1 at once (one request: Pi's retry cut short), `retry_after_ms` within 5 s of the 3
/// minutes and the reason naming the provider and the time in `tz` and UTC; the breaker's
/// cooldown matches in `--status --json` and the table shows the stated reset.
fn stated_reset_case(v: &str, body: fn(u64) -> Behaviour, tz: &str) {
    let mut env = TestEnv::new(
        v,
        &[ProviderSpec::new(
            "coding",
            "a",
            vec![ModelSpec::text("glm-4.6")],
        )],
    );
    env.env("TZ", tz);
    let reset = reset_in(180);
    env.llm.script("a", "glm-4.6", vec![body(reset)]);
    let started = Instant::now();
    let out = env.run([
        "--json",
        "--no-tools",
        "--provider",
        "coding",
        "--model",
        "glm-4.6",
        PROMPT,
    ]);
    let ended = started + out.elapsed;
    out.assert_code(1);
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "no retry of a used-up quota\n{}", out.dump());
    let after_failure = ended.saturating_duration_since(reqs[0].at);
    assert!(
        after_failure < Duration::from_millis(1000),
        "ended {after_failure:?} after the failing request (no Pi retry)\n{}",
        out.dump()
    );
    let j = out.json();
    let retry = &j["retry"];
    assert_eq!(retry["could_help"], true, "{}", out.dump());
    let after = retry["retry_after_ms"].as_u64().expect("retry_after_ms");
    within(after, 180_000, 5_000, "retry_after_ms", &out.dump());
    let reason = retry["reason"].as_str().expect("reason");
    let expected = format!(
        "coding stated its limit resets at {} ({} UTC)",
        date_in(tz, reset),
        utc(reset)
    );
    assert!(reason.contains(&expected), "{reason}\nwanted: {expected}");

    let status = env.run(["--status", "--json"]);
    status.assert_success();
    let sj = status.json();
    let row = sj["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["model"] == "coding/glm-4.6")
        .expect("the model's row")
        .clone();
    assert_eq!(row["state"], "cooling", "{row}");
    assert_eq!(row["blocked_by"], "provider", "{row}");
    within(
        row["cooldown_remaining_ms"].as_u64().expect("remaining"),
        180_000,
        5_000,
        "cooldown",
        &row.to_string(),
    );
    let stated = &row["stated_reset"];
    assert_eq!(stated["breaker"], "provider", "{row}");
    assert_eq!(stated["key"], "coding", "{row}");
    assert_eq!(stated["at_ms"], reset, "{row}");
    let reopens = stated["reopens_at_ms"].as_u64().expect("reopens_at_ms");
    assert!(
        (reset..=reset + 3000).contains(&reopens),
        "reopens {reopens} vs reset {reset}"
    );
    assert_eq!(row["reopens_at_ms"], reopens, "{row}");
    let table = env.run(["--status"]);
    table.assert_success().assert_stdout_contains(&format!(
        "provider coding: resets at {}",
        date_in(tz, reset)
    ));
    env.assert_no_orphans();
}

fn glm_1308_in_new_york(v: &str) {
    stated_reset_case(v, Behaviour::glm_1308, "America/New_York");
}

/// Zhipu's zone-less time is Beijing time whatever the machine's zone: the same instant in UTC.
fn glm_1308_in_utc(v: &str) {
    stated_reset_case(v, Behaviour::glm_1308, "UTC");
}

fn zai_1310_iso_z(v: &str) {
    stated_reset_case(v, Behaviour::zai_1310, "America/New_York");
}

fn minimax_2056_plus_0800(v: &str) {
    stated_reset_case(v, Behaviour::minimax_2056, "Asia/Shanghai");
}

/// Issue 29: `… reset at 2026-12-02 14:34:09 UTC+8` is Beijing time (it was read as UTC: the
/// breaker stayed open 8 hours too long).
fn utc_plus_8_is_beijing_time(v: &str) {
    stated_reset_case(v, Behaviour::utc_plus_8, "America/New_York");
}

/// Issue 29: a body stating the 5-hour reset and a monthly one 20 days ahead keeps the 5-hour
/// reset (the monthly date, beyond the 8-day bound, discarded both).
fn a_monthly_window_beyond_the_bound_leaves_the_five_hour_one(v: &str) {
    stated_reset_case(v, Behaviour::glm_two_windows, "UTC");
}

/// A quota without a stated reset (GLM 1113 on a 429, which Pi would retry) on the last
/// candidate ends at once too, with the top-up hint.
fn an_unstated_quota_on_the_last_candidate_ends_at_once(v: &str) {
    let env = TestEnv::new(
        v,
        &[ProviderSpec::new(
            "coding",
            "a",
            vec![ModelSpec::text("glm-4.6")],
        )],
    );
    env.llm.script("a", "glm-4.6", vec![Behaviour::glm_1113()]);
    let started = Instant::now();
    let out = env.run(["--json", "--no-tools", PROMPT]);
    let ended = started + out.elapsed;
    out.assert_code(1);
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    assert!(
        ended.saturating_duration_since(reqs[0].at) < Duration::from_millis(1000),
        "{}",
        out.dump()
    );
    let retry = &out.json()["retry"];
    assert_eq!(retry["could_help"], false, "{retry}");
    assert_eq!(retry["retry_after_ms"], Value::Null, "{retry}");
    assert!(
        retry["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("top up or raise the quota")),
        "{retry}"
    );
}

/// Both providers out of quota with stated resets (GLM's 1308 a few seconds ahead, Z.AI's
/// 1310 later): a batch with waiting on (its default) waits for the earliest, within its
/// 60 s deadline, one line per job, and answers every job after the reset — the jobs that
/// waited starting spread out, not at one instant.
fn a_batch_waits_for_the_earliest_stated_reset(v: &str) {
    let env = TestEnv::new(
        v,
        &[
            ProviderSpec::new("zhipu", "a", vec![ModelSpec::text("glm-4.6")]),
            ProviderSpec::new("zai", "b", vec![ModelSpec::text("glm-4.6")]),
        ],
    );
    let (wall0, inst0) = (now_ms(), Instant::now());
    let at = |unix_ms: u64| inst0 + Duration::from_millis(unix_ms.saturating_sub(wall0));
    let reset = reset_in(10);
    let later = reset + 25_000;
    env.llm.script(
        "a",
        "glm-4.6",
        vec![Behaviour::until(
            reset,
            Behaviour::glm_1308(reset),
            Behaviour::Ok,
        )],
    );
    env.llm.script(
        "b",
        "glm-4.6",
        vec![Behaviour::until(
            later,
            Behaviour::zai_1310(later),
            Behaviour::Ok,
        )],
    );
    let jobs: String = (0..4)
        .map(|i| format!("{{\"id\":\"doc-{i}\",\"prompt\":\"Summarise document {i}.\"}}\n"))
        .collect();
    let out = run_command(
        {
            let mut cmd = env.cmd([
                "--batch",
                "-",
                "--jobs",
                "4",
                "--timeout-ms",
                "60000",
                "--no-tools",
                "--provider",
                "zhipu",
                "--model",
                "glm-4.6",
            ]);
            cmd.env("TZ", "UTC");
            cmd
        },
        Some(jobs.as_bytes()),
        Duration::from_secs(90),
    );
    out.assert_success();
    let results = out.json_lines();
    assert_eq!(results.len(), 4, "{}", out.dump());
    assert!(results.iter().all(|r| r["ok"] == true), "{}", out.dump());
    let answered: Vec<Request> = env
        .llm
        .requests()
        .into_iter()
        .filter(|r| r.behaviour == Behaviour::Ok)
        .collect();
    assert_eq!(answered.len(), 4, "{}", out.dump());
    for r in &answered {
        assert_eq!(
            r.route,
            "a",
            "the earliest reset is zhipu's\n{}",
            out.dump()
        );
        assert!(
            r.at >= at(reset),
            "answered before the reset\n{}",
            out.dump()
        );
    }
    let first = answered.iter().map(|r| r.at).min().expect("answers");
    let last = answered.iter().map(|r| r.at).max().expect("answers");
    assert!(
        last.duration_since(first) >= Duration::from_millis(800),
        "the jobs that waited all started within {:?}\n{}",
        last.duration_since(first),
        out.dump()
    );
    assert!(
        out.elapsed < Duration::from_secs(50),
        "waited for zai's later reset?\n{}",
        out.dump()
    );
    // Once zhipu reopens, one job probes it and the others may wait a moment for that probe
    // ("another run is probing it"); that is not waiting for the reset again.
    let (probe_waits, waits): (Vec<&str>, Vec<&str>) = out
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("every candidate is cooling down; waiting"))
        .partition(|l| l.contains("(another run is probing it)"));
    assert!(!waits.is_empty(), "{}", out.dump());
    assert!(
        probe_waits.iter().all(|l| l.contains("provider zhipu")),
        "{probe_waits:#?}"
    );
    for i in 0..4 {
        let n = waits
            .iter()
            .filter(|l| l.contains(&format!("doc-{i}")))
            .count();
        assert!(n <= 1, "doc-{i} said it waits {n} times\n{}", out.dump());
    }
    assert!(
        waits.iter().all(|l| l.contains(&format!(
            "zhipu stated its limit resets at {} +00:00",
            utc(reset)
        ))),
        "{waits:#?}"
    );
}

// ----- several keys of one provider: one provider entry per key, one base URL ---------------

/// `zai` and `zai-2`: the same Z.AI endpoint (fake route `z`) with two keys, listed after
/// another provider that serves the same model (so pool order alone would pick that one).
fn two_keys() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("zai", "z", vec![ModelSpec::text("glm-4.6")]).api_key("key-one"),
        ProviderSpec::new("other", "o", vec![ModelSpec::text("glm-4.6")]),
        ProviderSpec::new("zai-2", "z", vec![ModelSpec::text("glm-4.6")]).api_key("key-two"),
    ]
}

fn run_on_first_key(env: &TestEnv) -> Output {
    env.run([
        "--no-tools",
        "--provider",
        "zai",
        "--model",
        "glm-4.6",
        PROMPT,
    ])
}

/// A quota (stated or not) or an auth failure is the key's: the same model on the other key
/// of the same server is tried next, before the same model at another provider.
fn a_failed_key_moves_to_the_same_model_on_the_other_key(v: &str) {
    for (failure, class) in [
        (Behaviour::glm_1308(reset_in(3600)), "quota"),
        (Behaviour::Status401, "auth"),
    ] {
        let env = TestEnv::new(v, &two_keys());
        env.llm.script(
            "z",
            "glm-4.6",
            vec![failure, Behaviour::text("From key two.")],
        );
        let out = run_on_first_key(&env);
        out.assert_success()
            .assert_answer("From key two.")
            .assert_stderr_contains(&format!("switch zai/glm-4.6 → zai-2/glm-4.6 ({class})"));
        let bearers: Vec<Option<String>> = env
            .llm
            .requests()
            .iter()
            .map(|r| r.authorization.clone())
            .collect();
        assert_eq!(
            bearers,
            [
                Some("Bearer key-one".to_string()),
                Some("Bearer key-two".to_string())
            ],
            "{}",
            out.dump()
        );
        assert!(env.llm.requests_to("o", "glm-4.6").is_empty());
    }
}

/// A server error is the shared endpoint's: after the one retry on the same key, every key of
/// that server is skipped and the same model at another provider answers.
fn a_server_error_skips_every_key_of_the_server(v: &str) {
    let env = TestEnv::new(v, &two_keys());
    env.llm.script("z", "glm-4.6", vec![Behaviour::Status503]);
    env.llm.script(
        "o",
        "glm-4.6",
        vec![Behaviour::text("From the other provider.")],
    );
    let out = run_on_first_key(&env);
    out.assert_success()
        .assert_answer("From the other provider.")
        .assert_stderr_contains("switch zai/glm-4.6 → other/glm-4.6 (endpoint)");
    let to_z = env.llm.requests_to("z", "glm-4.6");
    assert_eq!(
        to_z.len(),
        2,
        "the request and its one retry\n{}",
        out.dump()
    );
    assert!(
        to_z.iter()
            .all(|r| r.authorization.as_deref() == Some("Bearer key-one")),
        "key two was not tried on the failing server\n{}",
        out.dump()
    );
    // --explain says why zai-2 is out while the endpoint breaker is open.
    let explain = env.run([
        "--explain",
        "--json",
        "--no-tools",
        "--provider",
        "zai-2",
        "--model",
        "glm-4.6",
        PROMPT,
    ]);
    explain.assert_success();
    let x = explain.json();
    assert!(
        x["start_skipped"]
            .as_str()
            .is_some_and(|w| w.starts_with("at a base URL that is down")),
        "{x}"
    );
    let zai2 = x["excluded"]
        .as_array()
        .expect("excluded")
        .iter()
        .find(|e| e["model"] == "zai-2/glm-4.6")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(zai2["code"], "server_down", "{x}");
    assert!(zai2["back_at_ms"].as_u64().is_some(), "{x}");
}
