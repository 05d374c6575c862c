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
        let get = |k: &str| counters.iter().find(|(n, _)| *n == k).unwrap().1;
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
