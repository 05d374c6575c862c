//! The RTL bridge against a module that drives anything (a user's Verilog is as untrusted as a
//! guest): arbitrary `rx_tready`, TVALID, TLAST, TKEEP, TUSER (every operation code), credit
//! queues and data, modules that never stop streaming, with arbitrary packets and FLD-R
//! metadata delivered and credits changing between steps. Every breach is a counter; no panic,
//! no step beyond its cycle budget, and what reaches FLD stays within its credits and lengths.
#![no_main]

use fld_device::accel::{Accelerator, Credits, RdmaRx, RxMeta, TxMeta, TxRefused, TxStream};
use fld_fuzz::Input;
use fld_rtl::model::ScriptedModel;
use fld_rtl::{RtlAccelerator, RtlConfig};
use libfuzzer_sys::fuzz_target;

struct Sink {
    packets: [u32; 2],
    sent: u64,
}

impl TxStream for Sink {
    fn credits(&self, queue: u16) -> Credits {
        let p = self.packets.get(queue as usize).copied().unwrap_or(0);
        Credits {
            packets: p,
            bytes: p * 9600,
        }
    }
    fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
        let Some(p) = self.packets.get_mut(meta.queue as usize) else {
            return Err(TxRefused::UnknownQueue);
        };
        if data.is_empty() || data.len() > 9600 {
            return Err(TxRefused::BadLength);
        }
        if *p == 0 {
            return Err(TxRefused::NoCredit);
        }
        *p -= 1;
        self.sent += 1;
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let script_len = usize::from(input.u16() % 1024);
    let script = input.bytes(script_len);
    let cfg = RtlConfig {
        max_cycles_per_step: 1500,
        max_packet: 9600,
        rx_queue_packets: 4,
        tx_stall_every: u32::from(input.u8() % 4),
        ..Default::default()
    };
    let budget = u64::from(cfg.max_cycles_per_step);
    let mut a = RtlAccelerator::with_model(Box::new(ScriptedModel::new(script)), "fuzz", cfg);
    let mut tx = Sink {
        packets: [0, 0],
        sent: 0,
    };
    let mut granted = 0u64;
    let mut rx_beats = 0u64;
    let mut polls = 0u64;
    let payload = [0x5au8; 9600];
    for _ in 0..48 {
        if input.is_empty() {
            break;
        }
        match input.u8() % 3 {
            0 => {
                let len = usize::from(input.u16()) % 9601;
                let flags = input.u8();
                let meta = RxMeta {
                    queue: u16::from(flags & 3),
                    len: input.u32(),
                    resume_table: (flags & 4 != 0).then_some(flags),
                    rdma: (flags & 8 != 0).then_some(RdmaRx {
                        first: flags & 16 != 0,
                        last: flags & 32 != 0,
                        imm: (flags & 64 != 0).then_some(7),
                    }),
                    ..Default::default()
                };
                // Delivering can clock the module to make room: that is a step of its own.
                polls += 1;
                if a.receive(&meta, &payload[..len], &mut tx) {
                    rx_beats += len.div_ceil(64) as u64;
                }
            }
            1 => {
                let q = usize::from(input.u8() % 2);
                let n = u32::from(input.u8() % 4);
                tx.packets[q] += n;
                granted += u64::from(n);
            }
            _ => {
                a.poll(&mut tx);
                polls += 1;
            }
        }
    }
    let c = a.counters_now();
    assert!(c.cycles <= polls * budget + rx_beats + 8, "{c:?}");
    assert_eq!(c.tx_packets, tx.sent);
    assert!(tx.sent <= granted);
    assert!(c.rx_beats <= rx_beats);
});
