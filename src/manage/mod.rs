//! `--status`, `--reactivate`, `--disable`, `--reset`, `--doctor`: health management on top of
//! the health store (the state file, or Redis). Tables and JSON go to stdout through `output`;
//! problems to stderr.

pub mod doctor;
pub mod status;

use serde_json::json;

pub use doctor::{NODE_MIN_VERSION, PI_MIN_VERSION, parse_version};
pub mod capacity_status;
pub use status::{ModelStatus, status_json, status_table, statuses};

use crate::catalog::ModelInfo;
use crate::clock;
use crate::console::Console;
use crate::exit::Exit;
use crate::health::{Health, Keys, Record};
use crate::output;
use crate::settings::Settings;

/// How long a management command waits for the state-file lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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
pub async fn run(
    mode: &crate::cli::Manage,
    settings: &Settings,
    inv: &crate::cli::Invocation,
    console: &Console,
) -> Exit {
    let pi_args = &inv.pi_args();
    let json = inv.json;
    use crate::cli::{Manage as Mode, ManageTarget};
    let Some(dir) = settings.agent_dir.clone() else {
        return fail(
            console,
            "cannot find Pi's agent directory: set PI_CODING_AGENT_DIR or HOME",
            json,
        );
    };
    let mut store = match crate::health::store::open(settings, LOCK_WAIT) {
        Ok(s) => s,
        Err(e) => return fail(console, &e, json),
    };
    let now = clock::now().wall_ms;
    match mode {
        Mode::Status => {
            let models = match crate::registry::list_models(&settings.pi_command, pi_args).await {
                Ok(m) => m,
                Err(e) => {
                    console.error_line(&format!(
                        "warning: cannot list Pi's models ({e}); showing recorded models only"
                    ));
                    Vec::new()
                }
            };
            let loaded = match store.load(now) {
                Ok(l) => l,
                Err(e) => {
                    return fail(console, &format!("cannot read the health state: {e}"), json);
                }
            };
            for w in &loaded.warnings {
                console.error_line(&format!("warning: {w}"));
            }
            let rows = statuses(&models, &loaded.health, now);
            let records = match store.load_capacity(now) {
                Ok(r) => r,
                Err(e) => {
                    console.error_line(&format!("warning: cannot read the capacity records: {e}"));
                    Default::default()
                }
            };
            let caps = crate::job::max_inflight(settings, inv);
            let capacity = capacity_status::capacity_rows(&records, &caps, now);
            let text = if json {
                let mut v = status_json(&rows, &loaded.health);
                if let Some(obj) = v.as_object_mut() {
                    obj.insert(
                        "capacity".to_string(),
                        capacity_status::capacity_json(&capacity),
                    );
                }
                format!("{v}\n")
            } else {
                status_table(&rows, &loaded.health, Some(clock::local_offset))
                    + &capacity_status::capacity_table(&capacity)
            };
            write_out(console, &text)
        }
        Mode::Reactivate(target) => {
            let models = crate::registry::list_models(&settings.pi_command, pi_args)
                .await
                .unwrap_or_default();
            let mut changed = 0;
            let key = target.to_string();
            let res = store.update(now, &mut |h| changed = reactivate(h, &key, &models, now));
            finish_update(
                console,
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
                        console,
                        &format!(
                            "--disable: {target} is not one of Pi's available models (see --status)"
                        ),
                        json,
                    );
                }
                Ok(_) => {}
                Err(e) => console.error_line(&format!(
                    "warning: cannot list Pi's models ({e}); disabling {target} unchecked"
                )),
            }
            let res = store.update(now, &mut |h| {
                h.models.entry(target.clone()).or_default().disabled = true;
            });
            finish_update(console, res, &format!("disabled {target}\n"), json)
        }
        Mode::Reset(target) => {
            let res = match target {
                ManageTarget::All => store.reset_all(now),
                ManageTarget::Model(m) => store.update(now, &mut |h| {
                    h.models.remove(m);
                }),
            };
            finish_update(console, res, &format!("reset {target}\n"), json)
        }
        Mode::Doctor => {
            let report = doctor::run(settings, inv, &dir, store.as_mut()).await;
            let exit = write_out(console, &report.text);
            if report.all_ok { exit } else { Exit::Error }
        }
    }
}

pub(super) fn write_out(console: &Console, text: &str) -> Exit {
    match output::stdout_text(text) {
        Ok(()) => Exit::Success,
        Err(e) => {
            console.error_line(&format!("cannot write to stdout: {e}"));
            Exit::Error
        }
    }
}

fn finish_update(
    console: &Console,
    res: Result<crate::health::store::Loaded, crate::health::store::StoreError>,
    done: &str,
    json: bool,
) -> Exit {
    match res {
        Ok(loaded) => {
            for w in &loaded.warnings {
                console.error_line(&format!("warning: {w}"));
            }
            if json {
                write_out(
                    console,
                    &format!("{}\n", json!({"ok": true, "message": done.trim()})),
                )
            } else {
                write_out(console, done)
            }
        }
        Err(e) => fail(
            console,
            &format!("cannot update the health state: {e}"),
            json,
        ),
    }
}

/// A failed management command: the reason on stderr, and with `--json` also on stdout.
fn fail(console: &Console, message: &str, json: bool) -> Exit {
    console.error_line(message);
    if json {
        let _ = output::stdout_text(&format!("{}\n", json!({"ok": false, "error": message})));
    }
    Exit::Error
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
            max_tokens: None,
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
        let table = status_table(&rows, &h, None);
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
}
