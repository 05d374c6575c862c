//! Ethernet II frames (IEEE 802.3 §3.2 with the EtherType interpretation) and the 802.1Q VLAN
//! tag (IEEE 802.1Q §9.6). The FCS is not part of a frame here: NICs strip it.

use super::{array, be16, put_be16, Error, Result};

/// Destination, source, EtherType.
pub const HEADER_LEN: usize = 14;
/// Bytes of an 802.1Q tag (TCI and the inner EtherType).
pub const VLAN_TAG_LEN: usize = 4;

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
}

/// A read/write view of an Ethernet II frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// A view without checks: accessors may panic unless the buffer holds [`HEADER_LEN`] bytes.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// A view of a buffer that holds at least the header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(EthernetFrame { buffer })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        array(self.buffer.as_ref(), field::DST.start)
    }

    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        array(self.buffer.as_ref(), field::SRC.start)
    }

    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Everything after the 14-byte header (a VLAN tag, if any, included).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put_be16(self.buffer.as_mut(), field::ETHERTYPE, t);
    }

    /// Exchanges source and destination addresses (what a reflector does).
    #[inline]
    pub fn swap_addrs(&mut self) {
        let (dst, src) = self.buffer.as_mut()[..12].split_at_mut(6);
        dst.swap_with_slice(src);
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The meaning of an Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EthernetRepr {
    pub src_addr: [u8; 6],
    pub dst_addr: [u8; 6],
    pub ethertype: u16,
}

impl EthernetRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Self {
        EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        }
    }

    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

/// A read/write view of an 802.1Q tag: the 4 bytes after an Ethernet header whose EtherType is
/// [`super::ethertype::VLAN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VlanTag { buffer }
    }

    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < VLAN_TAG_LEN {
            return Err(Error::Truncated);
        }
        Ok(VlanTag { buffer })
    }

    /// Tag control information: priority (3 bits), drop eligible (1), VLAN ID (12).
    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    #[inline]
    pub fn vlan_id(&self) -> u16 {
        self.tci() & 0x0fff
    }

    #[inline]
    pub fn priority(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// EtherType of what follows the tag.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[VLAN_TAG_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        put_be16(self.buffer.as_mut(), 0, tci);
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put_be16(self.buffer.as_mut(), 2, t);
    }
}

/// The meaning of an 802.1Q tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VlanRepr {
    pub tci: u16,
    pub ethertype: u16,
}

impl VlanRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(tag: &VlanTag<T>) -> Self {
        VlanRepr {
            tci: tag.tci(),
            ethertype: tag.ethertype(),
        }
    }

    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut VlanTag<T>) {
        tag.set_tci(self.tci);
        tag.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ethertype;

    #[test]
    fn round_trip_and_truncation() {
        let mut buf = [0u8; 18];
        let repr = EthernetRepr {
            src_addr: [2, 0, 0, 0, 0, 1],
            dst_addr: [0xff; 6],
            ethertype: ethertype::VLAN,
        };
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        repr.emit(&mut f);
        let mut tag = VlanTag::new_checked(f.payload_mut()).unwrap();
        VlanRepr {
            tci: 0xa007,
            ethertype: ethertype::IPV6,
        }
        .emit(&mut tag);
        assert_eq!(
            &buf[..14],
            &[255, 255, 255, 255, 255, 255, 2, 0, 0, 0, 0, 1, 0x81, 0]
        );
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&f), repr);
        let t = VlanTag::new_checked(f.payload()).unwrap();
        assert_eq!(
            (t.vlan_id(), t.priority(), t.ethertype()),
            (7, 5, ethertype::IPV6)
        );
        assert_eq!(
            EthernetFrame::new_checked(&buf[..13]),
            Err(Error::Truncated)
        );
        assert_eq!(VlanTag::new_checked(&buf[14..17]), Err(Error::Truncated));
        let mut f = EthernetFrame::new_checked(&mut buf[..]).unwrap();
        f.swap_addrs();
        assert_eq!(
            (f.src_addr(), f.dst_addr()),
            ([0xff; 6], [2, 0, 0, 0, 0, 1])
        );
    }
}
