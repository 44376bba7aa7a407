//! The schema's second chance on the current model: whether it was taken, how many second
//! asks the session holds since the last fork (a fork for the next model goes back past them,
//! to the prompt), and the rejected answer a failure is about to record.

use crate::failover::Rejected;
use crate::rpc::ForkMessage;
use crate::schema::prompt::REASK_HEAD;

#[derive(Debug, Default)]
pub(super) struct SchemaTries {
    /// The current model was asked again after a non-conforming answer: its next one fails it.
    reasked: bool,
    /// Second asks sent since the last fork (they are on the session's branch).
    on_branch: usize,
    /// The rejection the next recorded failure carries.
    held: Option<Rejected>,
}

impl SchemaTries {
    /// Whether the current model still has its second ask.
    pub(super) fn may_reask(&self) -> bool {
        !self.reasked
    }

    /// The second ask went out.
    pub(super) fn reasked(&mut self) {
        self.reasked = true;
        self.on_branch += 1;
    }

    /// A new attempt from scratch (another model, or the same one asked afresh): it gets its
    /// own second ask.
    pub(super) fn redispatched(&mut self) {
        self.reasked = false;
    }

    /// Keeps the rejection the failure about to be recorded is about.
    pub(super) fn hold(&mut self, rejected: Rejected) {
        self.held = Some(rejected);
    }

    pub(super) fn take_held(&mut self) -> Option<Rejected> {
        self.held.take()
    }

    /// The user message to fork at, from Pi's list of the branch's user messages: the last
    /// one, going back past the second asks this run sent (so the next model sees the
    /// conversation as it was before the first non-conforming answer).
    pub(super) fn fork_target(&mut self, mut messages: Vec<ForkMessage>) -> Option<ForkMessage> {
        while self.on_branch > 0
            && messages.len() > 1
            && messages
                .last()
                .is_some_and(|m| m.text.starts_with(REASK_HEAD))
        {
            messages.pop();
            self.on_branch -= 1;
        }
        self.on_branch = 0;
        messages.pop()
    }
}
