//! A schema file → a compiled [`Schema`], or the one reason it cannot be used (exit 2, before
//! anything is sent). The file is opened without blocking and read up to
//! [`MAX_SCHEMA_BYTES`]; the draft comes from `$schema` (2020-12 when absent); references are
//! resolved inside the file only — a retriever that refuses everything stands in for the
//! network and the disk, so nothing is ever fetched; `pattern`s run on the linear-time regex
//! engine (a schema that needs backtracking is refused rather than let an answer take
//! exponential time); `format`s are asserted in every draft (a pipeline that asks for a date
//! wants a date). Last, the schema is canonicalized (jsonschema's experimental normal form):
//! when that proves no value can match, the schema is refused as unsatisfiable. That proof
//! covers contradictions it can model (types, numeric and length ranges, `const`/`enum`
//! against the rest, required properties that are forbidden, recursion that never ends);
//! anything it cannot decide is accepted, and the answers tell.

use std::fmt;
use std::io::Read as _;
use std::path::Path;

use jsonschema::canonical::{Satisfiability, UnsatisfiableReason};
use jsonschema::{Draft, PatternOptions, Validator};
use serde_json::Value;

use super::limits::MAX_SCHEMA_BYTES;

/// A compiled schema, ready to judge answers.
pub struct Schema {
    validator: Validator,
    /// The schema as the model is shown it: compact JSON on one line.
    text: String,
    draft: Draft,
    /// Tells schemas apart within one process (the batch remembers, per schema, which models
    /// could not follow it): a hash of the compact text.
    id: u64,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("draft", &self.draft_name())
            .field("bytes", &self.text.len())
            .finish_non_exhaustive()
    }
}

impl Schema {
    /// Reads and compiles the schema at `path`.
    pub fn read(path: &Path) -> Result<Schema, SchemaError> {
        Schema::from_bytes(&read_bounded(path)?)
    }

    /// Compiles a schema document.
    pub fn from_bytes(bytes: &[u8]) -> Result<Schema, SchemaError> {
        if bytes.len() as u64 > MAX_SCHEMA_BYTES {
            return Err(SchemaError::TooLarge {
                bytes: bytes.len() as u64,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|e| SchemaError::NotJson {
            detail: format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.valid_up_to()
            ),
        })?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let value: Value = serde_json::from_str(text).map_err(|e| SchemaError::NotJson {
            detail: e.to_string(),
        })?;
        if !matches!(value, Value::Object(_) | Value::Bool(_)) {
            return Err(SchemaError::NotASchema {
                detail: "a schema is a JSON object (or true/false)".to_string(),
            });
        }
        let draft = Draft::default().detect(&value);
        if draft == Draft::Unknown {
            let uri = value
                .get("$schema")
                .map(Value::to_string)
                .unwrap_or_default();
            return Err(SchemaError::UnknownDraft {
                uri: crate::redact::printable(&uri).chars().take(120).collect(),
            });
        }
        let validator = jsonschema::options()
            .with_draft(draft)
            .offline()
            .with_pattern_options(PatternOptions::regex())
            .should_validate_formats(true)
            .build(&value)
            .map_err(|e| SchemaError::NotASchema {
                detail: bounded(&e),
            })?;
        if let Some(why) = unsatisfiable(&value, draft) {
            return Err(SchemaError::Unsatisfiable { why });
        }
        let compact = value.to_string();
        Ok(Schema {
            validator,
            id: {
                use std::hash::{Hash as _, Hasher as _};
                let mut h = std::hash::DefaultHasher::new();
                compact.hash(&mut h);
                h.finish()
            },
            text: compact,
            draft,
        })
    }

    pub(super) fn validator(&self) -> &Validator {
        &self.validator
    }

    /// The schema as compact JSON on one line (what the model is shown).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Which draft judges answers: `2020-12`, `2019-09`, `7`, `6` or `4`.
    pub fn draft_name(&self) -> &'static str {
        match self.draft {
            Draft::Draft4 => "4",
            Draft::Draft6 => "6",
            Draft::Draft7 => "7",
            Draft::Draft201909 => "2019-09",
            _ => "2020-12",
        }
    }

    /// Tells schemas apart within this process.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// Why a schema file cannot be used. `Display` is the problem alone; the caller names the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    Missing,
    /// A directory, a FIFO, a device…
    NotAFile,
    Unreadable {
        detail: String,
    },
    TooLarge {
        bytes: u64,
    },
    NotJson {
        detail: String,
    },
    /// JSON that is not a valid schema of its draft (or uses what the runner refuses: a
    /// reference outside the file, a pattern that needs backtracking).
    NotASchema {
        detail: String,
    },
    UnknownDraft {
        uri: String,
    },
    /// Proven to accept no JSON value.
    Unsatisfiable {
        why: String,
    },
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaError::Missing => f.write_str("file not found"),
            SchemaError::NotAFile => f.write_str("not a regular file"),
            SchemaError::Unreadable { detail } => write!(f, "cannot read the file: {detail}"),
            SchemaError::TooLarge { bytes } => write!(
                f,
                "the schema is {bytes} bytes; at most {} KiB (it is sent with every prompt)",
                MAX_SCHEMA_BYTES / 1024
            ),
            SchemaError::NotJson { detail } => write!(f, "not JSON: {detail}"),
            SchemaError::NotASchema { detail } => write!(f, "not a valid JSON Schema: {detail}"),
            SchemaError::UnknownDraft { uri } => write!(
                f,
                "unsupported $schema {uri} (supported: draft 2020-12, 2019-09, 7, 6 and 4; \
                 leave $schema out for 2020-12)"
            ),
            SchemaError::Unsatisfiable { why } => write!(
                f,
                "the schema accepts no JSON value ({why}), so no answer could ever conform"
            ),
        }
    }
}

impl std::error::Error for SchemaError {}

/// Opens without blocking (a FIFO cannot stall the run), checks what was opened, and reads at
/// most one byte past the limit.
fn read_bounded(path: &Path) -> Result<Vec<u8>, SchemaError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SchemaError::Missing,
            std::io::ErrorKind::IsADirectory => SchemaError::NotAFile,
            _ => SchemaError::Unreadable {
                detail: e.to_string(),
            },
        })?;
    let meta = file.metadata().map_err(|e| SchemaError::Unreadable {
        detail: e.to_string(),
    })?;
    if !meta.is_file() {
        return Err(SchemaError::NotAFile);
    }
    if meta.len() > MAX_SCHEMA_BYTES {
        return Err(SchemaError::TooLarge { bytes: meta.len() });
    }
    let mut bytes = Vec::new();
    file.take(MAX_SCHEMA_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SchemaError::Unreadable {
            detail: e.to_string(),
        })?;
    Ok(bytes)
}

/// jsonschema's words for a bad schema, on one line and cut short.
fn bounded(e: &jsonschema::ValidationError<'_>) -> String {
    let path = e.instance_path().to_string();
    let text = super::bounded::display(e, 300);
    if path.is_empty() {
        text
    } else {
        format!("at {path}: {text}")
    }
}

/// Why the schema accepts nothing, when canonicalization proves it does not; `None` when it
/// accepts something or that could not be decided.
fn unsatisfiable(value: &Value, draft: Draft) -> Option<String> {
    let prepared = jsonschema::canonical::options()
        .with_draft(draft)
        .offline()
        .with_pattern_options(PatternOptions::regex())
        .should_validate_formats(true)
        .prepare(value)
        .ok()?;
    let canonical = prepared.canonicalize().ok()?;
    if canonical.satisfiability() != Satisfiability::No {
        return None;
    }
    let reasons = prepared.unsatisfiable().unwrap_or_default();
    // The root's own reason when it has one, else the first part that admits nothing.
    let (pointer, reason) = reasons
        .get_key_value("")
        .or_else(|| reasons.iter().next())
        .map(|(p, r)| (p.clone(), r.clone()))
        .unzip();
    Some(match reason {
        Some(reason) => word(pointer.as_deref().unwrap_or(""), &reason),
        None => "its constraints contradict each other".to_string(),
    })
}

/// An unsatisfiable part, for people: which keywords where.
fn word(pointer: &str, reason: &UnsatisfiableReason) -> String {
    let place = |p: &str| {
        if p.is_empty() {
            "the top level".to_string()
        } else {
            p.to_string()
        }
    };
    let cause = |c: &jsonschema::canonical::Cause| {
        if c.keywords.is_empty() {
            format!("the subschema at {}", place(&c.pointer))
        } else {
            format!("{} at {}", c.keywords.join(", "), place(&c.pointer))
        }
    };
    let text = match reason {
        UnsatisfiableReason::Literal => format!("it is `false` at {}", place(pointer)),
        UnsatisfiableReason::Empty(c) => format!("{} admits nothing", cause(c)),
        UnsatisfiableReason::Conflict(causes) => format!(
            "{} contradict each other",
            causes.iter().map(cause).collect::<Vec<_>>().join("; ")
        ),
    };
    crate::redact::printable(&text).chars().take(300).collect()
}
