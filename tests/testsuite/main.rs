//! The integration tests: one crate (compiled once, like cargo's own `tests/testsuite`), a module
//! per concern, one support tree. Every test runs the real binary (or a library seam) against
//! real Pi (0.84.4 and 1.6.0, provisioned under `target/pi-env`), the project's fault-injecting
//! OpenAI-compatible server and, for shared health, a real `redis-server`; the scripted fake Pi
//! stands in only for what real Pi cannot be made to do.

// The clock and environment chokepoints are rules for the library, not for its tests.
#![allow(clippy::disallowed_methods)]

#[macro_use]
mod support;

mod batch;
mod budget;
mod capacity_runs;
mod ci_recipe;
mod cli;
mod demo;
mod docs;
mod explain_and_retry;
mod failover;
mod health;
mod images;
mod layout;
mod model_selection;
mod npm;
mod pace;
mod pi_faults;
mod quota;
mod records;
mod release;
mod rig;
mod runner;
mod schema;
mod security;
mod truncation;
mod waiting;
