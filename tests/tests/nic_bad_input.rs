//! Whatever a driver writes, the NIC answers as hardware: a command status, an error CQE, a
//! counted drop — never a panic and never a DMA outside mapped memory. After each bad input
//! the device still works.

mod common;

use common::*;
use fld_abi::nic::*;
use fld_driver::nic::{FlowRule, RqLayout, RuleFate, TableMiss};
use fld_driver::{DriverError, PciDevice};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

fn status(e: DriverError) -> Option<CmdStatus> {
    e.status()
}

/// The port still moves traffic: one frame from port 0 arrives at port 1.
fn still_works(r: &mut Rig) {
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let f = udp_frame(m0, m1, 9, 9, 64, 0xee);
    let before = r.ports[1].rq_query().packets.get();
    r.ports[0].send(&f, 0, false);
    r.run();
    let after = r.ports[1].rq_query().packets.get();
    assert_eq!(after, before + 1, "device keeps working");
    while r.ports[1].rq_cq.poll().is_some() {}
    r.ports[1].rq_cq.update_ci();
}

#[test]
fn unknown_and_short_commands_get_a_status() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let nic = &mut r.ports[0].nic;
    assert_eq!(
        nic.command(0x7777, &[], 0).err().and_then(status),
        Some(CmdStatus::BadOpcode)
    );
    // CREATE_CQ with 4 bytes of its 16-byte input.
    assert_eq!(
        nic.command(op::CREATE_CQ, &[0; 4], 8)
            .err()
            .and_then(status),
        Some(CmdStatus::BadInputLength)
    );
    // QUERY_CAPS into an output buffer too small for the result.
    assert_eq!(
        nic.command(op::QUERY_CAPS, &[], 4).err().and_then(status),
        Some(CmdStatus::BadOutputLength)
    );
    // Garbage of every length for every opcode in the command range: a status, never a hang.
    for opc in 0x100u16..0x190 {
        for len in [0usize, 1, 7, 16, 64, 200] {
            let junk: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(37) ^ opc as u8)
                .collect();
            let _ = r.ports[1].nic.command(opc, &junk, 64);
        }
    }
    still_works(&mut r);
}

#[test]
fn command_buffers_outside_mapped_memory_are_not_delivered() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let nic = &mut r.ports[0].nic;
    match nic.submit(0xdead_0000, 32, 0xbeef_0000, 64, op::QUERY_CAPS) {
        Err(DriverError::Delivery { delivery, .. }) => {
            assert_eq!(delivery, CmdDelivery::DmaError as u8)
        }
        other => panic!("expected a delivery error, got {other:?}"),
    }
    match nic.submit(0xdead_0000, 8, 0xbeef_0000, 64, op::QUERY_CAPS) {
        Err(DriverError::Delivery { delivery, .. }) => {
            assert_eq!(delivery, CmdDelivery::BadLength as u8)
        }
        other => panic!("expected a length error, got {other:?}"),
    }
    still_works(&mut r);
}

#[test]
fn queue_creation_validates_sizes_addresses_and_references() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let eqn = r.ports[0].eq.eqn;
    let cqn = r.ports[0].cq.cqn;
    let nic = &mut r.ports[0].nic;
    let ring = nic.device().dma_alloc(1 << 20).unwrap();
    let cq = |addr: u64, eqn: u32, log: u8| CreateCqIn {
        addr: U64::new(addr),
        eqn: U32::new(eqn),
        log_size: log,
        rsvd: [0; 3],
    };
    // Ring larger than the device supports.
    assert_eq!(
        nic.command(op::CREATE_CQ, cq(ring.iova(), eqn, 30).as_bytes(), 8)
            .err()
            .and_then(status),
        Some(CmdStatus::BadParam)
    );
    // Ring not 64-byte aligned, or not in mapped memory.
    assert_eq!(
        nic.command(op::CREATE_CQ, cq(ring.iova() + 8, eqn, 4).as_bytes(), 8)
            .err()
            .and_then(status),
        Some(CmdStatus::BadParam)
    );
    assert_eq!(
        nic.command(op::CREATE_CQ, cq(0x7000_0000, eqn, 4).as_bytes(), 8)
            .err()
            .and_then(status),
        Some(CmdStatus::BadParam)
    );
    // Nonexistent EQ.
    assert_eq!(
        nic.command(op::CREATE_CQ, cq(ring.iova(), 999, 4).as_bytes(), 8)
            .err()
            .and_then(status),
        Some(CmdStatus::BadResource)
    );
    // Striding RQ with stride size or count out of range, and an unknown RQ type.
    for (t, ls, ln) in [
        (RQ_TYPE_STRIDING, 2u8, 4u8),
        (RQ_TYPE_STRIDING, 8, 30),
        (9, 0, 0),
    ] {
        let i = CreateRqIn {
            addr: U64::new(ring.iova()),
            cqn: U32::new(cqn),
            log_size: 3,
            rq_type: t,
            log_stride_size: ls,
            log_strides: ln,
        };
        assert_eq!(
            nic.command(op::CREATE_RQ, i.as_bytes(), 8)
                .err()
                .and_then(status),
            Some(CmdStatus::BadParam)
        );
    }
    // Destroying a CQ that queues still use, or another function's objects.
    assert_eq!(
        nic.destroy_cq(cqn).err().and_then(status),
        Some(CmdStatus::ResourceBusy)
    );
    let other_cq = r.ports[1].cq.cqn;
    assert_eq!(
        r.ports[0].nic.destroy_cq(other_cq).err().and_then(status),
        Some(CmdStatus::BadResource)
    );
    // Only the eSwitch manager (function 0) may create eSwitch tables.
    assert_eq!(
        r.ports[1]
            .nic
            .create_flow_table(TABLE_KIND_FDB, 0, TableMiss::Default)
            .err()
            .and_then(status),
        Some(CmdStatus::NotPermitted)
    );
    still_works(&mut r);
}

#[test]
fn flow_rules_naming_missing_or_foreign_objects_are_refused() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let foreign_rq = r.ports[1].rq.rqn;
    let nic = &mut r.ports[0].nic;
    let t = nic
        .create_flow_table(TABLE_KIND_NIC_RX, 1, TableMiss::Drop)
        .unwrap();
    for fate in [
        RuleFate::Rq(4242),
        RuleFate::Rq(foreign_rq),
        RuleFate::Rss(77),
        RuleFate::Goto(999),
    ] {
        assert_eq!(
            nic.create_flow_entry(t, &FlowRule::any(fate))
                .err()
                .and_then(status),
            Some(CmdStatus::BadResource),
            "{fate:?}"
        );
    }
    // Forwarding to a vPort only exists in eSwitch tables; going back to a lower level is a loop.
    assert_eq!(
        nic.create_flow_entry(t, &FlowRule::any(RuleFate::Vport(1)))
            .err()
            .and_then(status),
        Some(CmdStatus::BadParam)
    );
    let lower = nic
        .create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)
        .unwrap();
    assert_eq!(
        nic.create_flow_entry(t, &FlowRule::any(RuleFate::Goto(lower)))
            .err()
            .and_then(status),
        Some(CmdStatus::BadParam)
    );
    // Two fates in one entry.
    let raw = CreateFlowEntryIn {
        table: U32::new(t),
        actions: U32::new(action::DROP | action::FWD_RQ),
        ..Default::default()
    };
    assert_eq!(
        nic.command(op::CREATE_FLOW_ENTRY, raw.as_bytes(), 8)
            .err()
            .and_then(status),
        Some(CmdStatus::BadParam)
    );
    // RSS indirection that is not a power of two.
    let rq = r.ports[0].rq.rqn;
    assert_eq!(
        r.ports[0]
            .nic
            .create_rss_group(&[1; 40], rss_fields::SRC_IP, &[rq, rq, rq])
            .err()
            .and_then(status),
        Some(CmdStatus::BadParam)
    );
    // A table with entries or in use as a root cannot be destroyed.
    let root_busy = r.ports[0].nic.destroy_rq(rq).err().and_then(status);
    assert_eq!(
        root_busy,
        Some(CmdStatus::ResourceBusy),
        "the RQ is named by the root rule"
    );
    still_works(&mut r);
}

#[test]
fn send_from_unmapped_memory_gives_an_error_cqe_and_writes_nothing() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let m1 = r.ports[1].mac();
    let header = [m1.as_slice(), &[2, 0, 0, 0, 0, 9], &[0x08, 0x00]].concat();
    let w = fld_driver::nic::SendWqe {
        inline_header: &header,
        gather: &[(0x6000_0000, 100)],
        cs_flags: 0,
        signal: false,
        ..Default::default()
    };
    let idx = r.ports[0].sq.post(&w).unwrap();
    r.ports[0].sq.ring_doorbell();
    r.run();
    let c = r.ports[0]
        .cq
        .poll()
        .expect("error CQE even without a completion request");
    assert_eq!(c.opcode(), CQE_REQ_ERR);
    assert_eq!(c.syndrome, syndrome::DMA_ERROR);
    assert_eq!(c.wqe_counter.get(), idx);
    // Nothing reached the receiver.
    assert!(r.ports[1].rq_cq.poll().is_none());
    assert_eq!(r.ports[1].rq_query().packets.get(), 0);
    // The SQ is in error and reported it as an event; it recovers through MODIFY_SQ.
    let sqn = r.ports[0].sq.sqn;
    assert_eq!(
        r.ports[0].nic.query_sq(sqn).unwrap().state,
        QueueState::Error as u8
    );
    let e = r.ports[0].eq.poll().expect("queue error event");
    assert_eq!((e.event_type, e.data.get()), (EQE_QUEUE_ERROR, sqn));
    r.ports[0].recover_sq();
    still_works(&mut r);
}

#[test]
fn malformed_wqes_and_doorbell_overflow_give_error_cqes() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let cases: Vec<(Vec<u8>, u8)> = vec![
        // ds_count 0.
        (
            CtrlSeg {
                opcode: WQE_OP_SEND,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            syndrome::BAD_WQE,
        ),
        // Unknown opcode.
        (
            CtrlSeg {
                opcode: 0x55,
                ds_count: 1,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            syndrome::BAD_WQE,
        ),
        // SEND without an Ethernet segment.
        (
            CtrlSeg {
                opcode: WQE_OP_SEND,
                ds_count: 1,
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            syndrome::BAD_WQE,
        ),
        // Inline header longer than the WQE.
        (
            [
                CtrlSeg {
                    opcode: WQE_OP_SEND,
                    ds_count: 2,
                    ..Default::default()
                }
                .as_bytes(),
                EthSeg {
                    inline_hdr_size: U16::new(200),
                    ..Default::default()
                }
                .as_bytes(),
            ]
            .concat(),
            syndrome::BAD_WQE,
        ),
        // A frame of 4 bytes.
        (
            [
                CtrlSeg {
                    opcode: WQE_OP_SEND,
                    ds_count: 2,
                    ..Default::default()
                }
                .as_bytes(),
                EthSeg {
                    inline_hdr_size: U16::new(2),
                    ..Default::default()
                }
                .as_bytes(),
            ]
            .concat(),
            syndrome::BAD_LENGTH,
        ),
        // Data pointer with a memory key that does not exist.
        (
            [
                CtrlSeg {
                    opcode: WQE_OP_SEND,
                    ds_count: 3,
                    ..Default::default()
                }
                .as_bytes(),
                EthSeg::default().as_bytes(),
                DataSeg {
                    byte_count: U32::new(64),
                    lkey: U32::new(7),
                    addr: U64::new(r.ports[0].tx_buf.iova()),
                }
                .as_bytes(),
            ]
            .concat(),
            syndrome::BAD_WQE,
        ),
        // A frame longer than the MTU.
        (
            [
                CtrlSeg {
                    opcode: WQE_OP_SEND,
                    ds_count: 3,
                    ..Default::default()
                }
                .as_bytes(),
                EthSeg::default().as_bytes(),
                DataSeg {
                    byte_count: U32::new(60_000),
                    lkey: U32::new(0),
                    addr: U64::new(r.ports[0].tx_buf.iova()),
                }
                .as_bytes(),
            ]
            .concat(),
            syndrome::BAD_LENGTH,
        ),
    ];
    for (wqe, syn) in cases {
        r.ports[0].sq.write_raw(&wqe);
        r.ports[0].sq.ring_doorbell();
        r.run();
        let c = r.ports[0].cq.poll().expect("error CQE");
        assert_eq!((c.opcode(), c.syndrome), (CQE_REQ_ERR, syn));
        r.ports[0].cq.update_ci();
        r.ports[0].recover_sq();
    }
    // A producer counter two rings ahead of the device.
    r.ports[0].sq.ring_doorbell_raw(130);
    r.run();
    let c = r.ports[0].cq.poll().expect("overflow CQE");
    assert_eq!(
        (c.opcode(), c.syndrome),
        (CQE_REQ_ERR, syndrome::DOORBELL_OVERFLOW)
    );
    r.ports[0].recover_sq();
    // Random WQE bytes never wedge the engine.
    let mut x = 0x9e37_79b9u32;
    for _ in 0..300 {
        let wqe: Vec<u8> = (0..64)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        r.ports[0].sq.write_raw(&wqe);
        r.ports[0].sq.ring_doorbell();
        r.run();
        while r.ports[0].cq.poll().is_some() {}
        r.ports[0].cq.update_ci();
        if r.ports[0].sq_query().state == QueueState::Error as u8 {
            r.ports[0].recover_sq();
        }
    }
    while r.ports[1].rq_cq.poll().is_some() {}
    r.ports[1].rq_cq.update_ci();
    still_works_after_flush(&mut r);
}

/// Random frames may have consumed receive buffers (or put the RQ in error); top the ring up
/// again before checking.
fn still_works_after_flush(r: &mut Rig) {
    let p = &mut r.ports[1];
    let mut q = p.rq_query();
    if q.state == QueueState::Error as u8 {
        p.recover_rq();
        q = p.rq_query();
    }
    let outstanding = p.rq.producer_counter().wrapping_sub(q.hw_counter.get()) & 0xffff;
    for b in p.rx_bufs.iter().take((p.rq.size() - outstanding) as usize) {
        p.rq.post(b.iova(), b.len() as u32);
    }
    p.rq.ring_doorbell();
    still_works(r);
}

#[test]
fn oversized_frames_are_truncated_or_dropped_as_documented() {
    // Regular RQ: four 10 KiB buffers, then one of 256 bytes. A 1000-byte frame fits the first
    // four and is cut to 256 bytes and flagged in the fifth.
    let mut r = rig(RqLayout::Regular, 2, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let rqn = r.ports[1].rq.rqn;
    let f = udp_frame(m0, m1, 1, 2, 1000, 3);
    for _ in 0..4 {
        r.ports[0].send(&f, 0, false);
    }
    r.run();
    for _ in 0..4 {
        let c = r.ports[1].rq_cq.poll().unwrap();
        assert_eq!((c.byte_count.get(), c.flags), (1000, 0));
    }
    r.ports[1].rq_cq.update_ci();
    let small = r.ports[1].nic.device().dma_alloc(256).unwrap();
    r.ports[1].rq.post(small.iova(), 256);
    r.ports[1].rq.ring_doorbell();
    r.ports[0].send(&f, 0, false);
    r.run();
    let c = r.ports[1].rq_cq.poll().unwrap();
    assert_eq!((c.byte_count.get(), c.flags), (1000, cqe_flags::TRUNCATED));
    let mut got = vec![0u8; 256];
    small.read(0, &mut got);
    assert_eq!(&got[..], &f[..256]);
    assert_eq!(r.ports[1].nic.query_rq(rqn).unwrap().truncated.get(), 1);

    // Striding RQ of 8 x 64-byte strides: a 1000-byte frame cannot fit in one WQE.
    let mut r = rig(
        RqLayout::Striding {
            log_stride_size: 6,
            log_strides: 3,
        },
        2,
        6,
    );
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 1000, 3), 0, false);
    r.run();
    assert!(r.ports[1].rq_cq.poll().is_none());
    let q = r.ports[1].rq_query();
    assert_eq!((q.oversize_drops.get(), q.packets.get()), (1, 0));
    still_works(&mut r);
}

#[test]
fn receive_into_unmapped_buffer_is_an_error_cqe_not_a_write() {
    let mut r = rig(RqLayout::Regular, 2, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    // Use up the four good buffers, then post one at an address nobody mapped.
    for i in 0..4 {
        r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, i), 0, false);
    }
    r.run();
    let p = &mut r.ports[1];
    while p.rq_cq.poll().is_some() {}
    p.rq_cq.update_ci();
    p.rq.post_raw(&RecvWqe {
        byte_count: U32::new(2048),
        lkey: U32::new(0),
        addr: U64::new(0x5000_0000),
    });
    p.rq.ring_doorbell();
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 9), 0, false);
    r.run();
    let c = r.ports[1].rq_cq.poll().expect("error CQE");
    assert_eq!(
        (c.opcode(), c.syndrome),
        (CQE_RESP_ERR, syndrome::DMA_ERROR)
    );
    assert_eq!(r.ports[1].rq_query().state, QueueState::Error as u8);
    still_works_after_flush(&mut r);
}

#[test]
fn function_reset_destroys_everything_and_the_function_comes_back() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let dev = r.ports[1].dev.clone();
    let cqn = r.ports[1].cq.cqn;
    dev.write32(BAR_CONTROL, reg::DEVICE_RESET, RESET_MAGIC);
    // The old CQ is gone.
    assert_eq!(
        r.ports[1].nic.query_cq(cqn).err().and_then(status),
        Some(CmdStatus::BadResource)
    );
    // Frames to the reset vPort are not steered anywhere.
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 0), 0, false);
    r.run();
    assert_eq!(
        r.ports[0].nic.query_vport(1).unwrap().rx_no_steering.get(),
        1
    );
    // Writes to every control register offset with garbage do not wedge the function.
    for off in (0..BAR_CONTROL_SIZE).step_by(4) {
        if off != reg::DEVICE_RESET && off != reg::CMD_DOORBELL {
            dev.write32(BAR_CONTROL, off, 0xa5a5_a5a5);
        }
    }
    for off in (0..BAR_DOORBELL_SIZE).step_by(4) {
        dev.write32(BAR_DOORBELL, off, 0xffff_ffff);
    }
    r.run();
    // Bring-up again from scratch.
    let r2 = {
        let mut nic = fld_driver::nic::NicDriver::probe(dev.clone()).unwrap();
        let eq = nic.create_eq(4, 0).unwrap();
        nic.create_cq(&eq, 4).unwrap().cqn
    };
    assert!(r2 < 1024);
}

#[test]
fn create_with_no_room_for_the_result_creates_nothing() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let eqn = r.ports[0].eq.eqn;
    let nic = &mut r.ports[0].nic;
    let ring = nic.device().dma_alloc(4096).unwrap();
    let input = CreateCqIn {
        addr: U64::new(ring.iova()),
        eqn: U32::new(eqn),
        log_size: 4,
        rsvd: [0; 3],
    };
    let first = u32::from_le_bytes(
        nic.command(op::CREATE_CQ, input.as_bytes(), 8).unwrap()[..4]
            .try_into()
            .unwrap(),
    );
    nic.destroy_cq(first).unwrap();
    for _ in 0..3 {
        assert_eq!(
            nic.command(op::CREATE_CQ, input.as_bytes(), 4)
                .err()
                .and_then(status),
            Some(CmdStatus::BadOutputLength)
        );
    }
    // The number is free again: the failed creates allocated nothing.
    let again = u32::from_le_bytes(
        nic.command(op::CREATE_CQ, input.as_bytes(), 8).unwrap()[..4]
            .try_into()
            .unwrap(),
    );
    assert_eq!(again, first);
}

#[test]
fn a_full_receive_cq_drops_counts_and_reports_once() {
    // 4-entry receive CQ, 8 receive buffers, 7 frames never consumed.
    let mut r = rig(RqLayout::Regular, 3, 2);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    for i in 0..7 {
        r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, i), 0, false);
    }
    r.run();
    let p = &mut r.ports[1];
    let q = p.rq_query();
    assert_eq!((q.packets.get(), q.out_of_buffer.get()), (4, 3));
    let cqn = p.rq_cq.cqn;
    assert_eq!(p.nic.query_cq(cqn).unwrap().overflows.get(), 3);
    let e = p.eq.poll().expect("CQ error event");
    assert_eq!((e.event_type, e.data.get()), (EQE_CQ_ERROR, cqn));
    assert!(p.eq.poll().is_none(), "reported once");
    // Consuming the CQEs lets traffic flow again.
    while p.rq_cq.poll().is_some() {}
    p.rq_cq.update_ci();
    still_works(&mut r);
}

#[test]
fn function_reset_destroys_the_functions_meters_and_encapsulations_only() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let tunnel = CreateVxlanEncapIn {
        vni: U32::new(7),
        ..Default::default()
    };
    let mine = r.ports[0].nic.create_vxlan_encap(&tunnel).unwrap();
    let my_meter = r.ports[0].nic.create_meter(1000, 1000).unwrap();
    let theirs = r.ports[1].nic.create_vxlan_encap(&tunnel).unwrap();
    let their_meter = r.ports[1].nic.create_meter(1000, 1000).unwrap();
    assert_eq!(
        r.ports[0]
            .nic
            .destroy_vxlan_encap(theirs)
            .err()
            .and_then(status),
        Some(CmdStatus::BadResource),
        "another function's encapsulation cannot be destroyed"
    );
    let dev = r.ports[1].dev.clone();
    dev.write32(BAR_CONTROL, reg::DEVICE_RESET, RESET_MAGIC);
    let mut nic = fld_driver::nic::NicDriver::probe(dev).unwrap();
    assert_eq!(
        nic.destroy_vxlan_encap(theirs).err().and_then(status),
        Some(CmdStatus::BadResource)
    );
    assert_eq!(
        nic.destroy_meter(their_meter).err().and_then(status),
        Some(CmdStatus::BadResource)
    );
    // The freed slots are reused; the other function's objects are untouched.
    assert_eq!(r.ports[0].nic.create_vxlan_encap(&tunnel).unwrap(), theirs);
    r.ports[0].nic.destroy_vxlan_encap(mine).unwrap();
    r.ports[0].nic.destroy_meter(my_meter).unwrap();
}

/// A multi-packet send WQE (§6.6) refused whole: no frames, more than a WQE carries, more than
/// its CQ holds at four entries a frame, an inline header, a resume table; a frame too short or
/// longer than the MTU fails it at that frame. Each gets its error CQE, naming the WQE, and
/// nothing of a WQE refused whole leaves.
#[test]
fn malformed_multi_packet_wqes_give_error_cqes() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let f = udp_frame(m0, m1, 9, 9, 64, 1);
    r.ports[0].tx_buf.write(0, &f);
    let at = r.ports[0].tx_buf.iova();
    let wqe = |frames: Vec<(u64, u32)>, eth: EthSeg| {
        let ctrl = CtrlSeg {
            opcode: WQE_OP_SEND_MPW,
            ds_count: (2 + frames.len()) as u8,
            ..Default::default()
        };
        let segs: Vec<u8> = frames
            .iter()
            .flat_map(|&(a, n)| DataSeg::bus(a, n).as_bytes().to_vec())
            .collect();
        [ctrl.as_bytes(), eth.as_bytes(), &segs].concat()
    };
    let plain = EthSeg::default();
    let cases = [
        (wqe(vec![], plain), syndrome::BAD_WQE, 0),
        (wqe(vec![(at, 64); 31], plain), syndrome::BAD_WQE, 0),
        (wqe(vec![(at, 64); 17], plain), syndrome::BAD_WQE, 0),
        (
            wqe(
                vec![(at, 64)],
                EthSeg {
                    inline_hdr_size: U16::new(2),
                    ..Default::default()
                },
            ),
            syndrome::BAD_WQE,
            0,
        ),
        (
            wqe(
                vec![(at, 64)],
                EthSeg {
                    flags: ETH_FLAG_RESUME,
                    ..Default::default()
                },
            ),
            syndrome::BAD_WQE,
            0,
        ),
        (
            wqe(vec![(at, 64), (at, 10)], plain),
            syndrome::BAD_LENGTH,
            1,
        ),
        (
            wqe(vec![(at, 64), (at, 60_000)], plain),
            syndrome::BAD_LENGTH,
            1,
        ),
        (
            wqe(vec![(at, 64), (at, 64), (0x6000_0000, 64)], plain),
            syndrome::DMA_ERROR,
            2,
        ),
    ];
    for (bytes, syn, sent) in cases {
        let before = r.ports[1].rq_query().packets.get();
        let idx = r.ports[0].sq.producer_counter() as u16;
        r.ports[0].sq.write_raw(&bytes);
        r.ports[0].sq.ring_doorbell();
        r.run();
        let c = r.ports[0].cq.poll().expect("error CQE");
        assert_eq!(
            (c.opcode(), c.syndrome, c.wqe_counter.get()),
            (CQE_REQ_ERR, syn, idx)
        );
        let after = r.ports[1].rq_query().packets.get();
        assert_eq!(
            after - before,
            sent,
            "frames before the failing one are sent"
        );
        while r.ports[1].rq_cq.poll().is_some() {}
        r.ports[1].rq_cq.update_ci();
        r.ports[0].cq.update_ci();
        r.ports[0].recover_sq();
        still_works(&mut r);
    }
}
