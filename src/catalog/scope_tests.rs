use proptest::prelude::*;

use super::*;

/// The resolver as it was before the linear-time rewrite (recomputing lower-case forms per
/// comparison, a quadratic provider-prefix search), kept verbatim but for using
/// [`crate::glob::Glob`], as the oracle [`resolve_scope`] must agree with.
mod oracle {
    use std::cmp::Ordering;
    use std::collections::BTreeSet;

    use crate::catalog::ModelInfo;
    use crate::glob::Glob;

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
        let dated = b.len() >= 9
            && b[b.len() - 9] == b'-'
            && b[b.len() - 8..].iter().all(u8::is_ascii_digit);
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
}

fn model(provider: &str, id: &str) -> ModelInfo {
    ModelInfo {
        provider: provider.into(),
        id: id.into(),
        name: None,
        base_url: Some(format!("https://{provider}.example.com/v1")),
        reasoning: false,
        input: Some(vec!["text".into()]),
        context_window: Some(128_000),
        max_tokens: None,
    }
}

fn with(mut m: ModelInfo, f: impl FnOnce(&mut ModelInfo)) -> ModelInfo {
    f(&mut m);
    m
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
        .map(|m| m.key().into())
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
    let got: Vec<String> = scope("k2", &pool).iter().map(|m| m.key().into()).collect();
    assert_eq!(got, ["a/kimi-k2", "b/kimi-k2"]);
}

#[test]
fn scope_dated_ids_only_when_no_alias_matches() {
    assert_eq!(keys("20250929"), ["anthropic/claude-sonnet-4-5-20250929"]);
    let pool = [model("a", "m-20240101"), model("a", "m-20250101")];
    let got: Vec<String> = scope("m-", &pool).iter().map(|m| m.key().into()).collect();
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
        .map(|m| m.key().into())
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
    let got: Vec<String> = scope("!*/*", &pool)
        .iter()
        .map(|m| m.key().into())
        .collect();
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

#[test]
fn report_lists_patterns_that_selected_nothing_once_in_order() {
    let report = resolve_scope(
        " zai/glm-4.5 , glm-9 ,, zhipu/* , zai/* , glm-9, zai/glm-4.6 ",
        &pool(),
    );
    let keys: Vec<String> = report.models.iter().map(|m| m.key().into()).collect();
    assert_eq!(keys, ["zai/glm-4.5", "zai/glm-4.6"]);
    // `zai/glm-4.6` selected a model already in scope: not a miss.
    assert_eq!(report.unmatched, ["glm-9", "zhipu/*"]);
    assert_eq!(resolve_scope("", &pool()), ScopeReport::default());
    assert_eq!(resolve_scope("*", &[]).unmatched, ["*"]);
}

#[test]
fn report_models_are_what_scope_returns() {
    for patterns in ["sonnet,gpt-4o", "!*claude*", "zai/*:high, nope", "#x,,"] {
        assert_eq!(
            resolve_scope(patterns, &pool()).models,
            scope(patterns, &pool())
        );
    }
}

#[test]
fn overlong_pieces_select_nothing() {
    let at_cap = format!("sonnet:{}", "x".repeat(MAX_PATTERN_CHARS - 7));
    assert_eq!(keys(&at_cap), ["anthropic/claude-sonnet-4-5"]);
    let over = format!("sonnet:{}", "x".repeat(MAX_PATTERN_CHARS - 6));
    let report = resolve_scope(&format!("{over},haiku"), &pool());
    let keys: Vec<String> = report.models.iter().map(|m| m.key().into()).collect();
    assert_eq!(keys, ["anthropic/claude-haiku-4-5"]);
    assert_eq!(report.unmatched, [over]);
}

#[test]
fn many_colons_and_slashes_resolve_quickly() {
    // Each `:` is one more retry over the whole pool; each retry finds provider prefixes in
    // one pass (it was quadratic in the slashes per model).
    let providers: Vec<ModelInfo> = (0..200)
        .map(|i| model(&format!("p{i}"), &format!("m{i}")))
        .collect();
    for piece in [
        "a/:".repeat(MAX_PATTERN_CHARS / 3),
        format!("p1{}", "/".repeat(MAX_PATTERN_CHARS - 2)),
        format!("p1/{}", "x:".repeat(MAX_PATTERN_CHARS / 2 - 2)),
    ] {
        let report = resolve_scope(&piece, &providers);
        assert_eq!(report.models.len(), 0, "{piece}");
        assert_eq!(report.unmatched, [piece]);
    }
    // The empty text left after the last retry fuzzy-matches everything, as in Pi.
    let report = resolve_scope(&":".repeat(MAX_PATTERN_CHARS), &providers);
    let keys: Vec<String> = report.models.iter().map(|m| m.key().into()).collect();
    assert_eq!(keys, ["p99/m99"]);
}

/// Fragments that make patterns hit the generated pools often, in every resolver branch.
const PATTERN_PIECES: &[&str] = &[
    "a", "b", "zai", "ZAI", "glm", "-4", ".6", "4o", "gpt", "x/", "/", ":", ":high", ":off", " ",
    "*", "**", "?", "[", "]", "[a-z]", "!", "#", "{1..3}", ",", "-2025", "0101", "latest", "é",
];

const PROVIDERS: &[&str] = &["a", "ab", "zai", "ZAI", " zai", "x", "x/y", ""];
const IDS: &[&str] = &[
    "glm-4.6",
    "GLM-4.5",
    "gpt-4o",
    "gpt-4o-mini",
    "a/b",
    "x/glm-4.6",
    "m-20250101",
    "m-latest",
    "zai",
    "a:b",
    "m[1m]",
    "É",
];

fn models_strategy() -> impl Strategy<Value = Vec<ModelInfo>> {
    prop::collection::vec(
        (
            prop::sample::select(PROVIDERS),
            prop::sample::select(IDS),
            prop::option::of(prop::sample::select(&["GLM Four", "Sonnet", "a b"][..])),
        )
            .prop_map(|(p, id, name)| with(model(p, id), |m| m.name = name.map(str::to_string))),
        0..8,
    )
}

/// Up to 200 characters of glob syntax, separators, letters and characters whose case
/// mapping changes their length (`İ`), from a character list (fast to generate).
fn raw_text() -> impl Strategy<Value = String> {
    const CHARS: &[char] = &[
        '*', '?', '[', ']', '!', '^', '{', '}', ',', '.', '/', '\\', ':', ' ', '-', 'a', 'b', 'x',
        'z', 'g', 'l', 'm', '4', '6', '\u{e9}', '\u{130}',
    ];
    prop::collection::vec(prop::sample::select(CHARS), 0..200).prop_map(String::from_iter)
}

fn patterns_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PATTERN_PIECES), 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    #[test]
    fn agrees_with_the_old_resolver(patterns in patterns_strategy(), models in models_strategy()) {
        prop_assert_eq!(scope(&patterns, &models), oracle::scope(&patterns, &models));
    }

    #[test]
    fn report_is_consistent(patterns in patterns_strategy(), models in models_strategy()) {
        let report = resolve_scope(&patterns, &models);
        let mut keys = BTreeSet::new();
        for m in &report.models {
            prop_assert!(models.contains(m));
            prop_assert!(keys.insert((m.provider.clone(), m.id.clone())), "duplicate {:?}", m);
        }
        let pieces: Vec<&str> = patterns.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
        for piece in &pieces {
            let alone = resolve_scope(piece, &models);
            prop_assert_eq!(
                report.unmatched.iter().any(|u| u == piece),
                alone.models.is_empty(),
                "{:?}", piece
            );
        }
        prop_assert!(report.unmatched.iter().all(|u| pieces.contains(&u.as_str())));
    }

    #[test]
    fn never_panics_on_raw_input(
        patterns in raw_text(),
        models in models_strategy(),
    ) {
        let _ = resolve_scope(&patterns, &models);
    }
}

#[test]
fn a_pattern_keeps_the_thinking_level_it_names_for_the_models_it_selected() {
    let report = resolve_scope("zai/*:high, glm-4.6:low, sonnet:bogus", &pool());
    let level = |k: &str| report.levels.get(k).map(String::as_str);
    assert_eq!(level("zai/glm-4.5"), Some("high"));
    // Selected first by `zai/*:high`: a later pattern does not change its level.
    assert_eq!(level("zai/glm-4.6"), Some("high"));
    assert!(
        report.levels.keys().all(|k| k.starts_with("zai/")),
        "an invalid level names none: {:?}",
        report.levels
    );
    let report = resolve_scope("glm-4.5:low", &pool());
    assert_eq!(
        report.levels.get("zai/glm-4.5").map(String::as_str),
        Some("low")
    );
    assert!(resolve_scope("zai/*", &pool()).levels.is_empty());
}
