//! fld-driver: the host driver of the emulated card. It reaches a PCIe function only through the
//! [`PciDevice`] trait (configuration space, BAR access, DMA memory, interrupts), so the same
//! bring-up code runs in-process ([`inprocess`]), over a vfio-user socket ([`vfio_user`]) and
//! inside a guest with vfio-pci.
//! [`nic::NicDriver`] speaks the soft NIC's command interface and owns its queues.

mod dma;
mod eventfds;
pub mod fld;
#[cfg(feature = "in-process")]
pub mod inprocess;
mod mmio;
pub mod nic;
mod pci;
pub mod rdma;
pub mod star;
pub mod vfio;
pub mod vfio_user;

pub use dma::DmaBuffer;
pub use pci::{DriverError, PciDevice};
