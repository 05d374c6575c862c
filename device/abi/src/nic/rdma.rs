//! The RDMA interface of the soft NIC (`docs/nic-interface.md` §15): protection domains, memory
//! regions whose translation table (MTT) lives in host memory, RoCE addresses (the GID table),
//! reliable-connection queue pairs with the InfiniBand state machine, shared receive queues, the
//! RDMA send WQE segments and receive scatter lists, and the completion status codes.
//!
//! Values follow the InfiniBand verbs where software meets them (QP states, attribute-mask bits,
//! access flags, path-MTU codes), so a verbs library maps them one to one.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Memory and queue-pair access rights (ibv_access_flags).
pub mod access {
    pub const LOCAL_WRITE: u32 = 1 << 0;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    pub const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
    pub const REMOTE: u32 = REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
}

/// Smallest and largest MR page size (log2 bytes).
pub const MIN_LOG_MR_PAGE: u8 = 12;
pub const MAX_LOG_MR_PAGE: u8 = 30;
/// Bytes of one MTT entry: the bus address of one page, little-endian.
pub const MTT_ENTRY_SIZE: usize = 8;

/// Memory keys are `index << 8 | variant`; index 0 is never a region, so no key of a region
/// equals [`super::RESERVED_LKEY`] (bus addresses, the Ethernet interface's key).
pub const fn mkey(index: u32, variant: u8) -> u32 {
    (index << 8) | variant as u32
}
pub const fn mkey_index(key: u32) -> u32 {
    key >> 8
}

/// CREATE_PD has no input and returns the PD number in [`super::CreateOut`].
/// CREATE_MR input: a region of `length` bytes at virtual address `start` (the address the
/// consumer and its peers use), translated page by page through the MTT at bus address
/// `mtt_addr`: entry `i` is the bus address of the region's `i`-th page counted from `start`
/// rounded down to the page size. The NIC reads MTT entries by DMA when it translates, as an
/// RNIC does from its host-memory translation tables. Returns the key (lkey = rkey) in
/// [`super::CreateOut`].
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateMrIn {
    pub pd: U32,
    /// [`access`] bits. Remote write and remote atomic require local write (IBA 10.6.3.1).
    pub access: U32,
    pub start: U64,
    pub length: U64,
    pub mtt_addr: U64,
    pub log_page_size: u8,
    /// [`MR_FLAG_STAR_PEER`].
    pub flags: u8,
    pub rsvd: [u8; 2],
    /// With [`MR_FLAG_STAR_PEER`]: the key the StaR server gave the region.
    pub peer_key: U32,
}

/// [`CreateMrIn::flags`]: the region is a StaR server's (`docs/nic-interface.md` §16.6), held
/// by its client: `start`/`length` are the server's virtual addresses, the MTT holds the
/// server's bus addresses, and the client's StaR QPs in `pd` find it by `peer_key`. It is
/// never accessed by this NIC's DMA: the client translates through it and names the bus
/// addresses in its RDPs and GDs.
pub const MR_FLAG_STAR_PEER: u8 = 1 << 0;

impl CreateMrIn {
    /// MTT entries the region needs.
    pub const fn pages(&self) -> u64 {
        mtt_pages(self.start.get(), self.length.get(), self.log_page_size)
    }
}

/// Pages of `2^log_page` bytes that `[start, start + length)` touches.
pub const fn mtt_pages(start: u64, length: u64, log_page: u8) -> u64 {
    if length == 0 || log_page >= 64 {
        return 0;
    }
    let first = start >> log_page;
    let last = (start.saturating_add(length - 1)) >> log_page;
    last - first + 1
}

/// QUERY_MR output (input: [`super::ObjectIn`] with the key).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryMrOut {
    pub pd: U32,
    pub access: U32,
    pub start: U64,
    pub length: U64,
    pub mtt_addr: U64,
    pub log_page_size: u8,
    pub rsvd: [u8; 3],
    /// Queue pairs' in-flight operations holding the region (DESTROY_MR waits for 0).
    pub refs: U32,
}

/// Entries of a function's RoCE address (GID) table.
pub const ROCE_ADDRESS_ENTRIES: u16 = 16;
/// [`RoceAddressIn::flags`]: the entry is in use.
pub const ROCE_ADDRESS_VALID: u8 = 1 << 0;

/// SET_ROCE_ADDRESS input and QUERY_ROCE_ADDRESS output (query input: [`super::ObjectIn`] with
/// the index): GID table entry `index` of the function. A RoCEv2 GID is an IPv6 address or an
/// IPv4-mapped one (`::ffff:a.b.c.d`); packets of QPs using the entry leave from `gid` and
/// `mac`, and RoCE packets addressed to a valid entry's GID are the function's.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct RoceAddressIn {
    pub index: U16,
    pub flags: u8,
    pub rsvd: [u8; 5],
    pub gid: [u8; 16],
    pub mac: [u8; 6],
    pub rsvd2: [u8; 2],
}

/// Entries of a function's (port's) partition key table (IBA §10.9.2). Entry 0 is the default
/// partition, 0xFFFF with full membership, at power-on and after a function reset.
pub const PKEY_TABLE_ENTRIES: u16 = 64;

/// SET_PKEY input and QUERY_PKEY output (query input: [`super::ObjectIn`] with the index): the
/// function's P_Key table entry `index`. A P_Key's bit 15 is the membership type (1 = full,
/// 0 = limited), bits 0..14 the partition; a partition of 0 is an invalid entry that matches no
/// packet (IBA §10.9.1.2).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct PkeyIn {
    pub index: U16,
    pub pkey: U16,
    pub rsvd: [u8; 4],
}

/// Whether a packet's P_Key matches a table entry (IBA §10.9.3, C10-120): the same partition,
/// not the invalid partition 0, and at least one side a full member (two limited members do not
/// talk).
pub const fn pkey_matches(packet: u16, entry: u16) -> bool {
    let partition = packet & 0x7fff;
    partition != 0 && partition == entry & 0x7fff && (packet | entry) & 0x8000 != 0
}

/// CREATE_QP input: a reliable-connection QP in the RESET state.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateQpIn {
    pub pd: U32,
    pub send_cqn: U32,
    pub recv_cqn: U32,
    /// A shared receive queue, or [`NO_SRQ`] for the QP's own receive ring.
    pub srqn: U32,
    /// Send ring of 64-byte WQE basic blocks.
    pub sq_addr: U64,
    /// Receive ring of `2^log_rq_stride`-byte WQEs (ignored with an SRQ).
    pub rq_addr: U64,
    pub log_sq_size: u8,
    pub log_rq_size: u8,
    /// log2 bytes of a receive WQE: 16 bytes per scatter entry, 4 (one entry) ..= 9 (32).
    pub log_rq_stride: u8,
    /// [`QP_FLAG_SIGNAL_ALL`], [`QP_FLAG_MULTI_PACKET_RQ`], [`QP_FLAG_OUT_OF_ORDER`].
    pub flags: u8,
    pub rsvd: [u8; 4],
}
pub const NO_SRQ: u32 = u32::MAX;
/// Every send WQE completes with a CQE, whatever its own request.
pub const QP_FLAG_SIGNAL_ALL: u8 = 1 << 0;
/// The QP receives through a shared multi-packet (striding) RQ of the function, named by
/// `srqn` (FlexDriver §6, ConnectX-5's shared multi-packet RQ for RDMA): the payload of every
/// SEND packet is placed in the RQ's strides as it arrives and completed on the RQ's CQ with
/// one CQE per packet, flagged with its message position ([`super::cqe_flags::MSG_FIRST`],
/// [`super::cqe_flags::MSG_LAST`]) — before the whole message is in. The QP has no receive
/// ring of its own; no room in the RQ is an RNR NAK. Incoming WRITE, READ and atomics need
/// access rights as usual.
pub const QP_FLAG_MULTI_PACKET_RQ: u8 = 1 << 1;
/// The QP tolerates packets out of order (multipath; `docs/nic-interface.md` §17), as both ends
/// of a connection must agree, like mlx5's out-of-order data placement: its responder places
/// and records a request that arrives ahead of the expected PSN with the card's reorder unit
/// (QUERY_CAPS `receiver`) instead of NAKing it, and its requester answers a sequence NAK by
/// sending the one packet named again rather than everything from it. CREATE_QP with it on a
/// card without a reorder unit fails with BAD_PARAM (`QP_FLAGS`).
pub const QP_FLAG_OUT_OF_ORDER: u8 = 1 << 2;
pub const MIN_LOG_RQ_STRIDE: u8 = 4;
pub const MAX_LOG_RQ_STRIDE: u8 = 9;
/// QP numbers start here (0 and 1 are InfiniBand's management QPs); number `QPN_BASE + i` uses
/// doorbell slot `i`.
pub const QPN_BASE: u32 = 0x100;

/// Queue pair states (ibv_qp_state values).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

impl QpState {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

/// MODIFY_QP attribute mask bits (ibv_qp_attr_mask values).
pub mod qp_attr {
    pub const STATE: u32 = 1 << 0;
    pub const CUR_STATE: u32 = 1 << 1;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
    /// Every bit this interface knows.
    pub const KNOWN: u32 = STATE
        | CUR_STATE
        | ACCESS_FLAGS
        | PKEY_INDEX
        | PORT
        | AV
        | PATH_MTU
        | TIMEOUT
        | RETRY_CNT
        | RNR_RETRY
        | RQ_PSN
        | MAX_QP_RD_ATOMIC
        | MIN_RNR_TIMER
        | SQ_PSN
        | MAX_DEST_RD_ATOMIC
        | DEST_QPN;
}

/// Path MTU codes (ibv_mtu): 1 = 256 bytes … 5 = 4096 bytes.
pub const fn mtu_bytes(code: u8) -> Option<u32> {
    match code {
        1..=5 => Some(128 << code),
        _ => None,
    }
}
/// The path MTU code of `bytes` (256, 512, 1024, 2048 or 4096), the inverse of [`mtu_bytes`].
pub const fn mtu_code(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}
/// The paper's (and this NIC's default) path MTU: 1024 bytes.
pub const DEFAULT_PATH_MTU: u8 = 3;
/// Outstanding RDMA READ and atomic operations a QP may have as requester or responder.
pub const MAX_RD_ATOMIC: u8 = 16;
/// The local ACK timeout exponent common tools default to (perftest, rdma-core's examples):
/// 4.096 µs × 2^14, about 67 ms.
pub const DEFAULT_ACK_TIMEOUT: u8 = 14;
/// A retry count of 7 means "retry forever" for RNR (IBA 9.7.5.2.8); transport retries are 0..7.
pub const RNR_RETRY_INFINITE: u8 = 7;

/// A QP's attributes as MODIFY_QP sets them and QUERY_QP reports them.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug, PartialEq, Eq,
)]
pub struct QpAttr {
    /// Target state (MODIFY) or current state (QUERY), a [`QpState`].
    pub qp_state: u8,
    /// With [`qp_attr::CUR_STATE`]: the state software believes the QP is in.
    pub cur_state: u8,
    pub path_mtu: u8,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0: none).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    /// The RNR NAK timer code (IBA Table 45) this QP's responder asks requesters to wait.
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub port: u8,
    /// The local GID table entry the QP sends from.
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub rsvd: u8,
    pub pkey_index: U16,
    pub access_flags: U32,
    pub rq_psn: U32,
    pub sq_psn: U32,
    pub dest_qpn: U32,
    pub flow_label: U32,
    pub dgid: [u8; 16],
    /// The peer's (or the next hop's) MAC address: resolving it is software's job, as on a
    /// RoCE NIC.
    pub dmac: [u8; 6],
    pub rsvd2: [u8; 6],
}

/// MODIFY_QP input.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct ModifyQpIn {
    pub qpn: U32,
    pub attr_mask: U32,
    pub attr: QpAttr,
}

/// Per-QP transport counters (QUERY_QP).
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug, PartialEq, Eq,
)]
pub struct QpCounters {
    pub packets_sent: U64,
    pub bytes_sent: U64,
    pub packets_received: U64,
    pub bytes_received: U64,
    /// Requester: packets sent again after a NAK or a timeout (go-back-N).
    pub retransmitted: U64,
    pub timeouts: U64,
    pub seq_naks_received: U64,
    pub rnr_naks_received: U64,
    /// Responder: NAKs and RNR NAKs it sent.
    pub seq_naks_sent: U64,
    pub rnr_naks_sent: U64,
    /// Responder: requests whose PSN was already seen (answered again, not executed again,
    /// except READ).
    pub duplicates: U64,
    /// Packets dropped without an answer: an opcode this QP's state does not take, a PSN
    /// beyond the window after a NAK, a response to nothing.
    pub dropped: U64,
    pub acks_sent: U64,
    pub acks_received: U64,
    /// Requester: WQEs taken from the QP's WQE-by-MMIO buffer instead of fetched (§4.1).
    pub wqes_by_mmio: U64,
}

/// QUERY_QP output.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QueryQpOut {
    pub attr: QpAttr,
    /// The requester's next PSN and oldest unacknowledged PSN, the responder's expected PSN.
    pub next_psn: U32,
    pub unacked_psn: U32,
    pub expected_psn: U32,
    pub rsvd: U32,
    pub counters: QpCounters,
}

/// CREATE_SRQ input: a ring of `2^log_size` receive WQEs of `2^log_stride` bytes shared by
/// the QPs that name it; a QUERY reports how many are posted and not consumed.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CreateSrqIn {
    pub pd: U32,
    pub rsvd: U32,
    pub addr: U64,
    pub log_size: u8,
    pub log_stride: u8,
    pub rsvd2: [u8; 6],
}

/// ARM_SRQ input: raise [`super::EQE_SRQ_LIMIT`] once (on the EQ given) when fewer than `limit`
/// WQEs remain posted (IBA 10.2.9.6, the SRQ limit event); 0 disarms.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct ArmSrqIn {
    pub srqn: U32,
    pub limit: U32,
    pub eqn: U32,
    pub rsvd: U32,
}

/// QUERY_SRQ output.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QuerySrqOut {
    /// WQEs the device consumed.
    pub hw_counter: U32,
    pub limit: U32,
    pub log_size: u8,
    pub log_stride: u8,
    pub rsvd: [u8; 2],
    /// QPs attached.
    pub refs: U32,
}

/// QUERY_RDMA_COUNTERS output: the function's RoCE receive path.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug, PartialEq, Eq,
)]
pub struct RdmaCountersOut {
    pub rx_packets: U64,
    /// Dropped silently: the ICRC did not match (IBA 9.8.3.1).
    pub rx_icrc_errors: U64,
    /// Dropped: no QP of this function has the destination QP number.
    pub rx_unknown_qp: U64,
    /// Dropped: headers that do not parse, an opcode this transport does not implement.
    pub rx_malformed: U64,
    /// Dropped: the QP is not in a state that receives (RESET, INIT, ERR).
    pub rx_qp_not_ready: U64,
    pub tx_packets: U64,
    /// Dropped: the packet names a connected QP but does not come from that QP's peer address
    /// (another tenant's, or a forger's).
    pub rx_wrong_source: U64,
    /// The NIC's on-chip caches (NIC-wide, not per function): lookups of queue-pair contexts
    /// and of memory translations that found the entry, and that did not (a translation miss
    /// reads the MTT entry from host memory).
    pub qp_cache_hits: U64,
    pub qp_cache_misses: U64,
    pub mtt_cache_hits: U64,
    pub mtt_cache_misses: U64,
    /// Dropped silently: the BTH's P_Key does not match the P_Key table entry of the
    /// destination QP's P_Key index (IBA §9.6.1.1, §10.9.3; Linux rxe's `bad_pkey_cntr`).
    pub rx_bad_pkey: U64,
    /// StaR (§16): requests this function served statelessly (RDP, GD, CQEP answered, EA
    /// delivered to the control CQ).
    pub star_served: U64,
    /// StaR: packets dropped because the function does not serve StaR, has no control CQ for
    /// an EA, or a CQEP named a CQ that is not the function's or has no room.
    pub star_refused: U64,
    /// StaR: RDPs and GDs whose bytes lie outside the function's DMA-mapped memory (dropped,
    /// unanswered).
    pub star_dma_errors: U64,
    /// StaR: packets the function tried to send that its egress security module refused.
    pub star_tx_blocked: U64,
    /// NIC-wide, now (a gauge, not a count): queue pairs holding a connection (RTR, RTS, SQD,
    /// SQE), whose contexts compete for the NIC's QP-context cache
    /// ([`super::Caps::qp_context_cache`]).
    pub qp_contexts_connected: U64,
    /// RC requests that arrived ahead of the PSN their QP expected: placed or kept by the
    /// reorder unit of an out-of-order QP, NAKed or dropped by a go-back-N one (§17).
    pub rx_out_of_order: U64,
}

impl RdmaCountersOut {
    /// The counters by the names tools print: Linux rxe's and mlx5's hw_counters where one
    /// exists (`rcvd_pkts`, `sent_pkts`, `rx_icrc_encapsulated`, `bad_pkey_cntr`), the card's
    /// own otherwise.
    pub fn named(&self) -> [(&'static str, u64); 18] {
        [
            ("rcvd_pkts", self.rx_packets.get()),
            ("sent_pkts", self.tx_packets.get()),
            ("rx_icrc_encapsulated", self.rx_icrc_errors.get()),
            ("bad_pkey_cntr", self.rx_bad_pkey.get()),
            ("rx_unknown_qp", self.rx_unknown_qp.get()),
            ("rx_malformed", self.rx_malformed.get()),
            ("rx_qp_not_ready", self.rx_qp_not_ready.get()),
            ("rx_wrong_source", self.rx_wrong_source.get()),
            ("qp_cache_hits", self.qp_cache_hits.get()),
            ("qp_cache_misses", self.qp_cache_misses.get()),
            ("mtt_cache_hits", self.mtt_cache_hits.get()),
            ("mtt_cache_misses", self.mtt_cache_misses.get()),
            ("star_served", self.star_served.get()),
            ("star_refused", self.star_refused.get()),
            ("star_dma_errors", self.star_dma_errors.get()),
            ("star_tx_blocked", self.star_tx_blocked.get()),
            ("qp_contexts_connected", self.qp_contexts_connected.get()),
            ("rx_out_of_order", self.rx_out_of_order.get()),
        ]
    }
}

/// SET_STAR_SERVER input: whether the function serves StaR requests statelessly
/// ([`STAR_SERVE`]) and the CQ its element ACKs are delivered to ([`STAR_NO_CQ`]: none).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct StarServerIn {
    pub flags: U32,
    pub control_cqn: U32,
}

/// SET_STAR_PEER input: QP `qpn` (in RESET or INIT) becomes the stateful client of a StaR
/// server (`docs/nic-interface.md` §16.6). The server's QP is the QP's destination QP (set at
/// RTR); its completions go to the server's CQs named here. The server's later changes to its
/// memory table arrive in the function's RQ `update_rqn` ([`STAR_NO_RQ`]: none are taken).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct StarPeerIn {
    pub qpn: U32,
    pub server_send_cqn: U32,
    pub server_recv_cqn: U32,
    pub update_rqn: U32,
}

/// SET_QP_STAGING input (`docs/nic-interface.md` §18): the QP's staging ring, uRDMA's
/// in-RNIC unload path (Faster Offloads by Unloading them, §5). From then on the responder
/// writes a single-packet RDMA WRITE (without immediate, at most a slot's data) whose
/// translation is not in its cache into the ring's next slot — a [`StagedWrite`] then the data —
/// instead of fetching the translation, and completes it on the QP's receive CQ
/// ([`super::CQE_RESP_WRITE_STAGED`]); the host copies it and stores the slots it has taken to
/// the QP's staging doorbell ([`super::db::QP_STAGING_BASE`]). While any staged WRITE is not
/// taken, every later request of the QP waits (RNR NAK) unless it can be staged too, so the
/// order of WRITEs and later requests is the offload path's. `log_slots` 0 turns the ring off.
/// The ring is `2^log_slots` slots of `2^log_slot_bytes` bytes at `addr`, in the region of
/// `lkey` (the QP's PD, local write).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct QpStagingIn {
    pub qpn: U32,
    pub lkey: U32,
    pub addr: U64,
    pub log_slots: u8,
    pub log_slot_bytes: u8,
    pub rsvd: [u8; 6],
}

/// The smallest and largest staging slot (32 bytes to a page).
pub const MIN_LOG_STAGING_SLOT: u8 = 5;
pub const MAX_LOG_STAGING_SLOT: u8 = 12;
/// The most staging slots (the doorbell's 16-bit counter covers twice as many).
pub const MAX_LOG_STAGING_SLOTS: u8 = 15;

/// What a staging slot starts with: the WRITE's destination as the requester named it. The
/// data follows; the NIC has checked the key, the PD, the rights and the range.
#[repr(C)]
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug, PartialEq, Eq,
)]
pub struct StagedWrite {
    pub va: U64,
    pub rkey: U32,
    pub len: U32,
}

/// Bytes of [`StagedWrite`] at the start of a staging slot.
pub const STAGED_WRITE_HEADER: usize = core::mem::size_of::<StagedWrite>();

/// [`StarPeerIn::update_rqn`]: the client takes no memory-table updates.
pub const STAR_NO_RQ: u32 = u32::MAX;

/// STAR_GUARD_ADD input (`docs/nic-interface.md` §16.5): one entry of a function's egress
/// security module, allowing StaR packets of `kinds` ([`star_guard_kind`] bits) to `dst_gid`;
/// RDPs and GDs only when their bytes lie in `[lo, hi)`, CQEPs only for CQ `cqn`
/// ([`STAR_GUARD_ANY_CQ`]: any).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct StarGuardIn {
    pub function: U16,
    pub kinds: u8,
    pub rsvd: u8,
    pub cqn: U32,
    pub dst_gid: [u8; 16],
    pub lo: U64,
    pub hi: U64,
}

/// STAR_GUARD_DEL input: entry `id` (STAR_GUARD_ADD's output) of `function`'s module.
/// STAR_GUARD_ENFORCE input: `value` 1 enforces `function`'s module (the default), 0 lets every
/// StaR packet through — a test knob, to show what the module prevents.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct StarGuardFunctionIn {
    pub function: U16,
    pub rsvd: [u8; 2],
    pub value: U32,
}

/// The bit of a StaR packet kind (its BTH opcode) in [`StarGuardIn::kinds`].
pub const fn star_guard_kind(opcode: u8) -> u8 {
    1 << (opcode.wrapping_sub(crate::wire::roce::star::opcode::WQEP) & 7)
}
/// [`StarGuardIn::cqn`]: CQEPs to any CQ.
pub const STAR_GUARD_ANY_CQ: u32 = u32::MAX;
/// Entries a function's egress security module holds.
pub const STAR_GUARD_ENTRIES: usize = 4096;

/// [`StarServerIn::flags`]: answer RDPs, GDs and CQEPs addressed to this function.
pub const STAR_SERVE: u32 = 1 << 0;
/// [`StarServerIn::control_cqn`] when EAs are not wanted.
pub const STAR_NO_CQ: u32 = u32::MAX;

impl QpCounters {
    /// The counters by the names tools print (rxe's and mlx5's hw_counters where one exists:
    /// `duplicate_request`, `out_of_sequence`, `packet_seq_err`, `rnr_nak_retry_err`,
    /// `local_ack_timeout_err`).
    pub fn named(&self) -> [(&'static str, u64); 15] {
        [
            ("packets_sent", self.packets_sent.get()),
            ("bytes_sent", self.bytes_sent.get()),
            ("packets_received", self.packets_received.get()),
            ("bytes_received", self.bytes_received.get()),
            ("retransmitted", self.retransmitted.get()),
            ("local_ack_timeout_err", self.timeouts.get()),
            ("packet_seq_err", self.seq_naks_received.get()),
            ("rnr_nak_retry_err", self.rnr_naks_received.get()),
            ("out_of_sequence", self.seq_naks_sent.get()),
            ("rnr_naks_sent", self.rnr_naks_sent.get()),
            ("duplicate_request", self.duplicates.get()),
            ("rx_dropped", self.dropped.get()),
            ("acks_sent", self.acks_sent.get()),
            ("acks_received", self.acks_received.get()),
            ("wqes_by_mmio", self.wqes_by_mmio.get()),
        ]
    }
}

// ---------------------------------------------------------------------------------------------
// Send WQEs of a QP
// ---------------------------------------------------------------------------------------------

/// RDMA send opcodes (beside [`super::WQE_OP_SEND`]).
pub const WQE_OP_RDMA_WRITE: u8 = 0x08;
pub const WQE_OP_RDMA_WRITE_IMM: u8 = 0x09;
pub const WQE_OP_SEND_IMM: u8 = 0x0b;
pub const WQE_OP_RDMA_READ: u8 = 0x10;
pub const WQE_OP_ATOMIC_CS: u8 = 0x11;
pub const WQE_OP_ATOMIC_FA: u8 = 0x12;

/// [`super::CtrlSeg::fm_ce_se`]: solicited event for the message's receiver.
pub const WQE_SOLICITED: u8 = 1 << 1;
/// [`super::CtrlSeg::fm_ce_se`]: wait for every earlier READ and atomic to complete first.
pub const WQE_FENCE: u8 = 1 << 5;

/// Remote address segment (WRITE, READ, atomics).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct RemoteAddrSeg {
    pub addr: U64,
    pub rkey: U32,
    pub rsvd: U32,
}

/// Atomic segment: the swap value or addend, and the compare value.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct AtomicSeg {
    pub swap_add: U64,
    pub compare: U64,
}

/// The first word of an inline data segment: the byte count with this bit set; the data
/// follows at once and the segment is padded to 16 bytes.
pub const INLINE_SEG: u32 = 1 << 31;
/// Largest inline payload of a send WQE.
pub const MAX_INLINE_DATA: usize = 512;
/// Scatter/gather entries in one send WQE at most.
pub const MAX_SEND_SGE: usize = 30;
/// A receive scatter entry with this lkey ends the WQE's list early.
pub const RECV_SGE_END: u32 = 0x100;

/// One local buffer of a work request: `length` bytes at virtual address `addr` of region
/// `lkey`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The data of a send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeData<'a> {
    Gather(&'a [Sge]),
    Inline(&'a [u8]),
}

/// A send work request of an RC QP as software builds it.
#[derive(Clone, Copy, Debug)]
pub struct RdmaWqe<'a> {
    pub opcode: u8,
    pub signal: bool,
    pub solicited: bool,
    pub fence: bool,
    /// Immediate data (SEND/WRITE with immediate), in host order.
    pub imm: u32,
    /// Remote buffer of WRITE, READ and atomics.
    pub remote: Option<(u64, u32)>,
    /// (swap or add, compare) of an atomic.
    pub atomic: Option<(u64, u64)>,
    pub data: WqeData<'a>,
}

/// Why an RDMA WQE cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaWqeError {
    TooManySges,
    InlineTooLong,
    /// WRITE/READ/atomic without a remote address, or an atomic without operands.
    MissingSegment,
    BufferTooSmall,
}

const DS: usize = super::DS_SIZE;

/// Whether an opcode carries a remote address segment.
pub const fn has_remote(opcode: u8) -> bool {
    matches!(
        opcode,
        WQE_OP_RDMA_WRITE
            | WQE_OP_RDMA_WRITE_IMM
            | WQE_OP_RDMA_READ
            | WQE_OP_ATOMIC_CS
            | WQE_OP_ATOMIC_FA
    )
}
pub const fn is_atomic(opcode: u8) -> bool {
    matches!(opcode, WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA)
}

impl RdmaWqe<'_> {
    /// 16-byte segments of the WQE.
    pub fn ds_count(&self) -> usize {
        1 + has_remote(self.opcode) as usize
            + is_atomic(self.opcode) as usize
            + match self.data {
                WqeData::Gather(s) => s.len(),
                WqeData::Inline([]) => 0,
                WqeData::Inline(d) => (4 + d.len()).div_ceil(DS),
            }
    }

    /// Encodes the WQE at index `index` of QP `qpn` into `buf` (whole basic blocks, the tail
    /// zeroed); returns the bytes of its segments.
    #[inline]
    pub fn encode(&self, qpn: u32, index: u16, buf: &mut [u8]) -> Result<usize, RdmaWqeError> {
        match self.data {
            WqeData::Gather(s) if s.len() > MAX_SEND_SGE => return Err(RdmaWqeError::TooManySges),
            WqeData::Inline(d) if d.len() > MAX_INLINE_DATA => {
                return Err(RdmaWqeError::InlineTooLong)
            }
            _ => {}
        }
        if has_remote(self.opcode) && self.remote.is_none()
            || is_atomic(self.opcode) && self.atomic.is_none()
        {
            return Err(RdmaWqeError::MissingSegment);
        }
        let ds = self.ds_count();
        let len = ds * DS;
        let buf = buf
            .get_mut(..len.next_multiple_of(super::WQEBB))
            .ok_or(RdmaWqeError::BufferTooSmall)?;
        super::wqe::clear_blocks(buf);
        let ctrl = super::CtrlSeg {
            opcode: self.opcode,
            rsvd: 0,
            wqe_index: U16::new(index),
            ds_count: ds as u8,
            fm_ce_se: if self.signal {
                super::CE_ALWAYS
            } else {
                super::CE_ON_ERROR
            } | if self.solicited { WQE_SOLICITED } else { 0 }
                | if self.fence { WQE_FENCE } else { 0 },
            rsvd2: U16::new(0),
            sqn: U32::new(qpn),
            imm: U32::new(self.imm),
        };
        buf[..DS].copy_from_slice(ctrl.as_bytes());
        let mut at = DS;
        if let Some((addr, rkey)) = self.remote.filter(|_| has_remote(self.opcode)) {
            let r = RemoteAddrSeg {
                addr: U64::new(addr),
                rkey: U32::new(rkey),
                rsvd: U32::new(0),
            };
            buf[at..at + DS].copy_from_slice(r.as_bytes());
            at += DS;
        }
        if let Some((swap_add, compare)) = self.atomic.filter(|_| is_atomic(self.opcode)) {
            let a = AtomicSeg {
                swap_add: U64::new(swap_add),
                compare: U64::new(compare),
            };
            buf[at..at + DS].copy_from_slice(a.as_bytes());
            at += DS;
        }
        match self.data {
            WqeData::Gather(sges) => {
                for s in sges {
                    let d = super::DataSeg {
                        byte_count: U32::new(s.length),
                        lkey: U32::new(s.lkey),
                        addr: U64::new(s.addr),
                    };
                    buf[at..at + DS].copy_from_slice(d.as_bytes());
                    at += DS;
                }
            }
            WqeData::Inline(d) if !d.is_empty() => {
                buf[at..at + 4].copy_from_slice(&(d.len() as u32 | INLINE_SEG).to_le_bytes());
                buf[at + 4..at + 4 + d.len()].copy_from_slice(d);
            }
            WqeData::Inline(_) => {}
        }
        Ok(len)
    }
}

/// Why the NIC refuses an RDMA send WQE (a local QP operation error completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaWqeFormatError {
    /// Fewer bytes than the segments `ds_count` announces, or a `ds_count` of 0 or above 63.
    Truncated,
    /// An opcode a reliable connection does not have.
    Opcode,
    /// The segments an opcode needs are missing.
    MissingSegment,
    /// An inline segment longer than the WQE or than [`MAX_INLINE_DATA`].
    Inline,
}

/// An RDMA send WQE as the NIC reads it, checked once.
#[derive(Clone, Copy, Debug)]
pub struct RdmaWqeView<'a> {
    pub ctrl: super::CtrlSeg,
    pub remote: Option<RemoteAddrSeg>,
    pub atomic: Option<AtomicSeg>,
    data: &'a [u8],
}

/// The data of a WQE as read: scatter/gather entries or inline bytes.
#[derive(Clone, Copy, Debug)]
pub enum WqeDataView<'a> {
    Gather(&'a [u8]),
    Inline(&'a [u8]),
}

impl<'a> RdmaWqeView<'a> {
    #[inline]
    pub fn new_checked(wqe: &'a [u8]) -> Result<Self, RdmaWqeFormatError> {
        let (ctrl, _) =
            super::CtrlSeg::read_from_prefix(wqe).map_err(|_| RdmaWqeFormatError::Truncated)?;
        let ds = ctrl.ds_count as usize;
        if ds == 0 || ds > super::MAX_WQE_DS as usize {
            return Err(RdmaWqeFormatError::Truncated);
        }
        let segs = wqe.get(..ds * DS).ok_or(RdmaWqeFormatError::Truncated)?;
        let op = ctrl.opcode;
        if !matches!(
            op,
            super::WQE_OP_SEND
                | WQE_OP_SEND_IMM
                | WQE_OP_RDMA_WRITE
                | WQE_OP_RDMA_WRITE_IMM
                | WQE_OP_RDMA_READ
                | WQE_OP_ATOMIC_CS
                | WQE_OP_ATOMIC_FA
        ) {
            return Err(RdmaWqeFormatError::Opcode);
        }
        let mut at = DS;
        let seg = |at: &mut usize| -> Result<&'a [u8], RdmaWqeFormatError> {
            let s = segs
                .get(*at..*at + DS)
                .ok_or(RdmaWqeFormatError::MissingSegment)?;
            *at += DS;
            Ok(s)
        };
        let remote = if has_remote(op) {
            Some(RemoteAddrSeg::read_from_bytes(seg(&mut at)?).unwrap_or_default())
        } else {
            None
        };
        let atomic = if is_atomic(op) {
            Some(AtomicSeg::read_from_bytes(seg(&mut at)?).unwrap_or_default())
        } else {
            None
        };
        let data = &segs[at..];
        let view = RdmaWqeView {
            ctrl,
            remote,
            atomic,
            data,
        };
        if let Some(n) = view.inline_len() {
            if n > MAX_INLINE_DATA || 4 + n > view.data.len() {
                return Err(RdmaWqeFormatError::Inline);
            }
        }
        Ok(view)
    }

    /// The byte count an inline data segment claims, if the data is inline.
    fn inline_len(&self) -> Option<usize> {
        let w = self.data.get(..4)?;
        let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        (w & INLINE_SEG != 0).then_some((w & !INLINE_SEG) as usize)
    }

    /// The WQE's data: inline when the first data word has [`INLINE_SEG`].
    pub fn data(&self) -> WqeDataView<'a> {
        match self.inline_len() {
            // new_checked made sure the claimed bytes are present.
            Some(n) => WqeDataView::Inline(self.data.get(4..4 + n).unwrap_or_default()),
            None => WqeDataView::Gather(self.data),
        }
    }

    /// The gather entries (none for inline data), in order.
    pub fn sges(&self) -> impl Iterator<Item = Sge> + 'a {
        let g = match self.data() {
            WqeDataView::Gather(g) => g,
            WqeDataView::Inline(_) => &[],
        };
        g.chunks_exact(DS).map(sge_of)
    }
}

/// Reads one 16-byte data segment as an [`Sge`].
pub fn sge_of(seg: &[u8]) -> Sge {
    let d = super::DataSeg::read_from_bytes(&seg[..DS]).unwrap_or_default();
    Sge {
        addr: d.addr.get(),
        length: d.byte_count.get(),
        lkey: d.lkey.get(),
    }
}

/// Writes a receive WQE of `stride` bytes: the scatter entries, then an end marker when they
/// do not fill the stride. Returns false when they do not fit.
pub fn encode_recv_wqe(sges: &[Sge], buf: &mut [u8]) -> bool {
    if sges.len() * DS > buf.len() {
        return false;
    }
    buf.fill(0);
    for (i, s) in sges.iter().enumerate() {
        let d = super::DataSeg {
            byte_count: U32::new(s.length),
            lkey: U32::new(s.lkey),
            addr: U64::new(s.addr),
        };
        buf[i * DS..(i + 1) * DS].copy_from_slice(d.as_bytes());
    }
    if let Some(end) = buf.get_mut(sges.len() * DS..(sges.len() + 1) * DS) {
        end[4..8].copy_from_slice(&RECV_SGE_END.to_le_bytes());
    }
    true
}

/// The scatter entries of a receive WQE, up to its end marker.
pub fn recv_sges(wqe: &[u8]) -> impl Iterator<Item = Sge> + '_ {
    wqe.chunks_exact(DS)
        .map(sge_of)
        .take_while(|s| s.lkey != RECV_SGE_END)
}

// ---------------------------------------------------------------------------------------------
// Completions of a QP
// ---------------------------------------------------------------------------------------------

/// Completion status of QP CQEs ([`super::Cqe::syndrome`] with [`super::cqe_flags::QP`]), as
/// ibv_wc_status names them.
pub mod rdma_status {
    pub const SUCCESS: u8 = 0x00;
    /// A receive buffer too small for the message, or a send longer than 2^31.
    pub const LOCAL_LENGTH: u8 = 0x01;
    /// A malformed WQE.
    pub const LOCAL_QP_OPERATION: u8 = 0x02;
    /// A local key of another PD, unknown, or a range outside its region.
    pub const LOCAL_PROTECTION: u8 = 0x04;
    /// The QP entered the error state before the WQE was done.
    pub const WR_FLUSH: u8 = 0x05;
    /// A response the requester could not make sense of.
    pub const BAD_RESPONSE: u8 = 0x10;
    /// A local buffer the operation may not write (no LOCAL_WRITE right).
    pub const LOCAL_ACCESS: u8 = 0x11;
    pub const REMOTE_INVALID_REQUEST: u8 = 0x12;
    pub const REMOTE_ACCESS: u8 = 0x13;
    pub const REMOTE_OPERATION: u8 = 0x14;
    pub const RETRY_EXCEEDED: u8 = 0x15;
    pub const RNR_RETRY_EXCEEDED: u8 = 0x16;
}

/// [`super::EQE_QP_EVENT`] subtypes (data: the QPN).
pub mod qp_event {
    /// The QP entered the error state on its own (a transport or remote error).
    pub const FATAL: u8 = 1;
    /// SQD: every WQE before the drain completed.
    pub const SQ_DRAINED: u8 = 2;
    /// RTR: the first packet arrived.
    pub const COMM_ESTABLISHED: u8 = 3;
    /// A QP on an SRQ in the error state consumes no more WQEs.
    pub const LAST_WQE_REACHED: u8 = 4;
}

const _: () = {
    assert!(core::mem::size_of::<QpAttr>() == 64);
    assert!(core::mem::size_of::<RemoteAddrSeg>() == DS);
    assert!(core::mem::size_of::<AtomicSeg>() == DS);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wqe_shape_round_trips() {
        let sges = [
            Sge {
                addr: 0x1000,
                length: 100,
                lkey: mkey(1, 7),
            },
            Sge {
                addr: 0x9000,
                length: 4,
                lkey: mkey(2, 0),
            },
        ];
        let mut buf = [0u8; super::super::MAX_WQE_BYTES];
        let cases = [
            RdmaWqe {
                opcode: super::super::WQE_OP_SEND,
                signal: true,
                solicited: true,
                fence: false,
                imm: 0,
                remote: None,
                atomic: None,
                data: WqeData::Gather(&sges),
            },
            RdmaWqe {
                opcode: WQE_OP_RDMA_WRITE_IMM,
                signal: false,
                solicited: false,
                fence: true,
                imm: 0xfeed,
                remote: Some((0xdead_0000, 0x1234)),
                atomic: None,
                data: WqeData::Inline(b"hello, inline world"),
            },
            RdmaWqe {
                opcode: WQE_OP_ATOMIC_CS,
                signal: true,
                solicited: false,
                fence: false,
                imm: 0,
                remote: Some((0x40, 0x99)),
                atomic: Some((5, 6)),
                data: WqeData::Gather(&sges[..1]),
            },
        ];
        for w in cases {
            let n = w.encode(0x105, 9, &mut buf).unwrap();
            assert_eq!(n, w.ds_count() * DS);
            let v = RdmaWqeView::new_checked(&buf).unwrap();
            assert_eq!(v.ctrl.opcode, w.opcode);
            assert_eq!((v.ctrl.sqn.get(), v.ctrl.wqe_index.get()), (0x105, 9));
            assert_eq!(v.ctrl.completion_requested(), w.signal);
            assert_eq!(v.ctrl.fm_ce_se & WQE_SOLICITED != 0, w.solicited);
            assert_eq!(v.ctrl.fm_ce_se & WQE_FENCE != 0, w.fence);
            assert_eq!(v.ctrl.imm.get(), w.imm);
            assert_eq!(v.remote.map(|r| (r.addr.get(), r.rkey.get())), w.remote);
            assert_eq!(
                v.atomic.map(|a| (a.swap_add.get(), a.compare.get())),
                w.atomic
            );
            match (w.data, v.data()) {
                (WqeData::Gather(g), WqeDataView::Gather(_)) => {
                    assert_eq!(v.sges().collect::<Vec<_>>(), g)
                }
                (WqeData::Inline(d), WqeDataView::Inline(got)) => assert_eq!(got, d),
                other => panic!("data mismatch {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_wqes_are_named() {
        let mut buf = [0u8; 128];
        assert_eq!(
            RdmaWqeView::new_checked(&buf[..8]).err(),
            Some(RdmaWqeFormatError::Truncated)
        );
        buf[0] = 0x42;
        buf[4] = 1;
        assert_eq!(
            RdmaWqeView::new_checked(&buf).err(),
            Some(RdmaWqeFormatError::Opcode)
        );
        buf[0] = WQE_OP_RDMA_READ;
        assert_eq!(
            RdmaWqeView::new_checked(&buf).err(),
            Some(RdmaWqeFormatError::MissingSegment)
        );
        // An inline segment claiming more bytes than the WQE has.
        buf[0] = super::super::WQE_OP_SEND;
        buf[4] = 2;
        buf[16..20].copy_from_slice(&(INLINE_SEG | 100).to_le_bytes());
        assert_eq!(
            RdmaWqeView::new_checked(&buf).err(),
            Some(RdmaWqeFormatError::Inline)
        );
    }

    #[test]
    fn receive_wqes_end_at_the_marker_or_the_stride() {
        let sges = [Sge {
            addr: 1,
            length: 2,
            lkey: 0x300,
        }];
        let mut stride = [0xaau8; 64];
        assert!(encode_recv_wqe(&sges, &mut stride));
        assert_eq!(recv_sges(&stride).collect::<Vec<_>>(), sges);
        let mut one = [0u8; 16];
        assert!(encode_recv_wqe(&sges, &mut one));
        assert_eq!(recv_sges(&one).count(), 1);
        assert!(!encode_recv_wqe(&[sges[0]; 2], &mut one));
        assert_eq!(mtt_pages(0x1fff, 2, 12), 2);
        assert_eq!(mtt_pages(0x1000, 4096, 12), 1);
        assert_eq!(mtt_pages(0, 0, 12), 0);
        assert_eq!(mtu_bytes(3), Some(1024));
        assert_eq!(mtu_bytes(6), None);
        for code in 1..=5 {
            assert_eq!(mtu_code(mtu_bytes(code).unwrap()), Some(code));
        }
        assert_eq!(mtu_code(1500), None);
    }

    /// IBA §10.9.3: same non-zero partition, at least one full member.
    #[test]
    fn pkey_matching_follows_the_membership_rules() {
        for (packet, entry, want) in [
            (0xffff, 0xffff, true),
            (0x7fff, 0xffff, true),
            (0xffff, 0x7fff, true),
            (0x7fff, 0x7fff, false),
            (0x8123, 0x0123, true),
            (0x0123, 0x0123, false),
            (0x1234, 0xffff, false),
            (0x8000, 0x8000, false),
            (0x0000, 0x8000, false),
            (0x8000, 0xffff, false),
        ] {
            assert_eq!(
                pkey_matches(packet, entry),
                want,
                "{packet:#06x} vs {entry:#06x}"
            );
        }
    }
}
