//! Completions and events (`docs/nic-interface.md` §7-8): 64-byte CQEs and EQEs whose last byte
//! carries the owner bit (and, in a CQE, the opcode). Software initialises a ring with
//! [`INVALID_OWNER_BYTE`] in every entry; the device writes each entry with the owner bit of its
//! pass over the ring ([`owner_bit`]), so software sees a new entry when the bit flips.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const CQE_SIZE: usize = 64;
pub const EQE_SIZE: usize = 64;
/// Offset of the owner byte (`op_own` / `owner`) in a CQE or EQE.
pub const OWNER_BYTE: usize = CQE_SIZE - 1;

/// CQE opcodes ([`Cqe::opcode`]).
pub const CQE_REQ: u8 = 0x0;
/// A QP's receive: an RDMA WRITE with immediate consumed a receive WQE (no data placed in it).
pub const CQE_RESP_WRITE_IMM: u8 = 0x1;
pub const CQE_RESP_SEND: u8 = 0x2;
/// A QP's receive: a SEND with immediate.
pub const CQE_RESP_SEND_IMM: u8 = 0x3;
/// StaR (`docs/nic-interface.md` §16): an element ACK for a WQEP reached the function's control
/// CQ. `qn` is the QP number the EA named, `byte_count` the acknowledged sequence number.
pub const CQE_STAR_EA: u8 = 0x4;
/// StaR: a StaR server's memory-table update (a region registered or deregistered) reached the
/// client's update RQ. `qn` is the client QP of the connection; the receive buffer holds the
/// update (`fld_abi::wire::roce::star::StarRegionUpdate`, `byte_count` bytes).
pub const CQE_STAR_REGION: u8 = 0x5;
/// uRDMA's in-RNIC unload path (§18): an RDMA WRITE was written to the QP's staging ring.
/// `wqe_counter` is the slot's counter (16 bits, wrapping), `byte_count` the WRITE's data
/// bytes, `imm` its rkey; no receive WQE was taken.
pub const CQE_RESP_WRITE_STAGED: u8 = 0x6;
pub const CQE_REQ_ERR: u8 = 0xd;
pub const CQE_RESP_ERR: u8 = 0xe;
/// Never written by the device: software initialises rings with it.
pub const CQE_INVALID: u8 = 0xf;

/// The owner byte of an entry nobody has written: invalid opcode, owner bit 1 (the device's
/// first pass writes owner 0).
pub const INVALID_OWNER_BYTE: u8 = op_own(CQE_INVALID, 1);

/// Packs a CQE's opcode (bits 4..8) and owner bit (bit 0) into its last byte.
pub const fn op_own(opcode: u8, owner: u8) -> u8 {
    (opcode << 4) | (owner & 1)
}

/// The owner bit value the device writes at producer counter `pc` of a ring of `2^log_size`.
pub const fn owner_bit(pc: u32, log_size: u8) -> u8 {
    ((pc >> log_size) & 1) as u8
}

/// Whether the entry whose owner byte is `byte` was written by the device on the pass of consumer
/// counter `ci` (ring of `2^log_size`).
pub const fn entry_is_new(byte: u8, ci: u32, log_size: u8) -> bool {
    byte & 1 == owner_bit(ci, log_size) && byte >> 4 != CQE_INVALID
}

/// CQE flag bits ([`Cqe::flags`]).
pub mod cqe_flags {
    /// The packet was longer than the regular RQ buffer; `byte_count` is the full length.
    pub const TRUNCATED: u8 = 1 << 0;
    /// Striding RQ: no packet; the remaining `consumed_strides` of the WQE are released.
    pub const FILLER: u8 = 1 << 1;
    /// Last CQE of a striding WQE: the buffer may be reposted.
    pub const WQE_DONE: u8 = 1 << 2;
    /// The CQE is a queue pair's: `qn` is a QPN, `syndrome` an [`crate::nic::rdma_status`],
    /// `wqe_opcode` (requester) the completed WQE's opcode, `imm` the immediate data.
    pub const QP: u8 = 1 << 3;
    /// A QP's receive CQE whose WQE came from the QP's shared receive queue.
    pub const SRQ: u8 = 1 << 4;
    /// A QP's receive CQE of a message sent with the solicited-event bit.
    pub const SOLICITED: u8 = 1 << 5;
    /// Multi-packet RQ CQE of a QP: the packet starts its message.
    pub const MSG_FIRST: u8 = 1 << 6;
    /// Multi-packet RQ CQE of a QP: the packet ends its message (with MSG_FIRST: the only one).
    pub const MSG_LAST: u8 = 1 << 7;
}

/// Checksum/parse results ([`Cqe::csum`]).
pub mod cqe_csum {
    pub const L3_PRESENT: u8 = 1 << 0;
    pub const L3_OK: u8 = 1 << 1;
    pub const L4_PRESENT: u8 = 1 << 2;
    pub const L4_OK: u8 = 1 << 3;
    pub const IPV6: u8 = 1 << 4;
    pub const TCP: u8 = 1 << 5;
    pub const UDP: u8 = 1 << 6;
    pub const IP_FRAGMENT: u8 = 1 << 7;
}

/// Error syndromes ([`Cqe::syndrome`]) in error CQEs.
pub mod syndrome {
    /// A gather/scatter address is outside DMA-mapped memory.
    pub const DMA_ERROR: u8 = 0x01;
    /// Malformed WQE: bad opcode, ds_count, inline size or lkey.
    pub const BAD_WQE: u8 = 0x02;
    /// The doorbell announced more WQEs than the ring holds.
    pub const DOORBELL_OVERFLOW: u8 = 0x03;
    /// The frame is shorter than an Ethernet header or longer than the MTU.
    pub const BAD_LENGTH: u8 = 0x04;
    /// Striding RQ WQE's byte count does not cover its strides.
    pub const BAD_RECV_WQE: u8 = 0x05;
}

/// Completion queue entry.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
pub struct Cqe {
    /// Flow tag of the steering rule that delivered the packet (0 if none).
    pub flow_tag: U32,
    /// Toeplitz hash when the packet was steered by an RSS group (0 otherwise).
    pub rss_hash: U32,
    /// Received length (receive) or sent length (send).
    pub byte_count: U32,
    /// Send: the WQE index of the control segment. Receive: the RQ WQE counter.
    pub wqe_counter: U16,
    /// Striding RQ: first stride of the packet within the WQE.
    pub stride_index: U16,
    /// Striding RQ: strides the packet (or filler) occupies.
    pub consumed_strides: U16,
    pub csum: u8,
    pub flags: u8,
    /// SQ or RQ number.
    pub qn: U32,
    /// Device timestamp in nanoseconds.
    pub timestamp: U64,
    /// Metadata register value at delivery.
    pub metadata: U32,
    pub vport: U16,
    /// QP receive CQEs: the immediate data of SEND/WRITE with immediate (host order).
    pub imm: U32,
    /// QP requester CQEs: the opcode of the completed WQE.
    pub wqe_opcode: u8,
    pub rsvd: [u8; 18],
    /// Error syndrome for error opcodes.
    pub syndrome: u8,
    pub rsvd2: u8,
    /// Opcode in bits 4..8, owner bit in bit 0 ([`op_own`]).
    pub op_own: u8,
}

impl Cqe {
    pub fn opcode(&self) -> u8 {
        self.op_own >> 4
    }
    pub fn owner(&self) -> u8 {
        self.op_own & 1
    }
    pub fn set_op_own(&mut self, opcode: u8, owner: u8) {
        self.op_own = op_own(opcode, owner);
    }
    /// A send completion (successful or not).
    pub fn is_send(&self) -> bool {
        matches!(self.opcode(), CQE_REQ | CQE_REQ_ERR)
    }
    /// An error completion.
    pub fn is_error(&self) -> bool {
        matches!(self.opcode(), CQE_REQ_ERR | CQE_RESP_ERR)
    }
}

/// EQE types.
pub const EQE_COMPLETION: u8 = 0x00;
/// A queue entered the error state; `data` is the queue number, `subtype` the kind.
pub const EQE_QUEUE_ERROR: u8 = 0x13;
/// A CQ overflowed (first lost CQE); `data` is the CQ number.
pub const EQE_CQ_ERROR: u8 = 0x04;
/// [`EQE_QUEUE_ERROR`] subtypes.
pub const QUEUE_ERROR_SQ: u8 = 1;
pub const QUEUE_ERROR_RQ: u8 = 2;
/// An asynchronous event of a queue pair; `subtype` a [`crate::nic::qp_event`], `data` the QPN.
/// It goes to the EQ of the QP's send CQ.
pub const EQE_QP_EVENT: u8 = 0x20;
/// A shared receive queue fell below its armed limit; `data` is the SRQ number.
pub const EQE_SRQ_LIMIT: u8 = 0x21;

/// Event queue entry.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
pub struct Eqe {
    pub event_type: u8,
    pub subtype: u8,
    pub rsvd: [u8; 2],
    /// CQ number for completion events.
    pub data: U32,
    pub rsvd2: [u8; 55],
    /// Owner bit in bit 0.
    pub owner: u8,
}

impl Eqe {
    pub fn new(event_type: u8, subtype: u8, data: u32, owner: u8) -> Self {
        Eqe {
            event_type,
            subtype,
            data: U32::new(data),
            owner: owner & 1,
            ..Default::default()
        }
    }
}

/// Layouts with arrays longer than 32 bytes default to all zeroes.
macro_rules! zeroed_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                <$t as zerocopy::FromZeros>::new_zeroed()
            }
        }
    )*};
}
zeroed_default!(Eqe, Cqe);

const _: () = {
    assert!(core::mem::size_of::<Cqe>() == CQE_SIZE);
    assert!(core::mem::size_of::<Eqe>() == EQE_SIZE);
    assert!(core::mem::offset_of!(Cqe, op_own) == OWNER_BYTE);
    assert!(core::mem::offset_of!(Eqe, owner) == OWNER_BYTE);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_byte_round_trips_and_flips_per_pass() {
        let mut c = Cqe::default();
        c.set_op_own(CQE_RESP_ERR, 1);
        assert_eq!((c.opcode(), c.owner(), c.op_own), (CQE_RESP_ERR, 1, 0xe1));
        assert!(c.is_error() && !c.is_send());
        assert_eq!(INVALID_OWNER_BYTE, 0xf1);
        // Ring of 4: counters 0..4 owner 0, 4..8 owner 1, 8.. owner 0 again.
        let owners: Vec<u8> = (0..10).map(|pc| owner_bit(pc, 2)).collect();
        assert_eq!(owners, [0, 0, 0, 0, 1, 1, 1, 1, 0, 0]);
        assert!(!entry_is_new(INVALID_OWNER_BYTE, 0, 2), "fresh ring");
        assert!(entry_is_new(op_own(CQE_REQ, 0), 0, 2));
        assert!(
            !entry_is_new(op_own(CQE_REQ, 0), 4, 2),
            "stale entry of the last pass"
        );
        assert!(entry_is_new(op_own(CQE_REQ, 1), 4, 2));
    }
}
