//! The IoT service fails closed (`docs/nic-interface.md` §9.7): frames built by an independent
//! packet library (etherparse) try to walk around the token filter — as IPv4 fragments, with
//! bytes after the UDP datagram, with lying length fields — through `fldemu replay`'s engine (the
//! in-process card: uplink, eSwitch with the guard's rules, FLD, the defrag and IoT
//! accelerators, the host's queues). Then a property test lets an adversary combine all of it.

use etherparse::{IpFragOffset, IpNumber, Ipv4Header, UdpHeader};
use fld_device::accel::iot::{coap_message, sign_hs256};
use fld_device::accel::iot_accel::COAP_PORT;
use fld_host::guard::FragmentPolicy;
use fld_qemu::testbed::iot_attack::{Attack, Lie, Request, Token, NOW, STRANGER, TENANTS};
use fld_qemu::testbed::replay::{replay, ReplayOutcome, Replayer};
use proptest::prelude::*;

const NET_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x01];
const SERVER: [u8; 4] = [10, 0, 0, 2];

fn counter(c: &[(&'static str, u64)], name: &str) -> u64 {
    c.iter().find(|(k, _)| *k == name).map_or(u64::MAX, |e| e.1)
}

/// A CoAP request signed with `key`, expiring at `exp`.
fn request(id: u16, key: &[u8], exp: u64) -> Vec<u8> {
    let jwt = sign_hs256(
        key,
        &format!(
            r#"{{"sub":"{id}","exp":{exp},"pad":"{}"}}"#,
            "q".repeat(300)
        ),
    );
    coap_message(id, &id.to_be_bytes(), "sensors/up", jwt.as_bytes())
}

/// An IPv4 header from etherparse for `payload_len` bytes after it.
fn ipv4(src: [u8; 4], id: u16, payload_len: usize) -> Ipv4Header {
    let mut h = Ipv4Header::new(payload_len as u16, 64, IpNumber::UDP, src, SERVER).unwrap();
    h.identification = id;
    h
}

/// Ethernet + `ip` + `payload`, all written by etherparse.
fn frame(ip: &Ipv4Header, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    etherparse::Ethernet2Header {
        source: NET_MAC,
        destination: HOST_MAC,
        ether_type: etherparse::EtherType::IPV4,
    }
    .write(&mut f)
    .unwrap();
    ip.write(&mut f).unwrap();
    f.extend_from_slice(payload);
    f
}

/// The UDP datagram (header with checksum, then `data`) from `src` to the CoAP port.
fn udp_datagram(src: [u8; 4], data: &[u8]) -> Vec<u8> {
    let h = UdpHeader::with_ipv4_checksum(40000, COAP_PORT, &ipv4(src, 0, 8 + data.len()), data)
        .unwrap();
    [&h.to_bytes()[..], data].concat()
}

/// The datagram `ip_payload` as fragments whose data sizes are `sizes` (the last takes the
/// rest), DF clear: RFC 791 §3.2 as etherparse writes the headers.
fn fragments(src: [u8; 4], id: u16, ip_payload: &[u8], sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for &size in sizes.iter().chain([&usize::MAX]) {
        let end = at.saturating_add(size).min(ip_payload.len());
        let mut h = ipv4(src, id, end - at);
        h.dont_fragment = false;
        h.more_fragments = end < ip_payload.len();
        h.fragment_offset = IpFragOffset::try_new((at / 8) as u16).unwrap();
        out.push(frame(&h, &ip_payload[at..end]));
        at = end;
        if at == ip_payload.len() {
            break;
        }
    }
    out
}

/// The whole datagram as the card rebuilds it: DF clear, not a fragment.
fn whole(src: [u8; 4], id: u16, ip_payload: &[u8]) -> Vec<u8> {
    let mut h = ipv4(src, id, ip_payload.len());
    h.dont_fragment = false;
    frame(&h, ip_payload)
}

fn run(frames: Vec<Vec<u8>>, fragments: FragmentPolicy) -> ReplayOutcome {
    let attack = Attack {
        requests: Vec::new(),
        order_seed: 0,
        fragments,
    };
    replay(frames, &attack.config()).unwrap()
}

fn delivered(out: &ReplayOutcome) -> Vec<Vec<u8>> {
    out.delivered.iter().map(|(_, f)| f.clone()).collect()
}

/// Defect 1: an unauthenticated request sent as fragments was steered around the filter (no L4
/// fields on a fragment) and reassembled by the host. Now fragments are reassembled in the card
/// and the whole datagram is authenticated: nothing of it reaches the host.
#[test]
fn an_unauthenticated_request_in_fragments_never_reaches_the_host() {
    let (_, a, key_a) = TENANTS[0];
    let (_, _, key_b) = TENANTS[1];
    let forged = udp_datagram(a, &request(1, key_b, NOW + 60));
    let stranger = udp_datagram(STRANGER, &request(2, key_a, NOW + 60));
    let mut frames = fragments(a, 0x77, &forged, &[8, 16, 48]);
    frames.extend(fragments(STRANGER, 0x78, &stranger, &[200]));
    assert!(frames.len() >= 6);
    let out = run(frames, FragmentPolicy::Reassemble);
    assert_eq!(delivered(&out), Vec::<Vec<u8>>::new());
    assert_eq!(counter(&out.counters, "reassembled"), 2);
    assert_eq!(counter(&out.counters, "bad_signature"), 1);
    assert_eq!(counter(&out.counters, "unknown_tenant"), 1);
    assert_eq!(counter(&out.card_counters, "fragments_to_reassembly"), 6);
}

/// A valid request that arrives fragmented — out of order, one fragment twice — is delivered
/// exactly once, whole and byte for byte.
#[test]
fn a_valid_request_in_fragments_is_delivered_once_and_whole() {
    let (_, a, key_a) = TENANTS[0];
    let datagram = udp_datagram(a, &request(3, key_a, NOW + 60));
    let mut frames = fragments(a, 0x79, &datagram, &[64, 8, 128]);
    frames.reverse();
    frames.insert(1, frames[2].clone());
    let out = run(frames, FragmentPolicy::Reassemble);
    assert_eq!(delivered(&out), vec![whole(a, 0x79, &datagram)]);
    assert_eq!(counter(&out.counters, "duplicates"), 1);
    assert_eq!(counter(&out.counters, "passed"), 1);
}

/// With fragments refused (RFC 7252 §4.6), none is reassembled or delivered, each is counted;
/// whole requests still pass.
#[test]
fn refused_fragments_are_dropped_and_counted() {
    let (_, a, key_a) = TENANTS[0];
    let datagram = udp_datagram(a, &request(4, key_a, NOW + 60));
    let mut frames = fragments(a, 0x7a, &datagram, &[64]);
    let mut h = ipv4(a, 0x7b, datagram.len());
    h.dont_fragment = true;
    let entire = frame(&h, &datagram);
    frames.push(entire.clone());
    let out = run(frames, FragmentPolicy::Refuse);
    assert_eq!(delivered(&out), vec![entire]);
    assert_eq!(counter(&out.card_counters, "refused_fragments"), 2);
    assert_eq!(counter(&out.counters, "fragments"), 0);
}

/// Defect 2: the CoAP message was taken to end at the IP total length, so a valid message with
/// bytes after its UDP datagram (UDP length shorter than the IP payload: legal, RFC 768) was
/// dropped. The message is the UDP payload; the frame reaches the host as it was sent.
#[test]
fn the_coap_message_ends_at_the_udp_length() {
    let (_, a, key_a) = TENANTS[0];
    let coap = request(5, key_a, NOW + 60);
    let mut payload = udp_datagram(a, &coap);
    payload.extend_from_slice(b"\xff\xfftrailing bytes");
    let mut h = ipv4(a, 0x7c, payload.len());
    h.dont_fragment = true;
    let f = frame(&h, &payload);
    let out = run(vec![f.clone()], FragmentPolicy::Reassemble);
    assert_eq!(delivered(&out), vec![f]);
    assert_eq!(counter(&out.counters, "passed"), 1);
}

/// Defect 3: a datagram to the service whose headers cannot be parsed consistently reached the
/// host on the unprotected path, uncounted. Each is now dropped by the card and counted by
/// reason.
#[test]
fn malformed_headers_are_dropped_and_counted_by_reason() {
    let (_, a, key_a) = TENANTS[0];
    let coap = request(6, key_a, NOW + 60);
    let datagram = udp_datagram(a, &coap);
    let good = {
        let mut h = ipv4(a, 0x80, datagram.len());
        h.dont_fragment = true;
        frame(&h, &datagram)
    };
    let mut udp_past_ip = good.clone();
    let past = (datagram.len() + 1) as u16;
    udp_past_ip[38..40].copy_from_slice(&past.to_be_bytes());
    let mut udp_below_header = good.clone();
    udp_below_header[38..40].copy_from_slice(&7u16.to_be_bytes());
    let ip_past_frame = good[..good.len() - 1].to_vec();
    let mut ihl_below_five = good.clone();
    ihl_below_five[14] = 0x44;
    let mut options_past_frame = good[..14 + 40].to_vec();
    options_past_frame[14] = 0x4f;
    let mut ip_below_header = good.clone();
    ip_below_header[16..18].copy_from_slice(&19u16.to_be_bytes());
    let mut udp_header_cut = good[..14 + 20 + 5].to_vec();
    udp_header_cut[16..18].copy_from_slice(&25u16.to_be_bytes());
    let frames = vec![
        udp_past_ip,
        udp_below_header,
        ip_past_frame,
        ihl_below_five,
        options_past_frame,
        ip_below_header,
        udp_header_cut,
    ];
    let out = run(frames, FragmentPolicy::Reassemble);
    assert_eq!(delivered(&out), Vec::<Vec<u8>>::new());
    assert_eq!(out.fld_rx, 0, "dropped in the NIC, before the accelerator");
    for (reason, n) in [
        ("udp_length_errors", 2),
        ("ip_truncated", 1),
        ("ip_header_errors", 2),
        ("ip_length_errors", 1),
        ("l4_header_errors", 1),
    ] {
        assert_eq!(counter(&out.card_counters, reason), n, "{reason}");
    }
}

/// Fragments that never complete are dropped and counted by reason: a piece missing (the
/// reassembly timer), an overlap with other bytes (RFC 5722), more datagrams than the
/// reassembly memory holds (evicted).
#[test]
fn incomplete_fragments_are_dropped_and_counted_by_reason() {
    let (_, a, key_a) = TENANTS[0];
    let d = |id| udp_datagram(a, &request(id, key_a, NOW + 60));
    let cfg = |max_datagrams, timeout_ns| {
        let mut c = Attack {
            requests: Vec::new(),
            order_seed: 0,
            fragments: FragmentPolicy::Reassemble,
        }
        .config();
        c.defrag.max_datagrams = max_datagrams;
        c.defrag.timeout_ns = timeout_ns;
        c
    };
    // A missing last piece: the first one waits until the timer runs out.
    let first_only = fragments(a, 0x90, &d(7), &[64]).remove(0);
    let out = replay(vec![first_only], &cfg(16, 1)).unwrap();
    assert_eq!(delivered(&out), Vec::<Vec<u8>>::new());
    assert_eq!(counter(&out.counters, "timeouts"), 1);
    // The same range with other bytes.
    let mut parts = fragments(a, 0x91, &d(8), &[64]);
    let mut other = parts[0].clone();
    other[14 + 20 + 30] ^= 1;
    parts.insert(1, other);
    let out = replay(parts, &cfg(16, 60_000_000_000)).unwrap();
    assert_eq!(delivered(&out), Vec::<Vec<u8>>::new());
    assert_eq!(counter(&out.counters, "overlaps"), 1);
    // Three datagrams started with room for two.
    let starts: Vec<Vec<u8>> = (0..3)
        .map(|i| fragments(a, 0xa0 + i, &d(9 + i), &[64]).remove(0))
        .collect();
    let out = replay(starts, &cfg(2, 60_000_000_000)).unwrap();
    assert_eq!(counter(&out.counters, "evicted"), 1);
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![
        4 => Just(Token::Valid),
        1 => Just(Token::OtherTenantsKey),
        1 => Just(Token::Expired),
        1 => Just(Token::Unsigned),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Token::Garbage),
    ]
}

fn lie() -> impl Strategy<Value = Option<Lie>> {
    prop_oneof![
        6 => Just(None),
        1 => (1u16..3000).prop_map(|n| Some(Lie::UdpLengthPastPayload(n))),
        1 => any::<u8>().prop_map(|n| Some(Lie::UdpLengthBelowHeader(n))),
        1 => (1u16..2000).prop_map(|n| Some(Lie::IpLengthPastFrame(n))),
        1 => any::<u8>().prop_map(|n| Some(Lie::IhlBelowFive(n))),
    ]
}

fn request_strategy() -> impl Strategy<Value = Request> {
    (
        0u8..4,
        token(),
        0u16..1200,
        prop_oneof![3 => Just(Vec::new()), 1 => proptest::collection::vec(any::<u8>(), 1..20)],
        lie(),
        prop_oneof![2 => Just(Vec::new()), 3 => proptest::collection::vec(1u8..40, 1..6)],
        proptest::option::weighted(0.3, any::<u8>()),
        proptest::option::weighted(0.15, any::<u8>()),
        proptest::option::weighted(0.15, (any::<u8>(), any::<u16>())),
    )
        .prop_map(
            |(sender, token, padding, trailing, lie, fragments, duplicate, missing, overlap)| {
                Request {
                    sender,
                    token,
                    padding,
                    trailing,
                    lie,
                    fragments,
                    duplicate,
                    missing,
                    overlap,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever the adversary combines, the host receives every clean valid request exactly
    /// once, byte for byte, and nothing else of the service: no fragment, no request without a
    /// valid token of its tenant, nothing altered.
    #[test]
    fn the_host_receives_exactly_the_valid_requests(
        requests in proptest::collection::vec(request_strategy(), 1..8),
        order_seed in any::<u64>(),
        refuse in proptest::bool::weighted(0.2),
    ) {
        let attack = Attack {
            requests,
            order_seed,
            fragments: if refuse { FragmentPolicy::Refuse } else { FragmentPolicy::Reassemble },
        };
        if let Err(e) = attack.run() {
            prop_assert!(false, "{e}\n{attack:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// A card kept across replays (as the fuzz target keeps it) answers each attack exactly as a
    /// card brought up for it alone: the same frames delivered in the same order, the same
    /// accelerator, FLD and eSwitch counts. Nothing one replay leaves (reassembly state, queued
    /// frames, counter values) reaches the next.
    #[test]
    fn a_kept_card_replays_as_a_fresh_one(
        attacks in proptest::collection::vec(
            (proptest::collection::vec(request_strategy(), 1..6), any::<u64>()), 2..5),
        refuse in proptest::bool::weighted(0.3),
    ) {
        let fragments = if refuse { FragmentPolicy::Refuse } else { FragmentPolicy::Reassemble };
        let attacks: Vec<Attack> = attacks
            .into_iter()
            .map(|(requests, order_seed)| Attack { requests, order_seed, fragments })
            .collect();
        let mut kept = Replayer::new(&attacks[0].config()).unwrap();
        for attack in &attacks {
            let (wire, _) = attack.frames();
            let fresh = replay(wire.clone(), &attack.config()).unwrap();
            prop_assert_eq!(kept.run(wire).unwrap(), fresh, "{:?}", attack);
        }
    }
}
