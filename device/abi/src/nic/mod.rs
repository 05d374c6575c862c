//! The soft NIC's programming interface: identity, BAR layout, control registers, doorbells and
//! hardware limits here; commands in [`cmd`], flow-table layouts in [`flow`], send and receive
//! descriptors in [`wqe`], completions and events in [`cqe`]. `docs/nic-interface.md` describes
//! each field.
//!
//! All multi-byte fields are little-endian. Packet header fields inside the flow-match layout are
//! kept in network byte order, exactly as they appear on the wire, so matching is a masked byte
//! compare.

pub mod cmd;
pub mod cqe;
pub mod flow;
pub mod rdma;
pub mod wqe;

pub use crate::pci::PCI_VENDOR_ID;
pub use cmd::*;
pub use cqe::*;
pub use flow::*;
pub use rdma::*;
pub use wqe::*;

/// Device ID of a soft-NIC host function.
pub const NIC_DEVICE_ID: u16 = 0xf100;
/// PCI class code: network controller / Ethernet.
pub const NIC_CLASS_CODE: u32 = 0x02_00_00;

// ---------------------------------------------------------------------------------------------
// BARs
// ---------------------------------------------------------------------------------------------

/// BAR0: initialization segment and command interface (trapped registers).
pub const BAR_CONTROL: u8 = 0;
/// BAR2: doorbell (UAR) pages, polled by the device; mmap-able by a guest.
pub const BAR_DOORBELL: u8 = 2;
/// BAR4: MSI-X table and pending-bit array.
pub const BAR_MSIX: u8 = 4;

pub const BAR_CONTROL_SIZE: u64 = 0x1000;
/// The doorbell words (0..0x40000) and the WQE-by-MMIO buffers of every SQ and QP
/// ([`db::SQ_WQE_BASE`], [`db::QP_SQ_WQE_BASE`]).
pub const BAR_DOORBELL_SIZE: u64 = 0x80_0000;
pub const BAR_MSIX_SIZE: u64 = 0x1000;
pub const MSIX_TABLE_OFFSET: u32 = 0x0;
pub const MSIX_PBA_OFFSET: u32 = 0x800;
/// MSI-X vectors per NIC function.
pub const NIC_MSIX_VECTORS: u16 = 64;

/// BAR0 register offsets.
pub mod reg {
    /// Firmware version (RO).
    pub const FW_VERSION: u64 = 0x000;
    /// Command interface revision (RO); the driver refuses a revision it does not know.
    pub const CMD_INTERFACE_REV: u64 = 0x004;
    /// Device status (RO): [`super::STATUS_READY`], [`super::STATUS_FATAL`].
    pub const DEVICE_STATUS: u64 = 0x008;
    /// Write [`super::RESET_MAGIC`] for a function-level reset: every object the function created is
    /// destroyed and its doorbells cleared.
    pub const DEVICE_RESET: u64 = 0x00c;
    pub const CMD_IN_ADDR_LO: u64 = 0x010;
    pub const CMD_IN_ADDR_HI: u64 = 0x014;
    pub const CMD_OUT_ADDR_LO: u64 = 0x018;
    pub const CMD_OUT_ADDR_HI: u64 = 0x01c;
    pub const CMD_IN_LEN: u64 = 0x020;
    pub const CMD_OUT_LEN: u64 = 0x024;
    /// Write a 16-bit token to execute the command described by the CMD_* registers.
    pub const CMD_DOORBELL: u64 = 0x028;
    /// Command delivery status (RO): see [`super::CmdStatusRegister`].
    pub const CMD_STATUS: u64 = 0x02c;
    /// The eSwitch vPort this function is (RO).
    pub const VPORT_NUMBER: u64 = 0x030;
    /// The function's own MAC address, low 4 bytes and high 2 bytes (RO, set by the NIC).
    pub const MAC_LO: u64 = 0x034;
    pub const MAC_HI: u64 = 0x038;
}

pub const INTERFACE_REV: u32 = 1;
pub const FW_VERSION: u32 = 0x0001_0000;
pub const STATUS_READY: u32 = 1 << 0;
pub const STATUS_FATAL: u32 = 1 << 1;
pub const RESET_MAGIC: u32 = 0x1;

/// The two MAC registers: `MAC_LO` holds bytes 0..4, `MAC_HI` bytes 4..6 (little-endian).
pub const fn mac_registers(mac: [u8; 6]) -> (u32, u32) {
    (
        u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]),
        u32::from_le_bytes([mac[4], mac[5], 0, 0]),
    )
}

/// The MAC address the two MAC registers hold.
pub const fn mac_from_registers(lo: u32, hi: u32) -> [u8; 6] {
    let l = lo.to_le_bytes();
    let h = hi.to_le_bytes();
    [l[0], l[1], l[2], l[3], h[0], h[1]]
}

/// The MAC address the NIC of card `card` gives vPort `n`: locally administered
/// `02:fd:card_hi:card_lo:n_hi:n_lo`, so cards joined by links have distinct addresses.
pub const fn vport_mac(card: u16, n: u16) -> [u8; 6] {
    [
        0x02,
        0xfd,
        (card >> 8) as u8,
        card as u8,
        (n >> 8) as u8,
        n as u8,
    ]
}

// ---------------------------------------------------------------------------------------------
// Doorbell BAR (BAR2)
// ---------------------------------------------------------------------------------------------

/// Doorbell page offsets. Each doorbell is a 32-bit word indexed by the global queue number; a
/// function's writes affect only queues it owns (others' slots are never read by the device).
pub mod db {
    /// SQ producer counter in WQE basic blocks (16 bits, wrapping).
    pub const SQ_BASE: u64 = 0x0000;
    /// RQ producer counter in receive WQEs (16 bits, wrapping).
    pub const RQ_BASE: u64 = 0x1000;
    /// CQ consumer counter (bits 0..24), arm sequence number (bits 28..30), arm request (bit 31).
    /// An arm takes effect when the device sees ARM with a sequence number different from the
    /// last arm it acted on; consumer updates may repeat the last arm's bits harmlessly.
    pub const CQ_BASE: u64 = 0x2000;
    /// EQ consumer counter, same encoding as CQ.
    pub const EQ_BASE: u64 = 0x3000;
    /// Queue pair send producer counter in WQE basic blocks (16 bits), slot `qpn - QPN_BASE`.
    pub const QP_SQ_BASE: u64 = 0x10000;
    /// Queue pair receive producer counter in WQEs (16 bits), slot `qpn - QPN_BASE`.
    pub const QP_RQ_BASE: u64 = 0x20000;
    /// Shared receive queue producer counter in WQEs (16 bits).
    pub const SRQ_BASE: u64 = 0x30000;
    /// Queue pair staging-ring consumer counter: slots the host has taken (16 bits), slot
    /// `qpn - QPN_BASE` (§18).
    pub const QP_STAGING_BASE: u64 = 0x50000;
    /// Queue pair slots: the most QPs a NIC has.
    pub const QP_SLOTS: u32 = 16384;
    /// WQE-by-MMIO buffers of the Ethernet SQs: [`WQE_BUFFER_STRIDE`] bytes per SQ number
    /// (`docs/nic-interface.md` §4.1).
    pub const SQ_WQE_BASE: u64 = 0x8_0000;
    /// WQE-by-MMIO buffers of the queue pairs' send queues, slot `qpn - QPN_BASE`.
    pub const QP_SQ_WQE_BASE: u64 = 0x40_0000;
    /// Bytes of one WQE-by-MMIO buffer: [`WQE_BUFFER_BLOCKS`] basic blocks of WQE, then the
    /// seal word at [`WQE_SEAL_OFFSET`] (in a 64-byte chunk of its own).
    pub const WQE_BUFFER_STRIDE: u64 = 0x100;
    /// Basic blocks (64 bytes each) a WQE-by-MMIO buffer holds: a WQE of up to 192 bytes.
    pub const WQE_BUFFER_BLOCKS: u32 = 3;
    pub const WQE_SEAL_OFFSET: u64 = 0xc0;
    /// Seal bit: the buffer holds a whole WQE.
    pub const WQE_SEAL_VALID: u32 = 1 << 31;

    /// Byte offset of the WQE-by-MMIO buffer of queue `n` in the area at `base`.
    pub const fn wqe_buffer(base: u64, n: u32) -> u64 {
        base + WQE_BUFFER_STRIDE * n as u64
    }

    /// The seal of a buffer holding the WQE that starts at basic-block counter `counter` and
    /// takes `blocks` (1..=[`WQE_BUFFER_BLOCKS`]) blocks.
    pub const fn wqe_seal(counter: u32, blocks: u32) -> u32 {
        WQE_SEAL_VALID | ((blocks & 3) << 16) | (counter & PI_MASK)
    }

    /// What a seal word says: the WQE's basic-block counter (16 bits) and its blocks, when the
    /// seal is valid and names 1..=[`WQE_BUFFER_BLOCKS`] blocks.
    pub const fn seal_wqe(seal: u32) -> Option<(u32, u32)> {
        let blocks = (seal >> 16) & 3;
        if seal & WQE_SEAL_VALID == 0 || blocks == 0 {
            None
        } else {
            Some((seal & PI_MASK, blocks))
        }
    }
    pub const CI_MASK: u32 = 0x00ff_ffff;
    /// Producer counters of SQ and RQ doorbells are 16 bits.
    pub const PI_MASK: u32 = 0xffff;
    pub const ARM_SN_SHIFT: u32 = 28;
    pub const ARM_SN_MASK: u32 = 0x3;
    pub const ARM: u32 = 1 << 31;
    /// Slots per page: the maximum number of queues of one kind.
    pub const SLOTS: u32 = 1024;

    /// Byte offset of the doorbell of queue `n` on the page at `base`.
    pub const fn slot(base: u64, n: u32) -> u64 {
        base + 4 * n as u64
    }

    /// Encodes a consumer-index update that also arms the queue when `arm` is set.
    pub const fn ci_value(ci: u32, arm_sn: u32, arm: bool) -> u32 {
        (ci & CI_MASK) | ((arm_sn & ARM_SN_MASK) << ARM_SN_SHIFT) | if arm { ARM } else { 0 }
    }

    /// A consumer doorbell word as the device reads it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct ConsumerWord {
        pub ci: u32,
        pub arm_sn: u32,
        pub arm: bool,
    }

    /// Decodes a CQ or EQ doorbell word ([`ci_value`] is the writer).
    pub const fn consumer_word(w: u32) -> ConsumerWord {
        ConsumerWord {
            ci: w & CI_MASK,
            arm_sn: (w >> ARM_SN_SHIFT) & ARM_SN_MASK,
            arm: w & ARM != 0,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hardware limits (also reported by QUERY_CAPS)
// ---------------------------------------------------------------------------------------------

pub const MAX_LOG_SQ: u8 = 15;
pub const MAX_LOG_RQ: u8 = 15;
pub const MAX_LOG_CQ: u8 = 16;
pub const MAX_LOG_EQ: u8 = 16;
pub const MIN_LOG_STRIDE: u8 = 6;
pub const MAX_LOG_STRIDE: u8 = 13;
pub const MIN_LOG_STRIDES: u8 = 3;
pub const MAX_LOG_STRIDES: u8 = 16;
pub const MAX_FLOW_LEVEL: u8 = 63;
/// Length of the Toeplitz key of an RSS group.
pub const RSS_KEY_LEN: usize = 40;

/// The Microsoft RSS verification key ("Verifying the RSS Hash Calculation"): the NIC's and the
/// host library's default.
pub const DEFAULT_RSS_KEY: [u8; RSS_KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Well-known vPort numbers.
pub const VPORT_UPLINK: u16 = 0xffff;
