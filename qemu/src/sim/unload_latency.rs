//! uRDMA's Figure 3 (Faster Offloads by Unloading them – The RDMA Case, §4) as a simulated
//! application: the initiator A issues sequential 16 B inline WRITEs, each to one of `regions`
//! 4 KiB regions of B drawn from a Zipf distribution (rank 1 the most written); B's CPU sees the
//! WRITE land and writes a 32-bit answer into one fixed buffer of A. A round trip is the time
//! from A's post to A seeing the answer.
//!
//! Each WRITE goes by the path the point's [`UnloadPath`] picks:
//! * offload: a plain RDMA WRITE — B's RNIC translates the region's page through its MTT cache,
//!   and a miss reads the translation over PCIe before the data is placed (§2);
//! * unload: uRDMA's software path (`fld_host::verbs::unload`) — a WRITE WITH IMMEDIATE into the
//!   next slot of B's staging buffer, whose translations stay cached; B's CPU checks it against
//!   its uMTT and copies it;
//! * hint / frequency: uRDMA's decision module (`fld_host::verbs::decision`) per WRITE — the
//!   application keeps its top-`hot` regions offloaded, or the monitor's page counters do;
//! * rnic: the in-RNIC variant §5 proposes (`fld_host::verbs::unload::StagingRing`) — A posts
//!   plain WRITEs; B's NIC stages those whose translation it does not hold into B's staging
//!   ring, and B's CPU copies them.
//!
//! B's regions are one registration of `regions` pages over a single page of host memory
//! ([`Context::reg_mr_repeating`]): B's RNIC holds one translation per region, as for 2^20 real
//! regions, without 4 GiB behind them. A WRITE carries the round number, so B knows the round
//! it waits for has landed whichever region it went to.
//!
//! Left out: the paper's 5 million WRITEs per point (a point runs `warmup` + `iterations`; the
//! frequency monitor is primed with `prime` draws of the same distribution first, standing for
//! the long run that trains it in the paper).

use fld_abi::nic::DEFAULT_PATH_MTU;
use fld_host::verbs::decision::{Decider, Policy};
use fld_host::verbs::unload::{StagingRing, UnloadInitiator, UnloadTarget, SLOT_HEADER};
use fld_host::verbs::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::Zipf;

use super::card::SimHost;
use super::events::Ps;
use super::workload::{connect, end, qp_on, End, Percentiles, Rounds, Workload};
use super::SimError;

/// The page each region is (4 KiB, the paper's default).
const REGION_BYTES: u64 = 4096;
/// Staging slots of B's buffer: an unloaded 16 B WRITE and its header in each (the in-RNIC
/// ring has as many of the same size).
const STAGING_SLOTS: u32 = 64;
const SLOT_BYTES: u32 = 64;

/// How the initiator routes its WRITEs (the curves of Figure 3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnloadPath {
    Offload,
    Unload,
    /// Offload the `hot` most written regions (the application's hint), unload the rest.
    Hint,
    /// The monitor's per-page counters: the `hot` most written pages stay offloaded.
    Frequency,
    /// Plain WRITEs; B's NIC stages those it cannot translate (the in-RNIC unload path).
    Rnic,
}

impl UnloadPath {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "offload" => UnloadPath::Offload,
            "unload" => UnloadPath::Unload,
            "hint" => UnloadPath::Hint,
            "frequency" => UnloadPath::Frequency,
            "rnic" => UnloadPath::Rnic,
            _ => return None,
        })
    }

    fn policy(self) -> Policy {
        match self {
            UnloadPath::Offload | UnloadPath::Rnic => Policy::Offload,
            UnloadPath::Unload => Policy::Unload,
            UnloadPath::Hint => Policy::Hint,
            // Set from the primed counters before the first WRITE.
            UnloadPath::Frequency => Policy::Frequency { threshold: 0.0 },
        }
    }
}

/// The point's shape.
#[derive(Clone, Copy, Debug)]
pub struct UnloadShape {
    pub regions: u64,
    pub size: usize,
    pub skew: f64,
    /// Regions the hint and frequency policies keep offloaded.
    pub hot: usize,
    /// Rounds before the measured ones (the caches and the staging ring reach steady state).
    pub warmup: u64,
    pub iterations: u64,
    /// Draws counted by the frequency monitor before the run.
    pub prime: u64,
}

/// The frequency policy's threshold is chosen again every this many WRITEs (off the critical
/// path, from the counted distribution).
const RETHRESHOLD_EVERY: u64 = 1 << 14;

pub struct UnloadLatency {
    a: usize,
    shape: UnloadShape,
    ends: [End; 2],
    qps: [Qp; 2],
    /// B's regions: `regions` pages over one page of memory.
    regions: Mr,
    /// A's answer word.
    answer: Mr,
    initiator: UnloadInitiator,
    target: UnloadTarget,
    /// B's staging ring on the in-RNIC path.
    ring: Option<StagingRing>,
    decider: Decider,
    zipf: Zipf<f64>,
    rng: SmallRng,
    /// The region the current round writes to (from 0, the most written first).
    region: u64,
    rounds: Rounds,
    warm: u64,
    echoed: u64,
    pub unloaded: u64,
    pub offloaded: u64,
}

impl UnloadLatency {
    pub fn new(
        hosts: &mut [SimHost],
        (a, b): (usize, usize),
        path: UnloadPath,
        shape: UnloadShape,
        seed: u64,
    ) -> Result<Self, SimError> {
        let size = shape.size.clamp(4, (SLOT_BYTES as usize) - SLOT_HEADER);
        let ea = end(&mut hosts[a].ctx, 4096, 1024)?;
        let eb = end(&mut hosts[b].ctx, 4096, 1024)?;
        let qa = qp_on(&mut hosts[a].ctx, &ea, 256, 1, 220)?;
        let mut qb = qp_on(&mut hosts[b].ctx, &eb, 256, STAGING_SLOTS, 220)?;
        let regions = hosts[b].ctx.reg_mr_repeating(
            &eb.pd,
            REGION_BYTES as usize,
            shape.regions.max(1) * REGION_BYTES,
            access::ALL,
        )?;
        let answer = hosts[a].ctx.reg_mr(&ea.pd, 64, access::ALL)?;
        connect(hosts, (a, &qa), (b, &qb), DEFAULT_PATH_MTU)?;
        let mut target = UnloadTarget::new(
            &mut hosts[b].ctx,
            &eb.pd,
            &mut qb,
            STAGING_SLOTS,
            SLOT_BYTES,
        )?;
        let ring = match path {
            UnloadPath::Rnic => Some(StagingRing::new(
                &mut hosts[b].ctx,
                &eb.pd,
                &qb,
                STAGING_SLOTS.trailing_zeros() as u8,
                SLOT_BYTES.trailing_zeros() as u8,
            )?),
            _ => None,
        };
        let initiator = UnloadInitiator::new(&mut hosts[a].ctx, &ea.pd, target.offer())?;
        target.set_credit_word(initiator.credit_word());
        let zipf = Zipf::new(shape.regions.max(1) as f64, shape.skew)
            .map_err(|_| SimError::Scenario("unload_latency: skew".into()))?;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut decider = Decider::new(path.policy(), size);
        if path == UnloadPath::Frequency {
            for _ in 0..shape.prime {
                let r = rng.sample(zipf) as u64 - 1;
                decider.unload(regions.addr() + r * REGION_BYTES, size, false);
            }
            decider.keep_top(shape.hot);
        }
        Ok(UnloadLatency {
            a,
            shape: UnloadShape { size, ..shape },
            ends: [ea, eb],
            qps: [qa, qb],
            regions,
            answer,
            initiator,
            target,
            ring,
            decider,
            zipf,
            rng,
            region: 0,
            rounds: Rounds::new(shape.iterations),
            warm: 0,
            echoed: 0,
            unloaded: 0,
            offloaded: 0,
        })
    }

    /// The round number as the WRITE carries it (the answer echoes its low 32 bits).
    fn round(&self) -> u64 {
        self.warm + self.rounds.round
    }

    /// A posts the next round's WRITE by the path the decision module picks.
    fn send(&mut self, h: &mut SimHost) -> Result<(), SimError> {
        self.region = self.rng.sample(self.zipf) as u64 - 1;
        let dest = self.regions.addr() + self.region * REGION_BYTES;
        let mut data = [0u8; 64];
        let data = &mut data[..self.shape.size];
        data[..4].copy_from_slice(&(self.round() as u32).to_le_bytes());
        let hot = self.region < self.shape.hot as u64;
        let sent = self.round();
        if matches!(self.decider.policy, Policy::Frequency { .. })
            && sent.is_multiple_of(RETHRESHOLD_EVERY)
        {
            self.decider.keep_top(self.shape.hot);
        }
        if self.decider.unload(dest, data.len(), hot) {
            self.initiator
                .post(&mut self.qps[0], sent, dest, self.regions.rkey(), data)?;
            self.unloaded += 1;
        } else {
            let e = &self.ends[0];
            e.mr.write(0, data);
            let sge = [e.mr.sge(0, data.len())];
            let mut wr = SendWr::new(
                sent,
                WrOpcode::RdmaWrite {
                    remote_addr: dest,
                    rkey: self.regions.rkey(),
                },
                &sge,
            );
            wr.inline = true;
            self.qps[0].post_send(&[wr])?;
            self.offloaded += 1;
        }
        h.cpu_post(1);
        Ok(())
    }

    /// B: whether the current round's WRITE is in its region.
    fn landed(&self) -> bool {
        let mut w = [0u8; 4];
        self.regions
            .read((self.region * REGION_BYTES) as usize, &mut w);
        u32::from_le_bytes(w) == self.round() as u32
    }

    /// B writes the round number into A's answer word.
    fn answer(&mut self, h: &mut SimHost) -> Result<(), SimError> {
        let e = &self.ends[1];
        e.mr.write(0, &(self.round() as u32).to_le_bytes());
        let sge = [e.mr.sge(0, 4)];
        let mut wr = SendWr::new(
            self.round(),
            WrOpcode::RdmaWrite {
                remote_addr: self.answer.addr(),
                rkey: self.answer.rkey(),
            },
            &sge,
        );
        wr.inline = true;
        self.qps[1].post_send(&[wr])?;
        h.cpu_post(1);
        Ok(())
    }

    fn answered(&self) -> bool {
        let mut w = [0u8; 4];
        self.answer.read(0, &mut w);
        u32::from_le_bytes(w) == self.round() as u32
    }

    /// Side `s` polls its CQ; B takes the unloaded WRITEs among the completions.
    fn reap(&mut self, s: usize, h: &mut SimHost) -> Result<(), SimError> {
        let mut wc = [Wc::EMPTY; 16];
        loop {
            let n = self.ends[s].cq.poll(&mut wc);
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    return Err(SimError::Failed(format!("completion in error: {w:?}")));
                }
                let refused = match &mut self.ring {
                    _ if s == 0 => None,
                    _ if UnloadTarget::is_unloaded(w) => {
                        h.cpu_unload(1);
                        self.target.take(&h.ctx, &mut self.qps[1], w)?
                    }
                    Some(ring) if StagingRing::is_staged(w) => {
                        h.cpu_unload(1);
                        ring.take(&h.ctx, w)
                    }
                    _ => None,
                };
                if let Some(r) = refused {
                    return Err(SimError::Failed(format!("unloaded WRITE refused: {r:?}")));
                }
            }
            if n < wc.len() {
                if let (1, Some(ring)) = (s, &self.ring) {
                    ring.release(&self.qps[1]);
                }
                return Ok(());
            }
        }
    }
}

impl Workload for UnloadLatency {
    fn starters(&self) -> Vec<usize> {
        vec![self.a]
    }

    fn wake(
        &mut self,
        host: usize,
        now: Ps,
        hosts: &mut [SimHost],
    ) -> Result<Option<Ps>, SimError> {
        let s = usize::from(host != self.a);
        let h = &mut hosts[host];
        let t = h.cpu_begin(now);
        self.reap(s, h)?;
        if self.rounds.round == 0 && self.warm == 0 {
            if s == 0 {
                self.warm = 1;
                self.send(h)?;
            }
            return Ok(None);
        }
        if s == 1 {
            if self.echoed < self.round() && self.landed() {
                self.echoed = self.round();
                self.answer(h)?;
            }
            return Ok(None);
        }
        if self.rounds.finished() || !self.answered() {
            return Ok(None);
        }
        if self.rounds.round == 0 {
            // Warming up: no sample.
            if self.warm < self.shape.warmup {
                self.warm += 1;
            } else {
                self.rounds.start_next(t);
            }
            self.send(h)?;
            return Ok(None);
        }
        if (self.rounds.samples.len() as u64) < self.rounds.round && self.rounds.end(t) {
            self.rounds.start_next(t);
            self.send(h)?;
        }
        Ok(None)
    }

    fn finished(&self) -> bool {
        self.rounds.finished()
    }

    fn metrics(&self) -> Vec<(&'static str, f64)> {
        let Some(rtt) = Percentiles::of(&self.rounds.samples) else {
            return Vec::new();
        };
        let all = (self.unloaded + self.offloaded).max(1) as f64;
        // On the in-RNIC path the NIC, not the initiator, unloads.
        let unloaded = match &self.ring {
            Some(r) => r.placed,
            None => self.unloaded,
        };
        vec![
            ("rtt_us", rtt.mean),
            ("rtt_median_us", rtt.median),
            ("rtt_p99_us", rtt.p99),
            ("unloaded_share", unloaded as f64 / all),
            ("unload_refused", self.target.refused as f64),
        ]
    }
}
