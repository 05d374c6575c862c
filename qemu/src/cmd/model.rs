//! `fldemu model`: Figure 7a — bytes per packet on FLD's PCIe link from the performance model
//! and as the emulator measures them, and the throughput bound per link configuration.

use fld_abi::fld::Stat;
use fld_device::fld::perf_model::{self, Batching, FIGURE7A_SIZES};
use fld_host::apps::{EchoConfig, Sizes};
use serde_json::json;

use super::*;

#[derive(clap::Args)]
pub struct ModelArgs {
    /// Packets per measured size.
    #[arg(long, default_value_t = 20_000)]
    pub packets: u64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Print the card's counters after the tables, per measured size: the generator's port,
    /// FLD's vPort and statistics, the echo accelerator's. `--json` always carries them
    /// (`card_counters`).
    #[arg(long)]
    pub stats: bool,
}

pub fn run(a: ModelArgs) -> CmdResult {
    let fabric = fld_device::fabric::FabricConfig::default();
    let links = perf_model::figure7a_links();
    let batching = Batching::default();
    let mut rows = Vec::new();
    let mut counters = CardCounters::default();
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
        counters.append(&format!("{size} B:"), echo.counters()?);
        rows.push((size, measured, modelled, per_completion, bounds));
    }
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(size, measured, modelled, k, bounds)| {
                json!({
                    "size": size,
                    "packets": a.packets,
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
            json!({ "links": links, "design_batching": batching, "fabric": { "mps": fabric.mps, "mrrs": fabric.mrrs, "tlp_overhead": fabric.tlp_overhead }, "results": out, "figure_8a_zuc_bound": zuc_bound_rows(), "card_counters": counters.json() })
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
        println!();
        println!(
            "Disaggregated ZUC over FLD-R, Figure 8a's bound: data Gbit/s a 25 GbE link carries"
        );
        println!(
            "(each request a SEND of the 64-byte header and the data at a 1 KiB path MTU, each"
        );
        println!("response the header and, for EEA3, the data; RoCE headers, ICRC, FCS, preamble and gap");
        println!("and one ACK per message counted; 2/3 EEA3, 1/3 EIA3 as the demo's operations):");
        println!("{:>7} {:>10} {:>12}", "bytes", "Mops/s", "data Gbit/s");
        for r in zuc_bound_rows() {
            println!(
                "{:>7} {:>10.3} {:>12.2}",
                r["data_bytes"].as_u64().unwrap_or(0),
                r["mops"].as_f64().unwrap_or(0.0),
                r["data_gbps"].as_f64().unwrap_or(0.0)
            );
        }
        if a.stats {
            counters.print();
        }
    }
    Ok(exit_code(!failed))
}

/// Figure 8a's bound per request size at 25 GbE for the demo's operation mix.
pub fn zuc_bound_rows() -> Vec<serde_json::Value> {
    perf_model::FIGURE8A_SIZES
        .iter()
        .map(|&d| {
            let ops = zuc_mix_bound(d, 25.0);
            json!({ "data_bytes": d, "mops": ops / 1e6, "data_gbps": ops * d as f64 * 8.0 / 1e9 })
        })
        .collect()
}

/// Operations per second of the 2/3 EEA3, 1/3 EIA3 mix on a `link_gbps` link (the time per
/// operation averages over the mix).
pub fn zuc_mix_bound(data: u32, link_gbps: f64) -> f64 {
    let eea3 = perf_model::zuc_rdma_ops_bound(data, true, link_gbps, 1024);
    let eia3 = perf_model::zuc_rdma_ops_bound(data, false, link_gbps, 1024);
    1.0 / (2.0 / 3.0 / eea3 + 1.0 / 3.0 / eia3)
}
