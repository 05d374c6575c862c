//! The receive block: a frame steered to an RQ is scattered into the next posted buffer — one
//! packet per WQE in a regular RQ (truncated, and flagged, when longer than the buffer), or
//! consecutive strides of the open WQE in a striding (multi-packet) RQ, where a filler CQE
//! releases the strides a packet cannot use — and completed with a CQE. No posted buffer or no
//! CQ space is a counted drop; an unreachable buffer or a bad WQE moves the RQ to the error state.
//!
//! Receive WQEs are read ahead ([`prefetch`], `docs/nic-interface.md` §7.5): after a doorbell
//! posts them, each RQ keeps the next [`RX_PREFETCH_DEPTH`] on chip, so a frame that arrives
//! finds its buffer without a read round trip, as a ConnectX's do. What was read ahead is exactly
//! what a fetch on arrival would read (the same counters, never past the doorbell), so results
//! do not depend on it; a failed read ahead leaves the WQE to the fetch on arrival, which then
//! reports the error.

use zerocopy::little_endian::{U16, U32};
use zerocopy::FromBytes;

use super::completions::{cq_lacks_room, report_queue_error, write_cqe};
use super::{Ctx, NicCore};
use crate::nic::queues::{OpenWqe, RqKind, RX_PREFETCH_DEPTH};
use fld_abi::nic::*;

/// Places a frame into RQ `rqn` and writes its CQE with `opcode`. False when it was dropped.
pub(super) fn receive(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    rqn: u32,
    frame: &[u8],
    mut cqe: Cqe,
    opcode: u8,
) -> bool {
    let Some(rq) = core.rqs.get(rqn) else {
        return false;
    };
    if rq.state != QueueState::Ready {
        return false;
    }
    let (owner, cqn, kind) = (rq.owner, rq.cqn, rq.kind);
    if ctx.ports.get(owner as usize).is_none() {
        return false;
    }
    // The producer doorbell, read where a WQE is taken: a striding RQ's open WQE needs none.
    let producer = |ctx: &Ctx<'_>| ctx.doorbell(owner, db::slot(db::RQ_BASE, rqn)) & db::PI_MASK;
    let len = frame.len();
    cqe.byte_count = U32::new(len as u32);
    match kind {
        RqKind::Regular => {
            let pi = producer(ctx);
            if !wqe_available(core, rqn, pi) || cq_lacks_room(core, ctx, cqn, 1) {
                return out_of_buffer(core, rqn);
            }
            let Some(wqe) = fetch_recv_wqe(core, ctx, rqn, pi) else {
                return false;
            };
            let Some(rq) = core.rqs.get_mut(rqn) else {
                return false;
            };
            let n = len.min(wqe.byte_count.get() as usize);
            if ctx.dma(owner).write(wqe.addr.get(), &frame[..n]).is_err() {
                rq_error(core, ctx, rqn, syndrome::DMA_ERROR);
                return false;
            }
            if n < len {
                cqe.flags |= cqe_flags::TRUNCATED;
                rq.truncated += 1;
            }
            cqe.wqe_counter = U16::new(rq.ci as u16);
            rq.ci = rq.ci.wrapping_add(1);
            rq.packets += 1;
            rq.bytes += len as u64;
            write_cqe(core, ctx, cqn, cqe, opcode)
        }
        RqKind::Striding {
            log_stride_size,
            log_strides,
        } => {
            let stride = 1usize << log_stride_size;
            let strides = 1u32 << log_strides;
            let need = len.div_ceil(stride).max(1) as u32;
            if need > strides {
                if let Some(rq) = core.rqs.get_mut(rqn) {
                    rq.oversize_drops += 1;
                }
                return false;
            }
            let mut open = core.rqs.get(rqn).and_then(|r| r.open);
            // Not enough strides left: release the rest of the WQE with a filler CQE.
            if let Some(o) = open.filter(|o| need > strides - o.next_stride) {
                if cq_lacks_room(core, ctx, cqn, 2) {
                    return out_of_buffer(core, rqn);
                }
                let Some(rq) = core.rqs.get_mut(rqn) else {
                    return false;
                };
                let filler = Cqe {
                    wqe_counter: U16::new(rq.ci as u16),
                    stride_index: U16::new(o.next_stride as u16),
                    consumed_strides: U16::new((strides - o.next_stride) as u16),
                    flags: cqe_flags::FILLER | cqe_flags::WQE_DONE,
                    qn: U32::new(rqn),
                    vport: cqe.vport,
                    ..Default::default()
                };
                rq.ci = rq.ci.wrapping_add(1);
                rq.open = None;
                open = None;
                write_cqe(core, ctx, cqn, filler, CQE_RESP_SEND);
            }
            if cq_lacks_room(core, ctx, cqn, 1) {
                return out_of_buffer(core, rqn);
            }
            let o = match open {
                Some(o) => o,
                None => {
                    let pi = producer(ctx);
                    if !wqe_available(core, rqn, pi) {
                        return out_of_buffer(core, rqn);
                    }
                    let Some(wqe) = fetch_recv_wqe(core, ctx, rqn, pi) else {
                        return false;
                    };
                    if (wqe.byte_count.get() as u64) < (stride as u64) << log_strides {
                        rq_error(core, ctx, rqn, syndrome::BAD_RECV_WQE);
                        return false;
                    }
                    OpenWqe {
                        addr: wqe.addr.get(),
                        next_stride: 0,
                    }
                }
            };
            let at = o.addr + o.next_stride as u64 * stride as u64;
            if ctx.dma(owner).write(at, frame).is_err() {
                rq_error(core, ctx, rqn, syndrome::DMA_ERROR);
                return false;
            }
            let Some(rq) = core.rqs.get_mut(rqn) else {
                return false;
            };
            cqe.wqe_counter = U16::new(rq.ci as u16);
            cqe.stride_index = U16::new(o.next_stride as u16);
            cqe.consumed_strides = U16::new(need as u16);
            let next = o.next_stride + need;
            if next == strides {
                cqe.flags |= cqe_flags::WQE_DONE;
                rq.ci = rq.ci.wrapping_add(1);
                rq.open = None;
            } else {
                rq.open = Some(OpenWqe {
                    addr: o.addr,
                    next_stride: next,
                });
            }
            rq.packets += 1;
            rq.bytes += len as u64;
            write_cqe(core, ctx, cqn, cqe, opcode)
        }
    }
}

fn out_of_buffer(core: &mut NicCore, rqn: u32) -> bool {
    if let Some(rq) = core.rqs.get_mut(rqn) {
        rq.out_of_buffer += 1;
    }
    false
}

/// Whether the driver has posted a WQE beyond the device's counter (a producer counter more
/// than a ring ahead is caught by [`fetch_recv_wqe`]).
fn wqe_available(core: &mut NicCore, rqn: u32, pi: u32) -> bool {
    core.rqs
        .get(rqn)
        .is_some_and(|rq| pi.wrapping_sub(rq.ci) & db::PI_MASK != 0)
}

/// How the receive WQEs read ahead were used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxPrefetchCounters {
    /// DMA reads that brought WQEs ahead of their frames.
    pub reads: u64,
    /// WQEs they brought.
    pub wqes: u64,
    /// Receives that found their WQE on chip.
    pub hits: u64,
}

/// Reads ahead the receive WQEs posted to every ready RQ, up to [`RX_PREFETCH_DEPTH`] per RQ:
/// one read per RQ that has room and posted WQEs beyond what it holds, never past the doorbell
/// or the ring's end. Returns the reads issued.
pub(super) fn prefetch(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    let depth = core.config.rx_prefetch_depth.min(RX_PREFETCH_DEPTH);
    let mut reads = 0;
    for i in 0..core.active_rqs.len() {
        let rqn = core.active_rqs[i];
        let Some(rq) = core.rqs.get(rqn) else {
            continue;
        };
        let next = rq.next_fetch();
        let held = if rq.prefetched.first == next {
            rq.prefetched.len
        } else {
            0
        };
        if rq.state != QueueState::Ready || held >= depth {
            continue;
        }
        let pi = ctx.doorbell(rq.owner, db::slot(db::RQ_BASE, rqn)) & db::PI_MASK;
        let posted = pi.wrapping_sub(next) & db::PI_MASK;
        let size = 1u32 << rq.log_size;
        // An overflowing doorbell is the fetch on arrival's to report.
        if posted > size || posted as usize <= held {
            continue;
        }
        let first = next.wrapping_add(held as u32) & (size - 1);
        let n = (posted as usize)
            .min(depth)
            .saturating_sub(held)
            .min((size - first) as usize);
        let at = rq.addr + u64::from(first) * RECV_WQE_SIZE as u64;
        let mut b = [0u8; RX_PREFETCH_DEPTH * RECV_WQE_SIZE];
        let owner = rq.owner;
        if ctx
            .dma(owner)
            .read(at, &mut b[..n * RECV_WQE_SIZE])
            .is_err()
        {
            continue;
        }
        reads += 1;
        let Some(rq) = core.rqs.get_mut(rqn) else {
            continue;
        };
        for (k, w) in b[..n * RECV_WQE_SIZE]
            .chunks_exact(RECV_WQE_SIZE)
            .enumerate()
        {
            rq.prefetched.wqes[held + k] = RecvWqe::read_from_bytes(w).unwrap_or_default();
        }
        rq.prefetched.first = next;
        rq.prefetched.len = held + n;
        core.rx_prefetch.reads += 1;
        core.rx_prefetch.wqes += n as u64;
    }
    reads
}

/// Reads the RQ's next WQE — from what was read ahead, or by DMA; a DMA failure, a doorbell
/// overflow or a bad memory key puts the RQ in error and returns None.
fn fetch_recv_wqe(core: &mut NicCore, ctx: &mut Ctx<'_>, rqn: u32, pi: u32) -> Option<RecvWqe> {
    let rq = core.rqs.get(rqn)?;
    if pi.wrapping_sub(rq.ci) & db::PI_MASK > 1 << rq.log_size {
        core.bad_doorbells += 1;
        rq_error(core, ctx, rqn, syndrome::DOORBELL_OVERFLOW);
        return None;
    }
    let slot = rq.addr + ((rq.ci & ((1 << rq.log_size) - 1)) as u64) * RECV_WQE_SIZE as u64;
    let owner = rq.owner;
    let counter = rq.ci;
    let rq = core.rqs.get_mut(rqn)?;
    let wqe = match rq.prefetched.take(counter) {
        Some(w) => {
            rq.read_ahead_hits += 1;
            core.rx_prefetch.hits += 1;
            w
        }
        None => {
            let mut b = [0u8; RECV_WQE_SIZE];
            if ctx.dma(owner).read(slot, &mut b).is_err() {
                rq_error(core, ctx, rqn, syndrome::DMA_ERROR);
                return None;
            }
            RecvWqe::read_from_bytes(&b).ok()?
        }
    };
    if wqe.lkey.get() != RESERVED_LKEY {
        rq_error(core, ctx, rqn, syndrome::BAD_RECV_WQE);
        return None;
    }
    Some(wqe)
}

fn rq_error(core: &mut NicCore, ctx: &mut Ctx<'_>, rqn: u32, syn: u8) {
    let Some(rq) = core.rqs.get_mut(rqn) else {
        return;
    };
    rq.state = QueueState::Error;
    rq.open = None;
    rq.prefetched = Default::default();
    let (cqn, owner, ci) = (rq.cqn, rq.owner, rq.ci);
    log::debug!("RQ {rqn}: error syndrome {syn:#x} at WQE {ci}");
    report_queue_error(
        core,
        ctx,
        cqn,
        owner,
        rqn,
        ci as u16,
        syn,
        CQE_RESP_ERR,
        QUEUE_ERROR_RQ,
    );
}
