//! Candidate hard filters, ranking and the model-family rule (SPEC §3). Pure.
//! PLACEHOLDER bodies: replaced by the full rule set.

use std::collections::BTreeSet;

use crate::catalog::ModelInfo;
use crate::health::{Health, Keys};

/// Everything the hard filters look at besides the model itself.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    /// `provider/id` keys already tried this round.
    pub tried: &'a BTreeSet<String>,
    /// Endpoint keys isolated for the rest of the round.
    pub isolated_endpoints: &'a BTreeSet<String>,
    /// Families avoided after a content-policy failure this round.
    pub avoided_families: &'a BTreeSet<String>,
    /// The request carries images: only models that declare `image` input qualify.
    pub needs_images: bool,
    /// After a context overflow: only windows strictly larger than this qualify.
    pub larger_context_than: Option<u64>,
    pub health: &'a Health,
    pub now_ms: u64,
    /// Providers whose probe lease this process holds.
    pub own_leases: &'a [String],
}

/// Healthy candidates for replacing `current`, best first.
pub fn rank(current: &ModelInfo, pool: &[ModelInfo], filter: &Filter<'_>) -> Vec<ModelInfo> {
    pool.iter()
        .filter(|m| m.key() != current.key())
        .filter(|m| !filter.tried.contains(&m.key()))
        .filter(|m| !filter.isolated_endpoints.contains(&Keys::of(m).endpoint))
        .filter(|m| {
            filter
                .health
                .blocked(m, filter.now_ms, filter.own_leases)
                .is_none()
        })
        .filter(|m| !filter.needs_images || m.accepts_images())
        .filter(|m| {
            filter
                .larger_context_than
                .is_none_or(|c| m.context_window_or_zero() > c)
        })
        .filter(|m| !filter.avoided_families.contains(&family(m)))
        .cloned()
        .collect()
}

/// The model family (`glm`, `qwen`, ...) used to avoid siblings after a content-policy failure.
pub fn family(model: &ModelInfo) -> String {
    model
        .id
        .rsplit('/')
        .next()
        .unwrap_or(&model.id)
        .to_ascii_lowercase()
}

/// Pi's `--models` scope: the subset of `available` the comma-separated patterns select.
pub fn scope(patterns: &str, available: &[ModelInfo]) -> Vec<ModelInfo> {
    let pats: Vec<&str> = patterns
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    available
        .iter()
        .filter(|m| pats.iter().any(|p| m.key() == *p || m.id == *p))
        .cloned()
        .collect()
}
