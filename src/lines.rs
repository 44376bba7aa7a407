//! Bounded line splitting for everything read a line at a time: Pi's stdout (async) and the
//! `--batch` job file (sync). Owns the line buffer and the rule that bounds it; knows nothing
//! about JSON, processes or files, and does no I/O of its own beyond the reader it is handed.
//!
//! Rules:
//! - Lines end at `\n` only (JSON text may hold U+2028/U+2029); one trailing `\r` is stripped.
//! - At most `max` bytes of a line are held (a `\r` counts; the `\n` does not). The byte that
//!   makes a line longer than that is the moment it is reported as [`Line::TooLong`], with its
//!   first bytes kept for diagnosis; the rest of that line is then dropped as it arrives, never
//!   buffered, and reading continues with the next line. So memory stays at `max` plus the
//!   reader's own buffer whatever the input, and a caller can give up on a line at once.
//! - A last line without `\n` is [`Line::Unterminated`]: from a dying process it is a truncated
//!   write, in a file it is an ordinary last line; the caller decides.
//!
//! The async reader is cancel-safe: bytes are taken from the reader only in the same poll in
//! which they are copied into the buffer, and the buffer lives in [`LineReader`], not in the
//! future, so a read dropped by `select!` loses nothing and the next call goes on where it was.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// How many leading bytes of an over-long line are kept (for diagnosis and for telling what
/// kind of line it was).
pub const PREFIX_KEEP: usize = 4 * 1024;

/// Capacity kept between lines: one huge line must not pin its memory for the rest of a run.
const RETAIN: usize = 64 * 1024;

/// One line, borrowed from the reader until the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// A line ended by `\n` (without it, and without one trailing `\r`).
    Whole(&'a [u8]),
    /// The stream ended after these bytes without a `\n` (one trailing `\r` stripped).
    Unterminated(&'a [u8]),
    /// A line longer than the limit: its first bytes (at most [`PREFIX_KEEP`], and never more
    /// than the limit). Its remainder is skipped by the next call.
    TooLong { prefix: &'a [u8] },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    /// Collecting a line in `buf`.
    Reading,
    /// `buf` holds a line handed to the caller; the next call starts afresh.
    Handed,
    /// An over-long line was reported; its rest is dropped up to the next `\n`.
    Skipping,
}

/// What a scan of the reader's bytes found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    Whole,
    TooLong,
    Unterminated,
    End,
}

/// Splits a byte stream into lines of at most `max` bytes. Keep one per stream.
#[derive(Debug)]
pub struct LineReader {
    max: usize,
    buf: Vec<u8>,
    state: ReadState,
}

impl LineReader {
    pub fn new(max: usize) -> LineReader {
        LineReader {
            max,
            buf: Vec::new(),
            state: ReadState::Reading,
        }
    }

    /// The longest line held.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes allocated for the line buffer (at most the limit; for tests and diagnostics).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The next line; `Ok(None)` at end of stream. Cancel-safe (see the module doc). After an
    /// error the partial line is kept, and the next call goes on with it.
    pub async fn next_line<R: AsyncBufRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> io::Result<Option<Line<'_>>> {
        self.begin();
        let found = loop {
            let chunk = reader.fill_buf().await?;
            if chunk.is_empty() {
                break self.at_end();
            }
            let (used, found) = self.scan(chunk);
            reader.consume(used);
            if let Some(found) = found {
                break found;
            }
        };
        Ok(self.hand_out(found))
    }

    /// [`LineReader::next_line`] over a blocking reader.
    pub fn next_line_blocking<R: io::BufRead>(
        &mut self,
        reader: &mut R,
    ) -> io::Result<Option<Line<'_>>> {
        self.begin();
        let found = loop {
            let chunk = match reader.fill_buf() {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                break self.at_end();
            }
            let (used, found) = self.scan(chunk);
            reader.consume(used);
            if let Some(found) = found {
                break found;
            }
        };
        Ok(self.hand_out(found))
    }

    /// Forgets the line handed out by the previous call.
    fn begin(&mut self) {
        match self.state {
            ReadState::Handed => {
                self.buf.clear();
                self.buf.shrink_to(RETAIN);
                self.state = ReadState::Reading;
            }
            ReadState::Skipping => self.buf.clear(),
            ReadState::Reading => {}
        }
    }

    fn at_end(&mut self) -> Scan {
        match self.state {
            ReadState::Reading if !self.buf.is_empty() => Scan::Unterminated,
            _ => {
                // An over-long last line was reported already.
                self.state = ReadState::Reading;
                Scan::End
            }
        }
    }

    /// Takes bytes of `chunk` into the current line. Returns how many bytes were used, and
    /// what was found once a line is complete or known to be too long.
    fn scan(&mut self, chunk: &[u8]) -> (usize, Option<Scan>) {
        let newline = chunk.iter().position(|&b| b == b'\n');
        if self.state == ReadState::Skipping {
            return match newline {
                Some(i) => {
                    self.state = ReadState::Reading;
                    (i + 1, None)
                }
                None => (chunk.len(), None),
            };
        }
        let end = newline.unwrap_or(chunk.len());
        let room = self.max - self.buf.len();
        if end <= room {
            self.push(&chunk[..end]);
            return match newline {
                Some(_) => (end + 1, Some(Scan::Whole)),
                None => (end, None),
            };
        }
        // Byte `room` of this chunk is the first one past the limit: report now, keep the
        // prefix only, and leave everything after that byte to be skipped.
        let keep = self.prefix_len().saturating_sub(self.buf.len()).min(end);
        self.push(&chunk[..keep]);
        self.buf.truncate(self.prefix_len());
        self.buf.shrink_to(RETAIN);
        self.state = ReadState::Skipping;
        (room + 1, Some(Scan::TooLong))
    }

    fn prefix_len(&self) -> usize {
        PREFIX_KEEP.min(self.max)
    }

    /// Appends, growing the buffer geometrically but never past the limit (callers keep
    /// `buf.len() + bytes.len() <= max`).
    fn push(&mut self, bytes: &[u8]) {
        let need = self.buf.len() + bytes.len();
        if need > self.buf.capacity() {
            let target = self
                .buf
                .capacity()
                .saturating_mul(2)
                .min(self.max)
                .max(need);
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(bytes);
    }

    fn hand_out(&mut self, found: Scan) -> Option<Line<'_>> {
        let strip_cr = |b: &[u8]| -> usize { b.len() - usize::from(b.ends_with(b"\r")) };
        match found {
            Scan::End => None,
            Scan::TooLong => Some(Line::TooLong { prefix: &self.buf }),
            Scan::Whole => {
                self.state = ReadState::Handed;
                Some(Line::Whole(&self.buf[..strip_cr(&self.buf)]))
            }
            Scan::Unterminated => {
                self.state = ReadState::Handed;
                Some(Line::Unterminated(&self.buf[..strip_cr(&self.buf)]))
            }
        }
    }
}

#[cfg(test)]
#[path = "lines_tests.rs"]
pub(crate) mod tests;
