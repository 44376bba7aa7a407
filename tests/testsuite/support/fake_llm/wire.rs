//! The fake server's wire format: HTTP/1.1 request reading (Content-Length or chunked, bounded)
//! and answers — JSON errors, and SSE chat-completion streams with chunked transfer encoding.
//! Decides nothing: what to send comes from `super::act`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::{Ctx, Shared, TOOL_USAGE};

pub(super) struct RawRequest {
    pub(super) method: String,
    pub(super) path: String,
    headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl RawRequest {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 256 * 1024 * 1024;

/// Read one request; `None` on EOF, error, stop, or a malformed request.
pub(super) fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    shared: &Shared,
) -> Option<RawRequest> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        fill(stream, buf, shared)?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    buf.drain(..head_end + 4);
    let mut req = RawRequest {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            if let Some((body, used)) = decode_chunked(buf) {
                buf.drain(..used);
                req.body = body;
                break;
            }
            if buf.len() > MAX_BODY {
                return None;
            }
            fill(stream, buf, shared)?;
        }
    } else {
        let len: usize = req
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if len > MAX_BODY {
            return None;
        }
        while buf.len() < len {
            fill(stream, buf, shared)?;
        }
        req.body = buf.drain(..len).collect();
    }
    Some(req)
}

/// Read more bytes into `buf`, retrying on the 100 ms read timeout until data, EOF or stop.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, shared: &Shared) -> Option<()> {
    let mut tmp = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut tmp) {
            Ok(0) => return None,
            Ok(n) => {
                buf.extend_from_slice(&tmp[..n]);
                return Some(());
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if shared.stopped() {
                    return None;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Decode a complete chunked body at the start of `buf`: `(body, bytes consumed)`.
fn decode_chunked(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut pos = 0;
    let mut body = Vec::new();
    loop {
        let line_end = pos + find(&buf[pos..], b"\r\n")?;
        let size_str = String::from_utf8_lossy(&buf[pos..line_end]);
        let size = usize::from_str_radix(size_str.split(';').next()?.trim(), 16).ok()?;
        pos = line_end + 2;
        if size == 0 {
            // Trailers (ignored) end with an empty line.
            loop {
                let e = pos + find(&buf[pos..], b"\r\n")?;
                let empty = e == pos;
                pos = e + 2;
                if empty {
                    return Some((body, pos));
                }
            }
        }
        if buf.len() < pos + size + 2 {
            return None;
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Write a JSON answer. Errors (>= 400) carry `Connection: close`. Returns "keep the connection".
pub(super) fn send_json(
    stream: &mut TcpStream,
    status: u16,
    body: &str,
    extra: &[(&str, &str)],
) -> bool {
    let close = status >= 400;
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let ok = stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(body.as_bytes()))
        .and_then(|_| stream.flush())
        .is_ok();
    if close {
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
    ok && !close
}

/// An OpenAI-style error body with the keys in OpenAI's order (message, type, param, code);
/// Pi re-serialises the error object (key order kept) into `errorMessage` after `"<status>: "`.
pub(super) fn err_body(message: &str, typ: &str, code: Option<&str>) -> String {
    let q = |s: &str| Value::from(s).to_string();
    format!(
        r#"{{"error":{{"message":{},"type":{},"param":null,"code":{}}}}}"#,
        q(message),
        q(typ),
        code.map_or_else(|| "null".to_string(), q)
    )
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Mode {
    Normal,
    /// Every piece, then `finish_reason:"length"`.
    Length,
    /// Like `Normal`, but the usage chunk reports `completion_tokens: -100000` (a broken
    /// provider's arithmetic).
    NegativeUsage,
    Slow,
    NoFinish,
    Drop,
    Reset,
    Stall,
    /// Headers at once, the first content `first_ms` later, then `tokens` content chunks
    /// `gap_ms` apart; with `stall_after`, silence (bounded by the hang limit) after that many
    /// chunks, then the connection closes without finishing.
    Paced {
        first_ms: u64,
        tokens: usize,
        gap_ms: u64,
        stall_after: Option<usize>,
    },
    /// Reasoning first: `reasoning_content` deltas every `gap_ms` for `think_ms`, then the
    /// text.
    Think {
        think_ms: u64,
        gap_ms: u64,
    },
}

/// `text` cut into `n` pieces of nearly equal length (at least one, none empty).
fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let n = n.clamp(1, chars.len().max(1));
    let mut out = Vec::with_capacity(n);
    let mut start = 0;
    for i in 0..n {
        let end = chars.len() * (i + 1) / n;
        out.push(chars[start..end].iter().collect());
        start = end;
    }
    out
}

fn start_sse(w: &mut TcpStream) -> io::Result<()> {
    w.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
    )
}

fn chunk(w: &mut TcpStream, payload: &str) -> io::Result<()> {
    w.write_all(format!("{:x}\r\n{payload}\r\n", payload.len()).as_bytes())?;
    w.flush()
}

fn sse(w: &mut TcpStream, v: &Value) -> io::Result<()> {
    chunk(w, &format!("data: {v}\n\n"))
}

fn finish_sse(w: &mut TcpStream) -> io::Result<()> {
    chunk(w, "data: [DONE]\n\n")?;
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

fn completion_id() -> (String, u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (format!("chatcmpl-fake-{}", now.as_millis()), now.as_secs())
}

/// Split like fake_llm.py: about three pieces of whole words, each but the last ending in a space.
fn pieces(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split(' ').collect();
    let n = (words.len() / 3).max(1);
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let end = (i + n).min(words.len());
        let mut p = words[i..end].join(" ");
        if end < words.len() {
            p.push(' ');
        }
        out.push(p);
        i = end;
    }
    out
}

/// The final usage chunk; `usage_sent` is recorded first and withdrawn if the write fails.
fn send_usage(
    w: &mut TcpStream,
    id: &str,
    created: u64,
    usage: (u64, u64),
    ctx: &Ctx<'_>,
) -> io::Result<()> {
    let (prompt, completion) = usage;
    ctx.shared.set_usage_sent(ctx.seq, Some(usage));
    let res = sse(
        w,
        &json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": ctx.model,
                "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                         "total_tokens": prompt + completion}}),
    );
    if res.is_err() {
        ctx.shared.set_usage_sent(ctx.seq, None);
    }
    res
}

pub(super) fn stream_text(
    w: &mut TcpStream,
    text: &str,
    mode: Mode,
    usage: (u64, u64),
    ctx: &Ctx<'_>,
) -> bool {
    let (shared, model) = (ctx.shared, ctx.model);
    let (id, created) = completion_id();
    let chunk_obj = |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let pieces = match mode {
        Mode::Paced { tokens, .. } => split_even(text, tokens),
        _ => pieces(text),
    };
    let res = (|| -> io::Result<bool> {
        start_sse(w)?;
        if let Mode::Paced { first_ms, .. } = mode {
            // The status line and headers are out (Pi is connected); the first token is late.
            w.flush()?;
            if shared.sleep(Duration::from_millis(first_ms)) {
                return Ok(false);
            }
        }
        sse(
            w,
            &chunk_obj(json!({"role": "assistant", "content": ""}), None),
        )?;
        if let Mode::Think { think_ms, gap_ms } = mode {
            let mut thought = 0;
            while thought < think_ms {
                sse(
                    w,
                    &chunk_obj(json!({"reasoning_content": "Thinking it over. "}), None),
                )?;
                if shared.sleep(Duration::from_millis(gap_ms.max(1))) {
                    return Ok(false);
                }
                thought += gap_ms.max(1);
            }
        }
        if mode == Mode::Stall {
            sse(w, &chunk_obj(json!({"content": pieces[0]}), None))?;
            shared.sleep(ctx.hang_limit);
            return Ok(false);
        }
        for (i, p) in pieces.iter().enumerate() {
            if matches!(mode, Mode::Drop | Mode::Reset) && i == 2 {
                break;
            }
            if let Mode::Paced {
                gap_ms,
                stall_after,
                ..
            } = mode
            {
                if stall_after == Some(i) {
                    shared.sleep(ctx.hang_limit);
                    return Ok(false);
                }
                if i > 0 && shared.sleep(Duration::from_millis(gap_ms)) {
                    return Ok(false);
                }
            }
            sse(w, &chunk_obj(json!({"content": p}), None))?;
            if mode == Mode::Slow && shared.sleep(Duration::from_millis(500)) {
                return Ok(false);
            }
        }
        if matches!(mode, Mode::Drop | Mode::Reset) {
            shared.sleep(Duration::from_millis(200));
            if mode == Mode::Reset {
                let _ = socket2::SockRef::from(&*w).set_linger(Some(Duration::ZERO));
            }
            return Ok(false);
        }
        if mode == Mode::Length {
            sse(w, &chunk_obj(json!({}), Some("length")))?;
        } else if mode != Mode::NoFinish {
            sse(w, &chunk_obj(json!({}), Some("stop")))?;
        }
        if mode == Mode::NegativeUsage {
            let (prompt, _) = usage;
            sse(
                w,
                &json!({"id": id, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": -100_000,
                                  "total_tokens": -99_000}}),
            )?;
        } else {
            send_usage(w, &id, created, usage, ctx)?;
        }
        finish_sse(w)?;
        Ok(true)
    })();
    res.unwrap_or(false)
}

pub(super) fn stream_tool(w: &mut TcpStream, name: &str, args: &Value, ctx: &Ctx<'_>) -> bool {
    let model = ctx.model;
    let (id, created) = completion_id();
    let call_id = format!("call_{}", id.trim_start_matches("chatcmpl-fake-"));
    let obj = |delta: Value, finish: Option<&str>| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let res = (|| -> io::Result<()> {
        start_sse(w)?;
        sse(
            w,
            &obj(
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
                None,
            ),
        )?;
        sse(
            w,
            &obj(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": args.to_string()}}]}),
                None,
            ),
        )?;
        sse(w, &obj(json!({}), Some("tool_calls")))?;
        send_usage(w, &id, created, TOOL_USAGE, ctx)?;
        finish_sse(w)
    })();
    res.is_ok()
}
