//! Watchdogs by each model's pace (issue 31): derived limits, the cut and its failure, the
//! assistant's `message_start` (headers) not taken for a response, re-judging while an attempt
//! runs, the deadline's share (never for the last candidate), and the clean answer's sample.

use super::*;
use crate::failover::classify::{SHARE_MARKER, WATCHDOG_MARKER};
use crate::pace::Sample;

/// Health holding `n` fresh answers of `model`, each `first_ms` to the first response and
/// 100 ms between events.
fn paced(model: &str, first_ms: u64, n: u64) -> Health {
    let mut h = Health::default();
    for i in 0..n {
        h.apply(
            &Delta::Pace {
                key: model.into(),
                sample: Sample {
                    at_ms: 9_999_000 + i,
                    first_ms,
                    gap_ms: 100,
                    prompt_chars: 10,
                },
            },
            1.0,
        );
    }
    h
}

fn slow_cfg() -> Config {
    Config {
        first_response: Duration::from_secs(90),
        stall: Duration::from_secs(120),
        ..cfg()
    }
}

/// Every progress line, `-v`'s included.
fn lines(h: &mut H) -> Vec<String> {
    h.drain();
    h.log
        .iter()
        .filter_map(|a| match a {
            Action::Progress { line, .. } => Some(line.clone()),
            _ => None,
        })
        .collect()
}

fn said(h: &mut H, needle: &str) -> bool {
    lines(h).iter().any(|l| l.contains(needle))
}

/// A machine whose run has `deadline_ms` left, on `pool`.
fn with_deadline(health: Health, deadline_ms: u64) -> H {
    H::from_machine(|now| {
        Machine::with_options(
            now,
            slow_cfg(),
            health,
            "Summarise.".into(),
            vec![],
            Options {
                deadline: Some(now.instant + Duration::from_millis(deadline_ms)),
                ..Options::default()
            },
        )
    })
}

#[test]
fn a_request_far_outside_its_models_pace_is_cut_at_the_derived_limit() {
    let mut h = H::with(slow_cfg(), paced("a/m1", 200, 10), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    assert!(
        said(
            &mut h,
            "watchdogs for a/m1: first response 1.6 s (from p95 200 ms over 10 answers), stall \
             1.3 s (from p95 100 ms over 10 answers)"
        ),
        "{:?}",
        lines(&mut h)
    );
    h.event(json!({"type": "agent_start"}));
    // The assistant's message starts with the headers: not a response.
    h.advance(500);
    h.event(json!({"type": "message_start", "message": {"role": "assistant", "content": []}}));
    assert_eq!(
        h.m.timers.watchdog(),
        Some((
            super::super::timers::Watchdog::FirstResponse,
            h.now().instant + Duration::from_millis(1100)
        ))
    );
    h.advance(1099);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.sent().is_empty());
    h.advance(1);
    h.m.handle(h.now(), Input::Timeout);
    assert_eq!(h.sent()[0].1, Command::Abort);
    assert!(said(
        &mut h,
        "watchdog: no first response from a/m1 in 1.6 s (from p95 200 ms over 10 answers); aborting"
    ));
    h.assistant_end("aborted", "", Some("Request aborted"));
    h.settle();
    let deltas = h.deltas();
    assert!(
        matches!(
            &deltas[0],
            Delta::Failure { scope: Scope::Endpoint, class: FailureClass::Endpoint, error, .. }
                if error == "watchdog: no first response in 1.6 s"
        ),
        "{deltas:?}"
    );
    let attempt = &h.m.attempts()[0];
    assert_eq!(
        attempt.failure.as_ref().map(|f| f.matched.as_str()),
        Some(WATCHDOG_MARKER)
    );
    assert!(attempt.failure.as_ref().is_some_and(|f| f.silence()));
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
    let paces: Vec<String> = h
        .deltas()
        .iter()
        .filter_map(|d| match d {
            Delta::Pace { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(paces, ["b/m1"], "only the clean answer is a sample");
}

#[test]
fn a_slow_start_within_the_models_own_pace_is_not_cut() {
    // 15 s to the first token every time: 46 s allowed.
    let mut h = H::with(slow_cfg(), paced("a/m1", 15_000, 10), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    h.advance(20_000);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.sent().is_empty());
    h.event(json!({"type": "message_update"}));
    h.assistant_end("stop", "Slow but sure.", None);
    h.settle();
    assert_eq!(answered_by(&h), "a/m1 Slow but sure.");
    assert!(h.deltas().iter().any(|d| matches!(
        d,
        Delta::Pace { key, sample } if key == "a/m1" && sample.first_ms == 20_000
    )));
}

#[test]
fn an_attempt_without_a_pace_is_rejudged_as_soon_as_others_establish_it() {
    let mut h = H::with(slow_cfg(), Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    assert!(said(
        &mut h,
        "watchdogs for a/m1: first response 90 s (the ceiling: no pace yet, 0 recent answers)"
    ));
    h.event(json!({"type": "agent_start"}));
    // Every second, shared health is read again while the model has no pace.
    h.advance(1000);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.drain().contains(&Action::ReloadHealth));
    h.advance(1000);
    h.feed(Input::HealthReloaded(Health::default()));
    assert!(h.sent().is_empty(), "still no pace: still the ceiling");
    // Other answers establish the pace: 1.3 s, already past — cut at once.
    h.advance(500);
    h.feed(Input::HealthReloaded(paced("a/m1", 100, 10)));
    assert!(said(
        &mut h,
        "watchdogs for a/m1 re-judged now that its pace is known"
    ));
    let deadline = h.m.poll_deadline().expect("armed");
    assert!(deadline <= h.now().instant);
    h.m.handle(h.now(), Input::Timeout);
    assert_eq!(h.sent()[0].1, Command::Abort);
}

#[test]
fn with_candidates_left_the_first_response_waits_only_its_share_of_the_deadline() {
    let mut h = with_deadline(Health::default(), 20_000);
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    h.ok_prompt(&sent);
    assert!(said(
        &mut h,
        "deadline share: a/m1 may wait 10 s for a first response (its share of the 20 s left: 1 \
         other candidate)"
    ));
    h.event(json!({"type": "agent_start"}));
    h.advance(10_000);
    h.m.handle(h.now(), Input::Timeout);
    assert_eq!(h.sent()[0].1, Command::Abort);
    assert!(said(
        &mut h,
        "its share of the deadline (10 s left, 1 other candidate to try)"
    ));
    h.assistant_end("aborted", "", Some("Request aborted"));
    h.settle();
    let deltas = h.deltas();
    assert!(
        matches!(
            &deltas[0],
            Delta::Failure {
                scope: Scope::Endpoint,
                ..
            }
        ),
        "silence with no pace to excuse it is a health signal: {deltas:?}"
    );
    assert_eq!(
        h.m.attempts()[0]
            .failure
            .as_ref()
            .map(|f| f.matched.as_str()),
        Some(SHARE_MARKER)
    );
    // The backup is the last candidate: no share, its own (ceiling) limit; the deadline itself
    // is the driver's.
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.event(json!({"type": "agent_start"}));
    assert_eq!(
        h.m.timers.watchdog().map(|(_, at)| at),
        Some(h.now().instant + Duration::from_secs(90))
    );
    assert_eq!(
        lines(&mut h)
            .iter()
            .filter(|l| l.starts_with("deadline share"))
            .count(),
        1
    );
}

#[test]
fn a_model_slow_by_nature_cut_at_its_share_keeps_its_breakers_closed() {
    let mut h = with_deadline(paced("a/m1", 15_000, 10), 20_000);
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    h.advance(10_000);
    h.m.handle(h.now(), Input::Timeout);
    assert_eq!(h.sent()[0].1, Command::Abort);
    h.assistant_end("aborted", "", Some("Request aborted"));
    h.settle();
    assert!(
        !h.deltas()
            .iter()
            .any(|d| matches!(d, Delta::Failure { key, .. } if key.starts_with('a'))),
        "{:?}",
        h.deltas()
    );
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("From b.");
    assert_eq!(answered_by(&h), "b/m1 From b.");
}

#[test]
fn the_last_candidate_is_never_cut_short_by_the_share() {
    let mut h = with_deadline(Health::default(), 20_000);
    let only = vec![model("a", "m1", false, 128_000)];
    let sent = h.start(model("a", "m1", false, 128_000), only);
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    assert!(!said(&mut h, "deadline share"));
    assert_eq!(
        h.m.timers.watchdog().map(|(_, at)| at),
        Some(h.now().instant + Duration::from_secs(90))
    );
}

#[test]
fn thinking_is_progress_and_gaps_are_measured_between_events() {
    let mut h = H::with(slow_cfg(), Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    h.advance(700);
    for _ in 0..5 {
        h.event(
            json!({"type": "message_update", "assistantMessageEvent": {"type": "thinking_delta"}}),
        );
        h.advance(300);
    }
    h.event(json!({"type": "message_update"}));
    h.assistant_end("stop", "Thought through.", None);
    h.settle();
    assert!(h.deltas().iter().any(|d| matches!(
        d,
        Delta::Pace { sample, .. } if sample.first_ms == 700 && sample.gap_ms == 300
    )));
}

fn two_providers() -> Vec<Value> {
    vec![
        model("a", "m1", false, 128_000),
        model("b", "m1", false, 128_000),
    ]
}

/// Issue 31: a 5xx from an endpoint that was already failing (this request was its probe, or
/// another run found it down) is an outage, not a blip: no immediate retry there, one request
/// per cooldown.
#[test]
fn a_5xx_from_an_endpoint_already_failing_is_not_retried_there() {
    let mut health = Health::default();
    health.apply(
        &Delta::Failure {
            at: 9_000_000,
            key: "a@http://127.0.0.1:9/a/v1".into(),
            scope: Scope::Endpoint,
            class: FailureClass::Endpoint,
            error: "503".into(),
        },
        1.0,
    );
    let mut h = H::new(health, vec![]);
    // Its 10 s cooldown ended long ago: half-open, the request is the probe.
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    h.ok_prompt(&sent);
    let e503 = r#"503: {"message":"The engine is currently overloaded","type":"server_error"}"#;
    h.fail_settled(e503);
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
    assert_eq!(
        h.commands()[2..],
        [
            "prompt",
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "prompt"
        ]
    );
}
