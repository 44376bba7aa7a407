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
use super::shard::parse_hex;
use crate::lines::{Line, LineReader};
use crate::lockfile::{self, LockError, LockGuard};

/// The longest result line read back (an answer may be as long as a job line, escaped).
const MAX_RECORD_LINE: usize = 2 * MAX_LINE;

/// FILE, locked for this run.
#[derive(Debug)]
pub struct Ledger {
    pub guard: LockGuard,
    /// Bytes of a torn last line that were cut off.
    pub cut: Option<u64>,
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
    let cut =
        cut_torn_tail(guard.file()).with_context(|| format!("cannot repair --output {shown}"))?;
    let recorded = if resume {
        Some(read(guard.file()).with_context(|| format!("cannot read --output {shown}"))?)
    } else {
        None
    };
    Ok(Ledger {
        guard,
        cut,
        recorded,
    })
}

/// Cuts everything after the last `\n` (a line whose write was cut short by a kill), so the
/// next line appended starts on a line of its own. Returns how many bytes went.
fn cut_torn_tail(file: &File) -> io::Result<Option<u64>> {
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
    file.set_len(keep)?;
    file.sync_data()?;
    Ok(Some(len - keep))
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

/// What `--resume` knows: for each job id (by hash) answered in FILE, the hash of the input it
/// was answered for. 16 bytes per recorded success (plus the hash table's spare room).
#[derive(Debug, Default)]
pub struct Recorded {
    answered: HashMap<u64, u64>,
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
}

impl Recorded {
    /// Takes one line of FILE into account. Pure.
    pub fn apply(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Ok(record) = serde_json::from_slice::<RecordLine>(line) else {
            self.malformed += 1;
            return;
        };
        let Ok(id) = JobId::from_value(&record.id) else {
            self.malformed += 1;
            return;
        };
        match (record.ok, record.input_hash.as_deref().map(parse_hex)) {
            // The report of an invalid input line: not a job's result.
            (false, None) => {}
            (true, Some(Some(input))) => {
                self.answered.insert(id.hash(), input);
            }
            (false, Some(Some(_))) => {
                self.answered.remove(&id.hash());
            }
            _ => self.malformed += 1,
        }
    }

    /// What FILE says about the job with these hashes.
    pub fn known(&self, id_hash: u64, input_hash: u64) -> Known {
        match self.answered.get(&id_hash) {
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

    fn hash(id: &str) -> u64 {
        JobId::from_value(&Value::String(id.to_string()))
            .expect("id")
            .hash()
    }

    #[test]
    fn the_latest_job_result_decides_and_reports_of_invalid_lines_do_not() {
        let mut r = Recorded::default();
        let lines = [
            r#"{"id":"a","ok":true,"input_hash":"00000000000000aa","answer":"x"}"#,
            r#"{"id":"b","ok":true,"input_hash":"00000000000000bb"}"#,
            r#"{"id":"b","ok":false,"input_hash":"00000000000000bb"}"#,
            r#"{"id":"a","ok":false,"input_hash":null,"error":"input line 9: duplicate id"}"#,
            r#"{"id":7,"ok":true,"input_hash":"0000000000000007"}"#,
            r#"{"id":"c","ok":false,"input_hash":"00000000000000cc"}"#,
            r#"{"id":"c","ok":true,"input_hash":"00000000000000cc"}"#,
            "",
            "   ",
            "not json",
            r#"{"id":[1],"ok":true,"input_hash":"00000000000000aa"}"#,
            r#"{"id":"d","ok":true,"input_hash":"zz"}"#,
            r#"{"id":"d","ok":true,"input_hash":null}"#,
            r#"{"id":"d","ok":"yes","input_hash":"00000000000000dd"}"#,
            r#"{"ok":true,"input_hash":"00000000000000dd"}"#,
        ];
        for l in lines {
            r.apply(l.as_bytes());
        }
        assert_eq!(r.malformed, 6);
        assert_eq!(r.answered(), 3);
        assert_eq!(r.known(hash("a"), 0xaa), Known::Answered);
        assert_eq!(r.known(hash("a"), 0xab), Known::AnsweredOtherInput);
        assert_eq!(r.known(hash("b"), 0xbb), Known::Unanswered);
        assert_eq!(
            r.known(hash("7"), 7),
            Known::Answered,
            "7 and \"7\" are one id"
        );
        assert_eq!(r.known(hash("c"), 0xcc), Known::Answered);
        assert_eq!(r.known(hash("d"), 0xdd), Known::Unanswered);
    }

    fn ledger_file(content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, content).unwrap();
        (dir, path)
    }

    #[test]
    fn a_torn_tail_is_cut_and_a_whole_file_is_left_alone() {
        let good = b"{\"id\":\"a\",\"ok\":true,\"input_hash\":\"00000000000000aa\"}\n";
        let (_d, path) = ledger_file(&[&good[..], b"{\"id\":\"b\",\"ok\":tr"].concat());
        let l = open(&path, true).unwrap();
        assert_eq!(l.cut, Some(17));
        assert_eq!(l.recorded.as_ref().unwrap().answered(), 1);
        assert_eq!(l.recorded.as_ref().unwrap().malformed, 0);
        drop(l);
        assert_eq!(std::fs::read(&path).unwrap(), good);
        let l = open(&path, false).unwrap();
        assert_eq!(l.cut, None);
        assert!(l.recorded.is_none());
        drop(l);
        // A file that is one torn line, longer than a scan chunk.
        let (_d, path) = ledger_file(&vec![b'x'; 200_000]);
        assert_eq!(open(&path, false).unwrap().cut, Some(200_000));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
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
