//! A [`FrameTap`] that writes a classic pcap stream (LINKTYPE_ETHERNET) through the `pcap-file`
//! crate, so captures open in Wireshark and tshark.

use std::io::Write;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

use super::{FrameTap, TapPoint};

/// Which frames a [`PcapTap`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFilter {
    /// Every frame once, where it enters the eSwitch.
    AllIngress,
    /// Frames a given vPort sends and receives.
    Vport(u16),
}

/// Writes observed frames as pcap records.
pub struct PcapTap<W: Write> {
    writer: PcapWriter<W>,
    filter: CaptureFilter,
    snaplen: u32,
    pub written: u64,
    pub errors: u64,
}

impl<W: Write> PcapTap<W> {
    pub fn new(out: W, filter: CaptureFilter) -> Result<Self, pcap_file::PcapError> {
        let snaplen = 65535;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen,
            ..Default::default()
        };
        Ok(PcapTap {
            writer: PcapWriter::with_header(out, header)?,
            filter,
            snaplen,
            written: 0,
            errors: 0,
        })
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(self) -> W {
        self.writer.into_writer()
    }
}

impl<W: Write + Send> FrameTap for PcapTap<W> {
    /// Stamped with the NIC's clock: real dates under a wall clock, virtual time under the
    /// discrete-event runner.
    fn frame(&mut self, now_ns: u64, vport: u16, point: TapPoint, frame: &[u8]) {
        let wanted = match self.filter {
            CaptureFilter::AllIngress => point == TapPoint::FromVport,
            CaptureFilter::Vport(v) => v == vport,
        };
        if !wanted {
            return;
        }
        let ts = Duration::from_nanos(now_ns);
        let n = frame.len().min(self.snaplen as usize);
        let pkt = PcapPacket::new(ts, frame.len() as u32, &frame[..n]);
        match self.writer.write_packet(&pkt) {
            Ok(_) => self.written += 1,
            Err(_) => self.errors += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::PcapReader;

    #[test]
    fn capture_reads_back_byte_exact() {
        let mut tap = PcapTap::new(Vec::new(), CaptureFilter::Vport(1)).unwrap();
        let a: Vec<u8> = (0..60u8).collect();
        let b: Vec<u8> = (0..=255u8).cycle().take(9000).collect();
        tap.frame(1_000, 1, TapPoint::FromVport, &a);
        tap.frame(2_000, 0, TapPoint::FromVport, &a);
        tap.frame(1_500_000_003_000, 1, TapPoint::ToVport, &b);
        assert_eq!(tap.written, 2);
        let bytes = tap.into_inner();
        let mut r = PcapReader::new(&bytes[..]).unwrap();
        assert_eq!(r.header().datalink, DataLink::ETHERNET);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.data.as_ref(), &a[..]);
        assert_eq!(p.timestamp, Duration::from_nanos(1_000));
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.timestamp, Duration::from_nanos(1_500_000_003_000));
        assert_eq!(p.data.as_ref(), &b[..]);
        assert_eq!(p.orig_len, 9000);
        assert!(r.next_packet().is_none());
    }
}
