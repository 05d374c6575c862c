//! FLD's Tx module (paper §5.2, Figure 3): the accelerator's packet goes into one shared on-chip
//! Tx buffer through a data translation table (per-queue virtual windows, chunk granularity);
//! an 8-byte compressed descriptor goes into a shared pool indexed by a 4-bank cuckoo hash
//! table keyed by (queue, ring slot). When the NIC reads the Tx-ring window, FLD expands the
//! descriptor into the 64-byte WQE; when it reads the Tx-data window, the translation table
//! serves the bytes. Completions the NIC writes into the Tx CQ window free descriptors and chunks
//! and return per-queue credits (§5.5).
//!
//! FLD-R queues (§5.3) are NIC queue pairs: the same ring and buffer, but the generated WQE is
//! an RDMA one (SEND, WRITE, with or without immediate) whose data segment names the message
//! in the Tx-data window with the reserved lkey; the NIC's transport segments it at the path
//! MTU and completes it only when the peer acknowledged it, so the buffer lives until the ACK.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::cuckoo::{self, CuckooTable, RingKey};
use super::Stats;
use crate::accel::{Credits, RdmaOp, TxBurst, TxMeta, TxRefused, TxStream};
use fld_abi::fld::*;
use fld_abi::nic;

/// Per Tx queue state: the ring manager of Figure 3.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TxQueue {
    /// NIC SQ number, or the QPN of an FLD-R queue.
    pub sqn: u32,
    pub enabled: bool,
    /// An FLD-R queue pair.
    pub rdma: bool,
    /// An error completion disabled the queue (until the control plane binds it again).
    pub error: bool,
    /// WQE basic blocks posted (each FLD WQE is one).
    pub pi: u32,
    /// Posted WQEs whose completion has arrived.
    pub ci: u32,
    /// Virtual chunk counters of the queue's Tx-data window.
    vhead: u32,
    vtail: u32,
    /// WQEs posted since the last one that asked for a completion.
    since_signal: u32,
    pub doorbell_due: bool,
    /// `pi` when the NIC's doorbell was last written: a doorbell that covers one WQE sends
    /// the WQE with it (WQE by MMIO).
    pub rung: u32,
}

/// The Tx module: descriptor pool, both translation tables, the shared buffer, the queues and
/// the completions the NIC wrote.
pub(super) struct TxEngine {
    pub pool: Vec<CompressedDesc>,
    pub pool_free: Vec<u32>,
    pub ring_xlt: CuckooTable,
    pub data_xlt: CuckooTable,
    pub buffer: Vec<u8>,
    /// One past the highest chunk handed out since power-on: the part of `buffer` a reset
    /// zeroes (the rest is still as power-on left it).
    pub chunks_touched: u32,
    pub chunks_free: Vec<u32>,
    pub queues: Vec<TxQueue>,
    /// Queues whose NIC doorbell is due, in the order they became due (each once: its
    /// `doorbell_due` flag), so ringing them does not scan every queue.
    pub doorbells_due: Vec<u16>,
    /// Every Nth WQE of a queue requests a completion (selective signalling).
    pub signal_every: u32,
    /// Compressed completions waiting for the engine (15 bytes each).
    pub cqes: VecDeque<CompressedCqe>,
    /// CQEs consumed, reported to the NIC as the CQ consumer counter.
    pub cq_ci: u32,
    /// FLD-R: the queue bound to each QPN (low 16 bits, as CQEs carry it).
    pub qp_queues: FxHashMap<u16, u16>,
}

impl TxQueue {
    /// The virtual head and tail of the queue's Tx-data window, for tests that start a queue
    /// far along its count.
    #[cfg(test)]
    pub(super) fn window_counters(&mut self) -> (&mut u32, &mut u32) {
        (&mut self.vhead, &mut self.vtail)
    }

    /// A queue freshly bound to NIC queue `sqn`: a new NIC ring starts at 0.
    pub fn bound(sqn: u32, enabled: bool, rdma: bool) -> Self {
        TxQueue {
            sqn,
            enabled,
            rdma,
            ..Default::default()
        }
    }
}

/// What a quiescent Tx engine holds beyond its power-on state: the queues the control plane
/// bound, what is due to the NIC, and the counters ([`TxEngine::settings`]).
#[derive(Clone)]
pub(super) struct TxSettings {
    queues: Vec<TxQueue>,
    doorbells_due: Vec<u16>,
    signal_every: u32,
    cq_ci: u32,
    qp_queues: FxHashMap<u16, u16>,
}

impl TxEngine {
    /// The settings, while no packet is anywhere in the engine and none has been since the
    /// last reset: every descriptor and chunk free in its power-on order, both translation
    /// tables empty with nothing counted, no completion waiting. Every field is named, so one
    /// added to the engine must be placed here.
    pub fn settings(&self, geo: &FldGeometry) -> Option<TxSettings> {
        let TxEngine {
            pool: _,
            pool_free,
            ring_xlt,
            data_xlt,
            buffer: _,
            chunks_touched,
            chunks_free,
            queues,
            doorbells_due,
            signal_every,
            cqes,
            cq_ci,
            qp_queues,
        } = self;
        let untouched = |t: &CuckooTable| t.is_empty() && t.stats() == Default::default();
        let quiet = pool_free.len() == geo.desc_pool.saturating_sub(1) as usize
            && untouched(ring_xlt)
            && untouched(data_xlt)
            && *chunks_touched == 0
            && chunks_free.len() == geo.tx_chunks as usize
            && cqes.is_empty();
        quiet.then(|| TxSettings {
            queues: queues.clone(),
            doorbells_due: doorbells_due.clone(),
            signal_every: *signal_every,
            cq_ci: *cq_ci,
            qp_queues: qp_queues.clone(),
        })
    }

    /// Takes `s` (on an engine at power-on, or emptied).
    pub fn apply(&mut self, s: &TxSettings) {
        self.queues.clone_from(&s.queues);
        self.doorbells_due.clone_from(&s.doorbells_due);
        self.signal_every = s.signal_every;
        self.cq_ci = s.cq_ci;
        self.qp_queues.clone_from(&s.qp_queues);
    }

    pub fn new(geo: &FldGeometry) -> Self {
        Self::with_tables(
            geo,
            CuckooTable::new(geo.desc_pool, 0x5eed_0001),
            CuckooTable::new(geo.tx_chunks, 0x5eed_0002),
            vec![0; geo.tx_chunks as usize * geo.tx_chunk as usize],
        )
    }

    /// This engine as a reset leaves it: the tables emptied, the buffer zeroed where chunks were
    /// handed out (most of it, in a short run, never was), the allocations kept.
    pub fn emptied(&mut self, geo: &FldGeometry) -> Self {
        let mut buffer = std::mem::take(&mut self.buffer);
        let touched = (self.chunks_touched as usize * geo.tx_chunk as usize).min(buffer.len());
        buffer[..touched].fill(0);
        Self::with_tables(
            geo,
            self.ring_xlt.emptied(),
            self.data_xlt.emptied(),
            buffer,
        )
    }

    /// The engine at power-on around translation tables of the sizes and seeds [`Self::new`]
    /// gives them and a zeroed buffer of `geo`'s size (an earlier engine's, emptied: a reset).
    fn with_tables(
        geo: &FldGeometry,
        ring_xlt: CuckooTable,
        data_xlt: CuckooTable,
        buffer: Vec<u8>,
    ) -> Self {
        debug_assert_eq!(buffer.len(), geo.tx_chunks as usize * geo.tx_chunk as usize);
        TxEngine {
            pool: vec![CompressedDesc::default(); geo.desc_pool as usize],
            // The all-ones slot number marks an empty bucket of the ring translation table
            // (so an entry needs no valid bit, §5.2's 31 bits): it is never handed out.
            pool_free: (0..geo.desc_pool.saturating_sub(1)).rev().collect(),
            ring_xlt,
            data_xlt,
            buffer,
            chunks_touched: 0,
            chunks_free: (0..geo.tx_chunks).rev().collect(),
            queues: vec![TxQueue::default(); geo.tx_queues as usize],
            doorbells_due: Vec::with_capacity(geo.tx_queues as usize),
            signal_every: 32,
            cqes: VecDeque::with_capacity(1 << geo.log_tx_cq),
            cq_ci: 0,
            qp_queues: FxHashMap::default(),
        }
    }

    /// Contiguous free virtual chunks of queue `q` (a packet never wraps its window).
    fn window_room(geo: &FldGeometry, q: &TxQueue) -> u32 {
        let w = geo.window_chunks();
        let free = w - 1 - q.vhead.wrapping_sub(q.vtail);
        let to_end = w - q.vhead % w;
        if to_end >= free {
            free
        } else {
            to_end.max(free - to_end)
        }
    }

    /// Per-queue credits (§5.5): packets = min(ring room, free pool slots), bytes = whole free
    /// chunks the queue's window can take contiguously; none while a translation stash is full.
    pub fn credits(&self, geo: &FldGeometry, queue: u16) -> Credits {
        let Some(q) = self.queues.get(queue as usize).filter(|q| q.enabled) else {
            return Credits::default();
        };
        if self.ring_xlt.stash_len() >= cuckoo::STASH_ENTRIES
            || self.data_xlt.stash_len() >= cuckoo::STASH_ENTRIES
        {
            return Credits::default();
        }
        let ring_free = (1u32 << geo.log_tx_ring) - q.pi.wrapping_sub(q.ci);
        let packets = ring_free.min(self.pool_free.len() as u32);
        let chunks = (self.chunks_free.len() as u32).min(Self::window_room(geo, q));
        Credits {
            packets,
            bytes: if packets == 0 {
                0
            } else {
                chunks * geo.chunk_bytes()
            },
        }
    }

    /// The NIC reads the Tx-ring window at `offset`: FLD builds each 64-byte WQE from its
    /// compressed descriptor. `bar2` is FLD's NIC-facing BAR's bus address.
    pub fn read_ring(
        &self,
        geo: &FldGeometry,
        stats: &mut Stats,
        bar2: u64,
        offset: u64,
        data: &mut [u8],
    ) {
        let ring_bytes = geo.tx_ring_bytes();
        let mut done = 0usize;
        while done < data.len() {
            let o = offset + done as u64;
            let (q, in_ring) = ((o / ring_bytes) as usize, o % ring_bytes);
            let slot = (in_ring / nic::WQEBB as u64) as u16;
            let at = (in_ring % nic::WQEBB as u64) as usize;
            let n = (nic::WQEBB - at).min(data.len() - done);
            let part = &mut data[done..done + n];
            // A whole WQE (a fetch's usual read) is generated where the read wants it.
            let generated = match <&mut [u8; nic::WQEBB]>::try_from(&mut *part) {
                Ok(whole) => self.generate_wqe(geo, bar2, q, slot, whole).is_some(),
                Err(_) => {
                    let mut wqe = [0u8; nic::WQEBB];
                    let made = self.generate_wqe(geo, bar2, q, slot, &mut wqe).is_some();
                    part.copy_from_slice(&wqe[at..at + n]);
                    made
                }
            };
            if !generated {
                stats.bump(Stat::BadWindowAccesses);
                part.fill(FILL_PATTERN);
            }
            done += n;
        }
    }

    /// Writes into `wqe` the WQE a CPU driver would have written for the descriptor at
    /// (queue, slot); `None`, leaving `wqe` as it was, when there is none. The last WQE posted
    /// when the NIC fetches it always asks for a completion, so credits always return.
    pub(super) fn generate_wqe(
        &self,
        geo: &FldGeometry,
        bar2: u64,
        q: usize,
        slot: u16,
        wqe: &mut [u8; nic::WQEBB],
    ) -> Option<()> {
        let tq = self.queues.get(q)?;
        let s = self.ring_xlt.lookup(RingKey {
            queue: q as u16,
            index: slot,
        })?;
        let d = *self.pool.get(s as usize)?;
        let last_posted = d.wqe_index() == tq.pi.wrapping_sub(1) as u16;
        let window = bar2 + geo.tx_data_base() + q as u64 * geo.tx_window_bytes();
        let signal = d.signal() || last_posted;
        if !tq.rdma {
            d.expand(signal, tq.sqn, window, wqe);
            return Some(());
        }
        let mut ext = [0u8; RDMA_EXTENSION_LEN];
        if d.rdma_opcode().has_extension() {
            let chunk = self.data_xlt.lookup(RingKey {
                queue: q as u16,
                index: ((d.window_offset() / geo.chunk_bytes()) % geo.window_chunks()) as u16,
            })?;
            // Chunks are at least 64 bytes and the extension starts a chunk.
            let at = chunk as usize * geo.chunk_bytes() as usize;
            ext.copy_from_slice(self.buffer.get(at..at + RDMA_EXTENSION_LEN)?);
        }
        d.expand_rdma(signal, tq.sqn, window, RdmaExtension::from_bytes(&ext), wqe);
        Some(())
    }

    /// The WQE queue `q` posted last, for the NIC's WQE-by-MMIO buffer, when the doorbell about
    /// to be written covers it alone (FlexDriver §6, "PCIe Optimizations"; the NIC's side is
    /// `docs/nic-interface.md` §4.1): the NIC then sends it without reading the Tx-ring window.
    /// A burst is left to the NIC's fetch, which reads it in one request.
    pub fn lone_wqe(&self, geo: &FldGeometry, bar2: u64, q: usize) -> Option<(u32, [u8; 64])> {
        let tq = self.queues.get(q)?;
        if tq.pi.wrapping_sub(tq.rung) != 1 {
            return None;
        }
        let counter = tq.pi.wrapping_sub(1);
        let slot = (counter as u64 % (geo.tx_ring_bytes() / nic::WQEBB as u64)) as u16;
        let mut wqe = [0u8; nic::WQEBB];
        self.generate_wqe(geo, bar2, q, slot, &mut wqe)?;
        Some((counter, wqe))
    }

    /// The NIC reads the Tx-data window at `offset` (from the window's start): the
    /// translation table finds each chunk.
    pub fn read_data(&self, geo: &FldGeometry, stats: &mut Stats, offset: u64, data: &mut [u8]) {
        let g = geo.chunk_bytes() as u64;
        let window = geo.tx_window_bytes();
        let w = geo.window_chunks() as u64;
        let mut done = 0usize;
        let mut missing = false;
        while done < data.len() {
            let o = offset + done as u64;
            let (q, in_win) = ((o / window) as u16, o % window);
            let chunk = in_win / g;
            let at = (in_win % g) as usize;
            let n = (g as usize - at).min(data.len() - done);
            match self.data_xlt.lookup(RingKey {
                queue: q,
                index: (chunk % w) as u16,
            }) {
                Some(p) => {
                    let src = p as usize * g as usize + at;
                    data[done..done + n].copy_from_slice(&self.buffer[src..src + n]);
                }
                None => {
                    missing = true;
                    data[done..done + n].fill(FILL_PATTERN);
                }
            }
            done += n;
        }
        if missing {
            stats.bump(Stat::BadWindowAccesses);
        }
    }

    /// Applies the Tx completions the NIC wrote: everything up to the signalled WQE is released.
    /// Returns the completions consumed (their consumer counter is due to the NIC).
    pub fn process_completions(&mut self, geo: &FldGeometry, stats: &mut Stats) -> usize {
        let mut n = 0;
        while let Some(c) = self.cqes.pop_front() {
            n += 1;
            self.cq_ci = self.cq_ci.wrapping_add(1);
            let sqn = c.queue() as u32;
            // A queue in error still owns the flush completions of its WQEs.
            let Some(qi) = self.queues.iter().position(|q| {
                (q.enabled || q.error) && q.rdma == c.is_qp() && q.sqn & 0xffff == sqn
            }) else {
                stats.bump(Stat::UnknownCqes);
                continue;
            };
            stats.bump(Stat::TxCompletions);
            if self.queues[qi].error {
                // Flush completions of a queue in error: whatever it still held is freed.
                stats.bump(Stat::TxErrorCompletions);
                if self.queues[qi].pi != self.queues[qi].ci {
                    let last = self.queues[qi].pi.wrapping_sub(1) as u16;
                    self.release_through(geo, qi, last);
                }
                continue;
            }
            if c.opcode() == nic::CQE_REQ_ERR {
                // The NIC's SQ is in error and will send nothing more: release every posted
                // packet and disable the queue until the control plane binds it again.
                stats.bump(Stat::TxErrorCompletions);
                let syndrome = c.stride_or_syndrome();
                // A flush is the control plane ending the queue pair, not a fault.
                if self.queues[qi].rdma && syndrome == u16::from(nic::rdma_status::WR_FLUSH) {
                    log::debug!("FLD Tx queue {qi}: flushed");
                } else {
                    log::warn!("FLD Tx queue {qi}: NIC error completion, syndrome {syndrome:#x}");
                }
                let last = self.queues[qi].pi.wrapping_sub(1) as u16;
                self.release_through(geo, qi, last);
                self.queues[qi].enabled = false;
                self.queues[qi].error = true;
                continue;
            }
            self.release_through(geo, qi, c.counter_or_len());
        }
        n
    }

    /// Frees descriptors and chunks of queue `qi` from its consumer up to WQE index `upto`.
    pub fn release_through(&mut self, geo: &FldGeometry, qi: usize, upto: u16) {
        let mask = (1u32 << geo.log_tx_ring) - 1;
        let w = geo.window_chunks();
        let g = geo.chunk_bytes();
        loop {
            let q = &self.queues[qi];
            if q.ci == q.pi {
                return;
            }
            let ci = q.ci;
            let key = RingKey {
                queue: qi as u16,
                index: (ci & mask) as u16,
            };
            let Some(slot) = self.ring_xlt.remove(key) else {
                self.queues[qi].ci = ci.wrapping_add(1);
                continue;
            };
            let d = self.pool[slot as usize];
            self.pool_free.push(slot);
            let first = d.window_offset() / g;
            let chunks = d.len().div_ceil(g);
            for k in 0..chunks {
                if let Some(p) = self.data_xlt.remove(RingKey {
                    queue: qi as u16,
                    index: ((first + k) % w) as u16,
                }) {
                    self.chunks_free.push(p);
                }
            }
            let q = &mut self.queues[qi];
            // Advance the virtual tail past this packet (and any skipped end of window).
            let end = (first + chunks) % w;
            q.vtail = q.vtail.wrapping_add((end + w - q.vtail % w) % w);
            q.ci = ci.wrapping_add(1);
            // An idle queue starts its window afresh, so its whole window is contiguous again.
            if q.ci == q.pi {
                q.vhead = 0;
                q.vtail = 0;
            }
            if ci as u16 == upto {
                return;
            }
        }
    }
}

/// Fills `dst` with bytes `from..` of the message as stored: `ext` then `data`.
fn copy_message(dst: &mut [u8], ext: &[u8], data: &[u8], from: usize) {
    let mut done = 0;
    if from < ext.len() {
        let n = (ext.len() - from).min(dst.len());
        dst[..n].copy_from_slice(&ext[from..from + n]);
        done = n;
    }
    let at = from + done - ext.len();
    let n = dst.len() - done;
    dst[done..].copy_from_slice(&data[at..at + n]);
}

/// The accelerator's view of the Tx module: the tx stream of its AXI port.
pub(super) struct TxView<'a> {
    pub tx: &'a mut TxEngine,
    pub stats: &'a mut Stats,
    pub geo: FldGeometry,
}

impl TxStream for TxView<'_> {
    fn credits(&self, queue: u16) -> Credits {
        self.tx.credits(&self.geo, queue)
    }

    fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
        let is_rdma = self.tx.admit(self.stats, meta)?;
        self.tx.post(&self.geo, self.stats, meta, is_rdma, data)
    }

    /// The queue's checks are made once for a run of packets to one queue: posting a packet
    /// changes nothing they read.
    fn send_burst(&mut self, burst: TxBurst<'_>) -> (usize, Option<TxRefused>) {
        let mut admitted: Option<(u16, bool)> = None;
        for (n, (meta, data)) in burst.iter().enumerate() {
            let is_rdma = match admitted {
                Some((queue, is_rdma)) if queue == meta.queue && meta.rdma.is_none() => is_rdma,
                _ => match self.tx.admit(self.stats, meta) {
                    Ok(is_rdma) => is_rdma,
                    Err(e) => return (n, Some(e)),
                },
            };
            if let Err(e) = self.tx.post(&self.geo, self.stats, meta, is_rdma, data) {
                return (n, Some(e));
            }
            admitted = Some((meta.queue, is_rdma));
        }
        (burst.len(), None)
    }
}

impl TxEngine {
    /// Whether `meta.queue` takes packets like `meta` now: bound, enabled, not in error, and an
    /// FLD-R queue for an RDMA operation. Returns whether it is an FLD-R queue.
    fn admit(&self, stats: &mut Stats, meta: &TxMeta) -> Result<bool, TxRefused> {
        let Some(q) = self.queues.get(meta.queue as usize) else {
            stats.bump(Stat::TxUnknownQueue);
            return Err(TxRefused::UnknownQueue);
        };
        if q.error {
            stats.bump(Stat::TxQueueInError);
            return Err(TxRefused::QueueError);
        }
        if !q.enabled {
            stats.bump(Stat::TxUnknownQueue);
            return Err(TxRefused::UnknownQueue);
        }
        if meta.rdma.is_some() && !q.rdma {
            stats.bump(Stat::TxUnknownQueue);
            return Err(TxRefused::NotRdma);
        }
        Ok(q.rdma)
    }

    /// Posts a packet to the queue [`Self::admit`] took it for: its chunks mapped and filled,
    /// its descriptor placed, the queue's doorbell due.
    fn post(
        &mut self,
        geo: &FldGeometry,
        stats: &mut Stats,
        meta: &TxMeta,
        is_rdma: bool,
        data: &[u8],
    ) -> Result<(), TxRefused> {
        let qi = meta.queue as usize;
        // FLD-R: the operation, and the extension that goes before the message.
        let (rdma_op, ext) = rdma_opcode(meta.rdma.filter(|_| is_rdma));
        let ext = ext.map(RdmaExtension::to_bytes);
        let ext: &[u8] = ext.as_ref().map_or(&[], |e| &e[..]);
        let total = ext.len() + data.len();
        if data.is_empty() || total > geo.max_packet as usize {
            stats.bump(Stat::TxBadLength);
            return Err(TxRefused::BadLength);
        }
        let credits = self.credits(geo, meta.queue);
        let g = geo.chunk_bytes() as usize;
        let need = total.div_ceil(g) as u32;
        if credits.packets == 0 || need * g as u32 > credits.bytes {
            stats.bump(Stat::TxNoCredit);
            return Err(TxRefused::NoCredit);
        }
        let w = geo.window_chunks();
        let q = &self.queues[qi];
        // Skip to the window start rather than wrap a packet (bounded virtual fragmentation).
        let mut vstart = q.vhead;
        // The counts run free and wrap, as hardware pointers do; the window is a power of two
        // chunks, so a count taken modulo it is the same across the wrap.
        if vstart % w + need > w {
            vstart = vstart.wrapping_add(w - vstart % w);
        }
        // Map chunks; a stalled insertion is undone so nothing is half-posted.
        let mut mapped = 0u32;
        let mut stalled = false;
        for k in 0..need {
            let Some(p) = self.chunks_free.pop() else {
                break;
            };
            self.chunks_touched = self.chunks_touched.max(p + 1);
            let key = RingKey {
                queue: meta.queue,
                index: ((vstart + k) % w) as u16,
            };
            if self.data_xlt.insert(key, p).is_err() {
                self.chunks_free.push(p);
                stalled = true;
                break;
            }
            let at = p as usize * g;
            let from = k as usize * g;
            copy_message(
                &mut self.buffer[at..at + g.min(total - from)],
                ext,
                data,
                from,
            );
            mapped += 1;
        }
        let slot = if mapped == need {
            self.pool_free.pop()
        } else {
            None
        };
        let ring_key = RingKey {
            queue: meta.queue,
            index: (self.queues[qi].pi & ((1 << geo.log_tx_ring) - 1)) as u16,
        };
        let placed = slot.is_some_and(|s| self.ring_xlt.insert(ring_key, s).is_ok());
        if !placed {
            if let Some(s) = slot {
                self.pool_free.push(s);
            }
            for k in 0..mapped {
                if let Some(p) = self.data_xlt.remove(RingKey {
                    queue: meta.queue,
                    index: ((vstart + k) % w) as u16,
                }) {
                    self.chunks_free.push(p);
                }
            }
            if stalled || slot.is_some() {
                stats.bump(Stat::TxStalls);
            }
            stats.bump(Stat::TxNoCredit);
            return Err(TxRefused::NoCredit);
        }
        let slot = slot.unwrap_or_default();
        let every = self.signal_every;
        let q = &mut self.queues[qi];
        q.since_signal += 1;
        let signal = q.since_signal >= every;
        if signal {
            q.since_signal = 0;
        }
        let offset = (vstart % w) * g as u32;
        let flags = if is_rdma {
            rdma_op as u8
        } else {
            meta.cs_flags
        };
        let resume = if is_rdma { None } else { meta.resume_table };
        self.pool[slot as usize] =
            CompressedDesc::new(offset, total as u32, flags, signal, q.pi as u16)
                .with_resume(resume);
        q.vhead = vstart.wrapping_add(need);
        q.pi = q.pi.wrapping_add(1);
        if !std::mem::replace(&mut q.doorbell_due, true) {
            self.doorbells_due.push(qi as u16);
        }
        stats.bump(Stat::TxPackets);
        stats.add(Stat::TxBytes, data.len() as u64);
        Ok(())
    }
}

/// The NIC opcode of an FLD-R operation and the extension (immediate, remote key and address)
/// that goes before its message in FLD's buffer (§5.3); a plain send has none.
fn rdma_opcode(op: Option<RdmaOp>) -> (RdmaOpcode, Option<RdmaExtension>) {
    match op {
        None => (RdmaOpcode::Send, None),
        Some(RdmaOp::Send) => (RdmaOpcode::Send, None),
        Some(RdmaOp::SendImm(imm)) => (
            RdmaOpcode::SendImm,
            Some(RdmaExtension {
                imm,
                ..Default::default()
            }),
        ),
        Some(RdmaOp::Write { remote_addr, rkey }) => (
            RdmaOpcode::Write,
            Some(RdmaExtension {
                imm: 0,
                rkey,
                remote_addr,
            }),
        ),
        Some(RdmaOp::WriteImm {
            remote_addr,
            rkey,
            imm,
        }) => (
            RdmaOpcode::WriteImm,
            Some(RdmaExtension {
                imm,
                rkey,
                remote_addr,
            }),
        ),
    }
}
