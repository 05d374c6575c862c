//! The FLD module end to end: the NIC drives FLD's windows by peer-to-peer PCIe, the echo
//! accelerator returns every packet, and FLD's structures behave as the paper's §5.2 describes.

use std::sync::{Arc, Mutex};

use fld_abi::fld::{MemoryItem, Stat, FILL_PATTERN};
use fld_abi::nic::TABLE_KIND_FDB;
use fld_abi::nic::{Cqe, CE_ALWAYS, CE_MASK, CQE_REQ, CS_L3, CS_L4, RESERVED_LKEY, WQE_OP_SEND};
use fld_device::accel::{Accelerator, Echo, RxBurst, RxMeta, TxMeta, TxRefused, TxStream};
use fld_device::fld::memory_model::{fld_requirement, MemoryParams};
use fld_driver::nic::SendWqe;
use fld_driver::nic::{FlowRule, RuleFate, TableMiss};
use fld_driver::PciDevice;
use fld_host::apps::{EchoConfig, Sizes};
use fld_host::flde::TenantError;
use fld_host::FlowItem;
use fld_qemu::testbed::FldEchoSetup;
use zerocopy::little_endian::{U16, U32};
use zerocopy::IntoBytes;

fn stats(s: &FldEchoSetup) -> String {
    let f = &s.card.fld;
    format!(
        "rx {} tx {} accel drops {} bad window {} unknown CQEs {} no credit {} completions {}",
        f.stat(Stat::RxPackets),
        f.stat(Stat::TxPackets),
        f.stat(Stat::RxAcceleratorDrops),
        f.stat(Stat::BadWindowAccesses),
        f.stat(Stat::UnknownCqes),
        f.stat(Stat::TxNoCredit),
        f.stat(Stat::TxCompletions)
    )
}

#[test]
fn flde_echo_returns_every_size_byte_exact() {
    let mut s = FldEchoSetup::new(9000).unwrap();
    // FLD's Rx buffer is 2 x S_rxbdp = 8 WQEs of 16 KiB; a WQE stays open until the next packet
    // closes it, so at most 7 packets of more than 8 KiB fit in flight without a counted drop.
    let cfg = EchoConfig {
        packets: 9000 - 60 + 1,
        sizes: Sizes::Sweep { min: 60, max: 9000 },
        window: 4,
        ..Default::default()
    };
    let rep = s.run_echo(&cfg);
    let rqn = s.flde.binding().rq.rqn;
    let rq = s.flde.nic().query_rq(rqn).unwrap();
    assert_eq!(
        (rep.packets_received, rep.mismatches, rep.checksum_flags_bad),
        (cfg.packets, 0, 0),
        "{} rq out of buffer {}",
        stats(&s),
        rq.out_of_buffer.get()
    );
    assert_eq!(rep.bytes_verified, (60..=9000u64).sum::<u64>());
    let f = &s.card.fld;
    assert_eq!(f.stat(Stat::RxPackets), cfg.packets);
    assert_eq!(f.stat(Stat::TxPackets), cfg.packets);
    assert_eq!(f.stat(Stat::BadWindowAccesses), 0);
    assert_eq!(f.stat(Stat::UnknownCqes), 0);
    // Selective signalling: far fewer completions than packets.
    assert!(
        f.stat(Stat::TxCompletions) < cfg.packets / 2,
        "{}",
        stats(&s)
    );
}

#[test]
fn flde_echo_over_many_queues_conserves_credits() {
    let mut s = FldEchoSetup::with_queues(1514, 8).unwrap();
    s.card
        .fld
        .set_accelerator(Box::new(Echo::spread(0, 8, 256)));
    let before: Vec<_> = (0..8)
        .map(|q| s.card.fld.with_tx_stream(|t| t.credits(q)))
        .collect();
    assert!(before.iter().all(|c| c.packets > 0 && c.bytes > 0));
    let cfg = EchoConfig {
        packets: 20_000,
        sizes: Sizes::Cycle(vec![60, 128, 1514, 777]),
        window: 256,
        ..Default::default()
    };
    let rep = s.run_echo(&cfg);
    assert_eq!(
        (rep.packets_received, rep.mismatches),
        (cfg.packets, 0),
        "{}",
        stats(&s)
    );
    s.card.run_until_idle();
    let after: Vec<_> = (0..8)
        .map(|q| s.card.fld.with_tx_stream(|t| t.credits(q)))
        .collect();
    assert_eq!(before, after, "every descriptor and chunk came back");
    // Every queue carried traffic.
    let per_queue: Vec<u64> = s
        .flde
        .binding()
        .sqns
        .clone()
        .into_iter()
        .map(|sqn| s.flde.nic().query_sq(sqn).unwrap().packets.get())
        .collect();
    assert!(
        per_queue.iter().all(|&n| n >= cfg.packets / 8 - 1),
        "{per_queue:?}"
    );
    assert_eq!(per_queue.iter().sum::<u64>(), cfg.packets);
}

#[test]
fn generated_wqe_equals_the_cpu_drivers_wqe() {
    let s = FldEchoSetup::new(1514).unwrap();
    let fld = &s.card.fld;
    let sqn = s.flde.binding().sqns[0];
    let frame: Vec<u8> = (0..300u32).map(|i| (i * 13) as u8).collect();
    // Post directly on the tx stream (no NIC doorbell processing yet: the card is not polled).
    fld.with_tx_stream(|t| {
        t.send(
            &TxMeta {
                queue: 0,
                cs_flags: CS_L3 | CS_L4,
                resume_table: None,
                rdma: None,
            },
            &frame,
        )
    })
    .unwrap();
    let g = fld.geometry();
    let bar2 = s.host.device(fld.id()).bar_bus_address(2);
    // The NIC's view: read slot 0 of queue 0's Tx ring by DMA from NIC function 0.
    let nic_fid = s.card.nic.function_id(0).unwrap();
    let mut generated = [0u8; 64];
    s.card
        .fabric
        .dma(nic_fid)
        .read(bar2 + g.tx_ring_base(), &mut generated)
        .unwrap();
    // What a CPU driver writes for the same packet: no inline header, one gather entry at the
    // packet's address in the Tx-data window, completion requested (it is the last posted).
    let data_addr = bar2 + g.tx_data_base();
    let gather = [(data_addr, frame.len() as u32)];
    let wqe = SendWqe {
        inline_header: &[],
        gather: &gather,
        cs_flags: CS_L3 | CS_L4,
        signal: true,
        ..Default::default()
    };
    let mut cpu = [0u8; 1024];
    let n = wqe.encode(sqn, 0, &mut cpu).unwrap();
    assert_eq!(n, 48);
    assert_eq!(&generated[..], &cpu[..64]);
    // Field by field, at the byte offsets docs/nic-interface.md gives a send WQE: control
    // segment (opcode SEND, index 0, 3 segments, completion requested, the SQ), Ethernet segment
    // (both checksum requests, no inline header), one data segment (the reserved key, the
    // packet's length and address in the Tx-data window), then zeros.
    assert_eq!(generated[0], WQE_OP_SEND);
    assert_eq!(&generated[2..4], &[0, 0]);
    assert_eq!((generated[4], generated[5] & CE_MASK), (3, CE_ALWAYS));
    assert_eq!(&generated[8..12], &sqn.to_le_bytes());
    assert_eq!(generated[16], CS_L3 | CS_L4);
    assert_eq!(&generated[28..30], &[0, 0], "no inline header");
    assert_eq!(&generated[32..36], &(frame.len() as u32).to_le_bytes());
    assert_eq!(&generated[36..40], &RESERVED_LKEY.to_le_bytes());
    assert_eq!(&generated[40..48], &data_addr.to_le_bytes());
    assert!(generated[48..].iter().all(|&b| b == 0));
    // And the data pointer serves the packet through the translation table.
    let mut data = vec![0u8; frame.len()];
    s.card
        .fabric
        .dma(nic_fid)
        .read(data_addr, &mut data)
        .unwrap();
    assert_eq!(data, frame);
}

#[test]
fn striding_buffers_are_recycled_in_posting_order() {
    let mut s = FldEchoSetup::new(1514).unwrap();
    let wqes = s.flde.binding().rx_wqes as u64;
    // 60-byte frames take one 256-byte stride: 64 per 16 KiB WQE.
    let cfg = EchoConfig {
        packets: 64 * wqes * 3 + 10,
        sizes: Sizes::Fixed(60),
        window: 32,
        ..Default::default()
    };
    let rep = s.run_echo(&cfg);
    assert_eq!((rep.packets_received, rep.mismatches), (cfg.packets, 0));
    assert_eq!(s.card.fld.stat(Stat::RxRecycledWqes), cfg.packets / 64);
    // The RQ's WQEs were never rewritten: FLD only advanced the doorbell.
    let rqn = s.flde.binding().rq.rqn;
    let q = s.flde.nic().query_rq(rqn).unwrap();
    assert_eq!(q.hw_counter.get() as u64, cfg.packets / 64);
}

#[test]
fn memory_report_follows_table_3_for_table_2a() {
    let s = FldEchoSetup::new(1514).unwrap();
    let m = s.card.fld.memory_report();
    let model = fld_requirement(&MemoryParams::table_2a());
    assert_eq!(m[MemoryItem::TxDescriptorPool as usize], model.tx_desc_pool);
    assert_eq!(m[MemoryItem::TxRingTranslation as usize], model.s_xlt_tx);
    assert_eq!(
        m[MemoryItem::TxRingTranslation as usize],
        15_872,
        "15.5 KiB"
    );
    assert_eq!(m[MemoryItem::TxDataTranslation as usize], model.s_xlt_data);
    assert_eq!(m[MemoryItem::TxDataTranslation as usize], 33 * 1024);
    assert_eq!(
        m[MemoryItem::TxCompletions as usize] + m[MemoryItem::RxCompletions as usize],
        model.s_cq
    );
    assert_eq!(m[MemoryItem::ProducerIndices as usize], model.s_pitot);
    // Allocations round up to whole chunks (256 B) and whole striding WQEs (16 KiB).
    assert_eq!(
        m[MemoryItem::TxBuffer as usize],
        model.tx_buffer.div_ceil(256) * 256
    );
    assert_eq!(
        m[MemoryItem::RxBuffer as usize],
        model.s_rxdata.div_ceil(16384) * 16384
    );
    let total: u64 = m[..MemoryItem::Total as usize].iter().sum();
    assert_eq!(m[MemoryItem::Total as usize], total);
    // The driver reads the same report from BAR0.
    assert_eq!(s.flde.fld().memory_report(), m);
}

#[test]
fn bad_accelerator_packets_are_refused_and_counted() {
    let s = FldEchoSetup::new(1514).unwrap();
    let fld = &s.card.fld;
    let max = fld.geometry().max_packet as usize;
    let r = fld.with_tx_stream(|t| {
        (
            t.send(
                &TxMeta {
                    queue: 9,
                    cs_flags: 0,
                    resume_table: None,
                    rdma: None,
                },
                &[0; 64],
            ),
            t.send(
                &TxMeta {
                    queue: 0,
                    cs_flags: 0,
                    resume_table: None,
                    rdma: None,
                },
                &vec![0; max + 1],
            ),
            t.send(
                &TxMeta {
                    queue: 0,
                    cs_flags: 0,
                    resume_table: None,
                    rdma: None,
                },
                &[],
            ),
        )
    });
    assert_eq!(
        r,
        (
            Err(TxRefused::UnknownQueue),
            Err(TxRefused::BadLength),
            Err(TxRefused::BadLength)
        )
    );
    assert_eq!(
        (fld.stat(Stat::TxUnknownQueue), fld.stat(Stat::TxBadLength)),
        (1, 2)
    );
    // Credits run out rather than underflow: keep sending without letting the NIC complete.
    let mut sent = 0u32;
    let refused = loop {
        match fld.with_tx_stream(|t| {
            t.send(
                &TxMeta {
                    queue: 0,
                    cs_flags: 0,
                    resume_table: None,
                    rdma: None,
                },
                &[7u8; 1514],
            )
        }) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent <= 2048, "more packets accepted than the ring holds");
    };
    assert_eq!(refused, TxRefused::NoCredit);
    let c = fld.with_tx_stream(|t| t.credits(0));
    assert!(
        c.packets == 0 || c.bytes < 1514,
        "credits say no room: {c:?}"
    );
    assert!(
        sent > 300,
        "the shared buffer holds hundreds of full-size packets ({sent})"
    );
}

#[test]
fn nic_accesses_outside_fld_windows_get_the_fill_pattern_and_are_counted() {
    let s = FldEchoSetup::new(1514).unwrap();
    let fld = &s.card.fld;
    let g = fld.geometry();
    let bar2 = s.host.device(fld.id()).bar_bus_address(2);
    let nic_fid = s.card.nic.function_id(0).unwrap();
    let mut buf = [0u8; 64];
    // A Tx ring slot with no descriptor, a data window chunk nothing maps, the gap after the Rx
    // buffer, and a CQ window read.
    for addr in [
        g.tx_ring_base() + 5 * 64,
        g.tx_data_base() + 4096,
        g.rx_buffer_base() + 200_000,
        g.tx_cq_base(),
    ] {
        s.card
            .fabric
            .dma(nic_fid)
            .read(bar2 + addr, &mut buf)
            .unwrap();
        assert!(buf.iter().all(|&b| b == FILL_PATTERN), "{addr:#x}");
    }
    assert_eq!(fld.stat(Stat::BadWindowAccesses), 4);
    // A CQE for a send queue FLD does not know, and a torn CQE write.
    let bogus = Cqe {
        qn: U32::new(999),
        wqe_counter: U16::new(3),
        op_own: CQE_REQ << 4,
        ..Default::default()
    };
    s.card
        .fabric
        .dma(nic_fid)
        .write(bar2 + g.tx_cq_base(), bogus.as_bytes())
        .unwrap();
    s.card
        .fabric
        .dma(nic_fid)
        .write(bar2 + g.tx_cq_base() + 64, &[1, 2, 3])
        .unwrap();
    s.card.run_until_idle();
    assert_eq!(fld.stat(Stat::UnknownCqes), 1);
    assert_eq!(fld.stat(Stat::BadWindowAccesses), 5);
}

#[test]
fn an_error_completion_releases_the_queue_and_disables_it() {
    let s = FldEchoSetup::with_queues(1514, 2).unwrap();
    let fld = &s.card.fld;
    // Queue 1's credits show the shared pool and buffer.
    let shared_before = fld.with_tx_stream(|t| t.credits(1));
    for _ in 0..5 {
        fld.with_tx_stream(|t| {
            t.send(
                &TxMeta {
                    queue: 0,
                    cs_flags: 0,
                    resume_table: None,
                    rdma: None,
                },
                &[1u8; 700],
            )
        })
        .unwrap();
    }
    let shared_during = fld.with_tx_stream(|t| t.credits(1));
    assert_eq!(shared_during.packets, shared_before.packets - 5);
    assert_eq!(shared_during.bytes, shared_before.bytes - 5 * 768);
    // The NIC reports an error on the queue's SQ (as it would for a WQE it could not execute).
    let g = fld.geometry();
    let bar2 = s.host.device(fld.id()).bar_bus_address(2);
    let nic_fid = s.card.nic.function_id(0).unwrap();
    let sqn = s.flde.binding().sqns[0];
    let err = Cqe {
        qn: U32::new(sqn),
        wqe_counter: U16::new(0),
        syndrome: 1,
        op_own: fld_abi::nic::CQE_REQ_ERR << 4,
        ..Default::default()
    };
    s.card
        .fabric
        .dma(nic_fid)
        .write(bar2 + g.tx_cq_base(), err.as_bytes())
        .unwrap();
    fld.poll();
    assert_eq!(fld.stat(Stat::TxErrorCompletions), 1);
    // Every buffer came back; the queue takes nothing until it is bound again.
    let r = fld.with_tx_stream(|t| {
        (
            t.credits(0),
            t.send(
                &TxMeta {
                    queue: 0,
                    cs_flags: 0,
                    resume_table: None,
                    rdma: None,
                },
                &[1u8; 60],
            ),
        )
    });
    // Refused as a queue in error (the control plane's to recover), and counted.
    assert_eq!(r, (Default::default(), Err(TxRefused::QueueError)));
    assert_eq!(fld.stat(Stat::TxQueueInError), 1);
    assert_eq!(
        fld.with_tx_stream(|t| t.credits(1)),
        shared_before,
        "every descriptor and chunk came back"
    );
}

/// (context, resume table) of every packet the accelerator received.
type Seen = Arc<Mutex<Vec<(u16, Option<u8>)>>>;

/// Echoes like [`Echo`] and records the metadata each packet arrived with.
struct Recording {
    echo: Echo,
    seen: Seen,
}

impl Accelerator for Recording {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        self.seen
            .lock()
            .unwrap()
            .push((meta.context, meta.resume_table));
        self.echo.receive(meta, data, tx)
    }
    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        self.echo.poll(tx)
    }
    fn name(&self) -> &'static str {
        "recording echo"
    }
}

/// Echoes like [`Echo`], but refuses every third packet, and records the size of every rx
/// burst FLD hands it.
struct BurstRecording {
    echo: Echo,
    packets: u64,
    bursts: Arc<Mutex<Vec<usize>>>,
}

impl Accelerator for BurstRecording {
    fn receive(&mut self, _: &RxMeta, _: &[u8], _: &mut dyn TxStream) -> bool {
        unreachable!("FLD hands packets over in bursts")
    }
    fn receive_burst(&mut self, burst: RxBurst<'_>, tx: &mut dyn TxStream) -> usize {
        self.bursts.lock().unwrap().push(burst.len());
        let mut refused = 0;
        for (meta, data) in burst.iter() {
            self.packets += 1;
            if self.packets.is_multiple_of(3) || !self.echo.receive(meta, data, tx) {
                refused += 1;
            }
        }
        refused
    }
    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        self.echo.poll(tx)
    }
    fn name(&self) -> &'static str {
        "burst recording echo"
    }
}

#[test]
fn a_step_hands_the_accelerator_its_completions_as_one_burst_and_counts_what_it_refused() {
    let mut s = FldEchoSetup::new(1514).unwrap();
    let bursts = Arc::new(Mutex::new(Vec::new()));
    s.card.fld.set_accelerator(Box::new(BurstRecording {
        echo: Echo::new(0, 256),
        packets: 0,
        bursts: bursts.clone(),
    }));
    let cfg = EchoConfig {
        packets: 600,
        burst: 32,
        sizes: Sizes::Fixed(128),
        ..Default::default()
    };
    let rep = s.run_echo(&cfg);
    let bursts = bursts.lock().unwrap();
    let delivered: usize = bursts.iter().sum();
    assert_eq!(
        delivered as u64,
        s.card.fld.stat(Stat::RxPackets),
        "{}",
        stats(&s)
    );
    assert!(
        bursts.iter().any(|&n| n > 1),
        "the client's bursts reach the accelerator whole: {bursts:?}"
    );
    assert!(bursts.iter().all(|&n| n > 0), "no empty burst");
    // Every third packet refused, counted by FLD and never echoed.
    let refused = delivered as u64 / 3;
    assert_eq!(
        s.card.fld.stat(Stat::RxAcceleratorDrops),
        refused,
        "{}",
        stats(&s)
    );
    assert_eq!(rep.packets_received, delivered as u64 - refused);
    assert_eq!(rep.mismatches, 0);
}

/// A set-up whose accelerate rule is replaced: `install` gets the FLD-E control plane.
fn setup_with(install: impl FnOnce(&mut FldEchoSetup)) -> (FldEchoSetup, Seen) {
    let mut s = FldEchoSetup::new(1514).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    s.card.fld.set_accelerator(Box::new(Recording {
        echo: Echo::new(0, 256),
        seen: seen.clone(),
    }));
    install(&mut s);
    (s, seen)
}

#[test]
fn returned_packets_resume_at_the_table_the_accelerate_rule_named() {
    let mut resume_rule = 0;
    let (mut s, seen) = setup_with(|s| {
        let client_vport = s.client.vport();
        let nic = s.flde.nic();
        // An eSwitch table on the manager function, counting what it forwards to the client.
        let t = nic
            .create_flow_table(TABLE_KIND_FDB, 1, TableMiss::Drop)
            .unwrap();
        resume_rule = nic
            .create_flow_entry(
                t,
                &FlowRule {
                    count: true,
                    ..FlowRule::any(RuleFate::Vport(client_vport))
                },
            )
            .unwrap();
        // Higher priority than the set-up's catch-all rule.
        s.flde
            .accelerate(
                0,
                &[FlowItem::Udp {
                    src_port: None,
                    dst_port: Some(7),
                }],
                42,
                Some(t),
            )
            .unwrap();
    });
    let cfg = EchoConfig {
        packets: 500,
        sizes: Sizes::Fixed(200),
        ..Default::default()
    };
    let rep = s.run_echo(&cfg);
    assert_eq!((rep.packets_received, rep.mismatches), (500, 0));
    // Every packet went through the named table, not the eSwitch's default forwarding.
    assert_eq!(
        s.flde.nic().query_flow_entry(resume_rule).unwrap(),
        (500, 500 * 200)
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 500);
    assert!(seen
        .iter()
        .all(|&(ctx, resume)| ctx == 42 && resume.is_some()));
}

#[test]
fn a_resume_table_the_sender_does_not_own_is_a_send_error() {
    let (mut s, _) = setup_with(|s| {
        // Table 120 does not exist.
        s.flde.accelerate(0, &[], 5, Some(120)).unwrap();
    });
    let rep = s.run_echo(&EchoConfig {
        packets: 3,
        sizes: Sizes::Fixed(100),
        window: 1,
        ..Default::default()
    });
    assert_eq!(rep.packets_received, 0);
    let f = &s.card.fld;
    assert_eq!(
        f.stat(Stat::TxErrorCompletions),
        1,
        "the NIC refused the WQE (BAD_WQE) and FLD saw it"
    );
    assert!(
        s.flde.accelerate(0, &[], 5, Some(500)).is_err(),
        "resume tables are numbered below 127"
    );
}

#[test]
fn tenants_cannot_claim_each_others_context_or_unconfined_traffic() {
    let (mut s, seen) = setup_with(|_| {});
    let mine = FlowItem::Ipv4 {
        src: Some([10, 0, 0, 1].into()),
        dst: None,
        proto: None,
    };
    let other = FlowItem::Ipv4 {
        src: Some([10, 9, 9, 9].into()),
        dst: None,
        proto: None,
    };
    let f = &mut s.flde;
    let a = f.register_tenant(100, mine).unwrap();
    let _b = f.register_tenant(200, other).unwrap();
    assert!(matches!(
        f.register_tenant(100, other),
        Err(TenantError::ContextInUse(100))
    ));
    assert!(matches!(
        f.tenant_accelerate(a, 2000, &[mine], Some(200), None),
        Err(TenantError::ForeignContext {
            tenant: 100,
            claimed: 200
        })
    ));
    assert!(matches!(
        f.tenant_accelerate(a, 2000, &[other], None, None),
        Err(TenantError::NotConfined)
    ));
    assert!(matches!(
        f.tenant_accelerate(a, 2000, &[], None, None),
        Err(TenantError::NotConfined)
    ));
    assert!(matches!(
        f.tenant_accelerate(a, 5, &[mine], None, None),
        Err(TenantError::Priority(5))
    ));
    // A valid rule above the set-up's catch-all: the generator's traffic (from 10.0.0.1) now
    // reaches the accelerator with tenant A's context, which the tenant could only confirm.
    let h = f
        .tenant_accelerate(a, 1000, &[mine], Some(100), None)
        .unwrap();
    let rep = s.run_echo(&EchoConfig {
        packets: 50,
        sizes: Sizes::Fixed(128),
        ..Default::default()
    });
    assert_eq!((rep.packets_received, rep.mismatches), (50, 0));
    assert_eq!(s.flde.query(h).unwrap().0, 50);
    assert!(seen.lock().unwrap().iter().all(|&(ctx, _)| ctx == 100));
}

#[test]
fn a_tenants_meter_limits_its_traffic_into_the_accelerator() {
    let (mut s, seen) = setup_with(|_| {});
    s.card.nic.set_clock(Some(0));
    let mine = FlowItem::Ipv4 {
        src: Some([10, 0, 0, 1].into()),
        dst: None,
        proto: None,
    };
    let t = s.flde.register_tenant(100, mine).unwrap();
    // 1 MB/s with a 3000-byte burst.
    let meter = s.flde.shape_tenant(t, 1_000_000, 3000).unwrap();
    s.flde
        .tenant_accelerate(t, 1000, &[mine], None, None)
        .unwrap();
    let (cmac, amac) = (s.client.mac(), s.flde.mac());
    let pool = s.client.pool().unwrap();
    let send = |s: &mut FldEchoSetup, n: usize| {
        let mut tx = Vec::new();
        pool.alloc_bulk(&mut tx, n);
        for (i, m) in tx.iter_mut().enumerate() {
            let mut f = vec![0u8; 1000];
            fld_host::apps::build_frame(&mut f, i as u64, 1000, cmac, amac, 1, true);
            m.fill_from(&f);
        }
        while !tx.is_empty() {
            s.client.tx_burst(0, &mut tx);
        }
        s.card.run_until_idle();
        let mut rx = Vec::new();
        while s.client.rx_burst(0, &mut rx, 64) > 0 {}
        pool.free_bulk(rx);
    };
    // At t = 0 the bucket holds 3000 bytes: three 1000-byte frames pass, seven are dropped.
    send(&mut s, 10);
    let m0 = s.flde.nic().query_meter(meter).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 3, "meter {:?}", m0);
    // 2 ms later 2000 more bytes have accrued: two of five pass.
    s.card.nic.set_clock(Some(2_000_000));
    send(&mut s, 5);
    assert_eq!(seen.lock().unwrap().len(), 5);
    let m = s.flde.nic().query_meter(meter).unwrap();
    assert_eq!((m.passed_packets.get(), m.passed_bytes.get()), (5, 5000));
    assert_eq!(
        (m.dropped_packets.get(), m.dropped_bytes.get()),
        (10, 10000)
    );
    // A meter in use cannot be destroyed.
    assert_eq!(
        s.flde
            .nic()
            .destroy_meter(meter)
            .err()
            .and_then(|e| e.status()),
        Some(fld_abi::nic::CmdStatus::ResourceBusy)
    );
    assert!(seen.lock().unwrap().iter().all(|&(ctx, _)| ctx == 100));
}

/// FLD posts a lone WQE by MMIO (FlexDriver §6, "PCIe Optimizations"): with one packet in
/// flight the NIC takes every generated WQE from its WQE-by-MMIO buffer and reads only the data
/// from FLD (one peer-to-peer read per packet, counted on FLD's function); a burst is left to
/// the fetch. The echoes are byte-exact either way.
#[test]
fn a_lone_wqe_goes_by_mmio_and_a_burst_is_fetched() {
    let mut s = FldEchoSetup::new(1514).unwrap();
    let fld = s.card.fld.id();
    let sqns = s.flde.binding().sqns.clone();
    // WQEs FLD's queues sent from the NIC's WQE-by-MMIO buffers (QUERY_SQ `on_chip`).
    let by_mmio = |s: &mut FldEchoSetup| -> u64 {
        sqns.iter()
            .map(|&q| s.flde.nic().query_sq(q).unwrap().on_chip.get())
            .sum()
    };
    let lone = EchoConfig {
        packets: 50,
        sizes: Sizes::Fixed(128),
        window: 1,
        ..Default::default()
    };
    let rep = s.run_echo(&lone);
    assert_eq!(
        (rep.packets_received, rep.mismatches),
        (50, 0),
        "{}",
        stats(&s)
    );
    assert_eq!(by_mmio(&mut s), 50);
    assert_eq!(s.card.nic.wqe_mmio_counters().rejected, 0);
    assert_eq!(s.card.fabric.reads_served(fld), 50, "data reads only");

    let burst = EchoConfig {
        packets: 2000,
        sizes: Sizes::Fixed(128),
        window: 64,
        ..Default::default()
    };
    let rep = s.run_echo(&burst);
    assert_eq!(
        (rep.packets_received, rep.mismatches),
        (2000, 0),
        "{}",
        stats(&s)
    );
    let lone_ones = by_mmio(&mut s) - 50;
    let reads = s.card.fabric.reads_served(fld) - 50;
    assert!(lone_ones < 2000 / 4, "{lone_ones} of 2000 by MMIO");
    // Every packet's data is read, plus the fetches of the WQEs that did not come by MMIO.
    assert!(reads > 2000, "{reads} reads");
    assert_eq!(s.card.fld.stat(Stat::BadWindowAccesses), 0);
}
