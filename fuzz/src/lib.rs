//! What the fuzz targets share: a transmit stream that checks what an accelerator sends, and a
//! driver that cuts the fuzzer's input into frames, half of them wrapped in well-formed
//! Ethernet/IPv4/UDP headers so the accelerators' own parsers see deep inputs.

use fld_abi::wire::{ethertype, EthIpv4UdpRepr, EthernetRepr, Ipv4Repr, UdpRepr};
use fld_device::accel::{Accelerator, Credits, RxMeta, TxMeta, TxRefused, TxStream};

/// Largest frame an accelerator may hand back (a 65535-byte datagram plus Ethernet).
pub const MAX_OUT: usize = 65535 + 14;

/// Accepts or refuses sends as the input says, and checks every frame sent.
pub struct CheckedSink {
    pub credits: u32,
    pub sent: u64,
}

impl TxStream for CheckedSink {
    fn credits(&self, _queue: u16) -> Credits {
        Credits {
            packets: self.credits,
            bytes: self.credits.saturating_mul(4096),
        }
    }
    fn send(&mut self, _meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
        assert!(
            !data.is_empty() && data.len() <= MAX_OUT,
            "sent {} bytes",
            data.len()
        );
        if self.credits == 0 {
            return Err(TxRefused::NoCredit);
        }
        self.credits -= 1;
        self.sent += 1;
        Ok(())
    }
}

/// An Ethernet + IPv4 + UDP frame to `dport` around `payload`, lengths consistent.
pub fn udp_frame(dport: u16, src_last: u8, payload: &[u8]) -> Vec<u8> {
    let payload = &payload[..payload.len().min(65535 - 28)];
    let mut f = vec![0u8; EthIpv4UdpRepr::HEADER_LEN + payload.len()];
    f[EthIpv4UdpRepr::HEADER_LEN..].copy_from_slice(payload);
    let headers = EthIpv4UdpRepr {
        eth: EthernetRepr {
            src_addr: [2, 0, 0, 0, 0, 1],
            dst_addr: [2, 0, 0, 0, 0, 2],
            ethertype: ethertype::IPV4,
        },
        ip: Ipv4Repr {
            src_addr: [10, 0, 0, src_last],
            dst_addr: [10, 0, 0, 2],
            hop_limit: 64,
            dont_frag: true,
            ..Ipv4Repr::default()
        },
        udp: UdpRepr {
            src_port: 40000,
            dst_port: dport,
        },
    };
    headers.emit(&mut f, false);
    f
}

/// Feeds `data` to `accel` as a sequence of records `[control, len_hi, len_lo, bytes...]`:
/// control bit 0 wraps the bytes in a UDP frame to `dport`, bits 1-3 pick the context, bit 4
/// sets a resume table, bits 5-7 the transmit credits before the next poll.
pub fn drive(accel: &mut dyn Accelerator, dport: u16, mut data: &[u8]) {
    let mut sink = CheckedSink {
        credits: 4,
        sent: 0,
    };
    while let [control, hi, lo, rest @ ..] = data {
        let len = (usize::from(*hi) << 8 | usize::from(*lo)).min(rest.len());
        let (bytes, tail) = rest.split_at(len);
        data = tail;
        let frame = if control & 1 != 0 {
            udp_frame(dport, 1 + (control >> 1 & 7), bytes)
        } else {
            bytes.to_vec()
        };
        let meta = RxMeta {
            queue: 0,
            context: u16::from(control >> 1 & 7),
            resume_table: (control & 0x10 != 0).then_some(3),
            csum: 0,
            rss_hash: 0,
            len: frame.len() as u32,
        };
        sink.credits = u32::from(control >> 5);
        accel.receive(&meta, &frame, &mut sink);
        accel.poll(&mut sink);
    }
    sink.credits = u32::MAX;
    for _ in 0..64 {
        accel.poll(&mut sink);
    }
}
