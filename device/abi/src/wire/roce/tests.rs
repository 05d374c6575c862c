//! The RoCEv2 formats against packets built by an independent implementation: scapy's RoCE
//! layer (`scapy.contrib.roce`, whose ICRC code follows A17.3.3) produced these frames. Our
//! reader must find every field, our ICRC must equal scapy's, and our writer must produce the
//! same bytes. The first vector came from
//!
//! ```text
//! Ether(src="02:fd:00:00:00:00", dst="02:fd:00:00:00:01")
//!   / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64, id=7, flags="DF")
//!   / UDP(sport=0xc123, dport=4791, chksum=0)
//!   / BTH(opcode=0x0a, padcount=3, pkey=0xffff, dqpn=0x112, ackreq=1, psn=0x123456)
//!   / Raw(struct.pack("!QII", 0x7f0012345678, 0xa17, 13) + bytes(range(13)) + b"\0\0\0")
//! ```
//!
//! and the others likewise from the fields their tests check (RETH, ImmDt and AtomicETH as raw
//! bytes after scapy's BTH, the AETH as scapy's own layer).

use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// RDMA WRITE ONLY over IPv4, 13 bytes of payload (3 bytes of pad), AckReq.
const WRITE_ONLY_V4: &str = "02fd0000000102fd0000000008004500004c00074000401126980a0000010a000002c12312b7003800000a30ffff000001128012345600007f001234567800000a170000000d000102030405060708090a0b0c0000008d52e05a";
/// ACKNOWLEDGE, MSN 5, credits "unlimited".
const ACK_V4: &str = "02fd0000000002fd0000000108004500003000094000401126b20a0000020a000001c45612b7001c00001100ffff00000113001234561f000005458b3d69";
/// SEND ONLY with immediate over IPv6, solicited.
const SEND_ONLY_IMM_V6: &str = "02fd0000000102fd0000000086dd6000000000241140fd000000000000000000000000000001fd000000000000000000000000000002c00112b7002400000580ffff0000020000000001deadbeef526f434576322121e1d9be32";
/// COMPARE SWAP over IPv4 with DSCP/ECN set and TTL 17 (both outside the ICRC).
const CMP_SWAP_V4: &str = "02fd0000000102fd00000000080045690048424240001111a38bc0a8010ac0a80114d00012b7003400001300ffff00abcdef80fffffe00000000000010000000123400000000000000550000000000000044dcd0eeb7";

/// The transport packet of an IPv4 (`l2 = 42`) or IPv6 (`l2 = 62`) frame and its ICRC check.
fn parse_frame(frame: &[u8], ipv6: bool) -> IbPacket<'_> {
    let l2 = if ipv6 { 62 } else { 42 };
    let p = IbPacket::parse(&frame[l2..]).unwrap();
    assert_eq!(
        icrc(frame, 14, frame.len(), ipv6),
        Some(p.icrc),
        "ICRC as scapy computed it"
    );
    p
}

#[test]
fn write_only_matches_scapy_field_by_field_and_byte_for_byte() {
    let frame = hex(WRITE_ONLY_V4);
    let p = parse_frame(&frame, false);
    let b = p.headers.bth;
    assert_eq!(
        (
            b.opcode,
            b.pad_count,
            b.pkey,
            b.dest_qp,
            b.ack_request,
            b.psn
        ),
        (opcode::WRITE_ONLY, 3, 0xffff, 0x112, true, 0x123456)
    );
    assert_eq!(
        p.headers.reth,
        Some(Reth {
            virtual_address: 0x7f00_1234_5678,
            rkey: 0xa17,
            dma_length: 13
        })
    );
    assert_eq!(p.payload, &(0..13).collect::<Vec<u8>>()[..]);
    assert_eq!(p.info.position, Position::Only);

    let addr = RoceAddress {
        src_mac: [2, 0xfd, 0, 0, 0, 0],
        dst_mac: [2, 0xfd, 0, 0, 0, 1],
        src_gid: ipv4_gid([10, 0, 0, 1]),
        dst_gid: ipv4_gid([10, 0, 0, 2]),
        src_port: 0xc123,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
    };
    let mut out = [0u8; 256];
    let n = addr.emit(&p.headers, p.payload, 7, &mut out).unwrap();
    assert_eq!(&out[..n], &frame[..]);
}

#[test]
fn ack_and_atomic_match_scapy() {
    let frame = hex(ACK_V4);
    let p = parse_frame(&frame, false);
    assert_eq!(p.headers.bth.opcode, opcode::ACKNOWLEDGE);
    assert_eq!(
        p.headers.aeth,
        Some(Aeth {
            kind: AckKind::Ack {
                credits: CREDITS_UNLIMITED
            },
            msn: 5
        })
    );
    assert!(p.payload.is_empty());

    let frame = hex(CMP_SWAP_V4);
    let p = parse_frame(&frame, false);
    assert_eq!(
        (p.headers.bth.dest_qp, p.headers.bth.psn),
        (0xabcdef, 0xfffffe)
    );
    assert_eq!(
        p.headers.atomic_eth,
        Some(AtomicEth {
            virtual_address: 0x1000,
            rkey: 0x1234,
            swap_add: 0x55,
            compare: 0x44
        })
    );
    let addr = RoceAddress {
        src_mac: [2, 0xfd, 0, 0, 0, 0],
        dst_mac: [2, 0xfd, 0, 0, 0, 1],
        src_gid: ipv4_gid([192, 168, 1, 10]),
        dst_gid: ipv4_gid([192, 168, 1, 20]),
        src_port: 0xd000,
        traffic_class: 0x69,
        hop_limit: 17,
        flow_label: 0,
    };
    let mut out = [0u8; 256];
    let n = addr.emit(&p.headers, &[], 0x4242, &mut out).unwrap();
    assert_eq!(&out[..n], &frame[..]);
}

#[test]
fn send_with_immediate_over_ipv6_matches_scapy() {
    let frame = hex(SEND_ONLY_IMM_V6);
    let p = parse_frame(&frame, true);
    assert_eq!(p.headers.bth.opcode, opcode::SEND_ONLY_IMM);
    assert!(p.headers.bth.solicited);
    assert_eq!(p.headers.imm, Some(ImmDt(0xdead_beef)));
    assert_eq!(p.payload, b"RoCEv2!!");
    let gid = |last| {
        let mut g = [0u8; 16];
        g[0] = 0xfd;
        g[15] = last;
        g
    };
    let addr = RoceAddress {
        src_mac: [2, 0xfd, 0, 0, 0, 0],
        dst_mac: [2, 0xfd, 0, 0, 0, 1],
        src_gid: gid(1),
        dst_gid: gid(2),
        src_port: 0xc001,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
    };
    let mut out = [0u8; 256];
    let n = addr.emit(&p.headers, p.payload, 0, &mut out).unwrap();
    assert_eq!(&out[..n], &frame[..]);
}

/// Every ICRC starts from the CRC of the eight ones standing for the LRH; the constant the
/// computation starts from is that CRC.
#[test]
fn the_icrc_starts_from_the_crc_of_the_lrh_ones() {
    assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_ONES_CRC);
}

#[test]
fn the_icrc_covers_every_invariant_byte_and_no_variant_one() {
    for (vector, ipv6) in [(WRITE_ONLY_V4, false), (SEND_ONLY_IMM_V6, true)] {
        let frame = hex(vector);
        let good = icrc(&frame, 14, frame.len(), ipv6).unwrap();
        let (ip_len, l2) = if ipv6 { (40, 62) } else { (20, 42) };
        // Fields a router or switch may rewrite (IPv4 TOS/TTL/checksum, IPv6 traffic class,
        // flow label and hop limit, the UDP checksum, BTH FECN/BECN).
        let variant: Vec<usize> = if ipv6 {
            vec![14, 15, 16, 17, 21]
        } else {
            vec![15, 22, 24, 25]
        }
        .into_iter()
        .chain([14 + ip_len + 6, 14 + ip_len + 7, l2 + 4])
        .collect();
        for at in 14..frame.len() - ICRC_LEN {
            let mut f = frame.clone();
            // Keep the IP version nibble: it decides which header is masked.
            f[at] ^= if at == 14 { 0x0f } else { 0xff };
            let changed = icrc(&f, 14, f.len(), ipv6).unwrap() != good;
            assert_eq!(changed, !variant.contains(&at), "byte {at} of {vector}");
        }
    }
}

/// The ICRC by its definition (A17.3.3): the CRC-32 of eight ones for the LRH, then the IP
/// datagram up to the ICRC with the variant fields set to ones.
fn icrc_by_definition(frame: &[u8], ipv6: bool) -> u32 {
    let mut covered = vec![0xff; 8];
    let ip = covered.len();
    covered.extend_from_slice(&frame[14..frame.len() - ICRC_LEN]);
    let variant: &[usize] = if ipv6 {
        &[1, 2, 3, 7, 46, 47, 52]
    } else {
        &[1, 8, 10, 11, 26, 27, 32]
    };
    for &at in variant {
        covered[ip + at] = 0xff;
    }
    if ipv6 {
        covered[ip] |= 0x0f;
    }
    crc32fast::hash(&covered)
}

/// The ICRC is summed in two pieces, the masked headers copied and the rest in place: every
/// length of the rest gives the ICRC the definition does, and so does the vector's whole packet.
#[test]
fn the_icrc_of_every_length_is_the_crc_of_the_masked_datagram() {
    for (vector, ipv6) in [(WRITE_ONLY_V4, false), (SEND_ONLY_IMM_V6, true)] {
        let headers = hex(vector);
        let bth_end = if ipv6 { 62 } else { 42 } + BTH_LEN;
        for len in 0..512 {
            let mut frame = headers[..bth_end].to_vec();
            frame.extend((0..len).map(|i| (i * 7 + len) as u8));
            frame.extend_from_slice(&[0; ICRC_LEN]);
            assert_eq!(
                icrc(&frame, 14, frame.len(), ipv6),
                Some(icrc_by_definition(&frame, ipv6)),
                "{len} bytes behind the BTH of {vector}"
            );
        }
        let whole = hex(vector);
        assert_eq!(
            icrc_by_definition(&whole, ipv6).to_le_bytes(),
            whole[whole.len() - ICRC_LEN..],
            "the definition gives the vector's own ICRC"
        );
    }
}

/// A GID is an IPv4 address exactly when its first 96 bits are ::ffff:0:0 (RFC 4291 §2.5.5.2,
/// as RoCEv2 carries IPv4 addresses): a mapped address is, whatever its last four bytes, and
/// changing any bit of the prefix makes it not one.
#[test]
fn a_gid_is_ipv4_exactly_when_it_is_ipv4_mapped() {
    for addr in [[0, 0, 0, 0], [10, 0, 0, 1], [255; 4]] {
        let gid = ipv4_gid(addr);
        assert!(gid_is_ipv4(&gid), "{addr:?}");
        for byte in 0..12 {
            for bit in 0..8 {
                let mut g = gid;
                g[byte] ^= 1 << bit;
                assert!(!gid_is_ipv4(&g), "byte {byte} bit {bit} of {addr:?}");
            }
        }
    }
    assert!(!gid_is_ipv4(&[0; 16]), "the unspecified address");
    assert!(!gid_is_ipv4(&[
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4
    ]));
}

#[test]
fn malformed_transport_packets_are_refused_not_misread() {
    let frame = hex(WRITE_ONLY_V4);
    let ib = &frame[42..];
    // Shorter than BTH + RETH + ICRC: truncated, whatever is cut.
    for cut in 0..BTH_LEN + RETH_LEN + ICRC_LEN {
        assert_eq!(
            IbPacket::parse(&ib[..cut]),
            Err(Error::Truncated),
            "{cut} bytes"
        );
    }
    let mut bad = ib.to_vec();
    bad[0] = 0x15; // reserved RC opcode
    assert_eq!(IbPacket::parse(&bad), Err(Error::Malformed));
    bad[0] = opcode::SEND_ONLY_INVALIDATE;
    assert_eq!(IbPacket::parse(&bad), Err(Error::Malformed));
    let mut v = ib.to_vec();
    v[1] |= 1; // transport version 1
    assert_eq!(IbPacket::parse(&v), Err(Error::Malformed));
    // An ACK with payload, and an AETH with the reserved syndrome class 10b.
    let ack = hex(ACK_V4);
    let mut long = ack[42..ack.len() - 4].to_vec();
    long.extend_from_slice(&[0; 8]);
    assert_eq!(IbPacket::parse(&long), Err(Error::Malformed));
    let mut reserved = ack[42..].to_vec();
    reserved[12] = 0x40;
    assert_eq!(IbPacket::parse(&reserved), Err(Error::Malformed));
    // A pad count longer than the payload.
    let mut pad = ack[42..].to_vec();
    pad[0] = opcode::SEND_ONLY;
    pad[1] = 0x30;
    pad.truncate(12);
    pad.extend_from_slice(&[1, 2, 0, 0, 0, 0]);
    assert_eq!(IbPacket::parse(&pad), Err(Error::Malformed));
}

#[test]
fn psn_arithmetic_wraps_at_24_bits() {
    assert_eq!(psn_delta(0, PSN_MASK), 1);
    assert_eq!(psn_delta(PSN_MASK, 0), -1);
    assert_eq!(psn_delta(5, 3), 2);
    assert_eq!(psn_delta(0x7f_ffff, 0), 0x7f_ffff);
    assert_eq!(psn_delta(0x80_0000, 0), -0x80_0000);
    assert_eq!(psn_add(PSN_MASK, 2), 1);
    assert_eq!(ack_timeout_ns(14), Some(67_108_864));
    assert_eq!(ack_timeout_ns(0), None);
    assert_eq!(RNR_TIMER_NS[12], 640_000);
    assert_eq!(pad_count(13), 3);
    assert_eq!(pad_count(16), 0);
}

#[test]
fn every_opcode_round_trips_through_writer_and_reader() {
    for op in 0u8..=0x1f {
        let Some(info) = opcode_info(op) else {
            continue;
        };
        let headers = IbHeaders {
            bth: BthRepr {
                opcode: op,
                pkey: DEFAULT_PKEY,
                dest_qp: 0x42,
                psn: 77,
                ..Default::default()
            },
            reth: info.reth.then_some(Reth {
                virtual_address: 1,
                rkey: 2,
                dma_length: 3,
            }),
            aeth: info.aeth.then_some(Aeth {
                kind: AckKind::Nak {
                    code: nak::REMOTE_ACCESS_ERROR,
                },
                msn: 9,
            }),
            imm: info.imm.then_some(ImmDt(4)),
            atomic_eth: info.atomic_eth.then_some(AtomicEth {
                virtual_address: 8,
                rkey: 5,
                swap_add: 6,
                compare: 7,
            }),
            atomic_ack_eth: info.atomic_ack_eth.then_some(AtomicAckEth { original: 10 }),
        };
        assert_eq!(headers.len(), info.header_len());
        let payload: &[u8] = if info.payload { b"abcde" } else { b"" };
        let addr = RoceAddress {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_gid: ipv4_gid([10, 0, 0, 1]),
            dst_gid: ipv4_gid([10, 0, 0, 2]),
            src_port: flow_source_port(1, 0x42),
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        };
        let mut out = [0u8; 256];
        let n = addr.emit(&headers, payload, 1, &mut out).unwrap();
        let p = IbPacket::parse(&out[42..n]).unwrap();
        let mut want = headers;
        want.bth.pad_count = pad_count(payload.len());
        assert_eq!(p.headers, want, "opcode {op:#x}");
        assert_eq!(p.payload, payload);
        assert_eq!(icrc(&out[..n], 14, n, false), Some(p.icrc));
    }
}
