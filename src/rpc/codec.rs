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
pub async fn read_incoming<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Incoming>, ReadError> {
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', buf).await.map_err(ReadError::Io)?;
        if n == 0 {
            return Ok(None);
        }
        if buf.len() > MAX_LINE {
            return Err(ReadError::TooLong);
        }
        if !buf.ends_with(b"\n") {
            // A partial line at EOF is a truncated write by a dying process, not protocol.
            return Ok(None);
        }
        return match decode(buf) {
            Some(Ok(msg)) => Ok(Some(msg)),
            Some(Err(e)) => Err(e),
            None => continue,
        };
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

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            "this is not json",
            "[1,2]",
            "{\"no_type\":1}",
            "{\"type\":\"message_end\",\"message\":5}",
        ] {
            assert!(
                matches!(decode(bad.as_bytes()), Some(Err(ReadError::Malformed(_)))),
                "{bad}"
            );
        }
        assert!(decode(b"   \r\n").is_none());
    }
}
