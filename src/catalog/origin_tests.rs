use std::collections::BTreeMap;

use super::*;

/// README's `models.json`, written the way Pi accepts it (BOM, comments, trailing commas),
/// plus a built-in provider routed through a proxy.
const MODELS_JSON: &str = "\u{feff}{
  // Zhipu first
  \"providers\": {
    \"zhipu\": {\"baseUrl\": \"https://open.bigmodel.cn/api/paas/v4\", \"api\": \"openai-completions\",
      \"apiKey\": \"$ZHIPU_API_KEY\",
      \"models\": [{\"id\": \"glm-4.6\"}, {\"id\": \"glm-4.5-air\"},]},
    \"dashscope\": {\"apiKey\": \"${DASHSCOPE_API_KEY}\", \"headers\": {\"X-Org\": \"$ORG_ID\"},
      \"models\": [{\"id\": \"qwen3-max\", \"headers\": {\"X-Trace\": \"$$literal\"}}]},
    \"deepseek-cn\": {\"apiKey\": \"$DEEPSEEK_API_KEY\", \"models\": [{\"id\": \"deepseek-chat\"}]},
    /* a proxy for Pi's own provider: its models stay built-in */
    \"deepseek\": {\"baseUrl\": \"http://127.0.0.1:9/v1\"},
    \"openai\": {\"apiKey\": \"sk-literal\"},
  },
}";

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn config() -> PiConfig {
    PiConfig::from_texts(
        Some(MODELS_JSON),
        Some("{\"anthropic\": {\"type\": \"api_key\", \"key\": \"k\"}}"),
    )
}

#[test]
fn models_json_is_read_as_pi_reads_it() {
    let c = config();
    assert!(!c.models_json_unreadable);
    let names: Vec<&str> = c.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names.len(),
        5,
        "every provider, comments and trailing commas notwithstanding: {names:?}"
    );
    let zhipu = c.provider("zhipu").unwrap();
    assert_eq!(zhipu.model_ids, ["glm-4.6", "glm-4.5-air"]);
    assert_eq!(zhipu.api_key.as_deref(), Some("$ZHIPU_API_KEY"));
    let dashscope = c.provider("dashscope").unwrap();
    assert_eq!(
        dashscope.headers,
        [
            ("header X-Org".to_string(), "$ORG_ID".to_string()),
            (
                "model qwen3-max header X-Trace".to_string(),
                "$$literal".to_string()
            ),
        ]
    );
    assert_eq!(c.auth_providers, ["anthropic"]);
    let broken = PiConfig::from_texts(Some("{\"providers\": "), None);
    assert!(broken.models_json_unreadable);
    assert!(broken.providers.is_empty());
    assert_eq!(PiConfig::from_texts(None, None), PiConfig::default());
}

#[test]
fn a_model_is_the_users_only_when_listed_under_its_provider() {
    let c = config();
    let e = env(&[("DEEPSEEK_API_KEY", "d")]);
    assert_eq!(c.origin("zhipu/glm-4.6", &e), Origin::ModelsJson);
    assert_eq!(
        c.origin("deepseek-cn/deepseek-chat", &e),
        Origin::ModelsJson
    );
    // Pi's own deepseek provider: listed in models.json for its proxy, its models are not.
    assert_eq!(
        c.origin("deepseek/deepseek-v4-pro", &e),
        Origin::BuiltIn(KeySource::EnvVar("DEEPSEEK_API_KEY".into()))
    );
    // The same id under another provider is not the user's.
    assert_eq!(
        c.origin("zai/glm-4.6", &env(&[("ZAI_API_KEY", "z")])),
        Origin::BuiltIn(KeySource::EnvVar("ZAI_API_KEY".into()))
    );
    // An id with a slash, on a gateway.
    assert_eq!(
        c.origin(
            "openrouter/z-ai/glm-4.6",
            &env(&[("OPENROUTER_API_KEY", "o")])
        ),
        Origin::BuiltIn(KeySource::EnvVar("OPENROUTER_API_KEY".into()))
    );
    // A prefix of a provider name is not that provider.
    assert!(matches!(c.origin("zhipu2/glm-4.6", &e), Origin::BuiltIn(_)));
}

#[test]
fn the_key_source_follows_pis_order() {
    let c = config();
    let none = env(&[]);
    // auth.json first, even with the variable set.
    assert_eq!(
        c.key_source("anthropic", &env(&[("ANTHROPIC_API_KEY", "a")])),
        KeySource::AuthJson
    );
    // Then the variable, the first of the provider's that is set and not empty.
    assert_eq!(
        c.key_source(
            "qwen-token-plan",
            &env(&[
                ("QWEN_TOKEN_PLAN_TEAM_API_KEY", ""),
                ("QWEN_TOKEN_PLAN_API_KEY", "q")
            ])
        ),
        KeySource::EnvVar("QWEN_TOKEN_PLAN_API_KEY".into())
    );
    assert_eq!(
        c.key_source("moonshotai-cn", &env(&[("MOONSHOT_API_KEY", "m")])),
        KeySource::EnvVar("MOONSHOT_API_KEY".into())
    );
    // Then an apiKey under the built-in provider's name in models.json.
    assert_eq!(
        c.key_source("openai", &none),
        KeySource::ModelsJsonApiKey("openai".into())
    );
    assert_eq!(
        c.key_source("openai", &env(&[("OPENAI_API_KEY", "o")])),
        KeySource::EnvVar("OPENAI_API_KEY".into())
    );
    // An empty variable is unset, as for Pi.
    assert_eq!(
        c.key_source("deepseek", &env(&[("DEEPSEEK_API_KEY", "")])),
        KeySource::Unknown
    );
    assert_eq!(
        c.key_source("some-oauth-provider", &none),
        KeySource::Unknown
    );
}

#[test]
fn the_table_has_the_providers_users_meet_each_once() {
    for p in [
        "zai",
        "deepseek",
        "openai",
        "anthropic",
        "google",
        "moonshotai",
        "moonshotai-cn",
        "kimi-coding",
        "minimax",
        "qwen-token-plan",
        "openrouter",
        "groq",
        "xai",
        "mistral",
    ] {
        assert_eq!(
            BUILT_IN_KEY_VARS.iter().filter(|(q, _)| *q == p).count(),
            1,
            "{p}"
        );
    }
    assert!(BUILT_IN_KEY_VARS.iter().all(|(_, vars)| !vars.is_empty()));
}

fn choice<'a>(start: &'a str, candidates: &'a [String]) -> StartChoice<'a> {
    StartChoice {
        start,
        candidates,
        model_flag: false,
        saved_default: None,
        scoped: false,
        provider_flag: None,
    }
}

fn keys(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn the_issue_21_night_gets_three_findings() {
    // README's models.json, DEEPSEEK_API_KEY exported, no --model: Pi starts on its own
    // deepseek model.
    let c = config();
    let e = env(&[("DEEPSEEK_API_KEY", "d")]);
    let candidates = keys(&[
        "deepseek/deepseek-v4-pro",
        "zhipu/glm-4.6",
        "dashscope/qwen3-max",
        "deepseek-cn/deepseek-chat",
        "deepseek/deepseek-flash",
    ]);
    let found = findings(&choice("deepseek/deepseek-v4-pro", &candidates), &c, &e);
    let codes: Vec<&str> = found.iter().map(Finding::code).collect();
    assert_eq!(
        codes,
        ["built_in_start", "built_in_candidates", "no_primary"]
    );
    let text: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(
        text[0],
        "the start model deepseek/deepseek-v4-pro is from Pi's built-in catalogue, not from your \
         models.json (provider deepseek was brought in by DEEPSEEK_API_KEY); name the primary \
         with --model"
    );
    assert_eq!(
        text[1],
        "2 of 5 candidates are from Pi's built-in catalogue, not from your models.json: \
         deepseek/deepseek-v4-pro, deepseek/deepseek-flash (brought in: provider deepseek by \
         DEEPSEEK_API_KEY); keep them out with --models 'zhipu/*,dashscope/*,deepseek-cn/*'"
    );
    assert_eq!(
        text[2],
        "no --model and no saved default chose the start model: deepseek/deepseek-v4-pro is the \
         model Pi picked itself; name the primary with --model (e.g. --model zhipu/glm-4.6)"
    );
}

#[test]
fn the_recipes_choice_gets_none() {
    let c = config();
    let e = env(&[("DEEPSEEK_API_KEY", "d")]);
    let candidates = keys(&["zhipu/glm-4.6", "dashscope/qwen3-max"]);
    let mut ch = choice("zhipu/glm-4.6", &candidates);
    ch.model_flag = true;
    ch.scoped = true;
    assert_eq!(findings(&ch, &c, &e), []);
    // A saved default that is the start model chose it too.
    let mut ch = choice("zhipu/glm-4.6", &candidates);
    ch.saved_default = Some("zhipu/glm-4.6");
    assert_eq!(findings(&ch, &c, &e), []);
    // One that is not (out of scope) did not.
    ch.saved_default = Some("dashscope/qwen3-max");
    ch.scoped = true;
    let found = findings(&ch, &c, &e);
    assert_eq!(found.len(), 1);
    assert!(
        found[0].to_string().contains(
            "zhipu/glm-4.6 is the first model --models selects; name the primary with --model"
        ),
        "{}",
        found[0]
    );
}

#[test]
fn long_lists_are_cut_and_unknown_sources_said_so() {
    let c = PiConfig::default();
    let candidates: Vec<String> = (0..9).map(|i| format!("x/m{i}")).collect();
    let mut ch = choice("x/m0", &candidates);
    ch.model_flag = true;
    let found = findings(&ch, &c, &env(&[]));
    assert_eq!(found.len(), 2);
    let text = found[1].to_string();
    assert!(text.starts_with("9 of 9 candidates"), "{text}");
    assert!(text.contains("x/m5, … (3 more)"), "{text}");
    assert!(
        text.contains("provider x by a credential Pi found (not one this runner can name)"),
        "{text}"
    );
    assert!(text.ends_with("keep them out with --models"), "{text}");
}

#[test]
fn unset_and_empty_references_are_found_without_reading_values() {
    let c = config();
    let found = unset_references(
        &c,
        &env(&[("DASHSCOPE_API_KEY", "q"), ("DEEPSEEK_API_KEY", "")]),
    );
    let text: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            "provider dashscope: header X-Org refers to $ORG_ID, which is not set here (cron \
             starts with an almost empty environment: source an env file)",
            "provider deepseek-cn: apiKey refers to $DEEPSEEK_API_KEY, which is empty here (cron \
             starts with an almost empty environment: source an env file)",
            "provider zhipu: apiKey refers to $ZHIPU_API_KEY, which is not set here (cron starts \
             with an almost empty environment: source an env file)",
        ]
    );
    // `$$literal` is an escape, a literal key refers to nothing.
    assert!(found.iter().all(|u| !u.field.contains("X-Trace")));
    let all = env(&[
        ("ZHIPU_API_KEY", "z"),
        ("DASHSCOPE_API_KEY", "q"),
        ("DEEPSEEK_API_KEY", "d"),
        ("ORG_ID", "o"),
    ]);
    assert_eq!(unset_references(&c, &all), []);
}

fn used(models: &[&str]) -> Vec<String> {
    models.iter().map(|m| (*m).to_string()).collect()
}

/// README's CI example before: no --model, no --models, DEEPSEEK_API_KEY exported; Pi starts
/// on its own deepseek model and fails over to another built-in one. Both are named, once each,
/// with the variable that brought them in; a model of models.json is not.
#[test]
fn built_in_models_nobody_chose_are_named_once() {
    let c = config();
    let e = env(&[("DEEPSEEK_API_KEY", "d")]);
    let named = Named {
        start: Some("deepseek/deepseek-v4-pro"),
        start_chosen: false,
        scoped: false,
    };
    let found = unchosen_built_ins(
        &used(&[
            "deepseek/deepseek-v4-pro",
            "deepseek/deepseek-v4-pro",
            "zhipu/glm-4.6",
            "deepseek/deepseek-chat",
        ]),
        &named,
        &c,
        &e,
    );
    let source = KeySource::EnvVar("DEEPSEEK_API_KEY".into());
    assert_eq!(
        found,
        [
            Unchosen {
                model: "deepseek/deepseek-v4-pro".into(),
                source: source.clone(),
                started: true,
            },
            Unchosen {
                model: "deepseek/deepseek-chat".into(),
                source,
                started: false,
            },
        ]
    );
    assert_eq!(found[0].code(), "built_in_start");
    assert_eq!(found[1].code(), "built_in_failover");
    assert_eq!(
        found[0].to_string(),
        "the run started on deepseek/deepseek-v4-pro, a model from Pi's built-in catalogue that \
         no --model, --models or saved default chose (provider deepseek was brought in by \
         DEEPSEEK_API_KEY); name the primary with --model and the backups with --models"
    );
    assert!(
        found[1]
            .to_string()
            .starts_with("the run failed over to deepseek/deepseek-chat, a model from Pi's"),
        "{}",
        found[1]
    );
}

/// A start the user chose (by --model, --provider or the saved default) is theirs even when
/// built-in, but a failover outside --models is not; with --models every model is theirs.
#[test]
fn what_the_user_named_is_not_warned_about() {
    let c = config();
    let e = env(&[("DEEPSEEK_API_KEY", "d")]);
    let models = used(&["deepseek/deepseek-v4-pro", "openai/gpt-5"]);
    let chosen = Named {
        start: Some("deepseek/deepseek-v4-pro"),
        start_chosen: true,
        scoped: false,
    };
    let found = unchosen_built_ins(&models, &chosen, &c, &e);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].model, "openai/gpt-5");
    assert_eq!(
        found[0].source,
        KeySource::ModelsJsonApiKey("openai".into())
    );
    let scoped = Named {
        scoped: true,
        ..chosen
    };
    assert!(unchosen_built_ins(&models, &scoped, &c, &e).is_empty());
    // The start was skipped (its breaker was open) and the first attempt went elsewhere: that
    // one is a failover.
    let skipped = Named {
        start: Some("zhipu/glm-4.6"),
        start_chosen: true,
        scoped: false,
    };
    let found = unchosen_built_ins(&used(&["deepseek/deepseek-v4-pro"]), &skipped, &c, &e);
    assert_eq!(found.len(), 1);
    assert!(!found[0].started);
    assert!(unchosen_built_ins(&used(&["zhipu/glm-4.6"]), &skipped, &c, &e).is_empty());
}
