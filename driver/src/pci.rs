//! The transport-independent view of a PCIe function that the driver programs against.

use fld_abi::nic::CmdStatus;

use crate::DmaBuffer;

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
    /// Stores to BAR `bar`, each `(offset, data)` ordered after the one before it by a store
    /// fence: a sequence the device must see in order (a WQE by MMIO, its seal, the doorbell).
    /// A transport that reaches the device in process may deliver them in one go.
    fn bar_write_all(&self, bar: u8, writes: &[(u64, &[u8])]) {
        for (i, &(offset, data)) in writes.iter().enumerate() {
            if i > 0 {
                std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            }
            self.bar_write(bar, offset, data);
        }
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
