//! `--batch FILE --jobs N`: many prompts, few Pi processes. Each worker keeps one Pi alive
//! across its jobs (a fresh session per job), all workers share breaker health, and results
//! are printed as JSONL in input order as soon as they are contiguous.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::rc::Rc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::attach;
use crate::clock;
use crate::driver::{self, Job, Session};
use crate::exit::Exit;
use crate::failover::Config;
use crate::health::service::HealthHandle;
use crate::output::{self, StatusLine};
use crate::report::Report;
use crate::signals::Interrupt;

/// One input line, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// A string or a number; echoed in the result.
    pub id: Value,
    pub prompt: String,
    #[serde(default)]
    pub files: Vec<String>,
}

/// A parsed input line: a job, or why it is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based line number in the input.
    pub number: usize,
    pub job: Result<JobSpec, String>,
}

/// Parses JSONL jobs. Blank lines are skipped; every other line yields a [`Line`]. A leading
/// BOM is dropped; a line that is not UTF-8 is an invalid line, not an invalid file. Pure.
pub fn parse_jobs(input: &[u8]) -> Vec<Line> {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut seen = BTreeSet::new();
    input
        .split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
        .map(|(i, raw)| {
            let number = i + 1;
            let job = std::str::from_utf8(raw)
                .map_err(|e| {
                    format!(
                        "invalid job: not UTF-8 text (first invalid byte at column {})",
                        e.valid_up_to() + 1
                    )
                })
                .and_then(|text| {
                    serde_json::from_str::<JobSpec>(text.trim_end_matches('\r'))
                        .map_err(|e| format!("invalid job: {e}"))
                })
                .and_then(|j| {
                    // Integers only: a float id would not survive the round trip (1e2 vs 100).
                    if !(j.id.is_string() || j.id.is_i64() || j.id.is_u64()) {
                        return Err("invalid job: id must be a string or an integer".to_string());
                    }
                    if j.prompt.trim().is_empty() {
                        return Err("invalid job: prompt is empty".to_string());
                    }
                    if !seen.insert(j.id.to_string()) {
                        return Err(format!("invalid job: duplicate id {}", j.id));
                    }
                    Ok(j)
                });
            Line { number, job }
        })
        .collect()
}

/// The batch's exit code from its jobs' codes: an interrupt wins, then a timeout, then any
/// input/Pi error, then any exhausted job. Pure.
pub fn batch_exit(codes: &[Exit], interrupted: Option<Interrupt>) -> Exit {
    if let Some(sig) = interrupted {
        return sig.exit();
    }
    for worst in [Exit::Timeout, Exit::Error, Exit::Exhausted] {
        if codes.contains(&worst) {
            return worst;
        }
    }
    Exit::Success
}

/// What every job shares.
pub struct Plan {
    pub pi_command: OsString,
    pub pi_args: Vec<String>,
    pub config: Config,
    pub timeout: Duration,
    pub verbose: u8,
    /// `--thinking` for every job.
    pub thinking: Option<String>,
    /// `--task-complexity`, estimated per job when `--thinking` is not given.
    pub complexity: Option<crate::complexity::Complexity>,
    pub workers: usize,
}

/// One finished line, ready to print.
struct Done {
    index: usize,
    exit: Exit,
    json: Value,
    summary: String,
}

fn result_line(spec_id: Option<&Value>, number: usize, report: &Report) -> Value {
    let mut v = output::result_json(report);
    if let Some(obj) = v.as_object_mut() {
        obj.insert("id".to_string(), spec_id.cloned().unwrap_or(Value::Null));
        obj.insert("line".to_string(), json!(number));
    }
    v
}

/// Runs the batch of `args` (reads the job file first, then takes over the signals).
pub async fn run(
    inv: &crate::cli::Invocation,
    args: &crate::cli::BatchArgs,
    settings: &crate::settings::Settings,
    health: HealthHandle,
) -> anyhow::Result<Exit> {
    use anyhow::Context as _;
    // Read the jobs before taking over SIGINT/SIGTERM: until then the default action (end the
    // process) is exactly right, even while waiting on stdin.
    let input = read_batch_input(&args.file)?;
    let signals = crate::signals::install().context("cannot install signal handlers")?;
    let plan = Plan {
        pi_command: settings.pi_command.clone(),
        pi_args: inv.pi_args(),
        config: crate::failover_config(settings, inv, true),
        timeout: Duration::from_millis(inv.timeout_ms),
        verbose: inv.verbose,
        thinking: inv.thinking.clone(),
        complexity: inv.task_complexity,
        workers: args.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(2, std::num::NonZero::get)
        }),
    };
    Ok(run_jobs(&input, plan, health, signals).await)
}

/// The job file of `--batch` (`-` = stdin), as bytes: a line that is not UTF-8 is reported
/// on its own, the other jobs still run.
fn read_batch_input(file: &str) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = if file == "-" {
        std::io::stdin().lock().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_end(&mut bytes).map(|_| ()))
    };
    read.with_context(|| format!("cannot read the batch file {file}"))?;
    Ok(bytes)
}

/// Runs the jobs; prints JSONL results on stdout and progress on stderr.
async fn run_jobs(
    input: &[u8],
    plan: Plan,
    health: HealthHandle,
    mut interrupt: watch::Receiver<Option<Interrupt>>,
) -> Exit {
    let start = clock::now();
    let lines = parse_jobs(input);
    let total = lines.len();
    let queue: Rc<RefCell<VecDeque<(usize, Line)>>> =
        Rc::new(RefCell::new(lines.into_iter().enumerate().collect()));
    let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
    let plan = Rc::new(plan);
    // Once the reader of stdout is gone (`| head -1`), no further job is started: its answer
    // could not be delivered and would only spend provider quota.
    let stdout_closed = Rc::new(std::cell::Cell::new(false));
    let local = tokio::task::LocalSet::new();
    for worker in 0..plan.workers.max(1) {
        let queue = Rc::clone(&queue);
        let tx = tx.clone();
        let plan = Rc::clone(&plan);
        let health = health.clone();
        let mut interrupt = interrupt.clone();
        let stdout_closed = Rc::clone(&stdout_closed);
        local.spawn_local(async move {
            let mut session: Option<Session> = None;
            loop {
                if interrupt.borrow().is_some() {
                    break;
                }
                let Some((index, line)) = queue.borrow_mut().pop_front() else {
                    break;
                };
                if stdout_closed.get() {
                    break;
                }
                let done = run_line(
                    worker,
                    index,
                    line,
                    &plan,
                    &mut session,
                    &health,
                    &mut interrupt,
                )
                .await;
                // A job cut short by a signal is unfinished: it prints nothing.
                if matches!(done.exit, Exit::Interrupted | Exit::Terminated) {
                    break;
                }
                if tx.send(done).is_err() {
                    break;
                }
            }
            if let Some(s) = session {
                s.stop().await;
            }
        });
    }
    drop(tx);
    let mut status = StatusLine::for_stderr();
    let collector = async {
        let mut pending: BTreeMap<usize, Done> = BTreeMap::new();
        let mut next = 0usize;
        let mut codes = Vec::new();
        let mut failed = 0usize;
        let mut write_error = None;
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        let mut watching = true;
        loop {
            tokio::select! {
                done = rx.recv() => {
                    let Some(done) = done else { break };
                    if done.exit != Exit::Success {
                        failed += 1;
                        status.clear();
                        output::progress_line(&done.summary);
                    } else if plan.verbose > 0 {
                        status.clear();
                        output::progress_line(&done.summary);
                    }
                    codes.push(done.exit);
                    pending.insert(done.index, done);
                    // Print every result that is now contiguous, in input order.
                    while let Some(d) = pending.remove(&next) {
                        if write_error.is_none() && !stdout_closed.get() {
                            match output::stdout_text_strict(&format!("{}\n", d.json)) {
                                Ok(()) => {}
                                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                                    stdout_closed.set(true);
                                }
                                Err(e) => write_error = Some(e),
                            }
                        }
                        next += 1;
                    }
                }
                _ = ticker.tick(), if status.enabled() => {}
                changed = interrupt.changed(), if watching => watching = changed.is_ok(),
            }
            let secs = clock::now()
                .instant
                .saturating_duration_since(start.instant)
                .as_secs_f64();
            #[expect(clippy::cast_precision_loss, reason = "a rate for humans")]
            let rate = codes.len() as f64 / secs.max(0.001);
            status.show(&format!(
                "batch {}/{total} done · {failed} failed · {rate:.1} jobs/s · {secs:.1}s",
                codes.len()
            ));
        }
        status.clear();
        (codes, failed, write_error)
    };
    let (codes, failed, write_error) = local.run_until(collector).await;
    local.await;
    health.flush().await;
    let interrupted = *interrupt.borrow_and_update();
    let secs = driver::ms_since(start.instant) as f64 / 1000.0;
    output::progress_line(&format!(
        "batch: {} of {total} jobs done, {} ok, {failed} failed, in {secs:.1} s",
        codes.len(),
        codes.len() - failed
    ));
    if let Some(sig) = interrupted {
        output::error_line(match sig {
            Interrupt::Int => "interrupted (SIGINT); unfinished jobs were not printed",
            Interrupt::Term => "terminated (SIGTERM); unfinished jobs were not printed",
            Interrupt::Hup => "terminated (SIGHUP); unfinished jobs were not printed",
        });
    }
    if let Some(e) = write_error {
        output::error_line(&format!("cannot write results to stdout: {e}"));
        return Exit::Error;
    }
    batch_exit(&codes, interrupted)
}

async fn run_line(
    worker: usize,
    index: usize,
    line: Line,
    plan: &Plan,
    session: &mut Option<Session>,
    health: &HealthHandle,
    interrupt: &mut watch::Receiver<Option<Interrupt>>,
) -> Done {
    let number = line.number;
    let finish = |id: Option<&Value>, report: Report| {
        let label = match id {
            None => format!("line {number}"),
            Some(Value::String(s)) => format!("job {s}"),
            Some(other) => format!("job {other}"),
        };
        let summary = match (&report.model, &report.error) {
            (Some(m), _) if report.exit == Exit::Success => format!(
                "{label}: ok ({}/{}, {} ms, worker {worker})",
                m.provider, m.id, report.elapsed_ms
            ),
            (_, Some(e)) if id.is_some() => {
                format!("{label} (line {number}): exit {}: {e}", report.exit.code())
            }
            (_, Some(e)) => format!("exit {}: {e}", report.exit.code()),
            _ => format!("{label} (line {number}): exit {}", report.exit.code()),
        };
        Done {
            index,
            exit: report.exit,
            json: result_line(id, number, &report),
            summary,
        }
    };
    let spec = match line.job {
        Ok(spec) => spec,
        Err(e) => {
            return finish(
                None,
                Report::failed(Exit::Error, format!("line {number}: {e}")),
            );
        }
    };
    // Decoding and downscaling photos takes a few hundred ms each: off the event loop, so the
    // other workers' Pi streams and the signal watcher are served meanwhile.
    // The job's deadline covers reading its attachments too.
    let deadline = clock::now().instant + plan.timeout;
    let (files, prompt) = (spec.files.clone(), spec.prompt.clone());
    let reading = tokio::task::spawn_blocking(move || {
        attach::prepare(&files, &prompt, attach::Stdin::Refused)
    });
    let prepared = match tokio::time::timeout_at(deadline.into(), reading).await {
        Ok(Ok(Ok(p))) => p,
        Ok(Ok(Err(e))) => {
            return finish(Some(&spec.id), Report::failed(Exit::Error, e.to_string()));
        }
        Ok(Err(e)) => {
            return finish(
                Some(&spec.id),
                Report::failed(Exit::Error, format!("reading the attachments failed: {e}")),
            );
        }
        Err(_) => {
            return finish(
                Some(&spec.id),
                Report::failed(
                    Exit::Timeout,
                    format!(
                        "timed out after {} ms while reading the attachments (--timeout-ms)",
                        plan.timeout.as_millis()
                    ),
                ),
            );
        }
    };
    let thinking = crate::job_thinking(
        plan.thinking.as_deref(),
        plan.complexity,
        &spec.prompt,
        &prepared,
    );
    let label = match &spec.id {
        Value::String(s) => format!("job {s}: "),
        other => format!("job {other}: "),
    };
    let job = Job {
        message: prepared.message,
        images: prepared.images,
        config: plan.config.clone(),
        verbose: plan.verbose,
        label,
        in_batch: true,
        thinking,
        explain: false,
    };
    let mut quiet = StatusLine::disabled();
    // A Pi that dies mid-job is restarted and the job retried once, on the same terms.
    let mut report = None;
    for attempt in 0..2 {
        if session.is_none() {
            match Session::start(&plan.pi_command, &plan.pi_args) {
                Ok(s) => *session = Some(s),
                Err(e) => {
                    report = Some(Report::failed(Exit::Error, e));
                    break;
                }
            }
        }
        let Some(s) = session.as_mut() else { break };
        let r = s
            .run_job(&job, health, interrupt, deadline, &mut quiet)
            .await;
        let lost = r.pi_lost;
        let retry = lost && matches!(r.exit, Exit::Error) && interrupt.borrow().is_none();
        if lost && let Some(old) = session.take() {
            old.stop().await;
        }
        report = Some(r);
        if !retry || attempt == 1 {
            break;
        }
        output::progress_line(&format!(
            "{}Pi was lost; restarting it and retrying the job",
            job.label
        ));
    }
    let report = report.unwrap_or_else(|| Report::failed(Exit::Error, "no report".to_string()));
    finish(Some(&spec.id), report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_parse_with_line_numbers_and_clear_errors() {
        let input = b"\xEF\xBB\xBF{\"id\":\"a\",\"prompt\":\"one\"}\n\n{\"id\":2,\"prompt\":\"two\",\"files\":[\"x.md\"]}\r\nnot json\n{\"id\":\"a\",\"prompt\":\"dup\"}\n{\"id\":\"c\"}\n{\"id\":[1],\"prompt\":\"p\"}\n{\"id\":\"d\",\"prompt\":\"  \"}\n{\"id\":\"e\",\"prompt\":\"p\",\"promt\":1}\n";
        let lines = parse_jobs(input);
        let numbers: Vec<usize> = lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, [1, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(lines[0].job.as_ref().unwrap().prompt, "one");
        assert_eq!(lines[1].job.as_ref().unwrap().files, ["x.md"]);
        assert_eq!(lines[1].job.as_ref().unwrap().id, json!(2));
        let err = |i: usize| lines[i].job.clone().unwrap_err();
        assert!(err(2).starts_with("invalid job:"), "{}", err(2));
        assert!(err(3).contains("duplicate id"), "{}", err(3));
        assert!(err(4).contains("prompt"), "{}", err(4));
        assert!(err(5).contains("id must be"), "{}", err(5));
        let more = parse_jobs(b"{\"id\":1.5,\"prompt\":\"p\"}\n{\"id\":\"x\",\"prompt\":\"caf\xe9\"}\n{\"id\":12345678901234567890123,\"prompt\":\"p\"}\n");
        assert!(more[0].job.clone().unwrap_err().contains("integer"));
        assert!(more[1].job.clone().unwrap_err().contains("not UTF-8"));
        assert!(more[2].job.clone().unwrap_err().contains("integer"));
        assert!(err(6).contains("prompt is empty"), "{}", err(6));
        assert!(err(7).contains("promt"), "{}", err(7));
    }

    #[test]
    fn batch_exit_precedence() {
        use Exit::*;
        assert_eq!(batch_exit(&[Success, Success], None), Success);
        assert_eq!(batch_exit(&[Success, Exhausted], None), Exhausted);
        assert_eq!(batch_exit(&[Exhausted, Error], None), Error);
        assert_eq!(batch_exit(&[Error, Timeout], None), Timeout);
        assert_eq!(batch_exit(&[Success], Some(Interrupt::Term)), Terminated);
        assert_eq!(batch_exit(&[], Some(Interrupt::Int)), Interrupted);
    }
}
