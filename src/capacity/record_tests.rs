//! Exact AIMD rules of the capacity record, on hand-made times.

use super::*;

pub(super) const JOBS8: Limits = Limits {
    initial: 8,
    cap: None,
};
pub(super) const TTL: u64 = DEFAULT_LEASE_TTL_MS;

fn capped(initial: u32, cap: u32) -> Limits {
    Limits {
        initial,
        cap: Some(cap),
    }
}

pub(super) fn granted(c: &mut Capacity, at: u64, slot: &str, limits: Limits) -> bool {
    matches!(c.acquire(at, slot, TTL, limits), Admission::Granted { .. })
}

/// Takes slots `s0, s1, …` until one is refused; returns how many were granted.
fn fill(c: &mut Capacity, at: u64, limits: Limits) -> usize {
    (0..1000)
        .take_while(|i| granted(c, at, &format!("s{i}"), limits))
        .count()
}

/// A record that learned `limit` after a refusal at `refused_at` in flight.
fn learned(limit: u32, refused_at: u32) -> Capacity {
    Capacity {
        limit,
        congested: true,
        refused_at,
        generation: 7,
        last_at: 0,
        ..Capacity::default()
    }
}

/// One full window at the record's limit: fill, answer every slot cleanly.
fn clean_window(c: &mut Capacity, at: u64, limits: Limits) {
    let n = fill(c, at, limits);
    for i in 0..n {
        c.answered(at + 1, &format!("s{i}"), limits);
    }
}

#[test]
fn a_fresh_record_starts_at_two_or_the_explicit_cap() {
    let c = Capacity::default();
    assert_eq!(c.effective_limit(0, JOBS8), START_LIMIT);
    let one = Limits {
        initial: 1,
        cap: None,
    };
    assert_eq!(c.effective_limit(0, one), 1, "never above --jobs");
    assert_eq!(
        c.effective_limit(0, capped(8, 3)),
        3,
        "the user's cap is trusted"
    );
    assert_eq!(c.effective_limit(0, capped(2, 5)), 2, "at most --jobs");
    let zeros = Limits {
        initial: 0,
        cap: Some(0),
    };
    assert_eq!(c.effective_limit(0, zeros), 1, "never below 1");
}

#[test]
fn slow_start_raises_by_one_per_clean_answer_while_every_slot_is_used() {
    let mut c = Capacity::default();
    assert_eq!(fill(&mut c, 0, JOBS8), 2);
    assert_eq!(c.answered(1000, "s0", JOBS8), Change { from: 2, to: 3 });
    // Two slots of three in use: not saturated yet, no raise on the next answer.
    assert_eq!(c.answered(1000, "s1", JOBS8), Change { from: 3, to: 3 });
    assert_eq!(fill(&mut c, 1000, JOBS8), 3);
    assert_eq!(c.answered(2000, "s0", JOBS8).to, 4);
    assert!(granted(&mut c, 2000, "s3", JOBS8));
    assert!(granted(&mut c, 2000, "s4", JOBS8));
    // s1 was sent under 3: no evidence that 4 works (s3 and s4 may yet be refused).
    assert_eq!(c.answered(2100, "s1", JOBS8).to, 4);
    assert_eq!(c.answered(3000, "s3", JOBS8).to, 5);
}

#[test]
fn the_limit_never_rises_above_the_cap() {
    let mut c = Capacity::default();
    let cap = capped(8, 3);
    for round in 0..20 {
        clean_window(&mut c, round * 1000, cap);
    }
    assert_eq!(c.effective_limit(30_000, cap), 3);
    assert!(c.limit <= 3);
}

#[test]
fn without_using_every_slot_there_is_no_raise() {
    let mut c = learned(4, 0);
    for i in 0..100 {
        assert!(granted(&mut c, i, "a", JOBS8));
        assert!(granted(&mut c, i, "b", JOBS8));
        c.answered(i, "a", JOBS8);
        c.answered(i, "b", JOBS8);
    }
    assert_eq!(c.effective_limit(100, JOBS8), 4);
}

#[test]
fn additive_increase_is_one_per_window_after_a_cut() {
    let mut c = learned(4, 0);
    clean_window(&mut c, 0, JOBS8);
    assert_eq!(c.effective_limit(10, JOBS8), 5);
    // Half a window is not enough.
    let n = fill(&mut c, 20, JOBS8);
    for i in 0..n - 1 {
        c.answered(21, &format!("s{i}"), JOBS8);
    }
    assert_eq!(c.effective_limit(22, JOBS8), 5);
    c.answered(22, &format!("s{}", n - 1), JOBS8);
    assert_eq!(c.effective_limit(23, JOBS8), 6);
}

#[test]
fn a_signal_cuts_by_a_quarter_and_once_per_generation() {
    let mut c = learned(8, 0);
    assert_eq!(fill(&mut c, 0, JOBS8), 8);
    assert_eq!(
        c.refused(10, "s7", JOBS8, 0),
        Verdict::SlowDown(Change { from: 8, to: 6 })
    );
    assert_eq!(c.refused_at, 8);
    // s6 was admitted under 8 and refused with 7 in flight, more than 6: no second cut.
    assert_eq!(
        c.refused(11, "s6", JOBS8, 0),
        Verdict::SlowDown(Change { from: 6, to: 6 })
    );
    assert_eq!(c.in_flight(11), 6);
}

#[test]
fn an_initial_burst_settles_on_the_true_cap_without_cascading_halvings() {
    // --jobs 8 against a cap of 2 with 8 sent at once: six refused in a row.
    let mut c = learned(8, 0);
    assert_eq!(fill(&mut c, 0, JOBS8), 8);
    let limits: Vec<u32> = (2..8)
        .rev()
        .map(|i| match c.refused(1, &format!("s{i}"), JOBS8, 0) {
            Verdict::SlowDown(ch) | Verdict::BackOff { change: ch, .. } => ch.to,
            Verdict::RateLimited => 0,
        })
        .collect();
    // 8 → ⌊¾·8⌋ = 6; 7 in flight > 6: kept; 6 in flight ≤ 6: bound to 5; then 4, 3, 2.
    assert_eq!(limits, [6, 6, 5, 4, 3, 2]);
    assert_eq!(c.refused_at, 3);
    assert_eq!(c.in_flight(1), 2);
    assert!(!c.has_free_slot(1, JOBS8), "the two accepted ones fill it");
}

#[test]
fn cuts_never_go_below_one() {
    let mut c = learned(1, 0);
    assert!(granted(&mut c, 0, "a", JOBS8));
    assert_eq!(
        c.refused(1, "a", JOBS8, 0),
        Verdict::BackOff {
            change: Change { from: 1, to: 1 },
            until: 1 + super::backoff::delay_ms(1, 0),
            step: 1
        }
    );
    let mut c = learned(2, 0);
    assert_eq!(fill(&mut c, 0, JOBS8), 2);
    assert_eq!(
        c.refused(1, "s1", JOBS8, 0),
        Verdict::SlowDown(Change { from: 2, to: 1 })
    );
}

#[test]
fn a_signal_on_an_unknown_slot_counts_it_in_flight_but_does_not_cut_by_a_quarter() {
    let mut c = learned(4, 0);
    assert_eq!(fill(&mut c, 0, JOBS8), 4);
    c.release(0, "s3");
    // Its lease expired or the store was reset: 4 in flight with it, within the limit of 4.
    assert_eq!(
        c.refused(1, "gone", JOBS8, 0),
        Verdict::SlowDown(Change { from: 4, to: 3 })
    );
}

#[test]
fn probing_the_refused_level_waits_and_backs_off() {
    let mut c = learned(2, 3);
    let probe = PROBE_ANSWERS; // max(32, 4·2)
    let mut t = 0;
    let mut answers = 0;
    while c.effective_limit(t, JOBS8) == 2 {
        clean_window(&mut c, t, JOBS8);
        answers += 2;
        t += 1000;
        assert!(answers <= 1000, "never probed");
    }
    assert_eq!(answers, probe);
    // The probe is refused at 3 in flight: back to 2, and the next one waits twice as long.
    assert_eq!(fill(&mut c, t, JOBS8), 3);
    assert_eq!(
        c.refused(t, "s2", JOBS8, 0),
        Verdict::SlowDown(Change { from: 3, to: 2 })
    );
    assert_eq!(c.failed_probes, 1);
    // Sent under the probe's limit: they do not count towards the next one.
    c.answered(t, "s0", JOBS8);
    c.answered(t, "s1", JOBS8);
    assert_eq!(c.clean, 0);
    let mut answers = 0;
    while c.effective_limit(t, JOBS8) == 2 {
        t += 1000;
        clean_window(&mut c, t, JOBS8);
        answers += 2;
    }
    assert_eq!(answers, 2 * probe);
}

#[test]
fn the_probe_wait_is_capped_and_scales_with_the_limit() {
    let mut c = learned(20, 21);
    c.failed_probes = 1000;
    assert_eq!(c.needed(20), PROBE_WINDOWS * 20 * (1 << MAX_PROBE_BACKOFF));
    assert_eq!(c.needed(10), 10, "below the refused level: one window");
}

#[test]
fn a_probe_that_holds_a_window_forgets_the_refusal() {
    let mut c = learned(3, 3); // raised onto the refused level by a probe
    c.failed_probes = 2;
    clean_window(&mut c, 0, JOBS8);
    assert_eq!(c.effective_limit(10, JOBS8), 4);
    assert_eq!((c.refused_at, c.failed_probes), (0, 0));
    clean_window(&mut c, 10, JOBS8);
    assert_eq!(c.effective_limit(20, JOBS8), 5, "then one per window");
}

#[test]
fn below_the_refused_level_the_limit_recovers_one_per_window() {
    let mut c = learned(6, 8);
    clean_window(&mut c, 0, JOBS8);
    assert_eq!(c.effective_limit(10, JOBS8), 7);
    clean_window(&mut c, 10, JOBS8);
    assert_eq!(
        c.effective_limit(20, JOBS8),
        7,
        "8 was refused: a probe waits"
    );
}

/// Refusals at one request in flight are others' load: each pauses the provider for a growing,
/// jittered back-off (nobody is granted a slot meanwhile); the one after a back-off at its
/// limit is a rate limit.
#[test]
fn refusals_in_a_row_at_one_back_off_then_mean_rate_limited() {
    use super::backoff::{STEPS, delay_ms};
    let mut c = learned(1, 0);
    let mut t = 0;
    let mut refuse = |c: &mut Capacity, jitter: u64| {
        // Granted once the previous back-off is over, not before.
        if c.paused_until > t {
            assert!(!c.has_free_slot(c.paused_until - 1, JOBS8));
            t = c.paused_until;
        }
        assert!(granted(c, t, "a", JOBS8));
        (t, c.refused(t, "a", JOBS8, jitter))
    };
    let (at, v) = refuse(&mut c, 7);
    assert_eq!(
        v,
        Verdict::BackOff {
            change: Change { from: 1, to: 1 },
            until: at + delay_ms(1, 7),
            step: 1
        }
    );
    // A clean answer in between starts the count again.
    let resumed = c.paused_until;
    assert!(granted(&mut c, resumed, "a", JOBS8));
    c.answered(resumed, "a", JOBS8);
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        let (at, v) = refuse(&mut c, 7);
        let Verdict::BackOff { until, step, .. } = v else {
            panic!("{v:?}")
        };
        assert_eq!(until, at + delay_ms(step, 7));
        steps.push(step);
    }
    assert_eq!(steps, [1, 2, 3, 4, 5]);
    assert_eq!(refuse(&mut c, 7).1, Verdict::RateLimited);
    assert_eq!(
        refuse(&mut c, 7).1,
        Verdict::RateLimited,
        "a failed probe too"
    );
}

/// A stated pause longer than the back-off wins; a shorter one does not shorten it.
#[test]
fn a_stated_pause_and_a_back_off_take_the_longer() {
    for (stated, expect) in [(0, 529), (200, 529), (5000, 5000)] {
        let mut c = learned(1, 0);
        assert!(granted(&mut c, 0, "a", JOBS8));
        let out = c.apply(&CapacityDelta::Refused {
            at: 0,
            slot: "a".into(),
            limits: JOBS8,
            pause_ms: stated,
            jitter: 1,
        });
        assert_eq!(super::backoff::delay_ms(1, 1), 529);
        assert_eq!(
            out,
            Decided::Refused(Verdict::BackOff {
                change: Change { from: 1, to: 1 },
                until: expect,
                step: 1
            }),
            "stated {stated}"
        );
        assert_eq!(c.next_expiry(1), Some(expect));
    }
}

#[test]
fn refusals_with_others_in_flight_are_not_refusals_at_one() {
    let mut c = learned(2, 0);
    for t in 0..10 {
        assert!(granted(&mut c, t, "a", JOBS8));
        // Restored past the limit if need be: two in flight at every refusal.
        c.renew(t, "b", TTL);
        c.refused(t, "b", JOBS8, 0);
        c.release(t, "a");
    }
    assert_eq!(c.refusals_at_one, 0);
}

#[test]
fn refusals_are_forgotten_after_an_idle_spell_and_the_limit_kept_as_the_start() {
    let mut c = learned(1, 2);
    c.last_at = 5000;
    c.refusals_at_one = 2;
    c.failed_probes = 3;
    assert_eq!(c.effective_limit(5000 + IDLE_FORGET_MS - 1, JOBS8), 1);
    assert_eq!(
        c.effective_limit(5000 + IDLE_FORGET_MS, JOBS8),
        START_LIMIT,
        "never below the start once refusals are forgotten"
    );
    // A held slot keeps it alive.
    assert!(granted(&mut c, 5000, "a", JOBS8));
    c.renew(5000 + IDLE_FORGET_MS - 10, "a", MAX_LEASE_TTL_MS);
    assert_eq!(c.effective_limit(5000 + IDLE_FORGET_MS + 10, JOBS8), 1);
    let generation = c.generation;
    assert!(granted(&mut c, 5000 + 3 * IDLE_FORGET_MS, "b", JOBS8));
    assert_eq!(
        (
            c.limit,
            c.refused_at,
            c.failed_probes,
            c.refusals_at_one,
            c.congested
        ),
        (1, 0, 0, 0, false)
    );
    assert_eq!(c.generation, generation, "the generation moves on only");
    // A limit learned high is where the next batch starts.
    let mut c = learned(6, 0);
    c.congested = false;
    assert_eq!(c.effective_limit(IDLE_FORGET_MS, JOBS8), 6);
}
