//! Seeded, reproducible faults on any wire: loss, duplication, reordering and delay of the
//! frames one end transmits, decided by a pseudo-random generator from a seed, so a failing run
//! is replayed exactly by running it again with the same seed.
//!
//! Delay and reordering are counted in the wire's own steps — receive calls, i.e. NIC polls — not
//! in wall-clock time, which the model does not know; the virtual-time runner gives them
//! durations.

use std::collections::VecDeque;

use super::Wire;

/// What goes wrong, per transmitted frame.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame arrives twice.
    pub duplicate: f64,
    /// Probability that a frame is held back and overtaken by up to `reorder_depth` later
    /// frames.
    pub reorder: f64,
    pub reorder_depth: usize,
    /// Every frame arrives this many receive calls after it was sent.
    pub delay_steps: u64,
    pub seed: u64,
}

/// What the injector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    pub transmitted: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
}

/// A wire whose transmit side misbehaves as [`Faults`] say; its receive side is the inner
/// wire's.
pub struct FaultyWire<W: Wire> {
    inner: W,
    faults: Faults,
    rng: fastrand::Rng,
    /// Frames waiting to go out: (step at which they may leave, bytes).
    held: VecDeque<(u64, Vec<u8>)>,
    /// A frame held back for reordering: how many later frames may still pass it, the step by
    /// which it leaves anyway (traffic may stop), and its bytes.
    parked: Option<(usize, u64, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    step: u64,
    pub counters: FaultCounters,
}

impl<W: Wire> FaultyWire<W> {
    pub fn new(inner: W, faults: Faults) -> Self {
        FaultyWire {
            inner,
            rng: fastrand::Rng::with_seed(faults.seed),
            faults,
            held: VecDeque::new(),
            parked: None,
            spare: Vec::new(),
            step: 0,
            counters: FaultCounters::default(),
        }
    }

    fn copy(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(frame);
        b
    }

    /// Queues a frame for the inner wire after the configured delay.
    fn schedule(&mut self, frame: Vec<u8>) {
        self.held
            .push_back((self.step + self.faults.delay_steps, frame));
    }

    /// Hands every frame whose time has come to the inner wire.
    fn release(&mut self) {
        while self.held.front().is_some_and(|(at, _)| *at <= self.step) {
            if let Some((_, f)) = self.held.pop_front() {
                self.inner.transmit(&f);
                self.spare.push(f);
            }
        }
    }
}

impl<W: Wire> Wire for FaultyWire<W> {
    fn transmit(&mut self, frame: &[u8]) {
        self.counters.transmitted += 1;
        let f = self.faults;
        if self.rng.f64() < f.loss {
            self.counters.lost += 1;
            return;
        }
        let copies = if self.rng.f64() < f.duplicate {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let b = self.copy(frame);
            if self.parked.is_none() && f.reorder_depth > 0 && self.rng.f64() < f.reorder {
                self.counters.reordered += 1;
                let depth = 1 + self.rng.usize(..f.reorder_depth);
                let deadline = self.step + depth as u64;
                self.parked = Some((depth, deadline, b));
                continue;
            }
            self.schedule(b);
            // The parked frame goes out once enough later frames passed it.
            if let Some((left, _, _)) = self.parked.as_mut() {
                *left -= 1;
                if *left == 0 {
                    if let Some((_, _, p)) = self.parked.take() {
                        self.schedule(p);
                    }
                }
            }
        }
        self.release();
    }

    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.step += 1;
        // A parked frame never waits for ever: when traffic stops it goes out after as many
        // steps as frames could have passed it.
        if self
            .parked
            .as_ref()
            .is_some_and(|(_, at, _)| *at <= self.step)
        {
            if let Some((_, _, p)) = self.parked.take() {
                self.schedule(p);
            }
        }
        self.release();
        self.inner.receive(buf)
    }
    fn begin_burst(&mut self) {
        self.inner.begin_burst()
    }
    fn end_burst(&mut self) {
        self.inner.end_burst()
    }
}

#[cfg(test)]
mod tests {
    use super::super::link::link;
    use super::*;

    /// Sends `n` numbered frames through a faulty end and returns what the other end got.
    fn run(faults: Faults, n: u32) -> (Vec<u32>, FaultCounters) {
        let (a, mut b) = link(1 << 16);
        let mut a = FaultyWire::new(a, faults);
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        for i in 0..n {
            a.transmit(&i.to_le_bytes());
            a.receive(&mut buf);
            while let Some(k) = b.receive(&mut buf) {
                got.push(u32::from_le_bytes(buf[..k].try_into().unwrap()));
            }
        }
        for _ in 0..faults.delay_steps + 2 {
            a.receive(&mut buf);
            while let Some(k) = b.receive(&mut buf) {
                got.push(u32::from_le_bytes(buf[..k].try_into().unwrap()));
            }
        }
        (got, a.counters)
    }

    #[test]
    fn each_fault_happens_at_its_rate_and_a_seed_replays_it() {
        let n = 20_000;
        let (clean, _) = run(Faults::default(), n);
        assert_eq!(clean, (0..n).collect::<Vec<_>>());
        let lossy = Faults {
            loss: 0.05,
            seed: 7,
            ..Default::default()
        };
        let (got, c) = run(lossy, n);
        assert_eq!(got.len() as u64, n as u64 - c.lost);
        assert!((800..1200).contains(&c.lost), "5% of 20k: {}", c.lost);
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "loss alone keeps order"
        );
        assert_eq!(run(lossy, n), (got, c), "the same seed, the same run");

        let dup = Faults {
            duplicate: 0.02,
            seed: 8,
            ..Default::default()
        };
        let (got, c) = run(dup, n);
        assert_eq!(got.len() as u64, n as u64 + c.duplicated);
        assert!((300..500).contains(&c.duplicated));

        let shuffle = Faults {
            reorder: 0.03,
            reorder_depth: 4,
            seed: 9,
            ..Default::default()
        };
        let (got, c) = run(shuffle, n);
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "nothing lost or added");
        let inversions = got.windows(2).filter(|w| w[0] > w[1]).count() as u64;
        assert!(
            inversions > 0 && inversions <= c.reordered,
            "{inversions} of {}",
            c.reordered
        );
        // A frame overtaken by at most `depth` later ones.
        for (pos, v) in got.iter().enumerate() {
            assert!(pos as i64 - *v as i64 <= 4, "frame {v} at {pos}");
        }

        let slow = Faults {
            delay_steps: 3,
            ..Default::default()
        };
        let (a, mut b) = link(16);
        let mut a = FaultyWire::new(a, slow);
        let mut buf = [0u8; 4];
        a.transmit(&[1]);
        let mut steps = 0;
        while b.receive(&mut buf).is_none() {
            a.receive(&mut buf);
            steps += 1;
        }
        assert_eq!(steps, 3, "arrives after three steps");
    }
}
