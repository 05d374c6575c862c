//! The state a StaR client keeps for its connection (`docs/nic-interface.md` §16.6; Pan et al.,
//! APNet '19, §3.1): the server's QP as the server handed it over — its send and receive queues
//! filled by WQEPs, its CQs — and every request the client sent and is waiting on. The server's
//! NIC keeps none of it. The engine that moves it is the datapath's `roce::star_client`.

use std::collections::VecDeque;

use fld_abi::nic::{Sge, MAX_INLINE_DATA};

/// Scatter/gather entries an operation holds (a WQE's, or a receive WQE's).
pub(crate) const STAR_MAX_SGES: usize = 8;

/// Operations a client works on at once (both sides' WQEs together).
pub(crate) const STAR_MAX_OPS: usize = 64;

/// Request packets a connection keeps outstanding at most (the congestion window's ceiling).
pub(crate) const STAR_MAX_WINDOW: u32 = 256;
/// The congestion window a connection starts with, in packets.
pub(crate) const STAR_INITIAL_WINDOW: u32 = 16;

/// A small fixed list of scatter/gather entries: no allocation per operation.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SgeList {
    pub n: u8,
    pub sges: [Sge; STAR_MAX_SGES],
}

impl SgeList {
    /// The list of `sges`; `None` when there are more than [`STAR_MAX_SGES`].
    pub fn of(sges: impl Iterator<Item = Sge>) -> Option<Self> {
        let mut l = SgeList::default();
        for s in sges {
            *l.sges.get_mut(usize::from(l.n))? = s;
            l.n += 1;
        }
        Some(l)
    }

    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..usize::from(self.n)]
    }

    pub fn total(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.length)).sum()
    }

    /// The entry holding byte `offset` of the list, the offset inside it and how many bytes of
    /// the entry follow; `None` past the end.
    pub fn at(&self, offset: u32) -> Option<(Sge, u32, u32)> {
        let mut skip = offset;
        for s in self.as_slice() {
            if skip < s.length {
                return Some((*s, skip, s.length - skip));
            }
            skip -= s.length;
        }
        None
    }
}

/// A send WQE the server posted, as its WQEP carried it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerWqe {
    pub index: u16,
    pub opcode: u8,
    pub signaled: bool,
    pub imm: u32,
    /// WRITE and READ: the client memory it names.
    pub remote: (u64, u32),
    /// The server's buffers (server keys and virtual addresses).
    pub sges: SgeList,
    /// Inline data the WQE carries (`inline_len` bytes).
    pub inline_len: u16,
    pub inline: [u8; MAX_INLINE_DATA],
}

/// A receive WQE the server posted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServerRecv {
    pub index: u16,
    pub sges: SgeList,
}

/// What an operation moves, and which way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// The client's WRITE: RDPs into the server's memory.
    ClientWrite,
    /// The client's SEND: RDPs into a server receive WQE's buffers, then a CQEP to the server's
    /// receive CQ.
    ClientSend,
    /// The client's READ: GDs, the SDPs' bytes into the client's buffers.
    ClientRead,
    /// The server's WRITE: GDs for the server's bytes, written into the client's memory, then a
    /// CQEP to the server's send CQ.
    ServerWrite,
    /// The server's SEND: GDs, the bytes into a client receive WQE's buffers, then a CQEP.
    ServerSend,
    /// The server's READ: the client's bytes in RDPs into the server's buffers, then a CQEP.
    ServerRead,
}

impl OpKind {
    /// Whether its data travels in RDPs (client to server) rather than GD/SDP pairs.
    pub fn pushes(self) -> bool {
        matches!(
            self,
            OpKind::ClientWrite | OpKind::ClientSend | OpKind::ServerRead
        )
    }
}

/// The completion a client WQE is owed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientWqe {
    pub wqe_counter: u32,
    pub wqebbs: u32,
    pub wqe_index: u16,
    pub opcode: u8,
    pub signaled: bool,
}

/// Where an operation's CQEP stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CqepState {
    /// The operation owes the server no completion.
    None,
    /// Owed, not sent yet.
    Due,
    /// Sent; waiting for its EA.
    Sent,
    Acked,
}

/// One operation of either side in progress.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StarOp {
    pub id: u64,
    pub kind: OpKind,
    pub length: u32,
    /// Data bytes whose packets went out at least once, and bytes answered (RA or SDP).
    pub sent: u32,
    pub acked: u32,
    /// The client's buffers: its WQE's gather or scatter list, or (server SEND) its receive WQE.
    pub local: SgeList,
    /// Inline data of a client WQE.
    pub inline_len: u16,
    /// WRITE and READ: the other side's memory (client op: the server's; server op: the
    /// client's) as virtual address and key.
    pub remote: (u64, u32),
    /// The server's buffers: its receive WQE's (client SEND) or its send WQE's.
    pub server: SgeList,
    pub client_wqe: Option<ClientWqe>,
    /// Server SEND: the client receive WQE's counter.
    pub client_recv: Option<u32>,
    /// The server WQE's index and opcode (its CQEP's `wqe_counter` and `wqe_opcode`).
    pub server_index: u16,
    pub server_opcode: u8,
    pub imm: Option<u32>,
    pub cqep: CqepState,
    /// The element sequence number its CQEP carries (assigned when it falls due).
    pub cqep_seq: u32,
    /// The client's own completion was written.
    pub client_done: bool,
    pub status: u8,
}

/// What a request packet in flight carries, so it can be sent again exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carries {
    /// Bytes `[offset, offset + len)` of operation `op`'s data (an RDP or a GD).
    Data { offset: u32, len: u32 },
    /// Operation `op`'s CQEP.
    Cqep,
}

/// A request packet sent and not yet answered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    pub psn: u32,
    pub op: u64,
    pub carries: Carries,
    pub answered: bool,
    /// Answers to later requests seen while this one had none (a loss shows as three).
    pub passed: u8,
    /// Taken for lost: the next poll sends it again.
    pub resend: bool,
}

/// A StaR client's connection state (`QueuePair::star`).
#[derive(Clone, Debug)]
pub(crate) struct StarClient {
    pub server_send_cqn: u32,
    pub server_recv_cqn: u32,
    /// The server's queues, as its WQEPs filled them.
    pub server_sq: VecDeque<ServerWqe>,
    pub server_rq: VecDeque<ServerRecv>,
    /// The sequence number of the next WQEP expected.
    pub next_wqep: u32,
    /// The PSN of the next request packet (RDP, GD, CQEP).
    pub next_psn: u32,
    /// Requests sent and not answered, oldest first (PSN order).
    pub window: VecDeque<Pending>,
    /// Operations in progress, oldest first; ids count up from `first_op`.
    pub ops: VecDeque<StarOp>,
    pub next_op_id: u64,
    /// Congestion window in 1/256 packets; the PSN before which no second cut is made.
    pub cwnd: u32,
    pub cut_until: Option<u32>,
    /// Requests marked for fast retransmit and not yet sent again (so a poll with none marked
    /// does not walk the window).
    pub marked_lost: u32,
    /// When the oldest unanswered request is sent again.
    pub deadline: Option<u64>,
    /// The element sequence number of the next CQEP (the CQE's `metadata`).
    pub next_cqep: u32,
    /// The function's RQ the server's memory-table updates go to (§16.6); none: refused.
    pub update_rq: Option<u32>,
}

impl StarClient {
    /// A new request of operation `op` carrying `carries`: its PSN, and in the window, tracked
    /// before it leaves (its answer may arrive while it is sent, from a server on this NIC).
    pub fn track(&mut self, op: u64, carries: Carries) -> u32 {
        let psn = self.next_psn;
        self.next_psn = fld_abi::wire::roce::psn_add(psn, 1);
        self.window.push_back(Pending {
            psn,
            op,
            carries,
            answered: false,
            passed: 0,
            resend: false,
        });
        psn
    }

    pub fn new(server_send_cqn: u32, server_recv_cqn: u32, update_rq: Option<u32>) -> Self {
        StarClient {
            update_rq,
            server_send_cqn,
            server_recv_cqn,
            server_sq: VecDeque::new(),
            server_rq: VecDeque::new(),
            next_wqep: 0,
            next_psn: 0,
            window: VecDeque::with_capacity(STAR_MAX_WINDOW as usize),
            ops: VecDeque::with_capacity(STAR_MAX_OPS),
            next_op_id: 0,
            cwnd: STAR_INITIAL_WINDOW << 8,
            cut_until: None,
            marked_lost: 0,
            deadline: None,
            next_cqep: 0,
        }
    }

    /// Back to the start (a QP's move to RESET), keeping the server's CQs.
    pub fn reset(&mut self) {
        *self = StarClient::new(self.server_send_cqn, self.server_recv_cqn, self.update_rq);
    }

    pub fn op_mut(&mut self, id: u64) -> Option<&mut StarOp> {
        let first = self.ops.front()?.id;
        self.ops.get_mut(id.checked_sub(first)? as usize)
    }

    pub fn window_packets(&self) -> u32 {
        (self.cwnd >> 8).clamp(1, STAR_MAX_WINDOW)
    }
}
