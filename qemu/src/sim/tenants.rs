//! FlexDriver §8.2.3's performance isolation in virtual time: tenants share an accelerator behind
//! FLD-E that accepts less than they offer. Each tenant's flow (its own IPv4 source) reaches the
//! accelerator through its own `accelerate` rule (`FldE::tenant_accelerate`, §5.4); the
//! accelerator's capacity is its time (`AccelTiming::Rate`), so what it cannot take backs up into
//! FLD's receive buffer and the NIC drops it, in proportion to what each tenant sends. A NIC
//! meter per tenant (`FldE::shape_tenant`) bounds each tenant's share instead. The generator sends
//! each flow at a constant rate and counts each tenant's echoes, checked byte for byte.
//!
//! Left out: the IoT filter's token check itself (the accelerator here echoes; the experiment is
//! about admission, which the paper attributes to the NIC's flow marking and shaping, not to the
//! filter's work).

use fld_device::accel::Echo;
use fld_host::apps::{udp_headers, SERVER_IP};
use fld_host::flde::FldE;
use fld_host::verbs::VerbsError;
use fld_host::{EthDev, FlowItem, Mbuf, Mempool, PortConfig};

use super::card::{AccelTiming, SimHost};
use super::events::{Ps, PS_PER_NS};
use super::workload::Workload;
use super::SimError;

/// Frames one generator step sends at most.
const BURST: usize = 32;
/// The UDP port the tenants' flows go to.
const SERVICE_PORT: u16 = 5683;

/// Tenant `i`'s source address.
fn tenant_ip(i: usize) -> [u8; 4] {
    [10, 9, 0, i as u8 + 1]
}

/// One tenant's flow.
struct Flow {
    /// Time between two of its frames.
    gap: Ps,
    next: Ps,
    sent: u64,
    /// Echoes received after the warm-up, and their bytes.
    received: u64,
    bytes: u64,
}

/// Tenants' flows into one shared, slower accelerator, with or without a meter each.
pub struct TenantShaping {
    client: usize,
    port: Box<EthDev>,
    _flde: Box<FldE>,
    macs: [[u8; 6]; 2],
    size: usize,
    flows: Vec<Flow>,
    warmup: Ps,
    end: Ps,
    mismatches: u64,
    /// The tenant whose admitted rate is this point's figure.
    tenant: usize,
    rx: Vec<Mbuf>,
    tx: Vec<Mbuf>,
    expect: Vec<u8>,
}

/// What a run is given.
pub struct ShapingSetup {
    /// Each tenant's offered rate, Gbit/s of frame bytes.
    pub offered_gbps: Vec<f64>,
    /// What the accelerator takes, Gbit/s.
    pub accel_gbps: f64,
    /// Each tenant's meter, Gbit/s (None: no shaping).
    pub limit_gbps: Option<f64>,
    pub size: usize,
    pub duration_us: u64,
}

impl TenantShaping {
    pub fn new(
        hosts: &mut [SimHost],
        (client, server): (usize, usize),
        setup: &ShapingSetup,
        tenant: usize,
    ) -> Result<Self, SimError> {
        let failed = |e: &dyn std::fmt::Display| SimError::Failed(format!("tenants: {e}"));
        let h = &mut hosts[server];
        let mut flde = FldE::open(h.device(1)?, h.fld_device(), 2).map_err(|e| failed(&e))?;
        h.card.fld.set_accelerator(Box::new(Echo::new(0, 256)));
        h.accel_timing = AccelTiming::Rate(setup.accel_gbps);
        for (i, _) in setup.offered_gbps.iter().enumerate() {
            let owns = FlowItem::Ipv4 {
                src: Some(tenant_ip(i).into()),
                dst: None,
                proto: None,
            };
            let t = flde
                .register_tenant(100 + i as u16, owns)
                .map_err(|e| failed(&e))?;
            if let Some(limit) = setup.limit_gbps {
                let rate = (limit * 1e9 / 8.0) as u64;
                flde.shape_tenant(t, rate, 64 << 10)
                    .map_err(|e| failed(&e))?;
            }
            flde.tenant_accelerate(t, 1000 + i as u16, &[owns], None, None)
                .map_err(|e| failed(&e))?;
        }
        let server_mac = flde.mac();
        let dev = hosts[client].device(1)?;
        let mut port = EthDev::open(dev.clone()).map_err(VerbsError::from)?;
        let pool = Mempool::new(dev.as_ref(), 4096, 2048 + fld_host::mempool::HEADROOM)
            .map_err(VerbsError::from)?;
        port.configure(PortConfig::default(), pool)
            .map_err(VerbsError::from)?;
        let size = setup.size.clamp(64, 1514);
        let flows = setup
            .offered_gbps
            .iter()
            .map(|&g| {
                let gap = ((size * 8) as f64 * 1000.0 / g.max(0.001)).round() as Ps;
                Flow {
                    gap,
                    next: gap,
                    sent: 0,
                    received: 0,
                    bytes: 0,
                }
            })
            .collect();
        let end = setup.duration_us * 1000 * PS_PER_NS;
        Ok(TenantShaping {
            client,
            macs: [port.mac(), server_mac],
            port: Box::new(port),
            _flde: Box::new(flde),
            size,
            flows,
            warmup: end / 5,
            end,
            mismatches: 0,
            tenant,
            rx: Vec::with_capacity(BURST),
            tx: Vec::with_capacity(BURST),
            expect: vec![0; size],
        })
    }

    pub fn routes(&self, server: usize) -> [(usize, [u8; 6]); 2] {
        [(self.client, self.macs[0]), (server, self.macs[1])]
    }

    /// Tenant `i`'s frame `seq`, from `src` to `dst`.
    fn frame(&self, out: &mut [u8], i: usize, seq: u64, (src, dst): ([u8; 6], [u8; 6])) {
        let f = &mut out[..self.size];
        for (k, b) in f.iter_mut().enumerate().skip(42) {
            *b = (seq as u8).wrapping_add(k as u8).wrapping_mul(7);
        }
        f[42..50].copy_from_slice(&seq.to_le_bytes());
        let h = udp_headers(
            src,
            dst,
            tenant_ip(i),
            SERVER_IP,
            2000,
            SERVICE_PORT,
            seq as u16,
        );
        h.emit(f, true);
    }

    /// Takes the echoes that arrived, per tenant.
    fn take_echoes(&mut self, t: Ps) -> usize {
        let n = self.port.rx_burst(0, &mut self.rx, BURST);
        let pool = self.port.pool().expect("configured port");
        for m in std::mem::take(&mut self.rx) {
            let d = m.data();
            let tenant = (d.len() >= 30 && d[26..29] == tenant_ip(0)[..3])
                .then(|| d[29] as usize - 1)
                .filter(|&i| i < self.flows.len());
            let seq = d
                .get(42..50)
                .map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8")));
            let ok = tenant.is_some_and(|i| {
                let mut expect = std::mem::take(&mut self.expect);
                self.frame(&mut expect, i, seq, (self.macs[1], self.macs[0]));
                let same = d == &expect[..self.size];
                self.expect = expect;
                same
            });
            match (ok, tenant) {
                (true, Some(i)) if t >= self.warmup => {
                    self.flows[i].received += 1;
                    self.flows[i].bytes += d.len() as u64;
                }
                (true, _) => {}
                _ => self.mismatches += 1,
            }
            pool.free(m);
        }
        n
    }

    /// Sends every frame due by `t`, a burst at most; returns when the next is due.
    fn send_due(&mut self, h: &mut SimHost, t: Ps) -> Result<Option<Ps>, SimError> {
        let pool = self.port.pool().expect("configured port");
        let mut due = Vec::with_capacity(BURST);
        while due.len() < BURST {
            let Some((i, f)) = self
                .flows
                .iter()
                .enumerate()
                .filter(|(_, f)| f.next <= t && f.next < self.end)
                .min_by_key(|(_, f)| f.next)
            else {
                break;
            };
            due.push((i, f.sent));
            let f = &mut self.flows[i];
            f.sent += 1;
            f.next += f.gap;
        }
        if !due.is_empty() {
            if pool.alloc_bulk(&mut self.tx, due.len()) != due.len() {
                return Err(SimError::Failed("generator mempool empty".into()));
            }
            let mut tx = std::mem::take(&mut self.tx);
            for (m, &(i, seq)) in tx.iter_mut().zip(&due) {
                self.frame(m.set_len(self.size), i, seq, (self.macs[0], self.macs[1]));
            }
            let n = self.port.tx_burst(0, &mut tx);
            pool.free_bulk(tx.drain(..));
            self.tx = tx;
            h.cpu_post(n as u64);
        }
        Ok(self
            .flows
            .iter()
            .map(|f| f.next)
            .filter(|&n| n < self.end)
            .min())
    }
}

impl Workload for TenantShaping {
    fn starters(&self) -> Vec<usize> {
        vec![self.client]
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        self.take_echoes(t);
        let next = self.send_due(h, t)?;
        Ok(match next {
            Some(n) => Some(n.max(h.cpu_free)),
            // Sending is over: look again until the end, for the last echoes.
            None if t < self.end => Some(self.end),
            None => None,
        })
    }

    fn finished(&self) -> bool {
        self.flows.iter().all(|f| f.next >= self.end)
    }

    fn waits_for_core(&self) -> bool {
        true
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let secs = (self.end - self.warmup) as f64 / 1e12;
        let gbps = |f: &Flow| f.bytes as f64 * 8.0 / secs / 1e9;
        let f = &self.flows[self.tenant];
        let offered = (self.size * 8) as f64 / (f.gap as f64 / 1e12) / 1e9;
        vec![
            ("gbps", gbps(f)),
            ("offered_gbps", offered),
            ("all_gbps", self.flows.iter().map(gbps).sum()),
            ("mismatches", self.mismatches as f64),
        ]
    }
}
