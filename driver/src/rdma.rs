//! The RDMA part of the NIC driver: protection domains, memory regions (the driver writes each
//! region's translation table — the bus address of every page — into DMA memory for the NIC to
//! read), GID table entries, RC queue pairs with their send and receive rings, shared receive
//! queues. Formats come from `fld_abi::nic`; the verbs library in `fld-host` builds on this.

use std::sync::Arc;

use fld_abi::nic::*;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::FromBytes;

use crate::nic::{
    doorbell, retire_ring, write_ring_blocks, CompletionQueue, DeviceRing, NicDriver, WqeByMmio,
};
use crate::{DmaBuffer, DriverError, PciDevice};

/// Bytes of the pages memory regions are registered with.
pub const MR_PAGE_SIZE: u64 = 4096;

/// A registered memory region: its key and the translation table the NIC reads.
#[derive(Debug)]
pub struct MemoryRegion {
    pub key: u32,
    /// The virtual address the region starts at (the address the consumer and its peers use).
    pub addr: u64,
    pub length: u64,
    pub access: u32,
    /// The MTT: one little-endian bus address per page. Kept until the region is deregistered.
    mtt: DmaBuffer,
}

impl MemoryRegion {
    pub(crate) fn new(key: u32, addr: u64, length: u64, access: u32, mtt: DmaBuffer) -> Self {
        MemoryRegion {
            key,
            addr,
            length,
            access,
            mtt,
        }
    }

    /// Bytes of the region's MTT.
    pub(crate) fn mtt_len(&self) -> usize {
        self.mtt.len()
    }

    /// Reads the MTT at `off`.
    pub(crate) fn read_mtt(&self, off: usize, buf: &mut [u8]) {
        self.mtt.read(off, buf);
    }
}

/// Sizes of a queue pair's rings.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// log2 of the send ring in 64-byte basic blocks.
    pub log_sq_size: u8,
    /// log2 of the receive ring in WQEs (ignored with an SRQ).
    pub log_rq_size: u8,
    /// Scatter entries per receive WQE (rounded up to a power of two, at most 32).
    pub max_recv_sge: u32,
    /// A CQE for every send WQE.
    pub signal_all: bool,
    /// Packets may arrive out of order (multipath): `QP_FLAG_OUT_OF_ORDER`, on both ends.
    pub out_of_order: bool,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            log_sq_size: 8,
            log_rq_size: 8,
            max_recv_sge: 1,
            signal_all: false,
            out_of_order: false,
        }
    }
}

/// log2 bytes of a receive WQE holding `sges` scatter entries (and room for the end marker
/// when the stride is not filled).
fn recv_stride(sges: u32) -> u8 {
    let bytes = (sges.max(1) as usize * DS_SIZE).next_power_of_two();
    bytes.trailing_zeros() as u8
}

/// An RC queue pair's rings as the driver posts to them.
pub struct RcQueuePair {
    pub qpn: u32,
    sq: DeviceRing,
    log_sq_size: u8,
    /// Basic blocks posted.
    sq_pi: u32,
    rq: Option<DeviceRing>,
    log_rq_size: u8,
    log_rq_stride: u8,
    /// Receive WQEs posted.
    rq_pi: u32,
    dev: Arc<dyn PciDevice>,
    scratch: Vec<u8>,
    mmio: WqeByMmio,
}

/// A shared receive queue.
pub struct SharedReceiveQueue {
    pub srqn: u32,
    ring: DeviceRing,
    log_size: u8,
    log_stride: u8,
    pi: u32,
    dev: Arc<dyn PciDevice>,
}

impl NicDriver {
    pub fn create_pd(&mut self) -> Result<u32, DriverError> {
        self.create_raw(op::CREATE_PD, &[])
    }

    pub fn destroy_pd(&mut self, pd: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_PD, pd, 0).map(drop)
    }

    /// Registers `buffer` (virtual address: its address in this process) in `pd` with
    /// `access` rights, writing the region's MTT into DMA memory.
    pub fn register_mr(
        &mut self,
        pd: u32,
        buffer: &DmaBuffer,
        access: u32,
    ) -> Result<MemoryRegion, DriverError> {
        let addr = buffer.as_ptr() as u64;
        self.register_mr_at(pd, buffer, addr, access)
    }

    /// As [`NicDriver::register_mr`] with the region's virtual address chosen by the caller
    /// (its offset within a page must equal the buffer's bus address's).
    pub fn register_mr_at(
        &mut self,
        pd: u32,
        buffer: &DmaBuffer,
        addr: u64,
        access: u32,
    ) -> Result<MemoryRegion, DriverError> {
        let page = MR_PAGE_SIZE;
        if addr % page != buffer.iova() % page || buffer.is_empty() {
            return Err(DriverError::InvalidArgument(
                "a region's address must share its buffer's offset in the page",
            ));
        }
        self.register_pages(pd, buffer, addr, buffer.len() as u64, access)
    }

    /// Registers `length` bytes of virtual address space from `addr` (page-aligned) whose
    /// pages are `buffer`'s pages over and over: virtual page `i` is the buffer's page `i`
    /// modulo its pages — as mapping one file many times would give. The NIC sees one
    /// translation per virtual page, so a working set of many pages costs it what it costs on
    /// real memory (uRDMA §4's 2^20 regions of 4 KiB) without the host memory behind them.
    /// `buffer` must be page-aligned and whole pages.
    pub fn register_mr_repeating(
        &mut self,
        pd: u32,
        buffer: &DmaBuffer,
        addr: u64,
        length: u64,
        access: u32,
    ) -> Result<MemoryRegion, DriverError> {
        let page = MR_PAGE_SIZE;
        if !addr.is_multiple_of(page)
            || !buffer.iova().is_multiple_of(page)
            || buffer.is_empty()
            || !(buffer.len() as u64).is_multiple_of(page)
            || length == 0
        {
            return Err(DriverError::InvalidArgument(
                "a repeating region and its buffer must be whole, aligned pages",
            ));
        }
        self.register_pages(pd, buffer, addr, length, access)
    }

    /// Writes the MTT of `length` bytes from `addr` over `buffer`'s pages (repeated when the
    /// region is longer) and creates the region.
    fn register_pages(
        &mut self,
        pd: u32,
        buffer: &DmaBuffer,
        addr: u64,
        length: u64,
        access: u32,
    ) -> Result<MemoryRegion, DriverError> {
        let page = MR_PAGE_SIZE;
        let pages = mtt_pages(addr, length, MR_PAGE_SIZE.trailing_zeros() as u8);
        let first = buffer.iova() & !(page - 1);
        let backing = mtt_pages(
            buffer.iova(),
            buffer.len() as u64,
            page.trailing_zeros() as u8,
        );
        let mut entries = vec![0u8; pages as usize * MTT_ENTRY_SIZE];
        for (i, e) in entries.chunks_exact_mut(MTT_ENTRY_SIZE).enumerate() {
            e.copy_from_slice(&(first + (i as u64 % backing) * page).to_le_bytes());
        }
        let mtt = self.dev.dma_alloc(entries.len())?;
        mtt.write(0, &entries);
        let key = self.create(
            op::CREATE_MR,
            &CreateMrIn {
                pd: U32::new(pd),
                access: U32::new(access),
                start: U64::new(addr),
                length: U64::new(length),
                mtt_addr: U64::new(mtt.iova()),
                log_page_size: MR_PAGE_SIZE.trailing_zeros() as u8,
                flags: 0,
                rsvd: [0; 2],
                peer_key: U32::new(0),
            },
        )?;
        Ok(MemoryRegion {
            key,
            addr,
            length,
            access,
            mtt,
        })
    }

    pub fn deregister_mr(&mut self, mr: MemoryRegion) -> Result<(), DriverError> {
        // The MTT may be freed once the NIC no longer knows the region; on failure it stays
        // reserved (the NIC may still read it).
        let r = self.object_command(op::DESTROY_MR, mr.key, 0).map(drop);
        if r.is_err() {
            mr.mtt.keep_reserved();
        }
        r
    }

    pub fn query_mr(&mut self, key: u32) -> Result<QueryMrOut, DriverError> {
        let out = self.object_command(op::QUERY_MR, key, core::mem::size_of::<QueryMrOut>())?;
        Ok(QueryMrOut::read_from_bytes(&out).unwrap_or_default())
    }

    /// Sets GID table entry `index` to `gid` with source MAC `mac` (`None` clears it).
    pub fn set_roce_address(
        &mut self,
        index: u16,
        entry: Option<([u8; 16], [u8; 6])>,
    ) -> Result<(), DriverError> {
        let (gid, mac) = entry.unwrap_or_default();
        let input = RoceAddressIn {
            index: U16::new(index),
            flags: if entry.is_some() {
                ROCE_ADDRESS_VALID
            } else {
                0
            },
            rsvd: [0; 5],
            gid,
            mac,
            rsvd2: [0; 2],
        };
        self.command(
            op::SET_ROCE_ADDRESS,
            zerocopy::IntoBytes::as_bytes(&input),
            0,
        )
        .map(drop)
    }

    pub fn query_roce_address(&mut self, index: u16) -> Result<RoceAddressIn, DriverError> {
        let out = self.object_command(
            op::QUERY_ROCE_ADDRESS,
            u32::from(index),
            core::mem::size_of::<RoceAddressIn>(),
        )?;
        Ok(RoceAddressIn::read_from_bytes(&out).unwrap_or_default())
    }

    /// Writes entry `index` of the function's P_Key table (IBA §10.9.2): bit 15 full
    /// membership, bits 0..14 the partition (0: an invalid entry).
    pub fn set_pkey(&mut self, index: u16, pkey: u16) -> Result<(), DriverError> {
        let mut input = PkeyIn::default();
        input.index.set(index);
        input.pkey.set(pkey);
        self.command(op::SET_PKEY, zerocopy::IntoBytes::as_bytes(&input), 0)
            .map(drop)
    }

    /// Makes the function a StaR server (`docs/nic-interface.md` §16): the NIC answers RDPs,
    /// GDs and CQEPs addressed to it from the packets alone, and hands EAs to `control_cq`
    /// (`None`: EAs are refused). `serve = false` stops it.
    pub fn set_star_server(
        &mut self,
        serve: bool,
        control_cq: Option<&CompletionQueue>,
    ) -> Result<(), DriverError> {
        let input = StarServerIn {
            flags: U32::new(if serve { STAR_SERVE } else { 0 }),
            control_cqn: U32::new(control_cq.map_or(STAR_NO_CQ, |c| c.cqn)),
        };
        self.command(
            op::SET_STAR_SERVER,
            zerocopy::IntoBytes::as_bytes(&input),
            0,
        )
        .map(drop)
    }

    /// Adds an entry to `function`'s StaR egress security module (`docs/nic-interface.md`
    /// §16.5; the manager function only): StaR packets of `kinds` ([`star_guard_kind`] bits) to
    /// `dst_gid`, RDPs and GDs within `range`, CQEPs to `cqn` ([`STAR_GUARD_ANY_CQ`]: any).
    /// Returns the entry's id.
    pub fn star_guard_add(
        &mut self,
        function: u16,
        kinds: u8,
        dst_gid: [u8; 16],
        range: std::ops::Range<u64>,
        cqn: u32,
    ) -> Result<u32, DriverError> {
        let input = StarGuardIn {
            function: U16::new(function),
            kinds,
            rsvd: 0,
            cqn: U32::new(cqn),
            dst_gid,
            lo: U64::new(range.start),
            hi: U64::new(range.end),
        };
        let out = self.command(
            op::STAR_GUARD_ADD,
            zerocopy::IntoBytes::as_bytes(&input),
            core::mem::size_of::<CreateOut>(),
        )?;
        Ok(CreateOut::read_from_prefix(&out).map_or(0, |(o, _)| o.id.get()))
    }

    /// Removes entry `id` from `function`'s StaR egress security module.
    pub fn star_guard_del(&mut self, function: u16, id: u32) -> Result<(), DriverError> {
        self.star_guard_command(op::STAR_GUARD_DEL, function, id)
    }

    /// The test knob: `false` lets every StaR packet of `function` through its module.
    pub fn star_guard_enforce(&mut self, function: u16, on: bool) -> Result<(), DriverError> {
        self.star_guard_command(op::STAR_GUARD_ENFORCE, function, u32::from(on))
    }

    fn star_guard_command(
        &mut self,
        opcode: u16,
        function: u16,
        value: u32,
    ) -> Result<(), DriverError> {
        let input = StarGuardFunctionIn {
            function: U16::new(function),
            rsvd: [0; 2],
            value: U32::new(value),
        };
        self.command(opcode, zerocopy::IntoBytes::as_bytes(&input), 0)
            .map(drop)
    }

    /// Entry `index` of the function's P_Key table.
    pub fn query_pkey(&mut self, index: u16) -> Result<u16, DriverError> {
        let out = self.object_command(
            op::QUERY_PKEY,
            u32::from(index),
            core::mem::size_of::<PkeyIn>(),
        )?;
        Ok(PkeyIn::read_from_bytes(&out).unwrap_or_default().pkey.get())
    }

    /// A reliable-connection QP in RESET, sending on `send_cq` and receiving on `recv_cq`,
    /// from `srq` or its own receive ring.
    pub fn create_qp(
        &mut self,
        pd: u32,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        srq: Option<&SharedReceiveQueue>,
        caps: QpCaps,
    ) -> Result<RcQueuePair, DriverError> {
        self.check_log(caps.log_sq_size, self.caps().max_log_sq_size)?;
        if caps.max_recv_sge > 32 {
            return Err(DriverError::InvalidArgument("more than 32 receive entries"));
        }
        let sq = self.dev.dma_alloc(WQEBB << caps.log_sq_size)?;
        let log_rq_stride = recv_stride(caps.max_recv_sge);
        let rq = match srq {
            Some(_) => None,
            None => {
                self.check_log(caps.log_rq_size, self.caps().max_log_rq_size)?;
                Some(
                    self.dev
                        .dma_alloc(1 << (log_rq_stride + caps.log_rq_size))?,
                )
            }
        };
        let qpn = self.create(
            op::CREATE_QP,
            &CreateQpIn {
                pd: U32::new(pd),
                send_cqn: U32::new(send_cq.cqn),
                recv_cqn: U32::new(recv_cq.cqn),
                srqn: U32::new(srq.map_or(NO_SRQ, |s| s.srqn)),
                sq_addr: U64::new(sq.iova()),
                rq_addr: U64::new(rq.as_ref().map_or(0, |r| r.iova())),
                log_sq_size: caps.log_sq_size,
                log_rq_size: caps.log_rq_size,
                log_rq_stride,
                flags: if caps.signal_all {
                    QP_FLAG_SIGNAL_ALL
                } else {
                    0
                } | if caps.out_of_order {
                    QP_FLAG_OUT_OF_ORDER
                } else {
                    0
                },
                rsvd: [0; 4],
            },
        )?;
        Ok(RcQueuePair {
            qpn,
            sq: DeviceRing::new(sq),
            log_sq_size: caps.log_sq_size,
            sq_pi: 0,
            rq: rq.map(DeviceRing::new),
            log_rq_size: caps.log_rq_size,
            log_rq_stride,
            rq_pi: 0,
            dev: self.dev.clone(),
            scratch: vec![0; MAX_WQE_BYTES],
            mmio: WqeByMmio::new(db::wqe_buffer(db::QP_SQ_WQE_BASE, qpn - QPN_BASE)),
        })
    }

    /// Changes the attributes in `mask` (a state change included) of QP `qpn`.
    pub fn modify_qp(&mut self, qpn: u32, mask: u32, attr: &QpAttr) -> Result<(), DriverError> {
        let input = ModifyQpIn {
            qpn: U32::new(qpn),
            attr_mask: U32::new(mask),
            attr: *attr,
        };
        self.command(op::MODIFY_QP, zerocopy::IntoBytes::as_bytes(&input), 0)
            .map(drop)
    }

    pub fn query_qp(&mut self, qpn: u32) -> Result<QueryQpOut, DriverError> {
        let out = self.object_command(op::QUERY_QP, qpn, core::mem::size_of::<QueryQpOut>())?;
        Ok(QueryQpOut::read_from_bytes(&out).unwrap_or_default())
    }

    /// A reliable-connection QP in RESET whose rings are not host memory (an FLD-R queue pair,
    /// FlexDriver §5.3): its send ring of `2^log_sq_size` blocks is at bus address `sq_addr`
    /// (FLD's Tx-ring window) and it receives packet by packet into the striding RQ `rqn`
    /// (`QP_FLAG_MULTI_PACKET_RQ`). Returns the QPN; [`NicDriver::destroy_qp_number`] ends it.
    pub fn create_multi_packet_qp(
        &mut self,
        pd: u32,
        send_cqn: u32,
        recv_cqn: u32,
        rqn: u32,
        sq_addr: u64,
        log_sq_size: u8,
    ) -> Result<u32, DriverError> {
        self.create(
            op::CREATE_QP,
            &CreateQpIn {
                pd: U32::new(pd),
                send_cqn: U32::new(send_cqn),
                recv_cqn: U32::new(recv_cqn),
                srqn: U32::new(rqn),
                sq_addr: U64::new(sq_addr),
                rq_addr: U64::new(0),
                log_sq_size,
                log_rq_size: 0,
                log_rq_stride: MIN_LOG_RQ_STRIDE,
                flags: QP_FLAG_MULTI_PACKET_RQ,
                rsvd: [0; 4],
            },
        )
    }

    /// Destroys a QP the driver holds no rings of.
    pub fn destroy_qp_number(&mut self, qpn: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_QP, qpn, 0).map(drop)
    }

    /// Destroys a QP and gives its rings back (kept reserved if the NIC refuses).
    pub fn destroy_qp(&mut self, qp: RcQueuePair) -> Result<(), DriverError> {
        let r = self.object_command(op::DESTROY_QP, qp.qpn, 0).map(drop);
        if let Some(rq) = qp.rq {
            let rq_result = match &r {
                Ok(()) => Ok(()),
                Err(_) => Err(DriverError::InvalidArgument("the QP was not destroyed")),
            };
            let _ = retire_ring(rq, rq_result);
        }
        retire_ring(qp.sq, r)
    }

    /// A shared receive queue of `2^log_size` WQEs of up to `max_sge` entries.
    pub fn create_srq(
        &mut self,
        pd: u32,
        log_size: u8,
        max_sge: u32,
    ) -> Result<SharedReceiveQueue, DriverError> {
        self.check_log(log_size, self.caps().max_log_rq_size)?;
        let log_stride = recv_stride(max_sge);
        let ring = self.dev.dma_alloc(1 << (log_stride + log_size))?;
        let srqn = self.create(
            op::CREATE_SRQ,
            &CreateSrqIn {
                pd: U32::new(pd),
                rsvd: U32::new(0),
                addr: U64::new(ring.iova()),
                log_size,
                log_stride,
                rsvd2: [0; 6],
            },
        )?;
        Ok(SharedReceiveQueue {
            srqn,
            ring: DeviceRing::new(ring),
            log_size,
            log_stride,
            pi: 0,
            dev: self.dev.clone(),
        })
    }

    pub fn destroy_srq(&mut self, srq: SharedReceiveQueue) -> Result<(), DriverError> {
        let r = self.object_command(op::DESTROY_SRQ, srq.srqn, 0).map(drop);
        retire_ring(srq.ring, r)
    }

    /// Arms the SRQ limit event on EQ `eqn` (`limit` 0 disarms).
    pub fn arm_srq(&mut self, srqn: u32, limit: u32, eqn: u32) -> Result<(), DriverError> {
        let input = ArmSrqIn {
            srqn: U32::new(srqn),
            limit: U32::new(limit),
            eqn: U32::new(eqn),
            rsvd: U32::new(0),
        };
        self.command(op::ARM_SRQ, zerocopy::IntoBytes::as_bytes(&input), 0)
            .map(drop)
    }

    pub fn query_srq(&mut self, srqn: u32) -> Result<QuerySrqOut, DriverError> {
        let out = self.object_command(op::QUERY_SRQ, srqn, core::mem::size_of::<QuerySrqOut>())?;
        Ok(QuerySrqOut::read_from_bytes(&out).unwrap_or_default())
    }

    pub fn query_rdma_counters(&mut self) -> Result<RdmaCountersOut, DriverError> {
        let out = self.command(
            op::QUERY_RDMA_COUNTERS,
            &[],
            core::mem::size_of::<RdmaCountersOut>(),
        )?;
        Ok(RdmaCountersOut::read_from_bytes(&out).unwrap_or_default())
    }
}

impl RcQueuePair {
    /// Basic blocks of the send ring.
    pub fn send_ring_size(&self) -> u32 {
        1 << self.log_sq_size
    }
    /// Receive WQEs the QP's own ring holds (0 with an SRQ).
    pub fn recv_ring_size(&self) -> u32 {
        self.rq.as_ref().map_or(0, |_| 1 << self.log_rq_size)
    }
    pub fn send_producer(&self) -> u32 {
        self.sq_pi
    }

    /// Writes `wqe` at the send producer counter (does not ring); returns its index, which its
    /// CQE reports. The caller keeps the ring from overflowing (it counts completions).
    pub fn post_send(&mut self, wqe: &RdmaWqe<'_>) -> Result<u16, DriverError> {
        let index = self.sq_pi as u16;
        let n = wqe
            .encode(self.qpn, index, &mut self.scratch)
            .map_err(|e| match e {
                RdmaWqeError::TooManySges => DriverError::InvalidArgument("too many SGEs"),
                RdmaWqeError::InlineTooLong => DriverError::InvalidArgument("inline data too long"),
                RdmaWqeError::MissingSegment => {
                    DriverError::InvalidArgument("remote address or atomic operands missing")
                }
                RdmaWqeError::BufferTooSmall => DriverError::InvalidArgument("WQE too large"),
            })?;
        let nbb = wqebbs(n / DS_SIZE);
        self.write_raw_blocks(nbb);
        Ok(index)
    }

    /// Copies raw WQE bytes (tests use it for malformed WQEs) at the producer counter.
    pub fn post_send_raw(&mut self, wqe: &[u8]) {
        let nbb = wqe.len().div_ceil(WQEBB).max(1) as u32;
        self.scratch[..wqe.len()].copy_from_slice(wqe);
        self.scratch[wqe.len()..nbb as usize * WQEBB].fill(0);
        self.write_raw_blocks(nbb);
    }

    fn write_raw_blocks(&mut self, nbb: u32) {
        self.mmio.posted(self.sq_pi, nbb);
        let blocks = &self.scratch[..nbb as usize * WQEBB];
        write_ring_blocks(&self.sq, self.log_sq_size, self.sq_pi, blocks);
        self.sq_pi = self.sq_pi.wrapping_add(nbb);
    }

    /// Whether a doorbell for one small WQE also writes it into the QP's WQE-by-MMIO buffer
    /// (on by default).
    pub fn set_wqe_by_mmio(&mut self, on: bool) {
        self.mmio.set_enabled(on);
    }

    /// Tells the NIC about every send WQE posted so far.
    pub fn ring_send_doorbell(&mut self) {
        self.mmio.ring(
            &self.dev,
            (&self.sq, self.log_sq_size),
            db::slot(db::QP_SQ_BASE, self.qpn - QPN_BASE),
            self.sq_pi & db::PI_MASK,
        );
    }

    /// Writes a receive WQE with `sges` (does not ring); returns its counter, which its CQE
    /// reports. False-free: an error when the entries do not fit the QP's stride or the QP has
    /// an SRQ.
    pub fn post_recv(&mut self, sges: &[Sge]) -> Result<u16, DriverError> {
        let rq = self
            .rq
            .as_ref()
            .ok_or(DriverError::InvalidArgument("the QP receives from an SRQ"))?;
        let stride = 1usize << self.log_rq_stride;
        let mut wqe = [0u8; 512];
        if !encode_recv_wqe(sges, &mut wqe[..stride]) {
            return Err(DriverError::InvalidArgument(
                "more SGEs than the QP's receive WQE",
            ));
        }
        let counter = self.rq_pi;
        let slot = (counter & ((1 << self.log_rq_size) - 1)) as usize * stride;
        rq.write(slot, &wqe[..stride]);
        self.rq_pi = counter.wrapping_add(1);
        Ok(counter as u16)
    }

    pub fn ring_recv_doorbell(&self) {
        doorbell(
            &self.dev,
            db::slot(db::QP_RQ_BASE, self.qpn - QPN_BASE),
            self.rq_pi & db::PI_MASK,
        );
    }

    /// Tells the NIC the host has taken `taken` slots of the QP's staging ring (a count since
    /// the ring was set, 16 bits wrapping; `docs/nic-interface.md` §18).
    pub fn staging_taken(&self, taken: u16) {
        doorbell(
            &self.dev,
            db::slot(db::QP_STAGING_BASE, self.qpn - QPN_BASE),
            u32::from(taken),
        );
    }
}

impl NicDriver {
    /// Gives QP `qpn` a staging ring of `2^log_slots` slots of `2^log_slot_bytes` bytes at `addr`
    /// in the region of `lkey` (uRDMA's in-RNIC unload path, §18); `log_slots` 0 takes it away.
    pub fn set_qp_staging(
        &mut self,
        qpn: u32,
        lkey: u32,
        addr: u64,
        log_slots: u8,
        log_slot_bytes: u8,
    ) -> Result<(), DriverError> {
        let input = QpStagingIn {
            qpn: U32::new(qpn),
            lkey: U32::new(lkey),
            addr: U64::new(addr),
            log_slots,
            log_slot_bytes,
            rsvd: [0; 6],
        };
        self.command(op::SET_QP_STAGING, zerocopy::IntoBytes::as_bytes(&input), 0)
            .map(drop)
    }
}

impl SharedReceiveQueue {
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    pub fn post_recv(&mut self, sges: &[Sge]) -> Result<u16, DriverError> {
        let stride = 1usize << self.log_stride;
        let mut wqe = [0u8; 512];
        if !encode_recv_wqe(sges, &mut wqe[..stride]) {
            return Err(DriverError::InvalidArgument("more SGEs than the SRQ's WQE"));
        }
        let counter = self.pi;
        let slot = (counter & ((1 << self.log_size) - 1)) as usize * stride;
        self.ring.write(slot, &wqe[..stride]);
        self.pi = counter.wrapping_add(1);
        Ok(counter as u16)
    }

    pub fn ring_doorbell(&self) {
        doorbell(
            &self.dev,
            db::slot(db::SRQ_BASE, self.srqn),
            self.pi & db::PI_MASK,
        );
    }
}
