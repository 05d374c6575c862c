//! Tx-ring address translation of the FlexDriver (FLD) module: a 4-bank
//! cuckoo hash table with a 4-entry stash.
//!
//! # What the paper says (FLD, §5.2 "Address Translation", Table 3)
//!
//! FLD keeps a shared pool of `N_txdesc` compressed 8-byte Tx descriptors
//! instead of one ring per queue. PCIe reads by the NIC of a queue's virtual
//! ring position are translated to a pool slot through "a 4-bank cuckoo
//! hash-table (load factor 1/2)". "When an inserted new entry collides, it
//! evicts some old entry to a stash (containing four entries). The stash then
//! tries to insert the evicted entry to another bank, and the process proceeds
//! till success. If the stash fills up, insertion of a new entry stalls till
//! some entry is released. To prevent backpressure, we double the table
//! size." The table "adds a 15.5 KiB overhead" for the Table 2a example
//! (`N_txdesc` = 1133, pool `f(1133)` = 2048 slots, 512 queues); Table 3's
//! caption calls this `S_xltTx`.
//!
//! # The model implemented here
//!
//! * **Key**: [`RingKey`] = (Tx queue number, ring index), packed into a
//!   32-bit word `queue << 16 | index`. **Value**: a pool slot number (`u32`).
//! * **Geometry**: [`BANKS`] = 4 banks of equal power-of-two size, together at
//!   least `2 * pool_slots` buckets ([`CuckooTable::new`]), one entry per
//!   bucket, plus a [`STASH_ENTRIES`] = 4 entry stash. A key has exactly one
//!   candidate bucket per bank.
//! * **Hash functions** (the paper does not name them; this is our choice):
//!   one *H3* hash per bank (Carter & Wegman's class H3, the classic hardware
//!   universal hash): every key bit `i` selects a seeded random row `Q_b[i]`
//!   and the bucket number is `c_b XOR (XOR of Q_b[i] over the set key bits)`.
//!   In hardware that is one XOR tree per bank (no multipliers, a single
//!   cycle); the 32 rows and the constant `c_b` of each bank are drawn
//!   independently from the constructor's seed (SplitMix64), so the four banks
//!   hash independently.
//! * **Lookup** (constant time): compare the 4 candidate buckets and the 4
//!   stash entries.
//! * **Insert** ([`CuckooTable::insert`]): a present key has its slot
//!   replaced. Otherwise, if one of the 4 candidate buckets is free the entry
//!   goes into the free one of lowest bank number. Otherwise, if the stash is
//!   full, the insert first grants the relocation engine its per-insert budget
//!   ([`CuckooTable::set_insert_relocation_budget`]); if the stash is still
//!   full the insert is refused with [`Stalled`] and the mapping is unchanged
//!   (FLD's Tx path holds the packet and returns no credit until an entry is
//!   released). Otherwise the new entry evicts the resident of one of its
//!   candidate buckets, the bank chosen by a 16-bit LFSR (two bits, uniform
//!   over the 4 banks), and the evicted entry goes to a free stash entry,
//!   remembering the bank it came from. Every insert that added a key then
//!   also grants the relocation engine its per-insert budget.
//! * **Relocation** ([`CuckooTable::relocate`], the background engine that
//!   the owner runs each cycle): one *step* serves the next occupied stash
//!   entry in round-robin order and performs exactly one move:
//!   - if one of that entry's 4 candidate buckets is free, the entry moves
//!     there (lowest free bank first) and the stash shrinks by one;
//!   - otherwise it swaps with the resident of its candidate bucket in one of
//!     the 3 banks *other than the bank it was evicted from* (chosen by the
//!     LFSR): the stash entry takes the bucket and the former resident takes
//!     its place in the stash (remembering that bank). The stash occupancy
//!     is unchanged.
//!
//!   A step never loses, duplicates or changes a mapping; a stash with
//!   nothing in it makes a step a no-op.
//! * **No entry is ever lost**: the only operation that writes an entry into
//!   an occupied place also moves the previous occupant into a free stash
//!   entry in the same step, and a displacing insert is only done when such a
//!   free stash entry exists.
//!
//! The emulator never panics and never allocates after [`CuckooTable::new`].
//!
//! # On-chip size ([`CuckooTable::entry_bits`], [`CuckooTable::memory_bytes`])
//!
//! A bucket holds `ceil(log2 queues) + ceil(log2 ring_entries) +
//! ceil(log2 pool_slots)` bits and **no separate valid bit**: an empty bucket
//! is encoded with the reserved all-ones pool-slot code
//! `2^slot_bits - 1`, which the pool allocator never hands out. With the paper's
//! pool of `f(1133)` = 2048 physical slots this leaves 2047 allocatable
//! slots, more than the `N_txdesc` = 1133 descriptors that need to be live,
//! and it is the only reading that reproduces the paper's figure: 9 + 11 + 11
//! = 31 bits x 4096 buckets = 126 976 bits = 15.5 KiB exactly. The 4 stash
//! registers add 4 x 31 bits (15.5 bytes) on top, which the paper's rounded
//! figure does not show; [`CuckooTable::memory_bytes`] includes them,
//! [`CuckooTable::bucket_memory_bytes`] does not. The emulator encodes an
//! empty bucket the same way, with the all-ones code of its full `u32` slot
//! field (it does not enforce the field width), so a bucket is a key and a
//! slot, 8 bytes.

/// Key: a Tx queue number and a ring index (WQE basic-block counter) of that queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingKey {
    pub queue: u16,
    pub index: u16,
}

impl RingKey {
    pub const fn new(queue: u16, index: u16) -> Self {
        RingKey { queue, index }
    }

    const fn packed(self) -> u32 {
        ((self.queue as u32) << 16) | self.index as u32
    }
}

/// Number of banks (one hash function each).
pub const BANKS: usize = 4;
/// Number of stash entries.
pub const STASH_ENTRIES: usize = 4;
/// Largest pool the emulator builds a table for; larger requests are clamped
/// (2^21 buckets; far beyond any on-chip table, and it keeps `new` from
/// asking for absurd amounts of memory on any input).
pub const MAX_POOL_SLOTS: u32 = 1 << 20;
/// Relocation steps each insert grants the relocation engine by default.
pub const DEFAULT_INSERT_RELOCATION_BUDGET: usize = 4;

/// Returned by [`CuckooTable::insert`] when the stash is full: the insert was
/// refused and the table's contents are unchanged.
#[derive(Debug, PartialEq, Eq)]
pub struct Stalled;

/// Event counters of a [`CuckooTable`] (saturating).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CuckooStats {
    /// Inserts that added a new key.
    pub inserts: u64,
    /// Inserts that replaced the slot of a key already present.
    pub updates: u64,
    /// Successful removes.
    pub removes: u64,
    /// Refused inserts (stash full).
    pub stalls: u64,
    /// Resident entries evicted into the stash (by inserts and by relocation swaps).
    pub displacements: u64,
    /// Relocation steps performed (moves into a free bucket plus swaps).
    pub relocation_moves: u64,
    /// Highest stash occupancy seen.
    pub max_stash_occupancy: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    key: u32,
    slot: u32,
}

/// The slot code of an empty bucket: as in the hardware's encoding (module documentation), a
/// bucket has no valid bit, and no pool slot ([`MAX_POOL_SLOTS`] at most) is all ones. A bucket
/// is 8 bytes where an optional entry took 12, so a table for the paper's 2,048-slot pool is
/// 32 KiB of buckets, not 48.
const EMPTY_SLOT: u32 = u32::MAX;

const EMPTY: Entry = Entry {
    key: 0,
    slot: EMPTY_SLOT,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StashEntry {
    key: u32,
    slot: u32,
    /// Bank the entry was evicted from; relocation swaps avoid it.
    origin: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Location {
    Bucket(usize),
    Stash(usize),
}

/// The H3 hash functions of all banks, sliced by key byte.
type H3Tables = [[[u32; 256]; 4]; BANKS];

/// The translation table. See the module documentation for the mechanism.
pub struct CuckooTable {
    /// `BANKS * bank_size` buckets; bank `b` is `buckets[b*bank_size..(b+1)*bank_size]`. An
    /// empty bucket holds [`EMPTY`].
    buckets: Vec<Entry>,
    bank_size: usize,
    /// Per-bank H3 rows (already masked to the bank's index width), kept for the tests'
    /// bit-by-bit reference; the data path uses `h3_bytes`.
    #[cfg(test)]
    rows: [[u32; 32]; BANKS],
    /// The same H3 functions sliced by key byte: `h3_bytes[bank][i][v]` is the XOR of the rows
    /// selected by value `v` in key byte `i`. The FPGA XORs all selected rows in one level of
    /// logic; the model gets the identical value from four lookups instead of a loop over the
    /// key's bits (a lookup per packet and per bank, on the Tx path). Shared with the tables
    /// [`Self::emptied`] makes: the hash functions are fixed, as an FPGA's are at synthesis.
    h3_bytes: std::sync::Arc<H3Tables>,
    /// What the hash parameters and the LFSR start come from.
    seed: u64,
    /// Per-bank constant XORed into the hash.
    offsets: [u32; BANKS],
    stash: [Option<StashEntry>; STASH_ENTRIES],
    /// Next stash entry the relocation engine serves (round-robin).
    stash_ptr: usize,
    lfsr: u16,
    len: usize,
    stash_len: usize,
    pool_slots: u32,
    insert_budget: usize,
    stats: CuckooStats,
}

/// SplitMix64 step, used only to expand the seed into hash parameters.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Bits needed to number `n` distinct values (0 for n <= 1).
const fn clog2(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

impl CuckooTable {
    /// A table for a pool of `pool_slots` descriptors: 4 banks with 2*pool_slots buckets in total (rounded up to a power of two per bank).
    ///
    /// Each bank gets `next_power_of_two(ceil(2*pool_slots / 4))` buckets
    /// (at least 1). `pool_slots` above [`MAX_POOL_SLOTS`] is clamped.
    /// `seed` determines the hash functions and the LFSR start state.
    pub fn new(pool_slots: u32, seed: u64) -> Self {
        Self::build(pool_slots, seed, None)
    }

    /// The table as [`Self::new`] made it, empty, with the same hash functions: what a reset of
    /// FLD leaves, without deriving the functions again.
    pub fn emptied(&self) -> Self {
        Self::build(self.pool_slots, self.seed, Some(self.h3_bytes.clone()))
    }

    fn build(pool_slots: u32, seed: u64, h3: Option<std::sync::Arc<H3Tables>>) -> Self {
        let pool_slots = pool_slots.min(MAX_POOL_SLOTS);
        // ceil(2 * pool / BANKS) == ceil(pool / 2) for 4 banks.
        let per_bank = pool_slots.div_ceil(2).max(1).next_power_of_two();
        let bank_size = per_bank as usize;
        let mask = per_bank - 1;
        let mut state = seed;
        let mut rows = [[0u32; 32]; BANKS];
        let mut offsets = [0u32; BANKS];
        for (bank_rows, offset) in rows.iter_mut().zip(offsets.iter_mut()) {
            for row in bank_rows.iter_mut() {
                *row = (splitmix64(&mut state) as u32) & mask;
            }
            *offset = (splitmix64(&mut state) as u32) & mask;
        }
        let mut lfsr = splitmix64(&mut state) as u16;
        if lfsr == 0 {
            lfsr = 0xACE1;
        }
        let h3_bytes = h3.unwrap_or_else(|| {
            let mut h3_bytes = Box::new([[[0u32; 256]; 4]; BANKS]);
            for (bank, tables) in h3_bytes.iter_mut().enumerate() {
                for (byte, table) in tables.iter_mut().enumerate() {
                    // The XOR of the rows of v's set bits: v's entry is that of v without its
                    // lowest set bit, XOR that bit's row (one step an entry).
                    for v in 1..256usize {
                        table[v] =
                            table[v & (v - 1)] ^ rows[bank][byte * 8 + v.trailing_zeros() as usize];
                    }
                }
            }
            std::sync::Arc::from(h3_bytes)
        });
        CuckooTable {
            buckets: vec![EMPTY; bank_size * BANKS],
            bank_size,
            #[cfg(test)]
            rows,
            h3_bytes,
            seed,
            offsets,
            stash: [None; STASH_ENTRIES],
            stash_ptr: 0,
            lfsr,
            len: 0,
            stash_len: 0,
            pool_slots,
            insert_budget: DEFAULT_INSERT_RELOCATION_BUDGET,
            stats: CuckooStats::default(),
        }
    }

    /// Sets how many relocation steps each insert grants the relocation
    /// engine (see the module documentation). 0 disables relocation on insert.
    pub fn set_insert_relocation_budget(&mut self, steps: usize) {
        self.insert_budget = steps;
    }

    /// H3 hash of `key` for `bank`: the bucket number within that bank — the bank's offset
    /// XOR the rows of every set key bit, from the byte-sliced tables.
    fn hash(&self, bank: usize, key: u32) -> usize {
        let (Some(t), Some(offset)) = (self.h3_bytes.get(bank), self.offsets.get(bank)) else {
            return 0;
        };
        let [b0, b1, b2, b3] = key.to_le_bytes();
        (offset ^ t[0][b0 as usize] ^ t[1][b1 as usize] ^ t[2][b2 as usize] ^ t[3][b3 as usize])
            as usize
    }

    /// The H3 definition, bit by bit (the reference the sliced tables must equal).
    #[cfg(test)]
    fn hash_bitwise(&self, bank: usize, key: u32) -> usize {
        let mut h = self.offsets[bank];
        for bit in 0..32 {
            if key & (1 << bit) != 0 {
                h ^= self.rows[bank][bit];
            }
        }
        h as usize
    }

    /// Index into `buckets` of `key`'s candidate bucket in `bank`.
    fn bucket_index(&self, bank: usize, key: u32) -> usize {
        bank * self.bank_size + self.hash(bank, key)
    }

    fn candidates(&self, key: u32) -> [usize; BANKS] {
        let mut c = [0usize; BANKS];
        for (bank, idx) in c.iter_mut().enumerate() {
            *idx = self.bucket_index(bank, key);
        }
        c
    }

    fn bucket(&self, idx: usize) -> Option<Entry> {
        self.buckets
            .get(idx)
            .copied()
            .filter(|e| e.slot != EMPTY_SLOT)
    }

    fn set_bucket(&mut self, idx: usize, e: Option<Entry>) {
        if let Some(b) = self.buckets.get_mut(idx) {
            *b = e.unwrap_or(EMPTY);
        }
    }

    /// Whether bucket `idx` holds `key`.
    #[inline]
    fn holds(&self, idx: usize, key: u32) -> bool {
        matches!(self.bucket(idx), Some(e) if e.key == key)
    }

    fn in_stash(&self, key: u32) -> Option<Location> {
        // The stash is empty nearly always (relocation drains it): no scan then.
        if self.stash_len == 0 {
            return None;
        }
        self.stash
            .iter()
            .position(|s| matches!(s, Some(e) if e.key == key))
            .map(Location::Stash)
    }

    fn locate(&self, key: u32) -> Option<Location> {
        // Hardware probes the four banks at once; software stops hashing at the first hit (a
        // key is in at most one place, so the answer is the same).
        for bank in 0..BANKS {
            let idx = self.bucket_index(bank, key);
            if self.holds(idx, key) {
                return Some(Location::Bucket(idx));
            }
        }
        self.in_stash(key)
    }

    /// [`Self::locate`] with the key's candidate buckets already hashed.
    fn locate_among(&self, key: u32, candidates: &[usize; BANKS]) -> Option<Location> {
        for &idx in candidates {
            if self.holds(idx, key) {
                return Some(Location::Bucket(idx));
            }
        }
        self.in_stash(key)
    }

    fn free_candidate(&self, candidates: &[usize; BANKS]) -> Option<usize> {
        candidates
            .iter()
            .copied()
            .find(|&idx| self.buckets.get(idx).is_some_and(|b| b.slot == EMPTY_SLOT))
    }

    /// Next LFSR state (16-bit Galois LFSR, polynomial x^16+x^14+x^13+x^11+1).
    fn next_rand(&mut self) -> u16 {
        let lsb = self.lfsr & 1;
        self.lfsr >>= 1;
        if lsb != 0 {
            self.lfsr ^= 0xB400;
        }
        self.lfsr
    }

    fn note_stash(&mut self) {
        if self.stash_len > self.stats.max_stash_occupancy {
            self.stats.max_stash_occupancy = self.stash_len;
        }
    }

    /// Largest number of steps one `relocate` call performs, so that a
    /// caller's huge budget on a stash that cannot drain terminates promptly.
    fn relocate_cap(&self) -> usize {
        self.buckets.len().saturating_mul(4).saturating_add(1024)
    }

    /// Maps `key` to `slot`; replaces the value if `key` is present (this
    /// never stalls). A new key goes into a free candidate bucket if there is
    /// one (even with a full stash); otherwise it displaces a resident into
    /// the stash, or, if the stash stays full after the per-insert relocation
    /// budget, returns [`Stalled`] with the mapping unchanged. The all-ones slot is the empty
    /// bucket's code and no pool slot: it is refused the same way.
    pub fn insert(&mut self, key: RingKey, slot: u32) -> Result<(), Stalled> {
        if slot == EMPTY_SLOT {
            return Err(Stalled);
        }
        let k = key.packed();
        // Hashed once for the presence check and the free-bucket search (one XOR tree per bank
        // in hardware, computed once per insert there too).
        let candidates = self.candidates(k);
        match self.locate_among(k, &candidates) {
            Some(Location::Bucket(idx)) => {
                self.set_bucket(idx, Some(Entry { key: k, slot }));
                self.stats.updates = self.stats.updates.saturating_add(1);
                return Ok(());
            }
            Some(Location::Stash(i)) => {
                if let Some(Some(e)) = self.stash.get_mut(i) {
                    e.slot = slot;
                }
                self.stats.updates = self.stats.updates.saturating_add(1);
                return Ok(());
            }
            None => {}
        }
        if let Some(idx) = self.free_candidate(&candidates) {
            self.set_bucket(idx, Some(Entry { key: k, slot }));
            self.added();
            self.run_steps(self.insert_budget);
            return Ok(());
        }
        if self.stash_len >= STASH_ENTRIES {
            // Give the relocation engine a chance; it only fills buckets or
            // swaps, so the new key's candidates stay occupied.
            self.run_steps(self.insert_budget);
            if self.stash_len >= STASH_ENTRIES {
                self.stats.stalls = self.stats.stalls.saturating_add(1);
                return Err(Stalled);
            }
        }
        let Some(free) = self.stash.iter().position(|s| s.is_none()) else {
            self.stats.stalls = self.stats.stalls.saturating_add(1);
            return Err(Stalled);
        };
        let bank = (self.next_rand() & 3) as usize;
        let idx = candidates[bank];
        let Some(victim) = self.bucket(idx) else {
            // Unreachable (all candidates are occupied), but never lose the key.
            self.set_bucket(idx, Some(Entry { key: k, slot }));
            self.added();
            return Ok(());
        };
        if let Some(s) = self.stash.get_mut(free) {
            *s = Some(StashEntry {
                key: victim.key,
                slot: victim.slot,
                origin: bank,
            });
        }
        self.stash_len += 1;
        self.note_stash();
        self.set_bucket(idx, Some(Entry { key: k, slot }));
        self.stats.displacements = self.stats.displacements.saturating_add(1);
        self.added();
        self.run_steps(self.insert_budget);
        Ok(())
    }

    fn added(&mut self) {
        self.len += 1;
        self.stats.inserts = self.stats.inserts.saturating_add(1);
    }

    /// The slot `key` maps to: 4 candidate buckets plus the stash.
    pub fn lookup(&self, key: RingKey) -> Option<u32> {
        match self.locate(key.packed())? {
            Location::Bucket(idx) => self.bucket(idx).map(|e| e.slot),
            Location::Stash(i) => self.stash.get(i).copied().flatten().map(|e| e.slot),
        }
    }

    /// Removes `key`, returning its slot (the freed bucket is used by later
    /// inserts and relocation steps).
    pub fn remove(&mut self, key: RingKey) -> Option<u32> {
        let slot = match self.locate(key.packed())? {
            Location::Bucket(idx) => {
                let e = self.bucket(idx)?;
                self.set_bucket(idx, None);
                e.slot
            }
            Location::Stash(i) => {
                let e = self.stash.get_mut(i)?.take()?;
                self.stash_len -= 1;
                e.slot
            }
        };
        self.len -= 1;
        self.stats.removes = self.stats.removes.saturating_add(1);
        Some(slot)
    }

    /// Performs up to `budget` relocation steps (see the module
    /// documentation; at most `4 * capacity + 1024` per call) and returns
    /// the number done. Stops early when the stash is empty.
    pub fn relocate(&mut self, budget: usize) -> usize {
        self.run_steps(budget)
    }

    /// Inlined: with an empty stash (nearly always) there is nothing to do.
    #[inline]
    fn run_steps(&mut self, budget: usize) -> usize {
        if self.stash_len == 0 {
            return 0;
        }
        self.run_steps_on_stash(budget)
    }

    fn run_steps_on_stash(&mut self, budget: usize) -> usize {
        let budget = budget.min(self.relocate_cap());
        let mut done = 0;
        while done < budget && self.step() {
            done += 1;
        }
        done
    }

    /// One relocation step; false if the stash is empty.
    fn step(&mut self) -> bool {
        if self.stash_len == 0 {
            return false;
        }
        let mut found = None;
        for off in 0..STASH_ENTRIES {
            let i = (self.stash_ptr + off) % STASH_ENTRIES;
            if let Some(Some(e)) = self.stash.get(i) {
                found = Some((i, *e));
                break;
            }
        }
        let Some((i, e)) = found else {
            return false;
        };
        self.stash_ptr = (i + 1) % STASH_ENTRIES;
        self.stats.relocation_moves = self.stats.relocation_moves.saturating_add(1);
        // A free candidate takes the entry; otherwise a random bank other than the one it was
        // evicted from does, and that bucket's occupant moves into the stash slot.
        let candidates = self.candidates(e.key);
        let idx = match self.free_candidate(&candidates) {
            Some(idx) => idx,
            None => {
                let bank = (e.origin + 1 + (self.next_rand() % 3) as usize) % BANKS;
                candidates[bank]
            }
        };
        let victim = self.bucket(idx);
        self.set_bucket(
            idx,
            Some(Entry {
                key: e.key,
                slot: e.slot,
            }),
        );
        let origin = idx / self.bank_size;
        if let Some(s) = self.stash.get_mut(i) {
            *s = victim.map(|v| StashEntry {
                key: v.key,
                slot: v.slot,
                origin,
            });
        }
        match victim {
            Some(_) => self.stats.displacements = self.stats.displacements.saturating_add(1),
            None => self.stash_len -= 1,
        }
        true
    }

    /// Keys present (in banks and stash).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys currently in the stash.
    pub fn stash_len(&self) -> usize {
        self.stash_len
    }

    /// Buckets in all banks (not counting the stash).
    pub fn capacity(&self) -> usize {
        self.buckets.len()
    }

    /// Buckets per bank.
    pub fn bank_size(&self) -> usize {
        self.bank_size
    }

    /// The pool size the table was built for (after clamping).
    pub fn pool_slots(&self) -> u32 {
        self.pool_slots
    }

    /// Event counters: inserts, stalls, displacements, max stash occupancy, ...
    pub fn stats(&self) -> CuckooStats {
        self.stats
    }

    /// On-chip bits one bucket needs: valid + queue bits + index bits + slot bits, for the given configuration.
    ///
    /// The valid bit is **not** counted (0 bits): an empty bucket is encoded
    /// as the reserved all-ones slot code (see the module documentation), so
    /// this is `ceil(log2 queues) + ceil(log2 ring_entries) + ceil(log2 pool_slots)`.
    /// `entry_bits(512, 2048, 2048) == 31`, as the paper's 15.5 KiB implies.
    pub fn entry_bits(queues: u32, ring_entries: u32, pool_slots: u32) -> u32 {
        clog2(queues) + clog2(ring_entries) + clog2(pool_slots)
    }

    /// Bytes of on-chip memory of the whole table (buckets + stash) at that entry width.
    ///
    /// `ceil((capacity + STASH_ENTRIES) * entry_bits / 8)`, the slot width
    /// taken from this table's `pool_slots`. For the paper's configuration
    /// that is 15 888 bytes: 15.5 KiB of buckets plus 15.5 bytes of stash.
    pub fn memory_bytes(&self, queues: u32, ring_entries: u32) -> u64 {
        let bits = Self::entry_bits(queues, ring_entries, self.pool_slots) as u64;
        ((self.buckets.len() + STASH_ENTRIES) as u64 * bits).div_ceil(8)
    }

    /// Bytes of on-chip memory of the buckets alone (the paper's 15.5 KiB figure).
    pub fn bucket_memory_bytes(&self, queues: u32, ring_entries: u32) -> u64 {
        let bits = Self::entry_bits(queues, ring_entries, self.pool_slots) as u64;
        (self.buckets.len() as u64 * bits).div_ceil(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        #[test]
        fn sliced_h3_equals_the_bitwise_definition(seed: u64, pool in 1u32..4096, keys in proptest::collection::vec(any::<u32>(), 64)) {
            let t = CuckooTable::new(pool, seed);
            for k in keys.into_iter().chain([0, u32::MAX, 1, 1 << 31]) {
                for bank in 0..BANKS {
                    prop_assert_eq!(t.hash(bank, k), t.hash_bitwise(bank, k));
                    prop_assert!(t.hash(bank, k) < t.bank_size);
                }
            }
        }
    }

    fn key_of(packed: u32) -> RingKey {
        RingKey::new((packed >> 16) as u16, packed as u16)
    }

    /// Where the table keeps `key`: Some(true) stash, Some(false) bucket.
    fn in_stash(t: &CuckooTable, key: RingKey) -> Option<bool> {
        t.locate(key.packed())
            .map(|l| matches!(l, Location::Stash(_)))
    }

    /// Checks the internal invariants: counters agree with the storage, no
    /// key is stored twice, every bucket entry sits in one of its candidates.
    fn check_invariants(t: &CuckooTable) {
        let mut seen = std::collections::HashSet::new();
        let mut n = 0;
        for idx in 0..t.buckets.len() {
            if let Some(e) = t.bucket(idx) {
                n += 1;
                assert!(seen.insert(e.key), "key stored twice");
                assert!(
                    t.candidates(e.key).contains(&idx),
                    "entry outside its candidates"
                );
            }
        }
        let s = t.stash.iter().flatten().count();
        for e in t.stash.iter().flatten() {
            assert!(seen.insert(e.key), "key stored twice");
        }
        assert_eq!(s, t.stash_len());
        assert_eq!(n + s, t.len());
    }

    /// Brute-forces `count` keys whose 4 candidate buckets all equal those of
    /// the first key found (feasible for small banks).
    fn full_collision_set(t: &CuckooTable, count: usize) -> Vec<RingKey> {
        let target = t.candidates(0x0001_0000);
        let mut out = Vec::new();
        for k in 0x0001_0000u32..u32::MAX {
            if t.candidates(k) == target {
                out.push(key_of(k));
                if out.len() == count {
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn insert_lookup_remove() {
        let mut t = CuckooTable::new(64, 1);
        assert!(t.is_empty());
        let a = RingKey::new(3, 17);
        let b = RingKey::new(17, 3);
        assert_eq!(t.lookup(a), None);
        assert_eq!(t.insert(a, 5), Ok(()));
        assert_eq!(t.insert(b, 6), Ok(()));
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(a), Some(5));
        assert_eq!(t.lookup(b), Some(6));
        assert_eq!(t.remove(a), Some(5));
        assert_eq!(t.remove(a), None);
        assert_eq!(t.lookup(a), None);
        assert_eq!(t.lookup(b), Some(6));
        assert_eq!(t.len(), 1);
        assert_eq!(t.stats().inserts, 2);
        assert_eq!(t.stats().removes, 1);
        check_invariants(&t);
    }

    /// An emptied table is the table `new` makes: the same insert sequence, run on both after
    /// the original was filled, gives the same outcome, placement and statistics.
    #[test]
    fn an_emptied_table_is_a_new_one() {
        let keys: Vec<RingKey> = (0..40u16).map(|i| RingKey::new(i % 4, i * 7)).collect();
        let mut used = CuckooTable::new(32, 9);
        for (i, &k) in keys.iter().enumerate() {
            let _ = used.insert(k, i as u32);
        }
        let (mut emptied, mut new) = (used.emptied(), CuckooTable::new(32, 9));
        assert!(emptied.is_empty());
        for (i, &k) in keys.iter().rev().enumerate() {
            assert_eq!(emptied.insert(k, i as u32), new.insert(k, i as u32));
        }
        for &k in &keys {
            assert_eq!(emptied.lookup(k), new.lookup(k));
        }
        assert_eq!(emptied.stats(), new.stats());
        assert_eq!(emptied.lfsr, new.lfsr);
        assert_eq!(emptied.buckets, new.buckets, "the same placement");
        check_invariants(&emptied);
    }

    #[test]
    fn insert_replaces_value() {
        let mut t = CuckooTable::new(64, 2);
        let a = RingKey::new(511, 2047);
        t.insert(a, 1).unwrap();
        t.insert(a, 2).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.lookup(a), Some(2));
        assert_eq!(t.stats().inserts, 1);
        assert_eq!(t.stats().updates, 1);
        assert_eq!(t.remove(a), Some(2));
        assert!(t.is_empty());
    }

    /// The all-ones slot is an empty bucket's code: inserting it, as a new key or over a
    /// present one, is refused and changes nothing, where storing it would make the bucket
    /// read as empty and lose the key.
    #[test]
    fn the_empty_code_is_refused_as_a_slot() {
        let mut t = CuckooTable::new(64, 3);
        let (a, b) = (RingKey::new(1, 2), RingKey::new(2, 1));
        t.insert(a, 7).unwrap();
        let before = (t.buckets.clone(), t.stats());
        assert_eq!(t.insert(a, EMPTY_SLOT), Err(Stalled));
        assert_eq!(t.insert(b, EMPTY_SLOT), Err(Stalled));
        assert_eq!((t.buckets.clone(), t.stats()), before);
        assert_eq!((t.lookup(a), t.lookup(b), t.len()), (Some(7), None, 1));
        check_invariants(&t);
    }

    #[test]
    fn lookups_hit_stash_entries_and_replace_there() {
        let mut t = CuckooTable::new(16, 3);
        let keys = full_collision_set(&t, 6);
        for (i, k) in keys.iter().enumerate() {
            t.insert(*k, i as u32).unwrap();
        }
        // Only 4 buckets serve these keys: 2 must be in the stash.
        assert_eq!(t.stash_len(), 2);
        let stashed: Vec<_> = keys
            .iter()
            .filter(|k| in_stash(&t, **k) == Some(true))
            .collect();
        assert_eq!(stashed.len(), 2);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(t.lookup(*k), Some(i as u32));
        }
        let s = *stashed[0];
        t.insert(s, 99).unwrap();
        assert_eq!(t.lookup(s), Some(99));
        assert_eq!(t.len(), 6);
        assert_eq!(t.remove(s), Some(99));
        assert_eq!(t.len(), 5);
        assert_eq!(t.stash_len(), 1);
        check_invariants(&t);
    }

    #[test]
    fn relocate_drains_stash_after_removals() {
        let mut t = CuckooTable::new(16, 4);
        let keys = full_collision_set(&t, 7);
        for (i, k) in keys.iter().enumerate() {
            t.insert(*k, i as u32).unwrap();
        }
        assert_eq!(t.stash_len(), 3);
        // Nothing can move: relocation only swaps.
        t.relocate(50);
        assert_eq!(t.stash_len(), 3);
        let in_banks: Vec<RingKey> = keys
            .iter()
            .copied()
            .filter(|k| in_stash(&t, *k) == Some(false))
            .collect();
        for k in &in_banks[..3] {
            t.remove(*k).unwrap();
        }
        let moves = t.relocate(100);
        assert_eq!(moves, 3);
        assert_eq!(t.stash_len(), 0);
        assert_eq!(t.relocate(100), 0);
        for (i, k) in keys.iter().enumerate() {
            if !in_banks[..3].contains(k) {
                assert_eq!(t.lookup(*k), Some(i as u32));
            }
        }
        check_invariants(&t);
    }

    #[test]
    fn relocate_drains_stash_with_free_room() {
        // Without relocation on insert, displaced entries stay in the stash
        // although the table is at most 3/4 full; `relocate` puts them back.
        let mut drained = 0;
        for seed in 0..20u64 {
            let mut t = CuckooTable::new(64, seed);
            t.set_insert_relocation_budget(0);
            let mut rng = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
            while t.len() < 96 && t.stash_len() < 2 {
                let k = splitmix64(&mut rng) as u32;
                t.insert(key_of(k), k).unwrap();
            }
            if t.stash_len() == 0 {
                continue;
            }
            let before = t.len();
            let moves = t.relocate(1000);
            assert!(moves >= 1);
            assert_eq!(t.stash_len(), 0, "seed {seed}");
            assert_eq!(t.len(), before);
            check_invariants(&t);
            drained += 1;
        }
        assert!(drained >= 5, "too few seeds produced a stash ({drained})");
    }

    #[test]
    fn full_stash_stalls_and_changes_nothing() {
        let mut t = CuckooTable::new(16, 5);
        let keys = full_collision_set(&t, 10);
        for (i, k) in keys[..8].iter().enumerate() {
            assert_eq!(t.insert(*k, i as u32), Ok(()));
        }
        assert_eq!(t.stash_len(), STASH_ENTRIES);
        let snapshot = (t.buckets.clone(), t.len());
        assert_eq!(t.insert(keys[8], 8), Err(Stalled));
        assert_eq!(t.insert(keys[9], 9), Err(Stalled));
        assert_eq!(t.stats().stalls, 2);
        assert_eq!(t.len(), snapshot.1);
        assert_eq!(t.lookup(keys[8]), None);
        for (i, k) in keys[..8].iter().enumerate() {
            assert_eq!(t.lookup(*k), Some(i as u32));
        }
        // Updates of present keys still work with a full stash.
        t.insert(keys[0], 100).unwrap();
        assert_eq!(t.lookup(keys[0]), Some(100));
        // Releasing one entry lets the held insert through.
        assert_eq!(t.remove(keys[3]), Some(3));
        assert_eq!(t.insert(keys[8], 8), Ok(()));
        assert_eq!(t.lookup(keys[8]), Some(8));
        assert_eq!(t.len(), 8);
        assert_eq!(t.stats().max_stash_occupancy, STASH_ENTRIES);
        check_invariants(&t);
    }

    #[test]
    fn relocate_budget_is_bounded_on_stuck_stash() {
        let mut t = CuckooTable::new(16, 6);
        for (i, k) in full_collision_set(&t, 8).iter().enumerate() {
            t.insert(*k, i as u32).unwrap();
        }
        let done = t.relocate(usize::MAX);
        assert_eq!(done, t.relocate_cap());
        assert_eq!(t.stash_len(), STASH_ENTRIES);
        assert_eq!(t.len(), 8);
        check_invariants(&t);
    }

    #[test]
    fn adversarial_bank0_collisions() {
        // Keys that all share one bucket of bank 0: inserting more and more
        // of them eventually stalls; nothing is lost; removals unblock.
        for seed in 0..4u64 {
            let mut t = CuckooTable::new(64, seed);
            let target = t.hash(0, 0);
            let colliders: Vec<RingKey> = (0u32..)
                .filter(|k| t.hash(0, *k) == target)
                .take(t.capacity() + STASH_ENTRIES + 1)
                .map(key_of)
                .collect();
            let mut inserted = Vec::new();
            let mut stalled_at = None;
            for (i, k) in colliders.iter().enumerate() {
                match t.insert(*k, i as u32) {
                    Ok(()) => inserted.push((*k, i as u32)),
                    Err(Stalled) => {
                        stalled_at = Some(i);
                        break;
                    }
                }
                t.relocate(8);
            }
            let stalled_at = stalled_at.expect("inserts never stalled");
            assert!(stalled_at <= t.capacity() + STASH_ENTRIES);
            assert_eq!(t.len(), inserted.len());
            assert_eq!(t.stash_len(), STASH_ENTRIES);
            for (k, v) in &inserted {
                assert_eq!(t.lookup(*k), Some(*v));
            }
            check_invariants(&t);
            // Release half of them (every other one).
            let mut kept = Vec::new();
            for (j, (k, v)) in inserted.iter().enumerate() {
                if j % 2 == 0 {
                    assert_eq!(t.remove(*k), Some(*v));
                } else {
                    kept.push((*k, *v));
                }
            }
            t.relocate(1000);
            let k = colliders[stalled_at];
            assert_eq!(t.insert(k, 7777), Ok(()), "seed {seed}");
            assert_eq!(t.lookup(k), Some(7777));
            for (k, v) in &kept {
                assert_eq!(t.lookup(*k), Some(*v));
            }
            check_invariants(&t);
            println!(
                "bank-0 colliders, pool 64 (capacity {}), seed {seed}: first stall at key #{stalled_at}",
                t.capacity()
            );
        }
    }

    #[test]
    fn bank0_collisions_at_paper_size_do_not_stall() {
        // 64 keys sharing a bank-0 bucket mixed with random keys up to load 1/2.
        for seed in 0..4u64 {
            let mut t = CuckooTable::new(2048, seed);
            let target = t.hash(0, 0x0005_0000);
            let mut keys: Vec<u32> = (0x0005_0000u32..)
                .filter(|k| t.hash(0, *k) == target)
                .take(64)
                .collect();
            let mut rng = seed ^ 0xDEAD_BEEF;
            while keys.len() < 2048 {
                let k = splitmix64(&mut rng) as u32;
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(
                    t.insert(key_of(*k), i as u32),
                    Ok(()),
                    "seed {seed} key #{i}"
                );
            }
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(t.lookup(key_of(*k)), Some(i as u32));
            }
            check_invariants(&t);
        }
    }

    /// Fills a table for `pool` slots with `keys` (in order), running one
    /// relocation step per insert (one per cycle), retrying a stalled key
    /// after more relocation. Returns (stalls, max stash).
    fn fill(t: &mut CuckooTable, keys: &[RingKey]) -> (u64, usize) {
        for (i, k) in keys.iter().enumerate() {
            let mut tries = 0;
            while t.insert(*k, i as u32).is_err() {
                t.relocate(1);
                tries += 1;
                assert!(tries < 10_000, "insert never went through");
            }
            t.relocate(1);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(t.lookup(*k), Some(i as u32), "key lost");
        }
        assert_eq!(t.len(), keys.len());
        check_invariants(t);
        (t.stats().stalls, t.stats().max_stash_occupancy)
    }

    #[test]
    fn load_half_realistic_keys() {
        let pool = 2048u32;
        let mut report = Vec::new();
        let mut total_stalls = 0;
        for seed in 0..16u64 {
            // 512 queues x 4 consecutive ring indices from 0.
            let aligned: Vec<RingKey> = (0..512u16)
                .flat_map(|q| (0..4u16).map(move |i| RingKey::new(q, i)))
                .collect();
            // 512 queues x 4 consecutive ring indices from a random offset.
            let mut rng = seed.wrapping_add(77);
            let offset: Vec<RingKey> = (0..512u16)
                .flat_map(|q| {
                    let base = splitmix64(&mut rng) as u16;
                    (0..4u16).map(move |i| RingKey::new(q, base.wrapping_add(i)))
                })
                .collect();
            // Uneven: 64 busy queues with 24 entries each, 256 queues with 2.
            let uneven: Vec<RingKey> = (0..64u16)
                .flat_map(|q| (100..124u16).map(move |i| RingKey::new(q, i)))
                .chain((64..320u16).flat_map(|q| (0..2u16).map(move |i| RingKey::new(q, i))))
                .collect();
            // Uniformly random distinct keys.
            let mut random = Vec::new();
            let mut seen = std::collections::HashSet::new();
            while random.len() < pool as usize {
                let k = splitmix64(&mut rng) as u32;
                if seen.insert(k) {
                    random.push(key_of(k));
                }
            }
            for (name, keys) in [
                ("aligned", &aligned),
                ("offset", &offset),
                ("uneven", &uneven),
                ("random", &random),
            ] {
                assert_eq!(keys.len(), pool as usize);
                let mut t = CuckooTable::new(pool, seed);
                assert_eq!(t.capacity(), 4096);
                let (stalls, max_stash) = fill(&mut t, keys);
                total_stalls += stalls;
                report.push(format!(
                    "{name}/seed{seed}: stalls {stalls} max_stash {max_stash}"
                ));
            }
        }
        println!(
            "load 1/2 (2048 keys in 4096 buckets):\n{}",
            report.join("\n")
        );
        println!("total stalls over {} fills: {total_stalls}", report.len());
        assert!(
            total_stalls <= 4,
            "too many stalls at load 1/2: {total_stalls}"
        );
    }

    #[test]
    fn steady_state_churn() {
        // FLD's Tx path: queues post descriptors at their ring head and the
        // NIC completes them at the tail; the pool of 2048 stays full (load
        // 1/2), with one relocation step per cycle.
        let mut total_stalls = 0;
        let mut total_ops = 0u64;
        let mut max_stash = 0;
        for seed in 0..4u64 {
            let mut t = CuckooTable::new(2048, seed);
            let mut rng = seed ^ 0x1234_5678;
            let mut head = [0u16; 512];
            let mut tail = [0u16; 512];
            let mut live: HashMap<RingKey, u32> = HashMap::new();
            let mut next_slot = 0u32;
            for _ in 0..200_000 {
                let r = splitmix64(&mut rng);
                let q = (r % 512) as usize;
                if live.len() < 2048 {
                    let k = RingKey::new(q as u16, head[q]);
                    match t.insert(k, next_slot) {
                        Ok(()) => {
                            live.insert(k, next_slot);
                            head[q] = head[q].wrapping_add(1);
                            next_slot = next_slot.wrapping_add(1);
                        }
                        Err(Stalled) => total_stalls += 1,
                    }
                } else {
                    // Complete the oldest descriptor of some non-empty queue.
                    let mut q = q;
                    while head[q] == tail[q] {
                        q = (q + 1) % 512;
                    }
                    let k = RingKey::new(q as u16, tail[q]);
                    assert_eq!(t.remove(k), live.remove(&k));
                    tail[q] = tail[q].wrapping_add(1);
                }
                t.relocate(1);
                total_ops += 1;
            }
            assert_eq!(t.len(), live.len());
            for (k, v) in &live {
                assert_eq!(t.lookup(*k), Some(*v));
            }
            check_invariants(&t);
            max_stash = max_stash.max(t.stats().max_stash_occupancy);
        }
        println!(
            "steady-state churn at load 1/2: {total_stalls} stalls in {total_ops} operations, max stash {max_stash}"
        );
        assert!(total_stalls <= 4);
    }

    #[test]
    fn stall_figures_beyond_half_load() {
        // Informational: where stalls start when the pool is over-filled,
        // random keys, one relocation step per cycle, no retries. Only the
        // no-loss property is asserted.
        for load_pct in [50usize, 75, 90, 95, 100] {
            let mut stalls = 0;
            let mut max_stash = 0;
            for seed in 0..8u64 {
                let mut t = CuckooTable::new(2048, seed);
                let target = t.capacity() * load_pct / 100;
                let mut rng = seed ^ 0xABCD;
                let mut model = HashMap::new();
                let mut attempts = 0;
                while model.len() < target && attempts < 2 * target {
                    attempts += 1;
                    let k = key_of(splitmix64(&mut rng) as u32);
                    if model.contains_key(&k) {
                        continue;
                    }
                    match t.insert(k, attempts as u32) {
                        Ok(()) => {
                            model.insert(k, attempts as u32);
                        }
                        Err(Stalled) => stalls += 1,
                    }
                    t.relocate(1);
                }
                for (k, v) in &model {
                    assert_eq!(t.lookup(*k), Some(*v));
                }
                assert_eq!(t.len(), model.len());
                max_stash = max_stash.max(t.stats().max_stash_occupancy);
            }
            println!(
                "fill to {load_pct}% of 4096 buckets, 8 seeds: {stalls} stalls, max stash {max_stash}"
            );
            if load_pct == 50 {
                assert_eq!(stalls, 0);
            }
        }
    }

    #[test]
    fn paper_table_size_15_5_kib() {
        assert_eq!(CuckooTable::entry_bits(512, 2048, 2048), 31);
        assert_eq!(CuckooTable::entry_bits(512, 2048, 1133), 31);
        for pool in [1133, 2048] {
            let t = CuckooTable::new(pool, 0);
            assert_eq!(t.capacity(), 4096);
            assert_eq!(t.bank_size(), 1024);
            assert_eq!(t.bucket_memory_bytes(512, 2048), 15 * 1024 + 512);
            // Plus 4 stash entries of 31 bits = 15.5 bytes, rounded up.
            assert_eq!(t.memory_bytes(512, 2048), 15 * 1024 + 512 + 16);
            let kib = t.memory_bytes(512, 2048) as f64 / 1024.0;
            assert_eq!((kib * 10.0).round() / 10.0, 15.5);
        }
        // Scaling: 2048 queues and a 4x pool (Fig. 4's 400 Gbps point).
        assert_eq!(CuckooTable::entry_bits(2048, 8192, 8192), 37);
        assert_eq!(CuckooTable::entry_bits(0, 1, 0), 0);
        assert_eq!(CuckooTable::entry_bits(u32::MAX, u32::MAX, u32::MAX), 96);
    }

    #[test]
    fn geometry_and_extreme_inputs() {
        let t = CuckooTable::new(0, 0);
        assert_eq!(t.capacity(), 4);
        assert_eq!(CuckooTable::new(1, 0).capacity(), 4);
        assert_eq!(CuckooTable::new(3, 0).capacity(), 8);
        assert_eq!(CuckooTable::new(100, 0).capacity(), 256);
        let big = CuckooTable::new(u32::MAX, u64::MAX);
        assert_eq!(big.pool_slots(), MAX_POOL_SLOTS);
        assert_eq!(big.capacity(), 2 * MAX_POOL_SLOTS as usize);

        let mut t = CuckooTable::new(0, 9);
        let extremes = [
            RingKey::new(0, 0),
            RingKey::new(u16::MAX, u16::MAX),
            RingKey::new(0, u16::MAX),
            RingKey::new(u16::MAX, 0),
        ];
        // The largest slots short of the empty code (refused, tested above).
        for (i, k) in extremes.iter().enumerate() {
            t.insert(*k, EMPTY_SLOT - 1 - i as u32).unwrap();
        }
        for (i, k) in extremes.iter().enumerate() {
            assert_eq!(t.lookup(*k), Some(EMPTY_SLOT - 1 - i as u32));
        }
        // 4 buckets + 4 stash entries: keep inserting until a stall.
        let mut n = 4;
        for k in 1..1000u32 {
            if t.insert(RingKey::new(1, k as u16), k).is_err() {
                break;
            }
            n += 1;
        }
        assert_eq!(t.len(), n);
        assert!(n <= 8);
        check_invariants(&t);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16, u16, u32),
        Remove(u16, u16),
        Lookup(u16, u16),
        Relocate(usize),
    }

    fn op_strategy(queues: u16, indices: u16) -> impl Strategy<Value = Op> {
        prop_oneof![
            // Any slot but the empty code (refused: its own test).
            5 => (0..queues, 0..indices, 0..EMPTY_SLOT).prop_map(|(q, i, s)| Op::Insert(q, i, s)),
            3 => (0..queues, 0..indices).prop_map(|(q, i)| Op::Remove(q, i)),
            2 => (0..queues, 0..indices).prop_map(|(q, i)| Op::Lookup(q, i)),
            1 => (0usize..6).prop_map(Op::Relocate),
        ]
    }

    /// Runs `ops` against the table and a HashMap model. Inserts of new keys
    /// are skipped once the model holds `limit` keys.
    fn run_model(t: &mut CuckooTable, ops: &[Op], limit: usize) -> Result<u64, TestCaseError> {
        let mut model: HashMap<RingKey, u32> = HashMap::new();
        let mut stalls = 0;
        for op in ops {
            match *op {
                Op::Insert(q, i, s) => {
                    let k = RingKey::new(q, i);
                    if !model.contains_key(&k) && model.len() >= limit {
                        continue;
                    }
                    let stash_before = t.stash_len();
                    match t.insert(k, s) {
                        Ok(()) => {
                            model.insert(k, s);
                        }
                        Err(Stalled) => {
                            stalls += 1;
                            prop_assert!(
                                !model.contains_key(&k),
                                "update of a present key stalled"
                            );
                            prop_assert_eq!(stash_before, STASH_ENTRIES);
                            prop_assert_eq!(t.lookup(k), None);
                            for (mk, mv) in &model {
                                prop_assert_eq!(t.lookup(*mk), Some(*mv));
                            }
                        }
                    }
                }
                Op::Remove(q, i) => {
                    let k = RingKey::new(q, i);
                    prop_assert_eq!(t.remove(k), model.remove(&k));
                }
                Op::Lookup(q, i) => {
                    let k = RingKey::new(q, i);
                    prop_assert_eq!(t.lookup(k), model.get(&k).copied());
                }
                Op::Relocate(n) => {
                    let before = t.stash_len();
                    let done = t.relocate(n);
                    prop_assert!(done <= n);
                    prop_assert!(t.stash_len() <= before);
                }
            }
            prop_assert_eq!(t.len(), model.len());
            prop_assert!(t.stash_len() <= STASH_ENTRIES);
        }
        for (mk, mv) in &model {
            prop_assert_eq!(t.lookup(*mk), Some(*mv));
        }
        check_invariants(t);
        prop_assert_eq!(t.stats().stalls, stalls);
        Ok(stalls)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Loads up to 1/2 of capacity (= pool_slots keys).
        #[test]
        fn model_at_half_load(
            pool in 1u32..200,
            seed in any::<u64>(),
            ops in proptest::collection::vec(op_strategy(16, 64), 1..600),
        ) {
            let mut t = CuckooTable::new(pool, seed);
            let limit = t.capacity() / 2;
            run_model(&mut t, &ops, limit)?;
        }

        /// Overloaded tiny tables: stalls happen and must change nothing.
        #[test]
        fn model_overloaded(
            pool in 0u32..8,
            seed in any::<u64>(),
            budget in 0usize..3,
            ops in proptest::collection::vec(op_strategy(4, 8), 1..300),
        ) {
            let mut t = CuckooTable::new(pool, seed);
            t.set_insert_relocation_budget(budget);
            run_model(&mut t, &ops, usize::MAX)?;
        }
    }
}
