//! RDMA ends for the integration suites: an RC QP on a NIC function with a registered buffer,
//! connected to a peer on the same card (their frames cross the eSwitch) or on another card
//! (over a link, with or without faults), and a runner that steps every card and the NICs'
//! clock.

use std::sync::Arc;

use fld_abi::nic::*;
use fld_abi::wire::roce::ipv4_gid;
use fld_device::card::{Card, CardConfig};
use fld_device::nic::NicConfig;
use fld_device::wire::{link, Faults, FaultyWire};
use fld_driver::inprocess::InProcessHost;
use fld_driver::nic::{CompletionQueue, EventQueue, NicDriver};
use fld_driver::rdma::{MemoryRegion, QpCaps, RcQueuePair};
use fld_driver::{DmaBuffer, PciDevice};

/// Bytes of each end's registered buffer.
pub const BUF: usize = 8 << 20;

pub struct End {
    pub nic: NicDriver,
    pub eq: EventQueue,
    pub cq: CompletionQueue,
    pub pd: u32,
    pub qp: RcQueuePair,
    pub buf: DmaBuffer,
    pub mr: MemoryRegion,
    pub ip: [u8; 4],
}

impl End {
    pub fn va(&self, off: usize) -> u64 {
        self.mr.addr + off as u64
    }
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.va(off),
            length: len as u32,
            lkey: self.mr.key,
        }
    }
    pub fn fill(&self, off: usize, data: &[u8]) {
        self.buf.write(off, data);
    }
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.buf.read(off, &mut v);
        v
    }
    /// Every CQE now in the end's CQ.
    pub fn completions(&mut self) -> Vec<Cqe> {
        let mut v = Vec::new();
        while let Some(c) = self.cq.poll() {
            v.push(c);
        }
        self.cq.update_ci();
        v
    }
    pub fn state(&mut self) -> QpState {
        let q = self.nic.query_qp(self.qp.qpn).unwrap();
        QpState::from_u8(q.attr.qp_state).unwrap()
    }
}

/// An end on function `f` of `host`'s card: EQ, CQ, PD, a registered buffer with
/// `access_flags`, GID 0 = `ip`, an RC QP in RESET.
pub fn open_end(
    host: &Arc<InProcessHost>,
    f: u16,
    ip: [u8; 4],
    access_flags: u32,
    caps: QpCaps,
) -> End {
    let card = host.card();
    let dev = host.device(card.nic.function_id(f).unwrap());
    let mut nic = NicDriver::probe(dev.clone()).unwrap();
    dev.enable_msix(2).unwrap();
    let eq = nic.create_eq(8, 0).unwrap();
    let cq = nic.create_cq(&eq, 14).unwrap();
    let pd = nic.create_pd().unwrap();
    let buf = dev.dma_alloc(BUF).unwrap();
    let mr = nic.register_mr(pd, &buf, access_flags).unwrap();
    let mac = nic.mac();
    nic.set_roce_address(0, Some((ipv4_gid(ip), mac))).unwrap();
    let qp = nic.create_qp(pd, &cq, &cq, None, caps).unwrap();
    End {
        nic,
        eq,
        cq,
        pd,
        qp,
        buf,
        mr,
        ip,
    }
}

pub const CAPS: QpCaps = QpCaps {
    log_sq_size: 10,
    log_rq_size: 10,
    max_recv_sge: 4,
    signal_all: false,
    out_of_order: false,
};

/// The transport parameters of a connection.
#[derive(Clone, Copy)]
pub struct Transport {
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub path_mtu: u8,
}

impl Default for Transport {
    fn default() -> Self {
        Transport {
            timeout: DEFAULT_ACK_TIMEOUT,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            path_mtu: DEFAULT_PATH_MTU,
        }
    }
}

/// Takes `me` from RESET to RTS towards the peer QP `peer_qpn` at `peer_ip`/`peer_mac`.
pub fn connect(me: &mut End, peer: (u32, [u8; 4], [u8; 6]), psns: (u32, u32), t: Transport) {
    use qp_attr::*;
    let (peer_qpn, peer_ip, peer_mac) = peer;
    let mut a = QpAttr {
        qp_state: QpState::Init as u8,
        port: 1,
        ..Default::default()
    };
    a.access_flags
        .set(access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC);
    me.nic
        .modify_qp(me.qp.qpn, STATE | PKEY_INDEX | PORT | ACCESS_FLAGS, &a)
        .unwrap();
    a.qp_state = QpState::Rtr as u8;
    a.path_mtu = t.path_mtu;
    a.dest_qpn.set(peer_qpn);
    a.rq_psn.set(psns.1);
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = t.min_rnr_timer;
    a.dgid = ipv4_gid(peer_ip);
    a.dmac = peer_mac;
    a.hop_limit = 64;
    me.nic
        .modify_qp(
            me.qp.qpn,
            STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            &a,
        )
        .unwrap();
    a.qp_state = QpState::Rts as u8;
    a.sq_psn.set(psns.0);
    a.timeout = t.timeout;
    a.retry_cnt = t.retry_cnt;
    a.rnr_retry = t.rnr_retry;
    a.max_rd_atomic = 4;
    me.nic
        .modify_qp(
            me.qp.qpn,
            STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
            &a,
        )
        .unwrap();
}

/// Two connected ends and the cards they live on.
pub struct Pair {
    pub cards: Vec<Arc<Card>>,
    pub hosts: Vec<Arc<InProcessHost>>,
    pub a: End,
    pub b: End,
    /// The NICs' clock in nanoseconds (the runner advances it).
    pub now: u64,
}

/// PSNs near the 24-bit wrap, so the sequences cross it.
pub const PSNS: (u32, u32) = (0xff_fff0, 0x00_0100);

/// A and B on functions 0 and 1 of one card.
pub fn one_card(b_access: u32, t: Transport) -> Pair {
    let card = Card::new(CardConfig::default());
    let host = InProcessHost::new(card.clone(), 64 << 20).unwrap();
    let a = open_end(&host, 0, [10, 0, 0, 1], access::ALL, CAPS);
    let b = open_end(&host, 1, [10, 0, 0, 2], b_access, CAPS);
    finish(vec![card], vec![host], a, b, t)
}

/// A and B on function 0 of two cards whose uplinks are joined by a cable, each direction
/// behind `faults` (with its own seed).
pub fn two_cards(faults: Faults, t: Transport) -> Pair {
    two_cards_with(faults, t, NicConfig::default())
}

/// As [`two_cards`], the cards' NICs configured as `nic` says (their card numbers aside).
pub fn two_cards_with(faults: Faults, t: Transport, nic: NicConfig) -> Pair {
    let cards: Vec<Arc<Card>> = (0..2)
        .map(|i| {
            Card::new(CardConfig {
                nic: NicConfig {
                    card_id: i + 1,
                    ..nic.clone()
                },
                ..Default::default()
            })
        })
        .collect();
    let (x, y) = link(4096);
    cards[0]
        .nic
        .set_uplink(Box::new(FaultyWire::new(x, faults)));
    cards[1].nic.set_uplink(Box::new(FaultyWire::new(
        y,
        Faults {
            seed: faults.seed ^ 0x5a5a,
            ..faults
        },
    )));
    let hosts: Vec<Arc<InProcessHost>> = cards
        .iter()
        .map(|c| InProcessHost::new(c.clone(), 64 << 20).unwrap())
        .collect();
    // With a reorder unit on the cards, the connection is an out-of-order one.
    let caps = QpCaps {
        out_of_order: nic.receiver != fld_device::nic::reorder::ReceiverMode::GoBackN,
        ..CAPS
    };
    let a = open_end(&hosts[0], 0, [10, 0, 0, 1], access::ALL, caps);
    let b = open_end(&hosts[1], 0, [10, 0, 0, 2], access::ALL, caps);
    finish(cards, hosts, a, b, t)
}

fn finish(
    cards: Vec<Arc<Card>>,
    hosts: Vec<Arc<InProcessHost>>,
    mut a: End,
    mut b: End,
    t: Transport,
) -> Pair {
    let (aq, bq, am, bm, aip, bip) = (a.qp.qpn, b.qp.qpn, a.nic.mac(), b.nic.mac(), a.ip, b.ip);
    connect(&mut a, (bq, bip, bm), PSNS, t);
    connect(&mut b, (aq, aip, am), (PSNS.1, PSNS.0), t);
    let mut p = Pair {
        cards,
        hosts,
        a,
        b,
        now: 0,
    };
    p.set_clock();
    p
}

impl Pair {
    fn set_clock(&mut self) {
        for c in &self.cards {
            c.nic.set_clock(Some(self.now));
        }
    }

    /// One round: every card polled once, then the NICs' clock advanced — 1 µs after a busy
    /// round, 100 µs after an idle one (timers are what is left). Returns the work done.
    pub fn step(&mut self) -> usize {
        let work: usize = self.cards.iter().map(|c| c.poll()).sum();
        self.now += if work > 0 { 1_000 } else { 100_000 };
        self.set_clock();
        work
    }

    /// Steps until `done` holds or `limit_ns` of NIC time passed; returns whether it held.
    pub fn run_until(&mut self, limit_ns: u64, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        let end = self.now + limit_ns;
        while self.now < end {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }

    /// Steps until nothing moved for one second of NIC time (longer than any timer of the
    /// suites' connections).
    pub fn run(&mut self) {
        let mut idle_since = self.now;
        while self.now - idle_since < 1_000_000_000 {
            if self.step() > 0 {
                idle_since = self.now;
            }
        }
    }
}

/// A pattern that differs per size and seed.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7) as u8 ^ seed)
        .collect()
}

/// A signalled gather work request.
pub fn wr<'a>(op: u8, sges: &'a [Sge], remote: Option<(u64, u32)>, imm: u32) -> RdmaWqe<'a> {
    RdmaWqe {
        opcode: op,
        signal: true,
        solicited: false,
        fence: false,
        imm,
        remote,
        atomic: None,
        data: WqeData::Gather(sges),
    }
}
