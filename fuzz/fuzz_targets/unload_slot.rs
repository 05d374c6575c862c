//! uRDMA's unload path at the target (`fld_host::verbs::unload`): a remote initiator writes
//! anything into the staging slots — any bytes, any length (beyond a slot too), any immediate
//! as the stag — and the target's CPU takes each. Whatever arrives, the target neither panics
//! nor writes what its uMTT does not allow: a region without remote write stays as it was, and
//! no more WRITEs are placed or refused than were sent (nothing is taken twice).
#![no_main]

use fld_device::card::{Card, CardConfig};
use fld_driver::inprocess::InProcessHost;
use fld_fuzz::Input;
use fld_host::verbs::unload::UnloadTarget;
use fld_host::verbs::*;
use libfuzzer_sys::fuzz_target;

const SLOTS: u32 = 4;
const SLOT_BYTES: u32 = 64;
const REGION: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let card = Card::new(CardConfig::default());
    let host = InProcessHost::new(card.clone(), 32 << 20).unwrap();
    let open = |f: u16, ip: [u8; 4]| {
        let mut ctx = Context::open(host.device(card.nic.function_id(f).unwrap())).unwrap();
        ctx.add_ip(std::net::Ipv4Addr::from(ip).into()).unwrap();
        ctx
    };
    let (mut a, mut b) = (open(0, [10, 2, 0, 1]), open(1, [10, 2, 0, 2]));
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 128,
    };
    let make = |ctx: &mut Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256, None).unwrap();
        let init = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: false,
            out_of_order: false,
        };
        let qp = ctx.create_qp(&pd, &init).unwrap();
        (pd, cq, qp)
    };
    let (pa, mut cqa, mut qa) = make(&mut a);
    let (pb, mut cqb, mut qb) = make(&mut b);
    let (ga, gb, ma, mb) = (
        a.query_gid(1, 0).unwrap(),
        b.query_gid(1, 0).unwrap(),
        a.mac(),
        b.mac(),
    );
    for (ctx, q, peer, gid, mac) in [(&mut a, &qa, &qb, gb, mb), (&mut b, &qb, &qa, ga, ma)] {
        ctx.init_rc(q, access::REMOTE_WRITE).unwrap();
        let c = RcConnection {
            dmac: mac,
            ..RcConnection::new(peer.qp_num(), gid)
        };
        ctx.connect_rc(q, &c).unwrap();
    }
    // B: a writable region, a read-only one, the staging buffer.
    let open_mr = b
        .reg_mr(&pb, REGION, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let read_only = b.reg_mr(&pb, REGION, access::REMOTE_READ).unwrap();
    open_mr.write(0, &[0x11; REGION]);
    read_only.write(0, &[0x22; REGION]);
    let mut target = UnloadTarget::new(&mut b, &pb, &mut qb, SLOTS, SLOT_BYTES).unwrap();
    let offer = target.offer();
    let source = a.reg_mr(&pa, 256, access::LOCAL_WRITE).unwrap();

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
        source.write(0, &bytes[..take]);
        let sge = [source.sge(0, take)];
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
        for _ in 0..32 {
            card.poll();
        }
        while cqa.poll(&mut wc) > 0 {}
        loop {
            let n = cqb.poll(&mut wc);
            if n == 0 {
                break;
            }
            for w in &wc[..n] {
                if UnloadTarget::is_unloaded(w) {
                    let _ = target.take(&b, &mut qb, w);
                }
            }
        }
    }
    // A WRITE longer than a slot is refused by B's RNIC (the staging region's range), so it
    // never completes as an unloaded WRITE; every other one was placed or refused.
    assert!(target.placed + target.refused <= sent);
    let mut ro = [0u8; REGION];
    read_only.read(0, &mut ro);
    assert!(ro.iter().all(|&x| x == 0x22), "a read-only region was written");
});
