//! SIGINT/SIGTERM/SIGHUP handling, installed once. Signals become [`Interrupt`] values on a
//! channel; the driver stops Pi and exits with 130/143. A second SIGINT while stopping exits at
//! once, after SIGKILLing every Pi process group.

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tokio::sync::watch;

use crate::exit::Exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    Int,
    Term,
    /// The terminal went away; ends the run like SIGTERM.
    Hup,
}

impl Interrupt {
    pub fn exit(self) -> Exit {
        match self {
            Interrupt::Int => Exit::Interrupted,
            Interrupt::Term | Interrupt::Hup => Exit::Terminated,
        }
    }
}

/// Installs the handlers. The receiver holds the first interrupt once one arrived; every
/// batch worker watches the same value. A second SIGINT kills `groups` (every live Pi) and
/// exits at once.
pub fn install(
    groups: crate::agent::PiGroups,
) -> std::io::Result<watch::Receiver<Option<Interrupt>>> {
    let (tx, rx) = watch::channel(None);
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut seen = 0u32;
            for sig in signals.forever() {
                seen += 1;
                let interrupt = match sig {
                    SIGINT => Interrupt::Int,
                    SIGHUP => Interrupt::Hup,
                    _ => Interrupt::Term,
                };
                if seen > 1 && interrupt == Interrupt::Int {
                    groups.kill_all();
                    std::process::exit(i32::from(Exit::Interrupted.code()));
                }
                if tx.borrow().is_none() {
                    tx.send_replace(Some(interrupt));
                }
            }
        })?;
    Ok(rx)
}
