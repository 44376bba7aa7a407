//! Slow is not dead (issue 31), end to end through real Pi (0.84.4 and 1.6.0) and the fault
//! server: watchdogs derived from each provider's pace and re-judged while they run, thinking as
//! progress, a deadline shared among the candidates and exit 124's hint, a cut for silence
//! shared as a health signal, a primary back as soon as its probe answers, and what `--status`
//! and `--explain` show. Durations are short through the environment (the floor, the ceilings,
//! the cooldown scale), and the tests assert events (what was sent where, which lines were
//! said), not wall-clock bounds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;
use pi_ccswitch_run::health::store::{HealthStore, RedisStore};
use serde_json::{Value, json};

both_versions!(
    a_silent_primary_inside_a_deadline_leaves_the_backup_its_time,
    a_request_far_outside_its_providers_pace_is_cut_and_the_cut_is_shared,
    a_provider_slow_every_time_is_not_cut_for_being_itself,
    thinking_is_progress,
    a_watchdog_is_rejudged_once_other_answers_establish_the_pace,
    exit_124_says_what_was_tried_and_what_was_still_silent,
    a_recovered_primary_gets_the_batch_back_after_its_probe,
    status_and_explain_show_the_pace_the_watchdogs_and_the_cooldowns,
    the_pace_is_learned_and_shared_through_redis,
);

const PROMPT: &str = "Summarise the plan.";
const STATE: &str = "pi-ccswitch-run-state.json";

/// The primary `glm/m` (route a) and the backup `ds/m` (route b), and a reasoning model.
fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new(
            "glm",
            "a",
            vec![ModelSpec::text("m"), ModelSpec::text("r").reasoning()],
        ),
        ProviderSpec::new("ds", "b", vec![ModelSpec::text("m")]),
    ]
}

fn env_for(v: &str) -> TestEnv {
    let env = TestEnv::new(v, &providers());
    env.llm.set_hang_limit(Duration::from_secs(30));
    env
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--no-tools",
        "--model",
        "glm/m",
        "--models",
        "glm/*,ds/*",
        "-v",
    ];
    a.extend_from_slice(extra);
    a
}

/// Writes a state file whose only content is `model`'s pace: `n` answers of this minute, each
/// `first_ms` to the first response and `gap_ms` between events.
fn seed_pace(env: &TestEnv, model: &str, n: u64, first_ms: u64, gap_ms: u64) {
    let now = now_ms();
    let samples: Vec<Value> = (0..n)
        .map(|i| json!([now - 1000 * (i + 1), first_ms, gap_ms, 30]))
        .collect();
    let state = json!({"schema_version": 1, "updated_at": now, "pace": {model: samples}});
    std::fs::write(
        env.agent_dir.join(STATE),
        serde_json::to_vec(&state).expect("json"),
    )
    .expect("write state");
}

fn state(env: &TestEnv) -> Value {
    serde_json::from_slice(&std::fs::read(env.agent_dir.join(STATE)).expect("state")).expect("json")
}

fn endpoint_a(env: &TestEnv) -> String {
    format!("glm@{}", env.llm.base_url("a"))
}

/// GLM accepts the request and sends nothing; DeepSeek is healthy; the run has 12 s. The
/// primary may wait only its share of the deadline (6 s: half of it, one candidate left), then
/// the backup answers well inside it; the silence is recorded, so the next run goes straight to
/// the backup.
fn a_silent_primary_inside_a_deadline_leaves_the_backup_its_time(v: &str) {
    let env = env_for(v);
    env.llm.script("a", "m", vec![Behaviour::Hang]);
    let out = env.run(args(&["--timeout-ms", "12000", PROMPT]));
    out.assert_success()
        .assert_answer(DEFAULT_TEXT)
        .assert_stderr_contains("its share of the deadline")
        .assert_stderr_contains("switch glm/m → ds/m (endpoint)");
    assert_eq!(env.llm.requests_to("a", "m").len(), 1, "{}", out.dump());
    let cut = &state(&env)["endpoints"][endpoint_a(&env)];
    assert!(cut["cooldown_until"].as_u64().is_some(), "{}", out.dump());
    assert!(
        cut["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("no first response"),
        "{cut}"
    );
    // The next run knows: nothing more is sent to the silent primary.
    let again = env.run(args(&["--timeout-ms", "12000", PROMPT]));
    again.assert_success().assert_answer(DEFAULT_TEXT);
    assert_eq!(env.llm.requests_to("a", "m").len(), 1, "{}", again.dump());
    assert_eq!(env.llm.requests_to("b", "m").len(), 2);
    env.assert_no_orphans();
}

/// GLM answered its last ten requests with the first token after 100 ms: a request silent for
/// 1.3 s (3 × p95 + 1 s) is far outside its pace and cut — not after the 90 s ceiling — and
/// the cut opens its endpoint breaker for every later run. The backup's clean answer is
/// recorded as its pace.
fn a_request_far_outside_its_providers_pace_is_cut_and_the_cut_is_shared(v: &str) {
    let mut env = env_for(v);
    env.env("CCSWITCH_WATCHDOG_FLOOR_MS", "500");
    seed_pace(&env, "glm/m", 10, 100, 20);
    env.llm
        .script("a", "m", vec![Behaviour::first_token_after(60_000)]);
    let out = env.run(args(&[PROMPT]));
    out.assert_success()
        .assert_answer(DEFAULT_TEXT)
        .assert_stderr_contains(
            "watchdogs for glm/m: first response 1.3 s (from p95 100 ms over 10 answers)",
        )
        .assert_stderr_contains("no first response from glm/m in 1.3 s")
        .assert_stderr_contains("switch glm/m → ds/m (endpoint)");
    let s = state(&env);
    assert!(
        s["endpoints"][endpoint_a(&env)]["cooldown_until"]
            .as_u64()
            .is_some(),
        "{s:#}"
    );
    let backup = s["pace"]["ds/m"].as_array().expect("the backup's pace");
    assert_eq!(backup.len(), 1, "{s:#}");
    assert!(backup[0][1].as_u64().unwrap_or(0) > 0, "{backup:?}");
    assert_eq!(
        s["pace"]["glm/m"].as_array().map(Vec::len),
        Some(10),
        "no sample of a cut"
    );
    let again = env.run(args(&[PROMPT]));
    again.assert_success();
    assert_eq!(env.llm.requests_to("a", "m").len(), 1, "{}", again.dump());
    env.assert_no_orphans();
}

/// GLM takes 3 s to the first token every time: its limit is 10 s (3 × 3 s + 1 s), and a 2.5 s
/// start is answered by it, however far above a fast provider's floor that is.
fn a_provider_slow_every_time_is_not_cut_for_being_itself(v: &str) {
    let mut env = env_for(v);
    env.env("CCSWITCH_FIRST_RESPONSE_MS", "20000");
    seed_pace(&env, "glm/m", 10, 3000, 50);
    env.llm
        .script("a", "m", vec![Behaviour::first_token_after(2500)]);
    let out = env.run(args(&[PROMPT]));
    out.assert_success()
        .assert_answer(DEFAULT_TEXT)
        .assert_stderr_contains(
            "watchdogs for glm/m: first response 10 s (from p95 3.0 s over 10 answers)",
        )
        .assert_stderr_lacks("switch glm")
        .assert_stderr_lacks("no first response");
    assert!(env.llm.requests_to("b", "m").is_empty());
    let s = state(&env);
    let firsts: Vec<u64> = s["pace"]["glm/m"]
        .as_array()
        .expect("pace")
        .iter()
        .filter_map(|x| x[1].as_u64())
        .collect();
    assert_eq!(firsts.len(), 11, "{s:#}");
    assert!(
        firsts.iter().any(|f| (2400..20_000).contains(f)),
        "the new answer's first response: {firsts:?}"
    );
}

/// A reasoning model thinks aloud for 3 s before its text, with ceilings of 1 s: every thinking
/// delta is progress, nothing is cut.
fn thinking_is_progress(v: &str) {
    let mut env = env_for(v);
    env.env("CCSWITCH_FIRST_RESPONSE_MS", "1000")
        .env("CCSWITCH_STALL_MS", "1000");
    env.llm.script(
        "a",
        "r",
        vec![Behaviour::Thinking {
            think_ms: 3000,
            gap_ms: 250,
        }],
    );
    let out = env.run([
        "--no-tools",
        "--model",
        "glm/r",
        "--models",
        "glm/*,ds/*",
        "--thinking",
        "high",
        "-v",
        PROMPT,
    ]);
    out.assert_success()
        .assert_answer(DEFAULT_TEXT)
        .assert_stderr_lacks("watchdog: ")
        .assert_stderr_lacks("switch glm");
    assert!(env.llm.requests_to("b", "m").is_empty());
}

/// A fresh batch: the first request to GLM hangs while it has no pace (ceiling 30 s); the
/// other worker's answers establish the pace, and the hanging attempt is re-judged and cut at
/// once, not after 30 s. The summary counts the cut.
fn a_watchdog_is_rejudged_once_other_answers_establish_the_pace(v: &str) {
    let mut env = env_for(v);
    env.env("CCSWITCH_FIRST_RESPONSE_MS", "30000")
        .env("CCSWITCH_WATCHDOG_FLOOR_MS", "500");
    env.llm
        .script("a", "m", vec![Behaviour::Hang, Behaviour::Ok]);
    let jobs: String = (0..10)
        .map(|i| format!("{{\"id\":\"j{i}\",\"prompt\":\"Summarise {i}.\"}}\n"))
        .collect();
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--jobs",
            "2",
            "--no-tools",
            "--model",
            "glm/m",
            "--models",
            "glm/*,ds/*",
            "-v",
        ],
        jobs.as_bytes(),
    );
    out.assert_success()
        .assert_stderr_contains("re-judged")
        .assert_stderr_contains(
            "batch: attempts cut for silence (no first response or a stalled stream): glm 1",
        );
    let answered = out.json_lines().iter().filter(|l| l["ok"] == true).count();
    assert_eq!(answered, 10, "{}", out.dump());
    // The cut came from the derived limit: the 30 s ceiling never ran out.
    assert!(
        !out.stderr.contains("no first response from glm/m in 30 s"),
        "{}",
        out.dump()
    );
    env.assert_no_orphans();
}

/// Both providers silent, 8 s: GLM is cut at its share (5 s), DeepSeek is the last candidate
/// and may use what is left; exit 124 says what was tried and what was still silent, in
/// `--json` and on stderr.
fn exit_124_says_what_was_tried_and_what_was_still_silent(v: &str) {
    let env = env_for(v);
    env.llm.script("a", "m", vec![Behaviour::Hang]);
    env.llm.script("b", "m", vec![Behaviour::Hang]);
    let out = env.run(args(&["--timeout-ms", "8000", "--json", PROMPT]));
    out.assert_code(124)
        .assert_stderr_contains("tried glm/m (no first response")
        .assert_stderr_contains("ds/m was still silent");
    let j = out.json();
    assert_eq!(j["exit_code"], 124, "{j:#}");
    let retry = &j["retry"];
    assert_eq!(retry["could_help"], true, "{j:#}");
    let reason = retry["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("glm/m") && reason.contains("ds/m"),
        "{reason}"
    );
    assert!(
        retry["tried"].as_array().is_some_and(|t| t.len() == 1),
        "{j:#}"
    );
    assert_eq!(retry["silent"], json!(["ds/m"]), "{j:#}");
    env.assert_no_orphans();
}

/// GLM answers 503 for its first 3 s, with cooldowns at a tenth (1 s, 1.5 s, …): while it is
/// down it gets at most one probe per cooldown besides the jobs in flight when it failed, and
/// once a probe answers the batch's new jobs go back to it.
fn a_recovered_primary_gets_the_batch_back_after_its_probe(v: &str) {
    let mut env = env_for(v);
    env.env("CCSWITCH_COOLDOWN_SCALE", "0.1");
    env.llm.script(
        "a",
        "m",
        vec![Behaviour::until(
            now_ms() + 3000,
            Behaviour::Status503,
            Behaviour::Ok,
        )],
    );
    // Slow enough that the batch outlasts the outage, however busy the machine.
    env.llm.script("b", "m", vec![Behaviour::Ok.delayed(300)]);
    let jobs: String = (0..60)
        .map(|i| format!("{{\"id\":\"j{i}\",\"prompt\":\"Summarise {i}.\"}}\n"))
        .collect();
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--jobs",
            "2",
            "--no-tools",
            "--model",
            "glm/m",
            "--models",
            "glm/*,ds/*",
        ],
        jobs.as_bytes(),
    );
    out.assert_success();
    let requests = env.llm.requests();
    let down: Vec<_> = requests
        .iter()
        .filter(|r| r.route == "a" && r.behaviour == Behaviour::Status503)
        .collect();
    // Two jobs in flight when it failed, each with its one immediate retry of a 5xx (both may go
    // out before either job sees the other's breaker: 4), then one probe per cooldown (1 s,
    // 1.5 s, at most 3 in 3 s): a handful, not one per job of the 60.
    assert!(
        (1..=7).contains(&down.len()),
        "{} requests to the primary while it was down\n{}",
        down.len(),
        out.dump()
    );
    let first_ok = requests
        .iter()
        .position(|r| r.route == "a" && r.behaviour == Behaviour::Ok)
        .expect("the primary answered again");
    let after = &requests[first_ok + 1..];
    let to_backup = after.iter().filter(|r| r.route == "b").count();
    assert!(
        to_backup <= 1,
        "{to_backup} of {} requests after the probe answered went to the backup\n{}",
        after.len(),
        out.dump()
    );
    assert!(
        after.len() >= 5,
        "the batch ended before the primary was back"
    );
}

/// `--status` shows each model's pace; `--explain` the watchdogs each candidate would run
/// under, the deadline's share and the cooldowns.
fn status_and_explain_show_the_pace_the_watchdogs_and_the_cooldowns(v: &str) {
    let env = env_for(v);
    seed_pace(&env, "glm/m", 10, 5000, 300);
    let status = env.run(["--status"]);
    status.assert_success().assert_stdout_contains(
        "glm/m: first response p95 5.0 s, longest gap p95 300 ms over 10 answers",
    );
    let j = env.run(["--status", "--json"]).json();
    let glm = j["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["model"] == "glm/m")
        .cloned()
        .expect("glm/m");
    assert_eq!(glm["pace"]["answers"], 10);
    assert_eq!(glm["pace"]["first_response_p95_ms"], 5000);
    let explain = env.run([
        "--explain",
        "--model",
        "glm/m",
        "--models",
        "glm/*,ds/*",
        "--timeout-ms",
        "20000",
        PROMPT,
    ]);
    explain
        .assert_success()
        .assert_stdout_contains("watchdogs: first response 1m30s, stall 2m00s")
        .assert_stdout_contains("pace: first response p95 5.0 s, longest gap p95 300 ms over 10 answers")
        .assert_stdout_contains("watchdogs: first response 16 s (from p95 5.0 s over 10 answers), stall 3.0 s (the floor; p95 300 ms over 10 answers)")
        .assert_stdout_contains("watchdogs: first response 90 s (the ceiling: no pace yet")
        .assert_stdout_contains("for a first response (its share of the")
        .assert_stdout_contains("left: 2 other candidates)")
        .assert_stdout_contains("cooldowns: endpoint (5xx, resets, silence) 10s, growing by half while its probes fail to 2m00s, then doubling to 30m00s");
    let j = env
        .run([
            "--explain",
            "--json",
            "--model",
            "glm/m",
            "--models",
            "glm/*,ds/*",
            PROMPT,
        ])
        .json();
    assert_eq!(j["candidates"][0]["model"], "glm/m");
    assert_eq!(j["candidates"][0]["watchdogs"]["first_response_ms"], 16_000);
    assert!(
        j["candidates"][0]["first_response_share_ms"].is_null(),
        "no deadline, no share"
    );
    assert_eq!(j["candidates"][1]["watchdogs"]["first_response_ms"], 90_000);
    assert_eq!(j["candidates"][0]["pace"]["answers"], 10);
}

/// Runs that share a Redis learn one pace: after six answers every process sees it.
fn the_pace_is_learned_and_shared_through_redis(v: &str) {
    let server = RedisServer::start();
    let mut env = env_for(v);
    env.env("CCSWITCH_HEALTH_URL", server.url());
    for _ in 0..6 {
        env.run(args(&[PROMPT])).assert_success();
    }
    let h = RedisStore::open(&server.url(), "pi-ccswitch-run:")
        .expect("url")
        .load(now_ms())
        .expect("load")
        .health;
    let pace = h.pace_of("glm/m", now_ms(), 30).expect("pace in Redis");
    assert_eq!(pace.answers, 6);
    assert!(pace.trusted());
    assert!(
        !env.agent_dir.join(STATE).exists(),
        "nothing in the state file while Redis holds health"
    );
    let explain = env.run(["--explain", "--model", "glm/m", PROMPT]);
    explain
        .assert_success()
        .assert_stdout_contains("over 6 answers");
}

/// The issue's own numbers, default settings: a 20 s deadline, a silent primary, a healthy
/// backup. The backup answers well before the deadline (the primary only waits its share), the
/// JSON says which attempt was cut and why, and the second run does not go back to the silent
/// primary.
#[test]
fn a_twenty_second_deadline_reaches_the_backup_and_the_json_says_why() {
    let env = env_for(PI_NEWEST);
    env.llm.script("a", "m", vec![Behaviour::Hang]);
    let out = env.run(args(&["--timeout-ms", "20000", "--json", PROMPT]));
    out.assert_success().assert_stderr_contains(
        "watchdogs for glm/m: first response 90 s (the ceiling: no pace yet, 0 recent answers)",
    );
    let j = out.json();
    assert_eq!(j["model"]["provider"], "ds", "{}", out.dump());
    assert_eq!(
        j["attempts"][0]["marker"],
        "deadline share",
        "{}",
        out.dump()
    );
    assert!(j["retry"].is_null() && j["wait_ms"] == 0, "{}", out.dump());
    let again = env.run(args(&["--timeout-ms", "20000", "--json", PROMPT]));
    again
        .assert_success()
        .assert_stderr_contains("start: glm/m is endpoint breaker open")
        .assert_stderr_contains("(the ceiling: no pace yet, 1 recent answer)");
    assert_eq!(env.llm.requests_to("a", "m").len(), 1, "{}", again.dump());
    assert_eq!(again.json()["attempts"].as_array().map(Vec::len), Some(1));
}
