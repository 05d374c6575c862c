//! A verbs API in the shape of rdma-core's libibverbs, over the soft NIC's RoCEv2 transport:
//! open a device, query its port and GID table (RoCEv2 GIDs from the port's IP addresses),
//! protection domains, memory regions, completion queues with completion channels, RC queue
//! pairs (create, modify through the IBA state machine, query), shared receive queues, and the
//! data path — `post_send`, `post_recv`, `post_srq_recv`, `poll_cq`, `req_notify_cq`.
//!
//! Control calls go through [`Context`] (`&mut`: one command mailbox per function); the data
//! path works on the objects themselves and never takes a lock. It runs over every transport
//! the driver has (in-process, vfio-user, vfio-pci in a guest).
//!
//! The device's IPv4 addresses are answered for ARP by [`neighbor`], which also resolves a
//! peer's MAC address — what a host stack does for a RoCE NIC.
//!
//! Left out: UD and XRC QPs, memory windows, the extended verbs (ibv_wr_*, CQ ex), address
//! handles beyond the QP's address vector, multicast.

pub mod exchange;
pub mod neighbor;
pub mod star;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fld_abi::nic::*;
use fld_abi::wire::roce::{gid_is_ipv4, ipv4_gid};
use fld_driver::nic::{CompletionQueue, EventQueue, NicDriver};
use fld_driver::rdma::{MemoryRegion, QpCaps, RcQueuePair, SharedReceiveQueue};
use fld_driver::{DmaBuffer, DriverError, PciDevice};

pub use fld_abi::nic::{access, qp_attr, QpAttr, QpState, Sge};

/// A 16-byte GID. RoCEv2 GIDs are IPv6 addresses, IPv4 ones mapped (`::ffff:a.b.c.d`).
pub type Gid = [u8; 16];

/// The MSI-X vector completion events arrive on.
const EVENT_VECTOR: u16 = 0;

/// ibv_port_attr, as much of it as RoCE uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Always active: the uplink is up.
    pub active: bool,
    /// Path-MTU codes (1 = 256 … 5 = 4096).
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub gid_tbl_len: u16,
    pub pkey_tbl_len: u16,
    /// RoCE has no LIDs.
    pub lid: u16,
    pub link_layer_ethernet: bool,
}

/// ibv_wc_status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocProtErr = 4,
    WrFlushErr = 5,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    GeneralErr = 21,
}

impl WcStatus {
    fn from_nic(s: u8) -> Self {
        match s {
            rdma_status::SUCCESS => WcStatus::Success,
            rdma_status::LOCAL_LENGTH => WcStatus::LocLenErr,
            rdma_status::LOCAL_QP_OPERATION => WcStatus::LocQpOpErr,
            rdma_status::LOCAL_PROTECTION => WcStatus::LocProtErr,
            rdma_status::WR_FLUSH => WcStatus::WrFlushErr,
            rdma_status::BAD_RESPONSE => WcStatus::BadRespErr,
            rdma_status::LOCAL_ACCESS => WcStatus::LocAccessErr,
            rdma_status::REMOTE_INVALID_REQUEST => WcStatus::RemInvReqErr,
            rdma_status::REMOTE_ACCESS => WcStatus::RemAccessErr,
            rdma_status::REMOTE_OPERATION => WcStatus::RemOpErr,
            rdma_status::RETRY_EXCEEDED => WcStatus::RetryExcErr,
            rdma_status::RNR_RETRY_EXCEEDED => WcStatus::RnrRetryExcErr,
            _ => WcStatus::GeneralErr,
        }
    }
}

/// ibv_wc_opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    Recv,
    RecvRdmaWithImm,
}

/// A work completion (ibv_wc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    /// Immediate data of a SEND/WRITE with immediate (`wc_flags & IBV_WC_WITH_IMM`).
    pub imm_data: Option<u32>,
    pub qp_num: u32,
    pub solicited: bool,
}

impl Wc {
    /// A blank entry, to fill arrays that `Cq::poll` writes into.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm_data: None,
        qp_num: 0,
        solicited: false,
    };
}

/// ibv_wr_opcode and its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOpcode {
    Send,
    SendWithImm(u32),
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    AtomicCmpAndSwp {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    AtomicFetchAndAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
}

/// A send work request (ibv_send_wr).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub sg_list: &'a [Sge],
    /// IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SEND_FENCE, IBV_SEND_INLINE.
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
    pub inline: bool,
}

impl<'a> SendWr<'a> {
    pub fn new(wr_id: u64, opcode: WrOpcode, sg_list: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            opcode,
            sg_list,
            signaled: true,
            solicited: false,
            fence: false,
            inline: false,
        }
    }
}

/// Errors of the verbs, in errno's spirit.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The send or receive queue is full (ENOMEM of ibv_post_*).
    #[error("work queue full")]
    QueueFull,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("timed out")]
    Timeout,
}

type Result<T> = std::result::Result<T, VerbsError>;

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    pub handle: u32,
}

/// A registered memory region with its memory (ibv_reg_mr over a buffer the library
/// allocated in DMA-able memory, as `ibv_alloc_buf` would).
pub struct Mr {
    region: MemoryRegion,
    buf: DmaBuffer,
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        self.region.key
    }
    pub fn rkey(&self) -> u32 {
        self.region.key
    }
    /// The region's virtual address (what peers use in RDMA operations).
    pub fn addr(&self) -> u64 {
        self.region.addr
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// An SGE of `len` bytes at `offset` into the region.
    pub fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr() + offset as u64,
            length: len as u32,
            lkey: self.lkey(),
        }
    }
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.buf.write(offset, data)
    }
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.buf.read(offset, out)
    }
}

/// The wr_ids of a QP's posted work and how far its send ring has completed.
struct WrIds {
    send: Box<[AtomicU64]>,
    /// Basic blocks of the send WQE at each slot (unsignalled WQEs complete with the next
    /// signalled one).
    send_blocks: Box<[AtomicU32]>,
    /// Send basic blocks the CQ has seen complete.
    send_done: AtomicU32,
    recv: Box<[AtomicU64]>,
}

impl WrIds {
    fn new(send_slots: usize, recv_slots: usize) -> Arc<Self> {
        Arc::new(WrIds {
            send: (0..send_slots).map(|_| AtomicU64::new(0)).collect(),
            send_blocks: (0..send_slots).map(|_| AtomicU32::new(1)).collect(),
            send_done: AtomicU32::new(0),
            recv: (0..recv_slots.max(1)).map(|_| AtomicU64::new(0)).collect(),
        })
    }
}

/// What a CQ knows of a QP completing into it.
struct Attached {
    qpn: u32,
    ids: Arc<WrIds>,
    srq: Option<Arc<WrIds>>,
    /// A StaR server QP: the element sequence number of its next completion (a completion the
    /// client had to send twice carries an older one and is dropped).
    star_next: Option<Arc<AtomicU32>>,
}

/// A completion channel: where a CQ's events are waited for (ibv_comp_channel).
pub struct CompChannel {
    _private: (),
}

/// A completion queue.
pub struct Cq {
    cq: CompletionQueue,
    attached: Mutex<Vec<Attached>>,
    dev: Arc<dyn PciDevice>,
    channel: bool,
    /// Entries consumed since the consumer counter was last reported.
    unreported: u32,
}

impl Cq {
    pub fn cqn(&self) -> u32 {
        self.cq.cqn
    }

    /// Polls up to `wc.len()` completions (ibv_poll_cq); returns how many were written.
    pub fn poll(&mut self, wc: &mut [Wc]) -> usize {
        let mut n = 0;
        while n < wc.len() {
            let Some(c) = self.cq.poll() else {
                if n == 0 {
                    // An in-process card runs when its application waits on it.
                    self.dev.run_device();
                    match self.cq.poll() {
                        Some(c) => {
                            if let Some(w) = self.translate(&c) {
                                wc[n] = w;
                                n += 1;
                            }
                            self.unreported += 1;
                            continue;
                        }
                        None => break,
                    }
                }
                break;
            };
            self.unreported += 1;
            if let Some(w) = self.translate(&c) {
                wc[n] = w;
                n += 1;
            }
        }
        if self.unreported > 0 && (n == 0 || self.unreported >= self.cq.size() / 4) {
            self.cq.update_ci();
            self.unreported = 0;
        }
        n
    }

    fn translate(&mut self, c: &Cqe) -> Option<Wc> {
        if c.flags & cqe_flags::QP == 0 {
            return None;
        }
        let qpn = c.qn.get();
        let attached = self.attached.get_mut().unwrap_or_else(|e| e.into_inner());
        let a = attached.iter().find(|a| a.qpn == qpn)?;
        if let Some(next) = &a.star_next {
            let seq = c.metadata.get();
            if seq != next.load(Ordering::Relaxed) {
                return None;
            }
            next.store(seq.wrapping_add(1), Ordering::Relaxed);
        }
        let status = WcStatus::from_nic(c.syndrome);
        let counter = c.wqe_counter.get() as usize;
        let imm = match c.opcode() {
            CQE_RESP_SEND_IMM | CQE_RESP_WRITE_IMM => Some(c.imm.get()),
            _ => None,
        };
        let is_send = c.is_send();
        let (wr_id, opcode) = if is_send {
            let slot = counter % a.ids.send.len();
            let blocks = a.ids.send_blocks[slot].load(Ordering::Relaxed);
            a.ids
                .send_done
                .store((counter as u32).wrapping_add(blocks), Ordering::Release);
            let op = match c.wqe_opcode {
                WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM => WcOpcode::RdmaWrite,
                WQE_OP_RDMA_READ => WcOpcode::RdmaRead,
                WQE_OP_ATOMIC_CS => WcOpcode::CompSwap,
                WQE_OP_ATOMIC_FA => WcOpcode::FetchAdd,
                _ => WcOpcode::Send,
            };
            (a.ids.send[slot].load(Ordering::Relaxed), op)
        } else {
            let ids = match (c.flags & cqe_flags::SRQ != 0, &a.srq) {
                (true, Some(s)) => s,
                _ => &a.ids,
            };
            let op = if c.opcode() == CQE_RESP_WRITE_IMM {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            (
                ids.recv[counter % ids.recv.len()].load(Ordering::Relaxed),
                op,
            )
        };
        Some(Wc {
            wr_id,
            status,
            opcode,
            byte_len: c.byte_count.get(),
            imm_data: imm,
            qp_num: qpn,
            solicited: c.flags & cqe_flags::SOLICITED != 0,
        })
    }

    /// Asks for one event on the CQ's channel at the next completion (ibv_req_notify_cq).
    pub fn req_notify(&mut self) -> Result<()> {
        if !self.channel {
            return Err(VerbsError::Invalid("the CQ has no completion channel"));
        }
        self.cq.arm();
        Ok(())
    }
}

/// A shared receive queue.
pub struct Srq {
    srq: SharedReceiveQueue,
    ids: Arc<WrIds>,
    /// WQEs posted and WQEs the CQs reported consumed are the device's business; the library
    /// bounds posting by the ring only.
    max_sge: u32,
}

impl Srq {
    pub fn srqn(&self) -> u32 {
        self.srq.srqn
    }

    /// Posts receive work requests (ibv_post_srq_recv).
    pub fn post_recv(&mut self, wrs: &[(u64, &[Sge])]) -> Result<()> {
        for (wr_id, sges) in wrs {
            if sges.len() > self.max_sge as usize {
                return Err(VerbsError::Invalid("more SGEs than the SRQ takes"));
            }
            let c = self.srq.post_recv(sges)?;
            self.ids.recv[c as usize % self.ids.recv.len()].store(*wr_id, Ordering::Relaxed);
        }
        self.srq.ring_doorbell();
        Ok(())
    }
}

/// ibv_qp_cap.
#[derive(Clone, Copy, Debug)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// A reliable-connection queue pair.
pub struct Qp {
    qp: RcQueuePair,
    ids: Arc<WrIds>,
    cap: QpCap,
    sq_sig_all: bool,
    has_srq: bool,
}

impl Qp {
    pub fn qp_num(&self) -> u32 {
        self.qp.qpn
    }

    /// Posts send work requests (ibv_post_send), ringing the doorbell once for all of them.
    /// On error nothing of the failing request is posted (the earlier ones are).
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut posted = 0;
        let mut result = Ok(());
        for wr in wrs {
            if let Err(e) = self.post_one(wr) {
                result = Err(e);
                break;
            }
            posted += 1;
        }
        if posted > 0 {
            self.qp.ring_send_doorbell();
        }
        result
    }

    fn post_one(&mut self, wr: &SendWr<'_>) -> Result<()> {
        if wr.sg_list.len() > self.cap.max_send_sge as usize && !wr.inline {
            return Err(VerbsError::Invalid("more SGEs than the QP takes"));
        }
        let mut inline = [0u8; MAX_INLINE_DATA];
        let data = if wr.inline {
            let total: usize = wr.sg_list.iter().map(|s| s.length as usize).sum();
            if total > self.cap.max_inline_data as usize || total > MAX_INLINE_DATA {
                return Err(VerbsError::Invalid("inline data beyond max_inline_data"));
            }
            // Inline data is what the SGEs point at, copied now (the buffers may be reused at
            // once, as IBV_SEND_INLINE allows).
            return self.post_inline(wr, total, &mut inline);
        } else {
            WqeData::Gather(wr.sg_list)
        };
        self.post_wqe(wr, data)
    }

    fn post_inline(&mut self, wr: &SendWr<'_>, total: usize, buf: &mut [u8]) -> Result<()> {
        // SGE addresses are this process's addresses of registered memory.
        let mut at = 0;
        for s in wr.sg_list {
            let n = s.length as usize;
            // SAFETY: an SGE of a registered region names memory of this process that the
            // region's buffer keeps mapped; the copy reads exactly its bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(s.addr as *const u8, buf[at..].as_mut_ptr(), n);
            }
            at += n;
        }
        let data = WqeData::Inline(&buf[..total]);
        self.post_wqe(wr, data)
    }

    fn post_wqe(&mut self, wr: &SendWr<'_>, data: WqeData<'_>) -> Result<()> {
        let wqe = rdma_wqe(wr, data, self.sq_sig_all);
        let blocks = wqebbs(wqe.ds_count());
        let ring = self.qp.send_ring_size();
        let used = self
            .qp
            .send_producer()
            .wrapping_sub(self.ids.send_done.load(Ordering::Acquire))
            & 0xffff;
        if used + blocks > ring {
            return Err(VerbsError::QueueFull);
        }
        let index = self.qp.post_send(&wqe)?;
        let slot = index as usize % self.ids.send.len();
        self.ids.send[slot].store(wr.wr_id, Ordering::Relaxed);
        self.ids.send_blocks[slot].store(blocks, Ordering::Relaxed);
        Ok(())
    }
}

/// The WQE of a send work request whose data is `data`.
fn rdma_wqe<'a>(wr: &SendWr<'_>, data: WqeData<'a>, sig_all: bool) -> RdmaWqe<'a> {
    {
        let (opcode, imm, remote, atomic) = match wr.opcode {
            WrOpcode::Send => (WQE_OP_SEND, 0, None, None),
            WrOpcode::SendWithImm(i) => (WQE_OP_SEND_IMM, i, None, None),
            WrOpcode::RdmaWrite { remote_addr, rkey } => {
                (WQE_OP_RDMA_WRITE, 0, Some((remote_addr, rkey)), None)
            }
            WrOpcode::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => (WQE_OP_RDMA_WRITE_IMM, imm, Some((remote_addr, rkey)), None),
            WrOpcode::RdmaRead { remote_addr, rkey } => {
                (WQE_OP_RDMA_READ, 0, Some((remote_addr, rkey)), None)
            }
            WrOpcode::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => (
                WQE_OP_ATOMIC_CS,
                0,
                Some((remote_addr, rkey)),
                Some((swap, compare)),
            ),
            WrOpcode::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add,
            } => (
                WQE_OP_ATOMIC_FA,
                0,
                Some((remote_addr, rkey)),
                Some((add, 0)),
            ),
        };
        RdmaWqe {
            opcode,
            signal: wr.signaled || sig_all,
            solicited: wr.solicited,
            fence: wr.fence,
            imm,
            remote,
            atomic,
            data,
        }
    }
}

impl Qp {
    /// Posts receive work requests (ibv_post_recv).
    pub fn post_recv(&mut self, wrs: &[(u64, &[Sge])]) -> Result<()> {
        if self.has_srq {
            return Err(VerbsError::Invalid("the QP receives from its SRQ"));
        }
        for (wr_id, sges) in wrs {
            if sges.len() > self.cap.max_recv_sge as usize {
                return Err(VerbsError::Invalid("more SGEs than the QP takes"));
            }
            let c = self.qp.post_recv(sges)?;
            self.ids.recv[c as usize % self.ids.recv.len()].store(*wr_id, Ordering::Relaxed);
        }
        self.qp.ring_recv_doorbell();
        Ok(())
    }
}

/// What an RC connection needs beyond the local QP: the peer's QPN and address, the PSNs both
/// ends start at, and the transport's limits and timers — what applications exchange or choose
/// before [`Context::connect_rc`]. [`RcConnection::new`] takes the peer and fills in common
/// values (1024-byte path MTU, 16 READs/atomics each way, ACK timeout 14 = 67 ms, 7 retries,
/// RNR retries without end, 12 = 0.64 ms minimum RNR timer).
#[derive(Clone, Copy, Debug)]
pub struct RcConnection {
    pub dest_qpn: u32,
    pub dgid: [u8; 16],
    /// The peer's (or the next hop's) MAC address; zero: resolve by ARP.
    pub dmac: [u8; 6],
    /// The local GID table entry to send from.
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits); 0 lets the NIC derive the UDP source port from the QPNs.
    pub flow_label: u32,
    /// An IBA path-MTU code (1 = 256 … 5 = 4096 bytes).
    pub path_mtu: u8,
    /// The first PSN the peer sends (RTR) and the first this end sends (RTS).
    pub rq_psn: u32,
    pub sq_psn: u32,
    /// READs/atomics this end keeps outstanding, and accepts outstanding from the peer.
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout.
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
}

impl RcConnection {
    pub fn new(dest_qpn: u32, dgid: [u8; 16]) -> Self {
        RcConnection {
            dest_qpn,
            dgid,
            dmac: [0; 6],
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            path_mtu: DEFAULT_PATH_MTU,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: MAX_RD_ATOMIC,
            max_dest_rd_atomic: MAX_RD_ATOMIC,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: RNR_RETRY_INFINITE,
        }
    }

    /// A connection to QP `dest_qpn` along the path `ah` resolved.
    pub fn via(dest_qpn: u32, ah: &Ah) -> Self {
        RcConnection {
            dmac: ah.dmac,
            sgid_index: ah.sgid_index,
            hop_limit: ah.hop_limit,
            traffic_class: ah.traffic_class,
            flow_label: ah.flow_label,
            ..RcConnection::new(dest_qpn, ah.dgid)
        }
    }
}

/// ibv_ah_attr for RoCE: where a peer is (its GID) and how to get there from this port.
#[derive(Clone, Copy, Debug, Default)]
pub struct AhAttr {
    pub dgid: Gid,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

/// ibv_ah: an address vector with the peer's (or next hop's) MAC address resolved, as a RoCE
/// provider resolves it when the AH is created. An RC QP takes it through
/// [`RcConnection::via`]; there is no UD transport to send on it by itself.
#[derive(Clone, Copy, Debug)]
pub struct Ah {
    pub dgid: Gid,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub dmac: [u8; 6],
}

/// ibv_qp_init_attr.
pub struct QpInitAttr<'a> {
    pub send_cq: &'a Cq,
    pub recv_cq: &'a Cq,
    pub srq: Option<&'a Srq>,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    /// The connection tolerates reordering (multipath): its packets may arrive out of order
    /// and are reordered by the card (both ends set it; mlx5's out-of-order data placement).
    /// Refused on a card whose QUERY_CAPS `receiver` is go-back-N.
    pub out_of_order: bool,
}

/// An open device (ibv_context): one NIC function.
pub struct Context {
    nic: NicDriver,
    eq: EventQueue,
    gids: [Option<Gid>; ROCE_ADDRESS_ENTRIES as usize],
    neighbors: neighbor::Neighbors,
    /// StaR: the servers' regions this function holds, by (PD, server key), and the security
    /// module entries it installed — each once, however many connections need it.
    star: star::StarState,
}

impl Context {
    /// Opens NIC function `dev` (ibv_open_device): probes it and creates the event queue its
    /// completion channels use.
    pub fn open(dev: Arc<dyn PciDevice>) -> Result<Self> {
        let mut nic = NicDriver::probe(dev.clone())?;
        dev.enable_msix(1)?;
        let eq = nic.create_eq(10, EVENT_VECTOR)?;
        Ok(Context {
            nic,
            eq,
            gids: [None; ROCE_ADDRESS_ENTRIES as usize],
            neighbors: neighbor::Neighbors::default(),
            star: Default::default(),
        })
    }

    pub fn driver(&mut self) -> &mut NicDriver {
        &mut self.nic
    }

    pub fn mac(&self) -> [u8; 6] {
        self.nic.mac()
    }

    /// Whether the card reorders packets of out-of-order QPs ([`QpInitAttr::out_of_order`]):
    /// QUERY_CAPS names a reorder unit.
    pub fn reorders(&self) -> bool {
        self.nic.caps().receiver != fld_abi::nic::receiver::GO_BACK_N
    }

    /// ibv_query_port (port 1, the only one).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(VerbsError::Invalid("the device has port 1"));
        }
        Ok(PortAttr {
            active: true,
            max_mtu: 5,
            active_mtu: 5,
            gid_tbl_len: ROCE_ADDRESS_ENTRIES,
            pkey_tbl_len: PKEY_TABLE_ENTRIES,
            lid: 0,
            link_layer_ethernet: true,
        })
    }

    /// ibv_query_gid.
    pub fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
        self.query_port(port)?;
        self.gids
            .get(index)
            .copied()
            .flatten()
            .ok_or(VerbsError::Invalid("no GID at this index"))
    }

    /// The port's counters by name (`--stats`, `--json`): the RoCE receive path's totals and
    /// drops by reason — ICRC, unknown QP, P_Key, malformed, QP not ready, wrong source — under
    /// rxe's and mlx5's hw_counter names, then the Ethernet port's (its steering and buffer
    /// drops).
    pub fn port_counters(&mut self) -> Result<Vec<(&'static str, u64)>> {
        let rdma = self.nic.query_rdma_counters()?.named();
        let eth = self.nic.query_vport(self.nic.vport())?.named();
        Ok(rdma.into_iter().chain(eth).collect())
    }

    /// A QP's transport counters by name: retransmissions, timeouts, NAKs sent and received,
    /// duplicates, packets dropped without an answer (PSN out of window, …).
    pub fn qp_counters(&mut self, qp: &Qp) -> Result<Vec<(&'static str, u64)>> {
        Ok(self.query_qp_counters(qp)?.named().to_vec())
    }

    /// ibv_query_pkey: entry `index` of the port's P_Key table.
    pub fn query_pkey(&mut self, port: u8, index: u16) -> Result<u16> {
        self.query_port(port)?;
        Ok(self.nic.query_pkey(index)?)
    }

    /// Writes entry `index` of the port's P_Key table — on InfiniBand the subnet manager's
    /// job; on RoCE the port's owner's (IBA §10.9.2). A QP whose P_Key index names the entry
    /// sends with the new P_Key and takes only packets that match it (IBA §10.9.3).
    pub fn set_pkey(&mut self, index: u16, pkey: u16) -> Result<()> {
        Ok(self.nic.set_pkey(index, pkey)?)
    }

    /// Gives the port an IP address: its RoCEv2 GID takes the first free index (returned),
    /// and ARP requests for an IPv4 address are answered from now on.
    pub fn add_ip(&mut self, ip: std::net::IpAddr) -> Result<usize> {
        let gid = match ip {
            std::net::IpAddr::V4(v4) => ipv4_gid(v4.octets()),
            std::net::IpAddr::V6(v6) => v6.octets(),
        };
        let index = self
            .gids
            .iter()
            .position(Option::is_none)
            .ok_or(VerbsError::Invalid("the GID table is full"))?;
        let mac = self.nic.mac();
        self.nic.set_roce_address(index as u16, Some((gid, mac)))?;
        self.gids[index] = Some(gid);
        if let std::net::IpAddr::V4(v4) = ip {
            self.neighbors.add_own(v4.octets());
        }
        Ok(index)
    }

    pub fn alloc_pd(&mut self) -> Result<Pd> {
        Ok(Pd {
            handle: self.nic.create_pd()?,
        })
    }

    pub fn dealloc_pd(&mut self, pd: Pd) -> Result<()> {
        Ok(self.nic.destroy_pd(pd.handle)?)
    }

    /// Allocates `len` bytes of DMA-able memory and registers them with `access`.
    pub fn reg_mr(&mut self, pd: &Pd, len: usize, access: u32) -> Result<Mr> {
        let buf = self.nic.device().dma_alloc(len.max(1))?;
        let region = self.nic.register_mr(pd.handle, &buf, access)?;
        Ok(Mr { region, buf })
    }

    pub fn dereg_mr(&mut self, mr: Mr) -> Result<()> {
        Ok(self.nic.deregister_mr(mr.region)?)
    }

    pub fn create_comp_channel(&mut self) -> CompChannel {
        CompChannel { _private: () }
    }

    /// A CQ of at least `cqe` entries, raising events on `channel` when armed.
    pub fn create_cq(&mut self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        let log = cqe.max(2).next_power_of_two().trailing_zeros() as u8;
        let cq = self.nic.create_cq(&self.eq, log)?;
        Ok(Cq {
            cq,
            attached: Mutex::new(Vec::new()),
            dev: self.nic.device().clone(),
            channel: channel.is_some(),
            unreported: 0,
        })
    }

    pub fn destroy_cq(&mut self, cq: Cq) -> Result<()> {
        Ok(self.nic.destroy_completion_queue(cq.cq)?)
    }

    /// Waits for the next event on `channel` (ibv_get_cq_event): the number of the CQ it is
    /// for, within `timeout`.
    pub fn get_cq_event(
        &mut self,
        _channel: &CompChannel,
        timeout: std::time::Duration,
    ) -> Result<u32> {
        let start = std::time::Instant::now();
        loop {
            while let Some(e) = self.eq.poll() {
                if e.event_type == EQE_COMPLETION {
                    self.eq.arm();
                    return Ok(e.data.get());
                }
            }
            self.eq.arm();
            let dev = self.nic.device();
            dev.run_device();
            if dev.take_interrupts(EVENT_VECTOR) == 0 {
                if start.elapsed() > timeout {
                    return Err(VerbsError::Timeout);
                }
                std::thread::yield_now();
            }
        }
    }

    pub fn create_srq(&mut self, pd: &Pd, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let log = max_wr.max(2).next_power_of_two().trailing_zeros() as u8;
        let srq = self.nic.create_srq(pd.handle, log, max_sge)?;
        let ids = WrIds::new(1, srq.size() as usize);
        Ok(Srq { srq, ids, max_sge })
    }

    pub fn destroy_srq(&mut self, srq: Srq) -> Result<()> {
        Ok(self.nic.destroy_srq(srq.srq)?)
    }

    /// An RC QP in RESET (ibv_create_qp).
    pub fn create_qp(&mut self, pd: &Pd, init: &QpInitAttr<'_>) -> Result<Qp> {
        let cap = init.cap;
        if cap.max_send_sge as usize > MAX_SEND_SGE
            || cap.max_inline_data as usize > MAX_INLINE_DATA
        {
            return Err(VerbsError::Invalid("beyond the device's send limits"));
        }
        // Each send WR takes up to one block per 4 segments: control, remote, atomic and the
        // gather entries (or the inline data).
        let per_wr = wqebbs(
            3 + (cap.max_send_sge as usize).max((cap.max_inline_data as usize + 4).div_ceil(16)),
        );
        let blocks = (cap.max_send_wr.max(1) * per_wr).next_power_of_two();
        let caps = QpCaps {
            log_sq_size: blocks.trailing_zeros() as u8,
            log_rq_size: cap.max_recv_wr.max(1).next_power_of_two().trailing_zeros() as u8,
            max_recv_sge: cap.max_recv_sge.max(1),
            signal_all: init.sq_sig_all,
            out_of_order: init.out_of_order,
        };
        let qp = self.nic.create_qp(
            pd.handle,
            &init.send_cq.cq,
            &init.recv_cq.cq,
            init.srq.map(|s| &s.srq),
            caps,
        )?;
        let ids = WrIds::new(blocks as usize, qp.recv_ring_size() as usize);
        for cq in [init.send_cq, init.recv_cq] {
            let mut a = cq.attached.lock().unwrap_or_else(|e| e.into_inner());
            if !a.iter().any(|x| x.qpn == qp.qpn) {
                a.push(Attached {
                    qpn: qp.qpn,
                    ids: ids.clone(),
                    srq: init.srq.map(|s| s.ids.clone()),
                    star_next: None,
                });
            }
        }
        Ok(Qp {
            qp,
            ids,
            cap,
            sq_sig_all: init.sq_sig_all,
            has_srq: init.srq.is_some(),
        })
    }

    /// ibv_modify_qp: `attr` fields named by `mask` ([`qp_attr`] bits). The address vector's
    /// destination MAC is found here when `mask` has AV and `attr.dmac` is zero: the peer's
    /// GID is resolved by ARP (IPv4) through this function's port.
    pub fn modify_qp(&mut self, qp: &Qp, attr: &QpAttr, mask: u32) -> Result<()> {
        self.modify_qpn(qp.qp.qpn, attr, mask)
    }

    /// [`Context::modify_qp`] for a QP of this function that software does not post to (an
    /// FLD-R queue pair: its rings are the accelerator's).
    pub fn modify_qpn(&mut self, qpn: u32, attr: &QpAttr, mask: u32) -> Result<()> {
        let mut a = *attr;
        if mask & qp_attr::AV != 0 && a.dmac == [0; 6] {
            if !gid_is_ipv4(&a.dgid) {
                return Err(VerbsError::Invalid("IPv6 neighbours need a MAC address"));
            }
            let ip = [a.dgid[12], a.dgid[13], a.dgid[14], a.dgid[15]];
            a.dmac = self.resolve(ip, std::time::Duration::from_secs(3))?;
        }
        Ok(self.nic.modify_qp(qpn, mask, &a)?)
    }

    /// RESET → INIT: the QP on port 1, P_Key index 0, granting `remote_access` ([`access`]
    /// REMOTE_* bits) to its peer — the attributes INIT requires (IBA 11.2.5, Table 91).
    pub fn init_rc(&mut self, qp: &Qp, remote_access: u32) -> Result<()> {
        self.init_rc_qpn(qp.qp.qpn, remote_access)
    }

    /// [`Context::init_rc`] in the partition of P_Key table entry `pkey_index`.
    pub fn init_rc_in_partition(
        &mut self,
        qp: &Qp,
        remote_access: u32,
        pkey_index: u16,
    ) -> Result<()> {
        self.init_qpn(qp.qp.qpn, remote_access, pkey_index)
    }

    /// [`Context::init_rc`] by QP number.
    pub fn init_rc_qpn(&mut self, qpn: u32, remote_access: u32) -> Result<()> {
        self.init_qpn(qpn, remote_access, 0)
    }

    fn init_qpn(&mut self, qpn: u32, remote_access: u32, pkey_index: u16) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Init as u8,
            port: 1,
            ..Default::default()
        };
        a.pkey_index.set(pkey_index);
        a.access_flags.set(remote_access);
        self.modify_qpn(
            qpn,
            &a,
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
        )
    }

    /// INIT → RTR → RTS towards the peer `c` describes, with the attributes each transition
    /// requires (IBA Table 91): the path and receive side at RTR, the send side at RTS. A zero
    /// `c.dmac` is resolved by ARP ([`Context::modify_qp`]).
    pub fn connect_rc(&mut self, qp: &Qp, c: &RcConnection) -> Result<()> {
        self.connect_rc_qpn(qp.qp.qpn, c)
    }

    /// [`Context::connect_rc`] by QP number.
    pub fn connect_rc_qpn(&mut self, qpn: u32, c: &RcConnection) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Rtr as u8,
            path_mtu: c.path_mtu,
            max_dest_rd_atomic: c.max_dest_rd_atomic,
            min_rnr_timer: c.min_rnr_timer,
            hop_limit: c.hop_limit,
            sgid_index: c.sgid_index,
            traffic_class: c.traffic_class,
            dgid: c.dgid,
            dmac: c.dmac,
            ..Default::default()
        };
        a.flow_label.set(c.flow_label);
        a.dest_qpn.set(c.dest_qpn);
        a.rq_psn.set(c.rq_psn);
        self.modify_qpn(
            qpn,
            &a,
            qp_attr::STATE
                | qp_attr::AV
                | qp_attr::PATH_MTU
                | qp_attr::DEST_QPN
                | qp_attr::RQ_PSN
                | qp_attr::MAX_DEST_RD_ATOMIC
                | qp_attr::MIN_RNR_TIMER,
        )?;
        a.qp_state = QpState::Rts as u8;
        a.timeout = c.timeout;
        a.retry_cnt = c.retry_cnt;
        a.rnr_retry = c.rnr_retry;
        a.max_rd_atomic = c.max_rd_atomic;
        a.sq_psn.set(c.sq_psn);
        self.modify_qpn(
            qpn,
            &a,
            qp_attr::STATE
                | qp_attr::TIMEOUT
                | qp_attr::RETRY_CNT
                | qp_attr::RNR_RETRY
                | qp_attr::SQ_PSN
                | qp_attr::MAX_QP_RD_ATOMIC,
        )
    }

    /// ibv_create_ah: `attr` with the MAC address of its GID's IPv4 address found by ARP (or
    /// taken from the neighbour entries); an IPv6 GID needs a static neighbour the caller put
    /// in the resulting `dmac` itself.
    pub fn create_ah(&mut self, attr: &AhAttr) -> Result<Ah> {
        if self.query_gid(1, usize::from(attr.sgid_index)).is_err() {
            return Err(VerbsError::Invalid("no such source GID"));
        }
        let dmac = if gid_is_ipv4(&attr.dgid) {
            let g = &attr.dgid;
            self.resolve(
                [g[12], g[13], g[14], g[15]],
                std::time::Duration::from_secs(3),
            )?
        } else {
            return Err(VerbsError::Invalid("IPv6 neighbours need a MAC address"));
        };
        Ok(Ah {
            dgid: attr.dgid,
            sgid_index: attr.sgid_index,
            hop_limit: attr.hop_limit,
            traffic_class: attr.traffic_class,
            flow_label: attr.flow_label,
            dmac,
        })
    }

    /// ibv_query_qp: the attributes and the state.
    pub fn query_qp(&mut self, qp: &Qp) -> Result<QpAttr> {
        Ok(self.nic.query_qp(qp.qp.qpn)?.attr)
    }

    /// The QP's transport counters (packets, retransmissions, NAKs, duplicates...), as the
    /// RDMA statistics a provider exports.
    pub fn query_qp_counters(&mut self, qp: &Qp) -> Result<QpCounters> {
        Ok(self.nic.query_qp(qp.qp.qpn)?.counters)
    }

    pub fn destroy_qp(&mut self, qp: Qp) -> Result<()> {
        Ok(self.nic.destroy_qp(qp.qp)?)
    }

    /// The MAC address of `ip`, by ARP through this port (cached).
    pub fn resolve(&mut self, ip: [u8; 4], timeout: std::time::Duration) -> Result<[u8; 6]> {
        self.neighbors
            .resolve(&mut self.nic, ip, timeout)
            .ok_or(VerbsError::Timeout)
    }

    /// Answers ARP requests for this port's addresses that arrived since the last call (a host
    /// stack does this all the time; a verbs application calls it while it waits).
    pub fn serve_neighbors(&mut self) -> Result<()> {
        Ok(self.neighbors.serve(&mut self.nic)?)
    }

    /// A neighbour's MAC address the application knows (a static neighbour entry).
    pub fn add_neighbor(&mut self, ip: [u8; 4], mac: [u8; 6]) {
        self.neighbors.learn(ip, mac);
    }
}
