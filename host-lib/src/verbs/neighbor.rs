//! The host-stack part a RoCE NIC leaves to its host: answering ARP for the port's IPv4
//! addresses (so a peer such as Linux soft-RoCE can resolve our GID) and resolving a peer's
//! MAC address before a QP is connected to it. It uses a small Ethernet queue set on the same
//! function — an event queue, a CQ, an SQ and a regular RQ — and a receive rule that takes ARP
//! frames (EtherType 0x0806) to that RQ; everything else of the vPort's receive pipeline is
//! left as it was.

use std::time::{Duration, Instant};

use fld_abi::nic::*;
use fld_abi::wire::arp::{self, ArpRepr};
use fld_abi::wire::{ethernet, ethertype};
use fld_driver::nic::{
    CompletionQueue, EventQueue, FlowRule, NicDriver, RecvQueue, RqLayout, RuleFate, SendQueue,
    SendWqe, TableMiss,
};
use fld_driver::{DmaBuffer, DriverError};

/// Receive buffers of the ARP queue and their size.
const SLOTS: usize = 16;
const SLOT_BYTES: usize = 2048;
/// How often a request is repeated while resolving.
const RETRY: Duration = Duration::from_millis(200);

struct ArpPort {
    _eq: EventQueue,
    cq: CompletionQueue,
    sq: SendQueue,
    rq: RecvQueue,
    bufs: DmaBuffer,
    /// Receive WQEs consumed (the next to repost).
    consumed: u32,
}

/// The port's own addresses, what it learnt of its neighbours, and the ARP queue set (made on
/// first use).
#[derive(Default)]
pub struct Neighbors {
    own: Vec<[u8; 4]>,
    cache: Vec<([u8; 4], [u8; 6])>,
    port: Option<ArpPort>,
}

impl Neighbors {
    pub(super) fn add_own(&mut self, ip: [u8; 4]) {
        if !self.own.contains(&ip) {
            self.own.push(ip);
        }
    }

    pub(super) fn learn(&mut self, ip: [u8; 4], mac: [u8; 6]) {
        match self.cache.iter_mut().find(|e| e.0 == ip) {
            Some(e) => e.1 = mac,
            None => self.cache.push((ip, mac)),
        }
    }

    fn cached(&self, ip: [u8; 4]) -> Option<[u8; 6]> {
        self.cache.iter().find(|e| e.0 == ip).map(|e| e.1)
    }

    fn port(&mut self, nic: &mut NicDriver) -> Result<&mut ArpPort, DriverError> {
        if self.port.is_none() {
            let eq = nic.create_eq(4, 0)?;
            let cq = nic.create_cq(&eq, 6)?;
            let sq = nic.create_sq(&cq, 4, true)?;
            let mut rq = nic.create_rq(&cq, 4, RqLayout::Regular)?;
            let bufs = nic.device().dma_alloc(SLOTS * SLOT_BYTES)?;
            for i in 0..SLOTS {
                rq.post(bufs.iova() + (i * SLOT_BYTES) as u64, SLOT_BYTES as u32);
            }
            rq.ring_doorbell();
            let root = nic.create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Default)?;
            let (mut mask, mut value) = (FlowMatch::default(), FlowMatch::default());
            mask.ethertype = [0xff; 2];
            value.ethertype = ethertype::ARP.to_be_bytes();
            nic.create_flow_entry(
                root,
                &FlowRule {
                    mask,
                    value,
                    ..FlowRule::any(RuleFate::Rq(rq.rqn))
                },
            )?;
            nic.set_root(TABLE_KIND_NIC_RX, Some(root))?;
            self.port = Some(ArpPort {
                _eq: eq,
                cq,
                sq,
                rq,
                bufs,
                consumed: 0,
            });
        }
        Ok(self.port.as_mut().expect("made above"))
    }

    /// Sends an ARP frame.
    fn send(port: &mut ArpPort, frame: &[u8]) -> Result<(), DriverError> {
        port.sq.post(&SendWqe {
            inline_header: frame,
            ..Default::default()
        })?;
        port.sq.ring_doorbell();
        Ok(())
    }

    /// Handles every ARP frame received so far: requests for our addresses are answered,
    /// senders are learnt.
    pub(super) fn serve(&mut self, nic: &mut NicDriver) -> Result<(), DriverError> {
        let mac = nic.mac();
        nic.device().run_device();
        let own = self.own.clone();
        let mut learnt = Vec::new();
        let port = self.port(nic)?;
        while let Some(c) = port.cq.poll() {
            if c.is_send() {
                continue;
            }
            let slot = (port.consumed as usize) % SLOTS;
            port.consumed = port.consumed.wrapping_add(1);
            let len = (c.byte_count.get() as usize).min(SLOT_BYTES);
            let mut f = vec![0u8; len];
            port.bufs.read(slot * SLOT_BYTES, &mut f);
            port.rq.post(
                port.bufs.iova() + (slot * SLOT_BYTES) as u64,
                SLOT_BYTES as u32,
            );
            port.rq.ring_doorbell();
            let Some(a) = f
                .get(ethernet::HEADER_LEN..)
                .and_then(|b| ArpRepr::parse(b).ok())
            else {
                continue;
            };
            learnt.push((a.sender_ip, a.sender_mac));
            if a.operation == arp::OP_REQUEST && own.contains(&a.target_ip) {
                Self::send(port, &a.reply(mac).frame())?;
            }
        }
        port.cq.update_ci();
        for (ip, m) in learnt {
            if ip != [0; 4] {
                self.learn(ip, m);
            }
        }
        Ok(())
    }

    /// The MAC address of `ip`: cached, or asked for by ARP until `timeout`.
    pub(super) fn resolve(
        &mut self,
        nic: &mut NicDriver,
        ip: [u8; 4],
        timeout: Duration,
    ) -> Option<[u8; 6]> {
        if let Some(m) = self.cached(ip) {
            return Some(m);
        }
        let request = ArpRepr {
            operation: arp::OP_REQUEST,
            sender_mac: nic.mac(),
            sender_ip: self.own.first().copied().unwrap_or_default(),
            target_mac: [0; 6],
            target_ip: ip,
        };
        let start = Instant::now();
        let mut last: Option<Instant> = None;
        while start.elapsed() < timeout {
            if last.is_none_or(|t| t.elapsed() >= RETRY) {
                let port = self.port(nic).ok()?;
                Self::send(port, &request.frame()).ok()?;
                last = Some(Instant::now());
            }
            self.serve(nic).ok()?;
            if let Some(m) = self.cached(ip) {
                return Some(m);
            }
            std::thread::yield_now();
        }
        None
    }
}
