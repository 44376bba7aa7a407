//! Exit 124's retry hint (issue 31): what was tried before the deadline passed and what was
//! still silent when it did, for `--json` and stderr alike. Pure: read from the job's attempts.

use super::record::RetryRecord;
use crate::failover::classify::FailureClass;
use crate::job::Ended;

/// The hint of a job whose `--timeout-ms` passed: a longer deadline, or a later run, could
/// help; it names each model tried (with how it failed) and each still silent.
pub fn hint(ended: &Ended) -> RetryRecord {
    let mut tried = Vec::new();
    let mut tried_words = Vec::new();
    let mut silent = Vec::new();
    let mut silent_words = Vec::new();
    for a in &ended.attempts {
        let Some(f) = &a.failure else { continue };
        let model = a.model.to_string();
        if let Some(ms) = a.silent_ms.filter(|_| f.class == FailureClass::UserAbort) {
            silent_words.push(format!(
                "{model} was still silent (no response in {})",
                crate::pace::secs(ms)
            ));
            silent.push(model);
        } else if f.class != FailureClass::UserAbort {
            let how = a
                .error
                .as_deref()
                .map(|e| crate::redact::redact_capped(e, 120))
                .unwrap_or_else(|| f.class.to_string());
            tried_words.push(format!("{model} ({how})"));
            tried.push(model);
        }
    }
    let mut parts = Vec::new();
    if !tried_words.is_empty() {
        parts.push(format!("tried {}", tried_words.join(", ")));
    }
    if !silent_words.is_empty() {
        parts.push(silent_words.join(", "));
    }
    let what = if parts.is_empty() {
        "no request was answered".to_string()
    } else {
        parts.join("; ")
    };
    RetryRecord {
        could_help: true,
        retry_after_ms: None,
        reason: format!(
            "the deadline passed: {what}; a longer --timeout-ms, or a run a little later, could \
             help"
        ),
        tried,
        silent,
    }
}
