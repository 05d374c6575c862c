//! fld-qemu: the `fldemu` tool's library half — the in-process [`testbed`] the demos,
//! benchmarks, `replay` and the integration suites assemble cards with, and the checks of a
//! card reached through vfio-user or vfio ([`selftest`], [`transport_bench`]). The vfio-user
//! server itself is the `fld-vfio-user-server` crate beside this one.

pub mod pingpong;
pub mod plot;
pub mod rdma_peer;
pub mod selftest;
pub mod sim;
pub mod testbed;
pub mod transport_bench;
pub mod wires;
