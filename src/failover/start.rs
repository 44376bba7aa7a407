//! The start of a run, once Pi has reported its state and models: the user's `--models`,
//! `--provider` and `--model` are checked against Pi's registry (a typo must fail loudly, not
//! widen where the data goes), the start model is chosen, and `--explain` stops here.

use super::candidates::{self, family};
use super::explain::{self, Explanation, Ranked};
use super::machine::{Machine, Note, Outcome, Phase, Redispatch, SwitchReason};
use crate::catalog::ModelInfo;
use crate::catalog::scope::resolve_scope;
use crate::catalog::suggest::{closest, closest_models};
use crate::clock::Now;
use crate::failover::classify::FailureClass;
use crate::health::Block;

pub(super) use super::ending::SetupProblem;

/// How many names a "did you mean" list shows.
const SUGGESTIONS: usize = 5;

/// A rough token count of the request for the context-window check, meant never to
/// overestimate, so a model is only ever excluded when it surely cannot fit: four characters
/// per token for alphabetic text, and one per character for Chinese, Japanese and Korean
/// (their tokenizers give about one token per character or more; four per token was 2.5× low
/// for a Chinese report).
pub fn estimate_tokens(prompt: &str) -> u64 {
    let (cjk, other) = prompt.chars().fold((0usize, 0usize), |(cjk, other), c| {
        if is_cjk(c) {
            (cjk + 1, other)
        } else {
            (cjk, other + 1)
        }
    });
    u64::try_from(cjk.saturating_add(other.div_ceil(4))).unwrap_or(u64::MAX)
}

/// Han, kana, Hangul and the CJK punctuation and full-width forms that come with them.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{2E80}'..='\u{2FDF}'     // radicals
        | '\u{3000}'..='\u{30FF}'   // CJK punctuation, hiragana, katakana
        | '\u{3100}'..='\u{31FF}'   // bopomofo, kana extensions
        | '\u{3400}'..='\u{4DBF}'   // Han extension A
        | '\u{4E00}'..='\u{9FFF}'   // Han
        | '\u{AC00}'..='\u{D7AF}'   // Hangul syllables
        | '\u{F900}'..='\u{FAFF}'   // compatibility ideographs
        | '\u{FF00}'..='\u{FFEF}'   // full-width forms
        | '\u{20000}'..='\u{3134F}' // Han extensions B–G
    )
}

impl Machine {
    pub(super) fn maybe_start(&mut self, now: Now) {
        if self.phase != Phase::Starting || !self.pi.state_seen || !self.pi.models_seen {
            return;
        }
        if !self.shared.loaded {
            // Pi is ready; shared health gets a short grace (see `HEALTH_GRACE`).
            if self.shared.grace_until.is_none() {
                self.shared.grace_until = Some(now.instant + super::machine::HEALTH_GRACE);
            }
            return;
        }
        if let Err(problem) = self.check_setup() {
            return self.finish(Outcome::Setup(problem));
        }
        let current = self
            .dispatch
            .current
            .as_ref()
            .and_then(|c| self.pi.pool.iter().find(|m| m.key() == c.key()).cloned())
            .or_else(|| {
                // Pi's start model outside `--models` or without credentials: use Pi's object.
                self.dispatch.current.clone()
            });
        let Some(current) = current else {
            return self.finish(Outcome::Setup(SetupProblem::NoCurrentModel));
        };
        let current = self.scoped_start(current);
        // `--provider P` alone (Pi is not told: 1.6.0 refuses it without `--model`): start from
        // P's model, the one Pi would default to if it is P's, else P's first in the pool.
        let current = match (&self.cfg.provider, &self.cfg.model) {
            (Some(p), None) if current.provider != *p && self.opts.start_model.is_none() => self
                .pi
                .pool
                .iter()
                .chain(self.pi.registry.iter())
                .find(|m| m.provider == *p)
                .cloned()
                .unwrap_or(current),
            _ => current,
        };
        let current = match &self.opts.start_model {
            Some(key) => self
                .pi
                .pool
                .iter()
                .find(|m| &m.key() == key)
                .cloned()
                .unwrap_or(current),
            None => current,
        };
        // Pi is on the model it reported; any other start must be set first.
        self.dispatch.pending_set = self
            .pi
            .pi_model
            .as_ref()
            .is_some_and(|pi| pi.key() != current.key());
        // Pi starts a scoped model at the level its pattern named, unless one was asked for.
        if self.opts.thinking.is_none()
            && self.cfg.model.is_none()
            && let Some(level) = self.pi.scope_levels.get(&current.key())
        {
            self.opts.thinking = Some(level.clone());
        }
        self.dispatch.current = Some(current.clone());
        self.dispatch.start_key = Some(current.key());
        if current.provider == "unknown" && current.id == "unknown" {
            // Pi's placeholder for "no usable model at all": nothing can work.
            return self.finish(Outcome::Setup(SetupProblem::NoUsableModel));
        }
        self.avoid_refused_family(now, &current);
        let why_not = self.why_not_start(now, &current);
        if self.opts.explain {
            let explanation = self.explanation(now, &current, why_not);
            return self.finish(Outcome::Explained(Box::new(explanation)));
        }
        match why_not {
            // A start model whose cooldown expired may only be used as the single probe.
            None => self.go_to(now, current, Redispatch::Initial, SwitchReason::Probe),
            Some(why) => {
                self.note(Note::Start, format!("start: {} is {why}", current.key()));
                self.round.tried.insert(current.key());
                let reason = if !self.request.images.is_empty() && !current.accepts_images() {
                    SwitchReason::Modality
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
        let pool = &self.pi.pool;
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
        let registry = self.pi.registry.clone();
        if registry.is_empty() {
            return Err(SetupProblem::NoUsableModel);
        }
        let keys: Vec<String> = registry.iter().map(ModelInfo::key).collect();
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.pi.pool = match self.cfg.models_scope.clone() {
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
                self.pi.scope_levels = report.levels;
                report.models
            }
            None => registry.clone(),
        };
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
        if let Some(wanted) = &self.cfg.model
            && let Some(pi_model) = &self.pi.pi_model
            && !keys.contains(&pi_model.key())
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
            .health
            .models
            .get(&start.key())
            .is_some_and(|r| {
                r.cooling(now.wall_ms)
                    && r.last_class.as_deref() == Some(FailureClass::ContentPolicy.as_str())
            });
        if refused {
            self.request.avoided_families.insert(
                family(start),
                format!("{} refused the content recently", start.key()),
            );
        }
    }

    /// Why the start model cannot take the request, if it cannot.
    fn why_not_start(&self, now: Now, current: &ModelInfo) -> Option<String> {
        if !self.request.images.is_empty() && !current.accepts_images() {
            return Some("text-only and the request has images".to_string());
        }
        let needed = estimate_tokens(&self.request.prompt);
        if let Some(window) = current.context_window
            && window < needed
        {
            return Some(format!(
                "too small for the request (context window {window} < ~{needed} tokens)"
            ));
        }
        self.shared
            .health
            .blocked(current, now.wall_ms, &self.shared.own_leases)
            .map(|block| match block {
                Block::Disabled => "disabled".to_string(),
                Block::Cooling(s) => format!("{} breaker open", s.as_str()),
                Block::Leased => "another run is probing it".to_string(),
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
            .avoided_families
            .iter()
            .map(|(f, why)| (f.clone(), why.clone()))
            .collect();
        let request = explain::Request {
            health: &self.shared.health,
            now_ms: now.wall_ms,
            pool: &self.pi.pool,
            needs_images: !self.request.images.is_empty(),
            input_tokens: estimate_tokens(&self.request.prompt),
            avoided_families: &avoided,
        };
        let mut candidates = Vec::new();
        if start_skipped.is_none() {
            candidates.push(Ranked {
                model: start.key(),
                reason: "start model".to_string(),
            });
        }
        let filter = self.filter(now);
        for m in candidates::rank(start, &self.pi.pool, &filter) {
            if explain::why_excluded(&m, &request).is_none() {
                candidates.push(Ranked {
                    model: m.key(),
                    reason: explain::rank_reason(start, &m, &self.shared.health),
                });
            }
        }
        let excluded = self
            .pi
            .registry
            .iter()
            .filter(|m| !candidates.iter().any(|c| c.model == m.key()))
            .filter_map(|m| explain::why_excluded(m, &request))
            .collect();
        Explanation {
            start_model: start.key(),
            start_skipped,
            thinking: self
                .opts
                .thinking
                .clone()
                .or_else(|| self.pi.thinking_default.clone()),
            first_response_ms: millis(self.cfg.first_response),
            stall_ms: millis(self.cfg.stall),
            round_limit_ms: millis(self.cfg.round_limit),
            deadline_ms: self
                .opts
                .deadline
                .map(|d| millis(d.saturating_duration_since(now.instant))),
            wait: self.cfg.wait,
            input_tokens_estimate: estimate_tokens(&self.request.prompt),
            images: self.request.images.len(),
            candidates,
            excluded,
        }
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
