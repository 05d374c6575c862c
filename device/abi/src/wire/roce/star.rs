//! StaR's packets (Pan et al., "Towards Stateless RNIC for Data Center Networks", APNet '19,
//! §3.1), carried as RoCEv2 packets: Ethernet, IP, UDP to 4791, a BTH whose opcode is one of
//! IBA's manufacturer-specific RC opcodes (bits 7..5 = 110, IBA §9.2 Table 38), a StaR header of
//! the packet's kind, the payload, the pad and the ICRC. The paper leaves the formats out; these
//! are ours (`docs/nic-interface.md` §16.3 has the byte layout and what each field costs).
//!
//! Riding on RoCEv2 keeps what the fabric and the NIC already do for RDMA — steering on UDP
//! 4791 and the destination GID, the ICRC, the P_Key, ECN marking — and lets a capture tool show
//! the packets as RoCE; a distinct UDP port would buy nothing but a second steering rule.
//!
//! In every StaR packet the BTH PSN is the packet's sequence number and the BTH destination QP
//! names the receiving end's queue pair as the sender knows it. The answers a stateless NIC
//! builds (RA for an RDP, SDP for a GD, EA for a CQEP) echo the request's PSN and go to the
//! request's `reply_qpn`, along the request's own addresses swapped, so the stateless side looks
//! nothing up.
//!
//! * [`StarKind::Wqep`] (server → client): [`StarWqe`] then one work queue element of the
//!   stateless side in its ring format; PSN = the server driver's element sequence.
//! * [`StarKind::Cqep`] (client → server): [`StarCq`] then one 64-byte CQE for the server's CQ.
//! * [`StarKind::Ea`]: an element ACK, no payload (client → server for a WQEP, built by the
//!   server NIC for a CQEP).
//! * [`StarKind::Rdp`] (client → server): [`StarData`] then the data, placed at its address.
//! * [`StarKind::Ra`] (server NIC → client): no payload.
//! * [`StarKind::Gd`] (client → server): [`StarData`], no payload: send me these bytes.
//! * [`StarKind::Sdp`] (server NIC → client): the bytes a GD asked for.

use super::{
    be32, pad_count, put_be32, BthRepr, Error, Result, TransportHeaders, BTH_LEN, ICRC_LEN,
};

/// StaR opcodes (IBA's manufacturer-specific range, `0b110x_xxxx`).
pub mod opcode {
    pub const WQEP: u8 = 0xc0;
    pub const CQEP: u8 = 0xc1;
    pub const EA: u8 = 0xc2;
    pub const RDP: u8 = 0xc3;
    pub const RA: u8 = 0xc4;
    pub const GD: u8 = 0xc5;
    pub const SDP: u8 = 0xc6;
}

/// Whether a BTH opcode is StaR's.
pub const fn is_star_opcode(op: u8) -> bool {
    matches!(op, opcode::WQEP..=opcode::SDP)
}

/// Bytes of [`StarWqe`].
pub const STAR_WQE_LEN: usize = 4;
/// Bytes of [`StarData`].
pub const STAR_DATA_LEN: usize = 16;
/// Bytes of [`StarCq`].
pub const STAR_CQ_LEN: usize = 8;
/// Bytes of the CQE a CQEP carries.
pub const STAR_CQE_LEN: usize = 64;
/// The most bytes one RDP carries or one GD asks for (one SDP answers a GD).
pub const STAR_MAX_DATA: u32 = 4096;

/// What a StaR packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StarKind {
    Wqep,
    Cqep,
    Ea,
    Rdp,
    Ra,
    Gd,
    Sdp,
}

impl StarKind {
    pub const fn from_opcode(op: u8) -> Option<StarKind> {
        Some(match op {
            opcode::WQEP => StarKind::Wqep,
            opcode::CQEP => StarKind::Cqep,
            opcode::EA => StarKind::Ea,
            opcode::RDP => StarKind::Rdp,
            opcode::RA => StarKind::Ra,
            opcode::GD => StarKind::Gd,
            opcode::SDP => StarKind::Sdp,
            _ => return None,
        })
    }

    pub const fn opcode(self) -> u8 {
        match self {
            StarKind::Wqep => opcode::WQEP,
            StarKind::Cqep => opcode::CQEP,
            StarKind::Ea => opcode::EA,
            StarKind::Rdp => opcode::RDP,
            StarKind::Ra => opcode::RA,
            StarKind::Gd => opcode::GD,
            StarKind::Sdp => opcode::SDP,
        }
    }

    /// The StaR header the kind carries, and whether it has payload.
    const fn layout(self) -> (Ext, bool) {
        match self {
            StarKind::Wqep => (Ext::Wqe, true),
            StarKind::Cqep => (Ext::Cq, true),
            StarKind::Ea | StarKind::Ra => (Ext::None, false),
            StarKind::Rdp => (Ext::Data, true),
            StarKind::Gd => (Ext::Data, false),
            StarKind::Sdp => (Ext::None, true),
        }
    }

    /// Requests travel to the stateless side and are answered by its NIC alone.
    pub const fn is_request_to_server(self) -> bool {
        matches!(self, StarKind::Cqep | StarKind::Rdp | StarKind::Gd)
    }
}

/// Which StaR header follows the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ext {
    None,
    Wqe,
    Data,
    Cq,
}

impl Ext {
    const fn len(self) -> usize {
        match self {
            Ext::None => 0,
            Ext::Wqe => STAR_WQE_LEN,
            Ext::Data => STAR_DATA_LEN,
            Ext::Cq => STAR_CQ_LEN,
        }
    }
}

/// Which of the stateless side's queues a WQEP's work queue element is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StarQueue {
    /// A send WQE (`fld_abi::nic::RdmaWqe`'s ring format).
    Send = 0,
    /// A receive WQE (a scatter list, `fld_abi::nic::encode_recv_wqe`'s format).
    Receive = 1,
    /// Not a work queue: a change of the server's memory table ([`StarRegionUpdate`]), carried
    /// and acknowledged as WQEs are so it arrives once and in order (StaR §3.1: later
    /// registrations "encapsulated into packets").
    Memory = 2,
}

/// The header of a WQEP (4 bytes): the queue and the element's counter in it (the
/// `wqe_counter` its completion will carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StarWqe {
    pub queue: StarQueue,
    pub index: u16,
}

impl StarWqe {
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..STAR_WQE_LEN).ok_or(Error::Truncated)?;
        let queue = match b[0] {
            0 => StarQueue::Send,
            1 => StarQueue::Receive,
            2 => StarQueue::Memory,
            _ => return Err(Error::Malformed),
        };
        if b[1] != 0 {
            return Err(Error::Malformed);
        }
        Ok(StarWqe {
            queue,
            index: u16::from_be_bytes([b[2], b[3]]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.queue as u8;
        b[1] = 0;
        b[2..4].copy_from_slice(&self.index.to_be_bytes());
    }
}

/// What a [`StarRegionUpdate`] does to the client's copy of the server's memory table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StarRegionOp {
    /// The server registered the region: the client holds it from now on.
    Register = 1,
    /// The server deregistered it: the client forgets it, and RDPs and GDs into it are no
    /// longer legal.
    Deregister = 2,
}

/// The payload of a memory WQEP ([`StarQueue::Memory`]): a 32-byte header, then one 8-byte bus
/// address per page (a deregistration carries the same list: the client's security module
/// drops its entries for those pages). All fields big-endian:
///
/// | Off | Size | Field |
/// |---|---|---|
/// | 0 | 1 | op (1 register, 2 deregister) |
/// | 1 | 1 | log_page_size (12..=30) |
/// | 2 | 2 | reserved, 0 |
/// | 4 | 4 | key: the server's key of the region |
/// | 8 | 8 | addr: the region's first virtual address |
/// | 16 | 8 | length in bytes |
/// | 24 | 4 | access: the region's rights (`fld_abi::nic::access`) |
/// | 28 | 4 | pages: how many bus addresses follow |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StarRegionUpdate {
    pub op: StarRegionOp,
    pub log_page_size: u8,
    pub key: u32,
    pub addr: u64,
    pub length: u64,
    pub access: u32,
    pub pages: u32,
}

/// Bytes of a [`StarRegionUpdate`] header.
pub const STAR_REGION_UPDATE_LEN: usize = 32;

impl StarRegionUpdate {
    /// The header and the page addresses of a memory WQEP's payload. Refuses a reserved byte
    /// set, an unknown op, a page size outside 4 KiB..1 GiB, and a page list whose length is not
    /// `pages` x 8 or whose pages do not cover `[addr, addr + length)`.
    pub fn parse(payload: &[u8]) -> Result<(Self, &[u8])> {
        let h = payload
            .get(..STAR_REGION_UPDATE_LEN)
            .ok_or(Error::Truncated)?;
        let be32 = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let be64 = |i: usize| (u64::from(be32(i)) << 32) | u64::from(be32(i + 4));
        let op = match h[0] {
            1 => StarRegionOp::Register,
            2 => StarRegionOp::Deregister,
            _ => return Err(Error::Malformed),
        };
        let u = StarRegionUpdate {
            op,
            log_page_size: h[1],
            key: be32(4),
            addr: be64(8),
            length: be64(16),
            access: be32(24),
            pages: be32(28),
        };
        let pages = &payload[STAR_REGION_UPDATE_LEN..];
        let wanted = u.covering_pages().ok_or(Error::Malformed)?;
        if h[2] != 0
            || h[3] != 0
            || !(12..=30).contains(&u.log_page_size)
            || u.pages != wanted
            || pages.len() != wanted as usize * 8
        {
            return Err(Error::Malformed);
        }
        Ok((u, pages))
    }

    /// Writes the header then `pages` (bus addresses) into `out`; the bytes written, or `None`
    /// when `out` is too short.
    pub fn emit(&self, pages: &[u64], out: &mut [u8]) -> Option<usize> {
        let n = STAR_REGION_UPDATE_LEN + pages.len() * 8;
        let out = out.get_mut(..n)?;
        out[0] = self.op as u8;
        out[1] = self.log_page_size;
        out[2..4].fill(0);
        out[4..8].copy_from_slice(&self.key.to_be_bytes());
        out[8..16].copy_from_slice(&self.addr.to_be_bytes());
        out[16..24].copy_from_slice(&self.length.to_be_bytes());
        out[24..28].copy_from_slice(&self.access.to_be_bytes());
        out[28..32].copy_from_slice(&(pages.len() as u32).to_be_bytes());
        for (i, p) in pages.iter().enumerate() {
            out[32 + i * 8..40 + i * 8].copy_from_slice(&p.to_be_bytes());
        }
        Some(n)
    }

    /// How many pages of `2^log_page_size` bytes `[addr, addr + length)` touches (`None`: the
    /// range wraps or the page size is out of range).
    pub fn covering_pages(&self) -> Option<u32> {
        if !(12..=30).contains(&self.log_page_size) {
            return None;
        }
        if self.length == 0 {
            return Some(0);
        }
        let end = self.addr.checked_add(self.length)?;
        let first = self.addr >> self.log_page_size;
        let last = (end - 1) >> self.log_page_size;
        u32::try_from(last - first + 1).ok()
    }

    /// The page addresses of a parsed payload's list.
    pub fn page_addresses(pages: &[u8]) -> impl Iterator<Item = u64> + '_ {
        pages
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
    }
}

/// The bus ranges pages of `2^log_page_size` bytes cover, adjacent pages merged: what a
/// client's security module allows a server region's RDPs and GDs into (one entry per range).
pub fn page_ranges(
    pages: impl IntoIterator<Item = u64>,
    log_page_size: u8,
) -> Vec<core::ops::Range<u64>> {
    let page = 1u64 << log_page_size.min(63);
    let mut out: Vec<core::ops::Range<u64>> = Vec::new();
    for p in pages {
        let end = p.saturating_add(page);
        match out.last_mut() {
            Some(r) if r.end == p => r.end = end,
            _ => out.push(p..end),
        }
    }
    out
}

/// The data header of an RDP or a GD (16 bytes): where in the stateless side's I/O address
/// space the bytes go or come from, how many, and the QP the answer goes to. The address is a
/// bus address of the server's function: the client translated the server's virtual address
/// through its copy of the server's memory table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StarData {
    pub dma_addr: u64,
    pub length: u32,
    /// 24 bits; the top byte of the word is reserved (zero).
    pub reply_qpn: u32,
}

impl StarData {
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..STAR_DATA_LEN).ok_or(Error::Truncated)?;
        if b[12] != 0 {
            return Err(Error::Malformed);
        }
        Ok(StarData {
            dma_addr: u64::from_be_bytes(b[..8].try_into().unwrap_or_default()),
            length: be32(b, 8),
            reply_qpn: be32(b, 12),
        })
    }
    pub fn emit(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.dma_addr.to_be_bytes());
        put_be32(b, 8, self.length);
        put_be32(b, 12, self.reply_qpn & super::QPN_MASK);
    }
}

/// The header of a CQEP (8 bytes): the stateless side's CQ the carried CQE goes to, and the QP
/// its EA goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StarCq {
    pub cqn: u32,
    pub reply_qpn: u32,
}

impl StarCq {
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..STAR_CQ_LEN).ok_or(Error::Truncated)?;
        if b[4] != 0 {
            return Err(Error::Malformed);
        }
        Ok(StarCq {
            cqn: be32(b, 0),
            reply_qpn: be32(b, 4),
        })
    }
    pub fn emit(&self, b: &mut [u8]) {
        put_be32(b, 0, self.cqn);
        put_be32(b, 4, self.reply_qpn & super::QPN_MASK);
    }
}

/// Every header of one StaR packet: the BTH (its opcode a [`StarKind`]'s) and the StaR header
/// the kind carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StarHeaders {
    pub bth: BthRepr,
    pub wqe: Option<StarWqe>,
    pub data: Option<StarData>,
    pub cq: Option<StarCq>,
}

impl StarHeaders {
    /// The headers of a `kind` packet with sequence number `psn` to QP `dest_qp`.
    pub fn new(kind: StarKind, dest_qp: u32, psn: u32, pkey: u16) -> Self {
        StarHeaders {
            bth: BthRepr {
                opcode: kind.opcode(),
                pkey,
                dest_qp,
                psn,
                ..Default::default()
            },
            wqe: None,
            data: None,
            cq: None,
        }
    }
}

impl TransportHeaders for StarHeaders {
    fn bth_mut(&mut self) -> &mut BthRepr {
        &mut self.bth
    }

    fn len(&self) -> usize {
        BTH_LEN
            + self.wqe.map_or(0, |_| STAR_WQE_LEN)
            + self.data.map_or(0, |_| STAR_DATA_LEN)
            + self.cq.map_or(0, |_| STAR_CQ_LEN)
    }

    fn emit_padded(&self, pad: u8, b: &mut [u8]) -> usize {
        self.bth.emit_with_pad(pad, b);
        let mut at = BTH_LEN;
        if let Some(w) = &self.wqe {
            w.emit(&mut b[at..]);
            at += STAR_WQE_LEN;
        }
        if let Some(d) = &self.data {
            d.emit(&mut b[at..]);
            at += STAR_DATA_LEN;
        }
        if let Some(c) = &self.cq {
            c.emit(&mut b[at..]);
            at += STAR_CQ_LEN;
        }
        at
    }
}

/// A StaR packet (the UDP payload of its RoCEv2 datagram) as the receiver reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StarPacket<'a> {
    pub kind: StarKind,
    pub headers: StarHeaders,
    pub payload: &'a [u8],
    pub icrc: u32,
}

impl<'a> StarPacket<'a> {
    /// Parses `udp_payload`. `Err(Malformed)` for an opcode that is not StaR's, a bad transport
    /// version, nonzero reserved bits, payload on a kind that carries none, a CQEP whose payload
    /// is not one CQE, an RDP whose length disagrees with its payload, a GD asking for more than
    /// [`STAR_MAX_DATA`], or a pad count longer than the payload; `Err(Truncated)` when the
    /// headers, pad and ICRC do not fit.
    pub fn parse(udp_payload: &'a [u8]) -> Result<Self> {
        let bth = BthRepr::parse(udp_payload)?;
        let kind = StarKind::from_opcode(bth.opcode).ok_or(Error::Malformed)?;
        let (ext, has_payload) = kind.layout();
        let mut headers = StarHeaders {
            bth,
            wqe: None,
            data: None,
            cq: None,
        };
        let header_len = BTH_LEN + ext.len();
        let body_end = udp_payload
            .len()
            .checked_sub(ICRC_LEN)
            .filter(|e| *e >= header_len)
            .ok_or(Error::Truncated)?;
        let at = BTH_LEN + ext.len();
        let ext_bytes = &udp_payload[BTH_LEN..];
        match ext {
            Ext::None => {}
            Ext::Wqe => headers.wqe = Some(StarWqe::parse(ext_bytes)?),
            Ext::Data => headers.data = Some(StarData::parse(ext_bytes)?),
            Ext::Cq => headers.cq = Some(StarCq::parse(ext_bytes)?),
        }
        let padded = &udp_payload[at..body_end];
        let pad = usize::from(bth.pad_count);
        if pad > padded.len() || (!has_payload && !padded.is_empty()) {
            return Err(Error::Malformed);
        }
        let payload = &padded[..padded.len() - pad];
        let consistent = match kind {
            StarKind::Cqep => payload.len() == STAR_CQE_LEN,
            StarKind::Rdp => headers
                .data
                .is_some_and(|d| d.length as usize == payload.len() && d.length <= STAR_MAX_DATA),
            StarKind::Gd => headers.data.is_some_and(|d| d.length <= STAR_MAX_DATA),
            _ => true,
        };
        if !consistent {
            return Err(Error::Malformed);
        }
        let icrc = u32::from_le_bytes(udp_payload[body_end..].try_into().unwrap_or_default());
        Ok(StarPacket {
            kind,
            headers,
            payload,
            icrc,
        })
    }
}

/// Bytes a StaR packet of `kind` with `payload` bytes adds beyond the payload, above UDP: the
/// BTH, its StaR header, the pad and the ICRC (the cost `docs/nic-interface.md` §16.3 tabulates).
pub const fn overhead(kind: StarKind, payload: usize) -> usize {
    let (ext, _) = kind.layout();
    BTH_LEN + ext.len() + pad_count(payload) as usize + ICRC_LEN
}

#[cfg(test)]
mod tests {
    //! StaR packets built by an independent writer: scapy's RoCE layer (`scapy.contrib.roce`,
    //! its ICRC per A17.3.3) with the StaR header as raw bytes after its BTH, e.g. the RDP:
    //!
    //! ```text
    //! Ether(src="02:fd:00:00:00:09", dst="02:fd:00:00:00:01")
    //!   / IP(src="10.0.0.9", dst="10.0.0.1", ttl=64, id=0x21, flags="DF", tos=2)
    //!   / UDP(sport=0xc0de, dport=4791, chksum=0)
    //!   / BTH(opcode=0xc3, padcount=2, pkey=0xffff, dqpn=0x123456, psn=0xabc)
    //!   / Raw(struct.pack("!QII", 0x123456000, 10, 0x107) + bytes(range(0xa0, 0xaa)) + b"\0\0")
    //! ```
    use super::super::{icrc, ipv4_gid, RoceAddress};
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const RDP: &str = "02fd0000000102fd0000000908004502004800214000401126790a0000090a000001c0de12b700340000c320ffff0012345600000abc00000001234560000000000a00000107a0a1a2a3a4a5a6a7a8a9000036a99bb8";
    const GD: &str = "02fd0000000102fd0000000908004500003c00224000401126860a0000090a000001c0de12b700280000c500ffff0012345600fffffe000000000000200000000578000001080f2eda83";
    const CQEP: &str = "02fd0000000102fd00000009080045000074002340004011264d0a0000090a000001c0de12b700600000c100ffff00000200000000070000000500000109000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3ff096e086";

    fn address(tos: u8) -> RoceAddress {
        RoceAddress {
            src_mac: [2, 0xfd, 0, 0, 0, 9],
            dst_mac: [2, 0xfd, 0, 0, 0, 1],
            src_gid: ipv4_gid([10, 0, 0, 9]),
            dst_gid: ipv4_gid([10, 0, 0, 1]),
            src_port: 0xc0de,
            traffic_class: tos,
            hop_limit: 64,
            flow_label: 0,
        }
    }

    /// Reads a scapy frame, checks its ICRC, and writes the same frame from the parsed headers.
    fn round_trip(frame: &[u8], ident: u16, tos: u8) -> StarPacket<'_> {
        let p = StarPacket::parse(&frame[42..]).unwrap();
        assert_eq!(
            icrc(frame, 14, frame.len(), false),
            Some(p.icrc),
            "scapy's ICRC"
        );
        let mut out = vec![0u8; frame.len() + 16];
        let n = address(tos)
            .emit(&p.headers, p.payload, ident, &mut out)
            .unwrap();
        assert_eq!(&out[..n], frame, "our writer writes scapy's bytes");
        p
    }

    #[test]
    fn rdp_gd_and_cqep_match_scapy_field_by_field_and_byte_for_byte() {
        let rdp = hex(RDP);
        let p = round_trip(&rdp, 0x21, 2);
        assert_eq!(p.kind, StarKind::Rdp);
        assert_eq!(
            (p.headers.bth.dest_qp, p.headers.bth.psn),
            (0x123456, 0xabc)
        );
        let d = p.headers.data.unwrap();
        assert_eq!(
            (d.dma_addr, d.length, d.reply_qpn),
            (0x1_2345_6000, 10, 0x107)
        );
        assert_eq!(p.payload, (0xa0..0xaa).collect::<Vec<u8>>());

        let gd = hex(GD);
        let p = round_trip(&gd, 0x22, 0);
        assert_eq!(p.kind, StarKind::Gd);
        assert_eq!(p.headers.bth.psn, 0xfffffe);
        let d = p.headers.data.unwrap();
        assert_eq!((d.dma_addr, d.length, d.reply_qpn), (0x2000, 1400, 0x108));
        assert!(p.payload.is_empty());

        let cqep = hex(CQEP);
        let p = round_trip(&cqep, 0x23, 0);
        assert_eq!(p.kind, StarKind::Cqep);
        let c = p.headers.cq.unwrap();
        assert_eq!((c.cqn, c.reply_qpn), (5, 0x109));
        assert_eq!(p.payload, (0..64).collect::<Vec<u8>>());
    }

    #[test]
    fn inconsistent_star_packets_are_refused_not_misread() {
        let rdp = hex(RDP);
        let body = &rdp[42..];
        let refuse = |b: &[u8], why: &str| {
            assert!(StarPacket::parse(b).is_err(), "{why}");
        };
        // The RDP's length field says 11 but 10 bytes follow.
        let mut b = body.to_vec();
        b[BTH_LEN + 11] = 11;
        refuse(&b, "length disagrees with the payload");
        // A reserved byte set.
        let mut b = body.to_vec();
        b[BTH_LEN + 12] = 1;
        refuse(&b, "reserved bits");
        // Cut inside the StaR header.
        refuse(&body[..BTH_LEN + 8], "truncated");
        // A GD with payload, or asking for more than one SDP carries.
        let gd = hex(GD);
        let mut b = gd[42..gd.len() - ICRC_LEN].to_vec();
        b.extend([0, 0, 0, 0]);
        b.extend([0; ICRC_LEN]);
        refuse(&b, "GD with payload");
        let mut b = gd[42..].to_vec();
        b[BTH_LEN + 8..BTH_LEN + 12].copy_from_slice(&(STAR_MAX_DATA + 1).to_be_bytes());
        refuse(&b, "GD beyond one SDP");
        // A CQEP whose payload is not one CQE.
        let cqep = hex(CQEP);
        let mut b = cqep[42..].to_vec();
        b.drain(BTH_LEN + STAR_CQ_LEN..BTH_LEN + STAR_CQ_LEN + 4);
        refuse(&b, "short CQE");
        // An RC opcode is not StaR's.
        let mut b = body.to_vec();
        b[0] = 0x0a;
        refuse(&b, "RC opcode");
        assert!(is_star_opcode(opcode::WQEP) && is_star_opcode(opcode::SDP));
        assert!(!is_star_opcode(0xc7) && !is_star_opcode(0x0a));
    }

    #[test]
    fn every_kind_round_trips_and_its_overhead_is_what_the_table_says() {
        let kinds = [
            StarKind::Wqep,
            StarKind::Cqep,
            StarKind::Ea,
            StarKind::Rdp,
            StarKind::Ra,
            StarKind::Gd,
            StarKind::Sdp,
        ];
        for kind in kinds {
            assert_eq!(StarKind::from_opcode(kind.opcode()), Some(kind));
            let mut h = StarHeaders::new(kind, 0x77, 0x10, 0xffff);
            let payload: Vec<u8> = match kind {
                StarKind::Cqep => vec![9; STAR_CQE_LEN],
                StarKind::Rdp | StarKind::Sdp | StarKind::Wqep => vec![5; 7],
                _ => Vec::new(),
            };
            if kind == StarKind::Wqep {
                h.wqe = Some(StarWqe {
                    queue: StarQueue::Receive,
                    index: 0x1234,
                });
            }
            if matches!(kind, StarKind::Rdp | StarKind::Gd) {
                h.data = Some(StarData {
                    dma_addr: 0x1000,
                    length: if kind == StarKind::Gd { 64 } else { 7 },
                    reply_qpn: 0x55,
                });
            }
            if kind == StarKind::Cqep {
                h.cq = Some(StarCq {
                    cqn: 3,
                    reply_qpn: 0x55,
                });
            }
            let mut frame = vec![0u8; 512];
            let n = address(0).emit(&h, &payload, 1, &mut frame).unwrap();
            let p = StarPacket::parse(&frame[42..n]).unwrap();
            assert_eq!((p.kind, p.payload), (kind, &payload[..]));
            assert_eq!(p.headers.data, h.data);
            assert_eq!(p.headers.cq, h.cq);
            assert_eq!(p.headers.wqe, h.wqe);
            assert_eq!(n - 42, overhead(kind, payload.len()) + payload.len());
        }
        // The table of docs/nic-interface.md §16.3: bytes above UDP beyond the payload.
        assert_eq!(overhead(StarKind::Rdp, 8), 12 + 16 + 4);
        assert_eq!(overhead(StarKind::Gd, 0), 12 + 16 + 4);
        assert_eq!(overhead(StarKind::Cqep, 64), 12 + 8 + 4);
        assert_eq!(overhead(StarKind::Ra, 0), 12 + 4);
        assert_eq!(overhead(StarKind::Wqep, 64), 12 + 4 + 4);
    }

    /// Memory WQEP payloads packed by Python's `struct` (`"!BBHIQQII"` then `"!3Q"`): a
    /// register of 0x2001 bytes from 0x7f00_0000_1000 (three 4 KiB pages), and its
    /// deregistration.
    #[test]
    fn region_updates_match_an_independent_packing_and_refuse_what_does_not_add_up() {
        let register = hex("010c00000000123400007f000000100000000000000020010000000700000003000000008000000000000000800030000000000080001000");
        let deregister = hex("020c00000000123400007f000000100000000000000020010000000700000003000000008000000000000000800030000000000080001000");
        let u = StarRegionUpdate {
            op: StarRegionOp::Register,
            log_page_size: 12,
            key: 0x1234,
            addr: 0x7f00_0000_1000,
            length: 0x2001,
            access: 7,
            pages: 3,
        };
        let pages = [0x8000_0000, 0x8000_3000, 0x8000_1000];
        let (got, list) = StarRegionUpdate::parse(&register).unwrap();
        assert_eq!(got, u);
        assert_eq!(
            StarRegionUpdate::page_addresses(list).collect::<Vec<_>>(),
            pages
        );
        let mut out = [0u8; 64];
        assert_eq!(u.emit(&pages, &mut out), Some(register.len()));
        assert_eq!(&out[..register.len()], &register[..]);
        let d = StarRegionUpdate {
            op: StarRegionOp::Deregister,
            ..u
        };
        assert_eq!(StarRegionUpdate::parse(&deregister).unwrap(), (d, list));
        assert_eq!(d.emit(&pages, &mut out), Some(deregister.len()));
        assert_eq!(&out[..deregister.len()], &deregister[..]);
        assert_eq!(u.emit(&pages, &mut [0u8; 40]), None, "too short");
        // One page short, one too many, a reserved byte, an unknown op, a 1 KiB page.
        let bad = |at: usize, v: u8, cut: usize| {
            let mut b = register.clone();
            b[at] = v;
            b.truncate(b.len() - cut);
            StarRegionUpdate::parse(&b).map(|(u, _)| u)
        };
        assert_eq!(bad(31, 3, 8), Err(Error::Malformed));
        assert_eq!(bad(31, 4, 0), Err(Error::Malformed));
        assert_eq!(bad(2, 1, 0), Err(Error::Malformed));
        assert_eq!(bad(0, 3, 0), Err(Error::Malformed));
        assert_eq!(bad(1, 10, 0), Err(Error::Malformed));
        assert_eq!(
            StarRegionUpdate::parse(&register[..31]),
            Err(Error::Truncated)
        );
        let w = StarWqe::parse(&[2, 0, 0, 9]).unwrap();
        assert_eq!((w.queue, w.index), (StarQueue::Memory, 9));
        assert_eq!(StarWqe::parse(&[3, 0, 0, 9]), Err(Error::Malformed));
        assert_eq!(
            page_ranges(pages, 12),
            [
                0x8000_0000..0x8000_1000,
                0x8000_3000..0x8000_4000,
                0x8000_1000..0x8000_2000
            ]
        );
        assert_eq!(
            page_ranges([0x1000, 0x2000, 0x3000, 0x9000], 12),
            [0x1000..0x4000, 0x9000..0xa000]
        );
    }
}
