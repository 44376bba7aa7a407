//! One prompt from the command line: run it (or `--explain` it) and print the answer, the JSON
//! object or the explanation on stdout; the error and the retry hint go to stderr.

use tokio::sync::watch;

use crate::agent::PiGroups;
use crate::attach::Prepared;
use crate::cli::{Invocation, Mode};
use crate::console::Console;
use crate::driver::Session;
use crate::exit::Exit;
use crate::failover::Outcome;
use crate::failover::explain::Explanation;
use crate::job::{self, Ended, JobEnd, JobRequest, Stop, ThinkingSource};
use crate::manage::capacity_status::{CapacityRow, capacity_json, capacity_rows, capacity_text};
use crate::output;
use crate::settings::Settings;
use crate::shared::SharedHandle;
use crate::signals::Interrupt;

/// The longest the end of a run waits for shared health to be written.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_millis(1000);

/// A single run and what it shares with the process.
pub struct Run<'a> {
    pub inv: &'a Invocation,
    pub settings: &'a Settings,
    /// When the run began (its `--timeout-ms` counts from there, and so does the
    /// `elapsed_ms` it reports).
    pub started: std::time::Instant,
    pub deadline: std::time::Instant,
    /// Health, capacity slots and the spend ledger.
    pub shared: &'a SharedHandle,
    pub console: &'a Console,
    pub groups: &'a PiGroups,
    /// `--output-schema`, loaded.
    pub schema: Option<job::OutputSchema>,
}

impl Run<'_> {
    /// Runs the prompt whose attachments are `prepared`.
    pub async fn go(self, prepared: Prepared, signals: watch::Receiver<Option<Interrupt>>) -> Exit {
        let inv = self.inv;
        let attachments = output::Inputs {
            text_files: prepared.text_files,
            images: prepared.images.len(),
            empty: prepared.empty.clone(),
            schema: self
                .schema
                .as_ref()
                .map(|s| (s.file.clone(), s.schema.draft_name())),
        };
        let (request, _) = JobRequest::build(job::Parts {
            prepared,
            prompt: &inv.prompt,
            config: job::failover_config(self.settings, inv, false),
            thinking: inv.thinking.as_deref(),
            complexity: inv.task_complexity,
            label: String::new(),
            in_batch: false,
            verbose: inv.verbose,
            explain: inv.mode == Mode::Explain,
            deadline: self.deadline,
            capacity: Some(job::capacity_options(
                self.settings,
                inv,
                crate::capacity::START_LIMIT as usize,
            )),
            schema: self.schema.clone(),
        });
        let thinking_source = match (&request.thinking.level, request.thinking.source) {
            (Some(t), ThinkingSource::Flag) => format!("{t} (--thinking)"),
            (Some(t), ThinkingSource::Complexity(c)) => format!("{t} (--task-complexity {c})"),
            _ => "the model's own default".to_string(),
        };
        // Read before Pi starts: what models.json says now, not after a run changed nothing.
        let origins = crate::served::Origins::load(self.settings, inv);
        let mut stops = stops_from(signals);
        let mut session =
            match Session::start(&self.settings.pi_command, &inv.pi_args(), self.groups).await {
                Ok(s) => s,
                Err(e) => {
                    let ended = Ended::bare(JobEnd::NotStarted(e));
                    return deliver(
                        inv,
                        self.settings,
                        self.console,
                        &ended,
                        &thinking_source,
                        &attachments,
                        &[],
                        Vec::new(),
                    );
                }
            };
        let mut status = self.console.status_line();
        let mut ended = session
            .run(&request, self.shared, &mut stops, self.console, &mut status)
            .await;
        // The answer first: stopping Pi and writing shared health afterwards must never delay it.
        ended.elapsed_ms = crate::driver::ms_since(self.started);
        let capacity = match &ended.end {
            JobEnd::Machine(Outcome::Explained(e)) => self.capacity_of(e).await,
            _ => Vec::new(),
        };
        let warnings = origins.map(|o| o.warnings(&ended)).unwrap_or_default();
        let exit = deliver(
            inv,
            self.settings,
            self.console,
            &ended,
            &thinking_source,
            &attachments,
            &capacity,
            warnings,
        );
        session.stop().await;
        // What was not written by the deadline (or within a moment) is lost, as when the store
        // is down: the exit never waits on a slow store.
        self.shared
            .flush_within(job::left(self.deadline).min(FLUSH_LIMIT))
            .await;
        exit
    }
}

impl Run<'_> {
    /// `--explain`: the capacity standing of the providers a run could use.
    async fn capacity_of(&self, e: &Explanation) -> Vec<CapacityRow> {
        let now = crate::clock::now().wall_ms;
        let limit = job::left(self.deadline).min(std::time::Duration::from_millis(1000));
        let records = self.shared.load_capacity(now, limit).await;
        let mut providers: Vec<&str> = std::iter::once(e.start_model.as_str())
            .chain(e.candidates.iter().map(|c| c.model.as_str()))
            .map(crate::catalog::provider_of)
            .collect();
        providers.sort_unstable();
        providers.dedup();
        let caps = job::max_inflight(self.settings, self.inv);
        let mut rows = capacity_rows(&records, &caps, now);
        rows.retain(|r| providers.contains(&r.provider.as_str()));
        for p in providers {
            if !rows.iter().any(|r| r.provider == p) {
                rows.push(CapacityRow {
                    provider: p.to_string(),
                    learned: None,
                    congested: false,
                    cap: None,
                    in_flight: 0,
                });
            }
        }
        rows.sort_by(|a, b| a.provider.cmp(&b.provider));
        rows
    }
}

/// A run whose attachments could not be made into a message (a bad one, only empty ones, the
/// deadline): nothing is sent; the reason goes to stderr, the record to stdout with `--json`.
pub fn unprepared(inv: &Invocation, console: &Console, unprepared: job::Unprepared) -> Exit {
    let ended = Ended::bare(JobEnd::Unprepared(unprepared));
    if let Some(err) = output::end_message(&ended) {
        console.error_line(&err);
    }
    if inv.json
        && let Err(e) = output::print_record(&output::record_of(&ended, Vec::new()))
    {
        console.error_line(&format!("cannot write to stdout: {e}"));
    }
    output::exit_of(&ended.end)
}

/// Signals as job stops: a single run stops on the first one.
fn stops_from(mut signals: watch::Receiver<Option<Interrupt>>) -> watch::Receiver<Option<Stop>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        while signals.changed().await.is_ok() {
            let sig = *signals.borrow();
            if let Some(sig) = sig {
                tx.send_replace(Some(Stop::Signal(sig)));
                return;
            }
        }
    });
    rx
}

/// Prints what the run came to (the answer, the result record or the explanation on stdout;
/// the warnings, the error and the retry hint on stderr) and returns its exit code.
#[expect(
    clippy::too_many_arguments,
    reason = "everything a run's ending is printed from"
)]
fn deliver(
    inv: &Invocation,
    settings: &Settings,
    console: &Console,
    ended: &Ended,
    thinking_source: &str,
    attachments: &output::Inputs,
    capacity: &[CapacityRow],
    warnings: Vec<output::Warning>,
) -> Exit {
    for w in &warnings {
        console.error_line(&format!("warning: {}", w.message));
    }
    if let Some(err) = output::end_message(ended) {
        console.error_line(&err);
    }
    if let Some(hint) = output::retry_of(ended) {
        console.error_line(&format!("retry: {}", hint.reason));
    }
    let written = match &ended.end {
        JobEnd::Machine(Outcome::Explained(e)) if inv.json => {
            let mut v = output::explanation_json(e, thinking_source, attachments);
            if let Some(obj) = v.as_object_mut() {
                let warnings: Vec<serde_json::Value> = explain_findings(inv, settings, e)
                    .iter()
                    .map(|f| serde_json::json!({"code": f.code(), "message": f.to_string()}))
                    .collect();
                obj.insert("warnings".to_string(), warnings.into());
                obj.insert("capacity".to_string(), capacity_json(capacity));
            }
            output::stdout_text(&format!("{v}\n"))
        }
        JobEnd::Machine(Outcome::Explained(e)) => {
            // Warnings first: what they say changes how the rest should be read.
            let mut text: String = explain_findings(inv, settings, e)
                .iter()
                .map(|f| format!("warning: {f}\n"))
                .collect();
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&output::explanation_text(e, thinking_source, attachments));
            text.push_str(&capacity_text(capacity));
            output::stdout_text(&text)
        }
        _ if inv.json => output::print_record(&output::record_of(ended, warnings)),
        // With a schema: exactly the JSON value, on one line.
        JobEnd::Machine(Outcome::Answer {
            json: Some(json), ..
        }) => output::answer(&json.compact),
        JobEnd::Machine(Outcome::Answer { text, .. }) => output::answer(text),
        _ => Ok(()),
    };
    if let Err(e) = written {
        console.error_line(&format!("cannot write to stdout: {e}"));
        return Exit::Error;
    }
    output::exit_of(&ended.end)
}

/// What `--explain` warns about first: a start model or candidates from Pi's built-in
/// catalogue rather than the user's `models.json`, and a start model no `--model` or saved
/// default chose (see `catalog::origin`).
fn explain_findings(
    inv: &Invocation,
    settings: &Settings,
    e: &Explanation,
) -> Vec<crate::catalog::origin::Finding> {
    let Some(dir) = settings.agent_dir.as_deref() else {
        return Vec::new();
    };
    let config = crate::settings::pi_config(dir);
    let saved_default = crate::settings::pi_saved_default(dir);
    let candidates: Vec<String> = e.candidates.iter().map(|c| c.model.clone()).collect();
    let choice = crate::catalog::origin::StartChoice {
        start: &e.start_model,
        candidates: &candidates,
        model_flag: inv.model.is_some(),
        saved_default: saved_default.as_deref(),
        scoped: inv.models_scope.is_some(),
        provider_flag: inv.provider.as_deref(),
    };
    crate::catalog::origin::findings(&choice, &config, &|name: &str| crate::settings::var(name))
}
