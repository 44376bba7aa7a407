//! Cooldown arithmetic of SPEC §3: a base per failure class, doubled per consecutive failure, up
//! to a cap. Wall-clock milliseconds in and out. Pure.

use super::class::FailureClass;

const MIN: u64 = 60_000;
const HOUR: u64 = 60 * MIN;

/// Half-open probe lease: how long one process may hold the right to probe a cooled provider.
pub const PROBE_LEASE_MS: u64 = 2 * MIN;

/// The longest cooldown any class's rules give (the rate limit's cap); a stated reset may last
/// longer (up to the 8 days a statement is believed).
pub const MAX_COOLDOWN_MS: u64 = 24 * HOUR;

/// How far ahead a provider's stated reset is believed (`failover::stated` reads no later one),
/// and so the longest a stored stated reset may lie ahead: 8 days, a weekly window plus slack.
pub const MAX_STATED_AHEAD_MS: u64 = 8 * 24 * HOUR;

/// The most a stated reset is moved later before its breaker reopens ([`stated_spread_ms`]).
pub const STATED_SPREAD_MAX_MS: u64 = 3000;

/// How much later than a provider's stated reset `at_ms` the breaker `key` reopens: 0 to
/// [`STATED_SPREAD_MAX_MS`], the same for every run that reads the same statement (so runs on
/// many machines agree on one reopening and one probe), different from one breaker and one
/// reset to the next. A probe that lands a moment after the reset does not meet a provider
/// whose clock is a second behind ours, and breakers of several keys do not reopen together.
pub fn stated_spread_ms(key: &str, at_ms: u64) -> u64 {
    // FNV-1a over the key and the instant: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(at_ms.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % (STATED_SPREAD_MAX_MS + 1)
}

/// (initial cooldown, cap) for a class; `None` when the class opens no breaker.
pub fn cooldown_base_and_cap(class: FailureClass) -> Option<(u64, u64)> {
    match class {
        FailureClass::Auth | FailureClass::Quota => Some((30 * MIN, 6 * HOUR)),
        FailureClass::RateLimit => Some((5 * MIN, 24 * HOUR)),
        FailureClass::Endpoint => Some((2 * MIN, 30 * MIN)),
        FailureClass::Model => Some((15 * MIN, 2 * HOUR)),
        // Content policy: the model cools for 2 min; its family is avoided for the round instead.
        FailureClass::ContentPolicy => Some((2 * MIN, 2 * MIN)),
        FailureClass::Unknown => Some((2 * MIN, 30 * MIN)),
        FailureClass::ContextOverflow
        | FailureClass::Truncated
        | FailureClass::Schema
        | FailureClass::UserAbort => None,
    }
}

/// Cooldown length after the `consecutive`-th failure in a row (1-based): base · 2^(n−1), capped.
/// `scale` lets tests and the environment shrink every cooldown (1.0 = SPEC values).
pub fn cooldown_ms(class: FailureClass, consecutive: u32, scale: f64) -> Option<u64> {
    let (base, cap) = cooldown_base_and_cap(class)?;
    let shift = consecutive.saturating_sub(1).min(32);
    let raw = base.saturating_mul(1u64 << shift).min(cap);
    // Truncation is intended: a scaled cooldown is a test convenience, not a precise quantity.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let scaled = ((raw as f64) * scale.clamp(0.0, 1.0)).round() as u64;
    Some(scaled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_consecutive_failure_up_to_the_cap() {
        let c = |class, n| cooldown_ms(class, n, 1.0).unwrap();
        assert_eq!(c(FailureClass::Quota, 1), 30 * MIN);
        assert_eq!(c(FailureClass::Quota, 2), 60 * MIN);
        assert_eq!(c(FailureClass::Quota, 4), 4 * HOUR);
        assert_eq!(c(FailureClass::Quota, 5), 6 * HOUR);
        assert_eq!(c(FailureClass::Auth, 40), 6 * HOUR);
        assert_eq!(c(FailureClass::RateLimit, 1), 5 * MIN);
        assert_eq!(c(FailureClass::RateLimit, 10), 24 * HOUR);
        assert_eq!(c(FailureClass::Endpoint, 1), 2 * MIN);
        assert_eq!(c(FailureClass::Endpoint, 5), 30 * MIN);
        assert_eq!(c(FailureClass::Model, 1), 15 * MIN);
        assert_eq!(c(FailureClass::Model, 4), 2 * HOUR);
        assert_eq!(c(FailureClass::ContentPolicy, 3), 2 * MIN);
        assert_eq!(c(FailureClass::Unknown, 2), 4 * MIN);
        assert_eq!(cooldown_ms(FailureClass::ContextOverflow, 1, 1.0), None);
        assert_eq!(cooldown_ms(FailureClass::Schema, 1, 1.0), None);
        assert_eq!(cooldown_ms(FailureClass::UserAbort, 1, 1.0), None);
    }

    #[test]
    fn stated_spreads_are_stable_bounded_and_differ_per_key() {
        let a = stated_spread_ms("zai", 1_796_153_814_000);
        assert_eq!(
            a,
            stated_spread_ms("zai", 1_796_153_814_000),
            "the same for every run"
        );
        let spreads: std::collections::BTreeSet<u64> = (0..200)
            .map(|i| stated_spread_ms(&format!("p{i}"), 1_796_153_814_000))
            .collect();
        assert!(spreads.iter().all(|s| *s <= STATED_SPREAD_MAX_MS));
        assert!(spreads.len() > 150, "spread out: {}", spreads.len());
    }

    #[test]
    fn scale_shrinks_cooldowns_for_tests() {
        assert_eq!(cooldown_ms(FailureClass::Quota, 1, 0.001), Some(1800));
        assert_eq!(
            cooldown_ms(FailureClass::Quota, 1, 7.0),
            Some(30 * MIN),
            "scale never lengthens"
        );
    }
}
