//! `fldemu replay`: plays a capture through the card and writes what reaches the host's queues.

use std::fs::File;
use std::io::{BufReader, BufWriter};

use clap::ValueEnum;
use serde_json::json;

use super::*;

#[derive(Clone, Copy, ValueEnum)]
pub enum ReplayAccelArg {
    Echo,
    Zuc,
    Defrag,
    Iot,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum InjectArg {
    /// Frames arrive from the network on the uplink.
    Uplink,
    /// The host function sends them.
    Host,
}

#[derive(clap::Args)]
pub struct ReplayArgs {
    #[arg(long, value_enum)]
    pub accel: ReplayAccelArg,
    /// Input capture (pcap, Ethernet link type).
    #[arg(long = "in")]
    pub input: std::path::PathBuf,
    /// Output capture: every frame that reached the host's receive queues.
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// TOML file: `now` (seconds, IoT token time), `host_queues`, `[[tenant]]` tables with
    /// `context` (1-65534), `src` (IPv4), `key` and optionally `fragments = "refuse"` (IoT),
    /// `[iot]` with `fragments = "reassemble"` (the default: fragments of the CoAP service are
    /// reassembled by the defrag accelerator, then authenticated) or `"refuse"` (dropped and
    /// counted), `[defrag]` with `timeout_ms`, `max_datagram`,
    /// `max_datagrams`, `max_buffered_bytes`, `[vxlan]` with `vnis` (VXLAN decapsulation in the
    /// eSwitch before the accelerator's share is chosen: frames to UDP 4789 with one of these
    /// VNIs, or any VNI when the list is empty or absent).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Where the frames enter the card.
    #[arg(long, value_enum, default_value_t = InjectArg::Uplink)]
    pub inject: InjectArg,
    /// Frames entering per NIC poll (1..=256).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub burst: u64,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReplayFile {
    now: Option<u64>,
    host_queues: Option<u16>,
    #[serde(default)]
    tenant: Vec<TenantFile>,
    defrag: Option<DefragFile>,
    vxlan: Option<VxlanFile>,
    iot: Option<IotFile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IotFile {
    fragments: Option<FragmentsFile>,
}

/// What happens to IPv4 fragments of the CoAP service.
#[derive(serde::Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum FragmentsFile {
    Reassemble,
    Refuse,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VxlanFile {
    #[serde(default)]
    vnis: Vec<u32>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantFile {
    context: u16,
    src: std::net::Ipv4Addr,
    key: String,
    fragments: Option<FragmentsFile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DefragFile {
    timeout_ms: Option<u64>,
    max_datagram: Option<usize>,
    max_datagrams: Option<usize>,
    max_buffered_bytes: Option<usize>,
}

pub fn run(a: ReplayArgs) -> CmdResult {
    use fld_qemu::testbed::replay::{replay, Inject, ReplayAccel, ReplayConfig, ReplayTenant};
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
    let file: ReplayFile = match &a.config {
        Some(p) => toml::from_str(&std::fs::read_to_string(p)?)
            .map_err(|e| format!("{}: {e}", p.display()))?,
        None => ReplayFile::default(),
    };
    let mut cfg = ReplayConfig {
        accel: match a.accel {
            ReplayAccelArg::Echo => ReplayAccel::Echo,
            ReplayAccelArg::Zuc => ReplayAccel::Zuc,
            ReplayAccelArg::Defrag => ReplayAccel::Defrag,
            ReplayAccelArg::Iot => ReplayAccel::Iot,
        },
        inject: match a.inject {
            InjectArg::Uplink => Inject::Uplink,
            InjectArg::Host => Inject::Host,
        },
        burst: a.burst as usize,
        now_s: file.now.unwrap_or(0),
        tenants: file
            .tenant
            .iter()
            .map(|t| ReplayTenant {
                context: t.context,
                src: t.src,
                key: t.key.clone().into_bytes(),
                refuse_fragments: t.fragments == Some(FragmentsFile::Refuse),
            })
            .collect(),
        vxlan: file
            .vxlan
            .map(|v| fld_qemu::testbed::VxlanDecap { vnis: v.vnis }),
        ..Default::default()
    };
    if let Some(q) = file.host_queues {
        cfg.host_queues = q;
    }
    if let Some(FragmentsFile::Refuse) = file.iot.and_then(|i| i.fragments) {
        cfg.iot_fragments = fld_host::guard::FragmentPolicy::Refuse;
    }
    if let Some(d) = &file.defrag {
        let c = &mut cfg.defrag;
        c.timeout_ns = d
            .timeout_ms
            .map_or(c.timeout_ns, |ms| ms.saturating_mul(1_000_000));
        c.max_datagram = d.max_datagram.unwrap_or(c.max_datagram);
        c.max_datagrams = d.max_datagrams.unwrap_or(c.max_datagrams);
        c.max_buffered_bytes = d.max_buffered_bytes.unwrap_or(c.max_buffered_bytes);
    }
    let mut reader = PcapReader::new(BufReader::new(File::open(&a.input)?))?;
    if reader.header().datalink != pcap_file::DataLink::ETHERNET {
        return Err(format!("{}: not an Ethernet capture", a.input.display()).into());
    }
    let mut frames = Vec::new();
    while let Some(p) = reader.next_packet() {
        frames.push(p?.data.into_owned());
    }
    let out = replay(frames, &cfg)?;
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        snaplen: 65535,
        ..Default::default()
    };
    let mut writer = PcapWriter::with_header(BufWriter::new(File::create(&a.out)?), header)?;
    for (i, (_, f)) in out.delivered.iter().enumerate() {
        // Frames are written in arrival order, a microsecond apart.
        let ts = std::time::Duration::from_micros(i as u64);
        writer.write_packet(&PcapPacket::new(ts, f.len() as u32, f))?;
    }
    let mut per_queue = vec![0u64; cfg.host_queues.clamp(1, 64) as usize];
    for (q, _) in &out.delivered {
        per_queue[*q as usize] += 1;
    }
    let mut card = CardCounters::default();
    card.add("card", out.card_counters.clone());
    if a.json {
        let counters = counters_json(&out.counters);
        println!(
            "{}",
            json!({ "accelerator": out.accelerator, "injected": out.injected, "delivered": out.delivered.len(),
                "delivered_per_queue": per_queue, "fld_rx": out.fld_rx, "fld_accelerator_drops": out.fld_accelerator_drops,
                "uplink_transmitted": out.uplink_transmitted, "counters": counters,
                "card_counters": card.json() })
        );
    } else {
        println!(
            "fldemu replay: {} frames from {} through {} -> {} frames to {}",
            out.injected,
            a.input.display(),
            out.accelerator,
            out.delivered.len(),
            a.out.display()
        );
        println!("  per host queue  {per_queue:?}");
        println!(
            "  into FLD        {} ({} refused by the accelerator)",
            out.fld_rx, out.fld_accelerator_drops
        );
        println!("  out the uplink  {}", out.uplink_transmitted);
        for (k, v) in out.counters.iter().filter(|(_, v)| *v > 0) {
            println!("  {k:<15} {v}");
        }
        card.print();
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vxlan_table_lists_vnis_or_means_any() {
        let f: ReplayFile = toml::from_str("[vxlan]\nvnis = [5001, 7]\n").unwrap();
        assert_eq!(f.vxlan.map(|v| v.vnis), Some(vec![5001, 7]));
        let any: ReplayFile = toml::from_str("[vxlan]\n").unwrap();
        assert_eq!(any.vxlan.map(|v| v.vnis), Some(vec![]));
        assert!(toml::from_str::<ReplayFile>("").unwrap().vxlan.is_none());
        assert!(toml::from_str::<ReplayFile>("[vxlan]\nport = 8472\n").is_err());
    }
}
