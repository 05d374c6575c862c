//! The card's engines allocate nothing per packet: after a warm-up, thousands of packets through
//! the NIC's Ethernet path (CPU echo), FLD-E's echo and the RoCE transport cost no heap
//! allocation inside `Card::poll`. Allocations are counted only while the card runs (the
//! generator and the driver around it are not the device), in the counting-allocator style of
//! the device's cuckoo-table test.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::rdma::*;
use fld_abi::nic::*;
use fld_device::wire::Faults;
use fld_host::apps::{echo_step, run_echo, EchoConfig, Sizes};
use fld_host::{EthDev, RxMode};
use fld_qemu::testbed::{FldEchoSetup, InProcessPair};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` with this thread's allocations counted.
fn device<R>(f: impl FnOnce() -> R) -> R {
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    r
}

/// Allocations counted so far on this thread, and resets the count.
fn take_allocs() -> u64 {
    ALLOCS.with(|c| c.replace(0))
}

/// Echo rounds of 5,000 frames of 64, 1500, 64, 1500 and 200 bytes from `client` to `mac`,
/// `window` in flight, `serve` stepping the far end and the card (the card's steps counted):
/// every frame comes back verified, and after the first two rounds — which size the buffers
/// for small and then large frames — the card allocates nothing.
fn echo_rounds(
    what: &str,
    client: &mut EthDev,
    mac: [u8; 6],
    window: usize,
    mut serve: impl FnMut() -> usize,
) {
    for (round, len) in [64, 1500, 64, 1500, 200].into_iter().enumerate() {
        let cfg = EchoConfig {
            packets: 5000,
            sizes: Sizes::Fixed(len),
            window,
            ..Default::default()
        };
        let rep = run_echo(client, mac, &cfg, &mut serve);
        assert_eq!((rep.packets_received, rep.mismatches), (5000, 0));
        let n = take_allocs();
        if round > 1 {
            assert_eq!(n, 0, "{what}, {len} B: allocations in the card");
        }
    }
}

#[test]
fn the_ethernet_path_allocates_nothing_per_packet() {
    for rx_mode in [
        RxMode::Regular,
        RxMode::Striding {
            log_stride_size: 8,
            log_strides: 6,
        },
    ] {
        let mut pair = InProcessPair::new(rx_mode, 1514).unwrap();
        // Only the test runs the card, so every engine step is counted.
        pair.host.step_by_runner();
        let card = pair.card.clone();
        let server_mac = pair.server.mac();
        let mut scratch = Vec::with_capacity(32);
        let server = &mut pair.server;
        echo_rounds(
            &format!("CPU echo, {rx_mode:?}"),
            &mut pair.client,
            server_mac,
            256,
            || echo_step(server, &mut scratch, 32) + device(|| card.poll()),
        );
    }
}

#[test]
fn the_flde_echo_allocates_nothing_per_packet() {
    let mut setup = FldEchoSetup::new(1514).unwrap();
    setup.host.step_by_runner();
    let card = setup.card.clone();
    let mac = setup.flde.mac();
    let window = setup.safe_window(1500);
    echo_rounds("FLD-E echo", &mut setup.client, mac, window, || {
        device(|| card.poll())
    });
}

#[test]
fn the_roce_transport_allocates_nothing_per_packet() {
    let mut p = two_cards(Faults::default(), Transport::default());
    let (remote, rkey) = (p.b.va(0), p.b.mr.key);
    let run = |p: &mut Pair, op: u8, len: usize, count: usize| {
        let sges = [p.a.sge(0, len)];
        let mut done = 0;
        let mut posted = 0;
        let mut steps = 0;
        while done < count {
            steps += 1;
            assert!(steps < 1_000_000, "stuck at {done} of {count}");
            while posted < count && posted - done < 64 {
                p.a.qp
                    .post_send(&wr(op, &sges, Some((remote, rkey)), 0))
                    .unwrap();
                posted += 1;
            }
            p.a.qp.ring_send_doorbell();
            device(|| p.step());
            while let Some(c) = p.a.cq.poll() {
                assert_eq!(c.syndrome, 0, "{c:?}");
                done += 1;
            }
            p.a.cq.update_ci();
        }
    };
    let traffic = |p: &mut Pair| {
        run(p, WQE_OP_RDMA_WRITE, 64, 10_000);
        run(p, WQE_OP_RDMA_WRITE, 8192, 1000);
        run(p, WQE_OP_RDMA_READ, 4096, 1000);
        run(p, WQE_OP_RDMA_WRITE, 64, 5000);
    };
    // The first pass brings queues, owed-response slots and the cable's frame buffers to their
    // high-water marks; the same traffic again must not allocate.
    traffic(&mut p);
    take_allocs();
    traffic(&mut p);
    assert_eq!(take_allocs(), 0, "allocations in the RoCE transport");
}
