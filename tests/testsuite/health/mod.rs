//! Shared health: runs that share breakers through the state file and through Redis, and the
//! stores themselves (one behaviour suite for both backends).

mod backends;
mod file_store;
mod redis_runs;
mod redis_store;
mod runs;
mod slow_redis;
mod stored_times;
