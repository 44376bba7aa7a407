//! The health thread: one thread per process that every run and batch worker talks to
//! through a cloneable [`HealthHandle`], so the async event loop that drives Pi never waits on
//! the store (file locks and fsync, Redis round trips). Requests are served in order, so a load
//! always sees earlier commits.
//!
//! The store itself is driven from a second thread, the I/O thread, one operation at a time,
//! and the health thread waits for each operation at most [`OP_BUDGET`]. A store that blows the
//! budget (a Redis that answers slowly, or a byte at a time, or not at all; a state file behind
//! a hung mount) counts as down: the health thread warns once and carries on with the in-memory
//! mirror of everything this process learned, and the operation still under way is left to end
//! on its own — the I/O thread takes no new one until it has, so nothing piles up, however the
//! store behaves. A slow store therefore costs each operation at most the budget, and nothing at
//! all while it counts as down.
//!
//! Losing shared health must never lose the answer: when the store fails (unwritable dir, lock
//! timeout, newer schema, Redis down or slow) the thread warns once and carries on in memory. A
//! transient failure is retried now and then ([`RETRY_AFTER_MS`]), not on every request; on
//! recovery the deltas recorded meanwhile are written first, so nothing this process learned is
//! lost (and nothing is written twice: a commit that timed out but then went through is taken
//! out of the replay).
//!
//! Every successful operation refreshes the mirror ([`HealthHandle::snapshot`]), and a load
//! asked for while the mirror is fresher than [`FRESH_FOR`] is answered from it: the jobs of a
//! batch start from what the last job read or wrote, without a round trip each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use tokio::sync::{mpsc, oneshot, watch};

use super::store::{Claim, HealthStore, Loaded, Memory, StoreError, Warning};
use super::{Delta, Health};
use crate::capacity::Capacity;
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::clock;
use crate::runlog::{LogError, RunLog};

mod capacity;

/// How long a failed store is left alone before the next attempt (wall-clock ms).
pub const RETRY_AFTER_MS: u64 = 30_000;
/// The longest one store operation may take before the store counts as down. Above the
/// state file's in-run lock wait (1 s), so contention alone never reads as an outage.
pub const OP_BUDGET: Duration = Duration::from_millis(1500);
/// A load asked for within this time of the last successful store operation is answered from
/// the mirror.
pub const FRESH_FOR: Duration = Duration::from_millis(1000);
/// At most this many queued commits are merged into one store commit.
const MAX_COALESCED: usize = 64;
/// Deltas kept for replay while the store is down; the oldest go first past this.
const REPLAY_MAX: usize = 1000;

/// What the health thread sends back to a run.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Health for the start of a run or job (from the store, or the mirror when the store is
    /// down or was read a moment ago).
    Loaded { health: Health },
    /// The stored health after commit number `seq` of that run (other processes' updates
    /// included); `None` when the store was unavailable and nothing new was learned.
    Committed { seq: u64, health: Option<Health> },
    /// The answer to a probe-lease claim: may the run send its probe?
    Probe { granted: bool },
    /// Health read again (a run waiting for a breaker to reopen).
    Reloaded { health: Health },
    /// What capacity operation `id` of that run came to.
    Capacity { id: u64, reply: CapacityReply },
}

enum Request {
    Load {
        now_ms: u64,
        reply: mpsc::UnboundedSender<Reply>,
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
    Capacity {
        id: u64,
        op: CapacityOp,
        now_ms: u64,
        reply: Option<mpsc::UnboundedSender<Reply>>,
    },
    LoadCapacity {
        now_ms: u64,
        reply: oneshot::Sender<BTreeMap<String, Capacity>>,
    },
}

/// What this process knows of health, readable without the health thread.
#[derive(Debug, Default)]
struct Mirror {
    health: Health,
    /// When the store last answered (None: never).
    fresh_at: Option<Instant>,
}

/// A cheap, cloneable way to reach the health thread. The thread ends when every handle is
/// dropped (after serving what was already asked).
#[derive(Clone)]
pub struct HealthHandle {
    tx: std_mpsc::Sender<Request>,
    /// Capacity operations go to a thread (and store connection) of their own when there is
    /// one: a slot must not wait behind breaker commits, each a few round trips to a store
    /// that may be far away.
    capacity_tx: Option<std_mpsc::Sender<Request>>,
    mirror: Arc<Mutex<Mirror>>,
    /// Bumped whenever this process gives a capacity slot back: a run waiting for one looks
    /// again at once instead of at its next poll.
    slots: Arc<watch::Sender<u64>>,
}

impl HealthHandle {
    /// Starts the health thread (and its I/O thread) over `store`, and a second pair over
    /// `capacity_store` for capacity operations when one is given (the same store opened
    /// again). `warn` prints one line on stderr; "health is not shared" is said once for both.
    pub fn start(
        store: Box<dyn HealthStore>,
        capacity_store: Option<Box<dyn HealthStore>>,
        cooldown_scale: f64,
        log: Option<RunLog>,
        warn: Box<dyn FnMut(&str) + Send>,
    ) -> std::io::Result<HealthHandle> {
        let (tx, rx) = std_mpsc::channel();
        let mirror = Arc::new(Mutex::new(Mirror::default()));
        let slots = Arc::new(watch::channel(0u64).0);
        let warn = Arc::new(Mutex::new(warn));
        let warned = Arc::new(AtomicBool::new(false));
        let worker = |store, mirror, log| -> std::io::Result<Worker> {
            Ok(Worker {
                slots: Arc::clone(&slots),
                io: Io::start(store)?,
                memory: Memory::new(cooldown_scale),
                mirror,
                broken: None,
                warned: Arc::clone(&warned),
                replay: Vec::new(),
                log,
                log_warned: false,
                warn: Arc::clone(&warn),
                budget: OP_BUDGET,
            })
        };
        let capacity_tx = match capacity_store {
            Some(store) => {
                // Its own mirror: it learns no breakers, and must not overwrite theirs.
                let mut worker = worker(store, Arc::new(Mutex::new(Mirror::default())), None)?;
                let (ctx, crx) = std_mpsc::channel::<Request>();
                // Connects (and reads the records) while Pi starts, so the first slot does not
                // pay for the connection.
                let _ = ctx.send(Request::LoadCapacity {
                    now_ms: clock::now().wall_ms,
                    reply: oneshot::channel().0,
                });
                thread::Builder::new()
                    .name("health-capacity".into())
                    .spawn(move || {
                        for request in crx {
                            worker.serve(request);
                        }
                    })?;
                Some(ctx)
            }
            None => None,
        };
        let mut worker = worker(store, Arc::clone(&mirror), log)?;
        thread::Builder::new()
            .name("health".into())
            .spawn(move || {
                let mut next = rx.recv().ok();
                while let Some(request) = next.take() {
                    next = match request {
                        // Commits queued behind each other go to the store as one: each
                        // costs round trips, and a batch records several per job.
                        Request::Commit { .. } => worker.serve_commits(request, &rx),
                        other => {
                            worker.serve(other);
                            None
                        }
                    }
                    .or_else(|| rx.recv().ok());
                }
            })?;
        Ok(HealthHandle {
            tx,
            capacity_tx,
            mirror,
            slots,
        })
    }

    /// Queues capacity operation `id`; with `reply`, its outcome comes back as
    /// [`Reply::Capacity`]. If the thread is gone, the answer is [`CapacityReply::Unavailable`].
    pub fn capacity(
        &self,
        id: u64,
        op: CapacityOp,
        now_ms: u64,
        reply: Option<mpsc::UnboundedSender<Reply>>,
    ) {
        let request = Request::Capacity {
            id,
            op,
            now_ms,
            reply: reply.clone(),
        };
        if self.capacity_sender().send(request).is_err()
            && let Some(reply) = reply
        {
            let _ = reply.send(Reply::Capacity {
                id,
                reply: CapacityReply::Unavailable,
            });
        }
    }

    /// Every provider's capacity record as the store (or, when it is down, this process) has
    /// it; empty if the thread is gone or does not answer within `limit`.
    pub async fn load_capacity(&self, now_ms: u64, limit: Duration) -> BTreeMap<String, Capacity> {
        let (reply, rx) = oneshot::channel();
        if self
            .capacity_sender()
            .send(Request::LoadCapacity { now_ms, reply })
            .is_err()
        {
            return BTreeMap::new();
        }
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(records)) => records,
            _ => BTreeMap::new(),
        }
    }

    fn capacity_sender(&self) -> &std_mpsc::Sender<Request> {
        self.capacity_tx.as_ref().unwrap_or(&self.tx)
    }

    /// Changes whenever this process gives a capacity slot back.
    pub fn slot_events(&self) -> watch::Receiver<u64> {
        self.slots.subscribe()
    }

    /// Health as this process knows it right now (what the store last said plus what this
    /// process recorded since); never waits.
    pub fn snapshot(&self) -> Health {
        self.mirror
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .health
            .clone()
    }

    /// Queues a load for the start of a run or job; it comes back on `reply` as
    /// [`Reply::Loaded`]. If the thread is gone, the snapshot comes back at once.
    pub fn load(&self, now_ms: u64, reply: mpsc::UnboundedSender<Reply>) {
        let request = Request::Load {
            now_ms,
            reply: reply.clone(),
        };
        if self.tx.send(request).is_err() {
            let _ = reply.send(Reply::Loaded {
                health: self.snapshot(),
            });
        }
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

    /// Waits until everything asked so far has been served, but at most `limit` (writes after
    /// an answer must never hold the process past its deadline; what is not written by then is
    /// lost, as with a store that is down).
    pub async fn flush_within(&self, limit: Duration) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Request::Flush { reply }).is_ok() {
            let _ = tokio::time::timeout(limit, rx).await;
        }
    }
}

/// Why the store is not being used right now.
struct Broken {
    since_ms: u64,
    /// A newer schema: retrying cannot help.
    permanent: bool,
}

/// One store operation for the I/O thread.
enum Op {
    Load {
        now_ms: u64,
    },
    Commit {
        deltas: Vec<Delta>,
        now_ms: u64,
    },
    Claim {
        target: crate::health::ProbeTarget,
        now_ms: u64,
    },
    Listed {
        models: Vec<String>,
    },
    Capacity {
        op: CapacityOp,
        now_ms: u64,
    },
    LoadCapacity {
        now_ms: u64,
    },
}

/// What an operation came to.
enum Done {
    Loaded(Result<Loaded, StoreError>),
    Committed(Result<Loaded, StoreError>),
    Claimed(Result<(Claim, Loaded), StoreError>),
    Listed,
    Capacity(Result<CapacityReply, StoreError>),
    CapacityLoaded(Result<BTreeMap<String, Capacity>, StoreError>),
}

/// The I/O thread and the one operation it may have under way.
struct Io {
    ops: std_mpsc::Sender<(u64, Op, Instant)>,
    done: std_mpsc::Receiver<(u64, Done)>,
    next_id: u64,
    /// The operation still under way after its budget ran out, if any.
    overdue: Option<u64>,
}

impl Io {
    fn start(mut store: Box<dyn HealthStore>) -> std::io::Result<Io> {
        let (ops, rx) = std_mpsc::channel::<(u64, Op, Instant)>();
        let (tx, done) = std_mpsc::channel();
        thread::Builder::new()
            .name("health-io".into())
            .spawn(move || {
                for (id, op, deadline) in rx {
                    store.set_deadline(Some(deadline));
                    let result = match op {
                        Op::Load { now_ms } => Done::Loaded(store.load(now_ms)),
                        Op::Commit { deltas, now_ms } => {
                            Done::Committed(store.commit(&deltas, now_ms))
                        }
                        Op::Claim { target, now_ms } => {
                            Done::Claimed(store.claim_probe(&target, now_ms))
                        }
                        Op::Listed { models } => {
                            store.note_listed(&models);
                            Done::Listed
                        }
                        Op::Capacity { op, now_ms } => Done::Capacity(store.capacity(&op, now_ms)),
                        Op::LoadCapacity { now_ms } => {
                            Done::CapacityLoaded(store.load_capacity(now_ms))
                        }
                    };
                    if tx.send((id, result)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Io {
            ops,
            done,
            next_id: 0,
            overdue: None,
        })
    }
}

/// How an operation ended, for the health thread.
enum Outcome {
    Done(Done),
    /// The budget ran out (or the I/O thread is still busy with an overdue operation).
    Slow,
}

/// The one line-printer both health threads warn through.
type SharedWarn = Arc<Mutex<Box<dyn FnMut(&str) + Send>>>;

struct Worker {
    slots: Arc<watch::Sender<u64>>,
    io: Io,
    memory: Memory,
    mirror: Arc<Mutex<Mirror>>,
    broken: Option<Broken>,
    /// Shared by the health and capacity threads: the user hears it once.
    warned: Arc<AtomicBool>,
    /// Deltas not yet in the store, with the id of the commit that carried them last.
    replay: Vec<(u64, Delta)>,
    log: Option<RunLog>,
    log_warned: bool,
    warn: SharedWarn,
    budget: Duration,
}

impl Worker {
    fn serve(&mut self, request: Request) {
        match request {
            Request::Load { now_ms, reply } => {
                let health = if self.fresh() {
                    self.memory.health.clone()
                } else {
                    self.load(now_ms)
                };
                let _ = reply.send(Reply::Loaded { health });
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
            Request::Listed { models } => {
                if self.usable(clock::now().wall_ms) {
                    // Best effort: pruning can wait for another run.
                    let _ = self.run(Op::Listed { models });
                }
            }
            Request::Capacity {
                id,
                op,
                now_ms,
                reply,
            } => {
                let frees = op.frees();
                let answer = self.capacity(op, now_ms);
                if let Some(reply) = reply {
                    let _ = reply.send(Reply::Capacity { id, reply: answer });
                }
                if frees {
                    self.slots.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
            Request::LoadCapacity { now_ms, reply } => {
                let _ = reply.send(self.load_capacity(now_ms));
            }
        }
        self.publish();
    }

    /// Serves `first` (a commit) and every commit queued right behind it in one store commit,
    /// in order; returns the request that ended the run of commits, if any.
    fn serve_commits(
        &mut self,
        first: Request,
        rx: &std_mpsc::Receiver<Request>,
    ) -> Option<Request> {
        let mut batch = vec![first];
        let mut after = None;
        while batch.len() < MAX_COALESCED {
            match rx.try_recv() {
                Ok(r @ Request::Commit { .. }) => batch.push(r),
                Ok(other) => {
                    after = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let mut deltas = Vec::new();
        let mut replies = Vec::new();
        let mut last_now = 0;
        for r in batch {
            if let Request::Commit {
                seq,
                deltas: d,
                now_ms,
                reply,
            } = r
            {
                self.log_deltas(now_ms, &d);
                deltas.extend(d);
                last_now = last_now.max(now_ms);
                replies.push((seq, reply));
            }
        }
        let health = self.commit(deltas, last_now);
        for (seq, reply) in replies {
            if let Some(reply) = reply {
                let _ = reply.send(Reply::Committed {
                    seq,
                    health: health.clone(),
                });
            }
        }
        self.publish();
        after
    }

    /// Copies what this process knows into the mirror.
    fn publish(&self) {
        let mut m = self.mirror.lock().unwrap_or_else(PoisonError::into_inner);
        m.health.clone_from(&self.memory.health);
    }

    /// The store answered a moment ago: a load can be served from memory.
    fn fresh(&self) -> bool {
        let m = self.mirror.lock().unwrap_or_else(PoisonError::into_inner);
        m.fresh_at
            .is_some_and(|t| clock::now().instant.saturating_duration_since(t) < FRESH_FOR)
    }

    fn answered(&self) {
        let mut m = self.mirror.lock().unwrap_or_else(PoisonError::into_inner);
        m.fresh_at = Some(clock::now().instant);
    }

    /// Runs one store operation within the budget.
    fn run(&mut self, op: Op) -> Outcome {
        self.collect_overdue(Duration::ZERO);
        if self.io.overdue.is_some() {
            return Outcome::Slow;
        }
        self.io.next_id += 1;
        let id = self.io.next_id;
        let deadline = clock::now().instant + self.budget;
        if self.io.ops.send((id, op, deadline)).is_err() {
            return Outcome::Slow;
        }
        loop {
            let left = deadline.saturating_duration_since(clock::now().instant);
            match self.io.done.recv_timeout(left) {
                Ok((got, done)) if got == id => return Outcome::Done(done),
                // Cannot happen (one operation at a time), but a stray answer is not ours.
                Ok(_) => {}
                Err(_) => {
                    self.io.overdue = Some(id);
                    return Outcome::Slow;
                }
            }
        }
    }

    /// Takes the answer of an overdue operation if it has come (waiting at most `wait`): the
    /// I/O thread is free again, and a commit that went through leaves the replay.
    fn collect_overdue(&mut self, wait: Duration) {
        let Some(id) = self.io.overdue else { return };
        if let Ok((got, done)) = self.io.done.recv_timeout(wait)
            && got == id
        {
            self.io.overdue = None;
            if let Done::Committed(Ok(_)) = done {
                self.replay.retain(|(carried_by, _)| *carried_by != id);
            }
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

    fn say(&self, line: &str) {
        let mut warn = self.warn.lock().unwrap_or_else(PoisonError::into_inner);
        (*warn)(line);
    }

    fn fail(&mut self, what: &str, e: &StoreError, now_ms: u64) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            self.say(&format!(
                "warning: health is not shared this run ({what} failed: {e}); continuing in memory"
            ));
        }
        let permanent = matches!(e, StoreError::NewerSchema { .. });
        self.broken = Some(Broken {
            since_ms: now_ms,
            permanent,
        });
    }

    /// The store blew its budget: down, like a failed one.
    fn slow(&mut self, what: &str, now_ms: u64) {
        let e = StoreError::Slow {
            budget: self.budget,
        };
        self.fail(what, &e, now_ms);
    }

    /// The store is being tried again after a failure: write what was learned meanwhile. It
    /// counts as working again only once that (or the next operation) succeeds.
    fn recovered(&mut self, now_ms: u64) {
        if self.broken.is_none() || self.replay.is_empty() {
            return;
        }
        let pending: Vec<Delta> = self.replay.iter().map(|(_, d)| d.clone()).collect();
        let id = self.io.next_id + 1;
        match self.run(Op::Commit {
            deltas: pending,
            now_ms,
        }) {
            Outcome::Done(Done::Committed(Ok(_))) => {
                self.replay.clear();
                self.broken = None;
                self.answered();
            }
            Outcome::Done(Done::Committed(Err(e))) => {
                self.fail("saving the health state", &e, now_ms);
            }
            Outcome::Done(_) => {}
            Outcome::Slow => {
                for (carried_by, _) in &mut self.replay {
                    *carried_by = id;
                }
                self.slow("saving the health state", now_ms);
            }
        }
    }

    fn warnings(&mut self, warnings: &[Warning]) {
        for w in warnings {
            self.say(&format!("warning: {w}"));
            // Already explained: nothing will be saved, and once is enough.
            if matches!(w, Warning::NewerSchema { .. }) {
                self.warned.store(true, Ordering::Relaxed);
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
        if !self.usable(now_ms) {
            return self.memory.health.clone();
        }
        match self.run(Op::Load { now_ms }) {
            Outcome::Done(Done::Loaded(Ok(loaded))) => {
                if self.replay.is_empty() {
                    self.broken = None;
                }
                self.answered();
                self.warnings(&loaded.warnings);
                // What this process learned while the store was down is not in the store yet.
                let mut health = loaded.health;
                for (_, d) in &self.replay {
                    health.apply(d, self.memory.cooldown_scale);
                }
                self.memory.health = health.clone();
                health
            }
            Outcome::Done(Done::Loaded(Err(e))) => {
                self.fail("reading the health state", &e, now_ms);
                self.memory.health.clone()
            }
            Outcome::Done(_) => self.memory.health.clone(),
            Outcome::Slow => {
                self.slow("reading the health state", now_ms);
                self.memory.health.clone()
            }
        }
    }

    fn commit(&mut self, deltas: Vec<Delta>, now_ms: u64) -> Option<Health> {
        for d in &deltas {
            self.memory.health.apply(d, self.memory.cooldown_scale);
        }
        if !self.usable(now_ms) {
            self.keep_for_replay(deltas, 0);
            return None;
        }
        let id = self.io.next_id + 1;
        let mut all: Vec<Delta> = std::mem::take(&mut self.replay)
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        all.extend(deltas);
        match self.run(Op::Commit {
            deltas: all.clone(),
            now_ms,
        }) {
            Outcome::Done(Done::Committed(Ok(loaded))) => {
                self.broken = None;
                self.answered();
                self.warnings(&loaded.warnings);
                self.memory.health = loaded.health.clone();
                Some(loaded.health)
            }
            Outcome::Done(Done::Committed(Err(e))) => {
                self.fail("saving the health state", &e, now_ms);
                self.keep_for_replay(all, 0);
                None
            }
            Outcome::Done(_) => None,
            Outcome::Slow => {
                self.slow("saving the health state", now_ms);
                // If the overdue commit goes through after all, these leave the replay.
                self.keep_for_replay(all, id);
                None
            }
        }
    }

    fn keep_for_replay(&mut self, deltas: Vec<Delta>, carried_by: u64) {
        if matches!(&self.broken, Some(b) if b.permanent) {
            return;
        }
        self.replay
            .extend(deltas.into_iter().map(|d| (carried_by, d)));
        let excess = self.replay.len().saturating_sub(REPLAY_MAX);
        self.replay.drain(..excess);
    }

    fn claim(&mut self, target: &super::ProbeTarget, now_ms: u64) -> bool {
        if !self.usable(now_ms) {
            return self.claim_in_memory(target, now_ms);
        }
        self.recovered(now_ms);
        if !self.usable(now_ms) {
            return self.claim_in_memory(target, now_ms);
        }
        match self.run(Op::Claim {
            target: target.clone(),
            now_ms,
        }) {
            Outcome::Done(Done::Claimed(Ok((claim, loaded)))) => {
                if self.replay.is_empty() {
                    self.broken = None;
                }
                self.answered();
                self.memory.health = loaded.health;
                claim.granted()
            }
            // Someone else is busy with the store: assume they may be probing.
            Outcome::Done(Done::Claimed(Err(StoreError::LockTimeout { .. }))) => false,
            Outcome::Done(Done::Claimed(Err(e))) => {
                self.fail("claiming a probe lease", &e, now_ms);
                self.claim_in_memory(target, now_ms)
            }
            Outcome::Done(_) => false,
            Outcome::Slow => {
                self.slow("claiming a probe lease", now_ms);
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
                Delta::Stated {
                    key, scope, reset, ..
                } => format!(
                    "stated {} {key}: reopens at {} (+{} ms spread): {}",
                    scope.as_str(),
                    crate::timefmt::iso_utc(reset.at_ms),
                    reset.spread_ms,
                    reset.words
                ),
                Delta::Switch(e) => format!("switch {} -> {} ({})", e.from, e.to, e.reason),
                Delta::Success { .. }
                | Delta::Lease { .. }
                | Delta::Release { .. }
                | Delta::SkippedStart
                | Delta::Pace { .. } => continue,
            };
            match log.append(now_ms, &line) {
                Ok(()) => {}
                Err(e @ (LogError::Symlink(_) | LogError::NotRegular(_))) => {
                    if !self.log_warned {
                        self.say(&format!("warning: {e}"));
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
            None,
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

#[cfg(test)]
mod budget_tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::{HealthHandle, OP_BUDGET, Reply};
    use crate::health::store::{Check, Claim, HealthStore, Loaded, StoreError};
    use crate::health::{Delta, FailureClass, Health, ProbeTarget, Scope};

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
            _: &super::CapacityOp,
            _: u64,
        ) -> Result<super::CapacityReply, StoreError> {
            self.block()
        }
        fn load_capacity(
            &mut self,
            _: u64,
        ) -> Result<super::BTreeMap<String, super::Capacity>, StoreError> {
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
        let health = HealthHandle::start(
            Box::new(Stuck {
                calls: calls.clone(),
            }),
            None,
            1.0,
            None,
            Box::new(move |line: &str| seen.lock().expect("warnings").push(line.to_string())),
        )
        .expect("health thread");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let (tx, mut replies) = mpsc::unbounded_channel();
            let started = crate::clock::now().instant;
            health.load(1, tx.clone());
            let first = replies.recv().await;
            assert!(matches!(first, Some(Reply::Loaded { .. })), "{first:?}");
            let waited = started.elapsed();
            assert!(
                waited >= OP_BUDGET && waited < OP_BUDGET + Duration::from_millis(500),
                "{waited:?}"
            );
            // From now on: at once, from memory, whatever is asked.
            let started = crate::clock::now().instant;
            for i in 0..50 {
                health.commit(i, vec![quota(i)], 2, Some(tx.clone()));
                health.claim(ProbeTarget::new(Scope::Provider, "q"), 2, tx.clone());
                health.load(2, tx.clone());
            }
            for _ in 0..150 {
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
