//! One run: Pi + the failover machine + health + signals in one select loop. The only place
//! that sleeps. It executes what the machine asks and reports what happened; it decides
//! nothing about failover.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::agent::{self, Agent};
use crate::catalog::ModelInfo;
use crate::clock;
use crate::exit::Exit;
use crate::failover::{Action, Attempt, Config, Machine, Outcome};
use crate::health::Backend;
use crate::rpc::ImageContent;
use crate::signals::Interrupt;

/// How long Pi gets to exit after its stdin closes before it is signalled.
const STOP_GRACE: Duration = Duration::from_millis(2000);
/// After an interrupt, how long Pi gets to settle the aborted run.
const INTERRUPT_GRACE: Duration = Duration::from_millis(1500);

/// What one run needs.
pub struct Request<'a> {
    pub pi_command: &'a std::ffi::OsString,
    pub pi_args: &'a [String],
    pub message: String,
    pub images: Vec<ImageContent>,
    pub timeout: Duration,
    pub config: Config,
    pub verbose: u8,
}

/// What happened, for the exit code, stdout and `--json`.
#[derive(Debug, Clone)]
pub struct Report {
    pub exit: Exit,
    /// The answer, when there is one.
    pub answer: Option<String>,
    pub model: Option<ModelInfo>,
    /// One line for stderr explaining a non-zero exit.
    pub error: Option<String>,
    pub attempts: Vec<Attempt>,
    pub switches: u32,
    pub elapsed_ms: u64,
}

enum Ended {
    Machine(Outcome),
    PiExited,
    Malformed(String),
    StdinGone,
    Spawn(String),
}

/// Runs one prompt to its end. Pi is always stopped and reaped before this returns.
pub async fn run(
    req: Request<'_>,
    backend: &mut dyn Backend,
    signals: &mut UnboundedReceiver<Interrupt>,
) -> Report {
    let start = clock::now();
    let deadline = start.instant + req.timeout;
    let mut agent = match Agent::spawn(req.pi_command, req.pi_args) {
        Ok(a) => a,
        Err(e) => {
            return finish_report(start.instant, Ended::Spawn(e.to_string()), None, None).report;
        }
    };
    let mut machine = Machine::new(
        req.config.clone(),
        backend.load(start.wall_ms),
        req.message,
        req.images,
    );
    let mut interrupt: Option<Option<Interrupt>> = None; // Some(None) = deadline
    let mut interrupt_at: Option<Instant> = None;
    let ended = 'run: loop {
        while let Some(action) = machine.poll_action() {
            match action {
                Action::Send { id, command } => {
                    tracing::debug!(command = command.name(), id, "→ pi");
                    if agent.send(&id, &command).await.is_err() {
                        break 'run Ended::StdinGone;
                    }
                }
                Action::Record(delta) => {
                    let now = clock::now();
                    if let Some(merged) = backend.commit(&[delta], now.wall_ms) {
                        machine.handle_health(merged);
                    }
                }
                Action::ClaimProbe { provider } => {
                    let now = clock::now();
                    let granted = backend.claim_probe(&provider, now.wall_ms);
                    machine.handle_probe_result(now, granted);
                }
                Action::Progress { line, verbose_only } => {
                    if !verbose_only || req.verbose > 0 {
                        crate::output::progress_line(&line);
                    }
                }
                Action::Finish(outcome) => break 'run Ended::Machine(outcome),
            }
        }
        let machine_deadline = machine.poll_deadline();
        let grace_deadline = interrupt_at.map(|t| t + INTERRUPT_GRACE);
        tokio::select! {
            biased;
            sig = signals.recv(), if interrupt.is_none() => {
                if let Some(sig) = sig {
                    interrupt = Some(Some(sig));
                    interrupt_at = Some(clock::now().instant);
                    machine.handle_interrupt(clock::now());
                }
            }
            () = sleep_until(Some(deadline)), if interrupt.is_none() => {
                interrupt = Some(None);
                interrupt_at = Some(clock::now().instant);
                machine.handle_interrupt(clock::now());
            }
            () = sleep_until(grace_deadline), if grace_deadline.is_some() => {
                break 'run Ended::Machine(Outcome::Aborted);
            }
            () = sleep_until(machine_deadline), if machine_deadline.is_some() => {
                machine.handle_timeout(clock::now());
            }
            msg = agent.next() => match msg {
                Ok(Some(msg)) => machine.handle_incoming(clock::now(), msg),
                Ok(None) => break 'run Ended::PiExited,
                Err(e) => break 'run Ended::Malformed(e.to_string()),
            },
        }
    };
    let mut report = finish_report(
        start.instant,
        ended,
        interrupt,
        Some((&mut agent, &machine)),
    )
    .await_pi()
    .await;
    agent.stop(STOP_GRACE).await;
    report.attempts = machine.attempts().to_vec();
    report.switches = machine.switches();
    report
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// A report that may still need Pi's exit status and stderr to explain itself.
struct Draft<'a> {
    report: Report,
    pi: Option<(&'a mut Agent, bool)>,
}

impl Draft<'_> {
    async fn await_pi(self) -> Report {
        let mut report = self.report;
        if let Some((agent, died)) = self.pi
            && died
        {
            let status = agent.exit_status(Duration::from_millis(1000)).await;
            let stderr = agent.stderr_text().await;
            report.error = Some(explain_pi_death(
                report.error.as_deref().unwrap_or("Pi exited"),
                status,
                &stderr,
            ));
        }
        report
    }
}

fn finish_report<'a>(
    start: Instant,
    ended: Ended,
    interrupt: Option<Option<Interrupt>>,
    pi: Option<(&'a mut Agent, &Machine)>,
) -> Draft<'a> {
    let elapsed_ms = u64::try_from(
        clock::now()
            .instant
            .saturating_duration_since(start)
            .as_millis(),
    )
    .unwrap_or(u64::MAX);
    let mut report = Report {
        exit: Exit::Error,
        answer: None,
        model: None,
        error: None,
        attempts: Vec::new(),
        switches: 0,
        elapsed_ms,
    };
    let (agent, tried) = match pi {
        Some((agent, machine)) => (Some(agent), machine.tried()),
        None => (None, Vec::new()),
    };
    // An interrupt decides the exit code whatever the machine concluded meanwhile.
    if let Some(cause) = interrupt
        && !matches!(ended, Ended::Machine(Outcome::Answer { .. }))
    {
        report.exit = match cause {
            Some(sig) => sig.exit(),
            None => Exit::Timeout,
        };
        report.error = Some(match cause {
            Some(Interrupt::Int) => "interrupted (SIGINT)".to_string(),
            Some(Interrupt::Term) => "terminated (SIGTERM)".to_string(),
            None => format!("timed out after {elapsed_ms} ms (--timeout-ms)"),
        });
        return Draft { report, pi: None };
    }
    let mut died = false;
    match ended {
        Ended::Machine(Outcome::Answer { text, model }) => {
            report.exit = Exit::Success;
            report.answer = Some(text);
            report.model = Some(model);
        }
        Ended::Machine(Outcome::Exhausted { reason, last_error }) => {
            report.exit = Exit::Exhausted;
            let tried = if tried.is_empty() {
                "none".to_string()
            } else {
                tried.join(", ")
            };
            report.error = Some(match last_error {
                Some(e) => format!("failover exhausted: {reason}; tried: {tried}; last error: {e}"),
                None => format!("failover exhausted: {reason}; tried: {tried}"),
            });
        }
        Ended::Machine(Outcome::EmptyAnswer) => {
            report.error = Some("Pi returned an empty answer".to_string());
        }
        Ended::Machine(Outcome::Aborted) => {
            report.error = Some("the run was aborted".to_string());
        }
        Ended::Machine(Outcome::Fatal(msg)) => report.error = Some(msg),
        Ended::PiExited | Ended::StdinGone => {
            report.error = Some("Pi exited before answering".to_string());
            died = true;
        }
        Ended::Malformed(msg) => report.error = Some(msg),
        Ended::Spawn(msg) => report.error = Some(msg),
    }
    Draft {
        report,
        pi: agent.map(|a| (a, died)),
    }
}

/// Turns Pi's early exit into one actionable line.
fn explain_pi_death(what: &str, status: Option<std::process::ExitStatus>, stderr: &str) -> String {
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
        || (stderr.contains("SyntaxError") && stderr.contains("node:"))
        || stderr.contains("ERR_UNKNOWN_BUILTIN_MODULE");
    if old_node {
        return format!(
            "{what} ({how}): Pi needs Node.js >= 22.19 but the `node` on PATH is older{}; put a \
             newer node first on PATH",
            agent::node_version()
                .map(|v| format!(" ({v})"))
                .unwrap_or_default()
        );
    }
    let tail: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        format!("{what} ({how})")
    } else {
        format!("{what} ({how}); Pi's stderr: {tail}")
    }
}
