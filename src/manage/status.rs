//! `--status`: one line per model (every model Pi lists, plus models only the store remembers),
//! as a table or JSON. Pure, and linear in the number of records: a state file may hold
//! thousands of them.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::catalog::ModelInfo;
use crate::failover::reopen::human_ms;
use crate::health::cooldown::STATED_SPREAD_MAX_MS;
use crate::health::{Block, Health, Keys, Record};
use crate::timefmt::{LocalOffset, iso_utc_seconds, local_and_utc};

/// One model's line in `--status`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelStatus {
    pub key: String,
    pub state: &'static str,
    pub blocked_by: Option<&'static str>,
    pub remaining_ms: u64,
    /// Total failures of the model's model, provider and endpoint breakers.
    pub failures: [u64; 3],
    pub last_class: Option<String>,
    pub last_error: Option<String>,
    pub available: bool,
    /// While cooling: when the last of its open breakers reopens (unix ms).
    pub reopens_at_ms: Option<u64>,
    /// An open breaker of the model whose provider stated when its limit lifts.
    pub stated: Option<StatedStatus>,
    /// The model's pace (issue 31): what its recent clean answers took.
    pub pace: Option<crate::pace::Summary>,
}

/// A breaker open until the reset its provider stated (issue 24).
#[derive(Debug, Clone, PartialEq)]
pub struct StatedStatus {
    /// `provider`, `endpoint` or `model`.
    pub breaker: &'static str,
    /// The breaker's key (cleaned for display).
    pub key: String,
    /// The reset the provider stated (unix ms).
    pub at_ms: u64,
    /// When the breaker reopens: the reset plus its spread (unix ms).
    pub reopens_at_ms: u64,
    /// How long from the status's time until then.
    pub reopens_in_ms: u64,
    /// The provider's words in quotes, and how they were read (redacted, cleaned for display).
    pub words: String,
}

/// The status of every model Pi lists, plus models only the store knows.
pub fn statuses(models: &[ModelInfo], health: &Health, now_ms: u64) -> Vec<ModelStatus> {
    let listed: HashSet<String> = models.iter().map(|m| m.key().into()).collect();
    let mut all: Vec<(ModelInfo, bool)> = models.iter().cloned().map(|m| (m, true)).collect();
    for key in health.models.keys() {
        if !listed.contains(key)
            && let Some((provider, id)) = key.split_once('/')
        {
            all.push((
                ModelInfo {
                    provider: provider.to_string(),
                    id: id.to_string(),
                    name: None,
                    base_url: None,
                    reasoning: false,
                    input: None,
                    context_window: None,
                    max_tokens: None,
                },
                false,
            ));
        }
    }
    all.into_iter()
        .map(|(m, available)| status_of(&m, available, health, now_ms))
        .collect()
}

fn status_of(m: &ModelInfo, available: bool, health: &Health, now_ms: u64) -> ModelStatus {
    let keys = Keys::of(m);
    let recs: [Option<&Record>; 3] = [
        health.models.get(&keys.model),
        health.providers.get(&keys.provider),
        health.endpoints.get(&keys.endpoint),
    ];
    // The stated breaker that stays open longest, if any.
    let stated = [
        ("model", &keys.model, recs[0]),
        ("provider", &keys.provider, recs[1]),
        ("endpoint", &keys.endpoint, recs[2]),
    ]
    .into_iter()
    .filter_map(|(breaker, key, r)| {
        let r = r?;
        let at_ms = r.stated_reset_at(now_ms)?;
        let reopens_at_ms = r.cooldown_until.unwrap_or(at_ms);
        Some(StatedStatus {
            breaker,
            key: crate::redact::printable(key),
            at_ms,
            reopens_at_ms,
            reopens_in_ms: reopens_at_ms.saturating_sub(now_ms),
            words: crate::redact::redact_capped(r.stated_words.as_deref().unwrap_or(""), 120),
        })
    })
    .max_by_key(|s| s.reopens_at_ms);
    let remaining_ms = recs
        .iter()
        .flatten()
        .filter_map(|r| r.cooldown_until)
        .map(|t| t.saturating_sub(now_ms))
        .max()
        .unwrap_or(0);
    let (state, blocked_by) = match health.blocked(m, now_ms, &[]) {
        Some(Block::Disabled) => ("disabled", None),
        Some(Block::Cooling(scope)) => ("cooling", Some(scope.as_str())),
        Some(Block::Leased) => ("probing", Some("provider")),
        None => match health.needs_probe(m, now_ms, &[]) {
            Some(target) => ("half-open", Some(target.scope.as_str())),
            None => ("healthy", None),
        },
    };
    // The most recent failure among the three records explains the state best.
    let last = recs
        .iter()
        .flatten()
        .filter(|r| r.last_failure_at.is_some())
        .max_by_key(|r| r.last_failure_at);
    // What a store holds is not trusted (a shared Redis, a tampered state file): nothing from it
    // reaches the operator's terminal raw.
    ModelStatus {
        key: crate::redact::printable(&keys.model),
        state,
        blocked_by,
        remaining_ms: if state == "cooling" { remaining_ms } else { 0 },
        failures: health.total_failures(m),
        last_class: last
            .and_then(|r| r.last_class.as_deref())
            .map(|c| crate::redact::redact_capped(c, 40)),
        last_error: last
            .and_then(|r| r.last_error.as_deref())
            .map(|e| crate::redact::redact_capped(e, 300)),
        available,
        reopens_at_ms: (state == "cooling").then(|| now_ms.saturating_add(remaining_ms)),
        stated: stated.filter(|_| state == "cooling"),
        pace: health.pace_of(&keys.model, now_ms, 0),
    }
}

const HEADERS: [&str; 8] = [
    "MODEL",
    "STATE",
    "BREAKER",
    "COOLDOWN LEFT",
    "MODEL FAILS",
    "PROVIDER FAILS",
    "ENDPOINT FAILS",
    "LAST FAILURE",
];

/// The `--status` table, then the breakers open until a reset their provider stated (times in
/// the `local` zone and UTC).
pub fn status_table(rows: &[ModelStatus], health: &Health, local: Option<LocalOffset>) -> String {
    let label = |r: &ModelStatus| {
        if r.available {
            r.key.clone()
        } else {
            format!("{} (not listed by Pi)", r.key)
        }
    };
    let width = rows
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(0)
        .max(HEADERS[0].len());
    let [m, st, br, cd, mf, pf, ef, lf] = HEADERS;
    let mut out =
        format!("{m:<width$}  {st:<9}  {br:<8}  {cd:>13}  {mf:>11}  {pf:>14}  {ef:>14}  {lf}\n");
    for r in rows {
        let last = match (&r.last_class, &r.last_error) {
            (Some(c), Some(e)) => format!("{c}: {}", e.chars().take(60).collect::<String>()),
            (Some(c), None) => c.clone(),
            _ => String::new(),
        };
        let key = label(r);
        let left = if r.remaining_ms == 0 {
            "-".to_string()
        } else {
            human_ms(r.remaining_ms)
        };
        out.push_str(
            format!(
                "{key:<width$}  {:<9}  {:<8}  {left:>13}  {:>11}  {:>14}  {:>14}  {last}",
                r.state,
                r.blocked_by.unwrap_or("-"),
                r.failures[0],
                r.failures[1],
                r.failures[2],
            )
            .trim_end(),
        );
        out.push('\n');
    }
    let count = |s: &str| rows.iter().filter(|r| r.state == s).count();
    out.push_str(&format!(
        "\n{} models: {} healthy, {} cooling, {} disabled, {} half-open/probing · {} switches \
         after a failure, {} runs started on another model because theirs was down\n",
        rows.len(),
        count("healthy"),
        count("cooling"),
        count("disabled"),
        count("half-open") + count("probing"),
        health.switches,
        health.skipped_starts
    ));
    let paced: Vec<(&ModelStatus, &crate::pace::Summary)> = rows
        .iter()
        .filter_map(|r| Some((r, r.pace.as_ref()?)))
        .collect();
    if !paced.is_empty() {
        out.push_str(&format!(
            "\npace (recent clean answers; watchdogs derive from it from {} fresh answers on):\n",
            crate::pace::MIN_WEIGHT
        ));
        for (r, p) in paced {
            out.push_str(&format!("  {}: {}\n", r.key, p.describe()));
        }
    }
    let mut seen = HashSet::new();
    let stated: Vec<&StatedStatus> = rows
        .iter()
        .filter_map(|r| r.stated.as_ref())
        .filter(|s| seen.insert((s.breaker, s.key.clone())))
        .collect();
    if !stated.is_empty() {
        out.push_str(&format!(
            "\nstated resets (the provider said when its limit lifts; the breaker stays open \
             until then, plus up to {} s):\n",
            STATED_SPREAD_MAX_MS / 1000
        ));
        for s in stated {
            out.push_str(&format!(
                "  {} {}: resets at {}, reopens in {}; stated as {}\n",
                s.breaker,
                s.key,
                local_and_utc(s.at_ms, local),
                human_ms(s.reopens_in_ms),
                s.words
            ));
        }
    }
    out
}

/// The `--status --json` document.
pub fn status_json(rows: &[ModelStatus], health: &Health) -> Value {
    let count = |s: &str| rows.iter().filter(|r| r.state == s).count();
    json!({
        "models": rows.iter().map(|r| json!({
            "model": r.key,
            "state": r.state,
            "blocked_by": r.blocked_by,
            "cooldown_remaining_ms": r.remaining_ms,
            "failures": {"model": r.failures[0], "provider": r.failures[1], "endpoint": r.failures[2]},
            "last_class": r.last_class,
            "last_error": r.last_error,
            // `listed`: Pi lists it now; `available`: a run could use it now (listed, and not
            // cooling, disabled or being probed by another run).
            "listed": r.available,
            "available": r.available && matches!(r.state, "healthy" | "half-open"),
            "reopens_at_ms": r.reopens_at_ms,
            // The provider said when its limit lifts (issue 24): the breaker is open until then.
            "stated_reset": r.stated.as_ref().map(|s| json!({
                "breaker": s.breaker,
                "key": s.key,
                "at_ms": s.at_ms,
                "at": iso_utc_seconds(s.at_ms),
                "reopens_at_ms": s.reopens_at_ms,
                "stated_as": s.words,
            })),
            // What its recent clean answers took (issue 31); null with none in the last week.
            "pace": r.pace.map(|p| json!({
                "answers": p.answers,
                "weight": (p.weight * 100.0).round() / 100.0,
                "trusted": p.trusted(),
                "first_response_p95_ms": p.first_p95_ms,
                "longest_gap_p95_ms": p.gap_p95_ms,
            })),
        })).collect::<Vec<_>>(),
        "healthy": count("healthy"),
        "cooling": count("cooling"),
        "disabled": count("disabled"),
        "half_open": count("half-open") + count("probing"),
        "switches": health.switches,
        "skipped_starts": health.skipped_starts,
        "switch_log": health.switch_log.iter().map(|e| json!({
            "at": e.at,
            "from": crate::redact::redact_capped(&e.from, 300),
            "to": crate::redact::redact_capped(&e.to, 300),
            "reason": crate::redact::redact_capped(&e.reason, 100),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::classify::{FailureClass, Scope};
    use crate::health::Delta;

    /// Issue 20: a tampered state file or a hostile shared Redis cannot put terminal escapes or
    /// fake lines on the operator's screen: every stored text is cleaned for display.
    #[test]
    fn stored_text_is_cleaned_for_display() {
        let mut h = Health::default();
        let hostile = "402\u{1b}[2J\u{1b}[31m\nok   pi: fake line\r sk-abcdefghijklmnopqrstuvwx";
        h.models.insert(
            "p/m\u{1b}]0;title\u{7}\nx".to_string(),
            Record {
                total_failures: 1,
                last_failure_at: Some(1),
                last_class: Some("quota\u{1b}[0m\n".into()),
                last_error: Some(hostile.into()),
                ..Record::default()
            },
        );
        h.switch_log.push(crate::health::SwitchEntry {
            at: 1,
            from: "a\u{1b}[2J".into(),
            to: "b\nc".into(),
            reason: "quota\r".into(),
        });
        let rows = statuses(&[], &h, 10);
        let table = status_table(&rows, &h, None);
        let json = status_json(&rows, &h).to_string();
        for text in [&table, &json] {
            assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
            assert!(
                !text.contains("\\u001b"),
                "no escape survives, even JSON-escaped"
            );
            assert!(!text.contains("sk-abcdefghij"), "{text}");
        }
        assert!(!table.contains("\nok   pi"), "no forged line: {table}");
        assert_eq!(
            table.lines().count(),
            4,
            "header, one row, blank, summary: {table}"
        );
    }

    #[test]
    fn status_is_linear_in_the_number_of_records() {
        // Regression (issue 9): 45k records took 55 s because every record was looked up in a
        // list that grew with the records. 200k records must now take well under a second
        // even in a debug build; a quadratic pass would take hours.
        let mut h = Health::default();
        for i in 0..200_000u64 {
            h.models.insert(
                format!("p{}/m{i}", i % 97),
                Record {
                    total_failures: 1,
                    last_failure_at: Some(i),
                    ..Record::default()
                },
            );
        }
        let rows = statuses(&[], &h, 1);
        assert_eq!(rows.len(), 200_000);
        assert!(rows.iter().all(|r| !r.available));
        let table = status_table(&rows[..3], &h, None);
        assert!(table.starts_with("MODEL"), "{table}");
    }

    /// Issue 24: a breaker open until its provider's stated reset shows that reset (local time
    /// and UTC), the reopening and the provider's words; JSON has them as fields.
    #[test]
    fn stated_resets_are_shown_with_the_providers_words() {
        let now = 1_796_153_634_000;
        let reset = 1_796_153_814_000; // 2026-12-01T19:36:54Z
        let mut h = Health::default();
        h.apply(
            &Delta::Failure {
                at: now,
                key: "zai".into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                error: "429: 1308".into(),
            },
            1.0,
        );
        h.apply(
            &Delta::Stated {
                key: "zai".into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                reset: crate::health::StatedReset {
                    at_ms: reset,
                    spread_ms: 2000,
                    words: "\"2026-12-02 03:36:54\", read as China Standard Time (UTC+8)".into(),
                },
            },
            1.0,
        );
        let m = |id: &str| ModelInfo {
            provider: "zai".into(),
            id: id.into(),
            name: None,
            base_url: None,
            reasoning: false,
            input: None,
            context_window: None,
            max_tokens: None,
        };
        let rows = statuses(&[m("glm-4.6"), m("glm-4.5")], &h, now);
        let table = status_table(&rows, &h, Some(|_| Some(-5 * 3600)));
        assert!(
            table.ends_with(
                "\nstated resets (the provider said when its limit lifts; the breaker stays \
                 open until then, plus up to 3 s):\n  provider zai: resets at 2026-12-01 \
                 14:36:54 -05:00 (2026-12-01 19:36:54 UTC), reopens in 3m02s; stated as \
                 \"2026-12-02 03:36:54\", read as China Standard Time (UTC+8)\n"
            ),
            "one line per breaker, not per model:\n{table}"
        );
        let j = status_json(&rows, &h);
        let first = &j["models"][0];
        assert_eq!(first["cooldown_remaining_ms"], 182_000);
        assert_eq!(first["reopens_at_ms"], reset + 2000);
        assert_eq!(
            first["stated_reset"],
            json!({"breaker": "provider", "key": "zai", "at_ms": reset,
                   "at": "2026-12-01T19:36:54Z", "reopens_at_ms": reset + 2000,
                   "stated_as": "\"2026-12-02 03:36:54\", read as China Standard Time (UTC+8)"})
        );
        // Once it reopened: no statement, no reopening time.
        let later = status_json(&statuses(&[m("glm-4.6")], &h, reset + 2000), &h);
        assert_eq!(later["models"][0]["stated_reset"], Value::Null);
        assert_eq!(later["models"][0]["reopens_at_ms"], Value::Null);
    }

    #[test]
    fn column_names_explain_themselves() {
        let mut h = Health::default();
        h.apply(
            &Delta::Failure {
                at: 0,
                key: "a".into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                error: "402".into(),
            },
            1.0,
        );
        let m = ModelInfo {
            provider: "a".into(),
            id: "m".into(),
            name: None,
            base_url: None,
            reasoning: false,
            input: None,
            context_window: None,
            max_tokens: None,
        };
        let table = status_table(&statuses(&[m], &h, 60_000), &h, None);
        let header = table.lines().next().unwrap();
        for name in HEADERS {
            assert!(header.contains(name), "{header}");
        }
        assert!(!header.contains("m/p/e"));
        let row = table.lines().nth(1).unwrap();
        assert!(row.contains("cooling    provider"), "{row}");
        assert!(row.contains("29m00s"), "{row}");
    }

    /// Issue 31: `--status` shows each model's pace, in the table and in JSON.
    #[test]
    fn the_pace_of_each_model_is_shown() {
        let mut h = Health::default();
        for i in 0..40u64 {
            h.apply(
                &Delta::Pace {
                    key: "a/m".into(),
                    sample: crate::pace::Sample {
                        at_ms: 1000 + i,
                        first_ms: 1200,
                        gap_ms: 300,
                        prompt_chars: 10,
                    },
                },
                1.0,
            );
        }
        let m = |id: &str| ModelInfo {
            provider: "a".into(),
            id: id.into(),
            name: None,
            base_url: None,
            reasoning: false,
            input: None,
            context_window: None,
            max_tokens: None,
        };
        let rows = statuses(&[m("m"), m("other")], &h, 2000);
        let table = status_table(&rows, &h, None);
        assert!(
            table.contains(
                "\npace (recent clean answers; watchdogs derive from it from 5 fresh answers \
                 on):\n  a/m: first response p95 1.2 s, longest gap p95 300 ms over 40 answers\n"
            ),
            "{table}"
        );
        assert!(!table.contains("a/other:"), "{table}");
        let json = status_json(&rows, &h);
        assert_eq!(
            json["models"][0]["pace"],
            serde_json::json!({"answers": 40, "weight": 40.0, "trusted": true,
                               "first_response_p95_ms": 1200, "longest_gap_p95_ms": 300})
        );
        assert_eq!(json["models"][1]["pace"], Value::Null);
    }
}
