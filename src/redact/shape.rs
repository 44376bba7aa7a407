//! Keys recognised by shape alone, whatever their prefix: providers keep inventing key formats
//! (`hex32.alnum16`, UUIDs, `bce-v3/ALTAK-…/…`, `nvapi-…`), so a long random-looking token is
//! masked whole wherever it appears. Owns the notion of "random-looking". Pure: no I/O.
//!
//! Terms, from the outside in:
//! - a *chain* is a run of `[A-Za-z0-9._-]` joined by `/` or `+` (`bce-v3/ALTAK-…/…`, base64);
//! - a *component* is a chain between joiners; a *segment* is a component split on `-` `_` `.`.
//!
//! A component is key-like when it is at least [`MIN_RUN`] characters long and holds a UUID
//! (8-4-4-4-12 hex), a segment of at least [`MIN_HEX`] hex digits (not all decimal), or a
//! random-looking segment (see [`random_looking`]). A key-like component is masked with its
//! prefix segments (`nvapi-…`, `ms-<uuid>`); a chain is masked whole when every component after
//! the first is key-like (`bce-v3/…/…`) or when, joined, it is a key (AWS secret keys hold `/`
//! and `+`). Never judged whole: a chain right after `:` or `@` (a URL's port, or its host after
//! credentials), a chain that runs into a mask (it was longer before part of it was masked),
//! and, for the joined form, a chain with a component holding no capital or digit (a path).
//! Git hashes and UUIDs are masked on purpose: nothing tells them from keys.
//! Model ids, paths, URLs, error codes, dates and numbers keep short or word-like segments.

use super::bytes::{is_key_char, mask_at, run_end};

/// Shortest component that can be a key.
const MIN_RUN: usize = 20;
/// Shortest segment judged for randomness.
const MIN_SEGMENT: usize = 16;
/// Shortest all-hex segment that is a key by itself (a SHA-1 is 40, an MD5 32).
const MIN_HEX: usize = 32;

fn is_piece(c: u8) -> bool {
    is_key_char(c) || c == b'.'
}

fn is_joiner(c: u8) -> bool {
    c == b'/' || c == b'+'
}

fn is_chain(c: u8) -> bool {
    is_piece(c) || is_joiner(c)
}

fn is_segment_sep(c: u8) -> bool {
    matches!(c, b'-' | b'_' | b'.')
}

/// A key recognised by shape whose component starts at `i`.
pub(super) fn key_token(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if !b[i].is_ascii_alphanumeric() {
        return None;
    }
    // Leading separators (`-0a0a…`, `_key`) do not make `i` the middle of a chain.
    let lead = run_end_back(b, i, is_segment_sep);
    let prev = lead.checked_sub(1).map(|p| b[p]);
    let chain_start = prev.is_none_or(|p| !is_chain(p));
    if !chain_start && !prev.is_some_and(is_joiner) {
        return None;
    }
    if chain_start {
        let raw_end = run_end(b, i, is_chain);
        let end = trim(b, i, raw_end);
        // After `:` or `@` a chain is a URL's port or host and path: only its key components
        // are masked, never the host. A chain that runs into a mask was longer before a part
        // of it was masked: judged whole again it could turn out differently.
        if !matches!(prev, Some(b':' | b'@')) && !mask_at(b, raw_end) && whole_chain(&b[i..end]) {
            return Some((i, padded(b, end)));
        }
    }
    let mut end = trim(b, i, run_end(b, i, is_piece));
    if !key_like(&b[i..end]) {
        return None;
    }
    // Further key-like components of the same chain join this mask (`…/ALTAK-…/<hex>`).
    while b.get(end).copied().is_some_and(is_joiner)
        && b.get(end + 1).is_some_and(u8::is_ascii_alphanumeric)
    {
        let next = trim(b, end + 1, run_end(b, end + 1, is_piece));
        if !key_like(&b[end + 1..next]) {
            break;
        }
        end = next;
    }
    Some((i, padded(b, end)))
}

/// Start of the run of bytes before `end` that satisfy `keep`.
fn run_end_back(b: &[u8], end: usize, keep: impl Fn(u8) -> bool) -> usize {
    let mut k = end;
    while k > 0 && keep(b[k - 1]) {
        k -= 1;
    }
    k
}

/// Drops a sentence's full stop and dangling joiners after a token (`… 3f25….` keeps its `.`).
fn trim(b: &[u8], start: usize, mut end: usize) -> usize {
    while end > start && matches!(b[end - 1], b'.' | b'/' | b'+') {
        end -= 1;
    }
    end
}

/// Includes base64 padding (`=` or `==`) that ends the token.
fn padded(b: &[u8], end: usize) -> usize {
    let pad = run_end(b, end, |c| c == b'=') - end;
    let after = end + pad;
    if (1..=2).contains(&pad) && b.get(after).is_none_or(|&c| !is_key_char(c)) {
        after
    } else {
        end
    }
}

/// Whether a chain of two or more components is one key (see the module doc).
fn whole_chain(chain: &[u8]) -> bool {
    let components: Vec<&[u8]> = chain.split(|&c| is_joiner(c)).collect();
    if components.len() < 2 || components.iter().any(|c| c.is_empty()) {
        return false;
    }
    if components[1..].iter().all(|c| key_like(c)) {
        return true;
    }
    // Base64 puts `/` and `+` anywhere; path components are lower-case words, base64 ones mix.
    let base64_like = components.iter().all(|c| {
        c.iter()
            .any(|&x| x.is_ascii_uppercase() || x.is_ascii_digit())
    });
    if !base64_like {
        return false;
    }
    let joined: Vec<u8> = chain.iter().copied().filter(|&c| !is_joiner(c)).collect();
    key_like(&joined)
}

/// A component that is a key (see the module doc).
pub(super) fn key_like(component: &[u8]) -> bool {
    component.len() >= MIN_RUN
        && (has_uuid(component)
            || component
                .split(|&c| is_segment_sep(c))
                .any(|s| long_hex(s) || random_looking(s)))
}

fn long_hex(segment: &[u8]) -> bool {
    segment.len() >= MIN_HEX
        && segment.iter().all(u8::is_ascii_hexdigit)
        && segment.iter().any(u8::is_ascii_alphabetic)
}

/// An 8-4-4-4-12 hex UUID standing as whole segments somewhere in `component`.
fn has_uuid(component: &[u8]) -> bool {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    const LEN: usize = 36;
    let n = component.len();
    (0..n.saturating_sub(LEN - 1)).any(|p| {
        let bounded = (p == 0 || is_segment_sep(component[p - 1]))
            && component.get(p + LEN).is_none_or(|&c| is_segment_sep(c));
        if !bounded {
            return false;
        }
        let mut at = p;
        GROUPS.iter().enumerate().all(|(k, &len)| {
            let group_ok = component[at..at + len].iter().all(u8::is_ascii_hexdigit);
            at += len;
            let dash_ok = k == GROUPS.len() - 1 || component[at] == b'-';
            at += 1;
            group_ok && dash_ok
        })
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Upper,
    Lower,
    Digit,
}

fn class(c: u8) -> Class {
    if c.is_ascii_digit() {
        Class::Digit
    } else if c.is_ascii_uppercase() {
        Class::Upper
    } else {
        Class::Lower
    }
}

/// Whether an alphanumeric segment looks random rather than like an identifier.
///
/// Identifiers are made of a few words: `ReadableStreamDefaultReader`, `claude35sonnet20241022`,
/// `HTTPSConnectionPool`. A random string breaks into many short parts at every change between
/// upper case, lower case and digits (`Zq`, `8`, `v`, `R`, `2`…), and its longer letter runs
/// are full of letter pairs English rarely has (`xq`, `bz`, `pc`). The segment is split into
/// camel-case parts (a digit run, a lower-case run, a capital and its lower-case run, an
/// acronym) and scored: each part counts 4 when the segment has digits, 3 when it has none; a
/// part of one or two letters counts 2 more; an acronym of six or more capitals counts its
/// length; each uncommon letter pair inside a longer word counts 2. Random-looking = at least
/// two of upper case, lower case and digits, at least [`MIN_SEGMENT`] characters, and a score of
/// at least the length. Identifiers average over four characters a part with common pairs and
/// score below it. Measured on 300 000 uniformly random strings per row: base-62 of 20
/// characters is missed 3 times, of 32 never; lower-case base-36 of 20 30 times, of 32 never
/// (the `random_base62_segments_are_caught` test keeps a smaller sample of this).
pub(super) fn random_looking(segment: &[u8]) -> bool {
    let n = segment.len();
    if n < MIN_SEGMENT || !segment.iter().all(u8::is_ascii_alphanumeric) {
        return false;
    }
    let upper = segment.iter().any(u8::is_ascii_uppercase);
    let lower = segment.iter().any(u8::is_ascii_lowercase);
    let digit = segment.iter().any(u8::is_ascii_digit);
    if u8::from(upper) + u8::from(lower) + u8::from(digit) < 2 {
        return false;
    }
    let per_part = if digit { 4 } else { 3 };
    let mut score = 0;
    for part in camel_parts(segment) {
        score += per_part;
        if part[0].is_ascii_digit() {
            continue;
        }
        if part.len() <= 2 {
            score += 2;
        } else if part.iter().all(u8::is_ascii_uppercase) {
            if part.len() >= 6 {
                score += part.len();
            }
        } else {
            score += 2 * uncommon_pairs(part);
        }
    }
    score >= n
}

/// Splits at digit boundaries, before a capital that follows a lower-case letter, and before
/// the last capital of an acronym that starts a word (`XMLHttp` → `XML`, `Http`).
fn camel_parts(segment: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut start = 0;
    for k in 1..segment.len() {
        let (a, c) = (class(segment[k - 1]), class(segment[k]));
        if a == c {
            continue;
        }
        if a == Class::Digit || c == Class::Digit || (a == Class::Lower && c == Class::Upper) {
            parts.push(&segment[start..k]);
            start = k;
        } else if k - start >= 2 {
            parts.push(&segment[start..k - 1]);
            start = k - 1;
        }
    }
    parts.push(&segment[start..]);
    parts
}

/// Letter pairs common in English words and identifiers (a pair not listed is uncommon).
const COMMON_PAIRS: &[u8] = b"th he in er an re on at en nd ti es or te of ed is it al ar st to \
    nt ng se ha as ou io le ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur ca el ta \
    la ns di fo ho pe ec pr no ct us ac ot il tr ly nc et ut ss so rs un lo wa ge ie wh ee wi em \
    ad ol rt po we na ul ni ts mo ow pa im mi ai sh ir su id os iv ia am fi ci vi pl ig tu ev ld \
    ry mp fe bl ab gh ty op wo sa ay ex ke fr oo av ag if ap gr od bo sp rd do uc bu ei ov by rm \
    ep tt oc fa ef cu rn sc gi da yo cr cl du ga qu ue ff ba ey ls va um pp ua up lu go ht ru ug \
    ds lt pi rc rr eg au ck ew mu br bi pt ak pu ui rg ib tl ny ki rk ys ob mm fu ph og ms ye ud \
    mb ip ub oi rl gu dr hr cc tw ft wn nu af hu nn eo vo rv nf xp gn sm fl iz ok nl my gl aw ju \
    oa eq sy sl ps jo lf nv je nk kn gs dy hy ze ks xt bs ik dd cy rp sk xi oe oy ws lv dl rf eu \
    dg wr xa yp rb";

/// `PAIRS[a]` has bit `b` set when the pair (`a`, `b`) is in [`COMMON_PAIRS`].
const PAIRS: [u32; 26] = pair_table();

const fn pair_table() -> [u32; 26] {
    let mut table = [0u32; 26];
    let mut i = 0;
    while i + 1 < COMMON_PAIRS.len() {
        let (a, b) = (COMMON_PAIRS[i], COMMON_PAIRS[i + 1]);
        if a.is_ascii_lowercase() && b.is_ascii_lowercase() {
            table[(a - b'a') as usize] |= 1 << (b - b'a');
        }
        i += 1;
    }
    table
}

/// How many adjacent letter pairs of a word are uncommon in English (case-insensitive).
fn uncommon_pairs(word: &[u8]) -> usize {
    word.windows(2)
        .filter(|w| {
            let (a, b) = (w[0].to_ascii_lowercase(), w[1].to_ascii_lowercase());
            a.is_ascii_lowercase()
                && b.is_ascii_lowercase()
                && PAIRS[usize::from(a - b'a')] & (1 << (b - b'a')) == 0
        })
        .count()
}
