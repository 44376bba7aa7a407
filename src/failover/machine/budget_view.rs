//! The spend caps and spend as one run sees them (see `budget`): the process's spend as the
//! ledger last reported it, and the providers over their own caps.

use std::collections::BTreeSet;

use crate::budget::{Caps, Over, OverBudget, Spend};
use crate::catalog::ModelInfo;

#[derive(Debug, Default)]
pub(super) struct BudgetView {
    caps: Caps,
    spend: Spend,
    /// The providers over their own caps (kept with `spend`).
    capped: BTreeSet<String>,
}

impl BudgetView {
    pub(super) fn new(caps: Caps) -> BudgetView {
        BudgetView {
            caps,
            ..BudgetView::default()
        }
    }

    pub(super) fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The process's spend as the ledger holds it, this run's reported calls included.
    pub(super) fn replace(&mut self, spend: Spend) {
        self.capped = self.caps.capped(&spend);
        self.spend = spend;
    }

    /// The total cap, when it is reached.
    pub(super) fn total_reached(&self) -> Option<OverBudget> {
        self.caps.total_reached(&self.spend).map(OverBudget::Total)
    }

    /// `provider` is over its own cap.
    pub(super) fn capped(&self, provider: &str) -> bool {
        self.capped.contains(provider)
    }

    /// `provider`'s cap and what it was paid, when it is over its cap.
    pub(super) fn over(&self, provider: &str) -> Option<Over> {
        self.caps.provider_reached(&self.spend, provider)
    }

    pub(super) fn capped_providers(&self) -> &BTreeSet<String> {
        &self.capped
    }

    /// `models` (at least one) are all on providers over their caps.
    pub(super) fn all_capped(&self, models: &[ModelInfo]) -> Option<OverBudget> {
        self.caps
            .all_capped(&self.spend, models.iter().map(|m| m.provider.as_str()))
    }
}
