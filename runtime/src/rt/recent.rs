//! Per-thread memory of the runtime's last answers that never change for their key: a
//! function's occupancy for a block size and shared memory, whether a wrapper waits for the
//! kernel before it. Each runtime keeps every answer in a map under a lock (`Inner::occupancy`,
//! `Inner::waits`); a thread that launches the same kernels over and over finds them here
//! without the lock and the map's hashing (a launch asks three times).
//!
//! Keys carry the runtime's serial number (`Inner::serial`, never reused in a process): a
//! function's address belongs to one context, and a later runtime may see another function at
//! the same address.

use std::cell::Cell;

/// Answers kept per thread and kind; the oldest makes way.
const KEPT: usize = 4;

/// A few (key, answer) pairs, replaced in turn.
pub(crate) struct Recent<K: Copy + PartialEq + 'static, V: Copy + 'static> {
    slots: [Cell<Option<(K, V)>>; KEPT],
    next: Cell<usize>,
}

impl<K: Copy + PartialEq, V: Copy> Recent<K, V> {
    pub const fn new() -> Recent<K, V> {
        Recent {
            slots: [const { Cell::new(None) }; KEPT],
            next: Cell::new(0),
        }
    }

    pub fn get(&self, key: K) -> Option<V> {
        self.slots
            .iter()
            .find_map(|s| s.get().filter(|(k, _)| *k == key).map(|(_, v)| v))
    }

    pub fn put(&self, key: K, value: V) {
        let i = self.next.get();
        self.slots[i].set(Some((key, value)));
        self.next.set((i + 1) % KEPT);
    }
}

/// Occupancy: (runtime serial, function, threads per block, dynamic shared memory) → blocks
/// per SM.
pub(crate) type OccupancyKey = (u64, usize, u32, u32);

thread_local! {
    pub(crate) static OCCUPANCY: Recent<OccupancyKey, u32> = const { Recent::new() };
    /// (runtime serial, wrapper function) → whether it waits for the kernel before it.
    pub(crate) static WAITS: Recent<(u64, usize), bool> = const { Recent::new() };
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn the_last_answers_are_kept_and_the_oldest_makes_way() {
        let r: Recent<u32, u32> = Recent::new();
        assert_eq!(r.get(1), None);
        for k in 1..=4 {
            r.put(k, 10 * k);
        }
        assert_eq!((r.get(1), r.get(4)), (Some(10), Some(40)));
        r.put(5, 50);
        assert_eq!((r.get(1), r.get(2), r.get(5)), (None, Some(20), Some(50)));
    }
}
