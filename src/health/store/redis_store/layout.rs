//! How health is laid out in Redis, and what a change to it must write. Pure: names keys,
//! encodes records, computes write plans; never talks to a server.
//!
//! Every key lives under `PREFIX` + `v1:` (the layout version: a future layout takes new names
//! instead of misreading these):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `rec:{scope}:{key}` | string | one breaker [`Record`] as JSON, without `lease_until` |
//! | `idx:{scope}` | set | the keys of that scope's records (so loads never `SCAN`) |
//! | `lease:{scope}:{key}` | string, with a TTL | the half-open probe lease of that breaker |
//! | `cap:{provider}` | string, with a TTL | one provider's capacity record as JSON |
//! | `caps` | set | the providers that have a capacity record |
//! | `switches` | integer | the switch counter (`INCRBY`: exact) |
//! | `switch_log` | list | newest switches first, JSON, trimmed to [`SWITCH_LOG_LEN`] |
//! | `pace:{provider/id}` | list | that model's clean answers, newest first (see `redis::pace`) |
//! | `idx:pace` | set | the models that have a pace list |
//!
//! One key per record keeps optimistic transactions (`WATCH`) contending per breaker, not per
//! store. A lease's expiry is the server's TTL, so it ends by itself when its holder dies and
//! needs no clock agreement between machines; readers turn the remaining TTL into
//! `lease_until` on their own clock.

use std::collections::{BTreeMap, BTreeSet};

use crate::health::Scope;
use crate::health::{BREAKER_SCOPES, Health, Record, SWITCH_LOG_LEN, SwitchEntry};

/// Layout version, part of every key name.
pub const LAYOUT: &str = "v1:";
/// Keys per `WATCH`, `SSCAN` and `DEL` command.
pub const BATCH: usize = 1000;
/// A stored record longer than this is not ours (ours are well under 2 KiB): read at most this
/// much and treat a full read as corrupt.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// The key names of one store (one prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpace {
    ns: String,
}

impl KeySpace {
    pub fn new(prefix: &str) -> KeySpace {
        KeySpace {
            ns: format!("{prefix}{LAYOUT}"),
        }
    }

    pub fn record(&self, scope: Scope, key: &str) -> String {
        format!("{}rec:{}:{key}", self.ns, scope.as_str())
    }

    pub fn index(&self, scope: Scope) -> String {
        format!("{}idx:{}", self.ns, scope.as_str())
    }

    pub fn lease(&self, scope: Scope, key: &str) -> String {
        format!("{}lease:{}:{key}", self.ns, scope.as_str())
    }

    /// One provider's capacity record (`capacity::Capacity` as JSON; see `redis::capacity`).
    pub fn capacity(&self, provider: &str) -> String {
        format!("{}cap:{provider}", self.ns)
    }

    /// The providers that have a capacity record.
    pub fn capacity_index(&self) -> String {
        format!("{}caps", self.ns)
    }

    pub fn switches(&self) -> String {
        format!("{}switches", self.ns)
    }

    /// The counter of runs that started elsewhere ([`crate::health::Delta::SkippedStart`]).
    pub fn skipped_starts(&self) -> String {
        format!("{}skipped_starts", self.ns)
    }

    /// One model's pace list (see `redis::pace`).
    pub fn pace(&self, model: &str) -> String {
        format!("{}pace:{model}", self.ns)
    }

    /// The models that have a pace list.
    pub fn pace_index(&self) -> String {
        format!("{}idx:pace", self.ns)
    }

    pub fn switch_log(&self) -> String {
        format!("{}switch_log", self.ns)
    }

    /// A `SCAN MATCH` pattern for every key of this store (glob characters of the prefix
    /// escaped, so a prefix like `a*` never matches someone else's keys).
    pub fn scan_pattern(&self) -> String {
        let mut out = String::with_capacity(self.ns.len() + 1);
        for c in self.ns.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('*');
        out
    }
}

/// A record as stored: the lease lives in its own key.
pub fn encode_record(record: &Record) -> Vec<u8> {
    let stored = Record {
        lease_until: None,
        ..record.clone()
    };
    serde_json::to_vec(&stored).expect("a Record always serializes (strings, numbers, bools)")
}

/// A stored record, or `None` when the value is not one (empty, too long, not our JSON).
pub fn decode_record(bytes: &[u8]) -> Option<Record> {
    // Only an object is a record (serde would also take `[]`, as a struct in field order).
    if bytes.first() != Some(&b'{') || bytes.len() >= MAX_VALUE_BYTES {
        return None;
    }
    let mut record: Record = serde_json::from_slice(bytes).ok()?;
    record.lease_until = None;
    Some(record)
}

pub fn encode_switch(entry: &SwitchEntry) -> Vec<u8> {
    serde_json::to_vec(entry).expect("a SwitchEntry always serializes")
}

/// The switch log as read newest first (`LRANGE 0 N`), oldest first and ordered by time as
/// `Health` keeps it; entries that are not ours are skipped.
pub fn decode_switch_log(newest_first: &[Vec<u8>]) -> Vec<SwitchEntry> {
    let mut log: Vec<SwitchEntry> = newest_first
        .iter()
        .rev()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect();
    log.sort_by_key(|e| e.at);
    let excess = log.len().saturating_sub(SWITCH_LOG_LEN);
    log.drain(..excess);
    log
}

/// `lease_until` on the reader's clock from a `PTTL` reply (`-2` no key, `-1` no expiry: a
/// lease without an expiry is not one of ours and would block forever, so it is ignored).
pub fn lease_until(now_ms: u64, pttl: i64) -> Option<u64> {
    u64::try_from(pttl)
        .ok()
        .filter(|ms| *ms > 0)
        .map(|ms| now_ms.saturating_add(ms))
}

/// One write of a plan. Record writes also maintain the scope's index set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// `SET rec` + `SADD idx`.
    Record {
        scope: Scope,
        key: String,
        json: Vec<u8>,
    },
    /// `DEL rec` + `DEL lease` + `SREM idx`.
    Remove { scope: Scope, key: String },
    /// `SET lease PX ttl_ms`.
    Lease {
        scope: Scope,
        key: String,
        ttl_ms: u64,
        until: u64,
    },
    /// `DEL lease`.
    Release { scope: Scope, key: String },
}

/// The record and lease writes that turn `before` into `after` (switches are the caller's:
/// commits add them, edits replace them). Records are compared without their lease; a lease
/// is compared by whether it is live at `now_ms` and until when.
pub fn plan(before: &Health, after: &Health, now_ms: u64) -> Vec<Write> {
    let mut writes = Vec::new();
    for scope in BREAKER_SCOPES {
        let empty = BTreeMap::new();
        let old = before.records(scope).unwrap_or(&empty);
        let new = after.records(scope).unwrap_or(&empty);
        let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        for key in keys {
            let (was, now) = (old.get(key), new.get(key));
            let Some(now) = now else {
                writes.push(Write::Remove {
                    scope,
                    key: key.clone(),
                });
                continue;
            };
            let same = was.is_some_and(|w| {
                Record {
                    lease_until: None,
                    ..w.clone()
                } == Record {
                    lease_until: None,
                    ..now.clone()
                }
            });
            if !same {
                writes.push(Write::Record {
                    scope,
                    key: key.clone(),
                    json: encode_record(now),
                });
            }
            let live = |r: Option<&Record>| r.and_then(|r| r.lease_until).filter(|t| *t > now_ms);
            match (live(was), live(Some(now))) {
                (Some(_), None) => writes.push(Write::Release {
                    scope,
                    key: key.clone(),
                }),
                (old_lease, Some(until)) if old_lease != Some(until) => {
                    writes.push(Write::Lease {
                        scope,
                        key: key.clone(),
                        ttl_ms: until - now_ms,
                        until,
                    });
                }
                _ => {}
            }
        }
    }
    writes
}

/// The records (scope, key) that `deltas` read or write, each once, in first-use order.
pub fn touched(deltas: &[crate::health::Delta]) -> Vec<(Scope, String)> {
    use crate::health::Delta;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let mut add = |scope: Scope, key: &str| {
        if scope != Scope::Round && seen.insert((scope, key.to_string())) {
            out.push((scope, key.to_string()));
        }
    };
    for d in deltas {
        match d {
            Delta::Failure { key, scope, .. } | Delta::Stated { key, scope, .. } => {
                add(*scope, key)
            }
            Delta::Success { keys, .. } => {
                add(Scope::Model, &keys.model);
                add(Scope::Provider, &keys.provider);
                add(Scope::Endpoint, &keys.endpoint);
            }
            Delta::Lease { target, .. } | Delta::Release { target } => {
                add(target.scope, &target.key)
            }
            Delta::Switch(_) | Delta::SkippedStart | Delta::Pace { .. } => {}
        }
    }
    out
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
