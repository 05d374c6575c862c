//! uRDMA's decision module (Faster Offloads by Unloading them – The RDMA Case, §3.2): for each
//! RDMA WRITE, at the initiator, whether it takes the offload path (the RNICs) or the unload
//! path (`unload`: a WRITE WITH IMMEDIATE into the target's staging buffer, placed by the
//! target's CPU). It sits on the critical path, so a decision is at most a counter update and
//! a compare.
//!
//! The policies:
//! * **hint-based**: the application marks the WRITEs that stay offloaded (say, those to its
//!   top-K heavy-hitter regions, whose translations the target RNIC's cache keeps); the rest
//!   are unloaded;
//! * **frequency-based**: the monitor counts WRITEs per remote page, assuming 4 KiB pages (the
//!   initiator cannot know the target's page size), and small WRITEs to a page whose share of
//!   all WRITEs is under a threshold are unloaded. The threshold is chosen off the critical
//!   path from the counted distribution ([`Decider::keep_top`]).
//!
//! The counters are a direct-mapped table of 2^20 entries by page number (4 MiB): exact for a
//! work area up to 4 GiB, the paper's largest; beyond it pages share counters, which only
//! makes rare pages look a little more frequent.
//!
//! Left out: sampling or decaying the counters over time (the paper sketches only counting).

/// The page size the initiator assumes for the target's memory (§3.2).
pub const PAGE_SHIFT: u32 = 12;
/// Counters in the monitor's table.
const COUNTERS: usize = 1 << 20;

/// How WRITEs are routed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// Every WRITE offloaded (plain RDMA).
    Offload,
    /// Every small WRITE unloaded.
    Unload,
    /// Offloaded when the application hints so, unloaded otherwise.
    Hint,
    /// Unloaded when small and its page's share of the WRITEs counted is under `threshold`.
    Frequency { threshold: f64 },
}

/// The decision module of one initiator.
pub struct Decider {
    pub policy: Policy,
    /// WRITEs larger than this always stay offloaded (the unload path is for small ones; its
    /// staging slot bounds it).
    pub max_unload_bytes: usize,
    counts: Vec<u32>,
    total: u64,
}

impl Decider {
    pub fn new(policy: Policy, max_unload_bytes: usize) -> Self {
        let counts = match policy {
            Policy::Frequency { .. } => vec![0; COUNTERS],
            _ => Vec::new(),
        };
        Decider {
            policy,
            max_unload_bytes,
            counts,
            total: 0,
        }
    }

    /// Whether a WRITE of `len` bytes to `remote_addr` is unloaded; `keep_offloaded` is the
    /// application's hint (used by [`Policy::Hint`]).
    #[inline]
    pub fn unload(&mut self, remote_addr: u64, len: usize, keep_offloaded: bool) -> bool {
        let small = len <= self.max_unload_bytes;
        match self.policy {
            Policy::Offload => false,
            Policy::Unload => small,
            Policy::Hint => small && !keep_offloaded,
            Policy::Frequency { threshold } => {
                let i = ((remote_addr >> PAGE_SHIFT) as usize) & (COUNTERS - 1);
                let c = self.counts[i].saturating_add(1);
                self.counts[i] = c;
                self.total += 1;
                small && (c as f64) < threshold * self.total as f64
            }
        }
    }

    /// WRITEs counted so far to the page of `remote_addr`.
    pub fn count(&self, remote_addr: u64) -> u32 {
        let i = ((remote_addr >> PAGE_SHIFT) as usize) & (COUNTERS - 1);
        self.counts.get(i).copied().unwrap_or(0)
    }

    /// Off the critical path: sets the frequency threshold so the `k` most written pages
    /// counted so far stay offloaded — the share of the k-th most frequent page. No effect on
    /// other policies, or before anything was counted.
    pub fn keep_top(&mut self, k: usize) {
        let Policy::Frequency { threshold } = &mut self.policy else {
            return;
        };
        if self.total == 0 || k == 0 {
            return;
        }
        let mut nonzero: Vec<u32> = self.counts.iter().copied().filter(|&c| c > 0).collect();
        if nonzero.len() <= k {
            *threshold = 0.0;
            return;
        }
        let (_, kth, _) = nonzero.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
        *threshold = f64::from(*kth) / self.total as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 1 << PAGE_SHIFT;

    #[test]
    fn fixed_policies_and_hints() {
        let mut d = Decider::new(Policy::Offload, 64);
        assert!(!d.unload(0, 16, false));
        let mut d = Decider::new(Policy::Unload, 64);
        assert!(
            d.unload(0, 16, true) && !d.unload(0, 65, false),
            "small ones only"
        );
        let mut d = Decider::new(Policy::Hint, 64);
        assert!(!d.unload(0, 16, true) && d.unload(0, 16, false));
    }

    /// A heavy page written 90 times in 100 and ten pages once each: with the threshold at
    /// 5 %, the heavy page stays offloaded and the rare ones are unloaded — except a rare
    /// page's very first WRITE while the total is still small.
    #[test]
    fn frequency_unloads_rare_pages_and_keeps_heavy_ones() {
        let mut d = Decider::new(Policy::Frequency { threshold: 0.05 }, 64);
        let heavy = 7 * PAGE + 100;
        let mut heavy_unloaded = 0;
        let mut rare_unloaded = 0;
        for round in 0..10u64 {
            for _ in 0..9 {
                heavy_unloaded += u32::from(d.unload(heavy, 16, false));
            }
            rare_unloaded += u32::from(d.unload((1000 + round) * PAGE, 16, false));
        }
        assert_eq!(d.count(heavy), 90);
        assert_eq!(heavy_unloaded, 0);
        // Rare pages: 1 in 10, 1 in 20, 1 in 30, ...: from the third on each is under 5 %.
        assert_eq!(rare_unloaded, 8);
        // Large WRITEs stay offloaded whatever their page.
        assert!(!d.unload(5000 * PAGE, 65, false));
    }

    /// The threshold chosen from the distribution keeps exactly the top-k pages offloaded.
    #[test]
    fn keep_top_sets_the_threshold_from_the_distribution() {
        let mut d = Decider::new(Policy::Frequency { threshold: 1.0 }, 64);
        // Page p is written 10 - p times (p = 0 .. 9): 55 WRITEs.
        for p in 0..10u64 {
            for _ in 0..10 - p {
                d.unload(p * PAGE, 8, false);
            }
        }
        d.keep_top(3);
        assert_eq!(
            d.policy,
            Policy::Frequency {
                threshold: 8.0 / 55.0
            }
        );
        // Page 2 (8 WRITEs, now 9) stays offloaded; page 3 (7, now 8) is unloaded.
        assert!(!d.unload(2 * PAGE, 8, false));
        assert!(d.unload(3 * PAGE, 8, false));
        // Same page, other offsets and the 4 KiB assumption: page 2's last byte counts as page 2.
        assert!(!d.unload(3 * PAGE - 1, 8, false));
        // Asking for more pages than were written keeps everything offloaded.
        d.keep_top(100);
        assert!(!d.unload(9 * PAGE, 8, false));
    }
}
