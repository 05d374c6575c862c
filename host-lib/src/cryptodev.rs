//! A cryptodev in the shape of DPDK's: applications enqueue bursts of ZUC operations and dequeue
//! them completed. Three devices implement it — [`SoftZuc`] on the host CPU, [`ZucOffload`],
//! which ships each operation to the ZUC accelerator behind FLD-E in a UDP datagram with the
//! accelerator's 64-byte header, and [`ZucRdma`], which sends it to the disaggregated
//! accelerator behind FLD-R as an RDMA SEND of the header and the data — so a client switches
//! between them without changing its code (paper §7). The software device uses the `zuc` crate: an implementation of 128-EEA3/EIA3
//! independent of the accelerator model's, so a comparison of the two checks both.

use std::collections::HashMap;
use std::sync::Arc;

use fld_abi::wire::zuc::{
    ZucHeader, ZucRequest, HEADER_LEN, OP_EEA3, OP_EIA3, STATUS_BAD_LENGTH, STATUS_OK, ZUC_UDP_PORT,
};
use fld_abi::wire::{
    ethertype, udp_offsets, EthIpv4UdpRepr, EthernetRepr, Ipv4Repr, UdpPacket, UdpRepr,
};

use crate::mempool::{ol, Mbuf, Mempool};
use crate::port::BurstPort;

/// Which 3GPP algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// 128-EEA3 confidentiality: `data` is encrypted (or decrypted) in place.
    Eea3,
    /// 128-EIA3 integrity: `mac` receives the MAC of `data`.
    Eia3,
}

/// Completion status of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpStatus {
    NotProcessed,
    Success,
    /// The device refused the operation (bad length or operation).
    Error(u8),
}

/// One operation.
#[derive(Clone, Debug)]
pub struct CryptoOp {
    pub algorithm: Algorithm,
    pub key: [u8; 16],
    pub count: u32,
    pub bearer: u8,
    pub direction: u8,
    pub length_bits: u32,
    pub data: Vec<u8>,
    pub mac: u32,
    pub status: OpStatus,
}

/// The burst interface both devices implement.
pub trait CryptoDev {
    /// Takes operations from the front of `ops`; returns how many were accepted.
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp>) -> usize;
    /// Appends up to `max` completed operations, in enqueue order.
    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp>, max: usize) -> usize;
}

/// ZUC on the host CPU.
#[derive(Default)]
pub struct SoftZuc {
    done: std::collections::VecDeque<CryptoOp>,
}

impl CryptoDev for SoftZuc {
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp>) -> usize {
        let n = ops.len();
        for mut op in ops.drain(..) {
            let bytes = (op.length_bits as usize).div_ceil(8);
            if bytes > op.data.len() {
                op.status = OpStatus::Error(STATUS_BAD_LENGTH);
            } else {
                let bits = op.length_bits as usize;
                match op.algorithm {
                    Algorithm::Eea3 => zuc::eea3::eea3_xor_inplace(
                        op.count,
                        op.bearer,
                        op.direction,
                        &op.key,
                        &mut op.data[..bytes],
                        bits,
                    ),
                    Algorithm::Eia3 => {
                        op.mac = zuc::eia3::Eia3Mac::compute(
                            op.count,
                            op.bearer,
                            op.direction,
                            &op.key,
                            &op.data[..bytes],
                            bits,
                        )
                    }
                }
                op.status = OpStatus::Success;
            }
            self.done.push_back(op);
        }
        n
    }

    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp>, max: usize) -> usize {
        let n = max.min(self.done.len());
        out.extend(self.done.drain(..n));
        n
    }
}

/// Addresses of the offload service.
#[derive(Clone, Copy, Debug)]
pub struct ServiceAddress {
    pub client_mac: [u8; 6],
    pub client_ip: [u8; 4],
    pub client_port: u16,
    pub server_mac: [u8; 6],
    pub server_ip: [u8; 4],
}

/// ZUC on the accelerator behind FLD-E, over a burst port.
pub struct ZucOffload<P: BurstPort> {
    port: P,
    addr: ServiceAddress,
    pool: Arc<Mempool>,
    next_id: u64,
    /// Operations in flight by request ID; responses come back in order, but a lost one must not
    /// stall the rest.
    inflight: HashMap<u64, CryptoOp>,
    /// Most operations in flight (the queue pair's depth): the service has no backpressure, so
    /// the client must not send more than the path buffers (paper §5.5).
    max_inflight: usize,
    tx: Vec<Mbuf>,
    rx: Vec<Mbuf>,
    /// Responses that did not parse or matched no request.
    pub stray: u64,
}

impl<P: BurstPort> ZucOffload<P> {
    pub fn new(port: P, addr: ServiceAddress) -> Option<Self> {
        let pool = port.pool()?;
        Some(ZucOffload {
            port,
            addr,
            pool,
            next_id: 1,
            inflight: HashMap::new(),
            max_inflight: 256,
            tx: Vec::new(),
            rx: Vec::new(),
            stray: 0,
        })
    }

    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// Limits the operations in flight (default 256); at least 1.
    pub fn with_max_inflight(mut self, n: usize) -> Self {
        self.max_inflight = n.max(1);
        self
    }

    /// Builds the request datagram for `op` into `m`; false if it does not fit.
    fn build(&self, m: &mut Mbuf, op: &CryptoOp, id: u64) -> bool {
        let bytes = (op.length_bits as usize).div_ceil(8).min(op.data.len());
        let len = EthIpv4UdpRepr::HEADER_LEN + HEADER_LEN + bytes;
        if len > m.capacity() {
            return false;
        }
        let f = m.set_len(len);
        let a = &self.addr;
        let headers = EthIpv4UdpRepr {
            eth: EthernetRepr {
                src_addr: a.client_mac,
                dst_addr: a.server_mac,
                ethertype: ethertype::IPV4,
            },
            ip: Ipv4Repr {
                src_addr: a.client_ip,
                dst_addr: a.server_ip,
                hop_limit: 64,
                ident: id as u16,
                dont_frag: true,
                ..Ipv4Repr::default()
            },
            udp: UdpRepr {
                src_port: a.client_port,
                dst_port: ZUC_UDP_PORT,
            },
        };
        // Checksums are the NIC's (requested below).
        headers.emit(f, false);
        write_request(op, id, &mut f[EthIpv4UdpRepr::HEADER_LEN..]);
        m.ol_flags = ol::TX_IP_CKSUM | ol::TX_L4_CKSUM;
        true
    }
}

impl<P: BurstPort> CryptoDev for ZucOffload<P> {
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp>) -> usize {
        let room = self.max_inflight.saturating_sub(self.inflight.len());
        let mut tx = std::mem::take(&mut self.tx);
        self.pool.alloc_bulk(&mut tx, ops.len().min(room));
        let mut built = 0;
        for (m, op) in tx.iter_mut().zip(ops.iter()) {
            if !self.build(m, op, self.next_id + built as u64) {
                break;
            }
            built += 1;
        }
        // Buffers beyond the first operation that did not fit go back unused.
        self.pool.free_bulk(tx.drain(built..));
        let sent = self.port.tx_burst(0, &mut tx);
        // What the port did not take is not in flight: its buffers return too.
        self.pool.free_bulk(tx.drain(..));
        self.tx = tx;
        for (i, op) in ops.drain(..sent).enumerate() {
            self.inflight.insert(self.next_id + i as u64, op);
        }
        self.next_id += sent as u64;
        sent
    }

    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp>, max: usize) -> usize {
        let mut got = 0;
        let mut rx = std::mem::take(&mut self.rx);
        self.port.rx_burst(0, &mut rx, max);
        for m in rx.iter() {
            let d = m.data();
            let resp = udp_offsets(d)
                .filter(|o| UdpPacket::new_unchecked(&d[o.udp..]).src_port() == ZUC_UDP_PORT)
                .and_then(|o| ZucHeader::new_checked(&d[o.payload_range()]).ok());
            let Some((h, mut op)) =
                resp.and_then(|h| self.inflight.remove(&h.request_id()).map(|op| (h, op)))
            else {
                self.stray += 1;
                continue;
            };
            complete_from(&mut op, &h);
            out.push(op);
            got += 1;
        }
        self.pool.free_bulk(rx.drain(..));
        self.rx = rx;
        got
    }
}

impl<P: BurstPort> ZucOffload<P> {
    /// The port, for callers that serve other traffic on it.
    pub fn port(&mut self) -> &mut P {
        &mut self.port
    }
}

/// The request message of `op` with request ID `id`: the 64-byte header, then the data.
pub fn request_message(op: &CryptoOp, id: u64, out: &mut Vec<u8>) {
    let bytes = (op.length_bits as usize).div_ceil(8).min(op.data.len());
    out.clear();
    out.resize(HEADER_LEN + bytes, 0);
    write_request(op, id, out);
}

/// Writes `op`'s request header (request ID `id`) and data into `buf`, which is exactly the
/// header and the data's whole bytes long.
fn write_request(op: &CryptoOp, id: u64, buf: &mut [u8]) {
    let req = ZucRequest {
        op: match op.algorithm {
            Algorithm::Eea3 => OP_EEA3,
            Algorithm::Eia3 => OP_EIA3,
        },
        bearer: op.bearer,
        direction: op.direction,
        count: op.count,
        length_bits: op.length_bits,
        request_id: id,
        key: op.key,
    };
    let mut h = ZucHeader::new_unchecked(buf);
    req.emit(&mut h);
    let bytes = h.payload_mut().len();
    h.payload_mut().copy_from_slice(&op.data[..bytes]);
}

/// Completes `op` from the response header `h`.
pub fn complete_from(op: &mut CryptoOp, h: &ZucHeader<&[u8]>) {
    if h.status() != STATUS_OK {
        op.status = OpStatus::Error(h.status());
        return;
    }
    match op.algorithm {
        Algorithm::Eea3 => {
            let bytes = (op.length_bits as usize).div_ceil(8);
            match h.payload().get(..bytes) {
                Some(c) => {
                    op.data[..bytes].copy_from_slice(c);
                    op.status = OpStatus::Success;
                }
                None => op.status = OpStatus::Error(u8::MAX),
            }
        }
        Algorithm::Eia3 => {
            op.mac = h.mac();
            op.status = OpStatus::Success;
        }
    }
}

/// ZUC on the disaggregated accelerator behind FLD-R (paper §7): each operation is an RDMA SEND
/// of the 64-byte header and the data on the client's queue pair, each response a SEND back.
/// The client's receive depth bounds the operations in flight, and the accelerator answers in
/// order.
pub struct ZucRdma {
    client: crate::fldr::FldrClient,
    next_id: u64,
    inflight: HashMap<u64, CryptoOp>,
    message: Vec<u8>,
    /// Responses that did not parse or matched no request.
    pub stray: u64,
}

impl ZucRdma {
    pub fn new(client: crate::fldr::FldrClient) -> Self {
        ZucRdma {
            client,
            next_id: 1,
            inflight: HashMap::new(),
            message: Vec::new(),
            stray: 0,
        }
    }

    pub fn client(&mut self) -> &mut crate::fldr::FldrClient {
        &mut self.client
    }

    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }
}

impl CryptoDev for ZucRdma {
    fn enqueue_burst(&mut self, ops: &mut Vec<CryptoOp>) -> usize {
        let _ = self.client.progress();
        let cfg = self.client.config();
        // Application-level flow control (§5.5): no more requests outstanding than the client
        // has receives posted for their responses, or the service's answers meet RNR NAKs and
        // back up into the accelerator.
        let room = (cfg.depth as usize).saturating_sub(self.inflight.len());
        let max = cfg.max_message;
        let mut sent = 0;
        while sent < ops.len().min(room) {
            request_message(&ops[sent], self.next_id, &mut self.message);
            if self.message.len() > max {
                break;
            }
            match self.client.send(&self.message, None) {
                Ok(true) => {}
                _ => break,
            }
            sent += 1;
            self.next_id += 1;
        }
        let first = self.next_id - sent as u64;
        for (i, op) in ops.drain(..sent).enumerate() {
            self.inflight.insert(first + i as u64, op);
        }
        sent
    }

    fn dequeue_burst(&mut self, out: &mut Vec<CryptoOp>, max: usize) -> usize {
        let mut got = 0;
        while got < max {
            let inflight = &mut self.inflight;
            let r = self.client.recv(|m, _imm| {
                let h = ZucHeader::new_checked(m).ok()?;
                let mut op = inflight.remove(&h.request_id())?;
                complete_from(&mut op, &h);
                Some(op)
            });
            match r {
                Ok(Some(Some(op))) => {
                    out.push(op);
                    got += 1;
                }
                Ok(Some(None)) => self.stray += 1,
                _ => break,
            }
        }
        got
    }
}

/// Deterministic operations for demos and tests: random keys, COUNT/BEARER/DIRECTION and data of
/// `bytes` bytes each (a third of them MACs), bit lengths not multiples of 8 where `odd_bits`.
pub fn sample_ops(n: usize, bytes: usize, odd_bits: bool, seed: u64) -> Vec<CryptoOp> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let mut key = [0u8; 16];
            key.iter_mut().for_each(|k| *k = next() as u8);
            let bits = (bytes as u32 * 8)
                .saturating_sub(if odd_bits { (next() % 7) as u32 } else { 0 })
                .max(1);
            CryptoOp {
                algorithm: if i % 3 == 2 {
                    Algorithm::Eia3
                } else {
                    Algorithm::Eea3
                },
                key,
                count: next() as u32,
                bearer: (next() % 32) as u8,
                direction: (next() % 2) as u8,
                length_bits: bits,
                data: (0..bytes).map(|_| next() as u8).collect(),
                mac: 0,
                status: OpStatus::NotProcessed,
            }
        })
        .collect()
}

/// Runs `ops` through `dev` in bursts of `burst`, returning them completed in order. Gives up
/// after `ops.len() * 1000 + 100_000` rounds without completing everything.
pub fn run_ops(dev: &mut dyn CryptoDev, mut ops: Vec<CryptoOp>, burst: usize) -> Vec<CryptoOp> {
    let total = ops.len();
    let mut done = Vec::with_capacity(total);
    let mut pending = std::collections::VecDeque::from(std::mem::take(&mut ops));
    let mut batch = Vec::with_capacity(burst);
    for _ in 0..total * 1000 + 100_000 {
        if done.len() == total {
            break;
        }
        let n = pending.len().min(burst);
        batch.extend(pending.drain(..n));
        dev.enqueue_burst(&mut batch);
        // What the device did not take goes back to the front, in order.
        for op in batch.drain(..).rev() {
            pending.push_front(op);
        }
        dev.dequeue_burst(&mut done, burst * 2);
    }
    done
}
