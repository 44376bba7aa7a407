//! pi-ccswitch-run: runs a prompt through `pi --mode rpc` and fails over to a healthy model.

#![deny(clippy::unwrap_used, clippy::print_stdout)]

pub mod attach;
pub mod catalog;
pub mod clock;
pub mod complexity;
pub mod exit;
pub mod failover;
pub mod health;
pub mod redact;
