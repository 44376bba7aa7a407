//! The health thread: one thread per process owns the [`HealthStore`] and does every blocking
//! store operation (file locks and fsync, Redis round trips) and the run log, so the async event
//! loop that drives Pi never waits on them. Runs and batch workers talk to it through a cloneable
//! [`HealthHandle`]; requests are served in order, so a load always sees earlier commits.
//!
//! Losing shared health must never lose the answer: when the store fails (unwritable dir, lock
//! timeout, newer schema, Redis down) the thread warns once and carries on with the in-memory
//! mirror of everything this process committed. A transient failure is retried now and then
//! ([`RETRY_AFTER_MS`]), not on every request; on recovery the deltas recorded meanwhile are
//! written first, so nothing this process learned is lost.

use std::sync::mpsc as std_mpsc;
use std::thread;

use tokio::sync::{mpsc, oneshot};

use super::store::{HealthStore, Memory, StoreError, Warning};
use super::{Delta, Health};
use crate::runlog::{LogError, RunLog};

/// How long a failed store is left alone before the next attempt (wall-clock ms).
pub const RETRY_AFTER_MS: u64 = 30_000;
/// Deltas kept for replay while the store is down; the oldest go first past this.
const REPLAY_MAX: usize = 1000;

/// What the health thread sends back to a run.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The stored health after commit number `seq` of that run (other processes' updates
    /// included); `None` when the store was unavailable and nothing new was learned.
    Committed { seq: u64, health: Option<Health> },
    /// The answer to a probe-lease claim: may the run send its probe?
    Probe { granted: bool },
    /// Health read again (a run waiting for a breaker to reopen).
    Reloaded { health: Health },
}

enum Request {
    Load {
        now_ms: u64,
        reply: oneshot::Sender<Health>,
    },
    Reload {
        now_ms: u64,
        reply: mpsc::UnboundedSender<Reply>,
    },
    Commit {
        seq: u64,
        deltas: Vec<Delta>,
        now_ms: u64,
        reply: Option<mpsc::UnboundedSender<Reply>>,
    },
    Claim {
        target: crate::health::ProbeTarget,
        now_ms: u64,
        reply: mpsc::UnboundedSender<Reply>,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
    Listed {
        models: Vec<String>,
    },
}

/// A cheap, cloneable way to reach the health thread. The thread ends when every handle is
/// dropped (after serving what was already asked).
#[derive(Clone)]
pub struct HealthHandle {
    tx: std_mpsc::Sender<Request>,
}

impl HealthHandle {
    /// Starts the health thread over `store`. `warn` prints one line on stderr.
    pub fn start(
        store: Box<dyn HealthStore>,
        cooldown_scale: f64,
        log: Option<RunLog>,
        warn: Box<dyn FnMut(&str) + Send>,
    ) -> std::io::Result<HealthHandle> {
        let (tx, rx) = std_mpsc::channel();
        let mut worker = Worker {
            store,
            memory: Memory::new(cooldown_scale),
            broken: None,
            warned: false,
            replay: Vec::new(),
            log,
            log_warned: false,
            warn,
        };
        thread::Builder::new()
            .name("health".into())
            .spawn(move || {
                for request in rx {
                    worker.serve(request);
                }
            })?;
        Ok(HealthHandle { tx })
    }

    /// Health at the start of a job. If the thread is gone (it never panics, but), empty health.
    pub async fn load(&self, now_ms: u64) -> Health {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Request::Load { now_ms, reply }).is_err() {
            return Health::default();
        }
        rx.await.unwrap_or_default()
    }

    /// Queues a re-read; the health comes back on `reply` as [`Reply::Reloaded`].
    pub fn reload(&self, now_ms: u64, reply: mpsc::UnboundedSender<Reply>) {
        let _ = self.tx.send(Request::Reload { now_ms, reply });
    }

    /// Queues a commit; the merged health comes back on `reply` as [`Reply::Committed`].
    pub fn commit(
        &self,
        seq: u64,
        deltas: Vec<Delta>,
        now_ms: u64,
        reply: Option<mpsc::UnboundedSender<Reply>>,
    ) {
        let _ = self.tx.send(Request::Commit {
            seq,
            deltas,
            now_ms,
            reply,
        });
    }

    /// Queues a probe-lease claim; the answer comes back on `reply` as [`Reply::Probe`]. If the
    /// thread is gone, the claim is refused at once.
    pub fn claim(
        &self,
        target: super::ProbeTarget,
        now_ms: u64,
        reply: mpsc::UnboundedSender<Reply>,
    ) {
        let request = Request::Claim {
            target,
            now_ms,
            reply: reply.clone(),
        };
        if self.tx.send(request).is_err() {
            let _ = reply.send(Reply::Probe { granted: false });
        }
    }

    /// The models Pi lists (`provider/id`), so the store prunes records of unlisted ones first.
    pub fn note_listed(&self, models: Vec<String>) {
        let _ = self.tx.send(Request::Listed { models });
    }

    /// Waits until everything asked so far has been served (before the process exits).
    pub async fn flush(&self) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Request::Flush { reply }).is_ok() {
            let _ = rx.await;
        }
    }
}

/// Why the store is not being used right now.
struct Broken {
    since_ms: u64,
    /// A newer schema: retrying cannot help.
    permanent: bool,
}

struct Worker {
    store: Box<dyn HealthStore>,
    memory: Memory,
    broken: Option<Broken>,
    warned: bool,
    replay: Vec<Delta>,
    log: Option<RunLog>,
    log_warned: bool,
    warn: Box<dyn FnMut(&str) + Send>,
}

impl Worker {
    fn serve(&mut self, request: Request) {
        match request {
            Request::Load { now_ms, reply } => {
                let _ = reply.send(self.load(now_ms));
            }
            Request::Reload { now_ms, reply } => {
                let health = self.load(now_ms);
                let _ = reply.send(Reply::Reloaded { health });
            }
            Request::Commit {
                seq,
                deltas,
                now_ms,
                reply,
            } => {
                self.log_deltas(now_ms, &deltas);
                let health = self.commit(deltas, now_ms);
                if let Some(reply) = reply {
                    let _ = reply.send(Reply::Committed { seq, health });
                }
            }
            Request::Claim {
                target,
                now_ms,
                reply,
            } => {
                let granted = self.claim(&target, now_ms);
                let _ = reply.send(Reply::Probe { granted });
            }
            Request::Flush { reply } => {
                let _ = reply.send(());
            }
            Request::Listed { models } => self.store.note_listed(&models),
        }
    }

    /// May the store be used at `now_ms`? A broken store is retried after [`RETRY_AFTER_MS`].
    fn usable(&mut self, now_ms: u64) -> bool {
        match &self.broken {
            None => true,
            Some(b) if b.permanent => false,
            Some(b) => now_ms.saturating_sub(b.since_ms) >= RETRY_AFTER_MS,
        }
    }

    fn fail(&mut self, what: &str, e: &StoreError, now_ms: u64) {
        if !self.warned {
            (self.warn)(&format!(
                "warning: health is not shared this run ({what} failed: {e}); continuing in memory"
            ));
            self.warned = true;
        }
        let permanent = matches!(e, StoreError::NewerSchema { .. });
        self.broken = Some(Broken {
            since_ms: now_ms,
            permanent,
        });
    }

    /// The store is being tried again after a failure: write what was learned meanwhile. It
    /// counts as working again only once that (or the next operation) succeeds.
    fn recovered(&mut self, now_ms: u64) {
        if self.broken.is_none() || self.replay.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.replay);
        match self.store.commit(&pending, now_ms) {
            Ok(_) => self.broken = None,
            Err(e) => {
                self.replay = pending;
                self.fail("saving the health state", &e, now_ms);
            }
        }
    }

    fn warnings(&mut self, warnings: &[Warning]) {
        for w in warnings {
            (self.warn)(&format!("warning: {w}"));
            // Already explained: nothing will be saved, and once is enough.
            if matches!(w, Warning::NewerSchema { .. }) {
                self.warned = true;
                self.broken = Some(Broken {
                    since_ms: 0,
                    permanent: true,
                });
            }
        }
    }

    fn load(&mut self, now_ms: u64) -> Health {
        if !self.usable(now_ms) {
            return self.memory.health.clone();
        }
        self.recovered(now_ms);
        match self.store.load(now_ms) {
            Ok(loaded) => {
                if self.replay.is_empty() {
                    self.broken = None;
                }
                self.warnings(&loaded.warnings);
                // What this process learned while the store was down is not in the store yet.
                let mut health = loaded.health;
                for d in &self.replay {
                    health.apply(d, self.memory.cooldown_scale);
                }
                self.memory.health = health.clone();
                health
            }
            Err(e) => {
                self.fail("reading the health state", &e, now_ms);
                self.memory.health.clone()
            }
        }
    }

    fn commit(&mut self, deltas: Vec<Delta>, now_ms: u64) -> Option<Health> {
        for d in &deltas {
            self.memory.health.apply(d, self.memory.cooldown_scale);
        }
        if !self.usable(now_ms) {
            self.keep_for_replay(deltas);
            return None;
        }
        let mut all = std::mem::take(&mut self.replay);
        all.extend(deltas);
        match self.store.commit(&all, now_ms) {
            Ok(loaded) => {
                self.broken = None;
                self.warnings(&loaded.warnings);
                self.memory.health = loaded.health.clone();
                Some(loaded.health)
            }
            Err(e) => {
                self.fail("saving the health state", &e, now_ms);
                self.keep_for_replay(all);
                None
            }
        }
    }

    fn keep_for_replay(&mut self, deltas: Vec<Delta>) {
        if matches!(&self.broken, Some(b) if b.permanent) {
            return;
        }
        self.replay.extend(deltas);
        let excess = self.replay.len().saturating_sub(REPLAY_MAX);
        self.replay.drain(..excess);
    }

    fn claim(&mut self, target: &super::ProbeTarget, now_ms: u64) -> bool {
        if !self.usable(now_ms) {
            return self.claim_in_memory(target, now_ms);
        }
        self.recovered(now_ms);
        match self.store.claim_probe(target, now_ms) {
            Ok((claim, loaded)) => {
                if self.replay.is_empty() {
                    self.broken = None;
                }
                self.memory.health = loaded.health;
                claim.granted()
            }
            // Someone else is busy with the store: assume they may be probing.
            Err(StoreError::LockTimeout { .. }) => false,
            Err(e) => {
                self.fail("claiming a probe lease", &e, now_ms);
                self.claim_in_memory(target, now_ms)
            }
        }
    }

    fn claim_in_memory(&mut self, target: &super::ProbeTarget, now_ms: u64) -> bool {
        use super::store::HealthStore as _;
        self.memory
            .claim_probe(target, now_ms)
            .is_ok_and(|(claim, _)| claim.granted())
    }

    fn log_deltas(&mut self, now_ms: u64, deltas: &[Delta]) {
        let Some(log) = &self.log else { return };
        for d in deltas {
            let line = match d {
                Delta::Failure {
                    key,
                    scope,
                    class,
                    error,
                    ..
                } => format!("fail {} {key} ({class}): {error}", scope.as_str()),
                Delta::Switch(e) => format!("switch {} -> {} ({})", e.from, e.to, e.reason),
                Delta::Success { .. } | Delta::Lease { .. } | Delta::Release { .. } => continue,
            };
            match log.append(now_ms, &line) {
                Ok(()) => {}
                Err(e @ (LogError::Symlink(_) | LogError::NotRegular(_))) => {
                    if !self.log_warned {
                        (self.warn)(&format!("warning: {e}"));
                        self.log_warned = true;
                    }
                    return;
                }
                // The log is best effort.
                Err(LogError::Io(_)) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::{HealthHandle, Reply};
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
        let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = warnings.clone();
        let health = HealthHandle::start(
            Box::new(store),
            1.0,
            None,
            Box::new(move |line: &str| seen.lock().expect("warnings").push(line.to_string())),
        )
        .expect("health thread");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let (ticks, replied) = runtime.block_on(async move {
            let (tx, mut replies) = mpsc::unbounded_channel();
            health.commit(
                1,
                vec![Delta::Failure {
                    at: 1,
                    key: "p".into(),
                    scope: Scope::Provider,
                    class: FailureClass::Quota,
                    error: "402".into(),
                }],
                1,
                Some(tx),
            );
            let mut ticker = tokio::time::interval(Duration::from_millis(10));
            let mut ticks = 0u32;
            loop {
                tokio::select! {
                    reply = replies.recv() => break (ticks, reply),
                    _ = ticker.tick() => ticks += 1,
                }
            }
        });
        assert!(
            matches!(replied, Some(Reply::Committed { seq: 1, .. })),
            "{replied:?}"
        );
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
