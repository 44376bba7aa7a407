use proptest::prelude::*;

use super::*;

fn tcp(host: &str, port: u16, tls: bool) -> Addr {
    Addr::Tcp {
        host: host.to_string(),
        port,
        tls,
    }
}

fn ok(url: &str) -> RedisUrl {
    parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
}

#[test]
fn tcp_forms() {
    let u = ok("redis://127.0.0.1");
    assert_eq!(u.addr, tcp("127.0.0.1", 6379, false));
    assert_eq!((u.username, u.password, u.db), (None, None, 0));

    let u = ok("redis://:s3cret@127.0.0.1:7000/2");
    assert_eq!(u.addr, tcp("127.0.0.1", 7000, false));
    assert_eq!(u.username, None);
    assert_eq!(u.password.as_deref(), Some("s3cret"));
    assert_eq!(u.db, 2);

    let u = ok("rediss://default:pw@cache.example.com:6380/");
    assert_eq!(u.addr, tcp("cache.example.com", 6380, true));
    assert_eq!(u.username.as_deref(), Some("default"));
    assert_eq!(u.password.as_deref(), Some("pw"));
    assert_eq!(u.db, 0);

    let u = ok("REDIS://[::1]:6390/3");
    assert_eq!(u.addr, tcp("::1", 6390, false));
    assert_eq!(u.db, 3);

    let u = ok("redis://h?db=4&password=p%40ss");
    assert_eq!(u.db, 4);
    assert_eq!(u.password.as_deref(), Some("p@ss"));

    // A password with every delimiter escaped.
    let u = ok("redis://us%3Aer:a%2Fb%40c%3Ad%3Fe%23f%25@h:1/0");
    assert_eq!(u.username.as_deref(), Some("us:er"));
    assert_eq!(u.password.as_deref(), Some("a/b@c:d?e#f%"));
    // An unescaped `@` in the password still works: the host follows the last one.
    let u = ok("redis://:p@ss@h");
    assert_eq!(u.password.as_deref(), Some("p@ss"));
    assert_eq!(u.addr, tcp("h", 6379, false));
    // Tabs, newlines and spaces are kept where they were typed (the WHATWG rules drop them).
    assert_eq!(
        ok("redis://:\ta b\n@h").password.as_deref(),
        Some("\ta b\n")
    );
    // IPv6 in its shortest form.
    assert_eq!(ok("redis://[0:0::1]:1").addr, tcp("::1", 1, false));
    // Same db twice is fine; a user without a password is kept.
    assert_eq!(ok("redis://h/5?db=5").db, 5);
    assert_eq!(ok("redis://alice@h").username.as_deref(), Some("alice"));
}

#[test]
fn unix_forms() {
    let u = ok("unix:///run/redis/redis.sock");
    assert_eq!(
        u.addr,
        Addr::Unix {
            path: "/run/redis/redis.sock".into()
        }
    );
    assert_eq!(u.password, None);

    let u = ok("unix://:pw@/tmp/x/redis.sock");
    assert_eq!(u.password.as_deref(), Some("pw"));
    assert_eq!(
        u.addr,
        Addr::Unix {
            path: "/tmp/x/redis.sock".into()
        }
    );

    // A space at the end is part of the path, as written.
    assert_eq!(
        ok("unix:///tmp/r.sock ").addr,
        Addr::Unix {
            path: "/tmp/r.sock ".into()
        }
    );

    let u = ok("unix:///tmp/my%20dir/r.sock?password=pw&db=3");
    assert_eq!(u.password.as_deref(), Some("pw"));
    assert_eq!(u.db, 3);
    assert_eq!(
        u.addr,
        Addr::Unix {
            path: "/tmp/my dir/r.sock".into()
        }
    );
}

#[test]
fn errors_name_the_part() {
    for (url, want) in [
        ("", UrlError::NoScheme),
        ("127.0.0.1:6379", UrlError::NoScheme),
        ("http://h", UrlError::UnknownScheme),
        ("redis://h#frag", UrlError::Fragment),
        ("redis://", UrlError::NoHost),
        ("redis://:pw@", UrlError::NoHost),
        ("redis://:pw@:6379", UrlError::NoHost),
        ("redis://h:0", UrlError::BadPort),
        ("redis://h:65536", UrlError::BadPort),
        ("redis://h:+1", UrlError::BadPort),
        ("redis://h:", UrlError::BadPort),
        ("redis://h:63x", UrlError::BadPort),
        ("redis://h/x", UrlError::BadDb),
        ("redis://h/1/2", UrlError::BadDb),
        ("redis://h/-1", UrlError::BadDb),
        ("redis://h?db=", UrlError::BadDb),
        ("redis://h/1?db=2", UrlError::DbTwice),
        ("redis://h?db=1&db=1", UrlError::DbTwice),
        ("redis://:a@h?password=b", UrlError::PasswordTwice),
        ("redis://h?protocol=resp3", UrlError::UnknownParameter),
        ("redis://h%20x", UrlError::BadHost),
        ("redis://[::1", UrlError::BadHost),
        ("redis://[]:1", UrlError::BadHost),
        ("redis://[::1]x", UrlError::BadHost),
        ("redis://:%zz@h", UrlError::BadEscape(Part::Password)),
        ("redis://:%+1@h", UrlError::BadEscape(Part::Password)),
        ("redis://:%ff@h", UrlError::BadEscape(Part::Password)),
        ("redis://%4@h", UrlError::BadEscape(Part::User)),
        ("unix://localhost/tmp/r.sock", UrlError::UnixWithHost),
        ("unix://", UrlError::UnixNoPath),
        ("unix:///", UrlError::UnixNoPath),
        ("unix://:pw@", UrlError::UnixNoPath),
        ("unix:///a%00b", UrlError::UnixNoPath),
        ("unix:///a%g0", UrlError::BadEscape(Part::Path)),
        // Where the WHATWG rules `url` follows would read something else than was written.
        ("redis://h/0/..", UrlError::BadDb),
        ("redis://h/./1", UrlError::BadDb),
        ("redis://[0]", UrlError::BadHost),
        ("redis://h:\t", UrlError::BadPort),
        ("redis://h\n", UrlError::BadHost),
        ("unix:///tmp/../run/r.sock", UrlError::DotSegment),
        ("unix:///tmp/%2E%2e/r.sock", UrlError::DotSegment),
        ("unix:///tmp%2F..%2Fr.sock", UrlError::DotSegment),
        ("unix://:pw@/./r.sock", UrlError::DotSegment),
    ] {
        assert_eq!(parse(url), Err(want), "{url}");
    }
    assert_eq!(parse(&"x".repeat(5000)), Err(UrlError::TooLong));
}

/// An unescaped `/` in the password cuts the authority short: whatever the parser then
/// complains about, the message must not quote the pieces (they are the password's).
#[test]
fn errors_never_quote_the_url() {
    for url in [
        "redis://:qzx/wvk@h:6379/0",
        "redis://user:hunter2/x@h",
        "redis://:hunter2?x@h",
        "redis://h:hunter2",
        "redis://hunter2 x",
    ] {
        let err = parse(url).expect_err(url).to_string();
        for piece in ["qzx", "wvk", "hunter2"] {
            assert!(!err.contains(piece), "{url}: {err}");
        }
    }
}

#[test]
fn redacted_hides_the_password_and_debug_too() {
    let u = ok("redis://alice:hunter2@127.0.0.1:7000/1");
    assert_eq!(u.redacted(), "redis://alice:***@127.0.0.1:7000/1");
    assert!(!format!("{u:?}").contains("hunter2"));
    assert_eq!(ok("redis://:pw@h").redacted(), "redis://:***@h:6379/0");
    assert_eq!(ok("rediss://h:1").redacted(), "rediss://h:1/0");
    assert_eq!(ok("redis://[::1]/2").redacted(), "redis://[::1]:6379/2");
    // A lone user name is a password written in the wrong place (issue 29).
    assert_eq!(ok("redis://bob@h").redacted(), "redis://***@h:6379/0");
    assert_eq!(
        ok("unix://:pw@/tmp/r.sock?db=2").redacted(),
        "unix://:***@/tmp/r.sock?db=2"
    );
    assert_eq!(ok("unix:///tmp/r.sock").redacted(), "unix:///tmp/r.sock");
    assert_eq!(
        ok("unix:///tmp/r.sock?password=pw").redacted(),
        "unix://:***@/tmp/r.sock"
    );
    assert_eq!(
        ok("redis://a%40b%0A:x@h").redacted(),
        "redis://a%40b%0A:***@h:6379/0"
    );
}

/// The crate's masking helper finds the same password the parser does, for every form the
/// parser accepts with a literal password.
#[test]
fn url_password_agrees_with_the_parser() {
    for url in [
        "redis://:pw1@h",
        "redis://default:pw2@h:1/0",
        "unix://:pw3@/tmp/r.sock",
        "unix:///tmp/r.sock?password=pw4",
        "redis://h/0?db=0&password=pw5",
    ] {
        assert_eq!(
            crate::health::store::url_password(url),
            ok(url).password,
            "{url}"
        );
    }
}

/// The password as written, for masking: found wherever the structure parses (even when a part
/// is then refused), in `url`'s spelling (an unescaped `@` is `%40` there; the decoded form is
/// registered too, from [`parse`]).
#[test]
fn written_passwords_for_masking() {
    use crate::health::store::url_password as written;
    assert_eq!(written("redis://:a%2Fb@h").as_deref(), Some("a%2Fb"));
    assert_eq!(written("redis://:pw@h?protocol=3").as_deref(), Some("pw"));
    assert_eq!(written("redis://:%zz@h").as_deref(), Some("%zz"));
    assert_eq!(written("redis://:p@ss@h").as_deref(), Some("p%40ss"));
    assert_eq!(written("unix://:pw@/tmp/r.sock").as_deref(), Some("pw"));
    assert_eq!(written("redis://h?password=q&db=1").as_deref(), Some("q"));
    assert_eq!(written("redis://alice@h").as_deref(), Some("alice"));
    assert_eq!(written("redis://alice:pw@h").as_deref(), Some("pw"));
    assert_eq!(written("redis://h"), None);
    assert_eq!(written("not a url"), None);
}

fn password_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 1..24).prop_map(|c| c.into_iter().collect())
}

fn escape_all(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02x}")).collect()
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    #[test]
    fn never_panics(s in "\\PC{0,80}") {
        let _ = parse(&s);
    }

    #[test]
    fn never_panics_on_url_like_text(
        scheme in prop::sample::select(vec!["redis", "rediss", "unix", "REDIS"]),
        rest in "[:/@?#%=&\\[\\]a-z0-9.]{0,40}",
    ) {
        if let Ok(u) = parse(&format!("{scheme}://{rest}")) {
            // Whatever parsed, its redacted form parses to the same place.
            let again = parse(&u.redacted()).expect("redacted form parses");
            prop_assert_eq!(again.addr, u.addr);
            prop_assert_eq!(again.db, u.db);
        }
    }

    /// Any password, fully escaped, comes back byte for byte, and the redacted form never
    /// shows it.
    #[test]
    fn escaped_passwords_round_trip(
        pw in password_strategy(),
        user in "[a-z]{0,6}",
        port in 1u16..,
        db in 0u32..64,
        form in 0u8..3,
    ) {
        let url = match form {
            0 => format!("redis://{user}:{}@host-1.example:{port}/{db}", escape_all(&pw)),
            1 => format!("unix://{user}:{}@/tmp/s.sock?db={db}", escape_all(&pw)),
            _ => format!("rediss://host:{port}?password={}&db={db}", escape_all(&pw)),
        };
        let u = parse(&url).map_err(|e| TestCaseError::fail(format!("{url}: {e}")))?;
        prop_assert_eq!(u.password.as_deref(), Some(pw.as_str()));
        prop_assert_eq!(u.db, db);
        let shown = u.redacted();
        prop_assert!(shown.contains(":***@"), "{}", shown);
        if pw.chars().count() >= 4 && !pw.contains("***") {
            prop_assert!(!shown.contains(&pw), "{}", shown);
        }
        let debug = format!("{:?}", u);
        prop_assert!(!debug.contains(&escape_all(&pw)));
    }
}
