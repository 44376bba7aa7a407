//! The attempt on the current model: from its prompt until it is judged. Replaced whole by
//! each re-dispatch. Its watchdog lives in the machine's timer table.

use std::time::Instant;

use crate::rpc::{Message, Usage};

#[derive(Debug, Default)]
pub(super) struct AttemptState {
    /// A prompt was accepted and the attempt has not been judged yet.
    open: bool,
    started: Option<Instant>,
    last_assistant: Option<Message>,
    tools_running: u32,
    /// A tool finished since the last prompt was sent: its result must stay in the context,
    /// so the next model gets a continuation prompt instead of a fork.
    tools_since_prompt: bool,
    watchdog_fired: bool,
    /// Tokens and cost of this attempt's model calls (Pi's own retries included).
    usage: Usage,
    /// The attempt ended in an empty answer (judged as a model failure).
    empty_answer: bool,
}

impl AttemptState {
    /// Pi accepted the prompt: the attempt is under way.
    pub(super) fn opened(&mut self, now: Instant) {
        self.open = true;
        self.started = Some(now);
    }

    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    /// The attempt is judged: its usage goes to the tally.
    pub(super) fn close(&mut self) -> Usage {
        self.open = false;
        std::mem::take(&mut self.usage)
    }

    pub(super) fn usage(&self) -> Usage {
        self.usage
    }

    /// How long the attempt has run.
    pub(super) fn ms(&self, now: Instant) -> u64 {
        self.started.map_or(0, |t| {
            u64::try_from(now.saturating_duration_since(t).as_millis()).unwrap_or(u64::MAX)
        })
    }

    /// An assistant message ended: its usage counts, and it is the one judged at the end.
    pub(super) fn assistant_ended(&mut self, message: Message) {
        if let Some(usage) = &message.usage {
            self.usage.add(usage);
        }
        self.last_assistant = Some(message);
    }

    pub(super) fn last_assistant(&self) -> Option<&Message> {
        self.last_assistant.as_ref()
    }

    pub(super) fn tool_started(&mut self) {
        self.tools_running += 1;
    }

    /// A tool ended; `true` when none is running any more.
    pub(super) fn tool_ended(&mut self) -> bool {
        self.tools_running = self.tools_running.saturating_sub(1);
        self.tools_since_prompt = true;
        self.tools_running == 0
    }

    /// No tool is running (a stream without progress is then a stall).
    pub(super) fn tools_idle(&self) -> bool {
        self.tools_running == 0
    }

    /// Pi settled: no tool runs any more, whatever was counted.
    pub(super) fn settled(&mut self) {
        self.tools_running = 0;
    }

    pub(super) fn tools_since_prompt(&self) -> bool {
        self.tools_since_prompt
    }

    pub(super) fn watchdog_fired(&mut self) {
        self.watchdog_fired = true;
    }

    /// Whether a watchdog aborted the attempt (asked once, when it is judged).
    pub(super) fn take_watchdog_fired(&mut self) -> bool {
        std::mem::take(&mut self.watchdog_fired)
    }

    pub(super) fn answered_empty(&mut self) {
        self.empty_answer = true;
    }

    pub(super) fn empty_answer(&self) -> bool {
        self.empty_answer
    }
}
