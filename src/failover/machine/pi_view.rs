//! What Pi reported when the run started: the model it was on, every model it can use, and the
//! candidates (those inside `--models`).

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::ModelInfo;
use crate::rpc::State;

#[derive(Debug, Default)]
pub(super) struct PiView {
    /// The model Pi was on before this run changed anything.
    pi_model: Option<ModelInfo>,
    /// Every model Pi can use (unique), in Pi's order.
    registry: Vec<ModelInfo>,
    /// The candidates: `registry` inside `--models`.
    pool: Vec<ModelInfo>,
    state_seen: bool,
    models_seen: bool,
    /// The level Pi chose for a reasoning start model when none was asked for.
    thinking_default: Option<String>,
    /// `provider/id` → the thinking level its `--models` pattern named.
    scope_levels: BTreeMap<String, String>,
}

impl PiView {
    /// Pi's `get_state` answer; returns the model Pi is on. With no level asked for
    /// (`keep_level`), a reasoning start model shows the user's default level: it is set again
    /// after switches, since Pi keeps a level clamped to "off" by a non-reasoning model in
    /// between.
    pub(super) fn on_state(&mut self, state: Option<State>, keep_level: bool) -> Option<ModelInfo> {
        self.state_seen = true;
        let State {
            model,
            thinking_level,
        } = state?;
        if keep_level && model.reasoning {
            self.thinking_default = thinking_level;
        }
        self.pi_model = Some(model.clone());
        Some(model)
    }

    /// Pi's model list (duplicates dropped, Pi's order kept). Until the scope is applied, the
    /// pool is empty.
    pub(super) fn on_models(&mut self, models: Vec<ModelInfo>) {
        let mut seen = BTreeSet::new();
        self.registry = models
            .into_iter()
            .filter(|m| seen.insert(m.key()))
            .collect();
        self.models_seen = true;
    }

    /// Both the state and the models have arrived.
    pub(super) fn ready(&self) -> bool {
        self.state_seen && self.models_seen
    }

    /// The candidates, and the thinking levels their `--models` patterns named.
    pub(super) fn set_pool(&mut self, pool: Vec<ModelInfo>, levels: BTreeMap<String, String>) {
        self.pool = pool;
        self.scope_levels = levels;
    }

    pub(super) fn pi_model(&self) -> Option<&ModelInfo> {
        self.pi_model.as_ref()
    }

    pub(super) fn registry(&self) -> &[ModelInfo] {
        &self.registry
    }

    pub(super) fn pool(&self) -> &[ModelInfo] {
        &self.pool
    }

    pub(super) fn thinking_default(&self) -> Option<&str> {
        self.thinking_default.as_deref()
    }

    pub(super) fn scope_level(&self, key: &str) -> Option<&str> {
        self.scope_levels.get(key).map(String::as_str)
    }

    /// The candidate `provider/id`, else the model of that key Pi knows.
    pub(super) fn find(&self, provider: &str, id: &str) -> Option<&ModelInfo> {
        self.pool
            .iter()
            .chain(self.registry.iter())
            .find(|m| m.provider == provider && m.id == id)
    }
}
