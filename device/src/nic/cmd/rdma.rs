//! RDMA objects (`docs/nic-interface.md` §15): protection domains, memory regions, the GID
//! table, queue pairs and their state machine, shared receive queues, the RoCE counters. A QP
//! holds references on its PD, CQs and SRQ; a region and an SRQ on their PD — none of them can
//! be destroyed while referenced (RESOURCE_BUSY).

use zerocopy::little_endian::{U32, U64};

use super::queues::{check_log_size, check_ring};
use super::{created, fail, input, object, output, Cmd, CmdResult, Handler};
use crate::nic::queues::RqKind;
use crate::nic::rdma::memory::{MemoryRegion, ProtectionDomain};
use crate::nic::rdma::qp::{self, QpRing, QueuePair, Requester, PREALLOCATED_OPS};
use crate::nic::rdma::{GidEntry, Rdma, SharedRq};
use fld_abi::nic::*;
use fld_abi::wire::roce::{flow_source_port, gid_is_ipv4};

pub(super) const HANDLERS: &[(u16, Handler)] = &[
    (op::CREATE_PD, create_pd),
    (op::DESTROY_PD, destroy_pd),
    (op::CREATE_MR, create_mr),
    (op::DESTROY_MR, destroy_mr),
    (op::QUERY_MR, query_mr),
    (op::SET_ROCE_ADDRESS, set_roce_address),
    (op::QUERY_ROCE_ADDRESS, query_roce_address),
    (op::SET_PKEY, set_pkey),
    (op::QUERY_PKEY, query_pkey),
    (op::CREATE_QP, create_qp),
    (op::MODIFY_QP, modify_qp),
    (op::QUERY_QP, query_qp),
    (op::DESTROY_QP, destroy_qp),
    (op::CREATE_SRQ, create_srq),
    (op::DESTROY_SRQ, destroy_srq),
    (op::QUERY_SRQ, query_srq),
    (op::ARM_SRQ, arm_srq),
    (op::QUERY_RDMA_COUNTERS, query_counters),
    (op::SET_STAR_SERVER, set_star_server),
    (op::STAR_GUARD_ADD, star_guard_add),
    (op::STAR_GUARD_DEL, star_guard_del),
    (op::STAR_GUARD_ENFORCE, star_guard_enforce),
    (op::SET_STAR_PEER, set_star_peer),
    (op::SET_QP_STAGING, set_qp_staging),
];

/// MTT entries a region may have (a 64 GiB region of 4 KiB pages).
const MAX_MTT_ENTRIES: u64 = 1 << 24;

fn create_pd(c: &mut Cmd<'_, '_>, _body: &[u8], out: &mut [u8]) -> CmdResult {
    let id = c.core.rdma.pds.insert(ProtectionDomain {
        owner: c.function,
        refs: 0,
    });
    created(out, id)
}

fn destroy_pd(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    c.core
        .rdma
        .pds
        .take_unreferenced(object(body)?, c.function)?;
    Ok(0)
}

fn create_mr(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateMrIn = input(body)?;
    let pd = i.pd.get();
    c.core.rdma.pds.owned(pd, c.function)?;
    let rights = i.access.get();
    // IBA 10.6.3.1: remote write and remote atomic require local write.
    if rights & !access::ALL != 0
        || (rights & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
            && rights & access::LOCAL_WRITE == 0)
    {
        return fail(CmdStatus::BadParam, bad_param::MR_ACCESS);
    }
    if !(MIN_LOG_MR_PAGE..=MAX_LOG_MR_PAGE).contains(&i.log_page_size) {
        return fail(CmdStatus::BadParam, bad_param::MR_PAGE_SIZE);
    }
    let (start, length) = (i.start.get(), i.length.get());
    let pages = i.pages();
    if length == 0 || start.checked_add(length).is_none() || pages > MAX_MTT_ENTRIES {
        return fail(CmdStatus::BadParam, bad_param::MR_LENGTH);
    }
    if !c
        .dma
        .probe(i.mtt_addr.get(), (pages as usize) * MTT_ENTRY_SIZE)
    {
        return fail(CmdStatus::BadParam, bad_param::MTT_UNREACHABLE);
    }
    let peer = i.flags & MR_FLAG_STAR_PEER != 0;
    let peer_key = peer.then(|| i.peer_key.get());
    if i.flags & !MR_FLAG_STAR_PEER != 0 || i.rsvd != [0; 2] || (!peer && i.peer_key.get() != 0) {
        return fail(CmdStatus::BadParam, bad_param::MR_FLAGS);
    }
    if let Some(k) = peer_key {
        // One region per server key and PD: the client's StaR QPs find it by that key.
        if c.core.rdma.peer_region(c.function, pd, k).is_some() {
            return fail(CmdStatus::BadParam, bad_param::MR_FLAGS);
        }
    }
    let rdma = &mut c.core.rdma;
    let Some(index) = rdma.mrs.insert(MemoryRegion {
        owner: c.function,
        pd,
        key: 0,
        access: rights,
        start,
        length,
        mtt_addr: i.mtt_addr.get(),
        log_page_size: i.log_page_size,
        refs: 0,
        peer_key,
    }) else {
        return fail(CmdStatus::ExceedLimit, 0);
    };
    let key = rdma.next_key(index);
    if let Some(mr) = rdma.mrs.get_mut(index) {
        mr.key = key;
    }
    if let Some(k) = peer_key {
        rdma.peers.insert((c.function, pd, k), index);
    }
    rdma.pds.add_ref(pd);
    created(out, Some(key))
}

/// The slab index of the region with `key`, if `function` owns it.
fn region(rdma: &Rdma, key: u32, function: u16) -> Result<u32, (CmdStatus, u32)> {
    let index = mkey_index(key)
        .checked_sub(1)
        .ok_or((CmdStatus::BadResource, key))?;
    match rdma.mrs.get(index) {
        Some(mr) if mr.key == key && mr.owner == function => Ok(index),
        _ => fail(CmdStatus::BadResource, key),
    }
}

fn destroy_mr(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let index = region(&c.core.rdma, object(body)?, c.function)?;
    let mr = c.core.rdma.mrs.take_unreferenced(index, c.function)?;
    c.core.rdma.pds.drop_ref(mr.pd);
    if let Some(k) = mr.peer_key {
        // Only its own entry: a server's deregistration may have dropped it already, and a
        // later registration of the same key put another region there (§16.6).
        let at = (c.function, mr.pd, k);
        if c.core.rdma.peers.get(&at) == Some(&index) {
            c.core.rdma.peers.remove(&at);
        }
    }
    let pages = mtt_pages(mr.start, mr.length, mr.log_page_size);
    crate::nic::rdma::memory::invalidate(
        c.core.rdma.mtt_cache.get_mut(),
        c.function,
        Some((mr.mtt_addr, pages)),
    );
    Ok(0)
}

fn query_mr(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let index = region(&c.core.rdma, object(body)?, c.function)?;
    let mr = c.core.rdma.mrs.owned(index, c.function)?;
    output(
        out,
        &QueryMrOut {
            pd: U32::new(mr.pd),
            access: U32::new(mr.access),
            start: U64::new(mr.start),
            length: U64::new(mr.length),
            mtt_addr: U64::new(mr.mtt_addr),
            log_page_size: mr.log_page_size,
            rsvd: [0; 3],
            refs: U32::new(mr.refs),
        },
    )
}

fn set_roce_address(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: RoceAddressIn = input(body)?;
    let index = i.index.get() as usize;
    if index >= ROCE_ADDRESS_ENTRIES as usize || i.flags & !ROCE_ADDRESS_VALID != 0 {
        return fail(CmdStatus::BadParam, bad_param::ROCE_ADDRESS);
    }
    let Some(table) = c.core.rdma.gids.get_mut(c.function as usize) else {
        return fail(CmdStatus::NotPermitted, 0);
    };
    table[index] = (i.flags & ROCE_ADDRESS_VALID != 0).then_some(GidEntry {
        gid: i.gid,
        mac: i.mac,
    });
    Ok(0)
}

fn query_roce_address(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let index = object(body)?;
    if index >= ROCE_ADDRESS_ENTRIES as u32 {
        return fail(CmdStatus::BadParam, bad_param::ROCE_ADDRESS);
    }
    let e = c.core.rdma.gid(c.function, index as u8);
    let mut o = RoceAddressIn::default();
    o.index.set(index as u16);
    if let Some(e) = e {
        o.flags = ROCE_ADDRESS_VALID;
        o.gid = e.gid;
        o.mac = e.mac;
    }
    output(out, &o)
}

/// SET_PKEY: the calling function's P_Key table entry (IBA §10.9.2; on InfiniBand the subnet
/// manager's job, on RoCE the driver's). Any value is taken: a partition of 0 makes the entry
/// invalid. QPs using the entry send and match with the new value from their next packet.
fn set_pkey(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: PkeyIn = input(body)?;
    let entry = c
        .core
        .rdma
        .pkeys
        .get_mut(c.function as usize)
        .and_then(|t| t.get_mut(usize::from(i.index.get())));
    match entry {
        Some(e) => {
            *e = i.pkey.get();
            Ok(0)
        }
        None => fail(CmdStatus::BadParam, bad_param::PKEY_INDEX),
    }
}

fn query_pkey(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let index = object(body)?;
    if index >= u32::from(PKEY_TABLE_ENTRIES) {
        return fail(CmdStatus::BadParam, bad_param::PKEY_INDEX);
    }
    let mut o = PkeyIn::default();
    o.index.set(index as u16);
    o.pkey.set(c.core.rdma.pkey(c.function, index as u16));
    output(out, &o)
}

/// SET_STAR_SERVER: the calling function serves StaR requests statelessly, or stops; EAs go to
/// `control_cqn` (a CQ of the function, referenced while set). Function-wide state only: the
/// NIC learns nothing about the connections it will serve.
fn set_star_server(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: StarServerIn = input(body)?;
    let flags = i.flags.get();
    if flags & !STAR_SERVE != 0 {
        return fail(CmdStatus::BadParam, bad_param::STAR_FLAGS);
    }
    let cqn = i.control_cqn.get();
    let control = if cqn == STAR_NO_CQ {
        None
    } else {
        c.core.cqs.owned(cqn, c.function)?;
        Some(cqn)
    };
    let f = c.function as usize;
    let Some(old) = c.core.rdma.star.get(f).copied() else {
        return fail(CmdStatus::BadParam, bad_param::STAR_FLAGS);
    };
    if let Some(cqn) = control {
        c.core.cqs.add_ref(cqn);
    }
    if let Some(cqn) = old.control_cqn {
        c.core.cqs.drop_ref(cqn);
    }
    c.core.rdma.star[f] = crate::nic::rdma::StarServer {
        serving: flags & STAR_SERVE != 0,
        control_cqn: control,
    };
    Ok(0)
}

/// The egress security module of `function`, for the manager function only (§16.5): the
/// server's control plane reaches a client NIC through the trusted driver, never through an
/// application's function.
fn guard_of<'c>(
    c: &'c mut Cmd<'_, '_>,
    function: u16,
) -> Result<&'c mut crate::nic::star_guard::StarGuard, (CmdStatus, u32)> {
    if c.function != 0 {
        return fail(
            CmdStatus::NotPermitted,
            not_permitted::STAR_GUARD_NOT_MANAGER,
        );
    }
    match c.core.rdma.guards.get_mut(usize::from(function)) {
        Some(g) => Ok(g),
        None => fail(CmdStatus::BadParam, bad_param::STAR_GUARD),
    }
}

/// STAR_GUARD_ADD: an allow entry in a function's egress security module.
fn star_guard_add(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: StarGuardIn = input(body)?;
    let (lo, hi) = (i.lo.get(), i.hi.get());
    if i.kinds == 0 || i.rsvd != 0 || lo > hi {
        return fail(CmdStatus::BadParam, bad_param::STAR_GUARD);
    }
    let entry = crate::nic::star_guard::GuardEntry {
        id: 0,
        kinds: i.kinds,
        dst_gid: i.dst_gid,
        lo,
        hi,
        cqn: i.cqn.get(),
    };
    let id = guard_of(c, i.function.get())?.add(entry);
    created(out, id)
}

fn star_guard_del(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: StarGuardFunctionIn = input(body)?;
    let id = i.value.get();
    if guard_of(c, i.function.get())?.remove(id) {
        Ok(0)
    } else {
        fail(CmdStatus::BadResource, id)
    }
}

/// STAR_GUARD_ENFORCE: the test knob. 0 lets every StaR packet of the function through.
fn star_guard_enforce(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: StarGuardFunctionIn = input(body)?;
    let value = i.value.get();
    if value > 1 {
        return fail(CmdStatus::BadParam, bad_param::STAR_GUARD);
    }
    guard_of(c, i.function.get())?.enforce = value == 1;
    Ok(0)
}

/// SET_STAR_PEER: a QP in RESET or INIT becomes a StaR client (§16.6): from RTS its NIC runs
/// the transport of both ends, and the server's completions go to the server's CQs named here.
/// A QP on an SRQ or a multi-packet RQ cannot be one (the server's SENDs land in its own
/// receive WQEs).
fn set_star_peer(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: StarPeerIn = input(body)?;
    let f = c.function;
    let index = queue_pair(&c.core.rdma, i.qpn.get(), f)?;
    let qp = c.core.rdma.qps.owned_mut(index, f)?;
    if !matches!(qp.state, QpState::Reset | QpState::Init) {
        return fail(CmdStatus::BadState, qp.state as u32);
    }
    if qp.srq.is_some() || qp.packet_rq.is_some() {
        return fail(CmdStatus::BadParam, bad_param::QP_FLAGS);
    }
    let update_rq = match i.update_rqn.get() {
        STAR_NO_RQ => None,
        n => Some(c.core.rqs.owned(n, f).map(|_| n)?),
    };
    let qp = c.core.rdma.qps.owned_mut(index, f)?;
    qp.star = Some(Box::new(crate::nic::rdma::star::StarClient::new(
        i.server_send_cqn.get(),
        i.server_recv_cqn.get(),
        update_rq,
    )));
    Ok(0)
}

/// SET_QP_STAGING: the QP's staging ring, uRDMA's in-RNIC unload path (§18); `log_slots` 0
/// takes it away. The ring must lie in a region of the QP's PD with local write; a QP that
/// reorders, shares an RQ or is a StaR client has none. The consumer counter starts at 0.
fn set_qp_staging(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    use crate::nic::rdma::staging::Staging;
    let i: QpStagingIn = input(body)?;
    let f = c.function;
    let index = queue_pair(&c.core.rdma, i.qpn.get(), f)?;
    let qp = c.core.rdma.qps.owned(index, f)?;
    if i.rsvd != [0; 6] {
        return fail(CmdStatus::BadParam, bad_param::QP_STAGING);
    }
    let staging = if i.log_slots == 0 {
        None
    } else {
        let shape_ok = i.log_slots <= MAX_LOG_STAGING_SLOTS
            && (MIN_LOG_STAGING_SLOT..=MAX_LOG_STAGING_SLOT).contains(&i.log_slot_bytes);
        if !shape_ok
            || qp.out_of_order
            || qp.srq.is_some()
            || qp.packet_rq.is_some()
            || qp.star.is_some()
        {
            return fail(CmdStatus::BadParam, bad_param::QP_STAGING);
        }
        let s = Staging {
            lkey: i.lkey.get(),
            addr: i.addr.get(),
            log_slots: i.log_slots,
            log_slot_bytes: i.log_slot_bytes,
            produced: 0,
        };
        // The reserved lkey names bus addresses, not a region: not a ring.
        let region = (s.lkey != RESERVED_LKEY)
            .then(|| {
                crate::nic::rdma::memory::check(
                    &c.core.rdma.mrs,
                    f,
                    qp.pd,
                    s.lkey,
                    s.addr,
                    s.len(),
                    access::LOCAL_WRITE,
                    true,
                )
            })
            .and_then(|r| r.ok());
        if region.is_none() {
            return fail(CmdStatus::BadResource, s.lkey);
        }
        Some(s)
    };
    c.core.rdma.qps.owned_mut(index, f)?.staging = staging;
    c.doorbells.store(db::slot(db::QP_STAGING_BASE, index), 0);
    Ok(0)
}

fn create_qp(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateQpIn = input(body)?;
    let f = c.function;
    let pd = i.pd.get();
    c.core.rdma.pds.owned(pd, f)?;
    let (send_cqn, recv_cqn) = (i.send_cqn.get(), i.recv_cqn.get());
    c.core.cqs.owned(send_cqn, f)?;
    c.core.cqs.owned(recv_cqn, f)?;
    if i.flags & !(QP_FLAG_SIGNAL_ALL | QP_FLAG_MULTI_PACKET_RQ | QP_FLAG_OUT_OF_ORDER) != 0 {
        return fail(CmdStatus::BadParam, bad_param::QP_FLAGS);
    }
    let out_of_order = i.flags & QP_FLAG_OUT_OF_ORDER != 0;
    if out_of_order && c.core.rdma.reorder.is_none() {
        // Fail closed: without a reorder unit the QP would silently go back N.
        return fail(CmdStatus::BadParam, bad_param::QP_FLAGS);
    }
    let (srq, packet_rq) = match i.srqn.get() {
        NO_SRQ if i.flags & QP_FLAG_MULTI_PACKET_RQ != 0 => {
            return fail(CmdStatus::BadResource, NO_SRQ);
        }
        NO_SRQ => (None, None),
        n if i.flags & QP_FLAG_MULTI_PACKET_RQ != 0 => {
            // The shared multi-packet RQ: a striding RQ of the same function.
            let rq = c.core.rqs.owned(n, f)?;
            if !matches!(rq.kind, RqKind::Striding { .. }) {
                return fail(CmdStatus::BadParam, bad_param::QP_FLAGS);
            }
            (None, Some(n))
        }
        n => {
            c.core.rdma.srqs.owned(n, f)?;
            (Some(n), None)
        }
    };
    check_log_size(i.log_sq_size, MAX_LOG_SQ)?;
    check_ring(c, i.sq_addr.get(), (WQEBB as u64) << i.log_sq_size)?;
    if srq.is_none() && packet_rq.is_none() {
        check_log_size(i.log_rq_size, MAX_LOG_RQ)?;
        if !(MIN_LOG_RQ_STRIDE..=MAX_LOG_RQ_STRIDE).contains(&i.log_rq_stride) {
            return fail(CmdStatus::BadParam, bad_param::RQ_STRIDE);
        }
        check_ring(
            c,
            i.rq_addr.get(),
            1u64 << (i.log_rq_stride + i.log_rq_size),
        )?;
    }
    let qp = QueuePair {
        owner: f,
        pd,
        state: QpState::Reset,
        send_cqn,
        recv_cqn,
        srq,
        packet_rq,
        sq: QpRing {
            addr: i.sq_addr.get(),
            log_size: i.log_sq_size,
            log_stride: 6,
        },
        rq: QpRing {
            addr: i.rq_addr.get(),
            log_size: i.log_rq_size,
            log_stride: i.log_rq_stride,
        },
        rq_counter: 0,
        signal_all: i.flags & QP_FLAG_SIGNAL_ALL != 0,
        out_of_order,
        attr: QpAttr::default(),
        req: Requester::with_capacity(PREALLOCATED_OPS.min(1 << i.log_sq_size)),
        resp: Default::default(),
        counters: Default::default(),
        drained_reported: false,
        last_wqe_reported: false,
        src_port: 0,
        star: None,
        staging: None,
        timer_at: None,
    };
    let Some(index) = c.core.rdma.qps.insert(qp) else {
        return fail(CmdStatus::ExceedLimit, 0);
    };
    c.core.rdma.pds.add_ref(pd);
    c.core.cqs.add_ref(send_cqn);
    c.core.cqs.add_ref(recv_cqn);
    if let Some(s) = srq {
        c.core.rdma.srqs.add_ref(s);
    }
    if let Some(r) = packet_rq {
        c.core.rqs.add_ref(r);
    }
    c.doorbells.store(db::slot(db::QP_SQ_BASE, index), 0);
    c.doorbells.store(db::slot(db::QP_RQ_BASE, index), 0);
    c.doorbells.store(
        db::wqe_buffer(db::QP_SQ_WQE_BASE, index) + db::WQE_SEAL_OFFSET,
        0,
    );
    created(out, Some(Rdma::qpn(index)))
}

/// The slab index of QP `qpn` of `function`.
fn queue_pair(rdma: &Rdma, qpn: u32, function: u16) -> Result<u32, (CmdStatus, u32)> {
    let index = Rdma::qp_index(qpn).ok_or((CmdStatus::BadResource, qpn))?;
    rdma.qps
        .owned(index, function)
        .map(|_| index)
        .map_err(|_| (CmdStatus::BadResource, qpn))
}

fn modify_qp(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: ModifyQpIn = input(body)?;
    let f = c.function;
    let index = queue_pair(&c.core.rdma, i.qpn.get(), f)?;
    let rdma = &mut c.core.rdma;
    let (state, mask, new) = (rdma.qps.owned(index, f)?.state, i.attr_mask.get(), i.attr);
    let gid_valid = |g: u8| rdma.gid(f, g).is_some();
    let to = qp::check_modify(state, mask, &new, gid_valid)?;
    let qp = rdma.qps.owned(index, f)?;
    let mut attr = qp.attr;
    qp::apply(&mut attr, mask, &new);
    if to == QpState::Rtr {
        // The source and destination GIDs must be of one family: both IPv4 or both IPv6.
        let sgid = rdma
            .gid(f, attr.sgid_index)
            .map(|e| e.gid)
            .unwrap_or_default();
        if gid_is_ipv4(&sgid) != gid_is_ipv4(&attr.dgid) {
            return fail(
                CmdStatus::BadParam,
                bad_param::QP_ATTR_VALUE | qp_attr::AV.trailing_zeros() << 16,
            );
        }
    }
    let qpn = Rdma::qpn(index);
    let Some(qp) = rdma.qps.get_mut(index) else {
        return fail(CmdStatus::BadResource, qpn);
    };
    qp.attr = attr;
    qp.attr.qp_state = to as u8;
    let from = qp.state;
    qp.state = to;
    match (from, to) {
        (_, QpState::Reset) => {
            qp.req = Requester::with_capacity(qp.req.ops.capacity());
            qp.resp = Default::default();
            qp.rq_counter = 0;
            qp.drained_reported = false;
            qp.last_wqe_reported = false;
            if let Some(star) = qp.star.as_deref_mut() {
                star.reset();
            }
            if let Some(s) = qp.staging.as_mut() {
                s.produced = 0;
            }
            c.doorbells.store(db::slot(db::QP_STAGING_BASE, index), 0);
            c.doorbells.store(db::slot(db::QP_SQ_BASE, index), 0);
            c.doorbells.store(db::slot(db::QP_RQ_BASE, index), 0);
            c.doorbells.store(
                db::wqe_buffer(db::QP_SQ_WQE_BASE, index) + db::WQE_SEAL_OFFSET,
                0,
            );
        }
        (QpState::Init, QpState::Rtr) => {
            qp.resp.expected_psn = attr.rq_psn.get();
            qp.src_port = flow_source_port(qpn, attr.dest_qpn.get());
        }
        (QpState::Rtr, QpState::Rts) => {
            let psn = attr.sq_psn.get();
            qp.req.next_psn = psn;
            qp.req.unacked_psn = psn;
            qp.req.sent_high = psn;
            qp.req.retry_left = attr.retry_cnt;
            qp.req.rnr_retry_left = attr.rnr_retry;
        }
        (QpState::Rts, QpState::Sqd) => qp.drained_reported = false,
        _ => {}
    }
    rdma.set_active(index, to != QpState::Reset);
    if to == QpState::Reset {
        if let Some(r) = rdma.reorder.as_mut() {
            r.forget(index);
        }
    }
    Ok(0)
}

fn query_qp(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let index = queue_pair(&c.core.rdma, object(body)?, c.function)?;
    let qp = c.core.rdma.qps.owned(index, c.function)?;
    let mut attr = qp.attr;
    attr.qp_state = qp.state as u8;
    output(
        out,
        &QueryQpOut {
            attr,
            next_psn: U32::new(qp.req.next_psn),
            unacked_psn: U32::new(qp.req.unacked_psn),
            expected_psn: U32::new(qp.resp.expected_psn),
            rsvd: U32::new(0),
            counters: qp.counters.to_abi(),
        },
    )
}

fn destroy_qp(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let index = queue_pair(&c.core.rdma, object(body)?, c.function)?;
    let Some(qp) = c.core.rdma.qps.remove(index) else {
        return fail(CmdStatus::BadResource, index);
    };
    c.core.rdma.set_active(index, false);
    c.core.rdma.qp_cache.invalidate(|&i| i == index);
    if let Some(r) = c.core.rdma.reorder.as_mut() {
        r.forget(index);
    }
    c.core.rdma.pds.drop_ref(qp.pd);
    c.core.cqs.drop_ref(qp.send_cqn);
    c.core.cqs.drop_ref(qp.recv_cqn);
    if let Some(s) = qp.srq {
        c.core.rdma.srqs.drop_ref(s);
    }
    if let Some(r) = qp.packet_rq {
        c.core.rqs.drop_ref(r);
    }
    Ok(0)
}

fn create_srq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateSrqIn = input(body)?;
    let pd = i.pd.get();
    c.core.rdma.pds.owned(pd, c.function)?;
    check_log_size(i.log_size, MAX_LOG_RQ)?;
    if !(MIN_LOG_RQ_STRIDE..=MAX_LOG_RQ_STRIDE).contains(&i.log_stride) {
        return fail(CmdStatus::BadParam, bad_param::RQ_STRIDE);
    }
    check_ring(c, i.addr.get(), 1u64 << (i.log_stride + i.log_size))?;
    let id = c.core.rdma.srqs.insert(SharedRq {
        owner: c.function,
        pd,
        ring: QpRing {
            addr: i.addr.get(),
            log_size: i.log_size,
            log_stride: i.log_stride,
        },
        counter: 0,
        limit: 0,
        limit_eqn: 0,
        refs: 0,
    });
    if let Some(id) = id {
        c.core.rdma.pds.add_ref(pd);
        c.doorbells.store(db::slot(db::SRQ_BASE, id), 0);
    }
    created(out, id)
}

fn destroy_srq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let srq = c
        .core
        .rdma
        .srqs
        .take_unreferenced(object(body)?, c.function)?;
    c.core.rdma.pds.drop_ref(srq.pd);
    Ok(0)
}

fn query_srq(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let s = c.core.rdma.srqs.owned(object(body)?, c.function)?;
    output(
        out,
        &QuerySrqOut {
            hw_counter: U32::new(s.counter),
            limit: U32::new(s.limit),
            log_size: s.ring.log_size,
            log_stride: s.ring.log_stride,
            rsvd: [0; 2],
            refs: U32::new(s.refs),
        },
    )
}

fn arm_srq(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: ArmSrqIn = input(body)?;
    if i.limit.get() != 0 {
        c.core.eqs.owned(i.eqn.get(), c.function)?;
    }
    let s = c.core.rdma.srqs.owned_mut(i.srqn.get(), c.function)?;
    if i.limit.get() > 1 << s.ring.log_size {
        return fail(CmdStatus::BadParam, bad_param::LOG_SIZE);
    }
    s.limit = i.limit.get();
    s.limit_eqn = i.eqn.get();
    Ok(0)
}

fn query_counters(c: &mut Cmd<'_, '_>, _body: &[u8], out: &mut [u8]) -> CmdResult {
    let k = c
        .core
        .rdma
        .counters
        .get(c.function as usize)
        .copied()
        .unwrap_or_default();
    let (qc, mc) = (
        c.core.rdma.qp_cache.counters,
        c.core.rdma.mtt_cache.borrow().counters,
    );
    let connected = c
        .core
        .rdma
        .qps
        .iter()
        .filter(|q| {
            matches!(
                q.state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
        })
        .count() as u64;
    let u = U64::new;
    output(
        out,
        &RdmaCountersOut {
            rx_packets: u(k.rx_packets),
            rx_icrc_errors: u(k.rx_icrc_errors),
            rx_unknown_qp: u(k.rx_unknown_qp),
            rx_malformed: u(k.rx_malformed),
            rx_qp_not_ready: u(k.rx_qp_not_ready),
            tx_packets: u(k.tx_packets),
            rx_wrong_source: u(k.rx_wrong_source),
            rx_bad_pkey: u(k.rx_bad_pkey),
            qp_cache_hits: u(qc.hits),
            qp_cache_misses: u(qc.misses),
            mtt_cache_hits: u(mc.hits),
            mtt_cache_misses: u(mc.misses),
            star_served: u(k.star_served),
            star_refused: u(k.star_refused),
            star_dma_errors: u(k.star_dma_errors),
            star_tx_blocked: u(k.star_tx_blocked),
            qp_contexts_connected: u(connected),
            rx_out_of_order: u(k.rx_out_of_order),
        },
    )
}
