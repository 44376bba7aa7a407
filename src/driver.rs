//! Runs jobs: Pi + the failover machine + what the process shares + stops in one select loop. The only place
//! that sleeps. It executes what the machine asks and returns what happened, as facts
//! ([`Ended`]); it decides nothing about failover and words no ending (that is `output`'s).
//! A [`Session`] is one Pi process, reused across the jobs of a batch worker; a single run is a
//! session with one job.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::agent::{self, Agent, PiGroups};
use crate::catalog::ModelInfo;
use crate::clock::{self, Now};
use crate::console::{Console, StatusLine};
use crate::failover::classify::{Classification, FailureClass, Scope};
use crate::failover::{Action, Input, Machine, Note, Options, Outcome, SetupProblem};
use crate::job::{Ended, JobEnd, JobRequest, PiLoss, Stop};
use crate::schema::{Conforming, Rejection};
use crate::shared::SharedHandle;

/// How long Pi gets to exit after its stdin closes before it is signalled.
const STOP_GRACE: Duration = Duration::from_millis(2000);
/// After a stop, how long Pi gets to settle the aborted run.
const STOP_SETTLE: Duration = Duration::from_millis(1500);
/// How often the live status line is redrawn (a single run's, and a batch's).
pub const STATUS_TICK: Duration = Duration::from_millis(250);

/// The check of a complete answer against the job's schema (`Action::CheckAnswer`), run on
/// the blocking pool: a large answer takes milliseconds, during which the other workers of a
/// batch keep reading their streams. Its verdict is the next `Input::AnswerChecked`.
#[derive(Default)]
struct Checking(Option<tokio::task::JoinHandle<Result<Conforming, Rejection>>>);

impl Checking {
    fn start(&mut self, job: &JobRequest, text: String) {
        let schema = job.schema.as_ref().map(|s| s.schema.clone());
        self.0 = Some(tokio::task::spawn_blocking(move || match schema {
            Some(schema) => crate::schema::check(&schema, &text),
            // The machine asks only when the job has a schema.
            None => Err(Rejection::NotJson {
                detail: "no schema to check the answer against".to_string(),
            }),
        }));
    }

    fn busy(&self) -> bool {
        self.0.is_some()
    }

    /// The verdict once the check is done (cancel-safe: the check is kept until it is).
    async fn verdict(&mut self) -> Result<Conforming, Rejection> {
        let Some(handle) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        let verdict = handle.await;
        self.0 = None;
        verdict.unwrap_or_else(|e| {
            Err(Rejection::NotJson {
                detail: format!("the answer could not be checked ({e})"),
            })
        })
    }
}

/// A conforming answer as it may be shown: the runner's own keys masked in its text, and its
/// value read again from that text (a key can only be inside a string, so it still parses).
fn masked(json: Conforming) -> Conforming {
    let compact = crate::redact::mask_known_secrets(&json.compact);
    if compact == json.compact {
        return json;
    }
    let value = serde_json::from_str(&compact).unwrap_or(serde_json::Value::Null);
    Conforming { value, compact }
}

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
    /// Starts Pi; the wait for it to start happens off the event loop (see `Agent::spawn`).
    pub async fn start(
        pi_command: &OsString,
        pi_args: &[String],
        groups: &PiGroups,
    ) -> Result<Session, agent::SpawnError> {
        let mut agent = Agent::spawn(pi_command, pi_args, groups).await?;
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

    /// Runs one job to its end on this Pi, with what the process shares (health, capacity
    /// slots and the spend ledger) behind `shared`.
    ///
    /// The loop: carry out what the machine asks, wait for one thing to happen, read the clock
    /// once, feed it to the machine as one [`Input`] — until the machine finishes or Pi goes.
    pub async fn run(
        &mut self,
        job: &JobRequest,
        shared: &SharedHandle,
        stops: &mut watch::Receiver<Option<Stop>>,
        console: &Console,
        status: &mut StatusLine,
    ) -> Ended {
        let start = clock::now();
        // Store work happens on the health thread; its answers come back on `inbox`. The
        // machine starts on what this process knows, and the store's health joins it when it
        // comes (the first request waits for it a short while at most: a slow store never
        // holds the run).
        let (link, mut inbox) = shared.join();
        link.load(start.wall_ms);
        let mut machine = Machine::with_options(
            start,
            job.config.clone(),
            link.snapshot(),
            job.message.clone(),
            job.images.clone(),
            self.options(job),
        );
        self.jobs += 1;
        let mut stopping: Option<(Stop, Instant)> = None;
        let mut stops_open = true;
        let mut ticker = tokio::time::interval(STATUS_TICK);
        let mut checking = Checking::default();
        let mut now = start;
        let mut woke = stops.borrow().map(Wake::Stop);
        let ended = 'run: loop {
            // One input at a time, at the time this wake-up read.
            let input = match woke.take() {
                None => None,
                Some(Wake::Input(input)) => Some(input),
                Some(Wake::Stop(stop)) => {
                    stopping = Some((stop, now.instant));
                    Some(Input::Stop)
                }
                Some(Wake::Pi(msg)) => {
                    self.answered |= matches!(msg, crate::rpc::Incoming::Response(_));
                    Some(Input::Pi(msg))
                }
                Some(Wake::Warning(line)) => {
                    pi_warning(&line, &job.label, console, status);
                    None
                }
                Some(Wake::Tick) => {
                    show_status(&machine, status, now, start.instant);
                    None
                }
                Some(Wake::Ended(end)) => break 'run end,
            };
            if let Some(input) = input {
                machine.handle(now, input);
            }
            while let Some(action) = machine.poll_action() {
                match action {
                    Action::Send { id, command } => {
                        tracing::debug!(command = command.name(), id, "→ pi");
                        if self.agent.send(&id, &command).await.is_err() {
                            break 'run Loop::StdinGone;
                        }
                    }
                    Action::Record { seq, delta } => link.record(seq, delta, now.wall_ms),
                    Action::ClaimProbe { target } => link.claim(target, now.wall_ms),
                    Action::ReloadHealth => link.reload(now.wall_ms),
                    Action::Capacity { id, op, reply } => {
                        tracing::debug!(id, ?op, "capacity →");
                        link.capacity(id, op, now.wall_ms, reply);
                    }
                    Action::Spent { provider, cost } => {
                        // News once per process: the ledger says each cap once. The new spend
                        // is first on the inbox, so the machine has it before anything else.
                        for c in link.spent(&provider, cost) {
                            status.clear();
                            console.progress_line(&c.to_string());
                        }
                    }
                    Action::Progress { line, note } => {
                        progress(job, console, status, &line, note);
                    }
                    Action::CheckAnswer { text } => checking.start(job, text),
                    Action::Finish(outcome) => break 'run Loop::Machine(outcome),
                }
            }
            let machine_deadline = machine.poll_deadline();
            let settle_deadline = stopping.map(|(_, at)| at + STOP_SETTLE);
            woke = Some(tokio::select! {
                biased;
                changed = stops.changed(), if stopping.is_none() && stops_open => {
                    match (changed, *stops.borrow()) {
                        (Ok(()), Some(stop)) => Wake::Stop(stop),
                        (Ok(()), None) => continue,
                        // No more stops can come; stop watching.
                        (Err(_), _) => {
                            stops_open = false;
                            continue;
                        }
                    }
                }
                () = sleep_until(Some(job.deadline)), if stopping.is_none() => {
                    Wake::Stop(Stop::Deadline)
                }
                () = sleep_until(settle_deadline), if settle_deadline.is_some() => {
                    Wake::Ended(Loop::Unsettled)
                }
                // Before Pi and the timers: what the process spent (this job's last cost
                // included) counts before anything can start.
                Some(input) = inbox.recv() => Wake::Input(input),
                verdict = checking.verdict(), if checking.busy() => {
                    Wake::Input(Input::AnswerChecked(verdict))
                }
                () = sleep_until(machine_deadline), if machine_deadline.is_some() => {
                    Wake::Input(Input::Timeout)
                }
                Some(warning) = self.warnings.recv() => Wake::Warning(warning),
                msg = self.agent.next() => match msg {
                    Ok(Some(msg)) => Wake::Pi(msg),
                    Ok(None) => Wake::Ended(Loop::PiExited),
                    Err(e) => Wake::Ended(Loop::Malformed(e.to_string())),
                },
                _ = ticker.tick(), if status.enabled() => Wake::Tick,
            });
            now = clock::now();
        };
        status.clear();
        // However the loop ended, a slot still held goes back (the machine's own endings have
        // queued that already; Pi dying or a stop that never settled have not).
        let now = clock::now();
        machine.handle(now, Input::Abandon);
        while let Some(action) = machine.poll_action() {
            if let Action::Capacity { id, op, reply } = action {
                link.capacity(id, op, now.wall_ms, reply);
            }
        }
        // Pi writes its start-up warnings before it answers on stdout, but on another pipe:
        // pass on what it wrote before the last thing read.
        self.agent.stderr_caught_up().await;
        while let Ok(warning) = self.warnings.try_recv() {
            pi_warning(&warning, &job.label, console, status);
        }
        if self.start_model.is_none() {
            self.start_model = machine.start_model().map(str::to_string);
            if !machine.registry().is_empty() {
                shared.note_listed(machine.registry().iter().map(|m| m.key().into()).collect());
            }
        }
        let stop = stopping.map(|(s, _)| s);
        let end = self.end(ended, stop).await;
        let now = clock::now();
        let mut attempts = machine.attempts().to_vec();
        if let Some(mut open) = machine.open_attempt(now) {
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
                stated: None,
            });
            attempts.push(open);
        }
        Ended {
            end,
            attempts,
            switches: machine.switches(),
            tried: machine.tried(),
            elapsed_ms: ms(now.instant.saturating_duration_since(start.instant)),
            capacity_wait_ms: machine.capacity_wait_ms(now),
            wait_ms: machine.waited_ms(now),
            primary_wait_ms: machine.primary_wait_ms(now),
            start_model: machine.start_model().map(str::to_string),
            digests: Vec::new(),
            content_hash: None,
        }
    }

    /// The machine's options for the next job on this Pi.
    fn options(&self, job: &JobRequest) -> Options {
        Options {
            fresh_session: self.jobs > 0,
            start_model: self.start_model.clone(),
            thinking: job.thinking.level.clone(),
            id_prefix: format!("r{}-", self.jobs),
            local_offset: Some(clock::local_offset),
            spread_seed: spread_seed(&job.label, self.jobs, clock::now().wall_ms),
            explain: job.explain,
            deadline: Some(job.deadline),
            health_pending: true,
            // One slot id per job: a late answer about the last job's slot never touches this one's.
            // Only a single run's first request has the pre-request grace (README's promise).
            capacity: job.capacity.clone().map(|mut c| {
                c.slot = c.slot.job(self.jobs);
                c.pre_request_grace = !job.in_batch;
                c
            }),
            schema: job.schema.is_some(),
            schema_avoid: job.schema_avoid.clone(),
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
            // Only after a stop, handled above; should one come without, it is a stop.
            Loop::Machine(Outcome::Aborted) => JobEnd::Stopped(Stop::Halt),
            // The runner's own keys never leave in an answer (stdout, `--json`, results).
            Loop::Machine(Outcome::Answer { text, model, json }) => {
                JobEnd::Machine(Outcome::Answer {
                    text: crate::redact::mask_known_secrets(&text),
                    model,
                    json: json.map(|j| Box::new(masked(*j))),
                })
            }
            Loop::Machine(outcome) => JobEnd::Machine(outcome),
            Loop::Unsettled => JobEnd::Stopped(stop.unwrap_or(Stop::Halt)),
            Loop::Malformed(reason) => JobEnd::PiLost(self.loss(Some(reason)).await),
            Loop::PiExited | Loop::StdinGone => {
                let loss = self.loss(None).await;
                match self.unknown_start_model(&loss).await {
                    Some(problem) => JobEnd::Machine(Outcome::Setup(problem)),
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
        let keys: Vec<String> = known.iter().map(|m| m.key().into()).collect();
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

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What woke the loop.
enum Wake {
    Input(Input),
    Pi(crate::rpc::Incoming),
    Stop(Stop),
    Warning(String),
    Tick,
    Ended(Loop),
}

/// A progress line from the machine, shown as the mode wants it.
fn progress(job: &JobRequest, console: &Console, status: &mut StatusLine, line: &str, note: Note) {
    let shown = if job.in_batch {
        // A breaker change or a warning is news once, not once per job.
        note.shown_in_batch() && console.news(note, line)
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

/// The live status line: waiting for a slot, for a breaker, or running.
fn show_status(machine: &Machine, status: &mut StatusLine, now: Now, start: Instant) {
    let elapsed = now.instant.saturating_duration_since(start);
    match machine.waiting_until() {
        None if machine.awaiting_slot() => status.show(&format!(
            "⏳ every candidate is at its capacity limit · waiting for a slot · {:.1}s",
            elapsed.as_secs_f64()
        )),
        Some(until) => status.show(&format!(
            "⏸ waiting for a breaker to reopen · resuming in {} · {:.1}s",
            crate::failover::reopen::human_ms(ms(until.saturating_duration_since(now.instant))),
            elapsed.as_secs_f64()
        )),
        None => status.show_run(
            machine.current().map(ModelInfo::key).as_deref(),
            machine.attempts().len() + 1,
            elapsed,
        ),
    }
}

pub fn ms_since(t: Instant) -> u64 {
    ms(clock::now().instant.saturating_duration_since(t))
}

/// A per-job seed for the machine's restart spread and back-off jitter
/// (`Options::spread_seed`): the job's label, its number on this Pi, this process and the time
/// it starts, hashed (FNV-1a). Only needs to differ between jobs — also between the single runs
/// of a CI matrix, which share label, number and, on their own machines, often the pid.
fn spread_seed(label: &str, job: u32, now_ms: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let salt = job
        .to_le_bytes()
        .into_iter()
        .chain(std::process::id().to_le_bytes())
        .chain(now_ms.to_le_bytes());
    for b in label.bytes().chain(salt) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
