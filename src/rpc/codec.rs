//! JSON-lines framing of Pi's stdout and stdin: one object per line, split on `\n` only (JSON
//! strings may hold U+2028), a trailing `\r` stripped. Knows nothing about processes.
//!
//! Memory is bounded by [`MAX_LINE`] per Pi, whatever Pi writes ([`crate::lines`]). Lines the
//! runner must understand (responses, assistant messages) are far below it. Lines that grow
//! with the prompt are the ones Pi echoes it in: the user message in `message_start` /
//! `message_end` (text attachments of up to 20 MiB each, images as base64), `turn_end` and
//! `agent_end`. So a line over the limit is judged by its first bytes:
//! - an event (Pi writes `{"type":…` first): its payload is never needed, so the rest of the
//!   line is skipped unread and the event is yielded with every field at its default. A message
//!   event then is not an assistant's (an answer is never that big), an `agent_end` has
//!   `willRetry: false` (the runner does not use it), an `auto_retry_start` has no error text,
//!   an `extension_ui_request` no id to answer (none comes with `--no-extensions`); unknown
//!   types stay [`Incoming::Unknown`];
//! - a `response` (`{"id":…,"type":"response",…`), or bytes that do not start like a JSON object
//!   with a string `type`: [`ReadError::TooLong`] at once, without reading the rest. The only
//!   answers that grow with the prompt are `fork`/`get_fork_messages` (its text, not its
//!   images): over 32 MiB of prompt text is far beyond any model's context window.

use std::fmt;

use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};

use super::{Command, Envelope, Incoming};
use crate::lines::{Line, LineReader};

/// Longest line held from Pi. Far above any response or answer; the prompt echoes that can
/// pass it are skipped (see the module doc).
pub const MAX_LINE: usize = 32 * 1024 * 1024;

/// How much of a bad line an error quotes.
const PREVIEW: usize = 200;

#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    /// A line that is not a JSON object we understand.
    Malformed(String),
    /// A line over the limit that the runner would have to read: a response, or not an event.
    TooLong {
        limit: usize,
        preview: String,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "reading Pi's output failed: {e}"),
            ReadError::Malformed(line) => write!(f, "Pi RPC emitted malformed JSONL: {line}"),
            ReadError::TooLong { limit, preview } => write!(
                f,
                "Pi RPC emitted a line longer than {limit} bytes that the runner must read: \
                 {preview}"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// Decodes Pi's stdout line by line. Keep one per Pi, for the life of its stdout.
#[derive(Debug)]
pub struct Decoder {
    lines: LineReader,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new(MAX_LINE)
    }
}

impl Decoder {
    /// A decoder holding at most `max_line` bytes of a line.
    pub fn new(max_line: usize) -> Decoder {
        Decoder {
            lines: LineReader::new(max_line),
        }
    }

    /// Bytes allocated for the line buffer (never more than the limit).
    pub fn buffer_capacity(&self) -> usize {
        self.lines.capacity()
    }

    /// The next message, skipping blank lines; `Ok(None)` at end of stream. A last line
    /// without `\n` is a truncated write by a dying process, and ignored.
    ///
    /// Cancel-safe: the line being read lives in the decoder, not in the future (the driver's
    /// `select!` drops the read whenever a timer wins), and the next call goes on with it.
    pub async fn next<R: AsyncBufRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<Option<Incoming>, ReadError> {
        let limit = self.lines.max();
        loop {
            match self.lines.next_line(reader).await.map_err(ReadError::Io)? {
                None => return Ok(None),
                Some(Line::Whole(line)) => {
                    // The reader stripped the one `\r` a line may end with.
                    if let Some(decoded) = decode_framed(line) {
                        return decoded.map(Some);
                    }
                }
                Some(Line::Unterminated(_)) => {}
                Some(Line::TooLong { prefix }) => return over_long(prefix, limit).map(Some),
            }
        }
    }
}

/// [`Decoder::next`], for callers that keep the decoder beside the reader.
pub async fn read_incoming<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    decoder: &mut Decoder,
) -> Result<Option<Incoming>, ReadError> {
    decoder.next(reader).await
}

/// Decodes one line (a trailing `\n` and `\r` are ignored); `None` for a blank line.
pub fn decode(line: &[u8]) -> Option<Result<Incoming, ReadError>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    decode_framed(line.strip_suffix(b"\r").unwrap_or(line))
}

/// [`decode`] of a line without its `\n` and `\r`.
fn decode_framed(line: &[u8]) -> Option<Result<Incoming, ReadError>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    Some(serde_json::from_slice(line).map_err(|_| ReadError::Malformed(preview(line))))
}

/// The event an over-long line stands for, judged by its first bytes (see the module doc).
fn over_long(prefix: &[u8], limit: usize) -> Result<Incoming, ReadError> {
    match super::sniff_type(prefix) {
        Some(kind) if kind != "response" => {
            tracing::debug!(
                kind,
                limit,
                "skipping the payload of an over-long event line"
            );
            Ok(super::event_without_payload(&kind))
        }
        _ => Err(ReadError::TooLong {
            limit,
            preview: preview(prefix),
        }),
    }
}

fn preview(line: &[u8]) -> String {
    String::from_utf8_lossy(&line[..line.len().min(PREVIEW)]).into_owned()
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
#[path = "codec_tests.rs"]
mod tests;
