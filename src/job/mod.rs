//! One job — a single run's prompt or one line of a batch — from what the user asked to what
//! it came to. Both modes build the same [`JobRequest`] here (the attachments read under the
//! job's deadline, the thinking level, the failover settings) and get the same typed
//! [`JobEnd`] back from `driver::Session::run`; `output` is the only code that turns an ending
//! into text, JSON and an exit code.

mod end;
mod schema_file;

pub use end::{Ended, JobEnd, OldNode, PiLoss, Stop, Unprepared};
pub use schema_file::{BadSchema, OutputSchema, SchemaCache};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::attach::{self, Prepared, Stdin};
use crate::cli::Invocation;
use crate::complexity::{self, Complexity};
use crate::failover;
use crate::rpc::ImageContent;
use crate::settings::Settings;

/// Everything a run of one prompt needs, built once.
#[derive(Debug, Clone)]
pub struct JobRequest {
    /// The prompt as Pi gets it: attached text blocks, then the prompt.
    pub message: String,
    pub images: Vec<ImageContent>,
    pub config: failover::Config,
    /// The level sent to Pi (`set_thinking_level`) before the first prompt and after every
    /// switch, and where it came from.
    pub thinking: Thinking,
    /// Prefix for progress lines (`job 7: `) in batch mode.
    pub label: String,
    /// A batch job: per-job chatter stays quiet without `-v` (see `Note::shown_in_batch`).
    pub in_batch: bool,
    pub verbose: u8,
    /// `--explain`: stop before the first request.
    pub explain: bool,
    /// When the job must be over (`--timeout-ms`, counted from when reading began).
    pub deadline: Instant,
    /// How the job takes capacity slots (`None`: it does not, as for `--explain`).
    pub capacity: Option<failover::CapacityOptions>,
    /// `--output-schema` (or the job's `schema`): the answer must be one JSON value valid
    /// against it; the message ends with the schema (`schema::prompt`).
    pub schema: Option<OutputSchema>,
    /// Models that could not follow this schema in the batch's earlier jobs: tried last.
    pub schema_avoid: std::collections::BTreeSet<String>,
}

/// The thinking level of a job, and where it came from (for `--explain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thinking {
    pub level: Option<String>,
    pub source: ThinkingSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingSource {
    /// `--thinking`.
    Flag,
    /// `--task-complexity` (estimated on this job).
    Complexity(Complexity),
    /// Neither: the model's own default.
    ModelDefault,
}

impl Thinking {
    /// `--thinking`, else `--task-complexity` estimated on this prompt and its attachments, else
    /// none (see `complexity::effective_thinking`).
    pub fn of(
        thinking: Option<&str>,
        complexity: Option<Complexity>,
        prompt: &str,
        prepared: &Prepared,
    ) -> Thinking {
        let signals = complexity::Signals {
            prompt,
            input_chars: prepared.message.chars().count(),
            files: prepared.text_files,
            images: prepared.images.len(),
        };
        let level =
            complexity::effective_thinking(thinking, complexity, &signals).map(str::to_string);
        let source = match (thinking, complexity) {
            (Some(_), _) => ThinkingSource::Flag,
            (None, Some(c)) if level.is_some() => ThinkingSource::Complexity(c),
            _ => ThinkingSource::ModelDefault,
        };
        Thinking { level, source }
    }
}

/// Reads the attachments (on the blocking pool: decoding and downscaling a photo takes a few
/// hundred ms, during which other workers' Pi streams must still be served) within `deadline`.
/// A run or batch job whose attachments are all empty is refused here.
pub async fn prepare(
    files: &[String],
    prompt: &str,
    stdin: Stdin,
    deadline: Instant,
    timeout_ms: u64,
) -> Result<Prepared, Unprepared> {
    let (owned, text) = (files.to_vec(), prompt.to_string());
    let reading = tokio::task::spawn_blocking(move || {
        let prepared = attach::prepare(&owned, &text, stdin);
        let content = match &prepared {
            Err(e) if e.in_content => attach::content_hash_of(&owned),
            _ => None,
        };
        (prepared, content)
    });
    match tokio::time::timeout_at(deadline.into(), reading).await {
        Ok(Ok((Ok(p), _))) if p.nothing_to_send(files.len()).is_some() => {
            Err(Unprepared::AllEmpty(p))
        }
        Ok(Ok((Ok(p), _))) => Ok(p),
        Ok(Ok((Err(error), content_hash))) => Err(Unprepared::Attachment {
            error,
            content_hash,
        }),
        Ok(Err(e)) => Err(Unprepared::Lost(e.to_string())),
        Err(_) => Err(Unprepared::Deadline { timeout_ms }),
    }
}

/// The failover tunables of this invocation; `wait_default` is the mode's (batch: wait).
pub fn failover_config(
    settings: &Settings,
    inv: &Invocation,
    wait_default: bool,
) -> failover::Config {
    failover::Config {
        first_response: settings.first_response,
        stall: settings.stall,
        watchdog_floor: settings.watchdog_floor,
        round_limit: settings.round_limit,
        cooldown_scale: settings.cooldown_scale,
        models_scope: inv.models_scope.clone(),
        saved_default: if inv.models_scope.is_some() && inv.model.is_none() {
            settings
                .agent_dir
                .as_deref()
                .and_then(crate::settings::pi_saved_default)
        } else {
            None
        },
        provider: inv.provider.clone(),
        model: inv.model.clone(),
        wait: inv.wait.unwrap_or(wait_default),
        max_inflight: max_inflight(settings, inv),
        budget: inv.budget.clone(),
        max_wait: inv.max_wait.or(settings.max_wait),
        prefer_primary: inv.prefer_primary.or(settings.prefer_primary),
    }
}

/// `--output-schema`, loaded: exit 2 (an `Err`) naming the file and the problem, before
/// anything is sent.
pub fn output_schema(inv: &Invocation) -> Result<Option<OutputSchema>, anyhow::Error> {
    let Some(path) = &inv.output_schema else {
        return Ok(None);
    };
    let file = path.to_string_lossy();
    let loaded =
        OutputSchema::load(&file).map_err(|bad| anyhow::anyhow!("--output-schema {bad}"))?;
    Ok(Some(loaded))
}

/// `--max-inflight`, else `CCSWITCH_MAX_INFLIGHT`.
pub fn max_inflight(settings: &Settings, inv: &Invocation) -> BTreeMap<String, u32> {
    inv.max_inflight
        .clone()
        .unwrap_or_else(|| settings.max_inflight.clone())
}

/// How the jobs of this process take capacity slots: slot ids start with `host:pid` (a batch
/// adds its worker, the driver the job), so every process sharing the store has its own; a
/// provider's limit starts from `initial` (a batch's `--jobs`) until one is learned.
pub fn capacity_options(
    settings: &Settings,
    inv: &Invocation,
    initial: usize,
) -> failover::CapacityOptions {
    failover::CapacityOptions {
        slot: crate::capacity::SlotId::process(&host_name(), std::process::id()),
        initial: u32::try_from(initial.max(1)).unwrap_or(u32::MAX),
        caps: max_inflight(settings, inv),
        // Set per job by the driver.
        pre_request_grace: false,
    }
}

/// This machine's name, cut to 64 printable characters (`localhost` when it has none).
fn host_name() -> String {
    let uname = rustix::system::uname();
    let name: String = String::from_utf8_lossy(uname.nodename().to_bytes())
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != ':')
        .take(64)
        .collect();
    if name.is_empty() {
        "localhost".to_string()
    } else {
        name
    }
}

/// The request of a job whose attachments were read.
pub struct Parts<'a> {
    pub prepared: Prepared,
    pub prompt: &'a str,
    pub config: failover::Config,
    pub thinking: Option<&'a str>,
    pub complexity: Option<Complexity>,
    pub label: String,
    pub in_batch: bool,
    pub verbose: u8,
    pub explain: bool,
    pub deadline: Instant,
    pub capacity: Option<failover::CapacityOptions>,
    pub schema: Option<OutputSchema>,
}

impl JobRequest {
    /// The request for `parts`, and what is left of the reading (digests, notes, empty files).
    pub fn build(parts: Parts<'_>) -> (JobRequest, Prepared) {
        let Parts {
            mut prepared,
            prompt,
            config,
            thinking,
            complexity,
            label,
            in_batch,
            verbose,
            explain,
            deadline,
            capacity,
            schema,
        } = parts;
        let thinking = Thinking::of(thinking, complexity, prompt, &prepared);
        let mut message = std::mem::take(&mut prepared.message);
        if let Some(s) = &schema {
            message = crate::schema::prompt::with_instruction(&message, &s.schema);
        }
        let request = JobRequest {
            message,
            images: std::mem::take(&mut prepared.images),
            config,
            thinking,
            label,
            in_batch,
            verbose,
            explain,
            deadline,
            capacity,
            schema,
            schema_avoid: Default::default(),
        };
        (request, prepared)
    }
}

/// How long until `deadline` (zero once it passed).
pub fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(crate::clock::now().instant)
}
