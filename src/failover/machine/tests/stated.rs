//! Stated resets in the machine (issue 24), on hand-made times: a quota window or rate limit
//! whose provider says when it lifts keeps its breaker open until then, Pi's retry never waits
//! out a quota, and the retry hint names the provider and the time.

use super::*;

/// GLM's 1308 body as Pi reports it, the window resetting at 1970-01-01 10:49:40 CST =
/// 02:49:40 UTC = 10_180_000 ms: 180 s after the tests' start (10_000_000).
const GLM_1308: &str = r#"429: {"error":{"code":"1308","message":"已达到 5 小时的使用上限。您的限额将在 1970-01-01 10:49:40 重置。"}}"#;
const RESET_MS: u64 = 10_180_000;

/// Tokyo, for the local half of the times (the tests' clock is in 1970: a zone west of UTC
/// would be before the epoch).
fn tokyo(_: u64) -> Option<i32> {
    Some(9 * 3600)
}

fn one_model() -> Vec<Value> {
    vec![model("a", "m1", false, 128_000)]
}

/// A quota failure on the last candidate, reported with Pi's auto-retry on: the run aborts
/// Pi's retry at once and ends there.
fn quota_on_the_last_candidate(h: &mut H, err: &str) {
    let sent = h.start(model("a", "m1", false, 128_000), one_model());
    h.ok_prompt(&sent);
    h.advance(400);
    h.event(json!({"type": "agent_start"}));
    h.assistant_end("error", "", Some(err));
    h.event(json!({"type": "agent_end", "willRetry": true}));
    h.event(json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": err}));
    let sent = h.sent();
    assert_eq!(
        sent.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>(),
        [Command::AbortRetry],
        "not left to Pi's retry"
    );
    h.respond(&sent[0].0, "abort_retry", true, Value::Null);
    h.event(json!({"type": "auto_retry_end", "success": false, "attempt": 1, "finalError": "Retry cancelled"}));
    h.settle();
}

/// Issue 24: GLM's 1308 with a reset 3 minutes ahead on the only model: the provider breaker
/// opens until the reset plus its spread (not 30 minutes), Pi's retry is cut short, and the
/// run ends with a retry hint at that time, naming the provider and the time in local time
/// and UTC.
#[test]
fn a_stated_quota_reset_opens_the_breaker_until_then_and_says_when_to_retry() {
    let mut h = H::with_options(Options {
        local_offset: Some(tokyo),
        ..Options::default()
    });
    quota_on_the_last_candidate(&mut h, GLM_1308);
    let spread = crate::health::cooldown::stated_spread_ms("a", RESET_MS);
    let deltas = h.deltas();
    assert!(
        matches!(&deltas[1], Delta::Stated { key, scope: Scope::Provider, class: FailureClass::Quota, reset }
            if key == "a" && reset.at_ms == RESET_MS && reset.spread_ms == spread
                && reset.words == "\"1970-01-01 10:49:40\", read as China Standard Time (UTC+8)"),
        "{deltas:?}"
    );
    assert_eq!(
        h.m.health().providers["a"].cooldown_until,
        Some(RESET_MS + spread)
    );
    let Outcome::Exhausted { retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert!(retry.could_help, "{retry:?}");
    // The failure was judged 400 ms in.
    assert_eq!(retry.retry_after_ms, Some(RESET_MS + spread - 10_000_400));
    assert!(
        retry.reason.ends_with(
            ": a stated its limit resets at 1970-01-01 11:49:40 +09:00 (1970-01-01 02:49:40 UTC)"
        ),
        "{}",
        retry.reason
    );
    assert!(
        retry
            .reason
            .starts_with("retrying later could help: a/m1 is usable again in 3m0"),
        "{}",
        retry.reason
    );
    let breaker = notes(&mut h, Note::Breaker);
    assert_eq!(breaker.len(), 1, "{breaker:?}");
    assert!(
        breaker[0].starts_with("breaker open: provider a (quota) for 3m0")
            && breaker[0].ends_with(
                "(a stated its limit resets at 1970-01-01 11:49:40 +09:00 (1970-01-01 02:49:40 UTC))"
            ),
        "{breaker:?}"
    );
}

/// A quota that states no reset (a 402) on the last candidate is not left to Pi's retry
/// either, and keeps today's advice.
#[test]
fn an_unstated_quota_on_the_last_candidate_ends_at_once_with_the_top_up_hint() {
    let mut h = H::new(Health::default(), vec![]);
    quota_on_the_last_candidate(&mut h, Q402);
    assert!(
        !h.deltas().iter().any(|d| matches!(d, Delta::Stated { .. })),
        "nothing stated"
    );
    let Outcome::Exhausted { retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert!(!retry.could_help);
    assert_eq!(retry.retry_after_ms, None);
    assert!(
        retry.reason.ends_with("top up or raise the quota"),
        "{retry:?}"
    );
}

/// A stated reset in the past or more than 8 days ahead is not believed: today's cooldown.
#[test]
fn a_reset_in_the_past_or_too_far_ahead_keeps_todays_cooldown() {
    for when in ["1970-01-01 10:40:00", "1970-01-12 10:49:40"] {
        let err = GLM_1308.replace("1970-01-01 10:49:40", when);
        let mut h = H::new(Health::default(), vec![]);
        quota_on_the_last_candidate(&mut h, &err);
        let r = &h.m.health().providers["a"];
        assert_eq!(r.cooldown_until, Some(10_000_400 + 30 * 60_000), "{when}");
        assert_eq!(r.stated_reset, None, "{when}");
    }
}

/// A rate limit's stated delay longer than SPEC's 5 minutes is the cooldown.
#[test]
fn a_rate_limit_that_states_a_longer_delay_cools_that_long() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(
        r#"429: {"message":"Rate limit reached for requests per day. Please try again in 20m30s.","type":"requests"}"#,
    );
    let spread = crate::health::cooldown::stated_spread_ms("a", 10_000_000 + 1_230_000);
    assert_eq!(
        h.m.health().providers["a"].cooldown_until,
        Some(10_000_000 + 1_230_000 + spread)
    );
}

/// Issue 24 item 5: with waiting on, a job whose candidates are all blocked by stated resets
/// waits for the earliest (one line, naming the provider's statement), and starts again at
/// its own place in the restart spread, not at the reopening itself.
#[test]
fn with_waiting_a_run_waits_for_the_stated_reset_and_its_place_in_the_spread() {
    let mut health = Health::default();
    let t0 = 10_000_000;
    for (p, reset) in [("a", t0 + 20_000), ("b", t0 + 600_000)] {
        cooling(&mut health, p, FailureClass::Quota, t0 - 1000);
        health.apply(
            &Delta::Stated {
                key: p.into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                reset: crate::health::StatedReset {
                    at_ms: reset,
                    spread_ms: 0,
                    words: "reset at …".into(),
                },
            },
            1.0,
        );
    }
    let c = cfg_with(|c| c.wait = true);
    let base = crate::clock::now().instant;
    let seed = 3_250; // this job's place: 3.25 s after the reopening
    let mut h = H::build(
        c,
        health.clone(),
        Options {
            deadline: Some(base + Duration::from_secs(60)),
            local_offset: Some(|_| Some(0)),
            spread_seed: seed,
            ..Options::default()
        },
    );
    h.base = base;
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(
        notes(&mut h, Note::Wait),
        [
            "every candidate is cooling down; waiting 24s for provider a (quota) to reopen \
             (a/m1); a stated its limit resets at 1970-01-01 02:47:00 +00:00 (1970-01-01 \
             02:47:00 UTC)"
        ]
    );
    assert_eq!(
        h.m.waiting_until(),
        Some(base + Duration::from_millis(23_250))
    );
    // Reopened at 20 s, but this job's place is 23.25 s: a check then, no request before.
    h.advance(21_000);
    h.m.handle(h.now(), Input::HealthReloaded(health.clone()));
    assert!(h.sent().is_empty(), "not before its place in the spread");
    assert_eq!(
        h.m.poll_deadline(),
        Some(base + Duration::from_millis(22_000)),
        "the next check"
    );
    h.advance(2_250);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.drain().contains(&Action::ReloadHealth));
    h.m.handle(h.now(), Input::HealthReloaded(health));
    let sent = h.sent();
    assert_eq!(
        sent.last().map(|(_, c)| c.clone()),
        Some(Command::Prompt {
            message: "Summarise.".into(),
            images: vec![]
        }),
        "{sent:?}"
    );
    assert_eq!(
        notes(&mut h, Note::Wait).len(),
        2,
        "the wait line and the resume line"
    );
}

/// The same stated reset too late for the deadline: no wait, the retry hint says when.
#[test]
fn a_stated_reset_after_the_deadline_is_not_waited_for() {
    let mut health = Health::default();
    cooling(&mut health, "a", FailureClass::Quota, 9_999_000);
    health.apply(
        &Delta::Stated {
            key: "a".into(),
            scope: Scope::Provider,
            class: FailureClass::Quota,
            reset: crate::health::StatedReset {
                at_ms: 10_000_000 + 120_000,
                spread_ms: 0,
                words: "w".into(),
            },
        },
        1.0,
    );
    let c = cfg_with(|c| c.wait = true);
    let base = crate::clock::now().instant;
    let mut h = H::build(
        c,
        health.clone(),
        Options {
            deadline: Some(base + Duration::from_secs(60)),
            ..Options::default()
        },
    );
    h.base = base;
    h.start(model("a", "m1", false, 128_000), one_model());
    let Outcome::Exhausted { retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(retry.retry_after_ms, Some(120_000));
    assert!(
        retry
            .reason
            .ends_with(": a stated its limit resets at 1970-01-01 02:48:40 UTC"),
        "{retry:?}"
    );
}
