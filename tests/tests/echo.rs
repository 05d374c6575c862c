//! The DPDK-like API end to end: a generator on vPort 0 and an echo application on vPort 1,
//! every returned byte checked, for every frame size from 60 to 9000 bytes.

use fld_host::apps::{EchoConfig, Sizes};
use fld_host::{FlowAction, FlowAttr, FlowItem, RxMode};
use fld_qemu::testbed::InProcessPair;

fn sweep(mode: RxMode) {
    let mut pair = InProcessPair::new(mode, 9000).unwrap();
    let cfg = EchoConfig {
        packets: 9000 - 60 + 1,
        sizes: Sizes::Sweep { min: 60, max: 9000 },
        window: 64,
        ..Default::default()
    };
    let rep = pair.run_echo(&cfg);
    assert_eq!(rep.packets_received, cfg.packets);
    assert_eq!(rep.mismatches, 0);
    assert_eq!(rep.checksum_flags_bad, 0);
    let total: u64 = (60..=9000u64).sum();
    assert_eq!(rep.bytes_verified, total);
    let s = pair.client.stats().unwrap();
    assert_eq!(
        (s.opackets, s.ipackets, s.imissed, s.ierrors, s.oerrors),
        (cfg.packets, cfg.packets, 0, 0, 0)
    );
}

#[test]
fn every_size_echoes_byte_exact_through_striding_queues() {
    sweep(RxMode::Striding {
        log_stride_size: 8,
        log_strides: 6,
    });
}

#[test]
fn every_size_echoes_byte_exact_through_regular_queues() {
    sweep(RxMode::Regular);
}

#[test]
fn long_run_wraps_every_ring_many_times() {
    let mut pair = InProcessPair::new(
        RxMode::Striding {
            log_stride_size: 8,
            log_strides: 6,
        },
        1514,
    )
    .unwrap();
    let cfg = EchoConfig {
        packets: 50_000,
        sizes: Sizes::Cycle(vec![60, 64, 128, 700, 1514]),
        ..Default::default()
    };
    let rep = pair.run_echo(&cfg);
    assert_eq!((rep.packets_received, rep.mismatches), (50_000, 0));
    // The buffer pools got every buffer back (none leaked or double-freed).
    let pool = pair.client.pool().unwrap();
    let st = pool.stats();
    assert_eq!(
        st.available as usize + pair.client.mbufs_held(),
        st.size as usize,
        "client pool balance"
    );
    assert!(
        pair.client.mbufs_held() <= 64,
        "only refill caches and the last burst are held"
    );
}

#[test]
fn rte_flow_rules_mark_and_count_on_the_echo_port() {
    let mut pair = InProcessPair::new(RxMode::Regular, 1514).unwrap();
    let h = pair
        .server
        .flow_create(
            FlowAttr {
                group: 0,
                priority: 1,
                transfer: false,
            },
            &[
                FlowItem::Ipv4 {
                    src: Some([10, 0, 0, 1].into()),
                    dst: None,
                    proto: None,
                },
                FlowItem::Udp {
                    src_port: None,
                    dst_port: Some(7),
                },
            ],
            &[
                FlowAction::Mark(0xabc),
                FlowAction::Count,
                FlowAction::Queue(0),
            ],
        )
        .unwrap();
    let cfg = EchoConfig {
        packets: 1000,
        sizes: Sizes::Fixed(128),
        ..Default::default()
    };
    let rep = pair.run_echo(&cfg);
    assert_eq!(rep.mismatches, 0);
    assert_eq!(pair.server.flow_query(h).unwrap(), (1000, 128_000));
    // A rule sending the echo port's traffic to a queue that does not exist is refused.
    assert!(pair
        .server
        .flow_create(FlowAttr::default(), &[], &[FlowAction::Queue(9)])
        .is_err());
    // Dropping everything at higher priority stops the echo; counters say where it went.
    pair.server
        .flow_create(
            FlowAttr {
                group: 0,
                priority: 0,
                transfer: false,
            },
            &[],
            &[FlowAction::Drop],
        )
        .unwrap();
    let rep = pair.run_echo(&EchoConfig { packets: 10, ..cfg });
    assert_eq!(rep.packets_received, 0);
    assert_eq!(pair.server.stats().unwrap().rx_steering_drops, 10);
}

/// The card's engine on a thread of its own (`fldemu bench --threads 2`): the applications meet
/// it only through rings and doorbells, every byte still comes back, and once the thread stops
/// the applications step the card again.
#[test]
fn the_engine_on_its_own_thread_echoes_every_byte_on_both_paths() {
    let cfg = EchoConfig {
        packets: 3000,
        sizes: Sizes::Sweep { min: 60, max: 1514 },
        window: 64,
        ..Default::default()
    };
    let check = |rep: &fld_host::apps::EchoReport, what: &str| {
        assert_eq!(
            (rep.packets_received, rep.mismatches, rep.checksum_flags_bad),
            (cfg.packets, 0, 0),
            "{what}"
        );
    };
    let mut pair = InProcessPair::new(RxMode::Regular, 1514).unwrap();
    {
        let _engine = pair.host.spawn_engine_thread().unwrap();
        check(&pair.run_echo(&cfg), "CPU echo, engine thread");
    }
    check(
        &pair.run_echo(&cfg),
        "CPU echo, stepped by the applications again",
    );

    let mut flde = fld_qemu::testbed::FldEchoSetup::new(1514).unwrap();
    let cfg = EchoConfig {
        window: 8,
        ..cfg.clone()
    };
    let engine = flde.host.spawn_engine_thread().unwrap();
    let mac = flde.flde.mac();
    // Nothing steps the card from this thread: the engine thread alone moves every packet.
    let rep = fld_host::apps::run_echo(&mut flde.client, mac, &cfg, || 0);
    drop(engine);
    check(&rep, "FLD-E echo, engine thread");
}

/// Every NIC crossing of the two echo benchmarks (`fldemu bench`, `cargo xtask profile`) is
/// steered by the eSwitch's direct route: the frames between the generator and the echo (or
/// FLD) meet only the default forwarding and a catch-all. The table walks, which the direct
/// route stands for and falls back to, are taken by none of them.
#[test]
fn the_echo_benchmarks_take_the_direct_route_at_every_crossing() {
    let cfg = EchoConfig {
        packets: 3000,
        sizes: Sizes::Fixed(64),
        ..Default::default()
    };
    let mut pair = InProcessPair::new(RxMode::Regular, 1514).unwrap();
    let rep = pair.run_echo(&cfg);
    assert_eq!((rep.packets_received, rep.mismatches), (cfg.packets, 0));
    let nic = &pair.card.nic;
    assert_eq!(nic.stats().loopback_frames, 2 * cfg.packets);
    assert_eq!(nic.direct_routed_frames(), 2 * cfg.packets, "CPU echo");

    let mut flde = fld_qemu::testbed::FldEchoSetup::new(1514).unwrap();
    let rep = flde.run_echo(&cfg);
    assert_eq!((rep.packets_received, rep.mismatches), (cfg.packets, 0));
    let nic = &flde.card.nic;
    assert_eq!(nic.stats().loopback_frames, 2 * cfg.packets);
    assert_eq!(nic.direct_routed_frames(), 2 * cfg.packets, "FLD-E echo");
}

/// FLD and the NIC are two chips, each running at its own pace: the NIC may place many bursts
/// into FLD's receive side before FLD's next step (here FLD steps once for every 16 of the
/// generator's bursts, the NIC at every one). The generator's safe window then has to bound
/// what FLD's Rx CQ holds as well as its buffer: a CQE per frame and a filler per WQE. Within
/// it no frame meets a full CQ or a missing WQE (the NIC's out-of-buffer drop), and every
/// echo comes back byte-exact.
#[test]
fn the_flde_safe_window_holds_while_the_nic_runs_ahead_of_fld() {
    let mut flde = fld_qemu::testbed::FldEchoSetup::new(64).unwrap();
    flde.host.step_by_runner();
    let cfg = EchoConfig {
        packets: 3000,
        sizes: Sizes::Fixed(64),
        window: fld_host::apps::fld_safe_window(&flde.flde, 64),
        ..Default::default()
    };
    let (card, mac) = (flde.card.clone(), flde.flde.mac());
    let mut calls = 0u64;
    let rep = fld_host::apps::run_echo(&mut flde.client, mac, &cfg, || {
        calls += 1;
        let fld = if calls.is_multiple_of(16) {
            card.fld.poll()
        } else {
            0
        };
        card.nic.poll() + fld
    });
    assert_eq!((rep.packets_received, rep.mismatches), (cfg.packets, 0));
    let nic = flde.flde.nic();
    let v = nic.query_vport(nic.vport()).unwrap();
    assert_eq!(
        (v.rx_packets.get(), v.rx_out_of_buffer.get()),
        (cfg.packets, 0),
        "FLD's vPort"
    );
}
