use proptest::prelude::*;

use super::*;

/// The backtracking matcher this module replaced, kept verbatim (exponential on patterns such
/// as `*a*a*a*b`, brace cap 1000) as the oracle the linear matcher must agree with.
mod oracle {
    /// A minimatch-style glob, matched case-insensitively (see the module doc).
    pub struct Glob {
        negate: bool,
        /// `#` comment: matches nothing.
        comment: bool,
        /// One entry per brace expansion.
        alternatives: Vec<Vec<Segment>>,
    }

    enum Segment {
        /// `**`: zero or more whole segments.
        Globstar,
        Tokens(Vec<Token>),
    }

    enum Token {
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

    impl Glob {
        pub fn new(pattern: &str) -> Glob {
            if pattern.starts_with('#') {
                return Glob {
                    negate: false,
                    comment: true,
                    alternatives: Vec::new(),
                };
            }
            let bangs = pattern.chars().take_while(|&c| c == '!').count();
            let body = &pattern[bangs..];
            Glob {
                negate: bangs % 2 == 1,
                comment: false,
                alternatives: expand_braces(body)
                    .iter()
                    .map(|p| parse_segments(p))
                    .collect(),
            }
        }

        pub fn matches(&self, path: &str) -> bool {
            if self.comment {
                return false;
            }
            let segs = collapse(path.split('/').collect());
            let chars: Vec<Vec<char>> = segs.iter().map(|s| s.chars().collect()).collect();
            let hit = self
                .alternatives
                .iter()
                .any(|alt| match_segments(alt, &chars));
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
                    out.push(Token::Lit(chars[i + 1]));
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
                    out.push(Token::Lit(c));
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

    /// Expands `{a..b}` / `{a..b..step}` sequences (numbers or single characters); anything else
    /// in braces stays literal.
    pub fn expand_braces(pattern: &str) -> Vec<String> {
        const MAX: usize = 1000;
        let bytes = pattern.as_bytes();
        let mut search = 0;
        while let Some(open) = pattern[search..].find('{').map(|i| i + search) {
            search = open + 1;
            if open > 0 && bytes[open - 1] == b'\\' {
                continue;
            }
            let Some(close) = pattern[open..].find('}').map(|i| i + open) else {
                break;
            };
            let Some(items) = sequence(&pattern[open + 1..close]) else {
                continue;
            };
            let (head, tail) = (&pattern[..open], &pattern[close + 1..]);
            let rests = expand_braces(tail);
            let mut out = Vec::new();
            'all: for item in &items {
                for rest in &rests {
                    if out.len() >= MAX {
                        break 'all;
                    }
                    out.push(format!("{head}{item}{rest}"));
                }
            }
            return out;
        }
        vec![pattern.to_string()]
    }

    fn sequence(body: &str) -> Option<Vec<String>> {
        let parts: Vec<&str> = body.split("..").collect();
        if !(2..=3).contains(&parts.len()) {
            return None;
        }
        let step: i64 = match parts.get(2) {
            Some(s) => s.parse::<i64>().ok()?.unsigned_abs().max(1) as i64,
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
            let delta = if y >= x { step } else { -step };
            let mut out = Vec::new();
            let mut v = x;
            loop {
                out.push(if v < 0 {
                    format!("-{:0w$}", v.unsigned_abs(), w = width.saturating_sub(1))
                } else {
                    format!("{v:0width$}")
                });
                let Some(next) = v.checked_add(delta) else {
                    break;
                };
                if v == y || out.len() >= 1000 || (delta > 0 && next > y) || (delta < 0 && next < y)
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
                    if v == y || out.len() > 1000 {
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

    fn match_segments(pat: &[Segment], path: &[Vec<char>]) -> bool {
        match pat.split_first() {
            None => path.is_empty(),
            Some((Segment::Globstar, rest)) => {
                // A trailing `**` needs at least one segment (`a/**` misses `a`); `**` never
                // enters a segment starting with `.`.
                let min = usize::from(rest.is_empty());
                (min..=path.len()).any(|k| {
                    path[..k].iter().all(|s| s.first() != Some(&'.'))
                        && match_segments(rest, &path[k..])
                })
            }
            Some((Segment::Tokens(tokens), rest)) => match path.split_first() {
                Some((seg, path_rest)) => {
                    match_segment(tokens, seg) && match_segments(rest, path_rest)
                }
                None => false,
            },
        }
    }

    fn match_segment(tokens: &[Token], seg: &[char]) -> bool {
        if seg.first() == Some(&'.') {
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

    fn match_tokens(tokens: &[Token], s: &[char]) -> bool {
        match tokens.split_first() {
            None => s.is_empty(),
            Some((Token::Star, rest)) => (0..=s.len()).any(|k| match_tokens(rest, &s[k..])),
            Some((t, rest)) => match s.split_first() {
                Some((&c, s_rest)) => token_matches(t, c) && match_tokens(rest, s_rest),
                None => false,
            },
        }
    }

    fn token_matches(token: &Token, c: char) -> bool {
        match token {
            Token::Lit(l) => fold(*l) == fold(c),
            Token::One => true,
            Token::Star => true,
            Token::Class { negated, items } => {
                let variants = [c, fold(c), upper(c)];
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
}

#[test]
fn glob_matcher_follows_minimatch() {
    // Expected values observed with minimatch 10 (`nocase: true`), as bundled with Pi.
    for (path, pattern, want) in [
        ("anthropic/claude-sonnet-4", "anthropic/*", true),
        ("openrouter/anthropic/claude", "openrouter/*", false),
        ("openrouter/anthropic/claude", "openrouter/**", true),
        ("a", "a/**", false),
        ("a/b", "a/**", true),
        ("a/b/c", "**/c", true),
        ("c", "**/c", true),
        ("a/b", "a/**/b", true),
        ("a/x/b", "a/**b", false),
        ("x/.hidden", "x/*", false),
        ("x/.hidden", "x/.*", true),
        (".hidden", "*", false),
        (".a", "?a", false),
        (".a", "[.]a", true),
        ("x/.hidden", "x/**", false),
        ("gpt-4o", "GPT-*", true),
        ("gpt-4o", "gpt-4[a-z]", true),
        ("gpt-4o", "gpt-4[!a-z]", false),
        ("gpt-4o", "gpt-4[^0-9]", true),
        ("gpt-4o", "gpt-4[O]", true),
        ("A", "[a-z]", true),
        ("a", "[^A]*", false),
        ("a[b", "a[b", true),
        ("a[b", "a[*", true),
        ("ab", "a[b", false),
        ("a*b", "a\\*b", true),
        ("axb", "a\\*b", false),
        ("abc", "#abc*", false),
        ("a/b", "a//b", true),
        ("a/b", "a/b/", false),
        ("a/", "a/*", false),
        ("a]", "a]", true),
        ("a", "[]a]", true),
        ("]", "[]a]", true),
        ("a-", "a[-]", true),
        ("z", "[a-]*", false),
        ("a-b", "a[b-a]b", false),
        ("a/b", "a?b", false),
        ("a/b", "a*b", false),
        ("ab", "a**b", true),
        ("É", "é*", true),
        ("x{a}", "x{a}*", true),
        ("x1", "x{1..3}*", true),
        ("x", "{1..3}*", false),
        ("b", "{a..c}*", true),
        ("05", "{01..10}*", true),
        ("5", "{01..10}*", false),
        ("2", "{3..1}*", true),
        ("3", "{1..5..2}*", true),
        ("4", "{1..5..2}*", false),
        ("a", "!!a*", true),
        ("b", "!a*", true),
        ("a", "!a*", false),
        ("!a", "\\!a*", true),
        ("gpt-4o", "gpt-4o[*", false),
        ("", "*", false),
    ] {
        assert_eq!(
            Glob::new(pattern).matches(path),
            want,
            "{path:?} ~ {pattern:?}"
        );
        assert_eq!(
            oracle::Glob::new(pattern).matches(path),
            want,
            "oracle: {path:?} ~ {pattern:?}"
        );
    }
}

#[test]
fn matching_is_not_exponential_in_stars() {
    // The backtracking matcher needs ~C(5000, 10) steps here; this one 22 × 5000.
    let text = "a".repeat(5000);
    assert!(!Glob::new("*a*a*a*a*a*a*a*a*a*a*b").matches(&text));
    assert!(Glob::new("*a*a*a*a*a*a*a*a*a*a*").matches(&text));
    let mut tail = text.clone();
    tail.push('b');
    assert!(Glob::new("*a*a*a*a*a*a*a*a*a*a*b").matches(&tail));
}

#[test]
fn matching_is_not_exponential_in_globstars() {
    // Backtracking over `**` tries every way to split 2,000 segments among 10 globstars.
    let path = vec!["a"; 2000].join("/");
    let pattern = "**/a/**/a/**/a/**/a/**/a/**/a/**/a/**/a/**/a/**/b";
    assert!(!Glob::new(pattern).matches(&path));
    assert!(Glob::new(&pattern.replace("/b", "/a")).matches(&path));
}

#[test]
fn brace_expansion_keeps_the_first_alternatives() {
    let g = Glob::new("x{1..1000}");
    assert_eq!(g.alternatives.len(), MAX_EXPANSIONS);
    assert!(g.matches("x1"));
    assert!(g.matches("x256"));
    assert!(!g.matches("x257"));
    // First group varies slowest, as in the full expansion.
    let g = Glob::new("{1..300}-{a..z}");
    assert_eq!(g.alternatives.len(), MAX_EXPANSIONS);
    assert!(g.matches("1-a"));
    assert!(g.matches("9-z"));
    assert!(g.matches("10-v"));
    assert!(!g.matches("10-w"));
    // A sequence too long to generate is cut at the cap, not walked to the end.
    let g = Glob::new("{0..9223372036854775807}");
    assert_eq!(g.alternatives.len(), MAX_EXPANSIONS);
    assert!(g.matches("255"));
    assert!(!g.matches("256"));
    let g = Glob::new("{\u{1}..\u{10FFFF}}");
    assert_eq!(g.alternatives.len(), MAX_EXPANSIONS);
}

#[test]
fn brace_expansion_is_capped_in_bytes() {
    // 256 alternatives of ~1000 bytes would be 256 KB of pattern to match.
    let pattern = format!("{}{{1..300}}", "a".repeat(1000));
    let g = Glob::new(&pattern);
    // 9 × 1001 + 7 × 1002 = 16,023 bytes; one more would be 17,025.
    assert_eq!(g.alternatives.len(), 16);
    let a = "a".repeat(1000);
    assert!(g.matches(&format!("{a}1")));
    assert!(g.matches(&format!("{a}16")));
    assert!(!g.matches(&format!("{a}17")));
}

#[test]
fn overlong_patterns_match_nothing() {
    let at_cap = "*".repeat(MAX_PATTERN_CHARS);
    assert!(Glob::new(&at_cap).matches("a"));
    let over = "*".repeat(MAX_PATTERN_CHARS + 1);
    assert!(!Glob::new(&over).matches("a"));
    // Not even negated: the pattern is rejected, not inverted.
    let negated = format!("!{}", "x".repeat(MAX_PATTERN_CHARS));
    assert!(!Glob::new(&negated).matches("a"));
    // Characters, not bytes.
    assert!(Glob::new(&"é".repeat(MAX_PATTERN_CHARS)).matches(&"É".repeat(MAX_PATTERN_CHARS)));
}

#[test]
fn a_minimal_step_does_not_overflow() {
    // `-i64::MIN` overflowed in the old matcher (a panic in debug builds).
    let g = Glob::new("{1..0..-9223372036854775808}");
    assert!(g.matches("1"));
    assert!(!g.matches("0"));
    let g = Glob::new("{9223372036854775807..-9223372036854775808..-9223372036854775808}");
    assert!(g.matches("9223372036854775807"));
    assert!(g.matches("-1"));
    assert!(!g.matches("0"));
}

#[test]
fn surrogates_keep_a_character_sequence_literal() {
    let g = Glob::new("{\u{D7FF}..\u{E000}}");
    assert!(g.matches("{\u{D7FF}..\u{E000}}"));
    assert!(!g.matches("\u{D7FF}"));
}

/// Pieces that often combine into patterns that match the generated ids.
const PATTERN_PIECES: &[&str] = &[
    "a",
    "b",
    "A",
    "B",
    "c",
    ".",
    "/",
    "-",
    "0",
    "1",
    "2",
    ":",
    "*",
    "**",
    "?",
    "[a-b]",
    "[!a]",
    "[^.]",
    "[.]",
    "[]a]",
    "[",
    "]",
    "!",
    "#",
    "\\",
    "\\*",
    "{1..3}",
    "{a..c}",
    "{0..10..5}",
    "{c..a}",
    "{",
    "}",
    "..",
    ",",
    "^",
];

const ID_PIECES: &[&str] = &[
    "a", "b", "B", "c", ".", "/", "-", "0", "1", "2", "5", "10", ":",
];

fn joined(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pieces), 0..max).prop_map(|v| v.concat())
}

/// Pattern pieces with path fragments that often (not always) satisfy them, so that pairs
/// built side by side match about half the time.
const NEAR: &[(&str, &[&str])] = &[
    ("a", &["a", "A"]),
    ("b", &["b", "c"]),
    (".", &["."]),
    ("/", &["/", "//"]),
    ("-", &["-"]),
    ("1", &["1"]),
    ("*", &["", "a", "ab", ".", "a/b"]),
    ("**", &["", "a", "a/b", ".a"]),
    ("?", &["a", ".", "/"]),
    ("[a-b]", &["a", "B", "c"]),
    ("[!a]", &["a", "b", "."]),
    ("[.]", &["."]),
    ("{1..3}", &["1", "3", "4"]),
    ("{a..c}", &["b", "d"]),
    ("{3..1..2}", &["3", "2"]),
    ("\\*", &["*", "a"]),
    ("!", &["!", ""]),
    ("#", &["#", ""]),
    ("[", &["["]),
    ("]", &["]"]),
    ("{", &["{"]),
    ("}", &["}"]),
];

fn near_pair() -> impl Strategy<Value = (String, String)> {
    prop::collection::vec((0..NEAR.len(), 0usize..5), 0..10).prop_map(|picks| {
        let (mut pattern, mut path) = (String::new(), String::new());
        for (piece, choice) in picks {
            let (p, fragments) = NEAR[piece];
            pattern.push_str(p);
            path.push_str(fragments[choice % fragments.len()]);
        }
        (pattern, path)
    })
}

/// Up to 300 characters of glob syntax, letters, digits and multi-byte characters (built
/// from a character list: a regex strategy this long is slow to generate in debug builds).
fn long_text() -> impl Strategy<Value = String> {
    const CHARS: &[char] = &[
        '*',
        '?',
        '[',
        ']',
        '!',
        '^',
        '{',
        '}',
        ',',
        '.',
        '/',
        '\\',
        ':',
        '-',
        'a',
        'b',
        'z',
        '0',
        '1',
        '9',
        '\u{e9}',
        '\u{c9}',
        '\u{130}',
        '\u{1F600}',
    ];
    prop::collection::vec(prop::sample::select(CHARS), 0..300).prop_map(String::from_iter)
}

/// Whether the oracle's brace expansion fits inside this module's caps; past them the two
/// differ by design.
fn within_caps(pattern: &str) -> bool {
    let body = pattern.trim_start_matches('!');
    let alts = oracle::expand_braces(body);
    alts.len() <= MAX_EXPANSIONS
        && alts.iter().map(String::len).sum::<usize>() <= MAX_EXPANDED_BYTES
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    #[test]
    fn agrees_with_the_backtracking_matcher(
        pattern in joined(PATTERN_PIECES, 10),
        path in joined(ID_PIECES, 10),
    ) {
        prop_assume!(within_caps(&pattern));
        prop_assert_eq!(
            Glob::new(&pattern).matches(&path),
            oracle::Glob::new(&pattern).matches(&path),
            "{:?} ~ {:?}", path, pattern
        );
    }

    #[test]
    fn agrees_on_near_matches((pattern, path) in near_pair()) {
        prop_assume!(within_caps(&pattern));
        prop_assert_eq!(
            Glob::new(&pattern).matches(&path),
            oracle::Glob::new(&pattern).matches(&path),
            "{:?} ~ {:?}", path, pattern
        );
    }

    #[test]
    fn agrees_on_raw_characters(
        pattern in "[*?\\[\\]!^{},./\\\\:aAbB01-]{0,12}",
        path in "[*?\\[\\]!^{},./\\\\:aAbB01-]{0,12}",
    ) {
        prop_assume!(within_caps(&pattern));
        prop_assert_eq!(
            Glob::new(&pattern).matches(&path),
            oracle::Glob::new(&pattern).matches(&path),
            "{:?} ~ {:?}", path, pattern
        );
    }

    #[test]
    fn never_panics_on_long_inputs(pattern in long_text(), path in long_text()) {
        let _ = Glob::new(&pattern).matches(&path);
    }
}
