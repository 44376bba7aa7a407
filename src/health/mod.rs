//! Breaker health: records per model, provider and endpoint, and the deltas a run produces.
//! Deltas (not snapshots) are what get persisted, so concurrent runs add up instead of
//! overwriting each other. Pure: no I/O, time passed in.

pub mod class;
pub mod cooldown;
pub mod store;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::ModelInfo;
pub use class::{FailureClass, Scope};
use cooldown::{PROBE_LEASE_MS, cooldown_ms};

/// When a provider said its limit lifts, as a breaker keeps it ([`Delta::Stated`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatedReset {
    /// The instant the provider stated (unix ms).
    pub at_ms: u64,
    /// Added to it before the breaker reopens ([`cooldown::stated_spread_ms`]): probes of many
    /// runs do not all land on the provider's reset second, nor before its clock gets there.
    pub spread_ms: u64,
    /// The words it was stated in (redacted, short), for `--status`.
    pub words: String,
}

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
    /// When the provider said the limit behind the current cooldown lifts (unix ms): the
    /// cooldown ends then, plus a spread of a few seconds ([`Delta::Stated`]). `None` while the
    /// cooldown is our own (SPEC's table). Absent from files written before it existed (and
    /// left out when `None`, so such records are written as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stated_reset: Option<u64>,
    /// The provider's words that stated it, quoted, and how they were read (redacted, short).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stated_words: Option<String>,
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

    /// The reset the provider stated for the cooldown still running at `now_ms`, if it stated
    /// one: the breaker reopens by itself then, whatever its class.
    pub fn stated_reset_at(&self, now_ms: u64) -> Option<u64> {
        self.stated_reset.filter(|_| self.cooling(now_ms))
    }

    fn fail(&mut self, at: u64, class: FailureClass, error: &str, scale: f64) {
        self.total_failures = self.total_failures.saturating_add(1);
        self.last_failure_at = Some(self.last_failure_at.map_or(at, |t| t.max(at)));
        self.last_class = Some(class.as_str().to_string());
        self.last_error = Some(error.to_string());
        let probed = self.leased(at);
        self.lease_until = None;
        // A failure while the breaker is already open comes from a request that was in flight
        // before it opened (another run, another batch worker): the same outage, so it does
        // not double the cooldown. Only a failure after the cooldown (a failed probe) does.
        if self.cooling(at) {
            return;
        }
        // Endpoint cooldowns are short (10 s first), shorter than a request may be in flight:
        // a request sent before the breaker opened can fail after its cooldown. Only a failed
        // probe (sent under the probe lease) grows the cooldown; such a late failure opens the
        // breaker again for as long as the last time.
        let late = class == FailureClass::Endpoint && self.consecutive_failures > 0 && !probed;
        if !late {
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        }
        if let Some(ms) = cooldown_ms(class, self.consecutive_failures, scale) {
            let until = at.saturating_add(ms);
            self.cooldown_until = Some(self.cooldown_until.map_or(until, |t| t.max(until)));
            // A new cooldown of our own: what was stated for the last one no longer holds.
            self.stated_reset = None;
            self.stated_words = None;
        }
    }

    /// The failure just recorded stated when its limit lifts. A quota breaker stays open until
    /// then (plus the spread) — longer or shorter than our own guess, the provider knows its
    /// window; any other class (a rate limit) at least that long. A later reset already stated
    /// for this cooldown (another run's, or a request in flight before it) is kept.
    fn stated(&mut self, class: FailureClass, reset: &StatedReset) {
        let until = reset.at_ms.saturating_add(reset.spread_ms);
        if self.stated_reset.is_some() && self.cooldown_until.is_some_and(|t| t >= until) {
            return;
        }
        let decides = match class {
            FailureClass::Quota => true,
            _ => self.cooldown_until.is_none_or(|t| t <= until),
        };
        if decides {
            self.cooldown_until = Some(until);
            self.stated_reset = Some(reset.at_ms);
            self.stated_words = Some(reset.words.clone());
        }
    }

    /// Bounds the record's times to what the rules could have written by `now_ms`: a cooldown
    /// at most the longest cap ahead ([`cooldown::MAX_COOLDOWN_MS`]) — a stated reset's at most
    /// the 8 days a statement is believed, plus its spread — and a probe lease at most
    /// [`cooldown::PROBE_LEASE_MS`]. A record written by a clock far ahead (`faketime +400d`),
    /// or forged (year 9999), then blocks a model no longer than a real failure could (issue 29).
    pub fn clamp_times(&mut self, now_ms: u64) {
        let stated_bound = now_ms.saturating_add(cooldown::MAX_STATED_AHEAD_MS);
        if self.stated_reset.is_some_and(|t| t > stated_bound) {
            self.stated_reset = None;
            self.stated_words = None;
        }
        let bound = match self.stated_reset {
            Some(_) => stated_bound.saturating_add(cooldown::STATED_SPREAD_MAX_MS),
            None => now_ms.saturating_add(cooldown::MAX_COOLDOWN_MS),
        };
        if let Some(t) = &mut self.cooldown_until {
            *t = (*t).min(bound);
        }
        if let Some(t) = &mut self.lease_until {
            *t = (*t).min(now_ms.saturating_add(cooldown::PROBE_LEASE_MS));
        }
    }

    fn succeed(&mut self, at: u64) {
        self.consecutive_failures = 0;
        self.total_successes = self.total_successes.saturating_add(1);
        self.last_success_at = Some(self.last_success_at.map_or(at, |t| t.max(at)));
        self.cooldown_until = None;
        self.lease_until = None;
        self.stated_reset = None;
        self.stated_words = None;
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
            model: model.key().into(),
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
    /// The failure just recorded on this breaker (the [`Delta::Failure`] before it) stated when
    /// its limit lifts: the breaker's cooldown follows it (see `Record::stated`).
    Stated {
        key: String,
        scope: Scope,
        class: FailureClass,
        reset: StatedReset,
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
    /// A clean answer of model `key` (`provider/id`): its pace ([`crate::pace`]).
    Pace {
        key: String,
        sample: crate::pace::Sample,
    },
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
    /// Each model's pace (`provider/id` → its recent clean answers), next to its breakers.
    /// Read leniently: a record that is not ours is dropped, never the file around it.
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "crate::pace::lenient_map"
    )]
    pub pace: BTreeMap<String, crate::pace::PaceRecord>,
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
            Delta::Stated {
                key,
                scope,
                class,
                reset,
            } => {
                if let Some(map) = self.records_mut(*scope) {
                    map.entry(key.clone()).or_default().stated(*class, reset);
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
            Delta::Pace { key, sample } => {
                if crate::pace::key_ok(key) {
                    self.pace.entry(key.clone()).or_default().add(*sample);
                    crate::pace::bound(&mut self.pace);
                }
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

    /// Every record's times bounded by what the rules could have written ([`Record::clamp_times`]),
    /// and every pace by what clean answers could have left ([`Health::clamp_pace`]).
    pub fn clamp_times(&mut self, now_ms: u64) {
        for scope in BREAKER_SCOPES {
            if let Some(map) = self.records_mut(scope) {
                map.values_mut().for_each(|r| r.clamp_times(now_ms));
            }
        }
        self.clamp_pace(now_ms);
    }

    /// Keeps at most [`MAX_RECORDS_PER_SCOPE`] records per scope. The first to go are records
    /// of keys `listed` says Pi no longer lists, then the ones idle the longest; records that
    /// block a model right now (disabled, cooling, leased) go last.
    pub fn prune(&mut self, now_ms: u64, listed: &dyn Fn(Scope, &str) -> bool) {
        self.clamp_times(now_ms);
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

    /// Every pace record bounded by what clean answers could have left by `now_ms`
    /// ([`crate::pace::PaceRecord::clamp`]); records left empty go, and at most
    /// [`crate::pace::MAX_RECORDS`] stay.
    pub fn clamp_pace(&mut self, now_ms: u64) {
        for r in self.pace.values_mut() {
            r.clamp(now_ms);
        }
        self.pace.retain(|_, r| !r.is_empty());
        crate::pace::bound(&mut self.pace);
    }

    /// The pace of `model_key` at `now_ms` for a prompt of `prompt_chars`, if it has answers.
    pub fn pace_of(
        &self,
        model_key: &str,
        now_ms: u64,
        prompt_chars: u64,
    ) -> Option<crate::pace::Summary> {
        self.pace.get(model_key)?.summary(now_ms, prompt_chars)
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
mod tests;
