//! uRDMA's decision module on the critical path (§3.2): what one decision costs per WRITE, for
//! each policy, beside what posting that WRITE costs (the verbs post into an in-process card's
//! send queue, its doorbell included), measured in the same run. The paper asks a decision to
//! answer faster than the savings it buys — a few hundred nanoseconds at least.
//!
//! `cargo bench -p fld-host --bench decision` prints ns per decision and the ratio to a post.

use std::hint::black_box;
use std::time::Instant;

use fld_device::card::{Card, CardConfig};
use fld_driver::inprocess::InProcessHost;
use fld_host::verbs::decision::{Decider, Policy};
use fld_host::verbs::*;

/// WRITEs per measurement.
const N: u64 = 1 << 22;

/// Remote addresses drawn like uRDMA Figure 3's (a skewed spread over 2^20 pages), computed
/// before the clock starts.
fn addresses() -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..N)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // The square of a uniform draw: small pages far more often than large ones.
            let u = (x >> 44) as f64 / (1u64 << 20) as f64;
            ((u * u * (1u64 << 20) as f64) as u64) << 12
        })
        .collect()
}

fn decisions(policy: Policy, addrs: &[u64]) -> f64 {
    let mut d = Decider::new(policy, 64);
    if let Policy::Frequency { .. } = policy {
        for &a in &addrs[..addrs.len() / 4] {
            d.unload(a, 16, false);
        }
        d.keep_top(4096);
    }
    let start = Instant::now();
    let mut unloaded = 0u64;
    for (i, &a) in addrs.iter().enumerate() {
        unloaded += u64::from(d.unload(black_box(a), 16, i & 1 == 0));
    }
    black_box(unloaded);
    start.elapsed().as_nanos() as f64 / addrs.len() as f64
}

/// ns per posted 16 B inline WRITE, the card draining the queue between batches (not timed).
fn posts() -> f64 {
    let card = Card::new(CardConfig::default());
    let host = InProcessHost::new(card.clone(), 64 << 20).expect("host memory");
    let mut ctx =
        Context::open(host.device(card.nic.function_id(0).expect("function"))).expect("context");
    ctx.add_ip(std::net::Ipv4Addr::new(10, 9, 0, 1).into())
        .expect("address");
    let pd = ctx.alloc_pd().expect("pd");
    let mr = ctx.reg_mr(&pd, 4096, access::ALL).expect("mr");
    let mut cq = ctx.create_cq(1024, None).expect("cq");
    let mut qp = ctx
        .create_qp(
            &pd,
            &QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 256,
                    max_inline_data: 64,
                    ..QpCap::default()
                },
                sq_sig_all: false,
                out_of_order: false,
            },
        )
        .expect("qp");
    // Connected to itself: the WRITEs loop back through the card's eSwitch.
    ctx.init_rc(&qp, access::REMOTE).expect("init");
    let gid = ctx.query_gid(1, 0).expect("gid");
    let c = RcConnection {
        dmac: ctx.mac(),
        ..RcConnection::new(qp.qp_num(), gid)
    };
    ctx.connect_rc(&qp, &c).expect("connect");
    let sge = [mr.sge(0, 16)];
    let mut wc = [Wc::EMPTY; 64];
    let (mut timed, mut posted) = (0u128, 0u64);
    let batches = N / 64 / 16;
    for b in 0..batches {
        let start = Instant::now();
        for i in 0..64u64 {
            let mut wr = SendWr::new(
                b * 64 + i,
                WrOpcode::RdmaWrite {
                    remote_addr: mr.addr() + 64,
                    rkey: mr.rkey(),
                },
                &sge,
            );
            wr.inline = true;
            wr.signaled = i == 63;
            qp.post_send(&[wr]).expect("room");
        }
        timed += start.elapsed().as_nanos();
        posted += 64;
        loop {
            card.poll();
            if cq.poll(&mut wc) > 0 {
                break;
            }
        }
    }
    timed as f64 / posted as f64
}

fn main() {
    let addrs = addresses();
    let post = posts();
    println!("uRDMA decision module: cost per WRITE beside the verbs post of that WRITE");
    println!("{:<28} {:>10} {:>12}", "policy", "ns/WRITE", "of a post");
    println!(
        "{:<28} {:>10.2} {:>12}",
        "post (16 B inline WRITE)", post, "1"
    );
    for (name, policy) in [
        ("offload", Policy::Offload),
        ("unload", Policy::Unload),
        ("hint", Policy::Hint),
        ("frequency", Policy::Frequency { threshold: 0.0 }),
    ] {
        let ns = decisions(policy, &addrs);
        println!("{name:<28} {ns:>10.2} {:>12.4}", ns / post);
    }
}
