//! The IP defragmentation accelerator behind FLD-E: fragments go to the accelerator, whole
//! datagrams come back into the NIC pipeline at the table the accelerate rule named, and RSS and
//! L4 checksum validation then see whole datagrams (paper §7).

use fld_abi::fld::Stat;
use fld_abi::nic::TABLE_KIND_FDB;
use fld_device::accel::defrag::Config;
use fld_device::accel::defrag_accel::DefragAccel;
use fld_device::fld::memory_model::MemoryParams;
use fld_driver::nic::{FlowRule, RuleFate, TableMiss};
use fld_host::flow::FlowItem;
use fld_host::mempool::ol;
use fld_qemu::testbed::FldEchoSetup;

/// A UDP/IPv4 datagram from the client to the accelerator's vPort, DF clear.
fn datagram(src: [u8; 6], dst: [u8; 6], sport: u16, len: usize) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(src, dst)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(sport, 9000);
    let mut f = Vec::new();
    b.write(
        &mut f,
        &(0..len)
            .map(|i| (i as u16 ^ sport) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    // May be fragmented: clear Don't Fragment.
    let mut ip = fld_abi::wire::Ipv4Packet::new_unchecked(&mut f[14..]);
    ip.set_frag(false, false, 0);
    ip.fill_checksum();
    f
}

/// Fragments at a 1450-byte MTU (1424 bytes of payload per fragment, a multiple of 8).
fn fragments(frame: &[u8]) -> Vec<Vec<u8>> {
    fld_qemu::testbed::inline_apps::fragment_ipv4(frame, 1450)
}

/// Sends `frames` from the client port, lets the card run, and returns what reached each of the
/// client's `queues` receive queues (with the checksum flags of every frame).
fn send_and_collect(
    s: &mut FldEchoSetup,
    frames: &[Vec<u8>],
    queues: u16,
) -> Vec<Vec<(Vec<u8>, u32)>> {
    let mut got = vec![Vec::new(); queues as usize];
    fld_qemu::testbed::inline_apps::pump(s, frames, 32, queues, |q, m| {
        got[q as usize].push((m.data().to_vec(), m.ol_flags))
    });
    got
}

#[test]
fn reassembled_datagrams_are_spread_by_rss_with_valid_l4_checksums() {
    let mut s = FldEchoSetup::build_with(9000, 1, MemoryParams::table_2a(), 4).unwrap();
    s.card
        .fld
        .set_accelerator(Box::new(DefragAccel::new(Config::default(), 0)));
    // The eSwitch sends IPv4 fragments to the accelerator's vPort, everything else to the client.
    let back = s
        .steer_to_accelerator(Some(&[FlowItem::Ipv4Fragment(true)]))
        .unwrap();
    s.flde
        .accelerate(0, &[FlowItem::Ipv4Fragment(true)], 7, Some(back))
        .unwrap();

    let (cmac, amac) = (s.client.mac(), s.flde.mac());
    let originals: Vec<Vec<u8>> = (0..40)
        .map(|i| datagram(cmac, amac, 1000 + i * 37, 3000))
        .collect();
    // Small datagrams that need no reassembly: the eSwitch delivers them without FLD.
    let whole: Vec<Vec<u8>> = (0..10)
        .map(|i| datagram(cmac, amac, 3000 + i, 500))
        .collect();
    let mut frames = whole.clone();
    for (k, d) in originals.iter().enumerate() {
        let mut frags = fragments(d);
        assert_eq!(
            frags.iter().map(|f| f.len()).collect::<Vec<_>>(),
            vec![1458, 1458, 194]
        );
        if k % 2 == 1 {
            frags.reverse();
        }
        frames.extend(frags);
    }
    let per_queue = send_and_collect(&mut s, &frames, 4);
    let counts: Vec<usize> = per_queue.iter().map(Vec::len).collect();
    let mut got = Vec::new();
    for (data, flags) in per_queue.into_iter().flatten() {
        let good = ol::RX_IP_CKSUM_GOOD | ol::RX_L4_CKSUM_GOOD;
        assert_eq!(
            flags & good,
            good,
            "L4 checksum validated on the whole datagram"
        );
        got.push(data);
    }
    assert_eq!(got.len(), 50, "{counts:?}");
    got.sort();
    let mut want = [originals.clone(), whole].concat();
    want.sort();
    assert!(got == want, "every datagram came back whole and unchanged");
    assert!(
        counts.iter().filter(|&&n| n > 0).count() >= 3,
        "RSS spread whole datagrams by port: {counts:?}"
    );
    assert_eq!(
        s.flde.fld().stat(Stat::RxPackets),
        120,
        "only the 120 fragments crossed into FLD"
    );
}

/// The control for the test above: without the accelerator the same fragments reach the client
/// as fragments, and RSS, which cannot see their ports, puts every one on the same queue.
#[test]
fn fragments_alone_all_land_on_one_rss_queue() {
    let mut s = FldEchoSetup::build_with(9000, 1, MemoryParams::table_2a(), 4).unwrap();
    let (cmac, amac) = (s.client.mac(), s.flde.mac());
    s.steer_to_accelerator(None).unwrap();
    let frames: Vec<Vec<u8>> = (0..40)
        .flat_map(|i| fragments(&datagram(cmac, amac, 1000 + i * 37, 3000)))
        .collect();
    let per_queue = send_and_collect(&mut s, &frames, 4);
    let counts: Vec<usize> = per_queue.iter().map(Vec::len).collect();
    assert_eq!(counts.iter().sum::<usize>(), 120);
    assert_eq!(
        counts.iter().filter(|&&n| n > 0).count(),
        1,
        "fragments hash on addresses only: {counts:?}"
    );
    for (data, flags) in per_queue.into_iter().flatten() {
        assert_eq!(
            flags & ol::RX_L4_CKSUM_GOOD,
            0,
            "no L4 checksum on a fragment"
        );
        assert!(frames.contains(&data));
    }
}

#[test]
fn fragments_inside_vxlan_are_decapsulated_by_the_nic_then_reassembled() {
    use fld_abi::fld::accelerate_tag;
    use fld_abi::nic::{FlowMatch, TABLE_KIND_NIC_RX};
    let mut s = FldEchoSetup::build_with(9000, 1, MemoryParams::table_2a(), 1).unwrap();
    s.card
        .fld
        .set_accelerator(Box::new(DefragAccel::new(Config::default(), 0)));
    let client_vport = s.client.vport();
    let fld_rq = s.flde.binding().rq.rqn;
    let nic = s.flde.nic();
    // Whole datagrams go to the client.
    let back = nic
        .create_flow_table(TABLE_KIND_FDB, 1, TableMiss::Drop)
        .unwrap();
    nic.create_flow_entry(back, &FlowRule::any(RuleFate::Vport(client_vport)))
        .unwrap();
    // The FLD vPort's pipeline: decapsulate VXLAN (VNI 5001), then send the inner frame to the
    // accelerator with the resume table.
    let inner_t = nic
        .create_flow_table(TABLE_KIND_NIC_RX, 10, TableMiss::Drop)
        .unwrap();
    let tag = accelerate_tag(9, Some(back as u8));
    nic.create_flow_entry(
        inner_t,
        &FlowRule {
            flow_tag: Some(tag),
            ..FlowRule::any(RuleFate::Rq(fld_rq))
        },
    )
    .unwrap();
    let root = nic
        .create_flow_table(TABLE_KIND_NIC_RX, 5, TableMiss::Drop)
        .unwrap();
    let (mut m, mut v) = (FlowMatch::default(), FlowMatch::default());
    m.dst_port = [0xff; 2];
    v.dst_port = 4789u16.to_be_bytes();
    m.vni = [0xff; 3];
    v.vni = [0, 0x13, 0x89];
    nic.create_flow_entry(
        root,
        &FlowRule {
            priority: 0,
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
    nic.set_root(TABLE_KIND_NIC_RX, Some(root)).unwrap();

    let (cmac, amac) = (s.client.mac(), s.flde.mac());
    let original = datagram([2, 0, 0, 0, 0, 0x11], [2, 0, 0, 0, 0, 0x22], 4242, 3000);
    let mut outers = Vec::new();
    for frag in fragments(&original) {
        // Outer headers: client -> accelerator vPort, UDP to 4789, VNI 5001.
        let mut vx = vec![0x08, 0, 0, 0, 0x00, 0x13, 0x89, 0];
        vx.extend_from_slice(&frag);
        let b = etherparse::PacketBuilder::ethernet2(cmac, amac)
            .ipv4([192, 168, 0, 1], [192, 168, 0, 2], 64)
            .udp(50000, 4789);
        let mut outer = Vec::new();
        b.write(&mut outer, &vx).unwrap();
        outers.push(outer);
    }
    let rx = send_and_collect(&mut s, &outers, 1).remove(0);
    assert_eq!(rx.len(), 1, "one whole datagram");
    assert!(
        rx[0].0 == original,
        "the inner datagram, reassembled and unchanged"
    );
    let good = ol::RX_IP_CKSUM_GOOD | ol::RX_L4_CKSUM_GOOD;
    assert_eq!(rx[0].1 & good, good);
}

/// The demo's and benchmark's workload, small: every datagram comes back whole both ways, and
/// only fragments crossed into FLD.
#[test]
fn defrag_workload_verifies_offload_and_host_reassembly() {
    let r = fld_qemu::testbed::inline_apps::defrag_workload(300, 1500, 1450, None).unwrap();
    assert!(r.verified(), "{r:?}");
    assert_eq!((r.frames_sent, r.fld_rx_frames), (600, 600));
    assert_eq!(
        r.counters,
        vec![("software_fragments", 600), ("software_reassembled", 300)]
    );
}
