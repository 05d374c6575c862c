//! A recycled mock host ([`MockHost::recycle`]) is indistinguishable from a freshly built one:
//! the same script, run on a fresh card and on a card that a messy run left in every kind of
//! state, gives the same frames, completions, counters, interrupts and host memory, byte for
//! byte. The fuzz targets rely on it: a finding on a recycled card reproduces on a fresh one.
//! Likewise a host returned to a snapshot of its brought-up state ([`MockHost::restore`])
//! behaves as one brought up by the same commands.

use crate::card::CardConfig;
use crate::fld::memory_model::MemoryParams;
use crate::mock::{MockHost, MockPort, MockQp, MOCK_IOVA};
use fld_abi::fld::Stat;

const MAPPED: usize = 4 << 20;

fn card() -> MockHost {
    MockHost::card(
        CardConfig {
            fld: MemoryParams {
                tx_queues: 4,
                ..MemoryParams::table_2a()
            },
            ..Default::default()
        },
        MAPPED,
    )
}

fn frame(h: &MockHost, from: u16, to: u16, len: usize, seed: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|k| seed.wrapping_add(k as u8)).collect();
    f[..6].copy_from_slice(&h.nic_mac(to));
    f[6..12].copy_from_slice(&h.nic_mac(from));
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f
}

/// Ethernet both ways, an error completion, RDMA SEND/WRITE/READ between the functions and an
/// FLD-E echo, with `seed` in every payload. Returns everything a driver could observe: what it
/// received and read, and the whole of host memory.
fn script(h: &MockHost, seed: u8) -> (Vec<String>, Vec<u8>) {
    let mut seen = Vec::new();
    let mut a = h.open_port(0);
    let mut b = h.open_port(1);
    for len in [60, 333, 1514] {
        a.send(h, &frame(h, 0, 1, len, seed), 3);
        b.send(h, &frame(h, 1, 0, len, seed ^ 0x55), 0);
    }
    h.run(2000);
    while let Some(r) = b.receive(h) {
        seen.push(format!("b {r:?}"));
    }
    while let Some(r) = a.receive(h) {
        seen.push(format!("a {r:?}"));
    }
    // A WQE with a gather entry outside every map: an error completion, the SQ in error.
    let wqe = fld_abi::nic::SendWqe {
        inline_header: &frame(h, 0, 1, 14, seed),
        gather: &[(MOCK_IOVA - 4096, 64)],
        cs_flags: 0,
        signal: true,
        resume_table: None,
    };
    a.sq.post(h, &wqe);
    a.sq.ring(h, 0);
    h.run(100);
    while let Some(c) = a.tx_cq.poll_cqe(h) {
        seen.push(format!("tx {c:?}"));
    }

    let msg: Vec<u8> = (0..3000u32).map(|i| (i as u8).wrapping_mul(seed)).collect();
    let (mut qa, mut qb) = h.post_rdma_exchange(&msg);
    h.run(3000);
    while let Some(c) = qa.cq.poll_cqe(h) {
        seen.push(format!("qa {c:?}"));
    }
    while let Some(c) = qb.cq.poll_cqe(h) {
        seen.push(format!("qb {c:?}"));
    }
    // The QP-context and translation caches a reset keeps: emptied, counted from zero.
    seen.push(format!("caches {:?}", h.nic.cache_counters()));

    let Some(fld) = h.fld.clone() else {
        let memory = h.observe(&mut seen);
        assert!(h.guard_intact());
        return (seen, memory);
    };
    fld.set_accelerator(Box::new(crate::accel::Echo::new(0, 16)));
    h.bind_fld(1);
    let mut client = h.open_port(1);
    client.send(h, &frame(h, 1, 0, 200, seed), 0);
    h.run(2000);
    seen.push(format!("echo {:?}", client.receive(h)));
    seen.push(format!(
        "fld {} {}",
        fld.stat(Stat::RxPackets),
        fld.stat(Stat::TxPackets)
    ));

    let memory = h.observe(&mut seen);
    assert!(h.guard_intact());
    (seen, memory)
}

fn assert_same(fresh: &(Vec<String>, Vec<u8>), recycled: &(Vec<String>, Vec<u8>)) {
    assert_eq!(fresh.0.len(), recycled.0.len());
    for (f, r) in fresh.0.iter().zip(&recycled.0) {
        assert_eq!(f, r);
    }
    let differs = fresh.1.iter().zip(&recycled.1).position(|(f, r)| f != r);
    assert_eq!(differs, None, "first host memory byte that differs");
}

/// Leaves the card in every state a fuzz input can: objects of every kind alive, queues in
/// error, a pinned clock, a looped uplink, doorbell pages and FLD registers scribbled on,
/// host memory written all over.
fn mess_up(h: &mut MockHost) {
    script(h, 0x3c);
    h.nic.set_clock(Some(123_456_789));
    h.nic
        .set_uplink(Box::new(crate::wire::LoopbackWire::new(16)));
    let mut a = h.open_port(0);
    // To a MAC no vPort has: out on the looped uplink, and back in.
    let mut f = frame(h, 0, 1, 90, 1);
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    a.send(h, &f, 0);
    let doorbells = h.bar(h.nic_fid(1), fld_abi::nic::BAR_DOORBELL);
    for k in 0..64u64 {
        h.mmio_write32(
            (doorbells + k * 0x1_2344 % (8 << 20)) & !3,
            0xdead_0000 | k as u32,
        );
    }
    if h.fld.is_some() {
        h.set_fld_reg(fld_abi::fld::reg::TXQ_BASE + 16, 0xffff_ffff);
    }
    h.write(MOCK_IOVA + 4096, &[0xaa; 8192]);
    // Far beyond what the allocator handed out, as a stray device write lands.
    h.write(MOCK_IOVA + MAPPED as u64 - 5000, &[0x55; 5000]);
    h.run(500);
    // Function 0 loses memory decode and bus mastering; function 1's interrupts are masked.
    use fld_abi::pci::{MSIX_CTRL_ENABLE, MSIX_CTRL_FUNCTION_MASK, OFF_COMMAND, OFF_MSIX_CONTROL};
    h.fabric
        .config_write(h.nic_fid(0), OFF_COMMAND as u64, &0u16.to_le_bytes());
    let masked = MSIX_CTRL_ENABLE | MSIX_CTRL_FUNCTION_MASK;
    h.fabric
        .config_write(h.nic_fid(1), OFF_MSIX_CONTROL as u64, &masked.to_le_bytes());
}

#[test]
fn a_recycled_host_behaves_as_a_fresh_one() {
    let fresh = script(&card(), 7);
    let mut used = card();
    mess_up(&mut used);
    used.recycle();
    assert_same(&fresh, &script(&used, 7));
    // The script does see traffic (a test that could not fail would prove nothing).
    let lines = &fresh.0;
    assert!(
        lines.iter().any(|l| l.starts_with("echo Some")),
        "{:?}",
        &lines[..4]
    );
    assert!(
        lines.iter().filter(|l| l.starts_with("qa ")).count() == 3,
        "{lines:?}"
    );
    // And again: recycling twice in a row.
    mess_up(&mut used);
    used.recycle();
    assert_same(&fresh, &script(&used, 7));
}

fn nic() -> MockHost {
    MockHost::nic(crate::nic::NicConfig::default(), MAPPED)
}

/// What a fuzz target brings up before its input, by commands, posts and register writes
/// alone: a port per function, FLD bound to function 1 (on a card), and a connected RDMA QP
/// pair with a receive and three WQEs posted, not yet run.
fn bring_up(h: &MockHost) -> (MockPort, MockPort, MockQp, MockQp) {
    let a = h.open_port(0);
    let b = h.open_port(1);
    if h.fld.is_some() {
        h.bind_fld(1);
    }
    let msg: Vec<u8> = (0..2500u32).map(|i| (i * 11) as u8).collect();
    let (qa, qb) = h.post_rdma_exchange(&msg);
    (a, b, qa, qb)
}

/// Runs what `bring_up` posted, moves frames over its ports, then runs [`script`].
fn after_bring_up(
    h: &MockHost,
    (mut a, mut b, mut qa, mut qb): (MockPort, MockPort, MockQp, MockQp),
) -> (Vec<String>, Vec<u8>) {
    let mut seen = Vec::new();
    h.run(3000);
    while let Some(c) = qa.cq.poll_cqe(h) {
        seen.push(format!("qa {c:?}"));
    }
    while let Some(c) = qb.cq.poll_cqe(h) {
        seen.push(format!("qb {c:?}"));
    }
    a.send(h, &frame(h, 0, 1, 700, 3), 0);
    h.run(100);
    seen.push(format!("b {:?}", b.receive(h)));
    if let Some(fld) = &h.fld {
        // An FLD-E echo through the binding the bring-up made (the accelerator is plugged in,
        // not kept).
        fld.set_accelerator(Box::new(crate::accel::Echo::new(0, 16)));
        let mut client = h.open_port(1);
        client.send(h, &frame(h, 1, 0, 300, 4), 0);
        h.run(2000);
        seen.push(format!("bound echo {:?}", client.receive(h)));
    }
    let (more, memory) = script(h, 9);
    seen.extend(more);
    (seen, memory)
}

#[test]
fn a_restored_host_behaves_as_one_brought_up_by_commands() {
    for host in [nic, card] {
        let fresh = host();
        let objects = bring_up(&fresh);
        let want = after_bring_up(&fresh, objects);
        // What was brought up moves traffic: the three WQEs complete, the port delivers.
        assert!(
            want.0[..3].iter().all(|l| l.starts_with("qa ")),
            "{:?}",
            &want.0[..5]
        );
        assert!(
            want.0.iter().any(|l| l.starts_with("b Some")),
            "{:?}",
            want.0
        );
        let echoed = want.0.iter().any(|l| l.starts_with("bound echo Some"));
        assert_eq!(echoed, fresh.fld.is_some(), "{:?}", want.0);

        let mut used = host();
        mess_up(&mut used);
        used.recycle();
        let objects = bring_up(&used);
        let snapshot = used.snapshot().expect("a brought-up card can be kept");
        // Returned to again and again, after runs that leave the card in every state.
        for _ in 0..2 {
            mess_up(&mut used);
            used.restore(&snapshot);
            assert_same(&want, &after_bring_up(&used, objects.clone()));
        }
    }
}

/// A snapshot taken with traffic under way — a pass run after the posts: packets sent and
/// acknowledged, completions written, a WQE held between passes — returns to that point too.
#[test]
fn a_snapshot_taken_mid_traffic_returns_to_it() {
    let mid = |h: &MockHost| {
        let objects = bring_up(h);
        h.run(1);
        objects
    };
    let fresh = nic();
    let objects = mid(&fresh);
    let want = after_bring_up(&fresh, objects);
    let mut used = nic();
    mess_up(&mut used);
    used.recycle();
    let objects = mid(&used);
    let snapshot = used.snapshot().expect("kept: no walk in the flow cache");
    mess_up(&mut used);
    used.restore(&snapshot);
    assert_same(&want, &after_bring_up(&used, objects));
}

/// A card with a frame inside FLD (received, no accelerator to take it) cannot be kept.
#[test]
fn a_card_with_a_packet_in_fld_is_not_kept() {
    let h = card();
    h.bind_fld(1);
    let mut client = h.open_port(1);
    assert!(h.snapshot().is_some(), "quiescent");
    client.send(&h, &frame(&h, 1, 0, 200, 5), 0);
    h.run(1000);
    assert!(h.snapshot().is_none());
}

/// A snapshot names the host it was taken of: its maps and memory belong to that host.
#[test]
#[should_panic(expected = "a snapshot of another host")]
fn a_snapshot_is_restored_into_its_own_host_only() {
    let snapshot = nic().snapshot().expect("kept");
    nic().restore(&snapshot);
}
