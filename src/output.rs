//! The only stdout writer (the answer, JSON, tables) and the stderr line format.
//! A closed stdout (`| head`) is not an error: the reader has what it wanted.

use std::io::{self, Write};

use crate::redact::redact;

/// Prints the final answer: trimmed, one trailing newline.
pub fn answer(text: &str) -> io::Result<()> {
    stdout_text(&format!("{}\n", text.trim()))
}

/// Writes text to stdout as is; a broken pipe is swallowed.
#[expect(
    clippy::disallowed_methods,
    reason = "output.rs is the only stdout writer"
)]
pub fn stdout_text(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
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

/// Redaction without the storage length cap: diagnostics may be long, secrets may not.
fn redact_keep_len(text: &str) -> String {
    text.lines().map(redact).collect::<Vec<_>>().join("\n")
}
