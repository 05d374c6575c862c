//! IPv6 fixed headers (RFC 8200 §3). Extension headers are not walked: the next-header field is
//! reported as it stands.

use super::{array, be16, be32, put_be16, put_be32, Error, Result};

pub const HEADER_LEN: usize = 40;

mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// A read/write view of an IPv6 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// A view of a whole packet ([`Ipv6Packet::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Ipv6Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// A view whose fixed header is present with version 6, the payload length unchecked.
    #[inline]
    pub fn new_checked_header(buffer: T) -> Result<Self> {
        let p = Ipv6Packet { buffer };
        p.check_header()?;
        Ok(p)
    }

    #[inline]
    pub fn check_header(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// [`Ipv6Packet::check_header`], and the payload length within the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        if self.total_len() > self.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), field::VER_TC_FLOW) >> 4) as u8
    }

    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }

    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// Header plus payload length as the header claims it.
    #[inline]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::SRC)
    }

    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::DST)
    }

    /// The payload as the header claims it, clipped to the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..self.total_len().min(b.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Version 6 with the traffic class and flow label given.
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = 6u32 << 28 | u32::from(traffic_class) << 20 | (flow_label & 0x000f_ffff);
        put_be32(self.buffer.as_mut(), field::VER_TC_FLOW, v);
    }

    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }

    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }

    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::SRC..field::SRC + 16].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::DST..field::DST + 16].copy_from_slice(&a);
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len().min(self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The meaning of an IPv6 fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Ipv6Repr {
    pub src_addr: [u8; 16],
    pub dst_addr: [u8; 16],
    pub next_header: u8,
    pub payload_len: usize,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Ipv6Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Self {
        Ipv6Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        }
    }

    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv6Packet<T>) {
        p.set_version_tc_flow(self.traffic_class, self.flow_label);
        p.set_payload_len(self.payload_len.min(0xffff) as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_against_an_independent_writer() {
        let s: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let d: [u8; 16] = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
        ];
        let mut v = Vec::new();
        etherparse::PacketBuilder::ipv6(s, d, 47)
            .tcp(1, 2, 3, 4)
            .write(&mut v, &[9; 5])
            .unwrap();
        let p = Ipv6Packet::new_checked(&v[..]).unwrap();
        let r = Ipv6Repr::parse(&p);
        assert_eq!(
            (
                r.src_addr,
                r.dst_addr,
                r.next_header,
                r.payload_len,
                r.hop_limit
            ),
            (s, d, 6, 25, 47)
        );
        assert_eq!(p.payload().len(), 25);
        let mut w = vec![0u8; v.len()];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut w[..]));
        assert_eq!(&w[..40], &v[..40]);
        assert_eq!(
            Ipv6Packet::new_checked(&v[..39]).err(),
            Some(Error::Truncated)
        );
        assert_eq!(
            Ipv6Packet::new_checked(&v[..64]).err(),
            Some(Error::Truncated)
        );
        let h = Ipv6Packet::new_checked_header(&v[..64]).unwrap();
        assert_eq!(h.payload().len(), 24);
        let mut b = v.clone();
        b[0] = 0x40;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).err(),
            Some(Error::Malformed)
        );
    }
}
