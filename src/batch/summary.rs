//! The batch's tally: jobs ok / failed / skipped, answers per serving model, tokens and cost,
//! and the lines that show it (the live status line and the end-of-batch summary). Pure: the
//! caller passes the elapsed time.

use std::collections::BTreeMap;

use crate::budget::OverBudget;
use crate::exit::Exit;
use crate::rpc::Usage;

/// At most this many models are counted by name; the rest are counted as "other models".
const MAX_MODELS: usize = 64;

#[derive(Debug, Default, Clone)]
pub struct BatchTally {
    pub ok: u64,
    pub failed: u64,
    /// Jobs skipped because `--resume` found their answer already recorded.
    pub skipped: u64,
    /// Jobs and lines not run again because they failed before in their unchanged input.
    pub failed_before: u64,
    models: BTreeMap<String, u64>,
    other_models: u64,
    /// Tokens and cost of the answering attempts.
    usage: Usage,
    /// Tokens and cost of attempts that did not answer.
    failed_usage: Usage,
    /// Attempts that did not answer, by failure class (a rejected request costs no tokens, but
    /// it is counted here: 115 rate-limited requests must not read as nothing).
    failed_attempts: BTreeMap<&'static str, u64>,
    /// Per provider: answers and capacity signals (bounded like `models`).
    providers: BTreeMap<String, ProviderTally>,
    /// Time jobs spent waiting for a capacity slot, summed.
    capacity_wait_ms: u64,
    /// Per provider: attempts cut for silence (a watchdog or the deadline's share; bounded
    /// like `models`).
    silence_cuts: BTreeMap<String, u64>,
    /// Answers that did not conform to the job's schema, per model (bounded like `models`).
    schema_failures: BTreeMap<String, u64>,
    /// Those of models past the bound.
    other_schema_failures: u64,
    /// The jobs that failed in their own input, this run or before it (named at the end).
    permanent: Permanent,
    /// Jobs that waited for their primary (`--prefer-primary`): how many, how long in all and
    /// at most.
    primary_waits: (u64, u64, u64),
    /// Jobs that ended by `--max-wait` (named at the end), and the bound.
    max_wait: (Permanent, u64),
}

/// Jobs that failed in their own input: the first [`Permanent::SHOWN`] by name with why, and
/// how many in all (memory stays bounded however many fail).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Permanent {
    named: Vec<(String, String)>,
    total: u64,
}

impl Permanent {
    /// How many are named before "and N more".
    pub const SHOWN: usize = 10;

    pub fn push(&mut self, label: &str, reason: &str) {
        self.total += 1;
        if self.named.len() < Self::SHOWN {
            self.named.push((label.to_string(), reason.to_string()));
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ProviderTally {
    answers: u64,
    capacity_signals: u64,
}

impl BatchTally {
    /// One finished job (an invalid line counts as a failed job).
    pub fn record(
        &mut self,
        exit: Exit,
        model: Option<&str>,
        usage: &Usage,
        failed_usage: &Usage,
        failed_classes: &[&'static str],
    ) {
        for class in failed_classes {
            *self.failed_attempts.entry(class).or_insert(0) += 1;
        }
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

    /// What one finished job says about capacity: the provider that answered, the providers
    /// that sent capacity signals (one entry each), and how long it waited for slots.
    pub fn record_capacity(
        &mut self,
        answered_by: Option<&str>,
        signals: &[String],
        waited_ms: u64,
    ) {
        fn entry<'a>(
            providers: &'a mut BTreeMap<String, ProviderTally>,
            p: &str,
        ) -> Option<&'a mut ProviderTally> {
            if !providers.contains_key(p) && providers.len() >= MAX_MODELS {
                return None;
            }
            Some(providers.entry(p.to_string()).or_default())
        }
        if let Some(p) = answered_by
            && let Some(t) = entry(&mut self.providers, p)
        {
            t.answers += 1;
        }
        for p in signals {
            if let Some(t) = entry(&mut self.providers, p) {
                t.capacity_signals += 1;
            }
        }
        self.capacity_wait_ms = self.capacity_wait_ms.saturating_add(waited_ms);
    }

    /// What one finished job says about waiting: how long it waited for its primary, and
    /// whether it ended by `--max-wait` (the bound, in ms).
    pub fn record_waits(&mut self, label: &str, primary_wait_ms: u64, max_wait: Option<u64>) {
        if primary_wait_ms > 0 {
            let (jobs, total, longest) = &mut self.primary_waits;
            *jobs += 1;
            *total = total.saturating_add(primary_wait_ms);
            *longest = (*longest).max(primary_wait_ms);
        }
        if let Some(limit_ms) = max_wait {
            self.max_wait.0.push(label, "");
            self.max_wait.1 = limit_ms;
        }
    }

    /// The summary's line about jobs that waited for their primary (`None`: none did).
    pub fn primary_line(&self) -> Option<String> {
        let (jobs, total, longest) = self.primary_waits;
        if jobs == 0 {
            return None;
        }
        Some(format!(
            "batch: {jobs} job(s) waited for their primary (--prefer-primary): {} on average, {} \
             at most",
            crate::failover::reopen::human_ms(total / jobs),
            crate::failover::reopen::human_ms(longest)
        ))
    }

    /// The end line naming the jobs that ended by `--max-wait` (`None`: none did).
    pub fn max_wait_line(&self) -> Option<String> {
        let (jobs, limit_ms) = &self.max_wait;
        if jobs.total == 0 {
            return None;
        }
        let mut named: Vec<String> = jobs.named.iter().map(|(l, _)| l.clone()).collect();
        let more = jobs.total - jobs.named.len() as u64;
        if more > 0 {
            named.push(format!("and {more} more"));
        }
        Some(format!(
            "batch: {} job(s) ended by --max-wait {} (failed, with a retry hint; --resume runs \
             them): {}",
            jobs.total,
            crate::failover::reopen::human_ms(*limit_ms),
            named.join(", ")
        ))
    }

    /// The providers of a finished job's attempts that were cut for silence, one entry each.
    pub fn record_silence(&mut self, providers: &[String]) {
        for p in providers {
            if let Some(n) = self.silence_cuts.get_mut(p) {
                *n += 1;
            } else if self.silence_cuts.len() < MAX_MODELS {
                self.silence_cuts.insert(p.clone(), 1);
            }
        }
    }

    /// `batch: attempts cut for silence: glm 3, qwen 1` (`None` when none was): how often a
    /// provider's silence, far outside its own pace or past its share of a deadline, cost an
    /// attempt (issue 31).
    pub fn silence_line(&self) -> Option<String> {
        if self.silence_cuts.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .silence_cuts
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect();
        Some(format!(
            "batch: attempts cut for silence (no first response or a stalled stream): {}",
            parts.join(", ")
        ))
    }

    /// The capacity line of the summary: per provider the answers, the capacity signals and
    /// the limit it ended at (`limits`, as the store has them), and the time spent waiting for
    /// slots. `None` when no provider answered or signalled.
    pub fn capacity_line(&self, limits: &BTreeMap<String, u32>) -> Option<String> {
        if self.providers.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .providers
            .iter()
            .map(|(p, t)| {
                let limit = limits
                    .get(p)
                    .map_or_else(String::new, |l| format!(", limit {l}"));
                format!(
                    "{p} {} answered, {} capacity signal{}{limit}",
                    t.answers,
                    t.capacity_signals,
                    if t.capacity_signals == 1 { "" } else { "s" }
                )
            })
            .collect();
        #[expect(clippy::cast_precision_loss, reason = "seconds for humans")]
        let waited = self.capacity_wait_ms as f64 / 1000.0;
        Some(format!(
            "batch: capacity: {}; waited for slots {waited:.1} s in all",
            parts.join("; ")
        ))
    }

    /// The models whose answers did not conform to a job's schema, one entry per answer.
    pub fn record_schema(&mut self, models: &[String]) {
        for m in models {
            if let Some(n) = self.schema_failures.get_mut(m) {
                *n += 1;
            } else if self.schema_failures.len() < MAX_MODELS {
                self.schema_failures.insert(m.clone(), 1);
            } else {
                self.other_schema_failures += 1;
            }
        }
    }

    /// The schema line of the summary: how many answers did not conform, per model, most
    /// first. `None` when every answer did (or no schema was in force).
    pub fn schema_line(&self) -> Option<String> {
        let total = self.schema_failures.values().sum::<u64>() + self.other_schema_failures;
        if total == 0 {
            return None;
        }
        let mut per_model: Vec<(&String, &u64)> = self.schema_failures.iter().collect();
        per_model.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut parts: Vec<String> = per_model.iter().map(|(m, n)| format!("{m} {n}")).collect();
        if self.other_schema_failures > 0 {
            parts.push(format!("other models {}", self.other_schema_failures));
        }
        Some(format!(
            "batch: schema: {total} non-conforming answer{} ({})",
            if total == 1 { "" } else { "s" },
            parts.join(", ")
        ))
    }

    /// A job of this run that failed in its own input.
    pub fn record_permanent(&mut self, label: &str, reason: &str) {
        self.permanent.push(label, reason);
    }

    /// The jobs not run again because they failed before in their unchanged input.
    pub fn add_permanent(&mut self, before: &Permanent) {
        for (label, reason) in &before.named {
            self.permanent.push(label, reason);
        }
        let unnamed = before.total - before.named.len() as u64;
        self.permanent.total += unnamed;
    }

    /// The end line naming the jobs that failed in their own input, and why (`None` when none
    /// did). `ok`: `--permanent-ok` left them out of the exit code.
    pub fn permanent_line(&self, ok: bool) -> Option<String> {
        let p = &self.permanent;
        if p.total == 0 {
            return None;
        }
        let mut named: Vec<String> = p
            .named
            .iter()
            .map(|(label, reason)| format!("{label}: {reason}"))
            .collect();
        let more = p.total - p.named.len() as u64;
        if more > 0 {
            named.push(format!("and {more} more (their results say why)"));
        }
        Some(format!(
            "batch: {} job(s) failed in their own input, and fail the same way until it changes{}: {}",
            p.total,
            if ok {
                " (--permanent-ok: not counted in the exit code)"
            } else {
                ""
            },
            named.join("; ")
        ))
    }

    /// Jobs finished, this run or before it.
    pub fn done(&self) -> u64 {
        self.ok + self.failed + self.skipped + self.failed_before
    }

    /// Jobs per minute run by this process, once there is a second to measure it by (a rate
    /// over nothing would read 60000 jobs/min).
    fn rate(&self, elapsed_ms: u64) -> Option<String> {
        if elapsed_ms < 1000 || self.ok + self.failed == 0 {
            return None;
        }
        #[expect(clippy::cast_precision_loss, reason = "a rate for humans")]
        let (ran, ms) = ((self.ok + self.failed) as f64, elapsed_ms as f64);
        Some(format!("{:.1} jobs/min", ran * 60_000.0 / ms))
    }

    /// The live status line. `total` is what has been read of this shard so far; while the
    /// input is still being read it is a lower bound, shown with a `+`.
    pub fn status(&self, total: u64, reading: bool, elapsed_ms: u64) -> String {
        #[expect(clippy::cast_precision_loss, reason = "seconds for humans")]
        let secs = elapsed_ms as f64 / 1000.0;
        let rate = self
            .rate(elapsed_ms)
            .map(|r| format!(" · {r}"))
            .unwrap_or_default();
        format!(
            "batch {}/{total}{} done · {} failed{rate} · {secs:.1}s",
            self.done(),
            if reading { "+" } else { "" },
            self.failed,
        )
    }

    /// The end-of-batch summary: counts and speed, then models, tokens and cost.
    pub fn lines(&self, total: u64, elapsed_ms: u64) -> [String; 2] {
        #[expect(clippy::cast_precision_loss, reason = "seconds for humans")]
        let secs = elapsed_ms as f64 / 1000.0;
        let rate = self
            .rate(elapsed_ms)
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let failed_before = if self.failed_before == 0 {
            String::new()
        } else {
            format!(
                ", {} not run again (they failed before in their unchanged input; \
                 --retry-failed runs them)",
                self.failed_before
            )
        };
        let counts = format!(
            "batch: {} of {total} jobs done, {} ok, {} failed, {} skipped (already \
             done){failed_before}, in {secs:.1} s{rate}",
            self.done(),
            self.ok,
            self.failed,
            self.skipped,
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
        let attempts: u64 = self.failed_attempts.values().sum();
        let by_class = if attempts == 0 {
            String::new()
        } else {
            let classes: Vec<String> = self
                .failed_attempts
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            format!(" ({})", classes.join(", "))
        };
        // No currency symbol: the prices in models.json are in whatever currency the provider
        // bills (CNY for Zhipu, Qwen, DeepSeek, Kimi), and Pi multiplies them as they are.
        let usage = format!(
            "batch: answers by model: {}; tokens: {} input, {} output, {} cache read, {} cache \
             write, {} total; cost {:.6}; failed attempts: {attempts}{by_class}, {} tokens, cost \
             {:.6}",
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

/// The last line of a batch its budget stopped: why, and how many jobs of this shard have no
/// result (`exact`: the whole input was read to count them; else a signal cut the count
/// short). `durable`: results go to `--output`, so `--resume` runs them.
pub fn budget_line(why: &OverBudget, left: u64, exact: bool, durable: bool) -> String {
    let count = if exact {
        format!("{left}")
    } else {
        format!("at least {left}")
    };
    let then = if durable {
        "--resume runs them"
    } else {
        "with --output FILE, --resume would run them"
    };
    format!(
        "batch stopped: budget reached: {why}; no new job or attempt was started; {count} job(s) \
         left without a result ({then})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_the_primary_and_jobs_ended_by_max_wait_are_summed_up() {
        let mut t = BatchTally::default();
        assert_eq!((t.primary_line(), t.max_wait_line()), (None, None));
        t.record_waits("doc-1", 0, None);
        t.record_waits("doc-2", 81_000, None);
        t.record_waits("doc-3", 41_000, None);
        t.record_waits("doc-4", 0, Some(30_000));
        assert_eq!(
            t.primary_line().as_deref(),
            Some(
                "batch: 2 job(s) waited for their primary (--prefer-primary): 1m01s on average, \
                 1m21s at most"
            )
        );
        assert_eq!(
            t.max_wait_line().as_deref(),
            Some(
                "batch: 1 job(s) ended by --max-wait 30s (failed, with a retry hint; --resume \
                 runs them): doc-4"
            )
        );
        for i in 0..20 {
            t.record_waits(&format!("x-{i}"), 0, Some(30_000));
        }
        let line = t.max_wait_line().expect("a line");
        assert!(
            line.starts_with("batch: 21 job(s) ended by --max-wait 30s"),
            "{line}"
        );
        assert!(line.ends_with(", x-8, and 11 more"), "{line}");
    }

    #[test]
    fn the_silence_line_counts_cut_attempts_per_provider() {
        let mut t = BatchTally::default();
        assert_eq!(t.silence_line(), None);
        t.record_silence(&["zhipu".into(), "zhipu".into()]);
        t.record_silence(&[]);
        t.record_silence(&["deepseek".into()]);
        assert_eq!(
            t.silence_line().as_deref(),
            Some(
                "batch: attempts cut for silence (no first response or a stalled stream): \
                 deepseek 1, zhipu 2"
            )
        );
        for i in 0..200 {
            t.record_silence(&[format!("p{i}")]);
        }
        assert_eq!(t.silence_cuts.len(), MAX_MODELS, "bounded");
    }

    #[test]
    fn the_schema_line_counts_non_conforming_answers_per_model() {
        let mut t = BatchTally::default();
        assert_eq!(t.schema_line(), None);
        t.record_schema(&["a/m".into(), "a/m".into(), "b/n".into()]);
        t.record_schema(&["b/n".into(), "b/n".into()]);
        assert_eq!(
            t.schema_line().unwrap(),
            "batch: schema: 5 non-conforming answers (b/n 3, a/m 2)"
        );
        let mut many = BatchTally::default();
        let models: Vec<String> = (0..MAX_MODELS + 2).map(|i| format!("p/m{i:03}")).collect();
        many.record_schema(&models);
        let line = many.schema_line().unwrap();
        assert!(line.ends_with(", other models 2)"), "{line}");
    }

    #[test]
    fn the_capacity_line_counts_per_provider_with_the_final_limits() {
        let mut t = BatchTally::default();
        assert_eq!(t.capacity_line(&BTreeMap::new()), None);
        t.record_capacity(Some("zhipu"), &["zhipu".into()], 1500);
        t.record_capacity(Some("dashscope"), &[], 0);
        t.record_capacity(Some("zhipu"), &[], 250);
        let limits = BTreeMap::from([("zhipu".to_string(), 3)]);
        assert_eq!(
            t.capacity_line(&limits).unwrap(),
            "batch: capacity: dashscope 1 answered, 0 capacity signals; zhipu 2 answered, 1 \
             capacity signal, limit 3; waited for slots 1.8 s in all"
        );
    }

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
        let mut t = BatchTally::default();
        t.record(
            Exit::Success,
            Some("back/m"),
            &usage(11, 7, 0.5),
            &usage(3, 0, 0.25),
            &["quota"],
        );
        t.record(
            Exit::Success,
            Some("back/m"),
            &usage(11, 7, 0.5),
            &Usage::default(),
            &["rate_limit", "rate_limit"],
        );
        t.record(
            Exit::Success,
            Some("prim/m"),
            &usage(1, 1, 0.0),
            &Usage::default(),
            &[],
        );
        t.record(
            Exit::Exhausted,
            None,
            &Usage::default(),
            &usage(2, 0, 0.0),
            &["rate_limit"],
        );
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
             read, 0 cache write, 38 total; cost 1.000000; failed attempts: 4 (quota 1, \
             rate_limit 3), 5 tokens, cost 0.250000"
        );
        assert_eq!(
            t.status(12, true, 30_000),
            "batch 8/12+ done · 1 failed · 8.0 jobs/min · 30.0s"
        );
        assert_eq!(
            t.status(12, false, 0),
            "batch 8/12 done · 1 failed · 0.0s",
            "no rate over nothing"
        );
        assert!(
            t.lines(10, 999)[0].ends_with("in 1.0 s"),
            "{}",
            t.lines(10, 999)[0]
        );
    }

    #[test]
    fn the_budget_line_says_why_and_how_many_are_left() {
        let mut l = crate::budget::Ledger::new(
            crate::budget::Caps::parse(&["0.5".to_string()]).expect("caps"),
        );
        l.add("zai", 0.75);
        let why = l.total_reached().expect("reached");
        assert_eq!(
            budget_line(&why, 12, true, true),
            "batch stopped: budget reached: this run recorded cost 0.750000 of --max-cost 0.5; \
             no new job or attempt was started; 12 job(s) left without a result (--resume runs \
             them)"
        );
        assert!(budget_line(&why, 3, false, false).ends_with(
            "at least 3 job(s) left without a result (with --output FILE, --resume would run \
                 them)"
        ));
    }

    #[test]
    fn an_empty_batch_and_many_models_stay_bounded() {
        let t = BatchTally::default();
        assert!(t.lines(0, 0)[1].starts_with("batch: answers by model: none;"));
        let mut t = BatchTally::default();
        for i in 0..(MAX_MODELS + 5) {
            t.record(
                Exit::Success,
                Some(&format!("p/m{i}")),
                &Usage::default(),
                &Usage::default(),
                &[],
            );
        }
        assert_eq!(t.models.len(), MAX_MODELS);
        assert!(t.lines(0, 1)[1].contains("other models 5;"));
    }
}
