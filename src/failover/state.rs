//! The machine's vocabulary: its settings (`Config`, `Options`), its one input (`Input`), its
//! outputs (`Action`, `Note`, `Outcome`, `Attempt`), and the small enums its parts share (the phase, the plan after a
//! failure, which command a response answers, how the request reaches the next model). Pure
//! data; the parts that keep the state are in `machine/`.

use std::time::{Duration, Instant};

use super::classify::{Classification, FailureClass};
use super::explain::Explanation;
use super::reopen::RetryHint;
use crate::budget::Spend;
use crate::capacity::ops::CapacityReply;
use crate::catalog::ModelInfo;
use crate::health::{Delta, Health};
use crate::rpc::{Command, Incoming, Usage};

/// Tunables, from settings and the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// The watchdogs' ceilings, and their values while a model has no pace yet.
    pub first_response: Duration,
    pub stall: Duration,
    /// The least a watchdog derived from a model's pace may be (`CCSWITCH_WATCHDOG_FLOOR_MS`).
    pub watchdog_floor: Duration,
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
    /// `--max-inflight`: provider → most requests in flight (its providers must exist).
    pub max_inflight: std::collections::BTreeMap<String, u32>,
    /// `--max-cost`: the process's spend caps (the spend comes in as `Input::Spend`).
    pub budget: crate::budget::Caps,
    /// `--max-wait`: the most one run waits in all (see `failover::waiting`).
    pub max_wait: Option<Duration>,
    /// `--prefer-primary`: how far ahead the primary's stated reset or capacity pause may lie
    /// for the run to wait for it instead of failing over.
    pub prefer_primary: Option<Duration>,
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
    /// The machine's offset from UTC, to word a stated reset for people (local time and UTC);
    /// `None`: UTC only. Nothing is decided by it.
    pub local_offset: Option<crate::timefmt::LocalOffset>,
    /// Spreads this run's restart after waiting for a stated reset over a few seconds, so the
    /// jobs of a batch that waited for one window do not all start at its reset second: any
    /// value, different per job.
    pub spread_seed: u64,
    /// `--explain`: stop before the first request and describe what would happen.
    pub explain: bool,
    /// The run's (or job's) deadline: waiting for a breaker never goes past it.
    pub deadline: Option<Instant>,
    /// The health given at creation is only what this process knew; the store's comes later
    /// as `Input::HealthLoaded`. The first request waits for it, but never longer than
    /// [`super::machine::HEALTH_GRACE`] after Pi is ready.
    pub health_pending: bool,
    /// Take a capacity slot on a provider before each attempt (see `crate::capacity`); `None`
    /// sends without slots.
    pub capacity: Option<CapacityOptions>,
    /// A schema is in force (`--output-schema`): a complete answer is judged against it
    /// ([`Action::CheckAnswer`]) before it counts.
    pub schema: bool,
    /// Models (`provider/id`) that could not follow this job's schema in an earlier job of the
    /// batch: tried last, and not started from when another candidate exists.
    pub schema_avoid: std::collections::BTreeSet<String>,
}

/// How this run takes capacity slots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityOptions {
    /// Who holds the slots this run takes (host, process, worker, job).
    pub slot: crate::capacity::SlotId,
    /// Where a provider's limit starts when nothing is learned yet (the batch's `--jobs`).
    pub initial: u32,
    /// `--max-inflight`: provider → the most requests in flight.
    pub caps: std::collections::BTreeMap<String, u32>,
    /// A single run: its first slot waits for the store at most the pre-request grace (shared
    /// with the wait for health), then the request goes out without a confirmed slot. A batch
    /// job waits for its slots (a slow store's budget, past which capacity is per process).
    pub pre_request_grace: bool,
}

impl CapacityOptions {
    /// This caller's limits on `provider`.
    pub fn limits_for(&self, provider: &str) -> crate::capacity::Limits {
        crate::capacity::Limits {
            initial: self.initial,
            cap: self.caps.get(provider).copied(),
        }
    }
}

/// Everything that happens to a run, as one value: the machine's one way in
/// ([`super::Machine::handle`]). A new kind of event is one more variant here and one more arm
/// in `handle`, never another method or a side channel in the driver.
#[derive(Debug)]
pub enum Input {
    /// A line from Pi: an event, or the response to one of the run's commands.
    Pi(Incoming),
    /// The store's health for the start of the run (see `Options::health_pending`).
    HealthLoaded(Health),
    /// Stored health after this run's record `seq` (other processes' updates merged in; the
    /// records emitted since are applied again, so the view never goes back in time).
    HealthStored { seq: u64, health: Health },
    /// Shared health read again while waiting for a breaker ([`Action::ReloadHealth`]).
    HealthReloaded(Health),
    /// The answer to [`Action::ClaimProbe`]: may the run send its probe?
    ProbeClaimed { granted: bool },
    /// What capacity operation `id` came to ([`Action::Capacity`] with `reply`).
    Capacity { id: u64, reply: CapacityReply },
    /// A capacity slot was given back in this process: a run waiting for one asks again now.
    SlotFreed,
    /// The process's spend so far, as the ledger holds it: every job's costs, this run's
    /// [`Action::Spent`] included (the ledger is the one place a cost is entered).
    Spend(Spend),
    /// Stop (a signal, the deadline, a batch halting): abort Pi's run, never fail over.
    Stop,
    /// The run is over without the machine ending it (Pi went away, a stop never settled):
    /// what it holds goes back.
    Abandon,
    /// The instant [`super::Machine::poll_deadline`] returned has come.
    Timeout,
    /// What [`Action::CheckAnswer`] came to: the answer's JSON value, or why it does not
    /// conform to the job's schema.
    AnswerChecked(Result<crate::schema::Conforming, crate::schema::Rejection>),
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Answer {
        text: String,
        model: ModelInfo,
        /// With a schema in force: the answer's JSON value (what stdout prints).
        json: Option<Box<crate::schema::Conforming>>,
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
    /// No further attempt may start: the `--max-cost` total is reached, or every provider that
    /// could take the request is over its own cap (exit 3; a batch leaves the job unrecorded).
    OverBudget {
        why: crate::budget::OverBudget,
        last_error: Option<String>,
    },
}

/// One failed (or successful) attempt, for `-v` and `--json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub model: crate::catalog::ModelKey,
    /// `None` for the attempt that answered.
    pub failure: Option<Classification>,
    /// Redaction is the caller's job before printing; this is Pi's raw text.
    pub error: Option<String>,
    pub duration_ms: u64,
    /// Tokens and cost Pi reported for this attempt's model calls.
    pub usage: Usage,
    /// The provider refused it for capacity (too many requests in flight): a signal to slow
    /// down, not a failure of the model.
    pub capacity_signal: bool,
    /// The text of an answer cut at the output limit ([`FailureClass::Truncated`]): never
    /// printed as an answer, shown only in `--json`.
    pub partial: Option<String>,
    /// The attempt was still waiting for its first response when the run ended without
    /// judging it (the deadline): how long it had waited (exit 124's hint names it).
    pub silent_ms: Option<u64>,
    /// A complete answer that did not conform to the schema ([`FailureClass::Schema`]): shown
    /// only in `--json`.
    pub rejected: Option<Rejected>,
}

/// An answer the schema rejected, and why (a short list: see `schema::limits`).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub answer: String,
    pub errors: Vec<String>,
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
    /// Claim the half-open probe lease of a breaker (a `health::probe_target`); the answer
    /// comes back as [`Input::ProbeClaimed`].
    ClaimProbe {
        target: crate::health::ProbeTarget,
    },
    /// Persist this health change; the merged result comes back as [`Input::HealthStored`].
    Record {
        seq: u64,
        delta: Delta,
    },
    /// Read shared health again; it comes back as [`Input::HealthReloaded`] (while waiting).
    ReloadHealth,
    /// Apply this capacity operation; with `reply`, its outcome comes back as
    /// [`Input::Capacity`].
    Capacity {
        id: u64,
        op: crate::capacity::ops::CapacityOp,
        reply: bool,
    },
    /// A model call of this run cost `cost` on `provider` (Pi's `usage.cost`, positive and
    /// finite): enter it in the process's ledger, whose spend comes back as [`Input::Spend`]
    /// before any other input (the machine does not count it itself).
    Spent {
        provider: String,
        cost: f64,
    },
    /// A line for stderr (already without secrets except error text, which the driver redacts).
    Progress {
        line: String,
        note: Note,
    },
    /// Judge this complete answer against the job's schema (off the event loop: a large answer
    /// takes milliseconds); the verdict comes back as [`Input::AnswerChecked`].
    CheckAnswer {
        text: String,
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
    /// The preferred model's provider had no free capacity slot.
    Capacity,
    /// The start model's provider is over its `--max-cost` cap (this process's business: not
    /// news for the shared switch log).
    OverBudget,
    /// The start model could not follow this job's schema in an earlier job of the batch (this
    /// process's business too).
    Unsuited,
}

impl SwitchReason {
    pub(super) fn as_str(&self) -> &'static str {
        match self {
            SwitchReason::Failure(c) => c.as_str(),
            SwitchReason::Unhealthy => "unhealthy",
            SwitchReason::Modality => "modality",
            SwitchReason::Probe => "probe",
            SwitchReason::Reopened => "reopened",
            SwitchReason::Capacity => "capacity",
            SwitchReason::OverBudget => "over budget",
            SwitchReason::Unsuited => "did not follow this schema in an earlier job",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Phase {
    /// Waiting for `get_state` and `get_available_models`.
    Starting,
    /// `model` gave a complete answer (`text`), which is being judged against the schema.
    Checking {
        model: ModelInfo,
        text: String,
    },
    /// Waiting for the answer to a probe-lease claim on `target` before using `model`.
    Claiming {
        model: ModelInfo,
        mode: Redispatch,
        reason: SwitchReason,
        target: crate::health::ProbeTarget,
    },
    /// Waiting for the store to grant a capacity slot on one of `choices` (in preference order;
    /// `choices[0]` is the model wanted), by operation `id`.
    Admitting {
        id: u64,
        choices: Vec<ModelInfo>,
        mode: Redispatch,
        reason: SwitchReason,
    },
    /// Every choice was full: waiting for a slot to free up (`Timer::SlotCheck`, or a slot
    /// given back in this process).
    AwaitingSlot {
        preferred: ModelInfo,
        mode: Redispatch,
        reason: SwitchReason,
    },
    /// A capacity signal's refusal is being stored (operation `id`); its verdict decides
    /// between waiting for a slot and treating the provider as rate-limited.
    Refusing {
        id: u64,
        model: ModelInfo,
        mode: Redispatch,
        verdict: Classification,
        error: String,
    },
    /// Commands of a re-dispatch in flight.
    Dispatching,
    /// A prompt is running.
    Running,
    /// A failure was judged while Pi still runs (auto-retry backoff or our abort): act once
    /// Pi settles.
    Settling,
    /// Every candidate is cooling down (or, with `--prefer-primary`, the primary will be back
    /// soon): wait until `until`, re-reading health meanwhile (on `Timer::WaitCheck`).
    Waiting {
        mode: Redispatch,
        until: Instant,
        /// Waiting for a stated reset: not before this (the run's place in the spread).
        not_before: Option<Instant>,
        /// Waiting for the primary (`--prefer-primary`): it is the model taken when it is
        /// usable again, rather than the best candidate.
        primary: bool,
    },
    Done,
}

/// The decision taken after a failure, executed once Pi has settled.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Plan {
    Switch(ModelInfo, SwitchReason),
    RetrySame,
    /// A capacity signal: give the slot back as refused, then wait for one.
    SlowDown,
    /// The run's slot lapsed while it could not renew it (stopped, SIGSTOP, or starved past
    /// the lease's TTL): take a slot again, then send the request again.
    Retake,
    /// `--prefer-primary`: the primary failed (with this class) and stated a reset within the
    /// window: wait for it instead of failing over (unless that is no longer so once Pi
    /// settles).
    AwaitPrimary(FailureClass),
    Exhaust(super::Exhaustion),
}
