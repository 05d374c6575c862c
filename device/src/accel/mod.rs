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
    /// Sends the packets of `burst` in order, as [`Self::send`] would one by one, and stops at
    /// the first it refuses: returns how many it took and why it refused the next (`None` when
    /// it took them all). The AXI port streams a burst back to back (§5.5), so a stream may
    /// check what the packets share once; the default sends them one by one.
    fn send_burst(&mut self, burst: TxBurst<'_>) -> (usize, Option<TxRefused>) {
        for (n, (meta, data)) in burst.iter().enumerate() {
            if let Err(e) = self.send(meta, data) {
                return (n, Some(e));
            }
        }
        (burst.len(), None)
    }
}

/// One packet of a [`TxBatch`]: its metadata and the span of its bytes in the batch's buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TxPacket {
    meta: TxMeta,
    at: usize,
    len: usize,
}

/// Packets an accelerator builds to send in one go with [`TxStream::send_burst`], back to back
/// in one buffer. Kept across bursts, so steady traffic allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct TxBatch {
    buffer: Vec<u8>,
    packets: Vec<TxPacket>,
}

impl TxBatch {
    pub fn clear(&mut self) {
        self.buffer.clear();
        self.packets.clear();
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Appends a packet whose bytes `build` appends to the buffer it is given.
    pub fn push_with(&mut self, meta: TxMeta, build: impl FnOnce(&mut Vec<u8>)) {
        let at = self.buffer.len();
        build(&mut self.buffer);
        // `build` may only append: whatever it did, the packet is the bytes after `at`.
        let at = at.min(self.buffer.len());
        self.packets.push(TxPacket {
            meta,
            at,
            len: self.buffer.len() - at,
        });
    }

    /// Packet `i`: its metadata and bytes.
    pub fn get(&self, i: usize) -> Option<(&TxMeta, &[u8])> {
        let p = self.packets.get(i)?;
        Some((&p.meta, self.buffer.get(p.at..p.at + p.len)?))
    }

    /// The metadata of the packets from `from` on, to set before sending them (a queue each).
    pub fn metas_mut(&mut self, from: usize) -> impl Iterator<Item = &mut TxMeta> {
        self.packets.iter_mut().skip(from).map(|p| &mut p.meta)
    }

    /// The packets from `from` on, as a burst for [`TxStream::send_burst`].
    pub fn burst(&self, from: usize) -> TxBurst<'_> {
        TxBurst {
            buffer: &self.buffer,
            packets: self.packets.get(from..).unwrap_or_default(),
        }
    }
}

/// Packets of a [`TxBatch`] handed to the tx stream in order.
#[derive(Clone, Copy)]
pub struct TxBurst<'a> {
    buffer: &'a [u8],
    packets: &'a [TxPacket],
}

impl<'a> TxBurst<'a> {
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// The packets with their bytes, in order (every one lies in the buffer: a batch built it).
    pub fn iter(&self) -> impl Iterator<Item = (&'a TxMeta, &'a [u8])> + 'a {
        let buffer = self.buffer;
        self.packets
            .iter()
            .map(move |p| (&p.meta, buffer.get(p.at..p.at + p.len).unwrap_or_default()))
    }
}

/// The packets one FLD step delivers on the rx stream, in arrival order: the completions the
/// NIC wrote since the last step, each packet read in place from FLD's Rx buffer. The AXI port
/// carries them back to back (§5.5), so an accelerator may handle the whole burst in one loop.
#[derive(Clone, Copy)]
pub struct RxBurst<'a> {
    buffer: &'a [u8],
    packets: &'a [RxPacket],
}

/// One packet of an [`RxBurst`]: its metadata and where its `meta.len` bytes start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxPacket {
    pub meta: RxMeta,
    pub at: usize,
}

impl<'a> RxBurst<'a> {
    /// A burst of `packets` lying in `buffer`; a packet that does not lie wholly inside it is
    /// skipped by [`Self::iter`] (FLD only builds bursts of packets that do).
    pub fn new(buffer: &'a [u8], packets: &'a [RxPacket]) -> Self {
        RxBurst { buffer, packets }
    }

    pub fn len(&self) -> usize {
        self.packets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// The packets with their bytes, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a RxMeta, &'a [u8])> + 'a {
        let buffer = self.buffer;
        self.packets.iter().filter_map(move |p| {
            let at = p.at;
            let data = buffer.get(at..at.checked_add(p.meta.len as usize)?)?;
            Some((&p.meta, data))
        })
    }
}

/// An accelerator model.
pub trait Accelerator: Send {
    /// A packet on the rx stream. Return false to refuse it (FLD drops and counts it).
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool;
    /// A burst of packets on the rx stream; returns how many were refused (FLD drops and
    /// counts them). The default hands them to [`Self::receive`] one by one.
    fn receive_burst(&mut self, burst: RxBurst<'_>, tx: &mut dyn TxStream) -> usize {
        burst
            .iter()
            .filter(|(meta, data)| !self.receive(meta, data, tx))
            .count()
    }
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
    /// The echoes of one rx burst, sent as one tx burst.
    out: TxBatch,
    pub echoed: u64,
}

/// Appends `data` with its Ethernet destination and source swapped (`data` holds both): one
/// copy, then the two addresses swapped in place.
fn swap_addresses(data: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    out.extend_from_slice(data);
    if let Some((dst, rest)) = out.get_mut(at..).and_then(|f| f.split_at_mut_checked(6)) {
        if let Some(src) = rest.get_mut(..6) {
            dst.swap_with_slice(src);
        }
    }
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
            out: TxBatch::default(),
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

    /// Echoes one packet, built in `scratch` (see [`Self::send_or_hold`]). False when refused.
    fn echo(
        &mut self,
        meta: &RxMeta,
        data: &[u8],
        scratch: &mut Vec<u8>,
        tx: &mut dyn TxStream,
    ) -> bool {
        if data.len() < 12 {
            return false;
        }
        scratch.clear();
        swap_addresses(data, scratch);
        self.send_or_hold(meta.resume_table, scratch, tx)
    }

    /// Sends the frame in `scratch` straight out when nothing waits before it and the queue has
    /// credit, holds it otherwise (the held frame keeps the buffer; `scratch` gets a spare one).
    /// False when refused.
    fn send_or_hold(
        &mut self,
        resume_table: Option<u8>,
        scratch: &mut Vec<u8>,
        tx: &mut dyn TxStream,
    ) -> bool {
        if self.held.is_empty() {
            let out = TxMeta {
                queue: self.tx_queue + self.next,
                resume_table,
                ..Default::default()
            };
            match tx.send(&out, scratch) {
                Ok(()) => {
                    self.echoed += 1;
                    self.next = (self.next + 1) % self.queues;
                    return true;
                }
                Err(TxRefused::NoCredit) => {}
                // A frame the queue will never take is discarded, as `flush` does.
                Err(_) => return true,
            }
        }
        self.hold(resume_table, scratch, tx)
    }

    /// Holds the frame in `scratch` behind what waits (and flushes what credits allow). False
    /// when the holding buffer is full.
    fn hold(
        &mut self,
        resume_table: Option<u8>,
        scratch: &mut Vec<u8>,
        tx: &mut dyn TxStream,
    ) -> bool {
        if self.held.is_full() {
            return false;
        }
        let frame = std::mem::replace(scratch, self.held.take_buffer());
        self.held.push_built(frame, resume_table);
        self.flush(tx);
        true
    }

    /// Sends the batch `out` as tx bursts, the queues taken in turn as one-by-one sends take
    /// them; from the first packet that finds no credit on, each is held as
    /// [`Self::send_or_hold`] holds it. Returns the packets refused.
    fn send_out(&mut self, tx: &mut dyn TxStream) -> usize {
        let mut from = 0;
        while from < self.out.len() {
            let (first, queues, next) = (self.tx_queue, self.queues as usize, self.next as usize);
            for (i, m) in self.out.metas_mut(from).enumerate() {
                m.queue = first + ((next + i) % queues) as u16;
            }
            let (n, why) = tx.send_burst(self.out.burst(from));
            self.echoed += n as u64;
            self.next = ((next + n) % queues) as u16;
            from += n;
            match why {
                None => break,
                Some(TxRefused::NoCredit) => return self.hold_from(from, tx),
                // A frame the queue will never take is discarded (and takes no queue's turn),
                // as `send_or_hold` does.
                Some(_) => from += 1,
            }
        }
        0
    }

    /// Holds packet `from` of `out`, which found no credit, and sends or holds the ones after
    /// it one by one.
    fn hold_from(&mut self, from: usize, tx: &mut dyn TxStream) -> usize {
        let mut scratch = self.held.take_buffer();
        let mut refused = 0;
        for i in from..self.out.len() {
            let Some((meta, frame)) = self.out.get(i) else {
                break;
            };
            let resume_table = meta.resume_table;
            scratch.clear();
            scratch.extend_from_slice(frame);
            let kept = if i == from {
                self.hold(resume_table, &mut scratch, tx)
            } else {
                self.send_or_hold(resume_table, &mut scratch, tx)
            };
            refused += usize::from(!kept);
        }
        self.held.recycle(scratch);
        refused
    }
}

impl Accelerator for Echo {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        let mut scratch = self.held.take_buffer();
        let accepted = self.echo(meta, data, &mut scratch, tx);
        self.held.recycle(scratch);
        accepted
    }

    /// The echoes of a burst go out as one tx burst. While earlier frames wait for credits,
    /// each packet queues behind them one by one (a flush may empty the hold part-way through
    /// the burst); the rest are built back to back and sent with one [`TxStream::send_burst`].
    /// The stream sees the sends one-by-one echoes would make, in the same order.
    fn receive_burst(&mut self, burst: RxBurst<'_>, tx: &mut dyn TxStream) -> usize {
        let mut refused = 0;
        let mut packets = burst.iter();
        if !self.held.is_empty() {
            let mut scratch = self.held.take_buffer();
            while !self.held.is_empty() {
                let Some((meta, data)) = packets.next() else {
                    break;
                };
                refused += usize::from(!self.echo(meta, data, &mut scratch, tx));
            }
            self.held.recycle(scratch);
        }
        self.out.clear();
        for (meta, data) in packets {
            if data.len() < 12 {
                refused += 1;
                continue;
            }
            let out = TxMeta {
                resume_table: meta.resume_table,
                ..Default::default()
            };
            self.out.push_with(out, |b| swap_addresses(data, b));
        }
        refused + self.send_out(tx)
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

    /// A tx stream with a fixed number of packet credits that records what it got, and every
    /// send it was asked for with its answer. Queue `dead` refuses everything for good.
    #[derive(Default)]
    struct Sink {
        credits: u32,
        dead: Option<u16>,
        sent: Vec<(TxMeta, Vec<u8>)>,
        asked: Vec<(TxMeta, usize, Result<(), TxRefused>)>,
    }

    impl Sink {
        fn with_credits(credits: u32) -> Self {
            Sink {
                credits,
                ..Default::default()
            }
        }
    }

    impl TxStream for Sink {
        fn credits(&self, _queue: u16) -> Credits {
            Credits {
                packets: self.credits,
                bytes: self.credits * 2048,
            }
        }
        fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
            let answer = if self.dead == Some(meta.queue) {
                Err(TxRefused::UnknownQueue)
            } else if self.credits == 0 {
                Err(TxRefused::NoCredit)
            } else {
                self.credits -= 1;
                self.sent.push((*meta, data.to_vec()));
                Ok(())
            };
            self.asked.push((*meta, data.len(), answer));
            answer
        }
    }

    /// A burst lying in one buffer, as FLD's Rx buffer holds it.
    fn burst_of(frames: &[Vec<u8>]) -> (Vec<u8>, Vec<RxPacket>) {
        let mut buffer = Vec::new();
        let mut packets = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            packets.push(RxPacket {
                meta: RxMeta {
                    len: f.len() as u32,
                    resume_table: (i % 3 == 0).then_some(i as u8),
                    ..Default::default()
                },
                at: buffer.len(),
            });
            buffer.extend_from_slice(f);
        }
        (buffer, packets)
    }

    /// The echo's tx bursts against the same packets echoed one by one (`receive`): the same
    /// sends asked for, in the same order with the same answers, and the same refusals.
    #[test]
    fn echo_sends_a_burst_as_it_sends_the_same_packets_one_by_one() {
        // Sizes around the 12 bytes an echo needs; credits that run out inside bursts and
        // return between them; a holding buffer that fills; a queue that refuses for good.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut one, mut burst) = (Echo::spread(2, 3, 8), Echo::spread(2, 3, 8));
        let (mut tx_one, mut tx_burst) = (Sink::default(), Sink::default());
        let (mut refused_one, mut refused_burst) = (0, 0);
        for _ in 0..400 {
            let credits = (next() % 12) as u32;
            tx_one.credits = credits;
            tx_burst.credits = credits;
            let dead = (next() % 5 == 0).then(|| 2 + (next() % 3) as u16);
            tx_one.dead = dead;
            tx_burst.dead = dead;
            let frames: Vec<Vec<u8>> = (0..next() % 16)
                .map(|_| (0..next() % 40).map(|_| next() as u8).collect())
                .collect();
            let (buffer, packets) = burst_of(&frames);
            let b = RxBurst::new(&buffer, &packets);
            for (meta, data) in b.iter() {
                refused_one += usize::from(!one.receive(meta, data, &mut tx_one));
            }
            refused_burst += burst.receive_burst(b, &mut tx_burst);
            if next() % 4 == 0 {
                tx_one.credits = 3;
                tx_burst.credits = 3;
                assert_eq!(one.poll(&mut tx_one), burst.poll(&mut tx_burst));
            }
        }
        assert_eq!(tx_burst.asked, tx_one.asked);
        assert_eq!(tx_burst.sent, tx_one.sent);
        assert_eq!(refused_burst, refused_one);
        assert_eq!(burst.echoed, one.echoed);
        let answered = |why| tx_one.asked.iter().filter(|a| a.2 == why).count();
        assert!(
            refused_one > 0
                && one.echoed > 200
                && answered(Err(TxRefused::NoCredit)) > 20
                && answered(Err(TxRefused::UnknownQueue)) > 20,
            "the mix exercised every path"
        );
    }

    #[test]
    fn a_burst_skips_a_packet_that_does_not_lie_in_its_buffer() {
        let buffer = [7u8; 100];
        let packets = [
            RxPacket {
                meta: RxMeta {
                    len: 60,
                    ..Default::default()
                },
                at: 40,
            },
            RxPacket {
                meta: RxMeta {
                    len: 61,
                    ..Default::default()
                },
                at: 40,
            },
            RxPacket {
                meta: RxMeta {
                    len: 1,
                    ..Default::default()
                },
                at: usize::MAX,
            },
        ];
        let b = RxBurst::new(&buffer, &packets);
        assert_eq!(b.len(), 3);
        let lens: Vec<usize> = b.iter().map(|(_, d)| d.len()).collect();
        assert_eq!(lens, [60]);
    }

    #[test]
    fn echo_swaps_addresses_and_holds_packets_until_credits_return() {
        let mut e = Echo::new(3, 2);
        let mut tx = Sink::with_credits(1);
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
