//! fld-qemu: attaches the emulated card to QEMU. [`serve`] exposes every PCIe function of the
//! card on its own vfio-user socket; the `fldemu` binary is the command-line front end.

pub mod selftest;
pub mod serve;
pub mod transport_bench;
