//! Driver of one soft-NIC host function: bring-up (reset, capability query, command buffers),
//! object creation through the command interface, and the data-path rings (EQ, CQ, SQ, RQ) as a
//! poll-mode driver keeps them. Formats come from `fld_device::nic::abi`, never redefined here.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

pub use fld_abi::nic::SendWqe;
use fld_abi::nic::*;
use fld_abi::pci::{CMD_BUS_MASTER, CMD_MEMORY, OFF_COMMAND, OFF_DEVICE, OFF_VENDOR};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::{DmaBuffer, DriverError, PciDevice};

/// Attempts to poll the command status before giving up (each attempt lets an in-process card
/// run once).
const CMD_POLL_LIMIT: u32 = 100_000;

/// Driver state of one NIC function.
pub struct NicDriver {
    pub(crate) dev: Arc<dyn PciDevice>,
    cmd_in: DmaBuffer,
    cmd_out: DmaBuffer,
    token: u16,
    caps: Caps,
    mac: [u8; 6],
}

impl NicDriver {
    /// Checks identity, enables the function, resets it and reads its capabilities.
    pub fn probe(dev: Arc<dyn PciDevice>) -> Result<Self, DriverError> {
        let vendor = dev.config_read16(OFF_VENDOR as u64);
        let device = dev.config_read16(OFF_DEVICE as u64);
        if vendor != PCI_VENDOR_ID || device != NIC_DEVICE_ID {
            return Err(DriverError::WrongDevice { vendor, device });
        }
        let cmd = dev.config_read16(OFF_COMMAND as u64) | CMD_MEMORY | CMD_BUS_MASTER;
        dev.config_write16(OFF_COMMAND as u64, cmd);
        dev.write32(BAR_CONTROL, reg::DEVICE_RESET, RESET_MAGIC);
        let status = dev.read32(BAR_CONTROL, reg::DEVICE_STATUS);
        if status & STATUS_READY == 0 || status & STATUS_FATAL != 0 {
            return Err(DriverError::NotReady(status));
        }
        let rev = dev.read32(BAR_CONTROL, reg::CMD_INTERFACE_REV);
        if rev != INTERFACE_REV {
            return Err(DriverError::InterfaceRevision(rev));
        }
        let cmd_in = dev.dma_alloc(CMD_MAX_LEN as usize)?;
        let cmd_out = dev.dma_alloc(CMD_MAX_LEN as usize)?;
        let mac = mac_from_registers(
            dev.read32(BAR_CONTROL, reg::MAC_LO),
            dev.read32(BAR_CONTROL, reg::MAC_HI),
        );
        let mut drv = NicDriver {
            dev,
            cmd_in,
            cmd_out,
            token: 0,
            caps: Caps::default(),
            mac,
        };
        let out = drv.command(op::QUERY_CAPS, &[], core::mem::size_of::<Caps>())?;
        drv.caps = Caps::read_from_prefix(&out)
            .map_err(|_| DriverError::Transport("short caps".into()))?
            .0;
        Ok(drv)
    }

    pub fn device(&self) -> &Arc<dyn PciDevice> {
        &self.dev
    }
    pub fn caps(&self) -> &Caps {
        &self.caps
    }
    pub fn vport(&self) -> u16 {
        self.caps.vport.get()
    }
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Executes a command: `input` is the body after the 16-byte header; returns the output body
    /// (`out_len` bytes after the header).
    pub fn command(
        &mut self,
        opcode: u16,
        input: &[u8],
        out_len: usize,
    ) -> Result<Vec<u8>, DriverError> {
        let hdr = CmdInHeader {
            opcode: U16::new(opcode),
            ..Default::default()
        };
        let in_len = 16 + input.len();
        let total_out = 16 + out_len;
        if in_len > CMD_MAX_LEN as usize || total_out > CMD_MAX_LEN as usize {
            return Err(DriverError::InvalidArgument("command too long"));
        }
        self.cmd_in.write_obj(0, &hdr);
        self.cmd_in.write(16, input);
        self.cmd_out.fill(0, total_out, 0);
        self.submit(
            self.cmd_in.iova(),
            in_len as u32,
            self.cmd_out.iova(),
            total_out as u32,
            opcode,
        )?;
        let out_hdr: CmdOutHeader = self.cmd_out.read_obj(0);
        if out_hdr.status != CmdStatus::Ok as u8 {
            return Err(DriverError::Command {
                opcode,
                status: CmdStatus::from_u8(out_hdr.status),
                syndrome: out_hdr.syndrome.get(),
            });
        }
        let mut body = vec![0; out_len];
        self.cmd_out.read(16, &mut body);
        Ok(body)
    }

    /// Posts raw command buffers (tests use it for malformed requests) and waits for completion.
    /// Returns the delivery status on failure to deliver.
    pub fn submit(
        &mut self,
        in_addr: u64,
        in_len: u32,
        out_addr: u64,
        out_len: u32,
        opcode: u16,
    ) -> Result<(), DriverError> {
        let d = &self.dev;
        d.write32(BAR_CONTROL, reg::CMD_IN_ADDR_LO, in_addr as u32);
        d.write32(BAR_CONTROL, reg::CMD_IN_ADDR_HI, (in_addr >> 32) as u32);
        d.write32(BAR_CONTROL, reg::CMD_OUT_ADDR_LO, out_addr as u32);
        d.write32(BAR_CONTROL, reg::CMD_OUT_ADDR_HI, (out_addr >> 32) as u32);
        d.write32(BAR_CONTROL, reg::CMD_IN_LEN, in_len);
        d.write32(BAR_CONTROL, reg::CMD_OUT_LEN, out_len);
        self.token = self.token.wrapping_add(1);
        let token = self.token as u32;
        d.write32(BAR_CONTROL, reg::CMD_DOORBELL, token);
        for _ in 0..CMD_POLL_LIMIT {
            let st = CmdStatusRegister::decode(d.read32(BAR_CONTROL, reg::CMD_STATUS));
            if st.done && st.token == token as u16 {
                if st.delivery != CmdDelivery::Ok as u8 {
                    return Err(DriverError::Delivery {
                        opcode,
                        delivery: st.delivery,
                    });
                }
                return Ok(());
            }
            d.run_device();
        }
        Err(DriverError::Timeout(opcode))
    }

    pub(crate) fn create<T: IntoBytes + Immutable>(
        &mut self,
        opcode: u16,
        input: &T,
    ) -> Result<u32, DriverError> {
        self.create_raw(opcode, input.as_bytes())
    }

    pub(crate) fn create_raw(&mut self, opcode: u16, input: &[u8]) -> Result<u32, DriverError> {
        let out = self.command(opcode, input, core::mem::size_of::<CreateOut>())?;
        Ok(u32::from_le_bytes([out[0], out[1], out[2], out[3]]))
    }

    pub(crate) fn object_command(
        &mut self,
        opcode: u16,
        id: u32,
        out_len: usize,
    ) -> Result<Vec<u8>, DriverError> {
        self.command(opcode, ObjectIn::new(id).as_bytes(), out_len)
    }

    pub(crate) fn check_log(&self, log_size: u8, max: u8) -> Result<(), DriverError> {
        if log_size > max {
            return Err(DriverError::InvalidArgument(
                "ring size beyond the device limit",
            ));
        }
        Ok(())
    }

    // --- queues -------------------------------------------------------------------------------

    /// An event queue interrupting on MSI-X `vector`, armed.
    pub fn create_eq(&mut self, log_size: u8, vector: u16) -> Result<EventQueue, DriverError> {
        self.check_log(log_size, self.caps.max_log_eq_size)?;
        let ring = self.dev.dma_alloc(EQE_SIZE << log_size)?;
        init_owner_ring(&ring, EQE_SIZE, log_size);
        let eqn = self.create(
            op::CREATE_EQ,
            &CreateEqIn {
                addr: U64::new(ring.iova()),
                log_size,
                rsvd: 0,
                msix_vector: U16::new(vector),
                rsvd2: [0; 4],
            },
        )?;
        let mut eq = EventQueue {
            ring: DeviceRing::new(ring),
            eqn,
            log_size,
            ci: 0,
            arm_sn: 0,
            dev: self.dev.clone(),
        };
        eq.arm();
        Ok(eq)
    }

    pub fn create_cq(
        &mut self,
        eq: &EventQueue,
        log_size: u8,
    ) -> Result<CompletionQueue, DriverError> {
        self.check_log(log_size, self.caps.max_log_cq_size)?;
        let ring = self.dev.dma_alloc(CQE_SIZE << log_size)?;
        init_owner_ring(&ring, CQE_SIZE, log_size);
        let cqn = self.create(
            op::CREATE_CQ,
            &CreateCqIn {
                addr: U64::new(ring.iova()),
                eqn: U32::new(eq.eqn),
                log_size,
                rsvd: [0; 3],
            },
        )?;
        Ok(CompletionQueue {
            ring: DeviceRing::new(ring),
            cqn,
            log_size,
            ci: 0,
            arm_sn: 0,
            dev: self.dev.clone(),
        })
    }

    pub fn create_sq(
        &mut self,
        cq: &CompletionQueue,
        log_size: u8,
        signal_all: bool,
    ) -> Result<SendQueue, DriverError> {
        self.check_log(log_size, self.caps.max_log_sq_size)?;
        let ring = self.dev.dma_alloc(WQEBB << log_size)?;
        let flags = if signal_all { SQ_FLAG_SIGNAL_ALL } else { 0 };
        let sqn = self.create(
            op::CREATE_SQ,
            &CreateSqIn {
                addr: U64::new(ring.iova()),
                cqn: U32::new(cq.cqn),
                log_size,
                flags,
                rsvd: [0; 2],
            },
        )?;
        Ok(SendQueue {
            ring: DeviceRing::new(ring),
            sqn,
            log_size,
            pi: 0,
            dev: self.dev.clone(),
            scratch: vec![0; MAX_WQE_BYTES],
            mmio: WqeByMmio::new(db::wqe_buffer(db::SQ_WQE_BASE, sqn)),
        })
    }

    /// A CQ whose ring is device memory at bus address `addr` (a peer's BAR, e.g. FLD's CQ
    /// window): the driver neither allocates nor polls it. Returns the CQ number.
    pub fn create_cq_at(
        &mut self,
        eq: &EventQueue,
        log_size: u8,
        addr: u64,
    ) -> Result<u32, DriverError> {
        self.check_log(log_size, self.caps.max_log_cq_size)?;
        self.create(
            op::CREATE_CQ,
            &CreateCqIn {
                addr: U64::new(addr),
                eqn: U32::new(eq.eqn),
                log_size,
                rsvd: [0; 3],
            },
        )
    }

    /// An SQ whose ring is device memory at bus address `addr` (FLD's Tx-ring window), completing
    /// into CQ `cqn`. Returns the SQ number.
    pub fn create_sq_at(&mut self, cqn: u32, log_size: u8, addr: u64) -> Result<u32, DriverError> {
        self.check_log(log_size, self.caps.max_log_sq_size)?;
        self.create(
            op::CREATE_SQ,
            &CreateSqIn {
                addr: U64::new(addr),
                cqn: U32::new(cqn),
                log_size,
                flags: 0,
                rsvd: [0; 2],
            },
        )
    }

    pub fn create_rq(
        &mut self,
        cq: &CompletionQueue,
        log_size: u8,
        layout: RqLayout,
    ) -> Result<RecvQueue, DriverError> {
        self.create_rq_on(cq.cqn, log_size, layout)
    }

    /// An RQ completing into CQ number `cqn` (which may live in a peer's memory).
    pub fn create_rq_on(
        &mut self,
        cqn: u32,
        log_size: u8,
        layout: RqLayout,
    ) -> Result<RecvQueue, DriverError> {
        self.check_log(log_size, self.caps.max_log_rq_size)?;
        let ring = self.dev.dma_alloc(RECV_WQE_SIZE << log_size)?;
        let (rq_type, log_stride_size, log_strides) = match layout {
            RqLayout::Regular => (RQ_TYPE_REGULAR, 0, 0),
            RqLayout::Striding {
                log_stride_size,
                log_strides,
            } => (RQ_TYPE_STRIDING, log_stride_size, log_strides),
        };
        let input = CreateRqIn {
            addr: U64::new(ring.iova()),
            cqn: U32::new(cqn),
            log_size,
            rq_type,
            log_stride_size,
            log_strides,
        };
        let rqn = self.create(op::CREATE_RQ, &input)?;
        Ok(RecvQueue {
            ring: DeviceRing::new(ring),
            rqn,
            log_size,
            layout,
            pi: 0,
            dev: self.dev.clone(),
        })
    }

    pub fn destroy_eq(&mut self, eqn: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_EQ, eqn, 0).map(drop)
    }
    pub fn destroy_cq(&mut self, cqn: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_CQ, cqn, 0).map(drop)
    }
    pub fn destroy_sq(&mut self, sqn: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_SQ, sqn, 0).map(drop)
    }
    pub fn destroy_rq(&mut self, rqn: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_RQ, rqn, 0).map(drop)
    }

    /// Destroys an event queue this driver created and gives its ring back to DMA memory.
    /// Destroy dependents first: the device refuses a queue still referenced (RESOURCE_BUSY).
    pub fn destroy_event_queue(&mut self, eq: EventQueue) -> Result<(), DriverError> {
        retire_ring(eq.ring, self.destroy_eq(eq.eqn))
    }
    /// As [`NicDriver::destroy_event_queue`], for a completion queue.
    pub fn destroy_completion_queue(&mut self, cq: CompletionQueue) -> Result<(), DriverError> {
        retire_ring(cq.ring, self.destroy_cq(cq.cqn))
    }
    /// As [`NicDriver::destroy_event_queue`], for a send queue.
    pub fn destroy_send_queue(&mut self, sq: SendQueue) -> Result<(), DriverError> {
        retire_ring(sq.ring, self.destroy_sq(sq.sqn))
    }
    /// As [`NicDriver::destroy_event_queue`], for a receive queue (its receive buffers are the
    /// caller's: free them after this returns).
    pub fn destroy_recv_queue(&mut self, rq: RecvQueue) -> Result<(), DriverError> {
        retire_ring(rq.ring, self.destroy_rq(rq.rqn))
    }

    pub fn query_cq(&mut self, cqn: u32) -> Result<QueryCqOut, DriverError> {
        let out = self.object_command(op::QUERY_CQ, cqn, core::mem::size_of::<QueryCqOut>())?;
        Ok(QueryCqOut::read_from_bytes(&out).unwrap_or_default())
    }
    pub fn query_eq(&mut self, eqn: u32) -> Result<QueryCqOut, DriverError> {
        let out = self.object_command(op::QUERY_EQ, eqn, core::mem::size_of::<QueryCqOut>())?;
        Ok(QueryCqOut::read_from_bytes(&out).unwrap_or_default())
    }
    pub fn query_sq(&mut self, sqn: u32) -> Result<QueryQueueOut, DriverError> {
        let out = self.object_command(op::QUERY_SQ, sqn, core::mem::size_of::<QueryQueueOut>())?;
        Ok(QueryQueueOut::read_from_bytes(&out).unwrap_or_default())
    }
    pub fn query_rq(&mut self, rqn: u32) -> Result<QueryQueueOut, DriverError> {
        let out = self.object_command(op::QUERY_RQ, rqn, core::mem::size_of::<QueryQueueOut>())?;
        Ok(QueryQueueOut::read_from_bytes(&out).unwrap_or_default())
    }

    /// Returns an SQ from the error state to ready; its counters restart at zero.
    pub fn recover_sq(&mut self, sq: &mut SendQueue) -> Result<(), DriverError> {
        self.command(
            op::MODIFY_SQ,
            ModifyQueueIn {
                id: U32::new(sq.sqn),
                new_state: QueueState::Ready as u8,
                rsvd: [0; 3],
            }
            .as_bytes(),
            0,
        )?;
        sq.pi = 0;
        Ok(())
    }

    /// Returns an RQ from the error state to ready; the driver reposts its buffers.
    pub fn recover_rq(&mut self, rq: &mut RecvQueue) -> Result<(), DriverError> {
        self.command(
            op::MODIFY_RQ,
            ModifyQueueIn {
                id: U32::new(rq.rqn),
                new_state: QueueState::Ready as u8,
                rsvd: [0; 3],
            }
            .as_bytes(),
            0,
        )?;
        rq.pi = 0;
        Ok(())
    }

    // --- steering -----------------------------------------------------------------------------

    /// An RSS group over `rqns` (a power of two, at most 256 entries).
    pub fn create_rss_group(
        &mut self,
        key: &[u8; 40],
        hash_fields: u8,
        rqns: &[u32],
    ) -> Result<u32, DriverError> {
        let hdr = CreateRssGroupIn {
            key: *key,
            hash_fields,
            rsvd: 0,
            indirection_len: U16::new(rqns.len() as u16),
            rsvd2: [0; 4],
        };
        self.create_raw(op::CREATE_RSS_GROUP, &hdr.encode(rqns))
    }

    pub fn destroy_rss_group(&mut self, id: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_RSS_GROUP, id, 0).map(drop)
    }

    pub fn create_flow_table(
        &mut self,
        kind: u8,
        level: u8,
        miss: TableMiss,
    ) -> Result<u32, DriverError> {
        let (miss, miss_table) = match miss {
            TableMiss::Default => (MISS_DEFAULT, 0),
            TableMiss::Drop => (MISS_DROP, 0),
            TableMiss::Goto(t) => (MISS_GOTO_TABLE, t),
        };
        self.create(
            op::CREATE_FLOW_TABLE,
            &CreateFlowTableIn {
                kind,
                level,
                miss,
                rsvd: 0,
                miss_table: U32::new(miss_table),
            },
        )
    }

    pub fn destroy_flow_table(&mut self, id: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_FLOW_TABLE, id, 0).map(drop)
    }

    /// Makes `table` the root of its kind for this function (`None` restores the default).
    pub fn set_root(&mut self, kind: u8, table: Option<u32>) -> Result<(), DriverError> {
        let input = SetRootIn {
            kind,
            rsvd: [0; 3],
            table: U32::new(table.unwrap_or(NO_TABLE)),
        };
        self.command(op::SET_FLOW_TABLE_ROOT, input.as_bytes(), 0)
            .map(drop)
    }

    pub fn create_flow_entry(&mut self, table: u32, rule: &FlowRule) -> Result<u32, DriverError> {
        let (actions, vport, dest) = rule.fate.encode();
        let mut a = actions;
        if rule.flow_tag.is_some() {
            a |= action::SET_FLOW_TAG;
        }
        if rule.count {
            a |= action::COUNT;
        }
        if rule.vxlan_decap {
            a |= action::VXLAN_DECAP;
        }
        if rule.meter.is_some() {
            a |= action::METER;
        }
        if rule.vxlan_encap.is_some() {
            a |= action::VXLAN_ENCAP;
        }
        let input = CreateFlowEntryIn {
            table: U32::new(table),
            priority: U16::new(rule.priority),
            rsvd: U16::new(0),
            mask: rule.mask,
            value: rule.value,
            actions: U32::new(a),
            vport: U16::new(vport),
            rsvd2: U16::new(0),
            dest: U32::new(dest),
            flow_tag: U32::new(rule.flow_tag.unwrap_or(0)),
            meter: U32::new(rule.meter.unwrap_or(0)),
            encap: U32::new(rule.vxlan_encap.unwrap_or(0)),
        };
        self.create(op::CREATE_FLOW_ENTRY, &input)
    }

    pub fn destroy_flow_entry(&mut self, id: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_FLOW_ENTRY, id, 0).map(drop)
    }

    /// (packets, bytes) of an entry's COUNT action.
    pub fn query_flow_entry(&mut self, id: u32) -> Result<(u64, u64), DriverError> {
        let out = self.object_command(
            op::QUERY_FLOW_ENTRY,
            id,
            core::mem::size_of::<QueryFlowEntryOut>(),
        )?;
        let o = QueryFlowEntryOut::read_from_bytes(&out).unwrap_or_default();
        Ok((o.packets.get(), o.bytes.get()))
    }

    /// A token-bucket policer of `rate_bytes_per_s` and `burst_bytes` for flow rules.
    pub fn create_meter(
        &mut self,
        rate_bytes_per_s: u64,
        burst_bytes: u32,
    ) -> Result<u32, DriverError> {
        self.create(
            op::CREATE_METER,
            &CreateMeterIn {
                rate_bytes_per_s: U64::new(rate_bytes_per_s),
                burst_bytes: U32::new(burst_bytes),
                rsvd: [0; 4],
            },
        )
    }

    /// A VXLAN tunnel's outer headers for [`FlowRule::vxlan_encap`] (RFC 7348 §5).
    pub fn create_vxlan_encap(&mut self, tunnel: &CreateVxlanEncapIn) -> Result<u32, DriverError> {
        self.create(op::CREATE_VXLAN_ENCAP, tunnel)
    }

    pub fn destroy_vxlan_encap(&mut self, id: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_VXLAN_ENCAP, id, 0)
            .map(drop)
    }

    pub fn destroy_meter(&mut self, id: u32) -> Result<(), DriverError> {
        self.object_command(op::DESTROY_METER, id, 0).map(drop)
    }

    pub fn query_meter(&mut self, id: u32) -> Result<QueryMeterOut, DriverError> {
        let out =
            self.object_command(op::QUERY_METER, id, core::mem::size_of::<QueryMeterOut>())?;
        Ok(QueryMeterOut::read_from_bytes(&out).unwrap_or_default())
    }

    pub fn query_vport(&mut self, vport: u16) -> Result<QueryVportOut, DriverError> {
        let out = self.command(
            op::QUERY_VPORT,
            QueryVportIn {
                vport: U16::new(vport),
                rsvd: [0; 6],
            }
            .as_bytes(),
            core::mem::size_of::<QueryVportOut>(),
        )?;
        Ok(QueryVportOut::read_from_bytes(&out).unwrap_or_default())
    }
}

/// Fills a ring with entries the device has not written yet (owner bit 1, invalid opcode).
pub(crate) fn init_owner_ring(ring: &DmaBuffer, entry: usize, log_size: u8) {
    for i in 0..(1usize << log_size) {
        ring.write(i * entry + OWNER_BYTE, &[INVALID_OWNER_BYTE]);
    }
}

/// Receive queue layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RqLayout {
    /// One packet per WQE buffer.
    Regular,
    /// Multi-packet WQEs of `2^log_strides` strides of `2^log_stride_size` bytes.
    Striding {
        log_stride_size: u8,
        log_strides: u8,
    },
}

/// A table's miss behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableMiss {
    Default,
    Drop,
    Goto(u32),
}

/// Where a rule sends matching packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleFate {
    /// No fate: tag/count, then the pipeline's default (FDB: L2 forwarding; receive: unsteered).
    None,
    Vport(u16),
    Rq(u32),
    Rss(u32),
    Drop,
    Goto(u32),
}

impl RuleFate {
    fn encode(self) -> (u32, u16, u32) {
        match self {
            RuleFate::None => (0, 0, 0),
            RuleFate::Vport(v) => (action::FWD_VPORT, v, 0),
            RuleFate::Rq(r) => (action::FWD_RQ, 0, r),
            RuleFate::Rss(g) => (action::FWD_RSS, 0, g),
            RuleFate::Drop => (action::DROP, 0, 0),
            RuleFate::Goto(t) => (action::GOTO_TABLE, 0, t),
        }
    }
}

/// A flow entry as the driver builds it.
#[derive(Clone, Copy, Debug)]
pub struct FlowRule {
    pub priority: u16,
    pub mask: FlowMatch,
    pub value: FlowMatch,
    pub fate: RuleFate,
    pub flow_tag: Option<u32>,
    pub count: bool,
    /// Strip a VXLAN encapsulation first (the fate must be [`RuleFate::Goto`]: the inner frame
    /// is steered from that table).
    pub vxlan_decap: bool,
    /// Police matching packets with this meter ([`NicDriver::create_meter`]).
    pub meter: Option<u32>,
    /// Encapsulate in this VXLAN tunnel before forwarding (the fate must be
    /// [`RuleFate::Vport`]; [`NicDriver::create_vxlan_encap`]).
    pub vxlan_encap: Option<u32>,
}

impl FlowRule {
    /// Matches everything.
    pub fn any(fate: RuleFate) -> Self {
        FlowRule {
            priority: 0,
            mask: FlowMatch::default(),
            value: FlowMatch::default(),
            fate,
            flow_tag: None,
            count: false,
            vxlan_decap: false,
            vxlan_encap: None,
            meter: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rings
// ---------------------------------------------------------------------------------------------

/// A queue's ring: memory the device writes (or reads) until the queue is destroyed. It goes
/// back to DMA memory only when the device acknowledged the destroy ([`retire_ring`]); dropped
/// any other way (the queue object dropped, a device reset, a refused destroy) it stays
/// reserved, so no later buffer can receive the device's stray writes.
pub(crate) struct DeviceRing {
    ring: DmaBuffer,
    released: bool,
}

impl DeviceRing {
    pub(crate) fn new(ring: DmaBuffer) -> Self {
        DeviceRing {
            ring,
            released: false,
        }
    }
}

impl std::ops::Deref for DeviceRing {
    type Target = DmaBuffer;
    fn deref(&self) -> &DmaBuffer {
        &self.ring
    }
}

impl Drop for DeviceRing {
    fn drop(&mut self) {
        if !self.released {
            self.ring.keep_reserved();
        }
    }
}

/// Frees a destroyed queue's ring; when the destroy failed the ring stays reserved.
pub(crate) fn retire_ring(
    mut ring: DeviceRing,
    destroyed: Result<(), DriverError>,
) -> Result<(), DriverError> {
    match &destroyed {
        Ok(()) => ring.released = true,
        Err(e) => log::warn!("{e}: the queue's ring {:?} stays reserved", ring.ring),
    }
    destroyed
}

pub(crate) fn doorbell(dev: &Arc<dyn PciDevice>, offset: u64, value: u32) {
    // Descriptor writes must be visible before the device sees the doorbell.
    fence(Ordering::Release);
    dev.write32(BAR_DOORBELL, offset, value);
}

/// Copies whole basic blocks into a send ring of `1 << log_size` blocks from block counter
/// `counter` on: in one piece up to the ring's end, the rest from its start.
#[inline]
pub(crate) fn write_ring_blocks(ring: &DmaBuffer, log_size: u8, counter: u32, blocks: &[u8]) {
    let size = 1u32 << log_size;
    let mut at = counter & (size - 1);
    if blocks.len() <= (size - at) as usize * WQEBB {
        return ring.write(at as usize * WQEBB, blocks);
    }
    let mut rest = blocks;
    while !rest.is_empty() {
        let n = rest.len().min((size - at) as usize * WQEBB);
        ring.write(at as usize * WQEBB, &rest[..n]);
        rest = &rest[n..];
        at = 0;
    }
}

/// WQE by MMIO (`docs/nic-interface.md` §4.1): the last WQE posted since the doorbell was rung,
/// kept so that a doorbell covering exactly one WQE of at most [`db::WQE_BUFFER_BLOCKS`] blocks
/// first puts it into the queue's buffer — the engine then takes it from there instead of
/// fetching it by DMA — as mlx5's provider writes a lone small WQE through BlueFlame. Bursts of
/// several WQEs are left to the fetch, which reads them in one request.
pub(crate) struct WqeByMmio {
    /// The queue's buffer in the doorbell BAR.
    buffer: u64,
    enabled: bool,
    wqe: [u8; db::WQE_BUFFER_BLOCKS as usize * WQEBB],
    counter: u32,
    blocks: u32,
    /// WQEs posted since the doorbell was last rung.
    posted: u32,
}

impl WqeByMmio {
    pub(crate) fn new(buffer: u64) -> Self {
        WqeByMmio {
            buffer,
            enabled: true,
            wqe: [0; db::WQE_BUFFER_BLOCKS as usize * WQEBB],
            counter: 0,
            blocks: 0,
            posted: 0,
        }
    }

    /// A WQE of `blocks` basic blocks was written into the ring at block `counter`. Only
    /// noted: the WQE is read back from the ring at the doorbell, and only when it is the lone
    /// one, so a burst's WQEs are copied once, into the ring.
    #[inline]
    pub(crate) fn posted(&mut self, counter: u32, blocks: u32) {
        self.posted += 1;
        self.blocks = blocks.max(1);
        self.counter = counter;
    }

    pub(crate) fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Rings the queue's doorbell at `doorbell_at` with producer `value`. When the doorbell covers
    /// one WQE that fits, the buffer gets it first — read back from `ring` (of `1 << log_size`
    /// basic blocks) — in §4.1's order: the seal cleared, the WQE's 64-byte chunks, the seal
    /// naming it, the doorbell, each store ordered after the one before.
    pub(crate) fn ring(
        &mut self,
        dev: &Arc<dyn PciDevice>,
        (ring, log_size): (&DmaBuffer, u8),
        doorbell_at: u64,
        value: u32,
    ) {
        let lone = std::mem::take(&mut self.posted) == 1;
        if !(self.enabled && lone && self.blocks <= db::WQE_BUFFER_BLOCKS) {
            return doorbell(dev, doorbell_at, value);
        }
        let mask = (1u32 << log_size) - 1;
        let blocks = self.blocks as usize;
        let wqe = &mut self.wqe[..blocks * WQEBB];
        for (n, block) in wqe.chunks_exact_mut(WQEBB).enumerate() {
            let slot = (self.counter.wrapping_add(n as u32) & mask) as usize * WQEBB;
            ring.read(slot, block);
        }
        let seal_at = self.buffer + db::WQE_SEAL_OFFSET;
        let seal = db::wqe_seal(self.counter, self.blocks).to_le_bytes();
        let value = value.to_le_bytes();
        const MOST: usize = db::WQE_BUFFER_BLOCKS as usize + 3;
        let mut writes: [(u64, &[u8]); MOST] = [(0, &[]); MOST];
        writes[0] = (seal_at, &[0; 4]);
        for (i, chunk) in wqe.chunks_exact(WQEBB).enumerate() {
            writes[1 + i] = (self.buffer + (i * WQEBB) as u64, chunk);
        }
        writes[1 + blocks] = (seal_at, &seal);
        writes[2 + blocks] = (doorbell_at, &value);
        // The WQE in the ring must be visible before the device may fetch it.
        fence(Ordering::Release);
        dev.bar_write_all(BAR_DOORBELL, &writes[..3 + blocks]);
    }
}

/// An event queue.
pub struct EventQueue {
    ring: DeviceRing,
    pub eqn: u32,
    log_size: u8,
    ci: u32,
    arm_sn: u32,
    dev: Arc<dyn PciDevice>,
}

impl EventQueue {
    /// The next event, if the device wrote one.
    pub fn poll(&mut self) -> Option<Eqe> {
        let slot = (self.ci & ((1 << self.log_size) - 1)) as usize * EQE_SIZE;
        let own = self.ring.read_volatile_u8(slot + OWNER_BYTE);
        if !entry_is_new(own, self.ci, self.log_size) {
            return None;
        }
        let e: Eqe = self.ring.read_obj(slot);
        self.ci = self.ci.wrapping_add(1);
        Some(e)
    }

    /// Reports consumed events and asks for the next interrupt.
    pub fn arm(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
        doorbell(
            &self.dev,
            db::slot(db::EQ_BASE, self.eqn),
            db::ci_value(self.ci, self.arm_sn, true),
        );
    }
}

/// A completion queue.
pub struct CompletionQueue {
    ring: DeviceRing,
    pub cqn: u32,
    log_size: u8,
    ci: u32,
    arm_sn: u32,
    dev: Arc<dyn PciDevice>,
}

impl CompletionQueue {
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// The next CQE if the device has written it (owner bit of the current pass).
    #[inline]
    pub fn poll(&mut self) -> Option<Cqe> {
        let slot = (self.ci & ((1 << self.log_size) - 1)) as usize * CQE_SIZE;
        let own = self.ring.read_volatile_u8(slot + OWNER_BYTE);
        if !entry_is_new(own, self.ci, self.log_size) {
            return None;
        }
        let c: Cqe = self.ring.read_obj(slot);
        self.ci = self.ci.wrapping_add(1);
        Some(c)
    }

    /// Tells the device how far software consumed (frees CQ space). Repeats the last arm's
    /// sequence number, so an arm the device has not seen yet is not cancelled.
    pub fn update_ci(&self) {
        doorbell(
            &self.dev,
            db::slot(db::CQ_BASE, self.cqn),
            db::ci_value(self.ci, self.arm_sn, self.arm_sn != 0),
        );
    }

    /// Reports progress and requests an event for the next CQE.
    pub fn arm(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
        doorbell(
            &self.dev,
            db::slot(db::CQ_BASE, self.cqn),
            db::ci_value(self.ci, self.arm_sn, true),
        );
    }

    pub fn consumer_counter(&self) -> u32 {
        self.ci
    }
}

/// A send queue. Software tracks free space from completions; [`SendQueue::post`] refuses a WQE
/// that does not fit before `limit` (the counter up to which earlier WQEs completed + ring).
pub struct SendQueue {
    ring: DeviceRing,
    pub sqn: u32,
    log_size: u8,
    /// WQE basic blocks posted.
    pi: u32,
    dev: Arc<dyn PciDevice>,
    /// WQE assembly buffer (the largest WQE), reused so posting never allocates or clears 1 KiB.
    scratch: Vec<u8>,
    mmio: WqeByMmio,
}

impl SendQueue {
    /// Whether a doorbell for one small WQE also writes it into the SQ's WQE-by-MMIO buffer
    /// (on by default).
    pub fn set_wqe_by_mmio(&mut self, on: bool) {
        self.mmio.set_enabled(on);
    }

    pub fn size(&self) -> u32 {
        1 << self.log_size
    }
    pub fn producer_counter(&self) -> u32 {
        self.pi
    }

    /// Writes one WQE at the producer counter (does not ring). Returns its WQE index.
    pub fn post(&mut self, w: &SendWqe<'_>) -> Result<u16, DriverError> {
        let index = self.pi as u16;
        let n = w
            .encode(self.sqn, index, &mut self.scratch)
            .map_err(|e| match e {
                WqeEncodeError::TooLarge => DriverError::InvalidArgument("WQE too large"),
                WqeEncodeError::BufferTooSmall => {
                    DriverError::InvalidArgument("WQE buffer too small")
                }
            })?;
        // `encode` zeroed the rest of the last basic block: the blocks go to the ring whole.
        self.write_blocks(n.div_ceil(WQEBB).max(1) as u32);
        Ok(index)
    }

    /// Writes one multi-packet send WQE (`docs/nic-interface.md` §6.6) at the producer counter
    /// (does not ring). Returns its WQE index.
    pub fn post_multi_packet(&mut self, w: &MultiPacketSendWqe<'_>) -> Result<u16, DriverError> {
        let index = self.pi as u16;
        let n = w
            .encode(self.sqn, index, &mut self.scratch)
            .map_err(|e| match e {
                WqeEncodeError::TooLarge => {
                    DriverError::InvalidArgument("multi-packet WQE: 1..=MAX_MPW_PACKETS frames")
                }
                WqeEncodeError::BufferTooSmall => {
                    DriverError::InvalidArgument("WQE buffer too small")
                }
            })?;
        self.write_blocks(n.div_ceil(WQEBB) as u32);
        Ok(index)
    }

    /// Copies raw WQE bytes (any content: tests use it for malformed WQEs) into the ring at the
    /// producer counter, padded to whole basic blocks, and advances the counter.
    pub fn write_raw(&mut self, wqe: &[u8]) {
        let nbb = wqe.len().div_ceil(WQEBB).max(1);
        self.mmio.posted(self.pi, nbb as u32);
        let mask = (1u32 << self.log_size) - 1;
        for n in 0..nbb {
            let slot = ((self.pi.wrapping_add(n as u32)) & mask) as usize * WQEBB;
            let src = wqe.get(n * WQEBB..).unwrap_or(&[]);
            let k = src.len().min(WQEBB);
            self.ring.write(slot, &src[..k]);
            if k < WQEBB {
                self.ring.fill(slot + k, WQEBB - k, 0);
            }
        }
        self.pi = self.pi.wrapping_add(nbb as u32);
    }

    /// Copies the first `nbb` basic blocks of the scratch buffer into the ring at the producer
    /// counter and advances the counter.
    #[inline(always)]
    fn write_blocks(&mut self, nbb: u32) {
        self.mmio.posted(self.pi, nbb);
        let blocks = &self.scratch[..nbb as usize * WQEBB];
        write_ring_blocks(&self.ring, self.log_size, self.pi, blocks);
        self.pi = self.pi.wrapping_add(nbb);
    }

    /// Tells the device about everything posted so far.
    pub fn ring_doorbell(&mut self) {
        self.mmio.ring(
            &self.dev,
            (&self.ring, self.log_size),
            db::slot(db::SQ_BASE, self.sqn),
            self.pi & db::PI_MASK,
        );
    }

    /// Rings with an arbitrary producer value (tests of doorbell overflow).
    pub fn ring_doorbell_raw(&self, value: u32) {
        doorbell(&self.dev, db::slot(db::SQ_BASE, self.sqn), value);
    }
}

/// A receive queue.
pub struct RecvQueue {
    ring: DeviceRing,
    pub rqn: u32,
    log_size: u8,
    pub layout: RqLayout,
    pi: u32,
    dev: Arc<dyn PciDevice>,
}

impl RecvQueue {
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }
    pub fn producer_counter(&self) -> u32 {
        self.pi
    }

    /// Bytes one WQE buffer must hold (striding: all strides).
    pub fn wqe_bytes(&self) -> usize {
        match self.layout {
            RqLayout::Regular => 0,
            RqLayout::Striding {
                log_stride_size,
                log_strides,
            } => 1 << (log_stride_size + log_strides),
        }
    }

    /// Writes a receive WQE for a buffer at the producer counter (does not ring).
    pub fn post(&mut self, addr: u64, len: u32) {
        self.post_raw(&DataSeg {
            byte_count: U32::new(len),
            lkey: U32::new(RESERVED_LKEY),
            addr: U64::new(addr),
        });
    }

    /// Writes any receive WQE (tests use bad keys and lengths).
    pub fn post_raw(&mut self, wqe: &RecvWqe) {
        let slot = (self.pi & ((1 << self.log_size) - 1)) as usize * RECV_WQE_SIZE;
        self.ring.write_obj(slot, wqe);
        self.pi = self.pi.wrapping_add(1);
    }

    pub fn ring_doorbell(&self) {
        doorbell(
            &self.dev,
            db::slot(db::RQ_BASE, self.rqn),
            self.pi & db::PI_MASK,
        );
    }
}
