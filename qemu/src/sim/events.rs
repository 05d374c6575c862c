//! The virtual clock and its event queue: one heap ordered by time, ties broken by the order
//! events were scheduled in, so a run is a pure function of its scenario and seed.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in picoseconds: a 100 Gbit/s link moves one bit in 10 ps, so serialization
/// delays are exact integers at every usual rate.
pub type Ps = u64;

pub const PS_PER_NS: Ps = 1_000;

/// What happens at an instant.
#[derive(Debug)]
pub enum Event {
    /// The last bit of `frame` reaches node `node`.
    FrameArrives { node: usize, frame: Vec<u8> },
    /// A switch egress port finished sending `bytes`: its queue shrinks by them.
    QueueDrained {
        node: usize,
        port: usize,
        bytes: u64,
    },
    /// A card's engine runs (a doorbell arrived, a frame came in, or its previous batch ended).
    NicRuns { host: usize },
    /// A card's FLD steps (the NIC wrote into it, or its previous step did work).
    FldRuns { host: usize },
    /// A host's application looks at its memory and completion queues.
    AppWakes { host: usize },
}

struct Entry {
    at: Ps,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: the heap's top is the earliest event, the first scheduled among equals.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The future events of a run.
#[derive(Default)]
pub struct EventQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    /// Events taken so far.
    pub processed: u64,
}

impl EventQueue {
    pub fn schedule(&mut self, at: Ps, event: Event) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
    }

    /// The earliest event.
    pub fn pop(&mut self) -> Option<(Ps, Event)> {
        let e = self.heap.pop()?;
        self.processed += 1;
        Some((e.at, e.event))
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}
