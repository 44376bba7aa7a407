use super::*;
use proptest::prelude::*;

fn caps(values: &[&str]) -> Result<Caps, String> {
    Caps::parse(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
}

fn amount(v: f64) -> Amount {
    Amount(v)
}

#[test]
fn a_total_and_provider_caps_repeated_or_comma_separated() {
    let c = caps(&["20,zai=5", "minimax=0.25"]).unwrap();
    assert_eq!(c.total, Some(amount(20.0)));
    assert_eq!(c.providers.get("zai"), Some(&amount(5.0)));
    assert_eq!(c.providers.get("minimax"), Some(&amount(0.25)));
    assert_eq!(c.providers().collect::<Vec<_>>(), ["minimax", "zai"]);
    assert!(!c.is_empty());
    assert!(caps(&[]).unwrap().is_empty());
    // Blanks around the parts are allowed, as for --max-inflight: one list reader.
    let spaced = caps(&[" 20 , zai = 5 "]).unwrap();
    assert_eq!(spaced.total, Some(amount(20.0)));
    assert_eq!(spaced.providers.get("zai"), Some(&amount(5.0)));
    for ok in [
        "5",
        "0.25",
        ".5",
        "2.",
        "007",
        "123456789012345678901234567890",
    ] {
        assert!(caps(&[ok]).is_ok(), "{ok}");
    }
    // A provider name is taken as written (Pi's names may hold dashes, dots, slashes).
    let c = caps(&["zai-2=1", "my.gw/x=2"]).unwrap();
    assert_eq!(c.providers().collect::<Vec<_>>(), ["my.gw/x", "zai-2"]);
}

#[test]
fn bad_values_are_one_line_naming_the_value() {
    for (given, says) in [
        (vec![""], "--max-cost requires a value"),
        (
            vec!["-1"],
            "--max-cost '-1': '-1' is not a positive amount; expected COST or PROVIDER=COST",
        ),
        (vec!["0"], "--max-cost '0': '0' is not a positive amount"),
        (vec!["0.000"], "'0.000' is not a positive amount"),
        (
            vec!["NaN"],
            "--max-cost 'NaN': 'NaN' is not a positive amount",
        ),
        (vec!["nan"], "'nan' is not a positive amount"),
        (vec!["inf"], "'inf' is not a positive amount"),
        (vec!["infinity"], "'infinity' is not a positive amount"),
        (vec!["1e3"], "'1e3' is not a positive amount"),
        (vec!["+5"], "'+5' is not a positive amount"),
        (vec!["5 5"], "'5 5' is not a positive amount"),
        (vec!["5$"], "'5$' is not a positive amount"),
        (vec!["1.2.3"], "'1.2.3' is not a positive amount"),
        (vec!["."], "'.' is not a positive amount"),
        (
            vec!["zai="],
            "--max-cost 'zai=': '' is not a positive amount",
        ),
        (
            vec!["zai=-2"],
            "--max-cost 'zai=-2': '-2' is not a positive amount",
        ),
        (vec!["zai=x"], "'x' is not a positive amount"),
        (vec!["zai=1=2"], "'1=2' is not a positive amount"),
        (vec!["=5"], "--max-cost '=5': '=5' names no provider"),
        (vec!["5,,zai=1"], "--max-cost '5,,zai=1' has an empty item"),
        (vec!["5,"], "--max-cost '5,' has an empty item"),
        (
            vec!["5", "6"],
            "--max-cost gives the total cap twice (5 and 6); give one",
        ),
        (
            vec!["5,6"],
            "--max-cost gives the total cap twice (5 and 6)",
        ),
        (
            vec!["zai=1", "minimax=2,zai=3"],
            "--max-cost gives provider 'zai' twice (zai=1 and zai=3); give one",
        ),
    ] {
        let err = caps(&given).expect_err(&format!("{given:?} is refused"));
        assert!(err.contains(says), "{given:?}: {err}");
        assert!(!err.contains('\n'), "{err}");
    }
}

#[test]
fn a_cap_is_reached_when_the_cost_recorded_is_at_least_it() {
    let c = caps(&["0.3,zai=0.1"]).unwrap();
    let mut s = Spend::default();
    assert_eq!(c.total_reached(&s), None);
    assert!(s.add("zai", 0.05));
    assert!(s.add("kimi", 0.2));
    assert_eq!(c.total_reached(&s), None);
    assert_eq!(c.provider_reached(&s, "zai"), None);
    assert_eq!(c.provider_reached(&s, "kimi"), None, "no cap of its own");
    assert!(s.add("zai", 0.05));
    // 0.05 + 0.05 is 0.1 exactly here; at the cap counts as reached.
    assert!(c.provider_reached(&s, "zai").is_some());
    assert_eq!(c.capped(&s).into_iter().collect::<Vec<_>>(), ["zai"]);
    assert!((s.total() - 0.3).abs() < 1e-12);
    let over = c.total_reached(&s).expect("0.3 of 0.3");
    assert_eq!(over.cap, amount(0.3));
    // Nothing, a negative or a garbled cost changes nothing.
    for cost in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert!(!s.add("zai", cost), "{cost}");
    }
    assert!((s.of("zai") - 0.1).abs() < 1e-12);
    assert_eq!(s.of("nobody"), 0.0);
}

#[test]
fn every_provider_left_over_its_cap_is_out_of_budget() {
    let c = caps(&["zai=1", "minimax=1"]).unwrap();
    let mut s = Spend::default();
    s.add("zai", 1.5);
    assert_eq!(c.all_capped(&s, ["zai", "minimax"]), None);
    assert_eq!(c.all_capped(&s, ["zai", "kimi"]), None, "kimi has no cap");
    assert_eq!(c.all_capped(&s, []), None, "nothing left is not this");
    let over = c.all_capped(&s, ["zai", "zai"]).expect("zai is over");
    assert_eq!(
        over.to_string(),
        "every provider left is over its --max-cost cap (zai recorded 1.500000 of zai=1)"
    );
    s.add("minimax", 2.0);
    assert!(c.all_capped(&s, ["zai", "minimax"]).is_some());
}

#[test]
fn the_ledger_announces_each_cap_once_when_it_is_reached() {
    let mut l = Ledger::new(caps(&["1,zai=0.5"]).unwrap());
    assert_eq!(l.version(), 0);
    assert!(l.add("zai", 0.25).is_empty());
    assert_eq!(l.version(), 1);
    assert!(l.add("zai", 0.0).is_empty());
    assert_eq!(l.version(), 1, "a free call is no change");
    let crossed = l.add("zai", 0.25);
    assert_eq!(crossed.len(), 1);
    assert_eq!(
        crossed[0].to_string(),
        "spend cap reached: zai recorded cost 0.500000 of --max-cost zai=0.5; it is skipped for \
         the rest of this run"
    );
    assert!(l.add("zai", 0.1).is_empty(), "once");
    assert!(l.total_reached().is_none());
    let crossed = l.add("kimi", 0.4);
    assert_eq!(
        crossed.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "spend cap reached: this run recorded cost 1.000000 of --max-cost 1; no new job or \
          attempt starts (what is under way finishes)"
        ]
    );
    assert!(l.add("kimi", 0.4).is_empty());
    assert_eq!(
        l.total_reached().expect("reached").to_string(),
        "this run recorded cost 1.400000 of --max-cost 1"
    );
    assert_eq!(
        l.spend().total(),
        l.spend().of("zai") + l.spend().of("kimi")
    );
    assert_eq!(l.caps().providers().collect::<Vec<_>>(), ["zai"]);
}

proptest! {
    /// Any text: a cap or a one-line error, never a panic; an accepted amount is positive and
    /// finite.
    #[test]
    fn any_value_parses_or_is_refused_in_one_line(values in proptest::collection::vec(".{0,24}", 0..4)) {
        match Caps::parse(&values) {
            Ok(c) => {
                for a in c.total.iter().chain(c.providers.values()) {
                    prop_assert!(a.get().is_finite() && a.get() > 0.0);
                }
            }
            Err(e) => prop_assert!(e.starts_with("--max-cost")),
        }
    }

    /// Costs add up in any order; the total is the sum of the providers'.
    #[test]
    fn the_total_is_the_sum_of_the_providers(calls in proptest::collection::vec((0usize..3, 0.0f64..10.0), 0..40)) {
        let names = ["a", "b", "c"];
        let mut s = Spend::default();
        for (p, cost) in &calls {
            s.add(names[*p], *cost);
        }
        let by_provider: f64 = names.iter().map(|n| s.of(n)).sum();
        prop_assert!((s.total() - by_provider).abs() < 1e-9);
    }
}
