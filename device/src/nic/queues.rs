//! The NIC's queue objects as the hardware keeps them (`docs/nic-interface.md` §5-8): event and
//! completion queues share one ring type — producer and consumer counters, owner bits, the
//! consumer doorbell with its arm sequence number — and send and receive queues keep their
//! consumer counters and state. Every object belongs to the host function that created it and
//! lives in a numbered [`Slab`].

use fld_abi::nic::{db, owner_bit, CmdStatus, QueryCqOut, QueueState};
use zerocopy::little_endian::U32;

/// A ring the device produces into and software consumes from: an EQ or a CQ. Counters are
/// free-running; the consumer counter is the 24 bits the driver last wrote to the doorbell.
#[derive(Clone)]
pub(crate) struct CompletionRing {
    pub addr: u64,
    pub log_size: u8,
    /// Entries written.
    pub pc: u32,
    /// Entries software reported consumed.
    pub ci: u32,
    /// The next entry raises an event (CQ) or an interrupt (EQ).
    pub armed: bool,
    /// The doorbell word last read, and the arm sequence number last acted on: an arm is a word
    /// with the ARM bit and a new sequence number.
    last_db: u32,
    arm_sn: u32,
    /// Entries lost because the ring was full or unreachable.
    pub overflows: u32,
}

/// What a consumer doorbell word asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArmRequest {
    /// A consumer update only (or a repeat of the last arm).
    None,
    /// Armed: the next entry fires.
    Armed,
    /// Armed behind the producer: entries are already waiting, so it fires now (and stays
    /// disarmed), as no completion may be missed.
    FireNow,
}

impl CompletionRing {
    pub fn new(addr: u64, log_size: u8) -> Self {
        CompletionRing {
            addr,
            log_size,
            pc: 0,
            ci: 0,
            armed: false,
            last_db: 0,
            arm_sn: 0,
            overflows: 0,
        }
    }

    #[inline]
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// Free entries, from the consumer counter the driver last reported (24-bit, wrapping).
    #[inline]
    pub fn room(&self) -> u32 {
        self.size()
            .saturating_sub(self.pc.wrapping_sub(self.ci) & db::CI_MASK)
    }

    /// Entries written and not yet consumed.
    #[inline]
    pub fn pending(&self) -> bool {
        self.pc.wrapping_sub(self.ci) & db::CI_MASK != 0
    }

    /// Bus address and owner bit of the entry the producer writes next.
    #[inline]
    pub fn next_slot(&self, entry_size: usize) -> (u64, u8) {
        let index = self.pc & (self.size() - 1);
        (
            self.addr + index as u64 * entry_size as u64,
            owner_bit(self.pc, self.log_size),
        )
    }

    /// Counts the entry just written; returns whether it must fire (the ring was armed).
    #[inline]
    pub fn produced(&mut self) -> bool {
        self.pc = self.pc.wrapping_add(1);
        std::mem::take(&mut self.armed)
    }

    /// Applies the ring's doorbell word `w`; `None` when it has not changed since last time.
    pub fn consumer_doorbell(&mut self, w: u32) -> Option<ArmRequest> {
        if w == self.last_db {
            return None;
        }
        self.last_db = w;
        let word = db::consumer_word(w);
        self.ci = word.ci;
        if !word.arm || word.arm_sn == self.arm_sn {
            return Some(ArmRequest::None);
        }
        self.arm_sn = word.arm_sn;
        if self.pending() {
            self.armed = false;
            Some(ArmRequest::FireNow)
        } else {
            self.armed = true;
            Some(ArmRequest::Armed)
        }
    }

    /// QUERY_EQ / QUERY_CQ result.
    pub fn status(&self) -> QueryCqOut {
        QueryCqOut {
            producer_counter: U32::new(self.pc),
            consumer_counter: U32::new(self.ci),
            log_size: self.log_size,
            armed: self.armed as u8,
            state: QueueState::Ready as u8,
            rsvd: 0,
            overflows: U32::new(self.overflows),
        }
    }
}

/// Event queue: completion and asynchronous events, an MSI-X vector when armed.
#[derive(Clone)]
pub(crate) struct EventQueue {
    pub owner: u16,
    pub ring: CompletionRing,
    pub vector: u16,
    /// CQs reporting here.
    pub refs: u32,
}

/// Completion queue: CQEs of SQs and RQs, an event on its EQ when armed.
#[derive(Clone)]
pub(crate) struct CompletionQueue {
    pub owner: u16,
    pub ring: CompletionRing,
    pub eqn: u32,
    /// SQs and RQs completing here.
    pub refs: u32,
}

#[derive(Clone)]
pub(crate) struct SendQueue {
    pub owner: u16,
    pub addr: u64,
    pub log_size: u8,
    pub cqn: u32,
    pub signal_all: bool,
    /// WQE basic blocks consumed.
    pub ci: u32,
    pub state: QueueState,
    pub packets: u64,
    pub bytes: u64,
    /// WQEs taken from the SQ's WQE-by-MMIO buffer.
    pub wqes_by_mmio: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RqKind {
    Regular,
    Striding {
        log_stride_size: u8,
        log_strides: u8,
    },
}

/// The striding WQE being filled.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpenWqe {
    pub addr: u64,
    pub next_stride: u32,
}

/// Receive WQEs an RQ keeps on chip (`docs/nic-interface.md` §7.5): one 64-byte read brings
/// four 16-byte WQEs.
pub(crate) const RX_PREFETCH_DEPTH: usize = 4;

/// The receive WQEs read ahead for an RQ: `wqes[..len]` are the WQEs at counters
/// `first..first + len` of their RQ, read after the doorbell that posted them.
#[derive(Clone, Copy, Default)]
pub(crate) struct RecvPrefetch {
    pub wqes: [fld_abi::nic::RecvWqe; RX_PREFETCH_DEPTH],
    pub first: u32,
    pub len: usize,
}

impl RecvPrefetch {
    /// The WQE at counter `counter`, taken off the front; anything held for other counters is
    /// dropped (it would be stale).
    pub fn take(&mut self, counter: u32) -> Option<fld_abi::nic::RecvWqe> {
        if self.len == 0 || self.first != counter {
            self.len = 0;
            return None;
        }
        let w = self.wqes[0];
        self.wqes.copy_within(1..self.len, 0);
        self.len -= 1;
        self.first = self.first.wrapping_add(1);
        Some(w)
    }
}

impl ReceiveQueue {
    /// The counter of the next receive WQE the RQ will fetch: the one after the striding WQE
    /// being filled, if there is one.
    pub fn next_fetch(&self) -> u32 {
        self.ci.wrapping_add(u32::from(self.open.is_some()))
    }
}

#[derive(Clone)]
pub(crate) struct ReceiveQueue {
    pub owner: u16,
    pub addr: u64,
    pub log_size: u8,
    pub cqn: u32,
    pub kind: RqKind,
    /// WQEs consumed (a striding WQE counts when its last stride is used).
    pub ci: u32,
    pub open: Option<OpenWqe>,
    /// WQEs from `ci` on, read ahead.
    pub prefetched: RecvPrefetch,
    pub state: QueueState,
    /// Flow entries and RSS groups pointing here.
    pub refs: u32,
    pub packets: u64,
    pub bytes: u64,
    pub out_of_buffer: u64,
    pub oversize_drops: u64,
    pub truncated: u64,
    /// Receive WQEs taken from the read-ahead instead of fetched when a frame arrived.
    pub read_ahead_hits: u64,
}

/// An object created by, and visible only to, one host function.
pub(crate) trait Owned {
    fn owner(&self) -> u16;
}

macro_rules! owned {
    ($($t:ty),*) => {$(
        impl Owned for $t {
            fn owner(&self) -> u16 {
                self.owner
            }
        }
    )*};
}
owned!(EventQueue, CompletionQueue, SendQueue, ReceiveQueue);

/// An object other objects point at (a CQ's EQ, an SQ's or RQ's CQ, an RSS group's RQs): it
/// cannot be destroyed while `refs` is non-zero.
pub(crate) trait Referenced {
    fn refs_mut(&mut self) -> &mut u32;
}

macro_rules! referenced {
    ($($t:ty),*) => {$(
        impl Referenced for $t {
            fn refs_mut(&mut self) -> &mut u32 {
                &mut self.refs
            }
        }
    )*};
}
referenced!(EventQueue, CompletionQueue, ReceiveQueue);

/// A table of numbered objects; numbers are indices and are reused after destroy.
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    limit: u32,
}

impl<T: Clone> Clone for Slab<T> {
    fn clone(&self) -> Self {
        Slab {
            items: self.items.clone(),
            limit: self.limit,
        }
    }

    /// Into the table's existing storage (a snapshot's restore, once per fuzz input).
    fn clone_from(&mut self, source: &Self) {
        self.items.clone_from(&source.items);
        self.limit = source.limit;
    }
}

impl<T> Slab<T> {
    pub fn new(limit: u32) -> Self {
        Slab {
            items: Vec::new(),
            limit,
        }
    }
    pub fn insert(&mut self, v: T) -> Option<u32> {
        if let Some(i) = self.items.iter().position(|x| x.is_none()) {
            self.items[i] = Some(v);
            return Some(i as u32);
        }
        if self.items.len() as u32 >= self.limit {
            return None;
        }
        self.items.push(Some(v));
        Some(self.items.len() as u32 - 1)
    }
    #[inline]
    pub fn get(&self, id: u32) -> Option<&T> {
        self.items.get(id as usize)?.as_ref()
    }
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        self.items.get_mut(id as usize)?.as_mut()
    }
    pub fn remove(&mut self, id: u32) -> Option<T> {
        self.items.get_mut(id as usize)?.take()
    }
    /// The objects that exist now.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.items.iter().flatten()
    }
    /// Objects that exist now.
    pub fn live(&self) -> u32 {
        self.items.iter().filter(|x| x.is_some()).count() as u32
    }
    /// Highest number ever handed out, plus one.
    pub fn capacity(&self) -> u32 {
        self.items.len() as u32
    }
}

impl<T: Owned> Slab<T> {
    /// Object `id` if `function` owns it; a command naming anything else gets BAD_RESOURCE.
    pub fn owned(&self, id: u32, function: u16) -> Result<&T, (CmdStatus, u32)> {
        self.get(id)
            .filter(|q| q.owner() == function)
            .ok_or((CmdStatus::BadResource, id))
    }

    pub fn owned_mut(&mut self, id: u32, function: u16) -> Result<&mut T, (CmdStatus, u32)> {
        self.get_mut(id)
            .filter(|q| q.owner() == function)
            .ok_or((CmdStatus::BadResource, id))
    }

    /// Removes object `id` of `function` and returns it, unless something still refers to it
    /// (RESOURCE_BUSY with the reference count as syndrome).
    pub fn take_unreferenced(&mut self, id: u32, function: u16) -> Result<T, (CmdStatus, u32)>
    where
        T: Referenced,
    {
        let refs = *self.owned_mut(id, function)?.refs_mut();
        if refs != 0 {
            return Err((CmdStatus::ResourceBusy, refs));
        }
        self.remove(id).ok_or((CmdStatus::BadResource, id))
    }

    pub fn remove_owned_by(&mut self, function: u16) {
        for slot in self.items.iter_mut() {
            if slot.as_ref().is_some_and(|q| q.owner() == function) {
                *slot = None;
            }
        }
    }
}

impl<T: Referenced> Slab<T> {
    /// One more object points at `id` (if it exists).
    pub fn add_ref(&mut self, id: u32) {
        if let Some(o) = self.get_mut(id) {
            *o.refs_mut() += 1;
        }
    }

    /// One object fewer points at `id`.
    pub fn drop_ref(&mut self, id: u32) {
        if let Some(o) = self.get_mut(id) {
            let r = o.refs_mut();
            *r = r.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arm_fires_once_per_sequence_number_and_at_once_behind_the_producer() {
        let mut r = CompletionRing::new(0x1000, 2);
        assert_eq!(r.consumer_doorbell(0), None, "unchanged word");
        assert_eq!(
            r.consumer_doorbell(db::ci_value(0, 1, true)),
            Some(ArmRequest::Armed)
        );
        assert!(r.produced(), "armed: the first entry fires");
        assert!(!r.produced(), "and only the first");
        // The same arm again (a consumer update repeating its bits) does not re-arm.
        assert_eq!(
            r.consumer_doorbell(db::ci_value(1, 1, true)),
            Some(ArmRequest::None)
        );
        // A new arm with an entry still unconsumed fires immediately.
        assert_eq!(
            r.consumer_doorbell(db::ci_value(1, 2, true)),
            Some(ArmRequest::FireNow)
        );
        assert!(!r.armed);
        assert_eq!(r.room(), 3);
        assert_eq!(r.next_slot(64), (0x1000 + 2 * 64, 0));
        for _ in 0..3 {
            r.produced();
        }
        assert_eq!((r.room(), r.next_slot(64)), (0, (0x1000 + 64, 1)));
    }
}
