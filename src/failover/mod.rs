//! Failover: classification, breakers, candidates and the sans-IO state machine that ties
//! them together. Nothing under `failover/` does I/O or reads a clock; time is passed in.

pub mod breaker;
pub mod candidates;
pub mod classify;
pub mod explain;
pub mod machine;
pub mod reopen;

pub use machine::{Action, Attempt, Config, Machine, Options, Outcome};
