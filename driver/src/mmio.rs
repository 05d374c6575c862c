//! BARs mapped into the driver's address space (vfio-pci regions, vfio-user sparse-mmap areas):
//! loads and stores instead of system calls or messages.

use std::os::fd::RawFd;

/// A BAR (or the part of one a transport offers) mapped into this process.
pub(crate) struct BarMapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: device memory, accessed only with volatile loads and stores.
unsafe impl Send for BarMapping {}
unsafe impl Sync for BarMapping {}

impl BarMapping {
    /// Maps `len` bytes of `fd` at `offset`, shared and writable; `None` if the kernel refuses.
    pub(crate) fn map(fd: RawFd, offset: u64, len: usize) -> Option<BarMapping> {
        let offset = libc::off_t::try_from(offset).ok()?;
        // SAFETY: a new mapping of a descriptor we were given; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        };
        (p != libc::MAP_FAILED).then(|| BarMapping { ptr: p.cast(), len })
    }

    fn at(&self, offset: u64, len: usize) -> Option<*mut u8> {
        let end = offset.checked_add(len as u64)?;
        // SAFETY: in bounds of the mapping.
        (end <= self.len as u64).then(|| unsafe { self.ptr.add(offset as usize) })
    }

    /// Reads `data.len()` bytes at `offset` with one access of that width when it is 2, 4 or 8
    /// bytes and aligned; false if the range is outside the mapping.
    pub(crate) fn read(&self, offset: u64, data: &mut [u8]) -> bool {
        let Some(p) = self.at(offset, data.len()) else {
            return false;
        };
        // SAFETY: `at` checked the range.
        unsafe { copy(p, data.as_mut_ptr(), data.len(), false) };
        true
    }

    /// Writes `data` at `offset`, as [`BarMapping::read`] reads.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> bool {
        let Some(p) = self.at(offset, data.len()) else {
            return false;
        };
        // SAFETY: `at` checked the range; the source is only read.
        unsafe { copy(p, data.as_ptr().cast_mut(), data.len(), true) };
        true
    }
}

impl Drop for BarMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Copies between device memory at `p` and `buf` with accesses of the natural width: an aligned
/// 4-byte doorbell store is one 4-byte store, as the device expects.
///
/// # Safety
/// `p..p+len` must be inside a live mapping and `buf..buf+len` valid.
unsafe fn copy(p: *mut u8, buf: *mut u8, len: usize, write: bool) {
    macro_rules! access {
        ($t:ty, $p:expr, $buf:expr) => {{
            if write {
                let v = std::ptr::read_unaligned($buf as *const $t);
                std::ptr::write_volatile($p as *mut $t, v);
            } else {
                let v = std::ptr::read_volatile($p as *const $t);
                std::ptr::write_unaligned($buf as *mut $t, v);
            }
        }};
    }
    let aligned = |n: usize| (p as usize).is_multiple_of(n);
    match len {
        8 if aligned(8) => access!(u64, p, buf),
        4 if aligned(4) => access!(u32, p, buf),
        2 if aligned(2) => access!(u16, p, buf),
        _ => {
            for i in 0..len {
                access!(u8, p.add(i), buf.add(i))
            }
        }
    }
}
