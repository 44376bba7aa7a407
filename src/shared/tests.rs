//! The health thread under stores that stall or never answer; the spend ledger's one entry and
//! its answers on every job's channel.

use std::sync::{Arc, Mutex};

use crate::budget::Caps;
use crate::health::store::HealthStore;
use crate::shared::SharedHandle;

/// The shared state over `store` with `caps`, the lines it warned, and a runtime for its jobs.
fn started(
    store: Box<dyn HealthStore>,
    caps: Caps,
) -> (
    SharedHandle,
    Arc<Mutex<Vec<String>>>,
    tokio::runtime::Runtime,
) {
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = warnings.clone();
    let shared = SharedHandle::start(
        store,
        None,
        1.0,
        caps,
        None,
        Box::new(move |line: &str| seen.lock().expect("warnings").push(line.to_string())),
    )
    .expect("health thread");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    (shared, warnings, runtime)
}

mod stalled {
    use std::time::Duration;

    use crate::budget::Caps;
    use crate::health::store::FileStore;
    use crate::health::{Delta, FailureClass, Scope};

    /// Issue 10: a store that stalls (here the state file's lock, held by another process for
    /// the whole test) stalls the health thread only. The single-threaded runtime that drives
    /// every batch worker keeps running its timers meanwhile: a driver that committed inline
    /// would freeze them until the lock wait gave up.
    #[test]
    fn a_stalled_store_does_not_stall_the_event_loop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).with_lock_wait(Duration::from_millis(1500));
        let _held = crate::lockfile::lock_path(&store.lock_path(), Duration::ZERO).expect("lock");
        let (health, warnings, runtime) = super::started(Box::new(store), Caps::default());
        let (link, _answers) = health.join();
        let ticks = runtime.block_on(async {
            link.record(
                1,
                Delta::Failure {
                    at: 1,
                    key: "p".into(),
                    scope: Scope::Provider,
                    class: FailureClass::Quota,
                    error: "402".into(),
                },
                1,
            );
            let flushed = health.flush_within(Duration::from_secs(30));
            tokio::pin!(flushed);
            let mut ticker = tokio::time::interval(Duration::from_millis(10));
            let mut ticks = 0u32;
            loop {
                tokio::select! {
                    () = &mut flushed => break ticks,
                    _ = ticker.tick() => ticks += 1,
                }
            }
        });
        // The commit was served (the store gave up waiting for its lock): the failure is in
        // what this process knows, and the flush came well before its 30 s limit.
        assert_eq!(health.snapshot().providers["p"].total_failures, 1);
        // ~150 in 1.5 s; an inline commit would allow one (the interval's immediate tick).
        assert!(ticks >= 20, "only {ticks} ticks while the store waited");
        let warnings = warnings.lock().expect("warnings");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("health is not shared this run"),
            "{warnings:?}"
        );
    }
}

mod budget {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crate::budget::Caps;
    use crate::failover::Input;
    use crate::health::store::{Check, Claim, HealthStore, Loaded, StoreError};
    use crate::health::{Delta, FailureClass, Health, ProbeTarget, Scope};
    use crate::shared::OP_BUDGET;

    /// A store that never answers (a Redis that drip-feeds its replies, a hung mount): every
    /// operation blocks until the test ends. Counts the operations it was given.
    struct Stuck {
        calls: Arc<Mutex<u32>>,
    }

    impl Stuck {
        fn block(&self) -> ! {
            *self.calls.lock().expect("calls") += 1;
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }

    impl HealthStore for Stuck {
        fn location(&self) -> String {
            "stuck".into()
        }
        fn load(&mut self, _: u64) -> Result<Loaded, StoreError> {
            self.block()
        }
        fn commit(&mut self, _: &[Delta], _: u64) -> Result<Loaded, StoreError> {
            self.block()
        }
        fn claim_probe(&mut self, _: &ProbeTarget, _: u64) -> Result<(Claim, Loaded), StoreError> {
            self.block()
        }
        fn update(&mut self, _: u64, _: &mut dyn FnMut(&mut Health)) -> Result<Loaded, StoreError> {
            self.block()
        }
        fn diagnose(&mut self, _: u64) -> Vec<Check> {
            Vec::new()
        }
        fn capacity(
            &mut self,
            _: &crate::capacity::ops::CapacityOp,
            _: u64,
        ) -> Result<crate::capacity::ops::CapacityReply, StoreError> {
            self.block()
        }
        fn load_capacity(
            &mut self,
            _: u64,
        ) -> Result<std::collections::BTreeMap<String, crate::capacity::Capacity>, StoreError>
        {
            self.block()
        }
    }

    fn quota(at: u64) -> Delta {
        Delta::Failure {
            at,
            key: "p".into(),
            scope: Scope::Provider,
            class: FailureClass::Quota,
            error: "402".into(),
        }
    }

    /// Issue 20: a store that never answers costs one operation its budget and then nothing:
    /// the store counts as down (one warning), later requests are answered from memory at
    /// once, the I/O thread is given no second operation, and what this process learned is
    /// still what it sees.
    #[test]
    fn a_store_that_never_answers_costs_one_budget_and_then_nothing() {
        let calls = Arc::new(Mutex::new(0));
        let stuck = Box::new(Stuck {
            calls: calls.clone(),
        });
        let (health, warnings, runtime) = super::started(stuck, Caps::default());
        runtime.block_on(async {
            let (link, mut replies) = health.join();
            let started = crate::clock::now().instant;
            link.load(1);
            let first = replies.recv().await;
            assert!(matches!(first, Some(Input::HealthLoaded(_))), "{first:?}");
            let waited = started.elapsed();
            assert!(
                waited >= OP_BUDGET && waited < OP_BUDGET + Duration::from_millis(500),
                "{waited:?}"
            );
            // From now on: at once, from memory, whatever is asked.
            let started = crate::clock::now().instant;
            for i in 0..50 {
                link.record(i, quota(i), 2);
                link.claim(ProbeTarget::new(Scope::Provider, "q"), 2);
                link.load(2);
            }
            // A commit the store did not take has nothing new to answer; claims and loads do.
            for _ in 0..100 {
                replies.recv().await.expect("reply");
            }
            assert!(
                started.elapsed() < Duration::from_millis(200),
                "{:?}",
                started.elapsed()
            );
            health.flush_within(Duration::from_millis(100)).await;
        });
        assert_eq!(
            *calls.lock().expect("calls"),
            1,
            "one operation ever reached the store"
        );
        let snapshot = health.snapshot();
        assert_eq!(
            snapshot.providers["p"].total_failures, 50,
            "memory kept every delta"
        );
        let warnings = warnings.lock().expect("warnings");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("did not answer within 1500 ms"),
            "{warnings:?}"
        );
    }
}

mod ledger {
    use crate::budget::{Caps, Crossing, Spend};
    use crate::failover::Input;
    use crate::health::store::Memory;

    fn spend_in(input: Option<Input>) -> Spend {
        match input {
            Some(Input::Spend(spend)) => spend,
            other => panic!("not a spend: {other:?}"),
        }
    }

    /// Issue 30: a cost is entered once, in the process's ledger; every job that joined gets
    /// the new spend on its one channel (the job that spent it too), a job that joins later
    /// gets the spend so far before anything else, and a cap is news once.
    #[test]
    fn a_cost_is_entered_once_and_every_job_hears_of_it() {
        let caps = Caps::parse(&["1,zai=0.5".to_string()]).expect("caps");
        let (shared, _warnings, _runtime) = super::started(Box::new(Memory::new(1.0)), caps);
        let (first, mut first_inbox) = shared.join();
        let (_second, mut second_inbox) = shared.join();
        let crossed = first.spent("zai", 0.6);
        assert!(
            matches!(crossed.as_slice(), [Crossing::Provider(p, _)] if p == "zai"),
            "{crossed:?}"
        );
        for inbox in [&mut first_inbox, &mut second_inbox] {
            let spend = spend_in(inbox.try_recv().ok());
            assert_eq!((spend.total(), spend.of("zai")), (0.6, 0.6));
        }
        // Nothing that is not a cost changes the spend, and says nothing.
        assert!(first.spent("zai", f64::NAN).is_empty());
        assert!(first_inbox.try_recv().is_err(), "no second entry");
        // The cap was news once; the total is reached by the next cost, from another job.
        let crossed = _second.spent("b", 0.5);
        assert!(
            matches!(crossed.as_slice(), [Crossing::Total(_)]),
            "{crossed:?}"
        );
        assert_eq!(spend_in(first_inbox.try_recv().ok()).total(), 1.1);
        assert!(shared.total_reached().is_some());
        // A job that joins now starts from the spend so far.
        let (_third, mut third_inbox) = shared.join();
        assert_eq!(spend_in(third_inbox.try_recv().ok()).of("b"), 0.5);
        // A job that left is not told any more (its channel is gone).
        drop(second_inbox);
        first.spent("b", 0.1);
        assert_eq!(spend_in(first_inbox.try_recv().ok()).of("b"), 0.6);
    }
}
