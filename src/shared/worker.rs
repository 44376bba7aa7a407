//! The health thread's worker: serves what jobs ask, one request at a time, through the I/O
//! thread that drives the store within [`super::OP_BUDGET`] per operation; keeps the in-memory
//! mirror and the replay of what the store has not taken yet.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::capacity::Capacity;
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::clock;
use crate::failover::Input;
use crate::health::ProbeTarget;
use crate::health::store::{Claim, HealthStore, Loaded, Memory, StoreError, StoreWarning};
use crate::health::{Delta, Health};
use crate::runlog::{LogError, RunLog};

/// How long a failed store is left alone before the next attempt (wall-clock ms).
pub const RETRY_AFTER_MS: u64 = 30_000;
/// The longest one store operation may take before the store counts as down. Above the
/// state file's in-run lock wait (1 s), so contention alone never reads as an outage.
pub const OP_BUDGET: Duration = Duration::from_millis(1500);
/// A load asked for within this time of the last successful store operation is answered from
/// the mirror.
pub const FRESH_FOR: Duration = Duration::from_millis(1000);

/// Where a job's answers go: its channel of machine inputs.
pub(super) type Answers = mpsc::UnboundedSender<Input>;

/// What a job asks the health (or capacity) thread.
pub(super) enum Asked {
    Load {
        now_ms: u64,
        reply: Answers,
    },
    Reload {
        now_ms: u64,
        reply: Answers,
    },
    Commit {
        seq: u64,
        deltas: Vec<Delta>,
        now_ms: u64,
        reply: Option<Answers>,
    },
    Claim {
        target: ProbeTarget,
        now_ms: u64,
        reply: Answers,
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
        reply: Option<Answers>,
    },
    LoadCapacity {
        now_ms: u64,
        reply: oneshot::Sender<BTreeMap<String, Capacity>>,
    },
}

/// What this process knows of health, readable without the health thread.
#[derive(Debug, Default)]
pub(super) struct Mirror {
    pub(super) health: Health,
    /// When the store last answered (None: never).
    pub(super) fresh_at: Option<Instant>,
}

/// The jobs that joined and have not ended: where a slot given back or a new spend is told.
#[derive(Default)]
pub(super) struct Jobs {
    answers: Mutex<Vec<Answers>>,
}

impl Jobs {
    pub(super) fn add(&self, tx: Answers) {
        let mut all = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|a| !a.is_closed());
        all.push(tx);
    }

    /// Tells every job that is still running.
    pub(super) fn tell(&self, input: impl Fn() -> Input) {
        let mut all = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|a| a.send(input()).is_ok());
    }
}

mod capacity;

/// At most this many queued commits are merged into one store commit.
const MAX_COALESCED: usize = 64;
/// Deltas kept for replay while the store is down; the oldest go first past this.
const REPLAY_MAX: usize = 1000;

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
enum OpDone {
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
    done: std_mpsc::Receiver<(u64, OpDone)>,
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
                        Op::Load { now_ms } => OpDone::Loaded(store.load(now_ms)),
                        Op::Commit { deltas, now_ms } => {
                            OpDone::Committed(store.commit(&deltas, now_ms))
                        }
                        Op::Claim { target, now_ms } => {
                            OpDone::Claimed(store.claim_probe(&target, now_ms))
                        }
                        Op::Listed { models } => {
                            store.note_listed(&models);
                            OpDone::Listed
                        }
                        Op::Capacity { op, now_ms } => {
                            OpDone::Capacity(store.capacity(&op, now_ms))
                        }
                        Op::LoadCapacity { now_ms } => {
                            OpDone::CapacityLoaded(store.load_capacity(now_ms))
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
enum OpResult {
    Done(OpDone),
    /// The budget ran out (or the I/O thread is still busy with an overdue operation).
    Slow,
}

/// The one line-printer both health threads warn through.
pub(super) type SharedWarn = Arc<Mutex<Box<dyn FnMut(&str) + Send>>>;

pub(super) struct StoreWorker {
    /// Where a slot given back is told.
    jobs: Arc<Jobs>,
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

impl StoreWorker {
    pub(super) fn new(
        store: Box<dyn HealthStore>,
        memory: Memory,
        mirror: Arc<Mutex<Mirror>>,
        jobs: Arc<Jobs>,
        warned: Arc<AtomicBool>,
        log: Option<RunLog>,
        warn: SharedWarn,
    ) -> std::io::Result<StoreWorker> {
        Ok(StoreWorker {
            jobs,
            io: Io::start(store)?,
            memory,
            mirror,
            broken: None,
            warned,
            replay: Vec::new(),
            log,
            log_warned: false,
            warn,
            budget: OP_BUDGET,
        })
    }

    /// The health thread: serves every request until every handle is gone.
    pub(super) fn serve_all(&mut self, rx: &std_mpsc::Receiver<Asked>) {
        let mut next = rx.recv().ok();
        while let Some(asked) = next.take() {
            next = match asked {
                // Commits queued behind each other go to the store as one: each costs round
                // trips, and a batch records several per job.
                Asked::Commit { .. } => self.serve_commits(asked, rx),
                other => {
                    self.serve(other);
                    None
                }
            }
            .or_else(|| rx.recv().ok());
        }
    }

    pub(super) fn serve(&mut self, request: Asked) {
        match request {
            Asked::Load { now_ms, reply } => {
                let health = if self.fresh() {
                    self.memory.health.clone()
                } else {
                    self.load(now_ms)
                };
                let _ = reply.send(Input::HealthLoaded(health));
            }
            Asked::Reload { now_ms, reply } => {
                let health = self.load(now_ms);
                let _ = reply.send(Input::HealthReloaded(health));
            }
            Asked::Commit {
                seq,
                deltas,
                now_ms,
                reply,
            } => {
                self.log_deltas(now_ms, &deltas);
                let health = self.commit(deltas, now_ms);
                // Nothing new when the store was not reached: no answer.
                if let (Some(reply), Some(health)) = (reply, health) {
                    let _ = reply.send(Input::HealthStored { seq, health });
                }
            }
            Asked::Claim {
                target,
                now_ms,
                reply,
            } => {
                let granted = self.claim(&target, now_ms);
                let _ = reply.send(Input::ProbeClaimed { granted });
            }
            Asked::Flush { reply } => {
                let _ = reply.send(());
            }
            Asked::Listed { models } => {
                if self.usable(clock::now().wall_ms) {
                    // Best effort: pruning can wait for another run.
                    let _ = self.run(Op::Listed { models });
                }
            }
            Asked::Capacity {
                id,
                op,
                now_ms,
                reply,
            } => {
                let frees = op.frees();
                let answer = self.capacity(op, now_ms);
                if let Some(reply) = reply {
                    let _ = reply.send(Input::Capacity { id, reply: answer });
                }
                if frees {
                    self.jobs.tell(|| Input::SlotFreed);
                }
            }
            Asked::LoadCapacity { now_ms, reply } => {
                let _ = reply.send(self.load_capacity(now_ms));
            }
        }
        self.publish();
    }

    /// Serves `first` (a commit) and every commit queued right behind it in one store commit,
    /// in order; returns the request that ended the run of commits, if any.
    fn serve_commits(&mut self, first: Asked, rx: &std_mpsc::Receiver<Asked>) -> Option<Asked> {
        let mut batch = vec![first];
        let mut after = None;
        while batch.len() < MAX_COALESCED {
            match rx.try_recv() {
                Ok(r @ Asked::Commit { .. }) => batch.push(r),
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
            if let Asked::Commit {
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
        if let Some(health) = health {
            for (seq, reply) in replies {
                if let Some(reply) = reply {
                    let _ = reply.send(Input::HealthStored {
                        seq,
                        health: health.clone(),
                    });
                }
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
    fn run(&mut self, op: Op) -> OpResult {
        self.collect_overdue(Duration::ZERO);
        if self.io.overdue.is_some() {
            return OpResult::Slow;
        }
        self.io.next_id += 1;
        let id = self.io.next_id;
        let deadline = clock::now().instant + self.budget;
        if self.io.ops.send((id, op, deadline)).is_err() {
            return OpResult::Slow;
        }
        loop {
            let left = deadline.saturating_duration_since(clock::now().instant);
            match self.io.done.recv_timeout(left) {
                Ok((got, done)) if got == id => return OpResult::Done(done),
                // Cannot happen (one operation at a time), but a stray answer is not ours.
                Ok(_) => {}
                Err(_) => {
                    self.io.overdue = Some(id);
                    return OpResult::Slow;
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
            if let OpDone::Committed(Ok(_)) = done {
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
            OpResult::Done(OpDone::Committed(Ok(_))) => {
                self.replay.clear();
                self.broken = None;
                self.answered();
            }
            OpResult::Done(OpDone::Committed(Err(e))) => {
                self.fail("saving the health state", &e, now_ms);
            }
            OpResult::Done(_) => {}
            OpResult::Slow => {
                for (carried_by, _) in &mut self.replay {
                    *carried_by = id;
                }
                self.slow("saving the health state", now_ms);
            }
        }
    }

    fn warnings(&mut self, warnings: &[StoreWarning]) {
        for w in warnings {
            self.say(&format!("warning: {w}"));
            // Already explained: nothing will be saved, and once is enough.
            if matches!(w, StoreWarning::NewerSchema { .. }) {
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
            OpResult::Done(OpDone::Loaded(Ok(loaded))) => {
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
            OpResult::Done(OpDone::Loaded(Err(e))) => {
                self.fail("reading the health state", &e, now_ms);
                self.memory.health.clone()
            }
            OpResult::Done(_) => self.memory.health.clone(),
            OpResult::Slow => {
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
            OpResult::Done(OpDone::Committed(Ok(loaded))) => {
                self.broken = None;
                self.answered();
                self.warnings(&loaded.warnings);
                self.memory.health = loaded.health.clone();
                Some(loaded.health)
            }
            OpResult::Done(OpDone::Committed(Err(e))) => {
                self.fail("saving the health state", &e, now_ms);
                self.keep_for_replay(all, 0);
                None
            }
            OpResult::Done(_) => None,
            OpResult::Slow => {
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

    fn claim(&mut self, target: &crate::health::ProbeTarget, now_ms: u64) -> bool {
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
            OpResult::Done(OpDone::Claimed(Ok((claim, loaded)))) => {
                if self.replay.is_empty() {
                    self.broken = None;
                }
                self.answered();
                self.memory.health = loaded.health;
                claim.granted()
            }
            // Someone else is busy with the store: assume they may be probing.
            OpResult::Done(OpDone::Claimed(Err(StoreError::LockTimeout { .. }))) => false,
            OpResult::Done(OpDone::Claimed(Err(e))) => {
                self.fail("claiming a probe lease", &e, now_ms);
                self.claim_in_memory(target, now_ms)
            }
            OpResult::Done(_) => false,
            OpResult::Slow => {
                self.slow("claiming a probe lease", now_ms);
                self.claim_in_memory(target, now_ms)
            }
        }
    }

    fn claim_in_memory(&mut self, target: &crate::health::ProbeTarget, now_ms: u64) -> bool {
        use crate::health::store::HealthStore as _;
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
