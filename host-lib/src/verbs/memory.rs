//! Protection domains and memory regions (ibv_alloc_pd, ibv_reg_mr).

use fld_driver::rdma::MemoryRegion;
use fld_driver::DmaBuffer;

use super::Sge;

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    pub handle: u32,
}

/// A registered memory region with its memory (ibv_reg_mr over a buffer the library
/// allocated in DMA-able memory, as `ibv_alloc_buf` would). A repeating region
/// ([`super::Context::reg_mr_repeating`]) is longer than its buffer: offsets wrap around it.
pub struct Mr {
    pub(super) region: MemoryRegion,
    pub(super) buf: DmaBuffer,
}

impl Mr {
    pub fn lkey(&self) -> u32 {
        self.region.key
    }
    pub fn rkey(&self) -> u32 {
        self.region.key
    }
    /// The region's virtual address (what peers use in RDMA operations).
    pub fn addr(&self) -> u64 {
        self.region.addr
    }
    pub fn len(&self) -> usize {
        self.region.length as usize
    }
    pub fn is_empty(&self) -> bool {
        self.region.length == 0
    }
    /// An SGE of `len` bytes at `offset` into the region.
    pub fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge {
            addr: self.addr() + offset as u64,
            length: len as u32,
            lkey: self.lkey(),
        }
    }
    pub fn write(&self, offset: usize, data: &[u8]) {
        write_wrapping(&self.buf, offset, data)
    }
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        read_wrapping(&self.buf, offset, out)
    }
}

/// Reads `out.len()` bytes at `offset` of a region whose pages repeat `buf`.
pub(super) fn read_wrapping(buf: &DmaBuffer, offset: usize, out: &mut [u8]) {
    let mut done = 0;
    while done < out.len() {
        let at = (offset + done) % buf.len();
        let n = (out.len() - done).min(buf.len() - at);
        buf.read(at, &mut out[done..done + n]);
        done += n;
    }
}

/// Writes `data` at `offset` of a region whose pages repeat `buf` (the identity for a region
/// as long as its buffer).
pub(super) fn write_wrapping(buf: &DmaBuffer, offset: usize, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let at = (offset + done) % buf.len();
        let n = (data.len() - done).min(buf.len() - at);
        buf.write(at, &data[done..done + n]);
        done += n;
    }
}
