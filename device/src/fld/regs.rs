//! FLD's control registers (BAR0, `docs/fld-interface.md` §2): geometry, the binding to the
//! NIC's queues and doorbell page written by the driver, per-queue credits, statistics and the
//! memory report. Reads of unlisted offsets return 0; writes to read-only registers, and
//! rebinding a queue with packets in flight, are ignored.

use super::tx::TxQueue;
use super::FldCore;
use fld_abi::fld::*;

/// The 32-bit register at `offset`.
pub(super) fn read(core: &FldCore, offset: u64) -> u32 {
    let g = &core.geo;
    if let Some(v) = g.register(offset) {
        return v;
    }
    let stat_end = reg::STATS_BASE + 8 * STAT_COUNT as u64;
    let mem_end = reg::MEMORY_BASE + 8 * MEMORY_ITEMS as u64;
    // 64-bit values as LO/HI pairs.
    let half = |v: u64, o: u64| {
        if o.is_multiple_of(8) {
            v as u32
        } else {
            (v >> 32) as u32
        }
    };
    match offset {
        reg::VERSION => FLD_VERSION,
        reg::STATUS => STATUS_READY,
        reg::NIC_DOORBELL_LO => core.nic_doorbell as u32,
        reg::NIC_DOORBELL_HI => (core.nic_doorbell >> 32) as u32,
        reg::TX_CQN => core.tx_cqn,
        reg::RX_CQN => core.rx_cqn,
        reg::RX_RQN => core.rx.rqn,
        reg::RX_LOG_STRIDE => core.rx.log_stride as u32,
        reg::RX_LOG_STRIDES => core.rx.log_strides as u32,
        reg::RX_LOG_WQES => core.rx.log_wqes as u32,
        reg::RX_ENABLE => core.rx.enabled as u32,
        reg::TX_SIGNAL_EVERY => core.tx.signal_every,
        o if (reg::STATS_BASE..stat_end).contains(&o) => {
            half(core.stats.0[((o - reg::STATS_BASE) / 8) as usize], o)
        }
        o if (reg::MEMORY_BASE..mem_end).contains(&o) => half(
            core.memory_report()[((o - reg::MEMORY_BASE) / 8) as usize],
            o,
        ),
        o if o >= reg::TXQ_BASE && ((o - reg::TXQ_BASE) / 16) < g.tx_queues as u64 => {
            let qi = ((o - reg::TXQ_BASE) / 16) as usize;
            let q = &core.tx.queues[qi];
            match o % 16 {
                0 => {
                    q.sqn
                        | if q.enabled { TXQ_ENABLE } else { 0 }
                        | if q.rdma { TXQ_RDMA } else { 0 }
                        | if q.error { TXQ_ERROR } else { 0 }
                }
                4 => core.tx.credits(g, qi as u16).packets,
                8 => core.tx.credits(g, qi as u16).bytes,
                _ => q.pi.wrapping_sub(q.ci),
            }
        }
        _ => 0,
    }
}

/// A 32-bit write of `v` to the register at `offset`.
pub(super) fn write(core: &mut FldCore, offset: u64, v: u32) {
    let rx_off = !core.rx.enabled;
    match offset {
        reg::RESET if v == RESET_MAGIC => core.reset(),
        reg::NIC_DOORBELL_LO => core.nic_doorbell = (core.nic_doorbell & !0xffff_ffff) | v as u64,
        reg::NIC_DOORBELL_HI => {
            core.nic_doorbell = (core.nic_doorbell & 0xffff_ffff) | (v as u64) << 32
        }
        reg::TX_CQN => core.tx_cqn = v,
        reg::RX_CQN => core.rx_cqn = v,
        reg::TX_SIGNAL_EVERY => core.tx.signal_every = v.clamp(1, 1 << core.geo.log_tx_ring),
        // The receive layout is fixed while receive is on.
        reg::RX_RQN if rx_off => core.rx.rqn = v,
        reg::RX_LOG_STRIDE if rx_off => core.rx.log_stride = v.min(16) as u8,
        reg::RX_LOG_STRIDES if rx_off => core.rx.log_strides = v.min(16) as u8,
        reg::RX_LOG_WQES if rx_off => core.rx.log_wqes = v.min(16) as u8,
        reg::RX_ENABLE => {
            let window = core.geo.tx_cq_base() - core.geo.rx_buffer_base();
            core.rx.enable(v & 1 != 0, window);
        }
        o if o >= reg::TXQ_BASE
            && ((o - reg::TXQ_BASE) / 16) < core.geo.tx_queues as u64
            && o % 16 == 0 =>
        {
            let qi = ((o - reg::TXQ_BASE) / 16) as usize;
            let q = &mut core.tx.queues[qi];
            // The control plane reports an error FLD did not see itself (the NIC's event for a
            // queue pair with nothing outstanding): the queue refuses sends from now on.
            if v & TXQ_ERROR != 0 {
                if q.enabled || q.error {
                    q.enabled = false;
                    q.error = true;
                }
                return;
            }
            // A queue with packets in flight keeps its binding.
            if q.pi == q.ci {
                if q.rdma {
                    core.tx.qp_queues.remove(&(q.sqn as u16));
                }
                // A new binding is a new NIC queue whose ring starts at 0.
                *q = TxQueue::bound(v & TXQ_NUMBER, v & TXQ_ENABLE != 0, v & TXQ_RDMA != 0);
                if q.rdma && q.enabled {
                    core.tx.qp_queues.insert(q.sqn as u16, qi as u16);
                }
            }
        }
        _ => {}
    }
}
