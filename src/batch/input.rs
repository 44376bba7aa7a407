//! The job file (or stdin), read as the workers need it. A reader thread splits the input into
//! lines of at most 32 MiB (`lines.rs`: an over-long line is refused at its first byte past the
//! limit, holding no more than the limit), parses each (`jobs.rs`), keeps this shard's lines,
//! refuses duplicate ids, skips the jobs `--resume` found answered, and hands the rest to the
//! workers over a bounded channel: blocking reads never run on the event loop, and memory stays
//! bounded however long the input is — one line being read, a few parsed jobs queued, and one
//! 128-bit keyed identity per id of this shard.

use std::collections::HashSet;
use std::io::{self, BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::jobs::{self, Invalid, JobSpec, MAX_LINE};
use super::ledger::{Known, Recorded, Rerun};
use super::shard::{self, Identities, Identity};
use crate::cli::Shard;
use crate::lines::{Line, LineReader};

/// One line for a worker: a job to run, or an invalid line to report.
#[derive(Debug)]
pub enum Item {
    Job {
        /// Position among the lines this process reports (the order of results on stdout).
        index: usize,
        /// 1-based line number in the input.
        number: u64,
        spec: JobSpec,
        input_hash: u64,
    },
    Invalid {
        index: usize,
        number: u64,
        invalid: Invalid,
        /// FNV-1a 64 of the line's bytes: `--resume` knows the line by it (it may have no id).
        line_hash: u64,
    },
}

/// What the reader has seen so far, for the status line and the summary.
#[derive(Debug, Default)]
pub struct Progress {
    /// Lines of this shard read so far (jobs, invalid lines and skipped jobs).
    pub total: AtomicU64,
    /// Jobs skipped because `--resume` found them answered.
    pub skipped: AtomicU64,
    /// Jobs and lines skipped because their latest result is a failure in the input itself,
    /// which has not changed since.
    pub failed_before: AtomicU64,
    /// The worst exit code among those (the batch's exit code covers them).
    pub failed_before_exit: AtomicU64,
    /// Those jobs by name, with their recorded reason.
    pub failed_before_jobs: Mutex<super::summary::Permanent>,
    /// The whole input has been read (or reading failed).
    pub finished: AtomicBool,
    /// Why reading stopped early.
    pub error: Mutex<Option<String>>,
}

/// What decides which lines run here.
pub struct LineFilter {
    pub shard: Option<Shard>,
    /// `--resume`: the jobs FILE says are answered.
    pub recorded: Option<Recorded>,
    /// `--output FILE` as given (for the changed-input message).
    pub output_name: String,
    /// What `--resume` runs again besides the unanswered jobs.
    pub rerun: Rerun,
    /// The jobs of this shard seen so far, for duplicate ids (keyed: see [`Identities`]).
    seen: HashSet<Identity>,
    ids: Identities,
    next_index: usize,
}

/// What to do with one parsed line.
#[derive(Debug)]
pub enum Decision {
    /// Give it to a worker.
    Run(Item),
    /// Another shard's line.
    Elsewhere,
    /// Answered before (`--resume`); `Some(message)` when its input changed since.
    Answered(Option<String>),
    /// Failed before in its input, which did not change (`--resume`): the recorded exit code,
    /// the job's name and the recorded reason.
    FailedBefore {
        exit: i64,
        label: String,
        reason: String,
    },
}

impl LineFilter {
    pub fn new(
        shard: Option<Shard>,
        recorded: Option<Recorded>,
        output_name: String,
        rerun: Rerun,
    ) -> LineFilter {
        let ids = recorded
            .as_ref()
            .map_or_else(Identities::new, |r| r.identities().clone());
        LineFilter {
            shard,
            recorded,
            output_name,
            rerun,
            seen: HashSet::new(),
            ids,
            next_index: 0,
        }
    }

    /// Decides what becomes of input line `number` (whose bytes hash to `line_hash`).
    /// `content` gives the content hash of a job's files as they are now; it is the only way
    /// this reads anything.
    pub fn decide(
        &mut self,
        number: u64,
        line_hash: u64,
        parsed: Result<JobSpec, Invalid>,
        content: &mut dyn FnMut(&[String]) -> Option<u64>,
    ) -> Decision {
        let id_hash = match &parsed {
            Ok(spec) => Some(spec.id.hash()),
            Err(invalid) => invalid.id.as_ref().map(jobs::JobId::hash),
        };
        if !shard::runs_here(self.shard, id_hash) {
            return Decision::Elsewhere;
        }
        let spec = match parsed {
            Ok(spec) => spec,
            Err(invalid) => {
                if let Some(failed) = self.invalid_before(number, line_hash, invalid.id.as_ref()) {
                    return failed;
                }
                return Decision::Run(self.invalid(number, invalid, line_hash));
            }
        };
        // Only valid jobs claim their id: a broken line does not spoil the id for a later fix.
        if !self.seen.insert(self.ids.of(&spec.id.canonical())) {
            let reason = format!("duplicate id {} (an earlier line has it)", spec.id.value());
            let invalid = Invalid {
                id: Some(spec.id),
                reason,
            };
            if let Some(failed) = self.invalid_before(number, line_hash, invalid.id.as_ref()) {
                return failed;
            }
            return Decision::Run(self.invalid(number, invalid, line_hash));
        }
        let input_hash = spec.input_hash();
        let files = spec.files.clone();
        let mut now_content = || {
            if files.is_empty() {
                None
            } else {
                content(&files)
            }
        };
        match self
            .recorded
            .as_ref()
            .map(|r| r.known(&spec.id, input_hash, self.rerun, &mut now_content))
        {
            Some(Known::Answered) => Decision::Answered(None),
            Some(Known::FailedBefore(exit)) => Decision::FailedBefore {
                exit,
                label: crate::redact::printable(&spec.id.canonical()),
                reason: self
                    .recorded
                    .as_ref()
                    .and_then(|r| r.failed_reason(&spec.id))
                    .unwrap_or_default()
                    .to_string(),
            },
            Some(Known::AnsweredOtherInput) => Decision::Answered(Some(format!(
                "{} (input line {number}): its input changed since its answer was recorded in \
                 {}; the recorded answer stands (to run it again, delete its line from {} or \
                 give the job a new id)",
                spec.id.label(),
                self.output_name,
                self.output_name
            ))),
            Some(Known::Unanswered | Known::AnsweredChanged) | None => {
                let index = self.take_index();
                Decision::Run(Item::Job {
                    index,
                    number,
                    spec,
                    input_hash,
                })
            }
        }
    }

    /// An invalid line reported before (and not asked for again).
    fn invalid_before(
        &self,
        number: u64,
        line_hash: u64,
        id: Option<&jobs::JobId>,
    ) -> Option<Decision> {
        let recorded = self.recorded.as_ref()?;
        let exit = recorded.invalid_before(line_hash, self.rerun)?;
        Some(Decision::FailedBefore {
            exit,
            label: id.map_or_else(
                || format!("input line {number}"),
                |id| crate::redact::printable(&id.canonical()),
            ),
            reason: recorded
                .invalid_reason(line_hash)
                .unwrap_or_default()
                .to_string(),
        })
    }

    fn invalid(&mut self, number: u64, invalid: Invalid, line_hash: u64) -> Item {
        Item::Invalid {
            index: self.take_index(),
            number,
            invalid,
            line_hash,
        }
    }

    fn take_index(&mut self) -> usize {
        let i = self.next_index;
        self.next_index += 1;
        i
    }
}

/// Starts the reader thread over `source`; items go to `tx` as the workers take them.
pub fn spawn(
    source: Box<dyn Read + Send>,
    filter: LineFilter,
    tx: mpsc::Sender<Item>,
    progress: Arc<Progress>,
    name: String,
    console: crate::console::Console,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("batch-input".into())
        .spawn(move || {
            let mut reader = Reader {
                filter,
                console,
                tx,
                progress,
            };
            if let Err(e) = reader.read_all(source) {
                let mut error = reader
                    .progress
                    .error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                *error = Some(format!("cannot read the batch file {name}: {e}"));
            }
            reader.progress.finished.store(true, Ordering::Release);
        })?;
    Ok(())
}

struct Reader {
    filter: LineFilter,
    console: crate::console::Console,
    tx: mpsc::Sender<Item>,
    progress: Arc<Progress>,
}

impl Reader {
    fn read_all(&mut self, source: Box<dyn Read + Send>) -> io::Result<()> {
        let mut source = BufReader::with_capacity(64 * 1024, source);
        let mut lines = LineReader::new(MAX_LINE);
        let mut number = 0u64;
        loop {
            let Some(line) = lines.next_line_blocking(&mut source)? else {
                return Ok(());
            };
            number += 1;
            let line_hash = match &line {
                Line::Whole(bytes) | Line::Unterminated(bytes) => shard::fnv1a64(bytes),
                Line::TooLong { .. } => 0,
            };
            let parsed = match line {
                Line::Whole(bytes) | Line::Unterminated(bytes) => {
                    // On every line, not only the first: `cat a.jsonl b.jsonl` of files written
                    // on Windows puts a BOM at the start of a later line.
                    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
                    if bytes.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    jobs::parse_line(bytes)
                }
                Line::TooLong { .. } => Err(Invalid {
                    id: None,
                    reason: format!(
                        "longer than {} MiB, the limit for one job line",
                        MAX_LINE / (1024 * 1024)
                    ),
                }),
            };
            let decision = self.filter.decide(number, line_hash, parsed, &mut |files| {
                crate::attach::content_hash_of(files)
            });
            match decision {
                Decision::Elsewhere => {}
                Decision::Answered(changed) => {
                    self.progress.total.fetch_add(1, Ordering::Relaxed);
                    self.progress.skipped.fetch_add(1, Ordering::Relaxed);
                    if let Some(message) = changed {
                        self.console.error_line(&message);
                    }
                }
                Decision::FailedBefore {
                    exit,
                    label,
                    reason,
                } => {
                    self.progress.total.fetch_add(1, Ordering::Relaxed);
                    self.progress.failed_before.fetch_add(1, Ordering::Relaxed);
                    // Named every night, with why: the log of each night says which jobs
                    // cannot be done (a skipped job is not a done one).
                    self.console.progress_line(&format!(
                        "job {label} (input line {number}): not run again: it failed before in \
                         its unchanged input (exit {exit}): {reason} (--retry-failed runs it)"
                    ));
                    if let Ok(mut named) = self.progress.failed_before_jobs.lock() {
                        named.push(&label, &reason);
                    }
                    let exit = u64::try_from(exit).unwrap_or(2);
                    self.progress
                        .failed_before_exit
                        .fetch_max(exit, Ordering::Relaxed);
                }
                Decision::Run(item) => {
                    self.progress.total.fetch_add(1, Ordering::Relaxed);
                    if self.tx.blocking_send(item).is_err() {
                        // The batch is stopping: nobody takes more jobs.
                        return Ok(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(filter: &mut LineFilter, number: u64, line: &str) -> Decision {
        filter.decide(
            number,
            shard::fnv1a64(line.as_bytes()),
            jobs::parse_line(line.as_bytes()),
            &mut |_| None,
        )
    }

    #[test]
    fn duplicates_keep_their_id_and_broken_lines_do_not_claim_one() {
        let mut f = LineFilter::new(None, None, String::new(), Rerun::default());
        assert!(matches!(
            run(&mut f, 1, r#"{"id":"a"}"#),
            Decision::Run(Item::Invalid { index: 0, .. })
        ));
        assert!(matches!(
            run(&mut f, 2, r#"{"id":"a","prompt":"p"}"#),
            Decision::Run(Item::Job {
                index: 1,
                number: 2,
                ..
            })
        ));
        match run(&mut f, 3, r#"{"id":"a","prompt":"q"}"#) {
            Decision::Run(Item::Invalid {
                index: 2,
                number: 3,
                invalid,
                ..
            }) => {
                assert_eq!(
                    invalid.reason,
                    "duplicate id \"a\" (an earlier line has it)"
                );
                assert_eq!(invalid.id.unwrap().value(), "a");
            }
            other => panic!("{other:?}"),
        }
        match run(&mut f, 4, r#"{"id":7,"prompt":"p"}"#) {
            Decision::Run(Item::Job { index: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
        match run(&mut f, 5, r#"{"id":"7","prompt":"p"}"#) {
            Decision::Run(Item::Invalid { invalid, .. }) => {
                assert_eq!(
                    invalid.reason,
                    "duplicate id \"7\" (an earlier line has it)"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn shards_take_their_ids_and_shard_zero_reports_idless_lines() {
        let lines: Vec<String> = (0..40)
            .map(|i| format!(r#"{{"id":"doc-{i}","prompt":"p"}}"#))
            .chain(["not json".to_string(), r#"{"id":"x"}"#.to_string()])
            .collect();
        let mut counts = Vec::new();
        for index in 0..3 {
            let mut f = LineFilter::new(
                Some(Shard { index, count: 3 }),
                None,
                String::new(),
                Rerun::default(),
            );
            let taken = lines
                .iter()
                .enumerate()
                .filter(|(n, l)| matches!(run(&mut f, *n as u64 + 1, l), Decision::Run(_)))
                .count();
            counts.push(taken);
        }
        assert_eq!(
            counts.iter().sum::<usize>(),
            42,
            "each line once: {counts:?}"
        );
        let mut zero = LineFilter::new(
            Some(Shard { index: 0, count: 3 }),
            None,
            String::new(),
            Rerun::default(),
        );
        assert!(matches!(run(&mut zero, 1, "not json"), Decision::Run(_)));
        let mut one = LineFilter::new(
            Some(Shard { index: 1, count: 3 }),
            None,
            String::new(),
            Rerun::default(),
        );
        assert!(matches!(run(&mut one, 1, "not json"), Decision::Elsewhere));
    }

    #[test]
    fn resume_skips_answered_jobs_and_says_when_the_input_changed() {
        let spec = jobs::parse_line(br#"{"id":"a","prompt":"p"}"#).unwrap();
        let mut recorded = Recorded::default();
        recorded.apply(
            format!(
                r#"{{"id":"a","ok":true,"exit_code":0,"answer":"x","input_hash":"{}"}}"#,
                shard::hex(spec.input_hash())
            )
            .as_bytes(),
        );
        recorded.apply(
            br#"{"id":"b","ok":true,"exit_code":0,"answer":"y","input_hash":"0000000000000001"}"#,
        );
        let mut f = LineFilter::new(
            None,
            Some(recorded),
            "out.jsonl".to_string(),
            Rerun::default(),
        );
        assert!(matches!(
            run(&mut f, 1, r#"{"id":"a","prompt":"p"}"#),
            Decision::Answered(None)
        ));
        match run(&mut f, 2, r#"{"id":"b","prompt":"changed"}"#) {
            Decision::Answered(Some(m)) => assert_eq!(
                m,
                "job b (input line 2): its input changed since its answer was recorded in \
                 out.jsonl; the recorded answer stands (to run it again, delete its line from \
                 out.jsonl or give the job a new id)"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            run(&mut f, 3, r#"{"id":"c","prompt":"p"}"#),
            Decision::Run(Item::Job { index: 0, .. })
        ));
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config(300))]

        /// Across the N shards of one input, every line is run (or reported) by exactly one.
        #[test]
        fn shards_partition_any_input(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    "\\{\"id\":\"[a-c]{0,2}\",\"prompt\":\"p\"\\}",
                    "\\{\"id\":[0-9]{1,2},\"prompt\":\"p\"\\}",
                    "\\{\"id\":\"[a-c]\"\\}",
                    "[ -~]{0,12}",
                ],
                0..30,
            ),
            count in 1u64..5,
        ) {
            let parsed: Vec<_> = lines.iter().map(|l| jobs::parse_line(l.as_bytes())).collect();
            let mut owners = vec![0usize; lines.len()];
            for index in 0..count {
                let mut f = LineFilter::new(Some(Shard { index, count }), None, String::new(), Rerun::default());
                for (n, p) in parsed.iter().enumerate() {
                    if matches!(f.decide(n as u64 + 1, 0, p.clone(), &mut |_| None), Decision::Run(_)) {
                        owners[n] += 1;
                    }
                }
            }
            proptest::prop_assert!(owners.iter().all(|o| *o == 1), "{:?} {:?}", lines, owners);
        }
    }

    #[test]
    fn the_reader_streams_with_line_numbers_a_bom_and_blank_lines() {
        let input = b"\xEF\xBB\xBF{\"id\":1,\"prompt\":\"a\"}\n\n  \r\n{\"id\":2,\"prompt\":\"b\"}\r\n{\"id\":3";
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (tx, mut rx) = mpsc::channel(1);
        let progress = Arc::new(Progress::default());
        let filter = LineFilter::new(None, None, String::new(), Rerun::default());
        spawn(
            Box::new(&input[..]),
            filter,
            tx,
            Arc::clone(&progress),
            "-".into(),
            crate::console::Console::new(),
        )
        .unwrap();
        let items: Vec<Item> = rt.block_on(async {
            let mut items = Vec::new();
            while let Some(i) = rx.recv().await {
                items.push(i);
            }
            items
        });
        let summary: Vec<(u64, bool)> = items
            .iter()
            .map(|i| match i {
                Item::Job { number, .. } => (*number, true),
                Item::Invalid { number, .. } => (*number, false),
            })
            .collect();
        assert_eq!(summary, [(1, true), (4, true), (5, false)]);
        assert_eq!(progress.total.load(Ordering::Relaxed), 3);
        assert!(progress.finished.load(Ordering::Acquire));
        assert!(progress.error.lock().unwrap().is_none());
    }
}
