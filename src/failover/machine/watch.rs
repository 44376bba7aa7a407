//! Watching an attempt by its model's pace (issue 31), `impl Machine`: the watchdog limits
//! derived when the request goes out ([`Pacing`]), the deadline's share when other candidates
//! are left, the re-judging while the attempt runs (every second while its model has no pace
//! yet, and whenever shared health comes in), the cut and what it tells the breakers, and the
//! clean answer's sample for the store.

use std::time::Duration;

use super::pacing::{Cut, Pacing, Share};
use super::timers::Timer;
use super::{Action, Machine, Note, WAIT_POLL};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::failover::candidates;
use crate::failover::classify::{Classification, FailureClass, SHARE_MARKER, Scope};
use crate::health::Delta;
use crate::pace::watchdog::{Bounds, Watchdogs};
use crate::pace::{secs, share};

/// What an image counts for in the prompt's size (its tokens, roughly, as characters).
const IMAGE_CHARS: u64 = 3000;

impl Machine {
    /// The prompt's size as the pace weighs it: its characters, and a fixed amount per image.
    pub(super) fn prompt_chars(&self) -> u64 {
        let text = u64::try_from(self.request.prompt().chars().count()).unwrap_or(u64::MAX);
        let images = u64::try_from(self.request.images().len()).unwrap_or(0);
        text.saturating_add(images.saturating_mul(IMAGE_CHARS))
    }

    fn bounds(&self) -> Bounds {
        Bounds {
            first_ceiling: self.cfg.first_response,
            stall_ceiling: self.cfg.stall,
            floor: self.cfg.watchdog_floor,
        }
    }

    /// The watchdogs `model` would run under at `now_ms`.
    pub(super) fn watchdogs_for(&self, model: &ModelInfo, now_ms: u64) -> Watchdogs {
        let pace = self
            .shared
            .health()
            .pace_of(&model.key(), now_ms, self.prompt_chars());
        Watchdogs::derive(pace.as_ref(), self.bounds())
    }

    /// Candidates that would be left after `current`, were it to fail now.
    pub(super) fn others_left(&self, now: Now, current: &ModelInfo) -> usize {
        candidates::rank(current, self.pi.pool(), &self.filter(now)).len()
    }

    /// The request went out on the current model: its watchdogs, and its share of the deadline
    /// when other candidates are left. Said with `-v`.
    pub(super) fn start_pacing(&mut self, now: Now) {
        let Some(model) = self.dispatch.current().cloned() else {
            return;
        };
        let limits = self.watchdogs_for(&model, now.wall_ms);
        let share = self.opts.deadline.and_then(|deadline| {
            let remaining = deadline.saturating_duration_since(now.instant);
            let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
            let others = self.others_left(now, &model);
            let ms = share::first_response_share(remaining_ms, others)?;
            Some(Share {
                until: now.instant + Duration::from_millis(ms),
                ms,
                remaining_ms,
                others,
            })
        });
        let key = model.key();
        self.note(
            Note::Detail,
            format!(
                "watchdogs for {key}: first response {}, stall {}",
                limits.first_response, limits.stall
            ),
        );
        if let Some(s) = share.filter(|s| s.ms < limits.first_response.ms) {
            self.note(Note::Detail, share_line(&key, &s));
        }
        self.pacing = Some(Pacing::new(limits, share));
        if !self.streaming() {
            self.awaiting(now);
        }
        self.keep_pace_checked(now);
    }

    fn streaming(&self) -> bool {
        self.pacing.as_ref().is_some_and(Pacing::streaming)
    }

    fn watching(&self) -> bool {
        self.attempt.tools_idle() && !self.interrupted && !self.aborting()
    }

    /// A request of the attempt went out (a turn started): its first response is awaited.
    pub(super) fn awaiting(&mut self, now: Now) {
        if !self.watching() {
            return;
        }
        if let Some(p) = &mut self.pacing {
            p.awaiting(now.instant);
        }
        self.sync_watchdog();
    }

    /// A stream event, or the end of a tool run or a compaction.
    pub(super) fn progress(&mut self, now: Now) {
        if !self.watching() {
            return;
        }
        if let Some(p) = &mut self.pacing {
            p.progress(now.instant);
        }
        self.sync_watchdog();
    }

    /// A tool runs or Pi compacts: nothing is watched meanwhile.
    pub(super) fn pause_watch(&mut self) {
        if let Some(p) = &mut self.pacing {
            p.pause();
        }
        self.timers.stop_watchdogs();
    }

    /// Nothing is watched until the next request goes out (Pi's backoff, a settled attempt).
    pub(super) fn stop_watch(&mut self) {
        if let Some(p) = &mut self.pacing {
            p.stop();
        }
        self.timers.stop_watchdogs();
        self.timers.stop(Timer::PaceCheck);
    }

    /// The timer table follows the pacing's deadline.
    fn sync_watchdog(&mut self) {
        match self.pacing.as_ref().and_then(Pacing::deadline) {
            Some((which, at)) => self.timers.watch(which, at),
            None => self.timers.stop_watchdogs(),
        }
    }

    /// While the attempt's model has no pace, shared health is read again every second: the
    /// answers of other jobs and processes may establish it meanwhile.
    fn keep_pace_checked(&mut self, now: Now) {
        let unknown = self
            .pacing
            .as_ref()
            .is_some_and(|p| !p.limits().first_response.derived());
        if unknown {
            self.timers
                .set_if_stopped(Timer::PaceCheck, now.instant + WAIT_POLL);
        } else {
            self.timers.stop(Timer::PaceCheck);
        }
    }

    /// `Timer::PaceCheck` came: read shared health again (judged when it arrives).
    pub(super) fn check_pace(&mut self, now: Now) {
        self.timers.stop(Timer::PaceCheck);
        if self.pacing.is_some() && self.attempt.is_open() {
            self.wire.push(Action::ReloadHealth);
            self.keep_pace_checked(now);
        }
    }

    /// Shared health came in: the running attempt's limits are judged again by its model's
    /// pace as it now stands. An attempt that started with no pace gets the derived limits as
    /// soon as other answers establish it (and is cut at once when it is already past them).
    pub(super) fn rejudge(&mut self, now: Now) {
        if !self.attempt.is_open() || self.pacing.is_none() {
            return;
        }
        let Some(model) = self.dispatch.current().cloned() else {
            return;
        };
        let limits = self.watchdogs_for(&model, now.wall_ms);
        let was_derived = self
            .pacing
            .as_ref()
            .is_some_and(|p| p.limits().first_response.derived());
        let changed = self.pacing.as_mut().is_some_and(|p| p.rejudge(limits));
        if !changed {
            return;
        }
        if !was_derived && limits.first_response.derived() {
            self.note(
                Note::Detail,
                format!(
                    "watchdogs for {} re-judged now that its pace is known: first response {}, \
                     stall {}",
                    model.key(),
                    limits.first_response,
                    limits.stall
                ),
            );
        }
        if self.watching() {
            self.sync_watchdog();
        }
        self.keep_pace_checked(now);
    }

    /// The armed watchdog's time came: say which limit cut the attempt and abort it.
    pub(super) fn watchdog_fired(&mut self, now: Now) {
        let key = self
            .dispatch
            .current()
            .map(ModelInfo::key)
            .unwrap_or_default();
        let cut = self.pacing.as_ref().and_then(Pacing::cut);
        self.stop_watch();
        let line = match cut {
            Some(Cut::FirstResponse(l)) => {
                format!("no first response from {key} in {}", describe(&l))
            }
            Some(Cut::Stall(l)) => format!("no stream progress from {key} in {}", describe(&l)),
            Some(Cut::Share(s)) => format!(
                "no first response from {key} in {}, its share of the deadline ({} left, {} \
                 other candidate{} to try)",
                secs(s.ms),
                secs(s.remaining_ms.saturating_sub(s.ms)),
                s.others,
                if s.others == 1 { "" } else { "s" }
            ),
            None => format!("no response from {key}"),
        };
        self.attempt.watchdog_fired();
        self.cut = cut;
        self.note(Note::Detail, format!("watchdog: {line}; aborting"));
        self.abort(now);
    }

    /// The failure of an attempt our watchdog cut, with its error text. A cut at the deadline's
    /// share is an endpoint failure like any silence — unless the model's own pace says it
    /// usually takes longer than its share to start: then the breaker stays closed (the model
    /// was cut for the deadline, not for being slow).
    pub(super) fn cut_verdict(&mut self, now: Now) -> (Classification, String) {
        let cut = self.cut.take();
        let text = match cut {
            Some(Cut::FirstResponse(l)) => format!("watchdog: no first response in {}", secs(l.ms)),
            Some(Cut::Stall(l)) => format!("watchdog: no stream progress in {}", secs(l.ms)),
            Some(Cut::Share(s)) => format!(
                "no first response in {}, its share of the deadline",
                secs(s.ms)
            ),
            None => "watchdog: the model stopped responding".to_string(),
        };
        let classification = |scope: Scope, matched: &str| Classification {
            class: FailureClass::Endpoint,
            scope,
            status: None,
            matched: matched.to_string(),
            stated: None,
        };
        let v = match cut {
            Some(Cut::Share(s)) => {
                let slow_by_nature = self.dispatch.current().is_some_and(|m| {
                    self.shared
                        .health()
                        .pace_of(&m.key(), now.wall_ms, self.prompt_chars())
                        .is_some_and(|p| p.trusted() && p.first_p95_ms > s.ms)
                });
                let scope = if slow_by_nature {
                    Scope::Round
                } else {
                    Scope::Endpoint
                };
                classification(scope, SHARE_MARKER)
            }
            _ => classification(Scope::Endpoint, crate::failover::classify::WATCHDOG_MARKER),
        };
        (v, text)
    }

    /// The answer was clean: what it took, for the model's pace.
    pub(super) fn learn_pace(&mut self, now: Now, model: &ModelInfo) {
        let chars = self.prompt_chars();
        if let Some(sample) = self
            .pacing
            .take()
            .and_then(|p| p.sample(now.wall_ms, chars))
        {
            self.record(Delta::Pace {
                key: model.key().to_string(),
                sample,
            });
        }
    }

    /// How long the attempt under way has waited for its first response, for exit 124's hint:
    /// `None` when nothing is waiting for one.
    pub fn silent_for(&self, now: Now) -> Option<u64> {
        if !self.attempt.is_open() {
            return None;
        }
        let waited = self.pacing.as_ref()?.waiting_since()?;
        Some(
            u64::try_from(now.instant.saturating_duration_since(waited).as_millis())
                .unwrap_or(u64::MAX),
        )
    }
}

impl Machine {
    /// `--explain`: each candidate's pace and watchdogs, and the first one's share of the
    /// deadline when others would be left after it.
    pub(super) fn explain_pacing(&self, now: Now, e: &mut crate::failover::explain::Explanation) {
        use crate::failover::explain::{Pace, WatchdogLimits};
        let others = e.candidates.len().saturating_sub(1);
        for (i, c) in e.candidates.iter_mut().enumerate() {
            let Some(model) = self.pi.pool().iter().find(|m| m.key() == c.model).cloned() else {
                continue;
            };
            let pace = self
                .shared
                .health()
                .pace_of(&c.model, now.wall_ms, self.prompt_chars());
            let limits = self.watchdogs_for(&model, now.wall_ms);
            c.pace = pace.as_ref().map(Pace::of);
            c.watchdogs = Some(WatchdogLimits::of(&limits));
            if i == 0 {
                c.first_response_share_ms = e
                    .deadline_ms
                    .and_then(|left| share::first_response_share(left, others))
                    .filter(|ms| *ms < limits.first_response.ms);
            }
        }
    }
}

/// `1.3 s (from p95 100 ms over 10 answers)`.
fn describe(l: &crate::pace::watchdog::Limit) -> String {
    l.to_string()
}

/// `deadline share: glm/m may wait 10 s for a first response (its share of the 20 s left: 1
/// other candidate)`.
pub(super) fn share_line(key: &str, s: &Share) -> String {
    format!(
        "deadline share: {key} may wait {} for a first response (its share of the {} left: {} \
         other candidate{})",
        secs(s.ms),
        secs(s.remaining_ms),
        s.others,
        if s.others == 1 { "" } else { "s" }
    )
}
