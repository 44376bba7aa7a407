//! One line of a `--batch` job file → a job, or why it is not one (keeping the line's id
//! whenever it had a usable one), and the batch's exit code. Pure: no I/O, no clock.
//!
//! A job line is a JSON object: `id` (a string or an integer, required), `prompt` (required),
//! `files` (paths, as for `@file`), `system` (the job's system prompt), `tools` (the job's
//! tool allowlist), `schema` (a JSON Schema file the job's answer must validate against, in
//! place of `--output-schema`). Anything else is refused, so a typo such as `promt` is never
//! ignored.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::shard::{Fnv, fnv1a64};
use crate::exit::Exit;
use crate::signals::Interrupt;

/// The longest job line read; a longer one is refused as soon as it passes this.
pub const MAX_LINE: usize = 32 * 1024 * 1024;

/// The fields a job line may have.
const FIELDS: [&str; 6] = ["id", "prompt", "files", "system", "tools", "schema"];

/// A job's id: a JSON string or integer, echoed as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobId(Value);

impl JobId {
    /// A usable id, or why `v` is not one.
    pub fn from_value(v: &Value) -> Result<JobId, BadId> {
        match v {
            Value::String(_) => Ok(JobId(v.clone())),
            // Integers only: a float id would not survive the round trip (1e2 vs 100).
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(JobId(v.clone())),
            Value::Number(n) => {
                // Without arbitrary precision, integers past u64 arrive as floats.
                let big = n
                    .as_f64()
                    .is_some_and(|f| f.is_finite() && f.fract() == 0.0 && f.abs() >= 9.2e18);
                Err(if big {
                    BadId::TooLarge
                } else {
                    BadId::Kind(n.to_string())
                })
            }
            other => Err(BadId::Kind(kind(other).to_string())),
        }
    }

    /// The id as written (for results).
    pub fn value(&self) -> &Value {
        &self.0
    }

    /// The text that names the job for sharding and resuming: a string's UTF-8 bytes, an
    /// integer's decimal digits (so `7` and `"7"` are the same id).
    pub fn canonical(&self) -> Cow<'_, str> {
        match &self.0 {
            Value::String(s) => Cow::Borrowed(s),
            other => Cow::Owned(other.to_string()),
        }
    }

    /// FNV-1a 64 of [`JobId::canonical`].
    pub fn hash(&self) -> u64 {
        fnv1a64(self.canonical().as_bytes())
    }

    /// `job doc-7` for messages: one line whatever the id holds (control characters escaped,
    /// so an id cannot forge or break stderr lines).
    pub fn label(&self) -> String {
        format!("job {}", crate::redact::printable(&self.canonical()))
    }
}

/// Why a JSON value is not a job id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadId {
    /// An integer past what a JSON number can carry exactly.
    TooLarge,
    /// Not a string or an integer: what it was (`an array`, `1.5`).
    Kind(String),
}

impl std::fmt::Display for BadId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadId::TooLarge => f.write_str("\"id\" is too large for an integer id (use a string)"),
            BadId::Kind(got) => write!(f, "\"id\" must be a string or an integer (got {got})"),
        }
    }
}

/// A valid job line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    pub id: JobId,
    pub prompt: String,
    pub files: Vec<String>,
    /// Replaces `--system-prompt` for this job.
    pub system: Option<String>,
    /// Replaces `--tools`/`--no-tools`/`--no-builtin-tools` for this job (`[]`: no tools).
    pub tools: Option<Vec<String>>,
    /// Replaces `--output-schema` for this job: the path of a JSON Schema file.
    pub schema: Option<String>,
}

impl JobSpec {
    /// FNV-1a 64 of the job's canonical input: the compact JSON text of
    /// `[prompt, files, system, tools]` (absent `system`/`tools` as `null`), with the `schema`
    /// path as a fifth item when the line has one (so the hashes of lines without it stay what
    /// they were). It covers what the line says, not the contents of its files.
    pub fn input_hash(&self) -> u64 {
        let mut h = Fnv::new();
        // Serializing strings and lists into a hasher cannot fail.
        let _ = match &self.schema {
            None => serde_json::to_writer(
                &mut h,
                &(&self.prompt, &self.files, &self.system, &self.tools),
            ),
            Some(schema) => serde_json::to_writer(
                &mut h,
                &(&self.prompt, &self.files, &self.system, &self.tools, schema),
            ),
        };
        h.finish()
    }
}

/// A line that is not a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The line's id when it had a usable one (its result carries it, its shard reports it).
    pub id: Option<JobId>,
    /// What is wrong, without the line number.
    pub reason: String,
}

impl Invalid {
    fn new(id: Option<JobId>, reason: impl Into<String>) -> Invalid {
        Invalid {
            id,
            reason: reason.into(),
        }
    }

    /// The message for results and stderr.
    pub fn message(&self, number: u64) -> String {
        format!("input line {number}: {}", self.reason)
    }
}

/// The id of a line that is not valid JSON, when the line starts with it: `{"id": <string or
/// integer>,` read as JSON up to that comma, so the error after it (an unescaped quote in the
/// prompt, say) still reaches the job's result and shard. Anything less certain gives `None`.
fn leading_id(text: &str) -> Option<JobId> {
    let rest = text.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest
        .strip_prefix("\"id\"")?
        .trim_start()
        .strip_prefix(':')?;
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    let value = values.next()?.ok()?;
    let after = rest.get(values.byte_offset()..)?.trim_start();
    if !after.starts_with(',') {
        return None;
    }
    JobId::from_value(&value).ok()
}

/// A job line as JSON: its top-level object with every key given once (serde_json's own map
/// keeps the last of two, so `{"id":"a","id":"b"}` would silently run as job b), or any other
/// value (refused with its kind).
enum Top {
    Object(Map<String, Value>),
    Other(Value),
}

/// How a repeated key is reported by [`Top`]'s parser, before the key's name.
const DUPLICATE: &str = "duplicate field ";

impl<'de> serde::Deserialize<'de> for Top {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Top, D::Error> {
        d.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl<'de> serde::de::Visitor<'de> for TopVisitor {
    type Value = Top;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("{DUPLICATE}{key:?}")));
            }
            let value: Value = map.next_value()?;
            obj.insert(key, value);
        }
        Ok(Top::Object(obj))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            items.push(v);
        }
        Ok(Top::Other(Value::Array(items)))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Top, E> {
        Ok(Top::Other(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Top, E> {
        Ok(Top::Other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Top, E> {
        Ok(Top::Other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Top, E> {
        Ok(Top::Other(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Top, E> {
        Ok(Top::Other(Value::from(v)))
    }

    fn visit_unit<E>(self) -> Result<Top, E> {
        Ok(Top::Other(Value::Null))
    }
}

/// Parses one non-blank job line (without its `\n`; a leading BOM already removed).
pub fn parse_line(line: &[u8]) -> Result<JobSpec, Invalid> {
    let text = std::str::from_utf8(line).map_err(|e| {
        Invalid::new(
            None,
            format!(
                "not UTF-8 text (first invalid byte at column {})",
                e.valid_up_to() + 1
            ),
        )
    })?;
    let top: Top = serde_json::from_str(text).map_err(|e| {
        // serde says "at line 1 column 5"; the file's line number is ours to give.
        let full = e.to_string();
        let what = full
            .rsplit_once(" at line ")
            .map_or(full.as_str(), |(m, _)| m);
        if let Some(field) = what.strip_prefix(DUPLICATE) {
            // Which of two ids would be the job's is anyone's guess: neither is used.
            let id = (field != "\"id\"").then(|| leading_id(text)).flatten();
            return Invalid::new(
                id,
                format!(
                    "field {field} is given twice (at column {} of that line); give each \
                     field once",
                    e.column()
                ),
            );
        }
        Invalid::new(
            leading_id(text),
            format!(
                "not valid JSON: {what} at column {} of that line",
                e.column()
            ),
        )
    })?;
    let mut obj = match top {
        Top::Object(obj) => obj,
        Top::Other(value) => {
            return Err(Invalid::new(
                None,
                format!("a job must be a JSON object (got {})", kind(&value)),
            ));
        }
    };
    let id = match obj.get("id") {
        None => return Err(Invalid::new(None, "\"id\" is missing")),
        Some(v) => JobId::from_value(v).map_err(|e| Invalid::new(None, e.to_string()))?,
    };
    let fail = |reason: String| Invalid::new(Some(id.clone()), reason);
    if let Some(key) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(fail(format!(
            "unknown field {key:?} (a job has {})",
            FIELDS.join(", ")
        )));
    }
    let prompt = match obj.remove("prompt") {
        None => return Err(fail("\"prompt\" is missing".to_string())),
        Some(Value::String(p)) if p.trim().is_empty() => {
            return Err(fail("\"prompt\" is empty".to_string()));
        }
        Some(Value::String(p)) => p,
        Some(other) => {
            return Err(fail(format!(
                "\"prompt\" must be a string (got {})",
                kind(&other)
            )));
        }
    };
    let files = files(&mut obj).map_err(fail)?;
    let system = match obj.remove("system") {
        None => None,
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err(fail(
                "\"system\" is empty (leave it out for the default)".to_string(),
            ));
        }
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            return Err(fail(format!(
                "\"system\" must be a string (got {})",
                kind(&other)
            )));
        }
    };
    let tools = tools(&mut obj).map_err(fail)?;
    let schema = match obj.remove("schema") {
        None => None,
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err(fail(
                "\"schema\" is empty (leave it out for --output-schema)".to_string(),
            ));
        }
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            return Err(fail(format!(
                "\"schema\" must be a string: the path of a JSON Schema file (got {})",
                kind(&other)
            )));
        }
    };
    Ok(JobSpec {
        id,
        prompt,
        files,
        system,
        tools,
        schema,
    })
}

fn strings(field: &str, v: Value) -> Result<Vec<String>, String> {
    let Value::Array(items) = v else {
        return Err(format!(
            "\"{field}\" must be a list of strings (got {})",
            kind(&v)
        ));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s),
            other => Err(format!(
                "{field}[{i}] must be a string (got {})",
                kind(&other)
            )),
        })
        .collect()
}

fn files(obj: &mut Map<String, Value>) -> Result<Vec<String>, String> {
    let Some(v) = obj.remove("files") else {
        return Ok(Vec::new());
    };
    let files = strings("files", v)?;
    for (i, f) in files.iter().enumerate() {
        if f.is_empty() {
            return Err(format!("files[{i}] is empty (@file requires a path)"));
        }
        if f == crate::attach::STDIN {
            return Err(format!(
                "files[{i}] is \"-\": a batch job cannot attach standard input (it may be the \
                 job list itself); name a file"
            ));
        }
    }
    Ok(files)
}

fn tools(obj: &mut Map<String, Value>) -> Result<Option<Vec<String>>, String> {
    let Some(v) = obj.remove("tools") else {
        return Ok(None);
    };
    let tools = strings("tools", v)?;
    for (i, t) in tools.iter().enumerate() {
        if t.trim().is_empty() {
            return Err(format!("tools[{i}] is empty"));
        }
        if t.contains(',') {
            return Err(format!(
                "tools[{i}] {t:?} contains a comma (list each tool on its own)"
            ));
        }
    }
    Ok(Some(tools))
}

/// `a string`, `an array`… for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The batch's exit code from its jobs' codes: an interrupt wins, then the budget (the batch
/// stopped with jobs left), then a timeout, then any input/Pi error, then any exhausted job.
pub fn batch_exit(codes: &[Exit], interrupted: Option<Interrupt>) -> Exit {
    if let Some(sig) = interrupted {
        return sig.exit();
    }
    for worst in [
        Exit::OverBudget,
        Exit::Timeout,
        Exit::Error,
        Exit::Exhausted,
    ] {
        if codes.contains(&worst) {
            return worst;
        }
    }
    Exit::Success
}

/// Folds one more job's code into the batch's code so far (same precedence as [`batch_exit`],
/// without keeping every code).
pub fn worse(so_far: Exit, next: Exit) -> Exit {
    let rank = |e: Exit| match e {
        Exit::Success => 0,
        Exit::Exhausted => 1,
        Exit::Error => 2,
        Exit::Timeout => 3,
        Exit::OverBudget => 4,
        Exit::Interrupted | Exit::Terminated => 5,
    };
    if rank(next) > rank(so_far) {
        next
    } else {
        so_far
    }
}

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
