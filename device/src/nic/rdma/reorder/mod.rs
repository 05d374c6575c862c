//! Out-of-order packet reordering in the RNIC's receive path: LEFT (Zhang et al., APNet '24,
//! §3, Figure 2) and the receivers it is compared with (§4.2, §4.3).
//!
//! LEFT's four blocks, as Figure 2 draws them:
//! * the **reorder logic** places an out-of-order packet where it belongs and records it, so it
//!   no longer triggers a retransmission (its placement lives in the RoCE receive stage);
//! * the **dual-state bitmap pool** records it ([`pool`], Algorithm 1);
//! * the **gather queues** hold deeply reordered connections' packets a little ([`gather`],
//!   Algorithm 2);
//! * the **scheduler** sends a packet down the fast path straight to the reorder logic, or down
//!   the slow path through the gather queues ([`select_path`], Algorithm 3).
//!
//! [`ReceiverMode`] names the receivers of the paper's comparison, and [`on_chip_bits`] counts
//! what each keeps on chip for a number of connections — Figure 7's quantity, from the sizes of
//! the structures this module allocates.
//!
//! On the receive path, the card's unit (`NicConfig::receiver`) serves the QPs created with
//! `QP_FLAG_OUT_OF_ORDER`; the others go back N beside them. A request ahead of the expected
//! PSN is recorded here and either placed at once (a single-packet WRITE names its address) or
//! kept in the reorder [`buffer`] until the gap closes and executed then, in PSN order — SENDs,
//! multi-packet WRITEs, immediates, READs and atomics alike. LEFT's slow-path packets are
//! placed or kept at once and recorded when their connection's batch leaves the gather queues.
//! When the gap closes, the responder moves its expected PSN past the recorded packets
//! (`datapath/roce/responder.rs`). What a bitmap operation takes beyond the pipeline's
//! per-packet budget is a stall the virtual-time runner charges. Loss is recovered
//! selectively (§3.5): a packet one BDP past a missing one NAKs it once, and the requester of
//! an out-of-order QP sends that one packet again; the sender's timeout covers the rest.
//!
//! Left out: IRN's per-packet placement headers (see [`buffer`]); the sender's own
//! MP-RDMA-style trigger (here the receiver's bitmap span triggers, as LEFT says).
//!
//! IRN is modelled as the ideal reorderer bounded at 5 BDP ahead per connection: its bitmaps
//! are on chip, one per connection, so an access costs what the ideal one does.

pub mod buffer;
pub mod gather;
pub mod pool;

use gather::GatherConfig;
use pool::PoolConfig;

/// How a receiver treats a packet ahead of the PSN it expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiverMode {
    /// IBA's RC: NAK the first out-of-order packet, drop the rest (go-back-N).
    GoBackN,
    /// IRN (Mittal et al., SIGCOMM '18): a bitmap of its own per connection, 5 BDP long, and
    /// a NAK on the first packet out of order, for the sender to resend the missing one
    /// (PSN-triggered selective retransmission).
    Irn,
    /// MELO with the PSN-triggered retransmission off (the paper's MELO+): the shared pool
    /// alone, every out-of-order packet walking it.
    MeloPlus,
    /// LEFT without its gather queues.
    LeftMinus,
    /// LEFT: pool, caches, gather queues and the fast/slow scheduler.
    Left,
    /// A reorderer that records anything in 10 ns with unbounded memory.
    Ideal,
}

impl ReceiverMode {
    /// The mode a scenario's `series` names.
    pub fn from_series(name: &str) -> Option<Self> {
        [
            ReceiverMode::GoBackN,
            ReceiverMode::Irn,
            ReceiverMode::MeloPlus,
            ReceiverMode::LeftMinus,
            ReceiverMode::Left,
            ReceiverMode::Ideal,
        ]
        .into_iter()
        .find(|m| m.series() == name)
    }

    /// The name a scenario's `series` gives it.
    pub fn series(self) -> &'static str {
        match self {
            ReceiverMode::GoBackN => "gbn",
            ReceiverMode::Irn => "irn",
            ReceiverMode::MeloPlus => "melo+",
            ReceiverMode::LeftMinus => "left-",
            ReceiverMode::Left => "left",
            ReceiverMode::Ideal => "ideal",
        }
    }

    /// QUERY_CAPS's code for this mode (`fld_abi::nic::receiver`).
    pub fn caps_code(self) -> u8 {
        use fld_abi::nic::receiver as r;
        match self {
            ReceiverMode::GoBackN => r::GO_BACK_N,
            ReceiverMode::Irn => r::IRN,
            ReceiverMode::MeloPlus => r::MELO_PLUS,
            ReceiverMode::LeftMinus => r::LEFT_MINUS,
            ReceiverMode::Left => r::LEFT,
            ReceiverMode::Ideal => r::IDEAL,
        }
    }

    /// The bitmap pool this mode uses (`bdp`: bandwidth-delay product in packets).
    pub fn pool(self, bdp: u32) -> Option<PoolConfig> {
        match self {
            ReceiverMode::MeloPlus => Some(PoolConfig::pool_only(bdp)),
            ReceiverMode::LeftMinus | ReceiverMode::Left => Some(PoolConfig::left(bdp)),
            _ => None,
        }
    }

    /// The gather queues this mode uses.
    pub fn gather(self) -> Option<GatherConfig> {
        (self == ReceiverMode::Left).then_some(GatherConfig::LEFT)
    }
}

/// The scheduler's choice for a packet (§3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Straight to the reorder logic.
    Fast,
    /// Through the gather queues first.
    Slow,
}

/// Algorithm 3: an in-order packet, or one whose pool walk `T_pool` stays under `T_max`, takes
/// the fast path; the rest the slow one. `offset`: the packet's PSN minus `RCV_NXT`. The
/// algorithm's listing computes `T_pool` without Algorithm 1's factor of 5 ns per block; both
/// compare it with the same `T_max`, so the factor is taken here as in Algorithm 1.
pub fn select_path(cfg: &PoolConfig, offset: u32) -> Path {
    if offset == 0 || cfg.t_pool_ns(offset) < u64::from(cfg.t_max_ns) {
        Path::Fast
    } else {
        Path::Slow
    }
}

/// Bits of on-chip state, by structure (Figure 7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OnChipBits {
    /// Per connection: where its bitmap starts and the PSN it stands for (or, IRN, the whole
    /// bitmap).
    pub connections: u64,
    /// The pool's blocks, their next pointers and the availability bitmap.
    pub pool: u64,
    /// The bitmap caches with their owner, base and head.
    pub caches: u64,
    /// The gather FIFOs' packet descriptors and their owner, count and time.
    pub gather: u64,
}

impl OnChipBits {
    pub fn total(&self) -> u64 {
        self.connections + self.pool + self.caches + self.gather
    }

    /// In kilobytes (1,000 bytes), as Figure 7 plots them.
    pub fn kilobytes(&self) -> f64 {
        self.total() as f64 / 8.0 / 1000.0
    }
}

/// Bits of a PSN and of a QP number.
const PSN_BITS: u64 = 24;
const QPN_BITS: u64 = 24;
/// A gathered packet's descriptor: its QP, its PSN, where its payload was placed (a 64-bit
/// address) and its length (16 bits).
const DESCRIPTOR_BITS: u64 = QPN_BITS + PSN_BITS + 64 + 16;

/// What `mode` keeps on chip for `connections` connections with bandwidth-delay product `bdp`
/// packets: the structures are built as a receiver of that mode builds them and asked their
/// size (as FLD's Table 3 counts FLD's).
pub fn on_chip_bits(mode: ReceiverMode, connections: u64, bdp: u32) -> OnChipBits {
    match mode {
        ReceiverMode::GoBackN | ReceiverMode::Ideal => OnChipBits::default(),
        // Each connection: its 5-BDP bitmap and the PSN of its first bit.
        ReceiverMode::Irn => OnChipBits {
            connections: connections * (5 * u64::from(bdp) + PSN_BITS),
            ..Default::default()
        },
        _ => {
            let pool = pool::BitmapPool::new(mode.pool(bdp).expect("a pooled mode"));
            let (pool_bits, cache_bits) = pool.on_chip_bits(connections);
            OnChipBits {
                connections: connections * pool.connection_bits(),
                pool: pool_bits,
                caches: cache_bits,
                gather: mode.gather().map_or(0, |g| {
                    gather::GatherQueues::<()>::new(g).on_chip_bits(connections, DESCRIPTOR_BITS)
                }),
            }
        }
    }
}

/// Marks a QP's response stream in the reorder buffer: READ responses and atomic ACKs that
/// overtook earlier ones wait there (key `qp | RESPONSES`) beside its requests (key `qp`).
pub const RESPONSES: u32 = 1 << 31;

/// Packets the reorder buffer holds at most, in bandwidth-delay products: IRN's 5-BDP reach
/// with room to spare, host memory being plentiful where on-chip memory is not.
const BUFFER_BDPS: usize = 8;
/// The largest payload of a packet (a 4096-byte path MTU).
const MAX_PAYLOAD_BYTES: usize = 4096;

/// The reorder unit of a NIC whose responders do not go back N: its bitmap pool, LEFT's gather
/// queues, and what it did.
#[derive(Clone)]
pub struct ReorderUnit {
    pub mode: ReceiverMode,
    pub pool: pool::BitmapPool,
    /// LEFT's gather queues (§3.3): the PSNs of slow-path packets, already placed, waiting to
    /// be recorded a connection at a time.
    pub gather: Option<gather::GatherQueues<u32>>,
    pub counters: ReorderCounters,
    /// The pipeline's time per packet, ns: a bitmap operation within it overlaps the packet's
    /// other work; only what it takes beyond stalls the pipeline (LEFT §2.2: every operation
    /// "should converge within 40 ns" at 200 Gbit/s and 1 KB packets).
    pub budget_ns: u32,
    /// IRN: how far ahead a connection's own bitmap reaches (5 BDP), packets.
    irn_reach: u32,
    /// Packets ahead that do not say where they go, until the gap closes ([`buffer`]).
    pub buffer: buffer::ReorderBuffer,
    /// How far ahead of the expected PSN a packet shows that the packet expected was lost, not
    /// late: one bandwidth-delay product, since multipath reordering stays within it (§3.5,
    /// after MP-RDMA's bitmap-size trigger); IRN takes any packet ahead as the sign (1). The
    /// responder then NAKs the expected PSN once, and an out-of-order requester sends that
    /// packet alone again.
    pub loss_reach: u32,
}

/// What a reorder unit did, over its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderCounters {
    /// Out-of-order packets placed and recorded.
    pub recorded: u64,
    /// Out-of-order packets refused (no room: dropped and NAKed, §3.5).
    pub refused: u64,
    /// Packets found already recorded (dropped).
    pub duplicates: u64,
    /// Time the bitmap operations took, and the part beyond the pipeline's per-packet budget
    /// that stalled it, ns.
    pub busy_ns: u64,
    pub stall_ns: u64,
    /// Cache hits, pool walks and swaps.
    pub cache: u64,
    pub pool: u64,
    pub swaps: u64,
    /// Pool blocks taken and not given back (filled in when the counters are read).
    pub blocks_in_use: u64,
    /// Packets the reorder buffer holds now (filled in when the counters are read).
    pub buffer_held: u64,
    /// Packets that took the slow path through the gather queues.
    pub gathered: u64,
    /// Packets ahead kept in the reorder buffer (the rest were placed on arrival).
    pub kept: u64,
    /// Sequence NAKs sent because a packet arrived a bandwidth-delay product past a missing
    /// one (selective retransmission, §3.5).
    pub loss_naks: u64,
}

impl ReorderUnit {
    /// The unit `mode` needs, sized for `bdp` packets, in a pipeline taking `budget_ns` per
    /// packet; none for go-back-N.
    pub fn new(mode: ReceiverMode, bdp: u32, budget_ns: u32) -> Option<Self> {
        let cfg = match mode {
            ReceiverMode::GoBackN => return None,
            // Unbounded and uniform: an access always costs the ideal 10 ns (IRN's per-QP
            // bitmaps on chip cost the same; their 5-BDP bound is what `on_chip_bits` counts).
            ReceiverMode::Ideal | ReceiverMode::Irn => PoolConfig {
                block_bits: 64,
                blocks: 1 << 16,
                caches: 0,
                cache_bits: 64,
                t_max_ns: u32::MAX,
                cache_ns: 10,
                first_block_ns: 10,
                next_block_ns: 0,
            },
            m => m.pool(bdp).expect("a pooled mode"),
        };
        Some(ReorderUnit {
            mode,
            gather: mode.gather().map(gather::GatherQueues::new),
            pool: pool::BitmapPool::new(cfg),
            counters: ReorderCounters::default(),
            budget_ns,
            irn_reach: 5 * bdp,
            buffer: buffer::ReorderBuffer::new(BUFFER_BDPS * bdp as usize, MAX_PAYLOAD_BYTES),
            // IRN's receiver NAKs on the first packet out of order (PSN-triggered selective
            // retransmission, the trigger MELO+ and LEFT drop); the others wait a BDP.
            loss_reach: if mode == ReceiverMode::Irn { 1 } else { bdp },
        })
    }

    /// QP `conn` was reset or destroyed: its bitmap and kept packets (requests and
    /// responses) go.
    pub fn forget(&mut self, conn: u32) {
        self.pool.forget(conn);
        self.buffer.forget_unless(|c| c & !RESPONSES != conn);
    }

    /// Only the QPs `keep` says yes to remain (a function reset).
    pub fn forget_unless(&mut self, keep: impl Fn(u32) -> bool) {
        self.pool.forget_unless(&keep);
        self.buffer.forget_unless(|c| keep(c & !RESPONSES));
    }

    /// Whether packet `psn` of a QP expecting `rcv_nxt` goes through the gather queues
    /// (Algorithm 3's slow path); only LEFT has them.
    pub fn slow_path(&self, psn: u32, rcv_nxt: u32) -> bool {
        let offset = psn.wrapping_sub(rcv_nxt) & 0xff_ffff;
        self.gather.is_some() && select_path(self.pool.config(), offset) == Path::Slow
    }

    /// Records packet `psn` of QP `qp` expecting `rcv_nxt`; whether it is new (to be placed),
    /// and the time it cost is added to the stall.
    pub fn record(&mut self, qp: u32, psn: u32, rcv_nxt: u32) -> pool::Recorded {
        // IRN's bitmap is the connection's own, 5 BDP long: nothing beyond it fits.
        let offset = psn.wrapping_sub(rcv_nxt) & 0xff_ffff;
        let r = match self.mode == ReceiverMode::Irn && offset >= self.irn_reach {
            true => pool::Recorded::Refused,
            false => self.pool.record(qp, psn, rcv_nxt),
        };
        let c = &mut self.counters;
        match r {
            pool::Recorded::New(a, ns) | pool::Recorded::Duplicate(a, ns) => {
                c.busy_ns += u64::from(ns);
                c.stall_ns += u64::from(ns.saturating_sub(self.budget_ns));
                match a {
                    pool::Access::Cache => c.cache += 1,
                    pool::Access::Pool(_) => c.pool += 1,
                    pool::Access::Swap { .. } => c.swaps += 1,
                }
                match r {
                    pool::Recorded::New(..) => c.recorded += 1,
                    _ => c.duplicates += 1,
                }
            }
            pool::Recorded::Refused => c.refused += 1,
        }
        r
    }
}

#[cfg(test)]
mod tests;
