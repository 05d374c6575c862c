//! RoCEv2 RC between two NIC functions of one card (their frames cross the eSwitch): every
//! operation byte-exact at sizes from 0 B to 1 MiB, completions as the verbs define them, and
//! the answers the spec gives to bad input.

mod common;

use common::rdma::*;
use fld_abi::nic::*;

const SIZES: [usize; 12] = [
    0,
    1,
    3,
    255,
    1023,
    1024,
    1025,
    4096,
    9000,
    65536,
    300_001,
    1 << 20,
];

#[test]
fn send_of_every_size_arrives_byte_exact_with_its_completions() {
    let mut p = one_card(access::ALL, Transport::default());
    for (n, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, n as u8);
        p.a.fill(0, &data);
        p.b.fill(0, &vec![0xee; len + 16]);
        // The receive buffer in two pieces, to cross a scatter boundary.
        let half = len / 2;
        let rs = [p.b.sge(0, half), p.b.sge(half, len - half + 16)];
        let rc = p.b.qp.post_recv(&rs).unwrap();
        p.b.qp.ring_recv_doorbell();
        let s = [p.a.sge(0, len)];
        let imm = n % 2 == 1;
        let op = if imm { WQE_OP_SEND_IMM } else { WQE_OP_SEND };
        let idx =
            p.a.qp
                .post_send(&wr(op, &s, None, 0x1234_5600 + n as u32))
                .unwrap();
        p.a.qp.ring_send_doorbell();
        p.run();
        let tx = p.a.completions();
        assert_eq!(tx.len(), 1, "{len} B: one send completion");
        assert_eq!(
            (
                tx[0].opcode(),
                tx[0].syndrome,
                tx[0].wqe_counter.get(),
                tx[0].qn.get()
            ),
            (CQE_REQ, rdma_status::SUCCESS, idx, p.a.qp.qpn)
        );
        assert_eq!((tx[0].byte_count.get(), tx[0].wqe_opcode), (len as u32, op));
        assert_ne!(tx[0].flags & cqe_flags::QP, 0);
        let rx = p.b.completions();
        assert_eq!(rx.len(), 1, "{len} B: one receive completion");
        let want_op = if imm {
            CQE_RESP_SEND_IMM
        } else {
            CQE_RESP_SEND
        };
        assert_eq!(
            (rx[0].opcode(), rx[0].syndrome, rx[0].wqe_counter.get()),
            (want_op, rdma_status::SUCCESS, rc)
        );
        assert_eq!(rx[0].byte_count.get(), len as u32);
        if imm {
            assert_eq!(rx[0].imm.get(), 0x1234_5600 + n as u32);
        }
        assert!(p.b.read(0, len) == data, "{len} B: payload");
        assert_eq!(
            p.b.read(len, 16),
            vec![0xee; 16],
            "{len} B: nothing beyond it"
        );
    }
    let q = p.a.nic.query_qp(p.a.qp.qpn).unwrap();
    assert_eq!(q.counters.retransmitted.get(), 0);
    assert_eq!(
        q.next_psn.get(),
        q.unacked_psn.get(),
        "everything acknowledged"
    );
}

#[test]
fn write_read_and_atomics_of_every_size_are_byte_exact() {
    let mut p = one_card(access::ALL, Transport::default());
    for (n, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 0x40 + n as u8);
        p.a.fill(0, &data);
        p.b.fill(BUF / 2, &vec![0; len]);
        let s = [p.a.sge(0, len)];
        p.a.qp
            .post_send(&wr(
                WQE_OP_RDMA_WRITE,
                &s,
                Some((p.b.va(BUF / 2), p.b.mr.key)),
                0,
            ))
            .unwrap();
        // Read it back into another part of A's buffer.
        let r = [p.a.sge(BUF / 2, len)];
        p.a.fill(BUF / 2, &vec![0x55; len]);
        p.a.qp
            .post_send(&wr(
                WQE_OP_RDMA_READ,
                &r,
                Some((p.b.va(BUF / 2), p.b.mr.key)),
                0,
            ))
            .unwrap();
        p.a.qp.ring_send_doorbell();
        p.run();
        let tx = p.a.completions();
        assert_eq!(tx.len(), 2, "{len} B");
        assert!(tx.iter().all(|c| c.opcode() == CQE_REQ && c.syndrome == 0));
        assert_eq!(tx[1].wqe_opcode, WQE_OP_RDMA_READ);
        assert_eq!(tx[1].byte_count.get(), len as u32);
        assert!(p.b.read(BUF / 2, len) == data, "{len} B written");
        assert!(p.a.read(BUF / 2, len) == data, "{len} B read back");
        assert!(
            p.b.completions().is_empty(),
            "a WRITE consumes no receive WQE"
        );
    }
    // WRITE with immediate consumes a receive WQE and reports the immediate.
    let rc = p.b.qp.post_recv(&[]).unwrap();
    p.b.qp.ring_recv_doorbell();
    let s = [p.a.sge(0, 5000)];
    p.a.qp
        .post_send(&wr(
            WQE_OP_RDMA_WRITE_IMM,
            &s,
            Some((p.b.va(64), p.b.mr.key)),
            0xabcd,
        ))
        .unwrap();
    p.a.qp.ring_send_doorbell();
    p.run();
    let rx = p.b.completions();
    assert_eq!(rx.len(), 1);
    assert_eq!(
        (
            rx[0].opcode(),
            rx[0].imm.get(),
            rx[0].byte_count.get(),
            rx[0].wqe_counter.get()
        ),
        (CQE_RESP_WRITE_IMM, 0xabcd, 5000, rc)
    );
    p.a.completions();

    // Atomics: fetch-and-add twice, then compare-and-swap that hits and one that misses.
    p.b.fill(4096, &100u64.to_le_bytes());
    let target = (p.b.va(4096), p.b.mr.key);
    let ops = [
        (WQE_OP_ATOMIC_FA, 5u64, 0u64, 100u64),
        (WQE_OP_ATOMIC_FA, 7, 0, 105),
        (WQE_OP_ATOMIC_CS, 999, 112, 112),
        (WQE_OP_ATOMIC_CS, 1, 112, 999),
    ];
    for (i, (op, swap_add, compare, _)) in ops.iter().enumerate() {
        let s = [p.a.sge(8192 + 8 * i, 8)];
        p.a.qp
            .post_send(&RdmaWqe {
                opcode: *op,
                signal: true,
                solicited: false,
                fence: false,
                imm: 0,
                remote: Some(target),
                atomic: Some((*swap_add, *compare)),
                data: WqeData::Gather(&s),
            })
            .unwrap();
    }
    p.a.qp.ring_send_doorbell();
    p.run();
    let tx = p.a.completions();
    assert_eq!(tx.len(), 4);
    assert!(tx
        .iter()
        .all(|c| c.syndrome == 0 && c.byte_count.get() == 8));
    for (i, (_, _, _, original)) in ops.iter().enumerate() {
        assert_eq!(
            p.a.read(8192 + 8 * i, 8),
            original.to_le_bytes(),
            "atomic {i}"
        );
    }
    assert_eq!(p.b.read(4096, 8), 999u64.to_le_bytes());
}

#[test]
fn selective_signalling_and_inline_data() {
    let mut p = one_card(access::ALL, Transport::default());
    for i in 0..10u32 {
        p.b.qp.post_recv(&[p.b.sge(i as usize * 64, 64)]).unwrap();
    }
    p.b.qp.ring_recv_doorbell();
    for i in 0..10u32 {
        let msg = format!("inline message {i}");
        p.a.qp
            .post_send(&RdmaWqe {
                opcode: WQE_OP_SEND,
                signal: i == 9,
                solicited: false,
                fence: false,
                imm: 0,
                remote: None,
                atomic: None,
                data: WqeData::Inline(msg.as_bytes()),
            })
            .unwrap();
    }
    p.a.qp.ring_send_doorbell();
    p.run();
    let tx = p.a.completions();
    assert_eq!(tx.len(), 1, "only the signalled WQE completes with a CQE");
    assert_eq!(tx[0].wqe_counter.get(), 9);
    let rx = p.b.completions();
    assert_eq!(rx.len(), 10);
    for (i, c) in rx.iter().enumerate() {
        let msg = format!("inline message {i}");
        assert_eq!(c.byte_count.get() as usize, msg.len());
        assert_eq!(p.b.read(i * 64, msg.len()), msg.as_bytes());
    }
}
