//! The masking pass over cleaned text: walks the bytes once, asks each rule whether a secret
//! starts here, and replaces what a rule returns with [`MASK`]. Owns the byte classes the rules
//! share and the rules that need no word lists (vendor prefixes, JWTs, `Bearer`, secret query
//! parameters, URL credentials). Pure: no I/O, no global state.

use super::bytes::{MASK, is_key_char, mask_at, run_end, starts_with_ci, token_end, word_start};
use super::{echo, named, shape};

/// A vendor key shape: literal prefix, minimum tail length, the tail's byte class.
type KeyShape = (&'static str, usize, fn(u8) -> bool);

/// Vendor key shapes recognised anywhere. `sk-` is matched in any case (see [`vendor_key`]).
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

fn is_upper_alnum(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

/// Replaces every secret a rule recognises with [`MASK`]. Existing masks are atomic: skipped,
/// never cut, so masking twice changes nothing.
pub(super) fn mask(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if mask_at(b, i) {
            i += MASK.len();
            continue;
        }
        match secret_at(b, i) {
            Some((start, end)) if end > start => {
                let (start, end) = cover_masks(b, start.max(copied), glued_end(b, end));
                if end <= start {
                    i += 1;
                    continue;
                }
                // Every rule starts and stops on an ASCII byte or the end of the text, so both
                // ends are char boundaries; `get` keeps a rule bug from ever panicking.
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

/// Extends a masked range over the rest of a word glued to it (`sk-…` + `.aaA00…`): left
/// behind, the rest would follow `]` on the next pass and be judged as a word of its own.
/// A sentence's trailing full stop stays.
fn glued_end(b: &[u8], end: usize) -> usize {
    let piece = |c: u8| is_key_char(c) || c == b'.';
    if end == 0 || end >= b.len() || !piece(b[end - 1]) || !piece(b[end]) {
        return end;
    }
    let mut glued = run_end(b, end, piece);
    while glued > end && b[glued - 1] == b'.' {
        glued -= 1;
    }
    glued
}

/// Widens a range that cuts into an existing mask so it covers that mask whole: half a mask
/// left behind would no longer be recognised as one on the next pass.
fn cover_masks(b: &[u8], mut start: usize, mut end: usize) -> (usize, usize) {
    let len = MASK.len();
    for k in start.saturating_sub(len - 1)..start {
        if mask_at(b, k) && k + len > start {
            start = k;
            break;
        }
    }
    for k in end.saturating_sub(len - 1)..end {
        if mask_at(b, k) && k + len > end {
            end = k + len;
            break;
        }
    }
    (start, end.min(b.len()))
}

/// The byte range of a secret that a rule recognises at position `i`, if any.
fn secret_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let c = b[i];
    if !c.is_ascii() {
        // Chinese key names (`密钥：…`) start on a UTF-8 lead byte.
        return named::cjk_named_value(b, i);
    }
    match c {
        b'?' | b'&' | b';' => return query_value(b, i),
        b':' => return url_userinfo(b, i),
        _ => {}
    }
    if c.is_ascii_digit() {
        return shape::key_token(b, i);
    }
    if !c.is_ascii_alphabetic() {
        return None;
    }
    vendor_key(b, i)
        .or_else(|| jwt(b, i))
        .or_else(|| bearer(b, i))
        .or_else(|| named::named_value(b, i))
        .or_else(|| echo::echoed_key(b, i))
        .or_else(|| shape::key_token(b, i))
}

fn vendor_key(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if !word_start(b, i, is_key_char) {
        return None;
    }
    // `SK-…`/`Sk-…` are keys too; outside the usual lower case a digit in the tail tells a key
    // from a word (`SK-Hynix`).
    if starts_with_ci(b, i, "sk-") {
        let from = i + 3;
        let end = run_end(b, from, is_key_char);
        let lower = &b[i..from] == b"sk-";
        let digit = b[from..end].iter().any(u8::is_ascii_digit);
        if end - from >= 8 && (lower || digit) {
            return Some((i, end));
        }
    }
    for &(lit, min_tail, tail) in PREFIXES {
        if b[i..].starts_with(lit.as_bytes()) {
            let from = i + lit.len();
            let j = run_end(b, from, tail);
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
    if let Some(quoted) = named::quoted_value(b, j) {
        return quoted.range();
    }
    let end = token_end(b, j);
    (end > j).then_some((j, end))
}

/// `?key=…`, `&signature=…`, `&amp;token=…`: the value of a secret query parameter.
fn query_value(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let from = i + 1;
    let j = run_end(b, from, |c| is_key_char(c) || c == b'.');
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

/// `scheme://user:password@host` (also `redis://:password@host`): masks the credentials.
/// The authority ends at `/`, `?`, `#`, whitespace, a quote, an angle bracket or a mask; inside
/// it the last `@` ends the credentials, so a password may hold `@`, `;`, `,`, `&` or brackets.
fn url_userinfo(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if b.get(i..i + 3) != Some(b"://") {
        return None;
    }
    let start = i + 3;
    // Credentials masked before (`://[redacted]@`) need nothing more; a mask anywhere in the
    // authority ends it: it may have swallowed the `/` that ended the authority.
    if mask_at(b, start) {
        return None;
    }
    let mut at = None;
    let mut j = start;
    while j < b.len()
        && b[j].is_ascii_graphic()
        && !matches!(
            b[j],
            b'/' | b'?' | b'#' | b'"' | b'\'' | b'`' | b'<' | b'>' | b'\\'
        )
    {
        if mask_at(b, j) {
            break;
        }
        if b[j] == b'@' {
            at = Some(j);
        }
        j += 1;
    }
    at.filter(|&a| a > start).map(|a| (start, a))
}
