//! One prompt from the command line: run it (or `--explain` it) and print the answer, the JSON
//! object or the explanation on stdout; the error and the retry hint go to stderr.

use tokio::sync::watch;

use crate::attach::Prepared;
use crate::cli::{Invocation, Mode};
use crate::driver::{self, Job, Session};
use crate::exit::Exit;
use crate::health::service::HealthHandle;
use crate::output;
use crate::output::StatusLine;
use crate::report::Report;
use crate::settings::Settings;
use crate::signals::Interrupt;

/// Runs the prompt; `started` is when the run began (its `--timeout-ms` counts from there, and
/// so does the `elapsed_ms` it reports).
pub async fn run(
    inv: &Invocation,
    settings: &Settings,
    prepared: Prepared,
    started: std::time::Instant,
    deadline: std::time::Instant,
    health: &HealthHandle,
    mut signals: watch::Receiver<Option<Interrupt>>,
) -> Exit {
    let thinking = crate::run_config::job_thinking(
        inv.thinking.as_deref(),
        inv.task_complexity,
        &inv.prompt,
        &prepared,
    );
    let thinking_source = match (&inv.thinking, inv.task_complexity, &thinking) {
        (Some(t), _, _) => format!("{t} (--thinking)"),
        (None, Some(c), Some(t)) => format!("{t} (--task-complexity {c})"),
        _ => "the model's own default".to_string(),
    };
    let mut pi_args = inv.pi_args();
    if inv.thinking.is_none()
        && let Some(level) = &thinking
    {
        pi_args.push("--thinking".to_string());
        pi_args.push(level.clone());
    }
    let explain = inv.mode == Mode::Explain;
    let attachments = output::Inputs {
        text_files: prepared.text_files,
        images: prepared.images.len(),
        empty: prepared.empty.clone(),
    };
    let job = Job {
        message: prepared.message,
        images: prepared.images,
        config: crate::run_config::failover_config(settings, inv, false),
        verbose: inv.verbose,
        label: String::new(),
        in_batch: false,
        thinking,
        explain,
    };
    let mut session = match Session::start(&settings.pi_command, &pi_args) {
        Ok(s) => Some(s),
        Err(e) => {
            let mut r = Report::failed(Exit::Error, e.to_string());
            r.pi_start_failed = true;
            return deliver(inv, &r, &thinking_source, &attachments);
        }
    };
    let mut status = StatusLine::for_stderr();
    let mut report = match session.as_mut() {
        Some(s) => {
            s.run_job(&job, health, &mut signals, deadline, &mut status)
                .await
        }
        None => Report::failed(Exit::Error, "Pi did not start".to_string()),
    };
    // The answer first: stopping Pi and writing shared health afterwards must never delay it.
    report.elapsed_ms = driver::ms_since(started);
    let exit = deliver(inv, &report, &thinking_source, &attachments);
    if let Some(s) = session {
        s.stop().await;
    }
    // What was not written by the deadline (or within a moment) is lost, as when the store is
    // down: the exit never waits on a slow store.
    let left = deadline.saturating_duration_since(crate::clock::now().instant);
    health.flush_within(left.min(FLUSH_LIMIT)).await;
    exit
}

/// The longest the end of a run waits for shared health to be written.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_millis(1000);

/// Prints what the run came to (the answer, the JSON object or the explanation on stdout; the
/// error and the retry hint on stderr) and returns its exit code.
fn deliver(
    inv: &Invocation,
    report: &Report,
    thinking_source: &str,
    attachments: &output::Inputs,
) -> Exit {
    if let Some(err) = &report.error {
        output::error_line(err);
    }
    if let Some(hint) = &report.retry {
        output::error_line(&format!("retry: {}", hint.reason));
    }
    let written = match &report.explanation {
        Some(e) if inv.json => output::stdout_text(&format!(
            "{}\n",
            output::explanation_json(e, thinking_source, attachments)
        )),
        Some(e) => output::stdout_text(&output::explanation_text(e, thinking_source, attachments)),
        None if inv.json => output::stdout_text(&format!("{}\n", output::result_json(report))),
        None => match &report.answer {
            Some(answer) => output::answer(answer),
            None => Ok(()),
        },
    };
    if let Err(e) = written {
        output::error_line(&format!("cannot write to stdout: {e}"));
        return Exit::Error;
    }
    report.exit
}
