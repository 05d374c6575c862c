//! The RNIC's on-chip caches: a fixed number of entries, least recently used out first. The
//! NIC keeps two — queue-pair contexts (which connections' state is on chip) and memory
//! translations (which MTT entries are) — because what the StaR, uRDMA and LEFT papers measure
//! depends on what fits: 300 connections that fit against 3,000 that do not, a translation that
//! must cross PCIe on a miss. A miss of the translation cache really reads the MTT entry from
//! host memory (the fabric counts that read); a hit does not. A QP-context miss is counted as a
//! read of the context from the NIC's context memory in the host (`qp_context_bytes`), though
//! the state itself lives in the model either way; what a miss costs in time is the virtual-time
//! runner's to charge.
//!
//! Left out: set associativity and replacement other than LRU, prefetching, the WQE cache.

use std::hash::Hash;

use rustc_hash::FxHashMap;

const NIL: u32 = u32::MAX;

/// Hit, miss and eviction counts of one cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheCounters {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Entries read in the background ([`LruCache::fill`]): their reads delay no packet.
    pub fills: u64,
}

/// A cache's entries, least recent first, and its counts ([`LruCache::contents`]).
#[derive(Clone)]
pub struct LruContents<K, V> {
    entries: Vec<(K, V)>,
    counters: CacheCounters,
}

#[derive(Clone)]
struct Slot<K, V> {
    key: K,
    value: V,
    /// Towards the most recently used end.
    newer: u32,
    older: u32,
}

/// A least-recently-used cache of at most `capacity` entries, every operation O(1): a hash map
/// from key to slot and a doubly linked recency list threaded through the slots.
#[derive(Clone)]
pub struct LruCache<K, V> {
    capacity: usize,
    map: FxHashMap<K, u32>,
    slots: Vec<Slot<K, V>>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
    pub counters: CacheCounters,
}

impl<K: Hash + Eq + Copy, V: Copy> LruCache<K, V> {
    /// A cache of `capacity` entries (0: nothing is ever cached, every lookup misses).
    pub fn new(capacity: usize) -> Self {
        LruCache {
            capacity,
            map: FxHashMap::with_capacity_and_hasher(capacity.min(1 << 16), Default::default()),
            // Sized up front (up to 64 Ki entries), so lookups in steady traffic never allocate.
            slots: Vec::with_capacity(capacity.min(1 << 16)),
            free: Vec::new(),
            newest: NIL,
            oldest: NIL,
            counters: CacheCounters::default(),
        }
    }

    /// Empties the cache and zeroes its counters: it is then as a new one of its capacity, with
    /// its table and slots still allocated.
    pub fn clear(&mut self) {
        self.map.clear();
        self.slots.clear();
        self.free.clear();
        self.newest = NIL;
        self.oldest = NIL;
        self.counters = CacheCounters::default();
    }

    /// The entries held, least recent first, and the counts: what a snapshot keeps of the
    /// cache (its table and slots are as large as its capacity).
    pub fn contents(&self) -> LruContents<K, V> {
        let mut entries = Vec::with_capacity(self.map.len());
        let mut i = self.oldest;
        while i != NIL {
            let s = &self.slots[i as usize];
            entries.push((s.key, s.value));
            i = s.newer;
        }
        LruContents {
            entries,
            counters: self.counters,
        }
    }

    /// Holds `contents` in their recency order, with their counts, and nothing else.
    pub fn restore(&mut self, contents: &LruContents<K, V>) {
        self.clear();
        for &(k, v) in &contents.entries {
            self.insert(k, v);
        }
        self.counters = contents.counters;
    }

    /// Entries held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }

    fn unlink(&mut self, i: u32) {
        let (newer, older) = {
            let s = &self.slots[i as usize];
            (s.newer, s.older)
        };
        match newer {
            NIL => self.newest = older,
            n => self.slots[n as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.slots[o as usize].newer = newer,
        }
    }

    fn push_newest(&mut self, i: u32) {
        let old_newest = self.newest;
        {
            let s = &mut self.slots[i as usize];
            s.newer = NIL;
            s.older = old_newest;
        }
        match old_newest {
            NIL => self.oldest = i,
            n => self.slots[n as usize].newer = i,
        }
        self.newest = i;
    }

    /// Whether `key` is held, without counting a hit or a miss or touching its recency (a
    /// look that decides, not an access).
    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Caches `value` for `key` read in the background, off any packet's path: counted as a
    /// fill, not a miss.
    pub fn fill(&mut self, key: K, value: V) {
        self.counters.fills += 1;
        self.insert(key, value);
    }

    /// The value cached for `key`, counted as a hit (and made the most recent) or a miss.
    pub fn lookup(&mut self, key: &K) -> Option<V> {
        // A run of packets of one connection hits the same entry again and again: when it is
        // already the most recent, the recency list stays as it is and the map is not asked.
        if let Some(s) = self.slots.get(self.newest as usize) {
            if s.key == *key {
                self.counters.hits += 1;
                return Some(s.value);
            }
        }
        match self.map.get(key).copied() {
            Some(i) => {
                self.counters.hits += 1;
                self.unlink(i);
                self.push_newest(i);
                Some(self.slots[i as usize].value)
            }
            None => {
                self.counters.misses += 1;
                None
            }
        }
    }

    /// Caches `value` for `key` as the most recent entry, evicting the least recent when full.
    pub fn insert(&mut self, key: K, value: V) {
        if self.capacity == 0 {
            return;
        }
        if let Some(&i) = self.map.get(&key) {
            self.slots[i as usize].value = value;
            self.unlink(i);
            self.push_newest(i);
            return;
        }
        if self.map.len() >= self.capacity {
            let victim = self.oldest;
            self.unlink(victim);
            let k = self.slots[victim as usize].key;
            self.map.remove(&k);
            self.free.push(victim);
            self.counters.evictions += 1;
        }
        let slot = Slot {
            key,
            value,
            newer: NIL,
            older: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key, i);
        self.push_newest(i);
    }

    /// Looks `key` up and, on a miss, caches it with `value`: whether it was a hit.
    pub fn touch(&mut self, key: K, value: V) -> bool {
        if self.lookup(&key).is_some() {
            return true;
        }
        self.insert(key, value);
        false
    }

    /// Drops every entry whose key `stale` names (a deregistered region, a reset function).
    /// Walks the recency list, so it costs the entries held, not the map's capacity.
    pub fn invalidate(&mut self, mut stale: impl FnMut(&K) -> bool) {
        let mut i = self.newest;
        while i != NIL {
            let (key, older) = {
                let s = &self.slots[i as usize];
                (s.key, s.older)
            };
            if stale(&key) {
                self.unlink(i);
                self.map.remove(&key);
                self.free.push(i);
            }
            i = older;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The obvious LRU: a list, most recent at the front.
    struct Reference {
        capacity: usize,
        keys: Vec<u16>,
        counters: CacheCounters,
    }

    impl Reference {
        fn touch(&mut self, k: u16) -> bool {
            if let Some(p) = self.keys.iter().position(|&x| x == k) {
                self.keys.remove(p);
                self.keys.insert(0, k);
                self.counters.hits += 1;
                return true;
            }
            self.counters.misses += 1;
            if self.capacity == 0 {
                return false;
            }
            if self.keys.len() == self.capacity {
                self.keys.pop();
                self.counters.evictions += 1;
            }
            self.keys.insert(0, k);
            false
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// On random access sequences (with occasional invalidations of a key range) the hit,
        /// miss and eviction counts and every answer equal the reference model's.
        #[test]
        fn counts_equal_an_lru_reference(
            capacity in 0usize..24,
            ops in proptest::collection::vec((0u16..40, 0u8..20), 1..600),
        ) {
            let mut c = LruCache::new(capacity);
            let mut r = Reference { capacity, keys: Vec::new(), counters: CacheCounters::default() };
            for (k, kind) in ops {
                if kind == 0 {
                    // Invalidate keys below k.
                    c.invalidate(|&x| x < k);
                    r.keys.retain(|&x| x >= k);
                } else {
                    prop_assert_eq!(c.touch(k, u32::from(k) * 3), r.touch(k));
                }
                prop_assert_eq!(c.len(), r.keys.len());
                prop_assert_eq!(c.counters, r.counters);
            }
            for &k in &r.keys {
                prop_assert_eq!(c.lookup(&k), Some(u32::from(k) * 3));
            }
        }
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_used() {
        let mut c = LruCache::new(2);
        c.insert(1, 'a');
        c.insert(2, 'b');
        assert_eq!(c.lookup(&1), Some('a'));
        c.insert(3, 'c');
        assert_eq!(c.lookup(&2), None, "2 was the least recent");
        assert_eq!((c.lookup(&1), c.lookup(&3)), (Some('a'), Some('c')));
        assert_eq!(
            c.counters,
            CacheCounters {
                hits: 3,
                misses: 1,
                evictions: 1,
                fills: 0
            }
        );
    }
}
