//! FLD-R from the command line: `fldemu demo --accel zuc|echo --rdma` (the disaggregated
//! accelerator on a second machine, every result verified), `fldemu fldr-server` (that second
//! machine as a process of its own on a UDP link) and `fldemu bench-fldr` (Figures 7b, 7c and
//! 8a from the running model).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use fld_host::cryptodev::{run_ops, sample_ops, SoftZuc, ZucRdma};
use fld_host::fldr::{ClientConfig, FldrClient};
use fld_qemu::testbed::fldr::{
    client_machine, serve_on, two_machines, ClientMachine, Service, ServiceAccel, ServiceReport,
};
use serde_json::json;

use super::demo::DemoArgs;
use super::*;

/// Largest FLD-R message (FLD's largest Tx message).
pub const MAX_MESSAGE: usize = 16 * 1024;

/// Largest ZUC request data over FLD-R: a message less the 64-byte request header.
pub const MAX_ZUC_DATA: usize = MAX_MESSAGE - 64;

#[derive(clap::Args)]
pub struct FldrServerArgs {
    /// This card's uplink: `udp:LOCAL_PORT:HOST:PORT`.
    #[arg(long)]
    pub link: String,
    /// This card's IP address (clients' queue pairs connect to it).
    #[arg(long, default_value = "10.9.0.1")]
    pub ip: Ipv4Addr,
    /// TCP address clients exchange their queue pair addresses on (`demo --rdma --link`'s
    /// default `--server`).
    #[arg(long, default_value = "127.0.0.1:18600")]
    pub listen: SocketAddr,
    /// The accelerator behind FLD.
    #[arg(long, value_enum, default_value_t = ServiceArg::Zuc)]
    pub accel: ServiceArg,
    /// FLD queues for FLD-R (one per client).
    #[arg(long, default_value_t = 16)]
    pub queues: u16,
    /// Serve this many seconds, then print the report and exit (0: until SIGINT or SIGTERM,
    /// which print it too).
    #[arg(long, default_value_t = 0)]
    pub seconds: u64,
    /// Add the card's counters to the report printed on exit: the server port's RoCE drops by
    /// reason and Ethernet drops, FLD's statistics, the accelerator's counters.
    #[arg(long)]
    pub stats: bool,
}

/// Set by SIGINT and SIGTERM: the server stops serving and prints its report.
static STOP_SERVING: AtomicBool = AtomicBool::new(false);

extern "C" fn stop_serving(_signal: libc::c_int) {
    STOP_SERVING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// SIGINT and SIGTERM end the serving loop instead of the process, so the report is printed.
fn stop_on_signals() {
    let handler = stop_serving as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

#[derive(Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum ServiceArg {
    Echo,
    Zuc,
}

impl ServiceArg {
    fn service(self) -> ServiceAccel {
        match self {
            ServiceArg::Echo => ServiceAccel::Echo,
            ServiceArg::Zuc => ServiceAccel::Zuc,
        }
    }
}

/// `fldemu fldr-server`: the FLD-R service machine on a link, in the foreground.
pub fn run_server(a: FldrServerArgs) -> CmdResult {
    let card = fld_device::card::Card::new(fld_device::card::CardConfig {
        nic: fld_device::nic::NicConfig {
            card_id: u16::from_be_bytes([a.ip.octets()[2], a.ip.octets()[3]]),
            ..Default::default()
        },
        ..Default::default()
    });
    card.nic.set_uplink(fld_qemu::wires::open_link(&a.link)?);
    let listener = TcpListener::bind(a.listen)?;
    stop_on_signals();
    let started = Instant::now();
    let stopper = &STOP_SERVING;
    let seconds = a.seconds;
    let report = std::thread::scope(|s| {
        if seconds > 0 {
            s.spawn(move || {
                while started.elapsed() < Duration::from_secs(seconds)
                    && !stopper.load(std::sync::atomic::Ordering::Relaxed)
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                stopper.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
        serve_on(
            card.clone(),
            None,
            a.ip,
            a.accel.service(),
            a.queues,
            listener,
            stopper,
            |addr| eprintln!("fldemu fldr-server: {} on {addr}, link {}", a.ip, a.link),
        )
    })?;
    print_service_report(&report);
    if a.stats {
        service_counters(&report).print();
    }
    Ok(ExitCode::SUCCESS)
}

/// The service machine's counters from its report: its port's, FLD's, the accelerator's.
fn service_counters(r: &ServiceReport) -> CardCounters {
    let mut c = CardCounters::default();
    c.add("server port", r.port.clone());
    c.add("server FLD", r.fld.clone());
    c.add("accelerator", r.accelerator.clone());
    c
}

fn print_service_report(r: &ServiceReport) {
    println!(
        "  FLD             {} packets received, {} messages sent, {} accelerator drops",
        r.fld_rx_packets, r.fld_tx_messages, r.fld_accelerator_drops
    );
    let c: Vec<String> = r
        .accelerator
        .iter()
        .map(|(n, v)| format!("{n} {v}"))
        .collect();
    println!("  accelerator     {}", c.join(", "));
}

/// The FLD-R server's address a `demo --rdma --link` client connects to by default
/// (`fldr-server`'s default `--listen`).
const DEFAULT_SERVER: SocketAddr =
    SocketAddr::V4(std::net::SocketAddrV4::new(Ipv4Addr::LOCALHOST, 18600));

/// A `demo --rdma --link` client card's address by default.
const DEFAULT_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

/// Where the service is: in this process (with its report at the end) or another one.
enum Setup {
    Local(Service, ClientMachine, bool),
    Remote(ClientMachine, SocketAddr),
}

impl Setup {
    fn open(a: &DemoArgs, accel: ServiceAccel) -> Result<Self, Box<dyn std::error::Error>> {
        Ok(match &a.link {
            None if a.local => {
                let (service, client) = fld_qemu::testbed::fldr::one_machine(accel, 4)?;
                Setup::Local(service, client, true)
            }
            None => {
                let (service, client) = two_machines(accel, 4)?;
                Setup::Local(service, client, false)
            }
            Some(link) => {
                let ip = a.ip.unwrap_or(DEFAULT_CLIENT_IP);
                let card = fld_device::card::Card::new(fld_device::card::CardConfig {
                    nic: fld_device::nic::NicConfig {
                        card_id: u16::from_be_bytes([ip.octets()[2], ip.octets()[3]]),
                        ..Default::default()
                    },
                    ..Default::default()
                });
                card.nic.set_uplink(fld_qemu::wires::open_link(link)?);
                let m = client_machine(card, ip)?;
                Setup::Remote(m, a.server.unwrap_or(DEFAULT_SERVER))
            }
        })
    }

    fn connect(&mut self, cfg: ClientConfig) -> Result<FldrClient, Box<dyn std::error::Error>> {
        Ok(match self {
            Setup::Local(s, m, _) => m.connect(s.addr, cfg)?,
            Setup::Remote(m, addr) => m.connect(*addr, cfg)?,
        })
    }

    fn client(&mut self) -> &mut ClientMachine {
        match self {
            Setup::Local(_, m, _) | Setup::Remote(m, _) => m,
        }
    }

    /// Captures every frame entering the client's card (with `--local`, the one card).
    fn capture(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        fld_qemu::testbed::capture_ingress(&self.client().card, path)
    }

    /// Ends the capture, flushing the file.
    fn stop_capture(&mut self) {
        self.client().card.nic.set_tap(None);
    }

    /// The client's counters: its port's and its queue pair's.
    fn client_counters(
        &mut self,
        client: &FldrClient,
    ) -> Result<CardCounters, Box<dyn std::error::Error>> {
        let ctx = &mut self.client().ctx;
        let mut c = CardCounters::default();
        c.add("client port", ctx.port_counters()?);
        c.add("client qp", client.qp_counters(ctx)?);
        Ok(c)
    }

    fn describe(&self) -> &'static str {
        match self {
            Setup::Local(_, _, true) => "one card: the client on its second NIC function",
            Setup::Local(..) => "two machines in this process, their uplinks on a cable",
            Setup::Remote(..) => "two fldemu processes, each with its own card, on a UDP link",
        }
    }

    fn finish(self) -> Result<Option<ServiceReport>, Box<dyn std::error::Error>> {
        Ok(match self {
            Setup::Local(s, ..) => Some(s.stop()?),
            Setup::Remote(..) => None,
        })
    }
}

/// `fldemu demo --accel zuc|echo --rdma`.
pub fn rdma_demo(a: &DemoArgs) -> CmdResult {
    match a.accel.kind {
        AccelArg::Zuc => zuc_rdma_demo(a),
        AccelArg::Echo => echo_rdma_demo(a),
        _ => Err("--rdma runs --accel zuc or --accel echo".into()),
    }
}

/// Cipher operations through the disaggregated ZUC accelerator behind FLD-R and through
/// software ZUC, every result compared.
fn zuc_rdma_demo(a: &DemoArgs) -> CmdResult {
    let bytes = a.size.unwrap_or(1024) as usize;
    let ops = sample_ops(a.packets as usize, bytes, true, 0x5eed);
    let t = Instant::now();
    let soft = run_ops(&mut SoftZuc::default(), ops.clone(), 64);
    let soft_s = t.elapsed().as_secs_f64();
    let mut setup = Setup::open(a, ServiceAccel::Zuc)?;
    if let Some(path) = &a.pcap {
        setup.capture(path)?;
    }
    let client = setup.connect(ClientConfig {
        depth: 64,
        max_message: MAX_MESSAGE,
        ..Default::default()
    })?;
    let mut dev = ZucRdma::new(client);
    let t = Instant::now();
    let hard = run_ops(&mut dev, ops, a.burst().min(64));
    let hard_s = t.elapsed().as_secs_f64();
    let stray = dev.stray;
    let mut counters = setup.client_counters(dev.client())?;
    drop(dev);
    setup.stop_capture();
    let setup_name = setup.describe();
    let report = setup.finish()?;
    if let Some(r) = &report {
        counters.merge(service_counters(r));
    }
    let mismatches = super::demo::zuc_mismatches(&soft, &hard);
    let done = hard.len();
    let ok = mismatches == 0 && done as u64 == a.packets && stray == 0;
    let n = done as f64;
    let gbps = |secs: f64| n * bytes as f64 * 8.0 / secs.max(1e-9) / 1e9;
    if a.json {
        println!(
            "{}",
            json!({ "accel": "zuc", "interface": "fld-r", "operations": done, "data_bytes_per_op": bytes, "mismatches": mismatches, "stray_responses": stray, "accelerator_mops": n / hard_s.max(1e-9) / 1e6, "accelerator_gbps": gbps(hard_s), "software_mops": n / soft_s.max(1e-9) / 1e6, "software_gbps": gbps(soft_s), "card_counters": counters.json(), "verified": ok })
        );
        return Ok(exit_code(ok));
    }
    println!("fldemu demo: cryptodev client -> RDMA SEND -> NIC -> FLD-R -> ZUC accelerator (8 units) -> RDMA SEND back, against software ZUC");
    println!("  machines        {setup_name}");
    println!(
        "  operations      {} of {} data bytes (2/3 EEA3, 1/3 EIA3), {} request packets each at the 1 KiB path MTU",
        done,
        bytes,
        (64 + bytes).div_ceil(1024)
    );
    super::demo::print_zuc_rates(done, bytes, hard_s, soft_s);
    if let Some(r) = &report {
        print_service_report(r);
    }
    print_rdma_extras(a, &counters);
    println!(
        "  result          {} ({} mismatches, {} stray responses)",
        verdict(ok),
        mismatches,
        stray
    );
    Ok(exit_code(ok))
}

/// The lines an RDMA demo's options add: the capture's path, the counters.
fn print_rdma_extras(a: &DemoArgs, counters: &CardCounters) {
    if let Some(p) = &a.pcap {
        println!("  capture         {}", p.display());
    }
    if a.stats {
        counters.print();
    }
}

/// A message of `len` bytes that names its number.
pub fn pattern(n: u64, len: usize) -> impl Iterator<Item = u8> {
    (0..len).map(move |k| (k as u64).wrapping_mul(131).wrapping_add(n.wrapping_mul(7)) as u8)
}

/// Echo measurement: `count` messages of `len` bytes with `window` outstanding; every echo
/// checked. Returns (seconds, mismatches).
pub fn echo_run(
    c: &mut FldrClient,
    len: usize,
    count: u64,
    window: u64,
    timeout: Duration,
) -> Result<(f64, u64), Box<dyn std::error::Error>> {
    let mut msg = vec![0u8; len];
    let (mut sent, mut back, mut bad) = (0u64, 0u64, 0u64);
    let t = Instant::now();
    while back < count {
        while sent < count && sent - back < window {
            msg.iter_mut()
                .zip(pattern(sent, len))
                .for_each(|(b, p)| *b = p);
            if !c.send(&msg, None)? {
                break;
            }
            sent += 1;
        }
        let want = back;
        if let Some(ok) =
            c.recv(|m, _| m.len() == len && m.iter().copied().eq(pattern(want, len)))?
        {
            bad += !ok as u64;
            back += 1;
        } else if t.elapsed() > timeout {
            return Err(format!("{back} of {count} echoes after {timeout:?}").into());
        }
    }
    Ok((t.elapsed().as_secs_f64(), bad))
}

/// Messages through the FLD-R echo accelerator, every echo checked.
fn echo_rdma_demo(a: &DemoArgs) -> CmdResult {
    let len = a.size.unwrap_or(1024) as usize;
    let mut setup = Setup::open(a, ServiceAccel::Echo)?;
    if let Some(path) = &a.pcap {
        setup.capture(path)?;
    }
    let mut c = setup.connect(ClientConfig {
        depth: 64,
        max_message: MAX_MESSAGE,
        ..Default::default()
    })?;
    let (secs, bad) = echo_run(&mut c, len, a.packets, 32, Duration::from_secs(120))?;
    let mut counters = setup.client_counters(&c)?;
    drop(c);
    setup.stop_capture();
    let setup_name = setup.describe();
    let report = setup.finish()?;
    if let Some(r) = &report {
        counters.merge(service_counters(r));
    }
    let ok = bad == 0;
    let rate = a.packets as f64 / secs.max(1e-9);
    if a.json {
        println!(
            "{}",
            json!({ "accel": "echo", "interface": "fld-r", "messages": a.packets, "message_bytes": len, "mismatches": bad, "messages_per_s": rate, "gbps": rate * len as f64 * 8.0 / 1e9, "card_counters": counters.json(), "verified": ok })
        );
        return Ok(exit_code(ok));
    }
    println!("fldemu demo: verbs client -> RDMA SEND -> NIC -> FLD-R -> echo accelerator -> RDMA SEND back");
    println!("  machines        {setup_name}");
    println!("  messages        {} of {} bytes", a.packets, len);
    println!(
        "  rate            {:.3} M messages/s, {:.3} Gbit/s",
        rate / 1e6,
        rate * len as f64 * 8.0 / 1e9
    );
    if let Some(r) = &report {
        print_service_report(r);
    }
    print_rdma_extras(a, &counters);
    println!("  result          {} ({} mismatches)", verdict(ok), bad);
    Ok(exit_code(ok))
}

#[derive(clap::Args)]
pub struct BenchFldrArgs {
    /// Messages per echo measurement (fewer for large messages: at most 64 MiB each; at least
    /// 500).
    #[arg(long, default_value_t = 20_000)]
    pub messages: u64,
    /// ZUC operations per request size.
    #[arg(long, default_value_t = 4_000)]
    pub operations: usize,
    /// Messages per offered-load point of the latency curve.
    #[arg(long, default_value_t = 4_000)]
    pub latency_messages: u64,
    #[arg(long)]
    pub json: bool,
    /// Also draw the three figures as SVG files in this directory.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Print the cards' counters after the figures, per set-up (local echo, remote echo,
    /// ZUC): the client's port and queue pair, the service's port, FLD's statistics and the
    /// accelerator's. `--json` always carries them (`card_counters`).
    #[arg(long)]
    pub stats: bool,
}

/// A set-up's counters once its service stopped: the client's (`client` connected through
/// `machine`) and the service's (`report`).
fn setup_counters(
    machine: &mut ClientMachine,
    client: &FldrClient,
    report: &ServiceReport,
) -> Result<CardCounters, Box<dyn std::error::Error>> {
    let mut c = CardCounters::default();
    c.add("client port", machine.ctx.port_counters()?);
    c.add("client qp", client.qp_counters(&mut machine.ctx)?);
    c.merge(service_counters(report));
    Ok(c)
}

/// Message sizes of the throughput figure (FLD-E at those that are Ethernet frames).
const FIG7B_SIZES: [usize; 6] = [64, 256, 1024, 4096, 8192, 16384];

/// One row of Figure 7b's right column.
#[derive(serde::Serialize)]
struct EchoRow {
    size: usize,
    fldr_local_gbps: f64,
    fldr_remote_gbps: f64,
    fldr_remote_mmsgs: f64,
    /// The FLD-E echo accelerator at the same size (frames up to 9000 bytes).
    flde_gbps: Option<f64>,
    fldr_over_flde: Option<f64>,
}

/// One point of Figure 7c.
#[derive(serde::Serialize)]
struct LatencyPoint {
    offered_fraction: f64,
    offered_kmsgs: f64,
    achieved_kmsgs: f64,
    median_us: f64,
    p99_us: f64,
}

/// One row of Figure 8a.
#[derive(serde::Serialize)]
struct ZucRow {
    data_bytes: u32,
    fldr_gbps: f64,
    software_gbps: f64,
    fldr_over_software: f64,
    /// The model's bound at 25 GbE (RoCE and application headers counted), data Gbit/s.
    model_bound_25g_gbps: f64,
    mismatches: u64,
}

fn connect_echo(
    s: &mut (Service, ClientMachine),
) -> Result<FldrClient, Box<dyn std::error::Error>> {
    let addr = s.0.addr;
    Ok(s.1.connect(
        addr,
        ClientConfig {
            depth: 64,
            max_message: MAX_MESSAGE,
            ..Default::default()
        },
    )?)
}

/// Messages of `size` bytes a client keeps outstanding so that they fit half of FLD's receive
/// buffer (Table 2a geometry, 256-byte strides, one packet per path MTU of 1 KiB): FLD has no
/// backpressure (§5.5), so more would only meet RNR NAKs and wait out the RNR timer.
pub fn fld_safe_window(size: usize) -> u64 {
    let geo = fld_device::fld::memory_model::geometry(
        &fld_device::fld::memory_model::MemoryParams::table_2a(),
    );
    let packets = size.div_ceil(1024).max(1);
    let last = size - (packets - 1) * 1024;
    let bytes = ((packets - 1) * 1024 + last.div_ceil(256).max(1) * 256) as u64;
    (u64::from(geo.rx_buffer) / 2 / bytes).clamp(1, 32)
}

/// Echo rate (Gbit/s of message data, each way) at `size`, after a warm-up.
fn echo_gbps(c: &mut FldrClient, size: usize, messages: u64) -> Result<(f64, f64), String> {
    let count = messages.min((64 << 20) / size as u64).max(500);
    let window = fld_safe_window(size);
    let e = |e: Box<dyn std::error::Error>| e.to_string();
    echo_run(c, size, count / 10 + 1, window, Duration::from_secs(60)).map_err(e)?;
    let (secs, bad) = echo_run(c, size, count, window, Duration::from_secs(120)).map_err(e)?;
    if bad > 0 {
        return Err(format!("{bad} echoes of {size} bytes came back changed"));
    }
    let rate = count as f64 / secs;
    Ok((rate * size as f64 * 8.0 / 1e9, rate / 1e6))
}

/// The FLD-E echo accelerator at `size` (Gbit/s of frame data), measured as `fldemu bench` does.
fn flde_gbps(size: usize, packets: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let mut echo = Echoer::new(AccelArg::Echo, STRIDING, size)?;
    let window = echo.window(size);
    let cfg = fld_host::apps::EchoConfig {
        packets,
        sizes: fld_host::apps::Sizes::Fixed(size),
        window,
        ..Default::default()
    };
    echo.run(&fld_host::apps::EchoConfig {
        packets: packets / 10 + 1,
        ..cfg.clone()
    });
    let r = echo.run(&cfg);
    if r.mismatches != 0 || r.packets_received != packets {
        return Err(format!("FLD-E echo at {size} bytes did not verify").into());
    }
    Ok(r.gbps())
}

/// Latency of 1 KiB echoes while offering `rate` messages per second: each message carries its
/// send instant; the curve's points are medians and 99th percentiles of the round trip.
fn latency_at(
    c: &mut FldrClient,
    rate: f64,
    count: u64,
) -> Result<LatencyPoint, Box<dyn std::error::Error>> {
    const SIZE: usize = 1024;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let msg = vec![0x5au8; SIZE];
    let mut sent_at: std::collections::VecDeque<Instant> = Default::default();
    let mut rtts = Vec::with_capacity(count as usize);
    let start = Instant::now();
    let mut next = start;
    let (mut sent, mut back) = (0u64, 0u64);
    let deadline = start + Duration::from_secs(60) + interval * count as u32;
    while back < count {
        let now = Instant::now();
        // Open loop: messages leave on schedule while the client has room for them.
        if sent < count && now >= next && c.send_room() > 0 && c.send(&msg, None)? {
            sent_at.push_back(now);
            sent += 1;
            next += interval;
        }
        if c.recv(|m, _| m.len())?.is_some() {
            let t0 = sent_at.pop_front().ok_or("an echo nobody sent")?;
            rtts.push(t0.elapsed());
            back += 1;
        }
        if Instant::now() > deadline {
            return Err(format!("{back} of {count} echoes at {rate:.0}/s").into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    rtts.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok(LatencyPoint {
        offered_fraction: 0.0,
        offered_kmsgs: rate / 1e3,
        achieved_kmsgs: count as f64 / secs / 1e3,
        median_us: us(rtts[rtts.len() / 2]),
        p99_us: us(rtts[rtts.len() * 99 / 100]),
    })
}

/// The three figures as SVG, the paper's quoted values as points beside ours.
fn plot_figures(
    dir: &std::path::Path,
    echo: &[EchoRow],
    curve: &[LatencyPoint],
    zuc: &[ZucRow],
) -> Result<(), Box<dyn std::error::Error>> {
    use fld_qemu::plot::{Chart, Series};
    std::fs::create_dir_all(dir)?;
    let line = |name, points| Series {
        name,
        points,
        points_only: false,
    };
    Chart {
        title: "Figure 7b (right): FLD-R echo throughput",
        x_label: "message bytes",
        y_label: "Gbit/s each way",
        log2_x: true,
        series: vec![
            line(
                "FLD-R remote (emulator)",
                echo.iter()
                    .map(|r| (r.size as f64, r.fldr_remote_gbps))
                    .collect(),
            ),
            line(
                "FLD-R local (emulator)",
                echo.iter()
                    .map(|r| (r.size as f64, r.fldr_local_gbps))
                    .collect(),
            ),
            line(
                "FLD-E (emulator)",
                echo.iter()
                    .filter_map(|r| r.flde_gbps.map(|g| (r.size as f64, g)))
                    .collect(),
            ),
            Series {
                name: "paper: FLD-R remote at 25 GbE line rate (> 512 B)",
                points: echo
                    .iter()
                    .filter(|r| r.size > 512)
                    .map(|r| (r.size as f64, 25.0))
                    .collect(),
                points_only: true,
            },
        ],
    }
    .write(&dir.join("fig7b-fldr.svg"))?;
    Chart {
        title: "Figure 7c: 1 KiB FLD-R echo round trip against load",
        x_label: "achieved k messages/s",
        y_label: "median round trip (us)",
        log2_x: false,
        series: vec![
            line(
                "FLD-R remote (emulator)",
                curve
                    .iter()
                    .map(|p| (p.achieved_kmsgs, p.median_us))
                    .collect(),
            ),
            Series {
                name: "paper: remote median at low load (10.6 us)",
                points: curve
                    .first()
                    .map(|p| vec![(p.achieved_kmsgs, 10.6)])
                    .unwrap_or_default(),
                points_only: true,
            },
        ],
    }
    .write(&dir.join("fig7c-fldr-latency.svg"))?;
    Chart {
        title: "Figure 8a: disaggregated ZUC over FLD-R",
        x_label: "request data bytes",
        y_label: "data Gbit/s",
        log2_x: true,
        series: vec![
            line(
                "FLD-R ZUC (emulator)",
                zuc.iter()
                    .map(|r| (r.data_bytes as f64, r.fldr_gbps))
                    .collect(),
            ),
            line(
                "software ZUC (same run)",
                zuc.iter()
                    .map(|r| (r.data_bytes as f64, r.software_gbps))
                    .collect(),
            ),
            line(
                "model bound, 25 GbE",
                zuc.iter()
                    .map(|r| (r.data_bytes as f64, r.model_bound_25g_gbps))
                    .collect(),
            ),
            Series {
                name: "paper: FLD-R 17.6 Gbit/s (>= 512 B)",
                points: zuc
                    .iter()
                    .filter(|r| r.data_bytes >= 512)
                    .map(|r| (r.data_bytes as f64, 17.6))
                    .collect(),
                points_only: true,
            },
        ],
    }
    .write(&dir.join("fig8a-zuc.svg"))?;
    Ok(())
}

/// Figure 7c's curve: 1 KiB echo latency at fractions of the remote echo's peak rate.
struct LatencyCurve {
    /// The remote echo's 1 KiB rate the offered loads are fractions of, M messages/s.
    peak_mmsgs: f64,
    points: Vec<LatencyPoint>,
    /// The first offered fraction the echo fell short of (achieved below 95% of offered).
    saturation: Option<f64>,
}

/// `fldemu bench-fldr`.
pub fn run_bench(a: BenchFldrArgs) -> CmdResult {
    // Figure 7b, right column: FLD-R echo, local (client on the same NIC) and remote (client on
    // a second machine), beside FLD-E in the same run. One set-up runs at a time, so the
    // machines of another do not take the two cores.
    let mut counters = CardCounters::default();
    let local_gbps = local_echo_gbps(a.messages, &mut counters)?;
    let mut remote = two_machines(ServiceAccel::Echo, 2)?;
    let mut rc = connect_echo(&mut remote)?;
    let mut echo_rows = remote_echo_rows(&mut rc, a.messages, local_gbps)?;
    let latency = latency_curve(&mut rc, a.messages, a.latency_messages)?;
    let (service, mut machine) = remote;
    let report = service.stop()?;
    counters.append("remote echo:", setup_counters(&mut machine, &rc, &report)?);
    drop(rc);
    add_flde_rates(&mut echo_rows, a.messages)?;
    // Figure 8a: disaggregated ZUC over request sizes against software ZUC, and the bound.
    let mut zuc = two_machines(ServiceAccel::Zuc, 2)?;
    let addr = zuc.0.addr;
    let client = zuc.1.connect(
        addr,
        ClientConfig {
            depth: 64,
            max_message: MAX_MESSAGE,
            ..Default::default()
        },
    )?;
    let mut dev = ZucRdma::new(client);
    let zuc_rows = measure_zuc_rows(&mut dev, a.operations);
    let (service, mut machine) = zuc;
    let report = service.stop()?;
    counters.append("zuc:", setup_counters(&mut machine, dev.client(), &report)?);
    drop(dev);
    let ok = zuc_rows.iter().all(|r| r.mismatches == 0);
    if let Some(dir) = &a.plot {
        plot_figures(dir, &echo_rows, &latency.points, &zuc_rows)?;
    }
    if a.json {
        print_bench_json(&echo_rows, &latency, &zuc_rows, &counters, ok);
        return Ok(exit_code(ok));
    }
    print_bench_tables(&echo_rows, &latency, &zuc_rows);
    if a.stats {
        counters.print();
    }
    println!("  result          {}", verdict(ok));
    Ok(exit_code(ok))
}

/// FLD-R echo rates with the client on the service's own NIC, one per Figure 7b size; the
/// set-up's counters go to `counters` once it stopped.
fn local_echo_gbps(
    messages: u64,
    counters: &mut CardCounters,
) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let mut local_gbps = Vec::new();
    let mut local = fld_qemu::testbed::fldr::one_machine(ServiceAccel::Echo, 2)?;
    let mut lc = connect_echo(&mut local)?;
    for size in FIG7B_SIZES {
        local_gbps.push(echo_gbps(&mut lc, size, messages)?.0);
    }
    let (service, mut machine) = local;
    let report = service.stop()?;
    counters.append("local echo:", setup_counters(&mut machine, &lc, &report)?);
    Ok(local_gbps)
}

/// Figure 7b's rows: the remote FLD-R echo on `rc` at each size beside the local rates
/// measured before (FLD-E's come later).
fn remote_echo_rows(
    rc: &mut FldrClient,
    messages: u64,
    local_gbps: Vec<f64>,
) -> Result<Vec<EchoRow>, String> {
    let mut echo_rows = Vec::new();
    for (size, local) in FIG7B_SIZES.into_iter().zip(local_gbps) {
        let (remote_gbps, remote_mmsgs) = echo_gbps(rc, size, messages)?;
        echo_rows.push(EchoRow {
            size,
            fldr_local_gbps: local,
            fldr_remote_gbps: remote_gbps,
            fldr_remote_mmsgs: remote_mmsgs,
            flde_gbps: None,
            fldr_over_flde: None,
        });
    }
    Ok(echo_rows)
}

/// Figure 7c: 1 KiB latency against offered load, as fractions of the remote echo's
/// throughput measured just now.
fn latency_curve(
    rc: &mut FldrClient,
    messages: u64,
    latency_messages: u64,
) -> Result<LatencyCurve, Box<dyn std::error::Error>> {
    let (_, peak_mmsgs) = echo_gbps(rc, 1024, messages)?;
    let mut points = Vec::new();
    for f in [0.05, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0] {
        let mut p = latency_at(rc, f * peak_mmsgs * 1e6, latency_messages)?;
        p.offered_fraction = f;
        points.push(p);
    }
    let saturation = points
        .iter()
        .find(|p| p.achieved_kmsgs < 0.95 * p.offered_kmsgs)
        .map(|p| p.offered_fraction);
    Ok(LatencyCurve {
        peak_mmsgs,
        points,
        saturation,
    })
}

/// FLD-E's echo rate beside FLD-R's in each row whose size is an Ethernet frame.
fn add_flde_rates(
    echo_rows: &mut [EchoRow],
    messages: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    for r in echo_rows {
        if r.size <= fld_host::apps::MAX_FRAME {
            let packets = messages.min((64 << 20) / r.size as u64).max(500);
            let g = flde_gbps(r.size, packets)?;
            r.flde_gbps = Some(g);
            r.fldr_over_flde = Some(r.fldr_remote_gbps / g.max(1e-9));
        }
    }
    Ok(())
}

/// Figure 8a's rows: `operations` ZUC operations per request size on `dev` and in software,
/// each result compared, beside the model's bound.
fn measure_zuc_rows(dev: &mut ZucRdma, operations: usize) -> Vec<ZucRow> {
    let mut zuc_rows = Vec::new();
    for data in fld_device::fld::perf_model::FIGURE8A_SIZES {
        let ops = sample_ops(operations, data as usize, false, u64::from(data));
        run_ops(dev, ops[..ops.len() / 10].to_vec(), 64);
        let t = Instant::now();
        let soft = run_ops(&mut SoftZuc::default(), ops.clone(), 64);
        let soft_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let hard = run_ops(dev, ops, 64);
        let hard_s = t.elapsed().as_secs_f64();
        let bits = operations as f64 * data as f64 * 8.0;
        // Two thirds of the operations are EEA3 (responses carry the data), a third EIA3.
        let bound_ops = super::model::zuc_mix_bound(data, 25.0);
        zuc_rows.push(ZucRow {
            data_bytes: data,
            fldr_gbps: bits / hard_s / 1e9,
            software_gbps: bits / soft_s / 1e9,
            fldr_over_software: soft_s / hard_s,
            model_bound_25g_gbps: bound_ops * data as f64 * 8.0 / 1e9,
            mismatches: super::demo::zuc_mismatches(&soft, &hard),
        });
    }
    zuc_rows
}

/// `--json`: the three figures, the paper's claims, the cards' counters and the verdict.
fn print_bench_json(
    echo_rows: &[EchoRow],
    latency: &LatencyCurve,
    zuc_rows: &[ZucRow],
    counters: &CardCounters,
    ok: bool,
) {
    println!(
        "{}",
        json!({
            "figure_7b_fldr_echo": echo_rows,
            "figure_7c_latency_1k": { "peak_mmsgs": latency.peak_mmsgs, "saturates_at_fraction": latency.saturation, "points": latency.points },
            "figure_8a_zuc": zuc_rows,
            "paper": {
                "figure_7b": "FLD-R remote reaches the 25 Gbit/s line rate for messages above 512 B; local FLD-R is below FLD-E",
                "figure_7c": "1 KiB median latency at low load 9.4 us local, 10.6 us remote; saturates near 82% of the expected bandwidth",
                "figure_8a": "from 512 B requests 17.6 Gbit/s, 89% of the model's bound and 4x software ZUC"
            },
            "card_counters": counters.json(),
            "verified": ok,
        })
    );
}

/// The three figures as tables, each with the paper's values under it.
fn print_bench_tables(echo_rows: &[EchoRow], latency: &LatencyCurve, zuc_rows: &[ZucRow]) {
    println!("fldemu bench-fldr: FLD-R figures from the running model (one process, wall clock; the paper's are FPGA and ASIC hardware)");
    println!();
    println!("Figure 7b, right column: FLD-R echo throughput (Gbit/s of message data each way); FLD-E echo in the same run");
    println!(
        "{:>7} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "size", "FLD-R local", "FLD-R remote", "remote Mmsg", "FLD-E", "R/E"
    );
    for r in echo_rows {
        println!(
            "{:>7} {:>12.3} {:>12.3} {:>12.3} {:>10} {:>10}",
            r.size,
            r.fldr_local_gbps,
            r.fldr_remote_gbps,
            r.fldr_remote_mmsgs,
            r.flde_gbps.map_or("-".into(), |g| format!("{g:.3}")),
            r.fldr_over_flde.map_or("-".into(), |x| format!("{x:.2}")),
        );
    }
    println!(
        "  paper: remote FLD-R at the 25 Gbit/s line rate above 512 B; local FLD-R below FLD-E"
    );
    println!();
    println!(
        "Figure 7c: 1 KiB echo round trip against offered load (remote; peak {:.3} M msg/s)",
        latency.peak_mmsgs
    );
    println!(
        "{:>8} {:>12} {:>12} {:>10} {:>10}",
        "offered", "offered k/s", "achieved k/s", "median us", "p99 us"
    );
    for p in &latency.points {
        println!(
            "{:>7.0}% {:>12.1} {:>12.1} {:>10.1} {:>10.1}",
            100.0 * p.offered_fraction,
            p.offered_kmsgs,
            p.achieved_kmsgs,
            p.median_us,
            p.p99_us
        );
    }
    match latency.saturation {
        Some(f) => println!("  saturates at {:.0}% of the measured peak", 100.0 * f),
        None => println!("  no saturation up to 300% of the measured peak"),
    }
    println!("  paper: median 9.4 us local, 10.6 us remote at low load; saturation near 82% of the expected bandwidth");
    println!();
    println!("Figure 8a: disaggregated ZUC over FLD-R against software ZUC (data Gbit/s), and the model's bound at 25 GbE");
    println!(
        "{:>7} {:>10} {:>10} {:>8} {:>12} {:>6}",
        "bytes", "FLD-R", "software", "ratio", "bound 25G", "bad"
    );
    for r in zuc_rows {
        println!(
            "{:>7} {:>10.3} {:>10.3} {:>8.2} {:>12.2} {:>6}",
            r.data_bytes,
            r.fldr_gbps,
            r.software_gbps,
            r.fldr_over_software,
            r.model_bound_25g_gbps,
            r.mismatches
        );
    }
    println!("  paper: from 512 B 17.6 Gbit/s, 89% of the bound, 4x software ZUC");
}
