//! Warnings about the models that served a run: one from Pi's built-in catalogue that the user
//! named nowhere (README's CI example once started on `deepseek/deepseek-v4-pro` because a
//! `DEEPSEEK_API_KEY` was exported). Reads Pi's config files once per process (`settings`); the
//! rules are `catalog::origin`'s; the wording is the finding's own `Display`.

use crate::catalog::origin::{Named, PiConfig, unchosen_built_ins};
use crate::cli::Invocation;
use crate::job::Ended;
use crate::output::Warning;
use crate::settings::{self, Settings};

/// What the user named for this process's runs, and where Pi's models come from.
#[derive(Debug, Clone)]
pub struct Origins {
    config: PiConfig,
    saved_default: Option<String>,
    /// `--model` or `--provider` chose the start model.
    start_flag: bool,
    scoped: bool,
}

impl Origins {
    /// `None` without an agent dir (then nothing is known of where models come from).
    pub fn load(settings: &Settings, inv: &Invocation) -> Option<Origins> {
        let dir = settings.agent_dir.as_deref()?;
        Some(Origins {
            config: settings::pi_config(dir),
            saved_default: settings::pi_saved_default(dir),
            start_flag: inv.model.is_some() || inv.provider.is_some(),
            scoped: inv.models_scope.is_some(),
        })
    }

    /// The warnings of a run that ended as `ended`.
    pub fn warnings(&self, ended: &Ended) -> Vec<Warning> {
        let start = ended.start_model.as_deref();
        let used: Vec<String> = ended.attempts.iter().map(|a| a.model.to_string()).collect();
        let named = Named {
            start,
            start_chosen: self.start_flag
                || (start.is_some() && self.saved_default.as_deref() == start),
            scoped: self.scoped,
        };
        unchosen_built_ins(&used, &named, &self.config, &|name: &str| {
            settings::var(name)
        })
        .into_iter()
        .map(|u| Warning {
            code: u.code(),
            model: Some(u.model.clone()),
            message: u.to_string(),
        })
        .collect()
    }
}
