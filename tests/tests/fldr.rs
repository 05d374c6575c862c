//! FLD-R end to end on two machines in one process (paper §5.3, §6, §7): the FLD-R control plane
//! is an RDMA server whose clients each get a queue pair bound to an FLD queue; the accelerator
//! sends and receives on those queue pairs through FLD while the NIC's transport segments,
//! acknowledges and retransmits.

use std::time::{Duration, Instant};

use fld_host::cryptodev::{run_ops, sample_ops, CryptoDev, OpStatus, SoftZuc, ZucRdma};
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

/// A ZUC request message: the 64-byte header for `op` claiming `bits`, then `data`.
fn zuc_message(op: u8, id: u64, bits: u32, data: &[u8]) -> Vec<u8> {
    use fld_abi::wire::zuc::{ZucHeader, ZucRequest, HEADER_LEN};
    let mut m = vec![0u8; HEADER_LEN];
    ZucRequest {
        op,
        bearer: 3,
        direction: 0,
        count: 77,
        length_bits: bits,
        request_id: id,
        key: [9; 16],
    }
    .emit(&mut ZucHeader::new_unchecked(&mut m[..]));
    m.extend_from_slice(data);
    m
}

/// Waits for the next message on `c` and returns (request ID, status, length).
fn next_response(c: &mut FldrClient, within: Duration) -> Option<(u64, u8, usize)> {
    use fld_abi::wire::zuc::ZucHeader;
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let r = c
            .recv(|m, _| {
                let h = ZucHeader::new_checked(m).expect("a response header");
                (h.request_id(), h.status(), m.len())
            })
            .unwrap();
        if r.is_some() {
            return r;
        }
    }
    None
}

/// Bad requests from one tenant of the ZUC service get the documented answers — a malformed
/// header and a length that lies get error responses, a message shorter than a header and one
/// larger than the service takes are counted drops without an answer — while a second tenant's
/// operations, running at the same time on their own queue, all verify.
#[test]
fn bad_zuc_requests_get_their_answers_and_leave_other_tenants_alone() {
    use fld_abi::wire::zuc::{HEADER_LEN, OP_EEA3, STATUS_BAD_LENGTH, STATUS_BAD_OP, STATUS_OK};
    let (service, mut machine) = two_machines(ServiceAccel::Zuc, 2).unwrap();
    let mut bad = machine
        .connect(
            service.addr,
            ClientConfig {
                max_message: 20_000,
                depth: 8,
                ..Default::default()
            },
        )
        .unwrap();
    let good = machine
        .connect(service.addr, ClientConfig::default())
        .unwrap();
    let mut good = ZucRdma::new(good);
    let ops = sample_ops(200, 700, true, 42);
    let soft = run_ops(&mut SoftZuc::default(), ops.clone(), 32);
    let mut pending = ops;
    let mut done = Vec::new();
    let send_bad = |k: u32, c: &mut FldrClient| match k {
        0 => assert!(c.send(&zuc_message(0x7f, 1, 80, &[0; 10]), None).unwrap()),
        1 => assert!(c
            .send(&zuc_message(OP_EEA3, 2, 8 * 5000, &[0; 100]), None)
            .unwrap()),
        2 => assert!(c.send(&[1, 2, 3], None).unwrap()),
        3 => assert!(c
            .send(&zuc_message(OP_EEA3, 4, 8 * 17_000, &[5; 17_000]), None)
            .unwrap()),
        _ => assert!(c
            .send(&zuc_message(OP_EEA3, 5, 80, &[1; 10]), None)
            .unwrap()),
    };
    // The bad tenant's requests go out between the good tenant's bursts.
    for k in 0..5 {
        send_bad(k, &mut bad);
        let n = pending.len().min(40);
        let mut burst: Vec<_> = pending.drain(..n).collect();
        while !burst.is_empty() {
            good.enqueue_burst(&mut burst);
            good.dequeue_burst(&mut done, 64);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.len() < soft.len() && Instant::now() < deadline {
        good.dequeue_burst(&mut done, 64);
    }
    assert_eq!(done.len(), soft.len(), "every good operation completed");
    for (s, h) in soft.iter().zip(&done) {
        assert_eq!(h.status, OpStatus::Success);
        assert_eq!((&s.data, s.mac), (&h.data, h.mac));
    }
    // The bad tenant's answers, in order: bad operation, bad length, then (the short and the
    // oversize message dropped) the valid request that followed them.
    let got: Vec<_> = (0..3)
        .map(|_| next_response(&mut bad, Duration::from_secs(10)).expect("a response"))
        .collect();
    assert_eq!(
        got,
        [
            (1, STATUS_BAD_OP, HEADER_LEN),
            (2, STATUS_BAD_LENGTH, HEADER_LEN),
            (5, STATUS_OK, HEADER_LEN + 10)
        ]
    );
    assert_eq!(next_response(&mut bad, Duration::from_millis(200)), None);
    drop((bad, good));
    let report = service.stop().unwrap();
    let count = |name| report.accelerator.iter().find(|c| c.0 == name).map(|c| c.1);
    assert_eq!(count("not_requests"), Some(1), "the 3-byte message");
    assert_eq!(count("bad_messages"), Some(1), "the 17,064-byte message");
    assert_eq!(count("errors"), Some(2));
    // The service took the oversize message's first 16 packets (16 KiB) and refused the 17th,
    // which made it too long: one drop for FLD to count.
    assert_eq!(report.fld_accelerator_drops, 1);
}

/// A client that ends its connection (its TCP session closes with it, as when its process
/// exits) frees its queue at once: the server tears the queue pair down and the next client
/// gets the queue and is served.
#[test]
fn a_closed_client_frees_its_queue_for_the_next() {
    let (service, mut machine) = two_machines(ServiceAccel::Echo, 1).unwrap();
    let c = machine
        .connect(service.addr, ClientConfig::default())
        .unwrap();
    let mut clients = vec![(2u8, c)];
    echo_rounds(&mut clients, 3000, 5, 2);
    let (_, c) = clients.pop().unwrap();
    c.close(&mut machine.ctx).unwrap();
    let t = Instant::now();
    let c2 = loop {
        match machine.connect(service.addr, ClientConfig::default()) {
            Ok(c) => break c,
            Err(_) if t.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("no queue came free: {e}"),
        }
    };
    let mut clients = vec![(3u8, c2)];
    echo_rounds(&mut clients, 2000, 10, 4);
    drop(clients);
    let report = service.stop().unwrap();
    let kinds: Vec<_> = report
        .events
        .iter()
        .filter(|e| !matches!(e, FldrEvent::Established { .. }))
        .collect();
    assert!(
        matches!(
            kinds[..],
            [
                FldrEvent::Connected { queue: 0, .. },
                FldrEvent::Disconnected { queue: 0 },
                FldrEvent::Connected { queue: 0, .. },
                ..
            ]
        ),
        "{kinds:?}"
    );
}

/// The NIC's failure of an FLD-R queue pair reaches the control plane as an event: the client's
/// QP enters the error state while the accelerator's answer is on its way, so the answer is
/// never acknowledged; on the service card's clock the retries run out, FLD sees the error
/// completion (its credits come back, it refuses further sends on the queue) and the control
/// plane's event queue reports the failure. Both cards are stepped here, by hand.
#[test]
fn a_queue_pair_the_nic_fails_is_reported_to_the_control_plane() {
    use fld_abi::fld::{Stat, TXQ_ERROR};
    use fld_abi::nic::{qp_attr, QpAttr, QpState};
    use fld_device::card::{Card, CardConfig};
    use fld_driver::inprocess::InProcessHost;
    use fld_host::fldr::FldR;
    use fld_host::verbs::*;
    let server = Card::new(CardConfig::default());
    let client_card = Card::new(CardConfig {
        nic: fld_device::nic::NicConfig {
            card_id: 2,
            ..Default::default()
        },
        ..Default::default()
    });
    let (a, b) = fld_device::wire::link(1024);
    server.nic.set_uplink(Box::new(a));
    client_card.nic.set_uplink(Box::new(b));
    server.nic.set_clock(Some(0));
    server
        .fld
        .set_accelerator(Box::new(fld_device::accel::rdma::RdmaEcho::new(16384, 16)));
    let sh = InProcessHost::new(server.clone(), 64 << 20).unwrap();
    let ch = InProcessHost::new(client_card.clone(), 64 << 20).unwrap();
    let (sip, cip) = ([10, 1, 0, 1], [10, 1, 0, 2]);
    let mut cp = FldR::open(
        sh.device(server.nic.function_id(0).unwrap()),
        sh.device(server.fld.id()),
        sip.into(),
        0,
        1,
    )
    .unwrap();
    let mut ctx = Context::open(ch.device(client_card.nic.function_id(0).unwrap())).unwrap();
    ctx.add_ip(std::net::Ipv4Addr::from(cip).into()).unwrap();
    ctx.add_neighbor(sip, cp.context().mac());
    cp.context().add_neighbor(cip, ctx.mac());
    let pd = ctx.alloc_pd().unwrap();
    let mr = ctx.reg_mr(&pd, 8192, access::LOCAL_WRITE).unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let mut qp = ctx
        .create_qp(
            &pd,
            &QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: true,
                out_of_order: false,
            },
        )
        .unwrap();
    ctx.init_rc(&qp, 0).unwrap();
    let qpn = cp
        .connect_queue(0, &RcConnection::new(qp.qp_num(), ipv4_gid_of(cip)))
        .unwrap();
    ctx.connect_rc(&qp, &RcConnection::new(qpn, ipv4_gid_of(sip)))
        .unwrap();
    qp.post_recv(&[(1, &[mr.sge(4096, 4096)])]).unwrap();
    let sge = [mr.sge(0, 1000)];
    qp.post_send(&[SendWr::new(2, WrOpcode::Send, &sge)])
        .unwrap();
    // The request crosses; the service echoes it at once.
    client_card.poll();
    server.run_until_idle();
    // Before the client's card sees the answer, its QP fails.
    let err = QpAttr {
        qp_state: QpState::Err as u8,
        ..Default::default()
    };
    ctx.driver()
        .modify_qp(qp.qp_num(), qp_attr::STATE, &err)
        .unwrap();
    let mut events = Vec::new();
    for step in 1..=40u64 {
        server.nic.set_clock(Some(step * 100_000_000));
        client_card.run_until_idle();
        server.run_until_idle();
        cp.poll_events(&mut events);
    }
    assert_eq!(events, [FldrEvent::Failed { queue: 0, qpn }]);
    assert!(cp.failed(0));
    assert_eq!(server.fld.stat(Stat::TxErrorCompletions), 1);
    assert_ne!(cp.fld().queue_word(0) & TXQ_ERROR, 0, "FLD refuses sends");
    assert_eq!(cp.fld().credits(0).2, 0, "nothing held in FLD");
    // Recovery is the control plane's: released, the queue is free again.
    cp.release_queue(0).unwrap();
    assert_eq!(cp.free_queue(), Some(0));
}

fn ipv4_gid_of(ip: [u8; 4]) -> [u8; 16] {
    fld_abi::wire::roce::ipv4_gid(ip)
}
