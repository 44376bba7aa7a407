//! The model in use and how the request last went out to it: kept across attempts.

use super::SwitchReason;
use crate::catalog::ModelInfo;
use crate::health::SwitchEntry;

#[derive(Debug, Default)]
pub(super) struct DispatchState {
    current: Option<ModelInfo>,
    /// The model this run started from (after `--provider` and a batch's start model applied).
    start_key: Option<String>,
    /// The start model differs from Pi's current one: the first dispatch must set it.
    pending_set: bool,
    thinking_sent: bool,
    /// A switch waiting for Pi to accept the new model.
    pending_switch: Option<(SwitchEntry, SwitchReason)>,
    /// Counters of assistant messages seen and judged (a settle without a fresh one re-uses
    /// the verdict already taken on Pi's auto-retry).
    last_seq: u64,
    judged_seq: u64,
    /// The last prompt sent was the continuation prompt (a later fork re-sends it, once).
    continued: bool,
}

impl DispatchState {
    pub(super) fn current(&self) -> Option<&ModelInfo> {
        self.current.as_ref()
    }

    /// Pi is on `model` now (it said so, or accepted it).
    pub(super) fn set_current(&mut self, model: ModelInfo) {
        self.current = Some(model);
    }

    /// The run starts from `model`; `differs`: Pi is on another, so the first dispatch sets it.
    pub(super) fn start_from(&mut self, model: ModelInfo, differs: bool) {
        self.start_key = Some(model.key().into());
        self.current = Some(model);
        self.pending_set = differs;
    }

    pub(super) fn start_key(&self) -> Option<&str> {
        self.start_key.as_deref()
    }

    /// Whether the next dispatch must set the start model (asked once).
    pub(super) fn take_pending_set(&mut self) -> bool {
        std::mem::take(&mut self.pending_set)
    }

    /// The thinking level asked for goes out with the first dispatch and after every switch;
    /// `true` when this dispatch must send it.
    pub(super) fn thinking_due(&mut self, switching: bool) -> bool {
        let due = switching || !self.thinking_sent;
        self.thinking_sent = true;
        due
    }

    /// A switch to `entry.to` waits for Pi to accept the model.
    pub(super) fn begin_switch(&mut self, entry: SwitchEntry, reason: SwitchReason) {
        self.pending_switch = Some((entry, reason));
    }

    /// Pi accepted `model`: the switch it completes, if any.
    pub(super) fn switch_accepted(
        &mut self,
        model: &ModelInfo,
    ) -> Option<(SwitchEntry, SwitchReason)> {
        let (entry, reason) = self.pending_switch.take()?;
        (model.key() == entry.to).then_some((entry, reason))
    }

    /// Pi refused the model of the pending switch.
    pub(super) fn switch_refused(&mut self) {
        self.pending_switch = None;
    }

    pub(super) fn assistant_seen(&mut self) {
        self.last_seq += 1;
    }

    /// An assistant message arrived since the last verdict.
    pub(super) fn fresh_message(&self) -> bool {
        self.last_seq > self.judged_seq
    }

    /// Every assistant message so far is judged.
    pub(super) fn judged(&mut self) {
        self.judged_seq = self.last_seq;
    }

    /// This dispatch sends the continuation prompt; once sent, later re-dispatches re-send it.
    pub(super) fn continue_with_continuation(&mut self) {
        self.continued = true;
    }

    pub(super) fn continued(&self) -> bool {
        self.continued
    }
}
