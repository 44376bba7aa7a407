//! An answer → the one JSON value it must be. The answer is the JSON value alone, or one fenced
//! code block (```` ``` ```` or ```` ```json ````) holding it, with nothing but whitespace
//! around; anything else is a [`Rejection`]. One pass over the bytes checks the size, depth
//! and number of values against [`super::limits`] before serde_json sees the text, and yields
//! the value's text without insignificant whitespace (the one line stdout gets: the model's own
//! key order and number spellings, which a parsed value would not keep). Pure.

use std::fmt;

use serde_json::Value;

use super::limits::{MAX_ANSWER_BYTES, MAX_DEPTH, MAX_VALUES};

/// Why an answer does not conform. Each is worded for the model (the re-ask quotes it) and for
/// the user alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Not one JSON value: prose, a broken value, text before or after it.
    NotJson { detail: String },
    /// Text around a fenced block, more than one block, or a fence left open.
    TextAround,
    /// A fenced block marked as another language.
    OtherFence { info: String },
    /// Longer than [`MAX_ANSWER_BYTES`].
    TooLarge { bytes: usize },
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// More than [`MAX_VALUES`] values.
    TooMany,
    /// A JSON value the schema rejects: the first few errors, and how many more were found
    /// (`None`: the value was too large for a full report, so more may exist).
    Invalid {
        errors: Vec<String>,
        more: Option<usize>,
    },
}

impl Rejection {
    /// The short list of what is wrong: validation errors one per line, else the one reason.
    pub fn errors(&self) -> Vec<String> {
        match self {
            Rejection::Invalid { errors, more } => {
                let mut list = errors.clone();
                match more {
                    Some(0) => {}
                    Some(n) => list.push(format!("… and {n} more")),
                    None => {
                        list.push("(the answer is large: only its first error is listed)".into())
                    }
                }
                list
            }
            other => vec![other.to_string()],
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::NotJson { detail } => {
                write!(f, "the answer is not one JSON value: {detail}")
            }
            Rejection::TextAround => f.write_str(
                "the answer has text around the JSON value (answer with the JSON value alone, \
                 or inside one ```json fenced block)",
            ),
            Rejection::OtherFence { info } => {
                write!(f, "the answer's fenced block is marked `{info}`, not json")
            }
            Rejection::TooLarge { bytes } => write!(
                f,
                "the answer is {bytes} bytes long; at most {} MiB of JSON is read",
                MAX_ANSWER_BYTES / 1024 / 1024
            ),
            Rejection::TooDeep => write!(
                f,
                "the JSON value nests arrays and objects deeper than {MAX_DEPTH} levels"
            ),
            Rejection::TooMany => write!(f, "the JSON value has more than {MAX_VALUES} values"),
            Rejection::Invalid { errors, .. } => match errors.first() {
                Some(first) => write!(f, "the JSON value does not match the schema: {first}"),
                None => f.write_str("the JSON value does not match the schema"),
            },
        }
    }
}

/// The JSON value of an answer that has the right shape (not yet validated).
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    pub value: Value,
    /// The value's text on one line: the answer's own text without insignificant whitespace.
    pub compact: String,
    /// The number of values (an upper bound, see [`MAX_VALUES`]).
    pub values: usize,
}

/// The JSON value an answer holds, or why it holds none. Time and memory are linear in the
/// answer and bounded by [`MAX_ANSWER_BYTES`].
pub fn extract(answer: &str) -> Result<Extracted, Rejection> {
    if answer.len() > MAX_ANSWER_BYTES {
        return Err(Rejection::TooLarge {
            bytes: answer.len(),
        });
    }
    let body = unfence(answer.trim())?;
    let scan = scan(body)?;
    let value: Value = serde_json::from_str(body).map_err(|e| not_json(body, &e))?;
    Ok(Extracted {
        value,
        compact: scan.compact,
        values: scan.values,
    })
}

/// The text inside one fence that wraps the whole (trimmed) answer, else the answer itself.
fn unfence(text: &str) -> Result<&str, Rejection> {
    let ticks = text.bytes().take_while(|&b| b == b'`').count();
    if ticks < 3 {
        // A fence later on means prose before it ("Here is the JSON: ```json …").
        return if text.contains("```") && !starts_like_json(text) {
            Err(Rejection::TextAround)
        } else {
            Ok(text)
        };
    }
    let fence = &text[..ticks];
    let Some((info, rest)) = text[ticks..].split_once('\n') else {
        return Err(Rejection::TextAround);
    };
    let info = info.trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
        return Err(Rejection::OtherFence {
            info: info.chars().take(20).collect(),
        });
    }
    // The closing fence ends the answer, on a line of its own.
    let Some(inner) = rest.strip_suffix(fence) else {
        return Err(Rejection::TextAround);
    };
    let inner = match inner.strip_suffix('\n') {
        Some(i) => i.strip_suffix('\r').unwrap_or(i),
        None if inner.trim().is_empty() => inner,
        None => return Err(Rejection::TextAround),
    };
    // A fence line inside: two blocks (or one with text between them), not one value.
    if inner.lines().any(|l| l.trim_start().starts_with("```")) {
        return Err(Rejection::TextAround);
    }
    Ok(inner.trim())
}

/// The text starts as a JSON value would (so a fence inside it is inside a string, or after
/// the value, which the parser reports).
fn starts_like_json(text: &str) -> bool {
    text.bytes().next().is_some_and(|b| {
        matches!(
            b,
            b'{' | b'[' | b'"' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
        )
    })
}

struct Scanned {
    compact: String,
    values: usize,
}

/// One pass over the bytes: the nesting depth and the number of values are checked as they
/// grow (so a megabyte of `[` stops at the 65th), and whitespace outside strings is dropped.
/// Syntax is the parser's business: this only has to be right for valid JSON and bounded for
/// anything.
fn scan(body: &str) -> Result<Scanned, Rejection> {
    let mut compact = String::with_capacity(body.len());
    let (mut depth, mut values) = (0usize, 1usize);
    let (mut in_string, mut escaped) = (false, false);
    let mut run_start = 0;
    for (i, b) in body.bytes().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                values += 1;
                if depth > MAX_DEPTH {
                    return Err(Rejection::TooDeep);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' => values += 1,
            b' ' | b'\t' | b'\n' | b'\r' => {
                // Whitespace is ASCII: slicing at it stays on character boundaries.
                compact.push_str(&body[run_start..i]);
                run_start = i + 1;
                continue;
            }
            _ => {}
        }
        if values > MAX_VALUES {
            return Err(Rejection::TooMany);
        }
    }
    compact.push_str(&body[run_start..]);
    Ok(Scanned { compact, values })
}

/// serde_json's complaint, worded for a model: where, and what was found there.
fn not_json(body: &str, e: &serde_json::Error) -> Rejection {
    let full = e.to_string();
    let what = full
        .rsplit_once(" at line ")
        .map_or(full.as_str(), |(m, _)| m);
    let at = format!("line {} column {}", e.line(), e.column());
    let detail = if body.is_empty() {
        "the answer is empty".to_string()
    } else if what == "trailing characters" {
        format!("there is text after the JSON value (at {at})")
    } else if !starts_like_json(body) {
        format!("it starts with text, not a JSON value ({what} at {at})")
    } else {
        format!("{what} at {at}")
    };
    Rejection::NotJson { detail }
}
