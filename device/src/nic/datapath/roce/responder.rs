//! The responder (IBA §9.7.5, receiver side): requests are executed in PSN order.
//!
//! * The expected PSN: a request at it is checked (opcode sequence, lengths, keys and rights)
//!   and executed; one beyond it is a sequence error, answered by one NAK until the expected
//!   PSN arrives (IBA 9.7.5.1.2); one before it is a duplicate: SEND and WRITE are acknowledged
//!   again and not executed, a READ is executed again from its PSN, an atomic is answered from
//!   the saved result (IBA 9.7.5.1.5).
//! * SEND consumes a receive WQE (the QP's own ring or its SRQ) at its first packet; none posted
//!   is an RNR NAK with the QP's minimum RNR timer, the PSN not consumed. WRITE with immediate
//!   consumes one at its last packet. A QP on a shared multi-packet RQ (FlexDriver §6) instead
//!   places every SEND packet in the RQ's strides as it arrives, with a CQE per packet; no room
//!   is an RNR NAK at that packet's PSN, which the requester resends after the RNR timer.
//! * Errors are NAKed and end the connection (IBA 9.9.3, responder class C): an opcode out of
//!   sequence, a length that breaks the MTU rules, a QP without the right → NAK invalid request;
//!   an rkey that is unknown, of another PD, without the right, or a range past its region →
//!   NAK remote access error, nothing written; a receive WQE too small → local length error on
//!   the receive WQE and NAK invalid request; a receive WQE with a bad lkey → local protection
//!   error and NAK remote operational error. After the NAK the QP enters ERR.
//! * An out-of-order QP (`QP_FLAG_OUT_OF_ORDER`) on a card with a reorder unit takes a request
//!   ahead of the expected PSN instead of NAKing it (LEFT §3.1): recorded in the unit's bitmap,
//!   placed at once when it says where it goes (a single-packet WRITE), else kept in the
//!   reorder buffer and executed in PSN order when the gap closes. No room is an RNR NAK at
//!   the expected PSN, so the requester goes back there (§3.5); a packet a bandwidth-delay
//!   product ahead NAKs the missing one once, which the requester sends alone (§3.5).
//! * Responses are owed, not sent at once: [`respond`] sends READ responses and atomic ACKs in
//!   PSN order, then the newest owed ACK/NAK — which therefore acknowledges a whole batch.

use fld_abi::nic::*;
use fld_abi::wire::roce::{
    self, nak, psn_add, psn_delta, request_opcode, AckKind, Aeth, AtomicAckEth, BthRepr, IbHeaders,
    IbPacket, MessageKind, Position, CREDITS_UNLIMITED,
};

use super::{complete, enter_error, fetch_recv_wqe, qp_event, scatter, transmit, ScatterError};
use super::{keep_in_reorder_buffer, recycle_kept, take_from_reorder_buffer};
use super::{Ctx, NicCore};
use crate::nic::rdma::memory::{self, AccessError};
use crate::nic::rdma::qp::{Inbound, Owed, QueuePair, ReadAtomic};
use crate::nic::rdma::reorder::pool::Recorded;

const ACK: u8 = CREDITS_UNLIMITED;
const fn nak_syndrome(code: u8) -> u8 {
    0x60 | code
}
pub(super) const fn rnr_syndrome(timer: u8) -> u8 {
    0x20 | (timer & 0x1f)
}

pub(super) fn owe(qp: &mut QueuePair, psn: u32, syndrome: u8) {
    // An owed NAK or RNR NAK is not replaced before it is sent: neither by an ACK nor by the
    // sequence NAK that later packets of the same burst earn (they are out of sequence only
    // because of the first NAK; the requester must see the RNR NAK and wait out its timer,
    // IBA 9.7.5.2.8, not spend a transport retry on a sequence NAK).
    qp.resp.owed = match qp.resp.owed {
        Some(o) if o.syndrome != ACK => Some(o),
        _ => Some(Owed { psn, syndrome }),
    };
}

/// NAKs `code` at `psn` and ends the connection once the NAK is out.
fn fatal(qp: &mut QueuePair, psn: u32, code: u8) {
    log::debug!("QP responder: NAK code {code} at PSN {psn:#x}");
    owe(qp, psn, nak_syndrome(code));
    qp.resp.error_after_nak = true;
}

/// A request packet for QP `qpi`.
pub(super) fn receive(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if qp.resp.error_after_nak {
        qp.counters.dropped += 1;
        return;
    }
    if qp.state == QpState::Rtr && !qp.resp.established {
        qp.resp.established = true;
        let (cqn, owner) = (qp.send_cqn, qp.owner);
        qp_event(core, ctx, cqn, owner, qp_event::COMM_ESTABLISHED, qpi);
    }
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    let psn = pkt.headers.bth.psn;
    let d = psn_delta(psn, qp.resp.expected_psn);
    // CREATE_QP gives the flag only on a card with a reorder unit.
    let reorders = qp.out_of_order;
    if d > 0 {
        let vport = usize::from(qp.owner);
        if let Some(c) = core.rdma.counters.get_mut(vport) {
            c.rx_out_of_order += 1;
        }
    }
    if d > 0 && reorders {
        return ahead(core, ctx, qpi, pkt);
    }
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if d > 0 {
        if !nak_sequence(qp) {
            qp.counters.dropped += 1;
        }
        return;
    }
    if d < 0 {
        qp.counters.duplicates += 1;
        duplicate(core, qpi, pkt);
        return;
    }
    qp.resp.gap_closed();
    if reorders {
        // A copy kept while it was ahead (its gathered record still pending) is this one.
        if let Some(u) = core.rdma.reorder.as_mut().filter(|u| !u.buffer.is_empty()) {
            u.buffer.discard(qpi, psn);
        }
    }
    let before = psn;
    execute(core, ctx, qpi, pkt);
    if reorders
        && core
            .rdma
            .qps
            .get(qpi)
            .is_some_and(|q| q.resp.expected_psn != before)
    {
        catch_up(core, ctx, qpi);
    }
}

/// Executes the request at the expected PSN.
fn execute(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    if super::staging::must_wait(core, ctx, qpi, pkt) {
        return;
    }
    match pkt.info.kind {
        MessageKind::Send => send(core, ctx, qpi, pkt),
        MessageKind::Write => write(core, ctx, qpi, pkt),
        MessageKind::ReadRequest => read_request(core, qpi, pkt),
        MessageKind::CompareSwap | MessageKind::FetchAdd => atomic(core, ctx, qpi, pkt),
        _ => {}
    }
}

/// A packet ahead of the expected PSN that is not taken: the sequence NAK at the expected PSN,
/// once per gap (IBA 9.7.5.1.2). Whether it was owed now (false: one is out already).
fn nak_sequence(qp: &mut QueuePair) -> bool {
    if qp.resp.nak_sent {
        return false;
    }
    qp.resp.nak_sent = true;
    qp.counters.seq_naks_sent += 1;
    let e = qp.resp.expected_psn;
    owe(qp, e, nak_syndrome(nak::PSN_SEQUENCE_ERROR));
    true
}

/// Whether a packet ahead says where its data goes, so it is placed as it arrives: a
/// single-packet WRITE without immediate (its RETH names the place, and it completes nothing
/// at the responder). Every other request ahead waits in the reorder buffer.
fn placed_on_arrival(pkt: &IbPacket<'_>) -> bool {
    pkt.info.kind == MessageKind::Write
        && pkt.info.position == Position::Only
        && pkt.headers.imm.is_none()
}

/// LEFT's reorder logic (§3.1) for a packet ahead of the expected PSN on an out-of-order QP:
/// recorded in the reorder unit's bitmap and, if it is new, placed where its RETH says or kept
/// in the reorder buffer until the gap closes — with no ACK (an ACK would cover the packets
/// still missing) and no NAK. A packet the unit has no room for is dropped with an RNR NAK
/// ([`refuse`], §3.5); one it holds already is dropped. A packet a bandwidth-delay product ahead shows the
/// expected one lost: one sequence NAK at the expected PSN asks for it alone (§3.5).
fn ahead(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let psn = pkt.headers.bth.psn;
    let now = ctx.now();
    let direct = placed_on_arrival(pkt);
    let rdma = &mut core.rdma;
    let (Some(unit), Some(qp)) = (rdma.reorder.as_mut(), rdma.qps.get_mut(qpi)) else {
        return;
    };
    let expected = qp.resp.expected_psn;
    if psn_delta(psn, expected) >= unit.loss_reach as i32 && nak_sequence(qp) {
        unit.counters.loss_naks += 1;
    }
    if !direct && unit.buffer.holds(qpi, psn) {
        qp.counters.duplicates += 1;
        return;
    }
    if !direct && !unit.buffer.fits(pkt) {
        unit.counters.refused += 1;
        return refuse(qp);
    }
    if unit.slow_path(psn, expected) {
        // LEFT's slow path (§3.3-3.4): placed or kept now, recorded when its connection's
        // batch leaves the gather queues — several records in a row after one cache swap.
        unit.counters.gathered += 1;
        let batches = unit
            .gather
            .as_mut()
            .map(|g| g.push(qpi, psn, now))
            .unwrap_or_default();
        arrive_ahead(core, ctx, qpi, pkt, direct);
        return record_gathered(core, ctx, batches);
    }
    match unit.record(qpi, psn, expected) {
        Recorded::New(..) => arrive_ahead(core, ctx, qpi, pkt, direct),
        Recorded::Duplicate(..) => qp.counters.duplicates += 1,
        Recorded::Refused => refuse(qp),
    }
}

/// A packet ahead with no room for it (§3.5): dropped, and the expected PSN answered once
/// with an RNR NAK — the receiver has no resources for what follows it — so the requester
/// waits the QP's RNR timer and sends again from there (a sequence NAK would have an
/// out-of-order requester resend only the packet it names, and the dropped ones would wait
/// for its timeout). While the connection is refused, what comes again in order is taken.
fn refuse(qp: &mut QueuePair) {
    if qp.resp.refused || qp.resp.error_after_nak {
        qp.counters.dropped += 1;
        return;
    }
    // Once per gap, even after a sequence NAK for it (IRN NAKs on the first packet ahead):
    // the sender must go back, not resend one packet. It replaces a sequence NAK not yet sent.
    qp.resp.refused = true;
    qp.resp.nak_sent = true;
    qp.counters.rnr_naks_sent += 1;
    let (e, t) = (qp.resp.expected_psn, qp.attr.min_rnr_timer);
    qp.resp.owed = Some(Owed {
        psn: e,
        syndrome: rnr_syndrome(t),
    });
}

/// A recorded packet ahead is placed (`direct`, when its checks pass) or kept in the reorder
/// buffer, whose DMA write the runner is charged. One that fails a check is kept too, so the
/// check fails again when its turn comes and the NAK names its own PSN with everything before
/// it received.
fn arrive_ahead(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>, direct: bool) {
    if direct && place_ahead(core, ctx, qpi, pkt) {
        return;
    }
    let owner = core.rdma.qps.get(qpi).map_or(0, |q| q.owner);
    if keep_in_reorder_buffer(core, ctx, owner, qpi, pkt).is_err() {
        // Checked before it was recorded; should it happen, the connection's record goes (a
        // bit without its packet would be taken as a placed WRITE) and the sender's timeout
        // sends everything again.
        if let Some(unit) = core.rdma.reorder.as_mut() {
            unit.counters.refused += 1;
            unit.pool.forget(qpi);
        }
    }
}

/// Places a single-packet WRITE that arrived ahead, when it passes the checks an in-order one
/// gets; whether it did.
fn place_ahead(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) -> bool {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return false;
    };
    let mtu = mtu_bytes(qp.attr.path_mtu).unwrap_or(1024) as usize;
    let Some(reth) = pkt.headers.reth else {
        return false;
    };
    if qp.attr.access_flags.get() & access::REMOTE_WRITE == 0
        || pkt.payload.len() > mtu
        || reth.dma_length as usize != pkt.payload.len()
    {
        return false;
    }
    let (va, len) = (reth.virtual_address, pkt.payload.len() as u64);
    let Ok(target) = remote_target(core, qpi, reth.rkey, va, len, access::REMOTE_WRITE) else {
        return false;
    };
    let owner = qp.owner;
    pkt.payload.is_empty()
        || target
            .write(ctx.dma(owner), &core.rdma.mtt_cache, va, pkt.payload)
            .is_ok()
}

/// Records batches the gather queues released, each connection's packets in a row, and lets
/// each connection's expected PSN catch up with what is now recorded.
pub(super) fn record_gathered(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    batches: Vec<crate::nic::rdma::reorder::gather::Batch<u32>>,
) {
    for b in batches {
        for psn in b.packets {
            let rdma = &mut core.rdma;
            let (Some(unit), Some(qp)) = (rdma.reorder.as_mut(), rdma.qps.get_mut(b.conn)) else {
                break;
            };
            if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
                break;
            }
            let d = psn_delta(psn, qp.resp.expected_psn);
            if d < 0 {
                // Taken in order meanwhile (a copy sent again arrived first).
                unit.buffer.discard(b.conn, psn);
            } else if d == 0 {
                // Its turn came while it waited in the gather queue: taken now, as a walk
                // over it would (placed, or kept and executed).
                let _ = walk(core, ctx, b.conn, psn, psn_add(psn, 1));
            } else if unit.record(b.conn, psn, qp.resp.expected_psn) == Recorded::Refused {
                // No room after all (§3.5): dropped; the sender sends it again.
                unit.buffer.discard(b.conn, psn);
                refuse(qp);
            }
        }
        catch_up(core, ctx, b.conn);
        core.rdma.wake(b.conn);
    }
}

/// The packets the reorder unit recorded right from the expected PSN on are taken in order:
/// a placed single-packet WRITE is one message done; a kept packet is read back from the
/// reorder buffer and executed as if it had just arrived (a READ moves the expected PSN past
/// its responses' PSNs, and the walk goes on from there). Run when the expected PSN moved, or
/// when gathered packets were recorded. A kept packet that cannot be taken now (no receive
/// WQE: an RNR NAK at its PSN, or an error) ends the walk; the packets recorded after it are
/// forgotten, to come again behind it.
fn catch_up(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) {
    let Some(start) = core.rdma.qps.get(qpi).map(|q| q.resp.expected_psn) else {
        return;
    };
    loop {
        let rdma = &mut core.rdma;
        let (Some(unit), Some(qp)) = (rdma.reorder.as_mut(), rdma.qps.get_mut(qpi)) else {
            return;
        };
        let from = qp.resp.expected_psn;
        let next = match unit.pool.has_bitmap(qpi) {
            true => unit.pool.advance(qpi, from),
            false => from,
        };
        if next == from {
            // A kept packet its bitmap lost (an eviction the pool had no room for) is taken
            // all the same when its turn comes.
            if unit.buffer.holds(qpi, from) && walk(core, ctx, qpi, from, psn_add(from, 1)).is_ok()
            {
                continue;
            }
            break;
        }
        match walk(core, ctx, qpi, from, next) {
            Ok(()) => continue,
            Err(stopped) => {
                // What the walk did not reach comes again behind the packet that stopped it.
                if let Some(unit) = core.rdma.reorder.as_mut() {
                    let mut p = psn_add(stopped, 1);
                    while psn_delta(p, next) < 0 {
                        unit.buffer.discard(qpi, p);
                        p = psn_add(p, 1);
                    }
                }
                break;
            }
        }
    }
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        if qp.resp.expected_psn != start {
            qp.resp.gap_closed();
        }
    }
}

/// Takes the recorded packets `from .. next` in order (see [`catch_up`]); `Err(psn)`: the
/// packet at `psn` stopped the walk.
fn walk(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, from: u32, next: u32) -> Result<(), u32> {
    let mut psn = from;
    while psn_delta(psn, next) < 0 {
        let Some(owner) = core.rdma.qps.get(qpi).map(|q| q.owner) else {
            return Err(psn);
        };
        match take_from_reorder_buffer(core, ctx, owner, qpi, psn) {
            None => {
                let Some(qp) = core.rdma.qps.get_mut(qpi) else {
                    return Err(psn);
                };
                if qp.resp.inbound.is_some() {
                    // A single-packet WRITE inside another message: out of sequence.
                    fatal(qp, psn, nak::INVALID_REQUEST);
                    return Err(psn);
                }
                qp.resp.msn = psn_add(qp.resp.msn, 1);
                qp.resp.expected_psn = psn_add(psn, 1);
                owe(qp, psn, ACK);
            }
            Some(held) => {
                execute(core, ctx, qpi, &held.packet());
                recycle_kept(core, held);
                let Some(q) = core.rdma.qps.get(qpi) else {
                    return Err(psn);
                };
                if q.resp.expected_psn == psn || q.resp.error_after_nak {
                    return Err(psn);
                }
            }
        }
        let Some(q) = core.rdma.qps.get(qpi) else {
            return Err(psn);
        };
        psn = q.resp.expected_psn;
    }
    Ok(())
}

/// The payload rules of IBA 9.7.5.1.3: FIRST and MIDDLE carry exactly one MTU, LAST and ONLY at
/// most one (LAST at least one byte).
fn length_ok(position: Position, len: usize, mtu: usize) -> bool {
    match position {
        Position::First | Position::Middle => len == mtu,
        Position::Last => (1..=mtu).contains(&len),
        Position::Only => len <= mtu,
    }
}

/// The next PSN is expected; ACK this one when asked.
pub(super) fn advance(qp: &mut QueuePair, psn: u32, ack_request: bool) {
    qp.resp.expected_psn = psn_add(psn, 1);
    if ack_request {
        owe(qp, psn, ACK);
    }
}

/// Takes the next receive WQE (the QP's ring or its SRQ): its counter, or `None` when none is
/// posted.
fn take_recv_wqe(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> Option<(u32, bool)> {
    let qp = core.rdma.qps.get(qpi)?;
    match qp.srq {
        None => {
            let pi = ctx.doorbell(qp.owner, db::slot(db::QP_RQ_BASE, qpi)) & db::PI_MASK;
            let pending = pi.wrapping_sub(qp.rq_counter) & db::PI_MASK;
            if pending == 0 || pending > 1 << qp.rq.log_size {
                return None;
            }
            let qp = core.rdma.qps.get_mut(qpi)?;
            let c = qp.rq_counter;
            qp.rq_counter = c.wrapping_add(1);
            Some((c, false))
        }
        Some(s) => {
            let owner = qp.owner;
            let srq = core.rdma.srqs.get_mut(s)?;
            let pi = ctx.doorbell(owner, db::slot(db::SRQ_BASE, s)) & db::PI_MASK;
            let pending = pi.wrapping_sub(srq.counter) & db::PI_MASK;
            if pending == 0 || pending > 1 << srq.ring.log_size {
                return None;
            }
            let c = srq.counter;
            srq.counter = c.wrapping_add(1);
            // The limit event: fewer WQEs than the armed limit remain (fires once, disarms).
            if srq.limit != 0 && pending - 1 < srq.limit {
                srq.limit = 0;
                let eqn = srq.limit_eqn;
                // ARM_SRQ checked the EQ, but it holds no reference: an EQ destroyed since
                // (and its number reused by another function) gets nothing.
                if core.eqs.owned(eqn, owner).is_ok() {
                    super::post_event(core, ctx, eqn, owner, EQE_SRQ_LIMIT, 0, s);
                }
            }
            Some((c, true))
        }
    }
}

fn send(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    let psn = pkt.headers.bth.psn;
    let mtu = mtu_bytes(qp.attr.path_mtu).unwrap_or(1024) as usize;
    let position = pkt.info.position;
    let starts = matches!(position, Position::First | Position::Only);
    let open = matches!(qp.resp.inbound, Some(Inbound::Send { .. }));
    if starts == open || matches!(qp.resp.inbound, Some(Inbound::Write { .. })) {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    if !length_ok(position, pkt.payload.len(), mtu) {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    if let Some(rqn) = qp.packet_rq {
        return send_to_packet_rq(core, ctx, qpi, rqn, pkt);
    }
    if starts {
        let Some((wqe_counter, srq)) = take_recv_wqe(core, ctx, qpi) else {
            let qp = core.rdma.qps.get_mut(qpi).expect("present");
            qp.counters.rnr_naks_sent += 1;
            let t = qp.attr.min_rnr_timer;
            return owe(qp, psn, rnr_syndrome(t));
        };
        let qp = core.rdma.qps.get_mut(qpi).expect("present");
        qp.resp.inbound = Some(Inbound::Send {
            wqe_counter,
            srq,
            received: 0,
        });
    }
    let qp = core.rdma.qps.get(qpi).expect("present");
    let Some(Inbound::Send {
        wqe_counter,
        srq,
        received,
    }) = qp.resp.inbound
    else {
        return;
    };
    let mut wqe = [0u8; 512];
    let placed = if !fetch_recv_wqe(core, ctx, qp, srq, wqe_counter, &mut wqe) {
        Err(ScatterError::Access(AccessError::Dma))
    } else {
        let stride = 1usize
            << if srq {
                qp.srq
                    .and_then(|s| core.rdma.srqs.get(s))
                    .map_or(4, |s| s.ring.log_stride)
            } else {
                qp.rq.log_stride
            };
        let sges = recv_sges(&wqe[..stride]);
        scatter(
            &core.rdma,
            ctx,
            qp.owner,
            qp.pd,
            sges,
            received as usize,
            pkt.payload,
        )
    };
    let (rcq, flags) = (qp.recv_cqn, if srq { cqe_flags::SRQ } else { 0 });
    if let Err(e) = placed {
        let (status, code) = match e {
            ScatterError::Length => (rdma_status::LOCAL_LENGTH, nak::INVALID_REQUEST),
            ScatterError::Access(_) => {
                (rdma_status::LOCAL_PROTECTION, nak::REMOTE_OPERATIONAL_ERROR)
            }
        };
        if let Some(qp) = core.rdma.qps.get_mut(qpi) {
            qp.resp.inbound = None;
            fatal(qp, psn, code);
        }
        complete(
            core,
            ctx,
            qpi,
            rcq,
            CQE_RESP_ERR,
            status,
            wqe_counter as u16,
            0,
            0,
            0,
            flags,
        );
        return;
    }
    let received = received + pkt.payload.len() as u32;
    let qp = core.rdma.qps.get_mut(qpi).expect("present");
    let ends = matches!(position, Position::Last | Position::Only);
    if ends {
        qp.resp.inbound = None;
        qp.resp.msn = psn_add(qp.resp.msn, 1);
    } else {
        qp.resp.inbound = Some(Inbound::Send {
            wqe_counter,
            srq,
            received,
        });
    }
    advance(qp, psn, pkt.headers.bth.ack_request);
    if ends {
        let (opcode, imm) = match pkt.headers.imm {
            Some(i) => (CQE_RESP_SEND_IMM, i.0),
            None => (CQE_RESP_SEND, 0),
        };
        let solicited = if pkt.headers.bth.solicited {
            cqe_flags::SOLICITED
        } else {
            0
        };
        complete(
            core,
            ctx,
            qpi,
            rcq,
            opcode,
            rdma_status::SUCCESS,
            wqe_counter as u16,
            received,
            0,
            imm,
            flags | solicited,
        );
    }
}

/// A SEND packet of a QP on the shared multi-packet RQ `rqn`: its payload goes into the RQ's
/// next strides at once, completed with a CQE that names the QP and the packet's place in its
/// message (the immediate and the solicited bit on the last packet).
fn send_to_packet_rq(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    rqn: u32,
    pkt: &IbPacket<'_>,
) {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return;
    };
    let psn = pkt.headers.bth.psn;
    let (first, last) = match pkt.info.position {
        Position::First => (true, false),
        Position::Middle => (false, false),
        Position::Last => (false, true),
        Position::Only => (true, true),
    };
    let imm = pkt.headers.imm.filter(|_| last).map(|i| i.0);
    let opcode = if imm.is_some() {
        CQE_RESP_SEND_IMM
    } else {
        CQE_RESP_SEND
    };
    let mut flags = cqe_flags::QP;
    if first {
        flags |= cqe_flags::MSG_FIRST;
    }
    if last {
        flags |= cqe_flags::MSG_LAST;
        if pkt.headers.bth.solicited {
            flags |= cqe_flags::SOLICITED;
        }
    }
    let cqe = Cqe {
        qn: zerocopy::little_endian::U32::new(crate::nic::rdma::Rdma::qpn(qpi)),
        vport: zerocopy::little_endian::U16::new(qp.owner),
        imm: zerocopy::little_endian::U32::new(imm.unwrap_or(0)),
        flags,
        ..Default::default()
    };
    if !super::super::receive::receive(core, ctx, rqn, pkt.payload, cqe, opcode) {
        let Some(qp) = core.rdma.qps.get_mut(qpi) else {
            return;
        };
        qp.counters.rnr_naks_sent += 1;
        let t = qp.attr.min_rnr_timer;
        return owe(qp, psn, rnr_syndrome(t));
    }
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if last {
        qp.resp.inbound = None;
        qp.resp.msn = psn_add(qp.resp.msn, 1);
    } else {
        let received = match qp.resp.inbound {
            Some(Inbound::Send { received, .. }) => received,
            _ => 0,
        };
        qp.resp.inbound = Some(Inbound::Send {
            wqe_counter: 0,
            srq: false,
            received: received + pkt.payload.len() as u32,
        });
    }
    advance(qp, psn, pkt.headers.bth.ack_request);
}

/// Checks `rkey` for `len` bytes at `va` with `right` for a request of QP `qpi`.
fn remote_target(
    core: &NicCore,
    qpi: u32,
    rkey: u32,
    va: u64,
    len: u64,
    right: u32,
) -> Result<memory::Target, AccessError> {
    let qp = core.rdma.qps.get(qpi).ok_or(AccessError::BadKey)?;
    memory::check(&core.rdma.mrs, qp.owner, qp.pd, rkey, va, len, right, false)
}

fn write(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    let psn = pkt.headers.bth.psn;
    let mtu = mtu_bytes(qp.attr.path_mtu).unwrap_or(1024) as usize;
    let position = pkt.info.position;
    let starts = matches!(position, Position::First | Position::Only);
    let open = matches!(qp.resp.inbound, Some(Inbound::Write { .. }));
    if starts == open || matches!(qp.resp.inbound, Some(Inbound::Send { .. })) {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    if qp.attr.access_flags.get() & access::REMOTE_WRITE == 0
        || !length_ok(position, pkt.payload.len(), mtu)
    {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    let len = pkt.payload.len() as u32;
    let (va, rkey, remaining, total) = match (starts, pkt.headers.reth, qp.resp.inbound) {
        (true, Some(r), _) => (r.virtual_address, r.rkey, r.dma_length, r.dma_length),
        (
            false,
            _,
            Some(Inbound::Write {
                va,
                rkey,
                remaining,
                total,
            }),
        ) => (
            va.wrapping_add(u64::from(total - remaining)),
            rkey,
            remaining,
            total,
        ),
        _ => return fatal(qp, psn, nak::INVALID_REQUEST),
    };
    let ends = matches!(position, Position::Last | Position::Only);
    // The message's length must come out exactly at its last packet.
    if (ends && len != remaining) || (!ends && len >= remaining) {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    // The whole remote range is checked with the first packet, the rest of it with each.
    let check_len = if starts {
        u64::from(total)
    } else {
        u64::from(len)
    };
    let target = match remote_target(core, qpi, rkey, va, check_len, access::REMOTE_WRITE) {
        Ok(t) => t,
        Err(_) => {
            let qp = core.rdma.qps.get_mut(qpi).expect("present");
            qp.resp.inbound = None;
            return fatal(qp, psn, nak::REMOTE_ACCESS_ERROR);
        }
    };
    if super::staging::stage(core, ctx, qpi, pkt, &target, (va, rkey)) {
        return;
    }
    // WRITE with immediate needs a receive WQE; without one, nothing of this packet happens. A
    // QP on a multi-packet RQ has none to give: an invalid request.
    let qp = core.rdma.qps.get_mut(qpi).expect("present");
    if ends && pkt.headers.imm.is_some() && qp.packet_rq.is_some() {
        qp.resp.inbound = None;
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    let recv = if ends && pkt.headers.imm.is_some() {
        match take_recv_wqe(core, ctx, qpi) {
            Some(w) => Some(w),
            None => {
                let qp = core.rdma.qps.get_mut(qpi).expect("present");
                qp.counters.rnr_naks_sent += 1;
                let t = qp.attr.min_rnr_timer;
                return owe(qp, psn, rnr_syndrome(t));
            }
        }
    } else {
        None
    };
    let owner = core.rdma.qps.get(qpi).map_or(0, |q| q.owner);
    if !pkt.payload.is_empty()
        && target
            .write(ctx.dma(owner), &core.rdma.mtt_cache, va, pkt.payload)
            .is_err()
    {
        let qp = core.rdma.qps.get_mut(qpi).expect("present");
        qp.resp.inbound = None;
        return fatal(qp, psn, nak::REMOTE_ACCESS_ERROR);
    }
    let qp = core.rdma.qps.get_mut(qpi).expect("present");
    qp.resp.inbound = if ends {
        qp.resp.msn = psn_add(qp.resp.msn, 1);
        None
    } else {
        Some(Inbound::Write {
            va: va.wrapping_sub(u64::from(total - remaining)),
            rkey,
            remaining: remaining - len,
            total,
        })
    };
    advance(qp, psn, pkt.headers.bth.ack_request);
    if let (Some((wqe_counter, srq)), Some(imm)) = (recv, pkt.headers.imm) {
        let rcq = qp.recv_cqn;
        let mut flags = if srq { cqe_flags::SRQ } else { 0 };
        if pkt.headers.bth.solicited {
            flags |= cqe_flags::SOLICITED;
        }
        complete(
            core,
            ctx,
            qpi,
            rcq,
            CQE_RESP_WRITE_IMM,
            rdma_status::SUCCESS,
            wqe_counter as u16,
            total,
            0,
            imm.0,
            flags,
        );
    }
}

/// Room for one more READ/atomic: the oldest entry goes. A requester keeps at most
/// `max_rd_atomic` (no more than our `max_dest_rd_atomic`) outstanding, so a new one means it
/// is done with the oldest — even if a late duplicate of it is being answered again (as Linux
/// soft-RoCE reuses its oldest resource).
fn make_room(qp: &mut QueuePair) {
    let max = usize::from(qp.attr.max_dest_rd_atomic.max(1));
    while qp.resp.reads.len() >= max {
        qp.resp.reads.pop_front();
    }
}

fn read_request(core: &mut NicCore, qpi: u32, pkt: &IbPacket<'_>) {
    let psn = pkt.headers.bth.psn;
    let Some(reth) = pkt.headers.reth else {
        return;
    };
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if qp.resp.inbound.is_some() || qp.attr.access_flags.get() & access::REMOTE_READ == 0 {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    let mtu = mtu_bytes(qp.attr.path_mtu).unwrap_or(1024);
    let len = reth.dma_length;
    let checked = remote_target(
        core,
        qpi,
        reth.rkey,
        reth.virtual_address,
        u64::from(len),
        access::REMOTE_READ,
    );
    let qp = core.rdma.qps.get_mut(qpi).expect("present");
    if checked.is_err() {
        return fatal(qp, psn, nak::REMOTE_ACCESS_ERROR);
    }
    if len > 1 << 31 {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    make_room(qp);
    let packets = len.div_ceil(mtu).max(1);
    qp.resp.reads.push_back(ReadAtomic {
        first_psn: psn,
        packets,
        atomic: false,
        va: reth.virtual_address,
        rkey: reth.rkey,
        length: len,
        sent: 0,
        original: 0,
    });
    qp.resp.expected_psn = psn_add(psn, packets);
    qp.resp.msn = psn_add(qp.resp.msn, 1);
}

fn atomic(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) {
    let psn = pkt.headers.bth.psn;
    let Some(a) = pkt.headers.atomic_eth else {
        return;
    };
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if qp.resp.inbound.is_some()
        || qp.attr.access_flags.get() & access::REMOTE_ATOMIC == 0
        || a.virtual_address % 8 != 0
    {
        return fatal(qp, psn, nak::INVALID_REQUEST);
    }
    let owner = qp.owner;
    let target = match remote_target(
        core,
        qpi,
        a.rkey,
        a.virtual_address,
        8,
        access::REMOTE_ATOMIC,
    ) {
        Ok(t) => t,
        Err(_) => {
            let qp = core.rdma.qps.get_mut(qpi).expect("present");
            return fatal(qp, psn, nak::REMOTE_ACCESS_ERROR);
        }
    };
    make_room(core.rdma.qps.get_mut(qpi).expect("present"));
    // The 8 bytes are read, changed and written back as one operation of the NIC (no other
    // access to host memory can come between them in this single-threaded engine).
    let mut cur = [0u8; 8];
    let dma = ctx.dma(owner);
    let cache = &core.rdma.mtt_cache;
    let done = target
        .read(dma, cache, a.virtual_address, &mut cur)
        .and_then(|_| {
            let original = u64::from_le_bytes(cur);
            let new = if pkt.headers.bth.opcode == roce::opcode::COMPARE_SWAP {
                if original == a.compare {
                    a.swap_add
                } else {
                    original
                }
            } else {
                original.wrapping_add(a.swap_add)
            };
            target
                .write(dma, cache, a.virtual_address, &new.to_le_bytes())
                .map(|_| original)
        });
    let qp = core.rdma.qps.get_mut(qpi).expect("present");
    let Ok(original) = done else {
        return fatal(qp, psn, nak::REMOTE_ACCESS_ERROR);
    };
    qp.resp.reads.push_back(ReadAtomic {
        first_psn: psn,
        packets: 1,
        atomic: true,
        va: a.virtual_address,
        rkey: a.rkey,
        length: 8,
        sent: 0,
        original,
    });
    qp.resp.expected_psn = psn_add(psn, 1);
    qp.resp.msn = psn_add(qp.resp.msn, 1);
}

/// A request with a PSN already seen.
fn duplicate(core: &mut NicCore, qpi: u32, pkt: &IbPacket<'_>) {
    let psn = pkt.headers.bth.psn;
    let mtu = core
        .rdma
        .qps
        .get(qpi)
        .and_then(|q| mtu_bytes(q.attr.path_mtu))
        .unwrap_or(1024);
    let reth = pkt.headers.reth;
    let checked = reth.map(|r| {
        remote_target(
            core,
            qpi,
            r.rkey,
            r.virtual_address,
            u64::from(r.dma_length),
            access::REMOTE_READ,
        )
        .is_ok()
    });
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    match pkt.info.kind {
        MessageKind::ReadRequest => {
            // Executed again from this PSN with the (possibly shortened) range it names.
            let (Some(r), Some(true)) = (reth, checked) else {
                qp.counters.dropped += 1;
                return;
            };
            let found = qp.resp.reads.iter_mut().find(|e| {
                !e.atomic
                    && psn_delta(psn, e.first_psn) >= 0
                    && psn_delta(psn, psn_add(e.first_psn, e.packets)) < 0
            });
            match found {
                Some(e) => {
                    e.first_psn = psn;
                    e.va = r.virtual_address;
                    e.length = r.dma_length;
                    e.packets = r.dma_length.div_ceil(mtu).max(1);
                    e.sent = 0;
                }
                None => qp.counters.dropped += 1,
            }
        }
        MessageKind::CompareSwap | MessageKind::FetchAdd => {
            match qp
                .resp
                .reads
                .iter_mut()
                .find(|e| e.atomic && e.first_psn == psn)
            {
                Some(e) => e.sent = 0,
                None => qp.counters.dropped += 1,
            }
        }
        _ => {
            // Acknowledge everything received so far again.
            let last = psn_add(qp.resp.expected_psn, roce::PSN_MASK);
            owe(qp, last, ACK);
        }
    }
}

/// Sends what the responder owes: READ responses and atomic ACKs in PSN order, then the owed
/// ACK/NAK when no earlier response is still waiting. Returns the packets sent.
pub(super) fn respond(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32, budget: usize) -> usize {
    let mut sent = 0;
    while sent < budget {
        let Some(qp) = core.rdma.qps.get(qpi) else {
            return sent;
        };
        let Some(i) = qp.resp.reads.iter().position(|e| e.sent < e.packets) else {
            break;
        };
        let e = qp.resp.reads[i];
        let msn = qp.resp.msn;
        if let Some(o) = qp.resp.owed {
            // A NAK for a PSN before this response goes first (it ends the connection anyway).
            if o.syndrome != ACK && psn_delta(o.psn, e.first_psn) < 0 {
                break;
            }
        }
        match send_read_response(core, ctx, qpi, &e, msn) {
            Ok(()) => {
                sent += 1;
                if let Some(e) = core
                    .rdma
                    .qps
                    .get_mut(qpi)
                    .and_then(|q| q.resp.reads.get_mut(i))
                {
                    e.sent += 1;
                }
            }
            Err(()) => {
                // The region went away under a READ: the responder cannot go on.
                if let Some(qp) = core.rdma.qps.get_mut(qpi) {
                    qp.resp.reads.remove(i);
                    let psn = psn_add(e.first_psn, e.sent);
                    fatal(qp, psn, nak::REMOTE_ACCESS_ERROR);
                }
            }
        }
    }
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return sent;
    };
    let Some(owed) = qp.resp.owed else {
        return sent;
    };
    let waiting = qp
        .resp
        .reads
        .iter()
        .any(|e| e.sent < e.packets && psn_delta(e.first_psn, owed.psn) < 0);
    if waiting || sent >= budget {
        return sent;
    }
    let msn = qp.resp.msn;
    let kind = match owed.syndrome >> 5 {
        0 => AckKind::Ack {
            credits: owed.syndrome & 0x1f,
        },
        1 => AckKind::RnrNak {
            timer: owed.syndrome & 0x1f,
        },
        _ => AckKind::Nak {
            code: owed.syndrome & 0x1f,
        },
    };
    let headers = IbHeaders {
        bth: BthRepr {
            opcode: roce::opcode::ACKNOWLEDGE,
            psn: owed.psn,
            ..Default::default()
        },
        aeth: Some(Aeth { kind, msn }),
        ..Default::default()
    };
    let _ = transmit::<(), _>(core, ctx, qpi, headers, 0, |_, _, _| Ok(()));
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return sent + 1;
    };
    qp.resp.owed = None;
    qp.counters.acks_sent += 1;
    if qp.resp.error_after_nak {
        enter_error(core, ctx, qpi);
    }
    sent + 1
}

/// Response packet `e.sent` of a READ (payload read from the region now), or an atomic's ACK.
fn send_read_response(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    e: &ReadAtomic,
    msn: u32,
) -> Result<(), ()> {
    let aeth = Some(Aeth {
        kind: AckKind::Ack { credits: ACK },
        msn,
    });
    if e.atomic {
        let headers = IbHeaders {
            bth: BthRepr {
                opcode: roce::opcode::ATOMIC_ACKNOWLEDGE,
                psn: e.first_psn,
                ..Default::default()
            },
            aeth,
            atomic_ack_eth: Some(AtomicAckEth {
                original: e.original,
            }),
            ..Default::default()
        };
        transmit::<(), _>(core, ctx, qpi, headers, 0, |_, _, _| Ok(()))?;
        return Ok(());
    }
    let mtu = core
        .rdma
        .qps
        .get(qpi)
        .and_then(|q| mtu_bytes(q.attr.path_mtu))
        .unwrap_or(1024);
    let k = e.sent;
    let last = k + 1 == e.packets;
    let position = match (k == 0, last) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, true) => Position::Last,
        (false, false) => Position::Middle,
    };
    let offset = u64::from(k) * u64::from(mtu);
    let len = (e.length as u64 - offset).min(u64::from(mtu)) as usize;
    let va = e.va.wrapping_add(offset);
    let target = if len > 0 {
        Some(
            remote_target(core, qpi, e.rkey, va, len as u64, access::REMOTE_READ)
                .map_err(|_| ())?,
        )
    } else {
        None
    };
    let owner = core.rdma.qps.get(qpi).map_or(0, |q| q.owner);
    let headers = IbHeaders {
        bth: BthRepr {
            opcode: request_opcode(MessageKind::ReadResponse, position, false),
            psn: psn_add(e.first_psn, k),
            ..Default::default()
        },
        aeth: matches!(position, Position::First | Position::Last | Position::Only)
            .then_some(aeth)
            .flatten(),
        ..Default::default()
    };
    transmit(
        core,
        ctx,
        qpi,
        headers,
        len,
        |rdma, ctx, out| match target {
            Some(t) => t
                .read(ctx.dma(owner), &rdma.mtt_cache, va, out)
                .map_err(|_| ()),
            None => Ok(()),
        },
    )?;
    Ok(())
}

use fld_abi::nic::recv_sges;
