//! Records, deltas and breakers on hand-made times.

use super::*;

/// Issue 29: stored times are bounded on read by what the rules could have written.
#[test]
fn stored_times_are_clamped_to_what_the_rules_allow() {
    const NOW: u64 = 1_800_000_000_000;
    let mut r = Record {
        consecutive_failures: 1,
        cooldown_until: Some(u64::MAX),
        lease_until: Some(u64::MAX),
        ..Record::default()
    };
    r.clamp_times(NOW);
    assert_eq!(r.cooldown_until, Some(NOW + cooldown::MAX_COOLDOWN_MS));
    assert_eq!(r.lease_until, Some(NOW + cooldown::PROBE_LEASE_MS));
    // A believable stated reset keeps its cooldown up to 8 days and the spread…
    let week = 7 * 24 * 3_600_000;
    let mut r = Record {
        cooldown_until: Some(NOW + week + 1000),
        stated_reset: Some(NOW + week),
        stated_words: Some("resets at …".into()),
        ..Record::default()
    };
    r.clamp_times(NOW);
    assert_eq!(r.cooldown_until, Some(NOW + week + 1000));
    // …one beyond belief is dropped, and the cooldown bounded as our own.
    let mut r = Record {
        cooldown_until: Some(u64::MAX),
        stated_reset: Some(u64::MAX - 1),
        stated_words: Some("year 9999".into()),
        ..Record::default()
    };
    r.clamp_times(NOW);
    assert_eq!(r.stated_reset, None);
    assert_eq!(r.stated_words, None);
    assert_eq!(r.cooldown_until, Some(NOW + cooldown::MAX_COOLDOWN_MS));
    // Times within the rules are left alone; so is a time in the past.
    let mut r = Record {
        cooldown_until: Some(NOW + 60_000),
        lease_until: Some(NOW - 5),
        ..Record::default()
    };
    let before = r.clone();
    r.clamp_times(NOW);
    assert_eq!(r, before);
}

fn model(provider: &str, id: &str, url: &str) -> ModelInfo {
    ModelInfo {
        provider: provider.into(),
        id: id.into(),
        name: None,
        base_url: Some(url.into()),
        reasoning: false,
        input: Some(vec!["text".into()]),
        context_window: Some(128_000),
        max_tokens: None,
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
    assert_eq!(h.endpoints["e"].cooldown_until, Some(10_000));
    // A failure after the cooldown from a request sent before it opened: the same level.
    fail(&mut h, 30_000);
    assert_eq!(h.endpoints["e"].cooldown_until, Some(40_000));
    assert_eq!(h.endpoints["e"].consecutive_failures, 1);
    // A failed probe (under the lease) doubles it.
    h.apply(
        &Delta::Lease {
            at: 50_000,
            target: ProbeTarget::new(Scope::Endpoint, "e"),
        },
        1.0,
    );
    fail(&mut h, 51_000);
    assert_eq!(h.endpoints["e"].cooldown_until, Some(51_000 + 15_000));
    assert_eq!(h.endpoints["e"].consecutive_failures, 2);
    assert_eq!(h.endpoints["e"].lease_until, None);
}

/// Issue 31: a provider down for good is probed once per cooldown, the cooldowns growing
/// 10 s, 15 s, 22.5 s, … to the old windows; one success closes the breaker.
#[test]
fn failed_probes_grow_endpoint_cooldowns_and_one_success_closes() {
    let m = model("a", "m1", "http://h/a");
    let key = endpoint_key("a", Some("http://h/a"));
    let mut h = Health::default();
    let fail = |h: &mut Health, at| {
        h.apply(
            &Delta::Failure {
                at,
                key: key.clone(),
                scope: Scope::Endpoint,
                class: FailureClass::Endpoint,
                error: "503".into(),
            },
            1.0,
        )
    };
    fail(&mut h, 0);
    let mut cooldowns = Vec::new();
    let mut t = 0;
    for _ in 0..12 {
        let until = h.endpoints[&key].cooldown_until.unwrap();
        cooldowns.push(until - t);
        t = until;
        let probe = h.needs_probe(&m, t, &[]).expect("half-open");
        h.apply(
            &Delta::Lease {
                at: t,
                target: probe,
            },
            1.0,
        );
        fail(&mut h, t);
    }
    assert_eq!(
        cooldowns,
        [
            10_000, 15_000, 22_500, 33_750, 50_625, 75_937, 113_905, 120_000, 240_000, 480_000,
            960_000, 1_800_000
        ]
    );
    h.apply(
        &Delta::Success {
            at: t + 1_800_000,
            keys: Keys::of(&m),
        },
        1.0,
    );
    assert_eq!(h.blocked(&m, t + 1_800_001, &[]), None);
    assert_eq!(h.endpoints[&key].consecutive_failures, 0);
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

fn failure(at: u64, key: &str, class: FailureClass) -> Delta {
    Delta::Failure {
        at,
        key: key.into(),
        scope: Scope::Provider,
        class,
        error: "429".into(),
    }
}

fn stated(key: &str, class: FailureClass, at_ms: u64, spread_ms: u64) -> Delta {
    Delta::Stated {
        key: key.into(),
        scope: Scope::Provider,
        class,
        reset: StatedReset {
            at_ms,
            spread_ms,
            words: "resets at …".into(),
        },
    }
}

/// Issue 24: a quota window that states its reset keeps the provider breaker open until
/// then plus the spread — not SPEC's 30 minutes — and then the usual single probe; a probe
/// that fails and states the next reset follows it, without doubling.
#[test]
fn a_stated_quota_reset_is_the_cooldown_then_one_probe() {
    let a = model("a", "m1", "http://h/a");
    let mut h = Health::default();
    let t0 = 1_000_000;
    h.apply(&failure(t0, "a", FailureClass::Quota), 1.0);
    h.apply(&stated("a", FailureClass::Quota, t0 + 180_000, 1234), 1.0);
    let r = &h.providers["a"];
    assert_eq!(r.cooldown_until, Some(t0 + 181_234));
    assert_eq!(r.stated_reset, Some(t0 + 180_000));
    assert_eq!(r.stated_reset_at(t0 + 1), Some(t0 + 180_000));
    assert_eq!(r.stated_words.as_deref(), Some("resets at …"));
    assert_eq!(
        h.blocked(&a, t0 + 181_233, &[]),
        Some(Block::Cooling(Scope::Provider))
    );
    assert_eq!(h.blocked(&a, t0 + 181_234, &[]), None);
    assert_eq!(h.providers["a"].stated_reset_at(t0 + 181_234), None);
    let probe = h.needs_probe(&a, t0 + 181_234, &[]).expect("half-open");
    assert_eq!(probe.to_string(), "provider:a");
    // The probe meets the next window (5 hours on): that, not 60 minutes.
    let t1 = t0 + 182_000;
    h.apply(&failure(t1, "a", FailureClass::Quota), 1.0);
    h.apply(
        &stated("a", FailureClass::Quota, t1 + 5 * 3_600_000, 0),
        1.0,
    );
    let r = &h.providers["a"];
    assert_eq!(r.consecutive_failures, 2);
    assert_eq!(r.cooldown_until, Some(t1 + 5 * 3_600_000));
    // A success closes it and forgets the statement.
    h.apply(
        &Delta::Success {
            at: t1 + 6 * 3_600_000,
            keys: Keys::of(&a),
        },
        1.0,
    );
    let r = &h.providers["a"];
    assert_eq!(
        (r.cooldown_until, r.stated_reset, r.stated_words.as_deref()),
        (None, None, None)
    );
}

/// A request in flight before the breaker opened fails too: with an earlier statement (or
/// none) it does not shorten a stated cooldown; with a later one it lengthens it.
#[test]
fn the_latest_statement_of_one_outage_holds() {
    let mut h = Health::default();
    let t0 = 1_000_000;
    h.apply(&failure(t0, "a", FailureClass::Quota), 1.0);
    h.apply(&stated("a", FailureClass::Quota, t0 + 600_000, 0), 1.0);
    h.apply(&failure(t0 + 10, "a", FailureClass::Quota), 1.0);
    h.apply(&stated("a", FailureClass::Quota, t0 + 60_000, 0), 1.0);
    assert_eq!(h.providers["a"].cooldown_until, Some(t0 + 600_000));
    h.apply(&failure(t0 + 20, "a", FailureClass::Quota), 1.0);
    assert_eq!(h.providers["a"].cooldown_until, Some(t0 + 600_000));
    assert_eq!(h.providers["a"].stated_reset, Some(t0 + 600_000));
    h.apply(&stated("a", FailureClass::Quota, t0 + 900_000, 0), 1.0);
    assert_eq!(h.providers["a"].cooldown_until, Some(t0 + 900_000));
    assert_eq!(h.providers["a"].consecutive_failures, 1, "one outage");
    // An unstated failure after the cooldown: our own cooldown again, nothing stated.
    h.apply(&failure(t0 + 900_001, "a", FailureClass::Quota), 1.0);
    let r = &h.providers["a"];
    assert_eq!(r.cooldown_until, Some(t0 + 900_001 + 60 * 60_000));
    assert_eq!((r.stated_reset, r.stated_words.as_deref()), (None, None));
}

/// A rate limit's stated delay is the least cooldown: a shorter one leaves SPEC's 5 minutes
/// (and nothing stated), a longer one decides.
#[test]
fn a_stated_rate_limit_delay_is_the_least_cooldown() {
    let mut h = Health::default();
    let t0 = 1_000_000;
    h.apply(&failure(t0, "a", FailureClass::RateLimit), 1.0);
    h.apply(&stated("a", FailureClass::RateLimit, t0 + 1000, 7), 1.0);
    let r = &h.providers["a"];
    assert_eq!(r.cooldown_until, Some(t0 + 300_000));
    assert_eq!(r.stated_reset, None);
    h.apply(&failure(t0, "b", FailureClass::RateLimit), 1.0);
    h.apply(
        &stated("b", FailureClass::RateLimit, t0 + 1_230_000, 7),
        1.0,
    );
    let r = &h.providers["b"];
    assert_eq!(r.cooldown_until, Some(t0 + 1_230_007));
    assert_eq!(r.stated_reset, Some(t0 + 1_230_000));
}

/// State files written before issue 24 read as before, and records without a statement
/// are written as before (no new keys).
#[test]
fn records_without_a_statement_keep_their_old_shape() {
    let old = r#"{"consecutive_failures":1,"cooldown_until":5,"last_class":"quota"}"#;
    let r: Record = serde_json::from_str(old).unwrap();
    assert_eq!((r.stated_reset, r.stated_words.as_deref()), (None, None));
    let written = serde_json::to_value(&r).unwrap();
    assert!(written.get("stated_reset").is_none(), "{written}");
    assert!(written.get("stated_words").is_none(), "{written}");
    let stated = Record {
        stated_reset: Some(9),
        stated_words: Some("w".into()),
        ..r
    };
    let back: Record = serde_json::from_str(&serde_json::to_string(&stated).unwrap()).unwrap();
    assert_eq!(back, stated);
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
