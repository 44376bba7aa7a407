//! The secret values the runner can know, registered for masking before anything is printed:
//! the values of secret-named environment variables (Pi inherits them), the literal keys in Pi's
//! `models.json` and `auth.json` (read for masking only: held in memory, never written), and the
//! password of a Redis health URL.

use crate::settings::Settings;

/// Registers every secret value `settings` can point at with `redact`.
pub fn register(settings: &Settings) {
    let mut values = settings.secret_values.clone();
    if let Some(url) = &settings.health_url {
        // As written (%-escaped) and as sent to the server.
        values.extend(crate::health::store::url_password(url));
        values.extend(crate::health::store::redis_url_password(url));
    }
    if let Some(dir) = &settings.agent_dir {
        let read = |name: &str| crate::settings::pi_config_text(dir, name);
        if let Some(text) = read("models.json") {
            values.extend(crate::redact::secrets_in_models_json(
                &text,
                &|name: &str| crate::settings::var(name),
            ));
        }
        if let Some(text) = read("auth.json") {
            values.extend(crate::redact::secrets_in_auth_json(&text));
        }
    }
    crate::redact::add_known_secrets(values);
}
