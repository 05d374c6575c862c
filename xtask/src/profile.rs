//! `cargo xtask profile`: instructions per echoed packet, per stage of the emulated path.
//!
//! Runs `fldemu demo` under valgrind's callgrind twice with different packet counts and divides
//! the difference of each function's own instruction count by the difference of packets, so
//! set-up and tear-down cancel out. Functions are grouped into the stages of the path by the
//! source file their instructions come from (or, for code inlined from the standard library, by
//! the function they were inlined into). Instruction counts do not depend on the machine's load,
//! so before/after comparisons are exact.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::child::{self, Echo};

/// Which stage a function's instructions belong to: the first rule whose pattern the source
/// file or the function's path contains (code inlined from the standard library carries the
/// file of the library and the path of the function it was inlined into).
const STAGES: [(&str, &str); 28] = [
    ("checksum", "wire/checksum.rs"),
    ("checksum", "checksum"),
    ("parse", "nic/packet.rs"),
    ("parse", "nic::packet::"),
    ("steer (eSwitch, RSS)", "nic/eswitch.rs"),
    ("steer (eSwitch, RSS)", "datapath/switching.rs"),
    ("steer (eSwitch, RSS)", "nic/rss.rs"),
    ("steer (eSwitch, RSS)", "nic::eswitch::"),
    ("steer (eSwitch, RSS)", "datapath::switching::"),
    ("steer (eSwitch, RSS)", "nic::rss::"),
    ("doorbell, WQE fetch, transmit", "datapath/transmit.rs"),
    ("doorbell, WQE fetch, transmit", "nic/doorbell.rs"),
    ("doorbell, WQE fetch, transmit", "datapath::transmit::"),
    ("receive scatter, completions", "datapath/receive.rs"),
    ("receive scatter, completions", "datapath/completions.rs"),
    ("receive scatter, completions", "datapath::receive::"),
    ("receive scatter, completions", "datapath::completions::"),
    ("DMA (fabric)", "device/src/fabric"),
    ("DMA (fabric)", "fld_device::fabric::"),
    ("FLD (translate, Tx, Rx)", "device/src/fld"),
    ("FLD (translate, Tx, Rx)", "fld_device::fld::"),
    ("accelerator", "device/src/accel"),
    ("accelerator", "fld_device::accel::"),
    ("NIC engine (poll loop, other)", "fld_device::nic::"),
    ("driver and application", "driver/src"),
    ("driver and application", "host-lib/src"),
    ("driver and application", "fld_driver::"),
    ("driver and application", "fld_host::"),
];

/// Stage of one `callgrind_annotate` entry `file:function`.
fn stage_of(entry: &str) -> &'static str {
    for (stage, pattern) in STAGES {
        if entry.contains(pattern) {
            return stage;
        }
    }
    if entry.contains("memmove") || entry.contains("memcpy") || entry.contains("memset") {
        return "memory copies (libc)";
    }
    if entry.contains("fldemu::") {
        return "driver and application";
    }
    "other (allocator, locks, std)"
}

/// Each function's own instructions in one callgrind run.
fn run_once(
    bin: &Path,
    args: &[String],
    packets: u64,
    out: &Path,
) -> Result<BTreeMap<String, u64>, String> {
    let log = std::path::PathBuf::from(format!("{}.log", out.display()));
    let _ = std::fs::remove_file(&log);
    child::run(
        Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(bin)
            .arg("demo")
            .args(args)
            .arg("--packets")
            .arg(packets.to_string()),
        &format!("fldemu demo --packets {packets} under callgrind"),
        &log,
        Echo::Quiet,
    )?;
    let annotate_log = std::path::PathBuf::from(format!("{}.annotate.log", out.display()));
    let _ = std::fs::remove_file(&annotate_log);
    let text = child::run(
        Command::new("callgrind_annotate")
            .args(["--inclusive=no", "--threshold=100", "--auto=no"])
            .arg(out),
        "callgrind_annotate",
        &annotate_log,
        Echo::Quiet,
    )?;
    let mut costs = BTreeMap::new();
    for line in text.lines() {
        // "1,234,567 (12.34%)  file:function [object]"
        let line = line.trim();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(n) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        let Some(entry) = rest.split_once(")  ").map(|(_, e)| e) else {
            continue;
        };
        if entry.contains("PROGRAM TOTALS") {
            continue;
        }
        *costs.entry(entry.to_string()).or_insert(0) += n;
    }
    Ok(costs)
}

/// `args` go to `fldemu demo` (e.g. `--accel none --size 64`).
pub fn profile(
    workspace: &Path,
    args: &[String],
    packets: u64,
    json_out: bool,
) -> Result<bool, String> {
    let bin = workspace.join("target/release/fldemu");
    let dir = workspace.join("target/profile");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let small = packets / 3;
    let a = run_once(&bin, args, small, &dir.join("callgrind.small"))?;
    let b = run_once(&bin, args, packets, &dir.join("callgrind.large"))?;
    let n = (packets - small) as f64;
    let mut stages: BTreeMap<&str, f64> = BTreeMap::new();
    let mut functions: Vec<(f64, String)> = Vec::new();
    for (entry, &cost) in &b {
        let delta = cost.saturating_sub(a.get(entry).copied().unwrap_or(0)) as f64 / n;
        if delta <= 0.0 {
            continue;
        }
        *stages.entry(stage_of(entry)).or_insert(0.0) += delta;
        functions.push((delta, entry.clone()));
    }
    functions.sort_by(|x, y| y.0.total_cmp(&x.0));
    let total: f64 = stages.values().sum();
    let mut rows: Vec<(&str, f64)> = stages.into_iter().collect();
    rows.sort_by(|x, y| y.1.total_cmp(&x.1));
    if json_out {
        let v = json!({
            "demo_args": args,
            "packets": [small, packets],
            "instructions_per_echoed_packet": total,
            "stages": rows.iter().map(|(s, v)| json!({"stage": s, "instructions": v})).collect::<Vec<_>>(),
            "functions": functions.iter().take(25).map(|(v, f)| json!({"function": f, "instructions": v})).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "fldemu demo {}: {total:.0} instructions per echoed packet ({small} and {packets} packets under callgrind)",
            args.join(" ")
        );
        println!("{:<34} {:>12} {:>7}", "stage", "instr/packet", "share");
        for (s, v) in &rows {
            println!("{s:<34} {v:>12.0} {:>6.1}%", 100.0 * v / total);
        }
        println!();
        println!("top functions (instructions per echoed packet):");
        for (v, f) in functions.iter().take(15) {
            println!("{v:>8.0}  {f}");
        }
    }
    Ok(true)
}
