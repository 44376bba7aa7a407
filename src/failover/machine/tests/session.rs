//! A Pi session across attempts and jobs: fresh sessions, refused prompts, thinking levels,
//! response deadlines, Pi's own retries, tool runs.

use super::*;

#[test]
fn a_reused_pi_gets_a_fresh_session_and_the_start_model_back() {
    let opts = Options {
        fresh_session: true,
        start_model: Some("a/m1".into()),
        thinking: None,
        id_prefix: String::new(),
        ..Options::default()
    };
    let mut h = H::with_options(opts);
    let sent = h.initial();
    assert_eq!(
        sent.len(),
        1,
        "nothing else before the new session is in place"
    );
    assert_eq!(sent[0].1, Command::NewSession);
    h.respond(&sent[0].0, "new_session", true, json!({"cancelled": false}));
    // Pi is still on the model an earlier job switched to.
    let ids: Vec<String> = h.sent().into_iter().map(|(id, _)| id).collect();
    h.respond(
        &ids[0],
        "get_state",
        true,
        json!({"model": model("b", "m1", false, 128_000)}),
    );
    h.respond(
        &ids[1],
        "get_available_models",
        true,
        json!({"models": pool()}),
    );
    let sent = h.sent();
    let names: Vec<_> = sent.iter().map(|(_, c)| c.name()).collect();
    assert_eq!(names, ["set_model"]);
    assert!(
        matches!(&sent[0].1, Command::SetModel { provider, model_id } if provider == "a" && model_id == "m1")
    );
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "a/m1 ok");
}

#[test]
fn a_prompt_rejected_for_a_missing_key_fails_over_without_forking() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    let (id, _) = sent.last().expect("prompt").clone();
    let r: Response = serde_json::from_value(json!({
        "type": "response", "id": id, "command": "prompt", "success": false,
        "error": "No API key found for the selected model."
    }))
    .unwrap();
    h.m.handle(h.now(), Input::Pi(Incoming::Response(r)));
    let sent = h.sent();
    let names: Vec<_> = sent.iter().map(|(_, c)| c.name()).collect();
    assert_eq!(
        names,
        ["set_model"],
        "nothing to fork: the prompt never entered the session"
    );
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
}

#[test]
fn a_prompt_rejected_for_another_reason_is_fatal() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    let (id, _) = sent.last().expect("prompt").clone();
    h.respond(&id, "prompt", false, Value::Null);
    assert!(matches!(
        h.outcome(),
        Outcome::Fatal(Fatal::PromptRejected(_))
    ));
}

#[test]
fn a_custom_start_model_outside_the_registry_is_used_as_given() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "custom-id", false, 128_000), pool());
    assert_eq!(sent.len(), 1);
    h.ok_prompt(&sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "a/custom-id ok");
}

#[test]
fn the_thinking_level_is_sent_again_after_every_switch() {
    let opts = Options {
        thinking: Some("high".into()),
        ..Options::default()
    };
    let mut h = H::with_options(opts);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    let (id, cmd) = sent[0].clone();
    assert_eq!(
        cmd,
        Command::SetThinkingLevel {
            level: "high".into()
        }
    );
    h.respond(&id, "set_thinking_level", true, Value::Null);
    let sent = h.sent();
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(
        h.commands()[2..],
        [
            "set_thinking_level",
            "prompt",
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "set_thinking_level",
            "prompt"
        ]
    );
}

#[test]
fn a_pi_that_never_answers_is_a_clear_error_not_a_hang() {
    let mut h = H::new(Health::default(), vec![]);
    assert_eq!(
        h.m.poll_deadline(),
        Some(h.now().instant + RESPONSE_TIMEOUT)
    );
    h.advance(59_999);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.m.outcome().is_none());
    h.advance(1);
    h.m.handle(h.now(), Input::Timeout);
    assert!(matches!(
        h.outcome(),
        Outcome::Fatal(Fatal::Unresponsive { .. })
    ));
}

#[test]
fn the_response_deadline_clears_once_everything_is_answered() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert_eq!(
        h.m.poll_deadline(),
        None,
        "a prompt's answer may wait for Pi's compaction: only --timeout-ms bounds it"
    );
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    assert_eq!(
        h.m.poll_deadline(),
        Some(h.now().instant + Duration::from_millis(1000)),
        "only the first-response watchdog remains"
    );
}

#[test]
fn a_same_model_retry_after_a_switch_stays_on_the_new_model() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.fail_settled(r#"500: {"message":"The server had an error"}"#);
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
    assert_eq!(
        h.commands()[3..],
        [
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "prompt",
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "prompt"
        ],
        "fork restores the fork point's model, so the retry sets b/m1 again"
    );
    assert_eq!(h.m.switches(), 1);
}

#[test]
fn a_retry_pi_started_despite_abort_retry_is_still_watched() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    let err = r#"429: {"message":"Rate limit reached"}"#;
    h.event(json!({"type": "agent_start"}));
    h.assistant_end("error", "", Some(err));
    h.event(json!({"type": "auto_retry_start", "attempt": 1, "delayMs": 1, "errorMessage": err}));
    assert_eq!(h.sent()[0].1, Command::AbortRetry);
    // Too late: Pi's retry is already under way, and it hangs.
    h.event(json!({"type": "agent_start"}));
    h.advance(1000);
    h.m.handle(h.now(), Input::Timeout);
    assert_eq!(h.sent()[0].1, Command::Abort, "the watchdog fires");
    h.assistant_end("aborted", "", Some("Request aborted"));
    h.settle();
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
}

#[test]
fn abort_retry_goes_out_before_the_failure_is_persisted() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.drain();
    let mark = h.log.len();
    let err = r#"429: {"message":"Rate limit reached"}"#;
    h.event(json!({"type": "agent_start"}));
    h.assistant_end("error", "", Some(err));
    h.event(
        json!({"type": "auto_retry_start", "attempt": 1, "delayMs": 2000, "errorMessage": err}),
    );
    let first = h.log[mark..].first().cloned().expect("an action");
    assert!(
        matches!(
            first,
            Action::Send {
                command: Command::AbortRetry,
                ..
            }
        ),
        "{first:?}"
    );
}

#[test]
fn pis_own_retries_of_one_failure_are_recorded_once() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(
        model("a", "m1", false, 128_000),
        vec![model("a", "m1", false, 128_000)],
    );
    h.ok_prompt(&sent);
    let err = r#"503: {"message":"overloaded"}"#;
    for attempt in 1..=3 {
        h.event(json!({"type": "agent_start"}));
        h.assistant_end("error", "", Some(err));
        h.event(json!({"type": "auto_retry_start", "attempt": attempt, "delayMs": 5, "errorMessage": err}));
        if attempt == 1 {
            // The first 5xx is retried at once on the same model by the runner.
            let sent = h.sent();
            assert_eq!(sent[0].1, Command::AbortRetry);
            h.settle();
            let sent = h.sent();
            h.complete_redispatch(sent);
        }
    }
    h.fail_settled(err);
    let failures = h
        .deltas()
        .iter()
        .filter(|d| matches!(d, Delta::Failure { .. }))
        .count();
    assert_eq!(failures, 1, "one failure, however often Pi retried it");
    assert_eq!(h.m.tried(), ["a/m1"]);
}

#[test]
fn a_refused_set_model_is_not_counted_as_a_switch() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    let mut sent = h.answer_fork(sent);
    let (id, _) = sent.pop().unwrap();
    h.respond(&id, "set_model", false, Value::Null);
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(h.m.switches(), 1);
    let switches: Vec<String> = h
        .deltas()
        .iter()
        .filter_map(|d| match d {
            Delta::Switch(e) => Some(format!("{} -> {} ({})", e.from, e.to, e.reason)),
            _ => None,
        })
        .collect();
    assert_eq!(switches, ["a/m1 -> c/vision (model)"]);
}

#[test]
fn a_second_failover_after_tools_forks_away_the_first_continuation() {
    let mut h = H::new(Health::default(), vec![]);
    let pool3 = vec![
        model("a", "m1", false, 128_000),
        model("b", "m1", false, 128_000),
        model("c", "m1", false, 128_000),
    ];
    let sent = h.start(model("a", "m1", false, 128_000), pool3);
    h.ok_prompt(&sent);
    h.tool_turn();
    h.assistant_end("error", "", Some(Q402));
    h.settle();
    let sent = h.sent();
    let p = h.complete_redispatch(sent);
    assert!(matches!(&p, Command::Prompt { message, .. } if message == CONTINUATION_PROMPT));
    // b fails before doing any new tool work: c must see one continuation, not two.
    h.fail_settled(Q402);
    let sent = h.sent();
    let names: Vec<_> = sent.iter().map(|(_, c)| c.name()).collect();
    assert_eq!(names, ["get_fork_messages"]);
    let p = h.complete_redispatch(sent);
    assert!(
        matches!(&p, Command::Prompt { message, images } if message == CONTINUATION_PROMPT && images.is_empty())
    );
    h.answer("done");
    assert_eq!(answered_by(&h), "c/m1 done");
}

#[test]
fn a_5xx_retry_after_tools_does_not_add_a_continuation() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.tool_turn();
    h.assistant_end("error", "", Some(r#"503: {"message":"overloaded"}"#));
    h.settle();
    // New tool work since the prompt: the retry continues (one continuation).
    let sent = h.sent();
    let p = h.complete_redispatch(sent);
    assert!(matches!(&p, Command::Prompt { message, .. } if message == CONTINUATION_PROMPT));
    h.fail_settled(r#"503: {"message":"overloaded"}"#);
    // No tool work since: the switch forks the continuation away and sends it once more.
    let sent = h.sent();
    assert_eq!(sent[0].1.name(), "get_fork_messages");
}

#[test]
fn after_tools_a_one_off_5xx_is_left_to_pis_own_retry() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.tool_turn();
    let err = r#"503: {"message":"overloaded"}"#;
    h.assistant_end("error", "", Some(err));
    h.event(
        json!({"type": "auto_retry_start", "attempt": 1, "delayMs": 2000, "errorMessage": err}),
    );
    assert!(
        h.sent().is_empty(),
        "no abort_retry: Pi's retry keeps the exact conversation"
    );
    h.event(json!({"type": "agent_start"}));
    h.assistant_end("stop", "Recovered.", None);
    h.settle();
    assert_eq!(answered_by(&h), "a/m1 Recovered.");
}

#[test]
fn a_content_policy_refusal_with_a_5xx_status_is_not_retried_on_the_same_model() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(r#"500: {"message":"Output contains sensitive words"}"#);
    let sent = h.sent();
    h.complete_redispatch(sent);
    let sets: Vec<String> = h
        .commands()
        .into_iter()
        .filter(|c| c.starts_with("set_model"))
        .collect();
    // Not a same-model retry, and the m1 family is avoided: the switch goes to c.
    assert_eq!(sets, ["set_model c/vision"]);
}

#[test]
fn without_a_requested_level_the_start_models_level_follows_switches() {
    let mut h = H::new(Health::default(), vec![]);
    let mut thinker = model("a", "r1", false, 128_000);
    thinker["reasoning"] = json!(true);
    let ids: Vec<String> = h.initial().into_iter().map(|(id, _)| id).collect();
    h.respond(
        &ids[0],
        "get_state",
        true,
        json!({"model": thinker, "thinkingLevel": "medium"}),
    );
    h.respond(
        &ids[1],
        "get_available_models",
        true,
        json!({"models": pool()}),
    );
    let sent = h.sent();
    assert_eq!(sent.len(), 1, "nothing sent about thinking at the start");
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    h.complete_redispatch(sent);
    assert_eq!(
        h.commands(),
        [
            "get_state",
            "get_available_models",
            "prompt",
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "set_thinking_level",
            "prompt"
        ]
    );
}
