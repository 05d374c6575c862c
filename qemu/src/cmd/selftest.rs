//! `fldemu selftest`: checks a card reached through vfio-user or vfio (inside a guest) — verified
//! CPU and FLD-E echo, MSI-X, DMA isolation, reset in the middle of traffic, garbage in every BAR.

use fld_qemu::selftest;

use super::*;

#[derive(clap::Args)]
pub struct SelftestArgs {
    /// How the driver reaches the card.
    #[arg(long, value_enum, default_value_t = TransportArg::Vfio)]
    pub transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets.
    #[arg(long, default_value = "fldemu-sockets")]
    pub socket_dir: std::path::PathBuf,
    /// Run only the checks whose name contains this.
    #[arg(long)]
    pub filter: Option<String>,
}

pub fn run(a: SelftestArgs) -> CmdResult {
    let Some(t) = a.transport.remote(&a.socket_dir) else {
        return Err("the self-test checks a card reached through vfio-user or vfio".into());
    };
    let failed = selftest::run(&t, a.filter.as_deref());
    println!(
        "selftest: {} checks, {failed} failed",
        selftest::CHECKS
            .iter()
            .filter(|c| a.filter.as_deref().is_none_or(|f| c.name.contains(f)))
            .count()
    );
    Ok(exit_code(failed == 0))
}
