//! Pi RPC wire types: commands we send, and the responses and events Pi writes, with typed
//! views of the response payloads the runner reads. serde only. Parsing is lenient: unknown
//! event types become [`Incoming::Unknown`], unknown fields and roles are ignored, so Pi 0.84.4
//! and 1.6.0 both fit. A line is parsed once, straight from its bytes into these types,
//! skipping what the runner does not use (see "what Pi writes" below, and `de`).

pub mod codec;
mod de;
pub mod pending;

use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::ModelInfo;

/// An image in a `prompt` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageContent {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// base64 without a `data:` prefix
    pub data: String,
    #[serde(rename = "mimeType")]
    pub mime_type: String,
}

impl ImageContent {
    pub fn new(data: String, mime_type: impl Into<String>) -> ImageContent {
        ImageContent {
            kind: "image",
            data,
            mime_type: mime_type.into(),
        }
    }
}

/// Commands the runner sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    GetState,
    GetAvailableModels,
    Prompt {
        message: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImageContent>,
    },
    Abort,
    AbortRetry,
    SetModel {
        provider: String,
        #[serde(rename = "modelId")]
        model_id: String,
    },
    SetThinkingLevel {
        level: String,
    },
    GetForkMessages,
    Fork {
        #[serde(rename = "entryId")]
        entry_id: String,
    },
    NewSession,
    /// Answers an extension dialog we cannot show (there is no user to ask).
    ExtensionUiResponse {
        id: String,
        cancelled: bool,
    },
}

impl Command {
    pub fn name(&self) -> &'static str {
        match self {
            Command::GetState => "get_state",
            Command::GetAvailableModels => "get_available_models",
            Command::Prompt { .. } => "prompt",
            Command::Abort => "abort",
            Command::AbortRetry => "abort_retry",
            Command::SetModel { .. } => "set_model",
            Command::SetThinkingLevel { .. } => "set_thinking_level",
            Command::GetForkMessages => "get_fork_messages",
            Command::Fork { .. } => "fork",
            Command::NewSession => "new_session",
            Command::ExtensionUiResponse { .. } => "extension_ui_response",
        }
    }
}

/// A command with its correlation id, as written on the wire.
#[derive(Debug, Serialize)]
pub struct Envelope<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    #[serde(flatten)]
    pub command: &'a Command,
}

// ----- what Pi writes -----------------------------------------------------------------------
//
// Said once, with serde's derive; `de` supplies the two things the derive does not: leniency
// (`de::lenient`) and tags read in place (`de::ByTag`). The rules, since Pi's events are not a
// versioned schema and a progress detail must never end a run:
// - a field of an unexpected type takes its default (an array or object in its place is
//   skipped, not built); an unknown field is skipped, an unknown `type` is `Incoming::Unknown`;
// - a field its line's type does not use is skipped unread, and so is the `content` of a
//   message whose `role`, read first as Pi writes it, is not `assistant`;
// - entries before the tag (`type`, `role`) are read as values first: Pi writes the tag first,
//   or right after `id` in responses;
// - a repeated key (which Pi's `JSON.stringify` cannot write): the first `type` chooses the
//   variant; a field the runner reads (`role` included), given twice, makes the line
//   malformed, as with any derive; other repeated keys are skipped like any unknown one.
// Only invalid JSON, a line that is not an object, or one whose `type` is missing or not a
// string is an error; a skipped value is checked for JSON syntax only.

/// `{"type":"response", ...}`. Deserializes leniently, like [`Incoming`] (any object). The
/// payloads the runner reads are typed by [`Response::state`] and its siblings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Response {
    #[serde(deserialize_with = "de::lenient")]
    pub id: Option<String>,
    #[serde(deserialize_with = "de::lenient")]
    pub command: String,
    #[serde(deserialize_with = "de::lenient")]
    pub success: bool,
    /// Its shape depends on `command`. Responses are small (the largest, a
    /// `get_fork_messages`, holds the prompt's text), and the typed views read from this tree.
    pub data: Option<Value>,
    #[serde(deserialize_with = "de::lenient")]
    pub error: Option<String>,
}

impl Response {
    /// `data` as `T`; `None` when there is none, or it is not an object `T` reads.
    fn payload<'a, T: Deserialize<'a>>(&'a self) -> Option<T> {
        // A derived struct would also read an array, positionally: never Pi's.
        let data = self.data.as_ref().filter(|d| d.is_object())?;
        T::deserialize(data).ok()
    }

    /// A `get_state` answer, when its model is one (see [`State`]).
    pub fn state(&self) -> Option<State> {
        self.payload()
    }

    /// The model list of a `get_available_models` answer; entries that do not parse are skipped.
    pub fn models(&self) -> Vec<ModelInfo> {
        #[derive(Deserialize)]
        struct Models {
            models: Vec<MaybeParsed<ModelInfo>>,
        }
        self.payload::<Models>()
            .map(|m| m.models.into_iter().filter_map(|p| p.0).collect())
            .unwrap_or_default()
    }

    /// `data.disposition` of a `prompt` answer (Pi 1.6.0; 0.84.4 sends no data).
    pub fn disposition(&self) -> Option<Disposition> {
        #[derive(Deserialize)]
        struct PromptData {
            #[serde(default, deserialize_with = "de::lenient")]
            disposition: Option<Disposition>,
        }
        self.payload::<PromptData>()?.disposition
    }

    /// The user messages of a `get_fork_messages` answer, oldest first; none when any of them
    /// does not parse (the last one is the one to fork from, and it must be the last).
    pub fn fork_messages(&self) -> Vec<ForkMessage> {
        #[derive(Deserialize)]
        struct ForkMessages {
            messages: Vec<ForkMessage>,
        }
        self.payload::<ForkMessages>()
            .map(|f| f.messages)
            .unwrap_or_default()
    }

    /// `data.cancelled` of `fork` / `new_session` answers.
    pub fn cancelled(&self) -> bool {
        #[derive(Deserialize)]
        struct Cancellable {
            #[serde(default, deserialize_with = "de::lenient")]
            cancelled: bool,
        }
        self.payload::<Cancellable>().is_some_and(|c| c.cancelled)
    }
}

/// What the runner reads of a `get_state` answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// The current model. An answer whose model does not parse as one is no state at all.
    pub model: ModelInfo,
    /// Pi's thinking level for it (`"off"`, `"high"`, …), when it is a string.
    #[serde(default, deserialize_with = "de::lenient")]
    pub thinking_level: Option<String>,
}

/// What Pi did with a prompt it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// A run started; its events follow.
    Started,
    /// Queued behind a run in progress.
    Queued,
    /// An extension took it: no run, no answer.
    Handled,
    #[serde(other)]
    Unknown,
}

/// `get_fork_messages` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkMessage {
    pub entry_id: String,
    #[serde(default, deserialize_with = "de::lenient")]
    pub text: String,
}

/// A list entry that is `None` when it does not parse as `T`, so one odd entry does not hide
/// the others. Entries are small (a model's description); each is held as a value to try.
struct MaybeParsed<T>(Option<T>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for MaybeParsed<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MaybeParsed<T>, D::Error> {
        let value = Value::deserialize(d)?;
        Ok(MaybeParsed(T::deserialize(value).ok()))
    }
}

/// A message inside `message_start` / `message_end`. Any JSON value deserializes: a field of an
/// unexpected type takes its default, and a value that is not an object is an empty message.
///
/// The derive (`remote = "Self"`) is the inherent `Message::deserialize`, which reads every
/// field; the [`Deserialize`] impl reads `role` first to skip the content of other roles.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase", default)]
pub struct Message {
    #[serde(deserialize_with = "de::lenient")]
    pub role: String,
    /// A string or an array of blocks. Kept for assistant messages only: for the others (the
    /// echoed prompt, with its attachments and base64 images) it is skipped while parsing and
    /// stays `Null`, when `role` comes first, as Pi writes it.
    pub content: Value,
    #[serde(deserialize_with = "de::lenient")]
    pub stop_reason: Option<String>,
    #[serde(deserialize_with = "de::lenient")]
    pub error_message: Option<String>,
    #[serde(deserialize_with = "de::lenient")]
    pub provider: Option<String>,
    #[serde(deserialize_with = "de::lenient")]
    pub model: Option<String>,
    /// What Pi reports the call used (assistant messages); `None` when absent or not an object.
    #[serde(deserialize_with = "de::lenient")]
    pub usage: Option<Usage>,
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
        fn skip(role: &str) -> Option<&'static str> {
            (!role.is_empty() && role != "assistant").then_some("content")
        }
        // The inherent, derived function.
        Message::deserialize(de::ByTag::new(d, "role").skipping(skip))
    }
}

impl Message {
    /// The concatenated text blocks (content may be a string or a block array).
    pub fn text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    }
}

/// Tokens and cost of one model call, as Pi reports them on an assistant message:
/// `{"input":N,"output":N,"cacheRead":N,"cacheWrite":N,"totalTokens":N,"cost":{…,"total":f}}`.
/// A count that is not a non-negative integer reads as 0; `cost` is `cost.total` (or the sum
/// of its parts when Pi gives no total).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    #[serde(deserialize_with = "de::lenient")]
    pub input: u64,
    #[serde(deserialize_with = "de::lenient")]
    pub output: u64,
    #[serde(deserialize_with = "de::lenient")]
    pub cache_read: u64,
    #[serde(deserialize_with = "de::lenient")]
    pub cache_write: u64,
    #[serde(deserialize_with = "de::lenient")]
    pub total_tokens: u64,
    #[serde(deserialize_with = "Cost::total_of")]
    pub cost: f64,
}

impl Usage {
    /// Adds another call's usage (counts saturate).
    pub fn add(&mut self, other: &Usage) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.cost += other.cost;
    }
}

/// `usage.cost`: its `total`, or the sum of its parts when there is none.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Cost {
    #[serde(deserialize_with = "de::lenient")]
    input: f64,
    #[serde(deserialize_with = "de::lenient")]
    output: f64,
    #[serde(deserialize_with = "de::lenient")]
    cache_read: f64,
    #[serde(deserialize_with = "de::lenient")]
    cache_write: f64,
    /// A total of the wrong type is 0, not the sum: Pi said what the total is.
    #[serde(deserialize_with = "de::lenient_present")]
    total: Option<f64>,
}

impl Cost {
    /// `usage.cost` read leniently (not an object: 0), as its total.
    fn total_of<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        let cost: Cost = de::lenient(d)?;
        // Nothing costs less than nothing: a provider reporting negative tokens (Pi prices
        // them as they come) must not make a negative cost, which would lower a batch's total
        // and free budget that was spent (issue 29). A negative part counts as 0; a negative
        // total is not believed, the parts are.
        let part = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        let parts =
            part(cost.input) + part(cost.output) + part(cost.cache_read) + part(cost.cache_write);
        Ok(match cost.total {
            Some(t) if t.is_finite() && t >= 0.0 => t,
            Some(_) => parts,
            None => parts,
        })
    }
}

/// Every line Pi writes on stdout. Deserializes from any JSON object with a string `type`,
/// leniently (see "what Pi writes" above).
///
/// The derive (`remote = "Self"`) is the inherent `Incoming::deserialize`, which reads the
/// variants externally tagged; the [`Deserialize`] impl reads Pi's `{"type":…}` objects with
/// it. Always deserialize through the trait (`serde_json::from_slice`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    remote = "Self",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Incoming {
    Response(Response),
    AgentStart,
    TurnStart,
    TurnEnd {},
    MessageStart {
        #[serde(default, deserialize_with = "de::lenient")]
        message: Message,
    },
    MessageUpdate {},
    MessageEnd {
        #[serde(default, deserialize_with = "de::lenient")]
        message: Message,
    },
    ToolExecutionStart {},
    ToolExecutionUpdate {},
    ToolExecutionEnd {},
    AgentEnd {
        #[serde(default, deserialize_with = "de::lenient")]
        will_retry: bool,
    },
    AgentSettled {},
    AutoRetryStart {
        #[serde(default, deserialize_with = "de::lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "de::lenient")]
        delay_ms: u64,
        #[serde(default, deserialize_with = "de::lenient")]
        error_message: String,
    },
    AutoRetryEnd {
        #[serde(default, deserialize_with = "de::lenient")]
        success: bool,
    },
    CompactionStart {},
    CompactionEnd {},
    ExtensionUiRequest {
        #[serde(default, deserialize_with = "de::lenient")]
        id: String,
        #[serde(default, deserialize_with = "de::lenient")]
        method: String,
    },
    ExtensionError {
        #[serde(default, deserialize_with = "de::lenient")]
        error: String,
    },
    #[serde(other)]
    Unknown,
}

impl<'de> Deserialize<'de> for Incoming {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Incoming, D::Error> {
        // The inherent, derived function.
        Incoming::deserialize(de::ByTag::new(d, "type"))
    }
}

/// The event a line of type `kind` stands for when its payload is not read (a line too long
/// to hold): every field at its default, so a message is not an assistant's.
pub(crate) fn event_without_payload(kind: &str) -> Incoming {
    serde_json::from_value(serde_json::json!({ "type": kind })).unwrap_or(Incoming::Unknown)
}

/// The `type` of a JSON object of which only the first bytes are at hand, when it can be
/// told from them (Pi writes `id` before `type` in responses).
pub(crate) fn sniff_type(prefix: &[u8]) -> Option<String> {
    de::sniff(prefix, "type")
}

#[cfg(test)]
mod tests;
