//! Per-route quota windows: a coding plan that answers `answers` chat requests, then refuses
//! every request with a body that states when the window resets (GLM's 1308 by default),
//! `reset_after` after the refusal that ended it, and answers again from then on (a new window
//! of the same size) — the flat-fee primary of issue 32 that runs out after 50 of 200 reports.
//!
//! Counted after the concurrency cap (`capacity.rs`): a request rejected for capacity uses no
//! answer of the window. The reset is rounded up to a whole second, as providers state it (a
//! runner that comes back at the stated second is never early).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{FakeLlm, Shared, bodies};

/// A quota window's shape.
#[derive(Clone, Copy)]
pub struct QuotaWindow {
    /// Chat requests answered in the first window…
    pub answers: usize,
    /// …and in each window after a reset (a plan's next window may outlast the test).
    pub then: usize,
    /// How long after the window runs out it resets.
    pub reset_after: Duration,
    /// The refusal's status and its body for a reset at the given unix ms.
    pub status: u16,
    pub body: fn(u64) -> String,
}

impl QuotaWindow {
    /// The same window, answering `n` requests in each window after the first.
    pub fn then_answers(mut self, n: usize) -> QuotaWindow {
        self.then = n;
        self
    }

    /// GLM's 1308 (429, Chinese, the reset in China Standard Time).
    pub fn glm_1308(answers: usize, reset_after: Duration) -> QuotaWindow {
        QuotaWindow {
            answers,
            then: answers,
            reset_after,
            status: 429,
            body: bodies::glm_1308,
        }
    }
}

#[derive(Default)]
pub(super) struct Windows {
    windows: HashMap<String, (QuotaWindow, Use)>,
}

#[derive(Default, Clone, Copy)]
struct Use {
    used: usize,
    /// A reset has happened: the windows answer `then` requests.
    renewed: bool,
    /// The window is used up until this unix ms.
    reset_at: Option<u64>,
    refused: usize,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Count one chat request on `route` against its window: `Err((status, body))` when the window
/// is used up.
pub(super) fn take(shared: &Shared, route: &str) -> Result<(), (u16, String)> {
    let mut st = shared.state();
    let Some((window, used)) = st.windows.windows.get_mut(route) else {
        return Ok(());
    };
    let now = unix_ms();
    match used.reset_at {
        Some(t) if now < t => {
            used.refused += 1;
            return Err((window.status, (window.body)(t)));
        }
        Some(_) => {
            *used = Use {
                refused: used.refused,
                renewed: true,
                ..Use::default()
            }
        }
        None => {}
    }
    let size = if used.renewed {
        window.then
    } else {
        window.answers
    };
    if used.used >= size {
        let t = (now + window.reset_after.as_millis() as u64).div_ceil(1000) * 1000;
        used.reset_at = Some(t);
        used.refused += 1;
        return Err((window.status, (window.body)(t)));
    }
    used.used += 1;
    Ok(())
}

impl FakeLlm {
    /// Give `route` a quota window (`None`: none, every request answered as scripted).
    pub fn set_quota_window(&self, route: &str, window: Option<QuotaWindow>) {
        let mut st = self.shared.state();
        match window {
            Some(w) => st
                .windows
                .windows
                .insert(route.to_string(), (w, Use::default())),
            None => st.windows.windows.remove(route),
        };
    }

    /// When `route`'s window ran out and resets (unix ms), while it is used up.
    pub fn quota_reset_at(&self, route: &str) -> Option<u64> {
        self.shared
            .state()
            .windows
            .windows
            .get(route)
            .and_then(|(_, u)| u.reset_at)
    }

    /// Requests to `route` refused because its window was used up.
    pub fn quota_refusals(&self, route: &str) -> usize {
        self.shared
            .state()
            .windows
            .windows
            .get(route)
            .map_or(0, |(_, u)| u.refused)
    }
}
