//! The transmit pipeline's bursts change nothing a host can observe: the same random mix of
//! sends — frame sizes, checksum offloads, NOPs, multi-packet WQEs, signalled and silent WQEs,
//! WQEs by MMIO, WQEs
//! that fail (unreachable data, a bad key, too long, an unknown resume table), frames to the
//! other function, to the sender itself, broadcast, and out the uplink and back — run on a
//! card that takes each frame through every stage before it reads the next (`tx_burst` 1, the
//! per-packet engine) and on one that gathers bursts, gives the same completions, counters, TLP
//! accounting, interrupts and host memory, byte for byte.
//!
//! The same mixes, with the receive pipelines and the FDB reprogrammed between the sends, also
//! hold the eSwitch's direct route (a frame no rule can tell apart steered in one step) to the
//! table walks it stands for.
//!
//! Each WQE's data sits in a buffer of its own, apart from the receive buffers: the one place
//! the two may differ by design is a frame gathered from a buffer that a frame ahead of it in the
//! same burst is received into (the burst reads it first, as a NIC that fetches ahead does).

use proptest::prelude::*;
use zerocopy::little_endian::U16;
use zerocopy::IntoBytes;

use super::NicConfig;
use crate::mock::{MockHost, MockPort, MOCK_IOVA};
use crate::wire::LoopbackWire;
use fld_abi::nic::*;

const MAPPED: usize = 4 << 20;
/// Bytes of data buffer per posted WQE, and how many buffers each port cycles through.
const DATA: u64 = 2048;
const DATA_BUFFERS: u64 = 96;

#[derive(Clone, Debug)]
enum Dest {
    Other,
    Itself,
    Uplink,
    /// Flooded to every other vPort and the uplink.
    Broadcast,
    /// Returned into the sender's own receive table (a resume table): received by the sender.
    Returned,
}

#[derive(Clone, Debug)]
enum Body {
    /// A UDP/IPv4 frame of this many bytes, or a raw Ethernet one.
    Frame {
        len: usize,
        udp: bool,
        cs: u8,
    },
    /// A multi-packet WQE of UDP/IPv4 or raw frames this long, one of them with a bad key
    /// when `bad` names it.
    MultiPacket {
        lens: Vec<usize>,
        udp: bool,
        cs: u8,
        bad: Option<usize>,
    },
    Nop,
    UnreachableData,
    BadKey,
    TooLong,
    UnknownResumeTable,
}

/// A new receive root for a port, made of entries in this order.
#[derive(Clone, Debug)]
enum Rules {
    /// One catch-all entry to the port's RQ (as the port came up).
    CatchAll,
    /// A catch-all that counts and tags.
    Counted { tag: u32 },
    /// A counting catch-all to an RSS group over the port's RQ.
    Rss,
    /// A tagged entry for odd UDP source ports before a counting catch-all.
    MatchFirst,
    /// A catch-all policed by a meter that admits about one frame in a pass.
    Metered,
    /// A counting catch-all that drops.
    DropAll,
    /// A catch-all going on to a second table, whose counting catch-all delivers.
    Goto,
    /// A counting catch-all and eight entries no frame matches: rules enough for the flow cache.
    Cached,
}

#[derive(Clone, Debug)]
enum Op {
    Post {
        port: usize,
        dest: Dest,
        body: Body,
        signal: bool,
        by_mmio: bool,
    },
    Ring(usize),
    Run(usize),
    Drain(usize),
    Recover(usize),
    Steer(usize, Rules),
    /// An FDB root (function 0 is the manager) that counts and forwards function 1's unicast
    /// frames to function 0, or none.
    Fdb(bool),
}

fn rules() -> impl Strategy<Value = Rules> {
    prop_oneof![
        Just(Rules::CatchAll),
        any::<u32>().prop_map(|tag| Rules::Counted { tag }),
        Just(Rules::Rss),
        Just(Rules::MatchFirst),
        Just(Rules::Metered),
        Just(Rules::DropAll),
        Just(Rules::Goto),
        Just(Rules::Cached),
    ]
}

/// The mix of [`op`] with the steering reprogrammed now and then.
fn steering_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => op(),
        2 => ((0usize..2), rules()).prop_map(|(p, r)| Op::Steer(p, r)),
        1 => any::<bool>().prop_map(Op::Fdb),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let dest = prop_oneof![
        6 => Just(Dest::Other),
        1 => Just(Dest::Itself),
        1 => Just(Dest::Uplink),
        1 => Just(Dest::Broadcast),
        2 => Just(Dest::Returned),
    ];
    let body = prop_oneof![
        60 => (14usize..1600, any::<bool>(), 0u8..4).prop_map(|(len, udp, cs)| Body::Frame { len, udp, cs }),
        12 => (prop::collection::vec(14usize..300, 1..7), any::<bool>(), 0u8..4, prop::option::weighted(0.1, 0usize..7))
            .prop_map(|(lens, udp, cs, bad)| Body::MultiPacket { lens, udp, cs, bad }),
        1 => Just(Body::Nop),
        1 => Just(Body::UnreachableData),
        1 => Just(Body::BadKey),
        1 => Just(Body::TooLong),
        1 => Just(Body::UnknownResumeTable),
    ];
    prop_oneof![
        12 => (0usize..2, dest, body, any::<bool>(), prop::bool::weighted(0.2)).prop_map(
            |(port, dest, body, signal, by_mmio)| Op::Post { port, dest, body, signal, by_mmio }
        ),
        4 => (0usize..2).prop_map(Op::Ring),
        2 => (1usize..4).prop_map(Op::Run),
        2 => (0usize..2).prop_map(Op::Drain),
        3 => (0usize..2).prop_map(Op::Recover),
    ]
}

fn frame(h: &MockHost, from: u16, dest: &Dest, len: usize, udp: bool, seed: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|k| seed.wrapping_add(k as u8)).collect();
    let to = match dest {
        Dest::Other => h.nic_mac(1 - from),
        Dest::Itself | Dest::Returned => h.nic_mac(from),
        Dest::Uplink => [0x02, 0, 0, 0, 0x77, 0x01],
        Dest::Broadcast => [0xff; 6],
    };
    if udp && len >= 42 {
        super::tests::udp_headers(&mut f, (h.nic_mac(from), to), 1000 + seed as u16);
    } else {
        f[..6].copy_from_slice(&to);
        f[6..12].copy_from_slice(&h.nic_mac(from));
        f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    }
    f
}

/// Posts one send WQE on `port` (not rung) and returns its bytes; `returns` is the port's
/// receive table a returned frame resumes at.
fn post(
    h: &MockHost,
    (port, returns): (&mut MockPort, u32),
    data: u64,
    op: &Op,
    seed: u8,
) -> Vec<u8> {
    let Op::Post {
        dest, body, signal, ..
    } = op
    else {
        unreachable!()
    };
    let from = port.function;
    let mut buf = [0u8; 1024];
    let index = port.sq.pi as u16;
    let (header, gather, cs, resume) = match body {
        Body::Nop => {
            let ctrl = CtrlSeg {
                opcode: WQE_OP_NOP,
                wqe_index: U16::new(index),
                ds_count: 1,
                fm_ce_se: if *signal { CE_ALWAYS } else { 0 },
                ..Default::default()
            };
            let mut wqe = vec![0u8; WQEBB];
            wqe[..16].copy_from_slice(ctrl.as_bytes());
            port.sq.write_raw(h, &wqe);
            return wqe;
        }
        Body::MultiPacket { lens, udp, cs, bad } => {
            let mut frames = Vec::new();
            let mut at = data;
            for (j, &len) in lens.iter().enumerate() {
                let f = frame(h, from, dest, len, *udp, seed.wrapping_add(j as u8));
                h.write(at, &f);
                frames.push((at, len as u32));
                at += len as u64;
            }
            let wqe = MultiPacketSendWqe {
                frames: &frames,
                cs_flags: *cs,
                signal: *signal,
            };
            let n = wqe
                .encode(port.sq.id, index, &mut buf)
                .expect("the WQE fits");
            let mut bytes = buf[..n.next_multiple_of(WQEBB)].to_vec();
            if let Some(j) = bad.filter(|&j| j < lens.len()) {
                let seg = (2 + j) * 16;
                bytes[seg + 4..seg + 8].copy_from_slice(&(RESERVED_LKEY ^ 1).to_le_bytes());
            }
            port.sq.write_raw(h, &bytes);
            return bytes;
        }
        Body::Frame { len, udp, cs } => {
            let f = frame(h, from, dest, *len, *udp, seed);
            let inline = f.len().min(14 + (seed as usize % 40)).min(f.len());
            h.write(data, &f[inline..]);
            let g = vec![(data, (f.len() - inline) as u32)];
            let resume = matches!(dest, Dest::Returned).then_some(returns);
            (f[..inline].to_vec(), g, *cs, resume)
        }
        Body::UnreachableData => {
            let f = frame(h, from, dest, 60, false, seed);
            (f[..14].to_vec(), vec![(MOCK_IOVA - 4096, 64)], 0, None)
        }
        Body::BadKey => {
            let f = frame(h, from, dest, 60, false, seed);
            h.write(data, &f[14..]);
            (f[..14].to_vec(), vec![(data, 46)], 0, None)
        }
        Body::TooLong => {
            let f = frame(h, from, dest, 60, false, seed);
            (f[..14].to_vec(), vec![(data, 9000), (data, 9000)], 0, None)
        }
        Body::UnknownResumeTable => {
            let f = frame(h, from, dest, 60, false, seed);
            h.write(data, &f[14..]);
            (f[..14].to_vec(), vec![(data, 46)], 0, Some(0xbad))
        }
    };
    let wqe = SendWqe {
        inline_header: &header,
        gather: &gather,
        cs_flags: cs,
        signal: *signal,
        resume_table: resume,
    };
    let n = wqe
        .encode(port.sq.id, index, &mut buf)
        .expect("the WQE fits");
    let bytes = buf[..n.next_multiple_of(WQEBB)].to_vec();
    if matches!(body, Body::BadKey) {
        // The data segment's key: the reserved one is the only valid key for Ethernet WQEs.
        let mut bytes = bytes;
        let seg = n - 16;
        bytes[seg + 4..seg + 8].copy_from_slice(&(RESERVED_LKEY ^ 1).to_le_bytes());
        port.sq.write_raw(h, &bytes);
        return bytes;
    }
    port.sq.write_raw(h, &bytes);
    bytes
}

/// Puts `wqe`, written at counter `counter`, in the SQ's WQE-by-MMIO buffer with its seal: 32-bit
/// stores, one at a time or handed to the fabric as one run (as a driver's WQE by MMIO is), which
/// must come to the same (the run reaches the function in one call).
fn by_mmio(h: &MockHost, port: &MockPort, wqe: &[u8], counter: u32, as_run: bool) {
    let buffer = db::wqe_buffer(db::SQ_WQE_BASE, port.sq.id);
    let blocks = (wqe.len() / WQEBB) as u32;
    let seal = db::wqe_seal(counter, blocks).to_le_bytes();
    let mut stores: Vec<(u64, &[u8])> = vec![(buffer + db::WQE_SEAL_OFFSET, &[0; 4])];
    for (i, w) in wqe.chunks_exact(4).take(48).enumerate() {
        stores.push((buffer + 4 * i as u64, w));
    }
    stores.push((buffer + db::WQE_SEAL_OFFSET, &seal));
    let base = h.bar(h.nic_fid(port.function), BAR_DOORBELL);
    if as_run {
        h.fabric.mmio_write_all(base, &stores);
    } else {
        for (offset, data) in stores {
            h.fabric.mmio_write(base + offset, data);
        }
    }
}

/// Runs `ops` on a fresh two-function card whose transmit pipeline gathers `tx_burst` WQEs at
/// most; returns what a driver could observe, and the whole of host memory. WQEs by MMIO are
/// stored one word at a time on the per-packet engine, as one run on a bursting one.
fn run(ops: &[Op], tx_burst: u32) -> (Vec<String>, Vec<u8>) {
    let (seen, memory, _) = run_steered(ops, tx_burst, false);
    (seen, memory)
}

/// [`run`], with the eSwitch walking its tables for every frame when `walk_always`; the entry
/// and vPort counters close what a driver could observe. Also returns the frames that took the
/// direct route.
fn run_steered(ops: &[Op], tx_burst: u32, walk_always: bool) -> (Vec<String>, Vec<u8>, u64) {
    super::datapath::WALK_ALWAYS.set(walk_always);
    let h = MockHost::nic(
        NicConfig {
            tx_burst,
            ..Default::default()
        },
        MAPPED,
    );
    h.nic.set_uplink(Box::new(LoopbackWire::new(64)));
    let mut ports = [h.open_port(0), h.open_port(1)];
    // SQs large enough for every WQE a mix posts: the ring never overflows (the doorbell
    // overflow is the nic_sq fuzz target's to explore). Function 1's sends complete on its
    // receive CQ, so frames it sends itself interleave both kinds of completion in one CQ.
    for (f, p) in ports.iter_mut().enumerate() {
        let cq = if f == 0 { p.tx_cq.id } else { p.rx_cq.id };
        p.sq = h.create_sq(f as u16, cq, 10, None);
    }
    let returns = [0, 1].map(|f| receive_table(&h, f, ports[f as usize].rq.id));
    let data = [
        h.alloc((DATA * DATA_BUFFERS) as usize),
        h.alloc((DATA * DATA_BUFFERS) as usize),
    ];
    let mut posted = [0u64; 2];
    let mut seen = Vec::new();
    let mut entries = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        match op {
            Op::Post {
                port, by_mmio: m, ..
            } => {
                let p = &mut ports[*port];
                let buf = data[*port] + (posted[*port] % DATA_BUFFERS) * DATA;
                posted[*port] += 1;
                let counter = p.sq.pi;
                let wqe = post(&h, (p, returns[*port]), buf, op, n as u8);
                if *m {
                    by_mmio(&h, p, &wqe, counter, tx_burst > 1);
                }
            }
            Op::Ring(port) => ports[*port].sq.ring(&h, *port as u16),
            Op::Run(n) => {
                h.run(*n);
            }
            Op::Drain(port) => drain(&h, &mut ports[*port], *port, &mut seen),
            Op::Recover(port) => {
                let m = ModifyQueueIn {
                    id: zerocopy::little_endian::U32::new(ports[*port].sq.id),
                    new_state: QueueState::Ready as u8,
                    rsvd: [0; 3],
                };
                let r = h.command(*port as u16, op::MODIFY_SQ, m.as_bytes());
                if r.ok() {
                    ports[*port].sq.pi = 0;
                    seen.push(format!("recovered {port}"));
                }
            }
            Op::Steer(port, rules) => {
                let rq = ports[*port].rq.id;
                entries.extend(steer(&h, *port as u16, rq, rules));
            }
            Op::Fdb(on) => entries.extend(fdb(&h, *on)),
        }
    }
    for (i, p) in ports.iter().enumerate() {
        p.sq.ring(&h, i as u16);
    }
    h.run(64);
    for (i, p) in ports.iter_mut().enumerate() {
        drain(&h, p, i, &mut seen);
    }
    for (f, id) in entries {
        let q = ObjectIn::new(id);
        seen.push(format!(
            "entry {id} {:?}",
            h.command(f, op::QUERY_FLOW_ENTRY, q.as_bytes()).out
        ));
    }
    for f in 0..2u16 {
        let q = QueryVportIn {
            vport: U16::new(f),
            rsvd: [0; 6],
        };
        seen.push(format!(
            "vport {f} {:?}",
            h.command(f, op::QUERY_VPORT, q.as_bytes()).out
        ));
    }
    seen.push(format!("flow cache {:?}", h.nic.flow_cache_counters()));
    super::datapath::WALK_ALWAYS.set(false);
    let memory = h.observe(&mut seen);
    (seen, memory, h.nic.direct_routed_frames())
}

/// Creates a flow table of function `f` and returns its id.
fn table(h: &MockHost, f: u16, kind: u8, level: u8) -> u32 {
    let t = CreateFlowTableIn {
        kind,
        level,
        miss: MISS_DROP,
        rsvd: 0,
        miss_table: zerocopy::little_endian::U32::new(0),
    };
    h.command(f, op::CREATE_FLOW_TABLE, t.as_bytes())
        .id()
        .expect("a flow table")
}

/// Adds an entry to `table` of function `f`; returns (function, entry id).
fn entry(h: &MockHost, f: u16, table: u32, mut e: CreateFlowEntryIn) -> (u16, u32) {
    e.table = zerocopy::little_endian::U32::new(table);
    let id = h
        .command(f, op::CREATE_FLOW_ENTRY, e.as_bytes())
        .id()
        .expect("a flow entry");
    (f, id)
}

fn set_root(h: &MockHost, f: u16, kind: u8, table: u32) {
    let r = SetRootIn {
        kind,
        rsvd: [0; 3],
        table: zerocopy::little_endian::U32::new(table),
    };
    assert!(h.command(f, op::SET_FLOW_TABLE_ROOT, r.as_bytes()).ok());
}

/// Makes a receive root of `rules` for function `f`, delivering to RQ `rq`; returns its entries.
fn steer(h: &MockHost, f: u16, rq: u32, rules: &Rules) -> Vec<(u16, u32)> {
    use zerocopy::little_endian::{U32, U64};
    let root = table(h, f, TABLE_KIND_NIC_RX, 0);
    let to_rq = |actions: u32| CreateFlowEntryIn {
        actions: U32::new(actions | action::FWD_RQ),
        dest: U32::new(rq),
        ..Default::default()
    };
    let counted = to_rq(action::COUNT);
    let first = match rules {
        Rules::CatchAll => to_rq(0),
        Rules::Counted { tag } => CreateFlowEntryIn {
            flow_tag: U32::new(*tag),
            ..to_rq(action::COUNT | action::SET_FLOW_TAG)
        },
        Rules::Rss => {
            let group = CreateRssGroupIn {
                key: [0x6d; 40],
                hash_fields: rss_fields::SRC_PORT | rss_fields::DST_PORT,
                rsvd: 0,
                indirection_len: U16::new(4),
                rsvd2: [0; 4],
            };
            let g = h
                .command(f, op::CREATE_RSS_GROUP, &group.encode(&[rq; 4]))
                .id()
                .expect("an RSS group");
            CreateFlowEntryIn {
                actions: U32::new(action::COUNT | action::FWD_RSS),
                dest: U32::new(g),
                ..Default::default()
            }
        }
        Rules::MatchFirst => {
            let mut e = CreateFlowEntryIn {
                flow_tag: U32::new(0x51),
                ..to_rq(action::COUNT | action::SET_FLOW_TAG)
            };
            e.mask.src_port = [0, 1];
            e.value.src_port = [0, 1];
            e
        }
        Rules::Metered => {
            let m = CreateMeterIn {
                rate_bytes_per_s: U64::new(1000),
                burst_bytes: U32::new(1600),
                rsvd: [0; 4],
            };
            let meter = h
                .command(f, op::CREATE_METER, m.as_bytes())
                .id()
                .expect("a meter");
            CreateFlowEntryIn {
                meter: U32::new(meter),
                ..to_rq(action::COUNT | action::METER)
            }
        }
        Rules::DropAll => CreateFlowEntryIn {
            actions: U32::new(action::COUNT | action::DROP),
            ..Default::default()
        },
        Rules::Goto => {
            let next = table(h, f, TABLE_KIND_NIC_RX, 1);
            let delivers = entry(h, f, next, counted);
            let goto = CreateFlowEntryIn {
                actions: U32::new(action::COUNT | action::GOTO_TABLE),
                dest: U32::new(next),
                ..Default::default()
            };
            let e = vec![delivers, entry(h, f, root, goto)];
            set_root(h, f, TABLE_KIND_NIC_RX, root);
            return e;
        }
        Rules::Cached => counted,
    };
    let mut made = vec![entry(h, f, root, first)];
    match rules {
        Rules::MatchFirst => made.push(entry(h, f, root, counted)),
        Rules::Cached => {
            for k in 0..8u8 {
                let mut never = counted;
                never.mask.dst_port = [0xff, 0xff];
                never.value.dst_port = [0xee, k];
                made.push(entry(h, f, root, never));
            }
        }
        _ => {}
    }
    set_root(h, f, TABLE_KIND_NIC_RX, root);
    made
}

/// An FDB root that counts function 1's unicast frames to function 0 and sends them there (the
/// rest take the default L2 forwarding), or no FDB root.
fn fdb(h: &MockHost, on: bool) -> Vec<(u16, u32)> {
    use zerocopy::little_endian::U32;
    if !on {
        set_root(h, 0, TABLE_KIND_FDB, NO_TABLE);
        return Vec::new();
    }
    let root = table(h, 0, TABLE_KIND_FDB, 0);
    let mut e = CreateFlowEntryIn {
        actions: U32::new(action::COUNT | action::FWD_VPORT),
        vport: U16::new(0),
        ..Default::default()
    };
    e.mask.dst_mac = [0xff; 6];
    e.value.dst_mac = h.nic_mac(0);
    e.mask.src_vport = [0xff, 0xff];
    e.value.src_vport = 1u16.to_le_bytes();
    let made = vec![entry(h, 0, root, e)];
    set_root(h, 0, TABLE_KIND_FDB, root);
    made
}

/// A receive table of function `f` that sends everything to RQ `rqn` (not the vPort's root:
/// frames reach it only by a resume table).
fn receive_table(h: &MockHost, f: u16, rqn: u32) -> u32 {
    let id = table(h, f, TABLE_KIND_NIC_RX, 1);
    let to_rq = CreateFlowEntryIn {
        actions: zerocopy::little_endian::U32::new(action::FWD_RQ),
        dest: zerocopy::little_endian::U32::new(rqn),
        ..Default::default()
    };
    entry(h, f, id, to_rq);
    id
}

/// Takes every send and receive completion of `port` (reposting the receive buffers).
fn drain(h: &MockHost, p: &mut MockPort, port: usize, seen: &mut Vec<String>) {
    while let Some(c) = p.tx_cq.poll_cqe(h) {
        seen.push(format!("tx{port} {c:?}"));
    }
    p.tx_cq.update_ci(h, port as u16, db::CQ_BASE);
    for _ in 0..(1usize << p.rq.log_size) {
        match p.receive(h) {
            Some(r) => seen.push(format!("rx{port} {r:?}")),
            None => break,
        }
    }
}

fn assert_same(per_packet: &(Vec<String>, Vec<u8>), burst: &(Vec<String>, Vec<u8>)) {
    for (p, b) in per_packet.0.iter().zip(&burst.0) {
        assert_eq!(p, b);
    }
    assert_eq!(per_packet.0.len(), burst.0.len());
    let differs = per_packet.1.iter().zip(&burst.1).position(|(p, b)| p != b);
    assert_eq!(differs, None, "first host memory byte that differs");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn bursts_change_nothing_a_host_observes(ops in prop::collection::vec(op(), 1..120)) {
        let per_packet = run(&ops, 1);
        let burst = run(&ops, super::DEFAULT_TX_BURST);
        assert_same(&per_packet, &burst);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_direct_route_changes_nothing_a_host_observes(
        ops in prop::collection::vec(steering_op(), 1..120)
    ) {
        let (seen, memory, _) = run_steered(&ops, super::DEFAULT_TX_BURST, true);
        let (direct_seen, direct_memory, _) = run_steered(&ops, super::DEFAULT_TX_BURST, false);
        assert_same(&(seen, memory), &(direct_seen, direct_memory));
    }
}

/// Each way of steering on its own, with frames of every kind to the other function, to the
/// sender and out the uplink: the same observations with and without the direct route, which
/// the frames between the two functions take exactly when nothing but the default forwarding
/// and a catch-all that counts, tags and delivers stands in their way.
#[test]
fn each_kind_of_steering_takes_the_direct_route_only_where_it_may() {
    // Four frames go between the functions each way. Port 0 keeps its catch-all, so where
    // only port 1's root stands in the way, the four frames port 1 sends go direct; nothing
    // goes direct with an FDB root, or with rules enough for the flow cache (it serves the
    // whole eSwitch); frames to the sender itself or to the uplink never do.
    let kinds = [
        (Some(Rules::CatchAll), false, 8),
        (Some(Rules::Counted { tag: 0x7a }), false, 8),
        (Some(Rules::Rss), false, 8),
        (Some(Rules::MatchFirst), false, 4),
        (Some(Rules::Metered), false, 4),
        (Some(Rules::DropAll), false, 4),
        (Some(Rules::Goto), false, 4),
        (Some(Rules::Cached), false, 0),
        (None, true, 0),
    ];
    for (rules, fdb_root, expected) in kinds {
        let mut ops: Vec<Op> = rules.iter().map(|r| Op::Steer(1, r.clone())).collect();
        ops.extend(fdb_root.then_some(Op::Fdb(true)));
        let dests = [
            Dest::Other,
            Dest::Other,
            Dest::Itself,
            Dest::Uplink,
            Dest::Other,
        ];
        for (k, dest) in dests.iter().cycle().take(12).enumerate() {
            ops.push(Op::Post {
                port: k % 2,
                dest: dest.clone(),
                body: Body::Frame {
                    len: 60 + 97 * k,
                    udp: k % 3 != 2,
                    cs: (k % 4) as u8,
                },
                signal: true,
                by_mmio: false,
            });
        }
        ops.extend([
            Op::Ring(0),
            Op::Ring(1),
            Op::Run(2),
            Op::Drain(0),
            Op::Drain(1),
        ]);
        let (seen, memory, none) = run_steered(&ops, super::DEFAULT_TX_BURST, true);
        let (direct_seen, direct_memory, taken) = run_steered(&ops, super::DEFAULT_TX_BURST, false);
        assert_same(&(seen, memory), &(direct_seen, direct_memory));
        assert_eq!(none, 0);
        assert_eq!(taken, expected, "{rules:?}");
    }
}

/// One long pass: 40 frames with offloaded checksums and a failing WQE among them, more than
/// a burst and more than the receiver has buffers for.
#[test]
fn a_long_pass_with_a_failing_wqe_in_it() {
    let ops: Vec<Op> = (0..40)
        .map(|k| Op::Post {
            port: 0,
            dest: Dest::Other,
            body: if k == 37 {
                Body::UnreachableData
            } else {
                Body::Frame {
                    len: 60 + k,
                    udp: true,
                    cs: 3,
                }
            },
            signal: k % 4 == 3,
            by_mmio: false,
        })
        .chain([Op::Ring(0), Op::Run(1), Op::Drain(1), Op::Drain(0)])
        .collect();
    let per_packet = run(&ops, 1);
    let burst = run(&ops, super::DEFAULT_TX_BURST);
    assert_same(&per_packet, &burst);
    let seen = |p: &str| per_packet.0.iter().filter(|s| s.starts_with(p)).count();
    assert_eq!(seen("rx1"), 16, "one pass fills the receiver's 16 buffers");
    // Every fourth WQE signalled (9 before the failing one), then its error completion.
    assert_eq!(seen("tx0"), 10);
}

/// Multi-packet WQEs of growing size between single-frame WQEs: each completes once, after all
/// its frames, on the per-packet engine and on the bursting one alike. The CQ's 64 entries hold
/// the 4 a frame may add for 16 frames: a WQE of 16 is taken whole by a burst of 1 and starts a
/// burst of its own where the burst has no room left for it; one of 17 is refused.
#[test]
fn multi_packet_wqes_complete_once_or_are_refused_whole() {
    let mut ops = Vec::new();
    for n in [1usize, 2, 7, 15, 16, 17] {
        ops.push(Op::Post {
            port: 0,
            dest: Dest::Other,
            body: Body::Frame {
                len: 64,
                udp: true,
                cs: 3,
            },
            signal: false,
            by_mmio: false,
        });
        ops.push(Op::Post {
            port: 0,
            dest: Dest::Other,
            body: Body::MultiPacket {
                lens: (0..n).map(|j| 60 + j).collect(),
                udp: true,
                cs: 3,
                bad: None,
            },
            signal: true,
            by_mmio: false,
        });
    }
    ops.extend([Op::Ring(0), Op::Run(1), Op::Drain(1), Op::Drain(0)]);
    let per_packet = run(&ops, 1);
    let burst = run(&ops, super::DEFAULT_TX_BURST);
    assert_same(&per_packet, &burst);
    let tx: Vec<&String> = per_packet
        .0
        .iter()
        .filter(|s| s.starts_with("tx0"))
        .collect();
    assert_eq!(
        tx.len(),
        6,
        "one completion per multi-packet WQE, then the refusal"
    );
    assert!(
        tx[5].contains(&format!("syndrome: {}", syndrome::BAD_WQE)),
        "{}",
        tx[5]
    );
}
