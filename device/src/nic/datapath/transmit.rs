//! The transmit block: per SQ, the producer doorbell says how many WQE basic blocks are posted;
//! each WQE is fetched by DMA and read through [`SendWqeView`], its frame gathered (inline header
//! plus data segments), IPv4/TCP/UDP checksums inserted on request, and the frame handed to the
//! eSwitch. A malformed WQE, an unreachable address or a doorbell beyond the ring moves the SQ to
//! the error state with an error CQE and an event; completions follow the WQE's signalling.
//! Left out: TSO (`mss` is ignored), VLAN insertion.

use zerocopy::little_endian::{U16, U32};
use zerocopy::FromBytes;

use super::completions::{post_cqe, report_queue_error};
use super::switching::{switch_frame, Frame};
use super::{Ctx, NicCore};
use crate::nic::packet;
use fld_abi::nic::*;

/// Why a send WQE failed: the syndrome of its error CQE.
struct WqeError(u8);

pub(super) fn transmit(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    let mut work = 0;
    let mut frame = std::mem::take(&mut core.frame);
    for i in 0..core.active_sqs.len() {
        let sqn = core.active_sqs[i];
        work += transmit_sq(core, ctx, sqn, &mut frame);
    }
    core.frame = frame;
    work
}

fn transmit_sq(core: &mut NicCore, ctx: &mut Ctx<'_>, sqn: u32, frame: &mut [u8]) -> usize {
    let mut done = 0;
    let budget = core.config.sq_budget;
    let mut wqe = std::mem::take(&mut core.wqe);
    while done < budget {
        let Some(sq) = core.sqs.get(sqn) else { break };
        if sq.state != QueueState::Ready {
            break;
        }
        let (owner, cqn, log_size, addr, ci) = (sq.owner, sq.cqn, sq.log_size, sq.addr, sq.ci);
        if ctx.ports.get(owner as usize).is_none() {
            break;
        }
        let pi = ctx.doorbell(owner, db::slot(db::SQ_BASE, sqn)) & db::PI_MASK;
        let pending = pi.wrapping_sub(ci) & db::PI_MASK;
        if pending == 0 {
            break;
        }
        // Completions are never dropped: without room for one CQE the queue waits.
        if core.cqs.get(cqn).is_none_or(|c| c.ring.room() == 0) {
            break;
        }
        let ring = 1u32 << log_size;
        if pending > ring {
            core.bad_doorbells += 1;
            sq_error(core, ctx, sqn, ci as u16, syndrome::DOORBELL_OVERFLOW);
            break;
        }
        let (result, nbb) = execute_wqe(
            core, ctx, owner, addr, log_size, ci, pending, &mut wqe, frame,
        );
        let ctrl = CtrlSeg::read_from_prefix(&wqe)
            .map(|(c, _)| c)
            .unwrap_or_default();
        match result {
            Ok(len) => {
                let Some(sq) = core.sqs.get_mut(sqn) else {
                    break;
                };
                sq.ci = sq.ci.wrapping_add(nbb);
                sq.packets += (len > 0) as u64;
                sq.bytes += len as u64;
                let signal = sq.signal_all || ctrl.completion_requested();
                if signal {
                    let cqe = Cqe {
                        byte_count: U32::new(len as u32),
                        wqe_counter: ctrl.wqe_index,
                        qn: U32::new(sqn),
                        vport: U16::new(owner),
                        ..Default::default()
                    };
                    post_cqe(core, ctx, cqn, cqe, CQE_REQ);
                }
            }
            Err(WqeError(syn)) => {
                // Error CQEs name the failing WQE by the device's own counter.
                sq_error(core, ctx, sqn, ci as u16, syn);
                break;
            }
        }
        done += 1;
    }
    core.wqe = wqe;
    done as usize
}

/// Moves an SQ to the error state with an error CQE and an asynchronous event.
fn sq_error(core: &mut NicCore, ctx: &mut Ctx<'_>, sqn: u32, wqe_index: u16, syn: u8) {
    let Some(sq) = core.sqs.get_mut(sqn) else {
        return;
    };
    sq.state = QueueState::Error;
    let (cqn, owner) = (sq.cqn, sq.owner);
    log::debug!("SQ {sqn}: error syndrome {syn:#x} at WQE {wqe_index}");
    report_queue_error(
        core,
        ctx,
        cqn,
        owner,
        sqn,
        wqe_index,
        syn,
        CQE_REQ_ERR,
        QUEUE_ERROR_SQ,
    );
}

/// Reads one WQE at counter `ci`, builds and sends its frame. Returns the sent length and the
/// number of basic blocks the WQE occupies.
#[allow(clippy::too_many_arguments)]
fn execute_wqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    owner: u16,
    addr: u64,
    log_size: u8,
    ci: u32,
    pending: u32,
    wqe: &mut [u8],
    frame: &mut [u8],
) -> (Result<usize, WqeError>, u32) {
    let mask = (1u32 << log_size) - 1;
    let dma = ctx.dma(owner);
    let bb_addr = |n: u32| addr + ((ci.wrapping_add(n) & mask) as u64) * WQEBB as u64;
    if dma.read(bb_addr(0), &mut wqe[..WQEBB]).is_err() {
        wqe.fill(0);
        return (Err(WqeError(syndrome::DMA_ERROR)), 1);
    }
    let Ok((ctrl, _)) = CtrlSeg::read_from_prefix(&wqe[..]) else {
        return (Err(WqeError(syndrome::BAD_WQE)), 1);
    };
    let nbb = ctrl.wqebbs();
    // More segments than a WQE may have (found by the nic_sq fuzz target: the blocks were read
    // past the WQE buffer), or more blocks than were posted.
    if u16::from(ctrl.ds_count) > MAX_WQE_DS || nbb > pending {
        return (Err(WqeError(syndrome::BAD_WQE)), nbb.min(pending));
    }
    for n in 1..nbb {
        let at = n as usize * WQEBB;
        if dma.read(bb_addr(n), &mut wqe[at..at + WQEBB]).is_err() {
            return (Err(WqeError(syndrome::DMA_ERROR)), nbb);
        }
    }
    let Ok(view) = SendWqeView::new_checked(&wqe[..nbb as usize * WQEBB]) else {
        return (Err(WqeError(syndrome::BAD_WQE)), nbb);
    };
    match ctrl.opcode {
        WQE_OP_NOP => (Ok(0), nbb),
        WQE_OP_SEND => (build_and_send(core, ctx, owner, &view, frame), nbb),
        _ => (Err(WqeError(syndrome::BAD_WQE)), nbb),
    }
}

/// Gathers the frame of a SEND WQE, inserts checksums and hands it to the eSwitch.
fn build_and_send(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    owner: u16,
    wqe: &SendWqeView<'_>,
    frame: &mut [u8],
) -> Result<usize, WqeError> {
    let bad = || WqeError(syndrome::BAD_WQE);
    let eth = wqe.eth().map_err(|_| bad())?;
    let inline = eth.inline_header.len();
    let max = (core.config.mtu as usize).min(frame.len());
    if inline > max {
        bump_malformed(core, owner);
        return Err(WqeError(syndrome::BAD_LENGTH));
    }
    let mut len = inline;
    frame[..inline].copy_from_slice(eth.inline_header);
    let dma = ctx.dma(owner);
    for d in eth.data_segments() {
        let bc = d.byte_count.get() as usize;
        if bc == 0 {
            continue;
        }
        if d.lkey.get() != RESERVED_LKEY {
            return Err(bad());
        }
        if len + bc > max {
            bump_malformed(core, owner);
            return Err(WqeError(syndrome::BAD_LENGTH));
        }
        if dma.read(d.addr.get(), &mut frame[len..len + bc]).is_err() {
            return Err(WqeError(syndrome::DMA_ERROR));
        }
        len += bc;
    }
    if len < 14 {
        bump_malformed(core, owner);
        return Err(WqeError(syndrome::BAD_LENGTH));
    }
    let frame = &mut frame[..len];
    let mut parsed = packet::parse(frame);
    // Each layer on its own: a frame without L4 still gets its IPv4 header checksum. Insertion
    // changes no offsets, so the parse stays valid; what was inserted is known good on receive.
    let cs_flags = eth.eth.cs_flags;
    if cs_flags & CS_L3 != 0 {
        parsed.inserted_l3_checksum = packet::insert_checksums(frame, &parsed, true, false)
            && parsed.l3 == packet::L3Kind::Ipv4;
    }
    if cs_flags & CS_L4 != 0 {
        parsed.inserted_l4_checksum = packet::insert_checksums(frame, &parsed, false, true);
    }
    let resume = match eth.resume_table(wqe.ctrl()) {
        Some(t) => match core.eswitch.table(t) {
            Some(tab) if tab.owner == owner => Some((t, tab.kind)),
            _ => return Err(bad()),
        },
        None => None,
    };
    switch_frame(core, ctx, owner, Frame::new(frame, parsed, owner), resume);
    Ok(len)
}

fn bump_malformed(core: &mut NicCore, vport: u16) {
    if let Some(v) = core.eswitch.vport_mut(vport) {
        v.counters.tx_malformed += 1;
    }
}
