//! `@path` attachments → the prompt message and its images, in the order given. The only
//! reads of user input files and of standard input (`@-`). Everything is checked before Pi is
//! started, so a bad attachment costs nothing. Text vs image is decided by content
//! (signature), never by file name.
//!
//! A file is opened first and checked afterwards, on the open descriptor (`fstat`), so a path
//! swapped between a check and the open (a FIFO planted where a file was) cannot make the
//! runner block: the open is non-blocking, and anything but a regular file is refused.

pub mod digest;
pub mod image;
pub mod text;

use std::fmt;
use std::fs;
use std::io::{IsTerminal as _, Read};
use std::path::{Path, PathBuf};

use crate::rpc::ImageContent;

pub use image::{MAX_ATTACHMENT_BYTES, MAX_BASE64_LEN, MAX_IMAGES};

/// The prompt as Pi receives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prepared {
    pub message: String,
    pub images: Vec<ImageContent>,
    /// Number of non-empty text attachments (the complexity estimate uses it).
    pub text_files: usize,
    /// One line per image that had to be re-encoded (for stderr).
    pub notes: Vec<String>,
    /// SHA-256 of each attachment's bytes, in order.
    pub digests: Vec<[u8; 32]>,
    /// The attachments that were empty (or held only a BOM), in order: skipped, as the old
    /// runner did, but never silently (see [`Prepared::empty_warning`]).
    pub empty: Vec<String>,
}

impl Prepared {
    /// The stderr warning of a single run with some empty attachments (the drop-in behaviour
    /// sends the rest anyway).
    pub fn empty_warning(&self) -> Option<String> {
        (!self.empty.is_empty()).then(|| {
            format!(
                "warning: {} empty; nothing of {} was sent",
                names_are(&self.empty),
                if self.empty.len() == 1 { "it" } else { "them" }
            )
        })
    }

    /// A run or batch job whose attachments were all empty: the model would get only the
    /// prompt and answer it about nothing, confidently (exit 2, nothing sent).
    pub fn nothing_to_send(&self, attachments: usize) -> Option<String> {
        (attachments > 0 && self.empty.len() == attachments)
            .then(|| format!("{} empty: nothing to send", names_are(&self.empty)))
    }
}

/// `a.md is` / `a.md, b.md are`.
fn names_are(names: &[String]) -> String {
    match names {
        [one] => format!("{one} is"),
        many => format!("{} are", many.join(", ")),
    }
}

/// The `@` argument that reads standard input.
pub const STDIN: &str = "-";
/// The name standard input gets in `<file name="…">` and in messages.
pub const STDIN_NAME: &str = "stdin";

/// A bad attachment (exit 2): `problem: ABSOLUTE PATH (detail)`, worded like the old
/// runner's messages (`file not found: …`) so scripts that match them keep working.
#[derive(Debug)]
pub struct AttachError {
    /// The absolute path, or `stdin`.
    pub path: PathBuf,
    pub problem: String,
    pub detail: Option<String>,
    /// The problem is in what the file holds (binary, not UTF-8, too large, a corrupt image,
    /// too many images): only a change of the file can cure it.
    pub in_content: bool,
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A path may hold a newline or an escape sequence: never print it raw.
        write!(
            f,
            "{}: {}",
            self.problem,
            crate::redact::printable(&self.path.to_string_lossy())
        )?;
        match &self.detail {
            Some(d) => write!(f, " ({d})"),
            None => Ok(()),
        }
    }
}

/// What went wrong, and whether it is in the file's content (which only a new content can
/// change) rather than in where or whether it can be read.
#[derive(Debug)]
pub(super) struct Problem {
    what: String,
    detail: Option<String>,
    in_content: bool,
}

/// A problem with where or whether a file can be read (it may be there tomorrow).
fn problem(what: &str, detail: Option<String>) -> Problem {
    Problem {
        what: what.to_string(),
        detail,
        in_content: false,
    }
}

/// A problem with what a file holds: it stays until the file changes.
fn content_problem(what: &str, detail: Option<String>) -> Problem {
    Problem {
        in_content: true,
        ..problem(what, detail)
    }
}

impl std::error::Error for AttachError {}

/// Whether `@-` may read standard input here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    /// A single run: `@-` reads standard input (refused when it is a terminal).
    Allowed,
    /// A batch job: standard input may be the job list itself.
    Refused,
}

/// Reads every attachment in order and builds the message.
pub fn prepare(files: &[String], prompt: &str, stdin: Stdin) -> Result<Prepared, AttachError> {
    let mut blocks = Vec::new();
    let mut images = Vec::new();
    let mut notes = Vec::new();
    let mut empty = Vec::new();
    let mut digests = Vec::new();
    for file in files {
        let from_stdin = file == STDIN;
        let abs = if from_stdin {
            PathBuf::from(STDIN_NAME)
        } else {
            normalize(&std::path::absolute(Path::new(file)).unwrap_or_else(|_| PathBuf::from(file)))
        };
        let err = |p: Problem| AttachError {
            path: abs.clone(),
            problem: p.what,
            detail: p.detail,
            in_content: p.in_content,
        };
        let bytes = if from_stdin {
            read_stdin(stdin).map_err(err)?
        } else {
            read_limited(&abs).map_err(err)?
        };
        digests.push(digest::sha256(&bytes));
        match image::sniff(&bytes) {
            image::Sniffed::Image(format) => {
                if images.len() >= MAX_IMAGES {
                    return Err(err(content_problem(
                        "too many images",
                        Some(format!("at most {MAX_IMAGES} images per run")),
                    )));
                }
                let prepared = image::prepare(&bytes, format, MAX_BASE64_LEN)
                    .map_err(|e| err(content_problem("unusable image", Some(e.to_string()))))?;
                if let Some(note) = prepared.note(MAX_BASE64_LEN) {
                    notes.push(format!("{}: {note}", abs.display()));
                }
                images.push(ImageContent::new(prepared.base64, prepared.mime_type));
            }
            image::Sniffed::OtherBinary(what) => {
                return Err(err(content_problem(
                    "binary files are not supported",
                    Some(format!("found {what}")),
                )));
            }
            image::Sniffed::Text => {
                let name = abs.to_string_lossy();
                let block = text::wrap(&name, &bytes).map_err(|e| {
                    err(match e {
                        text::TextError::Binary => content_problem(
                            "binary files are not supported",
                            Some("found a NUL byte".to_string()),
                        ),
                        text::TextError::InvalidUtf8 { offset } => content_problem(
                            "not a UTF-8 text file",
                            Some(format!(
                                "first invalid byte at offset {offset}; convert it to UTF-8 \
                                 first, e.g. with iconv"
                            )),
                        ),
                    })
                })?;
                match block {
                    Some(block) => blocks.push(block),
                    None => empty.push(crate::redact::printable(&name)),
                }
            }
        }
    }
    Ok(Prepared {
        message: text::message(&blocks, prompt),
        text_files: blocks.len(),
        images,
        notes,
        empty,
        digests,
    })
}

/// Removes `.` and `..` lexically, as Node's `path.resolve` does for the old runner's
/// `<file name="…">` (symlinks are not resolved).
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn too_large(n: u64) -> Problem {
    content_problem(
        "attachment too large",
        Some(format!(
            "{n} bytes; at most {} MiB per attachment",
            MAX_ATTACHMENT_BYTES / 1024 / 1024
        )),
    )
}

/// The content hash of `files` as they are now, read with the rules of `@file` (regular files
/// only, non-blocking, at most 20 MiB each); `None` when one cannot be read.
pub fn content_hash_of(files: &[String]) -> Option<u64> {
    let mut digests = Vec::with_capacity(files.len());
    for f in files {
        let path = std::path::absolute(std::path::Path::new(f)).ok()?;
        digests.push(digest::sha256(&read_limited(&path).ok()?));
    }
    Some(digest::content_hash(&digests))
}

/// Opens without blocking (a FIFO or device cannot stall the open), then checks what was
/// opened; symlinks to regular files are followed, as users expect of their own files.
fn read_limited(path: &Path) -> Result<Vec<u8>, Problem> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => problem("file not found", None),
            std::io::ErrorKind::IsADirectory => problem("not a regular text file", None),
            _ => problem("cannot read file", Some(e.to_string())),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| problem("cannot read file", Some(e.to_string())))?;
    if !meta.is_file() {
        return Err(problem("not a regular text file", None));
    }
    if meta.len() > MAX_ATTACHMENT_BYTES {
        return Err(too_large(meta.len()));
    }
    read_bounded(file, "cannot read file")
}

/// `@-`: standard input, read to its end (bounded like a file). Never read unless asked, so an
/// open, never-closing stdin of a CI step cannot hang a run that does not use it.
fn read_stdin(stdin: Stdin) -> Result<Vec<u8>, Problem> {
    if stdin == Stdin::Refused {
        return Err(problem(
            "cannot attach standard input here",
            Some(
                "a batch job's files cannot be '-': the batch may be reading its jobs from stdin"
                    .to_string(),
            ),
        ));
    }
    let input = std::io::stdin();
    if stdin_is_closed() {
        return Err(problem(
            "nothing piped in",
            Some(
                "@- reads standard input, but it is closed or /dev/null; pipe the text in, \
                 e.g. `git diff | pi-ccswitch-run \"review this\" @-`"
                    .to_string(),
            ),
        ));
    }
    if input.is_terminal() {
        return Err(problem(
            "nothing piped in",
            Some("@- reads standard input, but it is a terminal; pipe the text in, e.g. `git diff | pi-ccswitch-run \"review this\" @-`".to_string()),
        ));
    }
    read_bounded(input.lock(), "cannot read standard input")
}

/// Standard input is closed (`<&-`) or `/dev/null`. Rust's runtime puts `/dev/null` on a
/// closed descriptor 0 before `main`, and reading it gives nothing, silently: `@-` would
/// attach nothing and the model would answer about nothing.
fn stdin_is_closed() -> bool {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let Ok(null) = fs::metadata("/dev/null") else {
        return false;
    };
    // SAFETY: fstat on descriptor 0 into a zeroed struct of the right type.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &raw mut st) } != 0 {
        return true;
    }
    null.file_type().is_char_device()
        && (st.st_mode & libc::S_IFMT) == libc::S_IFCHR
        && st.st_rdev == null.rdev()
}

/// Reads at most one byte past the limit, so an endless source costs bounded memory and time.
fn read_bounded(source: impl Read, failed: &str) -> Result<Vec<u8>, Problem> {
    let mut bytes = Vec::new();
    source
        .take(MAX_ATTACHMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| problem(failed, Some(e.to_string())))?;
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}
