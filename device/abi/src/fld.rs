//! The FLD function's programming interface (paper §5.1): control registers for the host
//! driver (BAR0) and the NIC-facing address space (BAR2) partitioned by NIC data structure, plus
//! FLD's internal compressed formats. Shared by the device model and the driver;
//! `docs/fld-interface.md` describes every field.

use crate::nic;

/// Device ID of the FLD function (vendor as for the NIC: [`crate::pci::PCI_VENDOR_ID`]).
pub const FLD_DEVICE_ID: u16 = 0xf200;
/// PCI class: processing accelerator.
pub const FLD_CLASS_CODE: u32 = 0x12_00_00;

/// BAR0: control registers (trapped).
pub const BAR_CONTROL: u8 = 0;
pub const BAR_CONTROL_SIZE: u64 = 0x1_0000;
/// BAR2: the window the NIC reads and writes by peer-to-peer DMA.
pub const BAR_NIC: u8 = 2;

/// BAR0 register offsets (32-bit registers, 64-bit values as LO/HI pairs).
pub mod reg {
    pub const VERSION: u64 = 0x000;
    pub const STATUS: u64 = 0x004;
    /// Write [`super::RESET_MAGIC`]: all queues are disabled and all buffers freed.
    pub const RESET: u64 = 0x008;
    // Geometry (read-only), fixed when the card is built.
    pub const TX_QUEUES: u64 = 0x010;
    pub const LOG_TX_RING: u64 = 0x014;
    pub const DESC_POOL: u64 = 0x018;
    pub const TX_CHUNK: u64 = 0x01c;
    pub const TX_CHUNKS: u64 = 0x020;
    pub const LOG_TX_WINDOW: u64 = 0x024;
    pub const RX_BUFFER: u64 = 0x028;
    pub const MAX_PACKET: u64 = 0x02c;
    pub const LOG_TX_CQ: u64 = 0x030;
    pub const LOG_RX_CQ: u64 = 0x034;
    /// Bus address of the NIC function's doorbell BAR, written by the driver.
    pub const NIC_DOORBELL_LO: u64 = 0x040;
    pub const NIC_DOORBELL_HI: u64 = 0x044;
    /// NIC CQ numbers of the shared Tx and Rx completion queues whose rings live in the CQ
    /// windows.
    pub const TX_CQN: u64 = 0x048;
    pub const RX_CQN: u64 = 0x04c;
    /// Receive: NIC striding RQ number, its stride layout and number of WQEs (buffers).
    pub const RX_RQN: u64 = 0x050;
    pub const RX_LOG_STRIDE: u64 = 0x054;
    pub const RX_LOG_STRIDES: u64 = 0x058;
    pub const RX_LOG_WQES: u64 = 0x05c;
    /// Write 1 to start receive (after the RQ WQEs were posted by the driver).
    pub const RX_ENABLE: u64 = 0x060;
    /// Every Nth WQE of a queue requests a completion (selective signalling).
    pub const TX_SIGNAL_EVERY: u64 = 0x064;
    /// Per Tx queue q, 16 bytes at `TXQ_BASE + 16 q`: +0 NIC SQ number (or, with
    /// [`super::TXQ_RDMA`], the QPN of an FLD-R queue pair) | [`super::TXQ_ENABLE`] (RW;
    /// [`super::TXQ_ERROR`] RO); +4 packet credits, +8 byte credits, +12 packets posted and not
    /// yet completed (RO).
    pub const TXQ_BASE: u64 = 0x1000;
    /// Statistics, 64-bit counters (see [`super::Stat`]).
    pub const STATS_BASE: u64 = 0x400;
    /// Memory report: bytes allocated per structure, 64-bit values (see [`super::MemoryItem`]).
    pub const MEMORY_BASE: u64 = 0x600;
}

pub const FLD_VERSION: u32 = 0x0001_0000;
pub const STATUS_READY: u32 = 1;
pub const RESET_MAGIC: u32 = 1;
pub const TXQ_ENABLE: u32 = 1 << 31;
/// The queue is an FLD-R queue pair (§5.3): its number is a NIC QPN, FLD generates RDMA WQEs
/// for it and rings the QP's send doorbell; the QP's receives arrive through the shared
/// multi-packet RQ.
pub const TXQ_RDMA: u32 = 1 << 30;
/// The queue is in the error state: the NIC completed one of its WQEs with an error (FLD then
/// released every posted packet), or the control plane wrote this bit because the NIC reported
/// the queue pair's failure as an event. FLD refuses the accelerator's sends on it; binding the
/// queue again (a write without this bit) clears it.
pub const TXQ_ERROR: u32 = 1 << 29;
/// The queue-number bits of a queue register.
pub const TXQ_NUMBER: u32 = (1 << 24) - 1;

/// Statistics counters at `reg::STATS_BASE + 8 * index`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stat {
    TxPackets = 0,
    TxBytes,
    TxCompletions,
    /// Accelerator packets for a queue that does not exist or is disabled.
    TxUnknownQueue,
    /// Accelerator packets larger than the maximum packet size, or empty.
    TxBadLength,
    /// Sends refused for lack of credits (the accelerator keeps the packet).
    TxNoCredit,
    /// Descriptor-table insertions that stalled on a full stash.
    TxStalls,
    TxErrorCompletions,
    RxPackets,
    RxBytes,
    /// Received packets the accelerator could not take (no backpressure, §5.5).
    RxAcceleratorDrops,
    RxErrorCompletions,
    /// NIC reads or writes outside any configured window.
    BadWindowAccesses,
    /// CQEs for a queue FLD does not know.
    UnknownCqes,
    RxRecycledWqes,
    /// Accelerator packets for a queue in the error state (refused; the accelerator keeps
    /// them).
    TxQueueInError,
    /// FLD-R receive completions of a QP no queue is bound to.
    RxUnknownQp,
}
pub const STAT_COUNT: usize = 17;

impl Stat {
    /// Every statistic with the name tools print.
    pub const ALL: [(Stat, &'static str); STAT_COUNT] = [
        (Stat::TxPackets, "tx_packets"),
        (Stat::TxBytes, "tx_bytes"),
        (Stat::TxCompletions, "tx_completions"),
        (Stat::TxUnknownQueue, "tx_unknown_queue"),
        (Stat::TxBadLength, "tx_bad_length"),
        (Stat::TxNoCredit, "tx_no_credit"),
        (Stat::TxStalls, "tx_stalls"),
        (Stat::TxErrorCompletions, "tx_error_completions"),
        (Stat::RxPackets, "rx_packets"),
        (Stat::RxBytes, "rx_bytes"),
        (Stat::RxAcceleratorDrops, "rx_accelerator_drops"),
        (Stat::RxErrorCompletions, "rx_error_completions"),
        (Stat::BadWindowAccesses, "bad_window_accesses"),
        (Stat::UnknownCqes, "unknown_cqes"),
        (Stat::RxRecycledWqes, "rx_recycled_wqes"),
        (Stat::TxQueueInError, "tx_queue_in_error"),
        (Stat::RxUnknownQp, "rx_unknown_qp"),
    ];
}

/// Memory report entries at `reg::MEMORY_BASE + 8 * index` (bytes of on-chip memory).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryItem {
    TxDescriptorPool = 0,
    TxRingTranslation,
    TxBuffer,
    TxDataTranslation,
    RxBuffer,
    TxCompletions,
    RxCompletions,
    ProducerIndices,
    Total,
}
pub const MEMORY_ITEMS: usize = 9;

/// Flow tables an accelerator can name as its resume point: the 7-bit descriptor field holds
/// table + 1.
pub const MAX_RESUME_TABLE: u8 = 127;

/// How the `accelerate` action packs its metadata into the NIC's flow tag (24 bits survive CQE
/// compression): the tenant's context ID in bits 0..16, the resume table + 1 in bits 16..24.
pub fn accelerate_tag(context: u16, resume_table: Option<u8>) -> u32 {
    context as u32
        | (resume_table
            .filter(|t| *t < MAX_RESUME_TABLE)
            .map_or(0, |t| t as u32 + 1)
            << 16)
}

/// The inverse of [`accelerate_tag`].
pub fn split_accelerate_tag(tag: u32) -> (u16, Option<u8>) {
    (tag as u16, ((tag >> 16) as u8).checked_sub(1))
}

/// Byte pattern returned for NIC reads that hit no structure.
pub const FILL_PATTERN: u8 = 0xfd;

/// Sizes of every FLD structure, derived from the Table 2a parameters exactly as the memory
/// model derives them, so the running device allocates what Table 3's FLD column says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FldGeometry {
    pub tx_queues: u32,
    /// Virtual Tx ring per queue: `f(N_txdesc)` WQE basic blocks.
    pub log_tx_ring: u8,
    /// Shared pool of compressed descriptors: `f(N_txdesc)`.
    pub desc_pool: u32,
    /// Tx buffer chunk size `G` (largest power of two ≤ M_min).
    pub tx_chunk: u32,
    /// Chunks in the shared Tx buffer: `ceil(2 S_txbdp / G)`.
    pub tx_chunks: u32,
    /// Per-queue virtual Tx-data window: `f(P) · G` bytes.
    pub log_tx_window: u8,
    /// Rx buffer bytes (`2 S_rxbdp`, rounded up to whole striding WQEs).
    pub rx_buffer: u32,
    pub max_packet: u32,
    /// Shared completion queues (`f(N_txdesc)`, `f(N_rxdesc)` entries).
    pub log_tx_cq: u8,
    pub log_rx_cq: u8,
}

/// Limits set by FLD's field widths: 14-bit packet length, 24-bit window offsets, 16-bit WQE
/// and chunk indices, the BAR0 queue register area, the NIC's largest SQ and CQ.
pub const MAX_TX_QUEUES: u32 = ((BAR_CONTROL_SIZE - reg::TXQ_BASE) / 16) as u32;
pub const MAX_PACKET: u32 = 16384;
pub const MAX_LOG_TX_RING: u8 = nic::MAX_LOG_SQ;
pub const MAX_LOG_TX_WINDOW: u8 = 24;
pub const MAX_LOG_CQ: u8 = nic::MAX_LOG_CQ;
/// The smallest Tx chunk: that of the smallest Ethernet frame; an FLD-R extension
/// ([`RDMA_EXTENSION_LEN`] bytes) starts a chunk and lies whole in it.
pub const MIN_TX_CHUNK: u64 = 64;

impl FldGeometry {
    /// The Tx chunk's bytes, written as the power of two [`Self::check`] requires it to be, so
    /// the divisions and remainders by it are shifts and masks.
    pub fn chunk_bytes(&self) -> u32 {
        1 << (self.tx_chunk.trailing_zeros() & 31)
    }

    /// Chunks of one queue's Tx-data window: a power of two once [`Self::check`] passed, so the
    /// free-running counts taken modulo it are masks.
    pub fn window_chunks(&self) -> u32 {
        1 << (self
            .log_tx_window
            .saturating_sub(self.tx_chunk.trailing_zeros() as u8))
    }

    /// Whether every structure fits FLD's field widths (see [`MAX_TX_QUEUES`] and friends).
    pub fn check(&self) -> Result<(), String> {
        let fail = |what: &str, v: u64, max: u64| {
            Err(format!("{what} = {v} exceeds FLD's limit of {max}"))
        };
        if self.tx_queues == 0 || self.tx_queues > MAX_TX_QUEUES {
            return fail("Tx queues", self.tx_queues as u64, MAX_TX_QUEUES as u64);
        }
        if self.max_packet > MAX_PACKET {
            return fail("maximum packet", self.max_packet as u64, MAX_PACKET as u64);
        }
        if self.log_tx_ring > MAX_LOG_TX_RING {
            return fail(
                "Tx ring entries",
                1 << self.log_tx_ring,
                1 << MAX_LOG_TX_RING,
            );
        }
        if self.log_tx_window > MAX_LOG_TX_WINDOW || self.tx_chunks > 0xfffe {
            return fail(
                "Tx-data window bytes",
                1 << self.log_tx_window,
                1 << MAX_LOG_TX_WINDOW,
            );
        }
        // The chunk is a power of two (§5.2: the largest one not above the smallest packet) of at
        // least an RDMA extension's bytes, and a window holds at least one.
        let chunk = u64::from(self.tx_chunk);
        if !chunk.is_power_of_two() || chunk < MIN_TX_CHUNK || chunk > self.tx_window_bytes() {
            return Err(format!(
                "Tx chunk = {chunk} bytes is not a power of two from {MIN_TX_CHUNK} to the Tx-data \
                 window's {} bytes",
                self.tx_window_bytes()
            ));
        }
        if self.log_tx_cq > MAX_LOG_CQ || self.log_rx_cq > MAX_LOG_CQ {
            return fail(
                "completion queue entries",
                1 << self.log_tx_cq.max(self.log_rx_cq),
                1 << MAX_LOG_CQ,
            );
        }
        Ok(())
    }

    /// The geometry register at BAR0 `offset` ([`reg::TX_QUEUES`]..=[`reg::LOG_RX_CQ`]).
    pub fn register(&self, offset: u64) -> Option<u32> {
        Some(match offset {
            reg::TX_QUEUES => self.tx_queues,
            reg::LOG_TX_RING => self.log_tx_ring as u32,
            reg::DESC_POOL => self.desc_pool,
            reg::TX_CHUNK => self.tx_chunk,
            reg::TX_CHUNKS => self.tx_chunks,
            reg::LOG_TX_WINDOW => self.log_tx_window as u32,
            reg::RX_BUFFER => self.rx_buffer,
            reg::MAX_PACKET => self.max_packet,
            reg::LOG_TX_CQ => self.log_tx_cq as u32,
            reg::LOG_RX_CQ => self.log_rx_cq as u32,
            _ => return None,
        })
    }

    /// The geometry as a driver reads it from the registers ([`FldGeometry::register`] is the
    /// device's side).
    pub fn from_registers(read: impl Fn(u64) -> u32) -> Self {
        FldGeometry {
            tx_queues: read(reg::TX_QUEUES),
            log_tx_ring: read(reg::LOG_TX_RING) as u8,
            desc_pool: read(reg::DESC_POOL),
            tx_chunk: read(reg::TX_CHUNK),
            tx_chunks: read(reg::TX_CHUNKS),
            log_tx_window: read(reg::LOG_TX_WINDOW) as u8,
            rx_buffer: read(reg::RX_BUFFER),
            max_packet: read(reg::MAX_PACKET),
            log_tx_cq: read(reg::LOG_TX_CQ) as u8,
            log_rx_cq: read(reg::LOG_RX_CQ) as u8,
        }
    }

    /// BAR2 layout: Tx-ring window, Tx-data window, Rx-buffer window, Tx CQ window, Rx CQ
    /// window, each starting on a power-of-two boundary.
    pub fn tx_ring_bytes(&self) -> u64 {
        (nic::WQEBB as u64) << self.log_tx_ring
    }
    pub fn tx_ring_base(&self) -> u64 {
        0
    }
    pub fn tx_data_base(&self) -> u64 {
        (self.tx_queues as u64 * self.tx_ring_bytes()).next_power_of_two()
    }
    pub fn tx_window_bytes(&self) -> u64 {
        1 << self.log_tx_window
    }
    pub fn rx_buffer_base(&self) -> u64 {
        self.tx_data_base() + (self.tx_queues as u64 * self.tx_window_bytes()).next_power_of_two()
    }
    pub fn tx_cq_base(&self) -> u64 {
        self.rx_buffer_base() + (self.rx_buffer as u64).next_power_of_two()
    }
    pub fn rx_cq_base(&self) -> u64 {
        self.tx_cq_base() + ((nic::CQE_SIZE as u64) << self.log_tx_cq)
    }
    /// Size of BAR2 (a power of two covering every window).
    pub fn bar_size(&self) -> u64 {
        (self.rx_cq_base() + ((nic::CQE_SIZE as u64) << self.log_rx_cq))
            .next_power_of_two()
            .max(0x10_0000)
    }
}

/// The 8-byte compressed Tx descriptor FLD keeps per posted packet (§5.2 "Compression"):
/// everything the NIC's 64-byte WQE says that FLD cannot derive from the queue.
///
/// | bits | field |
/// |---|---|
/// | 0..24 | offset of the packet in the queue's Tx-data window |
/// | 24..38 | length − 1 (1..16 KiB) |
/// | 38..40 | Ethernet queue: checksum flags (CS_L3, CS_L4); FLD-R queue: [`RdmaOpcode`] |
/// | 40 | completion requested |
/// | 41..57 | WQE index (the queue's counter, low 16 bits) |
/// | 57..64 | resume table + 1 (0: none), the flow table the NIC resumes steering at |
///
/// An FLD-R descriptor whose opcode needs more than the descriptor holds (an immediate, a
/// remote address) keeps those fields as a [`RdmaExtension`] of [`RDMA_EXTENSION_LEN`] bytes in
/// the Tx buffer just before the message: the window offset points at the extension and the
/// length counts it. The descriptor stays 8 bytes and the pool stays Table 3's size; the
/// extension costs Tx-buffer bytes only for the messages that carry one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CompressedDesc(pub u64);

/// The RDMA operation of an FLD-R descriptor (bits 38..40).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaOpcode {
    Send = 0,
    SendImm = 1,
    Write = 2,
    WriteImm = 3,
}

impl RdmaOpcode {
    pub const fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => RdmaOpcode::Send,
            1 => RdmaOpcode::SendImm,
            2 => RdmaOpcode::Write,
            _ => RdmaOpcode::WriteImm,
        }
    }
    /// The NIC send WQE opcode.
    pub const fn wqe_opcode(self) -> u8 {
        match self {
            RdmaOpcode::Send => nic::WQE_OP_SEND,
            RdmaOpcode::SendImm => nic::WQE_OP_SEND_IMM,
            RdmaOpcode::Write => nic::WQE_OP_RDMA_WRITE,
            RdmaOpcode::WriteImm => nic::WQE_OP_RDMA_WRITE_IMM,
        }
    }
    /// Whether the descriptor's message is preceded by an [`RdmaExtension`].
    pub const fn has_extension(self) -> bool {
        !matches!(self, RdmaOpcode::Send)
    }
}

/// Bytes of an [`RdmaExtension`] in the Tx buffer.
pub const RDMA_EXTENSION_LEN: usize = 16;

/// The per-message fields of an FLD-R send that do not fit the 8-byte descriptor, stored in
/// front of the message in the Tx buffer: bytes 0..4 immediate (little-endian, host order
/// value), 4..8 rkey, 8..16 remote address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RdmaExtension {
    pub imm: u32,
    pub rkey: u32,
    pub remote_addr: u64,
}

impl RdmaExtension {
    pub fn to_bytes(self) -> [u8; RDMA_EXTENSION_LEN] {
        let mut b = [0u8; RDMA_EXTENSION_LEN];
        b[..4].copy_from_slice(&self.imm.to_le_bytes());
        b[4..8].copy_from_slice(&self.rkey.to_le_bytes());
        b[8..].copy_from_slice(&self.remote_addr.to_le_bytes());
        b
    }
    pub fn from_bytes(b: &[u8; RDMA_EXTENSION_LEN]) -> Self {
        let w = |r: core::ops::Range<usize>| {
            let mut a = [0u8; 8];
            a[..r.len()].copy_from_slice(&b[r]);
            u64::from_le_bytes(a)
        };
        RdmaExtension {
            imm: w(0..4) as u32,
            rkey: w(4..8) as u32,
            remote_addr: w(8..16),
        }
    }
}

impl CompressedDesc {
    pub fn new(window_offset: u32, len: u32, cs_flags: u8, signal: bool, wqe_index: u16) -> Self {
        let v = (window_offset as u64 & 0xff_ffff)
            | ((len.saturating_sub(1) as u64 & 0x3fff) << 24)
            | ((cs_flags as u64 & 3) << 38)
            | ((signal as u64) << 40)
            | ((wqe_index as u64) << 41);
        CompressedDesc(v)
    }
    /// Marks the packet to re-enter the NIC's steering at flow table `table` (below
    /// [`MAX_RESUME_TABLE`]) when the NIC sends it.
    pub fn with_resume(self, table: Option<u8>) -> Self {
        let t = table
            .filter(|t| *t < MAX_RESUME_TABLE)
            .map_or(0, |t| t as u64 + 1);
        CompressedDesc((self.0 & !(0x7f << 57)) | (t << 57))
    }
    pub fn resume_table(self) -> Option<u8> {
        ((self.0 >> 57) as u8 & 0x7f).checked_sub(1)
    }
    pub fn window_offset(self) -> u32 {
        (self.0 & 0xff_ffff) as u32
    }
    /// Packet length in bytes (1..=16384); a descriptor is never empty.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> u32 {
        ((self.0 >> 24) & 0x3fff) as u32 + 1
    }
    pub fn cs_flags(self) -> u8 {
        ((self.0 >> 38) & 3) as u8
    }
    /// FLD-R: the operation (the same bits as [`CompressedDesc::cs_flags`]).
    pub fn rdma_opcode(self) -> RdmaOpcode {
        RdmaOpcode::from_bits(self.cs_flags())
    }
    pub fn signal(self) -> bool {
        (self.0 >> 40) & 1 != 0
    }
    pub fn wqe_index(self) -> u16 {
        (self.0 >> 41) as u16
    }

    /// The 64-byte send WQE a CPU driver would have written for this packet (§5.2: FLD
    /// generates it when the NIC reads the Tx-ring window): control segment, Ethernet segment
    /// without inline headers, one data segment pointing at the packet in the queue's Tx-data
    /// window at bus address `window_addr`.
    /// It is written into `w`, where the NIC's read of the Tx-ring window wants it.
    pub fn expand(self, signal: bool, sqn: u32, window_addr: u64, w: &mut [u8; nic::WQEBB]) {
        let gather = [(window_addr + self.window_offset() as u64, self.len())];
        let wqe = nic::SendWqe {
            inline_header: &[],
            gather: &gather,
            cs_flags: self.cs_flags(),
            signal,
            resume_table: self.resume_table().map(u32::from),
        };
        // Three segments always fit one basic block (which `encode` writes whole).
        let _ = wqe.encode(sqn, self.wqe_index(), w);
    }

    /// The 64-byte RDMA send WQE a verbs consumer would have posted for this FLD-R descriptor
    /// on QP `qpn`: control segment (opcode, immediate), a remote-address segment for WRITE,
    /// one data segment with the reserved lkey (bus addresses) pointing at the message in the
    /// queue's Tx-data window at `window_addr`. `ext` is the descriptor's extension when its
    /// opcode has one. It is written into `w`, as [`Self::expand`]'s.
    pub fn expand_rdma(
        self,
        signal: bool,
        qpn: u32,
        window_addr: u64,
        ext: RdmaExtension,
        w: &mut [u8; nic::WQEBB],
    ) {
        let op = self.rdma_opcode();
        let skip = if op.has_extension() {
            RDMA_EXTENSION_LEN as u32
        } else {
            0
        };
        let sge = [nic::Sge {
            addr: window_addr + (self.window_offset() + skip) as u64,
            length: self.len().saturating_sub(skip),
            lkey: nic::RESERVED_LKEY,
        }];
        let wqe = nic::RdmaWqe {
            opcode: op.wqe_opcode(),
            signal,
            solicited: false,
            fence: false,
            imm: ext.imm,
            remote: Some((ext.remote_addr, ext.rkey)),
            atomic: None,
            data: nic::WqeData::Gather(&sge),
        };
        // Control, remote address and one data segment: one basic block.
        let _ = wqe.encode(qpn, self.wqe_index(), w);
    }
}

/// The 15-byte compressed CQE FLD stores when the NIC writes a 64-byte CQE into a CQ window
/// (§5.2, Table 2b: 64 B → 15 B). Only what FLD acts on is kept.
///
/// | byte | field |
/// |---|---|
/// | 0 | opcode (bits 4..8), flags: TRUNCATED, FILLER, WQE_DONE, QP (bits 0..4) |
/// | 1..3 | queue number (SQ or RQ, low 16 bits) |
/// | 3..5 | send: WQE counter; receive: byte count |
/// | 5..7 | receive: stride index; send errors: syndrome |
/// | 7 | checksum/parse flags; QP receive: message position and solicited bits |
/// | 8..11 | flow tag (context ID, 24 bits) |
/// | 11..15 | RSS hash; QP receive: immediate data |
///
/// A QP's CQE (FLD-R) has no checksum results, flow tag or hash; its byte 7 keeps the CQE's
/// `MSG_FIRST`, `MSG_LAST` and `SOLICITED` flags and bytes 11..15 its immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CompressedCqe(pub [u8; 15]);

impl CompressedCqe {
    pub fn compress(c: &nic::Cqe) -> Self {
        let mut b = [0u8; 15];
        b[0] = (c.opcode() << 4) | (c.flags & 0xf);
        b[1..3].copy_from_slice(&(c.qn.get() as u16).to_le_bytes());
        let is_send = c.is_send();
        let w = if is_send {
            c.wqe_counter.get()
        } else {
            c.byte_count.get() as u16
        };
        b[3..5].copy_from_slice(&w.to_le_bytes());
        let x = if is_send {
            c.syndrome as u16
        } else {
            c.stride_index.get()
        };
        b[5..7].copy_from_slice(&x.to_le_bytes());
        if c.flags & nic::cqe_flags::QP != 0 {
            use nic::cqe_flags::{MSG_FIRST, MSG_LAST, SOLICITED};
            b[7] = c.flags & (MSG_FIRST | MSG_LAST | SOLICITED);
            b[11..15].copy_from_slice(&c.imm.get().to_le_bytes());
        } else {
            b[7] = c.csum;
            b[8..11].copy_from_slice(&c.flow_tag.get().to_le_bytes()[..3]);
            b[11..15].copy_from_slice(&c.rss_hash.get().to_le_bytes());
        }
        CompressedCqe(b)
    }
    /// A queue pair's CQE: [`CompressedCqe::queue`] is a QPN.
    pub fn is_qp(&self) -> bool {
        self.0[0] & nic::cqe_flags::QP != 0
    }
    /// A QP receive CQE's `MSG_FIRST`, `MSG_LAST` and `SOLICITED` flags.
    pub fn qp_flags(&self) -> u8 {
        self.0[7]
    }
    /// A QP receive CQE's immediate data.
    pub fn imm(&self) -> u32 {
        self.rss_hash()
    }
    pub fn opcode(&self) -> u8 {
        self.0[0] >> 4
    }
    pub fn flags(&self) -> u8 {
        self.0[0] & 0xf
    }
    pub fn queue(&self) -> u16 {
        u16::from_le_bytes([self.0[1], self.0[2]])
    }
    /// Send: WQE counter. Receive: byte count.
    pub fn counter_or_len(&self) -> u16 {
        u16::from_le_bytes([self.0[3], self.0[4]])
    }
    /// Receive: stride index. Send errors: syndrome.
    pub fn stride_or_syndrome(&self) -> u16 {
        u16::from_le_bytes([self.0[5], self.0[6]])
    }
    pub fn csum(&self) -> u8 {
        self.0[7]
    }
    pub fn flow_tag(&self) -> u32 {
        u32::from_le_bytes([self.0[8], self.0[9], self.0[10], 0])
    }
    pub fn rss_hash(&self) -> u32 {
        u32::from_le_bytes([self.0[11], self.0[12], self.0[13], self.0[14]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic::{cqe_flags, op_own, Cqe, CQE_REQ, CQE_RESP_SEND};
    use zerocopy::little_endian::{U16, U32};

    #[test]
    fn every_statistic_is_named_at_its_index() {
        for (i, (stat, name)) in Stat::ALL.iter().enumerate() {
            assert_eq!(*stat as usize, i, "{name}");
        }
    }

    #[test]
    fn geometry_registers_round_trip() {
        let g = FldGeometry {
            tx_queues: 512,
            log_tx_ring: 11,
            desc_pool: 2048,
            tx_chunk: 256,
            tx_chunks: 2442,
            log_tx_window: 20,
            rx_buffer: 125_000,
            max_packet: 9216,
            log_tx_cq: 11,
            log_rx_cq: 8,
        };
        assert_eq!(FldGeometry::from_registers(|o| g.register(o).unwrap()), g);
        assert_eq!(g.register(reg::NIC_DOORBELL_LO), None);
    }

    /// The Tx chunk is a power of two from 64 bytes to the window: anything else is refused
    /// before a structure is sized from it (a zero chunk would divide by zero).
    #[test]
    fn a_tx_chunk_that_is_not_a_power_of_two_in_range_is_refused() {
        let good = FldGeometry {
            tx_queues: 4,
            log_tx_ring: 4,
            desc_pool: 16,
            tx_chunk: 256,
            tx_chunks: 25,
            log_tx_window: 12,
            rx_buffer: 8192,
            max_packet: 2048,
            log_tx_cq: 4,
            log_rx_cq: 4,
        };
        assert_eq!(good.check(), Ok(()));
        assert_eq!(good.window_chunks(), 16);
        for (chunk, ok) in [
            (0, false),
            (32, false),
            (64, true),
            (96, false),
            (4096, true),
        ] {
            let g = FldGeometry {
                tx_chunk: chunk,
                ..good
            };
            assert_eq!(g.check().is_ok(), ok, "chunk {chunk}");
            if ok {
                assert_eq!(g.chunk_bytes(), chunk, "chunk {chunk}");
                assert_eq!(g.window_chunks(), 4096 / chunk, "chunk {chunk}");
            }
        }
        let past_window = FldGeometry {
            tx_chunk: 8192,
            ..good
        };
        assert!(past_window.check().unwrap_err().contains("Tx chunk"));
    }

    #[test]
    fn compressed_descriptor_round_trips() {
        for (off, len, cs, sig, idx) in [
            (0u32, 1u32, 0u8, false, 0u16),
            (0xff_ffff, 16384, 3, true, 0xffff),
            (12345, 1500, 2, false, 777),
        ] {
            let d = CompressedDesc::new(off, len, cs, sig, idx);
            assert_eq!(
                (
                    d.window_offset(),
                    d.len(),
                    d.cs_flags(),
                    d.signal(),
                    d.wqe_index()
                ),
                (off, len, cs, sig, idx)
            );
        }
    }

    #[test]
    fn cqe_compression_keeps_what_fld_needs() {
        let rx = Cqe {
            flow_tag: U32::new(0xabcdef),
            rss_hash: U32::new(0x1234_5678),
            byte_count: U32::new(9000),
            stride_index: U16::new(37),
            csum: 0x2b,
            flags: cqe_flags::WQE_DONE,
            qn: U32::new(5),
            op_own: op_own(CQE_RESP_SEND, 1),
            ..Default::default()
        };
        let c = CompressedCqe::compress(&rx);
        assert_eq!(
            (
                c.opcode(),
                c.flags(),
                c.queue(),
                c.counter_or_len(),
                c.stride_or_syndrome()
            ),
            (CQE_RESP_SEND, cqe_flags::WQE_DONE, 5, 9000, 37)
        );
        assert_eq!(
            (c.csum(), c.flow_tag(), c.rss_hash()),
            (0x2b, 0xabcdef, 0x1234_5678)
        );
        let tx = Cqe {
            wqe_counter: U16::new(0xbeef),
            qn: U32::new(9),
            op_own: op_own(CQE_REQ, 0),
            ..Default::default()
        };
        let c = CompressedCqe::compress(&tx);
        assert_eq!(
            (c.opcode(), c.queue(), c.counter_or_len()),
            (CQE_REQ, 9, 0xbeef)
        );
        assert_eq!(core::mem::size_of::<CompressedCqe>(), 15);
    }
}
