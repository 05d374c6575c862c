//! Completion and event queues as the device produces into them: consumer and arm doorbells,
//! CQE and EQE writes with owner bits, events on armed CQs and MSI-X on armed EQs. A CQE that
//! finds its CQ full is a counted overflow (and the CQ's first overflow an asynchronous event);
//! an EQE that finds its EQ full is a counted overflow. CQEs for consecutive slots of one CQ are
//! held as a [`CqeRun`] and cross the fabric as one copy, counted as the separate 64-byte writes
//! the NIC sends; the run is written before any EQE and at the end of every engine pass.

use zerocopy::little_endian::U64;
use zerocopy::IntoBytes;

use super::{Ctx, NicCore};
use crate::nic::queues::ArmRequest;
use fld_abi::nic::*;

/// Reads every CQ's and EQ's consumer doorbell; an arm raises the event or interrupt at once
/// when entries are already waiting.
pub(super) fn consumer_doorbells(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    let mut work = 0;
    for id in 0..core.cqs.capacity() {
        let Some(cq) = core.cqs.get_mut(id) else {
            continue;
        };
        let w = ctx.doorbell(cq.owner, db::slot(db::CQ_BASE, id));
        match cq.ring.consumer_doorbell(w) {
            None | Some(ArmRequest::None) => {}
            Some(ArmRequest::Armed) => work += 1,
            Some(ArmRequest::FireNow) => {
                work += 1;
                let (eqn, owner) = (cq.eqn, cq.owner);
                post_event(core, ctx, eqn, owner, EQE_COMPLETION, 0, id);
            }
        }
    }
    for id in 0..core.eqs.capacity() {
        let Some(eq) = core.eqs.get_mut(id) else {
            continue;
        };
        let w = ctx.doorbell(eq.owner, db::slot(db::EQ_BASE, id));
        match eq.ring.consumer_doorbell(w) {
            None | Some(ArmRequest::None) => {}
            Some(ArmRequest::Armed) => work += 1,
            Some(ArmRequest::FireNow) => {
                work += 1;
                if let Some(port) = ctx.ports.get(eq.owner as usize) {
                    port.pci.signal(eq.vector);
                }
            }
        }
    }
    work
}

/// The most CQEs one run holds (512 bytes).
const CQE_RUN: usize = 8;

/// CQEs written to consecutive slots of one CQ and not yet moved to it.
#[derive(Clone)]
pub(crate) struct CqeRun {
    owner: u16,
    cqn: u32,
    addr: u64,
    len: usize,
    buf: [u8; CQE_RUN * CQE_SIZE],
}

impl Default for CqeRun {
    fn default() -> Self {
        CqeRun {
            owner: 0,
            cqn: 0,
            addr: 0,
            len: 0,
            buf: [0; CQE_RUN * CQE_SIZE],
        }
    }
}

/// Moves the held CQEs to their CQ. A ring that cannot be reached counts an overflow per CQE
/// not written.
pub(super) fn flush_cqes(core: &mut NicCore, ctx: &mut Ctx<'_>) {
    let run = &mut core.cqe_run;
    if run.len == 0 {
        return;
    }
    let (cqn, bytes) = (run.cqn, &run.buf[..run.len]);
    if ctx
        .dma(run.owner)
        .write_records(run.addr, bytes, CQE_SIZE)
        .is_err()
    {
        let lost = (run.len / CQE_SIZE) as u32;
        if let Some(cq) = core.cqs.get_mut(cqn) {
            cq.ring.overflows = cq.ring.overflows.saturating_add(lost);
        }
    }
    core.cqe_run.len = 0;
}

/// Holds a CQE for slot `addr` of CQ `cqn`, first writing the run it does not continue.
fn hold_cqe(core: &mut NicCore, ctx: &mut Ctx<'_>, owner: u16, cqn: u32, addr: u64, cqe: &Cqe) {
    let run = &core.cqe_run;
    let continues = run.len > 0
        && run.cqn == cqn
        && run.addr + run.len as u64 == addr
        && run.len < run.buf.len();
    if !continues {
        flush_cqes(core, ctx);
        let run = &mut core.cqe_run;
        (run.owner, run.cqn, run.addr) = (owner, cqn, addr);
    }
    let run = &mut core.cqe_run;
    run.buf[run.len..run.len + CQE_SIZE].copy_from_slice(cqe.as_bytes());
    run.len += CQE_SIZE;
}

/// Writes an EQE and interrupts if the EQ is armed. A full EQ counts an overflow. Held CQEs are
/// written first: an event never overtakes the completions it announces.
pub(super) fn post_event(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    eqn: u32,
    owner: u16,
    event_type: u8,
    subtype: u8,
    data: u32,
) {
    flush_cqes(core, ctx);
    let Some(eq) = core.eqs.get_mut(eqn) else {
        return;
    };
    if eq.ring.room() == 0 {
        eq.ring.overflows += 1;
        return;
    }
    let (slot, owner_bit) = eq.ring.next_slot(EQE_SIZE);
    let eqe = Eqe::new(event_type, subtype, data, owner_bit);
    // As one record: its owner byte lands last (`DmaPort::write_records`).
    if ctx
        .dma(owner)
        .write_records(slot, eqe.as_bytes(), EQE_SIZE)
        .is_err()
    {
        eq.ring.overflows += 1;
        return;
    }
    if eq.ring.produced() {
        ctx.ports[owner as usize].pci.signal(eq.vector);
    }
}

/// True (and an overflow counted) when CQ `cqn` has fewer than `need` free entries. The first
/// overflow of a CQ is reported as an asynchronous event on its EQ.
pub(super) fn cq_lacks_room(core: &mut NicCore, ctx: &mut Ctx<'_>, cqn: u32, need: u32) -> bool {
    let Some(cq) = core.cqs.get_mut(cqn) else {
        return true;
    };
    if cq.ring.room() >= need {
        return false;
    }
    cq.ring.overflows += 1;
    if cq.ring.overflows == 1 {
        let (eqn, owner) = (cq.eqn, cq.owner);
        post_event(core, ctx, eqn, owner, EQE_CQ_ERROR, 0, cqn);
    }
    true
}

/// Writes a CQE (owner bit from the producer counter; held in the run until it is written) and
/// posts a completion event if armed. Returns false when the CQ had no room for it; a ring found
/// unreachable when the run is written counts its overflows then.
pub(super) fn post_cqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    cqn: u32,
    cqe: Cqe,
    opcode: u8,
) -> bool {
    if cq_lacks_room(core, ctx, cqn, 1) {
        return false;
    }
    write_cqe(core, ctx, cqn, cqe, opcode)
}

/// [`post_cqe`] for a caller that has just made sure the CQ has room (the receive path checks
/// before it takes a buffer, so the CQE is never the thing that is missing).
pub(super) fn write_cqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    cqn: u32,
    mut cqe: Cqe,
    opcode: u8,
) -> bool {
    let Some(cq) = core.cqs.get_mut(cqn) else {
        return false;
    };
    let (slot, owner_bit) = cq.ring.next_slot(CQE_SIZE);
    cqe.set_op_own(opcode, owner_bit);
    cqe.timestamp = U64::new(ctx.now());
    let fire = cq.ring.produced();
    let (eqn, owner) = (cq.eqn, cq.owner);
    hold_cqe(core, ctx, owner, cqn, slot, &cqe);
    if fire {
        post_event(core, ctx, eqn, owner, EQE_COMPLETION, 0, cqn);
    }
    true
}

/// The error CQE and the QUEUE_ERROR event of a queue that just entered the error state.
#[allow(clippy::too_many_arguments)]
pub(super) fn report_queue_error(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    cqn: u32,
    owner: u16,
    qn: u32,
    wqe_counter: u16,
    syndrome: u8,
    opcode: u8,
    subtype: u8,
) {
    let cqe = Cqe {
        wqe_counter: zerocopy::little_endian::U16::new(wqe_counter),
        qn: zerocopy::little_endian::U32::new(qn),
        syndrome,
        vport: zerocopy::little_endian::U16::new(owner),
        ..Default::default()
    };
    post_cqe(core, ctx, cqn, cqe, opcode);
    if let Some(eqn) = core.cqs.get(cqn).map(|c| c.eqn) {
        post_event(core, ctx, eqn, owner, EQE_QUEUE_ERROR, subtype, qn);
    }
}
