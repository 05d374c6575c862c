//! `fldemu`: the emulated FlexDriver card's command-line front end.
//!
//! * `fldemu demo` brings the card up in-process and runs a CPU traffic generator on one host
//!   vPort against a CPU echo application on another, through the NIC's eSwitch, checking every
//!   byte that comes back.
//! * `fldemu bench` measures packets per second through the same path at several frame sizes,
//!   beside a software loopback baseline measured in the same run.

use std::fs::File;
use std::io::BufWriter;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use fld_device::fabric::TlpStats;
use fld_device::wire::pcap::CaptureFilter;
use fld_device::wire::PcapTap;
use fld_host::apps::{
    EchoConfig, EchoReport, InProcessPair, Sizes, SoftPort, MAX_FRAME, MIN_FRAME,
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
    /// Bring the card up in-process and echo verified traffic between two host vPorts.
    Demo(DemoArgs),
    /// Measure packets per second through the emulated path at 64, 256 and 1500 bytes.
    Bench(BenchArgs),
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
    /// Frame size in bytes without FCS (60..=9000).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(MIN_FRAME as u64..=MAX_FRAME as u64))]
    size: u64,
    /// With --size: sweep every size from --size to this one.
    #[arg(long, value_parser = clap::value_parser!(u64).range(MIN_FRAME as u64..=MAX_FRAME as u64))]
    size_max: Option<u64>,
    /// Receive queue layout of both ports.
    #[arg(long, value_enum, default_value_t = RxModeArg::Striding)]
    rx_mode: RxModeArg,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Write every frame entering the eSwitch to this pcap file.
    #[arg(long)]
    pcap: Option<String>,
    /// Print one JSON object instead of the human summary.
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
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fldemu: {e}");
            ExitCode::FAILURE
        }
    }
}

/// PCIe traffic of the NIC's host functions.
fn nic_link_stats(pair: &InProcessPair) -> TlpStats {
    let mut total = TlpStats::default();
    for i in 0..2 {
        if let Some(fid) = pair.card.nic.function_id(i) {
            let s = pair.card.fabric.stats(fid);
            total.up_tlps += s.up_tlps;
            total.up_header_bytes += s.up_header_bytes;
            total.up_payload_bytes += s.up_payload_bytes;
            total.down_tlps += s.down_tlps;
            total.down_header_bytes += s.down_header_bytes;
            total.down_payload_bytes += s.down_payload_bytes;
        }
    }
    total
}

fn demo(a: DemoArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let sizes = match a.size_max {
        Some(max) if max > a.size => Sizes::Sweep {
            min: a.size as usize,
            max: max as usize,
        },
        _ => Sizes::Fixed(a.size as usize),
    };
    let mut pair = InProcessPair::new(a.rx_mode.mode(), sizes.max())?;
    if let Some(path) = &a.pcap {
        let tap = PcapTap::new(
            BufWriter::new(File::create(path)?),
            CaptureFilter::AllIngress,
        )?;
        pair.card.nic.set_tap(Some(Box::new(tap)));
    }
    pair.card.fabric.clear_stats();
    let cfg = EchoConfig {
        packets: a.packets,
        sizes: sizes.clone(),
        burst: a.burst.clamp(1, 256),
        ..Default::default()
    };
    let rep = pair.run_echo(&cfg);
    // Dropping the tap flushes the capture.
    pair.card.nic.set_tap(None);
    let link = nic_link_stats(&pair);
    // Every echoed packet crosses the NIC twice (client → server, server → client).
    let crossings = (rep.packets_sent + rep.packets_received).max(1);
    let pcie_bytes_per_packet = link.total_bytes() as f64 / crossings as f64;
    let ok =
        rep.mismatches == 0 && rep.packets_received == a.packets && rep.checksum_flags_bad == 0;
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
            "pcie_bytes_per_packet": pcie_bytes_per_packet,
            "pcie_tlps_per_packet": link.total_tlps() as f64 / crossings as f64,
            "rx_mode": match a.rx_mode { RxModeArg::Regular => "regular", RxModeArg::Striding => "striding" },
            "size_min": a.size,
            "size_max": sizes.max(),
            "verified": ok,
        });
        println!("{v}");
    } else {
        print_demo_summary(&a, &sizes, &rep, &link, pcie_bytes_per_packet, ok);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_demo_summary(
    a: &DemoArgs,
    sizes: &Sizes,
    rep: &EchoReport,
    link: &TlpStats,
    per_pkt: f64,
    ok: bool,
) {
    let size = match sizes {
        Sizes::Sweep { min, max } => format!("{min}..{max} B"),
        _ => format!("{} B", sizes.max()),
    };
    println!("fldemu demo: CPU generator (vPort 0) -> eSwitch -> CPU echo (vPort 1) -> back");
    println!(
        "  frames          {size}, {} receive queues",
        match a.rx_mode {
            RxModeArg::Regular => "regular",
            RxModeArg::Striding => "striding (MPRQ)",
        }
    );
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
    println!(
        "  PCIe (NIC)      {:.1} bytes and {:.2} TLPs per packet crossing",
        per_pkt,
        link.total_tlps() as f64 / (rep.packets_sent + rep.packets_received).max(1) as f64
    );
    if let Some(p) = &a.pcap {
        println!("  capture         {p}");
    }
    println!(
        "  result          {}",
        if ok { "VERIFIED" } else { "FAILED" }
    );
}

/// One measured point of the benchmark.
struct Point {
    size: usize,
    packets: u64,
    emulated_mpps: f64,
    baseline_mpps: f64,
    pcie_bytes_per_packet: f64,
    mismatches: u64,
}

fn measure(size: usize, packets: u64) -> Result<Point, Box<dyn std::error::Error>> {
    let cfg = EchoConfig {
        packets,
        sizes: Sizes::Fixed(size),
        burst: 32,
        window: 1024,
        ..Default::default()
    };
    // Emulated path: generator -> NIC -> eSwitch -> echo -> NIC -> generator.
    let mut pair = InProcessPair::new(STRIDING, size)?;
    let warm = EchoConfig {
        packets: packets / 20 + 1,
        ..cfg.clone()
    };
    pair.run_echo(&warm);
    pair.card.fabric.clear_stats();
    let rep = pair.run_echo(&cfg);
    let link = nic_link_stats(&pair);
    // Baseline: the same applications over a software loopback (copies and checksums, no device).
    let dev = pair.host.device(0);
    let buf = (size + 128) as u32;
    let (pa, pb) = (
        Mempool::new(dev.as_ref(), 4096, buf)?,
        Mempool::new(dev.as_ref(), 4096, buf)?,
    );
    let (mut a, mut b) = SoftPort::pair((pa, [2, 0, 0, 0, 0, 1]), (pb, [2, 0, 0, 0, 0, 2]));
    let mut scratch = Vec::new();
    fld_host::apps::run_echo(&mut a, [2, 0, 0, 0, 0, 2], &warm, || {
        fld_host::apps::echo_step(&mut b, &mut scratch, 32)
    });
    let base = fld_host::apps::run_echo(&mut a, [2, 0, 0, 0, 0, 2], &cfg, || {
        fld_host::apps::echo_step(&mut b, &mut scratch, 32)
    });
    Ok(Point {
        size,
        packets,
        emulated_mpps: rep.mpps(),
        baseline_mpps: base.mpps(),
        pcie_bytes_per_packet: link.total_bytes() as f64
            / (rep.packets_sent + rep.packets_received).max(1) as f64,
        mismatches: rep.mismatches
            + base.mismatches
            + (packets - rep.packets_received)
            + (packets - base.packets_received),
    })
}

fn bench(a: BenchArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut points = Vec::new();
    for (size, scale) in [(64usize, 1u64), (256, 1), (1500, 2)] {
        points.push(measure(size, (a.packets / scale).max(1000))?);
    }
    let failed = points.iter().any(|p| p.mismatches != 0);
    if a.json {
        let rows: Vec<_> = points
            .iter()
            .map(|p| {
                // Each echoed packet crosses the emulated NIC twice.
                let emu_ns = 1e3 / p.emulated_mpps;
                let base_ns = 1e3 / p.baseline_mpps;
                json!({
                    "size": p.size,
                    "packets": p.packets,
                    "emulated_mpps": p.emulated_mpps,
                    "emulated_gbps": p.emulated_mpps * p.size as f64 * 8.0 / 1e3,
                    "nic_crossings_mpps": 2.0 * p.emulated_mpps,
                    "baseline_software_loopback_mpps": p.baseline_mpps,
                    "ratio_emulated_to_baseline": p.emulated_mpps / p.baseline_mpps,
                    "emulator_ns_per_nic_crossing": ((emu_ns - base_ns) / 2.0).max(0.0),
                    "pcie_bytes_per_packet": p.pcie_bytes_per_packet,
                    "verification_failures": p.mismatches,
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "path": "cpu generator -> nic -> eswitch -> cpu echo -> nic -> generator (in-process, one core)", "results": rows })
        );
    } else {
        println!(
            "{:>6} {:>12} {:>12} {:>10} {:>14} {:>12}",
            "size", "emul Mpps", "base Mpps", "ratio", "ns/crossing", "PCIe B/pkt"
        );
        for p in &points {
            let emu_ns = 1e3 / p.emulated_mpps;
            let base_ns = 1e3 / p.baseline_mpps;
            println!(
                "{:>6} {:>12.3} {:>12.3} {:>10.3} {:>14.1} {:>12.1}",
                p.size,
                p.emulated_mpps,
                p.baseline_mpps,
                p.emulated_mpps / p.baseline_mpps,
                ((emu_ns - base_ns) / 2.0).max(0.0),
                p.pcie_bytes_per_packet
            );
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
