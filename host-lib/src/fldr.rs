//! FLD-R (paper §5.3, §6): queue pairs of the NIC whose data path is the accelerator's. The
//! control plane here only makes them transport endpoints — it creates each QP with its send
//! ring in FLD's Tx-ring window, its completion queues in FLD's CQ windows and its receives on
//! FLD's shared multi-packet RQ, connects it to a client, and binds it to an FLD queue — while
//! the accelerator sends and receives on it through FLD.
//!
//! * [`FldR`] is the control plane: FLD bound to a NIC function, queues connected and released,
//!   and the NIC's asynchronous QP events (a queue pair that failed) turned into
//!   [`FldrEvent`]s. Recovery is the application's, as in verbs (§5.3 "Error Handling"):
//!   [`FldR::release_queue`] frees a failed queue for the next client.
//! * [`FldrServer`] is the control plane as a standard RDMA server: clients connect over TCP
//!   and exchange `LID:QPN:PSN:GID` as rdma-core's example programs do
//!   ([`crate::verbs::exchange`]); each client gets a queue of its own (one tenant per queue,
//!   §5.4) for as long as it keeps that TCP connection open.
//! * [`FldrClient`] is the client library: a verbs QP connected to a server's queue, with a
//!   ring of message slots for sends and receives.
//!
//! Nothing here steps a card: a runner does (or, in process, the verbs calls that wait).
//!
//! Left out: rdma_cm's connection manager protocol (the exchange is the examples' TCP one),
//! reconnecting a client to its failed queue (it must connect again).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fld_abi::nic::{qp_event, QpState, EQE_QP_EVENT};
use fld_abi::wire::roce::ipv4_gid;
use fld_driver::fld::{bind, FldBinding, FldDriver, FldRxLayout};
use fld_driver::nic::EventQueue;
use fld_driver::{DriverError, PciDevice};

use crate::verbs::exchange::{read_exact, write_all, Dest, WaitError, MESSAGE_LEN};
use crate::verbs::*;

/// Why an FLD-R call failed.
#[derive(Debug, thiserror::Error)]
pub enum FldrError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("connection exchange: {0}")]
    Exchange(String),
    #[error("every FLD-R queue is in use")]
    Full,
    #[error("{0}")]
    Invalid(&'static str),
}

impl From<std::io::Error> for FldrError {
    fn from(e: std::io::Error) -> Self {
        FldrError::Exchange(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, FldrError>;

/// What the NIC reported about an FLD-R queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FldrEvent {
    /// A client's exchange completed: `queue` is now its queue pair `qpn`.
    Connected { queue: u16, qpn: u32 },
    /// The first packet of the client arrived.
    Established { queue: u16 },
    /// The queue pair entered the error state (retries exhausted, a remote error, a NAK it
    /// could not take): FLD refuses the accelerator's sends on it until it is released.
    Failed { queue: u16, qpn: u32 },
    /// The server released a failed queue: it is free for the next client.
    Released { queue: u16 },
    /// The client closed its TCP connection (it ended, or its process did): the server
    /// released its queue, as rdma_cm's disconnect would.
    Disconnected { queue: u16 },
}

#[derive(Clone, Copy, Debug)]
struct Bound {
    qpn: u32,
    failed: bool,
}

/// The FLD-R control plane on one NIC function and the FLD function.
pub struct FldR {
    ctx: Context,
    /// The EQ of FLD's completion queues: the QP events of FLD-R queue pairs arrive here.
    eq: EventQueue,
    fld: FldDriver,
    binding: FldBinding,
    pd: Pd,
    gid: Gid,
    queues: Vec<Option<Bound>>,
    first_queue: u16,
}

impl FldR {
    /// Opens NIC function `nic_dev` with address `ip` and FLD `fld_dev`, binds FLD's completion
    /// queues and shared receive queue to the NIC, and reserves FLD queues
    /// `first_queue..first_queue + queues` for FLD-R.
    pub fn open(
        nic_dev: Arc<dyn PciDevice>,
        fld_dev: Arc<dyn PciDevice>,
        ip: Ipv4Addr,
        first_queue: u16,
        queues: u16,
    ) -> Result<Self> {
        let mut ctx = Context::open(nic_dev)?;
        let gid_index = ctx.add_ip(ip.into())?;
        let gid = ctx.query_gid(1, gid_index)?;
        let eq = ctx.driver().create_eq(8, 0)?;
        let mut fld = FldDriver::probe(fld_dev)?;
        if u32::from(first_queue) + u32::from(queues) > fld.geometry().tx_queues {
            return Err(FldrError::Invalid("more FLD-R queues than FLD has"));
        }
        let binding = bind(ctx.driver(), &eq, &mut fld, 0, FldRxLayout::default())?;
        let pd = ctx.alloc_pd()?;
        Ok(FldR {
            ctx,
            eq,
            fld,
            binding,
            pd,
            gid,
            queues: vec![None; queues as usize],
            first_queue,
        })
    }

    /// The RoCE address clients connect to.
    pub fn gid(&self) -> Gid {
        self.gid
    }
    pub fn context(&mut self) -> &mut Context {
        &mut self.ctx
    }
    pub fn fld(&self) -> &FldDriver {
        &self.fld
    }
    pub fn binding(&self) -> &FldBinding {
        &self.binding
    }

    /// The FLD queue a new client would get.
    pub fn free_queue(&self) -> Option<u16> {
        self.queues
            .iter()
            .position(Option::is_none)
            .map(|i| self.first_queue + i as u16)
    }

    /// The QPN bound to FLD queue `queue`, if any.
    pub fn queue_qpn(&self, queue: u16) -> Option<u32> {
        self.slot(queue).and_then(|b| b.map(|b| b.qpn))
    }

    fn slot(&self, queue: u16) -> Option<Option<Bound>> {
        let i = queue.checked_sub(self.first_queue)? as usize;
        self.queues.get(i).copied()
    }

    /// Makes FLD queue `queue` a queue pair connected as `c` describes (the peer's QPN, GID and
    /// PSN, this end's PSN) and binds it in FLD. The QP grants its peer no remote access: the
    /// accelerator's memory is not the client's to read or write, only to send to. Returns the
    /// QPN.
    pub fn connect_queue(&mut self, queue: u16, c: &RcConnection) -> Result<u32> {
        let i = queue
            .checked_sub(self.first_queue)
            .map(usize::from)
            .filter(|&i| i < self.queues.len())
            .ok_or(FldrError::Invalid("not an FLD-R queue"))?;
        if self.queues[i].is_some() {
            return Err(FldrError::Invalid("the queue is in use"));
        }
        let g = *self.fld.geometry();
        let (tx_cqn, rx_cqn, rqn) = (
            self.binding.tx_cqn,
            self.binding.rx_cqn,
            self.binding.rq.rqn,
        );
        let sq = self.fld.tx_ring_address(u32::from(queue));
        let qpn = self.ctx.driver().create_multi_packet_qp(
            self.pd.handle,
            tx_cqn,
            rx_cqn,
            rqn,
            sq,
            g.log_tx_ring,
        )?;
        let connected = self
            .ctx
            .init_rc_qpn(qpn, 0)
            .and_then(|()| self.ctx.connect_rc_qpn(qpn, c));
        if let Err(e) = connected {
            let _ = self.ctx.driver().destroy_qp_number(qpn);
            return Err(e.into());
        }
        if !self.fld.bind_rdma_queue(u32::from(queue), Some(qpn)) {
            let _ = self.ctx.driver().destroy_qp_number(qpn);
            return Err(FldrError::Invalid("FLD kept the queue's old binding"));
        }
        self.queues[i] = Some(Bound { qpn, failed: false });
        Ok(qpn)
    }

    /// Ends FLD queue `queue`'s queue pair: to the error state (the NIC flushes what it had
    /// not sent, so FLD frees the buffers), unbound in FLD, destroyed. The queue is free again.
    pub fn release_queue(&mut self, queue: u16) -> Result<()> {
        let Some(bound) = self.slot(queue).flatten() else {
            return Err(FldrError::Invalid("the queue is not connected"));
        };
        let err = fld_abi::nic::QpAttr {
            qp_state: QpState::Err as u8,
            ..Default::default()
        };
        self.ctx
            .driver()
            .modify_qp(bound.qpn, fld_abi::nic::qp_attr::STATE, &err)?;
        // The flush completions reach FLD as the card runs; FLD keeps a queue with packets in
        // flight bound, so wait (bounded) until it let go.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.fld.bind_rdma_queue(u32::from(queue), None) {
            if Instant::now() > deadline {
                return Err(FldrError::Invalid("FLD still has packets in flight"));
            }
            self.fld.device().run_device();
        }
        self.ctx.driver().destroy_qp_number(bound.qpn)?;
        let i = (queue - self.first_queue) as usize;
        self.queues[i] = None;
        Ok(())
    }

    /// The NIC's asynchronous events for FLD-R queue pairs since the last call.
    pub fn poll_events(&mut self, out: &mut Vec<FldrEvent>) {
        let mut seen = false;
        while let Some(e) = self.eq.poll() {
            seen = true;
            if e.event_type != EQE_QP_EVENT {
                continue;
            }
            let qpn = e.data.get();
            let Some(i) = self
                .queues
                .iter()
                .position(|b| b.is_some_and(|b| b.qpn == qpn))
            else {
                continue;
            };
            let queue = self.first_queue + i as u16;
            match e.subtype {
                qp_event::FATAL => {
                    if let Some(b) = self.queues[i].as_mut() {
                        b.failed = true;
                    }
                    self.fld.mark_failed(u32::from(queue));
                    log::warn!("FLD-R queue {queue} (QP {qpn:#x}) failed");
                    out.push(FldrEvent::Failed { queue, qpn });
                }
                qp_event::COMM_ESTABLISHED => out.push(FldrEvent::Established { queue }),
                _ => {}
            }
        }
        if seen {
            self.eq.arm();
        }
    }

    /// Whether FLD queue `queue` failed (an event said so).
    pub fn failed(&self, queue: u16) -> bool {
        self.slot(queue).flatten().is_some_and(|b| b.failed)
    }
}

/// A client whose exchange message has not arrived yet.
struct Pending {
    stream: TcpStream,
    got: Vec<u8>,
    since: Instant,
}

/// The FLD-R control plane as an RDMA server (§5.3 "FLD-R High-Level Abstraction"): every
/// client that connects over TCP and sends its `LID:QPN:PSN:GID` gets a queue pair bound to an
/// FLD queue of its own and the server's `LID:QPN:PSN:GID` back; a client the server cannot
/// take (every queue in use) is disconnected without an answer.
pub struct FldrServer {
    cp: FldR,
    listener: TcpListener,
    pending: Vec<Pending>,
    /// Each connected client's TCP connection, by queue: its end is the client's.
    sessions: Vec<(u16, TcpStream)>,
    next_psn: u32,
    /// The path MTU code the server's queue pairs use.
    pub path_mtu: u8,
}

/// How long a client may take to send its exchange message.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

impl FldrServer {
    /// Serves clients of `cp` on `listener`.
    pub fn new(cp: FldR, listener: TcpListener) -> Result<Self> {
        listener.set_nonblocking(true)?;
        Ok(FldrServer {
            cp,
            listener,
            pending: Vec::new(),
            sessions: Vec::new(),
            next_psn: 0x1000,
            path_mtu: fld_abi::nic::DEFAULT_PATH_MTU,
        })
    }

    pub fn control_plane(&mut self) -> &mut FldR {
        &mut self.cp
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    /// One round, never blocking: accepts clients, binds a queue to each whose message
    /// arrived, answers ARP, and reports what happened (connections and the NIC's events).
    pub fn poll(&mut self, events: &mut Vec<FldrEvent>) -> Result<()> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(true)?;
                    self.pending.push(Pending {
                        stream,
                        got: Vec::with_capacity(MESSAGE_LEN),
                        since: Instant::now(),
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let mut buf = [0u8; MESSAGE_LEN];
            let want = MESSAGE_LEN - p.got.len();
            let done = match p.stream.read(&mut buf[..want]) {
                Ok(0) => Some(None),
                Ok(n) => {
                    p.got.extend_from_slice(&buf[..n]);
                    (p.got.len() == MESSAGE_LEN).then(|| Dest::parse(&p.got))
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    (p.since.elapsed() > EXCHANGE_TIMEOUT).then_some(None)
                }
                Err(_) => Some(None),
            };
            match done {
                None => i += 1,
                Some(dest) => {
                    let p = self.pending.swap_remove(i);
                    if let Some(d) = dest {
                        match self.accept_client(p.stream, &d) {
                            Ok((ev, stream)) => {
                                if let FldrEvent::Connected { queue, .. } = ev {
                                    self.sessions.push((queue, stream));
                                }
                                events.push(ev);
                            }
                            Err(e) => log::info!("FLD-R client {}: {e}", d.describe()),
                        }
                    }
                }
            }
        }
        // A client whose TCP connection ended is gone: its queue is released.
        let mut i = 0;
        while i < self.sessions.len() {
            let mut b = [0u8; 64];
            let ended = match self.sessions[i].1.read(&mut b) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != ErrorKind::WouldBlock,
            };
            if !ended {
                i += 1;
                continue;
            }
            let (queue, _) = self.sessions.swap_remove(i);
            if self.cp.queue_qpn(queue).is_some() {
                match self.cp.release_queue(queue) {
                    Ok(()) => events.push(FldrEvent::Disconnected { queue }),
                    Err(e) => log::warn!("FLD-R queue {queue}: not released: {e}"),
                }
            }
        }
        self.cp.ctx.serve_neighbors()?;
        let seen = events.len();
        self.cp.poll_events(events);
        // The server's recovery policy: a failed queue pair is torn down and its FLD queue
        // offered to the next client (its own client must connect again).
        for i in seen..events.len() {
            if let FldrEvent::Failed { queue, .. } = events[i] {
                // Closing the client's TCP connection tells it too.
                self.sessions.retain(|s| s.0 != queue);
                match self.cp.release_queue(queue) {
                    Ok(()) => events.push(FldrEvent::Released { queue }),
                    Err(e) => log::warn!("FLD-R queue {queue}: not released: {e}"),
                }
            }
        }
        Ok(())
    }

    /// Binds a queue to the client `d` and answers with the queue pair's address.
    fn accept_client(&mut self, mut stream: TcpStream, d: &Dest) -> Result<(FldrEvent, TcpStream)> {
        let queue = self.cp.free_queue().ok_or(FldrError::Full)?;
        let psn = self.next_psn & 0xff_ffff;
        self.next_psn = self
            .next_psn
            .wrapping_mul(1_103_515_245)
            .wrapping_add(12345);
        let c = RcConnection {
            path_mtu: self.path_mtu,
            rq_psn: d.psn,
            sq_psn: psn,
            ..RcConnection::new(d.qpn, d.gid)
        };
        let qpn = self.cp.connect_queue(queue, &c)?;
        let me = Dest {
            lid: 0,
            qpn,
            psn,
            gid: self.cp.gid,
        };
        stream.set_nonblocking(false)?;
        stream.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
        if let Err(e) = stream.write_all(&me.message()) {
            let _ = self.cp.release_queue(queue);
            return Err(e.into());
        }
        log::info!(
            "FLD-R queue {queue}: QP {qpn:#x} for client {}",
            d.describe()
        );
        stream.set_nonblocking(true)?;
        Ok((FldrEvent::Connected { queue, qpn }, stream))
    }
}

/// Client-side settings.
#[derive(Clone, Copy, Debug)]
pub struct ClientConfig {
    /// Largest message sent or received.
    pub max_message: usize,
    /// Messages outstanding each way (send slots and posted receives).
    pub depth: u32,
    pub path_mtu: u8,
    /// How long the connection exchange may take.
    pub timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            max_message: 16 * 1024,
            depth: 64,
            path_mtu: fld_abi::nic::DEFAULT_PATH_MTU,
            timeout: Duration::from_secs(10),
        }
    }
}

/// The FLD-R client library: one RC queue pair connected to a server's FLD-R queue, messages
/// sent from and received into slots of one registered region.
pub struct FldrClient {
    qp: Qp,
    cq: Cq,
    mr: Mr,
    _pd: Pd,
    cfg: ClientConfig,
    /// Send slots not in use.
    free_send: Vec<u32>,
    wc: Vec<Wc>,
    /// Receive completions not yet handed to the application: (slot, length, immediate).
    arrived: std::collections::VecDeque<(u32, usize, Option<u32>)>,
    /// Send work requests that completed with an error.
    pub send_errors: u64,
    /// The server's queue pair.
    pub server_qpn: u32,
    scratch: Vec<u8>,
    /// The exchange's TCP connection, open for as long as the client is connected.
    _session: TcpStream,
}

/// Work request IDs: receive slots count up from 0, send slots from this base.
const SEND_WRID_BASE: u64 = 1 << 32;

impl FldrClient {
    /// Connects to the FLD-R server at `server` (TCP) through `ctx`'s port: creates the QP and
    /// its slots, exchanges addresses (the card keeps running and answering ARP meanwhile) and
    /// connects. `ctx` must have an address on the server's network.
    pub fn connect(ctx: &mut Context, server: SocketAddr, cfg: ClientConfig) -> Result<Self> {
        let pd = ctx.alloc_pd()?;
        let slots = 2 * cfg.depth as usize;
        let mr = ctx.reg_mr(
            &pd,
            slots * cfg.max_message,
            fld_abi::nic::access::LOCAL_WRITE,
        )?;
        let cq = ctx.create_cq(2 * cfg.depth + 16, None)?;
        let qp = ctx.create_qp(
            &pd,
            &QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: cfg.depth,
                    max_recv_wr: cfg.depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
                out_of_order: false,
            },
        )?;
        ctx.init_rc(&qp, 0)?;
        let psn = std::process::id().wrapping_mul(2_654_435_761) & 0xff_ffff;
        let me = Dest {
            lid: 0,
            qpn: qp.qp_num(),
            psn,
            gid: ctx.query_gid(1, 0)?,
        };
        let deadline = Instant::now() + cfg.timeout;
        // A server that is still starting refuses the connection: try again until the deadline.
        let mut stream = loop {
            match TcpStream::connect_timeout(&server, cfg.timeout) {
                Ok(s) => break s,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e.into()),
            }
        };
        stream.set_nonblocking(true)?;
        let mut got = [0u8; MESSAGE_LEN];
        // The server resolves our address while we wait; a server with no queue left closes
        // the connection unanswered.
        write_all(ctx, &mut stream, &me.message(), deadline)
            .and_then(|()| read_exact(ctx, &mut stream, &mut got, deadline))
            .map_err(|e| match e {
                WaitError::Io(e) if e.kind() == ErrorKind::UnexpectedEof => FldrError::Full,
                WaitError::Io(e) => e.into(),
                WaitError::Verbs(v) => v.into(),
                WaitError::Timeout => FldrError::Exchange("the server did not answer".into()),
            })?;
        let server_dest =
            Dest::parse(&got).ok_or_else(|| FldrError::Exchange("unreadable answer".into()))?;
        ctx.connect_rc(
            &qp,
            &RcConnection {
                path_mtu: cfg.path_mtu,
                rq_psn: server_dest.psn,
                sq_psn: psn,
                ..RcConnection::new(server_dest.qpn, server_dest.gid)
            },
        )?;
        let mut c = FldrClient {
            qp,
            cq,
            mr,
            _pd: pd,
            cfg,
            free_send: (cfg.depth..2 * cfg.depth).rev().collect(),
            wc: vec![Wc::EMPTY; 64],
            arrived: Default::default(),
            send_errors: 0,
            server_qpn: server_dest.qpn,
            scratch: Vec::new(),
            _session: stream,
        };
        for slot in 0..cfg.depth {
            c.post_recv(slot)?;
        }
        Ok(c)
    }

    fn post_recv(&mut self, slot: u32) -> Result<()> {
        let sge = [self
            .mr
            .sge(slot as usize * self.cfg.max_message, self.cfg.max_message)];
        self.qp.post_recv(&[(u64::from(slot), &sge)])?;
        Ok(())
    }

    /// Messages that can be sent now.
    pub fn send_room(&self) -> usize {
        self.free_send.len()
    }

    /// Sends `msg` (with immediate data `imm`); `false` when every send slot is in use.
    pub fn send(&mut self, msg: &[u8], imm: Option<u32>) -> Result<bool> {
        if msg.len() > self.cfg.max_message {
            return Err(FldrError::Invalid(
                "message longer than the client's maximum",
            ));
        }
        let Some(slot) = self.free_send.pop() else {
            return Ok(false);
        };
        let at = slot as usize * self.cfg.max_message;
        self.mr.write(at, msg);
        let sge = [self.mr.sge(at, msg.len())];
        let mut wr = SendWr::new(
            SEND_WRID_BASE + u64::from(slot),
            match imm {
                Some(i) => WrOpcode::SendWithImm(i),
                None => WrOpcode::Send,
            },
            &sge,
        );
        wr.signaled = true;
        if let Err(e) = self.qp.post_send(&[wr]) {
            self.free_send.push(slot);
            return Err(e.into());
        }
        Ok(true)
    }

    /// Reaps completions: send slots come back, received messages queue up for
    /// [`FldrClient::recv`]. Returns the completions seen.
    pub fn progress(&mut self) -> Result<usize> {
        let n = self.cq.poll(&mut self.wc);
        for i in 0..n {
            let w = self.wc[i];
            if w.wr_id >= SEND_WRID_BASE {
                self.free_send.push((w.wr_id - SEND_WRID_BASE) as u32);
                if w.status != WcStatus::Success {
                    self.send_errors += 1;
                }
                continue;
            }
            if w.status != WcStatus::Success {
                // The QP failed: its receives are flushed.
                continue;
            }
            self.arrived
                .push_back((w.wr_id as u32, w.byte_len as usize, w.imm_data));
        }
        Ok(n)
    }

    /// The next received message, handed to `f` in place; its slot is posted again afterwards.
    /// Returns what `f` returned, or `None` when nothing arrived.
    pub fn recv<R>(&mut self, f: impl FnOnce(&[u8], Option<u32>) -> R) -> Result<Option<R>> {
        if self.arrived.is_empty() {
            self.progress()?;
        }
        let Some((slot, len, imm)) = self.arrived.pop_front() else {
            return Ok(None);
        };
        let at = slot as usize * self.cfg.max_message;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.resize(len, 0);
        self.mr.read(at, &mut scratch);
        let r = f(&scratch, imm);
        self.scratch = scratch;
        self.post_recv(slot)?;
        Ok(Some(r))
    }

    /// Ends the connection from this side: the queue pair is destroyed (the server learns of
    /// it when its own queue pair's retries run out) and the client's resources are freed.
    pub fn close(self, ctx: &mut Context) -> Result<()> {
        ctx.destroy_qp(self.qp)?;
        ctx.destroy_cq(self.cq)?;
        ctx.dereg_mr(self.mr)?;
        ctx.dealloc_pd(self._pd)?;
        Ok(())
    }

    /// Messages in flight (sent and not yet completed).
    pub fn sends_in_flight(&self) -> usize {
        self.cfg.depth as usize - self.free_send.len()
    }

    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The client queue pair's transport counters by name (`Context::qp_counters`), read
    /// through `ctx`, the context the client was connected through.
    pub fn qp_counters(&self, ctx: &mut Context) -> Result<Vec<(&'static str, u64)>> {
        Ok(ctx.qp_counters(&self.qp)?)
    }

    pub fn config(&self) -> ClientConfig {
        self.cfg
    }
}

/// The GID of an IPv4 address, as both ends name it.
pub fn gid_of(ip: Ipv4Addr) -> Gid {
    ipv4_gid(ip.octets())
}
