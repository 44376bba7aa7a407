//! One prompt from the command line: run it (or `--explain` it) and print the answer, the JSON
//! object or the explanation on stdout; the error and the retry hint go to stderr.

use tokio::sync::watch;

use crate::attach::Prepared;
use crate::cli::{Invocation, Mode};
use crate::driver::{self, Job};
use crate::exit::Exit;
use crate::health::service::HealthHandle;
use crate::output;
use crate::settings::Settings;
use crate::signals::Interrupt;

pub async fn run(
    inv: &Invocation,
    settings: &Settings,
    prepared: Prepared,
    deadline: std::time::Instant,
    health: &HealthHandle,
    mut signals: watch::Receiver<Option<Interrupt>>,
) -> Exit {
    let thinking = crate::job_thinking(
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
    let attachments = (prepared.text_files, prepared.images.len());
    let job = Job {
        message: prepared.message,
        images: prepared.images,
        config: crate::failover_config(settings, inv, false),
        verbose: inv.verbose,
        label: String::new(),
        in_batch: false,
        thinking,
        explain,
    };
    let report = driver::run(
        &settings.pi_command,
        &pi_args,
        &job,
        deadline,
        health,
        &mut signals,
    )
    .await;
    if let Some(err) = &report.error {
        output::error_line(err);
    }
    if let Some(hint) = &report.retry {
        output::error_line(&format!("retry: {}", hint.reason));
    }
    let written = match &report.explanation {
        Some(e) if inv.json => output::stdout_text(&format!(
            "{}\n",
            output::explanation_json(e, &thinking_source, attachments)
        )),
        Some(e) => output::stdout_text(&output::explanation_text(
            e,
            &thinking_source,
            attachments,
        )),
        None if inv.json => {
            output::stdout_text(&format!("{}\n", output::result_json(&report)))
        }
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
