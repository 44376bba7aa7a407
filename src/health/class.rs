//! The failure classes and breaker scopes of SPEC §3: what a failed attempt was, and which
//! breaker it opens. Pure data; `failover::classify` decides which applies.

use std::fmt;

/// What kind of failure an attempt met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureClass {
    Auth,
    Quota,
    RateLimit,
    Endpoint,
    Model,
    ContentPolicy,
    ContextOverflow,
    /// The answer was cut at the model's output limit (`finish_reason: length`): incomplete,
    /// so not an answer; no breaker (the model is healthy, the answer too long for it).
    Truncated,
    /// The answer is not one JSON value valid against `--output-schema`, after one re-ask: no
    /// breaker (a model that cannot follow this schema is not a dead provider).
    Schema,
    UserAbort,
    Unknown,
}

/// Which breaker a failure opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Provider,
    /// provider + normalised base URL
    Endpoint,
    Model,
    /// no breaker: affects this round only (context overflow, truncation, schema, user abort)
    Round,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Auth => "auth",
            FailureClass::Quota => "quota",
            FailureClass::RateLimit => "rate_limit",
            FailureClass::Endpoint => "endpoint",
            FailureClass::Model => "model",
            FailureClass::ContentPolicy => "content_policy",
            FailureClass::ContextOverflow => "context_overflow",
            FailureClass::Truncated => "truncated",
            FailureClass::Schema => "schema",
            FailureClass::UserAbort => "user_abort",
            FailureClass::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<FailureClass> {
        Some(match s {
            "auth" => FailureClass::Auth,
            "quota" => FailureClass::Quota,
            "rate_limit" => FailureClass::RateLimit,
            "endpoint" => FailureClass::Endpoint,
            "model" => FailureClass::Model,
            "content_policy" => FailureClass::ContentPolicy,
            "context_overflow" => FailureClass::ContextOverflow,
            "truncated" => FailureClass::Truncated,
            "schema" => FailureClass::Schema,
            "user_abort" => FailureClass::UserAbort,
            "unknown" => FailureClass::Unknown,
            _ => return None,
        })
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Provider => "provider",
            Scope::Endpoint => "endpoint",
            Scope::Model => "model",
            Scope::Round => "round",
        }
    }
}
