//! LEFT's reorder logic on the RoCE receive path (§3.1): with a reorder unit, single-packet
//! WRITEs that arrive ahead of the expected PSN are placed where their RETH says and recorded,
//! not NAKed; the expected PSN jumps over them when the gap closes. Two cards on a cable that
//! reorders heavily: every receiver delivers byte-exact, go-back-N by NAKs and retransmission,
//! the reorder units without either, and their pools give every block back.

mod common;

use common::rdma::*;
use fld_abi::nic::*;
use fld_device::nic::reorder::ReceiverMode;
use fld_device::nic::NicConfig;
use fld_device::wire::Faults;

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
        assert_eq!(qa.retransmitted.get(), 0, "{mode:?}: nothing resent");
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
