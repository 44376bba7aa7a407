//! The pace of the attempt under way (issue 31): the watchdog limits it runs under — derived
//! from its model's pace and re-judged as that pace becomes known, the first response cut short
//! by its share of a shared deadline — and what it measures of its own pace for the store.
//! Pure: every time is passed in; the machine turns [`Pacing::deadline`] into its watchdog timer.
//!
//! What counts: the first response is the first stream event after a request went out (a token,
//! thinking, a tool call — Pi's `message_update`), not the assistant's `message_start`, which
//! Pi sends when the headers arrive; a provider that sends headers and then nothing is silent.
//! Gaps are measured between stream events, never across a tool's run or a compaction.

use std::time::{Duration, Instant};

use super::timers::Watchdog;
use crate::pace::Sample;
use crate::pace::watchdog::{Limit, Watchdogs};

/// An attempt's share of a shared deadline (see [`crate::pace::share`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Share {
    /// The attempt waits for its first response until then, no longer.
    pub until: Instant,
    pub ms: u64,
    /// What was left of the deadline when the attempt started.
    pub remaining_ms: u64,
    /// Candidates left after this one.
    pub others: usize,
}

/// Which limit cut an attempt, for its failure and the `-v` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Cut {
    /// No first response within the first-response limit.
    FirstResponse(Limit),
    /// No first response within the attempt's share of the deadline (shorter than its limit).
    Share(Share),
    /// No stream progress within the stall limit.
    Stall(Limit),
}

#[derive(Debug, Clone)]
pub(super) struct Pacing {
    limits: Watchdogs,
    share: Option<Share>,
    /// The watchdog armed, and since when.
    armed: Option<(Watchdog, Instant)>,
    /// The longest first-response wait of the attempt's turns so far (ms).
    first_ms: Option<u64>,
    /// This turn's first response came.
    responded: bool,
    /// When this turn's request went out (kept through a stop, for exit 124's hint).
    turn_since: Option<Instant>,
    /// The last stream event (None across a tool run or a compaction).
    last_event: Option<Instant>,
    max_gap_ms: u64,
}

impl Pacing {
    pub(super) fn new(limits: Watchdogs, share: Option<Share>) -> Pacing {
        Pacing {
            limits,
            share,
            armed: None,
            first_ms: None,
            responded: false,
            turn_since: None,
            last_event: None,
            max_gap_ms: 0,
        }
    }

    pub(super) fn limits(&self) -> &Watchdogs {
        &self.limits
    }

    #[cfg(test)]
    pub(super) fn share(&self) -> Option<&Share> {
        self.share.as_ref()
    }

    /// A request went out (the prompt was accepted, a turn started): its first response is
    /// awaited from `now`.
    pub(super) fn awaiting(&mut self, now: Instant) {
        self.armed = Some((Watchdog::FirstResponse, now));
        self.turn_since = Some(now);
        self.responded = false;
        self.last_event = None;
    }

    /// Streaming (or waiting on a turn after a tool) is under way: a prompt response that
    /// arrives after the first events must not start the first-response wait again.
    pub(super) fn streaming(&self) -> bool {
        matches!(self.armed, Some((Watchdog::Stall, _)))
    }

    /// A stream event (or the end of a tool run or a compaction): progress.
    pub(super) fn progress(&mut self, now: Instant) {
        if let Some((Watchdog::FirstResponse, since)) = self.armed
            && !self.responded
        {
            let waited = millis(now.saturating_duration_since(since));
            self.first_ms = Some(self.first_ms.map_or(waited, |f| f.max(waited)));
            self.responded = true;
            // The deadline's share bounds the wait for the first response only.
            self.share = None;
        }
        if let Some(last) = self.last_event {
            self.max_gap_ms = self
                .max_gap_ms
                .max(millis(now.saturating_duration_since(last)));
        }
        self.last_event = Some(now);
        self.armed = Some((Watchdog::Stall, now));
    }

    /// A tool runs or Pi compacts: no watchdog, and no gap is measured across it.
    pub(super) fn pause(&mut self) {
        self.armed = None;
        self.last_event = None;
    }

    /// Nothing to watch (Pi's auto-retry backoff, the attempt settled).
    pub(super) fn stop(&mut self) {
        self.armed = None;
    }

    /// Since when the first response of the current turn is awaited, while it is.
    pub(super) fn waiting_since(&self) -> Option<Instant> {
        self.turn_since.filter(|_| !self.responded)
    }

    /// New limits (the model's pace became known, or changed); `true` when they differ.
    pub(super) fn rejudge(&mut self, limits: Watchdogs) -> bool {
        let changed = limits != self.limits;
        self.limits = limits;
        changed
    }

    /// The armed watchdog and when it fires.
    pub(super) fn deadline(&self) -> Option<(Watchdog, Instant)> {
        let (which, since) = self.armed?;
        Some(match which {
            Watchdog::FirstResponse => {
                let own = since + self.limits.first_response.duration();
                let at = match self.share {
                    Some(s) if s.until < own => s.until,
                    _ => own,
                };
                (which, at)
            }
            Watchdog::Stall => (which, since + self.limits.stall.duration()),
        })
    }

    /// Which limit the armed watchdog enforces at its deadline.
    pub(super) fn cut(&self) -> Option<Cut> {
        let (which, since) = self.armed?;
        Some(match which {
            Watchdog::Stall => Cut::Stall(self.limits.stall),
            Watchdog::FirstResponse => {
                let own = since + self.limits.first_response.duration();
                match self.share {
                    Some(s) if s.until < own => Cut::Share(s),
                    _ => Cut::FirstResponse(self.limits.first_response),
                }
            }
        })
    }

    /// What the attempt measured of its model's pace, as a clean answer's sample: `None` when
    /// no first response was seen (nothing was measured).
    pub(super) fn sample(&self, at_ms: u64, prompt_chars: u64) -> Option<Sample> {
        Some(Sample {
            at_ms,
            first_ms: self.first_ms?.max(1),
            gap_ms: self.max_gap_ms,
            prompt_chars,
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::watchdog::Basis;

    fn limits(first: u64, stall: u64) -> Watchdogs {
        Watchdogs {
            first_response: Limit {
                ms: first,
                basis: Basis::NoHistory { answers: 0 },
            },
            stall: Limit {
                ms: stall,
                basis: Basis::NoHistory { answers: 0 },
            },
        }
    }

    #[test]
    fn first_response_then_stalls_with_gaps_measured_between_events_only() {
        let t0 = crate::clock::now().instant;
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut p = Pacing::new(limits(90_000, 120_000), None);
        assert_eq!(p.deadline(), None);
        p.awaiting(at(0));
        assert_eq!(p.deadline(), Some((Watchdog::FirstResponse, at(90_000))));
        p.progress(at(1200));
        assert!(p.streaming());
        assert_eq!(p.deadline(), Some((Watchdog::Stall, at(121_200))));
        p.progress(at(1500));
        p.progress(at(2300));
        // A tool runs for a minute: no watchdog, no gap.
        p.pause();
        assert_eq!(p.deadline(), None);
        p.progress(at(62_300));
        // The next turn's first response takes 2 s: the longest first response counts.
        p.awaiting(at(62_400));
        p.progress(at(64_400));
        p.progress(at(64_500));
        assert_eq!(
            p.sample(99, 10),
            Some(Sample {
                at_ms: 99,
                first_ms: 2000,
                gap_ms: 800,
                prompt_chars: 10
            })
        );
    }

    #[test]
    fn the_share_cuts_the_first_response_only_and_only_when_shorter() {
        let t0 = crate::clock::now().instant;
        let at = |ms| t0 + Duration::from_millis(ms);
        let share = Share {
            until: at(10_000),
            ms: 10_000,
            remaining_ms: 20_000,
            others: 1,
        };
        let mut p = Pacing::new(limits(90_000, 120_000), Some(share));
        p.awaiting(at(0));
        assert_eq!(p.deadline(), Some((Watchdog::FirstResponse, at(10_000))));
        assert_eq!(p.cut(), Some(Cut::Share(share)));
        // A derived limit shorter than the share wins.
        assert!(p.rejudge(limits(4000, 3000)));
        assert!(!p.rejudge(limits(4000, 3000)));
        assert_eq!(p.deadline(), Some((Watchdog::FirstResponse, at(4000))));
        assert!(matches!(p.cut(), Some(Cut::FirstResponse(l)) if l.ms == 4000));
        // Once the first response came, the share is gone.
        p.progress(at(3000));
        p.awaiting(at(5000));
        assert_eq!(p.deadline(), Some((Watchdog::FirstResponse, at(9000))));
        assert_eq!(p.share(), None);
        p.stop();
        assert_eq!(p.cut(), None);
        assert_eq!(p.sample(1, 1).map(|s| s.first_ms), Some(3000));
        assert_eq!(Pacing::new(limits(1, 1), None).sample(1, 1), None);
    }
}
