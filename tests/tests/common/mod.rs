//! Shared set-up: an in-process card with both host functions probed by the real driver, and a
//! raw queue set per function so tests see every WQE and CQE.
#![allow(dead_code)]

pub mod rdma;
pub mod star;

use std::sync::Arc;

use fld_abi::nic::*;
use fld_device::card::{Card, CardConfig};
use fld_driver::inprocess::{InProcessDevice, InProcessHost};
use fld_driver::nic::{
    CompletionQueue, EventQueue, FlowRule, NicDriver, RecvQueue, RqLayout, RuleFate, SendQueue,
    SendWqe, TableMiss,
};
use fld_driver::{DmaBuffer, PciDevice};

pub struct Port {
    pub dev: Arc<InProcessDevice>,
    pub nic: NicDriver,
    pub eq: EventQueue,
    pub cq: CompletionQueue,
    pub sq: SendQueue,
    pub rq_cq: CompletionQueue,
    pub rq: RecvQueue,
    /// Receive buffers, one per RQ slot (regular) or per WQE (striding).
    pub rx_bufs: Vec<DmaBuffer>,
    /// Transmit staging buffer.
    pub tx_buf: DmaBuffer,
}

pub struct Rig {
    pub card: Arc<Card>,
    pub host: Arc<InProcessHost>,
    pub ports: Vec<Port>,
}

pub const RX_BUF: usize = 10240;
/// Frames that may be in flight from one port's staging buffer.
pub const TX_SLOTS: usize = 64;

/// Both functions up; each with an EQ (vector 0), a send CQ + SQ and a receive CQ + RQ; each
/// vPort's receive root table sends everything to its RQ.
pub fn rig(layout: RqLayout, log_rq: u8, log_cq: u8) -> Rig {
    rig_on(CardConfig::default(), layout, log_rq, log_cq)
}

/// [`rig`] on a card built with `config`.
pub fn rig_on(config: CardConfig, layout: RqLayout, log_rq: u8, log_cq: u8) -> Rig {
    let card = Card::new(config);
    let host = InProcessHost::new(card.clone(), 512 << 20).unwrap();
    let mut ports = Vec::new();
    for i in 0..2 {
        let dev = host.device(card.nic.function_id(i).unwrap());
        let mut nic = NicDriver::probe(dev.clone()).unwrap();
        dev.enable_msix(4).unwrap();
        let eq = nic.create_eq(6, 0).unwrap();
        let cq = nic.create_cq(&eq, log_cq).unwrap();
        let sq = nic.create_sq(&cq, 6, false).unwrap();
        let rq_cq = nic.create_cq(&eq, log_cq).unwrap();
        let mut rq = nic.create_rq(&rq_cq, log_rq, layout).unwrap();
        let per = match layout {
            RqLayout::Regular => RX_BUF,
            RqLayout::Striding { .. } => rq.wqe_bytes(),
        };
        let rx_bufs: Vec<DmaBuffer> = (0..rq.size())
            .map(|_| dev.dma_alloc(per).unwrap())
            .collect();
        for b in &rx_bufs {
            rq.post(b.iova(), b.len() as u32);
        }
        rq.ring_doorbell();
        let t = nic
            .create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)
            .unwrap();
        nic.create_flow_entry(t, &FlowRule::any(RuleFate::Rq(rq.rqn)))
            .unwrap();
        nic.set_root(TABLE_KIND_NIC_RX, Some(t)).unwrap();
        let tx_buf = dev.dma_alloc(TX_SLOTS * RX_BUF).unwrap();
        ports.push(Port {
            dev,
            nic,
            eq,
            cq,
            sq,
            rq_cq,
            rq,
            rx_bufs,
            tx_buf,
        });
    }
    Rig { card, host, ports }
}

impl Port {
    /// Posts a SEND of `frame` (14-byte inline header, the rest gathered from a staging slot that
    /// stays untouched for the next `TX_SLOTS - 1` sends) and rings.
    pub fn send(&mut self, frame: &[u8], cs_flags: u8, signal: bool) -> u16 {
        let at = (self.sq.producer_counter() as usize % TX_SLOTS) * RX_BUF;
        self.tx_buf.write(at, frame);
        let inline = frame.len().min(14);
        let gather = [(
            self.tx_buf.iova() + (at + inline) as u64,
            (frame.len() - inline) as u32,
        )];
        let w = SendWqe {
            inline_header: &frame[..inline],
            gather: if frame.len() > inline { &gather } else { &[] },
            cs_flags,
            signal,
            ..Default::default()
        };
        let idx = self.sq.post(&w).unwrap();
        self.sq.ring_doorbell();
        idx
    }

    pub fn mac(&self) -> [u8; 6] {
        self.nic.mac()
    }

    pub fn rq_query(&mut self) -> QueryQueueOut {
        let n = self.rq.rqn;
        self.nic.query_rq(n).unwrap()
    }

    pub fn sq_query(&mut self) -> QueryQueueOut {
        let n = self.sq.sqn;
        self.nic.query_sq(n).unwrap()
    }

    pub fn recover_sq(&mut self) {
        self.nic.recover_sq(&mut self.sq).unwrap()
    }

    pub fn recover_rq(&mut self) {
        self.nic.recover_rq(&mut self.rq).unwrap()
    }
}

impl Rig {
    pub fn run(&self) {
        self.card.run_until_idle();
    }
}

/// A UDP/IPv4 frame of exactly `len` bytes with correct checksums.
pub fn udp_frame(
    src: [u8; 6],
    dst: [u8; 6],
    sport: u16,
    dport: u16,
    len: usize,
    seed: u8,
) -> Vec<u8> {
    let payload_len = len - 42;
    let payload: Vec<u8> = (0..payload_len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect();
    let b = etherparse::PacketBuilder::ethernet2(src, dst)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(sport, dport);
    let mut out = Vec::with_capacity(len);
    b.write(&mut out, &payload).unwrap();
    assert_eq!(out.len(), len);
    out
}

/// A TCP/IPv4 frame between the given addresses and ports.
pub fn tcp_frame(
    src: [u8; 6],
    dst: [u8; 6],
    sip: [u8; 4],
    dip: [u8; 4],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(src, dst)
        .ipv4(sip, dip, 64)
        .tcp(sport, dport, 1, 1024);
    let mut out = Vec::new();
    b.write(&mut out, payload).unwrap();
    out
}
