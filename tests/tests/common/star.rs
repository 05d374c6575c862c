//! A StaR connection across two cards for the integration suites (`docs/nic-interface.md` §16):
//! the server's end is software (its driver's QP, the NIC serving statelessly), the client's end
//! is a QP its NIC runs for both. Between the cards, a wire that can drop chosen StaR packets.

use std::sync::{Arc, Mutex};

use fld_abi::nic::*;
use fld_abi::wire::roce::star::{StarKind, StarPacket};
use fld_abi::wire::roce::{ipv4_gid, RoceAddress, DEFAULT_PKEY};
use fld_abi::wire::udp_offsets;
use fld_device::card::{Card, CardConfig};
use fld_device::nic::NicConfig;
use fld_device::wire::{link, Wire};
use fld_driver::inprocess::InProcessHost;
use fld_driver::rdma::MemoryRegion;
use fld_driver::star::{StarRegion, StarServer, StarServerQp, StarUpdates};

use super::rdma::*;

/// The QP number the server's driver gives its connection (the NIC has no QP for it).
pub const SERVER_QPN: u32 = 0x5000;

/// Which StaR packets the wire drops: the `n`th (from 0) packets of each listed kind.
#[derive(Clone, Default)]
pub struct Drops {
    pub rules: Vec<(StarKind, Vec<u64>)>,
    seen: Vec<(StarKind, u64)>,
    pub dropped: u64,
}

impl Drops {
    pub fn of(rules: &[(StarKind, &[u64])]) -> Self {
        Drops {
            rules: rules.iter().map(|(k, n)| (*k, n.to_vec())).collect(),
            ..Default::default()
        }
    }

    fn drops(&mut self, frame: &[u8]) -> bool {
        let Some(o) = udp_offsets(frame) else {
            return false;
        };
        let Ok(p) = StarPacket::parse(&frame[o.payload()..o.ip_end]) else {
            return false;
        };
        let n = match self.seen.iter_mut().find(|(k, _)| *k == p.kind) {
            Some((_, n)) => {
                *n += 1;
                *n - 1
            }
            None => {
                self.seen.push((p.kind, 1));
                0
            }
        };
        let hit = self
            .rules
            .iter()
            .any(|(k, which)| *k == p.kind && which.contains(&n));
        self.dropped += u64::from(hit);
        hit
    }
}

/// A wire that drops what its [`Drops`] say.
pub struct Dropping<W: Wire> {
    inner: W,
    drops: Arc<Mutex<Drops>>,
}

impl<W: Wire> Wire for Dropping<W> {
    fn transmit(&mut self, frame: &[u8]) {
        if !self.drops.lock().unwrap().drops(frame) {
            self.inner.transmit(frame);
        }
    }
    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.inner.receive(buf)
    }
}

pub struct StarPair {
    pub cards: Vec<Arc<Card>>,
    pub hosts: Vec<Arc<InProcessHost>>,
    /// The client: an ordinary end whose QP is the connection's stateful end.
    pub client: End,
    /// The server: its function's objects (the QP made by `open_end` is not used), its StaR
    /// port and the connection's software QP.
    pub server: End,
    pub port: StarServer,
    pub qp: StarServerQp,
    /// The server's region as the client holds it (its MTT lives as long as this).
    pub held: MemoryRegion,
    /// The client's update RQ: the server's memory-table updates arrive there.
    pub updates: StarUpdates,
    /// What each side's transmissions drop: the server's, then the client's.
    pub drops: [Arc<Mutex<Drops>>; 2],
    pub now: u64,
}

/// A StaR connection between function 0 of two cards: the server at 10.0.0.1, the client at
/// 10.0.0.2. `drops` apply to the client's and the server's transmissions.
pub fn star_pair(client_drops: Drops, server_drops: Drops) -> StarPair {
    let cards: Vec<Arc<Card>> = (0..2)
        .map(|i| {
            Card::new(CardConfig {
                nic: NicConfig {
                    card_id: i + 1,
                    ..Default::default()
                },
                ..Default::default()
            })
        })
        .collect();
    let (x, y) = link(4096);
    let drops = [
        Arc::new(Mutex::new(server_drops)),
        Arc::new(Mutex::new(client_drops)),
    ];
    cards[0].nic.set_uplink(Box::new(Dropping {
        inner: x,
        drops: drops[0].clone(),
    }));
    cards[1].nic.set_uplink(Box::new(Dropping {
        inner: y,
        drops: drops[1].clone(),
    }));
    let hosts: Vec<Arc<InProcessHost>> = cards
        .iter()
        .map(|c| InProcessHost::new(c.clone(), 64 << 20).unwrap())
        .collect();
    let mut server = open_end(&hosts[0], 0, [10, 0, 0, 1], access::ALL, CAPS);
    let mut client = open_end(&hosts[1], 0, [10, 0, 0, 2], access::ALL, CAPS);
    // The server: a stateless NIC, a control CQ for EAs, an Ethernet SQ for WQEPs.
    let control = server.nic.create_cq(&server.eq, 8).unwrap();
    server.nic.set_star_server(true, Some(&control)).unwrap();
    let sq_cq = server.nic.create_cq(&server.eq, 8).unwrap();
    let sq = server.nic.create_sq(&sq_cq, 8, false).unwrap();
    let port = StarServer::new(&mut server.nic, sq, sq_cq, control).unwrap();
    let to_client = RoceAddress {
        src_mac: server.nic.mac(),
        dst_mac: client.nic.mac(),
        src_gid: ipv4_gid(server.ip),
        dst_gid: ipv4_gid(client.ip),
        src_port: 0xc5a7,
        traffic_class: 0b10,
        hop_limit: 64,
        flow_label: 0,
    };
    let qp = StarServerQp::new(SERVER_QPN, to_client, client.qp.qpn, DEFAULT_PKEY);
    // What the server hands over: its QP's CQs and its region with its bus addresses.
    let region = server.mr.star_region();
    let cq = server.cq.cqn;
    let updates_cq = client.nic.create_cq(&client.eq, 5).unwrap();
    let updates = StarUpdates::new(&mut client.nic, updates_cq).unwrap();
    client
        .nic
        .set_star_peer(client.qp.qpn, cq, cq, Some(updates.rq.rqn))
        .unwrap();
    let held = client.nic.hold_star_region(client.pd, &region).unwrap();
    let (smac, sip) = (server.nic.mac(), server.ip);
    connect(
        &mut client,
        (SERVER_QPN, sip, smac),
        (0, 0),
        Transport::default(),
    );
    // The security modules, written through each card's manager function by the server's control
    // plane: the client may send RDPs and GDs into the region, CQEPs to the server's CQ and EAs;
    // the server's driver may send WQEPs to the client.
    allow_client(&mut client, sip, &region, cq);
    let kinds = star_guard_kind(StarKind::Wqep.opcode());
    server
        .nic
        .star_guard_add(0, kinds, ipv4_gid(client.ip), 0..0, STAR_GUARD_ANY_CQ)
        .unwrap();
    StarPair {
        cards,
        hosts,
        client,
        server,
        port,
        qp,
        held,
        updates,
        drops,
        now: 0,
    }
}

/// The client's security module entries for a connection to the server at `sip`.
pub fn allow_client(client: &mut End, sip: [u8; 4], region: &StarRegion, cqn: u32) {
    let gid = ipv4_gid(sip);
    let data = star_guard_kind(StarKind::Rdp.opcode()) | star_guard_kind(StarKind::Gd.opcode());
    for r in region.bus_ranges() {
        client.nic.star_guard_add(0, data, gid, r, 0).unwrap();
    }
    let control = star_guard_kind(StarKind::Cqep.opcode()) | star_guard_kind(StarKind::Ea.opcode());
    client
        .nic
        .star_guard_add(0, control, gid, 0..0, cqn)
        .unwrap();
}

impl StarPair {
    fn set_clock(&mut self) {
        for c in &self.cards {
            c.nic.set_clock(Some(self.now));
        }
    }

    /// One round: both cards polled, the server driver's EAs taken and its WQEPs sent again
    /// when due, the clock advanced (1 µs busy, 100 µs idle).
    pub fn step(&mut self) -> usize {
        let mut work: usize = self.cards.iter().map(|c| c.poll()).sum();
        while let Some((qpn, seq)) = self.port.poll_ea() {
            if qpn == self.qp.qpn {
                self.qp.element_acked(seq);
            }
            work += 1;
        }
        work += self
            .qp
            .resend_due(&mut self.port, self.now, 200_000_000)
            .unwrap();
        self.now += if work > 0 { 1_000 } else { 100_000 };
        self.set_clock();
        work
    }

    /// Steps until nothing moved for a second of NIC time (past every timer).
    pub fn run(&mut self) {
        let mut idle_since = self.now;
        while self.now - idle_since < 1_000_000_000 {
            if self.step() > 0 {
                idle_since = self.now;
            }
        }
    }

    /// The server's new completions (duplicates the client had to send again dropped).
    pub fn server_completions(&mut self) -> Vec<Cqe> {
        let mut v = Vec::new();
        while let Some(c) = self.server.cq.poll() {
            if self.qp.accept(&c) {
                v.push(c);
            }
        }
        self.server.cq.update_ci();
        v
    }

    pub fn post_server_recv(&mut self, off: usize, len: usize) -> u16 {
        let sge = self.server.sge(off, len);
        self.qp.post_recv(&mut self.port, &[sge], self.now).unwrap()
    }

    pub fn post_server_send(&mut self, wqe: &RdmaWqe<'_>) -> u16 {
        self.qp.post_send(&mut self.port, wqe, self.now).unwrap()
    }
}
