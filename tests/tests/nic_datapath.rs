//! The soft NIC's data path seen from a driver: CQE fields, owner bits, strides, checksums,
//! interrupts and exact PCIe TLP accounting.

mod common;

use common::*;
use fld_abi::nic::*;
use fld_device::fabric::HOST;
use fld_driver::nic::RqLayout;
use fld_driver::PciDevice;

#[test]
fn frame_crosses_the_eswitch_byte_exact_with_complete_cqes() {
    let mut r = rig(RqLayout::Regular, 6, 8);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let frame = udp_frame(m0, m1, 4000, 53, 300, 9);
    let idx = r.ports[0].send(&frame, 0, true);
    r.run();
    let tx = r.ports[0].cq.poll().expect("send completion");
    assert_eq!(tx.opcode(), CQE_REQ);
    assert_eq!(tx.wqe_counter.get(), idx);
    assert_eq!(tx.byte_count.get(), 300);
    assert_eq!(tx.qn.get(), r.ports[0].sq.sqn);
    let rx = r.ports[1].rq_cq.poll().expect("receive completion");
    assert_eq!(rx.opcode(), CQE_RESP_SEND);
    assert_eq!(rx.byte_count.get(), 300);
    assert_eq!(rx.wqe_counter.get(), 0);
    assert_eq!(rx.qn.get(), r.ports[1].rq.rqn);
    assert_eq!(rx.flags, 0);
    let c = cqe_csum::L3_PRESENT
        | cqe_csum::L3_OK
        | cqe_csum::L4_PRESENT
        | cqe_csum::L4_OK
        | cqe_csum::UDP;
    assert_eq!(rx.csum, c);
    let mut got = vec![0u8; 300];
    r.ports[1].rx_bufs[0].read(0, &mut got);
    assert_eq!(got, frame);
    assert!(r.ports[1].rq_cq.poll().is_none());
    assert!(
        r.ports[0].rq_cq.poll().is_none(),
        "the sender must not receive its own frame"
    );
}

#[test]
fn owner_bit_alternates_over_many_ring_cycles() {
    // A 4-entry receive CQ and an 8-entry RQ, 100 frames: 25 passes over the CQ ring.
    let mut r = rig(RqLayout::Regular, 3, 2);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    for i in 0..100u32 {
        let frame = udp_frame(m0, m1, 1000 + i as u16, 7, 64 + (i as usize % 7), i as u8);
        r.ports[0].send(&frame, 0, false);
        r.run();
        let slot_owner = (i >> 2) & 1;
        let cqe = r.ports[1]
            .rq_cq
            .poll()
            .unwrap_or_else(|| panic!("CQE {i} missing"));
        assert_eq!((cqe.op_own & 1) as u32, slot_owner, "owner bit of CQE {i}");
        assert_eq!(cqe.wqe_counter.get() as u32, i);
        assert_eq!(cqe.byte_count.get() as usize, frame.len());
        let mut got = vec![0u8; frame.len()];
        r.ports[1].rx_bufs[(i % 8) as usize].read(0, &mut got);
        assert_eq!(got, frame, "frame {i}");
        r.ports[1].rq_cq.update_ci();
        let b = &r.ports[1].rx_bufs[(i % 8) as usize];
        let (iova, len) = (b.iova(), b.len() as u32);
        r.ports[1].rq.post(iova, len);
        r.ports[1].rq.ring_doorbell();
    }
    // Unsignalled sends produced no send CQEs.
    assert!(r.ports[0].cq.poll().is_none());
}

#[test]
fn striding_rq_places_frames_in_consecutive_strides_with_fillers() {
    // 8 strides of 256 bytes per WQE (2 KiB buffers).
    let mut r = rig(
        RqLayout::Striding {
            log_stride_size: 8,
            log_strides: 3,
        },
        2,
        6,
    );
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    // 300 B -> 2 strides, 600 B -> 3 strides, 100 B -> 1 stride (6 used), 700 B needs 3: filler
    // for the last 2 strides, then WQE 1 from stride 0.
    let sizes = [300usize, 600, 100, 700];
    let frames: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| udp_frame(m0, m1, 5000, 9, n, i as u8))
        .collect();
    for f in &frames {
        r.ports[0].send(f, 0, false);
    }
    r.run();
    let expect = [
        (0u16, 0u16, 2u16, 0u8),
        (0, 2, 3, 0),
        (0, 5, 1, 0),
        (0, 6, 2, cqe_flags::FILLER | cqe_flags::WQE_DONE),
        (1, 0, 3, 0),
    ];
    let mut frame_i = 0;
    for (k, &(wqe, stride, consumed, flags)) in expect.iter().enumerate() {
        let c = r.ports[1]
            .rq_cq
            .poll()
            .unwrap_or_else(|| panic!("CQE {k} missing"));
        assert_eq!(
            (
                c.wqe_counter.get(),
                c.stride_index.get(),
                c.consumed_strides.get(),
                c.flags
            ),
            (wqe, stride, consumed, flags),
            "CQE {k}"
        );
        if flags & cqe_flags::FILLER == 0 {
            let f = &frames[frame_i];
            assert_eq!(c.byte_count.get() as usize, f.len());
            let mut got = vec![0u8; f.len()];
            r.ports[1].rx_bufs[wqe as usize].read(stride as usize * 256, &mut got);
            assert_eq!(&got, f, "frame {frame_i}");
            frame_i += 1;
        }
    }
    assert!(r.ports[1].rq_cq.poll().is_none());
}

#[test]
fn frames_of_every_size_span_strides_byte_exact() {
    // 64-byte strides, 256 per WQE: a 9000-byte frame spans 141 strides.
    let mut r = rig(
        RqLayout::Striding {
            log_stride_size: 6,
            log_strides: 8,
        },
        3,
        10,
    );
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let mut consumed_wqes = 0u32;
    for (i, len) in (60..=9000usize).step_by(37).chain([9000]).enumerate() {
        let f = udp_frame(m0, m1, 6000, 9, len, i as u8);
        r.ports[0].send(&f, 0, false);
        r.run();
        loop {
            let c = r.ports[1].rq_cq.poll().expect("CQE");
            assert_eq!(c.opcode(), CQE_RESP_SEND);
            let slot = c.wqe_counter.get() as usize % 8;
            if c.flags & cqe_flags::WQE_DONE != 0 {
                consumed_wqes += 1;
            }
            if c.flags & cqe_flags::FILLER != 0 {
                // Repost the finished buffer in order.
                let b = &r.ports[1].rx_bufs[slot];
                let (iova, n) = (b.iova(), b.len() as u32);
                r.ports[1].rq.post(iova, n);
                r.ports[1].rq.ring_doorbell();
                continue;
            }
            assert_eq!(
                c.consumed_strides.get() as usize,
                len.div_ceil(64),
                "size {len}"
            );
            let mut got = vec![0u8; len];
            r.ports[1].rx_bufs[slot].read(c.stride_index.get() as usize * 64, &mut got);
            assert_eq!(got, f, "size {len}");
            if c.flags & cqe_flags::WQE_DONE != 0 {
                let b = &r.ports[1].rx_bufs[slot];
                let (iova, n) = (b.iova(), b.len() as u32);
                r.ports[1].rq.post(iova, n);
                r.ports[1].rq.ring_doorbell();
            }
            break;
        }
        r.ports[1].rq_cq.update_ci();
    }
    assert!(consumed_wqes > 8, "buffers were recycled around the ring");
}

#[test]
fn checksum_offload_inserts_on_transmit_and_validates_on_receive() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let good = tcp_frame(
        m0,
        m1,
        [192, 168, 1, 1],
        [192, 168, 1, 2],
        443,
        50000,
        b"checksum offload test payload",
    );
    // Zero both checksums and ask the NIC to fill them.
    let mut zeroed = good.clone();
    zeroed[24..26].fill(0);
    zeroed[50..52].fill(0);
    r.ports[0].send(&zeroed, CS_L3 | CS_L4, false);
    // A corrupted L4 checksum sent without offload must be flagged bad on receive.
    let mut bad = good.clone();
    bad[50] ^= 0x55;
    r.ports[0].send(&bad, 0, false);
    r.run();
    let c = r.ports[1].rq_cq.poll().unwrap();
    let mut got = vec![0u8; good.len()];
    r.ports[1].rx_bufs[0].read(0, &mut got);
    assert_eq!(
        got, good,
        "inserted checksums equal the reference encoder's"
    );
    assert_eq!(
        c.csum,
        cqe_csum::L3_PRESENT
            | cqe_csum::L3_OK
            | cqe_csum::L4_PRESENT
            | cqe_csum::L4_OK
            | cqe_csum::TCP
    );
    let c = r.ports[1].rq_cq.poll().unwrap();
    assert_eq!(
        c.csum,
        cqe_csum::L3_PRESENT | cqe_csum::L3_OK | cqe_csum::L4_PRESENT | cqe_csum::TCP
    );
}

#[test]
fn armed_completion_queue_raises_msix_through_its_event_queue() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    assert_eq!(r.ports[1].dev.take_interrupts(0), 0);
    // Not armed: a completion writes no event.
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 0), 0, false);
    r.run();
    assert_eq!(r.ports[1].dev.take_interrupts(0), 0);
    assert!(r.ports[1].rq_cq.poll().is_some());
    // Armed: the next CQE posts an EQE naming the CQ and raises vector 0 once.
    r.ports[1].rq_cq.arm();
    r.run();
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 1), 0, false);
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 2), 0, false);
    r.run();
    assert_eq!(r.ports[1].dev.take_interrupts(0), 1);
    let e = r.ports[1].eq.poll().expect("completion event");
    assert_eq!(e.event_type, EQE_COMPLETION);
    assert_eq!(e.data.get(), r.ports[1].rq_cq.cqn);
    assert!(r.ports[1].eq.poll().is_none(), "one event per arm");
    // A consumer update right after an arm does not cancel it.
    while r.ports[1].rq_cq.poll().is_some() {}
    r.ports[1].rq_cq.arm();
    r.ports[1].rq_cq.update_ci();
    r.ports[1].eq.arm();
    r.run();
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 3), 0, false);
    r.run();
    assert_eq!(r.ports[1].dev.take_interrupts(0), 1);
    assert_eq!(
        r.ports[1].eq.poll().unwrap().data.get(),
        r.ports[1].rq_cq.cqn
    );
    // Re-arming the EQ and CQ while a CQE is already pending fires at once.
    r.ports[1].eq.arm();
    r.ports[1].rq_cq.arm();
    r.run();
    assert_eq!(r.ports[1].dev.take_interrupts(0), 1);
    assert_eq!(
        r.ports[1].eq.poll().unwrap().data.get(),
        r.ports[1].rq_cq.cqn
    );
}

/// A card whose RQs fetch each receive WQE when its frame arrives (no read ahead), so one frame's
/// TLPs are exactly the formula's.
fn no_read_ahead() -> fld_device::card::CardConfig {
    fld_device::card::CardConfig {
        nic: fld_device::nic::NicConfig {
            rx_prefetch_depth: 0,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn pcie_traffic_of_one_frame_equals_the_tlp_formula() {
    let mut r = rig_on(no_read_ahead(), RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let (f0, f1) = (r.ports[0].dev.function_id(), r.ports[1].dev.function_id());
    let frame = udp_frame(m0, m1, 1, 2, 64, 0);
    // The WQE fetched by DMA (WQE by MMIO is the next test's).
    r.ports[0].sq.set_wqe_by_mmio(false);
    r.card.fabric.clear_stats();
    r.ports[0].send(&frame, 0, true);
    r.run();
    let (s0, s1, h) = (
        r.card.fabric.stats(f0),
        r.card.fabric.stats(f1),
        r.card.fabric.stats(HOST),
    );
    // Sender: in = doorbell (4 B) + WQE completion (64 B) + data completion (50 B); out = two
    // read requests + the 64-byte send CQE.
    assert_eq!((s0.down_tlps, s0.down_payload_bytes), (3, 4 + 64 + 50));
    assert_eq!((s0.up_tlps, s0.up_payload_bytes), (3, 64));
    // Receiver: in = receive-WQE completion (16 B); out = its read request, the frame (64 B) and
    // the CQE (64 B). It got no MMIO.
    assert_eq!((s1.down_tlps, s1.down_payload_bytes), (1, 16));
    assert_eq!((s1.up_tlps, s1.up_payload_bytes), (3, 128));
    for s in [s0, s1] {
        assert_eq!(s.up_header_bytes, 24 * s.up_tlps);
        assert_eq!(s.down_header_bytes, 24 * s.down_tlps);
    }
    // The root port saw all of it from the other side.
    assert_eq!(h.up_tlps, 1 + 2 + 1);
    assert_eq!(h.down_tlps, 2 + 1 + 1 + 2);
}

/// WQE by MMIO (§4.1): the lone WQE reaches the card with its doorbell — the unseal, its one
/// 64-byte chunk and the seal, then the doorbell — and no read fetches it: the frame leaves after
/// the data read alone.
#[test]
fn a_wqe_by_mmio_crosses_pcie_with_its_doorbell_and_is_not_fetched() {
    let mut r = rig_on(no_read_ahead(), RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let f0 = r.ports[0].dev.function_id();
    let frame = udp_frame(m0, m1, 1, 2, 64, 0);
    let before = r.card.nic.wqe_mmio_counters();
    r.card.fabric.clear_stats();
    r.ports[0].send(&frame, 0, true);
    r.run();
    let s0 = r.card.fabric.stats(f0);
    // In: unseal (4 B), the WQE chunk (64 B), seal (4 B), doorbell (4 B), data completion (50 B).
    assert_eq!(
        (s0.down_tlps, s0.down_payload_bytes),
        (5, 4 + 64 + 4 + 4 + 50)
    );
    // Out: the data read request and the send CQE; no WQE read.
    assert_eq!((s0.up_tlps, s0.up_payload_bytes), (2, 64));
    assert_eq!(r.card.nic.wqe_mmio_counters().taken, before.taken + 1);
    let sqn = r.ports[0].sq.sqn;
    let q = r.ports[0].nic.query_sq(sqn).unwrap();
    assert_eq!((q.packets.get(), q.on_chip.get()), (1, 1));
    let rx = r.ports[1].rq_cq.poll().expect("receive completion");
    let mut got = vec![0u8; rx.byte_count.get() as usize];
    r.ports[1].rx_bufs[0].read(0, &mut got);
    assert_eq!(got, frame);
}

#[test]
fn receive_statistics_count_packets_bytes_and_missing_buffers() {
    let mut r = rig(RqLayout::Regular, 2, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    // Four buffers posted; six frames: two are dropped for lack of buffers.
    for i in 0..6 {
        r.ports[0].send(&udp_frame(m0, m1, 1, 2, 100, i), 0, false);
    }
    r.run();
    let rqn = r.ports[1].rq.rqn;
    let q = r.ports[1].nic.query_rq(rqn).unwrap();
    assert_eq!(
        (q.packets.get(), q.bytes.get(), q.out_of_buffer.get()),
        (4, 400, 2)
    );
    let v = r.ports[1].nic.query_vport(1).unwrap();
    assert_eq!((v.rx_packets.get(), v.rx_out_of_buffer.get()), (4, 2));
    let v0 = r.ports[0].nic.query_vport(0).unwrap();
    assert_eq!((v0.tx_packets.get(), v0.tx_bytes.get()), (6, 600));
}

/// The frame the receiving port's next CQE reports, read from the buffer of its WQE slot.
fn received(r: &mut Rig, port: usize) -> Option<Vec<u8>> {
    let c = r.ports[port].rq_cq.poll()?;
    assert_eq!(c.opcode(), CQE_RESP_SEND, "{c:?}");
    let slot = usize::from(c.wqe_counter.get()) % r.ports[port].rx_bufs.len();
    let mut got = vec![0u8; c.byte_count.get() as usize];
    r.ports[port].rx_bufs[slot].read(0, &mut got);
    Some(got)
}

/// Receive WQEs are read ahead after their doorbell (§7.5): one 64-byte read brings four, a frame
/// then costs no read on the receiving side, and the slot it frees is refilled by a 16-byte read.
#[test]
fn receive_wqes_are_read_ahead_and_a_frame_needs_no_read() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    r.run();
    let ahead = r.card.nic.rx_prefetch_counters();
    // Both ports' RQs: one read of four WQEs each.
    assert_eq!((ahead.reads, ahead.wqes, ahead.hits), (2, 8, 0));
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let f1 = r.ports[1].dev.function_id();
    r.card.fabric.clear_stats();
    let frame = udp_frame(m0, m1, 1, 2, 64, 0);
    r.ports[0].send(&frame, 0, false);
    r.run();
    let s1 = r.card.fabric.stats(f1);
    // In: the refill's completion (16 B). Out: the frame, the CQE, the refill's read request.
    assert_eq!((s1.down_tlps, s1.down_payload_bytes), (1, 16));
    assert_eq!((s1.up_tlps, s1.up_payload_bytes), (3, 128));
    let after = r.card.nic.rx_prefetch_counters();
    assert_eq!((after.reads, after.wqes, after.hits), (3, 9, 1));
    let rqn = r.ports[1].rq.rqn;
    let q = r.ports[1].nic.query_rq(rqn).unwrap();
    assert_eq!((q.packets.get(), q.on_chip.get()), (1, 1));
    assert_eq!(received(&mut r, 1), Some(frame));
    // On chip: four WQEs of 16 B for each port's RQ, a 256-byte buffer for each port's SQ.
    let m = r.card.nic.on_chip_memory();
    assert_eq!(
        (m.rqs, m.read_ahead_depth, m.rx_read_ahead_bytes),
        (2, 4, 128)
    );
    assert_eq!((m.send_queues, m.wqe_buffer_bytes), (2, 512));
}

/// What was read ahead never outlives what it stood for: a doorbell that goes back (a stale
/// store seen late) holds frames back exactly as a fetch on arrival would; an RQ error and its
/// recovery drop it, and the WQEs posted after the recovery are the ones used.
#[test]
fn read_ahead_stays_correct_across_doorbell_reordering_errors_and_resets() {
    let mut r = rig(RqLayout::Regular, 3, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    r.run();
    let rqn = r.ports[1].rq.rqn;
    let frame = |i: u8| udp_frame(m0, m1, 1, 2, 80, i);
    // The producer counter goes back from 8 to 2: two frames are placed, the third has no WQE.
    r.ports[1]
        .dev
        .write32(BAR_DOORBELL, db::slot(db::RQ_BASE, rqn), 2);
    for i in 0..3 {
        r.ports[0].send(&frame(i), 0, false);
    }
    r.run();
    assert_eq!(received(&mut r, 1), Some(frame(0)));
    assert_eq!(received(&mut r, 1), Some(frame(1)));
    assert_eq!(received(&mut r, 1), None);
    assert_eq!(r.ports[1].rq_query().out_of_buffer.get(), 1);
    // Forward again: the next frame takes WQE 2.
    r.ports[1]
        .dev
        .write32(BAR_DOORBELL, db::slot(db::RQ_BASE, rqn), 8);
    r.ports[0].send(&frame(3), 0, false);
    r.run();
    assert_eq!(received(&mut r, 1), Some(frame(3)));
    r.ports[0].send(&frame(4), 0, false);
    r.run();
    assert_eq!(received(&mut r, 1), Some(frame(4)));
    r.ports[1].rq_cq.update_ci();
    // Recovery: the RQ restarts at counter 0 with new WQEs; frames land in them, not in buffers
    // read ahead before.
    r.ports[1]
        .dev
        .write32(BAR_DOORBELL, db::slot(db::RQ_BASE, rqn), 0xffff);
    r.ports[0].send(&frame(5), 0, false);
    r.run();
    let c = r.ports[1].rq_cq.poll().expect("error CQE");
    assert_eq!(c.opcode(), CQE_RESP_ERR);
    assert_eq!(c.syndrome, syndrome::DOORBELL_OVERFLOW);
    r.ports[1].rq_cq.update_ci();
    r.ports[1].recover_rq();
    let fresh = r.ports[1].dev.dma_alloc(RX_BUF).unwrap();
    r.ports[1].rq.post(fresh.iova(), RX_BUF as u32);
    r.ports[1].rq.ring_doorbell();
    r.ports[0].send(&frame(6), 0, false);
    r.run();
    let c = r.ports[1].rq_cq.poll().expect("receive after recovery");
    assert_eq!((c.opcode(), c.wqe_counter.get()), (CQE_RESP_SEND, 0));
    let mut got = vec![0u8; c.byte_count.get() as usize];
    fresh.read(0, &mut got);
    assert_eq!(got, frame(6));
    // A WQE read ahead is checked when it is used, as a fetched one: a bad key is an error.
    r.ports[1].rq.post_raw(&RecvWqe {
        byte_count: zerocopy::little_endian::U32::new(RX_BUF as u32),
        lkey: zerocopy::little_endian::U32::new(0x1234),
        addr: zerocopy::little_endian::U64::new(fresh.iova()),
    });
    r.ports[1].rq.ring_doorbell();
    r.run();
    let before = r.card.nic.rx_prefetch_counters().hits;
    r.ports[0].send(&frame(7), 0, false);
    r.run();
    let c = r.ports[1].rq_cq.poll().expect("error CQE");
    assert_eq!(
        (c.opcode(), c.syndrome),
        (CQE_RESP_ERR, syndrome::BAD_RECV_WQE)
    );
    assert_eq!(
        r.card.nic.rx_prefetch_counters().hits,
        before + 1,
        "it was read ahead"
    );
}

/// WQE by MMIO (§4.1) and the fetch are the same WQEs by two roads: the same frames, send and
/// receive CQEs and counters, frame for frame.
#[test]
fn wqe_by_mmio_and_the_fetch_give_identical_frames_cqes_and_counters() {
    let run = |mmio: bool| {
        let mut r = rig(RqLayout::Regular, 6, 8);
        r.ports[0].sq.set_wqe_by_mmio(mmio);
        let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
        let mut out = Vec::new();
        for (i, len) in [60usize, 64, 65, 128, 300, 1500, 9000, 61]
            .iter()
            .enumerate()
        {
            let f = udp_frame(m0, m1, 7, 9, *len, i as u8);
            r.ports[0].send(&f, if i % 2 == 0 { CS_L3 | CS_L4 } else { 0 }, i % 3 != 1);
            r.run();
            // Every field but the time stamp (the card's clock is this process's).
            let tx = std::iter::from_fn(|| r.ports[0].cq.poll())
                .map(|mut c| {
                    c.timestamp = Default::default();
                    c
                })
                .collect::<Vec<_>>();
            let rx = received(&mut r, 1);
            out.push(format!("{tx:?} {rx:?}"));
        }
        let counters = (
            r.ports[0].sq_query(),
            r.ports[0].nic.query_vport(0).unwrap(),
            r.ports[1].nic.query_vport(1).unwrap(),
        );
        out.push(format!(
            "{:?} {:?} {:?}",
            (counters.0.packets, counters.0.bytes, counters.0.hw_counter),
            counters.1.named(),
            counters.2.named()
        ));
        (out, r.card.nic.wqe_mmio_counters())
    };
    let (by_mmio, taken) = run(true);
    let (fetched, none) = run(false);
    for (k, (a, b)) in by_mmio.iter().zip(&fetched).enumerate() {
        assert!(a == b, "send {k} differs");
    }
    assert_eq!((taken.taken, taken.rejected), (8, 0));
    assert_eq!((none.taken, none.rejected), (0, 0));
}

/// A lone WQE that runs past the ring's end goes by MMIO whole: the driver reads its two basic
/// blocks back from the ring's last and first slots, and the card sends the frame posted.
#[test]
fn a_lone_wqe_across_the_rings_end_goes_by_mmio_whole() {
    let mut r = rig(RqLayout::Regular, 6, 8);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let ring = r.ports[0].sq.size();
    for i in 0..ring - 1 {
        let f = udp_frame(m0, m1, 7, 9, 64, i as u8);
        r.ports[0].send(&f, 0, false);
        r.run();
        assert_eq!(received(&mut r, 1).as_deref(), Some(&f[..]), "frame {i}");
    }
    let before = r.card.nic.wqe_mmio_counters();
    // A 60-byte inline header and one gather entry: two basic blocks, slots 63 and 0.
    let f = udp_frame(m0, m1, 7, 9, 300, 0xa5);
    r.ports[0].tx_buf.write(0, &f);
    let gather = [(r.ports[0].tx_buf.iova() + 60, 240)];
    let w = SendWqe {
        inline_header: &f[..60],
        gather: &gather,
        cs_flags: CS_L3 | CS_L4,
        signal: true,
        ..Default::default()
    };
    assert_eq!(w.wqebbs(), 2);
    r.ports[0].sq.post(&w).unwrap();
    r.ports[0].sq.ring_doorbell();
    assert_eq!(r.ports[0].sq.producer_counter(), ring + 1);
    r.run();
    let m = r.card.nic.wqe_mmio_counters();
    assert_eq!((m.taken, m.rejected), (before.taken + 1, before.rejected));
    let got = received(&mut r, 1).expect("the frame");
    // The card inserted the checksums the frame already carries.
    assert_eq!(got, f);
    let tx = r.ports[0].cq.poll().expect("send completion");
    assert_eq!((tx.opcode(), tx.byte_count.get()), (CQE_REQ, 300));
}

/// A buffer the engine cannot trust is never used: written without its seal (a partial write),
/// sealed for an earlier WQE (stale), or sealed for this WQE over another WQE's bytes (torn or
/// forged) — each time the WQE is fetched from the ring and the frame is the ring's.
#[test]
fn partial_stale_and_torn_buffers_fall_back_to_the_fetch() {
    let mut r = rig(RqLayout::Regular, 6, 8);
    r.ports[0].sq.set_wqe_by_mmio(false);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let sqn = r.ports[0].sq.sqn;
    let buffer = db::wqe_buffer(db::SQ_WQE_BASE, sqn);
    let seal = buffer + db::WQE_SEAL_OFFSET;
    let dev = r.ports[0].dev.clone();
    // Another WQE's block, whose control segment names counter `index`.
    let other_wqe = |index: u16| {
        let mut b = [0x5au8; 64];
        let mut ctrl = CtrlSeg {
            opcode: WQE_OP_SEND,
            ds_count: 4,
            ..Default::default()
        };
        ctrl.wqe_index.set(index);
        b[..16].copy_from_slice(zerocopy::IntoBytes::as_bytes(&ctrl));
        b
    };
    let cases: [(&str, &dyn Fn(u32)); 3] = [
        ("partial", &|_| {
            dev.write32(BAR_DOORBELL, seal, 0);
            dev.bar_write(BAR_DOORBELL, buffer, &other_wqe(0));
        }),
        ("stale", &|counter| {
            let earlier = counter.wrapping_sub(1);
            dev.bar_write(BAR_DOORBELL, buffer, &other_wqe(earlier as u16));
            dev.write32(BAR_DOORBELL, seal, db::wqe_seal(earlier, 1));
        }),
        ("torn", &|counter| {
            dev.bar_write(BAR_DOORBELL, buffer, &other_wqe(counter as u16 + 7));
            dev.write32(BAR_DOORBELL, seal, db::wqe_seal(counter, 1));
        }),
    ];
    for (i, (name, spoil)) in cases.iter().enumerate() {
        let f = udp_frame(m0, m1, 7, 9, 64, i as u8);
        let counter = r.ports[0].sq.producer_counter();
        spoil(counter);
        r.ports[0].send(&f, 0, true);
        r.run();
        assert_eq!(received(&mut r, 1), Some(f), "{name}");
        let c = r.ports[0].cq.poll().expect("send completion");
        assert_eq!((c.opcode(), c.syndrome), (CQE_REQ, 0), "{name}");
    }
    let m = r.card.nic.wqe_mmio_counters();
    assert_eq!(
        (m.taken, m.rejected),
        (0, 1),
        "only the torn one was sealed for its WQE"
    );
}

/// A multi-packet send WQE (§6.6): sixteen UDP frames of different lengths with zeroed
/// checksums in one WQE arrive byte for byte with the checksums the reference encoder writes,
/// each with its receive CQE; the sender gets one completion for all of them, naming the WQE
/// and its bytes, and the PCIe counters see one WQE read for the lot.
#[test]
fn a_multi_packet_wqe_sends_each_frame_byte_exact_with_one_completion() {
    let mut r = rig_on(no_read_ahead(), RqLayout::Regular, 5, 7);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let frames: Vec<Vec<u8>> = (0..16)
        .map(|j| udp_frame(m0, m1, 7000 + j, 53, 60 + 61 * j as usize, j as u8))
        .collect();
    let mut gather = Vec::new();
    for (j, f) in frames.iter().enumerate() {
        let mut zeroed = f.clone();
        zeroed[24..26].fill(0);
        zeroed[40..42].fill(0);
        let at = j * RX_BUF;
        r.ports[0].tx_buf.write(at, &zeroed);
        gather.push((r.ports[0].tx_buf.iova() + at as u64, f.len() as u32));
    }
    let wqe = MultiPacketSendWqe {
        frames: &gather,
        cs_flags: CS_L3 | CS_L4,
        signal: true,
    };
    let f0 = r.ports[0].dev.function_id();
    r.ports[0].sq.set_wqe_by_mmio(false);
    r.run();
    r.card.fabric.clear_stats();
    let idx = r.ports[0].sq.post_multi_packet(&wqe).unwrap();
    r.ports[0].sq.ring_doorbell();
    r.run();
    let s = r.card.fabric.stats(f0);
    for f in &frames {
        let c = r.ports[1].rq_cq.poll().expect("a receive CQE per frame");
        assert_eq!(c.byte_count.get() as usize, f.len());
        assert_eq!(
            c.csum & (cqe_csum::L3_OK | cqe_csum::L4_OK),
            cqe_csum::L3_OK | cqe_csum::L4_OK
        );
        let slot = usize::from(c.wqe_counter.get()) % r.ports[1].rx_bufs.len();
        let mut got = vec![0u8; f.len()];
        r.ports[1].rx_bufs[slot].read(0, &mut got);
        assert_eq!(&got, f);
    }
    assert!(r.ports[1].rq_cq.poll().is_none());
    let tx = r.ports[0].cq.poll().expect("one send completion");
    let total: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(tx.opcode(), CQE_REQ);
    assert_eq!(tx.wqe_counter.get(), idx);
    assert_eq!(tx.byte_count.get() as usize, total);
    assert!(r.ports[0].cq.poll().is_none(), "one completion for the WQE");
    let q = r.ports[0].sq_query();
    assert_eq!(
        (q.packets.get(), q.bytes.get()),
        (frames.len() as u64, total as u64)
    );
    // The sender: in, the doorbell, the WQE's five blocks and the frames; out, one read request
    // for the WQE, one per 512 bytes of frame (the read request size), and the send CQE.
    assert_eq!(wqe.wqebbs(), 5);
    assert_eq!(s.down_payload_bytes as usize, 4 + 5 * 64 + total, "{s:?}");
    let frame_reads: usize = frames.iter().map(|f| f.len().div_ceil(512)).sum();
    assert_eq!(
        (s.up_tlps as usize, s.up_payload_bytes),
        (1 + frame_reads + 1, 64)
    );
}
