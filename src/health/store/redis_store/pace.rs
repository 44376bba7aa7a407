//! Each model's pace in Redis (issue 31): a list per model, `pace:{provider/id}`, newest answer
//! first, trimmed to [`MAX_SAMPLES`] on every push, and the set `idx:pace` of the models that
//! have one. A push is `LPUSH` + `LTRIM` + `SADD` inside the commit's `MULTI`: answers of many
//! processes add up without a read first, and none is lost to a concurrent one.
//!
//! Read back with `LRANGE 0 MAX_SAMPLES-1` in the load's second round trip; an entry that is not
//! a valid sample ([`Sample::decode`]) is skipped, so a corrupt or foreign list reads as less
//! history, never as a failed load. Bounded like the breakers: at most [`MAX_INDEX_READ`] index
//! entries read, at most [`MAX_RECORDS`] lists kept (the longest idle deleted by `maintain`).

use std::collections::BTreeMap;

use redis::Value;

use super::layout::KeySpace;
use crate::health::Delta;
use crate::pace::{MAX_RECORDS, MAX_SAMPLES, PaceRecord, Sample};

/// Most pace index entries read.
pub const MAX_INDEX_READ: usize = 2 * MAX_RECORDS;

/// Adds the pushes of `deltas`' pace samples to a transaction.
pub fn add_pushes(tx: &mut redis::Pipeline, keys: &KeySpace, deltas: &[Delta]) -> usize {
    let mut n = 0;
    for d in deltas {
        let Delta::Pace { key, sample } = d else {
            continue;
        };
        if !crate::pace::key_ok(key) || !sample.valid() {
            continue;
        }
        push(tx, keys, key, &[*sample]);
        n += 1;
    }
    n
}

/// `LPUSH` `samples` (oldest first, so the newest ends up first), trim, index.
fn push(tx: &mut redis::Pipeline, keys: &KeySpace, key: &str, samples: &[Sample]) {
    let list = keys.pace(key);
    for s in samples {
        tx.cmd("LPUSH").arg(&list).arg(s.encode()).ignore();
    }
    tx.cmd("LTRIM")
        .arg(&list)
        .arg(0)
        .arg(MAX_SAMPLES - 1)
        .ignore();
    tx.cmd("SADD").arg(keys.pace_index()).arg(key).ignore();
}

/// Queues the reads of `models`' lists.
pub fn queue_reads(p: &mut redis::Pipeline, keys: &KeySpace, models: &[String]) {
    for m in models {
        p.cmd("LRANGE")
            .arg(keys.pace(m))
            .arg(0)
            .arg(MAX_SAMPLES - 1);
    }
}

/// The records of `models` from their `LRANGE` replies; empty ones left out.
pub fn parse(models: &[String], replies: &[Value]) -> BTreeMap<String, PaceRecord> {
    models
        .iter()
        .zip(replies)
        .filter_map(|(m, v)| {
            let Value::Array(items) = v else {
                return None;
            };
            let samples = items.iter().filter_map(|i| match i {
                Value::BulkString(b) => Sample::decode(b),
                _ => None,
            });
            let r = PaceRecord::from_samples(samples);
            (!r.is_empty()).then(|| (m.clone(), r))
        })
        .collect()
}

/// The writes that turn `before`'s pace into `after`'s (management edits): a list gone is
/// deleted, a list changed is written again whole.
pub fn add_edits(
    tx: &mut redis::Pipeline,
    keys: &KeySpace,
    before: &BTreeMap<String, PaceRecord>,
    after: &BTreeMap<String, PaceRecord>,
) {
    for (key, was) in before {
        match after.get(key) {
            Some(now) if now == was => {}
            Some(now) => {
                tx.cmd("DEL").arg(keys.pace(key)).ignore();
                push(tx, keys, key, now.samples());
            }
            None => {
                tx.cmd("DEL").arg(keys.pace(key)).ignore();
                tx.cmd("SREM").arg(keys.pace_index()).arg(key).ignore();
            }
        }
    }
    for (key, now) in after {
        if !before.contains_key(key) {
            push(tx, keys, key, now.samples());
        }
    }
}

/// The models whose lists `maintain` deletes: beyond [`MAX_RECORDS`], the longest idle; and
/// index entries without a readable list.
pub fn victims(indexed: &[String], read: &BTreeMap<String, PaceRecord>) -> Vec<String> {
    let mut out: Vec<String> = indexed
        .iter()
        .filter(|m| !read.contains_key(*m))
        .cloned()
        .collect();
    let mut kept = read.clone();
    crate::pace::bound(&mut kept);
    out.extend(read.keys().filter(|k| !kept.contains_key(*k)).cloned());
    out
}
