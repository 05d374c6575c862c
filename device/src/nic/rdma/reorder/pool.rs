//! LEFT's dual-state shared bitmap pool (Zhang et al., APNet '24, §3.2, Figure 3, Algorithm 1):
//! the record of which out-of-order packets of each connection have arrived, kept either in a
//! pool of small blocks shared by every connection or, for the connections reordered deepest, in
//! one of a few bitmap caches.
//!
//! * **Pool.** Fixed-size blocks, each `block_bits` packets of bitmap and a next pointer; a
//!   connection's bitmap is a chain of blocks from its start block, block `k` holding the PSNs
//!   `base + k·block_bits ..`. An availability bitmap says which blocks are taken. Reaching the
//!   block of an offset walks the chain: 15 ns for the first block, 5 ns for each further one
//!   (§4.2, the paper's FPGA at 200 MHz).
//! * **Caches.** A few ring bitmaps in registers, one connection each, updated in 10 ns.
//! * **Manager** (Algorithm 1). A connection already in a cache, or one with no bitmap while a
//!   cache is empty, is updated in its cache. Otherwise, when the walk `T_pool = 5 ns ·
//!   offset / block_bits` stays under `T_max`, in the pool (taking blocks as the offset needs
//!   them); beyond it, the connection swaps into the least-occupied cache, whose bitmap goes back
//!   to the pool — write-back and read-in run side by side, so the swap costs the longer walk.
//! * **Release.** As the connection's expected PSN (`RCV_NXT`) moves on, whole blocks behind it
//!   return to the pool; a cache whose connection has nothing out of order is emptied.
//! * **Exhaustion** (§3.5). An offset beyond what a cache holds, or a block the pool cannot give,
//!   refuses the packet (the receiver drops it and NAKs); the connection then gets no new bitmap
//!   until its disorder has cleared, so one connection cannot starve the others.
//!
//! Left out: the pool's and caches' bank structure (the paper's figure shows banks; one access
//! per operation here), and ECC. Latencies are returned for a runner to charge, as the QP and
//! translation caches' misses are.

use std::collections::HashMap;

/// A connection the pool keeps a bitmap for (the receiving QP's index).
pub type Conn = u32;

const NIL: u32 = u32::MAX;

/// The pool's and caches' sizes and the manager's limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Packets one block records (1..=64).
    pub block_bits: u32,
    /// Blocks in the pool.
    pub blocks: u32,
    /// Bitmap caches, and the packets each holds (a multiple of 64).
    pub caches: u32,
    pub cache_bits: u32,
    /// Above this walk the manager swaps the connection into a cache, ns.
    pub t_max_ns: u32,
    /// Costs of an access: a cache; the first block of a walk; each further block.
    pub cache_ns: u32,
    pub first_block_ns: u32,
    pub next_block_ns: u32,
}

impl PoolConfig {
    /// The configuration of §3.5 and §4.1: a 2 Kbit pool (the paper's "8b*128*2", read as 256
    /// blocks of 8 packets), three caches of half a BDP, `T_max` 40 ns (§3.1: the latency of
    /// deeply reordered connections "converges within 40ns"), the FPGA timings of §4.2. `bdp`:
    /// the bandwidth-delay product in packets (the paper's baseline counts 512).
    pub fn left(bdp: u32) -> Self {
        PoolConfig {
            block_bits: 8,
            blocks: 256,
            caches: 3,
            cache_bits: (bdp / 2).next_multiple_of(64).max(64),
            t_max_ns: 40,
            cache_ns: 10,
            first_block_ns: 15,
            next_block_ns: 5,
        }
    }

    /// The same pool without caches (MELO+: every out-of-order packet walks the pool).
    pub fn pool_only(bdp: u32) -> Self {
        PoolConfig {
            caches: 0,
            t_max_ns: u32::MAX,
            ..Self::left(bdp)
        }
    }

    /// Algorithm 1's (and 3's) estimate of a pool walk to `offset`: 5 ns per block.
    pub fn t_pool_ns(&self, offset: u32) -> u64 {
        u64::from(self.next_block_ns) * u64::from(offset) / u64::from(self.block_bits.max(1))
    }

    fn walk_ns(&self, blocks: u32) -> u32 {
        match blocks {
            0 => 0,
            n => self.first_block_ns + self.next_block_ns * (n - 1),
        }
    }
}

/// Where an operation found or put the connection's bitmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Updated in its cache (a hit, or a first bitmap into an empty cache).
    Cache,
    /// Walked this many blocks of the pool.
    Pool(u32),
    /// Swapped into a cache: the walks out of the pool and back into it, in blocks.
    Swap { read: u32, written: u32 },
}

/// What recording an out-of-order packet came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Recorded now; the access and what it cost, ns.
    New(Access, u32),
    /// Already recorded (a duplicate); what finding that cost.
    Duplicate(Access, u32),
    /// No room: beyond a cache's reach, the pool out of blocks, or the connection refused new
    /// bitmaps until it recovers (§3.5).
    Refused,
}

/// One connection's bitmap: where it lives and the PSN its first bit stands for.
#[derive(Clone, Copy, Debug)]
struct Bitmap {
    /// PSN of bit 0 (pool: of the start block's first bit; cache: of the ring's head).
    base: u32,
    /// Pool: the start block (NIL: none yet). Cache: unused.
    start: u32,
    /// In cache `c`.
    cache: Option<u32>,
    /// Packets recorded and not yet passed by `RCV_NXT`.
    recorded: u32,
}

#[derive(Clone)]
struct Cache {
    owner: Option<Conn>,
    /// Ring of `cache_bits` bits; bit `(head + i) % cache_bits` stands for PSN `base + i`.
    bits: Vec<u64>,
    head: u32,
}

/// The pool, the caches and the connections' bitmaps.
#[derive(Clone)]
pub struct BitmapPool {
    cfg: PoolConfig,
    /// Each block's bits and its next block.
    block: Vec<u64>,
    next: Vec<u32>,
    /// Bit `b` set: block `b` is taken.
    avail: Vec<u64>,
    free: u32,
    caches: Vec<Cache>,
    conns: HashMap<Conn, Bitmap>,
    /// Connections refused a new bitmap until `RCV_NXT` passes the PSN held here.
    refused: HashMap<Conn, u32>,
    /// Blocks taken and given back, over the pool's life (they differ by the blocks in use).
    pub taken: u64,
    pub returned: u64,
}

/// Bits that number `0..n` (at least 1).
pub(crate) fn bits_for(n: u64) -> u64 {
    u64::from(64 - n.max(2).saturating_sub(1).leading_zeros())
}

fn psn_delta(a: u32, b: u32) -> i32 {
    (((a.wrapping_sub(b)) << 8) as i32) >> 8
}

impl BitmapPool {
    pub fn new(cfg: PoolConfig) -> Self {
        let cache_words = cfg.cache_bits.div_ceil(64) as usize;
        BitmapPool {
            block: vec![0; cfg.blocks as usize],
            next: vec![NIL; cfg.blocks as usize],
            avail: vec![0; (cfg.blocks as usize).div_ceil(64)],
            free: cfg.blocks,
            caches: (0..cfg.caches)
                .map(|_| Cache {
                    owner: None,
                    bits: vec![0; cache_words],
                    head: 0,
                })
                .collect(),
            conns: HashMap::new(),
            refused: HashMap::new(),
            taken: 0,
            returned: 0,
            cfg,
        }
    }

    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// Bits of on-chip memory the pool and its caches take as allocated here: each block's
    /// bits and next pointer, the availability bitmap; each cache's ring with its owner (a QP
    /// of `max_conns`), base PSN and head. (The bits of a block are kept in a 64-bit word here;
    /// the count is the hardware's `block_bits`.)
    pub fn on_chip_bits(&self, max_conns: u64) -> (u64, u64) {
        let blocks = self.block.len() as u64;
        let ptr = bits_for(blocks + 1);
        let pool = blocks * (u64::from(self.cfg.block_bits) + ptr) + self.cfg.blocks as u64;
        let ring = u64::from(self.cfg.cache_bits);
        let caches = self.caches.len() as u64 * (ring + bits_for(max_conns) + 24 + bits_for(ring));
        (pool, caches)
    }

    /// Bits a connection's entry takes: its start block (or none) and its base PSN.
    pub fn connection_bits(&self) -> u64 {
        bits_for(self.block.len() as u64 + 1) + 24
    }

    /// Blocks not taken.
    pub fn free_blocks(&self) -> u32 {
        self.free
    }

    /// Whether `conn` has a bitmap in a cache.
    pub fn in_cache(&self, conn: Conn) -> bool {
        self.conns.get(&conn).is_some_and(|b| b.cache.is_some())
    }

    /// Whether `conn` has any packet recorded.
    pub fn has_bitmap(&self, conn: Conn) -> bool {
        self.conns.contains_key(&conn)
    }

    fn take_block(&mut self) -> Option<u32> {
        let w = self.avail.iter().position(|w| *w != u64::MAX)?;
        let b = w as u32 * 64 + (!self.avail[w]).trailing_zeros();
        if b >= self.cfg.blocks {
            return None;
        }
        self.avail[w] |= 1 << (b % 64);
        self.block[b as usize] = 0;
        self.next[b as usize] = NIL;
        self.free -= 1;
        self.taken += 1;
        Some(b)
    }

    fn give_block(&mut self, b: u32) {
        self.avail[(b / 64) as usize] &= !(1 << (b % 64));
        self.free += 1;
        self.returned += 1;
    }

    fn give_chain(&mut self, mut b: u32) {
        while b != NIL {
            let n = self.next[b as usize];
            self.give_block(b);
            b = n;
        }
    }

    fn chain_len(&self, mut b: u32) -> u32 {
        let mut n = 0;
        while b != NIL {
            n += 1;
            b = self.next[b as usize];
        }
        n
    }

    /// Records packet `psn` of `conn`, which expects `rcv_nxt` (Algorithm 1); `psn` is ahead
    /// of it.
    pub fn record(&mut self, conn: Conn, psn: u32, rcv_nxt: u32) -> Recorded {
        let offset = psn_delta(psn, rcv_nxt);
        if offset <= 0 {
            return Recorded::Duplicate(Access::Cache, 0);
        }
        if let Some(&until) = self.refused.get(&conn) {
            if psn_delta(rcv_nxt, until) <= 0 {
                return Recorded::Refused;
            }
            self.refused.remove(&conn);
        }
        let existing = self.conns.get(&conn).copied();
        let cache = existing.and_then(|b| b.cache).or_else(|| {
            // A connection without a bitmap takes an empty cache first (Algorithm 1, line 2).
            existing
                .is_none()
                .then(|| self.caches.iter().position(|c| c.owner.is_none()))
                .flatten()
                .map(|c| c as u32)
        });
        if let Some(c) = cache {
            return self.record_in_cache(conn, c, psn, rcv_nxt, Access::Cache, 0);
        }
        let base = existing.map_or(rcv_nxt, |b| b.base);
        let from_base = psn.wrapping_sub(base) & 0xff_ffff;
        if self.cfg.t_pool_ns(from_base) < u64::from(self.cfg.t_max_ns) || self.caches.is_empty() {
            return self.record_in_pool(conn, psn, rcv_nxt);
        }
        // Too deep for the pool: swap into the least-occupied cache.
        let c = self.least_occupied_cache();
        let written = self.evict_cache(c);
        let read = existing.map_or(0, |b| self.chain_len(b.start));
        let mut bitmap = existing.unwrap_or(Bitmap {
            base: rcv_nxt,
            start: NIL,
            cache: None,
            recorded: 0,
        });
        if !self.load_cache(c, conn, &mut bitmap, rcv_nxt) {
            // The connection's own bitmap reaches past the cache: it stays in the pool.
            self.refuse(conn, psn);
            return Recorded::Refused;
        }
        let swap_ns = self.cfg.walk_ns(read).max(self.cfg.walk_ns(written));
        self.record_in_cache(
            conn,
            c,
            psn,
            rcv_nxt,
            Access::Swap { read, written },
            swap_ns,
        )
    }

    fn refuse(&mut self, conn: Conn, psn: u32) {
        let until = match self.refused.get(&conn) {
            Some(&u) if psn_delta(u, psn) > 0 => u,
            _ => psn,
        };
        self.refused.insert(conn, until);
    }

    fn least_occupied_cache(&self) -> u32 {
        let occupancy = |c: &Cache| {
            c.owner
                .and_then(|o| self.conns.get(&o))
                .map_or(0, |b| b.recorded)
        };
        (0..self.caches.len())
            .min_by_key(|&i| occupancy(&self.caches[i]))
            .unwrap_or(0) as u32
    }

    fn cache_bit(&self, c: u32, i: u32) -> bool {
        let cache = &self.caches[c as usize];
        let at = (cache.head + i) % self.cfg.cache_bits;
        cache.bits[(at / 64) as usize] >> (at % 64) & 1 == 1
    }

    fn set_cache_bit(&mut self, c: u32, i: u32, on: bool) {
        let n = self.cfg.cache_bits;
        let cache = &mut self.caches[c as usize];
        let at = (cache.head + i) % n;
        let w = &mut cache.bits[(at / 64) as usize];
        match on {
            true => *w |= 1 << (at % 64),
            false => *w &= !(1 << (at % 64)),
        }
    }

    fn record_in_cache(
        &mut self,
        conn: Conn,
        c: u32,
        psn: u32,
        rcv_nxt: u32,
        access: Access,
        extra_ns: u32,
    ) -> Recorded {
        let bitmap = *self.conns.entry(conn).or_insert(Bitmap {
            base: rcv_nxt,
            start: NIL,
            cache: Some(c),
            recorded: 0,
        });
        if self.caches[c as usize].owner.is_none() {
            self.caches[c as usize].owner = Some(conn);
            self.caches[c as usize].head = 0;
            self.caches[c as usize].bits.fill(0);
        }
        let i = psn.wrapping_sub(bitmap.base) & 0xff_ffff;
        let ns = extra_ns + self.cfg.cache_ns;
        if i >= self.cfg.cache_bits {
            self.refuse(conn, psn);
            self.drop_if_empty(conn);
            return Recorded::Refused;
        }
        if self.cache_bit(c, i) {
            return Recorded::Duplicate(access, ns);
        }
        self.set_cache_bit(c, i, true);
        if let Some(b) = self.conns.get_mut(&conn) {
            b.recorded += 1;
        }
        Recorded::New(access, ns)
    }

    fn record_in_pool(&mut self, conn: Conn, psn: u32, rcv_nxt: u32) -> Recorded {
        let mut bitmap = self.conns.get(&conn).copied().unwrap_or(Bitmap {
            base: rcv_nxt,
            start: NIL,
            cache: None,
            recorded: 0,
        });
        let from_base = psn.wrapping_sub(bitmap.base) & 0xff_ffff;
        let want = from_base / self.cfg.block_bits;
        // Walk (taking blocks where the chain ends) to the block of the offset.
        let mut walked = 0;
        if bitmap.start == NIL {
            match self.take_block() {
                Some(b) => bitmap.start = b,
                None => {
                    self.refuse(conn, psn);
                    return Recorded::Refused;
                }
            }
        }
        let mut b = bitmap.start;
        for _ in 0..want {
            walked += 1;
            if self.next[b as usize] == NIL {
                match self.take_block() {
                    Some(n) => self.next[b as usize] = n,
                    None => {
                        self.conns.insert(conn, bitmap);
                        self.refuse(conn, psn);
                        self.drop_if_empty(conn);
                        return Recorded::Refused;
                    }
                }
            }
            b = self.next[b as usize];
        }
        walked += 1;
        let access = Access::Pool(walked);
        let ns = self.cfg.walk_ns(walked);
        let bit = 1u64 << (from_base % self.cfg.block_bits);
        if self.block[b as usize] & bit != 0 {
            self.conns.insert(conn, bitmap);
            return Recorded::Duplicate(access, ns);
        }
        self.block[b as usize] |= bit;
        bitmap.recorded += 1;
        self.conns.insert(conn, bitmap);
        Recorded::New(access, ns)
    }

    /// Writes cache `c`'s bitmap back into the pool and empties the cache; the blocks the
    /// write-back walked. A write-back the pool has no room for refuses its connection.
    fn evict_cache(&mut self, c: u32) -> u32 {
        let Some(owner) = self.caches[c as usize].owner.take() else {
            return 0;
        };
        let Some(mut bitmap) = self.conns.get(&owner).copied() else {
            return 0;
        };
        bitmap.cache = None;
        bitmap.start = NIL;
        let mut tail = NIL;
        let mut walked = 0;
        let last = (0..self.cfg.cache_bits)
            .rev()
            .find(|&i| self.cache_bit(c, i))
            .map_or(0, |i| i + 1);
        let blocks = last.div_ceil(self.cfg.block_bits);
        for k in 0..blocks {
            let Some(b) = self.take_block() else {
                // No room: the connection loses its record and recovers by retransmission.
                if bitmap.start != NIL {
                    self.give_chain(bitmap.start);
                }
                self.conns.remove(&owner);
                self.refuse(owner, bitmap.base.wrapping_add(last) & 0xff_ffff);
                return walked;
            };
            walked += 1;
            let mut bits = 0u64;
            for j in 0..self.cfg.block_bits {
                let i = k * self.cfg.block_bits + j;
                if i < self.cfg.cache_bits && self.cache_bit(c, i) {
                    bits |= 1 << j;
                }
            }
            self.block[b as usize] = bits;
            match tail {
                NIL => bitmap.start = b,
                t => self.next[t as usize] = b,
            }
            tail = b;
        }
        self.caches[c as usize].bits.fill(0);
        self.caches[c as usize].head = 0;
        match bitmap.recorded {
            0 => {
                self.conns.remove(&owner);
            }
            _ => {
                self.conns.insert(owner, bitmap);
            }
        }
        walked
    }

    /// Reads `bitmap` (of `conn`) out of the pool into empty cache `c`, its blocks given back;
    /// false when its bits reach past the cache (nothing moves then).
    fn load_cache(&mut self, c: u32, conn: Conn, bitmap: &mut Bitmap, rcv_nxt: u32) -> bool {
        // Rebase on RCV_NXT so the cache's reach starts at the first missing packet.
        let shift = psn_delta(rcv_nxt, bitmap.base).max(0) as u32;
        let mut bits = Vec::new();
        let mut b = bitmap.start;
        let mut k = 0;
        while b != NIL {
            let word = self.block[b as usize];
            for j in 0..self.cfg.block_bits {
                if word >> j & 1 == 1 {
                    let i = k * self.cfg.block_bits + j;
                    if i >= shift {
                        bits.push(i - shift);
                    }
                }
            }
            k += 1;
            b = self.next[b as usize];
        }
        if bits.iter().any(|&i| i >= self.cfg.cache_bits) {
            return false;
        }
        if bitmap.start != NIL {
            self.give_chain(bitmap.start);
        }
        let cache = &mut self.caches[c as usize];
        cache.owner = Some(conn);
        cache.head = 0;
        cache.bits.fill(0);
        for &i in &bits {
            cache.bits[(i / 64) as usize] |= 1 << (i % 64);
        }
        bitmap.base = rcv_nxt;
        bitmap.start = NIL;
        bitmap.cache = Some(c);
        bitmap.recorded = bits.len() as u32;
        self.conns.insert(conn, *bitmap);
        true
    }

    fn drop_if_empty(&mut self, conn: Conn) {
        let Some(b) = self.conns.get(&conn).copied() else {
            return;
        };
        if b.recorded > 0 {
            return;
        }
        if let Some(c) = b.cache {
            self.caches[c as usize].owner = None;
        }
        if b.start != NIL {
            self.give_chain(b.start);
        }
        self.conns.remove(&conn);
    }

    /// `conn`'s expected PSN moved from `from` to past packet `rcv_nxt - 1` (an in-order packet
    /// arrived): returns the new `RCV_NXT` past every recorded packet it now reaches, clearing
    /// their bits and giving back the blocks wholly behind it.
    pub fn advance(&mut self, conn: Conn, rcv_nxt: u32) -> u32 {
        let Some(mut bitmap) = self.conns.get(&conn).copied() else {
            return rcv_nxt;
        };
        let mut next = rcv_nxt;
        match bitmap.cache {
            Some(c) => {
                // Skip to RCV_NXT, then over every recorded packet in a row.
                let mut i = next.wrapping_sub(bitmap.base) & 0xff_ffff;
                let mut cleared = 0;
                let n = self.cfg.cache_bits;
                let mut moved = i.min(n);
                for k in 0..moved {
                    if self.cache_bit(c, k) {
                        self.set_cache_bit(c, k, false);
                        cleared += 1;
                    }
                }
                while i < n && self.cache_bit(c, i) {
                    self.set_cache_bit(c, i, false);
                    cleared += 1;
                    i += 1;
                    moved = i;
                    next = next.wrapping_add(1) & 0xff_ffff;
                }
                let cache = &mut self.caches[c as usize];
                cache.head = (cache.head + moved) % n;
                bitmap.base = bitmap.base.wrapping_add(moved) & 0xff_ffff;
                bitmap.recorded = bitmap.recorded.saturating_sub(cleared);
            }
            None => {
                loop {
                    let i = next.wrapping_sub(bitmap.base) & 0xff_ffff;
                    let (k, j) = (i / self.cfg.block_bits, i % self.cfg.block_bits);
                    let mut b = bitmap.start;
                    for _ in 0..k {
                        if b == NIL {
                            break;
                        }
                        b = self.next[b as usize];
                    }
                    if b == NIL || self.block[b as usize] >> j & 1 == 0 {
                        break;
                    }
                    self.block[b as usize] &= !(1 << j);
                    bitmap.recorded = bitmap.recorded.saturating_sub(1);
                    next = next.wrapping_add(1) & 0xff_ffff;
                }
                // Blocks wholly behind RCV_NXT go back (their bits were all passed).
                while bitmap.start != NIL
                    && psn_delta(next, bitmap.base) >= self.cfg.block_bits as i32
                {
                    let b = bitmap.start;
                    bitmap.recorded = bitmap
                        .recorded
                        .saturating_sub(self.block[b as usize].count_ones());
                    bitmap.start = self.next[b as usize];
                    self.give_block(b);
                    bitmap.base = bitmap.base.wrapping_add(self.cfg.block_bits) & 0xff_ffff;
                }
            }
        }
        self.conns.insert(conn, bitmap);
        self.drop_if_empty(conn);
        next
    }

    /// Forgets every connection `keep` says is gone (a function reset).
    pub fn forget_unless(&mut self, keep: impl Fn(Conn) -> bool) {
        let gone: Vec<Conn> = self.conns.keys().copied().filter(|&c| !keep(c)).collect();
        for c in gone {
            self.forget(c);
        }
    }

    /// `conn` is gone (its QP destroyed or reset): its bitmap goes.
    pub fn forget(&mut self, conn: Conn) {
        if let Some(b) = self.conns.remove(&conn) {
            if let Some(c) = b.cache {
                self.caches[c as usize].owner = None;
            }
            if b.start != NIL {
                self.give_chain(b.start);
            }
        }
        self.refused.remove(&conn);
    }
}
