//! The command interface (the NIC's "firmware", `docs/nic-interface.md` §3): the driver writes a
//! command into host memory, points the CMD_* registers at it and rings CMD_DOORBELL; the NIC
//! reads the input by DMA, executes it and writes the output by DMA. Every malformed request
//! gets a status and a syndrome naming the failed check, never a panic.
//!
//! Handlers are grouped by the object family they manage — [`queues`] (EQ, CQ, SQ, RQ),
//! [`rss`] (RSS groups), [`steering`] (flow tables, roots, entries), [`policing`] (meters and
//! VXLAN encapsulations), [`query`] (capabilities, vPorts) and [`rdma`] (PDs, MRs, the GID
//! table, QPs, SRQs) — each with a table from opcode to handler.

mod policing;
mod query;
mod queues;
mod rdma;
mod rss;
mod steering;

use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes};

use super::{DoorbellArea, NicCore};
use crate::fabric::DmaPort;
use fld_abi::nic::*;

/// A handler's result: bytes of output written, or the status and syndrome of the failure.
type CmdResult = Result<usize, (CmdStatus, u32)>;

/// What a command handler works on: the NIC core, the calling function's DMA port and doorbell
/// page, and the function's number.
struct Cmd<'a, 'b> {
    core: &'a mut NicCore,
    dma: &'a mut DmaPort<'b>,
    doorbells: &'a DoorbellArea,
    function: u16,
}

/// Executes one command: `body` is the input after the header, `out` the output after it.
type Handler = fn(&mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult;

/// Every family's opcode table.
const FAMILIES: [&[(u16, Handler)]; 6] = [
    query::HANDLERS,
    queues::HANDLERS,
    rss::HANDLERS,
    steering::HANDLERS,
    policing::HANDLERS,
    rdma::HANDLERS,
];

fn fail<T>(status: CmdStatus, syndrome: u32) -> Result<T, (CmdStatus, u32)> {
    Err((status, syndrome))
}

/// A command's input and output buffers, [`CMD_MAX_LEN`] bytes each once the first command
/// sized them, kept by the NIC between commands: a command zeroes the output it offers, not
/// 8 KiB of stack. Taking them out for a command ([`std::mem::take`]) allocates nothing.
#[derive(Default)]
pub(super) struct CommandBuffers {
    input: Vec<u8>,
    out: Vec<u8>,
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
    const HDR: usize = CMD_HEADER_LEN;
    if !(HDR as u32..=CMD_MAX_LEN).contains(&in_len)
        || !(HDR as u32..=CMD_MAX_LEN).contains(&out_len)
    {
        return CmdDelivery::BadLength;
    }
    // Any command may change a QP or its ring: the WQE held on chip is fetched afresh after it.
    core.rdma.wqe_held = None;
    let mut buffers = std::mem::take(&mut core.command);
    buffers.input.resize(CMD_MAX_LEN as usize, 0);
    buffers.out.resize(CMD_MAX_LEN as usize, 0);
    let input = &mut buffers.input[..in_len as usize];
    let out = &mut buffers.out[..out_len as usize];
    let delivery = if dma.read(in_addr, input).is_err() || !dma.probe(out_addr, out.len()) {
        CmdDelivery::DmaError
    } else {
        out.fill(0);
        let mut cmd = Cmd {
            core,
            dma,
            doorbells,
            function,
        };
        answer(&mut cmd, input, out, out_addr)
    };
    core.command = buffers;
    delivery
}

/// Executes the command in `input` and writes its answer from `out` (zeroed, as long as the
/// output the driver offered) to `out_addr`.
fn answer(cmd: &mut Cmd<'_, '_>, input: &[u8], out: &mut [u8], out_addr: u64) -> CmdDelivery {
    const HDR: usize = CMD_HEADER_LEN;
    let function = cmd.function;
    let (hdr, body) = out.split_at_mut(HDR);
    let opcode = CmdInHeader::read_from_prefix(input)
        .map(|(h, _)| h.opcode.get())
        .unwrap_or_default();
    // The output must have room before anything changes: a CREATE whose result cannot be
    // returned must not create an object the driver cannot name.
    let result = if body.len() < output_len(opcode) {
        Err((CmdStatus::BadOutputLength, output_len(opcode) as u32))
    } else {
        execute(cmd, opcode, &input[HDR..], body)
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
    match cmd.dma.write(out_addr, &out[..HDR + n]) {
        Ok(()) => CmdDelivery::Ok,
        Err(_) => CmdDelivery::DmaError,
    }
}

fn execute(cmd: &mut Cmd<'_, '_>, opcode: u16, body: &[u8], out: &mut [u8]) -> CmdResult {
    let result = match FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .find(|(op, _)| *op == opcode)
    {
        Some((_, handler)) => handler(cmd, body, out),
        None => fail(CmdStatus::BadOpcode, opcode as u32),
    };
    // Which entry a key matches changes only by command: the flow cache starts afresh after any.
    cmd.core.eswitch.rules_changed();
    // What a QP can do may change by any command (its state, its CQs, a key): the engine's
    // next pass looks at all of them.
    cmd.core.rdma.visit_all = true;
    result
}

/// Parses a command's input layout.
fn input<T: FromBytes>(body: &[u8]) -> Result<T, (CmdStatus, u32)> {
    T::read_from_prefix(body)
        .map(|(v, _)| v)
        .map_err(|_| (CmdStatus::BadInputLength, 0))
}

/// The object number a DESTROY_* or QUERY_* command names.
fn object(body: &[u8]) -> Result<u32, (CmdStatus, u32)> {
    input::<ObjectIn>(body).map(|o| o.id.get())
}

/// Writes a command's output layout.
fn output<T: IntoBytes + Immutable>(out: &mut [u8], v: &T) -> CmdResult {
    let b = v.as_bytes();
    match out.get_mut(..b.len()) {
        Some(dst) => {
            dst.copy_from_slice(b);
            Ok(b.len())
        }
        None => fail(CmdStatus::BadOutputLength, b.len() as u32),
    }
}

/// The result of a CREATE_*: the new object's number, or EXCEED_LIMIT when there was no room.
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
