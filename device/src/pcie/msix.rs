//! MSI-X table and pending-bit array (PCI Local Bus 3.0 §6.8.2). The device asks to signal a vector;
//! the table decides whether that becomes a message now or a pending bit that fires on unmask.

/// One message the function sends: a posted write of `data` to `address`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsiMessage {
    pub vector: u16,
    pub address: u64,
    pub data: u32,
}

use fld_abi::pci::{MSIX_ENTRY_SIZE as ENTRY_SIZE, MSIX_VECTOR_MASKED as VECTOR_CTRL_MASKED};

/// The MSI-X table of one function.
pub struct MsixTable {
    /// Per vector: address low, address high, data, vector control.
    entries: Vec<[u32; 4]>,
    pending: Vec<u64>,
}

impl Clone for MsixTable {
    fn clone(&self) -> Self {
        MsixTable {
            entries: self.entries.clone(),
            pending: self.pending.clone(),
        }
    }

    /// Into the vectors' existing storage (a snapshot's restore, once per fuzz input).
    fn clone_from(&mut self, source: &Self) {
        self.entries.clone_from(&source.entries);
        self.pending.clone_from(&source.pending);
    }
}

impl MsixTable {
    /// All vectors start masked, as the specification requires after reset.
    pub fn new(vectors: u16) -> Self {
        MsixTable {
            entries: vec![[0, 0, 0, VECTOR_CTRL_MASKED]; vectors as usize],
            pending: vec![0; (vectors as usize).div_ceil(64)],
        }
    }

    pub fn vectors(&self) -> u16 {
        self.entries.len() as u16
    }

    pub fn reset(&mut self) {
        self.entries.fill([0, 0, 0, VECTOR_CTRL_MASKED]);
        self.pending.fill(0);
    }

    /// Reads from the table area; unaligned or out-of-range bytes read as zero.
    pub fn table_read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let o = offset + i as u64;
            let (e, w, byte) = (
                (o / ENTRY_SIZE) as usize,
                ((o % ENTRY_SIZE) / 4) as usize,
                (o % 4) * 8,
            );
            *b = self.entries.get(e).map_or(0, |ent| (ent[w] >> byte) as u8);
        }
    }

    /// Writes to the table area. Returns the messages that became deliverable because a pending
    /// vector was unmasked.
    pub fn table_write(
        &mut self,
        offset: u64,
        data: &[u8],
        enabled: bool,
        function_masked: bool,
    ) -> Vec<MsiMessage> {
        // A driver writes the table a 32-bit field at a time: that store needs no byte loop.
        if let (Ok(word), 0) = (<[u8; 4]>::try_from(data), offset % 4) {
            let (e, w) = (
                (offset / ENTRY_SIZE) as usize,
                ((offset % ENTRY_SIZE) / 4) as usize,
            );
            if let Some(ent) = self.entries.get_mut(e) {
                let mask = if w == 3 { VECTOR_CTRL_MASKED } else { u32::MAX };
                ent[w] = (ent[w] & !mask) | (u32::from_le_bytes(word) & mask);
            }
            return self.deliver_pending(enabled, function_masked);
        }
        for (i, &b) in data.iter().enumerate() {
            let o = offset + i as u64;
            let (e, w, byte) = (
                (o / ENTRY_SIZE) as usize,
                ((o % ENTRY_SIZE) / 4) as usize,
                (o % 4) * 8,
            );
            if let Some(ent) = self.entries.get_mut(e) {
                let mask = if w == 3 {
                    VECTOR_CTRL_MASKED & (0xff << byte)
                } else {
                    0xff << byte
                };
                ent[w] = (ent[w] & !mask) | (((b as u32) << byte) & mask);
            }
        }
        self.deliver_pending(enabled, function_masked)
    }

    pub fn pba_read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let o = offset + i as u64;
            *b = self
                .pending
                .get((o / 8) as usize)
                .map_or(0, |q| (q >> ((o % 8) * 8)) as u8);
        }
    }

    fn masked(&self, v: usize) -> bool {
        self.entries[v][3] & VECTOR_CTRL_MASKED != 0
    }

    fn message(&self, v: usize) -> MsiMessage {
        let e = &self.entries[v];
        MsiMessage {
            vector: v as u16,
            address: (e[1] as u64) << 32 | e[0] as u64,
            data: e[2],
        }
    }

    /// The device signals `vector`: a message when MSI-X is enabled and nothing masks it, else a
    /// pending bit. Out-of-range vectors are ignored.
    pub fn signal(
        &mut self,
        vector: u16,
        enabled: bool,
        function_masked: bool,
    ) -> Option<MsiMessage> {
        let v = vector as usize;
        if v >= self.entries.len() {
            return None;
        }
        if enabled && !function_masked && !self.masked(v) {
            Some(self.message(v))
        } else {
            self.pending[v / 64] |= 1 << (v % 64);
            None
        }
    }

    /// Messages for pending vectors that are no longer masked (after an unmask or enable). Only
    /// the set pending bits are visited: a table write costs nothing when none are pending.
    pub fn deliver_pending(&mut self, enabled: bool, function_masked: bool) -> Vec<MsiMessage> {
        let mut out = Vec::new();
        if !enabled || function_masked {
            return out;
        }
        for word in 0..self.pending.len() {
            let mut bits = self.pending[word];
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let v = word * 64 + bit;
                if v < self.entries.len() && !self.masked(v) {
                    self.pending[word] &= !(1 << bit);
                    out.push(self.message(v));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_vector_becomes_pending_and_fires_on_unmask() {
        let mut t = MsixTable::new(4);
        t.table_write(16, &0xfee0_1000u32.to_le_bytes(), true, false);
        t.table_write(24, &0x41u32.to_le_bytes(), true, false);
        assert_eq!(t.signal(1, true, false), None);
        let mut pba = [0u8; 8];
        t.pba_read(0, &mut pba);
        assert_eq!(pba[0], 0b10);
        let fired = t.table_write(28, &0u32.to_le_bytes(), true, false);
        assert_eq!(
            fired,
            vec![MsiMessage {
                vector: 1,
                address: 0xfee0_1000,
                data: 0x41
            }]
        );
        t.pba_read(0, &mut pba);
        assert_eq!(pba[0], 0);
        assert_eq!(
            t.signal(1, true, false),
            Some(MsiMessage {
                vector: 1,
                address: 0xfee0_1000,
                data: 0x41
            })
        );
        // Function mask holds everything back.
        assert_eq!(t.signal(1, true, true), None);
        assert_eq!(t.deliver_pending(true, false).len(), 1);
    }

    #[test]
    fn out_of_range_access_is_harmless() {
        let mut t = MsixTable::new(2);
        assert_eq!(t.signal(9, true, false), None);
        t.table_write(4096, &[0xff; 8], true, false);
        let mut b = [0xaa; 4];
        t.table_read(4096, &mut b);
        assert_eq!(b, [0; 4]);
        // Only the mask bit of vector control is writable.
        t.table_write(12, &0xffff_fffeu32.to_le_bytes(), true, false);
        t.table_read(12, &mut b);
        assert_eq!(u32::from_le_bytes(b), 0);
    }

    /// A 32-bit store (the driver's way) leaves the table as its four bytes stored one at a
    /// time do, and unmasks and fires the same pending vectors: every field of every entry,
    /// the offsets past the table, masked and unmasked values.
    #[test]
    fn a_word_store_is_its_bytes_stored_one_by_one() {
        let mut rng = crate::nic::packet::tests::XorShift(0x9e37_79b9_7f4a_7c15);
        let (mut words, mut bytes) = (MsixTable::new(4), MsixTable::new(4));
        for v in 0..4 {
            assert_eq!(words.signal(v, true, false), None, "masked: pending");
            assert_eq!(bytes.signal(v, true, false), None);
        }
        for _ in 0..2000 {
            let offset = rng.below(5 * ENTRY_SIZE / 4) * 4;
            let value = match rng.below(3) {
                0 => 0,
                1 => VECTOR_CTRL_MASKED,
                _ => rng.next_u64() as u32,
            };
            let fired = words.table_write(offset, &value.to_le_bytes(), true, false);
            let mut fired_bytes = Vec::new();
            for (i, b) in value.to_le_bytes().into_iter().enumerate() {
                fired_bytes.extend(bytes.table_write(offset + i as u64, &[b], true, false));
            }
            assert_eq!(fired, fired_bytes, "store of {value:#x} at {offset:#x}");
            assert_eq!(
                (&words.entries, &words.pending),
                (&bytes.entries, &bytes.pending)
            );
        }
    }
}
