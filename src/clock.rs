//! The one place that reads clocks (and the machine's time zone). Everything else receives a
//! [`Now`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Added to every wall-clock reading: 0, except in tests that run the binary as if on a host
/// whose clock is off (`CCSWITCH_TEST_CLOCK_OFFSET_MS`, read by `settings`), the way `faketime`
/// would, to prove that nothing shared depends on hosts agreeing on the time.
static WALL_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Shifts this process's wall clock by `ms` (for tests; see [`WALL_OFFSET_MS`]).
pub fn shift_wall_clock(ms: i64) {
    WALL_OFFSET_MS.store(ms, Ordering::Relaxed);
}

/// A reading of both clocks: monotonic for in-run deadlines, wall-clock unix milliseconds for
/// anything persisted or compared across processes.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub instant: Instant,
    pub wall_ms: u64,
}

#[expect(
    clippy::disallowed_methods,
    reason = "clock.rs is the clock chokepoint"
)]
pub fn now() -> Now {
    let wall_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
        .saturating_add_signed(WALL_OFFSET_MS.load(Ordering::Relaxed));
    Now {
        instant: Instant::now(),
        wall_ms,
    }
}

/// The machine's offset from UTC at `unix_ms`, in seconds east, from the system's zone (`TZ`,
/// else `/etc/localtime`; UTC when neither names one, as the C library does); `None` for an
/// instant outside the years a time zone covers. Used only to word times for people (a stated
/// reset "at 14:36:54 -05:00 (19:36:54 UTC)"): nothing is decided by it, and reading a
/// provider's stated time never depends on it (see `failover::stated`).
pub fn local_offset(unix_ms: u64) -> Option<i32> {
    let at = jiff::Timestamp::from_millisecond(i64::try_from(unix_ms).ok()?).ok()?;
    Some(jiff::tz::TimeZone::system().to_offset(at).seconds())
}
