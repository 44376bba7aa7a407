//! One connection to the server of a health URL: opened on first use (never at `open`), with a
//! short budget for connecting and logging in, a short timeout per command, and thrown away
//! after any error so the next use starts clean. Owns all network I/O of the Redis store; knows
//! nothing about health.
//!
//! The budget exists because a dead or unreachable Redis must cost a run at most a fraction of
//! a second: "connected" here means the server has answered (`AUTH`, or `PING` when there is no
//! password), so a listener that accepts and never answers (a wedged server behind a load
//! balancer) fails within the budget too. Name resolution runs on a helper thread for the same
//! reason: the system resolver has no timeout of its own.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use super::url::{Addr, RedisUrl};
use crate::clock;

/// Connecting (name resolution, TCP, TLS, `AUTH`, `SELECT`) must finish within this.
pub const CONNECT_BUDGET: Duration = Duration::from_millis(200);
/// Each command's reply must arrive within this once connected.
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// A connection idle for longer may have been dropped by the server meanwhile (a restart, or
/// `timeout` in redis.conf, common on managed servers): if its first command then fails with
/// a lost connection, the operation is repeated once on a fresh one (instead of a `PING`
/// before every such use, which would cost every batch job a round trip).
pub const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Why there is no usable connection. The texts never hold the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// The server could not be reached or did not answer in time.
    Unreachable(String),
    /// The server answered but refused the credentials (or wants some).
    Auth(String),
    /// Logged in, but the database cannot be selected.
    Select(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Unreachable(e) => write!(f, "cannot connect: {e}"),
            ConnectError::Auth(e) => write!(f, "login refused: {e}"),
            ConnectError::Select(e) => write!(f, "cannot select the database: {e}"),
        }
    }
}

/// How the last connection was made (for `--doctor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Opened {
    pub connect_ms: f64,
    pub authenticated: bool,
}

/// A lazily opened connection.
pub struct Conn {
    url: RedisUrl,
    conn: Option<redis::Connection>,
    last_used: Option<std::time::Instant>,
    pub connect_budget: Duration,
    pub command_timeout: Duration,
    /// Idle longer than this, the connection is retried once if its first command finds it
    /// lost ([`IDLE_CHECK`] unless a test sets another).
    pub idle_check: Duration,
    /// When the current operation must be over (see `HealthStore::set_deadline`): every round
    /// trip waits at most what is left of it.
    pub deadline: Option<std::time::Instant>,
    /// The connection [`Conn::get`] returned had been idle past `idle_check`.
    stale: bool,
}

impl Conn {
    pub fn new(url: RedisUrl) -> Conn {
        Conn {
            url,
            conn: None,
            last_used: None,
            connect_budget: CONNECT_BUDGET,
            command_timeout: COMMAND_TIMEOUT,
            idle_check: IDLE_CHECK,
            deadline: None,
            stale: false,
        }
    }

    pub fn url(&self) -> &RedisUrl {
        &self.url
    }

    /// The open connection, connecting first if there is none. [`Conn::stale`] then says
    /// whether it sat idle long enough that the server may have dropped it meanwhile.
    pub fn get(&mut self) -> Result<&mut redis::Connection, ConnectError> {
        let now = clock::now().instant;
        self.stale = self.conn.is_some()
            && self
                .last_used
                .is_some_and(|t| now.saturating_duration_since(t) > self.idle_check);
        self.last_used = Some(now);
        if self.left(self.command_timeout).is_zero() {
            return Err(ConnectError::Unreachable(
                "the operation's time ran out".to_string(),
            ));
        }
        if self.conn.is_none() {
            let (conn, _) = self.connect()?;
            self.conn = Some(conn);
        }
        let timeout = self
            .left(self.command_timeout)
            .max(Duration::from_millis(1));
        let conn = self
            .conn
            .as_mut()
            .expect("UNWRAP: a connection was stored just above");
        conn.set_read_timeout(Some(timeout))
            .and_then(|()| conn.set_write_timeout(Some(timeout)))
            .map_err(|e| ConnectError::Unreachable(e.to_string()))?;
        Ok(conn)
    }

    /// Whether the connection last returned by [`Conn::get`] had been idle (see `idle_check`).
    pub fn stale(&self) -> bool {
        self.stale
    }

    /// `limit`, or less if the operation's deadline comes first.
    fn left(&self, limit: Duration) -> Duration {
        match self.deadline {
            Some(d) => limit.min(d.saturating_duration_since(clock::now().instant)),
            None => limit,
        }
    }

    /// Forgets the connection (after an error: its state is unknown).
    pub fn reset(&mut self) {
        self.conn = None;
    }

    /// Opens a fresh connection (replacing any), reporting how it went.
    pub fn reconnect(&mut self) -> Result<Opened, ConnectError> {
        self.conn = None;
        let (conn, opened) = self.connect()?;
        self.conn = Some(conn);
        Ok(opened)
    }

    /// Masks the password in text that came from the server or the network stack (defence in
    /// depth: neither is known to echo it).
    pub fn scrub(&self, text: &str) -> String {
        let text = match self.url.password.as_deref() {
            Some(pw) if pw.len() >= 4 => text.replace(pw, "***"),
            _ => text.to_string(),
        };
        crate::redact::redact(&text)
    }

    fn connect(&self) -> Result<(redis::Connection, Opened), ConnectError> {
        let started = clock::now().instant;
        let elapsed = || clock::now().instant.saturating_duration_since(started);
        let budget = self.left(self.connect_budget);
        let left = || {
            budget
                .saturating_sub(elapsed())
                .max(Duration::from_millis(1))
        };
        let unreachable = |e: String| ConnectError::Unreachable(self.scrub(&e));
        let addrs: Vec<ConnectionAddr> = match &self.url.addr {
            Addr::Tcp {
                host,
                port,
                tls: false,
            } => resolve(host, *port, left())
                .map_err(unreachable)?
                .into_iter()
                .map(|a| ConnectionAddr::Tcp(a.ip().to_string(), a.port()))
                .collect(),
            Addr::Tcp {
                host,
                port,
                tls: true,
            } => {
                // The TLS layer resolves the name again (it needs it for the certificate
                // check); resolving here first keeps a dead resolver within the budget.
                resolve(host, *port, left()).map_err(unreachable)?;
                vec![ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }]
            }
            Addr::Unix { path } => vec![ConnectionAddr::Unix(path.clone())],
        };
        let mut last = String::from("no address to connect to");
        let mut conn = None;
        for addr in addrs {
            let info: ConnectionInfo = addr
                .into_connection_info()
                .map_err(|e| unreachable(e.to_string()))?
                // No login and no client-info commands here: the login is ours, below, so its
                // failure can be told apart from an unreachable server.
                .set_redis_settings(RedisConnectionInfo::default().set_skip_set_lib_name());
            let opened =
                redis::Client::open(info).and_then(|c| c.get_connection_with_timeout(left()));
            match opened {
                Ok(c) => {
                    conn = Some(c);
                    break;
                }
                Err(e) => last = said(&e),
            }
        }
        let mut conn = conn.ok_or_else(|| unreachable(last))?;
        let timeout = |conn: &redis::Connection, d: Duration| {
            conn.set_read_timeout(Some(d))
                .and_then(|()| conn.set_write_timeout(Some(d)))
        };
        timeout(&conn, left()).map_err(|e| unreachable(e.to_string()))?;
        let authenticated = self.url.password.is_some();
        let login = match &self.url.password {
            Some(pw) => {
                let mut auth = redis::cmd("AUTH");
                if let Some(user) = &self.url.username {
                    auth.arg(user);
                }
                auth.arg(pw);
                auth.query::<()>(&mut conn)
            }
            None => redis::cmd("PING").query::<()>(&mut conn),
        };
        if let Err(e) = login {
            return Err(if e.code().is_some() {
                ConnectError::Auth(self.scrub(&server_error_text(&e)))
            } else {
                unreachable(said(&e))
            });
        }
        if self.url.db != 0 {
            redis::cmd("SELECT")
                .arg(self.url.db)
                .query::<()>(&mut conn)
                .map_err(|e| match e.code() {
                    Some(_) => ConnectError::Select(self.scrub(&server_error_text(&e))),
                    None => unreachable(e.to_string()),
                })?;
        }
        timeout(&conn, self.command_timeout).map_err(|e| unreachable(e.to_string()))?;
        let connect_ms = elapsed().as_secs_f64() * 1000.0;
        Ok((
            conn,
            Opened {
                connect_ms,
                authenticated,
            },
        ))
    }
}

/// `CODE detail` of a server error reply (`WRONGPASS invalid username-password pair …`).
pub fn server_error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// The addresses of `host`, resolved within `within` (an IP literal needs no resolver).
fn resolve(host: &str, port: u16, within: Duration) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let (tx, rx) = mpsc::channel();
    let name = host.to_string();
    // A resolver stuck past the budget is left behind; it ends when the system resolver gives
    // up, and the health thread asks again only after its retry pause.
    std::thread::Builder::new()
        .name("redis-resolve".into())
        .spawn(move || {
            let found = (name.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect::<Vec<_>>);
            let _ = tx.send(found);
        })
        .map_err(|e| format!("cannot start name resolution: {e}"))?;
    match rx.recv_timeout(within) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => Err(format!("{host} has no address")),
        Ok(Err(e)) => Err(format!("cannot resolve {host}: {e}")),
        Err(_) => Err(format!(
            "resolving {host} took longer than {} ms",
            within.as_millis()
        )),
    }
}

/// A client-side failure in words: a read or write that ran out of time is said so (the OS's
/// own text for it is "Resource temporarily unavailable").
fn said(e: &redis::RedisError) -> String {
    if e.is_timeout() {
        "no answer in time".to_string()
    } else {
        e.to_string()
    }
}
