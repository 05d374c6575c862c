//! QUERY_CAPS and QUERY_VPORT.

use zerocopy::little_endian::U64;

use super::{fail, input, output, Cmd, CmdResult, Handler};
use fld_abi::nic::*;

pub(super) const HANDLERS: &[(u16, Handler)] =
    &[(op::QUERY_CAPS, query_caps), (op::QUERY_VPORT, query_vport)];

fn query_caps(c: &mut Cmd<'_, '_>, _body: &[u8], out: &mut [u8]) -> CmdResult {
    output(out, &c.core.caps(c.function))
}

/// A function queries its own vPort; the eSwitch manager any.
fn query_vport(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let v = input::<QueryVportIn>(body)?.vport.get();
    if v != c.function && c.function != 0 {
        return fail(CmdStatus::NotPermitted, v as u32);
    }
    let vp = c
        .core
        .eswitch
        .vport(v)
        .ok_or((CmdStatus::BadResource, v as u32))?;
    let n = vp.counters;
    output(
        out,
        &QueryVportOut {
            mac: vp.mac,
            up: 1,
            rsvd: 0,
            tx_packets: U64::new(n.tx_packets),
            tx_bytes: U64::new(n.tx_bytes),
            rx_packets: U64::new(n.rx_packets),
            rx_bytes: U64::new(n.rx_bytes),
            rx_steering_drops: U64::new(n.rx_steering_drops),
            rx_no_steering: U64::new(n.rx_no_steering),
            rx_out_of_buffer: U64::new(n.rx_out_of_buffer),
            tx_malformed: U64::new(n.tx_malformed),
        },
    )
}
