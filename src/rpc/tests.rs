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
