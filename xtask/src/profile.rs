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

/// The first rules of [`STAGES`], which name computations that are stages wherever their code
/// is (the CRC and the Internet checksum): matched against the whole entry before any file.
const BY_NAME: usize = 4;

/// Which stage a function's instructions belong to: the first of the [`BY_NAME`] rules whose
/// pattern the entry contains; else the first rule whose pattern the source file contains;
/// else, when no rule names the file (code inlined from the standard library, or from a file
/// of no stage), the first rule whose pattern the path of the function it was inlined into
/// contains.
const STAGES: [(&str, &str); 39] = [
    ("ICRC (CRC-32)", "crc32fast"),
    ("ICRC (CRC-32)", "wire::roce::icrc"),
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
    ("RoCE transport", "datapath/roce/"),
    ("RoCE transport", "datapath::roce::"),
    ("RoCE transport", "nic/rdma/"),
    ("RoCE transport", "nic::rdma::"),
    ("RoCE transport", "abi/src/wire/roce/"),
    ("RoCE transport", "abi/src/nic/rdma.rs"),
    // The RoCE headers' emission where the standard library's code is inlined into it.
    ("RoCE transport", "fld_abi::wire::roce::"),
    // Frames on a wire: the cable between two in-process cards (`rc-bw`), or the uplink's.
    ("wire (cable between cards, uplink)", "device/src/wire/"),
    ("wire (cable between cards, uplink)", "fld_device::wire::"),
    ("NIC engine (poll loop, other)", "fld_device::nic::"),
    ("driver and application", "driver/src"),
    ("driver and application", "host-lib/src"),
    ("driver and application", "fld_driver::"),
    ("driver and application", "fld_host::"),
];

/// Stage of one `callgrind_annotate` entry `file:function`.
fn stage_of(entry: &str) -> &'static str {
    // The file before the function it was inlined into: the RoCE receive inlined into the
    // eSwitch's steering is the transport's.
    let (file, function) = entry.split_once(':').unwrap_or(("", entry));
    let rules = [
        (&STAGES[..BY_NAME], entry),
        (&STAGES[..], file),
        (&STAGES[..], function),
    ];
    for (rules, part) in rules {
        if let Some((stage, _)) = rules.iter().find(|(_, pattern)| part.contains(pattern)) {
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

/// What a profile runs.
pub enum Workload {
    /// `fldemu demo` with these arguments: per echoed packet.
    Echo(Vec<String>),
    /// `fldemu rc-bw` with 64-byte RDMA WRITEs between two in-process cards: per message.
    RdmaWrite,
}

impl Workload {
    /// The `fldemu` arguments of a run of `n` packets or messages, and how many the run really
    /// moves: `rc-bw` sends a warm-up of a twentieth of its count (and one) before it measures,
    /// so runs of 2,000 and 6,000 messages differ by 4,200.
    fn run(&self, n: u64) -> (Vec<String>, u64) {
        match self {
            Workload::Echo(args) => {
                let mut v = vec!["demo".to_string()];
                v.extend(args.iter().cloned());
                v.extend(["--packets".to_string(), n.to_string()]);
                (v, n)
            }
            Workload::RdmaWrite => {
                let v = [
                    "rc-bw",
                    "--ops",
                    "write",
                    "--size-min",
                    "64",
                    "--size-max",
                    "64",
                    // Valgrind runs the engine some fifty times slower than the wall clock the
                    // ACK timer reads: with the usual 67 ms a busy machine fires it while the
                    // peer is only slow, and 64 WRITEs are sent again. 2^24 × 4.096 µs = 69 s.
                    "--qp-timeout",
                    "24",
                    "--stats",
                ];
                let mut v: Vec<String> = v.iter().map(|a| a.to_string()).collect();
                v.extend(["--bytes".to_string(), (n * 64).to_string()]);
                (v, n + n / 20 + 1)
            }
        }
    }

    /// The function whose instructions alone are counted (callgrind's `--toggle-collect`):
    /// `rc-bw` measures the Ethernet echo too, 200,000 packets whose count of idle engine passes
    /// varies from run to run by more than a WRITE costs, and no difference of runs cancels
    /// that.
    fn collected_in(&self) -> Option<&'static str> {
        match self {
            Workload::Echo(_) => None,
            Workload::RdmaWrite => Some("*RdmaPair::bandwidth"),
        }
    }

    /// What one unit is, for the report.
    fn unit(&self) -> &'static str {
        match self {
            Workload::Echo(_) => "echoed packet",
            Workload::RdmaWrite => "64 B RDMA WRITE message",
        }
    }
}

/// Each function's own instructions in one callgrind run of `fldemu args`.
fn run_once(
    bin: &Path,
    args: &[String],
    collected_in: Option<&str>,
    out: &Path,
) -> Result<BTreeMap<String, u64>, String> {
    let log = std::path::PathBuf::from(format!("{}.log", out.display()));
    let _ = std::fs::remove_file(&log);
    let mut valgrind = Command::new("valgrind");
    valgrind
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()));
    if let Some(f) = collected_in {
        valgrind.arg(format!("--toggle-collect={f}"));
    }
    let output = child::run(
        valgrind.arg(bin).args(args),
        &format!("fldemu {} under callgrind", args.join(" ")),
        &log,
        Echo::Quiet,
    )?;
    // A packet sent again is work the measured traffic does not need: the figure would be off.
    if let Some(line) = output.lines().find(|l| l.contains("retransmitted")) {
        return Err(format!(
            "fldemu {} resent packets under callgrind, so its count is not the traffic's: {}",
            args.join(" "),
            line.trim()
        ));
    }
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

/// Profiles `workload` with runs of `packets` and a third of that (packets or messages).
pub fn profile(
    workspace: &Path,
    workload: &Workload,
    packets: u64,
    json_out: bool,
) -> Result<bool, String> {
    let bin = workspace.join("target/release/fldemu");
    let dir = workspace.join("target/profile");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let ((small_args, small), (large_args, large)) =
        (workload.run(packets / 3), workload.run(packets));
    let only = workload.collected_in();
    let a = run_once(&bin, &small_args, only, &dir.join("callgrind.small"))?;
    let b = run_once(&bin, &large_args, only, &dir.join("callgrind.large"))?;
    let n = large.saturating_sub(small).max(1) as f64;
    let unit = workload.unit();
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
            "fldemu_args": [small_args, large_args],
            "units": [small, large],
            "unit": unit,
            "instructions_per_unit": total,
            "stages": rows.iter().map(|(s, v)| json!({"stage": s, "instructions": v})).collect::<Vec<_>>(),
            "functions": functions.iter().take(25).map(|(v, f)| json!({"function": f, "instructions": v})).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "fldemu {}: {total:.0} instructions per {unit} (runs of {small} and {large} under callgrind)",
            large_args.join(" ")
        );
        println!("{:<34} {:>12} {:>7}", "stage", "instr/unit", "share");
        for (s, v) in &rows {
            println!("{s:<34} {v:>12.0} {:>6.1}%", 100.0 * v / total);
        }
        println!();
        println!("top functions (instructions per {unit}):");
        for (v, f) in functions.iter().take(15) {
            println!("{v:>8.0}  {f}");
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdma_write_runs_count_the_warm_up() {
        // `fldemu rc-bw` moves a twentieth of its count, and one, before it measures.
        let (args, n) = Workload::RdmaWrite.run(6000);
        assert_eq!(n, 6301);
        assert!(args.windows(2).any(|w| w == ["--bytes", "384000"]));
        assert!(args.windows(2).any(|w| w == ["--qp-timeout", "24"]));
        assert_eq!(
            Workload::RdmaWrite.collected_in(),
            Some("*RdmaPair::bandwidth")
        );
        assert_eq!(
            Workload::RdmaWrite.run(6000).1 - Workload::RdmaWrite.run(2000).1,
            4200
        );
        let (args, n) = Workload::Echo(vec!["--accel".into(), "none".into()]).run(300);
        assert_eq!(
            (args.join(" "), n),
            ("demo --accel none --packets 300".into(), 300)
        );
    }

    #[test]
    fn functions_fall_into_the_stage_of_their_source() {
        for (entry, stage) in [
            ("crc32fast-1.5.5/src/specialized/pclmulqdq.rs:crc32fast::specialized::pclmulqdq::calculate", "ICRC (CRC-32)"),
            ("device/abi/src/wire/roce/mod.rs:fld_abi::wire::roce::icrc", "ICRC (CRC-32)"),
            ("device/src/nic/datapath/roce/requester.rs:fld_device::nic::datapath::roce::requester::send_at_cursor", "RoCE transport"),
            ("device/src/nic/packet.rs:fld_device::nic::packet::parse", "parse"),
            ("device/abi/src/wire/checksum.rs:fld_abi::wire::checksum::internet_checksum", "checksum"),
            ("device/src/nic/mod.rs:fld_device::nic::Nic::poll", "NIC engine (poll loop, other)"),
            ("device/src/wire/link.rs:<fld_device::wire::link::LinkEnd as fld_device::wire::Wire>::receive", "wire (cable between cards, uplink)"),
            ("/rustc/x/library/core/src/ptr/mod.rs:fld_abi::wire::roce::IbHeaders::emit_with_pad", "RoCE transport"),
            ("device/abi/src/wire/roce/mod.rs:fld_device::nic::datapath::switching::steer_into_vport", "RoCE transport"),
            ("device/src/nic/datapath/switching.rs:fld_device::nic::datapath::switching::steer_into_vport", "steer (eSwitch, RSS)"),
            ("/rustc/x/library/core/src/option.rs:fld_device::nic::datapath::switching::steer_into_vport", "steer (eSwitch, RSS)"),
            ("device/abi/src/wire/ipv4.rs:fld_device::nic::packet::parse_into", "parse"),
        ] {
            assert_eq!(stage_of(entry), stage, "{entry}");
        }
    }
}
