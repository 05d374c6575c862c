//! The vfio-user client transport: the driver reaches `fldemu serve` over its sockets exactly as
//! QEMU does, without QEMU. DMA memory is one memfd shared with every function (mapped at the
//! same IOVA in each function's address space), BAR and configuration accesses are region
//! messages, and MSI-X vectors are eventfds handed over with SET_IRQS — one vector per message,
//! because the server advertises a limit of one file descriptor per message.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};

use fld_abi::pci::{CMD_MEMORY, OFF_BAR0, OFF_COMMAND};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::Client;

use crate::dma::DmaArea;
use crate::eventfds::EventfdVectors;
use crate::mmio::BarMapping;
use crate::{DmaBuffer, DriverError, PciDevice};

/// IOVA of the shared DMA memory in every function's address space.
pub const DMA_IOVA: u64 = 0x1_0000_0000;
/// Where enumeration places BARs (guest-physical addresses, as firmware would).
pub const MMIO_BASE: u64 = 0x40_0000_0000;

fn transport<E: std::fmt::Display>(e: E) -> DriverError {
    DriverError::Transport(e.to_string())
}

/// A shared memfd mapped into this process.
struct SharedMemory {
    file: File,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping lives as long as the struct; accesses go through DmaBuffer copies.
unsafe impl Send for SharedMemory {}
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    fn new(len: usize) -> Result<Self, DriverError> {
        // SAFETY: plain system calls on a fresh descriptor; results are checked.
        unsafe {
            let fd = libc::memfd_create(
                c"fldemu-dma".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            );
            if fd < 0 {
                return Err(transport(std::io::Error::last_os_error()));
            }
            let file = File::from_raw_fd(fd);
            if libc::ftruncate(fd, len as libc::off_t) != 0 {
                return Err(transport(std::io::Error::last_os_error()));
            }
            // Its size is fixed from here, as QEMU seals guest RAM: the server maps only memory
            // that cannot shrink under it.
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
            if libc::fcntl(fd, libc::F_ADD_SEALS, seals) != 0 {
                return Err(transport(std::io::Error::last_os_error()));
            }
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if ptr == libc::MAP_FAILED {
                return Err(transport(std::io::Error::last_os_error()));
            }
            Ok(SharedMemory {
                file,
                ptr: ptr.cast(),
                len,
            })
        }
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping created in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One function reached over a vfio-user socket.
pub struct VfioUserDevice {
    /// BARs (or BAR areas) the server offers for mmap: doorbell pages, written without a message.
    bars: [Option<BarMapping>; 6],
    client: Mutex<Client>,
    memory: Arc<DmaArea>,
    vectors: EventfdVectors,
}

impl VfioUserDevice {
    fn mapped(&self, bar: u8) -> Option<&BarMapping> {
        self.bars.get(bar as usize)?.as_ref()
    }

    /// Withdraws the device's access to `[iova, iova + size)` (DMA_UNMAP), as a client may at
    /// any time, even under memory the device is using.
    pub fn dma_unmap(&self, iova: u64, size: u64) -> Result<(), DriverError> {
        self.client().dma_unmap(iova, size).map_err(transport)
    }

    /// VFIO_DEVICE_RESET: the server resets the function and keeps its configuration.
    pub fn reset(&self) -> Result<(), DriverError> {
        self.client().reset().map_err(transport)
    }

    fn client(&self) -> std::sync::MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl PciDevice for VfioUserDevice {
    fn config_read(&self, offset: u64, data: &mut [u8]) {
        if self
            .client()
            .region_read(VFIO_PCI_CONFIG_REGION_INDEX, offset, data)
            .is_err()
        {
            data.fill(0xff);
        }
    }
    fn config_write(&self, offset: u64, data: &[u8]) {
        let _ = self
            .client()
            .region_write(VFIO_PCI_CONFIG_REGION_INDEX, offset, data);
    }
    fn bar_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        if self.mapped(bar).is_some_and(|m| m.read(offset, data)) {
            return;
        }
        if self.client().region_read(bar as u32, offset, data).is_err() {
            data.fill(0xff);
        }
    }
    fn bar_is_mapped(&self, bar: u8) -> bool {
        self.mapped(bar).is_some()
    }
    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]) {
        if !self.mapped(bar).is_some_and(|m| m.write(offset, data)) {
            let _ = self.client().region_write(bar as u32, offset, data);
        }
    }
    fn dma_alloc(&self, len: usize) -> Result<DmaBuffer, DriverError> {
        self.memory.alloc(len)
    }
    fn enable_msix(&self, vectors: u16) -> Result<(), DriverError> {
        // One vector per message: the server accepts one descriptor per message.
        self.vectors.replace(vectors, |fds| {
            let mut client = self.client();
            for (v, fd) in fds.iter().enumerate() {
                client
                    .set_irqs(
                        VFIO_PCI_MSIX_IRQ_INDEX,
                        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                        v as u32,
                        1,
                        &[fd.as_raw_fd()],
                    )
                    .map_err(transport)?;
            }
            Ok(())
        })
    }
    fn take_interrupts(&self, vector: u16) -> u64 {
        self.vectors.take(vector)
    }
    fn run_device(&self) {
        // The server's engine runs on its own; give it the core for a moment.
        std::thread::yield_now();
    }
}

/// The host side of a vfio-user card: one connection per function, shared DMA memory, BARs
/// assigned as firmware would.
pub struct VfioUserHost {
    devices: Vec<Arc<VfioUserDevice>>,
}

impl VfioUserHost {
    /// Connects to the sockets `names` under `dir`, maps `memory_bytes` of shared DMA memory
    /// into each function, and enumerates: BAR sizes probed, addresses assigned, memory decode on.
    pub fn connect(dir: &Path, names: &[&str], memory_bytes: usize) -> Result<Self, DriverError> {
        let shared = Arc::new(SharedMemory::new(memory_bytes)?);
        // SAFETY: the memfd stays mapped while the area holds it; every function maps it at
        // DMA_IOVA below.
        let memory = unsafe { DmaArea::new(DMA_IOVA, shared.ptr, shared.len, shared.clone()) };
        let mut devices = Vec::new();
        let mut next_bar = MMIO_BASE;
        for name in names {
            let mut client = Client::new(&dir.join(name)).map_err(transport)?;
            client
                .dma_map(0, DMA_IOVA, memory_bytes as u64, shared.file.as_raw_fd())
                .map_err(transport)?;
            let bars = std::array::from_fn(|i| map_region(&client, i as u32));
            let dev = Arc::new(VfioUserDevice {
                bars,
                client: Mutex::new(client),
                memory: memory.clone(),
                vectors: EventfdVectors::default(),
            });
            // As firmware does: no decode while the BARs are sized and placed.
            let command = dev.config_read16(OFF_COMMAND as u64);
            dev.config_write16(OFF_COMMAND as u64, command & !CMD_MEMORY);
            next_bar = assign_bars(dev.as_ref(), next_bar);
            dev.config_write16(OFF_COMMAND as u64, command | CMD_MEMORY);
            devices.push(dev);
        }
        Ok(VfioUserHost { devices })
    }

    pub fn device(&self, index: usize) -> Option<Arc<VfioUserDevice>> {
        self.devices.get(index).cloned()
    }
}

/// Maps region `index` when the server offers it for mmap with a file (one area covering the
/// region: the doorbell pages).
fn map_region(client: &Client, index: u32) -> Option<BarMapping> {
    use vfio_bindings::bindings::vfio::VFIO_REGION_INFO_FLAG_MMAP;
    let region = client.region(index)?;
    if region.flags & VFIO_REGION_INFO_FLAG_MMAP == 0 || region.size == 0 {
        return None;
    }
    let covers_all = region.sparse_areas.is_empty()
        || region
            .sparse_areas
            .iter()
            .any(|a| a.offset == 0 && a.size >= region.size);
    if !covers_all {
        return None;
    }
    let file = region.file_offset.as_ref()?;
    BarMapping::map(file.file().as_raw_fd(), file.start(), region.size as usize)
}

/// Probes and assigns the 64-bit memory BARs of one function from `next`; returns the next free
/// address.
fn assign_bars(dev: &dyn PciDevice, mut next: u64) -> u64 {
    let mut bar = 0u64;
    while bar < 6 {
        let off = OFF_BAR0 as u64 + 4 * bar;
        let mut lo = [0u8; 4];
        dev.config_read(off, &mut lo);
        let is_64 = u32::from_le_bytes(lo) & 0b110 == 0b100;
        dev.config_write(off, &[0xff; 4]);
        dev.config_read(off, &mut lo);
        let mut size_mask = (u32::from_le_bytes(lo) & !0xf) as u64;
        if is_64 {
            let mut hi = [0u8; 4];
            dev.config_write(off + 4, &[0xff; 4]);
            dev.config_read(off + 4, &mut hi);
            size_mask |= (u32::from_le_bytes(hi) as u64) << 32;
        } else {
            size_mask |= 0xffff_ffff_0000_0000;
        }
        if size_mask & 0xffff_ffff != 0 {
            let size = (!size_mask).wrapping_add(1);
            next = next.next_multiple_of(size);
            dev.config_write(off, &(next as u32).to_le_bytes());
            if is_64 {
                dev.config_write(off + 4, &((next >> 32) as u32).to_le_bytes());
            }
            next += size;
        }
        bar += if is_64 { 2 } else { 1 };
    }
    next
}
