//! Event, completion, send and receive queues: create, destroy, query, and the ERROR → READY
//! transition of MODIFY_SQ/RQ. A ring must be 64-byte aligned and wholly DMA-reachable when it
//! is created; a queue's doorbell word starts at 0.

use zerocopy::little_endian::{U32, U64};

use super::{created, fail, input, object, output, Cmd, CmdResult, Handler};
use crate::nic::queues::{
    CompletionQueue, CompletionRing, EventQueue, ReceiveQueue, RqKind, SendQueue,
};
use fld_abi::nic::*;

pub(super) const HANDLERS: &[(u16, Handler)] = &[
    (op::CREATE_EQ, create_eq),
    (op::DESTROY_EQ, destroy_eq),
    (op::QUERY_EQ, query_eq),
    (op::CREATE_CQ, create_cq),
    (op::DESTROY_CQ, destroy_cq),
    (op::QUERY_CQ, query_cq),
    (op::CREATE_SQ, create_sq),
    (op::DESTROY_SQ, destroy_sq),
    (op::QUERY_SQ, query_sq),
    (op::MODIFY_SQ, modify_sq),
    (op::CREATE_RQ, create_rq),
    (op::DESTROY_RQ, destroy_rq),
    (op::QUERY_RQ, query_rq),
    (op::MODIFY_RQ, modify_rq),
];

/// A ring must be 64-byte aligned and reachable by DMA when it is created.
pub(super) fn check_ring(
    c: &mut Cmd<'_, '_>,
    addr: u64,
    bytes: u64,
) -> Result<(), (CmdStatus, u32)> {
    if !addr.is_multiple_of(64) {
        return fail(CmdStatus::BadParam, bad_param::RING_ALIGNMENT);
    }
    if !c.dma.probe(addr, bytes as usize) {
        return fail(CmdStatus::BadParam, bad_param::RING_UNREACHABLE);
    }
    Ok(())
}

pub(super) fn check_log_size(log_size: u8, max: u8) -> Result<(), (CmdStatus, u32)> {
    if log_size > max {
        return fail(CmdStatus::BadParam, bad_param::LOG_SIZE);
    }
    Ok(())
}

fn create_eq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateEqIn = input(body)?;
    check_log_size(i.log_size, MAX_LOG_EQ)?;
    if i.msix_vector.get() >= NIC_MSIX_VECTORS {
        return fail(CmdStatus::BadParam, bad_param::MSIX_VECTOR);
    }
    check_ring(c, i.addr.get(), (EQE_SIZE as u64) << i.log_size)?;
    let id = c.core.eqs.insert(EventQueue {
        owner: c.function,
        ring: CompletionRing::new(i.addr.get(), i.log_size),
        vector: i.msix_vector.get(),
        refs: 0,
    });
    if let Some(id) = id {
        c.doorbells.store(db::slot(db::EQ_BASE, id), 0);
    }
    created(out, id)
}

fn destroy_eq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    c.core.eqs.take_unreferenced(object(body)?, c.function)?;
    Ok(0)
}

fn query_eq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let q = c.core.eqs.owned(object(body)?, c.function)?;
    output(out, &q.ring.status())
}

fn create_cq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateCqIn = input(body)?;
    check_log_size(i.log_size, MAX_LOG_CQ)?;
    let eqn = i.eqn.get();
    c.core.eqs.owned(eqn, c.function)?;
    check_ring(c, i.addr.get(), (CQE_SIZE as u64) << i.log_size)?;
    let id = c.core.cqs.insert(CompletionQueue {
        owner: c.function,
        ring: CompletionRing::new(i.addr.get(), i.log_size),
        eqn,
        refs: 0,
    });
    if let Some(id) = id {
        c.core.eqs.add_ref(eqn);
        c.doorbells.store(db::slot(db::CQ_BASE, id), 0);
    }
    created(out, id)
}

fn destroy_cq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let cq = c.core.cqs.take_unreferenced(object(body)?, c.function)?;
    c.core.eqs.drop_ref(cq.eqn);
    Ok(0)
}

fn query_cq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let q = c.core.cqs.owned(object(body)?, c.function)?;
    output(out, &q.ring.status())
}

fn create_sq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateSqIn = input(body)?;
    check_log_size(i.log_size, MAX_LOG_SQ)?;
    if i.flags & !SQ_FLAG_SIGNAL_ALL != 0 {
        return fail(CmdStatus::BadParam, bad_param::SQ_FLAGS);
    }
    let cqn = i.cqn.get();
    c.core.cqs.owned(cqn, c.function)?;
    check_ring(c, i.addr.get(), (WQEBB as u64) << i.log_size)?;
    let id = c.core.sqs.insert(SendQueue {
        owner: c.function,
        addr: i.addr.get(),
        log_size: i.log_size,
        cqn,
        signal_all: i.flags & SQ_FLAG_SIGNAL_ALL != 0,
        ci: 0,
        state: QueueState::Ready,
        packets: 0,
        bytes: 0,
        wqes_by_mmio: 0,
    });
    if let Some(id) = id {
        c.core.cqs.add_ref(cqn);
        c.core.active_sqs.push(id);
        c.doorbells.store(db::slot(db::SQ_BASE, id), 0);
        c.doorbells
            .store(db::wqe_buffer(db::SQ_WQE_BASE, id) + db::WQE_SEAL_OFFSET, 0);
    }
    created(out, id)
}

fn destroy_sq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let cqn = c.core.sqs.owned(id, c.function)?.cqn;
    c.core.sqs.remove(id);
    c.core.active_sqs.retain(|&x| x != id);
    c.core.cqs.drop_ref(cqn);
    Ok(0)
}

fn query_sq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let q = c.core.sqs.owned(object(body)?, c.function)?;
    let o = QueryQueueOut {
        hw_counter: U32::new(q.ci),
        state: q.state as u8,
        log_size: q.log_size,
        packets: U64::new(q.packets),
        bytes: U64::new(q.bytes),
        on_chip: U64::new(q.wqes_by_mmio),
        ..Default::default()
    };
    output(out, &o)
}

/// ERROR → READY is the one transition; the queue's counter and doorbell restart at 0.
fn check_recovery(new_state: u8, state: QueueState) -> Result<(), (CmdStatus, u32)> {
    if new_state != QueueState::Ready as u8 {
        return fail(CmdStatus::BadParam, bad_param::NEW_STATE);
    }
    if state != QueueState::Error {
        return fail(CmdStatus::BadState, state as u32);
    }
    Ok(())
}

fn modify_sq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: ModifyQueueIn = input(body)?;
    let id = i.id.get();
    let q = c.core.sqs.owned_mut(id, c.function)?;
    check_recovery(i.new_state, q.state)?;
    q.state = QueueState::Ready;
    q.ci = 0;
    c.doorbells.store(db::slot(db::SQ_BASE, id), 0);
    c.doorbells
        .store(db::wqe_buffer(db::SQ_WQE_BASE, id) + db::WQE_SEAL_OFFSET, 0);
    Ok(0)
}

fn create_rq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateRqIn = input(body)?;
    check_log_size(i.log_size, MAX_LOG_RQ)?;
    let kind = match i.rq_type {
        RQ_TYPE_REGULAR => RqKind::Regular,
        RQ_TYPE_STRIDING => {
            if !(MIN_LOG_STRIDE..=MAX_LOG_STRIDE).contains(&i.log_stride_size) {
                return fail(CmdStatus::BadParam, bad_param::STRIDE_SIZE);
            }
            if !(MIN_LOG_STRIDES..=MAX_LOG_STRIDES).contains(&i.log_strides) {
                return fail(CmdStatus::BadParam, bad_param::STRIDE_COUNT);
            }
            RqKind::Striding {
                log_stride_size: i.log_stride_size,
                log_strides: i.log_strides,
            }
        }
        _ => return fail(CmdStatus::BadParam, bad_param::RQ_TYPE),
    };
    let cqn = i.cqn.get();
    c.core.cqs.owned(cqn, c.function)?;
    check_ring(c, i.addr.get(), (RECV_WQE_SIZE as u64) << i.log_size)?;
    let id = c.core.rqs.insert(ReceiveQueue {
        owner: c.function,
        addr: i.addr.get(),
        log_size: i.log_size,
        cqn,
        kind,
        ci: 0,
        open: None,
        prefetched: Default::default(),
        state: QueueState::Ready,
        refs: 0,
        packets: 0,
        bytes: 0,
        out_of_buffer: 0,
        oversize_drops: 0,
        truncated: 0,
        read_ahead_hits: 0,
    });
    if let Some(id) = id {
        c.core.cqs.add_ref(cqn);
        c.core.active_rqs.push(id);
        c.doorbells.store(db::slot(db::RQ_BASE, id), 0);
    }
    created(out, id)
}

fn destroy_rq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let rq = c.core.rqs.take_unreferenced(id, c.function)?;
    c.core.active_rqs.retain(|&x| x != id);
    c.core.cqs.drop_ref(rq.cqn);
    Ok(0)
}

fn query_rq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let q = c.core.rqs.owned(object(body)?, c.function)?;
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
        on_chip: U64::new(q.read_ahead_hits),
    };
    output(out, &o)
}

fn modify_rq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: ModifyQueueIn = input(body)?;
    let id = i.id.get();
    let q = c.core.rqs.owned_mut(id, c.function)?;
    check_recovery(i.new_state, q.state)?;
    q.state = QueueState::Ready;
    q.ci = 0;
    q.open = None;
    q.prefetched = Default::default();
    c.doorbells.store(db::slot(db::RQ_BASE, id), 0);
    Ok(0)
}
