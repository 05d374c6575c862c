//! Two machines in one process for RDMA: two cards whose uplinks are joined by a cable, an RC
//! QP on each card's first NIC function through the verbs API, connected to each other, and a
//! runner that steps both cards — or card A only, with card B's engine on a thread of its own
//! ([`RdmaPair::set_peer_thread`]), as the second machine would run beside the first. `fldemu
//! rc-bw` and `fldemu rc-lat` measure on it, in the spirit of perftest's
//! `ib_{write,read,send}_bw` and `ib_send_lat`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fld_abi::wire::roce::ipv4_gid;
use fld_device::card::{Card, CardConfig};
use fld_device::nic::NicConfig;
use fld_device::wire::link;
use fld_driver::inprocess::{EngineThread, InProcessHost};
use fld_host::verbs::*;

/// One machine's side.
pub struct Side {
    pub card: Arc<Card>,
    host: Arc<InProcessHost>,
    pub ctx: Context,
    pub cq: Cq,
    pub qp: Qp,
    pub mr: Mr,
    _pd: Pd,
}

/// The two machines.
pub struct RdmaPair {
    /// Card B's engine on a thread of its own, while set: first, so that it stops before the
    /// sides' objects are destroyed.
    b_engine: Option<EngineThread>,
    pub a: Side,
    pub b: Side,
}

/// The operation a bandwidth run moves data with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BwOp {
    Write,
    Read,
    Send,
}

impl BwOp {
    pub fn name(self) -> &'static str {
        match self {
            BwOp::Write => "write",
            BwOp::Read => "read",
            BwOp::Send => "send",
        }
    }
}

/// A bandwidth run's figures.
#[derive(Clone, Copy, Debug)]
pub struct BwResult {
    pub messages: u64,
    pub bytes: u64,
    pub seconds: f64,
}

impl BwResult {
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds / 1e9
    }
    pub fn mmsgs(&self) -> f64 {
        self.messages as f64 / self.seconds / 1e6
    }
}

/// A latency run's figures (one-way: half the round trip), in microseconds.
#[derive(Clone, Copy, Debug)]
pub struct LatResult {
    pub median_us: f64,
    pub p99_us: f64,
    pub iterations: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RdmaBenchError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Driver(#[from] fld_driver::DriverError),
    #[error("{0}")]
    Failed(String),
}

type Result<T> = std::result::Result<T, RdmaBenchError>;

/// Send work requests kept outstanding (perftest's default tx depth).
pub const TX_DEPTH: u32 = 128;
/// Receives posted ahead (perftest's default rx depth).
pub const RX_DEPTH: u32 = 512;

/// What one end of a bandwidth run needs on `ctx`'s device: a PD, a region of `buf` bytes open
/// to every access, one CQ and an RC QP with [`TX_DEPTH`] sends and [`RX_DEPTH`] receives of
/// one SGE, signalling only what is asked.
pub fn bw_endpoint(
    ctx: &mut Context,
    buf: usize,
    max_inline_data: u32,
) -> std::result::Result<(Pd, Mr, Cq, Qp), VerbsError> {
    let pd = ctx.alloc_pd()?;
    let mr = ctx.reg_mr(&pd, buf, access::ALL)?;
    let cq = ctx.create_cq(TX_DEPTH + RX_DEPTH + 64, None)?;
    let qp = ctx.create_qp(
        &pd,
        &QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: TX_DEPTH,
                max_recv_wr: RX_DEPTH,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data,
            },
            sq_sig_all: false,
            out_of_order: ctx.reorders(),
        },
    )?;
    Ok((pd, mr, cq, qp))
}

fn side(card_id: u16, ip: [u8; 4], buf: usize) -> Result<Side> {
    let card = Card::new(CardConfig {
        nic: NicConfig {
            card_id,
            ..Default::default()
        },
        ..Default::default()
    });
    let host = InProcessHost::new(card.clone(), 2 * buf + (64 << 20))?;
    let fid = card
        .nic
        .function_id(0)
        .ok_or(RdmaBenchError::Failed("no NIC function".into()))?;
    let mut ctx = Context::open(host.device(fid))?;
    ctx.add_ip(std::net::Ipv4Addr::from(ip).into())?;
    let (pd, mr, cq, qp) = bw_endpoint(&mut ctx, buf, 0)?;
    Ok(Side {
        card,
        host,
        ctx,
        cq,
        qp,
        mr,
        _pd: pd,
    })
}

fn connect(s: &mut Side, peer_qpn: u32, peer_ip: [u8; 4], mtu: u8, timeout: u8) -> Result<()> {
    s.ctx.init_rc(&s.qp, access::REMOTE)?;
    let c = RcConnection {
        path_mtu: mtu,
        timeout,
        ..RcConnection::new(peer_qpn, ipv4_gid(peer_ip))
    };
    s.ctx.connect_rc(&s.qp, &c)?;
    Ok(())
}

impl RdmaPair {
    /// Two machines with registered buffers of `buf` bytes, connected at path MTU code `mtu`,
    /// their QPs' local ACK timeout 4.096 µs × 2^`timeout` (IBA 9.7.6.1.3).
    pub fn new(buf: usize, mtu: u8, timeout: u8) -> Result<Self> {
        let (ipa, ipb) = ([10, 7, 0, 1], [10, 7, 0, 2]);
        let mut a = side(1, ipa, buf)?;
        let mut b = side(2, ipb, buf)?;
        let (cable_a, cable_b) = link(8192);
        a.card.nic.set_uplink(Box::new(cable_a));
        b.card.nic.set_uplink(Box::new(cable_b));
        let (ma, mb) = (a.ctx.mac(), b.ctx.mac());
        a.ctx.add_neighbor(ipb, mb);
        b.ctx.add_neighbor(ipa, ma);
        let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
        connect(&mut a, qb, ipb, mtu, timeout)?;
        connect(&mut b, qa, ipa, mtu, timeout)?;
        Ok(RdmaPair {
            b_engine: None,
            a,
            b,
        })
    }

    /// Runs card B's engine on a thread of its own (`true`), spinning on a core while the
    /// calling thread steps card A and drives both ends' verbs, or steps both cards on the
    /// calling thread again (`false`). Card B then meets the run only through the cable and its
    /// own rings, as the second machine does.
    pub fn set_peer_thread(&mut self, own: bool) -> Result<()> {
        self.b_engine = None;
        if own {
            self.b_engine = Some(
                self.b
                    .host
                    .spawn_engine_thread()
                    .map_err(|e| RdmaBenchError::Failed(format!("card B's engine thread: {e}")))?,
            );
        }
        Ok(())
    }

    /// Each card's counters: its port's (RoCE and Ethernet drops by reason) and its QP's.
    pub fn counters(&mut self) -> Result<[(&'static str, fld_host::NamedCounters); 4]> {
        Ok([
            ("card A port", self.a.ctx.port_counters()?),
            ("card A qp", self.a.ctx.qp_counters(&self.a.qp)?),
            ("card B port", self.b.ctx.port_counters()?),
            ("card B qp", self.b.ctx.qp_counters(&self.b.qp)?),
        ])
    }

    /// Both cards one step (card A only while card B has a thread of its own).
    fn step(&self) {
        self.a.card.poll();
        if self.b_engine.is_none() {
            self.b.card.poll();
        }
    }

    /// Waits for the next completions of `side`; any error status fails the run.
    fn reap(side: &mut Side, wc: &mut [Wc]) -> Result<usize> {
        let n = side.cq.poll(wc);
        if let Some(w) = wc[..n].iter().find(|w| w.status != WcStatus::Success) {
            return Err(RdmaBenchError::Failed(format!("completion {w:?}")));
        }
        Ok(n)
    }

    /// `count` messages of `size` bytes from A with `op`, [`TX_DEPTH`] outstanding; for SEND,
    /// B keeps [`RX_DEPTH`] receives posted. Data lands at the start of the peer's buffer (or,
    /// for READ, of A's second half).
    pub fn bandwidth(&mut self, op: BwOp, size: usize, count: u64) -> Result<BwResult> {
        let half = self.a.mr.len() / 2;
        let sge_a = [self.a.mr.sge(0, size)];
        let sge_read = [self.a.mr.sge(half, size)];
        let rsge = [self.b.mr.sge(0, size)];
        let (remote_addr, rkey) = (self.b.mr.addr(), self.b.mr.rkey());
        let mut recv_posted = 0u64;
        if op == BwOp::Send {
            let n = u64::from(RX_DEPTH).min(count);
            let wrs: Vec<(u64, &[fld_abi::nic::Sge])> = (0..n).map(|_| (0, &rsge[..])).collect();
            self.b.qp.post_recv(&wrs)?;
            recv_posted = n;
        }
        let wr = match op {
            BwOp::Write => SendWr::new(1, WrOpcode::RdmaWrite { remote_addr, rkey }, &sge_a),
            BwOp::Read => SendWr::new(1, WrOpcode::RdmaRead { remote_addr, rkey }, &sge_read),
            BwOp::Send => SendWr::new(1, WrOpcode::Send, &sge_a),
        };
        // Every 16th WR is signalled, as perftest's CQ moderation does; the last always is.
        const MODERATION: u64 = 16;
        let mut wc = [Wc::EMPTY; 64];
        let (mut posted, mut done, mut received) = (0u64, 0u64, 0u64);
        let start = Instant::now();
        let mut last_progress = Instant::now();
        while done < count || (op == BwOp::Send && received < count) {
            while posted < count && posted - done < u64::from(TX_DEPTH) {
                let mut w = wr;
                w.signaled = (posted + 1) % MODERATION == 0 || posted + 1 == count;
                w.wr_id = posted + 1;
                match self.a.qp.post_send(&[w]) {
                    Ok(()) => posted += 1,
                    Err(VerbsError::QueueFull) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            self.step();
            let n = Self::reap(&mut self.a, &mut wc)?;
            for w in &wc[..n] {
                // A signalled completion retires every WR up to it.
                done = done.max(w.wr_id);
            }
            if op == BwOp::Send {
                let n = Self::reap(&mut self.b, &mut wc)?;
                received += n as u64;
                let more = (count - recv_posted).min(n as u64);
                if more > 0 {
                    let wrs: Vec<(u64, &[fld_abi::nic::Sge])> =
                        (0..more).map(|_| (0, &rsge[..])).collect();
                    self.b.qp.post_recv(&wrs)?;
                    recv_posted += more;
                }
            }
            if n > 0 {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > Duration::from_secs(30) {
                return Err(RdmaBenchError::Failed(format!(
                    "{} {size} B: stalled at {done} of {count}",
                    op.name()
                )));
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(BwResult {
            messages: count,
            bytes: count * size as u64,
            seconds,
        })
    }

    /// SEND ping-pong of `size` bytes, `iterations` round trips: the one-way latency's median
    /// and 99th percentile.
    pub fn latency(&mut self, size: usize, iterations: u64) -> Result<LatResult> {
        let sa = [self.a.mr.sge(0, size)];
        let sb = [self.b.mr.sge(0, size)];
        let (ra, rb) = ([self.a.mr.sge(4096, size)], [self.b.mr.sge(4096, size)]);
        let mut wc = [Wc::EMPTY; 8];
        let mut samples = Vec::with_capacity(iterations as usize);
        for i in 0..iterations + iterations / 10 {
            self.a.qp.post_recv(&[(0, &ra[..])])?;
            self.b.qp.post_recv(&[(0, &rb[..])])?;
            let t0 = Instant::now();
            self.a
                .qp
                .post_send(&[SendWr::new(1, WrOpcode::Send, &sa)])?;
            // B answers as soon as the message is in, A stops its clock when the answer is.
            let (mut b_got, mut a_got, mut a_sent, mut b_sent) = (false, false, false, false);
            let deadline = Instant::now() + Duration::from_secs(10);
            while !(a_got && a_sent && b_sent) {
                self.step();
                let n = Self::reap(&mut self.b, &mut wc)?;
                for w in &wc[..n] {
                    match w.opcode {
                        WcOpcode::Recv => {
                            b_got = true;
                            self.b
                                .qp
                                .post_send(&[SendWr::new(2, WrOpcode::Send, &sb)])?;
                        }
                        _ => b_sent = true,
                    }
                }
                let n = Self::reap(&mut self.a, &mut wc)?;
                for w in &wc[..n] {
                    match w.opcode {
                        WcOpcode::Recv => {
                            if !a_got {
                                // Warm-up rounds (the first tenth) are not counted.
                                if i >= iterations / 10 {
                                    samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
                                }
                            }
                            a_got = true;
                        }
                        _ => a_sent = true,
                    }
                }
                if Instant::now() > deadline {
                    return Err(RdmaBenchError::Failed(format!(
                        "latency {size} B: round {i} stalled (B received {b_got})"
                    )));
                }
            }
        }
        samples.sort_by(|x, y| x.total_cmp(y));
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Ok(LatResult {
            median_us: at(0.5),
            p99_us: at(0.99),
            iterations,
        })
    }

    /// Bytes `len` at `off` of A's and of B's buffer (for checks after a run).
    pub fn bytes(&self, side_b: bool, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        let mr = if side_b { &self.b.mr } else { &self.a.mr };
        mr.read(off, &mut v);
        v
    }

    pub fn fill(&self, side_b: bool, off: usize, data: &[u8]) {
        let mr = if side_b { &self.b.mr } else { &self.a.mr };
        mr.write(off, data);
    }
}
