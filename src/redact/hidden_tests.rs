//! Keys hidden from the rules (issue 29): split by JSON-escaped line breaks inside an error
//! body, spelled in `\u` escapes, shown by their last characters only, or with a zero-width
//! character inside; and the known-secret masking of answers.

use super::*;

/// A 22-character key of no known shape (a gateway's own format): only the phrase, the
/// registry or the escapes can give it away.
const PLAIN: &str = "Qm7vX2kP9wLr4Tz8Nc1Yb5";

fn escaped_u(s: &str) -> String {
    s.chars()
        .map(|c| format!("\\u{:04x}", u32::from(c)))
        .collect()
}

#[test]
fn an_announced_key_split_by_escaped_line_breaks_is_masked_whole() {
    let (a, b) = PLAIN.split_at(11);
    for phrase in ["Incorrect key provided:", "Incorrect API key provided:"] {
        for text in [
            format!(r#"{{"error":{{"message":"{phrase}\n{a}\n{b}. See docs."}}}}"#),
            format!(r#"{{"error":{{"message":"{phrase} {a}\n{b}"}}}}"#),
            format!(r#"{phrase}\r\n{a}\r\n{b}"#),
        ] {
            let out = redact(&text);
            assert!(!out.contains(a) && !out.contains(b), "{text}\n→ {out}");
            assert!(out.contains(MASK), "{out}");
        }
    }
    // Prose after a plain value is untouched.
    assert_eq!(
        redact("Incorrect API key provided: abc123xyz7. See docs."),
        "Incorrect API key provided: [redacted]. See docs."
    );
}

#[test]
fn a_key_spelled_in_unicode_escapes_is_masked() {
    let key = "sk-proj-Zr8Kq3Vn6Tb1Lm9Pw4Hc7Jd2Fs5Ga0Ye";
    let text = format!(r#"{{"message":"invalid key {}"}}"#, escaped_u(key));
    let out = redact(&text);
    assert!(!out.contains("Zr8Kq3Vn6Tb1"), "{out}");
    assert!(out.contains(MASK), "{out}");
    // A few escapes in ordinary JSON stay as written.
    assert_eq!(redact(r#"caf\u00e9 \u0041B"#), r#"caf\u00e9 \u0041B"#);
    // An unknown key of no shape, announced, escaped: masked too.
    let text = format!("api_key={}", escaped_u(PLAIN));
    assert!(!redact(&text).contains(&PLAIN[..8]), "{}", redact(&text));
}

#[test]
fn a_key_with_a_zero_width_space_inside_is_masked_whole() {
    let key = "sk-ant-api03-Hq2Wm8Xr5Tz1Kp7Vn4Lc9Jb3Fd6Gs0";
    let (a, b) = key.split_at(20);
    for zw in ['\u{200b}', '\u{200d}', '\u{feff}', '\u{2060}'] {
        let text = format!("bad key {a}{zw}{b} rejected");
        let out = redact(&text);
        assert!(
            !out.contains(&b[..8]) && !out.contains(&a[8..]),
            "{text:?} → {out}"
        );
    }
    // The escaped form.
    let out = redact(&format!(r#"key \u200b{key}"#));
    assert!(!out.contains(&key[8..20]), "{out}");
    let out = redact(&format!(r#"{a}\u200b{b}"#));
    assert!(!out.contains(&b[..8]), "{out}");
}

#[test]
fn known_secrets_in_hidden_spellings() {
    let secret = "kx-Hidden7Known2Secret9Value4";
    add_known_secrets([secret.to_string()]);
    let (a, b) = secret.split_at(13);
    for text in [
        format!(r#"{{"msg":"key {a}\n{b} refused"}}"#),
        format!("key {a}\u{200b}{b} refused"),
        format!("key {} refused", escaped_u(secret)),
        // The last 12 characters (a dashboard's `…` display).
        format!("key ending …{} refused", &secret[secret.len() - 12..]),
        format!("key kx-...{} refused", &secret[secret.len() - 12..]),
    ] {
        let out = redact(&text);
        assert!(
            !out.contains(&secret[secret.len() - 10..]),
            "{text:?} → {out}"
        );
        assert!(out.contains(MASK), "{out}");
    }
    // Nine trailing characters are not enough to mask (a common word could be one).
    let short = format!("ends {}", &secret[secret.len() - 9..]);
    assert_eq!(redact(&short), short);
}

#[test]
fn answers_lose_known_secrets_and_nothing_else() {
    let secret = "ans-Known5Secret8In3Answer";
    add_known_secrets([secret.to_string()]);
    let answer = format!(
        "Here is the config:\n  apiKey: {secret}\n\nExample: `sk-test-000000000000000000` and \
         commit 3f9c2a7e1b8d4c6f0a5e9b2d7c1f4a8e.\nAuthorization: Bearer <token>\n"
    );
    let out = mask_known_secrets(&answer);
    assert_eq!(out, answer.replace(secret, MASK));
    // Split by a line break, in JSON, by its tail.
    let (a, b) = secret.split_at(12);
    assert_eq!(mask_known_secrets(&format!("{a}\n{b}")), MASK);
    assert!(!mask_known_secrets(&format!("…{}", &secret[10..])).contains(&secret[10..]));
    // Untouched text comes back as it was, control characters and all.
    let plain = "no secrets\there\u{1b}[1m bold \u{200b}\n";
    assert_eq!(mask_known_secrets(plain), plain);
}

#[test]
fn unhiding_is_idempotent_and_bounded() {
    let text = format!("a\u{200b}b {} \\u200b c", escaped_u("abcdef"));
    let once = redact(&text);
    assert_eq!(redact(&once), once);
    // Unterminated and invalid escapes are left alone.
    for odd in ["\\u12", "\\uZZZZ", "\\", "\\ud800\\udc00", "x\\u"] {
        let _ = redact(odd);
        assert_eq!(bytes::unhide(odd), odd);
    }
}
