//! What every masking rule shares: the mask, the cut marker, the byte classes of keys and
//! tokens, small scanners over bytes, and the cleaning of control characters. A leaf: it
//! uses nothing else of `redact`, so the rules depend on it and never on each other's helpers.

/// What a secret is replaced with.
pub const MASK: &str = "[redacted]";

/// Appended when text is cut (as a char, and as the bytes the scanners see).
pub const ELLIPSIS: char = '…';
pub const ELLIPSIS_UTF8: &[u8] = "…".as_bytes();

/// `[A-Za-z0-9_-]`: the alphabet of API keys.
pub fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// A byte of a credential token: printable ASCII except quotes, brackets and separators that
/// end a value in headers, JSON, URLs and prose.
pub fn is_tok(b: u8) -> bool {
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

/// End of the run of bytes from `from` that satisfy `keep`.
pub fn run_end(b: &[u8], from: usize, keep: impl Fn(u8) -> bool) -> usize {
    let mut j = from;
    while j < b.len() && keep(b[j]) {
        j += 1;
    }
    j
}

pub fn token_end(b: &[u8], from: usize) -> usize {
    run_end(b, from, is_tok)
}

pub fn skip_blanks(b: &[u8], from: usize) -> usize {
    run_end(b, from, |c| matches!(c, b' ' | b'\t'))
}

pub fn starts_with_ci(b: &[u8], at: usize, lit: &str) -> bool {
    b.get(at..at + lit.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(lit.as_bytes()))
}

/// The byte before `at` does not continue a word, so a name or key may start at `at`.
pub fn word_start(b: &[u8], at: usize, continues: fn(u8) -> bool) -> bool {
    at == 0 || !continues(b[at - 1])
}

/// Whether a mask already starts at `at` (output of an earlier pass, or of the known-secret pass).
pub fn mask_at(b: &[u8], at: usize) -> bool {
    b.get(at..).is_some_and(|s| s.starts_with(MASK.as_bytes()))
}

/// Characters that could break a log line or fool a terminal.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Each run of control characters (an ANSI escape sequence counts as one) becomes one space.
pub fn clean_controls(s: &str) -> String {
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

/// Zero-width characters: invisible, so a key with one inside looks whole to a reader while
/// every scanner sees two short words (issue 29).
pub fn is_zero_width(c: char) -> bool {
    matches!(
        c,
        '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{00ad}'
    )
}

/// Consecutive `\uXXXX` escapes of key characters at least this many in a row are decoded
/// before scanning (a key spelled out in escapes); fewer are ordinary JSON.
const ESCAPED_RUN_MIN: usize = 4;

/// What the scanners read instead of `s`: zero-width characters (as themselves or as `\u200b`
/// escapes) dropped, and runs of `\uXXXX` escapes of key characters decoded, so that neither
/// hides a key from the rules (a fully escaped key, a key with a zero-width space inside).
/// Text without either is returned as it is.
pub fn unhide(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains("\\u") && !s.contains("\\U") && !s.chars().any(is_zero_width) {
        return std::borrow::Cow::Borrowed(s);
    }
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let mut run = Vec::new();
            let mut j = i;
            let mut zero_width = false;
            while let Some(c) = escaped_char(b, j) {
                if is_zero_width(c) {
                    zero_width = true;
                } else if c.is_ascii() && (is_key_char(c as u8) || c == '.') {
                    run.push(c);
                } else {
                    break;
                }
                j += 6;
            }
            if j > i && (zero_width || run.len() >= ESCAPED_RUN_MIN) {
                out.extend(run);
                i = j;
                continue;
            }
        }
        let Some(c) = s.get(i..).and_then(|r| r.chars().next()) else {
            break;
        };
        if !is_zero_width(c) {
            out.push(c);
        }
        i += c.len_utf8();
    }
    std::borrow::Cow::Owned(out)
}

/// The character of a `\uXXXX` escape at `at`.
fn escaped_char(b: &[u8], at: usize) -> Option<char> {
    if b.get(at) != Some(&b'\\') || !matches!(b.get(at + 1), Some(b'u' | b'U')) {
        return None;
    }
    let hex = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
    char::from_u32(u32::from_str_radix(hex, 16).ok()?)
}
