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
        watchdog_floor: Duration::from_millis(500),
        round_limit: Duration::from_millis(60_000),
        cooldown_scale: 1.0,
        models_scope: None,
        saved_default: None,
        provider: None,
        model: None,
        wait: false,
        max_inflight: Default::default(),
        budget: crate::budget::Caps::default(),
        max_wait: None,
        prefer_primary: None,
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
        Outcome::Answer { model, text, .. } => format!("{} {text}", model.key()),
        other => panic!("no answer: {other:?}"),
    }
}

// ----- helpers the submodules share ------------------------------------------------------

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

#[path = "tests/budget.rs"]
mod budget;
#[path = "tests/capacity.rs"]
mod capacity;
#[path = "tests/failover.rs"]
mod failover;
#[path = "tests/pace.rs"]
mod pace;
#[path = "tests/schema.rs"]
mod schema;
#[path = "tests/scope.rs"]
mod scope;
#[path = "tests/session.rs"]
mod session;
#[path = "tests/stated.rs"]
mod stated;
#[path = "tests/wait_bounds.rs"]
mod wait_bounds;
#[path = "tests/waiting.rs"]
mod waiting;
