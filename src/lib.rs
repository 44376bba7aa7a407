//! pi-ccswitch-run: runs a prompt through `pi --mode rpc` and fails over to a healthy model.
//!
//! Architecture, outside in:
//! - `main.rs` → [`run`]: parse the command line (`cli`), read the environment (`settings`),
//!   then a single run (`single`), a batch (`batch`) or a management command (`manage`).
//! - `job` builds one [`job::JobRequest`] for a prompt or a batch line (attachments read under
//!   its deadline by `attach`) and names how a job can end ([`job::JobEnd`]).
//! - `driver` runs a job on one Pi (`agent`, speaking `rpc`, started through `reaper`): one
//!   select loop over Pi, stops, deadlines and shared health (`health`); it executes what the
//!   failover machine asks for and returns facts.
//! - `failover` is sans-IO: `classify` turns an error into a class and breaker scope,
//!   `candidates` filters and ranks models, `machine` sequences it all.
//! - `output` is the only writer of stdout and the only code that words an ending; `console`
//!   writes stderr; `redact` scrubs everything printed or stored.

#![deny(clippy::unwrap_used, clippy::print_stdout)]

pub mod agent;
pub mod answer;
pub mod attach;
pub mod batch;
pub mod budget;
pub mod capacity;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod complexity;
pub mod console;
pub mod driver;
pub mod exit;
pub mod failover;
#[cfg(test)]
mod fuzz;
pub mod glob;
pub mod health;
pub mod job;
pub mod lines;
pub mod lockfile;
pub mod manage;
pub mod news;
pub mod output;
pub mod pace;
pub mod pi_stderr;
pub mod provider_list;
pub mod reaper;
pub mod redact;
pub mod registry;
pub mod rpc;
pub mod runlog;
pub mod schema;
mod secrets;
pub mod served;
pub mod settings;
pub mod shared;
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
    let console = console::Console::new();
    let inv = match cli::parse(args.iter().cloned()) {
        Ok(cli::Parsed::Info(text)) => {
            return match output::stdout_text(&text) {
                Ok(()) => Exit::Success,
                Err(e) => {
                    console.error_line(&format!("cannot write to stdout: {e}"));
                    Exit::Error
                }
            };
        }
        Ok(cli::Parsed::Run(inv)) => inv,
        Err(e) => {
            console.error_line(&e.0);
            console.error_line(&format!("usage: {} (see --help)", cli::USAGE));
            // `… --json | jq .exit_code` must read a record, not fail on an empty stdout.
            if cli::json_asked(&args) {
                let _ = output::print_record(&output::ResultRecord::failed(Exit::Error, &e.0));
            }
            return Exit::Error;
        }
    };
    init_tracing(inv.verbose);
    match fallible(&inv, &console) {
        Ok(exit) => exit,
        Err(err) => {
            // The whole context chain on one line: "cannot read the batch file x: No such file".
            let message = format!("{err:#}");
            console.error_line(&message);
            if inv.json && matches!(inv.mode, cli::Mode::Run | cli::Mode::Explain) {
                let _ = output::print_record(&output::ResultRecord::failed(Exit::Error, &message));
            }
            Exit::Error
        }
    }
}

/// Everything after parsing; an `Err` is a one-line reason for exit 2.
fn fallible(inv: &cli::Invocation, console: &console::Console) -> anyhow::Result<Exit> {
    let timeout = std::time::Duration::from_millis(inv.timeout_ms);
    // `--timeout-ms` counts from here: reading the attachments is part of the run.
    let started = clock::now().instant;
    let deadline = started + timeout;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // A schema that cannot work is refused before anything is read or sent (a batch loads its
    // own, first thing).
    let schema = match inv.mode {
        cli::Mode::Run | cli::Mode::Explain => job::output_schema(inv)?,
        _ => None,
    };
    // A single run's attachments come first: a bad file is exit 2 before anything else.
    let prepared = match inv.mode {
        cli::Mode::Run | cli::Mode::Explain => {
            let reading = job::prepare(
                &inv.files,
                &inv.prompt,
                attach::Stdin::Allowed,
                deadline,
                inv.timeout_ms,
            );
            match runtime.block_on(reading) {
                Ok(p) => Some(p),
                // A bad attachment, the deadline, or only empty ones (`git diff A...A | … @-`:
                // a review of nothing would be made up): nothing is sent, as for a batch job.
                Err(unprepared) => return Ok(single::unprepared(inv, console, unprepared)),
            }
        }
        _ => None,
    };
    if let Some(p) = &prepared {
        for note in &p.notes {
            console.error_line(note);
        }
        if let Some(warning) = p.empty_warning() {
            console.error_line(&warning);
        }
    }
    let settings = settings::load(inv.health_url.as_deref())?;
    secrets::register(&settings, deadline);
    if let Some(w) = &settings.pi_warning {
        console.error_line(w);
    }
    if matches!(
        inv.mode,
        cli::Mode::Run | cli::Mode::Explain | cli::Mode::Batch(_)
    ) && let Some(dir) = &settings.agent_dir
    {
        // Under cron a key variable is usually just missing: say which, before Pi reports only
        // that no provider has credentials (or that a --model is unknown).
        let config = settings::pi_config(dir);
        for unset in catalog::origin::unset_references(&config, &|name: &str| settings::var(name)) {
            console.error_line(&format!("warning: models.json: {unset}"));
        }
    }
    let groups = agent::PiGroups::new();
    match (&inv.mode, prepared) {
        (cli::Mode::Run | cli::Mode::Explain, Some(prepared)) => {
            let signals =
                signals::install(groups.clone()).context("cannot install signal handlers")?;
            let shared = shared_for(&settings, inv, console)?;
            let run = single::Run {
                inv,
                settings: &settings,
                started,
                deadline,
                shared: &shared,
                console,
                groups: &groups,
                schema,
            };
            Ok(runtime.block_on(run.go(prepared, signals)))
        }
        (cli::Mode::Batch(args), _) => {
            let shared = shared_for(&settings, inv, console)?;
            runtime.block_on(batch::run(inv, args, &settings, shared, console, &groups))
        }
        // Management commands keep the default signal actions: nothing to clean up but a
        // short-lived Pi, which exits when our end of its stdin closes.
        (cli::Mode::Manage(m), _) => Ok(runtime.block_on(manage::run(m, &settings, inv, console))),
        (cli::Mode::Run | cli::Mode::Explain, None) => {
            anyhow::bail!("the attachments were not read")
        }
    }
}

/// What the jobs of this process share: the health thread over the state file when there is
/// an agent dir (over process memory otherwise), capacity slots, and the spend ledger against
/// `--max-cost`.
fn shared_for(
    settings: &settings::Settings,
    inv: &cli::Invocation,
    console: &console::Console,
) -> anyhow::Result<shared::SharedHandle> {
    if settings.agent_dir.is_none() && settings.health_url.is_none() {
        console.error_line(
            "warning: no agent directory (set PI_CODING_AGENT_DIR or HOME); health is not shared",
        );
    }
    let store = health::store::open(settings, IN_RUN_LOCK_WAIT).map_err(anyhow::Error::msg)?;
    // The same store again, for capacity slots (see `SharedHandle::start`).
    let capacity_store = health::store::open(settings, IN_RUN_LOCK_WAIT).ok();
    // The run log stays a local file, whatever the store.
    let log = settings.agent_dir.as_deref().map(runlog::RunLog::new);
    let warn = console.clone();
    shared::SharedHandle::start(
        store,
        capacity_store,
        settings.cooldown_scale,
        inv.budget.clone(),
        log,
        Box::new(move |line: &str| warn.error_line(line)),
    )
    .context("cannot start the health thread")
}

/// Longest wait for the state-file lock during a run: runs hold it for milliseconds, and past
/// this the run goes on in memory rather than fall behind.
const IN_RUN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(1000);

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
