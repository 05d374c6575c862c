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
//! The two ends of a connection's unload path:
//! * [`UnloadTarget`] owns the QP's private staging buffer (registered once, so its
//!   translations stay in the RNIC's cache) and a receive per slot. For each WRITE WITH
//!   IMMEDIATE that completes, it reads the slot, checks the WRITE against the uMTT, copies
//!   the data to its destination, and reposts the receive. Every half ring it writes how many
//!   slots it has taken into the initiator's credit word.
//! * [`UnloadInitiator`] writes each unloaded WRITE into the next slot and never past the
//!   slots the target has not taken yet (back-pressure: [`VerbsError::QueueFull`]).
//!
//! Ordering: unloaded WRITEs are placed in the order they were sent, but after the target's
//! CPU takes them, so an offloaded WRITE sent later may land first (§5: no ordering parity).
//!
//! The target returns, with each credit, a verdict per slot (placed, or why the uMTT refused
//! it), so an initiator can complete each unloaded WRITE as the offload path would
//! (`super::urdma::UnloadQp`: completion and ordering parity). Used alone, the initiator's
//! completion of a refused unloaded WRITE says success — the WRITE WITH IMMEDIATE itself
//! arrived — and the refusal is counted at the target.
//!
//! [`StagingRing`] is the in-RNIC variant §5 proposes: the NIC stages WRITEs itself, with the
//! offload path's completions and ordering.

use std::collections::HashMap;

use fld_abi::nic::{StagedWrite, STAGED_WRITE_HEADER};
use fld_driver::DmaBuffer;
use zerocopy::FromBytes;

use super::{
    access, Context, Mr, Pd, Qp, Result, SendWr, Sge, VerbsError, Wc, WcOpcode, WcStatus, WrOpcode,
};

/// Bytes before an unloaded WRITE's data in its staging slot: the destination address.
pub const SLOT_HEADER: usize = 8;
/// The largest staging slot: only small WRITEs are unloaded (§3.2), and a slot goes inline.
pub const MAX_SLOT_BYTES: u32 = 256;

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

    /// The verdict byte the target returns for a slot: 0 placed, else the refusal.
    fn verdict(r: Option<Refusal>) -> u8 {
        match r {
            None => 0,
            Some(Refusal::UnknownKey) => 1,
            Some(Refusal::OtherPd) => 2,
            Some(Refusal::NoWriteRight) => 3,
            Some(Refusal::OutOfRange) => 4,
        }
    }

    /// The refusal a verdict byte names (an unknown byte, as a peer can send anything, is
    /// read as a refusal: nothing says the WRITE was placed).
    fn of_verdict(b: u8) -> Option<Refusal> {
        match b {
            0 => None,
            1 => Some(Refusal::UnknownKey),
            2 => Some(Refusal::OtherPd),
            3 => Some(Refusal::NoWriteRight),
            _ => Some(Refusal::OutOfRange),
        }
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
                len: mr.region.length,
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
    pub fn check(
        &self,
        pd: u32,
        rkey: u32,
        addr: u64,
        len: u64,
    ) -> std::result::Result<(), Refusal> {
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

    /// Reads `out.len()` bytes at `addr` of this context's region `lkey` (an SGE of a WRITE
    /// about to be unloaded); `false` when the range is not in the region.
    pub fn gather(&self, lkey: u32, addr: u64, out: &mut [u8]) -> bool {
        let Some(r) = self.regions.get(&lkey) else {
            return false;
        };
        let inside = addr
            .checked_sub(r.addr)
            .is_some_and(|off| off + out.len() as u64 <= r.len);
        if inside {
            super::memory::read_wrapping(&r.buf, (addr - r.addr) as usize, out);
        }
        inside
    }

    /// Checks an unloaded WRITE and, if the RNIC would have taken it, copies `data` to `addr`
    /// (the memcpy that replaces the RNIC's placement).
    pub fn place(
        &self,
        pd: u32,
        rkey: u32,
        addr: u64,
        data: &[u8],
    ) -> std::result::Result<(), Refusal> {
        self.check(pd, rkey, addr, data.len() as u64)?;
        let r = &self.regions[&rkey];
        super::memory::write_wrapping(&r.buf, (addr - r.addr) as usize, data);
        Ok(())
    }
}

/// What the target gives the initiator at setup (with the QP's own numbers): where its
/// staging buffer is and how it is cut, and what the initiator gives back: where to write
/// credits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingOffer {
    pub addr: u64,
    pub rkey: u32,
    pub slots: u32,
    pub slot_bytes: u32,
}

/// The initiator's credit area: the count of slots the target has taken (8 bytes,
/// little-endian), then a verdict byte per slot — 0 when the slot's WRITE was placed, else why
/// the uMTT refused it — which the target writes before the count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditWord {
    pub addr: u64,
    pub rkey: u32,
}

/// The wr_id the unload path's own credit WRITEs carry (above any the application uses).
pub const CREDIT_WR_ID: u64 = u64::MAX - 1;

/// The target's end of a QP's unload path.
pub struct UnloadTarget {
    staging: Mr,
    pd: u32,
    slots: u32,
    slot_bytes: u32,
    taken: u64,
    credited: u64,
    credit: Option<CreditWord>,
    /// Slots taken between credit returns.
    credit_every: u32,
    /// The verdict of each slot's last WRITE, returned with the credits.
    verdicts: Vec<u8>,
    /// Unloaded WRITEs placed, and refused by the uMTT (dropped, as the RNIC drops them).
    pub placed: u64,
    pub refused: u64,
}

impl UnloadTarget {
    /// A staging buffer of `slots` slots of `slot_bytes` in `pd`, and a receive for each on
    /// `qp` (a WRITE WITH IMMEDIATE consumes one).
    pub fn new(
        ctx: &mut Context,
        pd: &Pd,
        qp: &mut Qp,
        slots: u32,
        slot_bytes: u32,
    ) -> Result<Self> {
        let slots = slots.max(2);
        let slot_bytes = slot_bytes.clamp(SLOT_HEADER as u32 + 1, MAX_SLOT_BYTES);
        let staging = ctx.reg_mr(
            pd,
            slots as usize * slot_bytes as usize,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )?;
        for i in 0..slots {
            qp.post_recv(&[(u64::from(i), &[][..])])?;
        }
        Ok(UnloadTarget {
            staging,
            pd: pd.handle,
            slots,
            slot_bytes,
            taken: 0,
            credited: 0,
            credit: None,
            credit_every: slots / 2,
            verdicts: vec![0; slots as usize],
            placed: 0,
            refused: 0,
        })
    }

    /// Deregisters the staging buffer (the QP's receives go with the QP).
    pub fn close(self, ctx: &mut Context) -> Result<()> {
        ctx.dereg_mr(self.staging)
    }

    /// Returns credits (and verdicts) every `n` slots taken instead of every half ring: 1 for
    /// an initiator that reports each WRITE's completion only when it is placed
    /// (`super::urdma::UnloadQp`).
    pub fn set_credit_every(&mut self, n: u32) {
        self.credit_every = n.clamp(1, self.slots / 2);
    }

    pub fn offer(&self) -> StagingOffer {
        StagingOffer {
            addr: self.staging.addr(),
            rkey: self.staging.rkey(),
            slots: self.slots,
            slot_bytes: self.slot_bytes,
        }
    }

    /// Where the initiator wants its credits.
    pub fn set_credit_word(&mut self, c: CreditWord) {
        self.credit = Some(c);
    }

    /// Whether `wc` (polled from the QP's receive CQ) is an unloaded WRITE's.
    pub fn is_unloaded(wc: &Wc) -> bool {
        wc.opcode == WcOpcode::RecvRdmaWithImm
    }

    /// Takes the unloaded WRITE `wc` completed: reads its slot, checks it against the uMTT and
    /// copies it (or drops it, as the RNIC would: its refusal is returned), reposts the slot's
    /// receive and, every half ring, returns credits.
    pub fn take(&mut self, ctx: &Context, qp: &mut Qp, wc: &Wc) -> Result<Option<Refusal>> {
        let slot = (self.taken % u64::from(self.slots)) as usize;
        let size = self.slot_bytes as usize;
        let mut buf = [0u8; MAX_SLOT_BYTES as usize];
        let bytes = &mut buf[..size];
        self.staging.read(slot * size, bytes);
        let rkey = wc.imm_data.unwrap_or(0);
        let refusal = match read_slot(bytes, wc.byte_len as usize) {
            Some((dest, data)) => ctx.umtt().place(self.pd, rkey, dest, data).err(),
            // Shorter than its header: nothing names a place.
            None => Some(Refusal::OutOfRange),
        };
        match refusal {
            None => self.placed += 1,
            Some(_) => self.refused += 1,
        }
        self.verdicts[slot] = Refusal::verdict(refusal);
        self.taken += 1;
        qp.post_recv(&[(slot as u64, &[][..])])?;
        if self.taken - self.credited >= u64::from(self.credit_every) {
            self.return_credits(qp)?;
        }
        Ok(refusal)
    }

    /// Writes the verdicts of the slots taken since the last return, then their count, into
    /// the initiator's credit area (RC executes the WRITEs in order: the count lands last).
    pub fn return_credits(&mut self, qp: &mut Qp) -> Result<()> {
        let Some(c) = self.credit else {
            return Ok(());
        };
        let slots = u64::from(self.slots);
        let mut from = self.credited;
        while from < self.taken {
            // Up to the ring's end, at most 64 verdicts a WRITE (inline).
            let at = from % slots;
            let n = (self.taken - from).min(slots - at).min(64);
            let bytes = &self.verdicts[at as usize..(at + n) as usize];
            self.credit_write(qp, c, 8 + at, bytes)?;
            from += n;
        }
        self.credit_write(qp, c, 0, &self.taken.to_le_bytes())?;
        self.credited = self.taken;
        Ok(())
    }

    fn credit_write(&self, qp: &mut Qp, c: CreditWord, offset: u64, bytes: &[u8]) -> Result<()> {
        let mut wr = SendWr::new(
            CREDIT_WR_ID,
            WrOpcode::RdmaWrite {
                remote_addr: c.addr + offset,
                rkey: c.rkey,
            },
            &[],
        );
        // Signalled, so its send-queue slot is freed when it completes (the completion carries
        // [`CREDIT_WR_ID`]; the application's loop passes it over).
        wr.signaled = true;
        qp.post_inline_bytes(&wr, bytes)
    }
}

/// The initiator's end of a QP's unload path.
pub struct UnloadInitiator {
    offer: StagingOffer,
    credits: Mr,
    sent: u64,
}

impl UnloadInitiator {
    /// The path to the target's staging buffer `offer`, with a credit word registered in
    /// `pd` for the target to write.
    pub fn new(ctx: &mut Context, pd: &Pd, offer: StagingOffer) -> Result<Self> {
        let credits = ctx.reg_mr(
            pd,
            8 + offer.slots as usize,
            access::LOCAL_WRITE | access::REMOTE_WRITE,
        )?;
        credits.write(0, &0u64.to_le_bytes());
        Ok(UnloadInitiator {
            offer,
            credits,
            sent: 0,
        })
    }

    pub fn credit_word(&self) -> CreditWord {
        CreditWord {
            addr: self.credits.addr(),
            rkey: self.credits.rkey(),
        }
    }

    /// Unloaded WRITEs sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Slots the target has not taken yet.
    pub fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.credited())
    }

    /// Slots the target says it has taken (never more than were sent: a peer can write
    /// anything there).
    pub fn credited(&self) -> u64 {
        let mut b = [0u8; 8];
        self.credits.read(0, &mut b);
        u64::from_le_bytes(b).min(self.sent)
    }

    /// The target's verdict on the WRITE sent `n`-th (from 0), once credited: `None` placed.
    pub fn verdict(&self, n: u64) -> Option<Refusal> {
        let mut b = [0u8];
        self.credits
            .read(8 + (n % u64::from(self.offer.slots)) as usize, &mut b);
        Refusal::of_verdict(b[0])
    }

    /// Sends `data` for `dest` (with `rkey`) unloaded: a WRITE WITH IMMEDIATE into the next
    /// staging slot, inline. [`VerbsError::QueueFull`] when every slot still holds a WRITE the
    /// target has not taken; `Invalid` when it does not fit a slot or the QP's inline data.
    pub fn post(
        &mut self,
        qp: &mut Qp,
        wr_id: u64,
        dest: u64,
        rkey: u32,
        data: &[u8],
    ) -> Result<()> {
        if self.in_flight() >= u64::from(self.offer.slots) {
            return Err(VerbsError::QueueFull);
        }
        let mut slot = [0u8; MAX_SLOT_BYTES as usize];
        let size = (self.offer.slot_bytes as usize).min(slot.len());
        let n = write_slot(&mut slot[..size], dest, data).ok_or(VerbsError::Invalid(
            "an unloaded WRITE larger than a staging slot",
        ))?;
        let at = self.sent % u64::from(self.offer.slots);
        let wr = SendWr::new(
            wr_id,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: self.offer.addr + at * u64::from(self.offer.slot_bytes),
                rkey: self.offer.rkey,
                imm: rkey,
            },
            &[] as &[Sge],
        );
        qp.post_inline_bytes(&wr, &slot[..n])?;
        self.sent += 1;
        Ok(())
    }
}

/// uRDMA's in-RNIC unload path (§5, built here; `docs/nic-interface.md` §18): the QP's
/// staging ring, given to the NIC as a QP attribute. The NIC itself writes a small WRITE whose
/// translation it does not hold into the next slot and completes it on the QP's receive CQ
/// ([`WcOpcode::RecvRdmaStaged`]); the host copies it to its destination and returns the
/// slots. The initiator posts plain WRITEs and sees the offload path's completions; the NIC
/// keeps later requests waiting while staged WRITEs are not taken, so ordering is the offload
/// path's too.
pub struct StagingRing {
    ring: Mr,
    pd: u32,
    log_slots: u8,
    log_slot_bytes: u8,
    taken: u64,
    /// Staged WRITEs copied, and those whose region went away before the copy.
    pub placed: u64,
    pub refused: u64,
}

impl StagingRing {
    /// A ring of `2^log_slots` slots of `2^log_slot_bytes` bytes in `pd`, set on `qp`.
    pub fn new(
        ctx: &mut Context,
        pd: &Pd,
        qp: &Qp,
        log_slots: u8,
        log_slot_bytes: u8,
    ) -> Result<Self> {
        let ring = ctx.reg_mr(
            pd,
            (1usize << log_slots) << log_slot_bytes,
            access::LOCAL_WRITE,
        )?;
        ctx.nic.set_qp_staging(
            qp.qp_num(),
            ring.lkey(),
            ring.addr(),
            log_slots,
            log_slot_bytes,
        )?;
        Ok(StagingRing {
            ring,
            pd: pd.handle,
            log_slots,
            log_slot_bytes,
            taken: 0,
            placed: 0,
            refused: 0,
        })
    }

    /// Whether `wc` (polled from the QP's receive CQ) is a staged WRITE's.
    pub fn is_staged(wc: &Wc) -> bool {
        wc.opcode == WcOpcode::RecvRdmaStaged
    }

    /// Copies the staged WRITE `wc` completed to its destination (the NIC checked it; the
    /// uMTT still refuses one whose region was deregistered since). The slot is the host's
    /// again after [`Self::release`].
    pub fn take(&mut self, ctx: &Context, wc: &Wc) -> Option<Refusal> {
        let slots = 1u64 << self.log_slots;
        let at = ((wc.wr_id % slots) << self.log_slot_bytes) as usize;
        let mut header = [0u8; STAGED_WRITE_HEADER];
        self.ring.read(at, &mut header);
        let h = StagedWrite::read_from_bytes(&header).unwrap_or_default();
        let len = (h.len.get() as usize).min((1usize << self.log_slot_bytes) - header.len());
        let mut data = [0u8; 1 << fld_abi::nic::MAX_LOG_STAGING_SLOT];
        self.ring.read(at + header.len(), &mut data[..len]);
        let refusal = ctx
            .umtt()
            .place(self.pd, h.rkey.get(), h.va.get(), &data[..len])
            .err();
        match refusal {
            None => self.placed += 1,
            Some(_) => self.refused += 1,
        }
        self.taken += 1;
        refusal
    }

    /// Returns the slots taken so far to the NIC (one doorbell for a batch of takes).
    pub fn release(&self, qp: &Qp) {
        qp.qp.staging_taken(self.taken as u16);
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
