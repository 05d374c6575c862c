//! eSwitch steering: priorities, misses, go-to-table, flow tags, counters, RSS, eSwitch (FDB)
//! rules, flooding, the uplink loopback wire and pcap capture.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use fld_abi::nic::*;
use fld_device::wire::pcap::CaptureFilter;
use fld_device::wire::{FrameTap, LoopbackWire, PcapTap, TapPoint};
use fld_driver::nic::{FlowRule, RqLayout, RuleFate, TableMiss};
use fld_driver::PciDevice;

fn udp_dport(p: u16) -> (FlowMatch, FlowMatch) {
    let mut m = FlowMatch::default();
    let mut v = FlowMatch::default();
    m.ip_proto = 0xff;
    v.ip_proto = 17;
    m.dst_port = [0xff; 2];
    v.dst_port = p.to_be_bytes();
    (m, v)
}

#[test]
fn priorities_ties_misses_and_goto_decide_the_fate() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let p = &mut r.ports[1];
    let rqn = p.rq.rqn;
    let next = p
        .nic
        .create_flow_table(TABLE_KIND_NIC_RX, 3, TableMiss::Drop)
        .unwrap();
    let root = p
        .nic
        .create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Goto(next))
        .unwrap();
    let (m53, v53) = udp_dport(53);
    let (mudp, vudp) = {
        let mut m = FlowMatch::default();
        let mut v = FlowMatch::default();
        m.ip_proto = 0xff;
        v.ip_proto = 17;
        (m, v)
    };
    // Created out of priority order on purpose.
    let any_udp_b = p
        .nic
        .create_flow_entry(
            root,
            &FlowRule {
                priority: 10,
                mask: mudp,
                value: vudp,
                fate: RuleFate::Rq(rqn),
                flow_tag: Some(0x11),
                count: true,
                vxlan_decap: false,
                vxlan_encap: None,
                meter: None,
            },
        )
        .unwrap();
    let any_udp_c = p
        .nic
        .create_flow_entry(
            root,
            &FlowRule {
                priority: 10,
                mask: mudp,
                value: vudp,
                fate: RuleFate::Rq(rqn),
                flow_tag: Some(0x22),
                count: true,
                vxlan_decap: false,
                vxlan_encap: None,
                meter: None,
            },
        )
        .unwrap();
    let dns_drop = p
        .nic
        .create_flow_entry(
            root,
            &FlowRule {
                priority: 5,
                mask: m53,
                value: v53,
                fate: RuleFate::Drop,
                flow_tag: None,
                count: true,
                vxlan_decap: false,
                vxlan_encap: None,
                meter: None,
            },
        )
        .unwrap();
    let tail = p
        .nic
        .create_flow_entry(
            next,
            &FlowRule {
                flow_tag: Some(0x33),
                count: true,
                ..FlowRule::any(RuleFate::Rq(rqn))
            },
        )
        .unwrap();
    p.nic.set_root(TABLE_KIND_NIC_RX, Some(root)).unwrap();

    r.ports[0].send(&udp_frame(m0, m1, 1, 53, 80, 0), 0, false); // dropped by priority 5
    r.ports[0].send(&udp_frame(m0, m1, 1, 54, 80, 1), 0, false); // first of the tied rules
    r.ports[0].send(
        &tcp_frame(m0, m1, [1, 1, 1, 1], [2, 2, 2, 2], 1, 2, b"x"),
        0,
        false,
    ); // miss -> next table
    r.run();
    let p = &mut r.ports[1];
    assert_eq!(p.rq_cq.poll().unwrap().flow_tag.get(), 0x11);
    assert_eq!(p.rq_cq.poll().unwrap().flow_tag.get(), 0x33);
    assert!(p.rq_cq.poll().is_none());
    assert_eq!(p.nic.query_flow_entry(dns_drop).unwrap(), (1, 80));
    assert_eq!(p.nic.query_flow_entry(any_udp_b).unwrap(), (1, 80));
    assert_eq!(p.nic.query_flow_entry(any_udp_c).unwrap(), (0, 0));
    assert_eq!(p.nic.query_flow_entry(tail).unwrap().0, 1);
    assert_eq!(p.nic.query_vport(1).unwrap().rx_steering_drops.get(), 1);
    // Removing the winner lets the tied rule match; tables in use cannot be destroyed.
    p.nic.destroy_flow_entry(any_udp_b).unwrap();
    assert_eq!(
        p.nic
            .destroy_flow_table(next)
            .err()
            .and_then(|e| e.status()),
        Some(CmdStatus::ResourceBusy)
    );
    r.ports[0].send(&udp_frame(m0, m1, 1, 54, 80, 1), 0, false);
    r.run();
    assert_eq!(r.ports[1].rq_cq.poll().unwrap().flow_tag.get(), 0x22);
}

/// Toeplitz written out bit by bit, independently of the device's table-driven version.
fn toeplitz_reference(key: &[u8; 40], input: &[u8]) -> u32 {
    let bit = |i: usize| (key[i / 8] >> (7 - i % 8)) & 1;
    let mut h = 0u32;
    for (n, byte) in input.iter().enumerate() {
        for b in 0..8 {
            if byte >> (7 - b) & 1 == 1 {
                let start = n * 8 + b;
                let window = (0..32).fold(0u32, |w, k| (w << 1) | bit(start + k) as u32);
                h ^= window;
            }
        }
    }
    h
}

#[test]
fn rss_spreads_flows_by_the_toeplitz_hash() {
    let mut r = rig(RqLayout::Regular, 6, 10);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let p = &mut r.ports[1];
    let mut rqs = vec![];
    let mut cqs = vec![];
    let mut bufs = vec![];
    for _ in 0..4 {
        let cq = p.nic.create_cq(&p.eq, 8).unwrap();
        let mut rq = p.nic.create_rq(&cq, 6, RqLayout::Regular).unwrap();
        for _ in 0..64 {
            let b = p.dev.dma_alloc(2048).unwrap();
            rq.post(b.iova(), 2048);
            bufs.push(b);
        }
        rq.ring_doorbell();
        rqs.push(rq);
        cqs.push(cq);
    }
    let key = fld_abi::nic::DEFAULT_RSS_KEY;
    let indir: Vec<u32> = (0..8).map(|i| rqs[i % 4].rqn).collect();
    let fields =
        rss_fields::SRC_IP | rss_fields::DST_IP | rss_fields::SRC_PORT | rss_fields::DST_PORT;
    let g = p.nic.create_rss_group(&key, fields, &indir).unwrap();
    let t = p
        .nic
        .create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)
        .unwrap();
    p.nic
        .create_flow_entry(t, &FlowRule::any(RuleFate::Rss(g)))
        .unwrap();
    p.nic.set_root(TABLE_KIND_NIC_RX, Some(t)).unwrap();
    // The RSS group's queues cannot be destroyed while it names them.
    assert_eq!(
        p.nic.destroy_rq(rqs[0].rqn).err().and_then(|e| e.status()),
        Some(CmdStatus::ResourceBusy)
    );

    let mut per_queue = [0u32; 4];
    for i in 0..64u16 {
        let (sip, dip, sport, dport) = (
            [10, 1, (i >> 8) as u8, i as u8],
            [10, 2, 0, 1],
            1000 + i * 7,
            80,
        );
        r.ports[0].send(&tcp_frame(m0, m1, sip, dip, sport, dport, b"rss"), 0, false);
        r.run();
        let mut input = vec![];
        input.extend_from_slice(&sip);
        input.extend_from_slice(&dip);
        input.extend_from_slice(&sport.to_be_bytes());
        input.extend_from_slice(&dport.to_be_bytes());
        let want = toeplitz_reference(&key, &input);
        let q = (want & 7) as usize % 4;
        let c = cqs[q]
            .poll()
            .unwrap_or_else(|| panic!("flow {i} not on queue {q}"));
        assert_eq!(c.rss_hash.get(), want);
        assert_eq!(c.qn.get(), rqs[q].rqn);
        per_queue[q] += 1;
    }
    assert!(
        per_queue.iter().all(|&n| n >= 8),
        "flows spread over all queues: {per_queue:?}"
    );
}

#[test]
fn eswitch_rules_flooding_and_the_uplink_loopback() {
    let mut r = rig(RqLayout::Regular, 6, 8);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    r.card.nic.set_uplink(Box::new(LoopbackWire::new(64)));
    // Broadcast from vPort 0: flooded to vPort 1 and the uplink; the loopback cable brings it
    // back in from the uplink, flooded to vPorts 0 and 1.
    let bcast = udp_frame(m0, [0xff; 6], 1, 2, 100, 5);
    r.ports[0].send(&bcast, 0, false);
    r.run();
    let mut n1 = 0;
    while let Some(c) = r.ports[1].rq_cq.poll() {
        assert_eq!(c.byte_count.get(), 100);
        n1 += 1;
    }
    let mut n0 = 0;
    while r.ports[0].rq_cq.poll().is_some() {
        n0 += 1;
    }
    assert_eq!((n0, n1), (1, 2));
    assert_eq!(
        r.card.nic.stats().wire_tx_frames,
        1,
        "a flood never goes back out of the port it came from"
    );

    // An eSwitch rule from the manager drops traffic to vPort 1 and counts it.
    let p0 = &mut r.ports[0];
    let fdb = p0
        .nic
        .create_flow_table(TABLE_KIND_FDB, 0, TableMiss::Default)
        .unwrap();
    let mut m = FlowMatch::default();
    let mut v = FlowMatch::default();
    m.dst_mac = [0xff; 6];
    v.dst_mac = m1;
    let e = p0
        .nic
        .create_flow_entry(
            fdb,
            &FlowRule {
                priority: 1,
                mask: m,
                value: v,
                fate: RuleFate::Drop,
                flow_tag: None,
                count: true,
                vxlan_decap: false,
                vxlan_encap: None,
                meter: None,
            },
        )
        .unwrap();
    p0.nic.set_root(TABLE_KIND_FDB, Some(fdb)).unwrap();
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 0), 0, false);
    r.run();
    assert!(r.ports[1].rq_cq.poll().is_none());
    assert_eq!(r.ports[0].nic.query_flow_entry(e).unwrap(), (1, 64));
    // Without the rule, the default L2 forwarding delivers again.
    r.ports[0].nic.set_root(TABLE_KIND_FDB, None).unwrap();
    r.ports[0].send(&udp_frame(m0, m1, 1, 2, 64, 0), 0, false);
    r.run();
    assert!(r.ports[1].rq_cq.poll().is_some());
}

/// A tap that remembers what it saw.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

type Seen = (u16, TapPoint, Vec<u8>);

impl FrameTap for Recorder {
    fn frame(&mut self, _now_ns: u64, vport: u16, point: TapPoint, frame: &[u8]) {
        self.0.lock().unwrap().push((vport, point, frame.to_vec()));
    }
}

#[test]
fn taps_see_every_port_and_pcap_captures_read_back() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let rec = Recorder::default();
    r.card.nic.set_tap(Some(Box::new(rec.clone())));
    let frames: Vec<Vec<u8>> = (0..3)
        .map(|i| udp_frame(m0, m1, 7, 8, 60 + 500 * i, i as u8))
        .collect();
    for f in &frames {
        r.ports[0].send(f, 0, false);
    }
    r.run();
    let seen = rec.0.lock().unwrap().clone();
    let expect: Vec<Seen> = frames
        .iter()
        .flat_map(|f| {
            [
                (0, TapPoint::FromVport, f.clone()),
                (1, TapPoint::ToVport, f.clone()),
            ]
        })
        .collect();
    assert_eq!(seen, expect);

    let path = std::env::temp_dir().join(format!("fldemu-test-{}.pcap", std::process::id()));
    let tap = PcapTap::new(
        std::io::BufWriter::new(std::fs::File::create(&path).unwrap()),
        CaptureFilter::AllIngress,
    )
    .unwrap();
    r.card.nic.set_tap(Some(Box::new(tap)));
    for f in &frames {
        r.ports[0].send(f, 0, false);
    }
    r.run();
    r.card.nic.set_tap(None);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut rd = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
    for f in &frames {
        let p = rd.next_packet().unwrap().unwrap();
        assert_eq!(p.data.as_ref(), &f[..]);
        let parsed = etherparse::SlicedPacket::from_ethernet(&p.data).unwrap();
        assert!(matches!(
            parsed.transport,
            Some(etherparse::TransportSlice::Udp(_))
        ));
    }
    assert!(rd.next_packet().is_none());
}

/// A VXLAN frame (RFC 7348) around `inner`: outer Ethernet/IPv4/UDP to port 4789, VNI `vni`.
fn vxlan_frame(src: [u8; 6], dst: [u8; 6], vni: u32, flags: u8, inner: &[u8]) -> Vec<u8> {
    let mut vx = vec![flags, 0, 0, 0];
    vx.extend_from_slice(&vni.to_be_bytes()[1..]);
    vx.push(0);
    vx.extend_from_slice(inner);
    let b = etherparse::PacketBuilder::ethernet2(src, dst)
        .ipv4([192, 168, 0, 1], [192, 168, 0, 2], 64)
        .udp(50000, 4789);
    let mut out = Vec::new();
    b.write(&mut out, &vx).unwrap();
    out
}

#[test]
fn vxlan_decap_steers_the_inner_frame_by_vni() {
    let mut r = rig(RqLayout::Regular, 4, 6);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let p = &mut r.ports[1];
    let rqn = p.rq.rqn;
    let inner_t = p
        .nic
        .create_flow_table(TABLE_KIND_NIC_RX, 2, TableMiss::Drop)
        .unwrap();
    let root = p
        .nic
        .create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)
        .unwrap();
    let mut m = FlowMatch::default();
    let mut v = FlowMatch::default();
    m.dst_port = [0xff; 2];
    v.dst_port = 4789u16.to_be_bytes();
    m.vni = [0xff; 3];
    v.vni = [0, 0, 42];
    let decap = p
        .nic
        .create_flow_entry(
            root,
            &FlowRule {
                priority: 1,
                mask: m,
                value: v,
                fate: RuleFate::Goto(inner_t),
                flow_tag: None,
                count: true,
                vxlan_decap: true,
                vxlan_encap: None,
                meter: None,
            },
        )
        .unwrap();
    // Inside: only TCP to port 80 is delivered, tagged.
    let mut im = FlowMatch::default();
    let mut iv = FlowMatch::default();
    im.ip_proto = 0xff;
    iv.ip_proto = 6;
    im.dst_port = [0xff; 2];
    iv.dst_port = 80u16.to_be_bytes();
    p.nic
        .create_flow_entry(
            inner_t,
            &FlowRule {
                priority: 1,
                mask: im,
                value: iv,
                fate: RuleFate::Rq(rqn),
                flow_tag: Some(0x77),
                count: false,
                vxlan_decap: false,
                vxlan_encap: None,
                meter: None,
            },
        )
        .unwrap();
    // Decap without a go-to is refused.
    let bad = FlowRule {
        vxlan_decap: true,
        vxlan_encap: None,
        ..FlowRule::any(RuleFate::Rq(rqn))
    };
    assert_eq!(
        p.nic
            .create_flow_entry(root, &bad)
            .err()
            .and_then(|e| e.status()),
        Some(CmdStatus::BadParam)
    );
    p.nic.set_root(TABLE_KIND_NIC_RX, Some(root)).unwrap();

    let inner = tcp_frame(
        [2, 0, 0, 0, 0, 0xaa],
        [2, 0, 0, 0, 0, 0xbb],
        [10, 1, 1, 1],
        [10, 1, 1, 2],
        5555,
        80,
        b"tunnelled payload",
    );
    let other = tcp_frame(
        [2, 0, 0, 0, 0, 0xaa],
        [2, 0, 0, 0, 0, 0xbb],
        [10, 1, 1, 1],
        [10, 1, 1, 2],
        5555,
        443,
        b"not port 80",
    );
    r.ports[0].send(&vxlan_frame(m0, m1, 42, 0x08, &inner), 0, false);
    r.ports[0].send(&vxlan_frame(m0, m1, 43, 0x08, &inner), 0, false); // other VNI: root miss -> drop
    r.ports[0].send(&vxlan_frame(m0, m1, 42, 0x08, &other), 0, false); // inner miss -> drop
    r.ports[0].send(&vxlan_frame(m0, m1, 42, 0x00, &inner), 0, false); // no I flag: not VXLAN, VNI 0
    r.run();
    let p = &mut r.ports[1];
    let c = p.rq_cq.poll().expect("the inner frame");
    assert_eq!(
        (c.byte_count.get() as usize, c.flow_tag.get()),
        (inner.len(), 0x77)
    );
    assert_eq!(
        c.csum,
        cqe_csum::L3_PRESENT
            | cqe_csum::L3_OK
            | cqe_csum::L4_PRESENT
            | cqe_csum::L4_OK
            | cqe_csum::TCP,
        "offloads run on the inner headers"
    );
    let mut got = vec![0u8; inner.len()];
    p.rx_bufs[0].read(0, &mut got);
    assert_eq!(got, inner);
    assert!(p.rq_cq.poll().is_none());
    assert_eq!(p.nic.query_flow_entry(decap).unwrap().0, 2);
    assert_eq!(p.nic.query_vport(1).unwrap().rx_steering_drops.get(), 3);
}

/// VXLAN encapsulation on an eSwitch rule (RFC 7348 §5): vPort 0's traffic to UDP port 9999
/// leaves on the uplink inside a tunnel; the loopback cable brings it back, a decap rule strips
/// it and vPort 1 gets the original frame.
#[test]
fn vxlan_encap_wraps_frames_for_the_uplink_and_decap_restores_them() {
    let mut r = rig(RqLayout::Regular, 6, 8);
    let (m0, m1) = (r.ports[0].mac(), r.ports[1].mac());
    let v1 = r.ports[1].nic.vport();
    r.card.nic.set_uplink(Box::new(LoopbackWire::new(64)));
    let rec = Recorder::default();
    r.card.nic.set_tap(Some(Box::new(rec.clone())));
    let nic = &mut r.ports[0].nic;
    let tunnel = CreateVxlanEncapIn {
        dst_mac: [2, 0, 0, 0, 0, 0x77],
        src_mac: [2, 0, 0, 0, 0, 0x66],
        src_ip: [192, 168, 1, 1],
        dst_ip: [192, 168, 1, 2],
        vni: 5001.into(),
        ..Default::default()
    };
    let encap = nic.create_vxlan_encap(&tunnel).unwrap();
    let too_wide = CreateVxlanEncapIn {
        vni: (1u32 << 24).into(),
        ..tunnel
    };
    assert_eq!(
        nic.create_vxlan_encap(&too_wide)
            .err()
            .and_then(|e| e.status()),
        Some(CmdStatus::BadParam),
        "VNIs have 24 bits"
    );
    let inner_t = nic
        .create_flow_table(TABLE_KIND_FDB, 1, TableMiss::Drop)
        .unwrap();
    nic.create_flow_entry(inner_t, &FlowRule::any(RuleFate::Vport(v1)))
        .unwrap();
    let root = nic
        .create_flow_table(TABLE_KIND_FDB, 0, TableMiss::Default)
        .unwrap();
    let (m9999, v9999) = udp_dport(9999);
    let out_rule = FlowRule {
        priority: 1,
        mask: m9999,
        value: v9999,
        vxlan_encap: Some(encap),
        count: true,
        ..FlowRule::any(RuleFate::Vport(VPORT_UPLINK))
    };
    let e = nic.create_flow_entry(root, &out_rule).unwrap();
    let (mut m, mut v) = udp_dport(4789);
    m.vni = [0xff; 3];
    v.vni = [0, 0x13, 0x89];
    nic.create_flow_entry(
        root,
        &FlowRule {
            priority: 2,
            mask: m,
            value: v,
            vxlan_decap: true,
            ..FlowRule::any(RuleFate::Goto(inner_t))
        },
    )
    .unwrap();
    nic.set_root(TABLE_KIND_FDB, Some(root)).unwrap();
    // Encapsulation needs a vPort fate, and an encapsulation the function owns.
    let to_drop = FlowRule {
        vxlan_encap: Some(encap),
        ..FlowRule::any(RuleFate::Drop)
    };
    let unknown = FlowRule {
        vxlan_encap: Some(encap + 7),
        ..out_rule
    };
    for (rule, status) in [
        (&to_drop, CmdStatus::BadParam),
        (&unknown, CmdStatus::BadResource),
    ] {
        assert_eq!(
            nic.create_flow_entry(root, rule)
                .err()
                .and_then(|e| e.status()),
            Some(status)
        );
    }

    let inner = udp_frame(m0, m1, 4321, 9999, 300, 9);
    // With the outer headers this one exceeds the 9216-byte MTU: dropped, not fragmented.
    let jumbo = udp_frame(m0, m1, 4321, 9999, 9200, 3);
    r.ports[0].send(&inner, 0, false);
    r.ports[0].send(&jumbo, 0, false);
    r.run();
    let c = r.ports[1].rq_cq.poll().expect("the decapsulated frame");
    assert_eq!(c.byte_count.get() as usize, inner.len());
    let mut got = vec![0u8; inner.len()];
    r.ports[1].rx_bufs[0].read(0, &mut got);
    assert_eq!(got, inner);
    assert!(
        r.ports[1].rq_cq.poll().is_none(),
        "the jumbo frame was dropped"
    );
    assert_eq!(
        r.ports[0]
            .nic
            .query_vport(0)
            .unwrap()
            .rx_steering_drops
            .get(),
        1,
        "and counted"
    );
    assert_eq!(r.card.nic.stats().wire_tx_frames, 1);

    let seen = rec.0.lock().unwrap().clone();
    let outer = seen
        .iter()
        .find(|(vp, pt, _)| *vp == VPORT_UPLINK && *pt == TapPoint::ToVport)
        .map(|s| s.2.clone())
        .expect("the tunnelled frame on the uplink");
    assert_eq!(outer.len(), inner.len() + VXLAN_ENCAP_LEN);
    assert_eq!(&outer[..12], &[2, 0, 0, 0, 0, 0x77, 2, 0, 0, 0, 0, 0x66]);
    let ip = etherparse::Ipv4HeaderSlice::from_slice(&outer[14..]).unwrap();
    assert_eq!(
        (ip.source(), ip.destination(), ip.ttl(), ip.dont_fragment()),
        ([192, 168, 1, 1], [192, 168, 1, 2], 64, true)
    );
    assert_eq!(usize::from(ip.total_len()), outer.len() - 14);
    let header = ip.to_header();
    assert_eq!(
        header.header_checksum,
        header.calc_header_checksum(),
        "valid outer IPv4 checksum"
    );
    let udp = etherparse::UdpHeaderSlice::from_slice(&outer[34..]).unwrap();
    assert_eq!(udp.destination_port(), 4789);
    assert!(udp.source_port() >= 49152, "source port from the flow hash");
    assert_eq!(usize::from(udp.length()), outer.len() - 34);
    assert_eq!(udp.checksum(), 0);
    assert_eq!(&outer[42..50], &[0x08, 0, 0, 0, 0x00, 0x13, 0x89, 0]);
    assert_eq!(&outer[50..], &inner[..]);

    assert_eq!(
        r.ports[0].nic.query_flow_entry(e).unwrap(),
        (2, (inner.len() + jumbo.len()) as u64)
    );
    let nic = &mut r.ports[0].nic;
    assert_eq!(
        nic.destroy_vxlan_encap(encap)
            .err()
            .and_then(|e| e.status()),
        Some(CmdStatus::ResourceBusy),
        "an encapsulation in use stays"
    );
    nic.destroy_flow_entry(e).unwrap();
    nic.destroy_vxlan_encap(encap).unwrap();
}
