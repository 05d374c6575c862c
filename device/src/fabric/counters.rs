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
    /// Tallies TLPs sent up and their payload. A tally leaves header bytes at zero: the
    /// counters it is added to derive them from the TLPs ([`TlpCounters::snapshot`]).
    pub(crate) fn up(&mut self, tlps: u64, payload: u64) {
        self.up_tlps += tlps;
        self.up_payload_bytes += payload;
    }
    /// Tallies TLPs delivered down and their payload (header bytes as for [`TlpStats::up`]).
    pub(crate) fn down(&mut self, tlps: u64, payload: u64) {
        self.down_tlps += tlps;
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

/// Shared atomic counters of one function: TLPs and payload bytes each way. A TLP's header
/// bytes are the fabric's per-TLP overhead, the same for every TLP, so they are derived when
/// the counters are read ([`TlpCounters::snapshot`]) rather than counted: one atomic add fewer
/// per direction on every CPU access and every flush of a DMA port.
#[derive(Default, Debug)]
pub struct TlpCounters {
    /// Up TLPs, up payload bytes, down TLPs, down payload bytes.
    c: [AtomicU64; 4],
    /// Read operations the function issued (one per DMA read, however many request TLPs it
    /// took): the dependent round trips a timing model charges latency for.
    read_operations: AtomicU64,
    /// Peer-to-peer reads this function completed (requests another function sent to its BAR):
    /// a timing model charges the round trip to this function, not to host memory.
    reads_served: AtomicU64,
}

impl TlpCounters {
    pub fn add_up(&self, tlps: u64, payload: u64) {
        self.c[0].fetch_add(tlps, Relaxed);
        self.c[1].fetch_add(payload, Relaxed);
    }
    pub fn add_down(&self, tlps: u64, payload: u64) {
        self.c[2].fetch_add(tlps, Relaxed);
        self.c[3].fetch_add(payload, Relaxed);
    }
    /// Adds a tally's TLPs and payload (its header bytes follow from its TLPs).
    pub fn add(&self, s: &TlpStats) {
        if s.total_tlps() == 0 {
            return;
        }
        self.add_up(s.up_tlps, s.up_payload_bytes);
        self.add_down(s.down_tlps, s.down_payload_bytes);
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
    /// The counters, with `overhead` header bytes per TLP.
    pub fn snapshot(&self, overhead: u64) -> TlpStats {
        let [up_tlps, up_payload_bytes, down_tlps, down_payload_bytes] =
            self.c.each_ref().map(|a| a.load(Relaxed));
        TlpStats {
            up_tlps,
            up_header_bytes: up_tlps * overhead,
            up_payload_bytes,
            down_tlps,
            down_header_bytes: down_tlps * overhead,
            down_payload_bytes,
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
