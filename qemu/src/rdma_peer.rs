//! `fldemu rc-bw` between two processes: each runs its own card with its uplink on a link (a
//! UDP link, say), one RC QP through the verbs API, and a TCP connection for the set-up and
//! the run control — in the spirit of perftest's `ib_{write,read,send}_bw` with its server
//! and client, though not perftest's own exchange (see the README).
//!
//! The control connection carries text lines. The ends first trade
//! `HELLO <qpn> <psn> <gid as 32 hex digits> <rkey> <vaddr>` (the client first; the server
//! connects its QP before it answers), then the client drives:
//!
//! * `RUN <op> <size> <count>`: the server fills its buffer with the size's pattern (READ's
//!   source) or posts receives (SEND), and answers `READY`;
//! * the client moves `count` messages, 128 outstanding, every 16th signalled;
//! * for SEND the server answers `DONE <crc>` once every message arrived; for WRITE and READ the
//!   client says `END` first. `<crc>` is the CRC-32 of the first `size` bytes of the server's
//!   buffer, which the client compares with its own pattern's;
//! * `QUIT` ends the server.
//!
//! With `--stateless` on both ends the connection is StaR's (`docs/nic-interface.md` §16): the
//! client's HELLO ends in `star`; the server, whose NIC keeps no state for it, makes its QP in
//! software and answers with its HELLO (that QP's number), then
//! `STAR <qpn> <send_cqn> <recv_cqn>`, one `REGION <key> <addr> <length> <access> <log_page>
//! <page,page,...>` for its buffer (the bus addresses the client will name), and `OFFERED`.
//!
//! With `--unload` on both ends, small WRITEs take uRDMA's unload path
//! (`fld_host::verbs::unload`): the HELLOs end in `unload`; the server, the target, registers a
//! staging buffer on its QP and sends `STAGING <addr> <rkey> <slots> <slot_bytes>`; the client
//! answers `CREDIT <addr> <rkey>`, the word the server writes the slots it has taken into. The
//! client's decision module unloads every WRITE that fits a slot (larger ones stay offloaded);
//! the server's CPU takes each from its slot, checks it against its uMTT and copies it. The
//! client's `END <unloaded>` tells the server how many to wait for before it answers `DONE`.
//!
//! An end that cannot go on says `ERROR <why>` before it closes, so both ends report the cause.
//! While an end waits on the control connection its card keeps running and answers ARP.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use fld_host::verbs::decision::{Decider, Policy};
use fld_host::verbs::star::{StarHeld, StarOffer, StarPort, StarQp, OFFER_END};
use fld_host::verbs::unload::{
    CreditWord, StagingOffer, UnloadInitiator, UnloadTarget, MAX_SLOT_BYTES, SLOT_HEADER,
};
use fld_host::verbs::*;

use crate::testbed::rdma::{bw_endpoint, BwOp, BwResult, RX_DEPTH, TX_DEPTH};

/// perftest's default port is 18515 too; this one stays clear of `rc-pingpong`'s.
pub const DEFAULT_PORT: u16 = 18517;

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
}

type Result<T> = std::result::Result<T, PeerError>;

/// How the two ends connect; both must ask for the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerMode {
    /// An RC connection.
    Rc,
    /// StaR's (`--stateless`): the server's NIC keeps no state.
    Stateless,
    /// RC with uRDMA's unload path for small WRITEs (`--unload`).
    Unload,
}

impl PeerMode {
    /// The word the HELLO line ends in.
    fn word(self) -> &'static str {
        match self {
            PeerMode::Rc => "",
            PeerMode::Stateless => " star",
            PeerMode::Unload => " unload",
        }
    }
}

/// What one end asks of its connection.
#[derive(Clone, Copy, Debug)]
pub struct PeerConfig {
    /// The control connection's TCP port (the server listens on it).
    pub port: u16,
    /// Bytes of the registered buffer.
    pub buf: usize,
    /// An IBA path-MTU code (1 = 256 … 5 = 4096 bytes).
    pub path_mtu: u8,
    pub mode: PeerMode,
    /// How long any wait may take: for the other end, for ARP, for a run's completions.
    pub timeout: Duration,
    /// This end's QP's local ACK timeout, 4.096 µs × 2^N (IBA 9.7.6.1.3; perftest's
    /// `--qp-timeout`). Each end sets its own, as each chooses when its requester gives up
    /// waiting.
    pub ack_timeout: u8,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            port: DEFAULT_PORT,
            buf: 1 << 16,
            path_mtu: fld_abi::nic::DEFAULT_PATH_MTU,
            mode: PeerMode::Rc,
            timeout: Duration::from_secs(60),
            ack_timeout: fld_abi::nic::DEFAULT_ACK_TIMEOUT,
        }
    }
}

/// Staging slots of an unload connection, and their size: a 64-byte WRITE and its header fit
/// the smallest; the largest slot takes what one inline WQE carries.
const STAGING_SLOTS: u32 = 256;

/// The pattern a run of `size`-byte messages moves (both ends compute it).
pub fn pattern(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31) ^ (size as u8))
        .collect()
}

/// One end: its verbs objects and the control connection.
pub struct Peer {
    ctx: Context,
    _pd: Pd,
    mr: Mr,
    cq: Cq,
    qp: Qp,
    ctl: TcpStream,
    line: Vec<u8>,
    timeout: Duration,
    remote_addr: u64,
    rkey: u32,
    /// A StaR connection: the server's port and software QP, or what the client holds.
    star: Option<StarEnd>,
    /// An unload connection's end.
    unload: Option<UnloadEnd>,
    /// Unloaded WRITEs the client announced in the runs before this one.
    unloaded_before: u64,
    started: Instant,
}

/// This end of an unload connection.
enum UnloadEnd {
    Target(UnloadTarget),
    Initiator(UnloadInitiator, Decider),
}

/// This end of a StaR connection.
enum StarEnd {
    Server(Box<(StarPort, StarQp)>),
    /// The server's regions the client holds, for as long as the connection lasts.
    Client {
        _held: StarHeld,
    },
}

/// What the ends trade.
struct Hello {
    qpn: u32,
    psn: u32,
    gid: Gid,
    rkey: u32,
    vaddr: u64,
}

impl Hello {
    fn line(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "HELLO {:x} {:x} {gid} {:x} {:x}\n",
            self.qpn, self.psn, self.rkey, self.vaddr
        )
    }

    fn parse(line: &str) -> Option<Hello> {
        let mut f = line.split_whitespace();
        (f.next()? == "HELLO").then_some(())?;
        let qpn = u32::from_str_radix(f.next()?, 16).ok()?;
        let psn = u32::from_str_radix(f.next()?, 16).ok()?;
        let g = f.next()?;
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(g.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        let rkey = u32::from_str_radix(f.next()?, 16).ok()?;
        let vaddr = u64::from_str_radix(f.next()?, 16).ok()?;
        Some(Hello {
            qpn,
            psn,
            gid,
            rkey,
            vaddr,
        })
    }
}

impl Peer {
    /// Sets up an end on `ctx`'s device as `config` says, and connects to the server at
    /// `server` (a client) or waits for a client on the port (the server).
    pub fn connect(mut ctx: Context, server: Option<&str>, config: &PeerConfig) -> Result<Peer> {
        let PeerConfig {
            port,
            buf,
            path_mtu,
            mode,
            timeout,
            ack_timeout,
        } = *config;
        let stateless = mode == PeerMode::Stateless;
        let inline = if mode == PeerMode::Unload {
            MAX_SLOT_BYTES
        } else {
            0
        };
        let (pd, mr, cq, qp) = bw_endpoint(&mut ctx, buf, inline)?;
        ctx.init_rc(&qp, access::REMOTE)?;
        let deadline = Instant::now() + timeout;
        let ctl = match server {
            Some(host) => {
                // The server may not listen yet: try again until the deadline.
                loop {
                    match TcpStream::connect((host, port)) {
                        Ok(s) => break s,
                        Err(_) if Instant::now() < deadline => {
                            ctx.serve_neighbors()?;
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            None => {
                let l = TcpListener::bind(("0.0.0.0", port))?;
                l.set_nonblocking(true)?;
                loop {
                    match l.accept() {
                        Ok((s, _)) => break s,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            ctx.serve_neighbors()?;
                            if Instant::now() > deadline {
                                return Err(PeerError::Protocol("no client came".into()));
                            }
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        };
        ctl.set_nonblocking(true)?;
        ctl.set_nodelay(true)?;
        let gid = ctx.query_gid(1, 0)?;
        let local = Hello {
            qpn: qp.qp_num(),
            psn: fastrand::u32(..) & 0xff_ffff,
            gid,
            rkey: mr.rkey(),
            vaddr: mr.addr(),
        };
        let mut peer = Peer {
            ctx,
            _pd: pd,
            mr,
            cq,
            qp,
            ctl,
            line: Vec::new(),
            timeout,
            remote_addr: 0,
            rkey: 0,
            star: None,
            unload: None,
            unloaded_before: 0,
            started: Instant::now(),
        };
        let hello = |h: &Hello| format!("{}{}\n", h.line().trim_end(), mode.word());
        if server.is_some() {
            peer.send_line(&hello(&local))?;
        }
        let line = peer.read_line()?;
        let remote =
            Hello::parse(&line).ok_or_else(|| PeerError::Protocol(format!("bad {line:?}")))?;
        let theirs = [PeerMode::Stateless, PeerMode::Unload]
            .into_iter()
            .find(|m| line.ends_with(m.word()))
            .unwrap_or(PeerMode::Rc);
        if theirs != mode {
            let why = "the ends asked for different connections (--stateless, --unload or \
                       neither): both must say the same";
            // Tell the other end why before hanging up, so both name the option.
            let _ = peer.send_line(&format!("ERROR {why}\n"));
            return Err(PeerError::Protocol(why.into()));
        }
        let c = RcConnection {
            path_mtu,
            rq_psn: remote.psn,
            sq_psn: local.psn,
            timeout: ack_timeout,
            ..RcConnection::new(remote.qpn, remote.gid)
        };
        peer.remote_addr = remote.vaddr;
        peer.rkey = remote.rkey;
        match (stateless, server.is_some()) {
            (false, _) => {
                peer.ctx.connect_rc(&peer.qp, &c)?;
                if server.is_none() {
                    peer.send_line(&hello(&local))?;
                }
                if mode == PeerMode::Unload {
                    peer.set_up_unload(server.is_some())?;
                }
            }
            (true, false) => peer.offer_star(&remote, c, local)?,
            (true, true) => {
                let offer = peer.read_offer()?;
                let pd = &peer._pd;
                let held = peer.ctx.connect_star_client(pd, &peer.qp, &offer, &c)?;
                peer.star = Some(StarEnd::Client { _held: held });
            }
        }
        Ok(peer)
    }

    /// Trades the staging buffer (the server's) and the credit word (the client's).
    fn set_up_unload(&mut self, client: bool) -> Result<()> {
        let number = |f: Option<&str>| f.and_then(|v| u64::from_str_radix(v, 16).ok());
        if client {
            let line = self.read_line()?;
            let mut f = line.split_whitespace();
            let offer = match (
                f.next(),
                number(f.next()),
                number(f.next()),
                number(f.next()),
                number(f.next()),
            ) {
                (Some("STAGING"), Some(addr), Some(rkey), Some(slots), Some(slot_bytes)) => {
                    StagingOffer {
                        addr,
                        rkey: rkey as u32,
                        slots: slots as u32,
                        slot_bytes: slot_bytes as u32,
                    }
                }
                _ => {
                    return Err(PeerError::Protocol(format!(
                        "expected STAGING, got {line:?}"
                    )))
                }
            };
            let initiator = UnloadInitiator::new(&mut self.ctx, &self._pd, offer)?;
            let c = initiator.credit_word();
            self.send_line(&format!("CREDIT {:x} {:x}\n", c.addr, c.rkey))?;
            let room = offer.slot_bytes.min(MAX_SLOT_BYTES) as usize - SLOT_HEADER;
            let decider = Decider::new(Policy::Unload, room);
            self.unload = Some(UnloadEnd::Initiator(initiator, decider));
        } else {
            let slots = STAGING_SLOTS.min(RX_DEPTH);
            let mut target = UnloadTarget::new(
                &mut self.ctx,
                &self._pd,
                &mut self.qp,
                slots,
                MAX_SLOT_BYTES,
            )?;
            let o = target.offer();
            self.send_line(&format!(
                "STAGING {:x} {:x} {:x} {:x}\n",
                o.addr, o.rkey, o.slots, o.slot_bytes
            ))?;
            let line = self.read_line()?;
            let mut f = line.split_whitespace();
            match (f.next(), number(f.next()), number(f.next())) {
                (Some("CREDIT"), Some(addr), Some(rkey)) => target.set_credit_word(CreditWord {
                    addr,
                    rkey: rkey as u32,
                }),
                _ => {
                    return Err(PeerError::Protocol(format!(
                        "expected CREDIT, got {line:?}"
                    )))
                }
            }
            self.unload = Some(UnloadEnd::Target(target));
        }
        Ok(())
    }

    /// The server of a StaR connection: its QP in software, connected to the client that said
    /// HELLO, and the offer sent.
    fn offer_star(&mut self, client: &Hello, c: RcConnection, mut local: Hello) -> Result<()> {
        let ip = fld_abi::wire::roce::gid_is_ipv4(&client.gid)
            .then(|| {
                [
                    client.gid[12],
                    client.gid[13],
                    client.gid[14],
                    client.gid[15],
                ]
            })
            .ok_or_else(|| PeerError::Protocol("a StaR client needs an IPv4 address".into()))?;
        let dmac = self.ctx.resolve(ip, self.timeout)?;
        let mut port = self.ctx.star_port(2 * (RX_DEPTH + TX_DEPTH))?;
        let cap = QpCap {
            max_send_wr: TX_DEPTH,
            max_recv_wr: RX_DEPTH,
            ..Default::default()
        };
        let qp = self
            .ctx
            .create_star_qp(&mut port, &self.cq, &self.cq, cap, &[&self.mr])?;
        self.ctx.connect_star_server(
            &qp,
            client.qpn,
            &RcConnection {
                dmac,
                path_mtu: c.path_mtu,
                timeout: c.timeout,
                ..RcConnection::new(client.qpn, client.gid)
            },
        )?;
        local.qpn = qp.qp_num();
        let offer = qp.offer().clone();
        self.send_line(&format!("{} star\n", local.line().trim_end()))?;
        self.send_line(&offer.to_text())?;
        self.star = Some(StarEnd::Server(Box::new((port, qp))));
        Ok(())
    }

    /// The client reads the server's StaR offer.
    fn read_offer(&mut self) -> Result<StarOffer> {
        let mut text = String::new();
        loop {
            let line = self.read_line()?;
            text += &line;
            text.push('\n');
            if line == OFFER_END {
                break;
            }
        }
        StarOffer::from_text(&text)
            .map_err(|l| PeerError::Protocol(format!("bad StaR offer line {l:?}")))
    }

    /// A StaR server's driver work (EAs, WQEPs sent again); nothing for others.
    fn progress(&mut self) -> Result<()> {
        let now = self.started.elapsed().as_nanos() as u64;
        if let Some(StarEnd::Server(server)) = self.star.as_mut() {
            server.0.progress(now)?;
        }
        Ok(())
    }

    /// Posts `n` receives of `sge` on this end's QP (the StaR server's software one if it is).
    fn post_receives(&mut self, sge: &[fld_abi::nic::Sge], n: u64) -> Result<()> {
        let wrs: Vec<(u64, &[fld_abi::nic::Sge])> = (0..n).map(|_| (0, sge)).collect();
        let now = self.started.elapsed().as_nanos() as u64;
        match self.star.as_mut() {
            Some(StarEnd::Server(server)) => {
                let (port, qp) = &mut **server;
                qp.post_recv(port, &wrs, now)?
            }
            _ => self.qp.post_recv(&wrs)?,
        }
        Ok(())
    }

    fn send_line(&mut self, line: &str) -> Result<()> {
        let mut put = 0;
        let deadline = Instant::now() + self.timeout;
        while put < line.len() {
            match self.ctl.write(&line.as_bytes()[put..]) {
                Ok(n) => put += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.idle(deadline)?,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The next line, if a whole one has arrived (the card is not stepped).
    fn try_line(&mut self) -> Result<Option<String>> {
        let mut buf = [0u8; 256];
        loop {
            if let Some(i) = self.line.iter().position(|b| *b == b'\n') {
                let rest = self.line.split_off(i + 1);
                let line = std::mem::replace(&mut self.line, rest);
                let line = String::from_utf8_lossy(&line).trim().to_string();
                if let Some(why) = line.strip_prefix("ERROR ") {
                    return Err(PeerError::Protocol(format!("the peer refused: {why}")));
                }
                return Ok(Some(line));
            }
            match self.ctl.read(&mut buf) {
                Ok(0) => return Err(PeerError::Protocol("the peer closed the connection".into())),
                Ok(n) => self.line.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The next line, the card running (and answering ARP) while it comes.
    fn read_line(&mut self) -> Result<String> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(l) = self.try_line()? {
                return Ok(l);
            }
            self.idle(deadline)?;
        }
    }

    fn idle(&mut self, deadline: Instant) -> Result<()> {
        self.ctx.serve_neighbors()?;
        if Instant::now() > deadline {
            return Err(PeerError::Protocol("the peer did not answer".into()));
        }
        Ok(())
    }

    /// Completions of this end; an error status fails the run. An unload target takes the
    /// unloaded WRITEs among them.
    fn reap(&mut self, wc: &mut [Wc]) -> Result<usize> {
        let n = self.cq.poll(wc);
        if let Some(w) = wc[..n].iter().find(|w| w.status != WcStatus::Success) {
            return Err(PeerError::Protocol(format!("completion {w:?}")));
        }
        if let Some(UnloadEnd::Target(target)) = self.unload.as_mut() {
            for w in wc[..n].iter().filter(|w| UnloadTarget::is_unloaded(w)) {
                if let Some(why) = target.take(&self.ctx, &mut self.qp, w)? {
                    return Err(PeerError::Protocol(format!(
                        "an unloaded WRITE refused by the uMTT: {why:?}"
                    )));
                }
            }
        }
        Ok(n)
    }

    /// The client's side of one run: `count` messages of `size` bytes with `op`, checked.
    pub fn bandwidth(&mut self, op: BwOp, size: usize, count: u64) -> Result<BwResult> {
        let want = pattern(size);
        let half = self.mr.len() / 2;
        if op == BwOp::Read {
            self.mr.write(half, &vec![0; size]);
        } else {
            self.mr.write(0, &want);
        }
        self.send_line(&format!("RUN {} {size} {count}\n", op.name()))?;
        let ready = self.read_line()?;
        if ready != "READY" {
            return Err(PeerError::Protocol(format!(
                "expected READY, got {ready:?}"
            )));
        }
        let sge = [self.mr.sge(0, size)];
        let sge_read = [self.mr.sge(half, size)];
        let (remote_addr, rkey) = (self.remote_addr, self.rkey);
        let wr = match op {
            BwOp::Write => SendWr::new(1, WrOpcode::RdmaWrite { remote_addr, rkey }, &sge),
            BwOp::Read => SendWr::new(1, WrOpcode::RdmaRead { remote_addr, rkey }, &sge_read),
            BwOp::Send => SendWr::new(1, WrOpcode::Send, &sge),
        };
        const MODERATION: u64 = 16;
        let mut wc = [Wc::EMPTY; 64];
        let (mut posted, mut done) = (0u64, 0u64);
        let start = Instant::now();
        let mut last_progress = Instant::now();
        let mut unloaded = 0u64;
        while done < count {
            while posted < count && posted - done < u64::from(TX_DEPTH) {
                let mut w = wr;
                w.signaled = (posted + 1) % MODERATION == 0 || posted + 1 == count;
                w.wr_id = posted + 1;
                let r = match self.unload.as_mut() {
                    Some(UnloadEnd::Initiator(path, decider)) if op == BwOp::Write => {
                        if decider.unload(remote_addr, size, false) {
                            let r = path.post(&mut self.qp, w.wr_id, remote_addr, rkey, &want);
                            unloaded += u64::from(r.is_ok());
                            r
                        } else {
                            self.qp.post_send(&[w])
                        }
                    }
                    _ => self.qp.post_send(&[w]),
                };
                match r {
                    Ok(()) => posted += 1,
                    Err(VerbsError::QueueFull) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            let n = self.reap(&mut wc)?;
            for w in &wc[..n] {
                done = done.max(w.wr_id);
            }
            if n > 0 {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > self.timeout {
                return Err(PeerError::Protocol(format!(
                    "{} {size} B: stalled at {done} of {count}",
                    op.name()
                )));
            }
        }
        if op != BwOp::Send {
            self.send_line(&format!("END {unloaded}\n"))?;
        }
        // For SEND the run ends when the server has every message.
        let reply = self.read_line()?;
        let seconds = start.elapsed().as_secs_f64();
        let crc = reply
            .strip_prefix("DONE ")
            .and_then(|c| u32::from_str_radix(c, 16).ok())
            .ok_or_else(|| PeerError::Protocol(format!("expected DONE, got {reply:?}")))?;
        let intact = match op {
            BwOp::Read => {
                let mut got = vec![0; size];
                self.mr.read(half, &mut got);
                got == want
            }
            _ => crc == crc32fast::hash(&want),
        };
        if !intact {
            return Err(PeerError::Protocol(format!(
                "{} {size} B: the data did not arrive intact",
                op.name()
            )));
        }
        Ok(BwResult {
            messages: count,
            bytes: count * size as u64,
            seconds,
        })
    }

    /// An unload target: takes unloaded WRITEs until `total` have been taken since the
    /// connection began (their completions may trail the client's).
    fn take_unloaded(&mut self, total: u64, wc: &mut [Wc]) -> Result<()> {
        let taken = |p: &Peer| match &p.unload {
            Some(UnloadEnd::Target(t)) => t.placed + t.refused,
            _ => u64::MAX,
        };
        let base = self.unloaded_before;
        let deadline = Instant::now() + self.timeout;
        while taken(self) < base + total {
            self.reap(wc)?;
            self.idle(deadline)?;
        }
        self.unloaded_before = base + total;
        Ok(())
    }

    /// WRITEs this end unloaded (an initiator) or took from its staging slots (a target).
    pub fn unloaded(&self) -> u64 {
        match &self.unload {
            Some(UnloadEnd::Initiator(path, _)) => path.sent(),
            Some(UnloadEnd::Target(t)) => t.placed + t.refused,
            None => 0,
        }
    }

    /// This end's counters: its port's (RoCE and Ethernet drops by reason) and its QP's.
    pub fn counters(&mut self) -> Result<[(&'static str, fld_host::NamedCounters); 2]> {
        Ok([
            ("port", self.ctx.port_counters()?),
            ("qp", self.ctx.qp_counters(&self.qp)?),
        ])
    }

    /// The attributes this end's QP holds, as the card reports them (QUERY_QP).
    pub fn qp_attr(&mut self) -> Result<QpAttr> {
        Ok(self.ctx.query_qp(&self.qp)?)
    }

    /// Tells the server to stop.
    pub fn quit(&mut self) -> Result<()> {
        self.send_line("QUIT\n")
    }

    /// The server: answers the client's runs until it says `QUIT`.
    pub fn serve(&mut self) -> Result<()> {
        let mut wc = [Wc::EMPTY; 64];
        loop {
            let cmd = self.read_line()?;
            let mut f = cmd.split_whitespace();
            match f.next() {
                Some("QUIT") => return Ok(()),
                Some("RUN") => {}
                _ => return Err(PeerError::Protocol(format!("unexpected {cmd:?}"))),
            }
            let (op, size, count) = match (f.next(), f.next(), f.next()) {
                (Some(op), Some(size), Some(count)) => (
                    op.to_string(),
                    size.parse::<usize>()
                        .map_err(|_| PeerError::Protocol(cmd.clone()))?,
                    count
                        .parse::<u64>()
                        .map_err(|_| PeerError::Protocol(cmd.clone()))?,
                ),
                _ => return Err(PeerError::Protocol(format!("bad {cmd:?}"))),
            };
            if size > self.mr.len() {
                return Err(PeerError::Protocol(format!(
                    "{size} B: larger than the buffer"
                )));
            }
            let rsge = [self.mr.sge(0, size)];
            match op.as_str() {
                "send" => {
                    let mut posted = u64::from(RX_DEPTH).min(count);
                    self.post_receives(&rsge, posted)?;
                    self.send_line("READY\n")?;
                    let mut received = 0u64;
                    let mut last_progress = Instant::now();
                    while received < count {
                        self.progress()?;
                        let n = self.reap(&mut wc)?;
                        received += n as u64;
                        let more = (count - posted).min(n as u64);
                        if more > 0 {
                            self.post_receives(&rsge, more)?;
                            posted += more;
                        }
                        if n > 0 {
                            last_progress = Instant::now();
                        } else if last_progress.elapsed() > self.timeout {
                            return Err(PeerError::Protocol(format!(
                                "send {size} B: {received} of {count} arrived"
                            )));
                        }
                    }
                }
                "write" | "read" => {
                    if op == "read" {
                        self.mr.write(0, &pattern(size));
                    }
                    self.send_line("READY\n")?;
                    // The card serves the client's requests until it says END (or goes away).
                    let mut polls = 0u32;
                    let unloaded = loop {
                        self.progress()?;
                        self.reap(&mut wc)?;
                        polls = polls.wrapping_add(1);
                        if polls.is_multiple_of(64) {
                            if let Some(l) = self.try_line()? {
                                match l.strip_prefix("END").map(|n| n.trim().parse::<u64>()) {
                                    Some(Ok(n)) => break n,
                                    Some(Err(_)) if l == "END" => break 0,
                                    _ => {
                                        return Err(PeerError::Protocol(format!(
                                            "unexpected {l:?}"
                                        )))
                                    }
                                }
                            }
                        }
                    };
                    self.take_unloaded(unloaded, &mut wc)?;
                }
                other => return Err(PeerError::Protocol(format!("{other}: unknown operation"))),
            }
            let mut got = vec![0; size];
            self.mr.read(0, &mut got);
            self.send_line(&format!("DONE {:x}\n", crc32fast::hash(&got)))?;
        }
    }
}
