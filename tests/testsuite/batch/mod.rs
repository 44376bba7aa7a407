//! `--batch`: running jobs, job lines and their fields, durable results (`--output`,
//! `--resume`, `--shard`) and the scheduler recipes README ships, run exactly as written.

mod capacity;
mod capacity_clocks;
mod capacity_shared;
mod durable;
mod jobs;
mod nightly;
mod recipes;
mod record_integrity;
mod reruns;
mod running;
