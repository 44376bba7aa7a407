//! Health URLs: `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS) and
//! `unix:///path/redis.sock` (password as `unix://:PASSWORD@/path` or `?password=PASSWORD`,
//! database as `?db=N`), parsed into a [`RedisUrl`]. Pure: no I/O, no name resolution.
//!
//! The `url` crate (the parser `redis` itself builds on) splits the URL; this module checks and
//! decodes the parts, and is stricter than the WHATWG rules where a lenient reading would
//! connect somewhere unintended or with another password: a bad %-escape is an error, not
//! text; `host:` with no port is an error; tabs, newlines and spaces at either end stay part of
//! what they were typed in; a socket path's escaped `.`/`..` segments are refused. (`url`
//! resolves literal `.`/`..` segments and writes an IPv6 address in its shortest form.)
//!
//! Errors name the part that is wrong but never quote the URL or any piece of it: a password
//! with an unescaped `/` or `@` shifts every later piece, so any quoted piece could be part of
//! the password. [`RedisUrl`]'s `Debug` and [`RedisUrl::redacted`] never show the password.

use std::fmt;
use std::path::PathBuf;

use ::url::{Host, ParseError, Url};

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
    /// `unix://:***@/run/redis.sock?db=2`. A user name without a password is shown as `***`
    /// too: Redis does nothing with a lone user name, so `redis://SECRET@host` is a password
    /// written where the user name goes (issue 29), and is kept out of `--doctor` and
    /// `--status`.
    pub fn redacted(&self) -> String {
        let userinfo = match (&self.username, &self.password) {
            (None, None) => String::new(),
            (Some(_), None) => "***@".to_string(),
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
    DotSegment,
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
            UrlError::DotSegment => {
                "the socket path has a . or .. segment (write the path without them)"
            }
        };
        f.write_str(text)
    }
}

impl std::error::Error for UrlError {}

/// Parses a health URL.
pub fn parse(url: &str) -> Result<RedisUrl, UrlError> {
    let parsed = structure(url)?;
    let u = &parsed.url;
    let mut username = Some(decode(u.username()).ok_or(UrlError::BadEscape(Part::User))?);
    let mut password = u
        .password()
        .map(|p| decode(p).ok_or(UrlError::BadEscape(Part::Password)))
        .transpose()?;
    // The query is read here, not as `application/x-www-form-urlencoded` (`url`'s
    // `query_pairs`): a `+` in a password is a plus, and a bad %-escape is an error.
    let mut db_from_query = None;
    for pair in u.query().into_iter().flat_map(|q| q.split('&')) {
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
    let (addr, db_from_path) = match parsed.kind {
        Kind::Tcp { tls } => {
            let host = match u.host() {
                None => return Err(UrlError::NoHost),
                Some(Host::Ipv6(ip)) => ip.to_string(),
                Some(Host::Ipv4(ip)) => ip.to_string(),
                Some(Host::Domain(name)) => {
                    // `url` keeps a non-special scheme's host opaque (%-escapes and all).
                    let is_name =
                        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
                    if name.is_empty() {
                        return Err(UrlError::NoHost);
                    }
                    if !name.bytes().all(is_name) || name.len() > 253 {
                        return Err(UrlError::BadHost);
                    }
                    name.to_string()
                }
            };
            let port = match u.port() {
                Some(0) => return Err(UrlError::BadPort),
                Some(p) => p,
                // `url` reads `host:` as no port; a `:` with nothing after it is a mistake.
                None if parsed.empty_port => return Err(UrlError::BadPort),
                None => DEFAULT_PORT,
            };
            if parsed.dot_segment {
                return Err(UrlError::BadDb);
            }
            let db = match u.path().strip_prefix('/') {
                None | Some("") => None,
                Some(n) => Some(parse_db(n)?),
            };
            (Addr::Tcp { host, port, tls }, db)
        }
        Kind::Unix => {
            if (u.host().is_some() && !parsed.placeholder_host)
                || u.port().is_some()
                || parsed.empty_port
            {
                return Err(UrlError::UnixWithHost);
            }
            let decoded = decode(u.path()).ok_or(UrlError::BadEscape(Part::Path))?;
            if !decoded.starts_with('/') || decoded.len() < 2 || decoded.contains('\0') {
                return Err(UrlError::UnixNoPath);
            }
            // Escaped slashes can still make one (`/a%2F..%2Fb`), which a re-parse of the
            // redacted form would resolve.
            if parsed.dot_segment || decoded.split('/').any(is_dot_segment) {
                return Err(UrlError::DotSegment);
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

/// The password of a health URL as written in it (still %-escaped), from the user info or
/// `?password=` — or the user name when there is no password (see [`RedisUrl::redacted`]) —
/// for masking. Found wherever the URL's structure parses, even when [`parse`]
/// then refuses a part (a bad escape, an unknown parameter).
pub fn written_password(url: &str) -> Option<String> {
    let parsed = structure(url).ok()?;
    let query = parsed.url.query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("password=").map(str::to_string))
    });
    let userinfo = parsed.url.password().map(str::to_string);
    // A lone user name is a password in the wrong place (see `RedisUrl::redacted`).
    let lone_user = Some(parsed.url.username().to_string()).filter(|_| userinfo.is_none());
    userinfo.or(query).or(lone_user).filter(|p| !p.is_empty())
}

enum Kind {
    Tcp { tls: bool },
    Unix,
}

/// A health URL split into its parts by the `url` crate, before they are checked and decoded.
struct Structure {
    kind: Kind,
    url: Url,
    /// `host:` with no digits after the colon (`url` drops such a port silently).
    empty_port: bool,
    /// Parsed with a stand-in host, for `unix://:PASSWORD@/path` (see [`structure`]).
    placeholder_host: bool,
    /// The path as written has a `.` or `..` segment, which `url` resolves (`/tmp/../run` →
    /// `/run`, `/0/..` → `/`): refused rather than read as another path than the kernel would.
    dot_segment: bool,
}

/// Splits a health URL with the `url` crate (the WHATWG rules: the last `@` of the authority
/// ends the user info, IPv6 in brackets, `?` and `#` end the path), after the checks `url` does
/// not make: length, scheme and fragment.
fn structure(input: &str) -> Result<Structure, UrlError> {
    if input.len() > MAX_URL_BYTES {
        return Err(UrlError::TooLong);
    }
    let (scheme, rest) = input.split_once("://").ok_or(UrlError::NoScheme)?;
    let kind = match scheme.to_ascii_lowercase().as_str() {
        "redis" => Kind::Tcp { tls: false },
        "rediss" => Kind::Tcp { tls: true },
        "unix" => Kind::Unix,
        _ => return Err(UrlError::UnknownScheme),
    };
    if rest.contains('#') {
        return Err(UrlError::Fragment);
    }
    // `url` drops tabs and newlines anywhere and trims spaces and control characters at both
    // ends; escaped, each stays in the part it was typed in (a password keeps its tab, a host
    // with a space is refused), as when the runner read these parts itself.
    let rest = escape(rest, &[' ']);
    // Where `url` ends the authority too (`#` is refused above).
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let empty_port = authority.ends_with(':');
    let written_path = rest[authority.len()..]
        .split('?')
        .next()
        .unwrap_or_default();
    let dot_segment = written_path.split('/').any(is_dot_segment);
    let written = format!("{scheme}://{rest}");
    let err = match Url::parse(&written) {
        Ok(url) => {
            return Ok(Structure {
                kind,
                url,
                empty_port,
                placeholder_host: false,
                dot_segment,
            });
        }
        Err(e) => e,
    };
    match (&kind, err) {
        // WHATWG refuses user info without a host, which is the shape of
        // `unix://:PASSWORD@/path`: a stand-in host fills the gap (and is never taken for one).
        (Kind::Unix, ParseError::EmptyHost) if authority.ends_with('@') => {
            let with_host = format!(
                "{scheme}://{authority}localhost{}",
                &rest[authority.len()..]
            );
            match Url::parse(&with_host) {
                Ok(url) => Ok(Structure {
                    kind,
                    url,
                    empty_port: false,
                    placeholder_host: true,
                    dot_segment,
                }),
                Err(_) => Err(UrlError::UnixWithHost),
            }
        }
        // Anything between `unix://` and the path is a host, whatever is wrong with it.
        (Kind::Unix, _) => Err(UrlError::UnixWithHost),
        (Kind::Tcp { .. }, ParseError::EmptyHost) => Err(UrlError::NoHost),
        (Kind::Tcp { .. }, ParseError::InvalidPort) => Err(UrlError::BadPort),
        (Kind::Tcp { .. }, _) => Err(UrlError::BadHost),
    }
}

/// `.` or `..`, also %-escaped (`%2e`), as the WHATWG rules count them.
fn is_dot_segment(segment: &str) -> bool {
    matches!(
        segment.to_ascii_lowercase().replace("%2e", ".").as_str(),
        "." | ".."
    )
}

fn parse_db(text: &str) -> Result<u32, UrlError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UrlError::BadDb);
    }
    text.parse().map_err(|_| UrlError::BadDb)
}

/// Percent-decoding into UTF-8; `None` on a bad escape (`%` not followed by two hex digits,
/// which `url` and `percent_encoding` would both keep as written) or invalid UTF-8.
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let well_formed = bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return None;
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
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
