//! Quiet stderr for batches: a breaker that opens or closes is news once, not once per job that
//! noticed it. Several workers (each job with its own copy of the health it loaded) see the
//! same 402 or the same closing success; without `-v` the batch prints one `breaker open: …`
//! line when a breaker opens and one `breaker closed: …` when it closes again. A warning about
//! the configuration (a `--models` pattern that matches nothing) is the same for every job and
//! is said once. No I/O; the memory of what was said (one per process, in `console`) is bounded.

use std::collections::{HashMap, HashSet};

use crate::failover::Note;

/// At most this many distinct warnings are remembered.
const MAX_WARNINGS: usize = 256;

/// At most this many breakers are remembered; past it the memory starts afresh (a repeated
/// line is the worst that can happen).
const MAX_BREAKERS: usize = 4096;

/// What was last said about each breaker.
#[derive(Debug, Default)]
pub struct BreakerLines {
    open: HashMap<String, bool>,
}

impl BreakerLines {
    /// Whether `line` (a progress line without its job label) should be shown: `false` only for
    /// a breaker line that repeats the breaker's state already reported.
    pub fn news(&mut self, line: &str) -> bool {
        let (open, rest) = if let Some(rest) = line.strip_prefix("breaker open: ") {
            (true, rest)
        } else if let Some(rest) = line.strip_prefix("breaker closed: ") {
            (false, rest)
        } else {
            return true;
        };
        // `provider prim (quota) for 30 min` → `provider prim`.
        let key = rest.split(" (").next().unwrap_or(rest);
        if self.open.get(key) == Some(&open) {
            return false;
        }
        if self.open.len() >= MAX_BREAKERS {
            self.open.clear();
        }
        self.open.insert(key.to_string(), open);
        true
    }
}

/// What this batch has said so far.
#[derive(Debug, Default)]
pub struct Said {
    breakers: BreakerLines,
    warnings: HashSet<String>,
}

impl Said {
    /// Whether a progress line of this kind (without its job label) is news for the batch.
    pub fn news(&mut self, note: Note, line: &str) -> bool {
        match note {
            Note::Breaker => self.breakers.news(line),
            Note::Warning => {
                if self.warnings.len() >= MAX_WARNINGS {
                    self.warnings.clear();
                }
                self.warnings.insert(line.to_string())
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_said_once() {
        let mut b = BreakerLines::default();
        assert!(b.news("breaker open: provider prim (quota) for 30 min"));
        assert!(!b.news("breaker open: provider prim (quota) for 29 min"));
        assert!(b.news("breaker open: model back/m (unknown) for 2 min"));
        assert!(b.news("breaker closed: provider prim (answered)"));
        assert!(!b.news("breaker closed: provider prim (answered)"));
        assert!(b.news("breaker open: provider prim (quota) for 1h00m"));
        assert!(
            b.news("switch prim/m → back/m (quota)"),
            "other lines always pass"
        );
        assert!(b.news("switch prim/m → back/m (quota)"));
    }

    #[test]
    fn a_warning_is_said_once_and_other_notes_always() {
        let mut s = Said::default();
        let w = "warning: --models pattern 'zai/*' matches none of Pi's available models";
        assert!(s.news(Note::Warning, w));
        assert!(!s.news(Note::Warning, w));
        assert!(s.news(Note::Wait, "every candidate is cooling down; waiting 2s"));
        assert!(s.news(Note::Wait, "every candidate is cooling down; waiting 2s"));
        assert!(s.news(Note::Breaker, "breaker open: provider p (quota) for 30 min"));
        assert!(!s.news(Note::Breaker, "breaker open: provider p (quota) for 30 min"));
    }

    #[test]
    fn memory_is_bounded() {
        let mut b = BreakerLines::default();
        for i in 0..(MAX_BREAKERS * 2) {
            assert!(b.news(&format!("breaker open: model p/m{i} (unknown) for 2 min")));
        }
        assert!(b.open.len() <= MAX_BREAKERS);
    }
}
