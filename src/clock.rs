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
