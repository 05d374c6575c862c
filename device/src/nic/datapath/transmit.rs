//! The transmit block: per SQ, the producer doorbell says how many WQE basic blocks are posted;
//! each WQE is taken from the SQ's WQE-by-MMIO buffer when the driver put it there
//! ([`super::wqe_mmio`]) or fetched by DMA, and read through [`SendWqeView`], its frame gathered
//! (inline header plus data segments), IPv4/TCP/UDP checksums inserted on request, and the frame handed to the
//! eSwitch. A malformed WQE, an unreachable address or a doorbell beyond the ring moves the SQ to
//! the error state with an error CQE and an event; completions follow the WQE's signalling.
//! Basic blocks are fetched ahead in bursts ([`WqePrefetch`]): one DMA read brings up to
//! [`FETCH_BLOCKS`] posted blocks, as a ConnectX-class NIC reads descriptors in bursts.
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

/// Basic blocks one descriptor fetch reads at most: 512 bytes, one read request at the
/// default Max_Read_Request_Size.
pub(crate) const FETCH_BLOCKS: u32 = 8;

/// Send WQE basic blocks read ahead for one SQ: `blocks` blocks from counter `first` on. A
/// fetch never reads past the ring's end or past what the doorbell posted, so nothing the host
/// may still be writing is read; blocks fetched and not executed (budget, a full CQ) are read
/// again next time, as hardware that drops its prefetch would.
pub(crate) struct WqePrefetch {
    buf: [u8; FETCH_BLOCKS as usize * WQEBB],
    first: u32,
    blocks: u32,
}

impl Default for WqePrefetch {
    fn default() -> Self {
        WqePrefetch {
            buf: [0; FETCH_BLOCKS as usize * WQEBB],
            first: 0,
            blocks: 0,
        }
    }
}

impl WqePrefetch {
    /// Copies block `counter` of the ring at `addr` (`mask` = ring blocks - 1) into `out`,
    /// fetching it and up to `posted - 1` blocks after it when it is not already here. A burst
    /// that fails is retried as the one block, so an unreachable block further on does not fail
    /// the WQE before it.
    fn block(
        &mut self,
        dma: &mut crate::fabric::DmaPort<'_>,
        (addr, mask): (u64, u32),
        counter: u32,
        posted: u32,
        out: &mut [u8],
    ) -> Result<(), crate::fabric::DmaError> {
        let mut off = counter.wrapping_sub(self.first);
        if off >= self.blocks {
            self.blocks = 0;
            let pos = counter & mask;
            let n = posted.clamp(1, FETCH_BLOCKS).min(mask + 1 - pos);
            let at = addr + pos as u64 * WQEBB as u64;
            let len = n as usize * WQEBB;
            if n > 1 && dma.read(at, &mut self.buf[..len]).is_ok() {
                self.blocks = n;
            } else {
                dma.read(at, &mut self.buf[..WQEBB])?;
                self.blocks = 1;
            }
            self.first = counter;
            off = 0;
        }
        let at = off as usize * WQEBB;
        out.copy_from_slice(&self.buf[at..at + WQEBB]);
        Ok(())
    }
}

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

/// Serves one SQ: its doorbell is read once per pass, then up to `sq_budget` WQEs run in ring
/// order; the SQ's counter and statistics are written back once.
fn transmit_sq(core: &mut NicCore, ctx: &mut Ctx<'_>, sqn: u32, frame: &mut [u8]) -> usize {
    let Some(sq) = core.sqs.get(sqn) else {
        return 0;
    };
    if sq.state != QueueState::Ready || ctx.ports.get(sq.owner as usize).is_none() {
        return 0;
    }
    let (owner, cqn, log_size, addr, signal_all) =
        (sq.owner, sq.cqn, sq.log_size, sq.addr, sq.signal_all);
    let mut ci = sq.ci;
    let pi = ctx.doorbell(owner, db::slot(db::SQ_BASE, sqn)) & db::PI_MASK;
    let mut pending = pi.wrapping_sub(ci) & db::PI_MASK;
    if pending == 0 {
        return 0;
    }
    if pending > 1u32 << log_size {
        core.bad_doorbells += 1;
        sq_error(core, ctx, sqn, ci as u16, syndrome::DOORBELL_OVERFLOW);
        return 0;
    }
    let budget = core.config.sq_budget;
    let mut wqe = std::mem::take(&mut core.wqe);
    // Taken out and put back (a pointer move, no allocation after the first time).
    let mut prefetch = core.wqe_prefetch.take().unwrap_or_default();
    prefetch.blocks = 0;
    let (mut done, mut packets, mut bytes) = (0, 0u64, 0u64);
    while done < budget && pending > 0 {
        // Completions are never dropped: without room for one CQE the queue waits.
        if core.cqs.get(cqn).is_none_or(|c| c.ring.room() == 0) {
            break;
        }
        let (result, nbb) = execute_wqe(
            core,
            ctx,
            (owner, sqn),
            (addr, log_size),
            (ci, pending),
            (&mut wqe, &mut prefetch),
            frame,
        );
        let ctrl = CtrlSeg::read_from_prefix(&wqe)
            .map(|(c, _)| c)
            .unwrap_or_default();
        match result {
            Ok(len) => {
                ci = ci.wrapping_add(nbb);
                pending = pending.saturating_sub(nbb);
                packets += (len > 0) as u64;
                bytes += len as u64;
                if signal_all || ctrl.completion_requested() {
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
    if let Some(sq) = core.sqs.get_mut(sqn) {
        sq.ci = ci;
        sq.packets += packets;
        sq.bytes += bytes;
    }
    core.wqe = wqe;
    core.wqe_prefetch = Some(prefetch);
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

/// Reads the WQE at counter `ci` of SQ `sqn`'s ring at `addr` (from its WQE-by-MMIO buffer, or
/// through the SQ's prefetch), builds and sends its frame. Returns the sent length and the
/// number of basic blocks the WQE occupies.
fn execute_wqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    (owner, sqn): (u16, u32),
    (addr, log_size): (u64, u8),
    (ci, pending): (u32, u32),
    (wqe, prefetch): (&mut [u8], &mut WqePrefetch),
    frame: &mut [u8],
) -> (Result<usize, WqeError>, u32) {
    let buffer = db::wqe_buffer(db::SQ_WQE_BASE, sqn);
    let nbb = match ctx.wqe_from_buffer(owner, buffer, (ci, pending), wqe, &mut core.wqe_mmio) {
        Some(nbb) => {
            if let Some(sq) = core.sqs.get_mut(sqn) {
                sq.wqes_by_mmio += 1;
            }
            nbb
        }
        None => match fetch_wqe(
            ctx.dma(owner),
            (addr, log_size),
            (ci, pending),
            wqe,
            prefetch,
        ) {
            Ok(nbb) => nbb,
            Err(e) => return e,
        },
    };
    let Ok(view) = SendWqeView::new_checked(&wqe[..nbb as usize * WQEBB]) else {
        return (Err(WqeError(syndrome::BAD_WQE)), nbb);
    };
    match view.ctrl().opcode {
        WQE_OP_NOP => (Ok(0), nbb),
        WQE_OP_SEND => (build_and_send(core, ctx, owner, &view, frame), nbb),
        _ => (Err(WqeError(syndrome::BAD_WQE)), nbb),
    }
}

/// Reads the WQE at counter `ci` of the ring through the SQ's prefetch into `wqe`; returns its
/// basic blocks, or the error and the blocks it consumes.
fn fetch_wqe(
    dma: &mut crate::fabric::DmaPort<'_>,
    (addr, log_size): (u64, u8),
    (ci, pending): (u32, u32),
    wqe: &mut [u8],
    prefetch: &mut WqePrefetch,
) -> Result<u32, (Result<usize, WqeError>, u32)> {
    let ring = (addr, (1u32 << log_size) - 1);
    if prefetch
        .block(dma, ring, ci, pending, &mut wqe[..WQEBB])
        .is_err()
    {
        wqe.fill(0);
        return Err((Err(WqeError(syndrome::DMA_ERROR)), 1));
    }
    let Ok((ctrl, _)) = CtrlSeg::read_from_prefix(&wqe[..]) else {
        return Err((Err(WqeError(syndrome::BAD_WQE)), 1));
    };
    let nbb = ctrl.wqebbs();
    // More segments than a WQE may have (found by the nic_sq fuzz target: the blocks were read
    // past the WQE buffer), or more blocks than were posted.
    if u16::from(ctrl.ds_count) > MAX_WQE_DS || nbb > pending {
        return Err((Err(WqeError(syndrome::BAD_WQE)), nbb.min(pending)));
    }
    for n in 1..nbb {
        let at = n as usize * WQEBB;
        let counter = ci.wrapping_add(n);
        let out = &mut wqe[at..at + WQEBB];
        if prefetch
            .block(dma, ring, counter, pending - n, out)
            .is_err()
        {
            return Err((Err(WqeError(syndrome::DMA_ERROR)), nbb));
        }
    }
    Ok(nbb)
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
    // StaR's egress security module (§16.5): a StaR packet no entry allows goes nowhere. The
    // WQE completes as sent; the drop is counted, as a steering drop is.
    if !super::roce::star_egress_allowed(core, owner, frame, &parsed) {
        return Ok(len);
    }
    switch_frame(core, ctx, owner, Frame::new(frame, parsed, owner), resume);
    Ok(len)
}

fn bump_malformed(core: &mut NicCore, vport: u16) {
    if let Some(v) = core.eswitch.vport_mut(vport) {
        v.counters.tx_malformed += 1;
    }
}
