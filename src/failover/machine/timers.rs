//! Every deadline the machine keeps, in one table: the driver asks only for the earliest
//! ([`TimerTable::next_timeout`]) and calls `handle_timeout` then; each handler asks the table
//! which timers have expired. Setting a timer replaces it; stopping one that is not set is a
//! no-op.

use std::time::Instant;

/// The machine's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The model must start streaming by then (the first-response watchdog).
    FirstResponse,
    /// The stream must make progress by then (the stall watchdog).
    Stall,
    /// Pi must settle by then after our `abort`.
    Abort,
    /// Pi must answer the awaited commands by then.
    Response,
    /// While waiting for a breaker to reopen: re-read shared health then.
    WaitCheck,
    /// Stop waiting for the store's health then (see `HEALTH_GRACE`).
    HealthGrace,
    /// Waiting for a capacity slot: ask the store again then (another process may have given
    /// one back).
    SlotCheck,
    /// Renew the held capacity slot's lease then.
    SlotRenew,
    /// Stop waiting for the store to grant a slot then (see `ADMIT_GRACE`).
    SlotGrace,
    /// `--max-wait`: the run has waited all it may by then (set while it waits).
    WaitBound,
    /// The running attempt's model has no pace yet: read shared health again then, to judge
    /// its watchdogs again once other answers establish it.
    PaceCheck,
}

const COUNT: usize = 11;

impl Timer {
    fn index(self) -> usize {
        self as usize
    }
}

/// Which watchdog guards the running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watchdog {
    FirstResponse,
    Stall,
}

impl Watchdog {
    fn timer(self) -> Timer {
        match self {
            Watchdog::FirstResponse => Timer::FirstResponse,
            Watchdog::Stall => Timer::Stall,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct TimerTable {
    at: [Option<Instant>; COUNT],
}

impl TimerTable {
    pub(super) fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer.index()] = Some(at);
    }

    /// Sets `timer` unless it is already running (a later command must not push back the
    /// deadline of an earlier one still unanswered).
    pub(super) fn set_if_stopped(&mut self, timer: Timer, at: Instant) {
        let slot = &mut self.at[timer.index()];
        if slot.is_none() {
            *slot = Some(at);
        }
    }

    pub(super) fn stop(&mut self, timer: Timer) {
        self.at[timer.index()] = None;
    }

    pub(super) fn stop_all(&mut self) {
        self.at = [None; COUNT];
    }

    pub(super) fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer.index()]
    }

    pub(super) fn is_set(&self, timer: Timer) -> bool {
        self.get(timer).is_some()
    }

    /// `timer` is set and its time has come.
    pub(super) fn expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| now >= t)
    }

    /// The earliest deadline, when any timer is set.
    pub(super) fn next_timeout(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Arms one watchdog; at most one guards an attempt, so the other stops.
    pub(super) fn watch(&mut self, watchdog: Watchdog, at: Instant) {
        self.stop_watchdogs();
        self.set(watchdog.timer(), at);
    }

    pub(super) fn stop_watchdogs(&mut self) {
        self.stop(Timer::FirstResponse);
        self.stop(Timer::Stall);
    }

    /// The watchdog that is armed, with its deadline.
    pub(super) fn watchdog(&self) -> Option<(Watchdog, Instant)> {
        [Watchdog::FirstResponse, Watchdog::Stall]
            .into_iter()
            .find_map(|w| self.get(w.timer()).map(|t| (w, t)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_earliest_set_timer_is_next_and_watchdogs_exclude_each_other() {
        let t0 = crate::clock::now().instant;
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::Response, at(500));
        t.watch(Watchdog::FirstResponse, at(300));
        assert_eq!(t.next_timeout(), Some(at(300)));
        t.watch(Watchdog::Stall, at(900));
        assert_eq!(t.watchdog(), Some((Watchdog::Stall, at(900))));
        assert!(!t.is_set(Timer::FirstResponse));
        assert_eq!(t.next_timeout(), Some(at(500)));
        t.set_if_stopped(Timer::Response, at(100));
        assert_eq!(
            t.get(Timer::Response),
            Some(at(500)),
            "a running timer stays"
        );
        assert!(!t.expired(Timer::Response, at(499)));
        assert!(t.expired(Timer::Response, at(500)));
        t.stop(Timer::Response);
        assert_eq!(t.next_timeout(), Some(at(900)));
        t.stop_all();
        assert_eq!(t.next_timeout(), None);
        assert_eq!(t.watchdog(), None);
    }
}
