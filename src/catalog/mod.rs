//! Model metadata as Pi reports it (`get_available_models`, `get_state`), reduced to what
//! failover needs, and what users select from it by name: [`scope`] resolves `--models`,
//! [`suggest`] finds the names closest to a typo, [`origin`] tells the user's `models.json`
//! from Pi's built-in catalogue. All pure: no I/O, nothing from `failover`.
//! Parsing is lenient so Pi 0.84.4 and 1.6.0 objects both fit.

mod key;
pub mod origin;
pub mod scope;
pub mod suggest;

use serde::Deserialize;

pub use key::{ModelKey, provider_of};

/// One model Pi can use. Unknown fields in Pi's object are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub provider: String,
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub base_url: Option<String>,
    #[serde(default)]
    pub reasoning: bool,
    /// Input modalities, e.g. `["text", "image"]`. Pi always sends it; `None` = unknown.
    #[serde(default)]
    pub input: Option<Vec<String>>,
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The most tokens one answer may have (Pi's `maxTokens`); `None` = unknown.
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

impl ModelInfo {
    /// `provider/id`, the key users type and breakers use.
    pub fn key(&self) -> ModelKey {
        ModelKey::new(&self.provider, &self.id)
    }

    /// True only when the model explicitly declares image input.
    pub fn accepts_images(&self) -> bool {
        self.input
            .as_ref()
            .is_some_and(|i| i.iter().any(|m| m == "image"))
    }

    pub fn context_window_or_zero(&self) -> u64 {
        self.context_window.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pi_model_object_leniently() {
        let raw = r#"{"id":"alpha-1","name":"Alpha 1","api":"openai-completions","provider":"fake-a",
            "baseUrl":"http://127.0.0.1:1/a/v1","reasoning":false,"input":["text","image"],
            "cost":{"input":0},"contextWindow":128000,"maxTokens":4096,"future":1}"#;
        let m: ModelInfo = serde_json::from_str(raw).expect("parses");
        assert_eq!(m.key(), "fake-a/alpha-1");
        assert!(m.accepts_images());
        assert_eq!(m.context_window, Some(128000));
        assert_eq!(m.max_tokens, Some(4096));
    }
}
