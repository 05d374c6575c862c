//! LEFT's gather queues (§3.3, Algorithm 2): a few FIFOs in which the packets of deeply
//! reordered connections wait a little, so the reorder module then takes several packets of
//! one connection in a row — one cache swap for all of them instead of one per packet.
//!
//! A connection on the slow path occupies a FIFO while it has packets gathering. A FIFO is
//! released, its packets handed on in arrival order, when it holds `out_cnt` packets or its
//! first packet has waited `timeout_ns`. A connection that finds no FIFO of its own and none
//! empty takes the fullest one, whose packets are handed on first.

use std::collections::VecDeque;

use super::pool::Conn;

/// The FIFOs' number, how many packets release one, and how long a packet may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherConfig {
    pub fifos: u32,
    pub out_cnt: u32,
    pub timeout_ns: u64,
}

impl GatherConfig {
    /// §3.5: 8 FIFOs gathering 8 packets. The timeout is not given; 2 µs keeps the added delay
    /// at the "few us" §3.1 allows.
    pub const LEFT: GatherConfig = GatherConfig {
        fifos: 8,
        out_cnt: 8,
        timeout_ns: 2_000,
    };
}

#[derive(Clone)]
struct Fifo<T> {
    owner: Option<Conn>,
    packets: VecDeque<T>,
    /// When the first packet of the current owner came in.
    since: u64,
}

/// Packets handed on to the reorder module: one connection's, oldest first.
pub struct Batch<T> {
    pub conn: Conn,
    pub packets: Vec<T>,
}

#[derive(Clone)]
pub struct GatherQueues<T> {
    cfg: GatherConfig,
    fifos: Vec<Fifo<T>>,
    /// FIFOs taken from a connection by a fuller one's need (conflicts), over the life.
    pub conflicts: u64,
}

impl<T> GatherQueues<T> {
    pub fn new(cfg: GatherConfig) -> Self {
        GatherQueues {
            fifos: (0..cfg.fifos)
                .map(|_| Fifo {
                    owner: None,
                    packets: VecDeque::with_capacity(cfg.out_cnt as usize),
                    since: 0,
                })
                .collect(),
            cfg,
            conflicts: 0,
        }
    }

    pub fn config(&self) -> &GatherConfig {
        &self.cfg
    }

    /// Bits of on-chip memory the FIFOs take: `out_cnt` descriptors of `descriptor_bits` each,
    /// and the owner (a QP of `max_conns`), packet count and first arrival time.
    pub fn on_chip_bits(&self, max_conns: u64, descriptor_bits: u64) -> u64 {
        let depth = u64::from(self.cfg.out_cnt);
        self.fifos.len() as u64
            * (depth * descriptor_bits
                + super::pool::bits_for(max_conns)
                + super::pool::bits_for(depth + 1)
                + 32)
    }

    /// Packets waiting in all FIFOs.
    pub fn held(&self) -> usize {
        self.fifos.iter().map(|f| f.packets.len()).sum()
    }

    fn release(&mut self, i: usize, out: &mut Vec<Batch<T>>) {
        let f = &mut self.fifos[i];
        if let Some(conn) = f.owner.take() {
            out.push(Batch {
                conn,
                packets: f.packets.drain(..).collect(),
            });
        }
    }

    /// Gathers `packet` of `conn` at `now` (Algorithm 2); the batches it released, in order.
    pub fn push(&mut self, conn: Conn, packet: T, now: u64) -> Vec<Batch<T>> {
        let mut out = Vec::new();
        let i = match self.fifos.iter().position(|f| f.owner == Some(conn)) {
            Some(i) => i,
            None => {
                let i = match self.fifos.iter().position(|f| f.owner.is_none()) {
                    Some(i) => i,
                    None => {
                        // A conflict: the fullest FIFO goes on now and is this connection's.
                        let i = (0..self.fifos.len())
                            .max_by_key(|&i| self.fifos[i].packets.len())
                            .unwrap_or(0);
                        self.conflicts += 1;
                        self.release(i, &mut out);
                        i
                    }
                };
                let f = &mut self.fifos[i];
                f.owner = Some(conn);
                f.since = now;
                i
            }
        };
        self.fifos[i].packets.push_back(packet);
        if self.fifos[i].packets.len() as u32 >= self.cfg.out_cnt {
            self.release(i, &mut out);
        }
        out.extend(self.expire(now));
        out
    }

    /// The batches whose first packet has waited the timeout at `now`.
    pub fn expire(&mut self, now: u64) -> Vec<Batch<T>> {
        let mut out = Vec::new();
        for i in 0..self.fifos.len() {
            let f = &self.fifos[i];
            if f.owner.is_some() && now.saturating_sub(f.since) >= self.cfg.timeout_ns {
                self.release(i, &mut out);
            }
        }
        out
    }

    /// When the oldest gathering FIFO times out, if any is gathering.
    pub fn next_deadline(&self) -> Option<u64> {
        self.fifos
            .iter()
            .filter(|f| f.owner.is_some())
            .map(|f| f.since + self.cfg.timeout_ns)
            .min()
    }
}
