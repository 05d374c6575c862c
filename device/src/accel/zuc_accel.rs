//! The ZUC look-aside accelerator (paper §7, "LTE Cipher Look-Aside Accelerator"): requests carry
//! a 64-byte header (key, COUNT/BEARER/DIRECTION, operation, length in bits, request ID, status)
//! followed by the data; eight ZUC units behind a front-end load balancer do the work, and
//! responses leave in request order. Over FLD-E a request is the payload of a UDP datagram to the
//! accelerator's port; the response goes back to the sender with the addresses swapped and the
//! NIC filling in the IPv4 and UDP checksums. Over FLD-R (the paper's disaggregated service) a
//! request is an RDMA SEND message — header and data, reassembled from the packets the shared
//! multi-packet RQ delivers — and the response a SEND on the same queue pair, so each client (one
//! tenant per queue, §5.4) only ever hears answers to its own requests.
//!
//! Timing model: every [`Accelerator::poll`] is one step in which each unit may process
//! `unit_bits_per_step` bits (unbounded by default). A request finishes in its unit when its bits
//! are done; a finished response waits in the reorder buffer until every earlier request has
//! left, so a long request delays the short ones behind it exactly as an order-keeping load
//! balancer does.

use std::collections::{BTreeMap, VecDeque};

use super::rdma::{Assembled, MessageAssembler};
use super::zuc;
use super::{Accelerator, RdmaOp, RxMeta, TxMeta, TxRefused, TxStream};
use fld_abi::nic::{CS_L3, CS_L4};
use fld_abi::wire::zuc::{
    ZucHeader, ZucRequest, HEADER_LEN, OP_EEA3, OP_EIA3, STATUS_BAD_LENGTH, STATUS_BAD_OP,
    STATUS_OK,
};
use fld_abi::wire::{udp_offsets, EthernetFrame, Ipv4Packet, UdpOffsets, UdpPacket};

/// Parallel ZUC units (paper §7).
pub const UNITS: usize = 8;

/// Counters of the accelerator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZucStats {
    pub requests: u64,
    pub responses: u64,
    /// Frames that are not UDP/IPv4 to the service port, or too short for a header.
    pub not_requests: u64,
    /// Requests answered with an error status.
    pub errors: u64,
    /// Requests refused because the units' queues were full.
    pub overload: u64,
    /// FLD-R messages discarded before they became requests: larger than the service's
    /// maximum, or broken by a lost or aborted packet sequence.
    pub bad_messages: u64,
    pub bits_processed: u64,
}

struct Job {
    seq: u64,
    /// Where the request's headers are (FLD-E), or `None` for an FLD-R message, which starts
    /// with the request header.
    at: Option<UdpOffsets>,
    /// The queue the response leaves on.
    queue: u16,
    /// The request frame, turned into the response in place when done.
    frame: Vec<u8>,
    bits_left: u64,
}

/// The accelerator model.
pub struct ZucAccel {
    port: u16,
    tx_queue: u16,
    units: [VecDeque<Job>; UNITS],
    /// Bits each unit may process per step (`u64::MAX`: no timing).
    pub unit_bits_per_step: u64,
    max_pending: usize,
    pending: usize,
    next_seq: u64,
    /// Requests of each response queue in arrival order (indexed by queue).
    order: Vec<VecDeque<u64>>,
    done: BTreeMap<u64, Job>,
    pub stats: ZucStats,
    /// Requests each unit processed (the load balancer's work).
    pub per_unit: [u64; UNITS],
    /// FLD-R: message reassembly per queue pair.
    messages: MessageAssembler,
}

/// FLD-R requests one queue may have in the accelerator at once.
pub const MAX_PENDING_PER_QUEUE: usize = 256;

/// The largest FLD-R request (and response) the service takes, header included: FLD's largest
/// message (16 KiB), since an encryption's response is as long as its request.
pub const MAX_RDMA_REQUEST: usize = 16 * 1024;

impl ZucAccel {
    pub fn new(port: u16, tx_queue: u16) -> Self {
        ZucAccel {
            port,
            tx_queue,
            units: Default::default(),
            unit_bits_per_step: u64::MAX,
            max_pending: 1024,
            pending: 0,
            next_seq: 0,
            order: Vec::new(),
            done: BTreeMap::new(),
            stats: ZucStats::default(),
            per_unit: [0; UNITS],
            messages: MessageAssembler::new(MAX_RDMA_REQUEST),
        }
    }

    /// Queues a request for the least-loaded unit; `header_at` is where its header starts.
    fn admit(&mut self, at: Option<UdpOffsets>, queue: u16, frame: Vec<u8>, header_at: usize) {
        let bits = ZucHeader::new_checked(&frame[header_at..])
            .map(|h| {
                let req = ZucRequest::parse(&h);
                if req.op != OP_EEA3 && req.op != OP_EIA3 || h.data().is_none() {
                    self.stats.errors += 1;
                }
                req.length_bits as u64
            })
            .unwrap_or(0);
        self.stats.requests += 1;
        let unit = self.pick_unit();
        let q = if at.is_some() { self.tx_queue } else { queue } as usize;
        if self.order.len() <= q {
            self.order.resize_with(q + 1, VecDeque::new);
        }
        self.order[q].push_back(self.next_seq);
        let job = Job {
            seq: self.next_seq,
            at,
            queue,
            frame,
            bits_left: bits.max(1),
        };
        self.next_seq += 1;
        self.pending += 1;
        self.units[unit].push_back(job);
    }

    /// An FLD-R packet: reassembled with its message; a whole message of at least a header is a
    /// request.
    fn receive_rdma(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        // Each tenant's queue has its own share of the request buffer: a client that ignores
        // flow control is refused (and counted) without refusing the others.
        let queued = self.order.get(meta.queue as usize).map_or(0, VecDeque::len);
        if meta.rdma.is_some_and(|r| r.first) && queued >= MAX_PENDING_PER_QUEUE {
            self.stats.overload += 1;
            return false;
        }
        let assembled = self.messages.push(meta, data);
        let m = self.messages.stats;
        self.stats.bad_messages = m.oversize + m.orphans + m.aborted;
        let msg = match assembled {
            Assembled::Partial => return true,
            Assembled::Message { data, .. } => data,
            Assembled::Dropped => return false,
        };
        if msg.len() < HEADER_LEN {
            self.stats.not_requests += 1;
            self.messages.recycle(msg);
            return true;
        }
        self.admit(None, meta.queue, msg, 0);
        self.step(tx);
        true
    }

    /// The load balancer: the unit with the least work queued.
    fn pick_unit(&self) -> usize {
        (0..UNITS)
            .min_by_key(|&u| self.units[u].iter().map(|j| j.bits_left).sum::<u64>())
            .unwrap_or(0)
    }

    /// Runs every unit for one step, then sends finished responses in order.
    fn step(&mut self, tx: &mut dyn TxStream) -> usize {
        let mut work = 0;
        for u in 0..UNITS {
            let mut budget = self.unit_bits_per_step;
            while let Some(job) = self.units[u].front_mut() {
                let take = job.bits_left.min(budget);
                job.bits_left -= take;
                budget -= take;
                if job.bits_left > 0 {
                    break;
                }
                if let Some(mut job) = self.units[u].pop_front() {
                    self.stats.bits_processed += finish(&mut job.frame, job.at);
                    self.per_unit[u] += 1;
                    self.done.insert(job.seq, job);
                    work += 1;
                }
                if budget == 0 {
                    break;
                }
            }
        }
        // Responses leave in request order per queue: a queue short of credits (its client
        // not taking answers) holds back only its own.
        for q in 0..self.order.len() {
            while let Some(&seq) = self.order[q].front() {
                let Some(job) = self.done.get(&seq) else {
                    break;
                };
                let meta = match job.at {
                    Some(_) => TxMeta {
                        queue: self.tx_queue,
                        cs_flags: CS_L3 | CS_L4,
                        resume_table: None,
                        rdma: None,
                    },
                    None => TxMeta {
                        queue: job.queue,
                        rdma: Some(RdmaOp::Send),
                        ..Default::default()
                    },
                };
                // A response the queue will never take is dropped (FLD counts it).
                if tx.send(&meta, &job.frame) == Err(TxRefused::NoCredit) {
                    break;
                }
                self.order[q].pop_front();
                if let Some(job) = self.done.remove(&seq) {
                    if job.at.is_none() {
                        self.messages.recycle(job.frame);
                    }
                }
                self.pending -= 1;
                self.stats.responses += 1;
                work += 1;
            }
        }
        work
    }
}

/// Where the request header is in `frame`, if the frame is a UDP/IPv4 datagram to `port`
/// long enough for a header.
fn request_at(frame: &[u8], port: u16) -> Option<UdpOffsets> {
    let o = udp_offsets(frame).filter(|o| !o.ipv6)?;
    let udp = UdpPacket::new_unchecked(&frame[o.udp..]);
    (udp.dst_port() == port && o.udp_end >= o.payload() + HEADER_LEN).then_some(o)
}

/// Turns a request into its response in place: computes and writes status/MAC; for a UDP
/// frame (`o`) also swaps addresses, fixes lengths and zeroes the checksums for the NIC to
/// fill. Returns the bits processed.
fn finish(frame: &mut Vec<u8>, o: Option<UdpOffsets>) -> u64 {
    let (at, end) = o.map_or((0, frame.len()), |o| (o.payload(), o.udp_end));
    let Ok(mut h) = ZucHeader::new_checked(&mut frame[at..end]) else {
        return 0;
    };
    let req = ZucRequest::parse(&h);
    let mut bits = 0;
    let (status, keep) = if req.op != OP_EEA3 && req.op != OP_EIA3 {
        (STATUS_BAD_OP, 0)
    } else if h.data().is_none() {
        (STATUS_BAD_LENGTH, 0)
    } else if req.op == OP_EEA3 {
        let data = h.data_mut().unwrap_or_default();
        zuc::eea3(
            &req.key,
            req.count,
            req.bearer,
            req.direction,
            data,
            req.length_bits,
        );
        bits = req.length_bits as u64;
        (STATUS_OK, data.len())
    } else {
        let data = h.data().unwrap_or_default();
        let mac = zuc::eia3(
            &req.key,
            req.count,
            req.bearer,
            req.direction,
            data,
            req.length_bits,
        );
        h.set_mac(mac);
        bits = req.length_bits as u64;
        (STATUS_OK, 0)
    };
    h.set_status(status);
    // The response carries the header and, for encryption, the processed data.
    frame.truncate(at + HEADER_LEN + keep);
    let Some(o) = o else {
        return bits;
    };
    let len = frame.len();
    EthernetFrame::new_unchecked(&mut frame[..]).swap_addrs();
    let mut ip = Ipv4Packet::new_unchecked(&mut frame[o.ip..]);
    ip.set_total_len((len - o.ip) as u16);
    ip.set_checksum(0);
    ip.swap_addrs();
    let mut udp = UdpPacket::new_unchecked(&mut frame[o.udp..]);
    udp.set_len((len - o.udp) as u16);
    udp.set_checksum(0);
    udp.swap_ports();
    bits
}

impl Accelerator for ZucAccel {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        if meta.rdma.is_some() {
            return self.receive_rdma(meta, data, tx);
        }
        let Some(o) = request_at(data, self.port) else {
            self.stats.not_requests += 1;
            // Not for this service: taken and discarded (a policy drop, not an FLD drop).
            return true;
        };
        if self.pending >= self.max_pending {
            self.stats.overload += 1;
            return false;
        }
        if ZucHeader::new_checked(&data[o.payload_range()]).is_err() {
            self.stats.not_requests += 1;
            return true;
        }
        self.admit(Some(o), 0, data[..o.udp_end].to_vec(), o.payload());
        self.step(tx);
        true
    }

    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        self.step(tx)
    }

    fn name(&self) -> &'static str {
        "zuc"
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("requests", s.requests),
            ("responses", s.responses),
            ("not_requests", s.not_requests),
            ("errors", s.errors),
            ("overload", s.overload),
            ("bad_messages", s.bad_messages),
            ("bits_processed", s.bits_processed),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accel::Credits;
    use fld_abi::wire::zuc::ZUC_UDP_PORT;

    struct Sink {
        sent: Vec<Vec<u8>>,
    }

    impl TxStream for Sink {
        fn credits(&self, _queue: u16) -> Credits {
            Credits {
                packets: 1000,
                bytes: 1 << 20,
            }
        }
        fn send(&mut self, _meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
            self.sent.push(data.to_vec());
            Ok(())
        }
    }

    fn request_frame(req: &ZucRequest, data: &[u8]) -> Vec<u8> {
        let mut payload = vec![0u8; HEADER_LEN];
        req.emit(&mut ZucHeader::new_unchecked(&mut payload[..]));
        payload.extend_from_slice(data);
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(40000, ZUC_UDP_PORT);
        let mut out = Vec::new();
        b.write(&mut out, &payload).unwrap();
        out
    }

    fn req(op: u8, id: u64, bits: u32) -> ZucRequest {
        ZucRequest {
            op,
            bearer: 0x15,
            direction: 1,
            count: 0x398a59b4,
            length_bits: bits,
            request_id: id,
            key: [0x17; 16],
        }
    }

    /// FLD-R: two clients' requests arrive as interleaved packets of two queue pairs; each is
    /// reassembled, computed and answered as a SEND on its own queue, in request order; a
    /// request whose length lies gets an error status, a too-short message is no request.
    #[test]
    fn rdma_requests_reassemble_per_queue_and_answer_on_it() {
        use crate::accel::RdmaRx;
        struct MetaSink(Vec<(TxMeta, Vec<u8>)>);
        impl TxStream for MetaSink {
            fn credits(&self, _queue: u16) -> Credits {
                Credits {
                    packets: 1000,
                    bytes: 1 << 20,
                }
            }
            fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
                self.0.push((*meta, data.to_vec()));
                Ok(())
            }
        }
        let pkt = |queue: u16, first: bool, last: bool| RxMeta {
            queue,
            rdma: Some(RdmaRx {
                first,
                last,
                imm: None,
            }),
            ..Default::default()
        };
        let message = |r: &ZucRequest, data: &[u8]| {
            let mut m = vec![0u8; HEADER_LEN];
            r.emit(&mut ZucHeader::new_unchecked(&mut m[..]));
            m.extend_from_slice(data);
            m
        };
        let data: Vec<u8> = (0..2000u32).map(|i| (i * 7) as u8).collect();
        let a = message(&req(OP_EEA3, 1, 16000), &data);
        let b = message(&req(OP_EEA3, 2, 8000), &data[..1000]);
        let mut acc = ZucAccel::new(ZUC_UDP_PORT, 0);
        let mut tx = MetaSink(vec![]);
        assert!(acc.receive(&pkt(3, true, false), &a[..1024], &mut tx));
        assert!(acc.receive(&pkt(7, true, false), &b[..1024], &mut tx));
        assert!(acc.receive(&pkt(3, false, true), &a[1024..], &mut tx));
        assert!(acc.receive(&pkt(7, false, true), &b[1024..], &mut tx));
        // A request claiming more bits than it carries, and a message shorter than a header.
        let liar = message(&req(OP_EEA3, 3, 80_000), &data[..100]);
        assert!(acc.receive(&pkt(7, true, true), &liar, &mut tx));
        assert!(acc.receive(&pkt(3, true, true), &[1, 2, 3], &mut tx));
        assert_eq!(tx.0.len(), 3);
        for ((meta, resp), (queue, id, len)) in tx.0.iter().zip([(3, 1, 2000), (7, 2, 1000)]) {
            assert_eq!((meta.queue, meta.rdma), (queue, Some(RdmaOp::Send)));
            let h = ZucHeader::new_checked(&resp[..]).unwrap();
            assert_eq!((h.request_id(), h.status()), (id, STATUS_OK));
            let mut want = data[..len].to_vec();
            let r = req(OP_EEA3, id, len as u32 * 8);
            zuc::eea3(
                &r.key,
                r.count,
                r.bearer,
                r.direction,
                &mut want,
                r.length_bits,
            );
            assert_eq!(&resp[HEADER_LEN..], &want[..], "request {id}");
        }
        let h = ZucHeader::new_checked(&tx.0[2].1[..]).unwrap();
        assert_eq!((tx.0[2].0.queue, h.status()), (7, STATUS_BAD_LENGTH));
        assert_eq!(tx.0[2].1.len(), HEADER_LEN);
        assert_eq!(acc.stats.not_requests, 1);
        assert_eq!(acc.stats.errors, 1);
    }

    #[test]
    fn encryption_and_mac_responses_match_the_cipher() {
        let mut acc = ZucAccel::new(ZUC_UDP_PORT, 0);
        let mut tx = Sink { sent: vec![] };
        let data: Vec<u8> = (0..100u8).collect();
        acc.receive(
            &RxMeta::default(),
            &request_frame(&req(OP_EEA3, 7, 797), &data),
            &mut tx,
        );
        acc.receive(
            &RxMeta::default(),
            &request_frame(&req(OP_EIA3, 8, 800), &data),
            &mut tx,
        );
        assert_eq!(tx.sent.len(), 2);
        // Encryption: header + ciphertext back to the sender, lengths fixed, checksums left to the NIC.
        // Read back by an independent parser.
        let r = &tx.sent[0];
        let p = etherparse::SlicedPacket::from_ethernet(r).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        assert_eq!(ip.header().destination(), [10, 0, 0, 1]);
        assert_eq!(ip.header().total_len() as usize, r.len() - 14);
        let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else {
            panic!("not UDP")
        };
        assert_eq!(
            (u.source_port(), u.destination_port()),
            (ZUC_UDP_PORT, 40000)
        );
        assert_eq!(&r[..6], &[2, 0, 0, 0, 0, 1]);
        let h = ZucHeader::new_checked(u.payload()).unwrap();
        assert_eq!((h.request_id(), h.status()), (7, STATUS_OK));
        let mut want = data.clone();
        zuc::eea3(&[0x17; 16], 0x398a59b4, 0x15, 1, &mut want, 797);
        assert_eq!(h.payload(), &want[..]);
        // MAC: header only, MAC in the header.
        let r = &tx.sent[1];
        assert_eq!(r.len(), 42 + HEADER_LEN);
        let h = ZucHeader::new_checked(&r[42..]).unwrap();
        assert_eq!(
            h.mac(),
            zuc::eia3(&[0x17; 16], 0x398a59b4, 0x15, 1, &data, 800)
        );
    }

    #[test]
    fn responses_keep_request_order_across_units() {
        let mut acc = ZucAccel::new(ZUC_UDP_PORT, 0);
        acc.unit_bits_per_step = 500;
        let mut tx = Sink { sent: vec![] };
        // A long request, then seven short ones on the other units.
        acc.receive(
            &RxMeta::default(),
            &request_frame(&req(OP_EEA3, 0, 8000), &[0; 1000]),
            &mut tx,
        );
        for id in 1..8 {
            acc.receive(
                &RxMeta::default(),
                &request_frame(&req(OP_EEA3, id, 64), &[0; 8]),
                &mut tx,
            );
        }
        // The short ones are done but wait behind the long one.
        assert!(tx.sent.is_empty());
        for _ in 0..10 {
            acc.poll(&mut tx);
        }
        let ids: Vec<u64> = tx
            .sent
            .iter()
            .map(|r| ZucHeader::new_checked(&r[42..]).unwrap().request_id())
            .collect();
        assert_eq!(ids, (0..8).collect::<Vec<_>>());
        // The balancer kept the short requests off the unit busy with the long one.
        assert_eq!(acc.per_unit[0], 1, "{:?}", acc.per_unit);
        assert_eq!(acc.per_unit.iter().sum::<u64>(), 8);
    }

    #[test]
    fn bad_requests_get_a_status_or_a_counted_drop() {
        let mut acc = ZucAccel::new(ZUC_UDP_PORT, 0);
        let mut tx = Sink { sent: vec![] };
        // Length that lies: 1000 bits announced, 10 bytes present.
        acc.receive(
            &RxMeta::default(),
            &request_frame(&req(OP_EEA3, 1, 1000), &[0; 10]),
            &mut tx,
        );
        // Unknown operation.
        acc.receive(
            &RxMeta::default(),
            &request_frame(&req(9, 2, 8), &[0; 1]),
            &mut tx,
        );
        let statuses: Vec<u8> = tx
            .sent
            .iter()
            .map(|r| ZucHeader::new_checked(&r[42..]).unwrap().status())
            .collect();
        assert_eq!(statuses, vec![STATUS_BAD_LENGTH, STATUS_BAD_OP]);
        // Not a request: wrong port, truncated header, garbage.
        let mut f = request_frame(&req(OP_EEA3, 3, 8), &[0; 1]);
        f[36] ^= 1;
        acc.receive(&RxMeta::default(), &f, &mut tx);
        let f = request_frame(&req(OP_EEA3, 4, 8), &[0; 1]);
        acc.receive(&RxMeta::default(), &f[..60], &mut tx);
        acc.receive(&RxMeta::default(), &[0xffu8; 7], &mut tx);
        assert_eq!(acc.stats.not_requests, 3);
        assert_eq!(tx.sent.len(), 2);
        // Random frames never panic.
        let mut x = 0x1234_5678u32;
        for _ in 0..20_000 {
            let len = (x % 200) as usize;
            let mut f = request_frame(&req(OP_EIA3, 5, x % 3000), &vec![0; (x % 400) as usize]);
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let i = x as usize % f.len();
                f[i] = x as u8;
            }
            f.truncate(f.len().min(len + 42 + HEADER_LEN));
            acc.receive(&RxMeta::default(), &f, &mut tx);
        }
    }
}
