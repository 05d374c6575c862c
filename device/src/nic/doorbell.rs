//! The doorbell (UAR) pages of a NIC function (BAR2): plain 32-bit words the host stores to and
//! the engine reads when it runs, so a doorbell never blocks and never re-enters the engine —
//! and, in the same memory, each send queue's WQE-by-MMIO buffer, read as words too.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fld_abi::nic::{db, BAR_DOORBELL_SIZE};

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
    /// never touches freed memory (a handful of BAR-sized areas over a process's life).
    backings: Mutex<Vec<Box<dyn Send + Sync>>>,
    /// One bit per queue-pair slot whose send or receive doorbell was stored through
    /// [`Self::store`] or [`Self::write`] since the engine last took them: what a doorbell
    /// write tells a hardware NIC's scheduler, so the engine visits only those QPs.
    qp_rung: SparseBits,
    /// The words live in memory the host maps ([`Self::use_memory`]): its stores do not pass
    /// through here, so no rung bit is set and the engine must look at every QP.
    shared: AtomicBool,
    /// One bit per 256-byte chunk a store through this area may have left non-zero, so a
    /// reset zeroes those chunks and not all 8 MiB (a function reset costs microseconds, which
    /// is what lets a fuzz target reset the card for every input).
    dirty_chunks: SparseBits,
}

/// A set of small integers that is drained rather than read: a bit per item, and a summary
/// bit per word of them, so draining a sparse set reads a handful of words, not the whole map.
struct SparseBits {
    items: Box<[AtomicU64]>,
    summary: Box<[AtomicU64]>,
}

impl SparseBits {
    fn new(items: usize) -> Self {
        let words = items.div_ceil(64);
        let zeroed = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        SparseBits {
            items: zeroed(words),
            summary: zeroed(words.div_ceil(64)),
        }
    }

    fn contains(&self, i: usize) -> bool {
        self.items[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0
    }

    /// Adds `i`: its own bit first, then its word's, so a drain that sees the word sees the bit
    /// and what was stored before it.
    fn insert(&self, i: usize) {
        let word = i / 64;
        self.items[word].fetch_or(1 << (i % 64), Ordering::Release);
        self.summary[word / 64].fetch_or(1 << (word % 64), Ordering::Release);
    }

    /// Calls `f` with every item added since the last drain, keeping them.
    fn for_each(&self, f: impl FnMut(usize)) {
        self.walk(|w| w.load(Ordering::Acquire), f);
    }

    /// Calls `f` with every item added since the last drain, and forgets them.
    fn drain(&self, f: impl FnMut(usize)) {
        self.walk(|w| w.swap(0, Ordering::AcqRel), f);
    }

    /// Calls `f` with every item, each summary and item word read through `take`.
    fn walk(&self, take: impl Fn(&AtomicU64) -> u64, mut f: impl FnMut(usize)) {
        for (s, summary) in self.summary.iter().enumerate() {
            // A word with nothing in it is only read (a drain writes no shared line for it).
            if summary.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut words = take(summary);
            while words != 0 {
                let word = s * 64 + words.trailing_zeros() as usize;
                words &= words - 1;
                let mut bits = take(&self.items[word]);
                while bits != 0 {
                    f(word * 64 + bits.trailing_zeros() as usize);
                    bits &= bits - 1;
                }
            }
        }
    }
}

const DOORBELL_WORDS: usize = (BAR_DOORBELL_SIZE / 4) as usize;

/// Bytes one bit of the dirty map covers: a doorbell's neighbourhood, a WQE buffer.
const DIRTY_CHUNK: u64 = 256;

impl Default for DoorbellArea {
    fn default() -> Self {
        // An anonymous mapping of its own: zero pages until written, and no 8 MiB memset when
        // the allocator would hand back memory a dropped card used (building a card costs what
        // it touches, not the size of its doorbell BAR).
        let memory = vm_memory::GuestRegionMmap::<()>::from_range(
            vm_memory::GuestAddress(0),
            BAR_DOORBELL_SIZE as usize,
            None,
        )
        .expect("anonymous memory for the doorbell BAR");
        // mmap memory is page aligned, holds DOORBELL_WORDS words, starts zeroed, and lives
        // in `backings` as long as the area.
        let words = memory.as_ptr().cast::<AtomicU32>();
        DoorbellArea {
            words: AtomicPtr::new(words),
            backings: Mutex::new(vec![Box::new(memory)]),
            qp_rung: SparseBits::new(db::QP_SLOTS as usize),
            shared: AtomicBool::new(false),
            dirty_chunks: SparseBits::new((BAR_DOORBELL_SIZE / DIRTY_CHUNK) as usize),
        }
    }
}

/// The words a [`DoorbellArea`] holds, by dirty chunk, and its rung queue-pair slots.
#[derive(Clone)]
pub struct DoorbellSnapshot {
    chunks: Vec<(usize, [u32; (DIRTY_CHUNK / 4) as usize])>,
    rung: Vec<usize>,
}

/// Shared doorbell memory smaller than the doorbell BAR.
#[derive(Debug, thiserror::Error)]
#[error("doorbell memory of {0} bytes is smaller than the doorbell BAR")]
pub struct DoorbellMemoryTooSmall(pub usize);

impl DoorbellArea {
    fn word(&self, offset: u64) -> Option<&AtomicU32> {
        self.span(offset, 1)?.first()
    }

    /// The `n` words from the one holding byte `offset`, if they all lie inside the area.
    fn span(&self, offset: u64, n: usize) -> Option<&[AtomicU32]> {
        let first = usize::try_from(offset / 4).ok()?;
        let end = first.checked_add(n).filter(|&e| e <= DOORBELL_WORDS)?;
        // SAFETY: the pointer always points at DOORBELL_WORDS live words (backings are never
        // freed while the area lives), and `first..end` is in range.
        Some(unsafe {
            std::slice::from_raw_parts(self.words.load(Ordering::Acquire).add(first), end - first)
        })
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
        self.shared.store(true, Ordering::Release);
        backings.push(Box::new(memory));
        Ok(())
    }

    /// Whether every host store passes through [`Self::store`]/[`Self::write`] (the words are
    /// not in memory the host maps), so the rung QP slots are all the QPs with news.
    pub fn sees_every_store(&self) -> bool {
        !self.shared.load(Ordering::Acquire)
    }

    /// Calls `f` with each queue-pair slot rung since the last call, and forgets them.
    pub fn take_rung_qps(&self, mut f: impl FnMut(u32)) {
        self.qp_rung.drain(|slot| f(slot as u32));
    }

    /// Notes a store to the send or receive doorbell of a queue-pair slot.
    #[inline]
    fn note(&self, offset: u64) {
        let slots = u64::from(db::QP_SLOTS) * 4;
        let slot = match offset {
            o if (db::QP_SQ_BASE..db::QP_SQ_BASE + slots).contains(&o) => o - db::QP_SQ_BASE,
            o if (db::QP_RQ_BASE..db::QP_RQ_BASE + slots).contains(&o) => o - db::QP_RQ_BASE,
            _ => return,
        } / 4;
        self.qp_rung.insert(slot as usize);
    }

    /// The word at byte `offset` (0 when out of range).
    pub fn load(&self, offset: u64) -> u32 {
        self.word(offset).map_or(0, |w| w.load(Ordering::Acquire))
    }

    pub fn write(&self, offset: u64, data: &[u8]) {
        // Aligned whole words (a 64-byte WQE chunk, a doorbell) are stored a word at a time.
        if offset.is_multiple_of(4) && data.len().is_multiple_of(4) {
            if let Some(run) = self.span(offset, data.len() / 4).filter(|_| data.len() > 4) {
                self.store_run(run, offset, data);
                return;
            }
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
                // Noted after the byte landed, so the engine never takes the note first.
                self.note(o & !3);
                self.mark_dirty(o);
            }
        }
    }

    /// `data`, a run of whole words starting at byte `offset`, stored into `run`, its words
    /// (a WQE written by MMIO): the words stored in order, then the rung slots it covers noted
    /// and its chunks marked dirty, once for the run rather than per word — the same marks
    /// [`Self::store`] leaves word by word, except that a run with any non-zero word marks all
    /// its chunks (a WQE lies in one).
    fn store_run(&self, run: &[AtomicU32], offset: u64, data: &[u8]) {
        for (word, w) in run.iter().zip(data.chunks_exact(4)) {
            word.store(
                u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
                Ordering::Release,
            );
        }
        // Tested on the plain bytes, 16 at a time, not word by word beside the atomic stores.
        let mut blocks = data.chunks_exact(16);
        let non_zero = blocks
            .by_ref()
            .any(|b| u128::from_ne_bytes(b.try_into().unwrap_or_default()) != 0)
            || blocks.remainder().iter().any(|&b| b != 0);
        let end = offset + data.len() as u64;
        let doorbells = db::QP_SQ_BASE..db::QP_RQ_BASE + u64::from(db::QP_SLOTS) * 4;
        if offset < doorbells.end && end > doorbells.start {
            for o in (offset..end).step_by(4) {
                self.note(o);
            }
        }
        if non_zero {
            for chunk in offset / DIRTY_CHUNK..=(end - 1) / DIRTY_CHUNK {
                self.mark_dirty(chunk * DIRTY_CHUNK);
            }
        }
    }

    /// Aligned 32-bit store (the common doorbell case).
    pub fn store(&self, offset: u64, value: u32) {
        if let Some(w) = self.word(offset) {
            w.store(value, Ordering::Release);
            self.note(offset);
            if value != 0 {
                self.mark_dirty(offset);
            }
        }
    }

    /// Notes that the chunk holding byte `offset` may have a non-zero word.
    #[inline]
    fn mark_dirty(&self, offset: u64) {
        let chunk = (offset / DIRTY_CHUNK) as usize;
        // Doorbells go to the same few words over and over: read before writing a shared line.
        if !self.dirty_chunks.contains(chunk) {
            self.dirty_chunks.insert(chunk);
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
        if let Some(run) = self
            .span(offset, out.len() / 4)
            .filter(|_| offset.is_multiple_of(4))
        {
            for (chunk, word) in out.chunks_exact_mut(4).zip(run) {
                chunk.copy_from_slice(&word.load(Ordering::Acquire).to_le_bytes());
            }
            return;
        }
        for (i, chunk) in out.chunks_exact_mut(4).enumerate() {
            chunk.copy_from_slice(&self.load(offset + 4 * i as u64).to_le_bytes());
        }
    }

    /// Zeroes every word (a function reset) and forgets the queue pairs rung before it. Only
    /// 256-byte chunks a store made dirty are zeroed, unless the host maps the words itself
    /// ([`Self::use_memory`]): then every word is read, and written only when non-zero.
    pub fn clear(&self) {
        self.qp_rung.drain(|_| {});
        let per_chunk = (DIRTY_CHUNK / 4) as usize;
        if self.sees_every_store() {
            self.dirty_chunks
                .drain(|chunk| self.zero_words(chunk * per_chunk..(chunk + 1) * per_chunk));
        } else {
            self.dirty_chunks.drain(|_| {});
            self.zero_words(0..DOORBELL_WORDS);
        }
    }

    /// The words as they are and the queue-pair slots rung and not yet taken, to return to
    /// ([`Self::restore`]); `None` when the host maps the words itself, since its stores then
    /// leave no trace of which words it wrote.
    pub fn snapshot(&self) -> Option<DoorbellSnapshot> {
        if !self.sees_every_store() {
            return None;
        }
        let mut chunks = Vec::new();
        self.dirty_chunks.for_each(|chunk| {
            let mut words = [0u32; (DIRTY_CHUNK / 4) as usize];
            if let Some(run) = self.span(chunk as u64 * DIRTY_CHUNK, words.len()) {
                for (w, word) in words.iter_mut().zip(run) {
                    *w = word.load(Ordering::Acquire);
                }
            }
            chunks.push((chunk, words));
        });
        let mut rung = Vec::new();
        self.qp_rung.for_each(|slot| rung.push(slot));
        Some(DoorbellSnapshot { chunks, rung })
    }

    /// Returns the words and the rung slots to `s`: a reset, then the words `s` holds.
    pub fn restore(&self, s: &DoorbellSnapshot) {
        self.clear();
        for (chunk, words) in &s.chunks {
            if let Some(run) = self.span(*chunk as u64 * DIRTY_CHUNK, words.len()) {
                for (word, &w) in run.iter().zip(words) {
                    word.store(w, Ordering::Release);
                }
            }
            self.dirty_chunks.insert(*chunk);
        }
        for &slot in &s.rung {
            self.qp_rung.insert(slot);
        }
    }

    fn zero_words(&self, words: std::ops::Range<usize>) {
        let Some(run) = self.span(4 * words.start as u64, words.len()) else {
            return;
        };
        for w in run {
            // A word already zero is only read (no shared line written for it).
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rung(area: &DoorbellArea) -> Vec<u32> {
        let mut v = Vec::new();
        area.take_rung_qps(|s| v.push(s));
        v
    }

    /// Stores to a queue pair's send or receive doorbell put its slot on the engine's list once;
    /// other doorbells, WQE buffers and CQ words do not.
    #[test]
    fn qp_doorbell_stores_are_noted_once_per_slot() {
        let a = DoorbellArea::default();
        assert!(a.sees_every_store());
        a.store(db::QP_SQ_BASE + 4 * 5, 1);
        a.store(db::QP_SQ_BASE + 4 * 5, 2);
        a.store(db::QP_RQ_BASE + 4 * 700, 1);
        a.store(db::QP_SQ_BASE + 4 * (db::QP_SLOTS as u64 - 1), 9);
        a.store(db::SQ_BASE + 4 * 5, 1);
        a.store(db::CQ_BASE, 1);
        a.write(db::QP_SQ_WQE_BASE, &[0u8; 64]);
        assert_eq!(rung(&a), [5, 700, db::QP_SLOTS - 1]);
        assert!(rung(&a).is_empty(), "taken");
        // A byte-wise store (a host writing the word in pieces) is noted too, once it landed.
        a.write(db::QP_RQ_BASE + 4 * 64 + 1, &[7, 7]);
        assert_eq!(a.load(db::QP_RQ_BASE + 4 * 64), 0x0007_0700);
        assert_eq!(rung(&a), [64]);
    }

    /// A snapshot brings back the words and the rung slots not yet taken, whatever was stored
    /// after it; an area whose words the host maps cannot be kept.
    #[test]
    fn a_restored_area_holds_the_words_and_rung_slots_of_its_snapshot() {
        let a = DoorbellArea::default();
        a.store(db::QP_SQ_BASE + 4 * 5, 3);
        a.store(db::CQ_BASE + 4 * 2, 0x1234);
        a.write(db::QP_SQ_WQE_BASE + 64, &[0xab; 64]);
        let s = a.snapshot().expect("kept");
        a.store(db::QP_RQ_BASE + 4 * 9, 1);
        a.store(db::CQ_BASE + 4 * 2, 7);
        a.store(db::SQ_BASE, 5);
        assert_eq!(rung(&a), [5, 9]);
        a.restore(&s);
        assert_eq!(
            (a.load(db::CQ_BASE + 4 * 2), a.load(db::QP_SQ_BASE + 4 * 5)),
            (0x1234, 3)
        );
        assert_eq!(a.load(db::QP_SQ_WQE_BASE + 64 + 60), 0xabab_abab);
        assert_eq!(
            (a.load(db::SQ_BASE), a.load(db::QP_RQ_BASE + 4 * 9)),
            (0, 0)
        );
        assert_eq!(
            rung(&a),
            [5],
            "the slot rung before the snapshot, not the later one"
        );
        let shared = Arc::new(
            vm_memory::GuestRegionMmap::<()>::from_range(
                vm_memory::GuestAddress(0),
                BAR_DOORBELL_SIZE as usize,
                None,
            )
            .unwrap(),
        );
        a.use_memory(shared).unwrap();
        assert!(a.snapshot().is_none(), "the host's stores leave no trace");
    }

    fn dirty(area: &DoorbellArea) -> Vec<usize> {
        let mut v = Vec::new();
        area.dirty_chunks.drain(|c| v.push(c));
        v
    }

    proptest::proptest! {
        /// A run of words written at once (a WQE by MMIO) leaves what the same words stored one
        /// by one leave: the same words, the same rung queue-pair slots, and at least the same
        /// dirty chunks (all inside the run's), wherever the run lies — in a WQE buffer, across
        /// the doorbells, at the BAR's end or past it.
        #[test]
        fn a_run_of_words_marks_what_its_words_do(
            at in proptest::prop_oneof![
                0u64..0x40,
                (db::QP_SQ_BASE / 4 - 8)..(db::QP_SQ_BASE / 4 + 8),
                (db::QP_RQ_BASE / 4 + u64::from(db::QP_SLOTS) - 8)
                    ..(db::QP_RQ_BASE / 4 + u64::from(db::QP_SLOTS) + 8),
                (db::QP_SQ_WQE_BASE / 4)..(db::QP_SQ_WQE_BASE / 4 + 256),
                (DOORBELL_WORDS as u64 - 40)..(DOORBELL_WORDS as u64 + 4),
            ],
            words in proptest::collection::vec(
                proptest::prop_oneof![3 => proptest::strategy::Just(0u32), 1 => proptest::num::u32::ANY],
                2..130,
            ),
        ) {
            let offset = at * 4;
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let (run, one_by_one) = (DoorbellArea::default(), DoorbellArea::default());
            run.write(offset, &bytes);
            for (i, w) in words.iter().enumerate() {
                one_by_one.store(offset + 4 * i as u64, *w);
            }
            for i in 0..words.len() as u64 + 2 {
                proptest::prop_assert_eq!(run.load(offset + 4 * i), one_by_one.load(offset + 4 * i));
            }
            proptest::prop_assert_eq!(rung(&run), rung(&one_by_one));
            let (marked, needed) = (dirty(&run), dirty(&one_by_one));
            let end = offset + bytes.len() as u64;
            proptest::prop_assert!(needed.iter().all(|c| marked.contains(c)), "{marked:?} {needed:?}");
            let span = (offset / DIRTY_CHUNK) as usize..=((end - 1) / DIRTY_CHUNK) as usize;
            proptest::prop_assert!(marked.iter().all(|c| span.contains(c)));
        }
    }

    /// A reset zeroes every word any kind of store set (whole words, bytes, a WQE buffer's
    /// chunk, the last word of the BAR) and forgets the queue pairs rung before it, whether the
    /// area sees every store or the host maps its memory.
    #[test]
    fn a_reset_zeroes_every_word_a_store_set() {
        let last = BAR_DOORBELL_SIZE - 4;
        let shared = Arc::new(
            vm_memory::GuestRegionMmap::from_range(
                vm_memory::GuestAddress(0),
                BAR_DOORBELL_SIZE as usize,
                None,
            )
            .unwrap(),
        );
        for host_maps in [false, true] {
            let a = DoorbellArea::default();
            if host_maps {
                a.use_memory(shared.clone()).unwrap();
            }
            a.store(db::QP_SQ_BASE + 4 * 5, 1);
            a.store(db::SQ_BASE, 0xffff_ffff);
            a.write(db::QP_RQ_BASE + 4 * 9 + 3, &[7]);
            a.write(db::QP_SQ_WQE_BASE + 64, &[0xa5; 64]);
            a.store(last, 3);
            a.clear();
            for i in 0..DOORBELL_WORDS as u64 {
                assert_eq!(
                    a.load(4 * i),
                    0,
                    "word {i} after reset (host maps: {host_maps})"
                );
            }
            assert!(rung(&a).is_empty(), "rung before the reset");
            // And again after it: the pages are tracked anew.
            a.store(last, 4);
            a.clear();
            assert_eq!(a.load(last), 0);
        }
    }
}
