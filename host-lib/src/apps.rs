//! Example applications on the burst API, shared by the `fldemu` demo and benchmark, the test
//! suites and (later) the in-guest program: a traffic generator that checks every returned byte,
//! and an echo application that returns what it receives.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ethdev::EthDev;
use crate::mempool::{ol, Mbuf, Mempool};
use fld_driver::PciDevice;

/// The burst interface the applications run on: an emulated port, or the software loopback
/// used as the benchmark's baseline.
pub trait BurstPort {
    fn mac(&self) -> [u8; 6];
    fn pool(&self) -> Option<Arc<Mempool>>;
    fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize;
    fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize;
}

impl BurstPort for EthDev {
    fn mac(&self) -> [u8; 6] {
        EthDev::mac(self)
    }
    fn pool(&self) -> Option<Arc<Mempool>> {
        EthDev::pool(self)
    }
    fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize {
        EthDev::tx_burst(self, q, pkts)
    }
    fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        EthDev::rx_burst(self, q, out, max)
    }
}

impl<T: BurstPort> BurstPort for &mut T {
    fn mac(&self) -> [u8; 6] {
        (**self).mac()
    }
    fn pool(&self) -> Option<Arc<Mempool>> {
        (**self).pool()
    }
    fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize {
        (**self).tx_burst(q, pkts)
    }
    fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        (**self).rx_burst(q, out, max)
    }
}

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

/// Software IPv4 + UDP checksums of a generator frame.
fn fill_udp4_checksums(f: &mut [u8]) {
    if f.len() >= HEADERS {
        write_ipv4_checksum(f);
        write_udp_checksum(f);
    }
}

/// Smallest and largest frame the generator builds (without FCS).
pub const MIN_FRAME: usize = 60;
pub const MAX_FRAME: usize = 9000;
const HEADERS: usize = 14 + 20 + 8;

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

/// RFC 1071 one's-complement sum of `data` plus `sum`, folded (not inverted): the NIC's own
/// checksum code, so host and device agree by construction.
pub fn ones_complement(data: &[u8], sum: u32) -> u16 {
    !fld_device::nic::packet::internet_checksum(data, sum)
}

/// Writes the UDP/IPv4 frame number `seq` of `len` bytes into `out`. With `checksums` the IPv4
/// and UDP checksums are computed here; without, they are left zero for the NIC to fill.
pub fn build_frame(
    out: &mut [u8],
    seq: u64,
    len: usize,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    flows: u16,
    checksums: bool,
) {
    let f = &mut out[..len];
    UdpHeaders {
        src_mac,
        dst_mac,
        src_ip: CLIENT_IP,
        dst_ip: SERVER_IP,
        src_port: 1024 + (seq % flows.max(1) as u64) as u16,
        dst_port: ECHO_PORT,
        ip_id: seq as u16,
    }
    .write(f);
    f[42..50].copy_from_slice(&seq.to_le_bytes());
    // Payload byte k is seq * 31 + k (mod 256): copies of the ramp, not a byte loop.
    let start = (seq as u8).wrapping_mul(31) as usize;
    for chunk in f[50..].chunks_mut(256) {
        chunk.copy_from_slice(&RAMP[start..start + chunk.len()]);
    }
    if checksums {
        write_ipv4_checksum(f);
        write_udp_checksum(f);
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

/// Ethernet, IPv4 (20 bytes, don't fragment, TTL 64) and UDP headers of a frame, as every
/// generator in this crate writes them.
#[derive(Clone, Copy, Debug)]
pub struct UdpHeaders {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    pub src_port: u16,
    pub dst_port: u16,
    pub ip_id: u16,
}

impl UdpHeaders {
    /// Writes the 42 header bytes at the start of `frame`, with lengths for the whole frame and
    /// zero checksums (for the NIC to insert, or [`write_ipv4_checksum`] /
    /// [`write_udp_checksum`]).
    pub fn write(&self, frame: &mut [u8]) {
        let ip_len = (frame.len() - 14) as u16;
        let f = &mut frame[..42];
        f[0..6].copy_from_slice(&self.dst_mac);
        f[6..12].copy_from_slice(&self.src_mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[15] = 0;
        f[16..18].copy_from_slice(&ip_len.to_be_bytes());
        f[18..20].copy_from_slice(&self.ip_id.to_be_bytes());
        f[20..22].copy_from_slice(&0x4000u16.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[24..26].fill(0);
        f[26..30].copy_from_slice(&self.src_ip);
        f[30..34].copy_from_slice(&self.dst_ip);
        f[34..36].copy_from_slice(&self.src_port.to_be_bytes());
        f[36..38].copy_from_slice(&self.dst_port.to_be_bytes());
        f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
        f[40..42].fill(0);
    }
}

/// The IPv4 header checksum (RFC 791) of a frame [`UdpHeaders::write`] wrote.
pub fn write_ipv4_checksum(frame: &mut [u8]) {
    frame[24..26].fill(0);
    let c = !ones_complement(&frame[14..34], 0);
    frame[24..26].copy_from_slice(&c.to_be_bytes());
}

/// The UDP checksum (RFC 768, over the IPv4 pseudo-header; zero is sent as all ones) of a frame
/// [`UdpHeaders::write`] wrote.
pub fn write_udp_checksum(frame: &mut [u8]) {
    frame[40..42].fill(0);
    let mut pseudo = 0u32;
    for w in frame[26..34].chunks_exact(2) {
        pseudo += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    pseudo += 17 + u16::from_be_bytes([frame[38], frame[39]]) as u32;
    let mut u = !ones_complement(&frame[34..], pseudo);
    if u == 0 {
        u = 0xffff;
    }
    frame[40..42].copy_from_slice(&u.to_be_bytes());
}

/// Echo server step: receives a burst, swaps MAC addresses and sends it back. Returns the number
/// of packets echoed. `bufs` is scratch space reused across calls.
pub fn echo_step(port: &mut impl BurstPort, bufs: &mut Vec<Mbuf>, burst: usize) -> usize {
    let n = port.rx_burst(0, bufs, burst);
    if n == 0 && bufs.is_empty() {
        return 0;
    }
    for m in bufs.iter_mut() {
        let d = m.data_mut();
        if d.len() >= 12 {
            let (a, b) = d.split_at_mut(6);
            a.swap_with_slice(&mut b[..6]);
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
                build_frame(
                    m.set_len(len),
                    next_seq,
                    len,
                    client_mac,
                    server_mac,
                    cfg.flows,
                    !cfg.checksum_offload,
                );
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
                let seq = u64::from_le_bytes(d[42..50].try_into().unwrap_or([0; 8]));
                let len = cfg.sizes.size_of(seq);
                build_frame(
                    &mut expect,
                    seq,
                    len,
                    server_mac,
                    client_mac,
                    cfg.flows,
                    true,
                );
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
        ..Default::default()
    };
    client.configure(cfg, Mempool::new(nic_client.as_ref(), p.mbufs, buf)?)?;
    Ok((flde, client))
}

/// Packets that may be in flight without overrunning FLD's receive buffer, which is sized for
/// the bandwidth-delay product (2 S_rxbdp), not for a deep window of large frames: every striding
/// WQE but the open one, times the frames of `max_frame` bytes a WQE holds.
pub fn fld_safe_window(flde: &crate::flde::FldE, max_frame: usize) -> usize {
    let layout = fld_driver::fld::FldRxLayout::default();
    let strides_per_frame = max_frame.div_ceil(1 << layout.log_stride_size).max(1);
    let per_wqe = ((1usize << layout.log_strides) / strides_per_frame).max(1);
    (flde.binding().rx_wqes as usize - 1).max(1) * per_wqe
}

/// An in-process card with the generator on host function 0 and the echo server on host
/// function 1, both configured: the set-up of the demo, the benchmark and the tests.
pub struct InProcessPair {
    pub card: Arc<fld_device::card::Card>,
    pub host: Arc<fld_driver::inprocess::InProcessHost>,
    pub client: EthDev,
    pub server: EthDev,
}

impl InProcessPair {
    pub fn new(
        rx_mode: crate::ethdev::RxMode,
        max_frame: usize,
    ) -> Result<Self, fld_driver::DriverError> {
        use fld_device::card::{Card, CardConfig};
        use fld_driver::inprocess::InProcessHost;
        let card = Card::new(CardConfig::default());
        let host = InProcessHost::new(card.clone(), 1 << 30)?;
        let no = || fld_driver::DriverError::InvalidArgument("missing function");
        let f0 = card.nic.function_id(0).ok_or_else(no)?;
        let f1 = card.nic.function_id(1).ok_or_else(no)?;
        let (client, server) =
            open_echo_pair(host.device(f0), host.device(f1), rx_mode, max_frame, 4096)?;
        Ok(InProcessPair {
            card,
            host,
            client,
            server,
        })
    }

    /// Runs the echo workload: the client generates and verifies, the server echoes.
    pub fn run_echo(&mut self, cfg: &EchoConfig) -> EchoReport {
        let server_mac = self.server.mac();
        let server = &mut self.server;
        let mut scratch = Vec::with_capacity(cfg.burst);
        let burst = cfg.burst;
        run_echo(&mut self.client, server_mac, cfg, || {
            echo_step(server, &mut scratch, burst)
        })
    }
}

/// An in-process card running the FLD-E echo path: the generator on host function 1, the NIC's
/// function 0 bound to FLD, and the echo accelerator behind FLD.
pub struct FldEchoSetup {
    pub card: Arc<fld_device::card::Card>,
    pub host: Arc<fld_driver::inprocess::InProcessHost>,
    pub client: EthDev,
    pub flde: crate::flde::FldE,
}

impl FldEchoSetup {
    pub fn new(max_frame: usize) -> Result<Self, fld_driver::DriverError> {
        Self::with_queues(max_frame, 1)
    }

    /// With `tx_queues` FLD transmit queues bound (the echo accelerator uses the first).
    pub fn with_queues(max_frame: usize, tx_queues: u16) -> Result<Self, fld_driver::DriverError> {
        Self::build(
            max_frame,
            tx_queues,
            fld_device::fld::memory_model::MemoryParams::table_2a(),
        )
    }

    /// With FLD sized for `params` (Table 2a's analysis parameters).
    pub fn build(
        max_frame: usize,
        tx_queues: u16,
        params: fld_device::fld::memory_model::MemoryParams,
    ) -> Result<Self, fld_driver::DriverError> {
        Self::build_with(max_frame, tx_queues, params, 1)
    }

    /// As [`FldEchoSetup::build`], with `client_rx_queues` RSS queues on the generator's port.
    pub fn build_with(
        max_frame: usize,
        tx_queues: u16,
        params: fld_device::fld::memory_model::MemoryParams,
        client_rx_queues: u16,
    ) -> Result<Self, fld_driver::DriverError> {
        use fld_device::card::{Card, CardConfig};
        use fld_driver::inprocess::InProcessHost;
        let card = Card::new(CardConfig {
            fld: params,
            ..Default::default()
        });
        let host = InProcessHost::new(card.clone(), 1 << 30)?;
        let no = || fld_driver::DriverError::InvalidArgument("missing function");
        let f0 = card.nic.function_id(0).ok_or_else(no)?;
        let f1 = card.nic.function_id(1).ok_or_else(no)?;
        card.fld
            .set_accelerator(Box::new(fld_device::accel::Echo::new(0, 256)));
        let (flde, client) = open_fld_echo(
            host.device(f0),
            host.device(f1),
            host.device(card.fld.id()),
            FldEchoPorts {
                tx_queues,
                client_rx_queues,
                max_frame,
                mbufs: 4096,
            },
        )?;
        Ok(FldEchoSetup {
            card,
            host,
            client,
            flde,
        })
    }

    /// Puts the ZUC accelerator behind FLD in place of the echo and returns the service's
    /// addresses for a cryptodev client on the generator's port.
    pub fn attach_zuc(&mut self) -> crate::cryptodev::ServiceAddress {
        use fld_device::accel::zuc_accel::{ZucAccel, ZUC_UDP_PORT};
        self.card
            .fld
            .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0)));
        crate::cryptodev::ServiceAddress {
            client_mac: self.client.mac(),
            client_ip: CLIENT_IP,
            client_port: 40000,
            server_mac: self.flde.mac(),
            server_ip: SERVER_IP,
        }
    }

    /// Points the eSwitch root at FLD's vPort for frames matching `to_accelerator` (none: no
    /// frame) and at the generator's vPort for everything else. Returns an eSwitch table that
    /// delivers to the generator, for the accelerator's output to resume at.
    pub fn steer_to_accelerator(
        &mut self,
        to_accelerator: Option<&[crate::flow::FlowItem]>,
    ) -> Result<u32, fld_driver::DriverError> {
        use fld_device::nic::abi::TABLE_KIND_FDB;
        use fld_driver::nic::{FlowRule, RuleFate, TableMiss};
        let client_vport = self.client.vport();
        let nic = self.flde.nic();
        let fld_vport = nic.vport();
        let root = nic.create_flow_table(TABLE_KIND_FDB, 2, TableMiss::Drop)?;
        if let Some(pattern) = to_accelerator {
            let (mask, value) = crate::flow::compile_pattern(pattern);
            nic.create_flow_entry(
                root,
                &FlowRule {
                    priority: 0,
                    mask,
                    value,
                    count: true,
                    ..FlowRule::any(RuleFate::Vport(fld_vport))
                },
            )?;
        }
        nic.create_flow_entry(
            root,
            &FlowRule {
                priority: 1,
                count: true,
                ..FlowRule::any(RuleFate::Vport(client_vport))
            },
        )?;
        nic.set_root(TABLE_KIND_FDB, Some(root))?;
        let back = nic.create_flow_table(TABLE_KIND_FDB, 1, TableMiss::Drop)?;
        nic.create_flow_entry(back, &FlowRule::any(RuleFate::Vport(client_vport)))?;
        Ok(back)
    }

    /// Packets that may be in flight without overrunning FLD's receive buffer, which is sized
    /// for the bandwidth-delay product (2 S_rxbdp), not for a deep window of large frames: every
    /// striding WQE but the open one, times the frames of `max_frame` bytes a WQE holds.
    pub fn safe_window(&self, max_frame: usize) -> usize {
        fld_safe_window(&self.flde, max_frame)
    }

    /// The generator sends to the accelerator's vPort and checks every returned byte.
    pub fn run_echo(&mut self, cfg: &EchoConfig) -> EchoReport {
        let mac = self.flde.mac();
        let card = self.card.clone();
        run_echo(&mut self.client, mac, cfg, || card.poll())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
