//! The embedded switch (paper §2.3): vPorts joined by match-action tables. A frame a vPort sends
//! walks the FDB pipeline (eSwitch tables, programmed by the manager function) to a destination
//! vPort; a frame arriving at a host vPort walks that vPort's NIC receive pipeline to an RQ or an
//! RSS group. Tables hold prioritised entries with a mask and value over [`FlowMatch`]; a miss
//! follows the table's miss action. Go-to-table only jumps to a strictly higher level, so a walk
//! always ends. Entries may police with a meter and VXLAN-decapsulate or -encapsulate (RFC 7348).
//! A [`FlowCache`] of exact keys sits in front of the tables: a walk seen before replays the
//! entries it matched (their counters, meters and flow tags, per packet) without matching again.
//! In front of both, [`Eswitch::direct_route`] steers in one step the frames no rule can tell
//! apart — host vPort to host vPort by the default forwarding, into a catch-all that counts,
//! tags and delivers — with the same counters and outcome as the walks.
//! Left out: egress (NIC transmit) tables, header rewrite, VLAN push/pop.

use super::rss::Toeplitz;
use fld_abi::nic::{self as abi, action, FlowMatch, FLOW_MATCH_LEN, VPORT_UPLINK};
use fld_abi::wire::{
    ethernet, ethertype, ipv4, vxlan, EthIpv4UdpRepr, EthernetRepr, Ipv4Packet, Ipv4Repr,
    UdpPacket, UdpRepr, VxlanHeader, VxlanRepr,
};
use zerocopy::IntoBytes;

/// Packet key as eight machine words, so matching is eight masked compares.
/// A match key: the [`FlowMatch`] layout as machine words, compared word by word.
pub type Key = [u64; KEY_WORDS];
pub const KEY_WORDS: usize = FLOW_MATCH_LEN / 8;

pub fn key_of(m: &FlowMatch) -> Key {
    let mut k = [0u64; KEY_WORDS];
    for (i, chunk) in m.as_bytes().chunks_exact(8).enumerate() {
        k[i] = u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    }
    k
}

/// Where a walk gets the frame's match key: only when an entry with a non-empty mask, or the
/// flow cache, needs it (a walk that meets only match-all entries never builds the key).
pub trait KeySource {
    fn key(&self) -> &Key;
}

impl KeySource for Key {
    fn key(&self) -> &Key {
        self
    }
}

/// Where a table lookup sends a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Vport(u16),
    /// FDB default for broadcast/multicast: every vPort but the source.
    Flood,
    Rq(u32),
    Rss(u32),
    /// Dropped by a rule or a drop miss.
    Drop,
    /// No rule and no default: counted as unsteered.
    NoSteering,
    /// Strip the VXLAN encapsulation and continue steering at this table with the inner frame.
    DecapGoto(u32),
    /// Prepend the outer headers of an encapsulation, then deliver to the vPort.
    EncapVport {
        vport: u16,
        encap: u32,
    },
}

/// A VXLAN tunnel's outer headers (RFC 7348 §5), built once at creation; lengths, the IPv4
/// checksum and the UDP source port are filled per packet.
#[derive(Clone)]
pub struct VxlanEncap {
    pub owner: u16,
    pub header: [u8; abi::VXLAN_ENCAP_LEN],
    /// Entries that use the encapsulation.
    pub refs: u32,
    pub packets: u64,
}

impl VxlanEncap {
    pub fn new(owner: u16, i: &abi::CreateVxlanEncapIn) -> Self {
        let mut header = [0u8; abi::VXLAN_ENCAP_LEN];
        let stack = EthIpv4UdpRepr {
            eth: EthernetRepr {
                src_addr: i.src_mac,
                dst_addr: i.dst_mac,
                ethertype: ethertype::IPV4,
            },
            ip: Ipv4Repr {
                src_addr: i.src_ip,
                dst_addr: i.dst_ip,
                hop_limit: if i.ttl == 0 { 64 } else { i.ttl },
                // The tunnel must not fragment (RFC 7348 §4.3).
                dont_frag: true,
                ..Ipv4Repr::default()
            },
            udp: UdpRepr {
                src_port: 0,
                dst_port: match i.udp_dst_port.get() {
                    0 => vxlan::UDP_PORT,
                    p => p,
                },
            },
        };
        stack.emit(&mut header, false);
        VxlanRepr { vni: i.vni.get() }.emit(&mut VxlanHeader::new_unchecked(
            &mut header[EthIpv4UdpRepr::HEADER_LEN..],
        ));
        VxlanEncap {
            owner,
            header,
            refs: 0,
            packets: 0,
        }
    }

    /// Writes the outer headers for `inner` into `out` followed by `inner`, with the lengths,
    /// the IPv4 header checksum and a UDP source port picked by `flow_hash` (RFC 7348 §5).
    pub fn encapsulate(&self, inner: &[u8], flow_hash: u32, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.header);
        out.extend_from_slice(inner);
        let ip_len = (out.len() - ethernet::HEADER_LEN).min(0xffff) as u16;
        let mut ip = Ipv4Packet::new_unchecked(&mut out[ethernet::HEADER_LEN..]);
        ip.set_total_len(ip_len);
        ip.fill_checksum();
        let mut udp = UdpPacket::new_unchecked(ip.payload_mut());
        udp.set_src_port(0xc000 | (flow_hash ^ (flow_hash >> 16)) as u16 & 0x3fff);
        udp.set_len(ip_len.saturating_sub(ipv4::HEADER_LEN as u16));
    }
}

/// The outcome of a pipeline walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steering {
    pub fate: Fate,
    pub flow_tag: u32,
}

/// A token-bucket policer.
#[derive(Clone)]
pub struct Meter {
    pub owner: u16,
    pub rate_bytes_per_s: u64,
    pub burst_bytes: u32,
    tokens: f64,
    last_ns: u64,
    pub passed: (u64, u64),
    pub dropped: (u64, u64),
    /// Entries that use the meter.
    pub refs: u32,
}

impl Meter {
    pub fn new(owner: u16, rate_bytes_per_s: u64, burst_bytes: u32, now_ns: u64) -> Self {
        Meter {
            owner,
            rate_bytes_per_s,
            burst_bytes,
            tokens: burst_bytes as f64,
            last_ns: now_ns,
            passed: (0, 0),
            dropped: (0, 0),
            refs: 0,
        }
    }

    /// Refills for the time since the last packet, then takes `len` bytes if they are there.
    fn admit(&mut self, len: usize, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + dt as f64 * self.rate_bytes_per_s as f64 / 1e9)
            .min(self.burst_bytes as f64);
        if self.tokens >= len as f64 {
            self.tokens -= len as f64;
            self.passed = (self.passed.0 + 1, self.passed.1 + len as u64);
            true
        } else {
            self.dropped = (self.dropped.0 + 1, self.dropped.1 + len as u64);
            false
        }
    }
}

#[derive(Clone)]
pub struct FlowEntry {
    pub id: u32,
    pub meter: u32,
    pub encap: u32,
    pub priority: u16,
    mask: Key,
    value: Key,
    /// The mask is empty: every frame matches, without its key.
    match_all: bool,
    pub actions: u32,
    pub vport: u16,
    pub dest: u32,
    pub flow_tag: u32,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    Default,
    Drop,
    Goto(u32),
}

#[derive(Clone)]
pub struct FlowTable {
    pub owner: u16,
    pub kind: u8,
    pub level: u8,
    pub miss: Miss,
    /// Sorted by (priority, id).
    pub entries: Vec<FlowEntry>,
    /// Tables whose miss points here, plus entries that go to it.
    pub refs: u32,
}

#[derive(Clone)]
pub struct RssGroup {
    pub owner: u16,
    pub hash_fields: u8,
    pub toeplitz: Toeplitz,
    pub indirection: Vec<u32>,
}

impl RssGroup {
    /// RQ for a hash: the indirection table is a power of two long.
    pub fn rq_for(&self, hash: u32) -> u32 {
        self.indirection[hash as usize & (self.indirection.len() - 1)]
    }
}

#[derive(Default, Clone, Copy, Debug)]
pub struct VportCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_steering_drops: u64,
    pub rx_no_steering: u64,
    pub rx_out_of_buffer: u64,
    pub tx_malformed: u64,
}

#[derive(Clone)]
pub struct Vport {
    pub number: u16,
    pub mac: [u8; 6],
    pub rx_root: Option<u32>,
    pub counters: VportCounters,
}

/// Longest pipeline walk: one table per level (go-to-table only moves to higher levels).
const MAX_HOPS: usize = abi::MAX_FLOW_LEVEL as usize + 1;

/// Slots of the flow cache (direct-mapped by key hash).
const FLOW_CACHE_SLOTS: usize = 2048;
/// Rules in the whole eSwitch from which the flow cache is used: matching fewer costs less than
/// hashing and comparing an 80-byte key (measured: with one receive rule per vPort the cache
/// added ~120 instructions per packet crossing).
const FLOW_CACHE_MIN_RULES: usize = 8;
/// Longest walk the flow cache remembers; longer walks are matched every time.
const TRACE_HOPS: usize = 8;
/// A trace step that took the table's miss action.
const MISSED: u32 = u32::MAX;

/// The tables a walk visited and the entry it matched in each (or [`MISSED`]).
#[derive(Clone, Copy, Default, zerocopy::FromZeros)]
struct Trace {
    hops: u8,
    steps: [(u32, u32); TRACE_HOPS],
}

impl Trace {
    fn push(&mut self, table: u32, entry: u32) -> bool {
        let Some(s) = self.steps.get_mut(self.hops as usize) else {
            return false;
        };
        *s = (table, entry);
        self.hops += 1;
        true
    }
}

#[derive(Clone, Copy, Default, zerocopy::FromZeros)]
struct CacheSlot {
    /// The cache generation the slot was filled in; any other is an empty slot.
    generation: u64,
    root: u32,
    key: Key,
    trace: Trace,
}

/// An exact-match cache in front of the match-action tables (the exact-match stage flow
/// engines put before their wildcard tables): key = the frame's whole match key and the table
/// its walk starts at; value = the entries the walk matched. Which entry matches a key depends
/// only on the rules, so any command invalidates the whole cache (a generation bump); what an
/// entry does per packet (count, police, tag) is done again on every hit, so rule counters and
/// meters stay exact. A walk a meter cut short is not remembered.
pub struct FlowCache {
    slots: Box<[CacheSlot]>,
    generation: u64,
    /// Used at all: the eSwitch holds at least `min_rules` rules.
    active: bool,
    min_rules: usize,
    pub counters: super::CacheCounters,
}

impl FlowCache {
    pub(super) fn new() -> Self {
        FlowCache {
            // Zeroed pages from the allocator (an empty slot is all zeros): a NIC built or
            // reset pays for the slots it fills, not for all of them.
            slots: <[CacheSlot] as zerocopy::FromZeros>::new_box_zeroed_with_elems(
                FLOW_CACHE_SLOTS,
            )
            .expect("flow cache memory"),
            generation: 1,
            active: false,
            min_rules: FLOW_CACHE_MIN_RULES,
            counters: Default::default(),
        }
    }

    /// A cache with no slots (every lookup misses), to stand in while a reset moves the real
    /// one: it allocates nothing.
    pub(super) fn empty() -> Self {
        FlowCache {
            slots: Vec::new().into_boxed_slice(),
            generation: 1,
            active: false,
            min_rules: FLOW_CACHE_MIN_RULES,
            counters: Default::default(),
        }
    }

    /// Whether a slot holds a walk that would still match.
    pub(super) fn holds_walks(&self) -> bool {
        self.slots.iter().any(|s| s.generation == self.generation)
    }

    /// A cache without slots that holds this one's use and counts (a snapshot's, taken while
    /// it holds no walk).
    fn settings(&self) -> FlowCache {
        FlowCache {
            active: self.active,
            min_rules: self.min_rules,
            counters: self.counters,
            ..FlowCache::empty()
        }
    }

    /// Holds no walk, and `settings`' use and counts: the cache a snapshot taken while it held
    /// no walk stands for, keeping these slots.
    pub(super) fn restore_settings(&mut self, settings: &FlowCache) {
        self.invalidate();
        self.active = settings.active;
        self.min_rules = settings.min_rules;
        self.counters = settings.counters;
    }

    /// Forgets every walk (rules changed).
    fn invalidate(&mut self) {
        self.generation += 1;
    }

    /// The cache as a new NIC has it — empty, unused, its counters zero — keeping its slots:
    /// the generation moves on, so no slot filled before matches again, and a reset costs
    /// nothing per slot.
    pub(super) fn reset(&mut self) {
        self.restore_settings(&FlowCache::empty());
    }

    fn slot_of(root: u32, key: &Key) -> usize {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut h = u64::from(root).wrapping_mul(K);
        for w in key {
            h = (h.rotate_left(23) ^ w).wrapping_mul(K);
        }
        (h >> 40) as usize & (FLOW_CACHE_SLOTS - 1)
    }

    fn lookup(&mut self, slot: usize, root: u32, key: &Key) -> Option<Trace> {
        let s = self.slots.get(slot)?;
        if s.generation == self.generation && s.root == root && s.key == *key {
            self.counters.hits += 1;
            Some(s.trace)
        } else {
            self.counters.misses += 1;
            None
        }
    }

    fn fill(&mut self, slot: usize, root: u32, key: &Key, trace: Trace) {
        if let Some(s) = self.slots.get_mut(slot) {
            if s.generation == self.generation {
                self.counters.evictions += 1;
            }
            *s = CacheSlot {
                generation: self.generation,
                root,
                key: *key,
                trace,
            };
        }
    }
}

pub struct Eswitch {
    pub vports: Vec<Vport>,
    pub uplink: Vport,
    pub tables: Vec<Option<FlowTable>>,
    pub rss_groups: Vec<Option<RssGroup>>,
    pub meters: Vec<Option<Meter>>,
    pub encaps: Vec<Option<VxlanEncap>>,
    pub fdb_root: Option<u32>,
    pub flow_cache: FlowCache,
    /// Frames steered by [`Eswitch::direct_route`] rather than by walking the tables.
    pub direct_routed: u64,
    next_entry_id: u32,
}

impl Eswitch {
    /// A copy whose flow cache has no slots, only the cache's use and counts (a snapshot's:
    /// copying 2,048 slots to say that none holds a walk would cost more than the rest).
    pub(super) fn clone_without_cache_slots(&self) -> Eswitch {
        Eswitch {
            vports: self.vports.clone(),
            uplink: self.uplink.clone(),
            tables: self.tables.clone(),
            rss_groups: self.rss_groups.clone(),
            meters: self.meters.clone(),
            encaps: self.encaps.clone(),
            fdb_root: self.fdb_root,
            flow_cache: self.flow_cache.settings(),
            direct_routed: self.direct_routed,
            next_entry_id: self.next_entry_id,
        }
    }

    /// The eSwitch of card `card` with `host_vports` host vPorts.
    pub fn new(card: u16, host_vports: u16) -> Self {
        Self::with_flow_cache(card, host_vports, FlowCache::new())
    }

    /// As [`Eswitch::new`], with `flow_cache` (empty: new or [`FlowCache::reset`]) in front of
    /// its tables.
    pub(super) fn with_flow_cache(card: u16, host_vports: u16, flow_cache: FlowCache) -> Self {
        Eswitch {
            vports: (0..host_vports)
                .map(|n| Vport {
                    number: n,
                    mac: abi::vport_mac(card, n),
                    rx_root: None,
                    counters: Default::default(),
                })
                .collect(),
            uplink: Vport {
                number: VPORT_UPLINK,
                mac: [0; 6],
                rx_root: None,
                counters: Default::default(),
            },
            tables: Vec::new(),
            rss_groups: Vec::new(),
            meters: Vec::new(),
            encaps: Vec::new(),
            fdb_root: None,
            flow_cache,
            direct_routed: 0,
            next_entry_id: 1,
        }
    }

    pub fn vport_mut(&mut self, n: u16) -> Option<&mut Vport> {
        if n == VPORT_UPLINK {
            Some(&mut self.uplink)
        } else {
            self.vports.get_mut(n as usize)
        }
    }

    pub fn vport(&self, n: u16) -> Option<&Vport> {
        if n == VPORT_UPLINK {
            Some(&self.uplink)
        } else {
            self.vports.get(n as usize)
        }
    }

    pub fn table(&self, id: u32) -> Option<&FlowTable> {
        self.tables.get(id as usize)?.as_ref()
    }

    pub fn table_mut(&mut self, id: u32) -> Option<&mut FlowTable> {
        self.tables.get_mut(id as usize)?.as_mut()
    }

    /// Rules, tables or roots may have changed: the flow cache forgets every walk, and is used
    /// from now on only if enough rules exist for it to pay.
    pub fn rules_changed(&mut self) {
        self.flow_cache.invalidate();
        let rules: usize = self.tables.iter().flatten().map(|t| t.entries.len()).sum();
        self.flow_cache.active = rules >= self.flow_cache.min_rules;
    }

    pub fn alloc_entry_id(&mut self) -> u32 {
        let id = self.next_entry_id;
        self.next_entry_id = self.next_entry_id.wrapping_add(1).max(1);
        id
    }

    /// Adds an already validated entry, keeping priority order (ties in creation order).
    pub fn insert_entry(&mut self, table: u32, e: FlowEntryInit) -> Option<u32> {
        let id = self.alloc_entry_id();
        let t = self.table_mut(table)?;
        let mut mask = key_of(&e.mask);
        let mut value = key_of(&e.value);
        for (v, m) in value.iter_mut().zip(mask.iter_mut()) {
            *v &= *m;
        }
        if mask.iter().all(|m| *m == 0) {
            mask = [0; KEY_WORDS];
        }
        let at = t.entries.partition_point(|x| x.priority <= e.priority);
        t.entries.insert(
            at,
            FlowEntry {
                id,
                meter: e.meter,
                encap: e.encap,
                priority: e.priority,
                match_all: mask.iter().all(|m| *m == 0),
                mask,
                value,
                actions: e.actions,
                vport: e.vport,
                dest: e.dest,
                flow_tag: e.flow_tag,
                packets: 0,
                bytes: 0,
            },
        );
        self.rules_changed();
        Some(id)
    }

    /// Finds an entry by ID: (table, index).
    pub fn find_entry(&self, id: u32) -> Option<(u32, usize)> {
        self.tables.iter().enumerate().find_map(|(t, tab)| {
            let tab = tab.as_ref()?;
            tab.entries
                .iter()
                .position(|e| e.id == id)
                .map(|i| (t as u32, i))
        })
    }

    /// Walks the FDB pipeline for a frame entering from `src_vport`, from the root or, for a
    /// frame an accelerator returns, from the table `start` it names.
    pub fn steer_fdb(
        &mut self,
        start: Option<u32>,
        key: &(impl KeySource + ?Sized),
        dst_mac: &[u8; 6],
        src_vport: u16,
        len: usize,
        now_ns: u64,
    ) -> Steering {
        let walked = match start.or(self.fdb_root) {
            Some(root) => self.walk(root, key, len, now_ns),
            None => Walked::Default(0),
        };
        match walked {
            Walked::Fate(s) => s,
            Walked::Default(flow_tag) => Steering {
                fate: self.l2_forward(dst_mac, src_vport),
                flow_tag,
            },
        }
    }

    /// Steers in one step a frame of `len` bytes host vPort `src_vport` sends to `dst_mac`, when
    /// no rule can make its steering depend on more than that: no FDB root (the default L2
    /// forwarding, here to another host vPort), no flow cache in use, and a receive root whose
    /// first entry matches every frame and only counts, tags and forwards to an RQ or an RSS
    /// group. Such a frame's two walks end at that entry, whatever its key and length, so this
    /// does what they would: the sender's transmit counters, the entry's counters and flow
    /// tag, its forwarding. Returns the destination vPort and the steering; `None`, with
    /// nothing done, for any other frame.
    #[inline]
    pub fn direct_route(
        &mut self,
        src_vport: u16,
        dst_mac: &[u8; 6],
        len: usize,
    ) -> Option<(u16, Steering)> {
        const DIRECT: u32 = action::COUNT | action::SET_FLOW_TAG | action::FWD_RQ | action::FWD_RSS;
        if self.fdb_root.is_some() || self.flow_cache.active {
            return None;
        }
        let v = self.vports.iter().find(|v| &v.mac == dst_mac)?;
        let (vport, root) = (v.number, v.rx_root?);
        let e = self
            .tables
            .get_mut(root as usize)?
            .as_mut()?
            .entries
            .first_mut()?;
        let forwards = e.actions & (action::FWD_RQ | action::FWD_RSS) != 0;
        if vport == src_vport || !e.match_all || !forwards || e.actions & !DIRECT != 0 {
            return None;
        }
        if e.actions & action::COUNT != 0 {
            e.packets += 1;
            e.bytes += len as u64;
        }
        let flow_tag = if e.actions & action::SET_FLOW_TAG != 0 {
            e.flow_tag
        } else {
            0
        };
        let fate = if e.actions & action::FWD_RQ != 0 {
            Fate::Rq(e.dest)
        } else {
            Fate::Rss(e.dest)
        };
        if let Some(v) = self.vports.get_mut(src_vport as usize) {
            v.counters.tx_packets += 1;
            v.counters.tx_bytes += len as u64;
        }
        self.direct_routed += 1;
        Some((vport, Steering { fate, flow_tag }))
    }

    /// Default FDB behaviour: learn nothing, forward by the vPorts' own MAC addresses.
    fn l2_forward(&self, dst_mac: &[u8; 6], src_vport: u16) -> Fate {
        if dst_mac[0] & 1 != 0 {
            return Fate::Flood;
        }
        match self.vports.iter().find(|v| &v.mac == dst_mac) {
            Some(v) if v.number == src_vport => Fate::Drop,
            Some(v) => Fate::Vport(v.number),
            None if src_vport == VPORT_UPLINK => Fate::Drop,
            None => Fate::Vport(VPORT_UPLINK),
        }
    }

    /// Walks vPort `vport`'s receive pipeline.
    /// Walks vPort `vport`'s receive pipeline from its root, or from `start` for a returned frame.
    pub fn steer_rx(
        &mut self,
        vport: u16,
        start: Option<u32>,
        key: &(impl KeySource + ?Sized),
        len: usize,
        flow_tag: u32,
        now_ns: u64,
    ) -> Steering {
        let Some(root) = start.or_else(|| self.vport(vport).and_then(|v| v.rx_root)) else {
            return Steering {
                fate: Fate::NoSteering,
                flow_tag,
            };
        };
        match self.walk(root, key, len, now_ns) {
            Walked::Fate(mut s) => {
                if s.flow_tag == 0 {
                    s.flow_tag = flow_tag;
                }
                s
            }
            Walked::Default(t) => Steering {
                fate: Fate::NoSteering,
                flow_tag: if t != 0 { t } else { flow_tag },
            },
        }
    }

    /// Walks the tables from `root`: through the flow cache, or matching and then remembering
    /// the walk.
    fn walk(
        &mut self,
        root: u32,
        source: &(impl KeySource + ?Sized),
        len: usize,
        now_ns: u64,
    ) -> Walked {
        if !self.flow_cache.active {
            return self.walk_tables(root, source, len, now_ns, None, None).0;
        }
        let key = source.key();
        let slot = FlowCache::slot_of(root, key);
        let cached = self.flow_cache.lookup(slot, root, key);
        let mut trace = Trace::default();
        let (walked, complete) =
            self.walk_tables(root, key, len, now_ns, cached.as_ref(), Some(&mut trace));
        if cached.is_none() && complete {
            self.flow_cache.fill(slot, root, key, trace);
        }
        walked
    }

    /// The pipeline walk proper. With `replay`, each table's entry is the one the trace names
    /// instead of the first match; otherwise the entries matched are recorded in `record`, if
    /// given.
    /// Returns the outcome and whether the walk ran to its end within a trace's length (a
    /// meter's drop or a longer walk is not remembered).
    #[inline(always)]
    fn walk_tables(
        &mut self,
        root: u32,
        key: &(impl KeySource + ?Sized),
        len: usize,
        now_ns: u64,
        replay: Option<&Trace>,
        mut record: Option<&mut Trace>,
    ) -> (Walked, bool) {
        let walked = |w| (w, false);
        let mut table = root;
        let mut flow_tag = 0;
        let mut recorded = true;
        for hop in 0..MAX_HOPS {
            let Some(t) = self.tables.get_mut(table as usize).and_then(|t| t.as_mut()) else {
                return walked(Walked::Fate(Steering {
                    fate: Fate::Drop,
                    flow_tag,
                }));
            };
            let index = match replay.and_then(|r| r.steps[..r.hops as usize].get(hop)) {
                Some(&(_, i)) => i,
                None => {
                    let i = t
                        .entries
                        .iter()
                        .position(|e| {
                            e.match_all || {
                                let k = key.key();
                                (0..KEY_WORDS).all(|w| k[w] & e.mask[w] == e.value[w])
                            }
                        })
                        .map_or(MISSED, |i| i as u32);
                    if let Some(r) = record.as_deref_mut() {
                        recorded &= r.push(table, i);
                    }
                    i
                }
            };
            let ended = |w| (w, recorded);
            let Some(e) = t.entries.get_mut(index as usize) else {
                match t.miss {
                    Miss::Default => return ended(Walked::Default(flow_tag)),
                    Miss::Drop => {
                        return ended(Walked::Fate(Steering {
                            fate: Fate::Drop,
                            flow_tag,
                        }))
                    }
                    Miss::Goto(next) => {
                        table = next;
                        continue;
                    }
                }
            };
            if e.actions & action::COUNT != 0 {
                e.packets += 1;
                e.bytes += len as u64;
            }
            if e.actions & action::METER != 0 {
                let admitted = self
                    .meters
                    .get_mut(e.meter as usize)
                    .and_then(|m| m.as_mut())
                    .is_some_and(|m| m.admit(len, now_ns));
                if !admitted {
                    return walked(Walked::Fate(Steering {
                        fate: Fate::Drop,
                        flow_tag,
                    }));
                }
            }
            if e.actions & action::SET_FLOW_TAG != 0 {
                flow_tag = e.flow_tag;
            }
            let a = e.actions;
            if a & action::VXLAN_DECAP != 0 {
                return ended(Walked::Fate(Steering {
                    fate: Fate::DecapGoto(e.dest),
                    flow_tag,
                }));
            }
            let fate = if a & action::FWD_VPORT != 0 && a & action::VXLAN_ENCAP != 0 {
                Fate::EncapVport {
                    vport: e.vport,
                    encap: e.encap,
                }
            } else if a & action::FWD_VPORT != 0 {
                Fate::Vport(e.vport)
            } else if a & action::FWD_RQ != 0 {
                Fate::Rq(e.dest)
            } else if a & action::FWD_RSS != 0 {
                Fate::Rss(e.dest)
            } else if a & action::DROP != 0 {
                Fate::Drop
            } else if a & action::GOTO_TABLE != 0 {
                table = e.dest;
                continue;
            } else {
                return ended(Walked::Default(flow_tag));
            };
            return ended(Walked::Fate(Steering { fate, flow_tag }));
        }
        walked(Walked::Fate(Steering {
            fate: Fate::Drop,
            flow_tag,
        }))
    }
}

enum Walked {
    Fate(Steering),
    /// Fell through to the pipeline's default with this flow tag.
    Default(u32),
}

/// A validated entry about to be inserted.
pub struct FlowEntryInit {
    pub priority: u16,
    pub mask: FlowMatch,
    pub value: FlowMatch,
    pub actions: u32,
    pub vport: u16,
    pub dest: u32,
    pub flow_tag: u32,
    pub meter: u32,
    pub encap: u32,
}

/// Builds the match key of a parsed frame.
pub fn frame_key(
    frame: &[u8],
    p: &super::packet::ParsedFrame,
    src_vport: u16,
    metadata: u32,
) -> Key {
    use super::packet::L3Kind;
    let mut m = FlowMatch {
        dst_mac: p.dst_mac,
        src_mac: p.src_mac,
        ethertype: p.ethertype.to_be_bytes(),
        ip_version: match p.l3 {
            L3Kind::Ipv4 => 4,
            L3Kind::Ipv6 => 6,
            L3Kind::None => 0,
        },
        ip_proto: p.ip_proto,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        src_port: p.src_port.to_be_bytes(),
        dst_port: p.dst_port.to_be_bytes(),
        src_vport: src_vport.to_le_bytes(),
        vlan_id: p.vlan_tci.map_or(0, |t| t & 0x0fff).to_be_bytes(),
        metadata: metadata.to_le_bytes(),
        vni: [0; 3],
        ip_frag: u8::from(p.ipv4_fragment),
        dst_qpn: [0; 3],
        hdr_err: p.hdr_err,
        rsvd: [0; 12],
    };
    if p.l3 == L3Kind::None {
        m.ip_proto = 0;
    }
    if let Some((vni, _)) = super::packet::vxlan(frame, p) {
        m.vni.copy_from_slice(&vni.to_be_bytes()[1..]);
    }
    if let Some(qpn) = super::packet::roce_dest_qp(frame, p) {
        m.dst_qpn.copy_from_slice(&qpn.to_be_bytes()[1..]);
    }
    key_of(&m)
}

const _: () = assert!(FLOW_MATCH_LEN.is_multiple_of(8) && abi::NO_TABLE == u32::MAX);

#[cfg(test)]
mod tests {
    use super::*;
    use fld_abi::nic::TABLE_KIND_NIC_RX;
    use proptest::prelude::*;

    /// A match on the low bits of the destination port (the only field these rules look at).
    fn port_match(mask: u16, value: u16) -> (FlowMatch, FlowMatch) {
        let (mut m, mut v) = (FlowMatch::default(), FlowMatch::default());
        m.dst_port = mask.to_be_bytes();
        v.dst_port = value.to_be_bytes();
        (m, v)
    }

    fn key_for(port: u16) -> Key {
        key_of(&FlowMatch {
            dst_port: port.to_be_bytes(),
            ..Default::default()
        })
    }

    /// vPort 0's receive pipeline: table 0 (level 0, misses go to table 1) and table 1 (level
    /// 1, misses drop), their rules drawn from `rules` as (table, mask, value, fate), and meter
    /// 0 admitting 4 KiB per microsecond with a 1 KiB burst.
    fn pipeline(rules: &[(u8, u16, u16, u8)]) -> Eswitch {
        let mut es = Eswitch::new(0, 1);
        es.flow_cache.min_rules = 0;
        for (level, miss) in [(0, Miss::Goto(1)), (1, Miss::Drop)] {
            es.tables.push(Some(FlowTable {
                owner: 0,
                kind: TABLE_KIND_NIC_RX,
                level,
                miss,
                entries: Vec::new(),
                refs: 0,
            }));
        }
        es.vports[0].rx_root = Some(0);
        es.meters.push(Some(Meter::new(0, 4_000_000_000, 1024, 0)));
        for (i, &(table, mask, value, fate)) in rules.iter().enumerate() {
            let (mask, value) = port_match(mask, value);
            let (table, fate) = (u32::from(table % 2), fate % 4);
            let actions = action::COUNT
                | match fate {
                    0 => action::FWD_RQ | action::SET_FLOW_TAG,
                    1 => action::DROP,
                    2 if table == 0 => action::GOTO_TABLE,
                    _ => action::FWD_RQ | action::METER,
                };
            let init = FlowEntryInit {
                priority: (i % 3) as u16,
                mask,
                value,
                actions,
                vport: 0,
                dest: if actions & action::GOTO_TABLE != 0 {
                    1
                } else {
                    i as u32
                },
                flow_tag: 100 + i as u32,
                meter: 0,
                encap: 0,
            };
            es.insert_entry(table, init);
        }
        es
    }

    /// Every rule's counters and the meter's, for comparing two pipelines.
    fn counters(es: &Eswitch) -> Vec<(u64, u64)> {
        let rules = es.tables.iter().flatten().flat_map(|t| &t.entries);
        let meter = es.meters[0].as_ref().map(|m| [m.passed, m.dropped]);
        rules
            .map(|e| (e.packets, e.bytes))
            .chain(meter.into_iter().flatten())
            .collect()
    }

    proptest! {
        /// The cached pipeline steers every packet as matching from scratch does, with the
        /// same rule and meter counters, and a rule added later (a command invalidates the
        /// cache) takes effect at once.
        #[test]
        fn the_flow_cache_changes_no_outcome_and_no_counter(
            rules in proptest::collection::vec((0u8..2, 0u16..16, 0u16..16, 0u8..4), 0..12),
            late in (0u8..2, 0u16..16, 0u16..16, 0u8..4),
            packets in proptest::collection::vec((0u16..16, 60usize..1500, 0u64..2000), 1..200),
        ) {
            let (mut cached, mut reference) = (pipeline(&rules), pipeline(&rules));
            for (n, &(port, len, gap)) in packets.iter().enumerate() {
                if n == packets.len() / 2 {
                    let mut with_late = rules.clone();
                    with_late.push(late);
                    // Rebuild both with the late rule, keeping the counters' history apart.
                    let (c, r) = (counters(&cached), counters(&reference));
                    prop_assert_eq!(c, r);
                    cached = pipeline(&with_late);
                    reference = pipeline(&with_late);
                }
                let now = n as u64 * 1000 + gap;
                reference.rules_changed();
                let want = reference.steer_rx(0, None, &key_for(port), len, 7, now);
                let got = cached.steer_rx(0, None, &key_for(port), len, 7, now);
                prop_assert_eq!(got, want);
            }
            prop_assert_eq!(counters(&cached), counters(&reference));
        }
    }

    #[test]
    fn a_repeated_key_hits_and_a_rule_change_misses() {
        // Table 0's one rule (priority 1) sends port 3 to RQ 1.
        let mut es = pipeline(&[(1, 0, 0, 0), (0, 0xf, 3, 0)]);
        let k = key_for(3);
        for _ in 0..5 {
            es.steer_rx(0, None, &k, 64, 0, 0);
        }
        assert_eq!(
            (es.flow_cache.counters.hits, es.flow_cache.counters.misses),
            (4, 1)
        );
        let rule = &es.tables[0].as_ref().expect("table 0").entries[0];
        assert_eq!((rule.packets, rule.bytes), (5, 5 * 64));
        // A new, higher-priority rule for the same key: the cache must not hide it.
        let (mask, value) = port_match(0xf, 3);
        es.insert_entry(
            0,
            FlowEntryInit {
                priority: 0,
                mask,
                value,
                actions: action::DROP,
                vport: 0,
                dest: 0,
                flow_tag: 0,
                meter: 0,
                encap: 0,
            },
        );
        assert_eq!(es.steer_rx(0, None, &k, 64, 0, 0).fate, Fate::Drop);
        assert_eq!(es.flow_cache.counters.misses, 2);
    }
}
