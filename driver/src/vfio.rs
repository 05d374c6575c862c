//! The Linux vfio transport: the driver inside a machine (a guest whose QEMU attaches the card
//! over vfio-user, or any host with the functions behind an IOMMU) reaches the functions through
//! vfio-pci, as a user-space NIC driver would.
//!
//! * Functions are found in sysfs by vendor/device ID and bound to vfio-pci
//!   ([`bind_to_vfio_pci`]).
//! * All functions share one container, so one IOMMU address space: DMA memory is one anonymous
//!   buffer (huge pages when the system has them) mapped at [`DMA_IOVA`] for every function.
//! * BARs that vfio-pci lets us map are mmapped: doorbell pages that the device offers as
//!   sparse-mmap areas become plain stores, trapped registers still reach the device through
//!   the hypervisor. Accesses keep their width (an aligned 4-byte store is one 4-byte store).
//! * MSI-X vectors are eventfds given to `VFIO_DEVICE_SET_IRQS`; Bus Master Enable is set by the
//!   driver in the command register (vfio-pci does not).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fld_abi::pci::{CMD_BUS_MASTER, CMD_MEMORY, OFF_COMMAND};
use vfio_bindings::bindings::vfio::{VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioOps};

use crate::dma::DmaArea;
use crate::eventfds::EventfdVectors;
use crate::mmio::BarMapping;
use crate::{DmaBuffer, DriverError, PciDevice};

/// IOVA of the DMA memory in the shared IOMMU domain: above any 32-bit or low 64-bit BAR window
/// and inside the 39-bit address width of the smallest emulated IOMMU.
pub const DMA_IOVA: u64 = 0x20_0000_0000;

const SYSFS_PCI: &str = "/sys/bus/pci/devices";

fn transport<E: std::fmt::Display>(e: E) -> DriverError {
    DriverError::Transport(e.to_string())
}

fn sysfs_hex(path: &Path) -> Option<u32> {
    let s = std::fs::read_to_string(path).ok()?;
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// PCI addresses (`0000:00:03.0`) of the functions with this vendor and device ID, in bus
/// order.
pub fn find_functions(vendor: u16, device: u16) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(SYSFS_PCI)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let p = e.path();
            sysfs_hex(&p.join("vendor")) == Some(vendor as u32)
                && sysfs_hex(&p.join("device")) == Some(device as u32)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found
}

/// Binds the function at `bdf` to vfio-pci (loading the module if needed) and returns its IOMMU
/// group number. A function already bound to vfio-pci is left as it is.
pub fn bind_to_vfio_pci(bdf: &str) -> Result<u32, DriverError> {
    let dev = Path::new(SYSFS_PCI).join(bdf);
    if !dev.exists() {
        return Err(transport(format!("no PCI function {bdf}")));
    }
    if !Path::new("/sys/bus/pci/drivers/vfio-pci").exists() {
        let status = std::process::Command::new("modprobe")
            .arg("vfio-pci")
            .status()
            .map_err(|e| transport(format!("modprobe vfio-pci: {e}")))?;
        if !status.success() {
            return Err(transport("modprobe vfio-pci failed"));
        }
    }
    let current = std::fs::read_link(dev.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    if current.as_deref() != Some("vfio-pci") {
        let write = |path: PathBuf, value: &str| {
            std::fs::write(&path, value).map_err(|e| transport(format!("{}: {e}", path.display())))
        };
        if current.is_some() {
            write(dev.join("driver/unbind"), bdf)?;
        }
        write(dev.join("driver_override"), "vfio-pci")?;
        write(Path::new("/sys/bus/pci/drivers_probe").to_path_buf(), bdf)?;
    }
    let group = std::fs::read_link(dev.join("iommu_group"))
        .map_err(|_| {
            transport(format!(
                "{bdf} has no IOMMU group: the machine needs an IOMMU (intel_iommu=on)"
            ))
        })?
        .file_name()
        .and_then(|n| n.to_str().and_then(|s| s.parse().ok()))
        .ok_or_else(|| transport("unreadable IOMMU group"))?;
    Ok(group)
}

/// Anonymous memory pinned and mapped into the container.
struct DmaMemory {
    ptr: *mut u8,
    len: usize,
    huge_pages: bool,
}

// SAFETY: the mapping lives as long as the struct; accesses go through DmaBuffer copies.
unsafe impl Send for DmaMemory {}
unsafe impl Sync for DmaMemory {}

impl DmaMemory {
    fn new(len: usize) -> Result<Self, DriverError> {
        let map = |extra: libc::c_int, len: usize| {
            // SAFETY: a fresh anonymous mapping; the result is checked.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_POPULATE | extra,
                    -1,
                    0,
                )
            };
            (p != libc::MAP_FAILED).then_some(p.cast::<u8>())
        };
        let huge_len = len.next_multiple_of(2 << 20);
        if let Some(ptr) = map(libc::MAP_HUGETLB, huge_len) {
            return Ok(DmaMemory {
                ptr,
                len: huge_len,
                huge_pages: true,
            });
        }
        let ptr = map(0, len).ok_or_else(|| transport(std::io::Error::last_os_error()))?;
        Ok(DmaMemory {
            ptr,
            len,
            huge_pages: false,
        })
    }
}

impl Drop for DmaMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping created in `new`; the container unmapped it first.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One function bound to vfio-pci.
pub struct VfioPciDevice {
    bdf: String,
    /// Before `device`: mappings hold the device file open, and the group can be released only
    /// once they are gone.
    bars: [Option<BarMapping>; 6],
    device: VfioDevice,
    dma: Arc<DmaArea>,
    vectors: EventfdVectors,
}

impl VfioPciDevice {
    pub fn bdf(&self) -> &str {
        &self.bdf
    }

    fn mapped(&self, bar: u8) -> Option<&BarMapping> {
        self.bars.get(bar as usize)?.as_ref()
    }
}

impl PciDevice for VfioPciDevice {
    fn config_read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0xff);
        self.device
            .region_read(VFIO_PCI_CONFIG_REGION_INDEX, data, offset);
    }
    fn config_write(&self, offset: u64, data: &[u8]) {
        self.device
            .region_write(VFIO_PCI_CONFIG_REGION_INDEX, data, offset);
    }
    fn bar_read(&self, bar: u8, offset: u64, data: &mut [u8]) {
        if !self.mapped(bar).is_some_and(|m| m.read(offset, data)) {
            data.fill(0xff);
            self.device.region_read(bar as u32, data, offset)
        }
    }
    fn bar_is_mapped(&self, bar: u8) -> bool {
        self.mapped(bar).is_some()
    }
    fn bar_write(&self, bar: u8, offset: u64, data: &[u8]) {
        if !self.mapped(bar).is_some_and(|m| m.write(offset, data)) {
            self.device.region_write(bar as u32, data, offset)
        }
    }
    fn dma_alloc(&self, len: usize) -> Result<DmaBuffer, DriverError> {
        self.dma.alloc(len)
    }
    fn enable_msix(&self, vectors: u16) -> Result<(), DriverError> {
        let _ = self.device.disable_msix();
        self.vectors.replace(vectors, |fds| {
            self.device
                .enable_msix(fds.iter().collect())
                .map_err(transport)
        })
    }
    fn take_interrupts(&self, vector: u16) -> u64 {
        self.vectors.take(vector)
    }
    fn run_device(&self) {
        // The device runs elsewhere (the emulator's engine thread); let it have the CPU.
        std::thread::yield_now();
    }
}

impl Drop for VfioPciDevice {
    fn drop(&mut self) {
        let _ = self.device.disable_msix();
    }
}

/// The functions of one card, opened through vfio-pci in one container.
pub struct VfioHost {
    container: Arc<VfioContainer>,
    memory: Arc<DmaMemory>,
    devices: Vec<Arc<VfioPciDevice>>,
}

impl VfioHost {
    /// Binds `bdfs` to vfio-pci, opens them in one container, maps `memory_bytes` of DMA memory
    /// at [`DMA_IOVA`], maps their BARs where allowed and enables memory decode and bus
    /// mastering.
    pub fn open(bdfs: &[String], memory_bytes: usize) -> Result<Self, DriverError> {
        for bdf in bdfs {
            bind_to_vfio_pci(bdf)?;
        }
        let container = Arc::new(VfioContainer::new(None).map_err(transport)?);
        let memory = Arc::new(DmaMemory::new(memory_bytes)?);
        let mut opened = Vec::new();
        for bdf in bdfs {
            let path = Path::new(SYSFS_PCI).join(bdf);
            let ops: Arc<dyn VfioOps> = container.clone();
            let device =
                VfioDevice::new(&path, ops, false).map_err(|e| transport(format!("{bdf}: {e}")))?;
            opened.push((bdf.clone(), device));
        }
        // SAFETY: the memory stays mapped until the container is dropped (Drop below unmaps it
        // from the IOMMU first); it is only accessed through raw-pointer copies.
        unsafe { container.vfio_dma_map(DMA_IOVA, memory.len, memory.ptr) }
            .map_err(|e| transport(format!("DMA map: {e}")))?;
        // SAFETY: the mapping lives while the area holds it; every function reaches it at
        // DMA_IOVA through the container's IOMMU mapping above.
        let dma = unsafe { DmaArea::new(DMA_IOVA, memory.ptr, memory.len, memory.clone()) };
        let mut devices = Vec::new();
        for (bdf, device) in opened {
            let bars = std::array::from_fn(|i| map_bar(&device, i as u32));
            let dev = Arc::new(VfioPciDevice {
                bdf,
                device,
                bars,
                dma: dma.clone(),
                vectors: EventfdVectors::default(),
            });
            // Peer BARs take precedence over host memory in the card's switch: a BAR inside the
            // DMA window would swallow the driver's DMA.
            let dma = DMA_IOVA..DMA_IOVA + memory.len as u64;
            for bar in 0..6u8 {
                let start = dev.bar_bus_address(bar);
                let len = dev.device.get_region_size(bar as u32);
                if start != 0 && len != 0 && start < dma.end && dma.start < start + len {
                    return Err(transport(format!(
                        "{}: BAR{bar} at {start:#x} overlaps the DMA window at {DMA_IOVA:#x}",
                        dev.bdf
                    )));
                }
            }
            let cmd = dev.config_read16(OFF_COMMAND as u64) | CMD_MEMORY | CMD_BUS_MASTER;
            dev.config_write16(OFF_COMMAND as u64, cmd);
            devices.push(dev);
        }
        Ok(VfioHost {
            container,
            memory,
            devices,
        })
    }

    pub fn device(&self, index: usize) -> Option<Arc<VfioPciDevice>> {
        self.devices.get(index).cloned()
    }

    /// Whether the DMA memory came from huge pages.
    pub fn huge_pages(&self) -> bool {
        self.memory.huge_pages
    }
}

impl Drop for VfioHost {
    fn drop(&mut self) {
        // The IOMMU mapping goes while the groups are still in the container.
        let _ = self.container.vfio_dma_unmap(DMA_IOVA, self.memory.len);
        self.devices.clear();
    }
}

/// Maps BAR `index` if vfio-pci allows it (page-sized BARs without the MSI-X table).
fn map_bar(device: &VfioDevice, index: u32) -> Option<BarMapping> {
    use std::os::fd::AsRawFd;
    let size = device.get_region_size(index) as usize;
    if size == 0 || device.get_region_flags(index) & VFIO_REGION_INFO_FLAG_MMAP == 0 {
        return None;
    }
    // A sparse-mmap capability means only parts may be mapped (the MSI-X table BAR): those
    // stay on system calls.
    if !device.get_region_caps(index).is_empty() {
        return None;
    }
    let mapping = BarMapping::map(device.as_raw_fd(), device.get_region_offset(index), size);
    if mapping.is_none() {
        log::info!("BAR {index}: not mappable, using region I/O");
    }
    mapping
}
