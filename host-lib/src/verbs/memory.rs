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
/// allocated in DMA-able memory, as `ibv_alloc_buf` would).
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
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
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
        self.buf.write(offset, data)
    }
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.buf.read(offset, out)
    }
}
