//! Exact action sequences of the failover machine, on hand-made times.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::failover::classify::Scope;
use crate::failover::machine::WAIT_POLL;
use crate::failover::{Exhaustion, Fatal, SetupProblem};
use crate::health::{Delta, Record};

struct H {
    m: Machine,
    base: Instant,
    t: u64,
    log: Vec<Action>,
    /// How much of `log` `sent()` has already returned.
    cursor: usize,
    /// How much of `log` `drain()` has already returned.
    drained: usize,
    /// The process's ledger, as the driver keeps it: each `Action::Spent` is entered here and
    /// the spend fed back at once (`Input::Spend`), before anything else happens.
    ledger: crate::budget::Spend,
}

fn cfg() -> Config {
    Config {
        first_response: Duration::from_millis(1000),
        stall: Duration::from_millis(2000),
        round_limit: Duration::from_millis(60_000),
        cooldown_scale: 1.0,
        models_scope: None,
        saved_default: None,
        provider: None,
        model: None,
        wait: false,
        max_inflight: Default::default(),
        budget: crate::budget::Caps::default(),
    }
}

fn model(provider: &str, id: &str, images: bool, ctx: u64) -> Value {
    let input = if images {
        json!(["text", "image"])
    } else {
        json!(["text"])
    };
    json!({"provider": provider, "id": id, "baseUrl": format!("http://127.0.0.1:9/{provider}/v1"),
           "input": input, "contextWindow": ctx, "reasoning": false})
}

fn pool() -> Vec<Value> {
    vec![
        model("a", "m1", false, 128_000),
        model("a", "m2", false, 128_000),
        model("b", "m1", false, 128_000),
        model("c", "vision", true, 32_000),
    ]
}

impl H {
    fn new(health: Health, images: Vec<ImageContent>) -> H {
        Self::with(cfg(), health, images)
    }

    fn with(cfg: Config, health: Health, images: Vec<ImageContent>) -> H {
        Self::from_machine(|now| Machine::new(now, cfg, health, "Summarise.".into(), images))
    }

    fn with_options(options: Options) -> H {
        H::build(cfg(), Health::default(), options)
    }

    /// A machine on `cfg`, `health` and `options`, asked to summarise without images.
    fn build(cfg: Config, health: Health, options: Options) -> H {
        Self::from_machine(|now| {
            Machine::with_options(now, cfg, health, "Summarise.".into(), vec![], options)
        })
    }

    /// Wraps a machine; its first commands are in the log, not yet returned by `sent()`.
    fn from_machine(build: impl FnOnce(Now) -> Machine) -> H {
        let base = crate::clock::now().instant;
        let mut h = H {
            m: build(Now {
                instant: base,
                wall_ms: 10_000_000,
            }),
            base,
            t: 0,
            log: Vec::new(),
            cursor: 0,
            drained: 0,
            ledger: crate::budget::Spend::default(),
        };
        h.drain();
        h.cursor = h.log.len();
        h
    }

    fn now(&self) -> Now {
        Now {
            instant: self.base + Duration::from_millis(self.t),
            wall_ms: 10_000_000 + self.t,
        }
    }

    fn advance(&mut self, ms: u64) {
        self.t += ms;
    }

    /// Every action since the last `drain` (inputs fed through `feed` are drained into the log
    /// at once, as the driver does).
    fn drain(&mut self) -> Vec<Action> {
        self.take_actions();
        let out = self.log[self.drained..].to_vec();
        self.drained = self.log.len();
        out
    }

    /// The driver's part: every action into the log; a cost entered in the ledger, and the
    /// spend fed back before anything else.
    fn take_actions(&mut self) {
        while let Some(a) = self.m.poll_action() {
            if let Action::Spent { provider, cost } = &a {
                self.ledger.add(provider, *cost);
                let spend = self.ledger.clone();
                self.m.handle(self.now(), Input::Spend(spend));
            }
            self.log.push(a);
        }
    }

    /// The commands sent since the last drain, with their ids.
    /// Probe-lease claims found on the way are granted (tests of denial drain by hand).
    fn sent(&mut self) -> Vec<(String, Command)> {
        let mut out = Vec::new();
        loop {
            self.drain();
            let fresh = self.log[self.cursor..].to_vec();
            self.cursor = self.log.len();
            let mut claimed = false;
            for a in fresh {
                match a {
                    Action::Send { id, command } => out.push((id, command)),
                    Action::ClaimProbe { .. } => claimed = true,
                    _ => {}
                }
            }
            if !claimed {
                return out;
            }
            self.m
                .handle(self.now(), Input::ProbeClaimed { granted: true });
        }
    }

    fn respond(&mut self, id: &str, command: &str, success: bool, data: Value) {
        let r: Response = serde_json::from_value(json!({
            "type": "response", "id": id, "command": command, "success": success, "data": data,
            "error": if success { Value::Null } else { json!("refused") }
        }))
        .unwrap();
        self.feed(Input::Pi(Incoming::Response(r)));
    }

    fn event(&mut self, v: Value) {
        let msg: Incoming = serde_json::from_value(v).unwrap();
        self.feed(Input::Pi(msg));
    }

    /// One input, then what the driver does at once: its actions taken (into `log`), a cost
    /// entered in the ledger and the spend fed back.
    fn feed(&mut self, input: Input) {
        self.m.handle(self.now(), input);
        self.take_actions();
    }

    /// get_state + get_available_models answered; returns the commands that follow.
    /// The commands the machine sent on creation.
    fn initial(&self) -> Vec<(String, Command)> {
        self.log[..self.cursor]
            .iter()
            .filter_map(|a| match a {
                Action::Send { id, command } => Some((id.clone(), command.clone())),
                _ => None,
            })
            .collect()
    }

    fn start(&mut self, current: Value, models: Vec<Value>) -> Vec<(String, Command)> {
        let ids: Vec<String> = self.initial().into_iter().map(|(id, _)| id).collect();
        self.respond(&ids[0], "get_state", true, json!({"model": current}));
        self.respond(
            &ids[1],
            "get_available_models",
            true,
            json!({"models": models}),
        );
        self.sent()
    }

    fn ok_prompt(&mut self, sent: &[(String, Command)]) {
        let (id, cmd) = sent.last().expect("a command was sent");
        assert!(
            matches!(cmd, Command::Prompt { .. }),
            "expected prompt, got {cmd:?}"
        );
        let id = id.clone();
        self.respond(&id, "prompt", true, Value::Null);
    }

    fn assistant_end(&mut self, stop: &str, text: &str, error: Option<&str>) {
        self.event(json!({"type": "message_end", "message": {
            "role": "assistant", "content": [{"type": "text", "text": text}],
            "stopReason": stop, "errorMessage": error}}));
    }

    fn settle(&mut self) {
        self.event(json!({"type": "agent_settled"}));
    }

    fn fail_settled(&mut self, error: &str) {
        self.event(json!({"type": "agent_start"}));
        self.assistant_end("error", "", Some(error));
        self.event(json!({"type": "agent_end", "willRetry": false}));
        self.settle();
    }

    /// An attempt that calls a tool which completes (the next LLM call is under way).
    fn tool_turn(&mut self) {
        self.event(json!({"type": "agent_start"}));
        self.assistant_end("toolUse", "", None);
        self.event(json!({"type": "tool_execution_start"}));
        self.event(json!({"type": "tool_execution_end"}));
    }

    /// Answers `get_fork_messages` and `fork` of a fork re-dispatch; returns what follows.
    fn answer_fork(&mut self, mut sent: Vec<(String, Command)>) -> Vec<(String, Command)> {
        for _ in 0..2 {
            let (id, cmd) = sent.pop().expect("a fork command");
            let data = match cmd {
                Command::GetForkMessages => json!({"messages": [{"entryId": "e1", "text": "x"}]}),
                _ => json!({"cancelled": false}),
            };
            self.respond(&id, cmd.name(), true, data);
            sent = self.sent();
        }
        sent
    }

    fn answer(&mut self, text: &str) {
        self.event(json!({"type": "agent_start"}));
        self.event(json!({"type": "message_update"}));
        self.assistant_end("stop", text, None);
        self.settle();
    }

    /// Answers fork bookkeeping and set_model, returns the final prompt command.
    fn complete_redispatch(&mut self, mut sent: Vec<(String, Command)>) -> Command {
        loop {
            let (id, cmd) = sent.pop().expect("a command");
            match &cmd {
                Command::GetForkMessages => self.respond(
                    &id,
                    "get_fork_messages",
                    true,
                    json!({"messages": [{"entryId": "e1", "text": "Summarise."}]}),
                ),
                Command::Fork { entry_id } => {
                    assert_eq!(entry_id, "e1");
                    self.respond(
                        &id,
                        "fork",
                        true,
                        json!({"text": "Summarise.", "cancelled": false}),
                    )
                }
                Command::SetModel { .. } => self.respond(&id, "set_model", true, json!({})),
                Command::SetThinkingLevel { .. } => {
                    self.respond(&id, "set_thinking_level", true, Value::Null)
                }
                Command::Prompt { .. } => {
                    self.respond(&id, "prompt", true, Value::Null);
                    return cmd;
                }
                other => panic!("unexpected command {other:?}"),
            }
            sent = self.sent();
        }
    }

    fn outcome(&self) -> Outcome {
        self.m.outcome().cloned().expect("finished")
    }

    fn commands(&mut self) -> Vec<String> {
        self.drain();
        self.log
            .iter()
            .filter_map(|a| match a {
                Action::Send { command, .. } => Some(match command {
                    Command::SetModel { provider, model_id } => {
                        format!("set_model {provider}/{model_id}")
                    }
                    c => c.name().to_string(),
                }),
                _ => None,
            })
            .collect()
    }

    fn deltas(&mut self) -> Vec<Delta> {
        self.drain();
        self.log
            .iter()
            .filter_map(|a| match a {
                Action::Record { delta, .. } => Some(delta.clone()),
                _ => None,
            })
            .collect()
    }

    fn progress(&mut self) -> Vec<String> {
        self.drain();
        self.log
            .iter()
            .filter_map(|a| match a {
                Action::Progress { line, note } if note.shown_in_run() => Some(line.clone()),
                _ => None,
            })
            .collect()
    }
}

const Q402: &str =
    r#"402: {"message":"You exceeded your current quota","type":"insufficient_quota"}"#;

fn answered_by(h: &H) -> String {
    match h.outcome() {
        Outcome::Answer { model, text } => format!("{} {text}", model.key()),
        other => panic!("no answer: {other:?}"),
    }
}

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
    assert!(matches!(h.deltas().as_slice(), [Delta::Success { .. }]));
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

#[test]
fn with_no_candidate_pi_keeps_its_own_retry_then_the_run_is_exhausted() {
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
    assert!(
        h.sent().is_empty(),
        "no abort_retry: Pi's retry is the only hope"
    );
    h.advance(2000);
    h.fail_settled(err);
    match h.outcome() {
        Outcome::Exhausted {
            reason, last_error, ..
        } => {
            assert_eq!(reason, Exhaustion::NoCandidate);
            assert!(last_error.unwrap().contains("a/m1: 429"));
        }
        other => panic!("{other:?}"),
    }
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
    h.event(json!({"type": "message_update"}));
    assert_eq!(
        h.m.poll_deadline(),
        Some(h.now().instant + Duration::from_millis(2000))
    );
    h.advance(1500);
    h.event(json!({"type": "message_update"}));
    assert_eq!(
        h.m.poll_deadline(),
        Some(h.now().instant + Duration::from_millis(2000))
    );
    h.event(json!({"type": "tool_execution_start"}));
    assert_eq!(h.m.poll_deadline(), None, "a running tool is not a stall");
    h.advance(600_000);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.sent().is_empty());
    h.event(json!({"type": "tool_execution_end"}));
    assert_eq!(
        h.m.poll_deadline(),
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

// ----- issue 15: the user's scope, provider and model are checked against Pi's registry -----

/// Options that take capacity slots (slot `host:1:w0`), a provider's limit starting at
/// `initial`; `pre_request_grace` as for a single run.
fn slots(initial: u32, pre_request_grace: bool) -> Options {
    Options {
        capacity: Some(crate::failover::CapacityOptions {
            slot: "host:1:w0".into(),
            initial,
            caps: Default::default(),
            pre_request_grace,
        }),
        ..Options::default()
    }
}

fn cfg_with(f: impl FnOnce(&mut Config)) -> Config {
    let mut c = cfg();
    f(&mut c);
    c
}

fn notes(h: &mut H, kind: Note) -> Vec<String> {
    h.drain();
    h.log
        .iter()
        .filter_map(|a| match a {
            Action::Progress { line, note } if *note == kind => Some(line.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_scope_that_selects_nothing_stops_before_sending_and_names_the_closest() {
    let c = cfg_with(|c| c.models_scope = Some("zhipu/*".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty(), "nothing is sent: {sent:?}");
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert!(msg.starts_with("--models 'zhipu/*' selects none"), "{msg}");
    assert!(msg.contains("a/m1, a/m2, b/m1, c/vision"), "{msg}");
    assert_eq!(h.commands(), ["get_state", "get_available_models"]);
}

#[test]
fn an_empty_glob_scope_lists_the_closest_models_first() {
    let c = cfg_with(|c| c.models_scope = Some("c/**vison-x**".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    h.start(model("a", "m1", false, 128_000), pool());
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert!(msg.contains("available: c/vision, a/m1"), "{msg}");
}

/// A run with `edit`ed config and `opts` whose Pi is on `a/<pi_on>`, up to its first prompt;
/// with the commands it sent after reading Pi's state and models.
fn first_dispatch(edit: impl FnOnce(&mut Config), opts: Options, pi_on: &str) -> (H, Vec<String>) {
    let mut h = H::build(cfg_with(edit), Health::default(), opts);
    let sent = h.start(model("a", pi_on, false, 128_000), pool());
    h.complete_redispatch(sent);
    let commands = h.commands()[2..].to_vec();
    (h, commands)
}

#[test]
fn without_a_model_a_scoped_run_starts_where_pi_would_have() {
    // Pi is not given `--models`: its current model is its own default (a/m1), outside the
    // scope's first place. The run starts from the first scoped model, as Pi would have.
    let scope = |c: &mut Config| c.models_scope = Some("b/*,a/*".into());
    let (h, commands) = first_dispatch(scope, Options::default(), "m1");
    assert_eq!(commands, ["set_model b/m1", "prompt"]);
    assert_eq!(h.m.start_model(), Some("b/m1"));
    // The saved default wins when it is in scope, and Pi is already on it.
    let saved = |c: &mut Config| {
        scope(c);
        c.saved_default = Some("a/m2".into());
    };
    let (_, commands) = first_dispatch(saved, Options::default(), "m2");
    assert_eq!(commands, ["prompt"]);
    // Out of scope, it does not.
    let out_of_scope = |c: &mut Config| {
        c.models_scope = Some("b/*".into());
        c.saved_default = Some("a/m2".into());
    };
    let (_, commands) = first_dispatch(out_of_scope, Options::default(), "m2");
    assert_eq!(commands, ["set_model b/m1", "prompt"]);
    // `--model` decides the start; the scope only limits the fallbacks.
    let model_given = |c: &mut Config| {
        scope(c);
        c.model = Some("m2".into());
    };
    let (_, commands) = first_dispatch(model_given, Options::default(), "m2");
    assert_eq!(commands, ["prompt"]);
}

#[test]
fn a_scoped_start_takes_the_thinking_level_its_pattern_named() {
    let levels = |h: &H| -> Vec<String> {
        h.log
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    command: Command::SetThinkingLevel { level },
                    ..
                } => Some(level.clone()),
                _ => None,
            })
            .collect()
    };
    let (h, commands) = first_dispatch(
        |c| c.models_scope = Some("b/*:high,a/*".into()),
        Options::default(),
        "m1",
    );
    assert_eq!(commands, ["set_model b/m1", "set_thinking_level", "prompt"]);
    assert_eq!(levels(&h), ["high"]);
    // An explicit level wins over the pattern's.
    let opts = Options {
        thinking: Some("low".into()),
        ..Options::default()
    };
    let (h, _) = first_dispatch(|c| c.models_scope = Some("b/*:high".into()), opts, "m1");
    assert_eq!(levels(&h), ["low"]);
}

#[test]
fn a_pattern_that_matches_nothing_is_warned_about_and_the_rest_is_used() {
    let c = cfg_with(|c| c.models_scope = Some("a/*,qwen/*".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    assert_eq!(
        notes(&mut h, Note::Warning),
        ["warning: --models pattern 'qwen/*' matches none of Pi's available models"]
    );
    h.fail_settled(Q402);
    // Inside the scope only a's models remain, and a's provider breaker is open.
    assert!(matches!(h.outcome(), Outcome::Exhausted { .. }));
}

#[test]
fn an_unknown_provider_is_a_setup_error_listing_the_known_ones() {
    let c = cfg_with(|c| c.provider = Some("zhipu".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    h.start(model("a", "m1", false, 128_000), pool());
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert_eq!(
        msg,
        "unknown provider 'zhipu': no available model has it; providers with available \
         models: a, b, c"
    );
}

#[test]
fn a_provider_alone_starts_from_its_first_model() {
    let c = cfg_with(|c| c.provider = Some("b".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert_eq!(
        sent[0].1,
        Command::SetModel {
            provider: "b".into(),
            model_id: "m1".into()
        }
    );
}

#[test]
fn an_unknown_start_model_is_a_setup_error_with_the_closest_models() {
    let c = cfg_with(|c| c.model = Some("a/m9".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    h.start(model("a", "m9", false, 128_000), pool());
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert!(
        msg.starts_with("unknown model 'a/m9': Pi would send 'm9' to a as a custom model id"),
        "{msg}"
    );
    assert!(msg.contains("closest available: a/m1, a/m2"), "{msg}");
}

#[test]
fn no_usable_model_at_all_is_a_setup_error() {
    let mut h = H::new(Health::default(), vec![]);
    h.start(json!({"provider": "unknown", "id": "unknown"}), vec![]);
    assert!(matches!(
        h.outcome(),
        Outcome::Setup(SetupProblem::NoUsableModel)
    ));
}

// ----- issue 15: waiting for a breaker to reopen; issue 13: retry hints ---------------------

fn cooling(h: &mut Health, provider: &str, class: FailureClass, at: u64) {
    h.apply(
        &Delta::Failure {
            at,
            key: provider.into(),
            scope: Scope::Provider,
            class,
            error: "x".into(),
        },
        1.0,
    );
}

fn two_providers() -> Vec<Value> {
    vec![
        model("a", "m1", false, 128_000),
        model("b", "m1", false, 128_000),
    ]
}

#[test]
fn with_waiting_a_run_waits_for_the_first_breaker_to_reopen_then_resumes() {
    let mut health = Health::default();
    let t0 = 10_000_000;
    cooling(&mut health, "a", FailureClass::Quota, t0 - 1000);
    cooling(&mut health, "b", FailureClass::RateLimit, t0 - 1000);
    let c = cfg_with(|c| c.wait = true);
    let base = crate::clock::now().instant;
    let mut h = H::build(
        c,
        health.clone(),
        Options {
            deadline: Some(base + Duration::from_secs(3600)),
            ..Options::default()
        },
    );
    h.base = base;
    let sent = h.start(model("a", "m1", false, 128_000), two_providers());
    assert!(sent.is_empty());
    let waits = notes(&mut h, Note::Wait);
    assert_eq!(
        waits,
        [
            "every candidate is cooling down; waiting 4m59s for provider b (rate_limit) to reopen (b/m1)"
        ]
    );
    assert!(h.m.outcome().is_none(), "still waiting");
    // Every second it re-reads health; nothing changed yet.
    let next = h.m.poll_deadline().expect("a check is due");
    assert_eq!(next, h.now().instant + WAIT_POLL);
    h.advance(1000);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.drain().contains(&Action::ReloadHealth));
    h.m.handle(h.now(), Input::HealthReloaded(health.clone()));
    assert!(h.m.outcome().is_none());
    assert_eq!(notes(&mut h, Note::Wait).len(), 1, "one line per wait");
    // The rate limit ends: b is probed (lease claimed), then used.
    h.advance(300_000);
    h.m.handle(h.now(), Input::Timeout);
    h.m.handle(h.now(), Input::HealthReloaded(health));
    let sent = h.sent();
    assert_eq!(
        sent[0].1,
        Command::SetModel {
            provider: "b".into(),
            model_id: "m1".into()
        }
    );
}

#[test]
fn a_waiting_run_denied_the_probe_keeps_waiting_for_the_other_runs_probe() {
    let mut health = Health::default();
    let t0 = 10_000_000;
    cooling(&mut health, "a", FailureClass::Quota, t0 - 1000);
    cooling(&mut health, "b", FailureClass::RateLimit, t0 - 400_000);
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
        json!({"models": two_providers()}),
    );
    let target = crate::health::ProbeTarget::new(Scope::Provider, "b");
    assert!(h.drain().contains(&Action::ClaimProbe { target }));
    h.cursor = h.log.len();
    // Another job holds b's probe: this one waits for it (the deadline is well before the
    // lease would expire), it does not give up with "no healthy candidate".
    h.m.handle(h.now(), Input::ProbeClaimed { granted: false });
    assert!(h.m.outcome().is_none(), "{:?}", h.m.outcome());
    assert_eq!(notes(&mut h, Note::Wait).len(), 1);
    // The other job's probe succeeded: b's breaker is closed in the reloaded health.
    let mut healed = health;
    healed.providers.remove("b");
    h.advance(1000);
    h.m.handle(h.now(), Input::Timeout);
    h.m.handle(h.now(), Input::HealthReloaded(healed));
    let sent = h.sent();
    assert_eq!(
        sent[0].1,
        Command::SetModel {
            provider: "b".into(),
            model_id: "m1".into()
        }
    );
}

#[test]
fn without_waiting_or_past_the_deadline_the_run_ends_with_a_retry_hint() {
    let mut health = Health::default();
    let t0 = 10_000_000;
    cooling(&mut health, "a", FailureClass::Quota, t0 - 1000);
    cooling(&mut health, "b", FailureClass::RateLimit, t0 - 1000);
    for (wait, deadline_s) in [(false, 3600), (true, 60)] {
        let c = cfg_with(|c| c.wait = wait);
        let base = crate::clock::now().instant;
        let mut h = H::build(
            c,
            health.clone(),
            Options {
                deadline: Some(base + Duration::from_secs(deadline_s)),
                ..Options::default()
            },
        );
        h.base = base;
        h.start(model("a", "m1", false, 128_000), two_providers());
        let Outcome::Exhausted { retry, .. } = h.outcome() else {
            panic!("{:?}", h.outcome())
        };
        assert!(retry.could_help, "{retry:?}");
        assert_eq!(retry.retry_after_ms, Some(299_000));
        assert_eq!(
            retry.reason,
            "retrying later could help: b/m1 is usable again in 4m59s"
        );
    }
}

#[test]
fn auth_and_quota_everywhere_say_a_retry_will_not_help() {
    let mut health = Health::default();
    cooling(&mut health, "a", FailureClass::Quota, 9_999_000);
    cooling(&mut health, "b", FailureClass::Auth, 9_999_000);
    let mut h = H::new(health, vec![]);
    h.start(model("a", "m1", false, 128_000), two_providers());
    let Outcome::Exhausted { retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert!(!retry.could_help);
    assert_eq!(retry.retry_after_ms, None);
    assert_eq!(
        retry.reason,
        "retrying will not help until the cause is fixed: provider a (quota), provider b \
         (auth) — check the API keys; top up or raise the quota"
    );
}

#[test]
fn no_image_capable_model_says_a_retry_will_not_help() {
    let img = ImageContent::new("AAAA".into(), "image/png");
    let mut h = H::new(Health::default(), vec![img]);
    h.start(model("a", "m1", false, 128_000), two_providers());
    let Outcome::Exhausted { reason, retry, .. } = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(reason, Exhaustion::NoImageModel);
    assert!(!retry.could_help);
    assert!(
        retry.reason.starts_with("no model that accepts images"),
        "{retry:?}"
    );
}

// ----- batch noise: breakers opening and closing are their own notes ------------------------

#[test]
fn a_breaker_opening_and_closing_are_noted_once() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.fail_settled(Q402);
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.answer("ok");
    assert_eq!(
        notes(&mut h, Note::Breaker),
        ["breaker open: provider a (quota) for 30m00s"]
    );
    // A probe that succeeds closes what was open.
    let mut health = Health::default();
    cooling(&mut health, "a", FailureClass::RateLimit, 1);
    let mut h = H::new(health, vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.answer("ok");
    assert_eq!(
        notes(&mut h, Note::Breaker),
        ["breaker closed: provider a (answered)"]
    );
}

// ----- issue 11: usage per attempt ----------------------------------------------------------

#[test]
fn usage_is_kept_per_attempt() {
    let mut h = H::new(Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    h.event(
        json!({"type": "message_end", "message": {"role": "assistant", "content": [],
        "stopReason": "error", "errorMessage": Q402,
        "usage": {"input": 10, "output": 0, "totalTokens": 10, "cost": {"total": 0.5}}}}),
    );
    h.settle();
    let sent = h.sent();
    h.complete_redispatch(sent);
    h.event(
        json!({"type": "message_end", "message": {"role": "assistant",
        "content": [{"type": "text", "text": "hi"}], "stopReason": "stop",
        "usage": {"input": 11, "output": 7, "cacheRead": 2, "totalTokens": 20,
                  "cost": {"input": 0.1, "output": 0.2, "total": 0.3}}}}),
    );
    h.settle();
    let a = h.m.attempts();
    assert_eq!((a[0].usage.input, a[0].usage.cost), (10, 0.5));
    assert_eq!(
        (
            a[1].usage.input,
            a[1].usage.output,
            a[1].usage.cache_read,
            a[1].usage.total_tokens
        ),
        (11, 7, 2, 20)
    );
    assert!((a[1].usage.cost - 0.3).abs() < 1e-12);
}

// ----- issue 13: --explain -------------------------------------------------------------------

#[test]
fn explain_ranks_and_excludes_without_sending_anything() {
    let mut health = Health::default();
    cooling(&mut health, "b", FailureClass::RateLimit, 9_999_000);
    health.models.entry("a/m2".into()).or_default().disabled = true;
    let c = cfg_with(|c| c.models_scope = Some("a/*,b/*".into()));
    let opts = Options {
        explain: true,
        ..Options::default()
    };
    let mut h = H::build(c, health, opts);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty());
    let Outcome::Explained(e) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    assert_eq!(e.start_model, "a/m1");
    assert_eq!(e.start_skipped, None);
    let order: Vec<&str> = e.candidates.iter().map(|c| c.model.as_str()).collect();
    assert_eq!(order, ["a/m1"]);
    let excluded: Vec<(&str, &str)> = e
        .excluded
        .iter()
        .map(|x| (x.model.as_str(), x.code))
        .collect();
    assert_eq!(
        excluded,
        [
            ("a/m2", "disabled"),
            ("b/m1", "breaker_open"),
            ("c/vision", "outside_models")
        ]
    );
    assert_eq!(h.commands(), ["get_state", "get_available_models"]);
}

/// Issue 20: with shared health still on its way, the first request waits for it once Pi is
/// ready, but never longer than `HEALTH_GRACE`: then the run goes on with what it knows.
#[test]
fn a_slow_store_costs_the_first_request_the_grace_at_most() {
    let mut h = H::with_options(Options {
        health_pending: true,
        ..Options::default()
    });
    h.advance(600);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(
        sent.is_empty(),
        "nothing before health or the grace: {sent:?}"
    );
    let ready = h.now().instant;
    assert_eq!(h.m.poll_deadline(), Some(ready + HEALTH_GRACE));
    h.advance(249);
    h.m.handle(h.now(), Input::Timeout);
    assert!(h.sent().is_empty(), "still within the grace");
    h.advance(1);
    h.m.handle(h.now(), Input::Timeout);
    let sent = h.sent();
    assert!(
        matches!(sent.last(), Some((_, Command::Prompt { .. }))),
        "{sent:?}"
    );
    // Health that comes late is still taken in (the next choices see it).
    let mut late = Health::default();
    late.apply(
        &Delta::Failure {
            at: h.now().wall_ms,
            key: "b".into(),
            scope: Scope::Provider,
            class: FailureClass::Quota,
            error: "402".into(),
        },
        1.0,
    );
    h.m.handle(h.now(), Input::HealthLoaded(late));
    assert!(h.sent().is_empty(), "no second start");
}

/// Health that arrives within the grace decides the start: a provider another run found dead
/// is skipped before anything is sent.
#[test]
fn health_that_arrives_in_time_decides_the_start() {
    let mut h = H::with_options(Options {
        health_pending: true,
        ..Options::default()
    });
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty());
    h.advance(100);
    let mut stored = Health::default();
    stored.apply(
        &Delta::Failure {
            at: h.now().wall_ms,
            key: "a".into(),
            scope: Scope::Provider,
            class: FailureClass::Quota,
            error: "402".into(),
        },
        1.0,
    );
    h.m.handle(h.now(), Input::HealthLoaded(stored));
    let sent = h.sent();
    assert!(
        sent.iter()
            .any(|(_, c)| matches!(c, Command::SetModel { provider, .. } if provider == "b")),
        "{sent:?}"
    );
}

/// Issue 21: Chinese text counts at least one token per character in the context-window
/// check (four characters a token was 2.5× low: a 1,293-character report showed ~338).
#[test]
fn cjk_text_counts_a_token_per_character() {
    use crate::failover::tokens::estimate_tokens;
    assert_eq!(estimate_tokens("abcd"), 1);
    assert_eq!(estimate_tokens("abcde"), 2);
    assert_eq!(estimate_tokens("季度收入增长"), 6);
    assert_eq!(estimate_tokens("Q3 收入增长。"), 6);
    let report: String = "本季度营收同比增长百分之十二。".repeat(86);
    assert_eq!(report.chars().count(), 1290);
    assert_eq!(estimate_tokens(&report), 1290);
    assert_eq!(estimate_tokens("かなカナ한글"), 6);
}

#[path = "tests/budget.rs"]
mod budget;
#[path = "tests/capacity.rs"]
mod capacity;
#[path = "tests/stated.rs"]
mod stated;
