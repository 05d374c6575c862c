//! The ZUC accelerator's request parsing (64-byte header, bit lengths, lying lengths).
#![no_main]

use fld_abi::wire::zuc::ZUC_UDP_PORT;
use fld_device::accel::zuc_accel::ZucAccel;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut accel = ZucAccel::new(ZUC_UDP_PORT, 0);
    fld_fuzz::drive(&mut accel, ZUC_UDP_PORT, data);
});
