//! Time as the device sees it. The model never reads a host clock: the NIC's timers (local ACK
//! timeout, RNR waits), meters and CQE timestamps read the [`Clock`] its runner handed the card
//! ([`crate::card::Card::set_clock`]). A card nobody gave a clock has a [`ManualClock`] standing
//! at 0 — deterministic, as tests and fuzz targets want; real-time runners give it a
//! [`WallClock`] (feature `wall-clock`), the virtual-time runner its virtual time.

use std::sync::atomic::{AtomicU64, Ordering};

/// Nanoseconds since an origin the runner chose.
pub trait Clock: Send + Sync {
    fn now_ns(&self) -> u64;
}

/// A clock that stands where it was last set.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(ns: u64) -> Self {
        ManualClock(AtomicU64::new(ns))
    }
    pub fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::Relaxed);
    }
    pub fn advance(&self, ns: u64) {
        self.0.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Real time for runners that run the card as fast as the host goes: monotonic, counted from
/// the Unix time at which it was made (so capture timestamps are dates).
#[cfg(feature = "wall-clock")]
#[derive(Debug)]
pub struct WallClock {
    origin: std::time::Instant,
    unix_ns_at_origin: u64,
}

#[cfg(feature = "wall-clock")]
impl Default for WallClock {
    fn default() -> Self {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        WallClock {
            origin: std::time::Instant::now(),
            unix_ns_at_origin: unix.as_nanos() as u64,
        }
    }
}

#[cfg(feature = "wall-clock")]
impl Clock for WallClock {
    fn now_ns(&self) -> u64 {
        self.unix_ns_at_origin + self.origin.elapsed().as_nanos() as u64
    }
}
