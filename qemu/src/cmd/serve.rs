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
    #[arg(long, default_value = super::DEFAULT_SOCKET_DIR)]
    pub socket_dir: std::path::PathBuf,
    /// The accelerator behind FLD: `none` (frames FLD receives are counted and dropped),
    /// `echo` (the FLD-E demo's), `zuc` (the ZUC look-aside accelerator on its UDP port), or
    /// `rtl:PATH`, a Verilog module on FLD's ports built with Verilator (see `fldemu demo`).
    #[arg(long, value_parser = parse_serve_accel, default_value = "echo")]
    pub accel: ServeAccel,
    /// With `--accel rtl:PATH`: write the module's signals to this VCD file.
    #[arg(long)]
    pub vcd: Option<std::path::PathBuf>,
    /// With `--accel rtl:PATH`: the module's clock in MHz, default 250 (FLD's Innova-2
    /// design); the rx stream brings packets at FLD's 50 Gbit/s link rate in cycles of this
    /// clock.
    #[arg(long)]
    pub rtl_clock_mhz: Option<f64>,
    /// The NIC's uplink: `udp:LOCAL_PORT:HOST:PORT` (one Ethernet frame per datagram, QEMU's
    /// `-netdev dgram` encapsulation: a guest's NIC, or another fldemu, on the other end) or
    /// `tap:NAME`. Without it, frames the eSwitch sends to the uplink are dropped.
    #[arg(long)]
    pub uplink: Option<String>,
}

#[derive(Clone)]
pub enum ServeAccel {
    Builtin(ServeAccelArg),
    Rtl(std::path::PathBuf),
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ServeAccelArg {
    None,
    Echo,
    Zuc,
}

fn parse_serve_accel(s: &str) -> Result<ServeAccel, String> {
    if let Some(p) = s.strip_prefix("rtl:") {
        return Ok(ServeAccel::Rtl(p.into()));
    }
    ServeAccelArg::from_str(s, true)
        .map(ServeAccel::Builtin)
        .map_err(|_| format!("{s}: expected none, echo, zuc or rtl:PATH"))
}

pub fn run(a: ServeArgs) -> CmdResult {
    let card = Card::new(Default::default());
    if let Some(link) = &a.uplink {
        card.nic.set_uplink(fld_qemu::wires::open_link(link)?);
        eprintln!("fldemu: uplink {link}");
    }
    if !matches!(a.accel, ServeAccel::Rtl(_)) {
        if a.vcd.is_some() {
            return Err(
                "--vcd records an RTL accelerator's signals: use it with --accel rtl:PATH".into(),
            );
        }
        if a.rtl_clock_mhz.is_some() {
            return Err(
                "--rtl-clock-mhz clocks an RTL accelerator: use it with --accel rtl:PATH".into(),
            );
        }
    }
    match &a.accel {
        ServeAccel::Builtin(ServeAccelArg::None) => {}
        ServeAccel::Builtin(ServeAccelArg::Echo) => {
            card.fld.set_accelerator(Box::new(Echo::new(0, 256)))
        }
        ServeAccel::Builtin(ServeAccelArg::Zuc) => card
            .fld
            .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0))),
        ServeAccel::Rtl(spec) => {
            let clock_mhz = a.rtl_clock_mhz.unwrap_or(super::DEFAULT_RTL_CLOCK_MHZ);
            let accel = super::rtl_accelerator(spec, a.vcd.as_deref(), clock_mhz)?;
            eprintln!("fldemu: accelerator {} behind FLD", spec.display());
            card.fld.set_accelerator(accel);
        }
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for (_, name) in server::socket_names(&card) {
        eprintln!("fldemu: serving {}", a.socket_dir.join(name).display());
    }
    server::serve(card, &a.socket_dir, stop)?;
    Ok(ExitCode::SUCCESS)
}
