//! StaR on the verbs API (`fld_host::verbs::star`, `docs/nic-interface.md` §16.6): a server
//! shares a region registered after the connection was made and later withdraws it; the
//! client's context applies both with `star_progress`.

use std::sync::Arc;

use fld_abi::wire::roce::ipv4_gid;
use fld_device::card::{Card, CardConfig};
use fld_device::nic::NicConfig;
use fld_device::wire::link;
use fld_driver::inprocess::InProcessHost;
use fld_driver::PciDevice;
use fld_host::verbs::star::{StarPort, StarQp};
use fld_host::verbs::*;

struct Machine {
    card: Arc<Card>,
    _host: Arc<InProcessHost>,
    ctx: Context,
    ip: [u8; 4],
}

fn machine(card_id: u16, wire: fld_device::wire::LinkEnd) -> Machine {
    let card = Card::new(CardConfig {
        nic: NicConfig {
            card_id,
            ..Default::default()
        },
        ..Default::default()
    });
    card.nic.set_uplink(Box::new(wire));
    let host = InProcessHost::new(card.clone(), 32 << 20).unwrap();
    let dev: Arc<dyn PciDevice> = host.device(card.nic.function_id(0).unwrap());
    let mut ctx = Context::open(dev).unwrap();
    let ip = [10, 0, 0, card_id as u8];
    ctx.add_ip(std::net::Ipv4Addr::from(ip).into()).unwrap();
    Machine {
        card,
        _host: host,
        ctx,
        ip,
    }
}

/// Runs both cards, the server's driver and the client's updates until nothing moves.
fn settle(m: &mut [Machine; 2], port: &mut StarPort, qp: &StarQp, now: &mut u64) {
    for _ in 0..10_000 {
        let mut work: usize = m.iter().map(|x| x.card.poll()).sum();
        work += port.progress(*now).unwrap();
        work += m[1].ctx.star_progress().unwrap();
        *now += 1_000;
        if work == 0 && qp.updates_pending() == 0 {
            return;
        }
    }
    panic!("the StaR connection did not settle");
}

/// A signalled 4 KiB WRITE from the start of `mr` to `remote` (address, key).
fn write_to(qp: &mut Qp, mr: &Mr, remote: (u64, u32)) {
    let sge = [mr.sge(0, 4096)];
    let wr = SendWr {
        signaled: true,
        ..SendWr::new(
            7,
            WrOpcode::RdmaWrite {
                remote_addr: remote.0,
                rkey: remote.1,
            },
            &sge,
        )
    };
    qp.post_send(&[wr]).unwrap();
}

#[test]
fn a_shared_region_takes_the_clients_writes_until_it_is_withdrawn() {
    let (a, b) = link(4096);
    let mut m = [machine(1, a), machine(2, b)];
    let (smac, cmac) = (m[0].ctx.mac(), m[1].ctx.mac());
    let (sip, cip) = (m[0].ip, m[1].ip);
    // The server: a port, a first region offered at setup, a software QP.
    let s = &mut m[0].ctx;
    let spd = s.alloc_pd().unwrap();
    let first = s.reg_mr(&spd, 4096, access::ALL).unwrap();
    let scq = s.create_cq(64, None).unwrap();
    let mut port = s.star_port(64).unwrap();
    let sqp = s
        .create_star_qp(&mut port, &scq, &scq, QpCap::default(), &[&first])
        .unwrap();
    // The client: an ordinary RC QP.
    let c = &mut m[1].ctx;
    let cpd = c.alloc_pd().unwrap();
    let cmr = c.reg_mr(&cpd, 4096, access::ALL).unwrap();
    let mut ccq = c.create_cq(64, None).unwrap();
    let mut cqp = c
        .create_qp(
            &cpd,
            &QpInitAttr {
                send_cq: &ccq,
                recv_cq: &ccq,
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: false,
                out_of_order: false,
            },
        )
        .unwrap();
    m[0].ctx
        .connect_star_server(
            &sqp,
            cqp.qp_num(),
            &RcConnection {
                dmac: cmac,
                ..RcConnection::new(cqp.qp_num(), ipv4_gid(cip))
            },
        )
        .unwrap();
    let held = m[1]
        .ctx
        .connect_star_client(
            &cpd,
            &cqp,
            sqp.offer(),
            &RcConnection {
                dmac: smac,
                ..RcConnection::new(sqp.qp_num(), ipv4_gid(sip))
            },
        )
        .unwrap();
    assert_eq!(held.regions, [(held.regions[0].0, first.rkey())]);
    // A second region, registered after the connection was made, shared with the client.
    let second = m[0].ctx.reg_mr(&spd, 8192, access::ALL).unwrap();
    let mut sqp = sqp;
    sqp.share_region(&mut port, &second, 0).unwrap();
    let mut now = 0;
    settle(&mut m, &mut port, &sqp, &mut now);
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
    cmr.write(0, &data);
    write_to(&mut cqp, &cmr, (second.addr() + 4096, second.rkey()));
    settle(&mut m, &mut port, &sqp, &mut now);
    let mut wc = [Wc::EMPTY; 4];
    assert_eq!(ccq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut got = vec![0u8; 4096];
    second.read(4096, &mut got);
    assert!(got == data, "the WRITE landed in the shared region");
    // Withdrawn: once acknowledged the client's WRITE into it fails, the memory untouched.
    sqp.withdraw_region(&mut port, &second, now).unwrap();
    settle(&mut m, &mut port, &sqp, &mut now);
    second.write(4096, &[0u8; 4096]);
    write_to(&mut cqp, &cmr, (second.addr() + 4096, second.rkey()));
    settle(&mut m, &mut port, &sqp, &mut now);
    assert_eq!(ccq.poll(&mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    second.read(4096, &mut got);
    assert!(got.iter().all(|&b| b == 0), "nothing landed");
    let k = m[1].ctx.port_counters().unwrap();
    assert_eq!(
        k.iter().find(|(n, _)| *n == "star_tx_blocked").unwrap().1,
        0
    );
    // The client ends its side: the server's regions it held go (they would keep the PD), and
    // so do its security module's entries for that server.
    let c = &mut m[1].ctx;
    c.destroy_qp(cqp).unwrap();
    c.star_release(&cpd).unwrap();
    c.dereg_mr(cmr).unwrap();
    c.dealloc_pd(cpd).unwrap();
}
