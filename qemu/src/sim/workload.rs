//! The host software of a simulated run: event-driven applications on the verbs API. Each runs
//! when the runner wakes it (its card wrote to host memory, or it asked to continue), does what a
//! polling application does at that moment — look at memory, poll its CQ, post work requests —
//! and charges the host CPU for it ([`SimHost::cpu_begin`], [`SimHost::cpu_post`]).
//!
//! * [`WriteLatency`]: `ib_write_lat`'s ping-pong: A writes `size` bytes into B's buffer, B sees
//!   the last byte change and writes back; the one-way latency is half the round trip.
//! * [`WriteRate`]: `ib_write_bw`'s stream over many connections: each client keeps
//!   `outstanding` WRITEs in flight on each of its QPs to the server, signalling every 16th
//!   (perftest's CQ moderation), until every QP sent its share.
//! * [`RpcRate`]: StaR's RPC test (§4.2): one request and one answer in flight per
//!   connection, both by SEND into pre-posted receives.
//! * [`Flows`]: open-loop flows, one WRITE each, arriving as a Poisson process at a share of
//!   the senders' line rate; flow completion times and the throughput got for what was offered
//!   (LEFT Figure 1, and its Figures 4–5 in spirit).
//!
//! The Ethernet echoes of FlexDriver's §8.1 (CPU and FLD-E) are in [`super::echo`].

use fld_abi::nic::DEFAULT_PATH_MTU;
use fld_abi::wire::roce::ipv4_gid;
use fld_host::verbs::star::{ConnectionMode, StarHeld, StarPort, StarQp};
use fld_host::verbs::*;

use super::card::SimHost;
use super::events::{Ps, PS_PER_NS};
use super::SimError;

/// Work requests one application step posts at most before it lets the card see them.
const POST_BATCH: u64 = 32;
/// perftest's default completion moderation.
const MODERATION: u64 = 16;
/// Inline data a QP takes (perftest's default for WRITE latency).
const MAX_INLINE: u32 = 220;

/// An application spread over the hosts of a run.
pub trait Workload {
    /// Hosts whose application starts at time 0.
    fn starters(&self) -> Vec<usize>;
    /// Host `host`'s application runs at `now`; it may ask to run again at a later time.
    fn wake(&mut self, host: usize, now: Ps, hosts: &mut [SimHost])
        -> Result<Option<Ps>, SimError>;
    fn finished(&self) -> bool;
    /// The figures of the run, by name.
    fn metrics(&self) -> Vec<(&'static str, f64)>;
    /// Whether a step woken while its host's core is still busy with the previous one runs when
    /// the core is free rather than at once: the model acts when a step runs, so a card running
    /// batches would otherwise see a doorbell before the core could have rung it. The
    /// workloads that opt in are FlexDriver's rate workloads, whose cards stay busy; the older
    /// ones keep the results they were calibrated and documented with.
    fn waits_for_core(&self) -> bool {
        false
    }
}

/// One end's verbs objects.
pub(super) struct End {
    pub(super) pd: Pd,
    pub(super) mr: Mr,
    pub(super) cq: Cq,
}

pub(super) fn end(ctx: &mut Context, buf: usize, cq_entries: u32) -> Result<End, VerbsError> {
    let pd = ctx.alloc_pd()?;
    let mr = ctx.reg_mr(&pd, buf, access::ALL)?;
    let cq = ctx.create_cq(cq_entries, None)?;
    Ok(End { pd, mr, cq })
}

fn rc_qp(ctx: &mut Context, e: &End, send_wr: u32) -> Result<Qp, VerbsError> {
    qp_on(ctx, e, send_wr, 1, MAX_INLINE)
}

/// An RC QP on end `e` whose send and receive queues hold `send_wr` and `recv_wr`, one
/// scatter/gather entry each, inline data up to `inline` bytes; an out-of-order one when the
/// card reorders.
pub(super) fn qp_on(
    ctx: &mut Context,
    e: &End,
    send_wr: u32,
    recv_wr: u32,
    inline: u32,
) -> Result<Qp, VerbsError> {
    let out_of_order = ctx.reorders();
    ctx.create_qp(
        &e.pd,
        &QpInitAttr {
            send_cq: &e.cq,
            recv_cq: &e.cq,
            srq: None,
            cap: QpCap {
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: inline,
            },
            sq_sig_all: false,
            out_of_order,
        },
    )
}

/// Connects QP `qa` of host `a` and `qb` of host `b` to each other (no ARP: each side is told
/// the other's MAC). Packets carry ECT(0) so switches can mark them; the RNR timer is 10 us.
pub(super) fn connect(
    hosts: &mut [SimHost],
    (a, qa): (usize, &Qp),
    (b, qb): (usize, &Qp),
    path_mtu: u8,
) -> Result<(), VerbsError> {
    for (me, q, peer, pq) in [(a, qa, b, qb), (b, qb, a, qa)] {
        let (mac, ip) = (hosts[peer].mac, hosts[peer].ip);
        let ctx = &mut hosts[me].ctx;
        ctx.init_rc(q, access::REMOTE)?;
        // A 10 us RNR timer (IBA code 1): an out-of-order connection's responder answers a
        // full reorder unit with an RNR NAK, and the sender should not idle long for it.
        let c = RcConnection {
            dmac: mac,
            traffic_class: 0b10,
            path_mtu,
            min_rnr_timer: 1,
            ..RcConnection::new(pq.qp_num(), ipv4_gid(ip))
        };
        ctx.connect_rc(q, &c)?;
    }
    Ok(())
}

/// A StaR connection (`docs/nic-interface.md` §16): the client's QP `qc` on host `c` becomes the
/// stateful end of a connection to the server QP `qs` on host `s` (software, served by `port`),
/// whose regions it holds in `pd`. Returns what keeps the held regions alive.
fn connect_star(
    hosts: &mut [SimHost],
    (c, qc, pd): (usize, &Qp, &Pd),
    (s, qs): (usize, &StarQp),
    path_mtu: u8,
) -> Result<StarHeld, VerbsError> {
    let (cmac, cip, smac, sip) = (hosts[c].mac, hosts[c].ip, hosts[s].mac, hosts[s].ip);
    let to_client = RcConnection {
        dmac: cmac,
        traffic_class: 0b10,
        path_mtu,
        ..RcConnection::new(qc.qp_num(), ipv4_gid(cip))
    };
    hosts[s]
        .ctx
        .connect_star_server(qs, qc.qp_num(), &to_client)?;
    let to_server = RcConnection {
        dmac: smac,
        traffic_class: 0b10,
        path_mtu,
        ..RcConnection::new(qs.qp_num(), ipv4_gid(sip))
    };
    hosts[c]
        .ctx
        .connect_star_client(pd, qc, qs.offer(), &to_server)
}

fn reap(cq: &mut Cq, wc: &mut [Wc]) -> Result<usize, SimError> {
    let n = cq.poll(wc);
    if let Some(w) = wc[..n].iter().find(|w| w.status != WcStatus::Success) {
        return Err(SimError::Failed(format!("completion in error: {w:?}")));
    }
    Ok(n)
}

/// `ib_write_lat` between hosts `a` and `b`.
pub struct WriteLatency {
    a: usize,
    size: usize,
    inline: bool,
    ends: [End; 2],
    qps: [Qp; 2],
    /// The round trip whose number the last byte carries.
    rounds: Rounds,
    /// The round B last echoed.
    echoed: u64,
}

impl WriteLatency {
    pub fn new(
        hosts: &mut [SimHost],
        a: usize,
        b: usize,
        size: usize,
        iterations: u64,
        inline: bool,
    ) -> Result<Self, SimError> {
        // The first half receives, the second half is the source of this side's WRITEs.
        let buf = 2 * size.max(64).next_multiple_of(4096);
        let ea = end(&mut hosts[a].ctx, buf, 256)?;
        let eb = end(&mut hosts[b].ctx, buf, 256)?;
        let qa = rc_qp(&mut hosts[a].ctx, &ea, 64)?;
        let qb = rc_qp(&mut hosts[b].ctx, &eb, 64)?;
        connect(hosts, (a, &qa), (b, &qb), DEFAULT_PATH_MTU)?;
        Ok(WriteLatency {
            a,
            size: size.max(1),
            inline: inline && size <= MAX_INLINE as usize,
            ends: [ea, eb],
            qps: [qa, qb],
            rounds: Rounds::new(iterations),
            echoed: 0,
        })
    }

    fn mark(&self) -> u8 {
        (self.rounds.round % 255 + 1) as u8
    }

    /// Side `s` writes the current round's buffer to the other side.
    fn send(&mut self, s: usize, host: &mut SimHost) -> Result<(), SimError> {
        let e = &self.ends[s];
        let peer = &self.ends[1 - s];
        let source = e.mr.len() / 2;
        e.mr.write(source + self.size - 1, &[self.mark()]);
        let sge = [e.mr.sge(source, self.size)];
        let mut wr = SendWr::new(
            self.rounds.round,
            WrOpcode::RdmaWrite {
                remote_addr: peer.mr.addr(),
                rkey: peer.mr.rkey(),
            },
            &sge,
        );
        wr.inline = self.inline;
        self.qps[s].post_send(&[wr])?;
        host.cpu_post(1);
        Ok(())
    }

    fn arrived(&self, s: usize) -> bool {
        let mut last = [0u8];
        self.ends[s].mr.read(self.size - 1, &mut last);
        last[0] == self.mark()
    }
}

impl Workload for WriteLatency {
    fn starters(&self) -> Vec<usize> {
        vec![self.a]
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let s = if host == self.a { 0 } else { 1 };
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        let mut wc = [Wc::EMPTY; 16];
        while reap(&mut self.ends[s].cq, &mut wc)? > 0 {}
        let r = &mut self.rounds;
        if r.round == 0 {
            if s == 0 {
                // The first round starts here.
                r.start_next(t);
                self.send(0, h)?;
            }
            return Ok(None);
        }
        if r.finished() || !self.arrived(s) {
            return Ok(None);
        }
        let r = &mut self.rounds;
        if s == 1 {
            // B echoes each round once.
            if self.echoed < r.round {
                self.echoed = r.round;
                self.send(1, h)?;
            }
            return Ok(None);
        }
        if r.samples.len() as u64 >= r.round {
            return Ok(None);
        }
        if r.end(t) {
            r.start_next(t);
            self.send(0, h)?;
        }
        Ok(None)
    }

    fn finished(&self) -> bool {
        self.rounds.finished()
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let Some(rtt) = Percentiles::of(&self.rounds.samples) else {
            return Vec::new();
        };
        vec![
            ("latency_us", rtt.median / 2.0),
            ("latency_p99_us", rtt.p99 / 2.0),
            ("latency_mean_us", rtt.mean / 2.0),
            ("rtt_us", rtt.median),
        ]
    }
}

/// The round trips of a ping-pong: the current one (from 1; 0 before the first) and the times
/// of those done.
pub(super) struct Rounds {
    iterations: u64,
    pub(super) round: u64,
    started_at: Ps,
    pub(super) samples: Vec<Ps>,
}

impl Rounds {
    pub(super) fn new(iterations: u64) -> Self {
        Rounds {
            iterations,
            round: 0,
            started_at: 0,
            samples: Vec::with_capacity(iterations as usize),
        }
    }

    /// Round `round + 1` starts at `t`.
    pub(super) fn start_next(&mut self, t: Ps) {
        self.round += 1;
        self.started_at = t;
    }

    /// The current round ended at `t`; whether another should start.
    pub(super) fn end(&mut self, t: Ps) -> bool {
        self.samples.push(t - self.started_at);
        !self.finished()
    }

    pub(super) fn finished(&self) -> bool {
        self.samples.len() as u64 >= self.iterations
    }
}

/// Median, 99th and 99.9th percentiles and mean of round trips, in microseconds.
pub(super) struct Percentiles {
    pub(super) median: f64,
    pub(super) p99: f64,
    pub(super) p999: f64,
    pub(super) mean: f64,
}

impl Percentiles {
    pub(super) fn of(samples: &[Ps]) -> Option<Self> {
        let mut us: Vec<f64> = samples.iter().map(|&p| p as f64 / 1e6).collect();
        us.sort_by(f64::total_cmp);
        let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
        (!us.is_empty()).then(|| Percentiles {
            median: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            mean: us.iter().sum::<f64>() / us.len() as f64,
        })
    }
}

/// One connection of a [`WriteRate`] run.
struct Conn {
    client: usize,
    qp: Qp,
    /// Where in the server's buffer this connection writes.
    remote_offset: u64,
    posted: u64,
    done: u64,
}

/// Where a rate workload measures: from the completion that ends the first tenth (warm-up:
/// connections starting, contexts first fetched) to the one that starts the last tenth
/// (cool-down: connections that finished early leave the rest fewer and slower, as the
/// stateful ones of an auto-adapted mix do before its stateless ones).
pub(super) struct SteadyWindow {
    total: u64,
    /// Time and completions at the window's two ends.
    start: Option<(Ps, u64)>,
    stop: Option<(Ps, u64)>,
    /// When the last completion came.
    end: Option<Ps>,
}

impl SteadyWindow {
    pub(super) fn new(total: u64) -> Self {
        SteadyWindow {
            total,
            start: None,
            stop: None,
            end: None,
        }
    }

    /// `completed` operations have completed by `t`.
    pub(super) fn note(&mut self, completed: u64, t: Ps) {
        let tenth = self.total / 10;
        if self.start.is_none() && completed >= tenth {
            self.start = Some((t, completed));
        }
        if self.stop.is_none() && completed >= self.total - tenth {
            self.stop = Some((t, completed));
        }
        if self.end.is_none() && completed >= self.total {
            self.end = Some(t);
        }
    }

    /// Completions per second within the window.
    pub(super) fn per_second(&self) -> Option<f64> {
        let ((t0, n0), (t1, n1)) = (self.start?, self.stop?);
        Some(match t1 > t0 {
            true => (n1 - n0) as f64 / ((t1 - t0) as f64 / 1e12),
            false => 0.0,
        })
    }
}

/// `ib_write_bw` from many clients' QPs to one server.
pub struct WriteRate {
    size: usize,
    outstanding: u64,
    moderation: u64,
    per_conn: u64,
    conns: Vec<Conn>,
    /// Per host: its end (clients and server) and its connections (clients).
    ends: Vec<Option<End>>,
    by_client: Vec<Vec<usize>>,
    server_addr: u64,
    server_rkey: u32,
    clients: Vec<usize>,
    /// StaR: the server's port and the regions the clients hold (kept for the run).
    _star: Option<(StarPort, Vec<StarHeld>)>,
    /// Connections the server serves statelessly.
    stateless: usize,
    completed: u64,
    total: u64,
    first_post: Option<Ps>,
    window: SteadyWindow,
}

impl WriteRate {
    /// Connection `i` runs from host `conn_clients[i]` to `server`; `mode` says which are StaR
    /// connections, whose server keeps no state on its NIC (`docs/nic-interface.md` §16).
    pub fn new(
        hosts: &mut [SimHost],
        conn_clients: &[usize],
        server: usize,
        size: usize,
        outstanding: u32,
        messages: u64,
        mode: ConnectionMode,
    ) -> Result<Self, SimError> {
        let size = size.max(1);
        let outstanding = u64::from(outstanding.max(1));
        let moderation = if outstanding.is_multiple_of(MODERATION) {
            MODERATION
        } else {
            1
        };
        let n_conns = conn_clients.len().max(1) as u64;
        let per_conn = messages.div_ceil(n_conns).max(1);
        let slot = size.next_multiple_of(64) as u64;
        let cq_entries =
            |conns: u64| (conns * outstanding.div_ceil(moderation) + 64).min((1 << 16) - 1) as u32;
        let mut ends: Vec<Option<End>> = (0..hosts.len()).map(|_| None).collect();
        let server_buf = (slot * n_conns).next_multiple_of(4096) as usize;
        ends[server] = Some(end(&mut hosts[server].ctx, server_buf, 64)?);
        let mut clients: Vec<usize> = conn_clients.to_vec();
        clients.sort_unstable();
        clients.dedup();
        for &c in &clients {
            let mine = conn_clients.iter().filter(|&&x| x == c).count() as u64;
            ends[c] = Some(end(
                &mut hosts[c].ctx,
                slot.next_multiple_of(4096) as usize,
                cq_entries(mine),
            )?);
        }
        let mut conns = Vec::new();
        let mut by_client = vec![Vec::new(); hosts.len()];
        let mut star = match mode {
            ConnectionMode::Stateful => None,
            _ => Some((hosts[server].ctx.star_port(256)?, Vec::new())),
        };
        let mut stateless = 0;
        for &c in conn_clients {
            let e = ends[c].as_ref().expect("made above");
            let qp = rc_qp(&mut hosts[c].ctx, e, outstanding as u32)?;
            let se = ends[server].as_ref().expect("made above");
            let star = match hosts[server].ctx.serve_statelessly(mode)? {
                true => star.as_mut(),
                false => None,
            };
            if let Some((port, held)) = star {
                stateless += 1;
                // The server answers WRITEs from the packets alone: its QP is software and
                // never posts.
                let sq = hosts[server].ctx.create_star_qp(
                    port,
                    &se.cq,
                    &se.cq,
                    QpCap::default(),
                    &[&se.mr],
                )?;
                held.push(connect_star(
                    hosts,
                    (c, &qp, &e.pd),
                    (server, &sq),
                    DEFAULT_PATH_MTU,
                )?);
            } else {
                let sq = rc_qp(&mut hosts[server].ctx, se, 1)?;
                connect(hosts, (c, &qp), (server, &sq), DEFAULT_PATH_MTU)?;
                // The server's QP only answers; its handle is not needed again (the QP lives
                // until the card goes).
                std::mem::forget(sq);
            }
            by_client[c].push(conns.len());
            conns.push(Conn {
                client: c,
                qp,
                remote_offset: slot * conns.len() as u64,
                posted: 0,
                done: 0,
            });
        }
        let se = ends[server].as_ref().expect("made above");
        let total = per_conn * n_conns;
        Ok(WriteRate {
            size,
            outstanding,
            moderation,
            per_conn,
            server_addr: se.mr.addr(),
            server_rkey: se.mr.rkey(),
            conns,
            ends,
            by_client,
            clients,
            _star: star,
            stateless,
            completed: 0,
            total,
            first_post: None,
            window: SteadyWindow::new(total),
        })
    }

    /// Posts up to [`POST_BATCH`] WRITEs on host `c`'s connections; whether more could go.
    fn post(&mut self, c: usize, h: &mut SimHost) -> Result<bool, SimError> {
        let e = self.ends[c].as_ref().expect("client end");
        let sge = [e.mr.sge(0, self.size)];
        let mut budget = POST_BATCH;
        for &i in &self.by_client[c] {
            let conn = &mut self.conns[i];
            while budget > 0
                && conn.posted < self.per_conn
                && conn.posted - conn.done < self.outstanding
            {
                let seq = conn.posted + 1;
                let mut wr = SendWr::new(
                    (i as u64) << 32 | seq,
                    WrOpcode::RdmaWrite {
                        remote_addr: self.server_addr + conn.remote_offset,
                        rkey: self.server_rkey,
                    },
                    &sge,
                );
                wr.signaled = seq.is_multiple_of(self.moderation) || seq == self.per_conn;
                conn.qp.post_send(&[wr])?;
                conn.posted = seq;
                budget -= 1;
                h.cpu_post(1);
                self.first_post.get_or_insert(h.cpu_free);
            }
            if budget == 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl Workload for WriteRate {
    fn starters(&self) -> Vec<usize> {
        self.clients.clone()
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        if !self.clients.contains(&host) {
            return Ok(None);
        }
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        let mut wc = [Wc::EMPTY; 64];
        loop {
            let cq = &mut self.ends[host].as_mut().expect("client end").cq;
            let n = reap(cq, &mut wc)?;
            if n == 0 {
                break;
            }
            for w in &wc[..n] {
                let conn = &mut self.conns[(w.wr_id >> 32) as usize];
                let seq = w.wr_id & 0xffff_ffff;
                if seq > conn.done && conn.client == host {
                    self.completed += seq - conn.done;
                    conn.done = seq;
                }
            }
        }
        self.window.note(self.completed, t);
        let more = self.post(host, h)?;
        Ok(more.then_some(h.cpu_free))
    }

    fn finished(&self) -> bool {
        self.window.end.is_some()
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let (Some(rate), Some(e)) = (self.window.per_second(), self.window.end) else {
            return Vec::new();
        };
        let mops = rate / 1e6;
        vec![
            ("mops", mops),
            ("gbps", mops * 1e6 * self.size as f64 * 8.0 / 1e9),
            ("messages", self.total as f64),
            ("run_us", (e - self.first_post.unwrap_or(0)) as f64 / 1e6),
            ("stateless_connections", self.stateless as f64),
        ]
    }
}

/// One connection of an [`RpcRate`] run.
struct RpcConn {
    /// Where this connection's receives sit in its client's buffer.
    client_slot: usize,
    client_qp: Qp,
    server_qp: ServerQp,
    /// RPCs issued and answered.
    issued: u64,
    answered: u64,
    /// SENDs posted on each side (every [`RPC_SIGNAL_EVERY`]th is signalled).
    client_sends: u64,
    server_sends: u64,
}

/// The server's end of an RPC connection: a QP on its NIC, or (StaR) a QP in its driver.
enum ServerQp {
    Rc(Box<Qp>),
    Star(StarQp),
}

impl ServerQp {
    fn post_recv(
        &mut self,
        star: Option<&mut StarPort>,
        wr: (u64, &[Sge]),
        now: Ps,
    ) -> Result<(), VerbsError> {
        match (self, star) {
            (ServerQp::Star(q), Some(port)) => q.post_recv(port, &[wr], now / PS_PER_NS),
            (ServerQp::Rc(q), _) => q.post_recv(&[wr]),
            (ServerQp::Star(_), None) => Err(VerbsError::Invalid("a StaR QP without its port")),
        }
    }

    fn post_send(
        &mut self,
        star: Option<&mut StarPort>,
        wr: &SendWr<'_>,
        now: Ps,
    ) -> Result<(), VerbsError> {
        match (self, star) {
            (ServerQp::Star(q), Some(port)) => {
                q.post_send(port, std::slice::from_ref(wr), now / PS_PER_NS)
            }
            (ServerQp::Rc(q), _) => q.post_send(std::slice::from_ref(wr)),
            (ServerQp::Star(_), None) => Err(VerbsError::Invalid("a StaR QP without its port")),
        }
    }
}

/// Receives each side keeps posted per connection; a connection has one RPC outstanding, so
/// two are always enough (one in use, one ready).
const RPC_RECEIVES: u64 = 2;
/// SENDs signal one completion in this many (the send queue holds twice as many).
const RPC_SIGNAL_EVERY: u64 = 8;

/// StaR §4.2's RPC application: each connection has one RPC outstanding. The client SENDs a
/// `request`-byte request; the server's application, when the request's receive completes,
/// reposts that receive and SENDs a `response`-byte answer; the answer's arrival completes the
/// RPC and the client issues the next. Receives are posted before the run starts on both sides
/// and reposted as they complete, so no SEND waits for one (no RNR).
pub struct RpcRate {
    request: usize,
    response: usize,
    per_conn: u64,
    conns: Vec<RpcConn>,
    by_client: Vec<Vec<usize>>,
    server: usize,
    clients: Vec<usize>,
    /// Per host: its end (registered buffer and the CQ of all its QPs).
    ends: Vec<Option<End>>,
    /// Connections whose next SEND waits for the host's CPU: per host.
    ready: Vec<std::collections::VecDeque<usize>>,
    /// Clients whose connections issued their first RPC.
    started: Vec<bool>,
    /// StaR: the server's port and the regions the clients hold.
    star: Option<(StarPort, Vec<StarHeld>)>,
    /// Connections the server serves statelessly.
    stateless: usize,
    completed: u64,
    total: u64,
    first_post: Option<Ps>,
    window: SteadyWindow,
}

impl RpcRate {
    /// Connection `i` runs from host `conn_clients[i]` to `server`, with path MTU `path_mtu`
    /// (an IBA code).
    pub fn new(
        hosts: &mut [SimHost],
        conn_clients: &[usize],
        server: usize,
        (request, response): (usize, usize),
        rpcs: u64,
        path_mtu: u8,
        mode: ConnectionMode,
    ) -> Result<Self, SimError> {
        let (request, response) = (request.max(1), response.max(1));
        let n = conn_clients.len().max(1);
        let per_conn = rpcs.div_ceil(n as u64).max(1);
        // Server buffer: every connection's posted request receives, then one response source.
        let req_slot = request.next_multiple_of(64);
        let resp_slot = response.next_multiple_of(64);
        let cq_for = |conns: usize| {
            let per = RPC_RECEIVES + 2;
            (conns as u64 * per + 64).min((1 << 16) - 1) as u32
        };
        let mut ends: Vec<Option<End>> = (0..hosts.len()).map(|_| None).collect();
        let server_buf = (n * RPC_RECEIVES as usize * req_slot + resp_slot).next_multiple_of(4096);
        ends[server] = Some(end(&mut hosts[server].ctx, server_buf, cq_for(n))?);
        let mut clients: Vec<usize> = conn_clients.to_vec();
        clients.sort_unstable();
        clients.dedup();
        for &c in &clients {
            let mine = conn_clients.iter().filter(|&&x| x == c).count();
            // Every connection's posted response receives, then one request source.
            let buf = (mine * RPC_RECEIVES as usize * resp_slot + req_slot).next_multiple_of(4096);
            ends[c] = Some(end(&mut hosts[c].ctx, buf, cq_for(mine))?);
        }
        let mut conns = Vec::with_capacity(n);
        let mut by_client = vec![Vec::new(); hosts.len()];
        let mut client_index = vec![0usize; hosts.len()];
        let mut star = match mode {
            ConnectionMode::Stateful => None,
            // Room for every connection's receive WQEPs posted at once (a WQEP's slot is free
            // again only when the NIC has sent it).
            _ => {
                let entries = (n as u32 * 2 * RPC_RECEIVES as u32).clamp(1 << 10, 1 << 15);
                Some((hosts[server].ctx.star_port(entries)?, Vec::new()))
            }
        };
        let mut stateless = 0;
        for (i, &c) in conn_clients.iter().enumerate() {
            let ce = ends[c].as_ref().expect("made above");
            let se = ends[server].as_ref().expect("made above");
            let client_qp = rpc_qp(&mut hosts[c].ctx, ce)?;
            let this_star = match hosts[server].ctx.serve_statelessly(mode)? {
                true => star.as_mut(),
                false => None,
            };
            let server_qp = match this_star {
                Some((port, held)) => {
                    stateless += 1;
                    let cap = QpCap {
                        max_send_wr: 2 * RPC_SIGNAL_EVERY as u32,
                        max_recv_wr: RPC_RECEIVES as u32,
                        ..Default::default()
                    };
                    let q =
                        hosts[server]
                            .ctx
                            .create_star_qp(port, &se.cq, &se.cq, cap, &[&se.mr])?;
                    held.push(connect_star(
                        hosts,
                        (c, &client_qp, &ce.pd),
                        (server, &q),
                        path_mtu,
                    )?);
                    ServerQp::Star(q)
                }
                None => {
                    let q = rpc_qp(&mut hosts[server].ctx, se)?;
                    connect(hosts, (c, &client_qp), (server, &q), path_mtu)?;
                    ServerQp::Rc(Box::new(q))
                }
            };
            let k = client_index[c];
            client_index[c] += 1;
            let mut conn = RpcConn {
                client_slot: k,
                client_qp,
                server_qp,
                issued: 0,
                answered: 0,
                client_sends: 0,
                server_sends: 0,
            };
            for r in 0..RPC_RECEIVES {
                let at = (i * RPC_RECEIVES as usize + r as usize) * req_slot;
                let sge = [se.mr.sge(at, request)];
                let port = star.as_mut().map(|(p, _)| p);
                conn.server_qp
                    .post_recv(port, (rpc_wr_id(i, r), &sge[..]), 0)?;
                let at = (k * RPC_RECEIVES as usize + r as usize) * resp_slot;
                let sge = [ce.mr.sge(at, response)];
                conn.client_qp.post_recv(&[(rpc_wr_id(i, r), &sge[..])])?;
            }
            by_client[c].push(i);
            conns.push(conn);
        }
        let total = per_conn * n as u64;
        Ok(RpcRate {
            request,
            response,
            per_conn,
            conns,
            by_client,
            server,
            clients,
            ends,
            ready: vec![Default::default(); hosts.len()],
            started: vec![false; hosts.len()],
            star,
            stateless,
            completed: 0,
            total,
            first_post: None,
            window: SteadyWindow::new(total),
        })
    }

    /// Host `h`'s completions: requests arrived (server) or answers arrived (client).
    fn reap(&mut self, h: usize, now: Ps) -> Result<(), SimError> {
        let mut wc = [Wc::EMPTY; 64];
        loop {
            let e = self.ends[h].as_mut().expect("an end");
            let n = reap(&mut e.cq, &mut wc)?;
            if n == 0 {
                return Ok(());
            }
            for w in wc[..n].iter().filter(|w| w.opcode == WcOpcode::Recv) {
                let (i, slot) = ((w.wr_id >> 8) as usize, w.wr_id & 0xff);
                let conn = &mut self.conns[i];
                // The receive goes back at once: the next message of this connection needs it.
                let e = self.ends[h].as_ref().expect("an end");
                let size = if h == self.server {
                    self.request
                } else {
                    self.response
                };
                let base = if h == self.server {
                    i
                } else {
                    conn.client_slot
                };
                let at = (base * RPC_RECEIVES as usize + slot as usize) * size.next_multiple_of(64);
                let sge = [e.mr.sge(at, size)];
                if h == self.server {
                    let port = self.star.as_mut().map(|(p, _)| p);
                    conn.server_qp.post_recv(port, (w.wr_id, &sge[..]), now)?;
                } else {
                    conn.client_qp.post_recv(&[(w.wr_id, &sge[..])])?;
                }
                if h == self.server {
                    self.ready[h].push_back(i);
                } else {
                    conn.answered += 1;
                    self.completed += 1;
                    if conn.issued < self.per_conn {
                        self.ready[h].push_back(i);
                    }
                }
            }
            self.window.note(self.completed, now);
        }
    }

    /// Posts up to [`POST_BATCH`] SENDs of host `h` (requests or answers); whether more wait.
    fn post(&mut self, h: usize, host: &mut SimHost) -> Result<bool, SimError> {
        let server = h == self.server;
        let (len, source) = if server {
            (
                self.response,
                self.ends[h].as_ref().expect("an end").mr.len()
                    - self.response.next_multiple_of(64),
            )
        } else {
            (
                self.request,
                self.ends[h].as_ref().expect("an end").mr.len() - self.request.next_multiple_of(64),
            )
        };
        let mut budget = POST_BATCH;
        while budget > 0 {
            let Some(i) = self.ready[h].pop_front() else {
                return Ok(false);
            };
            let e = self.ends[h].as_ref().expect("an end");
            let sge = [e.mr.sge(source, len)];
            let conn = &mut self.conns[i];
            let sends = if server {
                &mut conn.server_sends
            } else {
                conn.issued += 1;
                &mut conn.client_sends
            };
            *sends += 1;
            let mut wr = SendWr::new(*sends, WrOpcode::Send, &sge);
            wr.signaled = sends.is_multiple_of(RPC_SIGNAL_EVERY);
            if server {
                let port = self.star.as_mut().map(|(p, _)| p);
                conn.server_qp.post_send(port, &wr, host.cpu_free)?;
            } else {
                conn.client_qp.post_send(&[wr])?;
            }
            // The post and the receive reposted for it.
            host.cpu_post(2);
            self.first_post.get_or_insert(host.cpu_free);
            budget -= 1;
        }
        Ok(!self.ready[h].is_empty())
    }
}

fn rpc_wr_id(conn: usize, slot: u64) -> u64 {
    (conn as u64) << 8 | slot
}

fn rpc_qp(ctx: &mut Context, e: &End) -> Result<Qp, VerbsError> {
    qp_on(ctx, e, 2 * RPC_SIGNAL_EVERY as u32, RPC_RECEIVES as u32, 0)
}

impl Workload for RpcRate {
    fn starters(&self) -> Vec<usize> {
        self.clients.clone()
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        if host != self.server && !std::mem::replace(&mut self.started[host], true) {
            // The first wake of a client: every connection issues its first RPC.
            self.ready[host].extend(self.by_client[host].iter().copied());
        }
        if host == self.server {
            // StaR: the server's driver takes its EAs and sends unacknowledged WQEPs again.
            if let Some((port, _)) = self.star.as_mut() {
                port.progress(t / PS_PER_NS)?;
            }
        }
        self.reap(host, t)?;
        let more = self.post(host, h)?;
        if more {
            return Ok(Some(h.cpu_free));
        }
        // The StaR server's driver has a timer: WQEPs not acknowledged in time go again.
        let timer = match (&self.star, host == self.server) {
            (Some((port, _)), true) => port.next_deadline().map(|ns| ns * PS_PER_NS),
            _ => None,
        };
        Ok(timer.filter(|&at| at > t))
    }

    fn finished(&self) -> bool {
        self.window.end.is_some()
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let (Some(rate), Some(e)) = (self.window.per_second(), self.window.end) else {
            return Vec::new();
        };
        let mrps = rate / 1e6;
        let bytes = (self.request + self.response) as f64;
        vec![
            ("mrps", mrps),
            ("gbps", mrps * 1e6 * bytes * 8.0 / 1e9),
            ("rpcs", self.total as f64),
            ("run_us", (e - self.first_post.unwrap_or(0)) as f64 / 1e6),
            ("stateless_connections", self.stateless as f64),
        ]
    }
}

/// LEFT's Figure 7 at one connection count: the on-chip memory of a receiver's reorder
/// structures, as the NIC builds them (`fld_device::nic::reorder::on_chip_bits`). Nothing runs.
pub fn reorder_memory(
    mode: fld_device::nic::reorder::ReceiverMode,
    connections: u64,
    bdp: u32,
) -> Computed {
    let bits = fld_device::nic::reorder::on_chip_bits(mode, connections, bdp);
    let kb = |bits: u64| bits as f64 / 8.0 / 1000.0;
    Computed::new(vec![
        ("memory_kb", bits.kilobytes()),
        ("connections_kb", kb(bits.connections)),
        ("pool_kb", kb(bits.pool)),
        ("caches_kb", kb(bits.caches)),
        ("gather_kb", kb(bits.gather)),
    ])
}

/// A figure computed, not run (a memory count, a bound, a fitted rate): a workload that is
/// done before it starts.
pub struct Computed {
    metrics: Vec<(&'static str, f64)>,
}

impl Computed {
    pub fn new(metrics: Vec<(&'static str, f64)>) -> Self {
        Computed { metrics }
    }
}

impl Workload for Computed {
    fn starters(&self) -> Vec<usize> {
        Vec::new()
    }

    fn wake(&mut self, _: usize, _: Ps, _: &mut [SimHost]) -> Result<Option<Ps>, SimError> {
        Ok(None)
    }

    fn finished(&self) -> bool {
        true
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        self.metrics.clone()
    }
}

/// Send WRs a flow connection holds; more flows wait in the application, their time counted.
const FLOW_SQ_DEPTH: u32 = 256;

/// One sender's open-loop flows: when each arrives, how big it is, when it completed.
struct FlowSender {
    host: usize,
    qp: Qp,
    /// Where this sender writes in its receiver's buffer.
    remote_addr: u64,
    rkey: u32,
    arrivals: Vec<(Ps, usize)>,
    posted: usize,
    /// Each completed flow's FCT and size, in completion order.
    done: Vec<(Ps, usize)>,
}

/// Open-loop flows (LEFT Figure 1, and Figures 4–5 in spirit): each sender has one RC
/// connection to its receiver and starts flows as a Poisson process — each flow one WRITE of a
/// size drawn from `sizes` — at `load` of its line rate on average, whatever the network does.
/// A flow completes when its WRITE's completion is polled; its flow completion time (FCT) runs
/// from its arrival, waiting in the application included. The figures: FCTs (mean, median,
/// p99); the throughput the senders got as a fraction of what they offered — the span over
/// which the flows arrived over the span until the last completed; and the connections'
/// throughput — each flow's size over its FCT as a share of the line rate, averaged.
pub struct Flows {
    senders: Vec<FlowSender>,
    by_host: Vec<Option<usize>>,
    ends: Vec<Option<End>>,
    last_completion: Ps,
    line_gbps: f64,
}

impl Flows {
    /// Sender `pairs[i].0` sends to `pairs[i].1` at `load` of `line_gbps`; `flows` flows each,
    /// sizes drawn from `sizes` with `seed`.
    pub fn new(
        hosts: &mut [SimHost],
        pairs: &[(usize, usize)],
        sizes: &[usize],
        (load, line_gbps): (f64, f64),
        flows: usize,
        seed: u64,
    ) -> Result<Self, SimError> {
        let largest = sizes.iter().copied().max().unwrap_or(1).max(1);
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64;
        let slot = largest.next_multiple_of(4096);
        let mut ends: Vec<Option<End>> = (0..hosts.len()).map(|_| None).collect();
        let fan_in = |r: usize| pairs.iter().filter(|p| p.1 == r).count();
        for &(s, r) in pairs {
            if ends[s].is_none() {
                ends[s] = Some(end(&mut hosts[s].ctx, slot, 2 * FLOW_SQ_DEPTH)?);
            }
            if ends[r].is_none() {
                ends[r] = Some(end(&mut hosts[r].ctx, slot * fan_in(r), 64)?);
            }
        }
        let mut rng = fastrand::Rng::with_seed(seed);
        // Mean gap between arrivals for `load` of the line, in ps.
        let gap_ps = mean * 8.0 / (load.max(1e-6) * line_gbps) * 1e3;
        let mut senders = Vec::new();
        let mut by_host = vec![None; hosts.len()];
        let mut taken = vec![0u64; hosts.len()];
        for &(s, r) in pairs {
            let qs = qp_on(
                &mut hosts[s].ctx,
                ends[s].as_ref().expect("made above"),
                FLOW_SQ_DEPTH,
                1,
                0,
            )?;
            let qr = qp_on(
                &mut hosts[r].ctx,
                ends[r].as_ref().expect("made above"),
                1,
                1,
                0,
            )?;
            connect(hosts, (s, &qs), (r, &qr), DEFAULT_PATH_MTU)?;
            std::mem::forget(qr);
            let mut t = 0.0f64;
            let arrivals = (0..flows)
                .map(|_| {
                    t += -gap_ps * (1.0 - rng.f64()).ln();
                    (t as Ps, sizes[rng.usize(..sizes.len())])
                })
                .collect();
            let re = ends[r].as_ref().expect("made above");
            by_host[s] = Some(senders.len());
            senders.push(FlowSender {
                host: s,
                qp: qs,
                remote_addr: re.mr.addr() + taken[r] * slot as u64,
                rkey: re.mr.rkey(),
                arrivals,
                posted: 0,
                done: Vec::with_capacity(flows),
            });
            taken[r] += 1;
        }
        Ok(Flows {
            last_completion: 0,
            line_gbps,
            senders,
            by_host,
            ends,
        })
    }
}

impl Workload for Flows {
    fn starters(&self) -> Vec<usize> {
        self.senders.iter().map(|s| s.host).collect()
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let Some(i) = self.by_host.get(host).copied().flatten() else {
            return Ok(None);
        };
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        let e = self.ends[host].as_mut().expect("sender end");
        let s = &mut self.senders[i];
        let mut wc = [Wc::EMPTY; 64];
        loop {
            let n = reap(&mut e.cq, &mut wc)?;
            if n == 0 {
                break;
            }
            for w in &wc[..n] {
                let (arrival, size) = s.arrivals[w.wr_id as usize];
                s.done.push((t.saturating_sub(arrival).max(1), size));
                self.last_completion = self.last_completion.max(t);
            }
        }
        // Every flow that has arrived goes out, as far as the send queue has room.
        let mut posted = 0;
        while s.posted < s.arrivals.len()
            && s.arrivals[s.posted].0 <= t
            && s.posted - s.done.len() < FLOW_SQ_DEPTH as usize
        {
            let size = s.arrivals[s.posted].1;
            let sge = [e.mr.sge(0, size)];
            // Signalled (SendWr's default): each flow's completion ends it.
            let wr = SendWr::new(
                s.posted as u64,
                WrOpcode::RdmaWrite {
                    remote_addr: s.remote_addr,
                    rkey: s.rkey,
                },
                &sge,
            );
            s.qp.post_send(&[wr])?;
            s.posted += 1;
            posted += 1;
        }
        if posted > 0 {
            h.cpu_post(posted);
        }
        // Wake at the next arrival (a full send queue waits for completions instead).
        let next = s
            .arrivals
            .get(s.posted)
            .filter(|_| s.posted - s.done.len() < FLOW_SQ_DEPTH as usize)
            .map(|a| a.0.max(h.cpu_free));
        Ok(next)
    }

    fn finished(&self) -> bool {
        self.senders
            .iter()
            .all(|s| s.done.len() == s.arrivals.len())
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let done = || self.senders.iter().flat_map(|s| &s.done);
        let fct: Vec<Ps> = done().map(|d| d.0).collect();
        let Some(p) = Percentiles::of(&fct) else {
            return Vec::new();
        };
        let arrivals = || self.senders.iter().flat_map(|s| &s.arrivals);
        let first_arrival = arrivals().map(|a| a.0).min().unwrap_or(0);
        let last_arrival = arrivals().map(|a| a.0).max().unwrap_or(0);
        let bytes: u64 = arrivals().map(|a| a.1 as u64).sum();
        // Throughput got over throughput offered: the flows arrived over one span and were done
        // over another (an ideal fabric ends them as they arrive, a ratio of 1).
        let done_span = self.last_completion.saturating_sub(first_arrival).max(1);
        let offered = last_arrival.saturating_sub(first_arrival).max(1);
        let gbps = bytes as f64 * 8.0 / (done_span as f64 / 1e3);
        // A flow's rate: bits per ps = Tbit/s, over the line's Gbit/s.
        let rate =
            |&(fct, size): &(Ps, usize)| size as f64 * 8.0 / fct as f64 * 1e3 / self.line_gbps;
        vec![
            ("fct_avg_us", p.mean),
            ("fct_p50_us", p.median),
            ("fct_p99_us", p.p99),
            ("gbps", gbps),
            ("throughput_ratio", offered as f64 / done_span as f64),
            (
                "flow_rate_ratio",
                done().map(rate).sum::<f64>() / fct.len() as f64,
            ),
            ("flows", fct.len() as f64),
        ]
    }
}
