//! The health thread under stores that stall or never answer.

mod stalled {
    use std::time::Duration;

    use crate::budget::Caps;
    use crate::health::store::FileStore;
    use crate::health::{Delta, FailureClass, Scope};
    use crate::shared::SharedHandle;

    /// Issue 10: a store that stalls (here the state file's lock, held by another process for
    /// the whole test) stalls the health thread only. The single-threaded runtime that drives
    /// every batch worker keeps running its timers meanwhile: a driver that committed inline
    /// would freeze them until the lock wait gave up.
    #[test]
    fn a_stalled_store_does_not_stall_the_event_loop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::open(dir.path()).with_lock_wait(Duration::from_millis(1500));
        let _held = crate::lockfile::lock_path(&store.lock_path(), Duration::ZERO).expect("lock");
        let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = warnings.clone();
        let health = SharedHandle::start(
            Box::new(store),
            None,
            1.0,
            Caps::default(),
            None,
            Box::new(move |line: &str| seen.lock().expect("warnings").push(line.to_string())),
        )
        .expect("health thread");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
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
    use crate::shared::{OP_BUDGET, SharedHandle};

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
        let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = warnings.clone();
        let health = SharedHandle::start(
            Box::new(Stuck {
                calls: calls.clone(),
            }),
            None,
            1.0,
            Caps::default(),
            None,
            Box::new(move |line: &str| seen.lock().expect("warnings").push(line.to_string())),
        )
        .expect("health thread");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
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
