//! The run's capacity slot: which provider it holds a slot on (at most one: the provider of the
//! attempt under way), the ids of its capacity operations, and how long it has waited for a
//! slot. The slot is taken before an attempt is sent and given back when the attempt ends —
//! as an answer, a capacity signal, or anything else (see `capacity`).

use std::time::Instant;

use crate::capacity::ops::Choice;
use crate::capacity::{CapacityDelta, DEFAULT_LEASE_TTL_MS, Limits};
use crate::catalog::ModelInfo;
use crate::failover::state::CapacityOptions;

#[derive(Debug)]
pub(super) struct SlotState {
    options: Option<CapacityOptions>,
    /// The provider a slot is held on.
    held: Option<String>,
    /// A slot given up whose release waits to go out with the next admission (or the end).
    deferred: Option<(String, CapacityDelta)>,
    /// The last capacity operation id handed out (replies name theirs).
    last_id: u64,
    /// Since when the run has been waiting for a free slot.
    waiting_since: Option<Instant>,
    waited_ms: u64,
    /// The pause the last capacity signal stated, until the refusal goes out.
    pause_ms: u64,
    /// The end of the first attempt's pre-request grace (set when Pi is ready).
    window: Option<Instant>,
    /// An admission given up on for being slow: its id and the providers of its choices.
    overdue: Option<(u64, Vec<String>)>,
    /// When the held slot's lease was last taken or renewed (sent), on the monotonic clock,
    /// which runs on while the process is stopped: a gap past the TTL means the lease lapsed.
    confirmed_at: Option<Instant>,
    /// When the latest admission was asked for.
    asked_at: Option<Instant>,
    /// The provider a busy key's back-off leaves alone, and until when (wall ms): the last
    /// capacity signal's verdict, for the wait and the retry hint.
    backoff: Option<(String, u64)>,
    /// The last full reply was the store holding for the first choice's pause
    /// (`--prefer-primary`), not every choice being full.
    held_first: bool,
}

/// How an attempt's slot is given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// A clean answer: evidence the limit works.
    Answered,
    /// A capacity signal: the limit is cut, and the provider gets nothing new for `pause_ms`
    /// (0: it did not say how long); `jitter` places a back-off (see `capacity::backoff`).
    Refused { pause_ms: u64, jitter: u64 },
    /// Anything else: no evidence either way.
    Released,
}

impl SlotState {
    pub(super) fn new(options: Option<CapacityOptions>) -> SlotState {
        SlotState {
            options,
            held: None,
            deferred: None,
            last_id: 0,
            waiting_since: None,
            waited_ms: 0,
            pause_ms: 0,
            window: None,
            overdue: None,
            confirmed_at: None,
            asked_at: None,
            backoff: None,
            held_first: false,
        }
    }

    /// Pi is ready: a single run's first slot waits at most until `until` (kept if already
    /// set; batch jobs have no such window).
    pub(super) fn open_window(&mut self, until: Instant) {
        if self.options.as_ref().is_some_and(|o| o.pre_request_grace) {
            self.window.get_or_insert(until);
        }
    }

    /// How long an admission sent at `now` may wait before the request goes without it: only
    /// the first one of a single run has a limit (the pre-request window).
    pub(super) fn grace_until(&mut self, now: Instant) -> Option<Instant> {
        self.window.take().map(|end| end.max(now))
    }

    pub(super) fn overdue(&mut self, id: u64, providers: Vec<String>) {
        self.overdue = Some((id, providers));
    }

    /// The providers of admission `id` if it was given up on (its answer is late).
    pub(super) fn take_overdue(&mut self, id: u64) -> Option<Vec<String>> {
        match &self.overdue {
            Some((late, _)) if *late == id => self.overdue.take().map(|(_, p)| p),
            _ => None,
        }
    }

    /// The capacity signal just judged said to wait `ms` (0: it did not say).
    pub(super) fn set_pause(&mut self, ms: u64) {
        self.pause_ms = ms;
    }

    pub(super) fn take_pause(&mut self) -> u64 {
        std::mem::take(&mut self.pause_ms)
    }

    /// A busy key's back-off: `provider` is left alone until `until_ms` (wall).
    pub(super) fn backed_off(&mut self, provider: &str, until_ms: u64) {
        self.backoff = Some((provider.to_string(), until_ms));
    }

    /// The back-off still running at `now_ms`: the provider and when it ends (wall ms).
    pub(super) fn backoff(&self, now_ms: u64) -> Option<(&str, u64)> {
        self.backoff
            .as_ref()
            .filter(|(_, until)| *until > now_ms)
            .map(|(p, until)| (p.as_str(), *until))
    }

    /// Whether the last full reply held for the first choice (see `held_first`).
    pub(super) fn set_held_first(&mut self, held: bool) {
        self.held_first = held;
    }

    pub(super) fn held_first(&self) -> bool {
        self.held_first
    }

    /// Slots are taken at all (a run with a health store; not `--explain`, not unit tests
    /// of other behaviour).
    pub(super) fn enabled(&self) -> bool {
        self.options.is_some()
    }

    /// A slot is held on `provider` (always true when slots are off).
    pub(super) fn holds(&self, provider: &str) -> bool {
        !self.enabled() || self.held.as_deref() == Some(provider)
    }

    pub(super) fn held(&self) -> Option<&str> {
        self.held.as_deref()
    }

    pub(super) fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    /// `true` when `id` is the latest operation handed out (older replies are stale).
    pub(super) fn is_latest(&self, id: u64) -> bool {
        id == self.last_id
    }

    /// This caller's limits on `provider`: its start and its `--max-inflight`.
    pub(super) fn limits(&self, provider: &str) -> Limits {
        let options = self.options.as_ref();
        Limits {
            initial: options.map_or(1, |o| o.initial),
            cap: options.and_then(|o| o.caps.get(provider).copied()),
        }
    }

    /// The admission operation's choices: one per provider, in the models' order.
    pub(super) fn choices(&self, models: &[ModelInfo]) -> Vec<Choice> {
        models
            .iter()
            .map(|m| Choice {
                provider: m.provider.clone(),
                limits: self.limits(&m.provider),
            })
            .collect()
    }

    pub(super) fn slot_id(&self) -> &str {
        self.options.as_ref().map_or("", |o| o.slot.as_str())
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        DEFAULT_LEASE_TTL_MS
    }

    /// A slot on `provider` was granted at `now` (ending a wait, if there was one).
    pub(super) fn granted(&mut self, provider: &str, now: Instant) {
        self.held = Some(provider.to_string());
        self.held_first = false;
        self.confirmed_at = Some(now);
        if let Some(since) = self.waiting_since.take() {
            let ms = now.saturating_duration_since(since).as_millis();
            self.waited_ms = self
                .waited_ms
                .saturating_add(u64::try_from(ms).unwrap_or(u64::MAX));
        }
    }

    /// Every choice was full at `now`; `true` when this starts a wait.
    pub(super) fn full(&mut self, now: Instant) -> bool {
        let fresh = self.waiting_since.is_none();
        self.waiting_since.get_or_insert(now);
        fresh
    }

    pub(super) fn waiting(&self) -> bool {
        self.waiting_since.is_some()
    }

    /// How long the run waited for slots, the wait under way included.
    pub(super) fn waited_ms(&self, now: Instant) -> u64 {
        let current = self.waiting_since.map_or(0, |since| {
            u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX)
        });
        self.waited_ms.saturating_add(current)
    }

    /// Gives the held slot back (at `at`, wall ms) the way `ending` says: the delta to store
    /// and the provider it is for, or `None` when no slot is held.
    pub(super) fn give_back(&mut self, ending: Ending, at: u64) -> Option<(String, CapacityDelta)> {
        // A late grant for an admission given up on is applied before this give-back (the
        // store applies one run's operations in order), so this gives it back too, if it was
        // on the same provider; one on another provider runs out with its lease.
        self.overdue = None;
        let provider = self.held.take()?;
        let slot = self.slot_id().to_string();
        let limits = self.limits(&provider);
        let delta = match ending {
            Ending::Answered => CapacityDelta::Answered { at, slot, limits },
            Ending::Refused { pause_ms, jitter } => CapacityDelta::Refused {
                at,
                slot,
                limits,
                pause_ms,
                jitter,
            },
            Ending::Released => CapacityDelta::Release { at, slot },
        };
        Some((provider, delta))
    }

    /// Gives the held slot up without evidence; the release goes out with the next admission
    /// (one store operation for both), or on its own when none comes ([`SlotState::take_deferred`]).
    /// A release already waiting is returned, to go out now.
    pub(super) fn defer_release(&mut self, at: u64) -> Option<(String, CapacityDelta)> {
        let fresh = self.give_back(Ending::Released, at)?;
        self.deferred.replace(fresh)
    }

    pub(super) fn take_deferred(&mut self) -> Option<(String, CapacityDelta)> {
        self.deferred.take()
    }

    /// What an admission gives back first: the deferred release, else the slot held on
    /// another provider.
    pub(super) fn release_for_admission(&mut self, at: u64) -> Option<(String, CapacityDelta)> {
        if let Some(d) = self.deferred.take() {
            if let Some(held) = self.give_back(Ending::Released, at) {
                // Cannot happen (a held slot is deferred before another is taken); keep the
                // newer one for the admission and let the older expire with its lease.
                return Some(held);
            }
            return Some(d);
        }
        self.give_back(Ending::Released, at)
    }

    /// An admission is asked for at `now`.
    pub(super) fn asking(&mut self, now: Instant) {
        self.asked_at = Some(now);
    }

    /// A grant read at `now` for the admission asked last may have lapsed before it is used:
    /// the process was stopped for a whole TTL between asking and reading the answer.
    pub(super) fn grant_stale(&self, now: Instant) -> bool {
        self.asked_at.is_some_and(|t| {
            now.saturating_duration_since(t) >= std::time::Duration::from_millis(self.ttl_ms())
        })
    }

    /// A renewal of the held slot went out at `now`.
    pub(super) fn renewed(&mut self, now: Instant) {
        self.confirmed_at = Some(now);
    }

    /// The held slot's lease has run out at `now` without a renewal: the run could not renew
    /// it for a whole TTL (it was stopped, or starved), so another run may hold the slot now.
    pub(super) fn lapsed(&self, now: Instant) -> bool {
        self.held.is_some()
            && self.confirmed_at.is_some_and(|t| {
                now.saturating_duration_since(t) >= std::time::Duration::from_millis(self.ttl_ms())
            })
    }

    /// The renewal of the held slot at `at`.
    pub(super) fn renewal(&self, at: u64) -> Option<(String, CapacityDelta)> {
        let provider = self.held.clone()?;
        Some((
            provider,
            CapacityDelta::Renew {
                at,
                slot: self.slot_id().to_string(),
                ttl_ms: self.ttl_ms(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn options() -> CapacityOptions {
        CapacityOptions {
            slot: "h:1:0".into(),
            initial: 2,
            caps: Default::default(),
            pre_request_grace: false,
        }
    }

    /// Issue 29: a lease not renewed for a whole TTL (the process was stopped) has lapsed; a
    /// grant read a whole TTL after it was asked for is stale.
    #[test]
    fn a_lease_lapses_after_a_ttl_without_renewal() {
        let t0 = crate::clock::now().instant;
        let ttl = Duration::from_millis(DEFAULT_LEASE_TTL_MS);
        let mut s = SlotState::new(Some(options()));
        assert!(!s.lapsed(t0 + ttl), "nothing held");
        s.asking(t0);
        assert!(!s.grant_stale(t0 + ttl - Duration::from_millis(1)));
        assert!(s.grant_stale(t0 + ttl));
        s.granted("p", t0);
        assert!(!s.lapsed(t0 + ttl / 3));
        s.renewed(t0 + ttl / 3);
        assert!(!s.lapsed(t0 + ttl), "renewed a third of the way");
        assert!(
            s.lapsed(t0 + ttl / 3 + ttl),
            "stopped for a whole TTL since"
        );
        s.give_back(Ending::Released, 0);
        assert!(!s.lapsed(t0 + 10 * ttl), "nothing held any more");
    }
}
