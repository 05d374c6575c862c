//! StaR's stateful client (`docs/nic-interface.md` §16.6; Pan et al., APNet '19, §3.1, Figure 3,
//! §3.3): the NIC of the connection's client runs the transport for both ends.
//!
//! * The server's WQEs arrive in WQEPs. Each is acknowledged at once by an EA, sequence number
//!   echoed, and queued as the server's send or receive queue holds it.
//! * Data moving to the server travels in RDPs, which the server NIC places and answers with
//!   RAs. That covers the client's WRITE, the client's SEND (into a server receive WQE's
//!   buffers) and the server's READ (the client's bytes into the server's buffers).
//! * Data moving from the server is fetched by GDs, which the server NIC answers with SDPs. That
//!   covers the client's READ, the server's WRITE (into the client's memory) and the server's
//!   SEND (into a client receive WQE's buffers).
//! * The server's completions go back in CQEPs, each acknowledged by an EA the server NIC builds.
//! * The server's later registrations and deregistrations arrive as WQEPs of a third queue: a
//!   deregistration closes the region here before its EA, and both go to the client's driver
//!   through its update RQ ([`memory_update`]).
//!
//! The client names the server's memory by bus address. It translates the server's virtual
//! addresses and keys through the server's regions it holds (`MR_FLAG_STAR_PEER`), with the same
//! rights checks as for its own regions.
//!
//! Every request's answer echoes its PSN, so each request in flight is tracked on its own
//! ([`Pending`]):
//! * **Retransmission.** A request unanswered after three later ones were answered is sent
//!   again at once. When the local ACK timer (the QP's timeout) expires, every unanswered
//!   request is sent again as it was. Requests are idempotent at a stateless server: an RDP
//!   writes the same bytes at the same address, a GD reads the same bytes. A CQEP's duplicate is
//!   dropped by the server's driver by the element sequence number in the CQE's `metadata`.
//!   `retry_cnt` timeouts without progress fail the oldest operation with RETRY_EXCEEDED.
//! * **Congestion control.** A window bounds the requests in flight; for GDs that is the rate
//!   at which the server sends (§3.1, "congestion control"). It grows by one packet per window of
//!   answers and halves, at most once per window, when an answer carries congestion: an SDP
//!   marked CE on its way, or an RA/EA whose BECN the server set because its request arrived
//!   marked.
//!
//! Operations complete in the order they started: the client's CQEs in its send queue's order,
//! the CQEPs one at a time in their queue's order.
//!
//! Left out: atomics over StaR (they complete with REMOTE_INVALID_REQUEST), an SRQ or a
//! multi-packet RQ on a StaR client QP, authentication of the server's memory-table updates
//! beyond the connection's address and sequence.

use fld_abi::nic::*;
use fld_abi::wire::roce::star::{
    page_ranges, StarCq, StarData, StarHeaders, StarKind, StarPacket, StarQueue, StarRegionOp,
    StarRegionUpdate, STAR_CQE_LEN,
};
use fld_abi::wire::roce::{ack_timeout_ns, psn_add, psn_delta};
use zerocopy::little_endian::{U16, U32};
use zerocopy::IntoBytes;

use super::{complete, enter_error, fetch_recv_wqe, fetch_send_wqe, gather, scatter, transmit};
use super::{fail_send_wqe, posted_send_wqes};
use super::{Ctx, NicCore};
use crate::nic::rdma::memory::{self, AccessError, Target};
use crate::nic::rdma::star::*;
use crate::nic::rdma::Rdma;

/// Retransmission after a timeout, new operations, requests within the window, completions.
/// Returns the packets sent and completions written.
pub(super) fn run(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, budget: usize) -> usize {
    let now = ctx.now();
    let mut work = timers(core, ctx, qpi, now);
    work += resend_lost(core, ctx, qpi);
    work += start_ops(core, ctx, qpi);
    while work < budget {
        let Some(star) = client(core, qpi) else {
            break;
        };
        if star.window.len() as u32 >= star.window_packets() {
            break;
        }
        let next = star
            .ops
            .iter()
            .find(|o| o.cqep == CqepState::Due)
            .map(|o| (o.id, None))
            .or_else(|| {
                star.ops
                    .iter()
                    .find(|o| o.sent < o.length)
                    .map(|o| (o.id, Some(o.sent)))
            });
        let Some((op, data)) = next else {
            break;
        };
        let sent = match data {
            None => send_cqep(core, ctx, qpi, op, None),
            Some(offset) => send_data(core, ctx, qpi, op, offset, None),
        };
        if !sent {
            break;
        }
        work += 1;
    }
    work + complete_front(core, ctx, qpi)
}

fn client(core: &NicCore, qpi: u32) -> Option<&StarClient> {
    core.rdma.qps.get(qpi)?.star.as_deref()
}

fn client_mut(core: &mut NicCore, qpi: u32) -> Option<&mut StarClient> {
    core.rdma.qps.get_mut(qpi)?.star.as_deref_mut()
}

/// The local ACK timer: every unanswered request again, or the oldest operation fails when
/// the retries are spent.
fn timers(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, now: u64) -> usize {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return 0;
    };
    let timeout = qp.attr.timeout;
    let Some(star) = qp.star.as_deref_mut() else {
        return 0;
    };
    if star.deadline.is_none_or(|d| now < d) {
        return 0;
    }
    if star.window.iter().all(|p| p.answered) {
        star.deadline = None;
        return 0;
    }
    star.deadline = ack_timeout_ns(timeout).map(|t| now + t);
    qp.counters.timeouts += 1;
    if qp.req.retry_left == 0 {
        let id = qp.star.as_ref().and_then(|s| s.ops.front()).map(|o| o.id);
        if let Some(id) = id {
            fail_client(core, ctx, qpi, id, rdma_status::RETRY_EXCEEDED);
        }
        return 1;
    }
    qp.req.retry_left -= 1;
    // Everything unanswered goes again, so no fast retransmission is owed any more.
    star.marked_lost = 0;
    let again: Vec<Pending> = star
        .window
        .iter_mut()
        .filter(|p| !p.answered)
        .map(|p| {
            p.resend = false;
            *p
        })
        .collect();
    send_again(core, ctx, qpi, again)
}

/// Sends `requests` again as they were (requests are idempotent at a stateless server);
/// returns how many left.
fn send_again(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, requests: Vec<Pending>) -> usize {
    let mut sent = 0;
    for p in requests {
        let ok = match p.carries {
            Carries::Cqep => send_cqep(core, ctx, qpi, p.op, Some(p.psn)),
            Carries::Data { offset, .. } => send_data(core, ctx, qpi, p.op, offset, Some(p.psn)),
        };
        sent += usize::from(ok);
    }
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        qp.counters.retransmitted += sent as u64;
    }
    sent
}

/// Takes on the server's WQEs its WQEPs brought and the client's posted WQEs, while there is
/// room for operations and what each needs (a receive WQE on the other side) is there.
fn start_ops(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> usize {
    let mut started = 0;
    loop {
        let room = client(core, qpi).is_some_and(|s| s.ops.len() < STAR_MAX_OPS);
        if !room {
            return started;
        }
        let server = start_server_op(core, ctx, qpi);
        let own = start_client_op(core, ctx, qpi);
        if !server && !own {
            return started;
        }
        started += usize::from(server) + usize::from(own);
    }
}

fn new_op(star: &mut StarClient, kind: OpKind, length: u32) -> StarOp {
    let id = star.next_op_id;
    star.next_op_id += 1;
    StarOp {
        id,
        kind,
        length,
        sent: 0,
        acked: 0,
        local: SgeList::default(),
        inline_len: 0,
        remote: (0, 0),
        server: SgeList::default(),
        client_wqe: None,
        client_recv: None,
        server_index: 0,
        server_opcode: 0,
        imm: None,
        cqep: CqepState::None,
        cqep_seq: 0,
        client_done: false,
        status: rdma_status::SUCCESS,
    }
}

/// The next server WQE becomes an operation. A server SEND needs a client receive WQE.
fn start_server_op(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> bool {
    let Some(w) = client(core, qpi).and_then(|s| s.server_sq.front()).copied() else {
        return false;
    };
    let kind = match w.opcode {
        WQE_OP_SEND | WQE_OP_SEND_IMM => OpKind::ServerSend,
        WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM => OpKind::ServerWrite,
        WQE_OP_RDMA_READ => OpKind::ServerRead,
        _ => OpKind::ServerWrite,
    };
    let length = if w.inline_len > 0 {
        u32::from(w.inline_len)
    } else {
        w.sges.total().min(u64::from(u32::MAX)) as u32
    };
    let mut status = if matches!(w.opcode, WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA) {
        rdma_status::REMOTE_INVALID_REQUEST
    } else {
        rdma_status::SUCCESS
    };
    let mut client_recv = None;
    let mut local = SgeList::default();
    if kind == OpKind::ServerSend && status == rdma_status::SUCCESS {
        match take_client_recv(core, ctx, qpi) {
            Some((counter, sges)) => {
                client_recv = Some(counter);
                local = sges;
            }
            // The receive WQE comes with a later doorbell (no RNR wait: the server's WQE
            // simply stays queued).
            None => return false,
        }
        if local.total() < u64::from(length) {
            status = rdma_status::REMOTE_INVALID_REQUEST;
        }
    }
    let Some(star) = client_mut(core, qpi) else {
        return false;
    };
    star.server_sq.pop_front();
    let mut op = new_op(star, kind, length);
    op.remote = w.remote;
    op.server = w.sges;
    op.local = local;
    op.client_recv = client_recv;
    op.server_index = w.index;
    op.server_opcode = w.opcode;
    op.imm = matches!(w.opcode, WQE_OP_SEND_IMM | WQE_OP_RDMA_WRITE_IMM).then_some(w.imm);
    op.status = status;
    // Signalled server WQEs and failed ones owe the server a completion once their data is done.
    if w.signaled || status != rdma_status::SUCCESS {
        op.server_opcode |= OWES_CQEP;
    }
    let id = op.id;
    let inline = (w.inline_len > 0).then_some(w);
    let failed = status != rdma_status::SUCCESS;
    if failed {
        op.length = 0;
    }
    star.ops.push_back(op);
    if let (Some(w), false) = (inline, failed) {
        // The WQEP carried the data: no GD needed, it goes straight where it belongs.
        let data = &w.inline[..usize::from(w.inline_len)];
        if let Some(op) = client_mut(core, qpi).and_then(|s| s.op_mut(id)) {
            op.sent = op.length;
            op.acked = op.length;
        }
        place_server_bytes(core, ctx, qpi, id, 0, data);
    }
    true
}

/// Which operations owe the server a CQEP (server ops that were signalled or failed; a client
/// SEND always owes the server's receive completion).
fn owed_set(core: &mut NicCore, qpi: u32, id: u64, owes: bool) {
    if let Some(op) = client_mut(core, qpi).and_then(|s| s.op_mut(id)) {
        if owes {
            op.server_opcode |= OWES_CQEP;
        } else {
            op.server_opcode &= !OWES_CQEP;
        }
    }
}

/// A flag kept in the high bit of `server_opcode` (WQE opcodes are below 0x80).
const OWES_CQEP: u8 = 0x80;

fn owes_cqep(op: &StarOp) -> bool {
    op.kind == OpKind::ClientSend || op.server_opcode & OWES_CQEP != 0
}

/// The client's next posted send WQE becomes an operation. A client SEND needs a server
/// receive WQE.
fn start_client_op(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> bool {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return false;
    };
    if qp.state != QpState::Rts {
        return false;
    }
    let (owner, log_size, fetch, pd, signal_all) = (
        qp.owner,
        qp.sq.log_size,
        qp.req.fetch_counter,
        qp.pd,
        qp.signal_all,
    );
    let pending = match posted_send_wqes(core, ctx, qpi, (owner, log_size, fetch)) {
        Some(0) | None => return false,
        Some(n) => n,
    };
    let Some(nbb) = fetch_send_wqe(core, ctx, qpi, fetch, pending) else {
        fail_send_wqe(
            core,
            ctx,
            qpi,
            (fetch, 1),
            None,
            rdma_status::LOCAL_QP_OPERATION,
        );
        return false;
    };
    let checked = match RdmaWqeView::new_checked(&core.rdma.wqe[..nbb as usize * WQEBB]) {
        Ok(view) if view.ctrl.wqebbs() <= pending => check_client_wqe(&core.rdma, &view, owner, pd),
        _ => Err((None, rdma_status::LOCAL_QP_OPERATION)),
    };
    match checked {
        Ok(wqe) => queue_client_op(core, qpi, wqe, (fetch, nbb), signal_all),
        Err((ctrl, status)) => {
            fail_send_wqe(core, ctx, qpi, (fetch, nbb), ctrl, status);
            false
        }
    }
}

/// A client send WQE that passed its checks: what its operation needs.
struct ClientSendWqe {
    kind: OpKind,
    ctrl: CtrlSeg,
    length: u64,
    local: SgeList,
    inline_len: u16,
    remote: (u64, u32),
}

/// Checks a client send WQE: its opcode, and every local buffer against the QP's PD, so a bad
/// WQE fails before a packet of it leaves. A refusal carries the completion status.
fn check_client_wqe(
    rdma: &Rdma,
    view: &RdmaWqeView<'_>,
    owner: u16,
    pd: u32,
) -> Result<ClientSendWqe, (Option<CtrlSeg>, u8)> {
    let ctrl = view.ctrl;
    let kind = match ctrl.opcode {
        WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM => OpKind::ClientWrite,
        WQE_OP_SEND | WQE_OP_SEND_IMM => OpKind::ClientSend,
        WQE_OP_RDMA_READ => OpKind::ClientRead,
        _ => return Err((Some(ctrl), rdma_status::REMOTE_INVALID_REQUEST)),
    };
    let read = kind == OpKind::ClientRead;
    let (length, local, inline_len) = match view.data() {
        WqeDataView::Inline(_) if read => {
            return Err((Some(ctrl), rdma_status::LOCAL_QP_OPERATION));
        }
        WqeDataView::Inline(d) => (d.len() as u64, SgeList::default(), d.len() as u16),
        WqeDataView::Gather(_) => {
            let Some(list) = SgeList::of(view.sges()) else {
                return Err((Some(ctrl), rdma_status::LOCAL_LENGTH));
            };
            let right = memory::local_right(read);
            let ok = list.as_slice().iter().all(|s| {
                memory::check(
                    &rdma.mrs,
                    owner,
                    pd,
                    s.lkey,
                    s.addr,
                    u64::from(s.length),
                    right,
                    true,
                )
                .is_ok()
            });
            if !ok {
                return Err((Some(ctrl), rdma_status::LOCAL_PROTECTION));
            }
            (list.total(), list, 0)
        }
    };
    if length > 1 << 31 {
        return Err((Some(ctrl), rdma_status::LOCAL_LENGTH));
    }
    let remote = view
        .remote
        .map(|r| (r.addr.get(), r.rkey.get()))
        .unwrap_or_default();
    Ok(ClientSendWqe {
        kind,
        ctrl,
        length,
        local,
        inline_len,
        remote,
    })
}

/// Queues the operation of a checked client WQE (fetched at `fetch`, `nbb` blocks) and moves
/// the QP's fetch counter past it; a client SEND waits while the server has no receive WQE.
fn queue_client_op(
    core: &mut NicCore,
    qpi: u32,
    wqe: ClientSendWqe,
    (fetch, nbb): (u32, u32),
    signal_all: bool,
) -> bool {
    let ClientSendWqe {
        kind,
        ctrl,
        length,
        local,
        inline_len,
        remote,
    } = wqe;
    let opcode = ctrl.opcode;
    let imm = matches!(opcode, WQE_OP_SEND_IMM | WQE_OP_RDMA_WRITE_IMM).then(|| ctrl.imm.get());
    let Some(star) = client_mut(core, qpi) else {
        return false;
    };
    let mut server = SgeList::default();
    let mut server_index = 0;
    if kind == OpKind::ClientSend {
        let Some(r) = star.server_rq.pop_front() else {
            // No server receive WQE yet: the SEND waits for one (a WQEP brings it).
            return false;
        };
        server = r.sges;
        server_index = r.index;
    }
    let mut op = new_op(star, kind, length as u32);
    op.local = local;
    op.inline_len = inline_len;
    op.remote = remote;
    op.server = server;
    op.server_index = server_index;
    op.imm = imm;
    op.client_wqe = Some(ClientWqe {
        wqe_counter: fetch,
        wqebbs: nbb,
        wqe_index: ctrl.wqe_index.get(),
        opcode,
        signaled: signal_all || ctrl.completion_requested(),
    });
    if kind == OpKind::ClientSend && server.total() < length {
        // The server's receive buffers are too small for the message.
        op.status = rdma_status::REMOTE_INVALID_REQUEST;
        op.length = 0;
    }
    star.ops.push_back(op);
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        qp.req.fetch_counter = fetch.wrapping_add(nbb);
    }
    true
}

/// The client's next posted receive WQE, consumed: its counter and scatter list.
fn take_client_recv(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> Option<(u32, SgeList)> {
    let qp = core.rdma.qps.get(qpi)?;
    if qp.srq.is_some() || qp.packet_rq.is_some() {
        return None;
    }
    let pi = ctx.doorbell(qp.owner, db::slot(db::QP_RQ_BASE, qpi)) & db::PI_MASK;
    let counter = qp.rq_counter;
    let pending = pi.wrapping_sub(counter) & db::PI_MASK;
    if pending == 0 || pending > 1 << qp.rq.log_size {
        return None;
    }
    let mut stride = [0u8; 512];
    if !fetch_recv_wqe(core, ctx, qp, false, counter, &mut stride) {
        return None;
    }
    let len = 1usize << qp.rq.log_stride;
    let sges = SgeList::of(recv_sges(&stride[..len]))?;
    core.rdma.qps.get_mut(qpi)?.rq_counter = counter.wrapping_add(1);
    Some((counter, sges))
}

/// The translation of the server's `key` for `[va, va + len)` needing `right`, through the
/// server's region the client holds.
fn peer(
    core: &NicCore,
    qpi: u32,
    key: u32,
    va: u64,
    len: u64,
    right: u32,
) -> Result<Target, AccessError> {
    let qp = core.rdma.qps.get(qpi).ok_or(AccessError::BadKey)?;
    let index = core.rdma.peer_region(qp.owner, qp.pd, key);
    memory::check_peer(&core.rdma.mrs, index, qp.pd, va, len, right)
}

/// Where the bytes at `offset` of operation `op` live at the server — its bus address and
/// how many follow contiguously — for an RDP (writing) or a GD (reading), at most `max`.
fn server_run(
    core: &NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    op: &StarOp,
    offset: u32,
    max: u32,
) -> Result<(u64, u32), AccessError> {
    let owner = core.rdma.qps.get(qpi).ok_or(AccessError::BadKey)?.owner;
    let remaining = op.length - offset;
    let (key, va, avail, right) = match op.kind {
        OpKind::ClientWrite => (
            op.remote.1,
            op.remote.0.wrapping_add(u64::from(offset)),
            remaining,
            access::REMOTE_WRITE,
        ),
        OpKind::ClientRead => (
            op.remote.1,
            op.remote.0.wrapping_add(u64::from(offset)),
            remaining,
            access::REMOTE_READ,
        ),
        OpKind::ClientSend | OpKind::ServerRead | OpKind::ServerWrite | OpKind::ServerSend => {
            let (s, at, avail) = op.server.at(offset).ok_or(AccessError::OutOfBounds)?;
            let right = memory::local_right(op.kind.pushes());
            (
                s.lkey,
                s.addr.wrapping_add(u64::from(at)),
                avail.min(remaining),
                right,
            )
        }
    };
    let n = avail.min(max).min(remaining);
    let t = peer(core, qpi, key, va, u64::from(n), right)?;
    let (bus, contiguous) = t.contiguous(ctx.dma(owner), &core.rdma.mtt_cache, va, n as usize)?;
    Ok((bus, contiguous as u32))
}

/// Sends the data packet of operation `op` at `offset`: a new one (`psn` None) or the request
/// at `psn` again. False when nothing could be sent.
fn send_data(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    id: u64,
    offset: u32,
    psn: Option<u32>,
) -> bool {
    let Some(op) = client(core, qpi)
        .and_then(|s| s.ops.iter().find(|o| o.id == id))
        .copied()
    else {
        return false;
    };
    let mtu = core
        .rdma
        .qps
        .get(qpi)
        .and_then(|q| mtu_bytes(q.attr.path_mtu))
        .unwrap_or(1024);
    let (bus, n) = match server_run(core, ctx, qpi, &op, offset, mtu) {
        Ok(r) => r,
        Err(_) => {
            let status = match op.kind {
                OpKind::ClientSend | OpKind::ClientWrite | OpKind::ClientRead => {
                    rdma_status::REMOTE_ACCESS
                }
                _ => rdma_status::LOCAL_PROTECTION,
            };
            fail_op(core, ctx, qpi, id, status);
            return false;
        }
    };
    let kind = if op.kind.pushes() {
        StarKind::Rdp
    } else {
        StarKind::Gd
    };
    let Some(star) = client_mut(core, qpi) else {
        return false;
    };
    let psn = match psn {
        Some(p) => p,
        None => {
            let p = star.track(id, Carries::Data { offset, len: n });
            if let Some(o) = star.op_mut(id) {
                o.sent = offset + n;
            }
            p
        }
    };
    arm_timer(core, ctx, qpi);
    let reply_qpn = Rdma::qpn(qpi);
    let headers = StarHeaders {
        data: Some(StarData {
            dma_addr: bus,
            length: n,
            reply_qpn,
        }),
        ..StarHeaders::new(kind, 0, psn, 0)
    };
    if kind == StarKind::Gd {
        return transmit(core, ctx, qpi, headers, 0, |_, _, _| {
            Ok::<(), AccessError>(())
        })
        .unwrap_or(false);
    }
    // An RDP carries the client's bytes: its WQE's gather (fetched again: it stays in the ring
    // until it completes) or, for the server's READ, the client memory the READ names.
    let qp = core.rdma.qps.get(qpi);
    let (owner, pd) = qp.map_or((0, 0), |q| (q.owner, q.pd));
    if op.kind != OpKind::ServerRead {
        let Some(w) = op.client_wqe else {
            return false;
        };
        if fetch_send_wqe(core, ctx, qpi, w.wqe_counter, w.wqebbs).is_none() {
            fail_op(core, ctx, qpi, id, rdma_status::LOCAL_QP_OPERATION);
            return false;
        }
    }
    let sent = transmit(core, ctx, qpi, headers, n as usize, |rdma, ctx, out| {
        if op.kind == OpKind::ServerRead {
            let va = op.remote.0.wrapping_add(u64::from(offset));
            let t = memory::check(
                &rdma.mrs,
                owner,
                pd,
                op.remote.1,
                va,
                u64::from(n),
                access::REMOTE_READ,
                false,
            )?;
            return t.read(ctx.dma(owner), &rdma.mtt_cache, va, out);
        }
        let view = RdmaWqeView::new_checked(&rdma.wqe).map_err(|_| AccessError::BadKey)?;
        gather(rdma, ctx, owner, pd, &view, offset as usize, out)
    });
    match sent {
        Ok(s) => s,
        Err(_) => {
            let status = if op.kind == OpKind::ServerRead {
                rdma_status::REMOTE_ACCESS
            } else {
                rdma_status::LOCAL_PROTECTION
            };
            fail_op(core, ctx, qpi, id, status);
            false
        }
    }
}

/// Sends operation `op`'s CQEP: new (`psn` None) or again.
fn send_cqep(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, id: u64, psn: Option<u32>) -> bool {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return false;
    };
    let server_qpn = qp.attr.dest_qpn.get();
    let Some(star) = client_mut(core, qpi) else {
        return false;
    };
    let (send_cqn, recv_cqn) = (star.server_send_cqn, star.server_recv_cqn);
    let psn = match psn {
        Some(p) => p,
        None => {
            let p = star.track(id, Carries::Cqep);
            let seq = star.next_cqep;
            star.next_cqep = seq.wrapping_add(1);
            if let Some(o) = star.op_mut(id) {
                o.cqep = CqepState::Sent;
                o.cqep_seq = seq;
            }
            p
        }
    };
    let Some(op) = client(core, qpi)
        .and_then(|s| s.ops.iter().find(|o| o.id == id))
        .copied()
    else {
        return false;
    };
    arm_timer(core, ctx, qpi);
    let ok = op.status == rdma_status::SUCCESS;
    let (cqn, opcode, wqe_opcode) = match op.kind {
        OpKind::ClientSend => (
            recv_cqn,
            match (ok, op.imm.is_some()) {
                (false, _) => CQE_RESP_ERR,
                (true, true) => CQE_RESP_SEND_IMM,
                (true, false) => CQE_RESP_SEND,
            },
            0,
        ),
        _ => (
            send_cqn,
            if ok { CQE_REQ } else { CQE_REQ_ERR },
            op.server_opcode & !OWES_CQEP,
        ),
    };
    let mut cqe = Cqe {
        byte_count: U32::new(op.length),
        wqe_counter: U16::new(op.server_index),
        qn: U32::new(server_qpn),
        metadata: U32::new(op.cqep_seq),
        imm: U32::new(op.imm.unwrap_or(0)),
        wqe_opcode,
        syndrome: op.status,
        flags: cqe_flags::QP,
        ..Default::default()
    };
    cqe.set_op_own(opcode, 0);
    let headers = StarHeaders {
        cq: Some(StarCq {
            cqn,
            reply_qpn: Rdma::qpn(qpi),
        }),
        ..StarHeaders::new(StarKind::Cqep, 0, psn, 0)
    };
    transmit(core, ctx, qpi, headers, STAR_CQE_LEN, |_, _, out| {
        out.copy_from_slice(cqe.as_bytes());
        Ok::<(), AccessError>(())
    })
    .unwrap_or(false)
}

/// Starts the local ACK timer if it is not running.
fn arm_timer(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) {
    let now = ctx.now();
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        let t = ack_timeout_ns(qp.attr.timeout);
        if let Some(star) = qp.star.as_deref_mut() {
            if star.deadline.is_none() {
                star.deadline = t.map(|t| now + t);
            }
        }
    }
}

/// A StaR packet to this client QP (its peer's address already checked): a WQEP, or the answer
/// to one of its requests. `congested`: it arrived marked CE.
pub(super) fn receive(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    congested: bool,
    pkt: &StarPacket<'_>,
) {
    // A WQEP queues work, an answer opens the window: the next pass visits the QP.
    core.rdma.wake(qpi);
    match pkt.kind {
        StarKind::Wqep => element(core, ctx, qpi, pkt),
        StarKind::Ra | StarKind::Sdp | StarKind::Ea => answer(core, ctx, qpi, congested, pkt),
        // Requests to a server are not a client's business.
        StarKind::Rdp | StarKind::Gd | StarKind::Cqep => {
            if let Some(qp) = core.rdma.qps.get_mut(qpi) {
                qp.counters.dropped += 1;
            }
        }
    }
}

/// A WQEP: queued if it is the next one, acknowledged if it is that or an earlier one (its EA
/// was lost), dropped if one before it is missing (the server's driver sends again from there).
fn element(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &StarPacket<'_>) {
    let Some(w) = pkt.headers.wqe else {
        return;
    };
    let seq = pkt.headers.bth.psn;
    let Some(star) = client_mut(core, qpi) else {
        return;
    };
    let ahead = psn_delta(seq, star.next_wqep);
    if ahead > 0 {
        return;
    }
    if ahead == 0 && w.queue == StarQueue::Memory {
        if !memory_update(core, ctx, qpi, pkt.payload) {
            return;
        }
        if let Some(star) = client_mut(core, qpi) {
            star.next_wqep = psn_add(seq, 1);
        }
    } else if ahead == 0 {
        let queued = match w.queue {
            StarQueue::Receive => SgeList::of(recv_sges(pkt.payload)).map(|sges| {
                star.server_rq.push_back(ServerRecv {
                    index: w.index,
                    sges,
                })
            }),
            StarQueue::Send => {
                server_wqe(w.index, pkt.payload).map(|w| star.server_sq.push_back(w))
            }
            StarQueue::Memory => None,
        };
        if queued.is_none() {
            // An element the client cannot hold is not acknowledged: the server's driver sees
            // it never taken.
            return;
        }
        star.next_wqep = psn_add(seq, 1);
    }
    let headers = StarHeaders::new(StarKind::Ea, 0, seq, 0);
    transmit(core, ctx, qpi, headers, 0, |_, _, _| {
        Ok::<(), AccessError>(())
    })
    .ok();
}

/// A change of the server's memory table, the next element of the connection (§16.6). A
/// deregistration takes effect here, before it is acknowledged: the key leaves the QP's PD and
/// the security module's RDP and GD entries to the server inside the region's pages go, so
/// from its EA on neither this NIC nor a forger behind it reaches that memory. Both kinds are
/// then handed to the client's driver in its update RQ; a registration needs it (the region's
/// translation table lives in host memory the driver provides). False: not taken — no update
/// RQ, the RQ full, or an update that does not parse — and so not acknowledged.
fn memory_update(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, payload: &[u8]) -> bool {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return false;
    };
    let (owner, pd, server) = (qp.owner, qp.pd, qp.attr.dgid);
    let update_rq = qp.star.as_ref().and_then(|s| s.update_rq);
    let parsed = StarRegionUpdate::parse(payload);
    let refused = |core: &mut NicCore, malformed: bool| {
        if let Some(c) = core.rdma.counters.get_mut(usize::from(owner)) {
            match malformed {
                true => c.rx_malformed += 1,
                false => c.star_refused += 1,
            }
        }
        false
    };
    let Ok((update, pages)) = parsed else {
        return refused(core, true);
    };
    let Some(rqn) = update_rq else {
        return refused(core, false);
    };
    let cqe = Cqe {
        qn: U32::new(Rdma::qpn(qpi)),
        ..Default::default()
    };
    if !super::super::receive::receive(core, ctx, rqn, payload, cqe, CQE_STAR_REGION) {
        return refused(core, false);
    }
    if update.op == StarRegionOp::Deregister {
        core.rdma.peers.remove(&(owner, pd, update.key));
        let ranges = page_ranges(
            StarRegionUpdate::page_addresses(pages),
            update.log_page_size,
        );
        let data = star_guard_kind(StarKind::Rdp.opcode()) | star_guard_kind(StarKind::Gd.opcode());
        if let Some(g) = core.rdma.guards.get_mut(usize::from(owner)) {
            g.entries.retain(|e| {
                let inside = ranges.iter().any(|r| r.start <= e.lo && e.hi <= r.end);
                !(e.dst_gid == server && e.kinds & data != 0 && inside)
            });
        }
    }
    true
}

/// A server send WQE from a WQEP's payload.
fn server_wqe(index: u16, payload: &[u8]) -> Option<ServerWqe> {
    let view = RdmaWqeView::new_checked(payload).ok()?;
    let c = view.ctrl;
    let mut w = ServerWqe {
        index,
        opcode: c.opcode,
        signaled: c.completion_requested(),
        imm: c.imm.get(),
        remote: view
            .remote
            .map(|r| (r.addr.get(), r.rkey.get()))
            .unwrap_or_default(),
        sges: SgeList::default(),
        inline_len: 0,
        inline: [0; MAX_INLINE_DATA],
    };
    match view.data() {
        WqeDataView::Inline(d) => {
            w.inline[..d.len()].copy_from_slice(d);
            w.inline_len = d.len() as u16;
        }
        WqeDataView::Gather(_) => w.sges = SgeList::of(view.sges())?,
    }
    Some(w)
}

/// An RA, SDP or EA: the request at its PSN is answered (an SDP's bytes placed first).
fn answer(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, marked: bool, pkt: &StarPacket<'_>) {
    let psn = pkt.headers.bth.psn;
    let congested = pkt.headers.bth.becn || marked;
    let Some(star) = client(core, qpi) else {
        return;
    };
    let Some(front) = star.window.front() else {
        return;
    };
    let at = psn_delta(psn, front.psn);
    let Some(pending) = usize::try_from(at)
        .ok()
        .and_then(|i| star.window.get(i))
        .copied()
    else {
        return;
    };
    let expected = match pending.carries {
        Carries::Cqep => StarKind::Ea,
        Carries::Data { .. } => {
            let pushes = star
                .ops
                .iter()
                .find(|o| o.id == pending.op)
                .is_some_and(|o| o.kind.pushes());
            if pushes {
                StarKind::Ra
            } else {
                StarKind::Sdp
            }
        }
    };
    if pending.psn != psn || pending.answered || pkt.kind != expected {
        if let Some(qp) = core.rdma.qps.get_mut(qpi) {
            qp.counters.duplicates += 1;
        }
        return;
    }
    if let Carries::Data { offset, len } = pending.carries {
        if expected == StarKind::Sdp {
            if pkt.payload.len() != len as usize {
                return;
            }
            place_server_bytes(core, ctx, qpi, pending.op, offset, pkt.payload);
        }
    }
    let now = ctx.now();
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    qp.counters.acks_received += 1;
    let retries = qp.attr.retry_cnt;
    let timeout = ack_timeout_ns(qp.attr.timeout);
    qp.req.retry_left = retries;
    let Some(star) = qp.star.as_deref_mut() else {
        return;
    };
    let i = at as usize;
    star.window[i].answered = true;
    match pending.carries {
        Carries::Data { len, .. } => {
            if let Some(op) = star.op_mut(pending.op) {
                op.acked += len;
            }
        }
        Carries::Cqep => {
            if let Some(op) = star.op_mut(pending.op) {
                op.cqep = CqepState::Acked;
            }
        }
    }
    // The window: one more packet per window of answers; half of it, once per window, when the
    // network says it is congested.
    if congested {
        if star.cut_until.is_none_or(|c| psn_delta(psn, c) >= 0) {
            star.cwnd = (star.cwnd / 2).max(1 << 8);
            star.cut_until = Some(star.next_psn);
        }
    } else {
        star.cwnd = (star.cwnd + (1 << 16) / star.cwnd.max(1)).min(STAR_MAX_WINDOW << 8);
    }
    while star.window.front().is_some_and(|p| p.answered) {
        star.window.pop_front();
    }
    star.deadline = if star.window.is_empty() {
        None
    } else {
        timeout.map(|t| now + t)
    };
    // Fast retransmission: requests before this one still unanswered after three later answers
    // were lost (the server answers each request as it comes), so they go again now rather
    // than at the timer; once each, and the window halves once.
    // (Sent by the next poll: nothing is transmitted while an answer is being handled.)
    let mut lost = false;
    for p in star.window.iter_mut() {
        if psn_delta(p.psn, psn) >= 0 {
            break;
        }
        if !p.answered {
            p.passed = p.passed.saturating_add(1);
            if p.passed == FAST_RETRANSMIT_AFTER {
                p.resend = true;
                star.marked_lost += 1;
                lost = true;
            }
        }
    }
    if lost && star.cut_until.is_none_or(|c| psn_delta(psn, c) >= 0) {
        star.cwnd = (star.cwnd / 2).max(1 << 8);
        star.cut_until = Some(star.next_psn);
    }
    complete_front(core, ctx, qpi);
}

/// Sends again the requests an answer stream showed lost (see [`answer`]).
fn resend_lost(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> usize {
    let Some(star) = client_mut(core, qpi).filter(|s| s.marked_lost > 0) else {
        return 0;
    };
    star.marked_lost = 0;
    let lost: Vec<Pending> = star
        .window
        .iter_mut()
        .filter(|p| p.resend && !p.answered)
        .map(|p| {
            p.resend = false;
            *p
        })
        .collect();
    send_again(core, ctx, qpi, lost)
}

/// Later answers after which an unanswered request counts as lost.
const FAST_RETRANSMIT_AFTER: u8 = 3;

/// Bytes of the server's side arriving at offset `offset` of operation `id` (an SDP's, or a
/// WQEP's inline data): into the client's buffers (its READ, or the server's SEND) or the client
/// memory the server's WRITE names. An access error fails the operation.
fn place_server_bytes(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    id: u64,
    offset: u32,
    data: &[u8],
) {
    let Some(op) = client(core, qpi)
        .and_then(|s| s.ops.iter().find(|o| o.id == id))
        .copied()
    else {
        return;
    };
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return;
    };
    let (owner, pd) = (qp.owner, qp.pd);
    let rdma = &core.rdma;
    let placed = match op.kind {
        OpKind::ServerWrite => {
            let va = op.remote.0.wrapping_add(u64::from(offset));
            memory::check(
                &rdma.mrs,
                owner,
                pd,
                op.remote.1,
                va,
                data.len() as u64,
                access::REMOTE_WRITE,
                false,
            )
            .and_then(|t| t.write(ctx.dma(owner), &rdma.mtt_cache, va, data))
            .map_err(|_| rdma_status::REMOTE_ACCESS)
        }
        _ => scatter(
            rdma,
            ctx,
            owner,
            pd,
            op.local.as_slice().iter().copied(),
            offset as usize,
            data,
        )
        .map_err(|_| rdma_status::LOCAL_PROTECTION),
    };
    if let Err(status) = placed {
        fail_op(core, ctx, qpi, id, status);
    }
}

/// Operation `id` failed with `status`: a client operation completes in error and the QP enters
/// ERR; a server operation owes the server an error completion and moves no more data.
fn fail_op(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, id: u64, status: u8) {
    let client_op = client(core, qpi)
        .and_then(|s| s.ops.iter().find(|o| o.id == id))
        .is_some_and(|o| o.client_wqe.is_some());
    if client_op {
        fail_client(core, ctx, qpi, id, status);
        return;
    }
    if let Some(op) = client_mut(core, qpi).and_then(|s| s.op_mut(id)) {
        op.status = status;
        op.length = op.acked.min(op.sent);
        op.sent = op.length;
        op.acked = op.length;
    }
    owed_set(core, qpi, id, true);
}

/// The client operation `id` completes with `status` (after the operations before it, which are
/// flushed) and the QP enters ERR.
fn fail_client(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, id: u64, status: u8) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    let cqn = qp.send_cqn;
    let Some(star) = qp.star.as_deref_mut() else {
        return;
    };
    let ops: Vec<StarOp> = star.ops.drain(..).collect();
    star.window.clear();
    star.deadline = None;
    for op in ops {
        let Some(w) = op.client_wqe else {
            continue;
        };
        let s = if op.id == id {
            status
        } else {
            rdma_status::WR_FLUSH
        };
        complete(
            core,
            ctx,
            qpi,
            cqn,
            CQE_REQ_ERR,
            s,
            w.wqe_index,
            0,
            w.opcode,
            0,
            0,
        );
    }
    enter_error(core, ctx, qpi);
}

/// Completes the operations at the front whose data is done, in order: the client's own CQE
/// (its send WQE, or its receive WQE for the server's SEND), then the CQEP the server is owed.
fn complete_front(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> usize {
    let mut done = 0;
    loop {
        let Some(qp) = core.rdma.qps.get(qpi) else {
            return done;
        };
        let (send_cqn, recv_cqn) = (qp.send_cqn, qp.recv_cqn);
        let Some(op) = qp.star.as_ref().and_then(|s| s.ops.front()).copied() else {
            return done;
        };
        if op.acked < op.length {
            return done;
        }
        if !op.client_done {
            let ok = op.status == rdma_status::SUCCESS;
            let written = match (op.client_wqe, op.client_recv) {
                (Some(w), _) if w.signaled || !ok => complete(
                    core,
                    ctx,
                    qpi,
                    send_cqn,
                    if ok { CQE_REQ } else { CQE_REQ_ERR },
                    op.status,
                    w.wqe_index,
                    op.length,
                    w.opcode,
                    0,
                    0,
                ),
                (None, Some(counter)) => complete(
                    core,
                    ctx,
                    qpi,
                    recv_cqn,
                    match (ok, op.imm.is_some()) {
                        (false, _) => CQE_RESP_ERR,
                        (true, true) => CQE_RESP_SEND_IMM,
                        (true, false) => CQE_RESP_SEND,
                    },
                    op.status,
                    counter as u16,
                    op.length,
                    0,
                    op.imm.unwrap_or(0),
                    0,
                ),
                _ => true,
            };
            if !written {
                // No room in the CQ: the next poll tries again.
                return done;
            }
            done += 1;
            if let Some(o) = client_mut(core, qpi).and_then(|s| s.ops.front_mut()) {
                o.client_done = true;
            }
        }
        let Some(star) = client_mut(core, qpi) else {
            return done;
        };
        let Some(front) = star.ops.front_mut() else {
            return done;
        };
        match front.cqep {
            CqepState::None if owes_cqep(front) => {
                front.cqep = CqepState::Due;
                return done;
            }
            CqepState::Due | CqepState::Sent => return done,
            CqepState::None | CqepState::Acked => {
                star.ops.pop_front();
            }
        }
    }
}
