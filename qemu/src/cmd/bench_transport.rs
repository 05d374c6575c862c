//! `fldemu bench-transport`: latency of a transport to a card running elsewhere — trapped register
//! read and write, doorbell to completion, doorbell to MSI-X interrupt.

use std::process::ExitCode;

use super::*;

#[derive(clap::Args)]
pub struct BenchTransportArgs {
    /// How the driver reaches the card.
    #[arg(long, value_enum, default_value_t = TransportArg::Vfio)]
    pub transport: TransportArg,
    /// With `--transport vfio-user`: the directory of the server's sockets (default
    /// fldemu-sockets).
    #[arg(long)]
    pub socket_dir: Option<std::path::PathBuf>,
    /// Samples per figure.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BenchTransportArgs) -> CmdResult {
    let Some(t) = a
        .transport
        .remote(&a.transport.socket_dir(a.socket_dir.as_deref())?)
    else {
        return Err("bench-transport measures vfio-user or vfio".into());
    };
    let f = fld_qemu::transport_bench::measure(&t, a.iterations as usize)?;
    if a.json {
        println!("{}", serde_json::to_string(&f).unwrap_or_default());
    } else {
        println!("doorbell page mapped: {}", f.doorbell_mapped);
        for (name, l) in [
            ("trapped register read", &f.mmio_read),
            ("trapped register write", &f.mmio_write),
            ("doorbell -> completion", &f.doorbell_to_completion),
            ("  WQE fetched (no MMIO)", &f.doorbell_to_completion_fetched),
            ("doorbell -> MSI-X", &f.doorbell_to_msix),
        ] {
            println!(
                "{name:24} mean {:9.2} us  median {:9.2} us  p99 {:9.2} us  ({} samples)",
                l.mean_us, l.median_us, l.p99_us, l.samples
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
