//! How a run can end other than with an answer, as values: why failover ran out, what Pi did
//! that the run cannot go on from, why a run cannot start at all. Each has the sentence a user
//! reads (`Display`); which exit code it means is `output`'s business. Pure.

/// Pi can use no model at all.
const NO_USABLE_MODEL: &str = "Pi has no usable model: no provider has credentials (check \
models.json, auth.json and the API key variables, and that the agent dir is readable and \
writable; --doctor checks them)";

/// Why a run cannot start: what the user selected does not exist in Pi's registry (exit 2,
/// before anything is sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupProblem {
    NoUsableModel,
    NoCurrentModel,
    /// `--models` selected nothing; `closest`: the available models nearest the patterns.
    EmptyScope {
        patterns: String,
        closest: Vec<String>,
    },
    UnknownProvider {
        given: String,
        closest: Vec<String>,
    },
    /// `--max-inflight` (or `CCSWITCH_MAX_INFLIGHT`) caps a provider Pi has no available model of.
    UnknownCapProvider {
        given: String,
        closest: Vec<String>,
    },
    /// `--max-cost PROVIDER=AMOUNT` names a provider with no available model.
    UnknownBudgetProvider {
        given: String,
        closest: Vec<String>,
    },
    /// Pi refused to start on the `--model` given (`Error: Model "x" not found`); `closest`:
    /// the models a Pi without it lists, nearest first.
    PiRefusedModel {
        wanted: String,
        closest: Vec<String>,
    },
    /// `--model` names no available model: Pi would send `sent_id` to `provider` anyway.
    UnknownModel {
        wanted: String,
        sent_id: String,
        provider: String,
        closest: Vec<String>,
    },
}

impl std::fmt::Display for SetupProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupProblem::NoUsableModel => f.write_str(NO_USABLE_MODEL),
            SetupProblem::NoCurrentModel => {
                f.write_str("Pi reported no current model (check models.json and credentials)")
            }
            SetupProblem::EmptyScope { patterns, closest } => write!(
                f,
                "--models '{patterns}' selects none of Pi's available models, so nothing would \
                 be sent; available: {} (pi-ccswitch-run --status lists them all)",
                listing(closest)
            ),
            SetupProblem::UnknownProvider { given, closest } => write!(
                f,
                "unknown provider '{given}': no available model has it; providers with \
                 available models: {}",
                listing(closest)
            ),
            SetupProblem::UnknownCapProvider { given, closest } => write!(
                f,
                "--max-inflight names provider '{given}', which has no available model; \
                 providers with available models: {}",
                listing(closest)
            ),
            SetupProblem::UnknownBudgetProvider { given, closest } => write!(
                f,
                "--max-cost {given}=…: unknown provider '{given}': no available model has it; \
                 providers with available models: {}",
                listing(closest)
            ),
            SetupProblem::PiRefusedModel { wanted, closest } => write!(
                f,
                "unknown model '{wanted}': Pi has no such model; closest available: {} \
                 (pi-ccswitch-run --status lists every model)",
                listing(closest)
            ),
            SetupProblem::UnknownModel {
                wanted,
                sent_id,
                provider,
                closest,
            } => write!(
                f,
                "unknown model '{wanted}': Pi would send '{sent_id}' to {provider} as a custom \
                 model id; closest available: {}",
                listing(closest)
            ),
        }
    }
}

fn listing(names: &[String]) -> String {
    const SHOWN: usize = 12;
    if names.is_empty() {
        return "none".to_string();
    }
    let mut text = names[..names.len().min(SHOWN)].join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(", … ({} more)", names.len() - SHOWN));
    }
    text
}

/// Why failover ran out (exit 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exhaustion {
    /// No candidate is left this round (waiting may cure it).
    NoCandidate,
    /// The request has images and no model that takes images is usable.
    NoImageModel,
    /// The round window passed while providers kept failing.
    RoundWindow { limit_ms: u64 },
    /// The run was interrupted while a failure was being judged.
    Interrupted,
    /// The run waited all `--max-wait` allows (or would have had to wait longer for what it
    /// waited for) and ends with the failure it waited out.
    MaxWait { limit_ms: u64 },
}

impl std::fmt::Display for Exhaustion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exhaustion::NoCandidate => f.write_str("no healthy candidate left"),
            Exhaustion::NoImageModel => {
                f.write_str("no healthy image-capable model available for a request with images")
            }
            Exhaustion::RoundWindow { limit_ms } => {
                write!(f, "the failover round window of {limit_ms} ms ran out")
            }
            Exhaustion::Interrupted => f.write_str("interrupted"),
            Exhaustion::MaxWait { limit_ms } => write!(
                f,
                "no candidate is usable within --max-wait {}",
                super::reopen::human_ms(*limit_ms)
            ),
        }
    }
}

/// Pi did something the run cannot go on from (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fatal {
    /// Pi could not parse a command of ours.
    Unparsed(String),
    ModelsFailed(String),
    /// An extension took the prompt: there is no answer to print.
    HandledByExtension,
    NoForkMessage,
    ForkFailed(String),
    NewSessionFailed(String),
    /// Pi refused the prompt for another reason than a missing or bad key.
    PromptRejected(String),
    /// No answer to a command within this many seconds.
    Unresponsive {
        secs: u64,
    },
    /// Pi did not settle within this many seconds after `abort`.
    AbortIgnored {
        secs: u64,
    },
    /// Pi settled without any current model.
    NoModel,
}

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fatal::Unparsed(e) => write!(f, "Pi could not parse a command: {e}"),
            Fatal::ModelsFailed(e) => write!(f, "get_available_models failed: {e}"),
            Fatal::HandledByExtension => {
                f.write_str("Pi handed the prompt to an extension; there is no answer to print")
            }
            Fatal::NoForkMessage => f.write_str("Pi returned no user message to fork from"),
            Fatal::ForkFailed(e) => write!(f, "Pi could not fork the session: {e}"),
            Fatal::NewSessionFailed(e) => write!(f, "Pi could not start a fresh session: {e}"),
            Fatal::PromptRejected(e) => write!(f, "Pi rejected the prompt: {e}"),
            Fatal::Unresponsive { secs } => {
                write!(
                    f,
                    "Pi did not answer a command within {secs} s (is it wedged?)"
                )
            }
            Fatal::AbortIgnored { secs } => {
                write!(f, "Pi did not stop within {secs} s after abort")
            }
            Fatal::NoModel => f.write_str("Pi settled without a model"),
        }
    }
}
