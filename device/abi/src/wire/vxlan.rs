//! VXLAN headers (RFC 7348 §5): 8 bytes after the outer UDP header — flags with the I bit (the
//! VNI is valid), reserved bits, the 24-bit VXLAN network identifier.

use super::{Error, Result};

pub const HEADER_LEN: usize = 8;
/// IANA-assigned UDP destination port of VXLAN.
pub const UDP_PORT: u16 = 4789;
/// The I flag: the VNI field is valid.
const FLAG_I: u8 = 0x08;

/// A read/write view of a VXLAN header and the inner frame after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VxlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanHeader<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        VxlanHeader { buffer }
    }

    /// A view of a buffer holding at least the 8-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(VxlanHeader { buffer })
    }

    /// Whether the I flag says the VNI is valid (frames without it are not VXLAN, RFC 7348 §5).
    #[inline]
    pub fn vni_valid(&self) -> bool {
        self.buffer.as_ref()[0] & FLAG_I != 0
    }

    #[inline]
    pub fn vni(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[4], b[5], b[6]])
    }

    /// The encapsulated Ethernet frame.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VxlanHeader<T> {
    /// Sets the I flag and the VNI (its low 24 bits), clearing every reserved bit.
    #[inline]
    pub fn set_vni(&mut self, vni: u32) {
        let b = self.buffer.as_mut();
        b[..HEADER_LEN].fill(0);
        b[0] = FLAG_I;
        b[4..7].copy_from_slice(&vni.to_be_bytes()[1..]);
    }
}

/// The meaning of a VXLAN header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VxlanRepr {
    pub vni: u32,
}

impl VxlanRepr {
    /// `None` when the I flag is clear.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &VxlanHeader<T>) -> Option<Self> {
        h.vni_valid().then(|| VxlanRepr { vni: h.vni() })
    }

    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut VxlanHeader<T>) {
        h.set_vni(self.vni);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut b = [0xffu8; 10];
        VxlanRepr { vni: 0x12_3456 }.emit(&mut VxlanHeader::new_checked(&mut b[..]).unwrap());
        assert_eq!(&b[..8], &[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        let h = VxlanHeader::new_checked(&b[..]).unwrap();
        assert_eq!(VxlanRepr::parse(&h), Some(VxlanRepr { vni: 0x12_3456 }));
        assert_eq!(h.payload(), &[0xff, 0xff]);
        b[0] = 0;
        assert_eq!(
            VxlanRepr::parse(&VxlanHeader::new_checked(&b[..]).unwrap()),
            None
        );
        assert_eq!(
            VxlanHeader::new_checked(&b[..7]).err(),
            Some(Error::Truncated)
        );
    }
}
