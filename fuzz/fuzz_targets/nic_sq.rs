//! Send and receive descriptors on live queues: arbitrary WQE bytes (and well-formed WQEs with
//! arbitrary inline headers and gather lists, and multi-packet WQEs of arbitrary frames),
//! arbitrary producer doorbells, arbitrary receive
//! descriptors, recovery commands and completion draining, interleaved with engine steps; before a
//! doorbell, the SQ's WQE-by-MMIO buffer may get the last well-formed WQE with its seal (whole,
//! or with words overwritten after the seal) or arbitrary words and an arbitrary seal. Every bad
//! WQE is an error completion, every bad buffer a counted drop or an RQ error; nothing is written
//! outside mapped memory, and a reset and a bring-up move verified traffic.
#![no_main]

use fld_abi::nic::{
    db, op, DataSeg, ModifyQueueIn, MultiPacketSendWqe, QueueState, SendWqe, WQEBB,
};
use fld_device::mock::MOCK_IOVA;
use fld_fuzz::{assert_nic_recovers, frame_between, small_nic, unobserved, Input};
use libfuzzer_sys::fuzz_target;
use zerocopy::little_endian::U32;
use zerocopy::IntoBytes;

fuzz_target!(|data: &[u8]| {
    let mut h = small_nic();
    // The ports every input starts from: the same bring-up for every input, hidden from the
    // fuzzer.
    let (mut a, mut b, scratch) =
        unobserved(|| (h.open_port(0), h.open_port(1), h.alloc(16 << 10)));
    let mut input = Input::new(data);
    // The last well-formed WQE and the basic-block counter it was written at.
    let mut last_wqe: Option<(Vec<u8>, u32)> = None;
    let wqe_buffer = db::wqe_buffer(db::SQ_WQE_BASE, a.sq.id);
    for _ in 0..96 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        match ctl & 7 {
            0 => {
                // Raw WQE bytes, with their data pointers aimed at host memory if asked.
                let len = input.u8() as usize;
                let mut wqe = input.bytes(len).to_vec();
                if ctl & 0x80 != 0 {
                    for seg in wqe.chunks_mut(16).skip(2) {
                        if seg.len() == 16 {
                            let at = scratch + input.u16() as u64 % (16 << 10);
                            seg[8..16].copy_from_slice(&at.to_le_bytes());
                        }
                    }
                }
                a.sq.write_raw(&h, &wqe);
            }
            1 => {
                // A well-formed WQE: inline header and gathers of arbitrary sizes and places; or
                // a multi-packet one, each gather a frame.
                let multi_packet = ctl & 0x08 != 0;
                let n = if multi_packet { 0 } else { input.u8() as usize % 64 };
                let inline = input.bytes(n).to_vec();
                let most = if multi_packet { 24 } else { 4 };
                let gather: Vec<(u64, u32)> = (0..input.u8() % most)
                    .map(|_| {
                        let addr = match input.u8() % 4 {
                            0 => input.u64(),
                            1 => MOCK_IOVA - 8,
                            _ => scratch + input.u16() as u64 % (16 << 10),
                        };
                        (addr, input.u16() as u32)
                    })
                    .collect();
                let wqe = SendWqe {
                    inline_header: &inline,
                    gather: &gather,
                    cs_flags: input.u8() & 3,
                    signal: ctl & 0x10 != 0,
                    resume_table: (ctl & 0x20 != 0).then(|| input.u32()),
                };
                let mut buf = [0u8; 1024];
                let encoded = if multi_packet {
                    MultiPacketSendWqe {
                        frames: &gather,
                        cs_flags: wqe.cs_flags,
                        signal: wqe.signal,
                    }
                    .encode(a.sq.id, a.sq.pi as u16, &mut buf)
                } else {
                    wqe.encode(a.sq.id, a.sq.pi as u16, &mut buf)
                };
                if let Ok(n) = encoded {
                    let bytes = &buf[..n.next_multiple_of(WQEBB)];
                    last_wqe = Some((bytes.to_vec(), a.sq.pi));
                    a.sq.write_raw(&h, bytes);
                }
            }
            2 => {
                if ctl & 0x40 != 0 {
                    // WQE by MMIO: unseal, fill, seal, as a driver does — or garbage.
                    let seal_at = wqe_buffer + db::WQE_SEAL_OFFSET;
                    h.doorbell(0, seal_at, 0);
                    match (input.u8() % 3, &last_wqe) {
                        (0, Some((wqe, counter))) => {
                            let blocks = (wqe.len() / WQEBB) as u32;
                            for (i, w) in wqe.chunks_exact(4).take(48).enumerate() {
                                let word = u32::from_le_bytes(w.try_into().unwrap());
                                h.doorbell(0, wqe_buffer + 4 * i as u64, word);
                            }
                            h.doorbell(0, seal_at, db::wqe_seal(*counter, blocks));
                            // Torn: words rewritten after the seal.
                            for _ in 0..input.u8() % 3 {
                                let at = u64::from(input.u8() % 48) * 4;
                                h.doorbell(0, wqe_buffer + at, input.u32());
                            }
                        }
                        _ => {
                            for _ in 0..input.u8() % 49 {
                                let at = u64::from(input.u8() % 48) * 4;
                                h.doorbell(0, wqe_buffer + at, input.u32());
                            }
                            let seal = if input.u8() & 1 == 0 {
                                db::wqe_seal(
                                    a.sq.pi.wrapping_sub(u32::from(input.u8() % 4)),
                                    1 + u32::from(input.u8() % 3),
                                )
                            } else {
                                input.u32()
                            };
                            h.doorbell(0, seal_at, seal);
                        }
                    }
                }
                let value = if ctl & 0x80 != 0 {
                    input.u32()
                } else {
                    a.sq.pi & db::PI_MASK
                };
                h.doorbell(0, db::slot(db::SQ_BASE, a.sq.id), value);
            }
            3 => {
                let wqe = if ctl & 0x80 != 0 {
                    DataSeg {
                        byte_count: U32::new(input.u32()),
                        lkey: U32::new(input.u32() & 1),
                        addr: zerocopy::little_endian::U64::new(input.u64()),
                    }
                } else {
                    DataSeg::bus(
                        scratch + input.u16() as u64 % (16 << 10),
                        input.u16() as u32,
                    )
                };
                b.rq.post_raw(&h, &wqe);
                let value = if ctl & 0x40 != 0 {
                    input.u32()
                } else {
                    b.rq.pi & db::PI_MASK
                };
                h.doorbell(1, db::slot(db::RQ_BASE, b.rq.id), value);
            }
            4 => {
                let f = frame_between(&h, 0, 1, 60 + input.u8() as usize * 8, input.u8());
                a.send(&h, &f, input.u8() & 3);
            }
            5 => {
                // Recovery: an SQ or RQ from the error state back to ready.
                let (opcode, f, id) = if ctl & 0x80 != 0 {
                    (op::MODIFY_RQ, 1, b.rq.id)
                } else {
                    (op::MODIFY_SQ, 0, a.sq.id)
                };
                let m = ModifyQueueIn {
                    id: U32::new(id),
                    new_state: QueueState::Ready as u8,
                    rsvd: [0; 3],
                };
                if h.command(f, opcode, m.as_bytes()).ok() {
                    if f == 0 {
                        a.sq.pi = 0;
                    } else {
                        b.rq.pi = 0;
                    }
                }
            }
            6 => {
                while a.tx_cq.poll_cqe(&h).is_some() {}
                a.tx_cq.update_ci(&h, 0, db::CQ_BASE);
                for _ in 0..(1usize << b.rq.log_size) {
                    if b.receive(&h).is_none() {
                        break;
                    }
                }
            }
            _ => {
                h.run(input.u8() as usize % 32 + 1);
            }
        }
    }
    h.run(256);
    assert_nic_recovers(&mut h);
});
