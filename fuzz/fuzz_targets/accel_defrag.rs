//! IPv4 reassembly with small limits: any fragment sequence keeps the engine within its memory
//! and datagram bounds.
#![no_main]

use fld_device::accel::defrag::{Config, Reassembler};
use fld_device::accel::defrag_accel::DefragAccel;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let config = Config {
        max_datagram: 9000,
        max_datagrams: 8,
        max_buffered_bytes: 32 << 10,
        timeout_ns: 20_000,
        verify_checksum: data.first().is_some_and(|b| b & 1 != 0),
    };
    // The engine alone, with every packet taken as an IPv4 datagram.
    let mut engine = Reassembler::new(config);
    let mut now = 0;
    for (i, packet) in data.split(|&b| b == 0xa5).enumerate() {
        now += 1000;
        let _ = engine.push(packet, now);
        assert!(engine.buffered_bytes() <= config.max_buffered_bytes);
        assert!(engine.pending_datagrams() <= config.max_datagrams);
        if i % 16 == 15 {
            engine.expire(now);
        }
    }
    // The accelerator around it, with Ethernet framing.
    let mut accel = DefragAccel::new(config, 0);
    fld_fuzz::drive(&mut accel, 9, data);
    assert!(accel.engine().buffered_bytes() <= config.max_buffered_bytes);
});
