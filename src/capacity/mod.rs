//! Learned concurrency per provider (issue 23): how many requests one provider (one API key)
//! takes at once, learned from its answers, and the slot leases that enforce it across every
//! process and host sharing the health store.
//!
//! Pure: no I/O, no clock, no environment, no threads. Wall-clock unix milliseconds come in with
//! every operation. A [`Capacity`] record lives in the shared health state (JSON file or Redis)
//! and is changed only by [`Capacity::apply`]ing a [`CapacityDelta`] under the store's lock or
//! transaction, so concurrent processes change one record in store order and share one budget.
//!
//! # The algorithm
//!
//! *Limit.* Each provider has a limit on requests in flight. A caller brings its [`Limits`]: its
//! `--jobs` (`initial`) and its `--max-inflight` (`cap`, optional). The limit a caller obeys is
//! the learned limit (or the start, below) clamped to `[1, cap]` ([`MAX_LIMIT`] without a cap).
//!
//! *Start.* With an explicit cap the limit starts at `min(cap, --jobs)`: the user said what the
//! key takes. Without one it starts at `min(START_LIMIT, --jobs)` and rises by one per clean
//! answer while every slot is in use (slow start) until the first capacity signal. Starting at
//! `--jobs` would send `--jobs` requests at a provider that may take 2: with `--jobs 8`, six
//! rejected before anything is learned, 17% of a 30-job batch where the budget is 5%. Slow
//! start finds a cap of 2 with one rejected request. It costs a few rounds once: against an
//! uncapped provider `--jobs 8` is reached after six answers' time (2 → 8); a warm store, or
//! `--max-inflight`, starts at full speed.
//!
//! *Evidence.* Only an answer to a request sent under the current limit counts towards raising
//! it (every change of the limit starts a new *generation*; a lease remembers the generation it
//! was granted under). So the limit never rises again before the request that tried the last
//! raise has been answered or refused: one probe at a time, however late a 429 arrives.
//!
//! *Cut.* A capacity signal (a rate-limit 429 such as GLM's code 1302) on a slot granted under
//! the current limit cuts it to `min(⌊¾·n⌋, n − 1)`, at least 1, where `n` is the number of
//! requests in flight when it was refused (itself included): the provider just said `n` is too
//! many. ×¾ rather than ×½ because caps are small integers: after a refused probe at `C + 1`,
//! ×¾ lands on `C` for `C ≤ 3` and one below it up to `C = 7`, where ×½ would halve the
//! batch's speed for a window or more. Requests granted under an older limit that are refused
//! together do not cut again (TCP cuts once per round trip); such a refusal only bounds the
//! limit to `n − 1` when `n` is within the current limit: never as many in flight as the
//! provider just refused. That bound never goes below the true cap (a refused request sees at
//! least the cap in flight besides itself), so a burst of 8 against a cap of 2 settles at 2
//! without a cascade of halvings.
//!
//! *Raise.* After a cut the limit rises by one after a full window of clean answers (as many
//! as the limit) in which every slot was in use at least once (without that there is no
//! evidence the provider takes more), and never above the cap. Raising onto the level last
//! refused is a probe, and each probe costs one rejected request when the cap has not moved,
//! so it waits for `max(PROBE_ANSWERS, PROBE_WINDOWS · limit)` clean answers, doubled after
//! each refused probe up to ×2^[`MAX_PROBE_BACKOFF`]; a probe that holds for a window
//! forgets the refusal. The arithmetic at a cap of 2: one rejected request per 33 at first (3%,
//! under the 5% budget even in a 30-job batch, which sees no probe after the first refusal),
//! then probes after 96, 224, 480 and 992 answers and every 512 after that: 7 rejected in a
//! 2000-job batch (0.35%), under 0.2% in the long run.
//!
//! *Refusing at 1.* A signal with one request in flight is not about our concurrency: the
//! refused request is the least we can send, so other clients are using the key (issue 32: the
//! jobs of a CI matrix, each on its own machine). The provider is paused for a jittered,
//! growing back-off ([`backoff`]: 1, 2, 4, 8, 16 s ceilings) and the verdict is
//! [`Verdict::BackOff`]: the request waits (or overflows to a provider with room) and tries
//! again. Only a key that refuses again after a back-off at its limit (more than
//! [`backoff::STEPS`] refusals in a row; a clean answer resets the count) is
//! [`Verdict::RateLimited`]: the caller opens the provider's breaker as for any rate limit.
//!
//! *Leases.* A slot is a lease with a short TTL ([`DEFAULT_LEASE_TTL_MS`]) renewed while the
//! request runs, so the slots of a SIGKILLed process come back within seconds. Every operation
//! first drops expired leases, clamps expiries to `now + MAX_LEASE_TTL_MS`, drops malformed ids
//! and keeps at most [`MAX_LEASES`]: a hostile or corrupt store cannot make the table grow or
//! hold slots for long. After [`IDLE_FORGET_MS`] without leases or operations the refusals
//! are forgotten (the limit stays as the next start, slow start resumes): a key whose plan
//! grew overnight is found out at once rather than after a backed-off probe.
//!
//! *Stated pauses.* A capacity signal that says when to send again (`Please try again in 2s`,
//! issue 24) pauses the provider for that long: no slot is granted on it to anyone until then
//! (the caller's request waits or overflows as for a full provider). The pause is relative to
//! the refusal's time and bounded by [`MAX_PAUSE_MS`]; a longer stated delay is no capacity
//! signal but a rate limit with a stated reset (the caller opens the breaker until then).

pub mod backoff;
pub mod caps;
pub mod ops;
mod rules;
mod slot_id;

pub use slot_id::SlotId;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where the limit starts without an explicit cap (slow start raises it from there).
pub const START_LIMIT: u32 = 2;
/// The highest limit; also what a caller without `--max-inflight` may grow to.
pub const MAX_LIMIT: u32 = 256;
/// Most leases one record keeps (≥ [`MAX_LIMIT`], so admission never needs more).
pub const MAX_LEASES: usize = 256;
/// Longest slot id kept (ids are `host:pid:worker`-like; longer ones are corrupt).
pub const MAX_SLOT_ID_LEN: usize = 128;
/// The TTL callers should use: renewed every few seconds, a dead holder's slot frees in 15 s.
pub const DEFAULT_LEASE_TTL_MS: u64 = 15_000;
/// No lease lasts longer than this from the operation that sees it, whatever a store says:
/// the TTL callers use, so a forged or skewed far-future lease holds its slot no longer than a
/// dead holder's would (issue 29: it was 60 s).
pub const MAX_LEASE_TTL_MS: u64 = DEFAULT_LEASE_TTL_MS;
/// Multiplicative decrease: the limit becomes ⌊n·3/4⌋ (see the module docs).
pub const DECREASE_NUM: u32 = 3;
pub const DECREASE_DEN: u32 = 4;
/// Capacity signals in a row with one request in flight that mean "rate-limited": one more
/// than the back-off's steps (see [`backoff`]).
pub const REFUSALS_AT_ONE: u32 = backoff::STEPS + 1;
/// Clean answers before the first probe of a refused level…
pub const PROBE_ANSWERS: u32 = 32;
/// …and at least this many windows of them at higher limits.
pub const PROBE_WINDOWS: u32 = 4;
/// The probe wait doubles per refused probe up to 2^this times.
pub const MAX_PROBE_BACKOFF: u32 = 4;
/// After this long with no slot held and no operation, refusals are forgotten (the limit stays).
pub const IDLE_FORGET_MS: u64 = 30 * 60_000;
/// The longest stated pause a capacity signal makes (see the module docs).
pub const MAX_PAUSE_MS: u64 = 60_000;

/// What one caller brings: its `--jobs` and its `--max-inflight` for this provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub initial: u32,
    pub cap: Option<u32>,
}

impl Limits {
    /// The highest limit this caller obeys.
    pub fn ceiling(self) -> u32 {
        self.cap.unwrap_or(MAX_LIMIT).clamp(1, MAX_LIMIT)
    }

    /// Where a record that has learned nothing starts for this caller.
    pub fn start(self) -> u32 {
        let initial = self.initial.clamp(1, MAX_LIMIT);
        let start = match self.cap {
            Some(cap) => initial.min(cap),
            None => initial.min(START_LIMIT),
        };
        start.clamp(1, self.ceiling())
    }
}

/// One slot: held until `until` (unix ms) unless renewed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Lease {
    pub until: u64,
    /// The limit's generation when the slot was granted.
    pub generation: u64,
}

/// The capacity record of one provider.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capacity {
    /// The learned limit; 0 until something is learned (then each caller's start applies).
    pub limit: u32,
    /// Bumped on every change of the limit; leases remember it.
    pub generation: u64,
    /// A capacity signal has cut the limit since the record started (or last forgot its
    /// refusals): slow start is over.
    pub congested: bool,
    /// Clean answers since the limit last changed.
    pub clean: u32,
    /// Every slot was in use at some point since the limit last changed.
    pub saturated: bool,
    /// Requests in flight at the last refusal still believed (0: none).
    pub refused_at: u32,
    /// Probes of `refused_at` refused since one last held.
    pub failed_probes: u32,
    /// Capacity signals in a row with one request in flight.
    pub refusals_at_one: u32,
    /// Latest operation time seen.
    pub last_at: u64,
    /// Slot id → lease.
    pub leases: BTreeMap<String, Lease>,
    /// No slot is granted before this (unix ms; 0: none): the provider stated when to send
    /// again.
    #[serde(skip_serializing_if = "is_zero")]
    pub paused_until: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A change to one provider's record, applied in store order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacityDelta {
    /// Take a slot if one is free.
    Acquire {
        at: u64,
        slot: String,
        ttl_ms: u64,
        limits: Limits,
    },
    /// Extend a held slot (re-takes it if it expired meanwhile: the request is still running).
    Renew { at: u64, slot: String, ttl_ms: u64 },
    /// Give a slot back without evidence either way (another failure, an abort).
    Release { at: u64, slot: String },
    /// The request on `slot` was answered cleanly; the slot is given back.
    Answered {
        at: u64,
        slot: String,
        limits: Limits,
    },
    /// The request on `slot` got a capacity signal; the slot is given back. `pause_ms` (0:
    /// none) is how long the provider said to wait before sending again; `jitter` (any
    /// number, different per caller and refusal) places a back-off in its range.
    Refused {
        at: u64,
        slot: String,
        limits: Limits,
        pause_ms: u64,
        jitter: u64,
    },
}

/// What applying a delta decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decided {
    Admission(Admission),
    Renewal(Renewal),
    /// Whether the slot was held.
    Released(bool),
    /// The caller's limit before and after a clean answer.
    Answered(Change),
    Refused(Verdict),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Granted {
        limit: u32,
        in_flight: u32,
    },
    /// Every slot is taken; `next_expiry` is when the first lease runs out unless renewed (a
    /// waiter re-checks then at the latest).
    Full {
        limit: u32,
        in_flight: u32,
        next_expiry: Option<u64>,
    },
    /// Empty or over-long slot id: a caller bug, never granted.
    BadSlot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Renewed,
    /// The lease had expired (the holder stalled past its TTL); it is held again.
    Restored,
    /// Bad id, or the table is full: the slot is not held.
    Lost,
}

/// A caller's effective limit before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub from: u32,
    pub to: u32,
}

/// What the caller should do after a capacity signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Wait for a free slot, then send again to this provider (or overflow to another).
    SlowDown(Change),
    /// Refused with only this request in flight: other clients are using the key. No slot is
    /// granted on it to anyone before `until` (unix ms; the [`backoff`] of refusal `step` in a
    /// row, or a longer stated pause); then send again (or overflow to another meanwhile).
    BackOff {
        change: Change,
        until: u64,
        step: u32,
    },
    /// Still refused after the back-off grew to its limit: a rate limit, open the breaker.
    RateLimited,
}

impl CapacityDelta {
    /// The same change, judged at `now` (the store's clock, not the caller's: see
    /// [`ops::apply_op`]).
    pub fn at(&self, now: u64) -> CapacityDelta {
        let mut d = self.clone();
        match &mut d {
            CapacityDelta::Acquire { at, .. }
            | CapacityDelta::Renew { at, .. }
            | CapacityDelta::Release { at, .. }
            | CapacityDelta::Answered { at, .. }
            | CapacityDelta::Refused { at, .. } => *at = now,
        }
        d
    }
}

impl Capacity {
    /// Applies one delta at its time.
    pub fn apply(&mut self, delta: &CapacityDelta) -> Decided {
        match delta {
            CapacityDelta::Acquire {
                at,
                slot,
                ttl_ms,
                limits,
            } => Decided::Admission(self.acquire(*at, slot, *ttl_ms, *limits)),
            CapacityDelta::Renew { at, slot, ttl_ms } => {
                Decided::Renewal(self.renew(*at, slot, *ttl_ms))
            }
            CapacityDelta::Release { at, slot } => Decided::Released(self.release(*at, slot)),
            CapacityDelta::Answered { at, slot, limits } => {
                Decided::Answered(self.answered(*at, slot, *limits))
            }
            CapacityDelta::Refused {
                at,
                slot,
                limits,
                pause_ms,
                jitter,
            } => {
                let verdict = self.refused(*at, slot, *limits, *jitter);
                // A stated pause longer than the back-off wins (and the back-off says so).
                self.pause(*at, *pause_ms);
                Decided::Refused(match verdict {
                    Verdict::BackOff { change, step, .. } => Verdict::BackOff {
                        change,
                        step,
                        until: self.paused_until.max(*at),
                    },
                    v => v,
                })
            }
        }
    }

    /// Takes slot `slot` while fewer leases than the caller's effective limit are live.
    /// Taking a slot already held renews it (a store replaying a delta must not take two).
    pub fn acquire(&mut self, now: u64, slot: &str, ttl_ms: u64, limits: Limits) -> Admission {
        self.tidy(now);
        if !valid_slot(slot) {
            return Admission::BadSlot;
        }
        let limit = self.effective(limits);
        let until = lease_until(now, ttl_ms);
        if let Some(lease) = self.leases.get_mut(slot) {
            lease.until = lease.until.max(until);
            return Admission::Granted {
                limit,
                in_flight: count(self.leases.len()),
            };
        }
        let in_flight = count(self.leases.len());
        if self.paused_until > now {
            return Admission::Full {
                limit,
                in_flight,
                next_expiry: Some(self.paused_until),
            };
        }
        if in_flight >= limit || self.leases.len() >= MAX_LEASES {
            return Admission::Full {
                limit,
                in_flight,
                next_expiry: self.leases.values().map(|l| l.until).min(),
            };
        }
        let generation = self.generation;
        self.leases
            .insert(slot.to_string(), Lease { until, generation });
        self.note_load(in_flight + 1, limit);
        Admission::Granted {
            limit,
            in_flight: in_flight + 1,
        }
    }

    pub fn renew(&mut self, now: u64, slot: &str, ttl_ms: u64) -> Renewal {
        self.tidy(now);
        if !valid_slot(slot) {
            return Renewal::Lost;
        }
        let until = lease_until(now, ttl_ms);
        if let Some(lease) = self.leases.get_mut(slot) {
            lease.until = lease.until.max(until);
            return Renewal::Renewed;
        }
        if self.leases.len() >= MAX_LEASES {
            return Renewal::Lost;
        }
        // The request is still at the provider: count it again, even past the limit, so the
        // in-flight count stays true. Admission waits until it drops back. Under which limit it
        // was sent is unknown: not the current one, so it neither cuts by a quarter nor counts
        // towards a raise.
        let generation = self.generation.wrapping_sub(1);
        self.leases
            .insert(slot.to_string(), Lease { until, generation });
        Renewal::Restored
    }

    pub fn release(&mut self, now: u64, slot: &str) -> bool {
        self.tidy(now);
        self.leases.remove(slot).is_some()
    }

    /// The caller's limit now: the learned one (or the start), within `[1, ceiling]`.
    pub fn effective_limit(&self, now: u64, limits: Limits) -> u32 {
        self.tidied(now).effective(limits)
    }

    /// Live leases at `now`.
    pub fn in_flight(&self, now: u64) -> u32 {
        count(self.tidied(now).leases.len())
    }

    /// Would [`Capacity::acquire`] of a new slot be granted at `now`?
    pub fn has_free_slot(&self, now: u64, limits: Limits) -> bool {
        let view = self.tidied(now);
        view.paused_until <= now
            && view.leases.len() < MAX_LEASES
            && count(view.leases.len()) < view.effective(limits)
    }

    /// When a waiter should ask again at the latest: the end of a stated pause, else when the
    /// first live lease runs out unless renewed.
    pub fn next_expiry(&self, now: u64) -> Option<u64> {
        let view = self.tidied(now);
        if view.paused_until > now {
            return Some(view.paused_until);
        }
        view.leases.values().map(|l| l.until).min()
    }

    fn tidied(&self, now: u64) -> Capacity {
        let mut view = self.clone();
        view.tidy(now);
        view
    }

    /// Brings a record read from a store into shape before any decision: drops expired,
    /// malformed and excess leases, clamps what a store could have made absurd, and forgets
    /// learned state gone stale.
    fn tidy(&mut self, now: u64) {
        let horizon = now.saturating_add(MAX_LEASE_TTL_MS);
        self.leases
            .retain(|id, lease| valid_slot(id) && lease.until > now);
        for lease in self.leases.values_mut() {
            lease.until = lease.until.min(horizon);
        }
        if self.leases.len() > MAX_LEASES {
            // Keep the leases that last longest: the holders renewing them are the live ones.
            let mut order: Vec<(u64, String)> = self
                .leases
                .iter()
                .map(|(id, l)| (l.until, id.clone()))
                .collect();
            order.sort();
            let excess = order.len() - MAX_LEASES;
            for (_, id) in order.into_iter().take(excess) {
                self.leases.remove(&id);
            }
        }
        if self.leases.is_empty() && now >= self.last_at.saturating_add(IDLE_FORGET_MS) {
            self.forget_refusals();
        }
        self.last_at = self.last_at.max(now);
        self.limit = self.limit.min(MAX_LIMIT);
        // Over, or further ahead than any pause lasts (a corrupt store).
        if self.paused_until <= now || self.paused_until > now.saturating_add(MAX_PAUSE_MS) {
            self.paused_until = 0;
        }
    }

    /// The provider said to send nothing for `pause_ms` from `at` (bounded; a pause already
    /// running longer is kept).
    pub(super) fn pause(&mut self, at: u64, pause_ms: u64) {
        if pause_ms > 0 {
            let until = at.saturating_add(pause_ms.min(MAX_PAUSE_MS));
            self.paused_until = self.paused_until.max(until);
        }
    }

    /// Keeps the limit as the next start but forgets the refusals behind it: slow start again,
    /// so a key whose plan grew is found out at once instead of after a backed-off probe.
    fn forget_refusals(&mut self) {
        *self = Capacity {
            limit: self.limit,
            generation: self.generation,
            last_at: self.last_at,
            ..Capacity::default()
        };
    }
}

fn valid_slot(slot: &str) -> bool {
    !slot.is_empty() && slot.len() <= MAX_SLOT_ID_LEN
}

fn lease_until(now: u64, ttl_ms: u64) -> u64 {
    now.saturating_add(ttl_ms.clamp(1, MAX_LEASE_TTL_MS))
}

/// A lease count as a limit-sized number (the table holds at most [`MAX_LEASES`]).
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "lease_tests.rs"]
mod lease_tests;

#[cfg(test)]
#[path = "record_props.rs"]
mod props;

#[cfg(test)]
mod sim;
