//! `fldemu replay`'s engine: captured frames enter on the uplink, the eSwitch gives the
//! accelerator its share, and exactly what the host should see reaches its queues.

use fld_device::accel::iot::{coap_message, sign_hs256};
use fld_device::accel::iot_accel::COAP_PORT;
use fld_qemu::testbed::inline_apps::fragment_ipv4;
use fld_qemu::testbed::replay::{
    replay, Inject, ReplayAccel, ReplayConfig, ReplayError, ReplayTenant,
};
use fld_qemu::testbed::VxlanDecap;

const NET_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x01];

fn udp(src: [u8; 4], sport: u16, dport: u16, payload: &[u8], df: bool) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(NET_MAC, HOST_MAC)
        .ipv4(src, [10, 0, 0, 2], 64)
        .udp(sport, dport);
    let mut f = Vec::new();
    b.write(&mut f, payload).unwrap();
    if !df {
        f[20] &= !0x40;
        f[24..26].fill(0);
        let c = fld_abi::wire::internet_checksum(&f[14..34], 0);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    }
    f
}

fn counter(c: &[(&'static str, u64)], name: &str) -> u64 {
    c.iter().find(|(k, _)| *k == name).map_or(u64::MAX, |e| e.1)
}

#[test]
fn defrag_replay_delivers_whole_datagrams_and_passes_the_rest_around_fld() {
    let datagrams: Vec<Vec<u8>> = (0..20u16)
        .map(|i| {
            let payload: Vec<u8> = (0..2500 + usize::from(i) * 13)
                .map(|k| k as u8 ^ i as u8)
                .collect();
            let mut d = udp([10, 0, 0, 1], 2000 + i, 9000, &payload, false);
            d[18..20].copy_from_slice(&(0x100 + i).to_be_bytes());
            let c = {
                d[24..26].fill(0);
                fld_abi::wire::internet_checksum(&d[14..34], 0)
            };
            d[24..26].copy_from_slice(&c.to_be_bytes());
            d
        })
        .collect();
    let whole: Vec<Vec<u8>> = (0..5u16)
        .map(|i| udp([10, 0, 0, 1], 3000 + i, 9000, &[i as u8; 200], true))
        .collect();
    // Fragments of consecutive datagrams interleaved, last fragment first for odd ones.
    let mut frames = whole.clone();
    let mut per: Vec<Vec<Vec<u8>>> = datagrams.iter().map(|d| fragment_ipv4(d, 1450)).collect();
    for (i, f) in per.iter_mut().enumerate() {
        if i % 2 == 1 {
            f.reverse();
        }
    }
    for pair in per.chunks(2) {
        let n = pair.iter().map(Vec::len).max().unwrap();
        for k in 0..n {
            for f in pair {
                if let Some(x) = f.get(k) {
                    frames.push(x.clone());
                }
            }
        }
    }
    let fragment_count = frames.len() - whole.len();
    assert_eq!(fragment_count, 40);
    // A runt the NIC drops at the uplink.
    frames.push(vec![0xab; 10]);

    let out = replay(
        frames,
        &ReplayConfig {
            accel: ReplayAccel::Defrag,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(out.accelerator, "defrag");
    assert_eq!(out.fld_rx, 40, "only fragments crossed into FLD");
    assert_eq!(counter(&out.counters, "reassembled"), 20);
    assert_eq!(counter(&out.counters, "bypass"), 0);
    let mut got: Vec<Vec<u8>> = out.delivered.iter().map(|(_, f)| f.clone()).collect();
    got.sort();
    let mut want = [datagrams, whole].concat();
    want.sort();
    assert!(got == want, "{} frames delivered", got.len());
    assert!(
        out.delivered
            .iter()
            .map(|(q, _)| *q)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            >= 2,
        "RSS spreads the whole datagrams"
    );
}

/// A datagram of `len` payload bytes from `src`, not DF, with its IPv4 ident.
fn fragmentable(src: [u8; 4], ident: u16, len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..len).map(|k| (k as u16 ^ ident) as u8).collect();
    let mut d = udp(src, 2000 + ident, 9000, &payload, false);
    d[18..20].copy_from_slice(&ident.to_be_bytes());
    d[24..26].fill(0);
    let c = fld_abi::wire::internet_checksum(&d[14..34], 0);
    d[24..26].copy_from_slice(&c.to_be_bytes());
    d
}

/// `inner` inside Ethernet/IPv4/UDP to 4789/VXLAN with `vni`, built by an independent library.
fn vxlan(vni: u32, inner: &[u8]) -> Vec<u8> {
    let mut payload = vec![0x08, 0, 0, 0];
    payload.extend_from_slice(&(vni << 8).to_be_bytes());
    payload.extend_from_slice(inner);
    let b = etherparse::PacketBuilder::ethernet2(NET_MAC, HOST_MAC)
        .ipv4([172, 16, 0, 1], [172, 16, 0, 2], 64)
        .udp(49152 + (vni as u16 & 0xff), 4789);
    let mut f = Vec::new();
    b.write(&mut f, &payload).unwrap();
    f
}

#[test]
fn defrag_replay_decapsulates_vxlan_before_choosing_fragments() {
    // Setup (c) of the paper's §8.2.2: the tunnel carries fragments; plain fragments arrive
    // beside it; a second tunnel (another VNI) is not ours and passes through untouched.
    let tunnelled: Vec<Vec<u8>> = (0..6)
        .map(|i| fragmentable([10, 1, 0, 1], 0x200 + i, 2800))
        .collect();
    let plain: Vec<Vec<u8>> = (0..4)
        .map(|i| fragmentable([10, 2, 0, 1], 0x300 + i, 3100))
        .collect();
    let foreign: Vec<Vec<u8>> = fragment_ipv4(&fragmentable([10, 3, 0, 1], 0x400, 2000), 1400)
        .iter()
        .map(|f| vxlan(7, f))
        .collect();
    let mut frames = Vec::new();
    let mut fragments = 0;
    for (t, p) in tunnelled
        .iter()
        .zip(plain.iter().chain(std::iter::repeat(&Vec::new())))
    {
        for f in fragment_ipv4(t, 1400) {
            frames.push(vxlan(5001, &f));
            fragments += 1;
        }
        if !p.is_empty() {
            for f in fragment_ipv4(p, 1400).into_iter().rev() {
                frames.push(f);
                fragments += 1;
            }
        }
    }
    frames.extend(foreign.iter().cloned());
    let cfg = ReplayConfig {
        accel: ReplayAccel::Defrag,
        vxlan: Some(VxlanDecap { vnis: vec![5001] }),
        ..Default::default()
    };
    let out = replay(frames.clone(), &cfg).unwrap();
    assert_eq!(fragments, 30);
    assert_eq!(
        out.fld_rx, fragments,
        "inner and plain fragments crossed into FLD, the foreign tunnel did not"
    );
    assert_eq!(counter(&out.counters, "reassembled"), 10);
    let mut got: Vec<Vec<u8>> = out.delivered.iter().map(|(_, f)| f.clone()).collect();
    got.sort();
    let mut want = [tunnelled.clone(), plain.clone(), foreign.clone()].concat();
    want.sort();
    assert!(
        got == want,
        "whole inner datagrams, whole plain datagrams and the foreign tunnel's frames as sent"
    );

    // Any VNI: the second tunnel is decapsulated too, and its datagram reassembled.
    let any = replay(
        frames.clone(),
        &ReplayConfig {
            vxlan: Some(VxlanDecap::default()),
            ..cfg.clone()
        },
    )
    .unwrap();
    assert_eq!(any.fld_rx, fragments + foreign.len() as u64);
    assert_eq!(counter(&any.counters, "reassembled"), 11);

    // Without decapsulation (as before) the tunnelled fragments reach the host unreassembled.
    let none = replay(frames, &ReplayConfig { vxlan: None, ..cfg }).unwrap();
    assert_eq!(
        none.fld_rx,
        4 * 3,
        "only the plain fragments are seen as fragments"
    );
    assert_eq!(counter(&none.counters, "reassembled"), 4);
}

#[test]
fn iot_replay_keeps_only_messages_with_their_tenants_valid_token() {
    let (ka, kb) = (
        b"replay tenant A key".to_vec(),
        b"replay tenant B key".to_vec(),
    );
    let now = 1_900_000_000u64;
    let msg = |src: [u8; 4], key: &[u8], claims: &str, id: u16| {
        let coap = coap_message(id, &[1, 2], "t", sign_hs256(key, claims).as_bytes());
        udp(src, 5000, COAP_PORT, &coap, true)
    };
    let a_ok = msg([10, 0, 0, 1], &ka, r#"{"sub":"a"}"#, 1);
    let b_ok = msg([10, 0, 0, 3], &kb, &format!(r#"{{"exp":{}}}"#, now + 1), 2);
    let b_expired = msg([10, 0, 0, 3], &kb, &format!(r#"{{"exp":{now}}}"#), 3);
    let a_with_b_key = msg([10, 0, 0, 1], &kb, r#"{"sub":"a"}"#, 4);
    let stranger = msg([10, 0, 0, 7], &ka, r#"{"sub":"a"}"#, 5);
    let not_coap = udp([10, 0, 0, 7], 5000, 80, b"GET /", true);
    let frames = vec![
        a_ok.clone(),
        b_expired,
        a_with_b_key,
        not_coap.clone(),
        stranger,
        b_ok.clone(),
    ];
    let cfg = ReplayConfig {
        accel: ReplayAccel::Iot,
        host_queues: 1,
        now_s: now,
        tenants: vec![
            ReplayTenant {
                context: 10,
                src: [10, 0, 0, 1].into(),
                key: ka,
                refuse_fragments: false,
            },
            ReplayTenant {
                context: 11,
                src: [10, 0, 0, 3].into(),
                key: kb,
                refuse_fragments: false,
            },
        ],
        ..Default::default()
    };
    let out = replay(frames.clone(), &cfg).unwrap();
    let got: Vec<Vec<u8>> = out.delivered.iter().map(|(_, f)| f.clone()).collect();
    assert!(got.contains(&not_coap), "non-CoAP traffic goes around FLD");
    assert_eq!(got.len(), 3);
    assert_eq!(
        got.iter()
            .filter(|f| **f != not_coap)
            .cloned()
            .collect::<Vec<_>>(),
        vec![a_ok, b_ok]
    );
    assert_eq!(out.fld_rx, 5);
    for (name, n) in [
        ("passed", 2),
        ("expired", 1),
        ("bad_signature", 1),
        ("unknown_tenant", 1),
    ] {
        assert_eq!(counter(&out.counters, name), n, "{name}");
    }

    // The host function can inject instead of the uplink; the result is the same.
    let host = replay(
        frames,
        &ReplayConfig {
            inject: Inject::Host,
            ..cfg.clone()
        },
    )
    .unwrap();
    assert_eq!(host.delivered, out.delivered);

    let bad = ReplayConfig {
        tenants: vec![cfg.tenants[0].clone(), cfg.tenants[0].clone()],
        ..cfg
    };
    assert!(matches!(
        replay(Vec::new(), &bad),
        Err(ReplayError::BadTenant(10))
    ));
}
