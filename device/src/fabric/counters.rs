//! Per-function TLP accounting. "Up" is traffic the function sends into the switch (its requests
//! and the completions it returns); "down" is what the switch delivers to it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A plain snapshot of counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TlpStats {
    pub up_tlps: u64,
    pub up_header_bytes: u64,
    pub up_payload_bytes: u64,
    pub down_tlps: u64,
    pub down_header_bytes: u64,
    pub down_payload_bytes: u64,
}

impl TlpStats {
    pub(crate) fn up(&mut self, tlps: u64, hdr: u64, payload: u64) {
        self.up_tlps += tlps;
        self.up_header_bytes += hdr;
        self.up_payload_bytes += payload;
    }
    pub(crate) fn down(&mut self, tlps: u64, hdr: u64, payload: u64) {
        self.down_tlps += tlps;
        self.down_header_bytes += hdr;
        self.down_payload_bytes += payload;
    }
    /// Bytes on the link in both directions, headers included.
    pub fn total_bytes(&self) -> u64 {
        self.up_header_bytes
            + self.up_payload_bytes
            + self.down_header_bytes
            + self.down_payload_bytes
    }
    pub fn total_tlps(&self) -> u64 {
        self.up_tlps + self.down_tlps
    }
    /// Counter-wise difference `self - earlier`.
    pub fn since(&self, earlier: &TlpStats) -> TlpStats {
        TlpStats {
            up_tlps: self.up_tlps - earlier.up_tlps,
            up_header_bytes: self.up_header_bytes - earlier.up_header_bytes,
            up_payload_bytes: self.up_payload_bytes - earlier.up_payload_bytes,
            down_tlps: self.down_tlps - earlier.down_tlps,
            down_header_bytes: self.down_header_bytes - earlier.down_header_bytes,
            down_payload_bytes: self.down_payload_bytes - earlier.down_payload_bytes,
        }
    }
}

/// Shared atomic counters of one function.
#[derive(Default, Debug)]
pub struct TlpCounters {
    c: [AtomicU64; 6],
    /// Read operations the function issued (one per DMA read, however many request TLPs it
    /// took): the dependent round trips a timing model charges latency for.
    read_operations: AtomicU64,
    /// Peer-to-peer reads this function completed (requests another function sent to its BAR):
    /// a timing model charges the round trip to this function, not to host memory.
    reads_served: AtomicU64,
}

impl TlpCounters {
    pub fn add_up(&self, tlps: u64, hdr: u64, payload: u64) {
        self.c[0].fetch_add(tlps, Relaxed);
        self.c[1].fetch_add(hdr, Relaxed);
        self.c[2].fetch_add(payload, Relaxed);
    }
    pub fn add_down(&self, tlps: u64, hdr: u64, payload: u64) {
        self.c[3].fetch_add(tlps, Relaxed);
        self.c[4].fetch_add(hdr, Relaxed);
        self.c[5].fetch_add(payload, Relaxed);
    }
    pub fn add(&self, s: &TlpStats) {
        if s.total_tlps() == 0 {
            return;
        }
        self.add_up(s.up_tlps, s.up_header_bytes, s.up_payload_bytes);
        self.add_down(s.down_tlps, s.down_header_bytes, s.down_payload_bytes);
    }
    pub fn add_read_operations(&self, n: u64) {
        if n > 0 {
            self.read_operations.fetch_add(n, Relaxed);
        }
    }
    pub fn read_operations(&self) -> u64 {
        self.read_operations.load(Relaxed)
    }
    pub fn add_read_served(&self) {
        self.reads_served.fetch_add(1, Relaxed);
    }
    pub fn reads_served(&self) -> u64 {
        self.reads_served.load(Relaxed)
    }
    pub fn snapshot(&self) -> TlpStats {
        let v: Vec<u64> = self.c.iter().map(|a| a.load(Relaxed)).collect();
        TlpStats {
            up_tlps: v[0],
            up_header_bytes: v[1],
            up_payload_bytes: v[2],
            down_tlps: v[3],
            down_header_bytes: v[4],
            down_payload_bytes: v[5],
        }
    }
    pub fn clear(&self) {
        for a in &self.c {
            a.store(0, Relaxed);
        }
        self.read_operations.store(0, Relaxed);
        self.reads_served.store(0, Relaxed);
    }
}
