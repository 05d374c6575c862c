//! `cargo xtask <command>`: project automation that needs more than one cargo invocation.
//!
//! * `ci`          — what `.ci/run` does: the test suites, then the demo and a short benchmark.
//! * `demo`        — the main job: `fldemu demo` in release mode (extra arguments are passed on).
//! * `bench`       — `fldemu bench --json` in release mode (extra arguments are passed on).
//! * `guest-setup` — provisions QEMU with vfio-user-pci and a guest (cached; see [`guest`]).
//! * `guest-run`   — boots the guest with the card attached; a shell, or `-- COMMAND`.
//! * `test-guest`  — the self-test and the demo inside the guest, pass/fail per test.
//! * `bench-guest` — transport latencies and echo rates in the guest, over vfio-user on the
//!   host, and in-process, in one run.
//! * `test-rxe`    — rdma-core's ibv_rc_pingpong on Linux soft-RoCE in the guest against
//!   `fldemu rc-pingpong` over a `-netdev dgram` link (see [`rxe`]).
//! * `profile`     — instructions per echoed packet per stage of the path, under callgrind (see
//!   [`profile`]).
//! * `test-linux-driver` — the Linux kernel driver built for the guest's kernel and loaded on
//!   the card in the guest (see [`linux_driver`]).
//! * `bench-linux-driver` — perftest through that driver beside `fldemu rc-bw` and iperf3, in
//!   the guest, in one boot.
//! * `c-header`    — writes (or with `--check` verifies) the C header of the card's interface
//!   the C drivers include, generated from `fld_abi` (see [`cheader`]).
//!
//! Each command checks what it needs before it starts (see [`prereq`]), and every program it
//! starts is reported, if it fails, with its exit status and its log's last lines (see
//! [`child`]).

mod cheader;
mod child;
mod guest;
mod linux_driver;
mod prereq;
mod profile;
mod rxe;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use child::Echo;
use prereq::{Host, RtlBoot};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "fldemu project automation")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write driver/linux/fldnic_abi.h from fld-abi (`--check`: fail if it is stale).
    CHeader {
        #[arg(long)]
        check: bool,
    },
    /// The CI sequence: tests, demo, model figures and a short benchmark.
    Ci,
    /// `fldemu demo` in release mode; arguments are passed on.
    Demo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// `fldemu bench --json` in release mode; arguments are passed on.
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Provision QEMU with vfio-user-pci and a Debian guest under the cache directory
    /// ($FLDEMU_GUEST_CACHE, else ~/.cache/fldemu/guest). Idempotent; needs root the first time.
    GuestSetup,
    /// Start `fldemu serve`, boot the guest with both NIC functions and FLD attached behind an
    /// emulated IOMMU, and run COMMAND there (the workspace's release binaries are in /opt and on
    /// PATH) or give a shell on this terminal. Everything stops when the guest powers off.
    GuestRun {
        /// The accelerator `fldemu serve` runs behind FLD.
        #[arg(long, default_value = "echo")]
        accel: String,
        /// Seconds before the guest is stopped.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Start this in the guest in the background and reset the machine three seconds later;
        /// COMMAND runs after the reboot.
        #[arg(long)]
        reset_during: Option<String>,
        /// Command to run in the guest (after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Run `fldemu selftest` and the CPU and FLD-E demos inside the guest over vfio-pci, and the
    /// FLD-E demo with the Verilog echo as the accelerator (skipped without Verilator, unless
    /// FLDEMU_REQUIRE_VERILATOR is set); pass/fail per test, the logs' last lines on failure.
    TestGuest {
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Instructions per echoed packet, per stage (doorbell and WQE fetch, parse, checksum,
    /// steer, DMA, receive and completions, FLD, driver and application), from two callgrind
    /// runs of `fldemu demo` (needs valgrind). Extra arguments go to the demo, e.g.
    /// `-- --accel none --size 64`.
    Profile {
        /// Packets (messages with --rdma-write) of the larger run; the smaller has a third.
        #[arg(long, default_value_t = 30_000)]
        packets: u64,
        /// Per 64 B RDMA WRITE message between two in-process cards (`fldemu rc-bw`) instead
        /// of per echoed packet; demo arguments are refused.
        #[arg(long)]
        rdma_write: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Trapped MMIO round trip, doorbell-to-completion and MSI-X latency, and echo Mpps: inside
    /// the guest, over vfio-user on the host, and in-process, measured in one run.
    BenchGuest {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Packets per echo measurement.
        #[arg(long, default_value_t = 50_000)]
        packets: u64,
    },
    /// Linux soft-RoCE in the guest against `fldemu rc-pingpong` on the host over a dgram link:
    /// rdma-core's ibv_rc_pingpong both ways, 1 B to 64 KiB, with and without -e, once with
    /// loss; a capture dissected by tshark. Pass/fail per run.
    TestRxe {
        #[arg(long, default_value_t = 900)]
        timeout: u64,
    },
    /// RDMA bandwidth in the guest through its own stack — perftest's ib_write_bw, ib_send_bw
    /// and ib_read_bw between the card's two functions over fldnic.ko and libfldnic — beside
    /// `fldemu rc-bw` (two in-process cards inside the same guest) and iperf3 through the
    /// netdev (one stream, and eight over four channels), in one boot.
    BenchLinuxDriver {
        #[arg(long, default_value_t = 1200)]
        timeout: u64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The Linux kernel driver (driver/linux/fldnic) and rdma-core provider built for the
    /// guest and loaded on the card: netdevs, ethtool, RSS, RDMA through stock rdma-core and
    /// perftest (between the functions and against rxe, rdma_cm too), bad input, resets and
    /// unloads under traffic, QEMU killed under traffic, a clean dmesg.
    TestLinuxDriver {
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
}

/// Runs cargo with `args`, its output on this terminal and in `target/xtask/cargo-CMD.log`; a
/// failure is reported with cargo's exit status and that log's last lines.
fn cargo(args: &[&str]) -> Result<(), String> {
    let what = format!("cargo {}", args.join(" "));
    eprintln!("xtask: {what}");
    let log = child::fresh_log(&logs(), &format!("cargo-{}", args.first().unwrap_or(&"")))?;
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args);
    child::run(&mut cmd, &what, &log, Echo::Both).map(drop)
}

/// Cargo's arguments selecting the release `fldemu` binary.
const FLDEMU: [&str; 6] = ["--quiet", "--release", "-p", "fld-qemu", "--bin", "fldemu"];

fn fldemu(args: &[&str]) -> Result<(), String> {
    cargo(&[&["run"], &FLDEMU[..], &["--"], args].concat())
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Where xtask keeps the logs of the programs it runs on the host: `$FLDEMU_XTASK_LOGS`, else
/// `target/xtask` (xtask's own tests run it with a directory of their own, so as not to write
/// over the logs of an xtask that runs them).
fn logs() -> PathBuf {
    std::env::var_os("FLDEMU_XTASK_LOGS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/xtask"))
}

fn build_fldemu() -> Result<(), String> {
    cargo(&[&["build"], &FLDEMU[..]].concat())
}

fn ci() -> Result<(), String> {
    cargo(&["test", "--workspace"])?;
    fldemu(&["demo", "--accel", "echo", "--packets", "50000", "--json"])?;
    fldemu(&["demo", "--packets", "50000", "--json"])?;
    fldemu(&["memory", "--json"])?;
    fldemu(&["model", "--packets", "5000", "--json"])?;
    fldemu(&[
        "demo",
        "--packets",
        "8941",
        "--size",
        "60",
        "--size-max",
        "9000",
        "--rx-mode",
        "regular",
        "--json",
    ])?;
    fldemu(&["bench", "--json", "--packets", "100000"])
}

/// The JSON object printed on the line after `prefix` in `output`.
fn json_after(output: &str, prefix: &str) -> Option<Value> {
    output
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|rest| serde_json::from_str(rest.trim()).ok())
}

/// One line of the report: test name, passed, detail.
type Verdict = (String, bool, String);

/// The verdict from the JSON summary `fldemu demo --json` printed after `prefix`.
fn demo_verdict(name: &str, output: &str, prefix: &str) -> Verdict {
    let v = json_after(output, prefix);
    let ok = v.as_ref().is_some_and(|v| v["verified"] == json!(true));
    let detail = v.map_or("(no JSON summary)".to_string(), |v| {
        format!(
            "({:.3} Mpps, verified {})",
            v["mpps"].as_f64().unwrap_or(0.0),
            v["verified"]
        )
    });
    (name.into(), ok, detail)
}

/// Three boots of the guest against one `fldemu serve`: the self-test and both demos; a guest
/// whose QEMU is killed in the middle of traffic; a new guest that resets the machine in the
/// middle of traffic and must then find the card working. A fourth boot drives a card whose
/// accelerator is the Verilog echo (skipped without Verilator, unless FLDEMU_REQUIRE_VERILATOR
/// is set).
fn test_guest(timeout: u64) -> Result<bool, String> {
    let paths = guest::GuestPaths::new();
    let rtl = prereq::rtl_boot(&Host::current());
    if let Ok(RtlBoot::Skip(line)) = &rtl {
        eprintln!("xtask: {line}");
    }
    prereq::test_guest(&rtl, &paths)?;
    let run_rtl = rtl == Ok(RtlBoot::Run);
    let qemu = guest::setup(&paths)?;
    build_fldemu()?;
    let mut served = guest::ServedCard::start(paths, qemu.clone(), &workspace(), "echo")?;
    let timeout = Duration::from_secs(timeout);
    let mut tests = GuestTests::default();
    tests.selftest_and_demos(&mut served, timeout)?;
    tests.qemu_killed_mid_traffic(&mut served, timeout)?;
    tests.machine_reset_mid_traffic(&mut served, timeout)?;
    drop(served);
    if run_rtl {
        tests.rtl_accelerator(qemu, timeout)?;
    }
    Ok(tests.report(run_rtl))
}

/// `test-guest`'s verdicts so far, and the outcome of each boot (its logs shown if a test
/// failed).
#[derive(Default)]
struct GuestTests {
    results: Vec<Verdict>,
    outputs: Vec<guest::GuestOutcome>,
}

impl GuestTests {
    /// Boot 1: `fldemu selftest` (a verdict per test it prints) and the CPU and FLD-E demos.
    fn selftest_and_demos(
        &mut self,
        served: &mut guest::ServedCard,
        timeout: Duration,
    ) -> Result<(), String> {
        eprintln!("xtask: boot 1: the self-test and the demos over vfio-pci");
        let script = "fldemu selftest --transport vfio\n\
            echo \"demo cpu: $(fldemu demo --transport vfio --packets 20000 --json)\"\n\
            echo \"demo flde: $(fldemu demo --transport vfio --accel echo --packets 20000 --json)\"";
        let first = served.boot(&guest::RunOptions {
            command: Some(script.into()),
            timeout,
            kill_after: None,
            reset_during: None,
        })?;
        for line in first.output.lines() {
            if let Some(rest) = line.strip_prefix("test ") {
                let (name, verdict) = rest.split_once(" ... ").unwrap_or((rest, ""));
                let ok = verdict.starts_with("ok");
                let detail = verdict
                    .trim_start_matches("ok")
                    .trim_start_matches("FAILED")
                    .trim();
                self.results.push((name.into(), ok, detail.into()));
            }
        }
        self.results.push(demo_verdict(
            "demo_cpu_echo_json",
            &first.output,
            "demo cpu: ",
        ));
        self.results.push(demo_verdict(
            "demo_flde_echo_json",
            &first.output,
            "demo flde: ",
        ));
        self.outputs.push(first);
        Ok(())
    }

    /// Boot 2: QEMU killed in the middle of FLD-E traffic must leave the server running.
    fn qemu_killed_mid_traffic(
        &mut self,
        served: &mut guest::ServedCard,
        timeout: Duration,
    ) -> Result<(), String> {
        eprintln!("xtask: boot 2: QEMU killed in the middle of FLD-E traffic");
        let killed = served.boot(&guest::RunOptions {
            command: Some("fldemu demo --transport vfio --accel echo --packets 100000000".into()),
            timeout,
            kill_after: Some(Duration::from_secs(4)),
            reset_during: None,
        })?;
        let server_alive = served.server_alive();
        self.results.push((
            "qemu_killed_mid_traffic".into(),
            killed.killed() && server_alive,
            format!(
                "(QEMU killed: {}, server running: {server_alive})",
                killed.killed()
            ),
        ));
        self.outputs.push(killed);
        Ok(())
    }

    /// Boot 3: a new guest resets the machine in the middle of FLD-E traffic, then both demos
    /// must run on the card it finds.
    fn machine_reset_mid_traffic(
        &mut self,
        served: &mut guest::ServedCard,
        timeout: Duration,
    ) -> Result<(), String> {
        eprintln!("xtask: boot 3: a new guest, reset in the middle of traffic, then the demos");
        let third = served.boot(&guest::RunOptions {
            command: Some(
                "echo \"demo cpu: $(fldemu demo --transport vfio --packets 20000 --json)\"\n\
                 echo \"demo flde: $(fldemu demo --transport vfio --accel echo --packets 20000 --json)\""
                    .into(),
            ),
            timeout,
            kill_after: None,
            reset_during: Some(
                "fldemu demo --transport vfio --accel echo --packets 100000000".into(),
            ),
        })?;
        let reset_seen = std::fs::read_to_string(&third.console_log)
            .is_ok_and(|c| c.contains("fldemu-guest: resetting the machine"));
        self.results.push((
            "machine_reset_mid_traffic".into(),
            reset_seen && third.exit_code.is_some(),
            format!(
                "(reset during FLD-E traffic: {reset_seen}, guest came back and ran: {})",
                third.exit_code.is_some()
            ),
        ));
        self.results.push(demo_verdict(
            "next_guest_cpu_echo",
            &third.output,
            "demo cpu: ",
        ));
        self.results.push(demo_verdict(
            "next_guest_flde_echo",
            &third.output,
            "demo flde: ",
        ));
        self.outputs.push(third);
        Ok(())
    }

    /// Boot 4: the FLD-E demo on a card of its own whose accelerator is the Verilog echo.
    fn rtl_accelerator(&mut self, qemu: guest::Qemu, timeout: Duration) -> Result<(), String> {
        eprintln!("xtask: boot 4: a card whose accelerator is RTL (the Verilog echo, Verilator)");
        let rtl = format!(
            "rtl:{}",
            workspace().join("device/rtl/examples/echo").display()
        );
        // A server that does not start fails this test only: the others' results still show.
        match guest::ServedCard::start(guest::GuestPaths::new(), qemu, &workspace(), &rtl) {
            Ok(mut served) => {
                let fourth = served.boot(&guest::RunOptions {
                    command: Some(
                        "echo \"demo rtl: $(fldemu demo --transport vfio --accel echo --packets 20000 --json)\""
                            .into(),
                    ),
                    timeout,
                    kill_after: None,
                    reset_during: None,
                })?;
                self.results.push(demo_verdict(
                    "flde_echo_with_rtl_accelerator",
                    &fourth.output,
                    "demo rtl: ",
                ));
                self.outputs.push(fourth);
            }
            Err(e) => {
                eprintln!("xtask: boot 4: {e}");
                self.results.push((
                    "flde_echo_with_rtl_accelerator".into(),
                    false,
                    "(fldemu serve did not start: its exit status and log are above)".into(),
                ));
            }
        }
        Ok(())
    }

    /// Prints a line per test and the totals, and every boot's logs if any test failed or is
    /// missing; whether all passed.
    fn report(&self, run_rtl: bool) -> bool {
        let (results, outputs) = (&self.results, &self.outputs);
        for (name, ok, detail) in results {
            println!(
                "guest test {name} ... {} {detail}",
                if *ok { "ok" } else { "FAILED" }
            );
        }
        // The self-test's own summary says how many checks it has; two demos, the killed guest,
        // the reset guest and its two demos, and the RTL accelerator's demo (unless skipped)
        // come on top.
        let checks = outputs[0]
            .output
            .lines()
            .find_map(|l| l.strip_prefix("selftest: "))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(usize::MAX / 2);
        let expected = checks + 6 + usize::from(run_rtl);
        let passed = results.iter().filter(|r| r.1).count();
        let all_ok = passed == results.len() && results.len() == expected;
        println!(
            "test-guest: {passed} passed, {} failed{}{}",
            results.len() - passed,
            if results.len() < expected {
                format!(", {} missing", expected - results.len())
            } else {
                String::new()
            },
            if run_rtl { "" } else { ", 1 skipped (boot 4)" }
        );
        if !all_ok {
            for (i, out) in outputs.iter().enumerate() {
                eprintln!("---- boot {} ----\n{}", i + 1, out.report());
            }
        }
        all_ok
    }
}

/// Runs `fldemu` (release) on the host and returns its standard output; its output is also in
/// `target/xtask/fldemu-CMD.log`, whose last lines a failure shows.
fn fldemu_output(args: &[&str]) -> Result<String, String> {
    let bin = workspace().join("target/release/fldemu");
    let log = child::fresh_log(&logs(), &format!("fldemu-{}", args.first().unwrap_or(&"")))?;
    child::run(
        Command::new(&bin).args(args),
        &format!("fldemu {}", args.join(" ")),
        &log,
        Echo::Stderr,
    )
}

/// `fldemu demo --json` with the CPU echo or (`flde`) the FLD-E echo; its JSON summary.
fn demo_json(transport: &[&str], flde: bool, packets: &str) -> Result<Value, String> {
    let mut args = vec!["demo", "--json", "--packets", packets];
    if flde {
        args.extend(["--accel", "echo"]);
    }
    args.extend(transport);
    Ok(parse(&fldemu_output(&args)?))
}

fn parse(s: &str) -> Value {
    s.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null)
}

fn bench_guest(json_out: bool, packets: u64) -> Result<bool, String> {
    let paths = guest::GuestPaths::new();
    prereq::bench_guest(&paths)?;
    let qemu = guest::setup(&paths)?;
    build_fldemu()?;
    let n = packets.to_string();
    // In-process: the card and the driver in one process, no transport at all.
    eprintln!("xtask: in-process echo");
    let inproc_cpu = demo_json(&[], false, &n)?;
    let inproc_flde = demo_json(&[], true, &n)?;
    // vfio-user on the host: the server and the driver in two processes, no QEMU.
    eprintln!("xtask: vfio-user on the host");
    let dir = workspace().join("target/bench-guest-sockets");
    let _ = std::fs::remove_dir_all(&dir);
    let mut serve = Command::new(workspace().join("target/release/fldemu"));
    serve
        .args(["serve", "--accel", "echo", "--socket-dir"])
        .arg(&dir);
    let server = guest::start_server(
        serve,
        "fldemu serve --accel echo",
        &dir,
        &child::fresh_log(&logs(), "fldemu-serve")?,
        guest::SERVE_START,
    )?;
    let d = dir.display().to_string();
    let host = (|| -> Result<(Value, Value, Value), String> {
        let t = parse(&fldemu_output(&[
            "bench-transport",
            "--transport",
            "vfio-user",
            "--socket-dir",
            &d,
            "--json",
        ])?);
        let remote = ["--transport", "vfio-user", "--socket-dir", &d];
        let cpu = demo_json(&remote, false, &n)?;
        let flde = demo_json(&remote, true, &n)?;
        Ok((t, cpu, flde))
    })();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let (host_t, host_cpu, host_flde) = host?;
    // Inside the guest: QEMU's vfio-user-pci, the guest's vfio-pci, TCG.
    eprintln!("xtask: inside the guest");
    let guest_packets = (packets / 5).max(1000).to_string();
    let script = format!(
        "echo \"transport: $(fldemu bench-transport --transport vfio --iterations 1000 --json)\"\n\
         echo \"cpu: $(fldemu demo --transport vfio --json --packets {guest_packets})\"\n\
         echo \"flde: $(fldemu demo --transport vfio --accel echo --json --packets {guest_packets})\""
    );
    let out = guest::run_guest(
        paths,
        qemu,
        &workspace(),
        "echo",
        &guest::RunOptions {
            command: Some(script),
            timeout: Duration::from_secs(600),
            kill_after: None,
            reset_during: None,
        },
    )?;
    let g_t = json_after(&out.output, "transport: ").unwrap_or(Value::Null);
    let g_cpu = json_after(&out.output, "cpu: ").unwrap_or(Value::Null);
    let g_flde = json_after(&out.output, "flde: ").unwrap_or(Value::Null);
    let ok = [
        &inproc_cpu,
        &inproc_flde,
        &host_cpu,
        &host_flde,
        &g_cpu,
        &g_flde,
    ]
    .iter()
    .all(|v| v["verified"] == json!(true))
        && !g_t.is_null()
        && !host_t.is_null();
    if !ok {
        out.show_logs();
    }
    let mpps = |v: &Value| v["mpps"].as_f64().unwrap_or(0.0);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let us = |v: &Value, k: &str| v[k]["median_us"].as_f64().unwrap_or(0.0);
    let report = json!({
        "in_process": {"cpu_echo_mpps": mpps(&inproc_cpu), "flde_echo_mpps": mpps(&inproc_flde)},
        "vfio_user_host": {
            "transport": host_t,
            "cpu_echo_mpps": mpps(&host_cpu),
            "flde_echo_mpps": mpps(&host_flde),
        },
        "guest": {
            "transport": g_t,
            "cpu_echo_mpps": mpps(&g_cpu),
            "flde_echo_mpps": mpps(&g_flde),
        },
        "ratios": {
            "guest_cpu_echo_vs_in_process": ratio(mpps(&g_cpu), mpps(&inproc_cpu)),
            "guest_flde_echo_vs_in_process": ratio(mpps(&g_flde), mpps(&inproc_flde)),
            "host_vfio_user_cpu_echo_vs_in_process": ratio(mpps(&host_cpu), mpps(&inproc_cpu)),
            "guest_trapped_read_vs_host_vfio_user": ratio(us(&g_t, "mmio_read"), us(&host_t, "mmio_read")),
            "guest_trapped_read_vs_doorbell_to_completion": ratio(us(&g_t, "mmio_read"), us(&g_t, "doorbell_to_completion")),
            "guest_doorbell_to_completion_wqe_by_mmio_vs_fetched": ratio(us(&g_t, "doorbell_to_completion"), us(&g_t, "doorbell_to_completion_fetched")),
            "host_doorbell_to_completion_wqe_by_mmio_vs_fetched": ratio(us(&host_t, "doorbell_to_completion"), us(&host_t, "doorbell_to_completion_fetched")),
        },
        "verified": ok,
    });
    if json_out {
        println!("{report}");
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    }
    Ok(ok)
}

/// `cargo xtask guest-run`: a shell in the guest, or COMMAND and its exit status.
fn guest_run(
    accel: &str,
    timeout: u64,
    reset_during: Option<String>,
    command: &[String],
) -> Result<bool, String> {
    let paths = guest::GuestPaths::new();
    prereq::guest_run(&Host::current(), &paths, accel)?;
    let qemu = guest::setup(&paths)?;
    build_fldemu()?;
    let interactive = command.is_empty();
    let out = guest::run_guest(
        paths,
        qemu,
        &workspace(),
        accel,
        &guest::RunOptions {
            command: (!interactive).then(|| command.join(" ")),
            timeout: Duration::from_secs(timeout),
            kill_after: None,
            reset_during,
        },
    )?;
    if interactive {
        // QEMU's own failure was reported when it ended.
        return Ok(matches!(out.qemu_end, guest::QemuEnd::Exited(s) if s.success()));
    }
    print!("{}", out.output);
    match out.exit_code {
        Some(0) => Ok(true),
        Some(code) => {
            eprintln!(
                "xtask: the command exited with {code} in the guest; its output (above) is in {}",
                out.output_log.display()
            );
            Ok(false)
        }
        None => {
            out.show_logs();
            Ok(false)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<bool, String> = match cli.cmd {
        Cmd::Ci => ci().map(|()| true),
        Cmd::CHeader { check } => cheader::run(&workspace(), check),
        Cmd::Demo { args } => {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            fldemu(&[&["demo"], a.as_slice()].concat()).map(|()| true)
        }
        Cmd::Bench { args } => {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            fldemu(&[&["bench", "--json"], a.as_slice()].concat()).map(|()| true)
        }
        Cmd::GuestSetup => guest::setup(&guest::GuestPaths::new()).map(|_| true),
        Cmd::GuestRun {
            accel,
            timeout,
            reset_during,
            command,
        } => guest_run(&accel, timeout, reset_during, &command),
        Cmd::TestGuest { timeout } => test_guest(timeout),
        Cmd::BenchGuest { json, packets } => bench_guest(json, packets),
        Cmd::Profile {
            packets,
            rdma_write,
            json,
            args,
        } => {
            let workload = match (rdma_write, args.is_empty()) {
                (true, true) => Ok(profile::Workload::RdmaWrite),
                (true, false) => Err("profile: --rdma-write takes no demo arguments".to_string()),
                (false, _) => Ok(profile::Workload::Echo(args)),
            };
            workload.and_then(|w| {
                prereq::profile(&Host::current())
                    .and_then(|()| build_fldemu())
                    .and_then(|()| profile::profile(&workspace(), &w, packets, json))
            })
        }
        Cmd::TestRxe { timeout } => rxe::prerequisites(&guest::GuestPaths::new())
            .and_then(|()| build_fldemu())
            .and_then(|()| rxe::test_rxe(&workspace(), timeout)),
        Cmd::TestLinuxDriver { timeout } => prereq::test_linux_driver(&guest::GuestPaths::new())
            .and_then(|()| linux_driver::test_linux_driver(&workspace(), timeout)),
        Cmd::BenchLinuxDriver { timeout, json } => {
            prereq::test_linux_driver(&guest::GuestPaths::new())
                .and_then(|()| linux_driver::bench_linux_driver(&workspace(), timeout, json))
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
