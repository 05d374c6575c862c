//! The transport-independent view of a PCIe function that the driver programs against.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use fld_abi::nic::CmdStatus;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Failures the driver reports.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("not an fldemu function (vendor {vendor:#06x}, device {device:#06x})")]
    WrongDevice { vendor: u16, device: u16 },
    #[error("device not ready (status {0:#x})")]
    NotReady(u32),
    #[error("unsupported command interface revision {0}")]
    InterfaceRevision(u32),
    #[error("command {opcode:#x} failed: {status:?} (syndrome {syndrome:#x})")]
    Command {
        opcode: u16,
        status: Option<CmdStatus>,
        syndrome: u32,
    },
    #[error("command {opcode:#x} not delivered (delivery status {delivery})")]
    Delivery { opcode: u16, delivery: u8 },
    #[error("command {0:#x} timed out")]
    Timeout(u16),
    #[error("out of DMA memory ({0} bytes requested)")]
    OutOfDmaMemory(usize),
    #[error("transport: {0}")]
    Transport(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
}

impl DriverError {
    /// The command status if this is a command failure.
    pub fn status(&self) -> Option<CmdStatus> {
        match self {
            DriverError::Command { status, .. } => *status,
            _ => None,
        }
    }
}

/// One PCIe function as a driver reaches it.
pub trait PciDevice: Send + Sync {
    fn config_read(&self, offset: u64, data: &mut [u8]);
    fn config_write(&self, offset: u64, data: &[u8]);
    fn bar_read(&self, bar: u8, offset: u64, data: &mut [u8]);
    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]);
    /// Memory the device can reach by DMA, mapped for this function.
    fn dma_alloc(&self, len: usize) -> Result<DmaBuffer, DriverError>;
    /// Programs and enables MSI-X vectors `0..vectors`.
    fn enable_msix(&self, vectors: u16) -> Result<(), DriverError>;
    /// Interrupts delivered on `vector` since the last call.
    fn take_interrupts(&self, vector: u16) -> u64;
    /// Lets an in-process device model advance; transports with their own device threads return
    /// at once.
    fn run_device(&self) {}
    /// Whether BAR `bar` is mapped into the driver (loads and stores reach the device with no
    /// system call or message: the doorbell pages over vfio and vfio-user).
    fn bar_is_mapped(&self, _bar: u8) -> bool {
        false
    }

    fn read32(&self, bar: u8, offset: u64) -> u32 {
        let mut b = [0; 4];
        self.bar_read(bar, offset, &mut b);
        u32::from_le_bytes(b)
    }
    fn write32(&self, bar: u8, offset: u64, v: u32) {
        self.bar_write(bar, offset, &v.to_le_bytes())
    }
    fn config_read16(&self, offset: u64) -> u16 {
        let mut b = [0; 2];
        self.config_read(offset, &mut b);
        u16::from_le_bytes(b)
    }
    fn config_write16(&self, offset: u64, v: u16) {
        self.config_write(offset, &v.to_le_bytes())
    }
    /// The bus address programmed into 64-bit memory BAR `bar` (what peers use to reach it).
    fn bar_bus_address(&self, bar: u8) -> u64 {
        let mut lo = [0; 4];
        let mut hi = [0; 4];
        self.config_read(0x10 + 4 * bar as u64, &mut lo);
        self.config_read(0x14 + 4 * bar as u64, &mut hi);
        ((u32::from_le_bytes(hi) as u64) << 32) | (u32::from_le_bytes(lo) & !0xf) as u64
    }
}

/// Bump allocation inside one DMA area, shared by the transports: buffers of a page or more
/// are page aligned, smaller ones cache-line (descriptor) aligned; nothing is ever freed.
#[derive(Default)]
pub(crate) struct BumpAllocator {
    next: std::sync::Mutex<usize>,
}

impl BumpAllocator {
    /// Offset of `len` fresh bytes in an area of `capacity` bytes.
    pub(crate) fn reserve(&self, len: usize, capacity: usize) -> Result<usize, DriverError> {
        let align = if len >= 4096 { 4096 } else { 64 };
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let start = next.next_multiple_of(align);
        let end = start
            .checked_add(len.max(1))
            .filter(|e| *e <= capacity)
            .ok_or(DriverError::OutOfDmaMemory(len))?;
        *next = end;
        Ok(start)
    }

    /// Bytes handed out so far, alignment gaps included.
    pub(crate) fn used(&self) -> usize {
        *self.next.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A DMA-able buffer: host memory at `iova` as the device sees it. Accessors check bounds and
/// panic on a driver bug (an offset outside the buffer), never on device-written contents.
#[derive(Clone)]
pub struct DmaBuffer {
    iova: u64,
    ptr: *mut u8,
    len: usize,
    _backing: Arc<dyn Send + Sync>,
}

// SAFETY: the buffer points into memory kept alive by `_backing`; concurrent access by the device
// is the DMA contract of any NIC ring, and all accesses go through copies, never references.
unsafe impl Send for DmaBuffer {}
unsafe impl Sync for DmaBuffer {}

impl DmaBuffer {
    /// # Safety
    /// `ptr..ptr+len` must stay valid and mapped as long as `backing` lives.
    pub unsafe fn new(iova: u64, ptr: *mut u8, len: usize, backing: Arc<dyn Send + Sync>) -> Self {
        DmaBuffer {
            iova,
            ptr,
            len,
            _backing: backing,
        }
    }

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
