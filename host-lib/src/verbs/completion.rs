//! Work completions and completion queues (ibv_wc, ibv_cq, ibv_comp_channel): the CQ keeps
//! which QPs complete into it and their posted wr_ids, so a polled CQE becomes an ibv_wc.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fld_abi::nic::*;
use fld_driver::nic::CompletionQueue;
use fld_driver::PciDevice;

use super::*;

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
    /// The NIC staged an RDMA WRITE into the QP's staging ring (uRDMA's in-RNIC unload path):
    /// `wr_id` is the slot's counter, `imm_data` the WRITE's rkey, `byte_len` its data bytes.
    RecvRdmaStaged,
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

/// The wr_ids of a QP's posted work and how far its send ring has completed.
pub(super) struct WrIds {
    pub(super) send: Box<[AtomicU64]>,
    /// Basic blocks of the send WQE at each slot (unsignalled WQEs complete with the next
    /// signalled one).
    pub(super) send_blocks: Box<[AtomicU32]>,
    /// Send basic blocks the CQ has seen complete.
    pub(super) send_done: AtomicU32,
    pub(super) recv: Box<[AtomicU64]>,
}

impl WrIds {
    pub(super) fn new(send_slots: usize, recv_slots: usize) -> Arc<Self> {
        Arc::new(WrIds {
            send: (0..send_slots).map(|_| AtomicU64::new(0)).collect(),
            send_blocks: (0..send_slots).map(|_| AtomicU32::new(1)).collect(),
            send_done: AtomicU32::new(0),
            recv: (0..recv_slots.max(1)).map(|_| AtomicU64::new(0)).collect(),
        })
    }
}

/// What a CQ knows of a QP completing into it.
pub(super) struct Attached {
    pub(super) qpn: u32,
    pub(super) ids: Arc<WrIds>,
    pub(super) srq: Option<Arc<WrIds>>,
    /// A StaR server QP: the element sequence number of its next completion (a completion the
    /// client had to send twice carries an older one and is dropped).
    pub(super) star_next: Option<Arc<AtomicU32>>,
}

/// A completion channel: where a CQ's events are waited for (ibv_comp_channel).
pub struct CompChannel {
    pub(super) _private: (),
}

/// A completion queue.
pub struct Cq {
    pub(super) cq: CompletionQueue,
    pub(super) attached: Mutex<Vec<Attached>>,
    pub(super) dev: Arc<dyn PciDevice>,
    pub(super) channel: bool,
    /// Entries consumed since the consumer counter was last reported.
    pub(super) unreported: u32,
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
            CQE_RESP_SEND_IMM | CQE_RESP_WRITE_IMM | CQE_RESP_WRITE_STAGED => Some(c.imm.get()),
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
        } else if c.opcode() == CQE_RESP_WRITE_STAGED {
            // No receive WQE was taken: the slot's counter names it.
            (counter as u64, WcOpcode::RecvRdmaStaged)
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
