//! After an attempt failed: record the failure (breakers, round bookkeeping), decide what comes
//! next, and — when nothing is left — either wait for a breaker to reopen or end the run with a
//! retry hint for schedulers.

use std::time::Duration;

use super::timers::Timer;
use super::{
    Action, Attempt, Machine, Note, Outcome, Phase, Plan, Redispatch, Round, SwitchReason,
    WAIT_POLL,
};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::failover::candidates::{self, Filter};
use crate::failover::classify::{Classification, FailureClass};
use crate::failover::ending::{Exhaustion, Fatal};
use crate::failover::reopen::{self, Availability, Blocker, RetryHint, human_ms};
use crate::failover::stated::{self, Stated};
use crate::failover::waiting::Bound;
use crate::health::cooldown::stated_spread_ms;
use crate::health::{BREAKER_SCOPES, Delta, Keys, StatedReset};
use crate::timefmt::local_and_utc;

const WAIT_POLL_MS: u64 = WAIT_POLL.as_millis() as u64;

/// The jobs that waited for one stated reset start again spread over this long after it
/// (each at its own place, from `Options::spread_seed`), not all at the reset second.
pub(super) const RESTART_SPREAD_MS: u64 = 5000;

/// The longest quote of a provider's statement kept with its breaker.
const STATED_WORDS_MAX: usize = 120;

impl Machine {
    /// Records a failure and decides what comes next. Pure decision plus health deltas.
    pub(super) fn judge(
        &mut self,
        now: Now,
        current: &ModelInfo,
        verdict: Classification,
        error: &str,
    ) -> Plan {
        if self.is_capacity_signal(now, current, &verdict) {
            self.capacity_signal(now, current, &verdict, error);
            return Plan::SlowDown;
        }
        let class = verdict.class;
        // Issue 31: an endpoint already failing (another run's failure, a failed probe) is down,
        // not having a blip: no retry there; one request per cooldown is its probe.
        let endpoint_failing = self
            .shared
            .health()
            .records(crate::health::Scope::Endpoint)
            .and_then(|m| m.get(&Keys::of(current).endpoint))
            .is_some_and(|r| r.consecutive_failures > 0);
        self.record_failure(now, current, verdict.clone(), error);
        if class == FailureClass::UserAbort {
            return Plan::Exhaust(Exhaustion::Interrupted);
        }
        if self.round_expired(now) {
            return Plan::Exhaust(self.round_expired_reason());
        }
        if self.should_await_primary(now, current) {
            return Plan::AwaitPrimary(class);
        }
        // A one-off 5xx gets one immediate retry on the same model.
        let is_5xx = class == FailureClass::Endpoint
            && verdict.status.is_some_and(|s| (500..600).contains(&s));
        if is_5xx
            && !endpoint_failing
            && !self.budget.capped(&current.provider)
            && self.round.retry_same(&current.key())
        {
            return Plan::RetrySame;
        }
        match self.best_candidate(now, current) {
            Some(next) => Plan::Switch(next, SwitchReason::Failure(class)),
            None => Plan::Exhaust(Exhaustion::NoCandidate),
        }
    }

    pub(super) fn execute(&mut self, now: Now, plan: Plan) {
        let mode = self.redispatch_mode(true);
        self.execute_with(now, plan, mode);
    }

    /// How the next attempt reaches the model. Tools finished since the last prompt: keep
    /// their results and continue. Otherwise the last prompt is sent again — after a fork at
    /// it when the failed attempt is in the session (`fork_away`), so nothing is duplicated.
    pub(super) fn redispatch_mode(&self, fork_away: bool) -> Redispatch {
        if self.attempt.tools_since_prompt() {
            Redispatch::Continue
        } else if fork_away {
            Redispatch::Fork
        } else {
            Redispatch::Initial
        }
    }

    pub(super) fn execute_with(&mut self, now: Now, plan: Plan, mode: Redispatch) {
        match plan {
            Plan::RetrySame => {
                if let Some(why) = self.over_budget() {
                    return self.stop_for_budget(now, why);
                }
                let key = self
                    .dispatch
                    .current()
                    .map(ModelInfo::key)
                    .unwrap_or_default();
                self.note(Note::Retry, format!("retry {key} once (server error)"));
                self.start_redispatch(now, mode, None);
            }
            Plan::Switch(model, reason) => self.go_to(now, model, mode, reason),
            Plan::SlowDown => self.refuse(now, mode),
            Plan::AwaitPrimary(class) => {
                if !self.wait_for_primary(now, mode) {
                    self.choose_and_switch(now, mode, SwitchReason::Failure(class));
                }
            }
            Plan::Retake => self.retake(now, mode),
            Plan::Exhaust(_) if self.attempt.empty_answer() => {
                self.finish(now, Outcome::EmptyAnswer)
            }
            Plan::Exhaust(reason) => {
                if reason == Exhaustion::NoCandidate && self.try_wait(now, mode) {
                    return;
                }
                self.exhaust(now, reason);
            }
        }
    }

    pub(super) fn round_expired(&self, now: Now) -> bool {
        self.round.expired(now.instant, self.cfg.round_limit)
    }

    pub(super) fn round_expired_reason(&self) -> Exhaustion {
        Exhaustion::RoundWindow {
            limit_ms: u64::try_from(self.cfg.round_limit.as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub(super) fn record_failure(
        &mut self,
        now: Now,
        model: &ModelInfo,
        verdict: Classification,
        error: &str,
    ) {
        let keys = Keys::of(model);
        self.round.mark_tried(keys.model.clone());
        self.round.failed(verdict.class, candidates::server(model));
        // The breaker keeps the text redacted and cut by itself; what is shown is cut here.
        let raw = error;
        // Printed and stored error text is redacted and cut to a few hundred characters.
        let error = crate::redact::redact_capped(error, 300);
        self.note(
            Note::Detail,
            format!(
                "fail {} ({}, {} scope, matched {:?}): {error}",
                keys.model,
                verdict.class,
                verdict.scope.as_str(),
                verdict.matched
            ),
        );
        self.retire_slot(now);
        let duration_ms = self.attempt.ms(now.instant);
        let partial = (verdict.class == FailureClass::Truncated)
            .then(|| {
                self.attempt
                    .last_assistant()
                    .map(|m| m.text().trim().to_string())
            })
            .flatten();
        self.tally.push(Attempt {
            partial,
            model: model.key(),
            failure: Some(verdict.clone()),
            error: Some(error.clone()),
            duration_ms,
            usage: self.attempt.close(),
            capacity_signal: false,
            silent_ms: None,
            rejected: self.conform.take_held(),
        });
        self.open_breaker(now, model, &keys, &verdict, raw);
        // The probe is over whatever it proved: a lease this run holds on one of the model's
        // breakers goes back, so another run need not wait out the lease's expiry. Only after
        // the failure: each delta is its own commit, and a lease released first would let
        // another run claim the probe while the breaker still looks half-open.
        for target in self.shared.take_leases_of(&keys) {
            self.record(Delta::Release { target });
        }
    }

    /// Records the failure on the breaker of its scope (announcing it if that opens it), after
    /// the class's own bookkeeping; some classes open no breaker.
    pub(super) fn open_breaker(
        &mut self,
        now: Now,
        model: &ModelInfo,
        keys: &Keys,
        verdict: &Classification,
        raw: &str,
    ) {
        // `raw` is the failure's text as Pi gave it: the breaker keeps it redacted and cut,
        // and a quota or rate limit that stated when it lifts (read when it was classified)
        // keeps its breaker open until then.
        let (class, scope) = (verdict.class, verdict.scope);
        match class {
            FailureClass::UserAbort => return,
            FailureClass::ContextOverflow => {
                self.request.overflowed(model.context_window_or_zero());
                return;
            }
            FailureClass::Truncated => {
                self.request.truncated(model);
                return;
            }
            // A model that cannot follow this schema is not a dead provider: no breaker.
            FailureClass::Schema => return,
            FailureClass::ContentPolicy => {
                self.request
                    .avoid_family_of(model, format!("{} refused the content", keys.model));
            }
            FailureClass::Endpoint => self.round.endpoint_failed(&keys.endpoint),
            _ => {}
        }
        if !self.round.first_failure(&keys.model, class) {
            return;
        }
        let Some(key) = keys.get(scope).map(str::to_string) else {
            return;
        };
        let was_open = self.shared.breaker_open(scope, &key, now.wall_ms);
        self.record(Delta::Failure {
            at: now.wall_ms,
            key: key.clone(),
            scope,
            class,
            error: crate::redact::redact_capped(raw, 300),
        });
        if let Some(s) = &verdict.stated {
            self.record(Delta::Stated {
                key: key.clone(),
                scope,
                class,
                reset: StatedReset {
                    at_ms: s.at_ms,
                    spread_ms: stated_spread_ms(&key, s.at_ms),
                    words: stated_words(s),
                },
            });
        }
        if !was_open && self.shared.breaker_open(scope, &key, now.wall_ms) {
            let left = self.shared.cooldown_left(scope, &key, now.wall_ms);
            let why = match self.shared.stated_reset(scope, &key, now.wall_ms) {
                Some(at) => format!(
                    " ({} stated its limit resets at {})",
                    model.provider,
                    local_and_utc(at, self.opts.local_offset)
                ),
                None => String::new(),
            };
            self.note(
                Note::Breaker,
                format!(
                    "breaker open: {} {key} ({class}) for {}{why}",
                    scope.as_str(),
                    human_ms(left)
                ),
            );
        }
    }

    /// Applies a health change locally and asks the driver to persist it.
    pub(super) fn record(&mut self, delta: Delta) {
        let seq = self.shared.record(&delta);
        self.wire.push(Action::Record { seq, delta });
    }

    pub(super) fn filter(&self, now: Now) -> Filter<'_> {
        Filter {
            tried: self.round.tried(),
            isolated_endpoints: self.round.isolated(),
            isolated_servers: self.round.isolated_servers(),
            same_server_first: self.round.key_failed(),
            avoided_families: self.request.avoided_families(),
            needs_images: self.request.needs_images(),
            capped_providers: self.budget.capped_providers(),
            last_resort: &self.opts.schema_avoid,
            larger_context_than: self.request.larger_context_than(),
            larger_output_than: self.request.larger_output_than(),
            min_context: self.request.tokens(),
            health: self.shared.health(),
            now_ms: now.wall_ms,
            own_leases: self.shared.own_leases(),
        }
    }

    pub(super) fn best_candidate(&self, now: Now, current: &ModelInfo) -> Option<ModelInfo> {
        candidates::rank(current, self.pi.pool(), &self.filter(now))
            .into_iter()
            .next()
    }

    pub(super) fn choose_and_switch(&mut self, now: Now, mode: Redispatch, reason: SwitchReason) {
        let Some(current) = self.dispatch.current().cloned() else {
            return self.finish(now, Outcome::Fatal(Fatal::NoModel));
        };
        match self.best_candidate(now, &current) {
            Some(next) => self.go_to(now, next, mode, reason),
            None => {
                if self.try_wait(now, mode) {
                    return;
                }
                let reason = if mode == Redispatch::Initial
                    && self.request.needs_images()
                    && self.tally.attempts().is_empty()
                    && self.static_candidates().is_empty()
                {
                    Exhaustion::NoImageModel
                } else {
                    Exhaustion::NoCandidate
                };
                self.exhaust(now, reason);
            }
        }
    }

    /// The pool without what can never take this request in this run: wrong modality, too
    /// small a context window, an avoided family, a provider over its spend cap. Breakers and
    /// the round's bookkeeping are not looked at.
    pub(super) fn static_candidates(&self) -> Vec<ModelInfo> {
        let mut models = self.fitting_models();
        models.retain(|m| !self.budget.capped(&m.provider));
        models
    }

    /// The pool without what can never take this request, whatever was spent.
    pub(super) fn fitting_models(&self) -> Vec<ModelInfo> {
        self.pi
            .pool()
            .iter()
            .filter(|m| self.request.fits(m))
            .cloned()
            .collect()
    }

    /// The breaker (one that heals by itself) that kept `model` out after this round tried
    /// it, when it has reopened since: the round's bookkeeping alone excludes the model now.
    fn reopened_since_tried(&self, model: &ModelInfo, now_ms: u64) -> Option<Blocker> {
        let keys = Keys::of(model);
        if !self.round.tried().contains(&keys.model) {
            return None;
        }
        BREAKER_SCOPES.into_iter().find_map(|scope| {
            let key = keys.get(scope)?;
            let record = self.shared.health().records(scope)?.get(key)?;
            let class = record.last_class.as_deref().and_then(FailureClass::parse)?;
            let reopened = record.consecutive_failures > 0
                && record.cooldown_until.is_some_and(|t| t <= now_ms)
                && reopen::heals_by_itself(class);
            reopened.then(|| Blocker {
                scope,
                key: key.to_string(),
                class: Some(class),
                stated_at: None,
            })
        })
    }

    /// Every candidate is blocked: when waiting is allowed and a breaker that heals by itself
    /// (or reopens at a reset its provider stated) reopens before the deadline, wait for it
    /// (one status line) instead of giving up. After a stated reset the run starts again at
    /// its own place in a spread of [`RESTART_SPREAD_MS`], so the jobs that waited for one
    /// window do not all start at once.
    fn try_wait(&mut self, now: Now, mode: Redispatch) -> bool {
        // Out of candidates for lack of budget: nothing to wait for (this ends the run).
        if !self.interrupted
            && let Some(why) = self.over_budget()
        {
            self.stop_for_budget(now, why);
            return true;
        }
        if !self.cfg.wait || self.interrupted {
            return false;
        }
        let Some(deadline) = self.opts.deadline else {
            return false;
        };
        let models = self.static_candidates();
        let mut best: Option<(u64, &ModelInfo, Blocker)> = None;
        for m in &models {
            let blocked = match self.shared.availability(m, now.wall_ms) {
                Availability::Later {
                    at_ms,
                    transient: true,
                    what,
                } => Some((at_ms, what)),
                // Its breaker reopened since this round tried it (a short cooldown outlived by
                // the attempt's own round trip): the wait for it is already over.
                Availability::Now => self
                    .reopened_since_tried(m, now.wall_ms)
                    .map(|what| (now.wall_ms, what)),
                _ => None,
            };
            if let Some((at_ms, what)) = blocked {
                // A probe lease held elsewhere usually ends when that probe does, long before
                // it expires: judge the deadline by the next check, not by the expiry.
                let at_ms = if what.class.is_none() {
                    at_ms.min(now.wall_ms.saturating_add(WAIT_POLL_MS))
                } else {
                    at_ms
                };
                if best.as_ref().is_none_or(|(t, _, _)| at_ms < *t) {
                    best = Some((at_ms, m, what));
                }
            }
        }
        let Some((at_ms, model, what)) = best else {
            return false;
        };
        let wait = Duration::from_millis(at_ms.saturating_sub(now.wall_ms));
        let until = now.instant + wait;
        match self.wait_rules().may_wait(&self.waited, now.instant, until) {
            Ok(()) => {}
            Err(Bound::Deadline) => return false,
            Err(Bound::MaxWait) => {
                self.exhaust(now, self.max_wait_exhaustion());
                return true;
            }
        }
        // Nothing is sent while waiting: a slot given up goes back now, not with an admission.
        self.give_back_slot(now, super::slot::Ending::Released);
        let already = matches!(self.phase, Phase::Waiting { .. });
        // After a stated reset: not before this run's place in the spread (deadline allowing).
        let spread = what
            .stated_at
            .map(|_| Duration::from_millis(self.opts.spread_seed % (RESTART_SPREAD_MS + 1)))
            .filter(|s| until + *s < deadline);
        let until = until + spread.unwrap_or_default();
        let not_before = spread.map(|_| until);
        if !already {
            let wait = until.saturating_duration_since(now.instant);
            let stated = match what.stated_at {
                Some(at) => format!(
                    "; {} stated its limit resets at {}",
                    model.provider,
                    local_and_utc(at, self.opts.local_offset)
                ),
                None => String::new(),
            };
            let line = if wait.is_zero() {
                format!(
                    "{} has reopened since {} was tried; trying it again",
                    what.describe(),
                    model.key()
                )
            } else {
                format!(
                    "every candidate is cooling down; waiting {} for {} to reopen ({}){stated}",
                    human_ms(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
                    what.describe(),
                    model.key()
                )
            };
            self.note(Note::Wait, line);
        }
        self.phase = Phase::Waiting {
            mode,
            until,
            not_before,
            primary: false,
        };
        self.timers
            .set(Timer::WaitCheck, until.min(now.instant + WAIT_POLL));
        true
    }

    /// A wait's check: after fresh health arrived or the reopening time came. A new round
    /// starts; the first usable candidate (the current model included) is taken, else the wait
    /// goes on — or ends the run when nothing will reopen in time.
    pub(super) fn wake(&mut self, now: Now) {
        let Phase::Waiting {
            mode,
            not_before,
            primary,
            ..
        } = self.phase
        else {
            return;
        };
        if let Some(t) = not_before
            && now.instant < t
        {
            // Not yet this run's place in the spread after a stated reset.
            self.timers
                .set(Timer::WaitCheck, t.min(now.instant + WAIT_POLL));
            return;
        }
        if primary && self.wake_for_primary(now, mode) {
            return;
        }
        self.round = Round::default();
        let Some(current) = self.dispatch.current().cloned() else {
            return self.finish(now, Outcome::Fatal(Fatal::NoModel));
        };
        let current_ok = self
            .static_candidates()
            .iter()
            .any(|m| m.key() == current.key())
            && self.shared.blocked(&current, now.wall_ms).is_none();
        let next = if current_ok {
            Some(current)
        } else {
            self.best_candidate(now, &current)
        };
        match next {
            Some(model) => {
                self.note(
                    Note::Wait,
                    format!("{} is usable again; resuming", model.key()),
                );
                self.phase = Phase::Dispatching;
                self.timers.stop(Timer::WaitCheck);
                self.go_to(now, model, mode, SwitchReason::Reopened);
            }
            None => {
                if !self.try_wait(now, mode) {
                    self.exhaust(now, Exhaustion::NoCandidate);
                }
            }
        }
    }

    /// Ends the run with exit 1, saying whether and when trying again could help.
    pub(super) fn exhaust(&mut self, now: Now, reason: Exhaustion) {
        let retry = self.retry_hint(now, &reason);
        let last_error = self.tally.last_error().map(str::to_string);
        let too_large = matches!(reason, Exhaustion::NoCandidate | Exhaustion::NoImageModel)
            && self.too_large_for_every_model();
        self.finish(
            now,
            Outcome::Exhausted {
                reason,
                last_error,
                retry,
                too_large,
            },
        );
    }

    /// Nothing in the pool has a context window large enough for the request (or larger than
    /// one that already overflowed), whatever the breakers say.
    fn too_large_for_every_model(&self) -> bool {
        let pool = self.pi.pool();
        !pool.is_empty() && pool.iter().all(|m| self.request.too_large_for(m))
    }

    fn retry_hint(&self, now: Now, reason: &Exhaustion) -> RetryHint {
        if !matches!(
            reason,
            Exhaustion::NoCandidate | Exhaustion::NoImageModel | Exhaustion::MaxWait { .. }
        ) {
            // The round window ran out while providers kept failing: an outage, by definition
            // temporary.
            return RetryHint {
                could_help: true,
                retry_after_ms: Some(0),
                reason: "the providers kept failing for the whole round window; a later run \
                         may find them back"
                    .to_string(),
            };
        }
        let models = self.static_candidates();
        if models.is_empty() {
            let why = if self.request.needs_images() {
                "no model that accepts images is available"
            } else if !self.request.avoided_families().is_empty() {
                "every model left is of a family that refused the content"
            } else {
                "no model has a context window large enough for this request"
            };
            return RetryHint {
                could_help: false,
                retry_after_ms: None,
                reason: format!("{why}; retrying will not help"),
            };
        }
        // A busy key's back-off still running: its provider is what the run was waiting on.
        if let Some(hint) = self.busy_hint(now) {
            return hint;
        }
        // (ms from now, the model, the provider and the reset it stated for that model's wait)
        let mut soonest: Option<(u64, String, Option<StatedBy>)> = None;
        let mut causes: Vec<Cause> = Vec::new();
        for m in &models {
            match self.shared.availability(m, now.wall_ms) {
                Availability::Now => {
                    // Free of breakers but failed this round: its failure decides.
                    match self.tally.last_failure_of(&m.key()) {
                        Some(c) if !reopen::heals_by_itself(c) => causes.push(Cause {
                            text: format!("{} ({c})", m.key()),
                            kind: Blocked::By(c),
                        }),
                        _ => {
                            if soonest.as_ref().is_none_or(|(t, _, _)| 0 < *t) {
                                soonest = Some((0, m.key().into(), None));
                            }
                        }
                    }
                }
                Availability::Later {
                    at_ms,
                    transient: true,
                    what,
                } => {
                    let after = at_ms.saturating_sub(now.wall_ms);
                    if soonest.as_ref().is_none_or(|(t, _, _)| after < *t) {
                        let stated = what.stated_at.map(|at| (m.provider.clone(), at));
                        soonest = Some((after, m.key().into(), stated));
                    }
                }
                Availability::Later { what, .. } => causes.push(Cause {
                    text: what.describe(),
                    kind: what.class.map_or(Blocked::Probing, Blocked::By),
                }),
                Availability::Disabled => causes.push(Cause {
                    text: format!("{} (disabled)", m.key()),
                    kind: Blocked::Disabled,
                }),
            }
        }
        match soonest {
            Some((after, model, stated)) => {
                let mut reason = format!(
                    "retrying later could help: {model} is usable again in {}",
                    human_ms(after)
                );
                if let Some((provider, at)) = stated {
                    reason.push_str(&format!(
                        ": {provider} stated its limit resets at {}",
                        local_and_utc(at, self.opts.local_offset)
                    ));
                }
                RetryHint {
                    could_help: true,
                    retry_after_ms: Some(after),
                    reason,
                }
            }
            None => {
                causes.sort_by(|a, b| a.text.cmp(&b.text));
                causes.dedup_by(|a, b| a.text == b.text);
                RetryHint {
                    could_help: false,
                    retry_after_ms: None,
                    reason: format!(
                        "retrying will not help until the cause is fixed: {}",
                        advice(&causes)
                    ),
                }
            }
        }
    }
}

/// How a statement is kept with its breaker: the provider's words in quotes (redacted,
/// short), and for Zhipu's zone-less time the zone it was read in.
fn stated_words(s: &Stated) -> String {
    let words = format!(
        "\"{}\"",
        crate::redact::redact_capped(&s.text, STATED_WORDS_MAX)
    );
    match s.form {
        stated::Form::ChinaLocal => format!("{words}, read as China Standard Time (UTC+8)"),
        stated::Form::Zoned | stated::Form::Relative => words,
    }
}

/// A provider and the reset it stated (unix ms).
type StatedBy = (String, u64);

/// Why a candidate will not be usable by itself: shown as `text`, advised on by `kind`.
#[derive(Debug, Clone)]
struct Cause {
    text: String,
    kind: Blocked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blocked {
    /// A breaker (or the last failure) of this class.
    By(FailureClass),
    Disabled,
    /// Another run holds the probe lease.
    Probing,
}

/// The causes with what to do about them.
fn advice(causes: &[Cause]) -> String {
    let has = |kind: Blocked| causes.iter().any(|c| c.kind == kind);
    let class = |class: FailureClass| has(Blocked::By(class));
    let mut tips = Vec::new();
    if class(FailureClass::Auth) {
        tips.push("check the API keys");
    }
    if class(FailureClass::Quota) {
        tips.push("top up or raise the quota");
    }
    if class(FailureClass::ContentPolicy) {
        tips.push("the content was refused");
    }
    if class(FailureClass::Model) {
        tips.push("check the model ids");
    }
    if class(FailureClass::Schema) {
        tips.push("no answer matched the schema: check the schema and the prompt");
    }
    if has(Blocked::Disabled) {
        tips.push("--reactivate the disabled models");
    }
    let shown: Vec<&str> = causes.iter().take(6).map(|c| c.text.as_str()).collect();
    let mut text = shown.join(", ");
    if causes.len() > shown.len() {
        text.push_str(&format!(", … ({} more)", causes.len() - shown.len()));
    }
    if !tips.is_empty() {
        text.push_str(&format!(" — {}", tips.join("; ")));
    }
    text
}
