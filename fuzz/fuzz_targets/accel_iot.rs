//! CoAP and JWT parsing: any message is a pass or a counted drop.
#![no_main]

use fld_device::accel::iot::{parse_coap, verify_jwt, IotFilter, KeyTable};
use fld_device::accel::iot_accel::{IotAccel, COAP_PORT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut keys = KeyTable::new(8);
    for ctx in 0..4u16 {
        keys.set(ctx, format!("key {ctx}").as_bytes());
    }
    let _ = parse_coap(data);
    let _ = verify_jwt(data, b"key 1", 1_800_000_000);
    let mut filter = IotFilter::new(keys.clone());
    for ctx in 0..8u16 {
        filter.check(ctx, data, 1_800_000_000);
    }
    assert_eq!(filter.stats().total(), 8);
    let (mut accel, _handle) = IotAccel::new(keys, 0);
    fld_fuzz::drive(&mut accel, COAP_PORT, data);
});
