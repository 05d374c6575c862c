//! The RoCEv2 reliable-connection transport block (IBA ch. 9 and Annex A17): the engine that
//! moves the data of the RDMA objects in `nic::rdma`.
//!
//! * Receive: a RoCEv2 frame (UDP to 4791) that the eSwitch delivers to a vPort and whose
//!   destination IP is one of the vPort's GIDs is the transport's — ahead of the vPort's
//!   receive tables, as an RNIC's RDMA steering sits before its Ethernet receive steering.
//!   The ICRC is checked (a mismatch is a silent, counted drop, IBA 9.8.3.1), the headers
//!   parsed, the destination QP found (unknown: counted drop), and the packet handed to the
//!   QP's [`responder`] (requests) or [`requester`] (responses).
//! * Poll: per QP, the responder's owed READ/atomic responses and ACK/NAK go out first, then
//!   the requester's timers run and it sends new or retransmitted packets; a QP in the error
//!   state flushes its work queues.
//! * Scheduling: a pass visits the QPs on the ready list, as a hardware scheduler serves the
//!   queues with news: a QP goes on it when its doorbell is rung, a packet arrives for it, its
//!   timer (ACK, RNR, StaR's) comes due, or it had work left when its budget ran out; after any
//!   command every QP not in RESET is visited once. A pass costs the QPs that have something to
//!   do, not the connections that exist. Doorbells the host stores to without trapping (a
//!   vfio-user client's mapped doorbell page) are not seen: while a function's are, every pass
//!   visits every QP.
//! * Transmit: frames enter the eSwitch from the QP's vPort like any other traffic, so flow
//!   rules see and steer them.
//!
//! Nothing here transmits while a received packet is being handled: responses are owed and sent
//! by the next poll, so a loopback between two QPs of one NIC never recurses, and ACKs coalesce.

mod requester;
mod responder;
mod staging;
mod star;
mod star_client;

use zerocopy::little_endian::{U16, U32};

use super::completions::{post_cqe, post_event};
use super::switching::{switch_frame, Frame};
use super::{Ctx, NicCore};
use crate::nic::packet::{self, L3Kind, L4Kind, ParsedFrame};
use crate::nic::rdma::memory::{self, AccessError};
use crate::nic::rdma::qp::QueuePair;
use crate::nic::rdma::reorder::buffer::{Held, NotKept};
use crate::nic::rdma::Rdma;
use fld_abi::nic::*;
use fld_abi::wire::roce::{self, IbPacket, RoceAddress, TransportHeaders};
use fld_abi::wire::{ipv4, udp};

/// Whether a frame delivered to `vport` belongs to that function's RDMA transport. Datagrams
/// for QP1 (the GSI, IBA 13.5.1) do not: the engine runs reliable connections only, so the
/// connection manager's MADs walk the vPort's receive tables like any frame, to the driver's
/// GSI (`docs/nic-interface.md` §15.8).
pub(super) fn claims(core: &NicCore, vport: u16, bytes: &[u8], p: &ParsedFrame) -> bool {
    p.l4 == L4Kind::Udp
        && p.dst_port == roce::ROCE_V2_PORT
        && !p.malformed
        && core
            .rdma
            .owns_address(vport, &p.dst_ip, p.l3 == L3Kind::Ipv4)
        && packet::roce_dest_qp(bytes, p) != Some(roce::GSI_QPN)
}

/// A RoCEv2 frame for `vport`'s transport.
pub(super) fn receive(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    bytes: &[u8],
    p: &ParsedFrame,
) {
    let Some(counters) = core.rdma.counters.get_mut(vport as usize) else {
        return;
    };
    counters.rx_packets += 1;
    let ip = usize::from(p.l3_offset);
    let ip_end = ip + usize::from(p.ip_len);
    let ipv6 = p.l3 == L3Kind::Ipv6;
    // RoCEv2 packets carry no IPv4 options (the ICRC masks a 20-byte header).
    let ib_at = usize::from(p.l4_offset) + udp::HEADER_LEN;
    let ok_header = ipv6 || usize::from(p.l3_header_len) == ipv4::HEADER_LEN;
    // StaR's packets use IBA's manufacturer-specific opcodes (§16).
    let opcode = bytes.get(ib_at).copied().unwrap_or(0);
    if ok_header && roce::star::is_star_opcode(opcode) {
        star::receive(core, ctx, vport, bytes, p);
        return;
    }
    let parsed = bytes
        .get(ib_at..ip_end)
        .filter(|_| ok_header)
        .and_then(|b| IbPacket::parse(b).ok());
    let Some(pkt) = parsed else {
        counters.rx_malformed += 1;
        return;
    };
    if roce::icrc(bytes, ip, ip_end, ipv6) != Some(pkt.icrc) {
        counters.rx_icrc_errors += 1;
        return;
    }
    let qpi = Rdma::qp_index(pkt.headers.bth.dest_qp);
    let Some(qpi) = qpi.filter(|i| core.rdma.qps.get(*i).is_some_and(|q| q.owner == vport)) else {
        counters.rx_unknown_qp += 1;
        return;
    };
    // The packet needs the QP's context on chip; a miss fetches it from context memory.
    if !core.rdma.qp_cache.touch(qpi, ()) {
        ctx.dma(vport)
            .account_context_read(core.rdma.qp_context_bytes);
    }
    let qp = core.rdma.qps.get_mut(qpi).expect("checked above");
    if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Err) {
        counters.rx_qp_not_ready += 1;
        return;
    }
    // Partitioning (IBA §9.6.1.1, §10.9.3): the packet's P_Key must match the entry of the
    // destination QP's P_Key index, else it is dropped silently and counted.
    let own = core
        .rdma
        .pkeys
        .get(usize::from(vport))
        .and_then(|t| t.get(usize::from(qp.attr.pkey_index.get())))
        .copied()
        .unwrap_or(0);
    if !pkey_matches(pkt.headers.bth.pkey, own) {
        counters.rx_bad_pkey += 1;
        return;
    }
    // A connected QP takes packets from its peer only (the address it was connected to, as
    // Linux soft-RoCE's address check does): a packet naming another tenant's QP is dropped
    // before it can touch that QP's sequence.
    let from_peer = if ipv6 {
        p.src_ip == qp.attr.dgid
    } else {
        roce::gid_is_ipv4(&qp.attr.dgid) && p.src_ip[..4] == qp.attr.dgid[12..]
    };
    if !from_peer {
        counters.rx_wrong_source += 1;
        return;
    }
    qp.counters.packets_received += 1;
    qp.counters.bytes_received += pkt.payload.len() as u64;
    // Whatever the packet does, the QP may have something to send: the next pass visits it.
    core.rdma.wake(qpi);
    if pkt.info.kind.is_request() {
        responder::receive(core, ctx, qpi, &pkt);
    } else {
        requester::receive(core, ctx, qpi, &pkt);
    }
}

/// Whether `vport`'s egress security module lets a frame it sends out (§16.5); a blocked StaR
/// packet is counted in star_tx_blocked. Inline, so that every frame that is not RoCE, which is
/// nearly every frame an Ethernet queue sends, passes on two compares.
#[inline(always)]
pub(super) fn star_egress_allowed(
    core: &mut NicCore,
    vport: u16,
    frame: &[u8],
    p: &ParsedFrame,
) -> bool {
    let not_roce = p.l4 != L4Kind::Udp || p.dst_port != roce::ROCE_V2_PORT;
    // A vPort with no module is closed to everything, as the module's own check has it.
    if not_roce && usize::from(vport) < core.rdma.guards.len() {
        return true;
    }
    star_egress_check(core, vport, frame, p)
}

/// [`star_egress_allowed`] for a frame to the RoCEv2 port.
fn star_egress_check(core: &mut NicCore, vport: u16, frame: &[u8], p: &ParsedFrame) -> bool {
    let f = usize::from(vport);
    let verdict = core
        .rdma
        .guards
        .get(f)
        .map_or(crate::nic::star_guard::Verdict::Blocked, |g| {
            g.check(frame, p)
        });
    if verdict != crate::nic::star_guard::Verdict::Blocked {
        return true;
    }
    if let Some(c) = core.rdma.counters.get_mut(f) {
        c.star_tx_blocked += 1;
    }
    false
}

/// Runs the QPs on the ready list (every QP not in RESET after a command, or when a function's
/// doorbells are not seen); returns the packets sent and entries written.
pub(super) fn poll(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    // Time is read only when something waits for it: a pass with no timer armed reads no clock.
    if let Some(first) = core.rdma.next_timer() {
        expire(core, ctx, first);
    }
    let rdma = &mut core.rdma;
    for p in ctx.ports {
        if p.doorbells.sees_every_store() {
            p.doorbells.take_rung_qps(|slot| rdma.wake(slot));
        } else {
            rdma.visit_all = true;
        }
    }
    let mut visiting = std::mem::take(&mut rdma.visiting);
    visiting.clear();
    if std::mem::take(&mut rdma.visit_all) {
        visiting.extend_from_slice(&rdma.active);
    } else {
        visiting.extend_from_slice(&rdma.ready);
    }
    for &q in &rdma.ready {
        rdma.queued[q as usize] = false;
    }
    rdma.ready.clear();
    let work = visit(core, ctx, &visiting);
    core.rdma.visiting = visiting;
    work
}

/// Hands on the gather queues whose first packet has waited long enough and wakes the QPs
/// whose timers are due, when the earliest deadline, `first`, has come.
fn expire(core: &mut NicCore, ctx: &mut Ctx<'_>, first: u64) {
    let now = ctx.now();
    if first > now {
        return;
    }
    let due = core
        .rdma
        .reorder
        .as_mut()
        .and_then(|u| u.gather.as_mut())
        .filter(|g| g.next_deadline().is_some_and(|t| t <= now))
        .map(|g| g.expire(now));
    if let Some(batches) = due {
        responder::record_gathered(core, ctx, batches);
    }
    core.rdma.fire_timers(now);
}

/// One pass over `qps`. A QP that did work, or is flushing (it may be waiting for CQ room),
/// stays on the ready list; every QP's timer is armed for its earliest deadline.
fn visit(core: &mut NicCore, ctx: &mut Ctx<'_>, qps: &[u32]) -> usize {
    let mut work = 0;
    // Packets one QP may send per visit (fairness between QPs).
    let budget = core.config.qp_budget.max(1);
    for &qpi in qps {
        let Some(state) = core.rdma.qps.get(qpi).map(|q| q.state) else {
            continue;
        };
        let star = core.rdma.qps.get(qpi).is_some_and(|q| q.star.is_some());
        let done = match state {
            // A StaR client runs both ends' transport (§16.6).
            QpState::Rts if star => star_client::run(core, ctx, qpi, budget),
            QpState::Rtr | QpState::Sqd | QpState::Sqe if star => 0,
            QpState::Rtr => responder::respond(core, ctx, qpi, budget),
            QpState::Rts | QpState::Sqd | QpState::Sqe => {
                responder::respond(core, ctx, qpi, budget) + requester::run(core, ctx, qpi, budget)
            }
            QpState::Err => flush(core, ctx, qpi),
            QpState::Reset | QpState::Init => 0,
        };
        // Work on a QP (packets sent, completions written) needs its context on chip.
        if done > 0 && !core.rdma.qp_cache.touch(qpi, ()) {
            if let Some(owner) = core.rdma.qps.get(qpi).map(|q| q.owner) {
                ctx.dma(owner)
                    .account_context_read(core.rdma.qp_context_bytes);
            }
        }
        // The state after the visit: a QP that just entered ERR flushes from the next pass.
        let flushing = core.rdma.qps.get(qpi).map(|q| q.state) == Some(QpState::Err);
        if done > 0 || flushing {
            core.rdma.wake(qpi);
        }
        let deadline = core.rdma.qps.get(qpi).and_then(|q| {
            let star = q.star.as_ref().and_then(|s| s.deadline);
            [q.req.deadline, q.req.rnr_wait_until, star]
                .into_iter()
                .flatten()
                .min()
        });
        core.rdma.arm_timer(qpi, deadline);
        work += done;
    }
    work
}

/// The RoCE addresses of a QP's packets: its GID entry and its address vector.
fn address(rdma: &Rdma, qp: &QueuePair) -> Option<RoceAddress> {
    let g = rdma.gid(qp.owner, qp.attr.sgid_index)?;
    Some(RoceAddress {
        src_mac: g.mac,
        dst_mac: qp.attr.dmac,
        src_gid: g.gid,
        dst_gid: qp.attr.dgid,
        src_port: qp.src_port,
        traffic_class: qp.attr.traffic_class,
        hop_limit: if qp.attr.hop_limit == 0 {
            64
        } else {
            qp.attr.hop_limit
        },
        flow_label: qp.attr.flow_label.get(),
    })
}

/// Builds one packet of QP `qpi` — `headers`, then `payload_len` bytes that `fill` writes in
/// place — and sends it into the eSwitch from the QP's vPort. `Err` carries `fill`'s error;
/// `Ok(false)` when the QP has no usable address (its GID entry was cleared: nothing is sent).
fn transmit<E, H: TransportHeaders>(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    mut headers: H,
    payload_len: usize,
    fill: impl FnOnce(&Rdma, &mut Ctx<'_>, &mut [u8]) -> Result<(), E>,
) -> Result<bool, E> {
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return Ok(false);
    };
    let (owner, dest) = (qp.owner, qp.attr.dest_qpn.get());
    let Some(addr) = address(&core.rdma, qp) else {
        return Ok(false);
    };
    let bth = headers.bth_mut();
    bth.dest_qp = dest;
    bth.pkey = core.rdma.pkey(owner, qp.attr.pkey_index.get());
    let star = roce::star::is_star_opcode(bth.opcode);
    let mut frame = std::mem::take(&mut core.rdma.frame);
    let ident = core.rdma.ip_ident;
    core.rdma.ip_ident = ident.wrapping_add(1);
    let mut error = None;
    let len = {
        let rdma = &core.rdma;
        addr.emit_with(&headers, payload_len, ident, &mut frame, |p| {
            fill(rdma, ctx, p).map_err(|e| error = Some(e)).ok()
        })
    };
    if let Some(e) = error {
        core.rdma.frame = frame;
        return Err(e);
    }
    let Some(len) = len else {
        core.rdma.frame = frame;
        return Ok(false);
    };
    if let Some(c) = core.rdma.counters.get_mut(owner as usize) {
        c.tx_packets += 1;
    }
    if let Some(qp) = core.rdma.qps.get_mut(qpi) {
        qp.counters.packets_sent += 1;
        qp.counters.bytes_sent += payload_len as u64;
    }
    let bytes = &frame[..len];
    let parsed = packet::parsed_roce(&addr, bytes);
    // A StaR client's requests pass its function's egress security module like any other
    // StaR packet the function sends (§16.5).
    if !star || star_egress_allowed(core, owner, bytes, &parsed) {
        switch_frame(core, ctx, owner, Frame::new(bytes, &parsed, owner), None);
    }
    core.rdma.frame = frame;
    Ok(true)
}

/// A completion of QP `qpi` on `cqn`: `cqe_opcode` a CQE opcode, `status` an [`rdma_status`].
#[allow(clippy::too_many_arguments)]
fn complete(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    cqn: u32,
    cqe_opcode: u8,
    status: u8,
    wqe_counter: u16,
    byte_count: u32,
    wqe_opcode: u8,
    imm: u32,
    flags: u8,
) -> bool {
    let Some(owner) = core.rdma.qps.get(qpi).map(|q| q.owner) else {
        return false;
    };
    let cqe = Cqe {
        byte_count: U32::new(byte_count),
        wqe_counter: U16::new(wqe_counter),
        qn: U32::new(Rdma::qpn(qpi)),
        vport: U16::new(owner),
        imm: U32::new(imm),
        wqe_opcode,
        syndrome: status,
        flags: flags | cqe_flags::QP,
        ..Default::default()
    };
    post_cqe(core, ctx, cqn, cqe, cqe_opcode)
}

/// Send WQEs posted to QP `qpi` beyond its fetch counter `fetch`, as its doorbell says (`owner`'s
/// page, a ring of `2^log_size` basic blocks). A doorbell claiming more than the ring holds is
/// counted and puts the QP in error; `None` then, and `Some(0)` when nothing is posted.
fn posted_send_wqes(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    (owner, log_size, fetch): (u16, u8, u32),
) -> Option<u32> {
    let pi = ctx.doorbell(owner, db::slot(db::QP_SQ_BASE, qpi)) & db::PI_MASK;
    let pending = pi.wrapping_sub(fetch) & db::PI_MASK;
    if pending > 1 << log_size {
        core.bad_doorbells += 1;
        enter_error(core, ctx, qpi);
        return None;
    }
    Some(pending)
}

/// A send WQE at basic-block `counter` (`nbb` blocks, its control segment if it could be read)
/// that cannot be carried out: its error CQE, the fetch counter past it, the QP in error.
fn fail_send_wqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    (counter, nbb): (u32, u32),
    ctrl: Option<CtrlSeg>,
    status: u8,
) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    qp.req.fetch_counter = counter.wrapping_add(nbb);
    let cqn = qp.send_cqn;
    let (index, op) = ctrl.map_or((counter as u16, 0), |c| (c.wqe_index.get(), c.opcode));
    log::debug!("QP {qpi}: WQE {index} fails with status {status:#x}");
    complete(core, ctx, qpi, cqn, CQE_REQ_ERR, status, index, 0, op, 0, 0);
    enter_error(core, ctx, qpi);
}

/// Whether `cqn` has room for `n` more entries (without counting an overflow).
fn cq_room(core: &NicCore, cqn: u32, n: u32) -> bool {
    core.cqs.get(cqn).is_some_and(|c| c.ring.room() >= n)
}

/// Moves QP `qpi` to the error state on its own (a transport or remote error) and raises the
/// QP's fatal event; the next polls flush its work queues.
fn enter_error(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) {
    let Some(qp) = core.rdma.qps.get_mut(qpi) else {
        return;
    };
    if qp.state == QpState::Err {
        return;
    }
    log::debug!("QP {:#x}: error state", Rdma::qpn(qpi));
    qp.state = QpState::Err;
    qp.attr.qp_state = QpState::Err as u8;
    let (cqn, owner) = (qp.send_cqn, qp.owner);
    qp_event(core, ctx, cqn, owner, qp_event::FATAL, qpi);
}

/// An asynchronous event of QP `qpi` on the EQ of its send CQ `cqn`.
fn qp_event(core: &mut NicCore, ctx: &mut Ctx<'_>, cqn: u32, owner: u16, kind: u8, qpi: u32) {
    if let Some(eqn) = core.cqs.get(cqn).map(|c| c.eqn) {
        post_event(core, ctx, eqn, owner, EQE_QP_EVENT, kind, Rdma::qpn(qpi));
    }
}

/// In the error state every outstanding and newly posted work request completes with
/// WR_FLUSH (IBA 10.3.1.2.5 / 11.4.2.2): the started send WQEs in order, the WQEs posted behind
/// them, the receive WQE of a half-received message and every posted receive WQE of the QP's
/// own ring. Stops when a CQ is full and goes on at the next poll.
fn flush(core: &mut NicCore, ctx: &mut Ctx<'_>, qpi: u32) -> usize {
    let mut work = 0;
    loop {
        let Some(qp) = core.rdma.qps.get(qpi) else {
            return work;
        };
        let (owner, scq, rcq) = (qp.owner, qp.send_cqn, qp.recv_cqn);
        if !cq_room(core, scq, 1) || !cq_room(core, rcq, 1) {
            return work;
        }
        let qp = core.rdma.qps.get_mut(qpi).expect("present");
        // Started send WQEs first, then what was posted behind them.
        if let Some(op) = qp.req.ops.pop_front() {
            qp.req.cursor_op = qp.req.cursor_op.saturating_sub(1);
            qp.req.fetch_counter = qp.req.fetch_counter.max(op.wqe_counter + op.wqebbs);
            complete(
                core,
                ctx,
                qpi,
                scq,
                CQE_REQ_ERR,
                rdma_status::WR_FLUSH,
                op.wqe_index,
                0,
                op.opcode,
                0,
                0,
            );
            work += 1;
            continue;
        }
        let (sq, fetch) = (qp.sq, qp.req.fetch_counter);
        let pi = ctx.doorbell(owner, db::slot(db::QP_SQ_BASE, qpi)) & db::PI_MASK;
        let pending = pi.wrapping_sub(fetch) & db::PI_MASK;
        if pending != 0 && pending <= 1 << sq.log_size {
            let slot = sq.addr + u64::from(fetch & ((1 << sq.log_size) - 1)) * WQEBB as u64;
            let mut ctrl = [0u8; 16];
            let read = ctx.dma(owner).read(slot, &mut ctrl).is_ok();
            let c = CtrlSeg::read_from_bytes(&ctrl[..]).unwrap_or_default();
            let nbb = if read {
                c.wqebbs().min(pending)
            } else {
                pending
            };
            if let Some(qp) = core.rdma.qps.get_mut(qpi) {
                qp.req.fetch_counter = fetch.wrapping_add(nbb);
            }
            complete(
                core,
                ctx,
                qpi,
                scq,
                CQE_REQ_ERR,
                rdma_status::WR_FLUSH,
                c.wqe_index.get(),
                0,
                c.opcode,
                0,
                0,
            );
            work += 1;
            continue;
        }
        let qp = core.rdma.qps.get_mut(qpi).expect("present");
        if let Some(crate::nic::rdma::qp::Inbound::Send {
            wqe_counter, srq, ..
        }) = qp.resp.inbound.take()
        {
            let flags = if srq { cqe_flags::SRQ } else { 0 };
            complete(
                core,
                ctx,
                qpi,
                rcq,
                CQE_RESP_ERR,
                rdma_status::WR_FLUSH,
                wqe_counter as u16,
                0,
                0,
                0,
                flags,
            );
            work += 1;
            continue;
        }
        let qp = core.rdma.qps.get_mut(qpi).expect("present");
        if qp.srq.is_none() && qp.packet_rq.is_none() {
            let pi = ctx.doorbell(owner, db::slot(db::QP_RQ_BASE, qpi)) & db::PI_MASK;
            let counter = qp.rq_counter;
            let pending = pi.wrapping_sub(counter) & db::PI_MASK;
            if pending != 0 && pending <= 1 << qp.rq.log_size {
                qp.rq_counter = counter.wrapping_add(1);
                complete(
                    core,
                    ctx,
                    qpi,
                    rcq,
                    CQE_RESP_ERR,
                    rdma_status::WR_FLUSH,
                    counter as u16,
                    0,
                    0,
                    0,
                    0,
                );
                work += 1;
                continue;
            }
        }
        // Everything is flushed. A QP on an SRQ takes no more of its WQEs: say so once, so
        // software knows when it may destroy the QP without losing receives (IBA 11.6.3.1,
        // Last WQE Reached).
        if qp.srq.is_some() && !qp.last_wqe_reported {
            qp.last_wqe_reported = true;
            qp_event(core, ctx, scq, owner, qp_event::LAST_WQE_REACHED, qpi);
            work += 1;
        }
        return work;
    }
}

/// Copies `out.len()` bytes of a send WQE's data, starting `offset` bytes into the message,
/// from its gather list (or inline data) into `out`.
fn gather(
    rdma: &Rdma,
    ctx: &mut Ctx<'_>,
    qp_owner: u16,
    pd: u32,
    wqe: &RdmaWqeView<'_>,
    offset: usize,
    out: &mut [u8],
) -> Result<(), AccessError> {
    if let WqeDataView::Inline(d) = wqe.data() {
        let src = d
            .get(offset..offset + out.len())
            .ok_or(AccessError::OutOfBounds)?;
        out.copy_from_slice(src);
        return Ok(());
    }
    let dma = ctx.dma(qp_owner);
    let mut skip = offset;
    let mut done = 0;
    for s in wqe.sges() {
        if done == out.len() {
            break;
        }
        let len = s.length as usize;
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = (len - skip).min(out.len() - done);
        let va = s.addr.wrapping_add(skip as u64);
        let t = memory::check(&rdma.mrs, qp_owner, pd, s.lkey, va, n as u64, 0, true)?;
        t.read(dma, &rdma.mtt_cache, va, &mut out[done..done + n])?;
        done += n;
        skip = 0;
    }
    if done < out.len() {
        return Err(AccessError::OutOfBounds);
    }
    Ok(())
}

/// Why data could not be placed in a scatter list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScatterError {
    /// The list is shorter than the data (a local length error).
    Length,
    Access(AccessError),
}

/// Writes `data` into the scatter list `sges`, `offset` bytes into it; every entry must allow
/// local writes.
fn scatter(
    rdma: &Rdma,
    ctx: &mut Ctx<'_>,
    qp_owner: u16,
    pd: u32,
    sges: impl Iterator<Item = Sge>,
    offset: usize,
    data: &[u8],
) -> Result<(), ScatterError> {
    let dma = ctx.dma(qp_owner);
    let mut skip = offset;
    let mut done = 0;
    for s in sges {
        if done == data.len() {
            break;
        }
        let len = s.length as usize;
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = (len - skip).min(data.len() - done);
        let va = s.addr.wrapping_add(skip as u64);
        let t = memory::check(
            &rdma.mrs,
            qp_owner,
            pd,
            s.lkey,
            va,
            n as u64,
            memory::local_right(true),
            true,
        )
        .map_err(ScatterError::Access)?;
        t.write(dma, &rdma.mtt_cache, va, &data[done..done + n])
            .map_err(ScatterError::Access)?;
        done += n;
        skip = 0;
    }
    if done < data.len() {
        return Err(ScatterError::Length);
    }
    Ok(())
}

/// Reads the WQE at basic-block counter `counter` of QP `qpi`'s send ring into `rdma.wqe`;
/// returns its basic blocks. `None` when it is not reachable.
fn fetch_send_wqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    counter: u32,
    max_bbs: u32,
) -> Option<u32> {
    if let Some((q, c, nbb)) = core.rdma.wqe_held {
        if (q, c) == (qpi, counter) && nbb <= max_bbs {
            return Some(nbb);
        }
    }
    core.rdma.wqe_held = None;
    let qp = core.rdma.qps.get(qpi)?;
    let (owner, ring) = (qp.owner, qp.sq);
    // A WQE the driver put in the QP's WQE-by-MMIO buffer needs no fetch.
    let buffer = db::wqe_buffer(db::QP_SQ_WQE_BASE, qpi);
    let (wqe, stats) = (&mut core.rdma.wqe, &mut core.wqe_mmio);
    if let Some(nbb) = ctx.wqe_from_buffer(owner, buffer, (counter, max_bbs), wqe, stats) {
        if let Some(qp) = core.rdma.qps.get_mut(qpi) {
            qp.counters.wqes_by_mmio += 1;
        }
        core.rdma.wqe_held = Some((qpi, counter, nbb));
        return Some(nbb);
    }
    let mask = (1u32 << ring.log_size) - 1;
    let bb = |n: u32| ring.addr + u64::from(counter.wrapping_add(n) & mask) * WQEBB as u64;
    let wqe = &mut core.rdma.wqe;
    let dma = ctx.dma(owner);
    dma.read(bb(0), &mut wqe[..WQEBB]).ok()?;
    let (ctrl, _) = CtrlSeg::read_from_prefix(&wqe[..]).ok()?;
    // A WQE is at most MAX_WQE_BYTES; a larger `ds_count` fails the view's check later.
    let nbb = ctrl
        .wqebbs()
        .min(max_bbs)
        .min((MAX_WQE_BYTES / WQEBB) as u32)
        .max(1);
    // The rest of the WQE in one read (two where it wraps around the ring's end): after the
    // first block they depend on nothing but the control segment.
    let mut n = 1;
    while n < nbb {
        let run = (nbb - n).min(mask + 1 - (counter.wrapping_add(n) & mask));
        let at = n as usize * WQEBB;
        dma.read(bb(n), &mut wqe[at..at + run as usize * WQEBB])
            .ok()?;
        n += run;
    }
    core.rdma.wqe_held = Some((qpi, counter, nbb));
    Some(nbb)
}

/// The scatter entries of receive WQE `counter` of the QP's RQ or its SRQ, read by DMA into
/// `out` (a whole stride). False when unreachable.
fn fetch_recv_wqe(
    core: &NicCore,
    ctx: &mut Ctx<'_>,
    qp: &QueuePair,
    srq: bool,
    counter: u32,
    out: &mut [u8; 512],
) -> bool {
    let ring = match (srq, qp.srq) {
        (true, Some(s)) => match core.rdma.srqs.get(s) {
            Some(s) => s.ring,
            None => return false,
        },
        _ => qp.rq,
    };
    let stride = 1usize << ring.log_stride;
    let slot = ring.addr + u64::from(counter & ((1 << ring.log_size) - 1)) * stride as u64;
    ctx.dma(qp.owner).read(slot, &mut out[..stride]).is_ok()
}

/// Keeps `pkt` in the reorder buffer as `conn`'s (a QP's requests, or `qp | RESPONSES` for its
/// responses), charging the DMA write into the buffer's host memory to function `owner`.
pub(super) fn keep_in_reorder_buffer(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    owner: u16,
    conn: u32,
    pkt: &IbPacket<'_>,
) -> Result<(), NotKept> {
    let unit = core.rdma.reorder.as_mut().ok_or(NotKept::NoRoom)?;
    unit.buffer.keep(conn, pkt)?;
    unit.counters.kept += 1;
    let len = pkt.headers.len() + pkt.payload.len();
    ctx.dma(owner).account_context_write(len as u64);
    Ok(())
}

/// Takes `conn`'s packet at `psn` back out of the reorder buffer, if kept, charging the DMA
/// read to function `owner`; give it back with [`recycle_kept`] once handled.
pub(super) fn take_from_reorder_buffer(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    owner: u16,
    conn: u32,
    psn: u32,
) -> Option<Held> {
    let unit = core
        .rdma
        .reorder
        .as_mut()
        .filter(|u| !u.buffer.is_empty())?;
    let held = unit.buffer.take(conn, psn)?;
    ctx.dma(owner).account_context_read(held.wire_len() as u64);
    Some(held)
}

/// A packet taken from the reorder buffer was handled: its slot is free again.
pub(super) fn recycle_kept(core: &mut NicCore, held: Held) {
    if let Some(u) = core.rdma.reorder.as_mut() {
        u.buffer.recycle(held);
    }
}

use zerocopy::FromBytes;
