//! Links and switches between the cards. A link is a pair of FIFO lines: a frame starts when
//! the line is free, occupies it for its serialization time (frame plus per-frame overhead at the
//! line rate) and arrives a propagation delay after its last bit left. A switch is output-queued
//! (store and forward): an arriving frame picks an egress port among the equally short paths to
//! its destination MAC address (ECMP hash, flowlet or per-packet spraying), is dropped if the
//! egress queue cannot hold it, is marked Congestion Experienced if the queue already holds at
//! least the ECN threshold, and leaves after the forwarding delay once the port is free.
//!
//! Left out: PFC pause frames, shared-buffer switches (each port has its own buffer), priority
//! queues, MAC learning and flooding (routes are computed from the topology; a frame to an
//! unknown MAC is dropped and counted), IPv6 flow hashing (IPv6 frames hash on their MACs).

use std::collections::{HashMap, VecDeque};

use fld_abi::wire::ethernet::{self, EthernetFrame};
use fld_abi::wire::ipv4::{self, Ipv4Packet};
use fld_abi::wire::{ethertype, ip_proto};
use serde::Serialize;

use super::events::{Event, EventQueue, Ps, PS_PER_NS};
use super::params::{serialization_ps, LinkParams, PathChoice, SwitchParams};

/// A node's port: the link it is plugged into and which end of it.
#[derive(Clone, Copy, Debug)]
struct Plug {
    link: usize,
    end: usize,
}

/// Counters of one direction of a link.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct LineCounters {
    pub frames: u64,
    pub bytes: u64,
    pub lost: u64,
    /// Time the line spent sending, ps.
    pub busy_ps: u64,
}

struct Link {
    params: LinkParams,
    /// The node at each end.
    ends: [usize; 2],
    /// When each direction (sending from end 0, from end 1) is free again.
    free_at: [Ps; 2],
    counters: [LineCounters; 2],
}

/// Counters of one switch egress port.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct QueueCounters {
    pub enqueued: u64,
    pub dropped: u64,
    pub ecn_marked: u64,
    /// Frames that found the queue above the ECN threshold but were not ECN-capable.
    pub not_ect_over_threshold: u64,
    pub max_bytes: u64,
}

struct Switch {
    params: SwitchParams,
    queue_bytes: Vec<u64>,
    counters: Vec<QueueCounters>,
    /// Destination MAC to the egress ports on a shortest path to it.
    routes: HashMap<[u8; 6], Vec<usize>>,
    /// Destination MAC to this switch's hops to it and the egress ports on a path one hop
    /// longer (a neighbour as far from it as this switch): adaptive routing's non-minimal
    /// choices.
    detours: HashMap<[u8; 6], (u64, Vec<usize>)>,
    /// MACs of the hosts plugged into this switch: their packets start here.
    local: std::collections::HashSet<[u8; 6]>,
    /// Flowlet table: flow hash to (last packet time, chosen port).
    flowlets: HashMap<u64, (Ps, usize)>,
    spray_next: usize,
    unroutable: u64,
}

struct Node {
    name: String,
    plugs: Vec<Plug>,
    switch: Option<Switch>,
}

/// Where a frame arriving at a host goes: the runner hands it to the card.
pub struct HostDelivery {
    pub host: usize,
    pub frame: Vec<u8>,
}

/// Frame buffers shared by the network and the cards' ports: a frame's buffer travels from the
/// sending card through links and switches to the receiving card and back here, so a run
/// allocates only while traffic grows.
#[derive(Clone, Default)]
pub struct FramePool(std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

impl FramePool {
    /// A buffer holding a copy of `bytes`.
    pub fn take(&self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default();
        b.clear();
        b.extend_from_slice(bytes);
        b
    }

    /// Gives a buffer back.
    pub fn give(&self, frame: Vec<u8>) {
        let mut p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() < 1 << 16 {
            p.push(frame);
        }
    }
}

/// The network of a run.
pub struct Network {
    nodes: Vec<Node>,
    links: Vec<Link>,
    rng: fastrand::Rng,
    hosts: usize,
    pub pool: FramePool,
}

/// Why a topology is refused.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("link {0}: unknown node {1:?}")]
    UnknownNode(usize, String),
    #[error("host {0:?} has {1} links; a card has one uplink")]
    HostPorts(String, usize),
    #[error("link {0} joins {1:?} to itself")]
    SelfLink(usize, String),
}

impl Network {
    /// `hosts` host names (nodes 0..), then `switches` (name, parameters), joined by `links`
    /// (node names at both ends, parameters).
    pub fn new(
        hosts: &[String],
        switches: &[(String, SwitchParams)],
        links: &[([String; 2], LinkParams)],
        seed: u64,
    ) -> Result<Self, TopologyError> {
        let mut nodes: Vec<Node> = hosts
            .iter()
            .map(|h| Node {
                name: h.clone(),
                plugs: Vec::new(),
                switch: None,
            })
            .collect();
        for (name, p) in switches {
            nodes.push(Node {
                name: name.clone(),
                plugs: Vec::new(),
                switch: Some(Switch {
                    params: p.clone(),
                    queue_bytes: Vec::new(),
                    counters: Vec::new(),
                    routes: HashMap::new(),
                    detours: HashMap::new(),
                    local: Default::default(),
                    flowlets: HashMap::new(),
                    spray_next: 0,
                    unroutable: 0,
                }),
            });
        }
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let index = |n: &str| names.iter().position(|x| x == n);
        let mut out = Vec::new();
        for (li, ([a, b], p)) in links.iter().enumerate() {
            let ia = index(a).ok_or_else(|| TopologyError::UnknownNode(li, a.clone()))?;
            let ib = index(b).ok_or_else(|| TopologyError::UnknownNode(li, b.clone()))?;
            if ia == ib {
                return Err(TopologyError::SelfLink(li, a.clone()));
            }
            nodes[ia].plugs.push(Plug { link: li, end: 0 });
            nodes[ib].plugs.push(Plug { link: li, end: 1 });
            out.push(Link {
                params: p.clone(),
                ends: [ia, ib],
                free_at: [0; 2],
                counters: Default::default(),
            });
        }
        for n in &mut nodes[..hosts.len()] {
            if n.plugs.len() != 1 {
                return Err(TopologyError::HostPorts(n.name.clone(), n.plugs.len()));
            }
        }
        for n in &mut nodes {
            let ports = n.plugs.len();
            if let Some(s) = &mut n.switch {
                s.queue_bytes = vec![0; ports];
                s.counters = vec![QueueCounters::default(); ports];
            }
        }
        Ok(Network {
            nodes,
            links: out,
            rng: fastrand::Rng::with_seed(seed),
            hosts: hosts.len(),
            pool: FramePool::default(),
        })
    }

    /// Makes `mac` an address of host `host` (a card has one per NIC function) and routes it in
    /// every switch: the egress ports that start a shortest path to the host (breadth-first
    /// from it).
    pub fn add_host_mac(&mut self, host: usize, mac: [u8; 6]) {
        let n = self.nodes.len();
        let mut dist = vec![usize::MAX; n];
        dist[host] = 0;
        let mut todo = VecDeque::from([host]);
        while let Some(x) = todo.pop_front() {
            // Hosts do not forward: only the destination host starts paths.
            if x != host && x < self.hosts {
                continue;
            }
            for p in &self.nodes[x].plugs {
                let y = self.links[p.link].ends[1 - p.end];
                if dist[y] == usize::MAX {
                    dist[y] = dist[x] + 1;
                    todo.push_back(y);
                }
            }
        }
        for x in self.hosts..n {
            if dist[x] == usize::MAX {
                continue;
            }
            let hosts = self.hosts;
            let neighbour = |i: usize| {
                let p = self.nodes[x].plugs[i];
                self.links[p.link].ends[1 - p.end]
            };
            let plugs = self.nodes[x].plugs.len();
            let ports: Vec<usize> = (0..plugs)
                .filter(|&i| dist[neighbour(i)] + 1 == dist[x])
                .collect();
            let detours: Vec<usize> = (0..plugs)
                .filter(|&i| neighbour(i) >= hosts && dist[neighbour(i)] == dist[x])
                .collect();
            if let Some(s) = &mut self.nodes[x].switch {
                s.routes.insert(mac, ports);
                s.detours.insert(mac, (dist[x] as u64, detours));
                if dist[x] == 1 {
                    s.local.insert(mac);
                }
            }
        }
    }

    fn recycle(&mut self, frame: Vec<u8>) {
        self.pool.give(frame);
    }

    /// Puts `frame` on the line out of `node`'s port `port` as soon as the line is free and not
    /// before `ready`; returns when its last bit leaves.
    pub fn transmit(
        &mut self,
        q: &mut EventQueue,
        node: usize,
        port: usize,
        frame: Vec<u8>,
        ready: Ps,
    ) -> Ps {
        let plug = self.nodes[node].plugs[port];
        let link = &mut self.links[plug.link];
        let dir = plug.end;
        let bytes = frame.len() as u64;
        let ser = serialization_ps(
            bytes + u64::from(link.params.overhead_bytes),
            link.params.gbps,
        );
        let start = ready.max(link.free_at[dir]);
        let end = start + ser;
        link.free_at[dir] = end;
        let c = &mut link.counters[dir];
        c.frames += 1;
        c.bytes += bytes;
        c.busy_ps += ser;
        if link.params.loss > 0.0 && self.rng.f64() < link.params.loss {
            c.lost += 1;
            self.recycle(frame);
            return end;
        }
        let to = link.ends[1 - dir];
        q.schedule(
            end + link.params.propagation_ns * PS_PER_NS,
            Event::FrameArrives { node: to, frame },
        );
        end
    }

    /// A frame fully arrived at `node`: a host's is handed back for its card; a switch's is
    /// forwarded.
    pub fn arrive(
        &mut self,
        q: &mut EventQueue,
        now: Ps,
        node: usize,
        frame: Vec<u8>,
    ) -> Option<HostDelivery> {
        if node < self.hosts {
            return Some(HostDelivery { host: node, frame });
        }
        self.forward(q, now, node, frame);
        None
    }

    fn forward(&mut self, q: &mut EventQueue, now: Ps, node: usize, mut frame: Vec<u8>) {
        let addrs = EthernetFrame::new_checked(&frame[..])
            .ok()
            .map(|e| (e.dst_addr(), e.src_addr()));
        let hash = flow_hash(&frame);
        let Some(out) = addrs.and_then(|a| self.choose_port(now, node, a, hash)) else {
            self.unroutable(node, frame);
            return;
        };
        let sw = self.nodes[node]
            .switch
            .as_mut()
            .expect("forward at a switch");
        let len = frame.len() as u64;
        let queued = sw.queue_bytes[out];
        let c = &mut sw.counters[out];
        if queued + len > sw.params.buffer_bytes {
            c.dropped += 1;
            self.recycle(frame);
            return;
        }
        if queued >= sw.params.ecn_threshold_bytes {
            if mark_ce(&mut frame) {
                c.ecn_marked += 1;
            } else {
                c.not_ect_over_threshold += 1;
            }
        }
        c.enqueued += 1;
        sw.queue_bytes[out] += len;
        c.max_bytes = c.max_bytes.max(sw.queue_bytes[out]);
        let ready = now + sw.params.forwarding_ns * PS_PER_NS;
        let end = self.transmit(q, node, out, frame, ready);
        q.schedule(
            end,
            Event::QueueDrained {
                node,
                port: out,
                bytes: len,
            },
        );
    }

    /// The egress port of switch `node` for a frame from `src` to `dst` of flow `hash`.
    fn choose_port(
        &mut self,
        now: Ps,
        node: usize,
        (dst, src): ([u8; 6], [u8; 6]),
        hash: u64,
    ) -> Option<usize> {
        let rng = &mut self.rng;
        let sw = self.nodes[node].switch.as_mut()?;
        let ports = sw.routes.get(&dst).filter(|p| !p.is_empty())?;
        if sw.params.path == PathChoice::Adaptive {
            return Some(adaptive_port(sw, ports, dst, src));
        }
        if ports.len() == 1 {
            return Some(ports[0]);
        }
        Some(match sw.params.path {
            PathChoice::Adaptive => unreachable!("chosen above"),
            PathChoice::Ecmp => ports[(hash % ports.len() as u64) as usize],
            PathChoice::Spray => {
                sw.spray_next = sw.spray_next.wrapping_add(1);
                ports[sw.spray_next % ports.len()]
            }
            PathChoice::Random => ports[rng.usize(..ports.len())],
            PathChoice::Flowlet => {
                let gap = sw.params.flowlet_gap_ns * PS_PER_NS;
                let e = sw.flowlets.entry(hash).or_insert((now, usize::MAX));
                if e.1 == usize::MAX || now.saturating_sub(e.0) > gap {
                    e.1 = ports[rng.usize(..ports.len())];
                }
                e.0 = now;
                e.1
            }
        })
    }

    fn unroutable(&mut self, node: usize, frame: Vec<u8>) {
        if let Some(s) = &mut self.nodes[node].switch {
            s.unroutable += 1;
        }
        self.recycle(frame);
    }

    /// A switch egress port finished a frame.
    pub fn drained(&mut self, node: usize, port: usize, bytes: u64) {
        if let Some(s) = &mut self.nodes[node].switch {
            s.queue_bytes[port] -= bytes;
        }
    }

    /// Counters of every link direction and switch queue.
    pub fn report(&self) -> NetworkReport {
        let mut r = NetworkReport::default();
        for l in &self.links {
            for dir in 0..2 {
                let (from, to) = (l.ends[dir], l.ends[1 - dir]);
                r.lines.push(LineReport {
                    from: self.nodes[from].name.clone(),
                    to: self.nodes[to].name.clone(),
                    counters: l.counters[dir],
                });
            }
        }
        for n in &self.nodes {
            if let Some(s) = &n.switch {
                for (port, c) in s.counters.iter().enumerate() {
                    r.queues.push(QueueReport {
                        switch: n.name.clone(),
                        port,
                        counters: *c,
                    });
                }
                r.unroutable += s.unroutable;
            }
        }
        r
    }

    /// Bytes now queued at `node`'s egress `port` (a switch).
    pub fn queued(&self, node: usize, port: usize) -> u64 {
        self.nodes[node]
            .switch
            .as_ref()
            .map_or(0, |s| s.queue_bytes[port])
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LineReport {
    pub from: String,
    pub to: String,
    #[serde(flatten)]
    pub counters: LineCounters,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct QueueReport {
    pub switch: String,
    pub port: usize,
    #[serde(flatten)]
    pub counters: QueueCounters,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct NetworkReport {
    pub lines: Vec<LineReport>,
    pub queues: Vec<QueueReport>,
    pub unroutable: u64,
}

/// The IPv4 header of an Ethernet frame, if it carries one.
fn ipv4_header(frame: &[u8]) -> Option<std::ops::Range<usize>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != ethertype::IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked_header(&frame[ethernet::HEADER_LEN..]).ok()?;
    Some(ethernet::HEADER_LEN..ethernet::HEADER_LEN + ip.header_len())
}

/// A stable hash of the frame's flow: IPv4 addresses, protocol and UDP/TCP ports (RoCEv2 puts
/// its per-QP entropy in the UDP source port); other frames hash their MAC addresses.
pub fn flow_hash(frame: &[u8]) -> u64 {
    let mut key = [0u8; 13];
    match ipv4_header(frame) {
        Some(h) => {
            let ip = Ipv4Packet::new_unchecked(&frame[h.start..]);
            key[..4].copy_from_slice(&ip.src_addr());
            key[4..8].copy_from_slice(&ip.dst_addr());
            key[8] = ip.next_header();
            if matches!(ip.next_header(), ip_proto::UDP | ip_proto::TCP) {
                if let Some(ports) = frame.get(h.end..h.end + 4) {
                    key[9..].copy_from_slice(ports);
                }
            }
        }
        None => {
            let n = frame.len().min(12);
            key[..n.min(13)].copy_from_slice(&frame[..n.min(13)]);
        }
    }
    // FNV-1a: stable across runs and platforms, as a switch's hash is.
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Sets an ECN-capable IPv4 packet's ECN field to Congestion Experienced (RFC 3168 §5) and
/// fixes its header checksum. RoCEv2's ICRC masks the field, so the packet stays valid. Returns
/// false for a packet that is not ECN-capable (left as it is).
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let Some(h) = ipv4_header(frame) else {
        return false;
    };
    let mut ip = Ipv4Packet::new_unchecked(&mut frame[h]);
    let tos = ip.dscp_ecn();
    if tos & 0b11 == 0 {
        return false;
    }
    ip.set_dscp_ecn(tos | 0b11);
    ip.fill_checksum();
    debug_assert!(ipv4::HEADER_LEN <= ip.header_len());
    true
}

/// UGAL-L (Kim et al., ISCA '08) at the source's switch: the least-queued shortest path,
/// unless the least-queued path one hop longer costs less in queue × hops by more than the
/// threshold. Elsewhere (and with no longer path) the least-queued shortest path; ties go to
/// the first port, so an idle fabric keeps a flow on one path.
fn adaptive_port(sw: &Switch, ports: &[usize], dst: [u8; 6], src: [u8; 6]) -> usize {
    let least = |ps: &[usize]| ps.iter().copied().min_by_key(|&p| sw.queue_bytes[p]);
    let minimal = least(ports).expect("a route has ports");
    let Some((hops, detours)) = sw.detours.get(&dst).filter(|_| sw.local.contains(&src)) else {
        return minimal;
    };
    let Some(detour) = least(detours) else {
        return minimal;
    };
    let (h_min, h_nm) = (*hops, hops + 1);
    let cost_min = sw.queue_bytes[minimal] * h_min;
    let cost_nm = sw.queue_bytes[detour] * h_nm + sw.params.adaptive_threshold_bytes;
    if cost_min <= cost_nm {
        minimal
    } else {
        detour
    }
}
