//! FlexDriver's Ethernet echo (§8.1.1) in virtual time: a generator's frames echoed back with
//! their MAC addresses swapped, either by an application on a CPU core (`rx_burst`, swap,
//! `tx_burst`: testpmd's macswap) or by FLD-E — the card's FLD bound to a NIC function, a rule
//! steering every frame to the echo accelerator behind it (`FldE::accelerate`, §5.3), so no
//! host CPU touches the frames. The two are configurations of the same scenario.
//!
//! * [`EchoLatency`]: one frame in flight, its round trip per frame (Table 6).
//! * [`EchoRate`]: the generator keeps a window of frames in flight and counts the verified
//!   echoes per second (Figure 7b's left column).
//! * [`fld_model`]: Figure 7a's performance model at the same sizes, computed from the TLPs each
//!   packet costs on FLD's link (`fld_device::fld::perf_model`); nothing runs.
//!
//! Placement follows the paper's two setups (§8): *remote*, the generator on another host's
//! card across the link; *local*, the generator on a third NIC function of the same card, the
//! eSwitch looping frames between its vPort and FLD-E's. Every echo is checked byte for byte.
//!
//! Left out: a local CPU echo (the model gives a host one core, which a generator and an echo
//! on the same host would share), and FLD-E's transmit-queue spreading (one queue echoes).

use fld_device::accel::Echo;
use fld_device::fabric::FabricConfig;
use fld_device::fld::perf_model::{bound, Batching, LinkConfig};
use fld_host::apps::{echo_step, fld_safe_window, FrameTemplate};
use fld_host::flde::FldE;
use fld_host::verbs::VerbsError;
use fld_host::{EthDev, Mbuf, Mempool, PortConfig};

use super::card::SimHost;
use super::events::Ps;
use super::workload::{Computed, Percentiles, Rounds, SteadyWindow, Workload};
use super::SimError;

/// Frames one application step takes or sends at most (testpmd's default burst).
const BURST: usize = 32;
/// Where the generator writes each frame's sequence number (after the Ethernet, IPv4 and UDP
/// headers; `fld_host::apps::build_frame`).
const SEQ_AT: usize = 42;
/// FLD transmit queues FLD-E binds, as the paper's configuration (§6: "two transmit queues").
const FLD_TX_QUEUES: u16 = 2;
/// Frames the echo accelerator holds when its queue has no credit.
const ECHO_HOLD: usize = 256;

/// Who sends the frames back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EchoBy {
    /// An application on the server's CPU core (testpmd's macswap).
    Cpu,
    /// FLD-E's echo accelerator.
    Flde,
}

/// What runs behind FLD for FLD-E's echo.
#[derive(Clone, Debug, PartialEq)]
pub enum EchoAccel {
    /// The Rust echo (`fld_device::accel::Echo`): no time beyond FLD's own, or, with a
    /// capacity, that many million packets a second (an accelerator's processing units: the
    /// IoT filter's 8 units take 20 Mpps of 256 B packets, FlexDriver §7).
    Model { mpps: Option<f64> },
    /// A Verilog design (a directory with `files.f`, built by Verilator) clocked at `mhz`: its
    /// cycles are its time.
    Rtl {
        design: std::path::PathBuf,
        mhz: f64,
    },
}

impl EchoAccel {
    /// `"echo"` (taking `mpps` million packets a second when that is above 0), or `"rtl:DIR"`
    /// clocked at `mhz`.
    pub fn parse(s: &str, mhz: f64, mpps: f64) -> Option<Self> {
        match s.strip_prefix("rtl:") {
            Some(dir) if !dir.is_empty() && mhz > 0.0 && mhz <= 2000.0 => Some(EchoAccel::Rtl {
                design: dir.into(),
                mhz,
            }),
            Some(_) => None,
            None if s == "echo" && mpps >= 0.0 && mpps.is_finite() => Some(EchoAccel::Model {
                mpps: (mpps > 0.0).then_some(mpps),
            }),
            None => None,
        }
    }

    fn install(&self, h: &mut SimHost) -> Result<(), SimError> {
        match self {
            EchoAccel::Model { mpps } => {
                h.card
                    .fld
                    .set_accelerator(Box::new(Echo::new(0, ECHO_HOLD)));
                if let Some(m) = mpps {
                    h.accel_timing = super::card::AccelTiming::Packets(*m);
                }
            }
            EchoAccel::Rtl { design, mhz } => {
                let built = fld_rtl::build::build(design, false)
                    .map_err(|e| SimError::Failed(format!("{}: {e}", design.display())))?;
                let cfg = fld_rtl::RtlConfig {
                    clock_hz: mhz * 1e6,
                    ..Default::default()
                };
                let rtl = fld_rtl::RtlAccelerator::new(&built, cfg)
                    .map_err(|e| SimError::Failed(format!("{}: {e}", design.display())))?;
                h.card.fld.set_accelerator(Box::new(rtl));
                h.accel_timing = super::card::AccelTiming::Rtl(*mhz);
            }
        }
        Ok(())
    }
}

impl EchoBy {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(EchoBy::Cpu),
            "flde" => Some(EchoBy::Flde),
            _ => None,
        }
    }
}

/// The echoing side on the server's NIC function 1.
enum Echoer {
    Cpu {
        port: Box<EthDev>,
        rx: Vec<Mbuf>,
    },
    /// Kept for its rules and binding; the card does the rest.
    Flde(Box<FldE>),
}

impl Echoer {
    /// Opens the echo on `h`'s NIC function 1; returns it with that function's MAC.
    fn open(
        h: &mut SimHost,
        by: EchoBy,
        accel: &EchoAccel,
        inline_max: u16,
    ) -> Result<(Self, [u8; 6]), SimError> {
        match by {
            EchoBy::Cpu => {
                let port = Box::new(open_port(h, 1, inline_max)?);
                let mac = port.mac();
                let rx = Vec::with_capacity(BURST);
                Ok((Echoer::Cpu { port, rx }, mac))
            }
            EchoBy::Flde => {
                let mut flde = FldE::open(h.device(1)?, h.fld_device(), FLD_TX_QUEUES)
                    .map_err(VerbsError::from)?;
                // Lowest priority: every frame the function receives goes to the accelerator.
                flde.accelerate(u16::MAX, &[], 1, None)
                    .map_err(VerbsError::from)?;
                accel.install(h)?;
                let mac = flde.mac();
                Ok((Echoer::Flde(Box::new(flde)), mac))
            }
        }
    }

    /// The CPU echo's step (testpmd's macswap): what arrived goes back with its MACs swapped.
    /// Asks to run again while a full burst came or frames wait for ring room.
    fn serve(&mut self, h: &mut SimHost) -> Option<Ps> {
        let Echoer::Cpu { port, rx } = self else {
            return None;
        };
        let waiting = rx.len();
        let n = echo_step(port.as_mut(), rx, BURST - waiting.min(BURST));
        let sent = waiting + n - rx.len();
        if sent > 0 {
            h.cpu_post(sent as u64);
        }

        (n == BURST || !rx.is_empty()).then_some(h.cpu_free)
    }

    /// The safe number of frames in flight of `max_frame` bytes: FLD's receive buffer is sized
    /// for the bandwidth-delay product, not a deep window (`fld_safe_window`).
    fn window(&self, max_frame: usize) -> usize {
        match self {
            Echoer::Cpu { .. } => usize::MAX,
            Echoer::Flde(f) => fld_safe_window(f, max_frame),
        }
    }
}

/// A port on NIC function `function` of `h` with a pool of its own.
fn open_port(h: &mut SimHost, function: u16, inline_max: u16) -> Result<EthDev, SimError> {
    let dev = h.device(function)?;
    let mut port = EthDev::open(dev.clone()).map_err(VerbsError::from)?;
    let pool = Mempool::new(dev.as_ref(), 4096, 2048 + fld_host::mempool::HEADROOM)
        .map_err(VerbsError::from)?;
    let config = PortConfig {
        tx_inline_max: inline_max,
        ..Default::default()
    };
    port.configure(config, pool).map_err(VerbsError::from)?;
    Ok(port)
}

/// The generator and the echo of one run, and where each sits.
struct Ends {
    client: usize,
    server: usize,
    port: EthDev,
    echoer: Echoer,
    /// The generator's MAC and the echoing function's.
    macs: [[u8; 6]; 2],
    /// The generator's frames, and their echoes.
    sent: FrameTemplate,
    echoed: FrameTemplate,
}

/// NIC function of the local generator: the card's third, beside the verbs context's (0) and
/// FLD-E's (1).
pub const LOCAL_GENERATOR_FUNCTION: u16 = 2;

impl Ends {
    fn open(
        hosts: &mut [SimHost],
        (client, server): (usize, usize),
        (by, accel, local): (EchoBy, &EchoAccel, bool),
        inline_max: u16,
    ) -> Result<Self, SimError> {
        let (echoer, server_mac) = Echoer::open(&mut hosts[server], by, accel, inline_max)?;
        let (client, function) = match local {
            true => (server, LOCAL_GENERATOR_FUNCTION),
            false => (client, 1),
        };
        let port = open_port(&mut hosts[client], function, inline_max)?;
        let macs = [port.mac(), server_mac];
        Ok(Ends {
            client,
            server,
            port,
            echoer,
            macs,
            sent: FrameTemplate::new(macs[0], macs[1], 1),
            echoed: FrameTemplate::new(macs[1], macs[0], 1),
        })
    }

    /// The NIC-function MACs the network must route to.
    fn routes(&self) -> [(usize, [u8; 6]); 2] {
        [(self.client, self.macs[0]), (self.server, self.macs[1])]
    }

    /// Whether `frame` is the echo of the generator's frame `seq` of `size` bytes, built into
    /// `expect`.
    fn is_echo(&self, frame: &[u8], seq: u64, size: usize, expect: &mut Vec<u8>) -> bool {
        expect.resize(size, 0);
        self.echoed.build(expect, seq, size, true);
        frame == &expect[..]
    }
}

/// The echo of FlexDriver's Table 6: the client sends one UDP frame of `size` bytes to the
/// echoing function, gets it back with its MAC addresses swapped, checks it byte for byte and
/// records the round trip.
pub struct EchoLatency {
    ends: Ends,
    size: usize,
    rounds: Rounds,
    rx: Vec<Mbuf>,
    tx: Vec<Mbuf>,
    expect: Vec<u8>,
    mismatches: u64,
}

impl EchoLatency {
    pub fn new(
        hosts: &mut [SimHost],
        ends: (usize, usize),
        (by, accel, local): (EchoBy, &EchoAccel, bool),
        size: usize,
        iterations: u64,
        tx_inline_max: u16,
    ) -> Result<Self, SimError> {
        Ok(EchoLatency {
            ends: Ends::open(hosts, ends, (by, accel, local), tx_inline_max)?,
            size: size.clamp(64, 1514),
            rounds: Rounds::new(iterations),
            rx: Vec::with_capacity(BURST),
            tx: Vec::with_capacity(BURST),
            expect: Vec::new(),
            mismatches: 0,
        })
    }

    /// The NIC-function MACs the network must route to (the client's and the server's port).
    pub fn macs(&self) -> [(usize, [u8; 6]); 2] {
        self.ends.routes()
    }

    fn send(&mut self, h: &mut SimHost) -> Result<(), SimError> {
        let e = &mut self.ends;
        let pool = e.port.pool().expect("configured port");
        if pool.alloc_bulk(&mut self.tx, 1) != 1 {
            return Err(SimError::Failed("client mempool empty".into()));
        }
        let m = &mut self.tx[0];
        let seq = self.rounds.round;
        e.sent.build(m.set_len(self.size), seq, self.size, true);
        if e.port.tx_burst(0, &mut self.tx) != 1 {
            return Err(SimError::Failed("client transmit queue full".into()));
        }
        h.cpu_post(1);
        Ok(())
    }
}

impl Workload for EchoLatency {
    fn starters(&self) -> Vec<usize> {
        vec![self.ends.client]
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        if host == self.ends.server && host != self.ends.client {
            return Ok(self.ends.echoer.serve(h));
        }
        if self.rounds.round == 0 {
            self.rounds.start_next(t);
            self.send(h)?;
            return Ok(None);
        }
        if self.ends.port.rx_burst(0, &mut self.rx, BURST) == 0 {
            return Ok(None);
        }
        let pool = self.ends.port.pool().expect("configured port");
        let mut done = false;
        for m in self.rx.drain(..) {
            let seq = self.rounds.round;
            if self
                .ends
                .is_echo(m.data(), seq, self.size, &mut self.expect)
            {
                done = true;
            } else {
                self.mismatches += 1;
            }
            pool.free(m);
        }
        if done && self.rounds.end(t) {
            self.rounds.start_next(t);
            self.send(h)?;
        }
        Ok(None)
    }

    fn finished(&self) -> bool {
        self.rounds.finished()
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let Some(rtt) = Percentiles::of(&self.rounds.samples) else {
            return Vec::new();
        };
        vec![
            ("rtt_us", rtt.median),
            ("rtt_p99_us", rtt.p99),
            ("rtt_mean_us", rtt.mean),
            ("mean_us", rtt.mean),
            ("median_us", rtt.median),
            ("p99_us", rtt.p99),
            ("p999_us", rtt.p999),
            ("mismatches", self.mismatches as f64),
        ]
    }
}

/// The generator of Figure 7b: frames of the sizes given (one size, or a repeating mix) sent
/// back to back with at most `window` in flight, every echo verified; the rate is measured
/// over the middle 80 % of the echoes (`SteadyWindow`).
pub struct EchoRate {
    ends: Ends,
    sizes: Vec<usize>,
    total: u64,
    window: u64,
    sent: u64,
    received: u64,
    verified_bytes: u64,
    mismatches: u64,
    steady: SteadyWindow,
    rx: Vec<Mbuf>,
    tx: Vec<Mbuf>,
    expect: Vec<u8>,
}

impl EchoRate {
    pub fn new(
        hosts: &mut [SimHost],
        ends: (usize, usize),
        (by, accel, local): (EchoBy, &EchoAccel, bool),
        sizes: &[usize],
        (packets, window): (u64, usize),
        tx_inline_max: u16,
    ) -> Result<Self, SimError> {
        let ends = Ends::open(hosts, ends, (by, accel, local), tx_inline_max)?;
        let sizes: Vec<usize> = sizes.iter().map(|&s| s.clamp(64, 1514)).collect();
        let largest = sizes.iter().copied().max().unwrap_or(64);
        let window = window.min(ends.echoer.window(largest)).max(1) as u64;
        Ok(EchoRate {
            ends,
            sizes,
            total: packets.max(10),
            window,
            sent: 0,
            received: 0,
            verified_bytes: 0,
            mismatches: 0,
            steady: SteadyWindow::new(packets.max(10)),
            rx: Vec::with_capacity(BURST),
            tx: Vec::with_capacity(BURST),
            expect: Vec::new(),
        })
    }

    pub fn macs(&self) -> [(usize, [u8; 6]); 2] {
        self.ends.routes()
    }

    fn size_of(&self, seq: u64) -> usize {
        self.sizes[seq as usize % self.sizes.len()]
    }

    /// Takes the echoes that arrived; returns how many.
    fn take_echoes(&mut self, t: Ps) -> usize {
        let n = self.ends.port.rx_burst(0, &mut self.rx, BURST);
        let pool = self.ends.port.pool().expect("configured port");
        for m in std::mem::take(&mut self.rx) {
            let seq = m.data().get(SEQ_AT..SEQ_AT + 8).map_or(u64::MAX, |b| {
                u64::from_le_bytes(b.try_into().expect("8 bytes"))
            });
            let size = self.size_of(seq);
            if seq < self.sent && self.ends.is_echo(m.data(), seq, size, &mut self.expect) {
                self.verified_bytes += size as u64;
            } else {
                self.mismatches += 1;
            }
            self.received += 1;
            self.steady.note(self.received, t);
            pool.free(m);
        }
        n
    }

    /// Sends what the window and the total allow, a burst at most; returns how many.
    fn send_more(&mut self, h: &mut SimHost) -> Result<usize, SimError> {
        let room = self.window.saturating_sub(self.sent - self.received);
        let want = (BURST as u64).min(room).min(self.total - self.sent) as usize;
        if want == 0 {
            return Ok(0);
        }
        let pool = self.ends.port.pool().expect("configured port");
        if pool.alloc_bulk(&mut self.tx, want) != want {
            return Err(SimError::Failed("generator mempool empty".into()));
        }
        let e = &self.ends;
        for (i, m) in self.tx.iter_mut().enumerate() {
            let seq = self.sent + i as u64;
            let size = self.sizes[seq as usize % self.sizes.len()];
            e.sent.build(m.set_len(size), seq, size, true);
        }
        let n = self.ends.port.tx_burst(0, &mut self.tx);
        pool.free_bulk(self.tx.drain(..));
        self.sent += n as u64;
        if n > 0 {
            h.cpu_post(n as u64);
        }
        Ok(n)
    }
}

impl Workload for EchoRate {
    fn starters(&self) -> Vec<usize> {
        vec![self.ends.client]
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        if host == self.ends.server && host != self.ends.client {
            return Ok(self.ends.echoer.serve(h));
        }
        let got = self.take_echoes(t);
        let sent = self.send_more(h)?;
        let more = got == BURST || (sent > 0 && self.sent < self.total);
        Ok(more.then_some(h.cpu_free))
    }

    fn finished(&self) -> bool {
        self.received >= self.total
    }

    fn waits_for_core(&self) -> bool {
        true
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let pps = self.steady.per_second().unwrap_or(0.0);
        let mean_size = self.sizes.iter().sum::<usize>() as f64 / self.sizes.len() as f64;
        vec![
            ("mpps", pps / 1e6),
            ("gbps", pps * mean_size * 8.0 / 1e9),
            ("window", self.window as f64),
            ("verified_bytes", self.verified_bytes as f64),
            ("mismatches", self.mismatches as f64),
        ]
    }
}

/// Figure 7a's model at one size: the rate FLD's PCIe link and the Ethernet line allow for the
/// FLD-E echo, in Gbit/s of frame bytes (and Mpps). Nothing runs.
pub fn fld_model(size: usize, ethernet_gbps: f64, pcie_gbps: f64) -> Computed {
    let link = LinkConfig {
        name: "scenario",
        ethernet_gbps,
        pcie_gbps,
    };
    let b = bound(
        size as u32,
        &link,
        &FabricConfig::default(),
        &Batching::default(),
    );
    Computed::new(vec![
        ("gbps", b.expected_mpps * size as f64 * 8.0 / 1e3),
        ("mpps", b.expected_mpps),
    ])
}
