//! Per-function TLP accounting. "Up" is traffic the function sends into the switch (its requests
//! and the completions it returns); "down" is what the switch delivers to it.

use std::cell::Cell;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// A plain snapshot of counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TlpStats {
    pub up_tlps: u64,
    pub up_header_bytes: u64,
    pub up_payload_bytes: u64,
    pub down_tlps: u64,
    pub down_header_bytes: u64,
    pub down_payload_bytes: u64,
}

impl TlpStats {
    /// Tallies TLPs sent up and their payload. A tally leaves header bytes at zero: the
    /// counters it is added to derive them from the TLPs ([`TlpCounters::snapshot`]).
    pub(crate) fn up(&mut self, tlps: u64, payload: u64) {
        self.up_tlps += tlps;
        self.up_payload_bytes += payload;
    }
    /// Tallies TLPs delivered down and their payload (header bytes as for [`TlpStats::up`]).
    pub(crate) fn down(&mut self, tlps: u64, payload: u64) {
        self.down_tlps += tlps;
        self.down_payload_bytes += payload;
    }
    /// Bytes on the link in both directions, headers included.
    pub fn total_bytes(&self) -> u64 {
        self.up_header_bytes
            + self.up_payload_bytes
            + self.down_header_bytes
            + self.down_payload_bytes
    }
    pub fn total_tlps(&self) -> u64 {
        self.up_tlps + self.down_tlps
    }
    /// Counter-wise difference `self - earlier`.
    pub fn since(&self, earlier: &TlpStats) -> TlpStats {
        TlpStats {
            up_tlps: self.up_tlps - earlier.up_tlps,
            up_header_bytes: self.up_header_bytes - earlier.up_header_bytes,
            up_payload_bytes: self.up_payload_bytes - earlier.up_payload_bytes,
            down_tlps: self.down_tlps - earlier.down_tlps,
            down_header_bytes: self.down_header_bytes - earlier.down_header_bytes,
            down_payload_bytes: self.down_payload_bytes - earlier.down_payload_bytes,
        }
    }
}

/// The counters of one function: TLPs and payload bytes each way. A TLP's header bytes are the
/// fabric's per-TLP overhead, the same for every TLP, so they are derived when the counters are
/// read ([`TlpCounters::snapshot`]) rather than counted.
///
/// Every CPU access and every flush of a DMA port adds to two sets of these (the host's and the
/// function's), from whichever thread made it: the applications' threads and the engine's. An
/// atomic add is a locked read-modify-write, a barrier that costs tens of cycles even with no
/// other writer, and with the engine on another core every add moved the cache line between the
/// two. So each counting thread writes a lane of its own with plain loads and stores
/// (`Lane`, `LaneLease`); a reading sums the lanes. Threads beyond `LANES` count in a
/// shared lane with atomic adds. None of this is the modelled hardware: the sums are the same.
#[derive(Default, Debug)]
pub struct TlpCounters {
    /// One lane per counting thread, written only by the thread that holds it.
    lanes: [Lane; LANES],
    /// The lane of threads that hold none (atomic adds).
    shared: Lane,
    /// What the sums read at the last [`TlpCounters::clear`], subtracted from every reading (a
    /// clear cannot zero another thread's lane without racing its writer).
    zero: Lane,
}

/// Cells of a lane.
const UP_TLPS: usize = 0;
const UP_PAYLOAD: usize = 1;
const DOWN_TLPS: usize = 2;
const DOWN_PAYLOAD: usize = 3;
/// Read operations the function issued (one per DMA read, however many request TLPs it took):
/// the dependent round trips a timing model charges latency for.
const READ_OPERATIONS: usize = 4;
/// Peer-to-peer reads this function completed (requests another function sent to its BAR): a
/// timing model charges the round trip to this function, not to host memory.
const READS_SERVED: usize = 5;

/// Threads that count at once in lanes of their own; more than the engine's threads and the
/// applications' of any runner here.
const LANES: usize = 8;

/// One writer's counts, alone in its cache line so two writers never share one.
#[repr(align(64))]
#[derive(Default, Debug)]
struct Lane([AtomicU64; CELLS]);

/// Cells of a counter: the lane's width.
pub const CELLS: usize = 6;

/// Which lanes live threads hold (bit `i` for lane `i`).
static LANES_HELD: AtomicU32 = AtomicU32::new(0);

/// [`LANE`] before the thread first counts, and once it counts in the shared lane.
const NO_LANE_YET: u8 = u8::MAX;
const NO_LANE: u8 = u8::MAX - 1;

thread_local! {
    /// The lane this thread writes: read on every add, so a plain value with no destructor.
    static LANE: Cell<u8> = const { Cell::new(NO_LANE_YET) };
    /// The thread's hold on its lane, taken at its first add and given back when it ends.
    static LEASE: LaneLease = LaneLease::take();
}

/// A thread's hold on a lane.
struct LaneLease(Option<u8>);

impl LaneLease {
    fn take() -> LaneLease {
        let mut held = LANES_HELD.load(Relaxed);
        let lane = loop {
            let free = (!held).trailing_zeros() as usize;
            if free >= LANES {
                break None;
            }
            // Acquire: the lane's last holder's stores happen before this thread's.
            match LANES_HELD.compare_exchange_weak(held, held | 1 << free, Acquire, Relaxed) {
                Ok(_) => break Some(free as u8),
                Err(now) => held = now,
            }
        };
        LANE.set(lane.unwrap_or(NO_LANE));
        LaneLease(lane)
    }
}

impl Drop for LaneLease {
    fn drop(&mut self) {
        // What the thread counts while it ends goes to the shared lane.
        let _ = LANE.try_with(|l| l.set(NO_LANE));
        if let Some(lane) = self.0 {
            LANES_HELD.fetch_and(!(1 << lane), Release);
        }
    }
}

/// The lane this thread writes, if it holds one.
#[inline]
fn this_threads_lane() -> Option<usize> {
    match LANE.try_with(Cell::get).unwrap_or(NO_LANE) {
        NO_LANE_YET => first_lane(),
        lane => Some(usize::from(lane)).filter(|&l| l < LANES),
    }
}

#[cold]
fn first_lane() -> Option<usize> {
    LEASE.try_with(|l| l.0.map(usize::from)).ok().flatten()
}

impl TlpCounters {
    /// Adds each `(cell, value)` in this thread's lane.
    #[inline]
    fn add_cells<const N: usize>(&self, adds: [(usize, u64); N]) {
        match this_threads_lane() {
            Some(lane) => {
                // This thread is the lane's only writer: a load and a store cannot lose an add.
                let cells = &self.lanes[lane].0;
                for (i, v) in adds {
                    cells[i].store(cells[i].load(Relaxed).wrapping_add(v), Relaxed);
                }
            }
            None => {
                for (i, v) in adds {
                    self.shared.0[i].fetch_add(v, Relaxed);
                }
            }
        }
    }

    /// The sum of cell `i` over the lanes, since the last clear.
    fn read(&self, i: usize) -> u64 {
        self.lanes
            .iter()
            .chain([&self.shared])
            .fold(0u64, |sum, lane| sum.wrapping_add(lane.0[i].load(Relaxed)))
            .wrapping_sub(self.zero.0[i].load(Relaxed))
    }

    pub fn add_up(&self, tlps: u64, payload: u64) {
        self.add_cells([(UP_TLPS, tlps), (UP_PAYLOAD, payload)]);
    }
    pub fn add_down(&self, tlps: u64, payload: u64) {
        self.add_cells([(DOWN_TLPS, tlps), (DOWN_PAYLOAD, payload)]);
    }
    /// Adds a tally's TLPs and payload (its header bytes follow from its TLPs).
    pub fn add(&self, s: &TlpStats) {
        self.add_tally(s, 0, 0);
    }
    /// [`TlpCounters::add`] with the read operations the tally's requests issued and the reads
    /// it served, all at once (a DMA port's tallies when it ends).
    pub fn add_tally(&self, s: &TlpStats, read_operations: u64, reads_served: u64) {
        if s.total_tlps() == 0 && read_operations == 0 && reads_served == 0 {
            return;
        }
        self.add_cells([
            (UP_TLPS, s.up_tlps),
            (UP_PAYLOAD, s.up_payload_bytes),
            (DOWN_TLPS, s.down_tlps),
            (DOWN_PAYLOAD, s.down_payload_bytes),
            (READ_OPERATIONS, read_operations),
            (READS_SERVED, reads_served),
        ]);
    }
    pub fn read_operations(&self) -> u64 {
        self.read(READ_OPERATIONS)
    }
    pub fn reads_served(&self) -> u64 {
        self.read(READS_SERVED)
    }
    /// The counters, with `overhead` header bytes per TLP.
    pub fn snapshot(&self, overhead: u64) -> TlpStats {
        let up_tlps = self.read(UP_TLPS);
        let down_tlps = self.read(DOWN_TLPS);
        TlpStats {
            up_tlps,
            up_header_bytes: up_tlps * overhead,
            up_payload_bytes: self.read(UP_PAYLOAD),
            down_tlps,
            down_header_bytes: down_tlps * overhead,
            down_payload_bytes: self.read(DOWN_PAYLOAD),
        }
    }
    /// Reads zero from now on (until the next adds).
    pub fn clear(&self) {
        self.set_cells(&[0; CELLS]);
    }

    /// Every cell as it reads now: what a snapshot of the card keeps.
    pub fn cells(&self) -> [u64; CELLS] {
        std::array::from_fn(|i| self.read(i))
    }

    /// Reads `cells` from now on (until the next adds): as a clear does, by moving the point
    /// each cell counts from, since another thread's lane cannot be written.
    pub fn set_cells(&self, cells: &[u64; CELLS]) {
        for (i, &want) in cells.iter().enumerate() {
            let sum = self.read(i).wrapping_add(self.zero.0[i].load(Relaxed));
            self.zero.0[i].store(sum.wrapping_sub(want), Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const ADDS: u64 = 20_000;

    /// Rounds of more threads than there are lanes, adding at once to the same counters (some in
    /// lanes of their own, the rest in the shared one; each round's threads take the lanes the
    /// last round's gave back): every add is counted exactly once.
    #[test]
    fn threads_adding_at_once_lose_no_add() {
        let c = Arc::new(TlpCounters::default());
        let threads = LANES as u64 + 4;
        let rounds = 3;
        for _ in 0..rounds {
            let running: Vec<_> = (0..threads)
                .map(|t| {
                    let c = c.clone();
                    std::thread::spawn(move || {
                        for i in 0..ADDS {
                            c.add_up(1, t);
                            c.add_down(2, i);
                            c.add_tally(&TlpStats::default(), 1, 0);
                        }
                        c.add(&TlpStats {
                            up_tlps: 5,
                            down_payload_bytes: 7,
                            ..TlpStats::default()
                        });
                        let mut served = TlpStats::default();
                        served.down(3, 0);
                        served.up(2, 100);
                        c.add_tally(&served, 0, 1);
                    })
                })
                .collect();
            for t in running {
                t.join().expect("a counting thread");
            }
        }
        let runs = rounds * threads;
        let s = c.snapshot(24);
        assert_eq!(s.up_tlps, runs * (ADDS + 5 + 2));
        assert_eq!(s.up_header_bytes, s.up_tlps * 24);
        assert_eq!(
            s.up_payload_bytes,
            rounds * ADDS * (0..threads).sum::<u64>() + runs * 100
        );
        assert_eq!(s.down_tlps, runs * (2 * ADDS + 3));
        assert_eq!(s.down_payload_bytes, runs * ((0..ADDS).sum::<u64>() + 7));
        assert_eq!(c.read_operations(), runs * ADDS);
        assert_eq!(c.reads_served(), runs);
    }

    /// A clear reads as zero whichever threads' lanes hold the counts, and later adds count from
    /// it, including adds a thread makes into a lane it held before the clear.
    #[test]
    fn a_clear_zeroes_every_lane_for_the_reader() {
        let c = Arc::new(TlpCounters::default());
        c.add_up(3, 300);
        let other = {
            let c = c.clone();
            std::thread::spawn(move || c.add_down(4, 400))
        };
        other.join().expect("a counting thread");
        c.add_tally(&TlpStats::default(), 2, 0);
        assert_eq!((c.snapshot(0).total_tlps(), c.read_operations()), (7, 2));
        c.clear();
        assert_eq!(c.snapshot(24), TlpStats::default());
        assert_eq!((c.read_operations(), c.reads_served()), (0, 0));
        c.add_up(1, 10);
        let mut served = TlpStats::default();
        served.down(1, 0);
        served.up(2, 50);
        c.add_tally(&served, 0, 1);
        let s = c.snapshot(24);
        assert_eq!((s.up_tlps, s.up_payload_bytes, s.down_tlps), (3, 60, 1));
        assert_eq!(c.reads_served(), 1);
    }
}
