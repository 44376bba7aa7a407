//! The capacity part of the behaviour suite (issue 23): slot admission, overflow, refusals,
//! leases and records, held to the same assertions on the in-memory store (one process's
//! records: no agent dir, or the fallback while the real store is down), the file store and a
//! real Redis. What only a shared store can do (other processes, corrupt records written by
//! others, `--reset all`) runs on the file store and Redis.
//!
//! Redis judges leases by the server's clock (`TIME`), never the caller's, so these behaviours
//! pass the real wall clock in (every store then agrees on when a lease runs out) and make
//! leases run out with short TTLs of their own rather than by simulated time.

use std::io::{Read, Seek, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(super) mod stores;

use self::stores::{Memory, SharedBackend, open_store};
use super::{Backend, File, Redis, together};
use crate::support::{worker_order, worker_process};
use pi_ccswitch_run::capacity::ops::{CapacityOp, CapacityReply, Choice};
use pi_ccswitch_run::capacity::{
    Capacity, CapacityDelta, Change, DEFAULT_LEASE_TTL_MS, Decided, Limits, MAX_LEASE_TTL_MS,
    PROBE_ANSWERS, Renewal, Verdict,
};
use pi_ccswitch_run::health::store::capacity_file::CAPACITY_FILE;
use pi_ccswitch_run::health::store::{HealthStore, StoreError};

/// `every` behaviours run on every store, `shared` ones on the stores processes share.
macro_rules! capacity_behaviours {
    (every: [$($every:ident),* $(,)?], shared: [$($shared:ident),* $(,)?] $(,)?) => {
        mod memory { $( #[test] fn $every() { super::$every(&super::Memory::new()) } )* }
        mod file {
            $( #[test] fn $every() { super::$every(&super::File::new()) } )*
            $( #[test] fn $shared() { super::$shared(&super::File::new()) } )*
        }
        mod redis {
            $( #[test] fn $every() { super::$every(&super::Redis::new()) } )*
            $( #[test] fn $shared() { super::$shared(&super::Redis::new()) } )*
        }
    };
}

capacity_behaviours!(
    every: [
        admission_takes_the_first_choice_with_room_and_overflows_past_known_limits_only,
        a_slot_given_back_is_free_for_the_next_admission,
        refusals_cut_the_limit_and_refusals_at_one_back_off_for_everyone,
        a_cut_limit_is_probed_up_again_after_enough_clean_answers,
        threads_never_hold_more_slots_than_the_limit_together,
        leases_run_out_after_their_ttl_unless_renewed,
        load_capacity_lists_every_record,
    ],
    shared: [
        processes_never_hold_more_slots_than_the_limit_together,
        reset_all_forgets_every_capacity_record,
        a_corrupt_or_foreign_record_counts_as_empty_and_is_overwritten,
    ],
);

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_millis(),
    )
    .expect("ms")
}

/// How far the store's clock (Redis: the server's `TIME`) may be from ours in these checks.
const SLACK_MS: u64 = 2_000;

fn capped(provider: &str, cap: u32) -> Choice {
    Choice {
        provider: provider.into(),
        limits: Limits {
            initial: 8,
            cap: Some(cap),
        },
    }
}

fn uncapped(provider: &str) -> Choice {
    Choice {
        provider: provider.into(),
        limits: Limits {
            initial: 8,
            cap: None,
        },
    }
}

fn admit_op(slot: &str, ttl_ms: u64, choices: Vec<Choice>) -> CapacityOp {
    CapacityOp::Admit {
        slot: slot.into(),
        ttl_ms,
        choices,
        release: None,
        hold_first_ms: 0,
    }
}

fn admit(s: &mut dyn HealthStore, slot: &str, choices: Vec<Choice>) -> CapacityReply {
    s.capacity(&admit_op(slot, DEFAULT_LEASE_TTL_MS, choices), now_ms())
        .expect("admit")
}

/// The choice an admission was granted on, `None` when every choice was full.
#[track_caller]
fn granted_on(reply: CapacityReply) -> Option<usize> {
    match reply {
        CapacityReply::Admitted { index, .. } => Some(index),
        CapacityReply::Full { .. } => None,
        other => panic!("not an admission: {other:?}"),
    }
}

fn apply(s: &mut dyn HealthStore, provider: &str, delta: CapacityDelta) -> Decided {
    let op = CapacityOp::Apply {
        provider: provider.into(),
        delta,
    };
    match s.capacity(&op, now_ms()).expect("apply") {
        CapacityReply::Applied(outcome) => outcome,
        other => panic!("{op:?}: {other:?}"),
    }
}

fn answered(s: &mut dyn HealthStore, choice: &Choice, slot: &str) -> Decided {
    let delta = CapacityDelta::Answered {
        at: now_ms(),
        slot: slot.into(),
        limits: choice.limits,
    };
    apply(s, &choice.provider, delta)
}

fn refused(s: &mut dyn HealthStore, choice: &Choice, slot: &str) -> Decided {
    let delta = CapacityDelta::Refused {
        at: now_ms(),
        slot: slot.into(),
        limits: choice.limits,
        pause_ms: 0,
        jitter: 0,
    };
    apply(s, &choice.provider, delta)
}

fn release(s: &mut dyn HealthStore, provider: &str, slot: &str) -> Decided {
    let delta = CapacityDelta::Release {
        at: now_ms(),
        slot: slot.into(),
    };
    apply(s, provider, delta)
}

/// `provider`'s record as a fresh handle loads it (the default when there is none).
fn record(b: &dyn Backend, provider: &str) -> Capacity {
    b.store(1.0)
        .load_capacity(now_ms())
        .expect("load capacity")
        .remove(provider)
        .unwrap_or_default()
}

fn in_flight(b: &dyn Backend, provider: &str) -> u32 {
    record(b, provider).in_flight(now_ms())
}

fn admission_takes_the_first_choice_with_room_and_overflows_past_known_limits_only(
    b: &dyn Backend,
) {
    // Two handles: two processes sharing one budget.
    let (mut one, mut two) = (b.store(1.0), b.store(1.0));
    let both = || vec![capped("a", 1), capped("b", 2)];
    let first_at = now_ms();
    assert_eq!(
        admit(&mut *one, "x1", both()),
        CapacityReply::Admitted {
            index: 0,
            limit: 1,
            in_flight: 1
        }
    );
    assert_eq!(granted_on(admit(&mut *two, "x2", both())), Some(1));
    assert_eq!(
        admit(&mut *one, "x3", both()),
        CapacityReply::Admitted {
            index: 1,
            limit: 2,
            in_flight: 2
        },
        "a capped primary that is full overflows in order"
    );
    // Every choice full: when the first lease runs out (x1's, unless renewed) is the latest a
    // waiter should look again.
    let asked_at = now_ms();
    let CapacityReply::Full { next_expiry, .. } = admit(&mut *two, "x4", both()) else {
        panic!("every choice is full");
    };
    let next = next_expiry.expect("leases are held");
    assert!(
        (first_at + DEFAULT_LEASE_TTL_MS).saturating_sub(SLACK_MS) <= next
            && next <= asked_at + DEFAULT_LEASE_TTL_MS + SLACK_MS,
        "next expiry {next}: first lease taken at {first_at}, asked at {asked_at}"
    );
    // Taking a slot already held renews it rather than taking a second one.
    assert_eq!(
        admit(&mut *one, "x1", both()),
        CapacityReply::Admitted {
            index: 0,
            limit: 1,
            in_flight: 1
        }
    );
    assert_eq!(in_flight(b, "a"), 1);
    assert_eq!(in_flight(b, "b"), 2);

    // A provider still in slow start is not full, only not yet trusted with more: the next
    // job waits for it even though the second choice is empty…
    let slow = || vec![uncapped("c"), uncapped("d")];
    assert_eq!(granted_on(admit(&mut *one, "y1", slow())), Some(0));
    assert_eq!(granted_on(admit(&mut *two, "y2", slow())), Some(0));
    assert_eq!(granted_on(admit(&mut *one, "y3", slow())), None);
    assert_eq!(in_flight(b, "d"), 0, "nothing was taken on d");
    // …until it refuses: then its limit is known, and a full c overflows to d.
    assert!(matches!(
        refused(&mut *two, &uncapped("c"), "y2"),
        Decided::Refused(Verdict::SlowDown(Change { from: 2, to: 1 }))
    ));
    assert_eq!(granted_on(admit(&mut *one, "y3", slow())), Some(1));
    // An admission that gives back the caller's previous slot in the same step.
    let moved = CapacityOp::Admit {
        slot: "y1".into(),
        ttl_ms: DEFAULT_LEASE_TTL_MS,
        choices: vec![uncapped("d")],
        release: Some((
            "c".into(),
            CapacityDelta::Release {
                at: now_ms(),
                slot: "y1".into(),
            },
        )),
        hold_first_ms: 0,
    };
    assert!(moved.frees());
    assert_eq!(
        granted_on(one.capacity(&moved, now_ms()).expect("admit")),
        Some(0)
    );
    assert_eq!((in_flight(b, "c"), in_flight(b, "d")), (0, 2));
}

fn a_slot_given_back_is_free_for_the_next_admission(b: &dyn Backend) {
    let (mut one, mut two) = (b.store(1.0), b.store(1.0));
    let both = || vec![capped("a", 1), capped("b", 1)];
    assert_eq!(granted_on(admit(&mut *one, "s1", both())), Some(0));
    assert_eq!(granted_on(admit(&mut *two, "s2", both())), Some(1));
    assert_eq!(granted_on(admit(&mut *two, "s3", both())), None);
    // A clean answer gives the slot back: the next admission goes back to the primary.
    assert!(matches!(
        answered(&mut *one, &capped("a", 1), "s1"),
        Decided::Answered(Change { from: 1, to: 1 })
    ));
    assert_eq!(granted_on(admit(&mut *two, "s3", both())), Some(0));
    // A release (no evidence either way) frees it too; releasing again finds nothing held.
    assert_eq!(release(&mut *one, "b", "s2"), Decided::Released(true));
    assert_eq!(release(&mut *two, "b", "s2"), Decided::Released(false));
    assert_eq!(granted_on(admit(&mut *one, "s4", both())), Some(1));
    // A refusal gives its slot back as well — and, refused with nothing else in flight, leaves
    // `a` alone for a back-off: the next admission goes to `b` once it has room, not to `a`.
    refused(&mut *two, &capped("a", 1), "s3");
    assert_eq!(in_flight(b, "a"), 0);
    assert_eq!(granted_on(admit(&mut *two, "s5", both())), None);
    answered(&mut *one, &capped("b", 1), "s4");
    assert_eq!(granted_on(admit(&mut *two, "s5", both())), Some(1));
    // Slots given back by whoever holds them: nothing is left behind.
    answered(&mut *two, &capped("b", 1), "s5");
    assert_eq!((in_flight(b, "a"), in_flight(b, "b")), (0, 0));
}

fn refusals_cut_the_limit_and_refusals_at_one_back_off_for_everyone(b: &dyn Backend) {
    let (mut one, mut two) = (b.store(1.0), b.store(1.0));
    let p = uncapped("p");
    // Slow start: 2, raised by each clean answer while every slot is in use.
    assert_eq!(granted_on(admit(&mut *one, "s1", vec![p.clone()])), Some(0));
    assert_eq!(granted_on(admit(&mut *two, "s2", vec![p.clone()])), Some(0));
    assert!(matches!(
        answered(&mut *one, &p, "s1"),
        Decided::Answered(Change { from: 2, to: 3 })
    ));
    for slot in ["s1", "s3"] {
        assert_eq!(granted_on(admit(&mut *one, slot, vec![p.clone()])), Some(0));
    }
    // The provider refuses the third request in flight: the limit is cut to 2 (¾ of 3, and
    // never as many as were refused), for every process.
    assert_eq!(
        refused(&mut *two, &p, "s3"),
        Decided::Refused(Verdict::SlowDown(Change { from: 3, to: 2 }))
    );
    let r = record(b, "p");
    assert_eq!((r.limit, r.congested, r.refused_at), (2, true, 3), "{r:?}");
    assert_eq!(granted_on(admit(&mut *two, "s4", vec![p.clone()])), None);
    answered(&mut *one, &p, "s1");
    answered(&mut *one, &p, "s2");
    assert_eq!(in_flight(b, "p"), 0);

    // Refused with one request in flight: not our concurrency but other clients on the key.
    // The provider is paused for a back-off, for every process sharing the store (nobody is
    // granted a slot on it until then), and the row of refusals is shared too: the next
    // refusal, by another process, backs off longer. A clean answer starts the row again.
    // (The rate limit at the end of a row is the record's unit tests' business: reaching it
    // takes half a minute of real back-off.)
    let q = capped("q", 1);
    let refuse_alone = |s: &mut dyn HealthStore, until_before: u64| {
        wait_until_ms(until_before);
        assert_eq!(granted_on(admit(s, "t", vec![q.clone()])), Some(0));
        let at = now_ms();
        (at, refused(s, &q, "t"))
    };
    let (at, first) = refuse_alone(&mut *one, 0);
    let Decided::Refused(Verdict::BackOff { until, step: 1, .. }) = first else {
        panic!("{first:?}")
    };
    let delay = pi_ccswitch_run::capacity::backoff::delay_ms(1, 0);
    assert!(
        until.abs_diff(at + delay) <= SLACK_MS,
        "{until} vs {at} + {delay}"
    );
    assert_eq!(
        granted_on(admit(&mut *two, "u", vec![q.clone()])),
        None,
        "paused for every process"
    );
    let (_, second) = refuse_alone(&mut *two, until);
    let Decided::Refused(Verdict::BackOff { until, step: 2, .. }) = second else {
        panic!("the row is shared by every process: {second:?}")
    };
    wait_until_ms(until);
    assert_eq!(granted_on(admit(&mut *one, "t", vec![q.clone()])), Some(0));
    answered(&mut *one, &q, "t");
    let (_, again) = refuse_alone(&mut *two, 0);
    assert!(
        matches!(again, Decided::Refused(Verdict::BackOff { step: 1, .. })),
        "a clean answer ends the row: {again:?}"
    );
}

/// Sleeps until the wall clock (and, within the slack, the store's) has passed `until_ms`.
fn wait_until_ms(until_ms: u64) {
    let now = now_ms();
    if until_ms > 0 {
        std::thread::sleep(Duration::from_millis(until_ms.saturating_sub(now) + 50));
    }
}

fn a_cut_limit_is_probed_up_again_after_enough_clean_answers(b: &dyn Backend) {
    let (mut one, mut two) = (b.store(1.0), b.store(1.0));
    let p = uncapped("p");
    // Two in flight (the slow start) and the second refused: the limit is cut to one, and two
    // is now the level last refused.
    assert_eq!(granted_on(admit(&mut *one, "s1", vec![p.clone()])), Some(0));
    assert_eq!(granted_on(admit(&mut *two, "s2", vec![p.clone()])), Some(0));
    assert_eq!(
        refused(&mut *two, &p, "s2"),
        Decided::Refused(Verdict::SlowDown(Change { from: 2, to: 1 }))
    );
    // Granted under the old limit: its answer is no evidence for the new one.
    assert_eq!(
        answered(&mut *one, &p, "s1"),
        Decided::Answered(Change { from: 1, to: 1 })
    );
    // Raising onto the refused level is a probe: it waits for PROBE_ANSWERS clean answers
    // at one in flight, wherever they were answered, and every handle sees the limit rise.
    for n in 1..=PROBE_ANSWERS {
        let (s, slot) = if n % 2 == 0 {
            (&mut *one, "s1")
        } else {
            (&mut *two, "s2")
        };
        assert_eq!(granted_on(admit(s, slot, vec![p.clone()])), Some(0));
        let other = if n % 2 == 0 { "s2" } else { "s1" };
        assert_eq!(
            granted_on(admit(&mut *b.store(1.0), other, vec![p.clone()])),
            None,
            "answer {n}: one in flight is the limit"
        );
        let to = if n == PROBE_ANSWERS { 2 } else { 1 };
        assert_eq!(
            answered(s, &p, slot),
            Decided::Answered(Change { from: 1, to }),
            "answer {n}"
        );
        let r = record(b, "p");
        assert_eq!(
            (r.limit, r.congested),
            (to, true),
            "after answer {n}: {r:?}"
        );
    }
    // The probe: two at once again.
    assert_eq!(granted_on(admit(&mut *one, "s1", vec![p.clone()])), Some(0));
    assert_eq!(granted_on(admit(&mut *two, "s2", vec![p.clone()])), Some(0));
    assert_eq!(in_flight(b, "p"), 2);
}

/// Takes a slot on `choice` for `slot` (asking again while it is full), holds it for `hold`
/// while counting itself in `witness`, answers. Returns the most holders the witness saw.
fn hold_once(
    s: &mut dyn HealthStore,
    choice: &Choice,
    slot: &str,
    hold: Duration,
    mut witness: impl FnMut(i32) -> u32,
) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match admit(s, slot, vec![choice.clone()]) {
            CapacityReply::Admitted {
                limit, in_flight, ..
            } => {
                assert!(in_flight <= limit, "{in_flight} of {limit}");
                break;
            }
            CapacityReply::Full { .. } => {
                assert!(Instant::now() < deadline, "no slot for 30 s");
                std::thread::sleep(Duration::from_millis(1));
            }
            other => panic!("{other:?}"),
        }
    }
    // Counted in only while the store says the slot is ours: the witness never sees more
    // holders than the store granted slots.
    let seen = witness(1);
    std::thread::sleep(hold);
    witness(-1);
    assert!(matches!(answered(s, choice, slot), Decided::Answered(_)));
    seen
}

const CAP: u32 = 3;

fn threads_never_hold_more_slots_than_the_limit_together(b: &dyn Backend) {
    let holders = AtomicU32::new(0);
    let p = capped("p", CAP);
    let most = together(b, 6, 1.0, |i, s| {
        let mut most = 0;
        for n in 0..12 {
            most = most.max(hold_once(
                s,
                &p,
                &format!("t{i}:{n}"),
                Duration::from_millis(2),
                |d| {
                    if d > 0 {
                        holders.fetch_add(1, Ordering::SeqCst) + 1
                    } else {
                        holders.fetch_sub(1, Ordering::SeqCst) - 1
                    }
                },
            ));
        }
        most
    });
    let most = most.into_iter().max().unwrap_or(0);
    eprintln!("6 threads, cap {CAP}: at most {most} slots held at once");
    assert!((2..=CAP).contains(&most), "{most} held at once");
    assert_eq!(in_flight(b, "p"), 0, "every slot came back");
}

const ENV_WORKER: &str = "PCR_CAPACITY_WORKER";
const ENV_AT: &str = "PCR_CAPACITY_AT";
const ENV_WITNESS: &str = "PCR_CAPACITY_WITNESS";
const ENV_ID: &str = "PCR_CAPACITY_ID";
const WORKER_THREADS: usize = 2;
const WORKER_SLOTS: usize = 10;

/// Adds `d` to the holder count in `path` under its lock (shared by every worker process);
/// returns the count after.
fn witness_file(path: &str, d: i32) -> u32 {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("witness file");
    f.lock().expect("lock witness");
    let mut text = String::new();
    f.read_to_string(&mut text).expect("read witness");
    let n = text.trim().parse::<i32>().unwrap_or(0) + d;
    f.set_len(0).expect("truncate");
    f.rewind().expect("rewind");
    write!(f, "{n}").expect("write witness");
    u32::try_from(n).expect("never below zero")
}

/// A worker process of `processes_never_hold_more_slots_than_the_limit_together`: opens the
/// store it is told to, waits for stdin to close, takes and answers slots on two threads.
#[test]
#[ignore = "a worker process of processes_never_hold_more_slots_than_the_limit_together"]
fn capacity_worker() {
    let kind = worker_order(ENV_WORKER);
    let at = worker_order(ENV_AT);
    let witness = worker_order(ENV_WITNESS);
    let id = worker_order(ENV_ID);
    let mut stores: Vec<_> = (0..WORKER_THREADS)
        .map(|_| open_store(&kind, &at))
        .collect();
    let mut sink = Vec::new();
    std::io::stdin()
        .read_to_end(&mut sink)
        .expect("start signal");
    let p = capped("p", CAP);
    let most = std::thread::scope(|s| {
        let handles: Vec<_> = stores
            .iter_mut()
            .enumerate()
            .map(|(t, store)| {
                let (p, witness, id) = (&p, &witness, &id);
                s.spawn(move || {
                    (0..WORKER_SLOTS)
                        .map(|n| {
                            hold_once(
                                store.as_mut(),
                                p,
                                &format!("{id}:{t}:{n}"),
                                Duration::from_millis(3),
                                |d| witness_file(witness, d),
                            )
                        })
                        .max()
                        .unwrap_or(0)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread"))
            .max()
            .unwrap_or(0)
    });
    // On a line of its own: the test harness prints its own words before it.
    println!("\nmost={most}");
}

fn processes_never_hold_more_slots_than_the_limit_together(b: &dyn SharedBackend) {
    let (kind, at) = b.worker_orders();
    let dir = tempfile::tempdir().expect("temp dir");
    let witness = dir.path().join("holders");
    std::fs::write(&witness, "0").expect("witness");
    let mut children: Vec<_> = (0..3)
        .map(|id| {
            worker_process(module_path!(), "capacity_worker")
                .env(ENV_WORKER, kind)
                .env(ENV_AT, &at)
                .env(ENV_WITNESS, &witness)
                .env(ENV_ID, format!("proc{id}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    for c in &mut children {
        drop(c.stdin.take());
    }
    let mut most = 0;
    for c in children {
        let out = c.wait_with_output().expect("worker");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker failed\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n: u32 = stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("most="))
            .expect("the worker says what it saw")
            .parse()
            .expect("a count");
        most = most.max(n);
    }
    eprintln!("3 processes × {WORKER_THREADS} threads, cap {CAP}: at most {most} held at once");
    assert!((1..=CAP).contains(&most), "{most} held at once");
    assert_eq!(in_flight(b, "p"), 0, "every slot came back");
}

fn leases_run_out_after_their_ttl_unless_renewed(b: &dyn Backend) {
    const TTL: u64 = 1_000;
    let mut holder = b.store(1.0);
    let p = capped("p", 1);
    let taken = now_ms();
    let reply = holder
        .capacity(&admit_op("held", TTL, vec![p.clone()]), taken)
        .expect("admit");
    assert_eq!(granted_on(reply), Some(0));
    let CapacityReply::Full { next_expiry, .. } = b
        .store(1.0)
        .capacity(&admit_op("other", TTL, vec![p.clone()]), now_ms())
        .expect("admit")
    else {
        panic!("the slot is held");
    };
    let next = next_expiry.expect("a lease");
    assert!(
        (taken + TTL).saturating_sub(SLACK_MS) <= next && next <= now_ms() + TTL + SLACK_MS,
        "{next} vs taken at {taken} + {TTL}"
    );
    // Renewed while its request runs: still held past the first TTL.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(TTL / 4));
        let renew = CapacityDelta::Renew {
            at: now_ms(),
            slot: "held".into(),
            ttl_ms: TTL,
        };
        assert_eq!(
            apply(&mut *holder, "p", renew),
            Decided::Renewal(Renewal::Renewed)
        );
        assert_eq!(in_flight(b, "p"), 1);
    }
    // The holder dies: its slot comes back by itself once the lease has run out.
    let renewed = Instant::now();
    drop(holder);
    while in_flight(b, "p") > 0 {
        assert!(
            renewed.elapsed() < Duration::from_secs(5),
            "the lease is still live"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "a {TTL} ms lease freed {:?} after its last renewal",
        renewed.elapsed()
    );
    let mut other = b.store(1.0);
    assert_eq!(
        granted_on(
            other
                .capacity(&admit_op("other", TTL, vec![p.clone()]), now_ms())
                .expect("admit")
        ),
        Some(0)
    );
    // A holder that stalled past its TTL renews late: its request is still at the provider,
    // so it counts again, even past the limit.
    let late = CapacityDelta::Renew {
        at: now_ms(),
        slot: "held".into(),
        ttl_ms: TTL,
    };
    assert_eq!(
        apply(&mut *other, "p", late),
        Decided::Renewal(Renewal::Restored)
    );
    assert_eq!(in_flight(b, "p"), 2);
}

fn load_capacity_lists_every_record(b: &dyn Backend) {
    let mut s = b.store(1.0);
    assert!(s.load_capacity(now_ms()).expect("load").is_empty());
    assert_eq!(
        granted_on(admit(&mut *s, "s1", vec![capped("a", 2)])),
        Some(0)
    );
    assert_eq!(
        granted_on(admit(&mut *s, "s2", vec![capped("a", 2)])),
        Some(0)
    );
    assert_eq!(
        granted_on(admit(&mut *s, "s3", vec![uncapped("b")])),
        Some(0)
    );
    refused(&mut *s, &uncapped("b"), "s3");
    assert_eq!(
        granted_on(admit(&mut *s, "s4", vec![uncapped("c")])),
        Some(0)
    );
    answered(&mut *s, &uncapped("c"), "s4");
    let records = b.store(1.0).load_capacity(now_ms()).expect("load");
    assert_eq!(
        records.keys().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b", "c"],
        "{records:?}"
    );
    let now = now_ms();
    assert_eq!(records["a"].in_flight(now), 2);
    assert!(records["a"].leases.contains_key("s1") && records["a"].leases.contains_key("s2"));
    assert_eq!((records["b"].limit, records["b"].congested), (1, true));
    assert_eq!(records["b"].in_flight(now), 0);
    assert_eq!(records["c"].in_flight(now), 0);
    assert!(records["c"].last_at >= now.saturating_sub(60_000));
}

fn reset_all_forgets_every_capacity_record(b: &dyn SharedBackend) {
    let mut s = b.store(1.0);
    assert_eq!(
        granted_on(admit(&mut *s, "s1", vec![capped("a", 2)])),
        Some(0)
    );
    assert_eq!(
        granted_on(admit(&mut *s, "s2", vec![uncapped("b")])),
        Some(0)
    );
    refused(&mut *s, &uncapped("b"), "s2");
    assert!(b.capacity_raw("a").is_some() && b.capacity_raw("b").is_some());
    // `--reset all` forgets capacity with everything else, held slots and learned limits.
    b.store(1.0).reset_all(now_ms()).expect("reset all");
    assert!(
        b.store(1.0)
            .load_capacity(now_ms())
            .expect("load")
            .is_empty()
    );
    assert_eq!(b.items(), 0, "nothing left");
    assert_eq!((b.capacity_raw("a"), b.capacity_raw("b")), (None, None));
    // And it works from there: b starts again from nothing learned.
    assert_eq!(
        granted_on(admit(&mut *s, "s1", vec![capped("a", 1)])),
        Some(0)
    );
    assert_eq!(in_flight(b, "a"), 1);
    assert_eq!(record(b, "b").limit, 0);
}

fn a_corrupt_or_foreign_record_counts_as_empty_and_is_overwritten(b: &dyn SharedBackend) {
    let ghost = format!(
        r#"{{"limit":1,"congested":true,"leases":{{"ghost":{{"until":{},"generation":0}}}}}}"#,
        u64::MAX
    );
    for raw in [
        b"\x00\xffnot json at all".to_vec(),
        b"{\"version\":1,\"providers\":{\"p\":{\"limit\":\"many\"}}}".to_vec(),
        b"{\"limit\":\"many\",\"leases\":[1,2]}".to_vec(),
        b"[1,2,3]".to_vec(),
        b"{\"version\":99,\"providers\":{}}".to_vec(),
        b"{\"versio".to_vec(),
        Vec::new(),
    ] {
        let shown = String::from_utf8_lossy(&raw).into_owned();
        b.put_capacity_raw("p", &raw);
        let mut s = b.store(1.0);
        let loaded = s
            .load_capacity(now_ms())
            .expect("a corrupt record is no error");
        assert!(
            loaded.get("p").is_none_or(|r| r.in_flight(now_ms()) == 0),
            "{shown:?}: {loaded:?}"
        );
        assert_eq!(
            admit(&mut *s, "s", vec![capped("p", 1)]),
            CapacityReply::Admitted {
                index: 0,
                limit: 1,
                in_flight: 1
            },
            "{shown:?}"
        );
        let stored = b.capacity_raw("p").expect("written back");
        assert_ne!(stored, raw, "{shown:?} was overwritten");
        assert!(
            String::from_utf8_lossy(&stored).contains("\"leases\""),
            "{shown:?}: {}",
            String::from_utf8_lossy(&stored)
        );
        assert_eq!(in_flight(b, "p"), 1, "{shown:?}");
        answered(&mut *s, &capped("p", 1), "s");
    }
    // A record of ours a hostile writer made hold a slot forever: no lease outlives
    // MAX_LEASE_TTL_MS from the operation that sees it.
    let raw = match b.worker_orders().0 {
        "file" => format!(r#"{{"version":1,"providers":{{"p":{ghost}}}}}"#),
        _ => ghost,
    };
    b.put_capacity_raw("p", raw.as_bytes());
    let mut s = b.store(1.0);
    let asked = now_ms();
    let CapacityReply::Full { next_expiry, .. } = admit(&mut *s, "s", vec![capped("p", 1)]) else {
        panic!("the ghost's slot counts while it lasts");
    };
    let next = next_expiry.expect("the ghost's lease");
    assert!(
        next <= asked + MAX_LEASE_TTL_MS + SLACK_MS,
        "the ghost holds its slot until {next} (asked at {asked})"
    );
}

/// The file store never follows a symlink to its capacity file (or its lock): it refuses,
/// and what the link points at is left alone.
#[test]
fn a_capacity_file_that_is_a_symlink_is_refused() {
    use pi_ccswitch_run::health::store::capacity_file::CAPACITY_LOCK_FILE;
    for name in [CAPACITY_FILE, CAPACITY_LOCK_FILE] {
        let b = File::new();
        let target = b.dir.path().join("elsewhere");
        std::fs::write(&target, "precious\n").expect("target");
        std::os::unix::fs::symlink(&target, b.dir.path().join(name)).expect("symlink");
        let mut s = b.store(1.0);
        let err = s
            .capacity(&admit_op("s", 1000, vec![capped("p", 1)]), now_ms())
            .expect_err("a symlink is refused");
        assert!(matches!(err, StoreError::Symlink { .. }), "{name}: {err}");
        if name == CAPACITY_FILE {
            let err = s.load_capacity(now_ms()).expect_err("refused on load too");
            assert!(matches!(err, StoreError::Symlink { .. }), "{name}: {err}");
        }
        assert_eq!(
            std::fs::read_to_string(&target).expect("target"),
            "precious\n",
            "{name}: the link's target is untouched"
        );
        assert!(
            std::fs::symlink_metadata(b.dir.path().join(name))
                .expect("link")
                .file_type()
                .is_symlink(),
            "{name}: the link itself is left for the user"
        );
    }
}
