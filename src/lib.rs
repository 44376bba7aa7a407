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
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod complexity;
pub mod driver;
pub mod exit;
pub mod failover;
pub mod health;
pub mod manage;
pub mod output;
pub mod redact;
pub mod rpc;
pub mod settings;
pub mod signals;

use std::ffi::OsString;

use exit::Exit;

/// The whole program after `main`: returns how to exit.
pub fn run(args: Vec<OsString>) -> Exit {
    let inv = match cli::parse(args) {
        Ok(cli::Parsed::Info(text)) => {
            let _ = output::stdout_text(&text);
            return Exit::Success;
        }
        Ok(cli::Parsed::Run(inv)) => inv,
        Err(e) => {
            output::error_line(&e.0);
            output::error_line(&format!("usage: {} (see --help)", cli::USAGE));
            return Exit::Error;
        }
    };
    init_tracing(inv.verbose);
    let prepared = match attach::prepare(&inv.files, &inv.prompt) {
        Ok(p) => p,
        Err(e) => {
            output::error_line(&e.to_string());
            return Exit::Error;
        }
    };
    for note in &prepared.notes {
        output::error_line(note);
    }
    let settings = match settings::load() {
        Ok(s) => s,
        Err(e) => {
            output::error_line(&e.0);
            return Exit::Error;
        }
    };
    if let Some(w) = &settings.pi_warning {
        output::error_line(w);
    }
    let mut signals = match signals::install() {
        Ok(rx) => rx,
        Err(e) => {
            output::error_line(&format!("cannot install signal handlers: {e}"));
            return Exit::Error;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            output::error_line(&format!("cannot start the async runtime: {e}"));
            return Exit::Error;
        }
    };
    if inv.mode != cli::Mode::Run {
        return runtime.block_on(manage::run(&inv.mode, &settings, &inv.pi_args, inv.json));
    }
    let mut pi_args = inv.pi_args.clone();
    if let Some(level) = thinking_for(&inv, &prepared) {
        pi_args.push("--thinking".to_string());
        pi_args.push(level.to_string());
    }
    let job = driver::Job {
        message: prepared.message,
        images: prepared.images,
        config: failover::Config {
            first_response: settings.first_response,
            stall: settings.stall,
            round_limit: settings.round_limit,
            cooldown_scale: settings.cooldown_scale,
            models_scope: inv.models_scope.clone(),
        },
        verbose: inv.verbose,
        label: String::new(),
    };
    let mut memory;
    let mut shared;
    let backend: &mut dyn health::Backend = match &settings.agent_dir {
        Some(dir) => {
            shared = health::shared::Shared::new(
                dir,
                settings.cooldown_scale,
                Box::new(|line: &str| output::error_line(line)),
            );
            &mut shared
        }
        None => {
            output::error_line(
                "warning: no agent directory (set PI_CODING_AGENT_DIR or HOME); health is not shared",
            );
            memory = health::Memory::new(settings.cooldown_scale);
            &mut memory
        }
    };
    let report = runtime.block_on(driver::run(
        &settings.pi_command,
        &pi_args,
        &job,
        std::time::Duration::from_millis(inv.timeout_ms),
        backend,
        &mut signals,
    ));
    if let Some(answer) = &report.answer {
        if let Err(e) = output::answer(answer) {
            output::error_line(&format!("cannot write the answer to stdout: {e}"));
            return Exit::Error;
        }
    } else if let Some(err) = &report.error {
        output::error_line(err);
    }
    report.exit
}

/// `--thinking` wins (it is already among the forwarded flags); else `--task-complexity`
/// picks a level; else Pi's default stays.
fn thinking_for(inv: &cli::Invocation, prepared: &attach::Prepared) -> Option<&'static str> {
    if inv.thinking.is_some() {
        return None;
    }
    let complexity = inv.task_complexity.as_deref()?.parse().ok()?;
    let signals = complexity::Signals {
        prompt: &inv.prompt,
        input_chars: prepared.message.chars().count(),
        files: prepared.text_files,
        images: prepared.images.len(),
    };
    Some(complexity::thinking_level(complexity, &signals))
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
