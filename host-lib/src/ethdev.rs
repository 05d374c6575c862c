//! An Ethernet port in the shape of DPDK's rte_ethdev on one soft-NIC vPort: configure queues,
//! start, `tx_burst`/`rx_burst` over mbufs, flow rules, statistics. Each burst rings one doorbell
//! and each transmit burst asks for one completion (the NIC's selective completion signalling),
//! so per-packet work on the host side is writing one WQE and reading one CQE.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use fld_abi::nic::{
    cqe_csum, cqe_flags, rss_fields, send_ds_count, wqebbs, MultiPacketSendWqe, CQE_REQ_ERR,
    CQE_RESP_ERR, CS_L3, CS_L4, MAX_MPW_PACKETS, TABLE_KIND_FDB, TABLE_KIND_NIC_RX,
};
use fld_driver::nic::{
    CompletionQueue, EventQueue, FlowRule, NicDriver, RecvQueue, RqLayout, RuleFate, SendQueue,
    SendWqe, TableMiss,
};
use fld_driver::{DmaBuffer, DriverError, PciDevice};

use crate::flow::{compile_pattern, FlowAction, FlowAttr, FlowItem};
use crate::mempool::{ol, Mbuf, Mempool};

/// The Microsoft RSS verification key, a common default.
pub use fld_abi::nic::DEFAULT_RSS_KEY;

/// Bytes of L2 header copied inline into each send WQE (Ethernet header).
const INLINE_HEADER: usize = 14;

/// Receive buffer layout of all RX queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxMode {
    /// One mbuf per receive WQE (zero copy).
    Regular,
    /// Multi-packet WQEs: packets land in strides and are copied into mbufs.
    Striding {
        log_stride_size: u8,
        log_strides: u8,
    },
}

/// Port configuration.
#[derive(Clone, Copy, Debug)]
pub struct PortConfig {
    pub rx_queues: u16,
    pub tx_queues: u16,
    /// log2 of receive WQEs per RX queue.
    pub log_rx_desc: u8,
    /// log2 of WQE basic blocks per TX queue.
    pub log_tx_desc: u8,
    pub rx_mode: RxMode,
    /// Largest frame expected; striding queues get enough WQEs to hold `2^log_rx_desc` of them.
    pub max_rx_frame: u32,
    /// Frames up to this many bytes are copied whole into their send WQE (inline), so the NIC
    /// reads no data for them: mlx5's DPDK driver does the same up to `txq_inline_max` when it
    /// inlines. 0 (the default) inlines only the 14-byte Ethernet header. At most
    /// [`MAX_TX_INLINE`]; up to 160 bytes a lone frame's WQE fits the WQE-by-MMIO buffer.
    pub tx_inline_max: u16,
    /// Send with multi-packet WQEs (`docs/nic-interface.md` §6.6): up to [`MAX_MPW_PACKETS`]
    /// frames with the same checksum requests in one WQE, one data segment each, as mlx5's DPDK
    /// driver sends with enhanced multi-packet WQEs. Frames are then never inlined.
    pub tx_multi_packet: bool,
}

/// The largest frame [`PortConfig::tx_inline_max`] may inline (the inline header of a send WQE).
pub const MAX_TX_INLINE: u16 = 256;

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            log_rx_desc: 10,
            log_tx_desc: 10,
            rx_mode: RxMode::Regular,
            max_rx_frame: 1514,
            tx_inline_max: 0,
            tx_multi_packet: false,
        }
    }
}

/// Port statistics: software counters plus the vPort's hardware counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    /// Dropped by the NIC for lack of receive buffers.
    pub imissed: u64,
    /// Receive error completions.
    pub ierrors: u64,
    /// Send error completions.
    pub oerrors: u64,
    /// Receive buffers that could not be replenished.
    pub rx_nombuf: u64,
    /// Dropped by steering (rules or no rule) at this vPort.
    pub rx_steering_drops: u64,
}

struct TxQueue {
    sq: SendQueue,
    cq: CompletionQueue,
    /// (WQE index, basic blocks, the buffer's index in the port's pool) in posting order: the
    /// buffer is the NIC's to read until its WQE completes, and then only its index is needed
    /// to return it.
    inflight: VecDeque<(u16, u32, u32)>,
    /// Counter of basic blocks known to be complete.
    completed: u32,
    /// Pool indices of buffers to return with the next completion.
    reclaimed: Vec<u32>,
}

struct StrideBuffers {
    buffers: Vec<DmaBuffer>,
    stride: usize,
}

struct RxQueue {
    rq: RecvQueue,
    cq: CompletionQueue,
    /// Regular mode: the mbuf posted at each ring slot.
    posted: Vec<Option<Mbuf>>,
    /// Striding mode: one multi-packet buffer per ring slot, reposted in order.
    strides: Option<StrideBuffers>,
    refill: Vec<Mbuf>,
}

/// The port's queues are not destroyed when it is dropped, so the device may still write the
/// buffers posted to them: they stay out of reuse (the rings themselves already do).
impl Drop for RxQueue {
    fn drop(&mut self) {
        if let Some(strides) = &self.strides {
            strides.buffers.iter().for_each(DmaBuffer::keep_reserved);
        }
    }
}

impl Drop for EthDev {
    fn drop(&mut self) {
        if !self.rxqs.is_empty() {
            if let Some(pool) = &self.pool {
                pool.keep_reserved();
            }
        }
    }
}

/// A flow rule created through [`EthDev::flow_create`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowHandle(u32);

impl FlowHandle {
    pub(crate) fn new(id: u32) -> Self {
        FlowHandle(id)
    }
    pub(crate) fn id(self) -> u32 {
        self.0
    }
}

/// One Ethernet port.
pub struct EthDev {
    nic: NicDriver,
    eq: EventQueue,
    pool: Option<Arc<Mempool>>,
    config: PortConfig,
    txqs: Vec<TxQueue>,
    rxqs: Vec<RxQueue>,
    /// Receive tables by group, and the eSwitch tables by group.
    rx_tables: HashMap<u8, u32>,
    fdb_tables: HashMap<u8, u32>,
    /// RSS groups owned by rules (destroyed with them).
    rule_rss: HashMap<u32, u32>,
    default_rule: Option<u32>,
    stats: EthStats,
}

impl EthDev {
    /// Probes the function and prepares its event queue (MSI-X vector 0).
    pub fn open(dev: Arc<dyn PciDevice>) -> Result<Self, DriverError> {
        let mut nic = NicDriver::probe(dev.clone())?;
        dev.enable_msix(1)?;
        let eq = nic.create_eq(6, 0)?;
        Ok(EthDev {
            nic,
            eq,
            pool: None,
            config: PortConfig::default(),
            txqs: Vec::new(),
            rxqs: Vec::new(),
            rx_tables: HashMap::new(),
            fdb_tables: HashMap::new(),
            rule_rss: HashMap::new(),
            default_rule: None,
            stats: EthStats::default(),
        })
    }

    pub fn driver(&mut self) -> &mut NicDriver {
        &mut self.nic
    }
    pub fn mac(&self) -> [u8; 6] {
        self.nic.mac()
    }
    pub fn vport(&self) -> u16 {
        self.nic.vport()
    }
    /// The pool the port receives into (after `configure`).
    pub fn pool(&self) -> Option<Arc<Mempool>> {
        self.pool.clone()
    }

    pub fn event_queue(&mut self) -> &mut EventQueue {
        &mut self.eq
    }

    /// Creates the queues, fills the receive rings from `pool`, and installs the port's default
    /// steering: everything to RSS over all RX queues (or queue 0 when there is one).
    pub fn configure(&mut self, config: PortConfig, pool: Arc<Mempool>) -> Result<(), DriverError> {
        if config.rx_queues == 0 || config.tx_queues == 0 {
            return Err(DriverError::InvalidArgument(
                "a port needs at least one RX and one TX queue",
            ));
        }
        if config.tx_inline_max > MAX_TX_INLINE {
            return Err(DriverError::InvalidArgument(
                "tx_inline_max above the send WQE's inline limit (256 bytes)",
            ));
        }
        self.config = config;
        for _ in 0..config.tx_queues {
            let cq = self.nic.create_cq(&self.eq, config.log_tx_desc)?;
            let sq = self.nic.create_sq(&cq, config.log_tx_desc, false)?;
            let cap = sq.size() as usize;
            self.txqs.push(TxQueue {
                sq,
                cq,
                inflight: VecDeque::with_capacity(cap),
                completed: 0,
                reclaimed: Vec::with_capacity(cap),
            });
        }
        for _ in 0..config.rx_queues {
            // Descriptors count packets: a striding ring has one WQE per `2^log_strides` of them
            // (as DPDK sizes multi-packet queues), and up to one CQE per stride plus fillers.
            let (log_cq, log_rq, layout) = match config.rx_mode {
                RxMode::Regular => (config.log_rx_desc, config.log_rx_desc, RqLayout::Regular),
                RxMode::Striding {
                    log_stride_size,
                    log_strides,
                } => {
                    let strides_per_frame =
                        (config.max_rx_frame.max(64) as u64).div_ceil(1 << log_stride_size);
                    let wqes = ((strides_per_frame << config.log_rx_desc) >> log_strides).max(4);
                    let log_rq = (64 - (wqes - 1).leading_zeros()) as u8;
                    (
                        (config.log_rx_desc + 1).min(self.nic.caps().max_log_cq_size),
                        log_rq.min(self.nic.caps().max_log_rq_size),
                        RqLayout::Striding {
                            log_stride_size,
                            log_strides,
                        },
                    )
                }
            };
            let cq = self.nic.create_cq(&self.eq, log_cq)?;
            let mut rq = self.nic.create_rq(&cq, log_rq, layout)?;
            let n = rq.size() as usize;
            let mut posted: Vec<Option<Mbuf>> = Vec::new();
            let mut strides = None;
            match config.rx_mode {
                RxMode::Regular => {
                    posted = (0..n).map(|_| None).collect();
                    let mut bufs = Vec::with_capacity(n);
                    if pool.alloc_bulk(&mut bufs, n) < n {
                        return Err(DriverError::OutOfDmaMemory(n));
                    }
                    for (i, m) in bufs.into_iter().enumerate() {
                        let (addr, len) = m.buffer();
                        rq.post(addr, len);
                        posted[i] = Some(m);
                    }
                }
                RxMode::Striding {
                    log_stride_size, ..
                } => {
                    let bytes = rq.wqe_bytes();
                    let mut buffers = Vec::with_capacity(n);
                    for _ in 0..n {
                        let b = self.nic.device().dma_alloc(bytes)?;
                        rq.post(b.iova(), bytes as u32);
                        buffers.push(b);
                    }
                    strides = Some(StrideBuffers {
                        buffers,
                        stride: 1 << log_stride_size,
                    });
                }
            }
            rq.ring_doorbell();
            self.rxqs.push(RxQueue {
                rq,
                cq,
                posted,
                strides,
                refill: Vec::with_capacity(n),
            });
        }
        self.pool = Some(pool);
        let root = self
            .nic
            .create_flow_table(TABLE_KIND_NIC_RX, 0, TableMiss::Drop)?;
        self.nic.set_root(TABLE_KIND_NIC_RX, Some(root))?;
        self.rx_tables.insert(0, root);
        let all: Vec<u16> = (0..config.rx_queues).collect();
        let default = if all.len() == 1 {
            FlowAction::Queue(0)
        } else {
            FlowAction::Rss {
                queues: all,
                fields: rss_fields::SRC_IP
                    | rss_fields::DST_IP
                    | rss_fields::SRC_PORT
                    | rss_fields::DST_PORT,
            }
        };
        let h = self.flow_create(
            FlowAttr {
                group: 0,
                priority: u16::MAX,
                transfer: false,
            },
            &[],
            &[default],
        )?;
        self.default_rule = Some(h.0);
        Ok(())
    }

    // --- data path ----------------------------------------------------------------------------

    /// Frees buffers of completed sends. A CQE covers its WQE and every one before it, and CQEs
    /// arrive in ring order: the buffers up to the last CQE's WQE go back to the pool at once.
    fn reclaim(&mut self, q: usize) {
        let t = &mut self.txqs[q];
        let mut last = None;
        while let Some(cqe) = t.cq.poll() {
            if cqe.opcode() == CQE_REQ_ERR {
                self.stats.oerrors += 1;
                log::warn!("TX queue {q}: error CQE, syndrome {:#x}", cqe.syndrome);
            }
            last = Some(cqe.wqe_counter.get());
        }
        let Some(upto) = last else {
            return;
        };
        t.cq.update_ci();
        let (inflight, completed) = (&mut t.inflight, &mut t.completed);
        let mut more = true;
        let done = std::iter::from_fn(|| {
            if !more {
                return None;
            }
            let (idx, nbb, buffer) = inflight.pop_front()?;
            *completed = completed.wrapping_add(nbb);
            // A multi-packet WQE's frames share its index; its blocks are on the last one.
            more = idx != upto || nbb == 0;
            Some(buffer)
        });
        let freed = t.reclaimed.drain(..).chain(done);
        match &self.pool {
            Some(pool) => pool.free_indices(freed),
            None => freed.for_each(drop),
        }
    }

    /// Sends packets from the front of `pkts` (removing them); returns how many were queued.
    /// Packets that did not fit in the ring stay in `pkts`. One doorbell and one completion
    /// request per burst.
    pub fn tx_burst(&mut self, q: u16, pkts: &mut Vec<Mbuf>) -> usize {
        let q = q as usize;
        if q >= self.txqs.len() || pkts.is_empty() {
            return 0;
        }
        // Completions of earlier bursts were produced when those bursts ran the device.
        self.reclaim(q);
        if self.config.tx_multi_packet {
            return self.tx_burst_multi_packet(q, pkts);
        }
        let inline_max = usize::from(self.config.tx_inline_max);
        let t = &mut self.txqs[q];
        let size = t.sq.size();
        let mut used = t.sq.producer_counter().wrapping_sub(t.completed);
        let mut count = 0;
        for m in pkts.iter() {
            let nbb = wqebbs_for(m.len(), inline_max);
            if used + nbb > size {
                break;
            }
            used += nbb;
            count += 1;
        }
        for (i, m) in pkts.drain(..count).enumerate() {
            let len = m.len();
            let inline = inline_len(len, inline_max);
            let gather = [(m.data_iova() + inline as u64, (len - inline) as u32)];
            let cs_flags = tx_cs_flags(m.ol_flags);
            let wqe = SendWqe {
                inline_header: &m.data()[..inline],
                gather: if len > inline { &gather } else { &[] },
                cs_flags,
                signal: i + 1 == count,
                resume_table: None,
            };
            let nbb = wqe.wqebbs();
            match t.sq.post(&wqe) {
                Ok(idx) => {
                    self.stats.opackets += 1;
                    self.stats.obytes += len as u64;
                    t.inflight.push_back((idx, nbb, m.pool_index()));
                }
                // Cannot happen for a 14-byte inline header and one gather entry; the buffer
                // goes back to the pool rather than leaking.
                Err(_) => t.reclaimed.push(m.pool_index()),
            }
        }
        if count > 0 {
            t.sq.ring_doorbell();
        }
        self.nic.device().run_device();
        count
    }

    /// [`EthDev::tx_burst`] with multi-packet WQEs: runs of up to [`MAX_MPW_PACKETS`] frames
    /// with the same checksum requests share a WQE; the last WQE of the burst asks for the
    /// completion.
    fn tx_burst_multi_packet(&mut self, q: usize, pkts: &mut Vec<Mbuf>) -> usize {
        let t = &mut self.txqs[q];
        let free = t.sq.size() - t.sq.producer_counter().wrapping_sub(t.completed);
        // The frames whose WQEs fit the ring, so the last of them can ask for the completion.
        let (mut count, mut need) = (0, 0);
        while count < pkts.len() {
            let (run, _) = multi_packet_run(&pkts[count..]);
            need += wqebbs(send_ds_count(0, run));
            if need > free {
                break;
            }
            count += run;
        }
        let mut frames = [(0u64, 0u32); MAX_MPW_PACKETS];
        let mut sent = 0;
        while sent < count {
            let (run, cs_flags) = multi_packet_run(&pkts[sent..]);
            let batch = &pkts[sent..sent + run];
            for (f, m) in frames.iter_mut().zip(batch) {
                *f = (m.data_iova(), m.len() as u32);
            }
            let wqe = MultiPacketSendWqe {
                frames: &frames[..run],
                cs_flags,
                signal: sent + run == count,
            };
            let nbb = wqe.wqebbs();
            match t.sq.post_multi_packet(&wqe) {
                Ok(idx) => {
                    for (i, m) in batch.iter().enumerate() {
                        let last = i + 1 == run;
                        t.inflight
                            .push_back((idx, if last { nbb } else { 0 }, m.pool_index()));
                        self.stats.obytes += m.len() as u64;
                    }
                    self.stats.opackets += run as u64;
                }
                // Cannot happen for 1..=MAX_MPW_PACKETS frames; the buffers go back to the pool
                // rather than leaking.
                Err(_) => t.reclaimed.extend(batch.iter().map(Mbuf::pool_index)),
            }
            sent += run;
        }
        pkts.drain(..count);
        if count > 0 {
            t.sq.ring_doorbell();
        }
        self.nic.device().run_device();
        count
    }

    /// Switches between multi-packet WQEs and one WQE a frame ([`PortConfig::tx_multi_packet`]);
    /// frames already posted complete either way.
    pub fn set_tx_multi_packet(&mut self, on: bool) {
        self.config.tx_multi_packet = on;
    }

    /// Appends up to `max` received packets to `out`; returns how many.
    pub fn rx_burst(&mut self, q: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let q = q as usize;
        if q >= self.rxqs.len() {
            return 0;
        }
        self.nic.device().run_device();
        let Some(pool) = self.pool.clone() else {
            return 0;
        };
        let r = &mut self.rxqs[q];
        let mut got = 0;
        let mut reposted = false;
        let mut polled = false;
        while got < max {
            let Some(cqe) = r.cq.poll() else { break };
            polled = true;
            if cqe.opcode() == CQE_RESP_ERR {
                self.stats.ierrors += 1;
                log::warn!("RX queue {q}: error CQE, syndrome {:#x}", cqe.syndrome);
                continue;
            }
            let len = cqe.byte_count.get();
            let mut flags = 0;
            let cs = cqe.csum;
            if cs & cqe_csum::L3_PRESENT != 0 {
                flags |= if cs & cqe_csum::L3_OK != 0 {
                    ol::RX_IP_CKSUM_GOOD
                } else {
                    ol::RX_IP_CKSUM_BAD
                };
            }
            if cs & cqe_csum::L4_PRESENT != 0 {
                flags |= if cs & cqe_csum::L4_OK != 0 {
                    ol::RX_L4_CKSUM_GOOD
                } else {
                    ol::RX_L4_CKSUM_BAD
                };
            }
            if cqe.rss_hash.get() != 0 {
                flags |= ol::RX_RSS_HASH;
            }
            if cqe.flow_tag.get() != 0 {
                flags |= ol::RX_FDIR_MARK;
            }
            match &r.strides {
                None => {
                    let slot = (cqe.wqe_counter.get() as u32 & (r.rq.size() - 1)) as usize;
                    let Some(mut m) = r.posted[slot].take() else {
                        self.stats.ierrors += 1;
                        continue;
                    };
                    let truncated = cqe.flags & cqe_flags::TRUNCATED != 0;
                    m.set_received(len, len);
                    m.ol_flags = flags | if truncated { ol::RX_TRUNCATED } else { 0 };
                    m.hash = cqe.rss_hash.get();
                    m.flow_tag = cqe.flow_tag.get();
                    out.push(m);
                    got += 1;
                    // Replace the buffer at the producer position.
                    if r.refill.is_empty() {
                        pool.alloc_bulk(&mut r.refill, 32);
                    }
                    match r.refill.pop() {
                        Some(new) => {
                            let pslot = (r.rq.producer_counter() & (r.rq.size() - 1)) as usize;
                            let (addr, blen) = new.buffer();
                            r.rq.post(addr, blen);
                            r.posted[pslot] = Some(new);
                            reposted = true;
                        }
                        None => self.stats.rx_nombuf += 1,
                    }
                }
                Some(sb) => {
                    let slot = (cqe.wqe_counter.get() as u32 & (r.rq.size() - 1)) as usize;
                    if cqe.flags & cqe_flags::FILLER == 0 {
                        if r.refill.is_empty() {
                            pool.alloc_bulk(&mut r.refill, 32);
                        }
                        match r.refill.pop() {
                            Some(mut m) => {
                                let at = cqe.stride_index.get() as usize * sb.stride;
                                let d = m.set_len(len as usize);
                                let n = d.len();
                                sb.buffers[slot].read(at, &mut d[..n]);
                                m.pkt_len = len;
                                m.ol_flags = flags;
                                m.hash = cqe.rss_hash.get();
                                m.flow_tag = cqe.flow_tag.get();
                                out.push(m);
                                got += 1;
                            }
                            None => self.stats.rx_nombuf += 1,
                        }
                    }
                    // A finished multi-packet buffer goes back in posting order, unchanged.
                    if cqe.flags & cqe_flags::WQE_DONE != 0 {
                        let b = &sb.buffers[slot];
                        r.rq.post(b.iova(), b.len() as u32);
                        reposted = true;
                    }
                }
            }
            self.stats.ipackets +=
                (cqe.opcode() != CQE_RESP_ERR && cqe.flags & cqe_flags::FILLER == 0) as u64;
            self.stats.ibytes += if cqe.flags & cqe_flags::FILLER == 0 {
                len as u64
            } else {
                0
            };
        }
        if polled {
            r.cq.update_ci();
        }
        if reposted {
            r.rq.ring_doorbell();
        }
        got
    }

    /// Returns buffers to the port's pool.
    pub fn free(&self, bufs: impl IntoIterator<Item = Mbuf>) {
        if let Some(p) = &self.pool {
            p.free_bulk(bufs);
        }
    }

    // --- flow rules ---------------------------------------------------------------------------

    fn table_for(&mut self, group: u8, transfer: bool) -> Result<u32, DriverError> {
        let (map, kind) = if transfer {
            (&self.fdb_tables, TABLE_KIND_FDB)
        } else {
            (&self.rx_tables, TABLE_KIND_NIC_RX)
        };
        if let Some(t) = map.get(&group) {
            return Ok(*t);
        }
        let miss = if transfer {
            TableMiss::Default
        } else {
            TableMiss::Drop
        };
        let t = self.nic.create_flow_table(kind, group, miss)?;
        if transfer {
            if group == 0 {
                self.nic.set_root(TABLE_KIND_FDB, Some(t))?;
            }
            self.fdb_tables.insert(group, t);
        } else {
            self.rx_tables.insert(group, t);
        }
        Ok(t)
    }

    /// Creates a rule; see [`FlowAttr`], [`FlowItem`], [`FlowAction`].
    pub fn flow_create(
        &mut self,
        attr: FlowAttr,
        pattern: &[FlowItem],
        actions: &[FlowAction],
    ) -> Result<FlowHandle, DriverError> {
        let table = self.table_for(attr.group, attr.transfer)?;
        let (mask, value) = compile_pattern(pattern);
        let mut rule = FlowRule {
            priority: attr.priority,
            mask,
            value,
            fate: RuleFate::None,
            flow_tag: None,
            count: false,
            vxlan_decap: false,
            vxlan_encap: None,
            meter: None,
        };
        let mut rss_group = None;
        for a in actions {
            let fate = match a {
                FlowAction::Mark(t) => {
                    rule.flow_tag = Some(*t);
                    continue;
                }
                FlowAction::Count => {
                    rule.count = true;
                    continue;
                }
                FlowAction::Queue(q) => RuleFate::Rq(
                    self.rxqs
                        .get(*q as usize)
                        .ok_or(DriverError::InvalidArgument("no such queue"))?
                        .rq
                        .rqn,
                ),
                FlowAction::Rss { queues, fields } => {
                    let rqns: Result<Vec<u32>, _> = queues
                        .iter()
                        .map(|q| {
                            self.rxqs
                                .get(*q as usize)
                                .map(|r| r.rq.rqn)
                                .ok_or(DriverError::InvalidArgument("no such queue"))
                        })
                        .collect();
                    let mut rqns = rqns?;
                    if rqns.is_empty() {
                        return Err(DriverError::InvalidArgument("RSS needs queues"));
                    }
                    // The indirection table is a power of two long: repeat the queue list.
                    let n = rqns.len().next_power_of_two().clamp(64, 256);
                    rqns = (0..n).map(|i| rqns[i % rqns.len()]).collect();
                    let g = self
                        .nic
                        .create_rss_group(&DEFAULT_RSS_KEY, *fields, &rqns)?;
                    rss_group = Some(g);
                    RuleFate::Rss(g)
                }
                FlowAction::Drop => RuleFate::Drop,
                FlowAction::Jump(g) => RuleFate::Goto(self.table_for(*g, attr.transfer)?),
                FlowAction::PortId(v) => RuleFate::Vport(*v),
            };
            if rule.fate != RuleFate::None {
                return Err(DriverError::InvalidArgument("more than one fate action"));
            }
            rule.fate = fate;
        }
        match self.nic.create_flow_entry(table, &rule) {
            Ok(id) => {
                if let Some(g) = rss_group {
                    self.rule_rss.insert(id, g);
                }
                Ok(FlowHandle(id))
            }
            Err(e) => {
                if let Some(g) = rss_group {
                    let _ = self.nic.destroy_rss_group(g);
                }
                Err(e)
            }
        }
    }

    pub fn flow_destroy(&mut self, h: FlowHandle) -> Result<(), DriverError> {
        self.nic.destroy_flow_entry(h.0)?;
        if let Some(g) = self.rule_rss.remove(&h.0) {
            self.nic.destroy_rss_group(g)?;
        }
        Ok(())
    }

    /// (packets, bytes) counted by a rule with a Count action.
    pub fn flow_query(&mut self, h: FlowHandle) -> Result<(u64, u64), DriverError> {
        self.nic.query_flow_entry(h.0)
    }

    /// Removes the port's catch-all rule (then only explicit rules deliver).
    pub fn remove_default_rule(&mut self) -> Result<(), DriverError> {
        if let Some(id) = self.default_rule.take() {
            self.flow_destroy(FlowHandle(id))?;
        }
        Ok(())
    }

    // --- statistics ---------------------------------------------------------------------------

    pub fn stats(&mut self) -> Result<EthStats, DriverError> {
        let v = self.nic.query_vport(self.nic.vport())?;
        let mut s = self.stats;
        s.imissed = v.rx_out_of_buffer.get();
        s.rx_steering_drops = v.rx_steering_drops.get() + v.rx_no_steering.get();
        Ok(s)
    }

    /// The NIC's counters of this port by name, drops by reason among them (what `--stats`
    /// prints; DPDK's xstats).
    pub fn nic_counters(&mut self) -> Result<Vec<(&'static str, u64)>, DriverError> {
        Ok(self.nic.query_vport(self.nic.vport())?.named().to_vec())
    }

    /// Mbufs the port holds: posted receive buffers, refill caches and sends not yet completed.
    pub fn mbufs_held(&self) -> usize {
        let rx: usize = self
            .rxqs
            .iter()
            .map(|r| r.posted.iter().filter(|m| m.is_some()).count() + r.refill.len())
            .sum();
        let tx: usize = self
            .txqs
            .iter()
            .map(|t| t.inflight.len() + t.reclaimed.len())
            .sum();
        rx + tx
    }

    /// Queue handles for tools that inspect the rings.
    pub fn rx_queue_numbers(&self) -> Vec<u32> {
        self.rxqs.iter().map(|r| r.rq.rqn).collect()
    }
    pub fn tx_queue_numbers(&self) -> Vec<u32> {
        self.txqs.iter().map(|t| t.sq.sqn).collect()
    }
}

/// Bytes of a `len`-byte frame its send WQE carries inline: all of it up to `inline_max`, else
/// the Ethernet header.
/// The send WQE's checksum requests for an mbuf's offload flags.
fn tx_cs_flags(ol_flags: u32) -> u8 {
    let mut cs_flags = 0;
    if ol_flags & ol::TX_IP_CKSUM != 0 {
        cs_flags |= CS_L3;
    }
    if ol_flags & ol::TX_L4_CKSUM != 0 {
        cs_flags |= CS_L4;
    }
    cs_flags
}

/// How many frames from the front of `pkts` share one multi-packet WQE (the same checksum
/// requests, at most [`MAX_MPW_PACKETS`]), and their checksum requests.
fn multi_packet_run(pkts: &[Mbuf]) -> (usize, u8) {
    let cs = pkts.first().map_or(0, |m| tx_cs_flags(m.ol_flags));
    let run = pkts
        .iter()
        .take(MAX_MPW_PACKETS)
        .take_while(|m| tx_cs_flags(m.ol_flags) == cs)
        .count();
    (run, cs)
}

fn inline_len(len: usize, inline_max: usize) -> usize {
    if len <= inline_max {
        len
    } else {
        len.min(INLINE_HEADER)
    }
}

/// Basic blocks of the send WQE for a packet of `len` bytes (what [`inline_len`] inlines + one
/// gather entry for the rest).
fn wqebbs_for(len: usize, inline_max: usize) -> u32 {
    let inline = inline_len(len, inline_max);
    wqebbs(send_ds_count(inline, (len > inline) as usize))
}
