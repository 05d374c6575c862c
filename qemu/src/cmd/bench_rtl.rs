//! `fldemu bench-rtl`: a Verilog accelerator (Verilator) against the Rust echo model behind the
//! same FLD, in the same run: echoed frames per second through the whole card, and the RTL's
//! simulated cycles per wall-clock second, at 64 and 1500 bytes.

use fld_host::apps::{EchoConfig, Sizes};
use serde_json::json;

use super::*;

#[derive(clap::Args)]
pub struct BenchRtlArgs {
    /// The design (a Verilator file list, or a directory holding `files.f`); by default the
    /// Verilog echo shipped in `device/rtl/examples/echo`.
    #[arg(long)]
    pub design: Option<std::path::PathBuf>,
    /// Echoed frames per measurement at 64 B (a fifth of that at 1500 B, at least 1000).
    #[arg(long, default_value_t = 100_000)]
    pub packets: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The module's clock in MHz.
    #[arg(long, default_value_t = DEFAULT_RTL_CLOCK_MHZ)]
    pub rtl_clock_mhz: f64,
    /// Print the cards' counters after the table, per size and path: the generator's port,
    /// FLD's vPort and statistics, the accelerator's counters (the RTL's cycles, beats and
    /// contract breaches). `--json` always carries them (`card_counters`).
    #[arg(long)]
    pub stats: bool,
}

/// One path at one size.
struct Run {
    mpps: f64,
    failures: u64,
    /// The RTL's clock cycles during the measured run.
    cycles: u64,
    secs: f64,
    /// The card's counters after the runs.
    counters: CardCounters,
}

fn cycles(echo: &Echoer) -> u64 {
    echo.card()
        .fld
        .accelerator_counters()
        .and_then(|(_, c)| fld_rtl::bridge::counter(&c, "cycles"))
        .unwrap_or(0)
}

fn measure(
    design: Option<(&std::path::Path, f64)>,
    size: usize,
    packets: u64,
) -> Result<Run, Box<dyn std::error::Error>> {
    let mut echo = Echoer::new(AccelArg::Echo, STRIDING, size)?;
    if let Some((d, mhz)) = design {
        echo.card()
            .fld
            .set_accelerator(rtl_accelerator(d, None, mhz)?);
    }
    let cfg = EchoConfig {
        packets,
        sizes: Sizes::Fixed(size),
        burst: 32,
        window: echo.window(size),
        ..Default::default()
    };
    echo.run(&EchoConfig {
        packets: packets / 20 + 1,
        ..cfg.clone()
    });
    let before = cycles(&echo);
    let rep = echo.run(&cfg);
    Ok(Run {
        mpps: rep.mpps(),
        failures: rep.mismatches + packets.abs_diff(rep.packets_received),
        cycles: cycles(&echo) - before,
        secs: rep.elapsed.as_secs_f64().max(1e-9),
        counters: echo.counters()?,
    })
}

pub fn run(a: BenchRtlArgs) -> CmdResult {
    let design = a
        .design
        .clone()
        .unwrap_or_else(|| fld_rtl::examples_dir().join("echo"));
    let clock_hz = a.rtl_clock_mhz * 1e6;
    let mut rows = Vec::new();
    let mut counters = CardCounters::default();
    for (size, packets) in [(64usize, a.packets), (1500, (a.packets / 5).max(1000))] {
        let mut rust = measure(None, size, packets)?;
        let mut rtl = measure(Some((&design, a.rtl_clock_mhz)), size, packets)?;
        counters.append(
            &format!("{size} B Rust:"),
            std::mem::take(&mut rust.counters),
        );
        counters.append(&format!("{size} B RTL:"), std::mem::take(&mut rtl.counters));
        rows.push((size, packets, rust, rtl));
    }
    let failed = rows.iter().any(|(_, _, r, v)| r.failures + v.failures != 0);
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(size, packets, rust, rtl)| {
                let simulated_secs = rtl.cycles as f64 / clock_hz;
                json!({
                    "frame_bytes": size,
                    "packets": packets,
                    "rust_echo_mpps": rust.mpps,
                    "rtl_echo_mpps": rtl.mpps,
                    "ratio_rtl_to_rust": rtl.mpps / rust.mpps,
                    "rtl_cycles": rtl.cycles,
                    "rtl_cycles_per_packet": rtl.cycles as f64 / *packets as f64,
                    "rtl_simulated_cycles_per_s": rtl.cycles as f64 / rtl.secs,
                    "rtl_simulated_mpps_at_clock": *packets as f64 / simulated_secs.max(1e-12) / 1e6,
                    "verification_failures": rust.failures + rtl.failures,
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "design": design.display().to_string(), "clock_hz": clock_hz, "note": "echoed frames per second through the whole in-process card, one core; rtl_simulated_mpps_at_clock: frames per second of simulated time at the module's clock (bounded by the 50 Gbit/s rx pacing); card_counters: per size and path, after its runs", "results": out, "card_counters": counters.json() })
        );
    } else {
        println!("design {} at {:.0} MHz", design.display(), clock_hz / 1e6);
        println!(
            "{:>6} {:>11} {:>10} {:>8} {:>14} {:>13} {:>15}",
            "bytes", "Rust Mpps", "RTL Mpps", "RTL/Rust", "M cycles/s", "cycles/frame", "sim. Mpps"
        );
        for (size, packets, rust, rtl) in &rows {
            let simulated_secs = rtl.cycles as f64 / clock_hz;
            println!(
                "{:>6} {:>11.3} {:>10.3} {:>8.3} {:>14.2} {:>13.2} {:>15.2}",
                size,
                rust.mpps,
                rtl.mpps,
                rtl.mpps / rust.mpps,
                rtl.cycles as f64 / rtl.secs / 1e6,
                rtl.cycles as f64 / *packets as f64,
                *packets as f64 / simulated_secs.max(1e-12) / 1e6
            );
        }
        if a.stats {
            counters.print();
        }
        println!("{}", verdict(!failed));
    }
    Ok(exit_code(!failed))
}
