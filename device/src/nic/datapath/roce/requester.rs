//! The requester (IBA §9.7.4–9.7.7, sender side): send WQEs become packets — SEND and WRITE
//! segmented at the path MTU into FIRST/MIDDLE/LAST or ONLY, a READ request whose responses
//! take one PSN each, an atomic — with consecutive PSNs; responses acknowledge them.
//!
//! * ACK coalescing: AckReq is set on the last packet of a message and every
//!   [`ACK_REQUEST_EVERY`] packets inside a long one; an ACK acknowledges every PSN up to its own.
//! * Go-back-N: a PSN sequence error NAK, a response that skips PSNs, an ACK beyond a READ
//!   whose responses did not arrive, or the local ACK timer (4.096 µs × 2^timeout) sends again
//!   from the oldest unacknowledged PSN; each costs one of `retry_cnt` tries (restored by
//!   progress), and running out completes the WQE with RETRY_EXCEEDED and the QP enters ERR.
//! * Selective retransmission (an out-of-order QP, LEFT §3.5): its responder keeps what
//!   arrives after a missing packet, so a sequence NAK sends only the packet it names again;
//!   the local ACK timer still goes back to the oldest unacknowledged PSN.
//! * RNR NAK: wait the timer the NAK names (IBA Table 45), then send again from its PSN, at most
//!   `rnr_retry` times (7: forever), else RNR_RETRY_EXCEEDED.
//! * Remote access, invalid request and remote operational NAKs complete the WQE with the
//!   matching status and move the QP to ERR.
//! * WQEs complete in order; a CQE is written for signalled WQEs (or all with SIGNAL_ALL) and
//!   for every error.
//! * At most `NicConfig::rc_window` packets are unacknowledged and `max_rd_atomic` READs and
//!   atomics outstanding; a fenced WQE waits for earlier READs and atomics.

use fld_abi::nic::*;
use fld_abi::wire::roce::{
    self, nak, psn_add, psn_delta, request_opcode, AckKind, AtomicEth, BthRepr, IbHeaders,
    IbPacket, ImmDt, MessageKind, Position, Reth, RNR_TIMER_NS,
};

use super::{complete, enter_error, fetch_send_wqe, gather, qp_event, scatter, transmit};
use super::{fail_send_wqe, posted_send_wqes};
use super::{keep_in_reorder_buffer, recycle_kept, take_from_reorder_buffer};
use super::{Ctx, NicCore};
use crate::nic::rdma::memory;
use crate::nic::rdma::qp::SendOp;
use crate::nic::rdma::reorder::RESPONSES;

/// Inside a long message, ask for an ACK this often so the window keeps moving.
pub(super) const ACK_REQUEST_EVERY: u32 = 32;

fn mtu(core: &NicCore, qpi: u32) -> u32 {
    core.rdma
        .qps
        .get(qpi)
        .and_then(|q| mtu_bytes(q.attr.path_mtu))
        .unwrap_or(1024)
}

/// Timers, then new and retransmitted packets; returns the packets sent.
pub(super) fn run(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, budget: usize) -> usize {
    let now = ctx.now();
    timers(core, ctx, qpi, now);
    let mut sent = 0;
    while sent < budget {
        match step(core, ctx, qpi, now) {
            Step::Sent => sent += 1,
            Step::Idle => break,
        }
    }
    drained(core, ctx, qpi);
    sent
}

enum Step {
    Sent,
    Idle,
}

/// SQD: once nothing is outstanding, the drained event (once).
fn drained(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if qp.state == QpState::Sqd && qp.req.ops.is_empty() && !qp.drained_reported {
        qp.drained_reported = true;
        let (cqn, owner) = (qp.send_cqn, qp.owner);
        qp_event(core, ctx, cqn, owner, qp_event::SQ_DRAINED, qpi);
    }
}

/// The local ACK timer and the RNR wait.
fn timers(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, now: u64) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    let r = &mut qp.req;
    if r.rnr_wait_until.is_some_and(|t| now >= t) {
        r.rnr_wait_until = None;
    }
    let Some(deadline) = r.deadline else {
        return;
    };
    if now < deadline {
        return;
    }
    if r.ops.is_empty() || psn_delta(r.sent_high, r.unacked_psn) <= 0 {
        r.deadline = None;
        return;
    }
    qp.counters.timeouts += 1;
    let timeout = qp.attr.timeout;
    if !spend_retry(core, ctx, qpi, rdma_status::RETRY_EXCEEDED) {
        return;
    }
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        let una = qp.req.unacked_psn;
        qp.req.rewound_to = None;
        qp.req.resend = None;
        seek(qp, una);
        qp.req.deadline = roce::ack_timeout_ns(timeout).map(|t| now + t);
    }
}

/// Takes one transport retry; when none is left the oldest WQE fails with `status` and the QP
/// enters the error state (returns false).
fn spend_retry(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, status: u8) -> bool {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return false;
    };
    if qp.req.retry_left == 0 {
        fail_front(core, ctx, qpi, status);
        return false;
    }
    qp.req.retry_left -= 1;
    true
}

/// A loss the requester infers (a gap in READ responses, an ACK beyond a READ or atomic whose
/// response is missing): send again from `psn`. One loss shows itself many times — every later
/// response and ACK in flight — so only the first sighting costs a retry, until progress or a
/// timeout.
fn implied_nak(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, psn: u32) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if qp.req.rewound_to == Some(psn) {
        qp.counters.dropped += 1;
        return;
    }
    if spend_retry(core, ctx, qpi, rdma_status::RETRY_EXCEEDED) {
        if let Some(qp) = core.rdma.qps.get_mut(qpi) {
            qp.req.rewound_to = Some(psn);
            seek(qp, psn);
        }
    }
}

/// Completes the oldest outstanding WQE with `status` and moves the QP to ERR.
fn fail_front(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, status: u8) {
    fail_op(core, ctx, qpi, 0, status);
}

/// Completes outstanding WQE `at` — the one in error — with `status` and moves the QP to ERR.
/// Send completions stay in posting order: the WQEs before it, sent but not acknowledged,
/// complete first with WR_FLUSH, as the error state completes everything still outstanding
/// (IBA 10.3.1.2.5, 11.4.2.2); those behind it are flushed by the error state.
fn fail_op(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, at: usize, status: u8) {
    flush_oldest(core, ctx, qpi, at);
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    let cqn = qp.send_cqn;
    if let Some(op) = qp.req.ops.pop_front() {
        qp.req.cursor_op = qp.req.cursor_op.saturating_sub(1);
        complete(
            core,
            ctx,
            qpi,
            cqn,
            CQE_REQ_ERR,
            status,
            op.wqe_index,
            0,
            op.opcode,
            0,
            0,
        );
    }
    enter_error(core, ctx, qpi);
}

/// Completes the `n` oldest outstanding WQEs with WR_FLUSH: they were sent and not yet
/// acknowledged when a later WQE failed, and the error state overtakes them.
fn flush_oldest(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, n: usize) {
    for _ in 0..n {
        let Some(qp) = core.rdma.qps.get_mut(qpi) else {
            return;
        };
        let cqn = qp.send_cqn;
        let Some(op) = qp.req.ops.pop_front() else {
            break;
        };
        qp.req.cursor_op = qp.req.cursor_op.saturating_sub(1);
        complete(
            core,
            ctx,
            qpi,
            cqn,
            CQE_REQ_ERR,
            rdma_status::WR_FLUSH,
            op.wqe_index,
            0,
            op.opcode,
            0,
            0,
        );
    }
}

/// Puts the send cursor at `psn`: the packet of the outstanding op that carries it (a READ
/// restarts at its first missing response), or the next new WQE.
fn seek(qp: &mut crate::nic::rdma::qp::QueuePair, psn: u32) {
    let r = &mut qp.req;
    for (i, op) in r.ops.iter().enumerate() {
        if psn_delta(psn, op.first_psn) >= 0 && psn_delta(psn, op.last_psn()) <= 0 {
            r.cursor_op = i;
            r.cursor_packet = if op.is_read_or_atomic() {
                op.responses
            } else {
                psn_delta(psn, op.first_psn) as u32
            };
            return;
        }
    }
    r.cursor_op = r.ops.len();
    r.cursor_packet = 0;
}

/// Sends the packet at the cursor, starting a new WQE when the cursor is past the last.
fn step(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, now: u64) -> Step {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return Step::Idle;
    };
    if qp.req.rnr_wait_until.is_some() || !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        return Step::Idle;
    }
    if qp.req.resend.is_some() {
        if let Some(step) = resend_one(core, ctx, qpi, now) {
            return step;
        }
    }
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return Step::Idle;
    };
    if qp.req.cursor_op >= qp.req.ops.len() && !start_wqe(core, ctx, qpi) {
        return Step::Idle;
    }
    match send_at_cursor(core, ctx, qpi, now) {
        Ok(true) => Step::Sent,
        Ok(false) => Step::Idle,
        Err(status) => {
            // The WQE at the cursor failed (its gather, say), not the oldest outstanding one.
            let at = core.rdma.qps.get(qpi).map_or(0, |q| q.req.cursor_op);
            fail_op(core, ctx, qpi, at, status);
            Step::Idle
        }
    }
}

/// Selective retransmission (LEFT §3.5): the packet a sequence NAK named is sent again alone,
/// and the cursor goes back to where it was. None when it was acknowledged since.
fn resend_one(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, now: u64) -> Option<Step> {
    let qp = core.rdma.qps.get_mut(qpi)?;
    let psn = qp.req.resend.take()?;
    let r = &qp.req;
    if psn_delta(psn, r.unacked_psn) < 0 || psn_delta(psn, r.sent_high) >= 0 {
        return None;
    }
    let cursor = (r.cursor_op, r.cursor_packet);
    seek(qp, psn);
    let at = qp.req.cursor_op;
    let sent = send_at_cursor(core, ctx, qpi, now);
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        (qp.req.cursor_op, qp.req.cursor_packet) = cursor;
    }
    Some(match sent {
        Ok(_) => Step::Sent,
        Err(status) => {
            fail_op(core, ctx, qpi, at, status);
            Step::Idle
        }
    })
}

/// Fetches and checks the next posted WQE and appends it to the outstanding ops. False when
/// there is none, the window or the READ/atomic limit or a fence holds it back, or it failed
/// (then the QP is in ERR).
fn start_wqe(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> bool {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return false;
    };
    if qp.state != QpState::Rts {
        return false;
    }
    let r = &qp.req;
    if psn_delta(r.next_psn, r.unacked_psn) >= core.config.rc_window as i32 {
        return false;
    }
    let (owner, log_size, fetch) = (qp.owner, qp.sq.log_size, r.fetch_counter);
    let pending = match posted_send_wqes(core, ctx, qpi, (owner, log_size, fetch)) {
        Some(0) | None => return false,
        Some(n) => n,
    };
    let Some(nbb) = fetch_send_wqe(core, ctx, qpi, fetch, pending) else {
        return fail_wqe(
            core,
            ctx,
            qpi,
            fetch,
            1,
            None,
            rdma_status::LOCAL_QP_OPERATION,
        );
    };
    let view = match RdmaWqeView::new_checked(&core.rdma.wqe[..nbb as usize * WQEBB]) {
        Ok(v) if v.ctrl.wqebbs() <= pending => v,
        _ => {
            let ctrl = CtrlSeg::read_from_prefix(&core.rdma.wqe[..])
                .map(|c| c.0)
                .ok();
            return fail_wqe(
                core,
                ctx,
                qpi,
                fetch,
                nbb,
                ctrl,
                rdma_status::LOCAL_QP_OPERATION,
            );
        }
    };
    let ctrl = view.ctrl;
    let qp = core.rdma.qps.get(qpi).expect("present");
    let op = ctrl.opcode;
    let read_atomic = matches!(op, WQE_OP_RDMA_READ | WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA);
    // Outstanding READs and atomics are counted only for a WQE they can hold back: the queue
    // of started operations runs to hundreds of unacknowledged WRITEs, so counting them for
    // every WQE cost ~770 instructions per 64 B WRITE.
    let reads_outstanding = |limit: usize| {
        let reads = qp.req.ops.iter().filter(|o| o.is_read_or_atomic());
        reads.take(limit).count()
    };
    let max_reads = usize::from(qp.attr.max_rd_atomic.max(1));
    if read_atomic && reads_outstanding(max_reads) >= max_reads {
        return false;
    }
    if ctrl.fm_ce_se & WQE_FENCE != 0 && reads_outstanding(1) > 0 {
        return false;
    }
    // The length, and every local buffer checked now, so a bad WQE fails before a packet of it
    // leaves (READ and atomic targets need LOCAL_WRITE).
    let (pd, mtu) = (qp.pd, mtu_bytes(qp.attr.path_mtu).unwrap_or(1024));
    let length: Result<u64, u8> = match view.data() {
        WqeDataView::Inline(_) if read_atomic => Err(rdma_status::LOCAL_QP_OPERATION),
        WqeDataView::Inline(d) => Ok(d.len() as u64),
        WqeDataView::Gather(_) => view.sges().try_fold(0u64, |total, s| {
            let right = memory::local_right(read_atomic);
            memory::check(
                &core.rdma.mrs,
                owner,
                pd,
                s.lkey,
                s.addr,
                u64::from(s.length),
                right,
                true,
            )
            .map(|_| total + u64::from(s.length))
            .map_err(|_| rdma_status::LOCAL_PROTECTION)
        }),
    };
    let (remote, operands) = (view.remote, view.atomic);
    let length = match length {
        Ok(l) => l,
        Err(status) => return fail_wqe(core, ctx, qpi, fetch, nbb, Some(ctrl), status),
    };
    let atomic = matches!(op, WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA);
    let remote = remote
        .map(|r| (r.addr.get(), r.rkey.get()))
        .unwrap_or_default();
    if length > 1 << 31 || (atomic && (length != 8 || remote.0 % 8 != 0)) {
        return fail_wqe(
            core,
            ctx,
            qpi,
            fetch,
            nbb,
            Some(ctrl),
            rdma_status::LOCAL_LENGTH,
        );
    }
    let length = length as u32;
    let packets = if atomic {
        1
    } else {
        length.div_ceil(mtu).max(1)
    };
    let (swap_add, compare) = operands
        .map(|a| (a.swap_add.get(), a.compare.get()))
        .unwrap_or_default();
    let qp = core.rdma.qps.get_mut(qpi).expect("present");
    let signaled = qp.signal_all || ctrl.completion_requested();
    let first_psn = qp.req.next_psn;
    qp.req.ops.push_back(SendOp {
        wqe_counter: fetch,
        wqebbs: nbb,
        wqe_index: ctrl.wqe_index.get(),
        opcode: op,
        signaled,
        solicited: ctrl.fm_ce_se & WQE_SOLICITED != 0,
        imm: ctrl.imm.get(),
        remote_addr: remote.0,
        rkey: remote.1,
        swap_add,
        compare,
        length,
        first_psn,
        packets,
        responses: 0,
        done: false,
    });
    qp.req.next_psn = psn_add(first_psn, packets);
    qp.req.fetch_counter = fetch.wrapping_add(nbb);
    qp.req.cursor_op = qp.req.ops.len() - 1;
    qp.req.cursor_packet = 0;
    true
}

/// A WQE that cannot even start: its error completion (with the WQE's index when its control
/// segment was readable), and the QP enters ERR. Returns false for the caller's convenience.
#[allow(clippy::too_many_arguments)]
fn fail_wqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    counter: u32,
    nbb: u32,
    ctrl: Option<CtrlSeg>,
    status: u8,
) -> bool {
    // The WQEs started before it complete first (flushed), keeping posting order.
    let started = core.rdma.qps.get(qpi).map_or(0, |q| q.req.ops.len());
    flush_oldest(core, ctx, qpi, started);
    fail_send_wqe(core, ctx, qpi, (counter, nbb), ctrl, status);
    false
}

/// Sends the packet at the cursor. `Ok(false)`: nothing sendable; `Err(status)`: the op failed.
fn send_at_cursor(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, now: u64) -> Result<bool, u8> {
    let mtu = mtu(core, qpi);
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return Ok(false);
    };
    let r = &qp.req;
    let Some(op) = r.ops.get(r.cursor_op).copied() else {
        return Ok(false);
    };
    let k = r.cursor_packet;
    let psn = psn_add(op.first_psn, k);
    let (owner, pd, timeout) = (qp.owner, qp.pd, qp.attr.timeout);
    let retransmit = psn_delta(psn, r.sent_high) < 0;
    let mut ack_request = r.since_ack_request + 1 >= ACK_REQUEST_EVERY;
    let mut headers = IbHeaders {
        bth: BthRepr {
            psn,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut payload = 0usize;
    let next;
    match op.opcode {
        WQE_OP_RDMA_READ => {
            let offset = u64::from(k) * u64::from(mtu);
            headers.bth.opcode = roce::opcode::READ_REQUEST;
            headers.reth = Some(Reth {
                virtual_address: op.remote_addr.wrapping_add(offset),
                rkey: op.rkey,
                dma_length: op.length.saturating_sub(offset as u32),
            });
            ack_request = false;
            next = (r.cursor_op + 1, 0);
        }
        WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA => {
            headers.bth.opcode = if op.opcode == WQE_OP_ATOMIC_CS {
                roce::opcode::COMPARE_SWAP
            } else {
                roce::opcode::FETCH_ADD
            };
            headers.atomic_eth = Some(AtomicEth {
                virtual_address: op.remote_addr,
                rkey: op.rkey,
                swap_add: op.swap_add,
                compare: op.compare,
            });
            ack_request = false;
            next = (r.cursor_op + 1, 0);
        }
        _ => {
            let write = matches!(op.opcode, WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM);
            let imm = matches!(op.opcode, WQE_OP_RDMA_WRITE_IMM | WQE_OP_SEND_IMM);
            let last = k + 1 == op.packets;
            let position = match (k == 0, last) {
                (true, true) => Position::Only,
                (true, false) => Position::First,
                (false, true) => Position::Last,
                (false, false) => Position::Middle,
            };
            let kind = if write {
                MessageKind::Write
            } else {
                MessageKind::Send
            };
            headers.bth.opcode = request_opcode(kind, position, imm);
            headers.bth.solicited = last && op.solicited;
            if write && k == 0 {
                headers.reth = Some(Reth {
                    virtual_address: op.remote_addr,
                    rkey: op.rkey,
                    dma_length: op.length,
                });
            }
            if imm && last {
                headers.imm = Some(ImmDt(op.imm));
            }
            ack_request |= last;
            payload = (op.length - k * mtu).min(mtu) as usize;
            next = if last {
                (r.cursor_op + 1, 0)
            } else {
                (r.cursor_op, k + 1)
            };
        }
    }
    headers.bth.ack_request = ack_request;
    // Data comes from the WQE's gather list: fetch the WQE again (it stays in the ring until it
    // completes) and copy straight into the frame.
    if payload > 0 && fetch_send_wqe(core, ctx, qpi, op.wqe_counter, op.wqebbs).is_none() {
        return Err(rdma_status::LOCAL_QP_OPERATION);
    }
    let offset = (k * mtu) as usize;
    let sent = transmit(core, ctx, qpi, headers, payload, |rdma, ctx, out| {
        if out.is_empty() {
            return Ok(());
        }
        let view = RdmaWqeView::new_checked(&rdma.wqe[..op.wqebbs as usize * WQEBB])
            .map_err(|_| rdma_status::LOCAL_QP_OPERATION)?;
        gather(rdma, ctx, owner, pd, &view, offset, out).map_err(|_| rdma_status::LOCAL_PROTECTION)
    })?;
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return Ok(false);
    };
    let r = &mut qp.req;
    (r.cursor_op, r.cursor_packet) = next;
    r.since_ack_request = if ack_request {
        0
    } else {
        r.since_ack_request + 1
    };
    let end = match op.opcode {
        WQE_OP_RDMA_READ => op.last_psn(),
        _ => psn,
    };
    if psn_delta(end, r.sent_high) >= 0 {
        r.sent_high = psn_add(end, 1);
    }
    if retransmit {
        qp.counters.retransmitted += 1;
    }
    if qp.req.deadline.is_none() {
        qp.req.deadline = roce::ack_timeout_ns(timeout).map(|t| now + t);
    }
    Ok(sent)
}

/// A response (ACK, NAK, READ response, atomic ACK) for QP `qpi`. On an out-of-order QP a
/// READ response or atomic ACK ahead of the one awaited waits in the reorder buffer and is
/// taken when its turn comes (its data says where it goes, but the READ completes and
/// acknowledges in PSN order); a lost one is sent again after the local ACK timeout.
pub(super) fn receive(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return;
    };
    // CREATE_QP gives the flag only on a card with a reorder unit.
    let reorders = qp.out_of_order;
    let ordered = matches!(
        pkt.info.kind,
        MessageKind::ReadResponse | MessageKind::AtomicAcknowledge
    );
    if reorders && ordered {
        let psn = pkt.headers.bth.psn;
        match awaited_response(qp) {
            Some(e) if psn_delta(psn, e) > 0 => return keep_response(core, ctx, qpi, pkt),
            Some(e) if psn == e => {
                if let Some(u) = core.rdma.reorder.as_mut().filter(|u| !u.buffer.is_empty()) {
                    u.buffer.discard(qpi | RESPONSES, psn);
                }
            }
            _ => {}
        }
    }
    respond_to(core, ctx, qpi, pkt);
    if reorders {
        take_kept_responses(core, ctx, qpi);
    }
}

/// The PSN of the next READ response or atomic ACK awaited: the first missing response of the
/// oldest READ or atomic not yet answered.
fn awaited_response(qp: &crate::nic::rdma::qp::QueuePair) -> Option<u32> {
    qp.req
        .ops
        .iter()
        .find(|o| o.is_read_or_atomic() && !o.done)
        .map(|o| psn_add(o.first_psn, o.responses))
}

/// Keeps a response that overtook the awaited one (its DMA write to the reorder buffer is
/// charged); no room drops it, to be recovered by the local ACK timeout.
fn keep_response(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let owner = core.rdma.qps.get(qpi).map_or(0, |q| q.owner);
    if keep_in_reorder_buffer(core, ctx, owner, qpi | RESPONSES, pkt).is_err() {
        if let Some(qp) = core.rdma.qps.get_mut(qpi) {
            qp.counters.dropped += 1;
        }
    }
}

/// Takes the kept responses whose turn has come, in PSN order.
fn take_kept_responses(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) {
    loop {
        let Some(qp) = core.rdma.qps.get(qpi) else {
            return;
        };
        let (Some(awaited), owner) = (awaited_response(qp), qp.owner) else {
            return;
        };
        let Some(held) = take_from_reorder_buffer(core, ctx, owner, qpi | RESPONSES, awaited)
        else {
            return;
        };
        respond_to(core, ctx, qpi, &held.packet());
        recycle_kept(core, held);
        if core.rdma.qps.get(qpi).and_then(awaited_response) == Some(awaited) {
            return;
        }
    }
}

/// Handles a response in its turn.
fn respond_to(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let now = ctx.now();
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    let psn = pkt.headers.bth.psn;
    let r = &qp.req;
    // Only responses to PSNs sent and not yet acknowledged mean anything; older ones are
    // duplicates, newer ones answer nothing.
    if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
        || psn_delta(psn, r.sent_high) >= 0
        || psn_delta(psn, r.unacked_psn) < 0
    {
        qp.counters.dropped += 1;
        return;
    }
    match pkt.info.kind {
        MessageKind::Acknowledge => {
            let Some(aeth) = pkt.headers.aeth else {
                return;
            };
            qp.counters.acks_received += 1;
            match aeth.kind {
                AckKind::Ack { .. } => acknowledge(core, ctx, qpi, psn, now),
                AckKind::RnrNak { timer } => {
                    qp.counters.rnr_naks_received += 1;
                    acknowledge(core, ctx, qpi, psn_add(psn, roce::PSN_MASK), now);
                    rnr(core, ctx, qpi, timer, now);
                }
                AckKind::Nak { code } => {
                    acknowledge(core, ctx, qpi, psn_add(psn, roce::PSN_MASK), now);
                    let status = match code {
                        nak::PSN_SEQUENCE_ERROR => {
                            let Some(qp) = core.rdma.qps.get_mut(qpi) else {
                                return;
                            };
                            qp.counters.seq_naks_received += 1;
                            // The responder has everything before `psn`; but when a READ or
                            // atomic response before it is missing here, the implied NAK above
                            // already went back further, and that is the one recovery.
                            if psn_delta(qp.req.unacked_psn, psn) < 0 {
                                return;
                            }
                            if spend_retry(core, ctx, qpi, rdma_status::RETRY_EXCEEDED) {
                                if let Some(qp) = core.rdma.qps.get_mut(qpi) {
                                    if qp.out_of_order {
                                        // The responder holds what came after `psn`.
                                        qp.req.resend = Some(psn);
                                    } else {
                                        seek(qp, psn);
                                    }
                                }
                            }
                            return;
                        }
                        nak::REMOTE_ACCESS_ERROR => rdma_status::REMOTE_ACCESS,
                        nak::REMOTE_OPERATIONAL_ERROR => rdma_status::REMOTE_OPERATION,
                        _ => rdma_status::REMOTE_INVALID_REQUEST,
                    };
                    fail_front(core, ctx, qpi, status);
                }
            }
        }
        MessageKind::ReadResponse => read_response(core, ctx, qpi, pkt, now),
        MessageKind::AtomicAcknowledge => {
            let (Some(ack), Some(_)) = (pkt.headers.atomic_ack_eth, pkt.headers.aeth) else {
                return;
            };
            let Some((at, op)) = response_target(core, ctx, qpi, now, |o| {
                matches!(o.opcode, WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA) && o.first_psn == psn
            }) else {
                return;
            };
            if op.done {
                return;
            }
            // The original value lands in the local buffer in the host's byte order.
            if let Err(status) = place_response(core, ctx, qpi, &op, 0, &ack.original.to_le_bytes())
            {
                fail_op(core, ctx, qpi, at, status);
                return;
            }
            if let Some(o) = core
                .rdma
                .qps
                .get_mut(qpi)
                .and_then(|q| q.req.ops.get_mut(at))
            {
                o.done = true;
            }
            progress(core, ctx, qpi, psn, now);
        }
        _ => {
            qp.counters.dropped += 1;
        }
    }
}

/// Writes response data for `op` (a READ's payload at `offset`, an atomic's original value)
/// into its local scatter list.
fn place_response(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    op: &SendOp,
    offset: usize,
    data: &[u8],
) -> Result<(), u8> {
    if fetch_send_wqe(core, ctx, qpi, op.wqe_counter, op.wqebbs).is_none() {
        return Err(rdma_status::LOCAL_QP_OPERATION);
    }
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return Ok(());
    };
    let (owner, pd) = (qp.owner, qp.pd);
    let view = RdmaWqeView::new_checked(&core.rdma.wqe[..op.wqebbs as usize * WQEBB])
        .map_err(|_| rdma_status::LOCAL_QP_OPERATION)?;
    scatter(&core.rdma, ctx, owner, pd, view.sges(), offset, data).map_err(|e| match e {
        super::ScatterError::Length => rdma_status::LOCAL_LENGTH,
        super::ScatterError::Access(_) => rdma_status::LOCAL_PROTECTION,
    })
}

/// The outstanding op a READ response or atomic ACK answers (`is_it`), with everything before
/// it settled: responses come in PSN order, so an earlier READ or atomic still without its
/// response means that response was lost (go back for it); earlier SENDs and WRITEs are
/// acknowledged by the response (its AETH, or the order itself). Returns the op's index now
/// and a copy of it; `None`: nothing to do with the packet.
fn response_target(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    now: u64,
    is_it: impl Fn(&SendOp) -> bool,
) -> Option<(usize, SendOp)> {
    let qp = core.rdma.qps.get_mut(qpi)?;
    let Some(at) = qp.req.ops.iter().position(is_it) else {
        qp.counters.dropped += 1;
        return None;
    };
    if let Some(earlier) = qp
        .req
        .ops
        .iter()
        .take(at)
        .find(|o| o.is_read_or_atomic() && !o.done)
    {
        let missing = psn_add(earlier.first_psn, earlier.responses);
        implied_nak(core, ctx, qpi, missing);
        return None;
    }
    let first = qp.req.ops[at].first_psn;
    acknowledge(core, ctx, qpi, psn_add(first, roce::PSN_MASK), now);
    // Completions may have retired the ops ahead of it.
    let qp = core.rdma.qps.get(qpi)?;
    let at = qp.req.ops.iter().position(|o| o.first_psn == first)?;
    Some((at, qp.req.ops[at]))
}

/// An RDMA READ response: in order it lands in the READ's buffers; a gap goes back to the
/// first missing response.
fn read_response(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>, now: u64) {
    let psn = pkt.headers.bth.psn;
    let mtu = mtu(core, qpi);
    let Some((at, op)) = response_target(core, ctx, qpi, now, |o| {
        o.opcode == WQE_OP_RDMA_READ
            && psn_delta(psn, o.first_psn) >= 0
            && psn_delta(psn, o.last_psn()) <= 0
    }) else {
        return;
    };
    let expected = psn_add(op.first_psn, op.responses);
    let d = psn_delta(psn, expected);
    if op.done || d < 0 {
        if let Some(qp) = core.rdma.qps.get_mut(qpi) {
            qp.counters.duplicates += 1;
        }
        return;
    }
    if d > 0 {
        // Responses were lost: ask again from the first missing one.
        implied_nak(core, ctx, qpi, expected);
        return;
    }
    let k = op.responses;
    let last = k + 1 == op.packets;
    // A READ sent again from response `k` is a new request: its responses start with FIRST
    // (or ONLY) there. So FIRST may stand at any index, LAST/ONLY only at the last, MIDDLE
    // never at the first.
    let position_ok = match pkt.info.position {
        Position::Only => last,
        Position::First => !last,
        Position::Middle => k > 0 && !last,
        Position::Last => k > 0 && last,
    };
    let want_len = (op.length - k * mtu).min(mtu) as usize;
    if !position_ok || pkt.payload.len() != want_len {
        fail_op(core, ctx, qpi, at, rdma_status::BAD_RESPONSE);
        return;
    }
    if let Err(status) = place_response(core, ctx, qpi, &op, (k * mtu) as usize, pkt.payload) {
        fail_op(core, ctx, qpi, at, status);
        return;
    }
    if let Some(o) = core
        .rdma
        .qps
        .get_mut(qpi)
        .and_then(|q| q.req.ops.get_mut(at))
    {
        o.responses += 1;
        o.done = last;
    }
    progress(core, ctx, qpi, psn, now);
}

/// A response at `psn` arrived in order: the oldest unacknowledged PSN moves past it.
fn progress(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, psn: u32, now: u64) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if psn_delta(psn, qp.req.unacked_psn) >= 0 {
        qp.req.unacked_psn = psn_add(psn, 1);
        forward(qp, now);
    }
    match qp.req.ack_overtook.take() {
        Some(a) if psn_delta(a, psn) > 0 => acknowledge(core, ctx, qpi, a, now),
        _ => complete_done(core, ctx, qpi, now),
    }
}

/// Forward progress (IBA 9.7.6.1.4): the retry counters are whole again and the ACK timer
/// restarts.
fn forward(qp: &mut crate::nic::rdma::qp::QueuePair, now: u64) {
    qp.req.rewound_to = None;
    qp.req.retry_left = qp.attr.retry_cnt;
    qp.req.rnr_retry_left = qp.attr.rnr_retry;
    qp.req.deadline = roce::ack_timeout_ns(qp.attr.timeout).map(|t| now + t);
}

/// An ACK (or an implied one) for every PSN up to `psn`.
fn acknowledge(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, psn: u32, now: u64) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if psn_delta(psn, qp.req.unacked_psn) < 0 {
        // Nothing new acknowledged; ops whose responses arrived may still retire.
        complete_done(core, ctx, qpi, now);
        return;
    }
    // An ACK beyond a READ or atomic whose response is missing: the response was lost.
    if let Some(op) = qp
        .req
        .ops
        .iter()
        .find(|o| o.is_read_or_atomic() && !o.done && psn_delta(o.first_psn, psn) <= 0)
        .copied()
    {
        let missing = psn_add(op.first_psn, op.responses);
        if psn_delta(missing, qp.req.unacked_psn) > 0 {
            qp.req.unacked_psn = missing;
        }
        // On an out-of-order QP the response may only be late: the ACK overtook it, and
        // counts again once the response is in.
        let late = qp.out_of_order;
        if late {
            let r = &mut qp.req;
            if r.ack_overtook.is_none_or(|a| psn_delta(psn, a) > 0) {
                r.ack_overtook = Some(psn);
            }
        }
        complete_done(core, ctx, qpi, now);
        if !late {
            implied_nak(core, ctx, qpi, missing);
        }
        return;
    }
    qp.req.unacked_psn = psn_add(psn, 1);
    forward(qp, now);
    complete_done(core, ctx, qpi, now);
}

/// Completes, in order, every op whose packets are all acknowledged (SEND, WRITE) or whose
/// response arrived (READ, atomic); restores the retry counts and re-arms the timer on
/// progress.
fn complete_done(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, now: u64) {
    // What is acknowledged needs no sending again: a cursor a rewind left behind the oldest
    // unacknowledged PSN moves up to it.
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        let r = &qp.req;
        let at = match r.ops.get(r.cursor_op) {
            Some(op) => psn_add(op.first_psn, r.cursor_packet),
            None => r.next_psn,
        };
        let una = r.unacked_psn;
        if psn_delta(at, una) < 0 {
            seek(qp, una);
        }
    }
    let mut progressed = false;
    loop {
        let Some(qp) = core.rdma.qps.get_mut(qpi) else {
            return;
        };
        let Some(op) = qp.req.ops.front().copied() else {
            break;
        };
        let acked = psn_delta(op.last_psn(), qp.req.unacked_psn) < 0;
        let finished = if op.is_read_or_atomic() {
            op.done
        } else {
            acked
        };
        // A SEND or WRITE must also have been sent whole (a rewind may point inside it); a READ
        // or atomic whose response arrived was sent.
        let sent = qp.req.cursor_op > 0 || op.is_read_or_atomic();
        if !finished || !sent {
            break;
        }
        qp.req.ops.pop_front();
        if qp.req.cursor_op > 0 {
            qp.req.cursor_op -= 1;
        } else {
            qp.req.cursor_packet = 0;
        }
        if psn_delta(op.last_psn(), qp.req.unacked_psn) >= 0 {
            qp.req.unacked_psn = psn_add(op.last_psn(), 1);
        }
        progressed = true;
        let (cqn, signal) = (qp.send_cqn, op.signaled);
        if signal {
            let bytes = match op.opcode {
                WQE_OP_ATOMIC_CS | WQE_OP_ATOMIC_FA => 8,
                _ => op.length,
            };
            complete(
                core,
                ctx,
                qpi,
                cqn,
                CQE_REQ,
                rdma_status::SUCCESS,
                op.wqe_index,
                bytes,
                op.opcode,
                0,
                0,
            );
        }
    }
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if progressed {
        forward(qp, now);
    }
    let outstanding = !qp.req.ops.is_empty() && psn_delta(qp.req.sent_high, qp.req.unacked_psn) > 0;
    if !outstanding {
        qp.req.deadline = None;
    } else if qp.req.deadline.is_none() {
        qp.req.deadline = roce::ack_timeout_ns(qp.attr.timeout).map(|t| now + t);
    }
}

/// An RNR NAK (everything before its PSN acknowledged): wait the timer it names, then send
/// again from the oldest PSN still owed a response.
fn rnr(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, timer: u8, now: u64) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if qp.attr.rnr_retry != RNR_RETRY_INFINITE {
        if qp.req.rnr_retry_left == 0 {
            fail_front(core, ctx, qpi, rdma_status::RNR_RETRY_EXCEEDED);
            return;
        }
        qp.req.rnr_retry_left -= 1;
    }
    qp.req.rnr_wait_until = Some(now + RNR_TIMER_NS[usize::from(timer & 0x1f)]);
    qp.req.deadline = None;
    // From the oldest PSN still owed a response (an earlier READ's, say), which is `psn` itself
    // when everything before it was acknowledged.
    let from = qp.req.unacked_psn;
    seek(qp, from);
}

use zerocopy::FromBytes;
