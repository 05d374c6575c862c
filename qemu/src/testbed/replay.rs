//! Replays captured frames through the card: each frame enters on the uplink (or is sent by a
//! host vPort), the eSwitch steers the accelerator's share of the traffic to FLD, the accelerator
//! model processes it, its output resumes in the NIC, and whatever reaches the host's receive
//! queues is collected. It is how users check their traffic against an accelerator.
//!
//! Steering per accelerator (the eSwitch root; everything else goes straight to the host):
//! echo: all traffic; zuc: UDP to the service port; defrag: IPv4 fragments (`ip_frag`); iot:
//! the CoAP port behind the fail-closed guard of `fld_host::guard` — frames with header errors
//! dropped by reason, UDP fragments reassembled by the defrag accelerator (or refused) and
//! authenticated whole, UDP to the CoAP port tagged per tenant by source address. With VXLAN
//! decapsulation configured, tunnelled frames lose their outer headers first and are classified
//! (and delivered) by their inner headers.

use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;

use fld_abi::fld::Stat;
use fld_abi::wire::coap::COAP_PORT;
use fld_abi::wire::zuc::ZUC_UDP_PORT;
use fld_device::accel::defrag::Config as DefragConfig;
use fld_device::accel::defrag_accel::DefragAccel;
use fld_device::accel::iot::KeyTable;
use fld_device::accel::iot_accel::IotAccel;
use fld_device::accel::mux::AcceleratorMux;
use fld_device::accel::zuc_accel::ZucAccel;
use fld_device::accel::{Accelerator, Echo};
use fld_device::fld::memory_model::MemoryParams;
use fld_device::wire::ReplayWire;
use fld_driver::DriverError;
use fld_host::guard::{FragmentPolicy, ServiceGuard, UdpService, REASSEMBLY_CONTEXT};
use fld_host::mempool::Mbuf;
use fld_host::FlowItem;

use super::{FldEchoSetup, VxlanDecap};

/// Which accelerator model sits behind FLD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayAccel {
    Echo,
    Zuc,
    Defrag,
    Iot,
}

/// Where captured frames enter the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inject {
    /// From the network, on the uplink vPort.
    Uplink,
    /// Sent by the host function whose queues are also captured.
    Host,
}

/// An IoT tenant: its traffic (by IPv4 source) is tagged with `context`, whose key verifies it.
#[derive(Clone, Debug)]
pub struct ReplayTenant {
    pub context: u16,
    pub src: Ipv4Addr,
    pub key: Vec<u8>,
    /// Its fragments are dropped (counted) instead of reassembled.
    pub refuse_fragments: bool,
}

#[derive(Clone, Debug)]
pub struct ReplayConfig {
    pub accel: ReplayAccel,
    pub inject: Inject,
    /// Frames entering per NIC poll.
    pub burst: usize,
    /// RSS queues on the host function.
    pub host_queues: u16,
    /// IoT: tenants and their keys (context IDs 1..=65535).
    pub tenants: Vec<ReplayTenant>,
    /// IoT: the time in seconds since the epoch for `exp`/`nbf`.
    pub now_s: u64,
    /// IoT: fragments of the CoAP service reassembled (by the defrag accelerator, with the
    /// `defrag` limits) or refused.
    pub iot_fragments: FragmentPolicy,
    /// Defrag: reassembly parameters.
    pub defrag: DefragConfig,
    /// VXLAN decapsulation in the eSwitch before the accelerator's share is chosen.
    pub vxlan: Option<VxlanDecap>,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            accel: ReplayAccel::Echo,
            inject: Inject::Uplink,
            burst: 32,
            host_queues: 4,
            tenants: Vec::new(),
            now_s: 0,
            iot_fragments: FragmentPolicy::Reassemble,
            defrag: DefragConfig::default(),
            vxlan: None,
        }
    }
}

/// What the replay produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// Frames that reached the host, in the order the host received them, with their queue.
    pub delivered: Vec<(u16, Vec<u8>)>,
    pub injected: u64,
    /// Frames the card sent out of the uplink (discarded).
    pub uplink_transmitted: u64,
    /// Frames that crossed into FLD, and those the accelerator could not take.
    pub fld_rx: u64,
    pub fld_accelerator_drops: u64,
    pub accelerator: &'static str,
    pub counters: Vec<(&'static str, u64)>,
    /// The card's own counters: the guard's rules by reason (IoT), then the host port's.
    pub card_counters: Vec<(&'static str, u64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Device(#[from] DriverError),
    #[error("tenant context {0} is reserved (0 and 65535) or used twice")]
    BadTenant(u16),
}

/// Runs `frames` through the card as `cfg` describes.
pub fn replay(frames: Vec<Vec<u8>>, cfg: &ReplayConfig) -> Result<ReplayOutcome, ReplayError> {
    Replayer::new(cfg)?.run(frames)
}

/// The accelerator model `cfg` puts behind FLD, fresh, and the flow items that steer its share
/// of the traffic to it.
fn accelerator(cfg: &ReplayConfig) -> Result<(Box<dyn Accelerator>, Vec<FlowItem>), ReplayError> {
    let udp_to = |port| FlowItem::Udp {
        src_port: None,
        dst_port: Some(port),
    };
    Ok(match cfg.accel {
        ReplayAccel::Echo => (Box::new(Echo::new(0, 256)), vec![]),
        ReplayAccel::Zuc => (
            Box::new(ZucAccel::new(ZUC_UDP_PORT, 0)),
            vec![udp_to(ZUC_UDP_PORT)],
        ),
        ReplayAccel::Defrag => (
            Box::new(DefragAccel::new(cfg.defrag, 0)),
            vec![FlowItem::Ipv4Fragment(true)],
        ),
        ReplayAccel::Iot => {
            // As many slots as the highest tenant context needs: a context beyond the table has
            // no key, as an empty slot has none.
            let slots = cfg.tenants.iter().map(|t| usize::from(t.context) + 1).max();
            let mut keys = KeyTable::new(slots.unwrap_or(1));
            for t in &cfg.tenants {
                let reserved = t.context == 0 || t.context == REASSEMBLY_CONTEXT;
                if reserved || keys.get(t.context).is_some() {
                    return Err(ReplayError::BadTenant(t.context));
                }
                keys.set(t.context, &t.key);
            }
            let (iot, handle) = IotAccel::new(keys, 0);
            handle.now_s.store(cfg.now_s, Ordering::Relaxed);
            let chain = AcceleratorMux::new("defrag+iot-auth")
                .with(
                    REASSEMBLY_CONTEXT..=REASSEMBLY_CONTEXT,
                    Box::new(DefragAccel::new(cfg.defrag, 0)),
                )
                .with(0..=REASSEMBLY_CONTEXT - 1, Box::new(iot));
            (Box::new(chain), vec![udp_to(COAP_PORT)])
        }
    })
}

/// The card brought up and steered for one [`ReplayConfig`], kept for any number of replays:
/// bringing a card up (FLD's tables, the drivers' rings, the eSwitch rules) costs milliseconds,
/// a replay of a few frames microseconds. Each [`Replayer::run`] starts from a fresh accelerator
/// model (no reassembly or flow state carried over) and an idle card with empty queues, and
/// reports its own counts (the card's counters as differences).
pub struct Replayer {
    setup: FldEchoSetup,
    cfg: ReplayConfig,
    queues: u16,
    guard: Option<ServiceGuard>,
    rx: Vec<Mbuf>,
}

impl Replayer {
    /// Brings the card up for `cfg`: FLD-E with the accelerator's share steered to it (for IoT
    /// behind the fail-closed guard, tenants registered) and everything else to the host.
    pub fn new(cfg: &ReplayConfig) -> Result<Self, ReplayError> {
        let queues = cfg.host_queues.clamp(1, 64);
        let mut s = FldEchoSetup::build_with(9000, 1, MemoryParams::table_2a(), queues)?;
        // The model itself comes with each run; here, the checks of `cfg` and the steering.
        let (_, first) = accelerator(cfg)?;

        // eSwitch root: the accelerator's share to FLD's vPort, the rest to the host. What the
        // accelerator returns resumes at `back`, which delivers to the host.
        let mut guard = None;
        let back = if cfg.accel == ReplayAccel::Iot {
            let service = UdpService {
                fragments: cfg.iot_fragments,
                refuse_fragments_from: cfg
                    .tenants
                    .iter()
                    .filter(|t| t.refuse_fragments)
                    .map(|t| t.src)
                    .collect(),
                ..UdpService::port(COAP_PORT)
            };
            let (back, installed) = s.steer_guarded(cfg.vxlan.as_ref(), &service)?;
            guard = Some(installed);
            s.add_tenants(cfg.tenants.iter().map(|t| (t.context, t.src)), back)
                .map_err(|_| ReplayError::BadTenant(0))?;
            back
        } else {
            s.steer_to_accelerator_after(cfg.vxlan.as_ref(), Some(&first))?
        };
        // Everything else FLD receives: context 0, which has no key (IoT drops it as unknown).
        s.flde.accelerate(u16::MAX - 1, &first, 0, Some(back))?;
        Ok(Replayer {
            setup: s,
            cfg: cfg.clone(),
            queues,
            guard,
            rx: Vec::with_capacity(64),
        })
    }

    /// Runs `frames` through the card, from a fresh accelerator model, until the card is idle
    /// and every queue drained.
    pub fn run(&mut self, frames: Vec<Vec<u8>>) -> Result<ReplayOutcome, ReplayError> {
        let (accel, _) = accelerator(&self.cfg)?;
        self.setup.card.fld.set_accelerator(accel);
        let counted_before = self.card_counters()?;
        let fld = self.setup.flde.fld();
        let (rx_before, drops_before) = (
            fld.stat(Stat::RxPackets),
            fld.stat(Stat::RxAcceleratorDrops),
        );
        let mut out = ReplayOutcome {
            injected: frames.len() as u64,
            ..Default::default()
        };
        let mut transmitted = None;
        match self.cfg.inject {
            Inject::Uplink => {
                let wire = ReplayWire::new(frames, self.cfg.burst);
                let remaining = wire.remaining.clone();
                transmitted = Some(wire.transmitted.clone());
                self.setup.card.nic.set_uplink(Box::new(wire));
                while remaining.load(Ordering::Relaxed) > 0 {
                    self.setup.card.poll();
                    self.drain(&mut out)?;
                }
            }
            Inject::Host => {
                let queues = self.queues;
                super::inline_apps::pump(
                    &mut self.setup,
                    &frames,
                    self.cfg.burst,
                    queues,
                    |q, f| out.delivered.push((q, f.data().to_vec())),
                );
            }
        }
        loop {
            self.setup.card.run_until_idle();
            if !self.drain(&mut out)? {
                break;
            }
        }
        out.uplink_transmitted = transmitted.map_or(0, |t| t.load(Ordering::Relaxed));
        let fld = self.setup.flde.fld();
        out.fld_rx = fld.stat(Stat::RxPackets) - rx_before;
        out.fld_accelerator_drops = fld.stat(Stat::RxAcceleratorDrops) - drops_before;
        if let Some((name, counters)) = self.setup.card.fld.accelerator_counters() {
            out.accelerator = name;
            out.counters = counters;
        }
        out.card_counters = self.card_counters()?;
        for ((_, after), (_, before)) in out.card_counters.iter_mut().zip(counted_before) {
            *after = after.wrapping_sub(before);
        }
        Ok(out)
    }

    /// The guard's rules by reason (IoT), then the host port's counters, as the card has them.
    fn card_counters(&mut self) -> Result<Vec<(&'static str, u64)>, ReplayError> {
        let mut counters = match &self.guard {
            Some(guard) => guard.counters(self.setup.flde.nic())?,
            None => Vec::new(),
        };
        counters.extend(self.setup.client.nic_counters()?);
        Ok(counters)
    }

    /// Takes what reached the host's queues; whether there was any.
    fn drain(&mut self, out: &mut ReplayOutcome) -> Result<bool, ReplayError> {
        let pool = self
            .setup
            .client
            .pool()
            .ok_or(DriverError::InvalidArgument("no pool"))?;
        let mut any = false;
        for q in 0..self.queues {
            while self.setup.client.rx_burst(q, &mut self.rx, 64) > 0 {
                any = true;
                out.delivered
                    .extend(self.rx.iter().map(|m| (q, m.data().to_vec())));
                pool.free_bulk(self.rx.drain(..));
            }
        }
        Ok(any)
    }
}
