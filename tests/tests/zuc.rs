//! The ZUC look-aside accelerator behind FLD-E, used through the cryptodev API: the same client
//! code gets the same results from the software device and from the accelerator.

use fld_device::accel::zuc_accel::{ZucAccel, ZUC_UDP_PORT};
use fld_host::apps::FldEchoSetup;
use fld_host::cryptodev::{
    Algorithm, CryptoDev, CryptoOp, OpStatus, ServiceAddress, SoftZuc, ZucOffload,
};

/// A tiny deterministic generator for test data.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn random_ops(n: usize, max_bytes: usize) -> Vec<CryptoOp> {
    let mut r = XorShift(0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|_| {
            let bits = 1 + (r.next() % (max_bytes as u64 * 8)) as u32;
            let bytes = (bits as usize).div_ceil(8);
            let mut key = [0u8; 16];
            key.iter_mut().for_each(|k| *k = r.next() as u8);
            CryptoOp {
                algorithm: if r.next() % 3 == 0 {
                    Algorithm::Eia3
                } else {
                    Algorithm::Eea3
                },
                key,
                count: r.next() as u32,
                bearer: (r.next() % 32) as u8,
                direction: (r.next() % 2) as u8,
                length_bits: bits,
                data: (0..bytes).map(|_| r.next() as u8).collect(),
                mac: 0,
                status: OpStatus::NotProcessed,
            }
        })
        .collect()
}

/// The client code: bursts in, completions out, order kept.
fn run(dev: &mut dyn CryptoDev, mut ops: Vec<CryptoOp>) -> Vec<CryptoOp> {
    let total = ops.len();
    let mut done = Vec::with_capacity(total);
    for _ in 0..1_000_000 {
        if done.len() == total {
            break;
        }
        let mut burst: Vec<CryptoOp> = ops.drain(..ops.len().min(16)).collect();
        dev.enqueue_burst(&mut burst);
        // Whatever the device did not take goes back to the front.
        for op in burst.into_iter().rev() {
            ops.insert(0, op);
        }
        dev.dequeue_burst(&mut done, 32);
    }
    done
}

#[test]
fn accelerator_and_software_zuc_agree_through_the_cryptodev_api() {
    let mut s = FldEchoSetup::new(9000).unwrap();
    s.card
        .fld
        .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0)));
    let addr = ServiceAddress {
        client_mac: s.client.mac(),
        client_ip: [10, 0, 0, 1],
        client_port: 40000,
        server_mac: s.flde.mac(),
        server_ip: [10, 0, 0, 2],
    };
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
    s.card
        .fld
        .set_accelerator(Box::new(ZucAccel::new(ZUC_UDP_PORT, 0)));
    let addr = ServiceAddress {
        client_mac: s.client.mac(),
        client_ip: [10, 0, 0, 1],
        client_port: 40000,
        server_mac: s.flde.mac(),
        server_ip: [10, 0, 0, 2],
    };
    let mut ops = random_ops(1, 100);
    // Claims more bits than the data carries; the client sends only what it has.
    ops[0].length_bits = 8 * ops[0].data.len() as u32 + 64;
    let mut offload = ZucOffload::new(&mut s.client, addr).unwrap();
    let done = run(&mut offload, ops);
    assert_eq!(done.len(), 1);
    assert_eq!(
        done[0].status,
        OpStatus::Error(fld_device::accel::zuc_accel::STATUS_BAD_LENGTH)
    );
}
