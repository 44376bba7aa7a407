//! Getting the request to a model: probe leases, `set_model`, the fork or continuation that
//! re-dispatches the request, the command queue, and the success that ends the run.

use super::{
    Action, Attempt, AttemptState, CONTINUATION_PROMPT, Machine, Note, Outcome, Phase, Redispatch,
    SwitchReason, Tag,
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
        // No attempt starts once the total cap is reached; a provider that went over its own
        // cap since it was chosen is passed over.
        if let Some(why) = self.budget.total_reached() {
            return self.stop_for_budget(now, why);
        }
        if self.budget.capped(&model.provider) {
            self.round.mark_tried(model.key());
            return self.choose_and_switch(now, mode, reason);
        }
        if let Some(target) = self.shared.needs_probe(&model, now.wall_ms) {
            self.phase = Phase::Claiming {
                model,
                mode,
                reason,
                target: target.clone(),
            };
            self.wire.push(Action::ClaimProbe { target });
        } else if !self.slot.holds(&model.provider) {
            self.admit(now, model, mode, reason);
        } else if self
            .dispatch
            .current()
            .is_some_and(|c| c.key() == model.key())
        {
            self.start_redispatch(now, mode, None);
        } else {
            self.switch_to(now, model, mode, reason);
        }
    }

    fn switch_to(&mut self, now: Now, next: ModelInfo, mode: Redispatch, reason: SwitchReason) {
        let from = self
            .dispatch
            .current()
            .map_or_else(|| "?".to_string(), |m| m.key().into());
        // Counted, logged and announced once Pi has accepted the model (set_model may fail).
        let entry = SwitchEntry {
            at: now.wall_ms,
            from,
            to: next.key().into(),
            reason: reason.as_str().to_string(),
        };
        self.dispatch.begin_switch(entry, reason);
        self.start_redispatch(now, mode, Some(next));
    }

    /// Pi accepted `model`: if that completes a switch, record it.
    pub(super) fn switch_done(&mut self, now: Now, model: &ModelInfo) {
        let Some((entry, reason)) = self.dispatch.switch_accepted(model) else {
            return;
        };
        self.note(
            Note::Switch,
            format!("switch {} → {} ({})", entry.from, entry.to, entry.reason),
        );
        self.tally.switched();
        // Skipping a start model already known to be dead is not news for the shared log
        // (a batch would otherwise write one entry per job).
        match reason {
            SwitchReason::Unhealthy => self.record(Delta::SkippedStart),
            // A full provider is a matter of the moment, not news for the shared log.
            SwitchReason::Capacity => {}
            // This process's spend cap: nothing the shared log should count.
            SwitchReason::OverBudget => {}
            // This batch's memory of a schema: nothing the shared log should count either.
            SwitchReason::Unsuited => {}
            _ => self.record(Delta::Switch(entry)),
        }
        // The round window restarts at each successful switch.
        self.round.switched(now.instant);
    }

    /// Sends the request to the current model (after `next` is set, when given): a new attempt.
    pub(super) fn start_redispatch(&mut self, now: Now, mode: Redispatch, next: Option<ModelInfo>) {
        self.phase = Phase::Dispatching;
        self.attempt = AttemptState::default();
        self.conform.redispatched();
        self.dispatch.judged();
        let mut queue = Vec::new();
        if mode == Redispatch::Fork {
            queue.push(Command::GetForkMessages);
        }
        let pending = self.dispatch.take_pending_set();
        // `fork` rebuilds the session from the branch, model and thinking level included, so
        // after a fork the model is always set again (the current one for a same-model retry).
        let next = next.or_else(|| {
            if pending || mode == Redispatch::Fork {
                self.dispatch.current().cloned()
            } else {
                None
            }
        });
        let switching = next.is_some();
        if let Some(model) = next {
            queue.push(Command::SetModel {
                provider: model.provider.clone(),
                model_id: model.id.clone(),
            });
        }
        if let Some(level) = &self.opts.thinking
            && self.dispatch.thinking_due(switching)
        {
            queue.push(Command::SetThinkingLevel {
                level: level.clone(),
            });
        } else if let Some(level) = self.pi.thinking_default()
            && switching
        {
            queue.push(Command::SetThinkingLevel {
                level: level.to_string(),
            });
        }
        // A continuation is added only after new tool work; otherwise the last prompt is sent
        // again as it was (after a fork, or when it never reached the session).
        if mode == Redispatch::Continue {
            self.dispatch.continue_with_continuation();
        }
        let (message, images) = if self.dispatch.continued() {
            (CONTINUATION_PROMPT.to_string(), Vec::new())
        } else {
            (
                self.request.prompt().to_string(),
                self.request.images().to_vec(),
            )
        };
        queue.push(Command::Prompt { message, images });
        self.wire.queue(queue);
        self.run_queue(now);
    }

    /// Sends the next queued command; each waits for its response before the next goes.
    pub(super) fn run_queue(&mut self, now: Now) {
        let Some(cmd) = self.wire.next_queued() else {
            return;
        };
        if matches!(cmd, Command::Prompt { .. }) && self.out_of_budget_before_sending(now) {
            return;
        }
        let tag = match &cmd {
            Command::GetForkMessages => Tag::ForkMessages,
            Command::Fork { .. } => Tag::Fork,
            Command::SetModel { provider, model_id } => Tag::SetModel(
                self.pi
                    .find(provider, model_id)
                    .cloned()
                    .unwrap_or_else(|| ModelInfo {
                        provider: provider.clone(),
                        id: model_id.clone(),
                        name: None,
                        base_url: None,
                        reasoning: false,
                        input: None,
                        context_window: None,
                        max_tokens: None,
                    }),
            ),
            Command::Prompt { .. } => Tag::Prompt,
            Command::SetThinkingLevel { .. } => Tag::Thinking,
            _ => Tag::Other,
        };
        self.send(now, cmd, tag);
    }

    /// `model` answered (`json`: the value that conformed to the schema in force).
    pub(super) fn succeed(
        &mut self,
        now: Now,
        model: ModelInfo,
        text: String,
        json: Option<crate::schema::Conforming>,
    ) {
        // Breakers this success closes: the ones that had failed since their last success.
        let keys = Keys::of(&model);
        let closing: Vec<String> = BREAKER_SCOPES
            .into_iter()
            .filter_map(|scope| {
                let key = keys.get(scope)?;
                let r = self.shared.health().records(scope)?.get(key)?;
                (r.consecutive_failures > 0).then(|| format!("{} {key}", scope.as_str()))
            })
            .collect();
        self.record(Delta::Success {
            at: now.wall_ms,
            keys,
        });
        self.learn_pace(now, &model);
        for breaker in closing {
            self.note(
                Note::Breaker,
                format!("breaker closed: {breaker} (answered)"),
            );
        }
        self.give_back_slot(now, super::slot::Ending::Answered);
        let duration_ms = self.attempt.ms(now.instant);
        self.tally.push(Attempt {
            model: model.key(),
            failure: None,
            error: None,
            duration_ms,
            usage: self.attempt.close(),
            capacity_signal: false,
            partial: None,
            silent_ms: None,
            rejected: None,
        });
        let json = json.map(Box::new);
        self.finish(now, Outcome::Answer { text, model, json });
    }
}
