//! The RoCEv2 receive path against live QPs: a remote peer on the uplink sends anything — raw
//! frames, and RoCE packets with valid ICRC whose opcode, PSN, QPN, RETH/AETH/AtomicETH fields
//! and payload are the fuzzer's — while the local QP has receives posted and its own requests
//! (SEND, WRITE, READ, atomics) outstanding, so forged responses and ACKs reach the requester
//! too; the NIC clock advances as the input says so retransmit and RNR timers fire. The function
//! is also a StaR server (`docs/nic-interface.md` §16): the peer sends StaR packets of every kind
//! with valid ICRCs, addresses near the QP's buffer or anywhere, CQEPs naming any CQ. A second
//! QP is the stateful client of a StaR connection to the same peer (§16.6): the peer's WQEPs
//! for its send, receive and memory queues (well-formed region updates or not), and RAs, SDPs
//! and EAs answering anything, reach it. Everything the card sends back must be a RoCE or StaR
//! packet to the peer with a valid ICRC; nothing is written outside mapped memory; a reset and
//! a bring-up move verified RDMA traffic. The first byte chooses the card's receiver:
//! go-back-N, or a reorder unit whose out-of-order QPs place or keep whatever arrives ahead and
//! take responses out of order (`docs/nic-interface.md` §17).
#![no_main]

use fld_abi::nic::{
    op, star_guard_kind, StarGuardIn, StarPeerIn, StarServerIn, STAR_GUARD_ANY_CQ, STAR_SERVE,
};
use fld_abi::nic::{
    RdmaWqe, WqeData, WQE_OP_ATOMIC_CS, WQE_OP_ATOMIC_FA, WQE_OP_RDMA_READ, WQE_OP_RDMA_WRITE,
    WQE_OP_SEND,
};
use fld_abi::wire::roce::star::{
    StarCq, StarData, StarHeaders, StarKind, StarPacket, StarQueue, StarRegionOp, StarRegionUpdate,
    StarWqe,
};
use fld_abi::wire::roce::{
    self, ipv4_gid, AckKind, Aeth, AtomicAckEth, AtomicEth, BthRepr, IbHeaders, IbPacket, ImmDt,
    Reth, RoceAddress,
};
use fld_abi::wire::udp_offsets;
use fld_device::mock::{MockHost, MockQp};
use fld_device::nic::reorder::ReceiverMode;
use fld_device::wire::{link, Wire};
use fld_fuzz::{assert_rdma_recovers, prepared_rdma_nic, Input};
use libfuzzer_sys::fuzz_target;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
const PEER_IP: [u8; 4] = [10, 0, 0, 9];
const PEER_QPN: u32 = 0x999;
const PSN: u32 = 0x10;
const BUF: usize = 32 << 10;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the RC responders' receiver: go-back-N or a reorder unit, whose
    // pool and caches the packets ahead then fill, swap and run out (LEFT §3).
    let receiver = match data.first().copied().unwrap_or(0) % 4 {
        0 | 1 => ReceiverMode::GoBackN,
        2 => ReceiverMode::Left,
        _ => ReceiverMode::MeloPlus,
    };
    let data = data.get(1..).unwrap_or_default();
    let (mut kept, (mut qp, client)) = prepared_rdma_nic(receiver, bring_up);
    let h = &mut kept.host;
    let (uplink, mut peer) = link(256);
    h.nic.set_uplink(Box::new(uplink));
    let mut now = 0u64;
    h.nic.set_clock(Some(now));
    let our_mac = h.nic_mac(0);
    let address = RoceAddress {
        src_mac: PEER_MAC,
        dst_mac: our_mac,
        src_gid: ipv4_gid(PEER_IP),
        dst_gid: qp.gid,
        src_port: roce::SOURCE_PORT_BASE,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
    };
    let mut input = Input::new(data);
    let mut frame = vec![0u8; 9216];
    let mut ident = 0u16;
    for _ in 0..128 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        match ctl & 7 {
            0 => {
                let len = input.u16() as usize % 1600;
                peer.transmit(input.bytes(len));
            }
            1 if ctl & 0x08 != 0 => {
                // A StaR packet with a valid ICRC.
                let kind = input.pick(&[
                    StarKind::Wqep,
                    StarKind::Cqep,
                    StarKind::Ea,
                    StarKind::Rdp,
                    StarKind::Ra,
                    StarKind::Gd,
                    StarKind::Sdp,
                ]);
                let dma_addr = if ctl & 0x40 != 0 {
                    input.u64()
                } else {
                    qp.buf + u64::from(input.u16()) % BUF as u64
                };
                let dest_qp = match ctl & 0x80 != 0 {
                    true => client.qpn,
                    false => input.u32() & roce::QPN_MASK,
                };
                let mut headers = StarHeaders::new(
                    kind,
                    dest_qp,
                    // Near the client's next expected element sometimes.
                    match ctl & 0x10 != 0 {
                        true => u32::from(input.u8() % 4),
                        false => input.u32() & roce::PSN_MASK,
                    },
                    if ctl & 0x20 != 0 {
                        input.u16()
                    } else {
                        roce::DEFAULT_PKEY
                    },
                );
                let len = u32::from(input.u16()) % 4200;
                if kind == StarKind::Wqep {
                    headers.wqe = Some(StarWqe {
                        queue: input.pick(&[
                            StarQueue::Send,
                            StarQueue::Receive,
                            StarQueue::Memory,
                        ]),
                        index: input.u16(),
                    });
                }
                let memory = headers.wqe.is_some_and(|w| w.queue == StarQueue::Memory);
                let payload: Vec<u8> = match kind {
                    StarKind::Wqep if memory && ctl & 0x40 == 0 => {
                        // A well-formed update: a register or a deregister of a few pages.
                        let mut u = StarRegionUpdate {
                            op: input.pick(&[StarRegionOp::Register, StarRegionOp::Deregister]),
                            log_page_size: 12,
                            key: input.u32(),
                            addr: u64::from(input.u32()) << 12,
                            length: u64::from(input.u16()),
                            access: input.u32() & 0xf,
                            pages: 0,
                        };
                        u.pages = u.covering_pages().unwrap_or(0);
                        let pages: Vec<u64> = (0..u.pages)
                            .map(|_| qp.buf + (u64::from(input.u8()) << 12))
                            .collect();
                        let mut b = vec![0u8; 32 + pages.len() * 8];
                        u.emit(&pages, &mut b);
                        b
                    }
                    StarKind::Cqep => input.bytes(64).to_vec(),
                    StarKind::Rdp | StarKind::Wqep | StarKind::Sdp => {
                        (0..len).map(|i| i as u8 ^ ctl).collect()
                    }
                    _ => Vec::new(),
                };
                if matches!(kind, StarKind::Rdp | StarKind::Gd) {
                    headers.data = Some(StarData {
                        dma_addr,
                        length: if kind == StarKind::Rdp {
                            len
                        } else {
                            input.u16().into()
                        },
                        reply_qpn: PEER_QPN,
                    });
                }
                if kind == StarKind::Cqep {
                    headers.cq = Some(StarCq {
                        cqn: if ctl & 0x10 != 0 {
                            input.u32()
                        } else {
                            qp.cq.id
                        },
                        reply_qpn: PEER_QPN,
                    });
                }
                ident = ident.wrapping_add(1);
                if let Some(n) = address.emit(&headers, &payload, ident, &mut frame) {
                    peer.transmit(&frame[..n]);
                }
            }
            1 | 2 => {
                // A transport packet with a valid ICRC: near-expected PSN unless asked, to our
                // QP unless asked, extended headers as the opcode wants them.
                let opcode = input.u8();
                let psn = match input.u8() % 4 {
                    0 => input.u32() & roce::PSN_MASK,
                    n => roce::psn_add(PSN, u32::from(input.u8()) * u32::from(n)),
                };
                let dest_qp = if ctl & 0x80 != 0 { input.u32() } else { qp.qpn };
                let va = if ctl & 0x40 != 0 {
                    input.u64()
                } else {
                    qp.buf + u64::from(input.u16()) % BUF as u64
                };
                let rkey = if ctl & 0x20 != 0 { input.u32() } else { qp.key };
                let info = roce::opcode_info(opcode);
                let wants = |f: fn(&roce::OpcodeInfo) -> bool| info.as_ref().is_some_and(f);
                let headers = IbHeaders {
                    bth: BthRepr {
                        opcode,
                        solicited: ctl & 0x08 != 0,
                        pkey: roce::DEFAULT_PKEY,
                        dest_qp: dest_qp & roce::QPN_MASK,
                        ack_request: ctl & 0x10 != 0,
                        psn,
                        ..Default::default()
                    },
                    reth: wants(|i| i.reth).then(|| Reth {
                        virtual_address: va,
                        rkey,
                        dma_length: input.u16() as u32,
                    }),
                    aeth: wants(|i| i.aeth).then(|| Aeth {
                        kind: match input.u8() % 3 {
                            0 => AckKind::Ack {
                                credits: input.u8() & 0x1f,
                            },
                            1 => AckKind::RnrNak {
                                timer: input.u8() & 0x1f,
                            },
                            _ => AckKind::Nak {
                                code: input.u8() & 0x1f,
                            },
                        },
                        msn: input.u32() & 0xff_ffff,
                    }),
                    imm: wants(|i| i.imm).then(|| ImmDt(input.u32())),
                    atomic_eth: wants(|i| i.atomic_eth).then(|| AtomicEth {
                        virtual_address: va & !7,
                        rkey,
                        swap_add: input.u64(),
                        compare: input.u64(),
                    }),
                    atomic_ack_eth: wants(|i| i.atomic_ack_eth).then(|| AtomicAckEth {
                        original: input.u64(),
                    }),
                };
                let len = input.u16() as usize % 4200;
                let payload: Vec<u8> = (0..len).map(|i| i as u8 ^ ctl).collect();
                ident = ident.wrapping_add(1);
                if let Some(n) = address.emit(&headers, &payload, ident, &mut frame) {
                    if ctl & 7 == 2 {
                        // Damaged on the way: a flipped byte somewhere after the Ethernet header.
                        let at = 14 + input.u16() as usize % (n - 14);
                        frame[at] ^= input.u8() | 1;
                    }
                    peer.transmit(&frame[..n]);
                }
            }
            3 => {
                let n = 1 + input.u8() as usize % 2;
                let sges: Vec<_> = (0..n)
                    .map(|_| {
                        let off = u64::from(input.u16()) % BUF as u64;
                        qp.sge(off, u32::from(input.u16()) % (BUF as u32 - off as u32 + 1))
                    })
                    .collect();
                qp.post_recv(h, &sges);
            }
            4 => {
                let opcode = input.pick(&[
                    WQE_OP_SEND,
                    WQE_OP_RDMA_WRITE,
                    WQE_OP_RDMA_READ,
                    WQE_OP_ATOMIC_CS,
                    WQE_OP_ATOMIC_FA,
                ]);
                let atomic = matches!(opcode, WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA);
                let off = (u64::from(input.u16()) % (BUF as u64 - 8)) & !7;
                let len = if atomic {
                    8
                } else {
                    u32::from(input.u16()) % (BUF as u32 - off as u32 + 1)
                };
                let s = [qp.sge(off, len)];
                let wqe = RdmaWqe {
                    opcode,
                    signal: ctl & 0x80 != 0,
                    solicited: false,
                    fence: ctl & 0x40 != 0,
                    imm: 0,
                    remote: (opcode != WQE_OP_SEND).then(|| (input.u64() & !7, input.u32())),
                    atomic: atomic.then(|| (input.u64(), input.u64())),
                    data: WqeData::Gather(&s),
                };
                qp.post_send(h, &wqe);
            }
            5 => {
                while qp.cq.poll_cqe(h).is_some() {}
                qp.cq.update_ci(h, 0, fld_abi::nic::db::CQ_BASE);
                while qp.eq.poll_eqe(h).is_some() {}
                qp.eq.update_ci(h, 0, fld_abi::nic::db::EQ_BASE);
            }
            6 => {
                // Time passes: microseconds to seconds, so ACK and RNR timers expire.
                now += 1000u64 << (input.u8() % 24);
                h.nic.set_clock(Some(now));
            }
            _ => {
                h.run(input.u8() as usize % 32 + 1);
            }
        }
        h.run(64);
        check_replies(&mut peer, &mut frame, our_mac);
    }
    h.run(256);
    check_replies(&mut peer, &mut frame, our_mac);
    assert_rdma_recovers(h);
});

/// The QP the peer talks to, a StaR server on its function, and the QP that is the stateful
/// client of a StaR connection to the peer, with its server's updates posted to an RQ: what
/// every input starts from (kept, [`prepared_rdma_nic`]).
fn bring_up(h: &mut MockHost) -> (MockQp, MockQp) {
    let qp = h.create_rdma_qp(0, [10, 0, 0, 1], BUF);
    h.connect_qp(&qp, PEER_QPN, ipv4_gid(PEER_IP), PEER_MAC, PSN);
    let star = StarServerIn {
        flags: U32::new(STAR_SERVE),
        control_cqn: U32::new(qp.cq.id),
    };
    assert!(h.command(0, op::SET_STAR_SERVER, star.as_bytes()).ok());
    // The StaR client: its server's updates into an RQ, every StaR packet to the peer allowed
    // out (the function is the manager), so its answers and requests leave.
    let client = h.create_rdma_qp(0, [10, 0, 0, 1], BUF);
    let mut updates = h.create_rq(0, client.cq.id, 3, None);
    for i in 0..8u64 {
        updates.post(h, client.buf + i * 2048, 2048);
    }
    updates.ring(h, 0);
    let peer_in = StarPeerIn {
        qpn: U32::new(client.qpn),
        server_send_cqn: U32::new(qp.cq.id),
        server_recv_cqn: U32::new(qp.cq.id),
        update_rqn: U32::new(updates.id),
    };
    assert!(h.command(0, op::SET_STAR_PEER, peer_in.as_bytes()).ok());
    h.connect_qp(&client, PEER_QPN, ipv4_gid(PEER_IP), PEER_MAC, PSN);
    let allow = StarGuardIn {
        function: U16::new(0),
        kinds: (0xc0..=0xc6).fold(0, |k, op| k | star_guard_kind(op)),
        rsvd: 0,
        cqn: U32::new(STAR_GUARD_ANY_CQ),
        dst_gid: ipv4_gid(PEER_IP),
        lo: U64::new(0),
        hi: U64::new(u64::MAX),
    };
    assert!(h.command(0, op::STAR_GUARD_ADD, allow.as_bytes()).ok());
    (qp, client)
}

/// Whatever the card sent to the peer is a RoCE packet to the peer's QP, from the card's MAC,
/// with a valid ICRC.
fn check_replies(peer: &mut fld_device::wire::LinkEnd, buf: &mut [u8], our_mac: [u8; 6]) {
    while let Some(n) = peer.receive(buf) {
        let f = &buf[..n];
        assert_eq!(
            (&f[..6], &f[6..12]),
            (&PEER_MAC[..], &our_mac[..]),
            "addressed"
        );
        let o = udp_offsets(f).expect("a UDP frame");
        let body = &f[o.payload()..o.ip_end];
        let (dest_qp, icrc) = if roce::star::is_star_opcode(body[0]) {
            // The server's answers (RA, SDP, EA), or the client's requests and EAs.
            let p = StarPacket::parse(body).expect("a StaR packet");
            assert!(p.kind != StarKind::Wqep, "only a driver sends WQEPs");
            (p.headers.bth.dest_qp, p.icrc)
        } else {
            let p = IbPacket::parse(body).expect("a RoCE packet");
            (p.headers.bth.dest_qp, p.icrc)
        };
        assert_eq!(roce::icrc(f, o.ip, o.ip_end, o.ipv6), Some(icrc), "ICRC");
        assert_eq!(dest_qp, PEER_QPN, "to the peer's QP");
    }
}
