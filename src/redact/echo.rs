//! Keys quoted by the wordings providers use to tell a client its key is bad, where no
//! separator announces a value: `Unauthorized: KEY`, `Authentication failed for key 'KEY'`,
//! `Your key (KEY) has been revoked`, `token KEY expired`. Pure: no I/O, no global state.
//!
//! Each rule starts at a name (`key`, `api key`, `token`, `unauthorized`) and masks only the
//! one value its wording puts in a fixed place — quoted, parenthesised, between the name and
//! a verdict word, or alone after `Unauthorized:` — so prose such as `the key (see above)` or
//! `Unauthorized: invalid API key` stays readable.

use super::bytes::{is_key_char, is_tok, mask_at, run_end, skip_blanks, starts_with_ci};

/// Names a key is quoted after (longest first, so `api key` is not read as `key`).
const NAMES: &[&str] = &[
    "access token",
    "access key",
    "api_key",
    "api-key",
    "api key",
    "apikey",
    "token",
    "key",
];

/// Words that may follow a key to say what is wrong with it (`token KEY expired`).
const VERDICTS: &[&str] = &[
    "expired",
    "has expired",
    "is expired",
    "revoked",
    "has been revoked",
    "was revoked",
    "is revoked",
    "is invalid",
    "invalid",
    "not valid",
    "is not valid",
    "disabled",
    "is disabled",
    "not found",
    "was not found",
    "does not exist",
];

/// Words between a name and a verdict that are prose, not a key (`token has expired`).
const PROSE: &[&str] = &[
    "already",
    "has",
    "have",
    "had",
    "is",
    "was",
    "were",
    "been",
    "just",
    "now",
    "recently",
    "previously",
    "you",
    "your",
    "the",
    "that",
    "this",
    "provided",
    "used",
    "given",
    "supplied",
];

/// Shortest value masked by these rules when it has no digit (a key pasted by a human may be
/// letters only, but short words around these names are prose).
const MIN_PLAIN: usize = 12;
/// Shortest value masked when it has a digit or a symbol.
const MIN_MIXED: usize = 6;

/// The range of a key these wordings quote, starting at a name at `i`.
pub(super) fn echoed_key(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if i > 0 && b[i - 1].is_ascii_alphanumeric() {
        return None;
    }
    if starts_with_ci(b, i, "unauthorized") {
        return after_unauthorized(b, i + "unauthorized".len());
    }
    let name = NAMES.iter().find(|n| {
        starts_with_ci(b, i, n)
            && b.get(i + n.len())
                .is_none_or(|c| !c.is_ascii_alphanumeric() && *c != b'_')
    })?;
    let j = skip_blanks(b, i + name.len());
    if j == i + name.len() {
        return None;
    }
    match b.get(j)? {
        b'\'' | b'"' | b'`' => quoted(b, j),
        b'(' => parenthesised(b, j),
        _ => before_verdict(b, j),
    }
}

/// `Unauthorized: KEY` — the value only when it is the whole rest of the line and looks like
/// a credential, never the first word of a sentence (`Unauthorized: invalid API key`).
fn after_unauthorized(b: &[u8], from: usize) -> Option<(usize, usize)> {
    if b.get(from) != Some(&b':') {
        return None;
    }
    let start = skip_blanks(b, from + 1);
    if mask_at(b, start) {
        return None;
    }
    let end = run_end(b, start, is_tok);
    let rest = skip_blanks(b, end);
    let last = rest == b.len() || matches!(b.get(rest), Some(b'"' | b'\'' | b'}' | b','));
    (last && credential(&b[start..end])).then_some((start, end))
}

/// `key 'KEY'`, `key "KEY"`, `` key `KEY` ``: the quoted text, if it is one credential-like word.
fn quoted(b: &[u8], j: usize) -> Option<(usize, usize)> {
    let quote = b[j];
    let start = j + 1;
    let end = run_end(b, start, |c| is_tok(c) || matches!(c, b'(' | b')'));
    (b.get(end) == Some(&quote) && credential(&b[start..end])).then_some((start, end))
}

/// `key (KEY)`: the parenthesised word, if it is one credential-like word.
fn parenthesised(b: &[u8], j: usize) -> Option<(usize, usize)> {
    let start = j + 1;
    let end = run_end(b, start, is_tok);
    (b.get(end) == Some(&b')') && credential(&b[start..end])).then_some((start, end))
}

/// `token KEY expired`, `key KEY has been revoked`: the one word between name and verdict.
fn before_verdict(b: &[u8], j: usize) -> Option<(usize, usize)> {
    if mask_at(b, j) {
        return None;
    }
    let end = run_end(b, j, is_tok);
    let word = &b[j..end];
    if word.is_empty()
        || PROSE
            .iter()
            .any(|p| word.eq_ignore_ascii_case(p.as_bytes()))
        || !credential(word)
    {
        return None;
    }
    let k = skip_blanks(b, end);
    if k == end {
        return None;
    }
    let verdict = VERDICTS.iter().any(|v| {
        starts_with_ci(b, k, v)
            && b.get(k + v.len())
                .is_none_or(|c| !c.is_ascii_alphanumeric())
    });
    verdict.then_some((j, end))
}

/// Plausibly a key rather than a word: long enough, and longer still without a digit or a
/// symbol (`hunter22xyz`, `horse/battery+staple=07`, `abcdefghijklmnopqrstuvwx`).
fn credential(word: &[u8]) -> bool {
    let mixed = word
        .iter()
        .any(|c| c.is_ascii_digit() || (!c.is_ascii_alphabetic() && *c != b'-'));
    let min = if mixed { MIN_MIXED } else { MIN_PLAIN };
    word.len() >= min && word.iter().filter(|c| is_key_char(**c)).count() * 2 >= word.len()
}

#[cfg(test)]
mod tests {
    use super::super::redact;

    /// Issue 20: the wordings real providers use to quote a bad key.
    #[test]
    fn keys_in_the_wordings_providers_echo_are_masked() {
        let key = "q8Zr4Kx1Vn7Tb2Lm9Pw5Hc3J";
        for (text, kept) in [
            (format!("Unauthorized: {key}"), "Unauthorized: "),
            (
                format!("Authentication failed for key '{key}'"),
                "Authentication failed for key '",
            ),
            (format!("Your key ({key}) has been revoked"), "Your key ("),
            (format!("token {key} expired"), "token "),
            (
                "Authentication failed for key 'horse/battery+staple=07'".to_string(),
                "failed for key '",
            ),
            ("token hunter22xyz has expired".to_string(), "token "),
        ] {
            let out = redact(&text);
            assert!(out.contains("[redacted]"), "{text} → {out}");
            assert!(out.contains(kept), "{text} → {out}");
            assert!(
                !out.contains(key) && !out.contains("hunter22") && !out.contains("horse/"),
                "{out}"
            );
        }
    }

    /// The same names in prose are left alone.
    #[test]
    fn prose_around_the_same_names_stays() {
        for text in [
            "Unauthorized: invalid API key",
            "401 Unauthorized: Incorrect API key provided",
            "the key (see above) is wrong",
            "token has expired",
            "your token already expired",
            "key 'abc' not found",
            "the api key is invalid",
            "Unauthorized: please check your credentials",
        ] {
            assert_eq!(redact(text), text, "{text}");
        }
    }
}
