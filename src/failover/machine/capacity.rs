//! Capacity slots (issue 23): before an attempt is sent, the run takes a slot on the model's
//! provider from the shared store; when the provider is at its limit the attempt goes to the
//! next healthy candidate that has room (overflow), else waits for the first slot to free up —
//! the wanted model stays first in line, so jobs go back to it as soon as it has room. A
//! capacity signal (a rate-limit refusal while holding a slot) gives the slot back as refused,
//! which cuts the provider's limit, and puts the request back in line; only the store's verdict
//! "refused at concurrency 1 again and again" makes it a rate limit with a breaker, as before.

use std::time::Duration;

use super::slot::Ending;
use super::timers::Timer;
use super::{Action, Attempt, Machine, Note, Phase, Redispatch, SwitchReason};
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::capacity::{Decided, MAX_PAUSE_MS, Verdict};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::failover::candidates;
use crate::failover::classify::{Classification, FailureClass};
use crate::health::Keys;

/// While waiting for a slot, the store is asked again at least this often (a slot given back by
/// another process; one given back in this process wakes the run at once).
pub const SLOT_POLL: Duration = Duration::from_millis(250);
/// A held slot's lease is renewed this often (a third of its TTL).
pub const SLOT_RENEW: Duration = Duration::from_millis(crate::capacity::DEFAULT_LEASE_TTL_MS / 3);

impl Machine {
    /// Takes a slot for `wanted` (or, when its provider is full, for the next candidate with
    /// room), then goes on to it. Any slot held on another provider goes back first.
    pub(super) fn admit(
        &mut self,
        now: Now,
        wanted: ModelInfo,
        mode: Redispatch,
        reason: SwitchReason,
    ) {
        self.timers.stop(Timer::SlotRenew);
        let release = self.slot.release_for_admission(now.wall_ms);
        // `--prefer-primary`: a short capacity pause of the primary is waited for, not gone past.
        let hold_first_ms = if self.is_primary(&wanted) {
            self.primary_hold_ms(now)
        } else {
            0
        };
        let choices = self.admission_choices(now, wanted);
        let id = self.slot.next_id();
        let op = CapacityOp::Admit {
            slot: self.slot.slot_id().to_string(),
            ttl_ms: self.slot.ttl_ms(),
            choices: self.slot.choices(&choices),
            release,
            hold_first_ms,
        };
        self.ask_admission(now, id, op, choices, mode, reason);
    }

    /// Sends admission `op` and waits for its answer — for a single run's first slot not past
    /// the pre-request grace (a slow store must not hold up the first request, as README
    /// promises). Every other admission waits for the store: a slow one answers within its
    /// budget, past which the health service counts it as down and answers from per-process
    /// limits — so a slow store never lets a batch send past its caps.
    fn ask_admission(
        &mut self,
        now: Now,
        id: u64,
        op: CapacityOp,
        choices: Vec<ModelInfo>,
        mode: Redispatch,
        reason: SwitchReason,
    ) {
        self.wire.push(Action::Capacity {
            id,
            op,
            reply: true,
        });
        self.slot.asking(now.instant);
        if !self.slot.waiting()
            && let Some(grace) = self.slot.grace_until(now.instant)
        {
            self.timers.set(Timer::SlotGrace, grace);
        }
        self.phase = Phase::Admitting {
            id,
            choices,
            mode,
            reason,
        };
    }

    /// The store did not answer admission in time: the attempt goes out without a confirmed
    /// slot (as when the store is down). The late answer is still read: a slot granted on the
    /// provider the attempt went to is kept, any other given back.
    pub(super) fn admission_overdue(&mut self, now: Now) {
        self.timers.stop(Timer::SlotGrace);
        let Phase::Admitting {
            id,
            choices,
            mode,
            reason,
        } = self.phase.clone()
        else {
            return;
        };
        self.note(
            Note::Detail,
            "capacity: the store did not answer in time; sending without a confirmed slot"
                .to_string(),
        );
        self.slot
            .overdue(id, choices.iter().map(|m| m.provider.clone()).collect());
        self.send_without_slot(now, choices, mode, reason);
    }

    /// The answer to an admission given up on (see `admission_overdue`).
    fn late_admission(&mut self, now: Now, providers: Vec<String>, reply: CapacityReply) {
        let CapacityReply::Admitted { index, .. } = reply else {
            return;
        };
        let Some(provider) = providers.get(index) else {
            return;
        };
        if self.slot.held() == Some(provider.as_str()) && !self.timers.is_set(Timer::SlotRenew) {
            // The attempt went to this very provider: the slot is its own after all.
            self.timers.set(Timer::SlotRenew, now.instant + SLOT_RENEW);
            return;
        }
        let slot = self.slot.slot_id().to_string();
        self.apply_unanswered(
            provider.clone(),
            crate::capacity::CapacityDelta::Release {
                at: now.wall_ms,
                slot,
            },
        );
    }

    /// Sends a capacity change nothing waits on (a give-back, a renewal).
    fn apply_unanswered(&mut self, provider: String, delta: crate::capacity::CapacityDelta) {
        self.wire.push(Action::Capacity {
            id: 0,
            op: CapacityOp::Apply { provider, delta },
            reply: false,
        });
    }

    /// `wanted`, then the candidates a failover from it would take, one model per provider.
    fn admission_choices(&self, now: Now, wanted: ModelInfo) -> Vec<ModelInfo> {
        let ranked = candidates::rank(&wanted, self.pi.pool(), &self.filter(now));
        let mut out = vec![wanted];
        for m in ranked {
            if !out.iter().any(|c| c.provider == m.provider) {
                out.push(m);
            }
        }
        out
    }

    /// The store's answer to capacity operation `id`.
    pub(super) fn on_capacity(&mut self, now: Now, id: u64, reply: CapacityReply) {
        if let Some(providers) = self.slot.take_overdue(id) {
            return self.late_admission(now, providers, reply);
        }
        if !self.slot.is_latest(id) {
            return;
        }
        match self.phase.clone() {
            Phase::Admitting {
                id: asked,
                choices,
                mode,
                reason,
            } if asked == id => {
                self.timers.stop(Timer::SlotGrace);
                self.on_admission(now, choices, mode, reason, reply);
            }
            Phase::Refusing {
                id: asked,
                model,
                mode,
                verdict,
                error,
            } if asked == id => self.on_refusal(now, model, mode, verdict, &error, reply),
            _ => {}
        }
    }

    fn on_admission(
        &mut self,
        now: Now,
        choices: Vec<ModelInfo>,
        mode: Redispatch,
        reason: SwitchReason,
        reply: CapacityReply,
    ) {
        let index = match reply {
            CapacityReply::Admitted {
                index,
                limit,
                in_flight,
            } => {
                let Some(model) = choices.get(index) else {
                    return self.send_without_slot(now, choices, mode, reason);
                };
                if self.slot.grant_stale(now.instant) {
                    // Granted, but the run was stopped for a whole TTL before it could use
                    // the slot: its lease may be gone and the slot another run's. Ask again.
                    let model = model.clone();
                    self.slot.granted(&model.provider, now.instant);
                    let preferred = choices.into_iter().next().unwrap_or(model);
                    return self.admit(now, preferred, mode, reason);
                }
                let waited = self.slot.waiting();
                self.slot.granted(&model.provider, now.instant);
                self.timers.set(Timer::SlotRenew, now.instant + SLOT_RENEW);
                if waited {
                    // Waiting in line is not failing: the round window starts again.
                    self.round.switched(now.instant);
                }
                self.note(
                    Note::Detail,
                    format!(
                        "capacity: slot on {} ({in_flight} of {limit} in flight)",
                        model.provider
                    ),
                );
                index
            }
            CapacityReply::Full { next_expiry, held } => {
                let Some(preferred) = choices.into_iter().next() else {
                    return;
                };
                self.slot.set_held_first(held);
                if self.slot.full(now.instant) {
                    self.note(
                        Note::Detail,
                        format!(
                            "capacity: every candidate is at its limit; {} waits for a slot",
                            preferred.key()
                        ),
                    );
                }
                // Asked again at the next poll, or when the first lease runs out if sooner.
                let mut check = now.instant + SLOT_POLL;
                if let Some(t) = next_expiry {
                    let left = Duration::from_millis(t.saturating_sub(now.wall_ms));
                    check = check.min(now.instant + left);
                }
                self.timers.set(Timer::SlotCheck, check);
                self.phase = Phase::AwaitingSlot {
                    preferred,
                    mode,
                    reason,
                };
                return;
            }
            CapacityReply::Applied(_) | CapacityReply::Unavailable => {
                return self.send_without_slot(now, choices, mode, reason);
            }
        };
        let model = choices[index].clone();
        let reason = if index == 0 {
            reason
        } else {
            SwitchReason::Capacity
        };
        self.phase = Phase::Dispatching;
        self.go_to(now, model, mode, reason);
    }

    /// The store could not be asked: the attempt goes out unslotted (the store is down and the
    /// per-process fallback failed too, which does not happen in practice: never lose the job).
    fn send_without_slot(
        &mut self,
        now: Now,
        choices: Vec<ModelInfo>,
        mode: Redispatch,
        reason: SwitchReason,
    ) {
        let Some(model) = choices.into_iter().next() else {
            return;
        };
        self.slot.granted(&model.provider, now.instant);
        self.phase = Phase::Dispatching;
        self.go_to(now, model, mode, reason);
    }

    /// Waiting for a slot: ask again (a timer, or a slot given back in this process).
    pub(super) fn slot_check(&mut self, now: Now) {
        let Phase::AwaitingSlot {
            preferred,
            mode,
            reason,
        } = self.phase.clone()
        else {
            return;
        };
        self.admit(now, preferred, mode, reason);
    }

    /// A slot was given back in this process: a run waiting for one asks again now.
    pub(super) fn on_slot_freed(&mut self, now: Now) {
        if matches!(self.phase, Phase::AwaitingSlot { .. }) {
            self.timers.stop(Timer::SlotCheck);
            self.slot_check(now);
        }
    }

    /// The run is waiting for a capacity slot (the driver wakes it when one is given back).
    pub fn awaiting_slot(&self) -> bool {
        matches!(self.phase, Phase::AwaitingSlot { .. })
    }

    /// How long this run has waited for capacity slots so far.
    pub fn capacity_wait_ms(&self, now: Now) -> u64 {
        self.slot.waited_ms(now.instant)
    }

    /// A capacity signal on `model`: the attempt is tallied as refused (no breaker, not a
    /// model failure), and the plan is to give the slot back as refused.
    pub(super) fn capacity_signal(
        &mut self,
        now: Now,
        model: &ModelInfo,
        verdict: &Classification,
        error: &str,
    ) {
        self.slot.set_pause(stated_pause_ms(verdict, now.wall_ms));
        let error = crate::redact::redact_capped(error, 300);
        self.note(
            Note::Detail,
            format!(
                "capacity signal from {} (matched {:?}): {error}",
                model.key(),
                verdict.matched
            ),
        );
        let duration_ms = self.attempt.ms(now.instant);
        self.tally.push(Attempt {
            model: model.key(),
            failure: Some(verdict.clone()),
            error: Some(error),
            duration_ms,
            usage: self.attempt.close(),
            capacity_signal: true,
            partial: None,
            silent_ms: None,
            rejected: None,
        });
    }

    /// A rate limit on a provider this run holds a slot on is a capacity signal — unless the
    /// provider said to wait longer than a capacity pause lasts: that is a rate limit with a
    /// stated reset (its breaker stays open until then).
    pub(super) fn is_capacity_signal(
        &self,
        now: Now,
        model: &ModelInfo,
        verdict: &Classification,
    ) -> bool {
        verdict.class == FailureClass::RateLimit
            && self.slot.enabled()
            && self.slot.held() == Some(model.provider.as_str())
            && stated_pause_ms(verdict, now.wall_ms) <= MAX_PAUSE_MS
    }

    /// Carries out [`super::Plan::SlowDown`]: stores the refusal and waits for its verdict.
    pub(super) fn refuse(&mut self, now: Now, mode: Redispatch) {
        let Some(model) = self.dispatch.current().cloned() else {
            return;
        };
        let (verdict, error) = self
            .tally
            .attempts()
            .last()
            .map(|a| (a.failure.clone(), a.error.clone().unwrap_or_default()))
            .unwrap_or_default();
        let verdict = verdict.unwrap_or(Classification {
            class: FailureClass::RateLimit,
            scope: crate::failover::classify::Scope::Provider,
            status: None,
            matched: String::new(),
            stated: None,
        });
        self.timers.stop(Timer::SlotRenew);
        let pause_ms = self.slot.take_pause();
        // Different per run (the seed) and per refusal (the attempts so far).
        let jitter = self.opts.spread_seed ^ (self.tally.attempts().len() as u64).rotate_left(32);
        let Some((provider, delta)) = self
            .slot
            .give_back(Ending::Refused { pause_ms, jitter }, now.wall_ms)
        else {
            // No slot after all: an ordinary rate limit.
            return self.as_rate_limit(now, model, mode, verdict, &error);
        };
        let id = self.slot.next_id();
        self.wire.push(Action::Capacity {
            id,
            op: CapacityOp::Apply { provider, delta },
            reply: true,
        });
        self.phase = Phase::Refusing {
            id,
            model,
            mode,
            verdict,
            error,
        };
    }

    fn on_refusal(
        &mut self,
        now: Now,
        model: ModelInfo,
        mode: Redispatch,
        verdict: Classification,
        error: &str,
        reply: CapacityReply,
    ) {
        match reply {
            CapacityReply::Applied(Decided::Refused(Verdict::RateLimited)) => {
                self.as_rate_limit(now, model, mode, verdict, error)
            }
            CapacityReply::Applied(Decided::Refused(Verdict::BackOff { until, step, .. })) => {
                self.busy(now, model, mode, until, step)
            }
            CapacityReply::Applied(Decided::Refused(Verdict::SlowDown(change))) => {
                if change.to != change.from {
                    self.note(
                        Note::Detail,
                        format!(
                            "capacity: {} limit {} → {}",
                            model.provider, change.from, change.to
                        ),
                    );
                }
                self.admit_elsewhere(now, model, mode);
            }
            // The store could not judge: back in line, as for a slowdown.
            _ => self.admit_elsewhere(now, model, mode),
        }
    }

    /// After a capacity signal on `refused`: the request goes to the next candidate with room;
    /// when none has any, it waits for a slot (on `refused` or any other), never straight
    /// back to the provider that just refused it.
    pub(super) fn admit_elsewhere(&mut self, now: Now, refused: ModelInfo, mode: Redispatch) {
        let reason = SwitchReason::Failure(FailureClass::RateLimit);
        let others: Vec<ModelInfo> = self
            .admission_choices(now, refused.clone())
            .into_iter()
            .filter(|m| m.provider != refused.provider)
            .collect();
        if others.is_empty() {
            // A busy key's back-off: asked again when it ends — if the bounds allow the wait.
            let mut check = now.instant + SLOT_POLL;
            if let Some((_, until)) = self
                .slot
                .backoff(now.wall_ms)
                .filter(|(p, _)| *p == refused.provider)
            {
                if self.may_wait_until(now, until).is_err() {
                    return;
                }
                check = now.instant + Duration::from_millis(until.saturating_sub(now.wall_ms));
            }
            self.slot.full(now.instant);
            self.timers.set(Timer::SlotCheck, check);
            self.phase = Phase::AwaitingSlot {
                preferred: refused,
                mode,
                reason,
            };
            return;
        }
        let id = self.slot.next_id();
        let op = CapacityOp::Admit {
            slot: self.slot.slot_id().to_string(),
            ttl_ms: self.slot.ttl_ms(),
            choices: self.slot.choices(&others),
            release: self.slot.take_deferred(),
            hold_first_ms: 0,
        };
        // When every other candidate is full too, the wait that follows includes `refused`:
        // whichever frees a slot first takes the request.
        self.ask_admission(now, id, op, others, mode, reason);
    }

    /// Refused at concurrency 1 again and again: the provider is rate-limited after all — its
    /// breaker opens as for any rate limit, and the run moves on.
    fn as_rate_limit(
        &mut self,
        now: Now,
        model: ModelInfo,
        mode: Redispatch,
        verdict: Classification,
        error: &str,
    ) {
        let keys = Keys::of(&model);
        self.round.mark_tried(keys.model.clone());
        self.open_breaker(now, &model, &keys, &verdict, error);
        self.phase = Phase::Dispatching;
        self.choose_and_switch(now, mode, SwitchReason::Failure(FailureClass::RateLimit));
    }

    /// Gives the held slot back, if any, and a deferred release (fire and forget: nothing
    /// waits on the answer).
    pub(super) fn give_back_slot(&mut self, now: Now, ending: Ending) {
        self.timers.stop(Timer::SlotRenew);
        let deferred = self.slot.take_deferred();
        let held = self.slot.give_back(ending, now.wall_ms);
        for (provider, delta) in deferred.into_iter().chain(held) {
            self.apply_unanswered(provider, delta);
        }
    }

    /// The attempt on the held slot failed (not for capacity): the slot is given up, its
    /// release sent with the next admission.
    pub(super) fn retire_slot(&mut self, now: Now) {
        self.timers.stop(Timer::SlotRenew);
        if let Some((provider, delta)) = self.slot.defer_release(now.wall_ms) {
            self.apply_unanswered(provider, delta);
        }
    }

    /// Renews the held slot's lease while its request runs — unless the lease has lapsed
    /// meanwhile (the process was stopped or starved past the TTL): another run may have
    /// taken the slot, and renewing would count this request on top of the limit. The request
    /// is stopped instead, and sent again once a slot is taken again (issue 29: a batch
    /// continued after Ctrl-Z went on past the cap).
    pub(super) fn renew_slot(&mut self, now: Now) {
        self.timers.stop(Timer::SlotRenew);
        if self.slot.lapsed(now.instant) && self.phase == Phase::Running && !self.interrupted {
            self.note(
                Note::Detail,
                "capacity: the slot's lease lapsed while the run was stopped; taking a slot \
                 again before sending again"
                    .to_string(),
            );
            self.plan = Some(super::Plan::Retake);
            self.phase = Phase::Settling;
            self.abort(now);
            return;
        }
        if let Some((provider, delta)) = self.slot.renewal(now.wall_ms) {
            self.apply_unanswered(provider, delta);
            self.slot.renewed(now.instant);
            self.timers.set(Timer::SlotRenew, now.instant + SLOT_RENEW);
        }
    }

    /// Carries out [`super::Plan::Retake`]: the stopped attempt is tallied (not a failure of
    /// the model), the lapsed slot goes back with the admission that takes one again, and the
    /// request goes out once it is granted.
    pub(super) fn retake(&mut self, now: Now, mode: Redispatch) {
        let Some(model) = self.dispatch.current().cloned() else {
            return;
        };
        let duration_ms = self.attempt.ms(now.instant);
        self.tally.push(Attempt {
            model: model.key(),
            failure: Some(Classification {
                class: FailureClass::RateLimit,
                scope: crate::failover::classify::Scope::Round,
                status: None,
                matched: "slot lease lapsed".to_string(),
                stated: None,
            }),
            error: Some("stopped: the run's capacity slot lapsed while it was stopped".to_string()),
            duration_ms,
            usage: self.attempt.close(),
            capacity_signal: true,
            partial: None,
            silent_ms: None,
            rejected: None,
        });
        self.phase = Phase::Dispatching;
        self.admit(now, model, mode, SwitchReason::Capacity);
    }
}

/// How long the provider said to wait before sending again (0: it did not say).
fn stated_pause_ms(verdict: &Classification, now_ms: u64) -> u64 {
    verdict
        .stated
        .as_ref()
        .map_or(0, |s| s.at_ms.saturating_sub(now_ms))
}
