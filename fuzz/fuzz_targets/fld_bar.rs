//! FLD's control BAR and its NIC-facing windows: arbitrary control-register writes and reads
//! (resets, rebinding queues with packets in flight, receive layouts, signalling intervals),
//! arbitrary reads and writes anywhere in the NIC-facing BAR (CQEs and runs of CQEs forged into
//! the CQ windows, bytes into the Rx buffer, reads of the Tx windows), traffic into FLD and
//! arbitrary sends on the accelerator's tx stream. Everything is a counted bad access, a dropped
//! packet or a defined register value; afterwards FLD reset and bound again echoes verified
//! traffic.
#![no_main]

use fld_abi::fld::{reg, BAR_CONTROL_SIZE, BAR_NIC, RESET_MAGIC};
use fld_device::accel::TxMeta;
use fld_fuzz::{assert_fld_recovers, frame_between, rdma_op, small_card, unobserved, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut h = small_card();
    let fld = h.fld.clone().expect("FLD");
    // FLD bound and a client port open: the same bring-up for every input, hidden from the
    // fuzzer.
    let mut client = unobserved(|| {
        h.bind_fld(2);
        h.open_port(1)
    });
    let bar2 = h.bar(fld.id(), BAR_NIC);
    let bar2_size = fld.geometry().bar_size();
    let mut input = Input::new(data);
    for _ in 0..96 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        match ctl & 7 {
            0 => {
                let offset = u64::from(input.u16()) * 4 % BAR_CONTROL_SIZE;
                let value = input.u32();
                // RESET takes only its magic; let the input say either.
                if offset != reg::RESET || value == RESET_MAGIC {
                    h.set_fld_reg(offset, value);
                }
            }
            1 => {
                let offset = u64::from(input.u16()) * 4 % BAR_CONTROL_SIZE;
                let _ = h.fld_reg(offset);
            }
            2 => {
                let offset = u64::from(input.u32()) % bar2_size;
                let mut buf = vec![0u8; input.u8() as usize + 1];
                h.fabric.mmio_read(bar2 + offset, &mut buf);
            }
            3 => {
                let offset = u64::from(input.u32()) % bar2_size;
                // Short writes, or runs of whole CQE-sized pieces (the NIC writes runs of CQEs).
                let len = if ctl & 0x80 != 0 {
                    (input.u8() as usize % 8 + 1) * 64
                } else {
                    input.u8() as usize % 64 + 1
                };
                h.fabric.mmio_write(bar2 + offset, input.bytes(len));
            }
            4 | 5 => {
                let f = frame_between(&h, 1, 0, 60 + input.u16() as usize % 2000, ctl);
                client.send(&h, &f, input.u8() & 3);
            }
            6 => {
                let meta = TxMeta {
                    queue: u16::from(input.u8() % 6),
                    cs_flags: input.u8() & 3,
                    resume_table: (ctl & 0x80 != 0).then(|| input.u8()),
                    rdma: rdma_op(&mut input),
                };
                let len = input.u16() as usize % 20000;
                let payload = input.bytes(len).to_vec();
                fld.with_tx_stream(|t| {
                    let _ = t.credits(meta.queue);
                    let _ = t.send(&meta, &payload);
                });
            }
            _ => {
                h.run(input.u8() as usize % 32 + 1);
                while client.receive(&h).is_some() {}
                while client.tx_cq.poll_cqe(&h).is_some() {}
                client.tx_cq.update_ci(&h, 1, fld_abi::nic::db::CQ_BASE);
            }
        }
    }
    h.run(512);
    assert_fld_recovers(&mut h);
});
