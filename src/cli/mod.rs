//! The command line: clap definition, the drop-in grammar checks clap cannot express, and the
//! run mode it selects. No I/O.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::error::ErrorKind;
use clap::{ArgAction, CommandFactory, Parser};

use crate::complexity::Complexity;
use crate::settings::{self, parse_decimal};
use clap_errors::clap_error;
use hints::{missing_requirement, unicode_dash};

mod clap_errors;
mod hints;

pub const USAGE: &str = "pi-ccswitch-run [options] [--] [@file ...] <prompt words ...>";

/// The text after the options in `--help`: attachments, the environment (from
/// [`settings::ENVIRONMENT`], the one list of variables and their defaults) and exit codes.
fn after_help() -> String {
    const ATTACHMENTS: &str = "\
Attachments:
  @path            a UTF-8 text file (wrapped as <file name=\"ABS PATH\">…</file>) or an image
                   (PNG, JPEG, GIF, WebP, recognised by signature); at most 20 MiB each, 20 images
  @-               standard input, read only when given, with the same rules (name \"stdin\")";
    const EXIT_CODES: &str = "\
Exit codes:
  0    success: a model gave a complete answer (or --help/--version)
  1    failover exhausted: no healthy candidate left, or the round window ran out
  2    usage, attachment, configuration or Pi/RPC error
  3    the --max-cost budget was reached: no new job or attempt was started
  124  the --timeout-ms deadline passed
  130  interrupted by SIGINT
  143  terminated by SIGTERM or SIGHUP";
    format!("{ATTACHMENTS}\n\n{}\n{EXIT_CODES}", environment_help())
}

/// `--help` is read in an 100-column terminal at most.
const HELP_WIDTH: usize = 100;

/// "Environment:" and one entry per variable: the name in a column, the description wrapped
/// beside it.
fn environment_help() -> String {
    let column = 2
        + settings::ENVIRONMENT
            .iter()
            .map(|v| v.name.len())
            .max()
            .unwrap_or(0)
        + 2;
    let mut out = String::from("Environment:\n");
    for v in settings::ENVIRONMENT {
        let mut line = format!("  {:width$}", v.name, width = column - 2);
        let words = v.meaning.split(' ').map(str::to_string);
        for word in words.chain(v.default_phrase()) {
            let starts_line = line.len() == column;
            if !starts_line && line.chars().count() + 1 + word.chars().count() > HELP_WIDTH {
                out.push_str(line.trim_end());
                out.push('\n');
                line = " ".repeat(column);
            } else if !starts_line {
                line.push(' ');
            }
            line.push_str(&word);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The files the runner reads and writes in the agent dir (for the man page).
pub const FILES: [(&str, &str); 4] = [
    (
        "$PI_CODING_AGENT_DIR/pi-ccswitch-run-state.json",
        "breaker health shared by every run on the machine (schema 1, atomic replace)",
    ),
    (
        "$PI_CODING_AGENT_DIR/pi-ccswitch-run-state.lock",
        "the advisory lock guarding it",
    ),
    (
        "$PI_CODING_AGENT_DIR/pi-ccswitch-run.log",
        "one redacted line per failure and switch (rotated at 512 KiB, 3 kept)",
    ),
    (
        "$PI_CODING_AGENT_DIR/models.json, auth.json",
        "Pi's own files; read only to learn the secret values to mask, never written",
    ),
];

/// Runs a prompt through `pi --mode rpc` and fails over to a healthy model when a provider
/// fails. Prints only the final answer on stdout.
#[derive(Debug, Parser)]
#[command(
    name = "pi-ccswitch-run",
    version,
    override_usage = USAGE,
    after_help = after_help(),
    args_override_self = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    /// Deadline in milliseconds for the run, or for each job in batch mode (exit 124 when it passes)
    #[arg(long, value_name = "MS", default_value = "600000", value_parser = parse_positive_ms, allow_hyphen_values = true)]
    pub timeout_ms: u64,

    /// Forwarded to Pi: disable all tools
    #[arg(long)]
    pub no_tools: bool,

    /// Forwarded to Pi: disable the built-in tools (read, bash, edit, write…)
    #[arg(long)]
    pub no_builtin_tools: bool,

    /// Forwarded to Pi: comma-separated allowlist of tools (e.g. read,ls)
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub tools: Option<String>,

    /// Forwarded to Pi: comma-separated denylist of tools (e.g. bash,write)
    #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
    pub exclude_tools: Option<String>,

    /// Forwarded to Pi: replace Pi's coding-assistant system prompt with TEXT
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    pub system_prompt: Option<String>,

    /// Forwarded to Pi: append TEXT to the system prompt (repeatable)
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true, action = ArgAction::Append)]
    pub append_system_prompt: Vec<String>,

    /// Forwarded to Pi: do not load AGENTS.md / CLAUDE.md
    #[arg(long)]
    pub no_context_files: bool,

    /// Forwarded to Pi: do not discover or load skills
    #[arg(long)]
    pub no_skills: bool,

    /// Forwarded to Pi: provider of the starting model
    #[arg(long, value_name = "P", allow_hyphen_values = true)]
    pub provider: Option<String>,

    /// Forwarded to Pi: starting model (pattern or provider/id[:thinking])
    #[arg(long, value_name = "M", allow_hyphen_values = true)]
    pub model: Option<String>,

    /// Forwarded to Pi: thinking level (off, minimal, low, medium, high, xhigh, max)
    #[arg(long, value_name = "L", allow_hyphen_values = true)]
    pub thinking: Option<String>,

    /// Comma-separated model patterns (Pi's syntax, resolved here); failover stays inside this scope
    #[arg(long, value_name = "PATTERNS", allow_hyphen_values = true)]
    pub models: Option<String>,

    /// Pick a thinking level from the task: auto, low, medium or high (--thinking wins)
    #[arg(
        long,
        value_name = "LEVEL",
        value_parser = PossibleValuesParser::new(Complexity::VALUES)
            .try_map(|s| s.parse::<Complexity>())
    )]
    pub task_complexity: Option<Complexity>,

    /// When every candidate is cooling down, wait for the first breaker to reopen (batch default)
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,

    /// Never wait for a breaker to reopen: end the run or job at once (single-run default)
    #[arg(long)]
    pub no_wait: bool,

    /// The most one run or job may wait in all — for breakers, stated resets, capacity slots, a busy key's back-off — e.g. 30s; then it fails (exit 1) (overrides CCSWITCH_MAX_WAIT)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg, allow_hyphen_values = true)]
    pub max_wait: Option<std::time::Duration>,

    /// Wait up to DURATION for the primary model when its provider states when its limit resets (or pauses it for capacity), instead of going to the backups, e.g. 10m (overrides CCSWITCH_PREFER_PRIMARY)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg, allow_hyphen_values = true)]
    pub prefer_primary: Option<std::time::Duration>,

    /// Spend cap: once this run's recorded cost reaches COST no new job or attempt starts (exit 3); PROVIDER=COST caps one provider (skipped once reached). Repeatable, comma-separated
    #[arg(long, value_name = "[PROVIDER=]COST", allow_hyphen_values = true, action = ArgAction::Append)]
    pub max_cost: Vec<String>,

    /// More diagnostics on stderr (-v: every failure and switch; -vv: debug)
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,

    /// The answer must be one JSON value valid against the JSON Schema in FILE; it is printed on one line. A non-conforming answer is asked again once, then fails over (class schema)
    #[arg(long, value_name = "FILE", allow_hyphen_values = true)]
    pub output_schema: Option<String>,

    /// Print one JSON object instead of the plain answer (batch mode always prints JSONL)
    #[arg(long)]
    pub json: bool,

    /// Show which model would serve and why, and the full candidate order; send nothing
    #[arg(long)]
    pub explain: bool,

    /// Share breaker health through Redis (overrides CCSWITCH_HEALTH_URL)
    #[arg(long, value_name = "URL", allow_hyphen_values = true)]
    pub health_url: Option<String>,

    /// Most requests in flight per provider, e.g. zhipu=3,dashscope=2 (overrides CCSWITCH_MAX_INFLIGHT); the learned limit never goes above it
    #[arg(long, value_name = "PROVIDER=N,…", action = ArgAction::Append, allow_hyphen_values = true)]
    pub max_inflight: Vec<String>,

    /// Show the health of every model (breakers, cooldowns, failures) and exit
    #[arg(long, group = "mode")]
    pub status: bool,

    /// Close the breakers of a model (provider/model) or of everything (all)
    #[arg(long, value_name = "MODEL|all", group = "mode")]
    pub reactivate: Option<String>,

    /// Exclude a model (provider/model) from every run until reactivated
    #[arg(long, value_name = "MODEL", group = "mode")]
    pub disable: Option<String>,

    /// Forget the health history of a model (provider/model) or of everything (all)
    #[arg(long, value_name = "MODEL|all", group = "mode")]
    pub reset: Option<String>,

    /// Check pi, Node, the agent dir, the health store, the models and the tools, then exit
    #[arg(long, group = "mode")]
    pub doctor: bool,

    /// Run the JSONL jobs in FILE (`-` = stdin); print one JSONL result per job, in order
    #[arg(long, value_name = "FILE", group = "mode", allow_hyphen_values = true)]
    pub batch: Option<String>,

    /// Batch workers, each with its own Pi process (default: number of CPUs)
    #[arg(long, value_name = "N", requires = "batch", value_parser = parse_jobs)]
    pub jobs: Option<usize>,

    /// Batch results go to FILE (appended, one flushed line per finished job) instead of stdout
    #[arg(
        long,
        value_name = "FILE",
        requires = "batch",
        allow_hyphen_values = true
    )]
    pub output: Option<String>,

    /// Skip the jobs that already have a success in --output FILE; run the rest
    #[arg(long, requires = "output")]
    pub resume: bool,

    /// With --resume: run again the jobs whose recorded failure was in their input (bad attachment content, too large for every model, invalid lines)
    #[arg(long, requires = "resume")]
    pub retry_failed: bool,

    /// With --resume: run again the answered jobs whose attachments changed since their answer
    #[arg(long, requires = "resume")]
    pub rerun_changed: bool,

    /// With --resume: also count the results recorded in FILE (another shard's, an earlier setup's), read before --output's (repeatable)
    #[arg(
        long,
        value_name = "FILE",
        requires = "resume",
        allow_hyphen_values = true,
        action = ArgAction::Append
    )]
    pub resume_from: Vec<String>,

    /// Exit 0 when the only jobs without an answer failed permanently, in their own input (still listed on stderr and in the results)
    #[arg(long, requires = "batch")]
    pub permanent_ok: bool,

    /// Run only shard I of N (0 <= I < N), chosen by a stable hash of each job's id
    #[arg(
        long,
        value_name = "I/N",
        requires = "batch",
        allow_hyphen_values = true
    )]
    pub shard: Option<String>,

    /// Print the completion script for SHELL (bash, zsh, fish, powershell, elvish) and exit
    #[arg(long, value_name = "SHELL", group = "mode", value_parser = clap::value_parser!(clap_complete::Shell))]
    pub completions: Option<clap_complete::Shell>,

    /// Ignored (accepted for compatibility with the old runner)
    #[arg(short = 'p', long = "print", hide = true)]
    pub print: bool,

    /// Ignored (sessions are always ephemeral)
    #[arg(long, hide = true)]
    pub no_session: bool,

    /// Ignored (extensions are always disabled)
    #[arg(long, hide = true)]
    pub no_extensions: bool,

    /// Attachments (`@path`, `@-` for stdin) and prompt words
    #[arg(value_name = "WORDS", allow_hyphen_values = false)]
    pub words: Vec<String>,

    /// PromptRule words after `--` (taken literally, even `--help` or `@x`)
    #[arg(last = true, value_name = "LITERAL", hide = true)]
    pub literal: Vec<String>,
}

/// A usage error: one line naming the offending argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// What the command line asks for, after parsing.
#[derive(Debug)]
pub enum Parsed {
    /// `--help` / `--version`: print this text on stdout, exit 0.
    Info(String),
    Run(Box<Invocation>),
}

/// The Pi flags that decide what a prompt runs under: its system prompt and its tools. Batch
/// jobs may override them (`system`, `tools`), so they are kept apart from the other flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    pub no_tools: bool,
    pub no_builtin_tools: bool,
    pub tools: Option<String>,
    pub exclude_tools: Option<String>,
    pub system_prompt: Option<String>,
    pub append_system_prompt: Vec<String>,
}

impl Profile {
    /// The flags Pi gets for this profile, in a fixed order.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if self.no_tools {
            args.push("--no-tools".to_string());
        }
        if self.no_builtin_tools {
            args.push("--no-builtin-tools".to_string());
        }
        for (flag, value) in [
            ("--tools", &self.tools),
            ("--exclude-tools", &self.exclude_tools),
            ("--system-prompt", &self.system_prompt),
        ] {
            if let Some(v) = value {
                args.push(flag.to_string());
                args.push(v.clone());
            }
        }
        for text in &self.append_system_prompt {
            args.push("--append-system-prompt".to_string());
            args.push(text.clone());
        }
        args
    }
}

/// A validated invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub timeout_ms: u64,
    /// Flags forwarded to Pi other than the [`Profile`], in a fixed order.
    pub base_args: Vec<String>,
    /// System prompt and tool flags forwarded to Pi.
    pub profile: Profile,
    /// `@path` attachments, as written (without the `@`); `-` is standard input.
    pub files: Vec<String>,
    /// The prompt words joined by one space.
    pub prompt: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub models_scope: Option<String>,
    pub thinking: Option<String>,
    pub task_complexity: Option<Complexity>,
    /// `--wait` (Some(true)) / `--no-wait` (Some(false)); `None`: the mode's default.
    pub wait: Option<bool>,
    pub verbose: u8,
    pub json: bool,
    pub health_url: Option<String>,
    /// `--max-inflight`, when given (it replaces `CCSWITCH_MAX_INFLIGHT` whole).
    pub max_inflight: Option<std::collections::BTreeMap<String, u32>>,
    /// `--max-cost`: this process's spend caps (none when not given).
    pub budget: crate::budget::Caps,
    /// `--max-wait`, when given (it replaces `CCSWITCH_MAX_WAIT`).
    pub max_wait: Option<std::time::Duration>,
    /// `--prefer-primary`, when given (it replaces `CCSWITCH_PREFER_PRIMARY`).
    pub prefer_primary: Option<std::time::Duration>,
    /// `--output-schema`: the answers must validate against this schema file.
    pub output_schema: Option<PathBuf>,
    pub mode: Mode,
}

impl Invocation {
    /// Every flag forwarded to Pi for a plain run: the base flags, then the profile's.
    pub fn pi_args(&self) -> Vec<String> {
        let mut args = self.profile.args();
        args.extend(self.base_args.iter().cloned());
        args
    }
}

/// What the invocation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Answer the prompt.
    Run,
    /// `--explain`: everything up to the first request, then say what would happen.
    Explain,
    /// `--batch FILE` (`-` = stdin).
    Batch(BatchArgs),
    /// A health management command.
    Manage(Manage),
}

/// `--status`, `--reactivate`, `--disable`, `--reset`, `--doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Manage {
    Status,
    Reactivate(ManageTarget),
    Disable(String),
    Reset(ManageTarget),
    Doctor,
}

/// A management target: one `provider/model`, or every record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManageTarget {
    All,
    Model(String),
}

impl std::fmt::Display for ManageTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManageTarget::All => f.write_str("all"),
            ManageTarget::Model(m) => f.write_str(m),
        }
    }
}

/// The batch flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchArgs {
    /// The job file; `-` is standard input.
    pub file: String,
    pub jobs: Option<usize>,
    pub output: Option<PathBuf>,
    pub resume: bool,
    /// `--retry-failed`: recorded failures in the input itself are run again.
    pub retry_failed: bool,
    /// `--rerun-changed`: answered jobs whose files changed are run again.
    pub rerun_changed: bool,
    /// `--resume-from`: earlier result files read before `--output`.
    pub resume_from: Vec<PathBuf>,
    /// `--permanent-ok`: failures in the input itself do not make the exit code.
    pub permanent_ok: bool,
    pub shard: Option<Shard>,
}

/// `--shard I/N`: this process runs the jobs whose id hashes to `index` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

fn parse_jobs(s: &str) -> Result<usize, String> {
    match parse_decimal(s).and_then(|n| usize::try_from(n).ok()) {
        Some(n) if (1..=256).contains(&n) => Ok(n),
        _ => Err("must be a whole number from 1 to 256".to_string()),
    }
}

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, String> {
    settings::parse_duration(s)
}

fn parse_positive_ms(s: &str) -> Result<u64, String> {
    match parse_decimal(s) {
        Some(n) if n > 0 => Ok(n),
        _ => Err("must be a positive integer".to_string()),
    }
}

/// `I/N` with `0 <= I < N`.
fn parse_shard(s: &str) -> Result<Shard, UsageError> {
    let bad = || {
        UsageError(format!(
            "--shard expects I/N with whole numbers 0 <= I < N, e.g. 0/4 (got '{s}')"
        ))
    };
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count) = (
        parse_decimal(i).ok_or_else(bad)?,
        parse_decimal(n).ok_or_else(bad)?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

/// Parses argv (including argv[0]). A usage error is always one line: values echoed in it have
/// their control characters escaped.
pub fn parse<I, T>(args: I) -> Result<Parsed, UsageError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    parse_raw(args).map_err(|UsageError(text)| UsageError(crate::redact::printable(&text)))
}

fn parse_raw<I, T>(args: I) -> Result<Parsed, UsageError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Some(err) = unicode_dash(&args, Cli::command) {
        return Err(UsageError(err));
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            if e.kind() == ErrorKind::MissingRequiredArgument
                && let Some(err) = missing_requirement(&args)
            {
                return Err(UsageError(err));
            }
            return match clap_error(&e) {
                Some(usage) => Err(UsageError(usage)),
                None => {
                    // Like the old runner, scanning stops at `--help`, but a bad argument
                    // before it still wins (`@ --help` is an error, not help).
                    if e.kind() == ErrorKind::DisplayHelp
                        && let Some(err) = error_before_help(&args)
                    {
                        return Err(err);
                    }
                    Ok(Parsed::Info(e.to_string()))
                }
            };
        }
    };
    if let Some(shell) = cli.completions {
        return completions(shell, &args).map(Parsed::Info);
    }
    cli.into_invocation(PromptRule::Required)
        .map(|inv| Parsed::Run(Box::new(inv)))
}

/// `--completions SHELL`: the script `completions/` holds for SHELL, generated from the
/// command definition. Alone: another flag or a prompt beside it is a usage error.
fn completions(shell: clap_complete::Shell, args: &[OsString]) -> Result<String, UsageError> {
    let given = args
        .iter()
        .skip(1)
        .filter(|a| !a.to_string_lossy().starts_with("--completions"))
        .count();
    // `--completions bash` is two arguments, `--completions=bash` one.
    let value_apart = args.iter().any(|a| a == "--completions");
    if given > usize::from(value_apart) {
        return Err(UsageError(
            "--completions prints a completion script; give it alone (e.g. --completions bash)"
                .to_string(),
        ));
    }
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "pi-ccswitch-run", &mut out);
    String::from_utf8(out).map_err(|_| UsageError("the completion script is not UTF-8".into()))
}

/// Whether the command line asks for `--json` (before any `--`), whether or not it parses: a
/// usage error then prints a result record too.
pub fn json_asked(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Whether a run without prompt words is an error: not when only the arguments before
/// `--help` are checked (help needs no prompt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PromptRule {
    Required,
    Optional,
}

/// The usage error among the arguments before the first `-h`/`--help`, if any (a missing
/// prompt does not count: help needs none).
fn error_before_help(args: &[OsString]) -> Option<UsageError> {
    let at = args
        .iter()
        .take_while(|a| *a != "--")
        .position(|a| a == "-h" || a == "--help")?;
    let prefix = &args[..at];
    match Cli::try_parse_from(prefix) {
        Err(e) => clap_error(&e).map(UsageError),
        Ok(cli) => cli.into_invocation(PromptRule::Optional).err(),
    }
}

/// A forwarded value must be present, non-empty and not look like the next flag.
fn checked(flag: &str, value: Option<String>) -> Result<Option<String>, UsageError> {
    match value {
        Some(v) if v.is_empty() || v.starts_with("--") => {
            Err(UsageError(format!("{flag} requires a value")))
        }
        other => Ok(other),
    }
}

impl Cli {
    fn into_invocation(self, prompt: PromptRule) -> Result<Invocation, UsageError> {
        let provider = checked("--provider", self.provider)?;
        let model = checked("--model", self.model)?;
        let thinking = checked("--thinking", self.thinking)?;
        let models = checked("--models", self.models)?;
        // Pi enables a `--tools` list even under `--no-tools`: refuse the pair rather than let
        // the flag that reads safer lose.
        if self.no_tools && self.tools.is_some() {
            return Err(UsageError(
                "--no-tools and --tools contradict each other (Pi would enable the --tools list); give one".into(),
            ));
        }
        let profile = Profile {
            no_tools: self.no_tools,
            no_builtin_tools: self.no_builtin_tools,
            tools: checked("--tools", self.tools)?,
            exclude_tools: checked("--exclude-tools", self.exclude_tools)?,
            system_prompt: checked("--system-prompt", self.system_prompt)?,
            append_system_prompt: self
                .append_system_prompt
                .into_iter()
                .map(|v| checked("--append-system-prompt", Some(v)).map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?,
        };
        let mut base_args = Vec::new();
        if self.no_context_files {
            base_args.push("--no-context-files".to_string());
        }
        if self.no_skills {
            base_args.push("--no-skills".to_string());
        }
        // Pi 1.6.0 refuses `--provider` without `--model` and 0.84.4 ignores an unknown one;
        // alone, the runner picks the provider's model itself (see `failover::start`).
        // `--models` is not forwarded either: the runner resolves the scope and picks the start
        // model as Pi would, and Pi 0.84.4's own matcher can spend minutes on a glob such as
        // `*a*a*a*a*a*a*a*b` against a long id.
        let forwarded_provider = if model.is_some() { &provider } else { &None };
        for (flag, value) in [
            ("--provider", forwarded_provider),
            ("--model", &model),
            ("--thinking", &thinking),
        ] {
            if let Some(v) = value {
                base_args.push(flag.to_string());
                base_args.push(v.clone());
            }
        }
        let health_url = checked("--health-url", self.health_url)?;
        let output_schema = match checked("--output-schema", self.output_schema)? {
            Some(f) if f == "-" => {
                return Err(UsageError(
                    "--output-schema takes a file (standard input may carry the prompt's @-)"
                        .to_string(),
                ));
            }
            other => other.map(PathBuf::from),
        };
        let max_inflight = if self.max_inflight.is_empty() {
            None
        } else {
            let joined = self.max_inflight.join(",");
            Some(
                crate::capacity::caps::parse_caps(&joined)
                    .map_err(|e| UsageError(format!("--max-inflight: {e}")))?,
            )
        };
        let budget = crate::budget::Caps::parse(&self.max_cost).map_err(UsageError)?;
        if let Some(url) = &health_url
            && !["redis://", "rediss://", "unix://"]
                .iter()
                .any(|s| url.starts_with(s))
        {
            return Err(UsageError(
                "--health-url expects redis://…, rediss://… or unix:///path (see --help)"
                    .to_string(),
            ));
        }
        let mode = if self.status {
            Mode::Manage(Manage::Status)
        } else if self.doctor {
            Mode::Manage(Manage::Doctor)
        } else if let Some(m) = &self.reactivate {
            Mode::Manage(Manage::Reactivate(target("--reactivate", m)?))
        } else if let Some(m) = &self.disable {
            match target("--disable", m)? {
                ManageTarget::Model(m) => Mode::Manage(Manage::Disable(m)),
                ManageTarget::All => {
                    return Err(UsageError(format!(
                        "--disable expects provider/model (got '{m}')"
                    )));
                }
            }
        } else if let Some(m) = &self.reset {
            Mode::Manage(Manage::Reset(target("--reset", m)?))
        } else if let Some(f) = self.batch {
            if f.is_empty() || f.starts_with("--") {
                return Err(UsageError("--batch requires a value".to_string()));
            }
            let output = checked("--output", self.output)?.map(PathBuf::from);
            let shard = match checked("--shard", self.shard)? {
                Some(s) => Some(parse_shard(&s)?),
                None => None,
            };
            let resume_from = self
                .resume_from
                .into_iter()
                .map(|f| {
                    checked("--resume-from", Some(f)).map(|f| PathBuf::from(f.unwrap_or_default()))
                })
                .collect::<Result<_, _>>()?;
            Mode::Batch(BatchArgs {
                file: f,
                jobs: self.jobs,
                output,
                resume: self.resume,
                retry_failed: self.retry_failed,
                rerun_changed: self.rerun_changed,
                resume_from,
                permanent_ok: self.permanent_ok,
                shard,
            })
        } else if self.explain {
            Mode::Explain
        } else {
            Mode::Run
        };
        if output_schema.is_some() && matches!(mode, Mode::Manage(_)) {
            return Err(UsageError(
                "--output-schema applies to a run, --explain or --batch, not to a management flag"
                    .to_string(),
            ));
        }
        if self.explain && !matches!(mode, Mode::Explain) {
            return Err(UsageError(
                "--explain explains a single run; it cannot be combined with --batch or a \
                 management flag"
                    .to_string(),
            ));
        }
        let mut files = Vec::new();
        let mut words = Vec::new();
        for w in self.words {
            if w == "-" {
                return Err(UsageError(
                    "unsupported option: - (to attach standard input, write @-)".to_string(),
                ));
            }
            match w.strip_prefix('@') {
                Some("") => return Err(UsageError("@file requires a path".to_string())),
                Some("-") if files.iter().any(|f| f == "-") => {
                    return Err(UsageError(
                        "@- is given twice; standard input can be attached once".to_string(),
                    ));
                }
                Some(path) => files.push(path.to_string()),
                None => words.push(w),
            }
        }
        words.extend(self.literal);
        match &mode {
            Mode::Run | Mode::Explain => {
                // Blank words are no prompt either (found by the random-argv property).
                if prompt == PromptRule::Required && words.iter().all(|w| w.trim().is_empty()) {
                    return Err(UsageError("a prompt is required".to_string()));
                }
            }
            Mode::Batch(_) if !words.is_empty() || !files.is_empty() => {
                return Err(UsageError(
                    "--batch takes its prompts from the job file, not the command line".to_string(),
                ));
            }
            Mode::Manage(_) if !words.is_empty() || !files.is_empty() => {
                return Err(UsageError(
                    "management flags take no prompt (put prompt words after --)".to_string(),
                ));
            }
            Mode::Batch(_) | Mode::Manage(_) => {}
        }
        let wait = match (self.wait, self.no_wait) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            (true, true) => {
                return Err(UsageError(
                    "--wait and --no-wait contradict each other".to_string(),
                ));
            }
            (false, false) => None,
        };
        Ok(Invocation {
            timeout_ms: self.timeout_ms,
            base_args,
            profile,
            files,
            prompt: words.join(" "),
            provider,
            model,
            models_scope: models,
            thinking,
            task_complexity: self.task_complexity,
            wait,
            verbose: self.verbose,
            json: self.json,
            health_url,
            max_inflight,
            budget,
            max_wait: self.max_wait,
            prefer_primary: self.prefer_primary,
            output_schema,
            mode,
        })
    }
}

/// `provider/model` or `all`.
fn target(flag: &str, value: &str) -> Result<ManageTarget, UsageError> {
    let v = value.trim();
    if v == "all" {
        return Ok(ManageTarget::All);
    }
    match v.split_once('/') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() && !v.starts_with('-') => {
            Ok(ManageTarget::Model(v.to_string()))
        }
        _ => Err(UsageError(format!(
            "{flag} expects provider/model{} (got '{value}')",
            if flag == "--disable" { "" } else { " or all" }
        ))),
    }
}

/// The clap command, for completions, the man page and the help test.
pub fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests;
