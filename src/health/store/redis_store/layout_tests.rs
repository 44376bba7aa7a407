use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::health::FailureClass;
use crate::health::{Delta, Keys};

const NOW: u64 = 1_700_000_000_000;

#[test]
fn key_names() {
    let k = KeySpace::new("pi-ccswitch-run:");
    assert_eq!(
        k.record(Scope::Model, "a/b"),
        "pi-ccswitch-run:v1:rec:model:a/b"
    );
    assert_eq!(k.index(Scope::Endpoint), "pi-ccswitch-run:v1:idx:endpoint");
    assert_eq!(
        k.lease(Scope::Provider, "zai"),
        "pi-ccswitch-run:v1:lease:provider:zai"
    );
    assert_eq!(k.switches(), "pi-ccswitch-run:v1:switches");
    assert_eq!(k.switch_log(), "pi-ccswitch-run:v1:switch_log");
    assert_eq!(k.scan_pattern(), "pi-ccswitch-run:v1:*");
    assert_eq!(
        KeySpace::new("a*[x]?\\:").scan_pattern(),
        "a\\*\\[x\\]\\?\\\\:v1:*"
    );
}

#[test]
fn records_are_stored_without_their_lease() {
    let r = Record {
        consecutive_failures: 2,
        total_failures: 7,
        lease_until: Some(NOW),
        last_error: Some("402: quota".into()),
        ..Record::default()
    };
    let json = encode_record(&r);
    assert!(!String::from_utf8_lossy(&json).contains(&NOW.to_string()));
    let back = decode_record(&json).expect("decodes");
    assert_eq!(
        back,
        Record {
            lease_until: None,
            ..r
        }
    );
    for bad in [&b""[..], b"{", b"[]", b"null", br#"{"total_failures":-1}"#] {
        assert_eq!(decode_record(bad), None, "{}", String::from_utf8_lossy(bad));
    }
    // A lease smuggled into the JSON is ignored: the lease key is the only truth.
    assert_eq!(
        decode_record(br#"{"lease_until":5}"#),
        Some(Record::default())
    );
    let mut huge = br#"{"last_error":""#.to_vec();
    huge.resize(MAX_VALUE_BYTES, b'x');
    assert_eq!(decode_record(&huge), None);
}

#[test]
fn switch_log_reads_oldest_first_and_bounded() {
    let entry = |at| SwitchEntry {
        at,
        from: "a".into(),
        to: "b".into(),
        reason: "quota".into(),
    };
    let mut newest_first: Vec<Vec<u8>> =
        (0..25).rev().map(|at| encode_switch(&entry(at))).collect();
    newest_first.insert(3, b"garbage".to_vec());
    let log = decode_switch_log(&newest_first);
    assert_eq!(log.len(), SWITCH_LOG_LEN);
    assert_eq!(log.first().map(|e| e.at), Some(5));
    assert_eq!(log.last().map(|e| e.at), Some(24));
}

#[test]
fn lease_until_from_pttl() {
    assert_eq!(lease_until(NOW, -2), None);
    assert_eq!(lease_until(NOW, -1), None);
    assert_eq!(lease_until(NOW, 0), None);
    assert_eq!(lease_until(NOW, 119_999), Some(NOW + 119_999));
    assert_eq!(lease_until(u64::MAX, 5), Some(u64::MAX));
}

fn rec(failures: u64) -> Record {
    Record {
        total_failures: failures,
        ..Record::default()
    }
}

#[test]
fn plan_writes_only_the_difference() {
    let mut before = Health::default();
    before.providers.insert("same".into(), rec(1));
    before.providers.insert("changed".into(), rec(1));
    before.providers.insert("gone".into(), rec(1));
    before.models.insert(
        "leased".into(),
        Record {
            lease_until: Some(NOW + 5_000),
            ..rec(1)
        },
    );
    let mut after = before.clone();
    after
        .providers
        .get_mut("changed")
        .expect("there")
        .total_failures = 2;
    after.providers.remove("gone");
    after.endpoints.insert("new".into(), rec(0));
    after.models.get_mut("leased").expect("there").lease_until = None;
    after.models.insert(
        "probe".into(),
        Record {
            lease_until: Some(NOW + 120_000),
            ..rec(0)
        },
    );
    assert_eq!(
        plan(&before, &after, NOW),
        vec![
            Write::Record {
                scope: Scope::Provider,
                key: "changed".into(),
                json: encode_record(&rec(2)),
            },
            Write::Remove {
                scope: Scope::Provider,
                key: "gone".into(),
            },
            Write::Record {
                scope: Scope::Endpoint,
                key: "new".into(),
                json: encode_record(&rec(0)),
            },
            Write::Release {
                scope: Scope::Model,
                key: "leased".into(),
            },
            Write::Record {
                scope: Scope::Model,
                key: "probe".into(),
                json: encode_record(&rec(0)),
            },
            Write::Lease {
                scope: Scope::Model,
                key: "probe".into(),
                ttl_ms: 120_000,
                until: NOW + 120_000,
            },
        ]
    );
    assert_eq!(plan(&after, &after, NOW), vec![]);
    // An already expired lease is no lease: nothing to release, nothing to set.
    let mut stale = after.clone();
    stale.models.get_mut("probe").expect("there").lease_until = Some(NOW);
    assert_eq!(
        plan(&stale, &stale, NOW),
        vec![],
        "expired leases write nothing"
    );
}

#[test]
fn touched_records_follow_the_delta_rules() {
    let keys = Keys {
        model: "p/m".into(),
        provider: "p".into(),
        endpoint: "p@http://h".into(),
    };
    let deltas = [
        Delta::Failure {
            at: NOW,
            key: "p".into(),
            scope: Scope::Provider,
            class: FailureClass::Quota,
            error: String::new(),
        },
        Delta::Failure {
            at: NOW,
            key: "x".into(),
            scope: Scope::Round,
            class: FailureClass::ContextOverflow,
            error: String::new(),
        },
        Delta::Success { at: NOW, keys },
        Delta::Lease {
            at: NOW,
            target: crate::health::ProbeTarget::new(Scope::Endpoint, "p@http://h"),
        },
        Delta::Lease {
            at: NOW,
            target: crate::health::ProbeTarget::new(Scope::Provider, "bare"),
        },
    ];
    assert_eq!(
        touched(&deltas),
        vec![
            (Scope::Provider, "p".to_string()),
            (Scope::Model, "p/m".to_string()),
            (Scope::Endpoint, "p@http://h".to_string()),
            (Scope::Provider, "bare".to_string()),
        ]
    );
}

/// What a store holds, as the plan's writes see it.
#[derive(Debug, Default, PartialEq)]
struct Stored {
    records: BTreeMap<(u8, String), Vec<u8>>,
    leases: BTreeMap<(u8, String), u64>,
}

fn rank(scope: Scope) -> u8 {
    match scope {
        Scope::Provider => 0,
        Scope::Endpoint => 1,
        Scope::Model => 2,
        Scope::Round => 3,
    }
}

fn stored(h: &Health, now: u64) -> Stored {
    let mut s = Stored::default();
    for scope in BREAKER_SCOPES {
        for (k, r) in h.records(scope).expect("breaker scope") {
            s.records.insert((rank(scope), k.clone()), encode_record(r));
            if let Some(t) = r.lease_until.filter(|t| *t > now) {
                s.leases.insert((rank(scope), k.clone()), t);
            }
        }
    }
    s
}

fn run(s: &mut Stored, writes: &[Write]) {
    for w in writes {
        match w {
            Write::Record { scope, key, json } => {
                s.records.insert((rank(*scope), key.clone()), json.clone());
            }
            Write::Remove { scope, key } => {
                s.records.remove(&(rank(*scope), key.clone()));
                s.leases.remove(&(rank(*scope), key.clone()));
            }
            Write::Lease {
                scope, key, until, ..
            } => {
                s.leases.insert((rank(*scope), key.clone()), *until);
            }
            Write::Release { scope, key } => {
                s.leases.remove(&(rank(*scope), key.clone()));
            }
        }
    }
}

fn record_strategy() -> impl Strategy<Value = Record> {
    (
        0u32..3,
        0u64..3,
        prop::option::of(NOW - 10..NOW + 10),
        any::<bool>(),
    )
        .prop_map(|(c, t, lease, disabled)| Record {
            consecutive_failures: c,
            total_failures: t,
            lease_until: lease,
            disabled,
            ..Record::default()
        })
}

fn health_strategy() -> impl Strategy<Value = Health> {
    let map = || prop::collection::btree_map("[a-c]", record_strategy(), 0..3);
    (map(), map(), map()).prop_map(|(models, providers, endpoints)| Health {
        models,
        providers,
        endpoints,
        ..Health::default()
    })
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    /// Running the plan on what `before` stored gives exactly what `after` would store.
    #[test]
    fn plan_turns_before_into_after(before in health_strategy(), after in health_strategy()) {
        let mut s = stored(&before, NOW);
        run(&mut s, &plan(&before, &after, NOW));
        prop_assert_eq!(s, stored(&after, NOW));
    }

    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_record(&bytes);
        let _ = decode_switch_log(&[bytes]);
    }
}
