//! Every fault class through real Pi (0.84.4 and 1.6.0): the exit code, the exact stdout, the
//! switch line, and what every provider of the fault server received.

use std::time::Duration;

use crate::support::*;
use serde_json::json;

both_versions!(
    status_401,
    status_403,
    status_402,
    status_402_chinese,
    quota_body_on_429_counts_as_quota,
    rate_limit_429_persistent,
    rate_limit_429_once,
    server_error_500_once_is_retried_on_the_same_model,
    server_error_503_persistent,
    connection_refused,
    hang_before_headers,
    stall_mid_body,
    drop_mid_stream,
    reset_mid_stream,
    no_finish_reason,
    model_not_found_404,
    content_policy_avoids_the_family,
    content_policy_chinese,
    context_overflow_picks_a_larger_window,
    failure_after_a_tool_ran_continues_without_rerunning_it,
    all_candidates_failing_is_exit_1,
    models_scope_limits_the_candidates,
    thinking_level_survives_a_switch,
    round_window_ends_failover,
    a_retry_after_a_switch_stays_on_the_new_model,
    two_failovers_after_a_tool_send_one_continuation,
);

const PROMPT: &str = "Summarise the plan.";
const FALLBACK_TEXT: &str = "Answer from the fallback.";

/// fake-a/m-main is the start model; fake-b/m-main (same id, other provider) must be preferred
/// over the sibling fake-a/m-sib and over fake-b/other.
fn standard() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new(
            "fake-a",
            "a",
            vec![ModelSpec::text("m-main"), ModelSpec::text("m-sib")],
        ),
        ProviderSpec::new(
            "fake-b",
            "b",
            vec![ModelSpec::text("other"), ModelSpec::text("m-main")],
        ),
    ]
}

fn env_with(v: &str, providers: &[ProviderSpec]) -> TestEnv {
    let mut env = TestEnv::new(v, providers);
    env.env("CCSWITCH_FIRST_RESPONSE_MS", "1500")
        .env("CCSWITCH_STALL_MS", "1500");
    env.llm.set_hang_limit(Duration::from_secs(20));
    env
}

fn run_from(env: &TestEnv, provider: &str, model: &str) -> Output {
    env.run([
        "--no-tools",
        "--provider",
        provider,
        "--model",
        model,
        "-v",
        PROMPT,
    ])
}

/// The fallback must see exactly the original conversation: Pi's system prompt, then the one
/// user message, nothing of the failed attempt.
#[track_caller]
fn assert_original_conversation(req: &Request) {
    let roles: Vec<&str> = req
        .roles()
        .into_iter()
        .filter(|r| *r != "system" && *r != "developer")
        .collect();
    assert_eq!(roles, ["user"], "messages: {:?}", req.messages);
    assert_eq!(req.last_user_text(), Some(PROMPT));
}

/// Scripts `fake-a/m-main` with `primary`, runs, and checks the switch to `fake-b/m-main`.
fn switches_to_same_model_elsewhere(
    v: &str,
    primary: Vec<Behaviour>,
    class: &str,
    primary_requests: usize,
) {
    let env = env_with(v, &standard());
    env.llm.script("a", "m-main", primary);
    env.llm
        .script("b", "m-main", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = run_from(&env, "fake-a", "m-main");
    out.assert_success()
        .assert_stderr_contains(&format!("switch fake-a/m-main → fake-b/m-main ({class})"));
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"), "{}", out.dump());
    assert_eq!(
        env.llm.requests_to("a", "m-main").len(),
        primary_requests,
        "{}",
        out.dump()
    );
    assert!(
        env.llm.requests_to("a", "m-sib").is_empty(),
        "sibling on the failed provider"
    );
    assert!(env.llm.requests_to("b", "other").is_empty());
    let fb = env.llm.requests_to("b", "m-main");
    assert_eq!(fb.len(), 1, "{}", out.dump());
    assert_original_conversation(&fb[0]);
    env.assert_no_orphans();
}

fn status_401(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Status401], "auth", 1);
}

fn status_403(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Status403], "auth", 1);
}

fn status_402(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Status402], "quota", 1);
}

fn status_402_chinese(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Status402Chinese], "quota", 1);
}

fn quota_body_on_429_counts_as_quota(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::QuotaChinese429], "quota", 1);
}

fn rate_limit_429_persistent(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::rate_limited()], "rate_limit", 1);
}

/// A rate limit is provider-wide and Pi cannot tell us when it lifts: switch at once rather
/// than wait out Pi's backoff, even if the provider would have answered the next request.
fn rate_limit_429_once(v: &str) {
    switches_to_same_model_elsewhere(
        v,
        vec![Behaviour::rate_limited(), Behaviour::Ok],
        "rate_limit",
        1,
    );
}

fn server_error_500_once_is_retried_on_the_same_model(v: &str) {
    let env = env_with(v, &standard());
    env.llm.script(
        "a",
        "m-main",
        vec![Behaviour::Status500, Behaviour::text("Second try worked.")],
    );
    let out = run_from(&env, "fake-a", "m-main");
    out.assert_success()
        .assert_stderr_contains("retry fake-a/m-main once");
    assert_eq!(out.stdout, "Second try worked.\n", "{}", out.dump());
    let reqs = env.llm.requests_to("a", "m-main");
    assert_eq!(reqs.len(), 2);
    assert_original_conversation(&reqs[1]);
    assert_eq!(env.llm.requests().len(), 2, "no other provider asked");
    assert!(!out.stderr.contains("] switch"), "{}", out.dump());
}

fn server_error_503_persistent(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Status503], "endpoint", 2);
}

fn connection_refused(v: &str) {
    let providers = vec![
        ProviderSpec::refused("fake-dead", vec![ModelSpec::text("m-main")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("m-main")]),
    ];
    let env = env_with(v, &providers);
    env.llm
        .script("b", "m-main", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = run_from(&env, "fake-dead", "m-main");
    out.assert_success()
        .assert_stderr_contains("switch fake-dead/m-main → fake-b/m-main (endpoint)");
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"));
    let fb = env.llm.requests_to("b", "m-main");
    assert_eq!(fb.len(), 1);
    assert_original_conversation(&fb[0]);
}

fn hang_before_headers(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Hang], "endpoint", 1);
}

fn stall_mid_body(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::StallMidBody], "endpoint", 1);
}

fn drop_mid_stream(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Drop], "endpoint", 1);
}

fn reset_mid_stream(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Reset], "endpoint", 1);
}

/// The failed attempt streamed the full text but no finish_reason: it is still a failure, and
/// its text must not be printed.
fn no_finish_reason(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::NoFinish], "endpoint", 1);
}

fn model_not_found_404(v: &str) {
    switches_to_same_model_elsewhere(v, vec![Behaviour::Status404], "model", 1);
}

fn family_providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("zhipu", "a", vec![ModelSpec::text("glm-4.5")]),
        ProviderSpec::new("gateway", "b", vec![ModelSpec::text("zai-org/GLM-4.6")]),
        ProviderSpec::new("ali", "c", vec![ModelSpec::text("qwen-max")]),
    ]
}

fn content_policy_case(v: &str, behaviour: Behaviour) {
    let env = env_with(v, &family_providers());
    env.llm.script("a", "glm-4.5", vec![behaviour]);
    env.llm
        .script("c", "qwen-max", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = run_from(&env, "zhipu", "glm-4.5");
    out.assert_success()
        .assert_stderr_contains("switch zhipu/glm-4.5 → ali/qwen-max (content_policy)");
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"));
    assert!(
        env.llm.requests_to("b", "zai-org/GLM-4.6").is_empty(),
        "the GLM sibling on another provider must be skipped"
    );
    let fb = env.llm.requests_to("c", "qwen-max");
    assert_eq!(fb.len(), 1);
    assert_original_conversation(&fb[0]);
}

fn content_policy_avoids_the_family(v: &str) {
    content_policy_case(v, Behaviour::ContentPolicy);
}

fn content_policy_chinese(v: &str) {
    content_policy_case(v, Behaviour::ContentPolicyChinese);
}

fn context_overflow_picks_a_larger_window(v: &str) {
    let providers = vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("small").context(8192)]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("same").context(8192)]),
        ProviderSpec::new("fake-c", "c", vec![ModelSpec::text("big").context(200_000)]),
    ];
    let env = env_with(v, &providers);
    env.llm.script("a", "small", vec![Behaviour::ContextLength]);
    env.llm
        .script("c", "big", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = run_from(&env, "fake-a", "small");
    out.assert_success()
        .assert_stderr_contains("switch fake-a/small → fake-c/big (context_overflow)");
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"));
    assert!(
        env.llm.requests_to("b", "same").is_empty(),
        "not a larger window"
    );
    assert_original_conversation(&env.llm.requests_to("c", "big")[0]);
}

fn failure_after_a_tool_ran_continues_without_rerunning_it(v: &str) {
    let env = env_with(v, &standard());
    std::fs::write(env.cwd.join("only-file.txt"), "x").expect("write");
    env.llm.script(
        "a",
        "m-main",
        vec![
            Behaviour::tool("bash", json!({"command": "echo ran >> ran.log && ls"})),
            Behaviour::Status401,
        ],
    );
    env.llm
        .script("b", "m-main", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = env.run(["--provider", "fake-a", "--model", "m-main", "-v", PROMPT]);
    out.assert_success()
        .assert_stderr_contains("switch fake-a/m-main → fake-b/m-main (auth)");
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"), "{}", out.dump());
    let fb = env.llm.requests_to("b", "m-main");
    assert_eq!(fb.len(), 1);
    let roles: Vec<&str> = fb[0]
        .roles()
        .into_iter()
        .filter(|r| *r != "system" && *r != "developer")
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "user"],
        "{:?}",
        fb[0].messages
    );
    assert_eq!(
        fb[0]
            .messages
            .iter()
            .find(|m| m.role == "user")
            .map(|m| m.text.as_str()),
        Some(PROMPT)
    );
    let tool = fb[0]
        .messages
        .iter()
        .find(|m| m.role == "tool")
        .expect("tool result kept");
    assert!(
        tool.text.contains("only-file.txt"),
        "tool result: {}",
        tool.text
    );
    assert!(
        fb[0]
            .last_user_text()
            .unwrap_or_default()
            .contains("Continue"),
        "{:?}",
        fb[0].messages
    );
    // The tool ran exactly once: the fallback continued from its result.
    let ran = std::fs::read_to_string(env.cwd.join("ran.log")).expect("the tool ran");
    assert_eq!(ran, "ran\n");
    assert_eq!(env.llm.requests_to("a", "m-main").len(), 2);
}

fn all_candidates_failing_is_exit_1(v: &str) {
    let env = env_with(v, &standard());
    env.llm.set_default(Behaviour::Status402);
    let out = run_from(&env, "fake-a", "m-main");
    out.assert_code(1)
        .assert_stderr_contains("failover exhausted")
        .assert_stderr_contains("fake-a/m-main")
        .assert_stderr_contains("fake-b/m-main")
        .assert_stderr_contains("402");
    assert!(out.stdout.is_empty(), "{}", out.dump());
    // Provider-wide: one request per provider, no sibling tried.
    assert_eq!(env.llm.requests().len(), 2, "{}", out.dump());
    env.assert_no_orphans();
}

/// `--models` keeps failover inside the scope: the sibling in scope is chosen, and the
/// better-ranked model outside it is never asked.
fn models_scope_limits_the_candidates(v: &str) {
    let env = env_with(v, &standard());
    env.llm.script("a", "m-main", vec![Behaviour::Status404]);
    let out = env.run([
        "--no-tools",
        "--provider",
        "fake-a",
        "--model",
        "m-main",
        "--models",
        "fake-a/*",
        PROMPT,
    ]);
    out.assert_success()
        .assert_stderr_contains("switch fake-a/m-main → fake-a/m-sib (model)");
    assert!(
        env.llm.requests_to("b", "m-main").is_empty(),
        "{}",
        out.dump()
    );
    assert!(env.llm.requests_to("b", "other").is_empty());
    assert_original_conversation(&env.llm.requests_to("a", "m-sib")[0]);
    // With a provider-wide failure nothing in scope is left: exit 1, still nothing outside.
    let env = env_with(v, &standard());
    env.llm.script("a", "m-main", vec![Behaviour::Status402]);
    let out = env.run([
        "--no-tools",
        "--provider",
        "fake-a",
        "--model",
        "m-main",
        "--models",
        "fake-a/*",
        PROMPT,
    ]);
    out.assert_code(1);
    assert_eq!(env.llm.requests().len(), 1, "{}", out.dump());
}

/// Pi clamps the thinking level to each model and keeps the clamped level after a switch; the
/// runner sets it again, so a reasoning fallback still reasons at the level asked for.
fn thinking_level_survives_a_switch(v: &str) {
    let providers = vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("plain")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("thinker").reasoning()]),
    ];
    let env = env_with(v, &providers);
    env.llm.script("a", "plain", vec![Behaviour::Status402]);
    let out = env.run([
        "--no-tools",
        "--provider",
        "fake-a",
        "--model",
        "plain",
        "--thinking",
        "high",
        PROMPT,
    ]);
    out.assert_success();
    let fb = env.llm.requests_to("b", "thinker");
    assert_eq!(fb.len(), 1, "{}", out.dump());
    assert_eq!(
        fb[0].reasoning_effort.as_deref(),
        Some("high"),
        "{}",
        out.dump()
    );
}

/// `CCSWITCH_ROUND_LIMIT_MS`: once the round window has passed, the next failure ends the run.
fn round_window_ends_failover(v: &str) {
    let mut env = env_with(v, &standard());
    env.env("CCSWITCH_ROUND_LIMIT_MS", "1");
    env.llm.script("a", "m-main", vec![Behaviour::Status402]);
    let out = run_from(&env, "fake-a", "m-main");
    out.assert_code(1)
        .assert_stderr_contains("round window of 1 ms ran out");
    assert!(out.stdout.is_empty());
    assert!(
        env.llm.requests_to("b", "m-main").is_empty(),
        "{}",
        out.dump()
    );
}

/// Regression (review): the one same-model retry of a 5xx after a switch went back to the
/// model before the switch (`fork` restores the fork point's model) and charged it to the
/// fallback.
fn a_retry_after_a_switch_stays_on_the_new_model(v: &str) {
    let providers = vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m-main")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("m-main")]),
        ProviderSpec::new("fake-c", "c", vec![ModelSpec::text("m-main")]),
    ];
    let env = env_with(v, &providers);
    env.llm.script("a", "m-main", vec![Behaviour::Status402]);
    env.llm.script(
        "b",
        "m-main",
        vec![Behaviour::Status500, Behaviour::text("B second try.")],
    );
    env.llm
        .script("c", "m-main", vec![Behaviour::text("C answer.")]);
    let out = run_from(&env, "fake-a", "m-main");
    out.assert_success();
    assert_eq!(out.stdout, "B second try.\n", "{}", out.dump());
    let routes: Vec<String> = env.llm.requests().iter().map(|r| r.route.clone()).collect();
    assert_eq!(routes, ["a", "b", "b"], "{}", out.dump());
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(env.agent_dir.join("pi-ccswitch-run-state.json")).expect("state"),
    )
    .expect("json");
    assert!(
        state["providers"]["fake-b"].is_null(),
        "fake-b was not blamed for a's quota"
    );
}

/// Regression (acceptance review): after a tool ran, a second failover stacked a second
/// continuation prompt on top of the first.
fn two_failovers_after_a_tool_send_one_continuation(v: &str) {
    let providers = vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m-main")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("m-main")]),
        ProviderSpec::new("fake-c", "c", vec![ModelSpec::text("m-main")]),
    ];
    let env = env_with(v, &providers);
    env.llm.script(
        "a",
        "m-main",
        vec![
            Behaviour::tool("bash", json!({"command": "echo ran >> ran.log"})),
            Behaviour::Status402,
        ],
    );
    env.llm.script("b", "m-main", vec![Behaviour::Status402]);
    env.llm
        .script("c", "m-main", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = env.run(["--provider", "fake-a", "--model", "m-main", PROMPT]);
    out.assert_success();
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"), "{}", out.dump());
    let c = env.llm.requests_to("c", "m-main");
    assert_eq!(c.len(), 1);
    let roles: Vec<&str> = c[0]
        .roles()
        .into_iter()
        .filter(|r| *r != "system" && *r != "developer")
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "user"],
        "{:?}",
        c[0].messages
    );
    assert_eq!(
        std::fs::read_to_string(env.cwd.join("ran.log")).expect("tool ran"),
        "ran\n"
    );
}
