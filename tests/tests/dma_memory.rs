//! The driver's DMA memory is given back: queues created and destroyed 100,000 times fit in an
//! area that holds a few dozen rings, and a queue the device refuses to destroy keeps its ring.

use fld_abi::nic::CmdStatus;
use fld_device::card::{Card, CardConfig};
use std::sync::Arc;

use fld_driver::inprocess::{InProcessDevice, InProcessHost};
use fld_driver::nic::{EventQueue, NicDriver, RqLayout};
use fld_driver::PciDevice;

/// 256 KiB: the command mailboxes, one EQ and a few dozen 4 KiB rings.
const AREA: usize = 256 << 10;

/// A NIC function probed over an in-process card with [`AREA`] bytes of DMA memory, with an EQ.
fn small_host() -> (
    Arc<InProcessHost>,
    Arc<InProcessDevice>,
    NicDriver,
    EventQueue,
) {
    let card = Card::new(CardConfig::default());
    let host = InProcessHost::new(card.clone(), AREA).unwrap();
    let dev = host.device(card.nic.function_id(0).unwrap());
    let mut nic = NicDriver::probe(dev.clone()).unwrap();
    dev.enable_msix(1).unwrap();
    let eq = nic.create_eq(6, 0).unwrap();
    (host, dev, nic, eq)
}

#[test]
fn queues_created_and_destroyed_100k_times_fit_in_a_small_area() {
    let (host, dev, mut nic, eq) = small_host();
    let baseline = host.allocated();
    let mut numbers = std::collections::BTreeSet::new();
    for round in 0..100_000u32 {
        let cq = nic
            .create_cq(&eq, 6)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let sq = nic.create_sq(&cq, 6, round % 2 == 0).unwrap();
        let rq = nic.create_rq(&cq, 6, RqLayout::Regular).unwrap();
        let buffers = dev.dma_alloc(16 << 10).unwrap();
        assert!(host.allocated() > baseline + (16 << 10));
        numbers.insert((cq.cqn, sq.sqn, rq.rqn));
        nic.destroy_recv_queue(rq).unwrap();
        nic.destroy_send_queue(sq).unwrap();
        nic.destroy_completion_queue(cq).unwrap();
        drop(buffers);
        assert_eq!(host.allocated(), baseline, "round {round}");
    }
    assert_eq!(numbers.len(), 1, "the device reuses queue numbers too");
    // 100k rounds of ~29 KiB would need ~2.8 GiB without reuse; the area is 256 KiB.
    const { assert!(AREA < 100_000 * (16 << 10)) };
    nic.destroy_event_queue(eq).unwrap();
}

#[test]
fn a_queue_the_device_refuses_to_destroy_keeps_its_ring() {
    let (host, _, mut nic, eq) = small_host();
    let cq = nic.create_cq(&eq, 6).unwrap();
    let cqn = cq.cqn;
    let sq = nic.create_sq(&cq, 6, true).unwrap();
    let with_cq = host.allocated();
    let busy = nic
        .destroy_completion_queue(cq)
        .err()
        .and_then(|e| e.status());
    assert_eq!(
        busy,
        Some(CmdStatus::ResourceBusy),
        "the SQ still completes into it"
    );
    assert_eq!(
        host.allocated(),
        with_cq,
        "the ring the device may still write stays reserved"
    );
    let query = nic.query_cq(cqn).unwrap();
    assert_eq!(query.log_size, 6, "and the CQ itself still exists");
    nic.destroy_send_queue(sq).unwrap();
    assert_eq!(host.allocated(), with_cq - 4096, "the SQ's ring came back");
}
