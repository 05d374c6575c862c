//! The embedded switch (paper §2.3): vPorts joined by match-action tables. A frame a vPort sends
//! walks the FDB pipeline (eSwitch tables, programmed by the manager function) to a destination
//! vPort; a frame arriving at a host vPort walks that vPort's NIC receive pipeline to an RQ or an
//! RSS group. Tables hold prioritised entries with a mask and value over [`FlowMatch`]; a miss
//! follows the table's miss action. Go-to-table only jumps to a strictly higher level, so a walk
//! always ends. Entries may police with a meter and VXLAN-decapsulate or -encapsulate (RFC 7348).
//! Left out: egress (NIC transmit) tables, header rewrite, VLAN push/pop.

use super::rss::Toeplitz;
use fld_abi::nic::{self as abi, action, FlowMatch, FLOW_MATCH_LEN, VPORT_UPLINK};
use fld_abi::wire::{
    ethernet, ethertype, ipv4, vxlan, EthIpv4UdpRepr, EthernetRepr, Ipv4Packet, Ipv4Repr,
    UdpPacket, UdpRepr, VxlanHeader, VxlanRepr,
};
use zerocopy::IntoBytes;

/// Packet key as eight machine words, so matching is eight masked compares.
/// A match key: the [`FlowMatch`] layout as machine words, compared word by word.
pub type Key = [u64; KEY_WORDS];
pub const KEY_WORDS: usize = FLOW_MATCH_LEN / 8;

pub fn key_of(m: &FlowMatch) -> Key {
    let mut k = [0u64; KEY_WORDS];
    for (i, chunk) in m.as_bytes().chunks_exact(8).enumerate() {
        k[i] = u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    }
    k
}

/// Where a table lookup sends a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Vport(u16),
    /// FDB default for broadcast/multicast: every vPort but the source.
    Flood,
    Rq(u32),
    Rss(u32),
    /// Dropped by a rule or a drop miss.
    Drop,
    /// No rule and no default: counted as unsteered.
    NoSteering,
    /// Strip the VXLAN encapsulation and continue steering at this table with the inner frame.
    DecapGoto(u32),
    /// Prepend the outer headers of an encapsulation, then deliver to the vPort.
    EncapVport {
        vport: u16,
        encap: u32,
    },
}

/// A VXLAN tunnel's outer headers (RFC 7348 §5), built once at creation; lengths, the IPv4
/// checksum and the UDP source port are filled per packet.
pub struct VxlanEncap {
    pub owner: u16,
    pub header: [u8; abi::VXLAN_ENCAP_LEN],
    /// Entries that use the encapsulation.
    pub refs: u32,
    pub packets: u64,
}

impl VxlanEncap {
    pub fn new(owner: u16, i: &abi::CreateVxlanEncapIn) -> Self {
        let mut header = [0u8; abi::VXLAN_ENCAP_LEN];
        let stack = EthIpv4UdpRepr {
            eth: EthernetRepr {
                src_addr: i.src_mac,
                dst_addr: i.dst_mac,
                ethertype: ethertype::IPV4,
            },
            ip: Ipv4Repr {
                src_addr: i.src_ip,
                dst_addr: i.dst_ip,
                hop_limit: if i.ttl == 0 { 64 } else { i.ttl },
                // The tunnel must not fragment (RFC 7348 §4.3).
                dont_frag: true,
                ..Ipv4Repr::default()
            },
            udp: UdpRepr {
                src_port: 0,
                dst_port: match i.udp_dst_port.get() {
                    0 => vxlan::UDP_PORT,
                    p => p,
                },
            },
        };
        stack.emit(&mut header, false);
        VxlanRepr { vni: i.vni.get() }.emit(&mut VxlanHeader::new_unchecked(
            &mut header[EthIpv4UdpRepr::HEADER_LEN..],
        ));
        VxlanEncap {
            owner,
            header,
            refs: 0,
            packets: 0,
        }
    }

    /// Writes the outer headers for `inner` into `out` followed by `inner`, with the lengths,
    /// the IPv4 header checksum and a UDP source port picked by `flow_hash` (RFC 7348 §5).
    pub fn encapsulate(&self, inner: &[u8], flow_hash: u32, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.header);
        out.extend_from_slice(inner);
        let ip_len = (out.len() - ethernet::HEADER_LEN).min(0xffff) as u16;
        let mut ip = Ipv4Packet::new_unchecked(&mut out[ethernet::HEADER_LEN..]);
        ip.set_total_len(ip_len);
        ip.fill_checksum();
        let mut udp = UdpPacket::new_unchecked(ip.payload_mut());
        udp.set_src_port(0xc000 | (flow_hash ^ (flow_hash >> 16)) as u16 & 0x3fff);
        udp.set_len(ip_len.saturating_sub(ipv4::HEADER_LEN as u16));
    }
}

/// The outcome of a pipeline walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steering {
    pub fate: Fate,
    pub flow_tag: u32,
}

/// A token-bucket policer.
pub struct Meter {
    pub owner: u16,
    pub rate_bytes_per_s: u64,
    pub burst_bytes: u32,
    tokens: f64,
    last_ns: u64,
    pub passed: (u64, u64),
    pub dropped: (u64, u64),
    /// Entries that use the meter.
    pub refs: u32,
}

impl Meter {
    pub fn new(owner: u16, rate_bytes_per_s: u64, burst_bytes: u32, now_ns: u64) -> Self {
        Meter {
            owner,
            rate_bytes_per_s,
            burst_bytes,
            tokens: burst_bytes as f64,
            last_ns: now_ns,
            passed: (0, 0),
            dropped: (0, 0),
            refs: 0,
        }
    }

    /// Refills for the time since the last packet, then takes `len` bytes if they are there.
    fn admit(&mut self, len: usize, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + dt as f64 * self.rate_bytes_per_s as f64 / 1e9)
            .min(self.burst_bytes as f64);
        if self.tokens >= len as f64 {
            self.tokens -= len as f64;
            self.passed = (self.passed.0 + 1, self.passed.1 + len as u64);
            true
        } else {
            self.dropped = (self.dropped.0 + 1, self.dropped.1 + len as u64);
            false
        }
    }
}

pub struct FlowEntry {
    pub id: u32,
    pub meter: u32,
    pub encap: u32,
    pub priority: u16,
    mask: Key,
    value: Key,
    pub actions: u32,
    pub vport: u16,
    pub dest: u32,
    pub flow_tag: u32,
    pub packets: u64,
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    Default,
    Drop,
    Goto(u32),
}

pub struct FlowTable {
    pub owner: u16,
    pub kind: u8,
    pub level: u8,
    pub miss: Miss,
    /// Sorted by (priority, id).
    pub entries: Vec<FlowEntry>,
    /// Tables whose miss points here, plus entries that go to it.
    pub refs: u32,
}

pub struct RssGroup {
    pub owner: u16,
    pub hash_fields: u8,
    pub toeplitz: Toeplitz,
    pub indirection: Vec<u32>,
}

impl RssGroup {
    /// RQ for a hash: the indirection table is a power of two long.
    pub fn rq_for(&self, hash: u32) -> u32 {
        self.indirection[hash as usize & (self.indirection.len() - 1)]
    }
}

#[derive(Default, Clone, Copy, Debug)]
pub struct VportCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_steering_drops: u64,
    pub rx_no_steering: u64,
    pub rx_out_of_buffer: u64,
    pub tx_malformed: u64,
}

pub struct Vport {
    pub number: u16,
    pub mac: [u8; 6],
    pub rx_root: Option<u32>,
    pub counters: VportCounters,
}

/// Longest pipeline walk: one table per level (go-to-table only moves to higher levels).
const MAX_HOPS: usize = abi::MAX_FLOW_LEVEL as usize + 1;

pub struct Eswitch {
    pub vports: Vec<Vport>,
    pub uplink: Vport,
    pub tables: Vec<Option<FlowTable>>,
    pub rss_groups: Vec<Option<RssGroup>>,
    pub meters: Vec<Option<Meter>>,
    pub encaps: Vec<Option<VxlanEncap>>,
    pub fdb_root: Option<u32>,
    next_entry_id: u32,
}

impl Eswitch {
    /// The eSwitch of card `card` with `host_vports` host vPorts.
    pub fn new(card: u16, host_vports: u16) -> Self {
        Eswitch {
            vports: (0..host_vports)
                .map(|n| Vport {
                    number: n,
                    mac: abi::vport_mac(card, n),
                    rx_root: None,
                    counters: Default::default(),
                })
                .collect(),
            uplink: Vport {
                number: VPORT_UPLINK,
                mac: [0; 6],
                rx_root: None,
                counters: Default::default(),
            },
            tables: Vec::new(),
            rss_groups: Vec::new(),
            meters: Vec::new(),
            encaps: Vec::new(),
            fdb_root: None,
            next_entry_id: 1,
        }
    }

    pub fn vport_mut(&mut self, n: u16) -> Option<&mut Vport> {
        if n == VPORT_UPLINK {
            Some(&mut self.uplink)
        } else {
            self.vports.get_mut(n as usize)
        }
    }

    pub fn vport(&self, n: u16) -> Option<&Vport> {
        if n == VPORT_UPLINK {
            Some(&self.uplink)
        } else {
            self.vports.get(n as usize)
        }
    }

    pub fn table(&self, id: u32) -> Option<&FlowTable> {
        self.tables.get(id as usize)?.as_ref()
    }

    pub fn table_mut(&mut self, id: u32) -> Option<&mut FlowTable> {
        self.tables.get_mut(id as usize)?.as_mut()
    }

    pub fn alloc_entry_id(&mut self) -> u32 {
        let id = self.next_entry_id;
        self.next_entry_id = self.next_entry_id.wrapping_add(1).max(1);
        id
    }

    /// Adds an already validated entry, keeping priority order (ties in creation order).
    pub fn insert_entry(&mut self, table: u32, e: FlowEntryInit) -> Option<u32> {
        let id = self.alloc_entry_id();
        let t = self.table_mut(table)?;
        let mut mask = key_of(&e.mask);
        let mut value = key_of(&e.value);
        for (v, m) in value.iter_mut().zip(mask.iter_mut()) {
            *v &= *m;
        }
        if mask.iter().all(|m| *m == 0) {
            mask = [0; KEY_WORDS];
        }
        let at = t.entries.partition_point(|x| x.priority <= e.priority);
        t.entries.insert(
            at,
            FlowEntry {
                id,
                meter: e.meter,
                encap: e.encap,
                priority: e.priority,
                mask,
                value,
                actions: e.actions,
                vport: e.vport,
                dest: e.dest,
                flow_tag: e.flow_tag,
                packets: 0,
                bytes: 0,
            },
        );
        Some(id)
    }

    /// Finds an entry by ID: (table, index).
    pub fn find_entry(&self, id: u32) -> Option<(u32, usize)> {
        self.tables.iter().enumerate().find_map(|(t, tab)| {
            let tab = tab.as_ref()?;
            tab.entries
                .iter()
                .position(|e| e.id == id)
                .map(|i| (t as u32, i))
        })
    }

    /// Walks the FDB pipeline for a frame entering from `src_vport`, from the root or, for a
    /// frame an accelerator returns, from the table `start` it names.
    pub fn steer_fdb(
        &mut self,
        start: Option<u32>,
        key: &Key,
        dst_mac: &[u8; 6],
        src_vport: u16,
        len: usize,
        now_ns: u64,
    ) -> Steering {
        let walked = match start.or(self.fdb_root) {
            Some(root) => self.walk(root, key, len, now_ns),
            None => Walked::Default(0),
        };
        match walked {
            Walked::Fate(s) => s,
            Walked::Default(flow_tag) => Steering {
                fate: self.l2_forward(dst_mac, src_vport),
                flow_tag,
            },
        }
    }

    /// Default FDB behaviour: learn nothing, forward by the vPorts' own MAC addresses.
    fn l2_forward(&self, dst_mac: &[u8; 6], src_vport: u16) -> Fate {
        if dst_mac[0] & 1 != 0 {
            return Fate::Flood;
        }
        match self.vports.iter().find(|v| &v.mac == dst_mac) {
            Some(v) if v.number == src_vport => Fate::Drop,
            Some(v) => Fate::Vport(v.number),
            None if src_vport == VPORT_UPLINK => Fate::Drop,
            None => Fate::Vport(VPORT_UPLINK),
        }
    }

    /// Walks vPort `vport`'s receive pipeline.
    /// Walks vPort `vport`'s receive pipeline from its root, or from `start` for a returned frame.
    pub fn steer_rx(
        &mut self,
        vport: u16,
        start: Option<u32>,
        key: &Key,
        len: usize,
        flow_tag: u32,
        now_ns: u64,
    ) -> Steering {
        let Some(root) = start.or_else(|| self.vport(vport).and_then(|v| v.rx_root)) else {
            return Steering {
                fate: Fate::NoSteering,
                flow_tag,
            };
        };
        match self.walk(root, key, len, now_ns) {
            Walked::Fate(mut s) => {
                if s.flow_tag == 0 {
                    s.flow_tag = flow_tag;
                }
                s
            }
            Walked::Default(t) => Steering {
                fate: Fate::NoSteering,
                flow_tag: if t != 0 { t } else { flow_tag },
            },
        }
    }

    fn walk(&mut self, root: u32, key: &Key, len: usize, now_ns: u64) -> Walked {
        let mut table = root;
        let mut flow_tag = 0;
        for _ in 0..MAX_HOPS {
            let Some(t) = self.tables.get_mut(table as usize).and_then(|t| t.as_mut()) else {
                return Walked::Fate(Steering {
                    fate: Fate::Drop,
                    flow_tag,
                });
            };
            let hit = t
                .entries
                .iter_mut()
                .find(|e| (0..KEY_WORDS).all(|i| key[i] & e.mask[i] == e.value[i]));
            let Some(e) = hit else {
                match t.miss {
                    Miss::Default => return Walked::Default(flow_tag),
                    Miss::Drop => {
                        return Walked::Fate(Steering {
                            fate: Fate::Drop,
                            flow_tag,
                        })
                    }
                    Miss::Goto(next) => {
                        table = next;
                        continue;
                    }
                }
            };
            if e.actions & action::COUNT != 0 {
                e.packets += 1;
                e.bytes += len as u64;
            }
            if e.actions & action::METER != 0 {
                let admitted = self
                    .meters
                    .get_mut(e.meter as usize)
                    .and_then(|m| m.as_mut())
                    .is_some_and(|m| m.admit(len, now_ns));
                if !admitted {
                    return Walked::Fate(Steering {
                        fate: Fate::Drop,
                        flow_tag,
                    });
                }
            }
            if e.actions & action::SET_FLOW_TAG != 0 {
                flow_tag = e.flow_tag;
            }
            let a = e.actions;
            if a & action::VXLAN_DECAP != 0 {
                return Walked::Fate(Steering {
                    fate: Fate::DecapGoto(e.dest),
                    flow_tag,
                });
            }
            let fate = if a & action::FWD_VPORT != 0 && a & action::VXLAN_ENCAP != 0 {
                Fate::EncapVport {
                    vport: e.vport,
                    encap: e.encap,
                }
            } else if a & action::FWD_VPORT != 0 {
                Fate::Vport(e.vport)
            } else if a & action::FWD_RQ != 0 {
                Fate::Rq(e.dest)
            } else if a & action::FWD_RSS != 0 {
                Fate::Rss(e.dest)
            } else if a & action::DROP != 0 {
                Fate::Drop
            } else if a & action::GOTO_TABLE != 0 {
                table = e.dest;
                continue;
            } else {
                return Walked::Default(flow_tag);
            };
            return Walked::Fate(Steering { fate, flow_tag });
        }
        Walked::Fate(Steering {
            fate: Fate::Drop,
            flow_tag,
        })
    }
}

enum Walked {
    Fate(Steering),
    /// Fell through to the pipeline's default with this flow tag.
    Default(u32),
}

/// A validated entry about to be inserted.
pub struct FlowEntryInit {
    pub priority: u16,
    pub mask: FlowMatch,
    pub value: FlowMatch,
    pub actions: u32,
    pub vport: u16,
    pub dest: u32,
    pub flow_tag: u32,
    pub meter: u32,
    pub encap: u32,
}

/// Builds the match key of a parsed frame.
pub fn frame_key(
    frame: &[u8],
    p: &super::packet::ParsedFrame,
    src_vport: u16,
    metadata: u32,
) -> Key {
    use super::packet::L3Kind;
    let mut m = FlowMatch {
        dst_mac: p.dst_mac,
        src_mac: p.src_mac,
        ethertype: p.ethertype.to_be_bytes(),
        ip_version: match p.l3 {
            L3Kind::Ipv4 => 4,
            L3Kind::Ipv6 => 6,
            L3Kind::None => 0,
        },
        ip_proto: p.ip_proto,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        src_port: p.src_port.to_be_bytes(),
        dst_port: p.dst_port.to_be_bytes(),
        src_vport: src_vport.to_le_bytes(),
        vlan_id: p.vlan_tci.map_or(0, |t| t & 0x0fff).to_be_bytes(),
        metadata: metadata.to_le_bytes(),
        vni: [0; 3],
        ip_frag: u8::from(p.ipv4_fragment),
        dst_qpn: [0; 3],
        rsvd: [0; 13],
    };
    if p.l3 == L3Kind::None {
        m.ip_proto = 0;
    }
    if let Some((vni, _)) = super::packet::vxlan(frame, p) {
        m.vni.copy_from_slice(&vni.to_be_bytes()[1..]);
    }
    if let Some(qpn) = super::packet::roce_dest_qp(frame, p) {
        m.dst_qpn.copy_from_slice(&qpn.to_be_bytes()[1..]);
    }
    key_of(&m)
}

const _: () = assert!(FLOW_MATCH_LEN.is_multiple_of(8) && abi::NO_TABLE == u32::MAX);
