//! The one place that reads clocks. Everything else receives a [`Now`].

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

/// The machine's offset from UTC at `unix_ms`, in seconds east, as the C library reads it (`TZ`,
/// else `/etc/localtime`); `None` when it cannot tell. Used only to word times for people (a
/// stated reset "at 14:36:54 -05:00 (19:36:54 UTC)"): nothing is decided by it, and reading a
/// provider's stated time never depends on it (see `failover::stated`).
pub fn local_offset(unix_ms: u64) -> Option<i32> {
    unsafe extern "C" {
        /// POSIX: (re)reads `TZ`; not in the `libc` crate's bindings.
        fn tzset();
    }
    let secs = libc::time_t::try_from(unix_ms / 1000).ok()?;
    // SAFETY: `tm` is plain data that `localtime_r` fills in; both pointers are valid for the
    // call, and `localtime_r` is the reentrant form (no shared static buffer).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let filled = unsafe {
        tzset();
        libc::localtime_r(&raw const secs, &raw mut tm)
    };
    if filled.is_null() {
        return None;
    }
    i32::try_from(tm.tm_gmtoff).ok()
}
