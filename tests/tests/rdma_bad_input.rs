//! Bad input on the RoCE receive path and in RDMA work requests gets the answer the spec gives:
//! a hand-played remote peer sends frames built with the formats crate straight into a card's
//! uplink and reads what comes back (ACKs, NAKs, read responses) byte by byte.

mod common;

use std::sync::Arc;

use common::rdma::*;
use fld_abi::nic::*;
use fld_abi::wire::roce::{
    self, ipv4_gid, nak, AckKind, Aeth, AtomicEth, BthRepr, IbHeaders, IbPacket, Reth, RoceAddress,
};
use fld_abi::wire::udp_offsets;
use fld_device::card::{Card, CardConfig};
use fld_device::wire::{link, LinkEnd, Wire};
use fld_driver::inprocess::InProcessHost;

const PEER_IP: [u8; 4] = [10, 0, 0, 9];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
const PEER_QPN: u32 = 0x999;
/// The first PSN the peer sends (our QP's expected PSN).
const PEER_PSN: u32 = 0x10;

/// A card with one end whose QP is connected to a peer that is only this test's hands.
struct Lone {
    card: Arc<Card>,
    _host: Arc<InProcessHost>,
    end: End,
    wire: LinkEnd,
    ident: u16,
}

fn lone(access_flags: u32, t: Transport) -> Lone {
    let card = Card::new(CardConfig::default());
    let (a, b) = link(1024);
    card.nic.set_uplink(Box::new(a));
    let host = InProcessHost::new(card.clone(), 64 << 20).unwrap();
    let mut end = open_end(&host, 0, [10, 0, 0, 1], access_flags, CAPS);
    connect(
        &mut end,
        (PEER_QPN, PEER_IP, PEER_MAC),
        (0x500, PEER_PSN),
        t,
    );
    Lone {
        card,
        _host: host,
        end,
        wire: b,
        ident: 0,
    }
}

impl Lone {
    /// A request from the peer to our QP.
    fn send(&mut self, headers: IbHeaders, payload: &[u8]) -> Vec<u8> {
        let frame = self.frame(headers, payload);
        self.inject(&frame);
        frame
    }

    /// The addresses of a packet from `mac`/`ip` to our QP's port.
    fn address_from(&self, mac: [u8; 6], ip: [u8; 4]) -> RoceAddress {
        RoceAddress {
            src_mac: mac,
            dst_mac: self.end.nic.mac(),
            src_gid: ipv4_gid(ip),
            dst_gid: ipv4_gid(self.end.ip),
            src_port: 0xc000,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        }
    }

    /// The frame of a request from the peer to our QP, not sent.
    fn frame(&mut self, headers: IbHeaders, payload: &[u8]) -> Vec<u8> {
        let addr = self.address_from(PEER_MAC, PEER_IP);
        let mut h = headers;
        h.bth.dest_qp = self.end.qp.qpn;
        h.bth.pkey = roce::DEFAULT_PKEY;
        let mut frame = vec![0u8; 9000];
        self.ident += 1;
        let n = addr.emit(&h, payload, self.ident, &mut frame).unwrap();
        frame.truncate(n);
        frame
    }

    fn inject(&mut self, frame: &[u8]) {
        self.wire.transmit(frame);
        self.card.run_until_idle();
    }

    /// Transport packets the card sent towards the peer since the last call.
    fn replies(&mut self) -> Vec<(IbHeaders, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 9216];
        while let Some(n) = self.wire.receive(&mut buf) {
            let f = &buf[..n];
            let o = udp_offsets(f).expect("a UDP frame");
            let p = IbPacket::parse(&f[o.payload()..o.ip_end]).expect("a RoCE packet");
            assert_eq!(
                roce::icrc(f, o.ip, o.ip_end, o.ipv6),
                Some(p.icrc),
                "valid ICRC"
            );
            assert_eq!(p.headers.bth.dest_qp, PEER_QPN);
            out.push((p.headers, p.payload.to_vec()));
        }
        out
    }

    fn counters(&mut self) -> RdmaCountersOut {
        self.end.nic.query_rdma_counters().unwrap()
    }
}

fn bth(opcode: u8, psn: u32, ack_request: bool) -> BthRepr {
    BthRepr {
        opcode,
        psn,
        ack_request,
        ..Default::default()
    }
}

fn write_only(psn: u32, va: u64, rkey: u32, len: u32) -> IbHeaders {
    IbHeaders {
        bth: bth(roce::opcode::WRITE_ONLY, psn, true),
        reth: Some(Reth {
            virtual_address: va,
            rkey,
            dma_length: len,
        }),
        ..Default::default()
    }
}

fn aeth_of(h: &IbHeaders) -> AckKind {
    h.aeth.expect("an AETH").kind
}

#[test]
fn a_bad_icrc_or_an_unknown_qp_is_a_silent_counted_drop() {
    let mut l = lone(access::ALL, Transport::default());
    let va = l.end.va(0);
    let key = l.end.mr.key;
    let mut frame = l.send(write_only(PEER_PSN, va, key, 4), b"good");
    assert_eq!(l.end.read(0, 4), b"good");
    assert_eq!(l.replies().len(), 1, "the ACK");
    // The same frame with one payload byte changed: the ICRC no longer matches.
    let at = frame.len() - 6;
    frame[at] ^= 1;
    l.inject(&frame);
    assert!(l.replies().is_empty(), "no answer");
    assert_eq!(l.counters().rx_icrc_errors.get(), 1);
    // A frame for a QP number nobody has.
    let mut h = write_only(PEER_PSN + 1, va, key, 4);
    h.bth.dest_qp = 0x7777;
    let addr = l.address_from(PEER_MAC, PEER_IP);
    let mut f = vec![0u8; 256];
    let n = addr.emit(&h, b"lost", 1, &mut f).unwrap();
    l.inject(&f[..n]);
    assert!(l.replies().is_empty());
    assert_eq!(l.counters().rx_unknown_qp.get(), 1);
    assert_eq!(l.end.read(0, 4), b"good", "nothing written");
    // Truncated transport headers: malformed, counted.
    let mut short = f[..n].to_vec();
    short.truncate(42 + 8);
    let ip_len = (short.len() - 14) as u16;
    short[16..18].copy_from_slice(&ip_len.to_be_bytes());
    short[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    short[24..26].fill(0);
    let c = fld_abi::wire::internet_checksum(&short[14..34], 0);
    short[24..26].copy_from_slice(&c.to_be_bytes());
    l.inject(&short);
    assert_eq!(l.counters().rx_malformed.get(), 1);
    assert_eq!(l.end.state(), QpState::Rts, "none of it touched the QP");
}

/// A datagram for QP1 (the GSI) is not the RDMA engine's: it walks the function's receive
/// tables like any Ethernet frame (here none: a counted steering miss), so a driver can run the
/// GSI in software; the engine neither counts it nor calls it an unknown QP.
#[test]
fn a_datagram_for_qp1_is_left_to_the_receive_tables() {
    let mut l = lone(access::ALL, Transport::default());
    let vport = l.end.nic.vport();
    let before = l.end.nic.query_vport(vport).unwrap();
    let mut h = IbHeaders {
        bth: bth(roce::opcode::SEND_ONLY, 0, false),
        ..Default::default()
    };
    h.bth.dest_qp = roce::GSI_QPN;
    h.bth.pkey = roce::DEFAULT_PKEY;
    let addr = l.address_from(PEER_MAC, PEER_IP);
    let mut f = vec![0u8; 512];
    let n = addr.emit(&h, &[0x5a; 256], 1, &mut f).unwrap();
    l.inject(&f[..n]);
    let after = l.end.nic.query_vport(vport).unwrap();
    assert_eq!(after.rx_no_steering.get(), before.rx_no_steering.get() + 1);
    let c = l.counters();
    assert_eq!(c.rx_packets.get(), 0, "not the engine's");
    assert_eq!(c.rx_unknown_qp.get(), 0);
    assert!(l.replies().is_empty());
    // The same datagram for the QP's own number is the engine's.
    h.bth.dest_qp = l.end.qp.qpn;
    let n = addr.emit(&h, &[0x5a; 256], 2, &mut f).unwrap();
    l.inject(&f[..n]);
    assert_eq!(l.counters().rx_packets.get(), 1);
    let after2 = l.end.nic.query_vport(vport).unwrap();
    assert_eq!(after2.rx_no_steering.get(), after.rx_no_steering.get());
}

/// A packet naming the QP from another address than its peer's — another tenant forging its
/// way onto a connection — is dropped and counted before it touches the QP: no write, no NAK,
/// and the peer's own next request (same PSN) is executed as if nothing happened.
#[test]
fn a_packet_from_another_address_than_the_peer_is_dropped_and_counted() {
    let mut l = lone(access::ALL, Transport::default());
    let (va, key) = (l.end.va(0), l.end.mr.key);
    let mut h = write_only(PEER_PSN, va, key, 4);
    h.bth.dest_qp = l.end.qp.qpn;
    h.bth.pkey = roce::DEFAULT_PKEY;
    let forger = l.address_from([2, 0, 0, 0, 0, 0x66], [10, 0, 0, 66]);
    let mut f = vec![0u8; 256];
    let n = forger.emit(&h, b"evil", 1, &mut f).unwrap();
    l.inject(&f[..n]);
    assert!(l.replies().is_empty(), "no answer to a forger");
    assert_eq!(l.counters().rx_wrong_source.get(), 1);
    assert_eq!(l.end.read(0, 4), [0u8; 4], "nothing written");
    l.send(write_only(PEER_PSN, va, key, 4), b"mine");
    assert_eq!(l.end.read(0, 4), b"mine");
    assert_eq!(aeth_of(&l.replies()[0].0), AckKind::Ack { credits: 31 });
    assert_eq!(l.end.state(), QpState::Rts);
}

#[test]
fn psns_outside_the_window_get_one_nak_or_a_repeated_ack() {
    let mut l = lone(access::ALL, Transport::default());
    let (va, key) = (l.end.va(0), l.end.mr.key);
    // Ahead of the expected PSN: one sequence NAK naming the expected PSN, then silence.
    l.send(write_only(PEER_PSN + 3, va, key, 4), b"late");
    l.send(write_only(PEER_PSN + 4, va, key, 4), b"late");
    let r = l.replies();
    assert_eq!(r.len(), 1, "one NAK per sequence error");
    assert_eq!(r[0].0.bth.psn, PEER_PSN);
    assert_eq!(
        aeth_of(&r[0].0),
        AckKind::Nak {
            code: nak::PSN_SEQUENCE_ERROR
        }
    );
    assert_ne!(l.end.read(0, 4), b"late", "nothing executed");
    // The expected PSN executes and is acknowledged.
    l.send(write_only(PEER_PSN, va, key, 4), b"one!");
    assert_eq!(l.end.read(0, 4), b"one!");
    let r = l.replies();
    assert_eq!((r.len(), r[0].0.bth.psn), (1, PEER_PSN));
    assert!(matches!(aeth_of(&r[0].0), AckKind::Ack { .. }));
    // A duplicate of it is acknowledged again, not executed again.
    l.end.fill(0, b"own!");
    l.send(write_only(PEER_PSN, va, key, 4), b"one!");
    assert_eq!(
        l.end.read(0, 4),
        b"own!",
        "a duplicate WRITE is not executed"
    );
    let r = l.replies();
    assert_eq!((r.len(), r[0].0.bth.psn), (1, PEER_PSN));
    assert_eq!(aeth_of(&r[0].0), AckKind::Ack { credits: 31 });
    let q = l.end.nic.query_qp(l.end.qp.qpn).unwrap();
    assert_eq!(q.counters.duplicates.get(), 1);
    assert_eq!(q.expected_psn.get(), PEER_PSN + 1);
}

#[test]
fn an_atomic_duplicate_is_answered_from_the_saved_result() {
    let mut l = lone(access::ALL, Transport::default());
    l.end.fill(64, &10u64.to_le_bytes());
    let h = IbHeaders {
        bth: bth(roce::opcode::FETCH_ADD, PEER_PSN, false),
        atomic_eth: Some(AtomicEth {
            virtual_address: l.end.va(64),
            rkey: l.end.mr.key,
            swap_add: 5,
            compare: 0,
        }),
        ..Default::default()
    };
    l.send(h, &[]);
    l.send(h, &[]);
    assert_eq!(l.end.read(64, 8), 15u64.to_le_bytes(), "added once");
    let r = l.replies();
    assert_eq!(r.len(), 2);
    for (hdr, _) in &r {
        assert_eq!(hdr.bth.opcode, roce::opcode::ATOMIC_ACKNOWLEDGE);
        assert_eq!(
            hdr.atomic_ack_eth.unwrap().original,
            10,
            "the saved original both times"
        );
    }
    // And a duplicate READ is executed again: the data as it is now.
    let read = IbHeaders {
        bth: bth(roce::opcode::READ_REQUEST, PEER_PSN + 1, false),
        reth: Some(Reth {
            virtual_address: l.end.va(64),
            rkey: l.end.mr.key,
            dma_length: 8,
        }),
        ..Default::default()
    };
    l.send(read, &[]);
    l.end.fill(64, &99u64.to_le_bytes());
    l.send(read, &[]);
    let r = l.replies();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].1, 15u64.to_le_bytes());
    assert_eq!(r[1].1, 99u64.to_le_bytes(), "executed again");
    assert_eq!(r[1].0.bth.opcode, roce::opcode::READ_RESPONSE_ONLY);
}

/// Every way an rkey can be wrong: NAK remote access error, nothing written, and the
/// responder's QP in ERR.
#[test]
fn every_bad_rkey_is_a_remote_access_nak_with_nothing_written() {
    type Target = Box<dyn Fn(&mut Lone) -> (u64, u32)>;
    let cases: Vec<(&str, Target)> = vec![
        (
            "no such key",
            Box::new(|l| (l.end.va(0), l.end.mr.key ^ 0x100)),
        ),
        (
            "stale variant",
            Box::new(|l| (l.end.va(0), l.end.mr.key ^ 1)),
        ),
        (
            "past the region",
            Box::new(|l| (l.end.va(BUF - 2), l.end.mr.key)),
        ),
        (
            "before the region",
            Box::new(|l| (l.end.va(0) - 8, l.end.mr.key)),
        ),
        (
            "another PD",
            Box::new(|l| {
                let pd = l.end.nic.create_pd().unwrap();
                let mr = l.end.nic.register_mr(pd, &l.end.buf, access::ALL).unwrap();
                let key = mr.key;
                std::mem::forget(mr);
                (l.end.va(0), key)
            }),
        ),
        (
            "no remote write right",
            Box::new(|l| {
                let pd = l.end.pd;
                let mr = l
                    .end
                    .nic
                    .register_mr(pd, &l.end.buf, access::LOCAL_WRITE | access::REMOTE_READ)
                    .unwrap();
                let key = mr.key;
                std::mem::forget(mr);
                (l.end.va(0), key)
            }),
        ),
    ];
    for (what, target) in cases {
        let mut l = lone(access::ALL, Transport::default());
        l.end.fill(0, &[0x11; 16]);
        let (va, key) = target(&mut l);
        l.send(write_only(PEER_PSN, va, key, 4), b"evil");
        let r = l.replies();
        assert_eq!(r.len(), 1, "{what}");
        assert_eq!(
            aeth_of(&r[0].0),
            AckKind::Nak {
                code: nak::REMOTE_ACCESS_ERROR
            },
            "{what}"
        );
        assert_eq!(r[0].0.bth.psn, PEER_PSN, "{what}");
        assert_eq!(l.end.read(0, 16), vec![0x11; 16], "{what}: nothing written");
        assert_eq!(
            l.end.read(BUF - 16, 16),
            vec![0; 16],
            "{what}: nothing written"
        );
        assert_eq!(
            l.end.state(),
            QpState::Err,
            "{what}: the responder's QP ends"
        );
    }
}

#[test]
fn opcodes_out_of_sequence_are_invalid_requests_and_a_stray_response_is_dropped() {
    // MIDDLE without FIRST.
    let mut l = lone(access::ALL, Transport::default());
    l.send(
        IbHeaders {
            bth: bth(roce::opcode::SEND_MIDDLE, PEER_PSN, false),
            ..Default::default()
        },
        &[0u8; 1024],
    );
    let r = l.replies();
    assert_eq!(r.len(), 1);
    assert_eq!(
        aeth_of(&r[0].0),
        AckKind::Nak {
            code: nak::INVALID_REQUEST
        }
    );
    assert_eq!(l.end.state(), QpState::Err);

    // A FIRST whose payload is not a whole MTU.
    let mut l = lone(access::ALL, Transport::default());
    l.end.qp.post_recv(&[l.end.sge(0, 4096)]).unwrap();
    l.end.qp.ring_recv_doorbell();
    l.send(
        IbHeaders {
            bth: bth(roce::opcode::SEND_FIRST, PEER_PSN, false),
            ..Default::default()
        },
        &[0u8; 100],
    );
    assert_eq!(
        aeth_of(&l.replies()[0].0),
        AckKind::Nak {
            code: nak::INVALID_REQUEST
        }
    );

    // A READ response to nothing: dropped, counted, the QP untouched.
    let mut l = lone(access::ALL, Transport::default());
    l.send(
        IbHeaders {
            bth: bth(roce::opcode::READ_RESPONSE_ONLY, 0x500, false),
            aeth: Some(Aeth {
                kind: AckKind::Ack { credits: 31 },
                msn: 1,
            }),
            ..Default::default()
        },
        b"unasked",
    );
    assert!(l.replies().is_empty());
    let q = l.end.nic.query_qp(l.end.qp.qpn).unwrap();
    assert_eq!(q.counters.dropped.get(), 1);
    assert_eq!(l.end.state(), QpState::Rts);
}

#[test]
fn a_receive_buffer_too_small_is_a_local_length_error() {
    let mut l = lone(access::ALL, Transport::default());
    let rc = l.end.qp.post_recv(&[l.end.sge(0, 10)]).unwrap();
    l.end.qp.ring_recv_doorbell();
    l.end.fill(0, &[0xaa; 32]);
    l.send(
        IbHeaders {
            bth: bth(roce::opcode::SEND_ONLY, PEER_PSN, true),
            ..Default::default()
        },
        &[7u8; 20],
    );
    let c = l.end.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].opcode(), c[0].syndrome, c[0].wqe_counter.get()),
        (CQE_RESP_ERR, rdma_status::LOCAL_LENGTH, rc)
    );
    assert_eq!(
        aeth_of(&l.replies()[0].0),
        AckKind::Nak {
            code: nak::INVALID_REQUEST
        }
    );
    assert_eq!(
        l.end.read(10, 22),
        vec![0xaa; 22],
        "nothing beyond the buffer"
    );
    assert_eq!(l.end.state(), QpState::Err);
}

#[test]
fn no_receive_wqe_is_an_rnr_nak_and_the_psn_is_not_consumed() {
    let t = Transport {
        min_rnr_timer: 14,
        ..Transport::default()
    };
    let mut l = lone(access::ALL, t);
    let send = IbHeaders {
        bth: bth(roce::opcode::SEND_ONLY, PEER_PSN, true),
        ..Default::default()
    };
    l.send(send, b"too early");
    let r = l.replies();
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].0.bth.psn, aeth_of(&r[0].0)),
        (PEER_PSN, AckKind::RnrNak { timer: 14 })
    );
    l.end.qp.post_recv(&[l.end.sge(0, 64)]).unwrap();
    l.end.qp.ring_recv_doorbell();
    l.send(send, b"now it fits");
    assert_eq!(l.end.read(0, 11), b"now it fits");
    assert!(matches!(aeth_of(&l.replies()[0].0), AckKind::Ack { .. }));
    let c = l.end.completions();
    assert_eq!(
        (c.len(), c[0].opcode(), c[0].byte_count.get()),
        (1, CQE_RESP_SEND, 11)
    );
}

/// A burst of SENDs with no receive posted: the first earns an RNR NAK and the rest, out of
/// sequence only because of it, must not turn it into a sequence NAK — the requester has to see
/// the RNR NAK and wait out its timer (IBA 9.7.5.2.8), not spend a transport retry.
#[test]
fn an_rnr_nak_is_not_replaced_by_the_sequence_nak_of_the_rest_of_its_burst() {
    let t = Transport {
        min_rnr_timer: 9,
        ..Transport::default()
    };
    let mut l = lone(access::ALL, t);
    for k in 0..3 {
        let send = IbHeaders {
            bth: bth(roce::opcode::SEND_ONLY, PEER_PSN + k, true),
            ..Default::default()
        };
        let f = l.frame(send, b"burst");
        l.wire.transmit(&f);
    }
    l.card.run_until_idle();
    let r = l.replies();
    assert!(!r.is_empty());
    assert_eq!(
        (r[0].0.bth.psn, aeth_of(&r[0].0)),
        (PEER_PSN, AckKind::RnrNak { timer: 9 }),
        "the first answer is the RNR NAK"
    );
    assert!(
        r.iter()
            .all(|(h, _)| aeth_of(h) == AckKind::RnrNak { timer: 9 }),
        "no sequence NAK: {r:?}"
    );
}

#[test]
fn a_wqe_with_a_foreign_lkey_is_a_local_protection_error_and_the_qp_flushes() {
    let mut p = one_card(access::ALL, Transport::default());
    let other_pd = p.a.nic.create_pd().unwrap();
    let foreign =
        p.a.nic
            .register_mr(other_pd, &p.a.buf, access::ALL)
            .unwrap();
    let bad = [Sge {
        addr: p.a.va(0),
        length: 64,
        lkey: foreign.key,
    }];
    let good = [p.a.sge(0, 64)];
    p.b.qp.post_recv(&[p.b.sge(0, 64)]).unwrap();
    p.b.qp.ring_recv_doorbell();
    let mut unsignalled = wr(WQE_OP_SEND, &good, None, 0);
    unsignalled.signal = false;
    p.a.qp.post_send(&wr(WQE_OP_SEND, &bad, None, 0)).unwrap();
    p.a.qp.post_send(&unsignalled).unwrap();
    p.a.qp.post_send(&wr(WQE_OP_SEND, &good, None, 0)).unwrap();
    p.a.qp.post_recv(&[p.a.sge(4096, 64)]).unwrap();
    p.a.qp.ring_recv_doorbell();
    p.a.qp.ring_send_doorbell();
    p.run();
    let c = p.a.completions();
    // The bad WQE with its status, then every WQE behind it and the posted receive, flushed —
    // unsignalled ones included.
    let got: Vec<(u8, u8, u16)> = c
        .iter()
        .map(|c| (c.opcode(), c.syndrome, c.wqe_counter.get()))
        .collect();
    assert_eq!(
        got,
        vec![
            (CQE_REQ_ERR, rdma_status::LOCAL_PROTECTION, 0),
            (CQE_REQ_ERR, rdma_status::WR_FLUSH, 1),
            (CQE_REQ_ERR, rdma_status::WR_FLUSH, 2),
            (CQE_RESP_ERR, rdma_status::WR_FLUSH, 0),
        ]
    );
    assert_eq!(p.a.state(), QpState::Err);
    let e = p.a.eq.poll().expect("the QP's fatal event");
    assert_eq!(
        (e.event_type, e.subtype, e.data.get()),
        (EQE_QP_EVENT, qp_event::FATAL, p.a.qp.qpn)
    );
    assert!(p.b.completions().is_empty(), "nothing reached the peer");
    // Work posted in ERR is flushed too.
    p.a.qp.post_send(&wr(WQE_OP_SEND, &good, None, 0)).unwrap();
    p.a.qp.ring_send_doorbell();
    p.run();
    let c = p.a.completions();
    assert_eq!(
        (c.len(), c[0].syndrome, c[0].wqe_counter.get()),
        (1, rdma_status::WR_FLUSH, 3)
    );
}

/// A bad WQE behind one already sent and not yet acknowledged: the error status goes to the bad
/// WQE, and the one before it — which the error state overtakes — completes first, flushed, so
/// send completions stay in posting order.
#[test]
fn a_local_error_behind_an_unacknowledged_wqe_is_reported_on_the_bad_wqe() {
    let mut l = lone(access::ALL, Transport::default());
    let other_pd = l.end.nic.create_pd().unwrap();
    let foreign = l
        .end
        .nic
        .register_mr(other_pd, &l.end.buf, access::ALL)
        .unwrap();
    let bad = [Sge {
        addr: l.end.va(0),
        length: 64,
        lkey: foreign.key,
    }];
    let good = [l.end.sge(0, 64)];
    l.end
        .qp
        .post_send(&wr(WQE_OP_RDMA_WRITE, &good, Some((0x1000, 0x77)), 0))
        .unwrap();
    l.end.qp.post_send(&wr(WQE_OP_SEND, &bad, None, 0)).unwrap();
    l.end.qp.ring_send_doorbell();
    l.card.run_until_idle();
    let sent = l.replies();
    assert_eq!(
        sent.len(),
        1,
        "the WRITE went out (and the peer has not answered)"
    );
    assert_eq!(sent[0].0.bth.opcode, roce::opcode::WRITE_ONLY);
    let got: Vec<(u8, u8, u16)> = l
        .end
        .completions()
        .iter()
        .map(|c| (c.opcode(), c.syndrome, c.wqe_counter.get()))
        .collect();
    assert_eq!(
        got,
        vec![
            (CQE_REQ_ERR, rdma_status::WR_FLUSH, 0),
            (CQE_REQ_ERR, rdma_status::LOCAL_PROTECTION, 1),
        ]
    );
    assert_eq!(l.end.state(), QpState::Err);
}

#[test]
fn retries_and_rnr_retries_run_out_into_the_error_state() {
    // A peer that never answers: the requester times out retry_cnt + 1 times.
    let t = Transport {
        timeout: 4,
        retry_cnt: 3,
        ..Transport::default()
    };
    let mut l = lone(access::ALL, t);
    let s = [l.end.sge(0, 100)];
    l.end.qp.post_send(&wr(WQE_OP_SEND, &s, None, 0)).unwrap();
    l.end
        .qp
        .post_send(&wr(WQE_OP_RDMA_WRITE, &s, Some((0x1000, 7)), 0))
        .unwrap();
    l.end.qp.ring_send_doorbell();
    let mut now = 0;
    let mut sent = 0;
    for _ in 0..100 {
        now += 100_000;
        l.card.nic.set_clock(Some(now));
        l.card.run_until_idle();
        sent += l.replies().len();
    }
    assert_eq!(
        sent,
        2 * 4,
        "both packets, sent once and retried three times"
    );
    let c = l.end.completions();
    let got: Vec<(u8, u16)> = c
        .iter()
        .map(|c| (c.syndrome, c.wqe_counter.get()))
        .collect();
    assert_eq!(
        got,
        vec![(rdma_status::RETRY_EXCEEDED, 0), (rdma_status::WR_FLUSH, 1)]
    );
    assert_eq!(l.end.state(), QpState::Err);
    let q = l.end.nic.query_qp(l.end.qp.qpn).unwrap();
    assert_eq!(q.counters.timeouts.get(), 4);

    // RNR NAKs: with rnr_retry 2 the third RNR NAK ends it; with 7 it waits for ever.
    for (rnr_retry, naks, ends) in [(2u8, 3usize, true), (7, 20, false)] {
        let t = Transport {
            rnr_retry,
            ..Transport::default()
        };
        let mut l = lone(access::ALL, t);
        let mut now = 0;
        l.card.nic.set_clock(Some(now));
        let s = [l.end.sge(0, 8)];
        l.end.qp.post_send(&wr(WQE_OP_SEND, &s, None, 0)).unwrap();
        l.end.qp.ring_send_doorbell();
        let mut rnrs = 0;
        for _ in 0..naks * 4 {
            l.card.run_until_idle();
            for (h, _) in l.replies() {
                if rnrs < naks {
                    rnrs += 1;
                    let nak = IbHeaders {
                        bth: bth(roce::opcode::ACKNOWLEDGE, h.bth.psn, false),
                        aeth: Some(Aeth {
                            kind: AckKind::RnrNak { timer: 1 },
                            msn: 0,
                        }),
                        ..Default::default()
                    };
                    l.send(nak, &[]);
                }
            }
            now += 20_000;
            l.card.nic.set_clock(Some(now));
        }
        let c = l.end.completions();
        let q = l.end.nic.query_qp(l.end.qp.qpn).unwrap();
        assert_eq!(
            q.counters.rnr_naks_received.get(),
            naks as u64,
            "rnr_retry {rnr_retry}"
        );
        if ends {
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].syndrome, rdma_status::RNR_RETRY_EXCEEDED);
            assert_eq!(l.end.state(), QpState::Err);
        } else {
            assert!(c.is_empty(), "still trying");
            assert_eq!(l.end.state(), QpState::Rts);
        }
    }
}

#[test]
fn a_refused_modify_leaves_the_qp_as_it_was() {
    use qp_attr::*;
    let mut l = lone(access::ALL, Transport::default());
    let before = l.end.nic.query_qp(l.end.qp.qpn).unwrap();
    // RTS -> RTR does not exist; RTS -> RTS with SQ_PSN is not allowed; a GID index not set.
    let mut a = before.attr;
    a.qp_state = QpState::Rtr as u8;
    let e = l.end.nic.modify_qp(l.end.qp.qpn, STATE, &a).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BadState));
    a.qp_state = QpState::Rts as u8;
    a.sq_psn.set(0x42);
    let e = l
        .end
        .nic
        .modify_qp(l.end.qp.qpn, STATE | SQ_PSN, &a)
        .unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BadParam));
    let after = l.end.nic.query_qp(l.end.qp.qpn).unwrap();
    assert_eq!(after.attr, before.attr);
    assert_eq!(after.next_psn.get(), before.next_psn.get());
    // A QP number of another function, or none at all.
    let e = l.end.nic.modify_qp(0x7777, STATE, &a).unwrap_err();
    assert_eq!(e.status(), Some(CmdStatus::BadResource));
    // Destroying what a QP holds is refused while it lives.
    let pd = l.end.pd;
    assert_eq!(
        l.end.nic.destroy_pd(pd).unwrap_err().status(),
        Some(CmdStatus::ResourceBusy)
    );
    assert_eq!(
        l.end.nic.destroy_cq(l.end.cq.cqn).unwrap_err().status(),
        Some(CmdStatus::ResourceBusy)
    );
}

// ---- Partitions (IBA §9.6.1.1, §10.9) --------------------------------------------------------

// SEND ONLY requests from the peer to QP 0x100, built by scapy (`scapy.contrib.roce`, ICRC per
// A17.3.3), an implementation independent of the formats crate:
//
//   Ether(src="02:00:00:00:00:09", dst="02:fd:00:00:00:00")
//     / IP(src="10.0.0.9", dst="10.0.0.1", ttl=64, id=N, flags="DF")
//     / UDP(sport=0xc000, dport=4791, chksum=0)
//     / BTH(opcode=0x04, padcount=P, pkey=PKEY, dqpn=0x100, ackreq=1, psn=PSN)
//     / Raw(payload + P zero bytes)
//
// with (PKEY, PSN, payload): (0x1234, 0x10, "partition"), (0x7fff, 0x10, "limited"),
// (0x8000, 0x11, "invalid"), (0xffff, 0x11, "default"), (0x0123, 0x10, "limited"),
// (0x8123, 0x10, "full member"), (0x0123, 0x11, "limited again").
const SEND_PKEY_1234: &str = "02fd0000000002000000000908004500003800014000401126ab0a0000090a000001c00012b700240000043012340000010080000010706172746974696f6e000000154b6da0";
const SEND_PKEY_7FFF: &str = "02fd0000000002000000000908004500003400024000401126ae0a0000090a000001c00012b70020000004107fff00000100800000106c696d69746564002541ae69";
const SEND_PKEY_8000: &str = "02fd0000000002000000000908004500003400034000401126ad0a0000090a000001c00012b700200000041080000000010080000011696e76616c696400154c91f8";
const SEND_PKEY_FFFF: &str = "02fd0000000002000000000908004500003400044000401126ac0a0000090a000001c00012b7002000000410ffff000001008000001164656661756c7400c407fa2a";
const SEND_PKEY_0123: &str = "02fd0000000002000000000908004500003400054000401126ab0a0000090a000001c00012b7002000000410012300000100800000106c696d6974656400745e62d2";
const SEND_PKEY_8123: &str = "02fd0000000002000000000908004500003800064000401126a60a0000090a000001c00012b70024000004108123000001008000001066756c6c206d656d626572002dd3d799";
const SEND_PKEY_0123_NEXT: &str = "02fd0000000002000000000908004500003c00074000401126a10a0000090a000001c00012b7002800000430012300000100800000116c696d6974656420616761696e00000013fd5297";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

impl Lone {
    /// The vectors' receiver: our MAC and QP number are what scapy was given.
    fn check_vector_identity(&self) {
        assert_eq!(self.end.nic.mac(), [0x02, 0xfd, 0, 0, 0, 0]);
        assert_eq!(self.end.qp.qpn, 0x100);
    }

    /// Posts `n` 64-byte receives from offset 0.
    fn post_receives(&mut self, n: usize) {
        for i in 0..n {
            let sge = self.end.sge(i * 64, 64);
            self.end.qp.post_recv(&[sge]).unwrap();
        }
        self.end.qp.ring_recv_doorbell();
        self.card.run_until_idle();
    }

    /// The receive completions so far: (bytes, the data received).
    fn received(&mut self) -> Vec<Vec<u8>> {
        let cqes = self.end.completions();
        cqes.iter()
            .filter(|c| c.opcode() == CQE_RESP_SEND)
            .map(|c| {
                self.end.read(
                    usize::from(c.wqe_counter.get()) * 64,
                    c.byte_count.get() as usize,
                )
            })
            .collect()
    }

    /// Moves the QP into the partition of P_Key table entry `index` (RTS → SQD → SQD → RTS,
    /// the transitions that take a P_Key index, IBA Table 91).
    fn use_pkey_index(&mut self, index: u16) {
        use qp_attr::*;
        let qpn = self.end.qp.qpn;
        for (state, mask, pkey_index) in [
            (QpState::Sqd, STATE, 0),
            (QpState::Sqd, STATE | PKEY_INDEX, index),
            (QpState::Rts, STATE, 0),
        ] {
            let mut a = QpAttr {
                qp_state: state as u8,
                ..Default::default()
            };
            a.pkey_index.set(pkey_index);
            self.end.nic.modify_qp(qpn, mask, &a).unwrap();
            self.card.run_until_idle();
        }
        assert_eq!(
            self.end.nic.query_qp(qpn).unwrap().attr.pkey_index.get(),
            index
        );
    }
}

/// A packet whose P_Key matches no entry of the port's table — another partition, or the
/// invalid partition 0 — is dropped silently and counted, with a valid ICRC at the expected
/// PSN: no ACK, no delivery, the PSN not consumed. A limited member of the default partition
/// (0x7FFF) is taken, since the port's entry (0xFFFF) is a full member.
#[test]
fn a_packet_whose_pkey_matches_no_entry_is_dropped_silently_and_counted() {
    let mut l = lone(access::ALL, Transport::default());
    l.check_vector_identity();
    l.post_receives(4);
    l.inject(&hex(SEND_PKEY_1234));
    assert!(l.replies().is_empty(), "no answer");
    assert_eq!(l.counters().rx_bad_pkey.get(), 1);
    assert_eq!(
        l.counters().rx_icrc_errors.get(),
        0,
        "scapy's ICRC is right"
    );
    assert!(l.received().is_empty(), "nothing delivered");
    assert_eq!(
        l.end.nic.query_qp(0x100).unwrap().expected_psn.get(),
        PEER_PSN
    );

    l.inject(&hex(SEND_PKEY_7FFF));
    let replies = l.replies();
    assert_eq!(replies.len(), 1);
    assert!(matches!(aeth_of(&replies[0].0), AckKind::Ack { .. }));
    assert_eq!(replies[0].0.bth.pkey, 0xffff, "ours: the QP's entry");
    assert_eq!(l.received(), vec![b"limited".to_vec()]);

    l.inject(&hex(SEND_PKEY_8000));
    assert!(l.replies().is_empty());
    assert_eq!(l.counters().rx_bad_pkey.get(), 2);
    l.inject(&hex(SEND_PKEY_FFFF));
    assert_eq!(l.replies().len(), 1);
    assert_eq!(l.received(), vec![b"default".to_vec()]);
    assert_eq!(l.end.state(), QpState::Rts);
}

/// A QP sends with the P_Key its index names and matches packets against it, with IBA's
/// membership rule: two limited members do not talk, a full member talks to both. The table is
/// written through the command interface; a function reset restores the default.
#[test]
fn a_qp_sends_and_matches_with_the_pkey_of_its_index() {
    let mut l = lone(access::ALL, Transport::default());
    l.check_vector_identity();
    l.end.nic.set_pkey(1, 0x0123).unwrap();
    assert_eq!(l.end.nic.query_pkey(1).unwrap(), 0x0123);
    assert_eq!(l.end.nic.query_pkey(0).unwrap(), 0xffff);
    assert!(l.end.nic.set_pkey(PKEY_TABLE_ENTRIES, 0xffff).is_err());
    assert!(l.end.nic.query_pkey(PKEY_TABLE_ENTRIES).is_err());
    l.use_pkey_index(1);
    l.post_receives(4);

    // Limited to limited: dropped.
    l.inject(&hex(SEND_PKEY_0123));
    assert!(l.replies().is_empty());
    assert_eq!(l.counters().rx_bad_pkey.get(), 1);
    // A full member of the partition: taken, and the ACK carries the QP's own (limited) P_Key.
    l.inject(&hex(SEND_PKEY_8123));
    let replies = l.replies();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].0.bth.pkey, 0x0123);
    assert_eq!(l.received(), vec![b"full member".to_vec()]);
    // The entry becomes a full member: the limited peer is taken now.
    l.end.nic.set_pkey(1, 0x8123).unwrap();
    l.inject(&hex(SEND_PKEY_0123_NEXT));
    let replies = l.replies();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].0.bth.pkey, 0x8123);
    assert_eq!(l.received(), vec![b"limited again".to_vec()]);
    // A QP cannot name an entry beyond the table.
    let mut a = QpAttr {
        qp_state: QpState::Sqd as u8,
        ..Default::default()
    };
    a.pkey_index.set(PKEY_TABLE_ENTRIES);
    l.end.nic.modify_qp(0x100, qp_attr::STATE, &a).unwrap();
    l.card.run_until_idle();
    assert!(l
        .end
        .nic
        .modify_qp(0x100, qp_attr::STATE | qp_attr::PKEY_INDEX, &a)
        .is_err());
}
