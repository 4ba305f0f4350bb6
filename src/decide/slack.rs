//! How much table a map keeps after a burst. Pure.
//!
//! A `HashMap` never gives back the table it grew to. The per-port bookkeeping
//! (hand-offs in flight, the status ledger, the notes of the port's own writes) holds
//! an entry per port only while ports change: linking 10,000 ports grows each map to
//! 10,000 slots, and an idle operator kept them all (heaptrack at 2,000 idle ports:
//! 1.9 MB of the 16.3 MB live heap was such empty tables). After a removal, a map at
//! under a quarter of its table is shrunk to twice its entries; maps of at most
//! [`KEEP`] slots are left alone (churn on a few entries reallocates nothing).

use std::collections::HashMap;
use std::hash::Hash;

/// Tables this small are never shrunk.
pub const KEEP: usize = 64;

/// The capacity `map` should shrink to after a removal, if any: `Some` when its table
/// holds more than [`KEEP`] slots and under a quarter of them are used.
pub fn shrink_target(len: usize, capacity: usize) -> Option<usize> {
    (capacity > KEEP && len * 4 < capacity).then(|| (len * 2).max(KEEP / 2))
}

/// Gives back the slack of `map` per [`shrink_target`]; call after removing from it.
/// Amortised O(1): a shrink to twice the entries is followed by at least as many
/// insertions or removals before the next.
pub fn release<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if let Some(to) = shrink_target(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_only_large_mostly_empty_tables() {
        for (len, capacity, want) in [
            (0, 0, None),
            (0, 64, None),
            (10, 56, None),
            (0, 14_336, Some(32)),
            (100, 14_336, Some(200)),
            (3_583, 14_336, Some(7_166)),
            (3_584, 14_336, None),
            (10_000, 14_336, None),
        ] {
            assert_eq!(shrink_target(len, capacity), want, "len {len} capacity {capacity}");
        }
    }

    #[test]
    fn a_map_emptied_after_a_burst_gives_its_table_back() {
        let mut map: HashMap<u32, [u8; 64]> = (0..10_000).map(|i| (i, [0; 64])).collect();
        let grown = map.capacity();
        for i in 0..10_000 {
            map.remove(&i);
            release(&mut map);
        }
        assert!(grown >= 10_000);
        assert!(map.capacity() <= KEEP, "kept {} slots", map.capacity());
        // Entries that stay are kept.
        let mut map: HashMap<u32, u32> = (0..1_000).map(|i| (i, i)).collect();
        for i in 0..900 {
            map.remove(&i);
            release(&mut map);
        }
        assert_eq!(map.len(), 100);
        assert!((100..=512).contains(&map.capacity()), "{}", map.capacity());
        assert_eq!(map.get(&950), Some(&950));
    }
}
