//! The only stdout writer (the answer, JSON, tables, explanations) and the stderr line format.
//! A closed stdout (`| head`) is not an error: the reader has what it wanted.
//!
//! stderr is shared by the live status line and by log lines from every batch worker, the health
//! thread and the signal handler: every line goes through here, and the status line is wiped
//! before any line is printed (one lock), so the two never run into each other.

use std::io::{self, Write};
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::failover::explain::Explanation;
use crate::failover::reopen::human_ms;
use crate::redact::redact;
use crate::report::Report;
use crate::rpc::Usage;

/// Whether a status line is on screen right now (shared by every writer of stderr).
static STATUS_SHOWN: Mutex<bool> = Mutex::new(false);

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

/// Writes one whole line on stderr, wiping the status line first if one is shown.
fn stderr_line(line: &str) {
    let mut shown = STATUS_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    let mut err = io::stderr().lock();
    if *shown {
        let _ = write!(err, "\r\x1b[2K");
        *shown = false;
    }
    let _ = writeln!(err, "{line}");
}

/// One diagnostic line on stderr, prefixed and redacted.
pub fn error_line(text: &str) {
    stderr_line(&format!("pi-ccswitch-run: {}", redact_keep_len(text)));
}

/// A progress line (`switch a → b (quota)`), redacted.
pub fn progress_line(text: &str) {
    stderr_line(&format!("[ccswitch] {}", redact_keep_len(text)));
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
#[derive(Debug)]
pub struct StatusLine {
    enabled: bool,
}

impl StatusLine {
    pub fn for_stderr() -> StatusLine {
        StatusLine {
            enabled: io::IsTerminal::is_terminal(&io::stderr()),
        }
    }

    pub fn disabled() -> StatusLine {
        StatusLine { enabled: false }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Replaces the status line with `text` (cut to 100 chars).
    pub fn show(&mut self, text: &str) {
        if self.enabled {
            let text: String = text.chars().take(100).collect();
            let mut shown = STATUS_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
            let _ = write!(io::stderr().lock(), "\r\x1b[2K{text}");
            *shown = true;
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
            let mut shown = STATUS_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
            if *shown {
                let _ = write!(io::stderr().lock(), "\r\x1b[2K");
                *shown = false;
            }
        }
    }
}

/// Token and cost figures as JSON (the keys README documents).
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "output_tokens": u.output,
        "cache_read_tokens": u.cache_read,
        "cache_write_tokens": u.cache_write,
        "total_tokens": u.total_tokens,
        "cost": u.cost,
    })
}

/// The `--json` object of one run (or one batch job). The field set is a public interface:
/// README documents it and a test pins it.
pub fn result_json(report: &Report) -> Value {
    let attempts: Vec<Value> = report
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
                "usage": usage_json(&a.usage),
            })
        })
        .collect();
    let retry = report.retry.as_ref().map(|r| {
        json!({
            "could_help": r.could_help,
            "retry_after_ms": r.retry_after_ms,
            "reason": redact(&r.reason),
        })
    });
    json!({
        "ok": report.exit == crate::exit::Exit::Success,
        "answer": report.answer,
        "model": report.model.as_ref().map(|m| json!({"provider": m.provider, "id": m.id})),
        "attempts": attempts,
        "switches": report.switches,
        "elapsed_ms": report.elapsed_ms,
        "usage": usage_json(&report.answer_usage()),
        "failed_usage": usage_json(&report.failed_usage()),
        "exit_code": report.exit.code(),
        "error": report.error.as_deref().map(redact),
        "retry": retry,
    })
}

/// What was attached, for `--explain`.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub text_files: usize,
    pub images: usize,
    /// Attachments that were empty (skipped: nothing of them is sent).
    pub empty: Vec<String>,
}

/// `--explain --json`.
pub fn explanation_json(e: &Explanation, thinking_source: &str, attachments: &Inputs) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("thinking_source".to_string(), json!(thinking_source));
        obj.insert("text_files".to_string(), json!(attachments.text_files));
        obj.insert("empty_attachments".to_string(), json!(attachments.empty));
        obj.insert("ok".to_string(), json!(!e.candidates.is_empty()));
    }
    v
}

/// `--explain` for people.
pub fn explanation_text(e: &Explanation, thinking_source: &str, attachments: &Inputs) -> String {
    let mut out = String::new();
    out.push_str(&format!("start model: {}", e.start_model));
    match &e.start_skipped {
        Some(why) => out.push_str(&format!(" — skipped before sending: {why}\n")),
        None => out.push('\n'),
    }
    out.push_str(&format!("thinking: {thinking_source}\n"));
    out.push_str(&format!(
        "input: ~{} tokens, {} text file(s), {} image(s)\n",
        e.input_tokens_estimate, attachments.text_files, attachments.images
    ));
    if !attachments.empty.is_empty() {
        out.push_str(&format!(
            "empty attachments, not sent: {}\n",
            attachments.empty.join(", ")
        ));
    }
    out.push_str(&format!(
        "watchdogs: first response {}, stall {}; failover round window {}; deadline {}\n",
        human_ms(e.first_response_ms),
        human_ms(e.stall_ms),
        human_ms(e.round_limit_ms),
        e.deadline_ms.map_or("none".to_string(), human_ms),
    ));
    out.push_str(&format!(
        "when every candidate is cooling down: {}\n",
        if e.wait {
            "wait for the first to reopen"
        } else {
            "stop (exit 1)"
        }
    ));
    if e.candidates.is_empty() {
        out.push_str("\nno candidate would be tried (exit 1)\n");
    } else {
        out.push_str("\ncandidates, in the order they would be tried:\n");
        let width = e
            .candidates
            .iter()
            .map(|c| c.model.chars().count())
            .max()
            .unwrap_or(0);
        for (i, c) in e.candidates.iter().enumerate() {
            out.push_str(&format!(
                "  {:>2}. {:<width$}  {}\n",
                i + 1,
                c.model,
                c.reason
            ));
        }
    }
    if !e.excluded.is_empty() {
        out.push_str("\nexcluded:\n");
        let width = e
            .excluded
            .iter()
            .map(|c| c.model.chars().count())
            .max()
            .unwrap_or(0);
        for x in &e.excluded {
            out.push_str(&format!("      {:<width$}  {}\n", x.model, x.reason));
        }
    }
    out.push_str("\nnothing was sent to any provider\n");
    out
}
