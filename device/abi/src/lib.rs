//! fld-abi: every format of the fldemu card, defined once with one reader and one writer, for the
//! device model, the driver, the host library, the tools, the tests and the fuzz targets alike.
//!
//! * [`pci`]: configuration-space and MSI-X layouts.
//! * [`nic`]: the soft NIC's registers, doorbells, commands, descriptors and completions.
//! * [`fld`]: the FLD function's registers, geometry and compressed internal formats.
//! * [`wire`]: packet headers as typed views over byte buffers (Ethernet, VLAN, IPv4, IPv6, UDP,
//!   TCP, VXLAN, the ZUC request header, CoAP) and the Internet checksum.
//!
//! Nothing here depends on any other crate of the project.

pub mod fld;
pub mod nic;
pub mod pci;
pub mod wire;
