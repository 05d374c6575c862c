//! Packet headers as typed views over byte buffers, in the manner of smoltcp's `wire` module:
//! each header is a `Packet<T: AsRef<[u8]>>` (field offsets are constants of its module), a
//! constructor `new_checked` validates the buffer once so that no accessor can panic afterwards,
//! and a `Repr` holds the header's meaning, parsed from a view and emitted into one. Every
//! component that reads or writes these headers — the NIC's parser and VXLAN encapsulation, the
//! accelerators, the host library's generators, tests and fuzz targets — goes through here.
//!
//! Left out: IPv4 options and IPv6 extension headers are carried (IHL is honoured) but not
//! interpreted; TCP options likewise; ARP only for IPv4 over Ethernet; no ICMP or IGMP.

pub mod arp;
pub mod checksum;
pub mod coap;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod roce;
pub mod tcp;
pub mod udp;
pub mod vxlan;
pub mod zuc;

pub use checksum::internet_checksum;
pub use ethernet::{EthernetFrame, EthernetRepr, VlanRepr, VlanTag};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use tcp::{TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};
pub use vxlan::{VxlanHeader, VxlanRepr};

/// Why a buffer is not a valid header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the header (or than the length a field claims).
    Truncated,
    /// A field is out of its range (version, header length, a length below the header's).
    Malformed,
}

pub type Result<T> = core::result::Result<T, Error>;

/// EtherType values (IEEE 802.3, IANA).
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
}

/// IP protocol numbers (IANA).
pub mod ip_proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6_HOP_BY_HOP: u8 = 0;
}

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn put_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put_be32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// Where the headers of a UDP datagram sit in an Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpOffsets {
    /// Start of the IPv4 or IPv6 header.
    pub ip: usize,
    /// Start of the UDP header.
    pub udp: usize,
    /// End of the IP datagram (the total length the IP header claims).
    pub ip_end: usize,
    /// End of the UDP datagram (its length field; RFC 768: the data is the first `length − 8`
    /// bytes after the header, even when the IP payload goes on).
    pub udp_end: usize,
    pub ipv6: bool,
}

impl UdpOffsets {
    /// Start of the UDP payload.
    #[inline]
    pub fn payload(&self) -> usize {
        self.udp + udp::HEADER_LEN
    }

    /// The UDP payload: what an application above UDP sees.
    #[inline]
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        self.payload()..self.udp_end
    }
}

/// Finds the UDP datagram of an Ethernet II frame (at most one 802.1Q tag) that carries a whole
/// IPv4 datagram (not a fragment) or an IPv6 packet whose next header is UDP, with consistent
/// lengths throughout: how an accelerator or an application finds its payload without a NIC's
/// parser. `None` for anything else.
pub fn udp_offsets(frame: &[u8]) -> Option<UdpOffsets> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let (mut ip, mut kind) = (ethernet::HEADER_LEN, eth.ethertype());
    if kind == ethertype::VLAN {
        kind = VlanTag::new_checked(eth.payload()).ok()?.ethertype();
        ip += ethernet::VLAN_TAG_LEN;
    }
    let l3 = frame.get(ip..)?;
    let (udp, ip_end, ipv6) = match kind {
        ethertype::IPV4 => {
            let p = Ipv4Packet::new_checked(l3).ok()?;
            if p.is_fragment() || p.next_header() != ip_proto::UDP {
                return None;
            }
            (ip + p.header_len(), ip + usize::from(p.total_len()), false)
        }
        ethertype::IPV6 => {
            let p = Ipv6Packet::new_checked(l3).ok()?;
            if p.next_header() != ip_proto::UDP {
                return None;
            }
            (ip + ipv6::HEADER_LEN, ip + p.total_len(), true)
        }
        _ => return None,
    };
    let datagram = UdpPacket::new_checked(frame.get(udp..ip_end)?).ok()?;
    Some(UdpOffsets {
        ip,
        udp,
        ip_end,
        udp_end: udp + usize::from(datagram.len()),
        ipv6,
    })
}

/// Ethernet, IPv4 (20 bytes, no options) and UDP: the header stack every UDP generator of the
/// project writes (echo traffic, ZUC requests, CoAP messages, VXLAN outer headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthIpv4UdpRepr {
    pub eth: EthernetRepr,
    pub ip: Ipv4Repr,
    pub udp: UdpRepr,
}

impl EthIpv4UdpRepr {
    /// Bytes of the three headers.
    pub const HEADER_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

    /// Writes the headers at the start of `frame`, with IPv4 and UDP lengths covering the whole
    /// rest of `frame`. With `checksums` the IPv4 header and UDP checksums are computed over
    /// the payload already in place; without, both are left zero (for a NIC to insert, or none
    /// for UDP as RFC 768 allows). Returns false (nothing written) when `frame` is shorter than
    /// the headers or longer than an IPv4 datagram can be.
    #[inline]
    pub fn emit(&self, frame: &mut [u8], checksums: bool) -> bool {
        let Some(ip_len) = frame
            .len()
            .checked_sub(ethernet::HEADER_LEN)
            .filter(|l| *l >= ipv4::HEADER_LEN + udp::HEADER_LEN && *l <= 0xffff)
        else {
            return false;
        };
        let udp_len = ip_len - ipv4::HEADER_LEN;
        // The headers are written into a fixed-size block (so the field writes need no bounds
        // checks) and copied once; generators call this for every frame.
        let mut h = [0u8; Self::HEADER_LEN];
        let (eth, rest) = h.split_at_mut(ethernet::HEADER_LEN);
        let (ip, udp) = rest.split_at_mut(ipv4::HEADER_LEN);
        self.eth.emit(&mut EthernetFrame::new_unchecked(eth));
        let ip_repr = Ipv4Repr {
            payload_len: udp_len,
            next_header: ip_proto::UDP,
            ..self.ip
        };
        ip_repr.emit(&mut Ipv4Packet::new_unchecked(ip), checksums);
        self.udp.emit_header(
            &mut UdpPacket::new_unchecked(udp),
            udp_len - udp::HEADER_LEN,
        );
        frame[..Self::HEADER_LEN].copy_from_slice(&h);
        if checksums {
            let datagram = &mut frame[ethernet::HEADER_LEN + ipv4::HEADER_LEN..];
            let pseudo = checksum::pseudo_header_v4(
                &self.ip.src_addr,
                &self.ip.dst_addr,
                ip_proto::UDP,
                udp_len as u32,
            );
            let c = internet_checksum(datagram, pseudo);
            // A computed 0 is sent as all ones (RFC 768).
            UdpPacket::new_unchecked(datagram).set_checksum(if c == 0 { 0xffff } else { c });
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_headers_match_an_independent_builder() {
        let payload: Vec<u8> = (0..37u8).collect();
        let repr = EthIpv4UdpRepr {
            eth: EthernetRepr {
                src_addr: [2, 0, 0, 0, 0, 1],
                dst_addr: [2, 0, 0, 0, 0, 2],
                ethertype: ethertype::IPV4,
            },
            ip: Ipv4Repr {
                src_addr: [10, 0, 0, 1],
                dst_addr: [10, 0, 0, 2],
                hop_limit: 64,
                dont_frag: true,
                ..Ipv4Repr::default()
            },
            udp: UdpRepr {
                src_port: 1234,
                dst_port: 7,
            },
        };
        let mut frame = vec![0u8; EthIpv4UdpRepr::HEADER_LEN + payload.len()];
        frame[EthIpv4UdpRepr::HEADER_LEN..].copy_from_slice(&payload);
        assert!(repr.emit(&mut frame, true));
        let mut want = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1234, 7)
            .write(&mut want, &payload)
            .unwrap();
        // etherparse sets DF and identification 0 as we do.
        assert_eq!(frame, want);
        assert!(!repr.emit(&mut frame[..41], true));
        let o = udp_offsets(&frame).unwrap();
        assert_eq!(
            (o.ip, o.udp, o.ip_end, o.ipv6),
            (14, 34, frame.len(), false)
        );
        assert_eq!(&frame[o.payload()..], &payload[..]);
        assert_eq!(&frame[o.payload_range()], &payload[..]);
        // A UDP length shorter than the IP payload: the datagram ends there (RFC 768).
        let mut f = frame.clone();
        f[38..40].copy_from_slice(&(8u16 + 3).to_be_bytes());
        let o = udp_offsets(&f).unwrap();
        assert_eq!((o.ip_end, o.udp_end), (frame.len(), 34 + 11));
        assert_eq!(&f[o.payload_range()], &payload[..3]);
        // A fragment, a truncated datagram, a lying UDP length: not UDP datagrams.
        let mut f = frame.clone();
        Ipv4Packet::new_unchecked(&mut f[14..]).set_frag(false, true, 0);
        assert_eq!(udp_offsets(&f), None);
        assert_eq!(udp_offsets(&frame[..frame.len() - 1]), None);
        let mut f = frame.clone();
        f[38..40].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(udp_offsets(&f), None);
    }
}
