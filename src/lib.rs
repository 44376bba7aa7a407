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
pub mod capacity;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod complexity;
pub mod driver;
pub mod exit;
pub mod failover;
#[cfg(test)]
mod fuzz;
pub mod glob;
pub mod health;
pub mod lines;
pub mod lockfile;
pub mod manage;
pub mod news;
pub mod output;
pub mod pi_stderr;
pub mod reaper;
pub mod redact;
pub mod registry;
pub mod report;
pub mod rpc;
pub mod run_config;
pub mod runlog;
mod secrets;
pub mod settings;
pub mod signals;
pub mod single;
pub mod timefmt;

use std::ffi::OsString;

use anyhow::Context as _;
use exit::Exit;

/// The whole program after `main`: returns how to exit.
pub fn run(args: Vec<OsString>) -> Exit {
    if reaper::selected(&args) {
        reaper::run(&args);
    }
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
            if inv.json && matches!(inv.mode, cli::Mode::Run | cli::Mode::Explain) {
                let report = report::Report::failed(Exit::Error, message);
                let _ = output::stdout_text(&format!("{}\n", output::result_json(&report)));
            }
            Exit::Error
        }
    }
}

/// Everything after parsing; an `Err` is a one-line reason for exit 2.
fn fallible(inv: &cli::Invocation) -> anyhow::Result<Exit> {
    let timeout = std::time::Duration::from_millis(inv.timeout_ms);
    // `--timeout-ms` counts from here: reading the attachments is part of the run.
    let started = clock::now().instant;
    let deadline = started + timeout;
    let prepared = match inv.mode {
        cli::Mode::Run | cli::Mode::Explain => {
            match prepare_within(&inv.files, &inv.prompt, deadline)? {
                Some(p) => p,
                None => {
                    output::error_line(&format!(
                        "timed out after {} ms while reading the attachments (--timeout-ms)",
                        inv.timeout_ms
                    ));
                    return Ok(Exit::Timeout);
                }
            }
        }
        _ => attach::Prepared::default(),
    };
    for note in &prepared.notes {
        output::error_line(note);
    }
    if let Some(warning) = prepared.empty_warning() {
        output::error_line(&warning);
    }
    let settings = settings::load(inv.health_url.as_deref())?;
    secrets::register(&settings, deadline);
    if let Some(w) = &settings.pi_warning {
        output::error_line(w);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match &inv.mode {
        cli::Mode::Run | cli::Mode::Explain => {
            let signals = signals::install().context("cannot install signal handlers")?;
            let health = health_for(&settings)?;
            Ok(runtime.block_on(single::run(
                inv, &settings, prepared, started, deadline, &health, signals,
            )))
        }
        cli::Mode::Batch(args) => {
            let health = health_for(&settings)?;
            runtime.block_on(batch::run(inv, args, &settings, health))
        }
        // Management commands keep the default signal actions: nothing to clean up but a
        // short-lived Pi, which exits when our end of its stdin closes.
        cli::Mode::Manage(m) => Ok(runtime.block_on(manage::run(m, &settings, inv))),
    }
}

/// The health thread over the state file when there is an agent dir, over process memory
/// otherwise.
fn health_for(settings: &settings::Settings) -> anyhow::Result<health::service::HealthHandle> {
    if settings.agent_dir.is_none() && settings.health_url.is_none() {
        output::error_line(
            "warning: no agent directory (set PI_CODING_AGENT_DIR or HOME); health is not shared",
        );
    }
    let store = health::store::open(settings, IN_RUN_LOCK_WAIT).map_err(anyhow::Error::msg)?;
    // The run log stays a local file, whatever the store.
    let log = settings.agent_dir.as_deref().map(runlog::RunLog::new);
    health::service::HealthHandle::start(
        store,
        settings.cooldown_scale,
        log,
        Box::new(|line: &str| output::error_line(line)),
    )
    .context("cannot start the health thread")
}

/// Longest wait for the state-file lock during a run: runs hold it for milliseconds, and past
/// this the run goes on in memory rather than fall behind.
const IN_RUN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(1000);

/// Reads the attachments on a thread of its own, so `--timeout-ms` covers them too (`None`: the
/// deadline passed first; the process is about to exit, so the reader is simply left behind).
fn prepare_within(
    files: &[String],
    prompt: &str,
    deadline: std::time::Instant,
) -> anyhow::Result<Option<attach::Prepared>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (files, prompt) = (files.to_vec(), prompt.to_string());
    std::thread::Builder::new()
        .name("attachments".into())
        .spawn(move || {
            let _ = tx.send(attach::prepare(&files, &prompt, attach::Stdin::Allowed));
        })
        .context("cannot start reading the attachments")?;
    let left = deadline.saturating_duration_since(clock::now().instant);
    match rx.recv_timeout(left) {
        Ok(prepared) => Ok(Some(prepared?)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(None),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            anyhow::bail!("reading the attachments failed")
        }
    }
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
