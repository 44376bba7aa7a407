//! Pi RPC wire types: commands we send, and the responses and events Pi writes. serde only.
//! Parsing is lenient: unknown event types become [`Incoming::Unknown`], unknown fields and
//! roles are ignored, so Pi 0.84.4 and 1.6.0 both fit. A line is parsed once, straight from
//! its bytes into these types, skipping what the runner does not use (see "Deserialization").

pub mod codec;
pub mod pending;

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A field whose value has an unexpected type (a float where an integer was seen, `null`
/// where a string was seen) takes its default instead of making the whole line "malformed":
/// Pi's events are not a versioned schema, and a progress detail must never end a run.
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let v = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

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

/// `{"type":"response", ...}`. Deserializes leniently, like [`Incoming`] (any object).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Response {
    pub id: Option<String>,
    pub command: String,
    pub success: bool,
    pub data: Option<Value>,
    pub error: Option<String>,
}

impl Response {
    /// The model list of a `get_available_models` answer; entries that do not parse are skipped.
    pub fn models(&self) -> Vec<crate::catalog::ModelInfo> {
        self.data
            .as_ref()
            .and_then(|d| d.get("models"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| serde_json::from_value(m.clone()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `data.cancelled` of `fork` / `new_session` answers.
    pub fn cancelled(&self) -> bool {
        self.data
            .as_ref()
            .and_then(|d| d.get("cancelled"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// A message inside `message_start` / `message_end`. Any JSON value deserializes: a field of an
/// unexpected type takes its default, and a value that is not an object is an empty message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    pub role: String,
    /// A string or an array of blocks. Kept for assistant messages only: for the others (the
    /// echoed prompt, with its attachments and base64 images) it is skipped while parsing and
    /// stays `Null`, when `role` comes first, as Pi writes it.
    pub content: Value,
    pub stop_reason: Option<String>,
    pub error_message: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// What Pi reports the call used (assistant messages); `None` when absent or not an object.
    pub usage: Option<Usage>,
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
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub total_tokens: u64,
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

/// Every line Pi writes on stdout. Deserializes from any JSON object with a string `type`,
/// leniently (see "Deserialization" below).
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Response(Response),
    AgentStart,
    TurnStart,
    TurnEnd {},
    MessageStart {
        message: Message,
    },
    MessageUpdate {},
    MessageEnd {
        message: Message,
    },
    ToolExecutionStart {},
    ToolExecutionUpdate {},
    ToolExecutionEnd {},
    AgentEnd {
        will_retry: bool,
    },
    AgentSettled {},
    AutoRetryStart {
        attempt: u32,
        delay_ms: u64,
        error_message: String,
    },
    AutoRetryEnd {
        success: bool,
    },
    CompactionStart {},
    CompactionEnd {},
    ExtensionUiRequest {
        id: String,
        method: String,
    },
    ExtensionError {
        error: String,
    },
    Unknown,
}

/// `get_fork_messages` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkMessage {
    pub entry_id: String,
    #[serde(default, deserialize_with = "lenient")]
    pub text: String,
}

// ----- deserialization ------------------------------------------------------------------
//
// One pass over the bytes, straight into the types above: no `Value` tree of the line is built
// and then converted. The leniency rules (Pi's events are not a versioned schema, and a
// progress detail must never end a run):
// - a field of an unexpected type (a float where a count was seen, `null` where a string was)
//   takes its default; an array or object in its place is skipped, not built;
// - unknown fields are skipped, an unknown `type` is `Incoming::Unknown`;
// - once `type` is known, fields its variant does not use are skipped unread (Pi writes `type`
//   first in events), and so is the `content` of a message whose `role` is not `assistant`;
// - a repeated key: the last one counts.
// Only invalid JSON, a line that is not an object, or one whose `type` is missing or not a
// string is an error. Skipped values are checked for JSON syntax only.

/// A value read whatever its JSON type: scalars are kept, anything else is skipped unbuilt.
#[derive(Debug, Default)]
enum Scalar {
    #[default]
    Other,
    Str(String),
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    fn string(self) -> Option<String> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }

    fn count(self) -> u64 {
        match self {
            Scalar::Uint(n) => n,
            Scalar::Int(n) => u64::try_from(n).unwrap_or(0),
            _ => 0,
        }
    }

    fn bool(self) -> bool {
        matches!(self, Scalar::Bool(true))
    }

    fn number(self) -> f64 {
        match self {
            Scalar::Uint(n) => n as f64,
            Scalar::Int(n) => n as f64,
            Scalar::Float(f) => f,
            _ => 0.0,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Uint(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u128<E>(self, v: u128) -> Result<Scalar, E> {
                Ok(u64::try_from(v).map_or(Scalar::Other, Scalar::Uint))
            }
            fn visit_i128<E>(self, v: i128) -> Result<Scalar, E> {
                Ok(i64::try_from(v).map_or(Scalar::Other, Scalar::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar::Str(v))
            }
            fn visit_bytes<E>(self, _: &[u8]) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_none<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
                Scalar::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Scalar::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// The field names of one object type (unknown names map to an `Other`).
trait Fields: Sized {
    fn named(name: &str) -> Self;
}

/// An object key, read as one of `F`'s fields without allocating.
struct Key<F>(F);

impl<'de, F: Fields> Deserialize<'de> for Key<F> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<F>, D::Error> {
        struct V<F>(PhantomData<F>);
        impl<'de, F: Fields> Visitor<'de> for V<F> {
            type Value = Key<F>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<F>, E> {
                Ok(Key(F::named(v)))
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Key<F>, E> {
                Ok(Key(F::named(std::str::from_utf8(v).unwrap_or_default())))
            }
        }
        d.deserialize_identifier(V(PhantomData))
    }
}

/// A type read from a JSON object; any other JSON value (skipped unbuilt) is its default.
trait FromObject: Default {
    fn from_object<'de, A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

/// Deserializes a [`FromObject`] type from any JSON value.
fn object_or_default<'de, D: Deserializer<'de>, T: FromObject>(d: D) -> Result<T, D::Error> {
    struct V<T>(PhantomData<T>);
    impl<'de, T: FromObject> Visitor<'de> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::from_object(map)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
            IgnoredAny.visit_seq(seq).map(|_| T::default())
        }
        fn visit_bool<E>(self, _: bool) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_u64<E>(self, _: u64) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_i64<E>(self, _: i64) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_u128<E>(self, _: u128) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_i128<E>(self, _: i128) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_f64<E>(self, _: f64) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_str<E>(self, _: &str) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_bytes<E>(self, _: &[u8]) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_unit<E>(self) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_none<E>(self) -> Result<T, E> {
            Ok(T::default())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            d.deserialize_any(self)
        }
    }
    d.deserialize_any(V(PhantomData))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MessageField {
    Role,
    Content,
    StopReason,
    ErrorMessage,
    Provider,
    Model,
    Usage,
    Other,
}

impl Fields for MessageField {
    fn named(name: &str) -> MessageField {
        match name {
            "role" => MessageField::Role,
            "content" => MessageField::Content,
            "stopReason" => MessageField::StopReason,
            "errorMessage" => MessageField::ErrorMessage,
            "provider" => MessageField::Provider,
            "model" => MessageField::Model,
            "usage" => MessageField::Usage,
            _ => MessageField::Other,
        }
    }
}

impl FromObject for Message {
    fn from_object<'de, A: MapAccess<'de>>(mut map: A) -> Result<Message, A::Error> {
        let mut m = Message::default();
        while let Some(Key(field)) = map.next_key::<Key<MessageField>>()? {
            let text = |s: Scalar| s.string();
            match field {
                MessageField::Role => m.role = text(map.next_value()?).unwrap_or_default(),
                MessageField::Content if !m.role.is_empty() && m.role != "assistant" => {
                    map.next_value::<IgnoredAny>()?;
                    m.content = Value::Null;
                }
                MessageField::Content => m.content = map.next_value()?,
                MessageField::StopReason => m.stop_reason = text(map.next_value()?),
                MessageField::ErrorMessage => m.error_message = text(map.next_value()?),
                MessageField::Provider => m.provider = text(map.next_value()?),
                MessageField::Model => m.model = text(map.next_value()?),
                MessageField::Usage => {
                    m.usage = map.next_value::<Lenient<Option<Usage>>>()?.0;
                }
                MessageField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
        object_or_default(d)
    }
}

/// A [`FromObject`] value read with [`object_or_default`].
struct Lenient<T>(T);

impl<'de, T: FromObject> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Lenient<T>, D::Error> {
        object_or_default(d).map(Lenient)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UsageField {
    Input,
    Output,
    CacheRead,
    CacheWrite,
    TotalTokens,
    Cost,
    Total,
    Other,
}

impl Fields for UsageField {
    fn named(name: &str) -> UsageField {
        match name {
            "input" => UsageField::Input,
            "output" => UsageField::Output,
            "cacheRead" => UsageField::CacheRead,
            "cacheWrite" => UsageField::CacheWrite,
            "totalTokens" => UsageField::TotalTokens,
            "cost" => UsageField::Cost,
            "total" => UsageField::Total,
            _ => UsageField::Other,
        }
    }
}

/// `usage`: present (an object) or not.
impl FromObject for Option<Usage> {
    fn from_object<'de, A: MapAccess<'de>>(mut map: A) -> Result<Option<Usage>, A::Error> {
        let mut u = Usage::default();
        while let Some(Key(field)) = map.next_key::<Key<UsageField>>()? {
            match field {
                UsageField::Input => u.input = map.next_value::<Scalar>()?.count(),
                UsageField::Output => u.output = map.next_value::<Scalar>()?.count(),
                UsageField::CacheRead => u.cache_read = map.next_value::<Scalar>()?.count(),
                UsageField::CacheWrite => u.cache_write = map.next_value::<Scalar>()?.count(),
                UsageField::TotalTokens => u.total_tokens = map.next_value::<Scalar>()?.count(),
                UsageField::Cost => u.cost = map.next_value::<Lenient<Cost>>()?.0.total(),
                UsageField::Total | UsageField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(u))
    }
}

/// `usage.cost`: its `total`, or the sum of its parts when there is none.
#[derive(Debug, Default)]
struct Cost {
    total: Option<f64>,
    parts: f64,
}

impl Cost {
    fn total(self) -> f64 {
        self.total.unwrap_or(self.parts)
    }
}

impl FromObject for Cost {
    fn from_object<'de, A: MapAccess<'de>>(mut map: A) -> Result<Cost, A::Error> {
        // Per part, the last value counts (as for every repeated key).
        let mut parts = [0.0; 4];
        let mut total = None;
        while let Some(Key(field)) = map.next_key::<Key<UsageField>>()? {
            let slot = match field {
                UsageField::Input => &mut parts[0],
                UsageField::Output => &mut parts[1],
                UsageField::CacheRead => &mut parts[2],
                UsageField::CacheWrite => &mut parts[3],
                UsageField::Total => {
                    total = Some(map.next_value::<Scalar>()?.number());
                    continue;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value::<Scalar>()?.number();
        }
        Ok(Cost {
            total,
            parts: parts.iter().sum(),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineField {
    Type,
    Id,
    Command,
    Success,
    Data,
    Error,
    Message,
    WillRetry,
    Attempt,
    DelayMs,
    ErrorMessage,
    Method,
    Other,
}

impl Fields for LineField {
    fn named(name: &str) -> LineField {
        match name {
            "type" => LineField::Type,
            "id" => LineField::Id,
            "command" => LineField::Command,
            "success" => LineField::Success,
            "data" => LineField::Data,
            "error" => LineField::Error,
            "message" => LineField::Message,
            "willRetry" => LineField::WillRetry,
            "attempt" => LineField::Attempt,
            "delayMs" => LineField::DelayMs,
            "errorMessage" => LineField::ErrorMessage,
            "method" => LineField::Method,
            _ => LineField::Other,
        }
    }
}

/// Every field any line of Pi's can carry that the runner reads, gathered in one pass.
#[derive(Debug, Default)]
struct Raw {
    /// The last `type` if it was a string.
    kind: Option<String>,
    id: Option<String>,
    command: String,
    success: bool,
    data: Option<Value>,
    error: Option<String>,
    message: Message,
    will_retry: bool,
    attempt: u32,
    delay_ms: u64,
    error_message: String,
    method: String,
}

impl Raw {
    /// Whether the line type `kind` uses `field`; the others need not be read at all.
    fn uses(kind: &str, field: LineField) -> bool {
        match field {
            LineField::Type => true,
            LineField::Id => matches!(kind, "response" | "extension_ui_request"),
            LineField::Command | LineField::Data => kind == "response",
            LineField::Success => matches!(kind, "response" | "auto_retry_end"),
            LineField::Error => matches!(kind, "response" | "extension_error"),
            LineField::Message => matches!(kind, "message_start" | "message_end"),
            LineField::WillRetry => kind == "agent_end",
            LineField::Attempt | LineField::DelayMs | LineField::ErrorMessage => {
                kind == "auto_retry_start"
            }
            LineField::Method => kind == "extension_ui_request",
            LineField::Other => false,
        }
    }

    fn into_response(self) -> Response {
        Response {
            id: self.id,
            command: self.command,
            success: self.success,
            data: self.data,
            error: self.error,
        }
    }

    fn into_incoming(self, kind: &str) -> Incoming {
        match kind {
            "response" => Incoming::Response(self.into_response()),
            "agent_start" => Incoming::AgentStart,
            "turn_start" => Incoming::TurnStart,
            "turn_end" => Incoming::TurnEnd {},
            "message_start" => Incoming::MessageStart {
                message: self.message,
            },
            "message_update" => Incoming::MessageUpdate {},
            "message_end" => Incoming::MessageEnd {
                message: self.message,
            },
            "tool_execution_start" => Incoming::ToolExecutionStart {},
            "tool_execution_update" => Incoming::ToolExecutionUpdate {},
            "tool_execution_end" => Incoming::ToolExecutionEnd {},
            "agent_end" => Incoming::AgentEnd {
                will_retry: self.will_retry,
            },
            "agent_settled" => Incoming::AgentSettled {},
            "auto_retry_start" => Incoming::AutoRetryStart {
                attempt: self.attempt,
                delay_ms: self.delay_ms,
                error_message: self.error_message,
            },
            "auto_retry_end" => Incoming::AutoRetryEnd {
                success: self.success,
            },
            "compaction_start" => Incoming::CompactionStart {},
            "compaction_end" => Incoming::CompactionEnd {},
            "extension_ui_request" => Incoming::ExtensionUiRequest {
                id: self.id.unwrap_or_default(),
                method: self.method,
            },
            "extension_error" => Incoming::ExtensionError {
                error: self.error.unwrap_or_default(),
            },
            _ => Incoming::Unknown,
        }
    }
}

/// Reads a line object into [`Raw`]. With `skip_unused`, fields the line's type does not use
/// are skipped once the type is known.
struct RawVisitor {
    skip_unused: bool,
}

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut raw = Raw::default();
        while let Some(Key(field)) = map.next_key::<Key<LineField>>()? {
            let unused = match (&raw.kind, self.skip_unused) {
                (Some(kind), true) => !Raw::uses(kind, field),
                _ => field == LineField::Other,
            };
            if unused {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let mut scalar = || map.next_value::<Scalar>();
            match field {
                LineField::Type => raw.kind = scalar()?.string(),
                LineField::Id => raw.id = scalar()?.string(),
                LineField::Command => raw.command = scalar()?.string().unwrap_or_default(),
                LineField::Success => raw.success = scalar()?.bool(),
                LineField::Error => raw.error = scalar()?.string(),
                LineField::WillRetry => raw.will_retry = scalar()?.bool(),
                LineField::Attempt => {
                    raw.attempt = u32::try_from(scalar()?.count()).unwrap_or(0);
                }
                LineField::DelayMs => raw.delay_ms = scalar()?.count(),
                LineField::ErrorMessage => {
                    raw.error_message = scalar()?.string().unwrap_or_default();
                }
                LineField::Method => raw.method = scalar()?.string().unwrap_or_default(),
                LineField::Data => raw.data = map.next_value()?,
                LineField::Message => raw.message = map.next_value()?,
                LineField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(raw)
    }
}

impl<'de> Deserialize<'de> for Incoming {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Incoming, D::Error> {
        let mut raw = d.deserialize_map(RawVisitor { skip_unused: true })?;
        let kind = raw
            .kind
            .take()
            .ok_or_else(|| de::Error::custom("no string `type`"))?;
        Ok(raw.into_incoming(&kind))
    }
}

impl<'de> Deserialize<'de> for Response {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Response, D::Error> {
        d.deserialize_map(RawVisitor { skip_unused: false })
            .map(Raw::into_response)
    }
}

/// The event a line of type `kind` stands for when its payload is not read (a line too long
/// to hold): every field at its default, so a message is not an assistant's.
pub(crate) fn event_without_payload(kind: &str) -> Incoming {
    Raw::default().into_incoming(kind)
}

/// The `type` of a JSON object of which only the first bytes are at hand, when it can be
/// told from them: the keys before it are skipped (Pi writes `id` before `type` in responses).
pub(crate) fn sniff_type(prefix: &[u8]) -> Option<String> {
    struct Sniff<'a>(&'a mut Option<String>);
    impl<'de> Visitor<'de> for Sniff<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(Key(field)) = map.next_key::<Key<LineField>>()? {
                if field == LineField::Type {
                    *self.0 = map.next_value::<Scalar>()?.string();
                    return Ok(());
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    let mut kind = None;
    // The cut-off text makes the parse fail after `type` was seen; what was seen is kept.
    let _ = serde_json::Deserializer::from_slice(prefix).deserialize_map(Sniff(&mut kind));
    kind
}

#[cfg(test)]
mod tests;
