//! JSON-lines framing: one object per line, split on `\n` only (JSON strings may hold U+2028),
//! a trailing `\r` stripped. Knows nothing about processes.

use std::fmt;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use super::{Command, Envelope, Incoming};

/// Longest line accepted from Pi. `agent_end` repeats the whole conversation including images
/// (20 × 1.5 MiB base64), so this is generous; it exists to bound memory, not to police Pi.
pub const MAX_LINE: usize = 256 * 1024 * 1024;

#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    /// A line that is not a JSON object we understand.
    Malformed(String),
    TooLong,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "reading Pi's output failed: {e}"),
            ReadError::Malformed(line) => write!(f, "Pi RPC emitted malformed JSONL: {line}"),
            ReadError::TooLong => write!(f, "Pi RPC emitted a line longer than {MAX_LINE} bytes"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads the next non-blank line and decodes it. `Ok(None)` at end of stream.
///
/// Cancel-safe: `buf` keeps a partly read line when the future is dropped (the driver's
/// `select!` drops it whenever a timer wins), and the next call appends the rest. So `buf` is
/// cleared only once a whole line has been taken out of it.
pub async fn read_incoming<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Incoming>, ReadError> {
    loop {
        reader.read_until(b'\n', buf).await.map_err(ReadError::Io)?;
        if buf.len() > MAX_LINE {
            buf.clear();
            return Err(ReadError::TooLong);
        }
        if !buf.ends_with(b"\n") {
            // End of stream; a partial last line is a truncated write by a dying process.
            buf.clear();
            return Ok(None);
        }
        let decoded = decode(buf);
        buf.clear();
        match decoded {
            Some(Ok(msg)) => return Ok(Some(msg)),
            Some(Err(e)) => return Err(e),
            None => continue,
        }
    }
}

/// Decodes one line; `None` for a blank line.
pub fn decode(line: &[u8]) -> Option<Result<Incoming, ReadError>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let preview = || String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
    Some(match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(v) if v.is_object() && v.get("type").is_some_and(serde_json::Value::is_string) => {
            serde_json::from_value(v).map_err(|_| ReadError::Malformed(preview()))
        }
        _ => Err(ReadError::Malformed(preview())),
    })
}

/// Writes one command as one line and flushes.
pub async fn write_command<W: AsyncWrite + Unpin>(
    writer: &mut W,
    id: Option<&str>,
    command: &Command,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(&Envelope { id, command })?;
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn splits_on_newline_only_and_strips_cr() {
        let data = "{\"type\":\"agent_start\"}\r\n\n{\"type\":\"message_end\",\"message\":{\"role\":\"assistant\",\"content\":\"a\u{2028}b\"}}\n{\"type\":\"agent_settled\"}";
        let mut r = tokio::io::BufReader::new(data.as_bytes());
        let mut buf = Vec::new();
        assert!(matches!(
            read_incoming(&mut r, &mut buf).await,
            Ok(Some(Incoming::AgentStart))
        ));
        let Ok(Some(Incoming::MessageEnd { message })) = read_incoming(&mut r, &mut buf).await
        else {
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
        let mut buf = Vec::new();
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
}
