//! The AIMD rules of the module docs: what a clean answer and a capacity signal do to the limit.

use super::{
    Capacity, Change, DECREASE_DEN, DECREASE_NUM, Limits, MAX_PROBE_BACKOFF, PROBE_ANSWERS,
    PROBE_WINDOWS, Verdict, backoff, count,
};

impl Capacity {
    /// The clean answer on `slot` gives the slot back, ends a run of refusals at 1 and may
    /// raise the limit.
    pub fn answered(&mut self, now: u64, slot: &str, limits: Limits) -> Change {
        self.tidy(now);
        let from = self.effective(limits);
        let in_flight = self.in_flight_with(slot);
        self.note_load(in_flight, from);
        // Only a request sent under the current limit is evidence that the limit works: an
        // older one says nothing of the latest raise, whose own request may still be refused.
        let evidence = self
            .leases
            .remove(slot)
            .is_some_and(|l| l.generation == self.generation);
        self.refusals_at_one = 0;
        if !evidence {
            return Change { from, to: from };
        }
        self.clean = self.clean.saturating_add(1);
        let current = self.current(limits);
        if self.saturated && self.clean >= self.needed(current) && current < limits.ceiling() {
            if self.refused_at > 0 && current >= self.refused_at {
                // A probe of the refused level held for a window: the cap has moved.
                self.refused_at = 0;
                self.failed_probes = 0;
            }
            self.set_limit(current + 1);
        }
        Change {
            from,
            to: self.effective(limits),
        }
    }

    /// The capacity signal on `slot` gives the slot back and cuts or bounds the limit; with
    /// no other request in flight it pauses the provider for a back-off placed by `jitter`
    /// (see [`backoff`]), or, once the back-off has grown to its limit, calls it a rate limit.
    pub fn refused(&mut self, now: u64, slot: &str, limits: Limits, jitter: u64) -> Verdict {
        self.tidy(now);
        let from = self.effective(limits);
        // What the provider saw: every live lease, this one included.
        let n = self.in_flight_with(slot);
        let admitted_now = self
            .leases
            .remove(slot)
            .is_some_and(|l| l.generation == self.generation);
        if n <= 1 {
            self.refusals_at_one = self.refusals_at_one.saturating_add(1);
        }
        if admitted_now {
            if self.refused_at > 0 && n >= self.refused_at {
                self.failed_probes = self.failed_probes.saturating_add(1);
            }
            let base = u64::from(from.min(n));
            let cut = base * u64::from(DECREASE_NUM) / u64::from(DECREASE_DEN);
            let cut = u32::try_from(cut).unwrap_or(u32::MAX);
            self.refused_at = n;
            self.congested = true;
            self.set_limit(cut.min(n.saturating_sub(1)).max(1));
        } else if n <= from {
            // Admitted under an older, higher limit, but refused with no more in flight than
            // the current limit allows: the current limit is too high too. No new cut of ¾
            // (that would cascade), just never as many as were refused.
            self.refused_at = match self.refused_at {
                0 => n,
                r => r.min(n),
            };
            self.congested = true;
            let bound = n.saturating_sub(1).max(1);
            if bound < from {
                self.set_limit(bound);
            }
        }
        let change = Change {
            from,
            to: self.effective(limits),
        };
        if n > 1 {
            return Verdict::SlowDown(change);
        }
        // Nothing of ours explains it: other clients use the key. Leave it alone for a while.
        let step = self.refusals_at_one;
        if backoff::rate_limited(step) {
            return Verdict::RateLimited;
        }
        self.pause(now, backoff::delay_ms(step, jitter));
        Verdict::BackOff {
            change,
            until: self.paused_until.max(now),
            step,
        }
    }

    /// The learned limit, or this caller's start while nothing is learned. Before any cut
    /// (slow start, or after the refusals were forgotten) a lower learned limit is no reason
    /// to start below the caller's start.
    pub(super) fn current(&self, limits: Limits) -> u32 {
        match (self.limit, self.congested) {
            (0, _) => limits.start(),
            (n, false) => n.max(limits.start()),
            (n, true) => n,
        }
    }

    /// The limit this caller obeys.
    pub(super) fn effective(&self, limits: Limits) -> u32 {
        self.current(limits).clamp(1, limits.ceiling())
    }

    /// Records that `in_flight` requests were out at once under `limit`.
    pub(super) fn note_load(&mut self, in_flight: u32, limit: u32) {
        if in_flight >= limit {
            self.saturated = true;
        }
    }

    /// Live leases, counting `slot` even if its lease is gone: its request was in flight.
    fn in_flight_with(&self, slot: &str) -> u32 {
        let missing = usize::from(!self.leases.contains_key(slot));
        count(self.leases.len().saturating_add(missing))
    }

    /// Clean answers (while saturated) before the limit rises from `current`.
    pub(super) fn needed(&self, current: u32) -> u32 {
        if !self.congested {
            return 1; // slow start
        }
        if self.refused_at > 0 && current.saturating_add(1) == self.refused_at {
            // The next step is onto the level last refused: a probe.
            let base = PROBE_ANSWERS.max(PROBE_WINDOWS.saturating_mul(current));
            return base.saturating_mul(1 << self.failed_probes.min(MAX_PROBE_BACKOFF));
        }
        current.max(1)
    }

    /// A new limit starts a new generation and a new window.
    fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
        self.generation = self.generation.wrapping_add(1);
        self.clean = 0;
        self.saturated = false;
    }
}
