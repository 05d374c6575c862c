//! The FlexDriver module (paper §5, Figure 3): a PCIe function on the accelerator that drives the
//! NIC's data path through peer-to-peer PCIe, generating the NIC's data structures on the fly.
//!
//! * **Tx** (§5.2): the accelerator's packet goes into one shared on-chip Tx buffer through a
//!   data translation table (per-queue virtual windows, chunk granularity); an 8-byte compressed
//!   descriptor goes into a shared pool indexed by a 4-bank cuckoo hash table keyed by
//!   (queue, ring slot). FLD rings the NIC's SQ doorbell by a P2P write. When the NIC reads the
//!   Tx-ring window, FLD builds the 64-byte WQE from the compressed descriptor; when it reads the
//!   Tx-data window, the translation table serves the bytes. Completions the NIC writes into the
//!   Tx CQ window free descriptors and chunks and return per-queue credits.
//! * **Rx**: a NIC striding RQ whose WQEs stay in host memory, pointing into FLD's Rx-buffer
//!   window. FLD recycles the buffers in posting order, so the descriptors never change; it only
//!   advances the RQ doorbell. CQEs written into the Rx CQ window are compressed to 15 bytes on
//!   arrival; each packet goes to the accelerator on the rx stream with its metadata, without
//!   backpressure (§5.5).
//!
//! What it leaves out for now: RDMA (FLD-R), per-queue Rx (one shared RQ serves all), the NIC
//! "resume at table" return path of the `accelerate` action.

pub mod cuckoo;
pub mod memory_model;
pub mod perf_model;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use zerocopy::FromBytes;

use crate::accel::{Accelerator, Credits, RxMeta, TxMeta, TxRefused, TxStream};
use crate::fabric::Fabric;
use crate::pcie::{BarSpec, ConfigSpace, FunctionId, Identity, PciFunction, PciState};
use cuckoo::{CuckooTable, RingKey};
use fld_abi::fld::*;
use fld_abi::nic;

/// Per Tx queue state: the ring manager of Figure 3.
#[derive(Clone, Debug, Default)]
struct TxQueue {
    sqn: u32,
    enabled: bool,
    /// WQE basic blocks posted (each FLD WQE is one).
    pi: u32,
    /// Posted WQEs whose completion has arrived.
    ci: u32,
    /// Virtual chunk counters of the queue's Tx-data window.
    vhead: u32,
    vtail: u32,
    /// WQEs posted since the last one that asked for a completion.
    since_signal: u32,
    doorbell_due: bool,
}

/// The Tx module: descriptor pool, both translation tables, the shared buffer.
struct TxEngine {
    pool: Vec<CompressedDesc>,
    pool_free: Vec<u32>,
    ring_xlt: CuckooTable,
    data_xlt: CuckooTable,
    buffer: Vec<u8>,
    chunks_free: Vec<u32>,
    queues: Vec<TxQueue>,
}

/// The Rx module: buffer, recycling cursor, RQ producer counter.
#[derive(Default)]
struct RxEngine {
    buffer: Vec<u8>,
    enabled: bool,
    rqn: u32,
    log_stride: u8,
    log_strides: u8,
    log_wqes: u8,
    /// The striding WQE (buffer) the NIC is filling.
    cursor: u32,
    /// RQ producer counter FLD reports to the NIC.
    pi: u32,
    doorbell_due: bool,
}

impl RxEngine {
    fn wqe_bytes(&self) -> usize {
        1 << (self.log_stride + self.log_strides)
    }
}

/// Everything behind FLD's lock.
struct FldCore {
    geo: FldGeometry,
    nic_doorbell: u64,
    tx_cqn: u32,
    rx_cqn: u32,
    signal_every: u32,
    tx: TxEngine,
    rx: RxEngine,
    /// Compressed completions waiting for the engine (15 bytes each).
    tx_cqes: VecDeque<CompressedCqe>,
    rx_cqes: VecDeque<CompressedCqe>,
    /// CQEs consumed, reported to the NIC as CQ consumer counters.
    tx_cq_ci: u32,
    rx_cq_ci: u32,
    cq_doorbells_due: bool,
    stats: [u64; STAT_COUNT],
    accel: Option<Box<dyn Accelerator>>,
}

impl FldCore {
    fn new(geo: FldGeometry) -> Self {
        FldCore {
            nic_doorbell: 0,
            tx_cqn: u32::MAX,
            rx_cqn: u32::MAX,
            signal_every: 32,
            tx: TxEngine {
                pool: vec![CompressedDesc::default(); geo.desc_pool as usize],
                // The all-ones slot number marks an empty bucket of the ring translation table
                // (so an entry needs no valid bit, §5.2's 31 bits): it is never handed out.
                pool_free: (0..geo.desc_pool.saturating_sub(1)).rev().collect(),
                ring_xlt: CuckooTable::new(geo.desc_pool, 0x5eed_0001),
                data_xlt: CuckooTable::new(geo.tx_chunks, 0x5eed_0002),
                buffer: vec![0; geo.tx_chunks as usize * geo.tx_chunk as usize],
                chunks_free: (0..geo.tx_chunks).rev().collect(),
                queues: vec![TxQueue::default(); geo.tx_queues as usize],
            },
            rx: RxEngine::default(),
            tx_cqes: VecDeque::with_capacity(1 << geo.log_tx_cq),
            rx_cqes: VecDeque::with_capacity(1 << geo.log_rx_cq),
            tx_cq_ci: 0,
            rx_cq_ci: 0,
            cq_doorbells_due: false,
            stats: [0; STAT_COUNT],
            accel: None,
            geo,
        }
    }

    fn bump(&mut self, s: Stat) {
        self.stats[s as usize] += 1;
    }

    fn window_chunks(&self) -> u32 {
        (self.geo.tx_window_bytes() / self.geo.tx_chunk as u64) as u32
    }

    /// Bytes of on-chip memory per structure, as allocated (Table 3's FLD column). Translation
    /// tables count their buckets, as the paper's 15.5 KiB does; each 4-entry stash adds 16 bytes.
    fn memory_report(&self) -> [u64; MEMORY_ITEMS] {
        let g = &self.geo;
        let ring_entries = 1u32 << g.log_tx_ring;
        let mut m = [0u64; MEMORY_ITEMS];
        m[MemoryItem::TxDescriptorPool as usize] = self.tx.pool.len() as u64 * 8;
        m[MemoryItem::TxRingTranslation as usize] = self
            .tx
            .ring_xlt
            .bucket_memory_bytes(g.tx_queues, ring_entries);
        m[MemoryItem::TxBuffer as usize] = self.tx.buffer.len() as u64;
        m[MemoryItem::TxDataTranslation as usize] = self
            .tx
            .data_xlt
            .bucket_memory_bytes(g.tx_queues, self.window_chunks());
        m[MemoryItem::RxBuffer as usize] = if self.rx.enabled {
            self.rx.buffer.len() as u64
        } else {
            g.rx_buffer as u64
        };
        m[MemoryItem::TxCompletions as usize] = (1u64 << g.log_tx_cq) * 15;
        m[MemoryItem::RxCompletions as usize] = (1u64 << g.log_rx_cq) * 15;
        m[MemoryItem::ProducerIndices as usize] = (g.tx_queues as u64 + 1) * 4;
        m[MemoryItem::Total as usize] = m[..MemoryItem::Total as usize].iter().sum();
        m
    }
}

/// Handles the host and the engine share.
struct FldShared {
    fabric: Arc<Fabric>,
    core: Mutex<FldCore>,
}

impl FldShared {
    fn lock(&self) -> MutexGuard<'_, FldCore> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The FLD PCIe function.
pub struct FldFunction {
    pci: PciState,
    shared: Arc<FldShared>,
}

impl FldFunction {
    /// Builds FLD with the structures sized for `geo` and plugs it into `fabric`.
    pub fn new(fabric: &Arc<Fabric>, geo: FldGeometry) -> Arc<FldFunction> {
        if let Err(e) = geo.check() {
            panic!("FLD geometry: {e}");
        }
        let shared = Arc::new(FldShared {
            fabric: fabric.clone(),
            core: Mutex::new(FldCore::new(geo)),
        });
        fabric.attach(|fid| {
            let cs = ConfigSpace::new(
                Identity {
                    vendor_id: nic::PCI_VENDOR_ID,
                    device_id: FLD_DEVICE_ID,
                    class_code: FLD_CLASS_CODE,
                    revision: 1,
                    subsystem_id: 0,
                },
                &[
                    BarSpec {
                        index: BAR_CONTROL,
                        size: BAR_CONTROL_SIZE,
                        prefetchable: false,
                    },
                    BarSpec {
                        index: BAR_NIC,
                        size: geo.bar_size(),
                        prefetchable: true,
                    },
                ],
                None,
            );
            Arc::new(FldFunction {
                pci: PciState::new(fid, cs),
                shared,
            })
        })
    }

    pub fn id(&self) -> FunctionId {
        self.pci.id
    }

    pub fn geometry(&self) -> FldGeometry {
        self.shared.lock().geo
    }

    /// Connects an accelerator model to the AXI-stream ports.
    pub fn set_accelerator(&self, accel: Box<dyn Accelerator>) {
        self.shared.lock().accel = Some(accel);
    }

    /// The connected accelerator's name and counters.
    pub fn accelerator_counters(&self) -> Option<(&'static str, Vec<(&'static str, u64)>)> {
        let core = self.shared.lock();
        core.accel.as_ref().map(|a| (a.name(), a.counters()))
    }

    pub fn stat(&self, s: Stat) -> u64 {
        self.shared.lock().stats[s as usize]
    }

    /// Bytes of on-chip memory per structure (indexed by [`MemoryItem`]).
    pub fn memory_report(&self) -> [u64; MEMORY_ITEMS] {
        self.shared.lock().memory_report()
    }

    /// The tx stream as the accelerator sees it, for callers outside an accelerator callback
    /// (tests, host-side models).
    pub fn with_tx_stream<R>(&self, f: impl FnOnce(&mut dyn TxStream) -> R) -> R {
        let mut core = self.shared.lock();
        f(&mut TxView { core: &mut core })
    }

    /// One engine step: completions, receive delivery, accelerator poll, doorbells. Returns the
    /// work done.
    pub fn poll(&self) -> usize {
        let mut core = self.shared.lock();
        let mut work = 0;
        // Background cuckoo relocation (§5.2): a few stash entries move back per step.
        work += core.tx.ring_xlt.relocate(4) + core.tx.data_xlt.relocate(4);
        work += process_tx_completions(&mut core);
        let mut accel = core.accel.take();
        work += deliver_receives(&mut core, accel.as_deref_mut());
        if let Some(a) = accel.as_deref_mut() {
            work += a.poll(&mut TxView { core: &mut core });
        }
        core.accel = accel;
        work += ring_doorbells(&mut core, &self.shared.fabric, self.pci.id);
        work
    }

    fn bar2_base(&self) -> u64 {
        self.pci.config().bar_address(BAR_NIC).unwrap_or(0)
    }

    fn control_read(&self, core: &FldCore, offset: u64) -> u32 {
        let g = &core.geo;
        let stat_end = reg::STATS_BASE + 8 * STAT_COUNT as u64;
        let mem_end = reg::MEMORY_BASE + 8 * MEMORY_ITEMS as u64;
        if let Some(v) = g.register(offset) {
            return v;
        }
        match offset {
            reg::VERSION => FLD_VERSION,
            reg::STATUS => STATUS_READY,
            reg::NIC_DOORBELL_LO => core.nic_doorbell as u32,
            reg::NIC_DOORBELL_HI => (core.nic_doorbell >> 32) as u32,
            reg::TX_CQN => core.tx_cqn,
            reg::RX_CQN => core.rx_cqn,
            reg::RX_RQN => core.rx.rqn,
            reg::RX_LOG_STRIDE => core.rx.log_stride as u32,
            reg::RX_LOG_STRIDES => core.rx.log_strides as u32,
            reg::RX_LOG_WQES => core.rx.log_wqes as u32,
            reg::RX_ENABLE => core.rx.enabled as u32,
            reg::TX_SIGNAL_EVERY => core.signal_every,
            o if (reg::STATS_BASE..stat_end).contains(&o) => {
                let v = core.stats[((o - reg::STATS_BASE) / 8) as usize];
                if o % 8 == 0 {
                    v as u32
                } else {
                    (v >> 32) as u32
                }
            }
            o if (reg::MEMORY_BASE..mem_end).contains(&o) => {
                let v = core.memory_report()[((o - reg::MEMORY_BASE) / 8) as usize];
                if o % 8 == 0 {
                    v as u32
                } else {
                    (v >> 32) as u32
                }
            }
            o if o >= reg::TXQ_BASE && ((o - reg::TXQ_BASE) / 16) < g.tx_queues as u64 => {
                let qi = ((o - reg::TXQ_BASE) / 16) as usize;
                let q = &core.tx.queues[qi];
                match o % 16 {
                    0 => q.sqn | if q.enabled { TXQ_ENABLE } else { 0 },
                    4 => credits_of(core, qi as u16).packets,
                    8 => credits_of(core, qi as u16).bytes,
                    _ => q.pi.wrapping_sub(q.ci),
                }
            }
            _ => 0,
        }
    }

    fn control_write(&self, core: &mut FldCore, offset: u64, v: u32) {
        match offset {
            reg::RESET if v == RESET_MAGIC => {
                let geo = core.geo;
                let accel = core.accel.take();
                *core = FldCore::new(geo);
                core.accel = accel;
            }
            reg::NIC_DOORBELL_LO => {
                core.nic_doorbell = (core.nic_doorbell & !0xffff_ffff) | v as u64
            }
            reg::NIC_DOORBELL_HI => {
                core.nic_doorbell = (core.nic_doorbell & 0xffff_ffff) | (v as u64) << 32
            }
            reg::TX_CQN => core.tx_cqn = v,
            reg::RX_CQN => core.rx_cqn = v,
            reg::TX_SIGNAL_EVERY => core.signal_every = v.clamp(1, 1 << core.geo.log_tx_ring),
            reg::RX_RQN if !core.rx.enabled => core.rx.rqn = v,
            reg::RX_LOG_STRIDE if !core.rx.enabled => core.rx.log_stride = v.min(16) as u8,
            reg::RX_LOG_STRIDES if !core.rx.enabled => core.rx.log_strides = v.min(16) as u8,
            reg::RX_LOG_WQES if !core.rx.enabled => core.rx.log_wqes = v.min(16) as u8,
            reg::RX_ENABLE => {
                if v & 1 == 0 {
                    core.rx.enabled = false;
                    core.rx.buffer = Vec::new();
                    return;
                }
                // The buffers must fit the Rx-buffer window; otherwise receive stays off.
                let bytes = (core.rx.wqe_bytes() as u64) << core.rx.log_wqes;
                let window = core.geo.tx_cq_base() - core.geo.rx_buffer_base();
                if core.rx.enabled || bytes == 0 || bytes > window {
                    return;
                }
                core.rx.buffer = vec![0; bytes as usize];
                core.rx.enabled = true;
                core.rx.cursor = 0;
                core.rx.pi = 1 << core.rx.log_wqes;
            }
            o if o >= reg::TXQ_BASE
                && ((o - reg::TXQ_BASE) / 16) < core.geo.tx_queues as u64
                && o % 16 == 0 =>
            {
                let q = &mut core.tx.queues[((o - reg::TXQ_BASE) / 16) as usize];
                // A queue with packets in flight keeps its binding.
                if q.pi == q.ci {
                    q.sqn = v & !TXQ_ENABLE;
                    q.enabled = v & TXQ_ENABLE != 0;
                }
            }
            _ => {}
        }
    }

    // --- the NIC-facing window -----------------------------------------------------------------

    fn nic_read(&self, core: &mut FldCore, offset: u64, data: &mut [u8]) {
        let g = core.geo;
        let len = data.len() as u64;
        if offset + len <= g.tx_data_base() && offset < g.tx_queues as u64 * g.tx_ring_bytes() {
            let bar2 = self.bar2_base();
            return read_tx_ring(core, bar2, offset, data);
        }
        if offset >= g.tx_data_base()
            && offset + len <= g.tx_data_base() + g.tx_queues as u64 * g.tx_window_bytes()
        {
            return read_tx_data(core, offset - g.tx_data_base(), data);
        }
        let rx = g.rx_buffer_base();
        if offset >= rx && offset + len <= rx + core.rx.buffer.len() as u64 {
            let o = (offset - rx) as usize;
            data.copy_from_slice(&core.rx.buffer[o..o + data.len()]);
            return;
        }
        core.bump(Stat::BadWindowAccesses);
        data.fill(FILL_PATTERN);
    }

    fn nic_write(&self, core: &mut FldCore, offset: u64, data: &[u8]) {
        let g = core.geo;
        let len = data.len() as u64;
        let rx = g.rx_buffer_base();
        if offset >= rx && offset + len <= rx + core.rx.buffer.len() as u64 {
            let o = (offset - rx) as usize;
            core.rx.buffer[o..o + data.len()].copy_from_slice(data);
            return;
        }
        let cqe_size = nic::CQE_SIZE as u64;
        for (base, log, is_tx) in [
            (g.tx_cq_base(), g.log_tx_cq, true),
            (g.rx_cq_base(), g.log_rx_cq, false),
        ] {
            if offset >= base && offset + len <= base + (cqe_size << log) {
                if len != cqe_size || !(offset - base).is_multiple_of(cqe_size) {
                    core.bump(Stat::BadWindowAccesses);
                    return;
                }
                let Ok(cqe) = nic::Cqe::read_from_bytes(data) else {
                    return;
                };
                let c = CompressedCqe::compress(&cqe);
                let ring = if is_tx {
                    &mut core.tx_cqes
                } else {
                    &mut core.rx_cqes
                };
                if ring.len() >= 1 << log {
                    core.bump(Stat::UnknownCqes);
                } else {
                    ring.push_back(c);
                }
                return;
            }
        }
        core.bump(Stat::BadWindowAccesses);
    }
}

impl PciFunction for FldFunction {
    fn pci(&self) -> &PciState {
        &self.pci
    }

    fn bar_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        let mut core = self.shared.lock();
        match bar {
            BAR_CONTROL => {
                for (i, b) in data.iter_mut().enumerate() {
                    let o = offset + i as u64;
                    *b = (self.control_read(&core, o & !3) >> ((o % 4) * 8)) as u8;
                }
            }
            BAR_NIC => self.nic_read(&mut core, offset, data),
            _ => data.fill(0xff),
        }
    }

    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]) {
        let mut core = self.shared.lock();
        match bar {
            BAR_CONTROL if offset.is_multiple_of(4) && data.len().is_multiple_of(4) => {
                for (i, c) in data.chunks_exact(4).enumerate() {
                    self.control_write(
                        &mut core,
                        offset + 4 * i as u64,
                        u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    );
                }
            }
            BAR_NIC => self.nic_write(&mut core, offset, data),
            _ => {}
        }
    }

    fn reset(&self) {
        let mut core = self.shared.lock();
        let geo = core.geo;
        let accel = core.accel.take();
        *core = FldCore::new(geo);
        core.accel = accel;
    }
}

// ---------------------------------------------------------------------------------------------
// Tx
// ---------------------------------------------------------------------------------------------

/// The accelerator's view of the Tx module.
struct TxView<'a> {
    core: &'a mut FldCore,
}

impl TxView<'_> {
    /// Contiguous free virtual chunks of queue `q` (a packet never wraps its window).
    fn window_room(core: &FldCore, q: &TxQueue) -> u32 {
        let w = core.window_chunks();
        let free = w - 1 - q.vhead.wrapping_sub(q.vtail);
        let to_end = w - q.vhead % w;
        if to_end >= free {
            free
        } else {
            to_end.max(free - to_end)
        }
    }
}

impl TxStream for TxView<'_> {
    fn credits(&self, queue: u16) -> Credits {
        credits_of(self.core, queue)
    }

    fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
        let core = &mut *self.core;
        let qi = meta.queue as usize;
        if core.tx.queues.get(qi).is_none_or(|q| !q.enabled) {
            core.bump(Stat::TxUnknownQueue);
            return Err(TxRefused::UnknownQueue);
        }
        if data.is_empty() || data.len() > core.geo.max_packet as usize {
            core.bump(Stat::TxBadLength);
            return Err(TxRefused::BadLength);
        }
        let credits = self.credits(meta.queue);
        let core = &mut *self.core;
        let g = core.geo.tx_chunk as usize;
        let need = data.len().div_ceil(g) as u32;
        if credits.packets == 0 || need * g as u32 > credits.bytes {
            core.bump(Stat::TxNoCredit);
            return Err(TxRefused::NoCredit);
        }
        let w = core.window_chunks();
        let q = &core.tx.queues[qi];
        // Skip to the window start rather than wrap a packet (bounded virtual fragmentation).
        let mut vstart = q.vhead;
        if vstart % w + need > w {
            vstart += w - vstart % w;
        }
        // Map chunks; a stalled insertion is undone so nothing is half-posted.
        let mut mapped = 0u32;
        let mut stalled = false;
        for k in 0..need {
            let Some(p) = core.tx.chunks_free.pop() else {
                break;
            };
            let key = RingKey {
                queue: meta.queue,
                index: ((vstart + k) % w) as u16,
            };
            if core.tx.data_xlt.insert(key, p).is_err() {
                core.tx.chunks_free.push(p);
                stalled = true;
                break;
            }
            let at = p as usize * g;
            let part = &data[k as usize * g..((k as usize + 1) * g).min(data.len())];
            core.tx.buffer[at..at + part.len()].copy_from_slice(part);
            mapped += 1;
        }
        let slot = if mapped == need {
            core.tx.pool_free.pop()
        } else {
            None
        };
        let ring_key = RingKey {
            queue: meta.queue,
            index: (core.tx.queues[qi].pi & ((1 << core.geo.log_tx_ring) - 1)) as u16,
        };
        let placed = slot.is_some_and(|s| core.tx.ring_xlt.insert(ring_key, s).is_ok());
        if !placed {
            if let Some(s) = slot {
                core.tx.pool_free.push(s);
            }
            for k in 0..mapped {
                if let Some(p) = core.tx.data_xlt.remove(RingKey {
                    queue: meta.queue,
                    index: ((vstart + k) % w) as u16,
                }) {
                    core.tx.chunks_free.push(p);
                }
            }
            if stalled || slot.is_some() {
                core.bump(Stat::TxStalls);
            }
            core.bump(Stat::TxNoCredit);
            return Err(TxRefused::NoCredit);
        }
        let slot = slot.unwrap_or_default();
        let every = core.signal_every;
        let q = &mut core.tx.queues[qi];
        q.since_signal += 1;
        let signal = q.since_signal >= every;
        if signal {
            q.since_signal = 0;
        }
        let offset = (vstart % w) * g as u32;
        core.tx.pool[slot as usize] = CompressedDesc::new(
            offset,
            data.len() as u32,
            meta.cs_flags,
            signal,
            q.pi as u16,
        )
        .with_resume(meta.resume_table);
        q.vhead = vstart + need;
        q.pi = q.pi.wrapping_add(1);
        q.doorbell_due = true;
        core.stats[Stat::TxPackets as usize] += 1;
        core.stats[Stat::TxBytes as usize] += data.len() as u64;
        Ok(())
    }
}

/// Per-queue credits (§5.5): packets = min(ring room, free pool slots), bytes = whole free
/// chunks the queue's window can take contiguously; none while a translation stash is full.
fn credits_of(core: &FldCore, queue: u16) -> Credits {
    let Some(q) = core.tx.queues.get(queue as usize).filter(|q| q.enabled) else {
        return Credits::default();
    };
    if core.tx.ring_xlt.stash_len() >= cuckoo::STASH_ENTRIES
        || core.tx.data_xlt.stash_len() >= cuckoo::STASH_ENTRIES
    {
        return Credits::default();
    }
    let ring_free = (1u32 << core.geo.log_tx_ring) - q.pi.wrapping_sub(q.ci);
    let packets = ring_free.min(core.tx.pool_free.len() as u32);
    let chunks = (core.tx.chunks_free.len() as u32).min(TxView::window_room(core, q));
    Credits {
        packets,
        bytes: if packets == 0 {
            0
        } else {
            chunks * core.geo.tx_chunk
        },
    }
}

/// The NIC reads the Tx-ring window: FLD builds each 64-byte WQE from its compressed descriptor.
fn read_tx_ring(core: &mut FldCore, bar2: u64, offset: u64, data: &mut [u8]) {
    let g = core.geo;
    let ring_bytes = g.tx_ring_bytes();
    let mut done = 0usize;
    while done < data.len() {
        let o = offset + done as u64;
        let (q, in_ring) = ((o / ring_bytes) as usize, o % ring_bytes);
        let slot = (in_ring / nic::WQEBB as u64) as u16;
        let at = (in_ring % nic::WQEBB as u64) as usize;
        let n = (nic::WQEBB - at).min(data.len() - done);
        match generate_wqe(core, bar2, q, slot) {
            Some(wqe) => data[done..done + n].copy_from_slice(&wqe[at..at + n]),
            None => {
                core.bump(Stat::BadWindowAccesses);
                data[done..done + n].fill(FILL_PATTERN);
            }
        }
        done += n;
    }
}

/// The WQE a CPU driver would have written for the descriptor at (queue, slot): control,
/// Ethernet segment without inline headers, one data pointer into the Tx-data window. The last
/// WQE posted when the NIC fetches it always asks for a completion, so credits always return.
fn generate_wqe(core: &FldCore, bar2: u64, q: usize, slot: u16) -> Option<[u8; nic::WQEBB]> {
    let tq = core.tx.queues.get(q)?;
    let s = core.tx.ring_xlt.lookup(RingKey {
        queue: q as u16,
        index: slot,
    })?;
    let d = *core.tx.pool.get(s as usize)?;
    let last_posted = d.wqe_index() == tq.pi.wrapping_sub(1) as u16;
    Some(d.expand(
        d.signal() || last_posted,
        tq.sqn,
        bar2 + core.geo.tx_data_base() + q as u64 * core.geo.tx_window_bytes(),
    ))
}

/// The NIC reads the Tx-data window: the translation table finds each chunk.
fn read_tx_data(core: &mut FldCore, offset: u64, data: &mut [u8]) {
    let g = core.geo.tx_chunk as u64;
    let window = core.geo.tx_window_bytes();
    let w = core.window_chunks() as u64;
    let mut done = 0usize;
    let mut missing = false;
    while done < data.len() {
        let o = offset + done as u64;
        let (q, in_win) = ((o / window) as u16, o % window);
        let chunk = in_win / g;
        let at = (in_win % g) as usize;
        let n = (g as usize - at).min(data.len() - done);
        match core.tx.data_xlt.lookup(RingKey {
            queue: q,
            index: (chunk % w) as u16,
        }) {
            Some(p) => {
                let src = p as usize * g as usize + at;
                data[done..done + n].copy_from_slice(&core.tx.buffer[src..src + n]);
            }
            None => {
                missing = true;
                data[done..done + n].fill(FILL_PATTERN);
            }
        }
        done += n;
    }
    if missing {
        core.bump(Stat::BadWindowAccesses);
    }
}

/// Applies the Tx completions the NIC wrote: everything up to the signalled WQE is released.
fn process_tx_completions(core: &mut FldCore) -> usize {
    let mut n = 0;
    while let Some(c) = core.tx_cqes.pop_front() {
        n += 1;
        core.tx_cq_ci = core.tx_cq_ci.wrapping_add(1);
        core.cq_doorbells_due = true;
        let sqn = c.queue() as u32;
        let Some(qi) = core
            .tx
            .queues
            .iter()
            .position(|q| q.enabled && q.sqn & 0xffff == sqn)
        else {
            core.bump(Stat::UnknownCqes);
            continue;
        };
        core.bump(Stat::TxCompletions);
        if c.opcode() == nic::CQE_REQ_ERR {
            // The NIC's SQ is in error and will send nothing more: release every posted packet
            // and disable the queue until the control plane binds it again.
            core.bump(Stat::TxErrorCompletions);
            log::warn!(
                "FLD Tx queue {qi}: NIC error completion, syndrome {:#x}",
                c.stride_or_syndrome()
            );
            let last = core.tx.queues[qi].pi.wrapping_sub(1) as u16;
            release_through(core, qi, last);
            core.tx.queues[qi].enabled = false;
            continue;
        }
        let upto = c.counter_or_len();
        release_through(core, qi, upto);
    }
    n
}

/// Frees descriptors and chunks of queue `qi` from its consumer up to WQE index `upto`.
fn release_through(core: &mut FldCore, qi: usize, upto: u16) {
    let mask = (1u32 << core.geo.log_tx_ring) - 1;
    let w = core.window_chunks();
    let g = core.geo.tx_chunk;
    loop {
        let q = &core.tx.queues[qi];
        if q.ci == q.pi {
            return;
        }
        let ci = q.ci;
        let key = RingKey {
            queue: qi as u16,
            index: (ci & mask) as u16,
        };
        let Some(slot) = core.tx.ring_xlt.remove(key) else {
            core.tx.queues[qi].ci = ci.wrapping_add(1);
            continue;
        };
        let d = core.tx.pool[slot as usize];
        core.tx.pool_free.push(slot);
        let first = d.window_offset() / g;
        let chunks = d.len().div_ceil(g);
        for k in 0..chunks {
            if let Some(p) = core.tx.data_xlt.remove(RingKey {
                queue: qi as u16,
                index: ((first + k) % w) as u16,
            }) {
                core.tx.chunks_free.push(p);
            }
        }
        let q = &mut core.tx.queues[qi];
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

// ---------------------------------------------------------------------------------------------
// Rx
// ---------------------------------------------------------------------------------------------

/// Delivers received packets to the accelerator and recycles finished buffers in order.
fn deliver_receives(
    core: &mut FldCore,
    mut accel: Option<&mut (dyn Accelerator + 'static)>,
) -> usize {
    let mut n = 0;
    while let Some(c) = core.rx_cqes.pop_front() {
        n += 1;
        core.rx_cq_ci = core.rx_cq_ci.wrapping_add(1);
        core.cq_doorbells_due = true;
        if !core.rx.enabled || c.queue() as u32 != core.rx.rqn & 0xffff {
            core.bump(Stat::UnknownCqes);
            continue;
        }
        if c.opcode() == nic::CQE_RESP_ERR {
            core.bump(Stat::RxErrorCompletions);
            continue;
        }
        if c.flags() & nic::cqe_flags::FILLER == 0 {
            let len = c.counter_or_len() as usize;
            let wqe = core.rx.wqe_bytes();
            let at = core.rx.cursor as usize * wqe
                + ((c.stride_or_syndrome() as usize) << core.rx.log_stride);
            core.stats[Stat::RxPackets as usize] += 1;
            core.stats[Stat::RxBytes as usize] += len as u64;
            let (context, resume_table) = split_accelerate_tag(c.flow_tag());
            let meta = RxMeta {
                queue: 0,
                context,
                resume_table,
                csum: c.csum(),
                rss_hash: c.rss_hash(),
                len: len as u32,
            };
            let accepted = match (accel.as_deref_mut(), core.rx.buffer.get(at..at + len)) {
                (Some(a), Some(_)) => {
                    // The packet is copied out of the Rx buffer onto the stream, so the
                    // buffer space is free as soon as the WQE is done.
                    let pkt = core.rx.buffer[at..at + len].to_vec();
                    a.receive(&meta, &pkt, &mut TxView { core })
                }
                _ => false,
            };
            if !accepted {
                core.bump(Stat::RxAcceleratorDrops);
            }
        }
        if c.flags() & nic::cqe_flags::WQE_DONE != 0 {
            core.rx.cursor = (core.rx.cursor + 1) % (1 << core.rx.log_wqes);
            core.rx.pi = core.rx.pi.wrapping_add(1);
            core.rx.doorbell_due = true;
            core.bump(Stat::RxRecycledWqes);
        }
    }
    n
}

/// P2P doorbell writes to the NIC: SQ producers, the RQ producer, CQ consumers.
fn ring_doorbells(core: &mut FldCore, fabric: &Fabric, fid: FunctionId) -> usize {
    if core.nic_doorbell == 0 {
        return 0;
    }
    let base = core.nic_doorbell;
    let mut dma = fabric.dma(fid);
    let mut n = 0;
    for q in core.tx.queues.iter_mut().filter(|q| q.doorbell_due) {
        q.doorbell_due = false;
        let _ = dma.write(
            base + nic::db::SQ_BASE + 4 * q.sqn as u64,
            &(q.pi & 0xffff).to_le_bytes(),
        );
        n += 1;
    }
    if core.rx.doorbell_due {
        core.rx.doorbell_due = false;
        let _ = dma.write(
            base + nic::db::RQ_BASE + 4 * core.rx.rqn as u64,
            &(core.rx.pi & 0xffff).to_le_bytes(),
        );
        n += 1;
    }
    if core.cq_doorbells_due {
        core.cq_doorbells_due = false;
        for (cqn, ci) in [(core.tx_cqn, core.tx_cq_ci), (core.rx_cqn, core.rx_cq_ci)] {
            if cqn != u32::MAX {
                let _ = dma.write(
                    base + nic::db::CQ_BASE + 4 * cqn as u64,
                    &nic::db::ci_value(ci, 0, false).to_le_bytes(),
                );
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fld::memory_model::MemoryParams;
    use proptest::prelude::*;

    /// A small FLD: 4 queues, a 16-descriptor pool and 25 chunks of 256 bytes.
    fn small() -> FldCore {
        let p = MemoryParams {
            bandwidth_gbps: 1.0,
            min_packet: 256,
            max_packet: 2048,
            rx_lifetime_us: 5.0,
            tx_lifetime_us: 25.0,
            tx_queues: 4,
        };
        let mut core = FldCore::new(memory_model::geometry(&p));
        for (i, q) in core.tx.queues.iter_mut().enumerate() {
            q.enabled = true;
            q.sqn = 100 + i as u32;
        }
        core
    }

    /// Physical chunks of every posted descriptor: no chunk twice, none also free, and every
    /// chunk accounted for.
    fn check_no_aliasing(core: &FldCore) {
        let g = core.geo.tx_chunk;
        let w = core.window_chunks();
        let mask = (1u32 << core.geo.log_tx_ring) - 1;
        let mut owner = vec![None; core.geo.tx_chunks as usize];
        for &p in &core.tx.chunks_free {
            assert!(
                owner[p as usize].replace(usize::MAX).is_none(),
                "chunk {p} free twice"
            );
        }
        for (qi, q) in core.tx.queues.iter().enumerate() {
            let mut i = q.ci;
            while i != q.pi {
                let slot = core
                    .tx
                    .ring_xlt
                    .lookup(RingKey {
                        queue: qi as u16,
                        index: (i & mask) as u16,
                    })
                    .expect("posted descriptor is mapped");
                let d = core.tx.pool[slot as usize];
                for k in 0..d.len().div_ceil(g) {
                    let v = (d.window_offset() / g + k) % w;
                    let p = core
                        .tx
                        .data_xlt
                        .lookup(RingKey {
                            queue: qi as u16,
                            index: v as u16,
                        })
                        .expect("live chunk is mapped");
                    assert!(owner[p as usize].replace(qi).is_none(), "chunk {p} aliased");
                }
                i = i.wrapping_add(1);
            }
        }
        assert!(owner.iter().all(|o| o.is_some()), "a chunk leaked");
        let posted: u32 = core.tx.queues.iter().map(|q| q.pi.wrapping_sub(q.ci)).sum();
        // The all-ones slot is reserved as the empty-bucket code.
        assert_eq!(
            posted as usize + core.tx.pool_free.len(),
            core.tx.pool.len() - 1,
            "descriptor leak"
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Send { queue: u16, len: usize },
        Complete { queue: u16, back: u32 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u16..5, 1usize..2100).prop_map(|(queue, len)| Op::Send { queue, len }),
            1 => (0u16..4, 0u32..8).prop_map(|(queue, back)| Op::Complete { queue, back }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Random sends and (selective) completions: the translation tables never map one
        /// physical chunk twice, credits never promise what a send then refuses, and once
        /// everything completes every credit is back.
        #[test]
        fn translation_never_aliases_and_credits_conserve(ops in proptest::collection::vec(op(), 1..300)) {
            let mut core = small();
            let initial: Vec<Credits> = (0..4).map(|q| TxView { core: &mut core }.credits(q)).collect();
            for op in ops {
                match op {
                    Op::Send { queue, len } => {
                        let before = TxView { core: &mut core }.credits(queue);
                        let r = TxView { core: &mut core }.send(&TxMeta { queue, cs_flags: 0 , resume_table: None}, &vec![queue as u8; len]);
                        if queue >= 4 {
                            prop_assert_eq!(r, Err(TxRefused::UnknownQueue));
                        } else if len > 2048 {
                            prop_assert_eq!(r, Err(TxRefused::BadLength));
                        } else if before.packets > 0 && len.div_ceil(256) as u32 * 256 <= before.bytes {
                            prop_assert_eq!(r, Ok(()), "credits {:?} promised room for {}", before, len);
                        }
                    }
                    Op::Complete { queue, back } => {
                        let q = &core.tx.queues[queue as usize];
                        if q.pi != q.ci {
                            let inflight = q.pi.wrapping_sub(q.ci);
                            let upto = q.ci.wrapping_add(inflight.saturating_sub(1).min(back)) as u16;
                            release_through(&mut core, queue as usize, upto);
                        }
                    }
                }
                check_no_aliasing(&core);
            }
            for q in 0..4u16 {
                let pi = core.tx.queues[q as usize].pi;
                if pi != core.tx.queues[q as usize].ci {
                    release_through(&mut core, q as usize, pi.wrapping_sub(1) as u16);
                }
            }
            check_no_aliasing(&core);
            let end: Vec<Credits> = (0..4).map(|q| TxView { core: &mut core }.credits(q)).collect();
            prop_assert_eq!(initial, end);
        }
    }

    #[test]
    fn generated_data_reads_follow_the_translation_across_chunks() {
        let mut core = small();
        let pkt: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        // Fragment the free list so the packet's chunks are not physically contiguous.
        core.tx.chunks_free.reverse();
        TxView { core: &mut core }
            .send(
                &TxMeta {
                    queue: 2,
                    cs_flags: 0,
                    resume_table: None,
                },
                &pkt,
            )
            .unwrap();
        let d = core.tx.pool[core
            .tx
            .ring_xlt
            .lookup(RingKey { queue: 2, index: 0 })
            .unwrap() as usize];
        let mut out = vec![0u8; 1000];
        let base = 2 * core.geo.tx_window_bytes() + d.window_offset() as u64;
        read_tx_data(&mut core, base, &mut out);
        assert_eq!(out, pkt);
        assert_eq!(core.stats[Stat::BadWindowAccesses as usize], 0);
    }
}
