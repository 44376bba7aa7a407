//! Values announced by a name or phrase: `Authorization: …`, `api_key=…`, `"token": "…"`,
//! `Incorrect API key provided: …`, `API Key 无效：…`, `密钥: …`, `invalid apikey 3f2a…`.
//! Owns the name lists and the rule for where such a value ends. Pure: no I/O, no global state.
//!
//! A value is whatever follows a separator (`:` `=` `：` `＝`) or the word `provided`, whatever
//! its shape: a short human password is as secret as a vendor key. Without either, only a value
//! that looks like a key is masked (`api key is invalid` and `token limit` stay readable). An
//! unquoted value is ASCII and ends at whitespace, a quote, `,` `;` `)` `]` `}` `<` `>` `\`, any
//! non-ASCII character (Chinese punctuation follows values without a space), `&` after `=`
//! (query strings), or a trailing sentence `.`; a quoted value ends at its partner quote.

use super::bytes::{
    ELLIPSIS_UTF8, is_key_char, mask_at, run_end, skip_blanks, starts_with_ci, token_end,
};

/// Names whose value is a secret when followed by a separator (case-insensitive).
const SECRET_NAMES: &[&str] = &[
    "authorization",
    "api_key",
    "api-key",
    "apikey",
    "api key",
    "access_token",
    "access-token",
    "access token",
    "refresh_token",
    "refresh token",
    "id_token",
    "auth_token",
    "auth-token",
    "auth token",
    "session_token",
    "session token",
    "client_secret",
    "client-secret",
    "client secret",
    "secret_key",
    "secret-key",
    "secret key",
    "access_key",
    "access-key",
    "access key",
    "private_key",
    "private-key",
    "private key",
    "password",
    "passwd",
    "passphrase",
    // Generic names, unquoted too (`token=…`, `secret: …`): over-masking a word of prose
    // is harmless, a leaked token is not.
    "token",
    "secret",
    "bearer_token",
    "bearer-token",
    "api_token",
    "api-token",
    "api token",
    "x-auth-token",
];

/// Names that, followed by whitespace only, still introduce a secret if the next word looks like
/// a key (`invalid apikey 3f2a…`, `access key AKIA…`).
const LOOSE_NAMES: &[&str] = &[
    "api_key",
    "api-key",
    "apikey",
    "api key",
    "access_key",
    "access-key",
    "access key",
    "secret_key",
    "secret-key",
    "secret key",
];

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

/// Chinese names of a key, token or password. A key may follow them without a space
/// (`API密钥sk-…`), so without a separator they act like [`LOOSE_NAMES`] with no blank needed.
const CJK_NAMES: &[&str] = &[
    "密钥", "秘钥", "私钥", "令牌", "口令", "密码", "凭证", "凭据",
];

/// Words between a name and its separator that keep the value announced: `API key provided:`,
/// `API Key 无效：`, `密钥错误：`. `true` = only together with a separator.
const QUALIFIERS: &[(&str, bool)] = &[
    ("provided", false),
    ("无效", true),
    ("错误", true),
    ("不正确", true),
    ("不合法", true),
    ("非法", true),
    ("已过期", true),
    ("过期", true),
    ("已失效", true),
    ("失效", true),
    ("为", true),
    ("是", true),
];

/// Words that follow `provided` in prose (`the API key provided is invalid`): not a value.
const PROSE_AFTER_PROVIDED: &[&str] = &[
    "is", "was", "has", "had", "does", "did", "not", "in", "for", "by", "to", "and", "or", "with",
    "but", "as", "at", "on", "are", "were", "appears", "seems", "could", "cannot", "can", "may",
    "might", "must", "should", "will", "would", "be", "been", "here", "there", "the", "a", "an",
    "via", "from", "no", "yet", "doesn't", "isn't", "wasn't",
];

/// Authorization schemes whose value is a list of parameters: masked to the end of the line.
const MULTI_PARAM_SCHEMES: &[&str] = &["digest", "aws4-hmac-sha256", "hoba", "mutual", "vapid"];

/// What may introduce a value when no separator follows the name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loose {
    /// Nothing: a separator (or `provided`) is required.
    No,
    /// A key-looking word after at least one blank.
    Spaced,
    /// A key-looking word, directly attached or after blanks.
    Glued,
}

/// The value after a secret-bearing name: `Authorization: …`, `api_key=…`, `"api_key":"…"`,
/// `{\"token\":\"…\"}`, `x-api-key: …`, `apikey 3f2a…`, `API key provided: …`.
pub(super) fn named_value(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if i > 0 && b[i - 1].is_ascii_alphanumeric() {
        return None;
    }
    let name_end = |name: &str| {
        let end = i + name.len();
        let boundary = b
            .get(end)
            .is_none_or(|&c| !(c.is_ascii_alphanumeric() || c == b'_'));
        (starts_with_ci(b, i, name) && boundary).then_some(end)
    };
    // The longest name wins: `secret key: …` must not stop at `secret`.
    let longest = |names: &[&'static str]| {
        names
            .iter()
            .filter_map(|n| name_end(n).map(|e| (*n, e)))
            .max_by_key(|&(n, _)| n.len())
    };
    if longest(SECRET_NAMES).is_none()
        && let Some(end) = name_end("key")
        && starts_with_ci(b, skip_blanks(b, end), "provided")
    {
        // `Incorrect key provided: …` (OpenAI's wording without "API").
        return value_after(b, end, Loose::No, false);
    }
    let (name, end, quoted_only) = longest(SECRET_NAMES)
        .map(|(n, e)| (n, e, false))
        .or_else(|| longest(QUOTED_NAMES).map(|(n, e)| (n, e, true)))?;
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
    let loose = if quotes == 0 && LOOSE_NAMES.contains(&name) {
        Loose::Spaced
    } else {
        Loose::No
    };
    value_after(b, j, loose, name == "authorization")
}

/// The value after a Chinese key name starting at `i` (`API密钥：…`, `令牌 …`, `密码=…`).
pub(super) fn cjk_named_value(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let name = CJK_NAMES
        .iter()
        .find(|n| b[i..].starts_with(n.as_bytes()))?;
    value_after(b, i + name.len(), Loose::Glued, false)
}

/// The value that follows a name ending at `from`, if the text announces one.
fn value_after(b: &[u8], from: usize, loose: Loose, authorization: bool) -> Option<(usize, usize)> {
    let mut j = skip_blanks(b, from);
    let blanks = j > from;
    let mut provided = false;
    if let Some((q_end, needs_separator)) = qualifier(b, j) {
        let k = skip_blanks(b, q_end);
        if separator(b, k).is_some() {
            j = k;
        } else if !needs_separator {
            provided = true;
            j = k;
        }
    }
    let sep = separator(b, j);
    if let Some((_, after)) = sep {
        j = after;
    } else if !provided {
        match loose {
            Loose::No => return None,
            Loose::Spaced if !blanks => return None,
            Loose::Spaced | Loose::Glued => {}
        }
    }
    j = skip_gaps(b, j);
    if let Some(quoted) = quoted_value(b, j) {
        return quoted.range();
    }
    if mask_at(b, j) {
        return None;
    }
    if sep.is_none() && !provided {
        // The key-character run, not the whole token: judged on `3f2a…/x`, a cut `3f2a…`
        // would be judged differently on the next pass.
        let mut end = run_end(b, j, |c| is_key_char(c) || c == b'.');
        while end > j && b[end - 1] == b'.' {
            end -= 1;
        }
        return (end > j && looks_like_key(&b[j..end])).then_some((j, end));
    }
    if authorization && sep.is_some() {
        let first_end = token_end(b, j);
        return (first_end > j).then(|| (j, authorization_end(b, j, first_end)));
    }
    // A JSON object or array, or a parenthesised remark, is not a credential.
    if matches!(b.get(j), Some(b'{' | b'[' | b'(')) {
        return None;
    }
    let after_equals = sep.is_some_and(|(c, _)| c == b'=');
    let mut end = value_end(b, j, after_equals);
    if end == j {
        return None;
    }
    // A value broken by JSON-escaped line breaks (`provided:\n<half>\n<half>`, issue 29) goes
    // on after them: a word of prose masked after a key costs little, half a key leaked is a
    // key leaked.
    for _ in 0..MAX_CONTINUATIONS {
        let next = skip_gaps(b, end);
        let escaped = b[end..next].contains(&b'\\');
        if !escaped || !b.get(next).copied().is_some_and(is_key_char) || mask_at(b, next) {
            break;
        }
        let more = value_end(b, next, after_equals);
        if more == next {
            break;
        }
        end = more;
    }
    if provided && sep.is_none() {
        let word = &b[j..end];
        if PROSE_AFTER_PROVIDED
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w.as_bytes()))
        {
            return None;
        }
    }
    Some((j, end))
}

/// Pieces of one value joined across JSON-escaped line breaks, at most (see `value_after`).
const MAX_CONTINUATIONS: usize = 4;

/// Past blanks and JSON-escaped whitespace (`\n`, `\r`, `\t`) from `j`.
fn skip_gaps(b: &[u8], j: usize) -> usize {
    let mut j = skip_blanks(b, j);
    while b.get(j) == Some(&b'\\') && matches!(b.get(j + 1), Some(b'n' | b'r' | b't')) {
        j = skip_blanks(b, j + 2);
    }
    j
}

/// A separator at `j`: its ASCII form (`:` or `=`, full-width forms folded) and where it ends.
fn separator(b: &[u8], j: usize) -> Option<(u8, usize)> {
    match b.get(j) {
        Some(&c @ (b':' | b'=')) => Some((c, j + 1)),
        _ if b[j..].starts_with("：".as_bytes()) => Some((b':', j + 3)),
        _ if b[j..].starts_with("＝".as_bytes()) => Some((b'=', j + 3)),
        _ => None,
    }
}

/// A qualifier word at `j` and where it ends, with whether it needs a separator after it.
fn qualifier(b: &[u8], j: usize) -> Option<(usize, bool)> {
    QUALIFIERS.iter().find_map(|&(word, needs_separator)| {
        let end = j + word.len();
        let whole = b
            .get(end)
            .is_none_or(|c| !c.is_ascii_alphanumeric() || !word.is_ascii());
        (starts_with_ci(b, j, word) && whole).then_some((end, needs_separator))
    })
}

/// End of an unquoted value starting at `j` (see the module doc). After `=` a `&` ends it too.
fn value_end(b: &[u8], j: usize, after_equals: bool) -> usize {
    let mut end = run_end(b, j, |c| {
        c.is_ascii_graphic()
            && !matches!(
                c,
                b'"' | b'\'' | b'`' | b',' | b';' | b')' | b']' | b'}' | b'<' | b'>' | b'\\'
            )
            && !(after_equals && c == b'&')
    });
    // Where a mask starts inside the run, the value stops: it is already masked from there on.
    if let Some(k) = (j + 1..end).find(|&k| mask_at(b, k)) {
        end = k;
    }
    while end > j && b[end - 1] == b'.' {
        end -= 1;
    }
    end
}

/// What opens at a position: a quoted value, or an empty pair of quotes.
pub(super) enum Quoted {
    Value(usize, usize),
    Empty,
}

impl Quoted {
    pub(super) fn range(self) -> Option<(usize, usize)> {
        match self {
            Quoted::Value(start, end) => Some((start, end)),
            Quoted::Empty => None,
        }
    }
}

/// A quoted value opening at `j` (the quote possibly JSON-escaped); `None` when no quote opens
/// there.
pub(super) fn quoted_value(b: &[u8], j: usize) -> Option<Quoted> {
    let escaped = b.get(j) == Some(&b'\\') && matches!(b.get(j + 1), Some(b'"' | b'\''));
    let q = if escaped { j + 1 } else { j };
    let &quote @ (b'"' | b'\'') = b.get(q)? else {
        return None;
    };
    let start = q + 1;
    let mut end = quoted_end(b, start, quote, escaped);
    // Unterminated at the end of the text behind a `…`: the text was cut there; the marker is
    // not part of the value (else a cut `'…` would be masked on the next pass).
    if end == b.len() && b[start..end].ends_with(ELLIPSIS_UTF8) {
        end -= ELLIPSIS_UTF8.len();
    }
    Some(if end > start {
        Quoted::Value(start, end)
    } else {
        Quoted::Empty
    })
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
    if let Some(quoted) = quoted_value(b, next) {
        return quoted.range().map_or(first_end, |(_, end)| end);
    }
    let second_end = token_end(b, next);
    if second_end == next {
        return first_end;
    }
    if MULTI_PARAM_SCHEMES
        .iter()
        .any(|s| scheme.eq_ignore_ascii_case(s.as_bytes()))
    {
        return run_end(b, next, |c| c >= 0x20 && c != 0x7f);
    }
    second_end
}

/// A word that is plausibly a key rather than prose: long, mixed letters and digits.
fn looks_like_key(word: &[u8]) -> bool {
    word.len() >= 16
        && word.iter().any(u8::is_ascii_digit)
        && word.iter().any(u8::is_ascii_alphabetic)
}
