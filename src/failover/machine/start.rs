//! The start of a run, once Pi has reported its state and models: the user's `--models`,
//! `--provider` and `--model` are checked against Pi's registry (a typo must fail loudly, not
//! widen where the data goes), the start model is chosen, and `--explain` stops here.

use super::timers::Timer;
use super::{HEALTH_GRACE, Machine, Note, Outcome, Phase, Redispatch, SwitchReason};
use crate::catalog::ModelInfo;
use crate::catalog::scope::resolve_scope;
use crate::catalog::suggest::{closest, closest_models};
use crate::clock::Now;
use crate::failover::candidates;
use crate::failover::classify::FailureClass;
use crate::failover::ending::SetupProblem;
use crate::failover::explain::{self, Explanation, Ranked};
use crate::health::Block;

/// How many names a "did you mean" list shows.
const SUGGESTIONS: usize = 5;

impl Machine {
    pub(super) fn maybe_start(&mut self, now: Now) {
        if self.phase != Phase::Starting || !self.pi.ready() {
            return;
        }
        // The pre-request grace runs from now, for health and the first slot together.
        self.slot.open_window(now.instant + HEALTH_GRACE);
        if !self.shared.loaded() {
            // Pi is ready; shared health gets a short grace (see `HEALTH_GRACE`).
            self.timers
                .set_if_stopped(Timer::HealthGrace, now.instant + HEALTH_GRACE);
            return;
        }
        if let Err(problem) = self.check_setup() {
            return self.finish(now, Outcome::Setup(problem));
        }
        let current = self
            .dispatch
            .current()
            .and_then(|c| self.pi.pool().iter().find(|m| m.key() == c.key()))
            // Pi's start model outside `--models` or without credentials: use Pi's object.
            .or_else(|| self.dispatch.current())
            .cloned();
        let Some(current) = current else {
            return self.finish(now, Outcome::Setup(SetupProblem::NoCurrentModel));
        };
        let current = self.scoped_start(current);
        // `--provider P` alone (Pi is not told: 1.6.0 refuses it without `--model`): start from
        // P's model, the one Pi would default to if it is P's, else P's first in the pool.
        let current = match (&self.cfg.provider, &self.cfg.model) {
            (Some(p), None) if current.provider != *p && self.opts.start_model.is_none() => self
                .pi
                .pool()
                .iter()
                .chain(self.pi.registry().iter())
                .find(|m| m.provider == *p)
                .cloned()
                .unwrap_or(current),
            _ => current,
        };
        let current = match &self.opts.start_model {
            Some(key) => self
                .pi
                .pool()
                .iter()
                .find(|m| &m.key() == key)
                .cloned()
                .unwrap_or(current),
            None => current,
        };
        // Pi starts a scoped model at the level its pattern named, unless one was asked for.
        if self.opts.thinking.is_none()
            && self.cfg.model.is_none()
            && let Some(level) = self.pi.scope_level(&current.key())
        {
            self.opts.thinking = Some(level.to_string());
        }
        // Pi is on the model it reported; any other start must be set first.
        let differs = self
            .pi
            .pi_model()
            .is_some_and(|pi| pi.key() != current.key());
        self.dispatch.start_from(current.clone(), differs);
        if current.provider == "unknown" && current.id == "unknown" {
            // Pi's placeholder for "no usable model at all": nothing can work.
            return self.finish(now, Outcome::Setup(SetupProblem::NoUsableModel));
        }
        self.avoid_refused_family(now, &current);
        let why_not = self.why_not_start(now, &current);
        if self.opts.explain {
            let explanation = self.explanation(now, &current, why_not);
            return self.finish(now, Outcome::Explained(Box::new(explanation)));
        }
        match why_not {
            None if self.unsuited_start(now, &current) => {
                self.note(
                    Note::Start,
                    format!(
                        "start: {} did not follow this schema in an earlier job; trying it last",
                        current.key()
                    ),
                );
                self.choose_and_switch(now, Redispatch::Initial, SwitchReason::Unsuited);
            }
            // A start model whose cooldown expired may only be used as the single probe.
            None => self.go_to(now, current, Redispatch::Initial, SwitchReason::Probe),
            Some(why) => {
                self.note(Note::Start, format!("start: {} is {why}", current.key()));
                // `--prefer-primary`: a primary back within the window is waited for.
                if self.wait_for_primary(now, Redispatch::Initial) {
                    return;
                }
                self.round.mark_tried(current.key());
                let reason = if self.request.needs_images() && !current.accepts_images() {
                    SwitchReason::Modality
                } else if self.budget.capped(&current.provider) {
                    SwitchReason::OverBudget
                } else {
                    SwitchReason::Unhealthy
                };
                self.choose_and_switch(now, Redispatch::Initial, reason);
            }
        }
    }

    /// Where Pi would have started had it been given `--models` (it is not: see `cli`): with
    /// no `--model`, the saved default if it is in scope, else the first scoped model.
    fn scoped_start(&self, current: ModelInfo) -> ModelInfo {
        // A later batch job starts from the first job's start, which was found this way.
        if self.cfg.models_scope.is_none()
            || self.cfg.model.is_some()
            || self.opts.start_model.is_some()
        {
            return current;
        }
        let pool = self.pi.pool();
        self.cfg
            .saved_default
            .as_ref()
            .and_then(|k| pool.iter().find(|m| m.key() == *k))
            .or_else(|| pool.first())
            .cloned()
            .unwrap_or(current)
    }

    /// The user's scope, provider and model against Pi's registry. Patterns that match nothing
    /// are warned about; a scope that selects nothing, an unknown provider or an unknown start
    /// model stop the run before anything is sent.
    fn check_setup(&mut self) -> Result<(), SetupProblem> {
        let registry = self.pi.registry().to_vec();
        if registry.is_empty() {
            return Err(SetupProblem::NoUsableModel);
        }
        let keys: Vec<String> = registry.iter().map(|m| m.key().into()).collect();
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (pool, levels) = match self.cfg.models_scope.clone() {
            Some(patterns) => {
                let report = resolve_scope(&patterns, &registry);
                for p in &report.unmatched {
                    self.note(
                        Note::Warning,
                        format!(
                            "warning: --models pattern '{p}' matches none of Pi's available \
                             models{}",
                            did_you_mean(&closest(p, &key_refs, SUGGESTIONS))
                        ),
                    );
                }
                if report.models.is_empty() {
                    // Glob characters say nothing about which name was meant.
                    let text: String = patterns
                        .chars()
                        .filter(|c| !matches!(c, '*' | '?' | '[' | ']'))
                        .collect();
                    let closest = closest_first(&text, &key_refs);
                    return Err(SetupProblem::EmptyScope { patterns, closest });
                }
                (report.models, report.levels)
            }
            None => (registry.clone(), Default::default()),
        };
        self.pi.set_pool(pool, levels);
        let mut providers: Vec<&str> = Vec::new();
        for m in &registry {
            if !providers.contains(&m.provider.as_str()) {
                providers.push(&m.provider);
            }
        }
        if let Some(p) = &self.cfg.provider
            && !providers.contains(&p.as_str())
        {
            return Err(SetupProblem::UnknownProvider {
                given: p.clone(),
                closest: closest_first(p, &providers),
            });
        }
        if let Some(p) = self
            .cfg
            .max_inflight
            .keys()
            .find(|p| !providers.contains(&p.as_str()))
        {
            return Err(SetupProblem::UnknownCapProvider {
                given: p.clone(),
                closest: closest_first(p, &providers),
            });
        }
        // A cap on a provider Pi does not list would guard nothing: a typo, as for --provider.
        if let Some(p) = self
            .budget
            .caps()
            .providers()
            .find(|p| !providers.contains(p))
        {
            return Err(SetupProblem::UnknownBudgetProvider {
                given: p.to_string(),
                closest: closest_first(p, &providers),
            });
        }
        if let Some(wanted) = &self.cfg.model
            && let Some(pi_model) = self.pi.pi_model()
            && !keys.iter().any(|k| pi_model.key() == *k)
            && !(pi_model.provider == "unknown" && pi_model.id == "unknown")
        {
            return Err(SetupProblem::UnknownModel {
                wanted: wanted.clone(),
                sent_id: pi_model.id.clone(),
                provider: pi_model.provider.clone(),
                closest: closest_first_models(wanted, &key_refs),
            });
        }
        Ok(())
    }

    /// A start model cooling down after a content-policy refusal keeps its family out of this
    /// run too: a re-run of the same document would be refused the same way by its relatives.
    fn avoid_refused_family(&mut self, now: Now, start: &ModelInfo) {
        let refused = self
            .shared
            .health()
            .models
            .get(start.key().as_str())
            .is_some_and(|r| {
                r.cooling(now.wall_ms)
                    && r.last_class.as_deref() == Some(FailureClass::ContentPolicy.as_str())
            });
        if refused {
            self.request.avoid_family_of(
                start,
                format!("{} refused the content recently", start.key()),
            );
        }
    }

    /// Why the start model cannot take the request, if it cannot.
    fn why_not_start(&self, now: Now, current: &ModelInfo) -> Option<String> {
        if self.request.needs_images() && !current.accepts_images() {
            return Some("text-only and the request has images".to_string());
        }
        let needed = self.request.tokens();
        if let Some(window) = current.context_window
            && window < needed
        {
            return Some(format!(
                "too small for the request (context window {window} < ~{needed} tokens)"
            ));
        }
        if let Some(over) = self.budget.over(&current.provider) {
            let p = &current.provider;
            return Some(format!(
                "over its --max-cost cap ({p} recorded cost {:.6} of {p}={})",
                over.spent, over.cap
            ));
        }
        let blocked = self
            .shared
            .blocked(current, now.wall_ms)
            .map(|block| match block {
                Block::Disabled => "disabled".to_string(),
                Block::Cooling(s) => format!("{} breaker open", s.as_str()),
                Block::Leased => "another run is probing it".to_string(),
            });
        // Another provider entry at the same base URL (another key) found the server down.
        blocked.or_else(|| {
            let down = candidates::down_servers(self.pi.pool(), self.shared.health(), now.wall_ms);
            candidates::server(current)
                .and_then(|u| down.get(&u))
                .map(|e| format!("at a base URL that is down (endpoint breaker {e} open)"))
        })
    }

    /// `--explain`: the candidate order exactly as a failover from the start model would rank
    /// it, and every other model with why it is left out.
    fn explanation(
        &self,
        now: Now,
        start: &ModelInfo,
        start_skipped: Option<String>,
    ) -> Explanation {
        let avoided: Vec<(String, String)> = self
            .request
            .avoided_families()
            .iter()
            .map(|(f, why)| (f.clone(), why.clone()))
            .collect();
        let down_servers =
            candidates::down_servers(self.pi.pool(), self.shared.health(), now.wall_ms);
        let request = explain::RequestFacts {
            health: self.shared.health(),
            now_ms: now.wall_ms,
            pool: self.pi.pool(),
            needs_images: self.request.needs_images(),
            input_tokens: self.request.tokens(),
            avoided_families: &avoided,
            local_offset: self.opts.local_offset,
            down_servers: &down_servers,
        };
        let mut candidates = Vec::new();
        if start_skipped.is_none() {
            candidates.push(Ranked::new(start.key().into(), "start model".to_string()));
        }
        let filter = self.filter(now);
        for m in candidates::rank(start, self.pi.pool(), &filter) {
            if explain::why_excluded(&m, &request).is_none() {
                candidates.push(Ranked::new(
                    m.key().into(),
                    explain::rank_reason(start, &m, self.shared.health()),
                ));
            }
        }
        let excluded = self
            .pi
            .registry()
            .iter()
            .filter(|m| !candidates.iter().any(|c| m.key() == c.model))
            .filter_map(|m| explain::why_excluded(m, &request))
            .collect();
        let mut e = Explanation {
            start_model: start.key().into(),
            start_skipped,
            thinking: self
                .opts
                .thinking
                .clone()
                .or_else(|| self.pi.thinking_default().map(str::to_string)),
            first_response_ms: millis(self.cfg.first_response),
            stall_ms: millis(self.cfg.stall),
            round_limit_ms: millis(self.cfg.round_limit),
            deadline_ms: self
                .opts
                .deadline
                .map(|d| millis(d.saturating_duration_since(now.instant))),
            wait: self.cfg.wait,
            waiting: self.explain_waiting(now),
            input_tokens_estimate: self.request.tokens(),
            images: self.request.images().len(),
            candidates,
            excluded,
            cooldowns: explain::cooldowns(self.cfg.cooldown_scale),
        };
        self.explain_pacing(now, &mut e);
        e
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The names closest to `query` first, then the rest in their order (capped).
fn closest_first(query: &str, names: &[&str]) -> Vec<String> {
    then_the_rest(closest(query, names, SUGGESTIONS), names)
}

/// The models closest to `query` first, then the rest in their order.
fn closest_first_models(query: &str, keys: &[&str]) -> Vec<String> {
    then_the_rest(closest_models(query, keys, SUGGESTIONS), keys)
}

/// `out`, then the names of `all` it does not have yet, in their order.
fn then_the_rest<'a>(mut out: Vec<&'a str>, all: &[&'a str]) -> Vec<String> {
    for n in all {
        if !out.contains(n) {
            out.push(n);
        }
    }
    out.into_iter().map(str::to_string).collect()
}

/// `a, b, c, … (12 more)`.
fn did_you_mean(names: &[&str]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" (closest: {})", names.join(", "))
    }
}
