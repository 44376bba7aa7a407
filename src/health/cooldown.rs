//! Cooldown arithmetic of SPEC §3: a base per failure class, doubled per consecutive failure, up
//! to a cap. Wall-clock milliseconds in and out. Pure.
//!
//! Endpoint breakers (5xx, resets, silence) follow a curve of their own (SPEC §7 "failback in
//! seconds", [`endpoint_cooldown_ms`]): a blip costs seconds of backup, a provider that stays
//! down one probe per cooldown, with cooldowns growing to the class's old windows.

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

/// The first endpoint cooldown: a blip costs this much of the backup.
pub const ENDPOINT_FIRST_MS: u64 = 10_000;
/// Where the short endpoint cooldowns stop growing by half and the class's old windows (2 min,
/// doubling to 30 min) take over.
pub const ENDPOINT_SHORT_CAP_MS: u64 = 2 * MIN;

/// An endpoint breaker's cooldown after its `consecutive`-th failed probe in a row (1-based):
/// 10 s, growing by half while its probes fail — 15 s, 22.5 s, 34 s, 51 s, 76 s, 114 s — to 2 min,
/// then doubling as before (4, 8, 16 min) to the class's cap, 30 min. The short steps are the
/// fast failback: an outage of `D` seconds is noticed over at most about `D / 2` after it ends,
/// where doubling would take up to `D`; a provider that stays down still costs one probe per
/// cooldown, the cooldowns growing to the old windows.
pub fn endpoint_cooldown_ms(consecutive: u32) -> u64 {
    let (_, cap) = cooldown_base_and_cap(FailureClass::Endpoint).unwrap_or((0, 30 * MIN));
    let mut ms = ENDPOINT_FIRST_MS;
    // Bounded: the cap is reached after a dozen steps.
    for _ in 1..consecutive.min(64) {
        ms = if ms < ENDPOINT_SHORT_CAP_MS {
            (ms * 3 / 2).min(ENDPOINT_SHORT_CAP_MS)
        } else {
            ms.saturating_mul(2).min(cap)
        };
    }
    ms
}

/// Cooldown length after the `consecutive`-th failure in a row (1-based): base · 2^(n−1), capped
/// (endpoint breakers: [`endpoint_cooldown_ms`]). `scale` lets tests and the environment shrink
/// every cooldown (1.0 = SPEC values).
pub fn cooldown_ms(class: FailureClass, consecutive: u32, scale: f64) -> Option<u64> {
    let (base, cap) = cooldown_base_and_cap(class)?;
    let shift = consecutive.saturating_sub(1).min(32);
    let raw = if class == FailureClass::Endpoint {
        endpoint_cooldown_ms(consecutive)
    } else {
        base.saturating_mul(1u64 << shift).min(cap)
    };
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
        assert_eq!(c(FailureClass::Endpoint, 1), 10_000);
        assert_eq!(c(FailureClass::Endpoint, 8), 2 * MIN);
        assert_eq!(c(FailureClass::Endpoint, 12), 30 * MIN);
        assert_eq!(c(FailureClass::Model, 1), 15 * MIN);
        assert_eq!(c(FailureClass::Model, 4), 2 * HOUR);
        assert_eq!(c(FailureClass::ContentPolicy, 3), 2 * MIN);
        assert_eq!(c(FailureClass::Unknown, 2), 4 * MIN);
        assert_eq!(cooldown_ms(FailureClass::ContextOverflow, 1, 1.0), None);
        assert_eq!(cooldown_ms(FailureClass::Schema, 1, 1.0), None);
        assert_eq!(cooldown_ms(FailureClass::UserAbort, 1, 1.0), None);
    }

    /// Issue 31: endpoint breakers start at 10 s and grow by half to the old 2 minutes, then
    /// the old windows (doubling to 30 min) for a provider that stays down.
    #[test]
    fn endpoint_cooldowns_start_short_and_grow_to_the_old_windows() {
        let curve: Vec<u64> = (0..=13).map(endpoint_cooldown_ms).collect();
        assert_eq!(
            curve,
            [
                10_000, 10_000, 15_000, 22_500, 33_750, 50_625, 75_937, 113_905, 120_000, 240_000,
                480_000, 960_000, 1_800_000, 1_800_000
            ]
        );
        assert_eq!(endpoint_cooldown_ms(u32::MAX), 30 * MIN);
        assert_eq!(cooldown_ms(FailureClass::Endpoint, 1, 0.01), Some(100));
        // Unknown failures keep the old curve.
        assert_eq!(cooldown_ms(FailureClass::Unknown, 1, 1.0), Some(2 * MIN));
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
