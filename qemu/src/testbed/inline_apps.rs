//! End-to-end workloads for the paper's two inline accelerators (§7, §8.2), each measured against
//! the host-CPU baseline doing the same work in the same run:
//!
//! - IP defragmentation: UDP datagrams fragmented at a 1450-byte MTU. Offloaded, the eSwitch
//!   steers only fragments to FLD and whole datagrams return to the host; the baseline receives
//!   the fragments on the host and reassembles them there with the same RFC 791/815 engine.
//! - IoT token authentication: CoAP messages carrying HS256 JWTs from several tenants, a quarter
//!   of them invalid and one in eight sent as IPv4 fragments. Offloaded, behind the fail-closed
//!   guard of `fld_host::guard`, the NIC tags each tenant's flow, fragments are reassembled by
//!   the defrag accelerator and authenticated whole, and only authenticated messages reach the
//!   host; the baseline receives everything, reassembles and verifies each token on the host.
//!
//! Both report byte-exact verification of what the host ended up with.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use fld_abi::fld::Stat;
use fld_abi::wire::coap::COAP_PORT;
use fld_abi::wire::{ethernet, udp_offsets, EthIpv4UdpRepr, EthernetFrame, Ipv4Packet};
use fld_device::accel::defrag::{Config as DefragConfig, Outcome, Reassembler};
use fld_device::accel::defrag_accel::DefragAccel;
use fld_device::accel::iot::{self, IotFilter, KeyTable, Verdict};
use fld_device::accel::iot_accel::IotAccel;
use fld_device::accel::mux::AcceleratorMux;
use fld_device::fld::memory_model::MemoryParams;
use fld_host::apps::{build_frame, udp_headers, SERVER_IP};
use fld_host::guard::{UdpService, REASSEMBLY_CONTEXT};
use fld_host::mempool::Mbuf;
use fld_host::FlowItem;

use super::FldEchoSetup;

/// What one workload measured.
#[derive(Clone, Debug, Default)]
pub struct InlineReport {
    /// Application messages offered (datagrams, or CoAP messages).
    pub messages: u64,
    /// Bytes per message as the application sees it (whole frame).
    pub message_bytes: usize,
    /// Frames put on the wire (fragments count one each).
    pub frames_sent: u64,
    /// Messages the host application should end up with.
    pub expected: u64,
    /// Offloaded: messages delivered to the host, and how many differ from what was expected.
    pub offload_delivered: u64,
    pub offload_mismatches: u64,
    pub offload_secs: f64,
    /// Host baseline: messages the host accepted after doing the work itself.
    pub software_accepted: u64,
    pub software_mismatches: u64,
    pub software_secs: f64,
    /// Frames that crossed into FLD (the accelerator's share of the traffic).
    pub fld_rx_frames: u64,
    /// Accelerator counters by name.
    pub counters: Vec<(&'static str, u64)>,
    /// The card's counters by name (the guard's rules, the host port's): its drops by reason.
    pub card_counters: Vec<(&'static str, u64)>,
}

impl InlineReport {
    pub fn verified(&self) -> bool {
        self.offload_mismatches == 0
            && self.software_mismatches == 0
            && self.offload_delivered == self.expected
            && self.software_accepted == self.expected
    }
    pub fn offload_mps(&self) -> f64 {
        self.messages as f64 / self.offload_secs.max(1e-9)
    }
    pub fn software_mps(&self) -> f64 {
        self.messages as f64 / self.software_secs.max(1e-9)
    }
    /// Offered load in Gbit/s (message bytes).
    pub fn gbps(&self, secs: f64) -> f64 {
        self.messages as f64 * self.message_bytes as f64 * 8.0 / secs.max(1e-9) / 1e9
    }
}

/// Sends `frames` from the client port in bursts of `burst` and hands every received frame (with
/// its queue; the mbuf carries the NIC's offload flags) to `on_rx`, keeping the card running;
/// returns when all was sent and the card is idle.
pub fn pump(
    s: &mut FldEchoSetup,
    frames: &[Vec<u8>],
    burst: usize,
    queues: u16,
    mut on_rx: impl FnMut(u16, &Mbuf),
) {
    let Some(pool) = s.client.pool() else {
        return;
    };
    let mut rx = Vec::with_capacity(64);
    let mut drain = |s: &mut FldEchoSetup, rx: &mut Vec<Mbuf>, any: &mut bool| {
        for q in 0..queues {
            while s.client.rx_burst(q, rx, 64) > 0 {
                *any = true;
                for m in rx.iter() {
                    on_rx(q, m);
                }
                pool.free_bulk(rx.drain(..));
            }
        }
    };
    let mut tx = Vec::with_capacity(burst);
    for chunk in frames.chunks(burst.clamp(1, 256)) {
        pool.alloc_bulk(&mut tx, chunk.len());
        for (m, f) in tx.iter_mut().zip(chunk) {
            m.fill_from(f);
        }
        while !tx.is_empty() {
            s.client.tx_burst(0, &mut tx);
            s.card.poll();
            drain(s, &mut rx, &mut false);
        }
    }
    // Drain until a full pass of the card produces nothing more for the host.
    loop {
        s.card.run_until_idle();
        let mut any = false;
        drain(s, &mut rx, &mut any);
        if !any {
            break;
        }
    }
}

/// Splits an Ethernet + IPv4 frame into fragments that fit `mtu` bytes of IP (RFC 791 §3.2:
/// fragment payloads are multiples of 8 bytes except the last).
pub fn fragment_ipv4(frame: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    let (l2, ip) = frame.split_at(ethernet::HEADER_LEN);
    let Ok(packet) = Ipv4Packet::new_checked(ip) else {
        return vec![frame.to_vec()];
    };
    let ihl = packet.header_len();
    let per = (mtu.saturating_sub(ihl) & !7).max(8);
    let payload = packet.payload();
    payload
        .chunks(per)
        .enumerate()
        .map(|(i, part)| {
            let mut h = ip[..ihl].to_vec();
            let mut p = Ipv4Packet::new_unchecked(&mut h[..]);
            p.set_total_len((ihl + part.len()) as u16);
            p.set_frag(false, (i + 1) * per < payload.len(), (i * per) as u16);
            p.fill_checksum();
            [l2, &h, part].concat()
        })
        .collect()
}

/// Datagram `seq` of `len` bytes from the client to `dst_mac`, with the DF bit clear so it may
/// be fragmented, spread over 64 UDP source ports.
fn fragmentable_datagram(seq: u64, len: usize, src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; len];
    build_frame(&mut f, seq, len, src, dst, 64, true);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[ethernet::HEADER_LEN..]);
    ip.set_frag(false, false, 0);
    ip.fill_checksum();
    f
}

/// Sequence number [`build_frame`] writes into a frame's payload.
fn frame_seq(f: &[u8]) -> Option<u64> {
    let at = EthIpv4UdpRepr::HEADER_LEN;
    Some(u64::from_le_bytes(f.get(at..at + 8)?.try_into().ok()?))
}

/// A workload's failure: the card's driver, or the capture file.
pub type WorkloadError = Box<dyn std::error::Error>;

/// `datagrams` datagrams of `len` bytes, fragmented at `mtu`, through the defrag accelerator
/// and through host-side reassembly; with `capture`, every frame entering the offloading card's
/// eSwitch goes to that pcap file.
pub fn defrag_workload(
    datagrams: usize,
    len: usize,
    mtu: usize,
    capture: Option<&std::path::Path>,
) -> Result<InlineReport, WorkloadError> {
    const QUEUES: u16 = 4;
    let mut s = FldEchoSetup::build_with(9000, 1, MemoryParams::table_2a(), QUEUES)?;
    let (cmac, amac) = (s.client.mac(), s.flde.mac());
    let originals: Vec<Vec<u8>> = (0..datagrams as u64)
        .map(|i| fragmentable_datagram(i, len, cmac, amac))
        .collect();
    let frames: Vec<Vec<u8>> = originals
        .iter()
        .flat_map(|d| fragment_ipv4(d, mtu))
        .collect();
    let check = |got: &[u8], seen: &mut [bool]| -> bool {
        match frame_seq(got).and_then(|q| usize::try_from(q).ok()) {
            Some(q) if q < originals.len() && originals[q] == got && !seen[q] => {
                seen[q] = true;
                true
            }
            _ => false,
        }
    };
    let mut report = InlineReport {
        messages: datagrams as u64,
        message_bytes: len,
        frames_sent: frames.len() as u64,
        expected: datagrams as u64,
        ..Default::default()
    };

    // Offloaded: fragments -> FLD -> reassembled -> resume at the FDB table -> client (RSS).
    s.card
        .fld
        .set_accelerator(Box::new(DefragAccel::new(DefragConfig::default(), 0)));
    let fragments_only = [FlowItem::Ipv4Fragment(true)];
    let back = s.steer_to_accelerator(Some(&fragments_only))?;
    s.flde.accelerate(0, &fragments_only, 1, Some(back))?;
    if let Some(path) = capture {
        s.capture(path)?;
    }
    let mut seen = vec![false; datagrams];
    let (mut ok, mut bad) = (0u64, 0u64);
    let t = Instant::now();
    pump(&mut s, &frames, 32, QUEUES, |_, got| {
        let got = got.data();
        if check(got, &mut seen) {
            ok += 1
        } else {
            bad += 1
        }
    });
    report.offload_secs = t.elapsed().as_secs_f64();
    report.offload_delivered = ok + bad;
    report.offload_mismatches = bad + (datagrams as u64 - ok);
    report.fld_rx_frames = s.flde.fld().stat(Stat::RxPackets);
    report.card_counters = s.client.nic_counters()?;
    s.stop_capture();

    // Host baseline: the fragments reach the host as they are; it reassembles them.
    let mut s = FldEchoSetup::build_with(9000, 1, MemoryParams::table_2a(), QUEUES)?;
    s.steer_to_accelerator(None)?;
    let mut engine = Reassembler::new(DefragConfig::default());
    let mut seen = vec![false; datagrams];
    let (mut ok, mut bad) = (0u64, 0u64);
    let mut whole = Vec::with_capacity(9000);
    let t = Instant::now();
    pump(&mut s, &frames, 32, QUEUES, |_, got| {
        let got = got.data();
        let Ok(eth) = EthernetFrame::new_checked(got) else {
            bad += 1;
            return;
        };
        let l2 = &got[..ethernet::HEADER_LEN];
        match engine.push(eth.payload(), 0) {
            Outcome::Complete(d) | Outcome::Bypass(d) => {
                whole.clear();
                whole.extend_from_slice(l2);
                whole.extend_from_slice(d);
                if check(&whole, &mut seen) {
                    ok += 1
                } else {
                    bad += 1
                }
            }
            Outcome::Buffered => {}
            Outcome::Dropped(_) => bad += 1,
        }
    });
    report.software_secs = t.elapsed().as_secs_f64();
    report.software_accepted = ok;
    report.software_mismatches = bad + (datagrams as u64 - ok);
    let st = engine.stats();
    report.counters = vec![
        ("software_fragments", st.fragments),
        ("software_reassembled", st.completed),
    ];
    Ok(report)
}

/// Tenants of the IoT workload: tenant `t` sends from 10.1.0.`t+1` with context 100 + `t`.
fn tenant_ip(t: u16) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, (t >> 8) as u8, (t & 0xff) as u8 + 1)
}

fn tenant_key(t: u16) -> Vec<u8> {
    format!("key of tenant {t:04}: 32 bytes..").into_bytes()
}

/// A UDP/IPv4 frame of exactly `len` bytes from tenant `t` carrying one CoAP POST whose payload
/// is a JWT signed with `key` (with `exp` relative to `now`), padded through a claim.
fn coap_frame(
    seq: u64,
    t: u16,
    key: &[u8],
    exp: u64,
    len: usize,
    mac: ([u8; 6], [u8; 6]),
) -> Vec<u8> {
    let build = |pad: usize| {
        let claims = format!(
            r#"{{"sub":"dev{seq}","exp":{exp},"pad":"{}"}}"#,
            "x".repeat(pad)
        );
        let jwt = iot::sign_hs256(key, &claims);
        iot::coap_message(
            seq as u16,
            &(seq as u16).to_be_bytes(),
            "up",
            jwt.as_bytes(),
        )
    };
    // Every 3 claim bytes add 4 base64url characters to the token.
    let mut coap = build(0);
    const HEADERS: usize = EthIpv4UdpRepr::HEADER_LEN;
    let mut pad = len.saturating_sub(HEADERS + coap.len()) * 3 / 4;
    coap = build(pad);
    while HEADERS + coap.len() < len {
        pad += 1;
        coap = build(pad);
    }
    let mut f = vec![0u8; HEADERS + coap.len()];
    f[HEADERS..].copy_from_slice(&coap);
    let headers = udp_headers(
        mac.0,
        mac.1,
        tenant_ip(t).octets(),
        SERVER_IP,
        40000,
        COAP_PORT,
        seq as u16,
    );
    // The IPv4 header checksum only: the UDP checksum is left zero (none), as the sensors do.
    headers.emit(&mut f, false);
    Ipv4Packet::new_unchecked(&mut f[ethernet::HEADER_LEN..]).fill_checksum();
    f
}

/// Counts `got` off the messages still expected; false when it was not expected (any more).
fn take_expected(remaining: &mut HashMap<Vec<u8>, u32>, got: &[u8]) -> bool {
    match remaining.get_mut(got) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

/// `messages` CoAP messages of about `len` bytes from `tenants` tenants; every fourth carries a
/// bad token (another tenant's key, or expired), and every eighth (valid or not) is sent as IPv4
/// fragments. Through the IoT accelerator behind the guard with per-tenant rules, and through
/// host-side reassembly and verification of every message; with `capture`, every frame entering
/// the offloading card's eSwitch goes to that pcap file.
pub fn iot_workload(
    messages: usize,
    len: usize,
    tenants: u16,
    capture: Option<&std::path::Path>,
) -> Result<InlineReport, WorkloadError> {
    const NOW: u64 = 1_800_000_000;
    let tenants = tenants.clamp(1, 1000);
    let mut keys = KeyTable::new(2048);
    for t in 0..tenants {
        keys.set(100 + t, &tenant_key(t));
    }
    let mut s = FldEchoSetup::build_with(2048, 1, MemoryParams::table_2a(), 1)?;
    let mac = (s.client.mac(), s.flde.mac());
    let mut frames = Vec::with_capacity(messages);
    // The messages the host should end up with (in any order: a reassembled one crosses FLD
    // twice), with their multiplicity.
    let mut valid: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut expected = 0u64;
    for i in 0..messages as u64 {
        let t = (i % u64::from(tenants)) as u16;
        let (key, exp) = match i % 8 {
            3 => (tenant_key((t + 1) % tenants.max(2)), NOW + 60),
            7 => (tenant_key(t), NOW - 1),
            _ => (tenant_key(t), NOW + 60),
        };
        let mut f = coap_frame(i, t, &key, exp, len, mac);
        // Every eighth in two or more fragments (a fragmentable datagram: DF clear).
        let fragmented = i % 8 == 5 || i % 16 == 7;
        if fragmented {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[ethernet::HEADER_LEN..]);
            ip.set_frag(false, false, 0);
            ip.fill_checksum();
        }
        if i % 8 != 3 && i % 8 != 7 {
            *valid.entry(f.clone()).or_insert(0) += 1;
            expected += 1;
        }
        if fragmented {
            let ip_len = f.len() - ethernet::HEADER_LEN;
            frames.extend(fragment_ipv4(&f, (ip_len / 2).max(28)));
        } else {
            frames.push(f);
        }
    }
    let mut report = InlineReport {
        messages: messages as u64,
        message_bytes: frames.first().map_or(len, Vec::len),
        frames_sent: frames.len() as u64,
        expected,
        ..Default::default()
    };

    // Offloaded: behind the guard, fragments are reassembled and come back whole; per-tenant
    // rules tag each tenant's flow; valid messages resume at the FDB table.
    let (iot, handle) = IotAccel::new(keys.clone(), 0);
    handle.now_s.store(NOW, Ordering::Relaxed);
    let chain = AcceleratorMux::new("defrag+iot-auth")
        .with(
            REASSEMBLY_CONTEXT..=REASSEMBLY_CONTEXT,
            Box::new(DefragAccel::new(DefragConfig::default(), 0)),
        )
        .with(0..=REASSEMBLY_CONTEXT - 1, Box::new(iot));
    s.card.fld.set_accelerator(Box::new(chain));
    let (back, guard) = s.steer_guarded(None, &UdpService::port(COAP_PORT))?;
    s.add_tenants((0..tenants).map(|t| (100 + t, tenant_ip(t))), back)?;
    if let Some(path) = capture {
        s.capture(path)?;
    }
    let mut remaining = valid.clone();
    let (mut delivered, mut bad) = (0u64, 0u64);
    let t0 = Instant::now();
    pump(&mut s, &frames, 32, 1, |_, got| {
        let got = got.data();
        delivered += 1;
        if !take_expected(&mut remaining, got) {
            bad += 1;
        }
    });
    report.offload_secs = t0.elapsed().as_secs_f64();
    report.offload_delivered = delivered;
    report.offload_mismatches = bad + remaining.values().map(|&n| u64::from(n)).sum::<u64>();
    report.fld_rx_frames = s.flde.fld().stat(Stat::RxPackets);
    // "passed", and every other counter that moved (reassembly, drop reasons).
    report.counters = s
        .card
        .fld
        .accelerator_counters()
        .map(|(_, c)| c)
        .unwrap_or_default()
        .into_iter()
        .filter(|&(name, n)| name == "passed" || n > 0)
        .collect();
    report.card_counters = guard.counters(s.flde.nic())?;
    report.card_counters.extend(s.client.nic_counters()?);
    s.stop_capture();

    // Host baseline: everything reaches the host, which finds the tenant by source address and
    // verifies the token itself.
    let mut s = FldEchoSetup::build_with(2048, 1, MemoryParams::table_2a(), 1)?;
    s.steer_to_accelerator(None)?;
    let by_ip: HashMap<[u8; 4], u16> = (0..tenants)
        .map(|t| (tenant_ip(t).octets(), 100 + t))
        .collect();
    let mut filter = IotFilter::new(keys);
    let mut engine = Reassembler::new(DefragConfig::default());
    let mut whole = Vec::with_capacity(2048);
    let mut remaining = valid;
    let (mut accepted, mut bad) = (0u64, 0u64);
    let t0 = Instant::now();
    pump(&mut s, &frames, 32, 1, |_, got| {
        let got = got.data();
        let Ok(eth) = EthernetFrame::new_checked(got) else {
            return;
        };
        let got = match engine.push(eth.payload(), 0) {
            Outcome::Complete(d) | Outcome::Bypass(d) => {
                whole.clear();
                whole.extend_from_slice(&got[..ethernet::HEADER_LEN]);
                whole.extend_from_slice(d);
                &whole[..]
            }
            Outcome::Buffered | Outcome::Dropped(_) => return,
        };
        let Some(o) = udp_offsets(got) else {
            return;
        };
        let src = Ipv4Packet::new_unchecked(&got[o.ip..]).src_addr();
        let ctx = by_ip.get(&src).copied().unwrap_or(0);
        if filter.check(ctx, &got[o.payload_range()], NOW) == Verdict::Pass {
            accepted += 1;
            if !take_expected(&mut remaining, got) {
                bad += 1;
            }
        }
    });
    report.software_secs = t0.elapsed().as_secs_f64();
    report.software_accepted = accepted;
    report.software_mismatches = bad + remaining.values().map(|&n| u64::from(n)).sum::<u64>();
    Ok(report)
}
