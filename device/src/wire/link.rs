//! A cable between two NIC ports of one process: what one end transmits, the other receives,
//! in order, up to a capacity per direction (beyond it frames are dropped and counted, as a full
//! link buffer drops them). Two cards joined this way are two machines of one test or
//! benchmark, stepped by one runner or each on a thread of its own. Either way each end hands
//! frames over in batches — the sender what a NIC pass transmitted ([`Wire::begin_burst`]), the
//! receiver all that is queued — so two threads meet once per batch, not once per frame.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::Wire;

/// Bytes a frame buffer holds from the start: the largest frame a port sends at the default
/// MTU, so that which buffer a frame gets never makes it grow — steady traffic of any mix of
/// sizes allocates nothing once enough buffers are in circulation.
const FRAME_BUFFER: usize = crate::nic::frame_buffer_len(crate::nic::DEFAULT_MTU);

/// One direction of the cable.
#[derive(Default)]
struct Lane {
    frames: Mutex<LaneFrames>,
    /// Frames in `frames.queue`, written under its lock and read without it: a receiver polled
    /// on every engine pass finds an empty lane without taking the lock.
    queued: AtomicUsize,
    /// Frames the receiving end has taken off the queue in a batch and not yet received: still
    /// in flight, so they count against the capacity. Written by the receiver alone; a sender
    /// reading an older, larger count drops early, never late.
    held: AtomicUsize,
}

#[derive(Default)]
struct LaneFrames {
    queue: VecDeque<Vec<u8>>,
    /// Buffers of frames already received, reused so steady traffic allocates nothing.
    spare: Vec<Vec<u8>>,
    counters: LinkCounters,
}

/// One end of a [`link`].
pub struct LinkEnd {
    tx: Arc<Lane>,
    rx: Arc<Lane>,
    capacity: usize,
    /// Frames taken from the receiving lane under one lock, all that were queued, and handed
    /// out one by one without it: a lock per batch where there was one per frame.
    inbox: VecDeque<Vec<u8>>,
    /// Buffers of frames received from the inbox, given back to the lane with the next batch.
    spent: Vec<Vec<u8>>,
    /// Frames transmitted and not yet on the cable: during a burst, all of them; otherwise
    /// none once `transmit` returns.
    outbox: Vec<Vec<u8>>,
    /// Buffers for the outbox, taken from the lane's spares whenever the outbox goes out (the
    /// lock is held then anyway) and when a transmit finds none left.
    free: Vec<Vec<u8>>,
    /// Between [`Wire::begin_burst`] and [`Wire::end_burst`].
    bursting: bool,
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
        self.tx
            .frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counters
    }

    fn new(tx: Arc<Lane>, rx: Arc<Lane>, capacity: usize) -> Self {
        LinkEnd {
            tx,
            rx,
            capacity,
            inbox: VecDeque::new(),
            spent: Vec::new(),
            outbox: Vec::new(),
            free: Vec::new(),
            bursting: false,
        }
    }

    /// Puts the outbox on the cable under one lock, in order: each frame is carried, or
    /// dropped when the lane already holds `capacity` (counting what the receiver has taken
    /// and not yet received). Takes the lane's spare buffers for the next frames.
    fn send_outbox(&mut self) {
        let mut f = self.tx.frames.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.tx.held.load(Ordering::Relaxed);
        for b in self.outbox.drain(..) {
            if f.queue.len() + held >= self.capacity {
                f.counters.dropped += 1;
                self.free.push(b);
            } else {
                f.queue.push_back(b);
                f.counters.carried += 1;
            }
        }
        self.free.append(&mut f.spare);
        // Release: a receiver that sees the count sees the frames (it takes the lock anyway).
        self.tx.queued.store(f.queue.len(), Ordering::Release);
    }

    /// Moves every frame queued on the receiving lane into the inbox, and gives the lane back
    /// the buffers received since the last batch: at the latest when the inbox has run dry, so
    /// the sender finds them as it did when each went back as it was received. False when
    /// nothing was queued.
    fn take_batch(&mut self) -> bool {
        if self.rx.queued.load(Ordering::Acquire) == 0 && self.spent.is_empty() {
            return false;
        }
        let mut f = self.rx.frames.lock().unwrap_or_else(|e| e.into_inner());
        // Moved, not swapped: each deque keeps the allocation it grew to, so steady traffic
        // allocates nothing.
        self.inbox.extend(f.queue.drain(..));
        f.spare.append(&mut self.spent);
        self.rx.held.store(self.inbox.len(), Ordering::Relaxed);
        self.rx.queued.store(0, Ordering::Relaxed);
        !self.inbox.is_empty()
    }
}

/// A cable: two ends, each holding at most `capacity` frames in flight per direction.
pub fn link(capacity: usize) -> (LinkEnd, LinkEnd) {
    let (a, b) = (Arc::new(Lane::default()), Arc::new(Lane::default()));
    (
        LinkEnd::new(a.clone(), b.clone(), capacity),
        LinkEnd::new(b, a, capacity),
    )
}

impl Wire for LinkEnd {
    fn transmit(&mut self, frame: &[u8]) {
        if self.free.is_empty() {
            // Buffers the receiver gave back since the outbox last went out.
            let mut f = self.tx.frames.lock().unwrap_or_else(|e| e.into_inner());
            self.free.append(&mut f.spare);
        }
        let mut b = self
            .free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(FRAME_BUFFER.max(frame.len())));
        b.clear();
        b.extend_from_slice(frame);
        self.outbox.push(b);
        if !self.bursting {
            self.send_outbox();
        }
    }

    fn begin_burst(&mut self) {
        self.bursting = true;
    }

    fn end_burst(&mut self) {
        self.bursting = false;
        if !self.outbox.is_empty() {
            self.send_outbox();
        }
    }

    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.inbox.is_empty() && !self.take_batch() {
            return None;
        }
        let frame = self.inbox.pop_front()?;
        self.rx.held.store(self.inbox.len(), Ordering::Relaxed);
        let n = frame.len().min(buf.len());
        buf[..n].copy_from_slice(&frame[..n]);
        self.spent.push(frame);
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: u32) -> [u8; 4] {
        n.to_le_bytes()
    }

    fn received(end: &mut LinkEnd) -> Option<u32> {
        let mut buf = [0u8; 16];
        let n = end.receive(&mut buf)?;
        assert_eq!(n, 4);
        Some(u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]))
    }

    #[test]
    fn frames_taken_in_a_batch_stay_in_flight_until_received() {
        let (mut a, mut b) = link(4);
        for n in 1..=4 {
            a.transmit(&frame(n));
        }
        // The receiver takes all four in one batch and receives one: three are still in flight.
        assert_eq!(received(&mut b), Some(1));
        a.transmit(&frame(5));
        a.transmit(&frame(6));
        assert_eq!(
            a.sent(),
            LinkCounters {
                carried: 5,
                dropped: 1
            }
        );
        // What was queued behind the batch follows it, in order.
        let rest: Vec<u32> = std::iter::from_fn(|| received(&mut b)).collect();
        assert_eq!(rest, [2, 3, 4, 5]);
        assert_eq!(b.sent(), LinkCounters::default());
    }

    #[test]
    fn a_burst_goes_on_the_cable_when_it_ends_in_order_and_up_to_the_capacity() {
        let (mut a, mut b) = link(4);
        a.transmit(&frame(1));
        a.begin_burst();
        for n in 2..=6 {
            a.transmit(&frame(n));
        }
        // Only the frame sent outside the burst is on the cable yet.
        assert_eq!(received(&mut b), Some(1));
        assert_eq!(received(&mut b), None);
        a.end_burst();
        // The lane was empty when the burst went out: four of its five fit.
        assert_eq!(
            a.sent(),
            LinkCounters {
                carried: 5,
                dropped: 1
            }
        );
        let rest: Vec<u32> = std::iter::from_fn(|| received(&mut b)).collect();
        assert_eq!(rest, [2, 3, 4, 5]);
        // After the burst every frame goes out as it is sent again.
        a.transmit(&frame(7));
        assert_eq!(received(&mut b), Some(7));
    }

    #[test]
    fn a_sender_and_a_receiver_on_two_threads_keep_order_and_count_every_frame() {
        const FRAMES: u32 = 200_000;
        let (mut a, mut b) = link(64);
        let sender = std::thread::spawn(move || {
            // Half the frames one by one, half in bursts of 1 to 7.
            for n in 0..FRAMES {
                if n >= FRAMES / 2 && n % 7 == 0 {
                    a.end_burst();
                    a.begin_burst();
                }
                a.transmit(&frame(n));
            }
            a.end_burst();
            a
        });
        let mut got = 0u64;
        let mut last = None;
        loop {
            match received(&mut b) {
                Some(n) => {
                    assert!(last.is_none_or(|l| n > l), "{n} after {last:?}");
                    last = Some(n);
                    got += 1;
                }
                None if sender.is_finished() => {
                    if b.rx.queued.load(Ordering::Acquire) == 0 && b.inbox.is_empty() {
                        break;
                    }
                }
                None => std::hint::spin_loop(),
            }
        }
        let sent = sender.join().unwrap().sent();
        assert_eq!(sent.carried, got);
        assert_eq!(sent.carried + sent.dropped, u64::from(FRAMES));
    }
}
