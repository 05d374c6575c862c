//! `fldemu memory`: Table 3 (the conventional driver's memory beside FLD's) from the formulas and
//! from what the running FLD allocated, and Figure 4's sweep; beside them the NIC's own on-chip
//! memory for its timing mechanisms (receive read-ahead, WQE-by-MMIO buffers).

use fld_abi::fld::MemoryItem;
use fld_device::fld::memory_model::{self, MemoryParams};
use fld_qemu::testbed::FldEchoSetup;
use serde_json::json;

use std::process::ExitCode;

use super::CmdResult;

#[derive(clap::Args)]
pub struct MemoryArgs {
    /// Line rate B in Gbit/s.
    #[arg(long, default_value_t = 100.0)]
    pub gbps: f64,
    /// Transmit queues N_q.
    #[arg(long, default_value_t = 512)]
    pub queues: u32,
    /// Smallest packet M_min in bytes.
    #[arg(long, default_value_t = 256)]
    pub min_packet: u32,
    /// Largest packet (message) M_max in bytes.
    #[arg(long, default_value_t = 16384)]
    pub max_packet: u32,
    /// Receive buffer lifetime L_rx in microseconds.
    #[arg(long, default_value_t = 5.0)]
    pub rx_lifetime_us: f64,
    /// Transmit buffer lifetime L_tx in microseconds.
    #[arg(long, default_value_t = 25.0)]
    pub tx_lifetime_us: f64,
    /// Also print Figure 4's sweep (25-400 Gbit/s, 1-2048 queues) from the formulas.
    #[arg(long)]
    pub sweep: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: MemoryArgs) -> CmdResult {
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
    memory_model::geometry(&params).check()?;
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
    // The NIC's own on-chip memory for its timing mechanisms, for the queues the setup created.
    let nic = setup.card.nic.on_chip_memory();
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
            "nic_on_chip": {
                "rx_read_ahead_depth": nic.read_ahead_depth,
                "rqs": nic.rqs,
                "rx_read_ahead_bytes": nic.rx_read_ahead_bytes,
                "send_queues": nic.send_queues,
                "wqe_buffer_bytes": nic.wqe_buffer_bytes,
            },
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
        println!();
        println!("NIC on-chip memory of the timing mechanisms (docs/nic-interface.md §4.1, §7.5):");
        println!(
            "  {:<30} {:>12.2} KiB  ({} RQs x {} WQEs x 16 B)",
            "receive WQEs read ahead",
            kib(nic.rx_read_ahead_bytes),
            nic.rqs,
            nic.read_ahead_depth
        );
        println!(
            "  {:<30} {:>12.2} KiB  ({} send queues x 256 B)",
            "WQE-by-MMIO buffers",
            kib(nic.wqe_buffer_bytes),
            nic.send_queues
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
