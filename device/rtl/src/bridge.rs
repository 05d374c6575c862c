//! The accelerator FLD sees: a Verilator model of a user's top module behind FLD's AXI4-Stream
//! ports (paper §5.5; the signals in `hdl/fld_accel.vh`, the timing in `docs/fld-interface.md`
//! §13).
//!
//! * **rx** (FLD → module): each packet FLD delivers is queued and streamed as beats of 64
//!   bytes, its metadata on TUSER: a packet's beats back to back, packets no faster than FLD's
//!   PCIe link delivers them (`rx_gbps`, 50 Gbit/s). FLD never waits: a beat offered while the
//!   module holds `rx_tready` low is lost, and the packet it belonged to is counted
//!   (`rx_backpressure_packets`), exactly the rule of §5.5 ("the accelerator is not allowed to
//!   generate backpressure towards FLD").
//! * **tx** (module → FLD): beats are collected until `tx_tlast` and the packet goes to FLD's Tx
//!   module with the metadata of its first beat. `tx_tready` is high except on the cycles a
//!   configured stall pattern lowers it; the flow control is the credit port.
//! * **credits**: the queue the module names on `credit_queue` in one cycle has its credits
//!   presented in the next, after every packet completed so far.
//! * **time**: each FLD step gives the module the cycles its input needs (a beat a cycle, the
//!   packets paced at `rx_gbps`), then keeps clocking until the module has been quiet (no beat
//!   in either direction) for `idle_cycles`, at most `max_cycles_per_step`. A module that is
//!   quiet, has no input waiting and whose credits did not change since is not clocked (its
//!   clock is gated, except on one step in 64 so a module waiting on its own timer still gets
//!   there): an RTL accelerator costs next to nothing while idle. Cycles count at `clock_hz`
//!   for the waveform's timescale and the reported simulated time.
//!
//! Breaches of the contract are counted and never stall the emulator: beats refused on rx,
//! a packet sent beyond its queue's credits (FLD refuses it: dropped), a TKEEP that is not a
//! contiguous run from lane 0 (or not full before the last beat), a packet longer than FLD's
//! maximum, TUSER changing inside a packet, and TVALID dropped or the beat changed while
//! `tx_tready` was low (AXI4-Stream's handshake rule).

use std::collections::VecDeque;
use std::path::PathBuf;

use fld_device::accel::{Accelerator, RdmaOp, RxMeta, TxMeta, TxRefused, TxStream};

use crate::build::{RtlDesign, RtlError};
use crate::model::{ClockedModel, Inputs, Model, Outputs};

/// Bytes per beat (`FLD_DATA_W` / 8).
pub const BEAT_BYTES: usize = 64;

/// A module whose clock is gated is still clocked on every this many gated steps.
const GATED_WAKE_EVERY: u64 = 64;

/// How the bridge clocks and checks the module.
#[derive(Clone, Debug)]
pub struct RtlConfig {
    /// The module's clock (Innova-2 designs, FLD included, run at 250 MHz: paper Table 4).
    pub clock_hz: f64,
    /// Cycles without a beat after which a step ends.
    pub idle_cycles: u32,
    /// A step never runs more cycles than this (a module streaming forever cannot hang FLD).
    pub max_cycles_per_step: u32,
    /// Packets FLD holds for the rx stream before it clocks the module to make room.
    pub rx_queue_packets: usize,
    /// The rate packets arrive at on the rx stream, in Gbit/s (0: back to back). FLD receives
    /// from the NIC over its PCIe link, so packets cannot reach the accelerator faster than
    /// that link carries them: 50 Gbit/s on the paper's Innova-2 (§8, "limited by the PCIe").
    pub rx_gbps: f64,
    /// Largest packet the tx stream takes (FLD's `max_packet`); longer ones are dropped.
    pub max_packet: usize,
    /// Cycles of reset (`rst` high) after power-on.
    pub reset_cycles: u32,
    /// Lower `tx_tready` on every `n`-th cycle (0: never), to exercise the module's handshake.
    pub tx_stall_every: u32,
    /// Dump every signal to this VCD file (the design must be built with tracing).
    pub vcd: Option<PathBuf>,
    /// Run quiet stretches (no rx beat, nothing from the module) in one call into the model
    /// instead of a call per cycle: the same cycles, faster. Off only to check exactly that.
    pub batch_quiet_cycles: bool,
}

impl Default for RtlConfig {
    fn default() -> Self {
        RtlConfig {
            clock_hz: 250e6,
            idle_cycles: 32,
            max_cycles_per_step: 1 << 16,
            rx_queue_packets: 256,
            rx_gbps: 50.0,
            max_packet: 16384,
            reset_cycles: 8,
            tx_stall_every: 0,
            vcd: None,
            batch_quiet_cycles: true,
        }
    }
}

/// The counters (by name, in [`Accelerator::counters`]) that count breaches of the contract.
pub const BREACH_COUNTERS: [&str; 7] = [
    "rx_backpressure_packets",
    "tx_without_credit",
    "tx_refused",
    "tx_bad_keep",
    "tx_oversize",
    "tx_tuser_changed",
    "tx_unstable",
];

/// Counter `name` in an accelerator's counters as [`Accelerator::counters`] lists them.
pub fn counter(counters: &[(&str, u64)], name: &str) -> Option<u64> {
    counters.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// Breaches of the contract in an accelerator's counters: the sum of [`BREACH_COUNTERS`].
pub fn breaches(counters: &[(&str, u64)]) -> u64 {
    BREACH_COUNTERS
        .iter()
        .filter_map(|n| counter(counters, n))
        .sum()
}

/// What the bridge counts (the accelerator's counters, by these names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtlCounters {
    pub cycles: u64,
    /// Cycles of each step up to its last beat in either direction: the module's working time,
    /// without the quiet tail a step runs to be sure nothing more comes out. A virtual-time
    /// runner charges these at the module's clock.
    pub busy_cycles: u64,
    pub rx_packets: u64,
    pub rx_beats: u64,
    pub tx_packets: u64,
    pub tx_beats: u64,
    /// Packets with a beat offered while `rx_tready` was low.
    pub rx_backpressure_packets: u64,
    /// Packets the module sent beyond its queue's credits (FLD refused them).
    pub tx_without_credit: u64,
    /// Packets FLD refused for another reason (unknown or failed queue, bad length).
    pub tx_refused: u64,
    pub tx_bad_keep: u64,
    pub tx_oversize: u64,
    pub tx_tuser_changed: u64,
    /// Handshake breaches: TVALID dropped or the beat changed while `tx_tready` was low.
    pub tx_unstable: u64,
    /// Steps cut short at `max_cycles_per_step` with the module still busy.
    pub step_budget_exhausted: u64,
    /// Steps skipped with the module's clock gated.
    pub gated_steps: u64,
}

/// A packet on its way into the module.
struct RxPacket {
    meta: RxMeta,
    data: Vec<u8>,
}

/// The tx packet being collected.
#[derive(Default)]
struct TxPacket {
    open: bool,
    meta: TxMeta,
    tuser: [u32; 6],
    data: Vec<u8>,
    bad: bool,
}

/// A Verilog accelerator on FLD's ports.
pub struct RtlAccelerator<M: ClockedModel + ?Sized = dyn ClockedModel> {
    model: Box<M>,
    cfg: RtlConfig,
    name: &'static str,
    inputs: Inputs,
    outputs: Outputs,
    rx: VecDeque<RxPacket>,
    spare: Vec<Vec<u8>>,
    /// Next beat of the packet at the front of `rx`.
    rx_beat: usize,
    /// The front packet lost a beat to backpressure (counted once).
    rx_hurt: bool,
    tx: TxPacket,
    /// The beat offered in the previous cycle while `tx_tready` was low.
    held: Option<Outputs>,
    /// Credits presented this cycle, and the queue they belong to.
    credit_queue: u16,
    reset_left: u32,
    quiet: u32,
    /// Consecutive steps the clock was gated.
    gated: u64,
    /// Rx pacing: bits the stream may still carry (a token bucket filled every cycle).
    rx_tokens: f64,
    rx_bits_per_cycle: f64,
    counters: RtlCounters,
}

/// Fills `words` (little-endian 32-bit words) from `bytes`, zeroing the rest.
fn pack(words: &mut [u32; 16], bytes: &[u8]) {
    let mut beat = [0u8; BEAT_BYTES];
    let n = bytes.len().min(BEAT_BYTES);
    beat[..n].copy_from_slice(&bytes[..n]);
    for (w, c) in words.iter_mut().zip(beat.chunks_exact(4)) {
        *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// Bits `lo..lo+width` (width <= 64) of a little-endian word array.
fn field(words: &[u32], lo: usize, width: usize) -> u64 {
    let (w, shift) = (lo / 32, lo % 32);
    let mut v: u128 = 0;
    for k in 0..3 {
        v |= u128::from(words.get(w + k).copied().unwrap_or(0)) << (32 * k);
    }
    ((v >> shift) & ((1u128 << width) - 1)) as u64
}

/// Sets bits `lo..lo+width` (width <= 64) of a little-endian word array to `v`.
fn set_field(words: &mut [u32], lo: usize, width: usize, v: u64) {
    let (w, shift) = (lo / 32, lo % 32);
    let mask = ((1u128 << width) - 1) << shift;
    let value = (u128::from(v) << shift) & mask;
    for k in 0..3 {
        if let Some(word) = words.get_mut(w + k) {
            let (m, x) = ((mask >> (32 * k)) as u32, (value >> (32 * k)) as u32);
            *word = (*word & !m) | x;
        }
    }
}

/// The rx TUSER of a packet (`FLD_RX_*` in `fld_accel.vh`).
pub fn encode_rx_tuser(meta: &RxMeta) -> [u32; 5] {
    let mut u = [0u32; 5];
    set_field(&mut u, 0, 16, meta.queue.into());
    set_field(&mut u, 16, 16, meta.context.into());
    set_field(&mut u, 32, 16, meta.len.min(0xffff).into());
    set_field(&mut u, 48, 8, meta.csum.into());
    if let Some(t) = meta.resume_table {
        set_field(&mut u, 56, 8, t.into());
        set_field(&mut u, 64, 1, 1);
    }
    if let Some(r) = meta.rdma {
        set_field(&mut u, 65, 1, 1);
        set_field(&mut u, 66, 1, r.first.into());
        set_field(&mut u, 67, 1, r.last.into());
        if let Some(imm) = r.imm {
            set_field(&mut u, 68, 1, 1);
            set_field(&mut u, 128, 32, imm.into());
        }
    }
    set_field(&mut u, 96, 32, meta.rss_hash.into());
    u
}

/// The tx metadata a TUSER carries (`FLD_TX_*`); `None` for an unknown operation code.
pub fn decode_tx_tuser(u: &[u32; 6]) -> Option<TxMeta> {
    let imm = field(u, 64, 32) as u32;
    let rkey = field(u, 96, 32) as u32;
    let remote_addr = field(u, 128, 64);
    let rdma = match field(u, 33, 3) {
        0 => None,
        1 => Some(RdmaOp::Send),
        2 => Some(RdmaOp::SendImm(imm)),
        3 => Some(RdmaOp::Write { remote_addr, rkey }),
        4 => Some(RdmaOp::WriteImm {
            remote_addr,
            rkey,
            imm,
        }),
        _ => return None,
    };
    Some(TxMeta {
        queue: field(u, 0, 16) as u16,
        cs_flags: field(u, 16, 8) as u8,
        resume_table: (field(u, 32, 1) != 0).then(|| field(u, 24, 8) as u8),
        rdma,
    })
}

impl RtlAccelerator {
    /// Instantiates `design` and holds it in reset for `cfg.reset_cycles`.
    pub fn new(design: &RtlDesign, cfg: RtlConfig) -> Result<Self, RtlError> {
        let period_ps = (1e12 / cfg.clock_hz.max(1.0)).round() as u64;
        let model = Model::new(design, period_ps, cfg.vcd.as_deref())?;
        let name = design
            .file_list
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .map_or("rtl", |n| Box::leak(format!("rtl:{n}").into_boxed_str()));
        Ok(Self::with_model(Box::new(model), name, cfg))
    }
}

/// The bridge is generic over its model so that a caller holding a concrete one (the scripted
/// model of the tests and the fuzz target) clocks it without a virtual call per cycle; a
/// Verilator model is reached through `dyn ClockedModel`, the default.
impl<M: ClockedModel + ?Sized> RtlAccelerator<M> {
    /// The bridge around any clocked model (a scripted one in tests and fuzzing).
    pub fn with_model(model: Box<M>, name: &'static str, cfg: RtlConfig) -> Self {
        let rx_bits_per_cycle = if cfg.rx_gbps > 0.0 {
            cfg.rx_gbps * 1e9 / cfg.clock_hz.max(1.0)
        } else {
            f64::INFINITY
        };
        RtlAccelerator {
            model,
            reset_left: cfg.reset_cycles,
            cfg,
            name,
            inputs: Inputs::default(),
            outputs: Outputs::default(),
            rx: VecDeque::new(),
            spare: Vec::new(),
            rx_beat: 0,
            rx_hurt: false,
            tx: TxPacket::default(),
            held: None,
            credit_queue: 0,
            quiet: 0,
            gated: 0,
            rx_tokens: 0.0,
            rx_bits_per_cycle,
            counters: RtlCounters::default(),
        }
    }

    pub fn counters_now(&self) -> RtlCounters {
        self.counters
    }

    /// Sets this cycle's rx inputs from the packet at the front of the queue.
    fn offer_rx(&mut self) {
        // A new packet starts only once the link has carried the ones before it.
        self.rx_tokens = self.refill(self.rx_tokens);
        let i = &mut self.inputs;
        let waiting = self.rx_beat == 0 && self.rx_tokens < 0.0;
        let Some(p) = self.rx.front().filter(|_| !waiting) else {
            i.rx_tvalid = 0;
            i.rx_tlast = 0;
            return;
        };
        if self.rx_beat == 0 {
            self.rx_tokens -= p.data.len() as f64 * 8.0;
        }
        let at = self.rx_beat * BEAT_BYTES;
        let n = (p.data.len() - at).min(BEAT_BYTES);
        pack(&mut i.rx_tdata, &p.data[at..at + n]);
        i.rx_tkeep = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        i.rx_tvalid = 1;
        i.rx_tlast = (at + n == p.data.len()) as u8;
        if self.rx_beat == 0 {
            i.rx_tuser = encode_rx_tuser(&p.meta);
        }
    }

    /// Moves past the beat just offered.
    fn rx_advance(&mut self, accepted: bool) {
        self.counters.rx_beats += 1;
        if !accepted && !self.rx_hurt {
            self.rx_hurt = true;
            self.counters.rx_backpressure_packets += 1;
        }
        if self.inputs.rx_tlast != 0 {
            if let Some(p) = self.rx.pop_front() {
                self.spare.push(p.data);
            }
            self.rx_beat = 0;
            self.rx_hurt = false;
            self.counters.rx_packets += 1;
        } else {
            self.rx_beat += 1;
        }
    }

    /// Takes the tx beat the module handed over this cycle.
    fn tx_beat(&mut self, tx: &mut dyn TxStream) {
        let o = &self.outputs;
        self.counters.tx_beats += 1;
        let p = &mut self.tx;
        if !p.open {
            p.open = true;
            p.bad = false;
            p.data.clear();
            p.tuser = o.tx_tuser;
            match decode_tx_tuser(&o.tx_tuser) {
                Some(m) => p.meta = m,
                None => p.bad = true,
            }
        } else if p.tuser != o.tx_tuser {
            self.counters.tx_tuser_changed += 1;
        }
        let last = o.tx_tlast != 0;
        let keep = o.tx_tkeep;
        // Lanes 0..n-1 exactly, and all 64 before the last beat.
        let n = keep.trailing_ones() as usize;
        let contiguous = n > 0 && (n == 64 || keep >> n == 0);
        if !contiguous || (!last && n != 64) {
            if !p.bad {
                self.counters.tx_bad_keep += 1;
            }
            p.bad = true;
        } else if p.data.len() + n > self.cfg.max_packet {
            if !p.bad {
                self.counters.tx_oversize += 1;
            }
            p.bad = true;
        } else if !p.bad {
            let mut bytes = [0u8; BEAT_BYTES];
            for (k, w) in o.tx_tdata.iter().enumerate() {
                bytes[k * 4..k * 4 + 4].copy_from_slice(&w.to_le_bytes());
            }
            p.data.extend_from_slice(&bytes[..n]);
        }
        if !last {
            return;
        }
        p.open = false;
        if p.bad {
            return;
        }
        match tx.send(&p.meta, &p.data) {
            Ok(()) => self.counters.tx_packets += 1,
            Err(TxRefused::NoCredit) => self.counters.tx_without_credit += 1,
            Err(_) => self.counters.tx_refused += 1,
        }
    }

    /// Whether `now` breaks the handshake rule after `held` was offered without `tx_tready`.
    fn unstable(held: &Outputs, now: &Outputs) -> bool {
        now.tx_tvalid == 0
            || now.tx_tdata != held.tx_tdata
            || now.tx_tkeep != held.tx_tkeep
            || now.tx_tlast != held.tx_tlast
            || now.tx_tuser != held.tx_tuser
    }

    /// Clocks the module until its input is in and it has been quiet for `idle_cycles` (or
    /// the step's budget is spent). Returns the beats moved.
    fn run(&mut self, tx: &mut dyn TxStream) -> usize {
        let credits = tx.credits(self.credit_queue);
        let unchanged = credits.packets == self.inputs.credit_packets
            && credits.bytes == self.inputs.credit_bytes;
        if self.rx.is_empty()
            && self.reset_left == 0
            && self.quiet >= self.cfg.idle_cycles
            && unchanged
        {
            self.gated += 1;
            // Every so often a gated module is clocked anyway, so one that waits on a timer of
            // its own still gets there (slower).
            if !self.gated.is_multiple_of(GATED_WAKE_EVERY) {
                self.counters.gated_steps += 1;
                return 0;
            }
        }
        self.inputs.credit_packets = credits.packets;
        self.inputs.credit_bytes = credits.bytes;
        let mut moved = 0;
        let mut quiet = 0;
        let budget = u64::from(self.cfg.max_cycles_per_step);
        let mut cycle = 0u64;
        while cycle < budget {
            if self.rx.is_empty() && self.reset_left == 0 && quiet >= self.cfg.idle_cycles {
                self.quiet = quiet;
                self.counters.busy_cycles += cycle.saturating_sub(u64::from(quiet));
                return moved;
            }
            let resetting = self.reset_left > 0;
            self.inputs.rst = resetting as u8;
            // A quiet stretch — the idle tail, or a gap before the next paced packet — runs
            // in one call as long as nothing changes the inputs (no rx beat, no stall pattern,
            // no beat held) and the module stays quiet; exactly the cycles one by one would be.
            let stretch = if resetting
                || self.held.is_some()
                || self.cfg.tx_stall_every != 0
                || !self.cfg.batch_quiet_cycles
            {
                0
            } else {
                let room = (budget - cycle).min(if self.rx.is_empty() {
                    u64::from(self.cfg.idle_cycles.saturating_sub(quiet))
                } else {
                    u64::MAX
                });
                self.quiet_cycles_ahead(room)
            };
            let ran = if stretch >= 2 {
                self.inputs.rx_tvalid = 0;
                self.inputs.rx_tlast = 0;
                self.inputs.tx_tready = 1;
                let n = self.model.cycles_quiet(
                    &self.inputs,
                    &mut self.outputs,
                    stretch,
                    self.credit_queue,
                );
                self.advance_rx_tokens(n);
                quiet += n.saturating_sub(1) as u32;
                n
            } else {
                if resetting {
                    self.reset_left -= 1;
                    self.inputs.rx_tvalid = 0;
                } else {
                    self.offer_rx();
                }
                let stall = self.cfg.tx_stall_every != 0
                    && (self.counters.cycles + 1)
                        .is_multiple_of(u64::from(self.cfg.tx_stall_every));
                self.inputs.tx_tready = (!stall) as u8;
                self.model.cycle(&self.inputs, &mut self.outputs);
                1
            };
            self.counters.cycles += ran;
            cycle += ran;
            let mut active = false;
            if self.inputs.rx_tvalid != 0 {
                self.rx_advance(self.outputs.rx_tready != 0);
                active = true;
                moved += 1;
            }
            if let Some(h) = self.held.take() {
                if !resetting && Self::unstable(&h, &self.outputs) {
                    self.counters.tx_unstable += 1;
                }
            }
            let mut sent = false;
            if self.outputs.tx_tvalid != 0 && !resetting {
                active = true;
                if self.inputs.tx_tready != 0 {
                    sent = self.outputs.tx_tlast != 0;
                    self.tx_beat(tx);
                    moved += 1;
                } else {
                    self.held = Some(self.outputs);
                }
            }
            // The queue named this cycle gets its credits next cycle, after this cycle's packet.
            // FLD's lock is held for the whole step, so only this module's packets change them.
            if sent || self.outputs.credit_queue != self.credit_queue {
                self.credit_queue = self.outputs.credit_queue;
                let c = tx.credits(self.credit_queue);
                self.inputs.credit_packets = c.packets;
                self.inputs.credit_bytes = c.bytes;
            }
            quiet = if active { 0 } else { quiet + 1 };
            if cycle == budget {
                self.counters.step_budget_exhausted += 1;
            }
        }
        self.quiet = quiet;
        self.counters.busy_cycles += cycle.saturating_sub(u64::from(quiet));
        moved
    }

    /// How many of the next cycles (at most `limit`) offer no rx beat: none are queued, or the
    /// next packet waits for the link (its tokens stay negative).
    fn quiet_cycles_ahead(&self, limit: u64) -> u64 {
        if self.rx_beat != 0 {
            return 0;
        }
        if self.rx.is_empty() {
            return limit;
        }
        let (mut t, mut n) = (self.rx_tokens, 0);
        while n < limit {
            t = self.refill(t);
            if t >= 0.0 {
                break;
            }
            n += 1;
        }
        n
    }

    /// The link's tokens `t` one cycle later: a cycle's bits added, at most one beat saved up
    /// (the link does not bank idle time into a burst).
    fn refill(&self, t: f64) -> f64 {
        (t + self.rx_bits_per_cycle).min(BEAT_BYTES as f64 * 8.0)
    }

    /// The link's tokens after `n` cycles without an rx beat, as `offer_rx` adds them.
    fn advance_rx_tokens(&mut self, n: u64) {
        for _ in 0..n {
            self.rx_tokens = self.refill(self.rx_tokens);
        }
    }
}

impl<M: ClockedModel + ?Sized> Accelerator for RtlAccelerator<M> {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        if data.is_empty() {
            return false;
        }
        while self.rx.len() >= self.cfg.rx_queue_packets.max(1) {
            // The rx stream is full: clock the module so the packets before drain into it.
            if self.run(tx) == 0 {
                break;
            }
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(data);
        let mut meta = *meta;
        meta.len = data.len() as u32;
        self.rx.push_back(RxPacket { meta, data: b });
        true
    }

    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        let moved = self.run(tx);
        // A waveform is readable while the emulator runs (and after it is killed, as
        // `fldemu serve` usually is): what a step dumped is written out with it.
        if moved > 0 && self.cfg.vcd.is_some() {
            self.model.flush();
        }
        moved
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        vec![
            ("cycles", c.cycles),
            ("busy_cycles", c.busy_cycles),
            ("rx_packets", c.rx_packets),
            ("rx_beats", c.rx_beats),
            ("tx_packets", c.tx_packets),
            ("tx_beats", c.tx_beats),
            ("rx_backpressure_packets", c.rx_backpressure_packets),
            ("tx_without_credit", c.tx_without_credit),
            ("tx_refused", c.tx_refused),
            ("tx_bad_keep", c.tx_bad_keep),
            ("tx_oversize", c.tx_oversize),
            ("tx_tuser_changed", c.tx_tuser_changed),
            ("tx_unstable", c.tx_unstable),
            ("step_budget_exhausted", c.step_budget_exhausted),
            ("gated_steps", c.gated_steps),
        ]
    }
}

impl<M: ClockedModel + ?Sized> Drop for RtlAccelerator<M> {
    fn drop(&mut self) {
        self.model.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field position and width reads back what was written and leaves the other bits.
    #[test]
    fn fields_round_trip_and_leave_their_neighbours() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for width in 1..=64 {
            for lo in 0..(192 - width) {
                let background: [u32; 6] = std::array::from_fn(|_| next() as u32);
                let mut words = background;
                let v = next() & (u64::MAX >> (64 - width));
                set_field(&mut words, lo, width, v);
                assert_eq!(field(&words, lo, width), v, "lo {lo} width {width}");
                for bit in (0..192).filter(|b| !(lo..lo + width).contains(b)) {
                    let (a, b) = (
                        words[bit / 32] >> (bit % 32) & 1,
                        background[bit / 32] >> (bit % 32) & 1,
                    );
                    assert_eq!(a, b, "bit {bit} changed writing lo {lo} width {width}");
                }
            }
        }
    }

    #[test]
    fn a_beat_packs_lane_by_lane() {
        let bytes: Vec<u8> = (1..=70).collect();
        let mut w = [0u32; 16];
        pack(&mut w, &bytes);
        assert_eq!(w[0], 0x0403_0201);
        assert_eq!(w[15], 0x403f_3e3d);
        pack(&mut w, &bytes[..5]);
        assert_eq!(&w[..3], &[0x0403_0201, 0x05, 0]);
    }
}
