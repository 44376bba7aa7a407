//! A deterministic discrete-event simulation of batch workers, the capacity records of the
//! shared store and providers with a true concurrency cap. Pure: simulated milliseconds, no
//! threads. The provider refuses a request that arrives while `cap` are in flight, after
//! `reject_ms` (0: at once, as the fake server does); the workers run the controller's
//! protocol: acquire a slot (home provider first, then overflow to the others), send, report
//! the answer or the refusal; a refused job waits for a slot to free (another request's
//! answer, or its own re-check after `poll_ms`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Admission, Capacity, DEFAULT_LEASE_TTL_MS, Limits, Verdict};

#[derive(Debug, Clone)]
pub struct Provider {
    /// In flight the provider accepts.
    pub cap: usize,
    /// From this time on it accepts `.1` instead (a plan upgrade, another user of the key).
    pub cap_change: Option<(u64, usize)>,
    /// `--max-inflight` for it.
    pub max_inflight: Option<u32>,
}

impl Provider {
    pub fn capped(cap: usize) -> Provider {
        Provider {
            cap,
            cap_change: None,
            max_inflight: None,
        }
    }

    fn cap_at(&self, t: u64) -> usize {
        match self.cap_change {
            Some((at, cap)) if t >= at => cap,
            _ => self.cap,
        }
    }
}

/// One process: `workers` workers (`--jobs`), `jobs` jobs.
#[derive(Debug, Clone, Copy)]
pub struct Group {
    pub workers: usize,
    pub jobs: usize,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub providers: Vec<Provider>,
    pub groups: Vec<Group>,
    /// Answer time; each answer takes `duration_ms ± jitter_ms` (deterministic).
    pub duration_ms: u64,
    pub jitter_ms: u64,
    pub reject_ms: u64,
    /// How late another process notices a freed slot (its store poll).
    pub notice_ms: u64,
    /// A refused job re-checks for a slot this often.
    pub poll_ms: u64,
}

impl Scenario {
    pub fn new(providers: Vec<Provider>, groups: Vec<Group>) -> Scenario {
        Scenario {
            providers,
            groups,
            duration_ms: 1000,
            jitter_ms: 0,
            reject_ms: 0,
            notice_ms: 100,
            poll_ms: 1000,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimReport {
    pub requests: usize,
    pub rejected: usize,
    pub answered: usize,
    /// Jobs never answered (every provider's breaker opened).
    pub unanswered: usize,
    pub rate_limited: usize,
    pub makespan_ms: u64,
    /// Sum of answer times (for the ideal makespan with jitter).
    pub work_ms: u64,
    /// Most requests the provider had in flight at once.
    pub peak: Vec<usize>,
    pub final_limits: Vec<u32>,
}

impl SimReport {
    pub fn rejected_share(&self) -> f64 {
        self.rejected as f64 / self.requests.max(1) as f64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SimEvent {
    Done { worker: usize, provider: usize },
    Refused { worker: usize, provider: usize },
    Wake { group: usize },
    Poll { worker: usize },
}

struct SimWorker {
    group: usize,
    home: usize,
    has_job: bool,
    busy: bool,
}

struct World<'a> {
    s: &'a Scenario,
    records: Vec<Capacity>,
    start_ms: u64,
    in_flight: Vec<usize>,
    broken: Vec<bool>,
    workers: Vec<SimWorker>,
    left: Vec<usize>,
    events: BinaryHeap<Reverse<(u64, u64, SimEvent)>>,
    seq: u64,
    rng: u64,
    report: SimReport,
}

pub fn run(s: &Scenario) -> SimReport {
    let fresh = vec![Capacity::default(); s.providers.len()];
    run_from(s, fresh, 0).0
}

/// Runs the batch from `start_ms` against records a previous batch left; returns them too.
pub fn run_from(s: &Scenario, records: Vec<Capacity>, start_ms: u64) -> (SimReport, Vec<Capacity>) {
    let p = s.providers.len();
    let mut workers = Vec::new();
    for (g, group) in s.groups.iter().enumerate() {
        for i in 0..group.workers {
            workers.push(SimWorker {
                group: g,
                home: i % p.max(1),
                has_job: false,
                busy: false,
            });
        }
    }
    let mut w = World {
        s,
        records,
        start_ms,
        in_flight: vec![0; p],
        broken: vec![false; p],
        workers,
        left: s.groups.iter().map(|g| g.jobs).collect(),
        events: BinaryHeap::new(),
        seq: 0,
        rng: 0x9e37_79b9_7f4a_7c15,
        report: SimReport {
            peak: vec![0; p],
            ..SimReport::default()
        },
    };
    for i in 0..w.workers.len() {
        w.take_job(i);
    }
    for g in 0..s.groups.len() {
        w.push(start_ms, SimEvent::Wake { group: g });
    }
    while let Some(Reverse((t, _, event))) = w.events.pop() {
        w.handle(t, event);
    }
    let jobs: usize = s.groups.iter().map(|g| g.jobs).sum();
    w.report.unanswered = jobs - w.report.answered;
    w.report.final_limits = (0..p)
        .map(|i| w.records[i].effective_limit(start_ms + w.report.makespan_ms, w.limits(0, i)))
        .collect();
    (w.report, w.records)
}

impl World<'_> {
    fn push(&mut self, t: u64, event: SimEvent) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, event)));
    }

    fn limits(&self, group: usize, provider: usize) -> Limits {
        Limits {
            initial: u32::try_from(self.s.groups[group].workers).unwrap_or(u32::MAX),
            cap: self.s.providers[provider].max_inflight,
        }
    }

    fn slot(worker: usize) -> String {
        format!("w{worker}")
    }

    fn take_job(&mut self, worker: usize) {
        let g = self.workers[worker].group;
        self.workers[worker].has_job = self.left[g] > 0;
        self.left[g] = self.left[g].saturating_sub(1);
    }

    fn duration(&mut self) -> u64 {
        // xorshift64: deterministic jitter.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let j = self.s.jitter_ms;
        self.s.duration_ms - j + self.rng % (2 * j + 1)
    }

    fn handle(&mut self, t: u64, event: SimEvent) {
        match event {
            SimEvent::Done { worker, provider } => {
                self.in_flight[provider] -= 1;
                let limits = self.limits(self.workers[worker].group, provider);
                self.records[provider].answered(t, &Self::slot(worker), limits);
                self.report.answered += 1;
                self.report.makespan_ms = t - self.start_ms;
                self.workers[worker].busy = false;
                self.take_job(worker);
                let own = self.workers[worker].group;
                for g in 0..self.s.groups.len() {
                    let at = if g == own { t } else { t + self.s.notice_ms };
                    self.push(at, SimEvent::Wake { group: g });
                }
            }
            SimEvent::Refused { worker, provider } => {
                let limits = self.limits(self.workers[worker].group, provider);
                self.report.rejected += 1;
                self.workers[worker].busy = false;
                let verdict = self.records[provider].refused(t, &Self::slot(worker), limits, 0);
                if verdict == Verdict::RateLimited {
                    // The breaker opens: nobody sends to this provider again in this batch.
                    self.report.rate_limited += 1;
                    self.broken[provider] = true;
                }
                self.push(t + self.s.poll_ms, SimEvent::Poll { worker });
            }
            SimEvent::Wake { group } => {
                for i in 0..self.workers.len() {
                    if self.workers[i].group == group {
                        self.try_send(t, i);
                    }
                }
            }
            SimEvent::Poll { worker } => {
                self.try_send(t, worker);
                if self.waiting(worker) && self.events.is_empty() {
                    self.push(t + self.s.poll_ms, SimEvent::Poll { worker });
                }
            }
        }
    }

    fn waiting(&self, worker: usize) -> bool {
        let w = &self.workers[worker];
        w.has_job && !w.busy && !self.broken.iter().all(|b| *b)
    }

    fn try_send(&mut self, t: u64, worker: usize) {
        if !self.waiting(worker) {
            return;
        }
        let p = self.s.providers.len();
        let home = self.workers[worker].home;
        for provider in (0..p).map(|k| (home + k) % p) {
            if self.broken[provider] {
                continue;
            }
            let limits = self.limits(self.workers[worker].group, provider);
            let slot = Self::slot(worker);
            let admission = self.records[provider].acquire(t, &slot, DEFAULT_LEASE_TTL_MS, limits);
            if !matches!(admission, Admission::Granted { .. }) {
                continue;
            }
            self.workers[worker].busy = true;
            self.report.requests += 1;
            if self.in_flight[provider] >= self.s.providers[provider].cap_at(t) {
                self.push(t + self.s.reject_ms, SimEvent::Refused { worker, provider });
            } else {
                self.in_flight[provider] += 1;
                self.report.peak[provider] =
                    self.report.peak[provider].max(self.in_flight[provider]);
                let d = self.duration();
                self.report.work_ms += d;
                self.push(t + d, SimEvent::Done { worker, provider });
            }
            return;
        }
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
