//! Spend caps (`--max-cost`) in the machine, on hand-made times and costs: the attempt under
//! way finishes, no next one starts once the total is reached, a provider over its own cap is
//! passed over like an open breaker, and a run with nothing left to spend on ends over budget.

use super::*;
use crate::budget::{Caps, OverBudget, Spend};

fn caps(values: &str) -> Caps {
    Caps::parse(&[values.to_string()]).expect("caps")
}

fn budgeted(values: &str) -> H {
    H::with(
        cfg_with(|c| c.budget = caps(values)),
        Health::default(),
        vec![],
    )
}

/// An assistant message that Pi priced at `cost`.
fn priced_end(h: &mut H, stop: &str, text: &str, error: Option<&str>, cost: f64) {
    h.event(json!({"type": "message_end", "message": {
        "role": "assistant", "content": [{"type": "text", "text": text}],
        "stopReason": stop, "errorMessage": error, "provider": "a",
        "usage": {"input": 10, "output": 5, "totalTokens": 15, "cost": {"total": cost}}}}));
}

fn priced_failure(h: &mut H, error: &str, cost: f64) {
    h.event(json!({"type": "agent_start"}));
    priced_end(h, "error", "", Some(error), cost);
    h.event(json!({"type": "agent_end", "willRetry": false}));
    h.settle();
}

fn spent(h: &mut H) -> Vec<(String, f64)> {
    h.drain();
    h.log
        .iter()
        .filter_map(|a| match a {
            Action::Spent { provider, cost } => Some((provider.clone(), *cost)),
            _ => None,
        })
        .collect()
}

fn spend(entries: &[(&str, f64)]) -> Spend {
    let mut s = Spend::default();
    for (p, c) in entries {
        s.add(p, *c);
    }
    s
}

const E503: &str = r#"503: {"message":"The engine is currently overloaded","type":"server_error"}"#;

/// A single run: the failed attempt that reached the cap is the last; no retry, no switch.
#[test]
fn once_the_total_is_reached_no_next_attempt_starts() {
    let mut h = budgeted("0.01");
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    priced_failure(&mut h, E503, 0.02);
    assert_eq!(spent(&mut h), [("a".to_string(), 0.02)]);
    match h.outcome() {
        Outcome::OverBudget {
            why: OverBudget::Total(over),
            last_error,
        } => {
            assert!((over.spent - 0.02).abs() < 1e-12);
            assert_eq!(over.cap.get(), 0.01);
            assert!(last_error.expect("the failure").contains("503"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        h.commands(),
        ["get_state", "get_available_models", "prompt"],
        "neither the one 5xx retry nor a switch"
    );
    // The failure is still recorded: its breaker is real.
    assert!(
        h.deltas()
            .iter()
            .any(|d| matches!(d, Delta::Failure { .. }))
    );
}

/// The attempt under way finishes: an answer that crosses the cap is the answer.
#[test]
fn the_attempt_under_way_finishes_whatever_it_costs() {
    let mut h = budgeted("0.01");
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    priced_end(&mut h, "stop", "Done.", None, 5.0);
    h.settle();
    assert_eq!(answered_by(&h), "a/m1 Done.");
    assert_eq!(h.m.attempts()[0].usage.cost, 5.0);
}

/// What other jobs spent counts: a cap reached elsewhere while this attempt runs stops the
/// next attempt; reached before the start, nothing is sent at all.
#[test]
fn spend_reported_by_the_driver_counts_before_anything_starts() {
    let mut h = budgeted("1");
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.m.handle(h.now(), Input::Spend(spend(&[("b", 0.6), ("c", 0.5)])));
    h.fail_settled(Q402);
    assert!(matches!(
        h.outcome(),
        Outcome::OverBudget {
            why: OverBudget::Total(_),
            ..
        }
    ));
    assert_eq!(
        h.commands(),
        ["get_state", "get_available_models", "prompt"]
    );

    let mut h = budgeted("1");
    h.m.handle(h.now(), Input::Spend(spend(&[("b", 1.0)])));
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty(), "{sent:?}");
    assert!(matches!(
        h.outcome(),
        Outcome::OverBudget {
            last_error: None,
            ..
        }
    ));
}

/// A provider over its own cap is skipped like an open breaker: the failover goes to the same
/// model elsewhere, not to the capped provider's sibling; a later job starting on it starts
/// elsewhere, and that switch is not news for the shared log.
#[test]
fn a_provider_over_its_cap_is_passed_over_for_the_rest_of_the_run() {
    let mut h = budgeted("a=0.01");
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    // A 5xx would be retried once on the same model; not on a provider over its cap.
    priced_failure(&mut h, E503, 0.02);
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("From b.");
    assert_eq!(answered_by(&h), "b/m1 From b.");
    assert!(h.commands().contains(&"set_model b/m1".to_string()));

    let mut h = budgeted("a=0.01");
    h.m.handle(h.now(), Input::Spend(spend(&[("a", 0.01)])));
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert_eq!(
        notes(&mut h, Note::Start),
        ["start: a/m1 is over its --max-cost cap (a recorded cost 0.010000 of a=0.01)"]
    );
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
    let deltas = h.deltas();
    assert!(
        !deltas
            .iter()
            .any(|d| matches!(d, Delta::SkippedStart | Delta::Switch(_))),
        "{deltas:?}"
    );
}

/// Every provider that could take the request over its cap: out of budget, as when the total
/// is reached — nothing is sent, and it is not "failover exhausted".
#[test]
fn nothing_left_to_spend_on_is_out_of_budget() {
    let mut h = budgeted("a=1,b=1,c=1");
    h.m.handle(
        h.now(),
        Input::Spend(spend(&[("a", 1.0), ("b", 2.0), ("c", 1.5)])),
    );
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty());
    match h.outcome() {
        Outcome::OverBudget {
            why: OverBudget::Providers(list),
            ..
        } => {
            let names: Vec<&str> = list.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(names, ["a", "b", "c"]);
        }
        other => panic!("{other:?}"),
    }
    // One provider without a cap (or under it) left: failover goes there.
    let mut h = budgeted("a=1,b=1");
    h.m.handle(h.now(), Input::Spend(spend(&[("a", 1.0), ("b", 2.0)])));
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(
        sent.iter()
            .any(|(_, c)| matches!(c, Command::SetModel { provider, .. } if provider == "c"))
    );
}

/// Pi's own retry of the last candidate is one more request: aborted once out of budget.
#[test]
fn pis_own_retry_is_aborted_once_out_of_budget() {
    let mut h = budgeted("0.01");
    let only = vec![model("a", "m1", false, 128_000)];
    let sent = h.start(model("a", "m1", false, 128_000), only);
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    priced_end(&mut h, "error", "", Some(E503), 0.02);
    h.event(json!({"type": "agent_end", "willRetry": true}));
    h.event(json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": E503}));
    let sent = h.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1, Command::AbortRetry);
    h.respond(&sent[0].0, "abort_retry", true, Value::Null);
    h.settle();
    assert!(matches!(h.outcome(), Outcome::OverBudget { .. }));
    assert!(h.sent().is_empty());
}

/// A run waiting for a breaker stops waiting once the budget is spent elsewhere.
#[test]
fn a_waiting_run_ends_when_the_budget_runs_out() {
    let mut health = Health::default();
    let t0 = 10_000_000;
    cooling(&mut health, "a", FailureClass::RateLimit, t0 - 1000);
    cooling(&mut health, "b", FailureClass::RateLimit, t0 - 1000);
    let c = cfg_with(|c| {
        c.wait = true;
        c.budget = caps("1");
    });
    let base = crate::clock::now().instant;
    let mut h = H::build(
        c,
        health,
        Options {
            deadline: Some(base + Duration::from_secs(3600)),
            ..Options::default()
        },
    );
    h.start(model("a", "m1", false, 128_000), two_providers());
    assert!(h.m.waiting_until().is_some());
    h.m.handle(h.now(), Input::Spend(spend(&[("c", 0.5)])));
    assert!(h.m.outcome().is_none(), "under the cap: still waiting");
    h.m.handle(h.now(), Input::Spend(spend(&[("c", 1.0)])));
    assert!(matches!(h.outcome(), Outcome::OverBudget { .. }));
    assert_eq!(h.m.poll_deadline(), None);
}

/// A cap on a provider Pi does not list is a typo: a setup problem naming the providers.
#[test]
fn a_cap_on_an_unknown_provider_stops_before_sending() {
    let mut h = budgeted("5,zaii=1");
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty());
    match h.outcome() {
        Outcome::Setup(p @ SetupProblem::UnknownBudgetProvider { .. }) => assert_eq!(
            p.to_string(),
            "--max-cost zaii=…: unknown provider 'zaii': no available model has it; providers \
             with available models: a, b, c"
        ),
        other => panic!("{other:?}"),
    }
}

/// The budget spent elsewhere while the next model is being set up: the prompt is not sent.
#[test]
fn a_prompt_being_set_up_is_not_sent_once_the_budget_is_spent() {
    let mut h = budgeted("1");
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    let sent = h.answer_fork(sent);
    let (id, cmd) = sent.last().cloned().expect("set_model");
    assert!(matches!(cmd, Command::SetModel { .. }), "{cmd:?}");
    h.m.handle(h.now(), Input::Spend(spend(&[("b", 1.0)])));
    h.respond(&id, "set_model", true, json!({}));
    assert!(
        !h.sent()
            .iter()
            .any(|(_, c)| matches!(c, Command::Prompt { .. })),
        "no prompt"
    );
    assert!(matches!(h.outcome(), Outcome::OverBudget { .. }));
    assert_eq!(
        h.commands().iter().filter(|c| *c == "prompt").count(),
        1,
        "only the first attempt's"
    );
}

/// A job waiting in line for a capacity slot stops waiting as soon as other jobs have spent the
/// budget: it ends over budget at once, not when a slot frees up.
#[test]
fn a_job_waiting_for_a_slot_stops_when_the_budget_is_spent_elsewhere() {
    let mut h = H::build(
        cfg_with(|c| c.budget = caps("1")),
        Health::default(),
        slots(2, false),
    );
    h.start(model("a", "m1", false, 128_000), pool());
    h.drain();
    let id = h
        .log
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::Capacity { id, .. } => Some(*id),
            _ => None,
        })
        .expect("an admission");
    h.m.handle(
        h.now(),
        Input::Capacity {
            id,
            reply: crate::capacity::ops::CapacityReply::Full {
                next_expiry: None,
                held: false,
            },
        },
    );
    assert!(h.m.awaiting_slot());
    h.advance(50);
    h.m.handle(h.now(), Input::Spend(spend(&[("b", 1.0)])));
    assert!(
        matches!(h.outcome(), Outcome::OverBudget { .. }),
        "{:?}",
        h.m.outcome()
    );
}
