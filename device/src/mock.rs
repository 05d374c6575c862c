//! A mock of the *driver* side of the card, in the manner of rust-vmm `virtio-queue`'s
//! `mock.rs`: commands, WQEs, receive descriptors and doorbells are written into real host
//! memory and registers exactly as a driver writes them, and CQEs and EQEs are read back from
//! the rings the device wrote, so the device crate tests its NIC core and FLD (and the fuzz
//! targets drive them) without the driver crate. Formats come from `fld_abi` only.
//!
//! Host memory is one anonymous mapping with guard bytes on both sides: only the middle is
//! mapped for DMA, and [`MockHost::guard_intact`] checks that no device access ever touched the
//! rest. Allocation is a bump pointer (a harness needs no more); interrupts are counted per
//! function and vector.
//!
//! Left out: anything a test does not need — no flow-rule vocabulary beyond "everything to this
//! RQ", no RSS, no recovery paths (a test writes those commands itself with
//! [`MockHost::command`]).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use vm_memory::{Bytes, GuestAddress, GuestRegionMmap, MemoryRegionAddress};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::card::{Card, CardConfig};
use crate::fabric::{DirtyPages, Fabric, FabricConfig, HostRegion, DIRTY_PAGE_SIZE};
use crate::fld::FldFunction;
use crate::nic::{Nic, NicConfig};
use crate::pcie::{FunctionId, InterruptSink, MsiMessage};
use fld_abi::fld as fabi;
use fld_abi::nic::*;
use fld_abi::pci::*;

/// A brought-up host's state ([`MockHost::snapshot`]).
pub struct MockSnapshot {
    /// The host memory it was taken of: it is restored into that host only.
    host: usize,
    fabric: crate::fabric::FabricSnapshot,
    nic: crate::nic::NicSnapshot,
    fld: Option<crate::fld::FldSnapshot>,
    /// The memory the allocator had handed out.
    memory: HandedOut,
    bars: BTreeMap<(FunctionId, u8), u64>,
    token: u16,
    cmd: (u64, u64),
    mailbox: [Option<(u64, u64)>; crate::nic::MAX_HOST_FUNCTIONS],
    interrupts: HashMap<(FunctionId, u16), u64>,
}

/// The memory the mock's allocator handed out, kept as its pages that hold a non-zero byte
/// (most of a brought-up card's buffers are zeros: they are zeroed again, not copied).
#[derive(Default)]
struct HandedOut {
    /// Told apart from every other memory state a snapshot took; 0 is memory all zeros, where
    /// a recycle returns it.
    id: u64,
    len: usize,
    /// `(offset, bytes)`, in order of offset: whole pages, the last one up to `len`.
    pages: Vec<(usize, Vec<u8>)>,
}

/// Bus address of the DMA-mapped part of host memory.
pub const MOCK_IOVA: u64 = 0x1_0000_0000;
/// Where BARs are assigned: above host memory.
const MOCK_MMIO: u64 = 0x40_0000_0000;
/// Guard bytes before and after the mapped part of host memory.
const GUARD: usize = 4096;
/// Byte the guard areas are filled with.
const CANARY: u8 = 0xc3;
/// MSI-X vectors the mock programs and unmasks per function (a driver sets up those it uses).
pub const MOCK_VECTORS: u16 = 4;
/// MSI address of every vector (interpreted by nobody).
const MSI_ADDRESS: u32 = 0xfee0_0000;

#[derive(Default)]
struct Interrupts {
    counts: Mutex<HashMap<(FunctionId, u16), u64>>,
}

impl InterruptSink for Interrupts {
    fn deliver(&self, function: FunctionId, msg: MsiMessage) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((function, msg.vector))
            .or_default() += 1;
    }
}

/// A signalled RDMA WQE with no immediate, fence or solicited event, gathering `data`.
pub fn signalled(opcode: u8, remote: Option<(u64, u32)>, data: &[Sge]) -> RdmaWqe<'_> {
    RdmaWqe {
        opcode,
        signal: true,
        solicited: false,
        fence: false,
        imm: 0,
        remote,
        atomic: None,
        data: WqeData::Gather(data),
    }
}

/// An RC QP the mock made ([`MockHost::create_rdma_qp`]): its number, PD, the key and bus
/// address of its registered buffer (virtual address = bus address), its CQ and its rings.
#[derive(Clone)]
pub struct MockQp {
    pub function: u16,
    pub qpn: u32,
    pub pd: u32,
    pub key: u32,
    pub buf: u64,
    pub buf_len: usize,
    pub gid: [u8; 16],
    pub eq: MockRing,
    pub cq: MockRing,
    pub sq: MockSq,
    pub rq_addr: u64,
    pub log_rq: u8,
    pub log_stride: u8,
    pub rq_pi: u32,
}

impl MockQp {
    /// Writes an RDMA send WQE and rings the QP's send doorbell.
    pub fn post_send(&mut self, host: &MockHost, wqe: &RdmaWqe<'_>) {
        let mut buf = [0u8; MAX_WQE_BYTES];
        let index = self.sq.pi as u16;
        let n = wqe
            .encode(self.qpn, index, &mut buf)
            .expect("a well-formed WQE");
        self.post_send_raw(host, &buf[..n]);
    }

    /// Writes raw bytes as send WQE blocks (padded) and rings the send doorbell.
    pub fn post_send_raw(&mut self, host: &MockHost, wqe: &[u8]) {
        self.sq.write_raw(host, wqe);
        host.doorbell(
            self.function,
            db::slot(db::QP_SQ_BASE, self.qpn - QPN_BASE),
            self.sq.pi & db::PI_MASK,
        );
    }

    /// Posts a receive WQE of `sges` and rings the receive doorbell.
    pub fn post_recv(&mut self, host: &MockHost, sges: &[Sge]) {
        let stride = 1usize << self.log_stride;
        let mut w = vec![0u8; stride];
        assert!(encode_recv_wqe(sges, &mut w), "receive WQE fits");
        let slot = u64::from(self.rq_pi & ((1 << self.log_rq) - 1)) * stride as u64;
        host.write(self.rq_addr + slot, &w);
        self.rq_pi = self.rq_pi.wrapping_add(1);
        host.doorbell(
            self.function,
            db::slot(db::QP_RQ_BASE, self.qpn - QPN_BASE),
            self.rq_pi & db::PI_MASK,
        );
    }

    /// An SGE of `len` bytes at `off` into the QP's buffer.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.buf + off,
            length: len,
            lkey: self.key,
        }
    }
}

/// A shared receive queue the mock made ([`MockHost::create_srq`]).
pub struct MockSrq {
    pub function: u16,
    pub srqn: u32,
    pub addr: u64,
    pub log_size: u8,
    pub log_stride: u8,
    pub pi: u32,
}

impl MockSrq {
    /// Posts a receive WQE of `sges` and rings the SRQ's doorbell.
    pub fn post(&mut self, host: &MockHost, sges: &[Sge]) {
        let stride = 1usize << self.log_stride;
        let mut w = vec![0u8; stride];
        assert!(encode_recv_wqe(sges, &mut w), "receive WQE fits");
        let slot = u64::from(self.pi & ((1 << self.log_size) - 1)) * stride as u64;
        host.write(self.addr + slot, &w);
        self.pi = self.pi.wrapping_add(1);
        host.doorbell(
            self.function,
            db::slot(db::SRQ_BASE, self.srqn),
            self.pi & db::PI_MASK,
        );
    }
}

/// What a command returned: the delivery status of CMD_STATUS and, when delivered, the output
/// header's status and syndrome and the output body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmdReply {
    pub delivery: u8,
    pub status: u8,
    pub syndrome: u32,
    pub out: Vec<u8>,
}

impl CmdReply {
    pub fn ok(&self) -> bool {
        self.delivery == CmdDelivery::Ok as u8 && self.status == CmdStatus::Ok as u8
    }

    /// The object number a CREATE_* returned.
    pub fn id(&self) -> Option<u32> {
        self.ok()
            .then(|| CreateOut::read_from_prefix(&self.out).ok())
            .flatten()
            .map(|(o, _)| o.id.get())
    }

    /// Whether the command failed with `status` and `syndrome`.
    pub fn failed_with(&self, status: CmdStatus, syndrome: u32) -> bool {
        self.delivery == CmdDelivery::Ok as u8
            && self.status == status as u8
            && self.syndrome == syndrome
    }
}

/// A ring the device produces into (EQ or CQ), as the mock consumes it.
#[derive(Clone, Copy, Debug)]
pub struct MockRing {
    pub id: u32,
    pub addr: u64,
    pub log_size: u8,
    /// Entries consumed.
    pub ci: u32,
    arm_sn: u32,
}

/// A send queue as the mock posts to it.
#[derive(Clone, Copy, Debug)]
pub struct MockSq {
    pub id: u32,
    pub addr: u64,
    pub log_size: u8,
    /// WQE basic blocks posted.
    pub pi: u32,
}

/// A receive queue as the mock posts to it.
#[derive(Clone, Copy, Debug)]
pub struct MockRq {
    pub id: u32,
    pub addr: u64,
    pub log_size: u8,
    /// Receive WQEs posted.
    pub pi: u32,
}

/// The queues of one NIC function brought up for traffic: an EQ, a send CQ and SQ, a receive CQ
/// and a regular RQ whose buffers are posted, and a receive table sending everything to the RQ.
#[derive(Clone, Debug)]
pub struct MockPort {
    pub function: u16,
    pub eq: MockRing,
    pub tx_cq: MockRing,
    pub sq: MockSq,
    pub rx_cq: MockRing,
    pub rq: MockRq,
    /// One receive buffer per RQ slot.
    pub rx_buffers: Vec<u64>,
    pub rx_buffer_len: u32,
    /// Staging buffer for frames to send.
    pub tx_buffer: u64,
}

/// FLD bound to NIC function 0 as FLD-E binds it (paper §5.3).
#[derive(Clone, Debug)]
pub struct MockFldBinding {
    pub eq: MockRing,
    pub tx_cqn: u32,
    pub rx_cqn: u32,
    pub sqns: Vec<u32>,
    pub rq: MockRq,
}

/// Host memory, the card's functions as a driver finds them after enumeration, and the mock
/// driver's bookkeeping.
pub struct MockHost {
    pub fabric: Arc<Fabric>,
    pub nic: Arc<Nic>,
    pub fld: Option<Arc<FldFunction>>,
    memory: Arc<GuestRegionMmap>,
    mapped: usize,
    next: Cell<usize>,
    /// The pages of host memory written since it was last returned to a known state: the
    /// fabric's log of the card's writes ([`Fabric::track_dirty_pages`]), where the mock notes
    /// its own writes too.
    dirty: Arc<DirtyPages>,
    /// The [`HandedOut::id`] of the memory state host memory was last returned to: it differs
    /// from that state in the pages of `dirty` only.
    basis: Cell<Option<u64>>,
    bars: BTreeMap<(FunctionId, u8), u64>,
    interrupts: Arc<Interrupts>,
    token: Cell<u16>,
    /// Command buffers (input, output), shared by all functions.
    cmd: (u64, u64),
    /// The command buffer addresses each NIC function's mailbox registers hold, as the mock
    /// last programmed them; forgotten on any register write or reset the mock makes, so they
    /// are programmed again. A driver programs its mailbox once, not per command.
    mailbox: Cell<[Option<(u64, u64)>; crate::nic::MAX_HOST_FUNCTIONS]>,
}

impl MockHost {
    /// A NIC alone on a fabric, with `mapped` bytes of host memory.
    pub fn nic(config: NicConfig, mapped: usize) -> Self {
        let fabric = Fabric::new(FabricConfig::default());
        let nic = Nic::new(&fabric, config);
        Self::enumerate(fabric, nic, None, mapped)
    }

    /// A whole card (NIC, FLD, switch), with `mapped` bytes of host memory.
    pub fn card(config: CardConfig, mapped: usize) -> Self {
        let card = Card::new(config);
        Self::enumerate(
            card.fabric.clone(),
            card.nic.clone(),
            Some(card.fld.clone()),
            mapped,
        )
    }

    /// Maps host memory for every function, assigns BARs, enables memory decode, bus
    /// mastering and MSI-X, as a driver's probe does.
    fn enumerate(
        fabric: Arc<Fabric>,
        nic: Arc<Nic>,
        fld: Option<Arc<FldFunction>>,
        mapped: usize,
    ) -> Self {
        let mapped = mapped.next_multiple_of(4096);
        let memory = Arc::new(
            GuestRegionMmap::from_range(GuestAddress(0), mapped + 2 * GUARD, None)
                .expect("anonymous host memory"),
        );
        let dirty = fabric.track_dirty_pages(MOCK_IOVA, mapped as u64);
        let host = MockHost {
            fabric,
            nic,
            fld,
            memory,
            mapped,
            next: Cell::new(0),
            dirty,
            // Fresh anonymous memory is all zeros, the state of id 0.
            basis: Cell::new(Some(0)),
            bars: BTreeMap::new(),
            interrupts: Arc::new(Interrupts::default()),
            token: Cell::new(0),
            cmd: (0, 0),
            mailbox: Cell::new([None; crate::nic::MAX_HOST_FUNCTIONS]),
        };
        let cmd = (
            host.alloc(CMD_MAX_LEN as usize),
            host.alloc(CMD_MAX_LEN as usize),
        );
        let mut host = MockHost { cmd, ..host };
        host.fill_guards();
        host.reenumerate();
        host
    }

    /// The host as [`MockHost::nic`] or [`MockHost::card`] built it, at the cost of what was
    /// used rather than of building: the card gets a conventional reset
    /// ([`Card::conventional_reset`]), its wire, tap and time return to the mock's defaults,
    /// host memory is zero again (the pages written since it last was are zeroed, the guards
    /// refilled), the allocator starts over and the card is enumerated again. FLD keeps the
    /// accelerator plugged into it. A fuzz target recycles one host for every input.
    pub fn recycle(&mut self) {
        // The NIC's card-wide state first: the functions' resets that follow then find no
        // objects left to take apart one by one.
        self.nic.conventional_reset();
        self.fabric.conventional_reset();
        self.outside_the_card_unplugged();
        self.host_memory_returned(&HandedOut::default());
        self.token.set(0);
        self.interrupts
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.cmd = (
            self.alloc(CMD_MAX_LEN as usize),
            self.alloc(CMD_MAX_LEN as usize),
        );
        self.reenumerate();
    }

    /// The host brought up as it is — the card's state (the fabric's and the NIC's) and the
    /// host's (what the allocator handed out, with its bytes; the interrupts taken; the
    /// command buffers and BARs the mock knows) — to return to for every fuzz input
    /// ([`MockHost::restore`]) in place of a recycle and the same bring-up by commands. `None`
    /// when some of it cannot be kept ([`Nic::snapshot`], [`FldFunction::snapshot`]). FLD's
    /// accelerator is not part of it.
    pub fn snapshot(&self) -> Option<MockSnapshot> {
        let nic = self.nic.snapshot()?;
        let fld = match &self.fld {
            Some(f) => Some(f.snapshot()?),
            None => None,
        };
        static NEXT_STATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let len = self.next.get();
        let mut memory = HandedOut {
            id: NEXT_STATE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            len,
            pages: Vec::new(),
        };
        for at in (0..len).step_by(4096) {
            let mut page = vec![0u8; (len - at).min(4096)];
            self.memory
                .read_slice(&mut page, MemoryRegionAddress((GUARD + at) as u64))
                .expect("the allocator hands out mapped memory only");
            if page.iter().any(|&b| b != 0) {
                memory.pages.push((at, page));
            }
        }
        Some(MockSnapshot {
            host: self.memory.as_ptr() as usize,
            fabric: self.fabric.snapshot(),
            nic,
            fld,
            memory,
            bars: self.bars.clone(),
            token: self.token.get(),
            cmd: self.cmd,
            mailbox: self.mailbox.get(),
            interrupts: self
                .interrupts
                .counts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        })
    }

    /// Returns to `s`, which [`MockHost::snapshot`] took of this host: the card as it was, what
    /// is outside it unplugged as by a recycle (the wire, the tap, the clocks), the memory the
    /// allocator had handed out as it was, the rest of host memory zero.
    pub fn restore(&mut self, s: &MockSnapshot) {
        assert_eq!(
            s.host,
            self.memory.as_ptr() as usize,
            "a snapshot of another host"
        );
        self.nic.restore(&s.nic);
        if let (Some(f), Some(fs)) = (&self.fld, &s.fld) {
            f.restore(fs);
        }
        self.fabric.restore(&s.fabric);
        self.outside_the_card_unplugged();
        self.host_memory_returned(&s.memory);
        self.bars.clone_from(&s.bars);
        self.token.set(s.token);
        self.cmd = s.cmd;
        self.mailbox.set(s.mailbox);
        self.interrupts
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone_from(&s.interrupts);
    }

    /// The NIC's uplink, tap and clocks as a new card's: nothing plugged in, time standing.
    fn outside_the_card_unplugged(&self) {
        self.nic
            .set_uplink(Box::new(crate::wire::NullWire::default()));
        self.nic.set_tap(None);
        self.nic.set_clock(None);
        self.nic
            .set_clock_source(Arc::new(crate::clock::ManualClock::default()));
    }

    /// Host memory as the allocator hands it out again: `contents` at its start, handed out
    /// (the allocator's next address is after it), and zeros after it. When host memory was
    /// last returned to that same state, only the pages written since (the dirty-page log: the
    /// card's writes and the mock's own) are written again; otherwise all of it is
    /// ([`MockHost::all_host_memory_returned`]). The guard areas are filled again if a stray
    /// write reached them.
    fn host_memory_returned(&mut self, contents: &HandedOut) {
        let complete = self.basis.get() == Some(contents.id)
            && self
                .dirty
                .take(|page| self.page_returned(contents, page as usize));
        if !complete {
            self.all_host_memory_returned(contents);
            // What was logged is rewritten with the rest.
            self.dirty.take(|_| {});
        }
        self.basis.set(Some(contents.id));
        if !self.guard_intact() {
            self.fill_guards();
        }
        self.next.set(contents.len);
    }

    /// Writes page `page` of the mapped memory as `contents` has it (zeros past its end).
    fn page_returned(&self, contents: &HandedOut, page: usize) {
        let at = page * DIRTY_PAGE_SIZE as usize;
        let len = (DIRTY_PAGE_SIZE as usize).min(self.mapped.saturating_sub(at));
        let kept = contents
            .pages
            .binary_search_by_key(&at, |(offset, _)| *offset)
            .ok()
            .map_or(&[][..], |i| &contents.pages[i].1[..]);
        // SAFETY: `[at, at + len)` lies in the mapped part of this host's own anonymous
        // mapping (`len` stops at `mapped`), `kept` is at most one page of it, and no one holds
        // a reference into it (the card was reset or restored, and no engine runs while the
        // mock does not step it).
        unsafe {
            let start = self.memory.as_ptr().add(GUARD + at);
            std::ptr::copy_nonoverlapping(kept.as_ptr(), start, kept.len());
            std::ptr::write_bytes(start.add(kept.len()), 0, len - kept.len());
        }
    }

    /// [`MockHost::host_memory_returned`] for all of host memory: every page the allocator had
    /// handed out is written in place as [`MockHost::page_returned`] writes a logged one (the
    /// pages stay resident, so the next run does not fault them in again); the rest, which
    /// only a stray device write could have touched, goes back to the kernel.
    fn all_host_memory_returned(&mut self, contents: &HandedOut) {
        let used = self
            .next
            .get()
            .max(contents.len)
            .next_multiple_of(4096)
            .min(self.mapped);
        for page in 0..used / DIRTY_PAGE_SIZE as usize {
            self.page_returned(contents, page);
        }
        // SAFETY: the madvised range is the mapped part of this host's own anonymous private
        // mapping from `used` on, page aligned (GUARD, `used` and `mapped` are whole pages),
        // and no one holds a reference into it (the card was reset or restored, and no engine
        // runs while the mock does not step it). MADV_DONTNEED on private anonymous memory
        // makes the next access read zeros.
        let rc = unsafe {
            libc::madvise(
                self.memory.as_ptr().add(GUARD + used).cast(),
                self.mapped - used,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            // Not expected on Linux; the slow way gives the same memory.
            let zeros = vec![0u8; self.mapped - used];
            self.memory
                .write_slice(&zeros, MemoryRegionAddress((GUARD + used) as u64))
                .expect("the mapped part");
        }
    }

    fn fill_guards(&self) {
        let canary = [CANARY; GUARD];
        for at in [0, GUARD + self.mapped] {
            self.memory
                .write_slice(&canary, MemoryRegionAddress(at as u64))
                .expect("guard in bounds");
        }
    }

    /// What a driver does after a machine reset or when it takes over a card another client
    /// left in any state: maps host memory for every function again (replacing whatever maps
    /// they had), assigns BARs, enables memory decode, bus mastering and the first [`MOCK_VECTORS`] MSI-X
    /// vectors, and takes the interrupts.
    pub fn reenumerate(&mut self) {
        self.mailbox.set([None; crate::nic::MAX_HOST_FUNCTIONS]);
        let fabric = self.fabric.clone();
        self.bars.clear();
        let mut next_bar = MOCK_MMIO;
        for fid in 0..fabric.function_count() as FunctionId {
            fabric.unmap_host(fid, 0, u64::MAX);
            fabric
                .map_host(
                    fid,
                    HostRegion {
                        iova: MOCK_IOVA,
                        len: self.mapped as u64,
                        memory: self.memory.clone(),
                        offset: GUARD as u64,
                    },
                )
                .expect("mapping inside its memory");
            let Some(f) = fabric.function(fid) else {
                continue;
            };
            f.pci().set_external_msix(false);
            let specs = f.pci().config().bars().to_vec();
            for spec in specs {
                next_bar = next_bar.next_multiple_of(spec.size);
                fabric.assign_bar(fid, spec.index, next_bar);
                self.bars.insert((fid, spec.index), next_bar);
                next_bar += spec.size;
            }
            let command = CMD_MEMORY | CMD_BUS_MASTER;
            fabric.config_write(fid, OFF_COMMAND as u64, &command.to_le_bytes());
        }
        fabric.set_interrupt_sink(self.interrupts.clone());
        for fid in 0..fabric.function_count() as FunctionId {
            self.enable_msix(fid);
        }
    }

    fn enable_msix(&self, fid: FunctionId) {
        let mut cap = [0u8; 12];
        self.fabric.config_read(fid, OFF_MSIX_CAP as u64, &mut cap);
        let control = u16::from_le_bytes([cap[2], cap[3]]);
        let vectors = ((control & MSIX_CTRL_TABLE_SIZE) + 1).min(MOCK_VECTORS);
        let (bir, off) = msix_bir_offset(u32::from_le_bytes([cap[4], cap[5], cap[6], cap[7]]));
        let Some(base) = self.bars.get(&(fid, bir)).copied() else {
            return;
        };
        // Each vector's entry, a store per field, all in one run of stores.
        let mut stores = [(0u64, 0u32); MOCK_VECTORS as usize * 4];
        for v in 0..usize::from(vectors) {
            let e = off + v as u64 * MSIX_ENTRY_SIZE;
            stores[4 * v..4 * v + 4].copy_from_slice(&[
                (e + MSIX_ENTRY_ADDR_LO, MSI_ADDRESS),
                (e + MSIX_ENTRY_ADDR_HI, 0),
                (e + MSIX_ENTRY_DATA, v as u32),
                (e + MSIX_ENTRY_VECTOR_CTRL, 0),
            ]);
        }
        self.mailbox.set([None; crate::nic::MAX_HOST_FUNCTIONS]);
        self.write32_run(base, &stores, 0..4 * usize::from(vectors));
        let enabled = control | MSIX_CTRL_ENABLE;
        self.fabric
            .config_write(fid, OFF_MSIX_CONTROL as u64, &enabled.to_le_bytes());
    }

    // --- memory -----------------------------------------------------------------------------

    /// `len` bytes of DMA-mapped memory (page aligned from 4 KiB, else 64-byte aligned), zeroed
    /// when first handed out. Panics when the mapped memory is exhausted (a harness bug).
    pub fn alloc(&self, len: usize) -> u64 {
        let align = if len >= 4096 { 4096 } else { 64 };
        let start = self.next.get().next_multiple_of(align);
        let end = start + len.max(1);
        assert!(end <= self.mapped, "mock host memory exhausted");
        self.next.set(end);
        MOCK_IOVA + start as u64
    }

    /// The card the mock drives (for a transport serving it to someone else meanwhile).
    pub fn as_card(&self) -> Option<Arc<Card>> {
        Some(Arc::new(Card {
            fabric: self.fabric.clone(),
            nic: self.nic.clone(),
            fld: self.fld.clone()?,
        }))
    }

    /// Bytes of mapped host memory.
    pub fn mapped_len(&self) -> usize {
        self.mapped
    }

    fn offset(&self, iova: u64, len: usize) -> MemoryRegionAddress {
        let off = iova
            .checked_sub(MOCK_IOVA)
            .filter(|o| o + len as u64 <= self.mapped as u64)
            .expect("access inside mapped mock memory");
        MemoryRegionAddress(GUARD as u64 + off)
    }

    pub fn write(&self, iova: u64, data: &[u8]) {
        let at = self.offset(iova, data.len());
        self.memory.write_slice(data, at).expect("in bounds");
        self.dirty.mark(iova, data.len());
    }

    pub fn read(&self, iova: u64, buf: &mut [u8]) {
        let at = self.offset(iova, buf.len());
        self.memory.read_slice(buf, at).expect("in bounds");
    }

    pub fn write_obj<T: IntoBytes + Immutable>(&self, iova: u64, v: &T) {
        self.write(iova, v.as_bytes());
    }

    pub fn read_obj<T: FromBytes + IntoBytes>(&self, iova: u64) -> T {
        let mut v = T::new_zeroed();
        self.read(iova, v.as_mut_bytes());
        v
    }

    /// Whether the guard bytes around the mapped memory are untouched: no DMA ever left it.
    pub fn guard_intact(&self) -> bool {
        let mut buf = [0u8; GUARD];
        [0, GUARD + self.mapped].iter().all(|&at| {
            self.memory
                .read_slice(&mut buf, MemoryRegionAddress(at as u64))
                .is_ok()
                && buf == [CANARY; GUARD]
        })
    }

    // --- registers and the engine -----------------------------------------------------------

    /// Bus address of BAR `bar` of function `fid`.
    pub fn bar(&self, fid: FunctionId, bar: u8) -> u64 {
        self.bars.get(&(fid, bar)).copied().unwrap_or(0)
    }

    /// A 32-bit store anywhere on the bus; it may reach a mailbox register, so every
    /// function's mailbox is programmed again before its next command.
    pub fn mmio_write32(&self, addr: u64, v: u32) {
        self.mailbox.set([None; crate::nic::MAX_HOST_FUNCTIONS]);
        self.fabric.mmio_write(addr, &v.to_le_bytes());
    }

    /// 32-bit stores to `base + offset` for the `(offset, value)`s of `stores` in `range`, in
    /// order, handed to the fabric as one run ([`Fabric::mmio_write_all`]). Mailbox bookkeeping
    /// is the caller's.
    fn write32_run<const N: usize>(
        &self,
        base: u64,
        stores: &[(u64, u32); N],
        range: std::ops::Range<usize>,
    ) {
        let values = stores.map(|s| s.1.to_le_bytes());
        let writes: [(u64, &[u8]); N] = std::array::from_fn(|i| (stores[i].0, &values[i][..]));
        self.fabric.mmio_write_all(base, &writes[range]);
    }

    pub fn mmio_read32(&self, addr: u64) -> u32 {
        let mut b = [0u8; 4];
        self.fabric.mmio_read(addr, &mut b);
        u32::from_le_bytes(b)
    }

    /// Fabric ID of NIC function `f`.
    pub fn nic_fid(&self, f: u16) -> FunctionId {
        self.nic.function_id(f).expect("NIC function")
    }

    /// Interrupts delivered on `vector` of NIC function `f` since the last call.
    pub fn take_interrupts(&self, f: u16, vector: u16) -> u64 {
        let fid = self.nic_fid(f);
        self.interrupts
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(fid, vector))
            .unwrap_or(0)
    }

    /// What a driver can observe of the card after a run: the NIC's statistics and on-chip
    /// memory, every function's TLP counters and each NIC function's interrupts (taken), as
    /// lines added to `seen`, and the whole of host memory, returned. Two runs that must be
    /// indistinguishable compare these.
    pub fn observe(&self, seen: &mut Vec<String>) -> Vec<u8> {
        seen.push(format!("nic {:?}", self.nic.stats()));
        seen.push(format!("on chip {:?}", self.nic.on_chip_memory()));
        for fid in 0..self.fabric.function_count() as FunctionId {
            seen.push(format!("tlps {fid} {:?}", self.fabric.stats(fid)));
        }
        let functions = (0..crate::nic::MAX_HOST_FUNCTIONS as u16)
            .take_while(|&f| self.nic.function_id(f).is_some());
        for f in functions {
            for v in 0..MOCK_VECTORS {
                seen.push(format!("irq {f}/{v} {}", self.take_interrupts(f, v)));
            }
        }
        let mut memory = vec![0u8; self.mapped_len()];
        self.read(MOCK_IOVA, &mut memory);
        memory
    }

    /// One step of every engine.
    pub fn poll(&self) -> usize {
        self.nic.poll() + self.fld.as_ref().map_or(0, |f| f.poll())
    }

    /// Steps until nothing moves, at most `max` times; returns the steps taken.
    pub fn run(&self, max: usize) -> usize {
        (0..max).take_while(|_| self.poll() > 0).count()
    }

    /// Writes the doorbell word at `offset` of NIC function `f`'s doorbell page.
    pub fn doorbell(&self, f: u16, offset: u64, value: u32) {
        // The doorbell BAR holds no mailbox register: nothing to forget.
        self.fabric.mmio_write(
            self.bar(self.nic_fid(f), BAR_DOORBELL) + offset,
            &value.to_le_bytes(),
        );
    }

    /// NIC function `f`'s control register at `offset`.
    pub fn nic_reg(&self, f: u16, offset: u64) -> u32 {
        self.mmio_read32(self.bar(self.nic_fid(f), BAR_CONTROL) + offset)
    }

    pub fn set_nic_reg(&self, f: u16, offset: u64, v: u32) {
        if matches!(
            offset,
            reg::CMD_IN_ADDR_LO
                | reg::CMD_IN_ADDR_HI
                | reg::CMD_OUT_ADDR_LO
                | reg::CMD_OUT_ADDR_HI
                | reg::DEVICE_RESET
        ) {
            self.forget_mailbox(f);
        }
        self.write_nic_reg(f, offset, v);
    }

    fn write_nic_reg(&self, f: u16, offset: u64, v: u32) {
        self.fabric.mmio_write(
            self.bar(self.nic_fid(f), BAR_CONTROL) + offset,
            &v.to_le_bytes(),
        );
    }

    fn forget_mailbox(&self, f: u16) {
        let mut mailbox = self.mailbox.get();
        if let Some(m) = mailbox.get_mut(usize::from(f)) {
            *m = None;
        }
        self.mailbox.set(mailbox);
    }

    /// Function-level reset of NIC function `f` through DEVICE_RESET.
    pub fn reset_nic(&self, f: u16) {
        self.set_nic_reg(f, reg::DEVICE_RESET, RESET_MAGIC);
    }

    // --- commands ---------------------------------------------------------------------------

    /// Submits the command buffers at `in_addr`/`out_addr` to NIC function `f` and returns
    /// CMD_STATUS once it shows the token (the interface completes within the doorbell write).
    pub fn submit(
        &self,
        f: u16,
        in_addr: u64,
        in_len: u32,
        out_addr: u64,
        out_len: u32,
    ) -> CmdStatusRegister {
        let mut mailbox = self.mailbox.get();
        let programmed = mailbox.get(usize::from(f)).copied().flatten();
        let token = self.token.get().wrapping_add(1);
        self.token.set(token);
        // The mailbox's addresses (unless they are still programmed), its lengths and the
        // doorbell: stores in this order, as a driver makes them.
        let stores = [
            (reg::CMD_IN_ADDR_LO, in_addr as u32),
            (reg::CMD_IN_ADDR_HI, (in_addr >> 32) as u32),
            (reg::CMD_OUT_ADDR_LO, out_addr as u32),
            (reg::CMD_OUT_ADDR_HI, (out_addr >> 32) as u32),
            (reg::CMD_IN_LEN, in_len),
            (reg::CMD_OUT_LEN, out_len),
            (reg::CMD_DOORBELL, token as u32),
        ];
        let first = if programmed == Some((in_addr, out_addr)) {
            4
        } else {
            0
        };
        let base = self.bar(self.nic_fid(f), BAR_CONTROL);
        self.write32_run(base, &stores, first..stores.len());
        if let Some(m) = mailbox.get_mut(usize::from(f)) {
            *m = Some((in_addr, out_addr));
        }
        self.mailbox.set(mailbox);
        CmdStatusRegister::decode(self.nic_reg(f, reg::CMD_STATUS))
    }

    /// Runs command `opcode` with `body` on NIC function `f`, with room for the command's
    /// result.
    pub fn command(&self, f: u16, opcode: u16, body: &[u8]) -> CmdReply {
        self.command_with_output(f, opcode, body, output_len(opcode))
    }

    /// As [`MockHost::command`] with `out_len` bytes of output body offered.
    pub fn command_with_output(
        &self,
        f: u16,
        opcode: u16,
        body: &[u8],
        out_len: usize,
    ) -> CmdReply {
        let hdr = CmdInHeader {
            opcode: U16::new(opcode),
            ..Default::default()
        };
        let (cin, cout) = self.cmd;
        let body = &body[..body.len().min(CMD_MAX_LEN as usize - CMD_HEADER_LEN)];
        let out_len = out_len.min(CMD_MAX_LEN as usize - CMD_HEADER_LEN);
        self.write_obj(cin, &hdr);
        self.write(cin + CMD_HEADER_LEN as u64, body);
        // The output offered reads as zeros until the NIC writes it.
        static ZEROS: [u8; CMD_MAX_LEN as usize] = [0; CMD_MAX_LEN as usize];
        self.write(cout, &ZEROS[..CMD_HEADER_LEN + out_len]);
        let st = self.submit(
            f,
            cin,
            (CMD_HEADER_LEN + body.len()) as u32,
            cout,
            (CMD_HEADER_LEN + out_len) as u32,
        );
        let out_hdr: CmdOutHeader = self.read_obj(cout);
        let mut out = vec![0u8; out_len];
        self.read(cout + CMD_HEADER_LEN as u64, &mut out);
        CmdReply {
            delivery: st.delivery,
            status: out_hdr.status,
            syndrome: out_hdr.syndrome.get(),
            out,
        }
    }

    /// A CREATE_* command; panics with the reply when it fails (harness set-up).
    fn create<T: IntoBytes + Immutable>(&self, f: u16, opcode: u16, input: &T) -> u32 {
        let r = self.command(f, opcode, input.as_bytes());
        r.id()
            .unwrap_or_else(|| panic!("command {opcode:#x} failed: {r:?}"))
    }

    // --- queues -----------------------------------------------------------------------------

    /// Fills a ring with entries nobody has written (owner bit 1, invalid opcode).
    fn init_ring(&self, addr: u64, entry: usize, log_size: u8) {
        // A page of entries at a time, from one template: no buffer the size of the ring.
        const PAGE: usize = 4096;
        debug_assert!(entry <= PAGE, "an entry fits a page");
        let mut page = [0u8; PAGE];
        let per_page = (PAGE / entry).max(1);
        for e in page.chunks_exact_mut(entry) {
            e[OWNER_BYTE] = INVALID_OWNER_BYTE;
        }
        let entries = 1usize << log_size;
        for first in (0..entries).step_by(per_page) {
            let n = per_page.min(entries - first);
            self.write(addr + (first * entry) as u64, &page[..n * entry]);
        }
    }

    /// An armed EQ of `2^log_size` entries interrupting on `vector`.
    pub fn create_eq(&self, f: u16, log_size: u8, vector: u16) -> MockRing {
        let addr = self.alloc(EQE_SIZE << log_size);
        self.init_ring(addr, EQE_SIZE, log_size);
        let id = self.create(
            f,
            op::CREATE_EQ,
            &CreateEqIn {
                addr: U64::new(addr),
                log_size,
                rsvd: 0,
                msix_vector: U16::new(vector),
                rsvd2: [0; 4],
            },
        );
        let mut eq = MockRing {
            id,
            addr,
            log_size,
            ci: 0,
            arm_sn: 0,
        };
        eq.arm(self, f, db::EQ_BASE);
        eq
    }

    /// A CQ of `2^log_size` entries reporting to EQ `eqn`, its ring in host memory.
    pub fn create_cq(&self, f: u16, eqn: u32, log_size: u8) -> MockRing {
        let addr = self.alloc(CQE_SIZE << log_size);
        self.init_ring(addr, CQE_SIZE, log_size);
        let id = self.create_cq_at(f, eqn, log_size, addr);
        MockRing {
            id,
            addr,
            log_size,
            ci: 0,
            arm_sn: 0,
        }
    }

    /// A CQ whose ring is at bus address `addr` (possibly a peer's BAR); returns its number.
    pub fn create_cq_at(&self, f: u16, eqn: u32, log_size: u8, addr: u64) -> u32 {
        self.create(
            f,
            op::CREATE_CQ,
            &CreateCqIn {
                addr: U64::new(addr),
                eqn: U32::new(eqn),
                log_size,
                rsvd: [0; 3],
            },
        )
    }

    /// An SQ of `2^log_size` basic blocks completing into CQ `cqn`, its ring at `addr` (a fresh
    /// host buffer when `None`).
    pub fn create_sq(&self, f: u16, cqn: u32, log_size: u8, addr: Option<u64>) -> MockSq {
        let addr = addr.unwrap_or_else(|| self.alloc(WQEBB << log_size));
        let id = self.create(
            f,
            op::CREATE_SQ,
            &CreateSqIn {
                addr: U64::new(addr),
                cqn: U32::new(cqn),
                log_size,
                flags: 0,
                rsvd: [0; 2],
            },
        );
        MockSq {
            id,
            addr,
            log_size,
            pi: 0,
        }
    }

    /// An RQ of `2^log_size` WQEs completing into CQ `cqn`: regular when `striding` is `None`,
    /// else with `(log_stride_size, log_strides)`.
    pub fn create_rq(&self, f: u16, cqn: u32, log_size: u8, striding: Option<(u8, u8)>) -> MockRq {
        let addr = self.alloc(RECV_WQE_SIZE << log_size);
        let (rq_type, (log_stride_size, log_strides)) = match striding {
            None => (RQ_TYPE_REGULAR, (0, 0)),
            Some(s) => (RQ_TYPE_STRIDING, s),
        };
        let id = self.create(
            f,
            op::CREATE_RQ,
            &CreateRqIn {
                addr: U64::new(addr),
                cqn: U32::new(cqn),
                log_size,
                rq_type,
                log_stride_size,
                log_strides,
            },
        );
        MockRq {
            id,
            addr,
            log_size,
            pi: 0,
        }
    }

    /// A receive table on NIC function `f`'s vPort that sends everything to RQ `rqn`, made the
    /// vPort's root.
    pub fn steer_all_to(&self, f: u16, rqn: u32) {
        let table = self.create(
            f,
            op::CREATE_FLOW_TABLE,
            &CreateFlowTableIn {
                kind: TABLE_KIND_NIC_RX,
                level: 0,
                miss: MISS_DROP,
                rsvd: 0,
                miss_table: U32::new(0),
            },
        );
        self.create(
            f,
            op::CREATE_FLOW_ENTRY,
            &CreateFlowEntryIn {
                table: U32::new(table),
                actions: U32::new(action::FWD_RQ),
                dest: U32::new(rqn),
                ..Default::default()
            },
        );
        let r = self.command(
            f,
            op::SET_FLOW_TABLE_ROOT,
            SetRootIn {
                kind: TABLE_KIND_NIC_RX,
                rsvd: [0; 3],
                table: U32::new(table),
            }
            .as_bytes(),
        );
        assert!(r.ok(), "set root: {r:?}");
    }

    /// NIC function `f` brought up for traffic (see [`MockPort`]).
    pub fn open_port(&self, f: u16) -> MockPort {
        const LOG_SQ: u8 = 6;
        const LOG_RQ: u8 = 4;
        const LOG_CQ: u8 = 6;
        const BUF: u32 = 2048;
        let eq = self.create_eq(f, 6, 0);
        let tx_cq = self.create_cq(f, eq.id, LOG_CQ);
        let sq = self.create_sq(f, tx_cq.id, LOG_SQ, None);
        let rx_cq = self.create_cq(f, eq.id, LOG_CQ);
        let mut rq = self.create_rq(f, rx_cq.id, LOG_RQ, None);
        let rx_buffers: Vec<u64> = (0..1u32 << LOG_RQ)
            .map(|_| self.alloc(BUF as usize))
            .collect();
        for &b in &rx_buffers {
            rq.post(self, b, BUF);
        }
        rq.ring(self, f);
        self.steer_all_to(f, rq.id);
        MockPort {
            function: f,
            eq,
            tx_cq,
            sq,
            rx_cq,
            rq,
            rx_buffers,
            rx_buffer_len: BUF,
            tx_buffer: self.alloc(16384),
        }
    }

    // --- RDMA -------------------------------------------------------------------------------

    /// An RC QP on NIC function `f` (see [`MockQp`]): a PD, an EQ and a CQ, a registered region
    /// of `buf_len` bytes whose MTT is in host memory, GID entry 0 = `ip` with the function's
    /// MAC, and the QP in RESET — an out-of-order one (`QP_FLAG_OUT_OF_ORDER`) when the card
    /// has a reorder unit.
    pub fn create_rdma_qp(&self, f: u16, ip: [u8; 4], buf_len: usize) -> MockQp {
        let caps = self.command(f, op::QUERY_CAPS, &[]);
        let reorders =
            Caps::read_from_prefix(&caps.out).is_ok_and(|(c, _)| c.receiver != receiver::GO_BACK_N);
        let pd = self.create(f, op::CREATE_PD, &ObjectIn::new(0));
        let buf = self.alloc(buf_len);
        let pages = mtt_pages(buf, buf_len as u64, 12);
        let mtt = self.alloc(pages as usize * MTT_ENTRY_SIZE);
        for i in 0..pages {
            self.write(
                mtt + i * MTT_ENTRY_SIZE as u64,
                &((buf & !0xfff) + (i << 12)).to_le_bytes(),
            );
        }
        // The region's virtual address is its bus address (an identity-mapped consumer).
        let key = self.create(
            f,
            op::CREATE_MR,
            &CreateMrIn {
                pd: U32::new(pd),
                access: U32::new(access::ALL),
                start: U64::new(buf),
                length: U64::new(buf_len as u64),
                mtt_addr: U64::new(mtt),
                log_page_size: 12,
                flags: 0,
                rsvd: [0; 2],
                peer_key: U32::new(0),
            },
        );
        let gid = self.set_gid(f, ip);
        let eq = self.create_eq(f, 6, 0);
        let cq = self.create_cq(f, eq.id, 8);
        let (log_sq, log_rq, log_stride) = (6u8, 6u8, 5u8);
        let sq = self.alloc(WQEBB << log_sq);
        let rq = self.alloc(1 << (log_rq + log_stride));
        let qpn = self.create(
            f,
            op::CREATE_QP,
            &CreateQpIn {
                pd: U32::new(pd),
                send_cqn: U32::new(cq.id),
                recv_cqn: U32::new(cq.id),
                srqn: U32::new(NO_SRQ),
                sq_addr: U64::new(sq),
                rq_addr: U64::new(rq),
                log_sq_size: log_sq,
                log_rq_size: log_rq,
                log_rq_stride: log_stride,
                flags: QP_FLAG_SIGNAL_ALL | if reorders { QP_FLAG_OUT_OF_ORDER } else { 0 },
                rsvd: [0; 4],
            },
        );
        MockQp {
            function: f,
            qpn,
            pd,
            key,
            buf,
            buf_len,
            gid,
            eq,
            cq,
            sq: MockSq {
                id: qpn,
                addr: sq,
                log_size: log_sq,
                pi: 0,
            },
            rq_addr: rq,
            log_rq,
            log_stride,
            rq_pi: 0,
        }
    }

    /// GID table entry 0 of function `f`: the IPv4-mapped GID of `ip` with the function's MAC.
    pub fn set_gid(&self, f: u16, ip: [u8; 4]) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&ip);
        let r = self.command(
            f,
            op::SET_ROCE_ADDRESS,
            RoceAddressIn {
                index: U16::new(0),
                flags: ROCE_ADDRESS_VALID,
                rsvd: [0; 5],
                gid,
                mac: self.nic_mac(f),
                rsvd2: [0; 2],
            }
            .as_bytes(),
        );
        assert!(r.ok(), "GID: {r:?}");
        gid
    }

    /// An FLD-R queue pair on FLD queue `queue` (function 0, address 10.0.0.1) connected to a
    /// fresh client QP on function 1 (10.0.0.2, a region of `buf_len` bytes), both sequences
    /// from PSN 0x100. Returns the client and the FLD-R QPN.
    pub fn fldr_with_client(
        &self,
        binding: &MockFldBinding,
        queue: u16,
        buf_len: usize,
    ) -> (MockQp, u32) {
        let client = self.create_rdma_qp(1, [10, 0, 0, 2], buf_len);
        let fld_ip = [10, 0, 0, 1];
        let qpn = self.create_fldr_qp(
            binding,
            queue,
            fld_ip,
            client.qpn,
            client.gid,
            self.nic_mac(1),
            0x100,
        );
        let mut fld_gid = client.gid;
        fld_gid[12..].copy_from_slice(&fld_ip);
        self.connect_qp(&client, qpn, fld_gid, self.nic_mac(0), 0x100);
        (client, qpn)
    }

    /// Runs MODIFY_QP; returns the reply (refusals are the caller's to judge).
    pub fn modify_qp(&self, f: u16, qpn: u32, mask: u32, attr: &QpAttr) -> CmdReply {
        self.command(
            f,
            op::MODIFY_QP,
            ModifyQpIn {
                qpn: U32::new(qpn),
                attr_mask: U32::new(mask),
                attr: *attr,
            }
            .as_bytes(),
        )
    }

    /// Takes `qp` from RESET to RTS towards the peer QP `peer_qpn` at `peer_gid`/`peer_mac`,
    /// both sequences starting at `psn`; panics when a step is refused (harness set-up).
    pub fn connect_qp(
        &self,
        qp: &MockQp,
        peer_qpn: u32,
        peer_gid: [u8; 16],
        peer_mac: [u8; 6],
        psn: u32,
    ) {
        self.connect_qpn(qp.function, qp.qpn, peer_qpn, peer_gid, peer_mac, psn);
    }

    /// Two RC QPs, one per NIC function (10.9.0.1 and 10.9.0.2, 16 KiB regions), connected
    /// to each other, with three signalled WQEs posted on the first and not yet run: a SEND of
    /// `msg` (1,000 to 4,096 bytes) into the second's receive buffer at offset 0, a WRITE of
    /// it to offset 4096 of the second's region, and a READ of the 1,000 bytes at its offset
    /// 12288 (`msg`'s first 1,000, written there) into offset 8192 of the first's.
    pub fn post_rdma_exchange(&self, msg: &[u8]) -> (MockQp, MockQp) {
        assert!(
            (1000..=4096).contains(&msg.len()),
            "message of 1,000 to 4,096 bytes"
        );
        let mut a = self.create_rdma_qp(0, [10, 9, 0, 1], 16 << 10);
        let mut b = self.create_rdma_qp(1, [10, 9, 0, 2], 16 << 10);
        self.connect_qp(&a, b.qpn, b.gid, self.nic_mac(1), 0x33);
        self.connect_qp(&b, a.qpn, a.gid, self.nic_mac(0), 0x33);
        self.write(a.buf, msg);
        self.write(b.buf + 12288, &msg[..1000]);
        b.post_recv(self, &[b.sge(0, 4096)]);
        let send = [a.sge(0, msg.len() as u32)];
        let read = [a.sge(8192, 1000)];
        for (opcode, remote, data) in [
            (WQE_OP_SEND, None, &send),
            (WQE_OP_RDMA_WRITE, Some((b.buf + 4096, b.key)), &send),
            (WQE_OP_RDMA_READ, Some((b.buf + 12288, b.key)), &read),
        ] {
            a.post_send(self, &signalled(opcode, remote, data));
        }
        (a, b)
    }

    /// [`MockHost::connect_qp`] for QP `qpn` of function `f`.
    pub fn connect_qpn(
        &self,
        f: u16,
        qpn: u32,
        peer_qpn: u32,
        peer_gid: [u8; 16],
        peer_mac: [u8; 6],
        psn: u32,
    ) {
        use qp_attr::*;
        let mut a = QpAttr {
            qp_state: QpState::Init as u8,
            port: 1,
            path_mtu: DEFAULT_PATH_MTU,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            hop_limit: 64,
            dgid: peer_gid,
            dmac: peer_mac,
            ..Default::default()
        };
        a.access_flags.set(access::REMOTE);
        a.dest_qpn.set(peer_qpn);
        a.rq_psn.set(psn);
        a.sq_psn.set(psn);
        let steps = [
            (QpState::Init, STATE | PKEY_INDEX | PORT | ACCESS_FLAGS),
            (
                QpState::Rtr,
                STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            ),
            (
                QpState::Rts,
                STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
            ),
        ];
        for (state, mask) in steps {
            a.qp_state = state as u8;
            let r = self.modify_qp(f, qpn, mask, &a);
            assert!(r.ok(), "modify to {state:?}: {r:?}");
        }
    }

    /// A shared receive queue of `2^log_size` WQEs of 32 bytes (two scatter entries) on
    /// function `f` in PD `pd`.
    pub fn create_srq(&self, f: u16, pd: u32, log_size: u8) -> MockSrq {
        let log_stride = 5u8;
        let addr = self.alloc(1 << (log_size + log_stride));
        let srqn = self.create(
            f,
            op::CREATE_SRQ,
            &CreateSrqIn {
                pd: U32::new(pd),
                rsvd: U32::new(0),
                addr: U64::new(addr),
                log_size,
                log_stride,
                rsvd2: [0; 6],
            },
        );
        MockSrq {
            function: f,
            srqn,
            addr,
            log_size,
            log_stride,
            pi: 0,
        }
    }

    /// Arms `srq`'s limit event on EQ `eqn` (ARM_SRQ).
    pub fn arm_srq(&self, srq: &MockSrq, limit: u32, eqn: u32) -> CmdReply {
        self.command(
            srq.function,
            op::ARM_SRQ,
            ArmSrqIn {
                srqn: U32::new(srq.srqn),
                limit: U32::new(limit),
                eqn: U32::new(eqn),
                rsvd: U32::new(0),
            }
            .as_bytes(),
        )
    }

    /// A second QP beside `of` — same function, PD and CQ — that takes its receive WQEs from
    /// `srq`; in RESET. Returns its QPN.
    pub fn create_srq_qp(&self, of: &MockQp, srq: &MockSrq) -> u32 {
        let sq = self.alloc(WQEBB << 4);
        self.create(
            of.function,
            op::CREATE_QP,
            &CreateQpIn {
                pd: U32::new(of.pd),
                send_cqn: U32::new(of.cq.id),
                recv_cqn: U32::new(of.cq.id),
                srqn: U32::new(srq.srqn),
                sq_addr: U64::new(sq),
                rq_addr: U64::new(0),
                log_sq_size: 4,
                log_rq_size: 0,
                log_rq_stride: MIN_LOG_RQ_STRIDE,
                flags: QP_FLAG_SIGNAL_ALL,
                rsvd: [0; 4],
            },
        )
    }

    /// The MAC address NIC function `f` reports.
    pub fn nic_mac(&self, f: u16) -> [u8; 6] {
        mac_from_registers(self.nic_reg(f, reg::MAC_LO), self.nic_reg(f, reg::MAC_HI))
    }

    // --- FLD --------------------------------------------------------------------------------

    /// FLD's control register at `offset`.
    pub fn fld_reg(&self, offset: u64) -> u32 {
        let fid = self.fld.as_ref().map_or(FunctionId::MAX, |f| f.id());
        self.mmio_read32(self.bar(fid, fabi::BAR_CONTROL) + offset)
    }

    pub fn set_fld_reg(&self, offset: u64, v: u32) {
        let fid = self.fld.as_ref().map_or(FunctionId::MAX, |f| f.id());
        // FLD's BAR holds no NIC mailbox register: nothing to forget.
        self.fabric
            .mmio_write(self.bar(fid, fabi::BAR_CONTROL) + offset, &v.to_le_bytes());
    }

    /// FLD bound to NIC function 0 as FLD-E binds it: CQs whose rings are FLD's CQ windows, SQs
    /// whose rings are FLD's Tx-ring windows, a striding RQ whose WQEs stay in host memory and
    /// point into FLD's Rx-buffer window, everything function 0 receives steered to that RQ,
    /// and FLD programmed with the numbers and the NIC's doorbell page.
    pub fn bind_fld(&self, tx_queues: u16) -> MockFldBinding {
        let fld = self.fld.as_ref().expect("a card with FLD");
        let g = fabi::FldGeometry::from_registers(|o| self.fld_reg(o));
        let bar2 = self.bar(fld.id(), fabi::BAR_NIC);
        let eq = self.create_eq(0, 4, 0);
        let tx_cqn = self.create_cq_at(0, eq.id, g.log_tx_cq, bar2 + g.tx_cq_base());
        let rx_cqn = self.create_cq_at(0, eq.id, g.log_rx_cq, bar2 + g.rx_cq_base());
        let sqns: Vec<u32> = (0..u64::from(tx_queues))
            .map(|q| {
                let ring = bar2 + g.tx_ring_base() + q * g.tx_ring_bytes();
                self.create_sq(0, tx_cqn, g.log_tx_ring, Some(ring)).id
            })
            .collect();
        // 256-byte strides, 64 per WQE (16 KiB buffers), or 64-byte strides (4 KiB buffers)
        // when the Rx buffer is small: as many buffers as it holds, a power of two, at least 2.
        let window = g.tx_cq_base() - g.rx_buffer_base();
        let layout = |(log_stride, log_strides): (u8, u8)| {
            let wqe_bytes = 1u64 << (log_stride + log_strides);
            let wqes = (g.rx_buffer as u64)
                .div_ceil(wqe_bytes)
                .next_power_of_two()
                .max(2);
            (log_stride, log_strides, wqe_bytes, wqes)
        };
        let (log_stride, log_strides, wqe_bytes, wqes) = [layout((8, 6)), layout((6, 6))]
            .into_iter()
            .find(|&(_, _, bytes, wqes)| bytes * wqes <= window)
            .unwrap_or(layout((6, 6)));
        let log_wqes = wqes.trailing_zeros() as u8;
        let mut rq = self.create_rq(0, rx_cqn, log_wqes, Some((log_stride, log_strides)));
        for k in 0..wqes {
            rq.post(
                self,
                bar2 + g.rx_buffer_base() + k * wqe_bytes,
                wqe_bytes as u32,
            );
        }
        rq.ring(self, 0);
        self.steer_all_to(0, rq.id);
        let doorbells = self.bar(self.nic_fid(0), BAR_DOORBELL);
        for (r, v) in [
            (fabi::reg::NIC_DOORBELL_LO, doorbells as u32),
            (fabi::reg::NIC_DOORBELL_HI, (doorbells >> 32) as u32),
            (fabi::reg::TX_CQN, tx_cqn),
            (fabi::reg::RX_CQN, rx_cqn),
            (fabi::reg::RX_RQN, rq.id),
            (fabi::reg::RX_LOG_STRIDE, log_stride as u32),
            (fabi::reg::RX_LOG_STRIDES, log_strides as u32),
            (fabi::reg::RX_LOG_WQES, log_wqes as u32),
            (fabi::reg::RX_ENABLE, 1),
        ] {
            self.set_fld_reg(r, v);
        }
        for (q, sqn) in sqns.iter().enumerate() {
            self.set_fld_reg(fabi::reg::TXQ_BASE + 16 * q as u64, sqn | fabi::TXQ_ENABLE);
        }
        MockFldBinding {
            eq,
            tx_cqn,
            rx_cqn,
            sqns,
            rq,
        }
    }
}

impl MockHost {
    /// An FLD-R queue pair (§5.3) on NIC function 0, bound to FLD Tx queue `queue` of
    /// `binding`: its send ring is the queue's Tx-ring window, its CQs are FLD's, it receives
    /// through FLD's shared multi-packet RQ, and its GID entry 0 is `ip`. Connected to
    /// `peer_qpn` at `peer_gid`/`peer_mac` and bound in FLD (`TXQ_RDMA`). Returns the QPN.
    #[allow(clippy::too_many_arguments)]
    pub fn create_fldr_qp(
        &self,
        binding: &MockFldBinding,
        queue: u16,
        ip: [u8; 4],
        peer_qpn: u32,
        peer_gid: [u8; 16],
        peer_mac: [u8; 6],
        psn: u32,
    ) -> u32 {
        let fld = self.fld.as_ref().expect("a card with FLD");
        let g = fabi::FldGeometry::from_registers(|o| self.fld_reg(o));
        let bar2 = self.bar(fld.id(), fabi::BAR_NIC);
        let pd = self.create(0, op::CREATE_PD, &ObjectIn::new(0));
        self.set_gid(0, ip);
        let qpn = self.create(
            0,
            op::CREATE_QP,
            &CreateQpIn {
                pd: U32::new(pd),
                send_cqn: U32::new(binding.tx_cqn),
                recv_cqn: U32::new(binding.rx_cqn),
                srqn: U32::new(binding.rq.id),
                sq_addr: U64::new(bar2 + g.tx_ring_base() + u64::from(queue) * g.tx_ring_bytes()),
                rq_addr: U64::new(0),
                log_sq_size: g.log_tx_ring,
                log_rq_size: 0,
                log_rq_stride: MIN_LOG_RQ_STRIDE,
                flags: QP_FLAG_MULTI_PACKET_RQ,
                rsvd: [0; 4],
            },
        );
        self.connect_qpn(0, qpn, peer_qpn, peer_gid, peer_mac, psn);
        self.set_fld_reg(
            fabi::reg::TXQ_BASE + 16 * u64::from(queue),
            qpn | fabi::TXQ_ENABLE | fabi::TXQ_RDMA,
        );
        qpn
    }
}

impl MockRing {
    fn entry(&self, host: &MockHost, size: usize) -> Option<u64> {
        let slot = self.addr + (self.ci & ((1 << self.log_size) - 1)) as u64 * size as u64;
        let mut own = [0u8];
        host.read(slot + OWNER_BYTE as u64, &mut own);
        entry_is_new(own[0], self.ci, self.log_size).then_some(slot)
    }

    /// The next CQE the device wrote, if any.
    pub fn poll_cqe(&mut self, host: &MockHost) -> Option<Cqe> {
        let slot = self.entry(host, CQE_SIZE)?;
        self.ci = self.ci.wrapping_add(1);
        Some(host.read_obj(slot))
    }

    /// The next EQE the device wrote, if any.
    pub fn poll_eqe(&mut self, host: &MockHost) -> Option<Eqe> {
        let slot = self.entry(host, EQE_SIZE)?;
        self.ci = self.ci.wrapping_add(1);
        Some(host.read_obj(slot))
    }

    /// Reports the consumer counter of a CQ (`base` = [`db::CQ_BASE`]) or EQ
    /// ([`db::EQ_BASE`]), repeating the last arm's sequence number.
    pub fn update_ci(&self, host: &MockHost, f: u16, base: u64) {
        let word = db::ci_value(self.ci, self.arm_sn, self.arm_sn != 0);
        host.doorbell(f, db::slot(base, self.id), word);
    }

    /// Reports progress and asks for an event (CQ) or interrupt (EQ) on the next entry.
    pub fn arm(&mut self, host: &MockHost, f: u16, base: u64) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
        host.doorbell(
            f,
            db::slot(base, self.id),
            db::ci_value(self.ci, self.arm_sn, true),
        );
    }
}

impl MockSq {
    /// Writes raw WQE bytes (any content) at the producer counter, padded to whole basic
    /// blocks, and advances the counter. Does not ring.
    pub fn write_raw(&mut self, host: &MockHost, wqe: &[u8]) {
        let nbb = wqe.len().div_ceil(WQEBB).max(1);
        let mask = (1u32 << self.log_size) - 1;
        for n in 0..nbb {
            let slot = self.addr + ((self.pi.wrapping_add(n as u32)) & mask) as u64 * WQEBB as u64;
            let mut bb = [0u8; WQEBB];
            let src = wqe.get(n * WQEBB..).unwrap_or(&[]);
            let k = src.len().min(WQEBB);
            bb[..k].copy_from_slice(&src[..k]);
            host.write(slot, &bb);
        }
        self.pi = self.pi.wrapping_add(nbb as u32);
    }

    /// Posts `wqe` (encoded by the one writer of the format) at the producer counter.
    pub fn post(&mut self, host: &MockHost, wqe: &SendWqe<'_>) -> u16 {
        let mut buf = [0u8; MAX_WQE_BYTES];
        let index = self.pi as u16;
        let n = wqe
            .encode(self.id, index, &mut buf)
            .expect("a WQE that fits");
        self.write_raw(host, &buf[..n]);
        index
    }

    /// Tells the device about everything posted.
    pub fn ring(&self, host: &MockHost, f: u16) {
        host.doorbell(f, db::slot(db::SQ_BASE, self.id), self.pi & db::PI_MASK);
    }
}

impl MockRq {
    /// Posts a receive buffer of `len` bytes at `addr`. Does not ring.
    pub fn post(&mut self, host: &MockHost, addr: u64, len: u32) {
        self.post_raw(host, &DataSeg::bus(addr, len));
    }

    /// Posts any receive WQE (bad keys, short lengths).
    pub fn post_raw(&mut self, host: &MockHost, wqe: &RecvWqe) {
        let slot = self.addr + (self.pi & ((1 << self.log_size) - 1)) as u64 * RECV_WQE_SIZE as u64;
        host.write_obj(slot, wqe);
        self.pi = self.pi.wrapping_add(1);
    }

    pub fn ring(&self, host: &MockHost, f: u16) {
        host.doorbell(f, db::slot(db::RQ_BASE, self.id), self.pi & db::PI_MASK);
    }
}

impl MockPort {
    /// Sends `frame` (its first 14 bytes inline, the rest gathered from the staging buffer)
    /// with the given checksum requests, asking for a completion, and rings the doorbell.
    pub fn send(&mut self, host: &MockHost, frame: &[u8], cs_flags: u8) -> u16 {
        let inline = frame.len().min(14);
        host.write(self.tx_buffer, &frame[inline..]);
        let gather = [(self.tx_buffer, (frame.len() - inline) as u32)];
        let wqe = SendWqe {
            inline_header: &frame[..inline],
            gather: if frame.len() > inline { &gather } else { &[] },
            cs_flags,
            signal: true,
            resume_table: None,
        };
        let index = self.sq.post(host, &wqe);
        self.sq.ring(host, self.function);
        index
    }

    /// The next received frame (its CQE and bytes) and the buffer reposted, if one arrived.
    pub fn receive(&mut self, host: &MockHost) -> Option<(Cqe, Vec<u8>)> {
        let cqe = self.rx_cq.poll_cqe(host)?;
        self.rx_cq.update_ci(host, self.function, db::CQ_BASE);
        if cqe.is_error() {
            return Some((cqe, Vec::new()));
        }
        let slot = (cqe.wqe_counter.get() as u32 & ((1 << self.rq.log_size) - 1)) as usize;
        let len = (cqe.byte_count.get()).min(self.rx_buffer_len) as usize;
        let mut frame = vec![0u8; len];
        host.read(self.rx_buffers[slot], &mut frame);
        self.rq
            .post(host, self.rx_buffers[slot], self.rx_buffer_len);
        self.rq.ring(host, self.function);
        Some((cqe, frame))
    }
}

#[cfg(test)]
#[path = "mock_recycle_tests.rs"]
mod recycle_tests;
