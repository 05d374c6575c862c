//! `fldemu sim SCENARIO.toml`: the virtual-time runner (`fld_qemu::sim`). Prints each
//! workload's sweep as a table with the paper's values beside ours, optionally one JSON object
//! and an SVG chart per workload.

use std::path::PathBuf;

use fld_qemu::plot::{Chart, Series};
use fld_qemu::sim::{self, Point, Report, Scenario, Speed, WorkloadResult};

use super::*;

#[derive(clap::Args)]
pub struct SimArgs {
    /// The scenario file (`docs/simulation.md`).
    pub scenario: PathBuf,
    /// Print one JSON object (results and runner speed) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the charts to this SVG file (one panel per workload).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
}

pub fn run(a: SimArgs) -> CmdResult {
    let text = std::fs::read_to_string(&a.scenario)
        .map_err(|e| format!("{}: {e}", a.scenario.display()))?;
    let mut s = Scenario::parse(&text)?;
    if let Some(seed) = a.seed {
        s.seed = seed;
    }
    let json = a.json;
    let (report, speed) = sim::run(&s, |title, p| {
        if !json {
            let what = match p.regions {
                Some(r) => format!("{} B x {r} regions", p.size),
                None => format!("{} B x {} connections", p.size, p.connections),
            };
            eprintln!(
                "  {title}: {what} done ({} events, {:.1} us virtual)",
                p.events,
                p.virtual_ns as f64 / 1e3
            );
        }
    })?;
    if let Some(path) = &a.plot {
        plot(&report, path)?;
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "results": report,
                "speed": {
                    "events": speed.events,
                    "virtual_us": speed.virtual_us,
                    "wall_seconds": speed.wall_seconds,
                    "events_per_second": speed.events_per_second(),
                    "virtual_us_per_wall_second": speed.virtual_us_per_wall_second(),
                },
            }))?
        );
    } else {
        print_report(&report, &speed);
        if let Some(path) = &a.plot {
            println!("chart: {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn x_of(w: &WorkloadResult, p: &Point) -> f64 {
    match w.x.as_str() {
        "connections" => p.connections as f64,
        "rtt_ratio" => p.rtt_ratio.unwrap_or(f64::NAN),
        "load" => p.load.unwrap_or(f64::NAN),
        "regions" => p.regions.map_or(f64::NAN, |r| r as f64),
        _ => p.size as f64,
    }
}

/// The reference value at `x`, if the paper gives one.
fn reference_at(w: &WorkloadResult, x: f64) -> Option<(String, f64)> {
    w.reference.iter().find_map(|r| {
        r.points
            .iter()
            .find(|p| p[0] == x)
            .map(|p| (r.label.clone(), p[1]))
    })
}

/// The tables: the scenario's parameters, each workload's points beside the paper's values,
/// then how fast the runner went.
fn print_report(r: &Report, speed: &Speed) {
    println!("scenario {} (seed {})", r.scenario, r.seed);
    print_parameters(r);
    for w in &r.workloads {
        println!();
        if r.workloads.iter().filter(|o| o.title == w.title).count() > 1 {
            println!("{} [{}]", w.title, w.series);
        } else {
            println!("{}", w.title);
        }
        print_table_header(w);
        for p in &w.points {
            print_point_row(w, p);
        }
    }
    println!();
    println!(
        "runner: {} events in {:.2} s wall = {:.0} events/s; {:.0} virtual us in total = {:.1} virtual us per wall second",
        speed.events,
        speed.wall_seconds,
        speed.events_per_second(),
        speed.virtual_us,
        speed.virtual_us_per_wall_second()
    );
}

/// The model's parameters the run used: each host's NIC, PCIe, CPU and FLD, each link, each
/// switch.
fn print_parameters(r: &Report) {
    println!("parameters:");
    for (name, nic, pcie, cpu, fld) in &r.parameters.hosts {
        println!(
            "  host {name}: NIC {} ns/packet, QP cache {} x {} B, MTT cache {}; PCIe read {} ns, write {} ns, {} Gbit/s; CPU post {} ns, poll {} ns, unload {} ns",
            nic.packet_ns, nic.qp_cache_entries, nic.qp_context_bytes, nic.mtt_cache_entries,
            pcie.read_latency_ns, pcie.write_latency_ns, pcie.gbps, cpu.post_ns, cpu.poll_ns, cpu.unload_ns
        );
        if cpu.interference_hz > 0.0 {
            println!(
                "    OS interference: {} /s, {} ns each",
                cpu.interference_hz, cpu.interference_ns
            );
        }
        println!(
            "    FLD: {} MHz x {} B, {} + {} cycles; PCIe read {} ns, write {} ns, {} Gbit/s",
            fld.clock_mhz,
            fld.datapath_bytes,
            fld.stage_cycles,
            fld.response_cycles,
            fld.read_latency_ns,
            fld.write_latency_ns,
            fld.pcie_gbps
        );
    }
    for (ends, l) in &r.parameters.links {
        println!(
            "  link {} - {}: {} Gbit/s, {} ns propagation, {} B/frame overhead, loss {}",
            ends[0], ends[1], l.gbps, l.propagation_ns, l.overhead_bytes, l.loss
        );
    }
    for (name, s) in &r.parameters.switches {
        println!(
            "  switch {name}: {} B/port buffer, ECN at {} B, {} ns forwarding, {:?} paths",
            s.buffer_bytes, s.ecn_threshold_bytes, s.forwarding_ns, s.path
        );
    }
}

/// The column headings of a workload's table, which depend on what it measures.
fn print_table_header(w: &WorkloadResult) {
    match w.kind.as_str() {
        "write_latency" => println!(
            "{:>8} {:>12} {:>12} {:>12} {:>12}  reference",
            "bytes", "one-way us", "p99 us", "RTT us", "QPC miss"
        ),
        "echo_latency" => println!(
            "{:>8} {:>12} {:>12} {:>12} {:>12} {:>12}  reference",
            "bytes", "RTT us", "p99 us", "p99.9 us", "mean us", "mismatches"
        ),
        "echo_rate" | "fld_model" | "zuc_model" => println!(
            "{:>8} {:>10} {:>10} {:>8} {:>12}  reference",
            "bytes", "Mpps", "Gbit/s", "window", "mismatches"
        ),
        "tenant_shaping" => println!(
            "{:>10} {:>12} {:>12} {:>12}  reference",
            "offered", "admitted", "all tenants", "mismatches"
        ),
        "fldr_echo" => println!(
            "{:>8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>12}  reference",
            "bytes", "load", "Mmsg/s", "Gbit/s", "median us", "p99 us", "mismatches"
        ),
        "rpc_rate" => println!(
            "{:>8} {:>6} {:>10} {:>10} {:>10} {:>10}  reference",
            "request", "conns", "MRPC/s", "Gbit/s", "QPC miss", "MTT miss"
        ),
        "unload_latency" => println!(
            "{:>8} {:>10} {:>10} {:>10} {:>10} {:>10}  reference",
            "regions", "RTT us", "median us", "p99 us", "unloaded", "MTT miss"
        ),
        "reorder_memory" => println!(
            "{:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  reference",
            "conns", "total KB", "conns KB", "pool KB", "caches KB", "gather KB"
        ),
        _ if w.x == "rtt_ratio" => println!(
            "{:>8} {:>6} {:>10} {:>10} {:>10}  reference",
            "RTT x", "conns", "Gbit/s", "of line", "Mmsg/s"
        ),
        "flows" => println!(
            "{:>6} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}  reference",
            "load", "flows", "flow rate", "of offer", "FCT us", "p50 us", "p99 us", "OoO"
        ),
        _ => println!(
            "{:>8} {:>6} {:>10} {:>10} {:>10} {:>10}  reference",
            "bytes", "conns", "Mmsg/s", "Gbit/s", "QPC miss", "MTT miss"
        ),
    }
}

/// One point's row under [`print_table_header`]'s columns, the paper's value at its x last.
fn print_point_row(w: &WorkloadResult, p: &Point) {
    let m = |k: &str| p.metrics.get(k).copied().unwrap_or(f64::NAN);
    let misses = |f: fn(&sim::card::CardTiming) -> u64| -> u64 { p.cards.values().map(f).sum() };
    let qpc = misses(|c| c.qp_cache_misses);
    let mtt = misses(|c| c.mtt_cache_misses);
    let reference = reference_at(w, x_of(w, p))
        .map(|(l, v)| format!("{v:.3} ({l})"))
        .unwrap_or_default();
    match w.kind.as_str() {
        "write_latency" => println!(
            "{:>8} {:>12.3} {:>12.3} {:>12.3} {:>12}  {reference}",
            p.size,
            m("latency_us"),
            m("latency_p99_us"),
            m("rtt_us"),
            qpc
        ),
        "echo_latency" => println!(
            "{:>8} {:>12.3} {:>12.3} {:>12.3} {:>12.3} {:>12}  {reference}",
            p.size,
            m("rtt_us"),
            m("rtt_p99_us"),
            m("p999_us"),
            m("rtt_mean_us"),
            m("mismatches")
        ),
        "tenant_shaping" => println!(
            "{:>10.2} {:>12.3} {:>12.3} {:>12}  {reference}",
            p.load.unwrap_or(f64::NAN),
            m("gbps"),
            m("all_gbps"),
            m("mismatches")
        ),
        "fldr_echo" => println!(
            "{:>8} {:>6.2} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12}  {reference}",
            p.size,
            p.load.unwrap_or(f64::NAN),
            m("mpps"),
            m("gbps"),
            m("median_us"),
            m("p99_us"),
            m("mismatches")
        ),
        "echo_rate" | "fld_model" | "zuc_model" => println!(
            "{:>8} {:>10.3} {:>10.3} {:>8} {:>12}  {reference}",
            p.size,
            m("mpps"),
            m("gbps"),
            p.metrics
                .get("window")
                .map_or("-".into(), |w| w.to_string()),
            p.metrics
                .get("mismatches")
                .map_or("-".into(), |w| w.to_string()),
        ),
        _ if w.x == "rtt_ratio" => println!(
            "{:>8} {:>6} {:>10.2} {:>10.3} {:>10.3}  {reference}",
            p.rtt_ratio.unwrap_or(f64::NAN),
            p.connections,
            m("gbps"),
            m("throughput_ratio"),
            m("mops")
        ),
        "flows" => println!(
            "{:>6.2} {:>6} {:>10.2} {:>10.3} {:>10.2} {:>10.2} {:>10.2} {:>8.3}  {reference}",
            p.load.unwrap_or(f64::NAN),
            m("flows"),
            m("flow_rate_ratio"),
            m("throughput_ratio"),
            m("fct_avg_us"),
            m("fct_p50_us"),
            m("fct_p99_us"),
            m("out_of_order_share")
        ),
        "unload_latency" => println!(
            "{:>8} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10}  {reference}",
            p.regions.unwrap_or(0),
            m("rtt_us"),
            m("rtt_median_us"),
            m("rtt_p99_us"),
            m("unloaded_share"),
            mtt
        ),
        "reorder_memory" => println!(
            "{:>6} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3}  {reference}",
            p.connections,
            m("memory_kb"),
            m("connections_kb"),
            m("pool_kb"),
            m("caches_kb"),
            m("gather_kb")
        ),
        _ => println!(
            "{:>8} {:>6} {:>10.3} {:>10.2} {:>10} {:>10}  {reference}",
            p.size,
            p.connections,
            m(&w.metric),
            m("gbps"),
            qpc,
            mtt
        ),
    }
}

/// One panel per workload title: each workload with that title is a curve (named by its
/// series), each reference a set of points.
fn plot(r: &Report, path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut titles: Vec<&str> = Vec::new();
    for w in &r.workloads {
        if !titles.contains(&w.title.as_str()) {
            titles.push(&w.title);
        }
    }
    let charts: Vec<Chart> = titles
        .iter()
        .map(|title| {
            let group: Vec<&WorkloadResult> =
                r.workloads.iter().filter(|w| w.title == *title).collect();
            let first = group[0];
            let mut series: Vec<Series> = group
                .iter()
                .map(|w| Series {
                    name: &w.series,
                    points: w
                        .points
                        .iter()
                        .filter_map(|p| p.metrics.get(&w.metric).map(|&y| (x_of(w, p), y)))
                        .collect(),
                    points_only: false,
                })
                .collect();
            let mut labels: Vec<&str> = Vec::new();
            for reference in group.iter().flat_map(|w| &w.reference) {
                if labels.contains(&reference.label.as_str()) {
                    continue;
                }
                labels.push(&reference.label);
                series.push(Series {
                    name: &reference.label,
                    points: reference.points.iter().map(|p| (p[0], p[1])).collect(),
                    points_only: true,
                });
            }
            Chart {
                title,
                x_label: match first.x.as_str() {
                    "connections" => "connections",
                    "rtt_ratio" => "RTT of the slow path / the fast path's",
                    "load" => "offered load (share of the senders' line rate)",
                    "regions" => "memory regions of 4 KiB",
                    _ => "message size (bytes)",
                },
                y_label: match first.metric.as_str() {
                    "latency_us" => "one-way latency (us)",
                    "rtt_us" => "round trip (us)",
                    "mrps" => "RPCs per second (millions)",
                    "memory_kb" => "on-chip memory (KB)",
                    "throughput_ratio" if first.kind == "flows" => "throughput / offered",
                    "flow_rate_ratio" => "flow size / FCT, share of the line rate",
                    "throughput_ratio" => "goodput / line rate",
                    "fct_avg_us" => "mean flow completion time (us)",
                    "fct_p99_us" => "p99 flow completion time (us)",
                    _ => "messages per second (millions)",
                },
                log2_x: first.x != "load",
                series,
            }
        })
        .collect();
    Chart::write_panels(&charts, path)
}
