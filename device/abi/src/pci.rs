//! PCI configuration-space and MSI-X layouts (PCI Local Bus 3.0 §6, §6.8.2; PCIe Base 4.0 §7) as
//! the card's functions implement them and every driver and transport reads them.

/// PCI vendor ID of the emulated card. 0xFFF0 is not assigned to any vendor by PCI-SIG (and is not
/// the 0xFFFF "no device" value), so no in-tree driver claims the functions; guests bind them to
/// vfio-pci through `driver_override`.
pub const PCI_VENDOR_ID: u16 = 0xfff0;

/// Bytes of configuration space per function (PCIe extended space included).
pub const CONFIG_SPACE_SIZE: usize = 4096;

/// Type-0 header offsets.
pub const OFF_VENDOR: usize = 0x00;
pub const OFF_DEVICE: usize = 0x02;
pub const OFF_COMMAND: usize = 0x04;
pub const OFF_STATUS: usize = 0x06;
pub const OFF_REVISION: usize = 0x08;
pub const OFF_CLASS: usize = 0x09;
pub const OFF_HEADER_TYPE: usize = 0x0e;
/// BAR0; BAR n is at `OFF_BAR0 + 4 n` (64-bit BARs take two slots).
pub const OFF_BAR0: usize = 0x10;
pub const OFF_SUBSYS_VENDOR: usize = 0x2c;
pub const OFF_SUBSYS: usize = 0x2e;
pub const OFF_CAP_PTR: usize = 0x34;

/// Offset of the PCI Express capability in every function of the card.
pub const OFF_PCIE_CAP: usize = 0x40;
/// PCIe Device Capabilities, Device Control (PCIe Base §7.5.3.3-4).
pub const OFF_PCIE_DEVCAP: usize = OFF_PCIE_CAP + 4;
pub const OFF_PCIE_DEVCTL: usize = OFF_PCIE_CAP + 8;
/// Offset of the MSI-X capability in every function of the card.
pub const OFF_MSIX_CAP: usize = 0x80;
/// MSI-X Message Control, Table Offset/BIR, PBA Offset/BIR.
pub const OFF_MSIX_CONTROL: usize = OFF_MSIX_CAP + 2;
pub const OFF_MSIX_TABLE: usize = OFF_MSIX_CAP + 4;
pub const OFF_MSIX_PBA: usize = OFF_MSIX_CAP + 8;

pub const CAP_ID_PCIE: u8 = 0x10;
pub const CAP_ID_MSIX: u8 = 0x11;

/// Command register bits.
pub const CMD_MEMORY: u16 = 1 << 1;
pub const CMD_BUS_MASTER: u16 = 1 << 2;
pub const CMD_INTX_DISABLE: u16 = 1 << 10;
/// Status register: capabilities list present.
pub const STATUS_CAP_LIST: u16 = 1 << 4;

/// Device Capabilities: function-level reset capable.
pub const DEVCAP_FLR: u32 = 1 << 28;
/// Device Control: initiate function-level reset (reads back 0).
pub const DEVCTL_INITIATE_FLR: u16 = 1 << 15;

/// MSI-X Message Control bits.
pub const MSIX_CTRL_ENABLE: u16 = 1 << 15;
pub const MSIX_CTRL_FUNCTION_MASK: u16 = 1 << 14;
/// Table size field (N − 1) of Message Control.
pub const MSIX_CTRL_TABLE_SIZE: u16 = 0x7ff;

/// One MSI-X table entry: address low, address high, data, vector control.
pub const MSIX_ENTRY_SIZE: u64 = 16;
pub const MSIX_ENTRY_ADDR_LO: u64 = 0;
pub const MSIX_ENTRY_ADDR_HI: u64 = 4;
pub const MSIX_ENTRY_DATA: u64 = 8;
pub const MSIX_ENTRY_VECTOR_CTRL: u64 = 12;
/// Vector control: the vector is masked.
pub const MSIX_VECTOR_MASKED: u32 = 1;

/// Decodes a Table or PBA Offset/BIR register: (BAR index, offset in the BAR).
pub const fn msix_bir_offset(reg: u32) -> (u8, u64) {
    ((reg & 7) as u8, (reg & !7) as u64)
}

/// Encodes a Table or PBA Offset/BIR register.
pub const fn msix_bir_register(bar: u8, offset: u32) -> u32 {
    (offset & !7) | (bar as u32 & 7)
}
