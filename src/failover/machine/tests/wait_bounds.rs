//! Issue 32 in the machine, on hand-made times: a busy key's back-off waited out or overflowed
//! and never past the deadline or `--max-wait`; `--max-wait` ending breaker and slot waits;
//! `--prefer-primary` waiting for the primary's stated reset (at the start and after its
//! failure) within its window only; a breaker's probe that gets no retry.

use super::*;
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::capacity::{Change, Decided, Verdict};
use crate::failover::machine::capacity::SLOT_POLL;
use crate::health::StatedReset;

const RL: &str = r#"429: {"error":{"code":"1302","message":"High concurrency usage of this API, please reduce concurrency"}}"#;
const T0: u64 = 10_000_000;

fn one_model() -> Vec<Value> {
    vec![model("a", "m1", false, 128_000)]
}

/// A machine whose deadline (and `--max-wait`, `--prefer-primary`) are given, its base instant
/// the one the deadline is counted from.
fn bounded(health: Health, deadline_s: u64, set: impl FnOnce(&mut Config), slotted: bool) -> H {
    let base = crate::clock::now().instant;
    let options = Options {
        deadline: Some(base + Duration::from_secs(deadline_s)),
        spread_seed: 0,
        ..if slotted {
            slots(8, false)
        } else {
            Options::default()
        }
    };
    let mut h = H::build(cfg_with(set), health, options);
    h.base = base;
    h
}

impl H {
    fn admissions(&mut self) -> Vec<(u64, Vec<String>)> {
        self.drain();
        self.log
            .iter()
            .filter_map(|a| match a {
                Action::Capacity {
                    id,
                    op: CapacityOp::Admit { choices, .. },
                    ..
                } => Some((*id, choices.iter().map(|c| c.provider.clone()).collect())),
                _ => None,
            })
            .collect()
    }

    fn reply(&mut self, id: u64, reply: CapacityReply) {
        self.m.handle(self.now(), Input::Capacity { id, reply });
    }

    fn grant_last(&mut self) -> Vec<(String, Command)> {
        let (id, _) = self.admissions().pop().expect("an admission");
        self.reply(
            id,
            CapacityReply::Admitted {
                index: 0,
                limit: 1,
                in_flight: 1,
            },
        );
        self.sent()
    }

    /// The attempt on the granted slot is refused for capacity; the store answers `verdict`.
    fn refused_with(&mut self, verdict: Verdict) {
        self.fail_settled(RL);
        self.drain();
        let id = self
            .log
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::Capacity {
                    id,
                    op: CapacityOp::Apply { .. },
                    reply: true,
                } => Some(*id),
                _ => None,
            })
            .expect("the refusal");
        self.reply(id, CapacityReply::Applied(Decided::Refused(verdict)));
    }
}

fn back_off(until: u64, step: u32) -> Verdict {
    Verdict::BackOff {
        change: Change { from: 1, to: 1 },
        until,
        step,
    }
}

/// A busy key on the only provider: its back-off is waited out — on a timer at its end, no
/// breaker, counted as waiting — then the provider is asked again.
#[test]
fn a_busy_keys_back_off_is_waited_out_on_the_only_provider() {
    let mut h = bounded(Health::default(), 600, |_| {}, true);
    h.start(model("a", "m1", false, 128_000), one_model());
    let sent = h.grant_last();
    h.ok_prompt(&sent);
    h.refused_with(back_off(T0 + 2000, 1));
    assert_eq!(
        notes(&mut h, Note::Retry),
        [
            "busy: a refused with only this request in flight (other clients are using the key); \
          leaving it alone for 2s (back-off 1 of 5)"
        ]
    );
    assert_eq!(
        h.m.poll_deadline(),
        Some(h.now().instant + Duration::from_millis(2000)),
        "asked again when the back-off ends"
    );
    assert!(h.admissions().len() == 1, "not before");
    assert!(
        !h.deltas()
            .iter()
            .any(|d| matches!(d, Delta::Failure { .. })),
        "no breaker"
    );
    h.advance(2000);
    h.m.handle(h.now(), Input::Timeout);
    assert_eq!(h.m.waited_ms(h.now()), 2000);
    let (_, choices) = h.admissions().pop().expect("asked again");
    assert_eq!(choices, ["a"]);
    let sent = h.grant_last();
    h.complete_redispatch(sent);
    h.answer("Hello.");
    assert_eq!(answered_by(&h), "a/m1 Hello.");
}

/// With another provider, a busy key overflows to it at once (as any capacity signal).
#[test]
fn a_busy_key_overflows_to_a_candidate_with_room() {
    let mut h = bounded(Health::default(), 600, |_| {}, true);
    h.start(model("a", "m1", false, 128_000), two_providers());
    let sent = h.grant_last();
    h.ok_prompt(&sent);
    h.refused_with(back_off(T0 + 4000, 2));
    let (_, choices) = h.admissions().pop().expect("an admission");
    assert_eq!(choices, ["b"], "elsewhere at once");
    let sent = h.grant_last();
    h.complete_redispatch(sent);
    h.answer("From b.");
    assert_eq!(answered_by(&h), "b/m1 From b.");
    assert_eq!(h.m.waited_ms(h.now()), 0);
}

/// A back-off that would end past the deadline is not waited into a timeout: the run ends at
/// once, exit 1, its retry hint about the busy provider and in seconds.
#[test]
fn a_back_off_past_the_deadline_ends_the_run_with_a_hint_in_seconds() {
    let mut h = bounded(Health::default(), 5, |_| {}, true);
    h.start(model("a", "m1", false, 128_000), one_model());
    let sent = h.grant_last();
    h.ok_prompt(&sent);
    h.refused_with(back_off(T0 + 7500, 4));
    let Outcome::Exhausted { reason, retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(reason, Exhaustion::NoCandidate);
    assert_eq!(retry.retry_after_ms, Some(8000));
    assert_eq!(
        retry.reason,
        "retrying later could help: a is busy with other clients' requests; try again in 8s"
    );
}

/// `--max-wait` below the back-off: the run ends by it.
#[test]
fn a_back_off_past_max_wait_ends_the_run_by_it() {
    let mut h = bounded(
        Health::default(),
        600,
        |c| c.max_wait = Some(Duration::from_secs(1)),
        true,
    );
    h.start(model("a", "m1", false, 128_000), one_model());
    let sent = h.grant_last();
    h.ok_prompt(&sent);
    h.refused_with(back_off(T0 + 1500, 1));
    let Outcome::Exhausted { reason, retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(reason, Exhaustion::MaxWait { limit_ms: 1000 });
    assert_eq!(
        reason.to_string(),
        "no candidate is usable within --max-wait 1s"
    );
    assert_eq!(retry.retry_after_ms, Some(2000));
}

/// Every candidate cooling for minutes, waiting on, `--max-wait 30s`: the run does not wait
/// at all (it could not be enough) and ends by the bound, with the breakers' retry hint.
#[test]
fn max_wait_ends_a_run_that_would_wait_longer_for_a_breaker() {
    let mut health = Health::default();
    cooling(&mut health, "a", FailureClass::Quota, T0 - 1000);
    cooling(&mut health, "b", FailureClass::RateLimit, T0 - 1000);
    let mut h = bounded(
        health,
        3600,
        |c| {
            c.wait = true;
            c.max_wait = Some(Duration::from_secs(30));
        },
        false,
    );
    h.start(model("a", "m1", false, 128_000), two_providers());
    let Outcome::Exhausted { reason, retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(reason, Exhaustion::MaxWait { limit_ms: 30_000 });
    assert_eq!(retry.retry_after_ms, Some(299_000), "{}", retry.reason);
    assert!(notes(&mut h, Note::Wait).is_empty(), "no wait started");
}

/// A wait for a slot, whose end nobody knows, is given up when `--max-wait` comes.
#[test]
fn max_wait_ends_a_wait_for_a_slot() {
    let mut h = bounded(
        Health::default(),
        600,
        |c| c.max_wait = Some(Duration::from_secs(3)),
        true,
    );
    h.start(model("a", "m1", false, 128_000), one_model());
    let full = CapacityReply::Full {
        next_expiry: None,
        held: false,
    };
    let mut asked = 0;
    while h.m.outcome().is_none() {
        let (id, _) = h.admissions().pop().expect("an admission");
        h.reply(id, full);
        asked += 1;
        let next = h.m.poll_deadline().expect("a timer");
        let ms = next.saturating_duration_since(h.now().instant).as_millis() as u64;
        assert!(ms <= SLOT_POLL.as_millis() as u64, "{ms}");
        h.advance(ms);
        h.m.handle(h.now(), Input::Timeout);
        assert!(asked < 100, "ends");
    }
    let Outcome::Exhausted { reason, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(reason, Exhaustion::MaxWait { limit_ms: 3000 });
    assert_eq!(h.t, 3000, "exactly at the bound");
    assert_eq!(h.m.waited_ms(h.now()), 3000);
    assert!(
        notes(&mut h, Note::Wait)
            .contains(&"waited 3s in all: --max-wait reached, giving up".to_string())
    );
}

/// The primary's provider stated its quota resets `ahead_ms` from the tests' start.
fn stated_quota(ahead_ms: u64) -> Health {
    let mut health = Health::default();
    cooling(&mut health, "a", FailureClass::Quota, T0 - 1000);
    health.apply(
        &Delta::Stated {
            key: "a".into(),
            scope: Scope::Provider,
            class: FailureClass::Quota,
            reset: StatedReset {
                at_ms: T0 + ahead_ms,
                spread_ms: 0,
                words: "\"reset\"".into(),
            },
        },
        1.0,
    );
    health
}

fn set_model(to: &str) -> Command {
    Command::SetModel {
        provider: to.into(),
        model_id: "m1".into(),
    }
}

/// The issue's flat-fee primary: its window reset 81 s ahead, `--prefer-primary 10m`: the job
/// waits for it (one line), sends nothing to the backup, and goes to the primary's probe once
/// it reopens; the wait is the primary's.
#[test]
fn prefer_primary_waits_at_the_start_for_a_reset_within_its_window() {
    let mut h = bounded(
        stated_quota(81_000),
        3600,
        |c| c.prefer_primary = Some(Duration::from_secs(600)),
        false,
    );
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    assert!(sent.is_empty(), "nothing to the backup: {sent:?}");
    assert_eq!(
        notes(&mut h, Note::Wait),
        [
            "waiting 1m21s for the primary a/m1 (a stated its limit resets at 1970-01-01 02:48:01 \
          UTC) instead of failing over (--prefer-primary 10m00s)"
        ]
    );
    for _ in 0..80 {
        h.advance(1000);
        h.m.handle(h.now(), Input::Timeout);
        h.m.handle(h.now(), Input::HealthReloaded(stated_quota(81_000)));
        assert!(h.sent().is_empty(), "still waiting at {} ms", h.t);
    }
    h.advance(1000);
    h.m.handle(h.now(), Input::Timeout);
    h.m.handle(h.now(), Input::HealthReloaded(stated_quota(81_000)));
    let target = crate::health::ProbeTarget::new(Scope::Provider, "a");
    assert!(h.drain().contains(&Action::ClaimProbe { target }));
    assert_eq!(h.m.primary_wait_ms(h.now()), 81_000);
    h.m.handle(h.now(), Input::ProbeClaimed { granted: true });
    let sent = h.sent();
    assert_eq!(
        sent.last().map(|(_, c)| c.name()),
        Some("prompt"),
        "{sent:?}"
    );
    assert!(!sent.iter().any(|(_, c)| *c == set_model("b")));
}

/// Without the option, or with the reset past its window, the job goes to the backup as
/// always.
#[test]
fn past_its_window_or_without_the_option_the_job_fails_over() {
    for (prefer, ahead) in [(None, 81_000), (Some(600), 601_000)] {
        let mut h = bounded(
            stated_quota(ahead),
            3600,
            |c| c.prefer_primary = prefer.map(Duration::from_secs),
            false,
        );
        let sent = h.start(model("a", "m1", false, 128_000), two_providers());
        assert!(
            sent.iter().any(|(_, c)| *c == set_model("b")),
            "{prefer:?}: {sent:?}"
        );
        assert!(notes(&mut h, Note::Wait).is_empty());
        assert_eq!(h.m.primary_wait_ms(h.now()), 0);
    }
    // The deadline bounds it too.
    let mut h = bounded(
        stated_quota(81_000),
        60,
        |c| c.prefer_primary = Some(Duration::from_secs(600)),
        false,
    );
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    assert!(sent.iter().any(|(_, c)| *c == set_model("b")));
}

/// The primary answers its window's end (GLM's 1308, the reset 3 minutes ahead): with the
/// option the job waits for it instead of switching to the backup.
#[test]
fn prefer_primary_waits_after_the_primary_states_its_reset() {
    const GLM_1308: &str = r#"429: {"error":{"code":"1308","message":"已达到 5 小时的使用上限。您的限额将在 1970-01-01 10:49:40 重置。"}}"#;
    for prefer in [Some(600), None] {
        let mut h = bounded(
            Health::default(),
            3600,
            |c| c.prefer_primary = prefer.map(Duration::from_secs),
            false,
        );
        let sent = h.start(model("a", "m1", false, 128_000), two_providers());
        h.ok_prompt(&sent);
        h.fail_settled(GLM_1308);
        let sent = h.sent();
        let waits = notes(&mut h, Note::Wait);
        match prefer {
            Some(_) => {
                assert!(sent.is_empty(), "{sent:?}");
                assert_eq!(waits.len(), 1, "{waits:?}");
                assert!(
                    waits[0].starts_with("waiting 3m0") && waits[0].contains("primary a/m1"),
                    "{waits:?}"
                );
                assert!(h.m.waiting_until().is_some());
            }
            None => {
                // The redispatch to b starts at once (a fork, then set_model).
                assert_eq!(sent.len(), 1, "{sent:?}");
                assert_eq!(sent[0].1, Command::GetForkMessages);
                assert!(waits.is_empty());
                assert!(h.m.waiting_until().is_none());
            }
        }
    }
}

/// A breaker's probe is one request: a 5xx on it reopens the breaker and the run goes on
/// without the same-model retry a first failure gets.
#[test]
fn a_probe_gets_no_same_model_retry() {
    let mut health = Health::default();
    health.apply(
        &Delta::Failure {
            at: T0 - 600_000,
            key: "a/m1".into(),
            scope: Scope::Model,
            class: FailureClass::Endpoint,
            error: "x".into(),
        },
        1.0,
    );
    let mut h = H::build(cfg(), health, Options::default());
    let ids: Vec<String> = h.initial().into_iter().map(|(id, _)| id).collect();
    h.respond(
        &ids[0],
        "get_state",
        true,
        json!({"model": model("a", "m1", false, 128_000)}),
    );
    h.respond(
        &ids[1],
        "get_available_models",
        true,
        json!({"models": one_model()}),
    );
    h.m.handle(h.now(), Input::ProbeClaimed { granted: true });
    let sent = h.sent();
    h.ok_prompt(&sent);
    h.fail_settled(r#"503: {"error":{"message":"The engine is currently overloaded"}}"#);
    assert!(
        !h.progress().iter().any(|l| l.starts_with("retry a/m1")),
        "{:?}",
        h.progress()
    );
    assert!(matches!(h.outcome(), Outcome::Exhausted { .. }));
}
