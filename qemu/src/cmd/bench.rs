//! `fldemu bench`: echoed packets per second through the CPU and FLD-E echo paths beside a
//! software loopback baseline measured in the same run.

use fld_device::card::Card;
use fld_host::apps::{datacenter_mix, EchoConfig, Sizes, SoftPort};
use fld_host::Mempool;
use serde_json::json;

use super::*;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Packets per measurement at 64 B (half that at 1500 B and for the size mix; at least
    /// 1000 per measurement).
    #[arg(long, default_value_t = 400_000)]
    pub packets: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print the cards' counters after the table, per workload and path: the ports' packets
    /// and drops by reason, FLD's statistics, the echo accelerator's counters. `--json` always
    /// carries them (`card_counters`).
    #[arg(long)]
    pub stats: bool,
    /// 2: measure each path a second time with the card's engine on a thread of its own (the
    /// applications on another, meeting it only through rings and doorbells), beside the
    /// one-core figures.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub threads: u8,
}

/// One measured path of one workload.
#[derive(Default)]
struct Measured {
    mpps: f64,
    goodput_gbps: f64,
    nic_pcie_bytes_per_packet: f64,
    /// Frames the NIC dropped for lack of receive buffers (an application that reposts slower
    /// than the engine on its own thread delivers: the NIC's defined answer, counted).
    nic_drops: u64,
    /// Frames changed, or missing or in excess beyond what the NIC's drop counters explain.
    failures: u64,
}

/// Frames the card's ports dropped for lack of receive buffers so far.
fn out_of_buffer_drops(echo: &mut Echoer) -> u64 {
    echo.counters().map_or(0, |c| c.total("rx_out_of_buffer"))
}

fn measure(echo: &mut Echoer, cfg: &EchoConfig, engine_thread: bool) -> Measured {
    let warm = EchoConfig {
        packets: cfg.packets / 20 + 1,
        ..cfg.clone()
    };
    echo.run_on(&warm, engine_thread);
    echo.card().fabric.clear_stats();
    let drops_before = out_of_buffer_drops(echo);
    let rep = echo.run_on(cfg, engine_thread);
    let (nic, _) = link_stats(echo.card());
    let nic_drops = out_of_buffer_drops(echo) - drops_before;
    Measured {
        mpps: rep.mpps(),
        goodput_gbps: rep.gbps(),
        nic_pcie_bytes_per_packet: nic.total_bytes() as f64
            / (rep.packets_sent + rep.packets_received).max(1) as f64,
        nic_drops,
        failures: rep.mismatches
            + cfg
                .packets
                .abs_diff(rep.packets_received)
                .saturating_sub(nic_drops),
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
        nic_drops: 0,
        failures: rep.mismatches + cfg.packets.abs_diff(rep.packets_received),
    })
}

/// The bytes one NIC crossing of a frame of `len` bytes must copy at least: its data gathered
/// from the sender's buffer and scattered into the receiver's, the send WQE read and the CQE
/// written.
fn crossing_copy_bytes(len: usize) -> usize {
    2 * len + fld_abi::nic::WQEBB + fld_abi::nic::CQE_SIZE
}

/// Nanoseconds a plain memcpy of what one NIC crossing copies takes on this machine, in this
/// run (the floor the crossing is compared with): per frame of the workload's sizes, the frame
/// from a sender's buffer to a staging one and on to a receiver's, and a WQE's and a CQE's
/// worth, over rotating buffers that stay in cache as the rings' do. Also returns the mean bytes
/// per crossing.
fn measure_copies(sizes: &Sizes, frames: u64) -> (f64, f64) {
    const BUFFERS: usize = 64;
    let stride = sizes.max() + 128;
    let mut src = vec![0x5au8; BUFFERS * stride];
    let mut dst = vec![0u8; BUFFERS * stride];
    let mut stage = vec![0u8; stride];
    let (mut bytes, mut sink) = (0usize, 0u8);
    let start = std::time::Instant::now();
    for seq in 0..frames {
        let len = sizes.size_of(seq);
        let k = (seq as usize % BUFFERS) * stride;
        stage[..len].copy_from_slice(&src[k..k + len]);
        dst[k..k + len].copy_from_slice(&stage[..len]);
        let small = fld_abi::nic::WQEBB + fld_abi::nic::CQE_SIZE;
        stage[len..len + small].copy_from_slice(&src[k + len..k + len + small]);
        bytes += crossing_copy_bytes(len);
        sink ^= std::hint::black_box(&mut dst)[k];
        src[k] = sink;
    }
    let ns = start.elapsed().as_nanos() as f64;
    std::hint::black_box(sink);
    (
        ns / frames.max(1) as f64,
        bytes as f64 / frames.max(1) as f64,
    )
}

pub fn run(a: BenchArgs) -> CmdResult {
    let workloads = [
        ("64", Sizes::Fixed(64), 1u64),
        ("256", Sizes::Fixed(256), 1),
        ("1500", Sizes::Fixed(1500), 2),
        ("datacenter-mix", datacenter_mix(), 2),
    ];
    let mut rows = Vec::new();
    let mut counters = CardCounters::default();
    let round_trip = (a.threads == 2).then(cross_core_round_trip_ns).flatten();
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
        let mut cpu_echo = Echoer::new(AccelArg::None, STRIDING, max)?;
        let cpu = measure(&mut cpu_echo, &cfg, false);
        let mut fld_echo = Echoer::new(AccelArg::Echo, STRIDING, max)?;
        let fld_cfg = EchoConfig {
            window: fld_echo.window(max),
            ..cfg.clone()
        };
        let fld = measure(&mut fld_echo, &fld_cfg, false);
        let threaded = (a.threads == 2).then(|| {
            (
                measure(&mut cpu_echo, &cfg, true),
                measure(&mut fld_echo, &fld_cfg, true),
            )
        });
        let base = measure_loopback(&cfg, max)?;
        let copies = measure_copies(&sizes, packets);
        counters.append(&format!("{name} CPU:"), cpu_echo.counters()?);
        counters.append(&format!("{name} FLD-E:"), fld_echo.counters()?);
        rows.push((name, packets, cpu, fld, base, threaded, copies));
    }
    let failed = rows.iter().any(|(_, _, c, f, b, t, _)| {
        let threaded = t.as_ref().map_or(0, |(c2, f2)| c2.failures + f2.failures);
        c.failures + f.failures + b.failures + threaded != 0
    });
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(
                |(name, packets, cpu, fld, base, threaded, (copy_ns, copy_bytes))| {
                    let (cpu_ns, base_ns) = (1e3 / cpu.mpps, 1e3 / base.mpps);
                    let crossing_ns = ((cpu_ns - base_ns) / 2.0).max(0.0);
                    let engine_thread = threaded.as_ref().map(|(c2, f2)| {
                        json!({
                            "cpu_echo_mpps": c2.mpps,
                            "flde_echo_mpps": f2.mpps,
                            "ratio_cpu_echo_to_one_thread": c2.mpps / cpu.mpps,
                            "ratio_flde_echo_to_one_thread": f2.mpps / fld.mpps,
                            "verification_failures": c2.failures + f2.failures,
                            "nic_out_of_buffer_drops": c2.nic_drops + f2.nic_drops,
                        })
                    });
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
                        "emulator_ns_per_nic_crossing": crossing_ns,
                        "bytes_copied_per_nic_crossing": copy_bytes,
                        "memcpy_ns_per_nic_crossing": copy_ns,
                        "ratio_crossing_to_memcpy": crossing_ns / copy_ns,
                        "cpu_path_nic_pcie_bytes_per_packet": cpu.nic_pcie_bytes_per_packet,
                        "flde_path_nic_pcie_bytes_per_packet": fld.nic_pcie_bytes_per_packet,
                        "verification_failures": cpu.failures + fld.failures + base.failures,
                        "two_threads": engine_thread,
                    })
                },
            )
            .collect();
        println!(
            "{}",
            json!({ "note": "echoed packets per second on one core, in-process; each echoed packet crosses the emulated NIC twice; memcpy_ns_per_nic_crossing: a plain copy of the bytes one crossing must move (frame gathered and scattered, a WQE and a CQE), timed in the same run; two_threads: the card's engine on a second thread; card_counters: per workload and path, after its runs", "results": out, "cross_core_round_trip_ns": round_trip, "card_counters": counters.json() })
        );
    } else {
        print!(
            "{:>15} {:>10} {:>10} {:>8} {:>11} {:>9} {:>12} {:>9}",
            "workload",
            "CPU Mpps",
            "FLD-E Mpps",
            "FLD/CPU",
            "loop Mpps",
            "CPU/loop",
            "ns/crossing",
            "x memcpy"
        );
        if a.threads == 2 {
            print!(" {:>13} {:>15}", "CPU 2 thr", "FLD-E 2 thr");
        }
        println!();
        for (name, _, cpu, fld, base, threaded, (copy_ns, _)) in &rows {
            let (cpu_ns, base_ns) = (1e3 / cpu.mpps, 1e3 / base.mpps);
            let crossing_ns = ((cpu_ns - base_ns) / 2.0).max(0.0);
            print!(
                "{:>15} {:>10.3} {:>10.3} {:>8.3} {:>11.3} {:>9.3} {:>12.1} {:>9.1}",
                name,
                cpu.mpps,
                fld.mpps,
                fld.mpps / cpu.mpps,
                base.mpps,
                cpu.mpps / base.mpps,
                crossing_ns,
                crossing_ns / copy_ns
            );
            if let Some((c2, f2)) = threaded {
                let (rc, rf) = (c2.mpps / cpu.mpps, f2.mpps / fld.mpps);
                print!(
                    " {:>6.3} {:>5.2}x {:>8.3} {:>5.2}x",
                    c2.mpps, rc, f2.mpps, rf
                );
            }
            println!();
        }
        if let Some(ns) = round_trip {
            println!("2 thr: the card's engine on a thread of its own; a cache line's round trip between the two cores, same run: {ns:.0} ns");
        }
        if a.stats {
            counters.print();
        }
    }
    Ok(exit_code(!failed))
}
