//! A fault-injecting RESP proxy in front of a real `redis-server`, for the tests of a slow, wedged
//! or flapping Redis: what a shared health store looks like behind a sick network or an
//! overloaded server, which a real Redis cannot be made to do on its own.
//!
//! * [`RespProxy::start`] / [`RespProxy::start_for_url`]: a `127.0.0.1` listener on an ephemeral
//!   port; every accepted connection gets its own upstream connection to the real server (a
//!   refused upstream closes the client's connection at once, like a proxy without a backend).
//!   [`RespProxy::url`] is the upstream URL (same userinfo, so the same password) with the
//!   proxy's host and port.
//! * Client bytes are forwarded upstream as they arrive, never held; the proxy parses them only
//!   enough to know which commands were sent (RESP arrays of bulk strings and inline commands),
//!   so it can count them by name and tell which reply answers which command. Replies are
//!   forwarded in order, each subject to the [`RespFault`] in force when it arrives (switchable at
//!   any time with [`RespProxy::set_fault`], also while connections are open):
//!   `Pass`, `Delay(ms)`, `DelayExceptAuth(ms)` (replies to `AUTH`/`HELLO` pass at once), `Drip(ms)`
//!   (one byte every `ms`), `Hang` (replies are held until the fault changes) and `Close` (new
//!   connections are closed at once, open ones within ~50 ms).
//! * Counters: connections accepted, commands seen by name, replies forwarded — so tests can
//!   assert round trips ([`RespProxy::commands`], [`RespProxy::wait_commands`]).
//! * Bounded memory whatever the client sends: 16 KiB read buffers, header lines of at most
//!   64 KiB (Redis' own inline limit), bulk strings streamed through rather than buffered, at most
//!   10 000 commands awaiting replies per connection (then the client is no longer read: TCP
//!   backpressure) and at most 256 distinct command names counted (the rest as `<other>`).
//! * Threads (std only): one acceptor, two per connection. Dropping the proxy ends them all
//!   within ~0.1 s whatever the fault, closing every client connection.
//!
//! Self-contained (no `support::` imports), so a bench can include it by `#[path]` too.

// A bench or example including this file would use only part of it.
#![allow(dead_code, clippy::disallowed_methods)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// What the proxy does with the replies of the real server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RespFault {
    /// Forward every reply at once.
    Pass,
    /// Hold every reply this many milliseconds (from its arrival from Redis) before forwarding it.
    Delay(u64),
    /// Like `Delay`, but the replies to `AUTH` and `HELLO` pass at once (a server that
    /// authenticates quickly and then stalls; order is kept, so such a reply still waits for an
    /// earlier held one).
    DelayExceptAuth(u64),
    /// Forward replies one byte every this many milliseconds.
    Drip(u64),
    /// Read and forward commands, never reply (replies are held until the fault changes).
    Hang,
    /// Close connections at once: new ones on accept, open ones within the poll interval.
    Close,
}

/// How often blocked threads look at the stop flag and the fault (read timeouts, waits).
const POLL: Duration = Duration::from_millis(50);
/// Longest header or inline line accepted (Redis' `PROTO_INLINE_MAX_SIZE`).
const MAX_LINE: usize = 64 * 1024;
/// Largest bulk string accepted (Redis' `proto-max-bulk-len` default).
const MAX_BULK: u64 = 512 * 1024 * 1024;
/// Deepest aggregate nesting accepted.
const MAX_DEPTH: usize = 64;
/// Bytes of a command name kept.
const MAX_NAME: usize = 32;
/// Commands awaiting their replies on one connection before the client is no longer read.
pub const MAX_PENDING: usize = 10_000;
/// Distinct command names counted; later ones are counted as [`OTHER`].
const MAX_NAMES: usize = 256;
/// The name the commands beyond [`MAX_NAMES`] are counted under.
pub const OTHER: &str = "<other>";
const CHUNK: usize = 16 * 1024;

// ---------------------------------------------------------------------------------------------
// Framing

/// Which way a [`Framer`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Client to server: arrays of bulk strings or inline commands.
    Commands,
    /// Server to client: any RESP2/RESP3 value.
    Replies,
}

/// A complete top-level value found by [`Framer::advance`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A command Redis answers: its name (first argument), upper-cased, at most 32 bytes; ""
    /// when the first element is not a bulk string (Redis answers that with a protocol error).
    Command(String),
    /// Input Redis answers with nothing: an empty inline line, `*0`, `*-1`.
    Nothing,
    /// One reply.
    Reply,
}

#[derive(Clone, Copy, Debug)]
enum St {
    /// Reading a header (or inline) line.
    Line,
    /// Inside a bulk string: bytes left, its trailing CRLF included.
    Bulk(u64),
}

/// Incremental RESP framer: finds where values end in a byte stream fed in arbitrary chunks,
/// holding at most one header line (64 KiB) and the first 32 bytes of a command name.
pub struct Framer {
    side: Side,
    st: St,
    line: Vec<u8>,
    /// Elements still missing in each open aggregate, outermost first.
    stack: Vec<u64>,
    /// The next element is a command's first argument.
    want_name: bool,
    /// The current bulk string is a command's first argument.
    capturing: bool,
    name: Vec<u8>,
}

impl Framer {
    pub fn new(side: Side) -> Framer {
        Framer {
            side,
            st: St::Line,
            line: Vec::new(),
            stack: Vec::new(),
            want_name: false,
            capturing: false,
            name: Vec::new(),
        }
    }

    /// Between values: the next byte starts a new top-level value.
    pub fn idle(&self) -> bool {
        matches!(self.st, St::Line) && self.line.is_empty() && self.stack.is_empty()
    }

    /// Consume bytes of `data` up to the end of the first top-level value that completes in it
    /// (or all of `data`): `(bytes consumed, the value if one completed)`. Malformed input (an
    /// unknown type byte, a bad length, a line over 64 KiB, nesting over 64) is an `Err`; the
    /// framer is then unusable.
    pub fn advance(&mut self, data: &[u8]) -> Result<(usize, Option<Frame>), String> {
        let mut i = 0;
        while i < data.len() {
            match self.st {
                St::Bulk(left) => {
                    let take = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(data.len() - i);
                    if self.capturing {
                        // Payload bytes are the ones before the trailing CRLF.
                        let payload = usize::try_from(left.saturating_sub(2)).unwrap_or(usize::MAX);
                        let room = MAX_NAME - self.name.len();
                        let keep = take.min(payload).min(room);
                        self.name.extend_from_slice(&data[i..i + keep]);
                    }
                    i += take;
                    let left = left - take as u64;
                    if left > 0 {
                        self.st = St::Bulk(left);
                    } else {
                        // The CRLF itself is not checked: the server judges that.
                        self.st = St::Line;
                        self.capturing = false;
                        if let Some(f) = self.value_done() {
                            return Ok((i, Some(f)));
                        }
                    }
                }
                St::Line => {
                    let rest = &data[i..];
                    let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                        if self.line.len() + rest.len() > MAX_LINE {
                            return Err(format!("a line longer than {MAX_LINE} bytes"));
                        }
                        self.line.extend_from_slice(rest);
                        return Ok((data.len(), None));
                    };
                    if self.line.len() + nl > MAX_LINE {
                        return Err(format!("a line longer than {MAX_LINE} bytes"));
                    }
                    self.line.extend_from_slice(&rest[..nl]);
                    i += nl + 1;
                    let mut line = std::mem::take(&mut self.line);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    let res = self.on_line(&line);
                    line.clear();
                    self.line = line; // keep the allocation
                    if let Some(f) = res? {
                        return Ok((i, Some(f)));
                    }
                }
            }
        }
        Ok((i, None))
    }

    fn on_line(&mut self, line: &[u8]) -> Result<Option<Frame>, String> {
        if self.side == Side::Commands && self.stack.is_empty() {
            if line.first() != Some(&b'*') {
                // An inline command (`PING\r\n`); Redis ignores empty ones without a reply.
                let word = line
                    .split(|b| b.is_ascii_whitespace())
                    .find(|w| !w.is_empty());
                return Ok(Some(match word {
                    Some(w) => Frame::Command(upper(&w[..w.len().min(MAX_NAME)])),
                    None => Frame::Nothing,
                }));
            }
            let n = parse_int(&line[1..])?;
            if n <= 0 {
                return Ok(Some(Frame::Nothing));
            }
            self.stack.push(n as u64);
            self.want_name = true;
            self.name.clear();
            return Ok(None);
        }
        let is_name = self.want_name && self.stack.len() == 1;
        self.want_name = false;
        let (&kind, rest) = line
            .split_first()
            .ok_or_else(|| "an empty line where a value was due".to_string())?;
        match kind {
            b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(self.value_done()),
            b'$' | b'!' | b'=' => {
                let n = parse_int(rest)?;
                if n == -1 {
                    return Ok(self.value_done());
                }
                if n < 0 || n as u64 > MAX_BULK {
                    return Err(format!("bad bulk length {n}"));
                }
                self.capturing = is_name;
                self.st = St::Bulk(n as u64 + 2);
                Ok(None)
            }
            b'*' | b'%' | b'~' | b'>' | b'|' => {
                let n = parse_int(rest)?;
                if n == -1 {
                    return Ok(self.value_done());
                }
                if n < 0 {
                    return Err(format!("bad aggregate length {n}"));
                }
                // Maps and attributes hold pairs; an attribute is followed by the value it
                // annotates, which belongs to the same reply.
                let n = n as u64 * if matches!(kind, b'%' | b'|') { 2 } else { 1 }
                    + u64::from(kind == b'|');
                if n == 0 {
                    return Ok(self.value_done());
                }
                if self.stack.len() >= MAX_DEPTH {
                    return Err(format!("aggregates nested deeper than {MAX_DEPTH}"));
                }
                self.stack.push(n);
                Ok(None)
            }
            other => Err(format!("unknown type byte {other:#04x}")),
        }
    }

    /// One value ended: close the aggregates it completes; `Some` when a top-level one ended.
    fn value_done(&mut self) -> Option<Frame> {
        loop {
            match self.stack.last_mut() {
                None => {
                    return Some(match self.side {
                        Side::Commands => Frame::Command(upper(&self.name)),
                        Side::Replies => Frame::Reply,
                    });
                }
                Some(n) => {
                    *n -= 1;
                    if *n > 0 {
                        return None;
                    }
                    self.stack.pop();
                }
            }
        }
    }
}

fn upper(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_uppercase()
}

fn parse_int(b: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an integer: {:?}", String::from_utf8_lossy(b)))
}

// ---------------------------------------------------------------------------------------------
// The proxy

struct Ctl {
    fault: RespFault,
    stop: bool,
}

#[derive(Default)]
struct Counts {
    accepted: u64,
    by_name: HashMap<String, u64>,
    commands: u64,
    replies: u64,
}

struct Shared {
    ctl: Mutex<Ctl>,
    /// Notified when the fault changes, on stop and when a connection dies.
    ctl_cv: Condvar,
    counts: Mutex<Counts>,
    counts_cv: Condvar,
}

impl Shared {
    fn ctl(&self) -> MutexGuard<'_, Ctl> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn stopped(&self) -> bool {
        self.ctl().stop
    }
    /// Stopped, or the fault is `Close`: the connection must end.
    fn closing(&self) -> bool {
        let c = self.ctl();
        c.stop || c.fault == RespFault::Close
    }
    fn wake(&self) {
        drop(self.ctl());
        self.ctl_cv.notify_all();
    }
    fn count_command(&self, name: &str) {
        let mut c = self.counts();
        c.commands += 1;
        let key = if c.by_name.contains_key(name) || c.by_name.len() < MAX_NAMES {
            name
        } else {
            OTHER
        };
        *c.by_name.entry(key.to_string()).or_default() += 1;
        drop(c);
        self.counts_cv.notify_all();
    }
    /// Wait (in slices of [`POLL`]) up to `d`; returns false when the wait must end early.
    fn pause(&self, d: Duration, dead: &AtomicBool) -> bool {
        let deadline = Instant::now() + d;
        let mut c = self.ctl();
        loop {
            if c.stop || c.fault == RespFault::Close || dead.load(Ordering::SeqCst) {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            c = self
                .ctl_cv
                .wait_timeout(c, (deadline - now).min(POLL))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

struct ConnEntry {
    /// A clone of the client socket, shut down on drop so blocked reads and writes end.
    client: TcpStream,
    handle: JoinHandle<()>,
}

/// The proxy. See the module docs.
pub struct RespProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    /// `scheme://userinfo@` of the upstream URL and the rest after its host:port.
    url_parts: Option<(String, String)>,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<ConnEntry>>>,
}

impl RespProxy {
    /// Proxy `127.0.0.1:<ephemeral port>` to `upstream_addr`, in `Pass`. Its [`RespProxy::url`]
    /// carries no password; use [`RespProxy::start_for_url`] for one that does.
    pub fn start(upstream_addr: SocketAddr) -> RespProxy {
        Self::start_inner(upstream_addr, None)
    }

    /// Proxy to the server of `upstream_url` (`redis://[user]:PASSWORD@127.0.0.1:PORT/DB`, or
    /// `rediss://`): [`RespProxy::url`] is that URL with the proxy's port. Panics on a URL without
    /// a loopback `ip:port`.
    pub fn start_for_url(upstream_url: &str) -> RespProxy {
        let (scheme, rest) = upstream_url
            .split_once("://")
            .unwrap_or_else(|| panic!("resp_proxy: not a URL: {upstream_url}"));
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (format!("{u}@"), h),
            None => (String::new(), authority),
        };
        let upstream: SocketAddr = hostport.parse().unwrap_or_else(|e| {
            panic!("resp_proxy: {upstream_url}: host:port {hostport:?} is not an address: {e}")
        });
        assert!(
            upstream.ip().is_loopback(),
            "resp_proxy: tests proxy only to loopback, not {upstream}"
        );
        Self::start_inner(
            upstream,
            Some((format!("{scheme}://{userinfo}"), path.to_string())),
        )
    }

    fn start_inner(upstream: SocketAddr, url_parts: Option<(String, String)>) -> RespProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("resp_proxy: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("resp_proxy: local_addr");
        let shared = Arc::new(Shared {
            ctl: Mutex::new(Ctl {
                fault: RespFault::Pass,
                stop: false,
            }),
            ctl_cv: Condvar::new(),
            counts: Mutex::default(),
            counts_cv: Condvar::new(),
        });
        let conns: Arc<Mutex<Vec<ConnEntry>>> = Arc::default();
        let acceptor = {
            let (shared, conns) = (shared.clone(), conns.clone());
            thread::Builder::new()
                .name(format!("resp-proxy-{}", addr.port()))
                .spawn(move || accept_loop(listener, upstream, &shared, &conns))
                .expect("resp_proxy: spawn acceptor")
        };
        RespProxy {
            addr,
            upstream,
            url_parts,
            shared,
            acceptor: Some(acceptor),
            conns,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The real server's address.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// The upstream URL with the proxy's `127.0.0.1:PORT` (same scheme, userinfo and database);
    /// `redis://127.0.0.1:PORT/0` for a proxy made by [`RespProxy::start`].
    pub fn url(&self) -> String {
        match &self.url_parts {
            Some((head, path)) => format!("{head}127.0.0.1:{}{path}", self.port()),
            None => format!("redis://127.0.0.1:{}/0", self.port()),
        }
    }

    /// Switch the fault; applies to the next reply of every connection, open ones included.
    pub fn set_fault(&self, fault: RespFault) {
        self.shared.ctl().fault = fault;
        self.shared.ctl_cv.notify_all();
    }

    pub fn fault(&self) -> RespFault {
        self.shared.ctl().fault
    }

    /// Connections accepted so far (including those closed at once by `Close`).
    pub fn accepted(&self) -> u64 {
        self.shared.counts().accepted
    }

    /// Wait until at least `n` connections were accepted or `timeout` passed; returns the count.
    pub fn wait_accepted(&self, n: u64, timeout: Duration) -> u64 {
        self.wait_counts(timeout, |c| c.accepted >= n).accepted
    }

    /// How many complete commands named `name` (case-insensitive) clients sent.
    pub fn commands(&self, name: &str) -> u64 {
        let name = name.to_ascii_uppercase();
        self.shared
            .counts()
            .by_name
            .get(&name)
            .copied()
            .unwrap_or(0)
    }

    /// Wait until at least `n` commands named `name` were seen or `timeout` passed; returns the
    /// count.
    pub fn wait_commands(&self, name: &str, n: u64, timeout: Duration) -> u64 {
        let name = name.to_ascii_uppercase();
        let c = self.wait_counts(timeout, |c| c.by_name.get(&name).copied().unwrap_or(0) >= n);
        c.by_name.get(&name).copied().unwrap_or(0)
    }

    /// Every command name seen with its count (upper-case names).
    pub fn command_counts(&self) -> BTreeMap<String, u64> {
        self.shared
            .counts()
            .by_name
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// All complete commands seen.
    pub fn total_commands(&self) -> u64 {
        self.shared.counts().commands
    }

    /// Replies forwarded in full to clients.
    pub fn replies(&self) -> u64 {
        self.shared.counts().replies
    }

    /// Zero every counter (connections accepted included).
    pub fn reset_counters(&self) {
        *self.shared.counts() = Counts::default();
    }

    fn wait_counts(
        &self,
        timeout: Duration,
        done: impl Fn(&Counts) -> bool,
    ) -> MutexGuard<'_, Counts> {
        let g = self.shared.counts();
        self.shared
            .counts_cv
            .wait_timeout_while(g, timeout, |c| !done(c))
            .unwrap_or_else(|e| e.into_inner())
            .0
    }
}

impl Drop for RespProxy {
    /// Stops accepting, closes every client connection and joins every thread (~0.1 s at most:
    /// all blocking reads have [`POLL`] timeouts and all waits watch the stop flag).
    fn drop(&mut self) {
        self.shared.ctl().stop = true;
        self.shared.ctl_cv.notify_all();
        self.shared.counts_cv.notify_all();
        // Wake the blocking accept(); that connection is dropped unserved.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        let conns: Vec<ConnEntry> = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for c in &conns {
            let _ = c.client.shutdown(Shutdown::Both);
        }
        for c in conns {
            let _ = c.handle.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    shared: &Arc<Shared>,
    conns: &Mutex<Vec<ConnEntry>>,
) {
    for stream in listener.incoming() {
        if shared.stopped() {
            break;
        }
        let Ok(client) = stream else {
            thread::sleep(Duration::from_millis(5));
            continue;
        };
        shared.counts().accepted += 1;
        shared.counts_cv.notify_all();
        if shared.closing() {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(clone) = client.try_clone() else {
            continue;
        };
        let handle = {
            let shared = shared.clone();
            thread::spawn(move || serve_conn(client, upstream, &shared))
        };
        let mut list = conns.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|c| !c.handle.is_finished());
        list.push(ConnEntry {
            client: clone,
            handle,
        });
    }
}

/// Commands sent on one connection whose replies have not started yet: (names, notified when
/// one is taken).
type Pending = (Mutex<VecDeque<String>>, Condvar);

fn serve_conn(client: TcpStream, upstream_addr: SocketAddr, shared: &Arc<Shared>) {
    let Ok(upstream) = TcpStream::connect_timeout(&upstream_addr, Duration::from_secs(2)) else {
        // No backend: the client sees its connection closed, as behind a real proxy.
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    for s in [&client, &upstream] {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(POLL));
    }
    let dead = Arc::new(AtomicBool::new(false));
    let pending: Arc<Pending> = Arc::default();
    let replies = match (client.try_clone(), upstream.try_clone()) {
        (Ok(c), Ok(u)) => {
            let (shared, dead, pending) = (shared.clone(), dead.clone(), pending.clone());
            thread::spawn(move || {
                pump_replies(u, c, &shared, &pending, &dead);
                dead.store(true, Ordering::SeqCst);
            })
        }
        _ => return,
    };
    pump_commands(&client, &upstream, shared, &pending, &dead);
    dead.store(true, Ordering::SeqCst);
    shared.wake();
    pending.1.notify_all();
    let _ = replies.join();
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
}

/// Client → server: forward every byte at once; note each complete command before its last
/// byte goes out, so its reply always finds it in `pending`.
fn pump_commands(
    mut client: &TcpStream,
    mut upstream: &TcpStream,
    shared: &Shared,
    pending: &Pending,
    dead: &AtomicBool,
) {
    let mut framer = Framer::new(Side::Commands);
    let mut buf = vec![0u8; CHUNK];
    loop {
        if dead.load(Ordering::SeqCst) || shared.closing() {
            return;
        }
        let n = match client.read(&mut buf) {
            Ok(0) => {
                // The client is done sending; let Redis finish answering and close.
                let _ = upstream.shutdown(Shutdown::Write);
                wait_dead(shared, dead);
                return;
            }
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let mut off = 0;
        let mut malformed = false;
        while off < n {
            match framer.advance(&buf[off..n]) {
                Ok((used, frame)) => {
                    if let Some(Frame::Command(name)) = frame {
                        // Counted once taken in, so a blocked client's backlog is not counted.
                        if !enqueue(pending, name.clone(), shared, dead) {
                            return;
                        }
                        shared.count_command(&name);
                    }
                    off += used;
                }
                Err(_) => {
                    // Redis answers this with a protocol error and closes: let it, then stop
                    // reading the client (its further bytes could not be framed anyway).
                    let _ = enqueue(pending, String::new(), shared, dead);
                    malformed = true;
                    break;
                }
            }
        }
        if upstream.write_all(&buf[..n]).is_err() {
            return;
        }
        if malformed {
            let _ = upstream.shutdown(Shutdown::Write);
            wait_dead(shared, dead);
            return;
        }
    }
}

/// Queue a command awaiting its reply; waits while [`MAX_PENDING`] are queued (backpressure on
/// a client that sends without reading). False when the connection must end.
fn enqueue(pending: &Pending, name: String, shared: &Shared, dead: &AtomicBool) -> bool {
    let (q, cv) = pending;
    let mut g = q.lock().unwrap_or_else(|e| e.into_inner());
    while g.len() >= MAX_PENDING {
        if dead.load(Ordering::SeqCst) || shared.closing() {
            return false;
        }
        g = cv
            .wait_timeout(g, POLL)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    g.push_back(name);
    true
}

/// Wait until the reply side ends the connection (or the proxy stops / closes it).
fn wait_dead(shared: &Shared, dead: &AtomicBool) {
    while !dead.load(Ordering::SeqCst) && !shared.closing() {
        let g = shared.ctl();
        let _ = shared.ctl_cv.wait_timeout(g, POLL);
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// How the bytes of one reply go out.
#[derive(Clone, Copy)]
enum Out {
    Now,
    Drip(u64),
}

/// Server → client: frame the replies, pair each with the command it answers, and forward it
/// under the fault in force when it begins.
fn pump_replies(
    mut upstream: TcpStream,
    mut client: TcpStream,
    shared: &Shared,
    pending: &Pending,
    dead: &AtomicBool,
) {
    let mut framer = Framer::new(Side::Replies);
    let mut buf = vec![0u8; CHUNK];
    let mut out = Out::Now;
    loop {
        if dead.load(Ordering::SeqCst) || shared.closing() {
            return;
        }
        let n = match upstream.read(&mut buf) {
            Ok(0) => return, // Redis closed (QUIT, a protocol error, a kill)
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let arrived = Instant::now();
        let mut off = 0;
        while off < n {
            if framer.idle() {
                // A RESP3 push (`>`) answers no command.
                let name = if buf[off] == b'>' {
                    None
                } else {
                    let (q, cv) = pending;
                    let name = q.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    cv.notify_all();
                    name
                };
                match gate(shared, name.as_deref(), arrived, dead) {
                    Some(o) => out = o,
                    None => return,
                }
            }
            let (used, done) = match framer.advance(&buf[off..n]) {
                Ok(r) => r,
                // Not expected from a real server; pass the rest through unframed.
                Err(_) => {
                    framer = Framer::new(Side::Replies);
                    (n - off, None)
                }
            };
            if !send(&mut client, &buf[off..off + used], out, shared, dead) {
                return;
            }
            if done.is_some() {
                shared.counts().replies += 1;
            }
            off += used;
        }
    }
}

/// Hold a reply that arrived at `arrived` and answers `name` as the fault says; `None` when the
/// connection must end (stop, `Close`, the other side gone).
fn gate(shared: &Shared, name: Option<&str>, arrived: Instant, dead: &AtomicBool) -> Option<Out> {
    let is_auth = matches!(name, Some("AUTH" | "HELLO"));
    let mut c = shared.ctl();
    loop {
        if c.stop || dead.load(Ordering::SeqCst) {
            return None;
        }
        let delay = match c.fault {
            RespFault::Pass => return Some(Out::Now),
            RespFault::Close => return None,
            RespFault::Drip(ms) => return Some(Out::Drip(ms)),
            RespFault::DelayExceptAuth(_) if is_auth => return Some(Out::Now),
            RespFault::Delay(ms) | RespFault::DelayExceptAuth(ms) => Some(ms),
            RespFault::Hang => None,
        };
        // Re-evaluated on every fault change: switching to `Pass` releases held replies.
        let wait = match delay {
            Some(ms) => {
                let due = arrived + Duration::from_millis(ms);
                let now = Instant::now();
                if now >= due {
                    return Some(Out::Now);
                }
                (due - now).min(POLL)
            }
            None => POLL,
        };
        c = shared
            .ctl_cv
            .wait_timeout(c, wait)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

fn send(
    client: &mut TcpStream,
    bytes: &[u8],
    out: Out,
    shared: &Shared,
    dead: &AtomicBool,
) -> bool {
    match out {
        Out::Now => client.write_all(bytes).is_ok(),
        Out::Drip(ms) => {
            for b in bytes {
                if client.write_all(std::slice::from_ref(b)).is_err() {
                    return false;
                }
                if !shared.pause(Duration::from_millis(ms), dead) {
                    return false;
                }
            }
            true
        }
    }
}
