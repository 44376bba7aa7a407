//! Slot leases and the record's shape in a store: grants, TTLs, renewal, hostile records,
//! JSON, and the delta dispatch.

use super::tests::{JOBS8, TTL, granted};
use super::*;

#[test]
fn slots_are_granted_up_to_the_limit_then_the_next_expiry_is_said() {
    let mut c = Capacity::default();
    assert_eq!(
        c.acquire(1000, "a", TTL, JOBS8),
        Admission::Granted {
            limit: 2,
            in_flight: 1
        }
    );
    assert!(granted(&mut c, 2000, "b", JOBS8));
    assert_eq!(
        c.acquire(3000, "c", TTL, JOBS8),
        Admission::Full {
            limit: 2,
            in_flight: 2,
            next_expiry: Some(1000 + TTL)
        }
    );
    assert!(!c.has_free_slot(3000, JOBS8));
    assert_eq!(c.next_expiry(3000), Some(1000 + TTL));
    assert!(c.release(3000, "a"));
    assert!(!c.release(3000, "a"), "released once");
    assert!(c.has_free_slot(3000, JOBS8));
    assert!(granted(&mut c, 3000, "c", JOBS8));
}

#[test]
fn taking_a_held_slot_again_renews_it_and_takes_no_second_slot() {
    let mut c = Capacity::default();
    assert!(granted(&mut c, 0, "a", JOBS8));
    assert!(granted(&mut c, 5000, "a", JOBS8));
    assert_eq!(c.in_flight(5000), 1);
    assert_eq!(c.leases["a"].until, 5000 + TTL);
}

#[test]
fn bad_slot_ids_are_never_granted() {
    let mut c = Capacity::default();
    assert_eq!(c.acquire(0, "", TTL, JOBS8), Admission::BadSlot);
    let long = "x".repeat(MAX_SLOT_ID_LEN + 1);
    assert_eq!(c.acquire(0, &long, TTL, JOBS8), Admission::BadSlot);
    assert_eq!(c.renew(0, &long, TTL), Renewal::Lost);
    assert!(c.leases.is_empty());
}

#[test]
fn expired_leases_free_their_slots_and_renewal_keeps_them() {
    let mut c = Capacity::default();
    assert!(granted(&mut c, 0, "dead", JOBS8));
    assert!(granted(&mut c, 0, "alive", JOBS8));
    assert_eq!(c.renew(TTL - 1, "alive", TTL), Renewal::Renewed);
    assert!(!c.has_free_slot(TTL - 1, JOBS8));
    // The holder of "dead" was SIGKILLed: at its expiry the slot is free again.
    assert_eq!(c.in_flight(TTL), 1);
    assert!(granted(&mut c, TTL, "new", JOBS8));
    assert!(!c.leases.contains_key("dead"), "pruned by the operation");
}

#[test]
fn a_renewal_after_expiry_counts_the_request_again_even_past_the_limit() {
    let mut c = Capacity::default();
    assert!(granted(&mut c, 0, "slow", JOBS8));
    assert!(granted(&mut c, TTL, "b", JOBS8));
    assert!(granted(&mut c, TTL, "c", JOBS8));
    assert_eq!(c.renew(TTL + 1, "slow", TTL), Renewal::Restored);
    assert_eq!(c.in_flight(TTL + 1), 3);
    assert!(!c.has_free_slot(TTL + 1, JOBS8));
}

#[test]
fn lease_ttls_are_bounded() {
    let mut c = Capacity::default();
    assert!(matches!(
        c.acquire(10, "a", u64::MAX, JOBS8),
        Admission::Granted { .. }
    ));
    assert_eq!(c.leases["a"].until, 10 + MAX_LEASE_TTL_MS);
    assert!(granted(&mut c, 10, "b", JOBS8));
    c.renew(10, "b", 0);
    assert_eq!(
        c.leases["b"].until,
        10 + TTL,
        "a zero TTL never shortens a lease"
    );
}

#[test]
fn a_hostile_record_is_brought_into_shape() {
    let mut leases = BTreeMap::new();
    for i in 0..5000u64 {
        leases.insert(
            format!("s{i}"),
            Lease {
                until: u64::MAX - i,
                generation: u64::MAX,
            },
        );
    }
    leases.insert(
        "y".repeat(10_000),
        Lease {
            until: u64::MAX,
            generation: 0,
        },
    );
    let mut c = Capacity {
        limit: u32::MAX,
        generation: u64::MAX,
        clean: u32::MAX,
        refused_at: u32::MAX,
        failed_probes: u32::MAX,
        refusals_at_one: u32::MAX,
        last_at: u64::MAX,
        leases,
        ..Capacity::default()
    };
    assert!(matches!(
        c.acquire(1000, "me", TTL, JOBS8),
        Admission::Full { limit: 256, in_flight: 256, next_expiry: Some(t) } if t == 1000 + MAX_LEASE_TTL_MS
    ));
    assert_eq!(c.leases.len(), MAX_LEASES);
    assert!(c.leases.keys().all(|k| k.len() <= MAX_SLOT_ID_LEN));
    assert_eq!(c.limit, MAX_LIMIT);
    // Every hostile lease is gone within the longest TTL.
    assert!(granted(&mut c, 1000 + MAX_LEASE_TTL_MS, "me", JOBS8));
    assert_eq!(
        c.refused(1001 + MAX_LEASE_TTL_MS, "me", JOBS8, 0),
        Verdict::RateLimited
    );
    let zero = Capacity {
        limit: 0,
        congested: true,
        ..Capacity::default()
    };
    assert_eq!(zero.effective_limit(0, JOBS8), START_LIMIT);
}

#[test]
fn the_record_reads_from_any_partial_json_and_round_trips() {
    let c: Capacity = serde_json::from_str("{}").unwrap();
    assert_eq!(c, Capacity::default());
    let c: Capacity =
        serde_json::from_str(r#"{"limit":3,"leases":{"h:1:0":{"until":9}},"future":true}"#)
            .unwrap();
    assert_eq!(c.limit, 3);
    assert_eq!(
        c.leases["h:1:0"],
        Lease {
            until: 9,
            generation: 0
        }
    );
    let mut c = Capacity::default();
    assert!(granted(&mut c, 0, "a", JOBS8));
    let back: Capacity = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
}

#[test]
fn apply_dispatches_every_delta() {
    let mut c = Capacity::default();
    let slot = || "a".to_string();
    assert!(matches!(
        c.apply(&CapacityDelta::Acquire {
            at: 0,
            slot: slot(),
            ttl_ms: TTL,
            limits: JOBS8
        }),
        Decided::Admission(Admission::Granted { .. })
    ));
    assert_eq!(
        c.apply(&CapacityDelta::Renew {
            at: 1,
            slot: slot(),
            ttl_ms: TTL
        }),
        Decided::Renewal(Renewal::Renewed)
    );
    assert_eq!(
        c.apply(&CapacityDelta::Answered {
            at: 2,
            slot: slot(),
            limits: JOBS8
        }),
        Decided::Answered(Change { from: 2, to: 2 })
    );
    assert_eq!(
        c.apply(&CapacityDelta::Release {
            at: 3,
            slot: slot()
        }),
        Decided::Released(false)
    );
    assert_eq!(
        c.apply(&CapacityDelta::Refused {
            at: 4,
            slot: slot(),
            limits: JOBS8,
            pause_ms: 0,
            jitter: 0,
        }),
        // The only request in flight: others use the key, it is left alone for a back-off.
        Decided::Refused(Verdict::BackOff {
            change: Change { from: 2, to: 1 },
            until: 4 + super::backoff::delay_ms(1, 0),
            step: 1
        })
    );
}

/// A refusal that states a delay: nobody gets a slot on the provider until then (the waiter is
/// told to ask again at its end), then admission goes on as usual; a stated delay is believed
/// up to `MAX_PAUSE_MS`.
#[test]
fn a_stated_pause_grants_no_slot_until_it_ends() {
    let mut c = Capacity::default();
    assert!(matches!(
        c.acquire(0, "x", DEFAULT_LEASE_TTL_MS, JOBS8),
        Admission::Granted { .. }
    ));
    c.apply(&CapacityDelta::Refused {
        at: 1000,
        slot: "x".into(),
        limits: JOBS8,
        pause_ms: 2000,
        jitter: 0,
    });
    assert_eq!(
        c.acquire(2999, "y", DEFAULT_LEASE_TTL_MS, JOBS8),
        Admission::Full {
            limit: 1,
            in_flight: 0,
            next_expiry: Some(3000)
        }
    );
    assert!(!c.has_free_slot(2999, JOBS8));
    assert_eq!(c.next_expiry(2999), Some(3000));
    assert!(c.has_free_slot(3000, JOBS8));
    assert!(matches!(
        c.acquire(3000, "y", DEFAULT_LEASE_TTL_MS, JOBS8),
        Admission::Granted { .. }
    ));

    let mut c = Capacity::default();
    c.acquire(0, "x", DEFAULT_LEASE_TTL_MS, JOBS8);
    c.apply(&CapacityDelta::Refused {
        at: 0,
        slot: "x".into(),
        limits: JOBS8,
        pause_ms: u64::MAX,
        jitter: 0,
    });
    assert_eq!(c.paused_until, MAX_PAUSE_MS, "bounded");
}

/// Old capacity records (no pause) read as before, and a record without a pause writes none.
#[test]
fn a_record_without_a_pause_keeps_its_old_shape() {
    let c = Capacity::default();
    let json = serde_json::to_value(&c).unwrap_or_default();
    assert!(json.get("paused_until").is_none(), "{json}");
}
