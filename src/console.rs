//! stderr, the channel for people: one whole line at a time (prefixed, redacted), the live
//! status line redrawn in place, and what a batch has already said. One [`Console`] is made per
//! process and handed to whatever prints (runs, batch workers, the health thread, the job
//! reader), so the status line is wiped before any other line and lines never run into each
//! other. stdout is `output`'s.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};

use crate::failover::Note;
use crate::news::Said;

/// At most this many distinct Pi warnings are remembered (to say each once).
const MAX_PI_WARNINGS: usize = 256;

/// What stderr shows and what has been said on it. Cheap to clone; every clone is the same.
#[derive(Clone, Default)]
pub struct Console {
    state: Arc<Mutex<ConsoleState>>,
}

#[derive(Default)]
struct ConsoleState {
    /// A status line is on screen right now.
    status_shown: bool,
    /// What the batch has said (breaker changes and warnings are news once).
    said: Said,
    /// Pi's `Warning:` lines already passed on.
    pi_warnings: BTreeSet<String>,
}

impl Console {
    pub fn new() -> Console {
        Console::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ConsoleState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes one whole line, wiping the status line first if one is shown.
    fn line(&self, line: &str) {
        let mut st = self.lock();
        let mut err = io::stderr().lock();
        if st.status_shown {
            let _ = write!(err, "\r\x1b[2K");
            st.status_shown = false;
        }
        let _ = writeln!(err, "{line}");
    }

    /// One diagnostic line, prefixed and redacted.
    pub fn error_line(&self, text: &str) {
        self.line(&format!("pi-ccswitch-run: {}", redact_keep_len(text)));
    }

    /// A progress line (`switch a → b (quota)`), redacted.
    pub fn progress_line(&self, text: &str) {
        self.line(&format!("[ccswitch] {}", redact_keep_len(text)));
    }

    /// Whether a progress line of this kind (without its job label) is news for the batch.
    pub fn news(&self, note: Note, line: &str) -> bool {
        self.lock().said.news(note, line)
    }

    /// Whether Pi's warning `line` is said for the first time in this process.
    pub fn first_pi_warning(&self, line: &str) -> bool {
        let mut st = self.lock();
        if st.pi_warnings.len() >= MAX_PI_WARNINGS {
            st.pi_warnings.clear();
        }
        st.pi_warnings.insert(line.to_string())
    }

    /// A live status line on this console, shown only when stderr is a terminal.
    pub fn status_line(&self) -> StatusLine {
        StatusLine {
            console: self.clone(),
            enabled: io::IsTerminal::is_terminal(&io::stderr()),
        }
    }

    /// A status line that never shows (batch workers, tests).
    pub fn no_status_line(&self) -> StatusLine {
        StatusLine {
            console: self.clone(),
            enabled: false,
        }
    }
}

/// Redaction with a generous cap: diagnostics may be long, secrets may not appear at all.
/// Every line of a multi-line text is cleaned on its own (control characters included).
fn redact_keep_len(text: &str) -> String {
    text.lines()
        .map(|l| crate::redact::redact_capped(l, 1000))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A one-line live status on stderr, redrawn in place; silent unless stderr is a terminal.
pub struct StatusLine {
    console: Console,
    enabled: bool,
}

impl StatusLine {
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Replaces the status line with `text` (cut to 100 chars).
    pub fn show(&mut self, text: &str) {
        if self.enabled {
            let text: String = text.chars().take(100).collect();
            let mut st = self.console.lock();
            let _ = write!(io::stderr().lock(), "\r\x1b[2K{text}");
            st.status_shown = true;
        }
    }

    pub fn show_run(&mut self, model: Option<&str>, attempt: usize, elapsed: std::time::Duration) {
        self.show(&format!(
            "⟳ {} · attempt {attempt} · {:.1}s",
            model.unwrap_or("starting Pi"),
            elapsed.as_secs_f64()
        ));
    }

    /// Removes the status line so a normal line can be printed.
    pub fn clear(&mut self) {
        if self.enabled {
            let mut st = self.console.lock();
            if st.status_shown {
                let _ = write!(io::stderr().lock(), "\r\x1b[2K");
                st.status_shown = false;
            }
        }
    }
}
