//! Entry point: everything lives in the library so tests can reach it.

#![deny(clippy::unwrap_used)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let exit = pi_ccswitch_run::run(std::env::args_os().collect());
    ExitCode::from(exit.code())
}
