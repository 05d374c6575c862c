//! `fldemu`: the emulated FlexDriver card's command-line front end.
//!
//! * `fldemu demo` brings the card up and runs a CPU traffic generator on one host vPort against
//!   a CPU echo application on another, through the NIC's eSwitch, checking every byte that
//!   comes back. With `--accel echo` the echo is the FLD-E echo accelerator behind the FLD
//!   module. `--transport vfio-user|vfio` reaches a card served by `fldemu serve` instead of
//!   building one in-process.
//! * `fldemu bench` measures packets per second through the CPU and FLD-E echo paths at several
//!   frame sizes, beside a software loopback baseline measured in the same run.
//! * `fldemu memory` prints Table 3 (software vs FLD memory) from the formulas and from what the
//!   running FLD allocated, and Figure 4's sweep.
//! * `fldemu serve` exposes the card's functions on vfio-user sockets; `fldemu selftest` and
//!   `fldemu bench-transport` check and measure a card reached that way.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Bring the card up (in-process, or reached through vfio-user or vfio) and echo verified
    /// traffic between two host vPorts, or through the FLD-E echo accelerator.
    Demo(cmd::demo::DemoArgs),
    /// Measure packets per second through the CPU and FLD-E echo paths at 64, 256 and 1500 bytes
    /// and a data-center size mix.
    Bench(cmd::bench::BenchArgs),
    /// Per accelerator, messages/s and Gbit/s through the full emulated path at the paper's
    /// sizes (ZUC 64-4096 B requests, defrag 1500 B datagrams at a 1450 B MTU, IoT 256 B
    /// messages), beside the host-software baseline measured in the same run.
    BenchAccel(cmd::bench_accel::BenchAccelArgs),
    /// A Verilog accelerator (`--design`, default the shipped echo) simulated by Verilator
    /// behind FLD, against the Rust echo model in the same run: echoed frames per second and
    /// simulated cycles per second at 64 and 1500 bytes.
    BenchRtl(cmd::bench_rtl::BenchRtlArgs),
    /// Start an RTL accelerator: a directory with a top module that has every port of FLD's
    /// accelerator interface, and the file list `--accel rtl:DIR` builds it from.
    RtlInit(cmd::rtl_init::RtlInitArgs),
    /// Play a capture through the card (NIC rules + accelerator) and capture what reaches the
    /// host's queues, with a summary of the accelerator's counters.
    Replay(cmd::replay::ReplayArgs),
    /// NIC-driver memory: the conventional driver's requirement (Table 3) beside what FLD
    /// allocates for the same parameters.
    Memory(cmd::memory::MemoryArgs),
    /// FLD's PCIe performance model (Figure 7a): bytes per packet on FLD's link and the
    /// throughput bound per link configuration, beside the traffic the emulator measures.
    Model(cmd::model::ModelArgs),
    /// Check a card reached through vfio-user or vfio (inside a guest): verified CPU and FLD-E
    /// echo, MSI-X, DMA isolation, reset in the middle of traffic, garbage in every BAR. One
    /// line per check; fails if any check fails.
    Selftest(cmd::selftest::SelftestArgs),
    /// Latency of a transport to a card running elsewhere: trapped register read and write,
    /// doorbell to completion, doorbell to MSI-X interrupt.
    BenchTransport(cmd::bench_transport::BenchTransportArgs),
    /// Serve the card's PCIe functions on vfio-user sockets (QEMU's vfio-user-pci, or the
    /// driver's vfio-user transport). The NIC's doorbell pages are offered for mmap; control
    /// registers and the MSI-X table are trapped. Guest RAM must be shareable
    /// (memory-backend-memfd,share=on). Runs until killed; stale sockets are replaced at start.
    /// RUST_LOG=info logs connections, resets and unreachable maps; debug logs every map.
    Serve(cmd::serve::ServeArgs),
    /// rdma-core's ibv_rc_pingpong on the card, wire-compatible with the real tool (the TCP
    /// exchange of LID:QPN:PSN:GID on port 18515, the same options): an RC QP bouncing SENDs
    /// with a peer — another fldemu, or Linux soft-RoCE — over a UDP link or a TAP interface.
    RcPingpong(cmd::rc_pingpong::RcPingpongArgs),
    /// The virtual-time runner: the card model in a deterministic discrete-event simulation
    /// with modeled links, switches, PCIe and on-chip caches, driven by a scenario file
    /// (docs/simulation.md). Prints each workload's table beside the paper's values.
    Sim(cmd::sim::SimArgs),
    /// RDMA WRITE, READ and SEND throughput and message rate, 64 B to 64 KiB, between two
    /// in-process cards joined by a cable, beside the Ethernet echo path in the same run.
    RcBw(cmd::rc_bw::RcBwArgs),
    /// RDMA SEND latency (median, p99), 8 B to 4 KiB, between two in-process cards.
    RcLat(cmd::rc_bw::RcLatArgs),
    /// The FLD-R service machine (paper §5.3, §7) on a UDP link: the control plane as an RDMA
    /// server handing each client a queue pair of the accelerator (ZUC or echo) behind FLD.
    /// Clients: `fldemu demo --accel zuc --rdma --link ...`.
    FldrServer(cmd::fldr::FldrServerArgs),
    /// FLD-R figures from the running model: echo throughput over message sizes beside FLD-E
    /// (Figure 7b, right column), 1 KiB latency against offered load (Figure 7c), and
    /// disaggregated ZUC throughput over request sizes against software ZUC and the model's
    /// bound (Figure 8a).
    BenchFldr(cmd::fldr::BenchFldrArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Demo(a) => cmd::demo::run(a),
        Cmd::Bench(a) => cmd::bench::run(a),
        Cmd::BenchAccel(a) => cmd::bench_accel::run(a),
        Cmd::BenchRtl(a) => cmd::bench_rtl::run(a),
        Cmd::RtlInit(a) => cmd::rtl_init::run(a),
        Cmd::Replay(a) => cmd::replay::run(a),
        Cmd::Memory(a) => cmd::memory::run(a),
        Cmd::Model(a) => cmd::model::run(a),
        Cmd::Selftest(a) => cmd::selftest::run(a),
        Cmd::BenchTransport(a) => cmd::bench_transport::run(a),
        Cmd::Serve(a) => cmd::serve::run(a),
        Cmd::RcPingpong(a) => cmd::rc_pingpong::run(a),
        Cmd::Sim(a) => cmd::sim::run(a),
        Cmd::RcBw(a) => cmd::rc_bw::run_bw(a),
        Cmd::RcLat(a) => cmd::rc_bw::run_lat(a),
        Cmd::FldrServer(a) => cmd::fldr::run_server(a),
        Cmd::BenchFldr(a) => cmd::fldr::run_bench(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fldemu: {e}");
            ExitCode::FAILURE
        }
    }
}
