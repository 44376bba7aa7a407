//! Spend caps (`--max-cost`): what the user lets this process spend — in total, and per
//! provider — and what it has spent. A cost is Pi's `usage.cost` of one model call (Pi prices it
//! from `cost` in models.json, in whatever currency those prices are), answered or failed.
//!
//! The caps are per process: each shard of a batch has its own. A total cap once reached stops
//! the run from starting any new job or attempt (what is in flight finishes); a provider's cap
//! once reached takes that provider out of the candidates for the rest of the run. "Reached"
//! means the recorded cost is at least the cap.
//!
//! Pure: amounts in, verdicts out. The [`Ledger`] is the process's running account; the
//! failover machine keeps a copy ([`Spend`]) that the driver refreshes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A positive, finite amount (never NaN, so it can be `Eq`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Amount(f64);

impl Eq for Amount {}

impl Amount {
    pub fn get(self) -> f64 {
        self.0
    }

    /// A plain decimal: digits with at most one `.` (`5`, `0.25`, `.5`, `2.`); no sign, no
    /// exponent, no `inf`/`nan`, no spaces. Zero is not a cap (it would start nothing).
    fn parse(text: &str) -> Option<Amount> {
        let digits = text.bytes().filter(u8::is_ascii_digit).count();
        let dots = text.bytes().filter(|b| *b == b'.').count();
        if digits == 0 || dots > 1 || digits + dots != text.len() {
            return None;
        }
        let value: f64 = text.parse().ok()?;
        (value.is_finite() && value > 0.0).then_some(Amount(value))
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `--max-cost` as given: a cap on the whole run, caps on providers, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caps {
    total: Option<Amount>,
    providers: BTreeMap<String, Amount>,
}

impl Caps {
    /// The `--max-cost` values, each `COST` or `PROVIDER=COST`, several in one value
    /// separated by commas (`--max-cost 20,zai=5 --max-cost minimax=3`). The error is one line
    /// naming the value.
    pub fn parse(values: &[String]) -> Result<Caps, String> {
        let mut caps = Caps::default();
        for value in values {
            if value.is_empty() {
                return Err("--max-cost requires a value".to_string());
            }
            for item in crate::provider_list::items(value) {
                caps.take(value, item)?;
            }
        }
        Ok(caps)
    }

    fn take(
        &mut self,
        value: &str,
        item: crate::provider_list::ListItem<'_>,
    ) -> Result<(), String> {
        let expected = "expected COST or PROVIDER=COST with a positive amount such as 5 or \
                        0.25, several separated by commas";
        if item.text.is_empty() {
            return Err(format!(
                "--max-cost '{value}' has an empty item; {expected}"
            ));
        }
        let (provider, amount) = (item.provider, item.value);
        let item = item.text;
        let Some(amount) = Amount::parse(amount) else {
            return Err(format!(
                "--max-cost '{value}': '{amount}' is not a positive amount; {expected}"
            ));
        };
        match provider {
            None => match self.total {
                Some(first) => Err(format!(
                    "--max-cost gives the total cap twice ({first} and {amount}); give one"
                )),
                None => {
                    self.total = Some(amount);
                    Ok(())
                }
            },
            Some("") => Err(format!(
                "--max-cost '{value}': '{item}' names no provider; {expected}"
            )),
            Some(p) => match self.providers.get(p) {
                Some(first) => Err(format!(
                    "--max-cost gives provider '{p}' twice ({p}={first} and {p}={amount}); give \
                     one"
                )),
                None => {
                    self.providers.insert(p.to_string(), amount);
                    Ok(())
                }
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.total.is_none() && self.providers.is_empty()
    }

    /// The providers given a cap of their own (checked against Pi's registry at start).
    pub fn providers(&self) -> impl Iterator<Item = &str> {
        self.providers.keys().map(String::as_str)
    }

    /// The total cap, when `spend` has reached it.
    pub fn total_reached(&self, spend: &Spend) -> Option<Over> {
        let cap = self.total?;
        (spend.total >= cap.0).then_some(Over {
            cap,
            spent: spend.total,
        })
    }

    /// `provider`'s own cap, when `spend` has reached it.
    pub fn provider_reached(&self, spend: &Spend, provider: &str) -> Option<Over> {
        let cap = *self.providers.get(provider)?;
        let spent = spend.of(provider);
        (spent >= cap.0).then_some(Over { cap, spent })
    }

    /// The providers whose cap `spend` has reached.
    pub fn capped(&self, spend: &Spend) -> BTreeSet<String> {
        self.providers
            .keys()
            .filter(|p| self.provider_reached(spend, p).is_some())
            .cloned()
            .collect()
    }

    /// Every one of `providers` (at least one) is over its own cap: nothing is left to spend
    /// on, as when the total cap is reached. Listed by name.
    pub fn all_capped<'a>(
        &self,
        spend: &Spend,
        providers: impl IntoIterator<Item = &'a str>,
    ) -> Option<OverBudget> {
        let mut over: Vec<(String, Over)> = Vec::new();
        for p in providers {
            if over.iter().any(|(q, _)| q == p) {
                continue;
            }
            over.push((p.to_string(), self.provider_reached(spend, p)?));
        }
        over.sort_by(|a, b| a.0.cmp(&b.0));
        (!over.is_empty()).then_some(OverBudget::Providers(over))
    }
}

/// What has been spent: in total and per provider.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spend {
    total: f64,
    providers: BTreeMap<String, f64>,
}

impl Spend {
    /// One model call's cost on `provider`. Only a positive, finite cost counts (a call Pi
    /// priced at nothing, or a price Pi garbled, changes nothing); `false` when it did not.
    pub fn add(&mut self, provider: &str, cost: f64) -> bool {
        if !(cost.is_finite() && cost > 0.0) {
            return false;
        }
        self.total += cost;
        *self.providers.entry(provider.to_string()).or_insert(0.0) += cost;
        true
    }

    pub fn total(&self) -> f64 {
        self.total
    }

    /// What `provider` was paid.
    pub fn of(&self, provider: &str) -> f64 {
        self.providers.get(provider).copied().unwrap_or(0.0)
    }
}

/// A cap and the cost recorded against it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Over {
    pub cap: Amount,
    pub spent: f64,
}

/// Why a job cannot start another attempt for lack of budget.
#[derive(Debug, Clone, PartialEq)]
pub enum OverBudget {
    /// The run's total cap is reached.
    Total(Over),
    /// Every provider that could take the request is over its own cap.
    Providers(Vec<(String, Over)>),
}

impl fmt::Display for OverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverBudget::Total(o) => write!(
                f,
                "this run recorded cost {:.6} of --max-cost {}",
                o.spent, o.cap
            ),
            OverBudget::Providers(list) => {
                let each: Vec<String> = list
                    .iter()
                    .map(|(p, o)| format!("{p} recorded {:.6} of {p}={}", o.spent, o.cap))
                    .collect();
                write!(
                    f,
                    "every provider left is over its --max-cost cap ({})",
                    each.join(", ")
                )
            }
        }
    }
}

/// A cap that one cost just made reached: news once per process.
#[derive(Debug, Clone, PartialEq)]
pub enum Crossing {
    Total(Over),
    Provider(String, Over),
}

impl fmt::Display for Crossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Crossing::Total(o) => write!(
                f,
                "spend cap reached: this run recorded cost {:.6} of --max-cost {}; no new job or \
                 attempt starts (what is under way finishes)",
                o.spent, o.cap
            ),
            Crossing::Provider(p, o) => write!(
                f,
                "spend cap reached: {p} recorded cost {:.6} of --max-cost {p}={}; it is skipped \
                 for the rest of this run",
                o.spent, o.cap
            ),
        }
    }
}

/// The process's account: every cost recorded, against the caps. Each change bumps
/// [`Ledger::version`], so a copy knows when it is stale.
#[derive(Debug, Default)]
pub struct Ledger {
    caps: Caps,
    spend: Spend,
    version: u64,
}

impl Ledger {
    pub fn new(caps: Caps) -> Ledger {
        Ledger {
            caps,
            spend: Spend::default(),
            version: 0,
        }
    }

    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    pub fn spend(&self) -> &Spend {
        &self.spend
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Records one call's cost on `provider`; returns the caps it made reached.
    pub fn add(&mut self, provider: &str, cost: f64) -> Vec<Crossing> {
        let total_before = self.caps.total_reached(&self.spend).is_some();
        let provider_before = self.caps.provider_reached(&self.spend, provider).is_some();
        if !self.spend.add(provider, cost) {
            return Vec::new();
        }
        self.version += 1;
        let mut crossed = Vec::new();
        if !total_before && let Some(o) = self.caps.total_reached(&self.spend) {
            crossed.push(Crossing::Total(o));
        }
        if !provider_before && let Some(o) = self.caps.provider_reached(&self.spend, provider) {
            crossed.push(Crossing::Provider(provider.to_string(), o));
        }
        crossed
    }

    /// The total cap, when it is reached.
    pub fn total_reached(&self) -> Option<OverBudget> {
        self.caps.total_reached(&self.spend).map(OverBudget::Total)
    }

    /// `why` with the figures as they are now (what was under way when it was found has
    /// finished and added its cost since). A total once reached stays reached; so do caps.
    pub fn restate(&self, why: &OverBudget) -> OverBudget {
        match why {
            OverBudget::Total(over) => OverBudget::Total(Over {
                cap: over.cap,
                spent: self.spend.total.max(over.spent),
            }),
            OverBudget::Providers(list) => OverBudget::Providers(
                list.iter()
                    .map(|(p, over)| {
                        let spent = self.spend.of(p).max(over.spent);
                        (
                            p.clone(),
                            Over {
                                cap: over.cap,
                                spent,
                            },
                        )
                    })
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
