//! RoCEv2 (InfiniBand Architecture Specification vol. 1, Annex A17): the InfiniBand transport
//! headers of reliable-connection traffic carried in UDP to port 4791 over IPv4 or IPv6, and the
//! invariant CRC that ends every packet.
//!
//! * [`BthRepr`] is the base transport header (IBA §9.2); the extended transport headers follow
//!   it as the opcode says (IBA §9.3, Table 38 "header presence"): [`Reth`], [`Aeth`], [`ImmDt`],
//!   [`AtomicEth`], [`AtomicAckEth`].
//! * [`IbPacket`] is the one reader of a whole transport packet (headers, payload, pad and ICRC
//!   located and checked against the opcode's layout) and [`IbHeaders::emit`] the one writer.
//! * [`icrc`] computes the invariant CRC (IBA §7.8.1, A17.3.3): CRC-32 over eight bytes of ones
//!   standing for the absent LRH, then the IP header with the fields routers change masked to
//!   ones (IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow label and hop limit), the
//!   UDP header with its checksum masked, the BTH with its reserved byte (FECN, BECN, resv6)
//!   masked, and the rest of the packet up to the ICRC. The 32 bits travel least significant
//!   byte first, as Ethernet's FCS.
//!
//! Left out: unreliable and extended transports (UD's DETH, XRC's XRCETH, RD), invalidate
//! (IETH), the GRH of native InfiniBand (RoCEv2 carries its fields in the IP header).

pub mod star;

use super::{be16, be32, ethernet, ip_proto, ipv4, ipv6, put_be16, put_be32, udp, Error, Result};

/// UDP destination port of RoCEv2 (IANA).
pub const ROCE_V2_PORT: u16 = 4791;
/// RoCEv2 UDP source ports come from this range (a flow hash picks one; A17.3.2 lets any value
/// serve, the range keeps them out of the well-known ports as Linux soft-RoCE does).
pub const SOURCE_PORT_BASE: u16 = 0xc000;
/// The default partition key (full membership).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// Bytes of the invariant CRC.
pub const ICRC_LEN: usize = 4;
/// PSNs are 24 bits.
pub const PSN_MASK: u32 = 0x00ff_ffff;
/// Queue pair numbers are 24 bits.
pub const QPN_MASK: u32 = 0x00ff_ffff;
/// QP1, the general services interface (IBA 13.5.1): where management datagrams — the
/// connection manager's MADs — go.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of GSI datagrams (IBA 13.5.1.1, the well-known Q_Key `0x80010000`).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Reliable-connection opcodes (IBA Table 38; the transport bits 000 are RC).
pub mod opcode {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    pub const SEND_LAST_INVALIDATE: u8 = 0x16;
    pub const SEND_ONLY_INVALIDATE: u8 = 0x17;
}

/// Where a packet stands in its message (the opcode's FIRST/MIDDLE/LAST/ONLY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

/// What an RC opcode is: its message kind, position and the extended headers after the BTH
/// (IBA Table 38).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub kind: MessageKind,
    pub position: Position,
    pub reth: bool,
    pub aeth: bool,
    pub imm: bool,
    pub atomic_eth: bool,
    pub atomic_ack_eth: bool,
    /// The packet may carry payload.
    pub payload: bool,
}

/// The operation an opcode belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageKind {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
}

impl MessageKind {
    /// Requests travel from requester to responder; the rest are responses.
    pub fn is_request(self) -> bool {
        matches!(
            self,
            MessageKind::Send
                | MessageKind::Write
                | MessageKind::ReadRequest
                | MessageKind::CompareSwap
                | MessageKind::FetchAdd
        )
    }
}

/// The layout of RC opcode `op`; `None` for opcodes this transport does not implement
/// (invalidate, other transports, reserved values).
pub const fn opcode_info(op: u8) -> Option<OpcodeInfo> {
    use MessageKind::*;
    use Position::*;
    let (kind, position, reth, aeth, imm, atomic_eth, atomic_ack_eth, payload) = match op {
        opcode::SEND_FIRST => (Send, First, false, false, false, false, false, true),
        opcode::SEND_MIDDLE => (Send, Middle, false, false, false, false, false, true),
        opcode::SEND_LAST => (Send, Last, false, false, false, false, false, true),
        opcode::SEND_LAST_IMM => (Send, Last, false, false, true, false, false, true),
        opcode::SEND_ONLY => (Send, Only, false, false, false, false, false, true),
        opcode::SEND_ONLY_IMM => (Send, Only, false, false, true, false, false, true),
        opcode::WRITE_FIRST => (Write, First, true, false, false, false, false, true),
        opcode::WRITE_MIDDLE => (Write, Middle, false, false, false, false, false, true),
        opcode::WRITE_LAST => (Write, Last, false, false, false, false, false, true),
        opcode::WRITE_LAST_IMM => (Write, Last, false, false, true, false, false, true),
        opcode::WRITE_ONLY => (Write, Only, true, false, false, false, false, true),
        opcode::WRITE_ONLY_IMM => (Write, Only, true, false, true, false, false, true),
        opcode::READ_REQUEST => (ReadRequest, Only, true, false, false, false, false, false),
        opcode::READ_RESPONSE_FIRST => {
            (ReadResponse, First, false, true, false, false, false, true)
        }
        opcode::READ_RESPONSE_MIDDLE => (
            ReadResponse,
            Middle,
            false,
            false,
            false,
            false,
            false,
            true,
        ),
        opcode::READ_RESPONSE_LAST => (ReadResponse, Last, false, true, false, false, false, true),
        opcode::READ_RESPONSE_ONLY => (ReadResponse, Only, false, true, false, false, false, true),
        opcode::ACKNOWLEDGE => (Acknowledge, Only, false, true, false, false, false, false),
        opcode::ATOMIC_ACKNOWLEDGE => (
            AtomicAcknowledge,
            Only,
            false,
            true,
            false,
            false,
            true,
            false,
        ),
        opcode::COMPARE_SWAP => (CompareSwap, Only, false, false, false, true, false, false),
        opcode::FETCH_ADD => (FetchAdd, Only, false, false, false, true, false, false),
        _ => return None,
    };
    Some(OpcodeInfo {
        kind,
        position,
        reth,
        aeth,
        imm,
        atomic_eth,
        atomic_ack_eth,
        payload,
    })
}

impl OpcodeInfo {
    /// Bytes of the BTH and the extended headers this opcode carries.
    pub const fn header_len(&self) -> usize {
        BTH_LEN
            + if self.reth { RETH_LEN } else { 0 }
            + if self.aeth { AETH_LEN } else { 0 }
            + if self.imm { IMM_LEN } else { 0 }
            + if self.atomic_eth { ATOMIC_ETH_LEN } else { 0 }
            + if self.atomic_ack_eth {
                ATOMIC_ACK_ETH_LEN
            } else {
                0
            }
    }
}

/// The opcode of a SEND (`imm`: with immediate) or WRITE packet at `position`.
pub const fn request_opcode(kind: MessageKind, position: Position, imm: bool) -> u8 {
    use opcode::*;
    match (kind, position, imm) {
        (MessageKind::Send, Position::First, _) => SEND_FIRST,
        (MessageKind::Send, Position::Middle, _) => SEND_MIDDLE,
        (MessageKind::Send, Position::Last, false) => SEND_LAST,
        (MessageKind::Send, Position::Last, true) => SEND_LAST_IMM,
        (MessageKind::Send, Position::Only, false) => SEND_ONLY,
        (MessageKind::Send, Position::Only, true) => SEND_ONLY_IMM,
        (MessageKind::Write, Position::First, _) => WRITE_FIRST,
        (MessageKind::Write, Position::Middle, _) => WRITE_MIDDLE,
        (MessageKind::Write, Position::Last, false) => WRITE_LAST,
        (MessageKind::Write, Position::Last, true) => WRITE_LAST_IMM,
        (MessageKind::Write, Position::Only, false) => WRITE_ONLY,
        (MessageKind::Write, Position::Only, true) => WRITE_ONLY_IMM,
        (MessageKind::ReadResponse, Position::First, _) => READ_RESPONSE_FIRST,
        (MessageKind::ReadResponse, Position::Middle, _) => READ_RESPONSE_MIDDLE,
        (MessageKind::ReadResponse, Position::Last, _) => READ_RESPONSE_LAST,
        (MessageKind::ReadResponse, Position::Only, _) => READ_RESPONSE_ONLY,
        (MessageKind::ReadRequest, _, _) => READ_REQUEST,
        (MessageKind::CompareSwap, _, _) => COMPARE_SWAP,
        (MessageKind::FetchAdd, _, _) => FETCH_ADD,
        (MessageKind::Acknowledge, _, _) => ACKNOWLEDGE,
        (MessageKind::AtomicAcknowledge, _, _) => ATOMIC_ACKNOWLEDGE,
    }
}

pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const IMM_LEN: usize = 4;
pub const ATOMIC_ETH_LEN: usize = 28;
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Transport header version of IBA 1.x.
pub const TRANSPORT_VERSION: u8 = 0;

/// Base transport header (IBA §9.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BthRepr {
    pub opcode: u8,
    /// Solicited event: the responder raises a completion event for this message.
    pub solicited: bool,
    pub migration: bool,
    /// Bytes of padding after the payload (0..=3) that make the packet a multiple of 4.
    pub pad_count: u8,
    pub pkey: u16,
    /// Explicit congestion notification seen on the way (RoCEv2 CNP machinery; carried only).
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    /// The requester asks for an acknowledgement of this packet.
    pub ack_request: bool,
    pub psn: u32,
}

impl BthRepr {
    /// Reads the first [`BTH_LEN`] bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..BTH_LEN).ok_or(Error::Truncated)?;
        if b[1] & 0x0f != TRANSPORT_VERSION {
            return Err(Error::Malformed);
        }
        Ok(BthRepr {
            opcode: b[0],
            solicited: b[1] & 0x80 != 0,
            migration: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 3,
            pkey: be16(b, 2),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: be32(b, 4) & QPN_MASK,
            ack_request: b[8] & 0x80 != 0,
            psn: be32(b, 8) & PSN_MASK,
        })
    }

    /// Writes the header into the first [`BTH_LEN`] bytes of `b` (reserved bits zero).
    pub fn emit(&self, b: &mut [u8]) {
        self.emit_with_pad(self.pad_count, b);
    }

    /// [`BthRepr::emit`] with pad count `pad` in place of the header's own.
    fn emit_with_pad(&self, pad: u8, b: &mut [u8]) {
        let b = &mut b[..BTH_LEN];
        b[0] = self.opcode;
        b[1] = (self.solicited as u8) << 7
            | (self.migration as u8) << 6
            | (pad & 3) << 4
            | TRANSPORT_VERSION;
        put_be16(b, 2, self.pkey);
        put_be32(b, 4, self.dest_qp & QPN_MASK);
        b[4] = (self.fecn as u8) << 7 | (self.becn as u8) << 6;
        put_be32(b, 8, self.psn & PSN_MASK);
        b[8] = (self.ack_request as u8) << 7;
    }
}

/// RDMA extended transport header (IBA §9.3.3): the remote buffer of a WRITE or READ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reth {
    pub virtual_address: u64,
    pub rkey: u32,
    pub dma_length: u32,
}

impl Reth {
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..RETH_LEN).ok_or(Error::Truncated)?;
        Ok(Reth {
            virtual_address: u64::from_be_bytes(b[..8].try_into().unwrap_or_default()),
            rkey: be32(b, 8),
            dma_length: be32(b, 12),
        })
    }
    pub fn emit(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.virtual_address.to_be_bytes());
        put_be32(b, 8, self.rkey);
        put_be32(b, 12, self.dma_length);
    }
}

/// The AETH syndrome's meaning (IBA §9.3.5, Table 41).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckKind {
    /// Positive acknowledgement; the 5 bits are the end-to-end credit count.
    Ack { credits: u8 },
    /// Receiver not ready; the 5 bits encode the minimum RNR NAK timer (Table 45).
    RnrNak { timer: u8 },
    /// Negative acknowledgement with a [`nak`] code.
    Nak { code: u8 },
}

/// NAK codes (IBA Table 42).
pub mod nak {
    pub const PSN_SEQUENCE_ERROR: u8 = 0;
    pub const INVALID_REQUEST: u8 = 1;
    pub const REMOTE_ACCESS_ERROR: u8 = 2;
    pub const REMOTE_OPERATIONAL_ERROR: u8 = 3;
    pub const INVALID_RD_REQUEST: u8 = 4;
}

/// The credit count that means "no end-to-end flow control" (IBA §9.7.7.2.6: invalid credit
/// count, the requester may send regardless).
pub const CREDITS_UNLIMITED: u8 = 0x1f;

/// ACK extended transport header (IBA §9.3.5): syndrome and the responder's message sequence
/// number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    pub kind: AckKind,
    pub msn: u32,
}

impl Aeth {
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..AETH_LEN).ok_or(Error::Truncated)?;
        let syndrome = b[0];
        let value = syndrome & 0x1f;
        let kind = match (syndrome >> 5) & 3 {
            0 => AckKind::Ack { credits: value },
            1 => AckKind::RnrNak { timer: value },
            3 => AckKind::Nak { code: value },
            _ => return Err(Error::Malformed),
        };
        Ok(Aeth {
            kind,
            msn: be32(b, 0) & 0x00ff_ffff,
        })
    }
    pub fn syndrome(&self) -> u8 {
        match self.kind {
            AckKind::Ack { credits } => credits & 0x1f,
            AckKind::RnrNak { timer } => 0x20 | (timer & 0x1f),
            AckKind::Nak { code } => 0x60 | (code & 0x1f),
        }
    }
    pub fn emit(&self, b: &mut [u8]) {
        put_be32(b, 0, self.msn & 0x00ff_ffff);
        b[0] = self.syndrome();
    }
}

/// Immediate data (IBA §9.3.6), opaque to the transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImmDt(pub u32);

impl ImmDt {
    pub fn parse(b: &[u8]) -> Result<Self> {
        b.get(..IMM_LEN)
            .map(|b| ImmDt(be32(b, 0)))
            .ok_or(Error::Truncated)
    }
    pub fn emit(&self, b: &mut [u8]) {
        put_be32(b, 0, self.0);
    }
}

/// Atomic extended transport header (IBA §9.3.4): the 8-byte target and the operands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicEth {
    pub virtual_address: u64,
    pub rkey: u32,
    /// Swap value (compare-and-swap) or the addend (fetch-and-add).
    pub swap_add: u64,
    pub compare: u64,
}

impl AtomicEth {
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..ATOMIC_ETH_LEN).ok_or(Error::Truncated)?;
        let u64_at = |at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap_or_default());
        Ok(AtomicEth {
            virtual_address: u64_at(0),
            rkey: be32(b, 8),
            swap_add: u64_at(12),
            compare: u64_at(20),
        })
    }
    pub fn emit(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.virtual_address.to_be_bytes());
        put_be32(b, 8, self.rkey);
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..28].copy_from_slice(&self.compare.to_be_bytes());
    }
}

/// Atomic acknowledge extended transport header (IBA §9.3.7): the value the target held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicAckEth {
    pub original: u64,
}

impl AtomicAckEth {
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..ATOMIC_ACK_ETH_LEN).ok_or(Error::Truncated)?;
        Ok(AtomicAckEth {
            original: u64::from_be_bytes(b.try_into().unwrap_or_default()),
        })
    }
    pub fn emit(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.original.to_be_bytes());
    }
}

/// The transport headers of one packet as [`RoceAddress::emit_with`] writes them: RC's
/// ([`IbHeaders`]) or StaR's ([`star::StarHeaders`]).
pub trait TransportHeaders {
    /// Bytes the headers take.
    fn len(&self) -> usize;
    /// Never: a packet has at least its BTH.
    fn is_empty(&self) -> bool {
        false
    }
    /// Writes the headers at the start of `b` with the BTH's pad count `pad`; returns the bytes
    /// written.
    fn emit_padded(&self, pad: u8, b: &mut [u8]) -> usize;
    /// The base transport header, for a sender to fill in the QP's destination and P_Key.
    fn bth_mut(&mut self) -> &mut BthRepr;
}

impl TransportHeaders for IbHeaders {
    fn bth_mut(&mut self) -> &mut BthRepr {
        &mut self.bth
    }
    fn len(&self) -> usize {
        IbHeaders::len(self)
    }
    #[inline]
    fn emit_padded(&self, pad: u8, b: &mut [u8]) -> usize {
        self.emit_with_pad(pad, b)
    }
}

/// Every transport header of one packet: the BTH and the extended headers its opcode carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbHeaders {
    pub bth: BthRepr,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub imm: Option<ImmDt>,
    pub atomic_eth: Option<AtomicEth>,
    pub atomic_ack_eth: Option<AtomicAckEth>,
}

impl IbHeaders {
    /// Bytes the headers take (BTH plus whatever extended headers are present).
    pub fn len(&self) -> usize {
        BTH_LEN
            + self.reth.map_or(0, |_| RETH_LEN)
            + self.aeth.map_or(0, |_| AETH_LEN)
            + self.imm.map_or(0, |_| IMM_LEN)
            + self.atomic_eth.map_or(0, |_| ATOMIC_ETH_LEN)
            + self.atomic_ack_eth.map_or(0, |_| ATOMIC_ACK_ETH_LEN)
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the headers at the start of `b` in the order IBA §9.2 fixes (BTH, RETH, AETH,
    /// ImmDt, AtomicETH, AtomicAckETH — no opcode carries a conflicting pair); returns the bytes
    /// written. `b` must hold [`IbHeaders::len`] bytes.
    pub fn emit(&self, b: &mut [u8]) -> usize {
        self.emit_with_pad(self.bth.pad_count, b)
    }

    /// [`IbHeaders::emit`] with the BTH's pad count `pad`: a sender pads each packet as its
    /// payload needs without a copy of the headers.
    fn emit_with_pad(&self, pad: u8, b: &mut [u8]) -> usize {
        self.bth.emit_with_pad(pad, b);
        let mut at = BTH_LEN;
        if let Some(r) = &self.reth {
            r.emit(&mut b[at..]);
            at += RETH_LEN;
        }
        if let Some(a) = &self.aeth {
            a.emit(&mut b[at..]);
            at += AETH_LEN;
        }
        if let Some(i) = &self.imm {
            i.emit(&mut b[at..]);
            at += IMM_LEN;
        }
        if let Some(a) = &self.atomic_eth {
            a.emit(&mut b[at..]);
            at += ATOMIC_ETH_LEN;
        }
        if let Some(a) = &self.atomic_ack_eth {
            a.emit(&mut b[at..]);
            at += ATOMIC_ACK_ETH_LEN;
        }
        at
    }
}

/// A transport packet (the UDP payload of a RoCEv2 datagram) as the receiver reads it: headers
/// parsed as the opcode's layout says, the payload located between them and the pad and ICRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbPacket<'a> {
    pub headers: IbHeaders,
    pub info: OpcodeInfo,
    pub payload: &'a [u8],
    /// The ICRC as carried (least significant byte first on the wire).
    pub icrc: u32,
}

impl<'a> IbPacket<'a> {
    /// Parses `udp_payload`. `Err(Malformed)` for an unknown opcode, a bad transport version,
    /// an AETH with a reserved syndrome, payload on an opcode that carries none, or a pad count
    /// longer than the payload; `Err(Truncated)` when the headers, pad and ICRC do not fit.
    pub fn parse(udp_payload: &'a [u8]) -> Result<Self> {
        let bth = BthRepr::parse(udp_payload)?;
        let info = opcode_info(bth.opcode).ok_or(Error::Malformed)?;
        let header_len = info.header_len();
        let body_end = udp_payload
            .len()
            .checked_sub(ICRC_LEN)
            .filter(|e| *e >= header_len)
            .ok_or(Error::Truncated)?;
        let mut at = BTH_LEN;
        let mut headers = IbHeaders {
            bth,
            ..Default::default()
        };
        let b = udp_payload;
        if info.reth {
            headers.reth = Some(Reth::parse(&b[at..])?);
            at += RETH_LEN;
        }
        if info.aeth {
            headers.aeth = Some(Aeth::parse(&b[at..])?);
            at += AETH_LEN;
        }
        if info.imm {
            headers.imm = Some(ImmDt::parse(&b[at..])?);
            at += IMM_LEN;
        }
        if info.atomic_eth {
            headers.atomic_eth = Some(AtomicEth::parse(&b[at..])?);
            at += ATOMIC_ETH_LEN;
        }
        if info.atomic_ack_eth {
            headers.atomic_ack_eth = Some(AtomicAckEth::parse(&b[at..])?);
            at += ATOMIC_ACK_ETH_LEN;
        }
        let padded = &b[at..body_end];
        let pad = usize::from(bth.pad_count);
        if pad > padded.len() || (!info.payload && !padded.is_empty()) {
            return Err(Error::Malformed);
        }
        let icrc = u32::from_le_bytes(b[body_end..].try_into().unwrap_or_default());
        Ok(IbPacket {
            headers,
            info,
            payload: &padded[..padded.len() - pad],
            icrc,
        })
    }
}

/// Pad bytes that round a payload of `len` up to a multiple of 4 (the BTH's PadCnt).
pub const fn pad_count(len: usize) -> u8 {
    ((4 - (len & 3)) & 3) as u8
}

/// The CRC-32 of the eight bytes of ones that stand for the LRH of a native InfiniBand packet
/// in the ICRC of a RoCEv2 packet (A17.3.3): every ICRC starts from it, so the prefix, the same
/// for every packet, is not summed again for each (the tests check the constant).
const LRH_ONES_CRC: u32 = 0x2144_df1c;

/// A CRC-32 hasher started from [`LRH_ONES_CRC`]. Made once and cloned: making one looks up
/// the CPU's features each time, which cost the two ICRCs of a 64-byte RDMA WRITE about 37
/// instructions.
fn lrh_ones_hasher() -> crc32fast::Hasher {
    static STARTED: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    STARTED
        .get_or_init(|| crc32fast::Hasher::new_with_initial(LRH_ONES_CRC))
        .clone()
}

/// The invariant CRC of the RoCEv2 packet whose IP header starts at `ip` in `frame` and whose
/// ICRC is the last [`ICRC_LEN`] bytes of the IP datagram ending at `ip_end`. `None` when the
/// bytes are too short to hold the IP, UDP and base transport headers and the ICRC.
pub fn icrc(frame: &[u8], ip: usize, ip_end: usize, ipv6: bool) -> Option<u32> {
    let ip_len = if ipv6 {
        ipv6::HEADER_LEN
    } else {
        ipv4::HEADER_LEN
    };
    let hdr_end = ip + ip_len + udp::HEADER_LEN + BTH_LEN;
    let crc_end = ip_end.checked_sub(ICRC_LEN)?;
    if crc_end < hdr_end || ip_end > frame.len() {
        return None;
    }
    // IP, UDP and BTH are copied and masked; the rest is summed in place.
    let mut masked = [0u8; ipv6::HEADER_LEN + udp::HEADER_LEN + BTH_LEN];
    let masked = &mut masked[..hdr_end - ip];
    masked.copy_from_slice(&frame[ip..hdr_end]);
    if ipv6 {
        // Version stays; traffic class and flow label become ones; hop limit ones.
        masked[0] |= 0x0f;
        masked[1..4].fill(0xff);
        masked[7] = 0xff;
    } else {
        masked[1] = 0xff; // TOS (DSCP and ECN)
        masked[8] = 0xff; // TTL
        masked[10..12].fill(0xff); // header checksum
    }
    let udp_at = ip_len;
    masked[udp_at + 6..udp_at + 8].fill(0xff); // UDP checksum
    masked[udp_at + udp::HEADER_LEN + 4] = 0xff; // BTH: FECN, BECN, resv6
    let mut h = lrh_ones_hasher();
    h.update(masked);
    h.update(&frame[hdr_end..crc_end]);
    Some(h.finalize())
}

/// The layer 2-4 addresses of a RoCEv2 packet: what a queue pair's address vector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceAddress {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// IPv4 addresses are carried as IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`), as RoCEv2
    /// GIDs are.
    pub src_gid: [u8; 16],
    pub dst_gid: [u8; 16],
    pub src_port: u16,
    /// IPv4 DSCP/ECN or IPv6 traffic class.
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// IPv6 only.
    pub flow_label: u32,
}

/// Whether a GID is an IPv4-mapped IPv6 address (a RoCEv2 GID of an IPv4 address).
pub fn gid_is_ipv4(gid: &[u8; 16]) -> bool {
    // The 96-bit prefix ::ffff:0:0/96, compared as one number: the engine asks this of every
    // RoCE packet it builds or receives, and a byte loop over the prefix cost it about 25
    // instructions each time.
    u128::from_be_bytes(*gid) >> 32 == 0xffff
}

/// The RoCEv2 GID of an IPv4 address.
pub fn ipv4_gid(addr: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&addr);
    g
}

impl RoceAddress {
    /// Bytes of the Ethernet, IP and UDP headers in front of the transport headers.
    pub fn header_len(&self) -> usize {
        ethernet::HEADER_LEN
            + udp::HEADER_LEN
            + if gid_is_ipv4(&self.dst_gid) {
                ipv4::HEADER_LEN
            } else {
                ipv6::HEADER_LEN
            }
    }

    /// Writes a whole RoCEv2 frame into `frame`: Ethernet, IPv4 (DF, checksum) or IPv6, UDP to
    /// [`ROCE_V2_PORT`] (checksum 0, as A17.3.2 allows and rxe sends), `headers`, `payload`,
    /// the pad and the ICRC. `ip_ident` is the IPv4 identification. Returns the frame length,
    /// or `None` (nothing meaningful written) when `frame` is too short.
    pub fn emit<H: TransportHeaders>(
        &self,
        headers: &H,
        payload: &[u8],
        ip_ident: u16,
        frame: &mut [u8],
    ) -> Option<usize> {
        self.emit_with(headers, payload.len(), ip_ident, frame, |p| {
            p.copy_from_slice(payload);
            Some(())
        })
    }

    /// As [`RoceAddress::emit`] with `payload_len` bytes of payload that `fill` writes in place
    /// (a NIC gathers them by DMA straight into the frame); `None` from `fill` abandons the
    /// frame.
    pub fn emit_with<H: TransportHeaders>(
        &self,
        headers: &H,
        payload_len: usize,
        ip_ident: u16,
        frame: &mut [u8],
        fill: impl FnOnce(&mut [u8]) -> Option<()>,
    ) -> Option<usize> {
        let pad = usize::from(pad_count(payload_len));
        let l2 = self.header_len();
        let ib_len = headers.len() + payload_len + pad + ICRC_LEN;
        let total = l2 + ib_len;
        let frame = frame.get_mut(..total)?;
        let ipv6 = !gid_is_ipv4(&self.dst_gid);
        let ip = ethernet::HEADER_LEN;
        let udp_at = l2 - udp::HEADER_LEN;
        let udp_len = udp::HEADER_LEN + ib_len;
        ethernet::EthernetRepr {
            src_addr: self.src_mac,
            dst_addr: self.dst_mac,
            ethertype: if ipv6 {
                super::ethertype::IPV6
            } else {
                super::ethertype::IPV4
            },
        }
        .emit(&mut ethernet::EthernetFrame::new_unchecked(&mut frame[..]));
        if ipv6 {
            ipv6::Ipv6Repr {
                src_addr: self.src_gid,
                dst_addr: self.dst_gid,
                next_header: ip_proto::UDP,
                payload_len: udp_len,
                hop_limit: self.hop_limit,
                traffic_class: self.traffic_class,
                flow_label: self.flow_label,
            }
            .emit(&mut ipv6::Ipv6Packet::new_unchecked(&mut frame[ip..]));
        } else {
            let a = |g: &[u8; 16]| [g[12], g[13], g[14], g[15]];
            ipv4::Ipv4Repr {
                src_addr: a(&self.src_gid),
                dst_addr: a(&self.dst_gid),
                next_header: ip_proto::UDP,
                payload_len: udp_len,
                hop_limit: self.hop_limit,
                ident: ip_ident,
                dscp_ecn: self.traffic_class,
                dont_frag: true,
                more_frags: false,
                frag_offset: 0,
            }
            .emit(&mut ipv4::Ipv4Packet::new_unchecked(&mut frame[ip..]), true);
        }
        udp::UdpRepr {
            src_port: self.src_port,
            dst_port: ROCE_V2_PORT,
        }
        .emit_header(
            &mut udp::UdpPacket::new_unchecked(&mut frame[udp_at..]),
            ib_len,
        );
        let mut at = l2;
        at += headers.emit_padded(pad as u8, &mut frame[at..]);
        fill(&mut frame[at..at + payload_len])?;
        at += payload_len;
        frame[at..at + pad].fill(0);
        at += pad;
        let crc = icrc(frame, ip, total, ipv6)?;
        frame[at..at + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
        Some(total)
    }
}

/// The UDP source port of a queue pair's packets: a hash of the two QP numbers folded into
/// the [`SOURCE_PORT_BASE`] range, so one connection keeps one path through ECMP fabrics while
/// different connections spread (A17.3.2's "entropy" source port).
pub fn flow_source_port(src_qp: u32, dst_qp: u32) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in src_qp.to_be_bytes()[1..]
        .iter()
        .chain(&dst_qp.to_be_bytes()[1..])
    {
        h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    SOURCE_PORT_BASE | (h as u16 & 0x3fff)
}

/// Serial-number arithmetic on 24-bit PSNs (IBA §9.7.1): the signed distance from `b` to `a`,
/// in -2^23..2^23.
pub const fn psn_delta(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// `psn + n` on the 24-bit circle.
pub const fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// The minimum RNR NAK timer values of IBA Table 45, in nanoseconds, by their 5-bit code.
pub const RNR_TIMER_NS: [u64; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// The local ACK timeout of a QP's 5-bit `timeout` attribute (IBA §9.7.6.1.3): 4.096 µs ×
/// 2^timeout, in nanoseconds; 0 means no timeout (`None`).
pub const fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 {
        None
    } else {
        Some(4096 << (timeout & 0x1f))
    }
}

#[cfg(test)]
mod tests;
