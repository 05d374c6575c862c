//! `fldemu`: the emulated FlexDriver card's command-line front end.
//!
//! * `fldemu demo` brings the card up and runs a CPU traffic generator on one host vPort against
//!   a CPU echo application on another, through the NIC's eSwitch, checking every byte that
//!   comes back. With `--accel echo` the echo is the FLD-E echo accelerator behind the FLD
//!   module. `--transport vfio-user|vfio` reaches a card served by `fldemu serve` instead of
//!   building one in-process.
//! * `fldemu bench` measures packets per second through the CPU and FLD-E echo paths at several
//!   frame sizes, beside a software loopback baseline measured in the same run.
//! * `fldemu memory` prints Table 3 (software vs FLD memory) from the formulas and from what the
//!   running FLD allocated, and Figure 4's sweep.
//! * `fldemu serve` exposes the card's functions on vfio-user sockets; `fldemu selftest` and
//!   `fldemu bench-transport` check and measure a card reached that way.

use fld_qemu::{selftest, serve};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use fld_device::card::Card;
use fld_device::fabric::TlpStats;
use fld_device::fld::abi::MemoryItem;
use fld_device::fld::abi::Stat;
use fld_device::fld::memory_model::{self, MemoryParams};
use fld_device::fld::perf_model::{self, Batching, FIGURE7A_SIZES};
use fld_device::wire::pcap::CaptureFilter;
use fld_device::wire::PcapTap;
use fld_host::apps::{
    datacenter_mix, echo_step, fld_safe_window, open_echo_pair, open_fld_echo, run_echo,
    EchoConfig, EchoReport, FldEchoPorts, FldEchoSetup, InProcessPair, Sizes, SoftPort, MAX_FRAME,
    MIN_FRAME,
};
use fld_host::{Mempool, RxMode};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "fldemu",
    version,
    about = "Software emulator of a FlexDriver accelerator-driven NIC card"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bring the card up (in-process, or reached through vfio-user or vfio) and echo verified
    /// traffic between two host vPorts, or through the FLD-E echo accelerator.
    Demo(DemoArgs),
    /// Measure packets per second through the CPU and FLD-E echo paths at 64, 256 and 1500 bytes
    /// and a data-center size mix.
    Bench(BenchArgs),
    /// Per accelerator, messages/s and Gbit/s through the full emulated path at the paper's
    /// sizes (ZUC 64-4096 B requests, defrag 1500 B datagrams at a 1450 B MTU, IoT 256 B
    /// messages), beside the host-software baseline measured in the same run.
    BenchAccel(BenchAccelArgs),
    /// Play a capture through the card (NIC rules + accelerator) and capture what reaches the
    /// host's queues, with a summary of the accelerator's counters.
    Replay(ReplayArgs),
    /// NIC-driver memory: the conventional driver's requirement (Table 3) beside what FLD
    /// allocates for the same parameters.
    Memory(MemoryArgs),
    /// FLD's PCIe performance model (Figure 7a): bytes per packet on FLD's link and the
    /// throughput bound per link configuration, beside the traffic the emulator measures.
    Model(ModelArgs),
    /// Check a card reached through vfio-user or vfio (inside a guest): verified CPU and FLD-E
    /// echo, MSI-X, DMA isolation, reset in the middle of traffic, garbage in every BAR. One
    /// line per check; fails if any check fails.
    Selftest(SelftestArgs),
    /// Latency of a transport to a card running elsewhere: trapped register read and write,
    /// doorbell to completion, doorbell to MSI-X interrupt.
    BenchTransport(BenchTransportArgs),
    /// Serve the card's PCIe functions on vfio-user sockets (QEMU's vfio-user-pci, or the
    /// driver's vfio-user transport). The NIC's doorbell pages are offered for mmap; control
    /// registers and the MSI-X table are trapped. Guest RAM must be shareable
    /// (memory-backend-memfd,share=on). Runs until killed; stale sockets are replaced at start.
    /// RUST_LOG=info logs connections, resets and unreachable maps; debug logs every map.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct SelftestArgs {
    /// How the driver reaches the card.
    #[arg(long, value_enum, default_value_t = TransportArg::Vfio)]
    transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets.
    #[arg(long, default_value = "fldemu-sockets")]
    socket_dir: std::path::PathBuf,
    /// Run only the checks whose name contains this.
    #[arg(long)]
    filter: Option<String>,
}

#[derive(clap::Args)]
struct BenchTransportArgs {
    /// How the driver reaches the card.
    #[arg(long, value_enum, default_value_t = TransportArg::Vfio)]
    transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets.
    #[arg(long, default_value = "fldemu-sockets")]
    socket_dir: std::path::PathBuf,
    /// Samples per figure.
    #[arg(long, default_value_t = 2000)]
    iterations: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Directory for the sockets: nic0.sock, nic1.sock (NIC host functions) and fld.sock.
    #[arg(long, default_value = "fldemu-sockets")]
    socket_dir: std::path::PathBuf,
    /// The accelerator behind FLD.
    #[arg(long, value_enum, default_value_t = ServeAccelArg::Echo)]
    accel: ServeAccelArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum ServeAccelArg {
    /// None: frames FLD receives are counted and dropped.
    None,
    /// The echo accelerator (the FLD-E demo's).
    Echo,
    /// The ZUC look-aside accelerator on its UDP port.
    Zuc,
}

#[derive(clap::Args)]
struct ModelArgs {
    /// Packets per measured size.
    #[arg(long, default_value_t = 20_000)]
    packets: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum AccelArg {
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

#[derive(clap::Args)]
struct MemoryArgs {
    /// Line rate B in Gbit/s.
    #[arg(long, default_value_t = 100.0)]
    gbps: f64,
    /// Transmit queues N_q.
    #[arg(long, default_value_t = 512)]
    queues: u32,
    /// Smallest packet M_min in bytes.
    #[arg(long, default_value_t = 256)]
    min_packet: u32,
    /// Largest packet (message) M_max in bytes.
    #[arg(long, default_value_t = 16384)]
    max_packet: u32,
    /// Receive buffer lifetime L_rx in microseconds.
    #[arg(long, default_value_t = 5.0)]
    rx_lifetime_us: f64,
    /// Transmit buffer lifetime L_tx in microseconds.
    #[arg(long, default_value_t = 25.0)]
    tx_lifetime_us: f64,
    /// Also print Figure 4's sweep (25-400 Gbit/s, 1-2048 queues) from the formulas.
    #[arg(long)]
    sweep: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Multi-packet receive layout of the demo and benchmark: 256-byte strides, 64 per WQE (16 KiB
/// buffers), so a 64-byte frame takes one stride and a 9000-byte frame 36.
const STRIDING: RxMode = RxMode::Striding {
    log_stride_size: 8,
    log_strides: 6,
};

#[derive(Clone, Copy, ValueEnum)]
enum RxModeArg {
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

#[derive(clap::Args)]
struct DemoArgs {
    /// Packets to send and verify.
    #[arg(long, default_value_t = 100_000)]
    packets: u64,
    /// Frame size in bytes without FCS (60..=9000). Defaults: 64 (echo), 1500 (zuc, defrag: the
    /// datagram before fragmentation at a 1450-byte MTU), 256 (iot).
    #[arg(long, value_parser = clap::value_parser!(u64).range(MIN_FRAME as u64..=MAX_FRAME as u64))]
    size: Option<u64>,
    /// With --size: sweep every size from --size to this one.
    #[arg(long, value_parser = clap::value_parser!(u64).range(MIN_FRAME as u64..=MAX_FRAME as u64))]
    size_max: Option<u64>,
    /// Receive queue layout of both ports.
    #[arg(long, value_enum, default_value_t = RxModeArg::Striding)]
    rx_mode: RxModeArg,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Who echoes: a CPU application, or the echo accelerator behind FLD (FLD-E).
    #[arg(long, value_enum, default_value_t = AccelArg::None)]
    accel: AccelArg,
    /// Write every frame entering the eSwitch to this pcap file.
    #[arg(long)]
    pcap: Option<String>,
    /// How the driver reaches the card: in this process, over `fldemu serve`'s vfio-user
    /// sockets, or through Linux vfio-pci (inside a guest whose QEMU attaches the card).
    #[arg(long, value_enum, default_value_t = TransportArg::InProcess)]
    transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets.
    #[arg(long, default_value = "fldemu-sockets")]
    socket_dir: std::path::PathBuf,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum TransportArg {
    /// The card runs in this process.
    InProcess,
    /// `fldemu serve` (nic0.sock, nic1.sock, fld.sock), through the vfio-user client transport.
    VfioUser,
    /// The functions found in sysfs by vendor and device ID, bound to vfio-pci.
    Vfio,
}

/// DMA memory for the driver when the card is reached through vfio-user or vfio.
const REMOTE_DMA_BYTES: usize = 128 << 20;

impl TransportArg {
    /// The self-test's view of a transport that reaches a card running elsewhere.
    fn remote(self, socket_dir: &std::path::Path) -> Option<selftest::Transport> {
        match self {
            TransportArg::InProcess => None,
            TransportArg::VfioUser => Some(selftest::Transport::VfioUser(socket_dir.into())),
            TransportArg::Vfio => Some(selftest::Transport::Vfio),
        }
    }
}

/// Opens the echo set-up over the transport `a` names.
fn open_echoer(a: &DemoArgs, max_frame: usize) -> Result<Echoer, Box<dyn std::error::Error>> {
    let rx = a.rx_mode.mode();
    match a.transport.remote(&a.socket_dir) {
        None => Echoer::new(a.accel, rx, max_frame),
        Some(t) => {
            let card = t.open(REMOTE_DMA_BYTES)?;
            Echoer::open_remote(a.accel, rx, max_frame, card.nic, card.fld, card.transport)
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ReplayAccelArg {
    Echo,
    Zuc,
    Defrag,
    Iot,
}

#[derive(Clone, Copy, ValueEnum)]
enum InjectArg {
    /// Frames arrive from the network on the uplink.
    Uplink,
    /// The host function sends them.
    Host,
}

#[derive(clap::Args)]
struct ReplayArgs {
    #[arg(long, value_enum)]
    accel: ReplayAccelArg,
    /// Input capture (pcap, Ethernet link type).
    #[arg(long = "in")]
    input: std::path::PathBuf,
    /// Output capture: every frame that reached the host's receive queues.
    #[arg(long)]
    out: std::path::PathBuf,
    /// TOML file: `now` (seconds, IoT token time), `host_queues`, `[[tenant]]` tables with
    /// `context`, `src` (IPv4) and `key` (IoT), `[defrag]` with `timeout_ms`, `max_datagram`,
    /// `max_datagrams`, `max_buffered_bytes`.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Where the frames enter the card.
    #[arg(long, value_enum, default_value_t = InjectArg::Uplink)]
    inject: InjectArg,
    /// Frames entering per NIC poll.
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReplayFile {
    now: Option<u64>,
    host_queues: Option<u16>,
    #[serde(default)]
    tenant: Vec<TenantFile>,
    defrag: Option<DefragFile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantFile {
    context: u16,
    src: std::net::Ipv4Addr,
    key: String,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DefragFile {
    timeout_ms: Option<u64>,
    max_datagram: Option<usize>,
    max_datagrams: Option<usize>,
    max_buffered_bytes: Option<usize>,
}

#[derive(clap::Args)]
struct BenchAccelArgs {
    /// Messages (operations, datagrams) per measurement.
    #[arg(long, default_value_t = 20_000)]
    packets: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Packets per measurement at 64 B (fewer at larger sizes, same byte budget order).
    #[arg(long, default_value_t = 400_000)]
    packets: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Demo(a) => demo(a),
        Cmd::Bench(a) => bench(a),
        Cmd::BenchAccel(a) => bench_accel(a),
        Cmd::Replay(a) => replay(a),
        Cmd::Memory(a) => memory(a),
        Cmd::Model(a) => model(a),
        Cmd::Selftest(a) => match a.transport.remote(&a.socket_dir) {
            None => Err("the self-test checks a card reached through vfio-user or vfio".into()),
            Some(t) => {
                let failed = selftest::run(&t, a.filter.as_deref());
                println!(
                    "selftest: {} checks, {failed} failed",
                    selftest::CHECKS
                        .iter()
                        .filter(|c| a.filter.as_deref().is_none_or(|f| c.name.contains(f)))
                        .count()
                );
                Ok(exit_code(failed == 0))
            }
        },
        Cmd::BenchTransport(a) => match a.transport.remote(&a.socket_dir) {
            None => Err("bench-transport measures vfio-user or vfio".into()),
            Some(t) => fld_qemu::transport_bench::measure(&t, a.iterations.max(1))
                .map_err(Into::into)
                .map(|f| {
                    if a.json {
                        println!("{}", serde_json::to_string(&f).unwrap_or_default());
                    } else {
                        println!("doorbell page mapped: {}", f.doorbell_mapped);
                        for (name, l) in [
                            ("trapped register read", &f.mmio_read),
                            ("trapped register write", &f.mmio_write),
                            ("doorbell -> completion", &f.doorbell_to_completion),
                            ("doorbell -> MSI-X", &f.doorbell_to_msix),
                        ] {
                            println!(
                                "{name:24} mean {:9.2} us  median {:9.2} us  p99 {:9.2} us  ({} samples)",
                                l.mean_us, l.median_us, l.p99_us, l.samples
                            );
                        }
                    }
                    ExitCode::SUCCESS
                }),
        },
        Cmd::Serve(a) => {
            let card = Card::new(Default::default());
            match a.accel {
                ServeAccelArg::None => {}
                ServeAccelArg::Echo => card
                    .fld
                    .set_accelerator(Box::new(fld_device::accel::Echo::new(0, 256))),
                ServeAccelArg::Zuc => {
                    use fld_device::accel::zuc_accel::{ZucAccel, ZUC_UDP_PORT};
                    card.fld
                        .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0)))
                }
            }
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            for (_, name) in serve::socket_names(&card) {
                eprintln!("fldemu: serving {}", a.socket_dir.join(name).display());
            }
            serve::serve(card, &a.socket_dir, stop)
                .map(|_| ExitCode::SUCCESS)
                .map_err(Into::into)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fldemu: {e}");
            ExitCode::FAILURE
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
enum EchoSide {
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
    /// Keeps the transport (its connections, DMA memory) alive.
    _transport: Box<dyn std::any::Any>,
}

impl Echoer {
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
                    _transport: Box::new(p.host),
                }
            }
            _ => {
                let f = FldEchoSetup::new(max_frame)?;
                Echoer {
                    client: f.client,
                    echo: EchoSide::Fld(f.flde),
                    card: Some(f.card),
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
        match &mut self.echo {
            EchoSide::Cpu(server) => {
                let mac = server.mac();
                let mut scratch = Vec::with_capacity(cfg.burst);
                run_echo(&mut self.client, mac, cfg, || {
                    echo_step(server, &mut scratch, cfg.burst)
                })
            }
            EchoSide::Fld(flde) => {
                let card = self.card.clone();
                run_echo(&mut self.client, flde.mac(), cfg, || {
                    card.as_ref().map_or(0, |c| c.poll())
                })
            }
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

fn demo(a: DemoArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if a.accel == AccelArg::Zuc {
        return zuc_demo(&a);
    }
    if matches!(a.accel, AccelArg::Defrag | AccelArg::Iot) {
        return inline_demo(&a);
    }
    let size = a.size.unwrap_or(64);
    let sizes = match a.size_max {
        Some(max) if max > size => Sizes::Sweep {
            min: size as usize,
            max: max as usize,
        },
        _ => Sizes::Fixed(size as usize),
    };
    if a.transport != TransportArg::InProcess && !matches!(a.accel, AccelArg::None | AccelArg::Echo)
    {
        return Err("over vfio-user and vfio the demo runs the CPU and FLD-E echo paths".into());
    }
    let mut echo = open_echoer(&a, sizes.max())?;
    if let (Some(path), Some(card)) = (&a.pcap, &echo.card) {
        let tap = PcapTap::new(
            BufWriter::new(File::create(path)?),
            CaptureFilter::AllIngress,
        )?;
        card.nic.set_tap(Some(Box::new(tap)));
    }
    if let Some(card) = &echo.card {
        card.fabric.clear_stats();
    }
    let window = echo.window(sizes.max());
    let cfg = EchoConfig {
        packets: a.packets,
        sizes: sizes.clone(),
        burst: a.burst.clamp(1, 256),
        window,
        ..Default::default()
    };
    let rep = echo.run(&cfg);
    // Every echoed packet crosses the NIC twice (client -> echo, echo -> client).
    let crossings = (rep.packets_sent + rep.packets_received).max(1);
    // PCIe counters live in the fabric: known only when the card runs in this process.
    let links = echo.card.as_ref().map(|card| {
        // Dropping the tap flushes the capture.
        card.nic.set_tap(None);
        link_stats(card)
    });
    let per_pkt = links.map(|(nic, _)| nic.total_bytes() as f64 / crossings as f64);
    let tlps_per_pkt = links.map(|(nic, _)| nic.total_tlps() as f64 / crossings as f64);
    let fld_per_pkt =
        links.map(|(_, fld)| fld.total_bytes() as f64 / rep.packets_received.max(1) as f64);
    let ok =
        rep.mismatches == 0 && rep.packets_received == a.packets && rep.checksum_flags_bad == 0;
    let fld_memory = echo.fld_memory();
    let software_memory = memory_model::software_requirement(&MemoryParams::table_2a()).total;
    if a.json {
        let v = json!({
            "packets_sent": rep.packets_sent,
            "packets_received": rep.packets_received,
            "bytes_verified": rep.bytes_verified,
            "mismatches": rep.mismatches,
            "checksum_flags_bad": rep.checksum_flags_bad,
            "mpps": rep.mpps(),
            "gbps": rep.gbps(),
            "elapsed_s": rep.elapsed.as_secs_f64(),
            "pcie_bytes_per_packet": per_pkt,
            "pcie_tlps_per_packet": tlps_per_pkt,
            "fld_pcie_bytes_per_packet": fld_per_pkt,
            "transport": match a.transport {
                TransportArg::InProcess => "in-process",
                TransportArg::VfioUser => "vfio-user",
                TransportArg::Vfio => "vfio",
            },
            "accel": match a.accel { AccelArg::None => "none", _ => "echo" },
            "rx_mode": match a.rx_mode { RxModeArg::Regular => "regular", RxModeArg::Striding => "striding" },
            "size_min": size,
            "size_max": sizes.max(),
            "fld_memory_bytes": fld_memory,
            "software_memory_bytes": software_memory,
            "verified": ok,
        });
        println!("{v}");
    } else {
        let size = match &sizes {
            Sizes::Sweep { min, max } => format!("{min}..{max} B"),
            _ => format!("{} B", sizes.max()),
        };
        match a.accel {
            AccelArg::None => println!("fldemu demo: CPU generator (vPort 1) -> eSwitch -> CPU echo (vPort 0) -> back"),
            _ => println!("fldemu demo: CPU generator (vPort 1) -> eSwitch -> vPort 0 -> FLD -> echo accelerator -> FLD -> NIC -> back"),
        }
        println!("  frames          {size}");
        println!(
            "  sent/received   {} / {}",
            rep.packets_sent, rep.packets_received
        );
        println!(
            "  verified        {} bytes, {} mismatches, {} bad checksum flags",
            rep.bytes_verified, rep.mismatches, rep.checksum_flags_bad
        );
        println!(
            "  rate            {:.3} Mpps, {:.3} Gbit/s over {:.3} s",
            rep.mpps(),
            rep.gbps(),
            rep.elapsed.as_secs_f64()
        );
        if let (Some(bytes), Some(tlps)) = (per_pkt, tlps_per_pkt) {
            println!("  PCIe (NIC)      {bytes:.1} bytes and {tlps:.2} TLPs per packet crossing");
        }
        if a.accel == AccelArg::Echo {
            if let Some(fld) = fld_per_pkt {
                println!("  PCIe (FLD)      {fld:.1} bytes per echoed packet");
            }
            if let Some(fld_memory) = fld_memory {
                println!("  memory          FLD {:.1} KiB on chip vs {:.1} MiB for a software driver (Table 2a parameters)", fld_memory as f64 / 1024.0, software_memory as f64 / 1048576.0);
            }
        }
        if let Some(p) = &a.pcap {
            println!("  capture         {p}");
        }
        println!("  result          {}", verdict(ok));
    }
    Ok(exit_code(ok))
}

/// One measured path of one workload.
#[derive(Default)]
struct Measured {
    mpps: f64,
    goodput_gbps: f64,
    nic_pcie_bytes_per_packet: f64,
    failures: u64,
}

fn measure(echo: &mut Echoer, cfg: &EchoConfig) -> Measured {
    let warm = EchoConfig {
        packets: cfg.packets / 20 + 1,
        ..cfg.clone()
    };
    echo.run(&warm);
    echo.card().fabric.clear_stats();
    let rep = echo.run(cfg);
    let (nic, _) = link_stats(echo.card());
    Measured {
        mpps: rep.mpps(),
        goodput_gbps: rep.gbps(),
        nic_pcie_bytes_per_packet: nic.total_bytes() as f64
            / (rep.packets_sent + rep.packets_received).max(1) as f64,
        failures: rep.mismatches + (cfg.packets - rep.packets_received),
    }
}

/// The same applications over a software loopback: copies and checksums, no device model.
fn measure_loopback(
    cfg: &EchoConfig,
    max_frame: usize,
) -> Result<Measured, Box<dyn std::error::Error>> {
    let card = Card::new(Default::default());
    let host = fld_driver::inprocess::InProcessHost::new(card.clone(), 256 << 20)?;
    let dev = host.device(0);
    let buf = (max_frame + 128) as u32;
    let (pa, pb) = (
        Mempool::new(dev.as_ref(), 4096, buf)?,
        Mempool::new(dev.as_ref(), 4096, buf)?,
    );
    let (mut a, mut b) = SoftPort::pair((pa, [2, 0, 0, 0, 0, 1]), (pb, [2, 0, 0, 0, 0, 2]));
    let mut scratch = Vec::new();
    let warm = EchoConfig {
        packets: cfg.packets / 20 + 1,
        ..cfg.clone()
    };
    fld_host::apps::run_echo(&mut a, [2, 0, 0, 0, 0, 2], &warm, || {
        fld_host::apps::echo_step(&mut b, &mut scratch, 32)
    });
    let rep = fld_host::apps::run_echo(&mut a, [2, 0, 0, 0, 0, 2], cfg, || {
        fld_host::apps::echo_step(&mut b, &mut scratch, 32)
    });
    Ok(Measured {
        mpps: rep.mpps(),
        goodput_gbps: rep.gbps(),
        nic_pcie_bytes_per_packet: 0.0,
        failures: rep.mismatches + (cfg.packets - rep.packets_received),
    })
}

fn bench(a: BenchArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let workloads = [
        ("64", Sizes::Fixed(64), 1u64),
        ("256", Sizes::Fixed(256), 1),
        ("1500", Sizes::Fixed(1500), 2),
        ("datacenter-mix", datacenter_mix(), 2),
    ];
    let mut rows = Vec::new();
    for (name, sizes, scale) in workloads {
        let packets = (a.packets / scale).max(1000);
        let max = sizes.max();
        let cfg = EchoConfig {
            packets,
            sizes: sizes.clone(),
            burst: 32,
            window: 1024,
            ..Default::default()
        };
        let cpu = measure(&mut Echoer::new(AccelArg::None, STRIDING, max)?, &cfg);
        let mut fld_echo = Echoer::new(AccelArg::Echo, STRIDING, max)?;
        let fld_cfg = EchoConfig {
            window: fld_echo.window(max),
            ..cfg.clone()
        };
        let fld = measure(&mut fld_echo, &fld_cfg);
        let base = measure_loopback(&cfg, max)?;
        rows.push((name, packets, cpu, fld, base));
    }
    let failed = rows
        .iter()
        .any(|(_, _, c, f, b)| c.failures + f.failures + b.failures != 0);
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(name, packets, cpu, fld, base)| {
                let (cpu_ns, base_ns) = (1e3 / cpu.mpps, 1e3 / base.mpps);
                json!({
                    "workload": name,
                    "packets": packets,
                    "cpu_echo_mpps": cpu.mpps,
                    "cpu_echo_goodput_gbps": cpu.goodput_gbps,
                    "flde_echo_mpps": fld.mpps,
                    "flde_echo_goodput_gbps": fld.goodput_gbps,
                    "ratio_flde_to_cpu": fld.mpps / cpu.mpps,
                    "software_loopback_mpps": base.mpps,
                    "ratio_cpu_echo_to_loopback": cpu.mpps / base.mpps,
                    "emulator_ns_per_nic_crossing": ((cpu_ns - base_ns) / 2.0).max(0.0),
                    "cpu_path_nic_pcie_bytes_per_packet": cpu.nic_pcie_bytes_per_packet,
                    "flde_path_nic_pcie_bytes_per_packet": fld.nic_pcie_bytes_per_packet,
                    "verification_failures": cpu.failures + fld.failures + base.failures,
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "note": "echoed packets per second on one core, in-process; each echoed packet crosses the emulated NIC twice", "results": out })
        );
    } else {
        println!(
            "{:>15} {:>10} {:>10} {:>8} {:>11} {:>9} {:>12}",
            "workload", "CPU Mpps", "FLD-E Mpps", "FLD/CPU", "loop Mpps", "CPU/loop", "ns/crossing"
        );
        for (name, _, cpu, fld, base) in &rows {
            let (cpu_ns, base_ns) = (1e3 / cpu.mpps, 1e3 / base.mpps);
            println!(
                "{:>15} {:>10.3} {:>10.3} {:>8.3} {:>11.3} {:>9.3} {:>12.1}",
                name,
                cpu.mpps,
                fld.mpps,
                fld.mpps / cpu.mpps,
                base.mpps,
                cpu.mpps / base.mpps,
                ((cpu_ns - base_ns) / 2.0).max(0.0)
            );
        }
    }
    Ok(exit_code(!failed))
}

fn memory(a: MemoryArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let params = MemoryParams {
        bandwidth_gbps: a.gbps,
        min_packet: a.min_packet,
        max_packet: a.max_packet,
        rx_lifetime_us: a.rx_lifetime_us,
        tx_lifetime_us: a.tx_lifetime_us,
        tx_queues: a.queues,
    };
    let lifetimes_ok = [a.rx_lifetime_us, a.tx_lifetime_us]
        .iter()
        .all(|l| *l > 0.0 && *l <= 10_000.0);
    let rate_ok = a.gbps > 0.0 && a.gbps <= 1600.0;
    if !rate_ok || !lifetimes_ok || a.min_packet < 64 || a.max_packet < a.min_packet {
        return Err("parameters out of range: 0 < gbps <= 1600, 0 < lifetimes <= 10000 us, 64 <= min-packet <= max-packet".into());
    }
    fld_device::fld::abi::FldGeometry::from_params(&params).check()?;
    let model = memory_model::report(&params);
    // The running device: FLD sized from the same parameters, brought up and bound by the driver.
    let setup = FldEchoSetup::build(params.max_packet.min(9000) as usize, 1, params)?;
    let running = setup.card.fld.memory_report();
    let by_item = [
        ("Tx descriptor pool", MemoryItem::TxDescriptorPool),
        (
            "Tx ring translation (cuckoo)",
            MemoryItem::TxRingTranslation,
        ),
        ("Tx buffer", MemoryItem::TxBuffer),
        (
            "Tx data translation (cuckoo)",
            MemoryItem::TxDataTranslation,
        ),
        ("Rx buffer", MemoryItem::RxBuffer),
        ("Tx completions (15 B)", MemoryItem::TxCompletions),
        ("Rx completions (15 B)", MemoryItem::RxCompletions),
        ("producer indices", MemoryItem::ProducerIndices),
        ("total", MemoryItem::Total),
    ];
    let fld_total = running[MemoryItem::Total as usize];
    if a.json {
        let allocated: serde_json::Map<String, serde_json::Value> = by_item
            .iter()
            .map(|(n, i)| (n.to_string(), json!(running[*i as usize])))
            .collect();
        let mut v = json!({
            "params": params,
            "derived": model.derived,
            "table3": model.structures,
            "software_total_bytes": model.software_total,
            "fld_model_total_bytes": model.fld_total,
            "fld_allocated_bytes": allocated,
            "fld_allocated_total_bytes": fld_total,
            "ratio_software_to_fld_model": model.ratio,
            "ratio_software_to_fld_allocated": model.software_total as f64 / fld_total as f64,
        });
        if a.sweep {
            v["figure4"] = json!(memory_model::figure4_sweep(&params));
        }
        println!("{v}");
    } else {
        let kib = |b: u64| b as f64 / 1024.0;
        println!(
            "Table 3 for {} Gbit/s, {} Tx queues, {}..{} B packets, L_rx/L_tx {}/{} us",
            a.gbps, a.queues, a.min_packet, a.max_packet, a.rx_lifetime_us, a.tx_lifetime_us
        );
        println!(
            "{:<28} {:>14} {:>14} {:>9}",
            "structure", "software KiB", "FLD model KiB", "shrink"
        );
        for st in &model.structures {
            let fld = st
                .fld_bytes
                .map_or("-".to_string(), |b| format!("{:.2}", kib(b)));
            let ratio = st
                .fld_bytes
                .filter(|b| *b > 0)
                .map_or("-".to_string(), |b| {
                    format!("x{:.1}", st.software_bytes as f64 / b as f64)
                });
            println!(
                "{:<28} {:>14.2} {:>14} {:>9}",
                st.name,
                kib(st.software_bytes),
                fld,
                ratio
            );
        }
        println!(
            "{:<28} {:>14.2} {:>14.2} {:>9}",
            "total",
            kib(model.software_total),
            kib(model.fld_total),
            format!("x{:.1}", model.ratio)
        );
        println!();
        println!("FLD as allocated by the running device:");
        for (name, item) in by_item {
            println!("  {:<30} {:>12.2} KiB", name, kib(running[item as usize]));
        }
        println!(
            "  software / FLD allocated      x{:.1}",
            model.software_total as f64 / fld_total as f64
        );
        if a.sweep {
            println!();
            println!("Figure 4 (formulas): software vs FLD total");
            println!(
                "{:>8} {:>7} {:>14} {:>12} {:>8}",
                "Gbit/s", "queues", "software MiB", "FLD KiB", "ratio"
            );
            for p in memory_model::figure4_sweep(&params) {
                println!(
                    "{:>8} {:>7} {:>14.1} {:>12.1} {:>8.0}",
                    p.bandwidth_gbps,
                    p.tx_queues,
                    p.software_total as f64 / 1048576.0,
                    p.fld_total as f64 / 1024.0,
                    p.ratio
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn model(a: ModelArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let fabric = fld_device::fabric::FabricConfig::default();
    let links = perf_model::figure7a_links();
    let batching = Batching::default();
    let mut rows = Vec::new();
    let mut failed = false;
    for size in FIGURE7A_SIZES {
        // Measured: the FLD-E echo path in the emulator, counted on FLD's link.
        let mut echo = Echoer::new(AccelArg::Echo, STRIDING, size as usize)?;
        let window = echo.window(size as usize);
        let cfg = EchoConfig {
            packets: a.packets,
            sizes: Sizes::Fixed(size as usize),
            window,
            ..Default::default()
        };
        echo.run(&EchoConfig {
            packets: 200,
            ..cfg.clone()
        });
        echo.card().fabric.clear_stats();
        let completions_before = echo.card().fld.stat(Stat::TxCompletions);
        let rep = echo.run(&cfg);
        let fld = &echo.card().fld;
        failed |= rep.mismatches != 0 || rep.packets_received != cfg.packets;
        let link = echo.card().fabric.stats(fld.id());
        let n = rep.packets_received.max(1) as f64;
        let measured = perf_model::PacketCost {
            to_fld: link.down_header_bytes as f64 / n + link.down_payload_bytes as f64 / n,
            from_fld: link.up_header_bytes as f64 / n + link.up_payload_bytes as f64 / n,
        };
        let per_completion = n / (fld.stat(Stat::TxCompletions) - completions_before).max(1) as f64;
        // The model at the batching the run actually had, and at the design batching.
        let at_run = Batching {
            packets_per_completion: per_completion,
            ..batching
        };
        let modelled = perf_model::packet_cost(size, &fabric, &at_run);
        let bounds: Vec<_> = links
            .iter()
            .map(|l| (l.name, perf_model::bound(size, l, &fabric, &batching)))
            .collect();
        rows.push((size, measured, modelled, per_completion, bounds));
    }
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(size, measured, modelled, k, bounds)| {
                json!({
                    "size": size,
                    "measured_bytes_per_packet": measured,
                    "model_bytes_per_packet_at_measured_batching": modelled,
                    "measured_packets_per_completion": k,
                    "model_over_measured": modelled.max() / measured.max(),
                    "bounds": bounds.iter().map(|(name, b)| json!({ "link": name, "bound": b })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "links": links, "design_batching": batching, "fabric": { "mps": fabric.mps, "mrrs": fabric.mrrs, "tlp_overhead": fabric.tlp_overhead }, "results": out })
        );
    } else {
        println!("FLD link bytes per echoed packet (into FLD / out of FLD), model vs emulator:");
        println!(
            "{:>6} {:>20} {:>20} {:>8}",
            "size", "model", "measured", "batch"
        );
        for (size, measured, modelled, k, _) in &rows {
            println!(
                "{:>6} {:>9.1} / {:>8.1} {:>9.1} / {:>8.1} {:>8.1}",
                size, modelled.to_fld, modelled.from_fld, measured.to_fld, measured.from_fld, k
            );
        }
        println!();
        println!("Expected throughput (fraction of Ethernet line rate), Figure 7a:");
        print!("{:>6}", "size");
        for l in &links {
            print!(" {:>22}", l.name);
        }
        println!();
        for (size, _, _, _, bounds) in &rows {
            print!("{size:>6}");
            for (_, b) in bounds {
                print!(
                    " {:>13.2} Mpps {:>4.0}%",
                    b.expected_mpps,
                    100.0 * b.fraction_of_line_rate
                );
            }
            println!();
        }
    }
    Ok(exit_code(!failed))
}

/// One ZUC measurement: the same operations through software ZUC and through the accelerator.
struct ZucMeasured {
    software_secs: f64,
    accel_secs: f64,
    mismatches: u64,
    done: usize,
}

/// `ops` cipher operations of `bytes` data bytes (2/3 EEA3, 1/3 EIA3) through software ZUC and
/// through the ZUC accelerator behind FLD-E, with every result compared.
fn zuc_measure(
    ops: usize,
    bytes: usize,
    burst: usize,
) -> Result<ZucMeasured, Box<dyn std::error::Error>> {
    use fld_host::cryptodev::{run_ops, sample_ops, OpStatus, SoftZuc, ZucOffload};
    let mut s = FldEchoSetup::new(9000)?;
    let addr = s.attach_zuc();
    let ops = sample_ops(ops, bytes, true, 0x5eed);
    let t = std::time::Instant::now();
    let soft = run_ops(&mut SoftZuc::default(), ops.clone(), burst.clamp(1, 256));
    let software_secs = t.elapsed().as_secs_f64();
    let window = s.safe_window(14 + 20 + 8 + 64 + bytes);
    let mut dev = ZucOffload::new(&mut s.client, addr)
        .ok_or("client port has no pool")?
        .with_max_inflight(window);
    let t = std::time::Instant::now();
    let hard = run_ops(&mut dev, ops, burst.clamp(1, 64));
    let accel_secs = t.elapsed().as_secs_f64();
    let mismatches = soft
        .iter()
        .zip(&hard)
        .filter(|(x, y)| x.data != y.data || x.mac != y.mac || y.status != OpStatus::Success)
        .count() as u64
        + (soft.len().abs_diff(hard.len())) as u64;
    Ok(ZucMeasured {
        software_secs,
        accel_secs,
        mismatches,
        done: hard.len(),
    })
}

/// Cipher operations through the ZUC accelerator behind FLD-E and through software ZUC, with
/// every result compared.
fn zuc_demo(a: &DemoArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let bytes = (a.size.unwrap_or(1500) as usize)
        .saturating_sub(14 + 20 + 8 + 64)
        .max(1);
    let m = zuc_measure(a.packets as usize, bytes, a.burst)?;
    let (soft_s, hard_s, mismatches, done) = (m.software_secs, m.accel_secs, m.mismatches, m.done);
    let ok = mismatches == 0 && done as u64 == a.packets;
    let n = done as f64;
    let gbps = |secs: f64| n * bytes as f64 * 8.0 / secs.max(1e-9) / 1e9;
    if a.json {
        println!(
            "{}",
            json!({ "accel": "zuc", "operations": done, "data_bytes_per_op": bytes, "mismatches": mismatches, "accelerator_mops": n / hard_s.max(1e-9) / 1e6, "accelerator_gbps": gbps(hard_s), "software_mops": n / soft_s.max(1e-9) / 1e6, "software_gbps": gbps(soft_s), "verified": ok })
        );
    } else {
        println!("fldemu demo: cryptodev client (vPort 1) -> FLD-E -> ZUC accelerator (8 units) -> back, against software ZUC");
        println!(
            "  operations      {} of {} data bytes (2/3 EEA3, 1/3 EIA3)",
            done, bytes
        );
        println!(
            "  accelerator     {:.3} Mops/s, {:.3} Gbit/s",
            n / hard_s.max(1e-9) / 1e6,
            gbps(hard_s)
        );
        println!(
            "  software ZUC    {:.3} Mops/s, {:.3} Gbit/s",
            n / soft_s.max(1e-9) / 1e6,
            gbps(soft_s)
        );
        println!(
            "  result          {} ({} mismatches)",
            verdict(ok),
            mismatches
        );
    }
    Ok(exit_code(ok))
}

/// The inline accelerators (defrag, iot) end to end against the host doing the same work.
fn inline_demo(a: &DemoArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use fld_host::inline_apps::{defrag_workload, iot_workload};
    let n = a.packets as usize;
    let (name, r, path) = match a.accel {
        AccelArg::Defrag => (
            "defrag",
            defrag_workload(n, a.size.unwrap_or(1500) as usize, 1450)?,
            "client (vPort 1) fragments at a 1450 B MTU -> eSwitch (fragments only) -> FLD -> reassembly -> NIC resumes (RSS over 4 queues) -> client; against host-side reassembly",
        ),
        _ => (
            "iot",
            iot_workload(n, a.size.unwrap_or(256) as usize, 16)?,
            "16 tenants' CoAP clients (vPort 1) -> eSwitch -> per-tenant rules tag context -> FLD -> JWT HS256 check -> NIC resumes -> server; against host-side verification",
        ),
    };
    let ok = r.verified();
    if a.json {
        let counters = counters_json(&r.counters);
        println!(
            "{}",
            json!({ "accel": name, "messages": r.messages, "message_bytes": r.message_bytes, "frames_sent": r.frames_sent,
                "expected": r.expected, "delivered": r.offload_delivered, "mismatches": r.offload_mismatches + r.software_mismatches,
                "fld_rx_frames": r.fld_rx_frames, "accelerator_mps": r.offload_mps(), "accelerator_gbps": r.gbps(r.offload_secs),
                "software_mps": r.software_mps(), "software_gbps": r.gbps(r.software_secs),
                "ratio_accelerator_to_software": r.offload_mps() / r.software_mps().max(1e-9),
                "counters": counters, "verified": ok })
        );
    } else {
        println!("fldemu demo: {path}");
        println!(
            "  messages        {} of {} B ({} frames on the wire, {} into FLD)",
            r.messages, r.message_bytes, r.frames_sent, r.fld_rx_frames
        );
        println!(
            "  delivered       {} of {} expected ({} mismatches)",
            r.offload_delivered, r.expected, r.offload_mismatches
        );
        println!(
            "  accelerator     {:.3} M msg/s, {:.3} Gbit/s",
            r.offload_mps() / 1e6,
            r.gbps(r.offload_secs)
        );
        println!(
            "  host software   {:.3} M msg/s, {:.3} Gbit/s (x{:.2} for the accelerator)",
            r.software_mps() / 1e6,
            r.gbps(r.software_secs),
            r.offload_mps() / r.software_mps().max(1e-9)
        );
        for (k, v) in &r.counters {
            println!("  {k:<15} {v}");
        }
        println!("  result          {}", verdict(ok));
    }
    Ok(exit_code(ok))
}

fn bench_accel(a: BenchAccelArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use fld_host::inline_apps::{defrag_workload, iot_workload};
    struct Row {
        accel: &'static str,
        bytes: usize,
        messages: u64,
        accel_mps: f64,
        software_mps: f64,
        verified: bool,
    }
    let n = a.packets.max(100) as usize;
    let mut rows = Vec::new();
    for bytes in [64usize, 256, 1024, 4096] {
        let m = zuc_measure(n, bytes, 32)?;
        rows.push(Row {
            accel: "zuc",
            bytes,
            messages: m.done as u64,
            accel_mps: m.done as f64 / m.accel_secs.max(1e-9),
            software_mps: m.done as f64 / m.software_secs.max(1e-9),
            verified: m.mismatches == 0 && m.done == n,
        });
    }
    for (accel, r) in [
        ("defrag", defrag_workload(n, 1500, 1450)?),
        ("iot", iot_workload(n, 256, 16)?),
    ] {
        rows.push(Row {
            accel,
            bytes: r.message_bytes,
            messages: r.messages,
            accel_mps: r.offload_mps(),
            software_mps: r.software_mps(),
            verified: r.verified(),
        });
    }
    let gbps = |r: &Row, mps: f64| mps * r.bytes as f64 * 8.0 / 1e9;
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({ "accel": r.accel, "message_bytes": r.bytes, "messages": r.messages,
                    "accelerator_mps": r.accel_mps, "accelerator_gbps": gbps(r, r.accel_mps),
                    "software_mps": r.software_mps, "software_gbps": gbps(r, r.software_mps),
                    "ratio_accelerator_to_software": r.accel_mps / r.software_mps.max(1e-9),
                    "verified": r.verified })
            })
            .collect();
        println!(
            "{}",
            json!({ "note": "one core, in-process: the accelerator model runs on the same CPU as the host baseline, so ratios measure the emulated path's overhead, not FPGA speed-up; message_bytes is the ZUC data length, the defrag datagram, the IoT frame", "results": out })
        );
    } else {
        println!(
            "{:>7} {:>6} {:>10} {:>10} {:>10} {:>10} {:>8} {:>9}",
            "accel",
            "bytes",
            "accel Mm/s",
            "accel Gb/s",
            "host Mm/s",
            "host Gb/s",
            "acc/host",
            "verified"
        );
        for r in &rows {
            println!(
                "{:>7} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>8.2} {:>9}",
                r.accel,
                r.bytes,
                r.accel_mps / 1e6,
                gbps(r, r.accel_mps),
                r.software_mps / 1e6,
                gbps(r, r.software_mps),
                r.accel_mps / r.software_mps.max(1e-9),
                r.verified
            );
        }
    }
    Ok(exit_code(rows.iter().all(|r| r.verified)))
}

fn replay(a: ReplayArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use fld_host::replay::{replay, Inject, ReplayAccel, ReplayConfig, ReplayTenant};
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
    let file: ReplayFile = match &a.config {
        Some(p) => toml::from_str(&std::fs::read_to_string(p)?)
            .map_err(|e| format!("{}: {e}", p.display()))?,
        None => ReplayFile::default(),
    };
    let mut cfg = ReplayConfig {
        accel: match a.accel {
            ReplayAccelArg::Echo => ReplayAccel::Echo,
            ReplayAccelArg::Zuc => ReplayAccel::Zuc,
            ReplayAccelArg::Defrag => ReplayAccel::Defrag,
            ReplayAccelArg::Iot => ReplayAccel::Iot,
        },
        inject: match a.inject {
            InjectArg::Uplink => Inject::Uplink,
            InjectArg::Host => Inject::Host,
        },
        burst: a.burst.clamp(1, 256),
        now_s: file.now.unwrap_or(0),
        tenants: file
            .tenant
            .iter()
            .map(|t| ReplayTenant {
                context: t.context,
                src: t.src,
                key: t.key.clone().into_bytes(),
            })
            .collect(),
        ..Default::default()
    };
    if let Some(q) = file.host_queues {
        cfg.host_queues = q;
    }
    if let Some(d) = &file.defrag {
        let c = &mut cfg.defrag;
        c.timeout_ns = d
            .timeout_ms
            .map_or(c.timeout_ns, |ms| ms.saturating_mul(1_000_000));
        c.max_datagram = d.max_datagram.unwrap_or(c.max_datagram);
        c.max_datagrams = d.max_datagrams.unwrap_or(c.max_datagrams);
        c.max_buffered_bytes = d.max_buffered_bytes.unwrap_or(c.max_buffered_bytes);
    }
    let mut reader = PcapReader::new(BufReader::new(File::open(&a.input)?))?;
    if reader.header().datalink != pcap_file::DataLink::ETHERNET {
        return Err(format!("{}: not an Ethernet capture", a.input.display()).into());
    }
    let mut frames = Vec::new();
    while let Some(p) = reader.next_packet() {
        frames.push(p?.data.into_owned());
    }
    let out = replay(frames, &cfg)?;
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        snaplen: 65535,
        ..Default::default()
    };
    let mut writer = PcapWriter::with_header(BufWriter::new(File::create(&a.out)?), header)?;
    for (i, (_, f)) in out.delivered.iter().enumerate() {
        // Frames are written in arrival order, a microsecond apart.
        let ts = std::time::Duration::from_micros(i as u64);
        writer.write_packet(&PcapPacket::new(ts, f.len() as u32, f))?;
    }
    let mut per_queue = vec![0u64; cfg.host_queues.clamp(1, 64) as usize];
    for (q, _) in &out.delivered {
        per_queue[*q as usize] += 1;
    }
    if a.json {
        let counters = counters_json(&out.counters);
        println!(
            "{}",
            json!({ "accelerator": out.accelerator, "injected": out.injected, "delivered": out.delivered.len(),
                "delivered_per_queue": per_queue, "fld_rx": out.fld_rx, "fld_accelerator_drops": out.fld_accelerator_drops,
                "uplink_transmitted": out.uplink_transmitted, "counters": counters })
        );
    } else {
        println!(
            "fldemu replay: {} frames from {} through {} -> {} frames to {}",
            out.injected,
            a.input.display(),
            out.accelerator,
            out.delivered.len(),
            a.out.display()
        );
        println!("  per host queue  {per_queue:?}");
        println!(
            "  into FLD        {} ({} refused by the accelerator)",
            out.fld_rx, out.fld_accelerator_drops
        );
        println!("  out the uplink  {}", out.uplink_transmitted);
        for (k, v) in out.counters.iter().filter(|(_, v)| *v > 0) {
            println!("  {k:<15} {v}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
