//! IPv4 fragment reassembly engine: the functional model of the "IP
//! defragmentation accelerator" of FlexDriver (ASPLOS'22, §7). The accelerator
//! sits after VXLAN decapsulation, receives IPv4 packets (some of them
//! fragments) and hands back whole datagrams.
//!
//! # Input and output
//!
//! [`Reassembler::push`] takes one IPv4 packet starting at the IP header (no
//! link-layer header) and the caller's clock. It returns an [`Outcome`]:
//!
//! * a packet that is not a fragment (MF = 0 and offset 0) is returned as-is
//!   ([`Outcome::Bypass`]);
//! * a fragment is stored ([`Outcome::Buffered`]) or, if it was the missing
//!   piece, the whole datagram is returned ([`Outcome::Complete`]);
//! * everything else is a counted drop ([`Outcome::Dropped`]). Bad input never
//!   panics and never makes the engine allocate beyond the configured limits.
//!
//! # Semantics, clause by clause
//!
//! * **Reassembly key** — RFC 791 §3.2 ("Fragmentation and Reassembly"): the
//!   identification field is used "together with the source and destination
//!   address, and the protocol fields, to identify datagram fragments for
//!   reassembly". The key is `(src, dst, protocol, identification)`.
//! * **Fragment position** — RFC 791 §3.1/§3.2: the fragment offset counts
//!   8-octet units, so every fragment except the last (MF = 0) carries a
//!   multiple of 8 data octets. A non-last fragment with an empty payload or a
//!   payload that is not a multiple of 8 is malformed.
//! * **Bookkeeping** — RFC 815 ("IP Datagram Reassembly Algorithms") keeps a
//!   list of holes. This engine keeps the equivalent dual: the sorted list of
//!   disjoint byte ranges received so far (holes are the gaps between them).
//!   Because ranges never overlap (see below) the datagram has no hole exactly
//!   when the received byte count equals the total data length, and that total
//!   is only known once the last fragment (MF = 0) has arrived (RFC 815 §3:
//!   the last fragment truncates the "infinite" final hole). The data is
//!   copied into one contiguous buffer per datagram at its offset (the
//!   "contiguous reassembly buffer" of RFC 1122 §3.3.2), with room for the
//!   largest IPv4 header in front so that completion needs no extra copy.
//! * **Header of the result** — RFC 791 §3.2 reassembly procedure: the header
//!   of the fragment with offset 0 is the template (options kept: options
//!   whose copy flag is clear are only present in that fragment). The engine
//!   rewrites total length = template IHL·4 + data length, clears MF and the
//!   offset (DF and the reserved bit are kept as in the template), and
//!   recomputes the header checksum (RFC 791 §3.1 "Header Checksum"). When
//!   several offset-0 fragments arrive (exact duplicates), the first one wins.
//! * **Overlaps** — RFC 791 lets later fragments overwrite earlier data, which
//!   is the root of the overlapping-fragment attacks of RFC 1858 §4. This
//!   engine applies to IPv4 the IPv6 rule of RFC 5722 §4 (kept in RFC 8200
//!   §4.5): if a fragment overlaps another fragment of the same datagram, "the
//!   entire datagram (and any constituent fragments, including those not yet
//!   received) MUST be silently discarded". The one exception is the one RFC
//!   8200 §4.5 allows: an *exact duplicate* — same byte range **and** same
//!   bytes as a fragment already held — is accepted silently and ignored. A
//!   fragment with the same range but different bytes is an overlap. After a
//!   discard the key is remembered (a "tombstone", holding no buffer) until the
//!   datagram's reassembly timer runs out, so later fragments of it are
//!   dropped ([`DropReason::Discarded`]) instead of starting a partial
//!   datagram again.
//! * **Inconsistent length** — two last fragments with different ends, a
//!   fragment that reaches past the end fixed by the last fragment, or a last
//!   fragment ending before data already received, discard the datagram the
//!   same way ([`DropReason::Inconsistent`]).
//! * **Size limit** — RFC 791 §3.1: total length is 16 bits, so no datagram is
//!   longer than 65535 octets. RFC 1122 §3.3.2 calls the reassembly limit
//!   EMTU_R and wants it configurable: [`Config::max_datagram`] (clamped to
//!   65535). A fragment is too large when `offset·8 + data length` plus the
//!   header of the result (20 octets until the offset-0 fragment is known,
//!   then its real length) exceeds that limit — the "ping of death" check.
//!   The datagram is then discarded ([`DropReason::TooLarge`]); an oversize
//!   fragment of a datagram not seen before leaves a tombstone too, so the
//!   rest of that datagram is not buffered.
//! * **Timeout** — RFC 791 §3.2 starts a reassembly timer with the first
//!   fragment and releases everything when it runs out; RFC 1122 §3.3.2 asks
//!   for a fixed value rather than one derived from TTL, so the deadline is
//!   `first fragment time + Config::timeout_ns` and is never extended. Time is
//!   the caller's `now_ns`; no real clock is read. A datagram is expired when
//!   `now_ns >= deadline`, checked on every [`Reassembler::push`] (before the
//!   packet is handled) and by [`Reassembler::expire`]. The ICMP Time Exceeded
//!   message of RFC 1122 is not generated: the accelerator only counts.
//! * **Resource limits** — [`Config::max_datagrams`] bounds the number of
//!   reassembly entries (tombstones included); a new datagram beyond it evicts
//!   the oldest entry. [`Config::max_buffered_bytes`] bounds the heap held for
//!   fragment data (see [`Reassembler::reserved_bytes`]); when growing a
//!   buffer would exceed it, idle pooled buffers are freed first, then the
//!   oldest datagrams are evicted; if the datagram being grown is the only one
//!   left, it is evicted itself. Every eviction is counted.
//!
//! # Clock
//!
//! `now_ns` is expected not to go backwards. A smaller value than one already
//! seen is treated as the largest one seen, so deadlines stay ordered.

use std::collections::HashMap;

use fld_abi::wire::Ipv4Packet;

/// Largest IPv4 total length (16-bit field, RFC 791 §3.1).
pub const IPV4_MAX_TOTAL_LEN: usize = 65_535;
/// Smallest IPv4 header (IHL = 5).
pub const IPV4_MIN_HEADER_LEN: usize = 20;
/// Largest IPv4 header (IHL = 15).
pub const IPV4_MAX_HEADER_LEN: usize = 60;

/// Room kept in front of the data of each datagram for the header of the
/// result, so that completion writes the header in place.
const HDR_RESERVE: usize = IPV4_MAX_HEADER_LEN;
/// "No slot" marker in the age list.
const NIL: usize = usize::MAX;

/// Limits of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Largest reassembled datagram, header included (EMTU_R of RFC 1122
    /// §3.3.2). Values above 65535 are clamped to 65535.
    pub max_datagram: usize,
    /// Largest number of datagrams under reassembly at once (tombstones of
    /// discarded datagrams included). 0 makes every fragment be dropped.
    pub max_datagrams: usize,
    /// Bound on the heap held for fragment data, in bytes: the capacity of the
    /// per-datagram data buffers and range lists, including idle buffers kept
    /// for reuse and the datagram last returned by [`Outcome::Complete`].
    pub max_buffered_bytes: usize,
    /// Reassembly timeout, counted from the first fragment of a datagram.
    pub timeout_ns: u64,
    /// Check the IPv4 header checksum of every input packet (bad ones are
    /// [`Malformed::BadChecksum`]).
    pub verify_checksum: bool,
}

impl Default for Config {
    /// 65535-byte datagrams, 1024 datagrams, 4 MiB of buffers, 60 s timeout
    /// (the low end of the 60–120 s recommended by RFC 1122 §3.3.2), checksum
    /// verification on.
    fn default() -> Self {
        Config {
            max_datagram: IPV4_MAX_TOTAL_LEN,
            max_datagrams: 1024,
            max_buffered_bytes: 4 << 20,
            timeout_ns: 60_000_000_000,
            verify_checksum: true,
        }
    }
}

/// Why a packet is malformed. The packet is dropped; no datagram state changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// Shorter than 20 bytes, or than IHL·4.
    Truncated,
    /// Version field is not 4.
    NotIpv4,
    /// IHL < 5.
    BadIhl,
    /// Total length is larger than the buffer.
    TotalLengthExceedsBuffer,
    /// Total length is smaller than the header.
    TotalLengthBelowHeader,
    /// Header checksum is wrong (only with [`Config::verify_checksum`]).
    BadChecksum,
    /// MF set and no data.
    EmptyFragment,
    /// MF set and a data length that is not a multiple of 8.
    UnalignedFragment,
}

/// Why a packet (and possibly its datagram) was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The packet itself is bad; see [`Malformed`].
    Malformed(Malformed),
    /// The fragment would make the datagram exceed [`Config::max_datagram`];
    /// the datagram is discarded.
    TooLarge,
    /// The fragment overlaps a fragment already held and is not an exact
    /// duplicate (RFC 5722 policy); the datagram is discarded.
    Overlap,
    /// The fragment contradicts the datagram end fixed by a last fragment;
    /// the datagram is discarded.
    Inconsistent,
    /// The fragment belongs to a datagram already discarded whose reassembly
    /// timer has not run out.
    Discarded,
    /// A datagram timed out. Only reported through [`Stats::timeouts`] and
    /// the return value of [`Reassembler::expire`]: `push` expires datagrams
    /// before looking at the packet, so it never returns this.
    Timeout,
    /// The datagram of this fragment was evicted for lack of memory or of
    /// entries (see [`Config`]).
    Evicted,
}

/// Result of [`Reassembler::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Not a fragment: the input, cut to its IPv4 total length (bytes beyond
    /// it, such as link-layer padding, are not part of the datagram).
    Bypass(&'a [u8]),
    /// The fragment was stored, or was an exact duplicate and ignored.
    Buffered,
    /// The fragment completed its datagram: the whole IPv4 datagram. Valid
    /// until the next call on the engine.
    Complete(&'a [u8]),
    /// The packet was dropped.
    Dropped(DropReason),
}

/// Counters. Discards count datagrams (or refused fragments that had no
/// datagram yet), not bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets given to `push`.
    pub packets: u64,
    /// Non-fragments returned as-is.
    pub bypass: u64,
    /// Fragments whose data was stored.
    pub fragments: u64,
    /// Exact duplicates accepted silently.
    pub duplicates: u64,
    /// Datagrams reassembled.
    pub completed: u64,
    /// Malformed packets.
    pub malformed: u64,
    /// Datagrams discarded for exceeding the size limit.
    pub too_large: u64,
    /// Datagrams discarded for overlapping fragments.
    pub overlaps: u64,
    /// Datagrams discarded for inconsistent last fragments.
    pub inconsistent: u64,
    /// Fragments dropped because their datagram was already discarded.
    pub discarded_fragments: u64,
    /// Datagrams dropped by the reassembly timer.
    pub timeouts: u64,
    /// Datagrams evicted for lack of memory or of entries.
    pub evicted: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    id: u16,
}

/// A received byte range `[start, end)` of the datagram data. Ends never
/// exceed 65535 - 20, so 16 bits suffice.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u16,
    end: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// On the free list; its buffers (if any) are idle and reusable.
    Free,
    /// Under reassembly: in the table and the age list.
    Live,
    /// Discarded datagram remembered until its deadline: in the table and the
    /// age list, no buffers.
    Dead,
    /// Holds the datagram last returned by `Complete`: in neither.
    Output,
}

struct Slot {
    key: Key,
    state: State,
    deadline: u64,
    /// Age list (oldest first), by slot index.
    prev: usize,
    next: usize,
    /// Header of the offset-0 fragment; `hdr_len == 0` until it arrives.
    hdr: [u8; IPV4_MAX_HEADER_LEN],
    hdr_len: usize,
    /// Data length, known once a last fragment (MF = 0) arrived.
    total: Option<usize>,
    /// Data bytes received (ranges are disjoint, so this has no double count).
    received: usize,
    /// Largest end of the ranges received.
    max_end: usize,
    /// `HDR_RESERVE` bytes of room, then the data at its offset.
    buf: Vec<u8>,
    /// Received ranges, sorted by start, disjoint, non-empty.
    spans: Vec<Span>,
}

impl Slot {
    fn new() -> Self {
        Slot {
            key: Key {
                src: [0; 4],
                dst: [0; 4],
                proto: 0,
                id: 0,
            },
            state: State::Free,
            deadline: 0,
            prev: NIL,
            next: NIL,
            hdr: [0; IPV4_MAX_HEADER_LEN],
            hdr_len: 0,
            total: None,
            received: 0,
            max_end: 0,
            buf: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Heap bytes this slot holds.
    fn charge(&self) -> usize {
        self.buf.capacity() + self.spans.capacity() * std::mem::size_of::<Span>()
    }
}

/// What inserting a fragment did.
enum Step {
    Buffered,
    Complete,
    Drop(DropReason),
}

/// Parsed and validated IPv4 header fields.
struct Parsed {
    hlen: usize,
    total_len: usize,
    more_fragments: bool,
    /// Fragment offset in bytes.
    offset: usize,
    key: Key,
}

/// The reassembly engine. See the module documentation.
pub struct Reassembler {
    cfg: Config,
    /// Live and dead entries, by key.
    table: HashMap<Key, usize>,
    slots: Vec<Slot>,
    /// Free slot indices; their buffers are the reuse pool.
    free: Vec<usize>,
    /// Age list of table entries, oldest first.
    head: usize,
    tail: usize,
    /// Dead entries in the table.
    dead: usize,
    /// Heap held by all slots (sum of `Slot::charge`).
    reserved: usize,
    /// Part of `reserved` held by free slots.
    idle: usize,
    /// Slot holding the last completed datagram, or `NIL`.
    output: usize,
    clock: u64,
    stats: Stats,
}

impl Reassembler {
    /// Creates an engine. Allocates nothing until fragments arrive.
    pub fn new(mut cfg: Config) -> Self {
        cfg.max_datagram = cfg.max_datagram.min(IPV4_MAX_TOTAL_LEN);
        Reassembler {
            cfg,
            table: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            dead: 0,
            reserved: 0,
            idle: 0,
            output: NIL,
            clock: 0,
            stats: Stats::default(),
        }
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> Config {
        self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Heap bytes held for datagrams in progress and for the datagram last
    /// returned by [`Outcome::Complete`] (buffer capacities, not only data).
    pub fn buffered_bytes(&self) -> usize {
        self.reserved - self.idle
    }

    /// [`Self::buffered_bytes`] plus the idle buffers kept for reuse. Never
    /// exceeds [`Config::max_buffered_bytes`].
    pub fn reserved_bytes(&self) -> usize {
        self.reserved
    }

    /// Datagrams under reassembly (tombstones of discarded ones excluded).
    pub fn pending_datagrams(&self) -> usize {
        self.table.len() - self.dead
    }

    /// Handles one IPv4 packet (starting at the IP header) received at
    /// `now_ns`. Datagrams whose timer ran out are dropped first.
    ///
    /// The returned slice borrows the engine (for [`Outcome::Complete`]) or
    /// the input (for [`Outcome::Bypass`]), hence the one lifetime for both;
    /// it is valid until the next call on the engine.
    pub fn push<'a>(&'a mut self, packet: &'a [u8], now_ns: u64) -> Outcome<'a> {
        self.release_output();
        let now = self.advance_clock(now_ns);
        self.expire_due(now);
        self.stats.packets += 1;

        let h = match parse(packet, self.cfg.verify_checksum) {
            Ok(h) => h,
            Err(m) => return self.malformed(m),
        };
        let datagram = &packet[..h.total_len];
        if !h.more_fragments && h.offset == 0 {
            self.stats.bypass += 1;
            return Outcome::Bypass(datagram);
        }
        let data = &datagram[h.hlen..];
        if h.more_fragments {
            if data.is_empty() {
                return self.malformed(Malformed::EmptyFragment);
            }
            if !data.len().is_multiple_of(8) {
                return self.malformed(Malformed::UnalignedFragment);
            }
        }
        let start = h.offset;
        let end = start + data.len();

        let existing = self.table.get(&h.key).copied();
        if existing.is_some_and(|idx| self.slots[idx].state == State::Dead) {
            self.stats.discarded_fragments += 1;
            return Outcome::Dropped(DropReason::Discarded);
        }
        if end + IPV4_MIN_HEADER_LEN > self.cfg.max_datagram {
            // Ping of death: no datagram containing this fragment fits.
            match existing {
                Some(idx) => self.kill(idx, DropReason::TooLarge),
                None => {
                    self.stats.too_large += 1;
                    if let Some(idx) = self.new_entry(h.key, now) {
                        self.make_dead(idx);
                    }
                }
            }
            return Outcome::Dropped(DropReason::TooLarge);
        }
        let idx = match existing {
            Some(idx) => idx,
            None => match self.new_entry(h.key, now) {
                Some(idx) => idx,
                None => {
                    self.stats.evicted += 1;
                    return Outcome::Dropped(DropReason::Evicted);
                }
            },
        };
        match self.insert(idx, &datagram[..h.hlen], data, start, !h.more_fragments) {
            Step::Buffered => Outcome::Buffered,
            Step::Complete => self.finish(idx),
            Step::Drop(reason) => Outcome::Dropped(reason),
        }
    }

    /// Drops every datagram whose timer ran out at `now_ns`; returns how many
    /// (tombstones that run out are forgotten without being counted).
    pub fn expire(&mut self, now_ns: u64) -> usize {
        self.release_output();
        let now = self.advance_clock(now_ns);
        self.expire_due(now)
    }

    fn advance_clock(&mut self, now_ns: u64) -> u64 {
        self.clock = self.clock.max(now_ns);
        self.clock
    }

    fn malformed(&mut self, m: Malformed) -> Outcome<'static> {
        self.stats.malformed += 1;
        Outcome::Dropped(DropReason::Malformed(m))
    }

    fn expire_due(&mut self, now: u64) -> usize {
        let mut n = 0;
        while self.head != NIL && self.slots[self.head].deadline <= now {
            let idx = self.head;
            if self.slots[idx].state == State::Live {
                n += 1;
                self.stats.timeouts += 1;
            }
            self.remove_entry(idx);
            self.free_slot(idx, true);
        }
        n
    }

    /// Stores one fragment of the live datagram `idx`.
    fn insert(&mut self, idx: usize, hdr: &[u8], data: &[u8], start: usize, last: bool) -> Step {
        let end = start + data.len();
        let s = &self.slots[idx];

        // The end of the datagram, once fixed by a last fragment, is final.
        let consistent = match (last, s.total) {
            (true, Some(total)) => end == total,
            (true, None) => end >= s.max_end,
            (false, Some(total)) => end <= total,
            (false, None) => true,
        };
        if !consistent {
            return self.discard(idx, DropReason::Inconsistent);
        }

        // Size of the result with the real header length once known.
        let hl = if s.hdr_len != 0 {
            s.hdr_len
        } else if start == 0 {
            hdr.len()
        } else {
            IPV4_MIN_HEADER_LEN
        };
        let extent = end.max(s.max_end).max(s.total.unwrap_or(0));
        if hl + extent > self.cfg.max_datagram {
            return self.discard(idx, DropReason::TooLarge);
        }

        let mut duplicate = false;
        let mut pos = 0;
        if data.is_empty() {
            // A last fragment without data only fixes the end; the checks
            // above make sure no range crosses it.
            duplicate = s.total == Some(end);
        } else {
            pos = s.spans.partition_point(|sp| usize::from(sp.start) < start);
            if let Some(next) = s.spans.get(pos) {
                if usize::from(next.start) == start {
                    let same = usize::from(next.end) == end
                        && s.buf[HDR_RESERVE + start..HDR_RESERVE + end] == *data;
                    if !same {
                        return self.discard(idx, DropReason::Overlap);
                    }
                    duplicate = true;
                } else if usize::from(next.start) < end {
                    return self.discard(idx, DropReason::Overlap);
                }
            }
            if pos > 0 && usize::from(s.spans[pos - 1].end) > start {
                return self.discard(idx, DropReason::Overlap);
            }
        }

        if !duplicate && !data.is_empty() {
            if last {
                // Knowing the end lets the buffer be sized exactly.
                self.slots[idx].total = Some(end);
            }
            let need_spans = self.slots[idx].spans.len() + 1;
            if !self.grow(idx, HDR_RESERVE + end, need_spans) {
                return Step::Drop(DropReason::Evicted);
            }
            let s = &mut self.slots[idx];
            if s.buf.len() < HDR_RESERVE + end {
                s.buf.resize(HDR_RESERVE + end, 0);
            }
            s.buf[HDR_RESERVE + start..HDR_RESERVE + end].copy_from_slice(data);
            // Both ends are below 65535 - 20 (checked above), so they fit.
            s.spans.insert(
                pos,
                Span {
                    start: start as u16,
                    end: end as u16,
                },
            );
            s.received += data.len();
            s.max_end = s.max_end.max(end);
        }
        if duplicate {
            self.stats.duplicates += 1;
        } else {
            self.stats.fragments += 1;
        }
        let s = &mut self.slots[idx];
        if start == 0 && s.hdr_len == 0 {
            s.hdr[..hdr.len()].copy_from_slice(hdr);
            s.hdr_len = hdr.len();
        }
        if last {
            s.total = Some(end);
        }
        if s.total == Some(s.received) && s.hdr_len != 0 {
            Step::Complete
        } else {
            Step::Buffered
        }
    }

    /// Makes room for `need_buf` bytes of buffer and `need_spans` ranges in
    /// slot `idx`, within the memory bound. On failure the datagram is
    /// evicted (counted) and `false` returned.
    fn grow(&mut self, idx: usize, need_buf: usize, need_spans: usize) -> bool {
        let s = &self.slots[idx];
        let (cap_b, cap_s) = (s.buf.capacity(), s.spans.capacity());
        if cap_b >= need_buf && cap_s >= need_spans {
            return true;
        }
        let span_size = std::mem::size_of::<Span>();
        let max_data = self.cfg.max_datagram.saturating_sub(IPV4_MIN_HEADER_LEN);
        // Preferred sizes: exact once the end is known, else doubling up to
        // the largest possible datagram, so in-order arrival does not copy
        // the buffer once per fragment.
        let want_b = if cap_b >= need_buf {
            cap_b
        } else if let Some(total) = s.total {
            (HDR_RESERVE + total).max(need_buf)
        } else {
            need_buf.max(cap_b.saturating_mul(2).min(HDR_RESERVE + max_data))
        };
        let want_s = if cap_s >= need_spans {
            cap_s
        } else {
            need_spans.max(cap_s.saturating_mul(2).max(4).min(max_data / 8 + 1))
        };
        let budget = self.cfg.max_buffered_bytes;
        let extra = (want_b - cap_b) + (want_s - cap_s) * span_size;
        let (target_b, target_s) = if self.reserved.saturating_add(extra) <= budget {
            (want_b, want_s)
        } else {
            let target_b = cap_b.max(need_buf);
            let target_s = cap_s.max(need_spans);
            let extra = (target_b - cap_b) + (target_s - cap_s) * span_size;
            if !self.make_room(extra, idx) {
                self.evict(idx);
                return false;
            }
            (target_b, target_s)
        };
        let s = &mut self.slots[idx];
        let before = s.charge();
        let ok = s.buf.try_reserve_exact(target_b - s.buf.len()).is_ok()
            && s.spans.try_reserve_exact(target_s - s.spans.len()).is_ok();
        let after = s.charge();
        self.reserved = self.reserved - before + after;
        if !ok || self.reserved > budget {
            self.evict(idx);
            return false;
        }
        true
    }

    /// Frees idle buffers, then evicts the oldest live datagrams other than
    /// `keep`, until `extra` more bytes fit in the budget.
    fn make_room(&mut self, extra: usize, keep: usize) -> bool {
        let budget = self.cfg.max_buffered_bytes;
        if self.reserved.saturating_add(extra) <= budget {
            return true;
        }
        if self.idle > 0 {
            let free = std::mem::take(&mut self.free);
            for &f in &free {
                self.release_memory(f);
            }
            self.free = free;
            self.idle = 0;
        }
        let mut cur = self.head;
        while self.reserved.saturating_add(extra) > budget {
            while cur != NIL && (cur == keep || self.slots[cur].state != State::Live) {
                cur = self.slots[cur].next;
            }
            if cur == NIL {
                return false;
            }
            let victim = cur;
            cur = self.slots[cur].next;
            self.evict(victim);
        }
        true
    }

    /// Evicts a live datagram for lack of memory: counted, buffers freed.
    fn evict(&mut self, idx: usize) {
        self.stats.evicted += 1;
        self.remove_entry(idx);
        self.free_slot(idx, false);
    }

    /// Discards a live datagram and leaves a tombstone (RFC 5722 §4).
    fn discard(&mut self, idx: usize, reason: DropReason) -> Step {
        self.kill(idx, reason);
        Step::Drop(reason)
    }

    fn kill(&mut self, idx: usize, reason: DropReason) {
        match reason {
            DropReason::TooLarge => self.stats.too_large += 1,
            DropReason::Overlap => self.stats.overlaps += 1,
            DropReason::Inconsistent => self.stats.inconsistent += 1,
            _ => {}
        }
        self.make_dead(idx);
    }

    fn make_dead(&mut self, idx: usize) {
        self.release_memory(idx);
        self.slots[idx].state = State::Dead;
        self.dead += 1;
    }

    /// Allocates an entry for a new datagram, evicting the oldest entry when
    /// the table is full. `None` only when `max_datagrams` is 0.
    fn new_entry(&mut self, key: Key, now: u64) -> Option<usize> {
        if self.cfg.max_datagrams == 0 {
            return None;
        }
        while self.table.len() >= self.cfg.max_datagrams && self.head != NIL {
            let oldest = self.head;
            if self.slots[oldest].state == State::Live {
                self.stats.evicted += 1;
            }
            self.remove_entry(oldest);
            self.free_slot(oldest, true);
        }
        let idx = match self.free.pop() {
            Some(idx) => {
                self.idle -= self.slots[idx].charge();
                idx
            }
            None => {
                self.slots.push(Slot::new());
                self.slots.len() - 1
            }
        };
        let deadline = now.saturating_add(self.cfg.timeout_ns);
        let s = &mut self.slots[idx];
        s.key = key;
        s.state = State::Live;
        s.deadline = deadline;
        s.hdr_len = 0;
        s.total = None;
        s.received = 0;
        s.max_end = 0;
        s.buf.clear();
        s.spans.clear();
        self.table.insert(key, idx);
        self.link_tail(idx);
        Some(idx)
    }

    /// Writes the header of the result in front of the data and hands the
    /// slot over to the output position.
    fn finish(&mut self, idx: usize) -> Outcome<'_> {
        self.stats.completed += 1;
        self.remove_entry(idx);
        self.output = idx;
        let s = &mut self.slots[idx];
        s.state = State::Output;
        let hl = s.hdr_len;
        let data_len = s.total.unwrap_or(s.received);
        let first = HDR_RESERVE - hl;
        let stop = HDR_RESERVE + data_len;
        let header = &mut s.buf[first..HDR_RESERVE];
        header.copy_from_slice(&s.hdr[..hl]);
        let mut ip = Ipv4Packet::new_unchecked(header);
        // hl + data_len <= max_datagram <= 65535 was checked on insertion.
        ip.set_total_len((hl + data_len) as u16);
        ip.clear_frag();
        ip.fill_checksum();
        Outcome::Complete(&self.slots[idx].buf[first..stop])
    }

    fn release_output(&mut self) {
        if self.output != NIL {
            let idx = self.output;
            self.output = NIL;
            self.free_slot(idx, true);
        }
    }

    /// Puts a slot (already out of the table) on the free list; its buffers
    /// become idle (reusable) or are freed.
    fn free_slot(&mut self, idx: usize, keep_buffers: bool) {
        if !keep_buffers {
            self.release_memory(idx);
        }
        let s = &mut self.slots[idx];
        s.state = State::Free;
        s.buf.clear();
        s.spans.clear();
        self.idle += s.charge();
        self.free.push(idx);
    }

    /// Frees the buffers of a slot.
    fn release_memory(&mut self, idx: usize) {
        let s = &mut self.slots[idx];
        self.reserved -= s.charge();
        s.buf = Vec::new();
        s.spans = Vec::new();
    }

    /// Removes a live or dead entry from the table and the age list.
    fn remove_entry(&mut self, idx: usize) {
        let key = self.slots[idx].key;
        self.table.remove(&key);
        if self.slots[idx].state == State::Dead {
            self.dead -= 1;
        }
        self.unlink(idx);
    }

    fn link_tail(&mut self, idx: usize) {
        self.slots[idx].prev = self.tail;
        self.slots[idx].next = NIL;
        if self.tail == NIL {
            self.head = idx;
        } else {
            self.slots[self.tail].next = idx;
        }
        self.tail = idx;
    }

    fn unlink(&mut self, idx: usize) {
        let (prev, next) = (self.slots[idx].prev, self.slots[idx].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next].prev = prev;
        }
        self.slots[idx].prev = NIL;
        self.slots[idx].next = NIL;
    }
}

#[cfg(test)]
impl Reassembler {
    /// Checks the internal bookkeeping; panics on any inconsistency.
    fn check_invariants(&self) {
        let total: usize = self.slots.iter().map(Slot::charge).sum();
        assert_eq!(total, self.reserved, "reserved");
        let idle: usize = self.free.iter().map(|&i| self.slots[i].charge()).sum();
        assert_eq!(idle, self.idle, "idle");
        assert!(self.reserved <= self.cfg.max_buffered_bytes, "budget");
        assert!(self
            .free
            .iter()
            .all(|&i| self.slots[i].state == State::Free));
        let (mut n, mut dead, mut prev, mut cur, mut deadline) = (0, 0, NIL, self.head, 0);
        while cur != NIL {
            let s = &self.slots[cur];
            assert_eq!(s.prev, prev);
            assert_eq!(self.table.get(&s.key), Some(&cur));
            assert!(s.deadline >= deadline, "deadlines ordered");
            deadline = s.deadline;
            match s.state {
                State::Dead => {
                    dead += 1;
                    assert_eq!(s.charge(), 0);
                }
                State::Live => {
                    let mut sum = 0;
                    let mut end = 0;
                    for sp in &s.spans {
                        assert!(sp.start < sp.end && usize::from(sp.start) >= end);
                        end = usize::from(sp.end);
                        sum += usize::from(sp.end - sp.start);
                    }
                    assert_eq!(sum, s.received);
                    assert_eq!(end, s.max_end);
                    if sum > 0 {
                        assert_eq!(s.buf.len(), HDR_RESERVE + s.max_end);
                    }
                    if let Some(t) = s.total {
                        assert!(t >= s.max_end && s.received < t);
                    }
                    assert!(
                        s.hdr_len.max(IPV4_MIN_HEADER_LEN) + s.max_end <= self.cfg.max_datagram
                    );
                }
                other => panic!("{other:?} slot in the age list"),
            }
            prev = cur;
            cur = s.next;
            n += 1;
        }
        assert_eq!(self.tail, prev);
        assert_eq!(n, self.table.len());
        assert_eq!(dead, self.dead);
        assert!(self.table.len() <= self.cfg.max_datagrams);
        assert!(self.slots.len() <= self.cfg.max_datagrams + 1);
    }
}

/// Validates the IPv4 header of `p` (through [`Ipv4Packet`]) and extracts what reassembly
/// needs, naming the first check that fails.
fn parse(p: &[u8], verify_checksum: bool) -> Result<Parsed, Malformed> {
    if p.is_empty() {
        return Err(Malformed::Truncated);
    }
    let ip = Ipv4Packet::new_unchecked(p);
    if ip.version() != 4 {
        return Err(Malformed::NotIpv4);
    }
    if p.len() < IPV4_MIN_HEADER_LEN {
        return Err(Malformed::Truncated);
    }
    let hlen = ip.header_len();
    if hlen < IPV4_MIN_HEADER_LEN {
        return Err(Malformed::BadIhl);
    }
    if p.len() < hlen {
        return Err(Malformed::Truncated);
    }
    let total_len = usize::from(ip.total_len());
    if total_len < hlen {
        return Err(Malformed::TotalLengthBelowHeader);
    }
    if total_len > p.len() {
        return Err(Malformed::TotalLengthExceedsBuffer);
    }
    if verify_checksum && !ip.verify_checksum() {
        return Err(Malformed::BadChecksum);
    }
    Ok(Parsed {
        hlen,
        total_len,
        more_fragments: ip.more_frags(),
        offset: usize::from(ip.frag_offset()),
        key: Key {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            proto: ip.next_header(),
            id: ip.ident(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{IpFragOffset, IpNumber, Ipv4Header, Ipv4Options, PacketBuilder};
    use proptest::prelude::*;
    use std::collections::HashMap;

    const MS: u64 = 1_000_000;

    /// xorshift64* — deterministic randomness without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
        fn shuffle<T>(&mut self, v: &mut [T]) {
            for i in (1..v.len()).rev() {
                let j = self.below(i + 1);
                v.swap(i, j);
            }
        }
    }

    fn write_header(h: &Ipv4Header) -> Vec<u8> {
        let mut v = Vec::new();
        h.write(&mut v).unwrap(); // computes the checksum
        v
    }

    /// A UDP datagram of `total_len` bytes (>= 28) built by etherparse.
    fn udp_datagram(id: u16, src: [u8; 4], total_len: usize, rng: &mut Rng) -> Vec<u8> {
        let payload = rng.bytes(total_len - 28);
        let b = PacketBuilder::ipv4(src, [10, 0, 0, 2], 64).udp(5000, 9000);
        let mut v = Vec::with_capacity(b.size(payload.len()));
        b.write(&mut v, &payload).unwrap();
        let (mut h, _) = Ipv4Header::from_slice(&v).unwrap();
        h.identification = id;
        h.dont_fragment = false;
        let hb = write_header(&h);
        v[..hb.len()].copy_from_slice(&hb);
        assert_eq!(v.len(), total_len);
        v
    }

    /// A datagram with `data_len` bytes after an IPv4 header with `options`.
    fn raw_datagram(
        id: u16,
        src: [u8; 4],
        proto: u8,
        data_len: usize,
        options: &[u8],
        dont_fragment: bool,
        rng: &mut Rng,
    ) -> Vec<u8> {
        let mut h = Ipv4Header::new(0, 64, IpNumber(proto), src, [192, 168, 7, 9]).unwrap();
        h.identification = id;
        h.dont_fragment = dont_fragment;
        h.options = Ipv4Options::try_from(options).unwrap();
        h.set_payload_len(data_len).unwrap();
        let mut v = write_header(&h);
        v.extend(rng.bytes(data_len));
        v
    }

    /// Fragments `dgram` into pieces of the given data sizes (all but the
    /// last a multiple of 8). Fragments after the first drop the options,
    /// as for options whose copy flag is clear.
    fn fragment(dgram: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
        let (h, _) = Ipv4Header::from_slice(dgram).unwrap();
        let data = &dgram[h.header_len()..];
        assert_eq!(sizes.iter().sum::<usize>(), data.len());
        let mut out = Vec::new();
        let mut off = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let mut fh = h.clone();
            if off != 0 {
                fh.options = Ipv4Options::new();
            }
            fh.more_fragments = i + 1 < sizes.len();
            fh.fragment_offset = IpFragOffset::try_new((off / 8) as u16).unwrap();
            fh.set_payload_len(n).unwrap();
            let mut f = write_header(&fh);
            f.extend_from_slice(&data[off..off + n]);
            out.push(f);
            off += n;
        }
        out
    }

    /// Data sizes for fragmenting at an IP MTU (RFC 791 §3.2: as many
    /// 8-octet blocks as fit, the rest in the last fragment).
    fn mtu_sizes(dgram: &[u8], mtu: usize) -> Vec<usize> {
        let hlen = usize::from(dgram[0] & 0x0F) * 4;
        let per = (mtu - hlen) & !7;
        let mut left = dgram.len() - hlen;
        let mut sizes = Vec::new();
        while left > per {
            sizes.push(per);
            left -= per;
        }
        sizes.push(left);
        sizes
    }

    /// Random sizes: multiples of 8 up to a random per-datagram maximum.
    fn random_sizes(data_len: usize, rng: &mut Rng) -> Vec<usize> {
        let cap = if rng.below(4) == 0 { 4 } else { 400 };
        let max_blocks = 1 + rng.below(cap);
        let mut sizes = Vec::new();
        let mut left = data_len;
        loop {
            let n = 8 * (1 + rng.below(max_blocks));
            if n >= left {
                sizes.push(left);
                return sizes;
            }
            sizes.push(n);
            left -= n;
        }
    }

    /// A raw IPv4 fragment with chosen fields and a correct checksum.
    fn frag(id: u16, offset_bytes: usize, mf: bool, data: &[u8]) -> Vec<u8> {
        let mut h = Ipv4Header::new(0, 64, IpNumber(17), [10, 0, 0, 1], [10, 0, 0, 2]).unwrap();
        h.identification = id;
        h.dont_fragment = false;
        h.more_fragments = mf;
        h.fragment_offset = IpFragOffset::try_new((offset_bytes / 8) as u16).unwrap();
        h.set_payload_len(data.len()).unwrap();
        let mut v = write_header(&h);
        v.extend_from_slice(data);
        v
    }

    /// Rewrites the checksum of a hand-edited header.
    fn fix_checksum(p: &mut [u8]) {
        Ipv4Packet::new_unchecked(p).fill_checksum();
    }

    fn assert_valid_header(d: &[u8]) {
        let (h, _) = Ipv4Header::from_slice(d).unwrap();
        assert_eq!(usize::from(h.total_len), d.len());
        assert!(!h.more_fragments);
        assert_eq!(h.fragment_offset.value(), 0);
        assert_eq!(h.header_checksum, h.calc_header_checksum());
    }

    /// Pushes fragments; returns the completed datagrams (copied).
    fn push_all(r: &mut Reassembler, frags: &[Vec<u8>], now: u64) -> Vec<Vec<u8>> {
        let mut done = Vec::new();
        for f in frags {
            match r.push(f, now) {
                Outcome::Complete(d) => done.push(d.to_vec()),
                Outcome::Buffered => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        done
    }

    fn big() -> Config {
        Config {
            max_buffered_bytes: 64 << 20,
            ..Config::default()
        }
    }

    #[test]
    fn paper_3000_byte_udp_at_1450_mtu() {
        let mut rng = Rng(7);
        let d = udp_datagram(0x1234, [10, 0, 0, 1], 3000, &mut rng);
        let sizes = mtu_sizes(&d, 1450);
        assert_eq!(sizes, vec![1424, 1424, 132]);
        let frags = fragment(&d, &sizes);
        let lens: Vec<usize> = frags.iter().map(Vec::len).collect();
        assert_eq!(lens, vec![1444, 1444, 152]);

        let mut r = Reassembler::new(Config::default());
        assert_eq!(r.push(&frags[0], 0), Outcome::Buffered);
        assert_eq!(r.push(&frags[1], 1), Outcome::Buffered);
        assert_eq!(r.push(&frags[2], 2), Outcome::Complete(&d[..]));

        // Reverse order gives the same bytes.
        let mut rev = frags.clone();
        rev.reverse();
        let done = push_all(&mut r, &rev, 3);
        assert_eq!(done, vec![d.clone()]);
        let s = r.stats();
        assert_eq!(
            (s.packets, s.fragments, s.completed, s.bypass),
            (6, 6, 2, 0)
        );
        assert_eq!(r.pending_datagrams(), 0);
    }

    #[test]
    fn random_fragmentations_reassemble_exactly() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut r = Reassembler::new(big());
        let mut completed = 0;
        for round in 0..250u16 {
            let data_len = match rng.below(3) {
                0 => 1 + rng.below(64),
                1 => 1 + rng.below(4000),
                _ => 1 + rng.below(65000),
            };
            let options: &[u8] = match rng.below(3) {
                0 => &[],
                1 => &[1, 1, 1, 0],
                _ => &[7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0],
            };
            let d = raw_datagram(
                round,
                [172, 16, 0, 1],
                17,
                data_len,
                options,
                rng.below(2) == 0,
                &mut rng,
            );
            let mut frags = fragment(&d, &random_sizes(data_len, &mut rng));
            if frags.len() == 1 {
                assert_eq!(r.push(&frags[0], 0), Outcome::Bypass(&d[..]));
                continue;
            }
            for _ in 0..rng.below(frags.len() + 1) {
                let k = rng.below(frags.len());
                frags.push(frags[k].clone());
            }
            rng.shuffle(&mut frags);
            let mut done = Vec::new();
            let mut after = 0;
            for f in &frags {
                match r.push(f, u64::from(round)) {
                    Outcome::Complete(out) => {
                        assert_valid_header(out);
                        done.push(out.to_vec());
                    }
                    Outcome::Buffered => after += usize::from(!done.is_empty()),
                    other => panic!("round {round}: unexpected {other:?}"),
                }
            }
            // Duplicates arriving after completion start the datagram over
            // (and may even complete it again, with the same bytes).
            assert!(!done.is_empty(), "round {round}");
            for out in &done {
                assert_eq!(out, &d, "round {round}");
            }
            completed += 1;
            if after == 0 {
                assert_eq!(done.len(), 1);
                assert_eq!(r.pending_datagrams(), 0);
            }
            r.expire(u64::MAX);
            assert_eq!(r.pending_datagrams(), 0);
            r = Reassembler::new(big());
        }
        assert!(completed > 150);
    }

    #[test]
    fn interleaved_100_datagrams() {
        let mut rng = Rng(42);
        let mut r = Reassembler::new(Config::default());
        let mut originals = HashMap::new();
        let mut all = Vec::new();
        for i in 0..100u16 {
            // Pairs share the identification and differ by source address,
            // so the key really is (src, dst, protocol, id).
            let src = [10, 0, (i % 2) as u8, 1];
            let d = udp_datagram(i / 2, src, 100 + rng.below(8900), &mut rng);
            let mut frags = fragment(&d, &random_sizes(d.len() - 20, &mut rng));
            while frags.len() == 1 {
                frags = fragment(&d, &random_sizes(d.len() - 20, &mut rng));
            }
            originals.insert((src, i / 2), d);
            all.extend(frags);
        }
        rng.shuffle(&mut all);
        let mut done = 0;
        for f in &all {
            if let Outcome::Complete(d) = r.push(f, 5) {
                let (h, _) = Ipv4Header::from_slice(d).unwrap();
                let want = originals.remove(&(h.source, h.identification)).unwrap();
                assert_eq!(d, &want[..]);
                done += 1;
            }
        }
        assert_eq!(done, 100);
        assert!(originals.is_empty());
        let s = r.stats();
        assert_eq!(
            (s.completed, s.evicted, s.overlaps, s.timeouts),
            (100, 0, 0, 0)
        );
        assert_eq!(r.pending_datagrams(), 0);
        assert!(
            r.buffered_bytes() > 0,
            "the last output is held until the next call"
        );
        assert_eq!(r.expire(5), 0);
        assert_eq!(
            r.buffered_bytes(),
            0,
            "everything is idle after the next call"
        );
        assert!(r.reserved_bytes() > 0, "buffers are kept for reuse");
    }

    #[test]
    fn exact_duplicates_are_accepted_silently() {
        let mut rng = Rng(3);
        let d = udp_datagram(9, [1, 2, 3, 4], 5000, &mut rng);
        let frags = fragment(&d, &mtu_sizes(&d, 1500));
        let mut r = Reassembler::new(Config::default());
        for f in &frags[..frags.len() - 1] {
            assert_eq!(r.push(f, 0), Outcome::Buffered);
            assert_eq!(r.push(f, 0), Outcome::Buffered);
        }
        assert_eq!(r.push(frags.last().unwrap(), 0), Outcome::Complete(&d[..]));
        let s = r.stats();
        assert_eq!(s.duplicates, (frags.len() - 1) as u64);
        assert_eq!(s.overlaps, 0);
    }

    #[test]
    fn overlap_discards_datagram_and_later_fragments() {
        let mut rng = Rng(11);
        let d = udp_datagram(77, [10, 0, 0, 1], 3000, &mut rng);
        let frags = fragment(&d, &mtu_sizes(&d, 1500)); // 1480 + 1480 + 20
        assert_eq!(frags.len(), 3);
        let data = &d[20..];
        // Same datagram, a fragment shifted by 8 bytes into the first one.
        let evil = {
            let mut f = frag(77, 1472, true, &data[1472..1480 + 1472]);
            f[12..16].copy_from_slice(&[10, 0, 0, 1]);
            fix_checksum(&mut f);
            f
        };
        let mut r = Reassembler::new(Config {
            timeout_ns: 1000,
            ..Config::default()
        });
        assert_eq!(r.push(&frags[0], 0), Outcome::Buffered);
        assert_eq!(r.push(&evil, 1), Outcome::Dropped(DropReason::Overlap));
        assert_eq!(r.buffered_bytes(), 0);
        // The rest of the original never resurrects it, even complete.
        for f in &frags {
            assert_eq!(r.push(f, 2), Outcome::Dropped(DropReason::Discarded));
        }
        let s = r.stats();
        assert_eq!((s.overlaps, s.discarded_fragments, s.completed), (1, 3, 0));
        assert_eq!(r.pending_datagrams(), 0);
        // Once the reassembly timer of the discarded datagram ran out, the
        // key is usable again.
        assert_eq!(r.expire(1000), 0, "tombstones are not timeouts");
        let done = push_all(&mut r, &frags, 1001);
        assert_eq!(done, vec![d]);
    }

    #[test]
    fn same_range_different_bytes_is_overlap() {
        let mut r = Reassembler::new(Config::default());
        assert_eq!(r.push(&frag(1, 0, true, &[1; 16]), 0), Outcome::Buffered);
        let mut other = [1u8; 16];
        other[15] = 2;
        assert_eq!(
            r.push(&frag(1, 0, true, &other), 0),
            Outcome::Dropped(DropReason::Overlap)
        );
        assert_eq!(
            r.push(&frag(1, 16, false, &[3; 5]), 0),
            Outcome::Dropped(DropReason::Discarded)
        );
        assert_eq!(r.stats().overlaps, 1);
    }

    #[test]
    fn overlap_shapes() {
        // Each case: fragments held, then the offending one, all identical
        // bytes (value = offset) so only the ranges differ.
        let body =
            |off: usize, len: usize| -> Vec<u8> { (off..off + len).map(|i| i as u8).collect() };
        type Frag = (usize, usize, bool);
        let cases: &[(&[Frag], Frag)] = &[
            // covers two held fragments exactly
            (&[(0, 16, true), (16, 16, true)], (0, 32, true)),
            // inside a held fragment
            (&[(0, 32, true)], (8, 8, true)),
            // straddles the start of a held fragment
            (&[(16, 16, true)], (8, 16, true)),
            // straddles the end of a held fragment
            (&[(0, 16, true)], (8, 16, true)),
            // same start, longer
            (&[(0, 16, true)], (0, 24, true)),
            // last fragment overlapping the tail of a held one
            (&[(0, 24, true)], (16, 20, false)),
            // held last fragment, new fragment over it
            (&[(16, 8, false)], (8, 16, true)),
        ];
        for (i, (held, bad)) in cases.iter().enumerate() {
            let mut r = Reassembler::new(Config::default());
            for &(off, len, mf) in held.iter() {
                assert_eq!(
                    r.push(&frag(5, off, mf, &body(off, len)), 0),
                    Outcome::Buffered,
                    "case {i}"
                );
            }
            let (off, len, mf) = *bad;
            let p = frag(5, off, mf, &body(off, len));
            let got = r.push(&p, 0);
            assert_eq!(got, Outcome::Dropped(DropReason::Overlap), "case {i}");
            assert_eq!(r.stats().overlaps, 1);
            assert_eq!(r.reserved_bytes() - r.buffered_bytes(), r.reserved_bytes());
        }
    }

    #[test]
    fn inconsistent_ends_discard() {
        // Two last fragments with different ends.
        let mut r = Reassembler::new(Config::default());
        assert_eq!(r.push(&frag(1, 8, false, &[0; 8]), 0), Outcome::Buffered);
        assert_eq!(
            r.push(&frag(1, 8, false, &[0; 9]), 0),
            Outcome::Dropped(DropReason::Inconsistent)
        );
        // A fragment past the end fixed by the last fragment.
        assert_eq!(r.push(&frag(2, 8, false, &[0; 8]), 0), Outcome::Buffered);
        assert_eq!(
            r.push(&frag(2, 16, true, &[0; 8]), 0),
            Outcome::Dropped(DropReason::Inconsistent)
        );
        // A last fragment ending before data already held.
        assert_eq!(r.push(&frag(3, 64, true, &[0; 8]), 0), Outcome::Buffered);
        assert_eq!(
            r.push(&frag(3, 8, false, &[0; 8]), 0),
            Outcome::Dropped(DropReason::Inconsistent)
        );
        assert_eq!(r.stats().inconsistent, 3);
        assert_eq!(r.pending_datagrams(), 0);
    }

    #[test]
    fn zero_length_last_fragment_marks_the_end() {
        let mut r = Reassembler::new(Config::default());
        let data: Vec<u8> = (0..16).collect();
        assert_eq!(r.push(&frag(4, 16, false, &[]), 0), Outcome::Buffered);
        assert_eq!(r.push(&frag(4, 16, false, &[]), 0), Outcome::Buffered); // duplicate
        assert_eq!(r.push(&frag(4, 8, true, &data[8..]), 0), Outcome::Buffered);
        let first = frag(4, 0, true, &data[..8]);
        let Outcome::Complete(d) = r.push(&first, 0) else {
            panic!()
        };
        assert_valid_header(d);
        assert_eq!(&d[20..], &data[..]);
        assert_eq!(r.stats().duplicates, 1);
    }

    #[test]
    fn options_of_first_fragment_are_kept() {
        let mut rng = Rng(5);
        let opts = [0x94, 4, 0, 0, 1, 1, 1, 0]; // router alert (copied) + NOPs
        let d = raw_datagram(8, [9, 9, 9, 9], 6, 2000, &opts, false, &mut rng);
        let frags = fragment(&d, &[1000, 1000]);
        assert_eq!(frags[0][0] & 0x0F, 7);
        assert_eq!(frags[1][0] & 0x0F, 5);
        let mut r = Reassembler::new(Config::default());
        assert_eq!(r.push(&frags[1], 0), Outcome::Buffered);
        let Outcome::Complete(out) = r.push(&frags[0], 0) else {
            panic!()
        };
        assert_eq!(out, &d[..]);
        assert_eq!(&out[20..28], &opts);
    }

    #[test]
    fn timeouts_with_controllable_clock() {
        let cfg = Config {
            timeout_ns: 30 * MS,
            ..Config::default()
        };
        let mut r = Reassembler::new(cfg);
        let data = [7u8; 32];
        assert_eq!(
            r.push(&frag(1, 0, true, &data[..16]), 100 * MS),
            Outcome::Buffered
        );
        assert_eq!(
            r.push(&frag(2, 0, true, &data[..16]), 110 * MS),
            Outcome::Buffered
        );
        // Later fragments do not extend the timer (RFC 1122: fixed value).
        assert_eq!(
            r.push(&frag(1, 16, true, &data[..8]), 120 * MS),
            Outcome::Buffered
        );
        assert_eq!(r.expire(130 * MS - 1), 0);
        assert_eq!(r.expire(130 * MS), 1);
        assert_eq!(r.pending_datagrams(), 1);
        // A clock going backwards is treated as the latest time seen.
        assert_eq!(r.expire(0), 0);
        assert_eq!(r.pending_datagrams(), 1);
        // Expiry on insertion: datagram 2 expires while its last fragment is
        // pushed, which then starts a new (incomplete) datagram.
        assert_eq!(
            r.push(&frag(2, 16, false, &data[16..]), 140 * MS),
            Outcome::Buffered
        );
        let s = r.stats();
        assert_eq!((s.timeouts, s.completed), (2, 0));
        assert_eq!(r.pending_datagrams(), 1);
        assert_eq!(r.expire(u64::MAX), 1);
        assert_eq!(r.stats().timeouts, 3);
        assert_eq!(r.buffered_bytes(), 0);
        // Just inside the deadline it completes.
        let mut r = Reassembler::new(cfg);
        assert_eq!(
            r.push(&frag(3, 0, true, &data[..16]), 1000 * MS),
            Outcome::Buffered
        );
        assert!(matches!(
            r.push(&frag(3, 16, false, &data[16..]), 1030 * MS - 1),
            Outcome::Complete(_)
        ));
    }

    #[test]
    fn timeout_near_u64_max_does_not_overflow() {
        let mut r = Reassembler::new(Config {
            timeout_ns: u64::MAX,
            ..Config::default()
        });
        assert_eq!(
            r.push(&frag(1, 0, true, &[0; 8]), u64::MAX - 1),
            Outcome::Buffered
        );
        assert_eq!(r.expire(u64::MAX - 1), 0);
        assert_eq!(r.expire(u64::MAX), 1);
    }

    #[test]
    fn memory_limit_evicts_oldest() {
        let mut rng = Rng(99);
        let budget = 12_000;
        let cfg = Config {
            max_buffered_bytes: budget,
            ..Config::default()
        };
        let mut r = Reassembler::new(cfg);
        // Five 4000-byte datagrams; send all but the last fragment of each.
        let ds: Vec<Vec<u8>> = (0..5)
            .map(|i| udp_datagram(i, [10, 1, 1, 1], 4000, &mut rng))
            .collect();
        let fs: Vec<Vec<Vec<u8>>> = ds
            .iter()
            .map(|d| fragment(d, &mtu_sizes(d, 1500)))
            .collect();
        for f in &fs {
            for p in &f[..f.len() - 1] {
                assert_eq!(r.push(p, 0), Outcome::Buffered);
                assert!(r.reserved_bytes() <= budget);
            }
        }
        let evicted = r.stats().evicted;
        assert!(evicted >= 2, "evicted {evicted}");
        assert_eq!(r.pending_datagrams() as u64, 5 - evicted);
        // The newest survive and complete; the oldest were lost.
        let last = fs[4].last().unwrap();
        assert_eq!(r.push(last, 0), Outcome::Complete(&ds[4][..]));
        let first = fs[0].last().unwrap();
        assert_eq!(
            r.push(first, 0),
            Outcome::Buffered,
            "datagram 0 starts over"
        );
        assert!(r.reserved_bytes() <= budget);
    }

    #[test]
    fn datagram_larger_than_budget_is_evicted() {
        let mut rng = Rng(1);
        let mut r = Reassembler::new(Config {
            max_buffered_bytes: 2000,
            ..Config::default()
        });
        let d = udp_datagram(1, [10, 1, 1, 1], 3000, &mut rng);
        let f = fragment(&d, &mtu_sizes(&d, 1500));
        assert_eq!(r.push(&f[0], 0), Outcome::Buffered);
        assert_eq!(r.push(&f[1], 0), Outcome::Dropped(DropReason::Evicted));
        assert_eq!(r.stats().evicted, 1);
        assert_eq!(r.pending_datagrams(), 0);
        assert!(r.reserved_bytes() <= 2000);
        // A zero budget never stores anything.
        let mut r = Reassembler::new(Config {
            max_buffered_bytes: 0,
            ..Config::default()
        });
        assert_eq!(r.push(&f[0], 0), Outcome::Dropped(DropReason::Evicted));
        assert_eq!(r.reserved_bytes(), 0);
    }

    #[test]
    fn idle_buffers_are_freed_before_evicting() {
        let mut rng = Rng(23);
        let budget = 24_000;
        let mut r = Reassembler::new(Config {
            max_buffered_bytes: budget,
            ..Config::default()
        });
        let a = udp_datagram(1, [10, 1, 1, 1], 9000, &mut rng);
        let b = udp_datagram(2, [10, 1, 1, 1], 9000, &mut rng);
        let (fa, fb) = (
            fragment(&a, &mtu_sizes(&a, 1500)),
            fragment(&b, &mtu_sizes(&b, 1500)),
        );
        let both: Vec<Vec<u8>> = fa
            .iter()
            .zip(&fb)
            .flat_map(|(x, y)| [x.clone(), y.clone()])
            .collect();
        assert_eq!(push_all(&mut r, &both, 0), vec![a, b]);
        r.expire(0);
        r.check_invariants();
        let idle = r.reserved_bytes();
        assert!(
            idle > 18_000 && r.buffered_bytes() == 0,
            "two idle buffers: {idle}"
        );
        // A 16000-byte datagram needs more than one idle buffer can give.
        let c = udp_datagram(3, [10, 1, 1, 1], 16_000, &mut rng);
        let fc = fragment(&c, &mtu_sizes(&c, 1500));
        assert_eq!(push_all(&mut r, &fc, 0), vec![c]);
        assert_eq!(r.stats().evicted, 0);
        assert!(r.reserved_bytes() <= budget);
        r.check_invariants();
    }

    #[test]
    fn max_datagrams_evicts_oldest() {
        let mut r = Reassembler::new(Config {
            max_datagrams: 2,
            ..Config::default()
        });
        for id in 0..3 {
            assert_eq!(
                r.push(&frag(id, 0, true, &[id as u8; 8]), id.into()),
                Outcome::Buffered
            );
        }
        assert_eq!(r.stats().evicted, 1);
        assert_eq!(r.pending_datagrams(), 2);
        assert_eq!(
            r.push(&frag(0, 8, false, &[0; 8]), 3),
            Outcome::Buffered,
            "0 was evicted"
        );
        assert!(matches!(
            r.push(&frag(2, 8, false, &[2; 8]), 3),
            Outcome::Complete(_)
        ));
        let mut r = Reassembler::new(Config {
            max_datagrams: 0,
            ..Config::default()
        });
        assert_eq!(
            r.push(&frag(0, 0, true, &[0; 8]), 0),
            Outcome::Dropped(DropReason::Evicted)
        );
    }

    #[test]
    fn buffers_are_reused() {
        let mut rng = Rng(17);
        let mut r = Reassembler::new(Config::default());
        let d = udp_datagram(1, [10, 1, 1, 1], 9000, &mut rng);
        let f = fragment(&d, &mtu_sizes(&d, 1500));
        assert_eq!(push_all(&mut r, &f, 0), vec![d.clone()]);
        let reserved = r.reserved_bytes();
        for id in 2..50 {
            let d = udp_datagram(id, [10, 1, 1, 1], 9000, &mut rng);
            let f = fragment(&d, &mtu_sizes(&d, 1500));
            assert_eq!(push_all(&mut r, &f, 0), vec![d]);
            assert_eq!(r.reserved_bytes(), reserved, "no new buffer");
        }
    }

    #[test]
    fn malformed_inputs_are_counted_drops() {
        let good = frag(1, 8, true, &[0; 16]);
        let mut cases: Vec<(Vec<u8>, Malformed)> = Vec::new();
        cases.push((Vec::new(), Malformed::Truncated));
        cases.push((good[..19].to_vec(), Malformed::Truncated));
        cases.push((vec![0x45], Malformed::Truncated));
        let mut v6 = good.clone();
        v6[0] = 0x60; // IPv6
        cases.push((v6, Malformed::NotIpv4));
        cases.push((vec![0x60, 0, 0, 0, 0, 8, 17, 64], Malformed::NotIpv4));
        let mut ihl4 = good.clone();
        ihl4[0] = 0x44;
        cases.push((ihl4, Malformed::BadIhl));
        let mut ihl15 = good.clone(); // 36 bytes < 60
        ihl15[0] = 0x4F;
        cases.push((ihl15, Malformed::Truncated));
        let mut long = good.clone();
        long[2..4].copy_from_slice(&37u16.to_be_bytes());
        fix_checksum(&mut long);
        cases.push((long, Malformed::TotalLengthExceedsBuffer));
        let mut short = good.clone();
        short[2..4].copy_from_slice(&19u16.to_be_bytes());
        fix_checksum(&mut short);
        cases.push((short, Malformed::TotalLengthBelowHeader));
        let mut bad_sum = good.clone();
        bad_sum[8] ^= 1; // TTL
        cases.push((bad_sum, Malformed::BadChecksum));
        cases.push((frag(1, 8, true, &[]), Malformed::EmptyFragment));
        cases.push((frag(1, 0, true, &[]), Malformed::EmptyFragment));
        cases.push((frag(1, 8, true, &[0; 12]), Malformed::UnalignedFragment));
        cases.push((frag(1, 0, true, &[0; 1]), Malformed::UnalignedFragment));

        let mut r = Reassembler::new(Config::default());
        for (i, (p, m)) in cases.iter().enumerate() {
            assert_eq!(
                r.push(p, 0),
                Outcome::Dropped(DropReason::Malformed(*m)),
                "case {i}"
            );
        }
        let s = r.stats();
        assert_eq!(s.malformed, cases.len() as u64);
        assert_eq!(s.packets, cases.len() as u64);
        assert_eq!(r.pending_datagrams(), 0);
        assert_eq!(r.reserved_bytes(), 0);
        // The untouched fragment is accepted.
        assert_eq!(r.push(&good, 0), Outcome::Buffered);
    }

    #[test]
    fn too_large_fragments() {
        let mut r = Reassembler::new(Config::default());
        // offset*8 + len > 65535.
        assert_eq!(
            r.push(&frag(1, 65528, true, &[0; 16]), 0),
            Outcome::Dropped(DropReason::TooLarge)
        );
        // Fits in 65535 counting data only, not with the 20-byte header.
        assert_eq!(
            r.push(&frag(2, 65512, false, &[0; 8]), 0),
            Outcome::Dropped(DropReason::TooLarge)
        );
        assert_eq!(
            r.push(&frag(3, 65504, false, &[0; 11]), 0),
            Outcome::Buffered
        ); // 20+65515
           // Ping of death: an existing datagram is discarded, and its later
           // fragments are refused.
        assert_eq!(r.push(&frag(4, 0, true, &[0; 1480]), 0), Outcome::Buffered);
        assert_eq!(
            r.push(&frag(4, 65000, false, &[0; 1000]), 0),
            Outcome::Dropped(DropReason::TooLarge)
        );
        assert_eq!(
            r.push(&frag(4, 1480, true, &[0; 8]), 0),
            Outcome::Dropped(DropReason::Discarded)
        );
        // Options in the first fragment push a datagram over the limit.
        let mut rng = Rng(2);
        let d = raw_datagram(5, [10, 0, 0, 1], 17, 16, &[1, 1, 1, 0], false, &mut rng);
        let mut first = fragment(&d, &[8, 8]).remove(0);
        assert_eq!(
            r.push(&frag(5, 65504, false, &[0; 11]), 0),
            Outcome::Buffered
        );
        first[12..20].copy_from_slice(&frag(5, 0, true, &[0; 8])[12..20]);
        first[9] = 17;
        fix_checksum(&mut first);
        assert_eq!(r.push(&first, 0), Outcome::Dropped(DropReason::TooLarge));
        assert_eq!(r.stats().too_large, 4);
        // A configured EMTU_R smaller than 65535.
        let mut r = Reassembler::new(Config {
            max_datagram: 1500,
            ..Config::default()
        });
        assert_eq!(
            r.push(&frag(1, 1480, false, &[0; 1]), 0),
            Outcome::Dropped(DropReason::TooLarge)
        );
        assert_eq!(r.push(&frag(2, 1472, false, &[0; 8]), 0), Outcome::Buffered);
        assert!(r.reserved_bytes() <= 1500 + 60 + 64);
    }

    #[test]
    fn non_fragments_bypass_unchanged() {
        let mut rng = Rng(8);
        let d = udp_datagram(3, [10, 0, 0, 3], 1000, &mut rng);
        let mut r = Reassembler::new(Config::default());
        assert_eq!(r.push(&d, 0), Outcome::Bypass(&d[..]));
        // Link-layer padding after total length is not part of the datagram.
        let mut padded = d.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(r.push(&padded, 0), Outcome::Bypass(&d[..]));
        // DF set, not a fragment: bypass too.
        let small = raw_datagram(4, [10, 0, 0, 3], 1, 10, &[], true, &mut rng);
        assert_eq!(r.push(&small, 0), Outcome::Bypass(&small[..]));
        let s = r.stats();
        assert_eq!((s.bypass, s.packets, s.fragments), (3, 3, 0));
        assert_eq!(r.reserved_bytes(), 0);
    }

    #[test]
    fn checksum_verification_can_be_disabled() {
        let mut p = frag(1, 0, true, &[1; 8]);
        p[10] ^= 0xFF;
        let mut r = Reassembler::new(Config::default());
        assert_eq!(
            r.push(&p, 0),
            Outcome::Dropped(DropReason::Malformed(Malformed::BadChecksum))
        );
        let mut r = Reassembler::new(Config {
            verify_checksum: false,
            ..Config::default()
        });
        assert_eq!(r.push(&p, 0), Outcome::Buffered);
        let last = frag(1, 8, false, &[2; 8]);
        let Outcome::Complete(d) = r.push(&last, 0) else {
            panic!()
        };
        assert_valid_header(d); // the output checksum is recomputed
    }

    /// Structured noise: IPv4 packets of a few keys whose fields are mostly
    /// plausible (so fragments collide, duplicate, overlap, complete) and
    /// sometimes broken (IHL, version, total length, checksum, alignment,
    /// huge offsets), plus raw random bytes.
    fn noise_packet() -> impl Strategy<Value = Vec<u8>> {
        let b0 = prop_oneof![
            8 => Just(0x45u8),
            1 => Just(0x46u8),
            1 => prop::sample::select(vec![0x4Fu8, 0x44, 0x65, 0x47, 0x40]),
        ];
        let offset = prop_oneof![6 => 0u16..6, 1 => 0u16..0x2000];
        let structured = (
            (0u16..3, offset, 0usize..4, any::<bool>()),
            (b0, 0u8..8, 0u8..8, any::<u64>()),
        )
            .prop_map(
                |((id, off, blocks, mf), (b0, lenmode, contentmode, seed))| {
                    let hlen = usize::from(b0 & 0x0F) * 4;
                    let mut len = blocks * 8;
                    if seed % 11 == 0 {
                        len += (seed as usize >> 8) % 8;
                    }
                    let mut p = vec![0u8; hlen.max(20) + len];
                    p[0] = b0;
                    let total = match lenmode {
                        0 => (seed as usize) % 70_000,
                        1 => p.len().saturating_sub((seed as usize >> 16) % 8),
                        2 => p.len() + 1,
                        _ => p.len(),
                    } as u16;
                    p[2..4].copy_from_slice(&total.to_be_bytes());
                    p[4..6].copy_from_slice(&id.to_be_bytes());
                    let fo = if mf { 0x2000 } else { 0 } | off;
                    p[6..8].copy_from_slice(&fo.to_be_bytes());
                    p[9] = 17;
                    p[12..20].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
                    let data_start = hlen.max(20);
                    for (i, b) in p[data_start..].iter_mut().enumerate() {
                        // Mostly a function of the absolute position, so that
                        // re-sent ranges are exact duplicates.
                        *b = match contentmode {
                            0 => (seed >> 24) as u8 ^ i as u8,
                            _ => (usize::from(off) * 8 + i) as u8,
                        };
                    }
                    if seed % 13 != 0 && p.len() >= hlen && hlen >= 20 {
                        fix_checksum(&mut p);
                    }
                    p
                },
            );
        prop_oneof![
            8 => structured,
            1 => prop::collection::vec(any::<u8>(), 0..80),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn garbage_never_panics_and_respects_bounds(
            packets in prop::collection::vec((noise_packet(), 0u64..50), 1..120),
            budget in prop_oneof![1 => 0usize..300, 3 => 300usize..20_000],
            max_datagrams in 0usize..5,
            timeout_ns in 1u64..2000,
            max_datagram in prop::sample::select(vec![0usize, 68, 576, 1500, 65535, 1 << 20]),
        ) {
            let cfg = Config { max_datagram, max_datagrams, max_buffered_bytes: budget, timeout_ns, verify_checksum: true };
            let mut r = Reassembler::new(cfg);
            let mut now = 0;
            for (p, dt) in &packets {
                now += dt;
                match r.push(p, now) {
                    Outcome::Complete(d) => {
                        prop_assert!(d.len() <= max_datagram.min(65535));
                        assert_valid_header(d);
                    }
                    Outcome::Bypass(d) => prop_assert_eq!(d, &p[..d.len()]),
                    Outcome::Buffered | Outcome::Dropped(_) => {}
                }
                prop_assert!(r.reserved_bytes() <= budget);
                prop_assert!(r.buffered_bytes() <= r.reserved_bytes());
                r.check_invariants();
                prop_assert!(r.pending_datagrams() <= max_datagrams);
            }
            r.expire(u64::MAX);
            prop_assert_eq!(r.pending_datagrams(), 0);
            prop_assert_eq!(r.buffered_bytes(), 0);
            prop_assert_eq!(r.stats().packets, packets.len() as u64);
        }

        #[test]
        fn random_fragmentation_roundtrip(seed in any::<u64>(), data_len in 1usize..65000) {
            let mut rng = Rng(seed | 1);
            let d = raw_datagram(seed as u16, [10, 9, 8, 7], 17, data_len, &[], false, &mut rng);
            let mut frags = fragment(&d, &random_sizes(data_len, &mut rng));
            let n = frags.len();
            for _ in 0..rng.below(n + 1) {
                let k = rng.below(n);
                frags.push(frags[k].clone());
            }
            rng.shuffle(&mut frags);
            let mut r = Reassembler::new(big());
            let mut done = Vec::new();
            for f in &frags {
                match r.push(f, 0) {
                    Outcome::Complete(out) => done.push(out.to_vec()),
                    Outcome::Bypass(out) => done.push(out.to_vec()),
                    Outcome::Buffered => {}
                    Outcome::Dropped(reason) => prop_assert!(false, "dropped {:?}", reason),
                }
            }
            // A lone fragment is the whole datagram (bypass, once per copy);
            // duplicates after completion may complete it again.
            prop_assert!(!done.is_empty());
            for out in &done {
                prop_assert_eq!(out, &d);
            }
        }
    }
}
