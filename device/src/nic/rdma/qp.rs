//! The queue pair context and its state machine (IBA §10.3.1, Figure 124; attribute rules of
//! §11.2.4.2 as the verbs' modify-QP table states them for RC):
//!
//! ```text
//!            +-------+  modify  +------+  modify  +-----+  modify  +-----+  modify  +-----+
//!   create ->| RESET |--------->| INIT |--------->| RTR |--------->| RTS |<-------->| SQD |
//!            +-------+          +------+          +-----+          +-----+          +-----+
//!                ^                                                    ^ modify
//!                |  modify (from any state)                           |
//!                +-------------------- ERR <------ any error        SQE
//! ```
//!
//! RESET → INIT → RTR → RTS in order, each with the attributes the transition requires and no
//! attribute it does not allow; INIT → INIT, RTS → RTS, SQD → SQD and SQD/SQE → RTS change
//! what they allow; any state goes to RESET or ERR. A refused modify leaves the QP unchanged.

use std::collections::VecDeque;

use fld_abi::nic::CmdStatus;
use fld_abi::nic::{
    access, bad_param, mtu_bytes, qp_attr, QpAttr, QpCounters, QpState, MAX_RD_ATOMIC,
    ROCE_ADDRESS_ENTRIES,
};
use fld_abi::wire::roce::{PSN_MASK, QPN_MASK};
use zerocopy::little_endian::U64;

use crate::nic::queues::Owned;

/// A ring of a QP (send or receive) in host memory, consumed by a counter.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QpRing {
    pub addr: u64,
    pub log_size: u8,
    /// Receive rings: log2 bytes per WQE.
    pub log_stride: u8,
}

/// One send WQE the requester started and has not completed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendOp {
    /// Where the WQE starts in the ring (WQE basic-block counter) and how many blocks it takes.
    pub wqe_counter: u32,
    pub wqebbs: u32,
    /// The WQE's own index (its control segment), reported in its CQE.
    pub wqe_index: u16,
    pub opcode: u8,
    pub signaled: bool,
    pub solicited: bool,
    pub imm: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
    /// Message length in bytes.
    pub length: u32,
    /// PSNs `first_psn .. first_psn + packets`: the request packets (SEND/WRITE), or the
    /// responses a READ expects (the request itself uses `first_psn`).
    pub first_psn: u32,
    pub packets: u32,
    /// READ: response packets received in order so far.
    pub responses: u32,
    /// READ and atomics: the response data arrived; the op completes in order.
    pub done: bool,
}

impl SendOp {
    pub fn last_psn(&self) -> u32 {
        (self.first_psn + self.packets - 1) & PSN_MASK
    }
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.opcode,
            fld_abi::nic::WQE_OP_RDMA_READ
                | fld_abi::nic::WQE_OP_ATOMIC_CS
                | fld_abi::nic::WQE_OP_ATOMIC_FA
        )
    }
}

/// Started WQEs a requester holds before its operation queue grows: the queue is sized when
/// the QP is made, so steady traffic allocates nothing (deeper queues grow once, to their
/// high-water mark).
pub(crate) const PREALLOCATED_OPS: usize = 64;

/// The requester half of a QP (IBA §9.7.4–9.7.7 from the sender's side).
#[derive(Clone, Debug, Default)]
pub(crate) struct Requester {
    /// WQE basic-block counter of the next WQE to start.
    pub fetch_counter: u32,
    /// Started, not yet completed, in PSN order.
    pub ops: VecDeque<SendOp>,
    /// The next packet to send: `ops[cursor_op]`, packet `cursor_packet` (past the last op:
    /// start a new WQE).
    pub cursor_op: usize,
    pub cursor_packet: u32,
    /// PSN of the next new packet (one past every PSN ever assigned).
    pub next_psn: u32,
    /// Oldest PSN not yet acknowledged.
    pub unacked_psn: u32,
    /// One past the highest PSN sent (a packet below it is a retransmission).
    pub sent_high: u32,
    pub retry_left: u8,
    pub rnr_retry_left: u8,
    /// Local ACK timer: when it fires with packets unacknowledged, go back to `unacked_psn`.
    pub deadline: Option<u64>,
    /// After an RNR NAK: no packet before this time.
    pub rnr_wait_until: Option<u64>,
    /// Packets sent since the last one asking for an ACK.
    pub since_ack_request: u32,
    /// A gap in READ responses sent the READ again from this PSN: later responses of the old
    /// stream that arrive beyond it are the same loss, not new ones (no retry is spent on them)
    /// until the response at it arrives.
    pub rewound_to: Option<u32>,
    /// An out-of-order QP's selective retransmission (LEFT §3.5): the one packet a sequence
    /// NAK named, sent again before the cursor goes on where it was.
    pub resend: Option<u32>,
    /// An out-of-order QP's ACK that arrived before a READ response or atomic ACK it covers:
    /// applied again once that response is in.
    pub ack_overtook: Option<u32>,
}

impl Responder {
    /// The expected PSN moved: the next gap may be NAKed (or refused) once again.
    pub fn gap_closed(&mut self) {
        self.nak_sent = false;
        self.refused = false;
    }
}

impl Requester {
    /// A requester whose operation queue holds `ops` started WQEs before it grows.
    pub fn with_capacity(ops: usize) -> Self {
        Requester {
            ops: VecDeque::with_capacity(ops),
            ..Default::default()
        }
    }
}

/// What one READ or atomic request the responder executed needs for its responses and for
/// duplicates of it (IBA §9.7.5.1.5: duplicate READs are executed again, duplicate atomics are
/// answered from the saved result).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadAtomic {
    pub first_psn: u32,
    pub packets: u32,
    pub atomic: bool,
    pub va: u64,
    pub rkey: u32,
    pub length: u32,
    /// Response packets sent so far (READ) / the ATOMIC ACK sent.
    pub sent: u32,
    /// Atomics: the value the target held.
    pub original: u64,
}

/// The message being received.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Inbound {
    Send {
        /// Receive WQE counter (RQ or SRQ) and where in the RQ/SRQ ring it sits.
        wqe_counter: u32,
        srq: bool,
        received: u32,
    },
    Write {
        va: u64,
        rkey: u32,
        remaining: u32,
        total: u32,
    },
}

/// A response the responder owes: ACK, NAK or RNR NAK at `psn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owed {
    pub psn: u32,
    pub syndrome: u8,
}

/// The responder half of a QP.
#[derive(Clone, Debug, Default)]
pub(crate) struct Responder {
    pub expected_psn: u32,
    pub msn: u32,
    pub inbound: Option<Inbound>,
    /// The ACK/NAK to send once the read responses before it are out (coalesced: a later one
    /// replaces an earlier one).
    pub owed: Option<Owed>,
    /// A sequence-error NAK was sent; until the expected PSN arrives, later packets are dropped
    /// without another NAK (IBA 9.7.5.1.2: one NAK per sequence error).
    pub nak_sent: bool,
    /// An out-of-order QP refused a packet ahead for lack of room and owes (or sent) an RNR NAK
    /// at the expected PSN; until that PSN arrives, nothing more is NAKed.
    pub refused: bool,
    /// READ and atomic requests executed, oldest first, at most `max_dest_rd_atomic`.
    pub reads: VecDeque<ReadAtomic>,
    /// After the owed NAK goes out, the QP enters the error state (remote access and invalid
    /// request errors are fatal for an RC responder).
    pub error_after_nak: bool,
    /// The first packet arrived in RTR (the communication-established event was raised).
    pub established: bool,
}

/// A reliable-connection queue pair.
#[derive(Clone)]
pub(crate) struct QueuePair {
    pub owner: u16,
    pub pd: u32,
    pub state: QpState,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub srq: Option<u32>,
    /// Receives land packet by packet in this striding RQ (`QP_FLAG_MULTI_PACKET_RQ`).
    pub packet_rq: Option<u32>,
    pub sq: QpRing,
    pub rq: QpRing,
    /// Receive WQEs consumed.
    pub rq_counter: u32,
    pub signal_all: bool,
    /// `QP_FLAG_OUT_OF_ORDER`: packets ahead go to the reorder unit, and a sequence NAK
    /// resends one packet (LEFT §3.1, §3.5).
    pub out_of_order: bool,
    pub attr: QpAttr,
    pub req: Requester,
    pub resp: Responder,
    pub counters: Counters,
    /// SQD: the drained event was raised.
    pub drained_reported: bool,
    /// ERR with an SRQ: the last-WQE-reached event was raised.
    pub last_wqe_reported: bool,
    /// The QP's numbers in the UDP source port (A17.3.2 entropy), fixed at RTR.
    pub src_port: u16,
    /// A StaR client's connection state (SET_STAR_PEER; `docs/nic-interface.md` §16.6).
    /// uRDMA's in-RNIC unload path: the QP's staging ring (SET_QP_STAGING).
    pub staging: Option<super::staging::Staging>,
    pub star: Option<Box<super::star::StarClient>>,
    /// The deadline the engine's timer list holds for this QP (`Rdma::timers`).
    pub timer_at: Option<u64>,
}

impl Owned for QueuePair {
    fn owner(&self) -> u16 {
        self.owner
    }
}

/// Transport counters as native integers (QUERY_QP converts them).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    pub retransmitted: u64,
    pub timeouts: u64,
    pub seq_naks_received: u64,
    pub rnr_naks_received: u64,
    pub seq_naks_sent: u64,
    pub rnr_naks_sent: u64,
    pub duplicates: u64,
    pub dropped: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    /// WQE reads the QP's WQE-by-MMIO buffer served (a retransmission may read one again).
    pub wqes_by_mmio: u64,
}

impl Counters {
    pub fn to_abi(self) -> QpCounters {
        let u = U64::new;
        QpCounters {
            packets_sent: u(self.packets_sent),
            bytes_sent: u(self.bytes_sent),
            packets_received: u(self.packets_received),
            bytes_received: u(self.bytes_received),
            retransmitted: u(self.retransmitted),
            timeouts: u(self.timeouts),
            seq_naks_received: u(self.seq_naks_received),
            rnr_naks_received: u(self.rnr_naks_received),
            seq_naks_sent: u(self.seq_naks_sent),
            rnr_naks_sent: u(self.rnr_naks_sent),
            duplicates: u(self.duplicates),
            dropped: u(self.dropped),
            acks_sent: u(self.acks_sent),
            acks_received: u(self.acks_received),
            wqes_by_mmio: u(self.wqes_by_mmio),
        }
    }
}

/// The attributes a transition requires and those it also allows (IBA §11.2.4.2; the verbs'
/// ibv_modify_qp table for RC). `None`: no such transition.
pub(crate) fn transition_rules(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use qp_attr::*;
    use QpState::*;
    let any = CUR_STATE;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (STATE, any),
        (Reset, Init) => (STATE | PKEY_INDEX | PORT | ACCESS_FLAGS, any),
        (Init, Init) => (STATE, any | PKEY_INDEX | PORT | ACCESS_FLAGS),
        (Init, Rtr) => (
            STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            any | ACCESS_FLAGS | PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
            any | ACCESS_FLAGS | MIN_RNR_TIMER,
        ),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (STATE, any | ACCESS_FLAGS | MIN_RNR_TIMER),
        (Rts, Sqd) => (STATE, any),
        (Sqd, Sqd) => (
            STATE,
            any | AV
                | ACCESS_FLAGS
                | PKEY_INDEX
                | MIN_RNR_TIMER
                | TIMEOUT
                | RETRY_CNT
                | RNR_RETRY
                | MAX_QP_RD_ATOMIC
                | MAX_DEST_RD_ATOMIC,
        ),
        _ => return None,
    })
}

const fn lowest_bit(x: u32) -> u32 {
    x & x.wrapping_neg()
}

/// BAD_PARAM with `syndrome`, naming attribute mask bit `bit` in the high 16 bits.
fn bad(syndrome: u32, bit: u32) -> (CmdStatus, u32) {
    (CmdStatus::BadParam, syndrome | (bit.trailing_zeros() << 16))
}

/// Checks a MODIFY_QP against the QP's state and the transition's rules; on success returns the
/// target state. `gid_valid(i)` says whether GID table entry `i` of the QP's function is in use.
pub(crate) fn check_modify(
    state: QpState,
    mask: u32,
    a: &QpAttr,
    gid_valid: impl Fn(u8) -> bool,
) -> Result<QpState, (CmdStatus, u32)> {
    let unknown = mask & !qp_attr::KNOWN;
    if unknown != 0 {
        return Err(bad(bad_param::QP_ATTR_NOT_ALLOWED, lowest_bit(unknown)));
    }
    if mask & qp_attr::CUR_STATE != 0 && QpState::from_u8(a.cur_state) != Some(state) {
        return Err((CmdStatus::BadState, state as u32));
    }
    // Without STATE the QP stays where it is (verbs: a modify of attributes only).
    let to = if mask & qp_attr::STATE != 0 {
        QpState::from_u8(a.qp_state).ok_or(bad(bad_param::QP_ATTR_VALUE, qp_attr::STATE))?
    } else {
        state
    };
    let Some((required, allowed)) = transition_rules(state, to) else {
        return Err((
            CmdStatus::BadState,
            bad_param::QP_TRANSITION | (state as u32) << 16 | (to as u32) << 24,
        ));
    };
    // A modify without STATE is the same-state transition with its rules minus STATE.
    let required = if mask & qp_attr::STATE == 0 {
        required & !qp_attr::STATE
    } else {
        required
    };
    let missing = required & !mask;
    if missing != 0 {
        return Err(bad(bad_param::QP_ATTR_MISSING, lowest_bit(missing)));
    }
    let extra = mask & !(required | allowed);
    if extra != 0 {
        return Err(bad(bad_param::QP_ATTR_NOT_ALLOWED, lowest_bit(extra)));
    }
    check_values(mask, a, gid_valid)?;
    Ok(to)
}

fn check_values(
    mask: u32,
    a: &QpAttr,
    gid_valid: impl Fn(u8) -> bool,
) -> Result<(), (CmdStatus, u32)> {
    use qp_attr::*;
    let checks: [(u32, bool); 13] = [
        (ACCESS_FLAGS, a.access_flags.get() & !access::ALL == 0),
        (
            PKEY_INDEX,
            a.pkey_index.get() < fld_abi::nic::PKEY_TABLE_ENTRIES,
        ),
        (PORT, a.port == 1),
        (
            AV,
            a.sgid_index < ROCE_ADDRESS_ENTRIES as u8
                && gid_valid(a.sgid_index)
                && a.flow_label.get() < 1 << 20,
        ),
        (PATH_MTU, mtu_bytes(a.path_mtu).is_some()),
        (TIMEOUT, a.timeout < 32),
        (RETRY_CNT, a.retry_cnt <= 7),
        (RNR_RETRY, a.rnr_retry <= 7),
        (RQ_PSN, a.rq_psn.get() & !PSN_MASK == 0),
        (SQ_PSN, a.sq_psn.get() & !PSN_MASK == 0),
        (MAX_QP_RD_ATOMIC, a.max_rd_atomic <= MAX_RD_ATOMIC),
        (MAX_DEST_RD_ATOMIC, a.max_dest_rd_atomic <= MAX_RD_ATOMIC),
        (DEST_QPN, a.dest_qpn.get() & !QPN_MASK == 0),
    ];
    for (bit, ok) in checks {
        if mask & bit != 0 && !ok {
            return Err(bad(bad_param::QP_ATTR_VALUE, bit));
        }
    }
    if mask & MIN_RNR_TIMER != 0 && a.min_rnr_timer >= 32 {
        return Err(bad(bad_param::QP_ATTR_VALUE, MIN_RNR_TIMER));
    }
    Ok(())
}

/// Copies the attributes named in `mask` from `new` into `cur`.
pub(crate) fn apply(cur: &mut QpAttr, mask: u32, new: &QpAttr) {
    use qp_attr::*;
    if mask & ACCESS_FLAGS != 0 {
        cur.access_flags = new.access_flags;
    }
    if mask & PKEY_INDEX != 0 {
        cur.pkey_index = new.pkey_index;
    }
    if mask & PORT != 0 {
        cur.port = new.port;
    }
    if mask & AV != 0 {
        cur.sgid_index = new.sgid_index;
        cur.hop_limit = new.hop_limit;
        cur.traffic_class = new.traffic_class;
        cur.flow_label = new.flow_label;
        cur.dgid = new.dgid;
        cur.dmac = new.dmac;
    }
    if mask & PATH_MTU != 0 {
        cur.path_mtu = new.path_mtu;
    }
    if mask & TIMEOUT != 0 {
        cur.timeout = new.timeout;
    }
    if mask & RETRY_CNT != 0 {
        cur.retry_cnt = new.retry_cnt;
    }
    if mask & RNR_RETRY != 0 {
        cur.rnr_retry = new.rnr_retry;
    }
    if mask & RQ_PSN != 0 {
        cur.rq_psn = new.rq_psn;
    }
    if mask & SQ_PSN != 0 {
        cur.sq_psn = new.sq_psn;
    }
    if mask & MAX_QP_RD_ATOMIC != 0 {
        cur.max_rd_atomic = new.max_rd_atomic;
    }
    if mask & MAX_DEST_RD_ATOMIC != 0 {
        cur.max_dest_rd_atomic = new.max_dest_rd_atomic;
    }
    if mask & MIN_RNR_TIMER != 0 {
        cur.min_rnr_timer = new.min_rnr_timer;
    }
    if mask & DEST_QPN != 0 {
        cur.dest_qpn = new.dest_qpn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qp_attr::*;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

    fn attr() -> QpAttr {
        let mut a = QpAttr {
            port: 1,
            path_mtu: 3,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..Default::default()
        };
        a.access_flags.set(access::REMOTE_WRITE);
        a
    }

    fn with_state(mut a: QpAttr, s: QpState) -> QpAttr {
        a.qp_state = s as u8;
        a
    }

    const INIT_MASK: u32 = STATE | PKEY_INDEX | PORT | ACCESS_FLAGS;
    const RTR_MASK: u32 =
        STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    const RTS_MASK: u32 = STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC;

    #[test]
    fn the_connection_sequence_is_accepted_with_exactly_its_attributes() {
        let a = attr();
        let ok = |s, m, to| check_modify(s, m, &with_state(a, to), |_| true);
        assert_eq!(ok(Reset, INIT_MASK, Init), Ok(Init));
        assert_eq!(ok(Init, RTR_MASK, Rtr), Ok(Rtr));
        assert_eq!(ok(Init, RTR_MASK | ACCESS_FLAGS, Rtr), Ok(Rtr));
        assert_eq!(ok(Rtr, RTS_MASK, Rts), Ok(Rts));
        assert_eq!(ok(Rts, STATE, Sqd), Ok(Sqd));
        assert_eq!(ok(Sqd, STATE | TIMEOUT | AV, Sqd), Ok(Sqd));
        assert_eq!(ok(Sqd, STATE, Rts), Ok(Rts));
        assert_eq!(ok(Rts, STATE | MIN_RNR_TIMER, Rts), Ok(Rts));
        for s in [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err] {
            assert_eq!(ok(s, STATE, Reset), Ok(Reset), "{s:?} -> RESET");
            assert_eq!(ok(s, STATE, QpState::Err), Ok(QpState::Err), "{s:?} -> ERR");
        }
        // Attributes only, no state: the same-state rules.
        assert_eq!(ok(Rts, MIN_RNR_TIMER, Rts), Ok(Rts));
    }

    #[test]
    fn missing_extra_and_out_of_range_attributes_are_named() {
        let a = attr();
        let err = |s, m, to| check_modify(s, m, &with_state(a, to), |_| true).unwrap_err();
        // Each required attribute of INIT -> RTR, left out in turn.
        for bit in [
            AV,
            PATH_MTU,
            DEST_QPN,
            RQ_PSN,
            MAX_DEST_RD_ATOMIC,
            MIN_RNR_TIMER,
        ] {
            assert_eq!(
                err(Init, RTR_MASK & !bit, Rtr),
                (
                    CmdStatus::BadParam,
                    bad_param::QP_ATTR_MISSING | bit.trailing_zeros() << 16
                )
            );
        }
        assert_eq!(
            err(Reset, INIT_MASK | SQ_PSN, Init),
            (
                CmdStatus::BadParam,
                bad_param::QP_ATTR_NOT_ALLOWED | SQ_PSN.trailing_zeros() << 16
            )
        );
        // Illegal transitions: skipping a state, going back, SQD from RTR.
        for (from, to) in [
            (Reset, Rtr),
            (Init, Rts),
            (Rts, Rtr),
            (Rtr, Sqd),
            (QpState::Err, Rts),
            (Reset, Sqd),
        ] {
            let (status, syn) = err(from, RTS_MASK, to);
            assert_eq!(status, CmdStatus::BadState, "{from:?} -> {to:?}");
            assert_eq!(syn & 0xffff, bad_param::QP_TRANSITION);
        }
        let mut bad_mtu = with_state(a, Rtr);
        bad_mtu.path_mtu = 6;
        assert_eq!(
            check_modify(Init, RTR_MASK, &bad_mtu, |_| true)
                .unwrap_err()
                .1
                & 0xffff,
            bad_param::QP_ATTR_VALUE
        );
        // A GID index whose entry is not set.
        assert_eq!(
            check_modify(Init, RTR_MASK, &with_state(a, Rtr), |i| i != 0)
                .unwrap_err()
                .1,
            bad_param::QP_ATTR_VALUE | AV.trailing_zeros() << 16
        );
        let mut psn = with_state(a, Rts);
        psn.sq_psn.set(1 << 24);
        assert!(check_modify(Rtr, RTS_MASK, &psn, |_| true).is_err());
        // The state software believes the QP is in must be the real one.
        let mut cur = with_state(a, Rts);
        cur.cur_state = Init as u8;
        assert_eq!(
            check_modify(Rtr, RTS_MASK | CUR_STATE, &cur, |_| true),
            Err((CmdStatus::BadState, Rtr as u32))
        );
    }
}
