//! Random histories: the Redis store agrees with applying the same deltas directly.

use super::*;

/// One step of a random history: a commit of some deltas, or a probe claim.
#[derive(Debug, Clone)]
enum Step {
    Commit(Vec<Delta>),
    Claim(String),
}

fn step_strategy() -> impl proptest::strategy::Strategy<Value = (u64, Step)> {
    use proptest::prelude::*;
    let provider = prop::sample::select(vec!["p", "q"]);
    let model = prop::sample::select(vec!["p/a", "p/b", "q/a"]);
    let class = prop::sample::select(vec![
        FailureClass::Quota,
        FailureClass::RateLimit,
        FailureClass::Endpoint,
        FailureClass::Model,
        FailureClass::ContextOverflow,
    ]);
    let delta = prop_oneof![
        (provider.clone(), class.clone()).prop_map(|(p, c)| (p.to_string(), Scope::Provider, c)),
        (model.clone(), class.clone()).prop_map(|(m, c)| (m.to_string(), Scope::Model, c)),
        (provider.clone(), class.clone()).prop_map(|(p, c)| (format!("{p}@h"), Scope::Endpoint, c)),
    ]
    .prop_map(|(key, scope, class)| (0u8, key, scope, class));
    let success = model
        .clone()
        .prop_map(|m| (1u8, m.to_string(), Scope::Model, FailureClass::Unknown));
    let switch = Just((2u8, String::new(), Scope::Round, FailureClass::Unknown));
    let skipped = Just((3u8, String::new(), Scope::Round, FailureClass::Unknown));
    let stated = (provider.clone(), class.clone())
        .prop_map(|(p, c)| (4u8, p.to_string(), Scope::Provider, c));
    // A clean answer's pace: its first-response time (the rest set when stamped).
    let paced = (model.clone(), 1u64..5000).prop_map(|(m, first)| {
        (
            5u8,
            format!("{m}#{first}"),
            Scope::Model,
            FailureClass::Unknown,
        )
    });
    let one = prop_oneof![
        4 => delta, 2 => success, 1 => switch, 1 => skipped, 2 => stated, 2 => paced
    ];
    let target = prop_oneof![
        provider.prop_map(|p| format!("provider:{p}")),
        model.prop_map(|m| format!("model:{m}")),
        Just("endpoint:p@h".to_string()),
    ];
    let step = prop_oneof![
        3 => prop::collection::vec(one, 1..4).prop_map(|ds| Step::Commit(
            ds.into_iter()
                .map(|(kind, key, scope, class)| match kind {
                    0 => Delta::Failure { at: 0, key, scope, class, error: "e".into() },
                    1 => {
                        let (provider, _) = key.split_once('/').expect("provider/model");
                        Delta::Success {
                            at: 0,
                            keys: Keys {
                                model: key.clone(),
                                provider: provider.to_string(),
                                endpoint: format!("{provider}@h"),
                            },
                        }
                    }
                    2 => Delta::Switch(SwitchEntry {
                        at: 0,
                        from: "a".into(),
                        to: "b".into(),
                        reason: "r".into(),
                    }),
                    // A reset stated a little ahead of the step's time (set when stamped).
                    4 => Delta::Stated {
                        key,
                        scope,
                        class,
                        reset: StatedReset { at_ms: 0, spread_ms: 7, words: "w".into() },
                    },
                    5 => {
                        let (model, first) = key.split_once('#').expect("model#first");
                        Delta::Pace {
                            key: model.to_string(),
                            sample: pi_ccswitch_run::pace::Sample {
                                at_ms: 0,
                                first_ms: first.parse().expect("number"),
                                gap_ms: 7,
                                prompt_chars: 100,
                            },
                        }
                    }
                    _ => Delta::SkippedStart,
                })
                .collect()
        )),
        1 => target.prop_map(Step::Claim),
    ];
    (0u64..3_000, step)
}

/// Leases compared as "held now or not": the Redis TTL reads back a tick lower, and an expired
/// lease is `Some(past)` in memory but gone from Redis.
fn comparable(mut h: Health, now: u64) -> Health {
    for scope in [Scope::Provider, Scope::Endpoint, Scope::Model] {
        for r in h.records_mut(scope).expect("breaker scope").values_mut() {
            r.lease_until = r.leased(now).then_some(1);
        }
    }
    h
}

/// Random histories of commits and claims give the same health and the same claims on Redis
/// as on the in-memory store that applies deltas directly (`Health::apply`, `claim_for`): the
/// Redis transactions add nothing and lose nothing. Simulated time stays within one lease
/// (≤ 36 s), which the server's real TTL also outlives.
#[test]
fn redis_agrees_with_direct_application_on_random_histories() {
    use pi_ccswitch_run::health::store::Memory;
    use proptest::prelude::*;
    let server = RedisServer::start();
    let case = std::sync::atomic::AtomicU64::new(0);
    let config = ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(steps in prop::collection::vec(step_strategy(), 1..12))| {
        let prefix = format!("prop{}:", case.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut redis = RedisStore::open(&server.url(), &prefix)
            .expect("url")
            .with_cooldown_scale(0.001)
            .with_timeouts(Duration::from_secs(5), Duration::from_secs(5));
        let mut memory = Memory::new(0.001);
        let mut now = T0;
        for (advance, step) in steps {
            now += advance;
            let stamp = |ds: &[Delta]| -> Vec<Delta> {
                ds.iter()
                    .cloned()
                    .map(|mut d| {
                        match &mut d {
                            Delta::Failure { at, .. } | Delta::Success { at, .. } => *at = now,
                            Delta::Switch(e) => e.at = now,
                            Delta::Lease { at, .. } => *at = now,
                            Delta::Stated { reset, .. } => reset.at_ms = now + 2_000,
                            Delta::Pace { sample, .. } => sample.at_ms = now,
                            Delta::Release { .. } | Delta::SkippedStart => {}
                        }
                        d
                    })
                    .collect()
            };
            match &step {
                Step::Commit(ds) => {
                    let ds = stamp(ds);
                    let r = redis.commit(&ds, now).expect("redis commit").health;
                    let m = memory.commit(&ds, now).expect("memory commit").health;
                    prop_assert_eq!(comparable(r, now), comparable(m, now), "after {:?}", step);
                }
                Step::Claim(target) => {
                    let (rc, r) = redis.claim_probe(&probe(target), now).expect("redis claim");
                    let (mc, m) = memory.claim_probe(&probe(target), now).expect("memory claim");
                    prop_assert_eq!(rc, mc, "claim of {}", target);
                    prop_assert_eq!(comparable(r.health, now), comparable(m.health, now));
                }
            }
        }
        let loaded = redis.load(now).expect("load").health;
        prop_assert_eq!(comparable(loaded, now), comparable(memory.health.clone(), now));
    });
}
