//! The NIC engine: reads doorbells, executes send WQEs (gather by DMA, checksum insertion),
//! switches frames through the eSwitch, scatters them into regular or striding RQs, writes CQEs
//! with owner bits and raises events and MSI-X. One call to [`poll`] is one batch: DMA routing is
//! snapshotted once, counters are flushed once, nothing is allocated per packet.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, IntoBytes};

use super::eswitch::{frame_key, Fate};
use super::packet::{self, L3Kind, L4Kind, ParsedFrame};
use super::rss;
use super::*;
use crate::fabric::{DmaPort, Fabric};
use crate::wire::TapPoint;
use fld_abi::nic::*;

/// Frames taken from the uplink wire per poll.
const WIRE_BUDGET: usize = 256;

/// Per-poll context. DMA ports and the timestamp are taken on first use, so an idle poll costs
/// only the doorbell reads.
struct Ctx<'a> {
    fabric: &'a Fabric,
    ports: &'a [Port],
    dma: [Option<DmaPort<'a>>; MAX_HOST_FUNCTIONS],
    now_ns: Option<u64>,
    epoch: std::time::Instant,
}

impl<'a> Ctx<'a> {
    /// The DMA port of host function `owner` (its requester ID and address space).
    fn dma(&mut self, owner: u16) -> &mut DmaPort<'a> {
        let (fabric, fid) = (self.fabric, self.ports[owner as usize].fid);
        self.dma[owner as usize].get_or_insert_with(|| fabric.dma(fid))
    }

    fn now(&mut self) -> u64 {
        let epoch = self.epoch;
        *self
            .now_ns
            .get_or_insert_with(|| epoch.elapsed().as_nanos() as u64)
    }
}

pub(super) fn poll(core: &mut NicCore, fabric: &Fabric, ports: &[Port]) -> usize {
    let mut ctx = Ctx {
        fabric,
        ports,
        dma: [const { None }; MAX_HOST_FUNCTIONS],
        now_ns: core.manual_clock,
        epoch: core.epoch,
    };
    let mut work = consumer_doorbells(core, &mut ctx);
    work += transmit(core, &mut ctx);
    work += wire_receive(core, &mut ctx);
    work
}

// ---------------------------------------------------------------------------------------------
// Consumer-index and arm doorbells
// ---------------------------------------------------------------------------------------------

fn consumer_doorbells(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    let mut work = 0;
    for id in 0..core.cqs.items.len() as u32 {
        let Some(cq) = core.cqs.get_mut(id) else {
            continue;
        };
        let Some(port) = ctx.ports.get(cq.owner as usize) else {
            continue;
        };
        let w = port.doorbells.load(db::CQ_BASE + 4 * id as u64);
        if w == cq.last_db {
            continue;
        }
        cq.last_db = w;
        cq.ci = w & db::CI_MASK;
        let sn = (w >> db::ARM_SN_SHIFT) & db::ARM_SN_MASK;
        if w & db::ARM != 0 && sn != cq.arm_sn {
            cq.arm_sn = sn;
            cq.armed = true;
            work += 1;
            // Arming behind the producer fires at once, so no completion is missed.
            if cq.pc.wrapping_sub(cq.ci) & db::CI_MASK != 0 {
                cq.armed = false;
                let (eqn, owner) = (cq.eqn, cq.owner);
                post_event(core, ctx, eqn, owner, EQE_COMPLETION, 0, id);
            }
        }
    }
    for id in 0..core.eqs.items.len() as u32 {
        let Some(eq) = core.eqs.get_mut(id) else {
            continue;
        };
        let Some(port) = ctx.ports.get(eq.owner as usize) else {
            continue;
        };
        let w = port.doorbells.load(db::EQ_BASE + 4 * id as u64);
        if w == eq.last_db {
            continue;
        }
        eq.last_db = w;
        eq.ci = w & db::CI_MASK;
        let sn = (w >> db::ARM_SN_SHIFT) & db::ARM_SN_MASK;
        if w & db::ARM != 0 && sn != eq.arm_sn {
            eq.arm_sn = sn;
            work += 1;
            if eq.pc.wrapping_sub(eq.ci) & db::CI_MASK != 0 {
                port.pci.signal(eq.vector);
            } else {
                eq.armed = true;
            }
        }
    }
    work
}

/// Writes an EQE and interrupts if the EQ is armed. A full EQ counts an overflow.
fn post_event(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    eqn: u32,
    owner: u16,
    event_type: u8,
    subtype: u8,
    data: u32,
) {
    let Some(eq) = core.eqs.get_mut(eqn) else {
        return;
    };
    if eq.pc.wrapping_sub(eq.ci) & db::CI_MASK >= 1 << eq.log_size {
        eq.overflows += 1;
        return;
    }
    let eqe = Eqe::new(event_type, subtype, data, owner_bit(eq.pc, eq.log_size));
    let slot = eq.addr + ((eq.pc & ((1 << eq.log_size) - 1)) as u64) * EQE_SIZE as u64;
    if ctx.dma(owner).write(slot, eqe.as_bytes()).is_err() {
        eq.overflows += 1;
        return;
    }
    eq.pc = eq.pc.wrapping_add(1);
    if eq.armed {
        eq.armed = false;
        ctx.ports[owner as usize].pci.signal(eq.vector);
    }
}

/// True (and an overflow counted) when CQ `cqn` has fewer than `need` free entries. The first
/// overflow of a CQ is reported as an asynchronous event on its EQ.
fn cq_lacks_room(core: &mut NicCore, ctx: &mut Ctx<'_>, cqn: u32, need: u32) -> bool {
    let Some(cq) = core.cqs.get_mut(cqn) else {
        return true;
    };
    if cq.room() >= need {
        return false;
    }
    cq.overflows += 1;
    if cq.overflows == 1 {
        let (eqn, owner) = (cq.eqn, cq.owner);
        post_event(core, ctx, eqn, owner, EQE_CQ_ERROR, 0, cqn);
    }
    true
}

/// Writes a CQE (owner bit from the producer counter) and posts a completion event if armed.
/// Returns false when the CQE could not be written (no room or the ring is unreachable).
fn post_cqe(core: &mut NicCore, ctx: &mut Ctx<'_>, cqn: u32, mut cqe: Cqe, opcode: u8) -> bool {
    if cq_lacks_room(core, ctx, cqn, 1) {
        return false;
    }
    let Some(cq) = core.cqs.get_mut(cqn) else {
        return false;
    };
    cqe.set_op_own(opcode, owner_bit(cq.pc, cq.log_size));
    cqe.timestamp = U64::new(ctx.now());
    let slot = cq.addr + ((cq.pc & ((1 << cq.log_size) - 1)) as u64) * CQE_SIZE as u64;
    if ctx.dma(cq.owner).write(slot, cqe.as_bytes()).is_err() {
        cq.overflows += 1;
        return false;
    }
    cq.pc = cq.pc.wrapping_add(1);
    if cq.armed {
        cq.armed = false;
        let (eqn, owner) = (cq.eqn, cq.owner);
        post_event(core, ctx, eqn, owner, EQE_COMPLETION, 0, cqn);
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Transmit
// ---------------------------------------------------------------------------------------------

/// Why a send WQE failed: the syndrome of its error CQE.
struct WqeError(u8);

fn transmit(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
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
        let Some(port) = ctx.ports.get(owner as usize) else {
            break;
        };
        let pi = port.doorbells.load(db::SQ_BASE + 4 * sqn as u64) & 0xffff;
        let pending = pi.wrapping_sub(ci) & 0xffff;
        if pending == 0 {
            break;
        }
        // Completions are never dropped: without room for one CQE the queue waits.
        if core.cqs.get(cqn).is_none_or(|c| c.room() == 0) {
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
                let signal = sq.signal_all || ctrl.fm_ce_se & CE_MASK == CE_ALWAYS;
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
    let cqe = Cqe {
        wqe_counter: U16::new(wqe_index),
        qn: U32::new(sqn),
        syndrome: syn,
        vport: U16::new(owner),
        ..Default::default()
    };
    post_cqe(core, ctx, cqn, cqe, CQE_REQ_ERR);
    if let Some(eqn) = core.cqs.get(cqn).map(|c| c.eqn) {
        post_event(core, ctx, eqn, owner, EQE_QUEUE_ERROR, 1, sqn);
    }
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
    if nbb > pending {
        return (Err(WqeError(syndrome::BAD_WQE)), nbb);
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
    switch_frame(core, ctx, owner, frame, &parsed, resume);
    Ok(len)
}

fn bump_malformed(core: &mut NicCore, vport: u16) {
    if let Some(v) = core.eswitch.vport_mut(vport) {
        v.counters.tx_malformed += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// Switching
// ---------------------------------------------------------------------------------------------

/// A frame enters the eSwitch from `src_vport` and leaves towards its destinations.
/// `resume` names the table (and its kind) a returned frame re-enters steering at.
fn switch_frame(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    src_vport: u16,
    frame: &[u8],
    p: &ParsedFrame,
    resume: Option<(u32, u8)>,
) {
    if let Some(tap) = core.tap.as_mut() {
        tap.frame(src_vport, TapPoint::FromVport, frame);
    }
    if let Some(v) = core.eswitch.vport_mut(src_vport) {
        v.counters.tx_packets += 1;
        v.counters.tx_bytes += frame.len() as u64;
    }
    let key = frame_key(frame, p, src_vport, 0);
    // A frame returned into a receive table goes straight to the sender's own receive pipeline.
    if let Some((t, TABLE_KIND_NIC_RX)) = resume {
        return deliver_to_vport(core, ctx, src_vport, Some(t), frame, p, &key, 0);
    }
    let now = ctx.now();
    let st = core.eswitch.steer_fdb(
        resume.map(|r| r.0),
        &key,
        &p.dst_mac,
        src_vport,
        frame.len(),
        now,
    );
    forward(core, ctx, src_vport, frame, p, &key, st);
}

/// Carries out an FDB decision. A VXLAN decapsulation continues at its table with the inner
/// frame (go-to targets sit at higher levels, so this ends).
fn forward(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    src_vport: u16,
    frame: &[u8],
    p: &ParsedFrame,
    key: &eswitch::Key,
    st: eswitch::Steering,
) {
    let key = *key;
    match st.fate {
        Fate::DecapGoto(t) => match packet::vxlan(frame, p) {
            Some((_, inner)) => {
                let f = &frame[inner..];
                let ip = packet::parse(f);
                let k = frame_key(f, &ip, src_vport, 0);
                let next =
                    core.eswitch
                        .steer_fdb(Some(t), &k, &ip.dst_mac, src_vport, f.len(), ctx.now());
                forward(core, ctx, src_vport, f, &ip, &k, next);
            }
            None => count_drop(core, src_vport, true),
        },
        Fate::Vport(v) => deliver_to_vport(core, ctx, v, None, frame, p, &key, st.flow_tag),
        Fate::EncapVport { vport, encap } => {
            let mut out = std::mem::take(&mut core.encap_frame);
            let Some(e) = core
                .eswitch
                .encaps
                .get_mut(encap as usize)
                .and_then(|e| e.as_mut())
            else {
                core.encap_frame = out;
                return count_drop(core, src_vport, true);
            };
            e.encapsulate(frame, inner_flow_hash(p), &mut out);
            e.packets += 1;
            if out.len() > core.config.mtu as usize {
                // The tunnel would need fragmenting, which VXLAN forbids (RFC 7348 §4.3).
                core.encap_frame = out;
                return count_drop(core, src_vport, true);
            }
            let outer = packet::parse(&out);
            let k = frame_key(&out, &outer, src_vport, 0);
            deliver_to_vport(core, ctx, vport, None, &out, &outer, &k, st.flow_tag);
            core.encap_frame = out;
        }
        Fate::Flood => {
            let n = core.eswitch.vports.len() as u16;
            for v in (0..n).chain([VPORT_UPLINK]) {
                if v != src_vport {
                    deliver_to_vport(core, ctx, v, None, frame, p, &key, st.flow_tag);
                }
            }
        }
        Fate::Drop | Fate::NoSteering | Fate::Rq(_) | Fate::Rss(_) => {
            if let Some(v) = core.eswitch.vport_mut(src_vport) {
                v.counters.rx_steering_drops += 1;
            }
        }
    }
}

/// FNV-1a over the inner flow's addresses, protocol and ports: the entropy RFC 7348 §5 asks
/// the outer UDP source port to carry.
fn inner_flow_hash(p: &ParsedFrame) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let ports = [p.src_port.to_be_bytes(), p.dst_port.to_be_bytes()];
    for b in p
        .src_ip
        .iter()
        .chain(&p.dst_ip)
        .chain(&[p.ip_proto])
        .chain(ports.iter().flatten())
    {
        h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    h
}

#[allow(clippy::too_many_arguments)]
fn deliver_to_vport(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    start: Option<u32>,
    frame: &[u8],
    p: &ParsedFrame,
    key: &eswitch::Key,
    flow_tag: u32,
) {
    if let Some(tap) = core.tap.as_mut() {
        tap.frame(vport, TapPoint::ToVport, frame);
    }
    if vport == VPORT_UPLINK {
        core.wire.transmit(frame);
        core.wire_tx_frames += 1;
        let c = &mut core.eswitch.uplink.counters;
        c.rx_packets += 1;
        c.rx_bytes += frame.len() as u64;
        return;
    }
    steer_into_vport(core, ctx, vport, start, frame, p, key, flow_tag);
}

/// A vPort's receive pipeline, from its root or `start`, into an RQ.
#[allow(clippy::too_many_arguments)]
fn steer_into_vport(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    start: Option<u32>,
    frame: &[u8],
    p: &ParsedFrame,
    key: &eswitch::Key,
    flow_tag: u32,
) {
    let st = core
        .eswitch
        .steer_rx(vport, start, key, frame.len(), flow_tag, ctx.now());
    let (rqn, hash) = match st.fate {
        Fate::DecapGoto(t) => {
            return match packet::vxlan(frame, p) {
                Some((_, inner)) => {
                    let f = &frame[inner..];
                    let ip = packet::parse(f);
                    let k = frame_key(f, &ip, vport, 0);
                    steer_into_vport(core, ctx, vport, Some(t), f, &ip, &k, st.flow_tag)
                }
                None => count_drop(core, vport, true),
            };
        }
        Fate::Rq(r) => (r, 0),
        Fate::Rss(g) => {
            let Some(group) = core
                .eswitch
                .rss_groups
                .get(g as usize)
                .and_then(|g| g.as_ref())
            else {
                return count_drop(core, vport, true);
            };
            let (input, n) = rss::hash_input(p, group.hash_fields);
            let hash = if n == 0 {
                0
            } else {
                group.toeplitz.hash(&input[..n])
            };
            (group.rq_for(hash), hash)
        }
        Fate::Drop => return count_drop(core, vport, true),
        Fate::NoSteering | Fate::Vport(_) | Fate::Flood | Fate::EncapVport { .. } => {
            return count_drop(core, vport, false)
        }
    };
    let csum = checksum_flags(frame, p);
    let cqe = Cqe {
        flow_tag: U32::new(st.flow_tag),
        rss_hash: U32::new(hash),
        csum,
        qn: U32::new(rqn),
        vport: U16::new(vport),
        ..Default::default()
    };
    let delivered = receive(core, ctx, rqn, frame, cqe);
    if let Some(v) = core.eswitch.vport_mut(vport) {
        if delivered {
            v.counters.rx_packets += 1;
            v.counters.rx_bytes += frame.len() as u64;
        } else {
            v.counters.rx_out_of_buffer += 1;
        }
    }
}

fn count_drop(core: &mut NicCore, vport: u16, by_rule: bool) {
    if let Some(v) = core.eswitch.vport_mut(vport) {
        if by_rule {
            v.counters.rx_steering_drops += 1;
        } else {
            v.counters.rx_no_steering += 1;
        }
    }
}

/// The CQE's parse and checksum-validation bits (L3/L4 receive checksum offload).
fn checksum_flags(frame: &[u8], p: &ParsedFrame) -> u8 {
    use cqe_csum::*;
    let mut f = 0;
    match p.l3 {
        L3Kind::Ipv4 => f |= L3_PRESENT,
        L3Kind::Ipv6 => f |= L3_PRESENT | IPV6,
        L3Kind::None => return 0,
    }
    if p.ipv4_fragment {
        f |= IP_FRAGMENT;
    }
    match p.l4 {
        L4Kind::Tcp => f |= L4_PRESENT | TCP,
        L4Kind::Udp => f |= L4_PRESENT | UDP,
        _ => {}
    }
    let st = packet::verify_checksums(frame, p);
    // IPv6 has no header checksum: a well-formed header counts as valid.
    if st.l3_ok == Some(true) || (p.l3 == L3Kind::Ipv6 && !p.malformed) {
        f |= L3_OK;
    }
    if st.l4_ok == Some(true) {
        f |= L4_OK;
    }
    f
}

// ---------------------------------------------------------------------------------------------
// Receive
// ---------------------------------------------------------------------------------------------

/// Places a frame into RQ `rqn` and writes its CQE. False when it was dropped.
fn receive(core: &mut NicCore, ctx: &mut Ctx<'_>, rqn: u32, frame: &[u8], mut cqe: Cqe) -> bool {
    let Some(rq) = core.rqs.get(rqn) else {
        return false;
    };
    if rq.state != QueueState::Ready {
        return false;
    }
    let (owner, cqn, kind) = (rq.owner, rq.cqn, rq.kind);
    let Some(port) = ctx.ports.get(owner as usize) else {
        return false;
    };
    let pi = port.doorbells.load(db::RQ_BASE + 4 * rqn as u64) & 0xffff;
    let len = frame.len();
    cqe.byte_count = U32::new(len as u32);
    match kind {
        RqKind::Regular => {
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
            post_cqe(core, ctx, cqn, cqe, CQE_RESP_SEND)
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
                post_cqe(core, ctx, cqn, filler, CQE_RESP_SEND);
            }
            if cq_lacks_room(core, ctx, cqn, 1) {
                return out_of_buffer(core, rqn);
            }
            let o = match open {
                Some(o) => o,
                None => {
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
            post_cqe(core, ctx, cqn, cqe, CQE_RESP_SEND)
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
        .is_some_and(|rq| pi.wrapping_sub(rq.ci) & 0xffff != 0)
}

/// Reads the RQ's next WQE; a DMA failure, a doorbell overflow or a bad memory key puts the RQ in
/// error and returns None.
fn fetch_recv_wqe(core: &mut NicCore, ctx: &mut Ctx<'_>, rqn: u32, pi: u32) -> Option<RecvWqe> {
    let rq = core.rqs.get(rqn)?;
    if pi.wrapping_sub(rq.ci) & 0xffff > 1 << rq.log_size {
        core.bad_doorbells += 1;
        rq_error(core, ctx, rqn, syndrome::DOORBELL_OVERFLOW);
        return None;
    }
    let slot = rq.addr + ((rq.ci & ((1 << rq.log_size) - 1)) as u64) * RECV_WQE_SIZE as u64;
    let mut b = [0u8; RECV_WQE_SIZE];
    if ctx.dma(rq.owner).read(slot, &mut b).is_err() {
        rq_error(core, ctx, rqn, syndrome::DMA_ERROR);
        return None;
    }
    let wqe = RecvWqe::read_from_bytes(&b).ok()?;
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
    let (cqn, owner, ci) = (rq.cqn, rq.owner, rq.ci);
    log::debug!("RQ {rqn}: error syndrome {syn:#x} at WQE {ci}");
    let cqe = Cqe {
        wqe_counter: U16::new(ci as u16),
        qn: U32::new(rqn),
        syndrome: syn,
        vport: U16::new(owner),
        ..Default::default()
    };
    post_cqe(core, ctx, cqn, cqe, CQE_RESP_ERR);
    if let Some(eqn) = core.cqs.get(cqn).map(|c| c.eqn) {
        post_event(core, ctx, eqn, owner, EQE_QUEUE_ERROR, 2, rqn);
    }
}

// ---------------------------------------------------------------------------------------------
// Uplink
// ---------------------------------------------------------------------------------------------

fn wire_receive(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    let mut buf = std::mem::take(&mut core.wire_frame);
    let mut n = 0;
    while n < WIRE_BUDGET {
        let Some(len) = core.wire.receive(&mut buf) else {
            break;
        };
        n += 1;
        let frame = &buf[..len.min(buf.len())];
        if frame.len() < 14 || frame.len() > core.config.mtu as usize {
            core.eswitch.uplink.counters.tx_malformed += 1;
            continue;
        }
        let p = packet::parse(frame);
        switch_frame(core, ctx, VPORT_UPLINK, frame, &p, None);
    }
    core.wire_frame = buf;
    n
}
