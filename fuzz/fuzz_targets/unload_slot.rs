//! uRDMA's unload path at the target (`fld_host::verbs::unload`): a remote initiator writes
//! anything into the staging slots — any bytes, any length (beyond a slot too), any immediate
//! as the stag — and the target's CPU takes each. Whatever arrives, the target neither panics
//! nor writes what its uMTT does not allow: a region without remote write stays as it was, and
//! no more WRITEs are placed or refused than were sent (nothing is taken twice).
//!
//! The card, its two ports, their PDs, CQs and regions are brought up once and kept across
//! inputs; each input connects a new QP pair and staging buffer and tears them down after.
#![no_main]

use std::sync::Arc;

use fld_device::card::{Card, CardConfig};
use fld_driver::inprocess::InProcessHost;
use fld_fuzz::{unobserved, Input, Kept};
use fld_host::verbs::unload::UnloadTarget;
use fld_host::verbs::*;
use libfuzzer_sys::fuzz_target;

const SLOTS: u32 = 4;
const SLOT_BYTES: u32 = 64;
const REGION: usize = 4096;

/// What every input starts from: A (the initiator) and B (the target) on one card.
struct Testbed {
    card: Arc<Card>,
    _host: Arc<InProcessHost>,
    a: Context,
    b: Context,
    pa: Pd,
    pb: Pd,
    cqa: Cq,
    cqb: Cq,
    /// B's region with remote write, its read-only one, and A's send buffer.
    open_mr: Mr,
    read_only: Mr,
    source: Mr,
}

impl Testbed {
    fn new() -> Testbed {
        let card = Card::new(CardConfig::default());
        let host = InProcessHost::new(card.clone(), 32 << 20).unwrap();
        let open = |f: u16, ip: [u8; 4]| {
            let mut ctx = Context::open(host.device(card.nic.function_id(f).unwrap())).unwrap();
            ctx.add_ip(std::net::Ipv4Addr::from(ip).into()).unwrap();
            ctx
        };
        let (mut a, mut b) = (open(0, [10, 2, 0, 1]), open(1, [10, 2, 0, 2]));
        let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cqa, cqb) = (
            a.create_cq(256, None).unwrap(),
            b.create_cq(256, None).unwrap(),
        );
        let open_mr = b
            .reg_mr(&pb, REGION, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        let read_only = b.reg_mr(&pb, REGION, access::REMOTE_READ).unwrap();
        let source = a.reg_mr(&pa, 256, access::LOCAL_WRITE).unwrap();
        Testbed {
            card,
            _host: host,
            a,
            b,
            pa,
            pb,
            cqa,
            cqb,
            open_mr,
            read_only,
            source,
        }
    }

    /// A new RC QP pair between A and B, remote write allowed.
    fn connect(&mut self) -> (Qp, Qp) {
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 128,
        };
        let make = |ctx: &mut Context, pd: &Pd, cq: &Cq| {
            let init = QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap,
                sq_sig_all: false,
                out_of_order: false,
            };
            ctx.create_qp(pd, &init).unwrap()
        };
        let qa = make(&mut self.a, &self.pa, &self.cqa);
        let qb = make(&mut self.b, &self.pb, &self.cqb);
        let (ga, gb, ma, mb) = (
            self.a.query_gid(1, 0).unwrap(),
            self.b.query_gid(1, 0).unwrap(),
            self.a.mac(),
            self.b.mac(),
        );
        for (ctx, q, peer, gid, mac) in [
            (&mut self.a, &qa, &qb, gb, mb),
            (&mut self.b, &qb, &qa, ga, ma),
        ] {
            ctx.init_rc(q, access::REMOTE_WRITE).unwrap();
            let c = RcConnection {
                dmac: mac,
                ..RcConnection::new(peer.qp_num(), gid)
            };
            ctx.connect_rc(q, &c).unwrap();
        }
        (qa, qb)
    }

    /// Destroys what [`Testbed::connect`] and the input made, and drops every completion left.
    fn release(&mut self, qa: Qp, qb: Qp, target: UnloadTarget) {
        self.a.destroy_qp(qa).unwrap();
        self.b.destroy_qp(qb).unwrap();
        target.close(&mut self.b).unwrap();
        self.card.run_until_idle();
        let mut wc = [Wc::EMPTY; 32];
        while self.cqa.poll(&mut wc) > 0 {}
        while self.cqb.poll(&mut wc) > 0 {}
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mut kept = Kept::take(0, |_| {}, Testbed::new);
    let t = &mut *kept;
    // What every input starts from, and its release at the end, are the same for every input:
    // hidden from the fuzzer.
    let (mut qa, mut qb, mut target) = unobserved(|| {
        let (qa, mut qb) = t.connect();
        t.open_mr.write(0, &[0x11; REGION]);
        t.read_only.write(0, &[0x22; REGION]);
        let target = UnloadTarget::new(&mut t.b, &t.pb, &mut qb, SLOTS, SLOT_BYTES).unwrap();
        (qa, qb, target)
    });
    let offer = target.offer();
    let (open_mr, read_only) = (&t.open_mr, &t.read_only);

    let mut sent = 0u64;
    let mut wc = [Wc::EMPTY; 32];
    while !input.is_empty() && sent < 16 {
        // A slot's bytes: a destination near one of B's regions or anywhere, then data.
        let dest = match input.u8() % 4 {
            0 => open_mr.addr() + u64::from(input.u16()),
            1 => read_only.addr() + u64::from(input.u16() % 4096),
            2 => open_mr.addr().wrapping_sub(u64::from(input.u8())),
            _ => input.u64(),
        };
        let rkey = match input.u8() % 4 {
            0 | 1 => open_mr.rkey(),
            2 => read_only.rkey(),
            _ => input.u32(),
        };
        let len = (input.u8() as usize) % 120;
        let mut bytes = dest.to_le_bytes().to_vec();
        bytes.extend_from_slice(input.bytes(len));
        // Sometimes shorter than the destination address.
        let take = bytes.len().min(input.u8() as usize % 130);
        t.source.write(0, &bytes[..take]);
        let sge = [t.source.sge(0, take)];
        let at = sent % u64::from(SLOTS);
        let mut wr = SendWr::new(
            sent,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: offer.addr + at * u64::from(offer.slot_bytes),
                rkey: offer.rkey,
                imm: rkey,
            },
            &sge,
        );
        wr.inline = true;
        if qa.post_send(&[wr]).is_err() {
            break;
        }
        sent += 1;
        // The WRITE crosses to B and its completions come back; passes after the first idle one
        // would find nothing new (the clock is the wall's, far from any timer).
        for _ in 0..32 {
            if t.card.poll() == 0 {
                break;
            }
        }
        while t.cqa.poll(&mut wc) > 0 {}
        loop {
            let n = t.cqb.poll(&mut wc);
            if n == 0 {
                break;
            }
            for w in &wc[..n] {
                if UnloadTarget::is_unloaded(w) {
                    let _ = target.take(&t.b, &mut qb, w);
                }
            }
        }
    }
    // A WRITE longer than a slot is refused by B's RNIC (the staging region's range), so it
    // never completes as an unloaded WRITE; every other one was placed or refused.
    assert!(target.placed + target.refused <= sent);
    let mut ro = [0u8; REGION];
    read_only.read(0, &mut ro);
    assert!(
        ro.iter().all(|&x| x == 0x22),
        "a read-only region was written"
    );
    unobserved(|| t.release(qa, qb, target));
});
