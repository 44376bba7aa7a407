//! Pi's `--models` scope: which of the available models a comma-separated list of patterns
//! selects, and which patterns selected nothing. Pure: no I/O; depends on [`crate::catalog`]
//! for the models and [`crate::glob`] for glob patterns, on nothing in `failover`.
//!
//! # Semantics
//!
//! [`scope`] resolves `--models` exactly as Pi does (read in Pi's
//! `dist/core/model-resolver.js`, `resolveModelScopeFromModels`, and `dist/cli/args.js`;
//! behaviour of Pi 1.6.0, differences of 0.84.4 noted):
//!
//! - The value is split on `,`; each piece is trimmed; empty pieces are dropped.
//! - A pattern containing `*`, `?` or `[` is a **glob**. An optional `:<level>` suffix naming a
//!   thinking level (`off minimal low medium high xhigh max`) is cut off first. If the rest is
//!   an exact reference (see below) that model is taken; otherwise every model whose
//!   `provider/id` **or** bare `id` matches the glob, case-insensitively, with minimatch rules
//!   (see [`crate::glob`]: `*` and `?` never cross `/`, `**` spans segments, classes, escapes,
//!   the leading-dot rule, `{1..3}` sequences, `#` comments). A leading `!` negates the glob —
//!   tested against both forms, so `!x*` keeps nearly every model, exactly as in Pi.
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
//! - A pattern that matches nothing selects nothing (Pi prints a warning and goes on);
//!   [`resolve_scope`] reports it so the caller can say so too.
//! - Result order: pattern order, then pool order; duplicates dropped. A valid thinking level
//!   cut off a pattern is kept for the models that pattern selected ([`ScopeReport::levels`]):
//!   Pi starts a run without `--model` at the first scoped model's level.
//!
//! Verified by running Pi 1.6.0's own resolver and [`scope`] on the same pools and ~110
//! patterns: identical results. Pi 0.84.4 differs in three corners: an id present on several
//! providers falls through to fuzzy matching and picks one model (for `gpt-4o` on two
//! providers it picks `gpt-4o-mini`), `provider/fuzzy-text` does not fuzzy-match inside the
//! provider, and an empty piece (`a,,b`) is not dropped (it fuzzy-matches some model).
//!
//! # Limits
//!
//! Patterns are user input. A piece longer than [`MAX_PATTERN_CHARS`] characters selects
//! nothing (and is reported unmatched): each `:` retry re-reads the piece, so an unbounded
//! piece would cost quadratic time. Lower-cased ids and names are computed once per call and
//! the `/` positions once per retry, so a retry costs O(piece × distinct providers + total
//! length of ids and names); a 1,000-character piece of `x:` retries against 200 models
//! takes ~0.13 s in a debug build (6.4 s before). Globs carry their own caps (see
//! [`crate::glob`]).

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::catalog::ModelInfo;
use crate::glob::{self, Glob};

/// A piece of `--models` longer than this (in characters) selects nothing.
pub const MAX_PATTERN_CHARS: usize = glob::MAX_PATTERN_CHARS;

/// What `--models` selected, and what it failed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeReport {
    /// The selected models, in Pi's order (see the module doc).
    pub models: Vec<ModelInfo>,
    /// The trimmed patterns, as written, that selected no model at all, in order, each once.
    /// A pattern whose models were all selected by earlier patterns is not listed.
    pub unmatched: Vec<String>,
    /// `provider/id` → the thinking level its (first) pattern named (`glm-*:high`).
    pub levels: std::collections::BTreeMap<String, String>,
}

/// Pi's `--models` scope: the subset of `available` the comma-separated patterns select, in
/// Pi's order (see the module doc).
pub fn scope(patterns: &str, available: &[ModelInfo]) -> Vec<ModelInfo> {
    resolve_scope(patterns, available).models
}

/// [`scope`], plus the patterns that selected nothing (typos, usually).
pub fn resolve_scope(patterns: &str, available: &[ModelInfo]) -> ScopeReport {
    let pool = Pool::new(available);
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut report = ScopeReport::default();
    for pattern in patterns.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (found, level) = if pattern.chars().nth(MAX_PATTERN_CHARS).is_some() {
            (Vec::new(), None)
        } else {
            resolve_pattern(pattern, &pool)
        };
        if found.is_empty() && !report.unmatched.iter().any(|u| u == pattern) {
            report.unmatched.push(pattern.to_string());
        }
        for i in found {
            let m = &available[i];
            if seen.insert((m.provider.as_str(), m.id.as_str())) {
                if let Some(level) = level {
                    report.levels.insert(m.key().into(), level.to_string());
                }
                report.models.push(m.clone());
            }
        }
    }
    report
}

const THINKING_LEVELS: &[&str] = &["off", "minimal", "low", "medium", "high", "xhigh", "max"];

/// The models with what every pattern compares against, lower-cased once per call instead of
/// once per pattern, model and `:` retry.
struct Pool<'a> {
    models: &'a [ModelInfo],
    ids: Vec<String>,
    names: Vec<Option<String>>,
    /// Distinct provider names, in pool order, with their trimmed lower-case form.
    providers: Vec<(&'a str, String)>,
}

impl<'a> Pool<'a> {
    fn new(models: &'a [ModelInfo]) -> Pool<'a> {
        let mut distinct = BTreeSet::new();
        Pool {
            models,
            ids: models.iter().map(|m| m.id.to_lowercase()).collect(),
            names: models
                .iter()
                .map(|m| m.name.as_ref().map(|n| n.to_lowercase()))
                .collect(),
            providers: models
                .iter()
                .filter(|m| distinct.insert(m.provider.as_str()))
                .map(|m| (m.provider.as_str(), m.provider.trim().to_lowercase()))
                .collect(),
        }
    }

    fn indices(&self) -> std::ops::Range<usize> {
        0..self.models.len()
    }
}

/// Outcome of resolving one reference, as indices into the pool.
enum Matched {
    One(usize),
    /// The same id on several providers: all of them.
    Several(Vec<usize>),
}

impl Matched {
    fn into_vec(self) -> Vec<usize> {
        match self {
            Matched::One(i) => vec![i],
            Matched::Several(v) => v,
        }
    }
}

/// The models one pattern selects, with the thinking level it names (if valid).
fn resolve_pattern<'p>(pattern: &'p str, pool: &Pool<'_>) -> (Vec<usize>, Option<&'p str>) {
    if pattern.contains(['*', '?', '[']) {
        let (base, level) = match pattern.rsplit_once(':') {
            Some((base, level)) if THINKING_LEVELS.contains(&level) => (base, Some(level)),
            _ => (pattern, None),
        };
        // An id may itself contain glob characters (`model[1m]`): exact references win.
        if let Some(found) = select_reference(base.trim(), pool, false) {
            return (found.into_vec(), level);
        }
        let glob = Glob::new(base);
        let found = pool
            .indices()
            .filter(|&i| {
                let m = &pool.models[i];
                glob.matches(&format!("{}/{}", m.provider, m.id)) || glob.matches(&m.id)
            })
            .collect();
        return (found, level);
    }
    match resolve_text(pattern, pool) {
        Some((found, level)) => (found.into_vec(), level),
        None => (Vec::new(), None),
    }
}

/// Exact reference, then fuzzy match, then the same again without a `:suffix`. The level is
/// the outermost suffix cut off, when it names a thinking level (Pi ignores an invalid one).
fn resolve_text<'p>(mut text: &'p str, pool: &Pool<'_>) -> Option<(Matched, Option<&'p str>)> {
    let all: Vec<usize> = pool.indices().collect();
    // Only the outermost suffix can be the level: `cut` says it was looked at already.
    let mut level: Option<&'p str> = None;
    let mut cut = false;
    loop {
        if let Some(found) = select_reference(text, pool, true) {
            return Some((found, level));
        }
        if let Some(found) = select_fuzzy(&fuzzy_matches(text, &all, pool), pool.models) {
            return Some((found, level));
        }
        let (rest, suffix) = text.rsplit_once(':')?;
        if !std::mem::replace(&mut cut, true) {
            level = THINKING_LEVELS.contains(&suffix).then_some(suffix);
        }
        text = rest;
    }
}

/// `id` (case-insensitive) or `provider/id`; with `fuzzy`, `provider/text` may fuzzy-match
/// inside the provider. The named provider wins over the same text as a raw id elsewhere.
fn select_reference(text: &str, pool: &Pool<'_>, fuzzy: bool) -> Option<Matched> {
    if text.is_empty() {
        return None;
    }
    let models = pool.models;
    let lower = text.to_lowercase();
    let raw: Vec<usize> = pool.indices().filter(|&i| pool.ids[i] == lower).collect();
    let named = split_provider_prefix(text, pool).and_then(|(provider, model_text)| {
        let own: Vec<usize> = pool
            .indices()
            .filter(|&i| models[i].provider == provider)
            .collect();
        let model_lower = model_text.to_lowercase();
        own.iter()
            .copied()
            .find(|&i| pool.ids[i] == model_lower)
            .or_else(|| {
                raw.iter()
                    .copied()
                    .find(|&i| models[i].provider == provider)
            })
            .or_else(|| {
                if fuzzy {
                    best_fuzzy(&fuzzy_matches(model_text, &own, pool), models)
                } else {
                    None
                }
            })
    });
    if let Some(i) = named {
        return Some(Matched::One(i));
    }
    match raw.as_slice() {
        [] => None,
        [only] => Some(Matched::One(*only)),
        _ if single_provider(&raw, models) => Some(Matched::One(raw[0])),
        _ => Some(Matched::Several(raw)),
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
/// A provider of n characters is looked for before the first `/` at character n or later;
/// among providers of equal length the first in pool order wins.
fn split_provider_prefix<'t, 'a>(text: &'t str, pool: &Pool<'a>) -> Option<(&'a str, &'t str)> {
    // (characters before it, byte offset) of every `/`, ascending.
    let mut slashes = Vec::new();
    for (chars_before, (byte, c)) in text.char_indices().enumerate() {
        if c == '/' {
            slashes.push((chars_before, byte));
        }
    }
    let mut best: Option<(&'a str, &'t str)> = None;
    for (provider, prefix) in &pool.providers {
        if prefix.is_empty()
            || best.is_some_and(|(p, _)| p.chars().count() >= provider.chars().count())
        {
            continue;
        }
        let want = prefix.chars().count();
        let Some(&(_, slash)) = slashes.get(slashes.partition_point(|&(n, _)| n < want)) else {
            continue;
        };
        if text[..slash].trim().to_lowercase() != *prefix {
            continue;
        }
        let model_text = text[slash + 1..].trim();
        if !model_text.is_empty() {
            best = Some((provider, model_text));
        }
    }
    best
}

/// Models (among `within`) whose id or name contains `text`, case-insensitively.
fn fuzzy_matches(text: &str, within: &[usize], pool: &Pool<'_>) -> Vec<usize> {
    let needle = text.to_lowercase();
    // The length check spares building a searcher for a needle that cannot fit.
    let contains = |hay: &str| hay.len() >= needle.len() && hay.contains(&needle);
    within
        .iter()
        .copied()
        .filter(|&i| contains(&pool.ids[i]) || pool.names[i].as_deref().is_some_and(contains))
        .collect()
}

fn select_fuzzy(matches: &[usize], models: &[ModelInfo]) -> Option<Matched> {
    let best = best_fuzzy(matches, models)?;
    let tied: Vec<usize> = matches
        .iter()
        .copied()
        .filter(|&i| models[i].id == models[best].id)
        .collect();
    if single_provider(&tied, models) {
        Some(Matched::One(best))
    } else {
        Some(Matched::Several(tied))
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

#[cfg(test)]
#[path = "scope_tests.rs"]
mod tests;
