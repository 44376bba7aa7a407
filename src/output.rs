//! The only stdout writer (the answer, JSON, tables, explanations), and the only code that
//! turns how a job ended ([`Ended`]) into words, a result record ([`record`]) and an exit code.
//! A closed stdout (`| head`) is not an error: the reader has what it wanted. stderr lines are
//! `console`'s.

mod deadline;
pub mod record;

use std::io::{self, Write};

use serde_json::{Value, json};

use crate::exit::Exit;
use crate::failover::Outcome;
use crate::failover::explain::Explanation;
use crate::failover::reopen::human_ms;
use crate::job::{Ended, JobEnd, PiLoss, Stop, Unprepared};
use crate::signals::Interrupt;
pub use record::{JobFields, ResultRecord, RetryRecord, Warning};

/// Prints the final answer: trimmed, one trailing newline; on a terminal without the escape
/// sequences and control characters a model could use to act on it (`answer::for_terminal`).
pub fn answer(text: &str) -> io::Result<()> {
    let text = text.trim();
    if stdout_is_terminal() {
        return stdout_text(&format!("{}\n", crate::answer::for_terminal(text).trim()));
    }
    stdout_text(&format!("{text}\n"))
}

#[expect(
    clippy::disallowed_methods,
    reason = "output.rs is the only stdout writer"
)]
fn stdout_is_terminal() -> bool {
    use std::io::IsTerminal as _;
    io::stdout().is_terminal()
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

/// The exit code a job's ending means (the table is `exit.rs`'s).
pub fn exit_of(end: &JobEnd) -> Exit {
    match end {
        JobEnd::Machine(Outcome::Answer { .. }) => Exit::Success,
        JobEnd::Machine(Outcome::Explained(e)) if e.candidates.is_empty() => Exit::Exhausted,
        JobEnd::Machine(Outcome::Explained(_)) => Exit::Success,
        JobEnd::Machine(Outcome::Exhausted { .. }) => Exit::Exhausted,
        JobEnd::Machine(Outcome::OverBudget { .. }) => Exit::OverBudget,
        JobEnd::Stopped(Stop::Signal(sig)) => sig.exit(),
        JobEnd::Stopped(Stop::Deadline) => Exit::Timeout,
        // A batch stopping for a setup problem: the job records nothing; as a signal would.
        JobEnd::Stopped(Stop::Halt) | JobEnd::Machine(Outcome::Aborted) => Exit::Terminated,
        JobEnd::Unprepared(Unprepared::Deadline { .. }) => Exit::Timeout,
        JobEnd::Machine(Outcome::EmptyAnswer)
        | JobEnd::Machine(Outcome::Setup(_))
        | JobEnd::Machine(Outcome::Fatal(_))
        | JobEnd::PiLost(_)
        | JobEnd::NotStarted(_)
        | JobEnd::InvalidLine(_)
        | JobEnd::Unprepared(_) => Exit::Error,
    }
}

/// The retry hint of an exhausted job, or of one whose deadline passed (what was tried, what
/// was still silent: see [`deadline::hint`]).
pub fn retry_of(ended: &Ended) -> Option<RetryRecord> {
    match &ended.end {
        JobEnd::Machine(Outcome::Exhausted { retry, .. }) => Some(RetryRecord::of(retry)),
        JobEnd::Stopped(Stop::Deadline) => Some(deadline::hint(ended)),
        _ => None,
    }
}

/// The one line that explains a job's ending that is not an answer (or an explanation).
pub fn end_message(ended: &Ended) -> Option<String> {
    let tried = |list: &[String]| {
        if list.is_empty() {
            "no request was sent".to_string()
        } else {
            format!("tried: {}", list.join(", "))
        }
    };
    Some(match &ended.end {
        JobEnd::Machine(Outcome::Answer { .. }) | JobEnd::Machine(Outcome::Explained(_)) => {
            return None;
        }
        JobEnd::Machine(Outcome::Exhausted {
            reason,
            last_error,
            too_large,
            ..
        }) => {
            // Said plainly: the nightly log names such a job every night.
            let reason = if *too_large {
                "the request is too large for every model in scope (no context window takes it)"
                    .to_string()
            } else {
                reason.to_string()
            };
            match last_error {
                Some(e) => format!(
                    "failover exhausted: {reason}; {}; last error: {e}",
                    tried(&ended.tried)
                ),
                None => format!("failover exhausted: {reason}; {}", tried(&ended.tried)),
            }
        }
        JobEnd::Machine(Outcome::OverBudget { why, last_error }) => {
            let last = last_error
                .as_ref()
                .map(|e| format!("; last error: {e}"))
                .unwrap_or_default();
            format!(
                "budget reached: {why}; no further attempt was started; {}{last}",
                tried(&ended.tried)
            )
        }
        JobEnd::Machine(Outcome::EmptyAnswer) if ended.tried.len() > 1 => format!(
            "Pi returned an empty answer and no other model was left; {}",
            tried(&ended.tried)
        ),
        JobEnd::Machine(Outcome::EmptyAnswer) => "Pi returned an empty answer".to_string(),
        JobEnd::Stopped(Stop::Signal(Interrupt::Int)) => "interrupted (SIGINT)".to_string(),
        JobEnd::Stopped(Stop::Signal(Interrupt::Term)) => "terminated (SIGTERM)".to_string(),
        JobEnd::Stopped(Stop::Signal(Interrupt::Hup)) => "terminated (SIGHUP)".to_string(),
        JobEnd::Stopped(Stop::Deadline) => {
            format!("timed out after {} ms (--timeout-ms)", ended.elapsed_ms)
        }
        JobEnd::Stopped(Stop::Halt) | JobEnd::Machine(Outcome::Aborted) => {
            "the batch stopped".to_string()
        }
        JobEnd::Machine(Outcome::Setup(problem)) => problem.to_string(),
        JobEnd::Machine(Outcome::Fatal(fatal)) => fatal.to_string(),
        JobEnd::PiLost(loss) => pi_loss(loss),
        JobEnd::NotStarted(e) => e.to_string(),
        JobEnd::Unprepared(Unprepared::Attachment { error, .. }) => error.to_string(),
        JobEnd::Unprepared(Unprepared::AllEmpty(p)) => p
            .nothing_to_send(p.empty.len())
            .unwrap_or_else(|| "every attachment is empty: nothing to send".to_string()),
        JobEnd::Unprepared(Unprepared::Deadline { timeout_ms }) => {
            format!("timed out after {timeout_ms} ms while reading the attachments (--timeout-ms)")
        }
        JobEnd::Unprepared(Unprepared::Lost(e)) => format!("reading the attachments failed: {e}"),
        JobEnd::Unprepared(Unprepared::Schema(bad)) => format!("schema {bad}"),
        JobEnd::InvalidLine(message) => message.clone(),
    })
}

/// Pi's early exit as one actionable line: Pi's own error line (not the tail of a Node stack),
/// and what to do about the usual causes.
fn pi_loss(loss: &PiLoss) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    if let Some(reason) = &loss.malformed {
        return reason.clone();
    }
    let what = "Pi exited before answering";
    let how = match loss.status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "unknown status".to_string(),
        },
        None => "still running".to_string(),
    };
    if let Some(node) = &loss.old_node {
        return format!(
            "{what} ({how}): Pi needs Node.js >= 22.19 but the `node` on PATH is older{}; put a \
             newer node first on PATH",
            node.version
                .as_deref()
                .map(|v| format!(" ({v})"))
                .unwrap_or_default()
        );
    }
    let reason = &loss.error_line;
    let hint = if reason.contains("EACCES") || reason.contains("EROFS") || reason.contains("EPERM")
    {
        "; Pi needs a writable agent dir (it keeps lock files beside auth.json): check \
         PI_CODING_AGENT_DIR and its permissions"
    } else {
        ""
    };
    if reason.is_empty() {
        format!("{what} ({how})")
    } else {
        format!(
            "{what} ({how}); Pi's stderr: {}{hint}",
            crate::pi_stderr::with_runner_advice(reason)
        )
    }
}

/// The result record of how a job ended (see [`record`]), with its warnings.
pub fn record_of(ended: &Ended, warnings: Vec<Warning>) -> ResultRecord {
    ResultRecord::of(
        ended,
        exit_of(&ended.end),
        end_message(ended),
        retry_of(ended),
        warnings,
    )
}

/// Prints a result record (`--json`) on stdout; a broken pipe is swallowed.
pub fn print_record(record: &ResultRecord) -> io::Result<()> {
    stdout_text(&record.line())
}

/// What was attached, for `--explain`.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub text_files: usize,
    pub images: usize,
    /// Attachments that were empty (skipped: nothing of them is sent).
    pub empty: Vec<String>,
    /// `--output-schema`: the file as given, and its draft.
    pub schema: Option<(String, &'static str)>,
}

/// `--explain`'s word on the schema in force: which file, which draft, how the model is told,
/// and what a non-conforming answer leads to.
fn schema_json(schema: &(String, &'static str)) -> Value {
    json!({
        "file": schema.0,
        "draft": schema.1,
        "told": crate::schema::prompt::HOW_TOLD,
        "non_conforming": NON_CONFORMING,
    })
}

/// What happens to an answer that does not conform.
const NON_CONFORMING: &str = "asked once more in the same conversation with what is wrong, then the next candidate (class schema, no breaker)";

/// `--explain --json`.
pub fn explanation_json(e: &Explanation, thinking_source: &str, attachments: &Inputs) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("thinking_source".to_string(), json!(thinking_source));
        obj.insert("text_files".to_string(), json!(attachments.text_files));
        obj.insert("empty_attachments".to_string(), json!(attachments.empty));
        obj.insert(
            "output_schema".to_string(),
            attachments.schema.as_ref().map_or(Value::Null, schema_json),
        );
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
    if let Some((file, draft)) = &attachments.schema {
        out.push_str(&format!(
            "output schema: {} (draft {draft}); told to the model: {}; an answer that does not \
             conform is {NON_CONFORMING}\n",
            crate::redact::printable(file),
            crate::schema::prompt::HOW_TOLD
        ));
    }
    out.push_str(&format!(
        "watchdogs: first response {}, stall {} (the ceilings: a model with a pace gets its own \
         limits below them); failover round window {}; deadline {}\n",
        human_ms(e.first_response_ms),
        human_ms(e.stall_ms),
        human_ms(e.round_limit_ms),
        e.deadline_ms.map_or("none".to_string(), human_ms),
    ));
    let cooldowns: Vec<&str> = e.cooldowns.iter().map(|c| c.text.as_str()).collect();
    out.push_str(&format!("cooldowns: {}\n", cooldowns.join("; ")));
    out.push_str(&format!(
        "when every candidate is cooling down: {}\n",
        if e.wait {
            "wait for the first to reopen"
        } else {
            "stop (exit 1)"
        }
    ));
    let w = &e.waiting;
    out.push_str(&format!(
        "when a key is busy (refused with only this run's request in flight): leave it alone {} \
         to {} at a time, {} at most, then open its breaker\n",
        human_ms(w.busy_backoff_first_ms),
        human_ms(w.busy_backoff_limit_ms),
        human_ms(w.busy_backoff_total_ms)
    ));
    out.push_str(&format!(
        "waiting in all (breakers, resets, slots, back-off): {}\n",
        w.max_wait_ms
            .map_or("up to the deadline".to_string(), |ms| format!(
                "at most {} (--max-wait), then fail (exit 1)",
                human_ms(ms)
            ))
    ));
    if let (Some(window), Some(primary)) = (w.prefer_primary_ms, &w.primary) {
        out.push_str(&format!(
            "primary first (--prefer-primary {}): {primary}\n",
            human_ms(window)
        ));
    }
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
            // Its pace and the watchdogs it would run under (issue 31).
            if let Some(p) = &c.pace {
                out.push_str(&format!("      pace: {}\n", p.text));
            }
            if let Some(w) = &c.watchdogs {
                out.push_str(&format!(
                    "      watchdogs: first response {}, stall {}\n",
                    w.first_response, w.stall
                ));
            }
            if let (Some(ms), Some(left)) = (c.first_response_share_ms, e.deadline_ms) {
                let others = e.candidates.len().saturating_sub(1);
                out.push_str(&format!(
                    "      may wait {} for a first response (its share of the {} left: {others} \
                     other candidate{})\n",
                    crate::pace::secs(ms),
                    crate::pace::secs(left),
                    if others == 1 { "" } else { "s" }
                ));
            }
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

/// A batch job's line on stderr: `doc-1: ok (zai/glm, 812 ms, worker 0)`, or for one that did
/// not answer `doc-1 (input line 3): exit 1: <why>; retry: <hint>`.
pub fn job_note(label: &str, number: u64, ended: &Ended, worker: usize) -> String {
    if let JobEnd::Machine(Outcome::Answer { model, .. }) = &ended.end {
        return format!(
            "{label}: ok ({}, {} ms, worker {worker})",
            model.key(),
            ended.elapsed_ms
        );
    }
    let who = format!("{label} (input line {number})");
    let code = exit_of(&ended.end).code();
    match end_message(ended) {
        Some(e) => {
            let retry = retry_of(ended)
                .map(|r| format!("; retry: {}", r.reason))
                .unwrap_or_default();
            format!("{who}: exit {code}: {e}{retry}")
        }
        None => format!("{who}: exit {code}"),
    }
}

/// A batch line that is not a job, on stderr (`label`: its id, when it has a usable one).
pub fn invalid_line_note(label: Option<&str>, number: u64, reason: &str) -> String {
    match label {
        Some(id) => format!("{id} (input line {number}): exit 2: {reason}"),
        None => format!("input line {number}: exit 2: {reason}"),
    }
}

/// A batch job's Pi died mid-job and is started again for one retry.
pub fn pi_restarted_line(label: &str) -> String {
    format!("{label}Pi was lost; restarting it and retrying the job")
}

/// The one line of a batch stopped by a setup problem (how the job that found it ended).
pub fn batch_stopped_line(ended: &Ended) -> String {
    let why = end_message(ended).unwrap_or_else(|| "setup failed".to_string());
    format!("batch stopped: {why}")
}

/// The line of a batch stopped by a signal: its jobs in flight record nothing.
pub fn batch_interrupted_line(sig: Interrupt) -> &'static str {
    match sig {
        Interrupt::Int => "interrupted (SIGINT); unfinished jobs were not recorded",
        Interrupt::Term => "terminated (SIGTERM); unfinished jobs were not recorded",
        Interrupt::Hup => "terminated (SIGHUP); unfinished jobs were not recorded",
    }
}
