//! `fldemu rc-pingpong`: rdma-core's `ibv_rc_pingpong`, over the verbs API, wire-compatible with
//! the real tool so either end may be either program. The two ends exchange
//! `LID:QPN:PSN:GID` over TCP (port 18515 by default) as that tool does — a 52-byte message
//! `"%04x:%06x:%06x:%32s"` with a NUL, the client writing first, the server connecting its QP
//! before it answers, the client closing with `"done"` — connect their RC QPs (path MTU `-m`,
//! timeout 14, retry 7, RNR retry 7, minimum RNR timer 12, one outstanding READ: the tool's
//! values) and bounce `iters` SENDs of `size` bytes: the client sends first, each side sends
//! again once its last send completed and the peer's message arrived.
//!
//! While it waits on the TCP exchange the card keeps running and answers ARP, since the peer's
//! kernel resolves our GID when it connects its QP.
//!
//! With `stateless` on both ends (two fldemu ends: the real tool knows nothing of it) the
//! connection is StaR's (`docs/nic-interface.md` §16): the server's QP lives in this process,
//! its NIC keeps nothing for the connection, and right after its address message the server
//! writes its offer ([`StarOffer::to_text`]) for the client to connect with.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use fld_host::verbs::exchange::{read_exact, waiting, write_all, Dest, WaitError, MESSAGE_LEN};
use fld_host::verbs::star::{StarOffer, StarPort, StarQp, OFFER_END};
use fld_host::verbs::*;

const DONE: &[u8; 5] = b"done\0";
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// The tool's options.
#[derive(Clone, Debug)]
pub struct PingpongConfig {
    /// Connect to this server; `None`: be the server.
    pub server: Option<String>,
    pub port: u16,
    pub size: usize,
    pub iters: u64,
    /// Path MTU in bytes.
    pub mtu: u32,
    pub rx_depth: u32,
    pub gid_index: usize,
    pub events: bool,
    /// A StaR connection, the server's side stateless (both ends must say so).
    pub stateless: bool,
    /// How long any wait (the peer, a completion) may take.
    pub timeout: Duration,
}

impl Default for PingpongConfig {
    fn default() -> Self {
        PingpongConfig {
            server: None,
            port: 18515,
            size: 4096,
            iters: 1000,
            mtu: 1024,
            rx_depth: 500,
            gid_index: 0,
            events: false,
            stateless: false,
            timeout: Duration::from_secs(60),
        }
    }
}

impl PingpongConfig {
    /// The end of a wait that starts now.
    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct PingpongReport {
    pub local: Dest,
    pub remote: Dest,
    pub bytes: u64,
    pub seconds: f64,
    pub iters: u64,
    pub completion_events: u64,
}

impl PingpongReport {
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / (self.seconds * 1e6)
    }
    pub fn usec_per_iter(&self) -> f64 {
        self.seconds * 1e6 / self.iters as f64
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PingpongError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error("TCP exchange: {0}")]
    Exchange(String),
    #[error("{0}")]
    Completion(String),
}

impl From<std::io::Error> for PingpongError {
    fn from(e: std::io::Error) -> Self {
        PingpongError::Exchange(e.to_string())
    }
}

impl From<WaitError> for PingpongError {
    fn from(e: WaitError) -> Self {
        match e {
            WaitError::Verbs(v) => PingpongError::Verbs(v),
            other => PingpongError::Exchange(other.to_string()),
        }
    }
}

type Result<T> = std::result::Result<T, PingpongError>;

/// The tool's connection: INIT with no remote access, RTR and RTS with its fixed values.
fn connect(
    ctx: &mut Context,
    qp: &Qp,
    cfg: &PingpongConfig,
    my_psn: u32,
    dest: &Dest,
) -> Result<()> {
    ctx.connect_rc(qp, &connection(cfg, my_psn, dest)?)?;
    Ok(())
}

/// The tool's values: one READ/atomic each way, hop limit 1, RNR timer 12, timeout 14.
fn connection(cfg: &PingpongConfig, my_psn: u32, dest: &Dest) -> Result<RcConnection> {
    let mtu = match cfg.mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        4096 => 5,
        _ => return Err(PingpongError::Exchange("MTU must be 256..4096".into())),
    };
    Ok(RcConnection {
        sgid_index: cfg.gid_index as u8,
        hop_limit: 1,
        path_mtu: mtu,
        rq_psn: dest.psn,
        sq_psn: my_psn,
        max_rd_atomic: 1,
        max_dest_rd_atomic: 1,
        ..RcConnection::new(dest.qpn, dest.gid)
    })
}

/// This end's QP: the RC QP, or a StaR server's QP in this process with its port.
enum PingQp<'a> {
    Rc(&'a mut Qp),
    Star {
        port: Box<StarPort>,
        qp: StarQp,
        started: Instant,
    },
}

impl PingQp<'_> {
    fn qp_num(&self) -> u32 {
        match self {
            PingQp::Rc(q) => q.qp_num(),
            PingQp::Star { qp, .. } => qp.qp_num(),
        }
    }

    fn post_send(&mut self, wr: SendWr<'_>) -> Result<()> {
        match self {
            PingQp::Rc(q) => q.post_send(&[wr])?,
            PingQp::Star { port, qp, started } => {
                // No inline data: the client fetches the bytes by GDs.
                let wr = SendWr {
                    inline: false,
                    ..wr
                };
                qp.post_send(port, &[wr], started.elapsed().as_nanos() as u64)?
            }
        }
        Ok(())
    }

    fn post_recv(&mut self, wrs: &[(u64, &[Sge])]) -> Result<()> {
        match self {
            PingQp::Rc(q) => q.post_recv(wrs)?,
            PingQp::Star { port, qp, started } => {
                qp.post_recv(port, wrs, started.elapsed().as_nanos() as u64)?
            }
        }
        Ok(())
    }

    /// The StaR server driver's own work (EAs taken, WQEPs sent again).
    fn progress(&mut self) -> Result<()> {
        if let PingQp::Star { port, started, .. } = self {
            port.progress(started.elapsed().as_nanos() as u64)?;
        }
        Ok(())
    }
}

/// One end of the ping-pong on `ctx`'s device. `out` gets the tool's lines. The QP's transport
/// counters come back whatever happened (a failed run is where they say why).
pub fn run(ctx: &mut Context, cfg: &PingpongConfig, out: &mut dyn Write) -> PingpongRun {
    let mut qp_counters = Vec::new();
    let result = run_counted(ctx, cfg, out, &mut qp_counters);
    PingpongRun {
        result,
        qp_counters,
    }
}

/// A run's outcome and its QP's counters by name (`QpCounters::named`).
pub struct PingpongRun {
    pub result: Result<PingpongReport>,
    pub qp_counters: Vec<(&'static str, u64)>,
}

fn run_counted(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    out: &mut dyn Write,
    qp_counters: &mut Vec<(&'static str, u64)>,
) -> Result<PingpongReport> {
    let pd = ctx.alloc_pd()?;
    let mr = ctx.reg_mr(&pd, cfg.size.max(1), access::LOCAL_WRITE)?;
    mr.write(0, &vec![0x7b; cfg.size]);
    let channel = ctx.create_comp_channel();
    let mut cq = ctx.create_cq(cfg.rx_depth + 1, cfg.events.then_some(&channel))?;
    let inline = if cfg.size <= 64 { cfg.size as u32 } else { 0 };
    let mut qp = ctx.create_qp(
        &pd,
        &QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: cfg.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: inline,
            },
            sq_sig_all: false,
            out_of_order: false,
        },
    )?;
    let bounced = bounce(ctx, cfg, out, (&pd, &mut qp), &mut cq, &channel, &mr);
    if let Ok(c) = ctx.qp_counters(&qp) {
        *qp_counters = c;
    }
    let report = bounced?;
    ctx.destroy_qp(qp)?;
    ctx.destroy_cq(cq)?;
    ctx.dereg_mr(mr)?;
    if cfg.stateless {
        ctx.star_release(&pd)?;
    }
    ctx.dealloc_pd(pd)?;
    Ok(report)
}

/// The exchange of addresses and the SENDs back and forth on a QP in RESET.
#[allow(clippy::too_many_arguments)]
fn bounce(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    out: &mut dyn Write,
    (pd, rc_qp): (&Pd, &mut Qp),
    cq: &mut Cq,
    channel: &CompChannel,
    mr: &Mr,
) -> Result<PingpongReport> {
    let mut qp = this_end_qp(ctx, cfg, rc_qp, cq, mr)?;
    let sge = [mr.sge(0, cfg.size)];
    let recv: Vec<(u64, &[Sge])> = (0..cfg.rx_depth).map(|_| (RECV_WRID, &sge[..])).collect();
    // INIT with no remote access, as the tool does, before posting the receives. A StaR end
    // posts them once connected: its client's QP takes the server's regions first, and the
    // server's QP has nowhere to send its WQEPs before.
    if let (PingQp::Rc(q), false) = (&mut qp, cfg.stateless) {
        ctx.init_rc(q, 0)?;
        q.post_recv(&recv)?;
    }
    if cfg.events {
        cq.req_notify()?;
    }
    let local = Dest {
        lid: 0,
        qpn: qp.qp_num(),
        psn: psn_seed() & 0xff_ffff,
        gid: ctx.query_gid(1, cfg.gid_index)?,
    };
    writeln!(out, "  local address:  {}", local.describe()).ok();
    let remote = match &cfg.server {
        Some(host) => exchange_as_client(ctx, cfg, pd, &mut qp, host, &local, &recv)?,
        None => exchange_as_server(ctx, cfg, &mut qp, &local, &recv)?,
    };
    writeln!(out, "  remote address: {}", remote.describe()).ok();

    let (seconds, events) = send_and_receive(ctx, cfg, &mut qp, cq, channel, &sge)?;
    let report = PingpongReport {
        local,
        remote,
        bytes: cfg.size as u64 * cfg.iters * 2,
        seconds,
        iters: cfg.iters,
        completion_events: events,
    };
    write_rates(out, &report);
    linger_until_quiet(ctx, &mut qp)?;
    Ok(report)
}

/// The RC QP made for this end, or for a StaR server a QP of its own on a new StaR port.
fn this_end_qp<'a>(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    rc_qp: &'a mut Qp,
    cq: &Cq,
    mr: &Mr,
) -> Result<PingQp<'a>> {
    if !(cfg.stateless && cfg.server.is_none()) {
        return Ok(PingQp::Rc(rc_qp));
    }
    let mut port = Box::new(ctx.star_port(2 * cfg.rx_depth + 8)?);
    let cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: cfg.rx_depth,
        ..Default::default()
    };
    let qp = ctx.create_star_qp(&mut port, cq, cq, cap, &[mr])?;
    Ok(PingQp::Star {
        port,
        qp,
        started: Instant::now(),
    })
}

/// The client's side of the TCP exchange: swap addresses, connect (to the server's StaR offer
/// if stateless), then say `"done"`. Returns the server's address.
fn exchange_as_client(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    pd: &Pd,
    qp: &mut PingQp<'_>,
    host: &str,
    local: &Dest,
    recv: &[(u64, &[Sge])],
) -> Result<Dest> {
    let mut msg = [0u8; MESSAGE_LEN];
    let mut s = dial_server(ctx, cfg, host, local, &mut msg)?;
    let remote = Dest::parse(&msg).ok_or(PingpongError::Exchange("bad message".into()))?;
    match qp {
        PingQp::Rc(q) if cfg.stateless => {
            let offer = read_offer(ctx, &mut s, cfg.deadline())?;
            let c = connection(cfg, local.psn, &remote)?;
            ctx.connect_star_client(pd, q, &offer, &c)?;
            q.post_recv(recv)?;
        }
        PingQp::Rc(q) => connect(ctx, q, cfg, local.psn, &remote)?,
        PingQp::Star { .. } => unreachable!("a client's QP is an RC QP"),
    }
    write_all(ctx, &mut s, DONE, cfg.deadline())?;
    Ok(remote)
}

/// A TCP connection to the server over which our address went and its address came back into
/// `msg`. The server may not listen yet (or a port forwarder accepts for it and gives up): try
/// again until the timeout, as a user would start the client again.
fn dial_server(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    host: &str,
    local: &Dest,
    msg: &mut [u8; MESSAGE_LEN],
) -> Result<TcpStream> {
    let end = cfg.deadline();
    loop {
        let attempt = TcpStream::connect((host, cfg.port)).and_then(|mut s| {
            s.set_nonblocking(true)?;
            write_all(ctx, &mut s, &local.message(), end)
                .and_then(|_| read_exact(ctx, &mut s, msg, end))
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            Ok(s)
        });
        match attempt {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > end => return Err(e.into()),
            Err(_) => {
                let wait = Instant::now() + Duration::from_millis(500);
                while Instant::now() < wait {
                    ctx.serve_neighbors()?;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}

/// The server's side of the TCP exchange: take the client's address, connect our QP, answer
/// with our address (and StaR offer), then wait for the client's `"done"`. Returns the client's
/// address.
fn exchange_as_server(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    qp: &mut PingQp<'_>,
    local: &Dest,
    recv: &[(u64, &[Sge])],
) -> Result<Dest> {
    let l = TcpListener::bind(("0.0.0.0", cfg.port))?;
    l.set_nonblocking(true)?;
    let mut s = waiting(ctx, cfg.deadline(), || match l.accept() {
        Ok((s, _)) => Ok(Some(s)),
        Err(e) => Err(e),
    })?;
    s.set_nonblocking(true)?;
    let mut msg = [0u8; MESSAGE_LEN];
    read_exact(ctx, &mut s, &mut msg, cfg.deadline())?;
    let remote = Dest::parse(&msg).ok_or(PingpongError::Exchange("bad message".into()))?;
    let offer = match qp {
        PingQp::Rc(q) => {
            connect(ctx, q, cfg, local.psn, &remote)?;
            None
        }
        PingQp::Star { qp: sq, .. } => Some(connect_star_server(ctx, cfg, sq, local, &remote)?),
    };
    if offer.is_some() {
        qp.post_recv(recv)?;
    }
    write_all(ctx, &mut s, &local.message(), cfg.deadline())?;
    if let Some(text) = offer {
        write_all(ctx, &mut s, text.as_bytes(), cfg.deadline())?;
    }
    let mut done = [0u8; DONE.len()];
    read_exact(ctx, &mut s, &mut done, cfg.deadline())?;
    Ok(remote)
}

/// Connects the StaR server's QP to the client at `remote` (its MAC resolved from the IPv4
/// address in its GID) and returns the offer's text for the client to connect with.
fn connect_star_server(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    sq: &mut StarQp,
    local: &Dest,
    remote: &Dest,
) -> Result<String> {
    let ip = fld_abi::wire::roce::gid_is_ipv4(&remote.gid)
        .then(|| {
            [
                remote.gid[12],
                remote.gid[13],
                remote.gid[14],
                remote.gid[15],
            ]
        })
        .ok_or(PingpongError::Exchange(
            "a StaR client needs an IPv4 address".into(),
        ))?;
    let dmac = ctx.resolve(ip, cfg.timeout)?;
    let c = RcConnection {
        dmac,
        ..connection(cfg, local.psn, remote)?
    };
    ctx.connect_star_server(sq, remote.qpn, &c)?;
    Ok(sq.offer().to_text())
}

/// The ping-pong itself: the client sends first, each side sends again once its last send
/// completed and the peer's message arrived, receives posted again as they run low. Returns
/// the seconds it took and the completion events waited for.
fn send_and_receive(
    ctx: &mut Context,
    cfg: &PingpongConfig,
    qp: &mut PingQp<'_>,
    cq: &mut Cq,
    channel: &CompChannel,
    sge: &[Sge],
) -> Result<(f64, u64)> {
    let inline = if cfg.size <= 64 { cfg.size as u32 } else { 0 };
    let mut routs = cfg.rx_depth as i64;
    let mut send = SendWr::new(SEND_WRID, WrOpcode::Send, sge);
    send.inline = inline > 0;
    let mut pending = RECV_WRID;
    if cfg.server.is_some() {
        qp.post_send(send)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut scnt, mut rcnt, mut events) = (0u64, 0u64, 0u64);
    let mut wc = [Wc::EMPTY; 2];
    let mut last_progress = Instant::now();
    while rcnt < cfg.iters || scnt < cfg.iters {
        if cfg.events {
            ctx.get_cq_event(channel, cfg.timeout)?;
            events += 1;
            cq.req_notify()?;
        }
        qp.progress()?;
        let n = cq.poll(&mut wc);
        if n == 0 {
            if last_progress.elapsed() > cfg.timeout {
                return Err(PingpongError::Completion(format!(
                    "no completion for {:?} ({scnt} sent, {rcnt} received)",
                    cfg.timeout
                )));
            }
            continue;
        }
        last_progress = Instant::now();
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(PingpongError::Completion(format!(
                    "Failed status {:?} ({}) for wr_id {}",
                    w.status, w.status as u8, w.wr_id
                )));
            }
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        let more = cfg.rx_depth as i64 - routs;
                        let recv: Vec<(u64, &[Sge])> =
                            (0..more).map(|_| (RECV_WRID, sge)).collect();
                        qp.post_recv(&recv)?;
                        routs += more;
                    }
                    rcnt += 1;
                }
                other => {
                    return Err(PingpongError::Completion(format!(
                        "Completion for unknown wr_id {other}"
                    )))
                }
            }
            pending &= !w.wr_id;
            if scnt < cfg.iters && pending == 0 {
                qp.post_send(send)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    Ok((start.elapsed().as_secs_f64(), events))
}

/// The tool's two closing lines: throughput and time per iteration.
fn write_rates(out: &mut dyn Write, report: &PingpongReport) {
    writeln!(
        out,
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        report.bytes,
        report.seconds,
        report.mbit_per_s()
    )
    .ok();
    writeln!(
        out,
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        report.iters,
        report.seconds,
        report.usec_per_iter()
    )
    .ok();
}

/// Linger until the peer has been quiet for a while before the QP goes away: if our last
/// ACK was lost, the peer sends again after its ACK timeout (the tool's: 4.096 us x 2^14 =
/// 67 ms) and must find us here to be ACKed — Linux soft-RoCE retries for ever at retry
/// count 7, so a peer gone too early leaves it hanging.
fn linger_until_quiet(ctx: &mut Context, qp: &mut PingQp<'_>) -> Result<()> {
    const QUIET: Duration = Duration::from_millis(500);
    let linger = Instant::now();
    let mut quiet_since = Instant::now();
    let mut seen = packets_received(ctx, qp)?;
    while quiet_since.elapsed() < QUIET && linger.elapsed() < Duration::from_secs(10) {
        ctx.serve_neighbors()?;
        let now_seen = packets_received(ctx, qp)?;
        if now_seen != seen {
            seen = now_seen;
            quiet_since = Instant::now();
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(())
}

/// How many packets this end has received so far, after the StaR driver's own work. A StaR
/// server has no QP on its NIC: the requests its NIC served stand for the packets.
fn packets_received(ctx: &mut Context, qp: &mut PingQp<'_>) -> Result<u64> {
    qp.progress()?;
    Ok(match qp {
        PingQp::Rc(q) => ctx.query_qp_counters(q)?.packets_received.get(),
        PingQp::Star { .. } => ctx
            .port_counters()?
            .iter()
            .find(|(n, _)| *n == "star_served")
            .map_or(0, |c| c.1),
    })
}

/// The tool draws its PSN from lrand48; any value in 24 bits will do.
fn psn_seed() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t.wrapping_mul(2654435761) ^ std::process::id()
}

/// The server's StaR offer that follows its address message, read to its last line.
fn read_offer(ctx: &mut Context, s: &mut TcpStream, end: Instant) -> Result<StarOffer> {
    let mut text = Vec::new();
    let last = format!("{OFFER_END}\n");
    while !text.ends_with(last.as_bytes()) {
        if text.len() > 1 << 16 {
            return Err(PingpongError::Exchange("no end to the StaR offer".into()));
        }
        let mut b = [0u8; 1];
        read_exact(ctx, s, &mut b, end)?;
        text.push(b[0]);
    }
    StarOffer::from_text(&String::from_utf8_lossy(&text))
        .map_err(|l| PingpongError::Exchange(format!("bad StaR offer line {l:?}")))
}
