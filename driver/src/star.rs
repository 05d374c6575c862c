//! StaR (`docs/nic-interface.md` §16; Pan et al., APNet '19) from the drivers' side.
//!
//! * The **server's driver** keeps its connections' QPs in host software ([`StarServerQp`]):
//!   a posted WQE becomes a WQEP sent to the client through an Ethernet send queue of the
//!   function ([`StarServer`]), and is sent again until its EA comes back through the control
//!   CQ (§3.3: WQE loss is the driver's to handle, not the NIC's). The client's CQEPs put the
//!   completions straight into the server's CQs; a completion the client had to send twice is
//!   recognised by its element sequence number and dropped ([`StarServerQp::accept`]).
//! * The **client's driver** holds the server's regions ([`NicDriver::hold_star_region`]) and
//!   makes its QP the connection's stateful end ([`NicDriver::set_star_peer`]); its NIC does the
//!   rest.
//!
//! What crosses between the two at setup (the server's QP number and CQs, its regions with
//! their bus addresses) is the application's to carry, as RDMA's own setup data is.

use std::collections::VecDeque;

use fld_abi::nic::*;
use fld_abi::wire::roce::star::{
    StarHeaders, StarKind, StarQueue, StarRegionOp, StarRegionUpdate, StarWqe,
};
use fld_abi::wire::roce::RoceAddress;
use zerocopy::little_endian::{U32, U64};
use zerocopy::IntoBytes;

use crate::nic::{CompletionQueue, NicDriver, RecvQueue, RqLayout, SendQueue, SendWqe};
use crate::rdma::MemoryRegion;
use crate::{DmaBuffer, DriverError};

/// A server's region as its client holds it: what the server's driver hands over at setup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StarRegion {
    pub key: u32,
    pub addr: u64,
    pub length: u64,
    pub access: u32,
    pub log_page_size: u8,
    /// The bus address of each page of the region, in the server function's I/O space.
    pub pages: Vec<u64>,
}

impl StarRegion {
    /// The bus-address ranges the region's pages cover, adjacent pages merged: what a client's
    /// security module allows its RDPs and GDs into (§16.5).
    pub fn bus_ranges(&self) -> Vec<std::ops::Range<u64>> {
        fld_abi::wire::roce::star::page_ranges(self.pages.iter().copied(), self.log_page_size)
    }
}

impl MemoryRegion {
    /// This region as a StaR client holds it (its MTT read back).
    pub fn star_region(&self) -> StarRegion {
        let pages =
            (self.mtt_len() / MTT_ENTRY_SIZE)
                .min(mtt_pages(self.addr, self.length, MR_LOG_PAGE) as usize);
        let pages = (0..pages)
            .map(|i| {
                let mut e = [0u8; MTT_ENTRY_SIZE];
                self.read_mtt(i * MTT_ENTRY_SIZE, &mut e);
                u64::from_le_bytes(e)
            })
            .collect();
        StarRegion {
            key: self.key,
            addr: self.addr,
            length: self.length,
            access: self.access,
            log_page_size: MR_LOG_PAGE,
            pages,
        }
    }
}

/// Scatter entries a server receive WQE may have (the client holds at most eight per WQE).
pub const STAR_MAX_RECV_SGE: usize = 8;

/// The page size of the regions this driver registers (4 KiB).
const MR_LOG_PAGE: u8 = 12;

impl NicDriver {
    /// Client: holds a StaR server's region (`MR_FLAG_STAR_PEER`) in `pd`, so the client QPs of
    /// that PD can name its memory in RDPs and GDs. Never accessed by this NIC's DMA.
    pub fn hold_star_region(
        &mut self,
        pd: u32,
        region: &StarRegion,
    ) -> Result<MemoryRegion, DriverError> {
        let mtt = self
            .device()
            .dma_alloc(region.pages.len().max(1) * MTT_ENTRY_SIZE)?;
        for (i, p) in region.pages.iter().enumerate() {
            mtt.write(i * MTT_ENTRY_SIZE, &p.to_le_bytes());
        }
        let key = self.create(
            op::CREATE_MR,
            &CreateMrIn {
                pd: U32::new(pd),
                access: U32::new(region.access),
                start: U64::new(region.addr),
                length: U64::new(region.length),
                mtt_addr: U64::new(mtt.iova()),
                log_page_size: region.log_page_size,
                flags: MR_FLAG_STAR_PEER,
                rsvd: [0; 2],
                peer_key: U32::new(region.key),
            },
        )?;
        Ok(MemoryRegion::new(
            key,
            region.addr,
            region.length,
            region.access,
            mtt,
        ))
    }

    /// Client: QP `qpn` (RESET or INIT) becomes the stateful end of a StaR connection whose
    /// server completes into `server_send_cqn` and `server_recv_cqn`; the server's later
    /// memory-table updates arrive in RQ `update_rqn` ([`StarUpdates`]), or are refused.
    pub fn set_star_peer(
        &mut self,
        qpn: u32,
        server_send_cqn: u32,
        server_recv_cqn: u32,
        update_rqn: Option<u32>,
    ) -> Result<(), DriverError> {
        let input = StarPeerIn {
            qpn: U32::new(qpn),
            server_send_cqn: U32::new(server_send_cqn),
            server_recv_cqn: U32::new(server_recv_cqn),
            update_rqn: U32::new(update_rqn.unwrap_or(STAR_NO_RQ)),
        };
        self.command(op::SET_STAR_PEER, input.as_bytes(), 0)
            .map(drop)
    }
}

/// Bytes of one WQEP frame slot: headers, the largest element, the ICRC.
const WQEP_SLOT: usize = 2048;

/// The largest memory-table update one WQEP carries: its header and 240 page addresses (960 KiB
/// of 4 KiB pages), so the frame fits a 2 KiB slot. A larger region is handed over at setup
/// instead.
pub const STAR_UPDATE_MAX: usize = 32 + 240 * 8;

/// The server end of a function's StaR connections: the Ethernet send queue its WQEPs leave
/// through (every WQEP signalled, so a slot is reused only once the NIC has read it) and the
/// control CQ its EAs arrive on.
pub struct StarServer {
    pub sq: SendQueue,
    pub sq_cq: CompletionQueue,
    pub control: CompletionQueue,
    tx: DmaBuffer,
    dev: std::sync::Arc<dyn crate::PciDevice>,
    /// WQEPs posted and completions reaped.
    posted: u32,
    reaped: u32,
}

impl StarServer {
    /// `sq` sends the WQEPs and completes on `sq_cq`; `control` is the CQ the NIC's
    /// SET_STAR_SERVER named for EAs.
    pub fn new(
        nic: &mut NicDriver,
        sq: SendQueue,
        sq_cq: CompletionQueue,
        control: CompletionQueue,
    ) -> Result<Self, DriverError> {
        let tx = nic.device().dma_alloc(sq.size() as usize * WQEP_SLOT)?;
        Ok(StarServer {
            sq,
            sq_cq,
            control,
            tx,
            dev: nic.device().clone(),
            posted: 0,
            reaped: 0,
        })
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), DriverError> {
        // A full queue waits a while for the NIC to send what it holds (an in-process card is
        // run to make progress).
        for attempt in 0..10_000 {
            while let Some(_c) = self.sq_cq.poll() {
                self.reaped = self.reaped.wrapping_add(1);
            }
            self.sq_cq.update_ci();
            if self.posted.wrapping_sub(self.reaped) < self.sq.size() {
                break;
            }
            if attempt == 9_999 {
                return Err(DriverError::InvalidArgument("the WQEP send queue is full"));
            }
            self.dev.run_device();
            std::hint::spin_loop();
        }
        let slot = (self.posted % self.sq.size()) as usize * WQEP_SLOT;
        self.tx.write(slot, frame);
        let gather = [(self.tx.iova() + slot as u64 + 14, frame.len() as u32 - 14)];
        self.sq.post(&SendWqe {
            inline_header: &frame[..14],
            gather: &gather,
            signal: true,
            ..Default::default()
        })?;
        self.sq.ring_doorbell();
        self.posted = self.posted.wrapping_add(1);
        Ok(())
    }

    /// The next EA from the control CQ: the QP number it names and the acknowledged sequence
    /// number.
    pub fn poll_ea(&mut self) -> Option<(u32, u32)> {
        let c = self.control.poll()?;
        self.control.update_ci();
        (c.opcode() == CQE_STAR_EA).then(|| (c.qn.get(), c.byte_count.get()))
    }
}

/// A WQEP sent and not yet acknowledged.
struct Unacked {
    seq: u32,
    frame: Vec<u8>,
    sent_at: u64,
}

/// A StaR connection's QP at the server, in host software.
pub struct StarServerQp {
    /// The number the client knows this QP by (the `qn` of its completions).
    pub qpn: u32,
    /// The server's addresses towards the client, and the client's QP.
    pub addr: RoceAddress,
    pub client_qpn: u32,
    pub pkey: u16,
    next_seq: u32,
    unacked: VecDeque<Unacked>,
    sq_index: u16,
    rq_index: u16,
    memory_index: u16,
    /// The element sequence number of the next completion the client sends.
    next_completion: u32,
    ident: u16,
    scratch: Vec<u8>,
}

impl StarServerQp {
    pub fn new(qpn: u32, addr: RoceAddress, client_qpn: u32, pkey: u16) -> Self {
        StarServerQp {
            qpn,
            addr,
            client_qpn,
            pkey,
            next_seq: 0,
            unacked: VecDeque::new(),
            sq_index: 0,
            rq_index: 0,
            memory_index: 0,
            next_completion: 0,
            ident: 0,
            scratch: vec![0; MAX_WQE_BYTES],
        }
    }

    /// Posts a send WQE: its WQEP goes to the client now. Returns its index (its completion's
    /// `wqe_counter`).
    pub fn post_send(
        &mut self,
        port: &mut StarServer,
        wqe: &RdmaWqe<'_>,
        now: u64,
    ) -> Result<u16, DriverError> {
        let index = self.sq_index;
        let mut buf = std::mem::take(&mut self.scratch);
        let n = wqe
            .encode(self.qpn, index, &mut buf)
            .map_err(|_| DriverError::InvalidArgument("WQE does not encode"));
        let r = n.and_then(|n| self.send_element(port, StarQueue::Send, index, &buf[..n], now));
        self.scratch = buf;
        r?;
        self.sq_index = index.wrapping_add(1);
        Ok(index)
    }

    /// Posts a receive WQE: its WQEP goes to the client now. Returns its index.
    pub fn post_recv(
        &mut self,
        port: &mut StarServer,
        sges: &[Sge],
        now: u64,
    ) -> Result<u16, DriverError> {
        let index = self.rq_index;
        let mut buf = [0u8; 16 * (STAR_MAX_RECV_SGE + 1)];
        let len = (sges.len() + 1) * 16;
        if sges.len() > STAR_MAX_RECV_SGE || !encode_recv_wqe(sges, &mut buf[..len]) {
            return Err(DriverError::InvalidArgument("too many scatter entries"));
        }
        self.send_element(port, StarQueue::Receive, index, &buf[..len], now)?;
        self.rq_index = index.wrapping_add(1);
        Ok(index)
    }

    /// Sends a change of the server's memory table to the client (§16.6): `region` registered
    /// (the client may name it from when it applied the update) or deregistered (the client
    /// NIC refuses it from the update's EA on: once [`Self::unacked`] is 0 the memory may be
    /// used for something else). Carried as an element, so it is sent again until acknowledged
    /// and taken in order with the WQEs.
    pub fn post_region_update(
        &mut self,
        port: &mut StarServer,
        op: StarRegionOp,
        region: &StarRegion,
        now: u64,
    ) -> Result<(), DriverError> {
        let update = StarRegionUpdate {
            op,
            log_page_size: region.log_page_size,
            key: region.key,
            addr: region.addr,
            length: region.length,
            access: region.access,
            pages: region.pages.len() as u32,
        };
        if update.covering_pages() != Some(update.pages) {
            return Err(DriverError::InvalidArgument(
                "the region's pages do not cover it",
            ));
        }
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(buf.len().max(STAR_UPDATE_MAX), 0);
        let n = update
            .emit(&region.pages, &mut buf)
            .filter(|&n| n <= STAR_UPDATE_MAX)
            .ok_or(DriverError::InvalidArgument(
                "a region update carries at most 240 pages",
            ));
        let index = self.memory_index;
        let r = n.and_then(|n| self.send_element(port, StarQueue::Memory, index, &buf[..n], now));
        self.scratch = buf;
        r?;
        self.memory_index = index.wrapping_add(1);
        Ok(())
    }

    fn send_element(
        &mut self,
        port: &mut StarServer,
        queue: StarQueue,
        index: u16,
        wqe: &[u8],
        now: u64,
    ) -> Result<(), DriverError> {
        let seq = self.next_seq;
        let headers = StarHeaders {
            wqe: Some(StarWqe { queue, index }),
            ..StarHeaders::new(StarKind::Wqep, self.client_qpn, seq, self.pkey)
        };
        let mut frame = vec![0u8; WQEP_SLOT];
        self.ident = self.ident.wrapping_add(1);
        let n = self
            .addr
            .emit(&headers, wqe, self.ident, &mut frame)
            .ok_or(DriverError::InvalidArgument("WQEP too long"))?;
        frame.truncate(n);
        port.send(&frame)?;
        self.next_seq = fld_abi::wire::roce::psn_add(seq, 1);
        self.unacked.push_back(Unacked {
            seq,
            frame,
            sent_at: now,
        });
        Ok(())
    }

    /// The client acknowledged the element with sequence number `seq` (an EA): it and every
    /// element before it are held by the client.
    pub fn element_acked(&mut self, seq: u32) {
        while self
            .unacked
            .front()
            .is_some_and(|u| fld_abi::wire::roce::psn_delta(seq, u.seq) >= 0)
        {
            self.unacked.pop_front();
        }
    }

    /// Send WQEs posted so far (the index of the next).
    pub fn sq_posted(&self) -> u32 {
        u32::from(self.sq_index)
    }

    /// When the oldest unacknowledged element was last sent.
    pub fn oldest_unacked(&self) -> Option<u64> {
        self.unacked.front().map(|u| u.sent_at)
    }

    /// Elements sent and not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// Sends again every element unacknowledged for `timeout` ns (go-back-N: the client takes
    /// elements in order only). Returns how many.
    pub fn resend_due(
        &mut self,
        port: &mut StarServer,
        now: u64,
        timeout: u64,
    ) -> Result<usize, DriverError> {
        if self
            .unacked
            .front()
            .is_none_or(|u| now < u.sent_at.saturating_add(timeout))
        {
            return Ok(0);
        }
        let mut n = 0;
        for u in &mut self.unacked {
            port.send(&u.frame)?;
            u.sent_at = now;
            n += 1;
        }
        Ok(n)
    }

    /// Whether a completion of this QP that arrived on a CQ is new. The client sends each
    /// completion until it is acknowledged, in order, with its element sequence number in
    /// `metadata`: one it had to send again arrives twice.
    pub fn accept(&mut self, cqe: &Cqe) -> bool {
        if cqe.metadata.get() != self.next_completion {
            return false;
        }
        self.next_completion = self.next_completion.wrapping_add(1);
        true
    }
}

/// Receive buffers of the client's update RQ, one update each.
const UPDATE_SLOTS: u32 = 16;
const UPDATE_SLOT_BYTES: usize = 4096;

/// The client's update RQ (§16.6): where its NIC hands over the servers' memory-table updates,
/// one [`CQE_STAR_REGION`] each, for its driver to apply ([`NicDriver::hold_star_region`] for a
/// registration). Named in [`NicDriver::set_star_peer`].
pub struct StarUpdates {
    pub rq: RecvQueue,
    pub cq: CompletionQueue,
    bufs: DmaBuffer,
    consumed: u32,
}

/// A memory-table update as the client's driver receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionUpdate {
    /// The client QP of the connection it came on.
    pub client_qpn: u32,
    pub op: StarRegionOp,
    pub region: StarRegion,
}

impl StarUpdates {
    /// An update RQ completing into `cq`, its buffers posted.
    pub fn new(nic: &mut NicDriver, cq: CompletionQueue) -> Result<Self, DriverError> {
        let log = UPDATE_SLOTS.trailing_zeros() as u8;
        let mut rq = nic.create_rq(&cq, log, RqLayout::Regular)?;
        let bufs = nic
            .device()
            .dma_alloc(UPDATE_SLOTS as usize * UPDATE_SLOT_BYTES)?;
        for i in 0..UPDATE_SLOTS as usize {
            rq.post(
                bufs.iova() + (i * UPDATE_SLOT_BYTES) as u64,
                UPDATE_SLOT_BYTES as u32,
            );
        }
        rq.ring_doorbell();
        Ok(StarUpdates {
            rq,
            cq,
            bufs,
            consumed: 0,
        })
    }

    /// The next update that arrived, its buffer posted again. An entry that is not an update
    /// (or does not parse: the NIC checked it, so never) is skipped.
    pub fn poll(&mut self) -> Option<RegionUpdate> {
        loop {
            let c = self.cq.poll()?;
            self.cq.update_ci();
            let slot = (self.consumed % UPDATE_SLOTS) as usize * UPDATE_SLOT_BYTES;
            self.consumed = self.consumed.wrapping_add(1);
            let len = (c.byte_count.get() as usize).min(UPDATE_SLOT_BYTES);
            let mut b = vec![0u8; len];
            self.bufs.read(slot, &mut b);
            self.rq
                .post(self.bufs.iova() + slot as u64, UPDATE_SLOT_BYTES as u32);
            self.rq.ring_doorbell();
            if c.opcode() != CQE_STAR_REGION {
                continue;
            }
            let Ok((u, pages)) = StarRegionUpdate::parse(&b) else {
                continue;
            };
            return Some(RegionUpdate {
                client_qpn: c.qn.get(),
                op: u.op,
                region: StarRegion {
                    key: u.key,
                    addr: u.addr,
                    length: u.length,
                    access: u.access,
                    log_page_size: u.log_page_size,
                    pages: StarRegionUpdate::page_addresses(pages).collect(),
                },
            });
        }
    }
}
