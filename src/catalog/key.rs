//! A model's key, `provider/id` — what users type, breakers are kept under, and attempts are
//! reported by — with its provider. Pure.

use std::fmt;

/// `provider/id`. The provider is what comes before the first `/` (a provider name never holds
/// one; a model id may, as in `openrouter/meta-llama/llama-3`); a key without a `/` is all
/// provider. Reads as the `&str` it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelKey(String);

impl ModelKey {
    pub fn new(provider: &str, id: &str) -> ModelKey {
        ModelKey(format!("{provider}/{id}"))
    }

    /// A key as written (a `--model`, a stored record, a line of `--status`).
    pub fn parse(text: &str) -> ModelKey {
        ModelKey(text.to_string())
    }

    /// The provider part (the whole key when it has no `/`).
    pub fn provider(&self) -> &str {
        provider_of(&self.0)
    }

    /// The model id part (empty when the key has no `/`).
    pub fn id(&self) -> &str {
        self.0.split_once('/').map_or("", |(_, id)| id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The provider of a key written as text (see [`ModelKey`]).
pub fn provider_of(key: &str) -> &str {
    key.split_once('/').map_or(key, |(p, _)| p)
}

impl std::ops::Deref for ModelKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for ModelKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ModelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ModelKey {
    fn from(text: &str) -> ModelKey {
        ModelKey::parse(text)
    }
}

impl From<ModelKey> for String {
    fn from(k: ModelKey) -> String {
        k.0
    }
}

impl PartialEq<str> for ModelKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ModelKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for ModelKey {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl serde::Serialize for ModelKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_before_the_first_slash() {
        let k = ModelKey::new("openrouter", "meta-llama/llama-3");
        assert_eq!(k, "openrouter/meta-llama/llama-3");
        assert_eq!((k.provider(), k.id()), ("openrouter", "meta-llama/llama-3"));
        let bare = ModelKey::parse("zai");
        assert_eq!((bare.provider(), bare.id()), ("zai", ""));
        assert_eq!(provider_of("a/b"), "a");
    }
}
