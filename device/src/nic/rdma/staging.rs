//! A queue pair's staging ring: uRDMA's in-RNIC unload path (Faster Offloads by Unloading
//! them – The RDMA Case, §5, proposed there and built here; `docs/nic-interface.md` §18). The
//! host gives the ring as a QP attribute (SET_QP_STAGING); the responder writes a small WRITE
//! whose translation is not on chip into the next slot instead of fetching the translation over
//! PCIe, and the host's CPU — close to memory and its own page tables — does the last copy. The
//! NIC decides on what it knows, its own cache, where the software path's initiator must guess.
//!
//! Left out: staging multi-packet WRITEs and WRITEs with immediate; a ring on a QP that reorders,
//! shares an RQ or is a StaR client (SET_QP_STAGING refuses them).

use fld_abi::nic::STAGED_WRITE_HEADER;

/// The ring as the NIC holds it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Staging {
    /// The region the ring lives in (the QP's PD, local write).
    pub lkey: u32,
    pub addr: u64,
    pub log_slots: u8,
    pub log_slot_bytes: u8,
    /// Slots written (16 bits, wrapping as the doorbell's consumer counter does).
    pub produced: u16,
}

impl Staging {
    pub fn slots(&self) -> u32 {
        1 << self.log_slots
    }

    /// The most data bytes a slot takes after its header.
    pub fn payload(&self) -> usize {
        (1usize << self.log_slot_bytes) - STAGED_WRITE_HEADER
    }

    /// Staged WRITEs the host has not taken, by its consumer counter `taken`. A counter ahead
    /// of the slots written (a host's bug) reads as a full ring: the QP waits, nothing is
    /// overwritten.
    pub fn pending(&self, taken: u16) -> u32 {
        match u32::from(self.produced.wrapping_sub(taken)) {
            n if n > self.slots() => self.slots(),
            n => n,
        }
    }

    /// Where the next slot starts.
    pub fn next_slot(&self) -> u64 {
        let index = u64::from(self.produced) % u64::from(self.slots());
        self.addr + (index << self.log_slot_bytes)
    }

    /// Bytes of the whole ring.
    pub fn len(&self) -> u64 {
        u64::from(self.slots()) << self.log_slot_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_wrap_and_a_counter_ahead_reads_full() {
        let mut s = Staging {
            lkey: 1,
            addr: 0x10000,
            log_slots: 2,
            log_slot_bytes: 6,
            produced: 0,
        };
        assert_eq!((s.slots(), s.payload(), s.len()), (4, 48, 256));
        s.produced = 5;
        assert_eq!(s.next_slot(), 0x10040);
        assert_eq!(s.pending(3), 2);
        assert_eq!(s.pending(5), 0);
        // The host says it took more than was written: full, not a wrap to thousands.
        assert_eq!(s.pending(9), 4);
        // The counters wrap at 16 bits together.
        s.produced = 1;
        assert_eq!(s.pending(u16::MAX), 2);
    }
}
