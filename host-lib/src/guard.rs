//! Fail-closed steering for a UDP service behind an inline accelerator (the IoT filter of paper
//! §7): the eSwitch rules that keep every frame for the service on the accelerator's path —
//! including IPv4 fragments, which carry no port, and frames whose headers are inconsistent, whose
//! ports cannot be trusted. The policy is `docs/nic-interface.md` §9.7:
//!
//! 1. A frame with any header error (`fld_abi::nic::hdr_err`) is dropped and counted by reason,
//!    whatever its port: inconsistent headers cannot show that the frame is not for the service,
//!    and no host stack would accept it anyway.
//! 2. An IPv4 fragment of the service's protocol (to its address, when one is given) either goes
//!    to the reassembly accelerator, whose whole datagram re-enters steering at this same table
//!    and meets rule 3 like any datagram ([`FragmentPolicy::Reassemble`], FLD-E's
//!    resume-at-table chaining), or is dropped and counted ([`FragmentPolicy::Refuse`]; RFC 7252
//!    §4.6 lets a CoAP endpoint do without fragmentation). Sources can be refused one by one
//!    while the rest are reassembled (a per-tenant option).
//! 3. A datagram to the service's port goes to the accelerator.
//!
//! The caller adds what follows (everything else to the host) at a lower priority.

use std::net::Ipv4Addr;

use fld_abi::nic::hdr_err;
use fld_abi::wire::ip_proto;
use fld_driver::nic::{FlowRule, NicDriver, RuleFate};
use fld_driver::DriverError;

use crate::flde::FldE;
use crate::flow::{compile_pattern, FlowItem};

/// The context ID the reassembly accelerator's `accelerate` rule sets; tenants use the others.
pub const REASSEMBLY_CONTEXT: u16 = u16::MAX;

/// What happens to IPv4 fragments of the protected service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FragmentPolicy {
    /// Reassembled by the accelerator that owns [`REASSEMBLY_CONTEXT`], then steered whole.
    #[default]
    Reassemble,
    /// Dropped and counted.
    Refuse,
}

/// The service a guard protects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpService {
    pub port: u16,
    /// The server's address; `None` protects the port on every address.
    pub address: Option<Ipv4Addr>,
    pub fragments: FragmentPolicy,
    /// Sources whose fragments are refused even when the policy reassembles.
    pub refuse_fragments_from: Vec<Ipv4Addr>,
}

impl UdpService {
    /// The port on every address, fragments reassembled.
    pub fn port(port: u16) -> Self {
        UdpService {
            port,
            address: None,
            fragments: FragmentPolicy::Reassemble,
            refuse_fragments_from: Vec::new(),
        }
    }

    /// Datagrams to the service: what goes to the accelerator.
    pub fn pattern(&self) -> [FlowItem; 2] {
        [
            self.ipv4(None),
            FlowItem::Udp {
                src_port: None,
                dst_port: Some(self.port),
            },
        ]
    }

    /// IPv4 of the service's protocol, to its address, from `src`.
    fn ipv4(&self, src: Option<Ipv4Addr>) -> FlowItem {
        FlowItem::Ipv4 {
            src,
            dst: self.address,
            proto: Some(ip_proto::UDP),
        }
    }
}

/// The installed rules, each with the name its counter is reported under.
#[derive(Clone, Debug, Default)]
pub struct ServiceGuard {
    rules: Vec<(&'static str, u32)>,
}

impl ServiceGuard {
    /// Installs the guard for `service` in the eSwitch table `table` (on the manager function
    /// `flde.nic()`) at priorities `first_priority..`, sending the service's traffic to FLD's
    /// vPort; with [`FragmentPolicy::Reassemble`] also the rule on FLD's receive table that
    /// hands fragments to the reassembly accelerator and resumes its output at `table`. Returns
    /// the guard and the first priority left free.
    pub fn install(
        flde: &mut FldE,
        table: u32,
        first_priority: u16,
        service: &UdpService,
    ) -> Result<(Self, u16), DriverError> {
        let fld_vport = flde.nic().vport();
        let mut guard = ServiceGuard::default();
        let mut priority = first_priority;
        let mut add = |nic: &mut NicDriver,
                       name: &'static str,
                       pattern: &[FlowItem],
                       fate: RuleFate|
         -> Result<(), DriverError> {
            let (mask, value) = compile_pattern(pattern);
            let rule = FlowRule {
                priority,
                mask,
                value,
                count: true,
                ..FlowRule::any(fate)
            };
            guard
                .rules
                .push((name, nic.create_flow_entry(table, &rule)?));
            priority += 1;
            Ok(())
        };
        let nic = flde.nic();
        for (bit, name) in hdr_err::ALL {
            let item = FlowItem::HeaderErrors {
                mask: bit,
                value: bit,
            };
            add(nic, name, &[item], RuleFate::Drop)?;
        }
        let fragment = FlowItem::Ipv4Fragment(true);
        for src in &service.refuse_fragments_from {
            let from = service.ipv4(Some(*src));
            add(nic, "refused_fragments", &[fragment, from], RuleFate::Drop)?;
        }
        let fragments = [fragment, service.ipv4(None)];
        match service.fragments {
            FragmentPolicy::Refuse => add(nic, "refused_fragments", &fragments, RuleFate::Drop)?,
            FragmentPolicy::Reassemble => {
                add(
                    nic,
                    "fragments_to_reassembly",
                    &fragments,
                    RuleFate::Vport(fld_vport),
                )?;
                flde.accelerate(0, &fragments, REASSEMBLY_CONTEXT, Some(table))?;
            }
        }
        add(
            flde.nic(),
            "to_accelerator",
            &service.pattern(),
            RuleFate::Vport(fld_vport),
        )?;
        Ok((guard, priority))
    }

    /// Packets each rule took, summed by name: the card's drops by reason and what it steered
    /// to the accelerator.
    pub fn counters(&self, nic: &mut NicDriver) -> Result<Vec<(&'static str, u64)>, DriverError> {
        let mut out: Vec<(&'static str, u64)> = Vec::new();
        for &(name, id) in &self.rules {
            let (packets, _) = nic.query_flow_entry(id)?;
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some((_, n)) => *n += packets,
                None => out.push((name, packets)),
            }
        }
        Ok(out)
    }
}
