//! What a store does with the capacity records of several providers: the operations runs send
//! ([`CapacityOp`]) and the one rule every store applies to them ([`apply_op`]), so the file,
//! Redis and in-memory stores differ only in how they read and write records. Pure.

use std::collections::BTreeMap;

use super::{Admission, Capacity, CapacityDelta, Decided, Limits, Verdict};

/// Most providers a store keeps records for; past this, idle records go first.
pub const MAX_PROVIDERS: usize = 64;
/// Longest provider name kept (Pi's names are short; a longer one is not ours).
pub const MAX_PROVIDER_LEN: usize = 128;

/// One provider a slot may be taken on, with the caller's limits for it. An admission goes past
/// a full choice to the next only when the full one's limit is known (see [`apply_op`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub provider: String,
    pub limits: Limits,
}

/// A capacity operation on the shared records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapacityOp {
    /// Take slot `slot` on the first of `choices` (in order) with a free one — after giving
    /// back `release` (the caller's previous slot, in the same step: a run moving from one
    /// provider to another pays one store operation, not two).
    Admit {
        slot: String,
        ttl_ms: u64,
        choices: Vec<Choice>,
        release: Option<(String, CapacityDelta)>,
        /// When the first choice is paused (a stated pause or a busy key's back-off) for at
        /// most this many ms more, wait for it (a full reply at the pause's end) instead of
        /// going past it (`--prefer-primary`; 0: go past it as for a full provider).
        hold_first_ms: u64,
    },
    /// Apply `delta` to `provider`'s record (renew, release, answered, refused).
    Apply {
        provider: String,
        delta: CapacityDelta,
    },
}

impl CapacityOp {
    /// The providers whose records the operation reads and may change.
    pub fn providers(&self) -> Vec<&str> {
        match self {
            CapacityOp::Admit {
                choices, release, ..
            } => {
                let mut providers: Vec<&str> =
                    choices.iter().map(|c| c.provider.as_str()).collect();
                if let Some((p, _)) = release
                    && !providers.contains(&p.as_str())
                {
                    providers.push(p);
                }
                providers
            }
            CapacityOp::Apply { provider, .. } => vec![provider.as_str()],
        }
    }

    /// The operation may free a slot (a waiting run should look again).
    pub fn frees(&self) -> bool {
        let gives_back = |d: &CapacityDelta| {
            matches!(
                d,
                CapacityDelta::Release { .. }
                    | CapacityDelta::Answered { .. }
                    | CapacityDelta::Refused { .. }
            )
        };
        match self {
            CapacityOp::Apply { delta, .. } => gives_back(delta),
            CapacityOp::Admit { release, .. } => {
                release.as_ref().is_some_and(|(_, d)| gives_back(d))
            }
        }
    }
}

/// What an operation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityReply {
    /// The slot was taken on `choices[index]`, whose limit and in-flight count follow.
    Admitted {
        index: usize,
        limit: u32,
        in_flight: u32,
    },
    /// Every choice is full; the first of their leases runs out at `next_expiry` unless renewed.
    /// `held`: the first choice is paused and the caller asked to hold for it
    /// (`CapacityOp::Admit::hold_first_ms`): `next_expiry` is the pause's end.
    Full {
        next_expiry: Option<u64>,
        held: bool,
    },
    /// What [`Capacity::apply`] decided.
    Applied(Decided),
    /// The store could not be asked (a caller without a store, or a bad provider name).
    Unavailable,
}

/// Applies `op` at `now` to `records`; returns the reply and the providers whose records changed
/// (to be written back). Keeps `records` within [`MAX_PROVIDERS`].
///
/// `now` is the store's clock, and every part of the operation is judged by it — the time a
/// caller stamped on a delta is replaced: a lease's end is written, renewed, compared and
/// expired on one clock, so callers whose clocks disagree (another host, a skewed or stopped
/// machine) share one budget all the same (issue 29). A reply's times are the store's too:
/// [`CapacityReply::on_caller_clock`] turns them into the caller's.
pub fn apply_op(
    records: &mut BTreeMap<String, Capacity>,
    op: &CapacityOp,
    now: u64,
) -> (CapacityReply, Vec<String>) {
    if op.providers().iter().any(|p| !valid_provider(p)) {
        return (CapacityReply::Unavailable, Vec::new());
    }
    let (reply, changed) = match op {
        CapacityOp::Admit {
            slot,
            ttl_ms,
            choices,
            release,
            hold_first_ms,
        } => {
            let mut changed = Vec::new();
            if let Some((provider, delta)) = release {
                records
                    .entry(provider.clone())
                    .or_default()
                    .apply(&delta.at(now));
                changed.push(provider.clone());
            }
            let mut next_expiry: Option<u64> = None;
            let mut reply = None;
            let mut held_first = false;
            for (index, choice) in choices.iter().enumerate() {
                let record = records.entry(choice.provider.clone()).or_default();
                let before = record.clone();
                let admission = record.acquire(now, slot, *ttl_ms, choice.limits);
                if *record != before && !changed.contains(&choice.provider) {
                    changed.push(choice.provider.clone());
                }
                // Past a full choice only when its limit is known to be the provider's (it
                // refused more, or the user capped it): a provider still in slow start is not
                // full, only not yet trusted with more, and the user's preference waits for it.
                let known = record.congested || choice.limits.cap.is_some();
                let held = index == 0
                    && *hold_first_ms > 0
                    && record.paused_until > now
                    && record.paused_until - now <= *hold_first_ms;
                match admission {
                    Admission::Granted { limit, in_flight } => {
                        reply = Some(CapacityReply::Admitted {
                            index,
                            limit,
                            in_flight,
                        });
                        break;
                    }
                    Admission::Full { next_expiry: t, .. } => {
                        if let Some(t) = t {
                            next_expiry = Some(next_expiry.map_or(t, |n| n.min(t)));
                        }
                        if held {
                            held_first = true;
                            next_expiry = t;
                            break;
                        }
                        if !known {
                            break;
                        }
                    }
                    Admission::BadSlot => {
                        reply = Some(CapacityReply::Unavailable);
                        break;
                    }
                }
            }
            (
                reply.unwrap_or(CapacityReply::Full {
                    next_expiry,
                    held: held_first,
                }),
                changed,
            )
        }
        CapacityOp::Apply { provider, delta } => {
            let record = records.entry(provider.clone()).or_default();
            let outcome = record.apply(&delta.at(now));
            (CapacityReply::Applied(outcome), vec![provider.clone()])
        }
    };
    prune(records, now);
    let changed = changed
        .into_iter()
        .filter(|p| records.contains_key(p))
        .collect();
    (reply, changed)
}

impl CapacityReply {
    /// The reply with its times moved from the store's clock (`store_now`) to the caller's
    /// (`caller_now`): when a full provider's first lease runs out, or a back-off ends, as the
    /// caller counts.
    pub fn on_caller_clock(self, store_now: u64, caller_now: u64) -> CapacityReply {
        let moved = |t: u64| caller_now.saturating_add(t.saturating_sub(store_now));
        match self {
            CapacityReply::Full {
                next_expiry: Some(t),
                held,
            } => CapacityReply::Full {
                next_expiry: Some(moved(t)),
                held,
            },
            CapacityReply::Applied(Decided::Refused(Verdict::BackOff {
                change,
                until,
                step,
            })) => CapacityReply::Applied(Decided::Refused(Verdict::BackOff {
                change,
                until: moved(until),
                step,
            })),
            other => other,
        }
    }
}

/// The limit a caller with `limits` obeys on `provider` at `now`, and the requests in flight.
pub fn standing(
    records: &BTreeMap<String, Capacity>,
    provider: &str,
    limits: Limits,
    now: u64,
) -> (u32, u32) {
    match records.get(provider) {
        Some(r) => (r.effective_limit(now, limits), r.in_flight(now)),
        None => (Capacity::default().effective_limit(now, limits), 0),
    }
}

fn valid_provider(provider: &str) -> bool {
    !provider.is_empty() && provider.len() <= MAX_PROVIDER_LEN
}

/// Drops records past [`MAX_PROVIDERS`]: those without a live lease first, least recently used
/// first.
pub fn prune(records: &mut BTreeMap<String, Capacity>, now: u64) {
    records.retain(|p, _| valid_provider(p));
    let excess = records.len().saturating_sub(MAX_PROVIDERS);
    if excess == 0 {
        return;
    }
    let mut order: Vec<(bool, u64, String)> = records
        .iter()
        .map(|(p, r)| (r.in_flight(now) > 0, r.last_at, p.clone()))
        .collect();
    order.sort();
    for (_, _, p) in order.into_iter().take(excess) {
        records.remove(&p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{DEFAULT_LEASE_TTL_MS, Verdict};

    fn choice(provider: &str, cap: u32) -> Choice {
        Choice {
            provider: provider.into(),
            limits: Limits {
                initial: 8,
                cap: Some(cap),
            },
        }
    }

    fn admit(slot: &str, choices: Vec<Choice>) -> CapacityOp {
        CapacityOp::Admit {
            slot: slot.into(),
            ttl_ms: DEFAULT_LEASE_TTL_MS,
            choices,
            release: None,
            hold_first_ms: 0,
        }
    }

    #[test]
    fn admission_takes_the_first_choice_with_room_and_overflows_in_order() {
        let mut records = BTreeMap::new();
        let both = || vec![choice("a", 1), choice("b", 2)];
        let (r, changed) = apply_op(&mut records, &admit("s1", both()), 1000);
        assert_eq!(
            r,
            CapacityReply::Admitted {
                index: 0,
                limit: 1,
                in_flight: 1
            }
        );
        assert_eq!(changed, ["a"]);
        let (r, _) = apply_op(&mut records, &admit("s2", both()), 1001);
        assert!(
            matches!(r, CapacityReply::Admitted { index: 1, .. }),
            "{r:?}"
        );
        let (r, _) = apply_op(&mut records, &admit("s3", both()), 1002);
        assert!(
            matches!(r, CapacityReply::Admitted { index: 1, .. }),
            "{r:?}"
        );
        let (r, _) = apply_op(&mut records, &admit("s4", both()), 1003);
        assert_eq!(
            r,
            CapacityReply::Full {
                next_expiry: Some(1000 + DEFAULT_LEASE_TTL_MS),
                held: false
            }
        );
        // An answer on `a` frees its slot: the next admission goes back to the first choice.
        let answered = CapacityOp::Apply {
            provider: "a".into(),
            delta: CapacityDelta::Answered {
                at: 2000,
                slot: "s1".into(),
                limits: choice("a", 1).limits,
            },
        };
        assert!(answered.frees());
        apply_op(&mut records, &answered, 2000);
        let (r, _) = apply_op(&mut records, &admit("s4", both()), 2001);
        assert!(
            matches!(r, CapacityReply::Admitted { index: 0, .. }),
            "{r:?}"
        );
        assert_eq!(standing(&records, "b", choice("b", 2).limits, 2002), (2, 2));
    }

    /// `--prefer-primary`: a first choice paused for a short while is waited for, not gone
    /// past; a pause longer than the caller holds for, or none, is gone past as before.
    #[test]
    fn a_paused_first_choice_is_held_for_when_asked() {
        let mut records = BTreeMap::new();
        let both = || vec![choice("a", 2), choice("b", 2)];
        let a = records
            .entry("a".to_string())
            .or_insert_with(Capacity::default);
        a.congested = true;
        a.pause(1000, 5000);
        let held = |ms| CapacityOp::Admit {
            slot: "s".into(),
            ttl_ms: DEFAULT_LEASE_TTL_MS,
            choices: both(),
            release: None,
            hold_first_ms: ms,
        };
        let (r, _) = apply_op(&mut records.clone(), &held(5000), 1000);
        assert_eq!(
            r,
            CapacityReply::Full {
                next_expiry: Some(6000),
                held: true
            }
        );
        let (r, _) = apply_op(&mut records.clone(), &held(4999), 1000);
        assert!(
            matches!(r, CapacityReply::Admitted { index: 1, .. }),
            "{r:?}"
        );
        let (r, _) = apply_op(&mut records.clone(), &held(0), 1000);
        assert!(
            matches!(r, CapacityReply::Admitted { index: 1, .. }),
            "{r:?}"
        );
        // Once the pause is over the first choice is taken again.
        let (r, _) = apply_op(&mut records, &held(5000), 6000);
        assert!(
            matches!(r, CapacityReply::Admitted { index: 0, .. }),
            "{r:?}"
        );
    }

    /// A back-off's end is the store's time: the caller gets it on its own clock, as a full
    /// reply's next expiry (a store 5 s ahead must not make the run wait 5 s longer).
    #[test]
    fn a_back_off_end_is_moved_to_the_callers_clock() {
        let change = crate::capacity::Change { from: 1, to: 1 };
        let backoff = |until| {
            CapacityReply::Applied(Decided::Refused(Verdict::BackOff {
                change,
                until,
                step: 2,
            }))
        };
        assert_eq!(
            backoff(106_500).on_caller_clock(105_000, 100_000),
            backoff(101_500)
        );
        assert_eq!(
            CapacityReply::Full {
                next_expiry: Some(10),
                held: true
            }
            .on_caller_clock(1000, 500),
            CapacityReply::Full {
                next_expiry: Some(500),
                held: true
            },
            "a time already past is now"
        );
        let slow = CapacityReply::Applied(Decided::Refused(Verdict::SlowDown(change)));
        assert_eq!(slow.on_caller_clock(9, 1), slow);
    }

    #[test]
    fn a_provider_in_slow_start_is_waited_for_not_overflowed() {
        let uncapped = |p: &str| Choice {
            provider: p.into(),
            limits: Limits {
                initial: 8,
                cap: None,
            },
        };
        let mut records = BTreeMap::new();
        let both = || vec![uncapped("a"), uncapped("b")];
        for slot in ["s1", "s2"] {
            let (r, _) = apply_op(&mut records, &admit(slot, both()), 0);
            assert!(
                matches!(r, CapacityReply::Admitted { index: 0, .. }),
                "{r:?}"
            );
        }
        // `a` is at its slow-start limit of 2: the third job waits for it.
        let (r, _) = apply_op(&mut records, &admit("s3", both()), 1);
        assert!(matches!(r, CapacityReply::Full { .. }), "{r:?}");
        // Once `a` has refused (its limit is learned), a full `a` overflows to `b`.
        let refused = CapacityOp::Apply {
            provider: "a".into(),
            delta: CapacityDelta::Refused {
                at: 2,
                slot: "s2".into(),
                limits: uncapped("a").limits,
                pause_ms: 0,
                jitter: 0,
            },
        };
        apply_op(&mut records, &refused, 2);
        let (r, _) = apply_op(&mut records, &admit("s3", both()), 3);
        assert!(
            matches!(r, CapacityReply::Admitted { index: 1, .. }),
            "{r:?}"
        );
    }

    #[test]
    fn a_refusal_is_applied_to_its_provider_and_says_what_to_do() {
        let mut records = BTreeMap::new();
        let limits = Limits {
            initial: 1,
            cap: None,
        };
        apply_op(
            &mut records,
            &admit(
                "s",
                vec![Choice {
                    provider: "a".into(),
                    limits,
                }],
            ),
            0,
        );
        let refused = CapacityOp::Apply {
            provider: "a".into(),
            delta: CapacityDelta::Refused {
                at: 10,
                slot: "s".into(),
                limits,
                pause_ms: 0,
                jitter: 0,
            },
        };
        let (r, changed) = apply_op(&mut records, &refused, 10);
        assert!(
            matches!(
                r,
                CapacityReply::Applied(Decided::Refused(Verdict::BackOff { step: 1, .. }))
            ),
            "{r:?}"
        );
        assert_eq!(changed, ["a"]);
    }

    #[test]
    fn bad_names_and_too_many_providers_stay_bounded() {
        let mut records = BTreeMap::new();
        let long = "p".repeat(MAX_PROVIDER_LEN + 1);
        let (r, changed) = apply_op(&mut records, &admit("s", vec![choice(&long, 1)]), 0);
        assert_eq!(r, CapacityReply::Unavailable);
        assert!(changed.is_empty() && records.is_empty());
        for i in 0..(MAX_PROVIDERS + 10) {
            apply_op(
                &mut records,
                &admit("s", vec![choice(&format!("p{i}"), 1)]),
                i as u64,
            );
        }
        assert_eq!(records.len(), MAX_PROVIDERS);
        let (r, _) = apply_op(&mut records, &admit("", vec![choice("q", 1)]), 0);
        assert_eq!(r, CapacityReply::Unavailable, "an empty slot id is refused");
    }
}
