//! Capacity records in Redis: one key per provider, `cap:{provider}` (the [`Capacity`] as JSON,
//! kept without expiry, as the file store keeps its records: the learned limit is the next
//! start, however long until the next batch — with an expiry every nightly batch started cold,
//! issue 29), and an index set `caps` for `--status`. An operation
//! is an optimistic transaction like a breaker commit: `WATCH` the providers' keys, read them,
//! decide with [`apply_op`] (the rule every store applies), write what changed between `MULTI`
//! and `EXEC`, repeat if another process got in between.
//!
//! Leases are judged by the server's clock (`TIME`, read in the same round trip), never the
//! caller's — taking, renewing, giving back and expiring alike (`apply_op` stamps every delta
//! with it): every host sharing one budget needs the same idea of when a lease runs out, and
//! their clocks may disagree by more than a lease lasts.

use std::collections::BTreeMap;

use redis::Value;

use super::layout::BATCH;
use super::reply::{bytes, getrange, int, scan_page};
use super::{MAX_INDEX_READ, RedisStore};
use crate::capacity::Capacity;
use crate::capacity::ops::{CapacityOp, CapacityReply, apply_op, prune};
use crate::health::store::api::StoreError;

impl RedisStore {
    pub(super) fn capacity_op(
        &mut self,
        op: &CapacityOp,
        now_ms: u64,
    ) -> Result<CapacityReply, StoreError> {
        let providers: Vec<String> = op.providers().into_iter().map(str::to_string).collect();
        self.transact(|con, keys| {
            let names: Vec<String> = providers.iter().map(|p| keys.capacity(p)).collect();
            let mut p = redis::pipe();
            p.cmd("WATCH").arg(&names).ignore();
            p.cmd("TIME");
            for name in &names {
                getrange(&mut p, name);
            }
            let replies: Vec<Value> = p.ignore_errors().query(con)?;
            let now = server_ms(replies.first()).unwrap_or(now_ms);
            let mut records: BTreeMap<String, Capacity> = BTreeMap::new();
            for (provider, value) in providers.iter().zip(replies.iter().skip(1)) {
                if let Some(record) = decode(&bytes(value)) {
                    records.insert(provider.clone(), record);
                }
            }
            let (reply, changed) = apply_op(&mut records, op, now);
            let reply = reply.on_caller_clock(now, now_ms);
            if changed.is_empty() {
                redis::cmd("UNWATCH").query::<()>(con)?;
                return Ok(Some(reply));
            }
            let mut tx = redis::pipe();
            tx.atomic();
            for provider in &changed {
                let Some(record) = records.get(provider) else {
                    continue;
                };
                // No expiry (see the module docs); a key written with one before is made
                // lasting by this plain SET.
                tx.cmd("SET")
                    .arg(keys.capacity(provider))
                    .arg(encode(record))
                    .ignore();
                tx.cmd("SADD")
                    .arg(keys.capacity_index())
                    .arg(provider)
                    .ignore();
            }
            Ok(tx.query::<Option<()>>(con)?.map(|()| reply))
        })
    }

    pub(super) fn capacity_records(
        &mut self,
        now_ms: u64,
    ) -> Result<BTreeMap<String, Capacity>, StoreError> {
        self.run(|con, keys| {
            let mut providers = std::collections::BTreeSet::new();
            let mut cursor = 0u64;
            loop {
                let page: Value = redis::cmd("SSCAN")
                    .arg(keys.capacity_index())
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(BATCH)
                    .query(con)
                    .unwrap_or(Value::Nil);
                let (next, members) = scan_page(&page);
                providers.extend(
                    members
                        .into_iter()
                        .filter_map(|m| String::from_utf8(m).ok()),
                );
                if next == 0 || providers.len() >= MAX_INDEX_READ {
                    break;
                }
                cursor = next;
            }
            let mut p = redis::pipe();
            p.cmd("TIME");
            for provider in &providers {
                getrange(&mut p, &keys.capacity(provider));
            }
            let replies: Vec<Value> = p.ignore_errors().query(con)?;
            let now = server_ms(replies.first()).unwrap_or(now_ms);
            let mut records = BTreeMap::new();
            for (provider, value) in providers.iter().zip(replies.iter().skip(1)) {
                if let Some(record) = decode(&bytes(value)) {
                    records.insert(provider.clone(), record);
                }
            }
            prune(&mut records, now);
            Ok(records)
        })
    }
}

/// `TIME`'s reply (seconds, microseconds) as unix ms (a server that will not say is judged by
/// the caller's clock).
fn server_ms(reply: Option<&Value>) -> Option<u64> {
    let Some(Value::Array(parts)) = reply else {
        return None;
    };
    let secs = parts
        .first()
        .and_then(int)
        .and_then(|s| u64::try_from(s).ok());
    let micros = parts
        .get(1)
        .and_then(int)
        .and_then(|u| u64::try_from(u).ok());
    Some(secs?.saturating_mul(1000).saturating_add(micros? / 1000))
}

fn encode(record: &Capacity) -> Vec<u8> {
    serde_json::to_vec(record).unwrap_or_default()
}

/// A stored record, or `None` when the value is not one.
fn decode(bytes: &[u8]) -> Option<Capacity> {
    if bytes.first() != Some(&b'{') || bytes.len() >= super::layout::MAX_VALUE_BYTES {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}
