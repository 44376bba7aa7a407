//! The result record: the one object `--json` prints for a single run, whatever its exit code
//! (a usage error included), and the one line a batch writes per job. One type, one writer
//! ([`ResultRecord::line`]), so no exit code can print a different key set. A batch's record is the
//! same object with the job's own fields ([`JobFields`]) added, the same for every job.

use serde::Serialize;
use serde_json::Value;

use crate::exit::Exit;
use crate::failover::Outcome;
use crate::failover::reopen::RetryHint;
use crate::job::{Ended, JobEnd};
use crate::redact::redact;
use crate::rpc::Usage;

/// One run's (or one batch job's) result. Field order is the order printed.
#[derive(Debug, Clone, Serialize)]
pub struct ResultRecord {
    pub ok: bool,
    /// The answer, only when `ok`.
    pub answer: Option<String>,
    /// With `--output-schema`: the answer's JSON value, parsed (only when `ok`).
    pub structured_output: Option<Value>,
    /// The last answer cut off at an output limit (class `truncated`) when no model completed
    /// one: for scripts that can use part of an answer; never printed as the answer. `None`
    /// when `ok`.
    pub partial: Option<String>,
    /// The last answer the schema rejected (class `schema`) when no model conformed; `None`
    /// when `ok`.
    pub rejected_answer: Option<String>,
    /// Why that answer did not conform: the last validation errors (a short list).
    pub schema_errors: Option<Vec<String>>,
    pub model: Option<ModelRef>,
    pub attempts: Vec<AttemptRecord>,
    pub switches: u32,
    pub elapsed_ms: u64,
    pub capacity_wait_ms: u64,
    /// Waited in all: for breakers, stated resets, capacity slots, busy keys' back-off.
    pub wait_ms: u64,
    /// Of which for the primary (`--prefer-primary`).
    pub primary_wait_ms: u64,
    /// Of the attempt that answered.
    pub usage: UsageRecord,
    /// Of every attempt that did not.
    pub failed_usage: UsageRecord,
    pub exit_code: u8,
    /// The redacted one-line reason of a non-zero exit.
    pub error: Option<String>,
    pub retry: Option<RetryRecord>,
    /// The failure is in the input itself (an attachment's content, all attachments empty, a
    /// request too large for every model, an invalid batch line): it fails the same way until
    /// the input changes.
    pub permanent: bool,
    /// What the user should know about how the run was served (a model nobody chose).
    pub warnings: Vec<Warning>,
    /// A batch job's own fields; absent for a single run.
    #[serde(flatten)]
    pub job: Option<JobFields>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ModelRef {
    pub provider: String,
    pub id: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    pub model: String,
    pub ok: bool,
    pub class: Option<&'static str>,
    pub scope: Option<&'static str>,
    pub marker: Option<String>,
    pub error: Option<String>,
    pub duration_ms: u64,
    pub usage: UsageRecord,
    pub capacity_signal: bool,
}

/// Token and cost figures (the keys README documents).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct UsageRecord {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub total_tokens: u64,
    pub cost: f64,
}

impl From<&Usage> for UsageRecord {
    fn from(u: &Usage) -> UsageRecord {
        UsageRecord {
            input_tokens: u.input,
            output_tokens: u.output,
            cache_read_tokens: u.cache_read,
            cache_write_tokens: u.cache_write,
            total_tokens: u.total_tokens,
            cost: u.cost,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RetryRecord {
    pub could_help: bool,
    pub retry_after_ms: Option<u64>,
    pub reason: String,
    /// Exit 124: the models tried before the deadline passed (issue 31).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<String>,
    /// Exit 124: the models still silent (no response yet) when it passed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub silent: Vec<String>,
}

impl RetryRecord {
    /// The record of an exhausted run's hint (nothing tried or silent to list).
    pub fn of(hint: &RetryHint) -> RetryRecord {
        RetryRecord {
            could_help: hint.could_help,
            retry_after_ms: hint.retry_after_ms,
            reason: hint.reason.clone(),
            tried: Vec::new(),
            silent: Vec::new(),
        }
    }
}

/// A warning about the run, for scripts: a stable `code`, the model it is about, and the
/// sentence stderr shows.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Warning {
    pub code: &'static str,
    pub model: Option<String>,
    pub message: String,
}

/// What a batch record says about its job's input besides the common fields. Every batch
/// record has all of them (`null` or empty where they do not apply).
#[derive(Debug, Clone, Serialize)]
pub struct JobFields {
    /// The job's id as written (`null` for an invalid line without a usable one).
    pub id: Value,
    /// The 1-based input line.
    pub line: u64,
    /// FNV-1a 64 of the job's `[prompt, files, system, tools]`; `null` for an invalid line.
    pub input_hash: Option<String>,
    /// FNV-1a 64 of an invalid line's bytes; `null` for a job.
    pub line_hash: Option<String>,
    /// Each file of the job with the SHA-256 of what was read (`null` when it was not read).
    pub attachments: Vec<AttachmentRecord>,
    /// The content hash over the attachments (`null` without files or when they were not read).
    pub content_hash: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttachmentRecord {
    pub file: String,
    pub sha256: Option<String>,
}

impl ResultRecord {
    /// The record of how a job ended: its exit code, the one line that explains a failure and
    /// the retry hint (`output` words them: see `output::record_of`), and the warnings about how
    /// it was served.
    pub fn of(
        ended: &Ended,
        exit: Exit,
        message: Option<String>,
        retry: Option<RetryRecord>,
        warnings: Vec<Warning>,
    ) -> ResultRecord {
        let attempts = ended
            .attempts
            .iter()
            .map(|a| {
                let f = a.failure.as_ref();
                // An attempt cut short by a stop has no verdict of its own: the job's ending says.
                let error = a.error.clone().or_else(|| f.and(message.clone()));
                AttemptRecord {
                    model: a.model.to_string(),
                    ok: f.is_none(),
                    class: f.map(|f| f.class.as_str()),
                    scope: f.map(|f| f.scope.as_str()),
                    marker: f.map(|f| f.matched.clone()),
                    error: error.as_deref().map(redact),
                    duration_ms: a.duration_ms,
                    usage: UsageRecord::from(&a.usage),
                    capacity_signal: a.capacity_signal,
                }
            })
            .collect();
        let (answer, model, structured_output) = match &ended.end {
            JobEnd::Machine(Outcome::Answer { text, model, json }) => (
                Some(text.clone()),
                Some(ModelRef {
                    provider: model.provider.clone(),
                    id: model.id.clone(),
                }),
                json.as_ref().map(|j| j.value.clone()),
            ),
            _ => (None, None, None),
        };
        // The last answer the schema rejected, when no model gave one it accepted.
        let rejected = (exit != Exit::Success)
            .then(|| {
                ended
                    .attempts
                    .iter()
                    .rev()
                    .find_map(|a| a.rejected.as_ref())
            })
            .flatten();
        let partial = (exit != Exit::Success)
            .then(|| {
                ended
                    .attempts
                    .iter()
                    .rev()
                    .find_map(|a| a.partial.as_deref())
            })
            .flatten()
            .map(crate::redact::mask_known_secrets);
        ResultRecord {
            ok: exit == Exit::Success,
            answer,
            structured_output,
            partial,
            rejected_answer: rejected.map(|r| crate::redact::mask_known_secrets(&r.answer)),
            schema_errors: rejected.map(|r| r.errors.iter().map(|e| redact(e)).collect()),
            model,
            attempts,
            switches: ended.switches,
            elapsed_ms: ended.elapsed_ms,
            capacity_wait_ms: ended.capacity_wait_ms,
            wait_ms: ended.wait_ms,
            primary_wait_ms: ended.primary_wait_ms,
            usage: UsageRecord::from(&ended.answer_usage()),
            failed_usage: UsageRecord::from(&ended.failed_usage()),
            exit_code: exit.code(),
            error: message.as_deref().map(redact),
            retry: retry.map(|r| RetryRecord {
                reason: redact(&r.reason),
                ..r
            }),
            permanent: ended.permanent(),
            warnings,
            job: None,
        }
    }

    /// The record of a run that ended before any job could: a usage or configuration error
    /// (`exit`, with its one-line `message`).
    pub fn failed(exit: Exit, message: &str) -> ResultRecord {
        let none = UsageRecord::from(&Usage::default());
        ResultRecord {
            ok: false,
            answer: None,
            structured_output: None,
            partial: None,
            rejected_answer: None,
            schema_errors: None,
            model: None,
            attempts: Vec::new(),
            switches: 0,
            elapsed_ms: 0,
            capacity_wait_ms: 0,
            wait_ms: 0,
            primary_wait_ms: 0,
            usage: none,
            failed_usage: none,
            exit_code: exit.code(),
            error: Some(redact(message)),
            retry: None,
            permanent: false,
            warnings: Vec::new(),
            job: None,
        }
    }

    /// The same record as a batch job's result.
    pub fn for_job(mut self, job: JobFields) -> ResultRecord {
        self.job = Some(job);
        self
    }

    /// The record as one JSON line (with its `\n`): what `--json` prints and a batch writes.
    /// The only place a record becomes text.
    pub fn line(&self) -> String {
        // Serialising plain data with string keys cannot fail; should it ever, a line that
        // still says what happened beats a silent one.
        let mut text = serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                "{{\"ok\":false,\"exit_code\":{},\"error\":\"cannot write the result: {}\"}}",
                self.exit_code,
                e.to_string().replace(['"', '\\'], "'")
            )
        });
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Stop, Unprepared};
    use crate::output::record_of;

    fn keys(record: &ResultRecord) -> Vec<String> {
        let v: Value = serde_json::from_str(&record.line()).expect("a record is JSON");
        v.as_object().expect("an object").keys().cloned().collect()
    }

    /// The single-run key set, in the order printed.
    const SINGLE_KEYS: [&str; 20] = [
        "ok",
        "answer",
        "structured_output",
        "partial",
        "rejected_answer",
        "schema_errors",
        "model",
        "attempts",
        "switches",
        "elapsed_ms",
        "capacity_wait_ms",
        "wait_ms",
        "primary_wait_ms",
        "usage",
        "failed_usage",
        "exit_code",
        "error",
        "retry",
        "permanent",
        "warnings",
    ];

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        v.sort();
        v
    }

    /// Every way a job can end, and a usage error, prints the same keys.
    #[test]
    fn every_ending_has_the_same_keys() {
        let endings = [
            Ended::bare(JobEnd::Machine(Outcome::EmptyAnswer)),
            Ended::bare(JobEnd::Stopped(Stop::Deadline)),
            Ended::bare(JobEnd::Stopped(Stop::Signal(
                crate::signals::Interrupt::Int,
            ))),
            Ended::bare(JobEnd::Unprepared(Unprepared::Deadline { timeout_ms: 5 })),
            Ended::bare(JobEnd::InvalidLine("input line 1: x".into())),
        ];
        let expected = sorted(&SINGLE_KEYS);
        for ended in &endings {
            assert_eq!(keys(&record_of(ended, Vec::new())), expected, "{ended:?}");
        }
        assert_eq!(keys(&ResultRecord::failed(Exit::Error, "bad")), expected);
    }

    /// The batch record: the same keys plus the job's, whether or not it had files.
    #[test]
    fn a_batch_record_adds_the_job_fields() {
        let job = JobFields {
            id: Value::from("a"),
            line: 3,
            input_hash: Some("00".into()),
            line_hash: None,
            attachments: Vec::new(),
            content_hash: None,
        };
        let record = record_of(
            &Ended::bare(JobEnd::Machine(Outcome::EmptyAnswer)),
            Vec::new(),
        )
        .for_job(job);
        let mut expected = SINGLE_KEYS.to_vec();
        expected.extend([
            "id",
            "line",
            "input_hash",
            "line_hash",
            "attachments",
            "content_hash",
        ]);
        assert_eq!(keys(&record), sorted(&expected));
        let line = record.line();
        assert!(line.starts_with("{\"ok\":false,\"answer\":null,"), "{line}");
        assert!(line.ends_with("}\n") && line.matches('\n').count() == 1);
    }

    /// A usage error says what was wrong, redacted, with exit code 2.
    #[test]
    fn a_failed_record_carries_the_message() {
        let r = ResultRecord::failed(
            Exit::Error,
            "unsupported option: --modle (did you mean --model?)",
        );
        let v: Value = serde_json::from_str(&r.line()).expect("JSON");
        assert_eq!(v["exit_code"], 2);
        assert_eq!(v["ok"], false);
        assert_eq!(
            v["error"],
            "unsupported option: --modle (did you mean --model?)"
        );
        assert_eq!(v["warnings"], serde_json::json!([]));
        let secret = ResultRecord::failed(
            Exit::Error,
            "bad --health-url rediss://:sk-abcdefghijklmnopqrstuv@h",
        );
        assert!(!secret.line().contains("sk-abcdefghijklmnopqrstuv"));
    }
}
