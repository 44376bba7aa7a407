//! Pi RPC wire types: commands we send, and the responses and events Pi writes. serde only.
//! Parsing is lenient: unknown event types become [`Incoming::Unknown`], unknown fields and
//! roles are ignored, so Pi 0.84.4 and 1.6.0 both fit.

pub mod codec;
pub mod pending;

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

/// `{"type":"response", ...}`
#[derive(Debug, Clone, Deserialize)]
pub struct Response {
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub command: String,
    #[serde(default, deserialize_with = "lenient")]
    pub success: bool,
    #[serde(default, deserialize_with = "lenient")]
    pub data: Option<Value>,
    #[serde(default, deserialize_with = "lenient")]
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

/// A message inside `message_start` / `message_end` / `turn_end`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Message {
    #[serde(deserialize_with = "lenient")]
    pub role: String,
    pub content: Value,
    #[serde(deserialize_with = "lenient")]
    pub stop_reason: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub error_message: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub provider: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub model: Option<String>,
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

/// Every line Pi writes on stdout.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Incoming {
    Response(Response),
    AgentStart,
    TurnStart,
    TurnEnd {},
    MessageStart {
        #[serde(default, deserialize_with = "lenient")]
        message: Message,
    },
    MessageUpdate {},
    MessageEnd {
        #[serde(default, deserialize_with = "lenient")]
        message: Message,
    },
    ToolExecutionStart {},
    ToolExecutionUpdate {},
    ToolExecutionEnd {},
    AgentEnd {
        #[serde(default, deserialize_with = "lenient", rename = "willRetry")]
        will_retry: bool,
    },
    AgentSettled {},
    AutoRetryStart {
        #[serde(default, deserialize_with = "lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "lenient", rename = "delayMs")]
        delay_ms: u64,
        #[serde(default, deserialize_with = "lenient", rename = "errorMessage")]
        error_message: String,
    },
    AutoRetryEnd {
        #[serde(default, deserialize_with = "lenient")]
        success: bool,
    },
    CompactionStart {},
    CompactionEnd {},
    ExtensionUiRequest {
        #[serde(default, deserialize_with = "lenient")]
        id: String,
        #[serde(default, deserialize_with = "lenient")]
        method: String,
    },
    ExtensionError {
        #[serde(default, deserialize_with = "lenient")]
        error: String,
    },
    #[serde(other)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Incoming {
        serde_json::from_str(line).expect("parses")
    }

    #[test]
    fn commands_serialise_like_pi_expects() {
        let cmd = Command::SetModel {
            provider: "fake-b".into(),
            model_id: "beta-1".into(),
        };
        let line = serde_json::to_string(&Envelope {
            id: Some("7"),
            command: &cmd,
        })
        .unwrap();
        assert_eq!(
            line,
            r#"{"id":"7","type":"set_model","provider":"fake-b","modelId":"beta-1"}"#
        );
        let p = Command::Prompt {
            message: "hi".into(),
            images: vec![],
        };
        let line = serde_json::to_string(&Envelope {
            id: Some("1"),
            command: &p,
        })
        .unwrap();
        assert_eq!(line, r#"{"id":"1","type":"prompt","message":"hi"}"#);
    }

    #[test]
    fn unexpected_field_types_do_not_break_a_line() {
        let Incoming::AutoRetryStart {
            delay_ms,
            error_message,
            ..
        } = parse(
            r#"{"type":"auto_retry_start","attempt":1.0,"delayMs":1500.5,"errorMessage":"429: x"}"#,
        )
        else {
            panic!("not auto_retry_start")
        };
        assert_eq!((delay_ms, error_message.as_str()), (0, "429: x"));
        let Incoming::MessageEnd { message } = parse(
            r#"{"type":"message_end","message":{"role":"assistant","content":"hi","stopReason":"stop","errorMessage":null,"model":7}}"#,
        ) else {
            panic!("not message_end")
        };
        assert_eq!(message.text(), "hi");
        assert_eq!(message.model, None);
        assert!(matches!(
            parse(r#"{"type":"agent_end","willRetry":"yes"}"#),
            Incoming::AgentEnd { will_retry: false }
        ));
    }

    #[test]
    fn events_of_both_versions_parse() {
        assert!(matches!(
            parse(r#"{"type":"agent_settled"}"#),
            Incoming::AgentSettled {}
        ));
        assert!(matches!(
            parse(r#"{"type":"agent_settled","aborted":false}"#),
            Incoming::AgentSettled {}
        ));
        assert!(matches!(
            parse(r#"{"type":"brand_new_event","x":1}"#),
            Incoming::Unknown
        ));
        let Incoming::MessageEnd { message } = parse(
            r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"Hello "},{"type":"text","text":"world"}],"stopReason":"stop","durationMs":3}}"#,
        ) else {
            panic!("not a message_end")
        };
        assert_eq!(message.text(), "Hello world");
        assert_eq!(message.stop_reason.as_deref(), Some("stop"));
        let Incoming::MessageStart { message } = parse(
            r#"{"type":"message_start","message":{"role":"system","content":"","sections":{}}}"#,
        ) else {
            panic!("not a message_start")
        };
        assert_eq!(message.role, "system");
        let Incoming::Response(r) =
            parse(r#"{"type":"response","command":"parse","success":false,"error":"bad"}"#)
        else {
            panic!("not a response")
        };
        assert!(r.id.is_none() && !r.success);
    }
}
