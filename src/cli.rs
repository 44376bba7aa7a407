//! The command line: clap definition, the drop-in grammar checks clap cannot express, and the
//! run mode it selects. No I/O.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, CommandFactory, Parser};

pub const USAGE: &str = "pi-ccswitch-run [options] [--] [@file ...] <prompt words ...>";

const AFTER_HELP: &str = "\
Attachments:
  @path            a UTF-8 text file (wrapped as <file name=\"ABS PATH\">…</file>) or an image
                   (PNG, JPEG, GIF, WebP, recognised by signature); at most 20 MiB each, 20 images

Environment:
  PI_BIN                      the real `pi` executable (default: `pi` on PATH)
  PI_CODING_AGENT_DIR         Pi's agent directory (default: ~/.pi/agent); health state lives here
  CCSWITCH_ROUND_LIMIT_MS     failover round window (default 480000)
  CCSWITCH_FIRST_RESPONSE_MS  watchdog: no first response from the model (default 90000)
  CCSWITCH_STALL_MS           watchdog: no stream progress (default 120000)
  CCSWITCH_COOLDOWN_SCALE     multiply every breaker cooldown by this factor, 0-1 (default 1)

Exit codes:
  0    success: a model gave a complete answer (or --help/--version)
  1    failover exhausted: no healthy candidate left, or the round window ran out
  2    usage, attachment, configuration or Pi/RPC error
  124  the --timeout-ms deadline passed
  130  interrupted by SIGINT (143: SIGTERM)";

/// Runs a prompt through `pi --mode rpc` and fails over to a healthy model when a provider
/// fails. Prints only the final answer on stdout.
#[derive(Debug, Parser)]
#[command(
    name = "pi-ccswitch-run",
    version,
    override_usage = USAGE,
    after_help = AFTER_HELP,
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

    /// Forwarded to Pi: do not load AGENTS.md / CLAUDE.md
    #[arg(long)]
    pub no_context_files: bool,

    /// Forwarded to Pi: provider of the starting model
    #[arg(long, value_name = "P", allow_hyphen_values = true)]
    pub provider: Option<String>,

    /// Forwarded to Pi: starting model (pattern or provider/id[:thinking])
    #[arg(long, value_name = "M", allow_hyphen_values = true)]
    pub model: Option<String>,

    /// Forwarded to Pi: thinking level (off, minimal, low, medium, high, xhigh, max)
    #[arg(long, value_name = "L", allow_hyphen_values = true)]
    pub thinking: Option<String>,

    /// Forwarded to Pi: comma-separated model patterns; failover stays inside this scope
    #[arg(long, value_name = "PATTERNS", allow_hyphen_values = true)]
    pub models: Option<String>,

    /// Pick a thinking level from the task: auto, low, medium or high (--thinking wins)
    #[arg(long, value_name = "LEVEL", value_parser = ["auto", "low", "medium", "high"])]
    pub task_complexity: Option<String>,

    /// More diagnostics on stderr (-v: every failure; -vv: debug)
    #[arg(short, long, action = ArgAction::Count)]
    pub verbose: u8,

    /// Print one JSON object instead of the plain answer (batch mode always prints JSONL)
    #[arg(long)]
    pub json: bool,

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

    /// Check pi, Node, the agent dir, the available models and the state file, then exit
    #[arg(long, group = "mode")]
    pub doctor: bool,

    /// Run the JSONL jobs in FILE (`-` = stdin); print one JSONL result per job, in order
    #[arg(long, value_name = "FILE", group = "mode", allow_hyphen_values = true)]
    pub batch: Option<String>,

    /// Batch workers, each with its own Pi process (default: number of CPUs)
    #[arg(long, value_name = "N", requires = "batch", value_parser = parse_jobs)]
    pub jobs: Option<usize>,

    /// Ignored (accepted for compatibility with the old runner)
    #[arg(short = 'p', long = "print", hide = true)]
    pub print: bool,

    /// Ignored (sessions are always ephemeral)
    #[arg(long, hide = true)]
    pub no_session: bool,

    /// Ignored (extensions are always disabled)
    #[arg(long, hide = true)]
    pub no_extensions: bool,

    /// Attachments (`@path`) and prompt words
    #[arg(value_name = "WORDS", allow_hyphen_values = false)]
    pub words: Vec<String>,

    /// Prompt words after `--` (taken literally, even `--help` or `@x`)
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
    Run(Invocation),
}

/// A validated single run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub timeout_ms: u64,
    /// Flags forwarded to Pi, in a fixed order.
    pub pi_args: Vec<String>,
    /// `@path` attachments, as written (without the `@`).
    pub files: Vec<String>,
    /// The prompt words joined by one space.
    pub prompt: String,
    pub models_scope: Option<String>,
    pub thinking: Option<String>,
    pub task_complexity: Option<String>,
    pub verbose: u8,
    pub json: bool,
    pub mode: Mode,
    pub jobs: Option<usize>,
}

/// What the invocation does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Answer the prompt.
    Run,
    Status,
    Reactivate(String),
    Disable(String),
    Reset(String),
    Doctor,
    /// `--batch FILE` (`-` = stdin).
    Batch(String),
}

/// Decimal digits only (surrounding whitespace allowed, as the old runner's `Number()` did);
/// no sign, no exponent, no hex.
pub fn parse_decimal(s: &str) -> Option<u64> {
    let t = s.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

fn parse_jobs(s: &str) -> Result<usize, String> {
    match parse_decimal(s).and_then(|n| usize::try_from(n).ok()) {
        Some(n) if (1..=256).contains(&n) => Ok(n),
        _ => Err("must be a whole number from 1 to 256".to_string()),
    }
}

fn parse_positive_ms(s: &str) -> Result<u64, String> {
    match parse_decimal(s) {
        Some(n) if n > 0 => Ok(n),
        _ => Err("must be a positive integer".to_string()),
    }
}

/// Parses argv (including argv[0]).
pub fn parse<I, T>(args: I) -> Result<Parsed, UsageError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            return match clap_error(&e) {
                Some(usage) => Err(usage),
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
    cli.into_invocation().map(Parsed::Run)
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
        Err(e) => clap_error(&e),
        Ok(cli) => match cli.into_invocation() {
            Err(e) if e.0 != "a prompt is required" => Some(e),
            _ => None,
        },
    }
}

/// Turns clap's error into our one-line usage error; `None` for help/version output.
fn clap_error(e: &clap::Error) -> Option<UsageError> {
    let arg = || match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    let flag_name = |a: String| a.split([' ', '=']).next().unwrap_or_default().to_string();
    let msg = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => return None,
        ErrorKind::UnknownArgument => format!("unsupported option: {}", arg()),
        ErrorKind::MissingRequiredArgument => {
            let missing = match e.get(ContextKind::InvalidArg) {
                Some(ContextValue::Strings(v)) => v.join(", "),
                _ => String::new(),
            };
            format!("{missing} is required by an option given (see --help)")
        }
        ErrorKind::InvalidValue | ErrorKind::NoEquals => {
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => String::new(),
            };
            if value.is_empty() {
                format!("{} requires a value", flag_name(arg()))
            } else {
                let valid = match e.get(ContextKind::ValidValue) {
                    Some(ContextValue::Strings(v)) => format!(" (expected {})", v.join(", ")),
                    _ => String::new(),
                };
                format!("invalid value '{value}' for {}{valid}", flag_name(arg()))
            }
        }
        ErrorKind::ValueValidation => {
            let name = flag_name(arg());
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => String::new(),
            };
            if name == "--timeout-ms" {
                format!("--timeout-ms must be a positive integer (got '{value}')")
            } else if name == "--jobs" {
                format!("--jobs must be a whole number from 1 to 256 (got '{value}')")
            } else {
                format!("invalid value '{value}' for {name}")
            }
        }
        _ => {
            // clap's own first line, without its "error: " prefix.
            let text = e.render().to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            line.trim_start_matches("error: ").to_string()
        }
    };
    Some(UsageError(msg))
}

impl Cli {
    fn into_invocation(self) -> Result<Invocation, UsageError> {
        let mut pi_args = Vec::new();
        if self.no_tools {
            pi_args.push("--no-tools".to_string());
        }
        if self.no_context_files {
            pi_args.push("--no-context-files".to_string());
        }
        for (flag, value) in [
            ("--provider", &self.provider),
            ("--model", &self.model),
            ("--thinking", &self.thinking),
            ("--models", &self.models),
        ] {
            if let Some(v) = value {
                if v.is_empty() || v.starts_with("--") {
                    return Err(UsageError(format!("{flag} requires a value")));
                }
                pi_args.push(flag.to_string());
                pi_args.push(v.clone());
            }
        }
        let mode = if self.status {
            Mode::Status
        } else if self.doctor {
            Mode::Doctor
        } else if let Some(m) = &self.reactivate {
            Mode::Reactivate(model_target("--reactivate", m, true)?)
        } else if let Some(m) = &self.disable {
            Mode::Disable(model_target("--disable", m, false)?)
        } else if let Some(m) = &self.reset {
            Mode::Reset(model_target("--reset", m, true)?)
        } else if let Some(f) = &self.batch {
            if f.is_empty() || (f.starts_with("--")) {
                return Err(UsageError("--batch requires a value".to_string()));
            }
            Mode::Batch(f.clone())
        } else {
            Mode::Run
        };
        let mut files = Vec::new();
        let mut words = Vec::new();
        for w in self.words {
            if w == "-" {
                return Err(UsageError("unsupported option: -".to_string()));
            }
            match w.strip_prefix('@') {
                Some("") => return Err(UsageError("@file requires a path".to_string())),
                Some(path) => files.push(path.to_string()),
                None => words.push(w),
            }
        }
        words.extend(self.literal);
        if mode != Mode::Run {
            if !words.is_empty() || !files.is_empty() {
                return Err(UsageError(match mode {
                    Mode::Batch(_) => {
                        "--batch takes its prompts from the job file, not the command line"
                            .to_string()
                    }
                    _ => "management flags take no prompt (put prompt words after --)".to_string(),
                }));
            }
        } else if words.is_empty() {
            return Err(UsageError("a prompt is required".to_string()));
        }
        Ok(Invocation {
            timeout_ms: self.timeout_ms,
            pi_args,
            files,
            prompt: words.join(" "),
            models_scope: self.models,
            thinking: self.thinking,
            task_complexity: self.task_complexity,
            verbose: self.verbose,
            json: self.json,
            mode,
            jobs: self.jobs,
        })
    }
}

/// `provider/model`, or `all` where allowed.
fn model_target(flag: &str, value: &str, all_allowed: bool) -> Result<String, UsageError> {
    let v = value.trim();
    if all_allowed && v == "all" {
        return Ok(v.to_string());
    }
    match v.split_once('/') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() && !v.starts_with('-') => Ok(v.to_string()),
        _ => Err(UsageError(format!(
            "{flag} expects provider/model{} (got '{value}')",
            if all_allowed { " or all" } else { "" }
        ))),
    }
}

/// The clap command, for completions and the help test.
pub fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Invocation, String> {
        let argv = std::iter::once("pi-ccswitch-run").chain(args.iter().copied());
        match parse(argv) {
            Ok(Parsed::Run(inv)) => Ok(inv),
            Ok(Parsed::Info(text)) => Err(format!("INFO:{text}")),
            Err(e) => Err(e.0),
        }
    }

    #[test]
    fn definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn reference_shape() {
        let inv = run(&["--timeout-ms", "42", "--no-tools", "@input.md", "summarize"]).unwrap();
        assert_eq!(inv.timeout_ms, 42);
        assert_eq!(inv.pi_args, vec!["--no-tools"]);
        assert_eq!(inv.files, vec!["input.md"]);
        assert_eq!(inv.prompt, "summarize");
    }

    #[test]
    fn words_join_with_one_space_and_default_timeout() {
        let inv = run(&["say", "hello", "world"]).unwrap();
        assert_eq!(inv.prompt, "say hello world");
        assert_eq!(inv.timeout_ms, 600_000);
        assert!(inv.pi_args.is_empty());
    }

    #[test]
    fn double_dash_makes_everything_prompt_text() {
        let inv = run(&["--no-tools", "--", "--help", "@x", "-v"]).unwrap();
        assert_eq!(inv.prompt, "--help @x -v");
        assert!(inv.files.is_empty());
        let inv = run(&["@a.txt", "--", "@b"]).unwrap();
        assert_eq!(inv.files, vec!["a.txt"]);
        assert_eq!(inv.prompt, "@b");
    }

    #[test]
    fn usage_errors_name_the_argument() {
        assert_eq!(
            run(&["--bad", "x"]).unwrap_err(),
            "unsupported option: --bad"
        );
        assert_eq!(
            run(&["--bad", "--help"]).unwrap_err(),
            "unsupported option: --bad"
        );
        assert_eq!(run(&["-x", "hi"]).unwrap_err(), "unsupported option: -x");
        assert_eq!(run(&["-", "hi"]).unwrap_err(), "unsupported option: -");
        assert_eq!(run(&["@", "hi"]).unwrap_err(), "@file requires a path");
        assert_eq!(run(&[]).unwrap_err(), "a prompt is required");
        assert_eq!(run(&["@only.txt"]).unwrap_err(), "a prompt is required");
        assert_eq!(run(&["--",]).unwrap_err(), "a prompt is required");
    }

    #[test]
    fn timeout_must_be_a_positive_integer() {
        for bad in ["0", "-5", "1.5", "abc", "", "+5", "1e3", "0x10"] {
            let err = run(&["--timeout-ms", bad, "hi"]).unwrap_err();
            assert!(err.starts_with("--timeout-ms"), "{bad:?}: {err}");
        }
        assert!(run(&["--timeout-ms"]).unwrap_err().contains("--timeout-ms"));
        assert_eq!(
            run(&["--timeout-ms", "5", "--timeout-ms", "7", "hi"])
                .unwrap()
                .timeout_ms,
            7
        );
        assert_eq!(run(&["--timeout-ms=9", "hi"]).unwrap().timeout_ms, 9);
    }

    #[test]
    fn forwarded_values_are_checked() {
        let inv = run(&[
            "--provider",
            "a",
            "--model",
            "m",
            "--thinking",
            "high",
            "--models",
            "a/*",
            "q",
        ])
        .unwrap();
        assert_eq!(
            inv.pi_args,
            vec![
                "--provider",
                "a",
                "--model",
                "m",
                "--thinking",
                "high",
                "--models",
                "a/*"
            ]
        );
        assert_eq!(inv.models_scope.as_deref(), Some("a/*"));
        assert_eq!(
            run(&["--model", "", "q"]).unwrap_err(),
            "--model requires a value"
        );
        assert_eq!(
            run(&["--model", "--no-tools", "q"]).unwrap_err(),
            "--model requires a value"
        );
        assert_eq!(
            run(&["q", "--provider"]).unwrap_err(),
            "--provider requires a value"
        );
        assert_eq!(
            run(&["--model", "-x", "q"]).unwrap().pi_args,
            vec!["--model", "-x"]
        );
    }

    #[test]
    fn migration_flags_are_ignored() {
        let inv = run(&["-p", "--print", "--no-session", "--no-extensions", "hi"]).unwrap();
        assert!(inv.pi_args.is_empty());
        assert_eq!(inv.prompt, "hi");
    }

    #[test]
    fn management_modes_take_no_prompt() {
        assert_eq!(run(&["--status"]).unwrap().mode, Mode::Status);
        assert!(run(&["--status", "--json"]).unwrap().json);
        assert_eq!(run(&["--doctor"]).unwrap().mode, Mode::Doctor);
        assert_eq!(
            run(&["--reactivate", "all"]).unwrap().mode,
            Mode::Reactivate("all".into())
        );
        assert_eq!(
            run(&["--disable", "zai/glm-4.6"]).unwrap().mode,
            Mode::Disable("zai/glm-4.6".into())
        );
        assert_eq!(
            run(&["--reset", "a/b/c"]).unwrap().mode,
            Mode::Reset("a/b/c".into())
        );
        assert!(
            run(&["--disable", "all"])
                .unwrap_err()
                .contains("provider/model")
        );
        assert!(
            run(&["--reset", "nomodel"])
                .unwrap_err()
                .contains("provider/model or all")
        );
        assert!(
            run(&["--status", "hello"])
                .unwrap_err()
                .contains("take no prompt")
        );
        assert!(run(&["--status", "--doctor"]).is_err());
        // A prompt that looks like a management flag goes after `--`.
        let inv = run(&["--", "--status"]).unwrap();
        assert_eq!((inv.mode, inv.prompt.as_str()), (Mode::Run, "--status"));
    }

    #[test]
    fn batch_mode() {
        let inv = run(&["--batch", "jobs.jsonl", "--jobs", "2", "--json"]).unwrap();
        assert_eq!(inv.mode, Mode::Batch("jobs.jsonl".into()));
        assert_eq!(inv.jobs, Some(2));
        assert_eq!(
            run(&["--batch", "-"]).unwrap().mode,
            Mode::Batch("-".into())
        );
        assert!(
            run(&["--batch", "f", "hello"])
                .unwrap_err()
                .contains("job file")
        );
        assert!(
            run(&["--jobs", "2", "hello"]).is_err(),
            "--jobs needs --batch"
        );
        assert!(
            run(&["--batch", "f", "--jobs", "0"])
                .unwrap_err()
                .contains("--jobs must be")
        );
        assert!(run(&["--batch", "f", "--status"]).is_err());
    }

    #[test]
    fn help_and_version_are_info() {
        assert!(run(&["--help"]).unwrap_err().starts_with("INFO:"));
        assert!(run(&["-h"]).unwrap_err().contains("Exit codes"));
        assert!(
            run(&["-V"])
                .unwrap_err()
                .contains(env!("CARGO_PKG_VERSION"))
        );
    }
}
