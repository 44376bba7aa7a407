//! Getting the request to a model: probe leases, `set_model`, the fork or continuation that
//! re-dispatches the request, the command queue, and the success that ends the run.

use super::machine::{
    AttemptState, CONTINUATION_PROMPT, Machine, Note, Outcome, Phase, Redispatch, SwitchReason, Tag,
};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::health::{BREAKER_SCOPES, Delta, Keys, SwitchEntry};
use crate::rpc::Command;

impl Machine {
    /// Uses `model` next: claims the probe lease first when one of its breakers is half-open
    /// (only one process at a time may probe), then sets it (unless it is already current)
    /// and dispatches.
    pub(super) fn go_to(
        &mut self,
        now: Now,
        model: ModelInfo,
        mode: Redispatch,
        reason: SwitchReason,
    ) {
        if let Some(target) =
            self.shared
                .health
                .needs_probe(&model, now.wall_ms, &self.shared.own_leases)
        {
            self.phase = Phase::Claiming {
                model,
                mode,
                reason,
                target: target.clone(),
            };
            self.wire
                .actions
                .push_back(super::machine::Action::ClaimProbe { target });
        } else if self
            .dispatch
            .current
            .as_ref()
            .is_some_and(|c| c.key() == model.key())
        {
            self.start_redispatch(mode, None);
        } else {
            self.switch_to(now, model, mode, reason);
        }
    }

    fn switch_to(&mut self, now: Now, next: ModelInfo, mode: Redispatch, reason: SwitchReason) {
        let from = self
            .dispatch
            .current
            .as_ref()
            .map(ModelInfo::key)
            .unwrap_or_else(|| "?".to_string());
        // Counted, logged and announced once Pi has accepted the model (set_model may fail).
        let entry = SwitchEntry {
            at: now.wall_ms,
            from,
            to: next.key(),
            reason: reason.as_str().to_string(),
        };
        self.dispatch.pending_switch = Some((entry, reason));
        self.start_redispatch(mode, Some(next));
    }

    /// Pi accepted `model`: if that completes a switch, record it.
    pub(super) fn switch_done(&mut self, now: Now, model: &ModelInfo) {
        let Some((entry, reason)) = self.dispatch.pending_switch.take() else {
            return;
        };
        if entry.to != model.key() {
            return;
        }
        self.note(
            Note::Switch,
            format!("switch {} → {} ({})", entry.from, entry.to, entry.reason),
        );
        self.tally.switches += 1;
        // Skipping a start model already known to be dead is not news for the shared log
        // (a batch would otherwise write one entry per job).
        if reason == SwitchReason::Unhealthy {
            self.record(Delta::SkippedStart);
        } else {
            self.record(Delta::Switch(entry));
        }
        // The round window restarts at each successful switch.
        if self.round.started.is_some() {
            self.round.started = Some(now.instant);
        }
    }

    /// Sends the request to the current model (after `next` is set, when given): a new attempt.
    pub(super) fn start_redispatch(&mut self, mode: Redispatch, next: Option<ModelInfo>) {
        self.wire.queue.clear();
        self.phase = Phase::Dispatching;
        self.attempt = AttemptState::default();
        self.dispatch.judged_seq = self.dispatch.last_seq;
        if mode == Redispatch::Fork {
            self.wire.queue.push_back(Command::GetForkMessages);
        }
        let pending = std::mem::take(&mut self.dispatch.pending_set);
        // `fork` rebuilds the session from the branch, model and thinking level included, so
        // after a fork the model is always set again (the current one for a same-model retry).
        let next = next.or_else(|| {
            if pending || mode == Redispatch::Fork {
                self.dispatch.current.clone()
            } else {
                None
            }
        });
        let switching = next.is_some();
        if let Some(model) = next {
            self.wire.queue.push_back(Command::SetModel {
                provider: model.provider.clone(),
                model_id: model.id.clone(),
            });
        }
        if let Some(level) = &self.opts.thinking
            && (switching || !self.dispatch.thinking_sent)
        {
            self.wire.queue.push_back(Command::SetThinkingLevel {
                level: level.clone(),
            });
            self.dispatch.thinking_sent = true;
        } else if let Some(level) = &self.pi.thinking_default
            && switching
        {
            self.wire.queue.push_back(Command::SetThinkingLevel {
                level: level.clone(),
            });
        }
        // A continuation is added only after new tool work; otherwise the last prompt is sent
        // again as it was (after a fork, or when it never reached the session).
        if mode == Redispatch::Continue {
            self.dispatch.continued = true;
        }
        let (message, images) = if self.dispatch.continued {
            (CONTINUATION_PROMPT.to_string(), Vec::new())
        } else {
            (self.request.prompt.clone(), self.request.images.clone())
        };
        self.wire
            .queue
            .push_back(Command::Prompt { message, images });
        self.run_queue();
    }

    /// Sends the next queued command; each waits for its response before the next goes.
    pub(super) fn run_queue(&mut self) {
        let Some(cmd) = self.wire.queue.pop_front() else {
            return;
        };
        let tag = match &cmd {
            Command::GetForkMessages => Tag::ForkMessages,
            Command::Fork { .. } => Tag::Fork,
            Command::SetModel { provider, model_id } => Tag::SetModel(
                self.pi
                    .pool
                    .iter()
                    .chain(self.pi.registry.iter())
                    .find(|m| &m.provider == provider && &m.id == model_id)
                    .cloned()
                    .unwrap_or_else(|| ModelInfo {
                        provider: provider.clone(),
                        id: model_id.clone(),
                        name: None,
                        base_url: None,
                        reasoning: false,
                        input: None,
                        context_window: None,
                    }),
            ),
            Command::Prompt { .. } => Tag::Prompt,
            Command::SetThinkingLevel { .. } => Tag::Thinking,
            _ => Tag::Other,
        };
        self.send(cmd, tag);
    }

    pub(super) fn succeed(&mut self, now: Now, model: ModelInfo, text: String) {
        // Breakers this success closes: the ones that had failed since their last success.
        let keys = Keys::of(&model);
        let closing: Vec<String> = BREAKER_SCOPES
            .into_iter()
            .filter_map(|scope| {
                let key = keys.get(scope)?;
                let r = self.shared.health.records(scope)?.get(key)?;
                (r.consecutive_failures > 0).then(|| format!("{} {key}", scope.as_str()))
            })
            .collect();
        self.record(Delta::Success {
            at: now.wall_ms,
            keys,
        });
        for breaker in closing {
            self.note(
                Note::Breaker,
                format!("breaker closed: {breaker} (answered)"),
            );
        }
        self.attempt.open = false;
        self.tally.attempts.push(super::machine::Attempt {
            model: model.key(),
            failure: None,
            error: None,
            duration_ms: self.attempt_ms(now),
            usage: std::mem::take(&mut self.attempt.usage),
        });
        self.finish(Outcome::Answer { text, model });
    }
}
