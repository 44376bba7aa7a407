//! A deadline shared among the candidates (SPEC §7 "a deadline is shared"). Pure.
//!
//! With `--timeout-ms` (or a batch job's deadline) and other candidates left, an attempt may
//! wait for its first response at most its share of what is left of the deadline: half of it
//! with one other candidate left, a third with two or more, and never less than
//! [`SHARE_FLOOR_MS`] (or what is left, when less). The last candidate gets no share: it may
//! use the whole deadline. Once the first response came the share no longer applies; the stall
//! watchdog and the deadline itself do.

/// The least share of a deadline an attempt gets (when that much is left).
pub const SHARE_FLOOR_MS: u64 = 5000;

/// How long the attempt may wait for its first response, with `remaining_ms` of the deadline
/// left and `others_left` candidates after it; `None` when it is the last (no cut).
pub fn first_response_share(remaining_ms: u64, others_left: usize) -> Option<u64> {
    if others_left == 0 {
        return None;
    }
    let parts = if others_left == 1 { 2 } else { 3 };
    let split = remaining_ms / parts;
    let share = split.max(SHARE_FLOOR_MS.min(remaining_ms));
    Some(share.max(1))
}
