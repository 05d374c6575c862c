//! The card behind `fldemu serve`'s vfio-user sockets, driven by the driver's vfio-user client
//! transport: the protocol QEMU speaks, without QEMU.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fld_abi::nic::*;
use fld_device::card::Card;
use fld_driver::vfio_user::VfioUserHost;
use fld_driver::PciDevice;
use fld_qemu::selftest::{self, test_frame, wait_until, RawPort};

/// Starts a server on a fresh socket directory; the server threads live until the test ends.
fn server() -> (PathBuf, Arc<Card>) {
    let dir = std::env::temp_dir().join(format!(
        "fldemu-vu-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let card = Card::new(Default::default());
    card.fld
        .set_accelerator(Box::new(fld_device::accel::Echo::new(0, 256)));
    let (c, d) = (card.clone(), dir.clone());
    std::thread::spawn(move || {
        fld_vfio_user_server::serve(c, &d, Arc::new(AtomicBool::new(false)))
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.join("fld.sock").exists() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    (dir, card)
}

/// Brings a raw port up on each function and checks that a frame of `len` bytes sent from the
/// first arrives byte-exact at the second.
fn assert_a_frame_crosses(d0: Arc<dyn PciDevice>, d1: Arc<dyn PciDevice>, len: usize) {
    let mut p0 = RawPort::open(d0).unwrap();
    let mut p1 = RawPort::open(d1).unwrap();
    let f = test_frame(p1.nic.mac(), p0.nic.mac(), len);
    p0.send(&f, false).unwrap();
    assert!(wait_until(|| p1.rq_cq.poll().is_some()));
    let mut got = vec![0u8; len];
    p1.buf.read(0, &mut got);
    assert_eq!(got, f);
}

/// Runs one check of the self-test (the suite `cargo xtask test-guest` runs inside a guest
/// over vfio-pci) against a fresh server, over the vfio-user client transport.
fn check(name: &str) {
    let (dir, _card) = server();
    let c = selftest::CHECKS
        .iter()
        .find(|c| c.name == name)
        .expect("a check of that name");
    if let Err(why) = (c.run)(&selftest::Transport::VfioUser(dir)) {
        panic!("{name}: {why}");
    }
}

#[test]
fn cpu_echo_is_byte_exact() {
    check("cpu_echo_byte_exact");
}

#[test]
fn flde_echo_is_byte_exact() {
    check("flde_echo_byte_exact");
}

#[test]
fn interrupts_arrive_as_eventfds_and_unmapped_dma_is_an_error_cqe() {
    check("msix_eventfd_and_dma_isolation");
}

#[test]
fn wqes_posted_through_the_mapped_doorbell_bar_are_not_fetched() {
    check("wqe_by_mmio_through_the_mapped_doorbell_bar");
}

#[test]
fn a_reset_in_the_middle_of_traffic_leaves_the_card_usable() {
    check("reset_mid_traffic_then_traffic");
}

#[test]
fn garbage_in_every_bar_leaves_the_card_usable() {
    check("garbage_in_every_bar_then_traffic");
}

#[test]
fn rdma_through_the_verbs_api_between_functions() {
    check("rdma_verbs_between_functions");
}

#[test]
fn every_check_has_a_test_here() {
    let names: Vec<&str> = selftest::CHECKS.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "cpu_echo_byte_exact",
            "flde_echo_byte_exact",
            "msix_eventfd_and_dma_isolation",
            "wqe_by_mmio_through_the_mapped_doorbell_bar",
            "reset_mid_traffic_then_traffic",
            "garbage_in_every_bar_then_traffic",
            "rdma_verbs_between_functions"
        ]
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
    assert_a_frame_crosses(d0, d1, 64);
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

#[test]
fn a_device_reset_keeps_the_bars_where_the_client_put_them() {
    use fld_abi::pci::{CMD_BUS_MASTER, CMD_MEMORY, OFF_COMMAND};
    let (dir, _card) = server();
    let host = VfioUserHost::connect(&dir, &["nic0.sock", "nic1.sock"], 16 << 20).unwrap();
    let (d0, d1) = (host.device(0).unwrap(), host.device(1).unwrap());
    let bars: Vec<u64> = [0, 2, 4].iter().map(|&b| d0.bar_bus_address(b)).collect();
    let p0 = RawPort::open(d0.clone()).unwrap();
    let command = d0.config_read16(OFF_COMMAND as u64);
    assert_eq!(
        command & (CMD_MEMORY | CMD_BUS_MASTER),
        CMD_MEMORY | CMD_BUS_MASTER
    );
    // VFIO_DEVICE_RESET, as QEMU sends it when the guest resets the function.
    d0.reset().unwrap();
    let after: Vec<u64> = [0, 2, 4].iter().map(|&b| d0.bar_bus_address(b)).collect();
    assert_eq!(after, bars, "BARs survive the reset");
    assert_eq!(d0.config_read16(OFF_COMMAND as u64), command);
    // The function's own state is gone: a new driver brings it up and traffic flows.
    drop(p0);
    assert_a_frame_crosses(d0, d1, 300);
}

#[test]
fn a_client_that_maps_nothing_gets_command_errors_and_the_next_client_works() {
    use fld_driver::vfio_user::DMA_IOVA;
    let (dir, _card) = server();
    {
        let host = VfioUserHost::connect(&dir, &["nic0.sock"], 4 << 20).unwrap();
        let d0 = host.device(0).unwrap();
        d0.dma_unmap(DMA_IOVA, 4 << 20).unwrap();
        // Registers still answer; every command's mailbox is unreachable memory.
        let r = RawPort::open(d0);
        assert!(
            matches!(
                r.as_ref().err(),
                Some(
                    fld_driver::DriverError::Delivery { .. }
                        | fld_driver::DriverError::Command { .. }
                )
            ),
            "bring-up without DMA memory fails with a command status, got {:?}",
            r.err()
        );
    }
    check("cpu_echo_byte_exact");
}

#[test]
fn memory_unmapped_under_a_receive_queue_drops_frames_and_the_next_client_works() {
    use fld_driver::vfio_user::DMA_IOVA;
    let (dir, _card) = server();
    {
        let host = VfioUserHost::connect(&dir, &["nic0.sock", "nic1.sock"], 8 << 20).unwrap();
        let (d0, d1) = (host.device(0).unwrap(), host.device(1).unwrap());
        let mut p0 = RawPort::open(d0).unwrap();
        let p1 = RawPort::open(d1.clone()).unwrap();
        let f = test_frame(p1.nic.mac(), p0.nic.mac(), 200);
        let before = p0.nic.query_vport(1).unwrap();
        // Function 1's memory (its rings and buffers) goes away while its queues are live.
        d1.dma_unmap(DMA_IOVA, 8 << 20).unwrap();
        for _ in 0..4 {
            p0.send(&f, true).unwrap();
            assert!(
                wait_until(|| p0.cq.poll().is_some()),
                "the sender completes"
            );
            p0.cq.update_ci();
        }
        let after = p0.nic.query_vport(1).unwrap();
        assert_eq!(
            after.rx_packets.get(),
            before.rx_packets.get(),
            "nothing delivered"
        );
        assert_eq!(
            after.rx_out_of_buffer.get() - before.rx_out_of_buffer.get(),
            4,
            "each frame is a counted drop"
        );
    }
    check("cpu_echo_byte_exact");
}

#[test]
fn malformed_protocol_messages_end_only_that_connection() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let (dir, _card) = server();
    let path = dir.join("nic0.sock");
    // vfio-user header: message id, command, message size, flags, error.
    let header = |cmd: u16, size: u32| {
        let mut h = Vec::new();
        h.extend_from_slice(&1u16.to_le_bytes());
        h.extend_from_slice(&cmd.to_le_bytes());
        h.extend_from_slice(&size.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h
    };
    let attempts: Vec<Vec<u8>> = vec![
        // Random bytes.
        (0..200u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
        // A version message whose size claims less than its header.
        header(1, 4),
        // A version message with a JSON body that is not the capabilities object.
        [
            header(1, 16 + 4 + 9),
            vec![0, 0, 0, 0],
            b"{\"x\":[1]}".to_vec(),
        ]
        .concat(),
        // An unknown command number with a huge claimed size, then the connection closes.
        header(0x7fff, u32::MAX),
        // A region write before any negotiation, truncated.
        [header(10, 64), vec![0xff; 8]].concat(),
    ];
    for bytes in attempts {
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    // The server still serves nic0: a proper client brings it up and moves traffic.
    let host = VfioUserHost::connect(&dir, &["nic0.sock", "nic1.sock"], 16 << 20).unwrap();
    assert_a_frame_crosses(host.device(0).unwrap(), host.device(1).unwrap(), 128);
}
