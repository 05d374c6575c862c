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
//! The blocks: [`regs`] (the driver's control registers), [`tx`] (Tx module), [`rx`] (Rx
//! module); this file is the PCIe function, the NIC-facing BAR decoder and the engine step.
//!
//! FLD-R (§5.3, §6): a Tx queue bound with `TXQ_RDMA` is a NIC queue pair; FLD generates RDMA
//! WQEs for it and rings the QP's doorbell, and its receives come through the shared RQ.
//!
//! Left out: per-queue Rx (one shared RQ serves all); READ and atomics on FLD-R queues.

pub mod cuckoo;
pub mod memory_model;
pub mod perf_model;
mod regs;
mod rx;
mod tx;

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use zerocopy::FromBytes;

use crate::accel::{Accelerator, TxStream};
use crate::fabric::Fabric;
use crate::pcie::{BarSpec, ConfigSpace, FunctionId, Identity, PciFunction, PciState};
use fld_abi::fld::*;
use fld_abi::nic;
use rx::RxEngine;
use tx::{TxEngine, TxView};

/// FLD's statistics counters (BAR0 `STATS_BASE`, indexed by [`Stat`]).
#[derive(Clone)]
pub(crate) struct Stats([u64; STAT_COUNT]);

/// FLD's state at a quiescent point ([`FldFunction::snapshot`]): no packet anywhere in it, so
/// the descriptor pool, the translation tables, the buffers and the completion queues hold
/// what power-on left; what remains is what the control plane set, and the counts.
pub struct FldSnapshot {
    nic_doorbell: u64,
    tx_cqn: u32,
    rx_cqn: u32,
    tx: tx::TxSettings,
    rx: rx::RxSettings,
    cq_doorbells_due: bool,
    stats: Stats,
}

impl Stats {
    fn bump(&mut self, s: Stat) {
        self.0[s as usize] += 1;
    }
    fn add(&mut self, s: Stat, n: u64) {
        self.0[s as usize] += n;
    }
}

/// Everything behind FLD's lock.
struct FldCore {
    geo: FldGeometry,
    nic_doorbell: u64,
    tx_cqn: u32,
    rx_cqn: u32,
    tx: TxEngine,
    rx: RxEngine,
    /// Completions were consumed: the CQ consumer counters are due to the NIC.
    cq_doorbells_due: bool,
    stats: Stats,
    accel: Option<Box<dyn Accelerator>>,
}

impl FldCore {
    fn new(geo: FldGeometry) -> Self {
        Self::with_tx(geo, TxEngine::new(&geo))
    }

    fn with_tx(geo: FldGeometry, tx: TxEngine) -> Self {
        FldCore {
            nic_doorbell: 0,
            tx_cqn: u32::MAX,
            rx_cqn: u32::MAX,
            tx,
            rx: RxEngine::new(&geo),
            cq_doorbells_due: false,
            stats: Stats([0; STAT_COUNT]),
            accel: None,
            geo,
        }
    }

    /// Back to the power-on state; the accelerator stays plugged in, and the translation
    /// tables keep their hash functions (fixed in the hardware) and lose their entries.
    fn reset(&mut self) {
        let accel = self.accel.take();
        let tx = self.tx.emptied(&self.geo);
        *self = FldCore::with_tx(self.geo, tx);
        self.accel = accel;
    }

    /// See [`FldSnapshot`]; `None` while a packet is anywhere in FLD. Every field is named, so
    /// one added to the core must be placed here.
    fn snapshot(&self) -> Option<FldSnapshot> {
        let FldCore {
            geo,
            nic_doorbell,
            tx_cqn,
            rx_cqn,
            tx,
            rx,
            cq_doorbells_due,
            stats,
            accel: _,
        } = self;
        Some(FldSnapshot {
            nic_doorbell: *nic_doorbell,
            tx_cqn: *tx_cqn,
            rx_cqn: *rx_cqn,
            tx: tx.settings(geo)?,
            rx: rx.settings()?,
            cq_doorbells_due: *cq_doorbells_due,
            stats: stats.clone(),
        })
    }

    /// Returns to `s`: a reset that keeps the buffers' allocations, then the settings.
    fn restore(&mut self, s: &FldSnapshot) {
        let rx_buffer = std::mem::take(&mut self.rx.buffer);
        self.reset();
        self.nic_doorbell = s.nic_doorbell;
        self.tx_cqn = s.tx_cqn;
        self.rx_cqn = s.rx_cqn;
        self.tx.apply(&s.tx);
        self.rx.apply(&s.rx, rx_buffer);
        self.cq_doorbells_due = s.cq_doorbells_due;
        self.stats.clone_from(&s.stats);
    }

    /// The tx stream as the accelerator sees it.
    fn tx_view(&mut self) -> TxView<'_> {
        TxView {
            tx: &mut self.tx,
            stats: &mut self.stats,
            geo: self.geo,
        }
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
            .bucket_memory_bytes(g.tx_queues, g.window_chunks());
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

    /// The NIC reads FLD's BAR2 (`bar2` gives its bus address, which only the generated WQEs
    /// need): a Tx-ring window (WQEs generated on the fly), a Tx-data window (through the
    /// translation table) or the Rx buffer.
    fn nic_read(&mut self, bar2: impl FnOnce() -> u64, offset: u64, data: &mut [u8]) {
        let g = self.geo;
        let len = data.len() as u64;
        let Some(end) = offset.checked_add(len) else {
            self.stats.bump(Stat::BadWindowAccesses);
            return data.fill(FILL_PATTERN);
        };
        if end <= g.tx_data_base() && offset < g.tx_queues as u64 * g.tx_ring_bytes() {
            return self.tx.read_ring(&g, &mut self.stats, bar2(), offset, data);
        }
        if offset >= g.tx_data_base()
            && end <= g.tx_data_base() + g.tx_queues as u64 * g.tx_window_bytes()
        {
            return self
                .tx
                .read_data(&g, &mut self.stats, offset - g.tx_data_base(), data);
        }
        let rx = g.rx_buffer_base();
        if offset >= rx && end <= rx + self.rx.buffer.len() as u64 {
            let o = (offset - rx) as usize;
            data.copy_from_slice(&self.rx.buffer[o..o + data.len()]);
            return;
        }
        self.stats.bump(Stat::BadWindowAccesses);
        data.fill(FILL_PATTERN);
    }

    /// The NIC writes FLD's BAR2: packets into the Rx buffer, whole 64-byte CQEs into a CQ
    /// window (compressed to 15 bytes on arrival, §5.2; a run of consecutive CQEs in one
    /// access, compressed in order). Anything else is a counted bad access.
    fn nic_write(&mut self, offset: u64, data: &[u8]) {
        let g = self.geo;
        let len = data.len() as u64;
        let Some(end) = offset.checked_add(len) else {
            return self.stats.bump(Stat::BadWindowAccesses);
        };
        let rx = g.rx_buffer_base();
        if offset >= rx && end <= rx + self.rx.buffer.len() as u64 {
            let o = (offset - rx) as usize;
            self.rx.buffer[o..o + data.len()].copy_from_slice(data);
            return;
        }
        let cqe_size = nic::CQE_SIZE as u64;
        for (base, log, is_tx) in [
            (g.tx_cq_base(), g.log_tx_cq, true),
            (g.rx_cq_base(), g.log_rx_cq, false),
        ] {
            if offset >= base && end <= base + (cqe_size << log) {
                if len == 0
                    || !len.is_multiple_of(cqe_size)
                    || !(offset - base).is_multiple_of(cqe_size)
                {
                    return self.stats.bump(Stat::BadWindowAccesses);
                }
                let ring = if is_tx {
                    &mut self.tx.cqes
                } else {
                    &mut self.rx.cqes
                };
                for bytes in data.chunks_exact(nic::CQE_SIZE) {
                    let Ok(cqe) = nic::Cqe::read_from_bytes(bytes) else {
                        continue;
                    };
                    if ring.len() >= 1 << log {
                        self.stats.bump(Stat::UnknownCqes);
                    } else {
                        ring.push_back(CompressedCqe::compress(&cqe));
                    }
                }
                return;
            }
        }
        self.stats.bump(Stat::BadWindowAccesses);
    }
}

/// Handles the host and the engine share.
struct FldShared {
    /// Weak: the fabric holds this function (see the NIC's).
    fabric: Weak<Fabric>,
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
            fabric: Arc::downgrade(fabric),
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

    /// FLD's state as it is, to return to ([`FldFunction::restore`]); `None` while a packet is
    /// anywhere in it (a card brought up by its control plane has none). The accelerator is
    /// not part of it: it is plugged in, not FLD's state.
    pub fn snapshot(&self) -> Option<FldSnapshot> {
        self.shared.lock().snapshot()
    }

    /// Returns to `s`, taken of this FLD by [`FldFunction::snapshot`]; the accelerator stays.
    pub fn restore(&self, s: &FldSnapshot) {
        self.shared.lock().restore(s);
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
        self.shared.lock().stats.0[s as usize]
    }

    /// Bytes of on-chip memory per structure (indexed by [`MemoryItem`]).
    pub fn memory_report(&self) -> [u64; MEMORY_ITEMS] {
        self.shared.lock().memory_report()
    }

    /// The tx stream as the accelerator sees it, for callers outside an accelerator callback
    /// (tests, host-side models).
    pub fn with_tx_stream<R>(&self, f: impl FnOnce(&mut dyn TxStream) -> R) -> R {
        f(&mut self.shared.lock().tx_view())
    }

    /// Returns once the step running at the call, if any, has ended (see
    /// [`crate::nic::Nic::wait_for_pass`]).
    pub fn wait_for_pass(&self) {
        drop(self.shared.lock());
    }

    /// One engine step: completions, receive delivery, accelerator poll, doorbells. Returns the
    /// work done.
    pub fn poll(&self) -> usize {
        let mut guard = self.shared.lock();
        let core = &mut *guard;
        let mut work = 0;
        // Background cuckoo relocation (§5.2): a few stash entries move back per step.
        work += core.tx.ring_xlt.relocate(4) + core.tx.data_xlt.relocate(4);
        let (geo, stats) = (core.geo, &mut core.stats);
        let completions = core.tx.process_completions(&geo, stats);
        let mut accel = core.accel.take();
        let received =
            rx::deliver_receives(&mut core.rx, &mut core.tx, stats, geo, accel.as_deref_mut());
        core.cq_doorbells_due |= completions + received > 0;
        work += completions + received;
        if let Some(a) = accel.as_deref_mut() {
            work += a.poll(&mut core.tx_view());
        }
        core.accel = accel;
        let due =
            !core.tx.doorbells_due.is_empty() || core.rx.doorbell_due || core.cq_doorbells_due;
        if due {
            if let Some(fabric) = self.shared.fabric.upgrade() {
                work += ring_doorbells(core, &fabric, self.pci.id, self.bar2_base());
            }
        }
        work
    }

    fn bar2_base(&self) -> u64 {
        self.pci.config().bar_address(BAR_NIC).unwrap_or(0)
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
                    *b = (regs::read(&core, o & !3) >> ((o % 4) * 8)) as u8;
                }
            }
            BAR_NIC => {
                // The BAR's address is in config space, behind its own lock: read it only for
                // the Tx-ring window.
                core.nic_read(|| self.bar2_base(), offset, data)
            }
            _ => data.fill(0xff),
        }
    }

    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]) {
        let mut core = self.shared.lock();
        match bar {
            BAR_CONTROL if offset.is_multiple_of(4) && data.len().is_multiple_of(4) => {
                for (i, c) in data.chunks_exact(4).enumerate() {
                    regs::write(
                        &mut core,
                        offset + 4 * i as u64,
                        u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    );
                }
            }
            BAR_NIC => core.nic_write(offset, data),
            _ => {}
        }
    }

    fn reset(&self) {
        self.shared.lock().reset();
    }
}

/// P2P doorbell writes to the NIC: SQ producers, the RQ producer, CQ consumers.
fn ring_doorbells(core: &mut FldCore, fabric: &Fabric, fid: FunctionId, bar2: u64) -> usize {
    if core.nic_doorbell == 0 {
        return 0;
    }
    // Software sets the base anywhere: a doorbell's address wraps as a 64-bit adder's sum
    // does, and the fabric answers wherever it lands.
    let base = core.nic_doorbell;
    let at = |offset: u64| base.wrapping_add(offset);
    let mut dma = fabric.dma(fid);
    let mut n = 0;
    for k in 0..core.tx.doorbells_due.len() {
        let qi = core.tx.doorbells_due[k] as usize;
        // A queue rebound since it became due has nothing to ring.
        let Some(q) = core.tx.queues.get(qi).filter(|q| q.doorbell_due) else {
            continue;
        };
        let (rdma, sqn, pi) = (q.rdma, q.sqn, q.pi);
        let (slot, buffer) = if rdma {
            let i = sqn.wrapping_sub(nic::QPN_BASE) % nic::db::QP_SLOTS;
            (
                nic::db::slot(nic::db::QP_SQ_BASE, i),
                nic::db::wqe_buffer(nic::db::QP_SQ_WQE_BASE, i),
            )
        } else {
            (
                nic::db::slot(nic::db::SQ_BASE, sqn),
                nic::db::wqe_buffer(nic::db::SQ_WQE_BASE, sqn),
            )
        };
        if let Some((counter, wqe)) = core.tx.lone_wqe(&core.geo, bar2, qi) {
            // The NIC's §4.1 order: seal cleared, the WQE, the seal naming it, the doorbell.
            let seal = at(buffer + nic::db::WQE_SEAL_OFFSET);
            let _ = dma.write(seal, &0u32.to_le_bytes());
            let _ = dma.write(at(buffer), &wqe);
            let _ = dma.write(seal, &nic::db::wqe_seal(counter, 1).to_le_bytes());
        }
        let _ = dma.write(at(slot), &(pi & 0xffff).to_le_bytes());
        let q = &mut core.tx.queues[qi];
        q.doorbell_due = false;
        q.rung = pi;
        n += 1;
    }
    core.tx.doorbells_due.clear();
    if core.rx.doorbell_due {
        core.rx.doorbell_due = false;
        let _ = dma.write(
            at(nic::db::RQ_BASE + 4 * core.rx.rqn as u64),
            &(core.rx.pi & 0xffff).to_le_bytes(),
        );
        n += 1;
    }
    if core.cq_doorbells_due {
        core.cq_doorbells_due = false;
        for (cqn, ci) in [(core.tx_cqn, core.tx.cq_ci), (core.rx_cqn, core.rx.cq_ci)] {
            if cqn != u32::MAX {
                let _ = dma.write(
                    at(nic::db::CQ_BASE + 4 * cqn as u64),
                    &nic::db::ci_value(ci, 0, false).to_le_bytes(),
                );
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::cuckoo::RingKey;
    use super::*;
    use crate::accel::{Credits, TxMeta, TxRefused};
    use crate::fld::memory_model::MemoryParams;
    use proptest::prelude::*;

    /// A card whose FLD has four Tx queues (Table 2a otherwise), behind the driver mock with
    /// `mapped` bytes of host memory.
    fn four_queue_card(mapped: usize) -> crate::mock::MockHost {
        crate::mock::MockHost::card(
            crate::card::CardConfig {
                fld: MemoryParams {
                    tx_queues: 4,
                    ..MemoryParams::table_2a()
                },
                ..Default::default()
            },
            mapped,
        )
    }

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
        let w = core.geo.window_chunks();
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
            let initial: Vec<Credits> = (0..4).map(|q| core.tx_view().credits(q)).collect();
            for op in ops {
                match op {
                    Op::Send { queue, len } => {
                        let before = core.tx_view().credits(queue);
                        let r = core.tx_view().send(&TxMeta { queue, cs_flags: 0 , resume_table: None, rdma: None }, &vec![queue as u8; len]);
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
                            core.tx.release_through(&core.geo, queue as usize, upto);
                        }
                    }
                }
                check_no_aliasing(&core);
            }
            for q in 0..4u16 {
                let pi = core.tx.queues[q as usize].pi;
                if pi != core.tx.queues[q as usize].ci {
                    core.tx.release_through(&core.geo, q as usize, pi.wrapping_sub(1) as u16);
                }
            }
            check_no_aliasing(&core);
            let end: Vec<Credits> = (0..4).map(|q| core.tx_view().credits(q)).collect();
            prop_assert_eq!(initial, end);
        }
    }

    /// One packet of a tx burst: the queue (4 is unbound; 1 is disabled, 2 in error when the
    /// burst says so), its length (0 and past the maximum are refused) and an RDMA operation
    /// (which an Ethernet queue refuses).
    fn burst_packet() -> impl Strategy<Value = (u16, usize, bool)> {
        (
            prop_oneof![6 => Just(0u16), 1 => 1u16..5],
            prop_oneof![8 => 1usize..700, 1 => Just(0usize), 1 => 2040usize..2100],
            proptest::bool::weighted(0.05),
        )
    }

    /// Everything a send can change in the Tx module, in a comparable form: the queues, the
    /// pool, the free lists, the buffer, the doorbells due, the counters, and every mapping of
    /// both translation tables.
    fn tx_state(core: &FldCore) -> impl PartialEq + std::fmt::Debug {
        let tx = &core.tx;
        let ring = 1u32 << core.geo.log_tx_ring;
        let window = core.geo.window_chunks();
        let mappings = |t: &cuckoo::CuckooTable, n: u32| -> Vec<Option<u32>> {
            (0..core.geo.tx_queues as u16)
                .flat_map(|queue| (0..n).map(move |i| (queue, i as u16)))
                .map(|(queue, index)| t.lookup(RingKey { queue, index }))
                .collect()
        };
        (
            tx.queues.clone(),
            tx.pool.clone(),
            (
                tx.pool_free.clone(),
                tx.chunks_free.clone(),
                tx.chunks_touched,
            ),
            tx.buffer.clone(),
            tx.doorbells_due.clone(),
            core.stats.0,
            (mappings(&tx.ring_xlt, ring), mappings(&tx.data_xlt, window)),
            (tx.ring_xlt.stash_len(), tx.data_xlt.stash_len()),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(150))]

        /// A tx burst does to FLD what the same packets sent one by one do, stopping at the
        /// first refused: the same answer, the same queues, pool, tables, buffer and counters,
        /// through credits running out, bad lengths, unbound, disabled and failed queues, and
        /// completions returning credits between bursts.
        #[test]
        fn a_tx_burst_posts_what_the_same_sends_one_by_one_post(
            bursts in proptest::collection::vec(
                (proptest::collection::vec(burst_packet(), 0..20), any::<bool>(), 0u32..12),
                1..25,
            )
        ) {
            let (mut burst_core, mut one_core) = (small(), small());
            for core in [&mut burst_core, &mut one_core] {
                core.tx.queues[1].enabled = false;
            }
            let mut batch = crate::accel::TxBatch::default();
            for (packets, fail_queue_2, complete) in bursts {
                for core in [&mut burst_core, &mut one_core] {
                    core.tx.queues[2].error = fail_queue_2;
                    core.tx.queues[2].enabled = !fail_queue_2;
                    // Completions for up to `complete` of each queue's oldest packets.
                    for q in 0..4 {
                        let (pi, ci) = (core.tx.queues[q].pi, core.tx.queues[q].ci);
                        if pi != ci && complete > 0 {
                            let upto = ci.wrapping_add(pi.wrapping_sub(ci).min(complete) - 1);
                            core.tx.release_through(&core.geo, q, upto as u16);
                        }
                    }
                }
                batch.clear();
                for (i, &(queue, len, rdma)) in packets.iter().enumerate() {
                    let meta = TxMeta {
                        queue,
                        cs_flags: (i % 4) as u8,
                        resume_table: (i % 3 == 0).then_some(i as u8),
                        rdma: rdma.then_some(crate::accel::RdmaOp::Send),
                    };
                    batch.push_with(meta, |b| b.extend((0..len).map(|k| (k * 7 + i) as u8)));
                }
                let answer = burst_core.tx_view().send_burst(batch.burst(0));
                let mut one = (packets.len(), None);
                for i in 0..batch.len() {
                    let (meta, data) = batch.get(i).unwrap();
                    if let Err(e) = one_core.tx_view().send(meta, data) {
                        one = (i, Some(e));
                        break;
                    }
                }
                prop_assert_eq!(answer, one);
                prop_assert_eq!(tx_state(&burst_core), tx_state(&one_core));
            }
        }
    }

    /// The NIC may read the Tx-ring window in any pieces: the generated WQEs read in pieces
    /// that cut them anywhere are the bytes of a read of whole WQEs, and a slot with no
    /// descriptor reads as the fill pattern (counted as a bad window access).
    #[test]
    fn the_tx_ring_window_reads_the_same_in_any_pieces() {
        let mut core = small();
        for (i, len) in [60usize, 300, 1000].into_iter().enumerate() {
            let meta = TxMeta {
                queue: 1,
                cs_flags: i as u8,
                resume_table: (i == 1).then_some(3),
                rdma: None,
            };
            core.tx_view().send(&meta, &vec![i as u8; len]).unwrap();
        }
        let ring = core.geo.tx_ring_bytes();
        let bar2 = 0x80_0000_0000;
        // Queue 1's three WQEs and the empty slot after them.
        let mut whole = vec![0u8; 4 * nic::WQEBB];
        let (tx, geo) = (&core.tx, &core.geo);
        tx.read_ring(geo, &mut core.stats, bar2, ring, &mut whole);
        assert_eq!(core.stats.0[Stat::BadWindowAccesses as usize], 1);
        assert!(whole[3 * nic::WQEBB..].iter().all(|&b| b == FILL_PATTERN));
        for (k, wqe) in whole[..3 * nic::WQEBB].chunks(nic::WQEBB).enumerate() {
            let view = nic::SendWqeView::new_checked(wqe).expect("a send WQE");
            assert_eq!(view.ctrl().wqe_index.get(), k as u16);
        }
        for piece in [1usize, 7, 24, 64, 100] {
            let mut pieces = vec![0u8; whole.len()];
            for (n, chunk) in pieces.chunks_mut(piece).enumerate() {
                let at = ring + (n * piece) as u64;
                tx.read_ring(geo, &mut core.stats, bar2, at, chunk);
            }
            assert_eq!(pieces, whole, "read in pieces of {piece} bytes");
        }
    }

    #[test]
    fn generated_data_reads_follow_the_translation_across_chunks() {
        let mut core = small();
        let pkt: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        // Fragment the free list so the packet's chunks are not physically contiguous.
        core.tx.chunks_free.reverse();
        core.tx_view()
            .send(
                &TxMeta {
                    queue: 2,
                    cs_flags: 0,
                    resume_table: None,
                    rdma: None,
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
        core.tx
            .read_data(&core.geo, &mut core.stats, base, &mut out);
        assert_eq!(out, pkt);
        assert_eq!(core.stats.0[Stat::BadWindowAccesses as usize], 0);
    }

    /// A queue's virtual head is a free-running 32-bit count of window chunks, as a hardware
    /// pointer is: a queue that never goes idle reaches 2^32, and its next packet, skipping to
    /// the window's start, wraps the count. The packet lands whole at window offset 0, and its
    /// release frees every chunk it took.
    #[test]
    fn the_virtual_window_head_wraps_at_two_to_the_32() {
        let mut core = small();
        let w = core.geo.window_chunks();
        let free = core.tx.chunks_free.len();
        let near_top = u32::MAX - 2;
        assert!(
            near_top % w + 4 > w,
            "the 4-chunk packet must skip to the window start"
        );
        let (head, tail) = core.tx.queues[2].window_counters();
        (*head, *tail) = (near_top, near_top);
        let pkt: Vec<u8> = (0..1000u32).map(|i| (i * 11 + 5) as u8).collect();
        let meta = TxMeta {
            queue: 2,
            cs_flags: 0,
            resume_table: None,
            rdma: None,
        };
        core.tx_view().send(&meta, &pkt).unwrap();
        assert_eq!(
            *core.tx.queues[2].window_counters().0,
            4,
            "wrapped past 2^32"
        );
        let slot = core.tx.ring_xlt.lookup(RingKey { queue: 2, index: 0 });
        let d = core.tx.pool[slot.unwrap() as usize];
        assert_eq!(d.window_offset(), 0);
        let mut out = vec![0u8; 1000];
        let base = 2 * core.geo.tx_window_bytes();
        core.tx
            .read_data(&core.geo, &mut core.stats, base, &mut out);
        assert_eq!(out, pkt);
        core.tx.release_through(&core.geo, 2, 0);
        assert_eq!(core.tx.chunks_free.len(), free, "every chunk back");
        assert_eq!(core.stats.0[Stat::BadWindowAccesses as usize], 0);
    }

    /// A reset zeroes the Tx buffer wherever a packet was written, whichever chunks the free
    /// list handed out, and leaves the engine as a new one's: after it, no byte of an earlier
    /// packet is in the buffer and the whole buffer is handed out again from the first chunk.
    #[test]
    fn a_reset_zeroes_every_chunk_a_packet_was_written_to() {
        let mut core = small();
        let fresh = small();
        // The free list scattered, so the packets' chunks lie anywhere in the buffer.
        core.tx.chunks_free.reverse();
        core.tx.chunks_free.rotate_left(7);
        let meta = |queue| TxMeta {
            queue,
            cs_flags: 0,
            resume_table: None,
            rdma: None,
        };
        for (q, len) in [(0u16, 1000usize), (1, 300), (3, 2048)] {
            let pkt = vec![0xa5u8; len];
            core.tx_view().send(&meta(q), &pkt).unwrap();
        }
        assert_eq!(core.tx.buffer.iter().filter(|&&b| b == 0xa5).count(), 3348);
        assert!(
            core.tx.chunks_touched > core.geo.tx_chunks - 8,
            "chunks near the end were used"
        );
        core.reset();
        assert_eq!(core.tx.chunks_touched, 0);
        assert!(
            core.tx.buffer.iter().all(|&b| b == 0),
            "an earlier packet's bytes"
        );
        assert_eq!(core.tx.buffer.len(), fresh.tx.buffer.len());
        assert_eq!(core.tx.chunks_free, FldCore::new(core.geo).tx.chunks_free);
    }

    /// FLD-E bound by the device crate's own driver mock: a frame function 1 sends to function
    /// 0 crosses the eSwitch into FLD (peer-to-peer), the echo accelerator swaps its MAC
    /// addresses, and FLD's generated WQE sends it back through the NIC; every completion
    /// returns FLD's credits.
    #[test]
    fn flde_echo_through_the_driver_mock() {
        let h = four_queue_card(8 << 20);
        let fld = h.fld.clone().expect("FLD");
        fld.set_accelerator(Box::new(crate::accel::Echo::new(0, 16)));
        let binding = h.bind_fld(1);
        let mut client = h.open_port(1);
        let full = h.fld_reg(reg::TXQ_BASE + 4);
        for len in [60usize, 64, 1000, 1514] {
            let mut f: Vec<u8> = (0..len).map(|k| (k * 7) as u8).collect();
            f[..6].copy_from_slice(&h.nic_mac(0));
            f[6..12].copy_from_slice(&h.nic_mac(1));
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
            client.send(&h, &f, 0);
            h.run(1000);
            let (cqe, got) = client.receive(&h).expect("echo");
            assert_eq!(cqe.opcode(), nic::CQE_RESP_SEND);
            let mut want = f.clone();
            want[..6].copy_from_slice(&f[6..12]);
            want[6..12].copy_from_slice(&f[..6]);
            assert_eq!(got, want, "{len} bytes");
        }
        assert_eq!(fld.stat(Stat::RxPackets), 4);
        assert_eq!(fld.stat(Stat::TxPackets), 4);
        assert_eq!(h.fld_reg(reg::TXQ_BASE + 4), full, "credits returned");
        assert_eq!(binding.sqns.len(), 1);
        assert!(h.guard_intact());
    }

    /// FLD-R through the driver mock: a client QP on NIC function 1 sends messages of one to
    /// sixteen packets to an FLD-R QP bound to FLD queue 1; the NIC places each packet in the
    /// shared multi-packet RQ as it arrives, the echo accelerator reassembles the message and
    /// sends it back as one SEND (with the same immediate), which the NIC segments again. The
    /// client receives every message byte-exact; every Tx credit comes back after the ACKs.
    #[test]
    fn fldr_echo_through_the_driver_mock() {
        use fld_abi::nic::{RdmaWqe, WqeData, CQE_REQ, WQE_OP_SEND, WQE_OP_SEND_IMM};
        let h = four_queue_card(16 << 20);
        let fld = h.fld.clone().expect("FLD");
        fld.set_accelerator(Box::new(crate::accel::rdma::RdmaEcho::new(16384, 64)));
        let binding = h.bind_fld(1);
        let (mut client, _) = h.fldr_with_client(&binding, 1, 1 << 20);
        let credits = h.fld_reg(reg::TXQ_BASE + 16 + 8);
        for (i, len) in [1usize, 1000, 1024, 1025, 5000, 16000]
            .into_iter()
            .enumerate()
        {
            let msg: Vec<u8> = (0..len).map(|k| (k * 13 + i) as u8).collect();
            h.write(client.buf, &msg);
            let rx_at = 1 << 19;
            h.write(client.buf + rx_at, &vec![0u8; len]);
            let recv = client.sge(rx_at, 16384);
            client.post_recv(&h, &[recv]);
            let imm = (i % 2 == 1).then_some(0xfeed_0000 + i as u32);
            let send = [client.sge(0, len as u32)];
            client.post_send(
                &h,
                &RdmaWqe {
                    opcode: if imm.is_some() {
                        WQE_OP_SEND_IMM
                    } else {
                        WQE_OP_SEND
                    },
                    signal: true,
                    solicited: false,
                    fence: false,
                    imm: imm.unwrap_or(0),
                    remote: None,
                    atomic: None,
                    data: WqeData::Gather(&send),
                },
            );
            h.run(100_000);
            let mut got = Vec::new();
            while let Some(c) = client.cq.poll_cqe(&h) {
                got.push(c);
            }
            client.cq.update_ci(&h, 1, fld_abi::nic::db::CQ_BASE);
            assert_eq!(got.len(), 2, "{len} bytes: a send and a receive completion");
            let sent = got
                .iter()
                .find(|c| c.opcode() == CQE_REQ)
                .expect("send CQE");
            assert_eq!(sent.syndrome, 0);
            let r = got
                .iter()
                .find(|c| c.opcode() != CQE_REQ)
                .expect("receive CQE");
            assert_eq!(r.syndrome, 0, "{len} bytes");
            assert_eq!(r.byte_count.get() as usize, len);
            assert_eq!(r.imm.get(), imm.unwrap_or(0));
            let mut back = vec![0u8; len];
            h.read(client.buf + rx_at, &mut back);
            assert_eq!(back, msg, "{len} bytes echoed");
        }
        // 1 + 1 + 1 + 2 + 5 + 16 packets at the 1 KiB path MTU, one message each way per size.
        assert_eq!(fld.stat(Stat::RxPackets), 26);
        assert_eq!(fld.stat(Stat::TxPackets), 6);
        assert_eq!(fld.stat(Stat::RxAcceleratorDrops), 0);
        assert_eq!(fld.stat(Stat::UnknownCqes), 0);
        assert_eq!(h.fld_reg(reg::TXQ_BASE + 16 + 12), 0, "nothing in flight");
        assert_eq!(
            h.fld_reg(reg::TXQ_BASE + 16 + 8),
            credits,
            "credits returned"
        );
        assert!(h.guard_intact());
    }

    /// Bad use of an FLD-R queue by the accelerator is refused and counted, and nothing is
    /// lost: sends beyond the queue's credits are refused (the accelerator keeps them) while the
    /// accepted ones all arrive; an RDMA operation on an Ethernet queue is refused; a queue the
    /// control plane marked failed refuses sends; and a queue pair the NIC fails (its peer
    /// gone: retries exhausted) returns every credit and refuses sends until rebound.
    #[test]
    fn fldr_refuses_sends_beyond_credits_or_to_a_failed_queue() {
        use crate::accel::{RdmaOp, TxMeta, TxRefused};
        use fld_abi::nic::{qp_attr, QpAttr, QpState, CQE_RESP_SEND};
        let h = four_queue_card(16 << 20);
        h.nic.set_clock(Some(0));
        let fld = h.fld.clone().expect("FLD");
        let binding = h.bind_fld(1);
        let (mut client, fldr) = h.fldr_with_client(&binding, 1, 1 << 20);
        let full = h.fld_reg(reg::TXQ_BASE + 16 + 8);
        let meta = TxMeta {
            queue: 1,
            rdma: Some(RdmaOp::Send),
            ..Default::default()
        };
        // 16000-byte messages: the shared Tx buffer runs out before the client's 64 receives.
        let msg = |n: usize| vec![n as u8; 16000];
        // Beyond credits: refused, counted, and the accelerator still has the message.
        let mut accepted = 0;
        loop {
            match fld.with_tx_stream(|t| t.send(&meta, &msg(accepted))) {
                Ok(()) => accepted += 1,
                Err(e) => {
                    assert_eq!(e, TxRefused::NoCredit);
                    break;
                }
            }
        }
        assert!(accepted > 4, "{accepted} messages fit");
        assert_eq!(fld.stat(Stat::TxNoCredit), 1);
        assert!(
            accepted < 64,
            "{accepted} messages fit the client's receives"
        );
        for k in 0..accepted {
            let s = client.sge(k as u64 * 16384, 16384);
            client.post_recv(&h, &[s]);
        }
        h.run(100_000);
        let mut got = 0;
        while let Some(c) = client.cq.poll_cqe(&h) {
            assert_eq!((c.opcode(), c.byte_count.get()), (CQE_RESP_SEND, 16000));
            let mut b = vec![0u8; 16000];
            h.read(client.buf + got as u64 * 16384, &mut b);
            assert_eq!(b, msg(got), "message {got}");
            got += 1;
        }
        client.cq.update_ci(&h, 1, fld_abi::nic::db::CQ_BASE);
        assert_eq!(got, accepted, "every accepted message arrived");
        assert_eq!(h.fld_reg(reg::TXQ_BASE + 16 + 8), full, "credits back");
        // An RDMA operation for the Ethernet queue 0.
        let eth = TxMeta { queue: 0, ..meta };
        assert_eq!(
            fld.with_tx_stream(|t| t.send(&eth, b"x")),
            Err(TxRefused::NotRdma)
        );
        // The NIC fails the queue pair: the peer went away (its QP reset), so the message is
        // never acknowledged and the retries run out on the NIC's clock.
        let reset = QpAttr {
            qp_state: QpState::Reset as u8,
            ..Default::default()
        };
        assert!(h.modify_qp(1, client.qpn, qp_attr::STATE, &reset).ok());
        fld.with_tx_stream(|t| t.send(&meta, &msg(0))).unwrap();
        for step in 1..=20u64 {
            h.nic.set_clock(Some(step * 10_000_000));
            h.run(10_000);
        }
        assert_eq!(fld.stat(Stat::TxErrorCompletions), 1);
        assert_ne!(h.fld_reg(reg::TXQ_BASE + 16) & TXQ_ERROR, 0);
        assert_eq!(h.fld_reg(reg::TXQ_BASE + 16 + 12), 0, "nothing held");
        assert_eq!(
            fld.with_tx_stream(|t| t.send(&meta, b"after")),
            Err(TxRefused::QueueError)
        );
        assert_eq!(fld.stat(Stat::TxQueueInError), 1);
        // Rebinding clears the error; the control plane's own failure report sets it again.
        h.set_fld_reg(reg::TXQ_BASE + 16, fldr | TXQ_ENABLE | TXQ_RDMA);
        assert_eq!(h.fld_reg(reg::TXQ_BASE + 16) & TXQ_ERROR, 0);
        h.set_fld_reg(reg::TXQ_BASE + 16, TXQ_ERROR);
        assert_eq!(
            fld.with_tx_stream(|t| t.send(&meta, b"again")),
            Err(TxRefused::QueueError)
        );
        assert!(h.guard_intact());
    }

    /// FLD-E bound on a mock card with FLD's NIC doorbell base set to what `base` returns for
    /// FLD's control BAR address, `before_traffic` applied, then one 100-byte frame sent from
    /// function 1 to function 0 and the card run: the card, FLD, and the sending port.
    fn echo_with_doorbell_base(
        base: impl FnOnce(u64) -> u64,
        before_traffic: impl FnOnce(&crate::mock::MockHost),
    ) -> (
        crate::mock::MockHost,
        Arc<FldFunction>,
        crate::mock::MockPort,
    ) {
        let h = crate::mock::MockHost::card(crate::card::CardConfig::default(), 8 << 20);
        let fld = h.fld.clone().expect("FLD");
        fld.set_accelerator(Box::new(crate::accel::Echo::new(0, 16)));
        h.bind_fld(1);
        let base = base(h.bar(fld.id(), BAR_CONTROL));
        h.set_fld_reg(reg::NIC_DOORBELL_LO, base as u32);
        h.set_fld_reg(reg::NIC_DOORBELL_HI, (base >> 32) as u32);
        before_traffic(&h);
        let mut client = h.open_port(1);
        let mut f = vec![0u8; 100];
        f[..6].copy_from_slice(&h.nic_mac(0));
        f[6..12].copy_from_slice(&h.nic_mac(1));
        client.send(&h, &f, 0);
        h.run(1000);
        (h, fld, client)
    }

    /// FLD rings the NIC doorbells at the address software gives it: pointed at FLD's own BAR,
    /// the ring is an Unsupported Request the switch answers, not a re-entry into FLD (found by
    /// the fld_bar fuzz target as a hang: FLD's lock taken twice).
    #[test]
    fn a_doorbell_address_inside_fld_itself_does_not_hang() {
        let (h, fld, mut client) = echo_with_doorbell_base(|own| own, |_| {});
        assert_eq!(fld.stat(Stat::RxPackets), 1, "the frame reached FLD");
        assert!(client.receive(&h).is_none(), "its echo never rang the NIC");
        assert!(h.guard_intact());
    }

    /// A doorbell base at the top of the address space: every doorbell address (the SQ's, the
    /// RQ's, the CQs' of any number) wraps and is answered where it lands, as a master abort,
    /// rather than overflowing (found by the fld_bar fuzz target).
    #[test]
    fn a_doorbell_base_at_the_top_of_the_address_space_wraps() {
        let (h, fld, mut client) = echo_with_doorbell_base(
            |_| u64::MAX - 0xff,
            |h| h.set_fld_reg(reg::TX_CQN, u32::MAX - 1),
        );
        assert_eq!(fld.stat(Stat::RxPackets), 1, "the frame reached FLD");
        assert_eq!(fld.stat(Stat::TxPackets), 1, "and its echo was posted");
        assert!(client.receive(&h).is_none(), "its echo never rang the NIC");
        assert!(h.guard_intact());
    }
}
