//! Answers under a schema (issue 33): a complete answer is checked before it counts; one that
//! does not conform is asked again once in the same conversation, then fails over with the
//! original conversation; no breaker; a batch's earlier misses put a model last.

use super::*;
use crate::schema::{Conforming, Rejection};

fn schema_options() -> Options {
    Options {
        schema: true,
        ..Options::default()
    }
}

fn conforming(text: &str) -> Result<Conforming, Rejection> {
    Ok(Conforming {
        value: serde_json::from_str(text).unwrap(),
        compact: text.to_string(),
    })
}

fn wrong() -> Result<Conforming, Rejection> {
    Err(Rejection::Invalid {
        errors: vec!["at /risk: \"maybe\" is not one of [\"low\",\"high\"]".into()],
        more: Some(0),
    })
}

/// The checks asked for since the last drain.
fn checks(h: &mut H) -> Vec<String> {
    h.drain()
        .into_iter()
        .filter_map(|a| match a {
            Action::CheckAnswer { text } => Some(text),
            _ => None,
        })
        .collect()
}

#[test]
fn a_complete_answer_is_checked_before_it_counts() {
    let mut h = H::with_options(schema_options());
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.answer(" {\"risk\": \"low\"} ");
    assert_eq!(checks(&mut h), ["{\"risk\": \"low\"}"]);
    assert!(h.m.outcome().is_none(), "not an answer until checked");
    h.feed(Input::AnswerChecked(conforming("{\"risk\":\"low\"}")));
    match h.outcome() {
        Outcome::Answer { text, model, json } => {
            assert_eq!(text, "{\"risk\": \"low\"}");
            assert_eq!(model.key(), "a/m1");
            assert_eq!(json.unwrap().compact, "{\"risk\":\"low\"}");
        }
        other => panic!("{other:?}"),
    }
    // Without a schema nothing is checked.
    let mut h = H::with_options(Options::default());
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.answer("prose");
    assert!(checks(&mut h).is_empty());
    assert_eq!(answered_by(&h), "a/m1 prose");
}

#[test]
fn a_non_conforming_answer_is_asked_again_in_the_same_conversation() {
    let mut h = H::with_options(schema_options());
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.answer("Looks fine to me.");
    h.feed(Input::AnswerChecked(wrong()));
    let sent = h.sent();
    // Only the second ask: no fork, no set_model, the same model.
    assert_eq!(sent.len(), 1, "{sent:?}");
    let Command::Prompt { message, images } = &sent[0].1 else {
        panic!("{sent:?}")
    };
    assert!(
        message.starts_with(crate::schema::prompt::REASK_HEAD),
        "{message}"
    );
    assert!(
        message.contains("- at /risk: \"maybe\" is not one of"),
        "{message}"
    );
    assert!(images.is_empty());
    h.ok_prompt(&sent);
    h.answer("{\"risk\": \"low\"}");
    h.feed(Input::AnswerChecked(conforming("{\"risk\":\"low\"}")));
    assert_eq!(answered_by(&h), "a/m1 {\"risk\": \"low\"}");
    let attempts = h.m.attempts();
    assert_eq!(attempts.len(), 2);
    let first = attempts[0].failure.as_ref().expect("a failure");
    assert_eq!(
        (first.class, first.scope),
        (FailureClass::Schema, Scope::Round)
    );
    let rejected = attempts[0].rejected.as_ref().expect("the rejected answer");
    assert_eq!(rejected.answer, "Looks fine to me.");
    assert!(attempts[1].failure.is_none());
    assert_eq!(
        h.commands(),
        ["get_state", "get_available_models", "prompt", "prompt"]
    );
    // No breaker: the only health changes are the success and its pace sample.
    let deltas = h.deltas();
    assert!(
        matches!(
            deltas.as_slice(),
            [Delta::Success { .. }, Delta::Pace { .. }]
        ),
        "{deltas:?}"
    );
}

#[test]
fn a_second_miss_fails_over_with_the_original_conversation() {
    let mut h = H::with_options(schema_options());
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    h.ok_prompt(&sent);
    h.answer("prose");
    h.feed(Input::AnswerChecked(wrong()));
    let sent = h.sent();
    h.ok_prompt(&sent);
    h.answer("{\"risk\": \"maybe\"}");
    h.feed(Input::AnswerChecked(wrong()));
    // The fork goes back past the second ask, to the prompt.
    let mut sent = h.sent();
    let (id, cmd) = sent.pop().unwrap();
    assert_eq!(cmd, Command::GetForkMessages);
    let reask = crate::schema::prompt::reask(&["x".into()]);
    h.respond(
        &id,
        "get_fork_messages",
        true,
        json!({"messages": [{"entryId": "e1", "text": "Summarise."},
                            {"entryId": "e2", "text": reask}]}),
    );
    let mut sent = h.sent();
    let (id, cmd) = sent.pop().unwrap();
    assert_eq!(
        cmd,
        Command::Fork {
            entry_id: "e1".into()
        }
    );
    h.respond(
        &id,
        "fork",
        true,
        json!({"text": "Summarise.", "cancelled": false}),
    );
    let sent = h.sent();
    let prompt = h.complete_redispatch(sent);
    assert_eq!(
        prompt,
        Command::Prompt {
            message: "Summarise.".into(),
            images: vec![]
        }
    );
    h.answer("{\"risk\": \"low\"}");
    h.feed(Input::AnswerChecked(conforming("{\"risk\":\"low\"}")));
    assert_eq!(answered_by(&h), "b/m1 {\"risk\": \"low\"}");
    let classes: Vec<Option<FailureClass>> =
        h.m.attempts()
            .iter()
            .map(|a| a.failure.as_ref().map(|f| f.class))
            .collect();
    assert_eq!(
        classes,
        [Some(FailureClass::Schema), Some(FailureClass::Schema), None]
    );
    assert_eq!(h.progress(), ["switch a/m1 → b/m1 (schema)"]);
    // No breaker: the switch, the success and its pace sample only.
    let deltas = h.deltas();
    assert!(
        matches!(
            deltas.as_slice(),
            [Delta::Switch(_), Delta::Success { .. }, Delta::Pace { .. }]
        ),
        "{deltas:?}"
    );
}

#[test]
fn nobody_conforms_exhausts_with_no_hope_of_retrying() {
    let mut h = H::with_options(schema_options());
    let sent = h.start(
        model("a", "m1", false, 128_000),
        vec![model("a", "m1", false, 128_000)],
    );
    h.ok_prompt(&sent);
    h.answer("prose");
    h.feed(Input::AnswerChecked(wrong()));
    let sent = h.sent();
    h.ok_prompt(&sent);
    h.answer("more prose");
    h.feed(Input::AnswerChecked(wrong()));
    match h.outcome() {
        Outcome::Exhausted {
            reason,
            last_error,
            retry,
            too_large,
        } => {
            assert_eq!(reason, Exhaustion::NoCandidate);
            assert!(last_error.unwrap().contains("does not match the schema"));
            assert!(!retry.could_help, "{retry:?}");
            assert!(
                retry.reason.ends_with(
                    "a/m1 (schema) — no answer matched the schema: check the schema and the prompt"
                ),
                "{}",
                retry.reason
            );
            assert!(!too_large);
        }
        other => panic!("{other:?}"),
    }
    let last = h.m.attempts().last().unwrap().rejected.clone().unwrap();
    assert_eq!(last.answer, "more prose");
}

#[test]
fn a_verdict_after_a_stop_is_ignored() {
    let mut h = H::with_options(schema_options());
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.answer("{}");
    h.feed(Input::Stop);
    assert_eq!(h.outcome(), Outcome::Aborted);
    h.feed(Input::AnswerChecked(conforming("{}")));
    assert_eq!(h.outcome(), Outcome::Aborted);
    assert!(h.sent().is_empty());
}

#[test]
fn a_model_that_missed_this_schema_earlier_in_the_batch_is_not_started_from() {
    let mut options = schema_options();
    options.schema_avoid.insert("a/m1".into());
    let mut h = H::with_options(options);
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    assert_eq!(
        sent.iter().map(|(_, c)| c.name()).collect::<Vec<_>>(),
        ["set_model"]
    );
    let prompt = h.complete_redispatch(sent);
    assert!(matches!(prompt, Command::Prompt { .. }));
    h.answer("{}");
    h.feed(Input::AnswerChecked(conforming("{}")));
    assert_eq!(answered_by(&h), "b/m1 {}");
    // Not news for the shared switch log.
    assert!(!h.deltas().iter().any(|d| matches!(d, Delta::Switch(_))));
    // With nowhere better to go it is used all the same.
    let mut options = schema_options();
    options.schema_avoid.insert("a/m1".into());
    let mut h = H::with_options(options);
    let sent = h.start(
        model("a", "m1", false, 128_000),
        vec![model("a", "m1", false, 128_000)],
    );
    assert!(
        matches!(sent.last().unwrap().1, Command::Prompt { .. }),
        "{sent:?}"
    );
}
