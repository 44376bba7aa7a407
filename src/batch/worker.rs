//! One batch worker: the Pi it keeps across jobs, and one job at a time on it — attachments
//! read off the event loop, a Pi started with the job's own system prompt and tools when they
//! differ from the Pi it holds, Pi restarted once when it dies mid-job, and what the batch must
//! learn from the job (a setup problem stops everything). Prints nothing itself.

use std::ffi::OsString;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::input::Item;
use super::jobs::{Invalid, JobSpec};
use super::shard;
use crate::agent::PiGroups;
use crate::attach::{self, Stdin};
use crate::cli::Profile;
use crate::clock;
use crate::complexity::Complexity;
use crate::console::Console;
use crate::driver::Session;
use crate::exit::Exit;
use crate::failover::Config;
use crate::failover::{Exhaustion, Outcome};
use crate::job::{self, Ended, JobEnd, JobRequest, Stop, Unprepared};
use crate::output::{self, JobFields, Warning, record::AttachmentRecord};
use crate::rpc::Usage;
use crate::served::Origins;
use crate::shared::SharedHandle;

/// What every job shares.
pub struct BatchPlan {
    /// How jobs take capacity slots (the slot id gets the worker's number).
    pub capacity: crate::failover::CapacityOptions,
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
    /// Where Pi's models come from and what the user named (warnings about the models that
    /// served a job); `None` without an agent dir.
    pub origins: Option<Origins>,
    /// `--permanent-ok`: failures in the input itself do not make the batch's exit code.
    pub permanent_ok: bool,
    /// `--output-schema`: the schema of every job without its own `schema`.
    pub schema: Option<job::OutputSchema>,
    /// The schema files jobs named, loaded once each.
    pub schemas: std::cell::RefCell<job::SchemaCache>,
    /// Which models could not follow which schema, in this batch's jobs so far.
    pub schema_misses: std::cell::RefCell<super::schema_memory::SchemaMemory>,
}

impl BatchPlan {
    /// Worker `n`'s capacity options: its own slot ids.
    pub fn capacity_for(&self, n: usize) -> crate::failover::CapacityOptions {
        crate::failover::CapacityOptions {
            slot: self.capacity.slot.worker(n),
            ..self.capacity.clone()
        }
    }
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
    /// The job's id as people read it (`doc-1`, or `input line 7` without a usable id).
    pub label: String,
    /// Why it failed (`None` for an answer).
    pub error: Option<String>,
    /// The failure is in the input itself (`--permanent-ok` lets it pass).
    pub permanent: bool,
    /// About the models that served it (said once per batch on stderr).
    pub warnings: Vec<Warning>,
    /// `provider/model` that answered.
    pub model: Option<crate::catalog::ModelKey>,
    pub usage: Usage,
    pub failed_usage: Usage,
    /// The class of each attempt that did not answer (for the summary).
    pub failed_classes: Vec<&'static str>,
    /// The model of each attempt whose answer did not conform to the job's schema.
    pub schema_failures: Vec<String>,
    /// The provider of each attempt refused for capacity.
    pub capacity_signals: Vec<String>,
    pub capacity_wait_ms: u64,
    /// How long it waited for its primary (`--prefer-primary`).
    pub primary_wait_ms: u64,
    /// It ended by `--max-wait` (this bound, in ms).
    pub max_wait: Option<u64>,
    /// The provider of each attempt cut for silence (a watchdog, or its share of the deadline).
    pub silence_cuts: Vec<String>,
}

/// How a job ended for the batch.
#[derive(Debug)]
pub enum Settled {
    Finished(Box<Done>),
    /// Cut short by a signal (or by the batch stopping): it records nothing.
    Unfinished,
    /// Out of budget (`--max-cost`) before it could end: it records nothing (`--resume` runs
    /// it), and the batch starts no new job.
    Left {
        index: usize,
        why: crate::budget::OverBudget,
    },
    /// The configuration cannot work (Pi missing or dying at start, a scope that selects
    /// nothing…): the whole batch stops, and this job is not marked as attempted.
    Setup(Box<Ended>),
}

/// What a result line says about the job's input besides its id.
pub enum LineOf<'a> {
    /// A job: its input hash and files (as written in the line).
    Job {
        input_hash: u64,
        files: &'a [String],
    },
    /// A line that is not a job: the hash of its bytes.
    Invalid { line_hash: u64 },
}

/// The result line of a job (or of an invalid line): the result record of `--json` with the
/// job's fields (`output::record::JobFields`).
pub fn result_line(
    id: Option<&Value>,
    number: u64,
    input: LineOf<'_>,
    ended: &Ended,
    warnings: Vec<Warning>,
) -> String {
    let (input_hash, line_hash, files) = match input {
        LineOf::Job { input_hash, files } => (Some(shard::hex(input_hash)), None, files),
        LineOf::Invalid { line_hash } => (None, Some(shard::hex(line_hash)), &[][..]),
    };
    let attachments = files
        .iter()
        .enumerate()
        .map(|(i, f)| AttachmentRecord {
            file: f.clone(),
            sha256: ended.digests.get(i).map(|d| attach::digest::hex(d)),
        })
        .collect();
    let content_hash = if files.is_empty() {
        None
    } else {
        ended.content_hash.map(shard::hex)
    };
    output::record_of(ended, warnings)
        .for_job(JobFields {
            id: id.cloned().unwrap_or(Value::Null),
            line: number,
            input_hash,
            line_hash,
            attachments,
            content_hash,
        })
        .line()
}

/// One worker and the Pi it holds (started at its first job, not before).
pub struct Worker {
    pub number: usize,
    session: Option<Session>,
}

/// What a worker shares with the batch while it runs a job.
pub struct Ctx<'a> {
    pub plan: &'a BatchPlan,
    /// Health, capacity slots and the spend ledger, shared by every worker.
    pub shared: &'a SharedHandle,
    pub console: &'a Console,
    pub groups: &'a PiGroups,
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
        ctx: &Ctx<'_>,
        stops: &mut watch::Receiver<Option<Stop>>,
    ) -> Settled {
        match item {
            Item::Invalid {
                index,
                number,
                invalid,
                line_hash,
            } => Settled::Finished(Box::new(invalid_line(index, number, &invalid, line_hash))),
            Item::Job {
                index,
                number,
                spec,
                input_hash,
            } => match self.job(&spec, ctx, stops).await {
                // A signal or the batch stopping cuts the job short: it records nothing. Its own
                // deadline is an ending like any other (exit 124, recorded).
                Ran::Ended(ended)
                    if matches!(ended.end, JobEnd::Stopped(Stop::Signal(_) | Stop::Halt)) =>
                {
                    Settled::Unfinished
                }
                Ran::Ended(ended) => match &ended.end {
                    JobEnd::Machine(Outcome::OverBudget { why, .. }) => Settled::Left {
                        index,
                        why: why.clone(),
                    },
                    _ => Settled::Finished(Box::new(
                        self.done(index, number, &spec, input_hash, &ended, ctx.plan),
                    )),
                },
                Ran::Setup(ended) => Settled::Setup(ended),
            },
        }
    }

    fn done(
        &self,
        index: usize,
        number: u64,
        spec: &JobSpec,
        input_hash: u64,
        ended: &Ended,
        plan: &BatchPlan,
    ) -> Done {
        let exit = output::exit_of(&ended.end);
        let warnings = plan
            .origins
            .as_ref()
            .map(|o| o.warnings(ended))
            .unwrap_or_default();
        let error = output::end_message(ended);
        let model = match &ended.end {
            JobEnd::Machine(Outcome::Answer { model, .. }) => Some(model.key()),
            _ => None,
        };
        let note = output::job_note(&spec.id.label(), number, ended, self.number);
        Done {
            index,
            exit,
            line: result_line(
                Some(spec.id.value()),
                number,
                LineOf::Job {
                    input_hash,
                    files: &spec.files,
                },
                ended,
                warnings.clone(),
            ),
            note,
            label: crate::redact::printable(&spec.id.canonical()),
            error,
            permanent: ended.permanent(),
            warnings,
            model,
            usage: ended.answer_usage(),
            failed_usage: ended.failed_usage(),
            schema_failures: ended
                .attempts
                .iter()
                .filter(|a| {
                    a.failure
                        .as_ref()
                        .is_some_and(|f| f.class == crate::failover::classify::FailureClass::Schema)
                })
                .map(|a| a.model.to_string())
                .collect(),
            failed_classes: ended
                .attempts
                .iter()
                .filter_map(|a| a.failure.as_ref())
                .filter(|f| f.class != crate::failover::classify::FailureClass::UserAbort)
                .map(|f| f.class.as_str())
                .collect(),
            capacity_signals: ended
                .attempts
                .iter()
                .filter(|a| a.capacity_signal)
                .map(|a| a.model.provider().to_string())
                .collect(),
            capacity_wait_ms: ended.capacity_wait_ms,
            primary_wait_ms: ended.primary_wait_ms,
            max_wait: match &ended.end {
                JobEnd::Machine(Outcome::Exhausted {
                    reason: Exhaustion::MaxWait { limit_ms },
                    ..
                }) => Some(*limit_ms),
                _ => None,
            },
            silence_cuts: ended
                .attempts
                .iter()
                .filter(|a| {
                    a.failure
                        .as_ref()
                        .is_some_and(crate::failover::classify::Classification::silence)
                })
                .map(|a| a.model.provider().to_string())
                .collect(),
        }
    }

    async fn job(
        &mut self,
        spec: &JobSpec,
        ctx: &Ctx<'_>,
        stops: &mut watch::Receiver<Option<Stop>>,
    ) -> Ran {
        let plan = ctx.plan;
        let schema = match &spec.schema {
            None => plan.schema.clone(),
            // Nothing is sent for a job whose schema cannot be used.
            Some(file) => match plan.schemas.borrow_mut().get(file) {
                Ok(s) => Some(s),
                Err(bad) => {
                    let ended = Ended::bare(JobEnd::Unprepared(Unprepared::Schema(bad)));
                    return Ran::Ended(Box::new(ended));
                }
            },
        };
        // The job's deadline covers reading its attachments too.
        let deadline = clock::now().instant + plan.timeout;
        let timeout_ms = u64::try_from(plan.timeout.as_millis()).unwrap_or(u64::MAX);
        let prepared = match job::prepare(
            &spec.files,
            &spec.prompt,
            Stdin::Refused,
            deadline,
            timeout_ms,
        )
        .await
        {
            Ok(p) => p,
            Err(unprepared) => {
                let content_hash = match &unprepared {
                    Unprepared::Attachment { content_hash, .. } => *content_hash,
                    Unprepared::AllEmpty(p) => Some(attach::digest::content_hash(&p.digests)),
                    _ => None,
                };
                let digests = match &unprepared {
                    Unprepared::AllEmpty(p) => p.digests.clone(),
                    _ => Vec::new(),
                };
                let mut ended = Ended::bare(JobEnd::Unprepared(unprepared));
                ended.content_hash = content_hash;
                ended.digests = digests;
                return Ran::Ended(Box::new(ended));
            }
        };
        let (mut request, rest) = JobRequest::build(job::Parts {
            prepared,
            prompt: &spec.prompt,
            config: plan.config.clone(),
            thinking: plan.thinking.as_deref(),
            complexity: plan.complexity,
            label: format!("{}: ", spec.id.label()),
            in_batch: true,
            verbose: plan.verbose,
            explain: false,
            deadline,
            capacity: Some(plan.capacity_for(self.number)),
            schema,
        });
        if let Some(s) = &request.schema {
            request.schema_avoid = plan.schema_misses.borrow().avoid(s);
        }
        // What the files held when the job ran, for its result (and `--rerun-changed`).
        let finish = |mut ended: Ended| {
            if !spec.files.is_empty() {
                ended.content_hash = Some(attach::digest::content_hash(&rest.digests));
                ended.digests.clone_from(&rest.digests);
            }
            Ran::Ended(Box::new(ended))
        };
        let own_profile = spec.system.is_some() || spec.tools.is_some();
        let mut args = job_profile(&plan.profile, spec).args();
        args.extend(plan.base_args.iter().cloned());
        let mut quiet = ctx.console.no_status_line();
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
                match Session::start(&plan.pi_command, &args, ctx.groups).await {
                    Ok(s) => self.session = Some(s),
                    Err(e) => return Ran::Setup(Box::new(Ended::bare(JobEnd::NotStarted(e)))),
                }
            }
            let Some(session) = self.session.as_mut() else {
                continue;
            };
            let ended = session
                .run(&request, ctx.shared, stops, ctx.console, &mut quiet)
                .await;
            if let Some(s) = &request.schema {
                plan.schema_misses.borrow_mut().learn(s, &ended);
            }
            if matches!(ended.end, JobEnd::Machine(Outcome::Setup(_))) {
                return Ran::Setup(Box::new(ended));
            }
            let lost = match &ended.end {
                JobEnd::PiLost(loss) => Some(loss.answered),
                // Pi cannot be reused after a stop or a protocol failure either.
                JobEnd::Stopped(_) | JobEnd::Machine(Outcome::Fatal(_)) => Some(true),
                _ => None,
            };
            if lost.is_some()
                && let Some(old) = self.session.take()
            {
                old.stop().await;
            }
            let pi_lost = matches!(ended.end, JobEnd::PiLost(_));
            let started = lost.unwrap_or(true);
            // A Pi that died or misbehaved gets one fresh start; a stop is not a failure.
            let retry = lost.is_some()
                && !matches!(ended.end, JobEnd::Stopped(_))
                && stops.borrow().is_none()
                && attempt == 0;
            start_failures += u32::from(pi_lost && !started);
            if start_failures == 2 {
                // Pi died before answering anything, twice in a row: it cannot start here (too
                // old a Node, a broken install). With the batch's own flags no job can fare
                // better; with this job's own system prompt or tools, only this job fails.
                if !own_profile {
                    return Ran::Setup(Box::new(ended));
                }
                return finish(ended);
            }
            if !retry {
                return finish(ended);
            }
            if started || plan.verbose > 0 {
                ctx.console
                    .progress_line(&output::pi_restarted_line(&request.label));
            }
        }
        Ran::Ended(Box::new(Ended::bare(JobEnd::Machine(Outcome::Fatal(
            crate::failover::Fatal::NoModel,
        )))))
    }
}

/// What running a job came to, before it is a line.
enum Ran {
    Ended(Box<Ended>),
    Setup(Box<Ended>),
}

/// The result of a line that is not a job.
fn invalid_line(index: usize, number: u64, invalid: &Invalid, line_hash: u64) -> Done {
    let ended = Ended::bare(JobEnd::InvalidLine(invalid.message(number)));
    Done {
        index,
        exit: Exit::Error,
        line: result_line(
            invalid.id.as_ref().map(|i| i.value()),
            number,
            LineOf::Invalid { line_hash },
            &ended,
            Vec::new(),
        ),
        note: output::invalid_line_note(
            invalid.id.as_ref().map(|id| id.label()).as_deref(),
            number,
            &invalid.reason,
        ),
        label: match &invalid.id {
            Some(id) => crate::redact::printable(&id.canonical()),
            None => format!("input line {number}"),
        },
        error: Some(invalid.reason.clone()),
        permanent: true,
        warnings: Vec::new(),
        model: None,
        usage: Usage::default(),
        failed_usage: Usage::default(),
        failed_classes: Vec::new(),
        schema_failures: Vec::new(),
        capacity_signals: Vec::new(),
        capacity_wait_ms: 0,
        primary_wait_ms: 0,
        max_wait: None,
        silence_cuts: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::jobs::parse_line;
    use serde_json::json;

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
        let mut ended = Ended::bare(JobEnd::InvalidLine(
            "input line 3: \"prompt\" is missing".into(),
        ));
        let line = result_line(
            Some(&json!("a")),
            3,
            LineOf::Invalid { line_hash: 0xee },
            &ended,
            Vec::new(),
        );
        assert!(line.ends_with('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], "a");
        assert_eq!(v["line"], 3);
        assert_eq!(v["input_hash"], Value::Null);
        assert_eq!(v["ok"], false);
        assert_eq!(v["line_hash"], "00000000000000ee");
        assert_eq!(v["permanent"], true);
        ended.end = JobEnd::Machine(Outcome::EmptyAnswer);
        ended.digests = vec![[0u8; 32]];
        ended.content_hash = Some(0x12);
        let files = ["a.md".to_string()];
        let line = result_line(
            Some(&json!(7)),
            1,
            LineOf::Job {
                input_hash: 0xab,
                files: &files,
            },
            &ended,
            Vec::new(),
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["input_hash"], "00000000000000ab");
        assert_eq!(v["content_hash"], "0000000000000012");
        assert_eq!(v["attachments"][0]["file"], "a.md");
        assert_eq!(v["attachments"][0]["sha256"], "0".repeat(64));
        assert_eq!(v["permanent"], false);
    }
}
