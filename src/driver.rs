//! Runs jobs: Pi + the failover machine + health + interrupts in one select loop. The only
//! place that sleeps. It executes what the machine asks and reports what happened; it decides
//! nothing about failover. A [`Session`] is one Pi process, reused across the jobs of a batch
//! worker; a single run is a session with one job.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use crate::agent::{self, Agent};
use crate::catalog::ModelInfo;
use crate::clock;
use crate::exit::Exit;
use crate::failover::classify::{Classification, FailureClass, Scope};
use crate::failover::{Action, Config, Machine, Note, Options, Outcome};
use crate::health::service::{HealthHandle, Reply};
use crate::output::StatusLine;
use crate::report::Report;
use crate::rpc::ImageContent;
use crate::signals::Interrupt;

/// How long Pi gets to exit after its stdin closes before it is signalled.
const STOP_GRACE: Duration = Duration::from_millis(2000);
/// After an interrupt, how long Pi gets to settle the aborted run.
const INTERRUPT_GRACE: Duration = Duration::from_millis(1500);
/// How often the live status line is redrawn.
const STATUS_TICK: Duration = Duration::from_millis(250);

/// One prompt to answer.
#[derive(Debug, Clone)]
pub struct Job {
    pub message: String,
    pub images: Vec<ImageContent>,
    pub config: Config,
    pub verbose: u8,
    /// Prefix for progress lines (`job 7: `) in batch mode.
    pub label: String,
    /// A batch job: per-job chatter stays quiet without `-v` (see `Note::shown_in_batch`).
    pub in_batch: bool,
    /// Thinking level for this job (`--thinking`, or from `--task-complexity`).
    pub thinking: Option<String>,
    /// `--explain`: stop before the first request.
    pub explain: bool,
}

/// How a job ended, before it is turned into a report.
enum Ended {
    Machine(Outcome),
    PiExited,
    Malformed(String),
    StdinGone,
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
    pub fn start(pi_command: &OsString, pi_args: &[String]) -> Result<Session, agent::SpawnError> {
        let mut agent = Agent::spawn(pi_command, pi_args)?;
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

    /// Runs one job to its end on this Pi.
    pub async fn run_job(
        &mut self,
        job: &Job,
        health: &HealthHandle,
        interrupt: &mut watch::Receiver<Option<Interrupt>>,
        deadline: Instant,
        status: &mut StatusLine,
    ) -> Report {
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
            thinking: job.thinking.clone(),
            id_prefix: format!("r{}-", self.jobs),
            explain: job.explain,
            deadline: Some(deadline),
            health_pending: true,
        };
        self.jobs += 1;
        let mut machine = Machine::with_options(
            job.config.clone(),
            health.snapshot(),
            job.message.clone(),
            job.images.clone(),
            options,
        );
        machine.handle_start(start);
        // Some(None) = the deadline, Some(Some(sig)) = a signal.
        let mut interrupted: Option<Option<Interrupt>> = None;
        let mut interrupted_at: Option<Instant> = None;
        if let Some(sig) = *interrupt.borrow() {
            interrupted = Some(Some(sig));
            interrupted_at = Some(start.instant);
            machine.handle_interrupt(start);
        }
        let mut signals_open = true;
        let mut ticker = tokio::time::interval(STATUS_TICK);
        let ended = 'run: loop {
            while let Some(action) = machine.poll_action() {
                match action {
                    Action::Send { id, command } => {
                        tracing::debug!(command = command.name(), id, "→ pi");
                        if self.agent.send(&id, &command).await.is_err() {
                            break 'run Ended::StdinGone;
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
                    Action::Progress { line, note } => {
                        let shown = if job.in_batch {
                            // A breaker change or a warning is news once, not once per job.
                            note.shown_in_batch() && crate::news::news(note, &line)
                        } else {
                            note.shown_in_run()
                        };
                        if shown || job.verbose > 0 {
                            status.clear();
                            let line = format!("{}{line}", job.label);
                            if note == Note::Warning {
                                crate::output::error_line(&line);
                            } else {
                                crate::output::progress_line(&line);
                            }
                        }
                    }
                    Action::Finish(outcome) => break 'run Ended::Machine(outcome),
                }
            }
            let machine_deadline = machine.poll_deadline();
            let grace_deadline = interrupted_at.map(|t| t + INTERRUPT_GRACE);
            tokio::select! {
                biased;
                changed = interrupt.changed(), if interrupted.is_none() && signals_open => {
                    match changed {
                        Ok(()) => {
                            let sig = *interrupt.borrow();
                            if let Some(sig) = sig {
                                interrupted = Some(Some(sig));
                                interrupted_at = Some(clock::now().instant);
                                machine.handle_interrupt(clock::now());
                            }
                        }
                        // No more signals can come; stop watching.
                        Err(_) => signals_open = false,
                    }
                }
                () = sleep_until(Some(deadline)), if interrupted.is_none() => {
                    interrupted = Some(None);
                    interrupted_at = Some(clock::now().instant);
                    machine.handle_interrupt(clock::now());
                }
                () = sleep_until(grace_deadline), if grace_deadline.is_some() => {
                    break 'run Ended::Machine(Outcome::Aborted);
                }
                () = sleep_until(machine_deadline), if machine_deadline.is_some() => {
                    machine.handle_timeout(clock::now());
                }
                Some(reply) = replies.recv() => match reply {
                    Reply::Loaded { health } => machine.handle_health_loaded(clock::now(), health),
                    Reply::Committed { seq, health: Some(merged) } => {
                        machine.handle_health(seq, merged);
                    }
                    Reply::Committed { health: None, .. } => {}
                    Reply::Probe { granted } => machine.handle_probe_result(clock::now(), granted),
                    Reply::Reloaded { health } => {
                        machine.handle_health_reloaded(clock::now(), health);
                    }
                },
                Some(warning) = self.warnings.recv() => pi_warning(&warning, &job.label, status),
                msg = self.agent.next() => match msg {
                    Ok(Some(msg)) => {
                        self.answered |= matches!(msg, crate::rpc::Incoming::Response(_));
                        machine.handle_incoming(clock::now(), msg);
                    }
                    Ok(None) => break 'run Ended::PiExited,
                    Err(e) => break 'run Ended::Malformed(e.to_string()),
                },
                _ = ticker.tick(), if status.enabled() => {
                    let elapsed = clock::now().instant.saturating_duration_since(start.instant);
                    match machine.waiting_until() {
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
        // Pi writes its start-up warnings before it answers on stdout, but on another pipe:
        // let the stderr reader catch up, then pass on what is there.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        while let Ok(warning) = self.warnings.try_recv() {
            pi_warning(&warning, &job.label, status);
        }
        if self.start_model.is_none() {
            self.start_model = machine.start_model().map(str::to_string);
            if !machine.registry().is_empty() {
                health.note_listed(machine.registry().iter().map(ModelInfo::key).collect());
            }
        }
        let elapsed_ms = ms_since(start.instant);
        let mut report = self.report(ended, interrupted, &machine, elapsed_ms).await;
        report.attempts = machine.attempts().to_vec();
        if let Some(mut open) = machine.open_attempt(clock::now()) {
            // The request was sent; say how it ended even though no model verdict exists.
            let (class, matched) = match interrupted {
                Some(Some(_)) => (FailureClass::UserAbort, "interrupted"),
                Some(None) => (FailureClass::UserAbort, "timeout"),
                None => (FailureClass::Unknown, "run ended"),
            };
            open.failure = Some(Classification {
                class,
                scope: Scope::Round,
                status: None,
                matched: matched.to_string(),
            });
            open.error = report.error.clone();
            report.attempts.push(open);
        }
        report.switches = machine.switches();
        report
    }

    async fn report(
        &mut self,
        ended: Ended,
        interrupted: Option<Option<Interrupt>>,
        machine: &Machine,
        elapsed_ms: u64,
    ) -> Report {
        let mut report = Report::new(elapsed_ms);
        // An interrupt decides the exit code, unless the answer was already complete.
        if let Some(cause) = interrupted
            && !matches!(
                ended,
                Ended::Machine(Outcome::Answer { .. } | Outcome::Explained(_))
            )
        {
            report.exit = match cause {
                Some(sig) => sig.exit(),
                None => Exit::Timeout,
            };
            report.error = Some(match cause {
                Some(Interrupt::Int) => "interrupted (SIGINT)".to_string(),
                Some(Interrupt::Term) => "terminated (SIGTERM)".to_string(),
                Some(Interrupt::Hup) => "terminated (SIGHUP)".to_string(),
                None => format!("timed out after {elapsed_ms} ms (--timeout-ms)"),
            });
            report.pi_lost = true;
            return report;
        }
        match ended {
            Ended::Machine(Outcome::Answer { text, model }) => {
                report.exit = Exit::Success;
                report.answer = Some(text);
                report.model = Some(model);
            }
            Ended::Machine(Outcome::Explained(explanation)) => {
                report.exit = if explanation.candidates.is_empty() {
                    Exit::Exhausted
                } else {
                    Exit::Success
                };
                report.explanation = Some(explanation);
            }
            Ended::Machine(Outcome::Exhausted {
                reason,
                last_error,
                retry,
                too_large,
            }) => {
                report.exit = Exit::Exhausted;
                report.permanent = too_large;
                let tried = machine.tried();
                let tried = if tried.is_empty() {
                    "no request was sent".to_string()
                } else {
                    format!("tried: {}", tried.join(", "))
                };
                report.error = Some(match last_error {
                    Some(e) => format!("failover exhausted: {reason}; {tried}; last error: {e}"),
                    None => format!("failover exhausted: {reason}; {tried}"),
                });
                report.retry = Some(retry);
            }
            Ended::Machine(Outcome::EmptyAnswer) => {
                let tried = machine.tried();
                report.error = Some(if tried.len() > 1 {
                    format!(
                        "Pi returned an empty answer and no other model was left; tried: {}",
                        tried.join(", ")
                    )
                } else {
                    "Pi returned an empty answer".to_string()
                });
            }
            Ended::Machine(Outcome::Aborted) => {
                report.error = Some("the run was aborted".to_string());
                report.pi_lost = true;
            }
            Ended::Machine(Outcome::Fatal(msg)) => {
                report.error = Some(msg);
                report.pi_lost = true;
            }
            Ended::Machine(Outcome::Setup(msg)) => {
                report.error = Some(msg);
                report.setup = true;
            }
            Ended::PiExited | Ended::StdinGone => {
                let status = self.agent.exit_status(Duration::from_millis(1000)).await;
                let stderr = self.agent.stderr_text().await;
                report.pi_lost = true;
                report.pi_start_failed = !self.answered;
                report.error = Some(match self.unknown_start_model(&stderr).await {
                    Some(problem) => {
                        report.setup = true;
                        problem
                    }
                    None => explain_pi_death("Pi exited before answering", status, &stderr).await,
                });
            }
            Ended::Malformed(msg) => {
                report.error = Some(msg);
                report.pi_lost = true;
            }
        }
        report
    }

    /// Pi refuses to start on a `--model` it cannot resolve (`Error: Model "x" not found`).
    /// A Pi without the start-model flags lists what exists, so the error can name it.
    async fn unknown_start_model(&self, stderr: &str) -> Option<String> {
        if self.answered {
            return None;
        }
        let line = stderr
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
        let mut shown = crate::catalog::suggest::closest_models(&wanted, &refs, 5);
        for k in &refs {
            if shown.len() >= 12 {
                break;
            }
            if !shown.contains(k) {
                shown.push(k);
            }
        }
        Some(format!(
            "unknown model '{wanted}': Pi has no such model; closest available: {} \
             (pi-ccswitch-run --status lists every model)",
            if shown.is_empty() {
                "none".to_string()
            } else {
                shown.join(", ")
            }
        ))
    }
}

/// Passes one of Pi's `Warning:` lines on (redacted, once per process). Pi's advice to use its
/// own `--list-models` gets the runner's equivalent.
fn pi_warning(line: &str, label: &str, status: &mut StatusLine) {
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let fresh = SEEN
        .lock()
        .map(|mut s| s.insert(line.to_string()))
        .unwrap_or(true);
    if fresh {
        status.clear();
        crate::output::error_line(&format!(
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

pub fn ms_since(t: Instant) -> u64 {
    ms(clock::now().instant.saturating_duration_since(t))
}

/// Turns Pi's early exit into one actionable line: Pi's own error line (not the tail of a Node
/// stack), and what to do about the usual causes.
async fn explain_pi_death(
    what: &str,
    status: Option<std::process::ExitStatus>,
    stderr: &str,
) -> String {
    use std::os::unix::process::ExitStatusExt;
    let how = match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "unknown status".to_string(),
        },
        None => "still running".to_string(),
    };
    let old_node = stderr.contains("globSync")
        || stderr.contains("enableCompileCache")
        || (stderr.contains("SyntaxError") && stderr.contains("node:"))
        || stderr.contains("ERR_UNKNOWN_BUILTIN_MODULE");
    if old_node {
        return format!(
            "{what} ({how}): Pi needs Node.js >= 22.19 but the `node` on PATH is older{}; put a \
             newer node first on PATH",
            agent::node_version()
                .await
                .map(|v| format!(" ({v})"))
                .unwrap_or_default()
        );
    }
    let reason = crate::pi_stderr::error_line(stderr);
    let hint = if reason.contains("EACCES") || reason.contains("EROFS") || reason.contains("EPERM")
    {
        "; Pi needs a writable agent dir (it keeps lock files beside auth.json): check \
         PI_CODING_AGENT_DIR and its permissions"
    } else {
        ""
    };
    if reason.is_empty() {
        format!("{what} ({how})")
    } else {
        format!(
            "{what} ({how}); Pi's stderr: {}{hint}",
            crate::pi_stderr::with_runner_advice(&reason)
        )
    }
}
