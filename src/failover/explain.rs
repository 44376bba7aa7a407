//! `--explain`: what a run would do, decided exactly as the run decides it but stopped before the
//! first request — the start model, the thinking level, the watchdogs and windows, and every model
//! Pi knows, either in the order it would be tried (with why it is ranked there) or with the reason
//! it is excluded. Pure: the machine fills it in, `output` prints it.

use serde::Serialize;

use super::candidates::family;
use super::reopen::human_ms;
use crate::catalog::ModelInfo;
use crate::health::{Block, Health, Keys};
use crate::timefmt::{LocalOffset, local_and_utc};

/// The whole explanation (`--explain --json` prints it as is).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The model the run starts from (`provider/id`), as Pi reports it.
    pub start_model: String,
    /// Why the start model would be skipped before sending anything, if it would be.
    pub start_skipped: Option<String>,
    /// The thinking level that would be applied (`None`: the model's own default).
    pub thinking: Option<String>,
    pub first_response_ms: u64,
    pub stall_ms: u64,
    pub round_limit_ms: u64,
    /// Time left until `--timeout-ms`.
    pub deadline_ms: Option<u64>,
    /// Whether a run that finds every candidate cooling would wait for one to reopen.
    pub wait: bool,
    /// How the run would wait: `--max-wait`, `--prefer-primary`, a busy key's back-off.
    pub waiting: Waiting,
    /// Estimated size of the request, for the context-window check.
    pub input_tokens_estimate: u64,
    pub images: usize,
    /// The models in the order they would be tried.
    pub candidates: Vec<Ranked>,
    /// Every other model Pi lists, with the reason it is left out.
    pub excluded: Vec<Excluded>,
    /// The cooldowns a failure would open, per class ([`cooldowns`]).
    pub cooldowns: Vec<Cooldown>,
}

/// What `--explain` says about waiting (issue 32).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Waiting {
    /// `--max-wait`: the most the run would wait in all (`None`: up to the deadline).
    pub max_wait_ms: Option<u64>,
    /// `--prefer-primary`: how far ahead a primary's stated reset may lie to be waited for.
    pub prefer_primary_ms: Option<u64>,
    /// With `--prefer-primary`: what the run would do about its primary now, in a sentence.
    pub primary: Option<String>,
    /// A busy key's back-off: the first and the longest single wait, and the most in all
    /// before the provider counts as rate-limited.
    pub busy_backoff_first_ms: u64,
    pub busy_backoff_limit_ms: u64,
    pub busy_backoff_total_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ranked {
    pub model: String,
    pub reason: String,
    /// What its recent clean answers took (issue 31); `None` with none in the last week.
    pub pace: Option<Pace>,
    /// The watchdogs it would run under.
    pub watchdogs: Option<WatchdogLimits>,
    /// How long it would wait for a first response under `--timeout-ms`, when that is its
    /// share of the deadline (other candidates left after it; the first candidate only).
    pub first_response_share_ms: Option<u64>,
}

impl Ranked {
    pub fn new(model: String, reason: String) -> Ranked {
        Ranked {
            model,
            reason,
            pace: None,
            watchdogs: None,
            first_response_share_ms: None,
        }
    }
}

/// A model's pace as `--explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pace {
    pub answers: usize,
    pub trusted: bool,
    pub first_response_p95_ms: u64,
    pub longest_gap_p95_ms: u64,
    /// `first response p95 1.2 s, longest gap p95 300 ms over 40 answers`.
    pub text: String,
}

impl Pace {
    pub fn of(s: &crate::pace::Summary) -> Pace {
        Pace {
            answers: s.answers,
            trusted: s.trusted(),
            first_response_p95_ms: s.first_p95_ms,
            longest_gap_p95_ms: s.gap_p95_ms,
            text: s.describe(),
        }
    }
}

/// The watchdog limits of a candidate, and how each was derived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WatchdogLimits {
    pub first_response_ms: u64,
    pub stall_ms: u64,
    /// `4.6 s (from p95 1.2 s over 40 answers)`.
    pub first_response: String,
    pub stall: String,
}

impl WatchdogLimits {
    pub fn of(w: &crate::pace::watchdog::Watchdogs) -> WatchdogLimits {
        WatchdogLimits {
            first_response_ms: w.first_response.ms,
            stall_ms: w.stall.ms,
            first_response: w.first_response.to_string(),
            stall: w.stall.to_string(),
        }
    }
}

/// The cooldowns of one kind of failure: the first, and how they grow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cooldown {
    /// `endpoint`, `auth_quota`, `rate_limit`, `model`, `content_policy`, `unknown`.
    pub class: &'static str,
    /// The first cooldowns in a row, each after one more failed probe (scaled by
    /// `CCSWITCH_COOLDOWN_SCALE`), up to the cap.
    pub steps_ms: Vec<u64>,
    /// For people: `endpoint (5xx, resets, silence) 10s, growing by half while its probes fail
    /// to 2m00s, then doubling to 30m00s`.
    pub text: String,
}

/// The cooldown curves a run would use, `scale` applied (see `health::cooldown`).
pub fn cooldowns(scale: f64) -> Vec<Cooldown> {
    use crate::health::FailureClass as C;
    use crate::health::cooldown::{ENDPOINT_SHORT_CAP_MS, cooldown_ms};
    let steps = |class: C| -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        for n in 1..=12 {
            let Some(ms) = cooldown_ms(class, n, scale) else {
                break;
            };
            if out.last() == Some(&ms) {
                break;
            }
            out.push(ms);
        }
        out
    };
    let span = |v: &[u64]| match (v.first(), v.last()) {
        (Some(a), Some(b)) if a != b => format!("{}, doubling to {}", human_ms(*a), human_ms(*b)),
        (Some(a), _) => human_ms(*a),
        _ => "none".to_string(),
    };
    let endpoint = steps(C::Endpoint);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a scaled cooldown for display"
    )]
    let short_cap = ((ENDPOINT_SHORT_CAP_MS as f64) * scale.clamp(0.0, 1.0)).round() as u64;
    let endpoint_text = match (endpoint.first(), endpoint.last()) {
        (Some(first), Some(last)) => format!(
            "endpoint (5xx, resets, silence) {}, growing by half while its probes fail to {}, \
             then doubling to {}",
            human_ms(*first),
            human_ms(short_cap),
            human_ms(*last)
        ),
        _ => "endpoint: none".to_string(),
    };
    let auth = steps(C::Quota);
    let rate = steps(C::RateLimit);
    let model = steps(C::Model);
    let policy = steps(C::ContentPolicy);
    let unknown = steps(C::Unknown);
    vec![
        Cooldown {
            class: "endpoint",
            text: endpoint_text,
            steps_ms: endpoint,
        },
        Cooldown {
            class: "auth_quota",
            text: format!("auth and quota {} (a stated reset decides)", span(&auth)),
            steps_ms: auth,
        },
        Cooldown {
            class: "rate_limit",
            text: format!(
                "rate limit {} (when it opens a breaker; a stated delay is the least)",
                span(&rate)
            ),
            steps_ms: rate,
        },
        Cooldown {
            class: "model",
            text: format!("model {}", span(&model)),
            steps_ms: model,
        },
        Cooldown {
            class: "content_policy",
            text: format!("content policy {}", span(&policy)),
            steps_ms: policy,
        },
        Cooldown {
            class: "unknown",
            text: format!("unknown {}", span(&unknown)),
            steps_ms: unknown,
        },
    ]
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Excluded {
    pub model: String,
    /// A stable code: `outside_models`, `disabled`, `breaker_open`, `probe_leased`,
    /// `server_down`, `no_image_input`, `window_too_small`, `family_avoided`.
    pub code: &'static str,
    pub reason: String,
    /// For a breaker or lease: how long until it reopens.
    pub remaining_ms: Option<u64>,
    /// For a breaker or lease: when it comes back (unix ms).
    pub back_at_ms: Option<u64>,
    /// For a breaker open until the reset its provider stated: that reset (unix ms).
    pub stated_reset_ms: Option<u64>,
}

/// What the candidate filters look at, for a request that has not been sent yet.
pub struct RequestFacts<'a> {
    pub health: &'a Health,
    pub now_ms: u64,
    /// The models inside `--models` (all of Pi's when no scope was given).
    pub pool: &'a [ModelInfo],
    pub needs_images: bool,
    pub input_tokens: u64,
    /// Families this run avoids, with the reason.
    pub avoided_families: &'a [(String, String)],
    /// The machine's zone, for the times models come back (`None`: UTC only).
    pub local_offset: Option<LocalOffset>,
    /// Servers with an open endpoint breaker, and that breaker's key
    /// ([`super::candidates::down_servers`] of the pool).
    pub down_servers: &'a std::collections::BTreeMap<String, String>,
}

/// Why `m` would not be tried, if it would not.
pub fn why_excluded(m: &ModelInfo, req: &RequestFacts<'_>) -> Option<Excluded> {
    let key = m.key();
    let excluded = |code: &'static str, reason: String, remaining_ms: Option<u64>| {
        Some(Excluded {
            model: key.to_string(),
            code,
            reason,
            remaining_ms,
            back_at_ms: remaining_ms.map(|ms| req.now_ms.saturating_add(ms)),
            stated_reset_ms: None,
        })
    };
    let back = |left: u64| local_and_utc(req.now_ms.saturating_add(left), req.local_offset);
    if !req.pool.iter().any(|p| p.key() == key) {
        return excluded("outside_models", "outside --models".to_string(), None);
    }
    match req.health.blocked(m, req.now_ms, &[]) {
        Some(Block::Disabled) => {
            return excluded(
                "disabled",
                "disabled (pi-ccswitch-run --reactivate to use it again)".to_string(),
                None,
            );
        }
        Some(Block::Cooling(scope)) => {
            let keys = Keys::of(m);
            let record = keys
                .get(scope)
                .and_then(|k| req.health.records(scope)?.get(k));
            let left = record
                .and_then(|r| r.cooldown_until)
                .map_or(0, |t| t.saturating_sub(req.now_ms));
            let class = record
                .and_then(|r| r.last_class.clone())
                .unwrap_or_else(|| "failure".to_string());
            let stated = record.and_then(|r| r.stated_reset_at(req.now_ms));
            let said = match stated {
                Some(at) => format!(
                    " ({} stated its limit resets at {})",
                    m.provider,
                    local_and_utc(at, req.local_offset)
                ),
                None => String::new(),
            };
            let mut x = excluded(
                "breaker_open",
                format!(
                    "open {} breaker ({class}), {} left: back at {}{said}",
                    scope.as_str(),
                    human_ms(left),
                    back(left)
                ),
                Some(left),
            );
            if let Some(x) = x.as_mut() {
                x.stated_reset_ms = stated;
            }
            return x;
        }
        Some(Block::Leased) => {
            let keys = Keys::of(m);
            let left = crate::health::BREAKER_SCOPES
                .into_iter()
                .filter_map(|s| req.health.records(s)?.get(keys.get(s)?))
                .filter_map(|r| r.lease_until)
                .map(|t| t.saturating_sub(req.now_ms))
                .max()
                .unwrap_or(0);
            return excluded(
                "probe_leased",
                format!(
                    "another run holds its probe lease ({} left): back at {} at the latest",
                    human_ms(left),
                    back(left)
                ),
                Some(left),
            );
        }
        None => {}
    }
    if let Some(endpoint) = super::candidates::server(m).and_then(|u| req.down_servers.get(&u)) {
        let left = req
            .health
            .endpoints
            .get(endpoint)
            .and_then(|r| r.cooldown_until)
            .map_or(0, |t| t.saturating_sub(req.now_ms));
        return excluded(
            "server_down",
            format!(
                "its base URL is down: open endpoint breaker {endpoint}, {} left: back at {}",
                human_ms(left),
                back(left)
            ),
            Some(left),
        );
    }
    if req.needs_images && !m.accepts_images() {
        return excluded(
            "no_image_input",
            "does not accept images (the request has images)".to_string(),
            None,
        );
    }
    if let Some(window) = m.context_window
        && window < req.input_tokens
    {
        return excluded(
            "window_too_small",
            format!(
                "context window of {window} tokens is smaller than the ~{} tokens of input",
                req.input_tokens
            ),
            None,
        );
    }
    let fam = family(m);
    if let Some((_, why)) = req.avoided_families.iter().find(|(f, _)| *f == fam) {
        return excluded(
            "family_avoided",
            format!("family {fam} avoided ({why})"),
            None,
        );
    }
    None
}

/// Why `m` is ranked where it is, relative to the model the run starts from.
pub fn rank_reason(start: &ModelInfo, m: &ModelInfo, health: &Health) -> String {
    let mut parts = Vec::new();
    let same_id = m.id.rsplit('/').next().map(str::to_ascii_lowercase)
        == start.id.rsplit('/').next().map(str::to_ascii_lowercase);
    parts.push(match (m.provider == start.provider, same_id) {
        (false, true) => "the same model on another provider".to_string(),
        (false, false) => "another provider".to_string(),
        (true, _) => "same provider as the start model (tried after other providers)".to_string(),
    });
    if m.accepts_images() != start.accepts_images() {
        parts.push("different inputs".to_string());
    }
    if m.reasoning != start.reasoning {
        parts.push(if m.reasoning {
            "a reasoning model".to_string()
        } else {
            "not a reasoning model".to_string()
        });
    }
    if m.context_window_or_zero() < start.context_window_or_zero() {
        parts.push("smaller context window".to_string());
    }
    let failures: u64 = health.total_failures(m).iter().sum();
    if failures > 0 {
        parts.push(format!("{failures} past failures"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::classify::{FailureClass, Scope};
    use crate::health::{Delta, StatedReset};

    fn model(provider: &str) -> ModelInfo {
        ModelInfo {
            provider: provider.into(),
            id: "glm-4.6".into(),
            name: None,
            base_url: Some("https://open.bigmodel.cn/api/paas/v4".into()),
            reasoning: false,
            input: None,
            context_window: None,
            max_tokens: None,
        }
    }

    /// Issue 24: `--explain` says when each excluded model comes back, and that the provider
    /// stated it when it did. 2026-12-01T19:36:54Z is the reset of the 1308 body.
    #[test]
    fn excluded_models_say_when_they_come_back() {
        let now = 1_796_153_634_000; // 3 minutes before the reset
        let reset = 1_796_153_814_000;
        let mut h = Health::default();
        for p in ["zai", "kimi"] {
            h.apply(
                &Delta::Failure {
                    at: now,
                    key: p.into(),
                    scope: Scope::Provider,
                    class: FailureClass::Quota,
                    error: "429".into(),
                },
                1.0,
            );
        }
        h.apply(
            &Delta::Stated {
                key: "zai".into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                reset: StatedReset {
                    at_ms: reset,
                    spread_ms: 2000,
                    words: "2026-12-02 03:36:54 (China Standard Time, UTC+8)".into(),
                },
            },
            1.0,
        );
        let pool = [model("zai"), model("kimi")];
        let req = RequestFacts {
            health: &h,
            now_ms: now,
            pool: &pool,
            needs_images: false,
            input_tokens: 10,
            avoided_families: &[],
            local_offset: Some(|_| Some(-5 * 3600)),
            down_servers: &std::collections::BTreeMap::new(),
        };
        let zai = why_excluded(&pool[0], &req).expect("excluded");
        assert_eq!(zai.code, "breaker_open");
        assert_eq!(zai.remaining_ms, Some(182_000));
        assert_eq!(zai.back_at_ms, Some(reset + 2000));
        assert_eq!(zai.stated_reset_ms, Some(reset));
        assert_eq!(
            zai.reason,
            "open provider breaker (quota), 3m02s left: back at 2026-12-01 14:36:56 -05:00 \
             (2026-12-01 19:36:56 UTC) (zai stated its limit resets at 2026-12-01 14:36:54 \
             -05:00 (2026-12-01 19:36:54 UTC))"
        );
        let kimi = why_excluded(&pool[1], &req).expect("excluded");
        assert_eq!(kimi.stated_reset_ms, None);
        assert_eq!(kimi.back_at_ms, Some(now + 30 * 60_000));
        assert_eq!(
            kimi.reason,
            "open provider breaker (quota), 30m00s left: back at 2026-12-01 15:03:54 -05:00 \
             (2026-12-01 20:03:54 UTC)"
        );
    }
}

#[cfg(test)]
mod server_tests {
    use super::*;
    use crate::failover::classify::{FailureClass, Scope};
    use crate::health::Delta;

    /// Issue 24 item 7: two keys of Z.AI as two provider entries at one base URL. The first
    /// one's endpoint breaker is open: the second is excluded with it, and says why.
    #[test]
    fn a_down_server_excludes_every_provider_entry_at_it() {
        let at = |p: &str| ModelInfo {
            provider: p.into(),
            id: "glm-4.6".into(),
            name: None,
            base_url: Some("https://api.z.ai/api/coding/paas/v4".into()),
            reasoning: false,
            input: None,
            context_window: None,
            max_tokens: None,
        };
        let pool = [at("zai"), at("zai-2")];
        let mut h = Health::default();
        h.apply(
            &Delta::Failure {
                at: 0,
                key: Keys::of(&pool[0]).endpoint,
                scope: Scope::Endpoint,
                class: FailureClass::Endpoint,
                error: "503".into(),
            },
            1.0,
        );
        let down = super::super::candidates::down_servers(&pool, &h, 1000);
        let req = RequestFacts {
            health: &h,
            now_ms: 1000,
            pool: &pool,
            needs_images: false,
            input_tokens: 10,
            avoided_families: &[],
            local_offset: None,
            down_servers: &down,
        };
        assert_eq!(
            why_excluded(&pool[0], &req).map(|x| x.code),
            Some("breaker_open")
        );
        let second = why_excluded(&pool[1], &req).expect("excluded");
        assert_eq!(second.code, "server_down");
        assert_eq!(
            second.reason,
            "its base URL is down: open endpoint breaker zai@https://api.z.ai/api/coding/paas/v4, \
             9s left: back at 1970-01-01 00:00:10 UTC"
        );
    }
}
