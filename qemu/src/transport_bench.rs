//! What reaching the card through a transport costs: a trapped register access, a doorbell
//! through the shared doorbell page until its completion is visible, and the same doorbell until
//! the MSI-X interrupt of the receive side arrives. Run over vfio-user on the host and over
//! vfio-pci inside a guest (`cargo xtask bench-guest`), the figures show where the time goes.

use std::time::{Duration, Instant};

use fld_abi::nic::{reg, BAR_CONTROL, BAR_DOORBELL};
use serde::Serialize;

use crate::selftest::{test_frame, RawPort, Transport, RX_VECTOR};

/// Latency samples of one measurement, in microseconds.
#[derive(Serialize, Debug, Clone)]
pub struct Latency {
    pub samples: usize,
    pub mean_us: f64,
    pub median_us: f64,
    pub p99_us: f64,
}

impl Latency {
    fn from(mut d: Vec<Duration>) -> Latency {
        d.sort();
        let us = |x: Duration| x.as_secs_f64() * 1e6;
        let n = d.len().max(1);
        Latency {
            samples: d.len(),
            mean_us: d.iter().map(|x| us(*x)).sum::<f64>() / n as f64,
            median_us: d.get(d.len() / 2).map_or(0.0, |x| us(*x)),
            p99_us: d.get(d.len() * 99 / 100).map_or(0.0, |x| us(*x)),
        }
    }
}

/// The figures `bench-transport` prints.
#[derive(Serialize, Debug, Clone)]
pub struct TransportFigures {
    /// A read of a trapped control register (a message to the device model and back).
    pub mmio_read: Latency,
    /// A write of a trapped control register (not posted: the sender waits for the reply).
    pub mmio_write: Latency,
    /// A doorbell store into the shared doorbell page until the send completion is in memory
    /// (the driver polls the CQ); the lone WQE goes with it by MMIO (`docs/nic-interface.md`
    /// §4.1), its stores timed with the doorbell.
    pub doorbell_to_completion: Latency,
    /// The same with WQE by MMIO off: the card fetches the WQE by DMA (interleaved with the
    /// samples above, so both see the same machine).
    pub doorbell_to_completion_fetched: Latency,
    /// The same doorbell until the receiving function's MSI-X vector is seen on its eventfd.
    pub doorbell_to_msix: Latency,
    /// Whether the doorbell page was a plain store (mmap) rather than a message.
    pub doorbell_mapped: bool,
}

/// Measures `iterations` of each figure.
pub fn measure(t: &Transport, iterations: usize) -> Result<TransportFigures, String> {
    let card = t.open(16 << 20).map_err(|e| format!("open: {e}"))?;
    let (dev0, dev1) = (card.nic[0].clone(), card.nic[1].clone());
    let mut p0 = RawPort::open(dev0.clone()).map_err(|e| format!("port 0: {e}"))?;
    let mut p1 = RawPort::open(dev1.clone()).map_err(|e| format!("port 1: {e}"))?;

    let mut reads = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t0 = Instant::now();
        std::hint::black_box(dev0.read32(BAR_CONTROL, reg::DEVICE_STATUS));
        reads.push(t0.elapsed());
    }
    let mut writes = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t0 = Instant::now();
        // The command-interface scratch register: no side effect.
        dev0.write32(BAR_CONTROL, reg::CMD_IN_LEN, 0);
        writes.push(t0.elapsed());
    }

    let frame = test_frame(p1.nic.mac(), p0.nic.mac(), 64);
    p0.buf.write(0, &frame);
    let deadline = Duration::from_secs(5);
    let mut to_completion = [
        Vec::with_capacity(iterations),
        Vec::with_capacity(iterations),
    ];
    for i in 0..2 * iterations {
        let by_mmio = i % 2 == 0;
        p0.sq.set_wqe_by_mmio(by_mmio);
        post_signalled(&mut p0, &frame)?;
        let t0 = Instant::now();
        p0.sq.ring_doorbell();
        while p0.cq.poll().is_none() {
            if t0.elapsed() > deadline {
                return Err("no send completion".into());
            }
            std::hint::spin_loop();
        }
        to_completion[usize::from(!by_mmio)].push(t0.elapsed());
        p0.cq.update_ci();
        // The receiver consumes and reposts so its queue never runs dry.
        drain_receiver(&mut p1);
    }
    p0.sq.set_wqe_by_mmio(true);
    let [to_completion, fetched] = to_completion;

    let mut to_msix = Vec::with_capacity(iterations);
    dev1.take_interrupts(RX_VECTOR);
    for _ in 0..iterations {
        p1.rq_cq.arm();
        post_signalled(&mut p0, &frame)?;
        let t0 = Instant::now();
        p0.sq.ring_doorbell();
        while dev1.take_interrupts(RX_VECTOR) == 0 {
            if t0.elapsed() > deadline {
                return Err("no MSI-X interrupt".into());
            }
            std::hint::spin_loop();
        }
        to_msix.push(t0.elapsed());
        while p0.cq.poll().is_none() {
            std::hint::spin_loop();
        }
        p0.cq.update_ci();
        drain_receiver(&mut p1);
        while p1.rx_eq.poll().is_some() {}
        p1.rx_eq.arm();
    }
    Ok(TransportFigures {
        mmio_read: Latency::from(reads),
        mmio_write: Latency::from(writes),
        doorbell_to_completion: Latency::from(to_completion),
        doorbell_to_completion_fetched: Latency::from(fetched),
        doorbell_to_msix: Latency::from(to_msix),
        doorbell_mapped: dev0.bar_is_mapped(BAR_DOORBELL),
    })
}

/// Posts `frame` (already in the port's buffer) as one signalled send WQE, without ringing.
fn post_signalled(p: &mut RawPort, frame: &[u8]) -> Result<(), String> {
    p.sq.post(&fld_driver::nic::SendWqe {
        inline_header: &frame[..14],
        gather: &[(p.buf.iova() + 14, frame.len() as u32 - 14)],
        cs_flags: 0,
        signal: true,
        ..Default::default()
    })
    .map(|_| ())
    .map_err(|e| format!("post: {e}"))
}

/// Consumes every receive completion of `p` and gives its buffer back to the receive queue.
fn drain_receiver(p: &mut RawPort) {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut got = false;
    while !got && Instant::now() < deadline {
        while let Some(c) = p.rq_cq.poll() {
            got = true;
            let slot = c.wqe_counter.get() as u64 % 8;
            p.rq.post(p.buf.iova() + slot * 2048, 2048);
        }
    }
    p.rq.ring_doorbell();
    p.rq_cq.update_ci();
}
