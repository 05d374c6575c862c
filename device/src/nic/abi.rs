//! The soft NIC's programming interface: every register offset, command layout, descriptor and
//! completion format that crosses PCIe. Device and driver both import these definitions; nothing here
//! is written twice. `docs/nic-interface.md` describes each field.
//!
//! All multi-byte fields are little-endian. Packet header fields inside the flow-match layout are kept
//! in network byte order, exactly as they appear on the wire, so matching is a masked byte compare.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// PCI vendor ID of the emulated card. 0xFFF0 is not assigned to any vendor by PCI-SIG (and is not
/// the 0xFFFF "no device" value), so no in-tree driver claims the functions; guests bind them to
/// vfio-pci through `driver_override`.
pub const PCI_VENDOR_ID: u16 = 0xfff0;
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
pub const BAR_DOORBELL_SIZE: u64 = 0x4000;
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
    /// Command delivery status (RO): bit 0 busy, bit 1 done, bits 8..16 [`super::CmdDelivery`],
    /// bits 16..32 the token of the last command.
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
pub const CMD_STATUS_BUSY: u32 = 1 << 0;
pub const CMD_STATUS_DONE: u32 = 1 << 1;

/// Why a command could not even be executed (the command's own result is in [`CmdOutHeader`]).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdDelivery {
    Ok = 0,
    /// The input or output buffer is outside DMA-mapped memory.
    DmaError = 1,
    /// Input shorter than a header or output shorter than a header, or longer than 4 KiB.
    BadLength = 2,
}

/// Maximum command input or output length in bytes.
pub const CMD_MAX_LEN: u32 = 4096;

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
    pub const CI_MASK: u32 = 0x00ff_ffff;
    pub const ARM_SN_SHIFT: u32 = 28;
    pub const ARM_SN_MASK: u32 = 0x3;
    pub const ARM: u32 = 1 << 31;
    /// Slots per page: the maximum number of queues of one kind.
    pub const SLOTS: u32 = 1024;

    /// Encodes a consumer-index update that also arms the queue when `arm` is set.
    pub const fn ci_value(ci: u32, arm_sn: u32, arm: bool) -> u32 {
        (ci & CI_MASK) | ((arm_sn & ARM_SN_MASK) << ARM_SN_SHIFT) | if arm { ARM } else { 0 }
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// Command opcodes.
pub mod op {
    pub const QUERY_CAPS: u16 = 0x100;
    pub const CREATE_EQ: u16 = 0x110;
    pub const DESTROY_EQ: u16 = 0x111;
    pub const QUERY_EQ: u16 = 0x112;
    pub const CREATE_CQ: u16 = 0x120;
    pub const DESTROY_CQ: u16 = 0x121;
    pub const QUERY_CQ: u16 = 0x122;
    pub const CREATE_SQ: u16 = 0x130;
    pub const DESTROY_SQ: u16 = 0x131;
    pub const QUERY_SQ: u16 = 0x132;
    pub const MODIFY_SQ: u16 = 0x133;
    pub const CREATE_RQ: u16 = 0x140;
    pub const DESTROY_RQ: u16 = 0x141;
    pub const QUERY_RQ: u16 = 0x142;
    pub const MODIFY_RQ: u16 = 0x143;
    pub const CREATE_RSS_GROUP: u16 = 0x150;
    pub const DESTROY_RSS_GROUP: u16 = 0x151;
    pub const CREATE_FLOW_TABLE: u16 = 0x160;
    pub const DESTROY_FLOW_TABLE: u16 = 0x161;
    pub const SET_FLOW_TABLE_ROOT: u16 = 0x162;
    pub const CREATE_FLOW_ENTRY: u16 = 0x170;
    pub const DESTROY_FLOW_ENTRY: u16 = 0x171;
    pub const QUERY_FLOW_ENTRY: u16 = 0x172;
    pub const QUERY_VPORT: u16 = 0x180;
    pub const CREATE_METER: u16 = 0x190;
    pub const DESTROY_METER: u16 = 0x191;
    pub const QUERY_METER: u16 = 0x192;
    pub const CREATE_VXLAN_ENCAP: u16 = 0x193;
    pub const DESTROY_VXLAN_ENCAP: u16 = 0x194;
}

/// Command completion status in [`CmdOutHeader::status`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdStatus {
    Ok = 0x00,
    /// Unknown opcode.
    BadOpcode = 0x02,
    /// A parameter is out of range or inconsistent.
    BadParam = 0x03,
    /// The object is not in a state that allows the operation.
    BadState = 0x04,
    /// A named object does not exist or belongs to another function.
    BadResource = 0x05,
    /// The object is still referenced (e.g. destroy of a CQ with queues attached).
    ResourceBusy = 0x06,
    /// A device limit would be exceeded.
    ExceedLimit = 0x08,
    /// The function may not do this (e.g. eSwitch tables from a non-manager function).
    NotPermitted = 0x0a,
    /// Input shorter than the command's layout.
    BadInputLength = 0x50,
    /// Output buffer shorter than the command's result.
    BadOutputLength = 0x51,
}

impl CmdStatus {
    pub fn from_u8(v: u8) -> Option<Self> {
        use CmdStatus::*;
        Some(match v {
            0x00 => Ok,
            0x02 => BadOpcode,
            0x03 => BadParam,
            0x04 => BadState,
            0x05 => BadResource,
            0x06 => ResourceBusy,
            0x08 => ExceedLimit,
            0x0a => NotPermitted,
            0x50 => BadInputLength,
            0x51 => BadOutputLength,
            _ => return None,
        })
    }
}

/// First 16 bytes of every command input.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CmdInHeader {
    pub opcode: U16,
    pub op_mod: U16,
    pub rsvd: [u8; 12],
}

/// First 16 bytes of every command output.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CmdOutHeader {
    pub status: u8,
    pub rsvd: [u8; 3],
    /// Which check failed, for diagnostics (free-form, documented per command).
    pub syndrome: U32,
    pub rsvd2: [u8; 8],
}

/// QUERY_CAPS output (after the header).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct Caps {
    pub max_sqs: U32,
    pub max_rqs: U32,
    pub max_cqs: U32,
    pub max_eqs: U32,
    pub max_log_sq_size: u8,
    pub max_log_rq_size: u8,
    pub max_log_cq_size: u8,
    pub max_log_eq_size: u8,
    pub min_log_stride_size: u8,
    pub max_log_stride_size: u8,
    pub min_log_strides: u8,
    pub max_log_strides: u8,
    pub max_flow_tables: U32,
    pub max_flow_entries: U32,
    pub max_rss_groups: U32,
    pub max_rss_indirection: U16,
    pub rss_key_len: U16,
    pub msix_vectors: U16,
    pub max_wqe_ds: U16,
    pub max_inline_header: U16,
    pub max_flow_table_level: u8,
    pub rsvd: u8,
    pub max_mtu: U32,
    pub vport: U16,
    pub is_eswitch_manager: u8,
    pub rsvd2: [u8; 5],
}

/// CREATE_EQ input. The EQ ring (64-byte EQEs) is at `addr`; events raise MSI-X `msix_vector`.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateEqIn {
    pub addr: U64,
    pub log_size: u8,
    pub rsvd: u8,
    pub msix_vector: U16,
    pub rsvd2: [u8; 4],
}

/// Output of every CREATE_* command: the new object's number.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateOut {
    pub id: U32,
    pub rsvd: [u8; 4],
}

/// Input of every DESTROY_* / QUERY_* command that names one object.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct ObjectIn {
    pub id: U32,
    pub rsvd: [u8; 4],
}

/// QUERY_EQ / QUERY_CQ output.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryCqOut {
    pub producer_counter: U32,
    pub consumer_counter: U32,
    pub log_size: u8,
    pub armed: u8,
    pub state: u8,
    pub rsvd: u8,
    /// CQ: CQEs not written because the CQ was full. EQ: events lost the same way.
    pub overflows: U32,
}

/// CREATE_CQ input. The CQ ring (64-byte CQEs) is at `addr`; when armed, the next CQE posts an
/// event to EQ `eqn`.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateCqIn {
    pub addr: U64,
    pub eqn: U32,
    pub log_size: u8,
    pub rsvd: [u8; 3],
}

/// CREATE_SQ input.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateSqIn {
    /// Ring of 64-byte WQE basic blocks.
    pub addr: U64,
    pub cqn: U32,
    /// log2 of the ring size in WQE basic blocks.
    pub log_size: u8,
    /// [`SQ_FLAG_SIGNAL_ALL`]: a CQE for every WQE regardless of the WQE's own request.
    pub flags: u8,
    pub rsvd: [u8; 2],
}
pub const SQ_FLAG_SIGNAL_ALL: u8 = 1 << 0;

/// Queue state, reported by QUERY_SQ / QUERY_RQ and set by MODIFY_SQ / MODIFY_RQ.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueState {
    /// Ready: the device processes the queue.
    Ready = 1,
    /// An error CQE was generated; the device ignores the queue until it is reset.
    Error = 3,
}

/// MODIFY_SQ / MODIFY_RQ input: `ERROR → READY` resets the queue's counters to zero.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct ModifyQueueIn {
    pub id: U32,
    pub new_state: u8,
    pub rsvd: [u8; 3],
}

/// QUERY_SQ / QUERY_RQ output.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryQueueOut {
    /// Device consumer counter (SQ: WQE basic blocks consumed; RQ: WQEs consumed).
    pub hw_counter: U32,
    pub state: u8,
    pub log_size: u8,
    pub rsvd: [u8; 2],
    pub packets: U64,
    pub bytes: U64,
    /// RQ: packets dropped for lack of a posted buffer.
    pub out_of_buffer: U64,
    /// RQ: packets dropped because they exceed an MPRQ WQE's stride space.
    pub oversize_drops: U64,
    /// Regular RQ: packets truncated to the buffer size.
    pub truncated: U64,
}

/// Receive queue types.
pub const RQ_TYPE_REGULAR: u8 = 0;
/// Multi-packet (striding) RQ: each WQE is a buffer of `2^log_strides` strides of
/// `2^log_stride_size` bytes; packets occupy consecutive strides.
pub const RQ_TYPE_STRIDING: u8 = 1;

/// CREATE_RQ input.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateRqIn {
    /// Ring of 16-byte receive WQEs.
    pub addr: U64,
    pub cqn: U32,
    pub log_size: u8,
    pub rq_type: u8,
    pub log_stride_size: u8,
    pub log_strides: u8,
}

/// RSS hash field selectors ([`CreateRssGroupIn::hash_fields`]).
pub mod rss_fields {
    pub const SRC_IP: u8 = 1 << 0;
    pub const DST_IP: u8 = 1 << 1;
    pub const SRC_PORT: u8 = 1 << 2;
    pub const DST_PORT: u8 = 1 << 3;
}

/// CREATE_RSS_GROUP input: Toeplitz key and indirection table of RQ numbers (up to
/// [`RSS_MAX_INDIRECTION`] entries follow this header as `U32`s).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
pub struct CreateRssGroupIn {
    pub key: [u8; 40],
    pub hash_fields: u8,
    pub rsvd: u8,
    pub indirection_len: U16,
    pub rsvd2: [u8; 4],
}
pub const RSS_MAX_INDIRECTION: u16 = 256;

/// Flow table kinds.
pub const TABLE_KIND_FDB: u8 = 0;
pub const TABLE_KIND_NIC_RX: u8 = 1;

/// Miss behaviour of a flow table.
pub const MISS_DEFAULT: u8 = 0;
pub const MISS_DROP: u8 = 1;
pub const MISS_GOTO_TABLE: u8 = 2;

/// CREATE_FLOW_TABLE input.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateFlowTableIn {
    /// [`TABLE_KIND_FDB`] (eSwitch, manager function only) or [`TABLE_KIND_NIC_RX`] (this
    /// function's vPort receive steering).
    pub kind: u8,
    /// Go-to-table may only jump to a table of a strictly higher level (no loops).
    pub level: u8,
    pub miss: u8,
    pub rsvd: u8,
    pub miss_table: U32,
}

/// SET_FLOW_TABLE_ROOT input: makes `table` the first table of its kind for the function's vPort
/// (FDB: for the whole eSwitch). `table = NO_TABLE` restores the default.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct SetRootIn {
    pub kind: u8,
    pub rsvd: [u8; 3],
    pub table: U32,
}
pub const NO_TABLE: u32 = u32::MAX;

/// What a flow entry matches on: header fields in wire byte order. An entry carries a mask and a
/// value of this layout; a packet matches when `packet & mask == value & mask` byte for byte.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug, PartialEq, Eq,
)]
pub struct FlowMatch {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ethertype: [u8; 2],
    /// 4 or 6 when the packet has an IP header, 0 otherwise.
    pub ip_version: u8,
    pub ip_proto: u8,
    /// IPv4 addresses use the first 4 bytes.
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub src_port: [u8; 2],
    pub dst_port: [u8; 2],
    /// The vPort the packet entered the eSwitch from (little-endian), in FDB and receive tables.
    pub src_vport: [u8; 2],
    pub vlan_id: [u8; 2],
    /// Metadata register (little-endian). Reserved for accelerators returning a packet to the
    /// NIC (the FLD part); always 0 until then.
    pub metadata: [u8; 4],
    /// VXLAN network identifier (network byte order) when the frame is VXLAN (UDP port 4789).
    pub vni: [u8; 3],
    /// 1 when the packet is an IPv4 fragment (MF set or fragment offset != 0, RFC 791 §3.1), 0
    /// otherwise. Lets a rule steer only fragments to a reassembly accelerator (paper §7).
    pub ip_frag: u8,
}
pub const FLOW_MATCH_LEN: usize = core::mem::size_of::<FlowMatch>();

/// Flow entry action bits ([`CreateFlowEntryIn::actions`]). At most one of the "fate" actions
/// (FWD_VPORT, FWD_RQ, FWD_RSS, DROP, GOTO_TABLE) may be set.
pub mod action {
    pub const FWD_VPORT: u32 = 1 << 0;
    pub const FWD_RQ: u32 = 1 << 1;
    pub const FWD_RSS: u32 = 1 << 2;
    pub const DROP: u32 = 1 << 3;
    pub const GOTO_TABLE: u32 = 1 << 4;
    pub const SET_FLOW_TAG: u32 = 1 << 8;
    pub const COUNT: u32 = 1 << 9;
    /// Strip the outer Ethernet/IPv4/UDP/VXLAN headers (RFC 7348) and continue at the GOTO_TABLE
    /// target with the inner frame's headers. Requires GOTO_TABLE.
    pub const VXLAN_DECAP: u32 = 1 << 10;
    /// Police the entry's packets with the meter named in `meter` (per-tenant rate and burst).
    pub const METER: u32 = 1 << 11;
    /// Prepend the outer Ethernet/IPv4/UDP/VXLAN headers of the encapsulation named in `encap`
    /// (RFC 7348 §5) before forwarding. Requires FWD_VPORT.
    pub const VXLAN_ENCAP: u32 = 1 << 12;
    pub const FATES: u32 = FWD_VPORT | FWD_RQ | FWD_RSS | DROP | GOTO_TABLE;
    pub const ALL: u32 = FATES | SET_FLOW_TAG | COUNT | VXLAN_DECAP | METER | VXLAN_ENCAP;
}

/// CREATE_FLOW_ENTRY input.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateFlowEntryIn {
    pub table: U32,
    /// Lower value wins; equal priorities match in creation order.
    pub priority: U16,
    pub rsvd: U16,
    pub mask: FlowMatch,
    pub value: FlowMatch,
    pub actions: U32,
    /// FWD_VPORT target.
    pub vport: U16,
    pub rsvd2: U16,
    /// FWD_RQ, FWD_RSS or GOTO_TABLE target.
    pub dest: U32,
    /// SET_FLOW_TAG value, reported in the CQE.
    pub flow_tag: U32,
    /// METER: the meter the entry's packets must pass.
    pub meter: U32,
    /// VXLAN_ENCAP: the encapsulation applied before forwarding.
    pub encap: U32,
}

/// CREATE_VXLAN_ENCAP input: the outer headers of a VXLAN tunnel (RFC 7348 §5). The outer
/// IPv4 header has DF set, the given TTL (0: 64) and a computed checksum; the outer UDP source
/// port is taken from a hash of the inner frame's flow (49152-65535, for ECMP entropy) and the
/// UDP checksum is 0, as the RFC allows.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateVxlanEncapIn {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    /// 24-bit VXLAN network identifier.
    pub vni: U32,
    /// Outer UDP destination port (0: 4789).
    pub udp_dst_port: U16,
    pub ttl: u8,
    pub rsvd: u8,
    pub rsvd2: [u8; 4],
}

/// Outer headers VXLAN encapsulation adds: Ethernet, IPv4, UDP, VXLAN.
pub const VXLAN_ENCAP_LEN: usize = 14 + 20 + 8 + 8;

/// CREATE_METER input: a token bucket (policer) of `rate` bytes per second and `burst` bytes.
/// Packets of an entry with the METER action pass while the bucket holds their length and are
/// dropped otherwise (counted in the meter).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateMeterIn {
    pub rate_bytes_per_s: U64,
    pub burst_bytes: U32,
    pub rsvd: [u8; 4],
}

/// QUERY_METER output.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryMeterOut {
    pub passed_packets: U64,
    pub passed_bytes: U64,
    pub dropped_packets: U64,
    pub dropped_bytes: U64,
}

/// QUERY_FLOW_ENTRY output: the entry's COUNT action counters.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryFlowEntryOut {
    pub packets: U64,
    pub bytes: U64,
}

/// QUERY_VPORT input.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryVportIn {
    pub vport: U16,
    pub rsvd: [u8; 6],
}

/// QUERY_VPORT output: MAC, state and counters. Drop counters say where a packet was lost.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryVportOut {
    pub mac: [u8; 6],
    pub up: u8,
    pub rsvd: u8,
    pub tx_packets: U64,
    pub tx_bytes: U64,
    pub rx_packets: U64,
    pub rx_bytes: U64,
    /// Dropped by a DROP action or a table miss set to drop.
    pub rx_steering_drops: U64,
    /// No receive table, or a miss with no fate.
    pub rx_no_steering: U64,
    /// Dropped for lack of buffers or CQ space in the target RQ.
    pub rx_out_of_buffer: U64,
    /// Frames shorter than 14 bytes or longer than the MTU.
    pub tx_malformed: U64,
}

/// Well-known vPort numbers.
pub const VPORT_UPLINK: u16 = 0xffff;

// ---------------------------------------------------------------------------------------------
// Send WQE (64-byte basic blocks made of 16-byte segments)
// ---------------------------------------------------------------------------------------------

pub const WQEBB: usize = 64;
/// Largest WQE: 63 segments of 16 bytes (16 basic blocks).
pub const MAX_WQE_DS: u16 = 63;
/// Largest inline header the Ethernet segment may announce.
pub const MAX_INLINE_HEADER: u16 = 256;
pub const DS_SIZE: usize = 16;

/// Send opcodes.
pub const WQE_OP_NOP: u8 = 0x00;
pub const WQE_OP_SEND: u8 = 0x0a;

/// Control segment completion modes ([`CtrlSeg::fm_ce_se`] bits 2..4).
pub const CE_ON_ERROR: u8 = 0 << 2;
pub const CE_ALWAYS: u8 = 2 << 2;
pub const CE_MASK: u8 = 3 << 2;

/// First segment of every send WQE.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CtrlSeg {
    pub opcode: u8,
    pub rsvd: u8,
    /// The WQE's position (counter of WQE basic blocks, low 16 bits); echoed in the CQE.
    pub wqe_index: U16,
    /// Number of 16-byte segments in this WQE including this one (1..=63).
    pub ds_count: u8,
    /// [`CE_ALWAYS`] requests a CQE for this WQE; [`CE_ON_ERROR`] only reports errors.
    pub fm_ce_se: u8,
    pub rsvd2: U16,
    pub sqn: U32,
    pub imm: U32,
}

/// Ethernet segment checksum flags.
pub const CS_L3: u8 = 1 << 0;
pub const CS_L4: u8 = 1 << 1;

/// Ethernet segment: offload requests and the start of the inline headers. The inline header bytes
/// begin in `inline_start` and continue in the following segments, padded to 16 bytes.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct EthSeg {
    pub cs_flags: u8,
    /// [`ETH_FLAG_RESUME`].
    pub flags: u8,
    pub rsvd: [u8; 2],
    pub rsvd2: [u8; 6],
    pub mss: U16,
    pub inline_hdr_size: U16,
    pub inline_start: [u8; 2],
}
/// The frame re-enters the NIC's steering at the flow table whose number is in the control
/// segment's `imm` field, instead of the FDB root: how an accelerator returns a packet to the
/// pipeline where its `accelerate` rule took it off (paper §5.3). The table must belong to the
/// sending function (an FDB table: the eSwitch manager; a receive table: the sender's vPort).
pub const ETH_FLAG_RESUME: u8 = 1 << 0;

/// Bytes of inline header carried inside the Ethernet segment itself.
pub const ETH_SEG_INLINE: usize = 2;

/// Gather entry: `byte_count` bytes at `addr`. `lkey` must be [`RESERVED_LKEY`] (bus addresses).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct DataSeg {
    pub byte_count: U32,
    pub lkey: U32,
    pub addr: U64,
}
/// The only memory key of the Ethernet interface: addresses are bus (IOVA) addresses.
pub const RESERVED_LKEY: u32 = 0;

/// Receive WQE: a single scatter entry (regular RQ: one packet buffer; striding RQ: the whole
/// multi-packet buffer, `byte_count` must cover all strides).
pub type RecvWqe = DataSeg;
pub const RECV_WQE_SIZE: usize = 16;

// ---------------------------------------------------------------------------------------------
// Completions and events
// ---------------------------------------------------------------------------------------------

pub const CQE_SIZE: usize = 64;
pub const EQE_SIZE: usize = 64;

/// CQE opcodes ([`Cqe::op_own`] bits 4..8).
pub const CQE_REQ: u8 = 0x0;
pub const CQE_RESP_SEND: u8 = 0x2;
pub const CQE_REQ_ERR: u8 = 0xd;
pub const CQE_RESP_ERR: u8 = 0xe;
/// Never written by the device: software initialises rings with it.
pub const CQE_INVALID: u8 = 0xf;

/// CQE flag bits ([`Cqe::flags`]).
pub mod cqe_flags {
    /// The packet was longer than the regular RQ buffer; `byte_count` is the full length.
    pub const TRUNCATED: u8 = 1 << 0;
    /// Striding RQ: no packet; the remaining `consumed_strides` of the WQE are released.
    pub const FILLER: u8 = 1 << 1;
    /// Last CQE of a striding WQE: the buffer may be reposted.
    pub const WQE_DONE: u8 = 1 << 2;
}

/// Checksum/parse results ([`Cqe::csum`]).
pub mod cqe_csum {
    pub const L3_PRESENT: u8 = 1 << 0;
    pub const L3_OK: u8 = 1 << 1;
    pub const L4_PRESENT: u8 = 1 << 2;
    pub const L4_OK: u8 = 1 << 3;
    pub const IPV6: u8 = 1 << 4;
    pub const TCP: u8 = 1 << 5;
    pub const UDP: u8 = 1 << 6;
    pub const IP_FRAGMENT: u8 = 1 << 7;
}

/// Error syndromes ([`Cqe::syndrome`]) in error CQEs.
pub mod syndrome {
    /// A gather/scatter address is outside DMA-mapped memory.
    pub const DMA_ERROR: u8 = 0x01;
    /// Malformed WQE: bad opcode, ds_count, inline size or lkey.
    pub const BAD_WQE: u8 = 0x02;
    /// The doorbell announced more WQEs than the ring holds.
    pub const DOORBELL_OVERFLOW: u8 = 0x03;
    /// The frame is shorter than an Ethernet header or longer than the MTU.
    pub const BAD_LENGTH: u8 = 0x04;
    /// Striding RQ WQE's byte count does not cover its strides.
    pub const BAD_RECV_WQE: u8 = 0x05;
}

/// Completion queue entry.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
pub struct Cqe {
    /// Flow tag of the steering rule that delivered the packet (0 if none).
    pub flow_tag: U32,
    /// Toeplitz hash when the packet was steered by an RSS group (0 otherwise).
    pub rss_hash: U32,
    /// Received length (receive) or sent length (send).
    pub byte_count: U32,
    /// Send: the WQE index of the control segment. Receive: the RQ WQE counter.
    pub wqe_counter: U16,
    /// Striding RQ: first stride of the packet within the WQE.
    pub stride_index: U16,
    /// Striding RQ: strides the packet (or filler) occupies.
    pub consumed_strides: U16,
    pub csum: u8,
    pub flags: u8,
    /// SQ or RQ number.
    pub qn: U32,
    /// Device timestamp in nanoseconds.
    pub timestamp: U64,
    /// Metadata register value at delivery.
    pub metadata: U32,
    pub vport: U16,
    pub rsvd: [u8; 23],
    /// Error syndrome for error opcodes.
    pub syndrome: u8,
    pub rsvd2: u8,
    /// Opcode in bits 4..8, owner bit in bit 0.
    pub op_own: u8,
}

/// EQE types.
pub const EQE_COMPLETION: u8 = 0x00;
/// A queue entered the error state; `data` is the queue number, `subtype` the kind (1 SQ, 2 RQ).
pub const EQE_QUEUE_ERROR: u8 = 0x13;
/// A CQ overflowed (first lost CQE); `data` is the CQ number.
pub const EQE_CQ_ERROR: u8 = 0x04;

/// Event queue entry.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
pub struct Eqe {
    pub event_type: u8,
    pub subtype: u8,
    pub rsvd: [u8; 2],
    /// CQ number for completion events.
    pub data: U32,
    pub rsvd2: [u8; 55],
    /// Owner bit in bit 0.
    pub owner: u8,
}

/// The owner bit value the device writes at producer counter `pc` of a ring of `2^log_size`.
pub const fn owner_bit(pc: u32, log_size: u8) -> u8 {
    ((pc >> log_size) & 1) as u8
}

/// Layouts with arrays longer than 32 bytes default to all zeroes.
macro_rules! zeroed_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                <$t as zerocopy::FromZeros>::new_zeroed()
            }
        }
    )*};
}
zeroed_default!(CreateRssGroupIn, Eqe, Cqe);

const _: () = {
    assert!(core::mem::size_of::<CmdInHeader>() == 16);
    assert!(core::mem::size_of::<CmdOutHeader>() == 16);
    assert!(core::mem::size_of::<CtrlSeg>() == DS_SIZE);
    assert!(core::mem::size_of::<EthSeg>() == DS_SIZE);
    assert!(core::mem::size_of::<DataSeg>() == DS_SIZE);
    assert!(core::mem::size_of::<Cqe>() == CQE_SIZE);
    assert!(core::mem::size_of::<Eqe>() == EQE_SIZE);
    assert!(FLOW_MATCH_LEN == 64);
};
