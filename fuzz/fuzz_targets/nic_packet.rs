//! The NIC's frame parser, checksum validation and checksum insertion on arbitrary frames.
#![no_main]

use fld_device::nic::packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let p = packet::parse(data);
    let _ = packet::vxlan(data, &p);
    let _ = packet::verify_checksums(data, &p);
    let mut copy = data.to_vec();
    let _ = packet::insert_checksums(&mut copy, &p, true, true);
    assert_eq!(
        copy.len(),
        data.len(),
        "checksum insertion never resizes a frame"
    );
});
