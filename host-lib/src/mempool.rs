//! A pool of fixed-size packet buffers in DMA memory, in the shape of DPDK's rte_mempool and
//! rte_mbuf. Buffers move between the pool and the application in bulk, so the data path takes
//! the pool's lock once per burst, not once per packet.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use fld_driver::{DmaBuffer, DriverError, PciDevice};

/// Headroom before packet data, as in DPDK (room to prepend headers).
pub const HEADROOM: u32 = 128;

/// Offload requests and results carried with a packet.
pub mod ol {
    /// Transmit: ask the NIC to fill the IPv4 header checksum.
    pub const TX_IP_CKSUM: u32 = 1 << 0;
    /// Transmit: ask the NIC to fill the TCP/UDP checksum.
    pub const TX_L4_CKSUM: u32 = 1 << 1;
    pub const RX_IP_CKSUM_GOOD: u32 = 1 << 8;
    pub const RX_IP_CKSUM_BAD: u32 = 1 << 9;
    pub const RX_L4_CKSUM_GOOD: u32 = 1 << 10;
    pub const RX_L4_CKSUM_BAD: u32 = 1 << 11;
    /// `hash` holds the RSS hash.
    pub const RX_RSS_HASH: u32 = 1 << 12;
    /// `flow_tag` holds a mark set by a flow rule.
    pub const RX_FDIR_MARK: u32 = 1 << 13;
    /// The packet was longer than the buffer; `pkt_len` is the wire length.
    pub const RX_TRUNCATED: u32 = 1 << 14;
}

/// One packet buffer. It is owned by whoever holds it (application, a queue, or the pool); a
/// dropped `Mbuf` is not returned to its pool, as with DPDK's rte_pktmbuf_free being explicit.
#[derive(Debug)]
pub struct Mbuf {
    ptr: NonNull<u8>,
    iova: u64,
    buf_len: u32,
    data_off: u32,
    data_len: u32,
    index: u32,
    /// Length of the packet on the wire (differs from `data_len` when truncated).
    pub pkt_len: u32,
    pub ol_flags: u32,
    pub hash: u32,
    pub flow_tag: u32,
}

// SAFETY: an Mbuf is the unique handle of its buffer region.
unsafe impl Send for Mbuf {}

impl Mbuf {
    pub fn data(&self) -> &[u8] {
        // SAFETY: [data_off, data_off + data_len) is inside this mbuf's buffer, which only this
        // handle accesses while the application holds it.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.as_ptr().add(self.data_off as usize),
                self.data_len as usize,
            )
        }
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`, with exclusive access through &mut self.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.ptr.as_ptr().add(self.data_off as usize),
                self.data_len as usize,
            )
        }
    }
    /// Bus address of the first data byte.
    pub fn data_iova(&self) -> u64 {
        self.iova + self.data_off as u64
    }
    pub fn len(&self) -> usize {
        self.data_len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.data_len == 0
    }
    /// Bytes available after the data offset.
    pub fn capacity(&self) -> usize {
        (self.buf_len - self.data_off) as usize
    }
    /// Sets the data length (bounded by the capacity) and returns the data.
    pub fn set_len(&mut self, len: usize) -> &mut [u8] {
        self.data_len = len.min(self.capacity()) as u32;
        self.pkt_len = self.data_len;
        self.data_mut()
    }
    /// Replaces the data with `bytes` (truncated to capacity).
    pub fn fill_from(&mut self, bytes: &[u8]) {
        let d = self.set_len(bytes.len());
        let n = d.len();
        d.copy_from_slice(&bytes[..n]);
    }
    /// Bus address and size of the whole buffer (receive posting).
    pub(crate) fn buffer(&self) -> (u64, u32) {
        (self.iova + HEADROOM as u64, self.buf_len - HEADROOM)
    }
    /// The buffer's number in its pool ([`Mempool::free_indices`]).
    pub(crate) fn pool_index(&self) -> u32 {
        self.index
    }
    pub(crate) fn set_received(&mut self, data_len: u32, pkt_len: u32) {
        self.data_off = HEADROOM;
        self.data_len = data_len.min(self.buf_len - HEADROOM);
        self.pkt_len = pkt_len;
    }
}

/// Pool statistics.
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolStats {
    pub size: u32,
    pub available: u32,
}

/// A pool of `count` buffers of `buf_size` bytes (headroom included) in DMA memory.
pub struct Mempool {
    memory: DmaBuffer,
    buf_size: u32,
    count: u32,
    free: Mutex<Vec<u32>>,
}

impl Mempool {
    pub fn new(dev: &dyn PciDevice, count: u32, buf_size: u32) -> Result<Arc<Self>, DriverError> {
        let buf_size = buf_size.max(HEADROOM + 64).next_multiple_of(64);
        let memory = dev.dma_alloc(count as usize * buf_size as usize)?;
        Ok(Arc::new(Mempool {
            memory,
            buf_size,
            count,
            free: Mutex::new((0..count).rev().collect()),
        }))
    }

    /// Keeps the pool's memory out of reuse once the pool is gone: its buffers were posted to
    /// receive queues the device may still write.
    pub(crate) fn keep_reserved(&self) {
        self.memory.keep_reserved();
    }

    /// Largest packet a buffer holds.
    pub fn data_room(&self) -> u32 {
        self.buf_size - HEADROOM
    }

    fn mbuf(&self, index: u32) -> Mbuf {
        let off = index as usize * self.buf_size as usize;
        // SAFETY: the offset is inside the pool's buffer; as_ptr is never null for a mapping.
        let ptr = unsafe { NonNull::new_unchecked(self.memory.as_ptr().add(off)) };
        // Data at the headroom, empty, no offload flags.
        Mbuf {
            ptr,
            iova: self.memory.iova() + off as u64,
            buf_len: self.buf_size,
            data_off: HEADROOM,
            data_len: 0,
            index,
            pkt_len: 0,
            ol_flags: 0,
            hash: 0,
            flow_tag: 0,
        }
    }

    pub fn alloc(&self) -> Option<Mbuf> {
        let i = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        Some(self.mbuf(i))
    }

    /// Appends up to `n` buffers to `out`; returns how many it got.
    pub fn alloc_bulk(&self, out: &mut Vec<Mbuf>, n: usize) -> usize {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let k = n.min(free.len());
        // The last `k` free buffers, last first: the order `k` pops would give them.
        let rest = free.len() - k;
        out.extend(free.drain(rest..).rev().map(|i| self.mbuf(i)));
        k
    }

    pub fn free(&self, m: Mbuf) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(m.index);
    }

    /// Returns every buffer drained from `bufs` to the pool.
    pub fn free_bulk(&self, bufs: impl IntoIterator<Item = Mbuf>) {
        self.free_indices(bufs.into_iter().map(|m| m.index));
    }

    /// Returns the buffers numbered `indices` ([`Mbuf::pool_index`]) to the pool: a queue that
    /// holds a buffer only while the device reads it keeps its number, not its handle.
    pub(crate) fn free_indices(&self, indices: impl IntoIterator<Item = u32>) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.extend(indices);
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            size: self.count,
            available: self.free.lock().unwrap_or_else(|e| e.into_inner()).len() as u32,
        }
    }
}
