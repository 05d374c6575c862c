//! The IP defragmentation inline accelerator (paper §7): the NIC steers IPv4 fragments to it, it
//! reassembles them with [`super::defrag::Reassembler`] and returns whole datagrams to the NIC,
//! which resumes steering at the table the `accelerate` rule named — so RSS and L4 checksum
//! validation run on whole datagrams. Non-fragments pass through unchanged.
//!
//! Time: the accelerator keeps a logical clock that advances `step_ns` per engine step (FLD
//! poll), so reassembly timeouts are deterministic in tests and proportional to work done.

use super::defrag::{Config, DropReason, Outcome, Reassembler};
use super::{Accelerator, RxMeta, TxHold, TxRefused, TxStream};
use fld_abi::wire::{ethernet, ethertype, EthernetFrame};

/// Counters of the accelerator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefragStats {
    pub bypass: u64,
    pub reassembled: u64,
    /// Reassembled datagrams larger than FLD's maximum packet (refused by the tx stream).
    pub too_large_for_fld: u64,
    pub dropped: u64,
    /// Frames that are not Ethernet + IPv4.
    pub not_ipv4: u64,
    /// Outputs waiting for tx credits when the holding buffer was full.
    pub backlog_drops: u64,
}

/// The accelerator model.
pub struct DefragAccel {
    engine: Reassembler,
    tx_queue: u16,
    now_ns: u64,
    /// Logical nanoseconds per engine step.
    pub step_ns: u64,
    /// Frames waiting for credits.
    held: TxHold,
    pub stats: DefragStats,
}

impl DefragAccel {
    pub fn new(config: Config, tx_queue: u16) -> Self {
        DefragAccel {
            engine: Reassembler::new(config),
            tx_queue,
            now_ns: 0,
            step_ns: 1000,
            held: TxHold::new(256),
            stats: DefragStats::default(),
        }
    }

    pub fn engine(&self) -> &Reassembler {
        &self.engine
    }

    fn flush(&mut self, tx: &mut dyn TxStream) -> usize {
        let (queue, stats) = (self.tx_queue, &mut self.stats);
        self.held.flush(
            tx,
            |_| queue,
            |e| match e {
                TxRefused::BadLength => stats.too_large_for_fld += 1,
                _ => stats.dropped += 1,
            },
        )
    }
}

/// Queues the frame `l2` + `ip` for the tx stream (a counted drop when the holding buffer is
/// full). A free function so the datagram can stay borrowed from the reassembly engine.
fn hold(
    held: &mut TxHold,
    stats: &mut DefragStats,
    l2: &[u8],
    ip: &[u8],
    resume_table: Option<u8>,
) {
    let queued = held.push_with(resume_table, |f| {
        f.extend_from_slice(l2);
        f.extend_from_slice(ip);
    });
    if !queued {
        stats.backlog_drops += 1;
    }
}

impl Accelerator for DefragAccel {
    fn receive(&mut self, meta: &RxMeta, data: &[u8], tx: &mut dyn TxStream) -> bool {
        // Ethernet II with IPv4 (no VLAN tag: the NIC strips tunnels and tags before).
        let eth = match EthernetFrame::new_checked(data) {
            Ok(eth) if eth.ethertype() == ethertype::IPV4 && eth.payload().len() >= 20 => eth,
            _ => {
                self.stats.not_ipv4 += 1;
                return true;
            }
        };
        let l2 = &data[..ethernet::HEADER_LEN];
        let now = self.now_ns;
        match self.engine.push(eth.payload(), now) {
            Outcome::Bypass(p) => {
                self.stats.bypass += 1;
                hold(&mut self.held, &mut self.stats, l2, p, meta.resume_table);
            }
            Outcome::Complete(p) => {
                self.stats.reassembled += 1;
                hold(&mut self.held, &mut self.stats, l2, p, meta.resume_table);
            }
            Outcome::Buffered => {}
            Outcome::Dropped(DropReason::Malformed(_)) | Outcome::Dropped(_) => {
                self.stats.dropped += 1
            }
        }
        self.flush(tx);
        true
    }

    fn poll(&mut self, tx: &mut dyn TxStream) -> usize {
        self.now_ns = self.now_ns.saturating_add(self.step_ns);
        self.engine.expire(self.now_ns);
        self.flush(tx)
    }

    fn name(&self) -> &'static str {
        "defrag"
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let (s, e) = (self.stats, self.engine.stats());
        vec![
            ("bypass", s.bypass),
            ("fragments", e.fragments),
            ("duplicates", e.duplicates),
            ("reassembled", s.reassembled),
            ("malformed", e.malformed),
            ("too_large", e.too_large),
            ("overlaps", e.overlaps),
            ("timeouts", e.timeouts),
            ("inconsistent", e.inconsistent),
            ("discarded_fragments", e.discarded_fragments),
            ("evicted", e.evicted),
            ("dropped", s.dropped),
            ("not_ipv4", s.not_ipv4),
            ("too_large_for_fld", s.too_large_for_fld),
            ("backlog_drops", s.backlog_drops),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accel::{Credits, TxMeta};
    use fld_abi::wire::Ipv4Packet;

    struct Sink(Vec<Vec<u8>>);
    impl TxStream for Sink {
        fn credits(&self, _q: u16) -> Credits {
            Credits {
                packets: 100,
                bytes: 1 << 20,
            }
        }
        fn send(&mut self, _m: &TxMeta, d: &[u8]) -> Result<(), TxRefused> {
            if d.len() > 16384 {
                return Err(TxRefused::BadLength);
            }
            self.0.push(d.to_vec());
            Ok(())
        }
    }

    /// Splits an Ethernet + IPv4 frame into fragments carrying `chunk` bytes of payload each.
    fn fragment(frame: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let (l2, ip) = frame.split_at(14);
        let ihl = (ip[0] & 0xf) as usize * 4;
        let payload = &ip[ihl..];
        let mut out = vec![];
        for (i, part) in payload.chunks(chunk).enumerate() {
            let mut h = ip[..ihl].to_vec();
            let mf = (i + 1) * chunk < payload.len();
            let mut p = Ipv4Packet::new_unchecked(&mut h[..]);
            p.set_total_len((ihl + part.len()) as u16);
            p.set_frag(false, mf, (i * chunk) as u16);
            p.fill_checksum();
            let mut f = l2.to_vec();
            f.extend_from_slice(&h);
            f.extend_from_slice(part);
            out.push(f);
        }
        out
    }

    fn datagram(len: usize) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, 2000);
        let mut f = Vec::new();
        b.write(
            &mut f,
            &(0..len).map(|i| (i * 31) as u8).collect::<Vec<_>>(),
        )
        .unwrap();
        // A datagram that may be fragmented: clear Don't Fragment.
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_frag(false, false, 0);
        ip.fill_checksum();
        f
    }

    #[test]
    fn fragments_come_back_as_the_original_frame() {
        let mut a = DefragAccel::new(Config::default(), 0);
        let mut tx = Sink(vec![]);
        let whole = datagram(3000);
        let mut frags = fragment(&whole, 1424);
        assert_eq!(frags.len(), 3);
        frags.reverse();
        for f in &frags {
            assert!(a.receive(&RxMeta::default(), f, &mut tx));
        }
        assert_eq!(tx.0.len(), 1);
        assert!(
            tx.0[0] == whole,
            "reassembled frame differs from the original"
        );
        // A frame that is not a fragment passes through untouched.
        a.receive(&RxMeta::default(), &datagram(100), &mut tx);
        assert!(tx.0[1] == datagram(100));
        assert_eq!((a.stats.reassembled, a.stats.bypass), (1, 1));
    }

    #[test]
    fn incomplete_datagrams_time_out_on_the_logical_clock() {
        let cfg = Config {
            timeout_ns: 10_000,
            ..Config::default()
        };
        let mut a = DefragAccel::new(cfg, 0);
        let mut tx = Sink(vec![]);
        let frags = fragment(&datagram(3000), 1424);
        a.receive(&RxMeta::default(), &frags[0], &mut tx);
        for _ in 0..11 {
            a.poll(&mut tx);
        }
        a.receive(&RxMeta::default(), &frags[1], &mut tx);
        a.receive(&RxMeta::default(), &frags[2], &mut tx);
        assert!(tx.0.is_empty(), "the first fragment expired");
        assert_eq!(a.engine().stats().timeouts, 1);
        // Garbage is a counted drop.
        a.receive(&RxMeta::default(), &[0u8; 20], &mut tx);
        assert_eq!(a.stats.not_ipv4, 1);
    }
}
