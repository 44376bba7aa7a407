//! Each provider/model's pace, learned from its clean answers (issue 31, SPEC §7 "slow is not
//! dead"): how long it takes to the first response event and the longest gap between stream
//! events, with the prompt's size. Pure: no I/O, no clock; every time is an argument.
//!
//! - [`PaceRecord`] keeps the most recent [`MAX_SAMPLES`] answers of one model. Its summary
//!   weighs each answer by its age (half-life [`HALF_LIFE_MS`], nothing older than
//!   [`MAX_AGE_MS`]), so an old night does not rule forever, and a record is "history" only
//!   while its weight is at least [`MIN_WEIGHT`] (five fresh answers).
//! - [`watchdog`] turns a summary into the first-response and stall limits of an attempt,
//!   always between a floor and the configured ceiling.
//! - [`share`] splits a deadline among the candidates still left.
//!
//! A record comes from a store anyone may write: [`PaceRecord::from_value`] keeps only samples
//! that are four numbers in range and [`PaceRecord::clamp`] drops samples from the future or
//! older than the age limit, so a hostile or corrupt record reads as less history (at worst
//! none: the configured ceilings), never as a longer or zero watchdog.

pub mod share;
pub mod watchdog;

use std::collections::BTreeMap;

use serde::de::Deserializer;
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Answers kept per model: enough for a p95 that means something, small enough that a store of
/// [`MAX_RECORDS`] models stays well under a megabyte.
pub const MAX_SAMPLES: usize = 40;
/// Models whose pace one store keeps; the longest idle go first past this.
pub const MAX_RECORDS: usize = 500;
/// An answer's weight halves every this long.
pub const HALF_LIFE_MS: u64 = 24 * 3_600_000;
/// Answers older than this count for nothing (and are dropped on read).
pub const MAX_AGE_MS: u64 = 7 * 24 * 3_600_000;
/// Summed weight of answers from which the pace is trusted (five fresh answers).
pub const MIN_WEIGHT: f64 = 5.0;
/// A sample stamped this far past the reader's clock is from a clock far ahead (or forged):
/// dropped, it would otherwise outweigh every real answer for days.
pub const MAX_SKEW_MS: u64 = 5 * 60_000;
/// Longest time a sample may hold (first response or gap); longer is not a clean answer.
pub const MAX_SAMPLE_MS: u64 = 3_600_000;
/// Largest prompt size a sample may hold (characters).
pub const MAX_PROMPT_CHARS: u64 = 100_000_000;
/// The part of the first-response time that does not grow with the prompt, in prompt
/// characters: a sample from a shorter prompt is scaled by `(chars + K) / (its chars + K)`.
pub const SIZE_BASE_CHARS: u64 = 8000;

/// One clean answer: when it ended (wall ms), its time to the first response event, the
/// longest gap between its stream events, and its prompt's size. Stored as a 4-number array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sample {
    pub at_ms: u64,
    pub first_ms: u64,
    pub gap_ms: u64,
    pub prompt_chars: u64,
}

impl Sample {
    /// Only what a clean answer could have measured: a first response after 0 ms and within
    /// [`MAX_SAMPLE_MS`], a gap within it too, a prompt size within [`MAX_PROMPT_CHARS`].
    pub fn valid(&self) -> bool {
        (1..=MAX_SAMPLE_MS).contains(&self.first_ms)
            && self.gap_ms <= MAX_SAMPLE_MS
            && self.prompt_chars <= MAX_PROMPT_CHARS
    }

    fn from_value(v: &Value) -> Option<Sample> {
        let Value::Array(parts) = v else {
            return None;
        };
        let [at, first, gap, chars] = parts.as_slice() else {
            return None;
        };
        let s = Sample {
            at_ms: at.as_u64()?,
            first_ms: first.as_u64()?,
            gap_ms: gap.as_u64()?,
            prompt_chars: chars.as_u64()?,
        };
        s.valid().then_some(s)
    }

    /// The stored form, `[at_ms, first_ms, gap_ms, prompt_chars]`.
    pub fn to_value(self) -> Value {
        Value::from(vec![
            self.at_ms,
            self.first_ms,
            self.gap_ms,
            self.prompt_chars,
        ])
    }

    /// The stored form as bytes (one Redis list entry).
    pub fn encode(self) -> Vec<u8> {
        self.to_value().to_string().into_bytes()
    }

    /// A stored entry, or `None` when it is not one (see [`Sample::valid`]).
    pub fn decode(bytes: &[u8]) -> Option<Sample> {
        if bytes.len() > 200 {
            return None;
        }
        Sample::from_value(&serde_json::from_slice(bytes).ok()?)
    }
}

/// The recent clean answers of one model, oldest first, at most [`MAX_SAMPLES`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaceRecord {
    samples: Vec<Sample>,
}

/// What a record says at one instant, for one prompt size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Answers that still count (younger than [`MAX_AGE_MS`]).
    pub answers: usize,
    /// Their summed weight (each 1.0 when fresh, halving per [`HALF_LIFE_MS`]).
    pub weight: f64,
    /// Weighted 95th percentile of the time to the first response, each sample scaled up to
    /// the prompt size asked about (never down).
    pub first_p95_ms: u64,
    /// Weighted 95th percentile of the longest gap between stream events.
    pub gap_p95_ms: u64,
}

impl Summary {
    /// Enough recent answers to judge by.
    pub fn trusted(&self) -> bool {
        self.weight >= MIN_WEIGHT
    }

    /// "first response p95 1.2 s, longest gap p95 0.3 s over 40 answers", for `--status`,
    /// `--explain` and `-v`.
    pub fn describe(&self) -> String {
        format!(
            "first response p95 {}, longest gap p95 {} over {} answer{}",
            secs(self.first_p95_ms),
            secs(self.gap_p95_ms),
            self.answers,
            if self.answers == 1 { "" } else { "s" }
        )
    }
}

/// Milliseconds as people read them: `850 ms`, `1.2 s`, `90 s`.
pub fn secs(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 10_000 {
        format!("{}.{} s", ms / 1000, (ms % 1000) / 100)
    } else {
        format!("{} s", (ms + 500) / 1000)
    }
}

impl PaceRecord {
    /// A record of these samples (invalid ones dropped, the newest [`MAX_SAMPLES`] kept).
    pub fn from_samples(samples: impl IntoIterator<Item = Sample>) -> PaceRecord {
        let mut r = PaceRecord {
            samples: samples.into_iter().filter(Sample::valid).collect(),
        };
        r.tidy();
        r
    }

    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// When the newest answer ended (for pruning the longest idle records first).
    pub fn last_at(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.at_ms)
    }

    /// Adds one clean answer (an invalid one is ignored).
    pub fn add(&mut self, sample: Sample) {
        if sample.valid() {
            self.samples.push(sample);
            self.tidy();
        }
    }

    /// Oldest first, duplicates (the same answer merged twice) once, the newest kept.
    fn tidy(&mut self) {
        self.samples.sort_unstable();
        self.samples.dedup();
        let excess = self.samples.len().saturating_sub(MAX_SAMPLES);
        self.samples.drain(..excess);
    }

    /// Drops what no clean answer could have left by `now_ms`: samples from more than
    /// [`MAX_SKEW_MS`] ahead (a clock far ahead, a forged year 9999) and samples older than
    /// [`MAX_AGE_MS`].
    pub fn clamp(&mut self, now_ms: u64) {
        let newest = now_ms.saturating_add(MAX_SKEW_MS);
        let oldest = now_ms.saturating_sub(MAX_AGE_MS);
        self.samples
            .retain(|s| s.at_ms <= newest && s.at_ms >= oldest);
    }

    /// The pace at `now_ms` for a prompt of `prompt_chars`; `None` with no answer that counts.
    pub fn summary(&self, now_ms: u64, prompt_chars: u64) -> Option<Summary> {
        let counted: Vec<(f64, &Sample)> = self
            .samples
            .iter()
            .filter(|s| s.at_ms <= now_ms.saturating_add(MAX_SKEW_MS))
            .filter_map(|s| {
                let age = now_ms.saturating_sub(s.at_ms);
                (age < MAX_AGE_MS).then(|| (weight(age), s))
            })
            .collect();
        if counted.is_empty() {
            return None;
        }
        let size = prompt_chars.min(MAX_PROMPT_CHARS);
        let firsts: Vec<(u64, f64)> = counted
            .iter()
            .map(|(w, s)| (scaled_first(s, size), *w))
            .collect();
        let gaps: Vec<(u64, f64)> = counted.iter().map(|(w, s)| (s.gap_ms, *w)).collect();
        Some(Summary {
            answers: counted.len(),
            weight: counted.iter().map(|(w, _)| w).sum(),
            first_p95_ms: weighted_percentile(firsts, 0.95),
            gap_p95_ms: weighted_percentile(gaps, 0.95),
        })
    }

    /// The stored form: an array of samples (see [`Sample::to_value`]).
    pub fn to_value(&self) -> Value {
        Value::from(
            self.samples
                .iter()
                .map(|s| s.to_value())
                .collect::<Vec<_>>(),
        )
    }

    /// A stored record; what is not a sample is skipped (a record of nothing valid is empty).
    pub fn from_value(v: &Value) -> PaceRecord {
        let samples = match v {
            Value::Array(items) => items
                .iter()
                .take(4 * MAX_SAMPLES)
                .filter_map(Sample::from_value)
                .collect(),
            _ => Vec::new(),
        };
        PaceRecord::from_samples(samples)
    }
}

/// `0.5^(age / half-life)`.
fn weight(age_ms: u64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "ages are far below 2^52 ms")]
    let halves = age_ms as f64 / HALF_LIFE_MS as f64;
    0.5f64.powf(halves)
}

/// A sample's first-response time for a prompt of `size` characters: scaled up by the size
/// ratio when the prompt is larger (a longer prompt starts later), never scaled down.
fn scaled_first(s: &Sample, size: u64) -> u64 {
    if size <= s.prompt_chars {
        return s.first_ms;
    }
    let num = u128::from(size) + u128::from(SIZE_BASE_CHARS);
    let den = u128::from(s.prompt_chars) + u128::from(SIZE_BASE_CHARS);
    let scaled = u128::from(s.first_ms) * num / den;
    u64::try_from(scaled.min(u128::from(MAX_SAMPLE_MS) * 16)).unwrap_or(u64::MAX)
}

/// The smallest value whose cumulative weight reaches `q` of the total (values sorted).
fn weighted_percentile(mut values: Vec<(u64, f64)>, q: f64) -> u64 {
    values.sort_by_key(|(v, _)| *v);
    let total: f64 = values.iter().map(|(_, w)| w).sum();
    let target = total * q;
    let mut acc = 0.0;
    for (v, w) in &values {
        acc += w;
        // A hair of tolerance: 20 equal weights must put p95 at the 19th value.
        if acc >= target - 1e-9 {
            return *v;
        }
    }
    values.last().map_or(0, |(v, _)| *v)
}

impl Serialize for PaceRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.samples.len()))?;
        for sample in &self.samples {
            seq.serialize_element(&[
                sample.at_ms,
                sample.first_ms,
                sample.gap_ms,
                sample.prompt_chars,
            ])?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for PaceRecord {
    /// Never fails: a record that is not ours reads as empty (see [`PaceRecord::from_value`]).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PaceRecord, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(PaceRecord::from_value(&v))
    }
}

/// The `pace` map of the health state, read leniently: a value that is not a map of records
/// reads as no pace at all, a record that is not ours as an empty one (dropped), so a corrupt
/// or hostile pace never costs the breakers beside it.
pub fn lenient_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, PaceRecord>, D::Error> {
    let v = Value::deserialize(d)?;
    let Value::Object(map) = v else {
        return Ok(BTreeMap::new());
    };
    let mut out: BTreeMap<String, PaceRecord> = map
        .iter()
        .filter(|(k, _)| key_ok(k))
        .map(|(k, v)| (k.clone(), PaceRecord::from_value(v)))
        .filter(|(_, r)| !r.is_empty())
        .collect();
    bound(&mut out);
    Ok(out)
}

/// A model key as the runner writes them (`provider/id`, short).
pub fn key_ok(key: &str) -> bool {
    !key.is_empty() && key.len() <= 512
}

/// Keeps at most [`MAX_RECORDS`] records: the longest idle go first.
pub fn bound(map: &mut BTreeMap<String, PaceRecord>) {
    let excess = map.len().saturating_sub(MAX_RECORDS);
    if excess == 0 {
        return;
    }
    let mut order: Vec<(u64, String)> = map.iter().map(|(k, r)| (r.last_at(), k.clone())).collect();
    order.sort();
    for (_, key) in order.into_iter().take(excess) {
        map.remove(&key);
    }
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
