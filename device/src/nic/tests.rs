//! The NIC core tested from the driver's side of the bus, through the device crate's own mock
//! ([`crate::mock`]): every command status and syndrome, ring wrap-around with owner bits, every
//! completion error syndrome, events and interrupts, and byte-exact traffic.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, IntoBytes};

use super::NicConfig;
use crate::fabric::FabricConfig;
use crate::mock::{signalled, CmdReply, MockHost, MockPort, MockQp, MockRing, MOCK_IOVA};
use fld_abi::nic::*;
use fld_abi::wire::{ethertype, EthIpv4UdpRepr, EthernetRepr, Ipv4Repr, UdpRepr};

fn host() -> MockHost {
    MockHost::nic(NicConfig::default(), 4 << 20)
}

/// A UDP/IPv4 frame of `len` bytes from NIC function `from` to `to`, payload byte k = k.
fn frame(h: &MockHost, from: u16, to: u16, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|k| k as u8).collect();
    udp_headers(&mut f, (h.nic_mac(from), h.nic_mac(to)), 1000);
    f
}

/// Writes Ethernet, IPv4 (10.0.0.1 to 10.0.0.2) and UDP (`src_port` to 2000) headers over the
/// start of `frame` (at least 42 bytes), without checksums, from MAC `src` to `dst`.
pub(super) fn udp_headers(frame: &mut [u8], (src, dst): ([u8; 6], [u8; 6]), src_port: u16) {
    let stack = EthIpv4UdpRepr {
        eth: EthernetRepr {
            src_addr: src,
            dst_addr: dst,
            ethertype: ethertype::IPV4,
        },
        ip: Ipv4Repr {
            src_addr: [10, 0, 0, 1],
            dst_addr: [10, 0, 0, 2],
            hop_limit: 64,
            ..Default::default()
        },
        udp: UdpRepr {
            src_port,
            dst_port: 2000,
        },
    };
    assert!(stack.emit(frame, false));
}

fn ports(h: &MockHost) -> (MockPort, MockPort) {
    (h.open_port(0), h.open_port(1))
}

/// A CREATE_EQ body.
fn eq_in(addr: u64, log_size: u8, vector: u16) -> Vec<u8> {
    CreateEqIn {
        addr: U64::new(addr),
        log_size,
        rsvd: 0,
        msix_vector: U16::new(vector),
        rsvd2: [0; 4],
    }
    .as_bytes()
    .to_vec()
}

fn rule(table: u32, actions: u32) -> CreateFlowEntryIn {
    CreateFlowEntryIn {
        table: U32::new(table),
        actions: U32::new(actions),
        ..Default::default()
    }
}

fn table_in(kind: u8, level: u8, miss: u8, miss_table: u32) -> Vec<u8> {
    CreateFlowTableIn {
        kind,
        level,
        miss,
        rsvd: 0,
        miss_table: U32::new(miss_table),
    }
    .as_bytes()
    .to_vec()
}

#[test]
fn every_bad_param_syndrome_names_its_check() {
    let h = host();
    let ring = h.alloc(4096);
    let p = h.open_port(0);
    let eqn = p.eq.id;
    let cqn = p.tx_cq.id;
    let cq_in = |log_size| {
        CreateCqIn {
            addr: U64::new(ring),
            eqn: U32::new(eqn),
            log_size,
            rsvd: [0; 3],
        }
        .as_bytes()
        .to_vec()
    };
    let sq_in = |log_size, flags| {
        CreateSqIn {
            addr: U64::new(ring),
            cqn: U32::new(cqn),
            log_size,
            flags,
            rsvd: [0; 2],
        }
        .as_bytes()
        .to_vec()
    };
    let rq_in = |rq_type, log_stride_size, log_strides| {
        CreateRqIn {
            addr: U64::new(ring),
            cqn: U32::new(cqn),
            log_size: 2,
            rq_type,
            log_stride_size,
            log_strides,
        }
        .as_bytes()
        .to_vec()
    };
    let rss_in = |n: u16, fields| {
        CreateRssGroupIn {
            key: DEFAULT_RSS_KEY,
            hash_fields: fields,
            rsvd: 0,
            indirection_len: U16::new(n),
            rsvd2: [0; 4],
        }
        .encode(&vec![p.rq.id; n as usize])
    };
    let rx_table = h.command(
        0,
        op::CREATE_FLOW_TABLE,
        &table_in(TABLE_KIND_NIC_RX, 5, MISS_DEFAULT, 0),
    );
    let rx_table = rx_table.id().expect("table");
    let low = h.command(
        0,
        op::CREATE_FLOW_TABLE,
        &table_in(TABLE_KIND_NIC_RX, 1, MISS_DEFAULT, 0),
    );
    let low = low.id().expect("table");
    let fdb = h.command(
        0,
        op::CREATE_FLOW_TABLE,
        &table_in(TABLE_KIND_FDB, 3, MISS_DEFAULT, 0),
    );
    let fdb = fdb.id().expect("table");
    let entry = |r: CreateFlowEntryIn| r.as_bytes().to_vec();
    let modify = ModifyQueueIn {
        id: U32::new(p.sq.id),
        new_state: QueueState::Error as u8,
        rsvd: [0; 3],
    };
    let vxlan = CreateVxlanEncapIn {
        vni: U32::new(1 << 24),
        ..Default::default()
    };
    let cases: Vec<(&str, u16, Vec<u8>, u32)> = vec![
        (
            "unaligned ring",
            op::CREATE_EQ,
            eq_in(ring + 8, 2, 0),
            bad_param::RING_ALIGNMENT,
        ),
        (
            "unmapped ring",
            op::CREATE_EQ,
            eq_in(MOCK_IOVA - 4096, 2, 0),
            bad_param::RING_UNREACHABLE,
        ),
        (
            "ring past the mapping",
            op::CREATE_EQ,
            eq_in(MOCK_IOVA + (4 << 20) - 64, 2, 0),
            bad_param::RING_UNREACHABLE,
        ),
        (
            "EQ too large",
            op::CREATE_EQ,
            eq_in(ring, MAX_LOG_EQ + 1, 0),
            bad_param::LOG_SIZE,
        ),
        (
            "vector beyond the table",
            op::CREATE_EQ,
            eq_in(ring, 2, NIC_MSIX_VECTORS),
            bad_param::MSIX_VECTOR,
        ),
        (
            "CQ too large",
            op::CREATE_CQ,
            cq_in(MAX_LOG_CQ + 1),
            bad_param::LOG_SIZE,
        ),
        (
            "SQ too large",
            op::CREATE_SQ,
            sq_in(MAX_LOG_SQ + 1, 0),
            bad_param::LOG_SIZE,
        ),
        (
            "unknown SQ flag",
            op::CREATE_SQ,
            sq_in(2, 0x2),
            bad_param::SQ_FLAGS,
        ),
        (
            "modify to a state other than ready",
            op::MODIFY_SQ,
            modify.as_bytes().to_vec(),
            bad_param::NEW_STATE,
        ),
        (
            "stride too small",
            op::CREATE_RQ,
            rq_in(RQ_TYPE_STRIDING, MIN_LOG_STRIDE - 1, 3),
            bad_param::STRIDE_SIZE,
        ),
        (
            "stride too large",
            op::CREATE_RQ,
            rq_in(RQ_TYPE_STRIDING, MAX_LOG_STRIDE + 1, 3),
            bad_param::STRIDE_SIZE,
        ),
        (
            "too few strides",
            op::CREATE_RQ,
            rq_in(RQ_TYPE_STRIDING, 8, MIN_LOG_STRIDES - 1),
            bad_param::STRIDE_COUNT,
        ),
        (
            "unknown RQ type",
            op::CREATE_RQ,
            rq_in(7, 0, 0),
            bad_param::RQ_TYPE,
        ),
        (
            "indirection not a power of two",
            op::CREATE_RSS_GROUP,
            rss_in(3, rss_fields::ALL),
            bad_param::RSS_INDIRECTION_LEN,
        ),
        (
            "empty indirection",
            op::CREATE_RSS_GROUP,
            rss_in(0, rss_fields::ALL),
            bad_param::RSS_INDIRECTION_LEN,
        ),
        (
            "no hash field",
            op::CREATE_RSS_GROUP,
            rss_in(4, 0),
            bad_param::RSS_HASH_FIELDS,
        ),
        (
            "unknown hash field",
            op::CREATE_RSS_GROUP,
            rss_in(4, 0x10),
            bad_param::RSS_HASH_FIELDS,
        ),
        (
            "unknown table kind",
            op::CREATE_FLOW_TABLE,
            table_in(7, 0, MISS_DEFAULT, 0),
            bad_param::TABLE_KIND,
        ),
        (
            "level too high",
            op::CREATE_FLOW_TABLE,
            table_in(TABLE_KIND_NIC_RX, MAX_FLOW_LEVEL + 1, MISS_DEFAULT, 0),
            bad_param::TABLE_LEVEL,
        ),
        (
            "unknown miss",
            op::CREATE_FLOW_TABLE,
            table_in(TABLE_KIND_NIC_RX, 0, 3, 0),
            bad_param::TABLE_MISS,
        ),
        (
            "miss to a lower level",
            op::CREATE_FLOW_TABLE,
            table_in(TABLE_KIND_NIC_RX, 2, MISS_GOTO_TABLE, low),
            bad_param::GOTO_TARGET,
        ),
        (
            "miss to another kind",
            op::CREATE_FLOW_TABLE,
            table_in(TABLE_KIND_NIC_RX, 0, MISS_GOTO_TABLE, fdb),
            bad_param::GOTO_TARGET,
        ),
        (
            "two fates",
            op::CREATE_FLOW_ENTRY,
            entry(rule(rx_table, action::DROP | action::FWD_RQ)),
            bad_param::ACTIONS,
        ),
        (
            "unknown action bit",
            op::CREATE_FLOW_ENTRY,
            entry(rule(rx_table, 1 << 20)),
            bad_param::ACTIONS,
        ),
        (
            "vPort fate in a receive table",
            op::CREATE_FLOW_ENTRY,
            entry(rule(rx_table, action::FWD_VPORT)),
            bad_param::VPORT_OUTSIDE_FDB,
        ),
        (
            "RQ fate in the FDB",
            op::CREATE_FLOW_ENTRY,
            entry(rule(fdb, action::FWD_RQ)),
            bad_param::QUEUE_OUTSIDE_RX,
        ),
        (
            "decap without go-to",
            op::CREATE_FLOW_ENTRY,
            entry(rule(rx_table, action::VXLAN_DECAP | action::DROP)),
            bad_param::DECAP_WITHOUT_GOTO,
        ),
        (
            "encap without a vPort",
            op::CREATE_FLOW_ENTRY,
            entry(rule(fdb, action::VXLAN_ENCAP | action::DROP)),
            bad_param::ENCAP_WITHOUT_VPORT,
        ),
        (
            "go-to a lower level",
            op::CREATE_FLOW_ENTRY,
            entry(CreateFlowEntryIn {
                dest: U32::new(low),
                ..rule(rx_table, action::GOTO_TABLE)
            }),
            bad_param::GOTO_TARGET,
        ),
        (
            "meter without rate",
            op::CREATE_METER,
            CreateMeterIn {
                burst_bytes: U32::new(1),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            bad_param::METER_RATE,
        ),
        (
            "VNI wider than 24 bits",
            op::CREATE_VXLAN_ENCAP,
            vxlan.as_bytes().to_vec(),
            bad_param::VNI,
        ),
    ];
    let mut seen = Vec::new();
    for (what, opcode, body, syndrome) in &cases {
        let r = h.command(0, *opcode, body);
        assert!(
            r.failed_with(CmdStatus::BadParam, *syndrome),
            "{what}: {r:?}"
        );
        seen.push(*syndrome);
    }
    // Every BAD_PARAM syndrome the interface defines has a case above.
    for s in [
        bad_param::RING_ALIGNMENT,
        bad_param::RING_UNREACHABLE,
        bad_param::LOG_SIZE,
        bad_param::MSIX_VECTOR,
        bad_param::SQ_FLAGS,
        bad_param::NEW_STATE,
        bad_param::STRIDE_SIZE,
        bad_param::STRIDE_COUNT,
        bad_param::RQ_TYPE,
        bad_param::RSS_INDIRECTION_LEN,
        bad_param::RSS_HASH_FIELDS,
        bad_param::TABLE_KIND,
        bad_param::TABLE_LEVEL,
        bad_param::TABLE_MISS,
        bad_param::GOTO_TARGET,
        bad_param::ACTIONS,
        bad_param::VPORT_OUTSIDE_FDB,
        bad_param::QUEUE_OUTSIDE_RX,
        bad_param::DECAP_WITHOUT_GOTO,
        bad_param::ENCAP_WITHOUT_VPORT,
        bad_param::METER_RATE,
        bad_param::VNI,
    ] {
        assert!(seen.contains(&s), "no case for syndrome {s:#x}");
    }
    // None of the refused commands created anything: the next EQ is number 1 (0 is the port's).
    assert_eq!(h.create_eq(0, 2, 0).id, 1);
}

#[test]
fn every_other_status_and_its_syndrome() {
    let h = MockHost::nic(
        NicConfig {
            max_eqs: 2,
            ..Default::default()
        },
        1 << 20,
    );
    let ring = h.alloc(4096);
    // Unknown opcode: the opcode.
    let r = h.command(0, 0x999, &[]);
    assert!(r.failed_with(CmdStatus::BadOpcode, 0x999), "{r:?}");
    // Input shorter than the layout.
    let r = h.command(0, op::CREATE_EQ, &eq_in(ring, 2, 0)[..15]);
    assert!(r.failed_with(CmdStatus::BadInputLength, 0), "{r:?}");
    // Output too short for the result: the result length, and nothing is created.
    let r = h.command_with_output(0, op::CREATE_EQ, &eq_in(ring, 2, 0), 7);
    assert!(r.failed_with(CmdStatus::BadOutputLength, 8), "{r:?}");
    let eq = h.create_eq(0, 2, 0);
    assert_eq!(eq.id, 0, "the refused create took no number");
    // A CQ naming a missing EQ: the number named.
    let cq = CreateCqIn {
        addr: U64::new(ring),
        eqn: U32::new(7),
        log_size: 2,
        rsvd: [0; 3],
    };
    let r = h.command(0, op::CREATE_CQ, cq.as_bytes());
    assert!(r.failed_with(CmdStatus::BadResource, 7), "{r:?}");
    // Another function's EQ is as good as missing.
    let r = h.command(
        1,
        op::CREATE_CQ,
        CreateCqIn {
            eqn: U32::new(0),
            ..cq
        }
        .as_bytes(),
    );
    assert!(r.failed_with(CmdStatus::BadResource, 0), "{r:?}");
    // A referenced EQ: the reference count.
    let cq = h.create_cq(0, eq.id, 2);
    let r = h.command(0, op::DESTROY_EQ, ObjectIn::new(eq.id).as_bytes());
    assert!(r.failed_with(CmdStatus::ResourceBusy, 1), "{r:?}");
    // A device limit.
    h.create_eq(0, 2, 0);
    let r = h.command(0, op::CREATE_EQ, &eq_in(ring, 2, 0));
    assert!(r.failed_with(CmdStatus::ExceedLimit, 0), "{r:?}");
    // A queue not in the error state cannot be recovered: its state.
    let sq = h.create_sq(0, cq.id, 2, None);
    let modify = ModifyQueueIn {
        id: U32::new(sq.id),
        new_state: QueueState::Ready as u8,
        rsvd: [0; 3],
    };
    let r = h.command(0, op::MODIFY_SQ, modify.as_bytes());
    assert!(
        r.failed_with(CmdStatus::BadState, QueueState::Ready as u32),
        "{r:?}"
    );
    // eSwitch tables and other vPorts' counters are the manager's.
    let r = h.command(
        1,
        op::CREATE_FLOW_TABLE,
        &table_in(TABLE_KIND_FDB, 0, MISS_DEFAULT, 0),
    );
    assert!(
        r.failed_with(CmdStatus::NotPermitted, not_permitted::FDB_NOT_MANAGER),
        "{r:?}"
    );
    let q = QueryVportIn {
        vport: U16::new(0),
        rsvd: [0; 6],
    };
    let r = h.command(1, op::QUERY_VPORT, q.as_bytes());
    assert!(r.failed_with(CmdStatus::NotPermitted, 0), "{r:?}");
    assert!(h.command(0, op::QUERY_VPORT, q.as_bytes()).ok());
}

#[test]
fn undeliverable_commands_change_nothing() {
    let h = host();
    let (cin, cout) = (h.alloc(4096), h.alloc(4096));
    let hdr = CmdInHeader {
        opcode: U16::new(op::CREATE_EQ),
        ..Default::default()
    };
    h.write_obj(cin, &hdr);
    h.write(cin + 16, &eq_in(h.alloc(4096), 2, 0));
    let st = h.submit(0, cin, 15, cout, 64);
    assert_eq!(st.delivery, CmdDelivery::BadLength as u8);
    let st = h.submit(0, cin, 64, cout, CMD_MAX_LEN + 1);
    assert_eq!(st.delivery, CmdDelivery::BadLength as u8);
    let st = h.submit(0, MOCK_IOVA - 4096, 64, cout, 64);
    assert_eq!(st.delivery, CmdDelivery::DmaError as u8);
    let st = h.submit(0, cin, 64, MOCK_IOVA + (4 << 20) - 32, 64);
    assert_eq!(st.delivery, CmdDelivery::DmaError as u8);
    assert!(st.done);
    // Nothing was created by the refused deliveries.
    let st = h.submit(0, cin, 32, cout, 32);
    assert_eq!(st.delivery, CmdDelivery::Ok as u8);
    let out: CmdOutHeader = h.read_obj(cout);
    assert_eq!(out.status, CmdStatus::Ok as u8);
    let id = u32::from_le_bytes(h.read_obj::<[u8; 4]>(cout + 16));
    assert_eq!(id, 0);
    assert!(h.guard_intact());
}

#[test]
fn frames_cross_byte_exact_with_checksums_inserted_and_validated() {
    let h = host();
    let (mut a, mut b) = ports(&h);
    for len in [60usize, 61, 128, 1514, 2048] {
        let f = frame(&h, 0, 1, len);
        a.send(&h, &f, CS_L3 | CS_L4);
        h.run(100);
        let (cqe, got) = b.receive(&h).expect("a frame");
        assert_eq!(cqe.opcode(), CQE_RESP_SEND);
        assert_eq!(cqe.byte_count.get() as usize, len);
        assert_eq!(got.len(), len);
        // The NIC filled both checksums; an independent parser agrees.
        let p = etherparse::SlicedPacket::from_ethernet(&got).expect("parses");
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("IPv4")
        };
        let hdr = ip.header().to_header();
        assert_eq!(hdr.header_checksum, hdr.calc_header_checksum());
        let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else {
            panic!("UDP")
        };
        let want = u.to_header().calc_checksum_ipv4(&hdr, u.payload()).unwrap();
        assert_eq!(u.checksum(), want);
        use cqe_csum::*;
        assert_eq!(cqe.csum, L3_PRESENT | L3_OK | L4_PRESENT | L4_OK | UDP);
        // Everything but the checksums is what was sent.
        let mut sent = f.clone();
        sent[24..26].copy_from_slice(&got[24..26]);
        sent[40..42].copy_from_slice(&got[40..42]);
        assert_eq!(got, sent);
        let tx = a.tx_cq.poll_cqe(&h).expect("send completion");
        assert_eq!((tx.opcode(), tx.byte_count.get() as usize), (CQE_REQ, len));
        a.tx_cq.update_ci(&h, 0, db::CQ_BASE);
    }
    assert!(h.guard_intact());
}

#[test]
fn send_wqes_are_fetched_in_bursts_and_completions_counted_one_write_each() {
    // Receive WQEs fetched on arrival, so the reads counted are the send path's.
    let h = MockHost::nic(
        NicConfig {
            rx_prefetch_depth: 0,
            ..Default::default()
        },
        4 << 20,
    );
    let (mut a, _b) = ports(&h);
    let fa = h.nic_fid(0);
    let f = frame(&h, 0, 1, 60);
    // Posts `n` sends with one doorbell run and returns the requester's read operations and
    // bytes read while the NIC executes them.
    let mut round = |n: usize| {
        for _ in 0..n {
            a.send(&h, &f, 0);
        }
        let before = (h.fabric.read_operations(fa), h.fabric.stats(fa));
        h.run(1000);
        let link = h.fabric.stats(fa).since(&before.1);
        let reads = h.fabric.read_operations(fa) - before.0;
        // The completions go out as a run, but count as the NIC's separate 64-byte writes
        // (the other TLPs going up are the read requests, one per read, within MRRS).
        let oh = FabricConfig::default().tlp_overhead as u64;
        let tlps = n as u64 + reads;
        assert_eq!(
            (link.up_tlps, link.up_payload_bytes, link.up_header_bytes),
            (tlps, n as u64 * 64, tlps * oh),
            "one posted write per CQE"
        );
        for k in 0..n {
            let c = a.tx_cq.poll_cqe(&h).expect("send completion");
            assert_eq!((c.opcode(), c.syndrome), (CQE_REQ, 0));
            assert_eq!(c.byte_count.get(), 60, "completion {k}");
        }
        a.tx_cq.update_ci(&h, 0, db::CQ_BASE);
        (reads, link.down_payload_bytes)
    };
    let data = (60 - 14) as u64;
    // 60 one-block WQEs on a 64-block ring: 7 fetches of 8 blocks and one of 4, then each
    // frame's gather.
    assert_eq!(round(60), (8 + 60, 60 * (64 + data)));
    // 12 more from block 60: 4 blocks to the ring's end, then 8 from its start.
    assert_eq!(round(12), (2 + 12, 12 * (64 + data)));
    assert!(h.guard_intact());
}

/// Function 1's receive root: a table of nine rules (enough for the flow cache to serve it)
/// that tags frames to UDP port 2000 with `tag`, drops seven other ports and delivers the rest
/// untagged to `rq`. Returns the tagging rule.
fn tag_port_2000(h: &MockHost, rq: u32, tag: u32) -> u32 {
    let made = |r: CmdReply| r.id().unwrap_or_else(|| panic!("{r:?}"));
    let table = made(h.command(
        1,
        op::CREATE_FLOW_TABLE,
        &table_in(TABLE_KIND_NIC_RX, 0, MISS_DROP, 0),
    ));
    let entry = |priority: u16, dst_port: Option<u16>, actions: u32, flow_tag: u32| {
        let (mut mask, mut value) = (FlowMatch::default(), FlowMatch::default());
        if let Some(p) = dst_port {
            mask.dst_port = [0xff; 2];
            value.dst_port = p.to_be_bytes();
        }
        let e = CreateFlowEntryIn {
            priority: U16::new(priority),
            mask,
            value,
            dest: U32::new(rq),
            flow_tag: U32::new(flow_tag),
            ..rule(table, actions)
        };
        made(h.command(1, op::CREATE_FLOW_ENTRY, e.as_bytes()))
    };
    let tagged = entry(0, Some(2000), action::FWD_RQ | action::SET_FLOW_TAG, tag);
    for p in 0..7 {
        entry(1, Some(3000 + p), action::DROP, 0);
    }
    entry(2, None, action::FWD_RQ, 0);
    let root = SetRootIn {
        kind: TABLE_KIND_NIC_RX,
        rsvd: [0; 3],
        table: U32::new(table),
    };
    assert!(h.command(1, op::SET_FLOW_TABLE_ROOT, root.as_bytes()).ok());
    tagged
}

#[test]
fn the_flow_cache_serves_repeated_frames_and_forgets_a_destroyed_rule() {
    let h = host();
    let (mut a, mut b) = ports(&h);
    let tagged = tag_port_2000(&h, b.rq.id, 77);
    let f = frame(&h, 0, 1, 100);
    let mut deliver = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| {
                a.send(&h, &f, 0);
                h.run(100);
                let (cqe, got) = b.receive(&h).expect("delivered");
                assert_eq!(got, f);
                cqe.flow_tag.get()
            })
            .collect()
    };
    let before = h.nic.flow_cache_counters();
    assert_eq!(deliver(4), vec![77; 4]);
    let c = h.nic.flow_cache_counters();
    assert_eq!((c.misses - before.misses, c.hits - before.hits), (1, 3));
    // The command that destroys the tagged rule invalidates the cache: the next frame walks the
    // table again and reaches the catch-all rule.
    let destroy = ObjectIn::new(tagged);
    assert!(h
        .command(1, op::DESTROY_FLOW_ENTRY, destroy.as_bytes())
        .ok());
    assert_eq!(deliver(2), vec![0; 2]);
    let query = h.command(1, op::QUERY_FLOW_ENTRY, ObjectIn::new(tagged).as_bytes());
    assert!(!query.ok(), "the rule is gone");
}

/// A conventional reset keeps the flow cache's slots but empties it: its counters start again
/// from zero, and the first frame after the reset walks the new rules (a walk remembered from
/// before would name entries that no longer exist) — the cache behaves as a new card's.
#[test]
fn a_reset_empties_the_flow_cache_it_keeps() {
    let mut h = host();
    let mut seen = Vec::new();
    for tag in [77, 78] {
        if tag == 78 {
            h.recycle();
            assert_eq!(h.nic.flow_cache_counters(), Default::default());
        }
        let (mut a, mut b) = ports(&h);
        tag_port_2000(&h, b.rq.id, tag);
        let before = h.nic.flow_cache_counters();
        let f = frame(&h, 0, 1, 100);
        for _ in 0..3 {
            a.send(&h, &f, 0);
            h.run(100);
            let (cqe, got) = b.receive(&h).expect("delivered");
            assert_eq!((got, cqe.flow_tag.get()), (f.clone(), tag));
        }
        let c = h.nic.flow_cache_counters();
        seen.push((c.misses - before.misses, c.hits - before.hits, before));
    }
    assert_eq!((seen[0].0, seen[0].1), (1, 2), "one walk, then hits");
    assert_eq!(
        seen[1],
        (1, 2, Default::default()),
        "the same after the reset, counted from zero"
    );
}

#[test]
fn completion_rings_wrap_with_owner_bits_and_overflow_is_counted() {
    let h = host();
    let mut a = h.open_port(0);
    // A receiving port whose receive CQ holds 4 entries.
    let eq = h.create_eq(1, 4, 1);
    let mut cq = h.create_cq(1, eq.id, 2);
    let mut rq = h.create_rq(1, cq.id, 4, None);
    let bufs: Vec<u64> = (0..16).map(|_| h.alloc(2048)).collect();
    for &x in &bufs {
        rq.post(&h, x, 2048);
    }
    rq.ring(&h, 1);
    h.steer_all_to(1, rq.id);
    // Ten frames, consumed as they come: the ring wraps twice and the owner bit flips.
    let mut seen = Vec::new();
    for i in 0..10u32 {
        let f = frame(&h, 0, 1, 64 + i as usize);
        a.send(&h, &f, 0);
        h.run(100);
        let c = cq.poll_cqe(&h).expect("CQE");
        assert_eq!(c.owner(), ((i >> 2) & 1) as u8, "owner of CQE {i}");
        seen.push(c.byte_count.get());
        cq.update_ci(&h, 1, db::CQ_BASE);
        while a.tx_cq.poll_cqe(&h).is_some() {}
        a.tx_cq.update_ci(&h, 0, db::CQ_BASE);
    }
    assert_eq!(seen, (64..74).collect::<Vec<u32>>());
    // Not consumed any more: four fill the ring, the rest are counted drops, and the CQ's first
    // overflow is an asynchronous event.
    for _ in 0..6 {
        a.send(&h, &frame(&h, 0, 1, 64), 0);
        h.run(100);
        while a.tx_cq.poll_cqe(&h).is_some() {}
        a.tx_cq.update_ci(&h, 0, db::CQ_BASE);
    }
    let q = h.command(1, op::QUERY_CQ, ObjectIn::new(cq.id).as_bytes());
    let st = QueryCqOut::read_from_bytes(&q.out).unwrap();
    assert_eq!((st.producer_counter.get(), st.overflows.get()), (14, 2));
    let mut eq = eq;
    let events: Vec<(u8, u32)> = std::iter::from_fn(|| eq.poll_eqe(&h))
        .map(|e| (e.event_type, e.data.get()))
        .collect();
    assert_eq!(events, vec![(EQE_CQ_ERROR, cq.id)]);
}

#[test]
fn an_armed_cq_raises_an_event_and_the_armed_eq_an_interrupt_once() {
    let h = host();
    let (mut a, mut b) = ports(&h);
    h.take_interrupts(1, 0);
    b.rx_cq.arm(&h, 1, db::CQ_BASE);
    h.run(10);
    for _ in 0..3 {
        a.send(&h, &frame(&h, 0, 1, 100), 0);
    }
    h.run(100);
    assert_eq!(h.take_interrupts(1, 0), 1, "one interrupt for an armed EQ");
    let e = b.eq.poll_eqe(&h).expect("completion event");
    assert_eq!((e.event_type, e.data.get()), (EQE_COMPLETION, b.rx_cq.id));
    assert!(b.eq.poll_eqe(&h).is_none(), "one event for one arm");
    for _ in 0..3 {
        b.receive(&h).expect("frame");
    }
    // Re-arming the EQ behind its producer interrupts at once (no event may be missed).
    b.rx_cq.arm(&h, 1, db::CQ_BASE);
    a.send(&h, &frame(&h, 0, 1, 100), 0);
    h.run(100);
    assert_eq!(h.take_interrupts(1, 0), 0, "the EQ is not armed");
    b.eq.arm(&h, 1, db::EQ_BASE);
    h.run(10);
    assert_eq!(h.take_interrupts(1, 0), 1);
}

/// Posts `wqe` raw on port `p`'s SQ (ringing `pi` if given, else the producer counter) and
/// returns the error CQE, checking the SQ is in the error state with an event.
fn send_error(h: &MockHost, p: &mut MockPort, wqe: &[u8], pi: Option<u32>) -> Cqe {
    p.sq.write_raw(h, wqe);
    let value = pi.unwrap_or(p.sq.pi & db::PI_MASK);
    h.doorbell(p.function, db::slot(db::SQ_BASE, p.sq.id), value);
    h.run(100);
    let c = p.tx_cq.poll_cqe(h).expect("error CQE");
    assert_eq!(c.opcode(), CQE_REQ_ERR);
    let q = h.command(p.function, op::QUERY_SQ, ObjectIn::new(p.sq.id).as_bytes());
    assert_eq!(q.out[4], QueueState::Error as u8);
    let e = p.eq.poll_eqe(h).expect("queue error event");
    assert_eq!(
        (e.event_type, e.subtype, e.data.get()),
        (EQE_QUEUE_ERROR, QUEUE_ERROR_SQ, p.sq.id)
    );
    c
}

#[test]
fn every_send_error_syndrome() {
    let h = host();
    let mut wqe = [0u8; 64];
    let good = |buf: &mut [u8; 64], inline: &[u8], gather: &[(u64, u32)]| {
        let w = SendWqe {
            inline_header: inline,
            gather,
            ..Default::default()
        };
        w.encode(0, 0, buf).unwrap();
    };
    let hdr = frame(&h, 0, 1, 64);
    type Build<'a> = Box<dyn Fn(&mut [u8; 64]) + 'a>;
    let cases: Vec<(&str, Build, u8)> = vec![
        (
            "gather outside mapped memory",
            Box::new(move |w| good(w, &hdr[..14], &[(MOCK_IOVA - 4096, 50)])),
            syndrome::DMA_ERROR,
        ),
        (
            "unknown opcode",
            Box::new(|w| w[0] = 0x55),
            syndrome::BAD_WQE,
        ),
        ("zero segments", Box::new(|w| w[4] = 0), syndrome::BAD_WQE),
        (
            "foreign memory key",
            Box::new(move |w| {
                good(w, &[], &[(MOCK_IOVA, 64)]);
                w[32 + 4] = 7;
            }),
            syndrome::BAD_WQE,
        ),
        (
            "frame shorter than a header",
            Box::new(|w| good(w, &[0; 10], &[])),
            syndrome::BAD_LENGTH,
        ),
        (
            "frame longer than the MTU",
            Box::new(|w| good(w, &[], &[(MOCK_IOVA, 9300)])),
            syndrome::BAD_LENGTH,
        ),
    ];
    for (what, build, syn) in &cases {
        let mut p = h.open_port(0);
        let _ = h.open_port(1);
        wqe.fill(0);
        build(&mut wqe);
        let c = send_error(&h, &mut p, &wqe, None);
        assert_eq!(c.syndrome, *syn, "{what}");
        assert_eq!(
            c.wqe_counter.get(),
            0,
            "{what}: the failing WQE by the device's counter"
        );
        h.reset_nic(0);
        h.reset_nic(1);
    }
    // A control segment claiming 255 segments (16 blocks at most exist) with 64 blocks posted:
    // refused before any block past the WQE's largest size is read.
    let mut p = h.open_port(0);
    good(&mut wqe, &frame(&h, 0, 1, 60)[..14], &[]);
    wqe[4] = 0xff;
    assert!(1u32 << p.sq.log_size >= 64);
    let c = send_error(&h, &mut p, &wqe, Some(64));
    assert_eq!(c.syndrome, syndrome::BAD_WQE);
    h.reset_nic(0);
    // A doorbell announcing more WQEs than the ring holds.
    let mut p = h.open_port(0);
    good(&mut wqe, &frame(&h, 0, 1, 60)[..14], &[]);
    let ring = 1u32 << p.sq.log_size;
    let c = send_error(&h, &mut p, &wqe, Some(ring + 1));
    assert_eq!(c.syndrome, syndrome::DOORBELL_OVERFLOW);
    assert!(h.guard_intact());
}

#[test]
fn receive_errors_and_drops() {
    let h = host();
    let mut a = h.open_port(0);
    // A striding WQE too small for its strides puts the RQ in error.
    let eq = h.create_eq(1, 4, 0);
    let mut cq = h.create_cq(1, eq.id, 4);
    let mut rq = h.create_rq(1, cq.id, 2, Some((6, 3)));
    rq.post(&h, h.alloc(4096), 64 * 8 - 1);
    rq.ring(&h, 1);
    h.steer_all_to(1, rq.id);
    a.send(&h, &frame(&h, 0, 1, 60), 0);
    h.run(100);
    let c = cq.poll_cqe(&h).expect("error CQE");
    assert_eq!(
        (c.opcode(), c.syndrome),
        (CQE_RESP_ERR, syndrome::BAD_RECV_WQE)
    );
    let mut eq = eq;
    let e = eq.poll_eqe(&h).expect("event");
    assert_eq!(
        (e.event_type, e.subtype, e.data.get()),
        (EQE_QUEUE_ERROR, QUEUE_ERROR_RQ, rq.id)
    );
    // In error, the RQ takes nothing: a counted out-of-buffer drop at the vPort.
    a.send(&h, &frame(&h, 0, 1, 60), 0);
    h.run(100);
    assert!(cq.poll_cqe(&h).is_none());
    let q = QueryVportIn {
        vport: U16::new(1),
        rsvd: [0; 6],
    };
    let v = h.command(1, op::QUERY_VPORT, q.as_bytes());
    let v = QueryVportOut::read_from_bytes(&v.out).unwrap();
    assert_eq!((v.rx_packets.get(), v.rx_out_of_buffer.get()), (0, 2));
    // A receive buffer outside mapped memory: DMA_ERROR, and nothing written anywhere.
    h.reset_nic(1);
    let eq = h.create_eq(1, 4, 0);
    let mut cq = h.create_cq(1, eq.id, 4);
    let mut rq = h.create_rq(1, cq.id, 2, None);
    rq.post(&h, MOCK_IOVA + h.mapped_len() as u64 - 16, 2048);
    rq.ring(&h, 1);
    h.steer_all_to(1, rq.id);
    a.send(&h, &frame(&h, 0, 1, 60), 0);
    h.run(100);
    let c = cq.poll_cqe(&h).expect("error CQE");
    assert_eq!(
        (c.opcode(), c.syndrome),
        (CQE_RESP_ERR, syndrome::DMA_ERROR)
    );
    assert!(h.guard_intact());
}

#[test]
fn a_function_reset_destroys_its_objects_and_the_port_comes_back() {
    let h = host();
    let (mut a, _) = ports(&h);
    h.reset_nic(1);
    // Function 1 lost its receive table: frames for it are unsteered.
    a.send(&h, &frame(&h, 0, 1, 64), 0);
    h.run(100);
    let mut b = h.open_port(1);
    assert_eq!(b.eq.id, 1, "numbers of destroyed objects are reused");
    let f = frame(&h, 0, 1, 64);
    a.send(&h, &f, 0);
    h.run(100);
    assert_eq!(b.receive(&h).expect("frame").1, f);
}

/// The mock's RDMA set-up end to end: two QPs on the two functions, connected, a SEND and an
/// RDMA WRITE between them (their frames cross the eSwitch), CQEs as documented.
#[test]
fn rdma_qps_through_the_driver_mock() {
    let h = host();
    let mut a = h.create_rdma_qp(0, [10, 1, 0, 1], 1 << 16);
    let mut b = h.create_rdma_qp(1, [10, 1, 0, 2], 1 << 16);
    h.connect_qp(&a, b.qpn, b.gid, h.nic_mac(1), 7);
    h.connect_qp(&b, a.qpn, a.gid, h.nic_mac(0), 7);
    let msg: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    h.write(a.buf, &msg);
    b.post_recv(&h, &[b.sge(0, 4096)]);
    let s = [a.sge(0, msg.len() as u32)];
    a.post_send(&h, &signalled(WQE_OP_SEND, None, &s));
    a.post_send(
        &h,
        &signalled(WQE_OP_RDMA_WRITE, Some((b.buf + 8192, b.key)), &s),
    );
    h.run(1000);
    let rx = b.cq.poll_cqe(&h).expect("receive CQE");
    assert_eq!(
        (
            rx.opcode(),
            rx.byte_count.get(),
            rx.qn.get(),
            rx.flags & cqe_flags::QP
        ),
        (CQE_RESP_SEND, 3000, b.qpn, cqe_flags::QP)
    );
    let mut got = vec![0u8; 3000];
    h.read(b.buf, &mut got);
    assert_eq!(got, msg);
    h.read(b.buf + 8192, &mut got);
    assert_eq!(got, msg);
    for op in [WQE_OP_SEND, WQE_OP_RDMA_WRITE] {
        let c = a.cq.poll_cqe(&h).expect("send CQE");
        assert_eq!((c.opcode(), c.syndrome, c.wqe_opcode), (CQE_REQ, 0, op));
    }
    assert!(h.guard_intact());
}

/// A requester keeps the WQE it executes on chip between passes, named by its QP and counter; a
/// QP taken back to RESET starts its send queue again at WQE 0, and the WQE it runs there is
/// the one the driver posted after the reset, not the one held from before it under the same
/// name (every command forgets the held WQE).
#[test]
fn a_qp_reset_forgets_the_wqe_it_held() {
    let h = host();
    let mut a = h.create_rdma_qp(0, [10, 1, 0, 1], 1 << 16);
    let b = h.create_rdma_qp(1, [10, 1, 0, 2], 1 << 16);
    let first: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let second: Vec<u8> = (0..1000u32).map(|i| (i * 3 + 1) as u8).collect();
    h.write(a.buf, &first);
    h.write(a.buf + 4096, &second);
    for (round, (from, to, data)) in [(0, 8192, &first), (4096, 12288, &second)]
        .into_iter()
        .enumerate()
    {
        if round > 0 {
            let reset = QpAttr {
                qp_state: QpState::Reset as u8,
                ..Default::default()
            };
            for qp in [&a, &b] {
                assert!(h
                    .modify_qp(qp.function, qp.qpn, qp_attr::STATE, &reset)
                    .ok());
            }
            a.sq.pi = 0;
        }
        h.connect_qp(&a, b.qpn, b.gid, h.nic_mac(1), 7);
        h.connect_qp(&b, a.qpn, a.gid, h.nic_mac(0), 7);
        let gather = [a.sge(from, 1000)];
        let write = signalled(WQE_OP_RDMA_WRITE, Some((b.buf + to, b.key)), &gather);
        a.post_send(&h, &write);
        h.run(1000);
        let c = a.cq.poll_cqe(&h).expect("send CQE");
        assert_eq!(
            (c.syndrome, c.wqe_opcode),
            (0, WQE_OP_RDMA_WRITE),
            "round {round}"
        );
        let mut got = vec![0u8; 1000];
        h.read(b.buf + to, &mut got);
        assert_eq!(
            &got, data,
            "round {round}: the WQE posted in this round ran"
        );
    }
}

/// Memory keys are recycled with a fresh variant byte, which is never 0: over 600 creations
/// and destructions of the same region slot no key equals the receive WQE's end marker
/// (`mkey(1, 0)`), which would end a receive WQE at a scatter entry naming that key.
#[test]
fn no_memory_key_is_the_receive_end_marker() {
    let h = host();
    let pd = h
        .command(0, op::CREATE_PD, ObjectIn::new(0).as_bytes())
        .id()
        .unwrap();
    let buf = h.alloc(4096);
    let mtt = h.alloc(8);
    h.write(mtt, &buf.to_le_bytes());
    let mut keys = std::collections::HashSet::new();
    for _ in 0..600 {
        let mr = CreateMrIn {
            pd: U32::new(pd),
            access: U32::new(access::LOCAL_WRITE),
            start: U64::new(buf),
            length: U64::new(4096),
            mtt_addr: U64::new(mtt),
            log_page_size: 12,
            flags: 0,
            rsvd: [0; 2],
            peer_key: U32::new(0),
        };
        let key = h.command(0, op::CREATE_MR, mr.as_bytes()).id().unwrap();
        assert_eq!(mkey_index(key), 1, "the same slot each time");
        assert_ne!(key, RECV_SGE_END);
        keys.insert(key);
        assert!(h
            .command(0, op::DESTROY_MR, ObjectIn::new(key).as_bytes())
            .ok());
    }
    assert_eq!(keys.len(), 255, "every non-zero variant in turn");
}

/// The solicited-event bit a requester sets on the last packet of a SEND or a WRITE with
/// immediate reaches the responder's receive CQE (IBA 9.2.1: SE), and is absent otherwise.
#[test]
fn the_solicited_event_bit_reaches_the_receive_completion() {
    let h = host();
    let mut a = h.create_rdma_qp(0, [10, 1, 0, 1], 1 << 14);
    let mut b = h.create_rdma_qp(1, [10, 1, 0, 2], 1 << 14);
    h.connect_qp(&a, b.qpn, b.gid, h.nic_mac(1), 3);
    h.connect_qp(&b, a.qpn, a.gid, h.nic_mac(0), 3);
    let s = [a.sge(0, 2500)];
    let cases = [
        (WQE_OP_SEND, true, CQE_RESP_SEND),
        (WQE_OP_SEND, false, CQE_RESP_SEND),
        (WQE_OP_RDMA_WRITE_IMM, true, CQE_RESP_WRITE_IMM),
        (WQE_OP_RDMA_WRITE_IMM, false, CQE_RESP_WRITE_IMM),
    ];
    for (opcode, solicited, _) in cases {
        b.post_recv(&h, &[b.sge(0, 4096)]);
        a.post_send(
            &h,
            &RdmaWqe {
                opcode,
                signal: true,
                solicited,
                fence: false,
                imm: 0x1234,
                remote: Some((b.buf + 8192, b.key)),
                atomic: None,
                data: WqeData::Gather(&s),
            },
        );
    }
    h.run(1000);
    for (_, solicited, want) in cases {
        let c = b.cq.poll_cqe(&h).expect("receive CQE");
        assert_eq!(
            (c.opcode(), c.syndrome, c.flags & cqe_flags::SOLICITED != 0),
            (want, 0, solicited)
        );
    }
}

/// Two QPs' receives from one SRQ: a QP attached to it takes the SRQ's WQEs in order (CQE flag
/// SRQ, counter = the SRQ's), the armed limit event fires once when fewer WQEs than the limit
/// remain (IBA 10.2.9.6) and the SRQ disarms; armed on an EQ that is destroyed before it fires
/// (its number now another function's EQ), the event goes nowhere.
#[test]
fn a_shared_receive_queue_feeds_a_qp_and_raises_its_limit_event_once() {
    let h = host();
    let mut a = h.create_rdma_qp(0, [10, 1, 0, 1], 1 << 14);
    let mut b = h.create_rdma_qp(1, [10, 1, 0, 2], 1 << 14);
    let mut srq = h.create_srq(1, b.pd, 4);
    let c = h.create_srq_qp(&b, &srq);
    h.connect_qp(&a, c, b.gid, h.nic_mac(1), 1);
    h.connect_qpn(1, c, a.qpn, a.gid, h.nic_mac(0), 1);
    for k in 0..4 {
        srq.post(&h, &[b.sge(k * 1024, 1024)]);
    }
    assert!(h.arm_srq(&srq, 2, b.eq.id).ok());
    let send = |a: &mut MockQp, k: u64| {
        h.write(a.buf + k * 100, &[k as u8 + 1; 100]);
        let s = [a.sge(k * 100, 100)];
        a.post_send(&h, &signalled(WQE_OP_SEND, None, &s));
    };
    for k in 0..3 {
        send(&mut a, k);
    }
    h.run(1000);
    for k in 0..3u16 {
        let rx = b.cq.poll_cqe(&h).expect("receive CQE");
        assert_eq!(
            (
                rx.opcode(),
                rx.qn.get(),
                rx.wqe_counter.get(),
                rx.flags & cqe_flags::SRQ
            ),
            (CQE_RESP_SEND, c, k, cqe_flags::SRQ)
        );
        let mut got = [0u8; 100];
        h.read(b.buf + u64::from(k) * 1024, &mut got);
        assert_eq!(got, [k as u8 + 1; 100], "in the SRQ's WQE {k}");
    }
    let limit_events = |eq: &mut MockRing| {
        std::iter::from_fn(|| eq.poll_eqe(&h))
            .filter(|e| e.event_type == EQE_SRQ_LIMIT)
            .map(|e| e.data.get())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        limit_events(&mut b.eq),
        [srq.srqn],
        "once, when one of four was left"
    );
    let q = h.command_with_output(1, op::QUERY_SRQ, ObjectIn::new(srq.srqn).as_bytes(), 16);
    assert_eq!(
        QuerySrqOut::read_from_bytes(&q.out[..16])
            .unwrap()
            .limit
            .get(),
        0,
        "disarmed"
    );

    // Armed on an EQ that goes away; its number is reused by function 0.
    let gone = h.create_eq(1, 4, 0);
    assert!(h.arm_srq(&srq, 3, gone.id).ok());
    assert!(h
        .command(1, op::DESTROY_EQ, ObjectIn::new(gone.id).as_bytes())
        .ok());
    let mut other = h.create_eq(0, 4, 0);
    assert_eq!(other.id, gone.id, "the number is reused");
    for k in 4..6 {
        srq.post(&h, &[b.sge(k * 1024, 1024)]);
    }
    send(&mut a, 3);
    h.run(1000);
    assert!(b.cq.poll_cqe(&h).is_some(), "the SEND still lands");
    assert_eq!(
        limit_events(&mut other),
        [0u32; 0],
        "not into another function's EQ"
    );
    assert_eq!(limit_events(&mut b.eq), [0u32; 0]);

    // In ERR, once its work is flushed, the QP on the SRQ reports its last WQE, once.
    let to_err = QpAttr {
        qp_state: QpState::Err as u8,
        ..Default::default()
    };
    assert!(h.modify_qp(1, c, qp_attr::STATE, &to_err).ok());
    h.run(100);
    h.run(100);
    let events: Vec<(u8, u8, u32)> = std::iter::from_fn(|| b.eq.poll_eqe(&h))
        .map(|e| (e.event_type, e.subtype, e.data.get()))
        .collect();
    assert_eq!(
        events,
        [(EQE_QP_EVENT, qp_event::LAST_WQE_REACHED, c)],
        "one last-WQE event"
    );
}

/// CREATE_QP with QP_FLAG_MULTI_PACKET_RQ names a striding RQ of the same function: a regular
/// RQ is a bad parameter, no RQ or another function's a bad resource; the RQ it names cannot be
/// destroyed while the QP exists, and can once the QP is gone.
#[test]
fn a_multi_packet_qp_needs_a_striding_rq_of_its_own_function_and_holds_it() {
    let h = host();
    let qp = h.create_rdma_qp(0, [10, 0, 0, 1], 4096);
    let striding = h.create_rq(0, qp.cq.id, 3, Some((8, 4)));
    let regular = h.create_rq(0, qp.cq.id, 3, None);
    let eq1 = h.create_eq(1, 4, 0);
    let cq1 = h.create_cq(1, eq1.id, 4);
    let foreign = h.create_rq(1, cq1.id, 3, Some((8, 4)));
    let sq = h.alloc(WQEBB << 4);
    let create = |rqn: u32| {
        h.command(
            0,
            op::CREATE_QP,
            CreateQpIn {
                pd: U32::new(qp.pd),
                send_cqn: U32::new(qp.cq.id),
                recv_cqn: U32::new(qp.cq.id),
                srqn: U32::new(rqn),
                sq_addr: U64::new(sq),
                rq_addr: U64::new(0),
                log_sq_size: 4,
                log_rq_size: 0,
                log_rq_stride: MIN_LOG_RQ_STRIDE,
                flags: QP_FLAG_MULTI_PACKET_RQ,
                rsvd: [0; 4],
            }
            .as_bytes(),
        )
    };
    assert!(create(regular.id).failed_with(CmdStatus::BadParam, bad_param::QP_FLAGS));
    assert!(create(NO_SRQ).failed_with(CmdStatus::BadResource, NO_SRQ));
    assert!(create(foreign.id).failed_with(CmdStatus::BadResource, foreign.id));
    let r = create(striding.id);
    let mpqp = r.id().expect("a QP on the striding RQ");
    let destroy_rq = || h.command(0, op::DESTROY_RQ, ObjectIn::new(striding.id).as_bytes());
    assert!(
        destroy_rq().failed_with(CmdStatus::ResourceBusy, 1),
        "one reference"
    );
    assert!(h
        .command(0, op::DESTROY_QP, ObjectIn::new(mpqp).as_bytes())
        .ok());
    assert!(destroy_rq().ok());
}

/// Two RC QPs on functions 0 and 1 of `h` (16 KiB buffers), connected to each other with both
/// sequences starting at `psn`.
fn connected_rdma_pair(h: &MockHost, psn: u32) -> (MockQp, MockQp) {
    let a = h.create_rdma_qp(0, [10, 1, 0, 1], 1 << 14);
    let b = h.create_rdma_qp(1, [10, 1, 0, 2], 1 << 14);
    h.connect_qp(&a, b.qpn, b.gid, h.nic_mac(1), psn);
    h.connect_qp(&b, a.qpn, a.gid, h.nic_mac(0), psn);
    (a, b)
}

/// Posts a signalled 8 KiB RDMA WRITE from the start of `a`'s buffer to `to`.
fn post_write_8k(h: &MockHost, a: &mut MockQp, to: u64, rkey: u32) {
    let s = [a.sge(0, 8192)];
    a.post_send(h, &signalled(WQE_OP_RDMA_WRITE, Some((to, rkey)), &s));
}

/// QUERY_CAPS reports how many QP contexts the NIC keeps on chip, and QUERY_RDMA_COUNTERS how
/// many QPs hold a connection now, NIC-wide: what a StaR control plane adapting its connections
/// compares (`docs/nic-interface.md` §16.7). A QP counts from RTR until it leaves the connected
/// states.
#[test]
fn the_nic_reports_its_context_cache_and_the_connections_competing_for_it() {
    let h = MockHost::nic(
        NicConfig {
            qp_cache_entries: 7,
            ..Default::default()
        },
        4 << 20,
    );
    let n = size_of::<Caps>();
    let o = h.command_with_output(1, op::QUERY_CAPS, &[], n);
    let caps = Caps::read_from_bytes(&o.out[..n]).unwrap();
    assert_eq!(caps.qp_context_cache.get(), 7);
    let connected = |h: &MockHost| {
        let n = size_of::<RdmaCountersOut>();
        let o = h.command_with_output(1, op::QUERY_RDMA_COUNTERS, &[], n);
        let c = RdmaCountersOut::read_from_bytes(&o.out[..n]).unwrap();
        c.qp_contexts_connected.get()
    };
    assert_eq!(connected(&h), 0);
    let a = h.create_rdma_qp(0, [10, 1, 0, 1], 1 << 14);
    assert_eq!(connected(&h), 0, "a QP in INIT holds no connection");
    let b = h.create_rdma_qp(1, [10, 1, 0, 2], 1 << 14);
    h.connect_qp(&a, b.qpn, b.gid, h.nic_mac(1), 3);
    // Both functions' QPs count, whoever asks.
    assert_eq!(connected(&h), 1);
    h.connect_qp(&b, a.qpn, a.gid, h.nic_mac(0), 3);
    assert_eq!(connected(&h), 2);
    let to_err = QpAttr {
        qp_state: QpState::Err as u8,
        ..Default::default()
    };
    assert!(h.modify_qp(0, a.qpn, qp_attr::STATE, &to_err).ok());
    assert_eq!(connected(&h), 1, "a QP in ERR holds none");
}

/// The memory-translation cache: an 8 KiB RDMA WRITE (8 packets at the 1 KiB MTU, both regions
/// page-aligned) translates one page per packet on each side — 2 pages each side miss and are
/// read from the MTT, the other 12 lookups hit — and the same WRITE again hits all 16. Without
/// a cache every lookup misses. A region deregistered and registered again over a changed MTT
/// is translated afresh: the data lands in the new pages, not the cached old ones.
#[test]
fn the_translation_cache_hits_misses_and_forgets_a_deregistered_region() {
    let write = |h: &MockHost, a: &mut MockQp, to: u64, rkey: u32| {
        post_write_8k(h, a, to, rkey);
        h.run(1000);
        let c = a.cq.poll_cqe(h).expect("the WRITE completed");
        assert_eq!((c.opcode(), c.syndrome), (CQE_REQ, 0));
    };
    let cache = |h: &MockHost| {
        let n = size_of::<RdmaCountersOut>();
        let o = h.command_with_output(0, op::QUERY_RDMA_COUNTERS, &[], n);
        let c = RdmaCountersOut::read_from_bytes(&o.out[..n]).unwrap();
        (c.mtt_cache_hits.get(), c.mtt_cache_misses.get())
    };
    let qp_cache = |h: &MockHost| {
        let n = size_of::<RdmaCountersOut>();
        let o = h.command_with_output(0, op::QUERY_RDMA_COUNTERS, &[], n);
        let c = RdmaCountersOut::read_from_bytes(&o.out[..n]).unwrap();
        (c.qp_cache_hits.get(), c.qp_cache_misses.get())
    };
    for (entries, first, second) in [(4096, (12, 4), (28, 4)), (0, (0, 16), (0, 32))] {
        let h = MockHost::nic(
            NicConfig {
                mtt_cache_entries: entries,
                ..Default::default()
            },
            4 << 20,
        );
        let (mut a, b) = connected_rdma_pair(&h, 7);
        let msg: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        h.write(a.buf, &msg);
        write(&h, &mut a, b.buf, b.key);
        assert_eq!(cache(&h), first, "{entries} entries: first WRITE");
        write(&h, &mut a, b.buf, b.key);
        assert_eq!(cache(&h), second, "{entries} entries: second WRITE");
        // Both QPs' contexts were fetched once and stayed on chip.
        let (hits, misses) = qp_cache(&h);
        assert_eq!(misses, 2);
        assert!(hits > 16, "{hits}");
        let mut got = vec![0u8; 8192];
        h.read(b.buf, &mut got);
        assert_eq!(got, msg);
    }
    // Deregister B's region, point its MTT at fresh pages, register it again: the cached
    // translations of the old region must not be used.
    let h = host();
    let (mut a, b) = connected_rdma_pair(&h, 7);
    write(&h, &mut a, b.buf, b.key);
    let n = size_of::<QueryMrOut>();
    let q = h.command_with_output(1, op::QUERY_MR, ObjectIn::new(b.key).as_bytes(), n);
    let mr = QueryMrOut::read_from_bytes(&q.out[..n]).unwrap();
    assert!(h
        .command(1, op::DESTROY_MR, ObjectIn::new(b.key).as_bytes())
        .ok());
    // Two fresh pages (page-aligned inside a larger allocation).
    let fresh = (h.alloc(3 * 4096) + 4095) & !0xfff;
    for i in 0..2u64 {
        h.write(mr.mtt_addr.get() + 8 * i, &(fresh + 4096 * i).to_le_bytes());
    }
    let r = h.command_with_output(
        1,
        op::CREATE_MR,
        CreateMrIn {
            pd: mr.pd,
            access: mr.access,
            start: mr.start,
            length: mr.length,
            mtt_addr: mr.mtt_addr,
            log_page_size: mr.log_page_size,
            flags: 0,
            rsvd: [0; 2],
            peer_key: U32::new(0),
        }
        .as_bytes(),
        size_of::<CreateOut>(),
    );
    let key = CreateOut::read_from_bytes(&r.out[..size_of::<CreateOut>()])
        .unwrap()
        .id
        .get();
    let msg: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 1) as u8).collect();
    h.write(a.buf, &msg);
    write(&h, &mut a, b.buf, key);
    let mut got = vec![0u8; 8192];
    h.read(fresh, &mut got);
    assert_eq!(got, msg, "the new pages got the data");
    assert!(h.guard_intact());
}

/// What a QP-context miss and a multi-packet WRITE cost on the PCIe link: a QP whose context is
/// not on chip reads `qp_context_bytes` from context memory (one read operation, its TLPs
/// counted), and the WQE a QP executes is fetched once, not once per packet — an 8 KiB WRITE
/// (8 packets at the 1 KiB MTU) with a one-block WQE and one gather entry reads that block once
/// and its 8 KiB of data per packet.
#[test]
fn a_context_miss_reads_context_memory_and_a_wqe_is_fetched_once() {
    let run = |qp_context_bytes: u32| {
        let h = MockHost::nic(
            NicConfig {
                qp_context_bytes,
                ..Default::default()
            },
            4 << 20,
        );
        let (mut a, b) = connected_rdma_pair(&h, 7);
        post_write_8k(&h, &mut a, b.buf, b.key);
        let (fa, fb) = (h.nic_fid(0), h.nic_fid(1));
        let before = (h.fabric.read_operations(fa), h.fabric.stats(fa));
        h.run(1000);
        let c = a.cq.poll_cqe(&h).expect("the WRITE completed");
        assert_eq!((c.opcode(), c.syndrome), (CQE_REQ, 0));
        let reads_a = h.fabric.read_operations(fa) - before.0;
        let bytes_a = h.fabric.stats(fa).since(&before.1).down_payload_bytes;
        (reads_a, bytes_a, h.fabric.read_operations(fb))
    };
    let (reads, bytes, _) = run(256);
    // A: its QP context (missed once), the WQE's block, 8 data reads of 1 KiB, and 2 MTT
    // entries (the buffer spans two pages).
    assert_eq!(reads, 1 + 1 + 8 + 2, "read operations of the requester");
    assert_eq!(
        bytes,
        256 + 64 + 8192 + 2 * 8,
        "bytes read by the requester"
    );
    let (_, bytes_512, _) = run(512);
    assert_eq!(
        bytes_512 - bytes,
        256,
        "the context read follows qp_context_bytes"
    );
}

/// An RC requester starts no further message while `rc_window` packets are unacknowledged (the
/// message under way still goes out whole), and a retransmission timeout sends those packets
/// again, from the oldest, and nothing else.
#[test]
fn the_requester_window_bounds_what_it_sends_and_sends_again() {
    use crate::wire::Wire;
    use fld_abi::wire::roce::{ipv4_gid, IbPacket};
    use fld_abi::wire::udp_offsets;
    let h = MockHost::nic(
        NicConfig {
            rc_window: 4,
            ..NicConfig::default()
        },
        4 << 20,
    );
    let (uplink, mut peer) = crate::wire::link(64);
    h.nic.set_uplink(Box::new(uplink));
    h.nic.set_clock(Some(0));
    let mut qp = h.create_rdma_qp(0, [10, 0, 0, 1], 1 << 16);
    // A peer that never answers; path MTU 1024, so a 3,000-byte SEND is three packets.
    h.connect_qp(
        &qp,
        0x999,
        ipv4_gid([10, 0, 0, 9]),
        [2, 0, 0, 0, 0, 9],
        0x10,
    );
    let s = [qp.sge(0, 3000)];
    for _ in 0..3 {
        qp.post_send(&h, &signalled(WQE_OP_SEND, None, &s));
    }
    let mut sent_psns = |h: &MockHost| {
        h.run(100);
        let mut buf = vec![0u8; 2048];
        let mut psns = Vec::new();
        while let Some(n) = peer.receive(&mut buf) {
            let o = udp_offsets(&buf[..n]).expect("a RoCE frame");
            let p = IbPacket::parse(&buf[o.payload()..o.ip_end]).expect("a RoCE packet");
            psns.push(p.headers.bth.psn);
        }
        psns
    };
    // Two messages: the second starts with 3 of the 4 packets outstanding; the third waits.
    assert_eq!(sent_psns(&h), (0x10..0x16).collect::<Vec<_>>());
    assert!(
        sent_psns(&h).is_empty(),
        "the third message waits for an ACK"
    );
    // The local ACK timeout (4.096 us << 10) expires: the same six packets again.
    h.nic.set_clock(Some(10_000_000));
    assert_eq!(sent_psns(&h), (0x10..0x16).collect::<Vec<_>>());
}

#[test]
fn the_mailbox_registers_read_back_and_a_function_reset_clears_them() {
    let h = host();
    let regs = [
        (reg::CMD_IN_ADDR_LO, 0x1111_2220),
        (reg::CMD_IN_ADDR_HI, 0x3333_4444),
        (reg::CMD_OUT_ADDR_LO, 0x5555_6660),
        (reg::CMD_OUT_ADDR_HI, 0x7777_8888),
        (reg::CMD_IN_LEN, 0x40),
        (reg::CMD_OUT_LEN, 0x80),
    ];
    for (r, v) in regs {
        h.set_nic_reg(1, r, v);
    }
    // A 64-bit store is two registers.
    let control = h.bar(h.nic_fid(1), BAR_CONTROL);
    h.fabric.mmio_write(
        control + reg::CMD_IN_LEN,
        &0x0000_0100_0000_0020u64.to_le_bytes(),
    );
    let want = [
        0x1111_2220,
        0x3333_4444,
        0x5555_6660,
        0x7777_8888,
        0x20,
        0x100,
    ];
    let read: Vec<u32> = regs.iter().map(|(r, _)| h.nic_reg(1, *r)).collect();
    assert_eq!(read, want);
    // The other function's mailbox is its own.
    assert_eq!(h.nic_reg(0, reg::CMD_IN_ADDR_HI), 0);
    // A command posts its status with the token; the mailbox above points nowhere mapped.
    h.set_nic_reg(1, reg::CMD_DOORBELL, 0xbeef);
    let status = h.nic_reg(1, reg::CMD_STATUS);
    assert_eq!(
        (status & 0xff, status >> 16),
        (CMD_STATUS_DONE, 0xbeef),
        "status {status:#x}"
    );
    h.reset_nic(1);
    let read: Vec<u32> = regs.iter().map(|(r, _)| h.nic_reg(1, *r)).collect();
    assert_eq!(read, [0; 6]);
    assert_eq!(h.nic_reg(1, reg::CMD_STATUS), 0);
}

/// A RoCEv2 frame an Ethernet SQ sends to another function's RoCE address is that function's
/// transport's to claim, not its RQ's, though a catch-all would deliver any other frame there
/// (the eSwitch's direct route between host vPorts leaves frames to the RoCEv2 port to the
/// walks and the claim). The frame names no QP of the function and carries no valid ICRC: the
/// transport counts and drops it.
#[test]
fn a_roce_frame_from_an_ethernet_sq_is_claimed_by_the_peer_transport() {
    let h = host();
    let (mut a, mut b) = ports(&h);
    let _qp = h.create_rdma_qp(1, [10, 0, 0, 2], 4096);
    let rdma_rx = |h: &MockHost| {
        let n = size_of::<RdmaCountersOut>();
        let o = h.command_with_output(1, op::QUERY_RDMA_COUNTERS, &[], n);
        RdmaCountersOut::read_from_bytes(&o.out[..n])
            .unwrap()
            .rx_packets
            .get()
    };
    let mut frame = vec![0u8; 74];
    udp_headers(&mut frame, (h.nic_mac(0), h.nic_mac(1)), 1000);
    frame[36..38].copy_from_slice(&fld_abi::wire::roce::ROCE_V2_PORT.to_be_bytes());
    // BTH: SEND Only to QP 0x123.
    frame[42] = 0x04;
    frame[47..50].copy_from_slice(&[0, 0x01, 0x23]);
    a.send(&h, &frame, 0);
    h.run(8);
    assert_eq!(rdma_rx(&h), 1);
    assert!(b.receive(&h).is_none());
    // The same frame to another UDP port is the RQ's.
    frame[36..38].copy_from_slice(&2000u16.to_be_bytes());
    a.send(&h, &frame, 0);
    h.run(8);
    assert_eq!(rdma_rx(&h), 1);
    let (_, got) = b.receive(&h).expect("delivered to the RQ");
    assert_eq!(got, frame);
}
