//! Flow tables, roots and entries of the eSwitch (`docs/nic-interface.md` §9). FDB tables are the
//! manager function's; receive tables steer the caller's own vPort. Go-to targets sit at a
//! strictly higher level, so a pipeline cannot loop; every object a fate names holds a
//! reference until the entry goes.

use zerocopy::little_endian::U64;

use super::{created, fail, input, object, output, Cmd, CmdResult, Handler};
use crate::nic::eswitch::{Eswitch, FlowEntryInit, FlowTable, Miss};
use crate::nic::release_entry_refs;
use fld_abi::nic::*;

pub(super) const HANDLERS: &[(u16, Handler)] = &[
    (op::CREATE_FLOW_TABLE, create_flow_table),
    (op::DESTROY_FLOW_TABLE, destroy_flow_table),
    (op::SET_FLOW_TABLE_ROOT, set_flow_table_root),
    (op::CREATE_FLOW_ENTRY, create_flow_entry),
    (op::DESTROY_FLOW_ENTRY, destroy_flow_entry),
    (op::QUERY_FLOW_ENTRY, query_flow_entry),
];

/// A table kind the caller may use: FDB tables only from the eSwitch manager.
fn check_kind(kind: u8, function: u16) -> Result<(), (CmdStatus, u32)> {
    if kind == TABLE_KIND_FDB && function != 0 {
        return fail(CmdStatus::NotPermitted, not_permitted::FDB_NOT_MANAGER);
    }
    if kind != TABLE_KIND_FDB && kind != TABLE_KIND_NIC_RX {
        return fail(CmdStatus::BadParam, bad_param::TABLE_KIND);
    }
    Ok(())
}

/// A go-to-table target must exist, belong to the caller, be of the same kind and sit at a
/// strictly higher level (so pipelines cannot loop).
fn check_goto(
    es: &Eswitch,
    function: u16,
    kind: u8,
    level: u8,
    target: u32,
) -> Result<(), (CmdStatus, u32)> {
    match es.table(target) {
        Some(t) if t.owner == function && t.kind == kind && t.level > level => Ok(()),
        Some(_) => fail(CmdStatus::BadParam, bad_param::GOTO_TARGET),
        None => fail(CmdStatus::BadResource, target),
    }
}

fn create_flow_table(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateFlowTableIn = input(body)?;
    // The kind is checked before the permission for creation (docs: BAD_PARAM 0x30 first).
    if i.kind != TABLE_KIND_FDB && i.kind != TABLE_KIND_NIC_RX {
        return fail(CmdStatus::BadParam, bad_param::TABLE_KIND);
    }
    check_kind(i.kind, c.function)?;
    if i.level > MAX_FLOW_LEVEL {
        return fail(CmdStatus::BadParam, bad_param::TABLE_LEVEL);
    }
    let miss = match i.miss {
        MISS_DEFAULT => Miss::Default,
        MISS_DROP => Miss::Drop,
        MISS_GOTO_TABLE => {
            let t = i.miss_table.get();
            check_goto(&c.core.eswitch, c.function, i.kind, i.level, t)?;
            Miss::Goto(t)
        }
        _ => return fail(CmdStatus::BadParam, bad_param::TABLE_MISS),
    };
    let es = &mut c.core.eswitch;
    let free = es.tables.iter().position(|t| t.is_none());
    if free.is_none() && es.tables.len() as u32 >= c.core.config.max_flow_tables {
        return fail(CmdStatus::ExceedLimit, 0);
    }
    if let Miss::Goto(t) = miss {
        if let Some(t) = es.table_mut(t) {
            t.refs += 1;
        }
    }
    let table = FlowTable {
        owner: c.function,
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

/// Refused while the table has entries, is a go-to or miss target, or is a root.
fn destroy_flow_table(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let es = &mut c.core.eswitch;
    let t = es
        .table(id)
        .filter(|t| t.owner == c.function)
        .ok_or((CmdStatus::BadResource, id))?;
    let is_root = es.fdb_root == Some(id) || es.vports.iter().any(|v| v.rx_root == Some(id));
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

fn set_flow_table_root(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let i: SetRootIn = input(body)?;
    check_kind(i.kind, c.function)?;
    let t = i.table.get();
    let es = &mut c.core.eswitch;
    let root = if t == NO_TABLE {
        None
    } else {
        es.table(t)
            .filter(|x| x.owner == c.function && x.kind == i.kind)
            .ok_or((CmdStatus::BadResource, t))?;
        Some(t)
    };
    if i.kind == TABLE_KIND_FDB {
        es.fdb_root = root;
    } else if let Some(v) = es.vports.get_mut(c.function as usize) {
        v.rx_root = root;
    }
    Ok(0)
}

/// Whether `slots[id]` holds an object of `function` (meters, encapsulations, RSS groups).
fn owns<T>(slots: &[Option<T>], id: u32, owner: impl Fn(&T) -> u16, function: u16) -> bool {
    slots
        .get(id as usize)
        .and_then(|x| x.as_ref())
        .is_some_and(|x| owner(x) == function)
}

fn create_flow_entry(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateFlowEntryIn = input(body)?;
    let f = c.function;
    let tid = i.table.get();
    let t = c
        .core
        .eswitch
        .table(tid)
        .filter(|t| t.owner == f)
        .ok_or((CmdStatus::BadResource, tid))?;
    let (kind, level) = (t.kind, t.level);
    let a = i.actions.get();
    if a & !action::ALL != 0 || (a & action::FATES).count_ones() > 1 {
        return fail(CmdStatus::BadParam, bad_param::ACTIONS);
    }
    if a & action::VXLAN_DECAP != 0 && a & action::GOTO_TABLE == 0 {
        return fail(CmdStatus::BadParam, bad_param::DECAP_WITHOUT_GOTO);
    }
    if a & action::VXLAN_ENCAP != 0 && a & action::FWD_VPORT == 0 {
        return fail(CmdStatus::BadParam, bad_param::ENCAP_WITHOUT_VPORT);
    }
    let es = &c.core.eswitch;
    let encap = i.encap.get();
    if a & action::VXLAN_ENCAP != 0 && !owns(&es.encaps, encap, |e| e.owner, f) {
        return fail(CmdStatus::BadResource, encap);
    }
    if c.core.flow_entry_count >= c.core.config.max_flow_entries {
        return fail(CmdStatus::ExceedLimit, 0);
    }
    let dest = i.dest.get();
    if a & action::FWD_VPORT != 0 {
        let v = i.vport.get();
        if kind != TABLE_KIND_FDB {
            return fail(CmdStatus::BadParam, bad_param::VPORT_OUTSIDE_FDB);
        }
        if es.vport(v).is_none() {
            return fail(CmdStatus::BadResource, v as u32);
        }
    }
    if a & (action::FWD_RQ | action::FWD_RSS) != 0 && kind != TABLE_KIND_NIC_RX {
        return fail(CmdStatus::BadParam, bad_param::QUEUE_OUTSIDE_RX);
    }
    if a & action::FWD_RQ != 0 && c.core.rqs.owned(dest, f).is_err() {
        return fail(CmdStatus::BadResource, dest);
    }
    if a & action::FWD_RSS != 0 && !owns(&es.rss_groups, dest, |g| g.owner, f) {
        return fail(CmdStatus::BadResource, dest);
    }
    if a & action::GOTO_TABLE != 0 {
        check_goto(es, f, kind, level, dest)?;
    }
    let meter = i.meter.get();
    if a & action::METER != 0 && !owns(&es.meters, meter, |m| m.owner, f) {
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
    let es = &mut c.core.eswitch;
    let id = es
        .insert_entry(tid, init)
        .ok_or((CmdStatus::BadResource, tid))?;
    c.core.flow_entry_count += 1;
    if a & action::FWD_RQ != 0 {
        c.core.rqs.add_ref(dest);
    }
    if a & action::GOTO_TABLE != 0 {
        if let Some(t) = es.table_mut(dest) {
            t.refs += 1;
        }
    }
    if a & action::VXLAN_ENCAP != 0 {
        if let Some(e) = es.encaps.get_mut(encap as usize).and_then(|e| e.as_mut()) {
            e.refs += 1;
        }
    }
    if a & action::METER != 0 {
        if let Some(m) = es.meters.get_mut(meter as usize).and_then(|m| m.as_mut()) {
            m.refs += 1;
        }
    }
    created(out, Some(id))
}

/// The table and index of entry `id` if its table belongs to `function`.
fn owned_entry(es: &Eswitch, id: u32, function: u16) -> Result<(u32, usize), (CmdStatus, u32)> {
    let (t, idx) = es.find_entry(id).ok_or((CmdStatus::BadResource, id))?;
    match es.table(t) {
        Some(tab) if tab.owner == function => Ok((t, idx)),
        _ => fail(CmdStatus::BadResource, id),
    }
}

fn destroy_flow_entry(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let (t, idx) = owned_entry(&c.core.eswitch, id, c.function)?;
    let Some(table) = c.core.eswitch.table_mut(t) else {
        return fail(CmdStatus::BadResource, id);
    };
    let e = table.entries.remove(idx);
    c.core.flow_entry_count -= 1;
    release_entry_refs(&mut c.core.rqs, &mut c.core.eswitch, &e);
    Ok(0)
}

fn query_flow_entry(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let (t, idx) = owned_entry(&c.core.eswitch, id, c.function)?;
    let e = &c.core.eswitch.tables[t as usize]
        .as_ref()
        .ok_or((CmdStatus::BadResource, id))?
        .entries[idx];
    output(
        out,
        &QueryFlowEntryOut {
            packets: U64::new(e.packets),
            bytes: U64::new(e.bytes),
        },
    )
}
