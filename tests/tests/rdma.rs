//! RoCEv2 RC between two NIC functions of one card (their frames cross the eSwitch): every
//! operation byte-exact at sizes from 0 B to 1 MiB, completions as the verbs define them, and
//! the answers the spec gives to bad input.

use std::sync::Arc;

use fld_abi::nic::*;
use fld_abi::wire::roce::ipv4_gid;
use fld_device::card::{Card, CardConfig};
use fld_driver::inprocess::{InProcessDevice, InProcessHost};
use fld_driver::nic::{CompletionQueue, EventQueue, NicDriver};
use fld_driver::rdma::{MemoryRegion, QpCaps, RcQueuePair};
use fld_driver::{DmaBuffer, PciDevice};

/// Bytes of each side's registered buffer.
const BUF: usize = 4 << 20;

struct End {
    dev: Arc<InProcessDevice>,
    nic: NicDriver,
    _eq: EventQueue,
    cq: CompletionQueue,
    pd: u32,
    qp: RcQueuePair,
    buf: DmaBuffer,
    mr: MemoryRegion,
    ip: [u8; 4],
}

impl End {
    fn va(&self, off: usize) -> u64 {
        self.mr.addr + off as u64
    }
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.va(off),
            length: len as u32,
            lkey: self.mr.key,
        }
    }
    fn fill(&self, off: usize, data: &[u8]) {
        self.buf.write(off, data);
    }
    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.buf.read(off, &mut v);
        v
    }
}

struct Pair {
    card: Arc<Card>,
    _host: Arc<InProcessHost>,
    a: End,
    b: End,
}

fn open_end(host: &Arc<InProcessHost>, card: &Arc<Card>, i: u16, access_flags: u32) -> End {
    let dev = host.device(card.nic.function_id(i).unwrap());
    let mut nic = NicDriver::probe(dev.clone()).unwrap();
    dev.enable_msix(2).unwrap();
    let eq = nic.create_eq(6, 0).unwrap();
    let cq = nic.create_cq(&eq, 12).unwrap();
    let pd = nic.create_pd().unwrap();
    let buf = dev.dma_alloc(BUF).unwrap();
    let mr = nic.register_mr(pd, &buf, access_flags).unwrap();
    let ip = [10, 0, 0, 1 + i as u8];
    let mac = nic.mac();
    nic.set_roce_address(0, Some((ipv4_gid(ip), mac))).unwrap();
    let qp = nic
        .create_qp(
            pd,
            &cq,
            &cq,
            None,
            QpCaps {
                log_sq_size: 10,
                log_rq_size: 10,
                max_recv_sge: 4,
                signal_all: false,
            },
        )
        .unwrap();
    End {
        dev,
        nic,
        _eq: eq,
        cq,
        pd,
        qp,
        buf,
        mr,
        ip,
    }
}

/// Attributes that take a QP from RESET to RTS towards `peer`.
fn connect(
    me: &mut End,
    peer_qpn: u32,
    peer_ip: [u8; 4],
    peer_mac: [u8; 6],
    my_psn: u32,
    peer_psn: u32,
) {
    use qp_attr::*;
    let mut a = QpAttr {
        qp_state: QpState::Init as u8,
        port: 1,
        ..Default::default()
    };
    a.access_flags
        .set(access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC);
    me.nic
        .modify_qp(me.qp.qpn, STATE | PKEY_INDEX | PORT | ACCESS_FLAGS, &a)
        .unwrap();
    a.qp_state = QpState::Rtr as u8;
    a.path_mtu = DEFAULT_PATH_MTU;
    a.dest_qpn.set(peer_qpn);
    a.rq_psn.set(peer_psn);
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.dgid = ipv4_gid(peer_ip);
    a.dmac = peer_mac;
    a.hop_limit = 64;
    me.nic
        .modify_qp(
            me.qp.qpn,
            STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            &a,
        )
        .unwrap();
    a.qp_state = QpState::Rts as u8;
    a.sq_psn.set(my_psn);
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    me.nic
        .modify_qp(
            me.qp.qpn,
            STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
            &a,
        )
        .unwrap();
}

fn pair() -> Pair {
    pair_with(access::ALL)
}

fn pair_with(b_access: u32) -> Pair {
    let card = Card::new(CardConfig::default());
    let host = InProcessHost::new(card.clone(), 64 << 20).unwrap();
    let mut a = open_end(&host, &card, 0, access::ALL);
    let mut b = open_end(&host, &card, 1, b_access);
    let (aq, bq, am, bm, aip, bip) = (a.qp.qpn, b.qp.qpn, a.nic.mac(), b.nic.mac(), a.ip, b.ip);
    // PSNs near the 24-bit wrap, so the sequences cross it.
    connect(&mut a, bq, bip, bm, 0xff_fff0, 0x00_0100);
    connect(&mut b, aq, aip, am, 0x00_0100, 0xff_fff0);
    Pair {
        card,
        _host: host,
        a,
        b,
    }
}

impl Pair {
    fn run(&self) {
        self.card.run_until_idle();
    }
}

/// Every CQE now in `cq`.
fn drain(cq: &mut CompletionQueue) -> Vec<Cqe> {
    let mut v = Vec::new();
    while let Some(c) = cq.poll() {
        v.push(c);
    }
    cq.update_ci();
    v
}

fn send_wqe<'a>(op: u8, sges: &'a [Sge], remote: Option<(u64, u32)>, imm: u32) -> RdmaWqe<'a> {
    RdmaWqe {
        opcode: op,
        signal: true,
        solicited: false,
        fence: false,
        imm,
        remote,
        atomic: None,
        data: WqeData::Gather(sges),
    }
}

/// A pattern that differs per size and offset.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7) as u8 ^ seed)
        .collect()
}

const SIZES: [usize; 12] = [
    0,
    1,
    3,
    255,
    1023,
    1024,
    1025,
    4096,
    9000,
    65536,
    300_001,
    1 << 20,
];

#[test]
fn send_of_every_size_arrives_byte_exact_with_its_completions() {
    let mut p = pair();
    for (n, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, n as u8);
        p.a.fill(0, &data);
        p.b.fill(0, &vec![0xee; len + 16]);
        // The receive buffer in two pieces, to cross a scatter boundary.
        let half = len / 2;
        let rs = [p.b.sge(0, half), p.b.sge(half, len - half + 16)];
        let rc = p.b.qp.post_recv(&rs).unwrap();
        p.b.qp.ring_recv_doorbell();
        let s = [p.a.sge(0, len)];
        let imm = n % 2 == 1;
        let op = if imm { WQE_OP_SEND_IMM } else { WQE_OP_SEND };
        let idx =
            p.a.qp
                .post_send(&send_wqe(op, &s, None, 0x1234_5600 + n as u32))
                .unwrap();
        p.a.qp.ring_send_doorbell();
        p.run();
        let tx = drain(&mut p.a.cq);
        assert_eq!(tx.len(), 1, "{len} B: one send completion");
        assert_eq!(
            (
                tx[0].opcode(),
                tx[0].syndrome,
                tx[0].wqe_counter.get(),
                tx[0].qn.get()
            ),
            (CQE_REQ, rdma_status::SUCCESS, idx, p.a.qp.qpn)
        );
        assert_eq!((tx[0].byte_count.get(), tx[0].wqe_opcode), (len as u32, op));
        assert_ne!(tx[0].flags & cqe_flags::QP, 0);
        let rx = drain(&mut p.b.cq);
        assert_eq!(rx.len(), 1, "{len} B: one receive completion");
        let want_op = if imm {
            CQE_RESP_SEND_IMM
        } else {
            CQE_RESP_SEND
        };
        assert_eq!(
            (rx[0].opcode(), rx[0].syndrome, rx[0].wqe_counter.get()),
            (want_op, rdma_status::SUCCESS, rc)
        );
        assert_eq!(rx[0].byte_count.get(), len as u32);
        if imm {
            assert_eq!(rx[0].imm.get(), 0x1234_5600 + n as u32);
        }
        assert!(p.b.read(0, len) == data, "{len} B: payload");
        assert_eq!(
            p.b.read(len, 16),
            vec![0xee; 16],
            "{len} B: nothing beyond it"
        );
    }
    let q = p.a.nic.query_qp(p.a.qp.qpn).unwrap();
    assert_eq!(q.counters.retransmitted.get(), 0);
    assert_eq!(
        q.next_psn.get(),
        q.unacked_psn.get(),
        "everything acknowledged"
    );
}

#[test]
fn write_read_and_atomics_of_every_size_are_byte_exact() {
    let mut p = pair();
    for (n, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 0x40 + n as u8);
        p.a.fill(0, &data);
        p.b.fill(BUF / 2, &vec![0; len]);
        let s = [p.a.sge(0, len)];
        p.a.qp
            .post_send(&send_wqe(
                WQE_OP_RDMA_WRITE,
                &s,
                Some((p.b.va(BUF / 2), p.b.mr.key)),
                0,
            ))
            .unwrap();
        // Read it back into another part of A's buffer.
        let r = [p.a.sge(BUF / 2, len)];
        p.a.fill(BUF / 2, &vec![0x55; len]);
        p.a.qp
            .post_send(&send_wqe(
                WQE_OP_RDMA_READ,
                &r,
                Some((p.b.va(BUF / 2), p.b.mr.key)),
                0,
            ))
            .unwrap();
        p.a.qp.ring_send_doorbell();
        p.run();
        let tx = drain(&mut p.a.cq);
        assert_eq!(tx.len(), 2, "{len} B");
        assert!(tx.iter().all(|c| c.opcode() == CQE_REQ && c.syndrome == 0));
        assert_eq!(tx[1].wqe_opcode, WQE_OP_RDMA_READ);
        assert_eq!(tx[1].byte_count.get(), len as u32);
        assert!(p.b.read(BUF / 2, len) == data, "{len} B written");
        assert!(p.a.read(BUF / 2, len) == data, "{len} B read back");
        assert!(
            drain(&mut p.b.cq).is_empty(),
            "a WRITE consumes no receive WQE"
        );
    }
    // WRITE with immediate consumes a receive WQE and reports the immediate.
    let rc = p.b.qp.post_recv(&[]).unwrap();
    p.b.qp.ring_recv_doorbell();
    let s = [p.a.sge(0, 5000)];
    p.a.qp
        .post_send(&send_wqe(
            WQE_OP_RDMA_WRITE_IMM,
            &s,
            Some((p.b.va(64), p.b.mr.key)),
            0xabcd,
        ))
        .unwrap();
    p.a.qp.ring_send_doorbell();
    p.run();
    let rx = drain(&mut p.b.cq);
    assert_eq!(rx.len(), 1);
    assert_eq!(
        (
            rx[0].opcode(),
            rx[0].imm.get(),
            rx[0].byte_count.get(),
            rx[0].wqe_counter.get()
        ),
        (CQE_RESP_WRITE_IMM, 0xabcd, 5000, rc)
    );
    drain(&mut p.a.cq);

    // Atomics: fetch-and-add twice, then compare-and-swap that hits and one that misses.
    p.b.fill(4096, &100u64.to_le_bytes());
    let target = (p.b.va(4096), p.b.mr.key);
    let ops = [
        (WQE_OP_ATOMIC_FA, 5u64, 0u64, 100u64),
        (WQE_OP_ATOMIC_FA, 7, 0, 105),
        (WQE_OP_ATOMIC_CS, 999, 112, 112),
        (WQE_OP_ATOMIC_CS, 1, 112, 999),
    ];
    for (i, (op, swap_add, compare, _)) in ops.iter().enumerate() {
        let s = [p.a.sge(8192 + 8 * i, 8)];
        p.a.qp
            .post_send(&RdmaWqe {
                opcode: *op,
                signal: true,
                solicited: false,
                fence: false,
                imm: 0,
                remote: Some(target),
                atomic: Some((*swap_add, *compare)),
                data: WqeData::Gather(&s),
            })
            .unwrap();
    }
    p.a.qp.ring_send_doorbell();
    p.run();
    let tx = drain(&mut p.a.cq);
    assert_eq!(tx.len(), 4);
    assert!(tx
        .iter()
        .all(|c| c.syndrome == 0 && c.byte_count.get() == 8));
    for (i, (_, _, _, original)) in ops.iter().enumerate() {
        assert_eq!(
            p.a.read(8192 + 8 * i, 8),
            original.to_le_bytes(),
            "atomic {i}"
        );
    }
    assert_eq!(p.b.read(4096, 8), 999u64.to_le_bytes());
}

#[test]
fn selective_signalling_and_inline_data() {
    let mut p = pair();
    for i in 0..10u32 {
        p.b.qp.post_recv(&[p.b.sge(i as usize * 64, 64)]).unwrap();
    }
    p.b.qp.ring_recv_doorbell();
    for i in 0..10u32 {
        let msg = format!("inline message {i}");
        p.a.qp
            .post_send(&RdmaWqe {
                opcode: WQE_OP_SEND,
                signal: i == 9,
                solicited: false,
                fence: false,
                imm: 0,
                remote: None,
                atomic: None,
                data: WqeData::Inline(msg.as_bytes()),
            })
            .unwrap();
    }
    p.a.qp.ring_send_doorbell();
    p.run();
    let tx = drain(&mut p.a.cq);
    assert_eq!(tx.len(), 1, "only the signalled WQE completes with a CQE");
    assert_eq!(tx[0].wqe_counter.get(), 9);
    let rx = drain(&mut p.b.cq);
    assert_eq!(rx.len(), 10);
    for (i, c) in rx.iter().enumerate() {
        let msg = format!("inline message {i}");
        assert_eq!(c.byte_count.get() as usize, msg.len());
        assert_eq!(p.b.read(i * 64, msg.len()), msg.as_bytes());
    }
}
