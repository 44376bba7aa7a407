//! A minimatch-style glob, matched case-insensitively against `/`-separated paths: the glob
//! half of Pi's `--models` resolver (`catalog::scope` decides when a pattern is a glob and what
//! it is tested against). Pure: no I/O, and no dependency on anything else in this crate.
//!
//! # Semantics
//!
//! Those of minimatch 10 with `nocase: true`, as bundled with Pi 1.6.0 (expected values in the
//! tests were observed with it):
//!
//! - `*` and `?` never cross `/` (`openrouter/*` misses `openrouter/a/b`); `**` as a whole
//!   segment spans zero or more segments (`openrouter/**` matches `openrouter/a/b`), but a
//!   trailing `**` needs at least one (`a/**` misses `a`).
//! - `[a-z]`, `[!x]`/`[^x]` classes (a `]` first in the class is literal, an unclosed `[` is
//!   literal), `\` escapes the next character.
//! - A segment starting with `.` only matches an explicit `.` (a literal or a class naming it);
//!   `**` never enters such a segment.
//! - `{1..3}`, `{01..10}`, `{1..9..2}`, `{a..c}` sequences expand textually before anything
//!   else is parsed; any other brace text, `{a,b}` included, stays literal (Pi splits
//!   `--models` on `,` before a pattern reaches the glob, so an alternation never arrives whole).
//! - A leading `#` makes the pattern match nothing; leading `!`s negate it (an odd count).
//! - Empty path segments are dropped except the first and the last (`a//b` is `a/b`).
//! - Not supported: extglobs such as `+(a|b)` and POSIX classes such as `[[:alpha:]]` (the
//!   latter make Pi's minimatch throw).
//!
//! # Cost
//!
//! Matching one brace alternative is O(pattern × path) (a backtracking matcher is
//! exponential: `*a*a*a*a*a*a*a*a*a*a*b` against 28 `a`s took it 27 s): inside a segment the
//! tokens are matched by the classic "restart after the last `*`" scan (every other token
//! consumes exactly one character, so this is exact, and it visits at most pattern × segment
//! positions); across segments `**` is a dynamic programme over (pattern segment, path
//! segment) pairs, each pair checked at most once, keeping two rows of booleans.
//!
//! # Limits
//!
//! Patterns are user input, so the work is capped. Like the brace-expansion package
//! minimatch uses (which keeps the first 100,000 expansions), past a cap the first
//! expansions are kept and the rest dropped:
//!
//! - A pattern longer than [`MAX_PATTERN_CHARS`] characters matches nothing, negated or not.
//! - Brace expansion keeps the first [`MAX_EXPANSIONS`] alternatives, in expansion order, and
//!   stops earlier once the alternatives together would exceed [`MAX_EXPANDED_BYTES`]; the
//!   rest are dropped (so `x{1..1000}` matches `x1` … `x256` only). A character sequence that
//!   steps onto a surrogate within those first alternatives stays literal.
//!
//! Below these caps the results are exactly those of the backtracking matcher this replaced
//! (property tests compare the two), which agreed with Pi 1.6.0 on every pattern tried.

/// Patterns longer than this (in characters) match nothing.
pub const MAX_PATTERN_CHARS: usize = 1024;
/// At most this many brace alternatives are kept.
pub const MAX_EXPANSIONS: usize = 256;
/// The kept brace alternatives hold at most this many bytes together.
pub const MAX_EXPANDED_BYTES: usize = 16 * 1024;

/// A compiled pattern; see the module doc.
#[derive(Debug, Clone)]
pub struct Glob {
    /// A `#` comment or an over-long pattern: matches nothing, whatever the `!`s say.
    never: bool,
    negate: bool,
    /// One entry per brace alternative; a path matches when any alternative does.
    alternatives: Vec<Vec<Segment>>,
}

#[derive(Debug, Clone)]
enum Segment {
    /// `**`: zero or more whole segments.
    Globstar,
    Tokens(Vec<Token>),
}

#[derive(Debug, Clone)]
enum Token {
    /// A literal, stored case-folded.
    Lit(char),
    /// `?`
    One,
    /// `*`
    Star,
    Class {
        negated: bool,
        items: Vec<(char, char)>,
    },
}

/// One path character with the case variants the tokens compare against, computed once per
/// path rather than once per comparison.
#[derive(Debug, Clone, Copy)]
struct PathChar {
    c: char,
    lower: char,
    upper: char,
}

impl Glob {
    /// Compiles `pattern`; never fails (what minimatch would reject is literal or matches
    /// nothing, see the module doc).
    pub fn new(pattern: &str) -> Glob {
        if pattern.starts_with('#') || pattern.chars().nth(MAX_PATTERN_CHARS).is_some() {
            return Glob {
                never: true,
                negate: false,
                alternatives: Vec::new(),
            };
        }
        let bangs = pattern.chars().take_while(|&c| c == '!').count();
        // `!` is one byte, so `bangs` is also a byte offset.
        let body = &pattern[bangs..];
        Glob {
            never: false,
            negate: bangs % 2 == 1,
            alternatives: expand_braces(body)
                .iter()
                .map(|p| parse_segments(p))
                .collect(),
        }
    }

    /// Whether `path` matches, case-insensitively; O(pattern × path) per brace alternative.
    pub fn matches(&self, path: &str) -> bool {
        if self.never {
            return false;
        }
        let segs: Vec<Vec<PathChar>> = collapse(path.split('/').collect())
            .into_iter()
            .map(|s| {
                s.chars()
                    .map(|c| PathChar {
                        c,
                        lower: fold(c),
                        upper: upper(c),
                    })
                    .collect()
            })
            .collect();
        let mut rows = Rows::default();
        let hit = self
            .alternatives
            .iter()
            .any(|alt| rows.match_segments(alt, &segs));
        hit != self.negate
    }
}

/// Drops empty segments except the first and the last (`a//b` is `a/b`, as in minimatch).
fn collapse(segs: Vec<&str>) -> Vec<&str> {
    let n = segs.len();
    segs.into_iter()
        .enumerate()
        .filter(|&(i, s)| !s.is_empty() || i == 0 || i + 1 == n)
        .map(|(_, s)| s)
        .collect()
}

fn parse_segments(pattern: &str) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for seg in collapse(pattern.split('/').collect()) {
        if seg == "**" {
            if !matches!(out.last(), Some(Segment::Globstar)) {
                out.push(Segment::Globstar);
            }
        } else {
            out.push(Segment::Tokens(parse_tokens(seg)));
        }
    }
    out
}

fn parse_tokens(seg: &str) -> Vec<Token> {
    let chars: Vec<char> = seg.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 < chars.len() => {
                out.push(Token::Lit(fold(chars[i + 1])));
                i += 2;
            }
            '*' => {
                if !matches!(out.last(), Some(Token::Star)) {
                    out.push(Token::Star);
                }
                i += 1;
            }
            '?' => {
                out.push(Token::One);
                i += 1;
            }
            '[' => match parse_class(&chars[i + 1..]) {
                Some((token, used)) => {
                    out.push(token);
                    i += 1 + used;
                }
                None => {
                    out.push(Token::Lit('['));
                    i += 1;
                }
            },
            c => {
                out.push(Token::Lit(fold(c)));
                i += 1;
            }
        }
    }
    out
}

/// Parses a class body after `[`; returns the token and the chars used including `]`.
/// `None` when unclosed (then `[` is literal).
fn parse_class(chars: &[char]) -> Option<(Token, usize)> {
    let mut i = 0;
    let negated = matches!(chars.first(), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    loop {
        let mut c = *chars.get(i)?;
        if c == ']' && !first {
            return Some((Token::Class { negated, items }, i + 1));
        }
        first = false;
        if c == '\\' {
            i += 1;
            c = *chars.get(i)?;
        }
        i += 1;
        match (chars.get(i), chars.get(i + 1)) {
            (Some('-'), Some(&hi)) if hi != ']' => {
                let (hi, used) = if hi == '\\' {
                    (*chars.get(i + 2)?, 3)
                } else {
                    (hi, 2)
                };
                items.push((c, hi));
                i += used;
            }
            _ => items.push((c, c)),
        }
    }
}

/// Expands `{a..b}` / `{a..b..step}` sequences (numbers or single characters), left to
/// right; anything else in braces stays literal. The result is the longest prefix of the
/// full expansion (first group varying slowest) within [`MAX_EXPANSIONS`] and
/// [`MAX_EXPANDED_BYTES`].
fn expand_braces(pattern: &str) -> Vec<String> {
    let bytes = pattern.as_bytes();
    let mut acc = vec![String::new()];
    // Start of the text not yet copied into `acc`.
    let mut done = 0;
    let mut search = 0;
    while let Some(open) = pattern[search..].find('{').map(|i| i + search) {
        search = open + 1;
        if open > done && bytes[open - 1] == b'\\' {
            continue;
        }
        let Some(close) = pattern[open..].find('}').map(|i| i + open) else {
            break;
        };
        let Some(items) = sequence(&pattern[open + 1..close]) else {
            continue;
        };
        let head = &pattern[done..open];
        let mut next = Vec::new();
        let mut total = 0;
        'all: for prefix in &acc {
            for item in &items {
                let len = prefix.len() + head.len() + item.len();
                if next.len() >= MAX_EXPANSIONS || total + len > MAX_EXPANDED_BYTES {
                    break 'all;
                }
                total += len;
                next.push(format!("{prefix}{head}{item}"));
            }
        }
        // Items are never empty and the tail is added to every alternative, so an
        // alternative dropped here would also be dropped from the full expansion.
        acc = next;
        done = close + 1;
        search = done;
    }
    let tail = &pattern[done..];
    let mut total = 0;
    acc.into_iter()
        .map(|a| a + tail)
        .take_while(|a| {
            total += a.len();
            total <= MAX_EXPANDED_BYTES
        })
        .collect()
}

/// The items of one `{a..b[..step]}` body, at most [`MAX_EXPANSIONS`]; `None` when it is
/// not a sequence.
fn sequence(body: &str) -> Option<Vec<String>> {
    let parts: Vec<&str> = body.split("..").collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let step: u64 = match parts.get(2) {
        Some(s) => s.parse::<i64>().ok()?.unsigned_abs().max(1),
        None => 1,
    };
    let (a, b) = (parts[0], parts[1]);
    if let (Ok(x), Ok(y)) = (a.parse::<i64>(), b.parse::<i64>()) {
        let padded = |s: &str| {
            let d = s.trim_start_matches('-');
            d.len() > 1 && d.starts_with('0')
        };
        let width = if padded(a) || padded(b) {
            a.len().max(b.len())
        } else {
            0
        };
        // i128: neither `x + step` nor `-step` can overflow.
        let (x, y, step) = (i128::from(x), i128::from(y), i128::from(step));
        let delta = if y >= x { step } else { -step };
        let mut out = Vec::new();
        let mut v = x;
        loop {
            out.push(if v < 0 {
                format!("-{:0w$}", v.unsigned_abs(), w = width.saturating_sub(1))
            } else {
                format!("{v:0width$}")
            });
            let next = v + delta;
            if v == y
                || out.len() >= MAX_EXPANSIONS
                || (delta > 0 && next > y)
                || (delta < 0 && next < y)
            {
                break;
            }
            v = next;
        }
        return Some(out);
    }
    let (mut ca, mut cb) = (a.chars(), b.chars());
    match (ca.next(), ca.next(), cb.next(), cb.next()) {
        (Some(x), None, Some(y), None) => {
            let (x, y) = (u32::from(x), u32::from(y));
            let step = u32::try_from(step).ok()?;
            let mut out = Vec::new();
            let mut v = x;
            loop {
                out.push(char::from_u32(v)?.to_string());
                if v == y || out.len() >= MAX_EXPANSIONS {
                    break;
                }
                let next = if y > x {
                    v.checked_add(step)?
                } else {
                    v.checked_sub(step)?
                };
                if (y > x && next > y) || (y < x && next < y) {
                    break;
                }
                v = next;
            }
            Some(out)
        }
        _ => None,
    }
}

/// The two rows of the segment DP, kept across alternatives to allocate them once per path.
#[derive(Default)]
struct Rows {
    next: Vec<bool>,
    cur: Vec<bool>,
}

impl Rows {
    /// Whether the pattern segments match the path segments: a DP from the end, where row
    /// `i` says for every `j` whether `pat[i..]` matches `path[j..]`.
    fn match_segments(&mut self, pat: &[Segment], path: &[Vec<PathChar>]) -> bool {
        let m = path.len();
        let Rows { next, cur } = self;
        next.clear();
        next.extend((0..=m).map(|j| j == m));
        cur.clear();
        cur.resize(m + 1, false);
        for (i, seg) in pat.iter().enumerate().rev() {
            match seg {
                Segment::Globstar => {
                    // A trailing `**` needs at least one segment (`a/**` misses `a`); `**`
                    // never enters a segment starting with `.`.
                    let trailing = i + 1 == pat.len();
                    // `spanned`: some k >= j with path[j..k] dot-free and next[k].
                    let mut spanned = next[m];
                    cur[m] = !trailing && next[m];
                    for j in (0..m).rev() {
                        let through = !starts_with_dot(&path[j]) && spanned;
                        cur[j] = through || (!trailing && next[j]);
                        spanned = through || next[j];
                    }
                }
                Segment::Tokens(tokens) => {
                    cur[m] = false;
                    for j in 0..m {
                        cur[j] = next[j + 1] && match_segment(tokens, &path[j]);
                    }
                }
            }
            std::mem::swap(cur, next);
            if !next.contains(&true) {
                return false;
            }
        }
        next[0]
    }
}

fn starts_with_dot(seg: &[PathChar]) -> bool {
    seg.first().is_some_and(|c| c.c == '.')
}

fn match_segment(tokens: &[Token], seg: &[PathChar]) -> bool {
    if starts_with_dot(seg) {
        let explicit_dot = match tokens.first() {
            Some(Token::Lit(c)) => *c == '.',
            Some(Token::Class {
                negated: false,
                items,
            }) => items.iter().any(|&(lo, hi)| lo <= '.' && '.' <= hi),
            _ => false,
        };
        if !explicit_dot {
            return false;
        }
    }
    // A segment that is only `*` does not match an empty segment.
    if seg.is_empty() && matches!(tokens, [Token::Star]) {
        return false;
    }
    match_tokens(tokens, seg)
}

/// Every token but `*` consumes exactly one character, so on a mismatch it is enough to let
/// the most recent `*` swallow one more character and retry from just after it: an earlier
/// `*` can never do better. At most tokens × characters steps.
fn match_tokens(tokens: &[Token], s: &[PathChar]) -> bool {
    let (mut t, mut i) = (0, 0);
    // (token after the last `*`, text position that `*` currently stops at)
    let mut restart: Option<(usize, usize)> = None;
    while i < s.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                t += 1;
                restart = Some((t, i));
            }
            Some(token) if token_matches(token, s[i]) => {
                t += 1;
                i += 1;
            }
            _ => match restart {
                Some((after_star, stop)) => {
                    t = after_star;
                    i = stop + 1;
                    restart = Some((after_star, i));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|token| matches!(token, Token::Star))
}

fn token_matches(token: &Token, c: PathChar) -> bool {
    match token {
        Token::Lit(l) => *l == c.lower,
        Token::One | Token::Star => true,
        Token::Class { negated, items } => {
            let variants = [c.c, c.lower, c.upper];
            let hit = items
                .iter()
                .any(|&(lo, hi)| variants.iter().any(|&v| lo <= v && v <= hi));
            hit != *negated
        }
    }
}

/// Simple (one-to-one) lower-case mapping, as a JavaScript `/i` regex uses.
fn fold(c: char) -> char {
    let mut l = c.to_lowercase();
    match (l.next(), l.next()) {
        (Some(x), None) => x,
        _ => c,
    }
}

fn upper(c: char) -> char {
    let mut u = c.to_uppercase();
    match (u.next(), u.next()) {
        (Some(x), None) => x,
        _ => c,
    }
}

#[cfg(test)]
#[path = "glob_tests.rs"]
mod tests;
