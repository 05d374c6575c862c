//! `fldemu demo`: brings the card up over any transport and runs verified traffic through the
//! CPU echo, the FLD-E echo accelerator, or one of the paper's accelerators (§7).

use fld_device::fld::memory_model::{self, MemoryParams};
use fld_host::apps::{EchoConfig, Sizes, MAX_FRAME, MIN_FRAME};
use fld_qemu::testbed::FldEchoSetup;
use serde_json::json;

use super::*;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Packets to send and verify (cipher operations with `--accel zuc`, datagrams with
    /// `defrag`, messages with `iot` and `--rdma`).
    #[arg(long, default_value_t = 100_000)]
    pub packets: u64,
    /// Frame size in bytes without FCS (60..=9000). Defaults: 64 (echo), 1500 (zuc, defrag: the
    /// datagram before fragmentation at a 1450-byte MTU), 256 (iot). With `--rdma`: the message
    /// (echo, 1..=16384) or request data (zuc, 1..=16320) bytes, default 1024.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16384))]
    pub size: Option<u64>,
    /// Sweep every frame size from `--size` (default 64) to this one. Only the echo paths
    /// (`--accel none|echo|rtl:PATH`) sweep; the others refuse it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(MIN_FRAME as u64..=MAX_FRAME as u64))]
    pub size_max: Option<u64>,
    /// Receive queue layout of both ports of the CPU echo (`--accel none`), default striding;
    /// the FLD paths' layout is FLD's, and they refuse it.
    #[arg(long, value_enum)]
    pub rx_mode: Option<RxModeArg>,
    /// Packets (operations) per burst of the generator, default 32: the echo paths, and
    /// `--accel zuc` with or without `--rdma` (at most 64); the others refuse it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub burst: Option<u64>,
    /// Send each frame in a WQE of its own instead of multi-packet WQEs (the echo paths).
    #[arg(long)]
    pub single_packet_wqes: bool,
    /// Who echoes: `none` (a CPU application), `echo` (the echo accelerator behind FLD, FLD-E),
    /// `zuc`, `defrag`, `iot` (the paper's accelerators), or `rtl:PATH`: a Verilog module on
    /// FLD's AXI4-Stream ports, built with Verilator (PATH: a directory with a `files.f`, or the
    /// file list itself; e.g. `rtl:device/rtl/examples/echo`), verified as the echo is.
    #[arg(long, value_parser = parse_accel, default_value = "none")]
    pub accel: AccelChoice,
    /// With `--accel rtl:PATH`: write the module's signals to this VCD file (GTKWave opens it).
    #[arg(long)]
    pub vcd: Option<std::path::PathBuf>,
    /// With `--accel rtl:PATH`: the module's clock in MHz, default 250 (FLD's Innova-2 design);
    /// the rx stream brings packets at FLD's 50 Gbit/s link rate in cycles of this clock.
    #[arg(long)]
    pub rtl_clock_mhz: Option<f64>,
    /// Write every frame entering the eSwitch to this pcap file; with `--rdma`, of the
    /// client's card (the one card with `--local`). Needs the card in this process: with
    /// `--transport vfio-user|vfio` it is refused.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
    /// How the driver reaches the card: in this process, over `fldemu serve`'s vfio-user
    /// sockets, or through Linux vfio-pci (inside a guest whose QEMU attaches the card). Over
    /// vfio-user and vfio the demo runs `--accel none` and `--accel echo` (the accelerator is
    /// the server's).
    #[arg(long, value_enum, default_value_t = TransportArg::InProcess)]
    pub transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets (default
    /// fldemu-sockets).
    #[arg(long)]
    pub socket_dir: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Add the card's counters to the summary: every port's packets and drops by reason
    /// (steering, no rule, no buffer), FLD's statistics, the accelerator's counters; for the
    /// IoT service the guard's drops by reason; with `--rdma` the client's port and queue pair
    /// and, when the service runs in this process, its port and FLD's. `--json` always carries
    /// them (`card_counters`).
    #[arg(long)]
    pub stats: bool,
    /// With `--accel zuc` or `--accel echo`: the disaggregated service over FLD-R on a second
    /// machine (RDMA SENDs) instead of FLD-E; `--size` is then the request's data bytes
    /// (default 1024).
    #[arg(long)]
    pub rdma: bool,
    /// With `--rdma`: the client on the same card's second NIC function (the paper's local
    /// experiment) instead of a second machine.
    #[arg(long, requires = "rdma", conflicts_with = "link")]
    pub local: bool,
    /// With `--rdma`: two processes — this card's uplink (`udp:LOCAL_PORT:HOST:PORT`), the
    /// other process being `fldemu fldr-server` on the other end of the link.
    #[arg(long, requires = "rdma")]
    pub link: Option<String>,
    /// With `--link`: the FLD-R server's TCP address (default 127.0.0.1:18600).
    #[arg(long, requires = "link")]
    pub server: Option<std::net::SocketAddr>,
    /// With `--link`: this card's IP address (default 10.9.0.2).
    #[arg(long, requires = "link")]
    pub ip: Option<std::net::Ipv4Addr>,
}

/// The most operations the ZUC clients (FLD-E and FLD-R) keep in one burst.
const MAX_ZUC_BURST: u64 = 64;

/// The generator's burst when `--burst` is not given.
const DEFAULT_BURST: usize = 32;

impl DemoArgs {
    /// The generator's burst.
    pub fn burst(&self) -> usize {
        self.burst.map_or(DEFAULT_BURST, |b| b as usize)
    }

    /// The path the options chose, as a user would name it in a message.
    fn path_name(&self) -> String {
        if self.rdma {
            format!("--accel {} --rdma", self.accel.name())
        } else {
            format!("--accel {}", self.accel.name())
        }
    }

    /// Refuses every option the chosen path cannot honour, naming it: nothing given is
    /// silently ignored.
    fn check(&self) -> Result<(), String> {
        if self.rdma {
            if self.accel.rtl.is_some() {
                return Err("--rdma runs the Rust FLD-R accelerators; an RTL module runs the FLD-E echo path".into());
            }
            if !matches!(self.accel.kind, AccelArg::Zuc | AccelArg::Echo) {
                return Err("--rdma runs --accel zuc or --accel echo".into());
            }
        }
        let path = self.path_name();
        let echo_path = !self.rdma && matches!(self.accel.kind, AccelArg::None | AccelArg::Echo);
        let remote = self.transport != TransportArg::InProcess;
        self.transport.socket_dir(self.socket_dir.as_deref())?;
        if self.accel.rtl.is_none() {
            if self.vcd.is_some() {
                return Err(
                    "--vcd records an RTL accelerator's signals: use it with --accel rtl:PATH"
                        .into(),
                );
            }
            if self.rtl_clock_mhz.is_some() {
                return Err(
                    "--rtl-clock-mhz clocks an RTL accelerator: use it with --accel rtl:PATH"
                        .into(),
                );
            }
        }
        if self.size_max.is_some() && !echo_path {
            return Err(format!("--size-max sweeps frame sizes on the echo paths (--accel none, echo or rtl:PATH); {path} runs one size"));
        }
        if self.rx_mode.is_some() && (self.rdma || self.accel.kind != AccelArg::None) {
            return Err(format!("--rx-mode sets the receive queues of the CPU echo (--accel none); {path} uses FLD's"));
        }
        let bursts = echo_path || self.accel.kind == AccelArg::Zuc;
        if self.burst.is_some() && !bursts {
            return Err(format!("--burst sets the generator's burst of the echo paths and --accel zuc; {path} sends at its own pace"));
        }
        if let Some(burst) = self
            .burst
            .filter(|&b| b > MAX_ZUC_BURST && self.accel.kind == AccelArg::Zuc)
        {
            return Err(format!(
                "--burst {burst}: {path} keeps at most {MAX_ZUC_BURST} operations in flight"
            ));
        }
        if remote {
            if self.rdma {
                return Err(format!(
                    "--rdma runs FLD-R on cards in this process; {} reaches a card elsewhere",
                    self.transport.flag()
                ));
            }
            if !echo_path {
                return Err(format!("over vfio-user and vfio the demo runs the CPU and FLD-E echo paths, not {path}"));
            }
            if self.pcap.is_some() {
                return Err(format!(
                    "--pcap needs the card in this process; with {} the card is the server's",
                    self.transport.flag()
                ));
            }
        }
        if let Some(size) = self.size {
            if self.rdma {
                let most = if self.accel.kind == AccelArg::Zuc {
                    super::fldr::MAX_ZUC_DATA
                } else {
                    super::fldr::MAX_MESSAGE
                };
                if size as usize > most {
                    return Err(format!(
                        "--size {size}: {path} carries at most {most} bytes"
                    ));
                }
            } else if !(MIN_FRAME as u64..=MAX_FRAME as u64).contains(&size) {
                return Err(format!(
                    "--size {size}: frames are {MIN_FRAME}..={MAX_FRAME} bytes"
                ));
            }
        }
        if let (Some(min), Some(max)) = (self.size, self.size_max) {
            if max < min {
                return Err(format!("--size-max {max} is below --size {min}"));
            }
        }
        Ok(())
    }
}

/// Opens the echo set-up over the transport `a` names.
fn open_echoer(a: &DemoArgs, max_frame: usize) -> Result<Echoer, Box<dyn std::error::Error>> {
    let rx = a.rx_mode.unwrap_or(RxModeArg::Striding).mode();
    let socket_dir = a.transport.socket_dir(a.socket_dir.as_deref())?;
    match a.transport.remote(&socket_dir) {
        None => {
            let echo = Echoer::new(a.accel.kind, rx, max_frame)?;
            if let Some(spec) = &a.accel.rtl {
                echo.card().fld.set_accelerator(rtl_accelerator(
                    spec,
                    a.vcd.as_deref(),
                    a.rtl_clock_mhz.unwrap_or(DEFAULT_RTL_CLOCK_MHZ),
                )?);
            }
            Ok(echo)
        }
        Some(t) => {
            if a.accel.rtl.is_some() {
                return Err("over vfio-user and vfio the accelerator is the server's: `fldemu serve --accel rtl:PATH`".into());
            }
            let card = t.open(REMOTE_DMA_BYTES)?;
            Echoer::open_remote(
                a.accel.kind,
                rx,
                max_frame,
                card.nic,
                card.fld,
                card.transport,
            )
        }
    }
}

pub fn run(a: DemoArgs) -> CmdResult {
    a.check()?;
    if a.rdma {
        return super::fldr::rdma_demo(&a);
    }
    if a.accel == AccelArg::Zuc {
        return zuc_demo(&a);
    }
    if matches!(a.accel.kind, AccelArg::Defrag | AccelArg::Iot) {
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
    let mut echo = open_echoer(&a, sizes.max())?;
    if a.single_packet_wqes {
        echo.set_tx_multi_packet(false);
    }
    if let (Some(path), Some(card)) = (&a.pcap, &echo.card) {
        fld_qemu::testbed::capture_ingress(card, path)?;
    }
    if let Some(card) = &echo.card {
        card.fabric.clear_stats();
    }
    let window = echo.window(sizes.max());
    let cfg = EchoConfig {
        packets: a.packets,
        sizes: sizes.clone(),
        burst: a.burst(),
        window,
        ..Default::default()
    };
    let rep = echo.run(&cfg);
    let m = EchoMeasured::read(&a, &mut echo, rep)?;
    if a.json {
        print_echo_json(&a, &sizes, &m);
    } else {
        print_echo_summary(&a, &sizes, &m);
    }
    Ok(exit_code(m.ok))
}

/// One echo run and what the card says about it: PCIe per packet, FLD's memory, the counters,
/// and an RTL accelerator's own counters.
struct EchoMeasured {
    rep: EchoReport,
    /// NIC PCIe bytes and TLPs per packet crossing, FLD PCIe bytes per echoed packet (known
    /// only when the card runs in this process).
    per_pkt: Option<f64>,
    tlps_per_pkt: Option<f64>,
    fld_per_pkt: Option<f64>,
    fld_memory: Option<u64>,
    /// What a software driver needs in memory with the same (Table 2a) parameters.
    software_memory: u64,
    counters: CardCounters,
    rtl_counters: Option<Vec<(&'static str, u64)>>,
    /// An RTL accelerator's contract breaches.
    breaches: u64,
    ok: bool,
}

impl EchoMeasured {
    /// Reads the card after `rep`'s run on `echo` (and ends its capture).
    fn read(
        a: &DemoArgs,
        echo: &mut Echoer,
        rep: EchoReport,
    ) -> Result<EchoMeasured, Box<dyn std::error::Error>> {
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
        let fld_memory = echo.fld_memory();
        let counters = echo.counters()?;
        // An RTL accelerator's counters (cycles, beats, contract breaches).
        let rtl_counters = a
            .accel
            .rtl
            .as_ref()
            .and(echo.card.as_ref())
            .and_then(|card| card.fld.accelerator_counters())
            .map(|(_, c)| c);
        let breaches = rtl_counters.as_deref().map_or(0, fld_rtl::bridge::breaches);
        let ok = rep.mismatches == 0
            && rep.packets_received == a.packets
            && rep.checksum_flags_bad == 0
            && breaches == 0;
        Ok(EchoMeasured {
            rep,
            per_pkt,
            tlps_per_pkt,
            fld_per_pkt,
            fld_memory,
            software_memory: memory_model::software_requirement(&MemoryParams::table_2a()).total,
            counters,
            rtl_counters,
            breaches,
            ok,
        })
    }

    /// The RTL accelerator's simulated cycles per wall-clock second.
    fn rtl_cycles_per_s(&self) -> Option<f64> {
        self.rtl_counters
            .as_ref()
            .map(|_| self.rtl_counter("cycles") as f64 / self.rep.elapsed.as_secs_f64().max(1e-9))
    }

    /// The RTL accelerator's counter `k` (0 without one).
    fn rtl_counter(&self, k: &str) -> u64 {
        self.rtl_counters
            .as_deref()
            .and_then(|c| fld_rtl::bridge::counter(c, k))
            .unwrap_or(0)
    }
}

/// `--json`: the echo run as one JSON object.
fn print_echo_json(a: &DemoArgs, sizes: &Sizes, m: &EchoMeasured) {
    let rep = &m.rep;
    let v = json!({
        "packets_sent": rep.packets_sent,
        "packets_received": rep.packets_received,
        "bytes_verified": rep.bytes_verified,
        "mismatches": rep.mismatches,
        "checksum_flags_bad": rep.checksum_flags_bad,
        "mpps": rep.mpps(),
        "gbps": rep.gbps(),
        "elapsed_s": rep.elapsed.as_secs_f64(),
        "pcie_bytes_per_packet": m.per_pkt,
        "pcie_tlps_per_packet": m.tlps_per_pkt,
        "fld_pcie_bytes_per_packet": m.fld_per_pkt,
        "transport": match a.transport {
            TransportArg::InProcess => "in-process",
            TransportArg::VfioUser => "vfio-user",
            TransportArg::Vfio => "vfio",
        },
        "accel": a.accel.name(),
        "accelerator_counters": m.rtl_counters.as_ref().map(|c| counters_json(c)),
        "rtl_cycles_per_s": m.rtl_cycles_per_s(),
        "rx_mode": match a.rx_mode.unwrap_or(RxModeArg::Striding) { RxModeArg::Regular => "regular", RxModeArg::Striding => "striding" },
        "size_min": a.size.unwrap_or(64),
        "size_max": sizes.max(),
        "fld_memory_bytes": m.fld_memory,
        "software_memory_bytes": m.software_memory,
        "card_counters": m.counters.json(),
        "verified": m.ok,
    });
    println!("{v}");
}

/// The echo run for a person: the path, the traffic, its rate and PCIe cost, the result.
fn print_echo_summary(a: &DemoArgs, sizes: &Sizes, m: &EchoMeasured) {
    let rep = &m.rep;
    let size = match sizes {
        Sizes::Sweep { min, max } => format!("{min}..{max} B"),
        _ => format!("{} B", sizes.max()),
    };
    match (a.accel.kind, &a.accel.rtl) {
        (AccelArg::None, _) => println!("fldemu demo: CPU generator (vPort 1) -> eSwitch -> CPU echo (vPort 0) -> back"),
        (_, Some(p)) => println!("fldemu demo: CPU generator (vPort 1) -> eSwitch -> vPort 0 -> FLD -> RTL accelerator {} (Verilator) -> FLD -> NIC -> back", p.display()),
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
    if let (Some(bytes), Some(tlps)) = (m.per_pkt, m.tlps_per_pkt) {
        println!("  PCIe (NIC)      {bytes:.1} bytes and {tlps:.2} TLPs per packet crossing");
    }
    if a.accel == AccelArg::Echo {
        if let Some(fld) = m.fld_per_pkt {
            println!("  PCIe (FLD)      {fld:.1} bytes per echoed packet");
        }
        if let Some(fld_memory) = m.fld_memory {
            println!("  memory          FLD {:.1} KiB on chip vs {:.1} MiB for a software driver (Table 2a parameters)", fld_memory as f64 / 1024.0, m.software_memory as f64 / 1048576.0);
        }
    }
    if let Some(rate) = m.rtl_cycles_per_s() {
        println!(
            "  RTL             {} cycles ({:.2} M simulated cycles/s), {} beats in, {} out; contract breaches: {}",
            m.rtl_counter("cycles"),
            rate / 1e6,
            m.rtl_counter("rx_beats"),
            m.rtl_counter("tx_beats"),
            m.breaches
        );
    }
    if let Some(v) = &a.vcd {
        println!("  waveform        {}", v.display());
    }
    if let Some(p) = &a.pcap {
        println!("  capture         {}", p.display());
    }
    if a.stats {
        m.counters.print();
    }
    println!("  result          {}", verdict(m.ok));
}

/// One ZUC measurement: the same operations through software ZUC and through the accelerator.
pub struct ZucMeasured {
    pub software_secs: f64,
    pub accel_secs: f64,
    pub mismatches: u64,
    pub done: usize,
    /// The card's counters after the run (the generator's port, FLD's, the accelerator's).
    pub counters: CardCounters,
}

/// `ops` cipher operations of `bytes` data bytes (2/3 EEA3, 1/3 EIA3) through software ZUC and
/// through the ZUC accelerator behind FLD-E, with every result compared; with `capture`, every
/// frame entering the card's eSwitch goes to that pcap file.
pub fn zuc_measure(
    ops: usize,
    bytes: usize,
    burst: usize,
    capture: Option<&std::path::Path>,
) -> Result<ZucMeasured, Box<dyn std::error::Error>> {
    use fld_host::cryptodev::{run_ops, sample_ops, SoftZuc, ZucOffload};
    let mut s = FldEchoSetup::new(9000)?;
    let addr = s.attach_zuc();
    if let Some(path) = capture {
        s.capture(path)?;
    }
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
    drop(dev);
    s.stop_capture();
    let mismatches = zuc_mismatches(&soft, &hard);
    let counters = flde_counters(&mut s.client, &mut s.flde, Some(&s.card))?;
    Ok(ZucMeasured {
        software_secs,
        accel_secs,
        mismatches,
        done: hard.len(),
        counters,
    })
}

/// Operations whose result differs from software ZUC's (`soft`), that failed, or are missing.
pub fn zuc_mismatches(
    soft: &[fld_host::cryptodev::CryptoOp],
    hard: &[fld_host::cryptodev::CryptoOp],
) -> u64 {
    use fld_host::cryptodev::OpStatus;
    soft.iter()
        .zip(hard)
        .filter(|(x, y)| x.data != y.data || x.mac != y.mac || y.status != OpStatus::Success)
        .count() as u64
        + soft.len().abs_diff(hard.len()) as u64
}

/// The demo's two rate lines: `ops` operations of `bytes` data bytes through the accelerator
/// and through software ZUC.
pub fn print_zuc_rates(ops: usize, bytes: usize, accel_secs: f64, software_secs: f64) {
    let n = ops as f64;
    for (name, secs) in [
        ("accelerator ", accel_secs),
        ("software ZUC", software_secs),
    ] {
        let secs = secs.max(1e-9);
        println!(
            "  {name}    {:.3} Mops/s, {:.3} Gbit/s",
            n / secs / 1e6,
            n * bytes as f64 * 8.0 / secs / 1e9
        );
    }
}

/// Cipher operations through the ZUC accelerator behind FLD-E and through software ZUC, with
/// every result compared.
fn zuc_demo(a: &DemoArgs) -> CmdResult {
    let bytes = (a.size.unwrap_or(1500) as usize)
        .saturating_sub(14 + 20 + 8 + 64)
        .max(1);
    let m = zuc_measure(a.packets as usize, bytes, a.burst(), a.pcap.as_deref())?;
    let (soft_s, hard_s, mismatches, done) = (m.software_secs, m.accel_secs, m.mismatches, m.done);
    let ok = mismatches == 0 && done as u64 == a.packets;
    let n = done as f64;
    let gbps = |secs: f64| n * bytes as f64 * 8.0 / secs.max(1e-9) / 1e9;
    if a.json {
        println!(
            "{}",
            json!({ "accel": "zuc", "operations": done, "data_bytes_per_op": bytes, "mismatches": mismatches, "accelerator_mops": n / hard_s.max(1e-9) / 1e6, "accelerator_gbps": gbps(hard_s), "software_mops": n / soft_s.max(1e-9) / 1e6, "software_gbps": gbps(soft_s), "card_counters": m.counters.json(), "verified": ok })
        );
    } else {
        println!("fldemu demo: cryptodev client (vPort 1) -> FLD-E -> ZUC accelerator (8 units) -> back, against software ZUC");
        println!(
            "  operations      {} of {} data bytes (2/3 EEA3, 1/3 EIA3)",
            done, bytes
        );
        print_zuc_rates(done, bytes, hard_s, soft_s);
        if let Some(p) = &a.pcap {
            println!("  capture         {}", p.display());
        }
        if a.stats {
            m.counters.print();
        }
        println!(
            "  result          {} ({} mismatches)",
            verdict(ok),
            mismatches
        );
    }
    Ok(exit_code(ok))
}

/// The inline accelerators (defrag, iot) end to end against the host doing the same work.
fn inline_demo(a: &DemoArgs) -> CmdResult {
    use fld_qemu::testbed::inline_apps::{defrag_workload, iot_workload};
    let n = a.packets as usize;
    let (name, r, path) = match a.accel.kind {
        AccelArg::Defrag => (
            "defrag",
            defrag_workload(n, a.size.unwrap_or(1500) as usize, 1450, a.pcap.as_deref())?,
            "client (vPort 1) fragments at a 1450 B MTU -> eSwitch (fragments only) -> FLD -> reassembly -> NIC resumes (RSS over 4 queues) -> client; against host-side reassembly",
        ),
        _ => (
            "iot",
            iot_workload(n, a.size.unwrap_or(256) as usize, 16, a.pcap.as_deref())?,
            "16 tenants' CoAP clients (vPort 1), 1 in 8 messages fragmented -> eSwitch guard (header errors dropped, fragments -> FLD defrag -> back) -> per-tenant rules tag context -> FLD -> JWT HS256 check -> NIC resumes -> server; against host-side reassembly and verification",
        ),
    };
    let ok = r.verified();
    let mut card = CardCounters::default();
    card.add("card", r.card_counters.clone());
    if a.json {
        let counters = counters_json(&r.counters);
        println!(
            "{}",
            json!({ "accel": name, "messages": r.messages, "message_bytes": r.message_bytes, "frames_sent": r.frames_sent,
                "expected": r.expected, "delivered": r.offload_delivered, "mismatches": r.offload_mismatches + r.software_mismatches,
                "fld_rx_frames": r.fld_rx_frames, "accelerator_mps": r.offload_mps(), "accelerator_gbps": r.gbps(r.offload_secs),
                "software_mps": r.software_mps(), "software_gbps": r.gbps(r.software_secs),
                "ratio_accelerator_to_software": r.offload_mps() / r.software_mps().max(1e-9),
                "counters": counters, "card_counters": card.json(), "verified": ok })
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
        if a.stats {
            card.print();
        }
        if let Some(p) = &a.pcap {
            println!("  capture         {}", p.display());
        }
        println!("  result          {}", verdict(ok));
    }
    Ok(exit_code(ok))
}
