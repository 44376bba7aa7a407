//! The one place that reads clocks (and the machine's time zone). Everything else receives a
//! [`Now`].

use std::time::{Instant, SystemTime, UNIX_EPOCH};

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
        .unwrap_or(0);
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
