//! UDP headers (RFC 768) and their checksum over the IPv4 or IPv6 pseudo-header (RFC 768,
//! RFC 8200 §8.1).

use super::checksum::{internet_checksum, pseudo_header_v4, pseudo_header_v6};
use super::{be16, ip_proto, put_be16, Error, Result};

pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A read/write view of a UDP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// A view whose length field covers the header and fits the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = UdpPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let n = self.buffer.as_ref().len();
        if n < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len > n {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }

    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Header plus data, as the length field claims.
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The datagram as the length field delimits it (clipped to the buffer).
    #[inline]
    pub fn datagram(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[..usize::from(self.len()).clamp(HEADER_LEN, b.len())]
    }

    /// The data after the header, as the length field delimits it.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.datagram()[HEADER_LEN..]
    }

    /// Whether the checksum is right over the IPv4 pseudo-header (a zero checksum means none was
    /// sent, RFC 768, and passes).
    pub fn verify_checksum_v4(&self, src: &[u8; 4], dst: &[u8; 4]) -> bool {
        let d = self.datagram();
        self.checksum() == 0
            || internet_checksum(d, pseudo_header_v4(src, dst, ip_proto::UDP, d.len() as u32)) == 0
    }

    /// Whether the checksum is right over the IPv6 pseudo-header (zero is invalid there).
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        let d = self.datagram();
        self.checksum() != 0
            && internet_checksum(d, pseudo_header_v6(src, dst, ip_proto::UDP, d.len() as u32)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::SRC_PORT, v);
    }

    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::DST_PORT, v);
    }

    #[inline]
    pub fn set_len(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::LENGTH, v);
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    /// Exchanges the ports.
    #[inline]
    pub fn swap_ports(&mut self) {
        let (s, d) = (self.src_port(), self.dst_port());
        self.set_src_port(d);
        self.set_dst_port(s);
    }

    /// Computes the checksum over the IPv4 pseudo-header and the datagram (a result of 0 is sent
    /// as 0xFFFF, RFC 768).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: &[u8; 4], dst: &[u8; 4]) {
        self.set_checksum(0);
        let d = self.datagram();
        let c = internet_checksum(d, pseudo_header_v4(src, dst, ip_proto::UDP, d.len() as u32));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// As [`UdpPacket::fill_checksum_v4`] over the IPv6 pseudo-header.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let d = self.datagram();
        let c = internet_checksum(d, pseudo_header_v6(src, dst, ip_proto::UDP, d.len() as u32));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let n = self.buffer.as_ref().len();
        let end = usize::from(self.len()).clamp(HEADER_LEN, n);
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The meaning of a UDP header (length and checksum follow from the datagram).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl UdpRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Self {
        UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        }
    }

    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header for `payload_len` bytes of data, checksum 0 (none, or for a NIC or
    /// [`UdpPacket::fill_checksum_v4`] to fill).
    #[inline]
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut UdpPacket<T>,
        payload_len: usize,
    ) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len((HEADER_LEN + payload_len).min(0xffff) as u16);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_agree_with_an_independent_writer() {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ipv4([192, 168, 1, 10], [10, 0, 0, 7], 64)
            .udp(5353, 53)
            .write(&mut v, b"hello, world")
            .unwrap();
        let mut u = v[20..].to_vec();
        let p = UdpPacket::new_checked(&u[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (5353, 53, 20));
        assert_eq!(p.payload(), b"hello, world");
        assert!(p.verify_checksum_v4(&[192, 168, 1, 10], &[10, 0, 0, 7]));
        assert!(!p.verify_checksum_v4(&[192, 168, 1, 11], &[10, 0, 0, 7]));
        let want = p.checksum();
        let mut q = UdpPacket::new_unchecked(&mut u[..]);
        UdpRepr {
            src_port: 5353,
            dst_port: 53,
        }
        .emit_header(&mut q, 12);
        q.fill_checksum_v4(&[192, 168, 1, 10], &[10, 0, 0, 7]);
        assert_eq!(q.checksum(), want);
        assert_eq!(&u[..], &v[20..]);
    }

    #[test]
    fn lengths_are_checked() {
        let mut b = [0u8; 12];
        b[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(UdpPacket::new_checked(&b[..]).err(), Some(Error::Malformed));
        b[4..6].copy_from_slice(&13u16.to_be_bytes());
        assert_eq!(UdpPacket::new_checked(&b[..]).err(), Some(Error::Truncated));
        assert_eq!(
            UdpPacket::new_checked(&b[..7]).err(),
            Some(Error::Truncated)
        );
        // Unchecked views clip instead of panicking.
        assert_eq!(UdpPacket::new_unchecked(&b[..]).payload().len(), 4);
        b[4..6].copy_from_slice(&0u16.to_be_bytes());
        assert_eq!(UdpPacket::new_unchecked(&b[..]).payload().len(), 0);
    }
}
