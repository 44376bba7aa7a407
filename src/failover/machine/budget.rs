//! The spend caps (`--max-cost`) as this run sees them: the process's spend as the ledger last
//! reported it (`Input::Spend`). The caps themselves are pure
//! (`crate::budget`); here is what the run does about them: it reports each call's cost, never
//! starts an attempt once the total cap is reached (the attempt under way finishes, no next one
//! follows), and leaves out the providers over their own caps — as an open breaker does, but for
//! the rest of the run. When every provider that could take the request is over its cap, the
//! job is out of budget as when the total cap is reached.

use super::{Action, Machine, Note, Outcome, Phase};
use crate::budget::{OverBudget, Spend};
use crate::catalog::ModelInfo;
use crate::clock::Now;
use crate::rpc::Message;

impl Machine {
    /// The process's spend so far (every batch worker's), including every
    /// [`Action::Spent`] this run has emitted. A run waiting for a breaker to reopen or for a
    /// capacity slot stops waiting once it is out of budget.
    pub(super) fn on_spend(&mut self, now: Now, spend: Spend) {
        self.budget.replace(spend);
        if matches!(
            self.phase,
            Phase::Waiting { .. } | Phase::AwaitingSlot { .. }
        ) && let Some(why) = self.over_budget()
        {
            self.stop_for_budget(now, why);
        }
    }

    /// An assistant message ended: what Pi says its call cost counts against the caps (on the
    /// message's provider, else the current model's).
    pub(super) fn price(&mut self, message: &Message) {
        let Some(cost) = message.usage.map(|u| u.cost) else {
            return;
        };
        let provider = match (&message.provider, self.dispatch.current()) {
            (Some(p), _) if !p.is_empty() => p.clone(),
            (_, Some(m)) => m.provider.clone(),
            _ => return,
        };
        // Entered once, in the process's ledger: the spend comes back as `Input::Spend` before
        // any other input, so nothing starts on a view without this cost.
        if cost.is_finite() && cost > 0.0 {
            self.wire.push(Action::Spent { provider, cost });
        }
    }

    /// Why no further attempt may start, if none may: the total cap is reached, or every model
    /// that could take the request is on a provider over its cap.
    pub(super) fn over_budget(&self) -> Option<OverBudget> {
        self.budget
            .total_reached()
            .or_else(|| self.budget.all_capped(&self.fitting_models()))
    }

    /// Ends the run for lack of budget (the job is left unrecorded in a batch).
    pub(super) fn stop_for_budget(&mut self, now: Now, why: OverBudget) {
        self.note(
            Note::Detail,
            format!("no further attempt: out of budget ({why})"),
        );
        let last_error = self.tally.last_error().map(str::to_string);
        self.finish(now, Outcome::OverBudget { why, last_error });
    }

    /// The budget ran out (spent by other jobs) while the request was being set up for a
    /// model: the prompt is not sent and the run ends; `true` when it did.
    pub(super) fn out_of_budget_before_sending(&mut self, now: Now) -> bool {
        let Some(why) = self.over_budget() else {
            return false;
        };
        self.wire.clear_queue();
        self.stop_for_budget(now, why);
        true
    }

    /// Pi's own retry of the current model is one more request: not once out of budget, nor
    /// to a provider over its cap.
    pub(super) fn budget_forbids_retry(&self, current: &ModelInfo) -> bool {
        self.budget.total_reached().is_some() || self.budget.capped(&current.provider)
    }
}
