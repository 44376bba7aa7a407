//! The failover state machine for one run (one prompt). Sans-IO: Pi's events, command
//! responses, timeouts, health and interrupts go in through `handle_*` with the current time;
//! commands to send, health deltas to persist, progress lines and the final outcome come out
//! through `poll_action`, and the next deadline through `poll_deadline`. Nothing here sleeps,
//! spawns, reads a clock or touches a file, so every path can be tested with hand-made times.
//!
//! A run goes: read state and models → check the user's scope, provider and model against Pi's
//! registry (`start.rs`) → switch before sending if the start model is known to be dead or cannot
//! see the request's images → prompt → watch events until `agent_settled` → judge the last
//! assistant message → on failure classify, open the breaker, choose the best candidate and
//! re-dispatch (`judge.rs`, `dispatch.rs`: fork + same prompt when no tool ran, continuation
//! prompt when tools ran) → repeat until an answer, exhaustion, the deadline or an interrupt. When
//! every candidate is cooling down and waiting is allowed, the run waits for the first breaker
//! to reopen and starts a new round.
//!
//! The state is kept in a few named parts, each replaced whole when its lifetime ends: what Pi
//! reported ([`PiView`]), the failover round ([`Round`]), the attempt on the current model
//! ([`AttemptState`]) and the command plumbing ([`Wire`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::classify::{Classification, FailureClass, Observation, classify};
use super::ending::Fatal;
pub use super::state::{Action, Attempt, Config, Note, Options, Outcome};
pub(super) use super::state::{
    AttemptState, DispatchState, Phase, PiView, Plan, Redispatch, Request, Round, SharedView,
    SwitchReason, Tag, Tally, Watch, Wire,
};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::health::Health;
use crate::rpc::pending::Pending;
use crate::rpc::{Command, Disposition, ImageContent, Incoming, Message, Response, State};

/// Sent after a failure when tools already ran: the context keeps the finished tool work.
pub const CONTINUATION_PROMPT: &str = "The previous model failed before finishing. Continue the \
task from the current state. Do not repeat tool calls that already completed; use their results \
above. Then give the final answer.";

/// How long Pi may take to settle after `abort` before the run is declared wedged.
const ABORT_GRACE: Duration = Duration::from_secs(10);
/// How long Pi may take to answer a command (start-up included, normally ~0.5 s).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// While waiting for a breaker to reopen, shared health is re-read at least this often (another
/// process's probe may close it sooner).
pub const WAIT_POLL: Duration = Duration::from_millis(1000);
/// The longest the first request waits for shared health once Pi is ready: a slow store may
/// cost a run this much before its first request, never more (then the run goes on with what
/// this process knows).
pub const HEALTH_GRACE: Duration = Duration::from_millis(250);

pub struct Machine {
    pub(super) cfg: Config,
    pub(super) opts: Options,
    pub(super) pi: PiView,
    pub(super) request: Request,
    pub(super) shared: SharedView,
    pub(super) round: Round,
    pub(super) attempt: AttemptState,
    pub(super) dispatch: DispatchState,
    pub(super) wire: Wire,
    pub(super) tally: Tally,
    pub(super) phase: Phase,
    /// When an abort was sent and Pi has not settled yet.
    pub(super) aborting: Option<Instant>,
    pub(super) plan: Option<Plan>,
    pub(super) interrupted: bool,
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
        let fresh = options.fresh_session;
        let health_pending = options.health_pending;
        let mut m = Machine {
            wire: Wire {
                pending: Pending::with_prefix(&options.id_prefix),
                actions: VecDeque::new(),
                queue: VecDeque::new(),
                waiting: 0,
                response_deadline: None,
                last_now: None,
            },
            cfg,
            opts: options,
            pi: PiView::default(),
            request: Request {
                prompt,
                images,
                avoided_families: BTreeMap::new(),
                larger_context_than: None,
            },
            shared: SharedView {
                health,
                unconfirmed: VecDeque::new(),
                record_seq: 0,
                own_leases: Vec::new(),
                loaded: !health_pending,
                grace_until: None,
            },
            round: Round::default(),
            attempt: AttemptState::default(),
            dispatch: DispatchState::default(),
            tally: Tally::default(),
            phase: Phase::Starting,
            aborting: None,
            plan: None,
            interrupted: false,
        };
        if fresh {
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
        self.wire.actions.pop_front()
    }

    /// The next instant at which `handle_timeout` must be called.
    pub fn poll_deadline(&self) -> Option<Instant> {
        if self.phase == Phase::Done {
            return None;
        }
        let watch = match self.attempt.watch {
            Watch::Off => None,
            Watch::FirstResponse(t) | Watch::Stall(t) => Some(t),
        };
        let abort = self.aborting.map(|t| t + ABORT_GRACE);
        let wait = match self.phase {
            Phase::Waiting { next_check, .. } => Some(next_check),
            _ => None,
        };
        let grace = self.shared.grace_until.filter(|_| !self.shared.loaded);
        [watch, abort, self.wire.response_deadline, wait, grace]
            .into_iter()
            .flatten()
            .min()
    }

    pub fn outcome(&self) -> Option<&Outcome> {
        self.tally.outcome.as_ref()
    }

    pub fn attempts(&self) -> &[Attempt] {
        &self.tally.attempts
    }

    pub fn switches(&self) -> u32 {
        self.tally.switches
    }

    pub fn current(&self) -> Option<&ModelInfo> {
        self.dispatch.current.as_ref()
    }

    /// Waiting for a breaker to reopen (for the live status line).
    pub fn waiting_until(&self) -> Option<Instant> {
        match self.phase {
            Phase::Waiting { until, .. } => Some(until),
            _ => None,
        }
    }

    /// The attempt still under way when the run ended without judging it (interrupt, deadline,
    /// Pi died): its model and how long it ran. `failure` is left for the caller to fill in.
    pub fn open_attempt(&self, now: Now) -> Option<Attempt> {
        if !self.attempt.open {
            return None;
        }
        let model = self.dispatch.current.as_ref()?.key();
        Some(Attempt {
            model,
            failure: None,
            error: None,
            duration_ms: self.attempt_ms(now),
            usage: self.attempt.usage,
        })
    }

    /// The model Pi was on when this run started (before any switch).
    pub fn pi_model(&self) -> Option<&ModelInfo> {
        self.pi.pi_model.as_ref()
    }

    /// The model this run chose to start from (`provider/id`): the next job on the same Pi
    /// starts from it again.
    pub fn start_model(&self) -> Option<&str> {
        self.dispatch.start_key.as_deref()
    }

    /// Every model Pi said it can use (for pruning health records of models it no longer lists).
    pub fn registry(&self) -> &[ModelInfo] {
        &self.pi.registry
    }

    /// Models tried this run, in the order they failed.
    pub fn tried(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.tally
            .attempts
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
        self.shared.health = health;
        while self
            .shared
            .unconfirmed
            .front()
            .is_some_and(|(s, _)| *s <= seq)
        {
            self.shared.unconfirmed.pop_front();
        }
        for (_, delta) in &self.shared.unconfirmed {
            self.shared.health.apply(delta, self.cfg.cooldown_scale);
        }
    }

    /// The store's health for the start of the run (see `Options::health_pending`).
    pub fn handle_health_loaded(&mut self, now: Now, health: Health) {
        self.handle_health(0, health);
        if !self.shared.loaded {
            self.shared.loaded = true;
            self.maybe_start(now);
        }
    }

    /// Shared health re-read while waiting for a breaker to reopen.
    pub fn handle_health_reloaded(&mut self, now: Now, health: Health) {
        self.handle_health(0, health);
        if matches!(self.phase, Phase::Waiting { .. }) {
            self.wake(now);
        }
    }

    pub fn handle_incoming(&mut self, now: Now, msg: Incoming) {
        self.wire.last_now = Some(now.instant);
        if self.phase == Phase::Done {
            return;
        }
        match msg {
            Incoming::Response(r) => self.on_response(now, r),
            Incoming::AgentStart | Incoming::TurnStart
                if self.attempt.tools_running == 0
                    && !self.interrupted
                    && self.aborting.is_none() =>
            {
                // abort_retry only cancels Pi's backoff sleep; a retry already under way runs
                // on, and is watched like any attempt.
                if self.phase == Phase::Settling {
                    self.phase = Phase::Running;
                }
                self.attempt.watch = Watch::FirstResponse(now.instant + self.cfg.first_response);
            }
            Incoming::MessageStart { message } if message.role == "assistant" => {
                self.progress(now);
            }
            Incoming::MessageUpdate {} => self.progress(now),
            Incoming::MessageEnd { message } if message.role == "assistant" => {
                self.dispatch.last_seq += 1;
                if let Some(usage) = &message.usage {
                    self.attempt.usage.add(usage);
                }
                self.attempt.last_assistant = Some(message);
                self.progress(now);
            }
            Incoming::ToolExecutionStart {} => {
                self.attempt.tools_running += 1;
                self.attempt.watch = Watch::Off;
            }
            Incoming::ToolExecutionEnd {} => {
                self.attempt.tools_running = self.attempt.tools_running.saturating_sub(1);
                self.attempt.tools_since_prompt = true;
                if self.attempt.tools_running == 0 {
                    self.progress(now);
                }
            }
            Incoming::CompactionStart {} => self.attempt.watch = Watch::Off,
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
        self.wire.last_now = Some(now.instant);
        if self.wire.waiting > 0 {
            self.wire.response_deadline = Some(now.instant + RESPONSE_TIMEOUT);
        }
    }

    pub fn handle_timeout(&mut self, now: Now) {
        self.wire.last_now = Some(now.instant);
        if !self.shared.loaded && self.shared.grace_until.is_some_and(|t| now.instant >= t) {
            // The store is slow: start with what this process knows rather than fall behind.
            self.shared.loaded = true;
            self.note(
                Note::Detail,
                "shared health did not arrive in time; starting with what this process knows"
                    .to_string(),
            );
            self.maybe_start(now);
        }
        if self
            .wire
            .response_deadline
            .is_some_and(|t| now.instant >= t)
        {
            self.finish(Outcome::Fatal(Fatal::Unresponsive {
                secs: RESPONSE_TIMEOUT.as_secs(),
            }));
            return;
        }
        if let Some(since) = self.aborting
            && now.instant >= since + ABORT_GRACE
        {
            self.finish(Outcome::Fatal(Fatal::AbortIgnored {
                secs: ABORT_GRACE.as_secs(),
            }));
            return;
        }
        if let Phase::Waiting {
            mode,
            until,
            next_check,
        } = self.phase
        {
            if now.instant >= next_check {
                // Checked again once the re-read health arrives.
                self.phase = Phase::Waiting {
                    mode,
                    until,
                    next_check: now.instant + WAIT_POLL,
                };
                self.wire.actions.push_back(Action::ReloadHealth);
            }
            return;
        }
        let expired = match self.attempt.watch {
            Watch::FirstResponse(t) | Watch::Stall(t) => now.instant >= t,
            Watch::Off => false,
        };
        if !expired || !matches!(self.phase, Phase::Running | Phase::Settling) {
            return;
        }
        let (which, ms) = match self.attempt.watch {
            Watch::FirstResponse(_) => ("no first response", self.cfg.first_response),
            _ => ("no stream progress", self.cfg.stall),
        };
        self.attempt.watch = Watch::Off;
        self.attempt.watchdog_fired = true;
        self.note(
            Note::Detail,
            format!("watchdog: {which} for {} ms; aborting", ms.as_millis()),
        );
        self.abort(now);
    }

    /// The deadline passed or a signal arrived: abort Pi's run, never fail over.
    pub fn handle_interrupt(&mut self, now: Now) {
        if self.phase == Phase::Done || self.interrupted {
            return;
        }
        self.interrupted = true;
        self.attempt.watch = Watch::Off;
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
            self.shared.own_leases.push(target);
            // Another of the model's breakers may be half-open too.
            self.go_to(now, model, mode, reason);
        } else {
            self.note(
                Note::Detail,
                format!("skip {}: another run is probing it ({target})", model.key()),
            );
            // Our cached health may not show the other run's lease yet: note it locally (not
            // recorded), so a job out of candidates waits for that probe instead of giving up.
            if let Some(r) = self
                .shared
                .health
                .records_mut(target.scope)
                .and_then(|m| m.get_mut(&target.key))
                && !r.leased(now.wall_ms)
            {
                r.lease_until = Some(
                    now.wall_ms
                        .saturating_add(crate::health::cooldown::PROBE_LEASE_MS),
                );
            }
            self.round.tried.insert(model.key());
            self.choose_and_switch(now, mode, reason);
        }
    }

    // ----- responses ------------------------------------------------------------------------

    fn on_response(&mut self, now: Now, r: Response) {
        let tag = self.wire.pending.resolve(&r);
        if tag.as_ref().is_some_and(Tag::awaited) {
            self.wire.waiting = self.wire.waiting.saturating_sub(1);
            if self.wire.waiting == 0 {
                self.wire.response_deadline = None;
            }
        }
        let Some(tag) = tag else {
            if r.command == "parse" && !r.success {
                self.finish(Outcome::Fatal(Fatal::Unparsed(r.error.unwrap_or_default())));
            }
            return;
        };
        match tag {
            Tag::GetState => {
                self.pi.state_seen = true;
                if let Some(State {
                    model,
                    thinking_level,
                }) = r.state()
                {
                    // With no level asked for, a reasoning start model shows the user's default
                    // level; it is set again after switches, since Pi keeps a level clamped to
                    // "off" by a non-reasoning model in between.
                    if self.opts.thinking.is_none() && model.reasoning {
                        self.pi.thinking_default = thinking_level;
                    }
                    self.pi.pi_model = Some(model.clone());
                    self.dispatch.current = Some(model);
                }
                self.maybe_start(now);
            }
            Tag::Models => {
                if !r.success {
                    return self.finish(Outcome::Fatal(Fatal::ModelsFailed(
                        r.error.unwrap_or_default(),
                    )));
                }
                let mut seen = BTreeSet::new();
                self.pi.registry = r
                    .models()
                    .into_iter()
                    .filter(|m| seen.insert(m.key()))
                    .collect();
                self.pi.models_seen = true;
                self.maybe_start(now);
            }
            Tag::Prompt => {
                if !r.success {
                    return self.on_prompt_rejected(now, &r.error.unwrap_or_default());
                }
                if r.disposition() == Some(Disposition::Handled) {
                    return self.finish(Outcome::Fatal(Fatal::HandledByExtension));
                }
                self.phase = Phase::Running;
                self.attempt.started = Some(now.instant);
                self.attempt.open = true;
                if self.round.started.is_none() {
                    self.round.started = Some(now.instant);
                }
                if !matches!(self.attempt.watch, Watch::Stall(_)) {
                    self.attempt.watch =
                        Watch::FirstResponse(now.instant + self.cfg.first_response);
                }
                self.run_queue();
            }
            Tag::SetModel(model) => {
                if r.success {
                    self.switch_done(now, &model);
                    self.dispatch.current = Some(model);
                    self.run_queue();
                } else {
                    self.dispatch.pending_switch = None;
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
                            scope: super::classify::Scope::Model,
                            status: None,
                            matched: "set_model refused".to_string(),
                        },
                        &error,
                    );
                    // Drop the queued prompt and choose again. Any fork already happened, so
                    // the next candidate only needs set_model + prompt.
                    self.wire.queue.clear();
                    let mode = self.redispatch_mode(false);
                    self.choose_and_switch(now, mode, SwitchReason::Failure(FailureClass::Model));
                }
            }
            Tag::ForkMessages => {
                let last = r.fork_messages().pop();
                match last {
                    Some(entry) if r.success => {
                        self.wire.queue.push_front(Command::Fork {
                            entry_id: entry.entry_id,
                        });
                        self.run_queue();
                    }
                    _ => self.finish(Outcome::Fatal(Fatal::NoForkMessage)),
                }
            }
            Tag::Fork => {
                if r.success && !r.cancelled() {
                    self.run_queue();
                } else {
                    self.finish(Outcome::Fatal(Fatal::ForkFailed(
                        r.error.unwrap_or_else(|| "cancelled".to_string()),
                    )));
                }
            }
            Tag::NewSession => {
                if !r.success || r.cancelled() {
                    return self.finish(Outcome::Fatal(Fatal::NewSessionFailed(
                        r.error.unwrap_or_else(|| "cancelled".to_string()),
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
    fn on_prompt_rejected(&mut self, now: Now, refusal: &str) {
        let error = Fatal::PromptRejected(refusal.to_string()).to_string();
        let verdict = classify(&Observation {
            error_message: &error,
            stop_reason: "error",
            watchdog: false,
            user_abort: false,
        });
        match self.dispatch.current.clone() {
            Some(current) if verdict.class == FailureClass::Auth && !self.interrupted => {
                let plan = self.judge(now, &current, verdict, &error);
                // Nothing reached the session, so there is nothing to fork away from.
                let mode = self.redispatch_mode(false);
                self.execute_with(now, plan, mode);
            }
            _ => self.finish(Outcome::Fatal(Fatal::PromptRejected(refusal.to_string()))),
        }
    }

    // ----- the run --------------------------------------------------------------------------

    fn progress(&mut self, now: Now) {
        if self.attempt.tools_running == 0 && !self.interrupted && self.aborting.is_none() {
            self.attempt.watch = Watch::Stall(now.instant + self.cfg.stall);
        }
    }

    fn on_auto_retry(&mut self, now: Now, error_message: &str, delay_ms: u64) {
        self.attempt.watch = Watch::Off;
        if self.phase != Phase::Running || self.interrupted {
            return;
        }
        let Some(current) = self.dispatch.current.clone() else {
            return;
        };
        let error = self
            .attempt
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
        self.dispatch.judged_seq = self.dispatch.last_seq;
        let plan = self.judge(now, &current, verdict, &error);
        match plan {
            Plan::Exhaust(_) if self.round_expired(now) => {
                self.plan = Some(Plan::Exhaust(self.round_expired_reason()));
                self.phase = Phase::Settling;
                self.send(Command::AbortRetry, Tag::AbortRetry);
            }
            Plan::Exhaust(_) => {
                // Nowhere else to go: let Pi's own retry try the same model again.
                self.note(
                    Note::Retry,
                    format!(
                        "no other candidate; Pi retries {} in {} ms",
                        current.key(),
                        delay_ms
                    ),
                );
                self.plan = None;
            }
            Plan::RetrySame if self.attempt.tools_since_prompt => {
                // Pi's own retry re-sends the exact conversation, tool results included; ours
                // would have to add a continuation prompt. Worth its short backoff.
                self.note(
                    Note::Retry,
                    format!(
                        "retry {} once (server error; Pi's own retry)",
                        current.key()
                    ),
                );
                self.plan = None;
            }
            plan => {
                // Switch (or retry) now instead of sitting through Pi's backoff. The command
                // goes out before the failure is persisted: Pi's backoff is short.
                self.plan = Some(plan);
                self.phase = Phase::Settling;
                self.send(Command::AbortRetry, Tag::AbortRetry);
                if let Some(send) = self.wire.actions.pop_back() {
                    self.wire.actions.push_front(send);
                }
            }
        }
    }

    fn on_settled(&mut self, now: Now) {
        self.attempt.watch = Watch::Off;
        self.aborting = None;
        self.attempt.tools_running = 0;
        if self.interrupted {
            return self.finish(Outcome::Aborted);
        }
        if !matches!(self.phase, Phase::Running | Phase::Settling) {
            return;
        }
        let Some(current) = self.dispatch.current.clone() else {
            return self.finish(Outcome::Fatal(Fatal::NoModel));
        };
        let message = self.attempt.last_assistant.clone().unwrap_or_default();
        let stop = message.stop_reason.clone().unwrap_or_default();
        let text = message.text();
        let fresh = self.dispatch.last_seq > self.dispatch.judged_seq;
        if fresh && matches!(stop.as_str(), "stop" | "length") && !text.trim().is_empty() {
            return self.succeed(now, current, text.trim().to_string());
        }
        let plan = match self.plan.take() {
            Some(plan) if !fresh => plan,
            _ => {
                self.dispatch.judged_seq = self.dispatch.last_seq;
                let (verdict, error) = self.verdict_on(&message, &stop);
                self.judge(now, &current, verdict, &error)
            }
        };
        self.execute(now, plan);
    }

    /// The classification of a settled attempt that did not answer.
    fn verdict_on(&mut self, message: &Message, stop: &str) -> (Classification, String) {
        if self.attempt.watchdog_fired {
            self.attempt.watchdog_fired = false;
            let error = "watchdog: the model stopped responding".to_string();
            let v = classify(&Observation {
                error_message: &error,
                stop_reason: "aborted",
                watchdog: true,
                user_abort: false,
            });
            return (v, error);
        }
        if matches!(stop, "stop" | "length") {
            self.attempt.empty_answer = true;
            let v = Classification {
                class: FailureClass::Unknown,
                scope: super::classify::Scope::Model,
                status: None,
                matched: "empty answer".to_string(),
            };
            return (v, "the model returned an empty answer".to_string());
        }
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
            stop_reason: stop,
            watchdog: false,
            user_abort: false,
        });
        (v, error)
    }

    pub(super) fn attempt_ms(&self, now: Now) -> u64 {
        self.attempt.started.map_or(0, |t| {
            u64::try_from(now.instant.saturating_duration_since(t).as_millis()).unwrap_or(u64::MAX)
        })
    }

    pub(super) fn abort(&mut self, now: Now) {
        if self.aborting.is_none() {
            self.aborting = Some(now.instant);
            self.send(Command::Abort, Tag::Abort);
        }
    }

    pub(super) fn send(&mut self, command: Command, tag: Tag) {
        if tag.awaited() {
            self.wire.waiting += 1;
            if self.wire.response_deadline.is_none() {
                self.wire.response_deadline = self.wire.last_now.map(|t| t + RESPONSE_TIMEOUT);
            }
        }
        let id = self.wire.pending.register(tag);
        self.wire.actions.push_back(Action::Send { id, command });
    }

    pub(super) fn note(&mut self, note: Note, line: String) {
        self.wire.actions.push_back(Action::Progress { line, note });
    }

    pub(super) fn finish(&mut self, outcome: Outcome) {
        if self.phase == Phase::Done {
            return;
        }
        self.phase = Phase::Done;
        self.attempt.watch = Watch::Off;
        self.tally.outcome = Some(outcome.clone());
        self.wire.actions.push_back(Action::Finish(outcome));
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
