//! The NIC's command mailbox: any sequence of commands (known opcodes with arbitrary bodies and
//! output lengths, unknown opcodes, raw deliveries with arbitrary buffer addresses and lengths)
//! and control-register writes from either function gets statuses, never a panic, never a DMA
//! outside mapped memory; afterwards a reset and a bring-up move verified traffic.
#![no_main]

use fld_abi::nic::{op, output_len, reg, CMD_MAX_LEN};
use fld_device::mock::MOCK_IOVA;
use fld_fuzz::{assert_nic_recovers, small_nic, Input};
use libfuzzer_sys::fuzz_target;

const OPCODES: [u16; 29] = [
    op::QUERY_CAPS,
    op::CREATE_EQ,
    op::DESTROY_EQ,
    op::QUERY_EQ,
    op::CREATE_CQ,
    op::DESTROY_CQ,
    op::QUERY_CQ,
    op::CREATE_SQ,
    op::DESTROY_SQ,
    op::QUERY_SQ,
    op::MODIFY_SQ,
    op::CREATE_RQ,
    op::DESTROY_RQ,
    op::QUERY_RQ,
    op::MODIFY_RQ,
    op::CREATE_RSS_GROUP,
    op::DESTROY_RSS_GROUP,
    op::CREATE_FLOW_TABLE,
    op::DESTROY_FLOW_TABLE,
    op::SET_FLOW_TABLE_ROOT,
    op::CREATE_FLOW_ENTRY,
    op::DESTROY_FLOW_ENTRY,
    op::QUERY_FLOW_ENTRY,
    op::QUERY_VPORT,
    op::CREATE_METER,
    op::DESTROY_METER,
    op::QUERY_METER,
    op::CREATE_VXLAN_ENCAP,
    op::DESTROY_VXLAN_ENCAP,
];

fuzz_target!(|data: &[u8]| {
    let mut h = small_nic();
    // Host buffers commands may name as rings (64-byte aligned, 16 KiB each).
    let buffers: Vec<u64> = (0..4).map(|_| h.alloc(16 << 10)).collect();
    let mut input = Input::new(data);
    for _ in 0..64 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        let f = u16::from(ctl & 1);
        match (ctl >> 1) & 3 {
            0 | 1 => {
                let opcode = if ctl & 0x80 == 0 {
                    input.pick(&OPCODES)
                } else {
                    input.u16()
                };
                let len = input.u8() as usize * 2;
                let mut body = input.bytes(len).to_vec();
                // Most create commands start with a ring address: aim it at host memory.
                if ctl & 0x40 != 0 && body.len() >= 8 {
                    let at = input.pick(&buffers) + (input.u8() as u64 & 0x3f) * 64;
                    body[..8].copy_from_slice(&at.to_le_bytes());
                }
                let out_len = if ctl & 0x20 != 0 {
                    input.u16() as usize
                } else {
                    output_len(opcode)
                };
                h.command_with_output(f, opcode, &body, out_len);
            }
            2 => {
                // A raw delivery: the buffer's bytes and every register value from the input.
                let buf = input.pick(&buffers);
                let len = input.u8() as usize * 4;
                h.write(buf, input.bytes(len));
                let pick_addr = |input: &mut Input<'_>| match input.u8() % 4 {
                    0 => input.u64(),
                    1 => MOCK_IOVA - 64 + input.u8() as u64,
                    _ => buf + input.u8() as u64,
                };
                let in_addr = pick_addr(&mut input);
                let out_addr = pick_addr(&mut input);
                let (in_len, out_len) = (input.u16() as u32, input.u16() as u32);
                h.submit(f, in_addr, in_len % (CMD_MAX_LEN + 64), out_addr, out_len);
            }
            _ => {
                let offset = u64::from(input.u8()) * 4 % 0x1000;
                let value = input.u32();
                // DEVICE_RESET takes only its magic; let the input say either.
                if offset != reg::DEVICE_RESET || value == fld_abi::nic::RESET_MAGIC {
                    h.set_nic_reg(f, offset, value);
                }
                h.poll();
            }
        }
    }
    h.run(256);
    assert_nic_recovers(&mut h);
});
