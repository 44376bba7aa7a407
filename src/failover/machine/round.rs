//! One failover round: from the first request (or the end of a wait) until the outcome. A new
//! round (after a wait) forgets what the last one tried.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::failover::classify::FailureClass;

/// An endpoint that failed this many times in a round is left out for the rest of it.
const ISOLATE_AFTER: u32 = 3;

#[derive(Debug, Default)]
pub(super) struct Round {
    /// When the round window started (the first prompt accepted, restarted at each switch).
    started: Option<Instant>,
    tried: BTreeSet<String>,
    endpoint_failures: BTreeMap<String, u32>,
    isolated: BTreeSet<String>,
    /// Endpoint failures per server (normalised base URL), under any provider: the keys of one
    /// provider are provider entries of their own that share its server.
    server_failures: BTreeMap<String, u32>,
    isolated_servers: BTreeSet<String>,
    /// The last failure was of the current model's key (auth, quota, rate limit).
    key_failed: bool,
    retried_same: BTreeSet<String>,
    /// (model, class) failures already recorded: Pi's own retries of the same failure must not
    /// double the cooldown again and again within one round.
    recorded: BTreeSet<(String, FailureClass)>,
}

impl Round {
    /// A prompt was accepted: the window starts with the first.
    pub(super) fn prompted(&mut self, now: Instant) {
        self.started.get_or_insert(now);
    }

    /// A switch succeeded: the window starts again (once the round has begun).
    pub(super) fn switched(&mut self, now: Instant) {
        if self.started.is_some() {
            self.started = Some(now);
        }
    }

    /// The round has run for `limit`.
    pub(super) fn expired(&self, now: Instant, limit: Duration) -> bool {
        self.started
            .is_some_and(|t| now.saturating_duration_since(t) >= limit)
    }

    pub(super) fn mark_tried(&mut self, model: impl Into<String>) {
        self.tried.insert(model.into());
    }

    pub(super) fn tried(&self) -> &BTreeSet<String> {
        &self.tried
    }

    /// `model` gets its one same-model retry of the round (`false` when it had it): it is a
    /// candidate again.
    pub(super) fn retry_same(&mut self, model: &str) -> bool {
        let first = self.retried_same.insert(model.to_string());
        if first {
            self.tried.remove(model);
        }
        first
    }

    /// `model` is being probed (its breaker's one request after the cooldown): it gets no
    /// same-model retry this round.
    pub(super) fn probing(&mut self, model: &str) {
        self.retried_same.insert(model.to_string());
    }

    /// An endpoint failure; after [`ISOLATE_AFTER`] of them the endpoint is left out.
    pub(super) fn endpoint_failed(&mut self, endpoint: &str) {
        let n = self
            .endpoint_failures
            .entry(endpoint.to_string())
            .or_insert(0);
        *n += 1;
        if *n >= ISOLATE_AFTER {
            self.isolated.insert(endpoint.to_string());
        }
    }

    pub(super) fn isolated(&self) -> &BTreeSet<String> {
        &self.isolated
    }

    /// A failure of class `class` on a model whose server is `server` (its normalised base
    /// URL). Endpoint failures are counted per server too, under whichever provider entry they
    /// came: after [`ISOLATE_AFTER`] the server is left out for every entry at it.
    pub(super) fn failed(&mut self, class: FailureClass, server: Option<String>) {
        self.key_failed = matches!(
            class,
            FailureClass::Auth | FailureClass::Quota | FailureClass::RateLimit
        );
        if class == FailureClass::Endpoint
            && let Some(server) = server
        {
            let n = self.server_failures.entry(server.clone()).or_insert(0);
            *n += 1;
            if *n >= ISOLATE_AFTER {
                self.isolated_servers.insert(server);
            }
        }
    }

    pub(super) fn isolated_servers(&self) -> &BTreeSet<String> {
        &self.isolated_servers
    }

    /// The last failure was of the key (see [`Round::failed`]).
    pub(super) fn key_failed(&self) -> bool {
        self.key_failed
    }

    /// `true` the first time `model` fails with `class` this round.
    pub(super) fn first_failure(&mut self, model: &str, class: FailureClass) -> bool {
        self.recorded.insert((model.to_string(), class))
    }
}
