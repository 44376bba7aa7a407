//! `--output FILE` as the record of finished jobs. At start: opened owner-only (never through a
//! symlink) for appending and locked for the whole run (`flock`, not waited for: a second run
//! on the same FILE is refused), a torn last line left by a killed run cut off, and — with
//! `--resume` — read back into the set of jobs already answered. Everything here is blocking
//! file I/O: call it from a blocking thread. Writing the results is `sink.rs`'s job.
//!
//! A result line is a job's result when it carries an `input_hash`; an invalid input line's
//! report has `"input_hash": null` and never decides whether a job is done. For each id the
//! latest job result counts: a success marks the job answered, a later failure unmarks it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::Value;

use super::jobs::{JobId, MAX_LINE};
use super::shard::{Identities, Identity, parse_hex};
use crate::lines::{Line, LineReader};
use crate::lockfile::{self, LockError, LockGuard};

/// The longest result line read back (an answer may be as long as a job line, escaped).
const MAX_RECORD_LINE: usize = 2 * MAX_LINE;

/// FILE, locked for this run.
#[derive(Debug)]
pub struct ResultsFile {
    pub guard: LockGuard,
    /// What was done to a last line that lacked its newline.
    pub tail: Option<Tail>,
    /// The jobs FILE (and the `--resume-from` files) say are answered (`--resume` only); its
    /// `malformed` counts FILE's own lines that are not results.
    pub recorded: Option<Recorded>,
    /// Each `--resume-from` file with how many of its lines were not results.
    pub earlier_malformed: Vec<(PathBuf, u64)>,
}

/// Opens and locks FILE, cuts a torn tail, and reads it back when `resume` — after the
/// `earlier` result files (`--resume-from`), in the order given: for each job the latest
/// result counts, and FILE's are the latest.
pub fn open(path: &Path, resume: bool, earlier: &[PathBuf]) -> anyhow::Result<ResultsFile> {
    let shown = path.display();
    let file = lockfile::open_private(
        OpenOptions::new().read(true).append(true).create(true),
        path,
    )
    .map_err(|e| {
        if lockfile::is_symlink_error(&e) {
            anyhow::anyhow!("--output {shown} is a symlink; give the real path of the file")
        } else if lockfile::is_not_regular_error(&e) || e.kind() == io::ErrorKind::IsADirectory {
            // A device or FIFO would swallow, refuse or never take the answers paid for.
            anyhow::anyhow!(
                "--output {shown} is not a regular file (a device, FIFO or directory); give \
                 the path of a file (it is created if missing)"
            )
        } else {
            anyhow::Error::new(e).context(format!("cannot open --output {shown}"))
        }
    })?;
    let guard = match lockfile::lock_file(file, std::time::Duration::ZERO) {
        Ok(g) => g,
        Err(LockError::Timeout) => anyhow::bail!(
            "--output {shown} is in use by another pi-ccswitch-run (it holds the file's lock); \
             run one batch per output file (with --shard, give each shard its own file)"
        ),
        Err(LockError::Open(e) | LockError::Io(e)) => {
            return Err(anyhow::Error::new(e).context(format!("cannot lock --output {shown}")));
        }
    };
    let tail =
        mend_tail(guard.file()).with_context(|| format!("cannot repair --output {shown}"))?;
    let mut earlier_malformed = Vec::new();
    let recorded = if resume {
        let mut recorded = Recorded::default();
        for other in earlier {
            let before = recorded.malformed;
            read_earlier(other, guard.file(), &mut recorded)?;
            earlier_malformed.push((other.clone(), recorded.malformed - before));
        }
        let before = recorded.malformed;
        read(guard.file(), &mut recorded, Unterminated::Read)
            .with_context(|| format!("cannot read --output {shown}"))?;
        let own = recorded.malformed - before;
        recorded.malformed = own;
        Some(recorded)
    } else {
        None
    };
    Ok(ResultsFile {
        guard,
        tail,
        recorded,
        earlier_malformed,
    })
}

/// Reads an earlier result file (`--resume-from`) into `recorded`: read-only, never locked or
/// mended (another shard may be appending to it now, so a last line without its newline is
/// one being written, and skipped). The output file itself is skipped.
fn read_earlier(path: &Path, output: &File, recorded: &mut Recorded) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let shown = path.display();
    let file = lockfile::open_regular(path).map_err(|e| {
        if lockfile::is_not_regular_error(&e) {
            anyhow::anyhow!("--resume-from {shown} is not a regular file")
        } else {
            anyhow::Error::new(e).context(format!("cannot open --resume-from {shown}"))
        }
    })?;
    let (a, b) = (file.metadata()?, output.metadata()?);
    if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
        return Ok(());
    }
    read(&file, recorded, Unterminated::Skip)
        .with_context(|| format!("cannot read --resume-from {shown}"))
}

/// What to do with a last line that lacks its newline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unterminated {
    Read,
    Skip,
}

/// What was done to a last line without its `\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// A line whose write was cut short by a kill: these many bytes were cut off.
    Cut(u64),
    /// A complete result that only lacked its newline (an editor or a script rewrote FILE):
    /// kept, and the newline added, so its job is not paid for again.
    Completed,
}

/// Mends a last line without its `\n` so the next line appended starts on a line of its own:
/// a complete result gets its newline, anything else (a write cut short) is cut off.
fn mend_tail(file: &File) -> io::Result<Option<Tail>> {
    let Some((keep, len)) = torn_tail(file)? else {
        return Ok(None);
    };
    let mut last = vec![
        0u8;
        usize::try_from(len - keep)
            .unwrap_or(0)
            .min(MAX_RECORD_LINE + 1)
    ];
    if last.len() as u64 == len - keep {
        file.read_exact_at(&mut last, keep)?;
        if parse_record(&last).is_some() {
            // Positioned, so the file offset stays where reading back starts (with O_APPEND
            // the byte lands at the end either way).
            file.write_all_at(b"\n", len)?;
            file.sync_data()?;
            return Ok(Some(Tail::Completed));
        }
    }
    file.set_len(keep)?;
    file.sync_data()?;
    Ok(Some(Tail::Cut(len - keep)))
}

/// Where the last line without a `\n` starts, and the file's length; `None` when the file is
/// empty or ends with a `\n`.
fn torn_tail(file: &File) -> io::Result<Option<(u64, u64)>> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(None);
    }
    // Scan backwards a chunk at a time: memory stays small however long the torn line is.
    let mut chunk = vec![0u8; 64 * 1024];
    let mut end = len;
    let keep = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..usize::try_from(end - start).unwrap_or(0)];
        file.read_exact_at(buf, start)?;
        if let Some(i) = buf.iter().rposition(|b| *b == b'\n') {
            break start + i as u64 + 1;
        }
        end = start;
    };
    Ok(Some((keep, len)))
}

/// A result line as this runner writes it, or `None`.
fn parse_record(line: &[u8]) -> Option<RecordLine> {
    serde_json::from_slice::<RecordLine>(line)
        .ok()
        .filter(RecordLine::consistent)
}

/// Reads every line of `file` into `recorded`.
fn read(file: &File, recorded: &mut Recorded, unterminated: Unterminated) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut lines = LineReader::new(MAX_RECORD_LINE);
    while let Some(line) = lines.next_line_blocking(&mut reader)? {
        match line {
            Line::Whole(bytes) => recorded.apply(bytes),
            Line::Unterminated(bytes) if unterminated == Unterminated::Read => {
                recorded.apply(bytes);
            }
            Line::Unterminated(_) => {}
            Line::TooLong { .. } => recorded.malformed += 1,
        }
    }
    Ok(())
}

/// What `--resume` knows: for each job answered in FILE (by its [`Identity`]), the hashes of
/// the input and of the attachments' content it was answered for (32 bytes per recorded success,
/// plus the hash table's spare room); the jobs whose latest result is a failure in their input
/// itself, with the same hashes; and the invalid lines reported as such (by a hash of the line).
#[derive(Debug, Default)]
pub struct Recorded {
    ids: Identities,
    answered: HashMap<Identity, Recorded1>,
    failed: HashMap<Identity, Failed>,
    invalid: HashMap<u64, (i64, Box<str>)>,
    /// Lines that are not results at all (ignored).
    pub malformed: u64,
}

/// One recorded answer.
#[derive(Debug, Clone, Copy)]
struct Recorded1 {
    input: u64,
    content: Option<u64>,
}

/// One recorded failure in the input itself.
#[derive(Debug, Clone)]
struct Failed {
    input: u64,
    content: Option<u64>,
    exit: i64,
    /// Its recorded `error`, cut to [`MAX_REASON`] bytes (the log names it every night).
    reason: Box<str>,
}

/// The most of a recorded failure's reason kept for naming it (a results file is not trusted
/// to be small: a forged line must not make resuming hold megabytes per job).
const MAX_REASON: usize = 240;

/// `error` of a record as kept: one line, at most [`MAX_REASON`] bytes (cut at a character).
fn reason_of(error: Option<&str>) -> Box<str> {
    let text = crate::redact::printable(error.unwrap_or("(no reason recorded)"));
    if text.len() <= MAX_REASON {
        return text.into();
    }
    let mut end = MAX_REASON - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end]).into()
}

/// A job as FILE knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// No success recorded: run it.
    Unanswered,
    /// Answered, for this very input: skip it.
    Answered,
    /// Answered, but its input changed since: the recorded answer stands (no money spent
    /// twice); the user is told how to run it again.
    AnsweredOtherInput,
    /// Answered, but its attachments changed since, and `--rerun-changed` asks to run it.
    AnsweredChanged,
    /// Its latest result is a failure in its input (an attachment's content, a request too
    /// large for every model) and neither the line nor the files changed: it would fail the
    /// same way (`--retry-failed` runs it anyway). The recorded exit code.
    FailedBefore(i64),
}

/// What `--resume` runs again besides the unanswered jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rerun {
    /// `--retry-failed`.
    pub failed: bool,
    /// `--rerun-changed`.
    pub changed: bool,
}

/// The fields of a result line that matter here.
#[derive(Deserialize)]
struct RecordLine {
    id: Value,
    ok: bool,
    #[serde(default)]
    input_hash: Option<String>,
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default)]
    answer: Option<Value>,
    #[serde(default)]
    permanent: bool,
    #[serde(default)]
    content_hash: Option<String>,
    #[serde(default)]
    line_hash: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

impl RecordLine {
    /// A line this runner could have written: a success carries a non-empty answer and exit
    /// code 0, a failure a non-zero exit code. A forged or foreign `"ok": true` without an
    /// answer must never mark a job as done (it would never be paid for, nor answered).
    fn consistent(&self) -> bool {
        match (self.ok, self.exit_code) {
            (true, Some(0)) => {
                matches!(&self.answer, Some(Value::String(a)) if !a.trim().is_empty())
            }
            (false, Some(code)) => code != 0,
            _ => false,
        }
    }
}

impl Recorded {
    /// The keys job ids are compared by (the input filter must use the same).
    pub fn identities(&self) -> &Identities {
        &self.ids
    }

    /// Takes one line of FILE into account. Pure.
    pub fn apply(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Some(record) = parse_record(line) else {
            self.malformed += 1;
            return;
        };
        let input = record.input_hash.as_deref().map(parse_hex);
        if !record.ok && input.is_none() {
            // The report of an invalid input line: not a job's result (its id may be null).
            if record.permanent
                && let Some(Some(line)) = record.line_hash.as_deref().map(parse_hex)
            {
                self.invalid.insert(
                    line,
                    (
                        record.exit_code.unwrap_or(2),
                        reason_of(record.error.as_deref()),
                    ),
                );
            }
            return;
        }
        let Ok(id) = JobId::from_value(&record.id) else {
            self.malformed += 1;
            return;
        };
        let key = self.ids.of(&id.canonical());
        let content = record.content_hash.as_deref().and_then(parse_hex);
        match (record.ok, input) {
            (true, Some(Some(input))) => {
                self.failed.remove(&key);
                self.answered.insert(key, Recorded1 { input, content });
            }
            (false, Some(Some(input))) => {
                self.answered.remove(&key);
                if record.permanent {
                    let exit = record.exit_code.unwrap_or(2);
                    self.failed.insert(
                        key,
                        Failed {
                            input,
                            content,
                            exit,
                            reason: reason_of(record.error.as_deref()),
                        },
                    );
                } else {
                    self.failed.remove(&key);
                }
            }
            _ => self.malformed += 1,
        }
    }

    /// What FILE says about the job with this id, input hash and files; `content` reads the
    /// files' content hash as they are now (only called when it matters: the files are read
    /// only for jobs that failed in their content, or with `--rerun-changed`).
    pub fn known(
        &self,
        id: &JobId,
        input_hash: u64,
        rerun: Rerun,
        content: &mut dyn FnMut() -> Option<u64>,
    ) -> Known {
        let key = self.ids.of(&id.canonical());
        if let Some(r) = self.answered.get(&key) {
            if r.input != input_hash {
                return Known::AnsweredOtherInput;
            }
            // An answer recorded before content hashes were: unknown, so it stands.
            return match r.content {
                Some(recorded) if rerun.changed && content() != Some(recorded) => {
                    Known::AnsweredChanged
                }
                _ => Known::Answered,
            };
        }
        match self.failed.get(&key) {
            Some(f) if !rerun.failed && f.input == input_hash && content() == f.content => {
                Known::FailedBefore(f.exit)
            }
            _ => Known::Unanswered,
        }
    }

    /// The exit code recorded for this invalid line, if it was reported before and `--retry-failed`
    /// does not ask for it again.
    pub fn invalid_before(&self, line_hash: u64, rerun: Rerun) -> Option<i64> {
        (!rerun.failed)
            .then(|| self.invalid.get(&line_hash).map(|(exit, _)| *exit))
            .flatten()
    }

    /// Why the job with this id failed in its input, as recorded (for [`Known::FailedBefore`]).
    pub fn failed_reason(&self, id: &JobId) -> Option<&str> {
        let key = self.ids.of(&id.canonical());
        self.failed.get(&key).map(|f| &*f.reason)
    }

    /// Why this invalid line was reported, as recorded.
    pub fn invalid_reason(&self, line_hash: u64) -> Option<&str> {
        self.invalid.get(&line_hash).map(|(_, reason)| &**reason)
    }

    /// How many jobs FILE has answered.
    pub fn answered(&self) -> usize {
        self.answered.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    fn id(id: &str) -> JobId {
        JobId::from_value(&Value::String(id.to_string())).expect("id")
    }

    #[test]
    fn the_latest_job_result_decides_and_reports_of_invalid_lines_do_not() {
        let mut r = Recorded::default();
        let lines = [
            r#"{"id":"a","ok":true,"exit_code":0,"input_hash":"00000000000000aa","answer":"x"}"#,
            r#"{"id":"b","ok":true,"exit_code":0,"input_hash":"00000000000000bb","answer":"y"}"#,
            r#"{"id":"b","ok":false,"exit_code":1,"input_hash":"00000000000000bb"}"#,
            r#"{"id":"a","ok":false,"exit_code":2,"input_hash":null,"error":"input line 9: duplicate id"}"#,
            r#"{"id":7,"ok":true,"exit_code":0,"input_hash":"0000000000000007","answer":"z"}"#,
            r#"{"id":"c","ok":false,"exit_code":1,"input_hash":"00000000000000cc"}"#,
            r#"{"id":"c","ok":true,"exit_code":0,"input_hash":"00000000000000cc","answer":"w"}"#,
            "",
            "   ",
            "not json",
            r#"{"id":[1],"ok":true,"exit_code":0,"input_hash":"00000000000000aa","answer":"x"}"#,
            r#"{"id":"d","ok":true,"exit_code":0,"input_hash":"zz","answer":"x"}"#,
            r#"{"id":"d","ok":true,"exit_code":0,"input_hash":null,"answer":"x"}"#,
            r#"{"id":"d","ok":"yes","exit_code":0,"input_hash":"00000000000000dd","answer":"x"}"#,
            r#"{"ok":true,"exit_code":0,"input_hash":"00000000000000dd","answer":"x"}"#,
        ];
        for l in lines {
            r.apply(l.as_bytes());
        }
        assert_eq!(r.malformed, 6);
        assert_eq!(r.answered(), 3);
        assert_eq!(
            r.known(&id("a"), 0xaa, Rerun::default(), &mut || None),
            Known::Answered
        );
        assert_eq!(
            r.known(&id("a"), 0xab, Rerun::default(), &mut || None),
            Known::AnsweredOtherInput
        );
        assert_eq!(
            r.known(&id("b"), 0xbb, Rerun::default(), &mut || None),
            Known::Unanswered
        );
        assert_eq!(
            r.known(&id("7"), 7, Rerun::default(), &mut || None),
            Known::Answered,
            "7 and \"7\" are one id"
        );
        assert_eq!(
            r.known(&id("c"), 0xcc, Rerun::default(), &mut || None),
            Known::Answered
        );
        assert_eq!(
            r.known(&id("d"), 0xdd, Rerun::default(), &mut || None),
            Known::Unanswered
        );
    }

    /// Issue 21: a failure in the input itself is remembered with the input and content it
    /// met; the job is not run again until one of them changes, or `--retry-failed`. An answer
    /// is run again when its files changed only with `--rerun-changed`.
    #[test]
    fn failures_in_the_input_and_changed_files() {
        let mut r = Recorded::default();
        for l in [
            r#"{"id":"bin","ok":false,"exit_code":2,"input_hash":"00000000000000aa","permanent":true,"content_hash":"0000000000000001"}"#,
            r#"{"id":"gone","ok":false,"exit_code":2,"input_hash":"00000000000000bb","permanent":false}"#,
            r#"{"id":"done","ok":true,"exit_code":0,"input_hash":"00000000000000cc","answer":"x","content_hash":"0000000000000007"}"#,
            r#"{"id":"old","ok":true,"exit_code":0,"input_hash":"00000000000000dd","answer":"x"}"#,
            r#"{"id":null,"ok":false,"exit_code":2,"input_hash":null,"permanent":true,"line_hash":"00000000000000ee"}"#,
        ] {
            r.apply(l.as_bytes());
        }
        assert_eq!(r.malformed, 0);
        let none = Rerun::default();
        let retry = Rerun {
            failed: true,
            changed: false,
        };
        let changed = Rerun {
            failed: false,
            changed: true,
        };
        let mut same = || Some(1);
        assert_eq!(
            r.known(&id("bin"), 0xaa, none, &mut same),
            Known::FailedBefore(2)
        );
        assert_eq!(
            r.known(&id("bin"), 0xaa, retry, &mut same),
            Known::Unanswered
        );
        assert_eq!(
            r.known(&id("bin"), 0xab, none, &mut same),
            Known::Unanswered,
            "line changed"
        );
        assert_eq!(
            r.known(&id("bin"), 0xaa, none, &mut || Some(2)),
            Known::Unanswered,
            "file changed"
        );
        assert_eq!(
            r.known(&id("gone"), 0xbb, none, &mut || None),
            Known::Unanswered,
            "not permanent"
        );
        assert_eq!(
            r.known(&id("done"), 0xcc, none, &mut || Some(8)),
            Known::Answered
        );
        assert_eq!(
            r.known(&id("done"), 0xcc, changed, &mut || Some(7)),
            Known::Answered
        );
        assert_eq!(
            r.known(&id("done"), 0xcc, changed, &mut || Some(8)),
            Known::AnsweredChanged
        );
        assert_eq!(
            r.known(&id("done"), 0xcc, changed, &mut || None),
            Known::AnsweredChanged
        );
        assert_eq!(
            r.known(&id("old"), 0xdd, changed, &mut || Some(8)),
            Known::Answered,
            "an answer recorded without a content hash stands"
        );
        assert_eq!(r.invalid_before(0xee, none), Some(2));
        assert_eq!(r.invalid_before(0xee, retry), None);
        assert_eq!(r.invalid_before(0xef, none), None);
        // A later success forgets the failure.
        r.apply(
            br#"{"id":"bin","ok":true,"exit_code":0,"input_hash":"00000000000000aa","answer":"y"}"#,
        );
        assert_eq!(r.known(&id("bin"), 0xaa, none, &mut same), Known::Answered);
    }

    /// Issue 20: a forged or foreign line that claims success without an answer, or with an
    /// exit code that contradicts it, never marks a job as done.
    #[test]
    fn a_success_needs_an_answer_and_a_consistent_exit_code() {
        let forged = [
            r#"{"id":"g3","ok":true,"exit_code":2,"input_hash":"0000000000000000"}"#,
            r#"{"id":"g3","ok":true,"exit_code":0,"input_hash":"0000000000000000"}"#,
            r#"{"id":"g3","ok":true,"exit_code":0,"input_hash":"0000000000000000","answer":null}"#,
            r#"{"id":"g3","ok":true,"exit_code":0,"input_hash":"0000000000000000","answer":"  "}"#,
            r#"{"id":"g3","ok":true,"exit_code":0,"input_hash":"0000000000000000","answer":7}"#,
            r#"{"id":"g3","ok":true,"input_hash":"0000000000000000","answer":"x"}"#,
            r#"{"id":"g3","ok":false,"exit_code":0,"input_hash":"0000000000000000"}"#,
        ];
        for line in forged {
            let mut r = Recorded::default();
            r.apply(line.as_bytes());
            assert_eq!(r.answered(), 0, "{line}");
            assert_eq!(r.malformed, 1, "{line}");
        }
    }

    fn ledger_file(content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, content).unwrap();
        (dir, path)
    }

    const GOOD: &[u8] =
        b"{\"id\":\"a\",\"ok\":true,\"exit_code\":0,\"input_hash\":\"00000000000000aa\",\"answer\":\"x\"}\n";

    #[test]
    fn a_torn_tail_is_cut_and_a_whole_file_is_left_alone() {
        let good = GOOD;
        let (_d, path) = ledger_file(&[good, b"{\"id\":\"b\",\"ok\":tr"].concat());
        let l = open(&path, true, &[]).unwrap();
        assert_eq!(l.tail, Some(Tail::Cut(17)));
        assert_eq!(l.recorded.as_ref().unwrap().answered(), 1);
        assert_eq!(l.recorded.as_ref().unwrap().malformed, 0);
        drop(l);
        assert_eq!(std::fs::read(&path).unwrap(), good);
        let l = open(&path, false, &[]).unwrap();
        assert_eq!(l.tail, None);
        assert!(l.recorded.is_none());
        drop(l);
        // A file that is one torn line, longer than a scan chunk.
        let (_d, path) = ledger_file(&vec![b'x'; 200_000]);
        assert_eq!(
            open(&path, false, &[]).unwrap().tail,
            Some(Tail::Cut(200_000))
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    /// Issue 20: a complete last result that only lacks its newline (an editor or a script
    /// rewrote the file) is kept and gets its newline; its job is not paid for again.
    #[test]
    fn a_complete_last_result_without_its_newline_is_kept() {
        let last = &GOOD[..GOOD.len() - 1];
        let (_d, path) = ledger_file(&[GOOD, last].concat());
        let l = open(&path, true, &[]).unwrap();
        assert_eq!(l.tail, Some(Tail::Completed));
        assert_eq!(l.recorded.as_ref().unwrap().answered(), 1);
        drop(l);
        assert_eq!(std::fs::read(&path).unwrap(), [GOOD, GOOD].concat());
    }

    #[test]
    fn a_second_run_on_the_same_file_is_refused_and_symlinks_are_not_followed() {
        let (dir, path) = ledger_file(b"");
        let held = open(&path, false, &[]).unwrap();
        let err = open(&path, true, &[]).unwrap_err().to_string();
        assert!(
            err.contains("is in use by another pi-ccswitch-run"),
            "{err}"
        );
        drop(held);
        assert!(open(&path, true, &[]).is_ok());
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = open(&link, false, &[]).unwrap_err().to_string();
        assert!(
            err.ends_with("is a symlink; give the real path of the file"),
            "{err}"
        );
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzz::config(2000))]

        /// Whatever FILE holds, reading it back never panics, and a line is either taken into
        /// account or counted as malformed.
        #[test]
        fn any_line_is_read_without_panicking(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..80),
                    "\\{\"id\":(\"[a-z0-9]{0,4}\"|[0-9]{1,3}|null|1\\.5),\"ok\":(true|false|1),\"input_hash\":(null|\"[0-9a-f]{16}\"|\"x\")\\}"
                        .prop_map(String::into_bytes),
                ],
                0..20,
            )
        ) {
            let mut r = Recorded::default();
            for l in &lines {
                r.apply(l);
            }
            proptest::prop_assert!(r.malformed as usize + r.answered() <= lines.len());
        }
    }

    /// `--resume-from`: earlier files count, oldest first and FILE last; a last line being
    /// written elsewhere (no newline) is skipped, not counted, and the earlier file is left as
    /// it is; FILE given again is read once; a missing one is an error naming it.
    #[test]
    fn earlier_result_files_count_before_the_output_file() {
        let (dir, path) = ledger_file(b"");
        let earlier = dir.path().join("shard-0.jsonl");
        let b_failed = b"{\"id\":\"b\",\"ok\":false,\"exit_code\":2,\"input_hash\":\"00000000000000bb\",\"permanent\":true,\"error\":\"b.md is empty: nothing to send\"}\n";
        let torn = b"{\"id\":\"c\",\"ok\":tr";
        let content = [GOOD, b_failed, torn].concat();
        std::fs::write(&earlier, &content).unwrap();
        std::fs::write(
            &path,
            b"{\"id\":\"a\",\"ok\":false,\"exit_code\":1,\"input_hash\":\"00000000000000aa\"}\n",
        )
        .unwrap();
        let l = open(&path, true, &[earlier.clone(), path.clone()]).unwrap();
        let r = l.recorded.as_ref().unwrap();
        assert_eq!(r.malformed, 0);
        assert_eq!(
            l.earlier_malformed,
            [(earlier.clone(), 0), (path.clone(), 0)]
        );
        let none = Rerun::default();
        assert_eq!(
            r.known(&id("a"), 0xaa, none, &mut || None),
            Known::Unanswered,
            "FILE's later failure wins"
        );
        assert_eq!(
            r.known(&id("b"), 0xbb, none, &mut || None),
            Known::FailedBefore(2)
        );
        assert_eq!(
            r.failed_reason(&id("b")),
            Some("b.md is empty: nothing to send")
        );
        assert_eq!(std::fs::read(&earlier).unwrap(), content, "left as it is");
        drop(l);
        // The output file alone, and an earlier answer FILE does not contradict.
        std::fs::write(&path, b"").unwrap();
        let l = open(&path, true, std::slice::from_ref(&earlier)).unwrap();
        assert_eq!(
            l.recorded
                .as_ref()
                .unwrap()
                .known(&id("a"), 0xaa, none, &mut || None),
            Known::Answered
        );
        drop(l);
        let err = open(&path, true, &[dir.path().join("nope.jsonl")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--resume-from") && err.contains("nope.jsonl"),
            "{err}"
        );
    }

    /// A recorded reason is kept short and on one line, whatever the file holds.
    #[test]
    fn recorded_reasons_are_bounded() {
        let long = format!(
            "{{\"id\":\"x\",\"ok\":false,\"exit_code\":2,\"input_hash\":\"0000000000000001\",\"permanent\":true,\"error\":\"{}\\nsecond line\"}}",
            "é".repeat(400)
        );
        let mut r = Recorded::default();
        r.apply(long.as_bytes());
        let reason = r.failed_reason(&id("x")).unwrap();
        assert!(
            reason.len() <= MAX_REASON && reason.ends_with("..."),
            "{reason}"
        );
        assert!(!reason.contains('\n'));
    }

    #[test]
    fn a_new_file_is_created_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.jsonl");
        let l = open(&path, true, &[]).unwrap();
        assert_eq!(l.recorded.as_ref().unwrap().answered(), 0);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
