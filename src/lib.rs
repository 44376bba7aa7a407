//! pi-ccswitch-run: runs a prompt through `pi --mode rpc` and fails over to a healthy model.
//!
//! Architecture, outside in:
//! - `main.rs` → [`run`]: parse the command line (`cli`), read the environment (`settings`),
//!   read attachments (`attach`), then drive one run (`driver`) and map it to an [`exit::Exit`].
//! - `driver` owns the loop: Pi's process (`agent`, speaking `rpc`), signals, deadlines, and
//!   the shared health (`health`). It executes what the failover machine asks for.
//! - `failover` is sans-IO: `classify` turns an error into a class and breaker scope, `breaker`
//!   computes cooldowns, `candidates` filters and ranks models, `machine` sequences it all.
//! - `output` is the only writer of stdout; `redact` scrubs everything printed or stored.

#![deny(clippy::unwrap_used, clippy::print_stdout)]

pub mod agent;
pub mod attach;
pub mod batch;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod complexity;
pub mod driver;
pub mod exit;
pub mod failover;
#[cfg(test)]
mod fuzz;
pub mod health;
pub mod lines;
pub mod manage;
pub mod output;
pub mod redact;
pub mod rpc;
pub mod settings;
pub mod signals;

use std::ffi::OsString;

use anyhow::Context as _;
use exit::Exit;

/// The whole program after `main`: returns how to exit.
pub fn run(args: Vec<OsString>) -> Exit {
    let inv = match cli::parse(args) {
        Ok(cli::Parsed::Info(text)) => {
            return match output::stdout_text(&text) {
                Ok(()) => Exit::Success,
                Err(e) => {
                    output::error_line(&format!("cannot write to stdout: {e}"));
                    Exit::Error
                }
            };
        }
        Ok(cli::Parsed::Run(inv)) => inv,
        Err(e) => {
            output::error_line(&e.0);
            output::error_line(&format!("usage: {} (see --help)", cli::USAGE));
            return Exit::Error;
        }
    };
    init_tracing(inv.verbose);
    match fallible(&inv) {
        Ok(exit) => exit,
        Err(err) => {
            // The whole context chain on one line: "cannot read the batch file x: No such file".
            let message = format!("{err:#}");
            output::error_line(&message);
            if inv.json && matches!(inv.mode, cli::Mode::Run) {
                let report = driver::Report::failed(Exit::Error, message);
                let _ = output::stdout_text(&format!("{}\n", output::result_json(&report)));
            }
            Exit::Error
        }
    }
}

/// Everything after parsing; an `Err` is a one-line reason for exit 2.
fn fallible(inv: &cli::Invocation) -> anyhow::Result<Exit> {
    let prepared = match inv.mode {
        cli::Mode::Run => attach::prepare(&inv.files, &inv.prompt)?,
        _ => attach::Prepared::default(),
    };
    for note in &prepared.notes {
        output::error_line(note);
    }
    let settings = settings::load()?;
    if let Some(w) = &settings.pi_warning {
        output::error_line(w);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let config = failover::Config {
        first_response: settings.first_response,
        stall: settings.stall,
        round_limit: settings.round_limit,
        cooldown_scale: settings.cooldown_scale,
        models_scope: inv.models_scope.clone(),
    };
    let timeout = std::time::Duration::from_millis(inv.timeout_ms);
    match &inv.mode {
        cli::Mode::Run => {}
        cli::Mode::Batch(file) => {
            // Read the jobs before taking over SIGINT/SIGTERM: until then the default action
            // (end the process) is exactly right, even while waiting on stdin.
            let input = read_batch_input(file)?;
            let signals = signals::install().context("cannot install signal handlers")?;
            let plan = batch::Plan {
                pi_command: settings.pi_command.clone(),
                pi_args: inv.pi_args.clone(),
                config,
                timeout,
                verbose: inv.verbose,
                thinking: inv.thinking.clone(),
                complexity: inv.task_complexity.as_deref().and_then(|c| c.parse().ok()),
                workers: inv.jobs.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
                }),
            };
            let backend = backend_for(&settings);
            return Ok(runtime.block_on(batch::run(&input, plan, backend, signals)));
        }
        // Management commands keep the default signal actions: nothing to clean up but a
        // short-lived Pi, which exits when our end of its stdin closes.
        mode => return Ok(runtime.block_on(manage::run(mode, &settings, &inv.pi_args, inv.json))),
    }
    let mut signals = signals::install().context("cannot install signal handlers")?;
    let thinking = job_thinking(
        inv.thinking.as_deref(),
        inv.task_complexity.as_deref().and_then(|c| c.parse().ok()),
        &inv.prompt,
        &prepared,
    );
    let mut pi_args = inv.pi_args.clone();
    if inv.thinking.is_none()
        && let Some(level) = &thinking
    {
        pi_args.push("--thinking".to_string());
        pi_args.push(level.clone());
    }
    let job = driver::Job {
        message: prepared.message,
        images: prepared.images,
        config,
        verbose: inv.verbose,
        label: String::new(),
        thinking,
    };
    let mut backend = backend_for(&settings);
    let report = runtime.block_on(driver::run(
        &settings.pi_command,
        &pi_args,
        &job,
        timeout,
        backend.as_mut(),
        &mut signals,
    ));
    if let Some(err) = &report.error {
        output::error_line(err);
    }
    let written = if inv.json {
        output::stdout_text(&format!("{}\n", output::result_json(&report)))
    } else if let Some(answer) = &report.answer {
        output::answer(answer)
    } else {
        Ok(())
    };
    if let Err(e) = written {
        output::error_line(&format!("cannot write to stdout: {e}"));
        return Ok(Exit::Error);
    }
    Ok(report.exit)
}

/// The shared state file when there is an agent dir; in-memory health otherwise.
fn backend_for(settings: &settings::Settings) -> Box<dyn health::Backend> {
    match &settings.agent_dir {
        Some(dir) => Box::new(health::shared::Shared::new(
            dir,
            settings.cooldown_scale,
            Box::new(|line: &str| output::error_line(line)),
        )),
        None => {
            output::error_line(
                "warning: no agent directory (set PI_CODING_AGENT_DIR or HOME); health is not shared",
            );
            Box::new(health::Memory::new(settings.cooldown_scale))
        }
    }
}

/// The job file of `--batch` (`-` = stdin), as bytes: a line that is not UTF-8 is reported
/// on its own, the other jobs still run.
fn read_batch_input(file: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = if file == "-" {
        std::io::stdin().lock().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_end(&mut bytes).map(|_| ()))
    };
    read.with_context(|| format!("cannot read the batch file {file}"))?;
    Ok(bytes)
}

/// The thinking level of one prompt: `--thinking`, else `--task-complexity` estimated on this
/// prompt and its attachments, else none (see `complexity::effective_thinking`).
pub fn job_thinking(
    thinking: Option<&str>,
    complexity: Option<complexity::Complexity>,
    prompt: &str,
    prepared: &attach::Prepared,
) -> Option<String> {
    let signals = complexity::Signals {
        prompt,
        input_chars: prepared.message.chars().count(),
        files: prepared.text_files,
        images: prepared.images.len(),
    };
    complexity::effective_thinking(thinking, complexity, &signals).map(str::to_string)
}

fn init_tracing(verbose: u8) {
    let level = match verbose {
        0 | 1 => tracing::Level::WARN,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
