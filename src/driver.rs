//! Runs jobs: Pi + the failover machine + health + stops in one select loop. The only place
//! that sleeps. It executes what the machine asks and returns what happened, as facts
//! ([`Ended`]); it decides nothing about failover and words no ending (that is `output`'s).
//! A [`Session`] is one Pi process, reused across the jobs of a batch worker; a single run is a
//! session with one job.

use std::cell::RefCell;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::agent::{self, Agent, PiGroups};
use crate::budget::Ledger;
use crate::catalog::ModelInfo;
use crate::clock;
use crate::console::{Console, StatusLine};
use crate::failover::classify::{Classification, FailureClass, Scope};
use crate::failover::{Action, Machine, Note, Options, Outcome, SetupProblem};
use crate::health::service::{HealthHandle, Reply};
use crate::job::{Ended, JobEnd, JobRequest, PiLoss, Stop};

/// How long Pi gets to exit after its stdin closes before it is signalled.
const STOP_GRACE: Duration = Duration::from_millis(2000);
/// After a stop, how long Pi gets to settle the aborted run.
const STOP_SETTLE: Duration = Duration::from_millis(1500);
/// How often the live status line is redrawn (a single run's, and a batch's).
pub const STATUS_TICK: Duration = Duration::from_millis(250);

/// How the loop over one job ended, before it is made into a [`JobEnd`].
enum Loop {
    Machine(Outcome),
    PiExited,
    Malformed(String),
    StdinGone,
    /// The stop's grace passed without Pi settling.
    Unsettled,
}

/// One running `pi --mode rpc`.
pub struct Session {
    agent: Agent,
    warnings: mpsc::UnboundedReceiver<String>,
    pi_command: OsString,
    pi_args: Vec<String>,
    /// The user's start model, as Pi reported it for the first job; later jobs start from it
    /// again even if an earlier job switched away.
    start_model: Option<String>,
    jobs: u32,
    /// Pi answered at least one command: it started.
    answered: bool,
}

impl Session {
    pub fn start(
        pi_command: &OsString,
        pi_args: &[String],
        groups: &PiGroups,
    ) -> Result<Session, agent::SpawnError> {
        let mut agent = Agent::spawn(pi_command, pi_args, groups)?;
        let warnings = agent.take_warnings();
        Ok(Session {
            agent,
            warnings,
            pi_command: pi_command.clone(),
            pi_args: pi_args.to_vec(),
            start_model: None,
            jobs: 0,
            answered: false,
        })
    }

    /// The flags this Pi was started with (a batch job with other flags needs another Pi).
    pub fn pi_args(&self) -> &[String] {
        &self.pi_args
    }

    /// Stops Pi and reaps it.
    pub async fn stop(mut self) {
        self.agent.stop(STOP_GRACE).await;
    }

    /// Runs one job to its end on this Pi. `spending` is the process's spend (`--max-cost`),
    /// shared by every job of a batch.
    pub async fn run(
        &mut self,
        job: &JobRequest,
        health: &HealthHandle,
        spending: &RefCell<Ledger>,
        stops: &mut watch::Receiver<Option<Stop>>,
        console: &Console,
        status: &mut StatusLine,
    ) -> Ended {
        let start = clock::now();
        // Store work happens on the health thread; its answers come back here. The machine
        // starts on what this process knows, and the store's health joins it when it comes
        // (the first request waits for it a short while at most: a slow store never holds
        // the run).
        let (replies_tx, mut replies) = mpsc::unbounded_channel::<Reply>();
        health.load(start.wall_ms, replies_tx.clone());
        let options = Options {
            fresh_session: self.jobs > 0,
            start_model: self.start_model.clone(),
            thinking: job.thinking.level.clone(),
            id_prefix: format!("r{}-", self.jobs),
            local_offset: Some(clock::local_offset),
            spread_seed: spread_seed(&job.label, self.jobs),
            explain: job.explain,
            deadline: Some(job.deadline),
            health_pending: true,
            // One slot id per job: a late answer about the last job's slot never touches this one's.
            // Only a single run's first request has the pre-request grace (README's promise).
            capacity: job.capacity.clone().map(|mut c| {
                c.slot = format!("{}:{}", c.slot, self.jobs);
                c.pre_request_grace = !job.in_batch;
                c
            }),
        };
        self.jobs += 1;
        let mut machine = Machine::with_options(
            start,
            job.config.clone(),
            health.snapshot(),
            job.message.clone(),
            job.images.clone(),
            options,
        );
        let mut spend = SpendFeed::default();
        let mut stopping: Option<(Stop, Instant)> = None;
        if let Some(stop) = *stops.borrow() {
            stopping = Some((stop, start.instant));
            machine.handle_interrupt(start);
        }
        let mut stops_open = true;
        let mut slot_events = health.slot_events();
        let mut ticker = tokio::time::interval(STATUS_TICK);
        let ended = 'run: loop {
            spend.feed(&mut machine, spending);
            while let Some(action) = machine.poll_action() {
                match action {
                    Action::Send { id, command } => {
                        tracing::debug!(command = command.name(), id, "→ pi");
                        if self.agent.send(&id, &command).await.is_err() {
                            break 'run Loop::StdinGone;
                        }
                    }
                    Action::Record { seq, delta } => {
                        let now = clock::now().wall_ms;
                        health.commit(seq, vec![delta], now, Some(replies_tx.clone()));
                    }
                    Action::ClaimProbe { target } => {
                        health.claim(target, clock::now().wall_ms, replies_tx.clone());
                    }
                    Action::ReloadHealth => {
                        health.reload(clock::now().wall_ms, replies_tx.clone());
                    }
                    Action::Capacity { id, op, reply } => {
                        tracing::debug!(id, ?op, "capacity →");
                        let reply = reply.then(|| replies_tx.clone());
                        health.capacity(id, op, clock::now().wall_ms, reply);
                    }
                    Action::Spent { provider, cost } => {
                        // News once per process: the ledger says each cap once.
                        let crossed = spending.borrow_mut().add(&provider, cost);
                        for c in crossed {
                            status.clear();
                            console.progress_line(&c.to_string());
                        }
                        spend.feed(&mut machine, spending);
                    }
                    Action::Progress { line, note } => {
                        let shown = if job.in_batch {
                            // A breaker change or a warning is news once, not once per job.
                            note.shown_in_batch() && console.news(note, &line)
                        } else {
                            note.shown_in_run()
                        };
                        if shown || job.verbose > 0 {
                            status.clear();
                            let line = format!("{}{line}", job.label);
                            if note == Note::Warning {
                                console.error_line(&line);
                            } else {
                                console.progress_line(&line);
                            }
                        }
                    }
                    Action::Finish(outcome) => break 'run Loop::Machine(outcome),
                }
            }
            let machine_deadline = machine.poll_deadline();
            let settle_deadline = stopping.map(|(_, at)| at + STOP_SETTLE);
            tokio::select! {
                biased;
                changed = stops.changed(), if stopping.is_none() && stops_open => {
                    match changed {
                        Ok(()) => {
                            let stop = *stops.borrow();
                            if let Some(stop) = stop {
                                stopping = Some((stop, clock::now().instant));
                                machine.handle_interrupt(clock::now());
                            }
                        }
                        // No more stops can come; stop watching.
                        Err(_) => stops_open = false,
                    }
                }
                () = sleep_until(Some(job.deadline)), if stopping.is_none() => {
                    stopping = Some((Stop::Deadline, clock::now().instant));
                    machine.handle_interrupt(clock::now());
                }
                () = sleep_until(settle_deadline), if settle_deadline.is_some() => {
                    break 'run Loop::Unsettled;
                }
                () = sleep_until(machine_deadline), if machine_deadline.is_some() => {
                    spend.feed(&mut machine, spending);
                    machine.handle_timeout(clock::now());
                }
                Some(reply) = replies.recv() => {
                    // What other jobs spent meanwhile counts before anything starts.
                    spend.feed(&mut machine, spending);
                    match reply {
                        Reply::Loaded { health } => {
                            machine.handle_health_loaded(clock::now(), health);
                        }
                        Reply::Committed { seq, health: Some(merged) } => {
                            machine.handle_health(seq, merged);
                        }
                        Reply::Committed { health: None, .. } => {}
                        Reply::Probe { granted } => {
                            machine.handle_probe_result(clock::now(), granted);
                        }
                        Reply::Reloaded { health } => {
                            machine.handle_health_reloaded(clock::now(), health);
                        }
                        Reply::Capacity { id, reply } => {
                            tracing::debug!(id, ?reply, "capacity ←");
                            machine.handle_capacity(clock::now(), id, reply);
                        }
                    }
                }
                changed = slot_events.changed(), if machine.awaiting_slot() => {
                    if changed.is_ok() {
                        spend.feed(&mut machine, spending);
                        machine.handle_slot_freed(clock::now());
                    }
                }
                Some(warning) = self.warnings.recv() => {
                    pi_warning(&warning, &job.label, console, status);
                }
                msg = self.agent.next() => match msg {
                    Ok(Some(msg)) => {
                        self.answered |= matches!(msg, crate::rpc::Incoming::Response(_));
                        spend.feed(&mut machine, spending);
                        machine.handle_incoming(clock::now(), msg);
                    }
                    Ok(None) => break 'run Loop::PiExited,
                    Err(e) => break 'run Loop::Malformed(e.to_string()),
                },
                _ = ticker.tick(), if status.enabled() => {
                    let elapsed = clock::now().instant.saturating_duration_since(start.instant);
                    match machine.waiting_until() {
                        None if machine.awaiting_slot() => status.show(&format!(
                            "⏳ every candidate is at its capacity limit · waiting for a slot · {:.1}s",
                            elapsed.as_secs_f64()
                        )),
                        Some(until) => status.show(&format!(
                            "⏸ every candidate cooling down · resuming in {} · {:.1}s",
                            crate::failover::reopen::human_ms(ms(
                                until.saturating_duration_since(clock::now().instant)
                            )),
                            elapsed.as_secs_f64()
                        )),
                        None => status.show_run(
                            machine.current().map(ModelInfo::key).as_deref(),
                            machine.attempts().len() + 1,
                            elapsed,
                        ),
                    }
                }
            }
        };
        status.clear();
        // However the loop ended, a slot still held goes back (the machine's own endings have
        // queued that already; Pi dying or a stop that never settled have not).
        machine.abandon(clock::now());
        while let Some(action) = machine.poll_action() {
            if let Action::Capacity { id, op, .. } = action {
                health.capacity(id, op, clock::now().wall_ms, None);
            }
        }
        // Pi writes its start-up warnings before it answers on stdout, but on another pipe:
        // let the stderr reader catch up, then pass on what is there.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        while let Ok(warning) = self.warnings.try_recv() {
            pi_warning(&warning, &job.label, console, status);
        }
        if self.start_model.is_none() {
            self.start_model = machine.start_model().map(str::to_string);
            if !machine.registry().is_empty() {
                health.note_listed(machine.registry().iter().map(ModelInfo::key).collect());
            }
        }
        let stop = stopping.map(|(s, _)| s);
        let end = self.end(ended, stop).await;
        let mut attempts = machine.attempts().to_vec();
        if let Some(mut open) = machine.open_attempt(clock::now()) {
            // The request was sent; say how it ended even though no model verdict exists.
            let (class, matched) = match stop {
                Some(Stop::Deadline) => (FailureClass::UserAbort, "timeout"),
                Some(_) => (FailureClass::UserAbort, "interrupted"),
                None => (FailureClass::Unknown, "run ended"),
            };
            open.failure = Some(Classification {
                class,
                scope: Scope::Round,
                status: None,
                matched: matched.to_string(),
            });
            attempts.push(open);
        }
        Ended {
            end,
            attempts,
            switches: machine.switches(),
            tried: machine.tried(),
            elapsed_ms: ms_since(start.instant),
            capacity_wait_ms: machine.capacity_wait_ms(clock::now()),
            start_model: machine.start_model().map(str::to_string),
            digests: Vec::new(),
            content_hash: None,
        }
    }

    /// The job's ending. A stop decides it, unless the answer was already complete.
    async fn end(&mut self, ended: Loop, stop: Option<Stop>) -> JobEnd {
        let complete = matches!(
            ended,
            Loop::Machine(Outcome::Answer { .. } | Outcome::Explained(_))
        );
        if let Some(stop) = stop
            && !complete
        {
            return JobEnd::Stopped(stop);
        }
        match ended {
            Loop::Machine(outcome) => match outcome {
                // The runner's own keys never leave in an answer (stdout, `--json`, results).
                Outcome::Answer { text, model } => JobEnd::Answered {
                    text: crate::redact::mask_known_secrets(&text),
                    model,
                },
                Outcome::Explained(e) => JobEnd::Explained(e),
                Outcome::Exhausted {
                    reason,
                    last_error,
                    retry,
                    too_large,
                } => JobEnd::Exhausted {
                    reason,
                    last_error,
                    retry,
                    too_large,
                },
                Outcome::EmptyAnswer => JobEnd::EmptyAnswer,
                // Only after a stop, handled above; should one come without, it is a stop.
                Outcome::Aborted => JobEnd::Stopped(Stop::Halt),
                Outcome::Fatal(f) => JobEnd::Fatal(f),
                Outcome::Setup(p) => JobEnd::Setup(p),
                Outcome::OverBudget { why, last_error } => JobEnd::OverBudget { why, last_error },
            },
            Loop::Unsettled => JobEnd::Stopped(stop.unwrap_or(Stop::Halt)),
            Loop::Malformed(reason) => JobEnd::PiLost(self.loss(Some(reason)).await),
            Loop::PiExited | Loop::StdinGone => {
                let loss = self.loss(None).await;
                match self.unknown_start_model(&loss).await {
                    Some(problem) => JobEnd::Setup(problem),
                    None => JobEnd::PiLost(loss),
                }
            }
        }
    }

    /// What is known about Pi after it went away: how it exited and what it said.
    async fn loss(&mut self, malformed: Option<String>) -> PiLoss {
        let status = self.agent.exit_status(Duration::from_millis(1000)).await;
        let stderr = self.agent.stderr_text().await;
        let old_node = if is_old_node(&stderr) {
            Some(crate::job::OldNode {
                version: agent::node_version().await,
            })
        } else {
            None
        };
        PiLoss {
            malformed,
            status,
            error_line: crate::pi_stderr::error_line(&stderr),
            old_node,
            answered: self.answered,
            stderr,
        }
    }

    /// Pi refuses to start on a `--model` it cannot resolve (`Error: Model "x" not found`).
    /// A Pi without the start-model flags lists what exists, so the problem can name it.
    async fn unknown_start_model(&self, loss: &PiLoss) -> Option<SetupProblem> {
        if self.answered {
            return None;
        }
        let line = loss
            .stderr
            .lines()
            .find(|l| l.starts_with("Error: Model \"") && l.contains("not found"))?;
        let wanted = line.split('"').nth(1).unwrap_or_default().to_string();
        let mut args = Vec::new();
        let mut it = self.pi_args.iter();
        while let Some(a) = it.next() {
            if matches!(a.as_str(), "--model" | "--provider" | "--thinking") {
                it.next();
            } else {
                args.push(a.clone());
            }
        }
        let known = crate::registry::list_models(&self.pi_command, &args)
            .await
            .ok()?;
        let keys: Vec<String> = known.iter().map(ModelInfo::key).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut shown: Vec<String> = crate::catalog::suggest::closest_models(&wanted, &refs, 5)
            .into_iter()
            .map(str::to_string)
            .collect();
        for k in &keys {
            if shown.len() >= 12 {
                break;
            }
            if !shown.contains(k) {
                shown.push(k.clone());
            }
        }
        Some(SetupProblem::PiRefusedModel {
            wanted,
            closest: shown,
        })
    }
}

/// Pi's stderr shows the symptoms of a Node too old for it.
fn is_old_node(stderr: &str) -> bool {
    stderr.contains("globSync")
        || stderr.contains("enableCompileCache")
        || (stderr.contains("SyntaxError") && stderr.contains("node:"))
        || stderr.contains("ERR_UNKNOWN_BUILTIN_MODULE")
}

/// Passes one of Pi's `Warning:` lines on (redacted, once per process). Pi's advice to use its
/// own `--list-models` gets the runner's equivalent.
fn pi_warning(line: &str, label: &str, console: &Console, status: &mut StatusLine) {
    if console.first_pi_warning(line) {
        status.clear();
        console.error_line(&format!(
            "{label}Pi: {}",
            crate::pi_stderr::with_runner_advice(line)
        ));
    }
}

/// Keeps the machine's copy of the process's spend current: other jobs of a batch spend while
/// this one awaits, and what they spent must count before this one starts anything. Fed before
/// every machine input that can start an attempt, and after each `Action::Spent` is added, so
/// the copy always holds every cost this machine reported (as `handle_spend` requires).
#[derive(Default)]
struct SpendFeed {
    /// The ledger version the machine last saw.
    seen: u64,
}

impl SpendFeed {
    fn feed(&mut self, machine: &mut Machine, spending: &RefCell<Ledger>) {
        let ledger = spending.borrow();
        if ledger.version() != self.seen {
            self.seen = ledger.version();
            machine.handle_spend(clock::now(), ledger.spend().clone());
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub fn ms_since(t: Instant) -> u64 {
    ms(clock::now().instant.saturating_duration_since(t))
}

/// A per-job seed for the machine's restart spread (`Options::spread_seed`): the job's label
/// and its number on this Pi, hashed (FNV-1a). Only needs to differ between jobs.
fn spread_seed(label: &str, job: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in label.bytes().chain(job.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
