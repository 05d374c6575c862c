//! Whatever a module drives, the bridge answers with counted breaches, never a panic or a hang:
//! a scripted module (any `rx_tready`, TVALID, TLAST, TKEEP, TUSER, credit queue, and modules
//! that never stop streaming) against random packets and credits. No Verilator needed.

use fld_device::accel::{Accelerator, Credits, RxMeta, TxMeta, TxRefused, TxStream};
use fld_rtl::model::ScriptedModel;
use fld_rtl::{RtlAccelerator, RtlConfig};
use proptest::prelude::*;

/// Credits per queue (queues 0-1 exist, 2-3 do not); records what it took.
struct Sink {
    packets: [u32; 2],
    sent: Vec<(TxMeta, usize)>,
}

impl TxStream for Sink {
    fn credits(&self, queue: u16) -> Credits {
        let p = self.packets.get(queue as usize).copied().unwrap_or(0);
        Credits {
            packets: p,
            bytes: p * 16384,
        }
    }
    fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
        let Some(p) = self.packets.get_mut(meta.queue as usize) else {
            return Err(TxRefused::UnknownQueue);
        };
        if data.is_empty() || data.len() > 16384 {
            return Err(TxRefused::BadLength);
        }
        if *p == 0 {
            return Err(TxRefused::NoCredit);
        }
        *p -= 1;
        self.sent.push((*meta, data.len()));
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn any_module_behaviour_is_counted_and_bounded(
        script in proptest::collection::vec(any::<u8>(), 0..600),
        packets in proptest::collection::vec((1usize..3000, any::<bool>()), 0..12),
        credits in (0u32..6, 0u32..6),
        steps in 1usize..6,
    ) {
        let cfg = RtlConfig {
            max_cycles_per_step: 2000,
            max_packet: 16384,
            tx_stall_every: 3,
            ..Default::default()
        };
        let budget = u64::from(cfg.max_cycles_per_step);
        let mut a = RtlAccelerator::with_model(Box::new(ScriptedModel::new(&script)), "scripted", cfg);
        let mut tx = Sink { packets: [credits.0, credits.1], sent: vec![] };
        let mut delivered = 0u64;
        let mut polls = 0u64;
        for (len, rdma) in &packets {
            let data = vec![0xa5u8; *len];
            let meta = RxMeta {
                len: *len as u32,
                rdma: rdma.then_some(fld_device::accel::RdmaRx { first: true, last: true, imm: Some(7) }),
                ..Default::default()
            };
            prop_assert!(a.receive(&meta, &data, &mut tx));
            delivered += 1;
        }
        for _ in 0..steps {
            a.poll(&mut tx);
            polls += 1;
        }
        // Enough steps to stream every packet in (each step brings at least a beat).
        let beats: u64 = packets.iter().map(|(l, _)| l.div_ceil(64) as u64).sum();
        for _ in 0..beats * 70 {
            if a.counters_now().rx_packets == delivered {
                break;
            }
            a.poll(&mut tx);
            polls += 1;
        }
        let c = a.counters_now();
        prop_assert_eq!(c.rx_packets, delivered, "every packet streamed in");
        // Bounded: no step ran past its budget (plus the cycles its packets' beats needed).
        prop_assert!(c.cycles <= polls * budget + 8, "{} cycles in {} polls", c.cycles, polls);
        // What FLD took is what the bridge counts as sent, within credits and lengths.
        prop_assert_eq!(c.tx_packets, tx.sent.len() as u64);
        prop_assert!(tx.sent.len() as u32 <= credits.0 + credits.1);
        prop_assert!(tx.sent.iter().all(|(m, len)| m.queue < 2 && (1..=16384).contains(len)));
        let names: Vec<(&str, u64)> = a.counters();
        prop_assert_eq!(names.len(), 15);
        // The working cycles are part of the cycles run.
        prop_assert!(c.busy_cycles <= c.cycles, "{} of {}", c.busy_cycles, c.cycles);
    }
}

/// A module that streams one endless packet: each step ends at its budget, the packet is
/// counted once as oversize, nothing reaches FLD.
#[test]
fn a_module_that_never_stops_costs_one_budget_per_step() {
    let cfg = RtlConfig {
        max_cycles_per_step: 1000,
        ..Default::default()
    };
    // Repeat forever: TVALID, no TLAST, full TKEEP.
    let mut a = RtlAccelerator::with_model(Box::new(ScriptedModel::new(&[1, 0x01, 0])), "s", cfg);
    let mut tx = Sink {
        packets: [100, 100],
        sent: vec![],
    };
    for _ in 0..5 {
        a.poll(&mut tx);
    }
    let c = a.counters_now();
    assert_eq!(c.cycles, 5000);
    assert_eq!(c.step_budget_exhausted, 5);
    assert_eq!(c.tx_oversize, 1);
    assert!(tx.sent.is_empty());
}
