//! `fldemu selftest`: checks a card reached through vfio-user or vfio (inside a guest) — verified
//! CPU and FLD-E echo, MSI-X, DMA isolation, reset in the middle of traffic, garbage in every BAR.

use fld_qemu::selftest;

use super::*;

#[derive(clap::Args)]
pub struct SelftestArgs {
    /// How the driver reaches the card.
    #[arg(long, value_enum, default_value_t = TransportArg::Vfio)]
    pub transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets (default
    /// fldemu-sockets).
    #[arg(long)]
    pub socket_dir: Option<std::path::PathBuf>,
    /// Run only the checks whose name contains this (one check at least).
    #[arg(long)]
    pub filter: Option<String>,
}

pub fn run(a: SelftestArgs) -> CmdResult {
    let chosen = |name: &str| a.filter.as_deref().is_none_or(|f| name.contains(f));
    if !selftest::CHECKS.iter().any(|c| chosen(c.name)) {
        let names: Vec<&str> = selftest::CHECKS.iter().map(|c| c.name).collect();
        return Err(format!(
            "--filter {}: no check's name contains it (checks: {})",
            a.filter.as_deref().unwrap_or_default(),
            names.join(", ")
        )
        .into());
    }
    let Some(t) = a
        .transport
        .remote(&a.transport.socket_dir(a.socket_dir.as_deref())?)
    else {
        return Err("the self-test checks a card reached through vfio-user or vfio".into());
    };
    let failed = selftest::run(&t, a.filter.as_deref());
    println!(
        "selftest: {} checks, {failed} failed",
        selftest::CHECKS.iter().filter(|c| chosen(c.name)).count()
    );
    Ok(exit_code(failed == 0))
}
