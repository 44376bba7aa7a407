//! `models.json` / `settings.json` for Pi's agent dir: providers pointing at the fake server
//! (or a refused port, or any loopback URL), their API keys and their models' costs. Writes
//! files only; knows nothing about serving.

use std::path::Path;

use serde_json::{Value, json};

use super::{FakeLlm, closed_port};

/// Where a provider points.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A route of the fake server: `FakeLlm::base_url(route)`.
    Route(String),
    /// `http://127.0.0.1:<closed_port()>/v1` — connection refused.
    Refused,
    /// Any explicit base URL (must be 127.0.0.1).
    BaseUrl(String),
}

/// How a provider's `apiKey` is written to `models.json`.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiKey {
    /// Pi sends exactly this key. Written with Pi's escapes (`$` → `$$`, a leading `!` → `$!`) so
    /// Pi neither interpolates it nor runs it as a command; plain keys are written as they are.
    Literal(String),
    /// `"$NAME"`: Pi reads the key from the environment variable `NAME` (of Pi's process, so a
    /// test passes it with [`crate::support::TestEnv::env`] or `Command::env`).
    Env(String),
    /// `"!COMMAND"`: Pi runs `COMMAND` with `sh -c` and sends its trimmed output.
    Command(String),
}

impl ApiKey {
    /// The `apiKey` string for `models.json`.
    pub fn models_json_value(&self) -> String {
        match self {
            ApiKey::Literal(k) => {
                let escaped = k.replace('$', "$$");
                match escaped.strip_prefix('!') {
                    Some(rest) => format!("$!{rest}"),
                    None => escaped,
                }
            }
            ApiKey::Env(name) => format!("${name}"),
            ApiKey::Command(c) => format!("!{c}"),
        }
    }
}

/// One provider of `models.json`.
#[derive(Clone, Debug)]
pub struct ProviderSpec {
    pub name: String,
    pub endpoint: Endpoint,
    pub models: Vec<ModelSpec>,
    /// `apiKey` (default `Literal("x")`; without any key Pi treats the models as unavailable).
    pub api_key: ApiKey,
}

impl ProviderSpec {
    /// Provider `name` served by the fake server's `route`.
    pub fn new(name: &str, route: &str, models: Vec<ModelSpec>) -> Self {
        ProviderSpec {
            name: name.into(),
            endpoint: Endpoint::Route(route.into()),
            models,
            api_key: ApiKey::Literal("x".into()),
        }
    }
    /// Provider `name` whose base URL refuses connections.
    pub fn refused(name: &str, models: Vec<ModelSpec>) -> Self {
        ProviderSpec {
            endpoint: Endpoint::Refused,
            ..Self::new(name, "", models)
        }
    }
    /// Provider `name` at an explicit loopback `base_url` (e.g. a black hole's).
    pub fn at(name: &str, base_url: &str, models: Vec<ModelSpec>) -> Self {
        assert!(
            base_url.starts_with("http://127.0.0.1:"),
            "ProviderSpec::at: tests only point at 127.0.0.1, not {base_url}"
        );
        ProviderSpec {
            endpoint: Endpoint::BaseUrl(base_url.into()),
            ..Self::new(name, "", models)
        }
    }
    /// Builder: Pi sends exactly `key` as this provider's API key.
    pub fn api_key(mut self, key: &str) -> Self {
        self.api_key = ApiKey::Literal(key.into());
        self
    }
    /// Builder: `"apiKey": "!COMMAND"` — Pi takes the key from what `command` prints.
    pub fn api_key_command(mut self, command: &str) -> Self {
        self.api_key = ApiKey::Command(command.into());
        self
    }
    /// Builder: `"apiKey": "$VAR"` — Pi takes the key from environment variable `var`.
    pub fn api_key_env(mut self, var: &str) -> Self {
        self.api_key = ApiKey::Env(var.into());
        self
    }
}

/// One model of a provider.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub id: String,
    /// `input: ["text","image"]` instead of `["text"]`.
    pub images: bool,
    pub context_window: u64,
    pub reasoning: bool,
    /// Dollars per million (input, output) tokens; `None` writes no `cost` (Pi's default: 0).
    pub cost: Option<(f64, f64)>,
    /// `maxTokens`; `None`: 4096 (at most half the context window).
    pub max_tokens: Option<u64>,
}

impl ModelSpec {
    /// Text-only, 128000-token context, no reasoning.
    pub fn text(id: &str) -> Self {
        ModelSpec {
            id: id.into(),
            images: false,
            context_window: 128_000,
            reasoning: false,
            cost: None,
            max_tokens: None,
        }
    }
    /// Like `text` but accepts images.
    pub fn vision(id: &str) -> Self {
        ModelSpec {
            images: true,
            ..Self::text(id)
        }
    }
    /// Builder: mark as a reasoning model.
    pub fn reasoning(mut self) -> Self {
        self.reasoning = true;
        self
    }
    /// Builder: set the context window.
    pub fn context(mut self, tokens: u64) -> Self {
        self.context_window = tokens;
        self
    }
    /// Builder: the most tokens one answer may have (`maxTokens`).
    pub fn max_output(mut self, tokens: u64) -> Self {
        self.max_tokens = Some(tokens);
        self
    }
    /// Builder: dollars per million input / output tokens, so Pi reports a non-zero cost
    /// (`usage.cost.total` = input × prompt_tokens / 1e6 + output × completion_tokens / 1e6).
    pub fn cost(mut self, input: f64, output: f64) -> Self {
        self.cost = Some((input, output));
        self
    }
}

/// The `models.json` document for `providers` (see `write_models_json`).
pub fn models_json(llm: &FakeLlm, providers: &[ProviderSpec]) -> Value {
    let mut out = serde_json::Map::new();
    for p in providers {
        let base_url = match &p.endpoint {
            Endpoint::Route(r) => llm.base_url(r),
            Endpoint::Refused => format!("http://127.0.0.1:{}/v1", closed_port()),
            Endpoint::BaseUrl(u) => u.clone(),
        };
        let models: Vec<Value> = p
            .models
            .iter()
            .map(|m| {
                let mut v = json!({
                    "id": m.id,
                    "name": m.id,
                    "contextWindow": m.context_window,
                    "maxTokens": m.max_tokens.unwrap_or(4096.min(m.context_window / 2).max(1)),
                    "input": if m.images { json!(["text", "image"]) } else { json!(["text"]) },
                    "reasoning": m.reasoning,
                });
                if let Some((input, output)) = m.cost {
                    v["cost"] =
                        json!({"input": input, "output": output, "cacheRead": 0, "cacheWrite": 0});
                }
                v
            })
            .collect();
        out.insert(
            p.name.clone(),
            json!({
                "baseUrl": base_url,
                "api": "openai-completions",
                "apiKey": p.api_key.models_json_value(),
                "models": models,
            }),
        );
    }
    json!({ "providers": out })
}

/// Write `<agent_dir>/models.json` (Pi's custom-provider format; every provider gets
/// `api:"openai-completions"` and its `apiKey` (default `"x"`), without which Pi treats its
/// models as unavailable).
pub fn write_models_json(agent_dir: &Path, llm: &FakeLlm, providers: &[ProviderSpec]) {
    write_json_file(&agent_dir.join("models.json"), &models_json(llm, providers));
}

/// Write `<agent_dir>/settings.json`, e.g. `json!({"retry":{"enabled":false},"httpIdleTimeoutMs":3000})`.
pub fn write_settings_json(agent_dir: &Path, settings: &Value) {
    write_json_file(&agent_dir.join("settings.json"), settings);
}

fn write_json_file(path: &Path, v: &Value) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    }
    let text = serde_json::to_string_pretty(v).expect("serialize json");
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
