//! The eSwitch block (paper §2.3): a frame from a host vPort (after transmit) or from the uplink
//! walks the FDB pipeline to its destinations; a frame reaching a host vPort walks that vPort's
//! receive pipeline to an RQ or an RSS group, where the receive checksum offload marks its CQE.
//! VXLAN decapsulation continues steering with the inner frame at the rule's table; VXLAN
//! encapsulation prepends the outer headers before delivery. Drops are counted per vPort.

use zerocopy::little_endian::{U16, U32};

use super::receive::receive;
use super::{Ctx, NicCore};
use crate::nic::eswitch::{frame_key, Fate, Key, KeySource, Steering};
use crate::nic::packet::{self, L3Kind, L4Kind, ParsedFrame};
use crate::wire::TapPoint;
use fld_abi::nic::*;

/// Frames taken from the uplink wire per poll.
const WIRE_BUDGET: usize = 256;

/// A frame inside the eSwitch: its bytes, the parser's view of them (where the stage that
/// parsed it keeps it), the vPort it is steered for, and its match key once a table has needed
/// it.
pub(super) struct Frame<'a> {
    pub bytes: &'a [u8],
    pub parsed: &'a ParsedFrame,
    vport: u16,
    key: std::cell::OnceCell<Key>,
}

impl KeySource for Frame<'_> {
    fn key(&self) -> &Key {
        self.key
            .get_or_init(|| frame_key(self.bytes, self.parsed, self.vport, 0))
    }
}

impl<'a> Frame<'a> {
    pub fn new(bytes: &'a [u8], parsed: &'a ParsedFrame, vport: u16) -> Self {
        Frame {
            bytes,
            parsed,
            vport,
            key: std::cell::OnceCell::new(),
        }
    }

    /// The frame inside a VXLAN encapsulation (RFC 7348 §5) and its parse, for a [`Frame`] of
    /// its own; `None` when this is not a VXLAN frame.
    fn decapsulate(&self) -> Option<(&'a [u8], ParsedFrame)> {
        let (_, inner) = packet::vxlan(self.bytes, self.parsed)?;
        let bytes = &self.bytes[inner..];
        Some((bytes, packet::parse(bytes)))
    }
}

/// A frame an SQ sent enters the eSwitch: by the direct route where it may take it, else as
/// [`switch_frame`]. (The RoCE transport's frames and the uplink's take the walks.)
#[inline]
pub(super) fn switch_sent_frame(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    src_vport: u16,
    frame: Frame<'_>,
    resume: Option<(u32, u8)>,
) {
    if resume.is_none()
        && core.tap.is_none()
        && direct_routes_allowed()
        && switch_direct(core, ctx, src_vport, &frame)
    {
        return;
    }
    switch_frame(core, ctx, src_vport, frame, resume);
}

/// A frame enters the eSwitch from `src_vport` and leaves towards its destinations.
/// `resume` names the table (and its kind) a returned frame re-enters steering at.
pub(super) fn switch_frame(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    src_vport: u16,
    frame: Frame<'_>,
    resume: Option<(u32, u8)>,
) {
    if let Some(tap) = core.tap.as_mut() {
        tap.frame(ctx.now(), src_vport, TapPoint::FromVport, frame.bytes);
    }
    if let Some(v) = core.eswitch.vport_mut(src_vport) {
        v.counters.tx_packets += 1;
        v.counters.tx_bytes += frame.bytes.len() as u64;
    }
    // A frame returned into a receive table goes straight to the sender's own receive pipeline.
    if let Some((t, TABLE_KIND_NIC_RX)) = resume {
        return deliver_to_vport(core, ctx, src_vport, Some(t), &frame, 0);
    }
    let now = ctx.now();
    let st = core.eswitch.steer_fdb(
        resume.map(|r| r.0),
        &frame,
        &frame.parsed.dst_mac,
        src_vport,
        frame.bytes.len(),
        now,
    );
    forward(core, ctx, src_vport, &frame, st);
}

/// Carries out an FDB decision. A VXLAN decapsulation continues at its table with the inner
/// frame (go-to targets sit at higher levels, so this ends).
fn forward(core: &mut NicCore, ctx: &mut Ctx<'_>, src_vport: u16, frame: &Frame<'_>, st: Steering) {
    match st.fate {
        Fate::DecapGoto(t) => match frame.decapsulate() {
            Some((bytes, parsed)) => {
                let inner = Frame::new(bytes, &parsed, src_vport);
                let next = core.eswitch.steer_fdb(
                    Some(t),
                    &inner,
                    &inner.parsed.dst_mac,
                    src_vport,
                    inner.bytes.len(),
                    ctx.now(),
                );
                forward(core, ctx, src_vport, &inner, next);
            }
            None => count_drop(core, src_vport, true),
        },
        Fate::Vport(v) => deliver_to_vport(core, ctx, v, None, frame, st.flow_tag),
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
            e.encapsulate(frame.bytes, inner_flow_hash(frame.parsed), &mut out);
            e.packets += 1;
            if out.len() > core.config.mtu as usize {
                // The tunnel would need fragmenting, which VXLAN forbids (RFC 7348 §4.3).
                core.encap_frame = out;
                return count_drop(core, src_vport, true);
            }
            let parsed = packet::parse(&out);
            let outer = Frame::new(&out, &parsed, src_vport);
            deliver_to_vport(core, ctx, vport, None, &outer, st.flow_tag);
            core.encap_frame = out;
        }
        Fate::Flood => {
            let n = core.eswitch.vports.len() as u16;
            for v in (0..n).chain([VPORT_UPLINK]) {
                if v != src_vport {
                    deliver_to_vport(core, ctx, v, None, frame, st.flow_tag);
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

#[cfg(test)]
thread_local! {
    /// Tests turn the direct route off to hold it to the walks it stands for.
    pub(in crate::nic) static WALK_ALWAYS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[inline(always)]
fn direct_routes_allowed() -> bool {
    #[cfg(test)]
    return !WALK_ALWAYS.get();
    #[cfg(not(test))]
    true
}

/// The common case in one step: a frame, not to the RoCEv2 port, from a host vPort to another
/// by the default L2 forwarding (no FDB root) with no flow cache in use, whose destination's
/// receive root begins with a catch-all entry that only counts, tags and forwards to an RQ or
/// an RSS group.
/// Its counters, flow tag, CQE and delivery are those of the walks it stands for; the walks
/// themselves are not taken. False, with nothing done, for any other frame.
#[inline]
fn switch_direct(core: &mut NicCore, ctx: &mut Ctx<'_>, src_vport: u16, frame: &Frame<'_>) -> bool {
    // A frame to the RoCEv2 port may be the transport's to claim: it takes the walks.
    let p = frame.parsed;
    if p.l4 == L4Kind::Udp && p.dst_port == fld_abi::wire::roce::ROCE_V2_PORT {
        return false;
    }
    let Some((vport, st)) = core
        .eswitch
        .direct_route(src_vport, &p.dst_mac, frame.bytes.len())
    else {
        return false;
    };
    core.loopback_frames += 1;
    deliver_to_queue(core, ctx, vport, frame, st);
    true
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

/// Out the uplink wire, or into a host vPort's receive pipeline.
#[inline]
fn deliver_to_vport(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    start: Option<u32>,
    frame: &Frame<'_>,
    flow_tag: u32,
) {
    if let Some(tap) = core.tap.as_mut() {
        tap.frame(ctx.now(), vport, TapPoint::ToVport, frame.bytes);
    }
    if vport == VPORT_UPLINK {
        core.wire.transmit(frame.bytes);
        core.wire_tx_frames += 1;
        let c = &mut core.eswitch.uplink.counters;
        c.rx_packets += 1;
        c.rx_bytes += frame.bytes.len() as u64;
        return;
    }
    if frame.vport != VPORT_UPLINK {
        core.loopback_frames += 1;
    }
    steer_into_vport(core, ctx, vport, start, frame, flow_tag);
}

/// A vPort's receive pipeline, from its root or `start`, into an RQ.
fn steer_into_vport(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    start: Option<u32>,
    frame: &Frame<'_>,
    flow_tag: u32,
) {
    if super::roce::claims(core, vport, frame.bytes, frame.parsed) {
        return super::roce::receive(core, ctx, vport, frame.bytes, frame.parsed);
    }
    let st = core
        .eswitch
        .steer_rx(vport, start, frame, frame.bytes.len(), flow_tag, ctx.now());
    if let Fate::DecapGoto(t) = st.fate {
        return match frame.decapsulate() {
            Some((bytes, parsed)) => {
                let inner = Frame::new(bytes, &parsed, vport);
                steer_into_vport(core, ctx, vport, Some(t), &inner, st.flow_tag)
            }
            None => count_drop(core, vport, true),
        };
    }
    deliver_to_queue(core, ctx, vport, frame, st);
}

/// The end of a vPort's receive pipeline: an RQ, or the RQ an RSS group's hash picks, gets the
/// frame and its CQE; any other fate is a counted drop.
#[inline]
fn deliver_to_queue(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    frame: &Frame<'_>,
    st: Steering,
) {
    let (rqn, hash) = match st.fate {
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
            let (input, n) = crate::nic::rss::hash_input(frame.parsed, group.hash_fields);
            let hash = if n == 0 {
                0
            } else {
                group.toeplitz.hash(&input[..n])
            };
            (group.rq_for(hash), hash)
        }
        Fate::Drop | Fate::DecapGoto(_) => return count_drop(core, vport, true),
        Fate::NoSteering | Fate::Vport(_) | Fate::Flood | Fate::EncapVport { .. } => {
            return count_drop(core, vport, false)
        }
    };
    let cqe = Cqe {
        flow_tag: U32::new(st.flow_tag),
        rss_hash: U32::new(hash),
        csum: checksum_flags(frame.bytes, frame.parsed),
        qn: U32::new(rqn),
        vport: U16::new(vport),
        ..Default::default()
    };
    let delivered = receive(core, ctx, rqn, frame.bytes, cqe, CQE_RESP_SEND);
    if let Some(v) = core.eswitch.vport_mut(vport) {
        if delivered {
            v.counters.rx_packets += 1;
            v.counters.rx_bytes += frame.bytes.len() as u64;
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

/// Frames arriving on the uplink wire enter the eSwitch from the uplink vPort.
pub(super) fn uplink_receive(core: &mut NicCore, ctx: &mut Ctx<'_>) -> usize {
    let mut buf = std::mem::take(&mut core.wire_frame);
    let mut n = 0;
    while n < WIRE_BUDGET {
        let Some(len) = core.wire.receive(&mut buf) else {
            break;
        };
        n += 1;
        let bytes = &buf[..len.min(buf.len())];
        if bytes.len() < 14 || bytes.len() > core.config.mtu as usize {
            core.eswitch.uplink.counters.tx_malformed += 1;
            continue;
        }
        let parsed = packet::parse(bytes);
        let frame = Frame::new(bytes, &parsed, VPORT_UPLINK);
        switch_frame(core, ctx, VPORT_UPLINK, frame, None);
    }
    core.wire_frame = buf;
    n
}
