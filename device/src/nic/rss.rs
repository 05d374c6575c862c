//! Toeplitz receive-side scaling hash, as in Microsoft's RSS specification
//! ("RSS Hashing Functions", "Verifying the RSS Hash Calculation").
//!
//! [`toeplitz`] is the bit-serial reference; [`Toeplitz`] is the table-driven
//! form the datapath uses. Both hash at most [`RSS_MAX_INPUT_LEN`] bytes (a
//! 40-byte key covers 36 input bytes: 320 key bits = 288 input bits + 32).
//! Hashing is allocation-free and never panics.

use crate::nic::packet::{L3Kind, L4Kind, ParsedFrame};

/// Hash-field selection bits for [`hash_input`] (the RSS group's `hash_fields`).
use fld_abi::nic::rss_fields::{
    DST_IP as HASH_DST_IP, DST_PORT as HASH_DST_PORT, SRC_IP as HASH_SRC_IP,
    SRC_PORT as HASH_SRC_PORT,
};
pub use fld_abi::nic::{DEFAULT_RSS_KEY, RSS_KEY_LEN};
/// Longest input a 40-byte key covers; longer input is truncated to this.
pub const RSS_MAX_INPUT_LEN: usize = 36;

/// Reference Toeplitz hash, bit-serial over a 64-bit sliding key window: for
/// every set input bit (MSB first) XOR in the 32 key bits starting at that
/// bit's position. Input beyond [`RSS_MAX_INPUT_LEN`] bytes is ignored.
pub fn toeplitz(key: &[u8; RSS_KEY_LEN], input: &[u8]) -> u32 {
    // window = key bits [8*i, 8*i + 64) while processing input byte i.
    let mut window = key
        .iter()
        .take(8)
        .fold(0u64, |w, &b| (w << 8) | u64::from(b));
    let mut next_key = key.iter().skip(8);
    let mut hash = 0u32;
    for &byte in input.iter().take(RSS_MAX_INPUT_LEN) {
        for bit in 0..8u32 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= (window >> (32 - bit)) as u32;
            }
        }
        window = (window << 8) | u64::from(next_key.next().copied().unwrap_or(0));
    }
    hash
}

/// Table-driven Toeplitz hash: one 256-entry table per input byte position,
/// so hashing costs one lookup and XOR per input byte.
#[derive(Clone)]
pub struct Toeplitz {
    key: [u8; RSS_KEY_LEN],
    tables: Box<[[u32; 256]; RSS_MAX_INPUT_LEN]>,
}

impl Toeplitz {
    /// Precomputes the tables for `key` (allocates once, 36 KiB).
    pub fn new(key: &[u8; RSS_KEY_LEN]) -> Self {
        let mut tables = Box::new([[0u32; 256]; RSS_MAX_INPUT_LEN]);
        for (pos, table) in tables.iter_mut().enumerate() {
            // Key bits [8*pos, 8*pos + 40): enough for 8 windows of 32 bits.
            let w = key
                .iter()
                .skip(pos)
                .take(5)
                .fold(0u64, |w, &b| (w << 8) | u64::from(b));
            let mut per_bit = [0u32; 8];
            for (bit, slot) in per_bit.iter_mut().enumerate() {
                // Input bit `bit` (MSB first) selects key bits starting at 8*pos + bit.
                *slot = (w >> (8 - bit)) as u32;
            }
            for (value, entry) in table.iter_mut().enumerate() {
                *entry = per_bit
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| value & (0x80 >> bit) != 0)
                    .fold(0, |h, (_, k)| h ^ k);
            }
        }
        Toeplitz { key: *key, tables }
    }

    pub fn key(&self) -> &[u8; RSS_KEY_LEN] {
        &self.key
    }

    /// Same result as [`toeplitz`] with this key.
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        self.tables
            .iter()
            .zip(input)
            .fold(0, |h, (table, &b)| h ^ table[usize::from(b)])
    }
}

impl core::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Toeplitz")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// Builds the hash input in the Microsoft order: source address, destination
/// address, source port, destination port (network byte order), only the
/// selected fields, only those the frame has (ports only for TCP/UDP and
/// non-fragments; IPv4 4-byte addresses, IPv6 16-byte). Returns the input
/// bytes in a fixed buffer and the length used; length 0 means "not
/// hashable" (hash 0).
pub fn hash_input(p: &ParsedFrame, fields: u8) -> ([u8; RSS_MAX_INPUT_LEN], usize) {
    let mut buf = [0u8; RSS_MAX_INPUT_LEN];
    let mut len = 0usize;
    let addr_len = match p.l3 {
        L3Kind::Ipv4 => 4,
        L3Kind::Ipv6 => 16,
        L3Kind::None => return (buf, 0),
    };
    let has_ports = matches!(p.l4, L4Kind::Tcp | L4Kind::Udp) && !p.ipv4_fragment && !p.malformed;
    let src_port = p.src_port.to_be_bytes();
    let dst_port = p.dst_port.to_be_bytes();
    let parts: [(bool, &[u8]); 4] = [
        (
            fields & HASH_SRC_IP != 0,
            p.src_ip.get(..addr_len).unwrap_or(&[]),
        ),
        (
            fields & HASH_DST_IP != 0,
            p.dst_ip.get(..addr_len).unwrap_or(&[]),
        ),
        (has_ports && fields & HASH_SRC_PORT != 0, &src_port),
        (has_ports && fields & HASH_DST_PORT != 0, &dst_port),
    ];
    for (_, bytes) in parts.iter().filter(|(on, _)| *on) {
        for &b in *bytes {
            if let Some(slot) = buf.get_mut(len) {
                *slot = b;
                len += 1;
            }
        }
    }
    (buf, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::packet::parse;
    use crate::nic::packet::tests::{tcp4, tcp6, udp4, XorShift};
    use std::net::{Ipv4Addr, Ipv6Addr};

    const IP_ONLY: u8 = HASH_SRC_IP | HASH_DST_IP;
    const IP_PORTS: u8 = IP_ONLY | HASH_SRC_PORT | HASH_DST_PORT;

    /// "Verifying the RSS Hash Calculation", IPv4 table:
    /// (destination, dst port, source, src port, IPv4 hash, IPv4 with TCP hash).
    const V4_ROWS: [(&str, u16, &str, u16, u32, u32); 5] = [
        (
            "161.142.100.80",
            1766,
            "66.9.149.187",
            2794,
            0x323e_8fc2,
            0x51cc_c178,
        ),
        (
            "65.69.140.83",
            4739,
            "199.92.111.2",
            14230,
            0xd718_262a,
            0xc626_b0ea,
        ),
        (
            "12.22.207.184",
            38024,
            "24.19.198.95",
            12898,
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        (
            "209.142.163.6",
            2217,
            "38.27.205.30",
            48228,
            0x8298_9176,
            0xafc7_327f,
        ),
        (
            "202.188.127.2",
            1303,
            "153.39.163.191",
            44251,
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];
    /// Same document, IPv6 table.
    const V6_ROWS: [(&str, u16, &str, u16, u32, u32); 3] = [
        (
            "3ffe:2501:200:3::1",
            1766,
            "3ffe:2501:200:1fff::7",
            2794,
            0x2cc1_8cd5,
            0x4020_7d3d,
        ),
        (
            "ff02::1",
            4739,
            "3ffe:501:8::260:97ff:fe40:efab",
            14230,
            0x0f0c_461c,
            0xdde5_1bbf,
        ),
        (
            "fe80::200:f8ff:fe21:67cf",
            38024,
            "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
            44251,
            0x4b61_e985,
            0x02d1_feef,
        ),
    ];

    fn v4(s: &str) -> [u8; 4] {
        s.parse::<Ipv4Addr>().expect("addr").octets()
    }
    fn v6(s: &str) -> [u8; 16] {
        s.parse::<Ipv6Addr>().expect("addr").octets()
    }

    /// Hashes through all three paths and checks they agree on `want`.
    fn check(input: &[u8], want: u32, what: &str) {
        let fast = Toeplitz::new(&DEFAULT_RSS_KEY);
        assert_eq!(toeplitz(&DEFAULT_RSS_KEY, input), want, "toeplitz() {what}");
        assert_eq!(fast.hash(input), want, "Toeplitz::hash {what}");
    }

    #[test]
    fn microsoft_ipv4_vectors() {
        for (dst, dp, src, sp, h_ip, h_tcp) in V4_ROWS {
            let (s, d) = (v4(src), v4(dst));
            let ip: Vec<u8> = [&s[..], &d[..]].concat();
            check(&ip, h_ip, dst);
            let tcp: Vec<u8> = [&ip[..], &sp.to_be_bytes(), &dp.to_be_bytes()].concat();
            check(&tcp, h_tcp, dst);
        }
    }

    #[test]
    fn microsoft_ipv6_vectors() {
        for (dst, dp, src, sp, h_ip, h_tcp) in V6_ROWS {
            let (s, d) = (v6(src), v6(dst));
            let ip: Vec<u8> = [&s[..], &d[..]].concat();
            check(&ip, h_ip, dst);
            let tcp: Vec<u8> = [&ip[..], &sp.to_be_bytes(), &dp.to_be_bytes()].concat();
            check(&tcp, h_tcp, dst);
        }
    }

    #[test]
    fn microsoft_vectors_through_parsed_frames() {
        let fast = Toeplitz::new(&DEFAULT_RSS_KEY);
        let mut frames = Vec::new();
        for (dst, dp, src, sp, h_ip, h_tcp) in V4_ROWS {
            frames.push((tcp4(v4(src), v4(dst), sp, dp, 12), h_ip, h_tcp));
        }
        for (dst, dp, src, sp, h_ip, h_tcp) in V6_ROWS {
            frames.push((tcp6(v6(src), v6(dst), sp, dp, 12), h_ip, h_tcp));
        }
        for (f, h_ip, h_tcp) in frames {
            let p = parse(&f);
            assert!(!p.malformed);
            for (fields, want) in [(IP_ONLY, h_ip), (IP_PORTS, h_tcp)] {
                let (buf, len) = hash_input(&p, fields);
                assert_eq!(
                    len,
                    if p.l3 == L3Kind::Ipv4 { 8 } else { 32 }
                        + if fields == IP_PORTS { 4 } else { 0 }
                );
                assert_eq!(fast.hash(&buf[..len]), want);
                assert_eq!(toeplitz(&DEFAULT_RSS_KEY, &buf[..len]), want);
            }
        }
    }

    #[test]
    fn hash_input_selection_and_order() {
        let f = udp4([1, 2, 3, 4], [5, 6, 7, 8], 0x1122, 0x3344, 5);
        let p = parse(&f);
        let get = |fields| {
            let (b, n) = hash_input(&p, fields);
            b[..n].to_vec()
        };
        assert_eq!(
            get(IP_PORTS),
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44]
        );
        assert_eq!(get(HASH_DST_IP | HASH_DST_PORT), [5, 6, 7, 8, 0x33, 0x44]);
        assert_eq!(get(HASH_SRC_PORT), [0x11, 0x22]);
        assert_eq!(get(0), Vec::<u8>::new());
        // Unused tail of the buffer stays zero.
        assert_eq!(hash_input(&p, IP_ONLY).0[8..], [0u8; 28]);

        // Fragment: no ports even when asked.
        let mut frag = p;
        frag.ipv4_fragment = true;
        frag.l4 = L4Kind::None;
        assert_eq!(hash_input(&frag, IP_PORTS).1, 8);
        // Non-TCP/UDP: addresses only.
        let mut other = f.clone();
        other[23] = 47;
        assert_eq!(hash_input(&parse(&other), IP_PORTS).1, 8);
        // Non-IP: not hashable.
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(hash_input(&parse(&arp), IP_PORTS), ([0u8; 36], 0));
        assert_eq!(hash_input(&parse(&[]), IP_PORTS).1, 0);
        // IPv6 with ports fills all 36 bytes.
        let q = parse(&tcp6([0xaa; 16], [0xbb; 16], 1, 2, 0));
        let (b, n) = hash_input(&q, IP_PORTS);
        assert_eq!(n, 36);
        assert_eq!((b[0], b[16], &b[32..]), (0xaa, 0xbb, &[0u8, 1, 0, 2][..]));
    }

    #[test]
    fn reference_and_table_agree() {
        let mut r = XorShift(0xdead_beef_cafe_f00d);
        for round in 0..300 {
            let mut key = [0u8; RSS_KEY_LEN];
            match round {
                0 => key = [0xff; RSS_KEY_LEN],
                1 => {}
                _ => key.iter_mut().for_each(|b| *b = r.next_u64() as u8),
            }
            let t = Toeplitz::new(&key);
            assert_eq!(t.key(), &key);
            for _ in 0..50 {
                let n = r.below(48) as usize; // includes over-long input
                let input: Vec<u8> = (0..n).map(|_| r.next_u64() as u8).collect();
                assert_eq!(
                    t.hash(&input),
                    toeplitz(&key, &input),
                    "key {key:02x?} input {input:02x?}"
                );
            }
        }
        // Over-long input is truncated to 36 bytes by both.
        let long = [0x5au8; 48];
        let t = Toeplitz::new(&DEFAULT_RSS_KEY);
        assert_eq!(t.hash(&long), t.hash(&long[..RSS_MAX_INPUT_LEN]));
        assert_eq!(
            toeplitz(&DEFAULT_RSS_KEY, &long),
            toeplitz(&DEFAULT_RSS_KEY, &long[..RSS_MAX_INPUT_LEN])
        );
        assert_eq!(t.hash(&[]), 0);
    }

    #[test]
    fn single_bit_inputs_select_key_windows() {
        // Toeplitz definition: input bit i selects key bits [i, i + 32).
        let key_bits = |start: usize| -> u32 {
            (0..32).fold(0, |h, k| {
                let b = start + k;
                (h << 1) | u32::from(DEFAULT_RSS_KEY[b / 8] >> (7 - b % 8) & 1)
            })
        };
        let t = Toeplitz::new(&DEFAULT_RSS_KEY);
        for i in 0..RSS_MAX_INPUT_LEN * 8 {
            let mut input = [0u8; RSS_MAX_INPUT_LEN];
            input[i / 8] = 0x80 >> (i % 8);
            assert_eq!(toeplitz(&DEFAULT_RSS_KEY, &input), key_bits(i), "bit {i}");
            assert_eq!(t.hash(&input), key_bits(i), "bit {i}");
        }
    }
}
