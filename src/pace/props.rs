//! Properties of the pace estimator, the watchdogs and the deadline split: no input makes a
//! watchdog zero, or longer than its ceiling, or (with history) shorter than the floor allows.

use std::time::Duration;

use proptest::prelude::*;

use super::share::first_response_share;
use super::watchdog::{Bounds, Watchdogs};
use super::*;

fn sample() -> impl Strategy<Value = Sample> {
    (
        prop_oneof![any::<u64>(), 1_700_000_000_000u64..1_900_000_000_000],
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(at_ms, first_ms, gap_ms, prompt_chars)| Sample {
            at_ms,
            first_ms: first_ms % (2 * MAX_SAMPLE_MS),
            gap_ms: gap_ms % (2 * MAX_SAMPLE_MS),
            prompt_chars: prompt_chars % (2 * MAX_PROMPT_CHARS),
        })
}

proptest! {
    #![proptest_config(crate::fuzz::config(3000))]

    #[test]
    fn watchdogs_stay_within_their_bounds(
        samples in proptest::collection::vec(sample(), 0..60),
        now in prop_oneof![any::<u64>(), 1_700_000_000_000u64..1_900_000_000_000],
        chars in any::<u64>(),
        first_ceiling in 0u64..10_000_000,
        stall_ceiling in 0u64..10_000_000,
        floor in 0u64..10_000_000,
    ) {
        let r = PaceRecord::from_samples(samples);
        let bounds = Bounds {
            first_ceiling: Duration::from_millis(first_ceiling),
            stall_ceiling: Duration::from_millis(stall_ceiling),
            floor: Duration::from_millis(floor),
        };
        let w = Watchdogs::derive(r.summary(now, chars).as_ref(), bounds);
        for (limit, ceiling) in [(w.first_response, first_ceiling), (w.stall, stall_ceiling)] {
            prop_assert!(limit.ms >= 1);
            prop_assert!(limit.ms <= ceiling.max(1));
            if limit.derived() {
                prop_assert!(limit.ms >= floor.min(ceiling).max(1));
            } else {
                prop_assert_eq!(limit.ms, ceiling.max(1));
            }
        }
    }

    /// Whatever JSON a store holds, it reads as a record (maybe empty) whose samples are valid,
    /// and what is written back reads the same.
    #[test]
    fn any_stored_record_reads_as_valid_samples(
        items in proptest::collection::vec(
            proptest::collection::vec(prop_oneof![
                any::<u64>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>().prop_map(|f| serde_json::json!(f)),
                Just(serde_json::Value::Null),
            ], 0..6).prop_map(serde_json::Value::from),
            0..60),
    ) {
        let r = PaceRecord::from_value(&serde_json::Value::from(items));
        prop_assert!(r.samples().len() <= MAX_SAMPLES);
        prop_assert!(r.samples().iter().all(Sample::valid));
        let again = PaceRecord::from_value(&r.to_value());
        prop_assert_eq!(again, r);
    }

    #[test]
    fn clamped_records_hold_nothing_from_the_future(
        samples in proptest::collection::vec(sample(), 0..60),
        now in any::<u64>(),
    ) {
        let mut r = PaceRecord::from_samples(samples);
        r.clamp(now);
        prop_assert!(r.samples().iter().all(|s| s.at_ms <= now.saturating_add(MAX_SKEW_MS)));
        prop_assert!(r.samples().iter().all(|s| s.at_ms >= now.saturating_sub(MAX_AGE_MS)));
    }

    #[test]
    fn a_share_is_never_zero_nor_past_the_deadline(remaining in any::<u64>(), others in 0usize..10) {
        match first_response_share(remaining, others) {
            None => prop_assert_eq!(others, 0),
            Some(share) => {
                prop_assert!(others > 0);
                prop_assert!(share >= 1);
                prop_assert!(share <= remaining.max(1));
                // The next candidate is left at least half of what remains, or the floor is.
                prop_assert!(share <= remaining / 2 || share == remaining.clamp(1, share::SHARE_FLOOR_MS));
            }
        }
    }
}
