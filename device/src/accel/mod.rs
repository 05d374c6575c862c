//! Accelerators on FLD's AXI4-Stream ports (paper §5.5). An accelerator receives packets with
//! metadata on the rx stream — it may not backpressure: a packet it cannot take is dropped and
//! counted by FLD — and sends packets on the tx stream, per queue, within the credits FLD grants.
//! A new accelerator model implements [`Accelerator`]; FLD needs no change.

pub mod defrag;
pub mod defrag_accel;
pub mod iot;
pub mod iot_accel;
pub mod mux;
pub mod rdma;
pub mod zuc;
pub mod zuc_accel;

/// Metadata accompanying a packet on the rx stream, derived from the NIC's completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxMeta {
    /// FLD receive queue the packet arrived on.
    pub queue: u16,
    /// Context ID set by the `accelerate` rule (identifies the tenant, §5.4).
    pub context: u16,
    /// The flow table the NIC should resume at when the packet comes back (§5.3).
    pub resume_table: Option<u8>,
    /// NIC parse and checksum results (`fld_abi::nic::cqe_csum` bits).
    pub csum: u8,
    pub rss_hash: u32,
    pub len: u32,
    /// FLD-R: the packet is part of an RDMA message on queue pair `queue` (§6: the shared
    /// multi-packet RQ completes every packet as it arrives, so the packets of different
    /// queues' messages interleave and the accelerator reassembles them).
    pub rdma: Option<RdmaRx>,
}

/// Where an FLD-R packet sits in its message, and the message's immediate data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaRx {
    pub first: bool,
    pub last: bool,
    /// SEND with immediate: on the last packet.
    pub imm: Option<u32>,
}

/// The RDMA operation an accelerator asks an FLD-R queue for (§5.3: SEND and WRITE, with or
/// without immediate; READ and atomics need a response path into the accelerator that FLD-R
/// does not have).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaOp {
    Send,
    SendImm(u32),
    Write {
        remote_addr: u64,
        rkey: u32,
    },
    WriteImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
}

/// Metadata an accelerator attaches to a packet on the tx stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxMeta {
    /// FLD transmit queue.
    pub queue: u16,
    /// Checksum insertion requests for the NIC (`fld_abi::nic::CS_L3`, `CS_L4`).
    pub cs_flags: u8,
    /// Resume the NIC's steering at this flow table (the next-table ID of the `accelerate`
    /// action); `None` sends the packet through the eSwitch as usual.
    pub resume_table: Option<u8>,
    /// FLD-R queues: the operation (`None` is a SEND); Ethernet queues refuse it.
    pub rdma: Option<RdmaOp>,
}

/// Per-queue transmit credits: what the queue can take right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Credits {
    /// Packets (descriptor slots, bounded by the queue's ring and the shared pool).
    pub packets: u32,
    /// Payload bytes (whole chunks of the shared Tx buffer within the queue's window).
    pub bytes: u32,
}

/// Why the tx stream refused a packet. The accelerator still owns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxRefused {
    /// Not enough credits on that queue; retry after completions return some.
    NoCredit,
    /// The queue does not exist or is disabled (counted; retrying will not help).
    UnknownQueue,
    /// Empty or larger than the maximum packet size (counted).
    BadLength,
    /// The queue is in the error state (the NIC failed one of its WQEs); the control plane
    /// recovers it (counted).
    QueueError,
    /// An RDMA operation for an Ethernet queue (counted as an unknown queue).
    NotRdma,
}

/// The tx stream as an accelerator sees it.
pub trait TxStream {
    fn credits(&self, queue: u16) -> Credits;
    fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused>;
}

/// An accelerator model.
pub trait Accelerator: Send {
    /// A packet on the rx stream. Return false to refuse it (FLD drops and counts it).
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool;
    /// Called once per FLD step: a chance to send what earlier credits held back.
    fn poll(&mut self, _tx: &mut dyn TxStream) -> usize {
        0
    }
    fn name(&self) -> &'static str;
    /// The model's own counters by name (what a tool reports; FLD keeps its own statistics).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Frames an accelerator produced that wait for tx credits, in order, each with the resume
/// table it returns to the NIC with. Bounded (the model's output FIFO); buffers are reused, so
/// steady traffic allocates nothing.
pub struct TxHold {
    frames: std::collections::VecDeque<(Vec<u8>, Option<u8>)>,
    spare: Vec<Vec<u8>>,
    capacity: usize,
}

impl TxHold {
    pub fn new(capacity: usize) -> Self {
        TxHold {
            frames: Default::default(),
            spare: Vec::new(),
            capacity,
        }
    }

    pub fn is_full(&self) -> bool {
        self.frames.len() >= self.capacity
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// A buffer for a frame about to be built (a spare one when there is).
    pub fn take_buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// Returns a buffer [`Self::take_buffer`] gave once its frame went out.
    pub fn recycle(&mut self, b: Vec<u8>) {
        self.spare.push(b);
    }

    /// Queues an already built frame; false (the buffer kept as a spare) when full.
    pub fn push_built(&mut self, frame: Vec<u8>, resume_table: Option<u8>) -> bool {
        if self.is_full() {
            self.spare.push(frame);
            return false;
        }
        self.frames.push_back((frame, resume_table));
        true
    }

    /// Queues a frame that `build` writes into an empty buffer; false (nothing queued) when full.
    pub fn push_with(
        &mut self,
        resume_table: Option<u8>,
        build: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        if self.is_full() {
            return false;
        }
        let mut b = self.take_buffer();
        build(&mut b);
        self.frames.push_back((b, resume_table));
        true
    }

    /// Sends held frames in order until credits run out. The `n`-th frame sent in this call goes
    /// to `queue(n)`; a frame the stream refuses for good is discarded and handed to `refused`.
    /// Returns the frames sent.
    pub fn flush(
        &mut self,
        tx: &mut dyn TxStream,
        queue: impl Fn(usize) -> u16,
        mut refused: impl FnMut(TxRefused),
    ) -> usize {
        let mut sent = 0;
        while let Some((f, resume_table)) = self.frames.front() {
            let meta = TxMeta {
                queue: queue(sent),
                resume_table: *resume_table,
                ..Default::default()
            };
            match tx.send(&meta, f) {
                Ok(()) => sent += 1,
                Err(TxRefused::NoCredit) => break,
                Err(e) => refused(e),
            }
            if let Some((b, _)) = self.frames.pop_front() {
                self.spare.push(b);
            }
        }
        sent
    }
}

/// Sends every packet back out of a transmit queue with Ethernet source and destination
/// swapped (the paper's FLD-E echo accelerator, §8.1.1). Packets that find no credits wait in a
/// bounded holding buffer; beyond it they are refused (and counted by FLD as accelerator drops).
pub struct Echo {
    /// Transmit queues used in turn, starting at `tx_queue`.
    tx_queue: u16,
    queues: u16,
    next: u16,
    held: TxHold,
    pub echoed: u64,
}

impl Echo {
    pub fn new(tx_queue: u16, capacity: usize) -> Self {
        Self::spread(tx_queue, 1, capacity)
    }

    /// Echoes over `queues` transmit queues from `first`, one packet each in turn.
    pub fn spread(first: u16, queues: u16, capacity: usize) -> Self {
        Echo {
            tx_queue: first,
            queues: queues.max(1),
            next: 0,
            held: TxHold::new(capacity),
            echoed: 0,
        }
    }

    fn flush(&mut self, tx: &mut dyn TxStream) -> usize {
        let (first, queues, next) = (self.tx_queue, self.queues, self.next);
        // A frame the queue will never take is discarded.
        let n = self.held.flush(
            tx,
            |i| first + ((next as usize + i) % queues as usize) as u16,
            |_| {},
        );
        self.echoed += n as u64;
        self.next = ((next as usize + n) % queues as usize) as u16;
        n
    }
}

impl Accelerator for Echo {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        if data.len() < 12 {
            return false;
        }
        let mut b = self.held.take_buffer();
        b.extend_from_slice(&data[6..12]);
        b.extend_from_slice(&data[0..6]);
        b.extend_from_slice(&data[12..]);
        if self.held.is_empty() {
            // Nothing waits before it: straight out when the queue has credit.
            let meta = TxMeta {
                queue: self.tx_queue + self.next,
                resume_table: meta.resume_table,
                ..Default::default()
            };
            match tx.send(&meta, &b) {
                Ok(()) => {
                    self.echoed += 1;
                    self.next = (self.next + 1) % self.queues;
                    self.held.recycle(b);
                    return true;
                }
                Err(TxRefused::NoCredit) => {}
                // A frame the queue will never take is discarded, as `flush` does.
                Err(_) => {
                    self.held.recycle(b);
                    return true;
                }
            }
        }
        if !self.held.push_built(b, meta.resume_table) {
            return false;
        }
        self.flush(tx);
        true
    }

    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        self.flush(tx)
    }

    fn name(&self) -> &'static str {
        "echo"
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("echoed", self.echoed)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tx stream with a fixed number of packet credits that records what it got.
    struct Sink {
        credits: u32,
        sent: Vec<(TxMeta, Vec<u8>)>,
    }

    impl TxStream for Sink {
        fn credits(&self, _queue: u16) -> Credits {
            Credits {
                packets: self.credits,
                bytes: self.credits * 2048,
            }
        }
        fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
            if self.credits == 0 {
                return Err(TxRefused::NoCredit);
            }
            self.credits -= 1;
            self.sent.push((*meta, data.to_vec()));
            Ok(())
        }
    }

    #[test]
    fn echo_swaps_addresses_and_holds_packets_until_credits_return() {
        let mut e = Echo::new(3, 2);
        let mut tx = Sink {
            credits: 1,
            sent: vec![],
        };
        let frame: Vec<u8> = (0..64u8).collect();
        assert!(e.receive(&RxMeta::default(), &frame, &mut tx));
        assert!(e.receive(&RxMeta::default(), &frame, &mut tx));
        assert!(e.receive(&RxMeta::default(), &frame, &mut tx));
        // Holding buffer of 2 is full now: refused (FLD counts the drop).
        assert!(!e.receive(&RxMeta::default(), &frame, &mut tx));
        assert_eq!(tx.sent.len(), 1);
        let (meta, out) = &tx.sent[0];
        assert_eq!(meta.queue, 3);
        assert_eq!(&out[..6], &frame[6..12]);
        assert_eq!(&out[6..12], &frame[..6]);
        assert_eq!(&out[12..], &frame[12..]);
        tx.credits = 5;
        assert_eq!(e.poll(&mut tx), 2);
        assert_eq!(e.echoed, 3);
    }
}
