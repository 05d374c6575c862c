//! The IoT token authentication accelerator behind FLD-E (paper §7): each tenant's traffic reaches
//! the accelerator with the tenant's context ID, the accelerator verifies the JSON Web Token in
//! every CoAP message with that tenant's key, and only authenticated messages come back into the
//! NIC pipeline (at the resume table, which forwards them to the server). Everything else is
//! dropped and counted by reason.

use fld_abi::nic::TABLE_KIND_FDB;
use fld_device::accel::iot::{coap_message, sign_hs256, KeyTable, Reason};
use fld_device::accel::iot_accel::{IotAccel, COAP_PORT};
use fld_device::fld::memory_model::MemoryParams;
use fld_driver::nic::{FlowRule, RuleFate, TableMiss};
use fld_host::flow::FlowItem;
use fld_qemu::testbed::FldEchoSetup;
use std::sync::atomic::Ordering;

const KEY_A: &[u8] = b"tenant A: thirty-two secret bytes";
const KEY_B: &[u8] = b"tenant B keeps a different key!!";
const NOW: u64 = 1_800_000_000;
const CTX_A: u16 = 100;
const CTX_B: u16 = 200;
/// Context of the catch-all rule: no key is installed for it.
const CTX_UNREGISTERED: u16 = 7;

fn ipv4_src(src: [u8; 4]) -> FlowItem {
    FlowItem::Ipv4 {
        src: Some(src.into()),
        dst: None,
        proto: None,
    }
}

/// A UDP/IPv4 frame from `src` carrying `payload` to `dport`.
fn udp_frame(mac: ([u8; 6], [u8; 6]), src: [u8; 4], dport: u16, payload: &[u8]) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(mac.0, mac.1)
        .ipv4(src, [10, 0, 0, 2], 64)
        .udp(40000, dport);
    let mut f = Vec::new();
    b.write(&mut f, payload).unwrap();
    f
}

fn coap_with_token(id: u16, jwt: &str) -> Vec<u8> {
    coap_message(id, &id.to_be_bytes(), "sensors/temp", jwt.as_bytes())
}

#[test]
fn only_messages_with_a_valid_token_of_their_own_tenant_reach_the_server() {
    let mut s = FldEchoSetup::build_with(2048, 1, MemoryParams::table_2a(), 1).unwrap();
    let mut keys = KeyTable::new(1024);
    assert!(keys.set(CTX_A, KEY_A));
    assert!(keys.set(CTX_B, KEY_B));
    let (accel, handle) = IotAccel::new(keys, 0);
    handle.now_s.store(NOW, Ordering::Relaxed);
    s.card.fld.set_accelerator(Box::new(accel));

    // Authenticated messages resume at an eSwitch table that forwards them to the server (the
    // client vPort stands in for it).
    let server_vport = s.client.vport();
    let nic = s.flde.nic();
    let resume = nic
        .create_flow_table(TABLE_KIND_FDB, 1, TableMiss::Drop)
        .unwrap();
    nic.create_flow_entry(resume, &FlowRule::any(RuleFate::Vport(server_vport)))
        .unwrap();
    let (a_ip, b_ip, stranger_ip) = ([10, 0, 0, 1], [10, 0, 0, 3], [10, 0, 0, 9]);
    let f = &mut s.flde;
    let a = f.register_tenant(CTX_A, ipv4_src(a_ip)).unwrap();
    let b = f.register_tenant(CTX_B, ipv4_src(b_ip)).unwrap();
    f.tenant_accelerate(a, 1000, &[ipv4_src(a_ip)], None, Some(resume))
        .unwrap();
    f.tenant_accelerate(b, 1000, &[ipv4_src(b_ip)], None, Some(resume))
        .unwrap();
    // Everyone else still goes through the filter (at a lower priority than the tenants' rules),
    // under a context that has no key.
    f.accelerate(u16::MAX, &[], CTX_UNREGISTERED, Some(resume))
        .unwrap();

    let mac = (s.client.mac(), s.flde.mac());
    let good_a = sign_hs256(KEY_A, &format!(r#"{{"sub":"a","exp":{}}}"#, NOW + 60));
    let good_b = sign_hs256(KEY_B, r#"{"sub":"b"}"#);
    let expired_a = sign_hs256(KEY_A, &format!(r#"{{"sub":"a","exp":{}}}"#, NOW - 1));
    let early_b = sign_hs256(KEY_B, &format!(r#"{{"sub":"b","nbf":{}}}"#, NOW + 600));
    let mut forged = good_a.clone().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let unsigned = format!(
        "{}.{}.",
        "eyJhbGciOiJub25lIn0", // {"alg":"none"}
        "eyJzdWIiOiJhIn0"      // {"sub":"a"}
    );

    let mut pass = Vec::new();
    let mut sent = Vec::new();
    let mut push = |frame: Vec<u8>, passes: bool| {
        if passes {
            pass.push(frame.clone());
        }
        sent.push(frame);
    };
    for i in 0..8u16 {
        push(
            udp_frame(mac, a_ip, COAP_PORT, &coap_with_token(i, &good_a)),
            true,
        );
        push(
            udp_frame(mac, b_ip, COAP_PORT, &coap_with_token(i, &good_b)),
            true,
        );
    }
    // B's token presented from A's address: A's key does not verify it.
    push(
        udp_frame(mac, a_ip, COAP_PORT, &coap_with_token(20, &good_b)),
        false,
    );
    push(
        udp_frame(mac, a_ip, COAP_PORT, &coap_with_token(21, &expired_a)),
        false,
    );
    push(
        udp_frame(mac, b_ip, COAP_PORT, &coap_with_token(22, &early_b)),
        false,
    );
    push(
        udp_frame(mac, a_ip, COAP_PORT, &coap_with_token(23, &forged)),
        false,
    );
    push(
        udp_frame(mac, a_ip, COAP_PORT, &coap_with_token(24, &unsigned)),
        false,
    );
    // A valid token of A sent from an address no tenant owns: no key for its context.
    push(
        udp_frame(mac, stranger_ip, COAP_PORT, &coap_with_token(25, &good_a)),
        false,
    );
    // A CoAP message without a payload, and one that is not CoAP at all.
    push(
        udp_frame(mac, b_ip, COAP_PORT, &coap_message(26, &[], "x", &[])),
        false,
    );
    push(udp_frame(mac, b_ip, COAP_PORT, &[0x00, 0x01]), false);
    // Not for the CoAP port.
    push(
        udp_frame(mac, a_ip, 9000, &coap_with_token(27, &good_a)),
        false,
    );

    let mut got: Vec<Vec<u8>> = Vec::new();
    fld_qemu::testbed::inline_apps::pump(&mut s, &sent, 32, 1, |_, m| got.push(m.data().to_vec()));
    assert!(
        got == pass,
        "exactly the 16 authenticated messages arrive, unchanged and in order ({} arrived)",
        got.len()
    );

    let (name, counters) = s.card.fld.accelerator_counters().unwrap();
    assert_eq!(name, "iot-auth");
    let counter = |name: &str| counters.iter().find(|c| c.0 == name).map(|c| c.1);
    assert_eq!(counter("passed"), Some(16));
    let dropped: Vec<(Reason, u64)> = Reason::ALL
        .iter()
        .map(|&r| (r, counter(r.name()).unwrap()))
        .filter(|&(_, n)| n > 0)
        .collect();
    assert_eq!(
        dropped,
        vec![
            (Reason::NotCoap, 1),
            (Reason::NoPayload, 1),
            (Reason::AlgNotAllowed, 1),
            (Reason::BadSignature, 2),
            (Reason::Expired, 1),
            (Reason::NotYetValid, 1),
            (Reason::UnknownTenant, 1),
        ]
    );
    assert_eq!(counter("not_coap_frames"), Some(1));
}

/// The demo's and benchmark's workload, small: one message in eight carries another tenant's
/// signature and one in eight an expired token, and 30 of the 160 (valid or not) arrive as three
/// IPv4 fragments each; accelerator and host verification agree, every fragmented message is
/// reassembled in the card and authenticated whole.
#[test]
fn iot_workload_passes_the_same_messages_as_host_verification() {
    let r = fld_qemu::testbed::inline_apps::iot_workload(160, 256, 4, None).unwrap();
    assert!(r.verified(), "{r:?}");
    assert_eq!((r.expected, r.message_bytes), (120, 256));
    assert_eq!(r.frames_sent, 130 + 30 * 3);
    assert_eq!(
        r.counters,
        vec![
            ("fragments", 90),
            ("reassembled", 30),
            ("passed", 120),
            ("bad_signature", 20),
            ("expired", 20)
        ]
    );
    let card = |name| {
        r.card_counters
            .iter()
            .find(|(n, _)| *n == name)
            .map(|c| c.1)
    };
    assert_eq!(card("fragments_to_reassembly"), Some(90));
    assert_eq!(card("to_accelerator"), Some(130 + 30));
    assert_eq!(card("ip_truncated"), Some(0));
}
