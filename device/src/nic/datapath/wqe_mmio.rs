//! WQE by MMIO (`docs/nic-interface.md` §4.1; a ConnectX's BlueFlame, which FlexDriver uses too,
//! §6 "PCIe Optimizations"): a driver posting one small WQE also stores it, in 64-byte chunks,
//! into its send queue's buffer in the doorbell BAR and seals it with the WQE's basic-block
//! counter, before the doorbell. The engine, about to fetch the WQE at that counter, takes it
//! from the buffer instead: no DMA read, no PCIe round trip before the packet leaves.
//!
//! The buffer is shared memory the host may be rewriting while the engine reads it, so the
//! engine takes it only when the seal names this very WQE before and after the copy (the host
//! clears the seal before it writes new contents) and the copied control segment agrees with
//! the seal; anything else — a stale seal, a torn copy, a WQE larger than the buffer — falls
//! back to the DMA fetch from the ring, which always holds the WQE too. A wrong WQE is never
//! taken: the engine uses either the sealed buffer or the ring.

use fld_abi::nic::{db, CtrlSeg, WQEBB};
use zerocopy::FromBytes;

use crate::nic::doorbell::DoorbellArea;

/// What the engine made of a send queue's WQE buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WqeBuffer {
    /// The WQE is in `out`: this many basic blocks.
    Taken(u32),
    /// The buffer does not hold this WQE (never written, or sealed for another one): fetch it.
    Absent,
    /// The seal named this WQE but the copy cannot be trusted (the host rewrote the buffer
    /// meanwhile, or the control segment disagrees with the seal): fetch it.
    Rejected,
}

/// How often the engine took a WQE from a buffer and how often a sealed buffer was refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WqeMmioCounters {
    pub taken: u64,
    pub rejected: u64,
}

/// Reads the WQE that starts at basic-block `counter` (with `pending` blocks posted) from the
/// buffer at `buffer` of `area` into `out` (at least [`db::WQE_BUFFER_BLOCKS`] blocks long).
pub(crate) fn take_wqe(
    area: &DoorbellArea,
    buffer: u64,
    counter: u32,
    pending: u32,
    out: &mut [u8],
) -> WqeBuffer {
    let seal_at = buffer + db::WQE_SEAL_OFFSET;
    let seal = area.load(seal_at);
    let Some((index, blocks)) = db::seal_wqe(seal) else {
        return WqeBuffer::Absent;
    };
    if index != counter & db::PI_MASK || blocks > pending {
        return WqeBuffer::Absent;
    }
    let len = blocks as usize * WQEBB;
    let Some(out) = out.get_mut(..len) else {
        return WqeBuffer::Rejected;
    };
    area.read_words(buffer, out);
    if area.load(seal_at) != seal {
        return WqeBuffer::Rejected;
    }
    let agrees = CtrlSeg::read_from_prefix(out).is_ok_and(|(ctrl, _)| {
        u32::from(ctrl.wqe_index.get()) == counter & db::PI_MASK && ctrl.wqebbs() == blocks
    });
    if agrees {
        WqeBuffer::Taken(blocks)
    } else {
        WqeBuffer::Rejected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fld_abi::nic::WQE_OP_SEND;
    use zerocopy::IntoBytes;

    const BUF: u64 = db::wqe_buffer(db::SQ_WQE_BASE, 5);

    /// A WQE of `blocks` blocks at `counter` whose bytes after the control segment are `fill`.
    fn wqe(counter: u32, blocks: u32, fill: u8) -> Vec<u8> {
        let mut w = vec![fill; blocks as usize * WQEBB];
        let mut ctrl = CtrlSeg {
            opcode: WQE_OP_SEND,
            ds_count: (blocks * 4) as u8,
            ..Default::default()
        };
        ctrl.wqe_index.set(counter as u16);
        w[..16].copy_from_slice(ctrl.as_bytes());
        w
    }

    /// The driver's side of the protocol: unseal, write the chunks, seal.
    fn post(area: &DoorbellArea, counter: u32, w: &[u8]) {
        area.store(BUF + db::WQE_SEAL_OFFSET, 0);
        area.write(BUF, w);
        let blocks = (w.len() / WQEBB) as u32;
        area.store(BUF + db::WQE_SEAL_OFFSET, db::wqe_seal(counter, blocks));
    }

    #[test]
    fn a_sealed_wqe_is_taken_and_anything_else_falls_back() {
        let area = DoorbellArea::default();
        let mut out = [0u8; 3 * WQEBB];
        assert_eq!(take_wqe(&area, BUF, 7, 1, &mut out), WqeBuffer::Absent);
        let w = wqe(7, 2, 0xab);
        post(&area, 7, &w);
        assert_eq!(take_wqe(&area, BUF, 7, 2, &mut out), WqeBuffer::Taken(2));
        assert_eq!(&out[..2 * WQEBB], &w[..]);
        // Another counter (a stale buffer), or fewer blocks posted than the WQE has.
        assert_eq!(take_wqe(&area, BUF, 8, 2, &mut out), WqeBuffer::Absent);
        assert_eq!(
            take_wqe(&area, BUF, 7 + 0x1_0000, 2, &mut out),
            WqeBuffer::Taken(2)
        );
        assert_eq!(take_wqe(&area, BUF, 7, 1, &mut out), WqeBuffer::Absent);
        // Unsealed while the host writes: not taken.
        area.store(BUF + db::WQE_SEAL_OFFSET, 0);
        assert_eq!(take_wqe(&area, BUF, 7, 2, &mut out), WqeBuffer::Absent);
        // A seal that disagrees with the control segment it covers (torn or forged).
        area.store(BUF + db::WQE_SEAL_OFFSET, db::wqe_seal(9, 2));
        assert_eq!(take_wqe(&area, BUF, 9, 2, &mut out), WqeBuffer::Rejected);
        area.store(BUF + db::WQE_SEAL_OFFSET, db::wqe_seal(7, 1));
        assert_eq!(take_wqe(&area, BUF, 7, 2, &mut out), WqeBuffer::Rejected);
        // A seal naming zero or more blocks than the buffer has is no seal.
        area.store(BUF + db::WQE_SEAL_OFFSET, db::WQE_SEAL_VALID | 7);
        assert_eq!(take_wqe(&area, BUF, 7, 2, &mut out), WqeBuffer::Absent);
    }

    /// A host rewriting the buffer while the engine copies it: every copy the engine takes is
    /// one whole WQE the host sealed, never a mix.
    #[test]
    fn a_buffer_rewritten_during_the_copy_is_never_taken_torn() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let area = Arc::new(DoorbellArea::default());
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (area, stop) = (area.clone(), stop.clone());
            // Each WQE at the next counter, as a driver posts them: bursts of posts back to back
            // (the engine's copies race them), then a pause (so some copies find the buffer
            // still, however loaded the machine is).
            std::thread::spawn(move || {
                let mut counter = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..16 {
                        counter = counter.wrapping_add(3);
                        post(&area, counter, &wqe(counter, 3, counter as u8));
                    }
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
            })
        };
        let mut out = [0u8; 3 * WQEBB];
        let (mut taken, mut tries) = (0, 0);
        while taken < 2000 && tries < 20_000_000 {
            tries += 1;
            let counter = area.load(BUF + db::WQE_SEAL_OFFSET) & db::PI_MASK;
            if take_wqe(&area, BUF, counter, 3, &mut out) == WqeBuffer::Taken(3) {
                taken += 1;
                assert!(
                    out[16..].iter().all(|b| *b == counter as u8),
                    "a torn WQE was taken"
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert!(taken > 0);
    }
}
