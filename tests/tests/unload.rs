//! uRDMA's unload path (§3.1), its security parity: the target's uMTT refuses an unloaded
//! WRITE exactly when the RNIC refuses the same WRITE offloaded — an unknown or deregistered
//! key, a region of another PD, one without remote write, a range past its end — and where
//! both take it, the uMTT's copy leaves the same bytes the RNIC's placement does.

use std::sync::Arc;

use fld_device::card::{Card, CardConfig};
use fld_driver::inprocess::InProcessHost;
use fld_host::verbs::unload::{read_slot, write_slot, Refusal, UnloadInitiator, UnloadTarget};
use fld_host::verbs::*;

/// Two functions of one card, each a context with an address.
fn contexts() -> (Arc<Card>, Context, Context) {
    let card = Card::new(CardConfig::default());
    let host = InProcessHost::new(card.clone(), 64 << 20).unwrap();
    let open = |f: u16, ip: [u8; 4]| {
        let mut ctx = Context::open(host.device(card.nic.function_id(f).unwrap())).unwrap();
        ctx.add_ip(std::net::Ipv4Addr::from(ip).into()).unwrap();
        ctx
    };
    let (a, b) = (open(0, [10, 1, 0, 1]), open(1, [10, 1, 0, 2]));
    (card, a, b)
}

/// An RC QP completing every send WQE into `cq`.
fn qp(ctx: &mut Context, pd: &Pd, cq: &Cq, cap: QpCap) -> Qp {
    ctx.create_qp(
        pd,
        &QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: true,
            out_of_order: false,
        },
    )
    .unwrap()
}

/// Connects `qa` on `a` and `qb` on `b`.
fn connect(a: &mut Context, qa: &Qp, b: &mut Context, qb: &Qp) {
    connect_with_rnr(a, qa, b, qb, RcConnection::new(0, [0; 16]).min_rnr_timer);
}

/// Connects `qa` on `a` and `qb` on `b`, the responders' RNR timer IBA code `rnr`.
fn connect_with_rnr(a: &mut Context, qa: &Qp, b: &mut Context, qb: &Qp, rnr: u8) {
    let (ga, gb) = (a.query_gid(1, 0).unwrap(), b.query_gid(1, 0).unwrap());
    let (ma, mb) = (a.mac(), b.mac());
    for (ctx, q, peer, gid, mac) in [(&mut *a, qa, qb, gb, mb), (&mut *b, qb, qa, ga, ma)] {
        ctx.init_rc(q, access::REMOTE).unwrap();
        let c = RcConnection {
            dmac: mac,
            min_rnr_timer: rnr,
            ..RcConnection::new(peer.qp_num(), gid)
        };
        ctx.connect_rc(q, &c).unwrap();
    }
}

/// The offloaded WRITE's answer: A writes `len` bytes of `src` at `addr` with `rkey` on a fresh
/// connection to B (an error ends a connection) and waits for its completion.
#[allow(clippy::too_many_arguments)]
fn offloaded(
    card: &Card,
    (a, pa, cqa, src): (&mut Context, &Pd, &mut Cq, &Mr),
    (b, pb, cqb): (&mut Context, &Pd, &Cq),
    rkey: u32,
    addr: u64,
    len: usize,
) -> WcStatus {
    let mut qa = qp(a, pa, cqa, QpCap::default());
    let qb = qp(b, pb, cqb, QpCap::default());
    connect(a, &qa, b, &qb);
    let sge = [src.sge(0, len)];
    let wr = SendWr::new(
        7,
        WrOpcode::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        &sge,
    );
    qa.post_send(&[wr]).unwrap();
    let mut wc = [Wc::EMPTY; 4];
    for _ in 0..10_000 {
        card.poll();
        if cqa.poll(&mut wc) > 0 {
            return wc[0].status;
        }
    }
    panic!("no completion");
}

/// A WRITE to try both ways: what it is, its key, address and length, and the uMTT's answer.
type Case = (&'static str, u32, u64, usize, Result<(), Refusal>);

#[test]
fn the_umtt_refuses_what_the_rnic_refuses_and_places_what_it_places() {
    let (card, mut a, mut b) = contexts();
    let pa = a.alloc_pd().unwrap();
    let mut cqa = a.create_cq(64, None).unwrap();
    let src = a.reg_mr(&pa, 4096, access::LOCAL_WRITE).unwrap();
    let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    src.write(0, &data);

    let pb = b.alloc_pd().unwrap();
    let cqb = b.create_cq(64, None).unwrap();
    let open = b
        .reg_mr(&pb, 8192, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let read_only = b.reg_mr(&pb, 4096, access::REMOTE_READ).unwrap();
    let other_pd = b.alloc_pd().unwrap();
    let foreign = b
        .reg_mr(&other_pd, 4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let gone = b
        .reg_mr(&pb, 4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let (gone_key, gone_addr) = (gone.rkey(), gone.addr());
    b.dereg_mr(gone).unwrap();

    let cases: [Case; 6] = [
        ("in range", open.rkey(), open.addr() + 100, 64, Ok(())),
        (
            "unknown key",
            0x00ab_cdef,
            open.addr(),
            16,
            Err(Refusal::UnknownKey),
        ),
        (
            "deregistered",
            gone_key,
            gone_addr,
            16,
            Err(Refusal::UnknownKey),
        ),
        (
            "another PD",
            foreign.rkey(),
            foreign.addr(),
            16,
            Err(Refusal::OtherPd),
        ),
        (
            "no write right",
            read_only.rkey(),
            read_only.addr(),
            16,
            Err(Refusal::NoWriteRight),
        ),
        (
            "past the end",
            open.rkey(),
            open.addr() + 8180,
            16,
            Err(Refusal::OutOfRange),
        ),
    ];
    for (what, rkey, addr, len, want) in cases {
        let umtt = b.umtt().check(pb.handle, rkey, addr, len as u64);
        assert_eq!(umtt, want, "{what}: the uMTT");
        let rnic = offloaded(
            &card,
            (&mut a, &pa, &mut cqa, &src),
            (&mut b, &pb, &cqb),
            rkey,
            addr,
            len,
        );
        let expected = umtt.map_or_else(|r| r.status(), |()| WcStatus::Success);
        assert_eq!(rnic, expected, "{what}: the RNIC answers as the uMTT");
    }

    // Where both take it, the same bytes: the RNIC placed the 64 bytes at +100; the unloaded
    // copy, through a staging slot, places them at +4196.
    let mut slot = [0u8; 128];
    let n = write_slot(&mut slot, open.addr() + 4196, &data).unwrap();
    let (dest, payload) = read_slot(&slot, n).unwrap();
    b.umtt()
        .place(pb.handle, open.rkey(), dest, payload)
        .unwrap();
    let (mut offloaded, mut unloaded) = ([0u8; 64], [0u8; 64]);
    open.read(100, &mut offloaded);
    open.read(4196, &mut unloaded);
    assert_eq!(offloaded, unloaded);
    assert_eq!(&unloaded[..], &data[..]);
    // A refused placement writes nothing.
    assert_eq!(
        b.umtt()
            .place(pb.handle, open.rkey(), open.addr() + 8190, &data),
        Err(Refusal::OutOfRange)
    );
}

/// Sizes of the end-to-end run: staging slots, a WRITE's bytes, how many WRITEs.
const SLOTS: u32 = 4;
const WRITE: usize = 16;
const WRITES: usize = 240;

/// A pair of QPs ready for the unload path: A the initiator, B the target.
fn unload_pair(a: &mut Context, b: &mut Context) -> (Pd, Cq, Qp, Pd, Cq, Qp) {
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let make = |ctx: &mut Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(256, None).unwrap();
        let qp = qp(ctx, &pd, &cq, cap);
        (pd, cq, qp)
    };
    let (pa, cqa, qa) = make(a);
    let (pb, cqb, qb) = make(b);
    connect(a, &qa, b, &qb);
    (pa, cqa, qa, pb, cqb, qb)
}

/// Runs the card a while, then lets B's unload path take what completed and drains A's CQ.
fn pump(card: &Card, b: &Context, qb: &mut Qp, cqb: &mut Cq, t: &mut UnloadTarget, cqa: &mut Cq) {
    for _ in 0..64 {
        card.poll();
    }
    let mut wc = [Wc::EMPTY; 32];
    loop {
        let n = cqb.poll(&mut wc);
        if n == 0 {
            break;
        }
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            if UnloadTarget::is_unloaded(w) {
                t.take(b, qb, w).unwrap();
            }
        }
    }
    loop {
        let n = cqa.poll(&mut wc);
        if n == 0 {
            break;
        }
        // Unloaded WRITEs complete at the initiator as sent, refused or not (no parity yet).
        assert!(wc[..n].iter().all(|w| w.status == WcStatus::Success));
    }
}

/// End to end: 240 16-byte WRITEs to distinct places of B's region, each offloaded or unloaded
/// at random, through a 4-slot staging buffer. B's memory ends byte-identical to the same
/// WRITEs all offloaded; the initiator never has more than 4 unloaded WRITEs untaken (a fifth
/// waits: QueueFull) so no slot is overwritten before B took it; a WRITE with a key B never
/// registered is dropped and counted by B's uMTT check, the rest go on.
#[test]
fn unloaded_and_offloaded_writes_leave_the_same_memory() {
    // `lazy`: B's CPU runs only when A is held back, so A fills every slot first.
    let run = |unload_share: u32, lazy: bool| {
        let (card, mut a, mut b) = contexts();
        let (pa, mut cqa, mut qa, pb, mut cqb, mut qb) = unload_pair(&mut a, &mut b);
        let mem = b
            .reg_mr(
                &pb,
                WRITES * WRITE,
                access::LOCAL_WRITE | access::REMOTE_WRITE,
            )
            .unwrap();
        let source = a.reg_mr(&pa, WRITES * WRITE, access::LOCAL_WRITE).unwrap();
        let mut target = UnloadTarget::new(&mut b, &pb, &mut qb, SLOTS, 64).unwrap();
        let mut init = UnloadInitiator::new(&mut a, &pa, target.offer()).unwrap();
        target.set_credit_word(init.credit_word());
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut blocked = 0;
        for i in 0..WRITES {
            // Distinct places in a scrambled order; data that names its WRITE.
            let place = (i * 97) % WRITES;
            let data: Vec<u8> = (0..WRITE).map(|k| (i * 31 + k) as u8).collect();
            let dest = mem.addr() + (place * WRITE) as u64;
            if next() % 100 < u64::from(unload_share) {
                loop {
                    match init.post(&mut qa, i as u64, dest, mem.rkey(), &data) {
                        Ok(()) => break,
                        Err(VerbsError::QueueFull) => {
                            assert_eq!(init.in_flight(), u64::from(SLOTS));
                            blocked += 1;
                            pump(&card, &b, &mut qb, &mut cqb, &mut target, &mut cqa);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            } else {
                let mut wr = SendWr::new(
                    i as u64,
                    WrOpcode::RdmaWrite {
                        remote_addr: dest,
                        rkey: mem.rkey(),
                    },
                    &[],
                );
                wr.inline = true;
                source.write(i * WRITE, &data);
                let sge = [source.sge(i * WRITE, WRITE)];
                wr.sg_list = &sge;
                qa.post_send(&[wr]).unwrap();
            }
            if !lazy {
                pump(&card, &b, &mut qb, &mut cqb, &mut target, &mut cqa);
            }
        }
        // One unloaded WRITE with a key B never registered: dropped at B.
        let stray = mem.addr();
        while init
            .post(&mut qa, 999, stray, 0x00ab_cdef, &[0xee; WRITE])
            .is_err()
        {
            pump(&card, &b, &mut qb, &mut cqb, &mut target, &mut cqa);
        }
        for _ in 0..8 {
            pump(&card, &b, &mut qb, &mut cqb, &mut target, &mut cqa);
        }
        let mut bytes = vec![0u8; WRITES * WRITE];
        mem.read(0, &mut bytes);
        (bytes, target.placed, target.refused, blocked)
    };
    let (offloaded, placed, refused, _) = run(0, false);
    assert_eq!((placed, refused), (0, 1));
    let (mixed, placed, refused, _) = run(50, false);
    assert!(placed > 80 && refused == 1, "{placed} {refused}");
    assert!(mixed == offloaded, "byte-identical target memory");
    let (unloaded, placed, _, blocked) = run(100, true);
    assert_eq!(placed, WRITES as u64);
    assert!(blocked > 0, "back-pressure held the initiator");
    assert!(unloaded == offloaded);
}

/// uRDMA's in-RNIC unload path (§5, `docs/nic-interface.md` §18), end to end on one card's two
/// functions: B's QP has a staging ring of 8 slots of 64 bytes.
/// * A WRITE to a page whose translation B's NIC holds (a READ fetched it) is placed at once,
///   no completion at B; one to a page it does not hold is staged — B's CQ has it, with its
///   length and rkey, and the page is untouched until B's CPU takes it. A's completion says
///   success either way.
/// * A READ of the staged page waits (RNR NAK) until B has taken the slot, then returns the
///   WRITE's bytes: the offload path's ordering.
/// * Twelve WRITEs to cold pages while B takes nothing: eight fill the ring, the rest wait; once
///   B takes, every one lands and the region holds exactly what offloaded WRITEs would leave.
#[test]
fn the_nic_stages_writes_it_cannot_translate_and_keeps_their_order() {
    use fld_host::verbs::unload::StagingRing;
    let (card, mut a, mut b) = contexts();
    let pa = a.alloc_pd().unwrap();
    let mut cqa = a.create_cq(256, None).unwrap();
    let src = a.reg_mr(&pa, 4096, access::LOCAL_WRITE).unwrap();
    let pb = b.alloc_pd().unwrap();
    let mut cqb = b.create_cq(256, None).unwrap();
    let pages = 32usize;
    let region = b.reg_mr(&pb, pages * 4096, access::ALL).unwrap();
    let cap = QpCap {
        max_send_wr: 64,
        ..QpCap::default()
    };
    let mut qa = qp(&mut a, &pa, &cqa, cap);
    let qb = qp(&mut b, &pb, &cqb, cap);
    // A 10 us RNR timer: requests that wait for B's CPU come again soon.
    connect_with_rnr(&mut a, &qa, &mut b, &qb, 1);
    // Refused shapes first: slots of 16 bytes, 2^16 slots.
    for (log_slots, log_bytes) in [(3, 4), (16, 6)] {
        let e = StagingRing::new(&mut b, &pb, &qb, log_slots, log_bytes).err();
        assert!(format!("{e:?}").contains("BadParam"), "{e:?}");
    }
    let mut ring = StagingRing::new(&mut b, &pb, &qb, 3, 6).unwrap();

    let mut seq = 0u64;
    let mut post = |qa: &mut Qp, op: WrOpcode, at: usize, len: usize| {
        seq += 1;
        let sge = [src.sge(at, len)];
        qa.post_send(&[SendWr::new(seq, op, &sge)]).unwrap();
        seq
    };
    let page = |p: usize| region.addr() + (p * 4096) as u64;
    let (rkey, wr) = (region.rkey(), |p: usize, off: u64| WrOpcode::RdmaWrite {
        remote_addr: page(p) + off,
        rkey: region.rkey(),
    });
    // Polls the card until A has `n` completions; returns them.
    let await_a = |cqa: &mut Cq, n: usize| -> Vec<Wc> {
        let mut got = Vec::new();
        let mut wc = [Wc::EMPTY; 16];
        for _ in 0..200_000 {
            card.poll();
            let k = cqa.poll(&mut wc);
            got.extend_from_slice(&wc[..k]);
            if got.len() >= n {
                return got;
            }
        }
        panic!("{} of {n} completions", got.len());
    };
    let staged_at_b = |cqb: &mut Cq| -> Vec<Wc> {
        let mut wc = [Wc::EMPTY; 16];
        let n = cqb.poll(&mut wc);
        wc[..n].to_vec()
    };

    // A READ of page 0 brings its translation on chip.
    post(
        &mut qa,
        WrOpcode::RdmaRead {
            remote_addr: page(0),
            rkey,
        },
        2048,
        16,
    );
    await_a(&mut cqa, 1);
    src.write(0, b"hit: placed now!");
    post(&mut qa, wr(0, 32), 0, 16);
    assert_eq!(await_a(&mut cqa, 1)[0].status, WcStatus::Success);
    let mut got = [0u8; 16];
    region.read(32, &mut got);
    assert_eq!(&got, b"hit: placed now!");
    assert!(staged_at_b(&mut cqb).is_empty());

    src.write(16, b"miss: staged....");
    post(&mut qa, wr(5, 8), 16, 16);
    assert_eq!(await_a(&mut cqa, 1)[0].status, WcStatus::Success);
    let staged = staged_at_b(&mut cqb);
    assert_eq!(staged.len(), 1);
    assert!(StagingRing::is_staged(&staged[0]));
    assert_eq!((staged[0].byte_len, staged[0].imm_data), (16, Some(rkey)));
    region.read(5 * 4096 + 8, &mut got);
    assert_eq!(got, [0; 16], "placed before B's CPU took it");

    // The READ waits for B's CPU.
    let read = post(
        &mut qa,
        WrOpcode::RdmaRead {
            remote_addr: page(5) + 8,
            rkey,
        },
        1024,
        16,
    );
    let mut wc = [Wc::EMPTY; 4];
    for _ in 0..2000 {
        card.poll();
        assert_eq!(cqa.poll(&mut wc), 0, "the READ overtook the staged WRITE");
    }
    let rnr = b.qp_counters(&qb).unwrap();
    let rnr = rnr.iter().find(|c| c.0 == "rnr_naks_sent").unwrap().1;
    assert!(rnr > 0);
    assert_eq!(ring.take(&b, &staged[0]), None);
    ring.release(&qb);
    let done = await_a(&mut cqa, 1);
    assert_eq!((done[0].wr_id, done[0].status), (read, WcStatus::Success));
    src.read(1024, &mut got);
    assert_eq!(&got, b"miss: staged....");

    // Twelve cold pages, B taking nothing: the ring fills, the rest wait.
    let mut expected = vec![0u8; pages * 4096];
    region.read(0, &mut expected);
    for i in 0..12usize {
        let bytes: Vec<u8> = (0..24).map(|k| (i * 31 + k) as u8 ^ 0xa5).collect();
        src.write(64 * i, &bytes);
        post(&mut qa, wr(10 + i, 100), 64 * i, 24);
        expected[(10 + i) * 4096 + 100..][..24].copy_from_slice(&bytes);
    }
    for _ in 0..5000 {
        card.poll();
    }
    let first = staged_at_b(&mut cqb);
    assert_eq!(first.len(), 8, "a full ring takes no more");
    let mut taken = 0;
    let mut pending = first;
    let mut done = 0;
    for _ in 0..200_000 {
        for w in pending.drain(..) {
            assert_eq!(ring.take(&b, &w), None);
            taken += 1;
        }
        ring.release(&qb);
        card.poll();
        pending = staged_at_b(&mut cqb);
        done += cqa.poll(&mut wc);
        if taken == 12 && done == 12 {
            break;
        }
    }
    assert_eq!((taken, done), (12, 12));
    let mut now = vec![0u8; pages * 4096];
    region.read(0, &mut now);
    assert!(
        now == expected,
        "the region differs from the offload path's"
    );
    assert_eq!((ring.placed, ring.refused), (13, 0));
}

/// Completion and ordering parity on the software path (`fld_host::verbs::urdma::UnloadQp`):
/// the application posts, on its own QP, a WRITE the decision module unloads, one with a key
/// B never registered (unloaded too), a WRITE too large to unload, and a READ of the first
/// WRITE's bytes. Its CQ shows exactly what the offload path would: four completions in post
/// order, the bad key's a remote access error, and the READ returns the unloaded WRITE's bytes
/// — it was held back (QueueFull) until B's CPU had placed them. The secondary QP's own
/// completions never show; an unsignalled unloaded WRITE completes silently.
#[test]
fn an_unload_qp_completes_and_orders_as_the_offload_path() {
    use fld_host::verbs::decision::{Decider, Policy};
    use fld_host::verbs::urdma::UnloadQp;
    let (card, mut a, mut b) = contexts();
    // The application's QPs, and a second pair for the unload events.
    // The secondary QPs are in the application's PDs: the uMTT checks an unloaded WRITE as
    // the RNIC would check it arriving on the application's QP.
    let (pa, mut cqa, mut qa, pb, _cqb, _qb) = unload_pair(&mut a, &mut b);
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let side_cqa = a.create_cq(256, None).unwrap();
    let mut side_cqb = b.create_cq(256, None).unwrap();
    let side_qa = qp(&mut a, &pa, &side_cqa, cap);
    let mut side_qb = qp(&mut b, &pb, &side_cqb, cap);
    connect(&mut a, &side_qa, &mut b, &side_qb);
    let mem = b.reg_mr(&pb, 8192, access::ALL).unwrap();
    let mut target = UnloadTarget::new(&mut b, &pb, &mut side_qb, 8, 64).unwrap();
    let init = UnloadInitiator::new(&mut a, &pa, target.offer()).unwrap();
    target.set_credit_word(init.credit_word());
    target.set_credit_every(1);
    let mut uqp = UnloadQp::new(
        &qa,
        side_qa,
        side_cqa,
        init,
        Decider::new(Policy::Unload, 64),
    );

    let src = a.reg_mr(&pa, 8192, access::ALL).unwrap();
    src.write(0, b"unloaded, placed by B's CPU.....");
    src.write(64, &[0x5a; 1024]);
    let at = |off: u64| mem.addr() + off;
    let small = [src.sge(0, 32)];
    let large = [src.sge(64, 1024)];
    let back = [src.sge(4096, 32)];
    let wrs = [
        SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: at(100),
                rkey: mem.rkey(),
            },
            &small,
        ),
        SendWr {
            signaled: false,
            ..SendWr::new(
                2,
                WrOpcode::RdmaWrite {
                    remote_addr: at(200),
                    rkey: mem.rkey(),
                },
                &small,
            )
        },
        SendWr::new(
            3,
            WrOpcode::RdmaWrite {
                remote_addr: at(300),
                rkey: 0xdead_beef,
            },
            &small,
        ),
        SendWr::new(
            4,
            WrOpcode::RdmaWrite {
                remote_addr: at(2048),
                rkey: mem.rkey(),
            },
            &large,
        ),
        SendWr::new(
            5,
            WrOpcode::RdmaRead {
                remote_addr: at(100),
                rkey: mem.rkey(),
            },
            &back,
        ),
    ];
    let mut next = 0;
    let mut got = Vec::new();
    let mut held_back = 0;
    let mut wc = [Wc::EMPTY; 16];
    for round in 0..100_000 {
        if next < wrs.len() {
            match uqp.post_send(&a, &mut qa, &wrs[next..next + 1]) {
                Ok(()) => next += 1,
                Err(VerbsError::QueueFull) => held_back += 1,
                Err(e) => panic!("{e}"),
            }
        }
        card.poll();
        // B's CPU is slow: it takes what its staging QP received every 500th round, long
        // after a READ posted at once would have been answered.
        if round % 500 != 499 {
            let n = uqp.poll(&mut cqa, &mut wc);
            got.extend(wc[..n].iter().map(|w| (w.wr_id, w.status)));
            continue;
        }
        let n = side_cqb.poll(&mut wc);
        for w in &wc[..n] {
            if UnloadTarget::is_unloaded(w) {
                target.take(&b, &mut side_qb, w).unwrap();
            }
        }
        let n = uqp.poll(&mut cqa, &mut wc);
        got.extend(wc[..n].iter().map(|w| (w.wr_id, w.status)));
        if got.len() == 4 && next == wrs.len() {
            break;
        }
    }
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (3, WcStatus::RemAccessErr),
            (4, WcStatus::Success),
            (5, WcStatus::Success),
        ]
    );
    assert!(
        held_back > 0,
        "the large WRITE waited for the unloaded ones"
    );
    let mut read = [0u8; 32];
    src.read(4096, &mut read);
    assert_eq!(&read, b"unloaded, placed by B's CPU.....");
    let mut placed = [0u8; 32];
    mem.read(200, &mut placed);
    assert_eq!(&placed, b"unloaded, placed by B's CPU.....");
    let mut large = [0u8; 1024];
    mem.read(2048, &mut large);
    assert_eq!(large, [0x5a; 1024]);
    assert_eq!((target.placed, target.refused), (2, 1));
    assert_eq!(uqp.outstanding(), 0);
}
