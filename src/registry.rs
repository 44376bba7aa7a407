//! Asks a short-lived Pi which models it can use (`get_available_models`): for `--status`,
//! `--disable`, `--doctor`, and for naming the closest models when Pi refuses to start on an
//! unknown `--model`.

use std::time::Duration;

use crate::agent::Agent;
use crate::catalog::ModelInfo;
use crate::rpc::{Command, Incoming};

/// How long listing Pi's models may take before we give up on it.
const LIST_TIMEOUT: Duration = Duration::from_secs(20);

/// Asks Pi for its available models (spawns `pi --mode rpc` briefly).
pub async fn list_models(
    pi: &std::ffi::OsString,
    pi_args: &[String],
) -> Result<Vec<ModelInfo>, String> {
    let mut agent = Agent::spawn(pi, pi_args).map_err(|e| e.to_string())?;
    let result = tokio::time::timeout(LIST_TIMEOUT, async {
        agent
            .send("models", &Command::GetAvailableModels)
            .await
            .map_err(|e| format!("cannot write to Pi: {e}"))?;
        loop {
            match agent.next().await {
                Ok(Some(Incoming::Response(r))) if r.id.as_deref() == Some("models") => {
                    if !r.success {
                        return Err(format!(
                            "get_available_models failed: {}",
                            r.error.unwrap_or_default()
                        ));
                    }
                    let models = r.models();
                    return Ok(models);
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    let stderr = agent.stderr_text().await;
                    let tail = stderr.lines().last().unwrap_or("").trim().to_string();
                    return Err(format!("Pi exited before listing its models: {tail}"));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err("Pi did not list its models within 20 s".to_string()));
    agent.stop(Duration::from_millis(1000)).await;
    result
}

