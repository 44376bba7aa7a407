//! Tests of the bounded line reader, and the chunked test reader the RPC decoder's tests share.

use std::io;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use proptest::prelude::*;
use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};

use super::*;

/// A reader that hands out its data in the given pieces, one piece per `fill_buf`, and (with
/// `stall`) answers `Pending` once before each piece, as a pipe whose writer is slow does.
pub(crate) struct Chunked {
    chunks: Vec<Vec<u8>>,
    at: usize,
    pos: usize,
    stall: bool,
    stalled: bool,
}

impl Chunked {
    /// `data` cut after every `sizes[i]` bytes (cycling; a size of 0 counts as 1).
    pub(crate) fn new(data: &[u8], sizes: &[usize], stall: bool) -> Chunked {
        let mut chunks = Vec::new();
        let mut rest = data;
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes
                .get(i % sizes.len().max(1))
                .copied()
                .unwrap_or(usize::MAX)
                .max(1)
                .min(rest.len());
            chunks.push(rest[..n].to_vec());
            rest = &rest[n..];
            i += 1;
        }
        Chunked {
            chunks,
            at: 0,
            pos: 0,
            stall,
            stalled: false,
        }
    }

    fn current(&mut self) -> Option<&[u8]> {
        while self.at < self.chunks.len() && self.pos == self.chunks[self.at].len() {
            self.at += 1;
            self.pos = 0;
            self.stalled = false;
        }
        let chunk = self.chunks.get(self.at)?;
        Some(&chunk[self.pos..])
    }
}

impl AsyncRead for Chunked {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(chunk) = this.current() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            this.pos += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncBufRead for Chunked {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        let more = this.current().is_some();
        if more && this.stall && !this.stalled {
            this.stalled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(this.current().unwrap_or(&[])))
    }

    fn consume(self: Pin<&mut Self>, amt: usize) {
        self.get_mut().pos += amt;
    }
}

impl io::Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(chunk) = self.current() else {
            return Ok(0);
        };
        let n = chunk.len().min(buf.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        self.pos += n;
        Ok(n)
    }
}

impl io::BufRead for Chunked {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        Ok(self.current().unwrap_or(&[]))
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt;
    }
}

/// Polls `fut` once with a waker that does nothing: `None` when it is not ready (the caller
/// then drops it, as `select!` does when a timer wins).
pub(crate) fn poll_once<F: Future>(fut: Pin<&mut F>) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    match fut.poll(&mut cx) {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    }
}

/// An owned [`Line`], for comparing runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owned {
    Whole(Vec<u8>),
    Unterminated(Vec<u8>),
    TooLong(Vec<u8>),
}

fn owned(line: Line<'_>) -> Owned {
    match line {
        Line::Whole(b) => Owned::Whole(b.to_vec()),
        Line::Unterminated(b) => Owned::Unterminated(b.to_vec()),
        Line::TooLong { prefix } => Owned::TooLong(prefix.to_vec()),
    }
}

/// Every line of `data`, read through the async reader in `sizes` pieces; each read that is
/// not ready at once is dropped and started again. Also checks the buffer bound after each
/// line.
fn read_async(data: &[u8], sizes: &[usize], max: usize) -> Vec<Owned> {
    let mut r = Chunked::new(data, sizes, true);
    let mut lines = LineReader::new(max);
    let mut out = Vec::new();
    for _ in 0..=4 * data.len() + 4 {
        let step = {
            let fut = pin!(lines.next_line(&mut r));
            match poll_once(fut) {
                None => continue,
                Some(Ok(line)) => line.map(owned),
                Some(Err(e)) => panic!("{e}"),
            }
        };
        match step {
            Some(line) => out.push(line),
            None => return out,
        }
        assert!(lines.capacity() <= max, "{} > {max}", lines.capacity());
    }
    panic!("the reader made no progress")
}

fn read_sync(data: &[u8], sizes: &[usize], max: usize) -> Vec<Owned> {
    let mut r = Chunked::new(data, sizes, false);
    let mut lines = LineReader::new(max);
    let mut out = Vec::new();
    while let Some(line) = lines.next_line_blocking(&mut r).expect("in memory") {
        out.push(owned(line));
        assert!(lines.capacity() <= max, "{} > {max}", lines.capacity());
    }
    out
}

/// What the rules in the module doc say `data` splits into, computed the obvious way.
fn model(data: &[u8], max: usize) -> Vec<Owned> {
    let strip = |l: &[u8]| l.strip_suffix(b"\r").unwrap_or(l).to_vec();
    let too_long = |l: &[u8]| Owned::TooLong(l[..PREFIX_KEEP.min(max)].to_vec());
    let mut pieces: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let last = pieces.pop().unwrap_or_default();
    let mut out: Vec<Owned> = pieces
        .into_iter()
        .map(|l| {
            if l.len() > max {
                too_long(l)
            } else {
                Owned::Whole(strip(l))
            }
        })
        .collect();
    if last.len() > max {
        out.push(too_long(last));
    } else if !last.is_empty() {
        out.push(Owned::Unterminated(strip(last)));
    }
    out
}

fn whole(s: &str) -> Owned {
    Owned::Whole(s.as_bytes().to_vec())
}

#[test]
fn splits_on_newline_only_and_strips_one_cr() {
    let data = "a\r\n\nb\u{2028}c\r\r\n\r\nlast\r".as_bytes();
    let expected = vec![
        whole("a"),
        whole(""),
        whole("b\u{2028}c\r"),
        whole(""),
        Owned::Unterminated(b"last".to_vec()),
    ];
    assert_eq!(read_sync(data, &[1000], 100), expected);
    assert_eq!(read_async(data, &[1], 100), expected);
    assert_eq!(read_sync(b"", &[1], 100), vec![]);
}

#[test]
fn a_line_of_exactly_max_bytes_is_whole_and_one_more_is_too_long() {
    assert_eq!(
        read_sync(b"abcd\nx", &[3], 4),
        vec![whole("abcd"), Owned::Unterminated(b"x".to_vec())]
    );
    // The `\r` counts: it is part of the line until the `\n` is seen.
    assert_eq!(
        read_sync(b"abcd\r\nx\n", &[3], 4),
        vec![Owned::TooLong(b"abcd".to_vec()), whole("x")]
    );
}

#[test]
fn an_over_long_line_is_reported_at_once_and_the_stream_goes_on() {
    let mut data = b"ok\n".to_vec();
    data.extend(std::iter::repeat_n(b'x', 50_000));
    data.extend(b"\nnext\n");
    let mut r = Chunked::new(&data, &[7000], false);
    let mut lines = LineReader::new(10_000);
    assert_eq!(
        lines.next_line_blocking(&mut r).unwrap().map(owned),
        Some(whole("ok"))
    );
    let prefix = vec![b'x'; PREFIX_KEEP];
    assert_eq!(
        lines.next_line_blocking(&mut r).unwrap().map(owned),
        Some(Owned::TooLong(prefix))
    );
    // Reported with the limit's byte: the rest of the line is still unread.
    assert_eq!(r.at * 7000 + r.pos, 3 + 10_001);
    assert!(lines.capacity() <= RETAIN, "{}", lines.capacity());
    assert_eq!(
        lines.next_line_blocking(&mut r).unwrap().map(owned),
        Some(whole("next"))
    );
    assert_eq!(lines.next_line_blocking(&mut r).unwrap(), None);
}

#[test]
fn an_over_long_last_line_is_reported_once() {
    assert_eq!(
        read_sync(b"abcdefgh", &[2], 3),
        vec![Owned::TooLong(b"abc".to_vec())]
    );
    assert_eq!(
        read_async(b"abcdefgh", &[2], 3),
        vec![Owned::TooLong(b"abc".to_vec())]
    );
    // A zero limit: every non-empty line is too long, an empty one is still a line.
    assert_eq!(
        read_sync(b"\nab\n\n", &[1], 0),
        vec![whole(""), Owned::TooLong(vec![]), whole("")]
    );
}

#[test]
fn capacity_is_given_back_after_a_big_line() {
    let mut data = vec![b'y'; 1_000_000];
    data.extend(b"\nsmall\n");
    let mut r = Chunked::new(&data, &[8192], false);
    let mut lines = LineReader::new(2_000_000);
    let first = lines.next_line_blocking(&mut r).unwrap().map(owned);
    assert_eq!(first, Some(Owned::Whole(vec![b'y'; 1_000_000])));
    assert!(lines.capacity() <= 2_000_000);
    assert_eq!(
        lines.next_line_blocking(&mut r).unwrap().map(owned),
        Some(whole("small"))
    );
    assert!(lines.capacity() <= RETAIN, "{}", lines.capacity());
}

/// The line the read was building survives the read being dropped, byte by byte.
#[test]
fn a_read_dropped_between_any_two_bytes_loses_nothing() {
    let data = b"{\"type\":\"agent_start\"}\r\n\n{\"a\":1}";
    assert_eq!(
        read_async(data, &[1], 64),
        vec![
            whole("{\"type\":\"agent_start\"}"),
            whole(""),
            Owned::Unterminated(b"{\"a\":1}".to_vec())
        ]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_real_pipe_written_in_pieces() {
    use tokio::io::AsyncWriteExt;
    // The pipe holds 16 bytes: the writer waits for the reader part-way, so lines arrive cut
    // at the pieces and at the pipe's size, whatever the scheduler does.
    let (mut tx, rx) = tokio::io::duplex(16);
    let writer = tokio::spawn(async move {
        for piece in [&b"hel"[..], b"lo\r", b"\nworld-", b"too-long\nend\n"] {
            tx.write_all(piece).await.unwrap();
        }
    });
    let mut rx = tokio::io::BufReader::with_capacity(4, rx);
    let mut lines = LineReader::new(8);
    let mut got = Vec::new();
    while let Some(line) = lines.next_line(&mut rx).await.unwrap() {
        got.push(owned(line));
    }
    writer.await.unwrap();
    assert_eq!(
        got,
        vec![
            whole("hello"),
            Owned::TooLong(b"world-to".to_vec()),
            whole("end")
        ]
    );
}

/// Bytes where newlines, `\r` and NULs are common. (Mapped from `any::<u8>()`: a weighted
/// `prop_oneof!` per byte is a hundred times slower to generate in a debug build.)
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..400).prop_map(|v| {
        v.into_iter()
            .map(|b| match b {
                0..64 => b'a',
                64..96 => b'\n',
                96..104 => b'\r',
                104..108 => 0,
                b => b,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    /// However the input is cut, and wherever a read is dropped, the lines are the ones the
    /// rules say, and the buffer never holds more than the limit.
    #[test]
    fn lines_do_not_depend_on_how_the_input_arrives(
        data in bytes(),
        sizes in proptest::collection::vec(1usize..40, 1..8),
        max in 0usize..48,
    ) {
        let expected = model(&data, max);
        prop_assert_eq!(&read_sync(&data, &sizes, max), &expected);
        prop_assert_eq!(&read_async(&data, &sizes, max), &expected);
    }

    /// Big lines against a limit above the kept prefix: only the prefix is kept.
    #[test]
    fn over_long_lines_keep_only_their_prefix(
        lens in proptest::collection::vec(0usize..3 * PREFIX_KEEP, 1..4),
        max in PREFIX_KEEP..2 * PREFIX_KEEP,
        size in 512usize..9000,
    ) {
        let mut data = Vec::new();
        for (i, len) in lens.iter().enumerate() {
            data.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, *len));
            data.push(b'\n');
        }
        let expected = model(&data, max);
        prop_assert_eq!(&read_sync(&data, &[size], max), &expected);
        prop_assert_eq!(&read_async(&data, &[size], max), &expected);
    }
}
