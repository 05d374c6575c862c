//! The transmit block: per SQ, the producer doorbell says how many WQE basic blocks are posted;
//! each WQE is taken from the SQ's WQE-by-MMIO buffer when the driver put it there
//! ([`super::wqe_mmio`]) or fetched by DMA, and read through [`SendWqeView`], its frame gathered
//! (inline header plus data segments), IPv4/TCP/UDP checksums inserted on request, and the frame handed to the
//! eSwitch. A malformed WQE, an unreachable address or a doorbell beyond the ring moves the SQ to
//! the error state with an error CQE and an event; completions follow the WQE's signalling.
//! Basic blocks are fetched ahead in bursts ([`WqePrefetch`]): one DMA read brings up to
//! [`FETCH_BLOCKS`] posted blocks, as a ConnectX-class NIC reads descriptors in bursts.
//! A multi-packet WQE ([`gather_mpw`], `docs/nic-interface.md` §6.6) carries a frame per data
//! segment and completes once, after its last.
//! Left out: TSO (`mss` is ignored), VLAN insertion.

use zerocopy::little_endian::{U16, U32};
use zerocopy::FromBytes;

use super::completions::{post_cqe, report_queue_error};
use super::switching::{switch_sent_frame, Frame};
use super::{Ctx, NicCore};
use crate::nic::packet;
use fld_abi::nic::*;

/// Why a send WQE failed: the syndrome of its error CQE.
#[derive(Clone, Copy)]
struct WqeError(u8);

/// Basic blocks one descriptor fetch reads at most: 512 bytes, one read request at the
/// default Max_Read_Request_Size.
pub(crate) const FETCH_BLOCKS: u32 = 8;

/// Send WQE basic blocks read ahead for one SQ: `blocks` blocks from counter `first` on. A
/// fetch never reads past the ring's end or past what the doorbell posted, so nothing the host
/// may still be writing is read; blocks fetched and not executed (budget, a full CQ) are read
/// again next time, as hardware that drops its prefetch would.
#[derive(Clone)]
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
    /// The offset in the buffer of block `counter` of the ring at `addr` (`mask` = ring
    /// blocks - 1), fetching it and up to `posted - 1` blocks after it when it is not already
    /// here. A burst that fails is retried as the one block, so an unreachable block further on
    /// does not fail the WQE before it.
    fn fetch(
        &mut self,
        dma: &mut crate::fabric::DmaPort<'_>,
        (addr, mask): (u64, u32),
        counter: u32,
        posted: u32,
    ) -> Result<usize, crate::fabric::DmaError> {
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
        Ok(off as usize * WQEBB)
    }

    /// Copies block `counter` into `out` (see [`WqePrefetch::fetch`]).
    fn block(
        &mut self,
        dma: &mut crate::fabric::DmaPort<'_>,
        ring: (u64, u32),
        counter: u32,
        posted: u32,
        out: &mut [u8],
    ) -> Result<(), crate::fabric::DmaError> {
        let at = self.fetch(dma, ring, counter, posted)?;
        out.copy_from_slice(&self.buf[at..at + WQEBB]);
        Ok(())
    }

    /// Whether `nbb` blocks from byte `at` were fetched together (a WQE the gather stage reads
    /// where it lies).
    fn holds(&self, at: usize, nbb: u32) -> bool {
        at + nbb as usize * WQEBB <= self.blocks as usize * WQEBB
    }
}

pub(super) fn transmit(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    let mut work = 0;
    let mut burst = std::mem::take(&mut core.tx_burst);
    for i in 0..core.active_sqs.len() {
        let sqn = core.active_sqs[i];
        work += transmit_sq(core, ctx, sqn, &mut burst);
    }
    core.tx_burst = burst;
    work
}

/// A send WQE after the gather stage: what the parse and steering stages need of it.
#[derive(Clone, Copy)]
pub(crate) struct TxSlot {
    ctrl: CtrlSeg,
    /// Basic blocks the WQE consumes, on the slot of its last frame (0 on the others of a
    /// multi-packet WQE).
    nbb: u32,
    /// Whether this is the WQE's last frame: where the SQ's counter advances and the WQE
    /// completes.
    ends_wqe: bool,
    /// The frame's length (0 for a NOP), or the syndrome that fails the WQE.
    outcome: Result<u32, WqeError>,
    /// Whether the WQE came from the SQ's WQE-by-MMIO buffer.
    by_mmio: bool,
    cs_flags: u8,
    /// The table a returned frame re-enters steering at, and its kind.
    resume: Option<(u32, u8)>,
    /// The parse stage's view of the frame.
    parsed: packet::ParsedFrame,
}

impl Default for TxSlot {
    fn default() -> Self {
        TxSlot {
            ctrl: CtrlSeg::default(),
            nbb: 0,
            ends_wqe: true,
            outcome: Ok(0),
            by_mmio: false,
            cs_flags: 0,
            resume: None,
            parsed: Default::default(),
        }
    }
}

/// The transmit pipeline's burst (the gather stage's output): frame `k` at `k * stride` of
/// `frames`, its WQE's facts in `slots[k]`. Allocated once per NIC; reused by every pass.
#[derive(Default)]
pub(crate) struct TxBurst {
    frames: Vec<u8>,
    stride: usize,
    slots: Vec<TxSlot>,
    /// The configured burst, in frames.
    burst: usize,
    /// Slots the gather stage filled.
    len: usize,
}

impl TxBurst {
    /// Room for `frames` frames of up to `stride` bytes.
    /// Room for a burst of `frames` frames of up to `stride` bytes; always room for the largest
    /// multi-packet WQE, whose frames one burst takes whole.
    pub(crate) fn new(frames: usize, stride: usize) -> Self {
        let burst = frames.max(1);
        let slots = burst.max(MAX_MPW_PACKETS);
        TxBurst {
            frames: vec![0; slots * stride],
            stride,
            slots: vec![TxSlot::default(); slots],
            burst,
            len: 0,
        }
    }

    /// Frames a burst gathers (a multi-packet WQE at its start may take more).
    fn capacity(&self) -> usize {
        self.burst
    }

    /// The filled slots with their frames.
    fn frames(&self) -> impl Iterator<Item = (&TxSlot, &[u8])> {
        let stride = self.stride;
        self.slots[..self.len]
            .iter()
            .enumerate()
            .map(move |(k, slot)| {
                let at = k * stride;
                let len = slot.outcome.map_or(0, |n| n as usize);
                (slot, &self.frames[at..at + len])
            })
    }
}

/// CQEs one frame may add to its own SQ's CQ at most in one pass: its send completion, and a
/// receive completion with a filler when it is steered back to its own function. A burst is
/// gathered only as long as its CQ has room for this many per frame, so the steering stage never
/// finds the CQ full after the gather stage has read a frame.
const CQES_PER_FRAME: u32 = 4;

/// Serves one SQ: its doorbell is read once per pass, then up to `sq_budget` WQEs run in ring
/// order through the transmit pipeline, a burst at a time ([`gather`], [`parse_burst`],
/// [`steer_burst`]); the SQ's counter and statistics are written back once.
fn transmit_sq(core: &mut NicCore, ctx: &mut Ctx<'_>, sqn: u32, burst: &mut TxBurst) -> usize {
    let Some(sq) = core.sqs.get(sqn) else {
        return 0;
    };
    if sq.state != QueueState::Ready || ctx.ports.get(sq.owner as usize).is_none() {
        return 0;
    }
    let (owner, cqn, log_size, addr) = (sq.owner, sq.cqn, sq.log_size, sq.addr);
    let ci = sq.ci;
    let pi = ctx.doorbell(owner, db::slot(db::SQ_BASE, sqn)) & db::PI_MASK;
    let pending = pi.wrapping_sub(ci) & db::PI_MASK;
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
    let mut run = SqRun {
        sqn,
        owner,
        cqn,
        ci,
        pending,
        done: 0,
        packets: 0,
        bytes: 0,
        by_mmio: 0,
        wqe_bytes: 0,
    };
    while run.done < budget && run.pending > 0 {
        // Completions are never dropped: without room for one CQE the queue waits.
        let (room, cq_size) = core
            .cqs
            .get(cqn)
            .map_or((0, 0), |c| (c.ring.room(), c.ring.size()));
        if room == 0 {
            break;
        }
        let limits = GatherLimits {
            wqes: budget - run.done,
            frames: (burst.capacity() as u32).min((room / CQES_PER_FRAME).max(1)),
            room,
            cq_size,
        };
        gather(
            core,
            ctx,
            &run,
            (addr, log_size),
            &limits,
            (&mut wqe, &mut prefetch),
            burst,
        );
        if burst.len == 0 {
            // A multi-packet WQE waits for room in its CQ.
            break;
        }
        parse_burst(burst);
        if !steer_burst(core, ctx, &mut run, burst) {
            break;
        }
    }
    if let Some(sq) = core.sqs.get_mut(sqn) {
        sq.ci = run.ci;
        sq.packets += run.packets;
        sq.bytes += run.bytes;
        sq.wqes_by_mmio += run.by_mmio;
    }
    core.wqe = wqe;
    core.wqe_prefetch = Some(prefetch);
    run.done as usize
}

/// How much one burst may gather: WQEs (the pass's budget left), frames (the burst, and the
/// CQ's free entries at [`CQES_PER_FRAME`] a frame), and the CQ's free and total entries a
/// multi-packet WQE at the burst's start is measured against.
struct GatherLimits {
    wqes: u32,
    frames: u32,
    room: u32,
    cq_size: u32,
}

/// Where one SQ's pass stands: the WQEs executed so far and what they sent.
struct SqRun {
    sqn: u32,
    owner: u16,
    cqn: u32,
    /// The device's counter: the next WQE to execute.
    ci: u32,
    /// Basic blocks posted beyond `ci`.
    pending: u32,
    done: u32,
    packets: u64,
    bytes: u64,
    by_mmio: u64,
    /// Bytes the current WQE's frames sent so far (a multi-packet WQE's completion reports
    /// them all).
    wqe_bytes: u64,
}

/// The gather stage: reads WQEs from the SQ's counter on (from its WQE-by-MMIO buffer or
/// through the prefetch), within `limits`, and gathers each one's frames into the burst. A WQE
/// that fails ends the burst (its last slot carries the syndrome), as the WQEs after it must
/// wait for the queue's recovery. A frame's data is read here, before the frames ahead of it in
/// the burst are steered: a buffer one of them is received into is read as it was before that
/// receive, as a NIC that fetches a burst ahead reads it.
fn gather(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    run: &SqRun,
    ring: (u64, u8),
    limits: &GatherLimits,
    (wqe, prefetch): (&mut [u8], &mut WqePrefetch),
    burst: &mut TxBurst,
) {
    let (mut ci, mut pending) = (run.ci, run.pending);
    // The WQE-by-MMIO buffer's seal, read once per burst: only the WQE it names may come
    // from the buffer (which checks the seal again around its copy).
    let buffer = db::wqe_buffer(db::SQ_WQE_BASE, run.sqn);
    let sealed = ctx.wqe_seal(run.owner, buffer);
    let stride = burst.stride;
    // Within the slots (as the limit is), said so the compiler drops the bounds checks.
    let frames = (limits.frames as usize).min(burst.slots.len());
    let (mut k, mut wqes) = (0, 0);
    while k < frames && wqes < limits.wqes && pending > 0 {
        // A WQE this burst cannot take is left as it was found: nothing fetched past its
        // first block and no use of the buffer counted, as the next burst starts with it.
        let fits = |ctrl: &CtrlSeg| fits_burst(ctrl, k, limits);
        let counted = core.wqe_mmio;
        let slot = &mut burst.slots[k];
        let by_mmio = sealed == Some(ci & db::PI_MASK)
            && ctx
                .wqe_from_buffer(run.owner, buffer, (ci, pending), wqe, &mut core.wqe_mmio)
                .map(|nbb| slot.nbb = nbb)
                .is_some();
        slot.by_mmio = by_mmio;
        let at = if by_mmio {
            match CtrlSeg::read_from_prefix(wqe) {
                Ok((ctrl, _)) if !fits(&ctrl) => WqeAt::Later,
                _ => WqeAt::Copied,
            }
        } else {
            match fetch_wqe(ctx.dma(run.owner), ring, (ci, pending), wqe, prefetch, fits) {
                Ok((at, nbb)) => {
                    slot.nbb = nbb;
                    at
                }
                Err((e, nbb)) => {
                    slot.nbb = nbb;
                    WqeAt::Failed(e)
                }
            }
        };
        let nbb = slot.nbb;
        let bytes = match at {
            WqeAt::Prefetched(off) => &prefetch.buf[off..off + nbb as usize * WQEBB],
            WqeAt::Copied => &wqe[..nbb as usize * WQEBB],
            WqeAt::Failed(e) => {
                slot.ends_wqe = true;
                slot.outcome = Err(e);
                k += 1;
                break;
            }
            WqeAt::Later => {
                core.wqe_mmio = counted;
                break;
            }
        };
        let (used, failed) = if bytes.first() == Some(&WQE_OP_SEND_MPW) {
            gather_mpw(core, ctx, run.owner, bytes, burst, k, limits)
        } else {
            slot.ends_wqe = true;
            let frame = &mut burst.frames[k * stride..(k + 1) * stride];
            slot.outcome = gather_wqe(core, ctx, run.owner, bytes, slot, frame);
            (1, slot.outcome.is_err())
        };
        k += used;
        wqes += 1;
        if failed {
            break;
        }
        ci = ci.wrapping_add(nbb);
        pending = pending.saturating_sub(nbb);
    }
    burst.len = k;
}

/// The parse stage: every gathered frame is parsed once and gets the checksums its WQE asks
/// for. Each layer on its own: a frame without L4 still gets its IPv4 header checksum.
/// Insertion changes no offsets, so the parse stays valid; what was inserted is known good on
/// receive.
fn parse_burst(burst: &mut TxBurst) {
    let stride = burst.stride;
    for (k, slot) in burst.slots[..burst.len].iter_mut().enumerate() {
        let Ok(len @ 1..) = slot.outcome else {
            continue;
        };
        let frame = &mut burst.frames[k * stride..k * stride + len as usize];
        packet::parse_into(frame, &mut slot.parsed);
        let parsed = &mut slot.parsed;
        // Both layers asked for, and both well formed (the rule): one check of the headers
        // serves both. Otherwise each layer on its own, so one bad layer does not cost the other.
        if slot.cs_flags & (CS_L3 | CS_L4) == CS_L3 | CS_L4
            && packet::insert_checksums(frame, parsed, true, true)
        {
            parsed.inserted_l3_checksum = parsed.l3 == packet::L3Kind::Ipv4;
            parsed.inserted_l4_checksum = true;
            continue;
        }
        if slot.cs_flags & CS_L3 != 0 {
            parsed.inserted_l3_checksum = packet::insert_checksums(frame, parsed, true, false)
                && parsed.l3 == packet::L3Kind::Ipv4;
        }
        if slot.cs_flags & CS_L4 != 0 {
            parsed.inserted_l4_checksum = packet::insert_checksums(frame, parsed, false, true);
        }
    }
}

/// The steering stage: each WQE of the burst in ring order — its frame through StaR's egress
/// check and the eSwitch to its destinations, then its send completion — or, for a WQE that
/// failed, the SQ's error. False when the SQ must stop for this pass (an error, or no CQ room).
fn steer_burst(core: &mut NicCore, ctx: &mut Ctx<'_>, run: &mut SqRun, burst: &TxBurst) -> bool {
    let signal_all = core.sqs.get(run.sqn).is_some_and(|s| s.signal_all);
    let mut wqe_start = true;
    for (k, (slot, frame)) in burst.frames().enumerate() {
        // Checked again per WQE, as the frames before it may have filled the CQ. (A
        // multi-packet WQE's frames were gathered with room for all of them.)
        if k > 0 && wqe_start && core.cqs.get(run.cqn).is_none_or(|c| c.ring.room() == 0) {
            return false;
        }
        wqe_start = slot.ends_wqe;
        run.by_mmio += slot.by_mmio as u64;
        let len = match slot.outcome {
            Ok(len) => len as usize,
            Err(WqeError(syn)) => {
                // Error CQEs name the failing WQE by the device's own counter.
                sq_error(core, ctx, run.sqn, run.ci as u16, syn);
                return false;
            }
        };
        if len > 0 {
            // StaR's egress security module (§16.5): a StaR packet no entry allows goes
            // nowhere. The WQE completes as sent; the drop is counted, as a steering drop is.
            if super::roce::star_egress_allowed(core, run.owner, frame, &slot.parsed) {
                let f = Frame::new(frame, &slot.parsed, run.owner);
                switch_sent_frame(core, ctx, run.owner, f, slot.resume);
            }
        }
        run.ci = run.ci.wrapping_add(slot.nbb);
        run.pending = run.pending.saturating_sub(slot.nbb);
        run.packets += (len > 0) as u64;
        run.bytes += len as u64;
        run.wqe_bytes += len as u64;
        if !slot.ends_wqe {
            continue;
        }
        run.done += 1;
        let wqe_bytes = std::mem::take(&mut run.wqe_bytes);
        if signal_all || slot.ctrl.completion_requested() {
            let cqe = Cqe {
                byte_count: U32::new(wqe_bytes as u32),
                wqe_counter: slot.ctrl.wqe_index,
                qn: U32::new(run.sqn),
                vport: U16::new(run.owner),
                ..Default::default()
            };
            post_cqe(core, ctx, run.cqn, cqe, CQE_REQ);
        }
    }
    true
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

/// Where a fetched WQE lies: in the prefetch buffer at a byte offset (the common case, read
/// where it lies), or copied into the WQE buffer (it continues past what one fetch brought); or
/// that it failed, or that it is the next burst's (only its first block read).
#[derive(Clone, Copy)]
enum WqeAt {
    Prefetched(usize),
    Copied,
    Failed(WqeError),
    Later,
}

/// Reads the WQE at counter `ci` of the ring through the SQ's prefetch; returns where it lies
/// and its basic blocks ([`WqeAt::Later`], with only its first block read, when its control
/// segment does not `fit`), or the error and the blocks it consumes.
fn fetch_wqe(
    dma: &mut crate::fabric::DmaPort<'_>,
    (addr, log_size): (u64, u8),
    (ci, pending): (u32, u32),
    wqe: &mut [u8],
    prefetch: &mut WqePrefetch,
    fits: impl Fn(&CtrlSeg) -> bool,
) -> Result<(WqeAt, u32), (WqeError, u32)> {
    let ring = (addr, (1u32 << log_size) - 1);
    let Ok(at) = prefetch.fetch(dma, ring, ci, pending) else {
        return Err((WqeError(syndrome::DMA_ERROR), 1));
    };
    let Ok((ctrl, _)) = CtrlSeg::read_from_prefix(&prefetch.buf[at..]) else {
        return Err((WqeError(syndrome::BAD_WQE), 1));
    };
    if !fits(&ctrl) {
        return Ok((WqeAt::Later, 0));
    }
    let nbb = ctrl.wqebbs();
    // More segments than a WQE may have (found by the nic_sq fuzz target: the blocks were read
    // past the WQE buffer), or more blocks than were posted.
    if u16::from(ctrl.ds_count) > MAX_WQE_DS || nbb > pending {
        return Err((WqeError(syndrome::BAD_WQE), nbb.min(pending)));
    }
    if prefetch.holds(at, nbb) {
        return Ok((WqeAt::Prefetched(at), nbb));
    }
    wqe[..WQEBB].copy_from_slice(&prefetch.buf[at..at + WQEBB]);
    for n in 1..nbb {
        let at = n as usize * WQEBB;
        let counter = ci.wrapping_add(n);
        let out = &mut wqe[at..at + WQEBB];
        if prefetch
            .block(dma, ring, counter, pending - n, out)
            .is_err()
        {
            return Err((WqeError(syndrome::DMA_ERROR), nbb));
        }
    }
    Ok((WqeAt::Copied, nbb))
}

/// Reads a WQE's control segment into its slot and, for a SEND, gathers its frame; returns the
/// frame's length (0 for a NOP). (A multi-packet SEND is [`gather_mpw`]'s.)
fn gather_wqe(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    owner: u16,
    bytes: &[u8],
    slot: &mut TxSlot,
    frame: &mut [u8],
) -> Result<u32, WqeError> {
    let view = SendWqeView::new_checked(bytes).map_err(|_| WqeError(syndrome::BAD_WQE))?;
    slot.ctrl = *view.ctrl();
    match slot.ctrl.opcode {
        WQE_OP_NOP => Ok(0),
        WQE_OP_SEND => gather_frame(core, ctx, owner, &view, slot, frame),
        _ => Err(WqeError(syndrome::BAD_WQE)),
    }
}

/// Whether a burst that has `k` frames can take the WQE `ctrl` begins: any but a multi-packet
/// WQE whose frames go past the burst's limit. Such a WQE is the next burst's; at a burst's
/// start it is taken if the CQ has room for its frames (or can never have it: it is refused),
/// and otherwise waits for room. One announcing no frames or too many is taken and refused.
fn fits_burst(ctrl: &CtrlSeg, k: usize, limits: &GatherLimits) -> bool {
    if ctrl.opcode != WQE_OP_SEND_MPW {
        return true;
    }
    let n = usize::from(ctrl.ds_count).saturating_sub(2);
    if n == 0 || n > MAX_MPW_PACKETS || k + n <= limits.frames as usize {
        return true;
    }
    let need = n as u32 * CQES_PER_FRAME;
    k == 0 && (need <= limits.room || need > limits.cq_size)
}

/// The frames of a multi-packet SEND (`docs/nic-interface.md` §6.6) in `bytes`, whose blocks
/// and source the gather stage put in slot `k`: one slot each from `k` on, every data segment a
/// whole frame with the WQE's checksum requests. A frame that fails fails the WQE at its slot;
/// the frames before it are sent. A WQE whose frames need more CQ entries than its CQ holds is
/// refused ([`fits_burst`] let it in). The WQE's blocks and completion go with its last slot.
/// Returns the slots used and whether the WQE failed. (Kept out of line: inlined, it cost the
/// gather loop of single-frame WQEs registers and instructions.)
#[inline(never)]
fn gather_mpw(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    owner: u16,
    bytes: &[u8],
    burst: &mut TxBurst,
    k: usize,
    limits: &GatherLimits,
) -> (usize, bool) {
    let (nbb, by_mmio) = (burst.slots[k].nbb, burst.slots[k].by_mmio);
    let fail = |burst: &mut TxBurst, syn: u8| {
        burst.slots[k].outcome = Err(WqeError(syn));
        1
    };
    // The frames, one slot each: the slots they used.
    let used = 'frames: {
        let Ok(wqe) = SendWqeView::new_checked(bytes) else {
            break 'frames fail(burst, syndrome::BAD_WQE);
        };
        burst.slots[k].ctrl = *wqe.ctrl();
        let Ok(eth) = wqe.eth() else {
            break 'frames fail(burst, syndrome::BAD_WQE);
        };
        let n = eth.data_segments().count();
        let resume = eth.eth.flags & ETH_FLAG_RESUME != 0;
        if !eth.inline_header.is_empty() || resume || n == 0 || n > MAX_MPW_PACKETS {
            break 'frames fail(burst, syndrome::BAD_WQE);
        }
        if n as u32 * CQES_PER_FRAME > limits.cq_size {
            break 'frames fail(burst, syndrome::BAD_WQE);
        }
        let stride = burst.stride;
        let max = (core.config.mtu as usize).min(stride);
        for (j, d) in eth.data_segments().enumerate() {
            let at = k + j;
            let slot = &mut burst.slots[at];
            let frame = &mut burst.frames[at * stride..(at + 1) * stride];
            slot.ctrl = *wqe.ctrl();
            slot.cs_flags = eth.eth.cs_flags;
            slot.resume = None;
            let len = d.byte_count.get() as usize;
            slot.outcome = if d.lkey.get() != RESERVED_LKEY {
                Err(WqeError(syndrome::BAD_WQE))
            } else if !(14..=max).contains(&len) {
                bump_malformed(core, owner);
                Err(WqeError(syndrome::BAD_LENGTH))
            } else if ctx
                .dma(owner)
                .read(d.addr.get(), &mut frame[..len])
                .is_err()
            {
                Err(WqeError(syndrome::DMA_ERROR))
            } else {
                Ok(len as u32)
            };
            if slot.outcome.is_err() {
                break 'frames j + 1;
            }
        }
        n
    };
    for (j, slot) in burst.slots[k..k + used].iter_mut().enumerate() {
        let last = j + 1 == used;
        slot.by_mmio = by_mmio && last;
        slot.nbb = if last { nbb } else { 0 };
        slot.ends_wqe = last;
    }
    (used, burst.slots[k + used - 1].outcome.is_err())
}

/// Gathers the frame of a SEND WQE into `frame` (inline header, then the data segments by DMA)
/// and checks its resume table; returns its length.
fn gather_frame(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    owner: u16,
    wqe: &SendWqeView<'_>,
    slot: &mut TxSlot,
    frame: &mut [u8],
) -> Result<u32, WqeError> {
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
    slot.cs_flags = eth.eth.cs_flags;
    slot.resume = match eth.resume_table(wqe.ctrl()) {
        Some(t) => match core.eswitch.table(t) {
            Some(tab) if tab.owner == owner => Some((t, tab.kind)),
            _ => return Err(bad()),
        },
        None => None,
    };
    Ok(len as u32)
}

fn bump_malformed(core: &mut NicCore, vport: u16) {
    if let Some(v) = core.eswitch.vport_mut(vport) {
        v.counters.tx_malformed += 1;
    }
}
