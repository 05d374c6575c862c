//! RTL in the loop, end to end: the Verilog echo and checksum verifier (Verilator) behind FLD on
//! an in-process card, the generator on the NIC's other host function checking every returned
//! byte; the frames the accelerator sends into the eSwitch are byte-identical to the Rust echo
//! model's for the same traffic. Needs Verilator: without it the tests say so and pass, unless
//! `FLDEMU_REQUIRE_VERILATOR` is set (CI sets it).

use std::sync::{Arc, Mutex};

use fld_abi::fld::Stat;
use fld_device::accel::Accelerator;
use fld_device::wire::{FrameTap, TapPoint};
use fld_host::apps::{EchoConfig, Sizes};
use fld_qemu::testbed::FldEchoSetup;
use fld_rtl::{RtlAccelerator, RtlConfig};

fn verilator() -> bool {
    fld_rtl::build::verilator_for_tests()
}

fn rtl(example: &str) -> Box<RtlAccelerator> {
    let design = fld_rtl::build::build(&fld_rtl::examples_dir().join(example), false)
        .unwrap_or_else(|e| panic!("{e}"));
    Box::new(RtlAccelerator::new(&design, RtlConfig::default()).unwrap())
}

/// Frames entering the eSwitch from FLD's vPort (what the accelerator sent).
#[derive(Clone, Default)]
struct FromAccelerator(Arc<Mutex<Vec<Vec<u8>>>>);

impl FrameTap for FromAccelerator {
    fn frame(&mut self, _now_ns: u64, vport: u16, point: TapPoint, frame: &[u8]) {
        if vport == 0 && point == TapPoint::FromVport {
            self.0.lock().unwrap().push(frame.to_vec());
        }
    }
}

/// The echo workload through a card whose accelerator is `accel`: every frame verified, and the
/// frames the accelerator sent.
fn echo_through_card(accel: Box<dyn Accelerator>, sizes: Sizes, packets: u64) -> Vec<Vec<u8>> {
    let mut s = FldEchoSetup::new(9000).unwrap();
    s.card.fld.set_accelerator(accel);
    let tap = FromAccelerator::default();
    s.card.nic.set_tap(Some(Box::new(tap.clone())));
    let cfg = EchoConfig {
        packets,
        sizes: sizes.clone(),
        window: s.safe_window(sizes.max()).min(64),
        ..Default::default()
    };
    let rep = s.run_echo(&cfg);
    assert_eq!(
        (rep.packets_received, rep.mismatches, rep.checksum_flags_bad),
        (packets, 0, 0)
    );
    assert_eq!(s.card.fld.stat(Stat::RxAcceleratorDrops), 0);
    let (name, counters) = s.card.fld.accelerator_counters().unwrap();
    if name.starts_with("rtl") {
        let get = |k: &str| fld_rtl::bridge::counter(&counters, k).unwrap();
        assert_eq!((get("rx_packets"), get("tx_packets")), (packets, packets));
        for breach in fld_rtl::bridge::BREACH_COUNTERS {
            assert_eq!(get(breach), 0, "{breach}");
        }
    }
    s.card.nic.set_tap(None);
    let frames = tap.0.lock().unwrap().clone();
    frames
}

#[test]
fn the_verilog_echo_drives_the_card_like_the_rust_echo() {
    if !verilator() {
        return;
    }
    let sizes = Sizes::Sweep { min: 60, max: 9000 };
    let from_rtl = echo_through_card(rtl("echo"), sizes.clone(), 3000);
    let from_rust = echo_through_card(Box::new(fld_device::accel::Echo::new(0, 256)), sizes, 3000);
    assert_eq!(from_rtl.len(), 3000);
    assert!(from_rtl == from_rust, "the accelerators' frames differ");
}

#[test]
fn the_verilog_checksum_verifier_passes_every_good_frame_through_the_card() {
    if !verilator() {
        return;
    }
    let frames = echo_through_card(rtl("csum"), Sizes::Sweep { min: 60, max: 1514 }, 2000);
    assert_eq!(frames.len(), 2000);
}

/// FLD-R: the same Verilog echo behind FLD-R queue pairs (the paper's local set-up: the client
/// is the card's second NIC function). A message of one packet comes back to its queue pair as
/// a SEND, whole, in order, with its immediate data; the NIC's transport acknowledges and
/// segments as for the Rust FLD-R accelerators.
#[test]
fn the_verilog_echo_serves_fldr_queue_pairs() {
    use fld_host::fldr::ClientConfig;
    use fld_qemu::testbed::fldr::{one_machine, ServiceAccel};
    use std::time::{Duration, Instant};
    if !verilator() {
        return;
    }
    let (service, mut machine) = one_machine(ServiceAccel::Echo, 2).unwrap();
    machine.card.fld.set_accelerator(rtl("echo"));
    let mut c = machine
        .connect(service.addr, ClientConfig::default())
        .unwrap();
    let message = |n: u32, len: usize| -> Vec<u8> {
        (0..len)
            .map(|k| (k as u32).wrapping_mul(29).wrapping_add(n * 3) as u8)
            .collect()
    };
    let mut total = 0u64;
    // Up to the 1 KiB path MTU: one packet per message. Odd messages carry no immediate.
    for (len, count) in [(64usize, 300u32), (1000, 100), (1, 20), (1024, 50)] {
        let imm = |n: u32| n.is_multiple_of(2).then_some(n ^ 0x5a5a_0000);
        let (mut sent, mut back) = (0u32, 0u32);
        let deadline = Instant::now() + Duration::from_secs(60);
        while back < count {
            assert!(
                Instant::now() < deadline,
                "{back} of {count} echoes of {len} bytes"
            );
            while sent < count && sent - back < 16 {
                if !c.send(&message(sent, len), imm(sent)).unwrap() {
                    break;
                }
                sent += 1;
            }
            let want = back;
            if let Some(ok) = c
                .recv(|got, got_imm| got == &message(want, len)[..] && got_imm == imm(want))
                .unwrap()
            {
                assert!(ok, "message {want} of {len} bytes came back changed");
                back += 1;
            }
        }
        total += u64::from(count);
    }
    drop(c);
    let (name, counters) = machine.card.fld.accelerator_counters().unwrap();
    assert!(name.starts_with("rtl"));
    let get = |k: &str| fld_rtl::bridge::counter(&counters, k).unwrap();
    assert_eq!((get("rx_packets"), get("tx_packets")), (total, total));
    for breach in fld_rtl::bridge::BREACH_COUNTERS {
        assert_eq!(get(breach), 0, "{breach}");
    }
    let report = service.stop().unwrap();
    assert_eq!(report.fld_tx_messages, total);
}
