//! SIGINT/SIGTERM/SIGHUP handling, installed once. Signals become [`Interrupt`] values on a
//! channel; the driver stops Pi and exits with 130/143. A second SIGINT while stopping exits at
//! once (Pi then sees its stdin close and exits by itself).

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tokio::sync::mpsc;

use crate::exit::Exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    Int,
    Term,
}

impl Interrupt {
    pub fn exit(self) -> Exit {
        match self {
            Interrupt::Int => Exit::Interrupted,
            Interrupt::Term => Exit::Terminated,
        }
    }
}

/// Installs the handlers and returns the receiving end.
pub fn install() -> std::io::Result<mpsc::UnboundedReceiver<Interrupt>> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut seen = 0u32;
            for sig in signals.forever() {
                seen += 1;
                let interrupt = if sig == SIGINT {
                    Interrupt::Int
                } else {
                    Interrupt::Term
                };
                if seen > 1 && interrupt == Interrupt::Int {
                    std::process::exit(i32::from(Exit::Interrupted.code()));
                }
                let _ = tx.send(interrupt);
            }
        })?;
    Ok(rx)
}
