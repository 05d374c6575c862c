//! Completion and event queues of any size with arbitrary consumer and arm doorbells (consumer
//! counters ahead of the producer, behind it, wrapped, repeated arms), interleaved with traffic
//! that fills them: overflows are counted, entries never land outside their rings, no interrupt
//! storm; afterwards a reset and a bring-up move verified traffic.
#![no_main]

use fld_abi::nic::{db, op, ObjectIn, QueryCqOut, MAX_LOG_CQ, MAX_LOG_EQ};
use fld_fuzz::{assert_nic_recovers, frame_between, small_nic, Input};
use libfuzzer_sys::fuzz_target;
use zerocopy::{FromBytes, IntoBytes};

fuzz_target!(|data: &[u8]| {
    let mut h = small_nic();
    let mut input = Input::new(data);
    // Ring sizes from the input, within the device's limits and the host memory.
    let log_eq = (input.u8() % (MAX_LOG_EQ + 1)).min(9);
    let log_cq = (input.u8() % (MAX_LOG_CQ + 1)).min(9);
    let log_rx_cq = (input.u8() % (MAX_LOG_CQ + 1)).min(9);
    let mut a = h.open_port(0);
    let vector = u16::from(input.u8()) % fld_device::mock::MOCK_VECTORS;
    let mut eq = h.create_eq(1, log_eq, vector);
    let mut cq = h.create_cq(1, eq.id, log_cq);
    let mut rx_cq = h.create_cq(1, eq.id, log_rx_cq);
    h.create_sq(1, cq.id, 4, None);
    let mut rq = h.create_rq(1, rx_cq.id, 5, None);
    let buffers: Vec<u64> = (0..32).map(|_| h.alloc(2048)).collect();
    for &x in &buffers {
        rq.post(&h, x, 2048);
    }
    rq.ring(&h, 1);
    h.steer_all_to(1, rq.id);
    let mut interrupts = 0u64;
    for _ in 0..128 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        let (base, id) = match (ctl >> 3) % 3 {
            0 => (db::CQ_BASE, cq.id),
            1 => (db::CQ_BASE, rx_cq.id),
            _ => (db::EQ_BASE, eq.id),
        };
        match ctl & 7 {
            0 => h.doorbell(1, db::slot(base, id), input.u32()),
            1 => {
                let (ci, sn, arm) = (input.u32(), input.u8() as u32, ctl & 0x80 != 0);
                h.doorbell(1, db::slot(base, id), db::ci_value(ci, sn, arm));
            }
            2 | 3 => {
                for _ in 0..input.u8() % 8 + 1 {
                    let f = frame_between(&h, 0, 1, 60 + input.u8() as usize, ctl);
                    a.send(&h, &f, 0);
                }
            }
            4 => {
                let n = input.u8();
                for _ in 0..n {
                    if rx_cq.poll_cqe(&h).is_none() {
                        break;
                    }
                }
                rx_cq.update_ci(&h, 1, db::CQ_BASE);
                while eq.poll_eqe(&h).is_some() {}
                eq.update_ci(&h, 1, db::EQ_BASE);
            }
            5 => match (ctl >> 3) % 3 {
                0 => cq.arm(&h, 1, db::CQ_BASE),
                1 => rx_cq.arm(&h, 1, db::CQ_BASE),
                _ => eq.arm(&h, 1, db::EQ_BASE),
            },
            6 => {
                let opcode = if base == db::EQ_BASE {
                    op::QUERY_EQ
                } else {
                    op::QUERY_CQ
                };
                let r = h.command(1, opcode, ObjectIn::new(id).as_bytes());
                let q = QueryCqOut::read_from_bytes(&r.out).expect("query result");
                assert_eq!(
                    q.log_size,
                    if base == db::EQ_BASE {
                        log_eq
                    } else if id == cq.id {
                        log_cq
                    } else {
                        log_rx_cq
                    }
                );
            }
            _ => {
                h.run(input.u8() as usize % 16 + 1);
                while a.tx_cq.poll_cqe(&h).is_some() {}
                a.tx_cq.update_ci(&h, 0, db::CQ_BASE);
            }
        }
        interrupts += h.take_interrupts(1, vector);
    }
    h.run(256);
    interrupts += h.take_interrupts(1, vector);
    // Every interrupt consumes an arm of the EQ: at most one per doorbell write, plus the arm
    // made at creation.
    assert!(interrupts <= 129, "{interrupts} interrupts");
    assert_nic_recovers(&mut h);
});
