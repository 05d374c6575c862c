//! Several accelerators behind one FLD, as an FPGA image instantiates them: the rx stream is
//! demultiplexed by the context ID the NIC's `accelerate` rule set (each accelerator owns the
//! context IDs the control plane gives its rules), and the accelerators share the tx stream and
//! its credits. With the next-table ID of paper §5.3 a packet can then visit one accelerator,
//! NIC tables, and another accelerator: IP defragmentation before IoT authentication, so a
//! fragmented request is authenticated whole (the fragment policy of `docs/fld-interface.md`).
//!
//! Left out: arbitration weights between the accelerators' tx streams (each sends as its own
//! credits allow, in the order they are polled).

use std::ops::RangeInclusive;

use super::{Accelerator, RxMeta, TxStream};

/// One accelerator and the context IDs routed to it.
struct Member {
    contexts: RangeInclusive<u16>,
    accel: Box<dyn Accelerator>,
}

/// The demultiplexer. Counter names of the members must differ (they are reported side by side).
pub struct AcceleratorMux {
    name: &'static str,
    members: Vec<Member>,
    /// Packets whose context ID no member owns (dropped).
    unrouted: u64,
}

impl AcceleratorMux {
    pub fn new(name: &'static str) -> Self {
        AcceleratorMux {
            name,
            members: Vec::new(),
            unrouted: 0,
        }
    }

    /// Routes `contexts` to `accel`; the first member whose range holds a context gets it.
    pub fn with(mut self, contexts: RangeInclusive<u16>, accel: Box<dyn Accelerator>) -> Self {
        self.members.push(Member { contexts, accel });
        self
    }
}

impl Accelerator for AcceleratorMux {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        match self
            .members
            .iter_mut()
            .find(|m| m.contexts.contains(&meta.context))
        {
            Some(m) => m.accel.receive(meta, data, tx),
            None => {
                self.unrouted += 1;
                true
            }
        }
    }

    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        self.members.iter_mut().map(|m| m.accel.poll(tx)).sum()
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.members
            .iter()
            .flat_map(|m| m.accel.counters())
            .chain(std::iter::once(("unrouted_context", self.unrouted)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accel::defrag::Config;
    use crate::accel::defrag_accel::DefragAccel;
    use crate::accel::iot::KeyTable;
    use crate::accel::iot_accel::IotAccel;
    use crate::accel::{Credits, Echo, TxMeta, TxRefused};

    struct Sink(Vec<(TxMeta, Vec<u8>)>);
    impl TxStream for Sink {
        fn credits(&self, _q: u16) -> Credits {
            Credits {
                packets: 64,
                bytes: 1 << 20,
            }
        }
        fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
            self.0.push((*meta, data.to_vec()));
            Ok(())
        }
    }

    #[test]
    fn packets_go_to_the_member_owning_their_context() {
        let mut mux = AcceleratorMux::new("two echoes")
            .with(1..=1, Box::new(Echo::new(3, 4)))
            .with(2..=9, Box::new(Echo::new(5, 4)));
        let mut tx = Sink(Vec::new());
        let frame: Vec<u8> = (0..64u8).collect();
        for context in [1, 7, 10] {
            let meta = RxMeta {
                context,
                ..Default::default()
            };
            assert!(mux.receive(&meta, &frame, &mut tx));
        }
        let queues: Vec<u16> = tx.0.iter().map(|(m, _)| m.queue).collect();
        assert_eq!(queues, [3, 5]);
        assert_eq!(
            mux.counters(),
            [("echoed", 1), ("echoed", 1), ("unrouted_context", 1)]
        );
    }

    #[test]
    fn defrag_and_iot_counter_names_are_distinct() {
        let (iot, _) = IotAccel::new(KeyTable::new(4), 0);
        let mux = AcceleratorMux::new("defrag+iot")
            .with(0..=0, Box::new(DefragAccel::new(Config::default(), 0)))
            .with(1..=u16::MAX, Box::new(iot));
        let names: Vec<&str> = mux.counters().into_iter().map(|(n, _)| n).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }
}
