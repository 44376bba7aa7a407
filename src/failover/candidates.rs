//! Candidate hard filters, ranking, the model-family rule and Pi's `--models` scope
//! (SPEC §3). Pure: no I/O, no clock (time comes in through [`Filter::now_ms`]).
//!
//! # Ranking
//!
//! Hard filters first: not the current model; not tried this round; endpoint not isolated;
//! no open breaker, lease or disable on its model/provider/endpoint; accepts images when the
//! request has images (unknown metadata excluded); a strictly larger context window after an
//! overflow (missing = 0); family not avoided. The survivors are sorted by an ascending
//! penalty, ties keeping pool order: same provider as the current model +1000; different
//! model id +100 (ids compare case-insensitively by their last `/` segment, so a gateway's
//! `z-ai/GLM-4.6` is the same model as `glm-4.6`); different input set +20; different
//! reasoning flag +10; smaller context window +5; history min(80, Σ 4·log2(n+1)) over the
//! total failures n of its model, provider and endpoint records.
//!
//! # `--models` scope
//!
//! [`scope`] resolves `--models` exactly as Pi does (read in Pi's
//! `dist/core/model-resolver.js`, `resolveModelScopeFromModels`, and `dist/cli/args.js`;
//! behaviour of Pi 1.6.0, differences of 0.84.4 noted):
//!
//! - The value is split on `,`; each piece is trimmed; empty pieces are dropped.
//! - A pattern containing `*`, `?` or `[` is a **glob**. An optional `:<level>` suffix naming a
//!   thinking level (`off minimal low medium high xhigh max`) is cut off first. If the rest is
//!   an exact reference (see below) that model is taken; otherwise every model whose
//!   `provider/id` **or** bare `id` matches the glob, case-insensitively, with minimatch rules:
//!   `*` and `?` never cross `/` (`openrouter/*` misses `openrouter/a/b`, `openrouter/**`
//!   matches it), `**` spans segments, `[a-z]`, `[!x]`/`[^x]` classes, `\` escapes, a leading
//!   `.` in a segment only matches an explicit `.`, `{1..3}`/`{a..c}` sequences expand, a
//!   leading `#` makes it match nothing, and a leading `!` negates it — tested against both
//!   forms, so `!x*` keeps nearly every model, exactly as in Pi.
//!   (Not supported: extglobs such as `+(a|b)` and POSIX classes such as `[[:alpha:]]` — the
//!   latter make Pi's minimatch throw.)
//! - Any other pattern is a **reference**: the model whose id equals it (case-insensitive),
//!   or `provider/id` where `provider` is the longest known provider name before a `/`; if
//!   none, the best **fuzzy** match: models whose id or name contains the text
//!   (case-insensitive), preferring aliases (ids not ending in an 8-digit `-YYYYMMDD` date, or
//!   ending in `-latest`), then the id that sorts last (`claude-sonnet-4-5` beats
//!   `claude-sonnet-4`); `provider/text` fuzzy-matches inside that provider. If nothing
//!   matches and the pattern has a `:`, the part after the last `:` is taken as a thinking
//!   level (valid or not) and the rest is tried again (`sonnet:high`).
//! - When the same id exists on several providers, every one of them is selected (Pi warns
//!   "matches several providers"); `provider/id` picks one.
//! - A pattern that matches nothing selects nothing (Pi prints a warning and goes on).
//! - Result order: pattern order, then pool order; duplicates dropped. Thinking levels are
//!   not part of the scope (Pi applies them itself when it switches).
//!
//! Verified by running Pi 1.6.0's own resolver and [`scope`] on the same pools and ~110
//! patterns: identical results. Pi 0.84.4 differs in three corners: an id present on several
//! providers falls through to fuzzy matching and picks one model (for `gpt-4o` on two
//! providers it picks `gpt-4o-mini`), `provider/fuzzy-text` does not fuzzy-match inside the
//! provider, and an empty piece (`a,,b`) is not dropped (it fuzzy-matches some model).

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::catalog::ModelInfo;
use crate::health::{Health, Keys};

/// Everything the hard filters look at besides the model itself.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    /// `provider/id` keys already tried this round.
    pub tried: &'a BTreeSet<String>,
    /// Endpoint keys isolated for the rest of the round.
    pub isolated_endpoints: &'a BTreeSet<String>,
    /// Families avoided after a content-policy failure this round.
    pub avoided_families: &'a BTreeSet<String>,
    /// The request carries images: only models that declare `image` input qualify.
    pub needs_images: bool,
    /// After a context overflow: only windows strictly larger than this qualify.
    pub larger_context_than: Option<u64>,
    pub health: &'a Health,
    pub now_ms: u64,
    /// Providers whose probe lease this process holds.
    pub own_leases: &'a [String],
}

/// Healthy candidates for replacing `current`, best first.
pub fn rank(current: &ModelInfo, pool: &[ModelInfo], filter: &Filter<'_>) -> Vec<ModelInfo> {
    let current_key = current.key();
    let mut seen = BTreeSet::new();
    let mut scored: Vec<(f64, &ModelInfo)> = pool
        .iter()
        .filter(|m| seen.insert(m.key()))
        .filter(|m| admissible(m, &current_key, filter))
        .map(|m| (penalty(current, m, filter.health), m))
        .collect();
    // `sort_by` is stable: equal penalties keep pool order.
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    scored.into_iter().map(|(_, m)| m.clone()).collect()
}

fn admissible(m: &ModelInfo, current_key: &str, f: &Filter<'_>) -> bool {
    let key = m.key();
    key != current_key
        && !f.tried.contains(&key)
        && !f.isolated_endpoints.contains(&Keys::of(m).endpoint)
        && f.health.blocked(m, f.now_ms, f.own_leases).is_none()
        && (!f.needs_images || m.accepts_images())
        && f.larger_context_than
            .is_none_or(|c| m.context_window_or_zero() > c)
        && !f.avoided_families.contains(&family(m))
}

/// Lower is better; see the module doc.
fn penalty(current: &ModelInfo, m: &ModelInfo, health: &Health) -> f64 {
    let mut p = 0.0;
    if m.provider == current.provider {
        p += 1000.0;
    }
    if !same_model_id(&m.id, &current.id) {
        p += 100.0;
    }
    if input_set(m) != input_set(current) {
        p += 20.0;
    }
    if m.reasoning != current.reasoning {
        p += 10.0;
    }
    if m.context_window_or_zero() < current.context_window_or_zero() {
        p += 5.0;
    }
    let history: f64 = health
        .total_failures(m)
        .iter()
        .map(|&n| 4.0 * (n as f64 + 1.0).log2())
        .sum();
    p + history.min(80.0)
}

fn same_model_id(a: &str, b: &str) -> bool {
    let last = |s: &str| s.rsplit('/').next().unwrap_or(s).to_ascii_lowercase();
    last(a) == last(b)
}

fn input_set(m: &ModelInfo) -> Option<BTreeSet<&str>> {
    m.input
        .as_ref()
        .map(|v| v.iter().map(String::as_str).collect())
}

/// Known families and the words that name them. `chatglm` and `chatgpt` are listed so the
/// `chat` prefix does not hide the family (`chatgpt-4o-latest` is gpt, `THUDM/chatglm3-6b`
/// is glm); `moonshot`/`moonshotai` are Kimi's maker.
const FAMILIES: &[(&str, &str)] = &[
    ("chatglm", "glm"),
    ("glm", "glm"),
    ("qwen", "qwen"),
    ("deepseek", "deepseek"),
    ("kimi", "kimi"),
    ("moonshotai", "kimi"),
    ("moonshot", "kimi"),
    ("chatgpt", "gpt"),
    ("gpt", "gpt"),
    ("claude", "claude"),
    ("gemini", "gemini"),
    ("llama", "llama"),
    ("mistral", "mistral"),
    ("minimax", "minimax"),
    ("ernie", "ernie"),
    ("doubao", "doubao"),
    ("hunyuan", "hunyuan"),
];

/// The model family (`glm`, `qwen`, ...) avoided after a content-policy failure.
///
/// A known family word counts when no ASCII letter or digit precedes it and no ASCII letter
/// follows it (a version may: `qwen2.5`, `glm4`, `gpt4o`), looked for in the lower-cased
/// "id name". `codellama`, `ollama` and `bernie` therefore name no family. The earliest word
/// in the id wins, so `deepseek-r1-distill-qwen-32b` is deepseek. Otherwise the family is the
/// id's last `/` segment, lower-cased, cut before its version (the first digit, or a `v`
/// directly before it at the start of a segment) and stripped of trailing separators:
/// `yi-34b-chat` → `yi`, `mimo-v2.5-pro` → `mimo`, `o3-mini` → `o`; an id that is all
/// version (`4o`) is its own family.
pub fn family(model: &ModelInfo) -> String {
    let hay = match &model.name {
        Some(name) => format!("{} {}", model.id, name),
        None => model.id.clone(),
    }
    .to_ascii_lowercase();
    let known = FAMILIES
        .iter()
        .filter_map(|&(word, fam)| {
            word_at(&hay, word).map(|at| (at, std::cmp::Reverse(word.len()), fam))
        })
        .min();
    if let Some((_, _, fam)) = known {
        return fam.to_string();
    }
    let segment = model
        .id
        .rsplit('/')
        .next()
        .unwrap_or(&model.id)
        .to_ascii_lowercase();
    let cut = version_start(&segment);
    let base = segment[..cut].trim_end_matches(|c: char| !c.is_alphanumeric());
    if base.is_empty() {
        segment
    } else {
        base.to_string()
    }
}

/// First position of `word` in `hay` with a family boundary on both sides.
fn word_at(hay: &str, word: &str) -> Option<usize> {
    let bytes = hay.as_bytes();
    hay.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before_ok = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        let after_ok = bytes
            .get(i + word.len())
            .is_none_or(|b| !b.is_ascii_alphabetic());
        before_ok && after_ok
    })
}

/// Byte offset where the version suffix of an id segment starts (its length if none).
fn version_start(segment: &str) -> usize {
    let b = segment.as_bytes();
    let Some(d) = b.iter().position(u8::is_ascii_digit) else {
        return b.len();
    };
    let v_prefix = d >= 1 && b[d - 1] == b'v' && (d == 1 || !b[d - 2].is_ascii_alphanumeric());
    if v_prefix { d - 1 } else { d }
}

/// Pi's `--models` scope: the subset of `available` the comma-separated patterns select, in
/// Pi's order (see the module doc).
pub fn scope(patterns: &str, available: &[ModelInfo]) -> Vec<ModelInfo> {
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut out = Vec::new();
    for pattern in patterns.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        for i in resolve_pattern(pattern, available) {
            let m = &available[i];
            if seen.insert((m.provider.as_str(), m.id.as_str())) {
                out.push(m.clone());
            }
        }
    }
    out
}

const THINKING_LEVELS: &[&str] = &["off", "minimal", "low", "medium", "high", "xhigh", "max"];

/// Outcome of resolving one reference, as indices into the pool.
enum Found {
    One(usize),
    /// The same id on several providers: all of them.
    Several(Vec<usize>),
}

impl Found {
    fn into_vec(self) -> Vec<usize> {
        match self {
            Found::One(i) => vec![i],
            Found::Several(v) => v,
        }
    }
}

fn resolve_pattern(pattern: &str, models: &[ModelInfo]) -> Vec<usize> {
    if pattern.contains(['*', '?', '[']) {
        let base = match pattern.rsplit_once(':') {
            Some((base, level)) if THINKING_LEVELS.contains(&level) => base,
            _ => pattern,
        };
        // An id may itself contain glob characters (`model[1m]`): exact references win.
        if let Some(found) = select_reference(base.trim(), models, false) {
            return found.into_vec();
        }
        let glob = Glob::new(base);
        return (0..models.len())
            .filter(|&i| {
                let m = &models[i];
                glob.matches(&format!("{}/{}", m.provider, m.id)) || glob.matches(&m.id)
            })
            .collect();
    }
    resolve_text(pattern, models)
        .map(Found::into_vec)
        .unwrap_or_default()
}

/// Exact reference, then fuzzy match, then the same again without a `:suffix`.
fn resolve_text(text: &str, models: &[ModelInfo]) -> Option<Found> {
    if let Some(found) = select_reference(text, models, true) {
        return Some(found);
    }
    let all: Vec<usize> = (0..models.len()).collect();
    if let Some(found) = select_fuzzy(&fuzzy_matches(text, &all, models), models) {
        return Some(found);
    }
    let (head, _level) = text.rsplit_once(':')?;
    resolve_text(head, models)
}

/// `id` (case-insensitive) or `provider/id`; with `fuzzy`, `provider/text` may fuzzy-match
/// inside the provider. The named provider wins over the same text as a raw id elsewhere.
fn select_reference(text: &str, models: &[ModelInfo], fuzzy: bool) -> Option<Found> {
    if text.is_empty() {
        return None;
    }
    let lower = text.to_lowercase();
    let raw: Vec<usize> = (0..models.len())
        .filter(|&i| models[i].id.to_lowercase() == lower)
        .collect();
    let named = split_provider_prefix(text, models).and_then(|(provider, model_text)| {
        let own: Vec<usize> = (0..models.len())
            .filter(|&i| models[i].provider == provider)
            .collect();
        let model_lower = model_text.to_lowercase();
        own.iter()
            .copied()
            .find(|&i| models[i].id.to_lowercase() == model_lower)
            .or_else(|| {
                raw.iter()
                    .copied()
                    .find(|&i| models[i].provider == provider)
            })
            .or_else(|| {
                if fuzzy {
                    best_fuzzy(&fuzzy_matches(&model_text, &own, models), models)
                } else {
                    None
                }
            })
    });
    if let Some(i) = named {
        return Some(Found::One(i));
    }
    match raw.as_slice() {
        [] => None,
        [only] => Some(Found::One(*only)),
        _ if single_provider(&raw, models) => Some(Found::One(raw[0])),
        _ => Some(Found::Several(raw)),
    }
}

fn single_provider(idx: &[usize], models: &[ModelInfo]) -> bool {
    idx.iter()
        .map(|&i| models[i].provider.as_str())
        .collect::<BTreeSet<_>>()
        .len()
        == 1
}

/// The longest provider name that, followed by `/`, starts `text`; and the rest of `text`.
fn split_provider_prefix(text: &str, models: &[ModelInfo]) -> Option<(String, String)> {
    let mut best: Option<(&str, String)> = None;
    for m in models {
        let prefix = m.provider.trim().to_lowercase();
        if prefix.is_empty()
            || best
                .as_ref()
                .is_some_and(|(p, _)| p.chars().count() >= m.provider.chars().count())
        {
            continue;
        }
        let want = prefix.chars().count();
        let Some(slash) = text
            .char_indices()
            .filter(|&(_, c)| c == '/')
            .map(|(i, _)| i)
            .find(|&i| text[..i].chars().count() >= want)
        else {
            continue;
        };
        if text[..slash].trim().to_lowercase() != prefix {
            continue;
        }
        let model_text = text[slash + 1..].trim();
        if !model_text.is_empty() {
            best = Some((m.provider.as_str(), model_text.to_string()));
        }
    }
    best.map(|(p, t)| (p.to_string(), t))
}

/// Models (among `within`) whose id or name contains `text`, case-insensitively.
fn fuzzy_matches(text: &str, within: &[usize], models: &[ModelInfo]) -> Vec<usize> {
    let needle = text.to_lowercase();
    within
        .iter()
        .copied()
        .filter(|&i| {
            let m = &models[i];
            m.id.to_lowercase().contains(&needle)
                || m.name
                    .as_ref()
                    .is_some_and(|n| n.to_lowercase().contains(&needle))
        })
        .collect()
}

fn select_fuzzy(matches: &[usize], models: &[ModelInfo]) -> Option<Found> {
    let best = best_fuzzy(matches, models)?;
    let tied: Vec<usize> = matches
        .iter()
        .copied()
        .filter(|&i| models[i].id == models[best].id)
        .collect();
    if single_provider(&tied, models) {
        Some(Found::One(best))
    } else {
        Some(Found::Several(tied))
    }
}

/// Aliases before dated ids, then the id that sorts last; ties keep pool order.
fn best_fuzzy(matches: &[usize], models: &[ModelInfo]) -> Option<usize> {
    let aliases: Vec<usize> = matches
        .iter()
        .copied()
        .filter(|&i| is_alias(&models[i].id))
        .collect();
    let pool = if aliases.is_empty() {
        matches
    } else {
        &aliases
    };
    pool.iter().copied().reduce(|best, i| {
        if locale_cmp(&models[i].id, &models[best].id) == Ordering::Greater {
            i
        } else {
            best
        }
    })
}

/// Not a dated snapshot: ends in `-latest`, or not in `-` + 8 digits.
fn is_alias(id: &str) -> bool {
    if id.ends_with("-latest") {
        return true;
    }
    let b = id.as_bytes();
    let dated =
        b.len() >= 9 && b[b.len() - 9] == b'-' && b[b.len() - 8..].iter().all(u8::is_ascii_digit);
    !dated
}

/// Primary order of ASCII characters under ICU's root collation (what Node's
/// `localeCompare` uses): spaces and punctuation, symbols, digits, then letters with case
/// ignored. Measured with Node 22.
const ICU_ASCII_ORDER: &str =
    " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz";

/// An approximation of `a.localeCompare(b)` good for model ids: primary weights from
/// [`ICU_ASCII_ORDER`] (other characters after it by code point), then lower case before
/// upper case, then code points.
fn locale_cmp(a: &str, b: &str) -> Ordering {
    fn primary(c: char) -> u32 {
        let l = c.to_ascii_lowercase();
        match ICU_ASCII_ORDER.find(l) {
            Some(i) if l.is_ascii() => i as u32,
            _ => 0x100 + u32::from(l),
        }
    }
    let pa = a.chars().map(primary);
    let pb = b.chars().map(primary);
    pa.cmp(pb)
        .then_with(|| {
            a.chars()
                .zip(b.chars())
                .find(|(x, y)| x != y)
                .map_or(Ordering::Equal, |(x, y)| {
                    x.is_ascii_uppercase().cmp(&y.is_ascii_uppercase())
                })
        })
        .then_with(|| a.cmp(b))
}

/// A minimatch-style glob, matched case-insensitively (see the module doc).
struct Glob {
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
    fn new(pattern: &str) -> Glob {
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

    fn matches(&self, path: &str) -> bool {
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
fn expand_braces(pattern: &str) -> Vec<String> {
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
            if v == y || out.len() >= 1000 || (delta > 0 && next > y) || (delta < 0 && next < y) {
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
            Some((seg, path_rest)) => match_segment(tokens, seg) && match_segments(rest, path_rest),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::classify::{FailureClass, Scope};
    use crate::health::Delta;

    fn model(provider: &str, id: &str) -> ModelInfo {
        ModelInfo {
            provider: provider.into(),
            id: id.into(),
            name: None,
            base_url: Some(format!("https://{provider}.example.com/v1")),
            reasoning: false,
            input: Some(vec!["text".into()]),
            context_window: Some(128_000),
        }
    }

    fn with(mut m: ModelInfo, f: impl FnOnce(&mut ModelInfo)) -> ModelInfo {
        f(&mut m);
        m
    }

    struct Round {
        tried: BTreeSet<String>,
        isolated: BTreeSet<String>,
        avoided: BTreeSet<String>,
        health: Health,
        needs_images: bool,
        larger_context_than: Option<u64>,
    }

    impl Round {
        fn new() -> Round {
            Round {
                tried: BTreeSet::new(),
                isolated: BTreeSet::new(),
                avoided: BTreeSet::new(),
                health: Health::default(),
                needs_images: false,
                larger_context_than: None,
            }
        }

        fn rank(&self, current: &ModelInfo, pool: &[ModelInfo]) -> Vec<String> {
            let filter = Filter {
                tried: &self.tried,
                isolated_endpoints: &self.isolated,
                avoided_families: &self.avoided,
                needs_images: self.needs_images,
                larger_context_than: self.larger_context_than,
                health: &self.health,
                now_ms: 1_000,
                own_leases: &[],
            };
            rank(current, pool, &filter)
                .iter()
                .map(ModelInfo::key)
                .collect()
        }

        fn fail(&mut self, key: &str, scope: Scope, class: FailureClass, times: u32) {
            for n in 0..times {
                self.health.apply(
                    &Delta::Failure {
                        at: u64::from(n),
                        key: key.into(),
                        scope,
                        class,
                        error: String::new(),
                    },
                    1.0,
                );
            }
        }
    }

    #[test]
    fn same_model_on_another_provider_beats_a_sibling_on_the_same_provider() {
        let current = model("a", "glm-4.6");
        let pool = [
            model("a", "glm-4.6"),
            model("a", "glm-4.5"),
            model("b", "qwen3"),
            model("c", "glm-4.6"),
        ];
        assert_eq!(
            Round::new().rank(&current, &pool),
            ["c/glm-4.6", "b/qwen3", "a/glm-4.5"]
        );
    }

    #[test]
    fn same_model_id_ignores_case_and_vendor_prefix() {
        let current = model("a", "GLM-4.6");
        let pool = [model("b", "qwen3"), model("c", "z-ai/glm-4.6")];
        assert_eq!(
            Round::new().rank(&current, &pool),
            ["c/z-ai/glm-4.6", "b/qwen3"]
        );
    }

    #[test]
    fn open_provider_breaker_is_skipped() {
        let current = model("a", "m");
        let pool = [model("b", "m"), model("c", "m")];
        let mut r = Round::new();
        r.fail("b", Scope::Provider, FailureClass::Quota, 1);
        assert_eq!(r.rank(&current, &pool), ["c/m"]);
    }

    #[test]
    fn open_model_and_endpoint_breakers_and_disabled_models_are_skipped() {
        let current = model("a", "m");
        let pool = [
            model("b", "m"),
            model("c", "m"),
            model("d", "m"),
            model("e", "m"),
        ];
        let mut r = Round::new();
        r.fail("b/m", Scope::Model, FailureClass::Model, 1);
        r.fail(
            &Keys::of(&pool[1]).endpoint,
            Scope::Endpoint,
            FailureClass::Endpoint,
            1,
        );
        r.health.models.entry("d/m".into()).or_default().disabled = true;
        assert_eq!(r.rank(&current, &pool), ["e/m"]);
    }

    #[test]
    fn tried_and_current_are_excluded_and_duplicates_collapse() {
        let current = model("a", "m");
        let pool = [
            model("a", "m"),
            model("b", "m"),
            model("c", "m"),
            model("c", "m"),
        ];
        let mut r = Round::new();
        r.tried.insert("b/m".into());
        assert_eq!(r.rank(&current, &pool), ["c/m"]);
    }

    #[test]
    fn context_overflow_picks_a_strictly_larger_window_only() {
        let current = model("a", "small");
        let pool = [
            with(model("b", "same"), |m| m.context_window = Some(128_000)),
            with(model("c", "unknown"), |m| m.context_window = None),
            with(model("d", "big"), |m| m.context_window = Some(200_000)),
            with(model("e", "smaller"), |m| m.context_window = Some(32_000)),
        ];
        let mut r = Round::new();
        r.larger_context_than = Some(128_000);
        assert_eq!(r.rank(&current, &pool), ["d/big"]);
    }

    #[test]
    fn image_request_never_goes_to_a_text_only_or_unknown_model() {
        let current = with(model("a", "vision"), |m| {
            m.input = Some(vec!["text".into(), "image".into()])
        });
        let pool = [
            model("b", "vision"),
            with(model("c", "vision"), |m| m.input = None),
            with(model("d", "other"), |m| {
                m.input = Some(vec!["text".into(), "image".into()])
            }),
        ];
        let mut r = Round::new();
        r.needs_images = true;
        assert_eq!(r.rank(&current, &pool), ["d/other"]);
        r.needs_images = false;
        assert_eq!(r.rank(&current, &pool), ["b/vision", "c/vision", "d/other"]);
    }

    #[test]
    fn isolated_endpoint_siblings_are_skipped_but_another_endpoint_of_the_provider_is_not() {
        let current = with(model("a", "m1"), |m| {
            m.base_url = Some("https://gw.example.com/v1".into())
        });
        let sibling = with(model("a", "m2"), |m| {
            m.base_url = Some("https://gw.example.com/v1".into())
        });
        let other_endpoint = with(model("a", "m3"), |m| {
            m.base_url = Some("https://backup.example.com/v1".into())
        });
        let pool = [sibling, other_endpoint];
        let mut r = Round::new();
        r.isolated.insert(Keys::of(&current).endpoint);
        assert_eq!(r.rank(&current, &pool), ["a/m3"]);
    }

    #[test]
    fn same_base_url_on_two_providers_is_two_endpoints() {
        let url = "https://shared.example.com/v1";
        let current = with(model("a", "m"), |m| m.base_url = Some(url.into()));
        let other = with(model("b", "m"), |m| m.base_url = Some(url.into()));
        assert_ne!(Keys::of(&current).endpoint, Keys::of(&other).endpoint);
        let mut r = Round::new();
        r.isolated.insert(Keys::of(&current).endpoint);
        assert_eq!(r.rank(&current, &[other]), ["b/m"]);
    }

    #[test]
    fn families_are_excluded_only_when_avoided() {
        let current = model("a", "glm-4.6");
        let pool = [
            model("b", "GLM-4.5"),
            model("c", "zai-org/GLM-4.6"),
            model("d", "qwen3-coder"),
        ];
        let mut r = Round::new();
        assert_eq!(
            r.rank(&current, &pool),
            ["c/zai-org/GLM-4.6", "b/GLM-4.5", "d/qwen3-coder"]
        );
        r.avoided.insert("glm".into());
        assert_eq!(r.rank(&current, &pool), ["d/qwen3-coder"]);
    }

    #[test]
    fn history_penalty_orders_otherwise_equal_candidates() {
        let current = model("a", "m");
        let pool = [model("b", "m"), model("c", "m"), model("d", "m")];
        let mut r = Round::new();
        // Expired failures: not blocking, but remembered.
        r.fail("b", Scope::Provider, FailureClass::Endpoint, 7);
        r.fail("c/m", Scope::Model, FailureClass::Unknown, 1);
        for rec in r
            .health
            .providers
            .values_mut()
            .chain(r.health.models.values_mut())
        {
            rec.cooldown_until = None;
        }
        assert_eq!(r.rank(&current, &pool), ["d/m", "c/m", "b/m"]);
    }

    #[test]
    fn history_penalty_is_capped_at_80() {
        let current = model("a", "m");
        let pool = [model("b", "m"), model("c", "other")];
        let mut r = Round::new();
        // 3 × 4·log2(1001) ≈ 120 uncapped would lose to the +100 of another model id.
        r.fail("b", Scope::Provider, FailureClass::Endpoint, 1000);
        r.fail("b/m", Scope::Model, FailureClass::Unknown, 1000);
        r.fail(
            &Keys::of(&pool[0]).endpoint,
            Scope::Endpoint,
            FailureClass::Endpoint,
            1000,
        );
        for rec in r
            .health
            .providers
            .values_mut()
            .chain(r.health.models.values_mut())
            .chain(r.health.endpoints.values_mut())
        {
            rec.cooldown_until = None;
        }
        assert_eq!(r.rank(&current, &pool), ["b/m", "c/other"]);
    }

    #[test]
    fn capabilities_break_ties_inputs_then_reasoning_then_context() {
        let current = with(model("a", "m"), |m| {
            m.reasoning = true;
            m.context_window = Some(200_000);
        });
        let pool = [
            with(model("b", "x"), |m| {
                m.reasoning = true;
                m.context_window = Some(100_000);
            }),
            with(model("c", "x"), |m| m.context_window = Some(200_000)),
            with(model("d", "x"), |m| {
                m.reasoning = true;
                m.context_window = Some(200_000);
                m.input = Some(vec!["text".into(), "image".into()]);
            }),
            with(model("e", "x"), |m| {
                m.reasoning = true;
                m.context_window = Some(300_000);
            }),
        ];
        assert_eq!(
            Round::new().rank(&current, &pool),
            ["e/x", "b/x", "c/x", "d/x"]
        );
    }

    fn fam(id: &str) -> String {
        family(&model("p", id))
    }

    #[test]
    fn family_rule() {
        for (id, want) in [
            ("glm-4.5", "glm"),
            ("GLM-4.6", "glm"),
            ("zai-org/GLM-4.6", "glm"),
            ("THUDM/chatglm3-6b", "glm"),
            ("glm4", "glm"),
            ("qwen3-coder-plus", "qwen"),
            ("Qwen/Qwen2.5-72B-Instruct", "qwen"),
            ("deepseek-chat", "deepseek"),
            ("deepseek-r1-distill-qwen-32b", "deepseek"),
            ("kimi-k2-0905-preview", "kimi"),
            ("moonshot-v1-8k", "kimi"),
            ("moonshotai/Kimi-K2.6", "kimi"),
            ("gpt-4o", "gpt"),
            ("gpt4o", "gpt"),
            ("openai/gpt-oss-120b", "gpt"),
            ("chatgpt-4o-latest", "gpt"),
            ("claude-sonnet-4-5-20250929", "claude"),
            ("gemini-2.5-pro", "gemini"),
            ("meta-llama/Llama-3.3-70B-Instruct", "llama"),
            ("mistral-large-latest", "mistral"),
            ("MiniMax-M2", "minimax"),
            ("ernie-4.5-turbo", "ernie"),
            ("doubao-seed-1-6", "doubao"),
            ("hunyuan-t1", "hunyuan"),
            // fallback: last segment without its version
            ("yi-34b-chat", "yi"),
            ("xiaomi/mimo-v2.5-pro", "mimo"),
            ("nova-pro-v1:0", "nova-pro"),
            ("o3-mini", "o"),
            ("dev2", "dev"),
            ("grok-4", "grok"),
            ("command-r-plus", "command-r-plus"),
            ("4o", "4o"),
            // not a family word inside another word
            ("codellama-34b", "codellama"),
            ("mixtral-8x7b", "mixtral"),
        ] {
            assert_eq!(fam(id), want, "{id}");
        }
    }

    #[test]
    fn family_also_reads_the_name() {
        let m = with(model("p", "ep-20240618134341-vkc7n"), |m| {
            m.name = Some("Doubao Pro 32k".into())
        });
        assert_eq!(family(&m), "doubao");
        let m = with(model("p", "custom-7b"), |m| m.name = Some("Custom".into()));
        assert_eq!(family(&m), "custom");
    }

    fn pool() -> Vec<ModelInfo> {
        vec![
            with(model("anthropic", "claude-sonnet-4-5"), |m| {
                m.name = Some("Claude Sonnet 4.5".into())
            }),
            model("anthropic", "claude-sonnet-4-5-20250929"),
            model("anthropic", "claude-haiku-4-5"),
            model("openai", "gpt-4o"),
            model("openai", "gpt-4o-mini"),
            model("azure", "gpt-4o"),
            model("openrouter", "anthropic/claude-sonnet-4-5"),
            model("openrouter", "z-ai/glm-4.6"),
            model("zai", "glm-4.6"),
            model("zai", "glm-4.5"),
        ]
    }

    fn keys(patterns: &str) -> Vec<String> {
        scope(patterns, &pool())
            .iter()
            .map(ModelInfo::key)
            .collect()
    }

    #[test]
    fn scope_exact_references() {
        assert_eq!(keys("zai/glm-4.6"), ["zai/glm-4.6"]);
        assert_eq!(keys("ZAI/GLM-4.6"), ["zai/glm-4.6"]);
        assert_eq!(keys("claude-haiku-4-5"), ["anthropic/claude-haiku-4-5"]);
        // An id containing a slash, under its provider or bare.
        assert_eq!(keys("openrouter/z-ai/glm-4.6"), ["openrouter/z-ai/glm-4.6"]);
        assert_eq!(keys("z-ai/glm-4.6"), ["openrouter/z-ai/glm-4.6"]);
    }

    #[test]
    fn scope_same_id_on_several_providers_selects_all() {
        assert_eq!(keys("gpt-4o"), ["openai/gpt-4o", "azure/gpt-4o"]);
        assert_eq!(keys("glm-4.6"), ["zai/glm-4.6"]);
        assert_eq!(keys("azure/gpt-4o"), ["azure/gpt-4o"]);
    }

    #[test]
    fn scope_fuzzy_prefers_aliases_then_the_id_sorting_last() {
        assert_eq!(keys("sonnet"), ["anthropic/claude-sonnet-4-5"]);
        assert_eq!(keys("haiku"), ["anthropic/claude-haiku-4-5"]);
        // "mini" only in gpt-4o-mini; "4o" → gpt-4o-mini sorts after gpt-4o.
        assert_eq!(keys("4o"), ["openai/gpt-4o-mini"]);
        // By name.
        assert_eq!(keys("Claude Sonnet"), ["anthropic/claude-sonnet-4-5"]);
        // `provider/text` fuzzy-matches inside the provider.
        assert_eq!(
            keys("openrouter/sonnet"),
            ["openrouter/anthropic/claude-sonnet-4-5"]
        );
        assert_eq!(keys("zai/glm"), ["zai/glm-4.6"]);
    }

    #[test]
    fn scope_fuzzy_tie_on_the_same_id_selects_every_provider() {
        let pool = [model("a", "kimi-k2"), model("b", "kimi-k2")];
        let got: Vec<String> = scope("k2", &pool).iter().map(ModelInfo::key).collect();
        assert_eq!(got, ["a/kimi-k2", "b/kimi-k2"]);
    }

    #[test]
    fn scope_dated_ids_only_when_no_alias_matches() {
        assert_eq!(keys("20250929"), ["anthropic/claude-sonnet-4-5-20250929"]);
        let pool = [model("a", "m-20240101"), model("a", "m-20250101")];
        let got: Vec<String> = scope("m-", &pool).iter().map(ModelInfo::key).collect();
        assert_eq!(got, ["a/m-20250101"]);
    }

    #[test]
    fn scope_thinking_suffixes() {
        assert_eq!(keys("sonnet:high"), ["anthropic/claude-sonnet-4-5"]);
        assert_eq!(keys("zai/glm-4.6:off"), ["zai/glm-4.6"]);
        // An invalid level is dropped with a warning in Pi; the model still counts.
        assert_eq!(keys("haiku:turbo"), ["anthropic/claude-haiku-4-5"]);
        assert_eq!(keys("zai/*:medium"), ["zai/glm-4.6", "zai/glm-4.5"]);
        // A colon that is part of an id.
        let pool = [model("bedrock", "nova-pro-v1:0")];
        let got: Vec<String> = scope("nova-pro-v1:0", &pool)
            .iter()
            .map(ModelInfo::key)
            .collect();
        assert_eq!(got, ["bedrock/nova-pro-v1:0"]);
    }

    #[test]
    fn scope_globs() {
        // `provider/id` or the bare id: the gateway's `anthropic/…` id matches too.
        assert_eq!(
            keys("anthropic/*"),
            [
                "anthropic/claude-sonnet-4-5",
                "anthropic/claude-sonnet-4-5-20250929",
                "anthropic/claude-haiku-4-5",
                "openrouter/anthropic/claude-sonnet-4-5"
            ]
        );
        // A one-segment glob misses ids that contain a `/`.
        assert_eq!(
            keys("*sonnet*"),
            [
                "anthropic/claude-sonnet-4-5",
                "anthropic/claude-sonnet-4-5-20250929"
            ]
        );
        // `*` does not cross `/`; `**` does.
        assert_eq!(keys("openrouter/*"), Vec::<String>::new());
        assert_eq!(
            keys("openrouter/**"),
            [
                "openrouter/anthropic/claude-sonnet-4-5",
                "openrouter/z-ai/glm-4.6"
            ]
        );
        assert_eq!(keys("GPT-4?"), ["openai/gpt-4o", "azure/gpt-4o"]);
        assert_eq!(keys("glm-4.[5-6]"), ["zai/glm-4.6", "zai/glm-4.5"]);
        assert_eq!(
            keys("*/glm-4.[5-6]"),
            ["openrouter/z-ai/glm-4.6", "zai/glm-4.6", "zai/glm-4.5"]
        );
        assert_eq!(keys("glm-4.[!6]"), ["zai/glm-4.5"]);
        assert_eq!(keys("glm-4.{5..5}*"), ["zai/glm-4.5"]);
        assert_eq!(keys("#zai/*"), Vec::<String>::new());
        assert_eq!(keys("nothing-*"), Vec::<String>::new());
    }

    #[test]
    fn scope_negated_glob_is_tested_per_form_as_in_pi() {
        // Pi keeps a model when `provider/id` OR `id` matches; a negated glob is nearly
        // always true for one of the two, so `!…` selects (almost) everything.
        assert_eq!(keys("!*claude*").len(), pool().len());
        let pool = [model("a", "x"), model("b", "y")];
        let got: Vec<String> = scope("!*/*", &pool).iter().map(ModelInfo::key).collect();
        assert_eq!(got, ["a/x", "b/y"]);
    }

    #[test]
    fn scope_list_order_dedup_and_misses() {
        assert_eq!(
            keys(" zai/glm-4.5 , nope ,, zai/* "),
            ["zai/glm-4.5", "zai/glm-4.6"]
        );
        assert_eq!(keys(""), Vec::<String>::new());
        assert_eq!(keys("nope"), Vec::<String>::new());
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
        }
    }

    #[test]
    fn locale_order_matches_node() {
        // Observed: ["a_b","a-1","a-b","a.b","a1","a10","a9","ab","aB","Ab"].sort(localeCompare)
        let mut v = [
            "ab", "a9", "Ab", "a-b", "aB", "a10", "a.b", "a1", "a_b", "a-1",
        ];
        v.sort_by(|a, b| locale_cmp(a, b));
        assert_eq!(
            v,
            [
                "a_b", "a-1", "a-b", "a.b", "a1", "a10", "a9", "ab", "aB", "Ab"
            ]
        );
        // Observed descending: gpt-4o-mini, GPT-4o, gpt-4o, gpt-4.1, gpt-4
        let mut v = ["gpt-4o", "gpt-4o-mini", "GPT-4o", "gpt-4", "gpt-4.1"];
        v.sort_by(|a, b| locale_cmp(b, a));
        assert_eq!(v, ["gpt-4o-mini", "GPT-4o", "gpt-4o", "gpt-4.1", "gpt-4"]);
    }
}
