//! Example applications on the burst API, shared by the `fldemu` demo and benchmark, the test
//! suites and (later) the in-guest program: a traffic generator that checks every returned byte,
//! and an echo application that returns what it receives.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ethdev::EthDev;
use crate::mempool::{ol, Mbuf, Mempool};
pub use crate::port::BurstPort;
use fld_abi::wire::{
    checksum, ethernet, ethertype, ip_proto, EthIpv4UdpRepr, EthernetFrame, EthernetRepr,
    Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};
use fld_driver::PciDevice;

type Link = Arc<Mutex<VecDeque<Mbuf>>>;

/// One end of a software loopback: transmit copies each frame into a buffer of the peer's pool
/// (what the NIC's DMA does), fills requested checksums in software and marks them good. It
/// does the application-visible work of the emulated path with no device model, so the ratio of
/// the two is the cost of emulation.
pub struct SoftPort {
    mac: [u8; 6],
    pool: Arc<Mempool>,
    peer_pool: Arc<Mempool>,
    rx: Link,
    peer_rx: Link,
    fresh: Vec<Mbuf>,
}

impl SoftPort {
    /// Two connected ends.
    pub fn pair(a: (Arc<Mempool>, [u8; 6]), b: (Arc<Mempool>, [u8; 6])) -> (SoftPort, SoftPort) {
        let la: Link = Default::default();
        let lb: Link = Default::default();
        (
            SoftPort {
                mac: a.1,
                pool: a.0.clone(),
                peer_pool: b.0.clone(),
                rx: la.clone(),
                peer_rx: lb.clone(),
                fresh: Vec::new(),
            },
            SoftPort {
                mac: b.1,
                pool: b.0,
                peer_pool: a.0,
                rx: lb,
                peer_rx: la,
                fresh: Vec::new(),
            },
        )
    }
}

impl BurstPort for SoftPort {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn pool(&self) -> Option<Arc<Mempool>> {
        Some(self.pool.clone())
    }
    fn tx_burst(&mut self, _q: u16, pkts: &mut Vec<Mbuf>) -> usize {
        self.fresh.clear();
        let n = self.peer_pool.alloc_bulk(&mut self.fresh, pkts.len());
        let mut peer = self.peer_rx.lock().unwrap_or_else(|e| e.into_inner());
        for (mut copy, m) in self.fresh.drain(..).zip(pkts.iter()) {
            copy.fill_from(m.data());
            if m.ol_flags & (ol::TX_IP_CKSUM | ol::TX_L4_CKSUM) != 0 {
                fill_udp4_checksums(copy.data_mut());
            }
            copy.ol_flags = ol::RX_IP_CKSUM_GOOD | ol::RX_L4_CKSUM_GOOD;
            peer.push_back(copy);
        }
        drop(peer);
        self.pool.free_bulk(pkts.drain(..n));
        n
    }
    fn rx_burst(&mut self, _q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let n = max.min(rx.len());
        out.extend(rx.drain(..n));
        n
    }
}

/// Software IPv4 + UDP checksums of a generator frame (headers at the generator's offsets).
fn fill_udp4_checksums(f: &mut [u8]) {
    if f.len() >= HEADERS {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[ethernet::HEADER_LEN..]);
        ip.fill_checksum();
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        UdpPacket::new_unchecked(ip.payload_mut()).fill_checksum_v4(&src, &dst);
    }
}

/// Smallest and largest frame the generator builds (without FCS).
pub const MIN_FRAME: usize = 60;
pub const MAX_FRAME: usize = 9000;
const HEADERS: usize = EthIpv4UdpRepr::HEADER_LEN;

/// Frame sizes to generate.
#[derive(Clone, Debug)]
pub enum Sizes {
    Fixed(usize),
    /// Every size from `min` to `max` in turn.
    Sweep {
        min: usize,
        max: usize,
    },
    /// A repeating list.
    Cycle(Vec<usize>),
}

impl Sizes {
    pub fn size_of(&self, seq: u64) -> usize {
        let s = match self {
            Sizes::Fixed(n) => *n,
            Sizes::Sweep { min, max } => min + (seq as usize % (max - min + 1)),
            Sizes::Cycle(v) => v[seq as usize % v.len()],
        };
        s.clamp(MIN_FRAME, MAX_FRAME)
    }
    pub fn max(&self) -> usize {
        match self {
            Sizes::Fixed(n) => *n,
            Sizes::Sweep { max, .. } => *max,
            Sizes::Cycle(v) => v.iter().copied().max().unwrap_or(MIN_FRAME),
        }
        .clamp(MIN_FRAME, MAX_FRAME)
    }
}

/// The benchmark's bimodal data-center size mix: most packets are small (ACKs, RPCs) or
/// full-size (bulk transfer), few in between. A 20-packet cycle: 8 x 64 B, 2 x 128 B, 2 x 200 B,
/// 1 x 576 B, 7 x 1500 B (65% of packets at or below 200 B, 35% at or above 1400 B).
pub fn datacenter_mix() -> Sizes {
    let mut v = vec![64; 8];
    v.extend([128, 128, 200, 200, 576]);
    v.extend([1500; 7]);
    Sizes::Cycle(v)
}

/// Workload parameters.
#[derive(Clone, Debug)]
pub struct EchoConfig {
    pub packets: u64,
    pub sizes: Sizes,
    pub burst: usize,
    /// Packets in flight at most.
    pub window: usize,
    /// Ask the NIC to fill IPv4 and UDP checksums.
    pub checksum_offload: bool,
    /// Distinct UDP source ports (spreads flows for RSS).
    pub flows: u16,
}

impl Default for EchoConfig {
    fn default() -> Self {
        EchoConfig {
            packets: 10_000,
            sizes: Sizes::Fixed(64),
            burst: 32,
            window: 512,
            checksum_offload: true,
            flows: 64,
        }
    }
}

/// What the generator saw.
#[derive(Clone, Debug, Default)]
pub struct EchoReport {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub bytes_verified: u64,
    pub mismatches: u64,
    /// Returned frames whose NIC checksum flags were not "good".
    pub checksum_flags_bad: u64,
    pub elapsed: Duration,
    /// Sum of frame lengths sent.
    pub bytes_sent: u64,
}

impl EchoReport {
    pub fn mpps(&self) -> f64 {
        self.packets_received as f64 / self.elapsed.as_secs_f64().max(1e-9) / 1e6
    }
    /// Goodput of verified frames in Gbit/s (frame bytes, no preamble or FCS).
    pub fn gbps(&self) -> f64 {
        self.bytes_verified as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9) / 1e9
    }
}

/// The generator's MAC and IPv4 addresses.
pub const CLIENT_IP: [u8; 4] = [10, 0, 0, 1];
pub const SERVER_IP: [u8; 4] = [10, 0, 0, 2];
pub const ECHO_PORT: u16 = 7;

/// Ethernet, IPv4 (don't fragment, TTL 64) and UDP headers as every generator of the host
/// library writes them.
pub fn udp_headers(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    src_port: u16,
    dst_port: u16,
    ip_id: u16,
) -> EthIpv4UdpRepr {
    EthIpv4UdpRepr {
        eth: EthernetRepr {
            src_addr: src_mac,
            dst_addr: dst_mac,
            ethertype: ethertype::IPV4,
        },
        ip: Ipv4Repr {
            src_addr: src_ip,
            dst_addr: dst_ip,
            hop_limit: 64,
            ident: ip_id,
            dont_frag: true,
            ..Ipv4Repr::default()
        },
        udp: UdpRepr { src_port, dst_port },
    }
}

/// Writes the UDP/IPv4 frame number `seq` of `len` bytes into `out`. With `checksums` the IPv4
/// and UDP checksums are computed here; without, they are left zero for the NIC to fill. A
/// generator that builds many frames between the same two MACs keeps a [`FrameTemplate`].
pub fn build_frame(
    out: &mut [u8],
    seq: u64,
    len: usize,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    flows: u16,
    checksums: bool,
) {
    FrameTemplate::new(src_mac, dst_mac, flows).build(out, seq, len, checksums);
}

/// Offsets in a generator frame: the IPv4 header and the UDP header.
const IP_AT: usize = ethernet::HEADER_LEN;
const UDP_AT: usize = IP_AT + fld_abi::wire::ipv4::HEADER_LEN;

/// The headers [`build_frame`] writes between two MACs, emitted once: a frame is the template
/// with its two lengths, its IPv4 identification and its UDP source port set, as a DPDK
/// generator copies a template packet instead of building every header. The IPv4 header
/// checksum follows from the template's sum and the two fields set (RFC 1624 §3); the UDP
/// checksum covers the payload and is computed over it.
#[derive(Clone, Copy, Debug)]
pub struct FrameTemplate {
    /// The headers with both lengths, the identification, the source port and both checksums
    /// zero.
    headers: [u8; HEADERS],
    /// The IPv4 header's 16-bit words summed as the template holds them.
    ip_sum: u32,
    flows: u16,
}

impl FrameTemplate {
    /// Frames from `src_mac` to `dst_mac`, their UDP source port cycling over `flows` ports
    /// from 1024 (past 65535 they wrap to 0).
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6], flows: u16) -> Self {
        let mut headers = [0u8; HEADERS];
        udp_headers(src_mac, dst_mac, CLIENT_IP, SERVER_IP, 0, ECHO_PORT, 0)
            .emit(&mut headers, false);
        headers[IP_AT + 2..IP_AT + 4].fill(0);
        headers[UDP_AT + 4..UDP_AT + 6].fill(0);
        let ip_sum = headers[IP_AT..UDP_AT]
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        FrameTemplate {
            headers,
            ip_sum,
            flows: flows.max(1),
        }
    }

    /// Writes frame number `seq` of `len` bytes into `out`, as [`build_frame`] does.
    pub fn build(&self, out: &mut [u8], seq: u64, len: usize, checksums: bool) {
        let f = &mut out[..len];
        f[HEADERS..HEADERS + 8].copy_from_slice(&seq.to_le_bytes());
        // Payload byte k is seq * 31 + k (mod 256): copies of the ramp, not a byte loop.
        let start = (seq as u8).wrapping_mul(31) as usize;
        for chunk in f[HEADERS + 8..].chunks_mut(256) {
            chunk.copy_from_slice(&RAMP[start..start + chunk.len()]);
        }
        let mut h = self.headers;
        let ip_len = (len - IP_AT) as u16;
        let ident = seq as u16;
        let src_port = 1024u16.wrapping_add((seq % u64::from(self.flows)) as u16);
        h[IP_AT + 2..IP_AT + 4].copy_from_slice(&ip_len.to_be_bytes());
        h[IP_AT + 4..IP_AT + 6].copy_from_slice(&ident.to_be_bytes());
        h[UDP_AT..UDP_AT + 2].copy_from_slice(&src_port.to_be_bytes());
        let udp_len = ip_len - (UDP_AT - IP_AT) as u16;
        h[UDP_AT + 4..UDP_AT + 6].copy_from_slice(&udp_len.to_be_bytes());
        if checksums {
            // The template's sum and the two words set: no bytes left to add.
            let sum = self.ip_sum + u32::from(ip_len) + u32::from(ident);
            let c = checksum::internet_checksum(&[], sum);
            h[IP_AT + 10..IP_AT + 12].copy_from_slice(&c.to_be_bytes());
        }
        f[..HEADERS].copy_from_slice(&h);
        if checksums {
            let datagram = &mut f[UDP_AT..];
            let pseudo = checksum::pseudo_header_v4(
                &CLIENT_IP,
                &SERVER_IP,
                ip_proto::UDP,
                u32::from(udp_len),
            );
            let c = checksum::internet_checksum(datagram, pseudo);
            // A computed 0 is sent as all ones (RFC 768).
            UdpPacket::new_unchecked(datagram).set_checksum(if c == 0 { 0xffff } else { c });
        }
    }
}

/// 0, 1, ..., 255 twice: any 256 consecutive payload bytes of a generator frame are a window
/// of it.
static RAMP: [u8; 512] = {
    let mut r = [0u8; 512];
    let mut i = 0;
    while i < 512 {
        r[i] = i as u8;
        i += 1;
    }
    r
};

/// Echo server step: receives up to `burst` packets, swaps their MAC addresses and sends them
/// back after any still waiting. Returns the number of packets received. `bufs` is scratch space
/// reused across calls: what the transmit ring did not take stays there, already swapped, for
/// the next call.
pub fn echo_step(port: &mut impl BurstPort, bufs: &mut Vec<Mbuf>, burst: usize) -> usize {
    let waiting = bufs.len();
    let n = port.rx_burst(0, bufs, burst);
    if n == 0 && bufs.is_empty() {
        return 0;
    }
    // Only the new ones: a frame left over from the last call was swapped then.
    for m in bufs.iter_mut().skip(waiting) {
        if let Ok(mut eth) = EthernetFrame::new_checked(m.data_mut()) {
            eth.swap_addrs();
        }
        m.ol_flags = 0;
    }
    port.tx_burst(0, bufs);
    // What did not fit stays in `bufs` for the next call.
    n
}

/// Sends `cfg.packets` frames from `client` to `server`'s MAC, runs `serve` between bursts (the
/// echo side), and checks every returned frame byte for byte against what was sent (with MACs
/// swapped). Bounded: gives up after `cfg.packets * 64 + 10^6` idle iterations.
pub fn run_echo(
    client: &mut impl BurstPort,
    server_mac: [u8; 6],
    cfg: &EchoConfig,
    mut serve: impl FnMut() -> usize,
) -> EchoReport {
    let mut rep = EchoReport::default();
    let client_mac = client.mac();
    let mut tx: Vec<Mbuf> = Vec::with_capacity(cfg.burst);
    let mut rx: Vec<Mbuf> = Vec::with_capacity(cfg.burst);
    let mut expect = vec![0u8; MAX_FRAME];
    let mut next_seq = 0u64;
    let mut idle = 0u64;
    let idle_limit = cfg.packets * 64 + 1_000_000;
    let pool = client.pool().expect("configured port");
    let sent = FrameTemplate::new(client_mac, server_mac, cfg.flows);
    let echoed = FrameTemplate::new(server_mac, client_mac, cfg.flows);
    let start = Instant::now();
    while rep.packets_received < cfg.packets && idle < idle_limit {
        let mut progress = 0;
        // Generate.
        let inflight = (rep.packets_sent - rep.packets_received) as usize;
        let want = cfg
            .burst
            .min(cfg.window.saturating_sub(inflight))
            .min((cfg.packets - next_seq) as usize);
        if want > 0 && tx.is_empty() {
            pool.alloc_bulk(&mut tx, want);
            for m in tx.iter_mut() {
                let len = cfg.sizes.size_of(next_seq);
                sent.build(m.set_len(len), next_seq, len, !cfg.checksum_offload);
                m.ol_flags = if cfg.checksum_offload {
                    ol::TX_IP_CKSUM | ol::TX_L4_CKSUM
                } else {
                    0
                };
                rep.bytes_sent += len as u64;
                next_seq += 1;
            }
        }
        if !tx.is_empty() {
            let n = client.tx_burst(0, &mut tx);
            rep.packets_sent += n as u64;
            progress += n;
        }
        progress += serve();
        // Verify.
        let n = client.rx_burst(0, &mut rx, cfg.burst);
        progress += n;
        for m in rx.drain(..) {
            rep.packets_received += 1;
            let d = m.data();
            let ok = d.len() >= HEADERS + 8 && {
                let seq = u64::from_le_bytes(d[HEADERS..HEADERS + 8].try_into().unwrap_or([0; 8]));
                let len = cfg.sizes.size_of(seq);
                echoed.build(&mut expect, seq, len, true);
                d.len() == len && m.pkt_len as usize == len && d == &expect[..len]
            };
            if ok {
                rep.bytes_verified += d.len() as u64;
            } else {
                rep.mismatches += 1;
            }
            let good = ol::RX_IP_CKSUM_GOOD | ol::RX_L4_CKSUM_GOOD;
            if m.ol_flags & good != good {
                rep.checksum_flags_bad += 1;
            }
            pool.free(m);
        }
        idle = if progress == 0 { idle + 1 } else { 0 };
    }
    rep.elapsed = start.elapsed();
    pool.free_bulk(tx.drain(..));
    rep
}

/// Configures the CPU echo ports on any transport: the generator on `client` (host function 0)
/// and the echo application on `server` (host function 1), each with a pool of `mbufs` buffers.
pub fn open_echo_pair(
    client: Arc<dyn PciDevice>,
    server: Arc<dyn PciDevice>,
    rx_mode: crate::ethdev::RxMode,
    max_frame: usize,
    mbufs: u32,
) -> Result<(EthDev, EthDev), fld_driver::DriverError> {
    let buf = (max_frame + crate::mempool::HEADROOM as usize) as u32;
    let cfg = crate::ethdev::PortConfig {
        rx_mode,
        max_rx_frame: max_frame as u32,
        tx_multi_packet: true,
        ..Default::default()
    };
    let mut ports = Vec::with_capacity(2);
    for dev in [client, server] {
        let mut port = EthDev::open(dev.clone())?;
        port.configure(cfg, Mempool::new(dev.as_ref(), mbufs, buf)?)?;
        ports.push(port);
    }
    let server = ports.pop().expect("two ports");
    let client = ports.pop().expect("two ports");
    Ok((client, server))
}

/// Sizes of the FLD-E echo set-up.
#[derive(Clone, Copy, Debug)]
pub struct FldEchoPorts {
    /// FLD transmit queues to bind (the echo accelerator uses the first).
    pub tx_queues: u16,
    /// RSS queues on the generator's port.
    pub client_rx_queues: u16,
    pub max_frame: usize,
    /// Buffers in the generator's pool.
    pub mbufs: u32,
}

/// Brings up FLD-E on any transport: NIC function 0 (`nic_fld`) bound to FLD (`fld`), every frame
/// sent to it handed to the accelerator behind FLD (whatever the card runs there), and the
/// generator's port on NIC function 1 (`nic_client`).
pub fn open_fld_echo(
    nic_fld: Arc<dyn PciDevice>,
    nic_client: Arc<dyn PciDevice>,
    fld: Arc<dyn PciDevice>,
    p: FldEchoPorts,
) -> Result<(crate::flde::FldE, EthDev), fld_driver::DriverError> {
    let mut flde = crate::flde::FldE::open(nic_fld, fld, p.tx_queues)?;
    // Lowest priority: rules a caller adds later take precedence.
    flde.accelerate(u16::MAX, &[], 1, None)?;
    let mut client = EthDev::open(nic_client.clone())?;
    let buf = (p.max_frame + crate::mempool::HEADROOM as usize) as u32;
    let cfg = crate::ethdev::PortConfig {
        rx_mode: crate::ethdev::RxMode::Striding {
            log_stride_size: 8,
            log_strides: 6,
        },
        max_rx_frame: p.max_frame as u32,
        rx_queues: p.client_rx_queues.max(1),
        tx_multi_packet: true,
        ..Default::default()
    };
    client.configure(cfg, Mempool::new(nic_client.as_ref(), p.mbufs, buf)?)?;
    Ok((flde, client))
}

/// Frames of at most `max_frame` bytes that may be in flight without overrunning FLD's
/// receive side, which is sized for the bandwidth-delay product (2 S_rxbdp), not for a deep
/// window of large frames: its buffer and its Rx CQ bound it
/// ([`fld_driver::fld::FldBinding::rx_packets_in_flight`]).
pub fn fld_safe_window(flde: &crate::flde::FldE, max_frame: usize) -> usize {
    flde.binding()
        .rx_packets_in_flight(flde.fld().geometry(), max_frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port that takes at most `room` frames per transmit burst.
    struct Narrow {
        port: SoftPort,
        room: usize,
    }

    impl BurstPort for Narrow {
        fn mac(&self) -> [u8; 6] {
            self.port.mac()
        }
        fn pool(&self) -> Option<Arc<Mempool>> {
            self.port.pool()
        }
        fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize {
            let rest = pkts.split_off(pkts.len().min(self.room));
            let n = self.port.tx_burst(q, pkts);
            pkts.extend(rest);
            n
        }
        fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
            self.port.rx_burst(q, out, max)
        }
    }

    /// A frame the transmit ring did not take goes out on the next step with its addresses
    /// swapped once, not swapped back.
    #[test]
    fn echo_step_swaps_a_leftover_frame_once() {
        let card = fld_device::card::Card::new(Default::default());
        let host = fld_driver::inprocess::InProcessHost::new(card, 16 << 20).unwrap();
        let dev = host.device(0);
        let pool = |n| Mempool::new(dev.as_ref(), n, 2048).unwrap();
        let (a_mac, b_mac) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let (mut a, b) = SoftPort::pair((pool(64), a_mac), (pool(64), b_mac));
        let mut b = Narrow { port: b, room: 2 };
        let mut tx = Vec::new();
        let sent_pool = a.pool().unwrap();
        assert_eq!(sent_pool.alloc_bulk(&mut tx, 4), 4);
        for (seq, m) in tx.iter_mut().enumerate() {
            build_frame(m.set_len(64), seq as u64, 64, a_mac, b_mac, 1, true);
        }
        assert_eq!(a.tx_burst(0, &mut tx), 4);
        let mut scratch = Vec::new();
        assert_eq!(echo_step(&mut b, &mut scratch, 32), 4);
        assert_eq!(scratch.len(), 2, "two frames wait for ring room");
        assert_eq!(echo_step(&mut b, &mut scratch, 32), 0);
        assert!(scratch.is_empty());
        let mut back = Vec::new();
        assert_eq!(a.rx_burst(0, &mut back, 32), 4);
        let mut expect = vec![0u8; 64];
        for (seq, m) in back.iter().enumerate() {
            build_frame(&mut expect, seq as u64, 64, b_mac, a_mac, 1, true);
            assert_eq!(m.data(), &expect[..], "frame {seq}");
        }
    }

    /// A template's frames are byte for byte the headers `udp_headers` emits for each frame
    /// (lengths, identification, source port and both checksums computed in full), across
    /// sizes, sequence numbers that wrap the 16-bit identification, flow counts and both
    /// checksum settings.
    #[test]
    fn template_frames_equal_headers_emitted_for_each_frame() {
        let (a, b) = ([2, 0, 0, 0, 0, 1], [0x0e, 0xff, 0x10, 0x20, 0x30, 0x41]);
        let mut rng = fastrand::Rng::with_seed(7);
        for flows in [0u16, 1, 4, 64, 65535] {
            let t = FrameTemplate::new(a, b, flows);
            for _ in 0..400 {
                let seq = rng.u64(..);
                let len = rng.usize(MIN_FRAME..=MAX_FRAME);
                for checksums in [false, true] {
                    let mut got = vec![0xa5u8; len];
                    t.build(&mut got, seq, len, checksums);
                    let mut want = got.clone();
                    let src_port = 1024u16.wrapping_add((seq % flows.max(1) as u64) as u16);
                    udp_headers(a, b, CLIENT_IP, SERVER_IP, src_port, ECHO_PORT, seq as u16)
                        .emit(&mut want, checksums);
                    assert_eq!(got, want, "seq {seq} len {len} flows {flows} {checksums}");
                }
            }
        }
    }

    /// Generator frames are what the docs say: UDP/IPv4 from CLIENT_IP to SERVER_IP port 7, the
    /// sequence number little-endian after the UDP header, then bytes seq * 31 + k, and valid
    /// checksums when asked for — checked with an independent parser.
    #[test]
    fn generator_frames_have_the_documented_layout_and_valid_checksums() {
        for (seq, len) in [
            (0u64, 60usize),
            (1, 64),
            (7, 305),
            (1000, 1514),
            (123_456, 9000),
        ] {
            let mut f = vec![0u8; len];
            build_frame(
                &mut f,
                seq,
                len,
                [2, 0, 0, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
                4,
                true,
            );
            let p = etherparse::SlicedPacket::from_ethernet(&f).expect("parses");
            let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
                panic!("IPv4")
            };
            assert_eq!(ip.header().source(), CLIENT_IP);
            assert_eq!(ip.header().destination(), SERVER_IP);
            let h = ip.header().to_header();
            assert_eq!(h.header_checksum, h.calc_header_checksum());
            let Some(etherparse::TransportSlice::Udp(udp)) = &p.transport else {
                panic!("UDP")
            };
            assert_eq!(udp.destination_port(), ECHO_PORT);
            let expect = udp
                .to_header()
                .calc_checksum_ipv4(&h, udp.payload())
                .unwrap();
            assert_eq!(udp.checksum(), expect);
            let payload = udp.payload();
            assert_eq!(payload[..8], seq.to_le_bytes());
            for (k, b) in payload[8..].iter().enumerate() {
                assert_eq!(
                    *b,
                    (seq as u8).wrapping_mul(31).wrapping_add(k as u8),
                    "byte {k}"
                );
            }
        }
    }
}
