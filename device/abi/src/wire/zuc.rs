//! The 64-byte request/response header of the ZUC look-aside service (FlexDriver paper §7,
//! "LTE Cipher Look-Aside Accelerator"): operation, the 3GPP COUNT/BEARER/DIRECTION inputs, the
//! data length in bits, a request ID the response echoes, the 128-bit key, a status and, for
//! integrity requests, the 128-EIA3 MAC. Requests travel as UDP payloads (port
//! [`ZUC_UDP_PORT`]) over FLD-E. Multi-byte fields are little-endian; the data follows the
//! header.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `"ZUC1"` |
//! | 4 | operation: 1 128-EEA3, 2 128-EIA3 |
//! | 5 | bearer (5 bits) |
//! | 6 | direction (1 bit) |
//! | 7 | status (responses) |
//! | 8..12 | COUNT |
//! | 12..16 | length in bits |
//! | 16..24 | request ID |
//! | 24..40 | key |
//! | 40..44 | MAC (128-EIA3 responses) |
//! | 44..64 | reserved |

use super::{Error, Result};

/// Bytes of the request/response header.
pub const HEADER_LEN: usize = 64;
/// Default UDP port of the service.
pub const ZUC_UDP_PORT: u16 = 5123;
/// "ZUC1": the header's first four bytes.
pub const MAGIC: [u8; 4] = *b"ZUC1";

/// Operations.
pub const OP_EEA3: u8 = 1;
pub const OP_EIA3: u8 = 2;

/// Response status.
pub const STATUS_OK: u8 = 0;
pub const STATUS_BAD_OP: u8 = 1;
/// The header's length in bits needs more data than the request carries.
pub const STATUS_BAD_LENGTH: u8 = 2;

mod field {
    pub const MAGIC: usize = 0;
    pub const OP: usize = 4;
    pub const BEARER: usize = 5;
    pub const DIRECTION: usize = 6;
    pub const STATUS: usize = 7;
    pub const COUNT: usize = 8;
    pub const LENGTH_BITS: usize = 12;
    pub const REQUEST_ID: usize = 16;
    pub const KEY: usize = 24;
    pub const MAC: usize = 40;
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A read/write view of a ZUC request or response: the header and the data after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZucHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ZucHeader<T> {
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        ZucHeader { buffer }
    }

    /// A view of a buffer that starts with a whole header carrying the magic.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::MAGIC..field::MAGIC + 4] != MAGIC {
            return Err(Error::Malformed);
        }
        Ok(ZucHeader { buffer })
    }

    pub fn op(&self) -> u8 {
        self.buffer.as_ref()[field::OP]
    }
    pub fn bearer(&self) -> u8 {
        self.buffer.as_ref()[field::BEARER]
    }
    pub fn direction(&self) -> u8 {
        self.buffer.as_ref()[field::DIRECTION]
    }
    pub fn status(&self) -> u8 {
        self.buffer.as_ref()[field::STATUS]
    }
    pub fn count(&self) -> u32 {
        le32(self.buffer.as_ref(), field::COUNT)
    }
    pub fn length_bits(&self) -> u32 {
        le32(self.buffer.as_ref(), field::LENGTH_BITS)
    }
    /// Bytes of data the length in bits covers.
    #[inline]
    pub fn data_len(&self) -> usize {
        (self.length_bits() as usize).div_ceil(8)
    }
    pub fn request_id(&self) -> u64 {
        let b = self.buffer.as_ref();
        u64::from_le_bytes(super::array(b, field::REQUEST_ID))
    }
    pub fn key(&self) -> [u8; 16] {
        super::array(self.buffer.as_ref(), field::KEY)
    }
    pub fn mac(&self) -> u32 {
        le32(self.buffer.as_ref(), field::MAC)
    }
    /// Everything after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// The data the length in bits names, if the buffer holds it all.
    pub fn data(&self) -> Option<&[u8]> {
        self.payload().get(..self.data_len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ZucHeader<T> {
    #[inline]
    pub fn set_status(&mut self, v: u8) {
        self.buffer.as_mut()[field::STATUS] = v;
    }
    #[inline]
    pub fn set_mac(&mut self, v: u32) {
        self.buffer.as_mut()[field::MAC..field::MAC + 4].copy_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
    /// The data the length in bits names, if the buffer holds it all.
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        let n = self.data_len();
        self.payload_mut().get_mut(..n)
    }
}

/// The meaning of a request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ZucRequest {
    pub op: u8,
    pub bearer: u8,
    pub direction: u8,
    pub count: u32,
    pub length_bits: u32,
    pub request_id: u64,
    pub key: [u8; 16],
}

impl ZucRequest {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &ZucHeader<T>) -> Self {
        ZucRequest {
            op: h.op(),
            bearer: h.bearer(),
            direction: h.direction(),
            count: h.count(),
            length_bits: h.length_bits(),
            request_id: h.request_id(),
            key: h.key(),
        }
    }

    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 64-byte header (status 0, MAC 0, reserved bytes 0).
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ZucHeader<T>) {
        let b = &mut h.buffer.as_mut()[..HEADER_LEN];
        b.fill(0);
        b[field::MAGIC..field::MAGIC + 4].copy_from_slice(&MAGIC);
        b[field::OP] = self.op;
        b[field::BEARER] = self.bearer;
        b[field::DIRECTION] = self.direction;
        b[field::COUNT..field::COUNT + 4].copy_from_slice(&self.count.to_le_bytes());
        b[field::LENGTH_BITS..field::LENGTH_BITS + 4]
            .copy_from_slice(&self.length_bits.to_le_bytes());
        b[field::REQUEST_ID..field::REQUEST_ID + 8].copy_from_slice(&self.request_id.to_le_bytes());
        b[field::KEY..field::KEY + 16].copy_from_slice(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_the_layout_of_the_table() {
        let r = ZucRequest {
            op: OP_EIA3,
            bearer: 0x15,
            direction: 1,
            count: 0x398a_59b4,
            length_bits: 797,
            request_id: 0x0102_0304_0506_0708,
            key: [0x17; 16],
        };
        let mut b = [0xaau8; HEADER_LEN + 100];
        r.emit(&mut ZucHeader::new_unchecked(&mut b[..]));
        assert_eq!(&b[..8], b"ZUC1\x02\x15\x01\x00");
        assert_eq!(&b[8..12], &0x398a_59b4u32.to_le_bytes());
        assert_eq!(&b[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
        let mut h = ZucHeader::new_checked(&mut b[..]).unwrap();
        assert_eq!(ZucRequest::parse(&h), r);
        assert_eq!(h.data_len(), 100);
        assert!(h.data().is_some());
        h.set_status(STATUS_BAD_LENGTH);
        h.set_mac(0xdead_beef);
        assert_eq!((h.status(), h.mac()), (STATUS_BAD_LENGTH, 0xdead_beef));
        assert_eq!(ZucHeader::new_checked(&b[..99]).unwrap().data(), None);
        assert_eq!(
            ZucHeader::new_checked(&b[..63]).err(),
            Some(Error::Truncated)
        );
        b[0] = b'X';
        assert_eq!(ZucHeader::new_checked(&b[..]).err(), Some(Error::Malformed));
    }
}
