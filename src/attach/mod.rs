//! `@path` attachments → the prompt message and its images, in the order given. The only
//! reads of user input files. Everything is checked before Pi is started, so a bad attachment
//! costs nothing. Text vs image is decided by content (signature), never by file name.

pub mod image;
pub mod text;

use std::fmt;
use std::fs;
use std::io::Read;
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
}

/// A bad attachment (exit 2): `problem: ABSOLUTE PATH (detail)`, worded like the old
/// runner's messages (`file not found: …`) so scripts that match them keep working.
#[derive(Debug)]
pub struct AttachError {
    pub path: PathBuf,
    pub problem: String,
    pub detail: Option<String>,
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.problem, self.path.display())?;
        match &self.detail {
            Some(d) => write!(f, " ({d})"),
            None => Ok(()),
        }
    }
}

/// What went wrong with one file, before the path is attached.
type Problem = (String, Option<String>);

fn problem(what: &str, detail: Option<String>) -> Problem {
    (what.to_string(), detail)
}

impl std::error::Error for AttachError {}

/// Reads every attachment in order and builds the message.
pub fn prepare(files: &[String], prompt: &str) -> Result<Prepared, AttachError> {
    let mut blocks = Vec::new();
    let mut images = Vec::new();
    let mut notes = Vec::new();
    for file in files {
        let abs = normalize(
            &std::path::absolute(Path::new(file)).unwrap_or_else(|_| PathBuf::from(file)),
        );
        let err = |(problem, detail): Problem| AttachError {
            path: abs.clone(),
            problem,
            detail,
        };
        let bytes = read_limited(&abs).map_err(err)?;
        match image::sniff(&bytes) {
            image::Sniffed::Image(format) => {
                if images.len() >= MAX_IMAGES {
                    return Err(err(problem(
                        "too many images",
                        Some(format!("at most {MAX_IMAGES} images per run")),
                    )));
                }
                let prepared = image::prepare(&bytes, format, MAX_BASE64_LEN)
                    .map_err(|e| err(problem("unusable image", Some(e.to_string()))))?;
                if let Some(note) = prepared.note(MAX_BASE64_LEN) {
                    notes.push(format!("{}: {note}", abs.display()));
                }
                images.push(ImageContent::new(prepared.base64, prepared.mime_type));
            }
            image::Sniffed::OtherBinary(what) => {
                return Err(err(problem(
                    "binary files are not supported",
                    Some(format!("found {what}")),
                )));
            }
            image::Sniffed::Text => {
                let name = abs.to_string_lossy();
                let block = text::wrap(&name, &bytes).map_err(|e| {
                    err(match e {
                        text::TextError::Binary => problem(
                            "binary files are not supported",
                            Some("found a NUL byte".to_string()),
                        ),
                        text::TextError::InvalidUtf8 { offset } => problem(
                            "not a UTF-8 text file",
                            Some(format!(
                                "first invalid byte at offset {offset}; convert it to UTF-8 \
                                 first, e.g. with iconv"
                            )),
                        ),
                    })
                })?;
                if let Some(block) = block {
                    blocks.push(block);
                }
            }
        }
    }
    Ok(Prepared {
        message: text::message(&blocks, prompt),
        text_files: blocks.len(),
        images,
        notes,
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

fn read_limited(path: &Path) -> Result<Vec<u8>, Problem> {
    let meta = fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => problem("file not found", None),
        _ => problem("cannot read file", Some(e.to_string())),
    })?;
    if !meta.is_file() {
        return Err(problem("not a regular text file", None));
    }
    let too_large = |n: u64| {
        problem(
            "attachment too large",
            Some(format!(
                "{n} bytes; at most {} MiB per attachment",
                MAX_ATTACHMENT_BYTES / 1024 / 1024
            )),
        )
    };
    if meta.len() > MAX_ATTACHMENT_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(MAX_ATTACHMENT_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| problem("cannot read file", Some(e.to_string())))?;
    if bytes.len() as u64 > MAX_ATTACHMENT_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}
