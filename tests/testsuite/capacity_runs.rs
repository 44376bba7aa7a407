//! Capacity in single runs and on the command line (issue 23), through real Pi and the fault
//! server: a capacity signal with no other candidate is waited out on our own short poll, not
//! through Pi's 2/4/8 s retries; with another candidate the run goes there; `--max-inflight`
//! and `CCSWITCH_MAX_INFLIGHT` reject bad values (exit 2, naming them); `--explain` shows the
//! limits a run would start from; a capacity signal that states a delay is waited that long, a
//! longer stated delay opens the breaker until then.

use std::time::Duration;

use crate::support::*;

fn solo(v: &str) -> TestEnv {
    TestEnv::new(
        v,
        &[ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")])],
    )
}

fn two(v: &str) -> TestEnv {
    TestEnv::new(
        v,
        &[
            ProviderSpec::new("glm", "a", vec![ModelSpec::text("m")]),
            ProviderSpec::new("back", "b", vec![ModelSpec::text("m")]),
        ],
    )
}

const FROM_GLM: [&str; 5] = ["--no-tools", "--provider", "glm", "--model", "m"];

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    FROM_GLM
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect()
}

/// Pi's own first retry of a 429 comes this long after it (both versions): a second request
/// sooner than that is ours.
const PI_FIRST_RETRY: Duration = Duration::from_secs(2);

both_versions!(
    a_capacity_signal_with_no_other_candidate_is_waited_out_not_retried_by_pi,
    a_capacity_signal_with_another_candidate_goes_there,
    max_inflight_names_an_unknown_provider_after_pi_lists_models,
    explain_shows_the_capacity_a_run_would_start_from,
);

fn a_capacity_signal_with_no_other_candidate_is_waited_out_not_retried_by_pi(v: &str) {
    let env = solo(v);
    env.llm.script(
        "a",
        "m",
        vec![Behaviour::Status(429, bodies::glm_1302()), Behaviour::Ok],
    );
    let out = env.run(args(&["--json", "hi"]));
    out.assert_success();
    let j = out.json();
    assert_eq!(j["answer"], DEFAULT_TEXT, "{}", out.dump());
    let attempts = j["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{}", out.dump());
    assert_eq!(attempts[0]["capacity_signal"], true, "{}", out.dump());
    assert_eq!(attempts[0]["class"], "rate_limit");
    assert_eq!(attempts[1]["capacity_signal"], false);
    assert_eq!(attempts[1]["ok"], true);
    // The refusal gave the slot back and the limit of 1 it left is free at once: the run may
    // or may not have waited, but the line says how long.
    assert!(j["capacity_wait_ms"].is_u64(), "{}", out.dump());
    let reqs = env.llm.requests_to("a", "m");
    assert_eq!(reqs.len(), 2, "one refusal, one answer: {}", out.dump());
    let gap = reqs[1].at - reqs[0].at;
    eprintln!("a capacity signal on the only provider: sent again after {gap:?}");
    assert!(
        gap < PI_FIRST_RETRY - Duration::from_millis(500),
        "sent again after {gap:?}: Pi's own retry, not ours\n{}",
        out.dump()
    );
    out.assert_stderr_lacks("breaker");
    // The refusal taught the store the provider's limit: cut to one, and the clean answer at
    // one in flight (a full window at that limit) raised it to two.
    let status = env.run(["--status", "--json"]);
    status.assert_success();
    let cap = &status.json()["capacity"];
    assert_eq!(cap[0]["provider"], "glm", "{cap}");
    assert_eq!(cap[0]["limit_learned_from_signal"], true, "{cap}");
    assert_eq!(cap[0]["limit"], 2, "{cap}");
    assert_eq!(cap[0]["in_flight"], 0, "{cap}");
}

fn a_capacity_signal_with_another_candidate_goes_there(v: &str) {
    let env = two(v);
    env.llm.script(
        "a",
        "m",
        vec![Behaviour::Status(429, bodies::glm_1302()), Behaviour::Ok],
    );
    let out = env.run(args(&["--json", "hi"]));
    out.assert_success()
        .assert_stderr_contains("switch glm/m → back/m (rate_limit)")
        .assert_stderr_lacks("breaker open");
    let j = out.json();
    assert_eq!(j["model"]["provider"], "back", "{}", out.dump());
    assert_eq!(j["attempts"][0]["capacity_signal"], true, "{}", out.dump());
    assert_eq!(env.llm.requests_to("a", "m").len(), 1);
    assert_eq!(env.llm.requests_to("b", "m").len(), 1);
    // A capacity signal opens no breaker: the next run starts on glm again — once the busy
    // key's first back-off (1 s at most: the refusal came with nothing else in flight) is over.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let again = env.run(args(&["hi"]));
    again.assert_success().assert_answer(DEFAULT_TEXT);
    assert_eq!(env.llm.requests_to("a", "m").len(), 2, "{}", again.dump());
}

/// Two single runs at once on a key that takes one request: the second is refused, waits for
/// the first to answer and goes out right after it, with no second refusal. Pi's own retries
/// would land 2 s after the refusal (while the first still holds the key: refused again) and
/// 6 s after it (well over 2 s after the first's answer).
#[test]
fn a_second_run_on_a_full_key_waits_for_the_first_and_goes_right_after() {
    const HOLD: u64 = 4_000;
    let env = solo(PI_NEWEST);
    env.llm.set_concurrency_cap("a", Some(1));
    env.llm
        .script("a", "m", vec![Behaviour::Ok.delayed(HOLD), Behaviour::Ok]);
    std::thread::scope(|s| {
        let first = s.spawn(|| env.run(args(&["--json", "first"])));
        assert_eq!(
            env.llm.wait_in_flight("a", 1, Duration::from_secs(30)),
            1,
            "the first run's request"
        );
        let second = s.spawn(|| env.run(args(&["--json", "second"])));
        let (first, second) = (first.join().expect("first"), second.join().expect("second"));
        first.assert_success();
        second.assert_success();
        let j = second.json();
        assert_eq!(j["answer"], DEFAULT_TEXT, "{}", second.dump());
        assert_eq!(
            j["attempts"][0]["capacity_signal"],
            true,
            "{}",
            second.dump()
        );
        assert!(j["capacity_wait_ms"].as_u64().is_some_and(|ms| ms > 0));
        let reqs = env.llm.requests_to("a", "m");
        assert_eq!(env.llm.rejections("a"), 1, "refused once only: {reqs:#?}");
        assert_eq!(reqs.len(), 3, "{}", second.dump());
        let held_until = reqs[0].at + Duration::from_millis(HOLD);
        let after = reqs[2].at.saturating_duration_since(held_until);
        eprintln!("the second run went out {after:?} after the first's answer");
        assert!(
            after < Duration::from_secs(2),
            "{after:?} after the slot came back\n{}",
            second.dump()
        );
        second.assert_stderr_lacks("breaker");
    });
}

/// `--max-inflight` values that are not `PROVIDER=N` are usage errors before Pi starts, each
/// naming what was wrong.
#[test]
fn bad_max_inflight_values_are_usage_errors_naming_the_value() {
    let env = solo(PI_NEWEST);
    for (given, says) in [
        (
            vec!["glm=0"],
            "'glm=0': the count must be a whole number from 1 to 256",
        ),
        (vec!["glm=x"], "'glm=x': the count must be"),
        (vec!["glm=-1"], "'glm=-1': the count must be"),
        (vec!["0"], "'0' is not PROVIDER=N"),
        (vec!["glm"], "'glm' is not PROVIDER=N"),
        (vec![""], "'' is not PROVIDER=N"),
        (vec!["=3"], "'=3' names no provider"),
        (vec!["glm=1,glm=2"], "provider 'glm' is named twice"),
        (vec!["glm=1", "glm=2"], "provider 'glm' is named twice"),
        (vec!["glm=1,,back=2"], "'' is not PROVIDER=N"),
    ] {
        let mut a: Vec<&str> = Vec::new();
        for g in &given {
            a.extend(["--max-inflight", g]);
        }
        a.push("hi");
        let out = env.run(&a);
        out.assert_fails_with(2, "--max-inflight")
            .assert_stderr_contains(says);
    }
    assert!(env.llm.requests().is_empty(), "nothing was sent");
    for (value, says) in [
        ("glm=0", "'glm=0': the count must be"),
        ("glm=1,glm=3", "provider 'glm' is named twice"),
        ("=2", "'=2' names no provider"),
    ] {
        let mut bad = solo(PI_NEWEST);
        bad.env("CCSWITCH_MAX_INFLIGHT", value);
        bad.run(["hi"])
            .assert_fails_with(2, "CCSWITCH_MAX_INFLIGHT")
            .assert_stderr_contains(says);
    }
}

fn max_inflight_names_an_unknown_provider_after_pi_lists_models(v: &str) {
    let env = two(v);
    let out = env.run(args(&["--max-inflight", "glm=2,zhipu=3", "hi"]));
    out.assert_fails_with(
        2,
        "--max-inflight names provider 'zhipu', which has no available model",
    );
    out.assert_stderr_contains("back")
        .assert_stderr_contains("glm");
    assert!(env.llm.requests().is_empty(), "nothing was sent");
    let mut from_env = two(v);
    from_env.env("CCSWITCH_MAX_INFLIGHT", "nosuch=1");
    from_env
        .run(args(&["hi"]))
        .assert_fails_with(2, "--max-inflight names provider 'nosuch'");
    // In a batch, before any job runs.
    let out = env.run_stdin(
        args(&["--batch", "-", "--max-inflight", "zhipu=3"]),
        b"{\"id\":\"j\",\"prompt\":\"hi\"}\n",
    );
    out.check(out.code == 2, "exit 2")
        .assert_stderr_contains("--max-inflight names provider 'zhipu'");
    assert!(env.llm.requests().is_empty(), "nothing was sent");
}

fn explain_shows_the_capacity_a_run_would_start_from(v: &str) {
    let env = two(v);
    let out = env.run(args(&["--explain", "--max-inflight", "back=3", "hi"]));
    out.assert_success()
        .assert_stdout_contains("capacity (requests in flight per provider):")
        .assert_stdout_contains("back: nothing learned yet")
        .assert_stdout_contains(", --max-inflight 3")
        .assert_stdout_contains("glm: nothing learned yet");
    let j = env
        .run(args(&[
            "--explain",
            "--json",
            "--max-inflight",
            "back=3",
            "hi",
        ]))
        .json();
    let cap = j["capacity"]
        .as_array()
        .expect("capacity in --explain --json");
    let back = cap
        .iter()
        .find(|r| r["provider"] == "back")
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(back["max_inflight"], 3, "{j}");
    assert_eq!(back["in_flight"], 0, "{j}");
    assert!(back["limit"].is_null(), "{j}");
    // After a refusal, the learned limit.
    env.llm.script(
        "a",
        "m",
        vec![Behaviour::Status(429, bodies::glm_1302()), Behaviour::Ok],
    );
    env.run(args(&["hi"])).assert_success();
    let sent = env.llm.requests().len();
    env.run(args(&["--explain", "hi"]))
        .assert_success()
        .assert_stdout_contains(
            "glm: limit 1 (learned from its capacity signals), 0 in flight now",
        );
    assert_eq!(env.llm.requests().len(), sent, "--explain sends nothing");
}

/// Issue 24 with issue 23: a capacity signal that says when to send again (OpenAI's `Please try
/// again in 1s`) pauses its provider for that long: with no other candidate the run sends
/// again no sooner than the stated second (on our own wait, not Pi's retry), opens no breaker,
/// and counts the pause as time waited for a slot.
#[test]
fn a_capacity_signal_stating_a_delay_is_waited_that_long() {
    let env = solo(PI_NEWEST);
    env.llm.script(
        "a",
        "m",
        vec![
            Behaviour::Status(429, bodies::openai_try_again_in("1s")),
            Behaviour::Ok,
        ],
    );
    let out = env.run(args(&["--json", "hi"]));
    out.assert_success();
    let j = out.json();
    assert_eq!(j["attempts"][0]["capacity_signal"], true, "{}", out.dump());
    let reqs = env.llm.requests_to("a", "m");
    assert_eq!(reqs.len(), 2, "one refusal, one answer: {}", out.dump());
    let gap = reqs[1].at - reqs[0].at;
    eprintln!("a capacity signal stating 1s: sent again after {gap:?}");
    assert!(
        gap >= Duration::from_millis(1000),
        "sent again after {gap:?}, before the stated second\n{}",
        out.dump()
    );
    assert!(
        j["capacity_wait_ms"].as_u64().is_some_and(|w| w >= 800),
        "the pause is time waited for a slot: {}",
        out.dump()
    );
    out.assert_stderr_lacks("breaker");
}

/// A rate limit that states a delay longer than a capacity pause lasts (20m30s) is a rate limit
/// with a stated reset: the run goes to the other candidate at once and `--status` shows the
/// provider's breaker open until the stated time.
#[test]
fn a_rate_limit_stating_a_long_delay_opens_the_breaker_until_then() {
    let env = two(PI_NEWEST);
    env.llm.script(
        "a",
        "m",
        vec![Behaviour::Status(
            429,
            bodies::openai_try_again_in("20m30s"),
        )],
    );
    let out = env.run(args(&["--json", "hi"]));
    out.assert_success();
    let j = out.json();
    assert_eq!(j["model"]["provider"], "back", "{}", out.dump());
    assert_eq!(j["attempts"][0]["capacity_signal"], false, "{}", out.dump());
    assert_eq!(j["attempts"][0]["class"], "rate_limit", "{}", out.dump());
    let status = env.run(["--status", "--json"]);
    status.assert_success();
    let text = status.stdout.clone();
    assert!(
        text.contains("\"stated_reset\""),
        "the breaker keeps the stated reset: {text}"
    );
}
