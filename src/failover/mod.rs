//! Failover: classification, breakers, candidates and the sans-IO state machine that ties
//! them together. Nothing under `failover/` does I/O or reads a clock; time is passed in.

pub mod candidates;
pub mod classify;
pub mod ending;
pub mod explain;
pub mod machine;
pub mod reopen;
mod state;
pub mod stated;
pub mod tokens;
pub mod waiting;

pub use ending::{Exhaustion, Fatal, SetupProblem};
pub use machine::{
    Action, Attempt, CapacityOptions, Config, Input, Machine, Note, Options, Outcome, Rejected,
};
