//! The command interface (`docs/nic-interface.md` §3): mailbox delivery, the 16-byte headers,
//! every opcode with its input and output layout, status codes and the syndromes that say which
//! check failed.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

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

impl CmdDelivery {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => CmdDelivery::Ok,
            1 => CmdDelivery::DmaError,
            2 => CmdDelivery::BadLength,
            _ => return None,
        })
    }
}

/// Maximum command input or output length in bytes.
pub const CMD_MAX_LEN: u32 = 4096;
/// Bytes of the input and of the output header.
pub const CMD_HEADER_LEN: usize = 16;

/// The CMD_STATUS register: bit 0 busy (never set), bit 1 done, bits 8..16 the delivery status,
/// bits 16..32 the token of the last command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdStatusRegister {
    pub done: bool,
    pub delivery: u8,
    pub token: u16,
}

pub const CMD_STATUS_BUSY: u32 = 1 << 0;
pub const CMD_STATUS_DONE: u32 = 1 << 1;

impl CmdStatusRegister {
    pub const fn encode(self) -> u32 {
        (if self.done { CMD_STATUS_DONE } else { 0 })
            | (self.delivery as u32) << 8
            | (self.token as u32) << 16
    }
    pub const fn decode(v: u32) -> Self {
        CmdStatusRegister {
            done: v & CMD_STATUS_DONE != 0,
            delivery: (v >> 8) as u8,
            token: (v >> 16) as u16,
        }
    }
}

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
    pub const CREATE_PD: u16 = 0x200;
    pub const DESTROY_PD: u16 = 0x201;
    pub const CREATE_MR: u16 = 0x210;
    pub const DESTROY_MR: u16 = 0x211;
    pub const QUERY_MR: u16 = 0x212;
    pub const SET_ROCE_ADDRESS: u16 = 0x220;
    pub const QUERY_ROCE_ADDRESS: u16 = 0x221;
    pub const SET_PKEY: u16 = 0x222;
    pub const QUERY_PKEY: u16 = 0x223;
    pub const CREATE_QP: u16 = 0x230;
    pub const MODIFY_QP: u16 = 0x231;
    pub const QUERY_QP: u16 = 0x232;
    pub const DESTROY_QP: u16 = 0x233;
    pub const SET_QP_STAGING: u16 = 0x234;
    pub const CREATE_SRQ: u16 = 0x240;
    pub const DESTROY_SRQ: u16 = 0x241;
    pub const QUERY_SRQ: u16 = 0x242;
    pub const ARM_SRQ: u16 = 0x243;
    pub const QUERY_RDMA_COUNTERS: u16 = 0x250;
    pub const SET_STAR_SERVER: u16 = 0x260;
    pub const STAR_GUARD_ADD: u16 = 0x261;
    pub const STAR_GUARD_DEL: u16 = 0x262;
    pub const STAR_GUARD_ENFORCE: u16 = 0x263;
    pub const SET_STAR_PEER: u16 = 0x264;
}

/// Bytes of output (after the header) command `opcode` produces; 0 for commands without a
/// result and for unknown opcodes.
pub const fn output_len(opcode: u16) -> usize {
    use core::mem::size_of;
    match opcode {
        op::QUERY_CAPS => size_of::<Caps>(),
        op::CREATE_EQ
        | op::CREATE_CQ
        | op::CREATE_SQ
        | op::CREATE_RQ
        | op::CREATE_RSS_GROUP
        | op::CREATE_FLOW_TABLE
        | op::CREATE_FLOW_ENTRY
        | op::CREATE_METER
        | op::CREATE_VXLAN_ENCAP
        | op::CREATE_PD
        | op::CREATE_MR
        | op::CREATE_QP
        | op::CREATE_SRQ
        | op::STAR_GUARD_ADD => size_of::<CreateOut>(),
        op::QUERY_MR => size_of::<super::QueryMrOut>(),
        op::QUERY_ROCE_ADDRESS => size_of::<super::RoceAddressIn>(),
        op::QUERY_PKEY => size_of::<super::PkeyIn>(),
        op::QUERY_QP => size_of::<super::QueryQpOut>(),
        op::QUERY_SRQ => size_of::<super::QuerySrqOut>(),
        op::QUERY_RDMA_COUNTERS => size_of::<super::RdmaCountersOut>(),
        op::QUERY_EQ | op::QUERY_CQ => size_of::<QueryCqOut>(),
        op::QUERY_SQ | op::QUERY_RQ => size_of::<QueryQueueOut>(),
        op::QUERY_FLOW_ENTRY => size_of::<QueryFlowEntryOut>(),
        op::QUERY_VPORT => size_of::<QueryVportOut>(),
        op::QUERY_METER => size_of::<QueryMeterOut>(),
        _ => 0,
    }
}

/// Command completion status in [`CmdOutHeader::status`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdStatus {
    Ok = 0x00,
    /// Unknown opcode. Syndrome: the opcode.
    BadOpcode = 0x02,
    /// A parameter is out of range or inconsistent. Syndrome: a [`bad_param`] code.
    BadParam = 0x03,
    /// The object is not in a state that allows the operation. Syndrome: its state.
    BadState = 0x04,
    /// A named object does not exist or belongs to another function. Syndrome: the number.
    BadResource = 0x05,
    /// The object is still referenced (e.g. destroy of a CQ with queues attached). Syndrome:
    /// the reference count.
    ResourceBusy = 0x06,
    /// A device limit would be exceeded. Syndrome 0.
    ExceedLimit = 0x08,
    /// The function may not do this (e.g. eSwitch tables from a non-manager function).
    NotPermitted = 0x0a,
    /// Input shorter than the command's layout.
    BadInputLength = 0x50,
    /// Output buffer shorter than the command's result. Syndrome: the result length.
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

/// Syndromes of BAD_PARAM: which check failed (`docs/nic-interface.md`, each command's table).
pub mod bad_param {
    /// A ring's `addr` is not 64-byte aligned.
    pub const RING_ALIGNMENT: u32 = 0x01;
    /// A ring is not wholly DMA-reachable when it is created.
    pub const RING_UNREACHABLE: u32 = 0x02;
    /// `log_size` beyond the queue kind's limit.
    pub const LOG_SIZE: u32 = 0x10;
    /// CREATE_EQ: MSI-X vector beyond the function's table.
    pub const MSIX_VECTOR: u32 = 0x11;
    /// CREATE_SQ: unknown flag bits.
    pub const SQ_FLAGS: u32 = 0x12;
    /// MODIFY_SQ/RQ: a target state other than READY.
    pub const NEW_STATE: u32 = 0x13;
    /// CREATE_RQ (striding): stride size out of range.
    pub const STRIDE_SIZE: u32 = 0x14;
    /// CREATE_RQ (striding): strides per WQE out of range.
    pub const STRIDE_COUNT: u32 = 0x15;
    /// CREATE_RQ: unknown RQ type.
    pub const RQ_TYPE: u32 = 0x16;
    /// CREATE_RSS_GROUP: indirection length 0, above 256 or not a power of two.
    pub const RSS_INDIRECTION_LEN: u32 = 0x20;
    /// CREATE_RSS_GROUP: no hash field, or unknown field bits.
    pub const RSS_HASH_FIELDS: u32 = 0x21;
    /// Unknown flow table kind.
    pub const TABLE_KIND: u32 = 0x30;
    /// CREATE_FLOW_TABLE: level above the maximum.
    pub const TABLE_LEVEL: u32 = 0x32;
    /// CREATE_FLOW_TABLE: unknown miss behaviour.
    pub const TABLE_MISS: u32 = 0x33;
    /// A go-to target that is foreign, of another kind, or not at a strictly higher level.
    pub const GOTO_TARGET: u32 = 0x34;
    /// CREATE_FLOW_ENTRY: unknown action bits or more than one fate.
    pub const ACTIONS: u32 = 0x40;
    /// CREATE_FLOW_ENTRY: FWD_VPORT outside an FDB table.
    pub const VPORT_OUTSIDE_FDB: u32 = 0x41;
    /// CREATE_FLOW_ENTRY: FWD_RQ or FWD_RSS outside a receive table.
    pub const QUEUE_OUTSIDE_RX: u32 = 0x42;
    /// CREATE_FLOW_ENTRY: VXLAN_DECAP without GOTO_TABLE.
    pub const DECAP_WITHOUT_GOTO: u32 = 0x43;
    /// CREATE_FLOW_ENTRY: VXLAN_ENCAP without FWD_VPORT.
    pub const ENCAP_WITHOUT_VPORT: u32 = 0x44;
    /// CREATE_METER: zero rate or burst.
    pub const METER_RATE: u32 = 0x50;
    /// CREATE_VXLAN_ENCAP: VNI wider than 24 bits.
    pub const VNI: u32 = 0x60;
    /// CREATE_MR: unknown access bits, or remote write/atomic without local write.
    pub const MR_ACCESS: u32 = 0x70;
    /// CREATE_MR: page size outside 4 KiB..=1 GiB.
    pub const MR_PAGE_SIZE: u32 = 0x71;
    /// CREATE_MR: zero length, or a region that wraps the address space.
    pub const MR_LENGTH: u32 = 0x72;
    /// CREATE_MR: the MTT is not wholly DMA-reachable.
    pub const MTT_UNREACHABLE: u32 = 0x73;
    /// CREATE_QP / CREATE_SRQ: receive WQE stride outside 16..=512 bytes.
    pub const RQ_STRIDE: u32 = 0x74;
    /// CREATE_QP: unknown flag bits.
    pub const QP_FLAGS: u32 = 0x75;
    /// MODIFY_QP: an attribute the transition requires is missing from the mask (IBA 11.2.4.2,
    /// Table 91). The syndrome's high 16 bits hold the lowest missing mask bit's position.
    pub const QP_ATTR_MISSING: u32 = 0x76;
    /// MODIFY_QP: an attribute the transition does not allow is in the mask (high 16 bits: its
    /// bit position).
    pub const QP_ATTR_NOT_ALLOWED: u32 = 0x77;
    /// MODIFY_QP: an attribute's value is out of range (path MTU, port, GID index, a PSN over 24
    /// bits, more than MAX_RD_ATOMIC reads, unknown access bits); high 16 bits: its bit position.
    pub const QP_ATTR_VALUE: u32 = 0x78;
    /// SET_ROCE_ADDRESS / QUERY_ROCE_ADDRESS: index beyond the table, or unknown flags.
    pub const ROCE_ADDRESS: u32 = 0x79;
    /// MODIFY_QP: no transition from the current state to the target state (IBA Figure 124).
    pub const QP_TRANSITION: u32 = 0x7a;
    /// SET_PKEY / QUERY_PKEY: index beyond the P_Key table.
    pub const PKEY_INDEX: u32 = 0x7b;
    /// SET_STAR_SERVER: unknown flag bits.
    pub const STAR_FLAGS: u32 = 0x7c;
    /// CREATE_MR: unknown flag bits, or a peer key with no StaR peer flag.
    pub const MR_FLAGS: u32 = 0x7e;
    /// SET_QP_STAGING: slot size or count out of range, reserved bytes set, or a QP that
    /// reorders, shares an RQ or is a StaR client.
    pub const QP_STAGING: u32 = 0x7f;
    /// STAR_GUARD_*: a function number the NIC does not have, no kinds, an empty or inverted
    /// range, or an ENFORCE value other than 0 and 1.
    pub const STAR_GUARD: u32 = 0x7d;
}

/// Syndromes of NOT_PERMITTED.
pub mod not_permitted {
    /// FDB (eSwitch) tables are the manager function's (function 0) alone.
    pub const FDB_NOT_MANAGER: u32 = 0x31;
    /// The StaR egress security modules are the manager function's alone (§16.5).
    pub const STAR_GUARD_NOT_MANAGER: u32 = 0x32;
}

/// QUERY_CAPS `receiver`: how the card's responders treat an RC packet ahead of the expected
/// PSN on a QP that tolerates reordering (LEFT, Zhang et al., APNet '24, and the receivers it
/// is compared with).
pub mod receiver {
    /// IBA's RC: a sequence NAK, the packet dropped; no reorder unit.
    pub const GO_BACK_N: u8 = 0;
    /// IRN: a bitmap of its own per connection, 5 BDP long.
    pub const IRN: u8 = 1;
    /// A shared bitmap pool alone (MELO without PSN-triggered retransmission).
    pub const MELO_PLUS: u8 = 2;
    /// LEFT's dual-state pool without its gather queues.
    pub const LEFT_MINUS: u8 = 3;
    /// LEFT: dual-state pool, gather queues and fast/slow scheduler.
    pub const LEFT: u8 = 4;
    /// Unbounded, every record in one cycle (a reference, not a design).
    pub const IDEAL: u8 = 5;
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
    /// Which check failed, for diagnostics (documented per command).
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
    /// The reorder unit RC responders of [`super::QP_FLAG_OUT_OF_ORDER`] QPs use, a
    /// [`receiver`] value ([`receiver::GO_BACK_N`]: none, the flag is refused).
    pub receiver: u8,
    pub max_mtu: U32,
    pub vport: U16,
    pub is_eswitch_manager: u8,
    pub rsvd2: u8,
    /// How many queue-pair contexts the NIC keeps on chip (the QP-context cache); past that
    /// many connected QPs, contexts are fetched from host memory. A StaR control plane that
    /// adapts (`docs/nic-interface.md` §16.7) serves new connections statelessly beyond it.
    pub qp_context_cache: U32,
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

impl ObjectIn {
    pub fn new(id: u32) -> Self {
        ObjectIn {
            id: U32::new(id),
            rsvd: [0; 4],
        }
    }
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
    /// SQ: WQEs taken from the SQ's WQE-by-MMIO buffer instead of fetched (§4.1). RQ: receive
    /// WQEs that had been read ahead before their first frame arrived (§7.5).
    pub on_chip: U64,
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
    pub const ALL: u8 = SRC_IP | DST_IP | SRC_PORT | DST_PORT;
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

impl CreateRssGroupIn {
    /// The command body: this header followed by the indirection table.
    pub fn encode(&self, rqns: &[u32]) -> Vec<u8> {
        let mut input = self.as_bytes().to_vec();
        for r in rqns {
            input.extend_from_slice(&r.to_le_bytes());
        }
        input
    }

    /// The indirection table that follows the header in `body` (the whole command body), as
    /// many entries as are present up to `indirection_len`.
    pub fn indirection(body: &[u8], len: u16) -> impl Iterator<Item = u32> + '_ {
        body.get(core::mem::size_of::<CreateRssGroupIn>()..)
            .unwrap_or(&[])
            .chunks_exact(4)
            .take(len as usize)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
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

impl QueryVportOut {
    /// The counters by the names tools print (mlx5's ethtool names where one exists).
    pub fn named(&self) -> [(&'static str, u64); 8] {
        [
            ("rx_packets", self.rx_packets.get()),
            ("rx_bytes", self.rx_bytes.get()),
            ("tx_packets", self.tx_packets.get()),
            ("tx_bytes", self.tx_bytes.get()),
            ("rx_steering_drops", self.rx_steering_drops.get()),
            ("rx_steer_missed_packets", self.rx_no_steering.get()),
            ("rx_out_of_buffer", self.rx_out_of_buffer.get()),
            ("tx_malformed", self.tx_malformed.get()),
        ]
    }
}

impl Default for CreateRssGroupIn {
    fn default() -> Self {
        <Self as zerocopy::FromZeros>::new_zeroed()
    }
}

const _: () = {
    assert!(core::mem::size_of::<CmdInHeader>() == CMD_HEADER_LEN);
    assert!(core::mem::size_of::<CmdOutHeader>() == CMD_HEADER_LEN);
};
