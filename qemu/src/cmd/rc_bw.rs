//! `fldemu rc-bw` and `fldemu rc-lat`: RDMA WRITE, READ and SEND throughput and message rate,
//! and SEND latency, between two in-process cards joined by a cable (perftest's
//! `ib_{write,read,send}_bw` and `ib_send_lat` in spirit), beside the Ethernet CPU echo path
//! measured in the same run. With `--link`, `rc-bw` is one of two processes instead — each
//! with its own card on the link, a server and a client (`fld_qemu::rdma_peer`).

use fld_host::apps::{EchoConfig, Sizes};
use fld_qemu::testbed::rdma::{BwOp, BwResult, RdmaPair};
use serde_json::json;

use super::*;

#[derive(clap::Args)]
pub struct RcBwArgs {
    /// Operations to measure (write, read, send; default all three). A client's: a server
    /// (`--link` without a server address) refuses it.
    #[arg(long, value_delimiter = ',', value_parser = bw_op)]
    pub ops: Option<Vec<BwOp>>,
    /// Smallest message, default 64 (every doubling up to `--size-max`). A client's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub size_min: Option<u64>,
    /// Largest message; a server's registered buffer is twice this (at least 16 KiB).
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1..))]
    pub size_max: u64,
    /// Bytes moved per measurement, default 64 MiB (at least 2,000 and at most 200,000
    /// messages). A client's.
    #[arg(long)]
    pub bytes: Option<u64>,
    /// Path MTU in bytes.
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Print one JSON object instead of the table (a server: its counters).
    #[arg(long)]
    pub json: bool,
    /// Two processes: connect to the `rc-bw` server on this host (without it, with `--link`,
    /// be the server).
    #[arg(requires = "link")]
    pub server: Option<String>,
    /// Two processes: this card's uplink, `udp:LOCAL_PORT:HOST:PORT` or `tap:NAME`.
    #[arg(long)]
    pub link: Option<String>,
    /// With `--link`: this card's IP address (its GID, answered by ARP; default 192.168.78.1).
    #[arg(long, requires = "link")]
    pub ip: Option<std::net::IpAddr>,
    /// With `--link`: TCP port of the control connection (default 18516).
    #[arg(short = 'p', long, requires = "link")]
    pub port: Option<u16>,
    /// With `--link`: seconds any wait may take (default 60).
    #[arg(long, requires = "link")]
    pub timeout: Option<u64>,
    /// With `--link`: a StaR connection (`docs/nic-interface.md` §16) — the server's NIC keeps
    /// no state for it, the client's NIC runs both ends' transport. Both ends must say so.
    #[arg(long, requires = "link")]
    pub stateless: bool,
    /// With `--link`: uRDMA's unload path — WRITEs small enough for a staging slot (up to 248
    /// bytes) go as WRITE WITH IMMEDIATE into the server's staging buffer and its CPU places
    /// them (`fld_host::verbs::unload`); larger ones stay offloaded. WRITE only (the staging
    /// slots hold the receive queue). Both ends must say so.
    #[arg(long, requires = "link", conflicts_with = "stateless")]
    pub unload: bool,
    /// With `--link`: how this card's RC responders treat a packet ahead of the PSN they
    /// expect — `gbn` (IBA's go-back-N) or a reorder unit (`irn`, `melo+`, `left-`, `left`,
    /// `ideal`; LEFT §3: single-packet WRITEs are placed and recorded, not NAKed).
    #[arg(long, requires = "link", default_value = "gbn")]
    pub receiver: String,
    /// With `--link`: the fraction of this card's outgoing frames held back behind up to 8
    /// later ones (the link's fault injection), to exercise a reorder unit.
    #[arg(long, requires = "link")]
    pub reorder: Option<f64>,
    /// Print the cards' counters after the runs: each QP's retransmissions, NAKs and drops,
    /// each port's RoCE drops by reason and Ethernet drops. `--json` always carries them
    /// (`card_counters`).
    #[arg(long)]
    pub stats: bool,
    /// 2: measure each operation and size a second time with card B's engine on a thread of
    /// its own (the second machine on a core of its own; the first card and both applications
    /// on the other), beside the one-core figures. In-process only.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2), conflicts_with = "link")]
    pub threads: u8,
    /// The QPs' local ACK timeout, 4.096 µs × 2^N (perftest's `--qp-timeout`). A run under a
    /// slow tool (valgrind) needs a long one, or the wall-clock timer fires while the peer is
    /// only slow and the requester sends again. With `--link`, this end's QP's.
    #[arg(long, default_value_t = fld_abi::nic::DEFAULT_ACK_TIMEOUT, value_parser = clap::value_parser!(u8).range(1..=31))]
    pub qp_timeout: u8,
}

impl RcBwArgs {
    fn ops(&self) -> Vec<BwOp> {
        let all = if self.unload {
            vec![BwOp::Write]
        } else {
            vec![BwOp::Write, BwOp::Read, BwOp::Send]
        };
        self.ops.clone().unwrap_or(all)
    }

    fn sizes(&self) -> Result<Vec<usize>, String> {
        sizes(self.size_min.unwrap_or(64), self.size_max)
    }

    fn bytes(&self) -> u64 {
        self.bytes.unwrap_or(64 << 20)
    }

    /// Refuses on a server (`--link` without a server address) what only a client chooses.
    fn check_server(&self) -> Result<(), String> {
        let clients_only = [
            ("--ops", self.ops.is_some()),
            ("--size-min", self.size_min.is_some()),
            ("--bytes", self.bytes.is_some()),
        ];
        match clients_only.iter().find(|(_, given)| *given) {
            Some((name, _)) => Err(format!("{name} is the client's choice: the server (`rc-bw --link` without a server address) runs what the client asks")),
            None => Ok(()),
        }
    }
}

#[derive(clap::Args)]
pub struct RcLatArgs {
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    pub size_min: u64,
    /// Largest message (every doubling from `--size-min`).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub size_max: u64,
    /// Round trips per size.
    #[arg(short = 'n', long, default_value_t = 2000)]
    pub iters: u64,
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    #[arg(long)]
    pub json: bool,
    /// Print both cards' counters after the runs (see `rc-bw --stats`). `--json` always
    /// carries them (`card_counters`).
    #[arg(long)]
    pub stats: bool,
    /// The QPs' local ACK timeout, 4.096 µs × 2^N (perftest's `--qp-timeout`).
    #[arg(long, default_value_t = fld_abi::nic::DEFAULT_ACK_TIMEOUT, value_parser = clap::value_parser!(u8).range(1..=31))]
    pub qp_timeout: u8,
}

/// The buffer each end registers: twice the largest message, at least 16 KiB.
fn registered_bytes(size_max: u64) -> usize {
    2 * (size_max as usize).max(8192)
}

/// The two in-process cards of `rc-bw` and `rc-lat`: buffers of [`registered_bytes`], path MTU
/// `mtu` bytes, local ACK timeout exponent `qp_timeout`.
fn in_process_pair(
    size_max: u64,
    mtu: u32,
    qp_timeout: u8,
) -> Result<RdmaPair, Box<dyn std::error::Error>> {
    Ok(RdmaPair::new(
        registered_bytes(size_max),
        mtu_code(mtu)?,
        qp_timeout,
    )?)
}

fn mtu_code(mtu: u32) -> Result<u8, Box<dyn std::error::Error>> {
    Ok(match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        4096 => 5,
        _ => return Err("the path MTU is 256, 512, 1024, 2048 or 4096".into()),
    })
}

/// Every doubling of `min` up to `max`.
fn sizes(min: u64, max: u64) -> Result<Vec<usize>, String> {
    if min > max {
        return Err(format!("--size-min {min} is above --size-max {max}"));
    }
    let mut v = Vec::new();
    let mut s = min as usize;
    while s <= max as usize {
        v.push(s);
        s *= 2;
    }
    Ok(v)
}

/// The Ethernet baseline: CPU echo of 64-byte frames through one card, in Mpps.
fn ethernet_echo_mpps() -> Result<f64, Box<dyn std::error::Error>> {
    let mut echo = Echoer::new(AccelArg::None, STRIDING, 64)?;
    let cfg = EchoConfig {
        packets: 200_000,
        sizes: Sizes::Fixed(64),
        window: 1024,
        ..Default::default()
    };
    let rep = echo.run(&cfg);
    if rep.packets_received != cfg.packets || rep.mismatches != 0 {
        return Err("the Ethernet echo baseline lost or changed frames".into());
    }
    Ok(rep.mpps())
}

/// `--ops`'s parser.
fn bw_op(name: &str) -> Result<BwOp, String> {
    match name {
        "write" => Ok(BwOp::Write),
        "read" => Ok(BwOp::Read),
        "send" => Ok(BwOp::Send),
        other => Err(format!("{other}: write, read or send")),
    }
}

/// Two processes: serve, or run every operation and size against the server.
fn run_bw_remote(a: &RcBwArgs, link: &str) -> CmdResult {
    use fld_qemu::rdma_peer::{Peer, PeerConfig, PeerMode};
    if a.server.is_none() {
        a.check_server()?;
    }
    if a.unload && a.ops().iter().any(|op| *op != BwOp::Write) {
        return Err("--unload moves WRITEs only: its staging slots take the receive queue".into());
    }
    let mode = match (a.stateless, a.unload) {
        (true, _) => PeerMode::Stateless,
        (_, true) => PeerMode::Unload,
        _ => PeerMode::Rc,
    };
    let sizes = a.sizes()?;
    let ip = a.ip.unwrap_or(DEFAULT_RC_BW_IP);
    let (dev, _keep) = fld_qemu::testbed::card_on_link_with(
        link,
        ip,
        fld_device::wire::Faults {
            reorder: a.reorder.unwrap_or(0.0),
            reorder_depth: 8,
            seed: 1,
            ..Default::default()
        },
        None,
        fld_device::nic::reorder::ReceiverMode::from_series(&a.receiver)
            .ok_or("--receiver: gbn, irn, melo+, left-, left or ideal")?,
    )?;
    let mut ctx = fld_host::verbs::Context::open(dev)?;
    ctx.add_ip(ip)?;
    let config = PeerConfig {
        port: a.port.unwrap_or(fld_qemu::rdma_peer::DEFAULT_PORT),
        buf: registered_bytes(a.size_max),
        path_mtu: mtu_code(a.mtu)?,
        mode,
        timeout: std::time::Duration::from_secs(a.timeout.unwrap_or(60)),
        ack_timeout: a.qp_timeout,
    };
    let mut peer = Peer::connect(ctx, a.server.as_deref(), &config)?;
    let mut counters = CardCounters::default();
    if a.server.is_none() {
        let served = peer.serve();
        counters.extend(peer.counters()?);
        if a.json {
            println!(
                "{}",
                json!({
                    "served": served.is_ok(),
                    "unloaded": peer.unloaded(),
                    "card_counters": counters.json(),
                })
            );
        } else if a.stats {
            counters.print();
        }
        served?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    let measured = (|| {
        for op in a.ops() {
            for &size in &sizes {
                let count = (a.bytes() / size as u64).clamp(2_000, 200_000);
                peer.bandwidth(op, size, count / 20 + 1)?;
                rows.push((op, size, peer.bandwidth(op, size, count)?, None));
            }
        }
        peer.quit()
    })();
    counters.extend(peer.counters()?);
    drop(peer);
    if let Err(e) = measured {
        if a.stats {
            counters.print();
        }
        return Err(e.into());
    }
    print_bw(
        a,
        &rows,
        "two fldemu processes, each with its own card, their uplinks on a link",
        None,
        &counters,
    )
}

/// `rc-bw --link`'s address unless `--ip` is given.
const DEFAULT_RC_BW_IP: std::net::IpAddr =
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 78, 1));

pub fn run_bw(a: RcBwArgs) -> CmdResult {
    if let Some(link) = &a.link {
        return run_bw_remote(&a, link);
    }
    let sizes = a.sizes()?;
    let mut pair = in_process_pair(a.size_max, a.mtu, a.qp_timeout)?;
    let mut rows = Vec::new();
    let round_trip = (a.threads == 2).then(cross_core_round_trip_ns).flatten();
    for op in a.ops() {
        for &size in &sizes {
            let count = (a.bytes() / size as u64).clamp(2_000, 200_000);
            let r = measure_bw(&mut pair, op, size, count)?;
            let threaded = if a.threads == 2 {
                pair.set_peer_thread(true)?;
                let r2 = measure_bw(&mut pair, op, size, count);
                pair.set_peer_thread(false)?;
                Some(r2?)
            } else {
                None
            };
            rows.push((op, size, r, threaded));
        }
    }
    let mut counters = CardCounters::default();
    counters.extend(pair.counters()?);
    let setup = match a.threads {
        2 => "two in-process cards joined by a cable, one thread; two_threads: card B's engine on a thread of its own",
        _ => "two in-process cards joined by a cable, one thread",
    };
    print_bw(&a, &rows, setup, round_trip, &counters)
}

/// One measurement of `count` messages of `op` and `size` after a warm-up of a twentieth, the
/// destination cleared first and required to hold the source's bytes after.
fn measure_bw(
    pair: &mut RdmaPair,
    op: BwOp,
    size: usize,
    count: u64,
) -> Result<BwResult, Box<dyn std::error::Error>> {
    let pattern: Vec<u8> = (0..size).map(|i| (i as u8) ^ (size as u8)).collect();
    // READ moves B's bytes into the second half of A's buffer; the others A's into B's.
    let (src_b, (dst_b, dst_off)) = match op {
        BwOp::Read => (true, (false, pair.a.mr.len() / 2)),
        _ => (false, (true, 0)),
    };
    pair.fill(src_b, 0, &pattern);
    pair.fill(dst_b, dst_off, &vec![0; size]);
    pair.bandwidth(op, size, count / 20 + 1)?;
    let r = pair.bandwidth(op, size, count)?;
    if pair.bytes(dst_b, dst_off, size) != pattern {
        return Err(format!("{} {size} B: the data did not arrive intact", op.name()).into());
    }
    Ok(r)
}

/// A measurement: operation, size, its one-thread figures and, with `--threads 2`, those with
/// card B's engine on a thread of its own.
type BwRow = (BwOp, usize, BwResult, Option<BwResult>);

/// The table (or JSON) of a bandwidth run, beside the Ethernet CPU echo measured now.
/// `round_trip`: a cache line's round trip between two cores, measured with `--threads 2`.
fn print_bw(
    a: &RcBwArgs,
    rows: &[BwRow],
    setup: &str,
    round_trip: Option<f64>,
    counters: &CardCounters,
) -> CmdResult {
    let eth = ethernet_echo_mpps()?;
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(op, size, r, threaded)| {
                let two_threads = threaded.map(|t| {
                    json!({ "messages": t.messages, "gbps": t.gbps(), "mmsgs_per_s": t.mmsgs(),
                            "ratio_to_one_thread": t.mmsgs() / r.mmsgs() })
                });
                json!({ "op": op.name(), "size": size, "messages": r.messages,
                        "gbps": r.gbps(), "mmsgs_per_s": r.mmsgs(),
                        "ratio_to_ethernet_echo_mpps": r.mmsgs() / eth,
                        "two_threads": two_threads })
            })
            .collect();
        println!(
            "{}",
            json!({ "note": format!("{setup}; RC, path MTU as given, 128 outstanding, every 16th signalled"),
                    "mtu": a.mtu, "ethernet_cpu_echo_64b_mpps": eth, "results": out,
                    "cross_core_round_trip_ns": round_trip, "card_counters": counters.json() })
        );
    } else {
        print!(
            "{:>6} {:>8} {:>10} {:>10} {:>12}",
            "op", "size", "Gbit/s", "Mmsg/s", "vs Eth echo"
        );
        if a.threads == 2 {
            print!(" {:>14} {:>9}", "Mmsg/s 2 thr", "2 thr/1");
        }
        println!();
        for (op, size, r, threaded) in rows {
            print!(
                "{:>6} {:>8} {:>10.3} {:>10.3} {:>12.3}",
                op.name(),
                size,
                r.gbps(),
                r.mmsgs(),
                r.mmsgs() / eth
            );
            if let Some(t) = threaded {
                print!(" {:>14.3} {:>9.2}", t.mmsgs(), t.mmsgs() / r.mmsgs());
            }
            println!();
        }
        println!("Ethernet CPU echo, 64 B, same run: {eth:.3} Mpps");
        if a.threads == 2 {
            println!("2 thr: card B's engine on a thread of its own, card A and both applications on the other");
        }
        if let Some(ns) = round_trip {
            println!("a cache line's round trip between the two cores, same run: {ns:.0} ns");
        }
        if a.stats {
            counters.print();
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_lat(a: RcLatArgs) -> CmdResult {
    let sizes = sizes(a.size_min, a.size_max)?;
    let mut pair = in_process_pair(a.size_max, a.mtu, a.qp_timeout)?;
    let mut rows = Vec::new();
    for &size in &sizes {
        rows.push((size, pair.latency(size, a.iters)?));
    }
    let mut counters = CardCounters::default();
    counters.extend(pair.counters()?);
    let eth = ethernet_echo_mpps()?;
    if a.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(size, r)| json!({ "size": size, "median_us": r.median_us, "p99_us": r.p99_us, "iterations": r.iterations }))
            .collect();
        println!(
            "{}",
            json!({ "note": "SEND ping-pong between two in-process cards, one thread; one-way latency = half the round trip",
                    "mtu": a.mtu, "ethernet_cpu_echo_64b_mpps": eth, "results": out,
                    "card_counters": counters.json() })
        );
    } else {
        println!("{:>8} {:>12} {:>12}", "size", "median us", "p99 us");
        for (size, r) in &rows {
            println!("{:>8} {:>12.2} {:>12.2}", size, r.median_us, r.p99_us);
        }
        println!("Ethernet CPU echo, 64 B, same run: {eth:.3} Mpps");
        if a.stats {
            counters.print();
        }
    }
    Ok(ExitCode::SUCCESS)
}
