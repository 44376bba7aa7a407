//! What the jobs of one process share — breaker health, capacity slots and the spend ledger —
//! behind one cloneable [`SharedHandle`]. A job joins it ([`SharedHandle::join`]) and gets a
//! [`JobLink`] to ask through and one channel on which every answer comes back as a
//! [`failover::Input`](crate::failover::Input): health loaded, stored or re-read, a probe
//! claim's answer, a capacity operation's, a slot given back anywhere in the process, and the
//! process's spend each time the ledger takes a cost. The driver feeds that channel to the
//! machine as it is; nothing is copied on the way.
//!
//! Store work happens on the health thread, so the async event loop that drives Pi never waits
//! on the store (file locks and fsync, Redis round trips). Requests are served in order, so a
//! load always sees earlier commits.
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
//! Every successful operation refreshes the mirror ([`SharedHandle::snapshot`]), and a load
//! asked for while the mirror is fresher than [`FRESH_FOR`] is answered from it: the jobs of a
//! batch start from what the last job read or wrote, without a round trip each.
//!
//! The spend ledger (`--max-cost`) is the one place a cost is entered: a job reports each of
//! its model calls' costs ([`JobLink::spent`]) and every job of the process gets the new spend
//! on its channel.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::budget::{Caps, Crossing, Ledger, OverBudget};
use crate::capacity::Capacity;
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::clock;
use crate::failover::Input;
use crate::health::store::{HealthStore, Memory};
use crate::health::{Delta, Health, ProbeTarget};
use crate::runlog::RunLog;

mod worker;

use worker::{Answers, Asked, Jobs, Mirror, StoreWorker};
pub use worker::{FRESH_FOR, OP_BUDGET, RETRY_AFTER_MS};

/// A cheap, cloneable way to reach what the process shares. The threads end when every handle
/// is dropped (after serving what was already asked).
#[derive(Clone)]
pub struct SharedHandle {
    tx: std_mpsc::Sender<Asked>,
    /// Capacity operations go to a thread (and store connection) of their own when there is
    /// one: a slot must not wait behind breaker commits, each a few round trips to a store
    /// that may be far away.
    capacity_tx: Option<std_mpsc::Sender<Asked>>,
    mirror: Arc<Mutex<Mirror>>,
    jobs: Arc<Jobs>,
    /// The process's spend against `--max-cost`, shared by every job.
    ledger: Arc<Mutex<Ledger>>,
}

impl SharedHandle {
    /// Starts the health thread (and its I/O thread) over `store`, and a second pair over
    /// `capacity_store` for capacity operations when one is given (the same store opened
    /// again); `caps` are the process's spend caps. `warn` prints one line on stderr; "health
    /// is not shared" is said once for both.
    pub fn start(
        store: Box<dyn HealthStore>,
        capacity_store: Option<Box<dyn HealthStore>>,
        cooldown_scale: f64,
        caps: Caps,
        log: Option<RunLog>,
        warn: Box<dyn FnMut(&str) + Send>,
    ) -> std::io::Result<SharedHandle> {
        let (tx, rx) = std_mpsc::channel();
        let mirror = Arc::new(Mutex::new(Mirror::default()));
        let jobs = Arc::new(Jobs::default());
        let warn = Arc::new(Mutex::new(warn));
        let warned = Arc::new(AtomicBool::new(false));
        let worker = |store, mirror, log| -> std::io::Result<StoreWorker> {
            StoreWorker::new(
                store,
                Memory::new(cooldown_scale),
                mirror,
                Arc::clone(&jobs),
                Arc::clone(&warned),
                log,
                Arc::clone(&warn),
            )
        };
        let capacity_tx = match capacity_store {
            Some(store) => {
                // Its own mirror: it learns no breakers, and must not overwrite theirs.
                let mut worker = worker(store, Arc::new(Mutex::new(Mirror::default())), None)?;
                let (ctx, crx) = std_mpsc::channel::<Asked>();
                // Connects (and reads the records) while Pi starts, so the first slot does not
                // pay for the connection.
                let _ = ctx.send(Asked::LoadCapacity {
                    now_ms: clock::now().wall_ms,
                    reply: oneshot::channel().0,
                });
                thread::Builder::new()
                    .name("health-capacity".into())
                    .spawn(move || {
                        for asked in crx {
                            worker.serve(asked);
                        }
                    })?;
                Some(ctx)
            }
            None => None,
        };
        let mut worker = worker(store, Arc::clone(&mirror), log)?;
        thread::Builder::new()
            .name("health".into())
            .spawn(move || worker.serve_all(&rx))?;
        Ok(SharedHandle {
            tx,
            capacity_tx,
            mirror,
            jobs,
            ledger: Arc::new(Mutex::new(Ledger::new(caps))),
        })
    }

    /// A job joins: its link, and the one channel on which everything it asked (and every slot
    /// given back and spend entered in the process) comes back. The job leaves when the
    /// receiver is dropped.
    pub fn join(&self) -> (JobLink, mpsc::UnboundedReceiver<Input>) {
        let (tx, rx) = mpsc::unbounded_channel();
        // What the process spent before the job joined counts before anything it starts.
        let spent = {
            let ledger = self.ledger();
            (ledger.version() > 0).then(|| ledger.spend().clone())
        };
        if let Some(spend) = spent {
            let _ = tx.send(Input::Spend(spend));
        }
        self.jobs.add(tx.clone());
        let link = JobLink {
            shared: self.clone(),
            answers: tx,
        };
        (link, rx)
    }

    /// Every provider's capacity record as the store (or, when it is down, this process) has
    /// it; empty if the thread is gone or does not answer within `limit`.
    pub async fn load_capacity(&self, now_ms: u64, limit: Duration) -> BTreeMap<String, Capacity> {
        let (reply, rx) = oneshot::channel();
        if self
            .capacity_sender()
            .send(Asked::LoadCapacity { now_ms, reply })
            .is_err()
        {
            return BTreeMap::new();
        }
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(records)) => records,
            _ => BTreeMap::new(),
        }
    }

    fn capacity_sender(&self) -> &std_mpsc::Sender<Asked> {
        self.capacity_tx.as_ref().unwrap_or(&self.tx)
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

    /// The models Pi lists (`provider/id`), so the store prunes records of unlisted ones first.
    pub fn note_listed(&self, models: Vec<String>) {
        let _ = self.tx.send(Asked::Listed { models });
    }

    /// The `--max-cost` total, when the process's spend has reached it.
    pub fn total_reached(&self) -> Option<OverBudget> {
        self.ledger().total_reached()
    }

    /// `why` with the figures as the ledger has them now (see `Ledger::restate`).
    pub fn restate(&self, why: &OverBudget) -> OverBudget {
        self.ledger().restate(why)
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until everything asked so far has been served, but at most `limit` (writes after
    /// an answer must never hold the process past its deadline; what is not written by then is
    /// lost, as with a store that is down).
    pub async fn flush_within(&self, limit: Duration) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Asked::Flush { reply }).is_ok() {
            let _ = tokio::time::timeout(limit, rx).await;
        }
    }

    /// Queues commit `seq` of a job; with `reply`, the merged health comes back there.
    fn commit(&self, seq: u64, deltas: Vec<Delta>, now_ms: u64, reply: Option<Answers>) {
        let _ = self.tx.send(Asked::Commit {
            seq,
            deltas,
            now_ms,
            reply,
        });
    }
}

/// One job's way to what the process shares; every answer comes back on the channel
/// [`SharedHandle::join`] gave with it.
pub struct JobLink {
    shared: SharedHandle,
    answers: Answers,
}

impl JobLink {
    /// Health as this process knows it right now (see [`SharedHandle::snapshot`]).
    pub fn snapshot(&self) -> Health {
        self.shared.snapshot()
    }

    /// Queues a load for the start of the job; it comes back as [`Input::HealthLoaded`]. If the
    /// thread is gone, the snapshot comes back at once.
    pub fn load(&self, now_ms: u64) {
        let asked = Asked::Load {
            now_ms,
            reply: self.answers.clone(),
        };
        if self.shared.tx.send(asked).is_err() {
            let _ = self.answers.send(Input::HealthLoaded(self.snapshot()));
        }
    }

    /// Queues a re-read; it comes back as [`Input::HealthReloaded`].
    pub fn reload(&self, now_ms: u64) {
        let _ = self.shared.tx.send(Asked::Reload {
            now_ms,
            reply: self.answers.clone(),
        });
    }

    /// Queues health change `seq`; the merged health comes back as [`Input::HealthStored`].
    pub fn record(&self, seq: u64, delta: Delta, now_ms: u64) {
        self.shared
            .commit(seq, vec![delta], now_ms, Some(self.answers.clone()));
    }

    /// Queues a probe-lease claim; the answer comes back as [`Input::ProbeClaimed`]. If the
    /// thread is gone, the claim is refused at once.
    pub fn claim(&self, target: ProbeTarget, now_ms: u64) {
        let asked = Asked::Claim {
            target,
            now_ms,
            reply: self.answers.clone(),
        };
        if self.shared.tx.send(asked).is_err() {
            let _ = self.answers.send(Input::ProbeClaimed { granted: false });
        }
    }

    /// Queues capacity operation `id`; with `reply`, its outcome comes back as
    /// [`Input::Capacity`] ([`CapacityReply::Unavailable`] if the thread is gone).
    pub fn capacity(&self, id: u64, op: CapacityOp, now_ms: u64, reply: bool) {
        let reply = reply.then(|| self.answers.clone());
        let asked = Asked::Capacity {
            id,
            op,
            now_ms,
            reply: reply.clone(),
        };
        if self.shared.capacity_sender().send(asked).is_err()
            && let Some(reply) = reply
        {
            let _ = reply.send(Input::Capacity {
                id,
                reply: CapacityReply::Unavailable,
            });
        }
    }

    /// Enters one model call's cost in the process's ledger; every job (this one first in
    /// line on its channel) gets the new spend as [`Input::Spend`]. Returns the caps the cost
    /// made reached (news once per process).
    pub fn spent(&self, provider: &str, cost: f64) -> Vec<Crossing> {
        let (crossed, spend) = {
            let mut ledger = self.shared.ledger();
            let before = ledger.version();
            let crossed = ledger.add(provider, cost);
            (
                crossed,
                (ledger.version() != before).then(|| ledger.spend().clone()),
            )
        };
        if let Some(spend) = spend {
            self.shared.jobs.tell(|| Input::Spend(spend.clone()));
        }
        crossed
    }
}

#[cfg(test)]
mod tests;
