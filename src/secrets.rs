//! The secret values the runner can know, registered for masking before anything is printed:
//! the values of secret-named environment variables (Pi inherits them), the literal keys in Pi's
//! `models.json` and `auth.json` (read for masking only: held in memory, never written), the
//! keys their `!command` values produce (run as Pi runs them, see
//! `agent::config_command_outputs`), and the password of a Redis health URL.

use crate::settings::Settings;

/// How long the `!command` values of Pi's config may take, at most (Pi gives each 10 s; its
/// deadline is ours too).
const COMMAND_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// Registers every secret value `settings` can point at with `redact`; `!command` values are
/// run within what is left of `deadline`.
pub fn register(settings: &Settings, deadline: std::time::Instant) {
    let mut values = settings.secret_values.clone();
    if let Some(url) = &settings.health_url {
        // As written (%-escaped) and as sent to the server.
        values.extend(crate::health::store::url_password(url));
        values.extend(crate::health::store::redis_url_password(url));
    }
    if let Some(dir) = &settings.agent_dir {
        let read = |name: &str| crate::settings::pi_config_text(dir, name);
        let models = read("models.json");
        let auth = read("auth.json");
        if let Some(text) = &models {
            values.extend(crate::redact::secrets_in_models_json(
                text,
                &|name: &str| crate::settings::var(name),
            ));
        }
        if let Some(text) = &auth {
            values.extend(crate::redact::secrets_in_auth_json(text));
        }
        let commands = crate::redact::commands_in_config(models.as_deref(), auth.as_deref());
        if !commands.is_empty() {
            let left = deadline.saturating_duration_since(crate::clock::now().instant);
            values.extend(crate::agent::config_command_outputs(
                &commands,
                left.min(COMMAND_BUDGET),
            ));
        }
    }
    crate::redact::add_known_secrets(values);
}
