//! Capacity slots in the machine (issue 23), on hand-made times: admission before each
//! attempt, overflow, waiting, a capacity signal and its two verdicts, renewals, and the slot
//! given back however the run ends.

use super::*;
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::capacity::{CapacityDelta, Change, Decided, Verdict};
use crate::failover::machine::HEALTH_GRACE;
use crate::failover::machine::capacity::{SLOT_POLL, SLOT_RENEW};

const RL: &str = r#"429: {"error":{"code":"1302","message":"High concurrency usage of this API, please reduce concurrency"}}"#;

fn slotted() -> H {
    H::with_options(slots(8, true))
}

impl H {
    /// The providers of the latest admission's choices.
    fn last_admission(&mut self) -> (u64, Vec<String>) {
        self.drain();
        self.log
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::Capacity {
                    id,
                    op: CapacityOp::Admit { choices, .. },
                    ..
                } => Some((*id, choices.iter().map(|c| c.provider.clone()).collect())),
                _ => None,
            })
            .expect("an admission")
    }

    fn grant(&mut self, index: usize) -> Vec<(String, Command)> {
        let (id, _) = self.last_admission();
        self.m.handle(
            self.now(),
            Input::Capacity {
                id,
                reply: CapacityReply::Admitted {
                    index,
                    limit: 2,
                    in_flight: 1,
                },
            },
        );
        self.sent()
    }

    fn full(&mut self) {
        let (id, _) = self.last_admission();
        self.m.handle(
            self.now(),
            Input::Capacity {
                id,
                reply: CapacityReply::Full {
                    next_expiry: None,
                    held: false,
                },
            },
        );
    }

    /// Every give-back (`Apply`) so far, as (provider, kind).
    fn give_backs(&mut self) -> Vec<(String, &'static str)> {
        self.drain();
        self.log
            .iter()
            .filter_map(|a| match a {
                Action::Capacity {
                    op: CapacityOp::Apply { provider, delta },
                    ..
                } => Some((
                    provider.clone(),
                    match delta {
                        CapacityDelta::Answered { .. } => "answered",
                        CapacityDelta::Refused { .. } => "refused",
                        CapacityDelta::Release { .. } => "release",
                        CapacityDelta::Renew { .. } => "renew",
                        CapacityDelta::Acquire { .. } => "acquire",
                    },
                )),
                Action::Capacity {
                    op:
                        CapacityOp::Admit {
                            release: Some((provider, _)),
                            ..
                        },
                    ..
                } => Some((provider.clone(), "release with admission")),
                _ => None,
            })
            .collect()
    }

    fn last_refusal_id(&mut self) -> u64 {
        self.drain();
        self.log
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::Capacity {
                    id,
                    op:
                        CapacityOp::Apply {
                            delta: CapacityDelta::Refused { .. },
                            ..
                        },
                    reply: true,
                } => Some(*id),
                _ => None,
            })
            .expect("a refusal")
    }
}

#[test]
fn each_attempt_takes_a_slot_first_and_an_answer_gives_it_back() {
    let mut h = slotted();
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(
        sent.is_empty(),
        "nothing goes to Pi before the slot: {sent:?}"
    );
    let (_, choices) = h.last_admission();
    assert_eq!(
        choices,
        ["a", "b", "c"],
        "the start's provider first, then the candidates'"
    );
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.answer("Hello.");
    assert_eq!(answered_by(&h), "a/m1 Hello.");
    assert_eq!(h.give_backs(), [("a".to_string(), "answered")]);
}

#[test]
fn a_full_primary_overflows_to_the_granted_candidate_without_logging_a_switch() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(1);
    assert_eq!(
        h.commands().last().map(String::as_str),
        Some("set_model b/m1"),
        "{sent:?}"
    );
    let prompt = h.complete_redispatch(sent);
    assert!(matches!(prompt, Command::Prompt { .. }));
    h.answer("From b.");
    assert_eq!(answered_by(&h), "b/m1 From b.");
    assert!(
        h.progress()
            .iter()
            .any(|l| l == "switch a/m1 → b/m1 (capacity)"),
        "{:?}",
        h.progress()
    );
    assert!(
        !h.deltas().iter().any(|d| matches!(d, Delta::Switch(_))),
        "an overflow is not news for the shared switch log"
    );
}

#[test]
fn every_choice_full_waits_and_asks_again_on_a_poll_or_a_freed_slot() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    h.full();
    assert!(h.m.awaiting_slot());
    assert_eq!(h.m.poll_deadline(), Some(h.now().instant + SLOT_POLL));
    let (first, _) = h.last_admission();
    h.advance(SLOT_POLL.as_millis() as u64);
    h.m.handle(h.now(), Input::Timeout);
    let (second, choices) = h.last_admission();
    assert!(second > first, "asked again");
    assert_eq!(choices[0], "a", "the primary stays first in line");
    h.full();
    // A slot given back in this process wakes the run at once.
    h.advance(10);
    h.m.handle(h.now(), Input::SlotFreed);
    let (third, _) = h.last_admission();
    assert!(third > second);
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    assert_eq!(
        h.m.capacity_wait_ms(h.now()),
        SLOT_POLL.as_millis() as u64 + 10
    );
    // A reply to an older admission changes nothing.
    h.m.handle(
        h.now(),
        Input::Capacity {
            id: first,
            reply: CapacityReply::Full {
                next_expiry: None,
                held: false,
            },
        },
    );
    assert!(!h.m.awaiting_slot());
}

/// Issue 20's promise with issue 23's slots: a store that does not grant the first slot
/// within the pre-request grace (shared with the wait for health: `HEALTH_GRACE` after Pi is
/// ready) does not hold the request up — it goes out without a confirmed slot; the late
/// grant on that provider is kept (and renewed), as if it had come in time.
#[test]
fn a_slow_admission_sends_the_request_at_the_grace_and_keeps_the_late_slot() {
    let mut h = slotted();
    let ready = h.now().instant;
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty());
    let (first, _) = h.last_admission();
    assert_eq!(h.m.poll_deadline(), Some(ready + HEALTH_GRACE));
    h.advance(HEALTH_GRACE.as_millis() as u64);
    h.m.handle(h.now(), Input::Timeout);
    let sent = h.sent();
    assert!(
        sent.iter()
            .any(|(_, c)| matches!(c, Command::Prompt { .. })),
        "sent at the grace: {sent:?}"
    );
    h.ok_prompt(&sent);
    h.advance(100);
    h.m.handle(
        h.now(),
        Input::Capacity {
            id: first,
            reply: CapacityReply::Admitted {
                index: 0,
                limit: 2,
                in_flight: 1,
            },
        },
    );
    assert!(
        h.give_backs().is_empty(),
        "the slot the attempt went with is kept"
    );
    h.answer("Hello.");
    assert_eq!(answered_by(&h), "a/m1 Hello.");
    assert_eq!(h.give_backs(), [("a".to_string(), "answered")]);
}

/// A late grant on a provider the attempt did not go to is given back at once; a failover's
/// admission has no grace: it waits for the store (whose own budget bounds a slow one).
#[test]
fn a_late_slot_elsewhere_is_given_back_and_a_failover_waits_for_its_slot() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let (first, _) = h.last_admission();
    h.advance(HEALTH_GRACE.as_millis() as u64);
    h.m.handle(h.now(), Input::Timeout);
    let sent = h.sent();
    h.ok_prompt(&sent);
    h.m.handle(
        h.now(),
        Input::Capacity {
            id: first,
            reply: CapacityReply::Admitted {
                index: 1,
                limit: 2,
                in_flight: 1,
            },
        },
    );
    assert_eq!(h.give_backs(), [("b".to_string(), "release")]);
    // A quota failure on `a`: the failover asks for a slot and waits for the answer.
    h.advance(1000);
    h.fail_settled(Q402);
    let (second, choices) = h.last_admission();
    assert!(second > first, "a new admission");
    assert_eq!(choices[0], "b");
    h.advance(5000);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.sent().is_empty(), "nothing sent without the slot");
    let sent = h.grant(0);
    h.complete_redispatch(sent);
    h.answer("From b.");
    assert_eq!(answered_by(&h), "b/m1 From b.");
}

/// A batch job has no pre-request grace: its first slot waits for the store too.
#[test]
fn a_batch_jobs_first_slot_waits_for_the_store() {
    let mut h = H::with_options(slots(8, false));
    h.start(model("a", "m1", false, 128_000), pool());
    h.last_admission();
    h.advance(2000);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.sent().is_empty(), "nothing sent without the slot");
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.answer("Hello.");
    assert_eq!(answered_by(&h), "a/m1 Hello.");
}

#[test]
fn a_capacity_signal_cuts_the_limit_and_goes_elsewhere_without_a_breaker() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.fail_settled(RL);
    assert_eq!(h.give_backs(), [("a".to_string(), "refused")]);
    let id = h.last_refusal_id();
    h.m.handle(
        h.now(),
        Input::Capacity {
            id,
            reply: CapacityReply::Applied(Decided::Refused(Verdict::SlowDown(Change {
                from: 2,
                to: 1,
            }))),
        },
    );
    let (_, choices) = h.last_admission();
    assert!(
        !choices.contains(&"a".to_string()),
        "never straight back: {choices:?}"
    );
    let sent = h.grant(0);
    h.complete_redispatch(sent);
    h.answer("From b.");
    assert_eq!(answered_by(&h), "b/m1 From b.");
    assert!(
        !h.deltas()
            .iter()
            .any(|d| matches!(d, Delta::Failure { .. })),
        "a capacity signal opens no breaker: {:?}",
        h.deltas()
    );
    let signal = &h.m.attempts()[0];
    assert!(signal.capacity_signal, "{signal:?}");
    assert_eq!(
        signal.failure.as_ref().map(|f| f.class),
        Some(FailureClass::RateLimit)
    );
    assert!(
        h.progress()
            .iter()
            .any(|l| l == "switch a/m1 → b/m1 (rate_limit)")
    );
}

/// The pause each refusal so far asked for.
fn pauses(h: &mut H) -> Vec<u64> {
    h.drain();
    h.log
        .iter()
        .filter_map(|a| match a {
            Action::Capacity {
                op:
                    CapacityOp::Apply {
                        delta: CapacityDelta::Refused { pause_ms, .. },
                        ..
                    },
                ..
            } => Some(*pause_ms),
            _ => None,
        })
        .collect()
}

/// Issue 24 with issue 23: a capacity signal that says when to send again pauses its provider
/// for that long (the store grants no slot on it before then); one without gives no pause.
#[test]
fn a_capacity_signal_that_states_a_delay_pauses_its_provider_that_long() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.fail_settled(
        r#"429: {"error":{"code":"rate_limit_exceeded","message":"Rate limit reached for requests. Please try again in 2s."}}"#,
    );
    assert_eq!(pauses(&mut h), [2000]);
    assert!(h.m.attempts()[0].capacity_signal);

    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.fail_settled(RL);
    assert_eq!(pauses(&mut h), [0], "GLM's 1302 states no delay");
}

/// A rate limit that states a delay longer than a capacity pause lasts is no capacity signal:
/// the provider's breaker opens until then (at least), as for a rate limit without a slot.
#[test]
fn a_rate_limit_stating_a_long_delay_opens_the_breaker_not_a_pause() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.fail_settled(
        r#"429: {"error":{"code":"rate_limit_exceeded","message":"Rate limit reached. Please try again in 20m30s."}}"#,
    );
    assert!(pauses(&mut h).is_empty(), "not a refusal");
    assert!(!h.m.attempts()[0].capacity_signal);
    assert!(
        h.deltas().iter().any(|d| matches!(
            d,
            Delta::Stated {
                class: FailureClass::RateLimit,
                scope: Scope::Provider,
                ..
            }
        )),
        "{:?}",
        h.deltas()
    );
    let (_, choices) = h.last_admission();
    assert_eq!(choices[0], "b", "on to the next candidate");
}

#[test]
fn refused_at_one_again_and_again_is_a_rate_limit_with_a_breaker() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.fail_settled(RL);
    let id = h.last_refusal_id();
    h.m.handle(
        h.now(),
        Input::Capacity {
            id,
            reply: CapacityReply::Applied(Decided::Refused(Verdict::RateLimited)),
        },
    );
    assert!(
        h.deltas().iter().any(|d| matches!(
            d,
            Delta::Failure {
                class: FailureClass::RateLimit,
                scope: Scope::Provider,
                ..
            }
        )),
        "{:?}",
        h.deltas()
    );
    let (_, choices) = h.last_admission();
    assert_eq!(choices[0], "b", "on to the next candidate");
}

#[test]
fn with_no_other_candidate_a_signal_waits_for_the_provider() {
    let mut h = H::build(cfg(), Health::default(), slots(1, true));
    h.start(
        model("a", "m1", false, 128_000),
        vec![model("a", "m1", false, 128_000)],
    );
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.fail_settled(RL);
    let id = h.last_refusal_id();
    let (before, _) = h.last_admission();
    h.m.handle(
        h.now(),
        Input::Capacity {
            id,
            reply: CapacityReply::Applied(Decided::Refused(Verdict::SlowDown(Change {
                from: 1,
                to: 1,
            }))),
        },
    );
    assert!(h.m.awaiting_slot(), "no request goes straight back");
    assert_eq!(h.last_admission().0, before, "nothing asked yet");
    h.advance(SLOT_POLL.as_millis() as u64);
    h.m.handle(h.now(), Input::Timeout);
    let (_, choices) = h.last_admission();
    assert_eq!(choices, ["a"]);
}

#[test]
fn a_held_slot_is_renewed_and_goes_back_when_the_run_is_interrupted() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    h.event(json!({"type": "message_update"}));
    for _ in 0..3 {
        h.advance(SLOT_RENEW.as_millis() as u64);
        h.event(json!({"type": "message_update"}));
        h.m.handle(h.now(), Input::Timeout);
    }
    let renewals = h.give_backs().iter().filter(|(_, k)| *k == "renew").count();
    assert_eq!(renewals, 3);
    h.m.handle(h.now(), Input::Stop);
    h.settle();
    assert!(matches!(h.outcome(), Outcome::Aborted));
    assert_eq!(
        h.give_backs().last(),
        Some(&("a".to_string(), "release")),
        "{:?}",
        h.give_backs()
    );
}

#[test]
fn a_failure_gives_the_slot_back_with_the_next_admission() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    let sent = h.grant(0);
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    // One store operation: the release rides on the admission for the next candidate.
    assert_eq!(
        h.give_backs(),
        [("a".to_string(), "release with admission")]
    );
    let (_, choices) = h.last_admission();
    assert_eq!(choices[0], "b");
}

#[test]
fn an_interrupt_while_waiting_for_a_slot_ends_the_run_at_once() {
    let mut h = slotted();
    h.start(model("a", "m1", false, 128_000), pool());
    h.full();
    h.m.handle(h.now(), Input::Stop);
    assert!(matches!(h.outcome(), Outcome::Aborted));
    assert!(
        h.give_backs().is_empty(),
        "nothing was held, nothing goes back"
    );
}

#[test]
fn max_inflight_naming_an_unknown_provider_is_a_setup_problem() {
    let c = super::cfg_with(|c| {
        c.max_inflight = std::collections::BTreeMap::from([("zz".to_string(), 2)]);
    });
    let mut h = H::with(c, Health::default(), vec![]);
    h.start(model("a", "m1", false, 128_000), pool());
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert!(
        msg.starts_with("--max-inflight names provider 'zz', which has no available model"),
        "{msg}"
    );
}
