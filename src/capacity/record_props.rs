//! Random-input tests of the capacity record: whatever a store held and whatever deltas arrive
//! in whatever order, nothing panics, the limit stays within its bounds, admission never
//! exceeds it, and the lease table stays small and fresh.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        0u64..200_000,
        any::<u64>(),
    ]
}

fn edge_u32() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0), Just(1), Just(u32::MAX), 0u32..300, any::<u32>()]
}

/// Slot ids: a few that collide, plus the empty and an over-long one.
fn slot() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0u8..8).prop_map(|i| format!("h:1:{i}")),
        1 => Just(String::new()),
        1 => Just("z".repeat(MAX_SLOT_ID_LEN + 1)),
    ]
}

fn limits() -> impl Strategy<Value = Limits> {
    let cap = prop_oneof![
        Just(None),
        edge_u32().prop_map(Some),
        (1u32..10).prop_map(Some)
    ];
    (prop_oneof![edge_u32(), 1u32..10], cap).prop_map(|(initial, cap)| Limits { initial, cap })
}

/// A record as a hostile or corrupt store could hold it.
fn record() -> impl Strategy<Value = Capacity> {
    let leases = proptest::collection::vec((slot(), edge_u64(), edge_u64()), 0..40);
    let many = prop_oneof![Just(0usize), Just(300), Just(3000)];
    (
        (
            edge_u32(),
            edge_u64(),
            any::<bool>(),
            edge_u32(),
            any::<bool>(),
        ),
        (edge_u32(), edge_u32(), edge_u32(), edge_u64()),
        leases,
        many,
        edge_u64(),
    )
        .prop_map(
            |(
                (limit, generation, congested, clean, saturated),
                (refused_at, failed_probes, refusals_at_one, last_at),
                leases,
                many,
                until,
            )| {
                let mut table: BTreeMap<String, Lease> = leases
                    .into_iter()
                    .map(|(id, until, generation)| (id, Lease { until, generation }))
                    .collect();
                for i in 0..many {
                    table.insert(
                        format!("bulk{i}"),
                        Lease {
                            until: until.saturating_add(i as u64),
                            generation,
                        },
                    );
                }
                Capacity {
                    limit,
                    generation,
                    congested,
                    clean,
                    saturated,
                    refused_at,
                    failed_probes,
                    refusals_at_one,
                    last_at,
                    leases: table,
                    paused_until: 0,
                }
            },
        )
}

/// Deltas at times that mostly move on and sometimes go back (another host's clock).
fn deltas() -> impl Strategy<Value = Vec<CapacityDelta>> {
    let step = prop_oneof![
        8 => 0u64..20_000,
        1 => Just(IDLE_FORGET_MS),
        1 => Just(0),
    ];
    let back = prop_oneof![9 => Just(false), 1 => Just(true)];
    let ttl = prop_oneof![
        Just(0),
        Just(DEFAULT_LEASE_TTL_MS),
        Just(u64::MAX),
        0u64..100_000
    ];
    let op = (0u8..5, slot(), ttl, limits(), step, back);
    proptest::collection::vec(op, 1..120).prop_map(|ops| {
        let mut at: u64 = 1_700_000_000_000;
        ops.into_iter()
            .map(|(kind, slot, ttl_ms, limits, step, back)| {
                at = if back {
                    at.saturating_sub(step)
                } else {
                    at.saturating_add(step)
                };
                match kind {
                    0 | 1 => CapacityDelta::Acquire {
                        at,
                        slot,
                        ttl_ms,
                        limits,
                    },
                    2 => CapacityDelta::Renew { at, slot, ttl_ms },
                    3 => CapacityDelta::Answered { at, slot, limits },
                    _ => CapacityDelta::Refused {
                        at,
                        slot,
                        limits,
                        pause_ms: ttl_ms,
                        jitter: 0,
                    },
                }
            })
            .collect()
    })
}

fn parts(d: &CapacityDelta) -> (u64, &str, Option<Limits>) {
    match d {
        CapacityDelta::Acquire {
            at, slot, limits, ..
        }
        | CapacityDelta::Answered { at, slot, limits }
        | CapacityDelta::Refused {
            at, slot, limits, ..
        } => (*at, slot, Some(*limits)),
        CapacityDelta::Renew { at, slot, .. } | CapacityDelta::Release { at, slot } => {
            (*at, slot, None)
        }
    }
}

/// Every invariant that holds after any operation at `at`.
fn check_shape(c: &Capacity, at: u64) -> Result<(), TestCaseError> {
    prop_assert!(c.leases.len() <= MAX_LEASES, "{} leases", c.leases.len());
    prop_assert!(c.limit <= MAX_LIMIT);
    for (id, lease) in &c.leases {
        prop_assert!(!id.is_empty() && id.len() <= MAX_SLOT_ID_LEN);
        prop_assert!(lease.until > at, "expired lease kept");
        prop_assert!(lease.until <= at.saturating_add(MAX_LEASE_TTL_MS));
    }
    prop_assert!(
        c.paused_until <= at.saturating_add(MAX_PAUSE_MS),
        "pause too long"
    );
    Ok(())
}

fn check_limit(c: &Capacity, at: u64, limits: Limits) -> Result<(), TestCaseError> {
    let limit = c.effective_limit(at, limits);
    prop_assert!(limit >= 1 && limit <= limits.ceiling());
    if let Some(cap) = limits.cap {
        prop_assert!(limit <= cap.max(1));
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::fuzz::config(1000))]

    #[test]
    fn any_record_and_deltas_keep_every_bound(mut c in record(), ds in deltas()) {
        for d in &ds {
            let (at, slot, limits) = parts(d);
            let was_live = c.leases.get(slot).is_some_and(|l| l.until > at);
            let before = limits.map(|l| c.effective_limit(at, l));
            let outcome = c.apply(d);
            check_shape(&c, at)?;
            if let Some(limits) = limits {
                check_limit(&c, at, limits)?;
            }
            match outcome {
                Decided::Admission(Admission::Granted { limit, in_flight }) if !was_live => {
                    prop_assert!(in_flight <= limit, "{} in flight over {}", in_flight, limit);
                    prop_assert!(c.paused_until <= at, "granted during a pause");
                    prop_assert_eq!(in_flight, c.in_flight(at));
                }
                Decided::Answered(ch) => {
                    prop_assert!(ch.to <= ch.from + 1, "{:?}: more than one per answer", ch);
                    prop_assert_eq!(Some(ch.from), before);
                }
                Decided::Refused(Verdict::SlowDown(ch)) => {
                    prop_assert!(ch.to >= 1 && ch.to <= ch.from, "{:?}", ch);
                }
                _ => {}
            }
        }
    }

    /// The queries agree with what an acquisition would do.
    #[test]
    fn queries_agree_with_acquisition(mut c in record(), ds in deltas(), l in limits()) {
        for d in &ds {
            c.apply(d);
            let (at, _, _) = parts(d);
            let free = c.has_free_slot(at, l);
            let mut trial = c.clone();
            let outcome = trial.acquire(at, "fresh-slot", DEFAULT_LEASE_TTL_MS, l);
            prop_assert_eq!(free, matches!(outcome, Admission::Granted { .. }));
            if let Admission::Full { next_expiry, .. } = outcome {
                prop_assert_eq!(next_expiry, c.next_expiry(at));
                prop_assert!(next_expiry.is_none_or(|t| t > at));
            }
        }
    }

    /// A slot nobody renews is free again by its expiry, whatever else happens.
    #[test]
    fn unrenewed_leases_are_reclaimed(
        ttl in 1u64..120_000,
        others in proptest::collection::vec((0u8..4, 0u64..5000), 0..50),
    ) {
        let limits = Limits { initial: 1, cap: Some(1) };
        let mut c = Capacity::default();
        let granted = matches!(c.acquire(0, "dead", ttl, limits), Admission::Granted { .. });
        prop_assert!(granted);
        let mut at = 0;
        for (kind, step) in others {
            at += step;
            let slot = format!("other{kind}");
            match kind {
                0 => { c.acquire(at, &slot, ttl, limits); }
                1 => { c.renew(at, &slot, ttl); }
                2 => { c.answered(at, &slot, limits); }
                _ => { c.refused(at, &slot, limits, 0); }
            }
        }
        let gone = ttl.min(MAX_LEASE_TTL_MS).max(at + 1);
        prop_assert!(!c.tidied(gone).leases.contains_key("dead"));
    }

    /// Whatever JSON a store holds: read or refused, never a panic when used.
    #[test]
    fn any_json_record_is_read_or_refused(v in json_record(), ds in deltas()) {
        if let Ok(mut c) = serde_json::from_value::<Capacity>(v) {
            for d in &ds {
                c.apply(d);
                check_shape(&c, parts(d).0)?;
            }
        }
    }
}

fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        Just(json!(u64::MAX)),
        Just(json!(0)),
        Just(Value::Null),
        Just(json!("7")),
        Just(json!(true)),
    ]
}

fn json_record() -> impl Strategy<Value = Value> {
    let lease = (json_number(), json_number())
        .prop_map(|(until, generation)| json!({"until": until, "generation": generation}));
    let leases = proptest::collection::btree_map(slot(), lease, 0..20)
        .prop_map(|m| Value::Object(m.into_iter().collect()));
    (
        proptest::collection::vec(json_number(), 10),
        prop_oneof![leases, json_number()],
    )
        .prop_map(|(n, leases)| {
            json!({
                "limit": n[0], "generation": n[1], "congested": n[2], "clean": n[3],
                "saturated": n[4], "refused_at": n[5], "failed_probes": n[6],
                "refusals_at_one": n[7], "last_at": n[8], "leases": leases,
                "paused_until": n[9],
            })
        })
}
