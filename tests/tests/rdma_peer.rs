//! `fldemu rc-bw` between two processes, here two threads: each has its own card whose uplink
//! is a UDP link on the loopback interface (one Ethernet frame per datagram, as two processes
//! or QEMU's `-netdev dgram` use it), one QP through the verbs API, and the control connection
//! on TCP. The peers resolve each other by ARP over the link, and every run's data is checked
//! (WRITE and SEND by the CRC the server reports, READ in the client's buffer).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use fld_device::wire::Faults;
use fld_host::verbs::Context;
use fld_qemu::rdma_peer::{Peer, PeerConfig, PeerMode};
use fld_qemu::testbed::card_on_link;
use fld_qemu::testbed::rdma::BwOp;

fn end(link: &str, ip: [u8; 4]) -> (Context, Box<dyn std::any::Any>) {
    let ip = IpAddr::V4(Ipv4Addr::from(ip));
    let (dev, keep) = card_on_link(link, ip, Faults::default(), None).unwrap();
    let mut ctx = Context::open(dev).unwrap();
    ctx.add_ip(ip).unwrap();
    (ctx, keep)
}

fn config(port: u16, mode: PeerMode) -> PeerConfig {
    PeerConfig {
        port,
        buf: 1 << 16,
        path_mtu: 3,
        mode,
        timeout: Duration::from_secs(30),
        ..Default::default()
    }
}

/// Each end's QP takes the local ACK timeout its own end asked for (`rc-bw --qp-timeout`).
#[test]
fn two_cards_on_a_udp_link_move_checked_writes_reads_and_sends() {
    const TCP: u16 = 18617;
    let server = std::thread::spawn(move || {
        let (ctx, _keep) = end("udp:47311:127.0.0.1:47312", [10, 31, 0, 1]);
        let served = PeerConfig {
            ack_timeout: 18,
            ..config(TCP, PeerMode::Rc)
        };
        let mut peer = Peer::connect(ctx, None, &served).unwrap();
        let attr = peer.qp_attr().unwrap();
        peer.serve().unwrap();
        attr.timeout
    });
    let (ctx, _keep) = end("udp:47312:127.0.0.1:47311", [10, 31, 0, 2]);
    let client = PeerConfig {
        ack_timeout: 21,
        ..config(TCP, PeerMode::Rc)
    };
    let mut peer = Peer::connect(ctx, Some("127.0.0.1"), &client).unwrap();
    assert_eq!(peer.qp_attr().unwrap().timeout, 21);
    for op in [BwOp::Write, BwOp::Read, BwOp::Send] {
        for (size, count) in [(1usize, 300u64), (1000, 300), (20_000, 40)] {
            let r = peer.bandwidth(op, size, count).unwrap();
            assert_eq!((r.messages, r.bytes), (count, count * size as u64));
        }
    }
    peer.quit().unwrap();
    assert_eq!(server.join().unwrap(), 18);
}

/// uRDMA's unload path between the two ends (`--unload`): every WRITE that fits a staging slot
/// (up to 248 bytes) is unloaded — a WRITE WITH IMMEDIATE into the server's staging ring, taken
/// by its CPU — and arrives CRC-exact; a 1000-byte WRITE stays offloaded. 600 WRITEs a run
/// wrap the 256-slot ring twice, so the client waits for the server's credits.
#[test]
fn unloaded_writes_arrive_intact_through_the_staging_ring() {
    const TCP: u16 = 18618;
    let server = std::thread::spawn(move || {
        let (ctx, _keep) = end("udp:47313:127.0.0.1:47314", [10, 32, 0, 1]);
        let mut peer = Peer::connect(ctx, None, &config(TCP, PeerMode::Unload)).unwrap();
        peer.serve().unwrap();
        peer.unloaded()
    });
    let (ctx, _keep) = end("udp:47314:127.0.0.1:47313", [10, 32, 0, 2]);
    let mut peer = Peer::connect(ctx, Some("127.0.0.1"), &config(TCP, PeerMode::Unload)).unwrap();
    let mut expected = 0;
    for (size, unloaded) in [(1usize, true), (64, true), (248, true), (1000, false)] {
        let before = peer.unloaded();
        let r = peer.bandwidth(BwOp::Write, size, 600).unwrap();
        assert_eq!(r.bytes, 600 * size as u64);
        let n = peer.unloaded() - before;
        assert_eq!(n, if unloaded { 600 } else { 0 }, "{size} B");
        expected += n;
    }
    peer.quit().unwrap();
    assert_eq!(server.join().unwrap(), expected);
}
