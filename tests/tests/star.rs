//! StaR's stateless server (`docs/nic-interface.md` §16): a hand-played client sends StaR
//! requests built with the formats crate into a card's uplink and reads the answers byte by
//! byte. The server NIC places RDP data, answers GDs with the bytes asked for, writes CQEPs'
//! CQEs and hands EAs to its driver — from the packets alone: no QP, no context fetch.

mod common;

use std::sync::Arc;

use common::rdma::*;
use fld_abi::nic::*;
use fld_abi::wire::roce::star::{StarCq, StarData, StarHeaders, StarKind, StarPacket};
use fld_abi::wire::roce::{self, ipv4_gid, RoceAddress};
use fld_abi::wire::udp_offsets;
use fld_device::card::{Card, CardConfig};
use fld_device::wire::{link, LinkEnd, Wire};
use fld_driver::inprocess::InProcessHost;
use fld_driver::nic::{CompletionQueue, NicDriver, SendQueue, SendWqe};
use fld_driver::{DmaBuffer, PciDevice};
use zerocopy::little_endian::{U16, U32};
use zerocopy::IntoBytes;

const CLIENT_IP: [u8; 4] = [10, 0, 0, 9];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
/// The client QP the answers go to.
const CLIENT_QPN: u32 = 0x4242;
/// The server-side QP number the client names (the server driver's software QP: the NIC has none).
const SERVER_QPN: u32 = 0x1234;

/// A card whose function 0 is a StaR server, and the client's end of its uplink.
struct Server {
    card: Arc<Card>,
    _host: Arc<InProcessHost>,
    end: End,
    wire: LinkEnd,
    ident: u16,
    /// The control CQ (EAs) and a CQ the CQEPs fill.
    control: CompletionQueue,
}

fn server(serving: bool) -> Server {
    let card = Card::new(CardConfig::default());
    let (a, b) = link(1024);
    card.nic.set_uplink(Box::new(a));
    let host = InProcessHost::new(card.clone(), 64 << 20).unwrap();
    let mut end = open_end(&host, 0, [10, 0, 0, 1], access::ALL, CAPS);
    let control = end.nic.create_cq(&end.eq, 8).unwrap();
    end.nic.set_star_server(serving, Some(&control)).unwrap();
    Server {
        card,
        _host: host,
        end,
        wire: b,
        ident: 0,
        control,
    }
}

impl Server {
    fn address(&self) -> RoceAddress {
        RoceAddress {
            src_mac: CLIENT_MAC,
            dst_mac: self.end.nic.mac(),
            src_gid: ipv4_gid(CLIENT_IP),
            dst_gid: ipv4_gid(self.end.ip),
            src_port: 0xc0de,
            traffic_class: 0b10,
            hop_limit: 64,
            flow_label: 0,
        }
    }

    /// Sends a StaR request of `kind` with sequence number `psn`.
    fn send(&mut self, h: StarHeaders, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 9000];
        self.ident += 1;
        let n = self
            .address()
            .emit(&h, payload, self.ident, &mut f)
            .unwrap();
        f.truncate(n);
        self.wire.transmit(&f);
        self.card.run_until_idle();
        f
    }

    /// Every StaR answer that came back, checked: the request's addresses swapped, a valid
    /// ICRC, ECN-capable.
    fn answers(&mut self) -> Vec<(StarKind, StarHeaders, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 9216];
        while let Some(n) = self.wire.receive(&mut buf) {
            let f = &buf[..n];
            assert_eq!(&f[..6], CLIENT_MAC, "to the client's MAC");
            assert_eq!(&f[6..12], self.end.nic.mac(), "from the server's");
            assert_eq!(&f[26..30], self.end.ip, "from the server's IP");
            assert_eq!(&f[30..34], CLIENT_IP, "to the client's IP");
            assert_eq!(f[15] & 3, 0b10, "ECT(0)");
            let o = udp_offsets(f).expect("a UDP frame");
            assert_eq!(
                u16::from_be_bytes([f[34], f[35]]),
                0xc0de,
                "the request's source port"
            );
            assert_eq!(u16::from_be_bytes([f[36], f[37]]), roce::ROCE_V2_PORT);
            let p = StarPacket::parse(&f[o.payload()..o.ip_end]).expect("a StaR packet");
            assert_eq!(roce::icrc(f, o.ip, o.ip_end, o.ipv6), Some(p.icrc), "ICRC");
            out.push((p.kind, p.headers, p.payload.to_vec()));
        }
        out
    }

    fn counters(&mut self) -> RdmaCountersOut {
        self.end.nic.query_rdma_counters().unwrap()
    }
}

fn rdp(psn: u32, dma_addr: u64, len: usize) -> StarHeaders {
    StarHeaders {
        data: Some(StarData {
            dma_addr,
            length: len as u32,
            reply_qpn: CLIENT_QPN,
        }),
        ..StarHeaders::new(StarKind::Rdp, SERVER_QPN, psn, roce::DEFAULT_PKEY)
    }
}

fn gd(psn: u32, dma_addr: u64, len: u32) -> StarHeaders {
    StarHeaders {
        data: Some(StarData {
            dma_addr,
            length: len,
            reply_qpn: CLIENT_QPN,
        }),
        ..StarHeaders::new(StarKind::Gd, SERVER_QPN, psn, roce::DEFAULT_PKEY)
    }
}

#[test]
fn a_function_that_does_not_serve_star_refuses_it_and_writes_nothing() {
    let mut s = server(false);
    let at = s.end.buf.iova();
    s.send(rdp(1, at, 4), b"evil");
    s.send(gd(2, at, 64), &[]);
    assert!(s.answers().is_empty());
    assert_eq!(s.end.read(0, 4), [0; 4]);
    let c = s.counters();
    assert_eq!((c.star_refused.get(), c.star_served.get()), (2, 0));
}

#[test]
fn rdp_data_lands_at_its_address_and_an_ra_echoes_its_psn() {
    let mut s = server(true);
    let at = s.end.buf.iova() + 4096;
    let data: Vec<u8> = (0..1400u32).map(|i| (i * 7) as u8).collect();
    s.send(rdp(0x00fffe, at, data.len()), &data);
    assert_eq!(s.end.read(4096, data.len()), data);
    let a = s.answers();
    assert_eq!(a.len(), 1);
    let (kind, h, payload) = &a[0];
    assert_eq!(*kind, StarKind::Ra);
    assert_eq!(
        (h.bth.psn, h.bth.dest_qp, h.bth.pkey),
        (0x00fffe, CLIENT_QPN, 0xffff)
    );
    assert!(h.data.is_none() && payload.is_empty());
    assert_eq!(s.counters().star_served.get(), 1);
}

#[test]
fn a_gd_is_answered_by_an_sdp_with_the_bytes_it_asked_for() {
    let mut s = server(true);
    let data: Vec<u8> = (0..3000u32).map(|i| (i ^ 0x5a) as u8).collect();
    s.end.fill(8192, &data);
    let at = s.end.buf.iova() + 8192 + 100;
    s.send(gd(77, at, 1337), &[]);
    let a = s.answers();
    assert_eq!(a.len(), 1);
    let (kind, h, payload) = &a[0];
    assert_eq!(*kind, StarKind::Sdp);
    assert_eq!((h.bth.psn, h.bth.dest_qp), (77, CLIENT_QPN));
    assert_eq!(payload[..], data[100..100 + 1337]);
}

#[test]
fn addresses_outside_mapped_memory_are_counted_and_unanswered() {
    let mut s = server(true);
    s.send(rdp(1, 0x7000_0000_0000, 8), b"12345678");
    s.send(gd(2, 0x7000_0000_0000, 64), &[]);
    assert!(s.answers().is_empty());
    let c = s.counters();
    assert_eq!((c.star_dma_errors.get(), c.star_served.get()), (2, 0));
}

#[test]
fn a_cqep_writes_its_cqe_into_the_named_cq_and_an_ea_answers() {
    let mut s = server(true);
    let cqe = Cqe {
        byte_count: U32::new(2800),
        wqe_counter: U16::new(5),
        qn: U32::new(SERVER_QPN),
        metadata: U32::new(9),
        flags: cqe_flags::QP,
        op_own: op_own(CQE_RESP_SEND, 0),
        ..Default::default()
    };
    let h = StarHeaders {
        cq: Some(StarCq {
            cqn: s.end.cq.cqn,
            reply_qpn: CLIENT_QPN,
        }),
        ..StarHeaders::new(StarKind::Cqep, SERVER_QPN, 9, roce::DEFAULT_PKEY)
    };
    s.send(h, cqe.as_bytes());
    let got = s.end.cq.poll().expect("the CQE");
    assert_eq!(got.opcode(), CQE_RESP_SEND);
    assert_eq!(
        (
            got.byte_count.get(),
            got.wqe_counter.get(),
            got.qn.get(),
            got.metadata.get()
        ),
        (2800, 5, SERVER_QPN, 9)
    );
    assert_eq!(got.vport.get(), 0);
    let a = s.answers();
    assert_eq!(a.len(), 1);
    assert_eq!(
        (a[0].0, a[0].1.bth.psn, a[0].1.bth.dest_qp),
        (StarKind::Ea, 9, CLIENT_QPN)
    );
    // A CQ number the function does not own: refused, nothing written, no EA.
    let h = StarHeaders {
        cq: Some(StarCq {
            cqn: 999,
            reply_qpn: CLIENT_QPN,
        }),
        ..StarHeaders::new(StarKind::Cqep, SERVER_QPN, 10, roce::DEFAULT_PKEY)
    };
    s.send(h, cqe.as_bytes());
    assert!(s.answers().is_empty());
    assert_eq!(s.counters().star_refused.get(), 1);
}

#[test]
fn an_ea_reaches_the_driver_through_the_control_cq() {
    let mut s = server(true);
    s.send(
        StarHeaders::new(StarKind::Ea, SERVER_QPN, 0x123, roce::DEFAULT_PKEY),
        &[],
    );
    let c = s.control.poll().expect("an EA completion");
    assert_eq!(c.opcode(), CQE_STAR_EA);
    assert_eq!((c.qn.get(), c.byte_count.get()), (SERVER_QPN, 0x123));
    assert!(s.answers().is_empty(), "an EA is not answered");
    // Without a control CQ the EA is refused.
    s.end.nic.set_star_server(true, None).unwrap();
    s.send(
        StarHeaders::new(StarKind::Ea, SERVER_QPN, 0x124, roce::DEFAULT_PKEY),
        &[],
    );
    assert!(s.control.poll().is_none());
    assert_eq!(s.counters().star_refused.get(), 1);
}

#[test]
fn a_bad_icrc_or_a_foreign_partition_is_a_silent_counted_drop() {
    let mut s = server(true);
    let at = s.end.buf.iova();
    let mut h = rdp(1, at, 4);
    h.bth.pkey = 0x1234;
    s.send(h, b"evil");
    let mut f = s.address();
    f.src_port = 0xc0df;
    let mut frame = vec![0u8; 256];
    let n = f.emit(&rdp(2, at, 4), b"evil", 9, &mut frame).unwrap();
    frame[n - 6] ^= 1;
    s.wire.transmit(&frame[..n]);
    s.card.run_until_idle();
    assert!(s.answers().is_empty());
    assert_eq!(s.end.read(0, 4), [0; 4]);
    let c = s.counters();
    assert_eq!((c.rx_bad_pkey.get(), c.rx_icrc_errors.get()), (1, 1));
}

/// The point of StaR: a thousand clients' requests, and not one context looked up or fetched —
/// the QP-context cache's counters do not move, and the server has no QP for any of them.
#[test]
fn serving_many_connections_keeps_no_per_connection_state() {
    let mut s = server(true);
    let before = s.counters();
    let base = s.end.buf.iova();
    for i in 0..1000u32 {
        let mut h = rdp(i, base + u64::from(i % 64) * 64, 8);
        h.data.as_mut().unwrap().reply_qpn = 0x10000 + i;
        h.bth.dest_qp = 0x20000 + i;
        s.send(h, &i.to_le_bytes().repeat(2));
    }
    let answers = s.answers();
    assert_eq!(answers.len(), 1000);
    assert!(answers
        .iter()
        .enumerate()
        .all(|(i, a)| a.1.bth.dest_qp == 0x10000 + i as u32 && a.1.bth.psn == i as u32));
    let after = s.counters();
    assert_eq!(after.star_served.get(), 1000);
    assert_eq!(
        (after.qp_cache_hits.get(), after.qp_cache_misses.get()),
        (before.qp_cache_hits.get(), before.qp_cache_misses.get()),
        "no context touched"
    );
    assert_eq!(after.rx_unknown_qp.get(), 0);
}

// ---- the egress security module (§16.5) ----------------------------------------------------

/// One card: function 0 is the StaR server (and the eSwitch manager, the trusted control
/// plane); function 1 is a client application that can put any frame on the wire through a
/// plain Ethernet send queue.
struct Forger {
    card: Arc<Card>,
    _host: Arc<InProcessHost>,
    server: End,
    app: NicDriver,
    sq: SendQueue,
    tx: DmaBuffer,
    ident: u16,
}

fn forger() -> Forger {
    let card = Card::new(CardConfig::default());
    let host = InProcessHost::new(card.clone(), 64 << 20).unwrap();
    let mut server = open_end(&host, 0, [10, 0, 0, 1], access::ALL, CAPS);
    server.nic.set_star_server(true, None).unwrap();
    let dev = host.device(card.nic.function_id(1).unwrap());
    let mut app = NicDriver::probe(dev.clone()).unwrap();
    dev.enable_msix(2).unwrap();
    let eq = app.create_eq(4, 0).unwrap();
    let cq = app.create_cq(&eq, 6).unwrap();
    let sq = app.create_sq(&cq, 6, false).unwrap();
    let tx = dev.dma_alloc(1 << 16).unwrap();
    Forger {
        card,
        _host: host,
        server,
        app,
        sq,
        tx,
        ident: 0,
    }
}

impl Forger {
    /// Function 1 sends a StaR request to the server, as any application can build one.
    fn forge(&mut self, h: StarHeaders, payload: &[u8]) {
        let addr = RoceAddress {
            src_mac: self.app.mac(),
            dst_mac: self.server.nic.mac(),
            src_gid: ipv4_gid([10, 0, 0, 2]),
            dst_gid: ipv4_gid(self.server.ip),
            src_port: 0xc0de,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        };
        let mut f = vec![0u8; 9000];
        self.ident += 1;
        let n = addr.emit(&h, payload, self.ident, &mut f).unwrap();
        self.tx.write(0, &f[..n]);
        let gather = [(self.tx.iova() + 14, n as u32 - 14)];
        self.sq
            .post(&SendWqe {
                inline_header: &f[..14],
                gather: &gather,
                ..Default::default()
            })
            .unwrap();
        self.sq.ring_doorbell();
        self.card.run_until_idle();
    }

    fn blocked(&mut self) -> u64 {
        self.app
            .query_rdma_counters()
            .unwrap()
            .star_tx_blocked
            .get()
    }

    fn served(&mut self) -> u64 {
        self.server
            .nic
            .query_rdma_counters()
            .unwrap()
            .star_served
            .get()
    }

    /// The server's registered memory this connection may reach: its first 4 KiB.
    fn allow_first_page(&mut self, kinds: u8) -> u32 {
        let lo = self.server.buf.iova();
        self.server
            .nic
            .star_guard_add(
                1,
                kinds,
                ipv4_gid(self.server.ip),
                lo..lo + 4096,
                STAR_GUARD_ANY_CQ,
            )
            .unwrap()
    }
}

fn kinds(list: &[StarKind]) -> u8 {
    list.iter().fold(0, |k, x| k | star_guard_kind(x.opcode()))
}

#[test]
fn star_packets_are_blocked_at_the_senders_nic_until_the_server_allows_them() {
    let mut f = forger();
    let base = f.server.buf.iova();
    f.forge(rdp(1, base, 4), b"evil");
    assert_eq!((f.blocked(), f.served()), (1, 0));
    assert_eq!(f.server.read(0, 4), [0; 4], "nothing reached the server");
    // The server's control plane allows RDPs into its first page: one there goes through,
    // one a byte beyond it does not.
    f.allow_first_page(kinds(&[StarKind::Rdp]));
    f.forge(rdp(2, base + 100, 4), b"good");
    assert_eq!(f.server.read(100, 4), b"good");
    f.forge(rdp(3, base + 4093, 4), b"over");
    f.forge(rdp(4, base + 8192, 4), b"far!");
    assert_eq!((f.blocked(), f.served()), (3, 1));
    assert_eq!(f.server.read(8192, 4), [0; 4]);
    // GDs were not allowed, in range or not.
    f.forge(gd(5, base, 64), &[]);
    assert_eq!(f.blocked(), 4);
}

#[test]
fn without_the_module_the_same_forgery_overwrites_the_servers_memory() {
    let mut f = forger();
    let base = f.server.buf.iova();
    f.server.fill(8192, b"secret");
    f.allow_first_page(kinds(&[StarKind::Rdp]));
    f.forge(rdp(1, base + 8192, 6), b"pwned!");
    assert_eq!(f.server.read(8192, 6), b"secret", "the module stopped it");
    // The test knob switches the module off: the stateless server writes wherever it is told.
    f.server.nic.star_guard_enforce(1, false).unwrap();
    f.forge(rdp(2, base + 8192, 6), b"pwned!");
    assert_eq!(
        f.server.read(8192, 6),
        b"pwned!",
        "which is why the module exists"
    );
}

#[test]
fn only_the_manager_writes_a_module_and_entries_can_be_taken_back() {
    let mut f = forger();
    let gid = ipv4_gid(f.server.ip);
    // The application's own function cannot widen its module, nor switch it off.
    let e = f
        .app
        .star_guard_add(1, 0xff, gid, 0..u64::MAX, STAR_GUARD_ANY_CQ);
    assert!(e.is_err(), "{e:?}");
    assert!(f.app.star_guard_enforce(1, false).is_err());
    let base = f.server.buf.iova();
    let id = f.allow_first_page(kinds(&[StarKind::Rdp, StarKind::Cqep]));
    f.forge(rdp(1, base, 2), b"ok");
    assert_eq!(f.served(), 1);
    f.server.nic.star_guard_del(1, id).unwrap();
    f.forge(rdp(2, base, 2), b"no");
    assert_eq!(f.blocked(), 1);
    assert!(f.server.nic.star_guard_del(1, id).is_err(), "gone already");
    // Entries that make no sense are refused.
    assert!(
        f.server.nic.star_guard_add(1, 0, gid, 0..1, 0).is_err(),
        "no kinds"
    );
    assert!(
        f.server
            .nic
            .star_guard_add(1, 1, gid, std::ops::Range { start: 9, end: 1 }, 0)
            .is_err(),
        "inverted range"
    );
    assert!(
        f.server.nic.star_guard_add(77, 1, gid, 0..1, 0).is_err(),
        "no such function"
    );
}

#[test]
fn a_cqep_only_reaches_the_cq_its_entry_names() {
    let mut f = forger();
    let cq = f.server.cq.cqn;
    let gid = ipv4_gid(f.server.ip);
    f.server
        .nic
        .star_guard_add(1, kinds(&[StarKind::Cqep]), gid, 0..0, cq)
        .unwrap();
    let cqe = Cqe {
        op_own: op_own(CQE_RESP_SEND, 0),
        ..Default::default()
    };
    let cqep = |cqn: u32| StarHeaders {
        cq: Some(StarCq {
            cqn,
            reply_qpn: CLIENT_QPN,
        }),
        ..StarHeaders::new(StarKind::Cqep, SERVER_QPN, 1, roce::DEFAULT_PKEY)
    };
    f.forge(cqep(cq), cqe.as_bytes());
    assert_eq!(f.served(), 1);
    f.forge(cqep(cq + 1), cqe.as_bytes());
    assert_eq!(f.blocked(), 1);
}

/// Traffic that is not StaR passes the module untouched, entries or not.
#[test]
fn the_module_does_not_look_at_other_traffic() {
    let mut f = forger();
    let mut p = one_card(access::ALL, Transport::default());
    p.a.fill(0, b"plain rdma");
    let s = [p.a.sge(0, 10)];
    p.a.qp
        .post_send(&wr(WQE_OP_RDMA_WRITE, &s, Some((p.b.va(0), p.b.mr.key)), 0))
        .unwrap();
    p.a.qp.ring_send_doorbell();
    p.run();
    assert_eq!(p.b.read(0, 10), b"plain rdma");
    assert_eq!(
        p.a.nic.query_rdma_counters().unwrap().star_tx_blocked.get(),
        0
    );
    // A UDP datagram to 4791 that is not StaR (an RC opcode) is not the module's either.
    let before = f.blocked();
    let frame = {
        let addr = RoceAddress {
            src_mac: f.app.mac(),
            dst_mac: f.server.nic.mac(),
            src_gid: ipv4_gid([10, 0, 0, 2]),
            dst_gid: ipv4_gid(f.server.ip),
            src_port: 0xc0de,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        };
        let h = fld_abi::wire::roce::IbHeaders {
            bth: fld_abi::wire::roce::BthRepr {
                opcode: roce::opcode::SEND_ONLY,
                dest_qp: 0x777,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut b = vec![0u8; 256];
        let n = addr.emit(&h, b"x", 1, &mut b).unwrap();
        b.truncate(n);
        b
    };
    f.tx.write(0, &frame);
    let gather = [(f.tx.iova() + 14, frame.len() as u32 - 14)];
    f.sq.post(&SendWqe {
        inline_header: &frame[..14],
        gather: &gather,
        ..Default::default()
    })
    .unwrap();
    f.sq.ring_doorbell();
    f.card.run_until_idle();
    assert_eq!(f.blocked(), before);
}

// ---- a StaR connection end to end (§16.6) --------------------------------------------------

use common::star::{star_pair, Drops, SERVER_QPN as STAR_SERVER_QPN};

/// A client WRITE: its bytes land in the server's region by RDPs, every RDP answered by an RA,
/// the client's completion as for RC — and the server's NIC holds no QP for it.
#[test]
fn a_client_write_lands_in_the_servers_memory_without_a_server_qp() {
    let mut s = star_pair(Default::default(), Default::default());
    let data = pattern(10_000, 3);
    s.client.fill(0, &data);
    let sge = [s.client.sge(0, data.len())];
    let at = s.server.va(4096 + 7);
    s.client
        .qp
        .post_send(&wr(WQE_OP_RDMA_WRITE, &sge, Some((at, s.server.mr.key)), 0))
        .unwrap();
    s.client.qp.ring_send_doorbell();
    s.run();
    assert!(s.server.read(4096 + 7, data.len()) == data, "bytes landed");
    let c = s.client.completions();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].opcode(), c[0].syndrome), (CQE_REQ, 0));
    assert_eq!(c[0].byte_count.get(), data.len() as u32);
    let k = s.server.nic.query_rdma_counters().unwrap();
    // 10,000 bytes at a 1 KiB MTU from 7 bytes into a page, split where the server's pages end
    // (4089, 4096 and 1815 bytes): 4 + 4 + 2 RDPs.
    assert_eq!(k.star_served.get(), 10);
    assert_eq!(
        k.qp_cache_hits.get() + k.qp_cache_misses.get(),
        0,
        "no context"
    );
    assert!(
        s.server_completions().is_empty(),
        "a WRITE owes the server nothing"
    );
}

/// A client SEND into a receive WQE the server posted (a WQEP brought it to the client), and
/// the server's receive completion (a CQEP); then the server's SEND back into a client receive
/// WQE by GDs and SDPs, and its send completion.
#[test]
fn send_and_receive_both_ways_complete_on_both_sides() {
    let mut s = star_pair(Default::default(), Default::default());
    let rx = s.post_server_recv(0, 4096);
    let request = pattern(2800, 9);
    s.client.fill(0, &request);
    s.client.qp.post_recv(&[s.client.sge(8192, 4096)]).unwrap();
    s.client.qp.ring_recv_doorbell();
    let sge = [s.client.sge(0, request.len())];
    s.client
        .qp
        .post_send(&wr(WQE_OP_SEND_IMM, &sge, None, 0xfeed))
        .unwrap();
    s.client.qp.ring_send_doorbell();
    s.run();
    assert!(s.server.read(0, request.len()) == request);
    let done = s.server_completions();
    assert_eq!(done.len(), 1, "{done:?}");
    let r = done[0];
    assert_eq!(r.opcode(), CQE_RESP_SEND_IMM);
    assert_eq!(
        (
            r.byte_count.get(),
            r.wqe_counter.get(),
            r.qn.get(),
            r.imm.get()
        ),
        (2800, rx, STAR_SERVER_QPN, 0xfeed)
    );
    assert_eq!(s.client.completions().len(), 1, "the client's SEND");
    // The answer: the server's SEND of 1400 bytes from its region.
    let answer = pattern(1400, 11);
    s.server.fill(16384, &answer);
    let sge = [s.server.sge(16384, answer.len())];
    let tx = s.post_server_send(&wr(WQE_OP_SEND, &sge, None, 0));
    s.run();
    let got = s.client.completions();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].opcode(), CQE_RESP_SEND);
    assert_eq!(got[0].byte_count.get(), 1400);
    assert!(s.client.read(8192, 1400) == answer);
    let done = s.server_completions();
    assert_eq!(done.len(), 1);
    assert_eq!(
        (
            done[0].opcode(),
            done[0].wqe_counter.get(),
            done[0].wqe_opcode
        ),
        (CQE_REQ, tx, WQE_OP_SEND)
    );
    assert_eq!(s.qp.unacked(), 0, "every WQEP acknowledged");
}

/// READs both ways: the client's by GDs; the server's by RDPs of the client's bytes.
#[test]
fn reads_both_ways_are_byte_exact() {
    let mut s = star_pair(Default::default(), Default::default());
    let theirs = pattern(5000, 21);
    s.server.fill(0, &theirs);
    let into = [s.client.sge(0, 5000)];
    s.client
        .qp
        .post_send(&wr(
            WQE_OP_RDMA_READ,
            &into,
            Some((s.server.va(0), s.server.mr.key)),
            0,
        ))
        .unwrap();
    s.client.qp.ring_send_doorbell();
    s.run();
    assert!(s.client.read(0, 5000) == theirs);
    assert_eq!(s.client.completions().len(), 1);
    let ours = pattern(3000, 33);
    s.client.fill(65536, &ours);
    let sge = [s.server.sge(32768, 3000)];
    let at = (s.client.va(65536), s.client.mr.key);
    let tx = s.post_server_send(&wr(WQE_OP_RDMA_READ, &sge, Some(at), 0));
    s.run();
    assert!(s.server.read(32768, 3000) == ours);
    let done = s.server_completions();
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].wqe_counter.get(), done[0].syndrome), (tx, 0));
    // And the server's WRITE into the client.
    let more = pattern(1234, 44);
    s.server.fill(40960, &more);
    let sge = [s.server.sge(40960, 1234)];
    let at = (s.client.va(131072), s.client.mr.key);
    s.post_server_send(&wr(WQE_OP_RDMA_WRITE, &sge, Some(at), 0));
    s.run();
    assert!(s.client.read(131072, 1234) == more);
    assert_eq!(s.server_completions().len(), 1);
}

/// Packets lost on the way — a WQEP, RDPs, a GD, an SDP, a CQEP, an EA — are recovered: every
/// byte arrives once, every completion once, in order.
#[test]
fn lost_wqeps_rdps_gds_sdps_and_cqeps_are_recovered_without_duplicates() {
    let server_drops = Drops::of(&[
        (StarKind::Wqep, &[0, 2]),
        (StarKind::Sdp, &[1]),
        (StarKind::Ea, &[0]),
    ]);
    let client_drops = Drops::of(&[
        (StarKind::Rdp, &[1, 5]),
        (StarKind::Gd, &[0]),
        (StarKind::Cqep, &[0]),
        (StarKind::Ea, &[1]),
    ]);
    let mut s = star_pair(client_drops, server_drops);
    for i in 0..3 {
        s.post_server_recv(i * 4096, 4096);
    }
    s.client.qp.post_recv(&[s.client.sge(8192, 8192)]).unwrap();
    s.client.qp.ring_recv_doorbell();
    let mut sent = Vec::new();
    for i in 0..3u8 {
        let msg = pattern(3000 + usize::from(i) * 100, i);
        s.client.fill(usize::from(i) * 4096 + 65536, &msg);
        let sge = [s.client.sge(usize::from(i) * 4096 + 65536, msg.len())];
        s.client
            .qp
            .post_send(&wr(WQE_OP_SEND, &sge, None, 0))
            .unwrap();
        sent.push(msg);
    }
    s.client.qp.ring_send_doorbell();
    let back = pattern(6000, 77);
    s.server.fill(32768, &back);
    let sge = [s.server.sge(32768, back.len())];
    s.post_server_send(&wr(WQE_OP_SEND, &sge, None, 0));
    s.run();
    for (i, msg) in sent.iter().enumerate() {
        assert!(s.server.read(i * 4096, msg.len()) == *msg, "request {i}");
    }
    assert!(s.client.read(8192, back.len()) == back, "the answer");
    let done = s.server_completions();
    let receives: Vec<u16> = done
        .iter()
        .filter(|c| c.opcode() == CQE_RESP_SEND)
        .map(|c| c.wqe_counter.get())
        .collect();
    assert_eq!(receives, [0, 1, 2], "each receive completed once, in order");
    assert_eq!(done.iter().filter(|c| c.opcode() == CQE_REQ).count(), 1);
    let own = s.client.completions();
    assert_eq!(own.iter().filter(|c| c.opcode() == CQE_REQ).count(), 3);
    assert_eq!(
        own.iter().filter(|c| c.opcode() == CQE_RESP_SEND).count(),
        1
    );
    assert!(s.drops[0].lock().unwrap().dropped >= 3 && s.drops[1].lock().unwrap().dropped >= 4);
    let q = s.client.nic.query_qp(s.client.qp.qpn).unwrap();
    assert!(q.counters.retransmitted.get() > 0);
}

/// A StaR client QP and an ordinary RC QP share one NIC: each keeps its own transport.
#[test]
fn a_star_connection_and_an_rc_connection_share_a_nic() {
    let mut s = star_pair(Default::default(), Default::default());
    // An RC pair on the server card's second function and the client card's second function.
    let mut a = open_end(&s.hosts[1], 1, [10, 0, 1, 2], access::ALL, CAPS);
    let mut b = open_end(&s.hosts[0], 1, [10, 0, 1, 1], access::ALL, CAPS);
    let (aq, bq, am, bm, aip, bip) = (a.qp.qpn, b.qp.qpn, a.nic.mac(), b.nic.mac(), a.ip, b.ip);
    connect(&mut a, (bq, bip, bm), (0, 0), Transport::default());
    connect(&mut b, (aq, aip, am), (0, 0), Transport::default());
    let rc = pattern(3000, 5);
    a.fill(0, &rc);
    let sge = [a.sge(0, 3000)];
    a.qp.post_send(&wr(WQE_OP_RDMA_WRITE, &sge, Some((b.va(0), b.mr.key)), 0))
        .unwrap();
    a.qp.ring_send_doorbell();
    let star = pattern(3000, 6);
    s.client.fill(0, &star);
    let sge = [s.client.sge(0, 3000)];
    s.client
        .qp
        .post_send(&wr(
            WQE_OP_RDMA_WRITE,
            &sge,
            Some((s.server.va(0), s.server.mr.key)),
            0,
        ))
        .unwrap();
    s.client.qp.ring_send_doorbell();
    s.run();
    assert!(b.read(0, 3000) == rc);
    assert!(s.server.read(0, 3000) == star);
    assert_eq!(a.completions().len(), 1);
    assert_eq!(s.client.completions().len(), 1);
}

/// A request lost in a stream is sent again once three later ones are answered, not when the
/// ACK timer (67 ms here) expires.
#[test]
fn a_lost_rdp_is_sent_again_after_three_later_answers() {
    let mut s = star_pair(Drops::of(&[(StarKind::Rdp, &[3])]), Default::default());
    let data = pattern(32 * 1024, 8);
    s.client.fill(0, &data);
    let sge = [s.client.sge(0, data.len())];
    let at = (s.server.va(0), s.server.mr.key);
    s.client
        .qp
        .post_send(&wr(WQE_OP_RDMA_WRITE, &sge, Some(at), 0))
        .unwrap();
    s.client.qp.ring_send_doorbell();
    let start = s.now;
    let mut done = Vec::new();
    while done.is_empty() && s.now - start < 50_000_000 {
        s.step();
        done = s.client.completions();
    }
    assert_eq!(done.len(), 1, "completed before the ACK timer");
    assert!(s.server.read(0, data.len()) == data);
    let q = s.client.nic.query_qp(s.client.qp.qpn).unwrap();
    assert_eq!(
        (q.counters.timeouts.get(), q.counters.retransmitted.get()),
        (0, 1)
    );
}

/// §16.6: a region the server registers after the connection was made reaches the client as
/// an element — sent again when lost, delivered once, in order — and the client's driver holds
/// it; then the client's WRITE into it lands. A region the server withdraws is closed by the
/// client's NIC before it acknowledges the update: with nothing done by the client's driver
/// yet, a forged RDP into its pages is stopped at the client's NIC, and the client's own WRITE
/// fails with a remote access error, the server's memory untouched.
#[test]
fn a_region_registered_later_reaches_the_client_and_a_withdrawn_one_closes_at_once() {
    use fld_abi::wire::roce::star::StarRegionOp;
    use fld_driver::star::RegionUpdate;
    // The server's first WQEP (the registration) is lost on the wire.
    let mut s = star_pair(Default::default(), Drops::of(&[(StarKind::Wqep, &[0])]));
    let buf = s.server.nic.device().dma_alloc(3 * 4096).unwrap();
    let mr2 = s
        .server
        .nic
        .register_mr(s.server.pd, &buf, access::ALL)
        .unwrap();
    let region = mr2.star_region();
    assert_eq!(region.pages.len(), 3);
    s.qp.post_region_update(&mut s.port, StarRegionOp::Register, &region, s.now)
        .unwrap();
    s.run();
    assert_eq!(s.qp.unacked(), 0, "acknowledged after the resend");
    assert_eq!(
        s.updates.poll(),
        Some(RegionUpdate {
            client_qpn: s.client.qp.qpn,
            op: StarRegionOp::Register,
            region: region.clone(),
        })
    );
    assert_eq!(s.updates.poll(), None, "delivered once");
    // The client's driver applies it (what Context::star_progress does).
    let _held2 = s.client.nic.hold_star_region(s.client.pd, &region).unwrap();
    let data_kinds =
        star_guard_kind(StarKind::Rdp.opcode()) | star_guard_kind(StarKind::Gd.opcode());
    let server_gid = ipv4_gid(s.server.ip);
    for r in region.bus_ranges() {
        s.client
            .nic
            .star_guard_add(0, data_kinds, server_gid, r, 0)
            .unwrap();
    }
    let data = pattern(5000, 9);
    s.client.fill(0, &data);
    let sge = [s.client.sge(0, data.len())];
    s.client
        .qp
        .post_send(&wr(
            WQE_OP_RDMA_WRITE,
            &sge,
            Some((mr2.addr + 100, mr2.key)),
            0,
        ))
        .unwrap();
    s.client.qp.ring_send_doorbell();
    s.run();
    let mut landed = vec![0u8; data.len()];
    buf.read(100, &mut landed);
    assert!(landed == data, "the WRITE landed in the new region");
    let c = s.client.completions();
    assert_eq!((c.len(), c[0].opcode(), c[0].syndrome), (1, CQE_REQ, 0));

    // Withdrawn: the client NIC closes it when the update arrives.
    s.qp.post_region_update(&mut s.port, StarRegionOp::Deregister, &region, s.now)
        .unwrap();
    s.run();
    assert_eq!(s.qp.unacked(), 0);
    // A raw RDP into the region's first page, sent through a plain Ethernet SQ of the client's
    // function, is stopped by its security module.
    let blocked = |s: &mut common::star::StarPair| {
        s.client
            .nic
            .query_rdma_counters()
            .unwrap()
            .star_tx_blocked
            .get()
    };
    let before = blocked(&mut s);
    let sq_cq = s.client.nic.create_cq(&s.client.eq, 4).unwrap();
    let mut sq = s.client.nic.create_sq(&sq_cq, 4, false).unwrap();
    let tx = s.client.nic.device().dma_alloc(4096).unwrap();
    let addr = RoceAddress {
        src_mac: s.client.nic.mac(),
        dst_mac: s.server.nic.mac(),
        src_gid: ipv4_gid(s.client.ip),
        dst_gid: server_gid,
        src_port: 0xc0de,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
    };
    let mut f = vec![0u8; 512];
    let n = addr
        .emit(&rdp(7, region.pages[0] + 16, 6), b"forged", 1, &mut f)
        .unwrap();
    tx.write(0, &f[..n]);
    sq.post(&SendWqe {
        inline_header: &f[..14],
        gather: &[(tx.iova() + 14, n as u32 - 14)],
        ..Default::default()
    })
    .unwrap();
    sq.ring_doorbell();
    s.run();
    assert_eq!(blocked(&mut s), before + 1, "the module refused it");
    let mut first = [0u8; 22];
    buf.read(0, &mut first);
    assert_eq!(&first[16..22], &[0; 6], "nothing reached the server");
    // The client's own WRITE into it fails: the key is gone from its NIC.
    s.client
        .qp
        .post_send(&wr(
            WQE_OP_RDMA_WRITE,
            &sge,
            Some((mr2.addr + 8192, mr2.key)),
            0,
        ))
        .unwrap();
    s.client.qp.ring_send_doorbell();
    s.run();
    let c = s.client.completions();
    assert_eq!(c[0].opcode(), CQE_REQ_ERR, "{c:?}");
    assert_eq!(c[0].syndrome, rdma_status::REMOTE_ACCESS);
    let mut tail = vec![0u8; 100];
    buf.read(8192, &mut tail);
    assert_eq!(tail, vec![0u8; 100]);
    // The client's driver hears of it too, to free its copy.
    assert_eq!(
        s.updates.poll().map(|u| (u.op, u.region.key)),
        Some((StarRegionOp::Deregister, region.key))
    );
}
