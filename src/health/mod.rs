//! Breaker health: records per model, provider and endpoint, and the deltas a run produces.
//! Deltas (not snapshots) are what get persisted, so concurrent runs add up instead of
//! overwriting each other. Pure: no I/O, time passed in.

pub mod class;
pub mod cooldown;
pub mod service;
pub mod store;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::ModelInfo;
pub use class::{FailureClass, Scope};
use cooldown::{PROBE_LEASE_MS, cooldown_ms};

/// Most recent switches kept in the shared state.
pub const SWITCH_LOG_LEN: usize = 20;
/// Most breaker records one store keeps per scope (models, providers, endpoints): bounds the
/// state whatever happens (a gateway listing thousands of models, years of history).
pub const MAX_RECORDS_PER_SCOPE: usize = 1000;

/// One breaker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    pub consecutive_failures: u32,
    pub total_failures: u64,
    pub total_successes: u64,
    pub last_failure_at: Option<u64>,
    pub last_success_at: Option<u64>,
    pub cooldown_until: Option<u64>,
    pub lease_until: Option<u64>,
    pub last_class: Option<String>,
    /// Redacted and length-capped before it gets here.
    pub last_error: Option<String>,
    pub disabled: bool,
}

impl Record {
    pub fn cooling(&self, now_ms: u64) -> bool {
        self.cooldown_until.is_some_and(|t| t > now_ms)
    }

    /// Cooldown over but no success since the last failure: the next request is a probe.
    pub fn half_open(&self, now_ms: u64) -> bool {
        self.consecutive_failures > 0 && self.cooldown_until.is_some_and(|t| t <= now_ms)
    }

    pub fn leased(&self, now_ms: u64) -> bool {
        self.lease_until.is_some_and(|t| t > now_ms)
    }

    fn fail(&mut self, at: u64, class: FailureClass, error: &str, scale: f64) {
        self.total_failures = self.total_failures.saturating_add(1);
        self.last_failure_at = Some(self.last_failure_at.map_or(at, |t| t.max(at)));
        self.last_class = Some(class.as_str().to_string());
        self.last_error = Some(error.to_string());
        self.lease_until = None;
        // A failure while the breaker is already open comes from a request that was in flight
        // before it opened (another run, another batch worker): the same outage, so it does
        // not double the cooldown. Only a failure after the cooldown (a failed probe) does.
        if self.cooling(at) {
            return;
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        if let Some(ms) = cooldown_ms(class, self.consecutive_failures, scale) {
            let until = at.saturating_add(ms);
            self.cooldown_until = Some(self.cooldown_until.map_or(until, |t| t.max(until)));
        }
    }

    fn succeed(&mut self, at: u64) {
        self.consecutive_failures = 0;
        self.total_successes = self.total_successes.saturating_add(1);
        self.last_success_at = Some(self.last_success_at.map_or(at, |t| t.max(at)));
        self.cooldown_until = None;
        self.lease_until = None;
    }
}

/// The three breaker keys of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub model: String,
    pub provider: String,
    pub endpoint: String,
}

/// The breakers of a model, in the order they are checked.
pub const BREAKER_SCOPES: [Scope; 3] = [Scope::Provider, Scope::Endpoint, Scope::Model];

impl Keys {
    /// The key of the model's breaker in `scope` (`None` for [`Scope::Round`]).
    pub fn get(&self, scope: Scope) -> Option<&str> {
        match scope {
            Scope::Provider => Some(&self.provider),
            Scope::Endpoint => Some(&self.endpoint),
            Scope::Model => Some(&self.model),
            Scope::Round => None,
        }
    }

    pub fn of(model: &ModelInfo) -> Keys {
        Keys {
            model: model.key(),
            provider: model.provider.clone(),
            endpoint: endpoint_key(&model.provider, model.base_url.as_deref()),
        }
    }
}

/// `provider@scheme://host[:port]/path` with credentials, query and fragment dropped and case
/// and trailing slashes normalised. The same URL under two providers is two endpoints: a
/// gateway that resells another vendor fails independently of it.
pub fn endpoint_key(provider: &str, base_url: Option<&str>) -> String {
    let Some(url) = base_url.map(str::trim).filter(|u| !u.is_empty()) else {
        return format!("{provider}@provider:{provider}");
    };
    format!("{provider}@{}", normalise_base_url(url))
}

pub fn normalise_base_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => (String::new(), url),
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority
        .rsplit('@')
        .next()
        .unwrap_or(authority)
        .to_ascii_lowercase();
    let host = match scheme.as_str() {
        "http" => host.strip_suffix(":80").map(str::to_string).unwrap_or(host),
        "https" => host
            .strip_suffix(":443")
            .map(str::to_string)
            .unwrap_or(host),
        _ => host,
    };
    let path = path.trim_end_matches('/');
    let out = if scheme.is_empty() {
        format!("{host}{path}")
    } else {
        format!("{scheme}://{host}{path}")
    };
    out.chars().take(256).collect()
}

/// The breaker a half-open probe lease is taken on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeTarget {
    pub scope: Scope,
    /// The breaker's key in that scope (a provider name, an endpoint key, `provider/id`).
    pub key: String,
}

impl ProbeTarget {
    pub fn new(scope: Scope, key: &str) -> ProbeTarget {
        ProbeTarget {
            scope,
            key: key.to_string(),
        }
    }
}

impl std::fmt::Display for ProbeTarget {
    /// `provider:NAME`, `endpoint:KEY` or `model:KEY`, for messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.scope.as_str(), self.key)
    }
}

/// One switch, for the short shared log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchEntry {
    pub at: u64,
    pub from: String,
    pub to: String,
    pub reason: String,
}

/// A change one run makes. Applied to whatever is on disk at write time.
#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Failure {
        at: u64,
        /// The breaker key that failed (model, provider or endpoint key per `scope`).
        key: String,
        scope: Scope,
        class: FailureClass,
        error: String,
    },
    Success {
        at: u64,
        keys: Keys,
    },
    Switch(SwitchEntry),
    /// Probe lease taken on a breaker whose cooldown has expired.
    Lease {
        at: u64,
        target: ProbeTarget,
    },
    /// The holder gives its probe lease back: the probe ended in a way that neither closed nor
    /// re-opened that breaker (it failed on another scope, overflowed the context, was aborted).
    Release {
        target: ProbeTarget,
    },
    /// A run started on another model than its own because its start model was known to be
    /// down: counted (`--status` says how many), not logged (a batch would log every job).
    SkippedStart,
}

/// Every breaker the machine knows about.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Health {
    pub models: BTreeMap<String, Record>,
    pub providers: BTreeMap<String, Record>,
    pub endpoints: BTreeMap<String, Record>,
    pub switches: u64,
    pub switch_log: Vec<SwitchEntry>,
    /// Runs that started elsewhere because their start model was down ([`Delta::SkippedStart`]).
    pub skipped_starts: u64,
}

/// Why a model may not be used right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    Disabled,
    Cooling(Scope),
    /// Another process holds the probe lease of this provider.
    Leased,
}

impl Health {
    /// Applies one delta. `cooldown_scale` (1.0 normally) shrinks cooldowns for tests.
    pub fn apply(&mut self, delta: &Delta, cooldown_scale: f64) {
        match delta {
            Delta::Failure {
                at,
                key,
                scope,
                class,
                error,
            } => {
                if let Some(map) = self.records_mut(*scope) {
                    map.entry(key.clone())
                        .or_default()
                        .fail(*at, *class, error, cooldown_scale);
                }
            }
            Delta::Success { at, keys } => {
                self.models
                    .entry(keys.model.clone())
                    .or_default()
                    .succeed(*at);
                // Only touch provider/endpoint records that exist: a success says nothing new
                // about a breaker that never tripped, and keeps the state file small.
                if let Some(r) = self.providers.get_mut(&keys.provider) {
                    r.succeed(*at);
                }
                if let Some(r) = self.endpoints.get_mut(&keys.endpoint) {
                    r.succeed(*at);
                }
            }
            Delta::Switch(entry) => {
                self.switches = self.switches.saturating_add(1);
                self.switch_log.push(entry.clone());
                self.switch_log.sort_by_key(|e| e.at);
                let excess = self.switch_log.len().saturating_sub(SWITCH_LOG_LEN);
                self.switch_log.drain(..excess);
            }
            Delta::Lease { at, target } => {
                if let Some(map) = self.records_mut(target.scope) {
                    let r = map.entry(target.key.clone()).or_default();
                    r.lease_until = Some(at.saturating_add(PROBE_LEASE_MS));
                }
            }
            Delta::SkippedStart => {
                self.skipped_starts = self.skipped_starts.saturating_add(1);
            }
            Delta::Release { target } => {
                if let Some(r) = self
                    .records_mut(target.scope)
                    .and_then(|m| m.get_mut(&target.key))
                {
                    r.lease_until = None;
                }
            }
        }
    }

    /// The records of one scope (`None` for [`Scope::Round`]).
    pub fn records(&self, scope: Scope) -> Option<&BTreeMap<String, Record>> {
        match scope {
            Scope::Provider => Some(&self.providers),
            Scope::Endpoint => Some(&self.endpoints),
            Scope::Model => Some(&self.models),
            Scope::Round => None,
        }
    }

    pub fn records_mut(&mut self, scope: Scope) -> Option<&mut BTreeMap<String, Record>> {
        match scope {
            Scope::Provider => Some(&mut self.providers),
            Scope::Endpoint => Some(&mut self.endpoints),
            Scope::Model => Some(&mut self.models),
            Scope::Round => None,
        }
    }

    /// The record a probe target names, if it exists.
    pub fn target_record(&self, target: &ProbeTarget) -> Option<&Record> {
        self.records(target.scope)?.get(&target.key)
    }

    /// Why `model` cannot be used at `now_ms`, if it cannot. `own_leases` are the probe
    /// targets this process holds (its own lease does not block it).
    pub fn blocked(
        &self,
        model: &ModelInfo,
        now_ms: u64,
        own_leases: &[ProbeTarget],
    ) -> Option<Block> {
        let keys = Keys::of(model);
        if self.models.get(&keys.model).is_some_and(|r| r.disabled) {
            return Some(Block::Disabled);
        }
        let records: Vec<(Scope, &str, Option<&Record>)> = BREAKER_SCOPES
            .into_iter()
            .filter_map(|scope| {
                let key = keys.get(scope)?;
                Some((scope, key, self.records(scope)?.get(key)))
            })
            .collect();
        for (scope, _, rec) in &records {
            if rec.is_some_and(|r| r.cooling(now_ms)) {
                return Some(Block::Cooling(*scope));
            }
        }
        for (scope, key, rec) in &records {
            if rec.is_some_and(|r| r.leased(now_ms))
                && !own_leases.contains(&ProbeTarget::new(*scope, key))
            {
                return Some(Block::Leased);
            }
        }
        None
    }

    /// The next breaker of `model` whose cooldown has expired without a success since (so the
    /// next request is a probe) and whose lease this process does not hold yet.
    pub fn needs_probe(
        &self,
        model: &ModelInfo,
        now_ms: u64,
        own_leases: &[ProbeTarget],
    ) -> Option<ProbeTarget> {
        let keys = Keys::of(model);
        BREAKER_SCOPES
            .into_iter()
            .filter_map(|scope| {
                let key = keys.get(scope)?;
                let half_open = self.records(scope)?.get(key)?.half_open(now_ms);
                half_open.then(|| ProbeTarget::new(scope, key))
            })
            .find(|t| !own_leases.contains(t))
    }

    /// Keeps at most [`MAX_RECORDS_PER_SCOPE`] records per scope. The first to go are records
    /// of keys `listed` says Pi no longer lists, then the ones idle the longest; records that
    /// block a model right now (disabled, cooling, leased) go last.
    pub fn prune(&mut self, now_ms: u64, listed: &dyn Fn(Scope, &str) -> bool) {
        for scope in BREAKER_SCOPES {
            let Some(map) = self.records_mut(scope) else {
                continue;
            };
            let excess = map.len().saturating_sub(MAX_RECORDS_PER_SCOPE);
            if excess == 0 {
                continue;
            }
            let mut order: Vec<(bool, bool, u64, String)> = map
                .iter()
                .map(|(k, r)| {
                    let blocking = r.disabled || r.cooling(now_ms) || r.leased(now_ms);
                    let seen = r.last_failure_at.max(r.last_success_at).unwrap_or(0);
                    (blocking, listed(scope, k), seen, k.clone())
                })
                .collect();
            order.sort();
            for (_, _, _, key) in order.into_iter().take(excess) {
                map.remove(&key);
            }
        }
    }

    /// Sum of total failures over the model's three records (ranking uses it).
    pub fn total_failures(&self, model: &ModelInfo) -> [u64; 3] {
        let keys = Keys::of(model);
        [Scope::Model, Scope::Provider, Scope::Endpoint].map(|scope| {
            keys.get(scope)
                .and_then(|k| self.records(scope)?.get(k))
                .map_or(0, |r| r.total_failures)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(provider: &str, id: &str, url: &str) -> ModelInfo {
        ModelInfo {
            provider: provider.into(),
            id: id.into(),
            name: None,
            base_url: Some(url.into()),
            reasoning: false,
            input: Some(vec!["text".into()]),
            context_window: Some(128_000),
        }
    }

    #[test]
    fn base_urls_normalise() {
        assert_eq!(
            normalise_base_url("HTTPS://user:pw@API.Example.com:443/v1/?key=sk-1#x"),
            "https://api.example.com/v1"
        );
        assert_eq!(
            normalise_base_url("http://127.0.0.1:8080/a/v1/"),
            "http://127.0.0.1:8080/a/v1"
        );
        assert_eq!(endpoint_key("p", None), "p@provider:p");
        assert_ne!(
            endpoint_key("a", Some("http://h/v1")),
            endpoint_key("b", Some("http://h/v1")),
            "same URL under two providers is two endpoints"
        );
    }

    #[test]
    fn provider_failure_blocks_every_model_of_the_provider_until_cooldown_ends() {
        let a1 = model("a", "m1", "http://h/a");
        let a2 = model("a", "m2", "http://h/a");
        let b1 = model("b", "m1", "http://h/b");
        let mut h = Health::default();
        h.apply(
            &Delta::Failure {
                at: 1000,
                key: "a".into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                error: "402".into(),
            },
            1.0,
        );
        assert_eq!(
            h.blocked(&a1, 1001, &[]),
            Some(Block::Cooling(Scope::Provider))
        );
        assert_eq!(
            h.blocked(&a2, 1001, &[]),
            Some(Block::Cooling(Scope::Provider))
        );
        assert_eq!(h.blocked(&b1, 1001, &[]), None);
        let after = 1000 + 30 * 60_000;
        assert_eq!(h.blocked(&a1, after, &[]), None);
        assert_eq!(
            h.needs_probe(&a1, after, &[])
                .map(|t| t.to_string())
                .as_deref(),
            Some("provider:a")
        );
        h.apply(
            &Delta::Lease {
                at: after,
                target: ProbeTarget::new(Scope::Provider, "a"),
            },
            1.0,
        );
        assert_eq!(h.blocked(&a1, after + 1, &[]), Some(Block::Leased));
        assert_eq!(
            h.blocked(&a1, after + 1, &[ProbeTarget::new(Scope::Provider, "a")]),
            None
        );
        h.apply(
            &Delta::Success {
                at: after + 2,
                keys: Keys::of(&a1),
            },
            1.0,
        );
        assert_eq!(h.needs_probe(&a1, after + 3, &[]), None);
        assert_eq!(h.blocked(&a2, after + 3, &[]), None);
        assert_eq!(h.providers["a"].total_failures, 1);
    }

    #[test]
    fn consecutive_failures_double_the_cooldown() {
        let mut h = Health::default();
        let fail = |h: &mut Health, at| {
            h.apply(
                &Delta::Failure {
                    at,
                    key: "e".into(),
                    scope: Scope::Endpoint,
                    class: FailureClass::Endpoint,
                    error: String::new(),
                },
                1.0,
            )
        };
        fail(&mut h, 0);
        assert_eq!(h.endpoints["e"].cooldown_until, Some(120_000));
        fail(&mut h, 200_000);
        assert_eq!(h.endpoints["e"].cooldown_until, Some(200_000 + 240_000));
    }

    #[test]
    fn concurrent_failures_of_one_outage_do_not_compound() {
        let mut h = Health::default();
        for at in [0, 10, 20, 30] {
            h.apply(
                &Delta::Failure {
                    at,
                    key: "p".into(),
                    scope: Scope::Provider,
                    class: FailureClass::Quota,
                    error: String::new(),
                },
                1.0,
            );
        }
        let r = &h.providers["p"];
        assert_eq!(r.total_failures, 4, "every failure is counted");
        assert_eq!(r.consecutive_failures, 1);
        assert_eq!(
            r.cooldown_until,
            Some(30 * 60_000),
            "one outage, one base cooldown"
        );
    }

    #[test]
    fn endpoint_and_model_breakers_are_probed_one_at_a_time_too() {
        let m = model("a", "m1", "http://h/a");
        let mut h = Health::default();
        h.apply(
            &Delta::Failure {
                at: 0,
                key: endpoint_key("a", Some("http://h/a")),
                scope: Scope::Endpoint,
                class: FailureClass::Endpoint,
                error: String::new(),
            },
            1.0,
        );
        let after = 2 * 60_000;
        let target = h.needs_probe(&m, after, &[]).expect("half-open endpoint");
        assert_eq!(target.to_string(), "endpoint:a@http://h/a");
        h.apply(
            &Delta::Lease {
                at: after,
                target: target.clone(),
            },
            1.0,
        );
        assert_eq!(h.blocked(&m, after + 1, &[]), Some(Block::Leased));
        assert_eq!(
            h.blocked(&m, after + 1, std::slice::from_ref(&target)),
            None
        );
        assert_eq!(
            h.needs_probe(&m, after + 1, std::slice::from_ref(&target)),
            None
        );
    }

    #[test]
    fn switch_log_keeps_the_newest() {
        let mut h = Health::default();
        for at in 0..30 {
            h.apply(
                &Delta::Switch(SwitchEntry {
                    at,
                    from: "a".into(),
                    to: "b".into(),
                    reason: "quota".into(),
                }),
                1.0,
            );
        }
        assert_eq!(h.switches, 30);
        assert_eq!(h.switch_log.len(), SWITCH_LOG_LEN);
        assert_eq!(h.switch_log.first().map(|e| e.at), Some(10));
        assert_eq!(h.switch_log.last().map(|e| e.at), Some(29));
    }

    #[test]
    fn pruning_keeps_what_blocks_and_drops_unlisted_idle_records_first() {
        let mut h = Health::default();
        for i in 0..(MAX_RECORDS_PER_SCOPE as u64 + 10) {
            h.models.insert(
                format!("p/m{i}"),
                Record {
                    last_failure_at: Some(i),
                    ..Record::default()
                },
            );
        }
        // The oldest record is disabled and another unlisted: one stays, one goes first.
        h.models.get_mut("p/m0").unwrap().disabled = true;
        h.prune(0, &|_, key| key != "p/m500");
        assert_eq!(h.models.len(), MAX_RECORDS_PER_SCOPE);
        assert!(h.models.contains_key("p/m0"), "disabled records stay");
        assert!(
            !h.models.contains_key("p/m500"),
            "unlisted records go first"
        );
        assert!(!h.models.contains_key("p/m1") && h.models.contains_key("p/m10"));
    }
}
