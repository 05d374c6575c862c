//! The FLD-R side of an accelerator (paper §5.3, §6): messages arrive packet by packet through
//! the NIC's shared multi-packet RQ, interleaved across queue pairs, each packet tagged with its
//! queue and its place in the message; reassembling them is the accelerator's job, not FLD's.
//! [`MessageAssembler`] is that reassembly (one open message per queue, bounded in size), and
//! [`RdmaEcho`] the paper's FLD-R echo accelerator (§8.1.2): every message goes back whole, as a
//! SEND on the queue it came from, for the NIC's transport to segment again.

use std::collections::VecDeque;

use super::{Accelerator, RdmaOp, RxMeta, TxMeta, TxRefused, TxStream};

/// Reassembly counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssemblyStats {
    pub packets: u64,
    pub messages: u64,
    /// Partial messages discarded: a new first packet arrived while one was open (the sender's
    /// QP was reset, or the NIC flushed the message).
    pub aborted: u64,
    /// Middle or last packets with no open message (their first was dropped).
    pub orphans: u64,
    /// Messages longer than the accelerator takes, discarded.
    pub oversize: u64,
}

/// What [`MessageAssembler::push`] made of a packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Assembled {
    /// The packet is part of a message still arriving.
    Partial,
    /// The message is whole: its bytes (give the buffer back with
    /// [`MessageAssembler::recycle`]) and its immediate data.
    Message { data: Vec<u8>, imm: Option<u32> },
    /// The packet was discarded (see [`AssemblyStats`]).
    Dropped,
}

/// Per-queue reassembly of FLD-R messages. Buffers are reused, so steady traffic allocates
/// nothing once every queue has had its largest message.
pub struct MessageAssembler {
    max_message: usize,
    open: Vec<Option<Vec<u8>>>,
    /// A queue whose message was discarded for size skips its packets until the next first.
    skipping: Vec<bool>,
    spare: Vec<Vec<u8>>,
    pub stats: AssemblyStats,
}

impl MessageAssembler {
    /// Messages of at most `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        MessageAssembler {
            max_message,
            open: Vec::new(),
            skipping: Vec::new(),
            spare: Vec::new(),
            stats: AssemblyStats::default(),
        }
    }

    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Adds one FLD-R packet. Packets without RDMA metadata are dropped.
    pub fn push(&mut self, meta: &RxMeta, data: &[u8]) -> Assembled {
        let Some(r) = meta.rdma else {
            return Assembled::Dropped;
        };
        self.stats.packets += 1;
        let q = meta.queue as usize;
        if self.open.len() <= q {
            self.open.resize_with(q + 1, || None);
            self.skipping.resize(q + 1, false);
        }
        if r.first {
            if let Some(b) = self.open[q].take() {
                self.stats.aborted += 1;
                self.spare.push(b);
            }
            self.skipping[q] = false;
            let mut b = self.spare.pop().unwrap_or_default();
            b.clear();
            self.open[q] = Some(b);
        } else if self.skipping[q] {
            self.skipping[q] = !r.last;
            return Assembled::Dropped;
        }
        let Some(buf) = self.open[q].as_mut() else {
            self.stats.orphans += 1;
            return Assembled::Dropped;
        };
        if buf.len() + data.len() > self.max_message {
            self.stats.oversize += 1;
            if let Some(b) = self.open[q].take() {
                self.spare.push(b);
            }
            self.skipping[q] = !r.last;
            return Assembled::Dropped;
        }
        buf.extend_from_slice(data);
        if !r.last {
            return Assembled::Partial;
        }
        self.stats.messages += 1;
        match self.open[q].take() {
            Some(data) => Assembled::Message { data, imm: r.imm },
            None => Assembled::Dropped,
        }
    }

    /// Takes back a message buffer for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < 64 {
            self.spare.push(buf);
        }
    }
}

/// Messages waiting for tx credits, per queue, in order (the accelerator's output FIFOs). A
/// queue that lacks credits does not hold back the others.
pub struct MessageHold {
    queues: Vec<VecDeque<(Vec<u8>, RdmaOp)>>,
    held: usize,
    capacity: usize,
    /// Queues with something held, in the order they first got it.
    ready: VecDeque<u16>,
}

impl MessageHold {
    /// At most `capacity` messages held in all.
    pub fn new(capacity: usize) -> Self {
        MessageHold {
            queues: Vec::new(),
            held: 0,
            capacity,
            ready: VecDeque::new(),
        }
    }

    pub fn is_full(&self) -> bool {
        self.held >= self.capacity
    }

    pub fn len(&self) -> usize {
        self.held
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Sends `msg` on `queue` at once when nothing is held there and credits allow, otherwise
    /// holds it. Returns the message buffer when it was sent (for reuse), or refused for good.
    pub fn send_or_hold(
        &mut self,
        tx: &mut dyn TxStream,
        queue: u16,
        msg: Vec<u8>,
        op: RdmaOp,
    ) -> Result<Option<Vec<u8>>, TxRefused> {
        let q = queue as usize;
        if self.queues.get(q).is_none_or(|h| h.is_empty()) {
            match send(tx, queue, &msg, op) {
                Ok(()) => return Ok(Some(msg)),
                Err(TxRefused::NoCredit) => {}
                Err(e) => return Err(e),
            }
        }
        if self.is_full() {
            return Err(TxRefused::NoCredit);
        }
        if self.queues.len() <= q {
            self.queues.resize_with(q + 1, VecDeque::new);
        }
        if self.queues[q].is_empty() {
            self.ready.push_back(queue);
        }
        self.queues[q].push_back((msg, op));
        self.held += 1;
        Ok(None)
    }

    /// Sends held messages until each queue runs out of credits; `done` gets every buffer sent
    /// or refused for good. Returns the messages sent.
    pub fn flush(&mut self, tx: &mut dyn TxStream, mut done: impl FnMut(Vec<u8>, bool)) -> usize {
        let mut sent = 0;
        for _ in 0..self.ready.len() {
            let Some(queue) = self.ready.pop_front() else {
                break;
            };
            let h = &mut self.queues[queue as usize];
            while let Some((msg, op)) = h.front() {
                let r = send(tx, queue, msg, *op);
                if r == Err(TxRefused::NoCredit) {
                    break;
                }
                let (msg, _) = h.pop_front().expect("front");
                self.held -= 1;
                sent += r.is_ok() as usize;
                done(msg, r.is_ok());
            }
            if !h.is_empty() {
                self.ready.push_back(queue);
            }
        }
        sent
    }
}

fn send(tx: &mut dyn TxStream, queue: u16, msg: &[u8], op: RdmaOp) -> Result<(), TxRefused> {
    let meta = TxMeta {
        queue,
        rdma: Some(op),
        ..Default::default()
    };
    tx.send(&meta, msg)
}

/// The FLD-R echo accelerator (§8.1.2): each message is sent back whole on its queue, as a SEND
/// with the same immediate data when it had one.
pub struct RdmaEcho {
    assembler: MessageAssembler,
    hold: MessageHold,
    pub echoed: u64,
    pub refused: u64,
}

impl RdmaEcho {
    /// Messages up to `max_message` bytes; at most `capacity` wait for credits.
    pub fn new(max_message: usize, capacity: usize) -> Self {
        RdmaEcho {
            assembler: MessageAssembler::new(max_message),
            hold: MessageHold::new(capacity),
            echoed: 0,
            refused: 0,
        }
    }

    fn flush(&mut self, tx: &mut dyn TxStream) -> usize {
        let assembler = &mut self.assembler;
        let refused = &mut self.refused;
        let n = self.hold.flush(tx, |buf, ok| {
            *refused += !ok as u64;
            assembler.recycle(buf);
        });
        self.echoed += n as u64;
        n
    }
}

impl Accelerator for RdmaEcho {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        let (msg, imm) = match self.assembler.push(meta, data) {
            Assembled::Partial => return true,
            Assembled::Dropped => return false,
            Assembled::Message { data, imm } => (data, imm),
        };
        let op = imm.map_or(RdmaOp::Send, RdmaOp::SendImm);
        self.flush(tx);
        match self.hold.send_or_hold(tx, meta.queue, msg, op) {
            Ok(Some(buf)) => {
                self.echoed += 1;
                self.assembler.recycle(buf);
                true
            }
            Ok(None) => true,
            Err(_) => {
                self.refused += 1;
                false
            }
        }
    }

    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        if self.hold.is_empty() {
            return 0;
        }
        self.flush(tx)
    }

    fn name(&self) -> &'static str {
        "rdma-echo"
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.assembler.stats;
        vec![
            ("echoed", self.echoed),
            ("refused", self.refused),
            ("packets", s.packets),
            ("messages", s.messages),
            ("aborted", s.aborted),
            ("orphans", s.orphans),
            ("oversize", s.oversize),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accel::RdmaRx;

    fn pkt(queue: u16, first: bool, last: bool, imm: Option<u32>) -> RxMeta {
        RxMeta {
            queue,
            rdma: Some(RdmaRx { first, last, imm }),
            ..Default::default()
        }
    }

    #[test]
    fn interleaved_messages_of_two_queues_reassemble_apart() {
        let mut a = MessageAssembler::new(10_000);
        assert_eq!(
            a.push(&pkt(0, true, false, None), b"aa"),
            Assembled::Partial
        );
        assert_eq!(
            a.push(&pkt(5, true, false, None), b"xx"),
            Assembled::Partial
        );
        assert_eq!(
            a.push(&pkt(0, false, false, None), b"bb"),
            Assembled::Partial
        );
        assert_eq!(
            a.push(&pkt(5, false, true, Some(7)), b"yy"),
            Assembled::Message {
                data: b"xxyy".to_vec(),
                imm: Some(7)
            }
        );
        assert_eq!(
            a.push(&pkt(0, false, true, None), b"cc"),
            Assembled::Message {
                data: b"aabbcc".to_vec(),
                imm: None
            }
        );
        assert_eq!(a.stats.messages, 2);
    }

    #[test]
    fn broken_sequences_are_dropped_and_counted() {
        let mut a = MessageAssembler::new(4);
        // A middle packet with nothing open.
        assert_eq!(
            a.push(&pkt(1, false, false, None), b"zz"),
            Assembled::Dropped
        );
        // A first packet while a message is open aborts the old one.
        a.push(&pkt(1, true, false, None), b"ab");
        a.push(&pkt(1, true, false, None), b"cd");
        // Too long: the rest of that message is skipped, the next one is fine.
        assert_eq!(
            a.push(&pkt(1, false, false, None), b"efg"),
            Assembled::Dropped
        );
        assert_eq!(a.push(&pkt(1, false, true, None), b"h"), Assembled::Dropped);
        assert_eq!(
            a.push(&pkt(1, true, true, None), b"ok"),
            Assembled::Message {
                data: b"ok".to_vec(),
                imm: None
            }
        );
        assert_eq!(
            a.stats,
            AssemblyStats {
                packets: 6,
                messages: 1,
                aborted: 1,
                orphans: 1,
                oversize: 1,
            }
        );
    }
}
