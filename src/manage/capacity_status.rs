//! What `--status` shows of capacity: per provider, the limit learned on requests in flight,
//! the `--max-inflight` cap, and the requests in flight now (leases live at this moment, from
//! every process sharing the store). Pure.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::capacity::{Capacity, Limits};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityRow {
    pub provider: String,
    /// The learned limit (`None`: nothing learned yet; runs start at their own start).
    pub learned: Option<u32>,
    /// The limit learned from a capacity signal (not only raised in slow start).
    pub congested: bool,
    pub cap: Option<u32>,
    pub in_flight: u32,
}

/// One row per provider with a record or a cap, in name order.
pub fn capacity_rows(
    records: &BTreeMap<String, Capacity>,
    caps: &BTreeMap<String, u32>,
    now_ms: u64,
) -> Vec<CapacityRow> {
    let mut providers: Vec<&String> = records.keys().chain(caps.keys()).collect();
    providers.sort();
    providers.dedup();
    providers
        .into_iter()
        .map(|p| {
            let record = records.get(p);
            let cap = caps.get(p).copied();
            let limits = Limits { initial: 1, cap };
            let learned = record
                .filter(|r| r.limit > 0)
                .map(|r| r.effective_limit(now_ms, limits));
            CapacityRow {
                provider: p.clone(),
                learned,
                congested: record.is_some_and(|r| r.congested),
                cap,
                in_flight: record.map_or(0, |r| r.in_flight(now_ms)),
            }
        })
        .collect()
}

/// The table under `--status`'s models (empty when no provider has a record or a cap).
pub fn capacity_table(rows: &[CapacityRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let width = rows
        .iter()
        .map(|r| crate::redact::printable(&r.provider).chars().count())
        .max()
        .unwrap_or(0)
        .max("provider".len());
    let mut out = format!(
        "\n{:<width$}  {:>5}  {:>9}  {:>12}\n",
        "provider", "limit", "in flight", "max-inflight"
    );
    for r in rows {
        let limit = match (r.learned, r.congested) {
            (Some(l), true) => format!("{l}"),
            (Some(l), false) => format!("{l}+"),
            (None, _) => "-".to_string(),
        };
        let cap = r.cap.map_or_else(|| "-".to_string(), |c| c.to_string());
        out.push_str(&format!(
            "{:<width$}  {limit:>5}  {:>9}  {cap:>12}\n",
            crate::redact::printable(&r.provider),
            r.in_flight
        ));
    }
    out.push_str(
        "(limit: requests in flight the provider was found to take; + = still growing, no \
         capacity signal yet; - = nothing learned)\n",
    );
    out
}

pub fn capacity_json(rows: &[CapacityRow]) -> Value {
    json!(
        rows.iter()
            .map(|r| json!({
                "provider": crate::redact::printable(&r.provider),
                "limit": r.learned,
                "limit_learned_from_signal": r.congested,
                "max_inflight": r.cap,
                "in_flight": r.in_flight,
            }))
            .collect::<Vec<_>>()
    )
}

/// `--explain`'s capacity lines: the limit each provider a run could use would start at.
pub fn capacity_text(rows: &[CapacityRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("capacity (requests in flight per provider):\n");
    for r in rows {
        let limit = match (r.learned, r.congested) {
            (Some(l), true) => format!("limit {l} (learned from its capacity signals)"),
            (Some(l), false) => format!("limit {l} (growing: no capacity signal yet)"),
            (None, _) => "nothing learned yet (starts at 2, or at --max-inflight)".to_string(),
        };
        let cap = r
            .cap
            .map_or_else(String::new, |c| format!(", --max-inflight {c}"));
        out.push_str(&format!(
            "  {}: {limit}, {} in flight now{cap}\n",
            crate::redact::printable(&r.provider),
            r.in_flight
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{CapacityDelta, DEFAULT_LEASE_TTL_MS};

    #[test]
    fn rows_show_learned_limits_caps_and_live_leases() {
        let mut r = Capacity::default();
        let limits = Limits {
            initial: 4,
            cap: None,
        };
        for slot in ["a", "b"] {
            r.apply(&CapacityDelta::Acquire {
                at: 0,
                slot: slot.into(),
                ttl_ms: DEFAULT_LEASE_TTL_MS,
                limits,
            });
        }
        r.apply(&CapacityDelta::Refused {
            at: 1,
            slot: "b".into(),
            limits,
            pause_ms: 0,
            jitter: 0,
        });
        let records = BTreeMap::from([("zhipu".to_string(), r)]);
        let caps = BTreeMap::from([("dashscope".to_string(), 2)]);
        let rows = capacity_rows(&records, &caps, 10);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].provider, "dashscope");
        assert_eq!(
            (rows[0].learned, rows[0].cap, rows[0].in_flight),
            (None, Some(2), 0)
        );
        assert_eq!(rows[1].provider, "zhipu");
        assert!(rows[1].congested);
        assert_eq!((rows[1].learned, rows[1].in_flight), (Some(1), 1));
        let table = capacity_table(&rows);
        assert!(
            table.contains("dashscope      -          0             2"),
            "{table}"
        );
        // Leases run out by themselves: a dead holder's slot is not counted after its TTL.
        let later = capacity_rows(&records, &caps, 10 + DEFAULT_LEASE_TTL_MS);
        assert_eq!(later[1].in_flight, 0);
        assert_eq!(capacity_json(&rows)[1]["in_flight"], 1);
    }
}
