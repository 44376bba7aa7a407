//! Back-off on a busy key (issue 32): how long to leave a provider alone after a capacity
//! signal that the caller's own requests cannot explain. Pure: no clock, no randomness of its
//! own (the jitter comes in as a number), wall-clock unix milliseconds in and out.
//!
//! # Why
//!
//! A provider that answers "too many requests in flight" (GLM's 1302, 并发数过高,
//! `rate_limit_exceeded` at a concurrency limit) while the store counts one request in flight —
//! the refused one — is not telling *us* to send less: the one request is already the least we
//! can send. Someone else is using the key (another machine of a CI matrix, a colleague, a
//! process on another health store). What helps is what helps any client of a congested
//! resource: wait a little, a random amount so that clients that were refused together do not
//! come back together, longer each time the key is still busy. What does not help is a
//! multi-minute breaker after three refusals in two seconds (issue 32: a job gave up after
//! 3.7 s with "usable again in 5m00s" while its three siblings were answered in 8–10 s).
//!
//! # The rule
//!
//! The `k`-th refusal in a row at one request in flight (a clean answer ends the row) leaves the
//! provider alone for a delay drawn from `[c/2, c]`, where `c = FIRST_MS · 2^(k−1)` capped at
//! [`LIMIT_MS`] ("equal jitter": never less than half, so the back-off really grows, never the
//! same for two callers with different jitter). With the constants below the ceilings are
//! 1, 2, 4, 8 and 16 s: at most 31 s of backing off in all, 15.5 s at least. A key that refuses
//! again after a wait at the limit ([`STEPS`] refusals in a row, then one more) is rate-limited
//! for real: the caller opens its breaker as for any rate limit.
//!
//! The delay is the provider's pause in the capacity record (`Capacity::paused_until`), so every
//! process sharing the store leaves the key alone for it, not only the one refused. Whether a
//! run may wait that long (its deadline, `--max-wait`) is the caller's rule
//! (`failover::waiting`).

/// The first back-off's ceiling.
pub const FIRST_MS: u64 = 1_000;
/// The longest single back-off: the ceiling stops growing here.
pub const LIMIT_MS: u64 = 16_000;
/// Refusals in a row at one request in flight that are backed off from; the next one is a rate
/// limit. `FIRST_MS · 2^(STEPS−1) = LIMIT_MS`: the last step is the first at the limit.
pub const STEPS: u32 = 5;

/// The ceiling of the `step`-th back-off (1-based; 0 counts as 1).
pub fn ceiling_ms(step: u32) -> u64 {
    let shift = step.saturating_sub(1).min(32);
    FIRST_MS.saturating_mul(1u64 << shift).min(LIMIT_MS)
}

/// The `step`-th back-off, placed in `[ceiling/2, ceiling]` by `jitter` (any number; callers
/// pass a different one per run and per refusal).
pub fn delay_ms(step: u32, jitter: u64) -> u64 {
    let ceiling = ceiling_ms(step);
    let floor = ceiling / 2;
    floor + mix(jitter, step) % (ceiling - floor + 1)
}

/// The `refusals`-th refusal in a row at one request in flight makes the key rate-limited for
/// real: the back-off has grown to its limit and the key still refuses.
pub fn rate_limited(refusals: u32) -> bool {
    refusals > STEPS
}

/// The most a run backs off from one key before it is rate-limited: the sum of the ceilings.
pub fn total_limit_ms() -> u64 {
    (1..=STEPS).map(ceiling_ms).sum()
}

/// Spreads `jitter` over the range for each step (a splitmix64 finaliser): consecutive steps
/// of one caller land at unrelated places, and callers whose seeds differ by one do too.
fn mix(jitter: u64, step: u32) -> u64 {
    let mut z = jitter ^ u64::from(step).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn ceilings_double_from_one_second_to_the_limit() {
        let c: Vec<u64> = (0..=8).map(ceiling_ms).collect();
        assert_eq!(
            c,
            [1000, 1000, 2000, 4000, 8000, 16_000, 16_000, 16_000, 16_000]
        );
        assert_eq!(ceiling_ms(STEPS), LIMIT_MS, "the last step is at the limit");
        assert!(ceiling_ms(STEPS - 1) < LIMIT_MS, "and the first one there");
        assert_eq!(ceiling_ms(u32::MAX), LIMIT_MS);
        assert_eq!(total_limit_ms(), 31_000);
    }

    #[test]
    fn delays_are_jittered_within_half_to_the_whole_ceiling() {
        // Exact values for fixed jitter (the mix is part of the contract: stable across builds).
        let d: Vec<u64> = (1..=STEPS).map(|s| delay_ms(s, 0)).collect();
        assert_eq!(d, [582, 1351, 3108, 6622, 11_334]);
        let d: Vec<u64> = (1..=STEPS).map(|s| delay_ms(s, 42)).collect();
        assert_eq!(d, [573, 1711, 3722, 4542, 13_567]);
        // Different callers are spread over the range, not bunched.
        let spread: std::collections::BTreeSet<u64> = (0..100).map(|j| delay_ms(1, j)).collect();
        assert!(spread.len() > 80, "{}", spread.len());
        assert!(spread.iter().all(|d| (500..=1000).contains(d)));
    }

    #[test]
    fn the_refusal_after_a_wait_at_the_limit_is_a_rate_limit() {
        assert!(!rate_limited(0));
        assert!(!rate_limited(STEPS));
        assert!(rate_limited(STEPS + 1));
        assert!(rate_limited(u32::MAX));
    }

    proptest! {
        /// Never negative or zero, never past the limit, never below half the step's ceiling,
        /// and never shorter than the previous step's floor: the back-off grows.
        #[test]
        fn delays_are_bounded_and_grow(step in any::<u32>(), jitter in any::<u64>()) {
            let d = delay_ms(step, jitter);
            prop_assert!(d >= FIRST_MS / 2);
            prop_assert!(d <= LIMIT_MS);
            prop_assert!(d <= ceiling_ms(step));
            prop_assert!(d >= ceiling_ms(step) / 2);
            prop_assert!(d >= ceiling_ms(step.saturating_sub(1)) / 2);
        }

        /// A whole row of back-offs stays within the documented total.
        #[test]
        fn a_row_of_back_offs_is_bounded(jitter in any::<u64>()) {
            let total: u64 = (1..=STEPS).map(|s| delay_ms(s, jitter)).sum();
            prop_assert!(total <= total_limit_ms());
            prop_assert!(total >= total_limit_ms() / 2);
        }
    }
}
