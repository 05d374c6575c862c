//! Work requests, shared receive queues and RC queue pairs (ibv_send_wr, ibv_srq, ibv_qp):
//! the data path — `post_send`, `post_recv`, `post_srq_recv` — and the connection attributes
//! a QP is taken through the state machine with.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fld_abi::nic::*;
use fld_driver::rdma::{RcQueuePair, SharedReceiveQueue};

use super::completion::WrIds;
use super::*;

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
    /// uRDMA's hint (§3.2): this WRITE stays on the offload path under the hint policy
    /// (`decision::Policy::Hint`, through `urdma::UnloadQp`); a plain QP ignores it.
    pub keep_offloaded: bool,
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
            keep_offloaded: false,
        }
    }
}

/// A shared receive queue.
pub struct Srq {
    pub(super) srq: SharedReceiveQueue,
    pub(super) ids: Arc<WrIds>,
    /// WQEs posted and WQEs the CQs reported consumed are the device's business; the library
    /// bounds posting by the ring only.
    pub(super) max_sge: u32,
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
    pub(super) qp: RcQueuePair,
    pub(super) ids: Arc<WrIds>,
    pub(super) cap: QpCap,
    pub(super) sq_sig_all: bool,
    pub(super) has_srq: bool,
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
        if wr.inline {
            let total: usize = wr.sg_list.iter().map(|s| s.length as usize).sum();
            if total > self.cap.max_inline_data as usize || total > MAX_INLINE_DATA {
                return Err(VerbsError::Invalid("inline data beyond max_inline_data"));
            }
            // Inline data is what the SGEs point at, copied now (the buffers may be reused at
            // once, as IBV_SEND_INLINE allows).
            return self.post_inline(wr, total);
        }
        self.post_wqe(wr, WqeData::Gather(wr.sg_list))
    }

    /// The staging buffer lives here, so a gather post does not clear it.
    fn post_inline(&mut self, wr: &SendWr<'_>, total: usize) -> Result<()> {
        let mut buf = [0u8; MAX_INLINE_DATA];
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

    /// Posts `wr` carrying `bytes` inline (its SGEs ignored) and rings the doorbell: what the
    /// unload path sends without staging it in a registered buffer first.
    pub(super) fn post_inline_bytes(&mut self, wr: &SendWr<'_>, bytes: &[u8]) -> Result<()> {
        if bytes.len() > self.cap.max_inline_data as usize || bytes.len() > MAX_INLINE_DATA {
            return Err(VerbsError::Invalid("inline data beyond max_inline_data"));
        }
        self.post_wqe(wr, WqeData::Inline(bytes))?;
        self.qp.ring_send_doorbell();
        Ok(())
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
pub(super) fn rdma_wqe<'a>(wr: &SendWr<'_>, data: WqeData<'a>, sig_all: bool) -> RdmaWqe<'a> {
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
            timeout: fld_abi::nic::DEFAULT_ACK_TIMEOUT,
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
