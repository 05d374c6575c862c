//! The responder's side of a QP's staging ring (uRDMA §5, `docs/nic-interface.md` §18; the
//! ring itself: `crate::nic::rdma::staging`).
//!
//! * A single-packet WRITE without immediate that fits a slot is staged when its translation is
//!   not on chip — or when staged WRITEs are still waiting, so WRITEs reach memory in order: its
//!   [`StagedWrite`] header and data go to the next slot (whose translation stays cached, the
//!   ring being written again and again), and a [`CQE_RESP_WRITE_STAGED`] to the QP's receive
//!   CQ. It is acknowledged as any WRITE: the requester's completion is the offload path's.
//!   Its translation is read in the background, so the cache learns the page as it would
//!   from the offload path's miss, without the WRITE waiting for it.
//! * Any other request while staged WRITEs wait, or a stageable one when the ring is full, is
//!   answered with an RNR NAK, as ConnectX answers a responder page fault (on-demand paging):
//!   the requester sends it again after the RNR timer, when the host has taken the ring. A READ
//!   therefore never overtakes a staged WRITE, nor a SEND the data it announces.
//! * The key, PD, rights and range are checked before a WRITE is staged, as before it is
//!   placed: a refused WRITE is NAKed the same way on both paths.

use fld_abi::nic::*;
use fld_abi::wire::roce::{IbPacket, MessageKind, Position};
use zerocopy::IntoBytes;

use super::complete;
use super::responder::{advance, owe, rnr_syndrome};
use super::{Ctx, NicCore};
use crate::nic::rdma::memory::{self, Target};
use crate::nic::rdma::staging::Staging;

/// The QP's ring and the slots its host has taken, if it has one.
fn ring(core: &NicCore, ctx: &Ctx<'_>, qpi: u32) -> Option<(Staging, u16)> {
    let qp = core.rdma.qps.get(qpi)?;
    let s = qp.staging?;
    let taken = ctx.doorbell(qp.owner, db::slot(db::QP_STAGING_BASE, qpi)) & db::PI_MASK;
    Some((s, taken as u16))
}

/// Whether `pkt` may go to a slot at all.
fn stageable(s: &Staging, pkt: &IbPacket<'_>) -> bool {
    pkt.info.kind == MessageKind::Write
        && pkt.info.position == Position::Only
        && pkt.headers.imm.is_none()
        && pkt.payload.len() <= s.payload()
}

/// Before a request at the expected PSN executes: whether it must wait for the host to take
/// the ring. If so, it has been answered with an RNR NAK.
pub(super) fn must_wait(core: &mut NicCore, ctx: &Ctx<'_>, qpi: u32, pkt: &IbPacket<'_>) -> bool {
    let Some((s, taken)) = ring(core, ctx, qpi) else {
        return false;
    };
    let pending = s.pending(taken);
    let wait = pending == s.slots() || (pending > 0 && !stageable(&s, pkt));
    if wait {
        let qp = core.rdma.qps.get_mut(qpi).expect("present");
        qp.counters.rnr_naks_sent += 1;
        let t = qp.attr.min_rnr_timer;
        owe(qp, pkt.headers.bth.psn, rnr_syndrome(t));
    }
    wait
}

/// A WRITE at the expected PSN whose key checked out (`target`, at `va`): stages it when it
/// should. Whether it did (then it is executed and acknowledged); `false` leaves it to the
/// offload path, as is a ring that no longer resolves to the host's memory.
pub(super) fn stage(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    qpi: u32,
    pkt: &IbPacket<'_>,
    target: &Target,
    (va, rkey): (u64, u32),
) -> bool {
    let Some((s, taken)) = ring(core, ctx, qpi) else {
        return false;
    };
    let len = pkt.payload.len();
    if !stageable(&s, pkt)
        || s.pending(taken) == s.slots()
        || (s.pending(taken) == 0 && target.translated(&core.rdma.mtt_cache, va, len))
    {
        return false;
    }
    let Some(qp) = core.rdma.qps.get(qpi) else {
        return false;
    };
    let (owner, pd) = (qp.owner, qp.pd);
    let slot = s.next_slot();
    let bytes = (STAGED_WRITE_HEADER + len) as u64;
    let Ok(ring) = memory::check(
        &core.rdma.mrs,
        owner,
        pd,
        s.lkey,
        slot,
        bytes,
        access::LOCAL_WRITE,
        true,
    ) else {
        return false;
    };
    let header = StagedWrite {
        va: va.into(),
        rkey: rkey.into(),
        len: (len as u32).into(),
    };
    let cache = &core.rdma.mtt_cache;
    let written = ring
        .write(ctx.dma(owner), cache, slot, header.as_bytes())
        .and_then(|_| {
            ring.write(
                ctx.dma(owner),
                cache,
                slot + STAGED_WRITE_HEADER as u64,
                pkt.payload,
            )
        });
    if written.is_err() {
        return false;
    }
    // The translation comes on chip behind the WRITE, off its path, so the page's next WRITE
    // hits as it would after the offload path's miss.
    target.fill(ctx.dma(owner), cache, va, len);
    let qp = core.rdma.qps.get_mut(qpi).expect("present");
    let counter = s.produced;
    if let Some(st) = qp.staging.as_mut() {
        st.produced = st.produced.wrapping_add(1);
    }
    qp.resp.msn = fld_abi::wire::roce::psn_add(qp.resp.msn, 1);
    advance(qp, pkt.headers.bth.psn, pkt.headers.bth.ack_request);
    let rcq = qp.recv_cqn;
    complete(
        core,
        ctx,
        qpi,
        rcq,
        CQE_RESP_WRITE_STAGED,
        rdma_status::SUCCESS,
        counter,
        len as u32,
        0,
        rkey,
        0,
    );
    true
}
