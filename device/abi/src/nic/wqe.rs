//! Send and receive descriptors (`docs/nic-interface.md` §5-6). A send WQE is a run of 16-byte
//! segments — control, Ethernet (offloads and the first inline header bytes), the rest of the
//! inline header padded to whole segments, then one data (gather) segment per buffer — occupying
//! whole 64-byte basic blocks of the ring. [`SendWqe`] is the one writer of that layout (the
//! driver posts with it, FLD generates with it) and [`SendWqeView`] the one reader (the NIC
//! executes through it).

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A WQE basic block: the unit of ring space and of the SQ counters.
pub const WQEBB: usize = 64;
/// Largest WQE: 63 segments of 16 bytes (16 basic blocks).
pub const MAX_WQE_DS: u16 = 63;
/// Bytes of the largest WQE, in whole basic blocks.
pub const MAX_WQE_BYTES: usize = (MAX_WQE_DS as usize * DS_SIZE).next_multiple_of(WQEBB);
/// Largest inline header the Ethernet segment may announce.
pub const MAX_INLINE_HEADER: u16 = 256;
/// A WQE segment.
pub const DS_SIZE: usize = 16;

/// Send opcodes.
pub const WQE_OP_NOP: u8 = 0x00;
pub const WQE_OP_SEND: u8 = 0x0a;
/// A multi-packet send: every data segment is a frame of its own (`docs/nic-interface.md` §6.6),
/// as ConnectX's enhanced multi-packet send WQE lets one descriptor carry a burst of packets.
pub const WQE_OP_SEND_MPW: u8 = 0x29;
/// Frames one multi-packet send WQE may carry: 30 data segments after the control and Ethernet
/// segments fill 8 basic blocks, one descriptor fetch (512 bytes).
pub const MAX_MPW_PACKETS: usize = 30;

/// Control segment completion modes ([`CtrlSeg::fm_ce_se`] bits 2..4).
pub const CE_ON_ERROR: u8 = 0 << 2;
pub const CE_ALWAYS: u8 = 2 << 2;
pub const CE_MASK: u8 = 3 << 2;

/// First segment of every send WQE.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct CtrlSeg {
    pub opcode: u8,
    pub rsvd: u8,
    /// The WQE's position (counter of WQE basic blocks, low 16 bits); echoed in the CQE.
    pub wqe_index: U16,
    /// Number of 16-byte segments in this WQE including this one (1..=63).
    pub ds_count: u8,
    /// [`CE_ALWAYS`] requests a CQE for this WQE; [`CE_ON_ERROR`] only reports errors.
    pub fm_ce_se: u8,
    pub rsvd2: U16,
    pub sqn: U32,
    pub imm: U32,
}

impl CtrlSeg {
    /// Whether the WQE asks for a completion.
    pub fn completion_requested(&self) -> bool {
        self.fm_ce_se & CE_MASK == CE_ALWAYS
    }
    /// Basic blocks the WQE occupies (at least one, even for a malformed `ds_count` of 0).
    pub fn wqebbs(&self) -> u32 {
        wqebbs(self.ds_count as usize)
    }
}

/// Ethernet segment checksum flags.
pub const CS_L3: u8 = 1 << 0;
pub const CS_L4: u8 = 1 << 1;

/// Ethernet segment: offload requests and the start of the inline headers. The inline header bytes
/// begin in `inline_start` and continue in the following segments, padded to 16 bytes.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct EthSeg {
    pub cs_flags: u8,
    /// [`ETH_FLAG_RESUME`].
    pub flags: u8,
    pub rsvd: [u8; 2],
    pub rsvd2: [u8; 6],
    pub mss: U16,
    pub inline_hdr_size: U16,
    pub inline_start: [u8; 2],
}
/// The frame re-enters the NIC's steering at the flow table whose number is in the control
/// segment's `imm` field, instead of the FDB root: how an accelerator returns a packet to the
/// pipeline where its `accelerate` rule took it off (paper §5.3). The table must belong to the
/// sending function (an FDB table: the eSwitch manager; a receive table: the sender's vPort).
pub const ETH_FLAG_RESUME: u8 = 1 << 0;

/// Bytes of inline header carried inside the Ethernet segment itself.
pub const ETH_SEG_INLINE: usize = 2;
/// Where the inline header starts in a send WQE: the last bytes of the Ethernet segment, so the
/// header is contiguous across the segments that follow.
const INLINE_OFFSET: usize = 2 * DS_SIZE - ETH_SEG_INLINE;

/// Gather entry: `byte_count` bytes at `addr`. `lkey` must be [`RESERVED_LKEY`] (bus addresses).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Default, Debug)]
pub struct DataSeg {
    pub byte_count: U32,
    pub lkey: U32,
    pub addr: U64,
}
/// The only memory key of the Ethernet interface: addresses are bus (IOVA) addresses.
pub const RESERVED_LKEY: u32 = 0;

impl DataSeg {
    /// A gather or scatter entry of `len` bytes at bus address `addr`.
    pub fn bus(addr: u64, len: u32) -> Self {
        DataSeg {
            byte_count: U32::new(len),
            lkey: U32::new(RESERVED_LKEY),
            addr: U64::new(addr),
        }
    }
}

/// Receive WQE: a single scatter entry (regular RQ: one packet buffer; striding RQ: the whole
/// multi-packet buffer, `byte_count` must cover all strides).
pub type RecvWqe = DataSeg;
pub const RECV_WQE_SIZE: usize = 16;

/// Segments after the Ethernet segment that carry the rest of an inline header of `inline`
/// bytes.
pub const fn inline_segments(inline: usize) -> usize {
    inline.saturating_sub(ETH_SEG_INLINE).div_ceil(DS_SIZE)
}

/// Segments of a send WQE with an inline header of `inline` bytes and `gathers` data segments.
pub const fn send_ds_count(inline: usize, gathers: usize) -> usize {
    2 + inline_segments(inline) + gathers
}

/// Basic blocks `ds` segments occupy (at least one).
pub const fn wqebbs(ds: usize) -> u32 {
    let n = (ds * DS_SIZE).div_ceil(WQEBB);
    if n == 0 {
        1
    } else {
        n as u32
    }
}

/// Zeroes the basic blocks of a WQE being encoded. Most WQEs are one block: it is cleared as a
/// block of known size, in a few stores rather than a call.
pub(crate) fn clear_blocks(buf: &mut [u8]) {
    match <&mut [u8; WQEBB]>::try_from(&mut *buf) {
        Ok(block) => *block = [0; WQEBB],
        Err(_) => buf.fill(0),
    }
}

/// The control and Ethernet segments every send WQE starts with, then `gather` as data
/// segments after the inline header, into `buf`'s first `ctrl.ds_count` segments (the rest of
/// the last block zeroed).
#[inline(always)]
fn encode_segments(
    ctrl: &CtrlSeg,
    eth: &EthSeg,
    inline_header: &[u8],
    gather: &[(u64, u32)],
    buf: &mut [u8],
) -> Result<usize, WqeEncodeError> {
    let len = ctrl.ds_count as usize * DS_SIZE;
    let buf = buf
        .get_mut(..len.next_multiple_of(WQEBB))
        .ok_or(WqeEncodeError::BufferTooSmall)?;
    clear_blocks(buf);
    buf[..DS_SIZE].copy_from_slice(ctrl.as_bytes());
    buf[DS_SIZE..2 * DS_SIZE].copy_from_slice(eth.as_bytes());
    // The inline header runs contiguously from the end of the Ethernet segment.
    let ih = inline_header;
    buf[INLINE_OFFSET..INLINE_OFFSET + ih.len()].copy_from_slice(ih);
    let mut at = (2 + inline_segments(ih.len())) * DS_SIZE;
    for &(addr, len) in gather {
        buf[at..at + DS_SIZE].copy_from_slice(DataSeg::bus(addr, len).as_bytes());
        at += DS_SIZE;
    }
    Ok(len)
}

/// Why a send WQE cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeEncodeError {
    /// More than [`MAX_WQE_DS`] segments or an inline header over [`MAX_INLINE_HEADER`].
    TooLarge,
    /// The buffer is shorter than the WQE's basic blocks.
    BufferTooSmall,
}

/// An Ethernet send WQE as software (or FLD) builds it.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendWqe<'a> {
    /// Header bytes carried in the WQE itself.
    pub inline_header: &'a [u8],
    /// (bus address, length) of each buffer that follows the inline header.
    pub gather: &'a [(u64, u32)],
    /// [`CS_L3`] / [`CS_L4`] insertion requests.
    pub cs_flags: u8,
    /// Ask for a completion ([`CE_ALWAYS`]).
    pub signal: bool,
    /// Re-enter steering at this flow table ([`ETH_FLAG_RESUME`]).
    pub resume_table: Option<u32>,
}

impl SendWqe<'_> {
    /// 16-byte segments this WQE needs.
    pub fn ds_count(&self) -> usize {
        send_ds_count(self.inline_header.len(), self.gather.len())
    }

    /// Basic blocks it occupies in the ring.
    pub fn wqebbs(&self) -> u32 {
        wqebbs(self.ds_count())
    }

    /// Encodes the WQE as it sits in the ring at WQE index `index` of SQ `sqn`. `buf` must hold
    /// its basic blocks ([`MAX_WQE_BYTES`] always suffices); returns the bytes used (whole
    /// segments; the rest of the last basic block is zeroed).
    #[inline]
    pub fn encode(&self, sqn: u32, index: u16, buf: &mut [u8]) -> Result<usize, WqeEncodeError> {
        let ds = self.ds_count();
        let ih = self.inline_header;
        if ds > MAX_WQE_DS as usize || ih.len() > MAX_INLINE_HEADER as usize {
            return Err(WqeEncodeError::TooLarge);
        }
        let ctrl = CtrlSeg {
            opcode: WQE_OP_SEND,
            rsvd: 0,
            wqe_index: U16::new(index),
            ds_count: ds as u8,
            fm_ce_se: if self.signal { CE_ALWAYS } else { CE_ON_ERROR },
            rsvd2: U16::new(0),
            sqn: U32::new(sqn),
            imm: U32::new(self.resume_table.unwrap_or(0)),
        };
        let eth = EthSeg {
            cs_flags: self.cs_flags,
            flags: if self.resume_table.is_some() {
                ETH_FLAG_RESUME
            } else {
                0
            },
            inline_hdr_size: U16::new(ih.len() as u16),
            ..Default::default()
        };
        encode_segments(&ctrl, &eth, ih, self.gather, buf)
    }
}

/// A multi-packet send WQE as software builds it (`docs/nic-interface.md` §6.6): one frame per
/// buffer, all with the same checksum requests, one completion for the lot.
#[derive(Clone, Copy, Debug, Default)]
pub struct MultiPacketSendWqe<'a> {
    /// (bus address, length) of each frame, whole (no inline header).
    pub frames: &'a [(u64, u32)],
    /// [`CS_L3`] / [`CS_L4`] insertion requests, for every frame.
    pub cs_flags: u8,
    /// Ask for a completion ([`CE_ALWAYS`]) once the last frame is sent.
    pub signal: bool,
}

impl MultiPacketSendWqe<'_> {
    /// 16-byte segments this WQE needs.
    pub fn ds_count(&self) -> usize {
        send_ds_count(0, self.frames.len())
    }

    /// Basic blocks it occupies in the ring.
    pub fn wqebbs(&self) -> u32 {
        wqebbs(self.ds_count())
    }

    /// Encodes the WQE as [`SendWqe::encode`] does; more than [`MAX_MPW_PACKETS`] frames, or
    /// none, is [`WqeEncodeError::TooLarge`].
    pub fn encode(&self, sqn: u32, index: u16, buf: &mut [u8]) -> Result<usize, WqeEncodeError> {
        if self.frames.is_empty() || self.frames.len() > MAX_MPW_PACKETS {
            return Err(WqeEncodeError::TooLarge);
        }
        let ctrl = CtrlSeg {
            opcode: WQE_OP_SEND_MPW,
            wqe_index: U16::new(index),
            ds_count: self.ds_count() as u8,
            fm_ce_se: if self.signal { CE_ALWAYS } else { CE_ON_ERROR },
            sqn: U32::new(sqn),
            ..Default::default()
        };
        let eth = EthSeg {
            cs_flags: self.cs_flags,
            ..Default::default()
        };
        encode_segments(&ctrl, &eth, &[], self.frames, buf)
    }
}

/// Why the NIC refuses a send WQE (it answers with a BAD_WQE error completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeFormatError {
    /// Fewer bytes than a control segment, or than the segments `ds_count` announces.
    Truncated,
    /// `ds_count` of 0 or above [`MAX_WQE_DS`].
    DsCount,
    /// A SEND without an Ethernet segment.
    NoEthSegment,
    /// An inline header over [`MAX_INLINE_HEADER`] or beyond the WQE's segments.
    InlineHeader,
}

/// A send WQE as the NIC reads it: `ds_count` segments, checked once.
#[derive(Clone, Copy, Debug)]
pub struct SendWqeView<'a> {
    ctrl: CtrlSeg,
    segs: &'a [u8],
}

impl<'a> SendWqeView<'a> {
    /// Checks that `wqe` starts with a control segment whose `ds_count` is valid and that the
    /// announced segments are all present.
    pub fn new_checked(wqe: &'a [u8]) -> Result<Self, WqeFormatError> {
        let (ctrl, _) = CtrlSeg::read_from_prefix(wqe).map_err(|_| WqeFormatError::Truncated)?;
        let ds = ctrl.ds_count as usize;
        if ds == 0 || ds > MAX_WQE_DS as usize {
            return Err(WqeFormatError::DsCount);
        }
        let segs = wqe.get(..ds * DS_SIZE).ok_or(WqeFormatError::Truncated)?;
        Ok(SendWqeView { ctrl, segs })
    }

    pub fn ctrl(&self) -> &CtrlSeg {
        &self.ctrl
    }

    /// The Ethernet part of a SEND: offloads, inline header and the data segments after it.
    pub fn eth(&self) -> Result<EthSendView<'a>, WqeFormatError> {
        let eth = self
            .segs
            .get(DS_SIZE..2 * DS_SIZE)
            .and_then(|s| EthSeg::read_from_bytes(s).ok())
            .ok_or(WqeFormatError::NoEthSegment)?;
        let inline = eth.inline_hdr_size.get() as usize;
        if inline > MAX_INLINE_HEADER as usize {
            return Err(WqeFormatError::InlineHeader);
        }
        let data_start = (2 + inline_segments(inline)) * DS_SIZE;
        let (Some(inline_header), Some(data)) = (
            self.segs.get(INLINE_OFFSET..INLINE_OFFSET + inline),
            self.segs.get(data_start..),
        ) else {
            return Err(WqeFormatError::InlineHeader);
        };
        Ok(EthSendView {
            eth,
            inline_header,
            data,
        })
    }
}

/// The Ethernet segment of a send WQE and what follows it.
#[derive(Clone, Copy, Debug)]
pub struct EthSendView<'a> {
    pub eth: EthSeg,
    pub inline_header: &'a [u8],
    data: &'a [u8],
}

impl<'a> EthSendView<'a> {
    /// The data (gather) segments, in order.
    pub fn data_segments(&self) -> impl Iterator<Item = DataSeg> + 'a {
        self.data
            .chunks_exact(DS_SIZE)
            .filter_map(|s| DataSeg::read_from_bytes(s).ok())
    }

    /// The resume table the WQE names ([`ETH_FLAG_RESUME`] with the table in `ctrl.imm`).
    pub fn resume_table(&self, ctrl: &CtrlSeg) -> Option<u32> {
        (self.eth.flags & ETH_FLAG_RESUME != 0).then(|| ctrl.imm.get())
    }
}

const _: () = {
    assert!(core::mem::size_of::<CtrlSeg>() == DS_SIZE);
    assert!(core::mem::size_of::<EthSeg>() == DS_SIZE);
    assert!(core::mem::size_of::<DataSeg>() == DS_SIZE);
    assert!(MAX_WQE_BYTES == 1024);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_and_reader_agree_for_every_inline_length() {
        let mut buf = [0u8; MAX_WQE_BYTES];
        let header: Vec<u8> = (0..=MAX_INLINE_HEADER as usize)
            .map(|i| i as u8 ^ 0x5a)
            .collect();
        let gather = [(0x1000_0000u64, 100u32), (0x2000_0040, 7)];
        for inline in 0..=MAX_INLINE_HEADER as usize {
            for g in 0..=2 {
                let w = SendWqe {
                    inline_header: &header[..inline],
                    gather: &gather[..g],
                    cs_flags: CS_L3 | CS_L4,
                    signal: inline % 2 == 0,
                    resume_table: (inline % 3 == 0).then_some(9),
                };
                let n = w.encode(77, 0xbeef, &mut buf).unwrap();
                assert_eq!(n, w.ds_count() * DS_SIZE);
                assert_eq!(w.wqebbs() as usize, n.div_ceil(WQEBB));
                let v = SendWqeView::new_checked(&buf[..n]).unwrap();
                let c = v.ctrl();
                assert_eq!(
                    (c.opcode, c.wqe_index.get(), c.sqn.get()),
                    (WQE_OP_SEND, 0xbeef, 77)
                );
                assert_eq!(c.completion_requested(), w.signal);
                assert_eq!(c.wqebbs(), w.wqebbs());
                let e = v.eth().unwrap();
                assert_eq!(e.inline_header, &header[..inline]);
                assert_eq!(e.eth.cs_flags, CS_L3 | CS_L4);
                assert_eq!(e.resume_table(c), w.resume_table);
                let segs: Vec<(u64, u32)> = e
                    .data_segments()
                    .map(|d| (d.addr.get(), d.byte_count.get()))
                    .collect();
                assert_eq!(segs, gather[..g]);
            }
        }
    }

    #[test]
    fn multi_packet_writer_and_reader_agree_for_every_frame_count() {
        let mut buf = [0u8; MAX_WQE_BYTES];
        let frames: Vec<(u64, u32)> = (0..=MAX_MPW_PACKETS as u64)
            .map(|i| (0x4000_0000 + i * 0x800, 60 + i as u32))
            .collect();
        for n in 1..=MAX_MPW_PACKETS {
            let w = MultiPacketSendWqe {
                frames: &frames[..n],
                cs_flags: CS_L4,
                signal: n % 2 == 1,
            };
            let len = w.encode(5, 0x1234, &mut buf).unwrap();
            assert_eq!(len, (2 + n) * DS_SIZE);
            assert_eq!(w.wqebbs() as usize, len.div_ceil(WQEBB));
            let v = SendWqeView::new_checked(&buf[..len]).unwrap();
            let c = v.ctrl();
            assert_eq!((c.opcode, c.wqe_index.get()), (WQE_OP_SEND_MPW, 0x1234));
            assert_eq!(c.completion_requested(), n % 2 == 1);
            let e = v.eth().unwrap();
            assert!(e.inline_header.is_empty());
            assert_eq!((e.eth.cs_flags, e.resume_table(c)), (CS_L4, None));
            let got: Vec<(u64, u32)> = e
                .data_segments()
                .map(|d| (d.addr.get(), d.byte_count.get()))
                .collect();
            assert_eq!(got, frames[..n]);
        }
        // The most a WQE carries is one descriptor fetch.
        let most = MultiPacketSendWqe {
            frames: &frames[..MAX_MPW_PACKETS],
            ..Default::default()
        };
        assert_eq!(most.wqebbs(), 8);
        for frames in [&frames[..0], &frames[..]] {
            let w = MultiPacketSendWqe {
                frames,
                ..Default::default()
            };
            assert_eq!(w.encode(0, 0, &mut buf), Err(WqeEncodeError::TooLarge));
        }
    }

    #[test]
    fn the_largest_wqe_fits_and_anything_larger_is_refused() {
        let mut buf = [0u8; MAX_WQE_BYTES];
        let gather = vec![(0u64, 1u32); 61];
        let w = SendWqe {
            gather: &gather,
            ..Default::default()
        };
        assert_eq!(w.ds_count(), 63);
        assert_eq!(w.encode(0, 0, &mut buf), Ok(63 * DS_SIZE));
        let gather = vec![(0u64, 1u32); 62];
        let w = SendWqe {
            gather: &gather,
            ..Default::default()
        };
        assert_eq!(w.encode(0, 0, &mut buf), Err(WqeEncodeError::TooLarge));
        let w = SendWqe::default();
        assert_eq!(
            w.encode(0, 0, &mut buf[..63]),
            Err(WqeEncodeError::BufferTooSmall)
        );
    }

    #[test]
    fn malformed_wqes_are_named() {
        assert_eq!(
            SendWqeView::new_checked(&[0; 15]).err(),
            Some(WqeFormatError::Truncated)
        );
        let mut b = [0u8; 128];
        assert_eq!(
            SendWqeView::new_checked(&b).err(),
            Some(WqeFormatError::DsCount)
        );
        b[4] = 64;
        assert_eq!(
            SendWqeView::new_checked(&b).err(),
            Some(WqeFormatError::DsCount)
        );
        b[4] = 9;
        assert_eq!(
            SendWqeView::new_checked(&b).err(),
            Some(WqeFormatError::Truncated)
        );
        b[4] = 1;
        let v = SendWqeView::new_checked(&b).unwrap();
        assert_eq!(v.eth().err(), Some(WqeFormatError::NoEthSegment));
        // An inline header running past the announced segments.
        b[4] = 2;
        b[16 + 12..16 + 14].copy_from_slice(&20u16.to_le_bytes());
        let v = SendWqeView::new_checked(&b).unwrap();
        assert_eq!(v.eth().err(), Some(WqeFormatError::InlineHeader));
        b[16 + 12..16 + 14].copy_from_slice(&(MAX_INLINE_HEADER + 1).to_le_bytes());
        b[4] = 63;
        let big = [b.as_slice(), &[0u8; 1024][..]].concat();
        let v = SendWqeView::new_checked(&big).unwrap();
        assert_eq!(v.eth().err(), Some(WqeFormatError::InlineHeader));
    }
}
