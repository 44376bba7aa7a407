//! `--doctor`: one line per check — pi, Node, Pi's version, the agent dir (Pi needs it
//! writable), the health store, the models Pi can use, and the tools a plain run would give the
//! model. Exit 2 when any check fails.

use std::path::Path;

use serde_json::json;

use crate::agent;
use crate::catalog::ModelInfo;
use crate::cli::Profile;
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
    pi_args: &[String],
    profile: &Profile,
    dir: &Path,
    store: &mut dyn HealthStore,
    json: bool,
) -> Report {
    let mut checks: Vec<Check> = Vec::new();
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
        checks.push(
            match crate::registry::list_models(&settings.pi_command, pi_args).await {
                Ok(m) if !m.is_empty() => Check::new(
                    "models",
                    true,
                    format!(
                        "{} available: {}",
                        m.len(),
                        m.iter()
                            .map(ModelInfo::key)
                            .take(8)
                            .collect::<Vec<_>>()
                            .join(", ")
                            + if m.len() > 8 { ", …" } else { "" }
                    ),
                ),
                Ok(_) => Check::new(
                    "models",
                    false,
                    "Pi lists no available model (check models.json and API keys)",
                ),
                Err(e) => Check::new("models", false, e.to_string()),
            },
        );
    }
    let tools = tools_of(profile);
    checks.push(Check::new(
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
    ));
    let failed = checks.iter().any(|c| !c.ok);
    let text = if json {
        format!(
            "{}\n",
            json!({
                "ok": !failed,
                "checks": checks.iter().map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail})).collect::<Vec<_>>(),
                "tools": tools,
            })
        )
    } else {
        checks
            .iter()
            .map(|c| {
                format!(
                    "{} {}: {}\n",
                    if c.ok { "ok  " } else { "FAIL" },
                    c.name,
                    c.detail
                )
            })
            .collect()
    };
    Report {
        text,
        all_ok: !failed,
    }
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
}
