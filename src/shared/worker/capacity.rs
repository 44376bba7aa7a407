//! The store worker's capacity operations (issue 23): on the store, or on this process's own records
//! while the store is down.

use std::collections::BTreeMap;

use super::{Op, OpDone, OpResult, StoreWorker};
use crate::capacity::Capacity;
use crate::capacity::ops::{CapacityOp, CapacityReply};
use crate::health::store::{HealthStore as _, StoreError};

impl StoreWorker {
    /// A capacity operation on the store, or on this process's own records while the store is
    /// down (per-process limits: never worse than no limits, and the answer is never lost).
    pub(super) fn capacity(&mut self, op: CapacityOp, now_ms: u64) -> CapacityReply {
        if !self.usable(now_ms) {
            return self.capacity_in_memory(&op, now_ms);
        }
        self.recovered(now_ms);
        if !self.usable(now_ms) {
            return self.capacity_in_memory(&op, now_ms);
        }
        match self.run(Op::Capacity {
            op: op.clone(),
            now_ms,
        }) {
            OpResult::Done(OpDone::Capacity(Ok(reply))) => {
                self.answered();
                reply
            }
            // Another process holds the capacity lock right now: this once, the slot waits.
            OpResult::Done(OpDone::Capacity(Err(StoreError::LockTimeout { .. }))) => match op {
                CapacityOp::Admit { .. } => CapacityReply::Full {
                    next_expiry: None,
                    held: false,
                },
                CapacityOp::Apply { .. } => CapacityReply::Unavailable,
            },
            OpResult::Done(OpDone::Capacity(Err(e))) => {
                self.fail("taking a capacity slot", &e, now_ms);
                self.capacity_in_memory(&op, now_ms)
            }
            OpResult::Done(_) => CapacityReply::Unavailable,
            OpResult::Slow => {
                self.slow("taking a capacity slot", now_ms);
                self.capacity_in_memory(&op, now_ms)
            }
        }
    }

    fn capacity_in_memory(&mut self, op: &CapacityOp, now_ms: u64) -> CapacityReply {
        self.memory
            .capacity(op, now_ms)
            .unwrap_or(CapacityReply::Unavailable)
    }

    pub(super) fn load_capacity(&mut self, now_ms: u64) -> BTreeMap<String, Capacity> {
        if self.usable(now_ms)
            && let OpResult::Done(OpDone::CapacityLoaded(Ok(records))) =
                self.run(Op::LoadCapacity { now_ms })
        {
            return records;
        }
        self.memory.load_capacity(now_ms).unwrap_or_default()
    }
}
