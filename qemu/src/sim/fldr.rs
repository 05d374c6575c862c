//! FlexDriver's FLD-R echo (§8.1.2) in virtual time: a client's RC queue pair SENDs messages
//! to a queue pair FLD owns (FLD-R: the NIC's transport, FLD's shared multi-packet receive
//! queue, `FldR::connect_queue`), the echo accelerator behind FLD reassembles each message and
//! SENDs it back whole on the same queue pair, and the client checks every echo byte for byte.
//! No host CPU serves the server side.
//!
//! * closed loop ([`FldrEcho`] with a window): `window` messages in flight, the rate of verified
//!   echoes (Figure 7b's right column);
//! * open loop (with a load): messages arrive as a Poisson process at a share of the line's
//!   message rate, and each one's latency runs from its arrival to its echo's completion
//!   (Figure 7c).
//!
//! Remote: the client on another host's card. Local: the client's queue pair on NIC function 0
//! of the server's own card, looped to FLD-R's function 1 by the eSwitch.
//!
//! The same queue pairs carry FlexDriver's disaggregated ZUC service (§7, Figure 8a) when the
//! ZUC accelerator sits behind FLD: each message is a ZUC request (64-byte header, then the
//! data), each echo its response, checked against the software ZUC; the accelerator's modules are
//! timed by [`super::params::ZucParams`].
//!
//! Left out: several client queue pairs (one connection carries the load) and the control
//! plane's TCP exchange (the sim connects the two ends directly).

use std::collections::VecDeque;

use fld_abi::wire::roce::ipv4_gid;
use fld_abi::wire::zuc::{ZucHeader, HEADER_LEN, ZUC_UDP_PORT};
use fld_device::accel::rdma::RdmaEcho;
use fld_device::accel::zuc_accel::{ZucAccel, MAX_RDMA_REQUEST};
use fld_device::fld::perf_model::ROCE_PACKET_OVERHEAD;
use fld_host::cryptodev::{complete_from, request_message, run_ops, sample_ops, CryptoOp};
use fld_host::cryptodev::{OpStatus, SoftZuc};
use fld_host::fldr::FldR;
use fld_host::verbs::*;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};

use super::card::{AccelTiming, SimHost};
use super::events::Ps;
use super::params::ZucParams;
use super::workload::{end, qp_on, End, Percentiles, SteadyWindow, Workload};
use super::SimError;

/// Messages the echo accelerator holds when its queue lacks credits.
const ECHO_HOLD: usize = 4096;
/// Work requests one client step posts at most.
const BURST: usize = 32;

/// What serves the messages behind FLD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// FlexDriver's FLD-R echo (§8.1.2): every message back whole.
    Echo,
    /// The disaggregated ZUC cipher (§7): EEA3 requests of `size` data bytes.
    Zuc,
}

impl Service {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "echo" => Some(Service::Echo),
            "zuc" => Some(Service::Zuc),
            _ => None,
        }
    }

    /// The message carrying `size` bytes of data.
    fn message_len(self, size: usize) -> usize {
        match self {
            Service::Echo => size,
            Service::Zuc => HEADER_LEN + size,
        }
    }
}

/// How the client offers its messages.
#[derive(Clone, Copy, Debug)]
pub enum Offer {
    /// `window` messages in flight, the next sent as soon as an echo returns.
    Window(u32),
    /// Poisson arrivals at `load` of the line's message rate (`line_gbps` of wire bits per
    /// message, RoCEv2 headers included); at most `window` in flight, later arrivals wait.
    Load {
        load: f64,
        line_gbps: f64,
        window: u32,
    },
}

/// The FLD-R echo between a client queue pair and one of FLD's.
pub struct FldrEcho {
    client: usize,
    server: usize,
    server_mac: [u8; 6],
    /// Keeps the server's FLD-R control plane (its queue pair and FLD binding) alive.
    _server: Box<FldR>,
    end: End,
    qp: Qp,
    service: Service,
    /// Data bytes per message, and the message's whole length.
    size: usize,
    message_len: usize,
    window: u32,
    /// ZUC: the requests in flight, each with the software ZUC's result to check against.
    zuc_inflight: VecDeque<(CryptoOp, CryptoOp)>,
    seed: u64,
    total: u64,
    /// Arrival times of the open loop (empty in the closed loop), and the next to draw.
    arrivals: Option<Arrivals>,
    /// When each message in flight arrived (open loop) or was sent (closed loop), by sequence.
    started: VecDeque<Ps>,
    sent: u64,
    received: u64,
    verified_bytes: u64,
    mismatches: u64,
    latencies: Vec<Ps>,
    steady: SteadyWindow,
    wc: Vec<Wc>,
    buf: Vec<u8>,
    expect: Vec<u8>,
}

/// Poisson arrivals.
struct Arrivals {
    rng: SmallRng,
    gaps: Exp<f64>,
    next: Ps,
    /// Arrived and not yet sent.
    waiting: VecDeque<Ps>,
}

impl Arrivals {
    fn draw(&mut self) -> Ps {
        self.gaps.sample(&mut self.rng).ceil() as Ps
    }
}

/// Message `seq`'s bytes: its sequence number, then a ramp that depends on it.
fn fill_message(out: &mut [u8], seq: u64) {
    let n = out.len().min(8);
    out[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    for (k, b) in out.iter_mut().enumerate().skip(8) {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(k as u8);
    }
}

impl FldrEcho {
    /// Binds FLD-R on `server`'s NIC function 1 (address `server_ip`) with the echo behind FLD,
    /// and connects a queue pair of `client`'s verbs context (NIC function 0) to it.
    pub fn new(
        hosts: &mut [SimHost],
        (client, server): (usize, usize),
        server_ip: [u8; 4],
        (size, packets, path_mtu): (usize, u64, u8),
        (service, offer): (Service, Offer),
        seed: u64,
    ) -> Result<Self, SimError> {
        let size = size.clamp(8, MAX_RDMA_REQUEST - service.message_len(0));
        let message_len = service.message_len(size);
        let asked = match offer {
            Offer::Window(w) | Offer::Load { window: w, .. } => w.clamp(1, 256),
        };
        let h = &mut hosts[server];
        match service {
            Service::Echo => h
                .card
                .fld
                .set_accelerator(Box::new(RdmaEcho::new(MAX_RDMA_REQUEST, ECHO_HOLD))),
            Service::Zuc => {
                h.card
                    .fld
                    .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0)));
                h.accel_timing = AccelTiming::Zuc(ZucParams::default());
            }
        }
        let mut cp = FldR::open(
            h.device(1)?,
            h.fld_device(),
            std::net::Ipv4Addr::from(server_ip),
            0,
            1,
        )
        .map_err(|e| SimError::Failed(format!("FLD-R: {e}")))?;
        let server_mac = cp.context().mac();
        let window = asked.min(safe_window(&cp, message_len, 128usize << path_mtu));
        let (client_mac, client_ip) = (hosts[client].mac, hosts[client].ip);
        let ctx = &mut hosts[client].ctx;
        let end = end(ctx, 2 * window as usize * message_len, 4 * window)?;
        let mut qp = qp_on(ctx, &end, window, window, 0)?;
        ctx.init_rc(&qp, 0)?;
        let server_qpn = cp
            .connect_queue(
                0,
                &RcConnection {
                    dmac: client_mac,
                    path_mtu,
                    ..RcConnection::new(qp.qp_num(), ipv4_gid(client_ip))
                },
            )
            .map_err(|e| SimError::Failed(format!("FLD-R queue: {e}")))?;
        ctx.connect_rc(
            &qp,
            &RcConnection {
                dmac: server_mac,
                path_mtu,
                ..RcConnection::new(server_qpn, ipv4_gid(server_ip))
            },
        )?;
        for slot in 0..window {
            let sge = [end.mr.sge(recv_at(slot, message_len), message_len)];
            qp.post_recv(&[(u64::from(slot), &sge)])?;
        }
        let arrivals = match offer {
            Offer::Window(_) => None,
            Offer::Load {
                load, line_gbps, ..
            } => {
                let mtu = 128usize << path_mtu;
                let wire_bits =
                    (size as f64 + ROCE_PACKET_OVERHEAD * size.div_ceil(mtu).max(1) as f64) * 8.0;
                let per_second = load * line_gbps * 1e9 / wire_bits;
                let gaps = Exp::new(per_second / 1e12)
                    .map_err(|_| SimError::Scenario("loads must be > 0".into()))?;
                let mut a = Arrivals {
                    rng: SmallRng::seed_from_u64(seed),
                    gaps,
                    next: 0,
                    waiting: VecDeque::new(),
                };
                a.next = a.draw();
                Some(a)
            }
        };
        Ok(FldrEcho {
            client,
            server,
            server_mac,
            _server: Box::new(cp),
            end,
            qp,
            service,
            size,
            message_len,
            window,
            zuc_inflight: VecDeque::new(),
            seed,
            total: packets.max(10),
            arrivals,
            started: VecDeque::new(),
            sent: 0,
            received: 0,
            verified_bytes: 0,
            mismatches: 0,
            latencies: Vec::new(),
            steady: SteadyWindow::new(packets.max(10)),
            wc: vec![Wc::EMPTY; 2 * BURST],
            buf: vec![0; message_len],
            expect: vec![0; message_len],
        })
    }

    /// The server's FLD-R function, which the network must route to.
    pub fn route(&self) -> (usize, [u8; 6]) {
        (self.server, self.server_mac)
    }

    /// Takes completions: echoes are checked and their receive reposted, sends free their slot.
    fn reap(&mut self, t: Ps) -> Result<usize, SimError> {
        let n = self.end.cq.poll(&mut self.wc);
        for i in 0..n {
            let w = self.wc[i];
            if w.status != WcStatus::Success {
                return Err(SimError::Failed(format!(
                    "FLD-R completion in error: {w:?}"
                )));
            }
            if w.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = w.wr_id as u32;
            let at = recv_at(slot, self.message_len);
            let len = (w.byte_len as usize).min(self.message_len);
            self.end.mr.read(at, &mut self.buf[..len]);
            if self.is_answer(len) {
                self.verified_bytes += self.size as u64;
            } else {
                self.mismatches += 1;
            }
            if let Some(s) = self.started.pop_front() {
                self.latencies.push(t.saturating_sub(s));
            }
            self.received += 1;
            self.steady.note(self.received, t);
            let sge = [self.end.mr.sge(at, self.message_len)];
            self.qp.post_recv(&[(u64::from(slot), &sge)])?;
        }
        Ok(n)
    }

    /// Whether the `len` bytes received are the answer to the oldest message in flight: its
    /// echo, or its ZUC response matching the software ZUC's result.
    fn is_answer(&mut self, len: usize) -> bool {
        let seq = self.received;
        match self.service {
            Service::Echo => {
                fill_message(&mut self.expect, seq);
                len == self.message_len && self.buf == self.expect
            }
            Service::Zuc => {
                let Some((mut got, want)) = self.zuc_inflight.pop_front() else {
                    return false;
                };
                let Ok(h) = ZucHeader::new_checked(&self.buf[..len]) else {
                    return false;
                };
                complete_from(&mut got, &h);
                h.request_id() == seq + 1
                    && got.status == OpStatus::Success
                    && got.data == want.data
            }
        }
    }

    /// Writes message `seq` at `at` in the client's region.
    fn write_message(&mut self, seq: u64, at: usize) {
        match self.service {
            Service::Echo => fill_message(&mut self.buf, seq),
            Service::Zuc => {
                let op =
                    sample_ops(1, self.size, false, self.seed ^ seq.wrapping_mul(0x9e37)).remove(0);
                let want = run_ops(&mut SoftZuc::default(), vec![op.clone()], 1).remove(0);
                request_message(&op, seq + 1, &mut self.buf);
                self.zuc_inflight.push_back((op, want));
            }
        }
        self.end.mr.write(at, &self.buf[..self.message_len]);
    }

    /// Sends what the window (and, open loop, the arrivals so far) allow; returns how many.
    fn send_more(&mut self, h: &mut SimHost, t: Ps) -> Result<usize, SimError> {
        let mut n = 0;
        while n < BURST && self.sent < self.total {
            if self.sent - self.received >= u64::from(self.window) {
                break;
            }
            let began = match &mut self.arrivals {
                None => t,
                Some(a) => match a.waiting.pop_front() {
                    Some(at) => at,
                    None => break,
                },
            };
            let slot = (self.sent % u64::from(self.window)) as u32;
            let at = send_at(slot, self.window, self.message_len);
            self.write_message(self.sent, at);
            let sge = [self.end.mr.sge(at, self.message_len)];
            let mut wr = SendWr::new(self.sent, WrOpcode::Send, &sge);
            wr.signaled = true;
            self.qp.post_send(&[wr])?;
            self.started.push_back(began);
            self.sent += 1;
            n += 1;
        }
        if n > 0 {
            h.cpu_post(n as u64);
        }
        Ok(n)
    }

    /// Open loop: every arrival up to `t` joins the waiting line; returns the next one's time.
    fn arrive_until(&mut self, t: Ps) -> Option<Ps> {
        let total = self.total;
        let a = self.arrivals.as_mut()?;
        let mut issued = self.sent + a.waiting.len() as u64;
        while a.next <= t && issued < total {
            a.waiting.push_back(a.next);
            let gap = a.draw();
            a.next += gap;
            issued += 1;
        }
        (issued < total).then_some(a.next)
    }
}

/// Messages of `size` bytes that may be in flight without overrunning FLD's shared receive
/// side, each of packets of at most `mtu` bytes
/// ([`fld_driver::fld::FldBinding::rx_packets_in_flight`]) — the FLD-R client library keeps its
/// window within it, as FLD-E's generator does (`fld_host::apps::fld_safe_window`).
fn safe_window(cp: &FldR, size: usize, mtu: usize) -> u32 {
    let packets = cp
        .binding()
        .rx_packets_in_flight(cp.fld().geometry(), mtu.min(size));
    (packets / size.div_ceil(mtu).max(1)).clamp(1, 256) as u32
}

fn recv_at(slot: u32, size: usize) -> usize {
    slot as usize * size
}

fn send_at(slot: u32, window: u32, size: usize) -> usize {
    (window + slot) as usize * size
}

impl Workload for FldrEcho {
    fn starters(&self) -> Vec<usize> {
        vec![self.client]
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        let got = self.reap(t)?;

        let next_arrival = self.arrive_until(t);
        let sent = self.send_more(h, t)?;
        let more = got == self.wc.len() || (sent == BURST && self.sent < self.total);
        let again = match (more, next_arrival) {
            (true, _) => Some(h.cpu_free),
            (false, Some(a)) => Some(a.max(h.cpu_free)),
            (false, None) => None,
        };
        Ok(again)
    }

    fn finished(&self) -> bool {
        self.received >= self.total
    }

    fn waits_for_core(&self) -> bool {
        true
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let mps = self.steady.per_second().unwrap_or(0.0);
        let mut m = vec![
            ("mpps", mps / 1e6),
            ("gbps", mps * self.size as f64 * 8.0 / 1e9),
            ("window", f64::from(self.window)),
            ("verified_bytes", self.verified_bytes as f64),
            ("mismatches", self.mismatches as f64),
        ];
        if let Some(l) = Percentiles::of(&self.latencies) {
            m.extend([
                ("median_us", l.median),
                ("p99_us", l.p99),
                ("mean_us", l.mean),
            ]);
        }
        m
    }
}
