//! The doorbell (UAR) pages of a NIC function (BAR2): plain 32-bit words the host stores to and
//! the engine reads when it runs, so a doorbell never blocks and never re-enters the engine —
//! and, in the same memory, each send queue's WQE-by-MMIO buffer, read as words too.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use fld_abi::nic::BAR_DOORBELL_SIZE;

/// Polled doorbell words of one function (BAR2). Stores from the host land here directly; the
/// engine reads them when it runs.
///
/// The words live in the area's own memory until a transport hands it shared memory
/// ([`DoorbellArea::use_memory`]): then the host's stores reach the words without any message
/// (a vfio-user server offers that memory as the BAR's mmap-able area), as doorbell pages of a
/// real NIC are written by the CPU straight across PCIe.
pub struct DoorbellArea {
    /// The words in use: `BAR_DOORBELL_SIZE / 4` of them.
    words: AtomicPtr<AtomicU32>,
    /// Every backing the words ever lived in, kept so a reader that loaded the old pointer
    /// never touches freed memory (a handful of 256 KiB areas over a process's life).
    backings: Mutex<Vec<Box<dyn Send + Sync>>>,
}

const DOORBELL_WORDS: usize = (BAR_DOORBELL_SIZE / 4) as usize;

impl Default for DoorbellArea {
    fn default() -> Self {
        // Zeroed memory from the allocator: pages no one writes (most WQE buffers) stay the
        // shared zero page.
        let zeroed: Box<[u32]> = vec![0u32; DOORBELL_WORDS].into_boxed_slice();
        // SAFETY: AtomicU32 has the size, alignment and bit validity of u32.
        let mut owned: Box<[AtomicU32]> =
            unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [AtomicU32]) };
        DoorbellArea {
            words: AtomicPtr::new(owned.as_mut_ptr()),
            backings: Mutex::new(vec![Box::new(owned)]),
        }
    }
}

/// Shared doorbell memory smaller than the doorbell BAR.
#[derive(Debug, thiserror::Error)]
#[error("doorbell memory of {0} bytes is smaller than the doorbell BAR")]
pub struct DoorbellMemoryTooSmall(pub usize);

impl DoorbellArea {
    fn word(&self, offset: u64) -> Option<&AtomicU32> {
        let i = (offset / 4) as usize;
        // SAFETY: the pointer always points at DOORBELL_WORDS live words (backings are never
        // freed while the area lives), and `i` is in range.
        (i < DOORBELL_WORDS).then(|| unsafe { &*self.words.load(Ordering::Acquire).add(i) })
    }

    /// Moves the words into `memory` (at its start), carrying their current values over. The
    /// memory must be at least [`BAR_DOORBELL_SIZE`] bytes; it is typically a shared file that
    /// the host maps too.
    pub fn use_memory(
        &self,
        memory: Arc<vm_memory::GuestRegionMmap>,
    ) -> Result<(), DoorbellMemoryTooSmall> {
        use vm_memory::GuestMemoryRegion;
        if (memory.len() as usize) < BAR_DOORBELL_SIZE as usize {
            return Err(DoorbellMemoryTooSmall(memory.len() as usize));
        }
        let mut backings = self.backings.lock().unwrap_or_else(|e| e.into_inner());
        let new = memory.as_ptr().cast::<AtomicU32>();
        for i in 0..DOORBELL_WORDS {
            // SAFETY: both areas hold DOORBELL_WORDS words; mmap memory is page aligned.
            unsafe { (*new.add(i)).store(self.load(4 * i as u64), Ordering::Relaxed) };
        }
        self.words.store(new, Ordering::Release);
        backings.push(Box::new(memory));
        Ok(())
    }

    /// The word at byte `offset` (0 when out of range).
    pub fn load(&self, offset: u64) -> u32 {
        self.word(offset).map_or(0, |w| w.load(Ordering::Acquire))
    }

    pub fn write(&self, offset: u64, data: &[u8]) {
        // Aligned whole words (a 64-byte WQE chunk, a doorbell) are stored a word at a time.
        if offset.is_multiple_of(4) && data.len().is_multiple_of(4) {
            for (i, w) in data.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                self.store(offset + 4 * i as u64, v);
            }
            return;
        }
        for (i, &b) in data.iter().enumerate() {
            let o = offset + i as u64;
            if let Some(w) = self.word(o) {
                let shift = (o % 4) * 8;
                let mut cur = w.load(Ordering::Relaxed);
                loop {
                    let new = (cur & !(0xff << shift)) | ((b as u32) << shift);
                    match w.compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed) {
                        Ok(_) => break,
                        Err(x) => cur = x,
                    }
                }
            }
        }
    }

    /// Aligned 32-bit store (the common doorbell case).
    pub fn store(&self, offset: u64, value: u32) {
        if let Some(w) = self.word(offset) {
            w.store(value, Ordering::Release);
        }
    }

    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let o = offset + i as u64;
            *b = (self.load(o & !3) >> ((o % 4) * 8)) as u8;
        }
    }

    /// Copies whole words from `offset` (4-byte aligned) into `out` (a multiple of 4 bytes),
    /// each word read once: how the engine reads a WQE buffer.
    pub fn read_words(&self, offset: u64, out: &mut [u8]) {
        for (i, chunk) in out.chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&self.load(offset + 4 * i as u64).to_le_bytes());
        }
    }

    /// Zeroes every word (a function reset). Words already zero are only read, so memory no one
    /// wrote is not touched.
    pub fn clear(&self) {
        for i in 0..DOORBELL_WORDS {
            if let Some(w) = self.word(4 * i as u64) {
                if w.load(Ordering::Relaxed) != 0 {
                    w.store(0, Ordering::Release);
                }
            }
        }
    }
}
