//! The NIC's hardware header parser, used by the eSwitch matcher, the checksum offloads and RSS.
//! It reads Ethernet II with at most one 802.1Q tag, IPv4 (RFC 791), IPv6 (RFC 8200), TCP
//! (RFC 793) and UDP (RFC 768) through the typed views of [`fld_abi::wire`], and validates or
//! inserts the Internet checksum (RFC 1071) the way the offloads do.
//!
//! Deliberately left out:
//! - IPv6 extension headers: any next header other than TCP (6) / UDP (17) is
//!   L4 [`L4Kind::Other`], nothing behind it is parsed.
//! - IPv4 options: skipped via IHL, never interpreted.
//! - Stacked VLAN tags (QinQ): only the outer tag is consumed.
//! - IPv6 jumbograms (RFC 2675).
//!
//! Inconsistent headers are not skipped but reported: [`ParsedFrame::hdr_err`] names each
//! reason (`fld_abi::nic::hdr_err`), and every field whose position is still known is filled, so
//! a steering rule on a port cannot be walked around by a lying length field.
//!
//! Every function here is total (never panics, for any input, including a `ParsedFrame` that
//! does not belong to the frame) and allocation-free.

use fld_abi::nic::hdr_err;
use fld_abi::wire::checksum::{pseudo_header_v4, pseudo_header_v6};
use fld_abi::wire::{
    ethernet, ethertype, internet_checksum, ip_proto, ipv6, udp, EthernetFrame, Ipv4Packet,
    Ipv6Packet, TcpPacket, UdpPacket, VlanTag, VxlanHeader, VxlanRepr,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum L3Kind {
    #[default]
    None,
    Ipv4,
    Ipv6,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum L4Kind {
    #[default]
    None,
    Tcp,
    Udp,
    Other,
}

/// What the parser extracted from one frame. Addresses of IPv4 are stored in
/// the first 4 bytes of `src_ip`/`dst_ip`, rest zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParsedFrame {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub vlan_tci: Option<u16>,
    /// Inner ethertype after at most one 802.1Q tag.
    pub ethertype: u16,
    pub l3: L3Kind,
    pub l3_offset: u16,
    pub l3_header_len: u16,
    /// IPv4 protocol / IPv6 next header (0 when no L3).
    pub ip_proto: u8,
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    /// IPv4 MF set or fragment offset != 0 (RFC 791 §3.1). L4 is then not
    /// parsed: `l4 = None`, ports 0.
    pub ipv4_fragment: bool,
    /// Set (with `l4_offset` and the ports) when at least the ports of a TCP or UDP header lie
    /// in the frame; `malformed` says whether the rest of it is sane.
    pub l4: L4Kind,
    pub l4_offset: u16,
    pub src_port: u16,
    pub dst_port: u16,
    /// L3 length as the IP header claims (IPv4 total length / IPv6 40 +
    /// payload length), not clipped. If it claims more than the frame holds
    /// the frame is truncated: `malformed = true`, and L4 is parsed only as far
    /// as the frame goes. Saturates at `u16::MAX` (then also malformed).
    pub ip_len: u16,
    /// Set when any header is inconsistent: `hdr_err` names the reasons (empty for an Ethernet
    /// header or VLAN tag cut short). L2–L4 fields whose position is known are still filled.
    pub malformed: bool,
    /// [`hdr_err`] bits: why the IP or L4 headers are inconsistent (the match key's field).
    pub hdr_err: u8,
    /// The NIC's transmit path wrote this frame's IPv4 header checksum (`l3`) or TCP/UDP
    /// checksum (`l4`) itself. Receive validation of the same, unmodified frame inside the
    /// eSwitch then knows the outcome without summing the bytes again; any rewrite (VXLAN
    /// encapsulation or decapsulation) parses a new frame with both false. Never set by
    /// [`parse`].
    pub inserted_l3_checksum: bool,
    pub inserted_l4_checksum: bool,
}

impl ParsedFrame {
    /// Records a header error.
    fn fail(&mut self, reason: u8) {
        self.malformed = true;
        self.hdr_err |= reason;
    }

    /// IPv4 source and destination (the first 4 bytes of the address fields).
    fn ipv4_addrs(&self) -> ([u8; 4], [u8; 4]) {
        let a = |x: &[u8; 16]| [x[0], x[1], x[2], x[3]];
        (a(&self.src_ip), a(&self.dst_ip))
    }
}

/// For a RoCEv2 frame (UDP to port 4791, A17.2) with room for a base transport header: the
/// BTH's destination QP.
pub fn roce_dest_qp(frame: &[u8], p: &ParsedFrame) -> Option<u32> {
    use fld_abi::wire::roce;
    if p.malformed || p.l4 != L4Kind::Udp || p.dst_port != roce::ROCE_V2_PORT {
        return None;
    }
    let at = usize::from(p.l4_offset) + udp::HEADER_LEN;
    let bth = frame.get(at..at + roce::BTH_LEN)?;
    Some(u32::from_be_bytes([0, bth[5], bth[6], bth[7]]))
}

/// For a VXLAN frame (UDP to port 4789, 8-byte VXLAN header with the I flag, RFC 7348 §5): the
/// VNI and the offset of the inner Ethernet frame.
pub fn vxlan(frame: &[u8], p: &ParsedFrame) -> Option<(u32, usize)> {
    if p.malformed || p.l4 != L4Kind::Udp || p.dst_port != fld_abi::wire::vxlan::UDP_PORT {
        return None;
    }
    let at = usize::from(p.l4_offset) + udp::HEADER_LEN;
    let h = VxlanHeader::new_checked(frame.get(at..)?).ok()?;
    let vni = VxlanRepr::parse(&h)?.vni;
    let inner = at + fld_abi::wire::vxlan::HEADER_LEN;
    // The inner frame must hold an Ethernet header within the outer datagram.
    (usize::from(p.l3_offset) + usize::from(p.ip_len) >= inner + ethernet::HEADER_LEN)
        .then_some((vni, inner))
}

/// Parses one frame (Ethernet II, optional single 802.1Q tag, IPv4/IPv6,
/// TCP/UDP). Never panics; anything inconsistent sets `malformed`.
pub fn parse(frame: &[u8]) -> ParsedFrame {
    let mut p = ParsedFrame::default();
    parse_into(frame, &mut p);
    p
}

/// [`parse`] into `p` where it lies (a burst slot's), rather than a copy of the result.
#[inline]
pub fn parse_into(frame: &[u8], p: &mut ParsedFrame) {
    if !parse_plain_ipv4(frame, p) {
        parse_general(frame, p);
    }
}

/// The parser's fixed path, as a NIC's parse graph has one for the headers nearly every frame
/// carries: an untagged Ethernet II frame with an option-less IPv4 header (not a fragment, its
/// total length within the frame) carrying a whole UDP header whose length agrees with the
/// datagram, or a TCP header whose data offset fits it. Such a frame is read at fixed offsets
/// with one bounds check; its parse is exactly [`parse_general`]'s (a test holds the two to
/// the same result on every frame). False, with `p` untouched, for any other frame.
///
/// The fields are read as bytes at their offsets rather than through the `fld_abi::wire`
/// views the general parser uses: through the views (over fixed-size arrays too) the 64 B CPU
/// echo cost 89 instructions more per echoed packet.
#[inline]
fn parse_plain_ipv4(frame: &[u8], p: &mut ParsedFrame) -> bool {
    const IP: usize = ethernet::HEADER_LEN;
    const L4: usize = IP + fld_abi::wire::ipv4::HEADER_LEN;
    let Some(h) = frame.first_chunk::<L4>() else {
        return false;
    };
    let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
    // Version 4 with a 20-byte header; no more fragments, offset 0 (RFC 791 §3.1).
    if be16(12) != ethertype::IPV4 || h[IP] != 0x45 || be16(IP + 6) & 0x3fff != 0 {
        return false;
    }
    let ip_len = be16(IP + 2);
    let end = IP + usize::from(ip_len);
    let Some(seg) = frame.get(L4..end) else {
        return false;
    };
    let proto = h[IP + 9];
    let l4 = match proto {
        ip_proto::UDP if seg.len() >= udp::HEADER_LEN => {
            let len = usize::from(u16::from_be_bytes([seg[4], seg[5]]));
            if !(udp::HEADER_LEN..=seg.len()).contains(&len) {
                return false;
            }
            L4Kind::Udp
        }
        ip_proto::TCP if seg.len() >= fld_abi::wire::tcp::HEADER_LEN => {
            let header = usize::from(seg[12] >> 4) * 4;
            if !(fld_abi::wire::tcp::HEADER_LEN..=seg.len()).contains(&header) {
                return false;
            }
            L4Kind::Tcp
        }
        _ => return false,
    };
    let addr = |at: usize| {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&h[at..at + 4]);
        a
    };
    *p = ParsedFrame {
        dst_mac: [h[0], h[1], h[2], h[3], h[4], h[5]],
        src_mac: [h[6], h[7], h[8], h[9], h[10], h[11]],
        vlan_tci: None,
        ethertype: ethertype::IPV4,
        l3: L3Kind::Ipv4,
        l3_offset: IP as u16,
        l3_header_len: (L4 - IP) as u16,
        ip_proto: proto,
        src_ip: addr(IP + 12),
        dst_ip: addr(IP + 16),
        ipv4_fragment: false,
        l4,
        l4_offset: L4 as u16,
        src_port: u16::from_be_bytes([seg[0], seg[1]]),
        dst_port: u16::from_be_bytes([seg[2], seg[3]]),
        ip_len,
        malformed: false,
        hdr_err: 0,
        inserted_l3_checksum: false,
        inserted_l4_checksum: false,
    };
    true
}

/// [`parse`] of any frame: every header kind and every inconsistency.
fn parse_general(frame: &[u8], p: &mut ParsedFrame) {
    *p = ParsedFrame::default();
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        p.malformed = true;
        return;
    };
    p.dst_mac = eth.dst_addr();
    p.src_mac = eth.src_addr();
    p.ethertype = eth.ethertype();
    let mut off = ethernet::HEADER_LEN;
    if p.ethertype == ethertype::VLAN {
        // IEEE 802.1Q: TCI then the inner ethertype.
        let Ok(tag) = VlanTag::new_checked(eth.payload()) else {
            p.malformed = true;
            return;
        };
        p.vlan_tci = Some(tag.tci());
        p.ethertype = tag.ethertype();
        off += ethernet::VLAN_TAG_LEN;
    }
    match p.ethertype {
        ethertype::IPV4 => parse_ipv4(frame, off, p),
        ethertype::IPV6 => parse_ipv6(frame, off, p),
        _ => {}
    }
}

/// What [`parse`] finds in `frame`, a RoCEv2 frame the transport block has just emitted for
/// `addr` ([`fld_abi::wire::roce::RoceAddress::emit_with`]): the headers the block wrote are
/// known, so its frames enter the eSwitch without being parsed again, as a NIC's RDMA engine
/// hands its parser the metadata of what it built. Debug builds check it against [`parse`].
pub fn parsed_roce(addr: &fld_abi::wire::roce::RoceAddress, frame: &[u8]) -> ParsedFrame {
    use fld_abi::wire::{ipv4, roce};
    let ipv4 = roce::gid_is_ipv4(&addr.dst_gid);
    let l3_offset = ethernet::HEADER_LEN;
    let mut p = ParsedFrame {
        dst_mac: addr.dst_mac,
        src_mac: addr.src_mac,
        l3_offset: l3_offset as u16,
        ip_proto: ip_proto::UDP,
        l4: L4Kind::Udp,
        l4_offset: (addr.header_len() - udp::HEADER_LEN) as u16,
        src_port: addr.src_port,
        dst_port: roce::ROCE_V2_PORT,
        // A RoCE frame is at most a path MTU's payload and its headers.
        ip_len: frame
            .len()
            .saturating_sub(l3_offset)
            .min(usize::from(u16::MAX)) as u16,
        ..Default::default()
    };
    if ipv4 {
        p.ethertype = ethertype::IPV4;
        p.l3 = L3Kind::Ipv4;
        p.l3_header_len = ipv4::HEADER_LEN as u16;
        p.src_ip[..4].copy_from_slice(&addr.src_gid[12..]);
        p.dst_ip[..4].copy_from_slice(&addr.dst_gid[12..]);
    } else {
        p.ethertype = ethertype::IPV6;
        p.l3 = L3Kind::Ipv6;
        p.l3_header_len = ipv6::HEADER_LEN as u16;
        p.src_ip = addr.src_gid;
        p.dst_ip = addr.dst_gid;
    }
    debug_assert_eq!(p, parse(frame), "the RoCE frame's parse");
    p
}

/// RFC 791 §3.1. A header that is not IPv4 (version, IHL, options past the frame) leaves L3
/// unparsed; a total length below the header leaves L4 unparsed; a total length past the frame
/// (a truncated datagram) still yields the L4 ports when the L4 header lies within the frame, so
/// steering on a port sees the frame (`hdr_err` says it is malformed).
fn parse_ipv4(frame: &[u8], off: usize, p: &mut ParsedFrame) {
    let Some(Ok(ip)) = frame.get(off..).map(Ipv4Packet::new_checked_header) else {
        p.fail(hdr_err::L3_HEADER);
        return;
    };
    let ihl = ip.header_len();
    p.l3 = L3Kind::Ipv4;
    p.l3_offset = off as u16; // off <= 18
    p.l3_header_len = ihl as u16; // ihl <= 60
    p.ip_proto = ip.next_header();
    let (s, d) = (ip.src_addr(), ip.dst_addr());
    p.src_ip[..4].copy_from_slice(&s);
    p.dst_ip[..4].copy_from_slice(&d);
    p.ip_len = ip.total_len();
    p.ipv4_fragment = ip.is_fragment();
    // Bytes after the total length are Ethernet padding and are ignored.
    if usize::from(p.ip_len) < ihl {
        p.fail(hdr_err::L3_LENGTH);
        return;
    }
    let end = off + usize::from(p.ip_len);
    if end > frame.len() {
        p.fail(hdr_err::L3_TRUNCATED);
    }
    if !p.ipv4_fragment {
        parse_l4(frame, off + ihl, end, p);
    }
}

/// RFC 8200 §3. Extension headers are not walked. A payload length past the frame is a
/// truncated datagram, parsed as far as the frame goes (as for IPv4).
fn parse_ipv6(frame: &[u8], off: usize, p: &mut ParsedFrame) {
    let Some(Ok(ip)) = frame.get(off..).map(Ipv6Packet::new_checked_header) else {
        p.fail(hdr_err::L3_HEADER);
        return;
    };
    let total = ip.total_len();
    p.l3 = L3Kind::Ipv6;
    p.l3_offset = off as u16;
    p.l3_header_len = ipv6::HEADER_LEN as u16;
    p.ip_proto = ip.next_header();
    p.src_ip = ip.src_addr();
    p.dst_ip = ip.dst_addr();
    p.ip_len = u16::try_from(total).unwrap_or(u16::MAX);
    if total > usize::from(u16::MAX) || off + total > frame.len() {
        p.fail(hdr_err::L3_TRUNCATED);
    }
    parse_l4(frame, off + ipv6::HEADER_LEN, off + total, p);
}

/// Parses the L4 header at `start` of the IP datagram that ends at `end` (which may lie past a
/// truncated frame). The ports are read whenever their four bytes are in the frame; a header
/// that does not fit the datagram, or a UDP length that disagrees with it, is a header error.
fn parse_l4(frame: &[u8], start: usize, end: usize, p: &mut ParsedFrame) {
    let (kind, min_header) = match p.ip_proto {
        ip_proto::TCP => (L4Kind::Tcp, fld_abi::wire::tcp::HEADER_LEN),
        ip_proto::UDP => (L4Kind::Udp, udp::HEADER_LEN),
        _ => {
            p.l4 = L4Kind::Other;
            p.l4_offset = start as u16;
            return;
        }
    };
    // The segment as far as both the datagram and the frame go.
    let Some(seg) = frame.get(start..end.min(frame.len()).max(start)) else {
        p.fail(hdr_err::L4_HEADER);
        return;
    };
    if seg.len() >= 4 {
        p.l4 = kind;
        p.l4_offset = start as u16; // start <= 18 + 60 (IPv4) or 18 + 40 (IPv6)
        p.src_port = u16::from_be_bytes([seg[0], seg[1]]);
        p.dst_port = u16::from_be_bytes([seg[2], seg[3]]);
    }
    if seg.len() < min_header {
        p.fail(hdr_err::L4_HEADER);
        return;
    }
    let datagram_room = end - start;
    match kind {
        L4Kind::Udp => {
            let len = usize::from(UdpPacket::new_unchecked(seg).len());
            if !(udp::HEADER_LEN..=datagram_room).contains(&len) {
                p.fail(hdr_err::UDP_LENGTH);
            }
        }
        _ => {
            let header = usize::from(seg[12] >> 4) * 4;
            if header < fld_abi::wire::tcp::HEADER_LEN || header > seg.len() {
                p.fail(hdr_err::L4_HEADER);
            }
        }
    }
}

/// Receive checksum status; `None` = not applicable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChecksumStatus {
    pub l3_ok: Option<bool>,
    pub l4_ok: Option<bool>,
}

/// The IPv4 header `frame[start..end]` if it is present and its lengths are
/// consistent with the frame (RFC 791 §3.1). `p` is `frame`'s parse: where it found nothing
/// inconsistent, its offsets are taken as they are (given another frame's parse, the span is
/// still within `frame`, and a checksum over it fails or fills whatever lies there).
fn ipv4_header_span(frame: &[u8], p: &ParsedFrame) -> Option<(usize, usize)> {
    if p.l3 != L3Kind::Ipv4 {
        return None;
    }
    let start = usize::from(p.l3_offset);
    let hl = usize::from(p.l3_header_len);
    let end = start.checked_add(hl)?;
    let dgram_end = start.checked_add(usize::from(p.ip_len))?;
    // A parse that found nothing inconsistent checked the header against the frame: a whole
    // IPv4 header of at least 20 bytes, within a total length that lies in the frame.
    if !p.malformed && dgram_end <= frame.len() {
        return Some((start, end));
    }
    let ok = hl >= fld_abi::wire::ipv4::HEADER_LEN && end <= dgram_end && dgram_end <= frame.len();
    // The header the frame itself describes must be the one the parse names.
    let ip = Ipv4Packet::new_checked_header(frame.get(start..dgram_end)?).ok()?;
    (ok && ip.header_len() == hl).then_some((start, end))
}

/// Where the TCP/UDP segment is: `(start, end, proto)`.
fn l4_span(frame: &[u8], p: &ParsedFrame) -> Option<(usize, usize, u8)> {
    if p.ipv4_fragment || p.l3 == L3Kind::None {
        return None;
    }
    let start = usize::from(p.l4_offset);
    let dgram_end = usize::from(p.l3_offset).checked_add(usize::from(p.ip_len))?;
    if dgram_end > frame.len() || start < usize::from(p.l3_offset) + usize::from(p.l3_header_len) {
        return None;
    }
    let seg = frame.get(start..dgram_end)?;
    match p.l4 {
        L4Kind::Tcp => TcpPacket::new_checked(seg)
            .ok()
            .map(|_| (start, dgram_end, ip_proto::TCP)),
        L4Kind::Udp => UdpPacket::new_checked(seg)
            .ok()
            .map(|u| (start, start + usize::from(u.len()), ip_proto::UDP)),
        L4Kind::None | L4Kind::Other => None,
    }
}

/// The pseudo-header sum for the L4 segment `len` bytes long (RFC 768, RFC 793 §3.1, RFC 8200
/// §8.1), from the addresses the parse read.
fn pseudo_header(p: &ParsedFrame, proto: u8, len: usize) -> Option<u32> {
    let len = u32::try_from(len).ok()?;
    match p.l3 {
        L3Kind::Ipv4 => {
            let (s, d) = p.ipv4_addrs();
            Some(pseudo_header_v4(&s, &d, proto, len))
        }
        L3Kind::Ipv6 => Some(pseudo_header_v6(&p.src_ip, &p.dst_ip, proto, len)),
        L3Kind::None => None,
    }
}

/// Receive checksum verification (RFC 1071 §1: the sum over the covered data,
/// checksum included, is all ones). UDP over IPv4 with checksum 0 means "no
/// checksum" (RFC 768) and passes; over IPv6 it fails (RFC 8200 §8.1). IPv4
/// fragments: `l4_ok = None`. A length inconsistency of the IPv4 header fails
/// `l3_ok`.
pub fn verify_checksums(frame: &[u8], p: &ParsedFrame) -> ChecksumStatus {
    let mut st = ChecksumStatus::default();
    if p.l3 == L3Kind::Ipv4 {
        st.l3_ok = Some(
            p.inserted_l3_checksum
                || ipv4_header_span(frame, p)
                    .and_then(|(s, e)| frame.get(s..e))
                    .is_some_and(|h| internet_checksum(h, 0) == 0),
        );
    }
    if matches!(p.l4, L4Kind::Tcp | L4Kind::Udp) && !p.ipv4_fragment {
        st.l4_ok = Some(p.inserted_l4_checksum || l4_checksum_ok(frame, p).unwrap_or(false));
    }
    st
}

fn l4_checksum_ok(frame: &[u8], p: &ParsedFrame) -> Option<bool> {
    let (start, end, proto) = match (p.malformed, p.l4) {
        // A parse that found nothing inconsistent checked the UDP length against the datagram.
        // Here rather than in `l4_span`, which insertion shares: there it cost the 64 B CPU echo
        // 69 instructions per echoed packet (insertion compiled worse).
        (false, L4Kind::Udp) => {
            let start = usize::from(p.l4_offset);
            let header = frame.get(start..start + udp::HEADER_LEN)?;
            let len = usize::from(UdpPacket::new_unchecked(header).len());
            (start, start + len, ip_proto::UDP)
        }
        _ => l4_span(frame, p)?,
    };
    let seg = frame.get(start..end)?;
    if proto == ip_proto::UDP && UdpPacket::new_unchecked(seg).checksum() == 0 {
        return Some(p.l3 == L3Kind::Ipv4);
    }
    Some(internet_checksum(seg, pseudo_header(p, proto, seg.len())?) == 0)
}

/// Transmit checksum insertion: compute and store the IPv4 header checksum (if
/// `l3`) and the TCP/UDP checksum (if `l4`, over the IPv4 or IPv6
/// pseudo-header, RFC 768/793/8200 §8.1; a computed UDP checksum of 0 is sent
/// as 0xFFFF, RFC 768 / RFC 8200 §8.1). Returns false (and changes nothing)
/// when a requested layer is absent, malformed or (L4) an IPv4 fragment.
/// `l3` on IPv6 is a successful no-op: IPv6 has no header checksum.
pub fn insert_checksums(frame: &mut [u8], p: &ParsedFrame, l3: bool, l4: bool) -> bool {
    let l3_span = match (l3, p.l3) {
        (false, _) | (true, L3Kind::Ipv6) => None,
        (true, L3Kind::Ipv4) => match ipv4_header_span(frame, p) {
            Some(span) => Some(span),
            None => return false,
        },
        (true, L3Kind::None) => return false,
    };
    let l4_plan = if l4 {
        let Some((start, end, proto)) = l4_span(frame, p) else {
            return false;
        };
        let Some(pseudo) = pseudo_header(p, proto, end - start) else {
            return false;
        };
        Some((start, end, proto, pseudo))
    } else {
        None
    };
    // Everything validated: the spans lie in the frame and hold whole headers.
    if let Some((start, end, proto, pseudo)) = l4_plan {
        let seg = &mut frame[start..end];
        if proto == ip_proto::UDP {
            let mut u = UdpPacket::new_unchecked(seg);
            u.set_checksum(0);
            let c = internet_checksum(u.datagram(), pseudo);
            u.set_checksum(if c == 0 { 0xffff } else { c });
        } else {
            TcpPacket::new_unchecked(&mut *seg).set_checksum(0);
            let c = internet_checksum(seg, pseudo);
            TcpPacket::new_unchecked(seg).set_checksum(c);
        }
    }
    if let Some((start, end)) = l3_span {
        Ipv4Packet::new_unchecked(&mut frame[start..end]).fill_checksum();
    }
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use etherparse::{IpFragOffset, IpHeaders, IpNumber, Ipv4Header, PacketBuilder, VlanId};
    use fld_abi::wire::ethertype::{
        IPV4 as ETHERTYPE_IPV4, IPV6 as ETHERTYPE_IPV6, VLAN as ETHERTYPE_VLAN,
    };
    use fld_abi::wire::ip_proto::{TCP as IPPROTO_TCP, UDP as IPPROTO_UDP};
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    // ---- allocation counter (per thread, so parallel tests don't interfere) ----
    struct CountingAlloc;
    thread_local! {
        static ALLOCS: Cell<u64> = const { Cell::new(0) };
    }
    unsafe impl GlobalAlloc for CountingAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }
    }
    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    /// Number of heap allocations `f` performs on this thread.
    pub(crate) fn allocations_in(f: impl FnOnce()) -> u64 {
        let before = ALLOCS.with(|c| c.get());
        f();
        ALLOCS.with(|c| c.get()) - before
    }

    // ---- tiny xorshift64 PRNG ----
    pub(crate) struct XorShift(pub u64);
    impl XorShift {
        pub(crate) fn next_u64(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next_u64() % n
        }
    }

    pub(crate) const SMAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
    pub(crate) const DMAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
    const V4S: [u8; 4] = [192, 168, 1, 10];
    const V4D: [u8; 4] = [10, 0, 0, 7];
    const V6S: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const V6D: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
    ];

    fn payload(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(37).wrapping_add(11))
            .collect()
    }

    fn write(b: PacketBuilderStep, pl: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        b.write(&mut v, pl).expect("etherparse write");
        v
    }
    // Small wrapper so tests can treat TCP/UDP builders uniformly.
    enum PacketBuilderStep {
        Tcp(etherparse::PacketBuilderStep<etherparse::TcpHeader>),
        Udp(etherparse::PacketBuilderStep<etherparse::UdpHeader>),
    }
    impl PacketBuilderStep {
        fn write(
            self,
            v: &mut Vec<u8>,
            pl: &[u8],
        ) -> Result<(), etherparse::err::packet::BuildWriteError> {
            match self {
                PacketBuilderStep::Tcp(b) => b.write(v, pl),
                PacketBuilderStep::Udp(b) => b.write(v, pl),
            }
        }
    }

    pub(crate) fn tcp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, n: usize) -> Vec<u8> {
        write(
            PacketBuilderStep::Tcp(
                PacketBuilder::ethernet2(SMAC, DMAC)
                    .ipv4(src, dst, 64)
                    .tcp(sp, dp, 0x1234_5678, 4096)
                    .ack(77)
                    .psh(),
            ),
            &payload(n),
        )
    }
    pub(crate) fn udp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, n: usize) -> Vec<u8> {
        write(
            PacketBuilderStep::Udp(
                PacketBuilder::ethernet2(SMAC, DMAC)
                    .ipv4(src, dst, 64)
                    .udp(sp, dp),
            ),
            &payload(n),
        )
    }
    pub(crate) fn tcp6(src: [u8; 16], dst: [u8; 16], sp: u16, dp: u16, n: usize) -> Vec<u8> {
        write(
            PacketBuilderStep::Tcp(
                PacketBuilder::ethernet2(SMAC, DMAC)
                    .ipv6(src, dst, 64)
                    .tcp(sp, dp, 99, 512)
                    .syn(),
            ),
            &payload(n),
        )
    }
    pub(crate) fn udp6(src: [u8; 16], dst: [u8; 16], sp: u16, dp: u16, n: usize) -> Vec<u8> {
        write(
            PacketBuilderStep::Udp(
                PacketBuilder::ethernet2(SMAC, DMAC)
                    .ipv6(src, dst, 64)
                    .udp(sp, dp),
            ),
            &payload(n),
        )
    }

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut r = [0; 16];
        r[..4].copy_from_slice(&a);
        r
    }

    /// Every well-formed sample frame, with a label.
    fn samples() -> Vec<(&'static str, Vec<u8>)> {
        let mut v = Vec::new();
        for n in [0usize, 1, 2, 7, 8, 9, 63, 200, 1400] {
            v.push(("tcp4", tcp4(V4S, V4D, 40000, 443, n)));
            v.push(("udp4", udp4(V4S, V4D, 5353, 53, n)));
            v.push(("tcp6", tcp6(V6S, V6D, 40001, 80, n)));
            v.push(("udp6", udp6(V6S, V6D, 546, 547, n)));
        }
        v
    }

    #[test]
    fn parses_tcp_ipv4() {
        let f = tcp4(V4S, V4D, 40000, 443, 10);
        let p = parse(&f);
        assert_eq!(
            p,
            ParsedFrame {
                dst_mac: DMAC,
                src_mac: SMAC,
                vlan_tci: None,
                ethertype: ETHERTYPE_IPV4,
                l3: L3Kind::Ipv4,
                l3_offset: 14,
                l3_header_len: 20,
                ip_proto: IPPROTO_TCP,
                src_ip: v4(V4S),
                dst_ip: v4(V4D),
                ipv4_fragment: false,
                l4: L4Kind::Tcp,
                l4_offset: 34,
                src_port: 40000,
                dst_port: 443,
                ip_len: 20 + 20 + 10,
                malformed: false,
                hdr_err: 0,
                inserted_l3_checksum: false,
                inserted_l4_checksum: false,
            }
        );
    }

    #[test]
    fn parses_udp_ipv4() {
        let f = udp4(V4S, V4D, 5353, 53, 11);
        let p = parse(&f);
        assert_eq!(
            (p.l3, p.l4, p.ip_proto),
            (L3Kind::Ipv4, L4Kind::Udp, IPPROTO_UDP)
        );
        assert_eq!(
            (p.src_port, p.dst_port, p.l4_offset, p.ip_len),
            (5353, 53, 34, 20 + 8 + 11)
        );
        assert_eq!((p.src_ip, p.dst_ip), (v4(V4S), v4(V4D)));
        assert!(!p.malformed);
    }

    /// The fixed path against the general parser: on the samples, on frames cut short or
    /// padded, and on random rewrites of the header bytes each field of the fixed path checks
    /// (ethertype, version and IHL, lengths, fragment bits, protocol, UDP length, TCP data
    /// offset), the two agree field for field; and the fixed path takes the plain frames.
    #[test]
    fn fixed_path_parses_as_the_general_parser() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let (mut taken, mut frames) = (0, 0);
        let mut check = |f: &[u8]| {
            let mut general = ParsedFrame::default();
            parse_general(f, &mut general);
            let mut fixed = ParsedFrame::default();
            if parse_plain_ipv4(f, &mut fixed) {
                assert_eq!(fixed, general, "{f:02x?}");
                taken += 1;
            }
            frames += 1;
            assert_eq!(parse(f), general);
        };
        for (_, f) in samples() {
            for cut in [f.len(), f.len() - 1, 54, 42, 38, 34, 33] {
                check(&f[..cut.min(f.len())]);
            }
            let mut padded = f.clone();
            padded.extend([0xa5; 9]);
            check(&padded);
            // The fields the fixed path reads, and their neighbours.
            const AT: [usize; 14] = [12, 13, 14, 16, 17, 20, 21, 23, 38, 39, 46, 47, 50, 53];
            for _ in 0..4000 {
                let mut g = f.clone();
                for _ in 0..=rng.below(3) {
                    let at = AT[rng.below(AT.len() as u64) as usize];
                    if let Some(b) = g.get_mut(at) {
                        *b = match rng.below(3) {
                            0 => rng.next_u64() as u8,
                            1 => b.wrapping_add(1),
                            _ => b.wrapping_sub(1),
                        };
                    }
                }
                check(&g);
            }
        }
        let plain = samples()
            .iter()
            .filter(|(_, f)| f[12..15] == [0x08, 0x00, 0x45])
            .count();
        assert!(plain >= 2, "the samples hold plain IPv4 frames");
        // About one rewrite in five keeps a frame plain (its fields still consistent).
        assert!(taken > plain * 500, "fixed path taken {taken} of {frames}");
    }

    #[test]
    fn parses_tcp_ipv6() {
        let f = tcp6(V6S, V6D, 40001, 80, 5);
        let p = parse(&f);
        assert_eq!(
            p,
            ParsedFrame {
                dst_mac: DMAC,
                src_mac: SMAC,
                vlan_tci: None,
                ethertype: ETHERTYPE_IPV6,
                l3: L3Kind::Ipv6,
                l3_offset: 14,
                l3_header_len: 40,
                ip_proto: IPPROTO_TCP,
                src_ip: V6S,
                dst_ip: V6D,
                ipv4_fragment: false,
                l4: L4Kind::Tcp,
                l4_offset: 54,
                src_port: 40001,
                dst_port: 80,
                ip_len: 40 + 20 + 5,
                malformed: false,
                hdr_err: 0,
                inserted_l3_checksum: false,
                inserted_l4_checksum: false,
            }
        );
    }

    #[test]
    fn parses_udp_ipv6() {
        let f = udp6(V6S, V6D, 546, 547, 3);
        let p = parse(&f);
        assert_eq!(
            (p.l3, p.l4, p.ip_proto, p.l4_offset),
            (L3Kind::Ipv6, L4Kind::Udp, IPPROTO_UDP, 54)
        );
        assert_eq!((p.src_port, p.dst_port, p.ip_len), (546, 547, 40 + 8 + 3));
        assert_eq!((p.src_ip, p.dst_ip), (V6S, V6D));
        assert!(!p.malformed);
    }

    #[test]
    fn non_ip_and_short_frames() {
        assert_eq!(
            parse(&[]),
            ParsedFrame {
                malformed: true,
                ..Default::default()
            }
        );
        assert_eq!(
            parse(&[0xaa; 13]),
            ParsedFrame {
                malformed: true,
                ..Default::default()
            }
        );
        // ARP: Ethernet only, not malformed.
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let p = parse(&arp);
        assert_eq!(
            (p.ethertype, p.l3, p.l4, p.malformed),
            (0x0806, L3Kind::None, L4Kind::None, false)
        );
        assert_eq!(verify_checksums(&arp, &p), ChecksumStatus::default());
        assert!(!insert_checksums(&mut arp, &p, true, false));
        assert!(!insert_checksums(&mut arp, &p, false, true));
        assert!(insert_checksums(&mut arp, &p, false, false));
    }

    #[test]
    fn verify_accepts_etherparse_frames() {
        for (name, f) in samples() {
            let p = parse(&f);
            assert!(!p.malformed, "{name}");
            let want_l3 = if p.l3 == L3Kind::Ipv4 {
                Some(true)
            } else {
                None
            };
            assert_eq!(
                verify_checksums(&f, &p),
                ChecksumStatus {
                    l3_ok: want_l3,
                    l4_ok: Some(true)
                },
                "{name} {}",
                f.len()
            );
        }
    }

    #[test]
    fn flipped_l4_byte_fails_l4_only() {
        for (name, f) in samples() {
            let p = parse(&f);
            // Every byte of the L4 segment (header and payload) is covered.
            for i in usize::from(p.l4_offset)..f.len() {
                let mut g = f.clone();
                g[i] ^= 0x01;
                let q = parse(&g);
                if q.malformed || q.l4 != p.l4 {
                    continue; // e.g. broke the UDP length / TCP data offset
                }
                let st = verify_checksums(&g, &q);
                assert_eq!(st.l4_ok, Some(false), "{name} byte {i}");
                assert_eq!(
                    st.l3_ok,
                    if p.l3 == L3Kind::Ipv4 {
                        Some(true)
                    } else {
                        None
                    }
                );
            }
        }
    }

    #[test]
    fn pseudo_header_is_covered() {
        // Changing an address (and fixing only the IPv4 header checksum) must break L4.
        for (name, f) in samples() {
            let p = parse(&f);
            let addr = usize::from(p.l3_offset) + if p.l3 == L3Kind::Ipv4 { 12 } else { 8 };
            let mut g = f.clone();
            g[addr] ^= 0x80;
            assert!(insert_checksums(&mut g, &p, true, false));
            let st = verify_checksums(&g, &parse(&g));
            assert_eq!(st.l4_ok, Some(false), "{name}");
        }
    }

    #[test]
    fn corrupt_ipv4_header_fails_l3() {
        let f = tcp4(V4S, V4D, 1, 2, 30);
        for i in 14..34 {
            let mut g = f.clone();
            g[i] ^= 0x40;
            let q = parse(&g);
            if q.l3 != L3Kind::Ipv4 || q.malformed {
                continue; // version/IHL/length damage: another layer of checks
            }
            assert_eq!(verify_checksums(&g, &q).l3_ok, Some(false), "byte {i}");
        }
        // Checksum field itself.
        let mut g = f.clone();
        g[24] ^= 0xff;
        assert_eq!(
            verify_checksums(&g, &parse(&g)),
            ChecksumStatus {
                l3_ok: Some(false),
                l4_ok: Some(true)
            }
        );
    }

    #[test]
    fn insert_reproduces_etherparse_bytes() {
        for (name, f) in samples() {
            let p = parse(&f);
            let mut g = f.clone();
            let l4c = usize::from(p.l4_offset) + if p.l4 == L4Kind::Tcp { 16 } else { 6 };
            g[l4c] = 0;
            g[l4c + 1] = 0;
            if p.l3 == L3Kind::Ipv4 {
                g[24] = 0;
                g[25] = 0;
            }
            assert_ne!(g, f, "{name}: checksums were nonzero");
            assert!(insert_checksums(&mut g, &p, true, true), "{name}");
            assert_eq!(g, f, "{name} len {}", f.len());
            // Garbage (not zero) in the checksum fields is overwritten too.
            g[l4c] ^= 0x5a;
            if p.l3 == L3Kind::Ipv4 {
                g[25] ^= 0xa5;
            }
            assert!(insert_checksums(&mut g, &p, true, true));
            assert_eq!(g, f, "{name}");
        }
    }

    #[test]
    fn insert_layers_independently() {
        let f = udp4(V4S, V4D, 9, 10, 17);
        let p = parse(&f);
        let mut g = f.clone();
        g[24..26].fill(0);
        g[40..42].fill(0x33);
        assert!(insert_checksums(&mut g, &p, true, false));
        assert_eq!(g[24..26], f[24..26]);
        assert_eq!(g[40..42], [0x33, 0x33]);
        assert!(insert_checksums(&mut g, &p, false, true));
        assert_eq!(g, f);
        // l3 on IPv6 is a no-op success.
        let f6 = tcp6(V6S, V6D, 1, 2, 3);
        let mut g6 = f6.clone();
        assert!(insert_checksums(&mut g6, &parse(&f6), true, false));
        assert_eq!(g6, f6);
    }

    #[test]
    fn udp_zero_checksum_rules() {
        // RFC 768: IPv4 checksum 0 = none transmitted -> accepted.
        let mut f = udp4(V4S, V4D, 1000, 2000, 12);
        f[40..42].fill(0);
        let p = parse(&f);
        assert_eq!(verify_checksums(&f, &p).l4_ok, Some(true));
        // RFC 8200 §8.1: IPv6 UDP checksum 0 is invalid.
        let mut f6 = udp6(V6S, V6D, 1000, 2000, 12);
        f6[60..62].fill(0);
        assert_eq!(verify_checksums(&f6, &parse(&f6)).l4_ok, Some(false));
    }

    #[test]
    fn udp_computed_zero_is_sent_as_ffff() {
        for ipv6 in [false, true] {
            // Choose the last payload word so that the checksum computes to 0.
            let mut pl = payload(20);
            pl[18] = 0;
            pl[19] = 0;
            let build = |pl: &[u8]| {
                let b = if ipv6 {
                    PacketBuilder::ethernet2(SMAC, DMAC)
                        .ipv6(V6S, V6D, 64)
                        .udp(7, 8)
                } else {
                    PacketBuilder::ethernet2(SMAC, DMAC)
                        .ipv4(V4S, V4D, 64)
                        .udp(7, 8)
                };
                let mut v = Vec::new();
                b.write(&mut v, pl).expect("write");
                v
            };
            let f = build(&pl);
            let p = parse(&f);
            let ck_off = usize::from(p.l4_offset) + 6;
            let ck = u16::from_be_bytes([f[ck_off], f[ck_off + 1]]);
            // Adding word c to a sum whose complement is c gives 0xffff.
            pl[18..20].copy_from_slice(&ck.to_be_bytes());
            let f = build(&pl);
            assert_eq!(
                f[ck_off..ck_off + 2],
                [0xff, 0xff],
                "etherparse agrees, ipv6={ipv6}"
            );
            let mut g = f.clone();
            g[ck_off..ck_off + 2].fill(0);
            let p = parse(&g);
            assert!(insert_checksums(&mut g, &p, false, true));
            assert_eq!(g, f, "ipv6={ipv6}");
            assert_eq!(verify_checksums(&g, &p).l4_ok, Some(true));
        }
    }

    #[test]
    fn vlan_tagged_frame() {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(SMAC, DMAC)
            .single_vlan(VlanId::try_new(0x123).expect("vid"))
            .ipv4(V4S, V4D, 5)
            .udp(11, 12)
            .write(&mut f, &payload(9))
            .expect("write");
        let p = parse(&f);
        assert_eq!(p.vlan_tci, Some(0x0123));
        assert_eq!(
            (p.ethertype, p.l3, p.l3_offset, p.l4, p.l4_offset),
            (ETHERTYPE_IPV4, L3Kind::Ipv4, 18, L4Kind::Udp, 38)
        );
        assert_eq!((p.src_port, p.dst_port), (11, 12));
        assert_eq!(
            verify_checksums(&f, &p),
            ChecksumStatus {
                l3_ok: Some(true),
                l4_ok: Some(true)
            }
        );
        let mut g = f.clone();
        g[28..30].fill(0);
        g[44..46].fill(0);
        assert!(insert_checksums(&mut g, &p, true, true));
        assert_eq!(g, f);
        // PCP/DEI bits are kept in the TCI.
        let mut h = f.clone();
        h[14] |= 0xe0;
        assert_eq!(parse(&h).vlan_tci, Some(0xe123));
        // Tag cut short.
        let q = parse(&f[..16]);
        assert!(q.malformed);
        assert_eq!((q.vlan_tci, q.l3), (None, L3Kind::None));
        // QinQ: inner 0x8100 is not consumed -> no L3.
        let mut qq = f.clone();
        qq[16..18].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        let q = parse(&qq);
        assert_eq!(
            (q.ethertype, q.l3, q.malformed),
            (ETHERTYPE_VLAN, L3Kind::None, false)
        );
    }

    #[test]
    fn ipv4_options_are_skipped() {
        let mut hdr = Ipv4Header::new(0, 64, IpNumber::TCP, V4S, V4D).expect("hdr");
        hdr.options = [1u8, 1, 1, 0, 0x94, 4, 0, 0].into(); // NOP NOP NOP EOL, router alert
        let mut f = Vec::new();
        PacketBuilder::ethernet2(SMAC, DMAC)
            .ip(IpHeaders::Ipv4(hdr, Default::default()))
            .tcp(5, 6, 7, 8)
            .write(&mut f, &payload(33))
            .expect("write");
        let p = parse(&f);
        assert_eq!(
            (p.l3_header_len, p.l4, p.l4_offset, p.src_port, p.dst_port),
            (28, L4Kind::Tcp, 42, 5, 6)
        );
        assert_eq!(
            verify_checksums(&f, &p),
            ChecksumStatus {
                l3_ok: Some(true),
                l4_ok: Some(true)
            }
        );
        let mut g = f.clone();
        g[24..26].fill(0);
        g[42 + 16..42 + 18].fill(0);
        assert!(insert_checksums(&mut g, &p, true, true));
        assert_eq!(g, f);
    }

    #[test]
    fn ipv4_fragments() {
        for (mf, offset) in [(true, 0u16), (true, 185), (false, 185), (false, 8191)] {
            let mut hdr = Ipv4Header::new(0, 64, IpNumber::UDP, V4S, V4D).expect("hdr");
            hdr.more_fragments = mf;
            hdr.fragment_offset = IpFragOffset::try_new(offset).expect("off");
            let mut f = Vec::new();
            PacketBuilder::ethernet2(SMAC, DMAC)
                .ip(IpHeaders::Ipv4(hdr, Default::default()))
                .udp(5, 6)
                .write(&mut f, &payload(24))
                .expect("write");
            let p = parse(&f);
            assert!(p.ipv4_fragment && !p.malformed, "{mf} {offset}");
            assert_eq!(
                (p.l3, p.ip_proto, p.l4, p.l4_offset, p.src_port, p.dst_port),
                (L3Kind::Ipv4, IPPROTO_UDP, L4Kind::None, 0, 0, 0)
            );
            assert_eq!(
                verify_checksums(&f, &p),
                ChecksumStatus {
                    l3_ok: Some(true),
                    l4_ok: None
                }
            );
            let mut g = f.clone();
            assert!(!insert_checksums(&mut g, &p, false, true));
            assert!(!insert_checksums(&mut g, &p, true, true));
            assert_eq!(g, f, "unchanged on refusal");
            // L3 insertion alone is fine on a fragment.
            g[24..26].fill(0);
            assert!(insert_checksums(&mut g, &p, true, false));
            assert_eq!(g, f);
        }
        // DF alone is not a fragment.
        let mut f = tcp4(V4S, V4D, 1, 2, 3);
        f[20] |= 0x40;
        let p = parse(&f);
        assert!(!p.ipv4_fragment && p.l4 == L4Kind::Tcp);
    }

    #[test]
    fn truncated_frames_never_panic() {
        let mut vlan = Vec::new();
        PacketBuilder::ethernet2(SMAC, DMAC)
            .single_vlan(VlanId::try_new(7).expect("vid"))
            .ipv6(V6S, V6D, 1)
            .tcp(1, 2, 3, 4)
            .write(&mut vlan, &payload(4))
            .expect("write");
        let mut all = samples();
        all.push(("vlan6", vlan));
        for (name, f) in all {
            let full = parse(&f);
            for n in 0..f.len() {
                let cut = &f[..n];
                let p = parse(cut);
                // Nothing here has padding, so any cut loses IP payload: a truncated
                // datagram, whose ports are still read while they are in the frame.
                assert!(p.malformed, "{name} cut at {n}");
                if p.l3 != L3Kind::None {
                    assert_eq!(p.l3, full.l3);
                    assert_ne!(p.hdr_err & hdr_err::L3_TRUNCATED, 0, "{name} cut at {n}");
                }
                let ports_in_cut = n >= usize::from(full.l4_offset) + 4;
                assert_eq!(p.l4 != L4Kind::None, ports_in_cut, "{name} cut at {n}");
                if ports_in_cut {
                    assert_eq!(
                        (p.l4, p.src_port, p.dst_port),
                        (full.l4, full.src_port, full.dst_port)
                    );
                }
                let st = verify_checksums(cut, &p);
                assert_ne!(st.l4_ok, Some(true));
                let mut g = cut.to_vec();
                assert!(!insert_checksums(&mut g, &p, false, true));
                // The parse of the full frame applied to a cut: still no panic.
                let _ = verify_checksums(cut, &full);
                assert!(!insert_checksums(&mut g, &full, true, true));
                assert_eq!(g, cut);
            }
        }
    }

    #[test]
    fn lying_lengths_are_malformed() {
        let f = tcp4(V4S, V4D, 1, 2, 20);
        // Total length beyond the frame.
        let mut g = f.clone();
        g[16..18].copy_from_slice(&(f.len() as u16 - 14 + 1).to_be_bytes());
        let p = parse(&g);
        assert!(p.malformed && p.l3 == L3Kind::Ipv4);
        assert_eq!(p.hdr_err, hdr_err::L3_TRUNCATED);
        // The ports are still the frame's: a rule on them cannot be walked around.
        assert_eq!((p.l4, p.src_port, p.dst_port), (L4Kind::Tcp, 1, 2));
        assert_eq!(p.ip_len, 61);
        let mut h = g.clone();
        assert!(!insert_checksums(&mut h, &p, true, false));
        assert_eq!(h, g);
        assert_eq!(verify_checksums(&g, &p).l3_ok, Some(false));
        // Total length below IHL*4.
        g[16..18].copy_from_slice(&19u16.to_be_bytes());
        let p = parse(&g);
        assert!(p.malformed && p.l4 == L4Kind::None);
        assert_eq!(p.hdr_err, hdr_err::L3_LENGTH);
        // Total length too short for the TCP header.
        g[16..18].copy_from_slice(&39u16.to_be_bytes());
        let p = parse(&g);
        assert!(p.malformed && p.l4 == L4Kind::Tcp && p.dst_port == 2);
        assert_eq!(p.hdr_err, hdr_err::L4_HEADER);
        assert_eq!(verify_checksums(&g, &p).l4_ok, Some(false));
        // Shorter total length with Ethernet padding after it is fine.
        let mut padded = udp4(V4S, V4D, 3, 4, 2);
        let ip_len = padded.len() - 14;
        padded.resize(60, 0);
        let p = parse(&padded);
        assert!(!p.malformed && p.l4 == L4Kind::Udp && usize::from(p.ip_len) == ip_len);
        assert_eq!(
            verify_checksums(&padded, &p),
            ChecksumStatus {
                l3_ok: Some(true),
                l4_ok: Some(true)
            }
        );
        // Bad version / IHL.
        let mut b = f.clone();
        b[14] = 0x65;
        for ver_ihl in [0x65, 0x44] {
            b[14] = ver_ihl;
            let p = parse(&b);
            assert!(p.malformed && p.l3 == L3Kind::None && p.dst_port == 0);
            assert_eq!(p.hdr_err, hdr_err::L3_HEADER);
        }
        // IHL 60 = the whole datagram: L3 parses, no room left for TCP.
        b[14] = 0x4f;
        let p = parse(&b);
        assert!(
            p.malformed && p.l3 == L3Kind::Ipv4 && p.l3_header_len == 60 && p.l4 == L4Kind::None
        );
        assert_eq!(p.hdr_err, hdr_err::L4_HEADER);
        // Options running past the frame.
        let mut o = f[..14 + 24].to_vec();
        o[14] = 0x4f;
        assert_eq!(parse(&o).hdr_err, hdr_err::L3_HEADER);
        // TCP data offset < 5 or beyond the datagram.
        let mut t = f.clone();
        for offset in [0x40, 0xf0] {
            t[34 + 12] = offset;
            let p = parse(&t);
            assert!(p.malformed && p.l4 == L4Kind::Tcp && p.dst_port == 2);
            assert_eq!(p.hdr_err, hdr_err::L4_HEADER);
        }
        // UDP length field lying: below the header, or past the IP payload (18 bytes).
        let u = udp4(V4S, V4D, 3, 4, 10);
        let mut v = u.clone();
        for len in [7u16, 19] {
            v[38..40].copy_from_slice(&len.to_be_bytes());
            let p = parse(&v);
            assert!(p.malformed && p.l4 == L4Kind::Udp && p.dst_port == 4);
            assert_eq!(p.hdr_err, hdr_err::UDP_LENGTH);
            assert_eq!(verify_checksums(&v, &p).l4_ok, Some(false));
        }
        // A UDP length shorter than the IP payload is legal (RFC 768): the datagram is its first
        // `length` bytes and the rest of the IP payload is ignored.
        v[38..40].copy_from_slice(&12u16.to_be_bytes());
        let p = parse(&v);
        assert!(!p.malformed && p.hdr_err == 0 && p.l4 == L4Kind::Udp);
        // IPv6 payload length beyond the frame.
        let mut w = tcp6(V6S, V6D, 1, 2, 4);
        w[18..20].copy_from_slice(&25u16.to_be_bytes());
        let p = parse(&w);
        assert!(p.malformed && p.l3 == L3Kind::Ipv6 && p.l4 == L4Kind::Tcp && p.ip_len == 65);
        assert_eq!(p.hdr_err, hdr_err::L3_TRUNCATED);
        w[18..20].copy_from_slice(&0xffffu16.to_be_bytes());
        let p = parse(&w);
        assert!(p.malformed && p.ip_len == u16::MAX);
    }

    #[test]
    fn other_l4_protocols() {
        let mut f = tcp4(V4S, V4D, 1, 2, 8);
        f[23] = 1; // ICMP
        let p = parse(&f);
        assert_eq!(
            (p.l4, p.l4_offset, p.src_port, p.malformed),
            (L4Kind::Other, 34, 0, false)
        );
        assert_eq!(verify_checksums(&f, &p).l4_ok, None);
        assert!(!insert_checksums(&mut f.clone(), &p, true, true));
        // IPv6 with a hop-by-hop header: not walked.
        let mut g = tcp6(V6S, V6D, 1, 2, 8);
        g[20] = 0;
        let p = parse(&g);
        assert_eq!(
            (p.ip_proto, p.l4, p.l4_offset, p.malformed),
            (0, L4Kind::Other, 54, false)
        );
    }

    #[test]
    fn inserted_checksums_are_known_good_and_everything_else_is_summed() {
        let mut f = udp4(V4S, V4D, 5353, 53, 40);
        let mut p = parse(&f);
        assert!(insert_checksums(&mut f, &p, true, true));
        assert_eq!(
            verify_checksums(&f, &p),
            ChecksumStatus {
                l3_ok: Some(true),
                l4_ok: Some(true)
            }
        );
        // Corrupt the payload: a frame whose checksums nobody inserted is summed and caught...
        let last = f.len() - 1;
        f[last] ^= 0x5a;
        assert_eq!(verify_checksums(&f, &p).l4_ok, Some(false));
        // ...while the transmit path's own insertion is trusted for the unmodified frame it
        // describes (the data path never modifies a frame under the same parse).
        p.inserted_l4_checksum = true;
        assert_eq!(verify_checksums(&f, &p).l4_ok, Some(true));
        p.inserted_l3_checksum = true;
        f[14 + 8] ^= 1; // TTL
        assert_eq!(verify_checksums(&f, &p).l3_ok, Some(true));
        assert_eq!(
            verify_checksums(&f, &parse(&f)).l3_ok,
            Some(false),
            "a fresh parse sums"
        );
    }

    #[test]
    fn hot_path_does_not_allocate() {
        let frames = samples();
        let toe = crate::nic::rss::Toeplitz::new(&crate::nic::rss::DEFAULT_RSS_KEY);
        let mut bufs: Vec<Vec<u8>> = frames.iter().map(|(_, f)| f.clone()).collect();
        let n = allocations_in(|| {
            for b in &mut bufs {
                let p = parse(b);
                let _ = verify_checksums(b, &p);
                let _ = insert_checksums(b, &p, true, true);
                let (inp, len) = crate::nic::rss::hash_input(&p, 0x0f);
                let _ = toe.hash(inp.get(..len).unwrap_or(&[]));
                let _ = crate::nic::rss::toeplitz(&crate::nic::rss::DEFAULT_RSS_KEY, &inp[..len]);
                let _ = internet_checksum(b, 0);
            }
        });
        assert_eq!(n, 0);
    }

    /// Fills `buf` with random bytes, biased towards headers the parser goes
    /// deeper into (so the deep paths get their share of random input).
    fn random_frame(r: &mut XorShift, buf: &mut Vec<u8>) {
        let n = r.below(160) as usize;
        buf.clear();
        buf.extend((0..n).map(|_| r.next_u64() as u8));
        let mode = r.below(8);
        if mode == 0 || n < 18 {
            return; // pure noise
        }
        let off = if mode == 1 { 18 } else { 14 };
        if off == 18 {
            buf[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        }
        let v6 = mode >= 5;
        buf[off - 2..off]
            .copy_from_slice(&if v6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 }.to_be_bytes());
        let avail = n - off;
        let proto = [IPPROTO_TCP, IPPROTO_UDP, 1, IPPROTO_TCP][r.below(4) as usize];
        let hl = if v6 { 40 } else { 20 };
        if avail < hl {
            return;
        }
        // Claimed L3 length: usually the whole frame, sometimes a bit less (padding) or more (lie).
        let claimed = match r.below(6) {
            0 => r.next_u64() as usize & 0xffff,
            1 => avail + 1,
            2 => avail.saturating_sub(r.below(8) as usize).max(hl),
            _ => avail,
        };
        if v6 {
            buf[off] = 0x60 | (buf[off] & 0x0f);
            buf[off + 6] = proto;
            buf[off + 4..off + 6]
                .copy_from_slice(&(claimed.saturating_sub(40) as u16).to_be_bytes());
        } else {
            buf[off] = 0x45
                + if r.below(4) == 0 {
                    r.below(11) as u8
                } else {
                    0
                };
            buf[off + 9] = proto;
            if r.below(4) != 0 {
                buf[off + 6] &= 0x40; // keep DF only: not a fragment
                buf[off + 7] = 0;
            }
            buf[off + 2..off + 4].copy_from_slice(&(claimed as u16).to_be_bytes());
        }
        let l4 = off
            + if v6 {
                40
            } else {
                usize::from(buf[off] & 0x0f) * 4
            };
        let l4_len = claimed.min(avail).saturating_sub(l4 - off);
        if r.below(4) != 0 {
            match proto {
                IPPROTO_TCP if l4_len >= 20 => {
                    buf[l4 + 12] = (5 + r.below(((l4_len / 4).min(15) - 4) as u64) as u8) << 4
                }
                IPPROTO_UDP if l4_len >= 8 => {
                    buf[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
                }
                _ => {}
            }
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut r = XorShift(0x2545_f491_4f6c_dd1d);
        let toe = crate::nic::rss::Toeplitz::new(&crate::nic::rss::DEFAULT_RSS_KEY);
        let mut buf = Vec::with_capacity(256);
        let (mut l4_seen, mut l4_inserted) = (0u32, 0u32);
        for _ in 0..100_000 {
            random_frame(&mut r, &mut buf);
            let p = parse(&buf);
            // Structural invariants.
            if p.l4 != L4Kind::None {
                assert!(!p.ipv4_fragment && p.l3 != L3Kind::None);
                assert!(usize::from(p.l4_offset) <= buf.len());
                if !p.malformed {
                    assert!(usize::from(p.l3_offset) + usize::from(p.ip_len) <= buf.len());
                }
            }
            // Header errors are named; only a cut Ethernet header or VLAN tag has none.
            assert_eq!(
                p.hdr_err != 0 || (p.malformed && p.l3 == L3Kind::None),
                p.malformed
            );
            if matches!(p.l4, L4Kind::Tcp | L4Kind::Udp) {
                l4_seen += 1;
            }
            let _ = verify_checksums(&buf, &p);
            let (inp, len) = crate::nic::rss::hash_input(&p, r.below(16) as u8);
            let slice = inp.get(..len).unwrap_or(&[]);
            assert_eq!(
                toe.hash(slice),
                crate::nic::rss::toeplitz(&crate::nic::rss::DEFAULT_RSS_KEY, slice)
            );
            // Insert then verify: what was inserted must verify.
            let before = buf.clone();
            let (l3, l4) = (r.below(2) == 0, r.below(2) == 0);
            if insert_checksums(&mut buf, &p, l3, l4) {
                l4_inserted += u32::from(l4);
                assert_eq!(parse(&buf), p, "checksum fields are not parsed fields");
                let st = verify_checksums(&buf, &p);
                if l3 && p.l3 == L3Kind::Ipv4 {
                    assert_eq!(st.l3_ok, Some(true));
                }
                if l4 {
                    assert_eq!(st.l4_ok, Some(true));
                }
            } else {
                assert_eq!(buf, before, "refusal changes nothing");
            }
            // A mismatched ParsedFrame (from another frame) must not panic either.
            let mut q = p;
            q.l3_offset = q.l3_offset.wrapping_add(r.below(64) as u16);
            q.l4_offset = q.l4_offset.wrapping_add(r.below(64) as u16);
            q.ip_len = q.ip_len.wrapping_add(r.next_u64() as u16);
            q.l3_header_len = r.next_u64() as u16;
            q.l4 = [L4Kind::None, L4Kind::Tcp, L4Kind::Udp, L4Kind::Other][r.below(4) as usize];
            q.l3 = [L3Kind::None, L3Kind::Ipv4, L3Kind::Ipv6][r.below(3) as usize];
            let _ = verify_checksums(&buf, &q);
            let _ = insert_checksums(&mut buf, &q, true, true);
        }
        // The generator must actually reach the deep paths.
        assert!(l4_seen > 10_000, "{l4_seen}");
        assert!(l4_inserted > 5_000, "{l4_inserted}");
    }

    /// The transport block's own frames: for IPv4 and IPv6 GIDs, every header set the
    /// requester and responder emit and payloads from none to a 4096-byte MTU (padding and all),
    /// the metadata they carry into the eSwitch is what the parser reads from the bytes.
    #[test]
    fn a_roce_frames_parse_is_known_from_its_address() {
        use fld_abi::wire::roce::{
            ipv4_gid, AckKind, Aeth, BthRepr, IbHeaders, ImmDt, Reth, RoceAddress, SOURCE_PORT_BASE,
        };
        let v6 = |last: u8| {
            let mut g = [0u8; 16];
            g[..2].copy_from_slice(&[0xfe, 0x80]);
            g[15] = last;
            g
        };
        let gids = [
            (ipv4_gid([10, 0, 0, 1]), ipv4_gid([10, 0, 0, 2])),
            (v6(1), v6(2)),
        ];
        let bth = BthRepr {
            opcode: 0x0a,
            dest_qp: 0x123,
            psn: 77,
            ..Default::default()
        };
        let headers = [
            IbHeaders {
                bth,
                ..Default::default()
            },
            IbHeaders {
                bth,
                reth: Some(Reth {
                    virtual_address: 0x1000,
                    rkey: 5,
                    dma_length: 64,
                }),
                imm: Some(ImmDt(9)),
                ..Default::default()
            },
            IbHeaders {
                bth,
                aeth: Some(Aeth {
                    kind: AckKind::Ack { credits: 0x1f },
                    msn: 3,
                }),
                ..Default::default()
            },
        ];
        let mut frame = vec![0u8; 9216];
        let mut checked = 0;
        for (src_gid, dst_gid) in gids {
            let addr = RoceAddress {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                src_gid,
                dst_gid,
                src_port: SOURCE_PORT_BASE + 5,
                traffic_class: 0,
                hop_limit: 64,
                flow_label: 0,
            };
            for h in &headers {
                for payload in (0..=4096).step_by(61).chain([1, 2, 3, 4095, 4096]) {
                    let len = addr
                        .emit_with(h, payload, 7, &mut frame, |p| {
                            p.fill(0x5a);
                            Some(())
                        })
                        .expect("room");
                    let bytes = &frame[..len];
                    assert_eq!(parsed_roce(&addr, bytes), parse(bytes), "{payload} bytes");
                    checked += 1;
                }
            }
        }
        assert!(checked > 400, "{checked}");
    }
}
