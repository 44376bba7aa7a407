//! The fault-injecting RESP proxy of `support::resp_proxy`, in front of the real Redis of
//! `support::redis`: each fault, switching faults on open connections, the counters, prompt
//! teardown, malformed input, and its framer on its own.

use std::collections::BTreeMap;
use std::io::ErrorKind;

use crate::support::redis::{encode_command, read_resp};
use crate::support::resp_proxy::{Frame, Framer, MAX_PENDING, Side};
use proptest::prelude::*;

use super::*;

const IO: Duration = Duration::from_secs(5);

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// A raw connection to the proxy (for pipelining and reading without sending).
struct Raw {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Raw {
    fn connect(proxy: &RespProxy) -> Raw {
        let w = TcpStream::connect(proxy.addr()).expect("connect to the proxy");
        w.set_read_timeout(Some(IO)).unwrap();
        w.set_nodelay(true).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Raw { w, r }
    }
    fn send(&mut self, cmds: &[&[&str]]) {
        let mut wire = Vec::new();
        for c in cmds {
            let args: Vec<&[u8]> = c.iter().map(|a| a.as_bytes()).collect();
            wire.extend(encode_command(&args));
        }
        self.w.write_all(&wire).expect("write to the proxy");
    }
    fn read(&mut self) -> std::io::Result<Resp> {
        read_resp(&mut self.r)
    }
    #[track_caller]
    fn reply(&mut self) -> Resp {
        self.read().expect("a reply through the proxy")
    }
    fn timeout(&self, d: Duration) {
        self.w.set_read_timeout(Some(d)).unwrap();
    }
}

/// Poll `cond` every 5 ms until it holds or 5 s pass.
#[track_caller]
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// After a `Close` or a drop: the peer sees EOF, or a reset when it had unread bytes there.
#[track_caller]
fn assert_closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(IO)).unwrap();
    let mut buf = [0u8; 64];
    let r = s.read(&mut buf);
    assert!(
        matches!(&r, Ok(0)) || matches!(&r, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "connection still open: {r:?}"
    );
}

#[test]
fn resp_proxy_passes_commands_and_counts_them() {
    let server = RedisServer::start();
    let pw = server.password().to_string();
    let proxy = RespProxy::start_for_url(&server.url());
    assert_eq!(proxy.fault(), RespFault::Pass);
    assert_eq!(proxy.upstream(), server.addr());
    assert_eq!(
        proxy.url(),
        format!("redis://:{pw}@127.0.0.1:{}/0", proxy.port())
    );
    let with_user = RespProxy::start_for_url(&server.url_with_user());
    assert_eq!(
        with_user.url(),
        format!("redis://default:{pw}@127.0.0.1:{}/0", with_user.port())
    );
    let plain = RespProxy::start(server.addr());
    assert_eq!(plain.url(), format!("redis://127.0.0.1:{}/0", plain.port()));
    drop((with_user, plain));

    // The real server is behind it: the password is required, then PING/SET/GET work.
    let mut c = RedisConn::tcp(proxy.addr(), IO).unwrap();
    assert!(
        matches!(c.cmd(&["GET", "k"]).unwrap(), Resp::Error(e) if e.starts_with("NOAUTH")),
        "GET without AUTH"
    );
    c.auth(&pw).unwrap();
    assert_eq!(c.cmd(&["PING"]).unwrap(), Resp::Simple("PONG".into()));
    assert_eq!(c.cmd(&["SET", "k", "v1"]).unwrap(), Resp::ok());
    assert_eq!(c.cmd(&["GET", "k"]).unwrap(), Resp::bulk("v1"));
    assert_eq!(redis_cmd(&server, &["GET", "k"]), Resp::bulk("v1"));

    // Pipelined: a WATCH/MULTI/EXEC transaction in one write, then an empty inline line (no
    // reply from Redis) and an inline PING; replies come back in order, one per command.
    let mut raw = Raw::connect(&proxy);
    raw.send(&[
        &["AUTH", pw.as_str()],
        &["WATCH", "k"],
        &["MULTI"],
        &["SET", "k", "v2"],
        &["get", "k"],
        &["EXEC"],
    ]);
    raw.w.write_all(b"\r\nPING\r\n").unwrap();
    let replies: Vec<Resp> = (0..7).map(|_| raw.reply()).collect();
    let queued = Resp::Simple("QUEUED".into());
    assert_eq!(
        replies,
        [
            Resp::ok(),
            Resp::ok(),
            Resp::ok(),
            queued.clone(),
            queued,
            Resp::Array(vec![Resp::ok(), Resp::bulk("v2")]),
            Resp::Simple("PONG".into()),
        ]
    );

    // Counters: per name (case-insensitive), in total, connections, replies.
    let want: BTreeMap<String, u64> = [
        ("AUTH", 2),
        ("EXEC", 1),
        ("GET", 3),
        ("MULTI", 1),
        ("PING", 2),
        ("SET", 2),
        ("WATCH", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(proxy.command_counts(), want);
    assert_eq!((proxy.commands("watch"), proxy.commands("Multi")), (1, 1));
    assert_eq!(proxy.commands("UNSEEN"), 0);
    assert_eq!(proxy.total_commands(), 12);
    assert_eq!(proxy.accepted(), 2);
    eventually("12 replies counted", || proxy.replies() == 12);
    proxy.reset_counters();
    assert_eq!(
        (proxy.accepted(), proxy.total_commands(), proxy.replies()),
        (0, 0, 0)
    );
    assert!(proxy.command_counts().is_empty());
}

#[test]
fn resp_proxy_delay_holds_every_reply() {
    let server = RedisServer::start();
    let proxy = RespProxy::start_for_url(&server.url());
    proxy.set_fault(RespFault::Delay(200));
    assert_eq!(proxy.fault(), RespFault::Delay(200));
    let mut c = RedisConn::tcp(proxy.addr(), IO).unwrap();
    let mut took = Vec::new();
    let t = Instant::now();
    c.auth(server.password()).unwrap();
    took.push(t.elapsed());
    for cmd in [&["PING"][..], &["SET", "k", "v"], &["GET", "k"]] {
        let t = Instant::now();
        let r = c.cmd(cmd).unwrap();
        took.push(t.elapsed());
        assert!(!matches!(r, Resp::Error(_)), "{cmd:?}: {r:?}");
    }
    assert!(
        took.iter().all(|d| *d >= Duration::from_millis(200)),
        "a round trip under 200 ms: {took:?}"
    );
    // Replies that arrive together are each held 200 ms from their arrival, not one after
    // another (three in a pipeline take ~200 ms, not 600).
    let mut raw = Raw::connect(&proxy);
    raw.send(&[&["AUTH", server.password()], &["PING"], &["PING"]]);
    let t = Instant::now();
    for _ in 0..3 {
        raw.reply();
    }
    let pipelined = t.elapsed();
    assert!(
        pipelined >= Duration::from_millis(200) && pipelined < Duration::from_millis(590),
        "{pipelined:?}"
    );
    eprintln!("rig[resp-proxy] Delay(200): round trips {took:?}, pipeline of 3 {pipelined:?}");
}

#[test]
fn resp_proxy_delay_except_auth_and_switching_faults() {
    let server = RedisServer::start();
    let pw = server.password().to_string();
    redis_cmd(&server, &["SET", "k", "v"]);
    let proxy = RespProxy::start_for_url(&server.url());
    proxy.set_fault(RespFault::DelayExceptAuth(400));
    let mut c = RedisConn::tcp(proxy.addr(), IO).unwrap();
    let t = Instant::now();
    c.auth(&pw).unwrap();
    let auth = t.elapsed();
    let t = Instant::now();
    let hello = c.cmd(&["HELLO", "2", "AUTH", "default", &pw]).unwrap();
    let hello_took = t.elapsed();
    assert!(matches!(hello, Resp::Array(_)), "{hello:?}");
    let t = Instant::now();
    assert_eq!(c.cmd(&["GET", "k"]).unwrap(), Resp::bulk("v"));
    let get = t.elapsed();
    assert!(
        auth < Duration::from_millis(400) && hello_took < Duration::from_millis(400),
        "AUTH {auth:?} / HELLO {hello_took:?} were delayed"
    );
    assert!(get >= Duration::from_millis(400), "GET took only {get:?}");

    // Faults apply to open connections: a reply held by a long delay goes out as soon as the
    // fault is switched to Pass.
    proxy.set_fault(RespFault::Delay(60_000));
    let mut raw = Raw::connect(&proxy);
    raw.send(&[&["AUTH", pw.as_str()], &["GET", "k"]]);
    proxy.wait_commands("GET", 2, IO);
    raw.timeout(Duration::from_millis(200));
    let early = raw.read();
    assert!(
        matches!(&early, Err(e) if is_timeout(e)),
        "a reply before the delay ended: {early:?}"
    );
    raw.timeout(IO);
    let t = Instant::now();
    proxy.set_fault(RespFault::Pass);
    assert_eq!(raw.reply(), Resp::ok());
    assert_eq!(raw.reply(), Resp::bulk("v"));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    eprintln!(
        "rig[resp-proxy] DelayExceptAuth(400): AUTH {auth:?}, HELLO {hello_took:?}, GET {get:?}"
    );
}

#[test]
fn resp_proxy_drip_delivers_slowly_but_completely() {
    let server = RedisServer::start();
    redis_cmd(&server, &["SET", "k", "drip-drip"]);
    let proxy = RespProxy::start_for_url(&server.url());
    let mut raw = Raw::connect(&proxy);
    raw.send(&[&["AUTH", server.password()]]);
    assert_eq!(raw.reply(), Resp::ok());
    proxy.set_fault(RespFault::Drip(50));
    raw.send(&[&["GET", "k"]]);
    let want = b"$9\r\ndrip-drip\r\n";
    let mut got = Vec::new();
    let mut reads = 0;
    let mut first = None;
    let mut buf = [0u8; 64];
    while got.len() < want.len() {
        let n = raw.w.read(&mut buf).expect("a dripped byte within 5 s");
        assert!(n > 0, "closed after {got:?}");
        first.get_or_insert_with(Instant::now);
        got.extend_from_slice(&buf[..n]);
        reads += 1;
    }
    let spread = first.unwrap().elapsed();
    assert_eq!(got, want);
    assert_eq!(
        read_resp(&mut BufReader::new(&got[..])).unwrap(),
        Resp::bulk("drip-drip")
    );
    // 15 bytes one every 50 ms: the last arrives ≥ 700 ms after the first, nearly one per read.
    assert!(spread >= Duration::from_millis(700), "{spread:?}");
    assert!(reads >= 10, "only {reads} reads: not dripped");
    eprintln!("rig[resp-proxy] Drip(50): 15 bytes in {reads} reads over {spread:?}");
}

#[test]
fn resp_proxy_hang_holds_replies_and_close_closes() {
    let server = RedisServer::start();
    let proxy = RespProxy::start_for_url(&server.url());
    let mut c = RedisConn::tcp(proxy.addr(), Duration::from_millis(300)).unwrap();
    c.auth(server.password()).unwrap();
    proxy.set_fault(RespFault::Hang);
    // A client with a read timeout times out: the command reached the proxy, no reply came.
    let t = Instant::now();
    let e = c.cmd(&["PING"]).unwrap_err();
    assert!(is_timeout(&e), "{e}");
    assert!(
        t.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(proxy.commands("PING"), 1);

    // Held, not lost: back to Pass, the reply arrives (in order, before later ones).
    let mut raw = Raw::connect(&proxy);
    raw.send(&[&["AUTH", server.password()], &["ECHO", "held"]]);
    proxy.wait_commands("ECHO", 1, IO);
    raw.timeout(Duration::from_millis(300));
    let e = raw.read().unwrap_err();
    assert!(is_timeout(&e), "{e}");
    raw.timeout(IO);
    proxy.set_fault(RespFault::Pass);
    assert_eq!(raw.reply(), Resp::ok());
    assert_eq!(raw.reply(), Resp::bulk("held"));

    // Close: the open connection is closed at once, and so is every new one.
    let t = Instant::now();
    proxy.set_fault(RespFault::Close);
    assert_closed(&mut raw.w);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let before = proxy.accepted();
    let mut fresh = TcpStream::connect(proxy.addr()).unwrap();
    assert_closed(&mut fresh);
    assert_eq!(proxy.wait_accepted(before + 1, IO), before + 1);
    let e = RedisConn::tcp(proxy.addr(), IO)
        .and_then(|mut c| c.cmd(&["PING"]))
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
        ),
        "{e}"
    );

    // And back.
    proxy.set_fault(RespFault::Pass);
    let mut c = RedisConn::tcp(proxy.addr(), IO).unwrap();
    c.auth(server.password()).unwrap();
    assert_eq!(c.cmd(&["PING"]).unwrap(), Resp::Simple("PONG".into()));

    // A dead upstream: connections are accepted and closed, as by a proxy without a backend.
    let mut server = server;
    server.kill();
    let mut orphan = TcpStream::connect(proxy.addr()).unwrap();
    assert_closed(&mut orphan);
}

#[test]
fn resp_proxy_drop_ends_every_thread_promptly() {
    let server = RedisServer::start();
    let pw = server.password().to_string();
    let proxy = RespProxy::start_for_url(&server.url());
    let mut conns: Vec<Raw> = (0..3).map(|_| Raw::connect(&proxy)).collect();
    for c in &mut conns {
        c.send(&[&["AUTH", pw.as_str()]]);
        assert_eq!(c.reply(), Resp::ok());
    }
    // One reply held by Hang, then dripping at 1 byte/s; one held by a minute's delay; one idle
    // connection; one more client that sent nothing at all.
    proxy.set_fault(RespFault::Hang);
    conns[0].send(&[&["PING"]]);
    proxy.wait_commands("PING", 1, IO);
    proxy.set_fault(RespFault::Drip(1000));
    let mut b = [0u8; 1];
    conns[0].r.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"+");
    proxy.set_fault(RespFault::Delay(60_000));
    conns[1].send(&[&["GET", "k"]]);
    proxy.wait_commands("GET", 1, IO);
    let mut silent = TcpStream::connect(proxy.addr()).unwrap();
    assert_eq!(proxy.wait_accepted(4, IO), 4);
    let t = Instant::now();
    drop(proxy);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(1), "drop took {took:?}");
    for c in &mut conns {
        assert_closed(&mut c.w);
    }
    assert_closed(&mut silent);
    eprintln!("rig[resp-proxy] drop with held, dripping and idle connections: {took:?}");
}

#[test]
fn resp_proxy_malformed_input_gets_redis_own_answer() {
    let server = RedisServer::start();
    let proxy = RespProxy::start_for_url(&server.url());
    let mut raw = Raw::connect(&proxy);
    raw.send(&[&["AUTH", server.password()]]);
    assert_eq!(raw.reply(), Resp::ok());
    // An inline line that never ends: past 64 KiB the proxy stops framing, and Redis answers
    // with its own protocol error and closes.
    let endless = vec![b'a'; 70 * 1024];
    raw.w.write_all(&endless).unwrap();
    match raw.reply() {
        Resp::Error(e) => assert!(e.starts_with("ERR Protocol error"), "{e}"),
        other => panic!("expected Redis' protocol error, got {other:?}"),
    }
    assert_closed(&mut raw.w);
    assert_eq!(proxy.total_commands(), 1, "{:?}", proxy.command_counts());
    // The proxy itself goes on.
    let mut c = RedisConn::tcp(proxy.addr(), IO).unwrap();
    c.auth(server.password()).unwrap();
    assert_eq!(c.cmd(&["PING"]).unwrap(), Resp::Simple("PONG".into()));
}

#[test]
fn resp_proxy_stops_reading_a_client_that_never_reads() {
    let server = RedisServer::start();
    let proxy = RespProxy::start_for_url(&server.url());
    let mut raw = Raw::connect(&proxy);
    raw.send(&[&["AUTH", server.password()]]);
    assert_eq!(raw.reply(), Resp::ok());
    // Twice the pending bound of inline PINGs while replies are held: the proxy takes the first
    // MAX_PENDING and then leaves the rest in the kernel's buffers (bounded memory).
    proxy.set_fault(RespFault::Hang);
    let n = 2 * MAX_PENDING;
    raw.w.write_all(&b"PING\r\n".repeat(n)).unwrap();
    // Taken in: MAX_PENDING awaiting replies, plus the one whose reply Redis sent first (held
    // by Hang, so no longer pending).
    let bound = MAX_PENDING as u64 + 1;
    assert_eq!(proxy.wait_commands("PING", bound, IO), bound);
    // Nothing more is read while the queue is full (a bounded look for growth, not a sync).
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(proxy.commands("PING"), bound);
    // Released, every reply arrives, in order, and the rest of the commands are read.
    proxy.set_fault(RespFault::Pass);
    for i in 0..n {
        assert_eq!(raw.reply(), Resp::Simple("PONG".into()), "reply {i}");
    }
    assert_eq!(proxy.commands("PING"), n as u64);
}

// ---------------------------------------------------------------------------------------------
// The framer on its own

/// Feed `wire` in chunks of the given sizes (cycled); collect the frames.
fn frames(side: Side, wire: &[u8], chunks: &[usize]) -> Result<Vec<Frame>, String> {
    let mut f = Framer::new(side);
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < wire.len() {
        let size = chunks
            .get(k % chunks.len().max(1))
            .copied()
            .unwrap_or(1)
            .max(1);
        k += 1;
        let chunk = &wire[pos..(pos + size).min(wire.len())];
        let mut off = 0;
        while off < chunk.len() {
            let (used, frame) = f.advance(&chunk[off..])?;
            assert!(used > 0, "no progress");
            off += used;
            out.extend(frame);
        }
        pos += chunk.len();
    }
    assert!(f.idle(), "input ended inside a value");
    Ok(out)
}

fn reply_tree() -> impl Strategy<Value = Resp> {
    let line = "[^\r\n]{0,12}";
    let leaf = prop_oneof![
        line.prop_map(Resp::Simple),
        line.prop_map(Resp::Error),
        any::<i64>().prop_map(Resp::Int),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Resp::Bulk),
        Just(Resp::Nil),
    ];
    leaf.prop_recursive(3, 30, 5, |inner| {
        proptest::collection::vec(inner, 0..5).prop_map(Resp::Array)
    })
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 500,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Commands split anywhere frame the same: one name per command, binary-safe arguments.
    #[test]
    fn framer_commands_in_any_chunks(
        cmds in proptest::collection::vec(
            ("[a-zA-Z]{1,40}", proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30), 0..4)),
            1..6),
        chunks in proptest::collection::vec(1usize..40, 1..8),
    ) {
        let mut wire = Vec::new();
        let mut want = Vec::new();
        for (name, args) in &cmds {
            let mut parts: Vec<&[u8]> = vec![name.as_bytes()];
            parts.extend(args.iter().map(Vec::as_slice));
            wire.extend(encode_command(&parts));
            let keep = &name[..name.len().min(32)];
            want.push(Frame::Command(keep.to_ascii_uppercase()));
        }
        prop_assert_eq!(frames(Side::Commands, &wire, &chunks).unwrap(), want);
    }

    /// Replies split anywhere: exactly one frame per value.
    #[test]
    fn framer_replies_in_any_chunks(
        values in proptest::collection::vec(reply_tree(), 1..6),
        chunks in proptest::collection::vec(1usize..40, 1..8),
    ) {
        let wire: Vec<u8> = values.iter().flat_map(Resp::encode).collect();
        let got = frames(Side::Replies, &wire, &chunks).unwrap();
        prop_assert_eq!(got, vec![Frame::Reply; values.len()]);
    }

    #[test]
    fn framer_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        for side in [Side::Commands, Side::Replies] {
            let mut f = Framer::new(side);
            let mut off = 0;
            while off < bytes.len() {
                match f.advance(&bytes[off..]) {
                    Ok((used, _)) => off += used,
                    Err(_) => break,
                }
            }
        }
    }
}

#[test]
fn framer_limits_and_shapes() {
    let cmd = |wire: &[u8]| frames(Side::Commands, wire, &[wire.len()]);
    let rep = |wire: &[u8]| frames(Side::Replies, wire, &[wire.len()]);
    // Inline commands, empty inline lines, empty and null arrays (no reply from Redis).
    assert_eq!(
        cmd(b"ping\r\n  set k v\n\r\n*0\r\n*-1\r\n").unwrap(),
        [
            Frame::Command("PING".into()),
            Frame::Command("SET".into()),
            Frame::Nothing,
            Frame::Nothing,
            Frame::Nothing
        ]
    );
    // A first argument that is not a bulk string has no name.
    assert_eq!(
        cmd(b"*1\r\n:1\r\n").unwrap(),
        [Frame::Command(String::new())]
    );
    // RESP3 replies: maps, sets, pushes, attributes (with the value they annotate), verbatim
    // strings, doubles, booleans, nulls, big numbers, blob errors.
    let resp3 = b"%1\r\n+a\r\n:1\r\n~2\r\n#t\r\n,1.5\r\n>2\r\n+message\r\n_\r\n\
                  |1\r\n+ttl\r\n:3\r\n$1\r\nx\r\n=7\r\ntxt:abc\r\n(123\r\n!3\r\nerr\r\n";
    assert_eq!(rep(resp3).unwrap(), vec![Frame::Reply; 7]);
    // Limits: a line over 64 KiB, nesting over 64, bad lengths, unknown types.
    let long = [b"+".as_slice(), &vec![b'a'; 70_000]].concat();
    assert!(rep(&long).is_err());
    assert!(cmd(&vec![b'a'; 70_000]).is_err());
    assert!(rep(&b"*1\r\n".repeat(65)).is_err());
    assert!(rep(&[b"*1\r\n".repeat(63), b":1\r\n".to_vec()].concat()).is_ok());
    assert!(rep(b"$536870913\r\n").is_err());
    assert!(rep(b"$-2\r\n").is_err());
    assert!(rep(b"*x\r\n").is_err());
    assert!(rep(b"?\r\n").is_err());
    assert!(cmd(b"*1\r\n?\r\n").is_err());
    // A claimed length is streamed, not buffered: 10 MB of bulk in small pieces is fine.
    let mut f = Framer::new(Side::Replies);
    assert_eq!(f.advance(b"$10000000\r\n").unwrap(), (11, None));
    let piece = vec![b'z'; 1 << 16];
    let mut sent = 0;
    while sent < 10_000_000 {
        let n = piece.len().min(10_000_000 - sent);
        assert_eq!(f.advance(&piece[..n]).unwrap(), (n, None));
        sent += n;
    }
    assert_eq!(f.advance(b"\r\n+next").unwrap(), (2, Some(Frame::Reply)));
}
