//! The RDMA objects of the soft NIC (`docs/nic-interface.md` §15): protection domains, memory
//! regions ([`memory`]), queue pairs and their state machine ([`qp`]), shared receive queues and
//! each function's RoCE address (GID) table. The commands that manage them are in
//! `nic/cmd/rdma.rs`; the transport that moves their data — requester, responder, RoCEv2 on the
//! wire — is the datapath's `roce` block.
//!
//! Partitions (IBA §10.9): each function has a P_Key table ([`PKEY_TABLE_ENTRIES`] entries,
//! entry 0 = 0xFFFF after reset); a QP sends with the P_Key its P_Key index names and takes only
//! packets whose P_Key matches that entry (`fld_abi::nic::pkey_matches`).
//!
//! Left out: unreliable and XRC transports (so Q_Keys), memory windows, alternate paths and
//! automatic path migration, P_Key violation traps to a subnet manager (RoCE has none),
//! congestion control (DCQCN; ECN bits are carried, not acted on).

pub mod cache;
pub(crate) mod memory;
pub(crate) mod qp;
pub mod reorder;
pub(crate) mod staging;
pub(crate) mod star;

use fld_abi::nic::{mkey, PKEY_TABLE_ENTRIES, ROCE_ADDRESS_ENTRIES};

use crate::nic::queues::{Owned, Referenced, Slab};
use memory::{MemoryRegion, ProtectionDomain};
use qp::{QpRing, QueuePair};

/// A shared receive queue (IBA §10.2.9): one ring of receive WQEs that the QPs naming it consume
/// in arrival order.
#[derive(Clone)]
pub(crate) struct SharedRq {
    pub owner: u16,
    pub pd: u32,
    pub ring: QpRing,
    /// WQEs consumed.
    pub counter: u32,
    /// The armed limit (0: not armed) and the EQ its event goes to.
    pub limit: u32,
    pub limit_eqn: u32,
    /// QPs attached.
    pub refs: u32,
}

impl Owned for SharedRq {
    fn owner(&self) -> u16 {
        self.owner
    }
}
impl Referenced for SharedRq {
    fn refs_mut(&mut self) -> &mut u32 {
        &mut self.refs
    }
}

/// One entry of a function's GID table: where its RoCE packets come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GidEntry {
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

/// The receive path's drop counters and totals of one function.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RoceCounters {
    pub rx_packets: u64,
    pub rx_icrc_errors: u64,
    pub rx_unknown_qp: u64,
    pub rx_malformed: u64,
    pub rx_qp_not_ready: u64,
    pub tx_packets: u64,
    pub rx_wrong_source: u64,
    pub rx_bad_pkey: u64,
    pub star_served: u64,
    pub star_refused: u64,
    pub star_dma_errors: u64,
    pub star_tx_blocked: u64,
    pub rx_out_of_order: u64,
}

/// A function's stateless (StaR) server settings (`docs/nic-interface.md` §16): function-wide,
/// never per connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StarServer {
    /// Answer RDPs, GDs and CQEPs addressed to the function.
    pub serving: bool,
    /// Where EAs for the function's WQEPs go.
    pub control_cqn: Option<u32>,
}

/// A function's P_Key table at power-on and after a reset: the default partition, full
/// membership, at index 0; every other entry invalid.
pub(crate) const DEFAULT_PKEYS: [u16; PKEY_TABLE_ENTRIES as usize] = {
    let mut t = [0u16; PKEY_TABLE_ENTRIES as usize];
    t[0] = fld_abi::wire::roce::DEFAULT_PKEY;
    t
};

/// Every RDMA object of the NIC, and the transport's reusable buffers.
#[derive(Clone)]
pub(crate) struct Rdma {
    pub pds: Slab<ProtectionDomain>,
    /// Region `i` has key `mkey(i + 1, variant)`.
    pub mrs: Slab<MemoryRegion>,
    /// QP `i` is number `QPN_BASE + i`.
    pub qps: Slab<QueuePair>,
    pub srqs: Slab<SharedRq>,
    pub gids: Vec<[Option<GidEntry>; ROCE_ADDRESS_ENTRIES as usize]>,
    /// Each function's P_Key table.
    pub pkeys: Vec<[u16; PKEY_TABLE_ENTRIES as usize]>,
    pub counters: Vec<RoceCounters>,
    /// Each function's StaR server settings.
    pub star: Vec<StarServer>,
    /// Each function's StaR egress security module (§16.5).
    pub guards: Vec<crate::nic::star_guard::StarGuard>,
    /// StaR servers' regions their clients hold: (function, PD, server key) → region index.
    pub peers: std::collections::HashMap<(u16, u32, u32), u32>,
    /// QPs not in RESET: the ones the engine may have work for.
    pub active: Vec<u32>,
    /// The engine's ready list: the QPs its next pass visits — rung by a doorbell, sent a
    /// packet, due a timer, or with work left from the last pass — so a pass costs the QPs
    /// with news, not every connection. `queued[i]`: QP `i` is on it.
    pub ready: Vec<u32>,
    pub queued: Vec<bool>,
    /// The QPs a pass visits (the ready list taken), kept for its allocation.
    pub visiting: Vec<u32>,
    /// Transport timers (local ACK, RNR wait, StaR's ACK timer): (deadline ns, QP), earliest
    /// first. An entry holds only while it is its QP's `timer_at`; others are stale and
    /// dropped when they come up.
    pub timers: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32)>>,
    /// The next pass visits every active QP: a command ran (any may change what a QP can do),
    /// or a function's doorbells are in memory the host maps (its stores are not seen).
    pub visit_all: bool,
    /// The reorder unit out-of-order packets go through (LEFT §3); none: go-back-N.
    pub reorder: Option<reorder::ReorderUnit>,
    /// The variant byte of the next key (so a reused region index gets a new key).
    pub key_variant: u8,
    /// IPv4 identification of the next RoCE packet.
    pub ip_ident: u16,
    /// Frame assembly and WQE fetch buffers (no allocation per packet).
    pub frame: Vec<u8>,
    /// The StaR server's answers (their own buffer: a request from a client QP of this NIC
    /// arrives while that QP's frame is being sent).
    pub reply_frame: Vec<u8>,
    pub wqe: Vec<u8>,
    /// `(QP index, WQE counter, basic blocks)` of the send WQE `wqe` holds: the WQE a QP is
    /// executing stays on chip while its packets go out, as an RNIC keeps it in the QP's send
    /// context, instead of being fetched again for every packet.
    pub wqe_held: Option<(u32, u32, u32)>,
    /// On-chip queue-pair contexts, by slab index.
    pub qp_cache: cache::LruCache<u32, ()>,
    /// On-chip memory translations: the page base address an MTT entry holds, keyed by the
    /// function and the entry's bus address.
    pub mtt_cache: memory::SharedMttCache,
    /// Bytes of one QP context, read from the context memory on a QP-cache miss.
    pub qp_context_bytes: u64,
}

/// The transport's frame and WQE buffers: what they hold never outlives a packet, but for the
/// WQE a requester holds between passes (`Rdma::wqe_held`, which a reset forgets), so a reset
/// of the card hands them to the fresh transport instead of allocating them again.
pub(crate) struct RdmaScratch {
    pub frame: Vec<u8>,
    pub reply_frame: Vec<u8>,
    pub wqe: Vec<u8>,
    /// The QP-context and translation caches, empty: an emptied cache is a new one, and
    /// keeping it keeps its table and slots allocated (thousands of entries).
    pub qp_cache: cache::LruCache<u32, ()>,
    pub mtt_cache: memory::MttCache,
}

impl RdmaScratch {
    /// Buffers for frames of up to `max_frame` bytes, and caches of `qp_cache` and
    /// `mtt_cache` entries.
    pub fn new(max_frame: usize, (qp_cache, mtt_cache): (usize, usize)) -> Self {
        RdmaScratch {
            frame: vec![0; max_frame],
            reply_frame: vec![0; max_frame],
            wqe: vec![0; fld_abi::nic::MAX_WQE_BYTES],
            qp_cache: cache::LruCache::new(qp_cache),
            mtt_cache: cache::LruCache::new(mtt_cache),
        }
    }
}

/// What [`Rdma::snapshot`] keeps.
#[derive(Clone)]
pub(crate) struct RdmaSnapshot {
    /// Without frame buffers, its caches empty and of no capacity.
    state: Rdma,
    qp_cache: cache::LruContents<u32, ()>,
    mtt_cache: cache::LruContents<(u16, u64), u64>,
}

/// Limits of the RDMA objects.
pub(crate) const MAX_PDS: u32 = 4096;
pub(crate) const MAX_MRS: u32 = 65536;
pub(crate) const MAX_SRQS: u32 = 1024;

impl Rdma {
    pub fn new(
        functions: usize,
        max_qps: u32,
        scratch: RdmaScratch,
        qp_context_bytes: u32,
        reorder: Option<reorder::ReorderUnit>,
    ) -> Self {
        Rdma {
            pds: Slab::new(MAX_PDS),
            mrs: Slab::new(MAX_MRS),
            qps: Slab::new(max_qps),
            srqs: Slab::new(MAX_SRQS),
            gids: vec![[None; ROCE_ADDRESS_ENTRIES as usize]; functions],
            pkeys: vec![DEFAULT_PKEYS; functions],
            counters: vec![RoceCounters::default(); functions],
            star: vec![StarServer::default(); functions],
            guards: vec![Default::default(); functions],
            peers: Default::default(),
            active: Vec::new(),
            ready: Vec::new(),
            queued: Vec::new(),
            visiting: Vec::new(),
            timers: Default::default(),
            visit_all: false,
            reorder,
            key_variant: 0,
            ip_ident: 0,
            frame: scratch.frame,
            reply_frame: scratch.reply_frame,
            wqe: scratch.wqe,
            wqe_held: None,
            qp_cache: scratch.qp_cache,
            mtt_cache: std::cell::RefCell::new(scratch.mtt_cache),
            qp_context_bytes: u64::from(qp_context_bytes),
        }
    }

    /// The scratch buffers and the caches, emptied, for the transport a reset replaces this
    /// one with.
    pub fn take_scratch(&mut self) -> RdmaScratch {
        let mut qp_cache = std::mem::replace(&mut self.qp_cache, cache::LruCache::new(0));
        let mut mtt_cache = std::mem::replace(self.mtt_cache.get_mut(), cache::LruCache::new(0));
        qp_cache.clear();
        mtt_cache.clear();
        RdmaScratch {
            frame: std::mem::take(&mut self.frame),
            reply_frame: std::mem::take(&mut self.reply_frame),
            wqe: std::mem::take(&mut self.wqe),
            qp_cache,
            mtt_cache,
        }
    }

    /// The transport's state as it is, to return to ([`Rdma::restore`]): the frame buffers
    /// left out, and of the caches what they hold rather than their tables.
    pub fn snapshot(&self) -> RdmaSnapshot {
        RdmaSnapshot {
            qp_cache: self.qp_cache.contents(),
            mtt_cache: self.mtt_cache.borrow().contents(),
            state: Rdma {
                frame: Vec::new(),
                reply_frame: Vec::new(),
                // The WQE buffer's bytes outlive a pass while `wqe_held` names them.
                wqe: match self.wqe_held {
                    Some(_) => self.wqe.clone(),
                    None => Vec::new(),
                },
                qp_cache: cache::LruCache::new(0),
                mtt_cache: std::cell::RefCell::new(cache::LruCache::new(0)),
                ..self.clone()
            },
        }
    }

    /// Returns to `s`, keeping this transport's frame buffers and caches' tables.
    pub fn restore(&mut self, s: &RdmaSnapshot) {
        let RdmaScratch {
            frame,
            reply_frame,
            mut wqe,
            mut qp_cache,
            mut mtt_cache,
        } = self.take_scratch();
        qp_cache.restore(&s.qp_cache);
        mtt_cache.restore(&s.mtt_cache);
        if !s.state.wqe.is_empty() {
            wqe.copy_from_slice(&s.state.wqe);
        }
        *self = Rdma {
            frame,
            reply_frame,
            wqe,
            qp_cache,
            mtt_cache: std::cell::RefCell::new(mtt_cache),
            ..s.state.clone()
        };
    }

    /// The key of region `index`, with a fresh variant byte. The variant is never 0, so no key
    /// equals the receive WQE's end marker ([`fld_abi::nic::RECV_SGE_END`] = `mkey(1, 0)`).
    pub fn next_key(&mut self, index: u32) -> u32 {
        self.key_variant = self.key_variant.checked_add(1).unwrap_or(1);
        mkey(index + 1, self.key_variant)
    }

    /// The index of the StaR server region with `peer_key` that `function` holds in `pd`.
    pub fn peer_region(&self, function: u16, pd: u32, peer_key: u32) -> Option<u32> {
        self.peers.get(&(function, pd, peer_key)).copied()
    }

    /// The GID entry `index` of `function`, if set.
    pub fn gid(&self, function: u16, index: u8) -> Option<GidEntry> {
        *self.gids.get(function as usize)?.get(index as usize)?
    }

    /// The P_Key a QP of `function` with P_Key index `index` uses (0: the invalid P_Key).
    pub fn pkey(&self, function: u16, index: u16) -> u16 {
        self.pkeys
            .get(function as usize)
            .and_then(|t| t.get(index as usize))
            .copied()
            .unwrap_or(0)
    }

    /// Whether `dst` (an IPv6 address, or IPv4 in its first four bytes when `ipv4`) is one of
    /// `function`'s RoCE addresses.
    pub fn owns_address(&self, function: u16, dst: &[u8; 16], ipv4: bool) -> bool {
        let Some(table) = self.gids.get(function as usize) else {
            return false;
        };
        table.iter().flatten().any(|e| {
            if ipv4 {
                fld_abi::wire::roce::gid_is_ipv4(&e.gid) && e.gid[12..] == dst[..4]
            } else {
                e.gid == *dst
            }
        })
    }

    /// QP number of slab index `i`.
    pub const fn qpn(i: u32) -> u32 {
        fld_abi::nic::QPN_BASE + i
    }

    /// Slab index of QP number `qpn`.
    pub fn qp_index(qpn: u32) -> Option<u32> {
        qpn.checked_sub(fld_abi::nic::QPN_BASE)
    }

    /// Puts QP `i` on the ready list: the engine's next pass visits it.
    #[inline]
    pub fn wake(&mut self, i: u32) {
        let at = i as usize;
        if at >= self.queued.len() {
            self.queued.resize(at + 1, false);
        }
        if !self.queued[at] {
            self.queued[at] = true;
            self.ready.push(i);
        }
    }

    /// Arms QP `i`'s timer for `deadline` unless one at or before it is armed: a timer that
    /// fires early only makes the QP visited, and the visit arms the real deadline again.
    pub fn arm_timer(&mut self, i: u32, deadline: Option<u64>) {
        let Some(t) = deadline else {
            return;
        };
        let Some(qp) = self.qps.get_mut(i) else {
            return;
        };
        if qp.timer_at.is_none_or(|armed| t < armed) {
            qp.timer_at = Some(t);
            self.timers.push(std::cmp::Reverse((t, i)));
        }
    }

    /// Wakes every QP whose timer is due at `now`.
    pub fn fire_timers(&mut self, now: u64) {
        while let Some(&std::cmp::Reverse((t, i))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let due = self.qps.get_mut(i).filter(|q| q.timer_at == Some(t));
            if let Some(qp) = due {
                qp.timer_at = None;
                self.wake(i);
            }
        }
    }

    /// The earliest armed timer (possibly one that will only wake its QP to re-arm), or the
    /// reorder unit's gather timeout.
    pub fn next_timer(&self) -> Option<u64> {
        let gather = self
            .reorder
            .as_ref()
            .and_then(|u| u.gather.as_ref())
            .and_then(|g| g.next_deadline());
        [self.timers.peek().map(|r| r.0 .0), gather]
            .into_iter()
            .flatten()
            .min()
    }

    /// Makes QP `i` visited by the engine (or not) after a state change.
    pub fn set_active(&mut self, i: u32, active: bool) {
        if active {
            self.wake(i);
        }
        let at = self.active.iter().position(|q| *q == i);
        match (at, active) {
            (None, true) => self.active.push(i),
            (Some(p), false) => {
                self.active.swap_remove(p);
            }
            _ => {}
        }
    }

    /// Everything `function` created goes (function-level reset).
    pub fn destroy_function_objects(&mut self, function: u16) {
        self.wqe_held = None;
        self.qps.remove_owned_by(function);
        let qps = &self.qps;
        self.active.retain(|i| qps.get(*i).is_some());
        self.qp_cache.invalidate(|i| qps.get(*i).is_none());
        if let Some(r) = self.reorder.as_mut() {
            r.forget_unless(|i| qps.get(i).is_some());
        }
        self.srqs.remove_owned_by(function);
        self.mrs.remove_owned_by(function);
        self.peers.retain(|(f, _, _), _| *f != function);
        memory::invalidate(self.mtt_cache.get_mut(), function, None);
        self.pds.remove_owned_by(function);
        if let Some(t) = self.gids.get_mut(function as usize) {
            *t = [None; ROCE_ADDRESS_ENTRIES as usize];
        }
        if let Some(t) = self.pkeys.get_mut(function as usize) {
            *t = DEFAULT_PKEYS;
        }
        if let Some(c) = self.counters.get_mut(function as usize) {
            *c = RoceCounters::default();
        }
        if let Some(s) = self.star.get_mut(function as usize) {
            *s = StarServer::default();
        }
        // The module forgets its entries and blocks StaR again (it fails closed).
        if let Some(g) = self.guards.get_mut(function as usize) {
            *g = Default::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WQE the requester holds between passes is in the snapshot: a restore brings its bytes
    /// back into the kept buffer, whatever the buffer held since; with none held, the buffer is
    /// left as it is (nothing reads it before the next fetch).
    #[test]
    fn a_held_wqe_comes_back_with_its_snapshot() {
        let mut rdma = Rdma::new(2, 4, RdmaScratch::new(2048, (8, 8)), 0, None);
        rdma.wqe
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        let held = rdma.wqe.clone();
        rdma.wqe_held = Some((1, 7, 2));
        let snapshot = rdma.snapshot();
        rdma.wqe.fill(0xee);
        rdma.wqe_held = None;
        rdma.restore(&snapshot);
        assert_eq!((rdma.wqe_held, &rdma.wqe), (Some((1, 7, 2)), &held));

        rdma.wqe_held = None;
        let snapshot = rdma.snapshot();
        rdma.wqe.fill(0x11);
        rdma.restore(&snapshot);
        assert_eq!((rdma.wqe_held, rdma.wqe[0]), (None, 0x11));
    }
}
