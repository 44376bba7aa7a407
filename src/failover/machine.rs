//! The failover state machine for one run (one prompt). Sans-IO: Pi's events, command
//! responses, timeouts and interrupts go in through `handle_*` with the current time; commands
//! to send, health deltas to persist, progress lines and the final outcome come out through
//! `poll_action`, and the next deadline through `poll_deadline`. Nothing here sleeps, spawns,
//! reads a clock or touches a file, so every path can be tested with hand-made times.
//!
//! A run goes: read state and models → (switch before sending if the start model is known to
//! be dead or cannot see the request's images) → prompt → watch events until `agent_settled`
//! → judge the last assistant message → on failure classify, open the breaker, choose the best
//! candidate and re-dispatch (fork + same prompt when no tool ran, continuation prompt when
//! tools ran) → repeat until an answer, exhaustion, the deadline or an interrupt.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::candidates::{self, Filter};
use super::classify::{Classification, FailureClass, Observation, Scope, classify};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::health::{Delta, Health, Keys, SwitchEntry};
use crate::rpc::pending::Pending;
use crate::rpc::{Command, ForkMessage, ImageContent, Incoming, Message, Response};

/// Sent after a failure when tools already ran: the context keeps the finished tool work.
pub const CONTINUATION_PROMPT: &str = "The previous model failed before finishing. Continue the \
task from the current state. Do not repeat tool calls that already completed; use their results \
above. Then give the final answer.";

/// Switch reason for leaving a start model already known to be dead before any request; such a
/// switch is announced but not written to the shared switch log.
const UNHEALTHY: &str = "unhealthy";

/// How long Pi may take to settle after `abort` before the run is declared wedged.
const ABORT_GRACE: Duration = Duration::from_secs(10);
/// How long Pi may take to answer a command (start-up included, normally ~0.5 s).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Tunables, from settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub first_response: Duration,
    pub stall: Duration,
    pub round_limit: Duration,
    /// 1.0 = SPEC cooldowns; smaller values shrink them (tests).
    pub cooldown_scale: f64,
    /// `--models` patterns: failover stays inside this scope.
    pub models_scope: Option<String>,
}

/// Per-run options for a Pi process that serves several runs (batch mode).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Start with `new_session`: the previous job's conversation must not leak into this one.
    pub fresh_session: bool,
    /// `provider/id` to start from when Pi's current model differs (a previous job switched).
    pub start_model: Option<String>,
    /// Thinking level to (re)apply: Pi clamps the level to each model and does not restore it
    /// after `set_model`, so it is sent again after every switch.
    pub thinking: Option<String>,
    /// Prefix of this run's command ids (unique per run on a shared Pi).
    pub id_prefix: String,
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Answer {
        text: String,
        model: ModelInfo,
    },
    /// No healthy candidate left, or the round window ran out (exit 1).
    Exhausted {
        reason: String,
        last_error: Option<String>,
    },
    /// The answer was empty and no other model was left to try (exit 2).
    EmptyAnswer,
    /// The run was aborted on request (deadline or signal); the driver maps the cause.
    Aborted,
    /// Pi misbehaved or refused the request (exit 2).
    Fatal(String),
}

/// One failed (or successful) attempt, for `-v` and `--json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub model: String,
    /// `None` for the attempt that answered.
    pub failure: Option<Classification>,
    /// Redaction is the caller's job before printing; this is Pi's raw text.
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write this command to Pi with this id.
    Send {
        id: String,
        command: Command,
    },
    /// Claim the half-open probe lease of a breaker (a `health::probe_target`), then call
    /// `handle_probe_result`.
    ClaimProbe {
        target: String,
    },
    /// Persist this health change; the merged result comes back through `handle_health(seq, ..)`.
    Record {
        seq: u64,
        delta: Delta,
    },
    /// A line for stderr (already without secrets except error text, which the driver redacts).
    Progress {
        line: String,
        verbose_only: bool,
    },
    Finish(Outcome),
}

/// Which command a response answers.
#[derive(Debug, Clone, PartialEq)]
enum Tag {
    GetState,
    Models,
    Prompt,
    Abort,
    AbortRetry,
    ForkMessages,
    Fork,
    SetModel(ModelInfo),
    Thinking,
    NewSession,
    Other,
}

impl Tag {
    /// The run cannot go on without this command's answer.
    fn awaited(&self) -> bool {
        // A prompt's answer can wait for Pi to compact a long context first; the run's
        // deadline covers it.
        !matches!(
            self,
            Tag::Abort | Tag::AbortRetry | Tag::Other | Tag::Prompt
        )
    }
}

/// How the request reaches the next model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redispatch {
    /// No tool ran: fork at the failed user message, then send the same prompt and images.
    Fork,
    /// Tools ran: keep the context, send a continuation prompt.
    Continue,
    /// Nothing was sent yet (switch before the first request).
    Initial,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Waiting for `get_state` and `get_available_models`.
    Starting,
    /// Waiting for the answer to a probe-lease claim on `target` before using `model`.
    Claiming {
        model: ModelInfo,
        mode: Redispatch,
        reason: String,
        target: String,
    },
    /// Commands of a re-dispatch in flight.
    Dispatching,
    /// A prompt is running.
    Running,
    /// A failure was judged while Pi still runs (auto-retry backoff or our abort): act once
    /// Pi settles.
    Settling,
    Done,
}

/// Watchdog state for the running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    Off,
    FirstResponse(Instant),
    Stall(Instant),
}

/// The decision taken after a failure, executed once Pi has settled.
#[derive(Debug, Clone, PartialEq)]
enum Plan {
    Switch(ModelInfo, String),
    RetrySame,
    Exhaust(String),
}

pub struct Machine {
    cfg: Config,
    start_model: Option<String>,
    /// The model Pi reported before this run changed anything.
    pi_model: Option<ModelInfo>,
    /// The start model differs from Pi's current one: the first dispatch must set it.
    pending_set: bool,
    thinking: Option<String>,
    thinking_sent: bool,
    /// The level Pi chose for a reasoning start model when none was asked for.
    thinking_default: Option<String>,
    /// A switch waiting for Pi to accept the new model.
    pending_switch: Option<SwitchEntry>,
    /// A prompt was accepted and its attempt has not been judged yet.
    attempt_open: bool,
    /// (model, class) failures already recorded this round: Pi's own retries of the same
    /// failure must not double the cooldown again and again within one run.
    recorded: BTreeSet<(String, FailureClass)>,
    /// Latest time seen, so commands sent from inside a handler get a response deadline.
    last_now: Option<Instant>,
    /// Commands whose answer the run waits for, and when that wait becomes a failure.
    waiting: usize,
    response_deadline: Option<Instant>,
    health: Health,
    /// Records sent to the driver whose merged result has not come back yet: (seq, delta).
    unconfirmed: VecDeque<(u64, Delta)>,
    record_seq: u64,
    prompt: String,
    images: Vec<ImageContent>,

    phase: Phase,
    pending: Pending<Tag>,
    actions: VecDeque<Action>,
    queue: VecDeque<Command>,

    pool: Vec<ModelInfo>,
    current: Option<ModelInfo>,
    state_seen: bool,
    models_seen: bool,

    // Round state.
    round_start: Option<Instant>,
    tried: BTreeSet<String>,
    endpoint_failures: BTreeMap<String, u32>,
    isolated: BTreeSet<String>,
    avoided_families: BTreeSet<String>,
    larger_context_than: Option<u64>,
    retried_same: BTreeSet<String>,
    own_leases: Vec<String>,
    switches: u32,

    // Attempt state.
    attempt_started: Option<Instant>,
    last_assistant: Option<Message>,
    last_seq: u64,
    judged_seq: u64,
    tools_running: u32,
    /// A tool finished since the last prompt was sent: its result must stay in the context,
    /// so the next model gets a continuation prompt instead of a fork.
    tools_since_prompt: bool,
    /// The last prompt sent was the continuation prompt (a later fork re-sends it, once).
    continued: bool,
    watch: Watch,
    watchdog_fired: bool,
    aborting: Option<Instant>,
    plan: Option<Plan>,
    interrupted: bool,

    attempts: Vec<Attempt>,
    last_error: Option<String>,
    outcome: Option<Outcome>,
}

impl Machine {
    pub fn new(cfg: Config, health: Health, prompt: String, images: Vec<ImageContent>) -> Machine {
        Machine::with_options(cfg, health, prompt, images, Options::default())
    }

    pub fn with_options(
        cfg: Config,
        health: Health,
        prompt: String,
        images: Vec<ImageContent>,
        options: Options,
    ) -> Machine {
        let mut m = Machine {
            start_model: options.start_model,
            thinking: options.thinking,
            thinking_sent: false,
            thinking_default: None,
            pending_switch: None,
            attempt_open: false,
            recorded: BTreeSet::new(),
            last_now: None,
            waiting: 0,
            response_deadline: None,
            pi_model: None,
            pending_set: false,
            cfg,
            health,
            unconfirmed: VecDeque::new(),
            record_seq: 0,
            prompt,
            images,
            phase: Phase::Starting,
            pending: Pending::with_prefix(&options.id_prefix),
            actions: VecDeque::new(),
            queue: VecDeque::new(),
            pool: Vec::new(),
            current: None,
            state_seen: false,
            models_seen: false,
            round_start: None,
            tried: BTreeSet::new(),
            endpoint_failures: BTreeMap::new(),
            isolated: BTreeSet::new(),
            avoided_families: BTreeSet::new(),
            larger_context_than: None,
            retried_same: BTreeSet::new(),
            own_leases: Vec::new(),
            switches: 0,
            attempt_started: None,
            last_assistant: None,
            last_seq: 0,
            judged_seq: 0,
            tools_running: 0,
            tools_since_prompt: false,
            continued: false,
            watch: Watch::Off,
            watchdog_fired: false,
            aborting: None,
            plan: None,
            interrupted: false,
            attempts: Vec::new(),
            last_error: None,
            outcome: None,
        };
        if options.fresh_session {
            // Pi switches sessions asynchronously: a command sent before this answer would
            // still reach the old session.
            m.send(Command::NewSession, Tag::NewSession);
        } else {
            m.send(Command::GetState, Tag::GetState);
            m.send(Command::GetAvailableModels, Tag::Models);
        }
        m
    }

    // ----- outputs --------------------------------------------------------------------------

    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next instant at which `handle_timeout` must be called.
    pub fn poll_deadline(&self) -> Option<Instant> {
        if self.phase == Phase::Done {
            return None;
        }
        let watch = match self.watch {
            Watch::Off => None,
            Watch::FirstResponse(t) | Watch::Stall(t) => Some(t),
        };
        let abort = self.aborting.map(|t| t + ABORT_GRACE);
        [watch, abort, self.response_deadline]
            .into_iter()
            .flatten()
            .min()
    }

    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    pub fn switches(&self) -> u32 {
        self.switches
    }

    pub fn current(&self) -> Option<&ModelInfo> {
        self.current.as_ref()
    }

    /// The attempt still under way when the run ended without judging it (interrupt, deadline,
    /// Pi died): its model and how long it ran. `failure` is left for the caller to fill in.
    pub fn open_attempt(&self, now: Now) -> Option<Attempt> {
        if !self.attempt_open {
            return None;
        }
        let model = self.current.as_ref()?.key();
        let duration_ms = self.attempt_started.map_or(0, |t| {
            u64::try_from(now.instant.saturating_duration_since(t).as_millis()).unwrap_or(u64::MAX)
        });
        Some(Attempt {
            model,
            failure: None,
            error: None,
            duration_ms,
        })
    }

    /// The model Pi was on when this run started (before any switch).
    pub fn pi_model(&self) -> Option<&ModelInfo> {
        self.pi_model.as_ref()
    }

    /// Models tried this round, in the order they failed.
    pub fn tried(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.attempts
            .iter()
            .filter(|a| a.failure.is_some() && seen.insert(a.model.clone()))
            .map(|a| a.model.clone())
            .collect()
    }

    // ----- inputs ---------------------------------------------------------------------------

    /// A newer view of shared health (other processes' updates merged in), as stored after this
    /// run's record `seq`. Records emitted since are not in it yet and are applied again, so the
    /// view never goes back in time.
    pub fn handle_health(&mut self, seq: u64, health: Health) {
        self.health = health;
        while self.unconfirmed.front().is_some_and(|(s, _)| *s <= seq) {
            self.unconfirmed.pop_front();
        }
        for (_, delta) in &self.unconfirmed {
            self.health.apply(delta, self.cfg.cooldown_scale);
        }
    }

    pub fn handle_incoming(&mut self, now: Now, msg: Incoming) {
        self.last_now = Some(now.instant);
        if self.phase == Phase::Done {
            return;
        }
        match msg {
            Incoming::Response(r) => self.on_response(now, r),
            Incoming::AgentStart | Incoming::TurnStart
                if self.tools_running == 0 && !self.interrupted && self.aborting.is_none() =>
            {
                // abort_retry only cancels Pi's backoff sleep; a retry already under way runs
                // on, and is watched like any attempt.
                if self.phase == Phase::Settling {
                    self.phase = Phase::Running;
                }
                self.watch = Watch::FirstResponse(now.instant + self.cfg.first_response);
            }
            Incoming::MessageStart { message } if message.role == "assistant" => {
                self.progress(now);
            }
            Incoming::MessageUpdate {} => self.progress(now),
            Incoming::MessageEnd { message } if message.role == "assistant" => {
                self.last_seq += 1;
                self.last_assistant = Some(message);
                self.progress(now);
            }
            Incoming::ToolExecutionStart {} => {
                self.tools_running += 1;
                self.watch = Watch::Off;
            }
            Incoming::ToolExecutionEnd {} => {
                self.tools_running = self.tools_running.saturating_sub(1);
                self.tools_since_prompt = true;
                if self.tools_running == 0 {
                    self.progress(now);
                }
            }
            Incoming::CompactionStart {} => self.watch = Watch::Off,
            Incoming::CompactionEnd {} => self.progress(now),
            Incoming::AutoRetryStart {
                error_message,
                delay_ms,
                ..
            } => self.on_auto_retry(now, &error_message, delay_ms),
            Incoming::AgentSettled {} => self.on_settled(now),
            Incoming::ExtensionUiRequest { id, method } => {
                // Dialogs wait for a human; there is none in a headless run.
                if matches!(method.as_str(), "select" | "confirm" | "input" | "editor") {
                    self.send(
                        Command::ExtensionUiResponse {
                            id,
                            cancelled: true,
                        },
                        Tag::Other,
                    );
                }
            }
            _ => {}
        }
    }

    /// Call once, right after creating the machine: starts the clock on Pi's first answer.
    pub fn handle_start(&mut self, now: Now) {
        self.last_now = Some(now.instant);
        if self.waiting > 0 {
            self.response_deadline = Some(now.instant + RESPONSE_TIMEOUT);
        }
    }

    pub fn handle_timeout(&mut self, now: Now) {
        self.last_now = Some(now.instant);
        if self.response_deadline.is_some_and(|t| now.instant >= t) {
            self.finish(Outcome::Fatal(format!(
                "Pi did not answer a command within {} s (is it wedged?)",
                RESPONSE_TIMEOUT.as_secs()
            )));
            return;
        }
        if let Some(since) = self.aborting
            && now.instant >= since + ABORT_GRACE
        {
            self.finish(Outcome::Fatal(
                "Pi did not stop within 10 s after abort".to_string(),
            ));
            return;
        }
        let expired = match self.watch {
            Watch::FirstResponse(t) | Watch::Stall(t) => now.instant >= t,
            Watch::Off => false,
        };
        if !expired || !matches!(self.phase, Phase::Running | Phase::Settling) {
            return;
        }
        let which = match self.watch {
            Watch::FirstResponse(_) => "no first response",
            _ => "no stream progress",
        };
        let ms = match self.watch {
            Watch::FirstResponse(_) => self.cfg.first_response.as_millis(),
            _ => self.cfg.stall.as_millis(),
        };
        self.watch = Watch::Off;
        self.watchdog_fired = true;
        self.progress_line(format!("watchdog: {which} for {ms} ms; aborting"), true);
        self.abort(now);
    }

    /// The deadline passed or a signal arrived: abort Pi's run, never fail over.
    pub fn handle_interrupt(&mut self, now: Now) {
        if self.phase == Phase::Done || self.interrupted {
            return;
        }
        self.interrupted = true;
        self.watch = Watch::Off;
        match self.phase {
            Phase::Running | Phase::Settling => self.abort(now),
            _ => self.finish(Outcome::Aborted),
        }
    }

    pub fn handle_probe_result(&mut self, now: Now, granted: bool) {
        let Phase::Claiming {
            model,
            mode,
            reason,
            target,
        } = self.phase.clone()
        else {
            return;
        };
        if granted {
            self.own_leases.push(target);
            // Another of the model's breakers may be half-open too.
            self.go_to(now, model, mode, &reason);
        } else {
            self.progress_line(
                format!("skip {}: another run is probing it ({target})", model.key()),
                true,
            );
            self.tried.insert(model.key());
            self.choose_and_switch(now, mode, &reason);
        }
    }

    /// Uses `model` next: claims the probe lease first when one of its breakers is half-open
    /// (only one process at a time may probe), then sets it (unless it is already current)
    /// and dispatches.
    fn go_to(&mut self, now: Now, model: ModelInfo, mode: Redispatch, reason: &str) {
        if let Some(target) = self
            .health
            .needs_probe(&model, now.wall_ms, &self.own_leases)
        {
            self.phase = Phase::Claiming {
                model,
                mode,
                reason: reason.to_string(),
                target: target.clone(),
            };
            self.actions.push_back(Action::ClaimProbe { target });
        } else if self
            .current
            .as_ref()
            .is_some_and(|c| c.key() == model.key())
        {
            self.start_redispatch(mode, None);
        } else {
            self.switch_to(now, model, mode, reason);
        }
    }

    // ----- responses ------------------------------------------------------------------------

    fn on_response(&mut self, now: Now, r: Response) {
        let tag = self.pending.resolve(&r);
        if tag.as_ref().is_some_and(Tag::awaited) {
            self.waiting = self.waiting.saturating_sub(1);
            if self.waiting == 0 {
                self.response_deadline = None;
            }
        }
        let Some(tag) = tag else {
            if r.command == "parse" && !r.success {
                self.finish(Outcome::Fatal(format!(
                    "Pi could not parse a command: {}",
                    r.error.unwrap_or_default()
                )));
            }
            return;
        };
        match tag {
            Tag::GetState => {
                self.state_seen = true;
                if let Some(model) = r
                    .data
                    .as_ref()
                    .and_then(|d| d.get("model"))
                    .and_then(|m| serde_json::from_value::<ModelInfo>(m.clone()).ok())
                {
                    // With no level asked for, a reasoning start model shows the user's default
                    // level; it is set again after switches, since Pi keeps a level clamped to
                    // "off" by a non-reasoning model in between.
                    if self.thinking.is_none() && model.reasoning {
                        self.thinking_default = r
                            .data
                            .as_ref()
                            .and_then(|d| d.get("thinkingLevel"))
                            .and_then(Value::as_str)
                            .map(str::to_string);
                    }
                    self.pi_model = Some(model.clone());
                    self.current = Some(model);
                }
                self.maybe_start(now);
            }
            Tag::Models => {
                if !r.success {
                    return self.finish(Outcome::Fatal(format!(
                        "get_available_models failed: {}",
                        r.error.unwrap_or_default()
                    )));
                }
                let models = r.models();
                let mut seen = BTreeSet::new();
                let unique: Vec<ModelInfo> = models
                    .into_iter()
                    .filter(|m| seen.insert(m.key()))
                    .collect();
                self.pool = match &self.cfg.models_scope {
                    Some(p) => crate::catalog::scope::scope(p, &unique),
                    None => unique,
                };
                self.models_seen = true;
                self.maybe_start(now);
            }
            Tag::Prompt => {
                if !r.success {
                    return self.on_prompt_rejected(now, &r.error.unwrap_or_default());
                }
                if r.data
                    .as_ref()
                    .and_then(|d| d.get("disposition"))
                    .and_then(Value::as_str)
                    == Some("handled")
                {
                    return self.finish(Outcome::Fatal(
                        "Pi handed the prompt to an extension; there is no answer to print"
                            .to_string(),
                    ));
                }
                self.phase = Phase::Running;
                self.attempt_started = Some(now.instant);
                self.attempt_open = true;
                if self.round_start.is_none() {
                    self.round_start = Some(now.instant);
                }
                if !matches!(self.watch, Watch::Stall(_)) {
                    self.watch = Watch::FirstResponse(now.instant + self.cfg.first_response);
                }
                self.run_queue();
            }
            Tag::SetModel(model) => {
                if r.success {
                    self.switch_done(now, &model);
                    self.current = Some(model);
                    self.run_queue();
                } else {
                    self.pending_switch = None;
                    // Pi refused the model: a model-scope failure of that candidate.
                    let error = format!(
                        "Pi refused model selection: {}",
                        r.error.unwrap_or_default()
                    );
                    self.record_failure(
                        now,
                        &model,
                        Classification {
                            class: FailureClass::Model,
                            scope: Scope::Model,
                            status: None,
                            matched: "set_model refused".to_string(),
                        },
                        &error,
                    );
                    // Drop the queued prompt and choose again. Any fork already happened, so
                    // the next candidate only needs set_model + prompt.
                    self.queue.clear();
                    let mode = self.redispatch_mode(false);
                    self.choose_and_switch(now, mode, "model");
                }
            }
            Tag::ForkMessages => {
                let last = r
                    .data
                    .as_ref()
                    .and_then(|d| d.get("messages"))
                    .and_then(|m| serde_json::from_value::<Vec<ForkMessage>>(m.clone()).ok())
                    .and_then(|v| v.into_iter().last());
                match last {
                    Some(entry) if r.success => {
                        self.queue.push_front(Command::Fork {
                            entry_id: entry.entry_id,
                        });
                        self.run_queue();
                    }
                    _ => self.finish(Outcome::Fatal(
                        "Pi returned no user message to fork from".to_string(),
                    )),
                }
            }
            Tag::Fork => {
                if r.success && !r.cancelled() {
                    self.run_queue();
                } else {
                    self.finish(Outcome::Fatal(format!(
                        "Pi could not fork the session: {}",
                        r.error.unwrap_or_else(|| "cancelled".to_string())
                    )));
                }
            }
            Tag::NewSession => {
                if !r.success || r.cancelled() {
                    return self.finish(Outcome::Fatal(format!(
                        "Pi could not start a fresh session: {}",
                        r.error.unwrap_or_else(|| "cancelled".to_string())
                    )));
                }
                self.send(Command::GetState, Tag::GetState);
                self.send(Command::GetAvailableModels, Tag::Models);
            }
            // A level the model cannot take is Pi's to clamp; the run goes on either way.
            Tag::Thinking => self.run_queue(),
            Tag::Abort | Tag::AbortRetry | Tag::Other => {}
        }
    }

    /// Pi refused the prompt before sending anything. A missing or bad key for the current
    /// model is an auth failure worth failing over; anything else is a setup problem.
    fn on_prompt_rejected(&mut self, now: Now, error: &str) {
        let error = format!("Pi rejected the prompt: {error}");
        let verdict = classify(&Observation {
            error_message: &error,
            stop_reason: "error",
            watchdog: false,
            user_abort: false,
        });
        match self.current.clone() {
            Some(current) if verdict.class == FailureClass::Auth && !self.interrupted => {
                let plan = self.judge(now, &current, verdict, &error);
                // Nothing reached the session, so there is nothing to fork away from.
                let mode = self.redispatch_mode(false);
                self.execute_with(now, plan, mode);
            }
            _ => self.finish(Outcome::Fatal(error)),
        }
    }

    fn maybe_start(&mut self, now: Now) {
        if self.phase != Phase::Starting || !self.state_seen || !self.models_seen {
            return;
        }
        let current = self
            .current
            .as_ref()
            .and_then(|c| self.pool.iter().find(|m| m.key() == c.key()).cloned())
            .or_else(|| {
                // Pi's start model outside `--models` or without credentials: use Pi's object.
                self.current.clone()
            });
        let Some(current) = current else {
            return self.finish(Outcome::Fatal(
                "Pi reported no current model (check models.json and credentials)".to_string(),
            ));
        };
        let current = match &self.start_model {
            Some(key) if *key != current.key() => {
                match self.pool.iter().find(|m| &m.key() == key) {
                    Some(m) => {
                        self.pending_set = true;
                        m.clone()
                    }
                    None => current,
                }
            }
            _ => current,
        };
        self.current = Some(current.clone());
        let needs_images = !self.images.is_empty();
        // A start model outside Pi's registry is the user's choice (Pi sends custom ids as
        // they are); only Pi's placeholder for "no usable model at all" is replaced.
        let why_not = if current.provider == "unknown" && current.id == "unknown" {
            Some("not a usable model (no provider has credentials?)".to_string())
        } else if needs_images && !current.accepts_images() {
            Some("text-only and the request has images".to_string())
        } else {
            self.health
                .blocked(&current, now.wall_ms, &self.own_leases)
                .map(|block| match block {
                    crate::health::Block::Disabled => "disabled".to_string(),
                    crate::health::Block::Cooling(s) => format!("{} breaker open", s.as_str()),
                    crate::health::Block::Leased => "another run is probing it".to_string(),
                })
        };
        match why_not {
            // A start model whose cooldown expired may only be used as the single probe.
            None => self.go_to(now, current, Redispatch::Initial, "probe"),
            Some(why) => {
                self.progress_line(format!("start: {} is {why}", current.key()), false);
                self.tried.insert(current.key());
                let reason = if needs_images && !current.accepts_images() {
                    "modality"
                } else {
                    UNHEALTHY
                };
                self.choose_and_switch(now, Redispatch::Initial, reason);
            }
        }
    }

    // ----- the run --------------------------------------------------------------------------

    fn progress(&mut self, now: Now) {
        if self.tools_running == 0 && !self.interrupted && self.aborting.is_none() {
            self.watch = Watch::Stall(now.instant + self.cfg.stall);
        }
    }

    fn on_auto_retry(&mut self, now: Now, error_message: &str, delay_ms: u64) {
        self.watch = Watch::Off;
        if self.phase != Phase::Running || self.interrupted {
            return;
        }
        let Some(current) = self.current.clone() else {
            return;
        };
        let error = self
            .last_assistant
            .as_ref()
            .and_then(|m| m.error_message.clone())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| error_message.to_string());
        let verdict = classify(&Observation {
            error_message: &error,
            stop_reason: "error",
            watchdog: false,
            user_abort: false,
        });
        self.judged_seq = self.last_seq;
        let plan = self.judge(now, &current, verdict, &error);
        match plan {
            Plan::Exhaust(_) if self.round_expired(now) => {
                self.plan = Some(Plan::Exhaust(self.round_expired_reason()));
                self.phase = Phase::Settling;
                self.send(Command::AbortRetry, Tag::AbortRetry);
            }
            Plan::Exhaust(_) => {
                // Nowhere else to go: let Pi's own retry try the same model again.
                self.progress_line(
                    format!(
                        "no other candidate; Pi retries {} in {} ms",
                        current.key(),
                        delay_ms
                    ),
                    false,
                );
                self.plan = None;
            }
            Plan::RetrySame if self.tools_since_prompt => {
                // Pi's own retry re-sends the exact conversation, tool results included; ours
                // would have to add a continuation prompt. Worth its short backoff.
                self.progress_line(
                    format!(
                        "retry {} once (server error; Pi's own retry)",
                        current.key()
                    ),
                    false,
                );
                self.plan = None;
            }
            plan => {
                // Switch (or retry) now instead of sitting through Pi's backoff. The command
                // goes out before the failure is persisted: Pi's backoff is short.
                self.plan = Some(plan);
                self.phase = Phase::Settling;
                self.send(Command::AbortRetry, Tag::AbortRetry);
                if let Some(send) = self.actions.pop_back() {
                    self.actions.push_front(send);
                }
            }
        }
    }

    fn on_settled(&mut self, now: Now) {
        self.watch = Watch::Off;
        self.aborting = None;
        self.tools_running = 0;
        if self.interrupted {
            return self.finish(Outcome::Aborted);
        }
        if !matches!(self.phase, Phase::Running | Phase::Settling) {
            return;
        }
        let Some(current) = self.current.clone() else {
            return self.finish(Outcome::Fatal("Pi settled without a model".to_string()));
        };
        let message = self.last_assistant.clone().unwrap_or_default();
        let stop = message.stop_reason.clone().unwrap_or_default();
        let text = message.text();
        let fresh = self.last_seq > self.judged_seq;
        if fresh && matches!(stop.as_str(), "stop" | "length") && !text.trim().is_empty() {
            return self.succeed(now, current, text.trim().to_string());
        }
        let plan = match self.plan.take() {
            Some(plan) if !fresh => plan,
            _ => {
                self.judged_seq = self.last_seq;
                let (verdict, error) = if self.watchdog_fired {
                    self.watchdog_fired = false;
                    let error = "watchdog: the model stopped responding".to_string();
                    let v = classify(&Observation {
                        error_message: &error,
                        stop_reason: "aborted",
                        watchdog: true,
                        user_abort: false,
                    });
                    (v, error)
                } else if matches!(stop.as_str(), "stop" | "length") {
                    let v = Classification {
                        class: FailureClass::Unknown,
                        scope: Scope::Model,
                        status: None,
                        matched: "empty answer".to_string(),
                    };
                    (v, "the model returned an empty answer".to_string())
                } else {
                    let error = message
                        .error_message
                        .clone()
                        .filter(|e| !e.is_empty())
                        .unwrap_or_else(|| {
                            if stop.is_empty() {
                                "the run ended without an assistant message".to_string()
                            } else {
                                format!("the run ended with stopReason {stop}")
                            }
                        });
                    let v = classify(&Observation {
                        error_message: &error,
                        stop_reason: &stop,
                        watchdog: false,
                        user_abort: false,
                    });
                    (v, error)
                };
                self.judge(now, &current, verdict, &error)
            }
        };
        self.execute(now, plan);
    }

    /// Records a failure and decides what comes next. Pure decision plus health deltas.
    fn judge(
        &mut self,
        now: Now,
        current: &ModelInfo,
        verdict: Classification,
        error: &str,
    ) -> Plan {
        let class = verdict.class;
        let reason = class.as_str().to_string();
        self.record_failure(now, current, verdict.clone(), error);
        if class == FailureClass::UserAbort {
            return Plan::Exhaust("interrupted".to_string());
        }
        if self.round_expired(now) {
            return Plan::Exhaust(self.round_expired_reason());
        }
        // A one-off 5xx gets one immediate retry on the same model.
        let is_5xx = class == FailureClass::Endpoint
            && verdict.status.is_some_and(|s| (500..600).contains(&s));
        if is_5xx && self.retried_same.insert(current.key()) {
            self.tried.remove(&current.key());
            return Plan::RetrySame;
        }
        match self.best_candidate(now, current) {
            Some(next) => Plan::Switch(next, reason),
            None => Plan::Exhaust("no healthy candidate left".to_string()),
        }
    }

    fn execute(&mut self, now: Now, plan: Plan) {
        let mode = self.redispatch_mode(true);
        self.execute_with(now, plan, mode);
    }

    /// How the next attempt reaches the model. Tools finished since the last prompt: keep
    /// their results and continue. Otherwise the last prompt is sent again — after a fork at
    /// it when the failed attempt is in the session (`fork_away`), so nothing is duplicated.
    fn redispatch_mode(&self, fork_away: bool) -> Redispatch {
        if self.tools_since_prompt {
            Redispatch::Continue
        } else if fork_away {
            Redispatch::Fork
        } else {
            Redispatch::Initial
        }
    }

    fn execute_with(&mut self, now: Now, plan: Plan, mode: Redispatch) {
        match plan {
            Plan::RetrySame => {
                let key = self
                    .current
                    .as_ref()
                    .map(ModelInfo::key)
                    .unwrap_or_default();
                self.progress_line(format!("retry {key} once (server error)"), false);
                self.start_redispatch(mode, None);
            }
            Plan::Switch(model, reason) => self.go_to(now, model, mode, &reason),
            Plan::Exhaust(reason) if self.last_was_empty_answer() => {
                let _ = reason;
                self.finish(Outcome::EmptyAnswer);
            }
            Plan::Exhaust(reason) => {
                let last_error = self.last_error.clone();
                self.finish(Outcome::Exhausted { reason, last_error });
            }
        }
    }

    fn last_was_empty_answer(&self) -> bool {
        self.attempts
            .last()
            .and_then(|a| a.failure.as_ref())
            .is_some_and(|f| f.matched == "empty answer")
    }

    fn round_expired(&self, now: Now) -> bool {
        self.round_start
            .is_some_and(|t| now.instant.saturating_duration_since(t) >= self.cfg.round_limit)
    }

    fn round_expired_reason(&self) -> String {
        format!(
            "the failover round window of {} ms ran out",
            self.cfg.round_limit.as_millis()
        )
    }

    fn record_failure(
        &mut self,
        now: Now,
        model: &ModelInfo,
        verdict: Classification,
        error: &str,
    ) {
        let keys = Keys::of(model);
        self.tried.insert(keys.model.clone());
        let duration_ms = self
            .attempt_started
            .map(|t| {
                u64::try_from(now.instant.saturating_duration_since(t).as_millis())
                    .unwrap_or(u64::MAX)
            })
            .unwrap_or(0);
        // Printed and stored error text is redacted and cut to a few hundred characters.
        let error = crate::redact::redact_capped(error, 300);
        let error = error.as_str();
        self.progress_line(
            format!(
                "fail {} ({}, {} scope, matched {:?}): {}",
                keys.model,
                verdict.class,
                verdict.scope.as_str(),
                verdict.matched,
                error
            ),
            true,
        );
        let class = verdict.class;
        let scope = verdict.scope;
        self.attempt_open = false;
        self.attempts.push(Attempt {
            model: keys.model.clone(),
            failure: Some(verdict),
            error: Some(error.to_string()),
            duration_ms,
        });
        self.last_error = Some(format!(
            "{}: {}",
            keys.model,
            crate::redact::redact_capped(error, 300)
        ));
        match class {
            FailureClass::UserAbort => return,
            FailureClass::ContextOverflow => {
                let window = model.context_window_or_zero();
                self.larger_context_than =
                    Some(self.larger_context_than.map_or(window, |w| w.max(window)));
                return;
            }
            FailureClass::ContentPolicy => {
                self.avoided_families.insert(candidates::family(model));
            }
            FailureClass::Endpoint => {
                let n = self
                    .endpoint_failures
                    .entry(keys.endpoint.clone())
                    .or_insert(0);
                *n += 1;
                if *n >= 3 {
                    self.isolated.insert(keys.endpoint.clone());
                }
            }
            _ => {}
        }
        if !self.recorded.insert((keys.model.clone(), class)) {
            return;
        }
        let Some(key) = keys.get(scope).map(str::to_string) else {
            return;
        };
        let delta = Delta::Failure {
            at: now.wall_ms,
            key,
            scope,
            class,
            error: error.to_string(),
        };
        self.record(delta);
    }

    /// Applies a health change locally and asks the driver to persist it.
    fn record(&mut self, delta: Delta) {
        self.health.apply(&delta, self.cfg.cooldown_scale);
        self.record_seq += 1;
        let seq = self.record_seq;
        self.unconfirmed.push_back((seq, delta.clone()));
        self.actions.push_back(Action::Record { seq, delta });
    }

    fn best_candidate(&self, now: Now, current: &ModelInfo) -> Option<ModelInfo> {
        let filter = Filter {
            tried: &self.tried,
            isolated_endpoints: &self.isolated,
            avoided_families: &self.avoided_families,
            needs_images: !self.images.is_empty(),
            larger_context_than: self.larger_context_than,
            health: &self.health,
            now_ms: now.wall_ms,
            own_leases: &self.own_leases,
        };
        candidates::rank(current, &self.pool, &filter)
            .into_iter()
            .next()
    }

    fn choose_and_switch(&mut self, now: Now, mode: Redispatch, reason: &str) {
        let Some(current) = self.current.clone() else {
            return self.finish(Outcome::Fatal("no current model".to_string()));
        };
        match self.best_candidate(now, &current) {
            Some(next) => self.go_to(now, next, mode, reason),
            None => {
                let reason = if mode == Redispatch::Initial
                    && !self.images.is_empty()
                    && self.attempts.is_empty()
                {
                    "no healthy image-capable model available for a request with images".to_string()
                } else {
                    "no healthy candidate left".to_string()
                };
                let last_error = self.last_error.clone();
                self.finish(Outcome::Exhausted { reason, last_error });
            }
        }
    }

    fn switch_to(&mut self, now: Now, next: ModelInfo, mode: Redispatch, reason: &str) {
        let from = self
            .current
            .as_ref()
            .map(ModelInfo::key)
            .unwrap_or_else(|| "?".to_string());
        // Counted, logged and announced once Pi has accepted the model (set_model may fail).
        self.pending_switch = Some(SwitchEntry {
            at: now.wall_ms,
            from,
            to: next.key(),
            reason: reason.to_string(),
        });
        self.start_redispatch(mode, Some(next));
    }

    /// Pi accepted `model`: if that completes a switch, record it.
    fn switch_done(&mut self, now: Now, model: &ModelInfo) {
        let Some(entry) = self.pending_switch.take() else {
            return;
        };
        if entry.to != model.key() {
            return;
        }
        self.progress_line(
            format!("switch {} → {} ({})", entry.from, entry.to, entry.reason),
            false,
        );
        self.switches += 1;
        // Skipping a start model already known to be dead is not news for the shared log
        // (a batch would otherwise write one entry per job).
        if entry.reason != UNHEALTHY {
            self.record(Delta::Switch(entry));
        }
        // The round window restarts at each successful switch.
        if self.round_start.is_some() {
            self.round_start = Some(now.instant);
        }
    }

    fn start_redispatch(&mut self, mode: Redispatch, next: Option<ModelInfo>) {
        self.queue.clear();
        self.phase = Phase::Dispatching;
        self.last_assistant = None;
        self.judged_seq = self.last_seq;
        if mode == Redispatch::Fork {
            self.queue.push_back(Command::GetForkMessages);
        }
        let pending = std::mem::take(&mut self.pending_set);
        // `fork` rebuilds the session from the branch, model and thinking level included, so
        // after a fork the model is always set again (the current one for a same-model retry).
        let next = next.or_else(|| {
            if pending || mode == Redispatch::Fork {
                self.current.clone()
            } else {
                None
            }
        });
        let switching = next.is_some();
        if let Some(model) = next {
            self.queue.push_back(Command::SetModel {
                provider: model.provider.clone(),
                model_id: model.id.clone(),
            });
        }
        if let Some(level) = &self.thinking
            && (switching || !self.thinking_sent)
        {
            self.queue.push_back(Command::SetThinkingLevel {
                level: level.clone(),
            });
            self.thinking_sent = true;
        } else if let Some(level) = &self.thinking_default
            && switching
        {
            self.queue.push_back(Command::SetThinkingLevel {
                level: level.clone(),
            });
        }
        // A continuation is added only after new tool work; otherwise the last prompt is sent
        // again as it was (after a fork, or when it never reached the session).
        if mode == Redispatch::Continue {
            self.continued = true;
        }
        let (message, images) = if self.continued {
            (CONTINUATION_PROMPT.to_string(), Vec::new())
        } else {
            (self.prompt.clone(), self.images.clone())
        };
        self.tools_since_prompt = false;
        self.queue.push_back(Command::Prompt { message, images });
        self.run_queue();
    }

    /// Sends the next queued command; each waits for its response before the next goes.
    fn run_queue(&mut self) {
        let Some(cmd) = self.queue.pop_front() else {
            return;
        };
        let tag = match &cmd {
            Command::GetForkMessages => Tag::ForkMessages,
            Command::Fork { .. } => Tag::Fork,
            Command::SetModel { provider, model_id } => Tag::SetModel(
                self.pool
                    .iter()
                    .find(|m| &m.provider == provider && &m.id == model_id)
                    .cloned()
                    .unwrap_or_else(|| ModelInfo {
                        provider: provider.clone(),
                        id: model_id.clone(),
                        name: None,
                        base_url: None,
                        reasoning: false,
                        input: None,
                        context_window: None,
                    }),
            ),
            Command::Prompt { .. } => Tag::Prompt,
            Command::SetThinkingLevel { .. } => Tag::Thinking,
            _ => Tag::Other,
        };
        self.send(cmd, tag);
    }

    fn succeed(&mut self, now: Now, model: ModelInfo, text: String) {
        self.record(Delta::Success {
            at: now.wall_ms,
            keys: Keys::of(&model),
        });
        let duration_ms = self
            .attempt_started
            .map(|t| {
                u64::try_from(now.instant.saturating_duration_since(t).as_millis())
                    .unwrap_or(u64::MAX)
            })
            .unwrap_or(0);
        self.attempt_open = false;
        self.attempts.push(Attempt {
            model: model.key(),
            failure: None,
            error: None,
            duration_ms,
        });
        self.finish(Outcome::Answer { text, model });
    }

    fn abort(&mut self, now: Now) {
        if self.aborting.is_none() {
            self.aborting = Some(now.instant);
            self.send(Command::Abort, Tag::Abort);
        }
    }

    fn send(&mut self, command: Command, tag: Tag) {
        if tag.awaited() {
            self.waiting += 1;
            if self.response_deadline.is_none() {
                self.response_deadline = self.last_now.map(|t| t + RESPONSE_TIMEOUT);
            }
        }
        let id = self.pending.register(tag);
        self.actions.push_back(Action::Send { id, command });
    }

    fn progress_line(&mut self, line: String, verbose_only: bool) {
        self.actions
            .push_back(Action::Progress { line, verbose_only });
    }

    fn finish(&mut self, outcome: Outcome) {
        if self.phase == Phase::Done {
            return;
        }
        self.phase = Phase::Done;
        self.watch = Watch::Off;
        self.outcome = Some(outcome.clone());
        self.actions.push_back(Action::Finish(outcome));
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
