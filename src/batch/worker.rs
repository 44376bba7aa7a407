//! One batch worker: the Pi it keeps across jobs, and one job at a time on it — attachments
//! read off the event loop, a Pi started with the job's own system prompt and tools when they
//! differ from the Pi it holds, Pi restarted once when it dies mid-job, and what the batch must
//! learn from the job (a setup problem stops everything). Prints nothing itself.

use std::ffi::OsString;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::input::Item;
use super::jobs::{Invalid, JobSpec};
use super::shard;
use crate::attach;
use crate::cli::Profile;
use crate::clock;
use crate::complexity::Complexity;
use crate::driver::{Job, Session};
use crate::exit::Exit;
use crate::failover::Config;
use crate::health::service::HealthHandle;
use crate::output::{self, StatusLine};
use crate::report::Report;
use crate::rpc::Usage;
use crate::signals::Interrupt;

/// What every job shares.
pub struct Plan {
    pub pi_command: OsString,
    /// Pi flags other than the system prompt and tools (model, thinking, context files…).
    pub base_args: Vec<String>,
    /// `--system-prompt`, `--tools` and friends from the command line.
    pub profile: Profile,
    pub config: Config,
    /// `--timeout-ms`, per job.
    pub timeout: Duration,
    pub verbose: u8,
    /// `--thinking` for every job.
    pub thinking: Option<String>,
    /// `--task-complexity`, estimated per job when `--thinking` is not given.
    pub complexity: Option<Complexity>,
    pub workers: usize,
}

/// The Pi profile of one job: `system` replaces `--system-prompt` (`--append-system-prompt`
/// still applies); `tools` replaces `--tools`, `--no-tools` and `--no-builtin-tools` (`[]`: no
/// tools); `--exclude-tools` always applies, so a deny on the command line wins. Pure.
pub fn job_profile(base: &Profile, spec: &JobSpec) -> Profile {
    let mut p = base.clone();
    if let Some(system) = &spec.system {
        p.system_prompt = Some(system.clone());
    }
    if let Some(tools) = &spec.tools {
        p.no_builtin_tools = false;
        p.no_tools = tools.is_empty();
        p.tools = (!tools.is_empty()).then(|| tools.join(","));
    }
    p
}

/// A finished line, ready to record.
#[derive(Debug)]
pub struct Done {
    pub index: usize,
    pub exit: Exit,
    /// The JSON result, with its `\n`.
    pub line: String,
    /// The line for stderr: failed jobs always, successful ones with `-v`.
    pub note: String,
    /// `provider/model` that answered.
    pub model: Option<String>,
    pub usage: Usage,
    pub failed_usage: Usage,
    /// The class of each attempt that did not answer (for the summary).
    pub failed_classes: Vec<&'static str>,
}

/// How a job ended for the batch.
#[derive(Debug)]
pub enum Outcome {
    Finished(Done),
    /// Cut short by a signal (or by the batch stopping): it records nothing.
    Unfinished,
    /// The configuration cannot work (Pi missing or dying at start, a scope that selects
    /// nothing…): the whole batch stops, and this job is not marked as attempted.
    Setup(String),
}

/// What a result line says about the job's input besides its id.
pub enum Input<'a> {
    /// A job: its input hash and files (as written in the line).
    Job {
        input_hash: u64,
        files: &'a [String],
    },
    /// A line that is not a job: the hash of its bytes.
    Invalid { line_hash: u64 },
}

/// The result line of a job (or of an invalid line): what `--json` prints, plus `id`, `line`,
/// `input_hash` (`null` for an invalid line), `permanent` (the failure is in the input itself),
/// and for a job with files each one's SHA-256 (`attachments`) and their `content_hash`; for an
/// invalid line its `line_hash`.
pub fn result_line(id: Option<&Value>, number: u64, input: Input<'_>, report: &Report) -> String {
    let mut v = output::result_json(report);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("id".to_string(), id.cloned().unwrap_or(Value::Null));
        obj.insert("line".to_string(), json!(number));
        match input {
            Input::Job { input_hash, files } => {
                obj.insert("input_hash".to_string(), json!(shard::hex(input_hash)));
                if !files.is_empty() {
                    let attachments: Vec<Value> = files
                        .iter()
                        .enumerate()
                        .map(|(i, f)| {
                            json!({
                                "file": f,
                                "sha256": report.digests.get(i).map(|d| attach::digest::hex(d)),
                            })
                        })
                        .collect();
                    obj.insert("attachments".to_string(), json!(attachments));
                    obj.insert(
                        "content_hash".to_string(),
                        json!(report.content_hash.map(shard::hex)),
                    );
                }
            }
            Input::Invalid { line_hash } => {
                obj.insert("input_hash".to_string(), Value::Null);
                obj.insert("line_hash".to_string(), json!(shard::hex(line_hash)));
            }
        }
        let permanent = report.exit != Exit::Success && report.permanent;
        obj.insert("permanent".to_string(), json!(permanent));
    }
    format!("{v}\n")
}

/// One worker and the Pi it holds (started at its first job, not before).
pub struct Worker {
    pub number: usize,
    session: Option<Session>,
}

impl Worker {
    pub fn new(number: usize) -> Worker {
        Worker {
            number,
            session: None,
        }
    }

    /// Stops the worker's Pi.
    pub async fn stop(mut self) {
        if let Some(s) = self.session.take() {
            s.stop().await;
        }
    }

    pub async fn run(
        &mut self,
        item: Item,
        plan: &Plan,
        health: &HealthHandle,
        interrupt: &mut watch::Receiver<Option<Interrupt>>,
    ) -> Outcome {
        match item {
            Item::Invalid {
                index,
                number,
                invalid,
                line_hash,
            } => Outcome::Finished(invalid_line(index, number, &invalid, line_hash)),
            Item::Job {
                index,
                number,
                spec,
                input_hash,
            } => {
                let ran = self.job(&spec, plan, health, interrupt).await;
                match ran {
                    Ran::Report(report) if is_interrupt(report.exit) => Outcome::Unfinished,
                    Ran::Report(report) => {
                        Outcome::Finished(self.done(index, number, &spec, input_hash, &report))
                    }
                    Ran::Setup(e) => Outcome::Setup(e),
                }
            }
        }
    }

    fn done(
        &self,
        index: usize,
        number: u64,
        spec: &JobSpec,
        input_hash: u64,
        report: &Report,
    ) -> Done {
        let who = format!("{} (input line {number})", spec.id.label());
        let model = report.model.as_ref().map(crate::catalog::ModelInfo::key);
        let note = match (&model, &report.error) {
            (Some(m), _) if report.exit == Exit::Success => format!(
                "{}: ok ({m}, {} ms, worker {})",
                spec.id.label(),
                report.elapsed_ms,
                self.number
            ),
            (_, Some(e)) => {
                let retry = report
                    .retry
                    .as_ref()
                    .map(|r| format!("; retry: {}", r.reason))
                    .unwrap_or_default();
                format!("{who}: exit {}: {e}{retry}", report.exit.code())
            }
            _ => format!("{who}: exit {}", report.exit.code()),
        };
        Done {
            index,
            exit: report.exit,
            line: result_line(
                Some(spec.id.value()),
                number,
                Input::Job {
                    input_hash,
                    files: &spec.files,
                },
                report,
            ),
            note,
            model,
            usage: report.answer_usage(),
            failed_usage: report.failed_usage(),
            failed_classes: report
                .attempts
                .iter()
                .filter_map(|a| a.failure.as_ref())
                .filter(|f| f.class != crate::failover::classify::FailureClass::UserAbort)
                .map(|f| f.class.as_str())
                .collect(),
        }
    }

    async fn job(
        &mut self,
        spec: &JobSpec,
        plan: &Plan,
        health: &HealthHandle,
        interrupt: &mut watch::Receiver<Option<Interrupt>>,
    ) -> Ran {
        // The job's deadline covers reading its attachments too.
        let deadline = clock::now().instant + plan.timeout;
        let prepared = match prepare(spec, plan, deadline).await {
            Ok(p) => p,
            Err(report) => return Ran::Report(Box::new(report)),
        };
        let thinking = crate::run_config::job_thinking(
            plan.thinking.as_deref(),
            plan.complexity,
            &spec.prompt,
            &prepared,
        );
        // What the files held when the job ran, for its result (and `--rerun-changed`).
        let digests = prepared.digests.clone();
        let finish = |mut report: Report| {
            if !spec.files.is_empty() {
                report.content_hash = Some(attach::digest::content_hash(&digests));
                report.digests.clone_from(&digests);
            }
            Ran::Report(Box::new(report))
        };
        let job = Job {
            message: prepared.message,
            images: prepared.images,
            config: plan.config.clone(),
            verbose: plan.verbose,
            label: format!("{}: ", spec.id.label()),
            in_batch: true,
            thinking,
            explain: false,
        };
        let own_profile = spec.system.is_some() || spec.tools.is_some();
        let mut args = job_profile(&plan.profile, spec).args();
        args.extend(plan.base_args.iter().cloned());
        let mut quiet = StatusLine::disabled();
        let mut start_failures = 0;
        // A Pi that dies mid-job is restarted and the job retried once, on the same terms.
        for attempt in 0..2 {
            if self
                .session
                .as_ref()
                .is_some_and(|s| s.pi_args() != args.as_slice())
                && let Some(old) = self.session.take()
            {
                // Pi has no RPC command for its system prompt or tools: another profile needs
                // another Pi.
                old.stop().await;
            }
            if self.session.is_none() {
                match Session::start(&plan.pi_command, &args) {
                    Ok(s) => self.session = Some(s),
                    Err(e) => return Ran::Setup(e.to_string()),
                }
            }
            let Some(session) = self.session.as_mut() else {
                return Ran::Setup("Pi did not start".to_string());
            };
            let report = session
                .run_job(&job, health, interrupt, deadline, &mut quiet)
                .await;
            if report.setup {
                return Ran::Setup(report.error.unwrap_or_else(|| "setup failed".to_string()));
            }
            if report.pi_lost
                && let Some(old) = self.session.take()
            {
                old.stop().await;
            }
            let retry = report.pi_lost
                && report.exit == Exit::Error
                && interrupt.borrow().is_none()
                && attempt == 0;
            start_failures += u32::from(report.pi_start_failed);
            if start_failures == 2 {
                // Pi died before answering anything, twice in a row: it cannot start here (too
                // old a Node, a broken install). With the batch's own flags no job can fare
                // better; with this job's own system prompt or tools, only this job fails.
                if !own_profile {
                    return Ran::Setup(
                        report
                            .error
                            .unwrap_or_else(|| "Pi died at start".to_string()),
                    );
                }
                return finish(report);
            }
            if !retry {
                return finish(report);
            }
            if !report.pi_start_failed || plan.verbose > 0 {
                output::progress_line(&format!(
                    "{}Pi was lost; restarting it and retrying the job",
                    job.label
                ));
            }
        }
        Ran::Report(Box::new(Report::failed(
            Exit::Error,
            "Pi was lost twice".to_string(),
        )))
    }
}

/// What running a job came to, before it is a line.
enum Ran {
    Report(Box<Report>),
    Setup(String),
}

fn is_interrupt(exit: Exit) -> bool {
    matches!(exit, Exit::Interrupted | Exit::Terminated)
}

/// Reads the job's attachments on the blocking pool: decoding and downscaling a photo takes a
/// few hundred ms, during which the other workers' Pi streams must still be served.
async fn prepare(
    spec: &JobSpec,
    plan: &Plan,
    deadline: std::time::Instant,
) -> Result<attach::Prepared, Report> {
    let (files, prompt) = (spec.files.clone(), spec.prompt.clone());
    let reading = tokio::task::spawn_blocking(move || {
        let prepared = attach::prepare(&files, &prompt, attach::Stdin::Refused);
        // A problem in a file's content fails the job for as long as the content stays: its
        // content hash lets `--resume` tell when it changed.
        let content = match &prepared {
            Err(e) if e.in_content => attach::content_hash_of(&files),
            _ => None,
        };
        (prepared, content)
    });
    match tokio::time::timeout_at(deadline.into(), reading).await {
        Ok(Ok((Ok(p), _))) => match p.nothing_to_send(spec.files.len()) {
            Some(why) => {
                let mut r = Report::failed(Exit::Error, why);
                r.permanent = true;
                r.content_hash = Some(attach::digest::content_hash(&p.digests));
                r.digests = p.digests;
                Err(r)
            }
            None => Ok(p),
        },
        Ok(Ok((Err(e), content))) => {
            let mut r = Report::failed(Exit::Error, e.to_string());
            r.permanent = e.in_content;
            r.content_hash = content;
            Err(r)
        }
        Ok(Err(e)) => Err(Report::failed(
            Exit::Error,
            format!("reading the attachments failed: {e}"),
        )),
        Err(_) => Err(Report::failed(
            Exit::Timeout,
            format!(
                "timed out after {} ms while reading the attachments (--timeout-ms)",
                plan.timeout.as_millis()
            ),
        )),
    }
}

/// The result of a line that is not a job.
fn invalid_line(index: usize, number: u64, invalid: &Invalid, line_hash: u64) -> Done {
    let message = invalid.message(number);
    let mut report = Report::failed(Exit::Error, message);
    // The line itself is wrong: it fails the same way until it is changed.
    report.permanent = true;
    let who = match &invalid.id {
        Some(id) => format!("{} (input line {number})", id.label()),
        None => format!("input line {number}"),
    };
    Done {
        index,
        exit: Exit::Error,
        line: result_line(
            invalid.id.as_ref().map(|i| i.value()),
            number,
            Input::Invalid { line_hash },
            &report,
        ),
        note: format!("{who}: exit 2: {}", invalid.reason),
        model: None,
        usage: Usage::default(),
        failed_usage: Usage::default(),
        failed_classes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::jobs::parse_line;

    fn profile_of(base: &Profile, line: &str) -> Vec<String> {
        job_profile(base, &parse_line(line.as_bytes()).unwrap()).args()
    }

    #[test]
    fn job_fields_replace_their_flags_and_denies_always_apply() {
        let base = Profile {
            no_tools: false,
            no_builtin_tools: true,
            tools: None,
            exclude_tools: Some("bash".into()),
            system_prompt: Some("CLI prompt".into()),
            append_system_prompt: vec!["Appended.".into()],
        };
        assert_eq!(
            profile_of(&base, r#"{"id":1,"prompt":"p"}"#),
            base.args(),
            "a job without system or tools runs on the command line's profile"
        );
        assert_eq!(
            profile_of(
                &base,
                r#"{"id":1,"prompt":"p","system":"Job prompt","tools":["read","ls"]}"#
            ),
            [
                "--tools",
                "read,ls",
                "--exclude-tools",
                "bash",
                "--system-prompt",
                "Job prompt",
                "--append-system-prompt",
                "Appended."
            ]
        );
        assert_eq!(
            profile_of(&base, r#"{"id":1,"prompt":"p","tools":[]}"#),
            [
                "--no-tools",
                "--exclude-tools",
                "bash",
                "--system-prompt",
                "CLI prompt",
                "--append-system-prompt",
                "Appended."
            ]
        );
        let none = Profile {
            no_tools: true,
            ..Profile::default()
        };
        assert_eq!(
            profile_of(&none, r#"{"id":1,"prompt":"p","tools":["read"]}"#),
            ["--tools", "read"]
        );
    }

    #[test]
    fn result_lines_carry_id_line_and_input_hash() {
        let report = Report::failed(Exit::Error, "input line 3: \"prompt\" is missing".into());
        let mut report = report;
        report.permanent = true;
        let line = result_line(
            Some(&json!("a")),
            3,
            Input::Invalid { line_hash: 0xee },
            &report,
        );
        assert!(line.ends_with('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], "a");
        assert_eq!(v["line"], 3);
        assert_eq!(v["input_hash"], Value::Null);
        assert_eq!(v["ok"], false);
        assert_eq!(v["line_hash"], "00000000000000ee");
        assert_eq!(v["permanent"], true);
        report.digests = vec![[0u8; 32]];
        report.content_hash = Some(0x12);
        report.permanent = false;
        let files = ["a.md".to_string()];
        let line = result_line(
            Some(&json!(7)),
            1,
            Input::Job {
                input_hash: 0xab,
                files: &files,
            },
            &report,
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["input_hash"], "00000000000000ab");
        assert_eq!(v["content_hash"], "0000000000000012");
        assert_eq!(v["attachments"][0]["file"], "a.md");
        assert_eq!(v["attachments"][0]["sha256"], "0".repeat(64));
        assert_eq!(v["permanent"], false);
    }
}
