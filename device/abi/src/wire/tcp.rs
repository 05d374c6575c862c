//! TCP headers (RFC 793 §3.1, RFC 9293): ports, sequence numbers, data offset and flags. Options
//! are carried but not interpreted.

use super::checksum::{internet_checksum, pseudo_header_v4, pseudo_header_v6};
use super::{be16, be32, ip_proto, put_be16, put_be32, Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
}

/// Control bits.
pub mod flags {
    pub const FIN: u8 = 1 << 0;
    pub const SYN: u8 = 1 << 1;
    pub const RST: u8 = 1 << 2;
    pub const PSH: u8 = 1 << 3;
    pub const ACK: u8 = 1 << 4;
    pub const URG: u8 = 1 << 5;
}

/// A read/write view of a TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// A view whose header (options included) lies within the buffer.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = TcpPacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let n = self.buffer.as_ref().len();
        if n < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.header_len() < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if self.header_len() > n {
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

    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ)
    }

    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK)
    }

    /// Data offset in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    #[inline]
    pub fn window_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    #[inline]
    pub fn urgent_at(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }

    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.header_len().min(b.len())..]
    }

    /// Whether the checksum over the IPv4 pseudo-header and the whole buffer is right.
    pub fn verify_checksum_v4(&self, src: &[u8; 4], dst: &[u8; 4]) -> bool {
        let b = self.buffer.as_ref();
        internet_checksum(b, pseudo_header_v4(src, dst, ip_proto::TCP, b.len() as u32)) == 0
    }

    /// Whether the checksum over the IPv6 pseudo-header and the whole buffer is right.
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        let b = self.buffer.as_ref();
        internet_checksum(b, pseudo_header_v6(src, dst, ip_proto::TCP, b.len() as u32)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::DST_PORT, v);
    }
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        put_be32(self.buffer.as_mut(), field::SEQ, v);
    }
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        put_be32(self.buffer.as_mut(), field::ACK, v);
    }
    /// Data offset in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, v: usize) {
        self.buffer.as_mut()[field::DATA_OFFSET] = ((v / 4) as u8) << 4;
    }
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    #[inline]
    pub fn set_window_len(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::WINDOW, v);
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    #[inline]
    pub fn set_urgent_at(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::URGENT, v);
    }
    /// Computes the checksum over the IPv4 pseudo-header and the whole buffer (the segment).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: &[u8; 4], dst: &[u8; 4]) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let c = internet_checksum(b, pseudo_header_v4(src, dst, ip_proto::TCP, b.len() as u32));
        self.set_checksum(c);
    }
}

/// The meaning of a TCP header without options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq_number: u32,
    pub ack_number: u32,
    pub flags: u8,
    pub window_len: u16,
}

impl TcpRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Self {
        TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window_len: p.window_len(),
        }
    }

    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with checksum 0.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut TcpPacket<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.set_header_len(HEADER_LEN);
        p.set_flags(self.flags);
        p.set_window_len(self.window_len);
        p.set_checksum(0);
        p.set_urgent_at(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_against_an_independent_writer() {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ipv4([1, 2, 3, 4], [5, 6, 7, 8], 64)
            .tcp(443, 50000, 0x1234_5678, 4096)
            .syn()
            .write(&mut v, b"data")
            .unwrap();
        let seg = &v[20..];
        let p = TcpPacket::new_checked(seg).unwrap();
        let r = TcpRepr::parse(&p);
        assert_eq!(
            (r.src_port, r.dst_port, r.seq_number, r.window_len),
            (443, 50000, 0x1234_5678, 4096)
        );
        assert_eq!(r.flags & flags::SYN, flags::SYN);
        assert_eq!(p.payload(), b"data");
        assert!(p.verify_checksum_v4(&[1, 2, 3, 4], &[5, 6, 7, 8]));
        let mut w = seg.to_vec();
        let mut q = TcpPacket::new_unchecked(&mut w[..]);
        r.emit(&mut q);
        q.fill_checksum_v4(&[1, 2, 3, 4], &[5, 6, 7, 8]);
        assert_eq!(&w[..], seg);
        let mut b = seg.to_vec();
        b[12] = 0x40;
        assert_eq!(TcpPacket::new_checked(&b[..]).err(), Some(Error::Malformed));
        b[12] = 0xf0;
        assert_eq!(TcpPacket::new_checked(&b[..]).err(), Some(Error::Truncated));
    }
}
