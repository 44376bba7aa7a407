//! Where Pi's models come from — the user's `models.json`, or Pi's built-in catalogue — and
//! what made a built-in provider usable, so `--explain` and `--doctor` can say when a run would
//! start on (or fail over to) a model the user never configured, and when a key in
//! `models.json` refers to a variable this environment lacks (cron's, typically). Pure: it is
//! handed the texts of `models.json` and `auth.json` and a variable lookup (`settings` reads
//! them); it prints nothing.
//!
//! # The rules (read in Pi 0.84.4 and 1.6.0)
//!
//! - A model is **from models.json** when `models.json` has its provider and lists its id under
//!   that provider's `models`. Anything else Pi offers is **built-in**: Pi ships providers of
//!   its own (`zai`, `deepseek`, `openai`, …) and offers all of a provider's models once that
//!   provider has a key. A `models.json` entry under a built-in provider's name that only
//!   changes its `baseUrl` or gives it an `apiKey` keeps its built-in models built-in.
//! - A built-in provider gets its key from `auth.json` (an entry under its name), from its
//!   environment variable ([`BUILT_IN_KEY_VARS`], Pi's `getApiKeyEnvVars` in pi-ai's
//!   `env-api-keys.js`; the first one set and not empty), or from an `apiKey` under its name in
//!   `models.json`; [`KeySource`] names the first of these that applies, in that order (Pi's
//!   own order: `auth.json` before the environment before `models.json`'s fallback).
//! - A `models.json` value refers to variables as `$NAME` or `${NAME}` (`$$` and `$!` escape);
//!   Pi treats a value whose variable is unset **or empty** as missing, and a provider with a
//!   missing `apiKey` has no usable model ([`unset_references`]).
//!
//! Model keys are `provider/id`; a built-in model's provider is the part before the first `/`
//! (ids may contain `/`, provider names do not).

use std::fmt;

use serde_json::Value;

/// The environment variables that give Pi's built-in providers their API keys, for the
/// providers this runner's users meet, in the order Pi tries them. Checked against both
/// supported Pi versions by a test that reads Pi's own `env-api-keys.js`. The Qwen Token Plan
/// lists are the union of both versions: Pi 1.6.0 tries a per-plan variable before the one
/// 0.84.4 reads (and added `qwen-token-plan-individual-cn`).
pub const BUILT_IN_KEY_VARS: &[(&str, &[&str])] = &[
    ("zai", &["ZAI_API_KEY"]),
    ("zai-coding-cn", &["ZAI_CODING_CN_API_KEY"]),
    ("deepseek", &["DEEPSEEK_API_KEY"]),
    (
        "qwen-token-plan",
        &["QWEN_TOKEN_PLAN_TEAM_API_KEY", "QWEN_TOKEN_PLAN_API_KEY"],
    ),
    (
        "qwen-token-plan-cn",
        &[
            "QWEN_TOKEN_PLAN_TEAM_CN_API_KEY",
            "QWEN_TOKEN_PLAN_CN_API_KEY",
        ],
    ),
    (
        "qwen-token-plan-individual",
        &[
            "QWEN_TOKEN_PLAN_INDIVIDUAL_API_KEY",
            "QWEN_TOKEN_PLAN_API_KEY",
        ],
    ),
    (
        "qwen-token-plan-individual-cn",
        &[
            "QWEN_TOKEN_PLAN_INDIVIDUAL_CN_API_KEY",
            "QWEN_TOKEN_PLAN_CN_API_KEY",
        ],
    ),
    ("moonshotai", &["MOONSHOT_API_KEY"]),
    ("moonshotai-cn", &["MOONSHOT_API_KEY"]),
    ("kimi-coding", &["KIMI_API_KEY"]),
    ("minimax", &["MINIMAX_API_KEY"]),
    ("minimax-cn", &["MINIMAX_CN_API_KEY"]),
    ("openai", &["OPENAI_API_KEY"]),
    (
        "anthropic",
        &[
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_OAUTH_TOKEN",
            "ANTHROPIC_API_KEY",
        ],
    ),
    ("google", &["GEMINI_API_KEY"]),
    ("google-vertex", &["GOOGLE_CLOUD_API_KEY"]),
    ("openrouter", &["OPENROUTER_API_KEY"]),
    ("groq", &["GROQ_API_KEY"]),
    ("xai", &["XAI_API_KEY"]),
    ("mistral", &["MISTRAL_API_KEY"]),
    ("github-copilot", &["COPILOT_GITHUB_TOKEN"]),
    ("huggingface", &["HF_TOKEN"]),
];

/// The providers of `models.json` and what each lists, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserProvider {
    pub name: String,
    /// The ids under `models`.
    pub model_ids: Vec<String>,
    /// `apiKey`, as written (`"$ZHIPU_API_KEY"`, a literal, `"!command"`).
    pub api_key: Option<String>,
    /// Header values, as written, with where they are (`header X-Key`, `model m header X-Key`).
    pub headers: Vec<(String, String)>,
}

/// What `--explain` and `--doctor` know of Pi's config files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PiConfig {
    /// `models.json`'s providers, by name (serde_json's maps are sorted); empty when there is no
    /// such file.
    pub providers: Vec<UserProvider>,
    /// `models.json` exists but is not JSON Pi would accept (its providers are unknown).
    pub models_json_unreadable: bool,
    /// The providers `auth.json` holds a credential for.
    pub auth_providers: Vec<String>,
}

impl PiConfig {
    /// From the texts of `models.json` and `auth.json` (`None`: no such file).
    pub fn from_texts(models_json: Option<&str>, auth_json: Option<&str>) -> PiConfig {
        let mut config = PiConfig::default();
        if let Some(text) = models_json {
            match crate::redact::parse_like_pi(text) {
                Some(root) => config.providers = providers_of(&root),
                None => config.models_json_unreadable = true,
            }
        }
        if let Some(Value::Object(entries)) = auth_json.and_then(crate::redact::parse_like_pi) {
            config.auth_providers = entries.keys().cloned().collect();
        }
        config
    }

    fn provider(&self, name: &str) -> Option<&UserProvider> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// Where the model `key` (`provider/id`) comes from.
    pub fn origin(&self, key: &str, env: &dyn Fn(&str) -> Option<String>) -> Origin {
        let listed = self.providers.iter().any(|p| {
            key.strip_prefix(p.name.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|id| p.model_ids.iter().any(|m| m == id))
        });
        if listed {
            return Origin::ModelsJson;
        }
        let provider = super::provider_of(key);
        Origin::BuiltIn(self.key_source(provider, env))
    }

    /// What gave the built-in `provider` a key (see the module doc for the order).
    pub fn key_source(&self, provider: &str, env: &dyn Fn(&str) -> Option<String>) -> KeySource {
        if self.auth_providers.iter().any(|p| p == provider) {
            return KeySource::AuthJson;
        }
        if let Some(var) = BUILT_IN_KEY_VARS
            .iter()
            .find(|(p, _)| *p == provider)
            .and_then(|(_, vars)| {
                vars.iter()
                    .find(|name| env(name).is_some_and(|v| !v.is_empty()))
            })
        {
            return KeySource::EnvVar((*var).to_string());
        }
        if self.provider(provider).is_some_and(|p| p.api_key.is_some()) {
            return KeySource::ModelsJsonApiKey(provider.to_string());
        }
        KeySource::Unknown
    }
}

fn providers_of(root: &Value) -> Vec<UserProvider> {
    let Some(providers) = root.get("providers").and_then(Value::as_object) else {
        return Vec::new();
    };
    providers
        .iter()
        .map(|(name, entry)| {
            let models: Vec<&Value> = entry
                .get("models")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let mut headers = header_values(entry.get("headers"), "header");
            for m in &models {
                let id = m.get("id").and_then(Value::as_str).unwrap_or("?");
                headers.extend(header_values(
                    m.get("headers"),
                    &format!("model {id} header"),
                ));
            }
            UserProvider {
                name: name.clone(),
                model_ids: models
                    .iter()
                    .filter_map(|m| m.get("id").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect(),
                api_key: entry
                    .get("apiKey")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                headers,
            }
        })
        .collect()
}

fn header_values(headers: Option<&Value>, prefix: &str) -> Vec<(String, String)> {
    headers
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, v)| Some((format!("{prefix} {name}"), v.as_str()?.to_string())))
        .collect()
}

/// Where a model comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Listed in `models.json` under its provider.
    ModelsJson,
    /// Pi's built-in catalogue; its provider got a key from here.
    BuiltIn(KeySource),
}

/// What gave a built-in provider its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    AuthJson,
    EnvVar(String),
    /// An `apiKey` under this (built-in) provider's name in `models.json`.
    ModelsJsonApiKey(String),
    /// None this runner knows of (an OAuth login, a variable of a provider not in the table).
    Unknown,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::AuthJson => f.write_str("its entry in auth.json"),
            KeySource::EnvVar(v) => f.write_str(v),
            KeySource::ModelsJsonApiKey(p) => write!(f, "the apiKey under \"{p}\" in models.json"),
            KeySource::Unknown => {
                f.write_str("a credential Pi found (not one this runner can name)")
            }
        }
    }
}

/// How the run's start model was chosen, and what it would fail over to.
#[derive(Debug, Clone, Copy)]
pub struct StartChoice<'a> {
    /// `provider/id`.
    pub start: &'a str,
    /// Every model the run could be served by (the start model may be among them).
    pub candidates: &'a [String],
    /// `--model` was given.
    pub model_flag: bool,
    /// Pi's saved default (`settings.json`) as `provider/id`.
    pub saved_default: Option<&'a str>,
    /// `--models` was given.
    pub scoped: bool,
    pub provider_flag: Option<&'a str>,
}

/// Something about the choice of models the user should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The start model is built-in.
    BuiltInStart { model: String, source: KeySource },
    /// Some candidates are built-in: per provider, its source and its models.
    BuiltInCandidates {
        total: usize,
        groups: Vec<(String, KeySource, Vec<String>)>,
        /// The candidates' providers that `models.json` lists, in candidate order.
        user_providers: Vec<String>,
    },
    /// Neither `--model` nor the saved default chose the start model.
    NoPrimary {
        start: String,
        how: &'static str,
        /// A model of `models.json` to suggest.
        example: Option<String>,
    },
}

impl Finding {
    /// A stable code for `--json` consumers.
    pub fn code(&self) -> &'static str {
        match self {
            Finding::BuiltInStart { .. } => "built_in_start",
            Finding::BuiltInCandidates { .. } => "built_in_candidates",
            Finding::NoPrimary { .. } => "no_primary",
        }
    }
}

/// How many models a finding names before "… (N more)".
const SHOWN: usize = 6;

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::BuiltInStart { model, source } => write!(
                f,
                "the start model {model} is from Pi's built-in catalogue, not from your \
                 models.json (provider {} was brought in by {source}); name the primary with \
                 --model",
                super::provider_of(model)
            ),
            Finding::BuiltInCandidates {
                total,
                groups,
                user_providers,
            } => {
                let count: usize = groups.iter().map(|g| g.2.len()).sum();
                let named: Vec<&str> = groups
                    .iter()
                    .flat_map(|g| g.2.iter().map(String::as_str))
                    .collect();
                let mut list = named[..named.len().min(SHOWN)].join(", ");
                if named.len() > SHOWN {
                    list.push_str(&format!(", … ({} more)", named.len() - SHOWN));
                }
                let sources: Vec<String> = groups
                    .iter()
                    .map(|(p, s, _)| format!("provider {p} by {s}"))
                    .collect();
                write!(
                    f,
                    "{count} of {total} candidates are from Pi's built-in catalogue, not from \
                     your models.json: {list} (brought in: {}); ",
                    sources.join("; ")
                )?;
                if user_providers.is_empty() {
                    f.write_str("keep them out with --models")
                } else {
                    let scope: Vec<String> =
                        user_providers.iter().map(|p| format!("{p}/*")).collect();
                    write!(f, "keep them out with --models '{}'", scope.join(","))
                }
            }
            Finding::NoPrimary {
                start,
                how,
                example,
            } => {
                write!(
                    f,
                    "no --model and no saved default chose the start model: {start} is {how}; \
                     name the primary with --model"
                )?;
                match example {
                    Some(e) if e != start => write!(f, " (e.g. --model {e})"),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// What the user should know about `choice` (see [`Finding`]), in order: the start model,
/// the candidates, the primary.
pub fn findings(
    choice: &StartChoice<'_>,
    config: &PiConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Origin::BuiltIn(source) = config.origin(choice.start, env) {
        out.push(Finding::BuiltInStart {
            model: choice.start.to_string(),
            source,
        });
    }
    let mut groups: Vec<(String, KeySource, Vec<String>)> = Vec::new();
    let mut user_providers: Vec<String> = Vec::new();
    let mut first_user_model = None;
    for key in choice.candidates {
        let provider = super::provider_of(key);
        match config.origin(key, env) {
            Origin::ModelsJson => {
                first_user_model.get_or_insert_with(|| key.clone());
                if !user_providers.iter().any(|p| p == provider) {
                    user_providers.push(provider.to_string());
                }
            }
            Origin::BuiltIn(source) => match groups.iter_mut().find(|g| g.0 == provider) {
                Some(g) => g.2.push(key.clone()),
                None => groups.push((provider.to_string(), source, vec![key.clone()])),
            },
        }
    }
    if !groups.is_empty() {
        out.push(Finding::BuiltInCandidates {
            total: choice.candidates.len(),
            groups,
            user_providers,
        });
    }
    if !choice.model_flag && choice.saved_default != Some(choice.start) {
        let how = if choice.scoped {
            "the first model --models selects"
        } else if choice.provider_flag.is_some() {
            "the first model of --provider"
        } else {
            "the model Pi picked itself"
        };
        let example = first_user_model.or_else(|| {
            config
                .providers
                .iter()
                .find_map(|p| Some(format!("{}/{}", p.name, p.model_ids.first()?)))
        });
        out.push(Finding::NoPrimary {
            start: choice.start.to_string(),
            how,
            example,
        });
    }
    out
}

/// What the user chose for a run: its start model (by `--model`, `--provider`, `--models` or
/// Pi's saved default) and where failover may go (`--models`).
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    /// The run's start model (`provider/id`), once the run chose it.
    pub start: Option<&'a str>,
    /// Something the user gave chose the start model.
    pub start_chosen: bool,
    /// `--models` was given: every candidate is one the user named.
    pub scoped: bool,
}

/// A model from Pi's built-in catalogue that served an attempt although the user named it
/// nowhere: the run started on it, or failed over to it outside any `--models` scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unchosen {
    pub model: String,
    pub source: KeySource,
    /// It was the start model (else a failover went to it).
    pub started: bool,
}

impl Unchosen {
    /// A stable code for `--json` consumers.
    pub fn code(&self) -> &'static str {
        if self.started {
            "built_in_start"
        } else {
            "built_in_failover"
        }
    }
}

impl fmt::Display for Unchosen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let provider = self
            .model
            .split_once('/')
            .map_or(self.model.as_str(), |(p, _)| p);
        if self.started {
            write!(
                f,
                "the run started on {}, a model from Pi's built-in catalogue that no --model, \
                 --models or saved default chose (provider {provider} was brought in by {}); \
                 name the primary with --model and the backups with --models",
                self.model, self.source
            )
        } else {
            write!(
                f,
                "the run failed over to {}, a model from Pi's built-in catalogue outside any \
                 --models scope (provider {provider} was brought in by {}); keep failover \
                 among your models with --models",
                self.model, self.source
            )
        }
    }
}

/// The built-in models among `used` (the models the run's attempts went to, in order) that the
/// user did not name (see [`Named`]), each once.
pub fn unchosen_built_ins(
    used: &[String],
    named: &Named<'_>,
    config: &PiConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Unchosen> {
    let mut out: Vec<Unchosen> = Vec::new();
    if named.scoped {
        return out;
    }
    for model in used {
        if out.iter().any(|u| &u.model == model) {
            continue;
        }
        let started = named.start == Some(model.as_str());
        if started && named.start_chosen {
            continue;
        }
        if let Origin::BuiltIn(source) = config.origin(model, env) {
            out.push(Unchosen {
                model: model.clone(),
                source,
                started,
            });
        }
    }
    out
}

/// A `models.json` value that refers to a variable that is unset or empty here: Pi then has
/// no such key (or header), and an `apiKey` like that leaves the provider without models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsetReference {
    pub provider: String,
    /// `apiKey`, `header X-Key`, `model m header X-Key`.
    pub field: String,
    pub var: String,
    /// Set, but to the empty string.
    pub empty: bool,
}

impl fmt::Display for UnsetReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "provider {}: {} refers to ${}, which is {} here (cron starts with an almost empty \
             environment: source an env file)",
            self.provider,
            self.field,
            self.var,
            if self.empty { "empty" } else { "not set" }
        )
    }
}

/// Every variable `models.json`'s keys and headers refer to that `env` lacks (or has empty),
/// by provider name, then `apiKey` before headers. Values are never looked at beyond being empty.
pub fn unset_references(
    config: &PiConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<UnsetReference> {
    let mut out = Vec::new();
    for p in &config.providers {
        let fields = p
            .api_key
            .iter()
            .map(|k| ("apiKey".to_string(), k.as_str()))
            .chain(p.headers.iter().map(|(w, v)| (w.clone(), v.as_str())));
        for (field, value) in fields {
            for var in crate::redact::referenced_vars(value) {
                let value = env(&var);
                if value.as_deref().is_none_or(str::is_empty) {
                    out.push(UnsetReference {
                        provider: p.name.clone(),
                        field: field.clone(),
                        var,
                        empty: value.is_some(),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "origin_tests.rs"]
mod tests;
