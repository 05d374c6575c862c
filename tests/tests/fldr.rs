//! FLD-R end to end on two machines in one process (paper §5.3, §6, §7): the FLD-R control plane
//! is an RDMA server whose clients each get a queue pair bound to an FLD queue; the accelerator
//! sends and receives on those queue pairs through FLD while the NIC's transport segments,
//! acknowledges and retransmits.

use std::time::{Duration, Instant};

use fld_host::cryptodev::{run_ops, sample_ops, OpStatus, SoftZuc, ZucRdma};
use fld_host::fldr::{ClientConfig, FldrClient, FldrEvent};
use fld_qemu::testbed::fldr::{two_machines, ServiceAccel};

/// Messages of `len` bytes with a pattern that names the client, the message and the byte.
fn message(client: u8, n: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(n * 7) as u8 ^ client)
        .collect()
}

/// Sends `count` messages per client, keeping `window` outstanding each, until every echo came
/// back; checks each byte for byte.
fn echo_rounds(clients: &mut [(u8, FldrClient)], len: usize, count: u32, window: usize) {
    let mut sent = vec![0u32; clients.len()];
    let mut back = vec![0u32; clients.len()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while back.iter().any(|&b| b < count) {
        assert!(
            Instant::now() < deadline,
            "echoes missing: {back:?} of {count}"
        );
        for (i, (id, c)) in clients.iter_mut().enumerate() {
            while sent[i] < count && (sent[i] - back[i]) < window as u32 {
                let m = message(*id, sent[i], len);
                if !c.send(&m, Some(sent[i])).unwrap() {
                    break;
                }
                sent[i] += 1;
            }
            let want = back[i];
            if let Some(ok) = c
                .recv(|got, imm| {
                    assert_eq!(imm, Some(want), "client {id}: echoes in order");
                    got == &message(*id, want, len)[..]
                })
                .unwrap()
            {
                assert!(
                    ok,
                    "client {id} message {want} of {len} bytes came back changed"
                );
                back[i] += 1;
            }
        }
    }
}

/// Two clients on one machine send 10 KiB messages (ten packets each at the 1 KiB path MTU) at
/// the same time, so their packets interleave in FLD's shared multi-packet RQ; the echo
/// accelerator reassembles per queue pair and every message returns whole and in order. The
/// control plane saw both connections, each on its own FLD queue.
#[test]
fn two_clients_interleave_large_messages_through_the_shared_rq() {
    let (service, mut machine) = two_machines(ServiceAccel::Echo, 4).unwrap();
    let cfg = ClientConfig {
        depth: 16,
        ..Default::default()
    };
    let a = machine.connect(service.addr, cfg).unwrap();
    let b = machine.connect(service.addr, cfg).unwrap();
    assert_ne!(a.server_qpn, b.server_qpn);
    let mut clients = vec![(1u8, a), (2u8, b)];
    echo_rounds(&mut clients, 10 * 1024, 40, 8);
    echo_rounds(&mut clients, 1, 40, 8);
    drop(clients);
    let report = service.stop().unwrap();
    let connected: Vec<u16> = report
        .events
        .iter()
        .filter_map(|e| match e {
            FldrEvent::Connected { queue, .. } => Some(*queue),
            _ => None,
        })
        .collect();
    assert_eq!(connected, [0, 1], "one FLD queue per client");
    // 2 clients × (40 × 10 + 40 × 1) packets, each delivered to the accelerator on its own.
    assert_eq!(report.fld_rx_packets, 2 * (40 * 10 + 40));
    assert_eq!(report.fld_tx_messages, 2 * 80);
    assert_eq!(report.fld_accelerator_drops, 0);
    let count = |name| {
        report
            .accelerator
            .iter()
            .find(|(n, _)| *n == name)
            .map(|c| c.1)
    };
    assert_eq!(count("messages"), Some(160));
    assert_eq!(count("aborted"), Some(0));
}

/// The disaggregated ZUC service (§7): the cryptodev client swaps software ZUC for the FLD-R
/// backend without changing its code, and every result matches software ZUC — EEA3 and EIA3,
/// bit lengths not multiples of 8, requests of one to sixteen packets (the largest FLD takes).
#[test]
fn zuc_over_fldr_matches_software_zuc() {
    let (service, mut machine) = two_machines(ServiceAccel::Zuc, 2).unwrap();
    let client = machine
        .connect(service.addr, ClientConfig::default())
        .unwrap();
    let mut dev = ZucRdma::new(client);
    for (bytes, n) in [
        (16usize, 60usize),
        (1000, 60),
        (4000, 30),
        (16 * 1024 - 64, 8),
    ] {
        let ops = sample_ops(n, bytes, true, bytes as u64);
        let soft = run_ops(&mut SoftZuc::default(), ops.clone(), 32);
        let hard = run_ops(&mut dev, ops, 32);
        assert_eq!(hard.len(), n, "{bytes} bytes: every operation completed");
        for (i, (s, h)) in soft.iter().zip(&hard).enumerate() {
            assert_eq!(h.status, OpStatus::Success, "{bytes} bytes, op {i}");
            assert_eq!((&s.data, s.mac), (&h.data, h.mac), "{bytes} bytes, op {i}");
        }
    }
    assert_eq!(dev.stray, 0);
    drop(dev);
    let report = service.stop().unwrap();
    let errors = report
        .accelerator
        .iter()
        .find(|c| c.0 == "errors")
        .map(|c| c.1);
    assert_eq!(errors, Some(0));
}

/// A service with two FLD-R queues serves two clients; a third is turned away (the server
/// closes its exchange unanswered) and the two keep working.
#[test]
fn a_client_beyond_the_queues_is_turned_away() {
    let (service, mut m1) = two_machines(ServiceAccel::Echo, 2).unwrap();
    let a = m1.connect(service.addr, ClientConfig::default()).unwrap();
    let b = m1.connect(service.addr, ClientConfig::default()).unwrap();
    // Every queue is in use now: a third client is turned away.
    let third = m1.connect(
        service.addr,
        ClientConfig {
            timeout: Duration::from_secs(3),
            ..Default::default()
        },
    );
    assert!(third.is_err(), "a third client got a queue");
    let mut clients = vec![(5u8, a), (6u8, b)];
    echo_rounds(&mut clients, 3000, 10, 4);
    drop(clients);
    service.stop().unwrap();
}

/// The paper's local set-up: the client is the same card's second NIC function, so its queue
/// pair and the FLD-R one meet in the NIC's eSwitch.
#[test]
fn a_client_on_the_same_card_reaches_fldr_through_the_eswitch() {
    let (service, mut machine) =
        fld_qemu::testbed::fldr::one_machine(ServiceAccel::Echo, 2).unwrap();
    let c = machine
        .connect(service.addr, ClientConfig::default())
        .unwrap();
    let mut clients = vec![(9u8, c)];
    echo_rounds(&mut clients, 64, 500, 32);
    echo_rounds(&mut clients, 5000, 20, 4);
    drop(clients);
    let report = service.stop().unwrap();
    assert_eq!(report.fld_tx_messages, 520);
}
