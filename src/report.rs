//! What a run (or one batch job) came to: the exit, the answer, every attempt with its usage, the
//! retry hint, or the explanation. Pure data; `output` prints it (plain, `--json`, JSONL).

use crate::catalog::ModelInfo;
use crate::exit::Exit;
use crate::failover::Attempt;
use crate::failover::explain::Explanation;
use crate::failover::reopen::RetryHint;
use crate::rpc::Usage;

#[derive(Debug, Clone)]
pub struct Report {
    pub exit: Exit,
    /// The answer, when there is one.
    pub answer: Option<String>,
    pub model: Option<ModelInfo>,
    /// One line for stderr explaining a non-zero exit.
    pub error: Option<String>,
    pub attempts: Vec<Attempt>,
    pub switches: u32,
    pub elapsed_ms: u64,
    /// Pi died (or spoke garbage) during the job: the session cannot be reused.
    pub pi_lost: bool,
    /// Pi could not even start (not found, too old a Node, dead before its first answer).
    pub pi_start_failed: bool,
    /// The configuration cannot work (scope selects nothing, unknown provider or model): no
    /// other job of a batch can fare better.
    pub setup: bool,
    /// For an exhausted run: is trying again later worthwhile, and when.
    pub retry: Option<RetryHint>,
    /// `--explain`.
    pub explanation: Option<Box<Explanation>>,
    /// The failure is in the input itself (its attachments' content, a request too large for
    /// every model): it will fail again until the input changes (`--resume` skips it).
    pub permanent: bool,
    /// SHA-256 of each attachment, in order, when they were read.
    pub digests: Vec<[u8; 32]>,
    /// The job's content hash (see `attach::digest`), when its attachments could be read.
    pub content_hash: Option<u64>,
}

impl Report {
    pub fn new(elapsed_ms: u64) -> Report {
        Report {
            exit: Exit::Error,
            answer: None,
            model: None,
            error: None,
            attempts: Vec::new(),
            switches: 0,
            elapsed_ms,
            pi_lost: false,
            pi_start_failed: false,
            setup: false,
            retry: None,
            explanation: None,
            permanent: false,
            digests: Vec::new(),
            content_hash: None,
        }
    }

    /// A report for a job that never reached Pi.
    pub fn failed(exit: Exit, error: String) -> Report {
        let mut r = Report::new(0);
        r.exit = exit;
        r.error = Some(error);
        r
    }

    /// Tokens and cost of the attempt that answered (zero without an answer).
    pub fn answer_usage(&self) -> Usage {
        self.attempts
            .iter()
            .rev()
            .find(|a| a.failure.is_none() && self.exit == Exit::Success)
            .map(|a| a.usage)
            .unwrap_or_default()
    }

    /// Tokens and cost of every attempt that did not answer.
    pub fn failed_usage(&self) -> Usage {
        let mut total = Usage::default();
        for a in self.attempts.iter().filter(|a| a.failure.is_some()) {
            total.add(&a.usage);
        }
        total
    }

    /// Everything this job cost.
    pub fn total_usage(&self) -> Usage {
        let mut total = self.answer_usage();
        total.add(&self.failed_usage());
        total
    }
}
