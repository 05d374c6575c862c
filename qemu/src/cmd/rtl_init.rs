//! `fldemu rtl-init`: a directory to start an RTL accelerator in — the template top module
//! (every port of FLD's accelerator interface, `docs/fld-interface.md` §13) under the name the
//! designer chooses, and the Verilator file list `--accel rtl:DIR` reads.

use std::process::ExitCode;

use super::CmdResult;

#[derive(clap::Args)]
pub struct RtlInitArgs {
    /// The directory to create (it must not exist yet, or be empty).
    pub dir: std::path::PathBuf,
    /// The top module's name (a Verilog identifier).
    #[arg(long, default_value = "my_accel")]
    pub name: String,
}

pub fn run(a: RtlInitArgs) -> CmdResult {
    let name = &a.name;
    fld_rtl::build::scaffold(&a.dir, name)?;
    let dir = a.dir.display();
    println!("fldemu rtl-init: {dir}/{name}.v (every port of FLD's accelerator interface; takes every packet, sends nothing) and {dir}/files.f");
    println!("  run it:       fldemu demo --accel rtl:{dir} --packets 1000");
    println!("  waveform:     fldemu demo --accel rtl:{dir} --packets 10 --vcd {name}.vcd");
    println!("  behind QEMU:  fldemu serve --accel rtl:{dir}");
    println!("  the contract: docs/fld-interface.md §13; an example: device/rtl/examples/echo");
    Ok(ExitCode::SUCCESS)
}
