//! What one run or batch job is driven with, from the command line and the environment: the
//! failover tunables and the thinking level. Shared by `single` and `batch`, below both (the
//! crate root only starts them), so neither reaches back up to the root for it.

use crate::attach::Prepared;
use crate::cli::Invocation;
use crate::complexity::Complexity;
use crate::failover;
use crate::settings::Settings;

/// The failover tunables of this invocation; `wait_default` is the mode's (batch: wait).
pub fn failover_config(
    settings: &Settings,
    inv: &Invocation,
    wait_default: bool,
) -> failover::Config {
    failover::Config {
        first_response: settings.first_response,
        stall: settings.stall,
        round_limit: settings.round_limit,
        cooldown_scale: settings.cooldown_scale,
        models_scope: inv.models_scope.clone(),
        saved_default: if inv.models_scope.is_some() && inv.model.is_none() {
            settings
                .agent_dir
                .as_deref()
                .and_then(crate::settings::pi_saved_default)
        } else {
            None
        },
        provider: inv.provider.clone(),
        model: inv.model.clone(),
        wait: inv.wait.unwrap_or(wait_default),
    }
}

/// The thinking level of one prompt: `--thinking`, else `--task-complexity` estimated on this
/// prompt and its attachments, else none (see `complexity::effective_thinking`).
pub fn job_thinking(
    thinking: Option<&str>,
    complexity: Option<Complexity>,
    prompt: &str,
    prepared: &Prepared,
) -> Option<String> {
    let signals = crate::complexity::Signals {
        prompt,
        input_chars: prepared.message.chars().count(),
        files: prepared.text_files,
        images: prepared.images.len(),
    };
    crate::complexity::effective_thinking(thinking, complexity, &signals).map(str::to_string)
}
