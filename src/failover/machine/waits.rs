//! Waiting within the user's bounds (issue 32): the ledger of how long the run has waited and
//! for what, the `--max-wait` bound that ends a wait, what a busy key's back-off makes the run
//! do, and `--prefer-primary`'s wait for the primary. The rules themselves are
//! `failover::waiting`'s (pure, on instants); this module carries them out on the machine.
//!
//! - *The ledger* follows the phase after every input ([`Machine::track_wait`]): waiting for a
//!   reopening breaker, for a capacity slot (a busy key's back-off included) or for the primary
//!   is counted, and `Timer::WaitBound` is set at the instant `--max-wait` runs out.
//! - *A busy key* (a capacity signal with only the refused request in flight, answered
//!   `Verdict::BackOff` by the store): the run goes to a candidate with room, or waits out the
//!   back-off — unless that wait would pass the deadline or `--max-wait`: then it ends at once
//!   with a retry hint about that provider, in seconds.
//! - *The primary* (the model the run started from) is waited for, rather than failed over
//!   from, while its breaker stays open only until a reset its provider stated (or another run
//!   probes it) and that lies within the option's window, the deadline and `--max-wait`; its
//!   capacity pause likewise (the admission holds for it: `hold_first_ms`).

use std::time::Duration;

use super::timers::Timer;
use super::{Machine, Note, Phase, Redispatch, Round, SwitchReason, WAIT_POLL};
use crate::capacity::backoff;
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::failover::ending::Exhaustion;
use crate::failover::reopen::{Availability, RetryHint, human_ms};
use crate::failover::waiting::{Bound, Primary, Rules, WaitKind, Why};
use crate::timefmt::local_and_utc;

const WAIT_POLL_MS: u64 = WAIT_POLL.as_millis() as u64;

impl Machine {
    /// The user's bounds on this run's waiting.
    pub(super) fn wait_rules(&self) -> Rules {
        Rules {
            max_wait: self.cfg.max_wait,
            prefer_primary: self.cfg.prefer_primary,
            deadline: self.opts.deadline,
        }
    }

    /// How long this run has waited in all so far (breakers, resets, slots, back-off).
    pub fn waited_ms(&self, now: Now) -> u64 {
        millis(self.waited.total(now.instant))
    }

    /// How long this run has waited for its primary (`--prefer-primary`).
    pub fn primary_wait_ms(&self, now: Now) -> u64 {
        millis(self.waited.primary(now.instant))
    }

    /// Keeps the ledger in step with the phase (called after every input): a wait starts when
    /// the run enters a waiting phase and ends when it leaves it; while it waits, the
    /// `--max-wait` bound is a timer.
    pub(super) fn track_wait(&mut self, now: Now) {
        let kind = match &self.phase {
            Phase::Waiting { primary: true, .. } => Some(WaitKind::Primary),
            Phase::Waiting { .. } => Some(WaitKind::Reopening),
            Phase::AwaitingSlot { .. } if self.slot.held_first() => Some(WaitKind::Primary),
            Phase::AwaitingSlot { .. } => Some(WaitKind::Capacity),
            _ => None,
        };
        match kind {
            Some(kind) => {
                self.waited.begin(now.instant, kind);
                match self.wait_rules().open_wait_limit(&self.waited, now.instant) {
                    Some((at, Bound::MaxWait)) => self.timers.set(Timer::WaitBound, at),
                    // The deadline stops the run from outside (exit 124).
                    _ => self.timers.stop(Timer::WaitBound),
                }
            }
            None => {
                self.waited.end(now.instant);
                self.timers.stop(Timer::WaitBound);
            }
        }
    }

    /// `Timer::WaitBound`: the run has waited all `--max-wait` allows; it ends with the
    /// failure it was waiting out.
    pub(super) fn wait_bound_reached(&mut self, now: Now) {
        self.timers.stop(Timer::WaitBound);
        if self.waited.current().is_none() || self.interrupted {
            return;
        }
        self.note(
            Note::Wait,
            format!(
                "waited {} in all: --max-wait reached, giving up",
                human_ms(self.waited_ms(now))
            ),
        );
        self.exhaust(now, self.max_wait_exhaustion());
    }

    pub(super) fn max_wait_exhaustion(&self) -> Exhaustion {
        Exhaustion::MaxWait {
            limit_ms: self.cfg.max_wait.map_or(0, millis),
        }
    }

    /// A wait from now until `until_ms` (wall) is about to start: `Ok` when the bounds allow
    /// it, else the run has ended (past the deadline: exhausted now, nothing gained by timing
    /// out later; past `--max-wait`: ended by it).
    pub(super) fn may_wait_until(&mut self, now: Now, until_ms: u64) -> Result<(), ()> {
        let until = now.instant + Duration::from_millis(until_ms.saturating_sub(now.wall_ms));
        match self.wait_rules().may_wait(&self.waited, now.instant, until) {
            Ok(()) => Ok(()),
            Err(Bound::Deadline) => {
                self.exhaust(now, Exhaustion::NoCandidate);
                Err(())
            }
            Err(Bound::MaxWait) => {
                self.exhaust(now, self.max_wait_exhaustion());
                Err(())
            }
        }
    }

    /// The store answered a capacity signal on `model` with a busy key's back-off until
    /// `until_ms` (wall), refusal `step` in a row: other clients use the key. The run goes to a
    /// candidate with room, or waits (see `admit_elsewhere`); the primary, under
    /// `--prefer-primary`, is waited for.
    pub(super) fn busy(
        &mut self,
        now: Now,
        model: ModelInfo,
        mode: Redispatch,
        until_ms: u64,
        step: u32,
    ) {
        let left = until_ms.saturating_sub(now.wall_ms);
        self.slot.backed_off(&model.provider, until_ms);
        self.note(
            Note::Retry,
            format!(
                "busy: {} refused with only this request in flight (other clients are using the \
                 key); leaving it alone for {} (back-off {step} of {})",
                model.provider,
                human_ms(left),
                backoff::STEPS
            ),
        );
        if self.is_primary(&model) && self.primary_hold_ms(now) >= left {
            // The admission holds for the primary's pause (see `admit`).
            return self.admit(now, model, mode, SwitchReason::Capacity);
        }
        self.admit_elsewhere(now, model, mode);
    }

    /// The retry hint of a run that ends while a busy key's back-off runs: about that
    /// provider, in seconds — not about another candidate's breaker.
    pub(super) fn busy_hint(&self, now: Now) -> Option<RetryHint> {
        let (provider, until) = self.slot.backoff(now.wall_ms)?;
        let after = until.saturating_sub(now.wall_ms).div_ceil(1000) * 1000;
        Some(RetryHint {
            could_help: true,
            retry_after_ms: Some(after),
            reason: format!(
                "retrying later could help: {provider} is busy with other clients' requests; \
                 try again in {}s",
                after / 1000
            ),
        })
    }

    /// `model` is this run's primary and `--prefer-primary` is on.
    pub(super) fn is_primary(&self, model: &ModelInfo) -> bool {
        self.cfg.prefer_primary.is_some()
            && self
                .dispatch
                .start_key()
                .is_some_and(|k| k == model.key().as_str())
    }

    /// How long an admission may hold for the primary's capacity pause now (0: not at all).
    pub(super) fn primary_hold_ms(&self, now: Now) -> u64 {
        millis(self.wait_rules().primary_hold(&self.waited, now.instant))
    }

    /// The primary, when `--prefer-primary` is on and it can take this request at all.
    fn primary(&self) -> Option<ModelInfo> {
        self.cfg.prefer_primary?;
        let key = self.dispatch.start_key()?;
        self.static_candidates()
            .into_iter()
            .find(|m| m.key().as_str() == key)
    }

    /// When the primary is usable again (wall ms) and whether its provider stated it, if what
    /// blocks it is a reset its provider stated or another run's probe of it.
    fn primary_back(&self, now: Now, primary: &ModelInfo) -> Option<(u64, Option<u64>)> {
        match self.shared.availability(primary, now.wall_ms) {
            Availability::Later { at_ms, what, .. } if what.stated_at.is_some() => {
                Some((at_ms, what.stated_at))
            }
            // A probe under way usually ends long before its lease would: look again soon.
            Availability::Later { at_ms, what, .. } if what.class.is_none() => {
                Some((at_ms.min(now.wall_ms.saturating_add(WAIT_POLL_MS)), None))
            }
            _ => None,
        }
    }

    /// Would the run wait for its primary now, after `current` failed (`Plan::AwaitPrimary`)?
    pub(super) fn should_await_primary(&self, now: Now, current: &ModelInfo) -> bool {
        if !self.is_primary(current) {
            return false;
        }
        let Some(primary) = self.primary() else {
            return false;
        };
        self.primary_back(now, &primary).is_some_and(|(at, _)| {
            let until = now.instant + Duration::from_millis(at.saturating_sub(now.wall_ms));
            self.wait_rules()
                .primary(&self.waited, now.instant, until)
                .eq(&Primary::Wait)
        })
    }

    /// Waits for the primary if `--prefer-primary` says to (see the module doc); `false` when
    /// it does not, and the run fails over as without the option.
    pub(super) fn wait_for_primary(&mut self, now: Now, mode: Redispatch) -> bool {
        if self.interrupted {
            return false;
        }
        let Some(primary) = self.primary() else {
            return false;
        };
        let Some((at_ms, stated)) = self.primary_back(now, &primary) else {
            return false;
        };
        let until = now.instant + Duration::from_millis(at_ms.saturating_sub(now.wall_ms));
        match self.wait_rules().primary(&self.waited, now.instant, until) {
            Primary::Wait => {}
            Primary::FailOver(why) => {
                let why = match why {
                    Why::NotAsked => return false,
                    Why::PastWindow => "past the --prefer-primary window",
                    Why::Bound(Bound::Deadline) => "past the deadline",
                    Why::Bound(Bound::MaxWait) => "past --max-wait",
                };
                self.note(
                    Note::Detail,
                    format!("not waiting for the primary {}: {why}", primary.key()),
                );
                return false;
            }
        }
        // Nothing is sent while waiting: a slot goes back now.
        self.give_back_slot(now, super::slot::Ending::Released);
        // After a stated reset, this run's place in the restart spread, bounds allowing.
        let spread = stated
            .map(|_| {
                Duration::from_millis(self.opts.spread_seed % (super::judge::RESTART_SPREAD_MS + 1))
            })
            .filter(|s| {
                self.wait_rules()
                    .primary(&self.waited, now.instant, until + *s)
                    .eq(&Primary::Wait)
            });
        let until = until + spread.unwrap_or_default();
        let already = matches!(self.phase, Phase::Waiting { primary: true, .. });
        if !already {
            let why = match stated {
                Some(at) => format!(
                    "{} stated its limit resets at {}",
                    primary.provider,
                    local_and_utc(at, self.opts.local_offset)
                ),
                None => "another run is probing it".to_string(),
            };
            self.note(
                Note::Wait,
                format!(
                    "waiting {} for the primary {} ({why}) instead of failing over \
                     (--prefer-primary {})",
                    human_ms(millis(until.saturating_duration_since(now.instant))),
                    primary.key(),
                    human_ms(self.cfg.prefer_primary.map_or(0, millis))
                ),
            );
        }
        self.phase = Phase::Waiting {
            mode,
            until,
            not_before: spread.map(|_| until),
            primary: true,
        };
        self.timers
            .set(Timer::WaitCheck, until.min(now.instant + WAIT_POLL));
        true
    }

    /// `--explain`: how this run would wait, and what it would do about its primary now.
    pub(super) fn explain_waiting(&self, now: Now) -> crate::failover::explain::Waiting {
        crate::failover::explain::Waiting {
            max_wait_ms: self.cfg.max_wait.map(millis),
            prefer_primary_ms: self.cfg.prefer_primary.map(millis),
            primary: self.explain_primary(now),
            busy_backoff_first_ms: backoff::ceiling_ms(1) / 2,
            busy_backoff_limit_ms: backoff::LIMIT_MS,
            busy_backoff_total_ms: backoff::total_limit_ms(),
        }
    }

    /// With `--prefer-primary`: the sentence `--explain` says about the primary.
    fn explain_primary(&self, now: Now) -> Option<String> {
        self.cfg.prefer_primary?;
        let Some(primary) = self.primary() else {
            return Some("the start model cannot take this request: nothing to wait for".into());
        };
        let key = primary.key();
        if self.shared.blocked(&primary, now.wall_ms).is_none() {
            return Some(format!("{key} is usable: it is tried first"));
        }
        let Some((at_ms, stated)) = self.primary_back(now, &primary) else {
            return Some(format!(
                "{key} is blocked without a stated reset: the run would go to the backups"
            ));
        };
        let left = at_ms.saturating_sub(now.wall_ms);
        let why = match stated {
            Some(at) => format!(
                "{} stated its limit resets at {}",
                primary.provider,
                local_and_utc(at, self.opts.local_offset)
            ),
            None => "another run is probing it".to_string(),
        };
        let until = now.instant + Duration::from_millis(left);
        Some(
            match self.wait_rules().primary(&self.waited, now.instant, until) {
                Primary::Wait => format!(
                    "{key} is back in {} ({why}): the run would wait for it instead of going to \
                     the backups",
                    human_ms(left)
                ),
                Primary::FailOver(why_not) => format!(
                    "{key} is back in {} ({why}), {}: the run would go to the backups",
                    human_ms(left),
                    match why_not {
                        Why::PastWindow | Why::NotAsked => "past the --prefer-primary window",
                        Why::Bound(Bound::Deadline) => "past the deadline",
                        Why::Bound(Bound::MaxWait) => "past --max-wait",
                    }
                ),
            },
        )
    }

    /// A check while waiting for the primary: the primary when it is usable, the wait again
    /// while it is still to come within the bounds; `false` when neither (the run fails over
    /// as after any wait).
    pub(super) fn wake_for_primary(&mut self, now: Now, mode: Redispatch) -> bool {
        let Some(primary) = self.primary() else {
            return false;
        };
        if self.shared.blocked(&primary, now.wall_ms).is_none() {
            self.round = Round::default();
            self.note(
                Note::Wait,
                format!("the primary {} is usable again; resuming", primary.key()),
            );
            self.phase = super::Phase::Dispatching;
            self.timers.stop(Timer::WaitCheck);
            self.go_to(now, primary, mode, SwitchReason::Reopened);
            return true;
        }
        self.wait_for_primary(now, mode)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
