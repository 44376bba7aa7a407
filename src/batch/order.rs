//! Input order for results printed on stdout: results arrive in any order and leave in input
//! order, and workers may run ahead of the next result to print by a bounded window only, so a
//! slow job holds back a bounded number of finished results. Pure: no I/O.

use std::collections::BTreeMap;

/// How far ahead of the next result to print a worker may start a job: `4 × workers + 64`.
/// Enough that a slow job rarely idles the other workers, small enough that the results held
/// back behind it stay a few hundred at most.
pub fn window(workers: usize) -> usize {
    workers.saturating_mul(4).saturating_add(64)
}

/// Whether job `index` may start while `next` is the next result to print.
pub fn may_start(index: usize, next: usize, workers: usize) -> bool {
    index < next.saturating_add(window(workers))
}

/// Finished results waiting for their turn.
#[derive(Debug)]
pub struct Reorder<T> {
    next: usize,
    pending: BTreeMap<usize, T>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            next: 0,
            pending: BTreeMap::new(),
        }
    }
}

impl<T> Reorder<T> {
    /// Files result `index` (each index once).
    pub fn push(&mut self, index: usize, item: T) {
        self.pending.insert(index, item);
    }

    /// The next result in input order, if it has arrived.
    pub fn pop(&mut self) -> Option<T> {
        let item = self.pending.remove(&self.next)?;
        self.next += 1;
        Some(item)
    }

    /// The index of the next result to print.
    pub fn next(&self) -> usize {
        self.next
    }

    /// How many results are held back.
    pub fn held(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn results_leave_in_input_order() {
        let mut r = Reorder::default();
        r.push(1, "b");
        assert_eq!(r.pop(), None);
        r.push(0, "a");
        assert_eq!(r.pop(), Some("a"));
        assert_eq!(r.pop(), Some("b"));
        assert_eq!(r.pop(), None);
        assert_eq!(r.next(), 2);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn the_window_is_four_per_worker_plus_64() {
        assert_eq!(window(1), 68);
        assert_eq!(window(4), 80);
        assert!(may_start(67, 0, 1));
        assert!(!may_start(68, 0, 1));
        assert!(may_start(68, 1, 1));
        assert!(
            may_start(usize::MAX - 1, usize::MAX - 1, usize::MAX),
            "no overflow"
        );
    }

    proptest! {
        #![proptest_config(crate::fuzz::config(500))]

        /// Whatever order results finish in, they come out in input order.
        #[test]
        fn any_finishing_order_prints_in_order(order in Just((0..100usize).collect::<Vec<_>>()).prop_shuffle()) {
            let mut r = Reorder::default();
            let mut out = Vec::new();
            for i in order {
                r.push(i, i);
                while let Some(x) = r.pop() {
                    out.push(x);
                }
            }
            prop_assert_eq!(out, (0..100).collect::<Vec<_>>());
        }
    }
}
