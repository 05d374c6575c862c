//! RTL in the loop: a user's Verilog top module on FLD's AXI4-Stream ports (FlexDriver paper
//! §5.5), simulated cycle by cycle by Verilator and plugged into FLD as an
//! [`fld_device::accel::Accelerator`].
//!
//! * [`build`]: Verilator turns the module into C++, which is compiled with a small C ABI shim
//!   (`hdl/fld_rtl_shim.cpp`) into a shared object, cached by the content hash of everything
//!   that goes into it.
//! * [`model`]: loads that object and runs one clock cycle per call.
//! * [`bridge`]: the accelerator FLD sees: packets become beats on the module's rx stream, its
//!   tx beats become packets sent within FLD's credits, and every contract breach is counted.
//!
//! The signals, their widths and the timing are documented in `docs/fld-interface.md` §13 and
//! defined in `hdl/fld_accel.vh`, which a designer includes.
//!
//! Left out: FST waveforms (VCD only), Verilator's multi-threaded models, more than one clock
//! domain, and the AXI4-Lite control port a real accelerator would also have (FLD's paper
//! design has none on this interface).

pub mod bridge;
pub mod build;
pub mod model;

pub use bridge::{RtlAccelerator, RtlConfig};
pub use build::{RtlDesign, RtlError};

/// The contract's header, written next to every build so designs can `include` it.
pub const HEADER: &str = include_str!("../hdl/fld_accel.vh");
/// The C ABI shim compiled with every design.
pub const SHIM: &str = include_str!("../hdl/fld_rtl_shim.cpp");
/// A top module to start from.
pub const TEMPLATE: &str = include_str!("../hdl/fld_accel_template.v");
/// The example modules shipped with the crate.
pub fn examples_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}
