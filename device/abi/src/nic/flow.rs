//! Flow tables and entries of the eSwitch (`docs/nic-interface.md` §9): table kinds and miss
//! behaviour, the 80-byte match layout, action bits and the entry command.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

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
    /// RoCEv2 frames (UDP to port 4791): the BTH's destination QP (network byte order), so a
    /// rule can steer one connection's traffic; 0 for other frames.
    pub dst_qpn: [u8; 3],
    /// The parser's header errors, one bit per reason ([`hdr_err`]): 0 for a frame whose
    /// headers are consistent. The fields above are still filled from the header bytes where
    /// their position is known, so a rule on a port also sees a malformed datagram to that port
    /// and a rule on a reason bit can drop and count it (the integrity item of rte_flow).
    pub hdr_err: u8,
    pub rsvd: [u8; 12],
}

/// [`FlowMatch::hdr_err`] bits: why the NIC's parser found a frame's headers inconsistent
/// (`docs/nic-interface.md` §9.7). A frame may carry several.
pub mod hdr_err {
    /// IPv4: version not 4, IHL below 5, or the header with its options runs past the frame;
    /// IPv6: the fixed header runs past the frame. Nothing behind the header is parsed.
    pub const L3_HEADER: u8 = 1 << 0;
    /// IPv4 total length below the header length (RFC 791 §3.1).
    pub const L3_LENGTH: u8 = 1 << 1;
    /// The IP datagram's length runs past the frame (a truncated datagram). The L4 ports are
    /// still read when the L4 header lies within the frame.
    pub const L3_TRUNCATED: u8 = 1 << 2;
    /// The TCP or UDP header does not fit in the datagram, or a TCP data offset below 5 or
    /// past the segment.
    pub const L4_HEADER: u8 = 1 << 3;
    /// UDP length below 8 or past the end of the IP payload (RFC 768). A UDP length shorter
    /// than the IP payload is legal and not an error: the datagram is its first `length` bytes.
    pub const UDP_LENGTH: u8 = 1 << 4;
    /// Every reason, with the name counters and tools report it under.
    pub const ALL: [(u8, &str); 5] = [
        (L3_HEADER, "ip_header_errors"),
        (L3_LENGTH, "ip_length_errors"),
        (L3_TRUNCATED, "ip_truncated"),
        (L4_HEADER, "l4_header_errors"),
        (UDP_LENGTH, "udp_length_errors"),
    ];
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

const _: () = assert!(FLOW_MATCH_LEN == 80);
