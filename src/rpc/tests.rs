//! Wire types: serialisation of commands and lenient parsing of what Pi writes.

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
    let Incoming::MessageStart { message } =
        parse(r#"{"type":"message_start","message":{"role":"system","content":"","sections":{}}}"#)
    else {
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

fn response(line: &str) -> Response {
    let Incoming::Response(r) = parse(line) else {
        panic!("not a response: {line}")
    };
    r
}

/// A `get_state` answer as Pi 1.6.0 writes it (from the 1.6.0 transcripts).
const STATE: &str = r#"{"id":"st","type":"response","command":"get_state","success":true,"data":{"model":{"id":"alpha-1","name":"Alpha 1","api":"openai-completions","provider":"fake-a","baseUrl":"http://127.0.0.1:43277/a/v1","reasoning":false,"input":["text","image"],"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0},"contextWindow":128000,"maxTokens":4096},"thinkingLevel":"off","isStreaming":false,"isCompacting":false,"steeringMode":"one-at-a-time","followUpMode":"one-at-a-time","sessionId":"01a22902-f59e-7732-bfe4-53f3a2de0a26","autoCompactionEnabled":true,"messageCount":0,"pendingMessageCount":0}}"#;

#[test]
fn state_is_typed() {
    let state = response(STATE).state().expect("a state");
    assert_eq!(state.model.key(), "fake-a/alpha-1");
    assert_eq!(state.model.context_window, Some(128_000));
    assert_eq!(state.thinking_level.as_deref(), Some("off"));
    let odd_level =
        r#"{"type":"response","data":{"model":{"provider":"p","id":"m"},"thinkingLevel":3}}"#;
    let state = response(odd_level).state().expect("a state");
    assert_eq!(
        (state.model.key(), state.thinking_level),
        ("p/m".into(), None)
    );
    for no_state in [
        r#"{"type":"response","command":"get_state","success":true}"#,
        r#"{"type":"response","data":{"thinkingLevel":"high"}}"#,
        r#"{"type":"response","data":{"model":{"id":"m"}}}"#,
        r#"{"type":"response","data":{"model":null}}"#,
        r#"{"type":"response","data":[{"provider":"p","id":"m"},"high"]}"#,
    ] {
        assert_eq!(response(no_state).state(), None, "{no_state}");
    }
}

#[test]
fn models_skip_entries_that_do_not_parse() {
    let r = response(
        r#"{"id":"models","type":"response","command":"get_available_models","success":true,"data":{"models":[{"provider":"a","id":"1","reasoning":true},{"id":"no provider"},7,{"provider":"b","id":"2","reasoning":"yes"},{"provider":"c","id":"3"}]}}"#,
    );
    let keys: Vec<String> = r.models().iter().map(|m| m.key().into()).collect();
    assert_eq!(keys, ["a/1", "c/3"]);
    assert!(r.models()[0].reasoning);
    for none in [
        r#"{"type":"response","success":true}"#,
        r#"{"type":"response","data":{"models":{"provider":"a","id":"1"}}}"#,
        r#"{"type":"response","data":"models"}"#,
    ] {
        assert!(response(none).models().is_empty(), "{none}");
    }
}

#[test]
fn prompt_dispositions() {
    let disposition = |data: &str| {
        response(&format!(
            r#"{{"id":"p1","type":"response","command":"prompt","success":true{data}}}"#
        ))
        .disposition()
    };
    assert_eq!(
        disposition(r#","data":{"disposition":"started"}"#),
        Some(Disposition::Started)
    );
    assert_eq!(
        disposition(r#","data":{"disposition":"queued"}"#),
        Some(Disposition::Queued)
    );
    assert_eq!(
        disposition(r#","data":{"disposition":"handled"}"#),
        Some(Disposition::Handled)
    );
    assert_eq!(
        disposition(r#","data":{"disposition":"later"}"#),
        Some(Disposition::Unknown)
    );
    // Pi 0.84.4 sends no data; a disposition that is not a string is none.
    assert_eq!(disposition(""), None);
    assert_eq!(disposition(r#","data":{"disposition":["handled"]}"#), None);
}

#[test]
fn fork_messages_and_cancelled() {
    let r = response(
        r#"{"id":"fm","type":"response","command":"get_fork_messages","success":true,"data":{"messages":[{"entryId":"6fd1368a","text":"First task: say hi."},{"entryId":"5de39de8","text":7}]}}"#,
    );
    let messages = r.fork_messages();
    let ids: Vec<&str> = messages.iter().map(|m| m.entry_id.as_str()).collect();
    assert_eq!(ids, ["6fd1368a", "5de39de8"]);
    assert_eq!(
        (messages[0].text.as_str(), messages[1].text.as_str()),
        ("First task: say hi.", "")
    );
    // Every entry must parse: the last one is the one to fork from.
    let broken = r#"{"type":"response","data":{"messages":[{"entryId":"a"},{"text":"no id"}]}}"#;
    assert!(response(broken).fork_messages().is_empty());
    assert!(
        response(r#"{"type":"response"}"#)
            .fork_messages()
            .is_empty()
    );

    let cancelled =
        |data: &str| response(&format!(r#"{{"type":"response","data":{data}}}"#)).cancelled();
    assert!(!cancelled(
        r#"{"text":"Second task: summarise.","cancelled":false}"#
    ));
    assert!(cancelled(r#"{"cancelled":true}"#));
    assert!(!cancelled(r#"{"cancelled":"yes"}"#));
    assert!(!cancelled("null"));
    assert!(!response(r#"{"type":"response","command":"fork","success":true}"#).cancelled());
}
