//! The IoT token authentication offload (paper §7): a DDoS filter in front of an IoT server.
//! CoAP messages arrive over UDP with the tenant's context ID (set by the NIC's `accelerate`
//! rule); [`super::iot::IotFilter`] verifies the JSON Web Token in each message with that tenant's
//! key; valid messages continue into the NIC pipeline (at the rule's resume table), invalid ones
//! are dropped and counted per reason. Time for `exp`/`nbf` is a clock the owner sets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::iot::{IotFilter, KeyTable, Reason, Verdict};
use super::{Accelerator, RxMeta, TxHold, TxStream};
pub use fld_abi::wire::coap::COAP_PORT;
use fld_abi::wire::{udp_offsets, UdpPacket};

/// What the owner keeps to steer the accelerator after handing it to FLD. Its counters are read
/// through [`Accelerator::counters`] (`Fld::accelerator_counters`).
#[derive(Clone, Default)]
pub struct IotHandle {
    /// Seconds since the epoch used for `exp`/`nbf`.
    pub now_s: Arc<AtomicU64>,
}

/// The accelerator model.
pub struct IotAccel {
    filter: IotFilter,
    tx_queue: u16,
    handle: IotHandle,
    /// Authenticated messages waiting for tx credits.
    held: TxHold,
    /// Frames that were not UDP to the CoAP port (dropped).
    not_coap_frames: u64,
}

impl IotAccel {
    pub fn new(keys: KeyTable, tx_queue: u16) -> (Self, IotHandle) {
        let handle = IotHandle::default();
        (
            IotAccel {
                filter: IotFilter::new(keys),
                tx_queue,
                handle: handle.clone(),
                held: TxHold::new(256),
                not_coap_frames: 0,
            },
            handle,
        )
    }

    fn flush(&mut self, tx: &mut dyn TxStream) -> usize {
        let queue = self.tx_queue;
        self.held.flush(tx, |_| queue, |_| {})
    }
}

impl Accelerator for IotAccel {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        let coap = udp_offsets(data)
            .filter(|o| UdpPacket::new_unchecked(&data[o.udp..]).dst_port() == COAP_PORT)
            .and_then(|o| data.get(o.payload_range()));
        let Some(coap) = coap else {
            self.not_coap_frames += 1;
            return true;
        };
        let now = self.handle.now_s.load(Ordering::Relaxed);
        let verdict = self.filter.check(meta.context, coap, now);
        if verdict == Verdict::Pass {
            if !self
                .held
                .push_with(meta.resume_table, |f| f.extend_from_slice(data))
            {
                return false;
            }
            self.flush(tx);
        }
        true
    }

    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        self.flush(tx)
    }

    fn name(&self) -> &'static str {
        "iot-auth"
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.filter.stats();
        std::iter::once(("passed", s.passed))
            .chain(Reason::ALL.iter().map(|&r| (r.name(), s.dropped_for(r))))
            .chain(std::iter::once(("not_coap_frames", self.not_coap_frames)))
            .collect()
    }
}
