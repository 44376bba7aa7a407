//! The real Redis of `support::redis` and its RESP client; the black hole.

use std::io::{BufReader, Cursor, ErrorKind};
use std::os::unix::fs::PermissionsExt;

use crate::support::redis::{encode_command, read_resp};
use proptest::prelude::*;

use super::*;

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still show, so read its state too.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn redis_server_lifecycle() {
    let t0 = Instant::now();
    let bin = redis_server_bin();
    let t_bin = t0.elapsed();
    assert!(bin.is_file(), "{}", bin.display());
    let mut server = RedisServer::start();
    let t_start = t0.elapsed() - t_bin;
    let (port, pw) = (server.port(), server.password().to_string());
    assert_eq!(pw.len(), 32);
    assert!(pw.bytes().all(|b| b.is_ascii_hexdigit()), "{pw}");
    assert_eq!(server.url(), format!("redis://:{pw}@127.0.0.1:{port}/0"));
    assert_eq!(
        server.url_with_user(),
        format!("redis://default:{pw}@127.0.0.1:{port}/0")
    );
    assert_eq!(
        server.unix_url(),
        format!("unix://:{pw}@{}", server.socket_path().display())
    );

    // Answers PING once authenticated; the configuration is what the module promises.
    assert_eq!(redis_cmd(&server, &["PING"]), Resp::Simple("PONG".into()));
    let config = |name: &str| match redis_cmd(&server, &["CONFIG", "GET", name]) {
        Resp::Array(v) if v.len() == 2 => v[1].as_str().unwrap_or("?").to_string(),
        other => panic!("CONFIG GET {name}: {other:?}"),
    };
    assert_eq!(config("bind"), "127.0.0.1");
    assert_eq!(config("save"), "");
    assert_eq!(config("appendonly"), "no");
    assert_eq!(config("daemonize"), "no");
    assert_eq!(config("unixsocketperm"), "700");
    let mode = std::fs::metadata(server.socket_path())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let pid = server.pid().unwrap();
    // SAFETY: getpgid(2) on a pid we own.
    assert_eq!(
        unsafe { libc::getpgid(pid as i32) },
        pid as i32,
        "own group"
    );

    // The password is required (no AUTH, wrong password), accepted with or without the user.
    let mut anon = RedisConn::tcp(server.addr(), Duration::from_secs(2)).unwrap();
    match anon.cmd(&["GET", "k"]).unwrap() {
        Resp::Error(e) => assert!(e.starts_with("NOAUTH"), "{e}"),
        other => panic!("unauthenticated GET answered {other:?}"),
    }
    match anon.cmd(&["AUTH", "wrong"]).unwrap() {
        Resp::Error(e) => assert!(e.starts_with("WRONGPASS"), "{e}"),
        other => panic!("wrong password answered {other:?}"),
    }
    assert_eq!(
        anon.auth("wrong").unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(anon.cmd(&["AUTH", "default", &pw]).unwrap(), Resp::ok());

    // Types through the client: simple, bulk, nil, integer, array, error; binary-safe bulk.
    assert_eq!(redis_cmd(&server, &["SET", "k", "v1"]), Resp::ok());
    assert_eq!(redis_cmd(&server, &["GET", "k"]), Resp::bulk("v1"));
    assert_eq!(redis_cmd(&server, &["GET", "missing"]), Resp::Nil);
    assert_eq!(redis_cmd(&server, &["INCR", "n"]), Resp::Int(1));
    assert_eq!(redis_cmd(&server, &["RPUSH", "l", "a", "b"]), Resp::Int(2));
    assert_eq!(
        redis_cmd(&server, &["LRANGE", "l", "0", "-1"]),
        Resp::Array(vec![Resp::bulk("a"), Resp::bulk("b")])
    );
    assert!(matches!(redis_cmd(&server, &["INCR", "k"]), Resp::Error(e) if e.starts_with("ERR")));
    let mut c = RedisConn::tcp(server.addr(), Duration::from_secs(2)).unwrap();
    c.auth(&pw).unwrap();
    let binary: Vec<u8> = (0..=255u8).chain(*b"\r\n$-1\r\n").collect();
    assert_eq!(c.cmd_bytes(&[b"SET", b"bin", &binary]).unwrap(), Resp::ok());
    assert_eq!(c.cmd(&["GET", "bin"]).unwrap(), Resp::Bulk(binary));

    // The unix socket needs the password too.
    let mut u = RedisConn::unix(&server.socket_path(), Duration::from_secs(2)).unwrap();
    assert!(matches!(u.cmd(&["PING"]).unwrap(), Resp::Error(e) if e.starts_with("NOAUTH")));
    u.auth(&pw).unwrap();
    assert_eq!(u.cmd(&["GET", "k"]).unwrap(), Resp::bulk("v1"));

    // restart(): same port and password, a new process, empty (no persistence).
    let t = Instant::now();
    server.restart();
    let t_restart = t.elapsed();
    assert_eq!((server.port(), server.password()), (port, pw.as_str()));
    let pid2 = server.pid().unwrap();
    assert_ne!(pid, pid2);
    assert!(!alive(pid), "old server still running");
    assert_eq!(redis_cmd(&server, &["GET", "k"]), Resp::Nil);
    assert!(c.cmd(&["PING"]).is_err(), "connection survived a restart");
    let mut u = RedisConn::unix(&server.socket_path(), Duration::from_secs(2)).unwrap();
    u.auth(&pw).unwrap();
    assert_eq!(u.cmd(&["PING"]).unwrap(), Resp::Simple("PONG".into()));

    // kill(): open connections break, new ones are refused.
    let mut open = RedisConn::tcp(server.addr(), Duration::from_secs(2)).unwrap();
    open.auth(&pw).unwrap();
    server.kill();
    assert_eq!(server.pid(), None);
    assert!(!alive(pid2));
    assert!(open.cmd(&["PING"]).is_err());
    let e = try_redis_cmd(&server, &["PING"]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    assert!(RedisConn::unix(&server.socket_path(), Duration::from_secs(1)).is_err());
    server.kill(); // idempotent

    // And back again after a kill.
    server.restart();
    assert_eq!(redis_cmd(&server, &["PING"]), Resp::Simple("PONG".into()));

    // Two servers side by side; Drop kills.
    let other = RedisServer::start();
    assert_ne!(other.port(), server.port());
    assert_ne!(other.password(), server.password());
    let other_pid = other.pid().unwrap();
    drop(other);
    assert!(
        !alive(other_pid),
        "Drop left redis-server {other_pid} running"
    );
    eprintln!(
        "rig[redis]: binary {:.2}s, start {:.2}s, restart {:.2}s",
        t_bin.as_secs_f64(),
        t_start.as_secs_f64(),
        t_restart.as_secs_f64()
    );
}

#[test]
fn black_hole_never_answers() {
    let bh = BlackHole::start();
    assert_eq!(bh.base_url(), format!("http://127.0.0.1:{}/v1", bh.port()));
    assert_eq!(bh.addr().ip().to_string(), "127.0.0.1");
    let mut s = TcpStream::connect(bh.addr()).unwrap();
    assert_eq!(bh.wait_accepted(1, Duration::from_secs(5)), 1);
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let t = Instant::now();
    let e = s.read(&mut [0u8; 16]).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e}"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(290),
        "{:?}",
        t.elapsed()
    );

    // A Redis client times out instead of hanging or being refused.
    let mut r = RedisConn::tcp(bh.addr(), Duration::from_millis(200)).unwrap();
    let e = r.cmd(&["PING"]).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e}"
    );
    assert_eq!(bh.wait_accepted(2, Duration::from_secs(5)), 2);
    assert_eq!(bh.accepted(), 2);
    assert!(bh.redis_url().starts_with("redis://:pw@127.0.0.1:"));

    // Dropping it closes the held connections: a client that sent nothing sees EOF, one with
    // unread bytes in the hole a reset (the kernel's rule for closing with unread data).
    let mut quiet = TcpStream::connect(bh.addr()).unwrap();
    assert_eq!(bh.wait_accepted(3, Duration::from_secs(5)), 3);
    drop(bh);
    quiet
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(quiet.read(&mut [0u8; 16]).unwrap(), 0);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = s.read(&mut [0u8; 16]);
    assert!(
        matches!(&r, Ok(0)) || matches!(&r, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "{r:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The RESP reader on its own

fn parse(bytes: &[u8]) -> std::io::Result<Resp> {
    read_resp(&mut BufReader::new(Cursor::new(bytes.to_vec())))
}

fn resp_tree() -> impl Strategy<Value = Resp> {
    let line = "[^\r\n]{0,20}";
    let leaf = prop_oneof![
        line.prop_map(Resp::Simple),
        line.prop_map(Resp::Error),
        any::<i64>().prop_map(Resp::Int),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Resp::Bulk),
        Just(Resp::Nil),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Resp::Array)
    })
}

fn proptest_config() -> ProptestConfig {
    // The crate's shared config (src/fuzz.rs) is private to the library; same settings here.
    ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn resp_round_trips(v in resp_tree()) {
        prop_assert_eq!(parse(&v.encode()).unwrap(), v);
    }

    #[test]
    fn resp_reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn resp_reader_rejects_truncations(v in resp_tree(), cut in any::<prop::sample::Index>()) {
        let wire = v.encode();
        let at = cut.index(wire.len());
        prop_assert!(parse(&wire[..at]).is_err(), "prefix of {} bytes parsed", at);
    }
}

#[test]
fn resp_reader_limits_and_errors() {
    let kind = |b: &[u8]| parse(b).unwrap_err().kind();
    // Nesting deeper than 32 is refused, not a stack overflow.
    let deep: Vec<u8> = b"*1\r\n".repeat(10_000);
    assert_eq!(kind(&deep), ErrorKind::InvalidData);
    let ok_depth = [b"*1\r\n".repeat(32), b":1\r\n".to_vec()].concat();
    assert!(parse(&ok_depth).is_ok());
    // A claimed length is not allocated up front; a short body is EOF.
    assert_eq!(kind(b"$536870912\r\nabc"), ErrorKind::UnexpectedEof);
    assert_eq!(kind(b"$536870913\r\nabc\r\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b"*2147483647\r\n:1\r\n"), ErrorKind::UnexpectedEof);
    assert_eq!(kind(b"$-2\r\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b"*-2\r\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b"$3\r\nabcd\r\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b":12x\r\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b"+OK\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b"\r\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b"%1\r\n"), ErrorKind::InvalidData);
    assert_eq!(kind(b""), ErrorKind::UnexpectedEof);
    // A header line longer than 64 KiB is refused without waiting for its end.
    let long = [b"+".as_slice(), &vec![b'a'; 70_000]].concat();
    assert_eq!(kind(&long), ErrorKind::InvalidData);
    assert_eq!(parse(b"*-1\r\n").unwrap(), Resp::Nil);
    assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Resp::bulk(""));
    assert_eq!(
        encode_command(&[b"GET", b"k"]),
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    );
}

/// The installer's sequence against a scripted `apt-get`: install fails for a missing package
/// list → `apt-get update` → install again → the binary is found. Plus the refusals.
#[test]
fn redis_installer_sequence() {
    use crate::support::redis::find_or_install;
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = tmp.path().join("apt.log");
    let lock = tmp.path().join("install.lock");
    let script = format!(
        r#"#!/bin/sh
echo "$DEBIAN_FRONTEND $*" >> '{log}'
case "$*" in
  *" update") touch '{dir}/updated'; exit 0 ;;
  *" install "*)
    if [ -e '{dir}/updated' ] && [ ! -e '{dir}/broken' ]; then
      printf '#!/bin/sh\n' > '{bin}/redis-server'; chmod 755 '{bin}/redis-server'; exit 0
    fi
    echo "E: Unable to locate package redis-server" >&2; exit 100 ;;
esac
exit 1
"#,
        log = log.display(),
        dir = tmp.path().display(),
        bin = bin.display()
    );
    let apt = bin.join("apt-get");
    std::fs::write(&apt, script).unwrap();
    std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dirs = vec![bin.clone()];

    // Not root: refuses to install, says why.
    let e = find_or_install(&dirs, false, &lock).unwrap_err();
    assert!(
        e.contains("not root") && e.contains("apt-get install redis-server"),
        "{e}"
    );
    assert!(!log.exists(), "apt-get ran without root");

    // Root: install fails, update, install again, found.
    let got = find_or_install(&dirs, true, &lock).unwrap();
    assert_eq!(got, bin.join("redis-server"));
    let calls = std::fs::read_to_string(&log).unwrap();
    let install =
        "noninteractive -o DPkg::Lock::Timeout=600 install -y --no-install-recommends redis-server";
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            install,
            "noninteractive -o DPkg::Lock::Timeout=600 update",
            install
        ]
    );
    // Found now: apt-get is not run again.
    assert_eq!(find_or_install(&dirs, true, &lock).unwrap(), got);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), calls);

    // Still failing after the update: both failures are reported.
    std::fs::remove_file(&got).unwrap();
    std::fs::write(tmp.path().join("broken"), "").unwrap();
    let e = find_or_install(&dirs, true, &lock).unwrap_err();
    assert!(
        e.contains("and again after apt-get update")
            && e.matches("Unable to locate package redis-server").count() == 2,
        "{e}"
    );

    // No apt-get at all.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = find_or_install(&[empty], true, &lock).unwrap_err();
    assert!(e.contains("no apt-get"), "{e}");
}
