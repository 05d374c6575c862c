//! RoCEv2 RC between two cards joined by a cable, clean and with seeded loss, duplication and
//! reordering: go-back-N recovers, nothing is lost, nothing lands twice in memory or in the
//! completion queues, completions come in order.

mod common;

use common::rdma::*;
use fld_abi::nic::*;
use fld_device::wire::Faults;

/// A mixed workload: SENDs (every other one with immediate data), WRITEs, READs and
/// fetch-and-adds, each kind at every size from 0 B to 1 MiB, posted six at a time. Returns the number of send WQEs and receive WQEs it posted.
fn workload(p: &mut Pair, rounds: usize) -> (usize, usize) {
    const SLOT: usize = (1 << 20) + 4096;
    let sizes = [0usize, 1, 777, 1024, 3000, 9000, 65536, 1 << 20];
    let (mut sends, mut recvs) = (0, 0);
    p.b.fill(BUF - 8, &0u64.to_le_bytes());
    for r in 0..rounds {
        let len = sizes[(r / 4) % sizes.len()];
        let slot = (r % 6) * SLOT;
        let data = pattern(len, r as u8);
        match r % 4 {
            0 => {
                p.a.fill(slot, &data);
                p.b.qp.post_recv(&[p.b.sge(slot, len + 1)]).unwrap();
                p.b.qp.ring_recv_doorbell();
                let s = [p.a.sge(slot, len)];
                let op = if recvs % 2 == 1 {
                    WQE_OP_SEND_IMM
                } else {
                    WQE_OP_SEND
                };
                p.a.qp.post_send(&wr(op, &s, None, r as u32)).unwrap();
                recvs += 1;
            }
            1 => {
                p.a.fill(slot, &data);
                let s = [p.a.sge(slot, len)];
                let remote = Some((p.b.va(slot), p.b.mr.key));
                p.a.qp
                    .post_send(&wr(WQE_OP_RDMA_WRITE, &s, remote, 0))
                    .unwrap();
            }
            2 => {
                p.b.fill(slot, &data);
                let s = [p.a.sge(slot, len)];
                let remote = Some((p.b.va(slot), p.b.mr.key));
                p.a.qp
                    .post_send(&wr(WQE_OP_RDMA_READ, &s, remote, 0))
                    .unwrap();
            }
            _ => {
                let s = [p.a.sge(BUF - 64 + 8 * (r % 4), 8)];
                let mut w = wr(WQE_OP_ATOMIC_FA, &s, Some((p.b.va(BUF - 8), p.b.mr.key)), 0);
                w.atomic = Some((1 + r as u64, 0));
                p.a.qp.post_send(&w).unwrap();
            }
        }
        sends += 1;
        // Each op is checked once it completes, before its slot is reused.
        if r % 6 == 5 || r + 1 == rounds {
            p.a.qp.ring_send_doorbell();
            let want = sends;
            let mut seen = 0;
            let mut got = Vec::new();
            let ok = p.run_until(60_000_000_000, |p| {
                let c = p.a.completions();
                seen += c.len();
                got.extend(c);
                seen >= want
            });
            assert!(ok, "{seen} of {want} completions");
            check_batch(p, &got, r + 1 - got.len(), SLOT, &sizes);
            sends = 0;
        }
    }
    (rounds, recvs)
}

/// The completions of ops `first..first + got.len()`: in order, all successful, and the data
/// each moved exact.
fn check_batch(p: &mut Pair, got: &[Cqe], first: usize, slot_bytes: usize, sizes: &[usize]) {
    for (k, c) in got.iter().enumerate() {
        let r = first + k;
        assert_eq!(c.syndrome, rdma_status::SUCCESS, "op {r}");
        let len = sizes[(r / 4) % sizes.len()];
        let slot = (r % 6) * slot_bytes;
        let data = pattern(len, r as u8);
        match r % 4 {
            0 => assert!(p.b.read(slot, len) == data, "SEND {r} ({len} B)"),
            1 => assert!(p.b.read(slot, len) == data, "WRITE {r} ({len} B)"),
            2 => assert!(p.a.read(slot, len) == data, "READ {r} ({len} B)"),
            _ => {}
        }
        if k > 0 {
            // Every WQE of this workload takes one basic block.
            assert_eq!(
                c.wqe_counter.get(),
                got[k - 1].wqe_counter.get().wrapping_add(1),
                "completions in order"
            );
        }
    }
}

/// The sum of every fetch-and-add, and each add seen exactly once in the originals.
fn check_atomics(p: &mut Pair, rounds: usize) {
    let adds: u64 = (0..rounds)
        .filter(|r| r % 4 == 3)
        .map(|r| 1 + r as u64)
        .sum();
    assert_eq!(
        p.b.read(BUF - 8, 8),
        adds.to_le_bytes(),
        "every add applied once"
    );
}

fn receive_completions_exact(p: &mut Pair, recvs: usize) {
    let rx = p.b.completions();
    assert_eq!(
        rx.len(),
        recvs,
        "one receive completion per SEND, none twice"
    );
    for (i, c) in rx.iter().enumerate() {
        // Receive i is round 4i's SEND; every other one carried the round as immediate data.
        if i % 2 == 1 {
            assert_eq!(
                (c.opcode(), c.imm.get()),
                (CQE_RESP_SEND_IMM, 4 * i as u32),
                "SEND with immediate {i}"
            );
        } else {
            assert_eq!(c.opcode(), CQE_RESP_SEND);
        }
        assert_eq!(
            c.wqe_counter.get() as usize,
            i,
            "receives complete in order"
        );
    }
}

#[test]
fn every_operation_crosses_a_clean_cable_byte_exact() {
    let mut p = two_cards(Faults::default(), Transport::default());
    let (rounds, recvs) = workload(&mut p, 48);
    check_atomics(&mut p, rounds);
    receive_completions_exact(&mut p, recvs);
    let q = p.a.nic.query_qp(p.a.qp.qpn).unwrap();
    assert_eq!(q.counters.retransmitted.get(), 0);
    assert_eq!(q.counters.timeouts.get(), 0);
}

#[test]
fn go_back_n_recovers_from_loss_duplication_and_reordering() {
    for (seed, loss) in [
        (1u64, 0.01),
        (2, 0.02),
        (3, 0.03),
        (4, 0.04),
        (5, 0.05),
        (6, 0.05),
    ] {
        let faults = Faults {
            loss,
            duplicate: 0.02,
            reorder: 0.03,
            reorder_depth: 4,
            seed,
            ..Default::default()
        };
        // A short ACK timeout (4.096 µs × 2^8 ≈ 1 ms) and unlimited patience for the test.
        let t = Transport {
            timeout: 8,
            ..Transport::default()
        };
        let mut p = two_cards(faults, t);
        let (rounds, recvs) = workload(&mut p, 96);
        check_atomics(&mut p, rounds);
        receive_completions_exact(&mut p, recvs);
        let qa = p.a.nic.query_qp(p.a.qp.qpn).unwrap();
        let qb = p.b.nic.query_qp(p.b.qp.qpn).unwrap();
        assert!(
            qa.counters.retransmitted.get() > 0,
            "seed {seed}: something was resent"
        );
        assert!(
            qb.counters.duplicates.get() > 0,
            "seed {seed}: duplicates seen and not executed twice"
        );
        assert_eq!(p.a.state(), QpState::Rts);
        assert_eq!(p.b.state(), QpState::Rts);
    }
}

#[test]
#[ignore]
fn soak_many_seeds() {
    let n: u64 = std::env::var("SOAK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let first: u64 = std::env::var("SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    for seed in first..first + n {
        let faults = Faults {
            loss: 0.01 * (1 + seed % 5) as f64,
            duplicate: 0.02,
            reorder: 0.03,
            reorder_depth: 1 + (seed % 6) as usize,
            seed,
            ..Default::default()
        };
        let t = Transport {
            timeout: 8,
            ..Transport::default()
        };
        let mut p = two_cards(faults, t);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (rounds, recvs) = workload(&mut p, 96);
            check_atomics(&mut p, rounds);
            receive_completions_exact(&mut p, recvs);
        }));
        assert!(r.is_ok(), "seed {seed}");
    }
}
