//! StaR's stateless server (`docs/nic-interface.md` §16; Pan et al., "Towards Stateless RNIC
//! for Data Center Networks", APNet '19, §3.1, Figure 3): a function that serves StaR keeps no
//! per-connection state on the NIC. Each request carries what answering it takes, and the NIC
//! answers from the packet alone:
//!
//! * an RDP's data is written at the bus address its header names, and an RA goes back;
//! * a GD's bytes are read from the address it names and sent back as an SDP;
//! * a CQEP's CQE is written into the function's CQ it names, and an EA goes back;
//! * an EA (for a WQEP the server's driver sent) is handed to the driver through the function's
//!   control CQ as a [`CQE_STAR_EA`].
//!
//! Every answer echoes the request's PSN, goes to the request's `reply_qpn` and travels along the
//! request's own addresses swapped (MACs, IPs; the UDP source port kept for the flow's path), so
//! nothing is looked up. Which addresses a client may name is not checked here — the stateless
//! side has no state to check against: the client's NIC's egress security module (§16.5) stops
//! what its connection does not allow, and the data center's switches stop source spoofing.
//!
//! What the server NIC does keep is function-wide: whether it serves StaR at all (off by
//! default, so StaR packets to a function that never asked are refused and counted) and the
//! control CQ. The function's P_Key table still applies: a request's P_Key must match one of
//! its entries (a stateless server has no QP whose P_Key index would pick one).
//!
//! A StaR packet whose destination QP is one of the function's StaR client QPs goes to the
//! client engine (`star_client`) instead, after the same checks a connected QP makes: it must
//! come from the QP's peer address, and the QP must be in RTR or RTS.
//!
//! Left out: memory-table updates as control packets (a client holds the server's regions
//! through its own command interface).

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, FromZeros};

use super::super::completions::post_cqe;
use super::super::switching::{switch_frame, Frame};
use super::{Ctx, NicCore};
use crate::nic::packet::{self, L3Kind, ParsedFrame};
use fld_abi::nic::*;
use fld_abi::wire::roce::star::{StarHeaders, StarKind, StarPacket};
use fld_abi::wire::roce::{self, ipv4_gid, RoceAddress};
use fld_abi::wire::udp;

/// A StaR packet (BTH opcode in StaR's range) that the eSwitch delivered to `vport`'s
/// transport.
pub(super) fn receive(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    bytes: &[u8],
    p: &ParsedFrame,
) {
    let f = usize::from(vport);
    let Some(counters) = core.rdma.counters.get_mut(f) else {
        return;
    };
    let ip = usize::from(p.l3_offset);
    let ip_end = ip + usize::from(p.ip_len);
    let ipv6 = p.l3 == L3Kind::Ipv6;
    let ib_at = usize::from(p.l4_offset) + udp::HEADER_LEN;
    let Some(pkt) = bytes
        .get(ib_at..ip_end)
        .and_then(|b| StarPacket::parse(b).ok())
    else {
        counters.rx_malformed += 1;
        return;
    };
    if roce::icrc(bytes, ip, ip_end, ipv6) != Some(pkt.icrc) {
        counters.rx_icrc_errors += 1;
        return;
    }
    let pkey = pkt.headers.bth.pkey;
    let in_partition = core
        .rdma
        .pkeys
        .get(f)
        .is_some_and(|t| t.iter().any(|e| pkey_matches(pkey, *e)));
    if !in_partition {
        counters.rx_bad_pkey += 1;
        return;
    }
    // A packet to one of the function's StaR client QPs, from that QP's server, is the client
    // engine's (§16.6). The server side below has no QP.
    let client = super::Rdma::qp_index(pkt.headers.bth.dest_qp).filter(|i| {
        core.rdma
            .qps
            .get(*i)
            .is_some_and(|q| q.owner == vport && q.star.is_some())
    });
    if let Some(qpi) = client {
        let marked = ip_class(p, bytes) & 3 == 3;
        let qp = core.rdma.qps.get_mut(qpi).expect("checked above");
        if !from_peer(p, &qp.attr.dgid) {
            count(core, vport, |c| c.rx_wrong_source += 1);
            return;
        }
        if !matches!(qp.state, QpState::Rtr | QpState::Rts) {
            count(core, vport, |c| c.rx_qp_not_ready += 1);
            return;
        }
        qp.counters.packets_received += 1;
        qp.counters.bytes_received += pkt.payload.len() as u64;
        super::star_client::receive(core, ctx, qpi, marked, &pkt);
        return;
    }
    let server = core.rdma.star.get(f).copied().unwrap_or_default();
    match pkt.kind {
        StarKind::Rdp | StarKind::Gd | StarKind::Cqep if !server.serving => {
            counters.star_refused += 1;
        }
        StarKind::Rdp => receive_data(core, ctx, vport, (p, bytes), &pkt),
        StarKind::Gd => get_data(core, ctx, vport, (p, bytes), &pkt),
        StarKind::Cqep => completion(core, ctx, vport, (p, bytes), &pkt),
        StarKind::Ea => element_ack(core, ctx, vport, server.control_cqn, &pkt),
        // The client side's packets: no StaR client QP here.
        StarKind::Wqep | StarKind::Ra | StarKind::Sdp => counters.rx_unknown_qp += 1,
    }
}

/// RDP: the data goes where the header says; an RA answers.
fn receive_data(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    request: (&ParsedFrame, &[u8]),
    pkt: &StarPacket<'_>,
) {
    let Some(d) = pkt.headers.data else {
        return;
    };
    if ctx.dma(vport).write(d.dma_addr, pkt.payload).is_err() {
        count(core, vport, |c| c.star_dma_errors += 1);
        return;
    }
    count(core, vport, |c| c.star_served += 1);
    let h = answer(StarKind::Ra, pkt, d.reply_qpn);
    reply(core, ctx, vport, request, &h, 0, |_, _| true);
}

/// GD: the bytes it asks for go back in an SDP, read by DMA straight into the frame.
fn get_data(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    request: (&ParsedFrame, &[u8]),
    pkt: &StarPacket<'_>,
) {
    let Some(d) = pkt.headers.data else {
        return;
    };
    let h = answer(StarKind::Sdp, pkt, d.reply_qpn);
    let sent = reply(
        core,
        ctx,
        vport,
        request,
        &h,
        d.length as usize,
        |ctx, out| ctx.dma(vport).read(d.dma_addr, out).is_ok(),
    );
    count(core, vport, |c| {
        if sent {
            c.star_served += 1;
        } else {
            c.star_dma_errors += 1;
        }
    });
}

/// CQEP: the CQE goes into the function's CQ it names (never another function's); an EA
/// answers once it is written. A full CQ drops the CQEP unanswered, so the client sends it again.
fn completion(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    request: (&ParsedFrame, &[u8]),
    pkt: &StarPacket<'_>,
) {
    let (Some(cq), Ok(cqe)) = (pkt.headers.cq, Cqe::read_from_bytes(pkt.payload)) else {
        return;
    };
    let ours = core.cqs.get(cq.cqn).is_some_and(|c| c.owner == vport);
    let mut cqe = cqe;
    cqe.vport = U16::new(vport);
    if !ours || !post_cqe(core, ctx, cq.cqn, cqe, cqe.opcode()) {
        count(core, vport, |c| c.star_refused += 1);
        return;
    }
    count(core, vport, |c| c.star_served += 1);
    let h = answer(StarKind::Ea, pkt, cq.reply_qpn);
    reply(core, ctx, vport, request, &h, 0, |_, _| true);
}

/// EA for a WQEP of this function's driver: to the control CQ, for the driver to read.
fn element_ack(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    control_cqn: Option<u32>,
    pkt: &StarPacket<'_>,
) {
    let bth = pkt.headers.bth;
    let cqe = Cqe {
        byte_count: U32::new(bth.psn),
        qn: U32::new(bth.dest_qp),
        vport: U16::new(vport),
        ..Cqe::new_zeroed()
    };
    let delivered = control_cqn.is_some_and(|cqn| post_cqe(core, ctx, cqn, cqe, CQE_STAR_EA));
    count(core, vport, |c| {
        if delivered {
            c.star_served += 1;
        } else {
            c.star_refused += 1;
        }
    });
}

fn count(core: &mut NicCore, vport: u16, f: impl FnOnce(&mut crate::nic::rdma::RoceCounters)) {
    if let Some(c) = counters_of(core, vport) {
        f(c);
    }
}

fn counters_of(core: &mut NicCore, vport: u16) -> Option<&mut crate::nic::rdma::RoceCounters> {
    core.rdma.counters.get_mut(usize::from(vport))
}

/// Whether the frame comes from the address a connected QP's peer has (its GID `dgid`).
fn from_peer(p: &ParsedFrame, dgid: &[u8; 16]) -> bool {
    if p.l3 == L3Kind::Ipv6 {
        p.src_ip == *dgid
    } else {
        roce::gid_is_ipv4(dgid) && p.src_ip[..4] == dgid[12..]
    }
}

/// The IPv4 TOS or IPv6 traffic class byte of a frame (its low two bits the ECN field).
fn ip_class(p: &ParsedFrame, bytes: &[u8]) -> u8 {
    let ip = usize::from(p.l3_offset);
    let b = |i: usize| bytes.get(ip + i).copied().unwrap_or(0);
    if p.l3 == L3Kind::Ipv6 {
        (b(0) << 4) | (b(1) >> 4)
    } else {
        b(1)
    }
}

/// The headers of the answer of `kind` to `request`: its PSN, to `reply_qpn`, in its partition.
fn answer(kind: StarKind, request: &StarPacket<'_>, reply_qpn: u32) -> StarHeaders {
    let b = request.headers.bth;
    StarHeaders::new(kind, reply_qpn, b.psn, b.pkey)
}

/// The answer's headers, with BECN set when its request arrived marked Congestion Experienced:
/// the client's window is what slows the requests down, and it learns of the mark only this way.
fn echo_congestion(mut h: StarHeaders, (p, request): (&ParsedFrame, &[u8])) -> StarHeaders {
    h.bth.becn = ip_class(p, request) & 3 == 3;
    h
}

/// The addresses of an answer to the frame `p` describes: its own, swapped. The UDP source port
/// is kept (the flow's entropy, so the answer takes the request's path back through ECMP), and
/// an ECN-capable request gets an ECN-capable answer (ECT(0), not the request's marks).
fn reply_address(p: &ParsedFrame, bytes: &[u8]) -> RoceAddress {
    let ipv6 = p.l3 == L3Kind::Ipv6;
    let gid = |ip: &[u8; 16]| {
        if ipv6 {
            *ip
        } else {
            ipv4_gid([ip[0], ip[1], ip[2], ip[3]])
        }
    };
    let class = ip_class(p, bytes);
    let ecn = if class & 3 != 0 { 0b10 } else { 0 };
    RoceAddress {
        src_mac: p.dst_mac,
        dst_mac: p.src_mac,
        src_gid: gid(&p.dst_ip),
        dst_gid: gid(&p.src_ip),
        src_port: p.src_port,
        traffic_class: (class & !3) | ecn,
        hop_limit: 64,
        flow_label: 0,
    }
}

/// Builds an answer of `payload_len` bytes (`fill` writes them in place; false abandons the
/// answer) to the request frame, and sends it into the eSwitch from `vport`. NIC-built answers
/// are not host traffic: the egress security module does not see them. Whether it was sent.
fn reply(
    core: &mut NicCore,
    ctx: &mut Ctx<'_>,
    vport: u16,
    (p, request): (&ParsedFrame, &[u8]),
    headers: &StarHeaders,
    payload_len: usize,
    fill: impl FnOnce(&mut Ctx<'_>, &mut [u8]) -> bool,
) -> bool {
    let addr = reply_address(p, request);
    let headers = &echo_congestion(*headers, (p, request));
    // Its own buffer: the request may have come from a client QP of this NIC, whose frame is
    // being sent while this answer is built.
    let mut frame = std::mem::take(&mut core.rdma.reply_frame);
    let ident = core.rdma.ip_ident;
    core.rdma.ip_ident = ident.wrapping_add(1);
    let len = addr.emit_with(headers, payload_len, ident, &mut frame, |out| {
        fill(ctx, out).then_some(())
    });
    let Some(len) = len else {
        core.rdma.reply_frame = frame;
        return false;
    };
    count(core, vport, |c| c.tx_packets += 1);
    let bytes = &frame[..len];
    let parsed = packet::parsed_roce(&addr, bytes);
    switch_frame(core, ctx, vport, Frame::new(bytes, &parsed, vport), None);
    core.rdma.reply_frame = frame;
    true
}
