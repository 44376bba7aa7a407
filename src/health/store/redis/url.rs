//! Health URLs: `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS) and
//! `unix:///path/redis.sock` (password as `unix://:PASSWORD@/path` or `?password=PASSWORD`,
//! database as `?db=N`), parsed into a [`RedisUrl`]. Pure: no I/O, no name resolution.
//!
//! Errors name the part that is wrong but never quote the URL or any piece of it: a password
//! with an unescaped `/` or `@` shifts every later piece, so any quoted piece could be part of
//! the password. [`RedisUrl`]'s `Debug` and [`RedisUrl::redacted`] never show the password.

use std::fmt;
use std::path::PathBuf;

/// Redis' default port (plain and TLS alike, as redis-cli and the common clients assume).
pub const DEFAULT_PORT: u16 = 6379;
/// Longer than any sane URL: refused rather than scanned.
const MAX_URL_BYTES: usize = 4096;

/// Where the server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Tcp { host: String, port: u16, tls: bool },
    Unix { path: PathBuf },
}

/// A parsed health URL.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    pub addr: Addr,
    /// ACL user (`AUTH user password`); `None` means the `default` user.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Logical database (`SELECT`).
    pub db: u32,
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisUrl")
            .field("addr", &self.addr)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}

impl RedisUrl {
    /// The URL with the password shown as `***`: `redis://:***@127.0.0.1:6379/0`,
    /// `unix://:***@/run/redis.sock?db=2`.
    pub fn redacted(&self) -> String {
        let userinfo = match (&self.username, &self.password) {
            (None, None) => String::new(),
            (Some(u), None) => format!("{}@", escape(u, USERINFO_SPECIALS)),
            (u, Some(_)) => format!(
                "{}:***@",
                u.as_deref()
                    .map(|u| escape(u, USERINFO_SPECIALS))
                    .unwrap_or_default()
            ),
        };
        match &self.addr {
            Addr::Tcp { host, port, tls } => {
                let scheme = if *tls { "rediss" } else { "redis" };
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.clone()
                };
                format!("{scheme}://{userinfo}{host}:{port}/{}", self.db)
            }
            Addr::Unix { path } => {
                let db = if self.db == 0 {
                    String::new()
                } else {
                    format!("?db={}", self.db)
                };
                let path = escape(&path.to_string_lossy(), &['%', '?', '#']);
                format!("unix://{userinfo}{path}{db}")
            }
        }
    }
}

/// Why a health URL was refused. Never carries a piece of the URL (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlError {
    TooLong,
    NoScheme,
    UnknownScheme,
    Fragment,
    BadEscape(Part),
    NoHost,
    BadHost,
    BadPort,
    BadDb,
    DbTwice,
    PasswordTwice,
    UnknownParameter,
    UnixWithHost,
    UnixNoPath,
}

/// Which part of the URL a percent-escape problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    User,
    Password,
    Path,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            UrlError::TooLong => "longer than 4096 bytes",
            UrlError::NoScheme | UrlError::UnknownScheme => {
                "expected redis://[user:password@]host[:port][/db], rediss://… (TLS) or \
                 unix:///path/redis.sock"
            }
            UrlError::Fragment => "a #fragment is not supported",
            UrlError::BadEscape(Part::User) => "the user name has a bad %-escape or is not UTF-8",
            UrlError::BadEscape(Part::Password) => {
                "the password has a bad %-escape or is not UTF-8 (write / @ : ? # % as %2F %40 \
                 %3A %3F %23 %25)"
            }
            UrlError::BadEscape(Part::Path) => "the socket path has a bad %-escape",
            UrlError::NoHost => {
                "no host name (a password containing / @ ? or # must be %-escaped: %2F %40 %3F \
                 %23)"
            }
            UrlError::BadHost => {
                "the host is not a host name or IP address (IPv6 goes in brackets: [::1])"
            }
            UrlError::BadPort => "the port is not a number from 1 to 65535",
            UrlError::BadDb => "the database is not a number (redis://host:6379/0, ?db=0)",
            UrlError::DbTwice => "the database is given twice (path and ?db=)",
            UrlError::PasswordTwice => "the password is given twice (user info and ?password=)",
            UrlError::UnknownParameter => "unknown query parameter (accepted: db, password)",
            UrlError::UnixWithHost => {
                "a unix socket URL takes no host: unix:///path/redis.sock or \
                 unix://:PASSWORD@/path/redis.sock"
            }
            UrlError::UnixNoPath => "no absolute socket path: unix:///path/redis.sock",
        };
        f.write_str(text)
    }
}

impl std::error::Error for UrlError {}

/// Parses a health URL.
pub fn parse(url: &str) -> Result<RedisUrl, UrlError> {
    if url.len() > MAX_URL_BYTES {
        return Err(UrlError::TooLong);
    }
    let (scheme, rest) = url.split_once("://").ok_or(UrlError::NoScheme)?;
    let kind = match scheme.to_ascii_lowercase().as_str() {
        "redis" => Kind::Tcp { tls: false },
        "rediss" => Kind::Tcp { tls: true },
        "unix" => Kind::Unix,
        _ => return Err(UrlError::UnknownScheme),
    };
    if rest.contains('#') {
        return Err(UrlError::Fragment);
    }
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    // Userinfo cannot hold an unescaped `/`, so the authority ends at the first one.
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (mut username, mut password) = match userinfo {
        None => (None, None),
        Some(u) => {
            let (user, pw) = match u.split_once(':') {
                Some((user, pw)) => (user, Some(pw)),
                None => (u, None),
            };
            let user = decode(user).ok_or(UrlError::BadEscape(Part::User))?;
            let pw = pw
                .map(|p| decode(p).ok_or(UrlError::BadEscape(Part::Password)))
                .transpose()?;
            (Some(user), pw)
        }
    };
    let mut db_from_query = None;
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "db" => {
                if db_from_query.is_some() {
                    return Err(UrlError::DbTwice);
                }
                db_from_query = Some(parse_db(v)?);
            }
            "password" => {
                if password.as_deref().is_some_and(|p| !p.is_empty()) {
                    return Err(UrlError::PasswordTwice);
                }
                password = Some(decode(v).ok_or(UrlError::BadEscape(Part::Password))?);
            }
            _ => return Err(UrlError::UnknownParameter),
        }
    }
    username = username.filter(|u| !u.is_empty());
    password = password.filter(|p| !p.is_empty());
    let (addr, db_from_path) = match kind {
        Kind::Tcp { tls } => {
            let (host, port) = parse_hostport(hostport)?;
            let db = match path.strip_prefix('/') {
                None | Some("") => None,
                Some(n) => Some(parse_db(n)?),
            };
            (Addr::Tcp { host, port, tls }, db)
        }
        Kind::Unix => {
            if !hostport.is_empty() {
                return Err(UrlError::UnixWithHost);
            }
            let decoded = decode(path).ok_or(UrlError::BadEscape(Part::Path))?;
            if !decoded.starts_with('/') || decoded.len() < 2 || decoded.contains('\0') {
                return Err(UrlError::UnixNoPath);
            }
            (
                Addr::Unix {
                    path: PathBuf::from(decoded),
                },
                None,
            )
        }
    };
    let db = match (db_from_path, db_from_query) {
        (Some(a), Some(b)) if a != b => return Err(UrlError::DbTwice),
        (a, b) => a.or(b).unwrap_or(0),
    };
    Ok(RedisUrl {
        addr,
        username,
        password,
        db,
    })
}

enum Kind {
    Tcp { tls: bool },
    Unix,
}

fn parse_db(text: &str) -> Result<u32, UrlError> {
    digits(text).ok_or(UrlError::BadDb)
}

/// Decimal digits only (no sign, no spaces), within `T`'s range.
fn digits<T: std::str::FromStr>(text: &str) -> Option<T> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_hostport(hostport: &str) -> Result<(String, u16), UrlError> {
    let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
        let (v6, after) = inner.split_once(']').ok_or(UrlError::BadHost)?;
        if v6.is_empty()
            || !v6
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(UrlError::BadHost);
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(UrlError::BadHost)?),
        };
        (v6, port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(UrlError::NoHost);
    }
    let is_name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':');
    if !host.bytes().all(is_name) || host.len() > 253 {
        return Err(UrlError::BadHost);
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => digits::<u16>(p)
            .filter(|p| *p != 0)
            .ok_or(UrlError::BadPort)?,
    };
    Ok((host.to_string(), port))
}

/// Percent-decoding into UTF-8; `None` on a bad escape or invalid UTF-8.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            // `from_str_radix` alone would take a sign (`%+1`).
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What would end a user name early.
const USERINFO_SPECIALS: &[char] = &['%', '@', ':', '/', '?', '#'];

/// Percent-escapes `specials` and control characters, for [`RedisUrl::redacted`] (which must
/// parse back to the same place, and must not carry control characters to a terminal).
fn escape(text: &str, specials: &[char]) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if specials.contains(&c) || c.is_control() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
#[path = "url_tests.rs"]
mod tests;
