//! fld-device: the emulated hardware of an accelerator-driven NIC card, free of any transport.
//!
//! The blocks follow the FlexDriver paper (Eran et al., ASPLOS '22): [`pcie`] functions behind
//! the card's PCIe switch [`fabric`], the soft [`nic`] with its eSwitch, the [`fld`] module that
//! drives the NIC from the accelerator side, the [`accel`]erator models on its AXI-stream ports,
//! and the [`wire`]s the NIC's uplink connects to. [`card::Card`] assembles them. Nothing here knows about sockets, vfio or
//! QEMU: transports drive the model through [`pcie::PciFunction`] and [`fabric::Fabric`]; time
//! comes from the [`clock::Clock`] a runner gives the card.

pub mod accel;
pub mod card;
pub mod clock;
pub mod fabric;
pub mod fld;
#[cfg(any(test, feature = "mock"))]
pub mod mock;
pub mod nic;
pub mod pcie;
pub mod wire;
