//! Secret masking and truncation for every error that is printed, logged or stored. Pure: no
//! I/O, no clock, no regex — a handful of byte scanners over the text.
//!
//! What gets masked (each secret becomes `[redacted]`, the text around it is kept):
//! - vendor key shapes anywhere: `sk-…` (OpenAI `sk-proj-`, Anthropic `sk-ant-api03-`, DeepSeek,
//!   OpenRouter…), Google `AIza…`, GitHub/Groq/xAI/Hugging Face/Slack/AWS key shapes, bare JWTs;
//! - the value after `authorization` / `api_key` / `x-api-key` / `access_token` / `password`…
//!   followed by `:` or `=` (quoted or not, JSON-escaped or not). An `Authorization` value is
//!   masked whole, scheme included (`Authorization: Basic …` → `Authorization: [redacted]`);
//! - the token after `Bearer` — the token, not the word (the reference runner masked the word);
//! - key/token/signature query parameters and `user:password@` credentials in URLs.
//!
//! Control characters (newlines, ESC and whole ANSI sequences, bidi overrides) become a space
//! first; after masking the result is cut to [`MAX_CHARS`] characters with a trailing `…`.
//! Masking runs before cutting, so a cut can never expose the head of a secret.

/// What a secret is replaced with.
pub const MASK: &str = "[redacted]";

/// Default cap for stored and printed error text, in characters.
pub const MAX_CHARS: usize = 400;

/// Appended when text is cut.
const ELLIPSIS: char = '…';

/// Masks secrets, replaces control characters with spaces and caps the length at
/// [`MAX_CHARS`] characters.
#[must_use]
pub fn redact(text: &str) -> String {
    redact_capped(text, MAX_CHARS)
}

/// [`redact`] with a caller-chosen cap (in characters, `…` included).
#[must_use]
pub fn redact_capped(text: &str, max_chars: usize) -> String {
    let text = precut(text, max_chars);
    // Controls go first: an ANSI colour code glued to a key (`\x1b[1msk-…`) must not hide the
    // key's start from the scanners.
    let clean = clean_controls(text);
    let masked = mask(&clean);
    truncate(&masked, max_chars)
}

/// A vendor key shape: literal prefix, minimum tail length, the tail's byte class.
type KeyShape = (&'static str, usize, fn(u8) -> bool);

/// Vendor key shapes recognised anywhere.
const PREFIXES: &[KeyShape] = &[
    ("sk-", 8, is_key_char),
    ("sk_live_", 8, is_key_char),
    ("sk_test_", 8, is_key_char),
    ("rk_live_", 8, is_key_char),
    ("AIza", 30, is_key_char),
    ("github_pat_", 20, is_key_char),
    ("ghp_", 20, is_key_char),
    ("gho_", 20, is_key_char),
    ("ghs_", 20, is_key_char),
    ("ghu_", 20, is_key_char),
    ("gsk_", 20, is_key_char),
    ("xai-", 20, is_key_char),
    ("hf_", 30, is_key_char),
    ("xoxb-", 10, is_key_char),
    ("xoxp-", 10, is_key_char),
    ("AKIA", 16, is_upper_alnum),
    ("ASIA", 16, is_upper_alnum),
];

/// Names whose value is a secret when followed by `:` or `=` (case-insensitive).
const SECRET_NAMES: &[&str] = &[
    "authorization",
    "api_key",
    "api-key",
    "apikey",
    "api key",
    "access_token",
    "access-token",
    "refresh_token",
    "id_token",
    "auth_token",
    "auth-token",
    "session_token",
    "client_secret",
    "secret_key",
    "secret-key",
    "private_key",
    "private-key",
    "client-secret",
    "password",
    "passwd",
    // Generic names, unquoted too (`token=…`, `secret: …`): over-masking a word of prose
    // is harmless, a leaked token is not.
    "token",
    "secret",
    "bearer_token",
    "bearer-token",
    "api_token",
    "api-token",
    "x-auth-token",
];

/// Names that, followed by whitespace only, still introduce a secret if the next word looks like
/// a key (`invalid apikey 3f2a…`).
const LOOSE_NAMES: &[&str] = &["api_key", "api-key", "apikey", "api key"];

/// Generic names that are secrets only as quoted JSON/Python keys (`"token": "…"`).
const QUOTED_NAMES: &[&str] = &[
    "key",
    "token",
    "secret",
    "signature",
    "sig",
    "credential",
    "credentials",
];

/// Query parameters whose value is masked (`?key=…`, `&X-Amz-Signature=…`).
const QUERY_NAMES: &[&str] = &[
    "key",
    "api_key",
    "api-key",
    "apikey",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth",
    "auth_token",
    "signature",
    "sig",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "x-goog-signature",
    "x-goog-credential",
    "password",
    "secret",
    "client_secret",
];

/// Authorization schemes whose value is a list of parameters: masked to the end of the line.
const MULTI_PARAM_SCHEMES: &[&str] = &["digest", "aws4-hmac-sha256", "hoba", "mutual", "vapid"];

/// `[A-Za-z0-9_-]`: the alphabet of API keys.
fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn is_upper_alnum(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

/// A byte of a credential token: printable ASCII except quotes, brackets and separators that
/// end a value in headers, JSON, URLs and prose.
fn is_tok(b: u8) -> bool {
    b.is_ascii_graphic()
        && !matches!(
            b,
            b'"' | b'\''
                | b'`'
                | b','
                | b';'
                | b'<'
                | b'>'
                | b'('
                | b')'
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'\\'
                | b'&'
                | b'#'
                | b'?'
        )
}

fn token_end(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < b.len() && is_tok(b[j]) {
        j += 1;
    }
    j
}

fn skip_blanks(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < b.len() && matches!(b[j], b' ' | b'\t') {
        j += 1;
    }
    j
}

fn starts_with_ci(b: &[u8], at: usize, lit: &str) -> bool {
    b.get(at..at + lit.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(lit.as_bytes()))
}

/// The byte before `at` does not continue a word, so a name or key may start at `at`.
fn word_start(b: &[u8], at: usize, continues: fn(u8) -> bool) -> bool {
    at == 0 || !continues(b[at - 1])
}

/// Cuts absurdly long input before scanning, without leaving half a token at the cut (which the
/// scanners might no longer recognise as a secret). Only text far beyond the cap is dropped.
fn precut(text: &str, max_chars: usize) -> &str {
    let limit = max_chars.saturating_mul(4).saturating_add(16 * 1024);
    if text.len() <= limit {
        return text;
    }
    let b = text.as_bytes();
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    if is_tok(b[cut]) {
        while cut > 0 && is_tok(b[cut - 1]) {
            cut -= 1;
        }
    }
    text.get(..cut).unwrap_or("")
}

/// Replaces every secret with [`MASK`].
fn mask(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        match secret_at(b, i) {
            // Every scanner starts and stops on an ASCII byte or the end of the text, so both
            // ends are char boundaries; `get` keeps a scanner bug from ever panicking.
            Some((start, end)) if start >= copied && end > start => {
                out.push_str(s.get(copied..start).unwrap_or(""));
                out.push_str(MASK);
                copied = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(s.get(copied..).unwrap_or(""));
    out
}

/// The byte range of a secret that a rule recognises at position `i`, if any.
fn secret_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let c = b[i];
    if !c.is_ascii() {
        return None;
    }
    match c {
        b'?' | b'&' | b';' => return query_value(b, i),
        b':' => return url_userinfo(b, i),
        _ => {}
    }
    if !c.is_ascii_alphabetic() {
        return None;
    }
    vendor_key(b, i)
        .or_else(|| jwt(b, i))
        .or_else(|| bearer(b, i))
        .or_else(|| named_value(b, i))
}

fn vendor_key(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if !word_start(b, i, is_key_char) {
        return None;
    }
    for &(lit, min_tail, tail) in PREFIXES {
        if b[i..].starts_with(lit.as_bytes()) {
            let from = i + lit.len();
            let mut j = from;
            while j < b.len() && tail(b[j]) {
                j += 1;
            }
            if j - from >= min_tail {
                return Some((i, j));
            }
        }
    }
    None
}

/// A bare JSON Web Token: `eyJ…` with three dot-separated base64url parts.
fn jwt(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if !b[i..].starts_with(b"eyJ") || !word_start(b, i, is_key_char) {
        return None;
    }
    let mut j = i;
    let mut dots = 0;
    while j < b.len() && (is_key_char(b[j]) || b[j] == b'.') {
        dots += usize::from(b[j] == b'.');
        j += 1;
    }
    (dots >= 2 && j - i >= 24).then_some((i, j))
}

/// `Bearer <token>` (also `Bearer%20<token>`, `bearer: <token>`): masks the token.
fn bearer(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if !starts_with_ci(b, i, "bearer") || !word_start(b, i, |c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let mut j = i + "bearer".len();
    let after_word = j;
    loop {
        if j < b.len() && matches!(b[j], b' ' | b'\t' | b':' | b'=' | b'+') {
            j += 1;
        } else if b.get(j..j + 3) == Some(b"%20") {
            j += 3;
        } else {
            break;
        }
    }
    if j == after_word {
        return None;
    }
    // A quoted token (`Bearer: "…"`, JSON-escaped or not) runs to its partner quote.
    let escaped = b.get(j) == Some(&b'\\') && matches!(b.get(j + 1), Some(b'"' | b'\''));
    let q = if escaped { j + 1 } else { j };
    if let Some(&quote @ (b'"' | b'\'')) = b.get(q) {
        let start = q + 1;
        let end = quoted_end(b, start, quote, escaped);
        return (end > start).then_some((start, end));
    }
    let end = token_end(b, j);
    (end > j).then_some((j, end))
}

/// The value after a secret-bearing name: `Authorization: …`, `api_key=…`, `"api_key":"…"`,
/// `{\"token\":\"…\"}`, `x-api-key: …`, `apikey 3f2a…`.
fn named_value(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if !word_start(b, i, |c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let name_end = |name: &str| {
        let end = i + name.len();
        let boundary = b
            .get(end)
            .is_none_or(|&c| !(c.is_ascii_alphanumeric() || c == b'_'));
        (starts_with_ci(b, i, name) && boundary).then_some(end)
    };
    let (name, end, quoted_only) = SECRET_NAMES
        .iter()
        .find_map(|n| name_end(n).map(|e| (*n, e, false)))
        .or_else(|| {
            QUOTED_NAMES
                .iter()
                .find_map(|n| name_end(n).map(|e| (*n, e, true)))
        })?;
    if quoted_only {
        let quote = *b.get(i.checked_sub(1)?)?;
        let closed = b.get(end) == Some(&quote)
            || (b.get(end) == Some(&b'\\') && b.get(end + 1) == Some(&quote));
        if !matches!(quote, b'"' | b'\'') || !closed {
            return None;
        }
    }
    // The closing quote of a quoted key, possibly JSON-escaped: `"api_key"`, `\"api_key\"`.
    let mut j = end;
    let mut quotes = 0;
    while j < b.len() && quotes < 3 && matches!(b[j], b'"' | b'\'' | b'\\') {
        j += 1;
        quotes += 1;
    }
    let before_sep = j;
    j = skip_blanks(b, j);
    let separated = if j < b.len() && matches!(b[j], b':' | b'=') {
        j += 1;
        true
    } else if b.get(j..j + 3) == Some("：".as_bytes()) || b.get(j..j + 3) == Some("＝".as_bytes())
    {
        j += 3;
        true
    } else {
        false
    };
    if !separated && (j == before_sep || quotes > 0 || !LOOSE_NAMES.contains(&name)) {
        return None;
    }
    j = skip_blanks(b, j);
    // An opening quote, possibly JSON-escaped: the value is everything up to its partner.
    let escaped = b.get(j) == Some(&b'\\') && matches!(b.get(j + 1), Some(b'"' | b'\''));
    let q = if escaped { j + 1 } else { j };
    if let Some(&quote @ (b'"' | b'\'')) = b.get(q) {
        let start = q + 1;
        let end = quoted_end(b, start, quote, escaped);
        return (end > start).then_some((start, end));
    }
    let first_end = token_end(b, j);
    if first_end == j {
        return None;
    }
    if !separated {
        return looks_like_key(&b[j..first_end]).then_some((j, first_end));
    }
    if name == "authorization" {
        return Some((j, authorization_end(b, j, first_end)));
    }
    Some((j, first_end))
}

/// End of a quoted value starting at `start`: the partner quote (escaped quote if the value was
/// opened by an escaped one), or the end of the line.
fn quoted_end(b: &[u8], start: usize, quote: u8, escaped: bool) -> usize {
    let mut j = start;
    while j < b.len() {
        let c = b[j];
        if c < 0x20 || c == 0x7f {
            break;
        }
        if escaped {
            if c == b'\\' || c == quote {
                break;
            }
        } else if c == b'\\' {
            j += 2;
            continue;
        } else if c == quote {
            break;
        }
        j += 1;
    }
    j.min(b.len())
}

/// An unquoted `Authorization` value: the scheme and its credential (`Basic dXNl…`), or the
/// rest of the text for parameter-list schemes (`Digest …`, `AWS4-HMAC-SHA256 …`).
fn authorization_end(b: &[u8], start: usize, first_end: usize) -> usize {
    let scheme = &b[start..first_end];
    let scheme_like = scheme.len() <= 24
        && scheme[0].is_ascii_alphabetic()
        && scheme
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-');
    if !scheme_like {
        return first_end;
    }
    let next = skip_blanks(b, first_end);
    if next == first_end {
        return first_end;
    }
    // A quoted credential after the scheme (`Bearer "…"`, JSON-escaped or not).
    let escaped = b.get(next) == Some(&b'\\') && matches!(b.get(next + 1), Some(b'"' | b'\''));
    let q = if escaped { next + 1 } else { next };
    if let Some(&quote @ (b'"' | b'\'')) = b.get(q) {
        let end = quoted_end(b, q + 1, quote, escaped);
        return if end > q + 1 { end } else { first_end };
    }
    let second_end = token_end(b, next);
    if second_end == next {
        return first_end;
    }
    if MULTI_PARAM_SCHEMES
        .iter()
        .any(|s| scheme.eq_ignore_ascii_case(s.as_bytes()))
    {
        let mut j = next;
        while j < b.len() && b[j] >= 0x20 && b[j] != 0x7f {
            j += 1;
        }
        return j;
    }
    second_end
}

/// A word that is plausibly a key rather than prose: long, mixed letters and digits.
fn looks_like_key(word: &[u8]) -> bool {
    word.len() >= 16
        && word.iter().any(u8::is_ascii_digit)
        && word.iter().any(u8::is_ascii_alphabetic)
        && word.iter().all(|&c| is_key_char(c) || c == b'.')
}

/// `?key=…`, `&signature=…`, `&amp;token=…`: the value of a secret query parameter.
fn query_value(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let from = i + 1;
    let mut j = from;
    while j < b.len() && (is_key_char(b[j]) || b[j] == b'.') {
        j += 1;
    }
    if j == from || b.get(j) != Some(&b'=') {
        return None;
    }
    let name = &b[from..j];
    if !QUERY_NAMES
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
    {
        return None;
    }
    let start = j + 1;
    let end = token_end(b, start);
    (end > start).then_some((start, end))
}

/// `scheme://user:password@host`: masks the credentials.
fn url_userinfo(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if b.get(i..i + 3) != Some(b"://") {
        return None;
    }
    let start = i + 3;
    let mut j = start;
    let mut at = None;
    while j < b.len() && is_tok(b[j]) && b[j] != b'/' {
        if b[j] == b'@' {
            at = Some(j);
        }
        j += 1;
    }
    at.filter(|&a| a > start).map(|a| (start, a))
}

/// Characters that could break a log line or fool a terminal.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Each run of control characters (an ANSI escape sequence counts as one) becomes one space.
fn clean_controls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    let mut in_run = false;
    while let Some(c) = chars.next() {
        if !is_unsafe(c) {
            out.push(c);
            in_run = false;
            continue;
        }
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // CSI: parameter and intermediate bytes, then one final byte.
            while let Some(&d) = chars.peek() {
                match d {
                    '\u{20}'..='\u{3f}' => {
                        chars.next();
                    }
                    '\u{40}'..='\u{7e}' => {
                        chars.next();
                        break;
                    }
                    _ => break,
                }
            }
        }
        if !in_run {
            out.push(' ');
            in_run = true;
        }
    }
    out
}

/// At most `max_chars` characters; a cut text ends with `…`.
fn truncate(s: &str, max_chars: usize) -> String {
    if max_chars == 0 {
        return String::new();
    }
    let mut indices = s.char_indices().map(|(i, _)| i);
    let Some(cut) = indices.nth(max_chars - 1) else {
        return s.to_string();
    };
    if indices.next().is_none() {
        return s.to_string();
    }
    let mut out = s.get(..cut).unwrap_or("").to_string();
    out.push(ELLIPSIS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAI: &str =
        "sk-proj-Xb7qJ2mWv9LdR4tZk1NcY8uHs3FpGe6Aa0Vi5Or-OxTQnB2_Ew9KzUm4Jy7Dc1Sg8Rh3Pl6Wf0Ae5Tb";
    const ANTHROPIC: &str = "sk-ant-api03-q8Zr4Kx1Vn7Tb2Lm9Pw5Hc3Jd6Fs0Ga-Ye4Uo8Ri1Qt7Nk2Mv5Lx9Bz3Cw6Ds0Ef-Gh1Ij4Kl7MnAA";
    const DEEPSEEK: &str = "sk-3f9c2a7e1b8d4c6f0a5e9b2d7c1f4a8e";
    const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6InBpIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    const BASIC: &str = "cGktdXNlcjpodW50ZXIyLXN1cGVyLXNlY3JldA==";
    const GOOGLE: &str = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY";
    const SIG: &str = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
    const OPAQUE: &str = "tok_9Qm2Xv7Lp4Rz8Kw1";
    const ZHIPU: &str = "3c5e7a9b1d2f4e6a8c0b2d4f6a8c0e2f.Xq7PzLm2Wk9RtYb4";

    /// Fails when any 8-character window of `secret` is still in `out`.
    fn assert_no_secret(input: &str, out: &str, secret: &str) {
        let chars: Vec<char> = secret.chars().collect();
        for w in chars.windows(8.min(chars.len())) {
            let w: String = w.iter().collect();
            assert!(
                !out.contains(&w),
                "secret fragment {w:?} survived\n  input:  {input:?}\n  output: {out:?}"
            );
        }
    }

    fn check(input: &str, secrets: &[&str]) -> String {
        let out = redact(input);
        for s in secrets {
            assert_no_secret(input, &out, s);
        }
        assert!(out.contains(MASK), "nothing masked in {out:?}");
        assert!(!out.chars().any(is_unsafe), "control char left in {out:?}");
        out
    }

    #[test]
    fn openai_project_key_in_a_real_error() {
        let input = format!(
            "401: Incorrect API key provided: {OPENAI}. You can find your API key at https://platform.openai.com/account/api-keys."
        );
        let out = check(&input, &[OPENAI]);
        assert_eq!(
            out,
            "401: Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys."
        );
    }

    #[test]
    fn anthropic_key_in_header_and_json() {
        let input = format!(
            r#"401: {{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key"}}}} sent x-api-key: {ANTHROPIC}"#
        );
        let out = check(&input, &[ANTHROPIC]);
        assert!(out.ends_with("sent x-api-key: [redacted]"), "{out}");
        assert!(out.contains("invalid x-api-key"), "prose is kept: {out}");
    }

    #[test]
    fn bearer_token_itself_is_masked_not_just_the_word() {
        // The reference runner's bug: `Authorization: Bearer X` kept X unless X was an sk- key.
        for input in [
            format!("Authorization: Bearer {JWT}"),
            format!("authorization:Bearer {JWT} rejected"),
            format!("request failed; bearer {JWT}"),
            format!("header Bearer%20{JWT}"),
            format!("BEARER {OPAQUE}"),
        ] {
            check(&input, &[JWT, OPAQUE]);
        }
        assert_eq!(
            redact(&format!("Authorization: Bearer {JWT}")),
            "Authorization: [redacted]"
        );
        assert_eq!(
            redact(&format!("got Bearer {OPAQUE}, denied")),
            "got Bearer [redacted], denied"
        );
        assert_eq!(
            redact(&format!("jwt {JWT} expired")),
            "jwt [redacted] expired"
        );
    }

    #[test]
    fn authorization_values_are_masked_whole_scheme_included() {
        let out = check(&format!("Authorization: Basic {BASIC}\nnext"), &[BASIC]);
        assert_eq!(out, "Authorization: [redacted] next");
        let out = check(&format!("authorization={BASIC}&x=1"), &[BASIC]);
        assert_eq!(out, "authorization=[redacted]&x=1");
        let out = check(&format!("Proxy-Authorization: token {OPAQUE}"), &[OPAQUE]);
        assert_eq!(out, "Proxy-Authorization: [redacted]");
        let aws = format!(
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20240101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature={SIG}\nbody"
        );
        let out = check(&aws, &[SIG, "AKIAIOSFODNN7EXAMPLE"]);
        // Parameter-list schemes are masked to the end of the text: over-masking beats a leak.
        assert_eq!(out, "Authorization: [redacted]");
    }

    #[test]
    fn query_parameters_in_urls() {
        let input = format!(
            "POST https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key={GOOGLE} failed"
        );
        let out = check(&input, &[GOOGLE]);
        assert_eq!(
            out,
            "POST https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=[redacted] failed"
        );
        let input = format!(
            "GET https://b.s3.amazonaws.com/o?X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20240101&X-Amz-Signature={SIG}&sig=Zm9vYmFy&token={OPAQUE}#frag"
        );
        let out = check(&input, &[SIG, OPAQUE, "AKIAIOSFODNN7EXAMPLE", "Zm9vYmFy"]);
        assert_eq!(
            out,
            "GET https://b.s3.amazonaws.com/o?X-Amz-Credential=[redacted]&X-Amz-Signature=[redacted]&sig=[redacted]&token=[redacted]#frag"
        );
        let out = check(
            &format!("see https://x.io/cb?a=1&amp;access_token={OPAQUE}"),
            &[OPAQUE],
        );
        assert!(out.ends_with("&amp;access_token=[redacted]"), "{out}");
        let out = check(
            "proxy http://admin:hunter2secret@10.0.0.1:8080/v1",
            &["hunter2secret"],
        );
        assert_eq!(out, "proxy http://[redacted]@10.0.0.1:8080/v1");
    }

    #[test]
    fn json_fields_plain_and_escaped() {
        let input = format!(
            r#"{{"api_key":"{ZHIPU}","authorization":"Bearer {OPAQUE}","model":"glm-4.6"}}"#
        );
        let out = check(&input, &[ZHIPU, OPAQUE]);
        assert_eq!(
            out,
            r#"{"api_key":"[redacted]","authorization":"[redacted]","model":"glm-4.6"}"#
        );
        let input = format!(r#"400: {{\"token\": \"{ZHIPU}\", \"n\": 1}}"#);
        let out = check(&input, &[ZHIPU]);
        assert_eq!(out, r#"400: {\"token\": \"[redacted]\", \"n\": 1}"#);
        let input = format!("{{'Authorization': 'Basic {BASIC}', 'secret': '{OPAQUE}'}}");
        let out = check(&input, &[BASIC, OPAQUE]);
        assert_eq!(
            out,
            "{'Authorization': '[redacted]', 'secret': '[redacted]'}"
        );
        let out = check(&format!("OPENAI_API_KEY={ZHIPU} set"), &[ZHIPU]);
        assert_eq!(out, "OPENAI_API_KEY=[redacted] set");
    }

    #[test]
    fn chinese_text_around_keys() {
        let input = format!("错误：无效的API密钥{DEEPSEEK}，请检查后重试");
        let out = check(&input, &[DEEPSEEK]);
        assert_eq!(out, "错误：无效的API密钥[redacted]，请检查后重试");
        let input = format!("认证失败 api_key：{ZHIPU} 余额不足");
        let out = check(&input, &[ZHIPU]);
        assert_eq!(out, "认证失败 api_key：[redacted] 余额不足");
        let input = format!("令牌 Bearer {OPAQUE}，已过期");
        assert_eq!(check(&input, &[OPAQUE]), "令牌 Bearer [redacted]，已过期");
    }

    #[test]
    fn keys_at_the_end_of_the_text() {
        assert_eq!(redact(&format!("key {DEEPSEEK}")), "key [redacted]");
        assert_eq!(
            redact(&format!("x-api-key:{ANTHROPIC}")),
            "x-api-key:[redacted]"
        );
        assert_eq!(redact(&format!("Bearer {OPAQUE}")), "Bearer [redacted]");
        assert_eq!(redact(&format!("?key={GOOGLE}")), "?key=[redacted]");
        assert_eq!(
            redact(&format!(r#""api_key": "{ZHIPU}"#)),
            r#""api_key": "[redacted]"#
        );
        assert_eq!(
            redact(&format!("invalid apikey {ZHIPU}")),
            "invalid apikey [redacted]"
        );
    }

    #[test]
    fn multi_line_errors_and_escape_sequences_become_single_spaces() {
        let input = format!(
            "upstream error\r\nAuthorization: Bearer {JWT}\nx-api-key: {OPAQUE}\n\t\u{1b}[31mfatal\u{1b}[0m\u{0}end\u{202e}x"
        );
        let out = check(&input, &[JWT, OPAQUE]);
        assert_eq!(
            out,
            "upstream error Authorization: [redacted] x-api-key: [redacted] fatal end x"
        );
    }

    #[test]
    fn truncation_is_char_safe_and_marked() {
        let long = "é".repeat(1000);
        let out = redact(&long);
        assert_eq!(out.chars().count(), MAX_CHARS);
        assert!(out.ends_with('…'));
        assert!(out.starts_with("éé"));
        let cjk = format!("额度{}", "不足".repeat(300));
        let out = redact_capped(&cjk, 7);
        assert_eq!(out, "额度不足不足…");
        assert_eq!(redact_capped("abc", 3), "abc");
        assert_eq!(redact_capped("abcd", 3), "ab…");
        assert_eq!(redact_capped("abcd", 1), "…");
        assert_eq!(redact_capped("abcd", 0), "");
        assert_eq!(redact(""), "");
        // The cap applies after masking: a key across the cap never shows its head.
        let input = format!("{}{OPENAI}", "x ".repeat(195));
        let out = redact(&input);
        assert_no_secret(&input, &out, OPENAI);
        assert!(out.ends_with("[redacted]") || out.ends_with('…'), "{out}");
    }

    #[test]
    fn huge_input_is_cut_without_exposing_a_half_key() {
        // Masking shrinks the text, so what lies near the pre-scan cut can end up inside the
        // cap: the cut must never leave the head of a key behind.
        let cap = 10_000;
        let limit = cap * 4 + 16 * 1024;
        let unit = format!("{OPENAI} ");
        let head = unit.repeat((limit - 200) / unit.len());
        for offset in 1..OPENAI.len() {
            let pad = " ".repeat(limit - offset - head.len());
            let input = format!("{head}{pad}{OPENAI} end");
            let out = redact_capped(&input, cap);
            assert_no_secret(&input, &out, OPENAI);
            let input = format!("{head}{pad}Bearer {OPAQUE} end");
            let out = redact_capped(&input, cap);
            assert_no_secret(&input, &out, OPAQUE);
        }
        let input = format!("{} {OPENAI}", "word ".repeat(1_000_000));
        let out = redact(&input);
        assert_eq!(out.chars().count(), MAX_CHARS);
    }

    #[test]
    fn prose_without_secrets_is_unchanged() {
        for text in [
            "429: rate limit exceeded, retry after 20s",
            "task-force disk-usage mask-rcnn risk-based",
            "max_tokens: 4096 exceeds the context length; too many tokens",
            "Authorization header is missing",
            "API key not valid. Please pass a valid API key.",
            "invalid x-api-key",
            "Bearer",
            "skip sk-short",
            "模型不存在 (model_not_found)",
            "https://api.example.com/v1/chat?stream=true&model=glm-4.6",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn redaction_is_idempotent() {
        for input in [
            format!("Authorization: Bearer {JWT} and {OPENAI} at https://h/?key={GOOGLE}"),
            format!(r#"{{"api_key":"{ZHIPU}"}} Bearer {OPAQUE}"#),
            "x".repeat(1000),
        ] {
            let once = redact(&input);
            assert_eq!(redact(&once), once);
        }
    }

    /// Every secret shape in every surrounding: nothing of the secret survives.
    #[test]
    fn no_secret_survives_in_any_context() {
        let shaped = [
            OPENAI,
            ANTHROPIC,
            DEEPSEEK,
            GOOGLE,
            JWT,
            "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",
            "ghp_Z8yX7wV6uT5sR4qP3oN2mL1kJ0iH9gF8eD7c",
            "gsk_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9z0",
            "xai-Zq8Wx7Ec6Rv5Tb4Yn3Um2Ik1Ol0Pa9Sd8Fg7Hj6",
            "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        ];
        let named = [BASIC, SIG, OPAQUE, ZHIPU];
        let contexts: &[(&str, &str)] = &[
            ("", ""),
            ("error: ", "."),
            ("密钥", "，请检查"),
            ("line one\n", "\nline three"),
            ("(", ")"),
            ("\"", "\""),
            ("'", "'"),
            ("`", "`"),
            ("<", ">"),
            ("\u{1b}[1m", "\u{1b}[0m"),
        ];
        let wrappers_shaped: &[fn(&str) -> String] = &[
            |s| s.to_string(),
            |s| format!("key {s}"),
            |s| format!("Authorization: Bearer {s}"),
            |s| format!("https://h/v1?key={s}&x=1"),
            |s| format!(r#"{{"api_key":"{s}"}}"#),
        ];
        let wrappers_named: &[fn(&str) -> String] = &[
            |s| format!("Authorization: Bearer {s}"),
            |s| format!("Authorization: Basic {s}"),
            |s| format!("authorization={s}"),
            |s| format!("Bearer {s}"),
            |s| format!("x-api-key: {s}"),
            |s| format!("api-key:{s}"),
            |s| format!("apikey={s}"),
            |s| format!("https://h/v1?signature={s}"),
            |s| format!("https://h/v1?a=b&sig={s}"),
            |s| format!("https://h/v1?access_token={s}"),
            |s| format!(r#"{{"api_key": "{s}"}}"#),
            |s| format!(r#"{{"authorization":"Bearer {s}"}}"#),
            |s| format!(r#"{{\"token\":\"{s}\"}}"#),
            |s| format!("password={s}"),
        ];
        let mut cases = 0;
        for (pre, post) in contexts {
            for secret in shaped {
                for wrap in wrappers_shaped {
                    let input = format!("{pre}{}{post}", wrap(secret));
                    check(&input, &[secret]);
                    cases += 1;
                }
            }
            for secret in named {
                for wrap in wrappers_named {
                    let input = format!("{pre}{}{post}", wrap(secret));
                    check(&input, &[secret]);
                    cases += 1;
                }
            }
        }
        assert!(cases > 900);
    }

    #[test]
    fn review_findings_are_masked() {
        let cases = [
            (
                "无效的令牌 token=abcdef1234567890abcdef1234567890 鉴权失败",
                "abcdef1234567890",
            ),
            ("secret=mysecretvalue123", "mysecretvalue123"),
            (
                "Bearer: \"quoted-token-value-123456\"",
                "quoted-token-value",
            ),
            ("bearer_token=0123456789abcdefABCDEF", "0123456789abcdef"),
            ("key: sk_live_51HxAbCdEfGhIjKlMn", "51HxAbCdEfGh"),
            (
                "{\"error\":\"Authorization: Bearer \\\"zzTopSecret987654321\\\"\"}",
                "zzTopSecret",
            ),
        ];
        for (text, secret) in cases {
            let out = redact(text);
            assert!(!out.contains(secret), "{text:?} -> {out:?}");
            assert!(out.contains(MASK), "{text:?} -> {out:?}");
        }
        assert_eq!(redact("the token was rejected"), "the token was rejected");
    }
}
