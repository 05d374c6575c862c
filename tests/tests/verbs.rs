//! The verbs API as an application uses it: two machines (two cards joined by a cable, each
//! with its own thread as its own host), addresses exchanged out of band as rc_pingpong does,
//! the peer's MAC found by ARP, a ping-pong of SENDs — one side polling, the other sleeping on
//! completion events — then RDMA WRITE and READ, and an SRQ.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use fld_abi::nic::QpState;
use fld_device::card::{Card, CardConfig};
use fld_device::nic::NicConfig;
use fld_device::wire::link;
use fld_driver::inprocess::InProcessHost;
use fld_driver::PciDevice;
use fld_host::verbs::*;

/// What rc_pingpong exchanges: QPN, PSN, GID.
#[derive(Clone, Copy, Debug)]
struct Dest {
    qpn: u32,
    psn: u32,
    gid: Gid,
    rkey: u32,
    addr: u64,
    /// Not exchanged by the tool: what the test expects ARP to find.
    mac: [u8; 6],
}

fn machine(card_id: u16) -> (Arc<Card>, Arc<InProcessHost>) {
    let card = Card::new(CardConfig {
        nic: NicConfig {
            card_id,
            ..Default::default()
        },
        ..Default::default()
    });
    let host = InProcessHost::new(card.clone(), 32 << 20).unwrap();
    (card, host)
}

/// One side names no MAC and lets `modify_qp` resolve the GID by ARP; the other resolves it
/// into an address handle first and connects through that.
fn to_rts(ctx: &mut Context, qp: &Qp, gid_index: u8, my_psn: u32, peer: &Dest, via_ah: bool) {
    ctx.init_rc(qp, access::REMOTE_WRITE | access::REMOTE_READ)
        .unwrap();
    let path = if via_ah {
        let ah = ctx
            .create_ah(&AhAttr {
                dgid: peer.gid,
                sgid_index: gid_index,
                hop_limit: 1,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(ah.dmac, peer.mac, "the AH's MAC is the peer's");
        RcConnection::via(peer.qpn, &ah)
    } else {
        RcConnection::new(peer.qpn, peer.gid)
    };
    let c = RcConnection {
        sgid_index: gid_index,
        hop_limit: 1,
        rq_psn: peer.psn,
        sq_psn: my_psn,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..path
    };
    ctx.connect_rc(qp, &c).unwrap();
    let attr = ctx.query_qp(qp).unwrap();
    assert_eq!(
        (attr.qp_state, attr.dmac),
        (QpState::Rts as u8, peer.mac),
        "connected to the peer's MAC"
    );
}

const SIZE: usize = 4096;
const ITERS: u64 = 200;
const RECV: u64 = 1;
const SEND: u64 = 2;

/// One side of the ping-pong; `client` sends first, `events` sleeps on the channel.
fn side(
    card_id: u16,
    wire: fld_device::wire::LinkEnd,
    client: bool,
    events: bool,
    to_peer: mpsc::Sender<Dest>,
    from_peer: mpsc::Receiver<Dest>,
) -> Vec<u8> {
    let (card, host) = machine(card_id);
    card.nic.set_uplink(Box::new(wire));
    let dev: Arc<dyn PciDevice> = host.device(card.nic.function_id(0).unwrap());
    let mut ctx = Context::open(dev).unwrap();
    let ip = [10, 0, 0, card_id as u8];
    let gid_index = ctx.add_ip(std::net::Ipv4Addr::from(ip).into()).unwrap();
    assert_eq!(ctx.query_gid(1, gid_index).unwrap()[12..], ip);
    let port = ctx.query_port(1).unwrap();
    assert!(port.active && port.link_layer_ethernet);
    let pd = ctx.alloc_pd().unwrap();
    let mr = ctx
        .reg_mr(
            &pd,
            2 * SIZE,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
        .unwrap();
    let channel = ctx.create_comp_channel();
    let mut cq = ctx.create_cq(256, events.then_some(&channel)).unwrap();
    let mut qp = ctx
        .create_qp(
            &pd,
            &QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 4,
                    max_recv_wr: 64,
                    ..Default::default()
                },
                sq_sig_all: false,
                out_of_order: false,
            },
        )
        .unwrap();
    let recv_sge = [mr.sge(0, SIZE)];
    for _ in 0..32 {
        qp.post_recv(&[(RECV, &recv_sge[..])]).unwrap();
    }
    let psn = 0x1000 + u32::from(card_id);
    let me = Dest {
        qpn: qp.qp_num(),
        psn,
        gid: ctx.query_gid(1, gid_index).unwrap(),
        rkey: mr.rkey(),
        addr: mr.addr() + SIZE as u64,
        mac: ctx.mac(),
    };
    to_peer.send(me).unwrap();
    // Until the peer's address arrives, answer its ARP requests.
    let peer = loop {
        ctx.serve_neighbors().unwrap();
        if let Ok(p) = from_peer.try_recv() {
            break p;
        }
        thread::yield_now();
    };
    to_rts(&mut ctx, &qp, gid_index as u8, psn, &peer, card_id == 1);
    to_peer.send(me).unwrap(); // "connected"
    loop {
        ctx.serve_neighbors().unwrap();
        if from_peer.try_recv().is_ok() {
            break;
        }
        thread::yield_now();
    }

    let payload: Vec<u8> = (0..SIZE).map(|i| (i as u8) ^ card_id as u8).collect();
    mr.write(SIZE, &payload);
    let send_sge = [mr.sge(SIZE, SIZE)];
    let send = SendWr::new(SEND, WrOpcode::Send, &send_sge);
    let (mut sent, mut received) = (0u64, 0u64);
    // The send in flight and the receive awaited: one of each before the next send.
    let mut pending = RECV;
    if client {
        qp.post_send(&[send]).unwrap();
        pending |= SEND;
    }
    if events {
        cq.req_notify().unwrap();
    }
    let mut wc = [Wc::EMPTY; 4];
    let mut got = vec![0u8; SIZE];
    while sent < ITERS || received < ITERS {
        if events {
            let cqn = ctx
                .get_cq_event(&channel, Duration::from_secs(20))
                .expect("a completion event");
            assert_eq!(cqn, cq.cqn());
            cq.req_notify().unwrap();
        }
        let n = cq.poll(&mut wc);
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            assert_eq!(w.qp_num, qp.qp_num());
            match w.wr_id {
                SEND => {
                    assert_eq!(w.opcode, WcOpcode::Send);
                    sent += 1;
                }
                RECV => {
                    assert_eq!((w.opcode, w.byte_len), (WcOpcode::Recv, SIZE as u32));
                    mr.read(0, &mut got);
                    let want: Vec<u8> = (0..SIZE).map(|i| (i as u8) ^ peer_id(card_id)).collect();
                    assert!(got == want, "the peer's bytes");
                    received += 1;
                    qp.post_recv(&[(RECV, &recv_sge[..])]).unwrap();
                }
                other => panic!("unknown wr_id {other}"),
            }
            pending &= !w.wr_id;
            if sent < ITERS && pending == 0 {
                qp.post_send(&[send]).unwrap();
                pending = RECV | SEND;
            }
        }
        if n == 0 && !events {
            thread::yield_now();
        }
    }
    // One-sided: the client writes its payload into the server's second half and reads it back.
    if client {
        let wsge = [mr.sge(SIZE, SIZE)];
        let w = SendWr::new(
            10,
            WrOpcode::RdmaWrite {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            &wsge,
        );
        let rsge = [mr.sge(0, SIZE)];
        let r = SendWr::new(
            11,
            WrOpcode::RdmaRead {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            &rsge,
        );
        qp.post_send(&[w, r]).unwrap();
        let mut done = Vec::new();
        while done.len() < 2 {
            if events {
                ctx.get_cq_event(&channel, Duration::from_secs(20)).unwrap();
                cq.req_notify().unwrap();
            }
            let n = cq.poll(&mut wc);
            done.extend(wc[..n].iter().map(|w| (w.wr_id, w.opcode, w.status)));
        }
        assert_eq!(
            done,
            vec![
                (10, WcOpcode::RdmaWrite, WcStatus::Success),
                (11, WcOpcode::RdmaRead, WcStatus::Success)
            ]
        );
        mr.read(0, &mut got);
        assert!(got == payload, "read back what was written");
        to_peer.send(me).unwrap();
    } else {
        // The server serves until the client is done.
        loop {
            ctx.driver().device().run_device();
            if from_peer.try_recv().is_ok() {
                break;
            }
            thread::yield_now();
        }
    }
    let mut last = vec![0u8; SIZE];
    mr.read(SIZE, &mut last);
    last
}

fn peer_id(card_id: u16) -> u8 {
    if card_id == 1 {
        2
    } else {
        1
    }
}

#[test]
fn two_machines_ping_pong_with_arp_events_and_one_sided_operations() {
    let (a, b) = link(4096);
    let (to_b, from_a) = mpsc::channel();
    let (to_a, from_b) = mpsc::channel();
    let server = thread::spawn(move || side(2, b, false, true, to_a, from_a));
    let client = side(1, a, true, false, to_b, from_b);
    let server_second_half = server.join().unwrap();
    // The client's WRITE landed in the server's second half.
    let want: Vec<u8> = (0..SIZE).map(|i| (i as u8) ^ 1).collect();
    assert_eq!(server_second_half, want);
    assert_eq!(client.len(), SIZE);
}
