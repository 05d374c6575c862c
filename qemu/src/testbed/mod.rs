//! The in-process testbed: cards assembled in this process (NIC, FLD, PCIe switch and an
//! accelerator model), brought up by the driver over its in-process transport and driven by the
//! host library's applications. The demos, benchmarks, `replay` and the integration suites build
//! on it; nothing here is part of what an application links.

pub mod fldr;
pub mod inline_apps;
pub mod iot_attack;
pub mod rdma;
pub mod replay;

use std::sync::Arc;

use fld_abi::nic::{FlowMatch, TABLE_KIND_FDB};
use fld_abi::wire::zuc::ZUC_UDP_PORT;
use fld_device::accel::zuc_accel::ZucAccel;
use fld_device::card::{Card, CardConfig};
use fld_device::fld::memory_model::MemoryParams;
use fld_driver::inprocess::InProcessHost;
use fld_driver::nic::{FlowRule, NicDriver, RuleFate, TableMiss};
use fld_driver::DriverError;
use fld_host::apps::{
    echo_step, fld_safe_window, open_echo_pair, open_fld_echo, run_echo, EchoConfig, EchoReport,
    FldEchoPorts, CLIENT_IP, SERVER_IP,
};
use fld_host::cryptodev::ServiceAddress;
use fld_host::flde::FldE;
use fld_host::guard::{ServiceGuard, UdpService};
use fld_host::{EthDev, FlowItem, RxMode};

/// An in-process card with the generator on host function 0 and the echo server on host
/// function 1, both configured: the set-up of the demo, the benchmark and the tests.
pub struct InProcessPair {
    pub card: Arc<Card>,
    pub host: Arc<InProcessHost>,
    pub client: EthDev,
    pub server: EthDev,
}

impl InProcessPair {
    pub fn new(rx_mode: RxMode, max_frame: usize) -> Result<Self, DriverError> {
        let card = Card::new(CardConfig::default());
        let host = InProcessHost::new(card.clone(), 1 << 30)?;
        let no = || DriverError::InvalidArgument("missing function");
        let f0 = card.nic.function_id(0).ok_or_else(no)?;
        let f1 = card.nic.function_id(1).ok_or_else(no)?;
        let (client, server) =
            open_echo_pair(host.device(f0), host.device(f1), rx_mode, max_frame, 4096)?;
        Ok(InProcessPair {
            card,
            host,
            client,
            server,
        })
    }

    /// Runs the echo workload: the client generates and verifies, the server echoes.
    pub fn run_echo(&mut self, cfg: &EchoConfig) -> EchoReport {
        let server_mac = self.server.mac();
        let server = &mut self.server;
        let mut scratch = Vec::with_capacity(cfg.burst);
        let burst = cfg.burst;
        run_echo(&mut self.client, server_mac, cfg, || {
            echo_step(server, &mut scratch, burst)
        })
    }
}

/// An in-process card running the FLD-E echo path: the generator on host function 1, the NIC's
/// function 0 bound to FLD, and the echo accelerator behind FLD.
pub struct FldEchoSetup {
    pub card: Arc<Card>,
    pub host: Arc<InProcessHost>,
    pub client: EthDev,
    pub flde: FldE,
}

impl FldEchoSetup {
    pub fn new(max_frame: usize) -> Result<Self, DriverError> {
        Self::with_queues(max_frame, 1)
    }

    /// With `tx_queues` FLD transmit queues bound (the echo accelerator uses the first).
    pub fn with_queues(max_frame: usize, tx_queues: u16) -> Result<Self, DriverError> {
        Self::build(max_frame, tx_queues, MemoryParams::table_2a())
    }

    /// With FLD sized for `params` (Table 2a's analysis parameters).
    pub fn build(
        max_frame: usize,
        tx_queues: u16,
        params: MemoryParams,
    ) -> Result<Self, DriverError> {
        Self::build_with(max_frame, tx_queues, params, 1)
    }

    /// As [`FldEchoSetup::build`], with `client_rx_queues` RSS queues on the generator's port.
    pub fn build_with(
        max_frame: usize,
        tx_queues: u16,
        params: MemoryParams,
        client_rx_queues: u16,
    ) -> Result<Self, DriverError> {
        let card = Card::new(CardConfig {
            fld: params,
            ..Default::default()
        });
        let host = InProcessHost::new(card.clone(), 1 << 30)?;
        let no = || DriverError::InvalidArgument("missing function");
        let f0 = card.nic.function_id(0).ok_or_else(no)?;
        let f1 = card.nic.function_id(1).ok_or_else(no)?;
        card.fld
            .set_accelerator(Box::new(fld_device::accel::Echo::new(0, 256)));
        let (flde, client) = open_fld_echo(
            host.device(f0),
            host.device(f1),
            host.device(card.fld.id()),
            FldEchoPorts {
                tx_queues,
                client_rx_queues,
                max_frame,
                mbufs: 4096,
            },
        )?;
        Ok(FldEchoSetup {
            card,
            host,
            client,
            flde,
        })
    }

    /// Puts the ZUC accelerator behind FLD in place of the echo and returns the service's
    /// addresses for a cryptodev client on the generator's port.
    pub fn attach_zuc(&mut self) -> ServiceAddress {
        self.card
            .fld
            .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0)));
        ServiceAddress {
            client_mac: self.client.mac(),
            client_ip: CLIENT_IP,
            client_port: 40000,
            server_mac: self.flde.mac(),
            server_ip: SERVER_IP,
        }
    }

    /// Points the eSwitch root at FLD's vPort for frames matching `to_accelerator` (none: no
    /// frame) and at the generator's vPort for everything else. Returns an eSwitch table that
    /// delivers to the generator, for the accelerator's output to resume at.
    pub fn steer_to_accelerator(
        &mut self,
        to_accelerator: Option<&[FlowItem]>,
    ) -> Result<u32, DriverError> {
        self.steer_to_accelerator_after(None, to_accelerator)
    }

    /// As [`FldEchoSetup::steer_to_accelerator`], with VXLAN decapsulation first when `decap`
    /// is given: tunnelled frames are classified by their inner headers (the paper's §8.2.2
    /// setup (c), fragments inside VXLAN), everything else as it arrived.
    pub fn steer_to_accelerator_after(
        &mut self,
        decap: Option<&VxlanDecap>,
        to_accelerator: Option<&[FlowItem]>,
    ) -> Result<u32, DriverError> {
        self.classify(decap, |flde, classify| {
            let Some(pattern) = to_accelerator else {
                return Ok(0);
            };
            let (mask, value) = fld_host::flow::compile_pattern(pattern);
            let nic = flde.nic();
            let to_fld = FlowRule {
                priority: 0,
                mask,
                value,
                count: true,
                ..FlowRule::any(RuleFate::Vport(nic.vport()))
            };
            nic.create_flow_entry(classify, &to_fld)?;
            Ok(1)
        })
    }

    /// As [`FldEchoSetup::steer_to_accelerator_after`] for a service the accelerator protects:
    /// the guard of [`ServiceGuard`] (header errors dropped by reason, fragments reassembled or
    /// refused, the service's datagrams to FLD) in front of the rule to the generator. Returns
    /// the resume table and the guard, whose counters are the card's drops.
    pub fn steer_guarded(
        &mut self,
        decap: Option<&VxlanDecap>,
        service: &UdpService,
    ) -> Result<(u32, ServiceGuard), DriverError> {
        let mut guard = ServiceGuard::default();
        let back = self.classify(decap, |flde, classify| {
            let (installed, next) = ServiceGuard::install(flde, classify, 0, service)?;
            guard = installed;
            Ok(next)
        })?;
        Ok((back, guard))
    }

    /// The eSwitch root: `rules` fill the classifying table from priority 0 and return the
    /// first priority they left free, below which everything else goes to the generator; VXLAN
    /// decapsulation in front when `decap` is given. Returns a table that delivers to the
    /// generator, for the accelerator's output to resume at.
    fn classify(
        &mut self,
        decap: Option<&VxlanDecap>,
        rules: impl FnOnce(&mut FldE, u32) -> Result<u16, DriverError>,
    ) -> Result<u32, DriverError> {
        let client_vport = self.client.vport();
        let classify = self
            .flde
            .nic()
            .create_flow_table(TABLE_KIND_FDB, 2, TableMiss::Drop)?;
        let priority = rules(&mut self.flde, classify)?;
        let nic = self.flde.nic();
        nic.create_flow_entry(
            classify,
            &FlowRule {
                priority,
                count: true,
                ..FlowRule::any(RuleFate::Vport(client_vport))
            },
        )?;
        let root = match decap {
            None => classify,
            Some(decap) => decap.install(nic, classify)?,
        };
        nic.set_root(TABLE_KIND_FDB, Some(root))?;
        let back = nic.create_flow_table(TABLE_KIND_FDB, 1, TableMiss::Drop)?;
        nic.create_flow_entry(back, &FlowRule::any(RuleFate::Vport(client_vport)))?;
        Ok(back)
    }

    /// Registers each IoT tenant (context ID, IPv4 source) with the FLD-E control plane and
    /// installs its `accelerate` rule: its traffic reaches the accelerator tagged with its
    /// context and resumes at `back`.
    pub fn add_tenants(
        &mut self,
        tenants: impl IntoIterator<Item = (u16, std::net::Ipv4Addr)>,
        back: u32,
    ) -> Result<(), fld_host::flde::TenantError> {
        for (context, src) in tenants {
            let own = FlowItem::Ipv4 {
                src: Some(src),
                dst: None,
                proto: None,
            };
            let id = self.flde.register_tenant(context, own)?;
            self.flde.tenant_accelerate(
                id,
                fld_host::flde::TENANT_MIN_PRIORITY,
                &[own],
                None,
                Some(back),
            )?;
        }
        Ok(())
    }

    /// Writes every frame entering the eSwitch (from any vPort, the uplink included) to a pcap
    /// file at `path` until [`FldEchoSetup::stop_capture`] (or the card goes).
    pub fn capture(&self, path: &std::path::Path) -> std::io::Result<()> {
        capture_ingress(&self.card, path)
    }

    /// Ends a capture, flushing the file.
    pub fn stop_capture(&self) {
        self.card.nic.set_tap(None);
    }

    /// Packets that may be in flight without overrunning FLD's receive buffer, which is sized
    /// for the bandwidth-delay product (2 S_rxbdp), not for a deep window of large frames: every
    /// striding WQE but the open one, times the frames of `max_frame` bytes a WQE holds.
    pub fn safe_window(&self, max_frame: usize) -> usize {
        fld_safe_window(&self.flde, max_frame)
    }

    /// The generator sends to the accelerator's vPort and checks every returned byte.
    pub fn run_echo(&mut self, cfg: &EchoConfig) -> EchoReport {
        let mac = self.flde.mac();
        let card = self.card.clone();
        run_echo(&mut self.client, mac, cfg, || card.poll())
    }
}

/// Captures every frame entering `card`'s eSwitch to a pcap file at `path` (readable by tshark
/// and Wireshark), until the card's tap is cleared.
pub fn capture_ingress(card: &Card, path: &std::path::Path) -> std::io::Result<()> {
    let tap = fld_device::wire::PcapTap::new(
        std::io::BufWriter::new(std::fs::File::create(path)?),
        fld_device::wire::pcap::CaptureFilter::AllIngress,
    )
    .map_err(std::io::Error::other)?;
    card.nic.set_tap(Some(Box::new(tap)));
    Ok(())
}

/// VXLAN decapsulation (RFC 7348) ahead of an eSwitch table: frames to UDP port 4789 (the one
/// port the NIC's parser knows as VXLAN) whose VNI is one of `vnis` (any VNI when empty) lose
/// their outer headers and continue at the table with the inner frame; other frames reach the
/// table as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VxlanDecap {
    pub vnis: Vec<u32>,
}

impl VxlanDecap {
    /// Creates the decapsulating table (level 1, in front of `next`, which must be at a higher
    /// level) and returns it.
    pub fn install(&self, nic: &mut NicDriver, next: u32) -> Result<u32, DriverError> {
        if self.vnis.iter().any(|v| *v >= 1 << 24) {
            return Err(DriverError::InvalidArgument("a VNI has 24 bits"));
        }
        let table = nic.create_flow_table(TABLE_KIND_FDB, 1, TableMiss::Goto(next))?;
        let any_vni = [None];
        let vnis: Vec<Option<u32>> = self.vnis.iter().copied().map(Some).collect();
        for vni in if vnis.is_empty() { &any_vni[..] } else { &vnis } {
            let (mut mask, mut value) = (FlowMatch::default(), FlowMatch::default());
            mask.ip_proto = 0xff;
            value.ip_proto = fld_abi::wire::ip_proto::UDP;
            mask.dst_port = [0xff; 2];
            value.dst_port = fld_abi::wire::vxlan::UDP_PORT.to_be_bytes();
            if let Some(vni) = vni {
                mask.vni = [0xff; 3];
                value.vni.copy_from_slice(&vni.to_be_bytes()[1..]);
            }
            nic.create_flow_entry(
                table,
                &FlowRule {
                    priority: 0,
                    mask,
                    value,
                    count: true,
                    vxlan_decap: true,
                    ..FlowRule::any(RuleFate::Goto(next))
                },
            )?;
        }
        Ok(table)
    }
}

/// NIC function 0 of a card on a link, and what keeps the card alive.
pub type LinkedCard = (Arc<dyn fld_driver::PciDevice>, Box<dyn std::any::Any>);

/// A card in this process whose uplink is `link` (with `faults` on what it sends, and every
/// uplink frame captured to `pcap`): NIC function 0 and what keeps the card alive. Cards on one
/// link need distinct MAC addresses, so `ip`'s last two bytes pick the card number in them.
pub fn card_on_link(
    link: &str,
    ip: std::net::IpAddr,
    faults: fld_device::wire::Faults,
    pcap: Option<&std::path::Path>,
) -> Result<LinkedCard, Box<dyn std::error::Error>> {
    card_on_link_with(
        link,
        ip,
        faults,
        pcap,
        fld_device::nic::reorder::ReceiverMode::GoBackN,
    )
}

/// [`card_on_link`] whose RC responders treat packets ahead as `receiver` says (LEFT §3).
pub fn card_on_link_with(
    link: &str,
    ip: std::net::IpAddr,
    faults: fld_device::wire::Faults,
    pcap: Option<&std::path::Path>,
    receiver: fld_device::nic::reorder::ReceiverMode,
) -> Result<LinkedCard, Box<dyn std::error::Error>> {
    let card_id = match ip {
        std::net::IpAddr::V4(v) => u16::from_be_bytes([v.octets()[2], v.octets()[3]]),
        std::net::IpAddr::V6(v) => u16::from_be_bytes([v.octets()[14], v.octets()[15]]),
    };
    let card = Card::new(CardConfig {
        nic: fld_device::nic::NicConfig {
            card_id,
            receiver,
            ..Default::default()
        },
        ..Default::default()
    });
    let wire = crate::wires::open_link(link)?;
    if faults == fld_device::wire::Faults::default() {
        card.nic.set_uplink(wire);
    } else {
        card.nic
            .set_uplink(Box::new(fld_device::wire::FaultyWire::new(wire, faults)));
    }
    if let Some(path) = pcap {
        let tap = fld_device::wire::PcapTap::new(
            std::io::BufWriter::new(std::fs::File::create(path)?),
            fld_device::wire::pcap::CaptureFilter::Vport(fld_abi::nic::VPORT_UPLINK),
        )?;
        card.nic.set_tap(Some(Box::new(tap)));
    }
    let host = fld_driver::inprocess::InProcessHost::new(card.clone(), 256 << 20)?;
    let fid = card.nic.function_id(0).ok_or("no NIC function")?;
    Ok((host.device(fid), Box::new((card, host))))
}
