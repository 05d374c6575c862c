//! A simulated machine: the emulated card (the same model as every other runner) in host memory
//! of its own, its uplink plugged into the simulated network, and the timing model the runner
//! charges for each engine run.
//!
//! The card's engine runs in batches ([`fld_device::card::Card::poll`]). After each batch the
//! runner reads what the batch did from the model's own counters — TLPs and bytes on the card's
//! PCIe link to the host (the fabric's root-port counters), DMA read operations, frames sent and
//! received, QP-context and translation-cache misses — and turns them into time:
//!
//! * the batch occupies the engine for `max(PCIe transfer time, packets x packet_ns)` plus one
//!   read latency per cache miss (a miss stalls the pipeline while the context or translation
//!   crosses PCIe);
//! * its frames leave after the stalls, the batch's dependent DMA reads (reads per packet, each
//!   one read latency: a WQE fetch, then the payload — a WQE that came by MMIO is no read) and
//!   the NIC's one-way latency, spaced evenly over the batch;
//! * its writes to host memory (payloads, CQEs) land one write latency after the batch ends,
//!   when the host's application is woken to look.
//!
//! Reads the engine issues ahead of need — receive WQEs read after their doorbell — delay no
//! packet: they count on the link, not as dependent reads.
//!
//! FLD (FlexDriver §5) is a second engine on the card, timed apart ([`SimHost::run_fld`]): the
//! NIC reaches it peer to peer over FLD's own PCIe link (the fabric counts those TLPs on FLD's
//! function, and the reads FLD served), so a NIC batch that touches FLD is charged FLD's link
//! rate and, per dependent read of FLD's BAR (a generated WQE, then its data), FLD's read
//! round trip; what the NIC writes into FLD (packets, CQEs) lands one FLD write latency after
//! the batch, and FLD's step runs then. FLD's step costs its data beats and pipeline cycles at
//! its clock; its doorbells reach the NIC one write latency after the step.
//!
//! Left out: overlap between consecutive batches (a batch starts when the previous one ended),
//! interrupts (applications poll), the spread of FLD's own latencies (no jitter).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use fld_abi::fld::Stat as FldStat;
use fld_device::card::{Card, CardConfig};
use fld_device::fabric::{TlpStats, HOST};
use fld_device::nic::NicConfig;
use fld_device::pcie::FunctionId;
use fld_device::wire::Wire;
use fld_driver::inprocess::{InProcessDevice, InProcessHost};
use fld_host::verbs::{Context, VerbsError};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;

use super::events::{Ps, PS_PER_NS};
use super::network::FramePool;
use super::params::{serialization_ps, FldParams, HostParams, NicParams, PcieParams, ZucParams};

/// The card's end of its uplink cable: frames the network delivered wait in `inbox` until the
/// engine takes them; frames the engine sends collect in `outbox` until the runner puts them on
/// the line.
pub struct Port {
    pub inbox: VecDeque<Vec<u8>>,
    pub outbox: Vec<Vec<u8>>,
    /// Frames the engine took from `inbox` since the runner last looked.
    pub received: u64,
    pool: FramePool,
}

struct PortWire(Arc<Mutex<Port>>);

impl Wire for PortWire {
    fn transmit(&mut self, frame: &[u8]) {
        let mut p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let b = p.pool.take(frame);
        p.outbox.push(b);
    }
    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        let mut p = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let f = p.inbox.pop_front()?;
        p.received += 1;
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        p.pool.give(f);
        Some(n)
    }
}

/// What the timing model charged a host's card over a run.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CardTiming {
    /// Engine batches that did work.
    pub batches: u64,
    pub frames_sent: u64,
    pub frames_received: u64,
    /// TLP bytes (headers included) card to host and host to card.
    pub pcie_bytes_to_host: u64,
    pub pcie_bytes_from_host: u64,
    pub dma_reads: u64,
    pub qp_cache_hits: u64,
    pub qp_cache_misses: u64,
    pub mtt_cache_hits: u64,
    pub mtt_cache_misses: u64,
    /// Time the engine was busy, and the part of it spent stalled on cache misses, ns.
    pub busy_ns: u64,
    pub stall_ns: u64,
    /// The reorder unit (LEFT §3.2): out-of-order packets recorded in a bitmap cache, by a
    /// pool walk, or after a swap into a cache; its stall beyond the per-packet budget, ns.
    pub reorder_cache: u64,
    pub reorder_pool: u64,
    pub reorder_swaps: u64,
    pub reorder_stall_ns: u64,
    /// Packets ahead the reorder unit had no room for (dropped, RNR NAKed; §3.5).
    pub reorder_refused: u64,
    /// RC requests that arrived ahead of the PSN expected (QUERY_RDMA_COUNTERS
    /// `rx_out_of_order`), and all the RoCE packets received.
    pub rx_out_of_order: u64,
    pub roce_packets_received: u64,
    /// FLD: steps that did work, TLP bytes on its link (NIC to FLD and FLD to NIC), NIC reads
    /// it served, packets it gave the accelerator and sent for it, and its busy time, ns.
    #[serde(skip_serializing_if = "is_zero")]
    pub fld_steps: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub fld_pcie_bytes_in: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub fld_pcie_bytes_out: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub fld_reads_served: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub fld_rx_packets: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub fld_tx_packets: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub fld_busy_ns: u64,
    /// An RTL accelerator's working time (its cycles at its clock), ns.
    #[serde(skip_serializing_if = "is_zero")]
    pub accel_busy_ns: u64,
    /// Times the operating system took the application's core, and the time it kept it, ns.
    #[serde(skip_serializing_if = "is_zero")]
    pub interruptions: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub interrupted_ns: u64,
}

/// Keeps the FLD and interference counters out of the results of runs that have neither, so
/// those results stay byte-identical to the runs before FLD was timed.
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The counters a batch is measured against.
#[derive(Clone, Copy, Default)]
struct Snapshot {
    host_link: TlpStats,
    reads: u64,
    /// Reads of receive WQEs ahead of their frames.
    reads_ahead: u64,
    qp: (u64, u64),
    mtt: (u64, u64),
    /// Time the receive pipeline waited on the reorder unit's bitmaps (LEFT §4.2), ns.
    reorder_ns: u64,
    /// FLD's link, and the NIC reads of FLD's BAR it completed.
    fld_link: TlpStats,
    fld_reads: u64,
    /// Frames one host vPort sent to another (FLD's included) through the eSwitch.
    loopback: u64,
}

/// FLD's statistics a step is measured by.
#[derive(Clone, Copy, Default)]
struct FldSnapshot {
    rx_packets: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
    completions: u64,
    /// An RTL accelerator's working cycles (its `busy_cycles` counter), or the ZUC
    /// accelerator's requests and bits processed.
    accel_cycles: u64,
    accel_requests: u64,
    accel_bits: u64,
}

/// How the accelerator behind FLD is timed.
#[derive(Clone, Debug, Default)]
pub enum AccelTiming {
    /// Within FLD's step (the Rust echo).
    #[default]
    None,
    /// A Verilog design: its working cycles at its clock, MHz.
    Rtl(f64),
    /// The ZUC accelerator's modules (FlexDriver §7).
    Zuc(ZucParams),
    /// An accelerator that takes `Gbit/s` of what FLD delivers to it (FlexDriver §8.2.3's
    /// "configured to accept only 12 Gbps").
    Rate(f64),
    /// An accelerator that takes that many million packets a second, whatever their size.
    Packets(f64),
}

/// What one FLD step did and when its effects appear.
pub struct FldStep {
    pub work: bool,
    /// When FLD can start its next step.
    pub free: Ps,
    /// When the step's doorbells reach the NIC (None: it did nothing).
    pub nic_sees: Option<Ps>,
}

/// The operating system's interruptions of the application's core: a seeded Poisson process.
struct Interference {
    rng: SmallRng,
    gaps: Option<Exp<f64>>,
    duration: Ps,
    next: Ps,
    /// The end of the latest interruption begun.
    until: Ps,
}

impl Interference {
    fn new(p: &HostParams, seed: u64) -> Self {
        let gaps = (p.interference_hz > 0.0 && p.interference_ns > 0)
            .then(|| Exp::new(p.interference_hz / 1e12).ok())
            .flatten();
        let mut i = Interference {
            rng: SmallRng::seed_from_u64(seed),
            gaps,
            duration: p.interference_ns * PS_PER_NS,
            next: Ps::MAX,
            until: 0,
        };
        i.next = i.gap();
        i
    }

    fn gap(&mut self) -> Ps {
        match &self.gaps {
            Some(e) => e.sample(&mut self.rng).ceil() as Ps,
            None => Ps::MAX,
        }
    }

    /// When a step wanting the core at `t` gets it, and the interruptions begun by then.
    fn core_free(&mut self, t: Ps) -> (Ps, u64) {
        let mut begun = 0;
        while self.next <= t {
            self.until = self.until.max(self.next + self.duration);
            self.next = self.next.saturating_add(self.gap());
            begun += 1;
        }
        (t.max(self.until), begun)
    }
}

impl SimHost {
    /// What the reorder unit did over the run, and how much arrived out of order, into the
    /// timing report.
    pub fn note_reorder(&mut self) {
        if let Ok(c) = self.ctx.driver().query_rdma_counters() {
            self.timing.rx_out_of_order = c.rx_out_of_order.get();
            self.timing.roce_packets_received = c.rx_packets.get();
        }
        let k = self.card.nic.reorder_counters();
        let t = &mut self.timing;
        (
            t.reorder_cache,
            t.reorder_pool,
            t.reorder_swaps,
            t.reorder_stall_ns,
            t.reorder_refused,
        ) = (k.cache, k.pool, k.swaps, k.stall_ns, k.refused);
    }
}

/// What one engine batch did and when its effects appear.
pub struct Batch {
    /// Whether the engine did anything.
    pub work: bool,
    /// When the engine can start its next batch.
    pub engine_free: Ps,
    /// The frames the batch sent.
    pub frames: Frames,
    /// When the batch's writes land in host memory (None: it wrote nothing there).
    pub host_sees: Option<Ps>,
    /// When the batch's writes into FLD (packets, CQEs) land there (None: it wrote none).
    pub fld_sees: Option<Ps>,
    /// The earliest transport timer of the card, if one is armed.
    pub next_timer: Option<Ps>,
}

/// The frames of a batch: the k-th of n is ready for the line at `first + spread * (k + 1) / n`.
pub struct Frames {
    pub frames: Vec<Vec<u8>>,
    pub first: Ps,
    pub spread: Ps,
}

impl Frames {
    /// Each frame with the time it is ready.
    pub fn drain(&mut self) -> impl Iterator<Item = (Ps, Vec<u8>)> + '_ {
        let n = self.frames.len() as u64;
        let (first, spread) = (self.first, self.spread);
        self.frames
            .drain(..)
            .enumerate()
            .map(move |(k, f)| (first + spread * (k as u64 + 1) / n, f))
    }
}

/// One machine of the simulation.
pub struct SimHost {
    pub name: String,
    pub card: Arc<Card>,
    host: Arc<InProcessHost>,
    pub ctx: Context,
    port: Arc<Mutex<Port>>,
    pub mac: [u8; 6],
    pub ip: [u8; 4],
    pub nic: NicParams,
    pub pcie: PcieParams,
    pub cpu: HostParams,
    pub fld: FldParams,
    /// The FLD function's place on the card's fabric.
    pub fld_id: FunctionId,
    functions: Vec<u16>,
    last: Snapshot,
    fld_last: FldSnapshot,
    /// When FLD may step again, and its pending wake-up.
    pub fld_free: Ps,
    /// When FLD's PCIe link has carried every transfer so far, into FLD and out of it (each
    /// direction its own lanes).
    fld_link_free: (Ps, Ps),
    pub fld_wake: Option<Ps>,
    /// How the accelerator behind FLD is timed.
    pub accel_timing: AccelTiming,
    interference: Interference,
    pub timing: CardTiming,
    /// When the engine may run again.
    pub engine_free: Ps,
    /// The pending engine wake-up and application wake-up already scheduled.
    pub nic_wake: Option<Ps>,
    pub app_wake: Option<Ps>,
    /// When the host CPU is done with what the application did so far.
    pub cpu_free: Ps,
    /// When every host-memory write of the batches run so far has landed, and whether the
    /// application's pending wake-up was already put off to that time once.
    pub writes_visible: Ps,
    pub app_deferred: bool,
    /// When the application asked to run again with work left (more to post): that wake is
    /// its own CPU continuing, not a look at memory, and waits for no write.
    pub app_continues_at: Option<Ps>,
    /// When the last doorbell of the application's current step was rung.
    pub doorbell: Option<Ps>,
    /// The emptied frame list of the previous batch, reused.
    outbox_spare: Vec<Vec<u8>>,
}

impl SimHost {
    /// A machine with card number `index` (its MAC addresses derive from it), `memory_bytes` of
    /// host memory, and IPv4 address `ip` on its first NIC function.
    pub fn new(
        name: &str,
        index: u16,
        ip: [u8; 4],
        memory_bytes: usize,
        (nic, pcie, cpu, fld): (NicParams, PcieParams, HostParams, FldParams),
        pool: FramePool,
        (host_functions, seed): (u16, u64),
    ) -> Result<Self, VerbsError> {
        let card = Card::new(CardConfig {
            nic: NicConfig {
                host_functions,
                card_id: index,
                qp_cache_entries: nic.qp_cache_entries,
                mtt_cache_entries: nic.mtt_cache_entries,
                qp_context_bytes: nic.qp_context_bytes,
                receiver: fld_device::nic::reorder::ReceiverMode::from_series(&nic.receiver)
                    .ok_or(VerbsError::Invalid(
                        "nic.receiver: gbn, irn, melo+, left-, left or ideal",
                    ))?,
                reorder_bdp: nic.reorder_bdp,
                reorder_budget_ns: nic.reorder_budget_ns,
                qp_budget: nic.qp_budget,
                sq_budget: nic.sq_budget,
                ..Default::default()
            },
            ..Default::default()
        });
        card.nic.set_clock(Some(0));
        let host = InProcessHost::new(card.clone(), memory_bytes)?;
        host.step_by_runner();
        let fid = card
            .nic
            .function_id(0)
            .ok_or(VerbsError::Invalid("the card has no NIC function"))?;
        let mut ctx = Context::open(host.device(fid))?;
        ctx.add_ip(std::net::Ipv4Addr::from(ip).into())?;
        let port = Arc::new(Mutex::new(Port {
            inbox: VecDeque::new(),
            outbox: Vec::new(),
            received: 0,
            pool,
        }));
        card.nic.set_uplink(Box::new(PortWire(port.clone())));
        let fld_id = card.fld.id();
        let functions = (0..card.fabric.function_count() as u16)
            .filter(|&f| f != fld_id)
            .collect();
        let mac = ctx.mac();
        let interference = Interference::new(&cpu, seed ^ u64::from(index));
        let mut h = SimHost {
            name: name.to_string(),
            card,
            host,
            ctx,
            port,
            mac,
            ip,
            nic,
            pcie,
            cpu,
            fld,
            fld_id,
            functions,
            last: Snapshot::default(),
            fld_last: FldSnapshot::default(),
            fld_free: 0,
            fld_link_free: (0, 0),
            fld_wake: None,
            accel_timing: AccelTiming::None,
            interference,
            timing: CardTiming::default(),
            engine_free: 0,
            nic_wake: None,
            app_wake: None,
            cpu_free: 0,
            writes_visible: 0,
            app_deferred: false,
            app_continues_at: None,
            doorbell: None,
            outbox_spare: Vec::new(),
        };
        h.last = h.snapshot();
        h.fld_last = h.fld_snapshot();
        Ok(h)
    }

    fn fld_snapshot(&self) -> FldSnapshot {
        let s = |k| self.card.fld.stat(k);
        let counters = match self.accel_timing {
            AccelTiming::None => Vec::new(),
            _ => self
                .card
                .fld
                .accelerator_counters()
                .map(|c| c.1)
                .unwrap_or_default(),
        };
        let counter = |name: &str| counters.iter().find(|(n, _)| *n == name).map_or(0, |c| c.1);
        FldSnapshot {
            accel_cycles: counter("busy_cycles"),
            accel_requests: counter("requests"),
            accel_bits: counter("bits_processed"),
            rx_packets: s(FldStat::RxPackets),
            rx_bytes: s(FldStat::RxBytes),
            tx_packets: s(FldStat::TxPackets),
            tx_bytes: s(FldStat::TxBytes),
            completions: s(FldStat::TxCompletions),
        }
    }

    /// The driver's handle on the FLD function.
    pub fn fld_device(&self) -> Arc<InProcessDevice> {
        self.host.device(self.fld_id)
    }

    fn snapshot(&self) -> Snapshot {
        let f = &self.card.fabric;
        let (qp, mtt) = self.card.nic.cache_counters();
        Snapshot {
            host_link: f.stats(HOST),
            reads: self.functions.iter().map(|&id| f.read_operations(id)).sum(),
            // Receive WQEs and translations read ahead of need delay no packet.
            reads_ahead: self.card.nic.rx_prefetch_counters().reads + mtt.fills,
            qp: (qp.hits, qp.misses),
            mtt: (mtt.hits, mtt.misses),
            reorder_ns: self.card.nic.reorder_counters().stall_ns,
            fld_link: f.stats(self.fld_id),
            fld_reads: f.reads_served(self.fld_id),
            loopback: self.card.nic.stats().loopback_frames,
        }
    }

    /// The driver's handle on NIC function `index` (0 carries the verbs context).
    pub fn device(&self, index: u16) -> Result<Arc<InProcessDevice>, VerbsError> {
        let fid = self
            .card
            .nic
            .function_id(index)
            .ok_or(VerbsError::Invalid("the card has no such NIC function"))?;
        Ok(self.host.device(fid))
    }

    /// Forgets what set-up cost: the counters a run is measured from start here.
    pub fn settle(&mut self) {
        self.last = self.snapshot();
        self.fld_last = self.fld_snapshot();
        self.timing = CardTiming::default();
    }

    /// A frame arrived from the network.
    pub fn deliver(&mut self, frame: Vec<u8>) {
        self.port
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .inbox
            .push_back(frame);
    }

    /// Runs one engine batch at `now` and charges it (see the module comment).
    pub fn run_engine(&mut self, now: Ps) -> Batch {
        self.card.nic.set_clock(Some(now / PS_PER_NS));
        let work = self.card.nic.poll() > 0;
        let (sent, received) = {
            let mut p = self.port.lock().unwrap_or_else(|e| e.into_inner());
            let spare = std::mem::take(&mut self.outbox_spare);
            (
                std::mem::replace(&mut p.outbox, spare),
                std::mem::take(&mut p.received),
            )
        };
        let s = self.snapshot();
        let link = s.host_link.since(&self.last.host_link);
        let reads = s.reads - self.last.reads;
        let reads_ahead = s.reads_ahead - self.last.reads_ahead;
        let qp_misses = s.qp.1 - self.last.qp.1;
        let mtt_misses = s.mtt.1 - self.last.mtt.1;
        let reorder = (s.reorder_ns - self.last.reorder_ns) * PS_PER_NS;
        let fld_link = s.fld_link.since(&self.last.fld_link);
        let fld_reads = s.fld_reads - self.last.fld_reads;
        // A frame looped between host vPorts (a local generator and FLD-E, say) crosses the
        // transmit and the receive pipeline without touching the wire.
        let loopback = s.loopback - self.last.loopback;
        let t = &mut self.timing;
        t.qp_cache_hits += s.qp.0 - self.last.qp.0;
        t.qp_cache_misses += qp_misses;
        t.mtt_cache_hits += s.mtt.0 - self.last.mtt.0;
        t.mtt_cache_misses += mtt_misses;
        self.last = s;

        let read_latency = self.pcie.read_latency_ns * PS_PER_NS;
        // Root-port view: "down" is what the card sends to the host (writes, read requests),
        // "up" what the host sends to the card (read completions, doorbells).
        let to_host = link.down_header_bytes + link.down_payload_bytes;
        let from_host = link.up_header_bytes + link.up_payload_bytes;
        let pcie = serialization_ps(to_host.max(from_host), self.pcie.gbps);
        // FLD's link, seen from FLD: "down" is what the NIC sends it (packets, CQEs, read
        // requests), "up" what it returns (read completions: WQEs and data; its doorbells).
        let fld_in = fld_link.down_header_bytes + fld_link.down_payload_bytes;
        let fld_out = fld_link.up_header_bytes + fld_link.up_payload_bytes;
        let fld_in_ps = serialization_ps(fld_in, self.fld.pcie_gbps);
        let fld_out_ps = serialization_ps(fld_out, self.fld.pcie_gbps);
        let packets = sent.len() as u64 + received + 2 * loopback;
        let pipeline = packets * self.nic.packet_ns * PS_PER_NS;
        let misses = qp_misses + mtt_misses;
        // The pipeline waits for each bitmap operation (LEFT §4.2: "the RNIC processing" drops
        // as bitmap latency grows), as it waits for a context or a translation.
        let stall = (qp_misses + mtt_misses * u64::from(self.nic.mtt_miss_reads.max(1)))
            * read_latency
            + reorder;
        // Dependent reads per packet (WQE, then payload), each a round trip; misses' reads are
        // the stall above, reads ahead are on no packet's path.
        let plain_reads = reads.saturating_sub(misses + reads_ahead + fld_reads);
        log::trace!("batch: {reads} reads, {misses} misses, {packets} packets, to host {to_host} B, from host {from_host} B");
        let rounds = plain_reads.div_ceil(packets.max(1));
        // Reads of FLD's BAR: a generated WQE, then its data — each FLD's round trip plus the
        // cycles FLD takes to answer.
        let fld_rounds = fld_reads.div_ceil(packets.max(1));
        let fld_read =
            self.fld.read_latency_ns * PS_PER_NS + self.fld.cycles_ps(self.fld.response_cycles);
        // The engine is busy for its pipeline and the host link; FLD's link is a port of its
        // own, busy in parallel: its transfers queue behind its earlier ones, not behind the
        // engine's host traffic.
        let flow = pcie.max(pipeline);
        let mut fld_done = now;
        for (free, p) in [
            (&mut self.fld_link_free.0, fld_in_ps),
            (&mut self.fld_link_free.1, fld_out_ps),
        ] {
            if p > 0 {
                *free = (*free).max(now) + p;
                fld_done = fld_done.max(*free);
            }
        }
        let spread = flow.max(fld_done - now);
        let busy = if work {
            (flow + stall).max(PS_PER_NS)
        } else {
            0
        };
        let front = now
            + stall
            + rounds * read_latency
            + fld_rounds * fld_read
            + self.nic.latency_ns * PS_PER_NS;
        let n = sent.len() as u64;
        let frames = Frames {
            frames: sent,
            first: front,
            spread,
        };
        let wrote_host = link.down_payload_bytes > 0;
        if work {
            t.batches += 1;
            t.frames_sent += n;
            t.frames_received += received;
            t.pcie_bytes_to_host += to_host;
            t.pcie_bytes_from_host += from_host;
            t.dma_reads += reads;
            t.busy_ns += busy / PS_PER_NS;
            t.stall_ns += stall / PS_PER_NS;
            t.fld_pcie_bytes_in += fld_in;
            t.fld_pcie_bytes_out += fld_out;
            t.fld_reads_served += fld_reads;
        }
        self.engine_free = now + busy;
        let next_timer = if work {
            None
        } else {
            self.card.nic.next_timer_ns().map(|ns| ns * PS_PER_NS)
        };
        Batch {
            work,
            engine_free: self.engine_free,
            frames,
            host_sees: wrote_host.then(|| front + flow + self.pcie.write_latency_ns * PS_PER_NS),
            fld_sees: (fld_link.down_payload_bytes > 0)
                .then(|| front + spread + self.fld.write_latency_ns * PS_PER_NS),
            next_timer,
        }
    }

    /// Runs one FLD step at `now` and charges it: each packet received (CQE decompressed, data
    /// streamed to the accelerator) and sent (buffered, described) costs its data beats plus
    /// one cycle; completions one cycle each; the packets go through the receive and the
    /// transmit pipelines' `stage_cycles` once per step, and the step's doorbells (SQ, RQ, CQ)
    /// leave when it ends and land in the NIC one FLD write latency later.
    pub fn run_fld(&mut self, now: Ps) -> FldStep {
        let work = self.card.fld.poll() > 0;
        let s = self.fld_snapshot();
        let l = self.fld_last;
        self.fld_last = s;
        let f = &self.fld;
        let (rx, tx) = (s.rx_packets - l.rx_packets, s.tx_packets - l.tx_packets);
        let beats = rx
            + f.beats_of(s.rx_bytes - l.rx_bytes)
            + tx
            + f.beats_of(s.tx_bytes - l.tx_bytes)
            + (s.completions - l.completions);
        let stages = (u64::from(rx > 0) + u64::from(tx > 0)) * f.stage_cycles;
        // An RTL accelerator works for its own cycles at its own clock, beside FLD's pipeline:
        // the slower of the two sets the step's pace, and its packets pass through both.
        let accel = match &self.accel_timing {
            AccelTiming::None => 0,
            AccelTiming::Rtl(mhz) => {
                ((s.accel_cycles - l.accel_cycles) as f64 * 1e6 / mhz).ceil() as u64
            }
            AccelTiming::Zuc(z) => z.busy_ps(
                s.accel_requests - l.accel_requests,
                s.accel_bits - l.accel_bits,
            ),
            AccelTiming::Rate(gbps) => serialization_ps(s.rx_bytes - l.rx_bytes, *gbps),
            AccelTiming::Packets(mpps) => (rx as f64 * 1e6 / mpps).ceil() as u64,
        };
        let fld_ps = f.cycles_ps(beats);
        let busy = fld_ps.max(accel).max(u64::from(work));
        // A packet passes FLD's receive side, the accelerator and FLD's transmit side in turn:
        // the last packet leaves one packet's time of the faster stage after the slower is done.
        let done = now + busy + fld_ps.min(accel) / rx.max(1) + f.cycles_ps(stages);
        if work {
            let t = &mut self.timing;
            t.fld_steps += 1;
            t.fld_rx_packets += rx;
            t.fld_tx_packets += tx;
            t.fld_busy_ns += busy / PS_PER_NS;
            t.accel_busy_ns += accel / PS_PER_NS;
        }
        self.fld_free = now + busy;
        FldStep {
            work,
            free: self.fld_free,
            nic_sees: work.then(|| done + f.write_latency_ns * PS_PER_NS),
        }
    }

    /// Takes back the (drained) frame list of a batch.
    pub fn recycle(&mut self, frames: Frames) {
        self.outbox_spare = frames.frames;
    }

    /// The application starts a step at `now`: its CPU begins when free and first looks at
    /// memory. Returns the CPU time after the look.
    pub fn cpu_begin(&mut self, now: Ps) -> Ps {
        let want = self.cpu_free.max(now);
        let (start, begun) = self.interference.core_free(want);
        if begun > 0 {
            self.timing.interruptions += begun;
        }
        self.timing.interrupted_ns += (start - want) / PS_PER_NS;
        self.cpu_free = start + self.cpu.poll_ns * PS_PER_NS;
        self.cpu_free
    }

    /// The application took `n` unloaded WRITEs (checked and copied each).
    pub fn cpu_unload(&mut self, n: u64) {
        self.cpu_free += n * self.cpu.unload_ns * PS_PER_NS;
    }

    /// The application posted `wrs` work requests and rang the doorbell once.
    pub fn cpu_post(&mut self, wrs: u64) {
        self.cpu_free += wrs * self.cpu.post_ns * PS_PER_NS;
        let at = self.cpu_free;
        self.doorbell = Some(self.doorbell.map_or(at, |d| d.max(at)));
    }
}
