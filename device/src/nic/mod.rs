//! The soft NIC: a ConnectX-like Ethernet NIC of our own design (paper §2.1–§2.3), the commodity
//! NIC that FLD drives. Its programming interface is in [`abi`] and `docs/nic-interface.md`.
//!
//! Each host function is a PCIe function with a command interface (BAR0), doorbell pages (BAR2)
//! and MSI-X (BAR4), and is one vPort of the [`eswitch`]. All functions share one NIC core: the
//! queue tables, the eSwitch and the uplink wire. The core advances only in [`Nic::poll`], which
//! a runner calls — no hidden threads; doorbells are plain words the engine reads, so a doorbell
//! write never blocks and never re-enters the engine.
//!
//! Left out: RDMA transport, TSO (the `mss` field is accepted and ignored), LRO, VLAN
//! insertion/stripping, shared receive queues.

mod cmd;
mod datapath;
pub mod eswitch;
pub mod packet;
pub mod rss;

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::fabric::Fabric;
use crate::pcie::{BarSpec, ConfigSpace, FunctionId, Identity, MsixSpec, PciFunction, PciState};
use crate::wire::{FrameTap, NullWire, Wire};
use eswitch::Eswitch;
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
    pub max_sqs: u32,
    pub max_rqs: u32,
    pub max_cqs: u32,
    pub max_eqs: u32,
    pub max_flow_tables: u32,
    pub max_flow_entries: u32,
    pub max_rss_groups: u32,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            host_functions: 2,
            mtu: 9216,
            sq_budget: 256,
            max_sqs: db::SLOTS,
            max_rqs: db::SLOTS,
            max_cqs: db::SLOTS,
            max_eqs: 256,
            max_flow_tables: 256,
            max_flow_entries: 65536,
            max_rss_groups: 256,
        }
    }
}

/// Host functions (vPorts) one NIC exposes at most.
pub const MAX_HOST_FUNCTIONS: usize = 8;

/// Polled doorbell words of one function (BAR2). Stores from the host land here directly; the
/// engine reads them when it runs.
///
/// The words live in the area's own memory until a transport hands it shared memory
/// ([`DoorbellArea::use_memory`]): then the host's stores reach the words without any message
/// (a vfio-user server offers that memory as the BAR's mmap-able area), as doorbell pages of a
/// real NIC are written by the CPU straight across PCIe.
pub struct DoorbellArea {
    /// The words in use: `BAR_DOORBELL_SIZE / 4` of them.
    words: AtomicPtr<AtomicU32>,
    /// Every backing the words ever lived in, kept so a reader that loaded the old pointer
    /// never touches freed memory (a handful of 16 KiB areas over a process's life).
    backings: Mutex<Vec<Box<dyn Send + Sync>>>,
}

const DOORBELL_WORDS: usize = (BAR_DOORBELL_SIZE / 4) as usize;

impl Default for DoorbellArea {
    fn default() -> Self {
        let mut owned: Box<[AtomicU32]> = (0..DOORBELL_WORDS).map(|_| AtomicU32::new(0)).collect();
        DoorbellArea {
            words: AtomicPtr::new(owned.as_mut_ptr()),
            backings: Mutex::new(vec![Box::new(owned)]),
        }
    }
}

/// Shared doorbell memory smaller than the doorbell BAR.
#[derive(Debug, thiserror::Error)]
#[error("doorbell memory of {0} bytes is smaller than the doorbell BAR")]
pub struct DoorbellMemoryTooSmall(pub usize);

impl DoorbellArea {
    fn word(&self, offset: u64) -> Option<&AtomicU32> {
        let i = (offset / 4) as usize;
        // SAFETY: the pointer always points at DOORBELL_WORDS live words (backings are never
        // freed while the area lives), and `i` is in range.
        (i < DOORBELL_WORDS).then(|| unsafe { &*self.words.load(Ordering::Acquire).add(i) })
    }

    /// Moves the words into `memory` (at its start), carrying their current values over. The
    /// memory must be at least [`BAR_DOORBELL_SIZE`] bytes; it is typically a shared file that
    /// the host maps too.
    pub fn use_memory(
        &self,
        memory: Arc<vm_memory::GuestRegionMmap>,
    ) -> Result<(), DoorbellMemoryTooSmall> {
        use vm_memory::GuestMemoryRegion;
        if (memory.len() as usize) < BAR_DOORBELL_SIZE as usize {
            return Err(DoorbellMemoryTooSmall(memory.len() as usize));
        }
        let mut backings = self.backings.lock().unwrap_or_else(|e| e.into_inner());
        let new = memory.as_ptr().cast::<AtomicU32>();
        for i in 0..DOORBELL_WORDS {
            // SAFETY: both areas hold DOORBELL_WORDS words; mmap memory is page aligned.
            unsafe { (*new.add(i)).store(self.load(4 * i as u64), Ordering::Relaxed) };
        }
        self.words.store(new, Ordering::Release);
        backings.push(Box::new(memory));
        Ok(())
    }

    /// The word at byte `offset` (0 when out of range).
    pub fn load(&self, offset: u64) -> u32 {
        self.word(offset).map_or(0, |w| w.load(Ordering::Acquire))
    }

    pub fn write(&self, offset: u64, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            let o = offset + i as u64;
            if let Some(w) = self.word(o) {
                let shift = (o % 4) * 8;
                let mut cur = w.load(Ordering::Relaxed);
                loop {
                    let new = (cur & !(0xff << shift)) | ((b as u32) << shift);
                    match w.compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed) {
                        Ok(_) => break,
                        Err(x) => cur = x,
                    }
                }
            }
        }
    }

    /// Aligned 32-bit store (the common doorbell case).
    pub fn store(&self, offset: u64, value: u32) {
        if let Some(w) = self.word(offset) {
            w.store(value, Ordering::Release);
        }
    }

    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let o = offset + i as u64;
            *b = (self.load(o & !3) >> ((o % 4) * 8)) as u8;
        }
    }

    pub fn clear(&self) {
        for i in 0..DOORBELL_WORDS {
            self.store(4 * i as u64, 0);
        }
    }
}

/// What the engine needs of each function.
struct Port {
    fid: FunctionId,
    pci: Arc<PciState>,
    doorbells: Arc<DoorbellArea>,
}

/// Shared between the functions' BAR handlers and the engine.
pub(crate) struct NicShared {
    fabric: Arc<Fabric>,
    core: Mutex<NicCore>,
    ports: std::sync::OnceLock<Vec<Port>>,
}

/// The NIC: its functions and its engine.
pub struct Nic {
    shared: Arc<NicShared>,
    functions: Vec<Arc<NicFunction>>,
}

impl Nic {
    /// Builds the NIC and plugs its host functions into `fabric`.
    pub fn new(fabric: &Arc<Fabric>, config: NicConfig) -> Arc<Nic> {
        let n = config.host_functions.clamp(1, MAX_HOST_FUNCTIONS as u16);
        let shared = Arc::new(NicShared {
            fabric: fabric.clone(),
            core: Mutex::new(NicCore::new(config)),
            ports: Default::default(),
        });
        let mut ports = Vec::new();
        let mut functions = Vec::new();
        for index in 0..n {
            let f = fabric.attach(|fid| {
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
                    cmd: Mutex::new(CmdRegs::default()),
                })
            });
            functions.push(f);
        }
        let _ = shared.ports.set(ports);
        Arc::new(Nic { shared, functions })
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

    /// Replaces real time by a clock the caller sets (nanoseconds); `None` returns to real time.
    /// Meters and CQE timestamps read this clock.
    pub fn set_clock(&self, now_ns: Option<u64>) {
        self.shared.lock().manual_clock = now_ns;
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
        datapath::poll(&mut core, &self.shared.fabric, ports)
    }

    /// Counters of the uplink wire side and other device-global statistics.
    pub fn stats(&self) -> NicStats {
        let core = self.shared.lock();
        NicStats {
            uplink: core.eswitch.uplink.counters,
            wire_tx_frames: core.wire_tx_frames,
            bad_doorbells: core.bad_doorbells,
        }
    }
}

/// Device-global statistics.
#[derive(Clone, Copy, Debug, Default)]
pub struct NicStats {
    pub uplink: eswitch::VportCounters,
    pub wire_tx_frames: u64,
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

#[derive(Default)]
struct CmdRegs {
    in_addr: u64,
    out_addr: u64,
    in_len: u32,
    out_len: u32,
    status: u32,
}

/// One host function of the NIC.
pub struct NicFunction {
    pci: Arc<PciState>,
    doorbells: Arc<DoorbellArea>,
    shared: Arc<NicShared>,
    /// Function index = vPort number.
    index: u16,
    cmd: Mutex<CmdRegs>,
}

impl NicFunction {
    pub fn vport(&self) -> u16 {
        self.index
    }

    pub fn doorbells(&self) -> &Arc<DoorbellArea> {
        &self.doorbells
    }

    fn control_read(&self, offset: u64) -> u32 {
        let regs = self.cmd.lock().unwrap_or_else(|e| e.into_inner());
        match offset {
            reg::FW_VERSION => FW_VERSION,
            reg::CMD_INTERFACE_REV => INTERFACE_REV,
            reg::DEVICE_STATUS => STATUS_READY,
            reg::CMD_IN_ADDR_LO => regs.in_addr as u32,
            reg::CMD_IN_ADDR_HI => (regs.in_addr >> 32) as u32,
            reg::CMD_OUT_ADDR_LO => regs.out_addr as u32,
            reg::CMD_OUT_ADDR_HI => (regs.out_addr >> 32) as u32,
            reg::CMD_IN_LEN => regs.in_len,
            reg::CMD_OUT_LEN => regs.out_len,
            reg::CMD_STATUS => regs.status,
            reg::VPORT_NUMBER => self.index as u32,
            reg::MAC_LO | reg::MAC_HI => {
                drop(regs);
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
        let mut regs = self.cmd.lock().unwrap_or_else(|e| e.into_inner());
        match offset {
            reg::CMD_IN_ADDR_LO => regs.in_addr = (regs.in_addr & !0xffff_ffff) | value as u64,
            reg::CMD_IN_ADDR_HI => {
                regs.in_addr = (regs.in_addr & 0xffff_ffff) | (value as u64) << 32
            }
            reg::CMD_OUT_ADDR_LO => regs.out_addr = (regs.out_addr & !0xffff_ffff) | value as u64,
            reg::CMD_OUT_ADDR_HI => {
                regs.out_addr = (regs.out_addr & 0xffff_ffff) | (value as u64) << 32
            }
            reg::CMD_IN_LEN => regs.in_len = value,
            reg::CMD_OUT_LEN => regs.out_len = value,
            reg::CMD_DOORBELL => {
                let token = value & 0xffff;
                let delivery = {
                    let mut core = self.shared.lock();
                    let mut dma = self.shared.fabric.dma(self.pci.id);
                    cmd::deliver(
                        &mut core,
                        &mut dma,
                        &self.doorbells,
                        self.index,
                        regs.in_addr,
                        regs.in_len,
                        regs.out_addr,
                        regs.out_len,
                    )
                };
                regs.status = CMD_STATUS_DONE | (delivery as u32) << 8 | token << 16;
            }
            reg::DEVICE_RESET if value == RESET_MAGIC => {
                drop(regs);
                self.reset();
            }
            _ => {}
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
            BAR_DOORBELL => {
                if data.len() == 4 && offset.is_multiple_of(4) {
                    self.doorbells.store(
                        offset,
                        u32::from_le_bytes([data[0], data[1], data[2], data[3]]),
                    );
                } else {
                    self.doorbells.write(offset, data);
                }
            }
            _ => {
                self.pci.msix_write(bar, offset, data);
            }
        }
    }

    fn reset(&self) {
        // Lock order is command registers, then core (as CMD_DOORBELL takes them).
        let mut regs = self.cmd.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.lock().destroy_function_objects(self.index);
        self.doorbells.clear();
        *regs = CmdRegs::default();
    }
}

// ---------------------------------------------------------------------------------------------
// Queue state
// ---------------------------------------------------------------------------------------------

/// Event queue.
pub(crate) struct EventQueue {
    owner: u16,
    addr: u64,
    log_size: u8,
    vector: u16,
    pc: u32,
    ci: u32,
    armed: bool,
    /// The doorbell word last read, and the arm sequence number last acted on: an arm is a
    /// word with the ARM bit and a new sequence number.
    last_db: u32,
    arm_sn: u32,
    overflows: u32,
    refs: u32,
}

/// Completion queue.
pub(crate) struct CompletionQueue {
    owner: u16,
    addr: u64,
    log_size: u8,
    eqn: u32,
    pc: u32,
    ci: u32,
    armed: bool,
    /// The doorbell word last read, and the arm sequence number last acted on: an arm is a
    /// word with the ARM bit and a new sequence number.
    last_db: u32,
    arm_sn: u32,
    overflows: u32,
    refs: u32,
}

impl CompletionQueue {
    /// Free CQE slots, from the consumer counter the driver last reported (24-bit, wrapping).
    fn room(&self) -> u32 {
        (1u32 << self.log_size).saturating_sub(self.pc.wrapping_sub(self.ci) & db::CI_MASK)
    }
}

pub(crate) struct SendQueue {
    owner: u16,
    addr: u64,
    log_size: u8,
    cqn: u32,
    signal_all: bool,
    /// WQE basic blocks consumed.
    ci: u32,
    state: QueueState,
    packets: u64,
    bytes: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RqKind {
    Regular,
    Striding {
        log_stride_size: u8,
        log_strides: u8,
    },
}

/// The striding WQE being filled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpenWqe {
    addr: u64,
    next_stride: u32,
}

pub(crate) struct ReceiveQueue {
    owner: u16,
    addr: u64,
    log_size: u8,
    cqn: u32,
    kind: RqKind,
    /// WQEs consumed (a striding WQE counts when its last stride is used).
    ci: u32,
    open: Option<OpenWqe>,
    state: QueueState,
    /// Flow entries and RSS groups pointing here.
    refs: u32,
    packets: u64,
    bytes: u64,
    out_of_buffer: u64,
    oversize_drops: u64,
    truncated: u64,
}

/// An object created by, and visible only to, one host function.
pub(crate) trait Owned {
    fn owner(&self) -> u16;
}

macro_rules! owned {
    ($($t:ty),*) => {$(
        impl Owned for $t {
            fn owner(&self) -> u16 {
                self.owner
            }
        }
    )*};
}
owned!(EventQueue, CompletionQueue, SendQueue, ReceiveQueue);

/// An object other objects point at (a CQ's EQ, an SQ's or RQ's CQ, an RSS group's RQs): it
/// cannot be destroyed while `refs` is non-zero.
pub(crate) trait Referenced {
    fn refs_mut(&mut self) -> &mut u32;
}

macro_rules! referenced {
    ($($t:ty),*) => {$(
        impl Referenced for $t {
            fn refs_mut(&mut self) -> &mut u32 {
                &mut self.refs
            }
        }
    )*};
}
referenced!(EventQueue, CompletionQueue, ReceiveQueue);

/// A table of numbered objects; numbers are indices and are reused after destroy.
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    limit: u32,
}

impl<T> Slab<T> {
    fn new(limit: u32) -> Self {
        Slab {
            items: Vec::new(),
            limit,
        }
    }
    fn insert(&mut self, v: T) -> Option<u32> {
        if let Some(i) = self.items.iter().position(|x| x.is_none()) {
            self.items[i] = Some(v);
            return Some(i as u32);
        }
        if self.items.len() as u32 >= self.limit {
            return None;
        }
        self.items.push(Some(v));
        Some(self.items.len() as u32 - 1)
    }
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        self.items.get(id as usize)?.as_ref()
    }
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.items.get_mut(id as usize)?.as_mut()
    }
    fn remove(&mut self, id: u32) -> Option<T> {
        self.items.get_mut(id as usize)?.take()
    }
}

impl<T: Owned> Slab<T> {
    /// Object `id` if `function` owns it; a command naming anything else gets BAD_RESOURCE.
    pub(crate) fn owned(&self, id: u32, function: u16) -> Result<&T, (CmdStatus, u32)> {
        self.get(id)
            .filter(|q| q.owner() == function)
            .ok_or((CmdStatus::BadResource, id))
    }

    pub(crate) fn owned_mut(&mut self, id: u32, function: u16) -> Result<&mut T, (CmdStatus, u32)> {
        self.get_mut(id)
            .filter(|q| q.owner() == function)
            .ok_or((CmdStatus::BadResource, id))
    }

    /// Removes object `id` of `function` and returns it, unless something still refers to it
    /// (RESOURCE_BUSY with the reference count as syndrome).
    pub(crate) fn take_unreferenced(
        &mut self,
        id: u32,
        function: u16,
    ) -> Result<T, (CmdStatus, u32)>
    where
        T: Referenced,
    {
        let refs = *self.owned_mut(id, function)?.refs_mut();
        if refs != 0 {
            return Err((CmdStatus::ResourceBusy, refs));
        }
        self.remove(id).ok_or((CmdStatus::BadResource, id))
    }

    fn remove_owned_by(&mut self, function: u16) {
        for slot in self.items.iter_mut() {
            if slot.as_ref().is_some_and(|q| q.owner() == function) {
                *slot = None;
            }
        }
    }
}

impl<T: Referenced> Slab<T> {
    /// One more object points at `id` (if it exists).
    pub(crate) fn add_ref(&mut self, id: u32) {
        if let Some(o) = self.get_mut(id) {
            *o.refs_mut() += 1;
        }
    }

    /// One object fewer points at `id`.
    pub(crate) fn drop_ref(&mut self, id: u32) {
        if let Some(o) = self.get_mut(id) {
            let r = o.refs_mut();
            *r = r.saturating_sub(1);
        }
    }
}

/// Everything behind the NIC's lock.
pub(crate) struct NicCore {
    config: NicConfig,
    eqs: Slab<EventQueue>,
    cqs: Slab<CompletionQueue>,
    sqs: Slab<SendQueue>,
    rqs: Slab<ReceiveQueue>,
    /// SQ numbers in creation order, polled round-robin.
    active_sqs: Vec<u32>,
    eswitch: Eswitch,
    flow_entry_count: u32,
    wire: Box<dyn Wire>,
    tap: Option<Box<dyn FrameTap>>,
    /// Transmit frame assembly buffer (no allocation per packet).
    frame: Vec<u8>,
    /// Second buffer for frames received from the wire.
    wire_frame: Vec<u8>,
    /// Scratch buffer for VXLAN-encapsulated frames.
    encap_frame: Vec<u8>,
    /// Send WQE fetch buffer.
    wqe: Vec<u8>,
    epoch: Instant,
    /// A clock the runner sets (tests, discrete-event runs) instead of real time.
    manual_clock: Option<u64>,
    wire_tx_frames: u64,
    bad_doorbells: u64,
}

impl NicCore {
    fn new(config: NicConfig) -> Self {
        let max_frame = config.mtu as usize + 64;
        NicCore {
            eqs: Slab::new(config.max_eqs.min(db::SLOTS)),
            cqs: Slab::new(config.max_cqs.min(db::SLOTS)),
            sqs: Slab::new(config.max_sqs.min(db::SLOTS)),
            rqs: Slab::new(config.max_rqs.min(db::SLOTS)),
            active_sqs: Vec::new(),
            eswitch: Eswitch::new(config.host_functions.clamp(1, MAX_HOST_FUNCTIONS as u16)),
            flow_entry_count: 0,
            wire: Box::new(NullWire::default()),
            tap: None,
            frame: vec![0; max_frame],
            wire_frame: vec![0; max_frame],
            encap_frame: Vec::with_capacity(max_frame + VXLAN_ENCAP_LEN),
            wqe: vec![0; MAX_WQE_BYTES],
            epoch: Instant::now(),
            manual_clock: None,
            wire_tx_frames: 0,
            bad_doorbells: 0,
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
            rsvd: 0,
            max_mtu: U32::new(c.mtu),
            vport: U16::new(function),
            is_eswitch_manager: (function == 0) as u8,
            rsvd2: [0; 5],
        }
    }

    /// Function-level reset: every object the function owns goes, in dependency order.
    fn destroy_function_objects(&mut self, function: u16) {
        let es = &mut self.eswitch;
        // Tables (and their entries), dropping references they held.
        let owned: Vec<u32> = (0..es.tables.len() as u32)
            .filter(|&t| es.table(t).is_some_and(|t| t.owner == function))
            .collect();
        for t in &owned {
            if let Some(tab) = es.tables[*t as usize].take() {
                self.flow_entry_count -= tab.entries.len() as u32;
                for e in &tab.entries {
                    release_entry_refs(&mut self.rqs, es, e.actions, e.dest, e.meter, e.encap);
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
                        if let Some(r) = self.rqs.get_mut(rq) {
                            r.refs = r.refs.saturating_sub(1);
                        }
                    }
                }
            }
        }
        self.sqs.remove_owned_by(function);
        self.active_sqs.retain(|i| self.sqs.get(*i).is_some());
        self.rqs.remove_owned_by(function);
        self.cqs.remove_owned_by(function);
        self.eqs.remove_owned_by(function);
    }
}

/// Drops the references a flow entry's fate holds on RQs, RSS groups or tables.
fn release_entry_refs(
    rqs: &mut Slab<ReceiveQueue>,
    es: &mut Eswitch,
    actions: u32,
    dest: u32,
    meter: u32,
    encap: u32,
) {
    if actions & action::VXLAN_ENCAP != 0 {
        if let Some(e) = es.encaps.get_mut(encap as usize).and_then(|e| e.as_mut()) {
            e.refs = e.refs.saturating_sub(1);
        }
    }
    if actions & action::METER != 0 {
        if let Some(m) = es.meters.get_mut(meter as usize).and_then(|m| m.as_mut()) {
            m.refs = m.refs.saturating_sub(1);
        }
    }
    if actions & action::FWD_RQ != 0 {
        rqs.drop_ref(dest);
    }
    if actions & action::GOTO_TABLE != 0 {
        if let Some(t) = es.table_mut(dest) {
            t.refs = t.refs.saturating_sub(1);
        }
    }
    if actions & action::FWD_RSS != 0 {
        // RSS groups are only counted through their RQs; the group itself may be destroyed
        // only when no entry names it, which the destroy command checks by scanning.
    }
}
