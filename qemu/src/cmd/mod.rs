//! The `fldemu` subcommands, one module each, and what several of them share: the transport
//! and receive-layout options, the echo set-up over any transport, verdicts and exit codes.

pub mod bench;
pub mod bench_accel;
pub mod bench_rtl;
pub mod bench_transport;
pub mod demo;
pub mod fldr;
pub mod memory;
pub mod model;
pub mod rc_bw;
pub mod rc_pingpong;
pub mod replay;
pub mod rtl_init;
pub mod selftest;
pub mod serve;
pub mod sim;

use std::process::ExitCode;

use clap::ValueEnum;
use fld_abi::fld::MemoryItem;
use fld_device::card::Card;
use fld_device::fabric::TlpStats;
use fld_host::apps::{
    echo_step, fld_safe_window, open_echo_pair, open_fld_echo, run_echo, EchoConfig, EchoReport,
    FldEchoPorts,
};
use fld_host::RxMode;
use fld_qemu::testbed::{FldEchoSetup, InProcessPair};
use serde_json::json;

/// What a subcommand returns.
pub type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum AccelArg {
    /// No accelerator: a CPU echo application on vPort 0.
    None,
    /// The FLD-E echo accelerator behind FLD, on vPort 0's FLD queues.
    Echo,
    /// The ZUC look-aside accelerator behind FLD: `--packets` cipher operations of `--size`
    /// bytes through the cryptodev API, checked against software ZUC.
    Zuc,
    /// The IP defragmentation accelerator: `--packets` datagrams of `--size` bytes fragmented at
    /// a 1450-byte MTU, against host-side reassembly.
    Defrag,
    /// The IoT token authentication accelerator: `--packets` CoAP messages of `--size` bytes from
    /// 16 tenants (a quarter with bad tokens), against host-side JWT verification.
    Iot,
}

/// What `--accel` names: one of the built-in accelerators, or `rtl:PATH`, a Verilog module
/// (a Verilator file list, or a directory holding `files.f`) on FLD's ports, verified as the
/// echo is.
#[derive(Clone, PartialEq, Eq)]
pub struct AccelChoice {
    pub kind: AccelArg,
    pub rtl: Option<std::path::PathBuf>,
}

impl PartialEq<AccelArg> for AccelChoice {
    fn eq(&self, other: &AccelArg) -> bool {
        self.kind == *other
    }
}

impl AccelChoice {
    /// The name reports use.
    pub fn name(&self) -> String {
        match &self.rtl {
            Some(p) => format!("rtl:{}", p.display()),
            None => self
                .kind
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_owned()),
        }
    }
}

/// `--accel`'s parser: a built-in name, or `rtl:PATH`.
pub fn parse_accel(s: &str) -> Result<AccelChoice, String> {
    if let Some(path) = s.strip_prefix("rtl:") {
        return Ok(AccelChoice {
            kind: AccelArg::Echo,
            rtl: Some(path.into()),
        });
    }
    AccelArg::from_str(s, true)
        .map(|kind| AccelChoice { kind, rtl: None })
        .map_err(|_| format!("{s}: expected none, echo, zuc, defrag, iot or rtl:PATH"))
}

/// An RTL accelerator's clock when `--rtl-clock-mhz` is not given (FLD's Innova-2 design).
pub(crate) const DEFAULT_RTL_CLOCK_MHZ: f64 = 250.0;

/// Builds (or finds in the cache) the Verilog accelerator `spec` and instantiates it; with
/// `vcd`, every signal is written there.
pub fn rtl_accelerator(
    spec: &std::path::Path,
    vcd: Option<&std::path::Path>,
    clock_mhz: f64,
) -> Result<Box<fld_rtl::RtlAccelerator>, Box<dyn std::error::Error>> {
    if !(clock_mhz > 0.0 && clock_mhz <= 2000.0) {
        return Err(format!("--rtl-clock-mhz {clock_mhz}: 0 < MHz <= 2000").into());
    }
    let t = std::time::Instant::now();
    let design = fld_rtl::build::build(spec, vcd.is_some())?;
    if design.built {
        eprintln!(
            "fldemu: built {} with Verilator in {:.1} s ({})",
            spec.display(),
            t.elapsed().as_secs_f64(),
            design.library.display()
        );
    }
    let cfg = fld_rtl::RtlConfig {
        vcd: vcd.map(Into::into),
        clock_hz: clock_mhz * 1e6,
        ..Default::default()
    };
    Ok(Box::new(fld_rtl::RtlAccelerator::new(&design, cfg)?))
}

/// Multi-packet receive layout of the demo and benchmark: 256-byte strides, 64 per WQE (16 KiB
/// buffers), so a 64-byte frame takes one stride and a 9000-byte frame 36.
const STRIDING: RxMode = RxMode::Striding {
    log_stride_size: 8,
    log_strides: 6,
};

#[derive(Clone, Copy, ValueEnum)]
pub enum RxModeArg {
    /// One buffer per receive WQE.
    Regular,
    /// Multi-packet (striding) receive queues: 256-byte strides, 64 per WQE.
    Striding,
}

impl RxModeArg {
    fn mode(self) -> RxMode {
        match self {
            RxModeArg::Regular => RxMode::Regular,
            RxModeArg::Striding => STRIDING,
        }
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum TransportArg {
    /// The card runs in this process.
    InProcess,
    /// `fldemu serve` (nic0.sock, nic1.sock, fld.sock), through the vfio-user client transport.
    VfioUser,
    /// The functions found in sysfs by vendor and device ID, bound to vfio-pci.
    Vfio,
}

/// DMA memory for the driver when the card is reached through vfio-user or vfio.
pub(crate) const REMOTE_DMA_BYTES: usize = 128 << 20;

/// Where `fldemu serve` puts its sockets, and where its clients look, unless told otherwise.
pub(crate) const DEFAULT_SOCKET_DIR: &str = "fldemu-sockets";

impl TransportArg {
    /// The option as a user writes it, for messages.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            TransportArg::InProcess => "--transport in-process",
            TransportArg::VfioUser => "--transport vfio-user",
            TransportArg::Vfio => "--transport vfio",
        }
    }

    /// The directory of `fldemu serve`'s sockets: `--socket-dir` (`given`) means something
    /// only with `--transport vfio-user`, and is refused with any other transport.
    pub(crate) fn socket_dir(
        self,
        given: Option<&std::path::Path>,
    ) -> Result<std::path::PathBuf, String> {
        match (self, given) {
            (TransportArg::VfioUser, dir) => {
                Ok(dir.map_or_else(|| DEFAULT_SOCKET_DIR.into(), Into::into))
            }
            (other, Some(_)) => Err(format!(
                "--socket-dir names `fldemu serve`'s sockets: use it with --transport vfio-user, not {}",
                other.flag()
            )),
            (_, None) => Ok(DEFAULT_SOCKET_DIR.into()),
        }
    }

    /// The self-test's view of a transport that reaches a card running elsewhere.
    pub(crate) fn remote(
        self,
        socket_dir: &std::path::Path,
    ) -> Option<fld_qemu::selftest::Transport> {
        match self {
            TransportArg::InProcess => None,
            TransportArg::VfioUser => {
                Some(fld_qemu::selftest::Transport::VfioUser(socket_dir.into()))
            }
            TransportArg::Vfio => Some(fld_qemu::selftest::Transport::Vfio),
        }
    }
}

/// An accelerator's named counters as one JSON object.
fn counters_json(counters: &[(&str, u64)]) -> serde_json::Map<String, serde_json::Value> {
    counters
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}

/// The card's counters a tool gathered, by source (a port, a QP, the guard's rules, an
/// accelerator): its drops by reason among them. `--stats` prints them, `--json` carries them
/// under `card_counters`.
#[derive(Default)]
pub struct CardCounters(Vec<(String, Vec<(&'static str, u64)>)>);

impl CardCounters {
    pub fn add(&mut self, source: impl Into<String>, counters: Vec<(&'static str, u64)>) {
        self.0.push((source.into(), counters));
    }

    /// Every source of `other`, after this one's.
    pub fn merge(&mut self, other: CardCounters) {
        self.0.extend(other.0);
    }

    /// Every source of `other`, its name after `prefix` (which run or path it counts).
    pub fn append(&mut self, prefix: &str, other: CardCounters) {
        for (source, counters) in other.0 {
            self.add(format!("{prefix} {source}"), counters);
        }
    }

    pub fn extend<S: Into<String>>(
        &mut self,
        sources: impl IntoIterator<Item = (S, Vec<(&'static str, u64)>)>,
    ) {
        for (source, counters) in sources {
            self.add(source, counters);
        }
    }

    /// The `--stats` block: per source, the counters that are not zero.
    pub fn print(&self) {
        for (source, counters) in &self.0 {
            print_counters(source, counters);
        }
    }

    /// The sum of one counter over every source that reports it.
    pub fn total(&self, name: &str) -> u64 {
        self.0
            .iter()
            .flat_map(|(_, c)| c.iter())
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .sum()
    }

    pub fn json(&self) -> serde_json::Value {
        self.0
            .iter()
            .map(|(source, c)| (source.clone(), serde_json::Value::Object(counters_json(c))))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// A counter block of a human summary (`--stats`): every counter that is not zero, by name, so
/// a drop and its reason are seen where the traffic was run.
fn print_counters(source: &str, counters: &[(&str, u64)]) {
    let nonzero: Vec<String> = counters
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let shown = if nonzero.is_empty() {
        "all zero".to_owned()
    } else {
        nonzero.join(", ")
    };
    println!("  {source:<15} {shown}");
}

/// Success exactly when every result was verified.
fn exit_code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The last line of every human summary.
fn verdict(ok: bool) -> &'static str {
    if ok {
        "VERIFIED"
    } else {
        "FAILED"
    }
}

/// How long a cache line takes to go from this core to another and back, measured now: two
/// spinning threads bounce a counter. Two-thread figures depend on it — every handoff between
/// the engine's core and the applications' pays it, and a host that places the two vCPUs far
/// apart can make it five times dearer between one batch of runs and the next — so the
/// two-thread benchmarks print it beside their figures. `None` with fewer than two CPUs, where
/// the threads would take turns instead.
fn cross_core_round_trip_ns() -> Option<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    const ROUNDS: u64 = 200_000;
    /// Given up on: the other thread stops waiting.
    const STOP: u64 = u64::MAX;
    #[repr(align(128))]
    struct Line(AtomicU64);
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let line = std::sync::Arc::new(Line(AtomicU64::new(0)));
    let other = line.clone();
    let echo = std::thread::spawn(move || {
        for i in 0..ROUNDS {
            loop {
                match other.0.load(Ordering::Acquire) {
                    v if v == 2 * i + 1 => break,
                    STOP => return,
                    _ => std::hint::spin_loop(),
                }
            }
            // A compare-exchange, not a store: a STOP written since the load stays.
            if other
                .0
                .compare_exchange(2 * i + 1, 2 * i + 2, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return;
            }
        }
    });
    let start = std::time::Instant::now();
    let limit = std::time::Duration::from_secs(1);
    let mut rounds = 0;
    'bounce: for i in 0..ROUNDS {
        line.0.store(2 * i + 1, Ordering::Release);
        let mut spins = 0u32;
        while line.0.load(Ordering::Acquire) != 2 * i + 2 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && start.elapsed() > limit {
                line.0.store(STOP, Ordering::Release);
                break 'bounce;
            }
            std::hint::spin_loop();
        }
        rounds += 1;
    }
    let elapsed = start.elapsed();
    let _ = echo.join();
    (rounds > 0).then(|| elapsed.as_nanos() as f64 / rounds as f64)
}

/// PCIe traffic on the links of the NIC's host functions, and on FLD's link.
fn link_stats(card: &Card) -> (TlpStats, TlpStats) {
    let mut nic = TlpStats::default();
    for i in 0..2 {
        if let Some(fid) = card.nic.function_id(i) {
            let s = card.fabric.stats(fid);
            nic.up_tlps += s.up_tlps;
            nic.up_header_bytes += s.up_header_bytes;
            nic.up_payload_bytes += s.up_payload_bytes;
            nic.down_tlps += s.down_tlps;
            nic.down_header_bytes += s.down_header_bytes;
            nic.down_payload_bytes += s.down_payload_bytes;
        }
    }
    (nic, card.fabric.stats(card.fld.id()))
}

/// Who echoes the generator's frames.
pub enum EchoSide {
    /// The CPU echo application on NIC function 1.
    Cpu(fld_host::EthDev),
    /// The accelerator behind FLD, reached through NIC function 0.
    Fld(fld_host::flde::FldE),
}

/// An echo set-up of either kind over any transport, for the demo and the benchmark.
struct Echoer {
    client: fld_host::EthDev,
    echo: EchoSide,
    /// The card, when it runs in this process (statistics, capture, polling).
    card: Option<std::sync::Arc<Card>>,
    /// The in-process host, which can give the card an engine thread of its own.
    host: Option<std::sync::Arc<fld_driver::inprocess::InProcessHost>>,
    /// Keeps the transport (its connections, DMA memory) alive.
    _transport: Box<dyn std::any::Any>,
}

impl Echoer {
    /// Whether the generator (and the CPU echo) send with multi-packet WQEs, as they do by
    /// default, or one WQE a frame.
    fn set_tx_multi_packet(&mut self, on: bool) {
        self.client.set_tx_multi_packet(on);
        if let EchoSide::Cpu(server) = &mut self.echo {
            server.set_tx_multi_packet(on);
        }
    }

    fn new(
        accel: AccelArg,
        rx: RxMode,
        max_frame: usize,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        Ok(match accel {
            AccelArg::None => {
                let p = InProcessPair::new(rx, max_frame)?;
                Echoer {
                    client: p.client,
                    echo: EchoSide::Cpu(p.server),
                    card: Some(p.card),
                    host: Some(p.host.clone()),
                    _transport: Box::new(p.host),
                }
            }
            _ => {
                let f = FldEchoSetup::new(max_frame)?;
                Echoer {
                    client: f.client,
                    echo: EchoSide::Fld(f.flde),
                    card: Some(f.card),
                    host: Some(f.host.clone()),
                    _transport: Box::new(f.host),
                }
            }
        })
    }

    /// The same set-up on a card reached through `nic` (two NIC functions) and `fld`; its
    /// accelerator is whatever the card runs (`fldemu serve --accel`).
    fn open_remote(
        accel: AccelArg,
        rx: RxMode,
        max_frame: usize,
        nic: [std::sync::Arc<dyn fld_driver::PciDevice>; 2],
        fld: std::sync::Arc<dyn fld_driver::PciDevice>,
        transport: Box<dyn std::any::Any>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let [nic0, nic1] = nic;
        let (client, echo) = match accel {
            AccelArg::None => {
                let (client, server) = open_echo_pair(nic0, nic1, rx, max_frame, REMOTE_MBUFS)?;
                (client, EchoSide::Cpu(server))
            }
            _ => {
                let ports = FldEchoPorts {
                    tx_queues: 1,
                    client_rx_queues: 1,
                    max_frame,
                    mbufs: REMOTE_MBUFS,
                };
                let (flde, client) = open_fld_echo(nic0, nic1, fld, ports)?;
                (client, EchoSide::Fld(flde))
            }
        };
        Ok(Echoer {
            client,
            echo,
            card: None,
            host: None,
            _transport: transport,
        })
    }

    /// Packets in flight the path takes without drops (FLD's Rx buffer bounds the FLD-E path).
    /// The in-process card (the benchmark and the model always build one).
    fn card(&self) -> &Card {
        self.card.as_deref().expect("an in-process card")
    }

    fn window(&self, max_frame: usize) -> usize {
        match &self.echo {
            EchoSide::Cpu(_) => 512,
            EchoSide::Fld(f) => fld_safe_window(f, max_frame).min(512),
        }
    }

    fn run(&mut self, cfg: &EchoConfig) -> EchoReport {
        self.run_on(cfg, false)
    }

    /// Runs the workload with the card's engine on a thread of its own (`engine_thread`), so the
    /// applications' thread only generates, echoes and verifies; otherwise the applications step
    /// the card themselves, on one core.
    fn run_on(&mut self, cfg: &EchoConfig, engine_thread: bool) -> EchoReport {
        let engine = match (&self.host, engine_thread) {
            (Some(host), true) => host.spawn_engine_thread().ok(),
            _ => None,
        };
        let step_card = engine.is_none();
        let report = match &mut self.echo {
            EchoSide::Cpu(server) => {
                let mac = server.mac();
                let mut scratch = Vec::with_capacity(cfg.burst);
                run_echo(&mut self.client, mac, cfg, || {
                    echo_step(server, &mut scratch, cfg.burst)
                })
            }
            EchoSide::Fld(flde) => {
                let card = self.card.clone().filter(|_| step_card);
                run_echo(&mut self.client, flde.mac(), cfg, || {
                    card.as_ref().map_or(0, |c| c.poll())
                })
            }
        };
        drop(engine);
        report
    }

    /// The card's counters as the driver reads them: the generator's port, the echo side's port
    /// (and FLD's statistics with the accelerator's counters on the FLD-E path).
    fn counters(&mut self) -> Result<CardCounters, fld_driver::DriverError> {
        match &mut self.echo {
            EchoSide::Cpu(server) => {
                let mut c = CardCounters::default();
                c.add("client port", self.client.nic_counters()?);
                c.add("echo port", server.nic_counters()?);
                if let Some((name, accel)) = self
                    .card
                    .as_ref()
                    .and_then(|c| c.fld.accelerator_counters())
                {
                    c.add(name, accel);
                }
                Ok(c)
            }
            EchoSide::Fld(flde) => flde_counters(&mut self.client, flde, self.card.as_deref()),
        }
    }

    /// FLD's memory report total, read from the running FLD.
    fn fld_memory(&self) -> Option<u64> {
        match &self.echo {
            EchoSide::Fld(f) => Some(f.fld().memory_report()[MemoryItem::Total as usize]),
            EchoSide::Cpu(_) => self
                .card
                .as_ref()
                .map(|c| c.fld.memory_report()[MemoryItem::Total as usize]),
        }
    }
}

/// Buffers per pool when the card is reached through vfio-user or vfio: DMA memory there is
/// pinned (a guest's RAM), so pools are smaller than in-process.
const REMOTE_MBUFS: u32 = 1024;

/// An FLD-E set-up's counters as the driver reads them: the generator's port, FLD's vPort,
/// FLD's statistics, and the accelerator's counters when `card` runs in this process.
pub(crate) fn flde_counters(
    client: &mut fld_host::EthDev,
    flde: &mut fld_host::flde::FldE,
    card: Option<&Card>,
) -> Result<CardCounters, fld_driver::DriverError> {
    let mut c = CardCounters::default();
    c.add("client port", client.nic_counters()?);
    let nic = flde.nic();
    c.add("FLD vPort", nic.query_vport(nic.vport())?.named().to_vec());
    c.add("FLD", flde.fld().named_stats());
    if let Some((name, accel)) = card.and_then(|c| c.fld.accelerator_counters()) {
        c.add(name, accel);
    }
    Ok(c)
}
