//! `fldemu serve`: the card's PCIe functions on vfio-user sockets (through
//! `fld-vfio-user-server`), with the accelerator of the user's choice behind FLD.

use std::process::ExitCode;

use clap::ValueEnum;
use fld_abi::wire::zuc::ZUC_UDP_PORT;
use fld_device::accel::zuc_accel::ZucAccel;
use fld_device::accel::Echo;
use fld_device::card::Card;
use fld_vfio_user_server as server;

use super::CmdResult;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Directory for the sockets: nic0.sock, nic1.sock (NIC host functions) and fld.sock.
    #[arg(long, default_value = "fldemu-sockets")]
    pub socket_dir: std::path::PathBuf,
    /// The accelerator behind FLD.
    #[arg(long, value_enum, default_value_t = ServeAccelArg::Echo)]
    pub accel: ServeAccelArg,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ServeAccelArg {
    /// None: frames FLD receives are counted and dropped.
    None,
    /// The echo accelerator (the FLD-E demo's).
    Echo,
    /// The ZUC look-aside accelerator on its UDP port.
    Zuc,
}

pub fn run(a: ServeArgs) -> CmdResult {
    let card = Card::new(Default::default());
    match a.accel {
        ServeAccelArg::None => {}
        ServeAccelArg::Echo => card.fld.set_accelerator(Box::new(Echo::new(0, 256))),
        ServeAccelArg::Zuc => card
            .fld
            .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0))),
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for (_, name) in server::socket_names(&card) {
        eprintln!("fldemu: serving {}", a.socket_dir.join(name).display());
    }
    server::serve(card, &a.socket_dir, stop)?;
    Ok(ExitCode::SUCCESS)
}
