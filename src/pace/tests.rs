//! Exact cases of the pace estimator, the watchdogs and the deadline split, on hand-made times.

use std::time::Duration;

use super::share::{SHARE_FLOOR_MS, first_response_share};
use super::watchdog::{Basis, Bounds, SLACK_MS, Watchdogs};
use super::*;

const NOW: u64 = 1_800_000_000_000;
const DAY: u64 = 24 * 3_600_000;

fn s(at_ms: u64, first_ms: u64, gap_ms: u64) -> Sample {
    Sample {
        at_ms,
        first_ms,
        gap_ms,
        prompt_chars: 100,
    }
}

fn bounds() -> Bounds {
    Bounds {
        first_ceiling: Duration::from_secs(90),
        stall_ceiling: Duration::from_secs(120),
        floor: Duration::from_secs(3),
    }
}

#[test]
fn twenty_fresh_answers_put_p95_at_the_nineteenth() {
    let r = PaceRecord::from_samples((1..=20).map(|i| s(NOW - i, i * 100, i * 10)));
    let sum = r.summary(NOW, 100).expect("answers");
    assert_eq!(sum.answers, 20);
    assert_eq!(sum.first_p95_ms, 1900);
    assert_eq!(sum.gap_p95_ms, 190);
    assert!(sum.trusted());
    assert_eq!(
        sum.describe(),
        "first response p95 1.9 s, longest gap p95 190 ms over 20 answers"
    );
}

#[test]
fn old_answers_weigh_less_and_then_nothing() {
    // Ten answers of 10 s a day ago (weight 5 in all) against four fresh ones of 1 s.
    let mut samples: Vec<Sample> = (0..10).map(|i| s(NOW - DAY - i, 10_000, 0)).collect();
    samples.extend((0..4).map(|i| s(NOW - i, 1000, 0)));
    let r = PaceRecord::from_samples(samples.clone());
    let sum = r.summary(NOW, 100).unwrap();
    assert!((sum.weight - 9.0).abs() < 0.01, "{}", sum.weight);
    assert_eq!(
        sum.first_p95_ms, 10_000,
        "the old night still weighs 5 of 9"
    );
    // A week on, the old night counts for nothing.
    let sum = r.summary(NOW + 6 * DAY + 1, 100).unwrap();
    assert_eq!(sum.answers, 4);
    assert_eq!(sum.first_p95_ms, 1000);
    assert!(
        !sum.trusted(),
        "four answers of six days ago are no history"
    );
}

#[test]
fn a_longer_prompt_expects_a_later_start_never_an_earlier_one() {
    let r = PaceRecord::from_samples((0..10).map(|i| Sample {
        at_ms: NOW - i,
        first_ms: 1000,
        gap_ms: 0,
        prompt_chars: 2000,
    }));
    assert_eq!(r.summary(NOW, 100).unwrap().first_p95_ms, 1000);
    assert_eq!(r.summary(NOW, 2000).unwrap().first_p95_ms, 1000);
    // (38 000 + 8000) / (2000 + 8000) = 4.6
    assert_eq!(r.summary(NOW, 38_000).unwrap().first_p95_ms, 4600);
}

#[test]
fn records_keep_the_newest_answers_once() {
    let mut r = PaceRecord::default();
    for i in 0..(MAX_SAMPLES as u64 + 7) {
        r.add(s(NOW + i, 100, 0));
    }
    r.add(s(NOW + 3, 100, 0));
    assert_eq!(r.samples().len(), MAX_SAMPLES);
    assert_eq!(r.samples()[0].at_ms, NOW + 7);
    assert_eq!(r.last_at(), NOW + MAX_SAMPLES as u64 + 6);
    r.add(s(NOW, 0, 0));
    r.add(s(NOW, MAX_SAMPLE_MS + 1, 0));
    assert_eq!(
        r.samples().len(),
        MAX_SAMPLES,
        "invalid samples are not added"
    );
}

#[test]
fn stored_records_are_read_leniently() {
    let v = serde_json::json!([
        [NOW, 1200, 300, 50],
        [NOW, 0, 300, 50],
        [NOW, -1, 300, 50],
        [NOW, 1.5, 3, 5],
        ["x", 1, 1, 1],
        [NOW, 1, 1],
        {"at": NOW},
        null
    ]);
    let r = PaceRecord::from_value(&v);
    assert_eq!(
        r.samples(),
        &[Sample {
            at_ms: NOW,
            first_ms: 1200,
            gap_ms: 300,
            prompt_chars: 50
        }]
    );
    assert!(PaceRecord::from_value(&serde_json::json!("junk")).is_empty());
    let map: BTreeMap<String, PaceRecord> = lenient_map(serde_json::json!({
        "a/m": [[NOW, 1200, 300, 50]],
        "b/m": "junk",
        "": [[NOW, 1, 1, 1]]
    }))
    .unwrap();
    assert_eq!(map.keys().collect::<Vec<_>>(), ["a/m"]);
    assert!(lenient_map(serde_json::json!([1, 2])).unwrap().is_empty());
    assert_eq!(
        serde_json::to_string(&map["a/m"]).unwrap(),
        format!("[[{NOW},1200,300,50]]")
    );
    assert_eq!(
        Sample::decode(format!("[{NOW},1200,300,50]").as_bytes()),
        Some(map["a/m"].samples()[0])
    );
    assert_eq!(Sample::decode(b"[1,2,3]"), None);
    assert_eq!(Sample::decode(&[b' '; 300]), None);
}

#[test]
fn clamping_drops_future_and_ancient_samples() {
    let mut r = PaceRecord::from_samples([
        s(u64::MAX - 1, 100, 0),
        s(NOW + MAX_SKEW_MS + 1, 100, 0),
        s(NOW + MAX_SKEW_MS, 200, 0),
        s(NOW - MAX_AGE_MS - 1, 300, 0),
        s(NOW - 5, 400, 0),
    ]);
    r.clamp(NOW);
    let firsts: Vec<u64> = r.samples().iter().map(|s| s.first_ms).collect();
    assert_eq!(firsts, [400, 200]);
}

#[test]
fn no_history_is_the_ceiling() {
    let w = Watchdogs::derive(None, bounds());
    assert_eq!((w.first_response.ms, w.stall.ms), (90_000, 120_000));
    assert_eq!(w.first_response.basis, Basis::NoHistory { answers: 0 });
    let few = PaceRecord::from_samples((0..4).map(|i| s(NOW - i, 100, 10)));
    let w = Watchdogs::derive(few.summary(NOW, 100).as_ref(), bounds());
    assert_eq!(w.first_response.basis, Basis::NoHistory { answers: 4 });
    assert!(!w.first_response.derived());
}

#[test]
fn a_fast_provider_gets_the_floor_a_steady_slow_one_room_for_itself() {
    let fast = PaceRecord::from_samples((0..20).map(|i| s(NOW - i, 200, 80)));
    let w = Watchdogs::derive(fast.summary(NOW, 100).as_ref(), bounds());
    assert_eq!(w.first_response.ms, 3000);
    assert_eq!(
        w.first_response.basis,
        Basis::Floor {
            p95_ms: 200,
            answers: 20
        }
    );
    assert_eq!(w.stall.ms, 3000);
    let medium = PaceRecord::from_samples((0..20).map(|i| s(NOW - i, 1200, 1500)));
    let w = Watchdogs::derive(medium.summary(NOW, 100).as_ref(), bounds());
    assert_eq!(w.first_response.ms, 3 * 1200 + SLACK_MS);
    assert_eq!(w.stall.ms, 3 * 1500 + SLACK_MS);
    assert_eq!(
        w.first_response.to_string(),
        "4.6 s (from p95 1.2 s over 20 answers)"
    );
    // One recent answer is no pace yet, said in the singular (`-v`'s watchdog line).
    let one = PaceRecord::from_samples([s(NOW, 1200, 1500)]);
    let w = Watchdogs::derive(one.summary(NOW, 100).as_ref(), bounds());
    assert_eq!(
        w.first_response.to_string(),
        "90 s (the ceiling: no pace yet, 1 recent answer)"
    );
    // 15 s to the first token every time: 46 s, far above what it needs.
    let slow = PaceRecord::from_samples((0..20).map(|i| s(NOW - i, 15_000, 100)));
    let w = Watchdogs::derive(slow.summary(NOW, 100).as_ref(), bounds());
    assert_eq!(w.first_response.ms, 46_000);
    // 40 s every time: the ceiling is the user's.
    let slower = PaceRecord::from_samples((0..20).map(|i| s(NOW - i, 40_000, 100)));
    let w = Watchdogs::derive(slower.summary(NOW, 100).as_ref(), bounds());
    assert_eq!(w.first_response.ms, 90_000);
    assert_eq!(
        w.first_response.basis,
        Basis::Ceiling {
            p95_ms: 40_000,
            answers: 20
        }
    );
}

#[test]
fn a_floor_above_the_ceiling_is_the_ceiling() {
    let fast = PaceRecord::from_samples((0..20).map(|i| s(NOW - i, 10, 10)));
    let tight = Bounds {
        first_ceiling: Duration::from_millis(1500),
        stall_ceiling: Duration::from_millis(0),
        floor: Duration::from_secs(3),
    };
    let w = Watchdogs::derive(fast.summary(NOW, 100).as_ref(), tight);
    assert_eq!(w.first_response.ms, 1500);
    assert_eq!(w.stall.ms, 1, "never zero");
}

#[test]
fn the_deadline_is_split_among_the_candidates_left() {
    assert_eq!(
        first_response_share(20_000, 0),
        None,
        "the last is never cut short"
    );
    assert_eq!(first_response_share(20_000, 1), Some(10_000));
    assert_eq!(first_response_share(30_000, 2), Some(10_000));
    assert_eq!(first_response_share(30_000, 9), Some(10_000));
    assert_eq!(first_response_share(8000, 1), Some(SHARE_FLOOR_MS));
    assert_eq!(
        first_response_share(3000, 1),
        Some(3000),
        "never past what is left"
    );
    assert_eq!(first_response_share(0, 1), Some(1));
    assert_eq!(first_response_share(600_000, 1), Some(300_000));
}

#[test]
fn seconds_read_as_people_say_them() {
    assert_eq!(secs(850), "850 ms");
    assert_eq!(secs(1249), "1.2 s");
    assert_eq!(secs(90_000), "90 s");
    assert_eq!(secs(10_500), "11 s");
}
