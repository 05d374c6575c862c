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

/// What one run of [`lone_posts`] left behind: the requester's CQEs (opcode, status, WQE
/// counter, byte count), the responder's, the bytes that landed, the QP's counters apart from
/// `wqes_by_mmio`, and that counter.
type LoneRun = (
    Vec<(u8, u8, u16, u32)>,
    Vec<(u8, u8, u32)>,
    Vec<u8>,
    Vec<(&'static str, u64)>,
    u64,
);

/// Six WQEs, each posted alone with its own doorbell (the case a driver writes by MMIO): inline
/// and gathered SENDs, a WRITE of 16 B, a READ, an atomic and a 5000-byte WRITE with immediate.
fn lone_posts(by_mmio: bool) -> LoneRun {
    let mut p = one_card(access::ALL, Transport::default());
    p.a.qp.set_wqe_by_mmio(by_mmio);
    for i in 0..3 {
        p.b.qp.post_recv(&[p.b.sge(i * 8192, 8192)]).unwrap();
    }
    p.b.qp.ring_recv_doorbell();
    p.a.fill(0, &pattern(8192, 7));
    p.b.fill(65536, &42u64.to_le_bytes());
    let remote = |off: usize| Some((p.b.va(off), p.b.mr.key));
    let (s0, s1, s2, s3) = (
        [p.a.sge(0, 300)],
        [p.a.sge(300, 16)],
        [p.a.sge(16384, 64)],
        [p.a.sge(20480, 8)],
    );
    let s4 = [p.a.sge(1000, 5000)];
    let wqes = [
        RdmaWqe {
            data: WqeData::Inline(b"by the doorbell"),
            ..wr(WQE_OP_SEND, &[], None, 0)
        },
        wr(WQE_OP_SEND_IMM, &s0, None, 0xfeed),
        wr(WQE_OP_RDMA_WRITE, &s1, remote(32768), 0),
        wr(WQE_OP_RDMA_READ, &s2, remote(0), 0),
        RdmaWqe {
            atomic: Some((8, 0)),
            ..wr(WQE_OP_ATOMIC_FA, &s3, remote(65536), 0)
        },
        wr(WQE_OP_RDMA_WRITE_IMM, &s4, remote(40960), 0xbeef),
    ];
    for w in &wqes {
        p.a.qp.post_send(w).unwrap();
        p.a.qp.ring_send_doorbell();
        p.run();
    }
    let req = p.a.completions();
    let resp = p.b.completions();
    let q = p.a.nic.query_qp(p.a.qp.qpn).unwrap();
    let mut landed = p.b.read(0, 3 * 8192);
    landed.extend(p.b.read(32768, 16));
    landed.extend(p.b.read(40960, 5000));
    landed.extend(p.b.read(65536, 8));
    landed.extend(p.a.read(16384, 64));
    landed.extend(p.a.read(20480, 8));
    let counters = q
        .counters
        .named()
        .into_iter()
        .filter(|(n, _)| *n != "wqes_by_mmio");
    (
        req.iter()
            .map(|c| {
                (
                    c.wqe_opcode,
                    c.syndrome,
                    c.wqe_counter.get(),
                    c.byte_count.get(),
                )
            })
            .collect(),
        resp.iter()
            .map(|c| (c.opcode(), c.syndrome, c.byte_count.get()))
            .collect(),
        landed,
        counters.collect(),
        q.counters.wqes_by_mmio.get(),
    )
}

/// WQE by MMIO on a queue pair (`docs/nic-interface.md` §4.1): every lone WQE is taken from the
/// QP's buffer, and the requester's and responder's completions, the bytes that land and the
/// transport counters are those of the same WQEs fetched by DMA.
#[test]
fn wqes_by_mmio_on_a_queue_pair_match_the_fetched_ones() {
    let by_mmio = lone_posts(true);
    let fetched = lone_posts(false);
    assert_eq!((by_mmio.4, fetched.4), (6, 0));
    assert_eq!(by_mmio.0.len(), 6, "{:?}", by_mmio.0);
    assert!(by_mmio.0.iter().all(|c| c.1 == rdma_status::SUCCESS));
    assert_eq!(by_mmio.1.len(), 3, "{:?}", by_mmio.1);
    assert_eq!(by_mmio.0, fetched.0);
    assert_eq!(by_mmio.1, fetched.1);
    assert!(by_mmio.2 == fetched.2, "landed bytes differ");
    assert_eq!(by_mmio.3, fetched.3);
    // The SEND landed; the READ brought back what it left, the atomic the value before the add.
    let n = by_mmio.2.len();
    assert_eq!(by_mmio.2[..15], *b"by the doorbell");
    assert_eq!(by_mmio.2[n - 72..n - 8], by_mmio.2[..64]);
    assert_eq!(by_mmio.2[n - 8..], 42u64.to_le_bytes());
}
