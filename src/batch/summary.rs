//! The batch's tally: jobs ok / failed / skipped, answers per serving model, tokens and cost,
//! and the lines that show it (the live status line and the end-of-batch summary). Pure: the
//! caller passes the elapsed time.

use std::collections::BTreeMap;

use crate::exit::Exit;
use crate::rpc::Usage;

/// At most this many models are counted by name; the rest are counted as "other models".
const MAX_MODELS: usize = 64;

#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub ok: u64,
    pub failed: u64,
    /// Jobs skipped because `--resume` found their answer already recorded.
    pub skipped: u64,
    models: BTreeMap<String, u64>,
    other_models: u64,
    /// Tokens and cost of the answering attempts.
    usage: Usage,
    /// Tokens and cost of attempts that did not answer.
    failed_usage: Usage,
}

impl Tally {
    /// One finished job (an invalid line counts as a failed job).
    pub fn record(&mut self, exit: Exit, model: Option<&str>, usage: &Usage, failed_usage: &Usage) {
        if exit == Exit::Success {
            self.ok += 1;
        } else {
            self.failed += 1;
        }
        if let Some(m) = model.filter(|_| exit == Exit::Success) {
            if let Some(n) = self.models.get_mut(m) {
                *n += 1;
            } else if self.models.len() < MAX_MODELS {
                self.models.insert(m.to_string(), 1);
            } else {
                self.other_models += 1;
            }
        }
        self.usage.add(usage);
        self.failed_usage.add(failed_usage);
    }

    /// Jobs finished, this run or before it.
    pub fn done(&self) -> u64 {
        self.ok + self.failed + self.skipped
    }

    /// Jobs per minute run by this process.
    fn rate(&self, elapsed_ms: u64) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "a rate for humans")]
        let (ran, ms) = ((self.ok + self.failed) as f64, elapsed_ms.max(1) as f64);
        ran * 60_000.0 / ms
    }

    /// The live status line. `total` is what has been read of this shard so far; while the
    /// input is still being read it is a lower bound, shown with a `+`.
    pub fn status(&self, total: u64, reading: bool, elapsed_ms: u64) -> String {
        #[expect(clippy::cast_precision_loss, reason = "seconds for humans")]
        let secs = elapsed_ms as f64 / 1000.0;
        format!(
            "batch {}/{total}{} done · {} failed · {:.1} jobs/min · {secs:.1}s",
            self.done(),
            if reading { "+" } else { "" },
            self.failed,
            self.rate(elapsed_ms),
        )
    }

    /// The end-of-batch summary: counts and speed, then models, tokens and cost.
    pub fn lines(&self, total: u64, elapsed_ms: u64) -> [String; 2] {
        #[expect(clippy::cast_precision_loss, reason = "seconds for humans")]
        let secs = elapsed_ms as f64 / 1000.0;
        let counts = format!(
            "batch: {} of {total} jobs done, {} ok, {} failed, {} skipped (already done), in \
             {secs:.1} s ({:.1} jobs/min)",
            self.done(),
            self.ok,
            self.failed,
            self.skipped,
            self.rate(elapsed_ms),
        );
        let mut models: Vec<String> = self
            .models
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect();
        if self.other_models > 0 {
            models.push(format!("other models {}", self.other_models));
        }
        let u = &self.usage;
        let f = &self.failed_usage;
        let usage = format!(
            "batch: answers by model: {}; tokens: {} input, {} output, {} cache read, {} cache \
             write, {} total; cost ${:.6}; failed attempts: {} tokens, ${:.6}",
            if models.is_empty() {
                "none".to_string()
            } else {
                models.join(", ")
            },
            u.input,
            u.output,
            u.cache_read,
            u.cache_write,
            u.total_tokens,
            u.cost,
            f.total_tokens,
            f.cost,
        );
        [counts, usage]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, cost: f64) -> Usage {
        Usage {
            input,
            output,
            total_tokens: input + output,
            cost,
            ..Usage::default()
        }
    }

    #[test]
    fn the_summary_says_everything_exactly() {
        let mut t = Tally::default();
        t.record(
            Exit::Success,
            Some("back/m"),
            &usage(11, 7, 0.5),
            &usage(3, 0, 0.25),
        );
        t.record(
            Exit::Success,
            Some("back/m"),
            &usage(11, 7, 0.5),
            &Usage::default(),
        );
        t.record(
            Exit::Success,
            Some("prim/m"),
            &usage(1, 1, 0.0),
            &Usage::default(),
        );
        t.record(Exit::Exhausted, None, &Usage::default(), &usage(2, 0, 0.0));
        t.skipped = 4;
        let [counts, models] = t.lines(10, 30_000);
        assert_eq!(
            counts,
            "batch: 8 of 10 jobs done, 3 ok, 1 failed, 4 skipped (already done), in 30.0 s (8.0 \
             jobs/min)"
        );
        assert_eq!(
            models,
            "batch: answers by model: back/m 2, prim/m 1; tokens: 23 input, 15 output, 0 cache \
             read, 0 cache write, 38 total; cost $1.000000; failed attempts: 5 tokens, $0.250000"
        );
        assert_eq!(
            t.status(12, true, 30_000),
            "batch 8/12+ done · 1 failed · 8.0 jobs/min · 30.0s"
        );
        assert_eq!(
            t.status(12, false, 0),
            "batch 8/12 done · 1 failed · 240000.0 jobs/min · 0.0s"
        );
    }

    #[test]
    fn an_empty_batch_and_many_models_stay_bounded() {
        let t = Tally::default();
        assert!(t.lines(0, 0)[1].starts_with("batch: answers by model: none;"));
        let mut t = Tally::default();
        for i in 0..(MAX_MODELS + 5) {
            t.record(
                Exit::Success,
                Some(&format!("p/m{i}")),
                &Usage::default(),
                &Usage::default(),
            );
        }
        assert_eq!(t.models.len(), MAX_MODELS);
        assert!(t.lines(0, 1)[1].contains("other models 5;"));
    }
}
