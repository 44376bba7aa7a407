//! What the run reports when it ends: its attempts, switches, last error and outcome.

use super::{Attempt, Outcome};

#[derive(Debug, Default)]
pub(super) struct Tally {
    switches: u32,
    attempts: Vec<Attempt>,
    last_error: Option<String>,
    outcome: Option<Outcome>,
}

impl Tally {
    pub(super) fn switched(&mut self) {
        self.switches += 1;
    }

    pub(super) fn switches(&self) -> u32 {
        self.switches
    }

    /// A judged attempt; a failed one's error (already redacted) is the run's last error.
    pub(super) fn push(&mut self, attempt: Attempt) {
        if let Some(error) = &attempt.error {
            self.last_error = Some(format!("{}: {error}", attempt.model));
        }
        self.attempts.push(attempt);
    }

    pub(super) fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    pub(super) fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// How the last attempt on `model` failed, if it did.
    pub(super) fn last_failure_of(
        &self,
        model: &str,
    ) -> Option<crate::failover::classify::FailureClass> {
        self.attempts
            .iter()
            .rev()
            .find(|a| a.model == model)
            .and_then(|a| a.failure.as_ref())
            .map(|f| f.class)
    }

    pub(super) fn finish(&mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }

    pub(super) fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }
}
