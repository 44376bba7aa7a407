//! A real `redis-server` for the Redis health-store tests, and a tiny synchronous RESP2 client
//! to look at what the runner stored.
//!
//! * [`redis_server_bin`] finds `redis-server` (PATH, `/usr/bin`, `/usr/sbin`, `/usr/local/bin`);
//!   when it is missing and we are root with `apt-get`, it installs the Debian package
//!   `redis-server` (`apt-get update` and a retry if the first install fails), serialised across
//!   test processes by `<target>/redis-install.lock` and across worktrees by dpkg's own lock
//!   (waited for). Cannot be had → PANIC with the reason: tests that need Redis fail, never skip.
//! * [`RedisServer::start`]: its own temp dir, `127.0.0.1` and a unix socket only, an ephemeral
//!   port, a random password, no persistence, its own process group; it dies with the thread
//!   that started it (`PR_SET_PDEATHSIG`), so even a SIGKILLed test binary leaves no server
//!   behind. [`RedisServer::kill`] / [`RedisServer::restart`] simulate outages.
//! * URLs (what the runner is expected to accept in `CCSWITCH_HEALTH_URL`):
//!   `redis://:PASSWORD@127.0.0.1:PORT/0`, `redis://default:PASSWORD@127.0.0.1:PORT/0`, and for
//!   the unix socket the same userinfo form with an empty host:
//!   `unix://:PASSWORD@/abs/path/redis.sock` (go-redis, redis-rb and redis-py read it this way).
//! * [`redis_cmd`] / [`RedisConn`]: RESP2 over TCP or the unix socket, with timeouts; the reader
//!   is bounded (line length, nesting depth; bulk bodies grow only as data arrives).

// Also compiled into the benches and the demo (by `#[path]`), which use only part of it.
#![allow(dead_code, clippy::disallowed_methods)]

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a started server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Read/write timeout of [`redis_cmd`] connections.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest `+`/`-`/`:`/`$`/`*` header line the reader accepts.
const MAX_LINE: usize = 64 * 1024;
/// Largest bulk string the reader accepts (Redis' own `proto-max-bulk-len` default).
const MAX_BULK: i64 = 512 * 1024 * 1024;
/// Deepest array nesting the reader accepts.
const MAX_DEPTH: usize = 32;

// ---------------------------------------------------------------------------------------------
// Finding or installing redis-server

/// The `redis-server` executable, found or installed once per process. Panics with the reason
/// when it cannot be had.
pub fn redis_server_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let res = BIN.get_or_init(|| {
        // SAFETY: geteuid(2) has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        find_or_install(&search_dirs(), root, &install_lock_path())
    });
    match res {
        Ok(p) => p.clone(),
        Err(e) => panic!("redis: no redis-server: {e}"),
    }
}

/// PATH, then the usual system directories.
fn search_dirs() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/bin", "/usr/sbin", "/usr/local/bin"].map(PathBuf::from));
    dirs
}

fn find_exe(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `redis-server` from `dirs`, else installed with the `apt-get` found in `dirs` (only as
/// `root`), under an exclusive lock on `lock`. Public for the rig's own test, which drives it
/// with a scripted `apt-get`.
pub fn find_or_install(dirs: &[PathBuf], root: bool, lock: &Path) -> Result<PathBuf, String> {
    if let Some(p) = find_exe(dirs, "redis-server") {
        return Ok(p);
    }
    let searched = format!(
        "not found in {}",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    );
    if !root {
        return Err(format!(
            "redis-server {searched}, and not root so it cannot be installed; install the \
             Debian package redis-server (apt-get install redis-server)"
        ));
    }
    let apt = find_exe(dirs, "apt-get").ok_or_else(|| {
        format!("redis-server {searched}, and there is no apt-get to install it with")
    })?;
    let _lock = lock_file(lock)?;
    // Another process may have installed it while we waited for the lock.
    if let Some(p) = find_exe(dirs, "redis-server") {
        return Ok(p);
    }
    let t0 = Instant::now();
    eprintln!("redis: installing the Debian package redis-server with apt-get ...");
    let install = ["install", "-y", "--no-install-recommends", "redis-server"];
    if let Err(first) = apt_get(&apt, &install) {
        // Typically an empty or stale package list (fresh machine): refresh it once.
        eprintln!("redis: apt-get install failed; running apt-get update and retrying");
        apt_get(&apt, &["update"]).map_err(|e| {
            format!("apt-get install failed:\n{first}\nthen apt-get update failed:\n{e}")
        })?;
        apt_get(&apt, &install).map_err(|e| {
            format!("apt-get install failed:\n{first}\nand again after apt-get update:\n{e}")
        })?;
    }
    let bin = find_exe(dirs, "redis-server")
        .ok_or_else(|| format!("apt-get installed redis-server but the binary is {searched}"))?;
    eprintln!(
        "redis: installed {} in {:.1} s",
        bin.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(bin)
}

/// `<target>/redis-install.lock`: one installer at a time among this worktree's test binaries.
fn install_lock_path() -> PathBuf {
    let target = match option_env!("CARGO_TARGET_TMPDIR") {
        Some(tmp) => Path::new(tmp)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(tmp)),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
    };
    target.join("redis-install.lock")
}

/// Exclusive lock on `path`, held until the returned file is dropped.
fn lock_file(path: &Path) -> Result<fs::File, String> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    f.lock()
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    Ok(f)
}

fn apt_get(apt: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new(apt)
        // Other worktrees' tests may be installing at the same moment: wait for dpkg's lock
        // instead of failing at once.
        .args(["-o", "DPkg::Lock::Timeout=600"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", apt.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let tail = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    Err(format!(
        "`apt-get {}` failed ({}):\n{}\n{}",
        args.join(" "),
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    ))
}

// ---------------------------------------------------------------------------------------------
// The server

/// A running `redis-server` (see the module docs). Dropping it kills the server.
pub struct RedisServer {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    password: String,
    child: Option<Child>,
}

impl RedisServer {
    /// Start a fresh server; panics (with its log) if it does not answer within 10 s.
    ///
    /// The server dies with the *thread* that started it (that is what `PR_SET_PDEATHSIG`
    /// watches), so start it in the test that uses it, not in a static shared between tests.
    pub fn start() -> RedisServer {
        let bin = redis_server_bin();
        // /tmp keeps the socket path far below the 108-byte sun_path limit.
        let dir = tempfile::Builder::new()
            .prefix("pccr-redis-")
            .tempdir_in("/tmp")
            .expect("redis: create temp dir");
        let mut server = RedisServer {
            bin,
            dir,
            port: 0,
            password: random_hex(16),
            child: None,
        };
        let mut errors = Vec::new();
        // A port picked by binding :0 and releasing it can be taken by someone else before
        // redis binds it: try a few.
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(e) => errors.push(format!("port {}: {e}", server.port)),
            }
        }
        panic!(
            "redis: could not start {}:\n{}",
            server.bin.display(),
            errors.join("\n")
        );
    }

    /// `redis://:PASSWORD@127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://:{}@127.0.0.1:{}/0", self.password, self.port)
    }

    /// `redis://default:PASSWORD@127.0.0.1:PORT/0` (Redis 6+ ACL form; `default` is the user
    /// `requirepass` sets the password of).
    pub fn url_with_user(&self) -> String {
        format!(
            "redis://default:{}@127.0.0.1:{}/0",
            self.password, self.port
        )
    }

    /// `unix://:PASSWORD@/abs/path/redis.sock` — the unix socket with the password in the
    /// userinfo, host empty (see the module docs).
    pub fn unix_url(&self) -> String {
        format!("unix://:{}@{}", self.password, self.socket_path().display())
    }

    /// The unix socket (mode 700).
    pub fn socket_path(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The password (32 hex digits; needs no escaping in a URL).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Pid of the running server (`None` after [`RedisServer::kill`]).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// SIGKILL the server (its whole process group) and reap it. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the process group we created for this child.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
    }

    /// Kill the server (if running) and start a new, empty one on the same port with the same
    /// password and socket. Panics if it does not come back.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn_and_wait() {
                Ok(()) => return,
                // The old socket can linger for a moment; anything else is a real failure too,
                // but retrying costs only time.
                Err(e) if Instant::now() >= deadline => {
                    panic!("redis: restart on port {} failed: {e}", self.port)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let log_path = self.dir.path().join("redis.log");
        let log = fs::File::create(&log_path).map_err(|e| format!("create log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("clone log: {e}"))?;
        let sock = self.socket_path();
        let _ = fs::remove_file(&sock);
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--protected-mode", "yes"])
            .args(["--requirepass", &self.password])
            .arg("--unixsocket")
            .arg(&sock)
            .args(["--unixsocketperm", "700"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--logfile", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .current_dir(self.dir.path())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
        unsafe {
            let parent = libc::getpid();
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!("redis-server exited ({st}):\n{}", self.log()));
            }
            if let Ok(Resp::Simple(s)) = try_redis_cmd(self, &["PING"])
                && s == "PONG"
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!("no PONG within {READY_TIMEOUT:?}:\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port that was free a moment ago (bound to :0 and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("redis: bind 127.0.0.1:0 to find a free port")
}

/// `n` random bytes as hex, from the kernel's generator.
fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("redis: read /dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------------------------
// RESP2 client

/// One RESP2 value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    /// `+OK`
    Simple(String),
    /// `-ERR …` (the text after `-`)
    Error(String),
    /// `:42`
    Int(i64),
    /// `$3\r\nabc`
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`
    Nil,
    /// `*2\r\n…`
    Array(Vec<Resp>),
}

impl Resp {
    /// The text of a simple or (UTF-8) bulk string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Resp::Simple(s) => Some(s),
            Resp::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// `Bulk(s)` — for comparisons: `assert_eq!(redis_cmd(..), Resp::bulk("v"))`.
    pub fn bulk(s: impl AsRef<[u8]>) -> Resp {
        Resp::Bulk(s.as_ref().to_vec())
    }

    /// `Simple("OK")`.
    pub fn ok() -> Resp {
        Resp::Simple("OK".into())
    }

    /// The wire form (as a server would send it).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Resp::Simple(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Resp::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
            Resp::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Resp::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Resp::Nil => out.extend_from_slice(b"$-1\r\n"),
            Resp::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for i in items {
                    i.encode_into(out);
                }
            }
        }
    }
}

/// A command as a RESP array of bulk strings (how clients send commands).
pub fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    Resp::Array(args.iter().map(|a| Resp::Bulk(a.to_vec())).collect()).encode()
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Read one RESP2 value. Malformed or oversized input is an `InvalidData` error, never a panic;
/// memory grows only with bytes actually received.
pub fn read_resp(r: &mut impl BufRead) -> io::Result<Resp> {
    read_value(r, 0)
}

fn read_line(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    r.by_ref()
        .take(MAX_LINE as u64 + 2)
        .read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad(format!(
            "reply line not ended by CRLF within {MAX_LINE} bytes: {:?}",
            String::from_utf8_lossy(&line[..line.len().min(80)])
        )));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(b: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("not an integer: {:?}", String::from_utf8_lossy(b))))
}

fn read_value(r: &mut impl BufRead, depth: usize) -> io::Result<Resp> {
    if depth > MAX_DEPTH {
        return Err(bad(format!("arrays nested deeper than {MAX_DEPTH}")));
    }
    let line = read_line(r)?;
    let (kind, rest) = line
        .split_first()
        .ok_or_else(|| bad("empty reply line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Resp::Simple(text())),
        b'-' => Ok(Resp::Error(text())),
        b':' => parse_int(rest).map(Resp::Int),
        b'$' => match parse_int(rest)? {
            -1 => Ok(Resp::Nil),
            n if !(0..=MAX_BULK).contains(&n) => Err(bad(format!("bad bulk length {n}"))),
            n => {
                let want = n as u64 + 2;
                let mut body = Vec::new();
                r.by_ref().take(want).read_to_end(&mut body)?;
                if body.len() as u64 != want {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a bulk string",
                    ));
                }
                if !body.ends_with(b"\r\n") {
                    return Err(bad("bulk string not followed by CRLF".into()));
                }
                body.truncate(n as usize);
                Ok(Resp::Bulk(body))
            }
        },
        b'*' => match parse_int(rest)? {
            -1 => Ok(Resp::Nil),
            n if n < 0 => Err(bad(format!("bad array length {n}"))),
            n => {
                // No preallocation: the count is the peer's claim, the items are the proof.
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(read_value(r, depth + 1)?);
                }
                Ok(Resp::Array(items))
            }
        },
        other => Err(bad(format!("unknown reply type byte {other:#04x}"))),
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// One connection to a Redis server (no pipelining: each command waits for its reply).
pub struct RedisConn {
    io: BufReader<Stream>,
}

impl RedisConn {
    /// Connect over TCP with `timeout` for the connect and for every read/write.
    pub fn tcp(addr: SocketAddr, timeout: Duration) -> io::Result<RedisConn> {
        let s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        Ok(RedisConn {
            io: BufReader::new(Stream::Tcp(s)),
        })
    }

    /// Connect to a unix socket with `timeout` for every read/write.
    pub fn unix(path: &Path, timeout: Duration) -> io::Result<RedisConn> {
        let s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(RedisConn {
            io: BufReader::new(Stream::Unix(s)),
        })
    }

    /// Send one command and read its reply (a `-ERR` reply is `Ok(Resp::Error(..))`).
    pub fn cmd(&mut self, args: &[&str]) -> io::Result<Resp> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd_bytes(&args)
    }

    /// Like [`RedisConn::cmd`] with binary arguments.
    pub fn cmd_bytes(&mut self, args: &[&[u8]]) -> io::Result<Resp> {
        let w = self.io.get_mut();
        w.write_all(&encode_command(args))?;
        w.flush()?;
        read_resp(&mut self.io)
    }

    /// `AUTH password`; an error reply becomes an `io::Error` (PermissionDenied).
    pub fn auth(&mut self, password: &str) -> io::Result<()> {
        match self.cmd(&["AUTH", password])? {
            Resp::Simple(s) if s == "OK" => Ok(()),
            other => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("AUTH failed: {other:?}"),
            )),
        }
    }
}

/// Run one command on `server` over a fresh authenticated TCP connection.
pub fn try_redis_cmd(server: &RedisServer, args: &[&str]) -> io::Result<Resp> {
    let mut c = RedisConn::tcp(server.addr(), IO_TIMEOUT)?;
    c.auth(server.password())?;
    c.cmd(args)
}

/// Like [`try_redis_cmd`] but panics (with the server log) on a connection or protocol error.
/// Error replies are returned as `Resp::Error`.
#[track_caller]
pub fn redis_cmd(server: &RedisServer, args: &[&str]) -> Resp {
    try_redis_cmd(server, args).unwrap_or_else(|e| {
        panic!(
            "redis: {args:?} on port {} failed: {e}\n--- redis log ---\n{}",
            server.port(),
            server.log()
        )
    })
}
