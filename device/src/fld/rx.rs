//! FLD's Rx module (paper §5.1, §5.5): a NIC striding RQ whose WQEs stay in host memory and point
//! into FLD's Rx-buffer window. FLD recycles the buffers in posting order, so the descriptors
//! never change; it only advances the RQ doorbell. CQEs written into the Rx CQ window are
//! compressed to 15 bytes on arrival; the packets of a step's completions go to the accelerator
//! on the rx stream as one burst, each with its metadata, straight from the Rx buffer and
//! without backpressure (a packet the accelerator refuses is a counted drop).
//! FLD-R (§6): the NIC's queue pairs receive through the same shared multi-packet RQ, one CQE
//! per packet before the message is whole; FLD maps the CQE's QPN to its queue and hands each
//! packet on with its message position, leaving reassembly to the accelerator.
//! Left out: per-queue Rx (one shared RQ serves all FLD-E and FLD-R traffic).

use std::collections::VecDeque;

use super::tx::{TxEngine, TxView};
use super::Stats;
use crate::accel::{Accelerator, RdmaRx, RxBurst, RxMeta, RxPacket};
use fld_abi::fld::*;
use fld_abi::nic;

/// The Rx module: buffer, recycling cursor, RQ producer counter and the completions the NIC
/// wrote.
#[derive(Default)]
pub(super) struct RxEngine {
    pub buffer: Vec<u8>,
    pub enabled: bool,
    pub rqn: u32,
    pub log_stride: u8,
    pub log_strides: u8,
    pub log_wqes: u8,
    /// The striding WQE (buffer) the NIC is filling.
    pub cursor: u32,
    /// RQ producer counter FLD reports to the NIC.
    pub pi: u32,
    pub doorbell_due: bool,
    /// Compressed completions waiting for the engine.
    pub cqes: VecDeque<CompressedCqe>,
    /// CQEs consumed, reported to the NIC as the CQ consumer counter.
    pub cq_ci: u32,
    /// The packets of the step's completions, handed to the accelerator as one burst (as
    /// many as the Rx CQ holds; kept so a step allocates nothing).
    pub burst: Vec<RxPacket>,
}

/// What a quiescent Rx engine holds beyond its power-on state: the receive queue the control
/// plane bound and its layout, where the NIC is in it, and the counters
/// ([`RxEngine::settings`]).
#[derive(Clone)]
pub(super) struct RxSettings {
    buffer_len: usize,
    enabled: bool,
    rqn: u32,
    log_stride: u8,
    log_strides: u8,
    log_wqes: u8,
    cursor: u32,
    pi: u32,
    doorbell_due: bool,
    cq_ci: u32,
}

impl RxEngine {
    /// The settings, while no completion waits and the buffer holds no byte of a packet.
    /// Every field is named, so one added to the engine must be placed here.
    pub fn settings(&self) -> Option<RxSettings> {
        let RxEngine {
            buffer,
            enabled,
            rqn,
            log_stride,
            log_strides,
            log_wqes,
            cursor,
            pi,
            doorbell_due,
            cqes,
            cq_ci,
            burst: _,
        } = self;
        let quiet = cqes.is_empty() && buffer.iter().all(|&b| b == 0);
        quiet.then_some(RxSettings {
            buffer_len: buffer.len(),
            enabled: *enabled,
            rqn: *rqn,
            log_stride: *log_stride,
            log_strides: *log_strides,
            log_wqes: *log_wqes,
            cursor: *cursor,
            pi: *pi,
            doorbell_due: *doorbell_due,
            cq_ci: *cq_ci,
        })
    }

    /// Takes `s` (on an engine at power-on), with `buffer`, an earlier engine's, for its
    /// buffer: zeroed, or replaced when its size differs.
    pub fn apply(&mut self, s: &RxSettings, mut buffer: Vec<u8>) {
        if buffer.len() == s.buffer_len {
            buffer.fill(0);
        } else {
            buffer = vec![0; s.buffer_len];
        }
        self.buffer = buffer;
        self.enabled = s.enabled;
        self.rqn = s.rqn;
        self.log_stride = s.log_stride;
        self.log_strides = s.log_strides;
        self.log_wqes = s.log_wqes;
        self.cursor = s.cursor;
        self.pi = s.pi;
        self.doorbell_due = s.doorbell_due;
        self.cq_ci = s.cq_ci;
    }

    pub fn new(geo: &FldGeometry) -> Self {
        RxEngine {
            cqes: VecDeque::with_capacity(1 << geo.log_rx_cq),
            burst: Vec::with_capacity(1 << geo.log_rx_cq),
            ..Default::default()
        }
    }

    /// Bytes of one striding WQE (buffer).
    pub fn wqe_bytes(&self) -> usize {
        1 << (self.log_stride + self.log_strides)
    }

    /// RX_ENABLE: allocates the buffers the layout registers describe if they fit the
    /// Rx-buffer window `window` (otherwise receive stays off), or frees them.
    pub fn enable(&mut self, on: bool, window: u64) {
        if !on {
            self.enabled = false;
            self.buffer = Vec::new();
            return;
        }
        let bytes = (self.wqe_bytes() as u64) << self.log_wqes;
        if self.enabled || bytes == 0 || bytes > window {
            return;
        }
        self.buffer = vec![0; bytes as usize];
        self.enabled = true;
        self.cursor = 0;
        self.pi = 1 << self.log_wqes;
    }
}

/// Delivers received packets to the accelerator, all the completions of the step as one
/// burst, and recycles finished buffers in order. The accelerator reads each packet in place
/// (the NIC writes no buffer again before the RQ doorbell the step rings after this) and may
/// answer on the tx stream (`tx`) at once. Returns the completions consumed.
pub(super) fn deliver_receives(
    rx: &mut RxEngine,
    tx: &mut TxEngine,
    stats: &mut Stats,
    geo: FldGeometry,
    accel: Option<&mut (dyn Accelerator + 'static)>,
) -> usize {
    let mut n = 0;
    rx.burst.clear();
    while let Some(c) = rx.cqes.pop_front() {
        n += 1;
        rx.cq_ci = rx.cq_ci.wrapping_add(1);
        // Every CQE of the RQ names the RQ, except a QP's (FLD-R), which names the QP.
        if !rx.enabled || !c.is_qp() && c.queue() as u32 != rx.rqn & 0xffff {
            stats.bump(Stat::UnknownCqes);
            continue;
        }
        if c.opcode() == nic::CQE_RESP_ERR {
            stats.bump(Stat::RxErrorCompletions);
            continue;
        }
        if c.flags() & nic::cqe_flags::FILLER == 0 {
            let len = c.counter_or_len() as usize;
            let at = rx.cursor as usize * rx.wqe_bytes()
                + ((c.stride_or_syndrome() as usize) << rx.log_stride);
            stats.bump(Stat::RxPackets);
            stats.add(Stat::RxBytes, len as u64);
            let meta = packet_meta(&c, len as u32, tx);
            let inside = at
                .checked_add(len)
                .is_some_and(|end| end <= rx.buffer.len());
            if meta.queue == u16::MAX {
                stats.bump(Stat::RxUnknownQp);
                stats.bump(Stat::RxAcceleratorDrops);
            } else if !inside || accel.is_none() {
                stats.bump(Stat::RxAcceleratorDrops);
            } else {
                rx.burst.push(RxPacket { meta, at });
            }
        }
        if c.flags() & nic::cqe_flags::WQE_DONE != 0 {
            rx.cursor = (rx.cursor + 1) % (1 << rx.log_wqes);
            rx.pi = rx.pi.wrapping_add(1);
            rx.doorbell_due = true;
            stats.bump(Stat::RxRecycledWqes);
        }
    }
    if let Some(a) = accel.filter(|_| !rx.burst.is_empty()) {
        let burst = RxBurst::new(&rx.buffer, &rx.burst);
        let refused = a.receive_burst(burst, &mut TxView { tx, stats, geo });
        stats.add(Stat::RxAcceleratorDrops, refused as u64);
    }
    n
}

/// The rx stream's metadata of a packet from its NIC completion. An FLD-R packet of a QP no
/// queue is bound to gets queue `u16::MAX`.
fn packet_meta(c: &CompressedCqe, len: u32, tx: &TxEngine) -> RxMeta {
    if c.is_qp() {
        let qf = c.qp_flags();
        let last = qf & nic::cqe_flags::MSG_LAST != 0;
        return RxMeta {
            queue: tx.qp_queues.get(&c.queue()).copied().unwrap_or(u16::MAX),
            len,
            rdma: Some(RdmaRx {
                first: qf & nic::cqe_flags::MSG_FIRST != 0,
                last,
                imm: (last && c.opcode() == nic::CQE_RESP_SEND_IMM).then(|| c.imm()),
            }),
            ..Default::default()
        };
    }
    let (context, resume_table) = split_accelerate_tag(c.flow_tag());
    RxMeta {
        queue: 0,
        context,
        resume_table,
        csum: c.csum(),
        rss_hash: c.rss_hash(),
        len,
        rdma: None,
    }
}
