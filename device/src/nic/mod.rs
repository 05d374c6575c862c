//! The soft NIC: a ConnectX-like Ethernet NIC of our own design (paper §2.1–§2.3), the commodity
//! NIC that FLD drives. Its programming interface is in [`abi`] and `docs/nic-interface.md`.
//!
//! Each host function is a PCIe function with a command interface (BAR0), doorbell pages (BAR2)
//! and MSI-X (BAR4), and is one vPort of the [`eswitch`]. All functions share one NIC core: the
//! queue tables, the eSwitch and the uplink wire. The core advances only in [`Nic::poll`], which
//! a runner calls — no hidden threads; doorbells are plain words the engine reads, so a doorbell
//! write never blocks and never re-enters the engine.
//!
//! The RDMA objects are in [`rdma`] and the RoCEv2 transport that serves them is a block of the
//! datapath.
//!
//! Left out: TSO (the `mss` field is accepted and ignored), LRO, VLAN insertion/stripping.

mod cmd;
mod datapath;
mod doorbell;
pub mod eswitch;
pub mod packet;
mod queues;
pub(crate) mod rdma;
/// LEFT's reorder structures and the receivers it is compared with (`rdma::reorder`).
pub use rdma::reorder;
#[cfg(test)]
mod burst_tests;
pub mod rss;
mod star_guard;
#[cfg(test)]
mod tests;

pub use doorbell::{DoorbellArea, DoorbellMemoryTooSmall};
use queues::{CompletionQueue, EventQueue, ReceiveQueue, SendQueue, Slab};
pub use rdma::cache::CacheCounters;

/// Send WQE basic blocks the NIC reads with one descriptor fetch (§6.5 of the interface).
pub const SEND_WQE_FETCH_BLOCKS: u32 = datapath::FETCH_BLOCKS;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::clock::{Clock, ManualClock};
use crate::fabric::Fabric;
use crate::pcie::{BarSpec, ConfigSpace, FunctionId, Identity, MsixSpec, PciFunction, PciState};
use crate::wire::{FrameTap, NullWire, Wire};
use eswitch::{Eswitch, FlowCache};
use fld_abi::nic::*;

/// Build-time parameters of the NIC.
#[derive(Clone, Debug)]
pub struct NicConfig {
    /// Host functions (vPorts 0..n). The first is the eSwitch manager.
    pub host_functions: u16,
    /// Largest frame (without FCS) the NIC sends or receives.
    pub mtu: u32,
    /// WQEs an SQ may process per poll before the engine moves on (fairness between queues).
    pub sq_budget: u32,
    /// Send WQEs the transmit pipeline gathers from one SQ before it parses and steers them as
    /// a burst (`docs/nic-interface.md` §6); 1 takes each frame through every stage before the
    /// next WQE is read.
    pub tx_burst: u32,
    pub max_sqs: u32,
    pub max_rqs: u32,
    pub max_cqs: u32,
    pub max_eqs: u32,
    pub max_flow_tables: u32,
    pub max_flow_entries: u32,
    pub max_rss_groups: u32,
    /// Queue pairs the RDMA transport holds at most.
    pub max_qps: u32,
    /// Which card this is among cards joined by links: part of every vPort's MAC address.
    pub card_id: u16,
    /// Queue-pair contexts the on-chip cache holds (LRU); 0: none.
    pub qp_cache_entries: usize,
    /// Memory translations (MTT entries) the on-chip cache holds (LRU); 0: none, every
    /// translation reads host memory.
    pub mtt_cache_entries: usize,
    /// Bytes of one QP context: what a QP-cache miss reads from the context memory.
    pub qp_context_bytes: u32,
    /// Receive WQEs each RQ reads ahead (`docs/nic-interface.md` §7.5), at most
    /// `RX_PREFETCH_DEPTH` (4); 0 fetches each WQE when its frame arrives.
    pub rx_prefetch_depth: usize,
    /// How RC responders treat a packet ahead of the PSN they expect (LEFT §3.1): go-back-N
    /// (IBA), or placed and recorded by a reorder unit of that kind.
    pub receiver: reorder::ReceiverMode,
    /// The bandwidth-delay product in packets the reorder unit is sized for.
    pub reorder_bdp: u32,
    /// The receive pipeline's time per packet a bitmap operation overlaps, ns (40: a 1 KB
    /// packet at 200 Gbit/s, LEFT §2.2).
    pub reorder_budget_ns: u32,
    /// Packets one QP may send per engine visit before the next QP's turn (64; 1 arbitrates
    /// between QPs packet by packet).
    pub qp_budget: usize,
    /// Packets an RC requester may have sent and not yet seen acknowledged before it starts no
    /// further message (256): what one retransmission timeout sends again, at most, besides the
    /// message under way.
    pub rc_window: u32,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            host_functions: 2,
            mtu: DEFAULT_MTU,
            sq_budget: 256,
            tx_burst: DEFAULT_TX_BURST,
            max_sqs: db::SLOTS,
            max_rqs: db::SLOTS,
            max_cqs: db::SLOTS,
            max_eqs: 256,
            max_flow_tables: 256,
            max_flow_entries: 65536,
            max_rss_groups: 256,
            max_qps: db::QP_SLOTS,
            card_id: 0,
            qp_cache_entries: DEFAULT_QP_CACHE_ENTRIES,
            mtt_cache_entries: DEFAULT_MTT_CACHE_ENTRIES,
            qp_context_bytes: DEFAULT_QP_CONTEXT_BYTES,
            rx_prefetch_depth: queues::RX_PREFETCH_DEPTH,
            receiver: reorder::ReceiverMode::GoBackN,
            reorder_bdp: 512,
            reorder_budget_ns: 40,
            qp_budget: 64,
            rc_window: 256,
        }
    }
}

/// Send WQEs per transmit burst: a DPDK burst's worth, so one generator burst crosses the
/// pipeline as one.
pub const DEFAULT_TX_BURST: u32 = 32;

/// The MTU of a NIC whose configuration names none: a jumbo frame.
pub const DEFAULT_MTU: u32 = 9216;

/// Bytes a buffer needs for any frame a port with MTU `mtu` sends or receives: the MTU and room
/// for the headers around it.
pub const fn frame_buffer_len(mtu: u32) -> usize {
    mtu as usize + 64
}

/// On-chip cache sizes of the default NIC. QP contexts: 300, what StaR measured a ConnectX-4
/// to hold before its performance collapses and simulates with ("RNIC on-chip memory can store
/// up to 300 connections' states", §4, Fig. 1). Translations: 4096, assumed (no seed paper
/// states the size; uRDMA's hint policy keeps the top 4096 regions, §4).
pub const DEFAULT_QP_CACHE_ENTRIES: usize = 300;
pub const DEFAULT_MTT_CACHE_ENTRIES: usize = 4096;
/// A QP context of a ConnectX-class RNIC is a few hundred bytes (the QPC of the PRM).
pub const DEFAULT_QP_CONTEXT_BYTES: u32 = 256;

/// Host functions (vPorts) one NIC exposes at most.
pub const MAX_HOST_FUNCTIONS: usize = 8;

/// What the engine needs of each function.
struct Port {
    fid: FunctionId,
    pci: Arc<PciState>,
    doorbells: Arc<DoorbellArea>,
}

/// Shared between the functions' BAR handlers and the engine.
pub(crate) struct NicShared {
    /// Weak: the fabric holds the functions, which hold this; a strong reference would keep a
    /// card alive forever once built.
    fabric: Weak<Fabric>,
    core: Mutex<NicCore>,
    ports: std::sync::OnceLock<Vec<Port>>,
}

/// The NIC: its functions and its engine.
pub struct Nic {
    shared: Arc<NicShared>,
    functions: Vec<Arc<NicFunction>>,
    /// The fabric's routes as of the last engine pass. Kept here, not in the core: the routes
    /// hold the functions, which hold the core.
    routes: Mutex<Option<crate::fabric::RouteSnapshot>>,
}

impl Nic {
    /// Builds the NIC and plugs its host functions into `fabric`.
    pub fn new(fabric: &Arc<Fabric>, config: NicConfig) -> Arc<Nic> {
        let n = config.host_functions.clamp(1, MAX_HOST_FUNCTIONS as u16);
        let shared = Arc::new(NicShared {
            fabric: Arc::downgrade(fabric),
            core: Mutex::new(NicCore::new(config)),
            ports: Default::default(),
        });
        let mut ports = Vec::new();
        let mut functions = Vec::new();
        for index in 0..n {
            // Every function of the NIC sits behind one switch port, as a multi-function
            // device does: they cannot reach each other's BARs through the switch.
            let sibling: Option<FunctionId> = ports.first().map(|p: &Port| p.fid);
            let f = fabric.attach_at(sibling, |fid| {
                let pci = Arc::new(PciState::new(fid, nic_config_space(index)));
                let doorbells = Arc::new(DoorbellArea::default());
                ports.push(Port {
                    fid,
                    pci: pci.clone(),
                    doorbells: doorbells.clone(),
                });
                Arc::new(NicFunction {
                    pci,
                    doorbells,
                    shared: shared.clone(),
                    index,
                    regs: CmdRegs::default(),
                    cmd: Mutex::new(()),
                })
            });
            functions.push(f);
        }
        let _ = shared.ports.set(ports);
        Arc::new(Nic {
            shared,
            functions,
            routes: Mutex::new(None),
        })
    }

    pub fn functions(&self) -> &[Arc<NicFunction>] {
        &self.functions
    }

    /// Fabric ID of host function `index`.
    pub fn function_id(&self, index: u16) -> Option<FunctionId> {
        self.functions.get(index as usize).map(|f| f.pci.id)
    }

    /// Connects the uplink vPort to a wire.
    pub fn set_uplink(&self, wire: Box<dyn Wire>) {
        self.shared.lock().wire = wire;
    }

    /// Pins the NIC's time to `now_ns` (nanoseconds), ahead of its clock; `None` returns to the
    /// clock. Timers, meters and CQE timestamps read this time.
    pub fn set_clock(&self, now_ns: Option<u64>) {
        self.shared.lock().manual_clock = now_ns;
    }

    /// The clock the NIC reads when its time is not pinned ([`Nic::set_clock`]); a ManualClock
    /// standing at 0 until a runner gives one.
    pub fn set_clock_source(&self, clock: Arc<dyn Clock>) {
        self.shared.lock().clock = Some(clock);
    }

    /// The NIC's part of a conventional reset (PCIe Base §6.6.1, beside
    /// [`Fabric::conventional_reset`], which resets each function): what a function-level reset leaves —
    /// the eSwitch's and RDMA transport's card-wide state, the NIC's own counters, its on-chip
    /// buffers and caches — returns to power-on, as a NIC built with the same configuration.
    /// What is outside the card stays: the uplink's wire, the tap and the clock.
    pub fn conventional_reset(&self) {
        let mut core = self.shared.lock();
        // What holds nothing across passes and commands keeps its allocation (`FrameBuffers`);
        // the flow cache and the RDMA caches are emptied first.
        let mut flow_cache = std::mem::replace(&mut core.eswitch.flow_cache, FlowCache::empty());
        flow_cache.reset();
        let buffers = FrameBuffers {
            tx_burst: std::mem::take(&mut core.tx_burst),
            wire_frame: std::mem::take(&mut core.wire_frame),
            encap_frame: std::mem::take(&mut core.encap_frame),
            wqe: std::mem::take(&mut core.wqe),
            command: std::mem::take(&mut core.command),
            flow_cache,
            rdma: core.rdma.take_scratch(),
        };
        let fresh = NicCore::with_buffers(core.config.clone(), buffers);
        let old = std::mem::replace(&mut *core, fresh);
        core.wire = old.wire;
        core.tap = old.tap;
        core.clock = old.clock;
        core.manual_clock = old.manual_clock;
        drop(core);
        *self.routes.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The NIC's state as it is — the core's, and every function's command registers and
    /// doorbell words — to return to ([`Nic::restore`]); the PCI side (configuration space,
    /// MSI-X, host-memory maps) is the fabric's ([`crate::fabric::Fabric::snapshot`]). `None`
    /// when the state cannot be kept: the flow cache holds a walk, or a function's doorbell
    /// words are in memory the host maps.
    pub fn snapshot(&self) -> Option<NicSnapshot> {
        let functions = self
            .functions
            .iter()
            .map(|f| Some((f.regs.values(), f.doorbells.snapshot()?)))
            .collect::<Option<Vec<_>>>()?;
        let core = self.shared.lock().snapshot()?;
        Some(NicSnapshot { core, functions })
    }

    /// Returns to `s`, taken of this NIC by [`Nic::snapshot`]. What is outside the card stays,
    /// as in a conventional reset: the uplink's wire, the tap and the clock.
    pub fn restore(&self, s: &NicSnapshot) {
        for (f, (regs, doorbells)) in self.functions.iter().zip(&s.functions) {
            let _running = f.cmd.lock().unwrap_or_else(|e| e.into_inner());
            f.regs.set_values(regs);
            f.doorbells.restore(doorbells);
        }
        self.shared.lock().restore(&s.core);
        *self.routes.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Captures every frame entering or leaving the eSwitch at any vPort.
    pub fn set_tap(&self, tap: Option<Box<dyn FrameTap>>) {
        self.shared.lock().tap = tap;
    }

    /// Advances the NIC: doorbells, transmit, uplink receive, completions and events. Returns the
    /// number of work items done (0 when idle).
    pub fn poll(&self) -> usize {
        let ports = self.shared.ports.get().map(|p| p.as_slice()).unwrap_or(&[]);
        let mut core = self.shared.lock();
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        match self.shared.fabric.upgrade() {
            Some(fabric) => datapath::poll(&mut core, &fabric, ports, &mut routes),
            None => 0,
        }
    }

    /// Returns once the engine pass running at the call, if any, has ended: every pass takes
    /// the device lock for its whole length, and routes (with the DMA map) are taken again at
    /// the start of the next one.
    pub fn wait_for_pass(&self) {
        drop(self.shared.lock());
    }

    /// What the reorder unit did (none with a go-back-N receiver), and the pool blocks in use.
    pub fn reorder_counters(&self) -> reorder::ReorderCounters {
        self.shared
            .lock()
            .rdma
            .reorder
            .as_ref()
            .map(|r| reorder::ReorderCounters {
                blocks_in_use: r.pool.taken - r.pool.returned,
                buffer_held: r.buffer.len() as u64,
                ..r.counters
            })
            .unwrap_or_default()
    }

    /// Hit/miss counts of the QP-context and memory-translation caches.
    pub fn cache_counters(&self) -> (CacheCounters, CacheCounters) {
        let core = self.shared.lock();
        let mtt = core.rdma.mtt_cache.borrow().counters;
        (core.rdma.qp_cache.counters, mtt)
    }

    /// WQEs the engine took from WQE-by-MMIO buffers, and sealed buffers it refused (device
    /// statistics; `docs/nic-interface.md` §4.1).
    pub fn wqe_mmio_counters(&self) -> datapath::WqeMmioCounters {
        self.shared.lock().wqe_mmio
    }

    /// Receive WQEs the engine read ahead, the reads that brought them (off the path of any
    /// packet: a runner charges them no wait), and the receives that found their WQE read
    /// ahead.
    pub fn rx_prefetch_counters(&self) -> datapath::RxPrefetchCounters {
        self.shared.lock().rx_prefetch
    }

    /// The on-chip memory the timing mechanisms need for the queues that exist now, as Table 3
    /// counts FLD's structures: the receive WQEs read ahead (§7.5) and the WQE-by-MMIO buffers
    /// (§4.1). Contexts, rings' state and the flow cache are not counted.
    pub fn on_chip_memory(&self) -> OnChipMemory {
        let core = self.shared.lock();
        let depth = core.config.rx_prefetch_depth.min(queues::RX_PREFETCH_DEPTH) as u32;
        let rqs = core.rqs.live();
        let send_queues = core.sqs.live() + core.rdma.qps.live();
        OnChipMemory {
            read_ahead_depth: depth,
            rqs,
            rx_read_ahead_bytes: u64::from(rqs) * u64::from(depth) * RECV_WQE_SIZE as u64,
            send_queues,
            wqe_buffer_bytes: u64::from(send_queues) * db::WQE_BUFFER_STRIDE,
        }
    }

    /// Hit, miss and eviction counts of the eSwitch's flow cache.
    pub fn flow_cache_counters(&self) -> CacheCounters {
        self.shared.lock().eswitch.flow_cache.counters
    }

    /// Frames the eSwitch steered in one step, without walking its tables (the common case of
    /// a frame between two host vPorts that no rule can tell apart: `Eswitch::direct_route`).
    pub fn direct_routed_frames(&self) -> u64 {
        self.shared.lock().eswitch.direct_routed
    }

    /// The earliest time (NIC clock, ns) a transport timer of any QP fires — the local ACK
    /// timer or the end of an RNR wait — so a runner that sleeps an idle card knows when to
    /// wake it. `None`: no timer armed.
    pub fn next_timer_ns(&self) -> Option<u64> {
        self.shared.lock().rdma.next_timer()
    }

    /// Counters of the uplink wire side and other device-global statistics.
    pub fn stats(&self) -> NicStats {
        let core = self.shared.lock();
        NicStats {
            uplink: core.eswitch.uplink.counters,
            wire_tx_frames: core.wire_tx_frames,
            loopback_frames: core.loopback_frames,
            bad_doorbells: core.bad_doorbells,
        }
    }
}

/// On-chip memory of the NIC's timing mechanisms ([`Nic::on_chip_memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OnChipMemory {
    /// Receive WQEs read ahead per RQ.
    pub read_ahead_depth: u32,
    /// Ethernet RQs that exist.
    pub rqs: u32,
    pub rx_read_ahead_bytes: u64,
    /// Ethernet SQs and queue pairs that exist, one WQE-by-MMIO buffer each.
    pub send_queues: u32,
    pub wqe_buffer_bytes: u64,
}

/// Device-global statistics.
#[derive(Clone, Copy, Debug, Default)]
pub struct NicStats {
    pub uplink: eswitch::VportCounters,
    pub wire_tx_frames: u64,
    /// Frames a host vPort sent that the eSwitch delivered to a host vPort (hairpin and
    /// function-to-function traffic, FLD's included): each crossed the NIC's transmit and
    /// receive pipelines without touching the wire.
    pub loopback_frames: u64,
    pub bad_doorbells: u64,
}

impl NicShared {
    fn lock(&self) -> MutexGuard<'_, NicCore> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn nic_config_space(index: u16) -> ConfigSpace {
    ConfigSpace::new(
        Identity {
            vendor_id: PCI_VENDOR_ID,
            device_id: NIC_DEVICE_ID,
            class_code: NIC_CLASS_CODE,
            revision: 1,
            subsystem_id: index,
        },
        &[
            BarSpec {
                index: BAR_CONTROL,
                size: BAR_CONTROL_SIZE,
                prefetchable: false,
            },
            BarSpec {
                index: BAR_DOORBELL,
                size: BAR_DOORBELL_SIZE,
                prefetchable: false,
            },
            BarSpec {
                index: BAR_MSIX,
                size: BAR_MSIX_SIZE,
                prefetchable: false,
            },
        ],
        Some(MsixSpec {
            vectors: NIC_MSIX_VECTORS,
            table_bar: BAR_MSIX,
            table_offset: MSIX_TABLE_OFFSET,
            pba_bar: BAR_MSIX,
            pba_offset: MSIX_PBA_OFFSET,
        }),
    )
}

/// The command mailbox's registers (`docs/nic-interface.md` §3). A register takes a store as a
/// register file does, with no lock; only what runs a command — the doorbell, and a reset — is
/// serialised, by [`NicFunction::cmd`]. A driver that writes one function's mailbox from two
/// threads at once gets what a register file gives it, which is its own race to avoid.
#[derive(Default)]
struct CmdRegs {
    /// The input and output mailboxes' addresses, low and high words.
    in_addr: [AtomicU32; 2],
    out_addr: [AtomicU32; 2],
    in_len: AtomicU32,
    out_len: AtomicU32,
    /// Written when a command completes (release), so a reader that sees it sees the output.
    status: AtomicU32,
}

impl CmdRegs {
    fn address(words: &[AtomicU32; 2]) -> u64 {
        u64::from(words[0].load(Ordering::Relaxed))
            | u64::from(words[1].load(Ordering::Relaxed)) << 32
    }

    /// Every register's value: mailbox addresses, lengths, status.
    fn values(&self) -> [u32; 7] {
        self.registers().map(|r| r.load(Ordering::Acquire))
    }

    fn set_values(&self, values: &[u32; 7]) {
        for (r, &v) in self.registers().into_iter().zip(values) {
            r.store(v, Ordering::Release);
        }
    }

    fn registers(&self) -> [&AtomicU32; 7] {
        [
            &self.in_addr[0],
            &self.in_addr[1],
            &self.out_addr[0],
            &self.out_addr[1],
            &self.in_len,
            &self.out_len,
            &self.status,
        ]
    }

    fn clear(&self) {
        self.set_values(&[0; 7]);
    }
}

/// One host function of the NIC.
pub struct NicFunction {
    pci: Arc<PciState>,
    doorbells: Arc<DoorbellArea>,
    shared: Arc<NicShared>,
    /// Function index = vPort number.
    index: u16,
    regs: CmdRegs,
    /// Held while a command runs or the function resets: one command at a time, as the
    /// firmware takes them.
    cmd: Mutex<()>,
}

impl NicFunction {
    pub fn vport(&self) -> u16 {
        self.index
    }

    pub fn doorbells(&self) -> &Arc<DoorbellArea> {
        &self.doorbells
    }

    fn control_read(&self, offset: u64) -> u32 {
        let regs = &self.regs;
        match offset {
            reg::FW_VERSION => FW_VERSION,
            reg::CMD_INTERFACE_REV => INTERFACE_REV,
            reg::DEVICE_STATUS => STATUS_READY,
            reg::CMD_IN_ADDR_LO => regs.in_addr[0].load(Ordering::Relaxed),
            reg::CMD_IN_ADDR_HI => regs.in_addr[1].load(Ordering::Relaxed),
            reg::CMD_OUT_ADDR_LO => regs.out_addr[0].load(Ordering::Relaxed),
            reg::CMD_OUT_ADDR_HI => regs.out_addr[1].load(Ordering::Relaxed),
            reg::CMD_IN_LEN => regs.in_len.load(Ordering::Relaxed),
            reg::CMD_OUT_LEN => regs.out_len.load(Ordering::Relaxed),
            reg::CMD_STATUS => regs.status.load(Ordering::Acquire),
            reg::VPORT_NUMBER => self.index as u32,
            reg::MAC_LO | reg::MAC_HI => {
                let core = self.shared.lock();
                let mac = core
                    .eswitch
                    .vports
                    .get(self.index as usize)
                    .map_or([0; 6], |v| v.mac);
                if offset == reg::MAC_LO {
                    u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]])
                } else {
                    u32::from_le_bytes([mac[4], mac[5], 0, 0])
                }
            }
            _ => 0,
        }
    }

    fn control_write(&self, offset: u64, value: u32) {
        let regs = &self.regs;
        let register = match offset {
            reg::CMD_IN_ADDR_LO => &regs.in_addr[0],
            reg::CMD_IN_ADDR_HI => &regs.in_addr[1],
            reg::CMD_OUT_ADDR_LO => &regs.out_addr[0],
            reg::CMD_OUT_ADDR_HI => &regs.out_addr[1],
            reg::CMD_IN_LEN => &regs.in_len,
            reg::CMD_OUT_LEN => &regs.out_len,
            reg::CMD_DOORBELL => return self.run_command(value & 0xffff),
            reg::DEVICE_RESET if value == RESET_MAGIC => return self.reset(),
            _ => return,
        };
        register.store(value, Ordering::Relaxed);
    }

    /// The command doorbell: runs the command the mailbox registers describe, then posts its
    /// status with the driver's `token`.
    fn run_command(&self, token: u32) {
        let _running = self.cmd.lock().unwrap_or_else(|e| e.into_inner());
        let regs = &self.regs;
        let delivery = {
            let mut core = self.shared.lock();
            let Some(fabric) = self.shared.fabric.upgrade() else {
                return;
            };
            let mut dma = fabric.dma(self.pci.id);
            cmd::deliver(
                &mut core,
                &mut dma,
                &self.doorbells,
                self.index,
                CmdRegs::address(&regs.in_addr),
                regs.in_len.load(Ordering::Relaxed),
                CmdRegs::address(&regs.out_addr),
                regs.out_len.load(Ordering::Relaxed),
            )
        };
        let status = CMD_STATUS_DONE | (delivery as u32) << 8 | token << 16;
        regs.status.store(status, Ordering::Release);
    }

    /// A store into the doorbell BAR: a doorbell word, or a WQE by MMIO.
    #[inline]
    fn doorbell_write(&self, offset: u64, data: &[u8]) {
        if let (4, true) = (data.len(), offset.is_multiple_of(4)) {
            self.doorbells.store(
                offset,
                u32::from_le_bytes([data[0], data[1], data[2], data[3]]),
            );
        } else {
            self.doorbells.write(offset, data);
        }
    }
}

impl PciFunction for NicFunction {
    fn pci(&self) -> &PciState {
        &self.pci
    }

    fn bar_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        match bar {
            BAR_CONTROL => {
                let word = self.control_read(offset & !3);
                for (i, b) in data.iter_mut().enumerate() {
                    let o = offset + i as u64;
                    *b = if o & !3 == offset & !3 {
                        (word >> ((o % 4) * 8)) as u8
                    } else {
                        (self.control_read(o & !3) >> ((o % 4) * 8)) as u8
                    };
                }
            }
            BAR_DOORBELL => self.doorbells.read(offset, data),
            _ => {
                if !self.pci.msix_read(bar, offset, data) {
                    data.fill(0);
                }
            }
        }
    }

    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]) {
        match bar {
            BAR_CONTROL => {
                // Registers take whole aligned 32-bit writes; 64-bit writes are two registers.
                if !offset.is_multiple_of(4) || !data.len().is_multiple_of(4) {
                    return;
                }
                for (i, c) in data.chunks_exact(4).enumerate() {
                    self.control_write(
                        offset + 4 * i as u64,
                        u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    );
                }
            }
            BAR_DOORBELL => self.doorbell_write(offset, data),
            _ => {
                self.pci.msix_write(bar, offset, data);
            }
        }
    }

    fn bar_write_run(&self, bar: u8, base: u64, writes: &[(u64, &[u8])]) {
        for &(offset, data) in writes {
            let at = base.wrapping_add(offset);
            match bar {
                BAR_DOORBELL => self.doorbell_write(at, data),
                _ => self.bar_write(bar, at, data),
            }
        }
    }

    fn reset(&self) {
        // Lock order is the command lock, then core (as the command doorbell takes them).
        let _running = self.cmd.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.lock().destroy_function_objects(self.index);
        self.doorbells.clear();
        self.regs.clear();
    }
}

/// Everything behind the NIC's lock.
pub(crate) struct NicCore {
    pub(crate) config: NicConfig,
    eqs: Slab<EventQueue>,
    cqs: Slab<CompletionQueue>,
    sqs: Slab<SendQueue>,
    rqs: Slab<ReceiveQueue>,
    /// SQ numbers in creation order, polled round-robin.
    active_sqs: Vec<u32>,
    /// RQ numbers, whose receive WQEs the engine reads ahead.
    active_rqs: Vec<u32>,
    eswitch: Eswitch,
    /// PDs, MRs, QPs, SRQs, GID tables: the RDMA transport's state.
    rdma: rdma::Rdma,
    flow_entry_count: u32,
    wire: Box<dyn Wire>,
    tap: Option<Box<dyn FrameTap>>,
    /// The transmit pipeline's burst of gathered frames (no allocation per packet).
    tx_burst: datapath::TxBurst,
    /// Second buffer for frames received from the wire.
    wire_frame: Vec<u8>,
    /// Scratch buffer for VXLAN-encapsulated frames.
    encap_frame: Vec<u8>,
    /// Send WQE fetch buffer.
    wqe: Vec<u8>,
    /// A command's input and output, each [`CMD_MAX_LEN`] bytes.
    command: cmd::CommandBuffers,
    /// CQEs held for one write (written before the engine pass ends).
    cqe_run: datapath::CqeRun,
    /// Send WQE blocks read ahead for the SQ being served.
    wqe_prefetch: Option<Box<datapath::WqePrefetch>>,
    /// Where time comes from (the runner's). An engine pass holds it while it runs (moved, not
    /// cloned: a clone is two atomic read-modify-writes on a line the runner shares, every pass),
    /// so it is `None` only inside a pass.
    clock: Option<Arc<dyn Clock>>,
    /// A time the runner pins (tests, discrete-event runs), ahead of `clock`.
    manual_clock: Option<u64>,
    wire_tx_frames: u64,
    loopback_frames: u64,
    bad_doorbells: u64,
    /// WQEs taken from WQE-by-MMIO buffers, and sealed buffers refused.
    wqe_mmio: datapath::WqeMmioCounters,
    /// Receive WQEs read ahead, and the reads that brought them.
    rx_prefetch: datapath::RxPrefetchCounters,
}

/// A NIC's state at one point ([`Nic::snapshot`]).
pub struct NicSnapshot {
    core: CoreSnapshot,
    /// Per function: its command registers and doorbell words.
    functions: Vec<([u32; 7], doorbell::DoorbellSnapshot)>,
}

/// What [`Nic::snapshot`] keeps of the core: the card's state, without what holds nothing
/// across passes and commands (the frame and command buffers, the flow cache's slots, the RDMA
/// caches' tables) and what is outside the card (the wire, the tap, the clock).
struct CoreSnapshot {
    config: NicConfig,
    eqs: Slab<EventQueue>,
    cqs: Slab<CompletionQueue>,
    sqs: Slab<SendQueue>,
    rqs: Slab<ReceiveQueue>,
    active_sqs: Vec<u32>,
    active_rqs: Vec<u32>,
    eswitch: Eswitch,
    rdma: rdma::RdmaSnapshot,
    flow_entry_count: u32,
    cqe_run: datapath::CqeRun,
    wqe_prefetch: Option<Box<datapath::WqePrefetch>>,
    wire_tx_frames: u64,
    loopback_frames: u64,
    bad_doorbells: u64,
    wqe_mmio: datapath::WqeMmioCounters,
    rx_prefetch: datapath::RxPrefetchCounters,
}

impl NicCore {
    /// The state [`CoreSnapshot`] keeps; `None` while the flow cache holds a walk (its slots
    /// are not kept: every command empties it, so a card brought up by commands has none).
    /// Every field is named, so a field added to the core must be placed here.
    fn snapshot(&self) -> Option<CoreSnapshot> {
        let NicCore {
            config,
            eqs,
            cqs,
            sqs,
            rqs,
            active_sqs,
            active_rqs,
            eswitch,
            rdma,
            flow_entry_count,
            wire: _,
            tap: _,
            tx_burst: _,
            wire_frame: _,
            encap_frame: _,
            wqe: _,
            command: _,
            cqe_run,
            wqe_prefetch,
            clock: _,
            manual_clock: _,
            wire_tx_frames,
            loopback_frames,
            bad_doorbells,
            wqe_mmio,
            rx_prefetch,
        } = self;
        if eswitch.flow_cache.holds_walks() {
            return None;
        }
        Some(CoreSnapshot {
            config: config.clone(),
            eqs: eqs.clone(),
            cqs: cqs.clone(),
            sqs: sqs.clone(),
            rqs: rqs.clone(),
            active_sqs: active_sqs.clone(),
            active_rqs: active_rqs.clone(),
            eswitch: eswitch.clone_without_cache_slots(),
            rdma: rdma.snapshot(),
            flow_entry_count: *flow_entry_count,
            cqe_run: cqe_run.clone(),
            wqe_prefetch: wqe_prefetch.clone(),
            wire_tx_frames: *wire_tx_frames,
            loopback_frames: *loopback_frames,
            bad_doorbells: *bad_doorbells,
            wqe_mmio: *wqe_mmio,
            rx_prefetch: *rx_prefetch,
        })
    }

    /// Returns to `s`, keeping the buffers, the flow cache's slots and the caches' tables, and
    /// what is outside the card.
    fn restore(&mut self, s: &CoreSnapshot) {
        self.config.clone_from(&s.config);
        self.eqs.clone_from(&s.eqs);
        self.cqs.clone_from(&s.cqs);
        self.sqs.clone_from(&s.sqs);
        self.rqs.clone_from(&s.rqs);
        self.active_sqs.clone_from(&s.active_sqs);
        self.active_rqs.clone_from(&s.active_rqs);
        let mut flow_cache = std::mem::replace(&mut self.eswitch.flow_cache, FlowCache::empty());
        flow_cache.restore_settings(&s.eswitch.flow_cache);
        self.eswitch = s.eswitch.clone_without_cache_slots();
        self.eswitch.flow_cache = flow_cache;
        self.rdma.restore(&s.rdma);
        self.flow_entry_count = s.flow_entry_count;
        self.cqe_run.clone_from(&s.cqe_run);
        self.wqe_prefetch.clone_from(&s.wqe_prefetch);
        self.wire_tx_frames = s.wire_tx_frames;
        self.loopback_frames = s.loopback_frames;
        self.bad_doorbells = s.bad_doorbells;
        self.wqe_mmio = s.wqe_mmio;
        self.rx_prefetch = s.rx_prefetch;
    }
}

/// The NIC's frame-sized scratch buffers, its command buffers, its flow cache's slots and the
/// RDMA caches' tables: nothing in them outlives a pass or a command (an emptied cache holds
/// nothing either), so a reset keeps them rather than allocating and zeroing them again.
struct FrameBuffers {
    tx_burst: datapath::TxBurst,
    wire_frame: Vec<u8>,
    encap_frame: Vec<u8>,
    wqe: Vec<u8>,
    command: cmd::CommandBuffers,
    flow_cache: FlowCache,
    rdma: rdma::RdmaScratch,
}

impl FrameBuffers {
    fn new(config: &NicConfig) -> Self {
        let max_frame = frame_buffer_len(config.mtu);
        FrameBuffers {
            tx_burst: datapath::TxBurst::new(config.tx_burst as usize, max_frame),
            wire_frame: vec![0; max_frame],
            encap_frame: Vec::with_capacity(max_frame + VXLAN_ENCAP_LEN),
            wqe: vec![0; MAX_WQE_BYTES],
            command: cmd::CommandBuffers::default(),
            flow_cache: FlowCache::new(),
            rdma: rdma::RdmaScratch::new(
                max_frame,
                (config.qp_cache_entries, config.mtt_cache_entries),
            ),
        }
    }
}

impl NicCore {
    fn new(config: NicConfig) -> Self {
        let buffers = FrameBuffers::new(&config);
        Self::with_buffers(config, buffers)
    }

    fn with_buffers(config: NicConfig, buffers: FrameBuffers) -> Self {
        NicCore {
            eqs: Slab::new(config.max_eqs.min(db::SLOTS)),
            cqs: Slab::new(config.max_cqs.min(db::SLOTS)),
            sqs: Slab::new(config.max_sqs.min(db::SLOTS)),
            rqs: Slab::new(config.max_rqs.min(db::SLOTS)),
            active_sqs: Vec::new(),
            active_rqs: Vec::new(),
            eswitch: Eswitch::with_flow_cache(
                config.card_id,
                config.host_functions.clamp(1, MAX_HOST_FUNCTIONS as u16),
                buffers.flow_cache,
            ),
            rdma: rdma::Rdma::new(
                config.host_functions.clamp(1, MAX_HOST_FUNCTIONS as u16) as usize,
                config.max_qps.min(db::QP_SLOTS),
                buffers.rdma,
                config.qp_context_bytes,
                reorder::ReorderUnit::new(
                    config.receiver,
                    config.reorder_bdp,
                    config.reorder_budget_ns,
                ),
            ),
            flow_entry_count: 0,
            wire: Box::new(NullWire::default()),
            tap: None,
            tx_burst: buffers.tx_burst,
            wire_frame: buffers.wire_frame,
            encap_frame: buffers.encap_frame,
            wqe: buffers.wqe,
            command: buffers.command,
            wqe_prefetch: Default::default(),
            cqe_run: Default::default(),
            clock: Some(Arc::new(ManualClock::default())),
            manual_clock: None,
            wire_tx_frames: 0,
            loopback_frames: 0,
            bad_doorbells: 0,
            wqe_mmio: Default::default(),
            rx_prefetch: Default::default(),
            config,
        }
    }

    fn caps(&self, function: u16) -> Caps {
        use zerocopy::little_endian::{U16, U32};
        let c = &self.config;
        Caps {
            max_sqs: U32::new(c.max_sqs.min(db::SLOTS)),
            max_rqs: U32::new(c.max_rqs.min(db::SLOTS)),
            max_cqs: U32::new(c.max_cqs.min(db::SLOTS)),
            max_eqs: U32::new(c.max_eqs.min(db::SLOTS)),
            max_log_sq_size: MAX_LOG_SQ,
            max_log_rq_size: MAX_LOG_RQ,
            max_log_cq_size: MAX_LOG_CQ,
            max_log_eq_size: MAX_LOG_EQ,
            min_log_stride_size: MIN_LOG_STRIDE,
            max_log_stride_size: MAX_LOG_STRIDE,
            min_log_strides: MIN_LOG_STRIDES,
            max_log_strides: MAX_LOG_STRIDES,
            max_flow_tables: U32::new(c.max_flow_tables),
            max_flow_entries: U32::new(c.max_flow_entries),
            max_rss_groups: U32::new(c.max_rss_groups),
            max_rss_indirection: U16::new(RSS_MAX_INDIRECTION),
            rss_key_len: U16::new(40),
            msix_vectors: U16::new(NIC_MSIX_VECTORS),
            max_wqe_ds: U16::new(MAX_WQE_DS),
            max_inline_header: U16::new(MAX_INLINE_HEADER),
            max_flow_table_level: MAX_FLOW_LEVEL,
            receiver: c.receiver.caps_code(),
            max_mtu: U32::new(c.mtu),
            vport: U16::new(function),
            is_eswitch_manager: (function == 0) as u8,
            rsvd2: 0,
            qp_context_cache: U32::new(c.qp_cache_entries.min(u32::MAX as usize) as u32),
        }
    }

    /// Function-level reset: every object the function owns goes, in dependency order.
    fn destroy_function_objects(&mut self, function: u16) {
        self.rdma.destroy_function_objects(function);
        let es = &mut self.eswitch;
        // Tables (and their entries), dropping references they held.
        let owned: Vec<u32> = (0..es.tables.len() as u32)
            .filter(|&t| es.table(t).is_some_and(|t| t.owner == function))
            .collect();
        for t in &owned {
            if let Some(tab) = es.tables[*t as usize].take() {
                self.flow_entry_count -= tab.entries.len() as u32;
                for e in &tab.entries {
                    release_entry_refs(&mut self.rqs, es, e);
                }
            }
        }
        if es.fdb_root.is_some_and(|r| owned.contains(&r)) {
            es.fdb_root = None;
        }
        if let Some(v) = es.vports.get_mut(function as usize) {
            v.rx_root = None;
        }
        for m in es.meters.iter_mut() {
            if m.as_ref().is_some_and(|m| m.owner == function) {
                *m = None;
            }
        }
        for e in es.encaps.iter_mut() {
            if e.as_ref().is_some_and(|e| e.owner == function) {
                *e = None;
            }
        }
        // Entries in other functions' tables cannot name this function's objects (checked at
        // creation), so the remaining references are gone; tables referencing removed tables
        // fall back to their default miss.
        for t in es.tables.iter_mut().flatten() {
            if let eswitch::Miss::Goto(x) = t.miss {
                if owned.contains(&x) {
                    t.miss = eswitch::Miss::Default;
                }
            }
        }
        for g in 0..es.rss_groups.len() {
            if es.rss_groups[g]
                .as_ref()
                .is_some_and(|g| g.owner == function)
            {
                if let Some(group) = es.rss_groups[g].take() {
                    for rq in group.indirection {
                        self.rqs.drop_ref(rq);
                    }
                }
            }
        }
        self.sqs.remove_owned_by(function);
        self.active_sqs.retain(|i| self.sqs.get(*i).is_some());
        self.rqs.remove_owned_by(function);
        self.active_rqs.retain(|i| self.rqs.get(*i).is_some());
        self.cqs.remove_owned_by(function);
        self.eqs.remove_owned_by(function);
        self.eswitch.rules_changed();
    }
}

/// Drops the references a flow entry holds on RQs, tables, meters and encapsulations. RSS groups
/// are only counted through their RQs; DESTROY_RSS_GROUP scans the entries instead.
fn release_entry_refs(rqs: &mut Slab<ReceiveQueue>, es: &mut Eswitch, e: &eswitch::FlowEntry) {
    if e.actions & action::VXLAN_ENCAP != 0 {
        if let Some(x) = es.encaps.get_mut(e.encap as usize).and_then(|x| x.as_mut()) {
            x.refs = x.refs.saturating_sub(1);
        }
    }
    if e.actions & action::METER != 0 {
        if let Some(m) = es.meters.get_mut(e.meter as usize).and_then(|m| m.as_mut()) {
            m.refs = m.refs.saturating_sub(1);
        }
    }
    if e.actions & action::FWD_RQ != 0 {
        rqs.drop_ref(e.dest);
    }
    if e.actions & action::GOTO_TABLE != 0 {
        if let Some(t) = es.table_mut(e.dest) {
            t.refs = t.refs.saturating_sub(1);
        }
    }
}
