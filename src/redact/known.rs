//! The known-secret registry: values the runner knows to be secret (environment variables with
//! secret names, keys resolved from Pi's `models.json` and `auth.json`) are masked wherever they
//! appear, whatever their shape. The one piece of global state left in the runner, on purpose:
//! masking must hold on every path that prints, including the tracing writer, the panic hook and
//! text formatted deep inside a dependency's error, where no value can be passed — a registry
//! threaded through arguments would leak on the one path that forgot it. It is append-only (a
//! secret, once known, stays masked), bounded ([`MAX_FORMS`]), held in memory only, and never
//! written, logged or printed. No I/O.

use std::sync::{PoisonError, RwLock};

use super::bytes::{MASK, clean_controls};

/// Shorter values are not registered: a dummy key such as `x` would mask every `x` in the text.
pub const MIN_SECRET_CHARS: usize = 6;

/// At most this many forms are held (a form = a value or one of its spellings, see
/// [`add_known_secrets`]); later ones are ignored. The runner registers a few dozen.
const MAX_FORMS: usize = 4096;

/// Every registered spelling, longest first (so a secret is masked whole, not from a shorter
/// secret it contains).
static FORMS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers secret values: every later [`super::redact`] masks each occurrence of each of them.
///
/// Skipped: values under [`MIN_SECRET_CHARS`] characters (surrounding whitespace not counted),
/// pure decimal numbers and
/// `true`/`false` (flags and limits in secret-named variables, e.g. `MAX_TOKENS=4096`).
/// Besides the value itself its trimmed form, its JSON-escaped form (a value holding `"` or `\`
/// appears escaped inside JSON error bodies) and its form with control characters replaced
/// (as `redact` sees the text) are registered when they differ.
pub fn add_known_secrets<I: IntoIterator<Item = String>>(values: I) {
    let mut new = Vec::new();
    for value in values {
        for form in spellings(&value) {
            if registrable(&form) && !new.contains(&form) {
                new.push(form);
            }
        }
    }
    if new.is_empty() {
        return;
    }
    let mut forms = FORMS.write().unwrap_or_else(PoisonError::into_inner);
    for form in new {
        if forms.len() >= MAX_FORMS {
            break;
        }
        if !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
}

/// The spellings of one value that text may contain.
fn spellings(value: &str) -> Vec<String> {
    let mut out = vec![value.to_string()];
    let trimmed = value.trim();
    if trimmed != value {
        out.push(trimmed.to_string());
    }
    for v in [value, trimmed] {
        if let Ok(quoted) = serde_json::to_string(v)
            && let Some(inner) = quoted.get(1..quoted.len().saturating_sub(1))
            && inner != v
        {
            out.push(inner.to_string());
        }
        let cleaned = clean_controls(v);
        if cleaned != v {
            out.push(cleaned.trim().to_string());
        }
        // A gateway quoting the request URL percent-encodes the key (`key=horse%2Fbattery`).
        for upper in [true, false] {
            let encoded = percent_encoded(v, upper);
            if encoded != v {
                out.push(encoded);
            }
        }
    }
    out
}

/// `value` percent-encoded as in a URL query (everything but RFC 3986's unreserved bytes),
/// with upper- or lower-case hex digits.
fn percent_encoded(value: &str, upper: bool) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else if upper {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push_str(&format!("%{b:02x}"));
        }
    }
    out
}

fn registrable(value: &str) -> bool {
    let t = value.trim();
    if t.chars().count() < MIN_SECRET_CHARS {
        return false;
    }
    let number = {
        let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
        let (int, frac) = digits.split_once('.').unwrap_or((digits, "0"));
        !int.is_empty()
            && !frac.is_empty()
            && int.bytes().all(|c| c.is_ascii_digit())
            && frac.bytes().all(|c| c.is_ascii_digit())
    };
    // A mask inside a secret could never be matched again: masks are atomic.
    !number
        && !t.eq_ignore_ascii_case("true")
        && !t.eq_ignore_ascii_case("false")
        && !value.contains(MASK)
}

/// Replaces every occurrence of a registered secret with [`MASK`]. Text already masked stays as
/// it is: matching happens only between existing masks, so masking twice changes nothing.
pub(super) fn mask_known(text: &str) -> String {
    let mut out = mask_known_once(text);
    // A mask can uncover what was glued to it: the trailing part of one key written right
    // before another (`…bracket-pwpröp-…`) ends at a boundary only once the second is masked.
    // Mask again until nothing changes (a pass that found nothing leaves the text as it was,
    // so plain text costs one pass); each pass only adds masks, so a few passes settle it.
    if out != text {
        for _ in 0..4 {
            let again = mask_known_once(&out);
            if again == out {
                break;
            }
            out = again;
        }
    }
    out
}

fn mask_known_once(text: &str) -> String {
    let forms = FORMS.read().unwrap_or_else(PoisonError::into_inner);
    if forms.is_empty() || text.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut pieces = text.split(MASK).peekable();
    while let Some(piece) = pieces.next() {
        mask_piece(piece, &forms, &mut out);
        if pieces.peek().is_some() {
            out.push_str(MASK);
        }
    }
    out
}

/// Known secrets at least this long are also found split by whitespace (a line break put in
/// by a provider's or a terminal's wrapping) and by a leading part of them.
const TRANSFORMED_MIN: usize = 12;
/// The shortest leading part of a known secret that is masked (a provider that masks the rest
/// of a key still shows its first characters): at least this long and at least
/// [`PREFIX_SHARE`] of the secret, so a short common prefix (`sk-proj-`) says nothing.
const PREFIX_MIN: usize = 10;
/// See [`PREFIX_MIN`]: the part shown must be at least this fraction (numerator over 10).
const PREFIX_SHARE: usize = 4;

/// Masks the secrets of one mask-free piece of text, merging overlapping occurrences.
fn mask_piece(piece: &str, forms: &[String], out: &mut String) {
    let mut hits: Vec<(usize, usize)> = Vec::new();
    for form in forms {
        if form.len() > piece.len() {
            continue;
        }
        hits.extend(
            piece
                .match_indices(form.as_str())
                .map(|(at, f)| (at, at + f.len())),
        );
    }
    split_hits(piece, forms, &mut hits);
    prefix_hits(piece, forms, &mut hits);
    suffix_hits(piece, forms, &mut hits);
    if hits.is_empty() {
        out.push_str(piece);
        return;
    }
    hits.sort_unstable();
    let mut copied = 0;
    let mut current: Option<(usize, usize)> = None;
    for (start, end) in hits {
        match current {
            Some((s, e)) if start <= e => current = Some((s, e.max(end))),
            _ => {
                if let Some((s, e)) = current {
                    out.push_str(piece.get(copied..s).unwrap_or(""));
                    out.push_str(MASK);
                    copied = e;
                }
                current = Some((start, end));
            }
        }
    }
    if let Some((s, e)) = current {
        out.push_str(piece.get(copied..s).unwrap_or(""));
        out.push_str(MASK);
        copied = e;
    }
    out.push_str(piece.get(copied..).unwrap_or(""));
}

/// Occurrences of long secrets with whitespace inside (`sk-abc…\n…xyz` after wrapping, or a
/// JSON-escaped line break `\n` inside an error body that Pi hands on as JSON text): the text
/// is searched with its whitespace, zero-width characters and those escapes left out, and each hit is mapped back to
/// the span of the original text it came from.
fn split_hits(piece: &str, forms: &[String], hits: &mut Vec<(usize, usize)>) {
    let b = piece.as_bytes();
    let escape_at =
        |at: usize| b.get(at) == Some(&b'\\') && matches!(b.get(at + 1), Some(b'n' | b'r' | b't'));
    let hidden = |c: char| c.is_whitespace() || super::bytes::is_zero_width(c);
    if !piece.chars().any(hidden) && !(0..b.len()).any(escape_at) {
        return;
    }
    let mut compact = String::with_capacity(piece.len());
    // For each byte of `compact`, where it is in `piece`.
    let mut origin: Vec<usize> = Vec::with_capacity(piece.len());
    let mut skip_to = 0;
    for (at, c) in piece.char_indices() {
        if at < skip_to || hidden(c) {
            continue;
        }
        if escape_at(at) {
            skip_to = at + 2;
            continue;
        }
        compact.push(c);
        origin.extend(std::iter::repeat_n(at, c.len_utf8()));
    }
    for form in forms
        .iter()
        .filter(|f| f.len() >= TRANSFORMED_MIN && !f.contains(char::is_whitespace))
    {
        for (at, found) in compact.match_indices(form.as_str()) {
            let (Some(&start), Some(&last)) = (origin.get(at), origin.get(at + found.len() - 1))
            else {
                continue;
            };
            let end = last
                + piece
                    .get(last..)
                    .and_then(|r| r.chars().next())
                    .map_or(1, char::len_utf8);
            hits.push((start, end));
        }
    }
}

/// Words that are a leading part of a long secret (`Incorrect API key provided:
/// sk-proj-abcd****`): the word is masked when long enough (see [`PREFIX_MIN`]).
fn prefix_hits(piece: &str, forms: &[String], hits: &mut Vec<(usize, usize)>) {
    let b = piece.as_bytes();
    let word =
        |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'/' | b'+' | b'=');
    let mut i = 0;
    while i < b.len() {
        if !word(b[i]) || (i > 0 && word(b[i - 1])) {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < b.len() && word(b[end]) {
            end += 1;
        }
        let w = &piece[i..end];
        if w.len() >= PREFIX_MIN {
            let prefix_of = forms.iter().any(|f| {
                f.len() >= TRANSFORMED_MIN
                    && f.len() > w.len()
                    && w.len() * 10 >= f.len() * PREFIX_SHARE
                    && f.starts_with(w)
            });
            if prefix_of {
                hits.push((i, end));
            }
        }
        i = end;
    }
}

/// The shortest trailing part of a known secret that is masked (`…a1b2c3d4e5f6`, the last
/// characters of a key that a provider or a dashboard shows): keys end randomly, so no share of
/// the secret is needed, as it is for a leading part.
const SUFFIX_MIN: usize = 10;

/// Words that are a trailing part of a long secret: the word is masked when at least
/// [`SUFFIX_MIN`] long. A word here is a run of key characters (a `.`, `*` or `…` before the
/// tail, as in `sk-…a1b2c3`, ends it).
fn suffix_hits(piece: &str, forms: &[String], hits: &mut Vec<(usize, usize)>) {
    let b = piece.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'/' | b'+' | b'=');
    let mut i = 0;
    while i < b.len() {
        if !word(b[i]) {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < b.len() && word(b[end]) {
            end += 1;
        }
        let w = &piece[i..end];
        if w.len() >= SUFFIX_MIN
            && forms
                .iter()
                .any(|f| f.len() >= TRANSFORMED_MIN && f.len() > w.len() && f.ends_with(w))
        {
            hits.push((i, end));
        }
        i = end;
    }
}

/// Moves a cut position back to the start of any registered secret that straddles it, so a
/// cut never leaves the head of a known secret behind (see `precut`).
pub(super) fn safe_cut(text: &str, mut cut: usize) -> usize {
    let forms = FORMS.read().unwrap_or_else(PoisonError::into_inner);
    loop {
        let mut moved = cut;
        for form in forms.iter() {
            let lo = floor_boundary(text, cut.saturating_sub(form.len()));
            let hi = ceil_boundary(text, cut.saturating_add(form.len()));
            let window = text.get(lo..hi).unwrap_or("");
            let mut from = 0;
            while let Some(at) = window.get(from..).and_then(|w| w.find(form.as_str())) {
                let start = lo + from + at;
                if start < cut && start + form.len() > cut {
                    moved = moved.min(start);
                }
                // Step one char: occurrences may overlap.
                let step = window
                    .get(from + at..)
                    .and_then(|rest| rest.chars().next())
                    .map_or(1, char::len_utf8);
                from += at + step;
            }
        }
        if moved == cut {
            return cut;
        }
        cut = moved;
    }
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}
