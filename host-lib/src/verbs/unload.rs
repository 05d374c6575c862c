//! uRDMA's unload path (Faster Offloads by Unloading them – The RDMA Case, §3.1), the parts
//! both ends share:
//! * the **uMTT**: every registration of this context (key, PD, range, rights), added by
//!   `reg_mr` and removed by `dereg_mr`. The target's CPU checks an unloaded WRITE against it
//!   as the RNIC checks an offloaded one, and refuses it for the same reasons, so unloading
//!   keeps the security of the offload path;
//! * the **staging-slot format**: an unloaded WRITE travels as a WRITE WITH IMMEDIATE into the
//!   next slot of the target's staging buffer, its payload the destination virtual address
//!   (8 bytes, little-endian) followed by the data; the immediate is the stag (the rkey); the
//!   length comes from the receive completion. [`write_slot`] is its one writer, [`read_slot`]
//!   its one reader.
//!
//! Left out so far: the staging buffer's exchange at setup, the initiator's slot cursor and
//! credits, the decision module (§3.2), the in-RNIC variant (§5) and completion parity.

use std::collections::HashMap;

use fld_driver::DmaBuffer;

use super::{access, Mr, WcStatus};

/// Bytes before an unloaded WRITE's data in its staging slot: the destination address.
pub const SLOT_HEADER: usize = 8;

/// Writes an unloaded WRITE of `data` to `dest` into `slot`; the bytes the WRITE WITH
/// IMMEDIATE carries, or `None` when it does not fit.
pub fn write_slot(slot: &mut [u8], dest: u64, data: &[u8]) -> Option<usize> {
    let n = SLOT_HEADER + data.len();
    let out = slot.get_mut(..n)?;
    out[..SLOT_HEADER].copy_from_slice(&dest.to_le_bytes());
    out[SLOT_HEADER..].copy_from_slice(data);
    Some(n)
}

/// Reads the slot an unloaded WRITE of `received` bytes filled: its destination address and
/// data; `None` when it is shorter than the header (a peer can send anything).
pub fn read_slot(slot: &[u8], received: usize) -> Option<(u64, &[u8])> {
    let bytes = slot.get(..received)?;
    let (dest, data) = bytes.split_at_checked(SLOT_HEADER)?;
    Some((u64::from_le_bytes(dest.try_into().ok()?), data))
}

/// Why the RNIC — and so the uMTT — refuses a remote WRITE. Each is the RNIC's remote access
/// error (`docs/nic-interface.md` §15.6), which the initiator sees as [`WcStatus::RemAccessErr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No region has the key (never registered, or deregistered).
    UnknownKey,
    /// The region belongs to another protection domain than the QP the WRITE came on.
    OtherPd,
    /// The region does not grant remote write.
    NoWriteRight,
    /// The range is not inside the region.
    OutOfRange,
}

impl Refusal {
    /// What the initiator's completion says, as for the offloaded WRITE.
    pub fn status(self) -> WcStatus {
        WcStatus::RemAccessErr
    }
}

/// One registration as the uMTT keeps it.
struct Registration {
    pd: u32,
    addr: u64,
    len: u64,
    access: u32,
    buf: DmaBuffer,
}

/// The map of a context's registrations the target's CPU checks unloaded WRITEs against.
#[derive(Default)]
pub struct UMtt {
    regions: HashMap<u32, Registration>,
}

impl UMtt {
    /// `mr` was registered in PD `pd`.
    pub fn register(&mut self, pd: u32, mr: &Mr) {
        self.regions.insert(
            mr.rkey(),
            Registration {
                pd,
                addr: mr.addr(),
                len: mr.len() as u64,
                access: mr.region.access,
                buf: mr.buf.clone(),
            },
        );
    }

    /// The region with key `rkey` was deregistered.
    pub fn deregister(&mut self, rkey: u32) {
        self.regions.remove(&rkey);
    }

    /// The RNIC's checks for a remote WRITE of `len` bytes at `addr` with `rkey`, arriving on a
    /// QP of PD `pd`.
    pub fn check(&self, pd: u32, rkey: u32, addr: u64, len: u64) -> Result<(), Refusal> {
        let r = self.regions.get(&rkey).ok_or(Refusal::UnknownKey)?;
        if r.pd != pd {
            return Err(Refusal::OtherPd);
        }
        if r.access & access::REMOTE_WRITE == 0 {
            return Err(Refusal::NoWriteRight);
        }
        let end = addr.checked_add(len).ok_or(Refusal::OutOfRange)?;
        if addr < r.addr || end > r.addr + r.len {
            return Err(Refusal::OutOfRange);
        }
        Ok(())
    }

    /// Checks an unloaded WRITE and, if the RNIC would have taken it, copies `data` to `addr`
    /// (the memcpy that replaces the RNIC's placement).
    pub fn place(&self, pd: u32, rkey: u32, addr: u64, data: &[u8]) -> Result<(), Refusal> {
        self.check(pd, rkey, addr, data.len() as u64)?;
        let r = &self.regions[&rkey];
        r.buf.write((addr - r.addr) as usize, data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_carries_the_destination_then_the_data() {
        let mut slot = [0u8; 32];
        let n = write_slot(&mut slot, 0x1122_3344_5566_7788, b"sixteen bytes!!!").unwrap();
        assert_eq!(n, 24);
        assert_eq!(&slot[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(
            read_slot(&slot, n),
            Some((0x1122_3344_5566_7788, &b"sixteen bytes!!!"[..]))
        );
        // Too big for the slot; shorter than the header; longer than the slot.
        assert_eq!(write_slot(&mut slot, 0, &[0; 25]), None);
        assert_eq!(read_slot(&slot, 7), None);
        assert_eq!(read_slot(&slot, 33), None);
        assert_eq!(read_slot(&slot, 8), Some((0x1122_3344_5566_7788, &[][..])));
    }
}
