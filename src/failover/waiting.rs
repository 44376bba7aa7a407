//! How long one job may wait, and for what (issue 32). Pure: instants and durations come in;
//! nothing here reads a clock.
//!
//! A job waits in four ways: for a breaker to reopen (`--wait`), for a reset its provider
//! stated, for a capacity slot, and through a back-off on a busy key. Each kind used to be
//! bounded only by the job's deadline, so one job whose only candidate was down held a batch for
//! minutes after every other job was done. Two user bounds are kept here:
//!
//! - `--max-wait` ([`Rules::max_wait`]): the most a job waits *in all*, every kind counted
//!   ([`Waited`]). A wait whose end is known (a reopening, a reset, a back-off) starts only if
//!   it ends within what is left ([`Rules::may_wait`]); one whose end is not known (a slot) is
//!   given up when the bound comes ([`Rules::open_wait_limit`]). Either way the job ends with
//!   its failure (exit 1), and says it was this bound.
//! - `--prefer-primary` ([`Rules::prefer_primary`]): waiting for the primary (the job's start
//!   model) instead of failing over, when the primary's breaker states a reset, or its provider
//!   a capacity pause, within that window ([`Rules::primary`]). Past the window, the deadline
//!   or the `--max-wait` left, the job fails over as without the option.
//!
//! The deadline (`--timeout-ms`) bounds both: no wait is started that would end at or past it
//! (the job would only time out later instead of failing now, with nothing gained).

use std::time::{Duration, Instant};

/// The user's bounds on waiting for one job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// `--max-wait`: the most the job may wait in all (`None`: up to the deadline).
    pub max_wait: Option<Duration>,
    /// `--prefer-primary`: how far ahead a primary's stated reset or capacity pause may lie for
    /// the job to wait for it rather than fail over (`None`: fail over as always).
    pub prefer_primary: Option<Duration>,
    /// The job's deadline.
    pub deadline: Option<Instant>,
}

/// What stops a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The wait would end at or past the job's deadline.
    Deadline,
    /// The wait would take the job's waiting past `--max-wait`.
    MaxWait,
}

/// What a job waits for (only what it is told apart by: the summary counts primary waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// A breaker's reopening or a stated reset, with `--wait` (any candidate).
    Reopening,
    /// A capacity slot, or a busy key's back-off.
    Capacity,
    /// The primary, under `--prefer-primary`.
    Primary,
}

/// The primary rule's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primary {
    /// Wait for the primary until it reopens.
    Wait,
    /// Go to the backups: the option is off, or the reopening lies past its window, the
    /// deadline or the `--max-wait` left.
    FailOver(Why),
}

/// Why the job does not wait for its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// `--prefer-primary` was not given.
    NotAsked,
    /// The reopening lies past the option's window (or the job already waited that long).
    PastWindow,
    Bound(Bound),
}

impl Rules {
    /// May a wait from `now` to `until` (a known end) start, after `waited` so far?
    pub fn may_wait(&self, waited: &Waited, now: Instant, until: Instant) -> Result<(), Bound> {
        if self.deadline.is_some_and(|d| until >= d) {
            return Err(Bound::Deadline);
        }
        let wait = until.saturating_duration_since(now);
        match self.max_wait {
            Some(max) if waited.total(now).saturating_add(wait) > max => Err(Bound::MaxWait),
            _ => Ok(()),
        }
    }

    /// The latest a wait of unknown end (a capacity slot) may go on from `now`, and what ends
    /// it then; `None`: nothing bounds it (no deadline, no `--max-wait`).
    pub fn open_wait_limit(&self, waited: &Waited, now: Instant) -> Option<(Instant, Bound)> {
        let by_max = self.max_wait.and_then(|max| {
            let left = max.saturating_sub(waited.total(now));
            now.checked_add(left).map(|t| (t, Bound::MaxWait))
        });
        let by_deadline = self.deadline.map(|d| (d, Bound::Deadline));
        match (by_max, by_deadline) {
            // The earlier one ends it; at a tie, the user's own bound is the one to name.
            (Some(m), Some(d)) => Some(if m.0 <= d.0 { m } else { d }),
            (m, d) => m.or(d),
        }
    }

    /// How long an admission may hold for the primary's capacity pause from `now`: what is
    /// left of the option's window, of `--max-wait` and of the deadline (zero without the
    /// option).
    pub fn primary_hold(&self, waited: &Waited, now: Instant) -> Duration {
        let Some(window) = self.prefer_primary else {
            return Duration::ZERO;
        };
        let mut hold = window.saturating_sub(waited.primary(now));
        if let Some(max) = self.max_wait {
            hold = hold.min(max.saturating_sub(waited.total(now)));
        }
        if let Some(d) = self.deadline {
            hold = hold.min(d.saturating_duration_since(now));
        }
        hold
    }

    /// Should the job wait for its primary, which becomes usable again at `reopens`, rather
    /// than fail over? Only within the option's window (what the job already waited for the
    /// primary counts), the deadline and the `--max-wait` left.
    pub fn primary(&self, waited: &Waited, now: Instant, reopens: Instant) -> Primary {
        let Some(window) = self.prefer_primary else {
            return Primary::FailOver(Why::NotAsked);
        };
        let wait = reopens.saturating_duration_since(now);
        if waited.primary(now).saturating_add(wait) > window {
            return Primary::FailOver(Why::PastWindow);
        }
        match self.may_wait(waited, now, reopens) {
            Ok(()) => Primary::Wait,
            Err(bound) => Primary::FailOver(Why::Bound(bound)),
        }
    }
}

/// How long a job has waited so far, in all and for its primary. One wait at a time: starting
/// another ends the one under way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waited {
    current: Option<(Instant, WaitKind)>,
    total: Duration,
    primary: Duration,
}

impl Waited {
    /// A wait of `kind` starts at `now` (one under way of another kind ends here; one of the
    /// same kind goes on).
    pub fn begin(&mut self, now: Instant, kind: WaitKind) {
        match self.current {
            Some((_, k)) if k == kind => {}
            Some(_) => {
                self.end(now);
                self.current = Some((now, kind));
            }
            None => self.current = Some((now, kind)),
        }
    }

    /// The wait under way, if any, ends at `now`.
    pub fn end(&mut self, now: Instant) {
        if let Some((since, kind)) = self.current.take() {
            let d = now.saturating_duration_since(since);
            self.total = self.total.saturating_add(d);
            if kind == WaitKind::Primary {
                self.primary = self.primary.saturating_add(d);
            }
        }
    }

    /// Waited in all up to `now`.
    pub fn total(&self, now: Instant) -> Duration {
        self.total.saturating_add(self.running(now, None))
    }

    /// Waited for the primary up to `now`.
    pub fn primary(&self, now: Instant) -> Duration {
        self.primary
            .saturating_add(self.running(now, Some(WaitKind::Primary)))
    }

    /// Waiting now, and for what.
    pub fn current(&self) -> Option<WaitKind> {
        self.current.map(|(_, k)| k)
    }

    fn running(&self, now: Instant, only: Option<WaitKind>) -> Duration {
        match self.current {
            Some((since, kind)) if only.is_none_or(|k| k == kind) => {
                now.saturating_duration_since(since)
            }
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
#[path = "waiting_tests.rs"]
mod tests;
