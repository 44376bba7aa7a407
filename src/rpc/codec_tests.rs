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
