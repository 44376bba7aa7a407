//! Candidate hard filters, ranking and the model-family rule (SPEC §3). Pure: no I/O, no
//! clock (time comes in through [`Filter::now_ms`]). Which models are candidates at all
//! (`--models`) is decided before, in [`crate::catalog::scope`].
//!
//! # Ranking
//!
//! Hard filters first: not the current model; not tried this round; endpoint not isolated;
//! no open breaker, lease or disable on its model/provider/endpoint; its server (normalised
//! base URL) not down — no open endpoint breaker of another provider entry at the same base
//! URL, and not isolated this round by endpoint failures under any entry (several keys of one
//! provider are one entry each, sharing its server); provider not over its `--max-cost` cap;
//! accepts images when the request has images (unknown metadata excluded); a strictly larger
//! context window after an overflow (missing = 0); family not avoided. The survivors are
//! sorted by an ascending penalty, ties keeping pool order: same provider as the current model
//! +1000; different model id +100 (ids compare case-insensitively by their last `/` segment,
//! so a gateway's `z-ai/GLM-4.6` is the same model as `glm-4.6`); after a failure of the
//! current model's key (auth, quota, rate limit), another base URL than the current model's
//! +50 (the same model on another key of the same server first); different input set +20;
//! different reasoning flag +10; smaller context window +5; history min(80, Σ 4·log2(n+1))
//! over the total failures n of its model, provider and endpoint records.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::ModelInfo;
use crate::health::{Health, Keys, normalise_base_url};

/// Everything the hard filters look at besides the model itself.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    /// `provider/id` keys already tried this round.
    pub tried: &'a BTreeSet<String>,
    /// Endpoint keys isolated for the rest of the round.
    pub isolated_endpoints: &'a BTreeSet<String>,
    /// Servers (normalised base URLs) isolated for the rest of the round, under any provider.
    pub isolated_servers: &'a BTreeSet<String>,
    /// The current model's key just failed (auth, quota, rate limit): another key of the same
    /// server (another provider entry with its base URL) is the nearest replacement.
    pub same_server_first: bool,
    /// Families avoided after a content-policy failure (family → why).
    pub avoided_families: &'a std::collections::BTreeMap<String, String>,
    /// The request carries images: only models that declare `image` input qualify.
    pub needs_images: bool,
    /// Providers over their `--max-cost` cap: skipped like an open breaker, for the rest of
    /// the run.
    pub capped_providers: &'a BTreeSet<String>,
    /// After a context overflow: only windows strictly larger than this qualify.
    pub larger_context_than: Option<u64>,
    /// After an answer was cut at an output limit: models whose limit is known to be strictly
    /// larger than this go first (the others still qualify: a shorter answer may fit anyway).
    pub larger_output_than: Option<u64>,
    /// Estimated tokens of the request: a model whose declared window is smaller cannot take it.
    pub min_context: u64,
    pub health: &'a Health,
    pub now_ms: u64,
    /// Providers whose probe lease this process holds.
    pub own_leases: &'a [crate::health::ProbeTarget],
    /// Models tried after every other (`provider/id`): they could not follow this job's schema
    /// in an earlier job of the batch.
    pub last_resort: &'a BTreeSet<String>,
}

/// Healthy candidates for replacing `current`, best first.
pub fn rank(current: &ModelInfo, pool: &[ModelInfo], filter: &Filter<'_>) -> Vec<ModelInfo> {
    let current_key = current.key();
    let down = down_servers(pool, filter.health, filter.now_ms);
    let mut seen = BTreeSet::new();
    let mut scored: Vec<(f64, &ModelInfo)> = pool
        .iter()
        .filter(|m| seen.insert(m.key()))
        .filter(|m| admissible(m, &current_key, filter))
        .filter(|m| {
            server(m)
                .is_none_or(|u| !down.contains_key(&u) && !filter.isolated_servers.contains(&u))
        })
        .map(|m| (penalty(current, m, filter), m))
        .collect();
    // `sort_by` is stable: equal penalties keep pool order.
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    scored.into_iter().map(|(_, m)| m.clone()).collect()
}

fn admissible(m: &ModelInfo, current_key: &str, f: &Filter<'_>) -> bool {
    let key = m.key();
    key != current_key
        && !f.tried.contains(key.as_str())
        && !f.isolated_endpoints.contains(&Keys::of(m).endpoint)
        && !f.capped_providers.contains(&m.provider)
        && f.health.blocked(m, f.now_ms, f.own_leases).is_none()
        && (!f.needs_images || m.accepts_images())
        && f.larger_context_than
            .is_none_or(|c| m.context_window_or_zero() > c)
        && m.context_window.is_none_or(|w| w >= f.min_context)
        && !f.avoided_families.contains_key(&family(m))
}

/// The servers of `pool` with an open endpoint breaker (under one provider entry or another),
/// each with the key of that breaker: every entry at such a server is down.
pub fn down_servers(pool: &[ModelInfo], health: &Health, now_ms: u64) -> BTreeMap<String, String> {
    let mut down = BTreeMap::new();
    for m in pool {
        let endpoint = Keys::of(m).endpoint;
        if let Some(u) = server(m)
            && !down.contains_key(&u)
            && health
                .endpoints
                .get(&endpoint)
                .is_some_and(|r| r.cooling(now_ms))
        {
            down.insert(u, endpoint);
        }
    }
    down
}

/// The normalised base URL of `m`, when it has one: the server its requests go to.
pub fn server(m: &ModelInfo) -> Option<String> {
    m.base_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(normalise_base_url)
}

/// Lower is better; see the module doc.
fn penalty(current: &ModelInfo, m: &ModelInfo, f: &Filter<'_>) -> f64 {
    let health = f.health;
    let mut p = 0.0;
    if f.last_resort.contains(m.key().as_str()) {
        // After every other preference: they answered, but not as this job needs.
        p += 100_000.0;
    }
    if let Some(limit) = f.larger_output_than
        && m.max_tokens.is_none_or(|t| t <= limit)
    {
        // Before every other preference: the same cut is the likeliest outcome otherwise.
        p += 10_000.0;
    }
    if m.provider == current.provider {
        p += 1000.0;
    }
    if !same_model_id(&m.id, &current.id) {
        p += 100.0;
    }
    if f.same_server_first && (server(m).is_none() || server(m) != server(current)) {
        p += 50.0;
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
            max_tokens: None,
        }
    }

    fn with(mut m: ModelInfo, f: impl FnOnce(&mut ModelInfo)) -> ModelInfo {
        f(&mut m);
        m
    }

    struct TestRound {
        tried: BTreeSet<String>,
        isolated: BTreeSet<String>,
        avoided: std::collections::BTreeMap<String, String>,
        health: Health,
        needs_images: bool,
        larger_context_than: Option<u64>,
        larger_output_than: Option<u64>,
        capped: BTreeSet<String>,
        last_resort: BTreeSet<String>,
    }

    impl TestRound {
        fn new() -> TestRound {
            TestRound {
                tried: BTreeSet::new(),
                isolated: BTreeSet::new(),
                avoided: std::collections::BTreeMap::new(),
                health: Health::default(),
                needs_images: false,
                larger_context_than: None,
                larger_output_than: None,
                capped: BTreeSet::new(),
                last_resort: BTreeSet::new(),
            }
        }

        fn rank(&self, current: &ModelInfo, pool: &[ModelInfo]) -> Vec<String> {
            self.rank_with(current, pool, &BTreeSet::new(), false)
        }

        fn rank_with(
            &self,
            current: &ModelInfo,
            pool: &[ModelInfo],
            isolated_servers: &BTreeSet<String>,
            same_server_first: bool,
        ) -> Vec<String> {
            let filter = Filter {
                tried: &self.tried,
                isolated_endpoints: &self.isolated,
                isolated_servers,
                same_server_first,
                avoided_families: &self.avoided,
                needs_images: self.needs_images,
                capped_providers: &self.capped,
                larger_context_than: self.larger_context_than,
                larger_output_than: self.larger_output_than,
                min_context: 0,
                health: &self.health,
                now_ms: 1_000,
                own_leases: &[],
                last_resort: &self.last_resort,
            };
            rank(current, pool, &filter)
                .iter()
                .map(|m| m.key().into())
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
            TestRound::new().rank(&current, &pool),
            ["c/glm-4.6", "b/qwen3", "a/glm-4.5"]
        );
    }

    /// Issue 24 item 7: several keys of one provider are one provider entry each with the same
    /// base URL. After a failure of the key, the same model on the other key comes first (even
    /// before the same model elsewhere); an open endpoint breaker, or an isolation, of the
    /// shared server leaves out every entry at it.
    #[test]
    fn another_key_of_the_same_server_first_and_a_down_server_for_every_key() {
        let at = |p: &str, id: &str, url: &str| ModelInfo {
            base_url: Some(url.into()),
            ..model(p, id)
        };
        let zai = "https://api.z.ai/api/coding/paas/v4";
        let current = at("zai", "glm-4.6", zai);
        let pool = [
            at("openrouter", "z-ai/glm-4.6", "https://openrouter.ai/api/v1"),
            at("zai-2", "glm-4.5", zai),
            at("zai-2", "glm-4.6", &format!("{zai}/")),
            at("deepseek", "deepseek-chat", "https://api.deepseek.com"),
        ];
        let r = TestRound::new();
        let empty = BTreeSet::new();
        assert_eq!(
            r.rank_with(&current, &pool, &empty, true),
            [
                "zai-2/glm-4.6",
                "openrouter/z-ai/glm-4.6",
                "zai-2/glm-4.5",
                "deepseek/deepseek-chat"
            ]
        );
        // Without a key failure, ties keep the pool order as before.
        assert_eq!(
            r.rank_with(&current, &pool, &empty, false)[..2],
            ["openrouter/z-ai/glm-4.6", "zai-2/glm-4.6"]
        );
        let isolated: BTreeSet<String> = [normalise_base_url(zai)].into();
        assert_eq!(
            r.rank_with(&current, &pool, &isolated, false),
            ["openrouter/z-ai/glm-4.6", "deepseek/deepseek-chat"]
        );
        // zai's endpoint breaker is open: zai-2 at the same server is left out too.
        let mut r = TestRound::new();
        r.fail(
            &Keys::of(&current).endpoint,
            Scope::Endpoint,
            FailureClass::Endpoint,
            1,
        );
        let mut pool = pool.to_vec();
        pool.push(current.clone());
        assert_eq!(
            r.rank_with(&current, &pool, &empty, false),
            ["openrouter/z-ai/glm-4.6", "deepseek/deepseek-chat"]
        );
        let down = down_servers(&pool, &r.health, 1_000);
        assert_eq!(
            down.get(&normalise_base_url(zai)).map(String::as_str),
            Some("zai@https://api.z.ai/api/coding/paas/v4")
        );
    }

    #[test]
    fn same_model_id_ignores_case_and_vendor_prefix() {
        let current = model("a", "GLM-4.6");
        let pool = [model("b", "qwen3"), model("c", "z-ai/glm-4.6")];
        assert_eq!(
            TestRound::new().rank(&current, &pool),
            ["c/z-ai/glm-4.6", "b/qwen3"]
        );
    }

    #[test]
    fn open_provider_breaker_is_skipped() {
        let current = model("a", "m");
        let pool = [model("b", "m"), model("c", "m")];
        let mut r = TestRound::new();
        r.fail("b", Scope::Provider, FailureClass::Quota, 1);
        assert_eq!(r.rank(&current, &pool), ["c/m"]);
    }

    /// A provider over its `--max-cost` cap is skipped like an open provider breaker: the
    /// same model elsewhere comes first, then a sibling on an uncapped provider.
    #[test]
    fn a_provider_over_its_spend_cap_is_skipped() {
        let mut r = TestRound::new();
        let pool = [
            model("a", "m"),
            model("b", "m"),
            model("b", "n"),
            model("c", "m"),
        ];
        assert_eq!(r.rank(&pool[0], &pool), ["b/m", "c/m", "b/n"]);
        r.capped.insert("b".into());
        assert_eq!(r.rank(&pool[0], &pool), ["c/m"]);
        r.capped.insert("c".into());
        assert!(r.rank(&pool[0], &pool).is_empty());
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
        let mut r = TestRound::new();
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
        let mut r = TestRound::new();
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
        let mut r = TestRound::new();
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
        let mut r = TestRound::new();
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
        let mut r = TestRound::new();
        r.isolated.insert(Keys::of(&current).endpoint);
        assert_eq!(r.rank(&current, &pool), ["a/m3"]);
    }

    #[test]
    fn same_base_url_on_two_providers_is_two_endpoints() {
        let url = "https://shared.example.com/v1";
        let current = with(model("a", "m"), |m| m.base_url = Some(url.into()));
        let other = with(model("b", "m"), |m| m.base_url = Some(url.into()));
        assert_ne!(Keys::of(&current).endpoint, Keys::of(&other).endpoint);
        let mut r = TestRound::new();
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
        let mut r = TestRound::new();
        assert_eq!(
            r.rank(&current, &pool),
            ["c/zai-org/GLM-4.6", "b/GLM-4.5", "d/qwen3-coder"]
        );
        r.avoided.insert("glm".into(), String::new());
        assert_eq!(r.rank(&current, &pool), ["d/qwen3-coder"]);
    }

    #[test]
    fn history_penalty_orders_otherwise_equal_candidates() {
        let current = model("a", "m");
        let pool = [model("b", "m"), model("c", "m"), model("d", "m")];
        let mut r = TestRound::new();
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
        let mut r = TestRound::new();
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
            TestRound::new().rank(&current, &pool),
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

    /// After a cut answer, a model whose output limit is known to be larger goes first, before
    /// even the same model id elsewhere; the others still qualify (issue 29).
    #[test]
    fn a_larger_output_limit_goes_first_after_a_truncation() {
        let current = with(model("a", "glm-4.6"), |m| m.max_tokens = Some(4096));
        let pool = vec![
            current.clone(),
            with(model("b", "glm-4.6"), |m| m.max_tokens = Some(4096)),
            with(model("c", "other"), |m| m.max_tokens = None),
            with(model("d", "big"), |m| m.max_tokens = Some(32_000)),
        ];
        let mut r = TestRound::new();
        assert_eq!(r.rank(&current, &pool), ["b/glm-4.6", "c/other", "d/big"]);
        r.larger_output_than = Some(4096);
        assert_eq!(r.rank(&current, &pool), ["d/big", "b/glm-4.6", "c/other"]);
        // An unknown limit of the cut model (0): any known limit is larger.
        r.larger_output_than = Some(0);
        assert_eq!(r.rank(&current, &pool), ["b/glm-4.6", "d/big", "c/other"]);
    }

    /// A model that could not follow this job's schema earlier in the batch is tried after
    /// every other, even the one a truncation would put last (issue 33).
    #[test]
    fn a_model_that_failed_the_schema_is_tried_last() {
        let current = model("a", "glm-4.6");
        let pool = vec![
            current.clone(),
            model("b", "glm-4.6"),
            model("c", "other"),
            with(model("d", "big"), |m| m.max_tokens = Some(32_000)),
        ];
        let mut r = TestRound::new();
        r.last_resort.insert("b/glm-4.6".into());
        assert_eq!(r.rank(&current, &pool), ["c/other", "d/big", "b/glm-4.6"]);
        r.larger_output_than = Some(4096);
        assert_eq!(r.rank(&current, &pool), ["d/big", "c/other", "b/glm-4.6"]);
    }
}
