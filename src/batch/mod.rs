//! `--batch FILE`: many prompts, few Pi processes. The job file is streamed (`input`), each of
//! the `--jobs N` workers keeps one Pi alive across its jobs (`worker`), all of them share
//! breaker health, and results go to stdout in input order or to `--output FILE` as each job
//! finishes (`sink`, `ledger`). This module wires them together and decides when the batch
//! stops; it parses nothing and writes no result itself.
//!
//! The batch stops taking jobs when the input ends, on a signal (jobs in flight are cut short
//! and record nothing), when the reader of stdout goes away, when results cannot be written,
//! when the `--max-cost` budget is reached (jobs in flight finish; the jobs left get no result,
//! the rest of the input is read to count them, exit 3), or at once on a setup problem (Pi not
//! found, a Node too old, a scope that selects nothing): then one message, exit 2, and no job
//! is marked as attempted.

pub mod input;
pub mod jobs;
pub mod ledger;
pub mod order;
pub mod schema_memory;
pub mod shard;
pub mod sink;
pub mod summary;
pub mod worker;

use std::io::Read;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{Mutex, mpsc, watch};

use crate::agent::PiGroups;
use crate::budget::OverBudget;
use crate::catalog::ModelKey;
use crate::clock;
use crate::console::Console;
use crate::exit::Exit;
use crate::job::{Ended, Stop as JobStop};
use crate::output;
use crate::shared::SharedHandle;
use crate::signals::Interrupt;

use input::{Item, LineFilter, Progress};
pub use jobs::batch_exit;
use sink::{Failure, Sink, SinkTarget};
use worker::{BatchPlan, Done, Settled, Worker};

use crate::driver::STATUS_TICK;
/// At most this many models are warned about by name in one batch.
const MAX_WARNED: usize = 64;
/// The longest the end of a batch waits for shared health to be written.
const FLUSH_LIMIT: Duration = Duration::from_millis(2000);

/// An `--output` that would lose data: `-` (a file of that name, not stdout) or the job file
/// itself (results appended to the jobs would come back as invalid jobs).
fn refuse_output(output: &std::path::Path, jobs: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    if output.as_os_str() == "-" {
        anyhow::bail!(
            "--output -: results go to stdout without --output; give --output a file name"
        );
    }
    if jobs != "-"
        && let (Ok(a), Ok(b)) = (std::fs::metadata(output), std::fs::metadata(jobs))
        && (a.dev(), a.ino()) == (b.dev(), b.ino())
    {
        anyhow::bail!(
            "--output {} is the job file itself; give the results a file of their own",
            output.display()
        );
    }
    Ok(())
}

/// Runs the batch of `args`.
pub async fn run(
    inv: &crate::cli::Invocation,
    args: &crate::cli::BatchArgs,
    settings: &crate::settings::Settings,
    shared: SharedHandle,
    console: &Console,
    groups: &PiGroups,
) -> anyhow::Result<Exit> {
    // Everything that can refuse the batch outright comes first, before any Pi starts and while
    // Ctrl-C still simply ends the process (opening a FIFO as the job file may wait).
    let schema = crate::job::output_schema(inv)?;
    if let Some(path) = &args.output {
        refuse_output(path, &args.file)?;
    }
    let ledger = match &args.output {
        Some(path) => {
            let (path, resume, earlier) = (path.clone(), args.resume, args.resume_from.clone());
            Some(
                tokio::task::spawn_blocking(move || ledger::open(&path, resume, &earlier))
                    .await
                    .context("cannot open --output")??,
            )
        }
        None => None,
    };
    let output_name = args
        .output
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if let Some(l) = &ledger {
        match l.tail {
            Some(ledger::Tail::Cut(bytes)) => console.error_line(&format!(
                "--output {output_name}: cut off a torn last line ({bytes} bytes without a \
                 newline, left by an interrupted run)"
            )),
            Some(ledger::Tail::Completed) => console.error_line(&format!(
                "--output {output_name}: the last result lacked its newline; added it"
            )),
            None => {}
        }
        if let Some(r) = l.recorded.as_ref().filter(|r| r.malformed > 0) {
            console.error_line(&format!(
                "--output {output_name}: ignored {} line(s) that are not results",
                r.malformed
            ));
        }
        for (file, malformed) in l.earlier_malformed.iter().filter(|(_, n)| *n > 0) {
            console.error_line(&format!(
                "--resume-from {}: ignored {malformed} line(s) that are not results",
                file.display()
            ));
        }
    }
    let source = open_input(&args.file).await?;
    let signals =
        crate::signals::install(groups.clone()).context("cannot install signal handlers")?;
    let workers = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, std::num::NonZero::get));
    let plan = BatchPlan {
        capacity: crate::job::capacity_options(settings, inv, workers),
        pi_command: settings.pi_command.clone(),
        base_args: inv.base_args.clone(),
        profile: inv.profile.clone(),
        config: crate::job::failover_config(settings, inv, true),
        timeout: Duration::from_millis(inv.timeout_ms),
        verbose: inv.verbose,
        thinking: inv.thinking.clone(),
        complexity: inv.task_complexity,
        workers,
        origins: crate::served::Origins::load(settings, inv),
        permanent_ok: args.permanent_ok,
        schema,
        schemas: std::cell::RefCell::default(),
        schema_misses: std::cell::RefCell::default(),
    };
    let (recorded, target) = match ledger {
        Some(l) => (l.recorded, SinkTarget::File(l.guard)),
        None => (None, SinkTarget::Stdout),
    };
    let rerun = ledger::Rerun {
        failed: args.retry_failed,
        changed: args.rerun_changed,
    };
    let filter = LineFilter::new(args.shard, recorded, output_name, rerun);
    let batch = Batch::start(plan, source, filter, target, &args.file, console)?;
    Ok(batch.run(shared, signals, console, groups).await)
}

/// The job file (`-` = stdin), opened on the blocking pool.
async fn open_input(file: &str) -> anyhow::Result<Box<dyn Read + Send>> {
    if file == "-" {
        return Ok(Box::new(std::io::stdin()));
    }
    let path = file.to_string();
    let opened = tokio::task::spawn_blocking(move || std::fs::File::open(path))
        .await
        .context("cannot open the batch file")?;
    let f = opened.with_context(|| format!("cannot read the batch file {file}"))?;
    Ok(Box::new(f))
}

/// Why the batch stopped taking jobs early.
#[derive(Debug, Clone)]
enum Halt {
    Signal(Interrupt),
    /// A setup problem: how the job that found it ended (`output` words it).
    Setup(Rc<Ended>),
    /// Nobody reads stdout any more.
    Closed,
    /// Results cannot be written.
    WriteFailed(String),
    /// The `--max-cost` budget is reached (or every provider left is over its cap).
    Budget(OverBudget),
}

impl PartialEq for Halt {
    /// The same reason; a setup problem is the same one only as the same job's ending.
    fn eq(&self, other: &Halt) -> bool {
        match (self, other) {
            (Halt::Signal(a), Halt::Signal(b)) => a == b,
            (Halt::Setup(a), Halt::Setup(b)) => Rc::ptr_eq(a, b),
            (Halt::Closed, Halt::Closed) => true,
            (Halt::WriteFailed(a), Halt::WriteFailed(b)) => a == b,
            (Halt::Budget(a), Halt::Budget(b)) => a == b,
            _ => false,
        }
    }
}

/// What workers tell the collector.
enum Event {
    Done(Box<Done>),
    /// Job `index` was left unrecorded for lack of budget.
    Left(usize),
    Setup(Box<Ended>),
    WriteFailed(Failure),
}

/// A batch wired up and ready to run.
struct Batch {
    plan: BatchPlan,
    items: mpsc::Receiver<Item>,
    progress: Arc<Progress>,
    sink: Sink,
    sink_finished: tokio::sync::oneshot::Receiver<()>,
    ordered: bool,
}

impl Batch {
    fn start(
        plan: BatchPlan,
        source: Box<dyn Read + Send>,
        filter: LineFilter,
        target: SinkTarget,
        name: &str,
        console: &Console,
    ) -> anyhow::Result<Batch> {
        let ordered = matches!(target, SinkTarget::Stdout);
        let (tx, items) = mpsc::channel(plan.workers.max(1));
        let progress = Arc::new(Progress::default());
        input::spawn(
            source,
            filter,
            tx,
            Arc::clone(&progress),
            name.to_string(),
            console.clone(),
        )
        .context("cannot start reading the batch file")?;
        let (sink, sink_finished) = Sink::start(target).context("cannot start writing results")?;
        Ok(Batch {
            plan,
            items,
            progress,
            sink,
            sink_finished,
            ordered,
        })
    }

    async fn run(
        self,
        health: SharedHandle,
        mut signals: watch::Receiver<Option<Interrupt>>,
        console: &Console,
        groups: &PiGroups,
    ) -> Exit {
        let start = clock::now().instant;
        let Batch {
            plan,
            items,
            progress,
            sink,
            sink_finished,
            ordered,
        } = self;
        let workers = plan.workers.max(1);
        let capacity = plan.capacity.clone();
        let shared = Rc::new(Shared {
            plan,
            items: Mutex::new(items),
            stop: watch::channel(None).0,
            // Jobs see signals through this, so a setup problem can cut them short too.
            stops: watch::channel(None).0,
            printed: watch::channel(0).0,
            ordered,
        });
        let (events_tx, mut events) = mpsc::channel::<Event>(workers * 2);
        let local = tokio::task::LocalSet::new();
        for n in 0..workers {
            let shared = Rc::clone(&shared);
            let events = events_tx.clone();
            let health = health.clone();
            let sink = sink.clone();
            let (console, groups) = (console.clone(), groups.clone());
            local.spawn_local(async move {
                let ctx = worker::Ctx {
                    plan: &shared.plan,
                    shared: &health,
                    console: &console,
                    groups: &groups,
                };
                work(Worker::new(n), &shared, &ctx, &sink, &events).await
            });
        }
        drop(events_tx);
        let mut status = console.status_line();
        let collector = async {
            let mut tally = summary::BatchTally::default();
            let mut exit = Exit::Success;
            let mut warned = std::collections::BTreeSet::new();
            let mut order = order::Reorder::default();
            let mut ticker = tokio::time::interval(STATUS_TICK);
            let mut watching = true;
            loop {
                tokio::select! {
                    event = events.recv() => match event {
                        None => break,
                        Some(Event::Done(done)) => {
                            for w in &done.warnings {
                                // Said once per model for the batch; every result lists it.
                                let model = w.model.clone().unwrap_or_default();
                                if warned.len() < MAX_WARNED && warned.insert(model) {
                                    status.clear();
                                    console.error_line(&format!(
                                        "warning: job {}: {}",
                                        done.label, w.message
                                    ));
                                }
                            }
                            if done.exit != Exit::Success || shared.plan.verbose > 0 {
                                status.clear();
                                console.progress_line(&done.note);
                            }
                            if done.permanent && done.exit != Exit::Success {
                                tally.record_permanent(
                                    &done.label,
                                    done.error.as_deref().unwrap_or("failed"),
                                );
                            }
                            // `--permanent-ok`: a failure in the job's own input is reported,
                            // not counted.
                            if !(shared.plan.permanent_ok && done.permanent) {
                                exit = jobs::worse(exit, done.exit);
                            }
                            tally.record(
                                done.exit,
                                done.model.as_deref(),
                                &done.usage,
                                &done.failed_usage,
                                &done.failed_classes,
                            );
                            tally.record_schema(&done.schema_failures);
                            tally.record_capacity(
                                done.model.as_ref().map(ModelKey::provider),
                                &done.capacity_signals,
                                done.capacity_wait_ms,
                            );
                            tally.record_waits(&done.label, done.primary_wait_ms, done.max_wait);
                            tally.record_silence(&done.silence_cuts);
                            if shared.ordered {
                                order.push(done.index, Some(done.line));
                                shared.print_ready(&mut order, &sink).await;
                            }
                        }
                        Some(Event::Left(index)) => {
                            if shared.ordered {
                                order.push(index, None);
                                shared.print_ready(&mut order, &sink).await;
                            }
                        }
                        Some(Event::Setup(ended)) => shared.halt(Halt::Setup(ended.into())),
                        Some(Event::WriteFailed(f)) => shared.halt(stop_for(f)),
                    },
                    _ = ticker.tick(), if status.enabled() => {}
                    changed = signals.changed(), if watching => match changed {
                        Ok(()) => {
                            if let Some(sig) = *signals.borrow() {
                                shared.halt(Halt::Signal(sig));
                            }
                        }
                        Err(_) => watching = false,
                    },
                }
                tally.skipped = progress.skipped.load(Ordering::Relaxed);
                tally.failed_before = progress.failed_before.load(Ordering::Relaxed);
                status.show(&tally.status(
                    progress.total.load(Ordering::Relaxed),
                    !progress.finished.load(Ordering::Acquire),
                    crate::driver::ms_since(start),
                ));
            }
            status.clear();
            (tally, exit)
        };
        let (mut tally, mut exit) = local.run_until(collector).await;
        local.await;
        // The jobs left by the budget are counted: the rest of the input is read (and dropped)
        // unless a signal comes first.
        let over_budget = matches!(*shared.stop.borrow(), Some(Halt::Budget(_)));
        let counted = if over_budget {
            Some(shared.count_the_rest(&mut signals).await)
        } else {
            None
        };
        drop(sink);
        let _ = sink_finished.await;
        // Shared health written after the last job: a moment at most (a slow store must not
        // hold the batch's exit).
        health.flush_within(FLUSH_LIMIT).await;
        let stop = shared.stop.borrow().clone();
        if let Some(Halt::Setup(ended)) = &stop {
            console.error_line(&output::batch_stopped_line(ended));
            return Exit::Error;
        }
        tally.skipped = progress.skipped.load(Ordering::Relaxed);
        tally.failed_before = progress.failed_before.load(Ordering::Relaxed);
        // Jobs that failed before in their input are not run again, but they are not done
        // (unless `--permanent-ok`: such failures are named, not counted).
        if !shared.plan.permanent_ok {
            exit = jobs::worse(
                exit,
                match progress.failed_before_exit.load(Ordering::Relaxed) {
                    0 => Exit::Success,
                    1 => Exit::Exhausted,
                    _ => Exit::Error,
                },
            );
        }
        if let Ok(before) = progress.failed_before_jobs.lock() {
            tally.add_permanent(&before);
        }
        for line in tally.lines(
            progress.total.load(Ordering::Relaxed),
            crate::driver::ms_since(start),
        ) {
            console.progress_line(&line);
        }
        let now = crate::clock::now().wall_ms;
        let records = health.load_capacity(now, Duration::from_millis(1000)).await;
        let limits: std::collections::BTreeMap<String, u32> = records
            .iter()
            .filter_map(|(p, r)| {
                let limits = capacity.limits_for(p);
                (r.limit > 0).then(|| (p.clone(), r.effective_limit(now, limits)))
            })
            .collect();
        if let Some(line) = tally.capacity_line(&limits) {
            console.progress_line(&line);
        }
        for line in [
            tally.primary_line(),
            tally.max_wait_line(),
            tally.silence_line(),
        ]
        .into_iter()
        .flatten()
        {
            console.progress_line(&line);
        }
        if let Some(line) = tally.schema_line() {
            console.progress_line(&line);
        }
        // Last: what will fail the same way every night until its input changes.
        if let Some(line) = tally.permanent_line(shared.plan.permanent_ok) {
            console.progress_line(&line);
        }
        let read_error = progress.error.lock().map(|e| e.clone()).unwrap_or(None);
        if let Some(e) = read_error {
            console.error_line(&e);
            exit = jobs::worse(exit, Exit::Error);
        }
        match stop {
            Some(Halt::Signal(sig)) => {
                console.error_line(output::batch_interrupted_line(sig));
                exit = sig.exit();
            }
            Some(Halt::WriteFailed(e)) => {
                console.error_line(&e);
                exit = jobs::worse(exit, Exit::Error);
            }
            // The cap was reached with nothing left to do: the batch is simply done.
            Some(Halt::Budget(_))
                if counted == Some(true)
                    && progress.total.load(Ordering::Relaxed) == tally.done() => {}
            Some(Halt::Budget(why)) => {
                let left = progress
                    .total
                    .load(Ordering::Relaxed)
                    .saturating_sub(tally.done());
                let why = health.restate(&why);
                console.error_line(&summary::budget_line(
                    &why,
                    left,
                    counted == Some(true),
                    !shared.ordered,
                ));
                exit = jobs::worse(exit, Exit::OverBudget);
            }
            // Nobody reads the results any more: the batch ends quietly — but not with 0
            // while jobs were never run (issue 29: `--batch … | head -1` said "4 of 6 jobs
            // done" and exited 0).
            Some(Halt::Closed)
                if counted != Some(true)
                    || progress.total.load(Ordering::Relaxed) != tally.done() =>
            {
                console.error_line(
                    "stdout was closed before every job ran; the jobs not run have no result",
                );
                exit = jobs::worse(exit, Exit::Error);
            }
            Some(Halt::Closed | Halt::Setup(_)) | None => {}
        }
        exit
    }
}

fn stop_for(f: Failure) -> Halt {
    match f {
        Failure::Closed => Halt::Closed,
        Failure::Io(e) => Halt::WriteFailed(e),
    }
}

/// What the workers and the collector share (one thread: `Rc`, no locks held across I/O).
struct Shared {
    plan: BatchPlan,
    items: Mutex<mpsc::Receiver<Item>>,
    stop: watch::Sender<Option<Halt>>,
    /// How the jobs in flight learn they must stop (a signal, or a setup problem elsewhere).
    stops: watch::Sender<Option<JobStop>>,
    /// Index of the next result to print on stdout (input order only).
    printed: watch::Sender<usize>,
    ordered: bool,
}

impl Shared {
    /// Stops taking jobs. A signal or a setup problem also cuts the jobs in flight short; a
    /// closed stdout, a failed write or the budget lets them finish.
    fn halt(&self, why: Halt) {
        let cut = match &why {
            Halt::Signal(sig) => Some(JobStop::Signal(*sig)),
            // The same for a job as a signal: stop Pi, record nothing.
            Halt::Setup(_) => Some(JobStop::Halt),
            Halt::Closed | Halt::WriteFailed(_) | Halt::Budget(_) => None,
        };
        // The first reason stands, but a signal or a setup problem cuts the jobs a budget
        // let finish, and says so.
        self.stop.send_if_modified(|s| {
            let fresh = s.is_none()
                || (matches!(s, Some(Halt::Budget(_)))
                    && matches!(why, Halt::Signal(_) | Halt::Setup(_)));
            if fresh {
                *s = Some(why);
            }
            fresh
        });
        if let Some(stop) = cut {
            self.stops.send_if_modified(|i| {
                let fresh = i.is_none();
                if fresh {
                    *i = Some(stop);
                }
                fresh
            });
        }
    }

    fn stopped(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// Prints every result that is now next in input order (a job left by the budget has
    /// none).
    async fn print_ready(&self, order: &mut order::Reorder<Option<String>>, sink: &Sink) {
        while let Some(line) = order.pop() {
            let Some(line) = line else {
                continue;
            };
            if matches!(
                *self.stop.borrow(),
                Some(Halt::Closed | Halt::WriteFailed(_))
            ) {
                continue;
            }
            if let Err(f) = sink.write(line).await {
                self.halt(stop_for(f));
            }
        }
        self.printed.send_replace(order.next());
    }

    /// The next item for a worker, or `None` when the input is done or the batch stopped.
    async fn next_item(&self) -> Option<Item> {
        let mut stop = self.stop.subscribe();
        let item = tokio::select! {
            item = async { self.items.lock().await.recv().await } => item,
            _ = stop.wait_for(Option::is_some) => None,
        }?;
        if self.ordered {
            let index = match &item {
                Item::Job { index, .. } | Item::Invalid { index, .. } => *index,
            };
            let workers = self.plan.workers;
            let mut printed = self.printed.subscribe();
            tokio::select! {
                _ = printed.wait_for(|next| order::may_start(index, *next, workers)) => {}
                _ = stop.wait_for(Option::is_some) => return None,
            }
        }
        Some(item)
    }
}

impl Shared {
    /// Reads the rest of the input, dropping it, so the jobs left can be counted; `false` when
    /// a signal cut the count short.
    async fn count_the_rest(&self, signals: &mut watch::Receiver<Option<Interrupt>>) -> bool {
        let mut items = self.items.lock().await;
        let mut watching = true;
        loop {
            tokio::select! {
                item = items.recv() => if item.is_none() {
                    return true;
                },
                changed = signals.changed(), if watching => match changed {
                    Ok(()) => {
                        let sig = *signals.borrow();
                        if let Some(sig) = sig {
                            self.halt(Halt::Signal(sig));
                            return false;
                        }
                    }
                    Err(_) => watching = false,
                },
            }
        }
    }
}

/// One worker's loop: take a job, run it, record it, until there is nothing more to do.
async fn work(
    mut worker: Worker,
    shared: &Shared,
    ctx: &worker::Ctx<'_>,
    sink: &Sink,
    events: &mpsc::Sender<Event>,
) {
    let mut stops = shared.stops.subscribe();
    while !shared.stopped() {
        // Once the total is reached no new job starts.
        let reached = ctx.shared.total_reached();
        if let Some(why) = reached {
            shared.halt(Halt::Budget(why));
            break;
        }
        let Some(item) = shared.next_item().await else {
            break;
        };
        match worker.run(item, ctx, &mut stops).await {
            Settled::Finished(done) => {
                // With --output the job counts as done once its line is on disk.
                if !shared.ordered
                    && let Err(f) = sink.write(done.line.clone()).await
                {
                    let _ = events.send(Event::WriteFailed(f)).await;
                    break;
                }
                if events.send(Event::Done(done)).await.is_err() {
                    break;
                }
            }
            Settled::Unfinished => break,
            Settled::Left { index, why } => {
                shared.halt(Halt::Budget(why));
                if events.send(Event::Left(index)).await.is_err() {
                    break;
                }
            }
            Settled::Setup(ended) => {
                let _ = events.send(Event::Setup(ended)).await;
                break;
            }
        }
    }
    worker.stop().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::jobs::Invalid;

    fn shared(workers: usize, items: usize) -> Shared {
        let (tx, rx) = mpsc::channel(items.max(1));
        for i in 0..items {
            let invalid = Invalid {
                id: None,
                reason: "x".to_string(),
            };
            tx.try_send(Item::Invalid {
                index: i,
                number: i as u64 + 1,
                invalid,
                line_hash: 0,
            })
            .expect("room");
        }
        let plan = BatchPlan {
            capacity: crate::failover::CapacityOptions::default(),
            pi_command: "pi".into(),
            base_args: Vec::new(),
            profile: crate::cli::Profile::default(),
            config: crate::failover::Config {
                first_response: Duration::from_secs(1),
                stall: Duration::from_secs(1),
                watchdog_floor: Duration::from_secs(1),
                round_limit: Duration::from_secs(1),
                cooldown_scale: 1.0,
                models_scope: None,
                saved_default: None,
                provider: None,
                model: None,
                wait: false,
                max_inflight: Default::default(),
                budget: crate::budget::Caps::default(),
                max_wait: None,
                prefer_primary: None,
            },
            timeout: Duration::from_secs(1),
            verbose: 0,
            thinking: None,
            complexity: None,
            workers,
            origins: None,
            permanent_ok: false,
            schema: None,
            schemas: Default::default(),
            schema_misses: Default::default(),
        };
        Shared {
            plan,
            items: Mutex::new(rx),
            stop: watch::channel(None).0,
            stops: watch::channel(None).0,
            printed: watch::channel(0).0,
            ordered: true,
        }
    }

    fn index(item: Option<Item>) -> Option<usize> {
        match item? {
            Item::Job { index, .. } | Item::Invalid { index, .. } => Some(index),
        }
    }

    /// Polls `task` once: `true` when it is still waiting (what it waits on is told by a watch
    /// channel, which a poll reads at once).
    fn pending<F: std::future::Future>(task: std::pin::Pin<&mut F>) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        task.poll(&mut cx).is_pending()
    }

    /// In input order, a worker takes job i only once i < next to print + 4 × workers + 64.
    #[test]
    fn workers_wait_for_their_turn_within_the_window() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let shared = Rc::new(shared(1, 70));
            for i in 0..68 {
                assert_eq!(index(shared.next_item().await), Some(i));
            }
            let mut waiting = std::pin::pin!(async { index(shared.next_item().await) });
            assert!(
                pending(waiting.as_mut()),
                "job 68 starts before job 0 is printed"
            );
            shared.printed.send_replace(1);
            assert_eq!(waiting.await, Some(68));
            // A stop releases a waiting worker without a job.
            let mut waiting = std::pin::pin!(async { index(shared.next_item().await) });
            assert!(pending(waiting.as_mut()));
            shared.halt(Halt::Closed);
            assert_eq!(waiting.await, None);
            assert_eq!(
                *shared.stops.borrow(),
                None,
                "a closed stdout cuts no job short"
            );
            shared.halt(Halt::Setup(setup_problem()));
            assert_eq!(
                *shared.stop.borrow(),
                Some(Halt::Closed),
                "the first reason stands"
            );
        });
    }

    /// The budget stops new jobs but lets the ones in flight finish; a signal (or a setup
    /// problem) after it still cuts them short and is what the batch ends with.
    #[test]
    fn the_budget_lets_jobs_finish_and_a_signal_after_it_still_stops_them() {
        let over = crate::budget::Caps::parse(&["1".to_string()])
            .ok()
            .and_then(|caps| {
                let mut l = crate::budget::Ledger::new(caps);
                l.add("zai", 2.0);
                l.total_reached()
            })
            .expect("over budget");
        let s = shared(2, 0);
        s.halt(Halt::Budget(over.clone()));
        assert_eq!(*s.stops.borrow(), None, "jobs in flight finish");
        assert!(s.stopped());
        s.halt(Halt::Closed);
        assert_eq!(*s.stop.borrow(), Some(Halt::Budget(over.clone())));
        s.halt(Halt::Signal(Interrupt::Term));
        assert_eq!(*s.stop.borrow(), Some(Halt::Signal(Interrupt::Term)));
        assert_eq!(*s.stops.borrow(), Some(JobStop::Signal(Interrupt::Term)));
        s.halt(Halt::Budget(over));
        assert_eq!(*s.stop.borrow(), Some(Halt::Signal(Interrupt::Term)));
    }

    /// A job that found Pi missing: a setup problem.
    fn setup_problem() -> Rc<Ended> {
        Rc::new(Ended::bare(crate::job::JobEnd::NotStarted(
            crate::agent::SpawnError::NotFound("pi".into()),
        )))
    }

    /// A setup problem cuts the jobs in flight short, as a signal does.
    #[test]
    fn a_setup_problem_interrupts_the_jobs_in_flight() {
        let s = shared(2, 0);
        let problem = setup_problem();
        s.halt(Halt::Setup(Rc::clone(&problem)));
        assert_eq!(*s.stops.borrow(), Some(JobStop::Halt));
        assert_eq!(*s.stop.borrow(), Some(Halt::Setup(problem)));
        let s = shared(2, 0);
        s.halt(Halt::Signal(Interrupt::Int));
        assert_eq!(*s.stops.borrow(), Some(JobStop::Signal(Interrupt::Int)));
    }
}
