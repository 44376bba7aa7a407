//! When blocked candidates become usable again, and whether that is worth waiting for: the
//! batch wait for a reopening breaker and the retry hint of an exhausted run both ask this.
//! Pure: health and wall-clock time come in.
//!
//! A model is usable again when every breaker of it (model, provider, endpoint) has cooled down
//! and no other process holds its probe lease. Waiting (or retrying later) can help only when the
//! breakers in the way are of a class that heals by itself: a rate limit, an outage of the
//! endpoint, an unexplained failure, or another process's probe — or when the provider stated
//! when its limit lifts (a quota window's reset): that breaker reopens then, whatever its class.
//! An auth failure or an unstated quota needs a new key or a top-up, a content-policy refusal or
//! an unknown model needs a different request: their cooldowns end, but the next request would
//! fail the same way.

use crate::catalog::ModelInfo;
use crate::failover::classify::{FailureClass, Scope};
use crate::health::{BREAKER_SCOPES, Health, Keys, ProbeTarget};

/// How one model stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Availability {
    /// Nothing blocks it.
    Now,
    /// Blocked until `at_ms` (wall clock) by `what`.
    Later {
        at_ms: u64,
        /// The blockers heal by themselves (see the module doc).
        transient: bool,
        what: Blocker,
    },
    /// Disabled by the user: only `--reactivate` brings it back.
    Disabled,
}

/// The breaker that keeps a model blocked longest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker {
    pub scope: Scope,
    /// The breaker's key (`zai`, `zai/glm-4.6`, an endpoint key).
    pub key: String,
    /// The class of its last failure; `None` for a probe lease held elsewhere.
    pub class: Option<FailureClass>,
    /// The reset the provider stated for this cooldown (unix ms), if it stated one.
    pub stated_at: Option<u64>,
}

impl Blocker {
    /// `provider zai (rate_limit)`, `model zai/glm-4.6 (quota)`, `endpoint … (probe under way)`.
    pub fn describe(&self) -> String {
        let why = self
            .class
            .map_or("another run is probing it", FailureClass::as_str);
        format!("{} {} ({why})", self.scope.as_str(), self.key)
    }
}

/// Classes whose breakers heal by themselves.
pub fn heals_by_itself(class: FailureClass) -> bool {
    matches!(
        class,
        FailureClass::RateLimit | FailureClass::Endpoint | FailureClass::Unknown
    )
}

/// How `model` stands at `now_ms`. `own_leases` are the probe targets this process holds.
pub fn availability(
    model: &ModelInfo,
    health: &Health,
    now_ms: u64,
    own_leases: &[ProbeTarget],
) -> Availability {
    let keys = Keys::of(model);
    if health.models.get(&keys.model).is_some_and(|r| r.disabled) {
        return Availability::Disabled;
    }
    let mut latest: Option<(u64, Blocker)> = None;
    let mut transient = true;
    for scope in BREAKER_SCOPES {
        let Some(key) = keys.get(scope) else { continue };
        let Some(record) = health.records(scope).and_then(|m| m.get(key)) else {
            continue;
        };
        let target = crate::health::ProbeTarget::new(scope, key);
        let mut until = None;
        let mut class = None;
        let stated_at = record.stated_reset_at(now_ms);
        if record.cooling(now_ms) {
            until = record.cooldown_until;
            class = Some(
                record
                    .last_class
                    .as_deref()
                    .and_then(FailureClass::parse)
                    .unwrap_or(FailureClass::Unknown),
            );
        } else if record.leased(now_ms) && !own_leases.contains(&target) {
            until = record.lease_until;
        }
        let Some(until) = until else { continue };
        if let Some(c) = class
            && !heals_by_itself(c)
            && stated_at.is_none()
        {
            transient = false;
        }
        if latest.as_ref().is_none_or(|(t, _)| until > *t) {
            latest = Some((
                until,
                Blocker {
                    scope,
                    key: key.to_string(),
                    class,
                    stated_at,
                },
            ));
        }
    }
    match latest {
        None => Availability::Now,
        Some((at_ms, what)) => Availability::Later {
            at_ms,
            transient,
            what,
        },
    }
}

/// The model that becomes usable first among `models` and when (wall ms), counting only the
/// blockers that heal by themselves; `None` when none of them will.
pub fn earliest_transient<'a>(
    models: impl IntoIterator<Item = &'a ModelInfo>,
    health: &Health,
    now_ms: u64,
    own_leases: &[ProbeTarget],
) -> Option<(u64, &'a ModelInfo, Option<Blocker>)> {
    let mut best: Option<(u64, &ModelInfo, Option<Blocker>)> = None;
    for m in models {
        let (at, what) = match availability(m, health, now_ms, own_leases) {
            Availability::Now => (now_ms, None),
            Availability::Later {
                at_ms,
                transient: true,
                what,
            } => (at_ms, Some(what)),
            Availability::Later { .. } | Availability::Disabled => continue,
        };
        if best.as_ref().is_none_or(|(t, _, _)| at < *t) {
            best = Some((at, m, what));
        }
    }
    best
}

/// What an exhausted run tells a scheduler: is trying again later worthwhile, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryHint {
    pub could_help: bool,
    /// From now until the earliest candidate is usable again (0: at once).
    pub retry_after_ms: Option<u64>,
    /// One line for humans.
    pub reason: String,
}

/// Humane durations for stderr: `850 ms`, `42s`, `4m43s`, `2h05m`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let s = ms.div_ceil(1000);
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Delta, Record};

    fn model(provider: &str, id: &str) -> ModelInfo {
        ModelInfo {
            provider: provider.into(),
            id: id.into(),
            name: None,
            base_url: Some(format!("http://h/{provider}")),
            reasoning: false,
            input: None,
            context_window: None,
            max_tokens: None,
        }
    }

    fn fail(h: &mut Health, at: u64, key: &str, scope: Scope, class: FailureClass) {
        h.apply(
            &Delta::Failure {
                at,
                key: key.into(),
                scope,
                class,
                error: String::new(),
            },
            1.0,
        );
    }

    #[test]
    fn the_longest_blocker_decides_and_only_self_healing_classes_are_transient() {
        let a = model("a", "m");
        let mut h = Health::default();
        assert_eq!(availability(&a, &h, 0, &[]), Availability::Now);
        fail(&mut h, 0, "a", Scope::Provider, FailureClass::RateLimit);
        assert_eq!(
            availability(&a, &h, 1000, &[]),
            Availability::Later {
                at_ms: 300_000,
                transient: true,
                what: Blocker {
                    scope: Scope::Provider,
                    key: "a".into(),
                    class: Some(FailureClass::RateLimit),
                    stated_at: None,
                }
            }
        );
        fail(&mut h, 0, "a/m", Scope::Model, FailureClass::Quota);
        let Availability::Later {
            at_ms, transient, ..
        } = availability(&a, &h, 1000, &[])
        else {
            panic!("blocked")
        };
        assert_eq!((at_ms, transient), (30 * 60_000, false));
        h.models.insert(
            "a/m".into(),
            Record {
                disabled: true,
                ..Record::default()
            },
        );
        assert_eq!(availability(&a, &h, 1000, &[]), Availability::Disabled);
    }

    /// Issue 24: a quota breaker whose reset was stated heals by itself at that time.
    #[test]
    fn a_stated_quota_reset_is_transient() {
        let a = model("a", "m");
        let mut h = Health::default();
        fail(&mut h, 0, "a", Scope::Provider, FailureClass::Quota);
        h.apply(
            &Delta::Stated {
                key: "a".into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                reset: crate::health::StatedReset {
                    at_ms: 180_000,
                    spread_ms: 500,
                    words: "reset at …".into(),
                },
            },
            1.0,
        );
        assert_eq!(
            availability(&a, &h, 1000, &[]),
            Availability::Later {
                at_ms: 180_500,
                transient: true,
                what: Blocker {
                    scope: Scope::Provider,
                    key: "a".into(),
                    class: Some(FailureClass::Quota),
                    stated_at: Some(180_000),
                }
            }
        );
        let (at, _, _) = earliest_transient([&a], &h, 1000, &[]).expect("it heals");
        assert_eq!(at, 180_500);
        // An auth breaker beside it still does not heal by itself.
        fail(&mut h, 0, "a/m", Scope::Model, FailureClass::Auth);
        assert!(earliest_transient([&a], &h, 1000, &[]).is_none());
    }

    #[test]
    fn earliest_transient_skips_what_will_not_heal() {
        let (a, b, c) = (model("a", "m"), model("b", "m"), model("c", "m"));
        let mut h = Health::default();
        fail(&mut h, 0, "a", Scope::Provider, FailureClass::Auth);
        fail(&mut h, 0, "b", Scope::Provider, FailureClass::RateLimit);
        fail(
            &mut h,
            60_000,
            "c",
            Scope::Provider,
            FailureClass::RateLimit,
        );
        let (at, m, what) = earliest_transient([&a, &b, &c], &h, 1000, &[]).unwrap();
        assert_eq!((at, m.key().as_str()), (300_000, "b/m"));
        assert_eq!(what.unwrap().describe(), "provider b (rate_limit)");
        assert!(earliest_transient([&a], &h, 1000, &[]).is_none());
        assert_eq!(human_ms(283_000), "4m43s");
        assert_eq!(human_ms(999), "999 ms");
        assert_eq!(human_ms(7_500_000), "2h05m");
    }
}
