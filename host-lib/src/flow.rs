//! Flow rules in the shape of DPDK's rte_flow: attributes, a pattern of header items and a list
//! of actions, compiled into one soft-NIC flow entry (mask and value over `FlowMatch`, one fate,
//! optional mark and counter).

use std::net::{Ipv4Addr, Ipv6Addr};

use fld_abi::nic::FlowMatch;

/// Where the rule goes. `group` selects a table (0 is the port's root); `transfer` rules live in
/// the eSwitch (FDB) and need the manager function.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowAttr {
    pub group: u8,
    /// Lower wins.
    pub priority: u16,
    pub transfer: bool,
}

/// Pattern items; `None` fields are wildcards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowItem {
    Eth {
        dst: Option<[u8; 6]>,
        src: Option<[u8; 6]>,
        ethertype: Option<u16>,
    },
    Ipv4 {
        src: Option<Ipv4Addr>,
        dst: Option<Ipv4Addr>,
        proto: Option<u8>,
    },
    Ipv6 {
        src: Option<Ipv6Addr>,
        dst: Option<Ipv6Addr>,
        proto: Option<u8>,
    },
    Udp {
        src_port: Option<u16>,
        dst_port: Option<u16>,
    },
    Tcp {
        src_port: Option<u16>,
        dst_port: Option<u16>,
    },
    /// eSwitch rules: the vPort the packet came from.
    PortId { vport: u16 },
    /// Whether the packet is an IPv4 fragment (MF set or offset != 0).
    Ipv4Fragment(bool),
    /// The parser's header-error bits (`fld_abi::nic::hdr_err`, rte_flow's integrity item):
    /// the bits in `mask` must equal those in `value`. One reason: `{ mask: r, value: r }`;
    /// only consistent headers: `{ mask: 0xff, value: 0 }`.
    HeaderErrors { mask: u8, value: u8 },
}

/// Actions; at most one fate (Queue, Rss, Drop, Jump, PortId).
#[derive(Clone, Debug)]
pub enum FlowAction {
    Queue(u16),
    /// RSS over these queues with the hash-field selection of `fld_device::nic::abi::rss_fields`.
    Rss {
        queues: Vec<u16>,
        fields: u8,
    },
    Drop,
    Jump(u8),
    /// eSwitch rules: deliver to a vPort.
    PortId(u16),
    Mark(u32),
    Count,
}

/// Mask and value built from a pattern.
pub fn compile_pattern(items: &[FlowItem]) -> (FlowMatch, FlowMatch) {
    let mut m = FlowMatch::default();
    let mut v = FlowMatch::default();
    fn set<const N: usize>(mask: &mut [u8; N], val: &mut [u8; N], x: Option<[u8; N]>) {
        if let Some(x) = x {
            *mask = [0xff; N];
            *val = x;
        }
    }
    for item in items {
        match *item {
            FlowItem::Eth {
                dst,
                src,
                ethertype,
            } => {
                set(&mut m.dst_mac, &mut v.dst_mac, dst);
                set(&mut m.src_mac, &mut v.src_mac, src);
                set(
                    &mut m.ethertype,
                    &mut v.ethertype,
                    ethertype.map(u16::to_be_bytes),
                );
            }
            FlowItem::Ipv4 { src, dst, proto } => {
                m.ip_version = 0xff;
                v.ip_version = 4;
                let a4 = |a: Ipv4Addr| {
                    let mut b = [0u8; 16];
                    b[..4].copy_from_slice(&a.octets());
                    b
                };
                if let Some(a) = src {
                    m.src_ip[..4].fill(0xff);
                    v.src_ip = a4(a);
                }
                if let Some(a) = dst {
                    m.dst_ip[..4].fill(0xff);
                    v.dst_ip = a4(a);
                }
                if let Some(p) = proto {
                    m.ip_proto = 0xff;
                    v.ip_proto = p;
                }
            }
            FlowItem::Ipv6 { src, dst, proto } => {
                m.ip_version = 0xff;
                v.ip_version = 6;
                set(&mut m.src_ip, &mut v.src_ip, src.map(|a| a.octets()));
                set(&mut m.dst_ip, &mut v.dst_ip, dst.map(|a| a.octets()));
                if let Some(p) = proto {
                    m.ip_proto = 0xff;
                    v.ip_proto = p;
                }
            }
            FlowItem::Udp { src_port, dst_port } | FlowItem::Tcp { src_port, dst_port } => {
                m.ip_proto = 0xff;
                v.ip_proto = if matches!(item, FlowItem::Udp { .. }) {
                    17
                } else {
                    6
                };
                set(
                    &mut m.src_port,
                    &mut v.src_port,
                    src_port.map(u16::to_be_bytes),
                );
                set(
                    &mut m.dst_port,
                    &mut v.dst_port,
                    dst_port.map(u16::to_be_bytes),
                );
            }
            FlowItem::PortId { vport } => set(
                &mut m.src_vport,
                &mut v.src_vport,
                Some(vport.to_le_bytes()),
            ),
            FlowItem::Ipv4Fragment(is_fragment) => {
                m.ip_version = 0xff;
                v.ip_version = 4;
                m.ip_frag = 1;
                v.ip_frag = u8::from(is_fragment);
            }
            FlowItem::HeaderErrors { mask, value } => {
                m.hdr_err = mask;
                v.hdr_err = value & mask;
            }
        }
    }
    (m, v)
}
