//! The failover state machine for one run (one prompt). Sans-IO, in the manner of quinn-proto's
//! `Connection`: everything that happens to the run goes in as one [`Input`] with the time it
//! happened; commands to send, health and capacity to store, costs to enter, progress lines
//! and the final outcome come out as [`Action`]s, and the next instant it must be woken at as
//! [`Machine::poll_deadline`]. Nothing here sleeps, spawns, reads a clock or touches a file, so
//! every path can be tested with hand-made times.
//!
//! ```text
//!   Input ──► Machine::handle(now, input) ──► poll_action() ──► Action
//!     Pi(event or response)                                    Send { id, command }
//!     HealthLoaded / HealthStored / HealthReloaded             Record { seq, delta }
//!     ProbeClaimed { granted }                                 ClaimProbe { target }
//!     Capacity { id, reply } / SlotFreed                       ReloadHealth
//!     Spend(process spend)                                     Capacity { id, op, reply }
//!     Stop / Abandon                                           Spent { provider, cost }
//!     Timeout  ◄── poll_deadline()                             Progress { line, note }
//!                                                              Finish(Outcome)
//! ```
//!
//! The driver (`driver::Session::run`) is the loop around it:
//!
//! ```text
//!   loop {
//!       machine.handle(now, input);                   // one input
//!       while let Some(a) = machine.poll_action() {   // carry out every action
//!           ...                                        // Finish ends the loop
//!       }
//!       input = select(stop, deadline, shared answers, poll_deadline(), Pi);
//!       now = clock::now();                            // read once per wake-up
//!   }
//! ```
//!
//! A new feature is one more `Input` variant (what happened) and one more arm in
//! [`Machine::handle`], plus an `Action` when the world must do something new; never another
//! method the driver calls, nor a side channel around the machine. What the process shares
//! (health, capacity slots, the spend ledger) answers on the one channel the driver reads,
//! already as `Input`s; a new shared fact (say, a provider's learned pace) is one more variant
//! there too. A deadline of its own (a per-provider watchdog, a wait bound) is a [`Timer`] in
//! the [`TimerTable`], set with `now` and expiring as `Input::Timeout`.
//!
//! A run goes: read state and models → check the user's scope, provider and model against Pi's
//! registry (`start.rs`) → switch before sending if the start model is known to be dead or cannot
//! see the request's images → prompt → watch events until `agent_settled` → judge the last
//! assistant message → on failure classify, open the breaker, choose the best candidate and
//! re-dispatch (`judge.rs`, `dispatch.rs`: fork + same prompt when no tool ran, continuation
//! prompt when tools ran) → repeat until an answer, exhaustion, the deadline or an interrupt. With
//! a schema in force a complete answer is checked first (`conform.rs`: `Action::CheckAnswer` out,
//! `Input::AnswerChecked` in; a second ask, then failover). When
//! every candidate is cooling down and waiting is allowed, the run waits for the first breaker
//! to reopen and starts a new round.
//!
//! The state is kept in a few named parts, each in its own module with private fields and the
//! methods that keep its invariants: what Pi reported ([`PiView`]), the request and what was
//! learned about it ([`Request`]), the shared health ([`SharedView`]), the failover round
//! ([`Round`]), the attempt on the current model ([`AttemptState`]), the model in use
//! ([`DispatchState`]), the command plumbing ([`Wire`]), the result ([`Tally`]) and every
//! deadline ([`TimerTable`]). The round and the attempt are replaced whole when their lifetime
//! ends. The behaviour is in `start.rs` (the start), `dispatch.rs` (reaching a model) and
//! `judge.rs` (after a failure), all `impl Machine`.

use std::time::Duration;

use super::classify::{Classification, FailureClass, Observation, classify};
use super::ending::Fatal;
pub use super::state::{
    Action, Attempt, CapacityOptions, Config, Input, Note, Options, Outcome, Rejected,
};
use super::state::{Phase, Plan, Redispatch, SwitchReason, Tag};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::health::Health;
use crate::rpc::{Command, Disposition, ImageContent, Incoming, Message, Response};

mod attempt;
mod budget;
mod budget_view;
mod capacity;
mod conform;
mod dispatch;
mod dispatch_state;
mod judge;
mod pacing;
mod pi_view;
mod request;
mod round;
mod schema_tries;
mod shared_view;
mod slot;
mod start;
mod tally;
mod timers;
mod waits;
mod watch;
mod wire;

use attempt::AttemptState;
use budget_view::BudgetView;
use dispatch_state::DispatchState;
use pi_view::PiView;
use request::Request;
use round::Round;
use schema_tries::SchemaTries;
use shared_view::SharedView;
use slot::SlotState;
use tally::Tally;
use timers::{Timer, TimerTable};
pub use wire::RESPONSE_TIMEOUT;
use wire::Wire;

/// Sent after a failure when tools already ran: the context keeps the finished tool work.
pub const CONTINUATION_PROMPT: &str = "The previous model failed before finishing. Continue the \
task from the current state. Do not repeat tool calls that already completed; use their results \
above. Then give the final answer.";

/// How long Pi may take to settle after `abort` before the run is declared wedged.
const ABORT_GRACE: Duration = Duration::from_secs(10);
/// While waiting for a breaker to reopen, shared health is re-read at least this often (another
/// process's probe may close it sooner).
pub const WAIT_POLL: Duration = Duration::from_millis(1000);
/// The longest the first request waits for shared health once Pi is ready: a slow store may
/// cost a run this much before its first request, never more (then the run goes on with what
/// this process knows).
pub const HEALTH_GRACE: Duration = Duration::from_millis(250);

pub struct Machine {
    cfg: Config,
    opts: Options,
    pi: PiView,
    request: Request,
    shared: SharedView,
    round: Round,
    attempt: AttemptState,
    dispatch: DispatchState,
    wire: Wire,
    tally: Tally,
    slot: SlotState,
    budget: BudgetView,
    timers: TimerTable,
    conform: SchemaTries,
    phase: Phase,
    /// The decision taken on Pi's auto-retry, carried out once Pi settles.
    plan: Option<Plan>,
    interrupted: bool,
    /// How long the run has waited, and for what (see `waits.rs`).
    waited: crate::failover::waiting::Waited,
    /// The running attempt's watchdogs and what it measured of its pace (`watch.rs`).
    pacing: Option<pacing::Pacing>,
    /// What cut the attempt being judged, when a watchdog did.
    cut: Option<pacing::Cut>,
}

impl Machine {
    /// A run that starts at `now`: its first commands are out at once.
    pub fn new(
        now: Now,
        cfg: Config,
        health: Health,
        prompt: String,
        images: Vec<ImageContent>,
    ) -> Machine {
        Machine::with_options(now, cfg, health, prompt, images, Options::default())
    }

    pub fn with_options(
        now: Now,
        cfg: Config,
        health: Health,
        prompt: String,
        images: Vec<ImageContent>,
        options: Options,
    ) -> Machine {
        let fresh = options.fresh_session;
        let loaded = !options.health_pending;
        let slot = SlotState::new(if options.explain {
            None
        } else {
            options.capacity.clone()
        });
        let mut m = Machine {
            wire: Wire::new(&options.id_prefix),
            shared: SharedView::new(health, loaded, cfg.cooldown_scale),
            budget: BudgetView::new(cfg.budget.clone()),
            cfg,
            opts: options,
            pi: PiView::default(),
            request: Request::new(prompt, images),
            round: Round::default(),
            attempt: AttemptState::default(),
            dispatch: DispatchState::default(),
            tally: Tally::default(),
            slot,
            timers: TimerTable::default(),
            conform: SchemaTries::default(),
            phase: Phase::Starting,
            plan: None,
            interrupted: false,
            waited: Default::default(),
            pacing: None,
            cut: None,
        };
        if fresh {
            // Pi switches sessions asynchronously: a command sent before this answer would
            // still reach the old session.
            m.send(now, Command::NewSession, Tag::NewSession);
        } else {
            m.send(now, Command::GetState, Tag::GetState);
            m.send(now, Command::GetAvailableModels, Tag::Models);
        }
        m
    }

    // ----- outputs --------------------------------------------------------------------------

    pub fn poll_action(&mut self) -> Option<Action> {
        self.wire.poll_action()
    }

    /// The next instant at which `handle_timeout` must be called.
    pub fn poll_deadline(&self) -> Option<std::time::Instant> {
        if self.phase == Phase::Done {
            return None;
        }
        self.timers.next_timeout()
    }

    pub fn outcome(&self) -> Option<&Outcome> {
        self.tally.outcome()
    }

    pub fn attempts(&self) -> &[Attempt] {
        self.tally.attempts()
    }

    pub fn switches(&self) -> u32 {
        self.tally.switches()
    }

    pub fn current(&self) -> Option<&ModelInfo> {
        self.dispatch.current()
    }

    /// Waiting for a breaker to reopen (for the live status line).
    pub fn waiting_until(&self) -> Option<std::time::Instant> {
        match self.phase {
            Phase::Waiting { until, .. } => Some(until),
            _ => None,
        }
    }

    /// The attempt still under way when the run ended without judging it (interrupt, deadline,
    /// Pi died): its model and how long it ran. `failure` is left for the caller to fill in.
    pub fn open_attempt(&self, now: Now) -> Option<Attempt> {
        if !self.attempt.is_open() {
            return None;
        }
        let model = self.dispatch.current()?.key();
        Some(Attempt {
            model,
            failure: None,
            error: None,
            duration_ms: self.attempt.ms(now.instant),
            usage: self.attempt.usage(),
            capacity_signal: false,
            partial: None,
            silent_ms: self.silent_for(now),
            rejected: None,
        })
    }

    /// The model Pi was on when this run started (before any switch).
    pub fn pi_model(&self) -> Option<&ModelInfo> {
        self.pi.pi_model()
    }

    /// The model this run chose to start from (`provider/id`): the next job on the same Pi
    /// starts from it again.
    pub fn start_model(&self) -> Option<&str> {
        self.dispatch.start_key()
    }

    /// Every model Pi said it can use (for pruning health records of models it no longer lists).
    pub fn registry(&self) -> &[ModelInfo] {
        self.pi.registry()
    }

    /// Models tried this run, in the order they failed.
    pub fn tried(&self) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        self.tally
            .attempts()
            .iter()
            .filter(|a| a.failure.is_some() && seen.insert(a.model.clone()))
            .map(|a| a.model.to_string())
            .collect()
    }

    /// This run's view of shared health.
    pub fn health(&self) -> &Health {
        self.shared.health()
    }

    // ----- inputs ---------------------------------------------------------------------------

    /// The machine's one way in: `input` happened at `now`. What to do about it comes out
    /// through [`Machine::poll_action`], the next instant to be woken at through
    /// [`Machine::poll_deadline`].
    pub fn handle(&mut self, now: Now, input: Input) {
        match input {
            Input::Pi(msg) => self.on_incoming(now, msg),
            Input::HealthLoaded(health) => self.on_health_loaded(now, health),
            Input::HealthStored { seq, health } => {
                self.shared.merge(seq, health);
                self.rejudge(now);
            }
            Input::HealthReloaded(health) => self.on_health_reloaded(now, health),
            Input::ProbeClaimed { granted } => self.on_probe_claimed(now, granted),
            Input::Capacity { id, reply } => self.on_capacity(now, id, reply),
            Input::SlotFreed => self.on_slot_freed(now),
            Input::Spend(spend) => self.on_spend(now, spend),
            Input::Stop => self.on_stop(now),
            Input::Abandon => self.give_back_slot(now, slot::Ending::Released),
            Input::Timeout => self.on_timeout(now),
            Input::AnswerChecked(verdict) => self.on_answer_checked(now, verdict),
        }
        self.track_wait(now);
    }

    /// The store's health for the start of the run (see `Options::health_pending`).
    fn on_health_loaded(&mut self, now: Now, health: Health) {
        self.shared.merge(0, health);
        self.rejudge(now);
        if self.shared.mark_loaded() {
            self.timers.stop(Timer::HealthGrace);
            self.maybe_start(now);
        }
    }

    /// Shared health re-read while waiting for a breaker to reopen.
    fn on_health_reloaded(&mut self, now: Now, health: Health) {
        self.shared.merge(0, health);
        self.rejudge(now);
        if matches!(self.phase, Phase::Waiting { .. }) {
            self.wake(now);
        }
    }

    fn on_incoming(&mut self, now: Now, msg: Incoming) {
        if self.phase == Phase::Done {
            return;
        }
        match msg {
            Incoming::Response(r) => self.on_response(now, r),
            Incoming::AgentStart | Incoming::TurnStart
                if self.attempt.tools_idle() && !self.interrupted && !self.aborting() =>
            {
                // abort_retry only cancels Pi's backoff sleep; a retry already under way runs
                // on, and is watched like any attempt.
                if self.phase == Phase::Settling {
                    self.phase = Phase::Running;
                }
                self.awaiting(now);
            }
            // The assistant's `message_start` comes with the headers, not a response: only a
            // stream event is (a provider that sends headers and then nothing is silent).
            Incoming::MessageUpdate {} => self.progress(now),
            Incoming::MessageEnd { message } if message.role == "assistant" => {
                self.dispatch.assistant_seen();
                self.price(&message);
                self.attempt.assistant_ended(message);
                self.progress(now);
            }
            Incoming::ToolExecutionStart {} => {
                self.attempt.tool_started();
                self.pause_watch();
            }
            Incoming::ToolExecutionEnd {} => {
                let idle = self.attempt.tool_ended();
                if idle {
                    self.progress(now);
                }
            }
            Incoming::CompactionStart {} => self.pause_watch(),
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
                        now,
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

    fn on_timeout(&mut self, now: Now) {
        if self.timers.expired(Timer::HealthGrace, now.instant) {
            // The store is slow: start with what this process knows rather than fall behind.
            self.timers.stop(Timer::HealthGrace);
            self.shared.mark_loaded();
            self.note(
                Note::Detail,
                "shared health did not arrive in time; starting with what this process knows"
                    .to_string(),
            );
            self.maybe_start(now);
        }
        if self.timers.expired(Timer::Response, now.instant) {
            self.finish(
                now,
                Outcome::Fatal(Fatal::Unresponsive {
                    secs: RESPONSE_TIMEOUT.as_secs(),
                }),
            );
            return;
        }
        if self.timers.expired(Timer::Abort, now.instant) {
            self.finish(
                now,
                Outcome::Fatal(Fatal::AbortIgnored {
                    secs: ABORT_GRACE.as_secs(),
                }),
            );
            return;
        }
        if self.timers.expired(Timer::SlotRenew, now.instant) {
            self.renew_slot(now);
        }
        if self.timers.expired(Timer::SlotCheck, now.instant) {
            self.timers.stop(Timer::SlotCheck);
            self.slot_check(now);
        }
        if self.timers.expired(Timer::SlotGrace, now.instant) {
            self.admission_overdue(now);
        }
        if self.timers.expired(Timer::WaitBound, now.instant) {
            return self.wait_bound_reached(now);
        }
        if self.timers.expired(Timer::PaceCheck, now.instant) {
            self.check_pace(now);
        }
        if matches!(self.phase, Phase::Waiting { .. }) {
            if self.timers.expired(Timer::WaitCheck, now.instant) {
                // Checked again once the re-read health arrives.
                self.timers.set(Timer::WaitCheck, now.instant + WAIT_POLL);
                self.wire.push(Action::ReloadHealth);
            }
            return;
        }
        let Some((_, at)) = self.timers.watchdog() else {
            return;
        };
        if now.instant < at || !matches!(self.phase, Phase::Running | Phase::Settling) {
            return;
        }
        self.watchdog_fired(now);
    }

    /// The deadline passed or a signal arrived: abort Pi's run, never fail over.
    fn on_stop(&mut self, now: Now) {
        if self.phase == Phase::Done || self.interrupted {
            return;
        }
        self.interrupted = true;
        self.stop_watch();
        match self.phase {
            Phase::Running | Phase::Settling => self.abort(now),
            _ => self.finish(now, Outcome::Aborted),
        }
    }

    fn on_probe_claimed(&mut self, now: Now, granted: bool) {
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
            self.shared.hold_lease(target);
            // A breaker's probe is one request: a failure reopens the breaker, no retry.
            self.round.probing(&model.key());
            // Another of the model's breakers may be half-open too.
            self.go_to(now, model, mode, reason);
        } else {
            self.note(
                Note::Detail,
                format!("skip {}: another run is probing it ({target})", model.key()),
            );
            // Our cached health may not show the other run's lease yet.
            self.shared.note_foreign_lease(&target, now.wall_ms);
            if self.is_primary(&model) && self.wait_for_primary(now, mode) {
                return;
            }
            self.round.mark_tried(model.key());
            self.choose_and_switch(now, mode, reason);
        }
    }

    // ----- responses ------------------------------------------------------------------------

    fn on_response(&mut self, now: Now, r: Response) {
        let Some(tag) = self.wire.resolve(&mut self.timers, &r) else {
            if r.command == "parse" && !r.success {
                self.finish(
                    now,
                    Outcome::Fatal(Fatal::Unparsed(r.error.unwrap_or_default())),
                );
            }
            return;
        };
        match tag {
            Tag::GetState => {
                let keep_level = self.opts.thinking.is_none();
                if let Some(model) = self.pi.on_state(r.state(), keep_level) {
                    self.dispatch.set_current(model);
                }
                self.maybe_start(now);
            }
            Tag::Models => {
                if !r.success {
                    return self.finish(
                        now,
                        Outcome::Fatal(Fatal::ModelsFailed(r.error.unwrap_or_default())),
                    );
                }
                self.pi.on_models(r.models());
                self.maybe_start(now);
            }
            Tag::Prompt => {
                if !r.success {
                    return self.on_prompt_rejected(now, &r.error.unwrap_or_default());
                }
                if r.disposition() == Some(Disposition::Handled) {
                    return self.finish(now, Outcome::Fatal(Fatal::HandledByExtension));
                }
                self.phase = Phase::Running;
                self.attempt.opened(now.instant);
                self.round.prompted(now.instant);
                self.start_pacing(now);
                self.run_queue(now);
            }
            Tag::SetModel(model) => {
                if r.success {
                    self.switch_done(now, &model);
                    self.dispatch.set_current(model);
                    self.run_queue(now);
                } else {
                    self.dispatch.switch_refused();
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
                            stated: None,
                        },
                        &error,
                    );
                    // Drop the queued prompt and choose again. Any fork already happened, so
                    // the next candidate only needs set_model + prompt.
                    self.wire.clear_queue();
                    let mode = self.redispatch_mode(false);
                    self.choose_and_switch(now, mode, SwitchReason::Failure(FailureClass::Model));
                }
            }
            Tag::ForkMessages => match self.conform.fork_target(r.fork_messages()) {
                Some(entry) if r.success => {
                    self.wire.queue_first(Command::Fork {
                        entry_id: entry.entry_id,
                    });
                    self.run_queue(now);
                }
                _ => self.finish(now, Outcome::Fatal(Fatal::NoForkMessage)),
            },
            Tag::Fork => {
                if r.success && !r.cancelled() {
                    self.run_queue(now);
                } else {
                    self.finish(
                        now,
                        Outcome::Fatal(Fatal::ForkFailed(
                            r.error.unwrap_or_else(|| "cancelled".to_string()),
                        )),
                    );
                }
            }
            Tag::NewSession => {
                if !r.success || r.cancelled() {
                    return self.finish(
                        now,
                        Outcome::Fatal(Fatal::NewSessionFailed(
                            r.error.unwrap_or_else(|| "cancelled".to_string()),
                        )),
                    );
                }
                self.send(now, Command::GetState, Tag::GetState);
                self.send(now, Command::GetAvailableModels, Tag::Models);
            }
            // A level the model cannot take is Pi's to clamp; the run goes on either way.
            Tag::Thinking => self.run_queue(now),
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
            now_ms: now.wall_ms,
        });
        match self.dispatch.current().cloned() {
            Some(current) if verdict.class == FailureClass::Auth && !self.interrupted => {
                let plan = self.judge(now, &current, verdict, &error);
                // Nothing reached the session, so there is nothing to fork away from.
                let mode = self.redispatch_mode(false);
                self.execute_with(now, plan, mode);
            }
            _ => self.finish(
                now,
                Outcome::Fatal(Fatal::PromptRejected(refusal.to_string())),
            ),
        }
    }

    // ----- the run --------------------------------------------------------------------------

    /// Our abort is out and Pi has not settled yet.
    fn aborting(&self) -> bool {
        self.timers.is_set(Timer::Abort)
    }

    fn on_auto_retry(&mut self, now: Now, error_message: &str, delay_ms: u64) {
        self.stop_watch();
        if self.phase != Phase::Running || self.interrupted {
            return;
        }
        let Some(current) = self.dispatch.current().cloned() else {
            return;
        };
        let error = self
            .attempt
            .last_assistant()
            .and_then(|m| m.error_message.clone())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| error_message.to_string());
        let verdict = classify(&Observation {
            error_message: &error,
            stop_reason: "error",
            watchdog: false,
            user_abort: false,
            now_ms: now.wall_ms,
        });
        self.dispatch.judged();
        let class = verdict.class;
        let plan = self.judge(now, &current, verdict, &error);
        match plan {
            Plan::Exhaust(_) if self.round_expired(now) => {
                self.plan = Some(Plan::Exhaust(self.round_expired_reason()));
                self.phase = Phase::Settling;
                self.send(now, Command::AbortRetry, Tag::AbortRetry);
            }
            Plan::Exhaust(reason) if class == FailureClass::Quota => {
                // A used-up quota is still used up after Pi's 2/4/8 s: each retry is one more
                // request to it. End now (or wait for the reset it stated, when waiting).
                self.note(
                    Note::Detail,
                    format!(
                        "no other candidate; not leaving the quota failure of {} to Pi's retry",
                        current.key()
                    ),
                );
                self.plan = Some(Plan::Exhaust(reason));
                self.phase = Phase::Settling;
                self.send(now, Command::AbortRetry, Tag::AbortRetry);
            }
            exhaust @ Plan::Exhaust(_) if self.budget_forbids_retry(&current) => {
                // Nowhere else to go, and no budget for another request there.
                self.plan = Some(exhaust);
                self.phase = Phase::Settling;
                self.send(now, Command::AbortRetry, Tag::AbortRetry);
            }
            exhaust @ Plan::Exhaust(_) if self.shared.blocked(&current, now.wall_ms).is_some() => {
                // Its breaker is open: the next request to it is the breaker's probe, once it
                // reopens (waited for, or not), not Pi's 2/4/8 s retries at an endpoint that
                // is down (issue 32: 15 attempts at one dead endpoint in one job).
                self.plan = Some(exhaust);
                self.phase = Phase::Settling;
                self.send(now, Command::AbortRetry, Tag::AbortRetry);
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
            Plan::RetrySame
                if self.attempt.tools_since_prompt() && !self.budget_forbids_retry(&current) =>
            {
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
                self.wire.send_first(
                    now.instant,
                    &mut self.timers,
                    Command::AbortRetry,
                    Tag::AbortRetry,
                );
            }
        }
    }

    fn on_settled(&mut self, now: Now) {
        self.stop_watch();
        self.timers.stop(Timer::Abort);
        self.attempt.settled();
        if self.interrupted {
            return self.finish(now, Outcome::Aborted);
        }
        if !matches!(self.phase, Phase::Running | Phase::Settling) {
            return;
        }
        let Some(current) = self.dispatch.current().cloned() else {
            return self.finish(now, Outcome::Fatal(Fatal::NoModel));
        };
        let message = self.attempt.last_assistant().cloned().unwrap_or_default();
        let stop = message.stop_reason.clone().unwrap_or_default();
        let text = message.text();
        let fresh = self.dispatch.fresh_message();
        // `length` is an answer cut at the output limit: not complete, so not an answer (judged
        // as `truncated` below and failed over).
        if fresh && stop == "stop" && !crate::answer::is_blank(&text) {
            return self.complete(now, current, text.trim().to_string());
        }
        let plan = match self.plan.take() {
            Some(plan) if !fresh => plan,
            // Our own abort of a request whose slot lapsed: whatever Pi says of it.
            Some(Plan::Retake) => Plan::Retake,
            _ => {
                self.dispatch.judged();
                let (verdict, error) = self.verdict_on(now, &message, &stop);
                self.judge(now, &current, verdict, &error)
            }
        };
        self.execute(now, plan);
    }

    /// The classification of a settled attempt that did not answer.
    fn verdict_on(&mut self, now: Now, message: &Message, stop: &str) -> (Classification, String) {
        if self.attempt.take_watchdog_fired() {
            return self.cut_verdict(now);
        }
        if stop == "length" && !crate::answer::is_blank(&message.text()) {
            let limit = self
                .dispatch
                .current()
                .and_then(|m| m.max_tokens)
                .map_or_else(String::new, |t| format!(" of {t} tokens"));
            let v = Classification {
                class: FailureClass::Truncated,
                scope: super::classify::Scope::Round,
                status: None,
                matched: "finish_reason length".to_string(),
                stated: None,
            };
            return (
                v,
                format!("the answer was cut off at the model's output limit{limit}"),
            );
        }
        if matches!(stop, "stop" | "length") {
            self.attempt.answered_empty();
            let v = Classification {
                class: FailureClass::Unknown,
                scope: super::classify::Scope::Model,
                status: None,
                matched: "empty answer".to_string(),
                stated: None,
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
            now_ms: now.wall_ms,
        });
        (v, error)
    }

    fn abort(&mut self, now: Now) {
        if !self.aborting() {
            self.timers.set(Timer::Abort, now.instant + ABORT_GRACE);
            self.send(now, Command::Abort, Tag::Abort);
        }
    }

    fn send(&mut self, now: Now, command: Command, tag: Tag) {
        self.wire.send(now.instant, &mut self.timers, command, tag);
    }

    fn note(&mut self, note: Note, line: String) {
        self.wire.push(Action::Progress { line, note });
    }

    fn finish(&mut self, now: Now, outcome: Outcome) {
        if self.phase == Phase::Done {
            return;
        }
        // A slot still held goes back: nothing more is sent on it.
        self.give_back_slot(now, slot::Ending::Released);
        self.phase = Phase::Done;
        self.timers.stop_all();
        self.tally.finish(outcome.clone());
        self.wire.push(Action::Finish(outcome));
    }
}

#[cfg(test)]
mod tests;
