//! Token-bucket meters (policers of a flow entry's packets) and VXLAN encapsulations (the outer
//! headers an entry prepends, RFC 7348 §5). Both are referenced by flow entries and cannot be
//! destroyed while an entry names them.

use zerocopy::little_endian::U64;

use super::{created, fail, input, object, output, place, Cmd, CmdResult, Handler};
use crate::nic::eswitch::{Meter, VxlanEncap};
use fld_abi::nic::*;

pub(super) const HANDLERS: &[(u16, Handler)] = &[
    (op::CREATE_METER, create_meter),
    (op::DESTROY_METER, destroy_meter),
    (op::QUERY_METER, query_meter),
    (op::CREATE_VXLAN_ENCAP, create_vxlan_encap),
    (op::DESTROY_VXLAN_ENCAP, destroy_vxlan_encap),
];

/// VXLAN encapsulations one NIC holds.
const MAX_ENCAPS: usize = 1024;
/// Meters one NIC holds.
const MAX_METERS: usize = 1024;

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

fn create_meter(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateMeterIn = input(body)?;
    if i.rate_bytes_per_s.get() == 0 || i.burst_bytes.get() == 0 {
        return fail(CmdStatus::BadParam, bad_param::METER_RATE);
    }
    let meter = Meter::new(c.function, i.rate_bytes_per_s.get(), i.burst_bytes.get(), 0);
    let id = place(&mut c.core.eswitch.meters, meter, MAX_METERS)?;
    created(out, Some(id))
}

fn destroy_meter(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let f = c.function;
    let slot = c.core.eswitch.meters.get_mut(id as usize);
    remove_unused(slot, id, |m| (m.owner == f).then_some(m.refs))
}

fn query_meter(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let m = c
        .core
        .eswitch
        .meters
        .get(id as usize)
        .and_then(|m| m.as_ref())
        .filter(|m| m.owner == c.function)
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

fn create_vxlan_encap(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateVxlanEncapIn = input(body)?;
    if i.vni.get() > 0x00ff_ffff {
        return fail(CmdStatus::BadParam, bad_param::VNI);
    }
    let encap = VxlanEncap::new(c.function, &i);
    let id = place(&mut c.core.eswitch.encaps, encap, MAX_ENCAPS)?;
    created(out, Some(id))
}

fn destroy_vxlan_encap(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let f = c.function;
    let slot = c.core.eswitch.encaps.get_mut(id as usize);
    remove_unused(slot, id, |e| (e.owner == f).then_some(e.refs))
}
