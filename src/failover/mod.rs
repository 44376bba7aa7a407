//! The failover state machine (sans-IO). Filled in by the failover issue.

pub mod breaker;
pub mod candidates;
pub mod classify;
