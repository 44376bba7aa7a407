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
use std::path::Path;

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
pub struct Ledger {
    pub guard: LockGuard,
    /// What was done to a last line that lacked its newline.
    pub tail: Option<Tail>,
    /// The jobs FILE says are answered (`--resume` only).
    pub recorded: Option<Recorded>,
}

/// Opens and locks FILE, cuts a torn tail, and reads it back when `resume`.
pub fn open(path: &Path, resume: bool) -> anyhow::Result<Ledger> {
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
    let recorded = if resume {
        Some(read(guard.file()).with_context(|| format!("cannot read --output {shown}"))?)
    } else {
        None
    };
    Ok(Ledger {
        guard,
        tail,
        recorded,
    })
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

/// Reads every line of FILE into [`Recorded`].
fn read(file: &File) -> io::Result<Recorded> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut lines = LineReader::new(MAX_RECORD_LINE);
    let mut recorded = Recorded::default();
    while let Some(line) = lines.next_line_blocking(&mut reader)? {
        match line {
            Line::Whole(bytes) | Line::Unterminated(bytes) => recorded.apply(bytes),
            Line::TooLong { .. } => recorded.malformed += 1,
        }
    }
    Ok(recorded)
}

/// What `--resume` knows: for each job answered in FILE (by its [`Identity`]), the hash of the
/// input it was answered for. 24 bytes per recorded success (plus the hash table's spare room).
#[derive(Debug, Default)]
pub struct Recorded {
    ids: Identities,
    answered: HashMap<Identity, u64>,
    /// Lines that are not results at all (ignored).
    pub malformed: u64,
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
        let Ok(id) = JobId::from_value(&record.id) else {
            self.malformed += 1;
            return;
        };
        let key = self.ids.of(&id.canonical());
        match (record.ok, record.input_hash.as_deref().map(parse_hex)) {
            // The report of an invalid input line: not a job's result.
            (false, None) => {}
            (true, Some(Some(input))) => {
                self.answered.insert(key, input);
            }
            (false, Some(Some(_))) => {
                self.answered.remove(&key);
            }
            _ => self.malformed += 1,
        }
    }

    /// What FILE says about the job with this id and input hash.
    pub fn known(&self, id: &JobId, input_hash: u64) -> Known {
        match self.answered.get(&self.ids.of(&id.canonical())) {
            None => Known::Unanswered,
            Some(h) if *h == input_hash => Known::Answered,
            Some(_) => Known::AnsweredOtherInput,
        }
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
        assert_eq!(r.known(&id("a"), 0xaa), Known::Answered);
        assert_eq!(r.known(&id("a"), 0xab), Known::AnsweredOtherInput);
        assert_eq!(r.known(&id("b"), 0xbb), Known::Unanswered);
        assert_eq!(
            r.known(&id("7"), 7),
            Known::Answered,
            "7 and \"7\" are one id"
        );
        assert_eq!(r.known(&id("c"), 0xcc), Known::Answered);
        assert_eq!(r.known(&id("d"), 0xdd), Known::Unanswered);
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
        let l = open(&path, true).unwrap();
        assert_eq!(l.tail, Some(Tail::Cut(17)));
        assert_eq!(l.recorded.as_ref().unwrap().answered(), 1);
        assert_eq!(l.recorded.as_ref().unwrap().malformed, 0);
        drop(l);
        assert_eq!(std::fs::read(&path).unwrap(), good);
        let l = open(&path, false).unwrap();
        assert_eq!(l.tail, None);
        assert!(l.recorded.is_none());
        drop(l);
        // A file that is one torn line, longer than a scan chunk.
        let (_d, path) = ledger_file(&vec![b'x'; 200_000]);
        assert_eq!(open(&path, false).unwrap().tail, Some(Tail::Cut(200_000)));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    /// Issue 20: a complete last result that only lacks its newline (an editor or a script
    /// rewrote the file) is kept and gets its newline; its job is not paid for again.
    #[test]
    fn a_complete_last_result_without_its_newline_is_kept() {
        let last = &GOOD[..GOOD.len() - 1];
        let (_d, path) = ledger_file(&[GOOD, last].concat());
        let l = open(&path, true).unwrap();
        assert_eq!(l.tail, Some(Tail::Completed));
        assert_eq!(l.recorded.as_ref().unwrap().answered(), 1);
        drop(l);
        assert_eq!(std::fs::read(&path).unwrap(), [GOOD, GOOD].concat());
    }

    #[test]
    fn a_second_run_on_the_same_file_is_refused_and_symlinks_are_not_followed() {
        let (dir, path) = ledger_file(b"");
        let held = open(&path, false).unwrap();
        let err = open(&path, true).unwrap_err().to_string();
        assert!(
            err.contains("is in use by another pi-ccswitch-run"),
            "{err}"
        );
        drop(held);
        assert!(open(&path, true).is_ok());
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = open(&link, false).unwrap_err().to_string();
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

    #[test]
    fn a_new_file_is_created_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.jsonl");
        let l = open(&path, true).unwrap();
        assert_eq!(l.recorded.as_ref().unwrap().answered(), 0);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
