//! The benchmark goals, checked in the simulation. Run with `--nocapture` to see the
//! numbers.

use super::*;
use crate::capacity::Capacity;

fn show(name: &str, r: &SimReport, ideal_ms: f64) {
    eprintln!(
        "{name}: {} requests, {} rejected ({:.1}%), makespan {} ms = {:.2}× ideal {:.0} ms, \
         peak {:?}, final limits {:?}, unanswered {}",
        r.requests,
        r.rejected,
        100.0 * r.rejected_share(),
        r.makespan_ms,
        r.makespan_ms as f64 / ideal_ms,
        ideal_ms,
        r.peak,
        r.final_limits,
        r.unanswered,
    );
}

fn one_process(workers: usize, jobs: usize) -> Vec<Group> {
    vec![Group { workers, jobs }]
}

fn three_processes() -> Vec<Group> {
    vec![
        Group {
            workers: 4,
            jobs: 12
        };
        3
    ]
}

fn with_max_inflight(mut s: Scenario) -> Scenario {
    for p in &mut s.providers {
        p.max_inflight = u32::try_from(p.cap).ok();
    }
    s
}

/// Ideal makespan: the total work spread perfectly over the total true capacity.
fn ideal(s: &Scenario, r: &SimReport) -> f64 {
    let capacity: usize = s.providers.iter().map(|p| p.cap).sum();
    (r.work_ms as f64 / capacity as f64).max(s.duration_ms as f64)
}

fn one_cap_2() -> Scenario {
    Scenario::new(vec![Provider::capped(2)], one_process(8, 30))
}

fn three_providers() -> Scenario {
    let providers = [3, 2, 2].map(Provider::capped).to_vec();
    Scenario::new(providers, one_process(8, 60))
}

fn shared_cap_3() -> Scenario {
    Scenario::new(vec![Provider::capped(3)], three_processes())
}

#[test]
fn one_provider_capped_at_2_with_8_workers() {
    let s = one_cap_2();
    let r = run(&s);
    show("W=8 C=2 30 jobs", &r, 15_000.0);
    assert_eq!(r.unanswered, 0);
    assert!(r.rejected_share() <= 0.05, "{r:?}");
    assert!(r.makespan_ms as f64 <= 1.2 * 15_000.0, "{r:?}");
    assert_eq!(r.peak, [2]);
}

#[test]
fn three_providers_3_2_2_with_8_workers_overflowing() {
    let s = three_providers();
    let r = run(&s);
    let ideal = 60.0 / 7.0 * 1000.0;
    show("W=8 C=3/2/2 60 jobs", &r, ideal);
    assert_eq!(r.unanswered, 0);
    assert!(r.rejected_share() <= 0.05, "{r:?}");
    assert!(r.makespan_ms as f64 <= 1.2 * ideal, "{r:?}");
}

#[test]
fn three_processes_of_4_share_a_cap_of_3() {
    let s = shared_cap_3();
    let r = run(&s);
    show("3×4 workers C=3 36 jobs", &r, 12_000.0);
    assert_eq!(r.unanswered, 0);
    assert!(r.rejected_share() <= 0.10, "{r:?}");
}

#[test]
fn max_inflight_equal_to_the_true_cap_rejects_nothing() {
    for (name, s) in [
        ("cap 2", one_cap_2()),
        ("caps 3/2/2", three_providers()),
        ("shared cap 3", shared_cap_3()),
    ] {
        let s = with_max_inflight(s);
        let r = run(&s);
        show(&format!("--max-inflight {name}"), &r, ideal(&s, &r));
        assert_eq!((r.rejected, r.unanswered), (0, 0), "{name}: {r:?}");
    }
}

#[test]
fn the_goals_hold_with_jittered_answers_and_slow_refusals() {
    for (jitter_ms, reject_ms) in [(500, 0), (0, 200), (500, 200)] {
        for (name, s, rejected, makespan) in [
            ("C=2", one_cap_2(), 0.05, 1.2),
            ("C=3/2/2", three_providers(), 0.05, 1.2),
            ("3×4 C=3", shared_cap_3(), 0.10, f64::INFINITY),
        ] {
            let s = Scenario {
                jitter_ms,
                reject_ms,
                ..s
            };
            let r = run(&s);
            let ideal = ideal(&s, &r);
            show(
                &format!("{name} ±{jitter_ms} ms, 429 after {reject_ms} ms"),
                &r,
                ideal,
            );
            assert_eq!(r.unanswered, 0);
            assert!(r.rejected_share() <= rejected, "{name}: {r:?}");
            assert!(r.makespan_ms as f64 <= makespan * ideal, "{name}: {r:?}");
        }
    }
}

#[test]
fn a_long_batch_probes_rarely() {
    let s = Scenario::new(vec![Provider::capped(2)], one_process(8, 2000));
    let r = run(&s);
    show("W=8 C=2 2000 jobs", &r, 1_000_000.0);
    assert!(r.rejected_share() <= 0.01, "{r:?}");
    assert!(r.makespan_ms as f64 <= 1.02 * 1_000_000.0, "{r:?}");
}

#[test]
fn the_limit_follows_a_cap_that_rises_or_falls() {
    let rising = Provider {
        cap_change: Some((100_000, 5)),
        ..Provider::capped(2)
    };
    let s = Scenario::new(vec![rising], one_process(8, 1000));
    let r = run(&s);
    show(
        "C=2 then 5 from 100 s, 1000 jobs",
        &r,
        100_000.0 + 800_000.0 / 5.0,
    );
    assert_eq!(r.final_limits, [5]);
    assert!(r.rejected_share() <= 0.02, "{r:?}");
    let falling = Provider {
        cap_change: Some((50_000, 1)),
        ..Provider::capped(4)
    };
    let s = Scenario::new(vec![falling], one_process(8, 300));
    let r = run(&s);
    show("C=4 then 1 from 50 s, 300 jobs", &r, 50_000.0 + 100_000.0);
    assert_eq!(r.final_limits, [1]);
    assert!(r.rejected_share() <= 0.05, "{r:?}");
}

#[test]
fn a_provider_refusing_everything_is_rate_limited_after_a_few_requests() {
    let s = Scenario::new(vec![Provider::capped(0)], one_process(8, 10));
    let r = run(&s);
    show("C=0", &r, 1.0);
    assert_eq!(r.rate_limited, 1);
    assert_eq!(r.answered, 0);
    assert!(
        r.requests <= 1 + crate::capacity::REFUSALS_AT_ONE as usize,
        "{r:?}"
    );
}

#[test]
fn a_second_batch_starts_from_what_the_first_learned() {
    for (name, s) in [("C=2", one_cap_2()), ("C=3/2/2", three_providers())] {
        let fresh = vec![Capacity::default(); s.providers.len()];
        let (first, records) = run_from(&s, fresh, 0);
        // The next batch a minute later: nothing to relearn, at most the scheduled probe of
        // each refused level (after PROBE_ANSWERS answers in all).
        let (second, _) = run_from(&s, records, first.makespan_ms + 60_000);
        show(
            &format!("{name}, second batch"),
            &second,
            ideal(&s, &second),
        );
        assert!(second.rejected <= first.rejected, "{name}: {second:?}");
        let share =
            (first.rejected + second.rejected) as f64 / (first.requests + second.requests) as f64;
        assert!(share <= 0.05, "{name}: {share}");
        assert!(
            second.makespan_ms <= first.makespan_ms,
            "{name}: {second:?}"
        );
    }
}

/// What slow start costs against a provider that takes everything.
#[test]
fn slow_start_costs_a_few_rounds_against_an_uncapped_provider() {
    for jobs in [30, 1000] {
        let s = Scenario::new(vec![Provider::capped(1000)], one_process(8, jobs));
        let r = run(&s);
        let ideal = (jobs as f64 / 8.0).ceil() * 1000.0;
        show(&format!("W=8 uncapped {jobs} jobs"), &r, ideal);
        assert_eq!(r.rejected, 0);
        // Six rounds from 2 to 8 in flight: 21 jobs' worth of slots unused, once.
        assert!(r.makespan_ms as f64 <= ideal + 3000.0, "{r:?}");
        let (second, _) = run_from(&s, vec![learned_from(&s)], 1_000_000_000);
        assert!(second.makespan_ms as f64 <= ideal, "{second:?}");
    }
}

fn learned_from(s: &Scenario) -> Capacity {
    run_from(s, vec![Capacity::default()], 0).1.remove(0)
}
