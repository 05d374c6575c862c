//! Wires: what a NIC port is connected to. The eSwitch itself is the internal loopback between
//! vPorts; the uplink vPort connects to a [`Wire`] — nothing, a loopback plug, a cable to another
//! card of the same process ([`link`]), any of them behind seeded faults ([`FaultyWire`]); the
//! wires that need the operating system (a UDP link to another process, a TAP device) live with
//! the `fldemu` binary — and a [`FrameTap`] can observe every port, e.g. into a pcap file that
//! Wireshark and tshark read.

pub mod faults;
pub mod link;
pub mod pcap;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub use faults::{FaultCounters, Faults, FaultyWire};
pub use link::{link, LinkCounters, LinkEnd};
pub use pcap::PcapTap;

/// A full-duplex link on the uplink port.
pub trait Wire: Send {
    /// The NIC puts a frame on the wire.
    fn transmit(&mut self, frame: &[u8]);
    /// The next frame arriving from the wire, copied into `buf`; returns its length.
    fn receive(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// An engine pass starts: until [`Wire::end_burst`] the wire may hold what the NIC
    /// transmits and put it on the cable at once, as a port's transmit FIFO sends a burst. A
    /// wire whose other end runs on another thread then hands frames over once a pass, not
    /// once a frame.
    fn begin_burst(&mut self) {}
    /// The pass is over: everything transmitted since [`Wire::begin_burst`] is on the cable, in
    /// order.
    fn end_burst(&mut self) {}
}

/// A boxed wire is a wire (so wrappers such as [`FaultyWire`] take any).
impl<W: Wire + ?Sized> Wire for Box<W> {
    fn transmit(&mut self, frame: &[u8]) {
        (**self).transmit(frame)
    }
    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        (**self).receive(buf)
    }
    fn begin_burst(&mut self) {
        (**self).begin_burst()
    }
    fn end_burst(&mut self) {
        (**self).end_burst()
    }
}

/// An unplugged port: transmitted frames vanish, nothing arrives.
#[derive(Default)]
pub struct NullWire {
    pub dropped: u64,
}

impl Wire for NullWire {
    fn transmit(&mut self, _frame: &[u8]) {
        self.dropped += 1;
    }
    fn receive(&mut self, _buf: &mut [u8]) -> Option<usize> {
        None
    }
}

/// A loopback plug: every frame sent comes back in, in order. It holds at most `capacity`
/// frames in flight; more are dropped and counted, like a full link buffer. Buffers are reused,
/// so steady traffic allocates nothing.
pub struct LoopbackWire {
    in_flight: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    capacity: usize,
    pub dropped: u64,
}

impl LoopbackWire {
    pub fn new(capacity: usize) -> Self {
        LoopbackWire {
            in_flight: VecDeque::with_capacity(capacity),
            spare: Vec::new(),
            capacity,
            dropped: 0,
        }
    }
}

impl Wire for LoopbackWire {
    fn transmit(&mut self, frame: &[u8]) {
        if self.in_flight.len() >= self.capacity {
            self.dropped += 1;
            return;
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        self.in_flight.push_back(b);
    }
    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        let f = self.in_flight.pop_front()?;
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        self.spare.push(f);
        Some(n)
    }
}

/// Frames from a capture, played into the uplink: at most `burst` frames per NIC poll (the
/// wire answers "nothing more" after each burst), so the card sees the capture at the pace it
/// processes it rather than all at once. Frames the NIC transmits are counted and discarded.
pub struct ReplayWire {
    frames: VecDeque<Vec<u8>>,
    burst: usize,
    in_burst: usize,
    /// Frames still to be played, for the caller to watch.
    pub remaining: Arc<AtomicUsize>,
    /// Frames the NIC put on the wire.
    pub transmitted: Arc<AtomicU64>,
}

impl ReplayWire {
    pub fn new(frames: impl IntoIterator<Item = Vec<u8>>, burst: usize) -> Self {
        let frames: VecDeque<Vec<u8>> = frames.into_iter().collect();
        ReplayWire {
            remaining: Arc::new(frames.len().into()),
            frames,
            burst: burst.max(1),
            in_burst: 0,
            transmitted: Default::default(),
        }
    }
}

impl Wire for ReplayWire {
    fn transmit(&mut self, _frame: &[u8]) {
        self.transmitted.fetch_add(1, Ordering::Relaxed);
    }
    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.in_burst == self.burst {
            self.in_burst = 0;
            return None;
        }
        let f = self.frames.pop_front()?;
        self.in_burst += 1;
        self.remaining.fetch_sub(1, Ordering::Relaxed);
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Some(n)
    }
}

/// Where a tap saw a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapPoint {
    /// The vPort sent the frame into the eSwitch.
    FromVport,
    /// The eSwitch delivered the frame to the vPort (before its receive steering).
    ToVport,
}

/// Observes frames at the eSwitch ports.
pub trait FrameTap: Send {
    /// `frame` passed `point` of `vport` at `now_ns` on the NIC's clock.
    fn frame(&mut self, now_ns: u64, vport: u16, point: TapPoint, frame: &[u8]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_returns_frames_in_order_and_counts_overflow() {
        let mut w = LoopbackWire::new(2);
        w.transmit(&[1, 2, 3]);
        w.transmit(&[4]);
        w.transmit(&[5]);
        assert_eq!(w.dropped, 1);
        let mut b = [0u8; 16];
        assert_eq!(w.receive(&mut b), Some(3));
        assert_eq!(&b[..3], &[1, 2, 3]);
        assert_eq!(w.receive(&mut b), Some(1));
        assert_eq!(b[0], 4);
        assert_eq!(w.receive(&mut b), None);
    }

    #[test]
    fn replay_plays_a_burst_per_poll_in_order() {
        let mut w = ReplayWire::new((0..5u8).map(|i| vec![i; 3]), 2);
        let mut b = [0u8; 8];
        let mut polls = Vec::new();
        for _ in 0..4 {
            let mut got = Vec::new();
            while let Some(n) = w.receive(&mut b) {
                got.push(b[..n].to_vec());
            }
            polls.push(got);
        }
        assert_eq!(
            polls,
            vec![
                vec![vec![0; 3], vec![1; 3]],
                vec![vec![2; 3], vec![3; 3]],
                vec![vec![4; 3]],
                vec![]
            ]
        );
        assert_eq!(w.remaining.load(Ordering::Relaxed), 0);
        w.transmit(&[1]);
        assert_eq!(w.transmitted.load(Ordering::Relaxed), 1);
    }
}
