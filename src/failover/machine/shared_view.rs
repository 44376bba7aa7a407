//! This run's copy of the shared health and what it has asked the store to change. Every change
//! the run makes is applied here at once and kept until the store confirms it, so a newer view
//! from the store never takes back what this run already knows.

use std::collections::VecDeque;

use crate::catalog::ModelInfo;
use crate::failover::classify::Scope;
use crate::failover::reopen::{self, Availability};
use crate::health::{Block, Delta, Health, Keys, ProbeTarget};

#[derive(Debug)]
pub(super) struct SharedView {
    health: Health,
    /// Records sent to the driver whose merged result has not come back yet: (seq, delta).
    unconfirmed: VecDeque<(u64, Delta)>,
    record_seq: u64,
    /// Probe leases this process holds (their breakers do not block it).
    own_leases: Vec<ProbeTarget>,
    /// The store's health has arrived, or the run stopped waiting for it.
    loaded: bool,
    cooldown_scale: f64,
}

impl SharedView {
    /// `loaded`: `health` is already the store's (else it comes through `merge` later).
    pub(super) fn new(health: Health, loaded: bool, cooldown_scale: f64) -> SharedView {
        SharedView {
            health,
            unconfirmed: VecDeque::new(),
            record_seq: 0,
            own_leases: Vec::new(),
            loaded,
            cooldown_scale,
        }
    }

    pub(super) fn health(&self) -> &Health {
        &self.health
    }

    /// Applies `delta` here and returns the sequence number it is to be stored under.
    pub(super) fn record(&mut self, delta: &Delta) -> u64 {
        self.health.apply(delta, self.cooldown_scale);
        self.record_seq += 1;
        self.unconfirmed.push_back((self.record_seq, delta.clone()));
        self.record_seq
    }

    /// The store's view after this run's record `seq`: records since are applied again.
    pub(super) fn merge(&mut self, seq: u64, health: Health) {
        self.health = health;
        while self.unconfirmed.front().is_some_and(|(s, _)| *s <= seq) {
            self.unconfirmed.pop_front();
        }
        for (_, delta) in &self.unconfirmed {
            self.health.apply(delta, self.cooldown_scale);
        }
    }

    pub(super) fn loaded(&self) -> bool {
        self.loaded
    }

    /// The run stops waiting for the store's health; `true` the first time.
    pub(super) fn mark_loaded(&mut self) -> bool {
        !std::mem::replace(&mut self.loaded, true)
    }

    pub(super) fn own_leases(&self) -> &[ProbeTarget] {
        &self.own_leases
    }

    pub(super) fn hold_lease(&mut self, target: ProbeTarget) {
        self.own_leases.push(target);
    }

    /// Gives back the leases this run holds on any breaker of the model with `keys`.
    pub(super) fn take_leases_of(&mut self, keys: &Keys) -> Vec<ProbeTarget> {
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.own_leases)
            .into_iter()
            .partition(|t| keys.get(t.scope) == Some(t.key.as_str()));
        self.own_leases = others;
        mine
    }

    /// Another run holds the lease on `target`: noted here (not recorded) until the store says
    /// so, so a job out of candidates waits for that probe instead of giving up.
    pub(super) fn note_foreign_lease(&mut self, target: &ProbeTarget, now_ms: u64) {
        if let Some(r) = self
            .health
            .records_mut(target.scope)
            .and_then(|m| m.get_mut(&target.key))
            && !r.leased(now_ms)
        {
            r.lease_until = Some(now_ms.saturating_add(crate::health::cooldown::PROBE_LEASE_MS));
        }
    }

    /// The half-open breaker whose lease must be claimed before `model` is used.
    pub(super) fn needs_probe(&self, model: &ModelInfo, now_ms: u64) -> Option<ProbeTarget> {
        self.health.needs_probe(model, now_ms, &self.own_leases)
    }

    pub(super) fn blocked(&self, model: &ModelInfo, now_ms: u64) -> Option<Block> {
        self.health.blocked(model, now_ms, &self.own_leases)
    }

    pub(super) fn availability(&self, model: &ModelInfo, now_ms: u64) -> Availability {
        reopen::availability(model, &self.health, now_ms, &self.own_leases)
    }

    /// The breaker of `scope` `key` is open (cooling down).
    pub(super) fn breaker_open(&self, scope: Scope, key: &str, now_ms: u64) -> bool {
        self.health
            .records(scope)
            .and_then(|m| m.get(key))
            .is_some_and(|r| r.cooling(now_ms))
    }

    /// How long the breaker of `scope` `key` stays open (0 when it is not).
    pub(super) fn cooldown_left(&self, scope: Scope, key: &str, now_ms: u64) -> u64 {
        self.health
            .records(scope)
            .and_then(|m| m.get(key))
            .and_then(|r| r.cooldown_until)
            .map_or(0, |t| t.saturating_sub(now_ms))
    }

    /// The reset the provider stated for the open breaker of `scope` `key`, if it stated one.
    pub(super) fn stated_reset(&self, scope: Scope, key: &str, now_ms: u64) -> Option<u64> {
        self.health
            .records(scope)
            .and_then(|m| m.get(key))
            .and_then(|r| r.stated_reset_at(now_ms))
    }
}
