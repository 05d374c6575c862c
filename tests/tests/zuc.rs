//! The ZUC look-aside accelerator behind FLD-E, used through the cryptodev API: the same client
//! code gets the same results from the software device and from the accelerator.

use fld_host::cryptodev::{
    run_ops, sample_ops, Algorithm, CryptoDev, CryptoOp, OpStatus, SoftZuc, ZucOffload,
};
use fld_qemu::testbed::FldEchoSetup;

fn random_ops(n: usize, max_bytes: usize) -> Vec<CryptoOp> {
    // Varying sizes: one op of each size drawn from a fixed sequence.
    (0..n)
        .flat_map(|i| sample_ops(1, 1 + (i * 7919) % max_bytes, true, 0x9e37_79b9 + i as u64))
        .collect()
}

fn run(dev: &mut dyn CryptoDev, ops: Vec<CryptoOp>) -> Vec<CryptoOp> {
    run_ops(dev, ops, 16)
}

#[test]
fn accelerator_and_software_zuc_agree_through_the_cryptodev_api() {
    let mut s = FldEchoSetup::new(9000).unwrap();
    let addr = s.attach_zuc();
    let ops = random_ops(300, 4096);
    let soft = run(&mut SoftZuc::default(), ops.clone());
    let mut offload = ZucOffload::new(&mut s.client, addr).unwrap();
    let hard = run(&mut offload, ops.clone());
    assert_eq!(offload.stray, 0);
    assert_eq!((soft.len(), hard.len()), (300, 300));
    for (i, (a, b)) in soft.iter().zip(&hard).enumerate() {
        assert_eq!(
            (a.status, b.status),
            (OpStatus::Success, OpStatus::Success),
            "op {i}"
        );
        assert_eq!(
            a.data, b.data,
            "op {i} ({:?}, {} bits)",
            a.algorithm, a.length_bits
        );
        assert_eq!(a.mac, b.mac, "op {i}");
        // Results differ from the input where there was something to encrypt.
        if a.algorithm == Algorithm::Eea3 && a.length_bits >= 64 {
            assert_ne!(a.data, ops[i].data, "op {i} was not processed");
        }
    }
}

#[test]
fn a_lying_length_comes_back_as_an_error_status() {
    let mut s = FldEchoSetup::new(1514).unwrap();
    let addr = s.attach_zuc();
    let mut ops = random_ops(1, 100);
    // Claims more bits than the data carries; the client sends only what it has.
    ops[0].length_bits = 8 * ops[0].data.len() as u32 + 64;
    let mut offload = ZucOffload::new(&mut s.client, addr).unwrap();
    let done = run(&mut offload, ops);
    assert_eq!(done.len(), 1);
    assert_eq!(
        done[0].status,
        OpStatus::Error(fld_abi::wire::zuc::STATUS_BAD_LENGTH)
    );
}

#[test]
fn the_client_keeps_no_more_operations_in_flight_than_its_queue_depth() {
    let mut s = FldEchoSetup::new(9000).unwrap();
    let addr = s.attach_zuc();
    let mut offload = ZucOffload::new(&mut s.client, addr)
        .unwrap()
        .with_max_inflight(5);
    let mut ops = random_ops(32, 512);
    assert_eq!(offload.enqueue_burst(&mut ops), 5);
    assert_eq!((offload.inflight(), ops.len()), (5, 27));
    assert_eq!(
        offload.enqueue_burst(&mut ops),
        0,
        "no room until responses return"
    );
    let mut done = Vec::new();
    for _ in 0..100 {
        if offload.dequeue_burst(&mut done, 32) > 0 {
            break;
        }
    }
    assert!(!done.is_empty());
    assert_eq!(offload.inflight(), 5 - done.len());
    assert_eq!(offload.enqueue_burst(&mut ops), done.len());
}
