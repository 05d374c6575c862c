//! The card behind `fldemu serve`'s vfio-user sockets, driven by the driver's vfio-user client
//! transport: the protocol QEMU speaks, without QEMU.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fld_device::card::Card;
use fld_device::nic::abi::*;
use fld_driver::nic::{FlowRule, NicDriver, RqLayout, RuleFate, SendWqe, TableMiss};
use fld_driver::vfio_user::VfioUserHost;
use fld_driver::PciDevice;
use fld_host::apps::{echo_step, run_echo, EchoConfig, Sizes};
use fld_host::{EthDev, Mempool, PortConfig, RxMode};

/// Starts a server on a fresh socket directory; the server threads live until the test ends.
fn server() -> (PathBuf, Arc<Card>) {
    let dir = std::env::temp_dir().join(format!(
        "fldemu-vu-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let card = Card::new(Default::default());
    let (c, d) = (card.clone(), dir.clone());
    std::thread::spawn(move || fld_qemu::serve::serve(c, &d, Arc::new(AtomicBool::new(false))));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.join("fld.sock").exists() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    (dir, card)
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn echo_over_vfio_user_is_byte_exact() {
    let (dir, _card) = server();
    let host = VfioUserHost::connect(&dir, &["nic0.sock", "nic1.sock"], 64 << 20).unwrap();
    let (d0, d1) = (host.device(0).unwrap(), host.device(1).unwrap());
    let mut client = EthDev::open(d0.clone()).unwrap();
    let mut server = EthDev::open(d1.clone()).unwrap();
    let cfg = PortConfig {
        rx_mode: RxMode::Striding {
            log_stride_size: 8,
            log_strides: 6,
        },
        log_rx_desc: 8,
        log_tx_desc: 8,
        ..Default::default()
    };
    client
        .configure(cfg, Mempool::new(d0.as_ref(), 1024, 2048).unwrap())
        .unwrap();
    server
        .configure(cfg, Mempool::new(d1.as_ref(), 1024, 2048).unwrap())
        .unwrap();
    let echo = EchoConfig {
        packets: 3000,
        sizes: Sizes::Cycle(vec![60, 64, 500, 1514]),
        window: 64,
        ..Default::default()
    };
    let server_mac = server.mac();
    let mut scratch = Vec::new();
    let rep = run_echo(&mut client, server_mac, &echo, || {
        echo_step(&mut server, &mut scratch, 32)
    });
    assert_eq!(
        (rep.packets_received, rep.mismatches, rep.checksum_flags_bad),
        (3000, 0, 0)
    );
}

/// A NIC port bring-up with one raw queue set, over vfio-user.
struct RawPort {
    nic: NicDriver,
    eq: fld_driver::nic::EventQueue,
    cq: fld_driver::nic::CompletionQueue,
    sq: fld_driver::nic::SendQueue,
    rq_cq: fld_driver::nic::CompletionQueue,
    buf: fld_driver::DmaBuffer,
}

fn raw_port(dev: Arc<dyn PciDevice>) -> RawPort {
    let mut nic = NicDriver::probe(dev.clone()).unwrap();
    dev.enable_msix(2).unwrap();
    let eq = nic.create_eq(4, 0).unwrap();
    let cq = nic.create_cq(&eq, 4).unwrap();
    let sq = nic.create_sq(&cq, 4, false).unwrap();
    let rq_cq = nic.create_cq(&eq, 4).unwrap();
    let mut rq = nic.create_rq(&rq_cq, 3, RqLayout::Regular).unwrap();
    let buf = dev.dma_alloc(8 * 2048).unwrap();
    for i in 0..8 {
        rq.post(buf.iova() + i * 2048, 2048);
    }
    rq.ring_doorbell();
    let t = nic
        .create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)
        .unwrap();
    nic.create_flow_entry(t, &FlowRule::any(RuleFate::Rq(rq.rqn)))
        .unwrap();
    nic.set_root(TABLE_KIND_NIC_RX, Some(t)).unwrap();
    std::mem::forget(rq);
    RawPort {
        nic,
        eq,
        cq,
        sq,
        rq_cq,
        buf,
    }
}

fn frame(dst: [u8; 6], src: [u8; 6], len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    for (i, b) in f[14..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

#[test]
fn interrupts_arrive_as_eventfds_and_unmapped_dma_is_an_error_cqe() {
    let (dir, _card) = server();
    let host = VfioUserHost::connect(&dir, &["nic0.sock", "nic1.sock"], 32 << 20).unwrap();
    let (d0, d1) = (host.device(0).unwrap(), host.device(1).unwrap());
    let mut p0 = raw_port(d0.clone());
    let mut p1 = raw_port(d1.clone());
    let (m0, m1) = (p0.nic.mac(), p1.nic.mac());
    // MSI-X: arm the receive CQ of port 1, send a frame from port 0.
    p1.rq_cq.arm();
    let f = frame(m1, m0, 100);
    p0.buf.write(0, &f);
    let gather = [(p0.buf.iova() + 14, 86)];
    p0.sq
        .post(&SendWqe {
            inline_header: &f[..14],
            gather: &gather,
            cs_flags: 0,
            signal: true,
        })
        .unwrap();
    p0.sq.ring_doorbell();
    assert!(
        wait_until(|| d1.take_interrupts(0) == 1),
        "MSI-X vector 0 fired through its eventfd"
    );
    let c = p1.rq_cq.poll().expect("receive CQE");
    assert_eq!(c.byte_count.get(), 100);
    let mut got = vec![0u8; 100];
    p1.buf.read(0, &mut got);
    assert_eq!(got, f);
    assert_eq!(p1.eq.poll().unwrap().data.get(), p1.rq_cq.cqn);
    assert!(wait_until(|| p0.cq.poll().is_some()));
    // DMA isolation: a gather entry at an IOVA the client never mapped.
    let before = p1.nic.query_vport(1).unwrap().rx_packets.get();
    p0.sq
        .post(&SendWqe {
            inline_header: &f[..14],
            gather: &[(0x7000_0000, 86)],
            cs_flags: 0,
            signal: false,
        })
        .unwrap();
    p0.sq.ring_doorbell();
    let mut err = None;
    assert!(wait_until(|| {
        err = p0.cq.poll();
        err.is_some()
    }));
    let c = err.unwrap();
    assert_eq!(
        (c.op_own >> 4, c.syndrome),
        (CQE_REQ_ERR, syndrome::DMA_ERROR)
    );
    assert_eq!(
        p1.nic.query_vport(1).unwrap().rx_packets.get(),
        before,
        "nothing was delivered"
    );
}

#[test]
fn the_server_survives_garbage_and_serves_the_next_client() {
    let (dir, _card) = server();
    {
        let host = VfioUserHost::connect(&dir, &["nic0.sock", "fld.sock"], 8 << 20).unwrap();
        let d0 = host.device(0).unwrap();
        let fld = host.device(1).unwrap();
        // Every register of every BAR, and the configuration space, gets garbage.
        for dev in [&d0, &fld] {
            for bar in [0u8, 2, 4] {
                for off in (0..0x4000u64).step_by(4) {
                    dev.bar_write(bar, off, &0xdead_beefu32.to_le_bytes());
                }
            }
            for off in (0x40..0x100u64).step_by(4) {
                dev.config_write(off, &[0xff; 4]);
            }
        }
        // The client goes away without any cleanup.
    }
    // A new client brings the same functions up from scratch and moves traffic.
    let host = VfioUserHost::connect(&dir, &["nic0.sock", "nic1.sock"], 32 << 20).unwrap();
    let (d0, d1) = (host.device(0).unwrap(), host.device(1).unwrap());
    let mut p0 = raw_port(d0);
    let mut p1 = raw_port(d1);
    let f = frame(p1.nic.mac(), p0.nic.mac(), 64);
    p0.buf.write(0, &f);
    p0.sq
        .post(&SendWqe {
            inline_header: &f[..14],
            gather: &[(p0.buf.iova() + 14, 50)],
            cs_flags: 0,
            signal: false,
        })
        .unwrap();
    p0.sq.ring_doorbell();
    assert!(wait_until(|| p1.rq_cq.poll().is_some()));
}

#[test]
fn doorbell_pages_are_shared_memory_and_control_registers_stay_trapped() {
    let (dir, card) = server();
    let host =
        VfioUserHost::connect(&dir, &["nic0.sock", "nic1.sock", "fld.sock"], 8 << 20).unwrap();
    let (nic0, fld) = (host.device(0).unwrap(), host.device(2).unwrap());
    assert!(nic0.bar_is_mapped(BAR_DOORBELL));
    assert!(
        !nic0.bar_is_mapped(BAR_CONTROL),
        "command registers are trapped"
    );
    assert!(!nic0.bar_is_mapped(BAR_MSIX), "the MSI-X table is trapped");
    assert!(
        (0..6).all(|b| !fld.bar_is_mapped(b)),
        "FLD offers no mmap-able area"
    );
    // A store through the mapping is the word the engine polls, with no message in between,
    // and the device's own writes (a queue reset clears its doorbell) are what the host reads.
    let doorbells = card.nic.functions()[0].doorbells().clone();
    nic0.write32(BAR_DOORBELL, db::SQ_BASE + 4 * 3, 0x1234);
    assert_eq!(doorbells.load(db::SQ_BASE + 4 * 3), 0x1234);
    doorbells.store(db::SQ_BASE + 4 * 3, 0);
    assert_eq!(nic0.read32(BAR_DOORBELL, db::SQ_BASE + 4 * 3), 0);
    // Out of the area: the write goes to the server, which ignores it.
    nic0.write32(BAR_DOORBELL, BAR_DOORBELL_SIZE, 0xdead);
}
