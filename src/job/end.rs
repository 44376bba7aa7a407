//! How a job ended, typed all the way from the failover machine to the printer: an answer, an
//! explanation, failover run out, a stop, or one of the ways a run cannot go on. Facts only —
//! the sentences a user reads are `Display` of the reasons and `output`'s wording; which exit
//! code an ending means is `output`'s too.

use std::process::ExitStatus;

use crate::agent::SpawnError;
use crate::attach::{AttachError, Prepared};
use crate::failover::{Attempt, Outcome};
use crate::signals::Interrupt;

/// How one job ended: what the failover machine came to, carried as it is, or one of the ways
/// a job ends around the machine.
#[derive(Debug)]
pub enum JobEnd {
    /// The machine ended the job: an answer, an explanation, failover run out, an empty
    /// answer, out of budget (a batch leaves the job unrecorded, so `--resume` runs it), a
    /// configuration that cannot work (stops a batch), or Pi misbehaving. Never
    /// [`Outcome::Aborted`]: a job the machine aborted was stopped ([`JobEnd::Stopped`]).
    Machine(Outcome),
    /// The job was stopped before it ended by itself.
    Stopped(Stop),
    /// Pi exited (or spoke garbage) during the job: the session cannot be reused.
    PiLost(PiLoss),
    /// Pi could not be started at all.
    NotStarted(SpawnError),
    /// The attachments could not be made into a message.
    Unprepared(Unprepared),
    /// A batch line that is not a job (the message names the input line).
    InvalidLine(String),
}

/// Why a job was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Signal(Interrupt),
    /// `--timeout-ms` passed.
    Deadline,
    /// The batch is stopping (a setup problem elsewhere): the job records nothing.
    Halt,
}

/// What reading a job's input (its attachments, its schema) came to when it was not a message
/// to send.
#[derive(Debug)]
pub enum Unprepared {
    /// An attachment is unusable (with why). When the problem is in its content, the content
    /// hash of the job's files, so `--resume` can tell when they change.
    Attachment {
        error: AttachError,
        content_hash: Option<u64>,
    },
    /// Every attachment was empty: nothing to send (a single run and a batch job alike).
    AllEmpty(Prepared),
    /// The deadline (of `timeout_ms`) passed while reading.
    Deadline { timeout_ms: u64 },
    /// The reading thread went away (it does not panic, but).
    Lost(String),
    /// The job's schema file (`schema`) cannot be used: nothing is sent. Not permanent: the
    /// file is read again when `--resume` runs the job, at no cost.
    Schema(super::BadSchema),
}

/// What is known about a Pi that went away.
#[derive(Debug)]
pub struct PiLoss {
    /// Its stdout carried a line that is not Pi's protocol (the reason), else it ended.
    pub malformed: Option<String>,
    pub status: Option<ExitStatus>,
    /// Pi's own error line from its stderr (its start-up error), redacted later.
    pub error_line: String,
    /// Pi's stderr says the `node` on PATH is too old for Pi.
    pub old_node: Option<OldNode>,
    /// Pi answered at least one command before it went: it started.
    pub answered: bool,
    /// The tail of Pi's stderr (shown only as `error_line`, redacted).
    pub stderr: String,
}

/// The `node` on PATH is too old for Pi.
#[derive(Debug)]
pub struct OldNode {
    /// What `node --version` printed, when it did.
    pub version: Option<String>,
}

/// A job's ending and the facts around it: what every output of a job is made from.
#[derive(Debug)]
pub struct Ended {
    pub end: JobEnd,
    /// Every attempt, in order (the one that answered last, without a failure).
    pub attempts: Vec<Attempt>,
    pub switches: u32,
    /// Models that failed this run, in the order they failed.
    pub tried: Vec<String>,
    pub elapsed_ms: u64,
    /// How long the job waited for a capacity slot (its providers were at their limits).
    pub capacity_wait_ms: u64,
    /// How long the job waited in all: for breakers, stated resets, capacity slots and busy
    /// keys' back-off (`--max-wait` bounds it).
    pub wait_ms: u64,
    /// Of which for its primary (`--prefer-primary`).
    pub primary_wait_ms: u64,
    /// The model the run started from (`provider/id`), once it chose one.
    pub start_model: Option<String>,
    /// SHA-256 of each attachment, in order, when they were read.
    pub digests: Vec<[u8; 32]>,
    /// The job's content hash (see `attach::digest`), when its attachments could be read.
    pub content_hash: Option<u64>,
}

impl Ended {
    /// An ending with nothing around it (before any attempt).
    pub fn bare(end: JobEnd) -> Ended {
        Ended {
            end,
            attempts: Vec::new(),
            switches: 0,
            tried: Vec::new(),
            elapsed_ms: 0,
            capacity_wait_ms: 0,
            wait_ms: 0,
            primary_wait_ms: 0,
            start_model: None,
            digests: Vec::new(),
            content_hash: None,
        }
    }

    /// The failure is in the input itself: it fails the same way until the input changes
    /// (`--resume` does not run it again).
    pub fn permanent(&self) -> bool {
        match &self.end {
            JobEnd::Machine(Outcome::Exhausted { too_large, .. }) => *too_large,
            JobEnd::Unprepared(Unprepared::Attachment { error, .. }) => error.in_content,
            JobEnd::Unprepared(Unprepared::AllEmpty(_)) | JobEnd::InvalidLine(_) => true,
            _ => false,
        }
    }

    /// Tokens and cost of the attempt that answered (zero without an answer).
    pub fn answer_usage(&self) -> crate::rpc::Usage {
        if !matches!(self.end, JobEnd::Machine(Outcome::Answer { .. })) {
            return crate::rpc::Usage::default();
        }
        self.attempts
            .iter()
            .rev()
            .find(|a| a.failure.is_none())
            .map(|a| a.usage)
            .unwrap_or_default()
    }

    /// Tokens and cost of every attempt that did not answer.
    pub fn failed_usage(&self) -> crate::rpc::Usage {
        let mut total = crate::rpc::Usage::default();
        for a in self.attempts.iter().filter(|a| a.failure.is_some()) {
            total.add(&a.usage);
        }
        total
    }
}
