//! The only stdout writer (the answer, JSON, tables) and the stderr line format.
//! A closed stdout (`| head`) is not an error: the reader has what it wanted.

use std::io::{self, Write};

use crate::redact::redact;

/// Prints the final answer: trimmed, one trailing newline.
pub fn answer(text: &str) -> io::Result<()> {
    stdout_text(&format!("{}\n", text.trim()))
}

/// Writes text to stdout as is; a broken pipe is swallowed.
pub fn stdout_text(text: &str) -> io::Result<()> {
    match stdout_text_strict(text) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes text to stdout as is, reporting a broken pipe (batch mode stops on it).
#[expect(
    clippy::disallowed_methods,
    reason = "output.rs is the only stdout writer"
)]
pub fn stdout_text_strict(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}

/// One diagnostic line on stderr, prefixed and redacted.
pub fn error_line(text: &str) {
    let _ = writeln!(
        io::stderr().lock(),
        "pi-ccswitch-run: {}",
        redact_keep_len(text)
    );
}

/// A progress line (`switch a → b (quota)`), redacted.
pub fn progress_line(text: &str) {
    let _ = writeln!(io::stderr().lock(), "[ccswitch] {}", redact_keep_len(text));
}

/// Redaction with a generous cap: diagnostics may be long, secrets may not appear at all.
fn redact_keep_len(text: &str) -> String {
    text.lines()
        .map(|l| crate::redact::redact_capped(l, 1000))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A one-line live status on stderr, redrawn in place; silent unless stderr is a terminal.
#[derive(Debug)]
pub struct StatusLine {
    enabled: bool,
    shown: bool,
}

impl StatusLine {
    pub fn for_stderr() -> StatusLine {
        StatusLine {
            enabled: io::IsTerminal::is_terminal(&io::stderr()),
            shown: false,
        }
    }

    pub fn disabled() -> StatusLine {
        StatusLine {
            enabled: false,
            shown: false,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Replaces the status line with `text` (cut to 100 chars).
    pub fn show(&mut self, text: &str) {
        if self.enabled {
            let text: String = text.chars().take(100).collect();
            let _ = write!(io::stderr().lock(), "\r\x1b[2K{text}");
            self.shown = true;
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
        if self.shown {
            let _ = write!(io::stderr().lock(), "\r\x1b[2K");
            self.shown = false;
        }
    }
}

/// The `--json` object of one run (or one batch job). The field set is a public interface:
/// README documents it and a test pins it.
pub fn result_json(report: &crate::report::Report) -> serde_json::Value {
    use serde_json::json;
    let attempts: Vec<serde_json::Value> = report
        .attempts
        .iter()
        .map(|a| {
            let f = a.failure.as_ref();
            json!({
                "model": a.model,
                "ok": f.is_none(),
                "class": f.map(|f| f.class.as_str()),
                "scope": f.map(|f| f.scope.as_str()),
                "marker": f.map(|f| f.matched.clone()),
                "error": a.error.as_deref().map(redact),
                "duration_ms": a.duration_ms,
            })
        })
        .collect();
    json!({
        "ok": report.exit == crate::exit::Exit::Success,
        "answer": report.answer,
        "model": report.model.as_ref().map(|m| json!({"provider": m.provider, "id": m.id})),
        "attempts": attempts,
        "switches": report.switches,
        "elapsed_ms": report.elapsed_ms,
        "exit_code": report.exit.code(),
        "error": report.error.as_deref().map(redact),
    })
}
