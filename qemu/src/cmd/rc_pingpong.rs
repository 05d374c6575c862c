//! `fldemu rc-pingpong`: rdma-core's `ibv_rc_pingpong` on the emulated card (see
//! `fld_qemu::pingpong`), with the real tool's options; either end may be the real tool.
//!
//! The card runs in this process with its uplink on `--link` (a UDP link — QEMU's
//! `-netdev dgram` — or a TAP interface), or is reached through `--transport vfio-user|vfio`
//! (a card `fldemu serve --link …` runs, or the one a guest's QEMU attaches).

use std::process::ExitCode;
use std::sync::Arc;

use fld_device::card::Card;
use fld_device::wire::Faults;
use fld_driver::PciDevice;
use fld_host::verbs::Context;
use fld_qemu::pingpong::{self, PingpongConfig};
use serde_json::json;

use super::{CardCounters, CmdResult, TransportArg, REMOTE_DMA_BYTES};

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("faults").multiple(true))]
pub struct RcPingpongArgs {
    /// Connect to the server on this host; without it, wait for a client.
    pub server: Option<String>,
    /// TCP port of the address exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Device name: accepted for compatibility with ibv_rc_pingpong and ignored (the tool
    /// uses NIC function 0's RDMA device).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the device (1, the only one).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Bytes of each message.
    #[arg(short = 's', long, default_value_t = 4096)]
    pub size: usize,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u64,
    /// Service level: accepted for compatibility with ibv_rc_pingpong and ignored (no
    /// meaning on RoCE).
    #[arg(short = 'l', long)]
    pub sl: Option<u8>,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long)]
    pub events: bool,
    /// A StaR connection (`docs/nic-interface.md` §16): the server's NIC keeps no state for
    /// it. Both ends must be fldemu and both must say so (the real tool's exchange cannot
    /// carry the server's offer).
    #[arg(long)]
    pub stateless: bool,
    /// GID index of the local port.
    #[arg(short = 'g', long = "gid-idx", default_value_t = 0)]
    pub gid_idx: usize,
    /// The card's IP address (its RoCEv2 GID at index 0 and the address it answers ARP for).
    #[arg(long, default_value = "192.168.77.1")]
    pub ip: std::net::IpAddr,
    /// The in-process card's uplink: `udp:LOCAL_PORT:HOST:PORT` or `tap:NAME`. Needed with
    /// `--transport in-process`, refused with the others (the server's card has its uplink).
    #[arg(long)]
    pub link: Option<String>,
    /// Write every frame of the uplink (both directions) to this pcap file. With the
    /// in-process card only.
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
    /// Seeded faults on what the in-process card sends on its uplink: probability of loss
    /// (default 0).
    #[arg(long, group = "faults")]
    pub loss: Option<f64>,
    /// … of duplication (default 0).
    #[arg(long, group = "faults")]
    pub duplicate: Option<f64>,
    /// … of reordering (a frame overtaken by up to 4 later ones; default 0).
    #[arg(long, group = "faults")]
    pub reorder: Option<f64>,
    /// Seed of the faults (default 1); with `--loss`, `--duplicate` or `--reorder`.
    #[arg(long, requires = "faults")]
    pub seed: Option<u64>,
    /// A static neighbour `IP=MAC` instead of ARP (repeatable).
    #[arg(long)]
    pub neigh: Vec<String>,
    /// How the driver reaches the card.
    #[arg(long, value_enum, default_value_t = TransportArg::InProcess)]
    pub transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets (default
    /// fldemu-sockets).
    #[arg(long)]
    pub socket_dir: Option<std::path::PathBuf>,
    /// Seconds any wait (the peer, a completion) may take.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Print one JSON object after the tool's lines.
    #[arg(long)]
    pub json: bool,
    /// After the run (also a failed one), print the card's counters: the QP's retransmissions,
    /// NAKs and drops, the port's RoCE drops by reason (ICRC, unknown QP, P_Key, malformed, QP
    /// not ready, wrong source) and its Ethernet drops.
    #[arg(long)]
    pub stats: bool,
}

/// `IP=MAC` as a neighbour entry.
fn neighbour(s: &str) -> Result<([u8; 4], [u8; 6]), String> {
    let (ip, mac) = s
        .split_once('=')
        .ok_or_else(|| format!("{s}: expected IP=MAC"))?;
    let ip: std::net::Ipv4Addr = ip
        .parse()
        .map_err(|_| format!("{ip}: not an IPv4 address"))?;
    let bytes: Vec<u8> = mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{mac}: not a MAC address"))?;
    let mac: [u8; 6] = bytes
        .try_into()
        .map_err(|_| format!("{mac}: not a MAC address"))?;
    Ok((ip.octets(), mac))
}

/// Refuses the options that only the in-process card honours when the card is elsewhere.
fn check(a: &RcPingpongArgs) -> Result<(), String> {
    if a.transport == TransportArg::InProcess {
        return Ok(());
    }
    let in_process_only = [
        ("--link", a.link.is_some()),
        ("--pcap", a.pcap.is_some()),
        ("--loss", a.loss.is_some()),
        ("--duplicate", a.duplicate.is_some()),
        ("--reorder", a.reorder.is_some()),
    ];
    match in_process_only.iter().find(|(_, given)| *given) {
        Some((name, _)) => Err(format!(
            "{name} needs the in-process card; with {} the card and its uplink are the server's (`fldemu serve`)",
            a.transport.flag()
        )),
        None => Ok(()),
    }
}

pub fn run(a: RcPingpongArgs) -> CmdResult {
    if a.ib_port != 1 {
        return Err("the device has port 1 only".into());
    }
    check(&a)?;
    let socket_dir = a.transport.socket_dir(a.socket_dir.as_deref())?;
    // The card (in-process, its uplink on the link) or the remote card's NIC function 0.
    let (dev, _keep): (Arc<dyn PciDevice>, Box<dyn std::any::Any>) =
        match a.transport.remote(&socket_dir) {
            None => {
                let link = a.link.as_deref().ok_or(
                    "an in-process card needs --link udp:LOCAL_PORT:HOST:PORT or tap:NAME",
                )?;
                let faults = Faults {
                    loss: a.loss.unwrap_or(0.0),
                    duplicate: a.duplicate.unwrap_or(0.0),
                    reorder: a.reorder.unwrap_or(0.0),
                    reorder_depth: 4,
                    seed: a.seed.unwrap_or(1),
                    ..Default::default()
                };
                fld_qemu::testbed::card_on_link(link, a.ip, faults, a.pcap.as_deref())?
            }
            Some(t) => {
                let card = t.open(REMOTE_DMA_BYTES)?;
                let [nic0, _] = card.nic;
                (nic0, card.transport)
            }
        };
    let mut ctx = Context::open(dev)?;
    ctx.add_ip(a.ip)?;
    for n in &a.neigh {
        let (ip, mac) = neighbour(n)?;
        ctx.add_neighbor(ip, mac);
    }
    let cfg = PingpongConfig {
        server: a.server.clone(),
        port: a.port,
        size: a.size,
        iters: a.iters,
        mtu: a.mtu,
        rx_depth: a.rx_depth,
        gid_index: a.gid_idx,
        events: a.events,
        stateless: a.stateless,
        timeout: std::time::Duration::from_secs(a.timeout),
    };
    let run = pingpong::run(&mut ctx, &cfg, &mut std::io::stdout());
    let mut counters = CardCounters::default();
    counters.add("qp", run.qp_counters);
    counters.add("port", ctx.port_counters()?);
    drop(ctx);
    // The capture is complete once the tap is dropped (its writer flushed).
    if let Some((card, _)) =
        _keep.downcast_ref::<(Arc<Card>, Arc<fld_driver::inprocess::InProcessHost>)>()
    {
        card.nic.set_tap(None);
    }
    if a.stats {
        counters.print();
    }
    let report = run.result?;
    if a.json {
        println!(
            "{}",
            json!({
                "local_qpn": report.local.qpn, "remote_qpn": report.remote.qpn,
                "local_psn": report.local.psn, "remote_psn": report.remote.psn,
                "size": a.size, "iters": report.iters, "bytes": report.bytes,
                "seconds": report.seconds, "mbit_per_s": report.mbit_per_s(),
                "usec_per_iter": report.usec_per_iter(),
                "completion_events": report.completion_events,
                "card_counters": counters.json(),
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}
