//! The machine's vocabulary: its inputs (`Config`, `Options`), its outputs (`Action`, `Note`,
//! `Outcome`, `Attempt`) and the named parts its state is kept in — what Pi reported
//! ([`PiView`]), the failover round ([`Round`]), the attempt on the current model
//! ([`AttemptState`]) and the command plumbing ([`Wire`]) — each replaced whole when its
//! lifetime ends. Pure data.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::classify::{Classification, FailureClass};
use super::explain::Explanation;
use super::reopen::RetryHint;
use crate::catalog::ModelInfo;
use crate::health::{Delta, Health, ProbeTarget, SwitchEntry};
use crate::rpc::pending::Pending;
use crate::rpc::{Command, ImageContent, Message, Usage};

/// Tunables, from settings and the command line.
#[derive(Debug, Clone)]
pub struct Config {
    pub first_response: Duration,
    pub stall: Duration,
    pub round_limit: Duration,
    /// 1.0 = SPEC cooldowns; smaller values shrink them (tests).
    pub cooldown_scale: f64,
    /// `--models` patterns: failover stays inside this scope.
    pub models_scope: Option<String>,
    /// Pi's saved default model (`provider/id`, from its settings): with `--models` and no
    /// `--model` the run starts from it when it is in scope, else from the first scoped model.
    pub saved_default: Option<String>,
    /// `--provider` and `--model` as given: checked against Pi's registry, so a typo fails
    /// loudly instead of silently widening where the data goes.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// When every candidate is cooling down, wait for the first breaker to reopen.
    pub wait: bool,
}

/// Per-run options (batch mode runs many on one Pi).
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
    /// `--explain`: stop before the first request and describe what would happen.
    pub explain: bool,
    /// The run's (or job's) deadline: waiting for a breaker never goes past it.
    pub deadline: Option<Instant>,
    /// The health given at creation is only what this process knew; the store's comes later
    /// through `handle_health_loaded`. The first request waits for it, but never longer than
    /// [`super::machine::HEALTH_GRACE`] after Pi is ready.
    pub health_pending: bool,
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
        reason: super::Exhaustion,
        last_error: Option<String>,
        retry: RetryHint,
        /// No model in scope has a context window large enough for the request: only a
        /// smaller request (or another scope) can change that.
        too_large: bool,
    },
    /// The answer was empty and no other model was left to try (exit 2).
    EmptyAnswer,
    /// The run was aborted on request (deadline or signal); the driver maps the cause.
    Aborted,
    /// Pi misbehaved or refused the request (exit 2).
    Fatal(super::Fatal),
    /// The configuration cannot work — a scope that selects nothing, an unknown provider or
    /// model, no usable model at all — found before any request (exit 2; stops a batch).
    Setup(super::SetupProblem),
    /// `--explain`: what the run would do.
    Explained(Box<Explanation>),
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
    /// Tokens and cost Pi reported for this attempt's model calls.
    pub usage: Usage,
}

/// What a progress line is about, so each mode shows what matters to it: a single run shows
/// switches; a batch shows breakers opening and closing; `-v` shows everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// `switch a → b (reason)`.
    Switch,
    /// The start model is skipped before sending (`start: a is provider breaker open`).
    Start,
    /// A breaker this run opened or closed.
    Breaker,
    /// Waiting for a breaker to reopen.
    Wait,
    /// The same model is tried again.
    Retry,
    /// Something the user should fix (a `--models` pattern that matches nothing).
    Warning,
    /// Every failure with its marker, watchdogs, skipped candidates (`-v`).
    Detail,
}

impl Note {
    /// Shown by a single run without `-v`.
    pub fn shown_in_run(self) -> bool {
        !matches!(self, Note::Breaker | Note::Detail)
    }

    /// Shown by a batch without `-v` (per-job chatter would drown the batch).
    pub fn shown_in_batch(self) -> bool {
        matches!(self, Note::Breaker | Note::Wait | Note::Warning)
    }
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
        target: crate::health::ProbeTarget,
    },
    /// Persist this health change; the merged result comes back through `handle_health(seq, ..)`.
    Record {
        seq: u64,
        delta: Delta,
    },
    /// Read shared health again and pass it to `handle_health_reloaded` (while waiting).
    ReloadHealth,
    /// A line for stderr (already without secrets except error text, which the driver redacts).
    Progress {
        line: String,
        note: Note,
    },
    Finish(Outcome),
}

/// Which command a response answers.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tag {
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
    pub(super) fn awaited(&self) -> bool {
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
pub(super) enum Redispatch {
    /// No tool ran: fork at the failed user message, then send the same prompt and images.
    Fork,
    /// Tools ran: keep the context, send a continuation prompt.
    Continue,
    /// Nothing was sent yet (switch before the first request).
    Initial,
}

/// Why the run moves to another model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SwitchReason {
    /// The current model failed with this class.
    Failure(FailureClass),
    /// The start model was known to be dead before anything was sent (not news for the
    /// shared switch log: a batch would write one entry per job).
    Unhealthy,
    /// The start model cannot see the request's images.
    Modality,
    /// A model is being probed after its cooldown.
    Probe,
    /// A breaker reopened after a wait.
    Reopened,
}

impl SwitchReason {
    pub(super) fn as_str(&self) -> &'static str {
        match self {
            SwitchReason::Failure(c) => c.as_str(),
            SwitchReason::Unhealthy => "unhealthy",
            SwitchReason::Modality => "modality",
            SwitchReason::Probe => "probe",
            SwitchReason::Reopened => "reopened",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Phase {
    /// Waiting for `get_state` and `get_available_models`.
    Starting,
    /// Waiting for the answer to a probe-lease claim on `target` before using `model`.
    Claiming {
        model: ModelInfo,
        mode: Redispatch,
        reason: SwitchReason,
        target: crate::health::ProbeTarget,
    },
    /// Commands of a re-dispatch in flight.
    Dispatching,
    /// A prompt is running.
    Running,
    /// A failure was judged while Pi still runs (auto-retry backoff or our abort): act once
    /// Pi settles.
    Settling,
    /// Every candidate is cooling down: wait until `until`, re-reading health meanwhile.
    Waiting {
        mode: Redispatch,
        until: Instant,
        next_check: Instant,
    },
    Done,
}

/// Watchdog state for the running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Watch {
    #[default]
    Off,
    FirstResponse(Instant),
    Stall(Instant),
}

/// The decision taken after a failure, executed once Pi has settled.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Plan {
    Switch(ModelInfo, SwitchReason),
    RetrySame,
    Exhaust(super::Exhaustion),
}

/// What Pi reported when the run started.
#[derive(Debug, Default)]
pub(super) struct PiView {
    /// The model Pi was on before this run changed anything.
    pub(super) pi_model: Option<ModelInfo>,
    /// Every model Pi can use (unique), in Pi's order.
    pub(super) registry: Vec<ModelInfo>,
    /// The candidates: `registry` inside `--models`.
    pub(super) pool: Vec<ModelInfo>,
    pub(super) state_seen: bool,
    pub(super) models_seen: bool,
    /// The level Pi chose for a reasoning start model when none was asked for.
    pub(super) thinking_default: Option<String>,
    /// `provider/id` → the thinking level its `--models` pattern named.
    pub(super) scope_levels: BTreeMap<String, String>,
}

/// The request, and what this run learned about it: kept across rounds.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) prompt: String,
    pub(super) images: Vec<ImageContent>,
    /// Families avoided after a content-policy refusal, with why: the content is the reason,
    /// so a relative would refuse it too.
    pub(super) avoided_families: BTreeMap<String, String>,
    /// After a context overflow only larger windows qualify, in every later round too.
    pub(super) larger_context_than: Option<u64>,
}

/// This run's copy of the shared health and what it has asked the store to change.
#[derive(Debug)]
pub(super) struct SharedView {
    pub(super) health: Health,
    /// Records sent to the driver whose merged result has not come back yet: (seq, delta).
    pub(super) unconfirmed: VecDeque<(u64, Delta)>,
    pub(super) record_seq: u64,
    /// Probe leases this process holds (their breakers do not block it).
    pub(super) own_leases: Vec<ProbeTarget>,
    /// The store's health has arrived, or the run stopped waiting for it.
    pub(super) loaded: bool,
    /// When the run stops waiting for the store's health (set once Pi is ready).
    pub(super) grace_until: Option<Instant>,
}

/// The model in use and how the request last went out to it.
#[derive(Debug, Default)]
pub(super) struct DispatchState {
    pub(super) current: Option<ModelInfo>,
    /// The model this run started from (after `--provider` and a batch's start model applied).
    pub(super) start_key: Option<String>,
    /// The start model differs from Pi's current one: the first dispatch must set it.
    pub(super) pending_set: bool,
    pub(super) thinking_sent: bool,
    /// A switch waiting for Pi to accept the new model.
    pub(super) pending_switch: Option<(SwitchEntry, SwitchReason)>,
    /// Counters of assistant messages seen and judged (a settle without a fresh one re-uses
    /// the verdict already taken on Pi's auto-retry).
    pub(super) last_seq: u64,
    pub(super) judged_seq: u64,
    /// The last prompt sent was the continuation prompt (a later fork re-sends it, once).
    pub(super) continued: bool,
}

/// What the run reports when it ends.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) switches: u32,
    pub(super) attempts: Vec<Attempt>,
    pub(super) last_error: Option<String>,
    pub(super) outcome: Option<Outcome>,
}

/// One failover round: from the first request (or the end of a wait) until the outcome.
#[derive(Debug, Default)]
pub(super) struct Round {
    pub(super) started: Option<Instant>,
    pub(super) tried: BTreeSet<String>,
    pub(super) endpoint_failures: BTreeMap<String, u32>,
    pub(super) isolated: BTreeSet<String>,
    pub(super) retried_same: BTreeSet<String>,
    /// (model, class) failures already recorded: Pi's own retries of the same failure must not
    /// double the cooldown again and again within one round.
    pub(super) recorded: BTreeSet<(String, FailureClass)>,
}

/// The attempt on the current model: from its prompt until it is judged.
#[derive(Debug, Default)]
pub(super) struct AttemptState {
    /// A prompt was accepted and the attempt has not been judged yet.
    pub(super) open: bool,
    pub(super) started: Option<Instant>,
    pub(super) last_assistant: Option<Message>,
    pub(super) tools_running: u32,
    /// A tool finished since the last prompt was sent: its result must stay in the context,
    /// so the next model gets a continuation prompt instead of a fork.
    pub(super) tools_since_prompt: bool,
    pub(super) watch: Watch,
    pub(super) watchdog_fired: bool,
    /// Tokens and cost of this attempt's model calls (Pi's own retries included).
    pub(super) usage: Usage,
    /// The attempt ended in an empty answer (judged as a model failure).
    pub(super) empty_answer: bool,
}

/// Command plumbing: ids, awaited answers, the queue of a re-dispatch, the actions out.
#[derive(Debug)]
pub(super) struct Wire {
    pub(super) pending: Pending<Tag>,
    pub(super) actions: VecDeque<Action>,
    pub(super) queue: VecDeque<Command>,
    /// Commands whose answer the run waits for, and when that wait becomes a failure.
    pub(super) waiting: usize,
    pub(super) response_deadline: Option<Instant>,
    /// Latest time seen, so commands sent from inside a handler get a response deadline.
    pub(super) last_now: Option<Instant>,
}
