//! How much table a map keeps after a burst. Pure.
//!
//! A `HashMap` never gives back the table it grew to. The per-port bookkeeping
//! (hand-offs in flight, the status ledger, the notes of the port's own writes) holds
//! an entry per port only while ports change: linking 10,000 ports grows each map to
//! 10,000 slots, and an idle operator kept them all (heaptrack at 2,000 idle ports:
//! 1.9 MB of the 16.3 MB live heap was such tables). After a removal, an empty
//! map gives its whole table back, and a map of more than [`KEEP`] slots at under a
//! quarter of them is shrunk to twice its entries. The empty case matters most for the
//! many small maps: each switch worker's hand-offs hold one entry per port of the
//! batch (~600 bytes each), 200 workers' tables of 64 slots at 10,000 ports. Refilling
//! an emptied map costs one allocation. (Measured with jemalloc, all of it gave back
//! ~4 MiB of an idle operator at 10,000 ports: docs/benchmarks.md.)

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// Tables this small are shrunk only once empty.
pub const KEEP: usize = 64;

/// The capacity `map` should shrink to after a removal, if any: 0 when it is empty,
/// else twice its entries when its table holds more than [`KEEP`] slots and under a
/// quarter of them are used.
pub fn shrink_target(len: usize, capacity: usize) -> Option<usize> {
    if len == 0 {
        return (capacity > 0).then_some(0);
    }
    (capacity > KEEP && len * 4 < capacity).then(|| (len * 2).max(KEEP / 2))
}

/// Removes `key` from `map` and gives back the slack the removal leaves
/// ([`release`]).
pub fn remove<K, V, Q>(map: &mut HashMap<K, V>, key: &Q) -> Option<V>
where
    K: Eq + Hash + std::borrow::Borrow<Q>,
    Q: Eq + Hash + ?Sized,
{
    let removed = map.remove(key);
    release(map);
    removed
}

/// Gives back the slack of `map` per [`shrink_target`]; call after removing from it.
/// Amortised O(1): a shrink to twice the entries is followed by at least as many
/// insertions or removals before the next.
pub fn release<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if let Some(to) = shrink_target(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

/// [`release`] for a set.
pub fn release_set<K: Eq + Hash>(set: &mut HashSet<K>) {
    if let Some(to) = shrink_target(set.len(), set.capacity()) {
        set.shrink_to(to);
    }
}

/// [`release`] for a queue.
pub fn release_deque<T>(queue: &mut VecDeque<T>) {
    if let Some(to) = shrink_target(queue.len(), queue.capacity()) {
        queue.shrink_to(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_only_large_mostly_empty_tables() {
        for (len, capacity, want) in [
            (0, 0, None),
            (0, 3, Some(0)),
            (0, 64, Some(0)),
            (10, 56, None),
            (1, 64, None),
            (0, 14_336, Some(0)),
            (1, 14_336, Some(32)),
            (100, 14_336, Some(200)),
            (3_583, 14_336, Some(7_166)),
            (3_584, 14_336, None),
            (10_000, 14_336, None),
        ] {
            assert_eq!(
                shrink_target(len, capacity),
                want,
                "len {len} capacity {capacity}"
            );
        }
    }

    #[test]
    fn a_map_emptied_after_a_burst_gives_its_table_back() {
        let mut map: HashMap<u32, [u8; 64]> = (0..10_000).map(|i| (i, [0; 64])).collect();
        let grown = map.capacity();
        for i in 0..10_000 {
            remove(&mut map, &i);
        }
        assert!(grown >= 10_000);
        assert_eq!(map.capacity(), 0, "an emptied map keeps no table");
        // Entries that stay are kept.
        let mut map: HashMap<u32, u32> = (0..1_000).map(|i| (i, i)).collect();
        for i in 0..900 {
            remove(&mut map, &i);
        }
        assert_eq!(map.len(), 100);
        assert!((100..=512).contains(&map.capacity()), "{}", map.capacity());
        assert_eq!(map.get(&950), Some(&950));
    }
}
