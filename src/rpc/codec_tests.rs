//! Framing and decoding of what Pi writes, including random-input properties.

use super::*;

#[tokio::test(flavor = "current_thread")]
async fn splits_on_newline_only_and_strips_cr() {
    let data = "{\"type\":\"agent_start\"}\r\n\n{\"type\":\"message_end\",\"message\":{\"role\":\"assistant\",\"content\":\"a\u{2028}b\"}}\n{\"type\":\"agent_settled\"}";
    let mut r = tokio::io::BufReader::new(data.as_bytes());
    let mut buf = Decoder::default();
    assert!(matches!(
        read_incoming(&mut r, &mut buf).await,
        Ok(Some(Incoming::AgentStart))
    ));
    let Ok(Some(Incoming::MessageEnd { message })) = read_incoming(&mut r, &mut buf).await else {
        panic!("expected message_end")
    };
    assert_eq!(message.text(), "a\u{2028}b");
    // The last line has no newline: a truncated write, ignored.
    assert!(matches!(read_incoming(&mut r, &mut buf).await, Ok(None)));
}

/// A line that arrives in pieces survives the read being cancelled in between.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_read_keeps_the_partial_line() {
    use tokio::io::AsyncWriteExt;
    let (mut tx, rx) = tokio::io::duplex(64);
    let mut reader = tokio::io::BufReader::new(rx);
    let mut buf = Decoder::default();
    tx.write_all(b"{\"type\":\"agent_").await.unwrap();
    let first = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        read_incoming(&mut reader, &mut buf),
    )
    .await;
    assert!(first.is_err(), "no whole line yet: the read is cancelled");
    tx.write_all(b"settled\"}\n").await.unwrap();
    let msg = read_incoming(&mut reader, &mut buf).await.unwrap();
    assert!(matches!(msg, Some(Incoming::AgentSettled {})), "{msg:?}");
}

#[test]
fn malformed_lines_are_errors() {
    for bad in [
        "this is not json",
        "[1,2]",
        "{\"no_type\":1}",
        "{\"type\":5}",
    ] {
        assert!(
            matches!(decode(bad.as_bytes()), Some(Err(ReadError::Malformed(_)))),
            "{bad}"
        );
    }
    assert!(decode(b"   \r\n").is_none());
}

// ----- examples -----------------------------------------------------------------------------

use std::pin::pin;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::{Message, Response, Usage};
use crate::lines::PREFIX_KEEP;
use crate::lines::tests::{Chunked, poll_once};

fn one(line: &str) -> Incoming {
    match decode(line.as_bytes()) {
        Some(Ok(msg)) => msg,
        other => panic!("{line}: {other:?}"),
    }
}

/// Every message of `data`, read in `sizes` pieces by a decoder holding `limit` bytes; each
/// read that is not ready at once is dropped and started again (as `select!` does).
fn read_all(data: &[u8], sizes: &[usize], limit: usize) -> Vec<Got> {
    let mut r = Chunked::new(data, sizes, true);
    let mut decoder = Decoder::new(limit);
    let mut out = Vec::new();
    for _ in 0..=4 * data.len() + 4 {
        let step = poll_once(pin!(decoder.next(&mut r)));
        assert!(
            decoder.buffer_capacity() <= limit,
            "buffer {} > limit {limit}",
            decoder.buffer_capacity()
        );
        match step {
            None => continue,
            Some(Ok(None)) => return out,
            Some(result) => out.push(got(result.map(|m| m.expect("not the end")))),
        }
    }
    panic!("the decoder made no progress")
}

/// A decoded line, comparable.
#[derive(Debug, PartialEq)]
enum Got {
    Msg(Incoming),
    Malformed(String),
    TooLong(String),
    Io,
}

fn got(result: Result<Incoming, ReadError>) -> Got {
    match result {
        Ok(msg) => Got::Msg(msg),
        Err(ReadError::Malformed(p)) => Got::Malformed(p),
        Err(ReadError::TooLong { preview, .. }) => Got::TooLong(preview),
        Err(ReadError::Io(_)) => Got::Io,
    }
}

/// An assistant `message_end` as Pi 1.6.0 writes it (numbers changed to be told apart).
const ANSWER: &str = r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Hello from the fake LLM."}],"api":"openai-completions","provider":"fake-a","model":"alpha-1","usage":{"input":11,"output":7,"cacheRead":3,"cacheWrite":2,"reasoning":0,"totalTokens":23,"cost":{"input":0.25,"output":0.5,"cacheRead":0.125,"cacheWrite":0,"total":0.875,"totalFromProvider":false}},"stopReason":"stop","timestamp":1795984579945,"responseId":"chatcmpl-fake-1795984579968","rawStopReason":"stop","durationMs":36,"thinkingLevel":"off"}}"#;

#[test]
fn usage_is_read_from_assistant_messages() {
    let Incoming::MessageEnd { message } = one(ANSWER) else {
        panic!("not message_end")
    };
    let usage = Usage {
        input: 11,
        output: 7,
        cache_read: 3,
        cache_write: 2,
        total_tokens: 23,
        cost: 0.875,
    };
    assert_eq!(message.usage, Some(usage));
    assert_eq!(message.text(), "Hello from the fake LLM.");
    assert_eq!(
        (message.provider.as_deref(), message.model.as_deref()),
        (Some("fake-a"), Some("alpha-1"))
    );
    let mut sum = Usage::default();
    sum.add(&usage);
    sum.add(&usage);
    assert_eq!(
        sum,
        Usage {
            input: 22,
            output: 14,
            cache_read: 6,
            cache_write: 4,
            total_tokens: 46,
            cost: 1.75,
        }
    );
    let mut full = Usage {
        input: u64::MAX,
        ..Usage::default()
    };
    full.add(&usage);
    assert_eq!(full.input, u64::MAX, "counts saturate");
}

#[test]
fn usage_is_lenient() {
    let usage = |u: &str| {
        let line =
            format!(r#"{{"type":"message_end","message":{{"role":"assistant","usage":{u}}}}}"#);
        let Incoming::MessageEnd { message } = one(&line) else {
            panic!("not message_end")
        };
        message.usage
    };
    assert_eq!(usage("null"), None);
    assert_eq!(usage("[1,2]"), None);
    assert_eq!(usage("7"), None);
    assert_eq!(usage("{}"), Some(Usage::default()));
    assert_eq!(
        usage(
            r#"{"input":1.5,"output":-3,"cacheRead":"4","cacheWrite":[5],"totalTokens":18446744073709551615,"cost":{"input":1,"output":2.5}}"#
        ),
        Some(Usage {
            total_tokens: u64::MAX,
            cost: 3.5,
            ..Usage::default()
        }),
        "non-integers read as 0; no total: the parts add up"
    );
    assert_eq!(
        usage(r#"{"cost":{"input":1,"total":"x"}}"#).map(|u| u.cost),
        Some(0.0),
        "a total of the wrong type is 0, not the sum"
    );
    assert_eq!(usage(r#"{"cost":5}"#).map(|u| u.cost), Some(0.0));
    // Found by `parse_once_agrees_with_the_two_pass_decoder` at 10,000 cases, where its oracle
    // still believed a negative total: nothing costs less than nothing.
    assert_eq!(
        usage(r#"{"cost":{"input":-1,"output":0.5,"total":-9223372036854775808}}"#).map(|u| u.cost),
        Some(0.5),
        "a negative total is not believed, and negative parts count as 0"
    );
}

#[test]
fn content_of_other_roles_is_skipped_not_built() {
    let Incoming::MessageStart { message } = one(
        r#"{"type":"message_start","message":{"role":"user","content":[{"type":"image","data":"AAAA"}],"timestamp":1}}"#,
    ) else {
        panic!("not message_start")
    };
    assert_eq!(
        (message.role.as_str(), &message.content),
        ("user", &Value::Null)
    );
    // Written the other way round, the content is already read when the role is seen.
    let Incoming::MessageStart { message } =
        one(r#"{"type":"message_start","message":{"content":"kept","role":"user"}}"#)
    else {
        panic!("not message_start")
    };
    assert_eq!(message.content, json!("kept"));
}

#[test]
fn fields_other_types_use_are_not_read() {
    // `message` of a turn_end and `data` of an event are skipped, whatever they hold.
    assert_eq!(
        one(r#"{"type":"turn_end","message":{"role":"assistant","content":"x"},"data":[1]}"#),
        Incoming::TurnEnd {}
    );
    // Before `type` is seen, every known field is read; the type then picks what counts.
    assert_eq!(
        one(r#"{"id":"7","command":"prompt","success":true,"type":"response","data":{"a":1}}"#),
        Incoming::Response(Response {
            id: Some("7".into()),
            command: "prompt".into(),
            success: true,
            data: Some(json!({"a": 1})),
            error: None,
        })
    );
    assert_eq!(
        one(r#"{"id":"d1","method":"confirm","type":"extension_ui_request","error":5}"#),
        Incoming::ExtensionUiRequest {
            id: "d1".into(),
            method: "confirm".into()
        }
    );
}

/// Pi's `JSON.stringify` never repeats a key; a line that does is read in one pass, so the
/// first tag chooses (the last is not known until the end of the object), and a field the
/// runner reads, given twice, is an error (serde's derive rejects it).
#[test]
fn repeated_keys() {
    assert_eq!(
        one(r#"{"type":"agent_start","type":"agent_settled"}"#),
        Incoming::AgentStart,
        "the first `type` chooses"
    );
    assert_eq!(
        one(r#"{"type":"message_update","x":1,"x":[2],"type":"agent_end"}"#),
        Incoming::MessageUpdate {},
        "repeated keys the runner does not read are skipped like any other"
    );
    for read in [
        r#"{"type":"message_end","message":{"role":"user","role":"assistant"}}"#,
        r#"{"type":"agent_end","willRetry":true,"willRetry":false}"#,
        r#"{"id":"1","type":"response","id":"2"}"#,
        r#"{"type":"message_end","message":{"role":"assistant","model":"a","model":"b"}}"#,
    ] {
        assert!(
            matches!(decode(read.as_bytes()), Some(Err(ReadError::Malformed(_)))),
            "{read}"
        );
    }
}

/// Values serde_json cannot build are fine where they are skipped, and malformed where read.
#[test]
fn unreadable_values_matter_only_where_they_are_read() {
    assert_eq!(
        one(r#"{"type":"message_update","x":1e400,"y":"\ud800"}"#),
        Incoming::MessageUpdate {}
    );
    let bad_skip = b"{\"type\":\"tool_execution_update\",\"partialResult\":\"\xff\xfe\"}";
    assert_eq!(
        decode(bad_skip).map(|r| r.ok()),
        Some(Some(Incoming::ToolExecutionUpdate {}))
    );
    for read in [
        r#"{"type":"auto_retry_start","delayMs":1e400}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":"\ud800"}}"#,
    ] {
        assert!(
            matches!(decode(read.as_bytes()), Some(Err(ReadError::Malformed(_)))),
            "{read}"
        );
    }
}

#[test]
fn deep_nesting_neither_overflows_nor_hangs() {
    let deep = |open: &str, close: &str, n: usize| format!("{}{}", open.repeat(n), close.repeat(n));
    // Objects nested `n` deep, around a 1 (without it, `{"a":}` is not JSON at all).
    let objects = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    // Skipped: no depth limit applies, nothing is built.
    let skipped = format!(
        r#"{{"type":"message_update","x":{}}}"#,
        deep("[", "]", 100_000)
    );
    assert_eq!(one(&skipped), Incoming::MessageUpdate {});
    let scalar = format!(
        r#"{{"type":"auto_retry_start","errorMessage":{}}}"#,
        deep("[", "]", 100_000)
    );
    assert!(matches!(one(&scalar), Incoming::AutoRetryStart { .. }));
    // An object where a scalar or a message's usage goes: skipped the same.
    for line in [
        format!(
            r#"{{"type":"auto_retry_start","errorMessage":{}}}"#,
            objects(100_000)
        ),
        format!(
            r#"{{"type":"message_end","message":{{"role":"assistant","usage":{{"cost":{}}}}}}}"#,
            objects(100_000)
        ),
        format!(
            r#"{{"type":"message_start","message":{{"role":"user","content":{}}}}}"#,
            objects(100_000)
        ),
    ] {
        assert!(
            decode(line.as_bytes()).is_some_and(|r| r.is_ok()),
            "{}",
            &line[..80]
        );
    }
    // Built (an answer's content): serde_json's depth limit makes it malformed.
    let built = format!(
        r#"{{"type":"message_end","message":{{"role":"assistant","content":{}}}}}"#,
        objects(100_000)
    );
    assert!(matches!(
        decode(built.as_bytes()),
        Some(Err(ReadError::Malformed(_)))
    ));
}

#[test]
fn over_long_event_lines_are_skipped_with_default_fields() {
    let pad = "x".repeat(300);
    let lines = [
        format!(r#"{{"type":"message_update","assistantMessageEvent":{{"delta":"{pad}"}}}}"#),
        format!(r#"{{"type":"message_end","message":{{"role":"assistant","content":"{pad}"}}}}"#),
        format!(r#"{{"type":"agent_end","messages":["{pad}"],"willRetry":true}}"#),
        format!(r#"{{"type":"brand_new","x":"{pad}"}}"#),
        format!(r#"  {{"type" : "auto_retry_start","errorMessage":"{pad}"}}"#),
        r#"{"type":"agent_settled"}"#.to_string(),
    ];
    let data = lines.join("\n") + "\n";
    let expected = vec![
        Got::Msg(Incoming::MessageUpdate {}),
        Got::Msg(Incoming::MessageEnd {
            message: Message::default(),
        }),
        Got::Msg(Incoming::AgentEnd { will_retry: false }),
        Got::Msg(Incoming::Unknown),
        Got::Msg(Incoming::AutoRetryStart {
            attempt: 0,
            delay_ms: 0,
            error_message: String::new(),
        }),
        Got::Msg(Incoming::AgentSettled {}),
    ];
    assert_eq!(read_all(data.as_bytes(), &[7], 256), expected);
    assert_eq!(read_all(data.as_bytes(), &[100_000], 256), expected);
}

#[test]
fn over_long_responses_and_non_events_fail_at_once() {
    let pad = "y".repeat(300);
    for line in [
        format!(
            r#"{{"id":"m","type":"response","command":"get_available_models","data":"{pad}"}}"#
        ),
        format!(r#"{{"type":"response","command":"parse","success":false,"error":"{pad}"}}"#),
        format!("not json {pad}"),
        format!(r#"{{"{pad}":1}}"#),
        format!(r#"{{"type":5,"x":"{pad}"}}"#),
        format!(r#"[{{"type":"message_update","x":"{pad}"}}]"#),
    ] {
        // Nothing after the limit's byte is needed: the rest of the line never arrives here.
        let cut = &line.as_bytes()[..257];
        let mut r = Chunked::new(cut, &[64], false);
        let mut decoder = Decoder::new(256);
        let result = poll_once(pin!(decoder.next(&mut r))).expect("ready at once");
        assert_eq!(
            got(result.map(|m| m.expect("a line"))),
            Got::TooLong(line[..200].to_string())
        );
    }
    let err = ReadError::TooLong {
        limit: 256,
        preview: "{\"id\":\"m\"".into(),
    };
    assert_eq!(
        err.to_string(),
        "Pi RPC emitted a line longer than 256 bytes that the runner must read: {\"id\":\"m\""
    );
}

/// Found by `messages_do_not_depend_on_how_the_stream_arrives`: a line ending in `\r\r\n`
/// lost both `\r`s (the line reader stripped one, the decoder another).
#[test]
fn only_one_cr_is_stripped() {
    assert_eq!(
        read_all(b"bad\r\r\n\r\r\n", &[3], 64),
        vec![Got::Malformed("bad\r".to_string())],
        "`\\r\\r` alone is a blank line"
    );
    assert_eq!(
        read_all(b"{\"type\":\"agent_start\"}\r\r\n", &[5], 64),
        vec![Got::Msg(Incoming::AgentStart)],
        "a second \\r is JSON whitespace"
    );
}

/// With the production limit: a prompt echo under it is read (its content skipped), one over
/// it is skipped unread, and the answer after them comes through.
#[tokio::test(flavor = "current_thread")]
async fn prompt_echoes_of_any_size_pass_with_the_production_limit() {
    let echo = |len: usize| {
        format!(
            r#"{{"type":"message_end","message":{{"role":"user","content":[{{"type":"image","data":"{}"}}]}}}}"#,
            "A".repeat(len)
        )
    };
    let data = [echo(MAX_LINE - 200), echo(MAX_LINE + 1), ANSWER.to_string()].join("\n") + "\n";
    let mut r = tokio::io::BufReader::new(data.as_bytes());
    let mut decoder = Decoder::default();
    let mut roles = Vec::new();
    while let Some(msg) = decoder.next(&mut r).await.unwrap() {
        assert!(decoder.buffer_capacity() <= MAX_LINE);
        let Incoming::MessageEnd { message } = msg else {
            panic!("{msg:?}")
        };
        roles.push((message.role, message.content.is_null()));
    }
    assert_eq!(
        roles,
        [
            ("user".to_string(), true),
            (String::new(), true),
            ("assistant".to_string(), false)
        ]
    );
}

// ----- the reference: the two-pass decoder this one replaced ---------------------------------

/// The decoder as it was before "parse once": each line into a `serde_json::Value`, checked
/// for an object with a string `type`, then converted with serde's derived (internally tagged)
/// enum and a `Value`-based lenient field helper. The new decoder must give the same answer
/// wherever this one gave one (it may be more lenient where this one failed).
mod old {
    use serde::Deserialize;
    use serde_json::Value;

    fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
    where
        D: serde::Deserializer<'de>,
        T: serde::de::DeserializeOwned + Default,
    {
        let v = Value::deserialize(deserializer)?;
        Ok(serde_json::from_value(v).unwrap_or_default())
    }

    #[derive(Debug, Deserialize)]
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

    #[derive(Debug, Default, Deserialize)]
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

    #[derive(Debug, Deserialize)]
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

    /// What the old decoder made of a line.
    pub enum Decoded {
        Blank,
        Malformed,
        Line(Box<super::Incoming>),
    }

    pub fn decode(line: &[u8]) -> Decoded {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return Decoded::Blank;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v.is_object() && v.get("type").is_some_and(Value::is_string) => {
                match serde_json::from_value::<Incoming>(v) {
                    Ok(incoming) => Decoded::Line(Box::new(new(incoming))),
                    Err(_) => Decoded::Malformed,
                }
            }
            _ => Decoded::Malformed,
        }
    }

    fn message(m: Message) -> super::Message {
        super::Message {
            role: m.role,
            content: m.content,
            stop_reason: m.stop_reason,
            error_message: m.error_message,
            provider: m.provider,
            model: m.model,
            usage: None,
        }
    }

    fn new(old: Incoming) -> super::Incoming {
        use super::Incoming as New;
        match old {
            Incoming::Response(r) => New::Response(super::Response {
                id: r.id,
                command: r.command,
                success: r.success,
                data: r.data,
                error: r.error,
            }),
            Incoming::AgentStart => New::AgentStart,
            Incoming::TurnStart => New::TurnStart,
            Incoming::TurnEnd {} => New::TurnEnd {},
            Incoming::MessageStart { message: m } => New::MessageStart {
                message: message(m),
            },
            Incoming::MessageUpdate {} => New::MessageUpdate {},
            Incoming::MessageEnd { message: m } => New::MessageEnd {
                message: message(m),
            },
            Incoming::ToolExecutionStart {} => New::ToolExecutionStart {},
            Incoming::ToolExecutionUpdate {} => New::ToolExecutionUpdate {},
            Incoming::ToolExecutionEnd {} => New::ToolExecutionEnd {},
            Incoming::AgentEnd { will_retry } => New::AgentEnd { will_retry },
            Incoming::AgentSettled {} => New::AgentSettled {},
            Incoming::AutoRetryStart {
                attempt,
                delay_ms,
                error_message,
            } => New::AutoRetryStart {
                attempt,
                delay_ms,
                error_message,
            },
            Incoming::AutoRetryEnd { success } => New::AutoRetryEnd { success },
            Incoming::CompactionStart {} => New::CompactionStart {},
            Incoming::CompactionEnd {} => New::CompactionEnd {},
            Incoming::ExtensionUiRequest { id, method } => New::ExtensionUiRequest { id, method },
            Incoming::ExtensionError { error } => New::ExtensionError { error },
            Incoming::Unknown => New::Unknown,
        }
    }
}

#[path = "codec_random_tests.rs"]
mod random;
