//! The waiting rules on hand-made instants, and their bounds on random ones.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn rules(t0: Instant, max_wait: Option<u64>, prefer: Option<u64>, deadline: Option<u64>) -> Rules {
    Rules {
        max_wait: max_wait.map(s),
        prefer_primary: prefer.map(s),
        deadline: deadline.map(|d| t0 + s(d)),
    }
}

#[test]
fn a_known_wait_starts_only_if_it_ends_before_the_deadline_and_within_max_wait() {
    let t0 = crate::clock::now().instant;
    let none = Waited::default();
    let r = rules(t0, None, None, Some(600));
    assert_eq!(r.may_wait(&none, t0, t0 + s(599)), Ok(()));
    assert_eq!(r.may_wait(&none, t0, t0 + s(600)), Err(Bound::Deadline));
    assert_eq!(
        Rules::default().may_wait(&none, t0, t0 + s(1_000_000)),
        Ok(()),
        "nothing bounds it"
    );
    let r = rules(t0, Some(30), None, Some(600));
    assert_eq!(
        r.may_wait(&none, t0, t0 + s(30)),
        Ok(()),
        "exactly the bound"
    );
    assert_eq!(r.may_wait(&none, t0, t0 + s(31)), Err(Bound::MaxWait));
    assert_eq!(
        r.may_wait(&none, t0, t0 + s(700)),
        Err(Bound::Deadline),
        "the deadline is named first: it would end the job anyway"
    );
    // What was waited before counts: 20 s waited, 10 s left.
    let mut w = Waited::default();
    w.begin(t0, WaitKind::Reopening);
    w.end(t0 + s(20));
    assert_eq!(r.may_wait(&w, t0 + s(50), t0 + s(60)), Ok(()));
    assert_eq!(r.may_wait(&w, t0 + s(50), t0 + s(61)), Err(Bound::MaxWait));
    // --max-wait 0: no wait at all, but going on at once is no wait.
    let r = rules(t0, Some(0), None, None);
    assert_eq!(r.may_wait(&none, t0, t0), Ok(()));
    assert_eq!(
        r.may_wait(&none, t0, t0 + Duration::from_millis(1)),
        Err(Bound::MaxWait)
    );
}

#[test]
fn an_open_wait_ends_at_the_earlier_of_max_wait_and_the_deadline() {
    let t0 = crate::clock::now().instant;
    let none = Waited::default();
    assert_eq!(Rules::default().open_wait_limit(&none, t0), None);
    assert_eq!(
        rules(t0, None, None, Some(600)).open_wait_limit(&none, t0),
        Some((t0 + s(600), Bound::Deadline))
    );
    assert_eq!(
        rules(t0, Some(30), None, Some(600)).open_wait_limit(&none, t0 + s(5)),
        Some((t0 + s(35), Bound::MaxWait))
    );
    assert_eq!(
        rules(t0, Some(30), None, None).open_wait_limit(&none, t0),
        Some((t0 + s(30), Bound::MaxWait))
    );
    assert_eq!(
        rules(t0, Some(30), None, Some(20)).open_wait_limit(&none, t0),
        Some((t0 + s(20), Bound::Deadline))
    );
    assert_eq!(
        rules(t0, Some(30), None, Some(30)).open_wait_limit(&none, t0),
        Some((t0 + s(30), Bound::MaxWait)),
        "a tie names the user's own bound"
    );
    // The wait under way counts: 25 s into a slot wait, 5 s are left.
    let mut w = Waited::default();
    w.begin(t0, WaitKind::Capacity);
    assert_eq!(
        rules(t0, Some(30), None, None).open_wait_limit(&w, t0 + s(25)),
        Some((t0 + s(30), Bound::MaxWait))
    );
    assert_eq!(
        rules(t0, Some(30), None, None).open_wait_limit(&w, t0 + s(40)),
        Some((t0 + s(40), Bound::MaxWait)),
        "past the bound: now"
    );
    // A bound too large for the clock is no bound (never a panic).
    let huge = Rules {
        max_wait: Some(Duration::MAX),
        ..Rules::default()
    };
    assert_eq!(huge.open_wait_limit(&none, t0), None);
}

#[test]
fn the_primary_is_waited_for_within_its_window_the_deadline_and_max_wait() {
    let t0 = crate::clock::now().instant;
    let none = Waited::default();
    // Without the option: fail over, whatever the reset.
    assert_eq!(
        rules(t0, None, None, Some(600)).primary(&none, t0, t0 + s(1)),
        Primary::FailOver(Why::NotAsked)
    );
    // The case: a reset 81 s ahead, the option at 10 minutes.
    let r = rules(t0, None, Some(600), Some(3600));
    assert_eq!(r.primary(&none, t0, t0 + s(81)), Primary::Wait);
    assert_eq!(r.primary(&none, t0, t0 + s(600)), Primary::Wait);
    assert_eq!(
        r.primary(&none, t0, t0 + s(601)),
        Primary::FailOver(Why::PastWindow)
    );
    // What was already waited for the primary counts against the window; other waits do not.
    let mut w = Waited::default();
    w.begin(t0, WaitKind::Primary);
    w.begin(t0 + s(500), WaitKind::Capacity);
    w.end(t0 + s(700));
    assert_eq!(w.primary(t0 + s(700)), s(500));
    assert_eq!(w.total(t0 + s(700)), s(700));
    assert_eq!(r.primary(&w, t0 + s(700), t0 + s(800)), Primary::Wait);
    assert_eq!(
        r.primary(&w, t0 + s(700), t0 + s(801)),
        Primary::FailOver(Why::PastWindow)
    );
    // The deadline and --max-wait bound it too.
    assert_eq!(
        rules(t0, None, Some(600), Some(60)).primary(&none, t0, t0 + s(81)),
        Primary::FailOver(Why::Bound(Bound::Deadline))
    );
    assert_eq!(
        rules(t0, Some(30), Some(600), Some(3600)).primary(&none, t0, t0 + s(81)),
        Primary::FailOver(Why::Bound(Bound::MaxWait))
    );
    // A reopening already past is no wait.
    assert_eq!(
        rules(t0, Some(0), Some(0), Some(60)).primary(&none, t0 + s(5), t0),
        Primary::Wait
    );
}

#[test]
fn an_admission_holds_for_the_primary_what_is_left_of_every_bound() {
    let t0 = crate::clock::now().instant;
    let none = Waited::default();
    assert_eq!(
        rules(t0, Some(30), None, Some(600)).primary_hold(&none, t0),
        Duration::ZERO,
        "not without the option"
    );
    assert_eq!(
        rules(t0, None, Some(600), None).primary_hold(&none, t0),
        s(600)
    );
    assert_eq!(
        rules(t0, Some(30), Some(600), Some(3600)).primary_hold(&none, t0),
        s(30)
    );
    assert_eq!(
        rules(t0, None, Some(600), Some(100)).primary_hold(&none, t0 + s(90)),
        s(10)
    );
    let mut w = Waited::default();
    w.begin(t0, WaitKind::Primary);
    assert_eq!(
        rules(t0, None, Some(600), None).primary_hold(&w, t0 + s(550)),
        s(50)
    );
    assert_eq!(
        rules(t0, None, Some(600), None).primary_hold(&w, t0 + s(700)),
        Duration::ZERO
    );
}

#[test]
fn waits_are_counted_one_at_a_time() {
    let t0 = crate::clock::now().instant;
    let mut w = Waited::default();
    assert_eq!((w.total(t0), w.current()), (Duration::ZERO, None));
    w.begin(t0, WaitKind::Capacity);
    // The same kind again goes on from where it started.
    w.begin(t0 + s(3), WaitKind::Capacity);
    assert_eq!(w.total(t0 + s(4)), s(4));
    // Another kind ends it and starts anew.
    w.begin(t0 + s(4), WaitKind::Primary);
    assert_eq!(w.current(), Some(WaitKind::Primary));
    assert_eq!(w.total(t0 + s(10)), s(10));
    assert_eq!(w.primary(t0 + s(10)), s(6));
    w.end(t0 + s(10));
    w.end(t0 + s(99));
    assert_eq!((w.total(t0 + s(99)), w.primary(t0 + s(99))), (s(10), s(6)));
    assert_eq!(w.current(), None);
    // A clock that seems to go back (it cannot: Instant) counts as nothing, never negative.
    w.begin(t0 + s(20), WaitKind::Reopening);
    assert_eq!(w.total(t0 + s(15)), s(10));
}

proptest! {
    /// Whatever the bounds and times: a wait allowed never ends at or past the deadline and
    /// never takes the total past --max-wait; an open wait's limit is never past either.
    #[test]
    fn the_rules_never_wait_past_a_bound(
        max_wait in proptest::option::of(0u64..2_000_000),
        prefer in proptest::option::of(0u64..2_000_000),
        deadline in proptest::option::of(0u64..2_000_000),
        waited_before in 0u64..2_000_000,
        now in 0u64..2_000_000,
        until in 0u64..4_000_000,
    ) {
        let t0 = crate::clock::now().instant;
        let ms = Duration::from_millis;
        let r = Rules {
            max_wait: max_wait.map(ms),
            prefer_primary: prefer.map(ms),
            deadline: deadline.map(|d| t0 + ms(d)),
        };
        let mut w = Waited::default();
        w.begin(t0, WaitKind::Primary);
        w.end(t0 + ms(waited_before));
        let (now, until) = (t0 + ms(now), t0 + ms(until));
        if r.may_wait(&w, now, until).is_ok() {
            prop_assert!(r.deadline.is_none_or(|d| until < d));
            let total = w.total(now) + until.saturating_duration_since(now);
            prop_assert!(r.max_wait.is_none_or(|m| total <= m));
        }
        if r.primary(&w, now, until) == Primary::Wait {
            prop_assert!(r.may_wait(&w, now, until).is_ok());
            let total = w.primary(now) + until.saturating_duration_since(now);
            prop_assert!(r.prefer_primary.is_some_and(|p| total <= p));
        }
        if let Some((limit, _)) = r.open_wait_limit(&w, now) {
            prop_assert!(r.deadline.is_none_or(|d| limit <= d));
            prop_assert!(limit >= now.min(r.deadline.unwrap_or(now)));
            if let Some(m) = r.max_wait {
                let total = w.total(now) + limit.saturating_duration_since(now);
                prop_assert!(total <= m.max(w.total(now)));
            }
        }
    }
}
