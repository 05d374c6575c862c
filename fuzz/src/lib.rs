//! What the fuzz targets share.
//!
//! * For the accelerators' parsers: a transmit stream that checks what an accelerator sends, and
//!   a driver that cuts the fuzzer's input into frames, half of them wrapped in well-formed
//!   Ethernet/IPv4/UDP headers so the parsers see deep inputs.
//! * For every surface a guest writes (cloud-hypervisor style): the input becomes register
//!   writes, command buffers, descriptors and doorbells against a live card driven by the
//!   device crate's driver mock over real host memory, and afterwards the card must still be
//!   sound — no device access outside the DMA-mapped memory (guard bytes around it), and a
//!   reset plus a normal bring-up moves verified traffic ([`assert_nic_recovers`],
//!   [`assert_fld_recovers`]). Every loop is bounded.
//! * One card per kind and process, recycled for every input ([`Kept`],
//!   [`fld_device::mock::MockHost::recycle`]): a conventional reset that clears what the last
//!   input touched costs microseconds, where building a card costs milliseconds. A target whose
//!   inputs all start from the same brought-up card keeps a snapshot of it and returns to that
//!   instead of recycling and bringing it up again by commands ([`prepared`]). Targets that
//!   drive the card through the host library keep their brought-up testbed the same way and
//!   recycle only what an input may change. A recycled card
//!   behaves exactly as a fresh one (the device crate's own test); `FLD_FUZZ_FRESH=1` builds one
//!   for every input anyway, to confirm a finding without recycling.
//! * What every input does alike — the recycle, the bring-up it starts from, the recovery check
//!   it ends with — is hidden from the fuzzer's coverage ([`unobserved`]): the fuzzer is shown
//!   what the input made the card do, and does not spend its time collecting the rest.

use std::any::Any;
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use fld_abi::wire::{ethertype, EthIpv4UdpRepr, EthernetRepr, Ipv4Repr, UdpRepr};
use fld_device::accel::{Accelerator, Credits, Echo, RxMeta, TxMeta, TxRefused, TxStream};
use fld_device::card::CardConfig;
use fld_device::fld::memory_model::MemoryParams;
use fld_device::mock::{MockHost, MockPort, MockSnapshot};
use fld_device::nic::NicConfig;

pub mod coverage;
pub use coverage::unobserved;

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
/// sets a resume table (or, for raw bytes, makes them an FLD-R packet), bits 5-7 the transmit
/// credits before the next poll.
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
        // Raw bytes with bit 4 set arrive as an FLD-R packet instead (queue from the context
        // bits, first/last from bits 1-2), so the accelerators' message reassembly is reached.
        let rdma = (control & 0x11 == 0x10).then_some(fld_device::accel::RdmaRx {
            first: control & 2 != 0,
            last: control & 4 != 0,
            imm: (control & 8 != 0).then_some(u32::from(*lo)),
        });
        let meta = RxMeta {
            queue: if rdma.is_some() {
                u16::from(control >> 1 & 3)
            } else {
                0
            },
            context: u16::from(control >> 1 & 7),
            resume_table: (control & 0x10 != 0).then_some(3),
            csum: 0,
            rss_hash: 0,
            len: frame.len() as u32,
            rdma,
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

/// Any RDMA operation (or none) an accelerator may ask FLD for, read from `input`.
pub fn rdma_op(input: &mut Input<'_>) -> Option<fld_device::accel::RdmaOp> {
    use fld_device::accel::RdmaOp;
    match input.u8() % 5 {
        0 => None,
        1 => Some(RdmaOp::Send),
        2 => Some(RdmaOp::SendImm(input.u32())),
        3 => Some(RdmaOp::Write {
            remote_addr: input.u64(),
            rkey: input.u32(),
        }),
        _ => Some(RdmaOp::WriteImm {
            remote_addr: input.u64(),
            rkey: input.u32(),
            imm: input.u32(),
        }),
    }
}

/// The fuzzer's bytes read as a sequence of values; past the end every read is 0 or empty, so a
/// target never needs to check lengths.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.data.split_at(n.min(self.data.len()));
        self.data = tail;
        head
    }
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let b = self.bytes(N);
        a[..b.len()].copy_from_slice(b);
        a
    }
    pub fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }
    /// One of `choices`, picked by the next byte.
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.u8() as usize % choices.len()]
    }
}

/// Bytes of host memory the targets map: room for a fuzzed phase and for the bring-up after it.
pub const HOST_MEMORY: usize = 2 << 20;

/// Something costly to build (a card, a host, a brought-up testbed) kept for the next input:
/// recycled when taken, returned when dropped, dropped instead after a panic (a finding leaves it
/// in whatever state it found).
pub struct Kept<T: 'static> {
    kind: u32,
    value: Option<T>,
}

/// A mock host kept for the next input, recycled by a conventional reset.
pub type KeptHost = Kept<MockHost>;

thread_local! {
    /// Values between inputs, by kind (and type: each knows its own).
    static KEPT: RefCell<Vec<(u32, Box<dyn Any>)>> = const { RefCell::new(Vec::new()) };
}

/// Whether `FLD_FUZZ_FRESH=1` asks for everything built anew for every input.
fn fresh() -> bool {
    std::env::var_os("FLD_FUZZ_FRESH").is_some_and(|v| v != "0")
}

impl<T: 'static> Kept<T> {
    /// The value of `kind` the last input used, passed through `recycle`, or one `build` makes
    /// (always with `FLD_FUZZ_FRESH=1`).
    ///
    /// The recycling and building are hidden from the fuzzer ([`unobserved`]): they are the same
    /// for every input.
    pub fn take(kind: u32, recycle: impl FnOnce(&mut T), build: impl FnOnce() -> T) -> Kept<T> {
        unobserved(|| Self::recycled_or_built(kind, recycle, build))
    }

    fn recycled_or_built(
        kind: u32,
        recycle: impl FnOnce(&mut T),
        build: impl FnOnce() -> T,
    ) -> Kept<T> {
        let kept = KEPT.with_borrow_mut(|kept| {
            let at = kept.iter().position(|(k, v)| *k == kind && v.is::<T>())?;
            kept.swap_remove(at).1.downcast::<T>().ok()
        });
        let value = match kept {
            Some(mut value) if !fresh() => {
                recycle(&mut value);
                *value
            }
            _ => build(),
        };
        Kept {
            kind,
            value: Some(value),
        }
    }
}

impl<T> Deref for Kept<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value.as_ref().expect("held until dropped")
    }
}

impl<T> DerefMut for Kept<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("held until dropped")
    }
}

impl<T: 'static> Drop for Kept<T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        if let Some(value) = self.value.take() {
            let entry: Box<dyn Any> = Box::new(value);
            KEPT.with_borrow_mut(|kept| kept.push((self.kind, entry)));
        }
    }
}

/// A host kept with what a target brought it up to before its input, and a snapshot of that
/// point ([`prepared`]).
pub struct Prepared<S> {
    pub host: MockHost,
    /// The host brought up, and what the bring-up handed the target.
    brought_up: Option<(MockSnapshot, S)>,
}

/// The host of `kind` brought up by `bring_up` (whose result is handed back): the first input
/// builds the host and brings it up by commands; every later one returns it to a snapshot of
/// that point ([`MockHost::restore`]), which behaves as the same bring-up on a recycled host
/// (the device crate's test) and costs a copy of what the bring-up wrote rather than dozens of
/// commands. A host that cannot be kept ([`MockHost::snapshot`]) is recycled and brought up
/// again for every input, as is every host with `FLD_FUZZ_FRESH=1`.
pub fn prepared<S: Clone + 'static>(
    kind: u32,
    build: impl FnOnce() -> MockHost,
    bring_up: impl FnOnce(&mut MockHost) -> S,
) -> (Kept<Prepared<S>>, S) {
    let mut p = Kept::take(
        kind,
        |p: &mut Prepared<S>| match &p.brought_up {
            Some((snapshot, _)) => p.host.restore(snapshot),
            None => p.host.recycle(),
        },
        || Prepared {
            host: build(),
            brought_up: None,
        },
    );
    if let Some((_, objects)) = &p.brought_up {
        let objects = objects.clone();
        return (p, objects);
    }
    let objects = unobserved(|| {
        let objects = bring_up(&mut p.host);
        if !fresh() {
            p.brought_up = p.host.snapshot().map(|s| (s, objects.clone()));
        }
        objects
    });
    (p, objects)
}

/// Small limits, so that exhaustion paths are a few commands away. An RC requester's window is
/// a few messages too: a full window is reached in a few posts, and a retransmission timeout,
/// which sends the whole window again, costs an input 32 packets rather than 256.
fn small_limits() -> NicConfig {
    NicConfig {
        max_sqs: 16,
        max_rqs: 16,
        max_cqs: 16,
        max_eqs: 8,
        max_flow_tables: 8,
        max_flow_entries: 32,
        max_rss_groups: 4,
        rc_window: SMALL_RC_WINDOW,
        ..Default::default()
    }
}

/// The RC requester window of the fuzzed cards.
const SMALL_RC_WINDOW: u32 = 32;

/// A NIC with small limits.
pub fn small_nic() -> KeptHost {
    KeptHost::take(0, MockHost::recycle, || {
        MockHost::nic(small_limits(), HOST_MEMORY)
    })
}

/// A card whose FLD is sized for a 10 Gbit/s link and 4 queues (small structures), and whose
/// RC requesters have the fuzzed cards' small window, with a fresh echo accelerator behind it.
pub fn small_card() -> KeptHost {
    let h = KeptHost::take(1, MockHost::recycle, build_small_card);
    if let Some(f) = &h.fld {
        f.set_accelerator(Box::new(Echo::new(0, 16)));
    }
    h
}

/// [`small_card`] brought up by `bring_up` ([`prepared`]), with no accelerator plugged in (the
/// target plugs in a fresh one for every input: an accelerator is not part of the snapshot).
pub fn prepared_card<S: Clone + 'static>(
    bring_up: impl FnOnce(&mut MockHost) -> S,
) -> (Kept<Prepared<S>>, S) {
    prepared(1, build_small_card, bring_up)
}

fn build_small_card() -> MockHost {
    MockHost::card(
        CardConfig {
            fld: MemoryParams {
                bandwidth_gbps: 10.0,
                tx_queues: 4,
                ..MemoryParams::table_2a()
            },
            nic: NicConfig {
                rc_window: SMALL_RC_WINDOW,
                ..Default::default()
            },
            ..Default::default()
        },
        HOST_MEMORY,
    )
}

/// A frame of `len` bytes from NIC function `from` to `to`'s MAC address, payload `seed + k`.
pub fn frame_between(h: &MockHost, from: u16, to: u16, len: usize, seed: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len.max(14))
        .map(|k| seed.wrapping_add(k as u8))
        .collect();
    f[..6].copy_from_slice(&h.nic_mac(to));
    f[6..12].copy_from_slice(&h.nic_mac(from));
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f
}

/// Sends `frame` on `tx` and checks `rx` receives exactly `want`.
fn check_delivery(h: &MockHost, tx: &mut MockPort, rx: &mut MockPort, frame: &[u8], want: &[u8]) {
    tx.send(h, frame, 0);
    h.run(1000);
    let got = rx.receive(h).map(|(_, f)| f);
    assert_eq!(got.as_deref(), Some(want), "traffic after recovery");
}

/// Checks that nothing outside the DMA-mapped memory was touched, then does what a driver taking
/// over a card in an unknown state does: enumerate again and reset both NIC functions.
fn take_over(h: &mut MockHost) {
    assert!(
        h.guard_intact(),
        "a device access left the DMA-mapped memory"
    );
    h.reenumerate();
    h.reset_nic(0);
    h.reset_nic(1);
}

/// The NIC's invariant after any input: nothing outside the DMA-mapped memory was touched, and
/// after re-enumeration and a reset of both functions a normal bring-up moves verified frames
/// both ways. The check's own coverage is hidden from the fuzzer ([`unobserved`]).
pub fn assert_nic_recovers(h: &mut MockHost) {
    unobserved(|| check_nic_recovery(h));
}

fn check_nic_recovery(h: &mut MockHost) {
    take_over(h);
    let mut a = h.open_port(0);
    let mut b = h.open_port(1);
    let f = frame_between(h, 0, 1, 100, 7);
    check_delivery(h, &mut a, &mut b, &f, &f);
    let f = frame_between(h, 1, 0, 1500, 9);
    check_delivery(h, &mut b, &mut a, &f, &f);
    assert!(
        h.guard_intact(),
        "a device access left the DMA-mapped memory"
    );
}

/// FLD's invariant after any input: as [`assert_nic_recovers`], then FLD reset and bound again
/// moves a frame through a fresh echo accelerator and back, MAC addresses swapped.
pub fn assert_fld_recovers(h: &mut MockHost) {
    unobserved(|| check_fld_recovery(h));
}

fn check_fld_recovery(h: &mut MockHost) {
    take_over(h);
    h.set_fld_reg(fld_abi::fld::reg::RESET, fld_abi::fld::RESET_MAGIC);
    if let Some(f) = &h.fld {
        f.set_accelerator(Box::new(Echo::new(0, 16)));
    }
    h.bind_fld(1);
    let mut client = h.open_port(1);
    let f = frame_between(h, 1, 0, 200, 3);
    let mut want = f.clone();
    want[..6].copy_from_slice(&f[6..12]);
    want[6..12].copy_from_slice(&f[..6]);
    client.send(h, &f, 0);
    h.run(1000);
    let got = client.receive(h).map(|(_, f)| f);
    assert_eq!(got.as_deref(), Some(&want[..]), "FLD-E echo after recovery");
    assert!(
        h.guard_intact(),
        "a device access left the DMA-mapped memory"
    );
}

/// A NIC with small RDMA limits too (4 QPs, 2 SRQs per function), so exhaustion is a few
/// commands away, whose RC responders treat packets ahead as `receiver` says (a reorder unit,
/// LEFT §3, with a pool small enough for the input to run it out), brought up by `bring_up`
/// ([`prepared`]).
pub fn prepared_rdma_nic<S: Clone + 'static>(
    receiver: fld_device::nic::reorder::ReceiverMode,
    bring_up: impl FnOnce(&mut MockHost) -> S,
) -> (Kept<Prepared<S>>, S) {
    let build = move || {
        MockHost::nic(
            NicConfig {
                receiver,
                reorder_bdp: 64,
                max_qps: 4,
                ..small_limits()
            },
            HOST_MEMORY,
        )
    };
    prepared(2 + receiver.caps_code() as u32, build, bring_up)
}

/// RDMA's invariant after any input: as [`assert_nic_recovers`] (which resets both functions,
/// destroying their RDMA objects), then two fresh QPs, one per function, connected across the
/// eSwitch, move a SEND, a WRITE and a READ whose bytes arrive intact, each completing with
/// success.
pub fn assert_rdma_recovers(h: &mut MockHost) {
    unobserved(|| check_rdma_recovery(h));
}

fn check_rdma_recovery(h: &mut MockHost) {
    use fld_abi::nic::{cqe_flags, WQE_OP_RDMA_READ, WQE_OP_RDMA_WRITE, WQE_OP_SEND};
    check_nic_recovery(h);
    let msg: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
    let (mut a, mut b) = h.post_rdma_exchange(&msg);
    h.run(2000);
    let rx = b.cq.poll_cqe(h).expect("receive completion after recovery");
    assert_eq!(
        (rx.syndrome, rx.byte_count.get(), rx.flags & cqe_flags::QP),
        (0, msg.len() as u32, cqe_flags::QP),
        "SEND after recovery"
    );
    for want in [WQE_OP_SEND, WQE_OP_RDMA_WRITE, WQE_OP_RDMA_READ] {
        let c = a.cq.poll_cqe(h).expect("send completion after recovery");
        assert_eq!(
            (c.syndrome, c.wqe_opcode),
            (0, want),
            "requester completion"
        );
    }
    let mut got = vec![0u8; msg.len()];
    h.read(b.buf, &mut got);
    assert_eq!(got, msg, "SEND data after recovery");
    h.read(b.buf + 4096, &mut got);
    assert_eq!(got, msg, "WRITE data after recovery");
    let mut read = vec![0u8; 1000];
    h.read(a.buf + 8192, &mut read);
    assert_eq!(read, msg[..1000], "READ data after recovery");
    assert!(
        h.guard_intact(),
        "a device access left the DMA-mapped memory"
    );
}
