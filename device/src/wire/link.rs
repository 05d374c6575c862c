//! A cable between two NIC ports of one process: what one end transmits, the other receives,
//! in order, up to a capacity per direction (beyond it frames are dropped and counted, as a full
//! link buffer drops them). Two cards joined this way are two machines of one test or
//! benchmark, stepped by one runner.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::Wire;

/// One direction of the cable.
#[derive(Default)]
struct Lane {
    frames: Mutex<LaneFrames>,
    /// Frames in `frames.queue`, written under its lock and read without it: a receiver polled
    /// on every engine pass finds an empty lane without taking the lock.
    queued: AtomicUsize,
    dropped: AtomicU64,
    carried: AtomicU64,
}

#[derive(Default)]
struct LaneFrames {
    queue: VecDeque<Vec<u8>>,
    /// Buffers of frames already received, reused so steady traffic allocates nothing.
    spare: Vec<Vec<u8>>,
}

/// One end of a [`link`].
pub struct LinkEnd {
    tx: Arc<Lane>,
    rx: Arc<Lane>,
    capacity: usize,
}

/// Counters of one direction of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub carried: u64,
    pub dropped: u64,
}

impl LinkEnd {
    /// Frames this end put on the cable, and those the full cable dropped.
    pub fn sent(&self) -> LinkCounters {
        LinkCounters {
            carried: self.tx.carried.load(Ordering::Relaxed),
            dropped: self.tx.dropped.load(Ordering::Relaxed),
        }
    }
}

/// A cable: two ends, each holding at most `capacity` frames in flight per direction.
pub fn link(capacity: usize) -> (LinkEnd, LinkEnd) {
    let (a, b) = (Arc::new(Lane::default()), Arc::new(Lane::default()));
    (
        LinkEnd {
            tx: a.clone(),
            rx: b.clone(),
            capacity,
        },
        LinkEnd {
            tx: b,
            rx: a,
            capacity,
        },
    )
}

impl Wire for LinkEnd {
    fn transmit(&mut self, frame: &[u8]) {
        let mut f = self.tx.frames.lock().unwrap_or_else(|e| e.into_inner());
        if f.queue.len() >= self.capacity {
            self.tx.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut b = f.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        f.queue.push_back(b);
        // Release: a receiver that sees the count sees the frame (it takes the lock anyway).
        self.tx.queued.store(f.queue.len(), Ordering::Release);
        self.tx.carried.fetch_add(1, Ordering::Relaxed);
    }

    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.rx.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut f = self.rx.frames.lock().unwrap_or_else(|e| e.into_inner());
        let frame = f.queue.pop_front()?;
        self.rx.queued.store(f.queue.len(), Ordering::Relaxed);
        let n = frame.len().min(buf.len());
        buf[..n].copy_from_slice(&frame[..n]);
        f.spare.push(frame);
        Some(n)
    }
}
