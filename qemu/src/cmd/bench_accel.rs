//! `fldemu bench-accel`: per accelerator, messages per second through the full emulated path
//! beside the host-software baseline measured in the same run.

use fld_qemu::testbed::inline_apps::{defrag_workload, iot_workload};
use serde_json::json;

use super::demo::zuc_measure;
use super::*;

#[derive(clap::Args)]
pub struct BenchAccelArgs {
    /// Messages (operations, datagrams) per measurement (at least 100).
    #[arg(long, default_value_t = 20_000)]
    pub packets: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print the cards' counters after the table, per measurement: the ports' packets and
    /// drops by reason, FLD's statistics, the accelerator's counters; for the IoT service the
    /// guard's drops by reason. `--json` always carries them (`card_counters`).
    #[arg(long)]
    pub stats: bool,
}

pub fn run(a: BenchAccelArgs) -> CmdResult {
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
    let mut counters = CardCounters::default();
    for bytes in [64usize, 256, 1024, 4096] {
        let m = zuc_measure(n, bytes, 32, None)?;
        counters.append(&format!("zuc {bytes} B:"), m.counters);
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
        ("defrag", defrag_workload(n, 1500, 1450, None)?),
        ("iot", iot_workload(n, 256, 16, None)?),
    ] {
        counters.add(format!("{accel}: card"), r.card_counters.clone());
        counters.add(format!("{accel}: workload"), r.counters.clone());
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
            json!({ "note": "one core, in-process: the accelerator model runs on the same CPU as the host baseline, so ratios measure the emulated path's overhead, not FPGA speed-up; message_bytes is the ZUC data length, the defrag datagram, the IoT frame; card_counters: per measurement", "results": out, "card_counters": counters.json() })
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
        if a.stats {
            counters.print();
        }
    }
    Ok(exit_code(rows.iter().all(|r| r.verified)))
}
