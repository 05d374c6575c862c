//! The Internet checksum (RFC 1071) and the TCP/UDP pseudo-header sums of IPv4 (RFC 768, RFC 793
//! §3.1) and IPv6 (RFC 8200 §8.1).

/// Adds `w` to a one's complement accumulator with end-around carry
/// (2^64 ≡ 1 mod 0xffff, RFC 1071 §2 (B)).
#[inline(always)]
fn add_carry(acc: u64, w: u64) -> u64 {
    let (s, carry) = acc.overflowing_add(w);
    // If carry, s <= 2^64 - 2, so this cannot overflow.
    s + u64::from(carry)
}

/// RFC 1071 Internet checksum: the one's complement of the one's complement
/// sum of `data` as big-endian 16-bit words (odd byte padded with zero),
/// plus `initial` (e.g. a pseudo-header sum). Sums 64-bit words and folds at
/// the end (RFC 1071 §2 (B), (C)).
pub fn internet_checksum(data: &[u8], initial: u32) -> u16 {
    let sum = match data.len() {
        8.. => sum_words(data),
        // Under one word: summed as big-endian pieces.
        _ => add_tail(0, data),
    };
    !(fold(add_carry(sum, u64::from(initial))) as u16)
}

/// The one's complement sum of `data` (at least 8 bytes) as big-endian 16-bit words, in 64
/// bits (not folded), computed on the words as they lie in memory (little-endian): the sum does
/// not depend on byte order (RFC 1071 §2 (B)), so no word is swapped. Whole 8-byte words are
/// added with end-around carry ([`sum_blocks`], then the last few, straight-line), and the bytes
/// after the last whole word come from one load of the last eight bytes, shifted so the bytes
/// already summed drop out: they start 8-byte aligned within `data`, so after the shift each
/// lies in a lane of its own offset's parity and the 16-bit word boundaries hold. A 20-byte
/// IPv4 header is two words and one shifted load.
///
/// The little-endian sum becomes the big-endian one by a rotation: rotating a 64-bit
/// end-around sum left by 8 bits multiplies it by 2^8 modulo 2^64 - 1, a multiple of 0xffff, and
/// modulo 0xffff that swaps the two bytes of the 16-bit sum.
fn sum_words(data: &[u8]) -> u64 {
    let (mut acc, tail) = match data.len() {
        32.. => sum_blocks(data),
        _ => (0, data),
    };
    // Under 32 bytes left: a 16- and an 8-byte piece, then the rest.
    let n = tail.len();
    if n >= 16 {
        acc = add_carry(acc, word64(&tail[..8]));
        acc = add_carry(acc, word64(&tail[8..16]));
    }
    let whole = n & !7;
    if n & 8 != 0 {
        if let Some(w) = tail[..whole].last_chunk::<8>() {
            acc = add_carry(acc, u64::from_le_bytes(*w));
        }
    }
    let rest = n & 7;
    if rest > 0 {
        if let Some(w) = data.last_chunk::<8>() {
            acc = add_carry(acc, u64::from_le_bytes(*w) >> ((8 - rest) * 8));
        }
    }
    acc.rotate_left(8)
}

/// The sum of `data`'s 32-byte blocks as little-endian 64-bit words with end-around carry, and
/// the bytes after them (under 32). On x86-64 the words go through one add-with-carry chain
/// (`_addcarry_u64`, an `adc` per word with its operand from memory, as Linux's `csum_partial`
/// sums): 1472 bytes cost about 300 instructions, where four chains of add and carry-out cost
/// 570.
#[cfg(target_arch = "x86_64")]
fn sum_blocks(data: &[u8]) -> (u64, &[u8]) {
    use std::arch::x86_64::_addcarry_u64;
    let (mut acc, mut carry) = (0u64, 0u8);
    let mut blocks = data.chunks_exact(64);
    for b in &mut blocks {
        for w in b.chunks_exact(8) {
            carry = _addcarry_u64(carry, acc, word64(w), &mut acc);
        }
    }
    // The last 32-byte block as one more unrolled piece of the chain: one loop over all the
    // words leaves it to a loop that saves and restores the carry per word (about 24
    // instructions more per 1,466-byte UDP datagram, measured).
    let mut tail = blocks.remainder();
    if tail.len() >= 32 {
        for w in tail[..32].chunks_exact(8) {
            carry = _addcarry_u64(carry, acc, word64(w), &mut acc);
        }
        tail = &tail[32..];
    }
    (add_carry(acc, u64::from(carry)), tail)
}

/// [`sum_blocks`] elsewhere: four independent chains of add and carry-out over 32-byte blocks.
#[cfg(not(target_arch = "x86_64"))]
fn sum_blocks(data: &[u8]) -> (u64, &[u8]) {
    let (mut a0, mut a1, mut a2, mut a3) = (0u64, 0u64, 0u64, 0u64);
    let mut blocks = data.chunks_exact(32);
    for c in &mut blocks {
        a0 = add_carry(a0, word64(&c[..8]));
        a1 = add_carry(a1, word64(&c[8..16]));
        a2 = add_carry(a2, word64(&c[16..24]));
        a3 = add_carry(a3, word64(&c[24..]));
    }
    let acc = add_carry(add_carry(a0, a1), add_carry(a2, a3));
    (acc, blocks.remainder())
}

/// The sum of `data` (under 8 bytes) as big-endian 16-bit words: 4-, 2- and 1-byte pieces, no
/// byte loop. An odd last byte is the high half of a zero-padded word.
#[inline(always)]
fn add_tail(mut acc: u64, mut tail: &[u8]) -> u64 {
    if let [a, b, c, d, rest @ ..] = tail {
        acc = add_carry(acc, u64::from(u32::from_be_bytes([*a, *b, *c, *d])));
        tail = rest;
    }
    if let [a, b, rest @ ..] = tail {
        acc = add_carry(acc, u64::from(u16::from_be_bytes([*a, *b])));
        tail = rest;
    }
    if let [a] = tail {
        acc = add_carry(acc, u64::from(*a) << 8);
    }
    acc
}

/// `acc` folded to 16 bits of the same one's complement value (a non-zero sum never folds to 0)
/// in two steps. 64 -> 32 bits: the halves added with end-around carry (a carry leaves the sum
/// at most 2^32 - 2, so adding it back cannot carry again). 32 -> 16 bits: in `s` plus `s`
/// rotated by 16, the high half is the two halves' sum plus the low half's carry out, i.e.
/// their end-around sum (as Linux's `csum_fold`).
#[inline]
fn fold(acc: u64) -> u64 {
    let (s, carry) = (acc as u32).overflowing_add((acc >> 32) as u32);
    let s = s + u32::from(carry);
    u64::from(s.wrapping_add(s.rotate_left(16)) >> 16)
}

/// The value of exactly eight bytes, little-endian.
#[inline(always)]
fn word64(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// One's complement sum (not inverted, not folded) of the IPv4 pseudo-header for an upper-layer
/// packet of `len` bytes of protocol `proto`: pass it as `initial` to [`internet_checksum`].
pub fn pseudo_header_v4(src: &[u8; 4], dst: &[u8; 4], proto: u8, len: u32) -> u32 {
    let w = |a: &[u8; 4]| {
        u32::from(u16::from_be_bytes([a[0], a[1]])) + u32::from(u16::from_be_bytes([a[2], a[3]]))
    };
    w(src) + w(dst) + u32::from(proto) + (len >> 16) + (len & 0xffff)
}

/// The IPv6 pseudo-header sum (RFC 8200 §8.1), as [`pseudo_header_v4`].
pub fn pseudo_header_v6(src: &[u8; 16], dst: &[u8; 16], proto: u8, len: u32) -> u32 {
    let mut sum = u32::from(proto) + (len >> 16) + (len & 0xffff);
    for a in [src, dst] {
        for w in a.chunks_exact(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A naive 16-bit implementation to check against.
    fn naive(d: &[u8], init: u32) -> u16 {
        let mut s = u64::from(init);
        for c in d.chunks(2) {
            s += u64::from(c[0]) << 8 | u64::from(c.get(1).copied().unwrap_or(0));
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn matches_the_rfc1071_example_and_a_naive_sum() {
        // RFC 1071 §3 numerical example: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0),
            !0xddf2
        );
        assert_eq!(internet_checksum(&[], 0), 0xffff);
        assert_eq!(internet_checksum(&[0xff, 0xff], 0), 0);
        assert_eq!(internet_checksum(&[0x12], 0), !0x1200);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut buf = vec![0u8; 3008];
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        // Every length up to 100: each split into 64- and 32-byte blocks, 16- and 8-byte
        // pieces and a last partial word.
        for n in (0..=100).chain([1499, 1500, 2999]) {
            for off in 0..8 {
                let d = &buf[off..off + n];
                assert_eq!(
                    internet_checksum(d, 0x1_2345),
                    naive(d, 0x1_2345),
                    "len {n}"
                );
            }
        }
        // All-ones data: the accumulator carries constantly, across the 64-byte blocks too.
        let ones = vec![0xffu8; 4096];
        for n in (0..200).chain([1472, 1473, 4095, 4096]) {
            assert_eq!(
                internet_checksum(&ones[..n], u32::MAX),
                naive(&ones[..n], u32::MAX)
            );
        }
    }

    /// The fold to check against: 16-bit end-around additions until nothing carries.
    fn slow_fold(mut s: u64) -> u64 {
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s
    }

    #[test]
    fn fold_keeps_the_ones_complement_value_at_its_edges() {
        for acc in [
            0,
            1,
            0xffff,
            0x1_0000,
            0xffff_ffff,
            0x1_0000_0000,
            0xffff_0000_ffff,
            0xffff_ffff_ffff_ffff,
            0x8000_0000_8000_0000,
            0xfffe_ffff_0001_0000,
            0x0000_ffff_ffff_0000,
        ] {
            assert_eq!(fold(acc), slow_fold(acc), "{acc:#x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn fold_is_the_end_around_sum_of_any_word(acc: u64) {
            proptest::prop_assert_eq!(fold(acc), slow_fold(acc));
        }

        /// Any bytes at any offset and length up to a jumbo frame, with any initial sum.
        #[test]
        fn any_data_sums_as_the_naive_sum(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9100),
            off in 0usize..8,
            init: u32,
        ) {
            let d = &data[off.min(data.len())..];
            proptest::prop_assert_eq!(internet_checksum(d, init), naive(d, init));
        }
    }

    #[test]
    fn pseudo_headers_are_the_sum_of_their_words() {
        let v4 = pseudo_header_v4(&[192, 168, 1, 10], &[10, 0, 0, 7], 17, 0x1_0008);
        assert_eq!(v4, 0xc0a8 + 0x010a + 0x0a00 + 0x0007 + 17 + 1 + 8);
        let mut a = [0u8; 16];
        a[15] = 1;
        let v6 = pseudo_header_v6(&a, &a, 6, 20);
        assert_eq!(v6, 2 + 6 + 20);
    }
}
