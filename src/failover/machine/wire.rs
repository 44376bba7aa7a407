//! Command plumbing: ids and the answers awaited, the queue of a re-dispatch (each command goes
//! once the previous one is answered), and the actions out. The response deadline runs while any
//! awaited command is unanswered; the time of each send is passed in.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::timers::{Timer, TimerTable};
use super::{Action, Tag};
use crate::rpc::pending::Pending;
use crate::rpc::{Command, Response};

/// How long Pi may take to answer a command (start-up included, normally ~0.5 s).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(super) struct Wire {
    pending: Pending<Tag>,
    actions: VecDeque<Action>,
    queue: VecDeque<Command>,
    /// Awaited commands without an answer yet.
    waiting: usize,
}

impl Wire {
    pub(super) fn new(id_prefix: &str) -> Wire {
        Wire {
            pending: Pending::with_prefix(id_prefix),
            actions: VecDeque::new(),
            queue: VecDeque::new(),
            waiting: 0,
        }
    }

    /// Sends `command` (answered as `tag`) after the actions already out.
    pub(super) fn send(
        &mut self,
        now: Instant,
        timers: &mut TimerTable,
        command: Command,
        tag: Tag,
    ) {
        let action = self.register(now, timers, command, tag);
        self.actions.push_back(action);
    }

    /// Sends `command` before every action not yet taken: for an `abort_retry` that must beat
    /// Pi's short backoff.
    pub(super) fn send_first(
        &mut self,
        now: Instant,
        timers: &mut TimerTable,
        command: Command,
        tag: Tag,
    ) {
        let action = self.register(now, timers, command, tag);
        self.actions.push_front(action);
    }

    fn register(
        &mut self,
        now: Instant,
        timers: &mut TimerTable,
        command: Command,
        tag: Tag,
    ) -> Action {
        if tag.awaited() {
            self.waiting += 1;
            timers.set_if_stopped(Timer::Response, now + RESPONSE_TIMEOUT);
        }
        let id = self.pending.register(tag);
        Action::Send { id, command }
    }

    /// Which command `r` answers (`None`: not one of ours). The response deadline stops once
    /// nothing awaited is left unanswered.
    pub(super) fn resolve(&mut self, timers: &mut TimerTable, r: &Response) -> Option<Tag> {
        let tag = self.pending.resolve(r);
        if tag.as_ref().is_some_and(Tag::awaited) {
            self.waiting = self.waiting.saturating_sub(1);
            if self.waiting == 0 {
                timers.stop(Timer::Response);
            }
        }
        tag
    }

    pub(super) fn push(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    pub(super) fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Replaces the queue of a re-dispatch.
    pub(super) fn queue(&mut self, commands: impl IntoIterator<Item = Command>) {
        self.queue = commands.into_iter().collect();
    }

    /// Puts `command` before the rest of the queue (the `fork` found by `get_fork_messages`).
    pub(super) fn queue_first(&mut self, command: Command) {
        self.queue.push_front(command);
    }

    pub(super) fn clear_queue(&mut self) {
        self.queue.clear();
    }

    pub(super) fn next_queued(&mut self) -> Option<Command> {
        self.queue.pop_front()
    }
}
