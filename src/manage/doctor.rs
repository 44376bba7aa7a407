//! `--doctor`: one line per check — pi, Node, Pi's version, the agent dir (Pi needs it
//! writable), the health store, the models Pi can use, the start model a run with the same
//! flags would use and whether the user chose it, whether it and the failover candidates come
//! from `models.json` or Pi's built-in catalogue, the variables `models.json`'s keys refer to,
//! and the tools a plain run would give the model. Warnings (`warn`) leave the exit at 0; exit 2
//! when any check fails.

use std::path::Path;

use serde_json::json;

use crate::agent;
use crate::catalog::{ModelInfo, origin};
use crate::cli::{Invocation, Profile};
use crate::clock;
use crate::health::store::{Check, HealthStore};
use crate::settings::Settings;

/// Oldest Pi this runner is tested with.
pub const PI_MIN_VERSION: (u64, u64, u64) = (0, 84, 4);
/// Pi needs at least this Node.
pub const NODE_MIN_VERSION: (u64, u64, u64) = (22, 19, 0);
/// The tools Pi gives the model when no flag says otherwise (both supported versions).
pub const PI_DEFAULT_TOOLS: [&str; 4] = ["read", "bash", "edit", "write"];

/// Parses `v1.2.3` / `1.2.3-x` into a comparable triple.
pub fn parse_version(text: &str) -> Option<(u64, u64, u64)> {
    let t = text.trim().trim_start_matches('v');
    let mut parts = t
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty());
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next().and_then(|p| p.parse().ok()).unwrap_or(0),
    ))
}

/// The tools a run with `profile` gives the model, as far as the flags decide (extension and
/// MCP tools aside: the runner starts Pi without extensions).
pub fn tools_of(profile: &Profile) -> Vec<String> {
    let split = |list: &str| -> Vec<String> {
        list.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut tools: Vec<String> = if profile.no_tools || profile.no_builtin_tools {
        Vec::new()
    } else {
        PI_DEFAULT_TOOLS.iter().map(|t| (*t).to_string()).collect()
    };
    if let Some(list) = &profile.tools {
        let listed = split(list);
        // Pi 1.6.0: `+name`/`-name` entries adjust the defaults; plain names replace them.
        if listed
            .iter()
            .all(|t| t.starts_with('+') || t.starts_with('-'))
        {
            for t in listed {
                match t.split_at(1) {
                    ("+", name) if !tools.iter().any(|x| x == name) => tools.push(name.into()),
                    ("-", name) => tools.retain(|x| x != name),
                    _ => {}
                }
            }
        } else if !profile.no_tools {
            tools = listed;
        }
    }
    if let Some(list) = &profile.exclude_tools {
        let denied = split(list);
        tools.retain(|t| !denied.contains(t));
    }
    tools
}

/// Can files be created in `dir`? (Pi keeps lock files beside `auth.json`: a read-only agent dir
/// makes Pi itself fail.)
fn writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".pi-ccswitch-run-doctor-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// What `--doctor` found: the text for stdout (one line per check, or JSON) and whether every
/// check passed (else exit 2). The caller prints it, so this module does no output of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub text: String,
    pub all_ok: bool,
}

pub async fn run(
    settings: &Settings,
    inv: &Invocation,
    dir: &Path,
    store: &mut dyn HealthStore,
) -> Report {
    let pi_args = &inv.pi_args();
    let profile = &inv.profile;
    let json = inv.json;
    let mut checks: Vec<Check> = Vec::new();
    // The start model, where the models come from and the keys (warn or FAIL lines), printed
    // after the models they are about.
    let mut lines_after: Vec<CheckLine> = Vec::new();
    let pi_path = agent::resolve_program(&settings.pi_command);
    checks.push(match &pi_path {
        Some(p) => Check::new("pi", true, p.display().to_string()),
        None => Check::new(
            "pi",
            false,
            format!(
                "'{}' not found (set PI_BIN or install Pi)",
                settings.pi_command.to_string_lossy()
            ),
        ),
    });
    let node = agent::node_version().await;
    checks.push(match node.as_deref().and_then(parse_version) {
        Some(v) if v >= NODE_MIN_VERSION => Check::new("node", true, node.unwrap_or_default()),
        Some(_) => Check::new(
            "node",
            false,
            format!(
                "{} is too old: Pi needs Node.js >= 22.19",
                node.unwrap_or_default()
            ),
        ),
        None => Check::new(
            "node",
            false,
            "no `node` on PATH (Pi needs Node.js >= 22.19)",
        ),
    });
    if pi_path.is_some() {
        let version = agent::pi_version(&settings.pi_command).await;
        checks.push(match version.as_deref().and_then(parse_version) {
            Some(v) if v >= PI_MIN_VERSION => {
                Check::new("pi version", true, version.unwrap_or_default())
            }
            Some(_) => Check::new(
                "pi version",
                false,
                format!("{} is older than 0.84.4", version.unwrap_or_default()),
            ),
            None => Check::new(
                "pi version",
                false,
                "`pi --version` failed (is Node new enough?)",
            ),
        });
    }
    checks.push(if !dir.is_dir() {
        Check::new(
            "agent dir",
            false,
            format!("{} does not exist", dir.display()),
        )
    } else {
        match writable(dir) {
            Ok(()) => Check::new("agent dir", true, format!("{} (writable)", dir.display())),
            Err(e) => Check::new(
                "agent dir",
                false,
                format!(
                    "{} is not writable ({e}); Pi itself fails there (it keeps lock files \
                     beside auth.json)",
                    dir.display()
                ),
            ),
        }
    });
    checks.extend(store.diagnose(clock::now().wall_ms));
    if pi_path.is_some() {
        match crate::registry::models_and_start(&settings.pi_command, pi_args).await {
            Ok((m, pi_start)) if !m.is_empty() => {
                checks.push(Check::new(
                    "models",
                    true,
                    format!(
                        "{} available: {}",
                        m.len(),
                        m.iter()
                            .map(|m| m.key().to_string())
                            .take(8)
                            .collect::<Vec<_>>()
                            .join(", ")
                            + if m.len() > 8 { ", …" } else { "" }
                    ),
                ));
                lines_after.extend(choice_lines(inv, dir, &m, pi_start.as_ref()));
            }
            Ok(_) => checks.push(Check::new(
                "models",
                false,
                "Pi lists no available model (check models.json and API keys)",
            )),
            Err(e) => checks.push(Check::new("models", false, e.to_string())),
        }
    }
    let key_lines = key_lines(&crate::settings::pi_config(dir), &|name: &str| {
        crate::settings::var(name)
    });
    let tools = tools_of(profile);
    let tools_check = Check::new(
        "tools",
        true,
        if tools.is_empty() {
            "none (the model can only read what it is sent)".to_string()
        } else if tools.iter().any(|t| t == "bash") {
            format!(
                "{} — a prompt-injected document could run commands as this user; for \
                 untrusted documents use --no-tools or --tools read,ls",
                tools.join(", ")
            )
        } else {
            tools.join(", ")
        },
    );
    let lines: Vec<CheckLine> = checks
        .into_iter()
        .map(CheckLine::from)
        .chain(lines_after)
        .chain(key_lines)
        .chain(std::iter::once(CheckLine::from(tools_check)))
        .collect();
    let failed = lines.iter().any(|l| l.level == Severity::Fail);
    let text = if json {
        format!(
            "{}\n",
            json!({
                "ok": !failed,
                "checks": lines.iter().map(|l| json!({
                    "check": l.name,
                    "ok": l.level != Severity::Fail,
                    "level": l.level.word(),
                    "detail": l.detail,
                })).collect::<Vec<_>>(),
                "tools": tools,
            })
        )
    } else {
        lines
            .iter()
            .map(|l| format!("{} {}: {}\n", l.level.tag(), l.name, l.detail))
            .collect()
    };
    Report {
        text,
        all_ok: !failed,
    }
}

/// How a doctor line came out: a warning does not fail `--doctor` (exit 0), a failure does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Severity {
    Ok,
    Warn,
    Fail,
}

impl Severity {
    /// The four-column tag of the text output.
    fn tag(self) -> &'static str {
        match self {
            Severity::Ok => "ok  ",
            Severity::Warn => "warn",
            Severity::Fail => "FAIL",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Warn => "warn",
            Severity::Fail => "fail",
        }
    }
}

/// One line of `--doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CheckLine {
    level: Severity,
    name: String,
    detail: String,
}

impl CheckLine {
    fn new(level: Severity, name: &str, detail: impl Into<String>) -> CheckLine {
        CheckLine {
            level,
            name: name.to_string(),
            detail: detail.into(),
        }
    }
}

impl From<Check> for CheckLine {
    fn from(c: Check) -> CheckLine {
        CheckLine {
            level: if c.ok { Severity::Ok } else { Severity::Fail },
            name: c.name,
            detail: c.detail,
        }
    }
}

/// Where a run with these flags would start, as `failover::start` decides it (Pi is not given
/// `--models`, and `--provider` only with `--model`), and the models it could fail over to.
/// `Err`: a `--model` Pi has no available model for (the run would stop with exit 2).
fn start_and_pool(
    inv: &Invocation,
    saved_default: Option<&str>,
    models: &[ModelInfo],
    pi_start: Option<&ModelInfo>,
) -> Result<(Option<String>, Vec<ModelInfo>), String> {
    let pool = match &inv.models_scope {
        Some(patterns) => crate::catalog::scope::scope(patterns, models),
        None => models.to_vec(),
    };
    let in_pool = |key: &str| pool.iter().any(|m| m.key() == key);
    let pi_key: Option<String> = pi_start.map(|m| m.key().into());
    let start = if let Some(wanted) = &inv.model {
        match pi_key.filter(|k| models.iter().any(|m| m.key() == *k)) {
            Some(k) => Some(k),
            None => {
                return Err(format!(
                    "--model {wanted} names none of Pi's available models (the run would stop \
                     with exit 2; --status lists them)"
                ));
            }
        }
    } else if inv.models_scope.is_some() {
        saved_default
            .filter(|k| in_pool(k))
            .map(str::to_string)
            .or_else(|| pool.first().map(|m| m.key().into()))
    } else if let Some(p) = &inv.provider {
        pi_start
            .filter(|m| &m.provider == p)
            .or_else(|| models.iter().find(|m| &m.provider == p))
            .map(|m| m.key().into())
    } else {
        pi_key
    };
    Ok((start, pool))
}

/// `primary` and `model origin` lines: which model a run with these flags starts on and
/// whether something the user chose picked it, and whether it or its failover candidates come
/// from Pi's built-in catalogue rather than `models.json` (see `catalog::origin`).
fn choice_lines(
    inv: &Invocation,
    dir: &Path,
    models: &[ModelInfo],
    pi_start: Option<&ModelInfo>,
) -> Vec<CheckLine> {
    let saved_default = crate::settings::pi_saved_default(dir);
    let (start, pool) = match start_and_pool(inv, saved_default.as_deref(), models, pi_start) {
        Ok(found) => found,
        Err(why) => return vec![CheckLine::new(Severity::Fail, "primary", why)],
    };
    let Some(start) = start else {
        return vec![CheckLine::new(
            Severity::Fail,
            "primary",
            "no start model: the flags select none of Pi's available models",
        )];
    };
    let candidates: Vec<String> = pool.iter().map(|m| m.key().into()).collect();
    let config = crate::settings::pi_config(dir);
    let choice = origin::StartChoice {
        start: &start,
        candidates: &candidates,
        model_flag: inv.model.is_some(),
        saved_default: saved_default.as_deref(),
        scoped: inv.models_scope.is_some(),
        provider_flag: inv.provider.as_deref(),
    };
    let findings = origin::findings(&choice, &config, &|name: &str| crate::settings::var(name));
    let mut lines = Vec::new();
    match findings
        .iter()
        .find(|f| matches!(f, origin::Finding::NoPrimary { .. }))
    {
        Some(f) => lines.push(CheckLine::new(Severity::Warn, "primary", f.to_string())),
        None => lines.push(CheckLine::new(
            Severity::Ok,
            "primary",
            format!(
                "{start} ({})",
                if inv.model.is_some() {
                    "--model"
                } else {
                    "the saved default in settings.json"
                }
            ),
        )),
    }
    let origin_warnings: Vec<&origin::Finding> = findings
        .iter()
        .filter(|f| !matches!(f, origin::Finding::NoPrimary { .. }))
        .collect();
    if origin_warnings.is_empty() {
        lines.push(CheckLine::new(
            Severity::Ok,
            "model origin",
            format!(
                "all {} candidates, the start model included, are from models.json",
                candidates.len()
            ),
        ));
    }
    for f in origin_warnings {
        lines.push(CheckLine::new(
            Severity::Warn,
            "model origin",
            f.to_string(),
        ));
    }
    lines
}

/// `key` lines: a FAIL for every `models.json` key or header that refers to a variable unset
/// or empty here (Pi then has no such key: cron's near-empty environment is the usual cause),
/// or one `ok` line. Never shows a value.
fn key_lines(config: &origin::PiConfig, env: &dyn Fn(&str) -> Option<String>) -> Vec<CheckLine> {
    if config.models_json_unreadable {
        return vec![CheckLine::new(
            Severity::Warn,
            "keys",
            "models.json is not JSON this runner can read, so its keys were not checked",
        )];
    }
    let unset = origin::unset_references(config, env);
    if unset.is_empty() {
        let refs: usize = config
            .providers
            .iter()
            .flat_map(|p| p.api_key.iter().chain(p.headers.iter().map(|(_, v)| v)))
            .map(|v| crate::redact::referenced_vars(v).len())
            .sum();
        return vec![CheckLine::new(
            Severity::Ok,
            "keys",
            if refs == 0 {
                "models.json refers to no environment variables".to_string()
            } else {
                format!("all {refs} variables models.json refers to are set")
            },
        )];
    }
    unset
        .iter()
        .map(|u| CheckLine::new(Severity::Fail, "key", u.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare() {
        assert!(parse_version("v22.23.5").unwrap() >= NODE_MIN_VERSION);
        assert!(parse_version("v20.20.2").unwrap() < NODE_MIN_VERSION);
        assert!(parse_version("0.84.4\n").unwrap() >= PI_MIN_VERSION);
        assert!(parse_version("1.6.0").unwrap() >= PI_MIN_VERSION);
        assert!(parse_version("0.84.3").unwrap() < PI_MIN_VERSION);
        assert_eq!(parse_version("garbage"), None);
    }

    #[test]
    fn tools_follow_the_flags() {
        let p = |f: fn(&mut Profile)| {
            let mut profile = Profile::default();
            f(&mut profile);
            tools_of(&profile)
        };
        assert_eq!(p(|_| {}), ["read", "bash", "edit", "write"]);
        assert!(p(|p| p.no_tools = true).is_empty());
        assert!(p(|p| p.no_builtin_tools = true).is_empty());
        assert_eq!(p(|p| p.tools = Some("read, ls".into())), ["read", "ls"]);
        assert_eq!(
            p(|p| p.exclude_tools = Some("bash,write".into())),
            ["read", "edit"]
        );
        assert_eq!(
            p(|p| p.tools = Some("+ls,-bash".into())),
            ["read", "edit", "write", "ls"]
        );
        assert_eq!(
            p(|p| {
                p.tools = Some("read,bash".into());
                p.exclude_tools = Some("bash".into());
            }),
            ["read"]
        );
    }

    fn inv(flags: &[&str]) -> Invocation {
        let args = std::iter::once("pi-ccswitch-run")
            .chain(std::iter::once("--doctor"))
            .chain(flags.iter().copied());
        match crate::cli::parse(args) {
            Ok(crate::cli::Parsed::Run(inv)) => *inv,
            other => panic!("{other:?}"),
        }
    }

    fn model(provider: &str, id: &str) -> ModelInfo {
        ModelInfo {
            provider: provider.into(),
            id: id.into(),
            name: None,
            base_url: None,
            reasoning: false,
            input: None,
            context_window: None,
            max_tokens: None,
        }
    }

    #[test]
    fn the_start_is_found_as_a_run_finds_it() {
        let models = [
            model("deepseek", "deepseek-v4-pro"),
            model("zhipu", "glm-4.6"),
            model("dashscope", "qwen3-max"),
        ];
        let pi = Some(&models[0]);
        let start = |flags: &[&str], saved: Option<&str>| {
            start_and_pool(&inv(flags), saved, &models, pi).map(|(s, pool)| (s, pool.len()))
        };
        // No flags: where Pi starts; every model is a candidate.
        assert_eq!(
            start(&[], None),
            Ok((Some("deepseek/deepseek-v4-pro".into()), 3))
        );
        // --models: the saved default in scope, else the first scoped model.
        let scoped = ["--models", "dashscope/*,zhipu/*"];
        assert_eq!(
            start(&scoped, None),
            Ok((Some("dashscope/qwen3-max".into()), 2))
        );
        assert_eq!(
            start(&scoped, Some("zhipu/glm-4.6")),
            Ok((Some("zhipu/glm-4.6".into()), 2))
        );
        assert_eq!(
            start(&scoped, Some("deepseek/deepseek-v4-pro")),
            Ok((Some("dashscope/qwen3-max".into()), 2))
        );
        // --provider alone: that provider's model.
        assert_eq!(
            start(&["--provider", "zhipu"], None),
            Ok((Some("zhipu/glm-4.6".into()), 3))
        );
        // --model: Pi resolved it; one Pi has no available model for stops the run.
        assert_eq!(
            start(&["--model", "deepseek-v4-pro"], None),
            Ok((Some("deepseek/deepseek-v4-pro".into()), 3))
        );
        let unknown = start_and_pool(&inv(&["--model", "glm-9"]), None, &models, None);
        assert!(
            unknown
                .as_ref()
                .is_err_and(|e| e.contains("--model glm-9 names none")),
            "{unknown:?}"
        );
    }

    #[test]
    fn key_lines_fail_per_unset_variable_and_never_show_values() {
        let config = origin::PiConfig::from_texts(
            Some(
                r#"{"providers": {
                    "zhipu": {"apiKey": "$ZHIPU_API_KEY", "models": [{"id": "glm-4.6"}]},
                    "dashscope": {"apiKey": "$DASHSCOPE_API_KEY", "models": [{"id": "qwen3-max"}]}
                }}"#,
            ),
            None,
        );
        let env = |name: &str| (name == "DASHSCOPE_API_KEY").then(|| "sk-secret-value".to_string());
        let lines = key_lines(&config, &env);
        assert_eq!(
            lines,
            [CheckLine::new(
                Severity::Fail,
                "key",
                "provider zhipu: apiKey refers to $ZHIPU_API_KEY, which is not set here (cron \
                 starts with an almost empty environment: source an env file)"
            )]
        );
        let all = |_: &str| Some("v".to_string());
        assert_eq!(
            key_lines(&config, &all),
            [CheckLine::new(
                Severity::Ok,
                "keys",
                "all 2 variables models.json refers to are set"
            )]
        );
        let broken = origin::PiConfig::from_texts(Some("{"), None);
        assert_eq!(key_lines(&broken, &all)[0].level, Severity::Warn);
        assert_eq!(
            key_lines(&origin::PiConfig::default(), &all)[0].detail,
            "models.json refers to no environment variables"
        );
    }
}
