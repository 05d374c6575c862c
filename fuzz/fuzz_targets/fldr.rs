//! FLD-R (paper §5.3, §6): an FLD-R queue pair bound to FLD queue 1, connected to a client QP on
//! the card's second NIC function, under an input that mixes the client's SENDs of any size and
//! immediate (packets of interleaving messages through the shared multi-packet RQ), the
//! accelerator's sends of any RDMA operation and length (WRITEs to keys that do not exist, so
//! the NIC fails the queue pair), control-register writes to the queue (rebinding, TXQ_RDMA,
//! TXQ_ERROR), forged CQEs into FLD's CQ windows, and time passing on the NIC's clock so
//! retries run out. Everything is a refusal, a counted drop, an error completion or a NAK; no
//! device access leaves mapped memory; and afterwards FLD reset and bound again echoes
//! verified traffic.
#![no_main]

use fld_abi::fld::{reg, BAR_NIC, TXQ_ENABLE, TXQ_ERROR, TXQ_RDMA};
use fld_abi::nic::{RdmaWqe, WqeData, WQE_OP_SEND, WQE_OP_SEND_IMM};
use fld_device::accel::rdma::RdmaEcho;
use fld_device::accel::{RdmaOp, TxMeta};
use fld_fuzz::{assert_fld_recovers, prepared_card, rdma_op, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // FLD bound with one queue, an FLD-R queue pair on it and its client: kept, every input
    // starts from there.
    let (mut kept, (_binding, mut client, qpn)) = prepared_card(|h| {
        let binding = h.bind_fld(1);
        let (client, qpn) = h.fldr_with_client(&binding, 1, 256 << 10);
        (binding, client, qpn)
    });
    let h = &mut kept.host;
    h.nic.set_clock(Some(0));
    let fld = h.fld.clone().expect("FLD");
    fld.set_accelerator(Box::new(RdmaEcho::new(8192, 8)));
    let bar2 = h.bar(fld.id(), BAR_NIC);
    let geo = fld.geometry();
    let mut input = Input::new(data);
    let mut now = 0u64;
    let mut posted = 0u32;
    for _ in 0..64 {
        if input.is_empty() {
            break;
        }
        let ctl = input.u8();
        match ctl % 7 {
            0 | 1 => {
                // The client sends a message of up to 12 KiB, with or without an immediate.
                let len = (input.u16() % 12_289) as u32;
                if posted < 48 {
                    let r = client.sge(128 << 10, 12 << 10);
                    client.post_recv(h, &[r]);
                    posted += 1;
                }
                let s = [client.sge(0, len)];
                let imm = ctl & 0x10 != 0;
                client.post_send(
                    h,
                    &RdmaWqe {
                        opcode: if imm { WQE_OP_SEND_IMM } else { WQE_OP_SEND },
                        signal: true,
                        solicited: ctl & 0x20 != 0,
                        fence: false,
                        imm: input.u32(),
                        remote: None,
                        atomic: None,
                        data: WqeData::Gather(&s),
                    },
                );
            }
            2 => {
                // A WRITE with immediate may also aim at the client's own region with its
                // real key (valid remote access, so the transport goes further).
                let op = match rdma_op(&mut input) {
                    Some(RdmaOp::WriteImm {
                        remote_addr, imm, ..
                    }) if ctl & 0x40 != 0 => Some(RdmaOp::WriteImm {
                        remote_addr: client.buf + remote_addr % 0x1_0000,
                        rkey: client.key,
                        imm,
                    }),
                    other => other,
                };
                let meta = TxMeta {
                    queue: u16::from(input.u8() % 3),
                    rdma: op,
                    ..Default::default()
                };
                let len = input.u16() as usize % 17_000;
                let payload = input.bytes(len).to_vec();
                fld.with_tx_stream(|t| {
                    let _ = t.send(&meta, &payload);
                });
            }
            3 => {
                // The queue's control word: rebind, unbind, mark failed, or a stray QPN.
                let v = match input.u8() % 4 {
                    0 => qpn | TXQ_ENABLE | TXQ_RDMA,
                    1 => 0,
                    2 => TXQ_ERROR,
                    _ => input.u32(),
                };
                h.set_fld_reg(reg::TXQ_BASE + 16 * u64::from(input.u8() % 4), v);
            }
            4 => {
                // A forged CQE in either CQ window.
                let base = if ctl & 0x10 != 0 {
                    geo.tx_cq_base()
                } else {
                    geo.rx_cq_base()
                };
                let slot = u64::from(input.u8()) * 64;
                let mut cqe = input.bytes(64).to_vec();
                cqe.resize(64, 0);
                h.fabric.mmio_write(bar2 + base + slot, &cqe);
            }
            5 => {
                now += u64::from(input.u16()) * 100_000;
                h.nic.set_clock(Some(now));
            }
            _ => {
                h.run(input.u8() as usize % 64 + 1);
                while client.cq.poll_cqe(h).is_some() {}
                client.cq.update_ci(h, 1, fld_abi::nic::db::CQ_BASE);
            }
        }
    }
    h.run(2048);
    assert_fld_recovers(h);
});
