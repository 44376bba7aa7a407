//! `--status`, `--reactivate`, `--disable`, `--reset`, `--doctor`: health management on top of
//! the shared store. Tables and JSON go to stdout through `output`; problems to stderr.

use std::path::Path;

use serde_json::{Value, json};

use crate::agent;
use crate::catalog::ModelInfo;
use crate::clock;
use crate::exit::Exit;
use crate::health::store::FileStore as Store;
use crate::health::{Block, Health, Keys, Record};
use crate::output;
use crate::settings::Settings;

/// Oldest Pi this runner is tested with.
pub const PI_MIN_VERSION: (u64, u64, u64) = (0, 84, 4);
/// Pi needs at least this Node.
pub const NODE_MIN_VERSION: (u64, u64, u64) = (22, 19, 0);

/// One model's line in `--status`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelStatus {
    pub key: String,
    pub state: &'static str,
    pub blocked_by: Option<&'static str>,
    pub remaining_ms: u64,
    pub failures: [u64; 3],
    pub last_class: Option<String>,
    pub last_error: Option<String>,
    pub available: bool,
}

/// Pure: the status of every model Pi lists, plus models only the state file knows.
pub fn statuses(models: &[ModelInfo], health: &Health, now_ms: u64) -> Vec<ModelStatus> {
    let mut all: Vec<(ModelInfo, bool)> = models.iter().cloned().map(|m| (m, true)).collect();
    for key in health.models.keys() {
        if !all.iter().any(|(m, _)| &m.key() == key)
            && let Some((provider, id)) = key.split_once('/')
        {
            all.push((
                ModelInfo {
                    provider: provider.to_string(),
                    id: id.to_string(),
                    name: None,
                    base_url: None,
                    reasoning: false,
                    input: None,
                    context_window: None,
                },
                false,
            ));
        }
    }
    all.into_iter()
        .map(|(m, available)| {
            let keys = Keys::of(&m);
            let recs: [Option<&Record>; 3] = [
                health.models.get(&keys.model),
                health.providers.get(&keys.provider),
                health.endpoints.get(&keys.endpoint),
            ];
            let remaining_ms = recs
                .iter()
                .flatten()
                .filter_map(|r| r.cooldown_until)
                .map(|t| t.saturating_sub(now_ms))
                .max()
                .unwrap_or(0);
            let (state, blocked_by) = match health.blocked(&m, now_ms, &[]) {
                Some(Block::Disabled) => ("disabled", None),
                Some(Block::Cooling(scope)) => ("cooling", Some(scope.as_str())),
                Some(Block::Leased) => ("probing", Some("provider")),
                None => match health.needs_probe(&m, now_ms, &[]) {
                    Some(target) => (
                        "half-open",
                        Some(crate::health::split_target(&target).0.as_str()),
                    ),
                    None => ("healthy", None),
                },
            };
            // The most recent failure among the three records explains the state best.
            let last = recs
                .iter()
                .flatten()
                .filter(|r| r.last_failure_at.is_some())
                .max_by_key(|r| r.last_failure_at);
            ModelStatus {
                key: keys.model,
                state,
                blocked_by,
                remaining_ms: if state == "cooling" { remaining_ms } else { 0 },
                failures: health.total_failures(&m),
                last_class: last.and_then(|r| r.last_class.clone()),
                last_error: last.and_then(|r| r.last_error.clone()),
                available,
            }
        })
        .collect()
}

fn human_ms(ms: u64) -> String {
    let s = ms.div_ceil(1000);
    match s {
        0 => "-".to_string(),
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Pure: the `--status` table.
pub fn status_table(rows: &[ModelStatus], health: &Health) -> String {
    let label = |r: &ModelStatus| {
        if r.available {
            r.key.clone()
        } else {
            format!("{} (not listed by Pi)", r.key)
        }
    };
    let width = rows
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!(
        "{:<width$}  {:<9}  {:<8}  {:>8}  {:>14}  {}\n",
        "MODEL", "STATE", "SCOPE", "COOLDOWN", "FAILS m/p/e", "LAST FAILURE"
    );
    for r in rows {
        let last = match (&r.last_class, &r.last_error) {
            (Some(c), Some(e)) => format!("{c}: {}", e.chars().take(60).collect::<String>()),
            (Some(c), None) => c.clone(),
            _ => String::new(),
        };
        let fails = format!("{}/{}/{}", r.failures[0], r.failures[1], r.failures[2]);
        let key = label(r);
        out.push_str(
            format!(
                "{key:<width$}  {:<9}  {:<8}  {:>8}  {fails:>14}  {last}",
                r.state,
                r.blocked_by.unwrap_or("-"),
                human_ms(r.remaining_ms),
            )
            .trim_end(),
        );
        out.push('\n');
    }
    let count = |s: &str| rows.iter().filter(|r| r.state == s).count();
    out.push_str(&format!(
        "\n{} models: {} healthy, {} cooling, {} disabled, {} half-open/probing · {} switches recorded\n",
        rows.len(),
        count("healthy"),
        count("cooling"),
        count("disabled"),
        count("half-open") + count("probing"),
        health.switches
    ));
    out
}

/// Pure: the `--status --json` document.
pub fn status_json(rows: &[ModelStatus], health: &Health) -> Value {
    let count = |s: &str| rows.iter().filter(|r| r.state == s).count();
    json!({
        "models": rows.iter().map(|r| json!({
            "model": r.key,
            "state": r.state,
            "blocked_by": r.blocked_by,
            "cooldown_remaining_ms": r.remaining_ms,
            "failures": {"model": r.failures[0], "provider": r.failures[1], "endpoint": r.failures[2]},
            "last_class": r.last_class,
            "last_error": r.last_error,
            "available": r.available,
        })).collect::<Vec<_>>(),
        "healthy": count("healthy"),
        "cooling": count("cooling"),
        "disabled": count("disabled"),
        "half_open": count("half-open") + count("probing"),
        "switches": health.switches,
        "switch_log": health.switch_log,
    })
}

/// Pure: closes every breaker of `target` (`provider/model` with its provider and endpoint
/// records, or `all`). Returns how many records changed.
pub fn reactivate(health: &mut Health, target: &str, models: &[ModelInfo], now_ms: u64) -> usize {
    let mut changed = 0;
    let mut close = |r: &mut Record| {
        if !(r.disabled
            || r.cooldown_until.is_some()
            || r.lease_until.is_some()
            || r.consecutive_failures > 0)
        {
            // Nothing to close: a record that never failed keeps its history untouched.
            return;
        }
        changed += 1;
        r.disabled = false;
        r.cooldown_until = None;
        r.lease_until = None;
        r.consecutive_failures = 0;
        r.last_success_at = Some(now_ms);
    };
    if target == "all" {
        for map in [
            &mut health.models,
            &mut health.providers,
            &mut health.endpoints,
        ] {
            map.values_mut().for_each(&mut close);
        }
        return changed;
    }
    let Some((provider, _)) = target.split_once('/') else {
        return 0;
    };
    if let Some(r) = health.models.get_mut(target) {
        close(r);
    }
    if let Some(r) = health.providers.get_mut(provider) {
        close(r);
    }
    // The endpoint key needs the base URL; without Pi's model list, close every endpoint of
    // the provider.
    let endpoint = models
        .iter()
        .find(|m| m.key() == target)
        .map(|m| Keys::of(m).endpoint);
    let prefix = format!("{provider}@");
    for (key, r) in health.endpoints.iter_mut() {
        if endpoint
            .as_ref()
            .map_or(key.starts_with(&prefix), |e| e == key)
        {
            close(r);
        }
    }
    changed
}

/// Runs a management mode. `json` selects JSON output where it applies.
pub async fn run(mode: &crate::cli::Manage, settings: &Settings, inv: &crate::cli::Invocation) -> Exit {
    let pi_args = &inv.pi_args();
    let json = inv.json;
    use crate::cli::{Manage as Mode, Target};
    let Some(dir) = settings.agent_dir.clone() else {
        return fail(
            "cannot find Pi's agent directory: set PI_CODING_AGENT_DIR or HOME",
            json,
        );
    };
    let store = Store::open(&dir);
    let now = clock::now().wall_ms;
    match mode {
        Mode::Status => {
            let models = match crate::registry::list_models(&settings.pi_command, pi_args).await {
                Ok(m) => m,
                Err(e) => {
                    output::error_line(&format!(
                        "warning: cannot list Pi's models ({e}); showing recorded models only"
                    ));
                    Vec::new()
                }
            };
            let loaded = match store.load(now) {
                Ok(l) => l,
                Err(e) => return fail(&format!("cannot read the health state: {e}"), json),
            };
            for w in &loaded.warnings {
                output::error_line(&format!("warning: {w}"));
            }
            let rows = statuses(&models, &loaded.health, now);
            let text = if json {
                format!("{}\n", status_json(&rows, &loaded.health))
            } else {
                status_table(&rows, &loaded.health)
            };
            write_out(&text)
        }
        Mode::Reactivate(target) => {
            let models = crate::registry::list_models(&settings.pi_command, pi_args)
                .await
                .unwrap_or_default();
            let mut changed = 0;
            let key = target.to_string();
            let res = store.update(now, &mut |h| changed = reactivate(h, &key, &models, now));
            finish_update(
                res,
                &format!("reactivated {target} ({changed} breakers closed)\n"),
                json,
            )
        }
        Mode::Disable(target) => {
            // A typo must not silently disable nothing: check the name against Pi's models
            // when Pi can be asked.
            match crate::registry::list_models(&settings.pi_command, pi_args).await {
                Ok(models) if !models.iter().any(|m| &m.key() == target) => {
                    return fail(
                        &format!(
                            "--disable: {target} is not one of Pi's available models (see --status)"
                        ),
                        json,
                    );
                }
                Ok(_) => {}
                Err(e) => output::error_line(&format!(
                    "warning: cannot list Pi's models ({e}); disabling {target} unchecked"
                )),
            }
            let res = store.update(now, &mut |h| {
                h.models.entry(target.clone()).or_default().disabled = true;
            });
            finish_update(res, &format!("disabled {target}\n"), json)
        }
        Mode::Reset(target) => {
            let res = store.update(now, &mut |h| match target {
                Target::All => *h = Health::default(),
                Target::Model(m) => {
                    h.models.remove(m);
                }
            });
            finish_update(res, &format!("reset {target}\n"), json)
        }
        Mode::Doctor => doctor(settings, pi_args, &dir, &store, json).await,
    }
}

fn write_out(text: &str) -> Exit {
    match output::stdout_text(text) {
        Ok(()) => Exit::Success,
        Err(e) => {
            output::error_line(&format!("cannot write to stdout: {e}"));
            Exit::Error
        }
    }
}

fn finish_update(
    res: Result<crate::health::store::Loaded, crate::health::store::StoreError>,
    done: &str,
    json: bool,
) -> Exit {
    match res {
        Ok(loaded) => {
            for w in &loaded.warnings {
                output::error_line(&format!("warning: {w}"));
            }
            if json {
                write_out(&format!(
                    "{}\n",
                    json!({"ok": true, "message": done.trim()})
                ))
            } else {
                write_out(done)
            }
        }
        Err(e) => fail(&format!("cannot update the health state: {e}"), json),
    }
}

/// A failed management command: the reason on stderr, and with `--json` also on stdout.
fn fail(message: &str, json: bool) -> Exit {
    output::error_line(message);
    if json {
        let _ = output::stdout_text(&format!("{}\n", json!({"ok": false, "error": message})));
    }
    Exit::Error
}

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

async fn doctor(
    settings: &Settings,
    pi_args: &[String],
    dir: &Path,
    store: &Store,
    json: bool,
) -> Exit {
    let mut checks: Vec<(bool, &str, String)> = Vec::new();
    let pi_path = agent::resolve_program(&settings.pi_command);
    checks.push(match &pi_path {
        Some(p) => (true, "pi", p.display().to_string()),
        None => (
            false,
            "pi",
            format!(
                "'{}' not found (set PI_BIN or install Pi)",
                settings.pi_command.to_string_lossy()
            ),
        ),
    });
    let node = agent::node_version().await;
    checks.push(match node.as_deref().and_then(parse_version) {
        Some(v) if v >= NODE_MIN_VERSION => (true, "node", node.clone().unwrap_or_default()),
        Some(_) => (
            false,
            "node",
            format!(
                "{} is too old: Pi needs Node.js >= 22.19",
                node.clone().unwrap_or_default()
            ),
        ),
        None => (
            false,
            "node",
            "no `node` on PATH (Pi needs Node.js >= 22.19)".to_string(),
        ),
    });
    if pi_path.is_some() {
        let version = agent::pi_version(&settings.pi_command).await;
        checks.push(match version.as_deref().and_then(parse_version) {
            Some(v) if v >= PI_MIN_VERSION => {
                (true, "pi version", version.clone().unwrap_or_default())
            }
            Some(_) => (
                false,
                "pi version",
                format!(
                    "{} is older than 0.84.4",
                    version.clone().unwrap_or_default()
                ),
            ),
            None => (
                false,
                "pi version",
                "`pi --version` failed (is Node new enough?)".to_string(),
            ),
        });
    }
    checks.push(if dir.is_dir() {
        (true, "agent dir", dir.display().to_string())
    } else {
        (
            false,
            "agent dir",
            format!("{} does not exist", dir.display()),
        )
    });
    if pi_path.is_some() {
        checks.push(match crate::registry::list_models(&settings.pi_command, pi_args).await {
            Ok(m) if !m.is_empty() => (
                true,
                "models",
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
            Ok(_) => (
                false,
                "models",
                "Pi lists no available model (check models.json and API keys)".to_string(),
            ),
            Err(e) => (false, "models", e),
        });
    }
    checks.push(match store.load(clock::now().wall_ms) {
        Ok(l) if l.warnings.is_empty() => (
            true,
            "state file",
            format!(
                "{} ({})",
                store.state_path().display(),
                if store.state_path().exists() {
                    "ok"
                } else {
                    "not created yet"
                }
            ),
        ),
        Ok(l) => (
            false,
            "state file",
            l.warnings
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Err(e) => (false, "state file", e.to_string()),
    });
    let failed = checks.iter().any(|(ok, _, _)| !ok);
    let text = if json {
        format!(
            "{}\n",
            json!({
                "ok": !failed,
                "checks": checks.iter().map(|(ok, name, detail)| json!({"check": name, "ok": ok, "detail": detail})).collect::<Vec<_>>(),
            })
        )
    } else {
        checks
            .iter()
            .map(|(ok, name, detail)| {
                format!("{} {name}: {detail}\n", if *ok { "ok  " } else { "FAIL" })
            })
            .collect()
    };
    let exit = write_out(&text);
    if failed { Exit::Error } else { exit }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::classify::{FailureClass, Scope};
    use crate::health::Delta;

    fn m(p: &str, id: &str) -> ModelInfo {
        ModelInfo {
            provider: p.into(),
            id: id.into(),
            name: None,
            base_url: Some(format!("http://h/{p}")),
            reasoning: false,
            input: None,
            context_window: None,
        }
    }

    fn quota(h: &mut Health, provider: &str, at: u64) {
        h.apply(
            &Delta::Failure {
                at,
                key: provider.into(),
                scope: Scope::Provider,
                class: FailureClass::Quota,
                error: "402: quota".into(),
            },
            1.0,
        );
    }

    #[test]
    fn status_rows_and_table() {
        let mut h = Health::default();
        quota(&mut h, "a", 0);
        h.models.entry("b/x".into()).or_default().disabled = true;
        let rows = statuses(&[m("a", "m1"), m("b", "x"), m("c", "y")], &h, 60_000);
        assert_eq!(rows[0].state, "cooling");
        assert_eq!(rows[0].blocked_by, Some("provider"));
        assert_eq!(rows[0].remaining_ms, 29 * 60_000);
        assert_eq!(rows[0].failures, [0, 1, 0]);
        assert_eq!(rows[0].last_class.as_deref(), Some("quota"));
        assert_eq!(rows[1].state, "disabled");
        assert_eq!(rows[2].state, "healthy");
        let table = status_table(&rows, &h);
        assert!(table.contains("a/m1"), "{table}");
        assert!(table.contains("29m00s"), "{table}");
        assert!(
            table.contains("3 models: 1 healthy, 1 cooling, 1 disabled"),
            "{table}"
        );
        let j = status_json(&rows, &h);
        assert_eq!(j["cooling"], 1);
        assert_eq!(j["models"][0]["cooldown_remaining_ms"], 29 * 60_000);
        // After the cooldown the provider is half-open.
        let rows = statuses(&[m("a", "m1")], &h, 31 * 60_000);
        assert_eq!(rows[0].state, "half-open");
    }

    #[test]
    fn reactivate_closes_model_provider_and_endpoint() {
        let mut h = Health::default();
        quota(&mut h, "a", 0);
        h.endpoints.insert(
            "a@http://h/a".into(),
            Record {
                cooldown_until: Some(u64::MAX),
                consecutive_failures: 2,
                ..Record::default()
            },
        );
        h.models.entry("a/m1".into()).or_default().disabled = true;
        let n = reactivate(&mut h, "a/m1", &[m("a", "m1")], 5);
        assert_eq!(n, 3);
        assert!(
            statuses(&[m("a", "m1")], &h, 10)
                .iter()
                .all(|r| r.state == "healthy")
        );
        assert_eq!(h.providers["a"].total_failures, 1, "history is kept");
    }

    #[test]
    fn versions_compare() {
        assert!(parse_version("v22.23.5").unwrap() >= NODE_MIN_VERSION);
        assert!(parse_version("v20.20.2").unwrap() < NODE_MIN_VERSION);
        assert!(parse_version("0.84.4\n").unwrap() >= PI_MIN_VERSION);
        assert!(parse_version("1.6.0").unwrap() >= PI_MIN_VERSION);
        assert!(parse_version("0.84.3").unwrap() < PI_MIN_VERSION);
        assert_eq!(parse_version("garbage"), None);
    }
}
