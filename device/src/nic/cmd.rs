//! The command interface (the NIC's "firmware"): the driver writes a command into host memory,
//! points the CMD_* registers at it and rings CMD_DOORBELL; the NIC reads the input by DMA,
//! executes it and writes the output by DMA. Every malformed request gets a status, never a panic.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, IntoBytes};

use super::eswitch::{FlowEntryInit, FlowTable, Meter, Miss, RssGroup, VxlanEncap};
use super::rss::Toeplitz;
use super::*;
use crate::fabric::DmaPort;
use fld_abi::nic::*;

type CmdResult = Result<usize, (CmdStatus, u32)>;

fn fail<T>(status: CmdStatus, syndrome: u32) -> Result<T, (CmdStatus, u32)> {
    Err((status, syndrome))
}

/// Reads, executes and answers one command. The return value goes to CMD_STATUS.
#[allow(clippy::too_many_arguments)]
pub(super) fn deliver(
    core: &mut NicCore,
    dma: &mut DmaPort<'_>,
    doorbells: &DoorbellArea,
    function: u16,
    in_addr: u64,
    in_len: u32,
    out_addr: u64,
    out_len: u32,
) -> CmdDelivery {
    const HDR: usize = 16;
    if !(HDR as u32..=CMD_MAX_LEN).contains(&in_len)
        || !(HDR as u32..=CMD_MAX_LEN).contains(&out_len)
    {
        return CmdDelivery::BadLength;
    }
    let mut input = [0u8; CMD_MAX_LEN as usize];
    let input = &mut input[..in_len as usize];
    if dma.read(in_addr, input).is_err() || !dma.probe(out_addr, out_len as usize) {
        return CmdDelivery::DmaError;
    }
    let mut out = [0u8; CMD_MAX_LEN as usize];
    let (hdr, body) = out.split_at_mut(HDR);
    let body = &mut body[..out_len as usize - HDR];
    let opcode = u16::from_le_bytes([input[0], input[1]]);
    // The output must have room before anything changes: a CREATE whose result cannot be
    // returned must not create an object the driver cannot name.
    let result = if body.len() < output_len(opcode) {
        Err((CmdStatus::BadOutputLength, output_len(opcode) as u32))
    } else {
        execute(core, dma, doorbells, function, opcode, &input[HDR..], body)
    };
    let (status, syndrome, n) = match result {
        Ok(n) => (CmdStatus::Ok, 0, n),
        Err((s, syn)) => (s, syn, 0),
    };
    let header = CmdOutHeader {
        status: status as u8,
        syndrome: U32::new(syndrome),
        ..Default::default()
    };
    hdr.copy_from_slice(header.as_bytes());
    if status != CmdStatus::Ok {
        log::debug!(
            "command {opcode:#x} from function {function}: {status:?} (syndrome {syndrome:#x})"
        );
    }
    match dma.write(out_addr, &out[..HDR + n]) {
        Ok(()) => CmdDelivery::Ok,
        Err(_) => CmdDelivery::DmaError,
    }
}

/// Bytes of output (after the header) each command produces.
fn output_len(opcode: u16) -> usize {
    use core::mem::size_of;
    match opcode {
        op::QUERY_CAPS => size_of::<Caps>(),
        op::CREATE_EQ
        | op::CREATE_CQ
        | op::CREATE_SQ
        | op::CREATE_RQ
        | op::CREATE_RSS_GROUP
        | op::CREATE_FLOW_TABLE
        | op::CREATE_FLOW_ENTRY => size_of::<CreateOut>(),
        op::QUERY_EQ | op::QUERY_CQ => size_of::<QueryCqOut>(),
        op::QUERY_SQ | op::QUERY_RQ => size_of::<QueryQueueOut>(),
        op::QUERY_FLOW_ENTRY => size_of::<QueryFlowEntryOut>(),
        op::QUERY_VPORT => size_of::<QueryVportOut>(),
        op::CREATE_METER | op::CREATE_VXLAN_ENCAP => size_of::<CreateOut>(),
        op::QUERY_METER => size_of::<QueryMeterOut>(),
        _ => 0,
    }
}

/// Parses a command's input layout.
fn input<T: FromBytes>(body: &[u8]) -> Result<T, (CmdStatus, u32)> {
    T::read_from_prefix(body)
        .map(|(v, _)| v)
        .map_err(|_| (CmdStatus::BadInputLength, 0))
}

/// Writes a command's output layout.
fn output<T: IntoBytes + zerocopy::Immutable>(out: &mut [u8], v: &T) -> CmdResult {
    let b = v.as_bytes();
    match out.get_mut(..b.len()) {
        Some(dst) => {
            dst.copy_from_slice(b);
            Ok(b.len())
        }
        None => fail(CmdStatus::BadOutputLength, b.len() as u32),
    }
}

fn created(out: &mut [u8], id: Option<u32>) -> CmdResult {
    match id {
        Some(id) => output(
            out,
            &CreateOut {
                id: U32::new(id),
                rsvd: [0; 4],
            },
        ),
        None => fail(CmdStatus::ExceedLimit, 0),
    }
}

/// QUERY_EQ / QUERY_CQ result.
fn ring_status(pc: u32, ci: u32, log_size: u8, armed: bool, overflows: u32) -> QueryCqOut {
    QueryCqOut {
        producer_counter: U32::new(pc),
        consumer_counter: U32::new(ci),
        log_size,
        armed: armed as u8,
        state: QueueState::Ready as u8,
        rsvd: 0,
        overflows: U32::new(overflows),
    }
}

/// A ring must be 64-byte aligned and reachable by DMA when it is created.
fn check_ring(dma: &mut DmaPort<'_>, addr: u64, bytes: u64) -> Result<(), (CmdStatus, u32)> {
    if !addr.is_multiple_of(64) {
        return fail(CmdStatus::BadParam, 0x1);
    }
    if !dma.probe(addr, bytes as usize) {
        return fail(CmdStatus::BadParam, 0x2);
    }
    Ok(())
}

fn execute(
    core: &mut NicCore,
    dma: &mut DmaPort<'_>,
    doorbells: &DoorbellArea,
    function: u16,
    opcode: u16,
    body: &[u8],
    out: &mut [u8],
) -> CmdResult {
    match opcode {
        op::QUERY_CAPS => output(out, &core.caps(function)),

        op::CREATE_EQ => {
            let i: CreateEqIn = input(body)?;
            if i.log_size > MAX_LOG_EQ {
                return fail(CmdStatus::BadParam, 0x10);
            }
            if i.msix_vector.get() >= NIC_MSIX_VECTORS {
                return fail(CmdStatus::BadParam, 0x11);
            }
            check_ring(dma, i.addr.get(), (EQE_SIZE as u64) << i.log_size)?;
            let eq = EventQueue {
                owner: function,
                addr: i.addr.get(),
                log_size: i.log_size,
                vector: i.msix_vector.get(),
                pc: 0,
                ci: 0,
                armed: false,
                last_db: 0,
                arm_sn: 0,
                overflows: 0,
                refs: 0,
            };
            let id = core.eqs.insert(eq);
            if let Some(id) = id {
                doorbells.store(db::EQ_BASE + 4 * id as u64, 0);
            }
            created(out, id)
        }
        op::DESTROY_EQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            core.eqs.take_unreferenced(id, function)?;
            Ok(0)
        }
        op::QUERY_EQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            let q = core.eqs.owned(id, function)?;
            output(
                out,
                &ring_status(q.pc, q.ci, q.log_size, q.armed, q.overflows),
            )
        }

        op::CREATE_CQ => {
            let i: CreateCqIn = input(body)?;
            if i.log_size > MAX_LOG_CQ {
                return fail(CmdStatus::BadParam, 0x10);
            }
            let eqn = i.eqn.get();
            if core.eqs.owned(eqn, function).is_err() {
                return fail(CmdStatus::BadResource, eqn);
            }
            check_ring(dma, i.addr.get(), (CQE_SIZE as u64) << i.log_size)?;
            let cq = CompletionQueue {
                owner: function,
                addr: i.addr.get(),
                log_size: i.log_size,
                eqn,
                pc: 0,
                ci: 0,
                armed: false,
                last_db: 0,
                arm_sn: 0,
                overflows: 0,
                refs: 0,
            };
            let id = core.cqs.insert(cq);
            if let Some(id) = id {
                core.eqs.add_ref(eqn);
                doorbells.store(db::CQ_BASE + 4 * id as u64, 0);
            }
            created(out, id)
        }
        op::DESTROY_CQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            let cq = core.cqs.take_unreferenced(id, function)?;
            core.eqs.drop_ref(cq.eqn);
            Ok(0)
        }
        op::QUERY_CQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            let q = core.cqs.owned(id, function)?;
            output(
                out,
                &ring_status(q.pc, q.ci, q.log_size, q.armed, q.overflows),
            )
        }

        op::CREATE_SQ => {
            let i: CreateSqIn = input(body)?;
            if i.log_size > MAX_LOG_SQ {
                return fail(CmdStatus::BadParam, 0x10);
            }
            if i.flags & !SQ_FLAG_SIGNAL_ALL != 0 {
                return fail(CmdStatus::BadParam, 0x12);
            }
            let cqn = i.cqn.get();
            if core.cqs.owned(cqn, function).is_err() {
                return fail(CmdStatus::BadResource, cqn);
            }
            check_ring(dma, i.addr.get(), (WQEBB as u64) << i.log_size)?;
            let sq = SendQueue {
                owner: function,
                addr: i.addr.get(),
                log_size: i.log_size,
                cqn,
                signal_all: i.flags & SQ_FLAG_SIGNAL_ALL != 0,
                ci: 0,
                state: QueueState::Ready,
                packets: 0,
                bytes: 0,
            };
            let id = core.sqs.insert(sq);
            if let Some(id) = id {
                core.cqs.add_ref(cqn);
                core.active_sqs.push(id);
                doorbells.store(db::SQ_BASE + 4 * id as u64, 0);
            }
            created(out, id)
        }
        op::DESTROY_SQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            let sq = core.sqs.owned(id, function)?;
            let cqn = sq.cqn;
            core.sqs.remove(id);
            core.active_sqs.retain(|&x| x != id);
            core.cqs.drop_ref(cqn);
            Ok(0)
        }
        op::QUERY_SQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            let q = core.sqs.owned(id, function)?;
            let o = QueryQueueOut {
                hw_counter: U32::new(q.ci),
                state: q.state as u8,
                log_size: q.log_size,
                packets: U64::new(q.packets),
                bytes: U64::new(q.bytes),
                ..Default::default()
            };
            output(out, &o)
        }
        op::MODIFY_SQ => {
            let i: ModifyQueueIn = input(body)?;
            let id = i.id.get();
            let q = core.sqs.owned_mut(id, function)?;
            if i.new_state != QueueState::Ready as u8 {
                return fail(CmdStatus::BadParam, 0x13);
            }
            if q.state != QueueState::Error {
                return fail(CmdStatus::BadState, q.state as u32);
            }
            q.state = QueueState::Ready;
            q.ci = 0;
            doorbells.store(db::SQ_BASE + 4 * id as u64, 0);
            Ok(0)
        }

        op::CREATE_RQ => {
            let i: CreateRqIn = input(body)?;
            if i.log_size > MAX_LOG_RQ {
                return fail(CmdStatus::BadParam, 0x10);
            }
            let kind = match i.rq_type {
                RQ_TYPE_REGULAR => RqKind::Regular,
                RQ_TYPE_STRIDING => {
                    if !(MIN_LOG_STRIDE..=MAX_LOG_STRIDE).contains(&i.log_stride_size) {
                        return fail(CmdStatus::BadParam, 0x14);
                    }
                    if !(MIN_LOG_STRIDES..=MAX_LOG_STRIDES).contains(&i.log_strides) {
                        return fail(CmdStatus::BadParam, 0x15);
                    }
                    RqKind::Striding {
                        log_stride_size: i.log_stride_size,
                        log_strides: i.log_strides,
                    }
                }
                _ => return fail(CmdStatus::BadParam, 0x16),
            };
            let cqn = i.cqn.get();
            if core.cqs.owned(cqn, function).is_err() {
                return fail(CmdStatus::BadResource, cqn);
            }
            check_ring(dma, i.addr.get(), (RECV_WQE_SIZE as u64) << i.log_size)?;
            let rq = ReceiveQueue {
                owner: function,
                addr: i.addr.get(),
                log_size: i.log_size,
                cqn,
                kind,
                ci: 0,
                open: None,
                state: QueueState::Ready,
                refs: 0,
                packets: 0,
                bytes: 0,
                out_of_buffer: 0,
                oversize_drops: 0,
                truncated: 0,
            };
            let id = core.rqs.insert(rq);
            if let Some(id) = id {
                core.cqs.add_ref(cqn);
                doorbells.store(db::RQ_BASE + 4 * id as u64, 0);
            }
            created(out, id)
        }
        op::DESTROY_RQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            let rq = core.rqs.take_unreferenced(id, function)?;
            core.cqs.drop_ref(rq.cqn);
            Ok(0)
        }
        op::QUERY_RQ => {
            let id = input::<ObjectIn>(body)?.id.get();
            let q = core.rqs.owned(id, function)?;
            let o = QueryQueueOut {
                hw_counter: U32::new(q.ci),
                state: q.state as u8,
                log_size: q.log_size,
                rsvd: [0; 2],
                packets: U64::new(q.packets),
                bytes: U64::new(q.bytes),
                out_of_buffer: U64::new(q.out_of_buffer),
                oversize_drops: U64::new(q.oversize_drops),
                truncated: U64::new(q.truncated),
            };
            output(out, &o)
        }
        op::MODIFY_RQ => {
            let i: ModifyQueueIn = input(body)?;
            let id = i.id.get();
            let q = core.rqs.owned_mut(id, function)?;
            if i.new_state != QueueState::Ready as u8 {
                return fail(CmdStatus::BadParam, 0x13);
            }
            if q.state != QueueState::Error {
                return fail(CmdStatus::BadState, q.state as u32);
            }
            q.state = QueueState::Ready;
            q.ci = 0;
            q.open = None;
            doorbells.store(db::RQ_BASE + 4 * id as u64, 0);
            Ok(0)
        }

        op::CREATE_RSS_GROUP => {
            let i: CreateRssGroupIn = input(body)?;
            let n = i.indirection_len.get();
            if n == 0 || n > RSS_MAX_INDIRECTION || !n.is_power_of_two() {
                return fail(CmdStatus::BadParam, 0x20);
            }
            if i.hash_fields == 0 || i.hash_fields & !0xf != 0 {
                return fail(CmdStatus::BadParam, 0x21);
            }
            let table = body
                .get(core::mem::size_of::<CreateRssGroupIn>()..)
                .unwrap_or(&[]);
            let rqns: Vec<u32> = table
                .chunks_exact(4)
                .take(n as usize)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if rqns.len() != n as usize {
                return fail(CmdStatus::BadInputLength, n as u32);
            }
            if let Some(bad) = rqns.iter().find(|&&r| core.rqs.owned(r, function).is_err()) {
                return fail(CmdStatus::BadResource, *bad);
            }
            let free = core.eswitch.rss_groups.iter().position(|g| g.is_none());
            if free.is_none() && core.eswitch.rss_groups.len() as u32 >= core.config.max_rss_groups
            {
                return fail(CmdStatus::ExceedLimit, 0);
            }
            for r in &rqns {
                core.rqs.add_ref(*r);
            }
            let group = RssGroup {
                owner: function,
                hash_fields: i.hash_fields,
                toeplitz: Toeplitz::new(&i.key),
                indirection: rqns,
            };
            let id = match free {
                Some(f) => {
                    core.eswitch.rss_groups[f] = Some(group);
                    f
                }
                None => {
                    core.eswitch.rss_groups.push(Some(group));
                    core.eswitch.rss_groups.len() - 1
                }
            };
            created(out, Some(id as u32))
        }
        op::DESTROY_RSS_GROUP => {
            let id = input::<ObjectIn>(body)?.id.get();
            let es = &mut core.eswitch;
            if es
                .rss_groups
                .get(id as usize)
                .and_then(|g| g.as_ref())
                .is_none_or(|g| g.owner != function)
            {
                return fail(CmdStatus::BadResource, id);
            }
            let users = es
                .tables
                .iter()
                .flatten()
                .flat_map(|t| t.entries.iter())
                .filter(|e| e.actions & action::FWD_RSS != 0 && e.dest == id)
                .count();
            if users != 0 {
                return fail(CmdStatus::ResourceBusy, users as u32);
            }
            if let Some(g) = es.rss_groups[id as usize].take() {
                for r in g.indirection {
                    core.rqs.drop_ref(r);
                }
            }
            Ok(0)
        }

        op::CREATE_FLOW_TABLE => {
            let i: CreateFlowTableIn = input(body)?;
            if i.kind != TABLE_KIND_FDB && i.kind != TABLE_KIND_NIC_RX {
                return fail(CmdStatus::BadParam, 0x30);
            }
            if i.kind == TABLE_KIND_FDB && function != 0 {
                return fail(CmdStatus::NotPermitted, 0x31);
            }
            if i.level > MAX_FLOW_LEVEL {
                return fail(CmdStatus::BadParam, 0x32);
            }
            let miss = match i.miss {
                MISS_DEFAULT => Miss::Default,
                MISS_DROP => Miss::Drop,
                MISS_GOTO_TABLE => {
                    let t = i.miss_table.get();
                    check_goto(&core.eswitch, function, i.kind, i.level, t)?;
                    Miss::Goto(t)
                }
                _ => return fail(CmdStatus::BadParam, 0x33),
            };
            let es = &mut core.eswitch;
            let free = es.tables.iter().position(|t| t.is_none());
            if free.is_none() && es.tables.len() as u32 >= core.config.max_flow_tables {
                return fail(CmdStatus::ExceedLimit, 0);
            }
            if let Miss::Goto(t) = miss {
                if let Some(t) = es.table_mut(t) {
                    t.refs += 1;
                }
            }
            let table = FlowTable {
                owner: function,
                kind: i.kind,
                level: i.level,
                miss,
                entries: Vec::new(),
                refs: 0,
            };
            let id = match free {
                Some(f) => {
                    es.tables[f] = Some(table);
                    f
                }
                None => {
                    es.tables.push(Some(table));
                    es.tables.len() - 1
                }
            };
            created(out, Some(id as u32))
        }
        op::DESTROY_FLOW_TABLE => {
            let id = input::<ObjectIn>(body)?.id.get();
            let es = &mut core.eswitch;
            let t = es
                .table(id)
                .filter(|t| t.owner == function)
                .ok_or((CmdStatus::BadResource, id))?;
            let is_root =
                es.fdb_root == Some(id) || es.vports.iter().any(|v| v.rx_root == Some(id));
            if !t.entries.is_empty() || t.refs != 0 || is_root {
                return fail(CmdStatus::ResourceBusy, t.entries.len() as u32);
            }
            if let Some(Miss::Goto(next)) = es.tables[id as usize].take().map(|t| t.miss) {
                if let Some(t) = es.table_mut(next) {
                    t.refs -= 1;
                }
            }
            Ok(0)
        }
        op::SET_FLOW_TABLE_ROOT => {
            let i: SetRootIn = input(body)?;
            let t = i.table.get();
            if i.kind == TABLE_KIND_FDB && function != 0 {
                return fail(CmdStatus::NotPermitted, 0x31);
            }
            if i.kind != TABLE_KIND_FDB && i.kind != TABLE_KIND_NIC_RX {
                return fail(CmdStatus::BadParam, 0x30);
            }
            let es = &mut core.eswitch;
            let root = if t == NO_TABLE {
                None
            } else {
                es.table(t)
                    .filter(|x| x.owner == function && x.kind == i.kind)
                    .ok_or((CmdStatus::BadResource, t))?;
                Some(t)
            };
            if i.kind == TABLE_KIND_FDB {
                es.fdb_root = root;
            } else if let Some(v) = es.vports.get_mut(function as usize) {
                v.rx_root = root;
            }
            Ok(0)
        }

        op::CREATE_FLOW_ENTRY => {
            let i: CreateFlowEntryIn = input(body)?;
            let tid = i.table.get();
            let t = core
                .eswitch
                .table(tid)
                .filter(|t| t.owner == function)
                .ok_or((CmdStatus::BadResource, tid))?;
            let (kind, level) = (t.kind, t.level);
            let a = i.actions.get();
            if a & !action::ALL != 0 || (a & action::FATES).count_ones() > 1 {
                return fail(CmdStatus::BadParam, 0x40);
            }
            if a & action::VXLAN_DECAP != 0 && a & action::GOTO_TABLE == 0 {
                return fail(CmdStatus::BadParam, 0x43);
            }
            if a & action::VXLAN_ENCAP != 0 && a & action::FWD_VPORT == 0 {
                return fail(CmdStatus::BadParam, 0x44);
            }
            let encap = i.encap.get();
            if a & action::VXLAN_ENCAP != 0
                && core
                    .eswitch
                    .encaps
                    .get(encap as usize)
                    .and_then(|e| e.as_ref())
                    .is_none_or(|e| e.owner != function)
            {
                return fail(CmdStatus::BadResource, encap);
            }
            if core.flow_entry_count >= core.config.max_flow_entries {
                return fail(CmdStatus::ExceedLimit, 0);
            }
            let dest = i.dest.get();
            if a & action::FWD_VPORT != 0 {
                let v = i.vport.get();
                if kind != TABLE_KIND_FDB {
                    return fail(CmdStatus::BadParam, 0x41);
                }
                if core.eswitch.vport(v).is_none() {
                    return fail(CmdStatus::BadResource, v as u32);
                }
            }
            if a & (action::FWD_RQ | action::FWD_RSS) != 0 && kind != TABLE_KIND_NIC_RX {
                return fail(CmdStatus::BadParam, 0x42);
            }
            if a & action::FWD_RQ != 0 && core.rqs.owned(dest, function).is_err() {
                return fail(CmdStatus::BadResource, dest);
            }
            if a & action::FWD_RSS != 0
                && core
                    .eswitch
                    .rss_groups
                    .get(dest as usize)
                    .and_then(|g| g.as_ref())
                    .is_none_or(|g| g.owner != function)
            {
                return fail(CmdStatus::BadResource, dest);
            }
            if a & action::GOTO_TABLE != 0 {
                check_goto(&core.eswitch, function, kind, level, dest)?;
            }
            let meter = i.meter.get();
            if a & action::METER != 0
                && core
                    .eswitch
                    .meters
                    .get(meter as usize)
                    .and_then(|m| m.as_ref())
                    .is_none_or(|m| m.owner != function)
            {
                return fail(CmdStatus::BadResource, meter);
            }
            let init = FlowEntryInit {
                meter,
                encap,
                priority: i.priority.get(),
                mask: i.mask,
                value: i.value,
                actions: a,
                vport: i.vport.get(),
                dest,
                flow_tag: i.flow_tag.get(),
            };
            let id = core
                .eswitch
                .insert_entry(tid, init)
                .ok_or((CmdStatus::BadResource, tid))?;
            core.flow_entry_count += 1;
            if a & action::FWD_RQ != 0 {
                core.rqs.add_ref(dest);
            }
            if a & action::GOTO_TABLE != 0 {
                if let Some(t) = core.eswitch.table_mut(dest) {
                    t.refs += 1;
                }
            }
            if a & action::VXLAN_ENCAP != 0 {
                if let Some(e) = core
                    .eswitch
                    .encaps
                    .get_mut(encap as usize)
                    .and_then(|e| e.as_mut())
                {
                    e.refs += 1;
                }
            }
            if a & action::METER != 0 {
                if let Some(m) = core
                    .eswitch
                    .meters
                    .get_mut(meter as usize)
                    .and_then(|m| m.as_mut())
                {
                    m.refs += 1;
                }
            }
            created(out, Some(id))
        }
        op::DESTROY_FLOW_ENTRY => {
            let id = input::<ObjectIn>(body)?.id.get();
            let (t, idx) = core
                .eswitch
                .find_entry(id)
                .ok_or((CmdStatus::BadResource, id))?;
            if core.eswitch.table(t).is_none_or(|t| t.owner != function) {
                return fail(CmdStatus::BadResource, id);
            }
            let Some(table) = core.eswitch.table_mut(t) else {
                return fail(CmdStatus::BadResource, id);
            };
            let e = table.entries.remove(idx);
            core.flow_entry_count -= 1;
            release_entry_refs(
                &mut core.rqs,
                &mut core.eswitch,
                e.actions,
                e.dest,
                e.meter,
                e.encap,
            );
            Ok(0)
        }
        op::QUERY_FLOW_ENTRY => {
            let id = input::<ObjectIn>(body)?.id.get();
            let (t, idx) = core
                .eswitch
                .find_entry(id)
                .ok_or((CmdStatus::BadResource, id))?;
            let table = core
                .eswitch
                .table(t)
                .filter(|t| t.owner == function)
                .ok_or((CmdStatus::BadResource, id))?;
            let e = &table.entries[idx];
            output(
                out,
                &QueryFlowEntryOut {
                    packets: U64::new(e.packets),
                    bytes: U64::new(e.bytes),
                },
            )
        }

        op::QUERY_VPORT => {
            let v = input::<QueryVportIn>(body)?.vport.get();
            if v != function && function != 0 {
                return fail(CmdStatus::NotPermitted, v as u32);
            }
            let vp = core
                .eswitch
                .vport(v)
                .ok_or((CmdStatus::BadResource, v as u32))?;
            let c = vp.counters;
            let o = QueryVportOut {
                mac: vp.mac,
                up: 1,
                rsvd: 0,
                tx_packets: U64::new(c.tx_packets),
                tx_bytes: U64::new(c.tx_bytes),
                rx_packets: U64::new(c.rx_packets),
                rx_bytes: U64::new(c.rx_bytes),
                rx_steering_drops: U64::new(c.rx_steering_drops),
                rx_no_steering: U64::new(c.rx_no_steering),
                rx_out_of_buffer: U64::new(c.rx_out_of_buffer),
                tx_malformed: U64::new(c.tx_malformed),
            };
            output(out, &o)
        }

        op::CREATE_METER => {
            let i: CreateMeterIn = input(body)?;
            if i.rate_bytes_per_s.get() == 0 || i.burst_bytes.get() == 0 {
                return fail(CmdStatus::BadParam, 0x50);
            }
            let es = &mut core.eswitch;
            let meter = Meter::new(function, i.rate_bytes_per_s.get(), i.burst_bytes.get(), 0);
            let id = place(&mut es.meters, meter, MAX_METERS)?;
            created(out, Some(id))
        }
        op::DESTROY_METER => {
            let id = input::<ObjectIn>(body)?.id.get();
            let slot = core.eswitch.meters.get_mut(id as usize);
            remove_unused(slot, id, |m| (m.owner == function).then_some(m.refs))
        }
        op::QUERY_METER => {
            let id = input::<ObjectIn>(body)?.id.get();
            let m = core
                .eswitch
                .meters
                .get(id as usize)
                .and_then(|m| m.as_ref())
                .filter(|m| m.owner == function)
                .ok_or((CmdStatus::BadResource, id))?;
            output(
                out,
                &QueryMeterOut {
                    passed_packets: U64::new(m.passed.0),
                    passed_bytes: U64::new(m.passed.1),
                    dropped_packets: U64::new(m.dropped.0),
                    dropped_bytes: U64::new(m.dropped.1),
                },
            )
        }

        op::CREATE_VXLAN_ENCAP => {
            let i: CreateVxlanEncapIn = input(body)?;
            if i.vni.get() > 0x00ff_ffff {
                return fail(CmdStatus::BadParam, 0x60);
            }
            let es = &mut core.eswitch;
            let encap = VxlanEncap::new(function, &i);
            let id = place(&mut es.encaps, encap, MAX_ENCAPS)?;
            created(out, Some(id))
        }
        op::DESTROY_VXLAN_ENCAP => {
            let id = input::<ObjectIn>(body)?.id.get();
            let slot = core.eswitch.encaps.get_mut(id as usize);
            remove_unused(slot, id, |e| (e.owner == function).then_some(e.refs))
        }

        _ => fail(CmdStatus::BadOpcode, opcode as u32),
    }
}

/// Puts `item` in the first free slot (or a new one below `max`) and returns its number.
fn place<T>(slots: &mut Vec<Option<T>>, item: T, max: usize) -> Result<u32, (CmdStatus, u32)> {
    let at = match slots.iter().position(Option::is_none) {
        Some(free) => free,
        None if slots.len() < max => {
            slots.push(None);
            slots.len() - 1
        }
        None => return Err((CmdStatus::ExceedLimit, 0)),
    };
    slots[at] = Some(item);
    Ok(at as u32)
}

/// Empties the slot of object `id` if the caller owns it (`refs_if_owned` gives its reference
/// count then) and no flow entry uses it.
fn remove_unused<T>(
    slot: Option<&mut Option<T>>,
    id: u32,
    refs_if_owned: impl Fn(&T) -> Option<u32>,
) -> CmdResult {
    let Some(slot) = slot else {
        return Err((CmdStatus::BadResource, id));
    };
    match slot.as_ref().and_then(&refs_if_owned) {
        None => Err((CmdStatus::BadResource, id)),
        Some(0) => {
            *slot = None;
            Ok(0)
        }
        Some(refs) => Err((CmdStatus::ResourceBusy, refs)),
    }
}

/// VXLAN encapsulations one NIC holds.
const MAX_ENCAPS: usize = 1024;

/// Meters one NIC holds.
const MAX_METERS: usize = 1024;

/// A go-to-table target must exist, belong to the caller, be of the same kind and sit at a
/// strictly higher level (so pipelines cannot loop).
fn check_goto(
    es: &super::eswitch::Eswitch,
    function: u16,
    kind: u8,
    level: u8,
    target: u32,
) -> Result<(), (CmdStatus, u32)> {
    match es.table(target) {
        Some(t) if t.owner == function && t.kind == kind && t.level > level => Ok(()),
        Some(_) => fail(CmdStatus::BadParam, 0x34),
        None => fail(CmdStatus::BadResource, target),
    }
}
