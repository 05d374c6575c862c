//! LEFT's reorder logic on the RoCE receive path (§3.1, §3.5) between two cards on a cable that
//! reorders heavily, for every receiver: single-packet WRITEs ahead of the expected PSN are
//! placed where their RETH says; SENDs, multi-packet WRITEs, immediates, READs and atomics wait
//! in the reorder buffer and are executed in PSN order. Everything arrives byte-exact and
//! completes in order; go-back-N gets there by NAKs and resending, the reorder units without
//! either, by selective retransmission under loss, and by an RNR NAK and a go-back when they
//! run out of room; their pools give every block back. The receiver is a QP's choice.

mod common;

use common::rdma::*;
use fld_abi::nic::*;
use fld_device::nic::reorder::ReceiverMode;
use fld_device::nic::NicConfig;
use fld_device::wire::Faults;
use fld_driver::PciDevice;

const MESSAGES: usize = 256;
const SIZE: usize = 1024;

/// A WRITEs `MESSAGES` messages of `SIZE` bytes of a pattern (`seed`) to consecutive places
/// of B's buffer, every one signalled or only the last, and the pair runs until idle; returns
/// what was written.
fn write_all(p: &mut Pair, seed: u8, signal_each: bool) -> Vec<u8> {
    let data = pattern(MESSAGES * SIZE, seed);
    p.a.fill(0, &data);
    for i in 0..MESSAGES {
        let sge = [p.a.sge(i * SIZE, SIZE)];
        let remote = Some((p.b.va(i * SIZE), p.b.mr.key));
        let mut w = wr(WQE_OP_RDMA_WRITE, &sge, remote, 0);
        w.signal = signal_each || i + 1 == MESSAGES;
        p.a.qp.post_send(&w).unwrap();
    }
    p.a.qp.ring_send_doorbell();
    p.run();
    data
}

/// A sends `MESSAGES` single-packet WRITEs of `SIZE` bytes to consecutive places of B's buffer
/// over a cable that holds back 40 % of packets by up to 16 places; returns what B's QP
/// counted (NAKs sent, duplicates) and what A's resent.
fn writes_over_a_reordering_cable(receiver: ReceiverMode) -> (u64, u64, Pair) {
    let faults = Faults {
        reorder: 0.4,
        reorder_depth: 16,
        seed: 11,
        ..Default::default()
    };
    let nic = NicConfig {
        receiver,
        ..Default::default()
    };
    let mut p = two_cards_with(faults, Transport::default(), nic);
    let data = write_all(&mut p, 5, false);
    let c = p.a.completions();
    assert_eq!(c.len(), 1, "{receiver:?}");
    assert_eq!((c[0].opcode(), c[0].syndrome), (CQE_REQ, 0), "{receiver:?}");
    assert!(
        p.b.read(0, data.len()) == data,
        "{receiver:?}: every byte where it belongs"
    );
    let qb = p.b.nic.query_qp(p.b.qp.qpn).unwrap().counters;
    (qb.seq_naks_sent.get(), qb.duplicates.get(), p)
}

#[test]
fn reordered_writes_are_placed_without_a_nak_and_the_pool_is_given_back() {
    let (naks, _, mut p) = writes_over_a_reordering_cable(ReceiverMode::GoBackN);
    assert!(naks > 0, "go-back-N NAKs the reordered packets");
    let resent =
        p.a.nic
            .query_qp(p.a.qp.qpn)
            .unwrap()
            .counters
            .retransmitted
            .get();
    assert!(resent > 0);
    for mode in [
        ReceiverMode::Left,
        ReceiverMode::LeftMinus,
        ReceiverMode::MeloPlus,
        ReceiverMode::Ideal,
    ] {
        let (naks, duplicates, mut p) = writes_over_a_reordering_cable(mode);
        assert_eq!(naks, 0, "{mode:?}: nothing NAKed");
        assert_eq!(duplicates, 0, "{mode:?}: nothing sent twice");
        let qa = p.a.nic.query_qp(p.a.qp.qpn).unwrap().counters;
        assert_eq!(
            qa.retransmitted.get(),
            0,
            "{mode:?}: nothing resent: {qa:?}"
        );
        let k = p.cards[1].nic.reorder_counters();
        assert!(k.recorded > 20, "{mode:?}: {k:?}");
        assert_eq!(k.refused, 0, "{mode:?}");
        assert_eq!(k.blocks_in_use, 0, "{mode:?}: every block given back");
        // A's WRITEs to B completed in order: B's expected PSN is past the last of them.
        let qb = p.b.nic.query_qp(p.b.qp.qpn).unwrap();
        assert_eq!(
            qb.expected_psn.get(),
            (PSNS.0 + MESSAGES as u32) & 0xff_ffff,
            "{mode:?}"
        );
    }
}

/// With loss as well, a reorder unit's connection recovers by the sender's timeout: what the
/// receiver holds already is dropped as a duplicate when it comes again, nothing lands twice,
/// and the pool gives every block back.
#[test]
fn reordered_and_lost_writes_recover_by_timeout() {
    for mode in [ReceiverMode::Left, ReceiverMode::MeloPlus] {
        let faults = Faults {
            loss: 0.03,
            reorder: 0.3,
            reorder_depth: 8,
            seed: 23,
            ..Default::default()
        };
        let t = Transport {
            timeout: 8,
            ..Transport::default()
        };
        let nic = NicConfig {
            receiver: mode,
            ..Default::default()
        };
        let mut p = two_cards_with(faults, t, nic);
        let data = write_all(&mut p, 9, true);
        let c = p.a.completions();
        assert_eq!(c.len(), MESSAGES, "{mode:?}");
        assert!(c.iter().all(|c| c.opcode() == CQE_REQ && c.syndrome == 0));
        // In order, one per WRITE.
        let counters: Vec<u16> = c.iter().map(|c| c.wqe_counter.get()).collect();
        assert!(counters.windows(2).all(|w| w[0] < w[1]), "{mode:?}");
        assert!(p.b.read(0, data.len()) == data, "{mode:?}");
        let qa = p.a.nic.query_qp(p.a.qp.qpn).unwrap().counters;
        assert!(qa.timeouts.get() > 0, "{mode:?}: losses cost timeouts");
        let k = p.cards[1].nic.reorder_counters();
        assert!(k.recorded > 0 && k.duplicates > 0, "{mode:?}: {k:?}");
        assert_eq!(k.blocks_in_use, 0, "{mode:?}");
    }
}

/// Where the mixed workload puts things: B's receive buffers, B's WRITE target, B's READ
/// source and atomic counter; A's READ destinations and atomic results.
const RECV_AT: usize = 0;
const RECV_SLOT: usize = 8192;
const WRITE_AT: usize = 2 << 20;
const READ_FROM: usize = 4 << 20;
const COUNTER_AT: usize = 6 << 20;
const SMALL_AT: usize = 7 << 20;
const SMALL: usize = 512;
const A_READ_AT: usize = 2 << 20;
const A_ATOMIC_AT: usize = 6 << 20;
const ROUNDS: usize = 24;
const ADD: u64 = 3;

/// Round `i` of the mixed workload: a SEND of several packets, a multi-packet WRITE, a WRITE
/// with immediate, a READ, a fetch-and-add and a single-packet WRITE, all posted at once; the sizes vary per round
/// so messages end mid-packet.
fn send_len(i: usize) -> usize {
    1 + (i * 1777) % (5 * 1024)
}
fn write_len(i: usize) -> usize {
    2048 + (i * 311) % 2048
}

/// A runs `ROUNDS` rounds of the mixed workload at B over a cable that reorders 40 % of frames
/// by up to 16 places (and loses `loss` of them); every byte lands where it belongs and every
/// completion comes in order on both sides, as an in-order cable would have it.
fn mixed_over_a_reordering_cable(receiver: ReceiverMode, loss: f64, reorder_bdp: u32) -> Pair {
    let faults = Faults {
        reorder: 0.4,
        reorder_depth: 16,
        loss,
        seed: 31,
        ..Default::default()
    };
    // A frame the cable holds back when traffic stops leaves up to 16 idle steps (1.6 ms)
    // later: with loss, a short local ACK timeout (1 ms) recovers; without, a long one (67 ms)
    // never fires.
    let t = Transport {
        timeout: if loss > 0.0 { 8 } else { 14 },
        ..Transport::default()
    };
    let nic = NicConfig {
        receiver,
        reorder_bdp,
        ..Default::default()
    };
    let mut p = two_cards_with(faults, t, nic);
    let sends = pattern(ROUNDS * RECV_SLOT, 1);
    let writes = pattern(ROUNDS * 4096, 2);
    let source = pattern(ROUNDS * 4096, 3);
    p.a.fill(0, &sends);
    p.a.fill(1 << 20, &writes);
    p.b.fill(READ_FROM, &source);
    p.b.fill(COUNTER_AT, &0u64.to_le_bytes());
    // Two receives a round: the SEND's and the WRITE with immediate's.
    for i in 0..2 * ROUNDS {
        p.b.qp
            .post_recv(&[p.b.sge(RECV_AT + i * RECV_SLOT, RECV_SLOT)])
            .unwrap();
    }
    p.b.qp.ring_recv_doorbell();
    for i in 0..ROUNDS {
        let (sl, wl) = (send_len(i), write_len(i));
        let s0 = [p.a.sge(i * RECV_SLOT, sl)];
        let s1 = [p.a.sge((1 << 20) + i * 4096, wl)];
        let s2 = [p.a.sge((1 << 20) + i * 4096, 100)];
        let s3 = [p.a.sge(A_READ_AT + i * 4096, wl)];
        let s4 = [p.a.sge(A_ATOMIC_AT + i * 8, 8)];
        let s5 = [p.a.sge(i * RECV_SLOT, SMALL)];
        let mr = p.b.mr.key;
        let wqes = [
            wr(WQE_OP_SEND, &s0, None, 0),
            wr(
                WQE_OP_RDMA_WRITE,
                &s1,
                Some((p.b.va(WRITE_AT + i * 4096), mr)),
                0,
            ),
            wr(
                WQE_OP_RDMA_WRITE_IMM,
                &s2,
                Some((p.b.va(WRITE_AT + i * 4096), mr)),
                i as u32,
            ),
            wr(
                WQE_OP_RDMA_READ,
                &s3,
                Some((p.b.va(READ_FROM + i * 4096), mr)),
                0,
            ),
            RdmaWqe {
                atomic: Some((ADD, 0)),
                ..wr(WQE_OP_ATOMIC_FA, &s4, Some((p.b.va(COUNTER_AT), mr)), 0)
            },
            wr(
                WQE_OP_RDMA_WRITE,
                &s5,
                Some((p.b.va(SMALL_AT + i * SMALL), mr)),
                0,
            ),
        ];
        for w in &wqes {
            p.a.qp.post_send(w).unwrap();
        }
    }
    p.a.qp.ring_send_doorbell();
    p.run();
    let m = format!("{receiver:?}, loss {loss}");
    // A: every WQE completed, successfully and in posting order.
    let c = p.a.completions();
    assert_eq!(c.len(), 6 * ROUNDS, "{m}");
    assert!(
        c.iter().all(|c| c.opcode() == CQE_REQ && c.syndrome == 0),
        "{m}"
    );
    let wqes: Vec<u16> = c.iter().map(|c| c.wqe_counter.get()).collect();
    assert!(wqes.windows(2).all(|w| w[0] < w[1]), "{m}: in order");
    // B: one receive completion per SEND and WRITE with immediate, in posting order, with the
    // length and immediate each carried.
    let r = p.b.completions();
    assert_eq!(r.len(), 2 * ROUNDS, "{m}");
    for (k, c) in r.iter().enumerate() {
        let i = k / 2;
        let opcode = [CQE_RESP_SEND, CQE_RESP_WRITE_IMM][k % 2];
        assert_eq!((c.opcode(), c.syndrome), (opcode, 0), "{m}: receive {k}");
        assert_eq!(
            c.wqe_counter.get() as usize,
            k,
            "{m}: receives complete in order"
        );
        if k % 2 == 0 {
            assert_eq!(c.byte_count.get() as usize, send_len(i), "{m}");
        } else {
            assert_eq!(c.imm.get(), i as u32, "{m}");
        }
    }
    for i in 0..ROUNDS {
        let (sl, wl) = (send_len(i), write_len(i));
        assert!(
            p.b.read(RECV_AT + 2 * i * RECV_SLOT, sl) == sends[i * RECV_SLOT..i * RECV_SLOT + sl],
            "{m}: SEND {i} byte-exact"
        );
        // The WRITE, then the first 100 bytes again by the WRITE with immediate.
        assert!(
            p.b.read(WRITE_AT + i * 4096, wl) == writes[i * 4096..i * 4096 + wl],
            "{m}: WRITE {i} byte-exact"
        );
        assert!(
            p.a.read(A_READ_AT + i * 4096, wl) == source[i * 4096..i * 4096 + wl],
            "{m}: READ {i} byte-exact"
        );
        assert!(
            p.b.read(SMALL_AT + i * SMALL, SMALL) == sends[i * RECV_SLOT..i * RECV_SLOT + SMALL],
            "{m}: small WRITE {i} byte-exact"
        );
        // Atomics execute in PSN order: the i-th saw i additions before it.
        let original = u64::from_le_bytes(p.a.read(A_ATOMIC_AT + i * 8, 8).try_into().unwrap());
        assert_eq!(original, i as u64 * ADD, "{m}: atomic {i} in order");
    }
    let counter = u64::from_le_bytes(p.b.read(COUNTER_AT, 8).try_into().unwrap());
    assert_eq!(counter, ROUNDS as u64 * ADD, "{m}: each atomic once");
    let k = p.cards[1].nic.reorder_counters();
    assert_eq!(k.blocks_in_use, 0, "{m}: every block given back: {k:?}");
    assert_eq!(k.buffer_held, 0, "{m}: the reorder buffer emptied: {k:?}");
    p
}

/// SENDs of many packets, multi-packet WRITEs, WRITEs with immediate, READs and atomics
/// reordered: every receiver delivers them byte-exact and completes them in order; the
/// reorder units keep what does not say where it goes and take it in PSN order, without a
/// NAK or a packet sent twice, where go-back-N NAKs and resends whole windows. IRN NAKs on the
/// first packet out of order and its sender resends that one packet (PSN-triggered selective
/// retransmission): some packets twice, far fewer than go-back-N.
#[test]
fn every_kind_of_request_reordered_is_delivered_in_order() {
    let resent = |p: &mut Pair| p.a.nic.query_qp(p.a.qp.qpn).unwrap().counters;
    let mut p = mixed_over_a_reordering_cable(ReceiverMode::GoBackN, 0.0, 512);
    let qb = p.b.nic.query_qp(p.b.qp.qpn).unwrap().counters;
    assert!(
        qb.seq_naks_sent.get() > 0,
        "go-back-N NAKs the reordered packets"
    );
    let gbn = resent(&mut p).retransmitted.get();
    for mode in [
        ReceiverMode::Left,
        ReceiverMode::LeftMinus,
        ReceiverMode::MeloPlus,
        ReceiverMode::Irn,
        ReceiverMode::Ideal,
    ] {
        let mut p = mixed_over_a_reordering_cable(mode, 0.0, 512);
        let naks =
            p.b.nic
                .query_qp(p.b.qp.qpn)
                .unwrap()
                .counters
                .seq_naks_sent
                .get();
        let qa = resent(&mut p);
        if mode == ReceiverMode::Irn {
            assert!(naks > 0, "IRN NAKs on reordering");
            // One packet again per NAK at most (none when it arrived meanwhile).
            assert!(
                qa.retransmitted.get() <= qa.seq_naks_received.get(),
                "{qa:?}"
            );
            assert!(qa.retransmitted.get() * 4 < gbn, "{qa:?} against {gbn}");
        } else {
            assert_eq!(naks, 0, "{mode:?}: nothing NAKed");
            assert_eq!(
                qa.retransmitted.get(),
                0,
                "{mode:?}: nothing resent: {qa:?}"
            );
        }
        let k = p.cards[1].nic.reorder_counters();
        assert!(k.kept > 20, "{mode:?}: SENDs and the like kept: {k:?}");
        // The single-packet WRITEs ahead were placed on arrival, not kept.
        assert!(k.recorded > k.kept + 5, "{mode:?}: {k:?}");
    }
}

/// The same with 2 % of frames lost as well: every receiver still delivers everything once,
/// in order. The reorder units, sized here for an 8-packet BDP, recover selectively (§3.5): a
/// packet a BDP past a missing one NAKs it, and the sender sends that one alone — fewer
/// packets again than go-back-N sends; what they kept is never executed twice.
#[test]
fn every_kind_of_request_reordered_and_lost_is_delivered_once() {
    let resent = |p: &mut Pair| {
        p.a.nic
            .query_qp(p.a.qp.qpn)
            .unwrap()
            .counters
            .retransmitted
            .get()
    };
    let mut gbn = mixed_over_a_reordering_cable(ReceiverMode::GoBackN, 0.02, 8);
    let gbn_resent = resent(&mut gbn);
    for mode in [
        ReceiverMode::Left,
        ReceiverMode::LeftMinus,
        ReceiverMode::MeloPlus,
        ReceiverMode::Irn,
        ReceiverMode::Ideal,
    ] {
        let mut p = mixed_over_a_reordering_cable(mode, 0.02, 8);
        let k = p.cards[1].nic.reorder_counters();
        assert!(k.loss_naks > 0, "{mode:?}: {k:?}");
        let qa = p.a.nic.query_qp(p.a.qp.qpn).unwrap().counters;
        assert!(qa.seq_naks_received.get() > 0, "{mode:?}");
        assert!(
            resent(&mut p) * 2 < gbn_resent,
            "{mode:?}: {} resent, go-back-N {gbn_resent}",
            resent(&mut p)
        );
    }
}

/// Exhaustion (§3.5): reorder units sized for a 2-packet BDP — LEFT's caches hold 64 packets,
/// IRN's bitmap reaches 10 — on a cable that holds frames back by up to 120 places run out of
/// room again and again. Each refusal drops the packet and answers the expected PSN with an
/// RNR NAK; the sender goes back after the RNR timer, and every WRITE still lands once, in
/// order, with every block given back.
#[test]
fn an_exhausted_reorder_unit_refuses_and_the_sender_goes_back() {
    for mode in [ReceiverMode::Left, ReceiverMode::Irn] {
        let faults = Faults {
            reorder: 0.3,
            reorder_depth: 120,
            seed: 13,
            ..Default::default()
        };
        let nic = NicConfig {
            receiver: mode,
            reorder_bdp: 2,
            ..Default::default()
        };
        let mut p = two_cards_with(faults, Transport::default(), nic);
        let data = write_all(&mut p, 7, true);
        assert!(p.b.read(0, data.len()) == data, "{mode:?}");
        let c = p.a.completions();
        assert_eq!(c.len(), MESSAGES, "{mode:?}");
        assert!(c.iter().all(|c| c.syndrome == 0), "{mode:?}");
        let k = p.cards[1].nic.reorder_counters();
        assert!(k.refused > 0 && k.blocks_in_use == 0, "{mode:?}: {k:?}");
        let qb = p.b.nic.query_qp(p.b.qp.qpn).unwrap().counters;
        assert!(qb.rnr_naks_sent.get() > 0, "{mode:?}: {qb:?}");
        let qa = p.a.nic.query_qp(p.a.qp.qpn).unwrap().counters;
        assert!(
            qa.rnr_naks_received.get() > 0 && qa.retransmitted.get() > 0,
            "{mode:?}: {qa:?}"
        );
    }
}

/// The receiver is a QP's choice: on cards with LEFT, an out-of-order connection and a
/// go-back-N one (functions 0 and 1) cross the same reordering cable side by side — the first
/// without a NAK, the second NAKing and resending as IBA says — and both deliver byte-exact.
/// A card without a reorder unit refuses an out-of-order QP.
#[test]
fn one_card_serves_out_of_order_and_go_back_n_connections_side_by_side() {
    let faults = Faults {
        reorder: 0.4,
        reorder_depth: 16,
        seed: 41,
        ..Default::default()
    };
    let t = Transport::default();
    let nic = NicConfig {
        receiver: ReceiverMode::Left,
        ..Default::default()
    };
    let mut p = two_cards_with(faults, t, nic);
    let mut c = open_end(&p.hosts[0], 1, [10, 0, 0, 3], access::ALL, CAPS);
    let mut d = open_end(&p.hosts[1], 1, [10, 0, 0, 4], access::ALL, CAPS);
    let (cq, dq, cm, dm) = (c.qp.qpn, d.qp.qpn, c.nic.mac(), d.nic.mac());
    connect(&mut c, (dq, d.ip, dm), PSNS, t);
    connect(&mut d, (cq, c.ip, cm), (PSNS.1, PSNS.0), t);
    let left = pattern(MESSAGES * SIZE, 5);
    let gbn = pattern(MESSAGES * SIZE, 6);
    p.a.fill(0, &left);
    c.fill(0, &gbn);
    for i in 0..MESSAGES {
        let s = [p.a.sge(i * SIZE, SIZE)];
        let w = wr(
            WQE_OP_RDMA_WRITE,
            &s,
            Some((p.b.va(i * SIZE), p.b.mr.key)),
            0,
        );
        p.a.qp.post_send(&w).unwrap();
        let s = [c.sge(i * SIZE, SIZE)];
        let w = wr(WQE_OP_RDMA_WRITE, &s, Some((d.va(i * SIZE), d.mr.key)), 0);
        c.qp.post_send(&w).unwrap();
    }
    p.a.qp.ring_send_doorbell();
    c.qp.ring_send_doorbell();
    p.run();
    assert!(
        p.b.read(0, left.len()) == left,
        "the out-of-order connection"
    );
    assert!(d.read(0, gbn.len()) == gbn, "the go-back-N connection");
    assert_eq!(p.a.completions().len(), MESSAGES);
    assert_eq!(c.completions().len(), MESSAGES);
    let naks = |e: &mut End| {
        e.nic
            .query_qp(e.qp.qpn)
            .unwrap()
            .counters
            .seq_naks_sent
            .get()
    };
    assert_eq!(naks(&mut p.b), 0, "LEFT takes what arrives ahead");
    assert!(naks(&mut d) > 0, "go-back-N NAKs it");
    let k = p.cards[1].nic.reorder_counters();
    assert!(k.recorded > 20 && k.blocks_in_use == 0, "{k:?}");

    // A go-back-N card: the flag is refused, not ignored.
    let card = fld_device::card::Card::new(fld_device::card::CardConfig::default());
    let host = fld_driver::inprocess::InProcessHost::new(card.clone(), 16 << 20).unwrap();
    let dev = host.device(card.nic.function_id(0).unwrap());
    let mut nic = fld_driver::nic::NicDriver::probe(dev.clone()).unwrap();
    assert_eq!(nic.caps().receiver, receiver::GO_BACK_N);
    assert_eq!(p.a.nic.caps().receiver, receiver::LEFT);
    dev.enable_msix(2).unwrap();
    let eq = nic.create_eq(8, 0).unwrap();
    let cq = nic.create_cq(&eq, 6).unwrap();
    let pd = nic.create_pd().unwrap();
    let caps = fld_driver::rdma::QpCaps {
        out_of_order: true,
        ..CAPS
    };
    let e = nic
        .create_qp(pd, &cq, &cq, None, caps)
        .err()
        .expect("refused");
    assert!(
        matches!(
            e,
            fld_driver::DriverError::Command {
                status: Some(CmdStatus::BadParam),
                syndrome: bad_param::QP_FLAGS,
                ..
            }
        ),
        "{e:?}"
    );
}
