//! "Did you mean …?": the known names closest to a typo, for messages such as "unknown
//! provider 'zhipu'; known providers: …", "unknown model 'zai/glm-9'; closest: …" and
//! "did you mean --model?". Pure: no I/O; knows nothing of what the names are.
//!
//! Names are ranked by edit distance alone, compared case-insensitively: the optimal string
//! alignment distance (Levenshtein plus a swap of two adjacent characters as one edit), so
//! `deepsek` → `deepseek`, `qwen3-mx` → `qwen3-max` and `--modle` → `--model` are one edit
//! each, `glm-9` → `glm-4.6` three. There is no bonus for a shared prefix or substring: it
//! would reorder names the user did not mistype and still not make `zhipu` look like `zai`.
//! A name is offered only when at most half of the longer string needs editing
//! (2 × distance ≤ longer length): `glm-9`/`glm-4.6` (3 of 7) qualifies, `zhipu`/`zai`
//! (3 of 5) does not; a guess that far off is noise, and the caller can still list every
//! known name. Ties keep the order of `names`; a name given twice is offered once.
//!
//! The distance is `strsim`'s `osa_distance` (already built for clap's own suggestions); the
//! tests below hold it to the textbook definition.
//!
//! Bounded: both sides are cut to their first [`MAX_CHARS`] characters before comparing, so
//! one comparison costs at most [`MAX_CHARS`]² steps and three rows of memory.

use std::collections::BTreeSet;

/// Queries and names are compared on their first this-many characters.
pub const MAX_CHARS: usize = 128;

/// Up to `limit` entries of `names` closest to `query`, best first (see the module doc).
pub fn closest<'a>(query: &str, names: &[&'a str], limit: usize) -> Vec<&'a str> {
    let query = folded(query);
    let query_len = query.chars().count();
    let mut seen = BTreeSet::new();
    // (distance, position in `names`): sorting by it keeps ties in input order.
    let mut scored: Vec<(usize, usize)> = Vec::new();
    for (at, &name) in names.iter().enumerate() {
        if !seen.insert(name) {
            continue;
        }
        let name = folded(name);
        let name_len = name.chars().count();
        let longer = query_len.max(name_len);
        // The distance is at least the length difference: skip hopeless names unmeasured.
        if 2 * query_len.abs_diff(name_len) > longer {
            continue;
        }
        let d = strsim::osa_distance(&query, &name);
        if 2 * d <= longer {
            scored.push((d, at));
        }
    }
    scored.sort_unstable();
    scored
        .into_iter()
        .take(limit)
        .map(|(_, at)| names[at])
        .collect()
}

/// The `provider/id` keys closest to `query`: a query with a provider part is compared with
/// whole keys, a bare id with the ids (every provider serving a close id is offered).
pub fn closest_models<'a>(query: &str, keys: &[&'a str], limit: usize) -> Vec<&'a str> {
    if query.contains('/') {
        return closest(query, keys, limit);
    }
    let ids: Vec<&str> = keys
        .iter()
        .map(|k| k.split_once('/').map_or(*k, |(_, id)| id))
        .collect();
    let mut out = Vec::new();
    for id in closest(query, &ids, limit) {
        for (k, i) in keys.iter().zip(&ids) {
            if *i == id && !out.contains(k) && out.len() < limit {
                out.push(*k);
            }
        }
    }
    out
}

/// The first [`MAX_CHARS`] characters, each lower-cased one-to-one (a character whose lower
/// case is several, such as `İ`, stays as it is, so lengths are the user's).
fn folded(s: &str) -> String {
    s.chars()
        .take(MAX_CHARS)
        .map(|c| {
            let mut l = c.to_lowercase();
            match (l.next(), l.next()) {
                (Some(x), None) => x,
                _ => c,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn distance(a: &str, b: &str) -> usize {
        strsim::osa_distance(&folded(a), &folded(b))
    }

    fn chars(s: &str) -> Vec<char> {
        folded(s).chars().collect()
    }

    #[test]
    fn typos_find_their_names() {
        let models = [
            "glm-4.6",
            "glm-4.5",
            "qwen3-max",
            "qwen3-coder-plus",
            "deepseek-chat",
            "deepseek",
            "kimi-k2",
        ];
        assert_eq!(closest("glm-9", &models, 3), ["glm-4.6", "glm-4.5"]);
        assert_eq!(closest("qwen3-mx", &models, 3), ["qwen3-max"]);
        assert_eq!(
            closest("deepsek", &models, 3),
            ["deepseek", "deepseek-chat"]
        );
        assert_eq!(closest("DEEPSEEK-CHAT", &models, 1), ["deepseek-chat"]);
        let flags = ["--model", "--models", "--mode", "--json", "--jobs"];
        assert_eq!(
            closest("--modle", &flags, 5),
            ["--model", "--mode", "--models"]
        );
        assert_eq!(closest("--jsno", &flags, 5), ["--json", "--jobs"]);
    }

    #[test]
    fn far_off_names_are_not_offered() {
        let providers = ["zai", "openai", "anthropic", "dashscope", "moonshot"];
        assert_eq!(closest("zhipu", &providers, 5), Vec::<&str>::new());
        assert_eq!(closest("", &providers, 5), Vec::<&str>::new());
        assert_eq!(closest("", &["", "a"], 5), [""]);
    }

    #[test]
    fn distances_count_a_swap_as_one_edit() {
        assert_eq!(distance("modle", "model"), 1);
        assert_eq!(distance("ab", "ba"), 1);
        // Optimal string alignment, not full Damerau: no edit inside a swapped pair.
        assert_eq!(distance("ca", "abc"), 3);
        assert_eq!(distance("glm-9", "glm-4.6"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("Straße", "STRASSE"), 2);
        assert_eq!(distance("", "abc"), 3);
    }

    #[test]
    fn ties_keep_input_order_limits_apply_and_duplicates_collapse() {
        let names = ["ab", "ba", "ab", "abc", "a"];
        assert_eq!(closest("ab", &names, 10), ["ab", "ba", "abc", "a"]);
        assert_eq!(closest("ab", &names, 2), ["ab", "ba"]);
        assert_eq!(closest("ab", &names, 0), Vec::<&str>::new());
    }

    #[test]
    fn only_the_first_128_characters_count() {
        let long = "x".repeat(MAX_CHARS);
        let a = format!("{long}aaaa");
        let b = format!("{long}bbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
        assert_eq!(distance(&a, &b), 0);
        assert_eq!(closest(&a, &[b.as_str()], 1), [b.as_str()]);
        let huge = "y".repeat(1_000_000);
        assert_eq!(closest(&huge, &[huge.as_str()], 1), [huge.as_str()]);
    }

    /// The textbook full-table definition, for comparison.
    fn reference(a: &[char], b: &[char]) -> usize {
        let mut t = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for (i, row) in t.iter_mut().enumerate() {
            row[0] = i;
        }
        t[0] = (0..=b.len()).collect();
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                t[i][j] = (t[i - 1][j] + 1)
                    .min(t[i][j - 1] + 1)
                    .min(t[i - 1][j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    t[i][j] = t[i][j].min(t[i - 2][j - 2] + 1);
                }
            }
        }
        t[a.len()][b.len()]
    }

    fn word() -> impl Strategy<Value = String> {
        const CHARS: &[char] = &['a', 'b', 'A', 'B', '\u{e9}', '\u{c9}', '\u{df}', '.', '-'];
        prop::collection::vec(prop::sample::select(CHARS), 0..10).prop_map(String::from_iter)
    }

    /// Up to 135 characters (past [`MAX_CHARS`]) including ones whose case mapping is not
    /// one-to-one (`İ`, `ß`) or outside the BMP.
    fn long_text() -> impl Strategy<Value = String> {
        const CHARS: &[char] = &[
            'a',
            'b',
            'A',
            '-',
            '.',
            '/',
            ' ',
            '\u{130}',
            '\u{df}',
            '\u{3a3}',
            '\u{1F600}',
        ];
        prop::collection::vec(prop::sample::select(CHARS), 0..136).prop_map(String::from_iter)
    }

    proptest! {
        #![proptest_config(crate::fuzz::config(2000))]

        #[test]
        fn distance_matches_the_full_table(a in word(), b in word()) {
            let (fa, fb) = (chars(&a), chars(&b));
            let d = distance(&a, &b);
            prop_assert_eq!(d, reference(&fa, &fb));
            prop_assert_eq!(d, distance(&b, &a));
            prop_assert!(d <= fa.len().max(fb.len()));
        }

        #[test]
        fn closest_is_the_stable_top_of_the_qualifying_names(
            query in word(),
            names in prop::collection::vec(word(), 0..12),
            limit in 0usize..6,
        ) {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let got = closest(&query, &refs, limit);
            // What it should be: every distinct name within the cut, stably by distance.
            let q = chars(&query);
            let mut want: Vec<(usize, &str)> = Vec::new();
            for &n in &refs {
                let f = chars(n);
                let d = reference(&q, &f);
                if 2 * d <= q.len().max(f.len()) && !want.iter().any(|&(_, w)| w == n) {
                    want.push((d, n));
                }
            }
            want.sort_by_key(|&(d, _)| d);
            let want: Vec<&str> = want.into_iter().take(limit).map(|(_, n)| n).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn never_panics_and_returns_only_given_names(
            query in long_text(),
            names in prop::collection::vec(long_text(), 0..4),
            limit in 0usize..10,
        ) {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let got = closest(&query, &refs, limit);
            prop_assert!(got.len() <= limit);
            prop_assert!(got.iter().all(|g| refs.contains(g)));
        }
    }
}
