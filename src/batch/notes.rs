//! Quiet stderr for batches: a breaker that opens or closes is news once, not once per job that
//! noticed it. Several workers (each job with its own copy of the health it loaded) see the
//! same 402 or the same closing success; without `-v` the batch prints one `breaker open: …`
//! line when a breaker opens and one `breaker closed: …` when it closes again. No I/O; the
//! process-wide memory of what was last said is bounded by the number of breakers.

use std::collections::HashMap;
use std::sync::Mutex;

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

static SAID: Mutex<Option<BreakerLines>> = Mutex::new(None);

/// [`BreakerLines::news`] over the one memory every worker of this process shares.
pub fn breaker_news(line: &str) -> bool {
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    said.get_or_insert_with(BreakerLines::default).news(line)
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
    fn memory_is_bounded() {
        let mut b = BreakerLines::default();
        for i in 0..(MAX_BREAKERS * 2) {
            assert!(b.news(&format!("breaker open: model p/m{i} (unknown) for 2 min")));
        }
        assert!(b.open.len() <= MAX_BREAKERS);
    }
}
