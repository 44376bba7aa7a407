//! Asks a short-lived Pi which models it can use (`get_available_models`): for `--status`,
//! `--disable`, `--doctor` (which also asks where Pi would start), and for naming the closest
//! models when Pi refuses to start on an unknown `--model`.

use std::time::Duration;

use crate::agent::Agent;
use crate::catalog::ModelInfo;
use crate::rpc::{Command, Incoming};

/// How long listing Pi's models may take before we give up on it.
const LIST_TIMEOUT: Duration = Duration::from_secs(20);

/// Why Pi's models could not be listed.
#[derive(Debug)]
pub enum ListError {
    Spawn(crate::agent::SpawnError),
    Write(std::io::Error),
    Refused(String),
    /// Pi exited first; its own error line.
    Exited(String),
    Read(crate::rpc::codec::ReadError),
    Timeout,
}

impl std::fmt::Display for ListError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListError::Spawn(e) => write!(f, "{e}"),
            ListError::Write(e) => write!(f, "cannot write to Pi: {e}"),
            ListError::Refused(e) => write!(f, "get_available_models failed: {e}"),
            ListError::Exited(line) => write!(f, "Pi exited before listing its models: {line}"),
            ListError::Read(e) => write!(f, "{e}"),
            ListError::Timeout => write!(
                f,
                "Pi did not list its models within {} s",
                LIST_TIMEOUT.as_secs()
            ),
        }
    }
}

impl std::error::Error for ListError {}

/// Asks Pi for its available models (spawns `pi --mode rpc` briefly).
pub async fn list_models(
    pi: &std::ffi::OsString,
    pi_args: &[String],
) -> Result<Vec<ModelInfo>, ListError> {
    ask(pi, pi_args, false).await.map(|(models, _)| models)
}

/// Asks Pi for its available models and the model it starts on with `pi_args` (`get_state`;
/// `None` when Pi reports none), for `--doctor`.
pub async fn models_and_start(
    pi: &std::ffi::OsString,
    pi_args: &[String],
) -> Result<(Vec<ModelInfo>, Option<ModelInfo>), ListError> {
    ask(pi, pi_args, true).await
}

async fn ask(
    pi: &std::ffi::OsString,
    pi_args: &[String],
    want_state: bool,
) -> Result<(Vec<ModelInfo>, Option<ModelInfo>), ListError> {
    // A short-lived Pi of its own: the hard exit of a second Ctrl-C need not know it.
    let mut agent = Agent::spawn(pi, pi_args, &crate::agent::PiGroups::new())
        .await
        .map_err(ListError::Spawn)?;
    let result = tokio::time::timeout(LIST_TIMEOUT, async {
        if want_state {
            agent
                .send("state", &Command::GetState)
                .await
                .map_err(ListError::Write)?;
        }
        agent
            .send("models", &Command::GetAvailableModels)
            .await
            .map_err(ListError::Write)?;
        // Whether the `get_state` answer is still awaited, and the model it named.
        let mut state_pending = want_state;
        let mut start: Option<ModelInfo> = None;
        let mut models: Option<Vec<ModelInfo>> = None;
        loop {
            if !state_pending && let Some(models) = models.take() {
                return Ok((models, start.take()));
            }
            match agent.next().await {
                Ok(Some(Incoming::Response(r))) if r.id.as_deref() == Some("models") => {
                    if !r.success {
                        return Err(ListError::Refused(r.error.unwrap_or_default()));
                    }
                    models = Some(r.models());
                }
                Ok(Some(Incoming::Response(r))) if r.id.as_deref() == Some("state") => {
                    state_pending = false;
                    start = r.state().map(|s| s.model);
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    let stderr = agent.stderr_text().await;
                    return Err(ListError::Exited(crate::pi_stderr::with_runner_advice(
                        &crate::pi_stderr::error_line(&stderr),
                    )));
                }
                Err(e) => return Err(ListError::Read(e)),
            }
        }
    })
    .await
    .unwrap_or(Err(ListError::Timeout));
    agent.stop(Duration::from_millis(1000)).await;
    result
}
