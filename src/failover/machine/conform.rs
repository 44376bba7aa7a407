//! Answers under a schema (`--output-schema`): a complete answer is checked before it counts
//! (`Action::CheckAnswer`, whose verdict comes back as `Input::AnswerChecked`). One that does
//! not conform is a failure of class `schema`: the model is asked once more in the same
//! conversation with what was wrong; a second one fails over like any failure, with the
//! original conversation (the fork goes back past the second ask), and opens no breaker.

use super::{Action, Attempt, AttemptState, Machine, Note, Phase, Redispatch, Rejected};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::failover::classify::{Classification, FailureClass, Scope};
use crate::rpc::Command;
use crate::schema::{Conforming, Rejection};

impl Machine {
    /// `model` gave a complete answer: with a schema in force it is checked first, else it is
    /// the answer.
    pub(super) fn complete(&mut self, now: Now, model: ModelInfo, text: String) {
        if !self.opts.schema {
            return self.succeed(now, model, text, None);
        }
        self.dispatch.judged();
        self.wire.push(Action::CheckAnswer { text: text.clone() });
        self.phase = Phase::Checking { model, text };
    }

    /// The verdict on the answer being checked (a late one, after a stop, is ignored).
    pub(super) fn on_answer_checked(&mut self, now: Now, verdict: Result<Conforming, Rejection>) {
        let Phase::Checking { model, text } = self.phase.clone() else {
            return;
        };
        match verdict {
            Ok(json) => self.succeed(now, model, text, Some(json)),
            Err(rejection) => self.not_conforming(now, model, text, &rejection),
        }
    }

    fn not_conforming(&mut self, now: Now, model: ModelInfo, text: String, rejection: &Rejection) {
        let errors = rejection.errors();
        let error = rejection.to_string();
        let verdict = Classification {
            class: FailureClass::Schema,
            scope: Scope::Round,
            status: None,
            matched: "schema".to_string(),
            stated: None,
        };
        let rejected = Rejected {
            answer: text,
            errors: errors.clone(),
        };
        if self.conform.may_reask() && !self.round_expired(now) {
            // The same model, the same conversation, its slot kept: one more chance.
            self.note(
                Note::Detail,
                format!(
                    "fail {} (schema): {}; asking it once more",
                    model.key(),
                    crate::redact::redact_capped(&error, 300)
                ),
            );
            let duration_ms = self.attempt.ms(now.instant);
            self.tally.push(Attempt {
                model: model.key(),
                failure: Some(verdict),
                error: Some(crate::redact::redact_capped(&error, 300)),
                duration_ms,
                usage: self.attempt.close(),
                capacity_signal: false,
                partial: None,
                silent_ms: None,
                rejected: Some(rejected),
            });
            self.conform.reasked();
            self.attempt = AttemptState::default();
            self.phase = Phase::Dispatching;
            self.wire.queue(vec![Command::Prompt {
                message: crate::schema::prompt::reask(&errors),
                images: Vec::new(),
            }]);
            return self.run_queue(now);
        }
        self.conform.hold(rejected);
        let plan = self.judge(now, &model, verdict, &error);
        // The next model gets the conversation as it was before the first answer.
        self.execute_with(now, plan, Redispatch::Fork);
    }

    /// The start model could not follow this job's schema in an earlier job, and a model that
    /// could is available: start there instead (the other is tried last).
    pub(super) fn unsuited_start(&self, now: Now, start: &ModelInfo) -> bool {
        let avoid = &self.opts.schema_avoid;
        avoid.contains(start.key().as_str())
            && self
                .best_candidate(now, start)
                .is_some_and(|m| !avoid.contains(m.key().as_str()))
    }
}
