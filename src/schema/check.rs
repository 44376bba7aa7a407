//! An answer against a schema: the conforming value, or what is wrong with it as a short list
//! (the first [`MAX_ERRORS`] validation errors, each cut to [`MAX_ERROR_CHARS`] characters).
//! Time and memory are bounded by the answer's limits (see `limits`): a value of more than
//! [`FULL_REPORT_VALUES`] values is searched for its first error only. Pure.

use serde_json::Value;

use super::extract::{Rejection, extract};
use super::limits::{FULL_REPORT_VALUES, MAX_ERROR_CHARS, MAX_ERRORS};
use super::load::Schema;

/// An answer that is one JSON value the schema accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct Conforming {
    pub value: Value,
    /// The value on one line, as the model wrote it less insignificant whitespace (stdout).
    pub compact: String,
}

/// Judges `answer` against `schema`.
pub fn check(schema: &Schema, answer: &str) -> Result<Conforming, Rejection> {
    let extracted = extract(answer)?;
    let validator = schema.validator();
    if validator.is_valid(&extracted.value) {
        return Ok(Conforming {
            value: extracted.value,
            compact: extracted.compact,
        });
    }
    let (errors, more) = if extracted.values <= FULL_REPORT_VALUES {
        let mut all: Vec<String> = validator
            .iter_errors(&extracted.value)
            .map(|e| word(&e))
            .collect();
        all.dedup();
        let more = all.len().saturating_sub(MAX_ERRORS);
        all.truncate(MAX_ERRORS);
        (all, Some(more))
    } else {
        let first = validator.validate(&extracted.value).err();
        (first.iter().map(word).collect(), None)
    };
    Err(Rejection::Invalid { errors, more })
}

/// One validation error: where in the answer, and what (cut short: it may quote a large value).
fn word(e: &jsonschema::ValidationError<'_>) -> String {
    let path = e.instance_path().to_string();
    let place = if path.is_empty() {
        "at the top level".to_string()
    } else {
        format!("at {}", super::bounded::display(&path, 80))
    };
    format!("{place}: {}", super::bounded::display(e, MAX_ERROR_CHARS))
}
