//! Per-route concurrency caps: a provider that answers "too many requests in flight" (GLM's 1302
//! and the like) the moment a request arrives over its cap, as real gateways do — so batch tests
//! can hit a capacity limit that depends on concurrency, not on a script.
//!
//! A chat request is *in flight* on its route from when it was fully read until its answer was
//! fully written (for a `Delayed` answer: the whole delay too). A request that arrives while the
//! cap is reached is answered at once with the route's capacity body (default 429
//! [`super::bodies::glm_1302`]), is recorded with `rejected_for_capacity`, consumes no script
//! entry and is never in flight itself. In-flight counts and their maxima are kept for every
//! route, capped or not.

use std::collections::HashMap;
use std::time::Duration;

use super::{FakeLlm, Shared, bodies};

#[derive(Default)]
pub(super) struct Capacity {
    caps: HashMap<String, usize>,
    bodies: HashMap<String, (u16, String)>,
    in_flight: HashMap<String, usize>,
    max: HashMap<String, usize>,
}

/// A route's in-flight slot, released (and waiters woken) when dropped.
pub(super) struct Slot<'a> {
    shared: &'a Shared,
    route: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut st = self.shared.state();
        if let Some(n) = st.capacity.in_flight.get_mut(&self.route) {
            *n = n.saturating_sub(1);
        }
        drop(st);
        self.shared.state_cv.notify_all();
    }
}

/// Take a slot on `route`, or the `(status, body)` to reject the request with.
pub(super) fn admit<'a>(shared: &'a Shared, route: &str) -> Result<Slot<'a>, (u16, String)> {
    let mut st = shared.state();
    let c = &mut st.capacity;
    let now = c.in_flight.get(route).copied().unwrap_or(0);
    if c.caps.get(route).is_some_and(|&cap| now >= cap) {
        return Err(c
            .bodies
            .get(route)
            .cloned()
            .unwrap_or_else(|| (429, bodies::glm_1302())));
    }
    c.in_flight.insert(route.to_string(), now + 1);
    let max = c.max.entry(route.to_string()).or_default();
    *max = (*max).max(now + 1);
    drop(st);
    shared.state_cv.notify_all();
    Ok(Slot {
        shared,
        route: route.to_string(),
    })
}

impl FakeLlm {
    /// Cap the chat requests in flight on `route` at `cap` (`None`: no cap; `Some(0)`: every
    /// request is rejected). Applies to requests arriving from now on; requests already in
    /// flight stay.
    pub fn set_concurrency_cap(&self, route: &str, cap: Option<usize>) {
        let mut st = self.shared.state();
        match cap {
            Some(n) => st.capacity.caps.insert(route.to_string(), n),
            None => st.capacity.caps.remove(route),
        };
    }

    /// What a request over `route`'s cap is answered with (default 429 [`bodies::glm_1302`]); see
    /// [`bodies`] for the real vendors' bodies.
    pub fn set_capacity_body(&self, route: &str, status: u16, body: impl Into<String>) {
        self.shared
            .state()
            .capacity
            .bodies
            .insert(route.to_string(), (status, body.into()));
    }

    /// Chat requests in flight on `route` now.
    pub fn in_flight(&self, route: &str) -> usize {
        self.shared
            .state()
            .capacity
            .in_flight
            .get(route)
            .copied()
            .unwrap_or(0)
    }

    /// The most chat requests ever in flight at once on `route`.
    pub fn max_in_flight(&self, route: &str) -> usize {
        self.shared
            .state()
            .capacity
            .max
            .get(route)
            .copied()
            .unwrap_or(0)
    }

    /// Start `route`'s maximum again from the number in flight now.
    pub fn reset_max_in_flight(&self, route: &str) {
        let mut st = self.shared.state();
        let now = st.capacity.in_flight.get(route).copied().unwrap_or(0);
        st.capacity.max.insert(route.to_string(), now);
    }

    /// Wait until exactly `n` chat requests are in flight on `route` or `timeout` passed;
    /// returns the number in flight then.
    pub fn wait_in_flight(&self, route: &str, n: usize, timeout: Duration) -> usize {
        let g = self.shared.state();
        let count = |st: &super::State| st.capacity.in_flight.get(route).copied().unwrap_or(0);
        let (g, _) = self
            .shared
            .state_cv
            .wait_timeout_while(g, timeout, |st| count(st) != n)
            .unwrap_or_else(|e| e.into_inner());
        count(&g)
    }

    /// Recorded requests to `route` that were rejected for capacity.
    pub fn rejections(&self, route: &str) -> usize {
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.route == route && r.rejected_for_capacity)
            .count()
    }
}
