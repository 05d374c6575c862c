//! The bridge against the example modules and against modules that break the contract, with a
//! tx stream whose credits the test sets. Needs Verilator: without it these tests say so and
//! pass, unless `FLDEMU_REQUIRE_VERILATOR` is set (CI sets it).

use std::path::{Path, PathBuf};

use fld_device::accel::{Accelerator, Credits, Echo, RxMeta, TxMeta, TxRefused, TxStream};
use fld_rtl::bridge::{decode_tx_tuser, encode_rx_tuser, RtlCounters};
use fld_rtl::{RtlAccelerator, RtlConfig};

/// A tx stream with settable credits (bytes in 64-byte chunks, as FLD's) that records what it
/// took.
#[derive(Default)]
struct Sink {
    packets: u32,
    chunks: u32,
    sent: Vec<(TxMeta, Vec<u8>)>,
}

impl Sink {
    fn with(packets: u32) -> Self {
        Sink {
            packets,
            chunks: packets * 160,
            sent: vec![],
        }
    }
}

impl TxStream for Sink {
    fn credits(&self, _queue: u16) -> Credits {
        Credits {
            packets: self.packets,
            bytes: if self.packets == 0 {
                0
            } else {
                self.chunks * 64
            },
        }
    }
    fn send(&mut self, meta: &TxMeta, data: &[u8]) -> Result<(), TxRefused> {
        let need = data.len().div_ceil(64) as u32;
        if self.packets == 0 || need > self.chunks {
            return Err(TxRefused::NoCredit);
        }
        self.packets -= 1;
        self.chunks -= need;
        self.sent.push((*meta, data.to_vec()));
        Ok(())
    }
}

fn verilator() -> bool {
    fld_rtl::build::verilator_for_tests()
}

fn example(name: &str) -> PathBuf {
    fld_rtl::examples_dir().join(name)
}

fn bad(mode: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/bad/mode{mode}"))
}

fn accel(spec: &Path, cfg: RtlConfig) -> RtlAccelerator {
    let design = fld_rtl::build::build(spec, cfg.vcd.is_some()).unwrap_or_else(|e| panic!("{e}"));
    RtlAccelerator::new(&design, cfg).unwrap()
}

/// A UDP/IPv4 frame of `len` bytes with valid checksums; `seq` varies its payload.
fn udp_frame(len: usize, seq: u32) -> Vec<u8> {
    let payload: Vec<u8> = (0..len - 42).map(|i| (i as u32 * 7 + seq) as u8).collect();
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(4000 + seq as u16, 7);
    let mut f = Vec::new();
    b.write(&mut f, &payload).unwrap();
    assert_eq!(f.len(), len);
    f
}

/// Sends every frame through `a` with up to `burst` delivered per step, stepping until all is
/// out or `steps` pass.
fn drive(a: &mut dyn Accelerator, tx: &mut Sink, frames: &[Vec<u8>], burst: usize, steps: usize) {
    let meta = |f: &Vec<u8>| RxMeta {
        len: f.len() as u32,
        resume_table: Some(3),
        ..Default::default()
    };
    for chunk in frames.chunks(burst) {
        for f in chunk {
            assert!(a.receive(&meta(f), f, tx));
        }
        a.poll(tx);
    }
    for _ in 0..steps {
        a.poll(tx);
    }
}

fn count(a: &RtlAccelerator) -> RtlCounters {
    a.counters_now()
}

#[test]
fn metadata_encodes_at_the_documented_bits() {
    let meta = RxMeta {
        queue: 0x1234,
        context: 0xbeef,
        resume_table: Some(0x5a),
        csum: 0x81,
        rss_hash: 0xdead_cafe,
        len: 1500,
        rdma: Some(fld_device::accel::RdmaRx {
            first: true,
            last: true,
            imm: Some(0x0102_0304),
        }),
    };
    let u = encode_rx_tuser(&meta);
    // [15:0] queue, [31:16] context, [47:32] length, [55:48] csum, [63:56] resume table,
    // [64] resume valid, [65] rdma, [66] first, [67] last, [68] imm valid, [127:96] RSS,
    // [159:128] immediate.
    assert_eq!(
        u,
        [0xbeef_1234, 0x5a81_05dc, 0x1f, 0xdead_cafe, 0x0102_0304]
    );
    let mut t = [0u32; 6];
    t[0] = 0x4203_0007; // queue 7, csum 3, resume table 0x42
    t[1] = 1 | (4 << 1); // resume valid, WRITE with immediate
    t[2] = 0x1111_2222; // imm
    t[3] = 0x3333_4444; // rkey
    t[4] = 0x5555_6666; // remote address, low word
    t[5] = 0x7777_8888;
    let m = decode_tx_tuser(&t).unwrap();
    assert_eq!(m.queue, 7);
    assert_eq!(m.cs_flags, 3);
    assert_eq!(m.resume_table, Some(0x42));
    assert_eq!(
        m.rdma,
        Some(fld_device::accel::RdmaOp::WriteImm {
            remote_addr: 0x7777_8888_5555_6666,
            rkey: 0x3333_4444,
            imm: 0x1111_2222,
        })
    );
    t[1] = 7 << 1;
    assert_eq!(decode_tx_tuser(&t), None, "undefined operation");
}

/// The Verilog echo and the Rust echo give byte-identical output (frames, order, metadata) for
/// back-to-back frames from the minimum to a jumbo size, and a tx stalled for want of credits
/// holds frames in order and releases them when credits return.
#[test]
fn verilog_echo_equals_rust_echo() {
    if !verilator() {
        return;
    }
    let sizes = [60, 64, 65, 127, 128, 129, 1500, 1514, 9000, 64, 200];
    let frames: Vec<Vec<u8>> = (0..40)
        .map(|i| udp_frame(sizes[i % sizes.len()], i as u32))
        .collect();
    let mut rtl = accel(&example("echo"), RtlConfig::default());
    let mut rust = Echo::new(0, 256);
    let (mut a, mut b) = (Sink::with(1000), Sink::with(1000));
    drive(&mut rtl, &mut a, &frames, 8, 4);
    drive(&mut rust, &mut b, &frames, 8, 4);
    assert_eq!(a.sent.len(), frames.len());
    assert_eq!(a.sent, b.sent);
    let (meta, first) = &a.sent[0];
    assert_eq!(meta.resume_table, Some(3));
    assert_eq!(&first[..6], &frames[0][6..12]);
    assert_eq!(&first[6..12], &frames[0][..6]);
    assert_eq!(&first[12..], &frames[0][12..]);
    let c = count(&rtl);
    assert_eq!((c.rx_packets, c.tx_packets), (40, 40));
    let beats: u64 = frames.iter().map(|f| f.len().div_ceil(64) as u64).sum();
    assert_eq!((c.rx_beats, c.tx_beats), (beats, beats));
    // Packets reach the module no faster than FLD's 50 Gbit/s link: 200 bits a cycle.
    let bits: u64 = frames.iter().map(|f| f.len() as u64 * 8).sum();
    assert!(
        c.cycles >= bits / 200,
        "{} cycles for {bits} bits",
        c.cycles
    );
    assert_eq!(
        c.rx_backpressure_packets + c.tx_without_credit + c.tx_bad_keep,
        0
    );

    // Stalled: two packet credits, then none: the rest waits inside the module, in order.
    let (mut a, mut b) = (Sink::with(2), Sink::with(2));
    let mut rtl = accel(&example("echo"), RtlConfig::default());
    let mut rust = Echo::new(0, 256);
    drive(&mut rtl, &mut a, &frames[..20], 4, 50);
    drive(&mut rust, &mut b, &frames[..20], 4, 50);
    assert_eq!(a.sent.len(), 2);
    assert_eq!(a.sent, b.sent);
    let waited = count(&rtl);
    assert!(
        waited.gated_steps > 0,
        "a stalled module is clock-gated: {waited:?}"
    );
    (a.packets, a.chunks, b.packets, b.chunks) = (100, 10_000, 100, 10_000);
    drive(&mut rtl, &mut a, &[], 1, 4);
    drive(&mut rust, &mut b, &[], 1, 4);
    assert_eq!(a.sent.len(), 20);
    assert_eq!(a.sent, b.sent);
    assert_eq!(count(&rtl).tx_without_credit, 0);
}

/// Only byte credits short: a 1500-byte frame waits until its chunks are free, the 64-byte
/// frames before it went out.
#[test]
fn verilog_echo_waits_for_byte_credits() {
    if !verilator() {
        return;
    }
    let frames = [udp_frame(64, 1), udp_frame(1500, 2), udp_frame(64, 3)];
    let mut rtl = accel(&example("echo"), RtlConfig::default());
    let mut tx = Sink {
        packets: 10,
        chunks: 5,
        sent: vec![],
    };
    drive(&mut rtl, &mut tx, &frames, 3, 10);
    assert_eq!(
        tx.sent.len(),
        1,
        "the 1500-byte frame needs 24 chunks, 4 are left"
    );
    tx.chunks = 100;
    drive(&mut rtl, &mut tx, &[], 1, 4);
    assert_eq!(tx.sent.len(), 3);
    assert_eq!(tx.sent[1].1.len(), 1500);
    assert_eq!(count(&rtl).tx_without_credit, 0);
}

/// The checksum verifier echoes exactly the frames whose IPv4 header and UDP checksums hold,
/// frames that are not IPv4 pass, and a frame cut short of its UDP length is dropped.
#[test]
fn verilog_checksum_verifier_drops_exactly_the_bad_frames() {
    if !verilator() {
        return;
    }
    let mut frames = Vec::new();
    let mut good = Vec::new();
    for i in 0..24u32 {
        let mut f = udp_frame([64, 1500, 333, 9000][i as usize % 4], i);
        let ok = match i % 6 {
            1 => {
                f[24] ^= 0x01; // IPv4 header checksum
                false
            }
            2 => {
                let n = f.len() - 1;
                f[n] ^= 0x80; // last payload byte: UDP checksum
                false
            }
            3 => {
                f[40] = 0; // UDP checksum 0: not computed, passes
                f[41] = 0;
                f[50] ^= 0xff;
                true
            }
            4 => {
                f[12] = 0x86; // IPv6 ethertype: not checked
                f[13] = 0xdd;
                true
            }
            _ => true,
        };
        if ok {
            good.push(i as usize);
        }
        frames.push(f);
    }
    // Cut short: the UDP length claims more than the frame holds (IP total length fixed up).
    let mut short = udp_frame(200, 99);
    short.truncate(150);
    let ip_len = (150 - 14) as u16;
    short[16..18].copy_from_slice(&ip_len.to_be_bytes());
    short[24] = 0;
    short[25] = 0;
    let sum = fld_checksum(&short[14..34]);
    short[24..26].copy_from_slice(&(!sum).to_be_bytes());
    frames.push(short);

    let mut rtl = accel(&example("csum"), RtlConfig::default());
    let mut tx = Sink::with(1000);
    drive(&mut rtl, &mut tx, &frames, 5, 4);
    let got: Vec<&Vec<u8>> = tx.sent.iter().map(|(_, f)| f).collect();
    assert_eq!(
        got.len(),
        good.len(),
        "echoed {} of {}",
        got.len(),
        frames.len()
    );
    for (out, &i) in got.iter().zip(&good) {
        let f = &frames[i];
        assert_eq!(&out[..6], &f[6..12]);
        assert_eq!(&out[6..12], &f[..6]);
        assert_eq!(&out[12..], &f[12..], "frame {i}");
    }
}

/// Ones' complement sum of 16-bit big-endian words (RFC 1071).
fn fld_checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Every breach of the contract is counted and the emulator goes on.
#[test]
fn contract_breaches_are_counted_not_hung() {
    if !verilator() {
        return;
    }
    let frames: Vec<Vec<u8>> = (0..5).map(|i| udp_frame(100, i)).collect();
    let run = |mode: u32, credits: u32, cfg: RtlConfig| {
        let mut a = accel(&bad(mode), cfg);
        let mut tx = Sink::with(credits);
        drive(&mut a, &mut tx, &frames, 5, 3);
        (count(&a), tx.sent.len())
    };
    // rx_tready low: every packet is counted, each once.
    let (c, _) = run(1, 100, RtlConfig::default());
    assert_eq!((c.rx_packets, c.rx_backpressure_packets), (5, 5));
    // Sending with no credits: FLD refuses, counted.
    let (c, sent) = run(2, 0, RtlConfig::default());
    assert_eq!((c.tx_without_credit, sent), (5, 0));
    let (c, sent) = run(2, 100, RtlConfig::default());
    assert_eq!((c.tx_without_credit, c.tx_packets, sent), (0, 5, 5));
    // A hole in TKEEP: the packet is dropped, counted.
    let (c, sent) = run(3, 100, RtlConfig::default());
    assert_eq!((c.tx_bad_keep, sent), (5, 0));
    // TVALID withdrawn while TREADY is low.
    let stall = RtlConfig {
        tx_stall_every: 2,
        ..Default::default()
    };
    let (c, _) = run(4, 100, stall);
    assert!(c.tx_unstable > 0, "{c:?}");
    let (c, _) = run(
        2,
        100,
        RtlConfig {
            tx_stall_every: 2,
            ..Default::default()
        },
    );
    assert_eq!(
        (c.tx_unstable, c.tx_packets),
        (0, 5),
        "a module that waits is fine"
    );
    // An endless packet: too long, dropped; every step ends at its budget.
    let (c, sent) = run(
        5,
        100,
        RtlConfig {
            max_cycles_per_step: 5000,
            ..Default::default()
        },
    );
    assert_eq!((c.tx_oversize, sent), (1, 0));
    assert!(c.step_budget_exhausted >= 3, "{c:?}");
    // TUSER changing inside a packet.
    let (c, sent) = run(6, 100, RtlConfig::default());
    assert_eq!((c.tx_tuser_changed, sent), (10, 5), "{c:?}");
}

/// The (cycle, value) changes of the top-level signal `name` in a VCD whose cycles are 4,000 ps,
/// sampled while the clock is low (the values the module saw in that cycle).
fn vcd_changes(text: &str, name: &str) -> Vec<(u64, u64)> {
    let (head, body) = text.split_once("$enddefinitions").unwrap();
    let id = head
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() >= 5 && w[0] == "$var" && w[4] == name)
        .map(|w| w[3].to_owned())
        .unwrap();
    // Every change with its time, then the value each cycle's low phase saw.
    let mut t = 0u64;
    let mut changes: Vec<(u64, u64)> = Vec::new();
    for l in body.lines().map(str::trim) {
        if let Some(n) = l.strip_prefix('#') {
            t = n.parse().unwrap();
            continue;
        }
        let value = if let Some(b) = l.strip_prefix('b') {
            let (v, i) = b.split_once(' ').unwrap();
            (i == id).then(|| u64::from_str_radix(v, 2).unwrap_or(u64::MAX))
        } else if l.len() > 1 && l[1..] == id {
            Some(u64::from(l.starts_with('1')))
        } else {
            None
        };
        if let Some(v) = value {
            changes.push((t, v));
        }
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    for cycle in 0..=t / 4000 {
        let Some(&(_, v)) = changes.iter().rev().find(|(at, _)| *at <= cycle * 4000) else {
            continue;
        };
        if out.last().is_none_or(|&(_, last)| last != v) {
            out.push((cycle, v));
        }
    }
    out
}

/// `--vcd`: a waveform with the ports in it, and its timescale from the clock.
#[test]
fn a_waveform_records_the_ports() {
    if !verilator() {
        return;
    }
    let vcd = std::env::temp_dir().join(format!("fld-rtl-{}.vcd", std::process::id()));
    let cfg = RtlConfig {
        vcd: Some(vcd.clone()),
        ..Default::default()
    };
    let mut a = accel(&example("echo"), cfg);
    let mut tx = Sink::with(10);
    drive(&mut a, &mut tx, &[udp_frame(100, 0)], 1, 1);
    assert_eq!(tx.sent.len(), 1);
    drop(a);
    let text = std::fs::read_to_string(&vcd).unwrap();
    for port in ["rx_tdata", "rx_tvalid", "tx_tlast", "credit_packets", "clk"] {
        assert!(text.contains(port), "{port} missing from the waveform");
    }
    // 250 MHz: the rising edge of the first cycle at 2,000 ps, the second cycle at 4,000 ps.
    assert!(text.contains("#2000") && text.contains("#4000"));
    // The timing of docs/fld-interface.md §13.2: after 8 cycles of reset the two beats come in
    // cycles 8-9, the echo sends in cycles 11-12, and the credit drops from cycle 13.
    let changes = |name: &str| vcd_changes(&text, name);
    assert_eq!(changes("rx_tvalid"), [(0, 0), (8, 1), (10, 0)]);
    assert_eq!(changes("rx_tlast"), [(0, 0), (9, 1), (10, 0)]);
    assert_eq!(changes("tx_tvalid"), [(0, 0), (11, 1), (13, 0)]);
    assert_eq!(changes("tx_tlast"), [(0, 0), (12, 1), (13, 0)]);
    assert_eq!(changes("credit_packets"), [(0, 10), (13, 9)]);
    std::fs::remove_file(&vcd).unwrap();
}

/// A module whose ports do not have the contract's widths is refused at build time, and the
/// message names the port.
#[test]
fn a_port_of_the_wrong_width_is_refused_by_name() {
    if !verilator() {
        return;
    }
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad/narrow");
    let e = fld_rtl::build::build(&spec, false).unwrap_err().to_string();
    assert!(e.contains("rx_tdata must be 512 bits"), "{e}");
}

/// Quiet stretches run in one call are exactly the cycles run one by one: the same frames, the
/// same cycle count, the same counters, for paced small and large frames and a stalled queue.
#[test]
fn batched_quiet_cycles_are_the_same_cycles() {
    if !verilator() {
        return;
    }
    let frames: Vec<Vec<u8>> = (0..30)
        .map(|i| udp_frame([64, 1500, 200, 9000, 65][i % 5], i as u32))
        .collect();
    let run = |batch: bool| {
        let cfg = RtlConfig {
            batch_quiet_cycles: batch,
            ..Default::default()
        };
        let mut a = accel(&example("echo"), cfg);
        let mut tx = Sink::with(12);
        drive(&mut a, &mut tx, &frames, 7, 5);
        (tx.packets, tx.chunks) = (100, 10_000);
        drive(&mut a, &mut tx, &[], 1, 5);
        (tx.sent, count(&a))
    };
    let (sent_batched, batched) = run(true);
    let (sent_single, single) = run(false);
    assert_eq!(sent_batched.len(), 30);
    assert_eq!(sent_batched, sent_single);
    assert_eq!(batched, single);
}

/// `fldemu rtl-init`'s scaffold builds as it is: a module with every port, that takes every
/// packet and sends nothing, and no breach; a second scaffold into the same directory is refused.
#[test]
fn a_scaffolded_design_builds_and_takes_packets() {
    if !verilator() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("fld-rtl-scaffold-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    fld_rtl::build::scaffold(&dir, "my_accel").unwrap();
    assert!(fld_rtl::build::scaffold(&dir, "my_accel").is_err());
    assert!(fld_rtl::build::scaffold(&dir.join("x"), "9lives").is_err());
    let mut a = accel(&dir, RtlConfig::default());
    let mut tx = Sink::with(10);
    drive(
        &mut a,
        &mut tx,
        &[udp_frame(100, 0), udp_frame(64, 1)],
        2,
        2,
    );
    let c = count(&a);
    assert_eq!((c.rx_packets, c.tx_packets, tx.sent.len()), (2, 0, 0));
    assert_eq!(c.rx_backpressure_packets, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
