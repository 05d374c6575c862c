//! IPv4 headers (RFC 791 §3.1). Options are carried (the header length honours IHL) but not
//! interpreted.

use super::checksum::internet_checksum;
use super::{array, be16, put_be16, Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// A read/write view of an IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view without checks: accessors may panic unless [`Ipv4Packet::check_header`] holds.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// A view of a whole, consistent packet ([`Ipv4Packet::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Ipv4Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// A view whose header (options included) is present and sane ([`Ipv4Packet::check_header`]),
    /// while the total length may still disagree with the buffer: what a NIC's parser needs to
    /// report the addresses of a truncated datagram.
    #[inline]
    pub fn new_checked_header(buffer: T) -> Result<Self> {
        let p = Ipv4Packet { buffer };
        p.check_header()?;
        Ok(p)
    }

    /// Version 4, IHL at least 5, and the header with its options within the buffer.
    #[inline]
    pub fn check_header(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 || self.header_len() < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if self.header_len() > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// [`Ipv4Packet::check_header`], and a total length that covers the header and fits the
    /// buffer (bytes beyond it are link-layer padding).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        self.check_header()?;
        let total = self.total_len() as usize;
        if total < self.header_len() {
            return Err(Error::Malformed);
        }
        if total > self.buffer.as_ref().len() {
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
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total length of the datagram (header and payload) as the header claims it.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }

    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }

    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_DF != 0
    }

    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field counts 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FRAG_OFFSET_MASK) << 3
    }

    /// A fragment: MF set or a non-zero offset (RFC 791 §3.2).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol field.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }

    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        array(self.buffer.as_ref(), field::SRC)
    }

    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        array(self.buffer.as_ref(), field::DST)
    }

    /// The header (options included).
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        internet_checksum(self.header(), 0) == 0
    }

    /// The payload: from the end of the header to the total length, clipped to the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let (start, end) = self.payload_range(b.len());
        &b[start..end]
    }

    fn payload_range(&self, len: usize) -> (usize, usize) {
        let end = usize::from(self.total_len()).min(len);
        (self.header_len().min(end), end)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Version 4 and a header of `header_len` bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::LENGTH, v);
    }

    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::IDENT, v);
    }

    /// Flags and fragment offset (`offset` in bytes, a multiple of 8).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = (if dont_frag { FLAG_DF } else { 0 })
            | (if more_frags { FLAG_MF } else { 0 })
            | ((offset >> 3) & FRAG_OFFSET_MASK);
        put_be16(self.buffer.as_mut(), field::FLAGS_FRAG, v);
    }

    /// Makes the header that of a whole datagram: MF and the fragment offset cleared, DF and the
    /// reserved bit kept (RFC 791 §3.2, reassembly).
    pub fn clear_frag(&mut self) {
        let v = be16(self.buffer.as_ref(), field::FLAGS_FRAG) & !(FLAG_MF | FRAG_OFFSET_MASK);
        put_be16(self.buffer.as_mut(), field::FLAGS_FRAG, v);
    }

    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), field::CHECKSUM, v);
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::SRC..field::SRC + 4].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::DST..field::DST + 4].copy_from_slice(&a);
    }

    /// Exchanges source and destination addresses.
    #[inline]
    pub fn swap_addrs(&mut self) {
        let (src, dst) = (self.src_addr(), self.dst_addr());
        self.set_src_addr(dst);
        self.set_dst_addr(src);
    }

    /// Computes and stores the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = internet_checksum(self.header(), 0);
        self.set_checksum(c);
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.buffer.as_ref().len();
        let (start, end) = self.payload_range(len);
        &mut self.buffer.as_mut()[start..end]
    }
}

/// The meaning of an IPv4 header without options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Ipv4Repr {
    pub src_addr: [u8; 4],
    pub dst_addr: [u8; 4],
    pub next_header: u8,
    /// Bytes after the header.
    pub payload_len: usize,
    pub hop_limit: u8,
    pub ident: u16,
    pub dscp_ecn: u8,
    pub dont_frag: bool,
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
}

impl Ipv4Repr {
    /// The meaning of a checked packet's header (options are not kept).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Self {
        Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.total_len()).saturating_sub(p.header_len()),
            hop_limit: p.hop_limit(),
            ident: p.ident(),
            dscp_ecn: p.dscp_ecn(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
        }
    }

    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header; with `checksum` the header checksum, else 0.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>, checksum: bool) {
        p.set_version_and_header_len(HEADER_LEN);
        p.set_dscp_ecn(self.dscp_ecn);
        p.set_total_len((HEADER_LEN + self.payload_len).min(0xffff) as u16);
        p.set_ident(self.ident);
        p.set_frag(self.dont_frag, self.more_frags, self.frag_offset);
        p.set_hop_limit(self.hop_limit);
        p.set_next_header(self.next_header);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        if checksum {
            p.fill_checksum();
        } else {
            p.set_checksum(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ip_proto;

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ipv4([192, 168, 1, 10], [10, 0, 0, 7], 33)
            .udp(5, 6)
            .write(&mut v, &[1, 2, 3, 4])
            .unwrap();
        v
    }

    #[test]
    fn reads_what_an_independent_writer_wrote_and_writes_the_same() {
        let v = sample();
        let p = Ipv4Packet::new_checked(&v[..]).unwrap();
        let r = Ipv4Repr::parse(&p);
        assert_eq!(
            (
                r.src_addr,
                r.dst_addr,
                r.next_header,
                r.payload_len,
                r.hop_limit
            ),
            ([192, 168, 1, 10], [10, 0, 0, 7], ip_proto::UDP, 12, 33)
        );
        assert!(p.verify_checksum() && !p.is_fragment() && p.dont_frag());
        assert_eq!(p.payload().len(), 12);
        let mut w = vec![0u8; v.len()];
        let mut q = Ipv4Packet::new_unchecked(&mut w[..]);
        r.emit(&mut q, true);
        assert_eq!(&w[..20], &v[..20]);
    }

    #[test]
    fn every_inconsistency_is_named_and_nothing_panics() {
        let v = sample();
        assert_eq!(
            Ipv4Packet::new_checked(&v[..19]).err(),
            Some(Error::Truncated)
        );
        let mut b = v.clone();
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).err(),
            Some(Error::Malformed)
        );
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).err(),
            Some(Error::Malformed)
        );
        b[0] = 0x4f; // a 60-byte header in a 32-byte buffer
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).err(),
            Some(Error::Truncated)
        );
        let mut b = v.clone();
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).err(),
            Some(Error::Malformed)
        );
        b[2..4].copy_from_slice(&33u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).err(),
            Some(Error::Truncated)
        );
        // The header alone still reads, and the payload is clipped, not a panic.
        let p = Ipv4Packet::new_checked_header(&b[..]).unwrap();
        assert_eq!((p.total_len(), p.payload().len()), (33, 12));
        b[2..4].copy_from_slice(&3u16.to_be_bytes());
        let p = Ipv4Packet::new_checked_header(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 0);
        // Padding after the datagram is fine.
        let mut padded = v.clone();
        padded.resize(60, 0);
        assert_eq!(
            Ipv4Packet::new_checked(&padded[..])
                .unwrap()
                .payload()
                .len(),
            12
        );
    }

    #[test]
    fn fragment_fields() {
        let mut b = sample();
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_frag(false, true, 1480);
        assert!(p.is_fragment() && p.more_frags() && !p.dont_frag());
        assert_eq!(p.frag_offset(), 1480);
        p.set_frag(true, false, 0);
        assert!(!p.is_fragment());
        p.set_frag(false, false, 8);
        assert!(p.is_fragment());
        p.set_frag(true, true, 64);
        p.clear_frag();
        assert!(!p.is_fragment() && p.dont_frag());
    }
}
