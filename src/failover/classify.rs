//! Failure text → failure class + breaker scope (SPEC §3). First match wins. Pure.

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
    UserAbort,
    Unknown,
}

/// Which breaker a failure opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Provider,
    /// provider + normalised base URL
    Endpoint,
    Model,
    /// no breaker: affects this round only (context overflow, user abort)
    Round,
}

/// What the runner observed when an attempt ended badly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observation<'a> {
    /// Pi's `errorMessage` (may be empty).
    pub error_message: &'a str,
    /// Pi's `stopReason` (`error`, `aborted`, ...).
    pub stop_reason: &'a str,
    /// The runner's own watchdog aborted the attempt.
    pub watchdog: bool,
    /// The user interrupted the run (SIGINT/SIGTERM).
    pub user_abort: bool,
}

/// The verdict, with the evidence that decided it (for `-v` and `--json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub class: FailureClass,
    pub scope: Scope,
    /// HTTP status parsed from the `NNN: ` prefix of `errorMessage`, if any.
    pub status: Option<u16>,
    /// The marker that matched, e.g. `status 402`, `insufficient_quota`, `余额不足`, `watchdog`.
    pub matched: String,
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

/// Parses the `NNN: ` status prefix Pi puts in front of HTTP error bodies.
pub fn status_prefix(error_message: &str) -> Option<u16> {
    let b = error_message.as_bytes();
    if b.len() >= 5 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b':' && b[4] == b' ' {
        error_message[..3].parse().ok()
    } else {
        None
    }
}

/// Classifies one failed attempt. PLACEHOLDER: replaced by the full rule set.
pub fn classify(obs: &Observation<'_>) -> Classification {
    let status = status_prefix(obs.error_message);
    if obs.user_abort {
        return Classification {
            class: FailureClass::UserAbort,
            scope: Scope::Round,
            status,
            matched: "user abort".into(),
        };
    }
    Classification {
        class: FailureClass::Unknown,
        scope: Scope::Model,
        status,
        matched: "unrecognised".into(),
    }
}
