//! Dirty-page tracking of device writes to host memory, as an IOMMU keeps it for a VMM that
//! migrates a guest with an assigned device (VFIO's `VFIO_IOMMU_DIRTY_PAGES`, vfio-user's
//! `DMA_LOGGING`): every page of one bus-address range that a device's posted write reached
//! since the log was last taken.
//!
//! A runner that returns host memory to a known state between runs (the mock host's snapshot
//! restore) rewrites only those pages and the ones it wrote itself, not all the memory the
//! allocator handed out. Tracking is off unless a runner asks for it
//! ([`super::Fabric::track_dirty_pages`]), and costs nothing then: a DMA port writes through
//! its cached mapping only while the fabric keeps no log. With a log, every host write takes
//! the routed path and marks its pages (a load and, on a page's first write, an atomic OR).
//! Left out: per-requester logs and a page size other than 4 KiB.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes one bit of the log stands for.
pub const DIRTY_PAGE_SIZE: u64 = 4096;

/// The pages of `[base, base + len)` written since the log was last taken, one bit each, and
/// whether a write fell outside that range.
pub struct DirtyPages {
    base: u64,
    len: u64,
    bits: Box<[AtomicU64]>,
    outside: AtomicBool,
}

impl DirtyPages {
    /// A log of `[base, base + len)`, nothing written yet.
    pub fn new(base: u64, len: u64) -> Self {
        let pages = len.div_ceil(DIRTY_PAGE_SIZE);
        DirtyPages {
            base,
            len,
            bits: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            outside: AtomicBool::new(false),
        }
    }

    /// Notes a write of `len` bytes at bus address `addr`.
    #[inline]
    pub fn mark(&self, addr: u64, len: usize) {
        if len == 0 {
            return;
        }
        let end = addr.saturating_add(len as u64);
        let inside = addr >= self.base && end - self.base <= self.len;
        if !inside {
            self.outside.store(true, Ordering::Relaxed);
            return;
        }
        let first = (addr - self.base) / DIRTY_PAGE_SIZE;
        let last = (end - 1 - self.base) / DIRTY_PAGE_SIZE;
        for page in first..=last {
            let (word, bit) = (&self.bits[(page / 64) as usize], 1u64 << (page % 64));
            // Most writes land on a page already marked: only the first one writes the line.
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// Calls `f` with the index of every page marked since the last take (page `i` starts at
    /// `base + i * DIRTY_PAGE_SIZE`), in order, and clears the log. False when a write fell
    /// outside the range since then: the pages then do not tell all that was written.
    pub fn take(&self, mut f: impl FnMut(u64)) -> bool {
        for (w, word) in self.bits.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::Relaxed);
            while bits != 0 {
                f(w as u64 * 64 + u64::from(bits.trailing_zeros()));
                bits &= bits - 1;
            }
        }
        !self.outside.swap(false, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(log: &DirtyPages) -> (Vec<u64>, bool) {
        let mut pages = Vec::new();
        let complete = log.take(|p| pages.push(p));
        (pages, complete)
    }

    #[test]
    fn a_write_marks_every_page_it_touches_and_only_those() {
        let log = DirtyPages::new(0x1_0000_0000, 64 * 4096 + 100);
        log.mark(0x1_0000_0000 + 4095, 2); // the last byte of page 0, the first of page 1
        log.mark(0x1_0000_0000 + 10 * 4096, 4096); // exactly page 10
        log.mark(0x1_0000_0000 + 63 * 4096, 4096); // the last whole page
        log.mark(0x1_0000_0000 + 64 * 4096, 100); // the partial page at the end
        log.mark(0x1_0000_0000 + 20 * 4096, 0); // nothing
        assert_eq!(taken(&log), (vec![0, 1, 10, 63, 64], true));
        assert_eq!(taken(&log), (vec![], true), "a take clears the log");
    }

    #[test]
    fn a_write_outside_the_range_is_reported_once() {
        let log = DirtyPages::new(0x10000, 8 * 4096);
        log.mark(0x10000 - 1, 2);
        log.mark(0x10000 + 8 * 4096 - 1, 2);
        log.mark(0x10000 + 8 * 4096, 1);
        log.mark(u64::MAX - 1, 8);
        log.mark(0x10000 + 3 * 4096, 1);
        assert_eq!(taken(&log), (vec![3], false));
        assert_eq!(taken(&log), (vec![], true));
    }
}
