//! The watchdogs of one attempt, derived from its model's pace. Pure.
//!
//! With history ([`super::Summary::trusted`]): the first-response limit is
//! `FIRST_MULT × p95(first response) + SLACK`, the stall limit `STALL_MULT × p95(longest gap) +
//! SLACK`, each clamped between the floor and the configured ceiling. Without history the
//! ceiling is the limit, as before (`CCSWITCH_FIRST_RESPONSE_MS` 90 s, `CCSWITCH_STALL_MS`
//! 120 s). A provider slow every time has a slow p95 and so a long limit: it is never cut for
//! being itself; a request several times slower than its own p95 is.

use std::fmt;
use std::time::Duration;

use super::{Summary, secs};

/// Multiple of the first-response p95 a request may take.
pub const FIRST_MULT: u64 = 3;
/// Multiple of the longest-gap p95 a stream may stay quiet.
pub const STALL_MULT: u64 = 3;
/// Added to both, so a provider answering in 50 ms is not judged to the millisecond.
pub const SLACK_MS: u64 = 1000;
/// The least a derived limit is, unless the ceiling is lower (`CCSWITCH_WATCHDOG_FLOOR_MS`).
pub const DEFAULT_FLOOR_MS: u64 = 3000;

/// Where the limits may lie: the configured ceilings (also the no-history values) and the
/// floor. A floor above a ceiling is that ceiling; nothing is ever below 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub first_ceiling: Duration,
    pub stall_ceiling: Duration,
    pub floor: Duration,
}

/// Why a limit is what it is (for `-v` and `--explain`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Basis {
    /// Not enough recent answers: the configured ceiling.
    NoHistory { answers: usize },
    /// `mult × p95 + slack`, within the bounds.
    Derived { p95_ms: u64, answers: usize },
    /// The derived value was below the floor.
    Floor { p95_ms: u64, answers: usize },
    /// The derived value was above the ceiling.
    Ceiling { p95_ms: u64, answers: usize },
}

/// One watchdog's limit and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub ms: u64,
    pub basis: Basis,
}

impl Limit {
    pub fn duration(&self) -> Duration {
        Duration::from_millis(self.ms)
    }

    /// Derived from history (the floor and ceiling included), not the no-history ceiling.
    pub fn derived(&self) -> bool {
        !matches!(self.basis, Basis::NoHistory { .. })
    }
}

impl fmt::Display for Limit {
    /// `4.6 s (3 × p95 1.2 s + 1 s, 40 answers)`, `90 s (no history: 2 answers)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = secs(self.ms);
        match self.basis {
            Basis::NoHistory { answers } => {
                // One answer is the usual case right after a fresh store's first run.
                let plural = if answers == 1 { "" } else { "s" };
                write!(
                    f,
                    "{value} (the ceiling: no pace yet, {answers} recent answer{plural})"
                )
            }
            Basis::Derived { p95_ms, answers } => write!(
                f,
                "{value} (from p95 {} over {answers} answers)",
                secs(p95_ms)
            ),
            Basis::Floor { p95_ms, answers } => write!(
                f,
                "{value} (the floor; p95 {} over {answers} answers)",
                secs(p95_ms)
            ),
            Basis::Ceiling { p95_ms, answers } => write!(
                f,
                "{value} (the ceiling; p95 {} over {answers} answers)",
                secs(p95_ms)
            ),
        }
    }
}

/// Both watchdogs of an attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Watchdogs {
    pub first_response: Limit,
    pub stall: Limit,
}

impl Watchdogs {
    /// With history, derived from it; without, the ceilings.
    pub fn derive(summary: Option<&Summary>, bounds: Bounds) -> Watchdogs {
        let first_ceiling = at_least_1(millis(bounds.first_ceiling));
        let stall_ceiling = at_least_1(millis(bounds.stall_ceiling));
        let floor = millis(bounds.floor);
        match summary.filter(|s| s.trusted()) {
            None => {
                let answers = summary.map_or(0, |s| s.answers);
                Watchdogs {
                    first_response: Limit {
                        ms: first_ceiling,
                        basis: Basis::NoHistory { answers },
                    },
                    stall: Limit {
                        ms: stall_ceiling,
                        basis: Basis::NoHistory { answers },
                    },
                }
            }
            Some(s) => Watchdogs {
                first_response: bounded(
                    s.first_p95_ms,
                    FIRST_MULT,
                    s.answers,
                    floor,
                    first_ceiling,
                ),
                stall: bounded(s.gap_p95_ms, STALL_MULT, s.answers, floor, stall_ceiling),
            },
        }
    }
}

fn bounded(p95_ms: u64, mult: u64, answers: usize, floor: u64, ceiling: u64) -> Limit {
    let raw = p95_ms.saturating_mul(mult).saturating_add(SLACK_MS);
    let floor = floor.min(ceiling);
    let (ms, basis) = if raw > ceiling {
        (ceiling, Basis::Ceiling { p95_ms, answers })
    } else if raw < floor {
        (floor, Basis::Floor { p95_ms, answers })
    } else {
        (raw, Basis::Derived { p95_ms, answers })
    };
    Limit {
        ms: at_least_1(ms),
        basis,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn at_least_1(ms: u64) -> u64 {
    ms.max(1)
}
