//! DMA memory as the driver hands it out: each transport maps one area for its functions
//! ([`DmaArea`]) and carves buffers out of it; a buffer goes back to its area when its last view
//! drops, so a long-running application that creates and destroys queues and pools does not run
//! out. The allocator is first fit over a set of free extents that merge with their neighbours
//! on release: allocation happens on the control path (queue and pool creation), never per
//! packet, so a linear scan is cheap enough and keeps it obviously correct.
//!
//! Reuse is only safe once the device no longer writes the memory: the queue objects of
//! [`crate::nic`] hand their rings back only through `NicDriver::destroy_*_queue`, after the
//! device acknowledged the destroy command; a ring dropped any other way is marked with
//! [`DmaBuffer::keep_reserved`] and stays out of reuse for the life of the area.

use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::DriverError;

/// Buffers of a page or more are page aligned (rings and pools), smaller ones cache-line
/// aligned (command mailboxes, small descriptor rings).
fn alignment(len: usize) -> usize {
    if len >= 4096 {
        4096
    } else {
        64
    }
}

/// Free byte ranges of an area, `start -> len`, never adjacent (released neighbours merge).
#[derive(Debug)]
pub(crate) struct FreeExtents {
    free: BTreeMap<usize, usize>,
    capacity: usize,
    in_use: usize,
}

impl FreeExtents {
    pub(crate) fn new(capacity: usize) -> Self {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        FreeExtents {
            free,
            capacity,
            in_use: 0,
        }
    }

    /// Offset of `len` bytes (at least one) at the lowest free address with the alignment
    /// [`alignment`] asks for; `None` when no free extent holds them.
    pub(crate) fn reserve(&mut self, len: usize) -> Option<usize> {
        let len = len.max(1);
        let align = alignment(len);
        let (start, extent, at) = self.free.iter().find_map(|(&start, &extent)| {
            let at = start.checked_next_multiple_of(align)?;
            (at.checked_add(len)? <= start + extent).then_some((start, extent, at))
        })?;
        self.free.remove(&start);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + len;
        if end < start + extent {
            self.free.insert(end, start + extent - end);
        }
        self.in_use += len;
        Some(at)
    }

    /// Gives back `len` bytes at `start`, as [`FreeExtents::reserve`] handed them out.
    pub(crate) fn release(&mut self, start: usize, len: usize) {
        let mut start = start;
        let mut len = len.max(1);
        debug_assert!(start + len <= self.capacity);
        self.in_use -= len;
        if let Some((&prev, &prev_len)) = self.free.range(..start).next_back() {
            debug_assert!(prev + prev_len <= start, "double release at {start:#x}");
            if prev + prev_len == start {
                self.free.remove(&prev);
                start = prev;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += next_len;
        }
        debug_assert!(self
            .free
            .range(start..)
            .next()
            .is_none_or(|(&next, _)| next >= start + len));
        self.free.insert(start, len);
    }

    /// Bytes handed out and not given back (alignment gaps excluded).
    #[cfg_attr(not(feature = "in-process"), allow(dead_code))]
    pub(crate) fn in_use(&self) -> usize {
        self.in_use
    }

    /// Number of free extents (1 when everything was given back).
    #[cfg(test)]
    fn fragments(&self) -> usize {
        self.free.len()
    }
}

/// One contiguous area of memory mapped for DMA at `iova`, the store every transport allocates
/// its buffers from.
pub(crate) struct DmaArea {
    iova: u64,
    ptr: *mut u8,
    extents: Mutex<FreeExtents>,
    /// Keeps the mapping alive while any buffer of the area lives.
    _mapping: Arc<dyn Send + Sync>,
}

// SAFETY: the area only hands out raw ranges; DmaBuffer's accessors copy through raw pointers.
unsafe impl Send for DmaArea {}
unsafe impl Sync for DmaArea {}

impl DmaArea {
    /// # Safety
    /// `ptr..ptr + len` must stay mapped, readable and writable as long as `mapping` lives, and
    /// be reachable by the functions at `iova..iova + len`.
    pub(crate) unsafe fn new(
        iova: u64,
        ptr: *mut u8,
        len: usize,
        mapping: Arc<dyn Send + Sync>,
    ) -> Arc<Self> {
        Arc::new(DmaArea {
            iova,
            ptr,
            extents: Mutex::new(FreeExtents::new(len)),
            _mapping: mapping,
        })
    }

    fn extents(&self) -> std::sync::MutexGuard<'_, FreeExtents> {
        self.extents.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `len` bytes of the area, given back when the last view of the buffer drops.
    pub(crate) fn alloc(self: &Arc<Self>, len: usize) -> Result<DmaBuffer, DriverError> {
        let offset = self
            .extents()
            .reserve(len)
            .ok_or(DriverError::OutOfDmaMemory(len))?;
        let allocation = Arc::new(Allocation {
            area: self.clone(),
            offset,
            len,
            keep_reserved: AtomicBool::new(false),
        });
        Ok(DmaBuffer {
            iova: self.iova + offset as u64,
            // SAFETY: reserve returned a range inside the area's `len` bytes.
            ptr: unsafe { self.ptr.add(offset) },
            len,
            _backing: allocation,
        })
    }

    /// Bytes currently handed out.
    #[cfg_attr(not(feature = "in-process"), allow(dead_code))]
    pub(crate) fn in_use(&self) -> usize {
        self.extents().in_use()
    }
}

/// One buffer's hold on its range of the area.
struct Allocation {
    area: Arc<DmaArea>,
    offset: usize,
    len: usize,
    /// The device may still write the range: never hand it out again.
    keep_reserved: AtomicBool,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if !*self.keep_reserved.get_mut() {
            self.area.extents().release(self.offset, self.len);
        }
    }
}

/// A DMA-able buffer: host memory at `iova` as the device sees it. Accessors check bounds and
/// panic on a driver bug (an offset outside the buffer), never on device-written contents.
#[derive(Clone)]
pub struct DmaBuffer {
    iova: u64,
    ptr: *mut u8,
    len: usize,
    /// The allocation (and through it the area's mapping) this buffer is a view of.
    _backing: Arc<Allocation>,
}

// SAFETY: the buffer points into memory its allocation (in `_backing`) keeps alive; concurrent access by the device
// is the DMA contract of any NIC ring, and all accesses go through copies, never references.
unsafe impl Send for DmaBuffer {}
unsafe impl Sync for DmaBuffer {}

impl DmaBuffer {
    pub fn iova(&self) -> u64 {
        self.iova
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: usize, n: usize) {
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.len),
            "DMA buffer access {off}+{n} beyond {}",
            self.len
        );
    }

    /// A view of `len` bytes at `off` sharing the same backing.
    pub fn slice(&self, off: usize, len: usize) -> DmaBuffer {
        self.check(off, len);
        // SAFETY: in bounds of a valid buffer.
        DmaBuffer {
            iova: self.iova + off as u64,
            ptr: unsafe { self.ptr.add(off) },
            len,
            _backing: self._backing.clone(),
        }
    }

    pub fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len());
        // SAFETY: bounds checked; no Rust reference to the memory exists.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }

    pub fn read(&self, off: usize, buf: &mut [u8]) {
        self.check(off, buf.len());
        // SAFETY: bounds checked.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), buf.as_mut_ptr(), buf.len()) }
    }

    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        self.check(off, len);
        // SAFETY: bounds checked.
        unsafe { std::ptr::write_bytes(self.ptr.add(off), byte, len) }
    }

    pub fn write_obj<T: IntoBytes + Immutable>(&self, off: usize, v: &T) {
        self.write(off, v.as_bytes())
    }

    pub fn read_obj<T: FromBytes + IntoBytes>(&self, off: usize) -> T {
        let n = core::mem::size_of::<T>();
        self.check(off, n);
        let mut v = T::new_zeroed();
        self.read(off, v.as_mut_bytes());
        v
    }

    /// A byte the device may be writing right now (an owner bit), read once, then an acquire
    /// fence so later reads see what the device wrote before it.
    pub fn read_volatile_u8(&self, off: usize) -> u8 {
        self.check(off, 1);
        // SAFETY: bounds checked.
        let v = unsafe { std::ptr::read_volatile(self.ptr.add(off)) };
        fence(Ordering::Acquire);
        v
    }

    /// Keeps the whole allocation this buffer is a view of out of reuse after its last view
    /// drops: for memory a device may still write (a queue that was not destroyed).
    pub fn keep_reserved(&self) {
        self._backing.keep_reserved.store(true, Ordering::Relaxed);
    }

    /// Raw pointer for bulk copies by the owner of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl std::fmt::Debug for DmaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DmaBuffer {{ iova: {:#x}, len: {} }}",
            self.iova, self.len
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn released_neighbours_merge_back_into_one_extent() {
        let mut e = FreeExtents::new(1 << 20);
        let a = e.reserve(4096).unwrap();
        let b = e.reserve(100).unwrap();
        let c = e.reserve(8192).unwrap();
        assert_eq!(
            (a, b, c),
            (0, 4096, 8192),
            "page, then cache line, then page aligned"
        );
        assert_eq!(e.in_use(), 4096 + 100 + 8192);
        e.release(b, 100);
        assert_eq!(e.reserve(64).unwrap(), 4096, "the hole is reused first");
        e.release(4096, 64);
        e.release(a, 4096);
        e.release(c, 8192);
        assert_eq!((e.in_use(), e.fragments()), (0, 1));
        assert_eq!(
            e.reserve(1 << 20),
            Some(0),
            "the whole area is one extent again"
        );
        assert_eq!(e.reserve(1), None);
    }

    #[test]
    fn buffers_return_to_the_area_when_their_last_view_drops() {
        let mut memory = vec![0u8; 64 << 10];
        let mapping: Arc<dyn Send + Sync> = Arc::new(());
        // SAFETY: `memory` outlives the area and every buffer of this test.
        let area = unsafe { DmaArea::new(0x1000_0000, memory.as_mut_ptr(), memory.len(), mapping) };
        let ring = area.alloc(16 << 10).unwrap();
        assert_eq!(ring.iova(), 0x1000_0000);
        let half = ring.slice(8 << 10, 8 << 10);
        drop(ring);
        assert_eq!(area.in_use(), 16 << 10, "a slice keeps the allocation");
        half.write(0, b"still mine");
        drop(half);
        assert_eq!(area.in_use(), 0);
        let all: Vec<_> = (0..4).map(|_| area.alloc(16 << 10).unwrap()).collect();
        assert!(matches!(area.alloc(1), Err(DriverError::OutOfDmaMemory(1))));
        drop(all);
        assert_eq!(area.alloc(64 << 10).unwrap().iova(), 0x1000_0000);
        let ring = area.alloc(4096).unwrap();
        ring.slice(0, 64).keep_reserved();
        drop(ring);
        assert_eq!(
            area.in_use(),
            4096,
            "a ring the device may still write is never reused"
        );
        assert_eq!(area.alloc(4096).unwrap().iova(), 0x1000_0000 + 4096);
    }

    proptest! {
        /// Against a byte map of the area: every reservation is aligned, in bounds, disjoint
        /// from the live ones and the lowest place it fits; a reservation fails only when no
        /// such place exists; after releasing everything the area is one extent again.
        #[test]
        fn first_fit_matches_a_byte_map(
            ops in proptest::collection::vec((any::<bool>(), 1usize..12_000, any::<prop::sample::Index>()), 1..120)
        ) {
            const CAP: usize = 64 << 10;
            let mut e = FreeExtents::new(CAP);
            let mut used = vec![false; CAP];
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (alloc, len, pick) in ops {
                if alloc || live.is_empty() {
                    let align = alignment(len);
                    let expected = (0..CAP)
                        .step_by(align)
                        .find(|&at| at + len <= CAP && used[at..at + len].iter().all(|u| !u));
                    let got = e.reserve(len);
                    prop_assert_eq!(got, expected);
                    if let Some(at) = got {
                        used[at..at + len].fill(true);
                        live.push((at, len));
                    }
                } else {
                    let (at, len) = live.swap_remove(pick.index(live.len()));
                    used[at..at + len].fill(false);
                    e.release(at, len);
                }
                prop_assert_eq!(e.in_use(), live.iter().map(|l| l.1).sum::<usize>());
            }
            for (at, len) in live.drain(..) {
                e.release(at, len);
            }
            prop_assert_eq!((e.in_use(), e.fragments()), (0, 1));
        }
    }
}
