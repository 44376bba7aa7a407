//! Failing over: classes, fork or continuation, watchdogs, interrupts, the probe lease,
//! endpoint isolation.

use super::*;

#[test]
fn success_on_the_first_model() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.answer("  Hello.  ");
    assert_eq!(answered_by(&h), "a/m1 Hello.");
    assert_eq!(
        h.commands(),
        ["get_state", "get_available_models", "prompt"]
    );
    // The clean answer's pace: its first response came at once, no gap between events.
    assert!(matches!(
        h.deltas().as_slice(),
        [Delta::Success { .. }, Delta::Pace { key, sample }]
            if key == "a/m1" && sample.first_ms == 1 && sample.gap_ms == 0
    ));
    assert_eq!(h.m.poll_deadline(), None);
}

#[test]
fn quota_failure_switches_provider_by_fork_and_same_prompt() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    let prompt = h.complete_redispatch(sent);
    assert_eq!(
        prompt,
        Command::Prompt {
            message: "Summarise.".into(),
            images: vec![]
        }
    );
    h.answer("From b.");
    assert_eq!(answered_by(&h), "b/m1 From b.");
    assert_eq!(
        h.commands(),
        [
            "get_state",
            "get_available_models",
            "prompt",
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "prompt"
        ]
    );
    let deltas = h.deltas();
    assert!(matches!(
        &deltas[0],
        Delta::Failure { key, scope: Scope::Provider, class: FailureClass::Quota, .. } if key == "a"
    ));
    assert!(matches!(&deltas[1], Delta::Switch(e) if e.from == "a/m1" && e.to == "b/m1"));
    assert!(matches!(&deltas[2], Delta::Success { keys, .. } if keys.model == "b/m1"));
    assert_eq!(h.progress(), ["switch a/m1 → b/m1 (quota)"]);
}

#[test]
fn retryable_failure_aborts_pis_backoff_and_switches_at_once() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    let err = r#"429: {"message":"Rate limit reached","type":"rate_limit_exceeded"}"#;
    h.assistant_end("error", "", Some(err));
    h.event(json!({"type": "agent_end", "willRetry": true}));
    h.event(json!({"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": err}));
    let sent = h.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1, Command::AbortRetry);
    h.respond(&sent[0].0, "abort_retry", true, Value::Null);
    h.event(json!({"type": "auto_retry_end", "success": false, "attempt": 1, "finalError": "Retry cancelled"}));
    h.settle();
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
    assert_eq!(
        h.commands()[2..],
        [
            "prompt",
            "abort_retry",
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "prompt"
        ]
    );
    // The rate limit was recorded once, not again at settle.
    let failures = h
        .deltas()
        .iter()
        .filter(|d| matches!(d, Delta::Failure { .. }))
        .count();
    assert_eq!(failures, 1);
}

#[test]
fn one_off_5xx_is_retried_once_on_the_same_model_then_switches() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    let e503 = r#"503: {"message":"The engine is currently overloaded","type":"server_error"}"#;
    h.fail_settled(e503);
    let sent = h.sent();
    let names: Vec<_> = sent.iter().map(|(_, c)| c.name()).collect();
    assert_eq!(names, ["get_fork_messages"], "same model: no set_model");
    h.complete_redispatch(sent);
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
            "set_model a/m1",
            "prompt",
            "get_fork_messages",
            "fork",
            "set_model b/m1",
            "prompt"
        ]
    );
}

#[test]
fn after_tools_ran_the_switch_continues_instead_of_forking() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    h.assistant_end("toolUse", "Let me look.", None);
    h.event(json!({"type": "tool_execution_start", "toolCallId": "c1", "toolName": "ls"}));
    h.event(json!({"type": "tool_execution_end", "toolCallId": "c1", "toolName": "ls", "isError": false}));
    h.event(json!({"type": "turn_start"}));
    h.assistant_end(
        "error",
        "",
        Some(r#"401: {"message":"Incorrect API key provided"}"#),
    );
    h.settle();
    let sent = h.sent();
    let names: Vec<_> = sent.iter().map(|(_, c)| c.name()).collect();
    assert_eq!(names, ["set_model"]);
    let prompt = h.complete_redispatch(sent);
    assert_eq!(
        prompt,
        Command::Prompt {
            message: CONTINUATION_PROMPT.into(),
            images: vec![]
        }
    );
    h.answer("Final.");
    assert_eq!(answered_by(&h), "b/m1 Final.");
}

#[test]
fn intermediate_tool_turn_text_is_never_the_answer() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    h.assistant_end("toolUse", "Intermediate.", None);
    h.event(json!({"type": "turn_end"}));
    assert!(
        h.m.outcome().is_none(),
        "a tool turn does not finish the run"
    );
    h.event(json!({"type": "tool_execution_start"}));
    h.event(json!({"type": "tool_execution_end"}));
    h.assistant_end("stop", "The final answer.", None);
    h.settle();
    assert_eq!(answered_by(&h), "a/m1 The final answer.");
}

/// Issue 32: with no other candidate and the failure's breaker open, Pi's own 2/4/8 s retries
/// are not left to hammer the provider: the retry is aborted and the run ends (or, waiting,
/// waits for the breaker's probe), with the breaker's time in its retry hint.
#[test]
fn with_no_candidate_and_its_breaker_open_pi_is_not_left_to_retry() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(
        model("a", "m1", false, 128_000),
        vec![model("a", "m1", false, 128_000)],
    );
    h.ok_prompt(&sent);
    let err = r#"429: {"message":"Rate limit reached"}"#;
    h.event(json!({"type": "agent_start"}));
    h.assistant_end("error", "", Some(err));
    h.event(
        json!({"type": "auto_retry_start", "attempt": 1, "delayMs": 2000, "errorMessage": err}),
    );
    let sent = h.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1, Command::AbortRetry);
    h.event(json!({"type": "auto_retry_end", "success": false, "attempt": 1, "finalError": "Retry cancelled"}));
    h.fail_settled(err);
    match h.outcome() {
        Outcome::Exhausted {
            reason,
            last_error,
            retry,
            ..
        } => {
            assert_eq!(reason, Exhaustion::NoCandidate);
            assert!(last_error.unwrap().contains("a/m1: 429"));
            assert_eq!(retry.retry_after_ms, Some(300_000), "{}", retry.reason);
        }
        other => panic!("{other:?}"),
    }
    assert!(h.sent().is_empty(), "nothing more is sent");
}

#[test]
fn first_response_watchdog_aborts_and_fails_over_as_endpoint() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    let deadline = h.m.poll_deadline().expect("watchdog armed");
    assert_eq!(deadline, h.now().instant + Duration::from_millis(1000));
    h.advance(999);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.sent().is_empty());
    h.advance(1);
    h.m.handle(h.now(), Input::Timeout);
    let sent = h.sent();
    assert_eq!(sent[0].1, Command::Abort);
    h.assistant_end("aborted", "", Some("Request aborted"));
    h.settle();
    let deltas = h.deltas();
    assert!(matches!(
        &deltas[0],
        Delta::Failure {
            scope: Scope::Endpoint,
            class: FailureClass::Endpoint,
            ..
        }
    ));
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
}

#[test]
fn stall_watchdog_restarts_on_progress_and_pauses_during_tools() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    let stall = |h: &H| h.m.timers.watchdog().map(|(_, at)| at);
    h.event(json!({"type": "message_update"}));
    assert_eq!(
        stall(&h),
        Some(h.now().instant + Duration::from_millis(2000))
    );
    h.advance(1500);
    h.event(json!({"type": "message_update"}));
    assert_eq!(
        stall(&h),
        Some(h.now().instant + Duration::from_millis(2000))
    );
    h.event(json!({"type": "tool_execution_start"}));
    assert_eq!(stall(&h), None, "a running tool is not a stall");
    h.advance(600_000);
    h.m.handle(h.now(), Input::Timeout);
    assert!(
        h.sent().iter().all(|(_, c)| *c != Command::Abort),
        "nothing is cut while a tool runs"
    );
    h.event(json!({"type": "tool_execution_end"}));
    assert_eq!(
        stall(&h),
        Some(h.now().instant + Duration::from_millis(2000))
    );
}

#[test]
fn interrupt_aborts_and_never_fails_over() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "agent_start"}));
    h.m.handle(h.now(), Input::Stop);
    let sent = h.sent();
    assert_eq!(sent[0].1, Command::Abort);
    h.assistant_end("aborted", "", Some("Request aborted"));
    h.settle();
    assert_eq!(h.outcome(), Outcome::Aborted);
    assert!(h.deltas().is_empty(), "a user abort records nothing");
    assert_eq!(h.commands()[2..], ["prompt", "abort"]);
}

#[test]
fn known_dead_start_model_is_skipped_before_the_first_request() {
    let mut health = Health::default();
    health.providers.insert(
        "a".into(),
        Record {
            consecutive_failures: 1,
            total_failures: 1,
            cooldown_until: Some(u64::MAX),
            ..Record::default()
        },
    );
    let mut h = H::new(health, vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    let names: Vec<_> = sent.iter().map(|(_, c)| c.name()).collect();
    assert_eq!(names, ["set_model"]);
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "b/m1 ok");
    assert_eq!(h.progress()[0], "start: a/m1 is provider breaker open");
    assert_eq!(h.commands()[2..], ["set_model b/m1", "prompt"]);
}

#[test]
fn images_with_a_text_only_model_switch_before_sending() {
    let img = vec![ImageContent::new("AAAA".into(), "image/png")];
    let mut h = H::new(Health::default(), img.clone());
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    let prompt = h.complete_redispatch(sent);
    assert_eq!(
        prompt,
        Command::Prompt {
            message: "Summarise.".into(),
            images: img
        }
    );
    assert_eq!(h.commands()[2..], ["set_model c/vision", "prompt"]);
    assert_eq!(h.progress()[1], "switch a/m1 → c/vision (modality)");
}

#[test]
fn images_without_any_image_model_exhaust_before_sending() {
    let img = vec![ImageContent::new("AAAA".into(), "image/png")];
    let mut h = H::new(Health::default(), img);
    h.start(
        model("a", "m1", false, 128_000),
        vec![
            model("a", "m1", false, 128_000),
            model("b", "m1", false, 128_000),
        ],
    );
    assert!(!h.commands().iter().any(|c| c == "prompt"));
    match h.outcome() {
        Outcome::Exhausted { reason, .. } => assert_eq!(reason, Exhaustion::NoImageModel),
        other => panic!("{other:?}"),
    }
}

#[test]
fn context_overflow_only_chooses_a_larger_window() {
    let mut h = H::new(Health::default(), vec![]);
    let models = vec![
        model("a", "small", false, 32_000),
        model("b", "same", false, 32_000),
        model("c", "big", false, 200_000),
    ];
    let sent = h.start(model("a", "small", false, 32_000), models);
    h.ok_prompt(&sent);
    h.fail_settled(r#"400: {"message":"This model's maximum context length is 32000 tokens","code":"context_length_exceeded"}"#);
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
            "set_model c/big",
            "prompt"
        ]
    );
    assert!(
        h.deltas()
            .iter()
            .all(|d| !matches!(d, Delta::Failure { .. })),
        "no breaker"
    );
}

#[test]
fn content_policy_avoids_the_whole_family() {
    let mut h = H::new(Health::default(), vec![]);
    let models = vec![
        model("zai", "glm-4.5", false, 128_000),
        model("gw", "GLM-4.6", false, 128_000),
        model("ali", "qwen-max", false, 128_000),
    ];
    let sent = h.start(model("zai", "glm-4.5", false, 128_000), models);
    h.ok_prompt(&sent);
    h.fail_settled(r#"400: {"message":"Request rejected: content_filter policy violation"}"#);
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
            "set_model ali/qwen-max",
            "prompt"
        ]
    );
}

#[test]
fn round_window_ends_failover() {
    let mut c = cfg();
    c.round_limit = Duration::from_millis(5000);
    let mut h = H::with(c, Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(json!({"type": "message_update"}));
    h.advance(5000);
    h.fail_settled(Q402);
    match h.outcome() {
        Outcome::Exhausted { reason, .. } => {
            assert!(matches!(reason, Exhaustion::RoundWindow { .. }), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn refused_set_model_moves_to_the_next_candidate() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    let mut sent = h.answer_fork(sent);
    let (id, cmd) = sent.pop().unwrap();
    assert_eq!(cmd.name(), "set_model");
    h.respond(&id, "set_model", false, Value::Null);
    let sent = h.sent();
    assert_eq!(sent.len(), 1);
    assert!(matches!(&sent[0].1, Command::SetModel { provider, .. } if provider == "c"));
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(answered_by(&h), "c/vision ok");
}

#[test]
fn empty_answer_with_nowhere_to_go_is_an_empty_answer() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(
        model("a", "m1", false, 128_000),
        vec![model("a", "m1", false, 128_000)],
    );
    h.ok_prompt(&sent);
    h.answer("   ");
    assert_eq!(h.outcome(), Outcome::EmptyAnswer);
}

/// a/m1 fails for quota; b's provider breaker is half-open, so the switch to b waits for the
/// probe lease: the machine has just asked for it.
fn claiming_half_open_b() -> (H, crate::health::ProbeTarget) {
    let mut health = Health::default();
    health.providers.insert(
        "b".into(),
        Record {
            consecutive_failures: 1,
            total_failures: 1,
            cooldown_until: Some(1),
            ..Record::default()
        },
    );
    let mut h = H::new(health, vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let target = crate::health::ProbeTarget::new(Scope::Provider, "b");
    assert!(h.drain().contains(&Action::ClaimProbe {
        target: target.clone()
    }));
    (h, target)
}

#[test]
fn half_open_candidate_needs_the_probe_lease() {
    let (mut h, _) = claiming_half_open_b();
    h.m.handle(h.now(), Input::ProbeClaimed { granted: false });
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
            "set_model c/vision",
            "prompt"
        ]
    );
}

#[test]
fn a_probe_that_fails_in_another_scope_gives_its_lease_back() {
    let (mut h, target) = claiming_half_open_b();
    h.m.handle(h.now(), Input::ProbeClaimed { granted: true });
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.fail_settled("Connection error.");
    let deltas = h.deltas();
    assert!(
        deltas.contains(&Delta::Release {
            target: target.clone()
        }),
        "{deltas:?}"
    );
    assert_eq!(h.m.health().providers["b"].lease_until, None);
}

#[test]
fn a_failed_probe_reopens_the_breaker_before_it_gives_the_lease_back() {
    // Each delta is its own commit: a release committed first would let another run claim
    // the probe while the breaker still looked half-open (two probes were sent in practice).
    let (mut h, target) = claiming_half_open_b();
    h.m.handle(h.now(), Input::ProbeClaimed { granted: true });
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.fail_settled(Q402);
    let deltas = h.deltas();
    let failure = deltas
        .iter()
        .position(|d| matches!(d, Delta::Failure { key, .. } if key == "b"));
    let release = deltas.iter().position(|d| {
        *d == Delta::Release {
            target: target.clone(),
        }
    });
    assert!(
        matches!((failure, release), (Some(f), Some(r)) if f < r),
        "{deltas:?}"
    );
}

#[test]
fn three_endpoint_failures_isolate_the_endpoint_for_the_round() {
    let mut c = cfg();
    c.cooldown_scale = 0.0; // breakers close at once: only isolation keeps the endpoint out
    let mut h = H::with(c, Health::default(), vec![]);
    let models = vec![
        model("a", "m1", false, 128_000),
        model("a", "m2", false, 128_000),
        model("a", "m3", false, 128_000),
        model("a", "m4", false, 128_000),
    ];
    let sent = h.start(model("a", "m1", false, 128_000), models);
    h.ok_prompt(&sent);
    for _ in 0..2 {
        h.fail_settled("Connection error.");
        let sent = h.sent();
        h.complete_redispatch(sent);
    }
    h.fail_settled("Connection error.");
    let sets: Vec<_> = h
        .commands()
        .into_iter()
        .filter(|c| c.starts_with("set_model"))
        .collect();
    assert_eq!(sets, ["set_model a/m2", "set_model a/m3"]);
    assert!(
        matches!(h.outcome(), Outcome::Exhausted { .. }),
        "a/m4 shares the isolated endpoint"
    );
}
