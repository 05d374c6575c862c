//! ZUC stream cipher and the 3GPP algorithms 128-EEA3 (confidentiality) and
//! 128-EIA3 (integrity), written from the ETSI/SAGE specification:
//!
//! * Document 1: 128-EEA3 and 128-EIA3 Specifications,
//! * Document 2: ZUC Specification (version 1.6, i.e. with the 2011
//!   modification of the initialisation: `u = W >> 1`),
//! * Document 3: Implementor's Test Data (all test sets are in the tests below).
//!
//! Conventions (as in the specification): bytes and words are big-endian, and
//! "bit 0" of a message is the most significant bit of its first byte.
//!
//! No dynamic allocation is performed by any function in this module, and no
//! function panics on any input.
//!
//! # Short buffers
//!
//! `eea3` and `eia3` take a bit length next to a byte slice.  When the slice is
//! shorter than `ceil(length_bits / 8)` bytes, both functions behave exactly as
//! if they had been called with `length_bits = 8 * data.len()`, i.e. they
//! process only the bytes that are present:
//!
//! * `eea3` en/decrypts every byte of `data` (each byte gets the same value it
//!   would get from the full-length operation, since the keystream position of
//!   a bit does not depend on the length);
//! * `eia3` returns the MAC of the present bytes, computed with
//!   `LENGTH = 8 * data.len()`.
//!
//! `BEARER` is a 5-bit and `DIRECTION` a 1-bit quantity: only the low 5 bits of
//! `bearer` and the low bit of `direction` are used.

/// S-box S0 (Document 2, table 3.1).
#[rustfmt::skip]
const S0: [u8; 256] = [
    0x3E, 0x72, 0x5B, 0x47, 0xCA, 0xE0, 0x00, 0x33, 0x04, 0xD1, 0x54, 0x98, 0x09, 0xB9, 0x6D, 0xCB,
    0x7B, 0x1B, 0xF9, 0x32, 0xAF, 0x9D, 0x6A, 0xA5, 0xB8, 0x2D, 0xFC, 0x1D, 0x08, 0x53, 0x03, 0x90,
    0x4D, 0x4E, 0x84, 0x99, 0xE4, 0xCE, 0xD9, 0x91, 0xDD, 0xB6, 0x85, 0x48, 0x8B, 0x29, 0x6E, 0xAC,
    0xCD, 0xC1, 0xF8, 0x1E, 0x73, 0x43, 0x69, 0xC6, 0xB5, 0xBD, 0xFD, 0x39, 0x63, 0x20, 0xD4, 0x38,
    0x76, 0x7D, 0xB2, 0xA7, 0xCF, 0xED, 0x57, 0xC5, 0xF3, 0x2C, 0xBB, 0x14, 0x21, 0x06, 0x55, 0x9B,
    0xE3, 0xEF, 0x5E, 0x31, 0x4F, 0x7F, 0x5A, 0xA4, 0x0D, 0x82, 0x51, 0x49, 0x5F, 0xBA, 0x58, 0x1C,
    0x4A, 0x16, 0xD5, 0x17, 0xA8, 0x92, 0x24, 0x1F, 0x8C, 0xFF, 0xD8, 0xAE, 0x2E, 0x01, 0xD3, 0xAD,
    0x3B, 0x4B, 0xDA, 0x46, 0xEB, 0xC9, 0xDE, 0x9A, 0x8F, 0x87, 0xD7, 0x3A, 0x80, 0x6F, 0x2F, 0xC8,
    0xB1, 0xB4, 0x37, 0xF7, 0x0A, 0x22, 0x13, 0x28, 0x7C, 0xCC, 0x3C, 0x89, 0xC7, 0xC3, 0x96, 0x56,
    0x07, 0xBF, 0x7E, 0xF0, 0x0B, 0x2B, 0x97, 0x52, 0x35, 0x41, 0x79, 0x61, 0xA6, 0x4C, 0x10, 0xFE,
    0xBC, 0x26, 0x95, 0x88, 0x8A, 0xB0, 0xA3, 0xFB, 0xC0, 0x18, 0x94, 0xF2, 0xE1, 0xE5, 0xE9, 0x5D,
    0xD0, 0xDC, 0x11, 0x66, 0x64, 0x5C, 0xEC, 0x59, 0x42, 0x75, 0x12, 0xF5, 0x74, 0x9C, 0xAA, 0x23,
    0x0E, 0x86, 0xAB, 0xBE, 0x2A, 0x02, 0xE7, 0x67, 0xE6, 0x44, 0xA2, 0x6C, 0xC2, 0x93, 0x9F, 0xF1,
    0xF6, 0xFA, 0x36, 0xD2, 0x50, 0x68, 0x9E, 0x62, 0x71, 0x15, 0x3D, 0xD6, 0x40, 0xC4, 0xE2, 0x0F,
    0x8E, 0x83, 0x77, 0x6B, 0x25, 0x05, 0x3F, 0x0C, 0x30, 0xEA, 0x70, 0xB7, 0xA1, 0xE8, 0xA9, 0x65,
    0x8D, 0x27, 0x1A, 0xDB, 0x81, 0xB3, 0xA0, 0xF4, 0x45, 0x7A, 0x19, 0xDF, 0xEE, 0x78, 0x34, 0x60,
];

/// S-box S1 (Document 2, table 3.2).
#[rustfmt::skip]
const S1: [u8; 256] = [
    0x55, 0xC2, 0x63, 0x71, 0x3B, 0xC8, 0x47, 0x86, 0x9F, 0x3C, 0xDA, 0x5B, 0x29, 0xAA, 0xFD, 0x77,
    0x8C, 0xC5, 0x94, 0x0C, 0xA6, 0x1A, 0x13, 0x00, 0xE3, 0xA8, 0x16, 0x72, 0x40, 0xF9, 0xF8, 0x42,
    0x44, 0x26, 0x68, 0x96, 0x81, 0xD9, 0x45, 0x3E, 0x10, 0x76, 0xC6, 0xA7, 0x8B, 0x39, 0x43, 0xE1,
    0x3A, 0xB5, 0x56, 0x2A, 0xC0, 0x6D, 0xB3, 0x05, 0x22, 0x66, 0xBF, 0xDC, 0x0B, 0xFA, 0x62, 0x48,
    0xDD, 0x20, 0x11, 0x06, 0x36, 0xC9, 0xC1, 0xCF, 0xF6, 0x27, 0x52, 0xBB, 0x69, 0xF5, 0xD4, 0x87,
    0x7F, 0x84, 0x4C, 0xD2, 0x9C, 0x57, 0xA4, 0xBC, 0x4F, 0x9A, 0xDF, 0xFE, 0xD6, 0x8D, 0x7A, 0xEB,
    0x2B, 0x53, 0xD8, 0x5C, 0xA1, 0x14, 0x17, 0xFB, 0x23, 0xD5, 0x7D, 0x30, 0x67, 0x73, 0x08, 0x09,
    0xEE, 0xB7, 0x70, 0x3F, 0x61, 0xB2, 0x19, 0x8E, 0x4E, 0xE5, 0x4B, 0x93, 0x8F, 0x5D, 0xDB, 0xA9,
    0xAD, 0xF1, 0xAE, 0x2E, 0xCB, 0x0D, 0xFC, 0xF4, 0x2D, 0x46, 0x6E, 0x1D, 0x97, 0xE8, 0xD1, 0xE9,
    0x4D, 0x37, 0xA5, 0x75, 0x5E, 0x83, 0x9E, 0xAB, 0x82, 0x9D, 0xB9, 0x1C, 0xE0, 0xCD, 0x49, 0x89,
    0x01, 0xB6, 0xBD, 0x58, 0x24, 0xA2, 0x5F, 0x38, 0x78, 0x99, 0x15, 0x90, 0x50, 0xB8, 0x95, 0xE4,
    0xD0, 0x91, 0xC7, 0xCE, 0xED, 0x0F, 0xB4, 0x6F, 0xA0, 0xCC, 0xF0, 0x02, 0x4A, 0x79, 0xC3, 0xDE,
    0xA3, 0xEF, 0xEA, 0x51, 0xE6, 0x6B, 0x18, 0xEC, 0x1B, 0x2C, 0x80, 0xF7, 0x74, 0xE7, 0xFF, 0x21,
    0x5A, 0x6A, 0x54, 0x1E, 0x41, 0x31, 0x92, 0x35, 0xC4, 0x33, 0x07, 0x0A, 0xBA, 0x7E, 0x0E, 0x34,
    0x88, 0xB1, 0x98, 0x7C, 0xF3, 0x3D, 0x60, 0x6C, 0x7B, 0xCA, 0xD3, 0x1F, 0x32, 0x65, 0x04, 0x28,
    0x64, 0xBE, 0x85, 0x9B, 0x2F, 0x59, 0x8A, 0xD7, 0xB0, 0x25, 0xAC, 0xAF, 0x12, 0x03, 0xE2, 0xF2,
];

/// The 15-bit key-loading constants d0..d15 (Document 2, section 3.5).
#[rustfmt::skip]
const D: [u32; 16] = [
    0x44D7, 0x26BC, 0x626B, 0x135E, 0x5789, 0x35E2, 0x7135, 0x09AF, 0x4D78, 0x2F13, 0x6BC4, 0x1AF1,
    0x5E26, 0x3C4D, 0x789A, 0x47AC,
];

/// 2^31 - 1, the LFSR modulus; also the representation of 0 in a cell.
const M31: u32 = 0x7FFF_FFFF;

/// `(a + b) mod (2^31 - 1)` for 31-bit `a`, `b` (result in 1..=2^31-1 unless
/// both inputs are 0).
#[inline]
fn add_m31(a: u32, b: u32) -> u32 {
    let c = a + b; // a, b < 2^31: no overflow
    (c & M31) + (c >> 31)
}

/// `x * 2^k mod (2^31 - 1)` for a 31-bit `x`: a 31-bit left rotation.
#[inline]
fn mul_pow2_m31(x: u32, k: u32) -> u32 {
    ((x << k) | (x >> (31 - k))) & M31
}

#[inline]
fn l1(x: u32) -> u32 {
    x ^ x.rotate_left(2) ^ x.rotate_left(10) ^ x.rotate_left(18) ^ x.rotate_left(24)
}

#[inline]
fn l2(x: u32) -> u32 {
    x ^ x.rotate_left(8) ^ x.rotate_left(14) ^ x.rotate_left(22) ^ x.rotate_left(30)
}

/// The 32x32 S-box S = (S0, S1, S0, S1), most significant byte first.
#[inline]
fn sbox(x: u32) -> u32 {
    let [a, b, c, d] = x.to_be_bytes();
    u32::from_be_bytes([
        S0[a as usize],
        S1[b as usize],
        S0[c as usize],
        S1[d as usize],
    ])
}

/// ZUC keystream generator (LFSR of 16 31-bit cells, bit reorganisation,
/// nonlinear F with S0/S1 and L1/L2).
#[derive(Clone)]
pub struct Zuc {
    /// LFSR cells s0..s15, each a 31-bit value in 1..=2^31-1.
    s: [u32; 16],
    /// Memory cells of F.
    r1: u32,
    r2: u32,
}

impl Zuc {
    /// Key loading, initialisation mode (32 rounds) and the first step of the
    /// working stage (whose output is discarded).  The next call to
    /// [`Zuc::next_word`] returns z1.
    pub fn new(key: &[u8; 16], iv: &[u8; 16]) -> Self {
        let mut z = Self::load(key, iv);
        z.initialise();
        z.first_work_step();
        z
    }

    /// Produces the next 32-bit key word (working mode).
    pub fn next_word(&mut self) -> u32 {
        let [x0, x1, x2, x3] = self.bit_reorganisation();
        let z = self.f(x0, x1, x2) ^ x3;
        self.lfsr_work();
        z
    }

    /// Fills `out` with the next `out.len()` key words.
    pub fn keystream(&mut self, out: &mut [u32]) {
        for w in out.iter_mut() {
            *w = self.next_word();
        }
    }

    /// Key loading (Document 2, 3.5): s_i = k_i || d_i || iv_i; R1 = R2 = 0.
    fn load(key: &[u8; 16], iv: &[u8; 16]) -> Self {
        let mut s = [0u32; 16];
        for (i, cell) in s.iter_mut().enumerate() {
            *cell = (u32::from(key[i]) << 23) | (D[i] << 8) | u32::from(iv[i]);
        }
        Zuc { s, r1: 0, r2: 0 }
    }

    /// The 32 rounds of the initialisation stage (Document 2, 3.6.1).
    fn initialise(&mut self) {
        for _ in 0..32 {
            let [x0, x1, x2, _] = self.bit_reorganisation();
            let w = self.f(x0, x1, x2);
            self.lfsr_init(w >> 1);
        }
    }

    /// First step of the working stage: F's output is discarded.
    fn first_work_step(&mut self) {
        let [x0, x1, x2, _] = self.bit_reorganisation();
        let _ = self.f(x0, x1, x2);
        self.lfsr_work();
    }

    /// v = 2^15 s15 + 2^17 s13 + 2^21 s10 + 2^20 s4 + (1 + 2^8) s0 mod (2^31-1).
    fn feedback(&self) -> u32 {
        let s = &self.s;
        let mut v = add_m31(s[0], mul_pow2_m31(s[0], 8));
        v = add_m31(v, mul_pow2_m31(s[4], 20));
        v = add_m31(v, mul_pow2_m31(s[10], 21));
        v = add_m31(v, mul_pow2_m31(s[13], 17));
        add_m31(v, mul_pow2_m31(s[15], 15))
    }

    fn shift_in(&mut self, s16: u32) {
        let s16 = if s16 == 0 { M31 } else { s16 };
        self.s.copy_within(1..16, 0);
        self.s[15] = s16;
    }

    /// LFSRWithInitialisationMode(u), u a 31-bit word.
    fn lfsr_init(&mut self, u: u32) {
        let v = add_m31(self.feedback(), u);
        self.shift_in(v);
    }

    /// LFSRWithWorkMode().
    fn lfsr_work(&mut self) {
        let v = self.feedback();
        self.shift_in(v);
    }

    /// Bit reorganisation: X0..X3 from cells 15,14 / 11,9 / 7,5 / 2,0, where
    /// the "high" half of a 31-bit cell is its bits 30..15.
    fn bit_reorganisation(&self) -> [u32; 4] {
        let s = &self.s;
        let h = |x: u32| x >> 15; // bits 30..15 (16 bits)
        let l = |x: u32| x & 0xFFFF; // bits 15..0
        [
            (h(s[15]) << 16) | l(s[14]),
            (l(s[11]) << 16) | h(s[9]),
            (l(s[7]) << 16) | h(s[5]),
            (l(s[2]) << 16) | h(s[0]),
        ]
    }

    /// The nonlinear function F; updates R1, R2 and returns W.
    fn f(&mut self, x0: u32, x1: u32, x2: u32) -> u32 {
        let w = (x0 ^ self.r1).wrapping_add(self.r2);
        let w1 = self.r1.wrapping_add(x1);
        let w2 = self.r2 ^ x2;
        self.r1 = sbox(l1((w1 << 16) | (w2 >> 16)));
        self.r2 = sbox(l2((w2 << 16) | (w1 >> 16)));
        w
    }
}

/// Number of message bits actually processed: `length_bits`, clamped to the
/// bits present in a buffer of `len` bytes (see the module documentation).
#[inline]
fn effective_bits(length_bits: u32, len: usize) -> u64 {
    let avail = (len as u64).saturating_mul(8);
    u64::from(length_bits).min(avail)
}

/// 128-EEA3: encrypts/decrypts `length_bits` bits of `data` in place
/// (`data.len() >= ceil(length_bits/8)`); the bits beyond `length_bits` in the
/// last byte are set to zero, as the spec's output.
///
/// Bytes of `data` after byte `ceil(length_bits/8) - 1` are left untouched.
/// If `data` is shorter than `ceil(length_bits/8)` bytes, every byte of `data`
/// is processed (as with `length_bits = 8 * data.len()`) and nothing is
/// zeroed; see the module documentation.  Only the low 5 bits of `bearer` and
/// the low bit of `direction` are used.
pub fn eea3(
    key: &[u8; 16],
    count: u32,
    bearer: u8,
    direction: u8,
    data: &mut [u8],
    length_bits: u32,
) {
    let nbits = effective_bits(length_bits, data.len());
    if nbits == 0 {
        return;
    }
    // nbits <= 8 * data.len(), so nbytes <= data.len() and fits in usize.
    let nbytes = nbits.div_ceil(8) as usize;

    let c = count.to_be_bytes();
    let b4 = ((bearer & 0x1F) << 3) | ((direction & 1) << 2);
    #[rustfmt::skip]
    let iv = [
        c[0], c[1], c[2], c[3], b4, 0, 0, 0, //
        c[0], c[1], c[2], c[3], b4, 0, 0, 0,
    ];
    let mut zuc = Zuc::new(key, &iv);

    let msg = &mut data[..nbytes];
    for chunk in msg.chunks_mut(4) {
        let ks = zuc.next_word().to_be_bytes();
        for (d, k) in chunk.iter_mut().zip(ks) {
            *d ^= k;
        }
    }
    let tail = (nbits % 8) as u32;
    if let Some(last) = msg.last_mut().filter(|_| tail != 0) {
        *last &= 0xFFu8 << (8 - tail);
    }
}

/// 128-EIA3 MAC over `length_bits` bits of `data`.
///
/// Bits of `data` beyond `length_bits` are ignored.  If `data` is shorter than
/// `ceil(length_bits/8)` bytes, the MAC is that of the present bytes with
/// `LENGTH = 8 * data.len()`; see the module documentation.  Only the low 5
/// bits of `bearer` and the low bit of `direction` are used.
///
/// The keystream (L = ceil(LENGTH/32) + 2 words) is generated on the fly with a
/// two-word window; nothing is allocated.
pub fn eia3(
    key: &[u8; 16],
    count: u32,
    bearer: u8,
    direction: u8,
    data: &[u8],
    length_bits: u32,
) -> u32 {
    let nbits = effective_bits(length_bits, data.len());

    let c = count.to_be_bytes();
    let b4 = (bearer & 0x1F) << 3;
    let d7 = (direction & 1) << 7;
    #[rustfmt::skip]
    let iv = [
        c[0], c[1], c[2], c[3], b4, 0, 0, 0, //
        c[0] ^ d7, c[1], c[2], c[3], b4, 0, d7, 0,
    ];
    let mut zuc = Zuc::new(key, &iv);

    // Window over the keystream: `cur` = key word k, `nxt` = key word k+1.
    // z_{32k+b} (the 32 keystream bits starting at bit 32k+b) is the top 32
    // bits of (cur || nxt) << b.
    let mut cur = zuc.next_word();
    let mut nxt = zuc.next_word();
    let window = |cur: u32, nxt: u32, b: u32| -> u32 {
        let w = (u64::from(cur) << 32) | u64::from(nxt);
        (w >> (32 - b)) as u32 // b in 0..32
    };
    // XOR into t the z_{32k+b} for every set bit b (0 = MSB) of message word m.
    let absorb = |t: &mut u32, mut m: u32, cur: u32, nxt: u32| {
        while m != 0 {
            let b = m.leading_zeros();
            *t ^= window(cur, nxt, b);
            m &= !(0x8000_0000u32 >> b);
        }
    };

    let mut t = 0u32;
    let full_words = (nbits / 32) as usize; // <= data.len() / 4
    let rem = (nbits % 32) as u32;

    for chunk in data.chunks_exact(4).take(full_words) {
        let m = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        absorb(&mut t, m, cur, nxt);
        cur = nxt;
        nxt = zuc.next_word();
    }
    // Window now at word q = floor(LENGTH/32).
    if rem != 0 {
        let start = full_words * 4;
        let mut buf = [0u8; 4];
        let avail = data.get(start..).unwrap_or(&[]);
        for (d, s) in buf.iter_mut().zip(avail) {
            *d = *s;
        }
        let m = u32::from_be_bytes(buf) & (u32::MAX << (32 - rem));
        absorb(&mut t, m, cur, nxt);
    }
    // T ^= z_LENGTH
    t ^= window(cur, nxt, rem);
    // MAC = T ^ z_{32(L-1)}, L - 1 = ceil(LENGTH/32) + 1.
    let last = if rem == 0 { nxt } else { zuc.next_word() };
    t ^ last
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
        assert!(s.len().is_multiple_of(2), "odd hex length");
        s.chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    fn h16(s: &str) -> [u8; 16] {
        hex(s).try_into().unwrap()
    }

    /// Tiny xorshift64 PRNG for randomised tests.
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn fill(&mut self, buf: &mut [u8]) {
            for b in buf {
                *b = self.next() as u8;
            }
        }
    }

    // ---------------------------------------------------------------- ZUC --

    #[test]
    fn sbox_examples_and_permutations() {
        // Document 2, examples 7 and 8.
        assert_eq!(S0[0x12], 0xF9);
        assert_eq!(S1[0x34], 0xC0);
        assert_eq!(sbox(0x1234_5678), 0xF9C0_5A4E);
        for t in [&S0, &S1] {
            let mut seen = [false; 256];
            for &v in t.iter() {
                assert!(!seen[v as usize]);
                seen[v as usize] = true;
            }
        }
    }

    struct ZucSet {
        name: &'static str,
        key: &'static str,
        iv: &'static str,
        loaded: [u32; 16],
        after_init: [u32; 16],
        r1: u32,
        r2: u32,
        /// (1-based index i, z_i)
        z: &'static [(usize, u32)],
    }

    const ZUC_SETS: [ZucSet; 4] = [
        ZucSet {
            name: "Doc 3, 3.3 Test Set 1",
            key: "00000000000000000000000000000000",
            iv: "00000000000000000000000000000000",
            loaded: [
                0x0044d700, 0x0026bc00, 0x00626b00, 0x00135e00, 0x00578900, 0x0035e200, 0x00713500,
                0x0009af00, 0x004d7800, 0x002f1300, 0x006bc400, 0x001af100, 0x005e2600, 0x003c4d00,
                0x00789a00, 0x0047ac00,
            ],
            after_init: [
                0x7ce15b8b, 0x747ca0c4, 0x6259dd0b, 0x47a94c2b, 0x3a89c82e, 0x32b433fc, 0x231ea13f,
                0x31711e42, 0x4ccce955, 0x3fb6071e, 0x161d3512, 0x7114b136, 0x5154d452, 0x78c69a74,
                0x4f26ba6b, 0x3e1b8d6a,
            ],
            r1: 0x14cfd44c,
            r2: 0x8c6de800,
            z: &[(1, 0x27bede74), (2, 0x018082da)],
        },
        ZucSet {
            name: "Doc 3, 3.4 Test Set 2",
            key: "ffffffffffffffffffffffffffffffff",
            iv: "ffffffffffffffffffffffffffffffff",
            loaded: [
                0x7fc4d7ff, 0x7fa6bcff, 0x7fe26bff, 0x7f935eff, 0x7fd789ff, 0x7fb5e2ff, 0x7ff135ff,
                0x7f89afff, 0x7fcd78ff, 0x7faf13ff, 0x7febc4ff, 0x7f9af1ff, 0x7fde26ff, 0x7fbc4dff,
                0x7ff89aff, 0x7fc7acff,
            ],
            after_init: [
                0x09a339ad, 0x1291d190, 0x25554227, 0x36c09187, 0x0697773b, 0x443cf9cd, 0x6a4cd899,
                0x49e34bd0, 0x56130b14, 0x20e8f24c, 0x7a5b1dcc, 0x0c3cc2d1, 0x1cc082c8, 0x7f5904a2,
                0x55b61ce8, 0x1fe46106,
            ],
            r1: 0xb8017bd5,
            r2: 0x9ce2de5c,
            z: &[(1, 0x0657cfa0), (2, 0x7096398b)],
        },
        ZucSet {
            name: "Doc 3, 3.5 Test Set 3",
            key: "3d4c4be96a82fdaeb58f641db17b455b",
            iv: "84319aa8de6915ca1f6bda6bfbd8c766",
            loaded: [
                0x1ec4d784, 0x2626bc31, 0x25e26b9a, 0x74935ea8, 0x355789de, 0x4135e269, 0x7ef13515,
                0x5709afca, 0x5acd781f, 0x47af136b, 0x326bc4da, 0x0e9af16b, 0x58de26fb, 0x3dbc4dd8,
                0x22f89ac7, 0x2dc7ac66,
            ],
            after_init: [
                0x10da5941, 0x5b6acbf6, 0x17060ce1, 0x35368174, 0x5cf4385a, 0x479943df, 0x2753bab2,
                0x73775d6a, 0x43930a37, 0x77b4af31, 0x15b2e89f, 0x24ff6e20, 0x740c40b9, 0x026a5503,
                0x194b2a57, 0x7a9a1cff,
            ],
            r1: 0x860a7dfa,
            r2: 0xbf0e0ffc,
            z: &[(1, 0x14f1c272), (2, 0x3279c419)],
        },
        ZucSet {
            name: "Doc 3, 3.6 Test Set 4",
            key: "4d320bfad4c285bfd6b8bd00f39d8b41",
            iv: "52959daba0bf176ece2dc315049eb574",
            loaded: [
                0x26c4d752, 0x1926bc95, 0x05e26b9d, 0x7d135eab, 0x6a5789a0, 0x6135e2bf, 0x42f13517,
                0x5f89af6e, 0x6b4d78ce, 0x5c2f132d, 0x5eebc4c3, 0x001af115, 0x79de2604, 0x4ebc4d9e,
                0x45f89ab5, 0x20c7ac74,
            ],
            after_init: [
                0x1f808882, 0x4fc08639, 0x246a9891, 0x1f77c16f, 0x50f0e1c9, 0x723e8fac, 0x24334616,
                0x4471b734, 0x7dba1992, 0x25180096, 0x4637117c, 0x2a92aac8, 0x7da8d7b5, 0x58f45afe,
                0x42814800, 0x56d7e7d8,
            ],
            r1: 0x52761a25,
            r2: 0x38f712e1,
            z: &[(1, 0xed4400e7), (2, 0x0633e5c5), (2000, 0x7a574cdb)],
        },
    ];

    #[test]
    fn zuc_test_sets_internal_state() {
        for set in &ZUC_SETS {
            let (key, iv) = (h16(set.key), h16(set.iv));
            let mut z = Zuc::load(&key, &iv);
            assert_eq!(z.s, set.loaded, "{}: key loading", set.name);
            z.initialise();
            assert_eq!(z.s, set.after_init, "{}: LFSR after init", set.name);
            assert_eq!(
                (z.r1, z.r2),
                (set.r1, set.r2),
                "{}: R1/R2 after init",
                set.name
            );
        }
    }

    #[test]
    fn zuc_test_sets_keystream() {
        for set in &ZUC_SETS {
            let (key, iv) = (h16(set.key), h16(set.iv));
            let n = set.z.iter().map(|&(i, _)| i).max().unwrap();
            let mut ks = vec![0u32; n];
            Zuc::new(&key, &iv).keystream(&mut ks);
            for &(i, zi) in set.z {
                assert_eq!(ks[i - 1], zi, "{}: z{}", set.name, i);
            }
            // next_word and keystream agree
            let mut z = Zuc::new(&key, &iv);
            for (i, &w) in ks.iter().enumerate() {
                assert_eq!(z.next_word(), w, "{}: word {}", set.name, i + 1);
            }
        }
    }

    // --------------------------------------------------------------- EEA3 --

    struct EeaSet {
        name: &'static str,
        key: &'static str,
        count: u32,
        bearer: u8,
        direction: u8,
        length: u32,
        plain: &'static str,
        cipher: &'static str,
    }

    const EEA3_SETS: [EeaSet; 5] = [
        EeaSet {
            name: "Doc 3, 4 (128-EEA3) Test Set 1",
            key: "173d14ba5003731d7a60049470f00a29",
            count: 0x66035492,
            bearer: 0xf,
            direction: 0,
            length: 193,
            plain: "6cf65340 735552ab 0c9752fa 6f9025fe 0bd675d9 005875b2 00",
            cipher: "a6c85fc6 6afb8533 aafc2518 dfe78494 0ee1e4b0 30238cc8 00",
        },
        EeaSet {
            name: "Doc 3, 4 (128-EEA3) Test Set 2",
            key: "e5bd3ea0eb55ade866c6ac58bd54302a",
            count: 0x56823,
            bearer: 0x18,
            direction: 1,
            length: 800,
            plain: "14a8ef693d678507bbe7270a7f67ff5006c3525b9807e467c4e56000ba338f5d42955903675182\
                    2246c80d3b38f07f4be2d8ff5805f5132229bde93bbbdcaf382bf1ee972fbf9977bada8945847a\
                    2a6c9ad34a667554e04d1f7fa2c33241bd8f01ba220d",
            cipher: "131d43e0dea1be5c5a1bfd971d852cbf712d7b4f57961fea3208afa8bca433f456ad09c7417e58\
                     bc69cf8866d1353f74865e80781d202dfb3ecff7fcbc3b190fe82a204ed0e350fc0f6f2613b2f2\
                     bca6df5a473a57a4a00d985ebad880d6f23864a07b01",
        },
        EeaSet {
            name: "Doc 3, 4 (128-EEA3) Test Set 3",
            key: "d4552a8fd6e61cc81a2009141a29c10b",
            count: 0x76452ec1,
            bearer: 0x2,
            direction: 1,
            length: 1570,
            plain: "38f07f4be2d8ff5805f5132229bde93bbbdcaf382bf1ee972fbf9977bada8945847a2a6c9ad34a66\
                    7554e04d1f7fa2c33241bd8f01ba220d3ca4ec41e074595f54ae2b454fd971432043601965cca85c\
                    2417ed6cbec3bada84fc8a579aea7837b0271177242a64dc0a9de71a8edee86ca3d47d033d6bf539\
                    804eca86c584a9052de46ad3fced65543bd90207372b27afb79234f5ff43ea870820e2c2b78a8aae\
                    61cce52a0515e348d196664a3456b182a07c406e4a20791271cfeda165d535ec5ea2d4df40",
            cipher: "8383b0229fcc0b9d2295ec41c977e9c2bb72e220378141f9c8318f3a270dfbcdee6411c2b3044f17\
                     6dc6e00f8960f97afacd131ad6a3b49b16b7babcf2a509ebb16a75dcab14ff275dbeeea1a2b155f9\
                     d52c26452d0187c310a4ee55beaa78ab4024615ba9f5d5adc7728f73560671f013e5e550085d3291\
                     df7d5fecedded559641b6c2f585233bc71e9602bd2305855bbd25ffa7f17ecbc042daae38c1f57ad\
                     8e8ebd37346f71befdbb7432e0e0bb2cfc09bcd96570cb0c0c39df5e29294e82703a637f80",
        },
        EeaSet {
            name: "Doc 3, 4 (128-EEA3) Test Set 4",
            key: "db84b4fbccda563b66227bfe456f0f77",
            count: 0xe4850fe1,
            bearer: 0x10,
            direction: 1,
            length: 2798,
            plain: "e539f3b8973240da03f2b8aa05ee0a00dbafc0e182055dfe3d7383d92cef40e92928605d52d05f4f\
                    9018a1f189ae3997ce19155fb1221db8bb0951a853ad852ce16cff07382c93a157de00ddb125c753\
                    9fd85045e4ee07e0c43f9e9d6f414fc4d1c62917813f74c00fc83f3e2ed7c45ba5835264b43e0b20\
                    afda6b3053bfb6423b7fce25479ff5f139dd9b5b995558e2a56be18dd581cd017c735e6f0d0d97c4\
                    ddc1d1da70c6db4a12cc92778e2fbbd6f3ba52af91c9c6b64e8da4f7a2c266d02d001753df089603\
                    93c5d56888bf49eb5c16d9a80427a416bcb597df5bfe6f13890a07ee1340e6476b0d9aa8f822ab0f\
                    d1ab0d204f40b7ce6f2e136eb67485e507804d504588ad37ffd816568b2dc40311dfb654cdead47e\
                    2385c3436203dd836f9c64d97462ad5dfa63b5cfe08acb9532866f5ca787566fca93e6b1693ee15c\
                    f6f7a2d689d9741798dc1c238e1be650733b18fb34ff880e16bbd21b47ac",
            cipher: "4bbfa91ba25d47db9a9f190d962a19ab323926b351fbd39e351e05da8b8925e30b1cce0d12211010\
                     95815cc7cb6319509ec0d67940491987e13f0affac332aa6aa64626d3e9a1917519e0b97b655c6a1\
                     65e44ca9feac0790d2a321ad3d86b79c5138739fa38d887ec7def449ce8abdd3e7f8dc4ca9e7b733\
                     14ad310f9025e61946b3a56dc649ec0da0d63943dff592cf962a7efb2c8524e35a2a6e7879d62604\
                     ef268695fa4003027e22e6083077522064bd4a5b906b5f531274f235ed506cff0154c754928a0ce5\
                     476f2cb1020a1222d32c1455ecaef1e368fb344d1735bfbedeb71d0a33a2a54b1da5a294e679144d\
                     df11eb1a3de8cf0cc061917974f35c1d9ca0ac81807f8fcce6199a6c7712da865021b04ce0439516\
                     f1a526ccda9fd9abbd53c3a684f9ae1e7ee6b11da138ea826c5516b5aadf1abbe36fa7fff92e3a11\
                     76064e8d95f2e4882b5500b93228b2194a475c1a27f63f9ffd264989a1bc",
        },
        EeaSet {
            name: "Doc 3, 4 (128-EEA3) Test Set 5",
            key: "e13fed21b46e4e7ec31253b2bb17b3e0",
            count: 0x2738cdaa,
            bearer: 0x1a,
            direction: 0,
            length: 4019,
            plain: "8d74e20d54894e06d3cb13cb3933065e8674be62adb1c72b3a646965ab63cb7b7854dfdc27e84929\
                    f49c64b872a490b13f957b64827e71f41fbd4269a42c97f824537027f86e9f4ad82d1df451690fdd\
                    98b6d03f3a0ebe3a312d6b840ba5a1820b2a2c9709c090d245ed267cf845ae41fa975d3333ac3009\
                    fd40eba9eb5b885714b768b697138baf21380eca49f644d48689e4215760b906739f0d2b3f091133\
                    ca15d981cbe401baf72d05ace05cccb2d297f4ef6a5f58d91246cfa77215b892ab441d5278452795\
                    ccb7f5d79057a1c4f77f80d46db2033cb79bedf8e60551ce10c667f62a97abafabbcd6772018df96\
                    a282ea737ce2cb331211f60d5354ce78f9918d9c206ca042c9b62387dd709604a50af16d8d35a890\
                    6be484cf2e74a9289940364353249b27b4c9ae29eddfc7da6418791a4e7baa0660fa64511f2d685c\
                    c3a5ff70e0d2b74292e3b8a0cd6b04b1c790b8ead2703708540dea2fc09c3da770f65449e84d817a\
                    4f551055e19ab85018a0028b71a144d96791e9a3577933504eee0060340c69d274e1bf9d805dcbcc\
                    1a6faa976800b6ff2b671dc463652fa8a33ee50974c1c21be01eabb2167430269d72ee511c9dde30\
                    797c9a25d86ce74f5b961be5fdfb6807814039e7137636bd1d7fa9e09efd2007505906a5ac45dfde\
                    ed7757bbee745749c29633350bee0ea6f409df45801600",
            cipher: "94eaa4aa30a57137ddf09b97b25618a20a13e2f10fa5bf8161a879cc2ae797a6b4cf2d9df31debb9\
                     905ccfec97de605d21c61ab8531b7f3c9da5f03931f8a0642de48211f5f52ffea10f392a04766998\
                     5da454a28f080961a6c2b62daa17f33cd60a4971f48d2d909394a55f48117ace43d708e6b77d3dc4\
                     6d8bc017d4d1abb77b7428c042b06f2f99d8d07c9879d99600127a31985f1099bbd7d6c1519ede8f\
                     5eeb4a610b349ac01ea2350691756bd105c974a53eddb35d1d4100b012e522ab41f4c5f2fde76b59\
                     cb8b96d885cfe4080d1328a0d636cc0edc05800b76acca8fef672084d1f52a8bbd8e0993320992c7\
                     ffbae17c408441e0ee883fc8a8b05e22f5ff7f8d1b48c74c468c467a028f09fd7ce91109a570a2d5\
                     c4d5f4fa18c5dd3e4562afe24ef771901f59af645898acef088abae07e92d52eb2de55045bb1b7c4\
                     164ef2d7a6cac15eeb926d7ea2f08b66e1f759f3aee44614725aa3c7482b30844c143ff85b53f1e5\
                     83c501257dddd096b81268daa303f17234c2333541f0bb8e190648c5807c866d7193228609adb948\
                     686f7de294a802cc38f7fe5208f5ea3196d0167b9bdd02f0d2a5221ca508f893af5c4b4bb9f4f520\
                     fd84289b3dbe7e61497a7e2a584037ea637b6981127174af57b471df4b2768fd79c1540fb3edf2ea\
                     22cb69bec0cf8d933d9c6fdd645e850591cca3d62c0cc0",
        },
    ];

    #[test]
    fn eea3_test_sets() {
        for set in &EEA3_SETS {
            let key = h16(set.key);
            let plain = hex(set.plain);
            let cipher = hex(set.cipher);
            let nbytes = (set.length as usize).div_ceil(8);
            assert_eq!(plain.len(), nbytes, "{}: plaintext length", set.name);
            assert_eq!(cipher.len(), nbytes, "{}: ciphertext length", set.name);

            let mut buf = plain.clone();
            eea3(
                &key,
                set.count,
                set.bearer,
                set.direction,
                &mut buf,
                set.length,
            );
            assert_eq!(buf, cipher, "{}: encrypt", set.name);

            let mut buf = cipher.clone();
            eea3(
                &key,
                set.count,
                set.bearer,
                set.direction,
                &mut buf,
                set.length,
            );
            assert_eq!(buf, plain, "{}: decrypt", set.name);
        }
    }

    #[test]
    fn eea3_trailing_bits_zeroed() {
        for set in &EEA3_SETS {
            let tail = set.length % 8;
            if tail == 0 {
                continue;
            }
            let key = h16(set.key);
            let mut buf = hex(set.plain);
            let last = buf.len() - 1;
            let junk = 0xFFu8 >> tail; // bits beyond LENGTH
            assert_eq!(buf[last] & junk, 0);
            buf[last] |= junk; // make the trailing bits non-zero in the input
            buf.push(0xA5); // a byte beyond ceil(LENGTH/8): must stay untouched
            eea3(
                &key,
                set.count,
                set.bearer,
                set.direction,
                &mut buf,
                set.length,
            );
            assert_eq!(buf[last] & junk, 0, "{}: trailing bits", set.name);
            assert_eq!(buf[..=last], hex(set.cipher)[..], "{}", set.name);
            assert_eq!(buf[last + 1], 0xA5, "{}: byte after message", set.name);
        }
        // A 1-bit message whose input byte is 0xFF.
        let mut b = [0xFFu8, 0x11];
        eea3(&[0; 16], 0, 0, 0, &mut b, 1);
        assert_eq!(b[0] & 0x7F, 0);
        assert_eq!(b[1], 0x11);
    }

    #[test]
    fn eea3_roundtrip_random() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..300 {
            let len = 1 + rng.below(8000) as u32; // 1..=8000 bits
            let nbytes = (len as usize).div_ceil(8);
            let mut key = [0u8; 16];
            rng.fill(&mut key);
            let count = rng.next() as u32;
            let bearer = rng.below(32) as u8;
            let direction = rng.below(2) as u8;
            let mut x = vec![0u8; nbytes + 3];
            rng.fill(&mut x);
            let orig = x.clone();

            let mut y = x.clone();
            eea3(&key, count, bearer, direction, &mut y, len);
            assert_eq!(y[nbytes..], orig[nbytes..], "bytes beyond message touched");
            eea3(&key, count, bearer, direction, &mut y, len);

            // expected: original with bits beyond `len` zeroed
            let mut want = orig.clone();
            if !len.is_multiple_of(8) {
                want[nbytes - 1] &= 0xFFu8 << (8 - len % 8);
            }
            assert_eq!(y, want, "len {len}");

            // encryption does change the message (overwhelmingly likely for >= 64 bits)
            x.truncate(nbytes);
            let mut e = x.clone();
            eea3(&key, count, bearer, direction, &mut e, len);
            if len >= 64 {
                assert_ne!(e, x);
            }
        }
    }

    #[test]
    fn eea3_short_buffer_processes_present_bytes() {
        let set = &EEA3_SETS[1];
        let key = h16(set.key);
        let plain = hex(set.plain);
        let cipher = hex(set.cipher);
        for n in [0usize, 1, 3, 4, 5, 17, 99] {
            let mut buf = plain[..n].to_vec();
            eea3(
                &key,
                set.count,
                set.bearer,
                set.direction,
                &mut buf,
                set.length,
            );
            assert_eq!(buf, cipher[..n]);
        }
        // Extreme lengths with tiny / empty buffers: no panic.
        let mut empty: [u8; 0] = [];
        eea3(&key, 1, 0xFF, 0xFF, &mut empty, u32::MAX);
        let mut one = [0u8; 1];
        eea3(&key, 1, 0xFF, 0xFF, &mut one, u32::MAX);
        eea3(&key, 1, 0xFF, 0xFF, &mut one, 0);
    }

    // --------------------------------------------------------------- EIA3 --

    struct EiaSet {
        name: &'static str,
        key: &'static str,
        count: u32,
        bearer: u8,
        direction: u8,
        length: u32,
        msg: &'static str,
        mac: u32,
    }

    const EIA3_SETS: [EiaSet; 5] = [
        EiaSet {
            name: "Doc 3, 5 (128-EIA3) Test Set 1",
            key: "00000000000000000000000000000000",
            count: 0,
            bearer: 0,
            direction: 0,
            length: 1,
            msg: "00000000",
            mac: 0xc8a9595e,
        },
        EiaSet {
            name: "Doc 3, 5 (128-EIA3) Test Set 2",
            key: "47054125561eb2dda94059da05097850",
            count: 0x561eb2dd,
            bearer: 0x14,
            direction: 0,
            length: 90,
            msg: "00000000 00000000 00000000",
            mac: 0x6719a088,
        },
        EiaSet {
            name: "Doc 3, 5 (128-EIA3) Test Set 3",
            key: "c9e6cec4607c72db000aefa88385ab0a",
            count: 0xa94059da,
            bearer: 0xa,
            direction: 1,
            length: 577,
            msg: "983b41d47d780c9e1ad11d7eb70391b1de0b35da2dc62f83e7b78d6306ca0ea07e941b7be91348f9\
                  fcb170e2217fecd97f9f68adb16e5d7d21e569d280ed775cebde3f4093c5388100000000",
            mac: 0xfae8ff0b,
        },
        EiaSet {
            name: "Doc 3, 5 (128-EIA3) Test Set 4",
            key: "c8a48262d0c2e2bac4b96ef77e80ca59",
            count: 0x05097850,
            bearer: 0x10,
            direction: 1,
            length: 2079,
            msg: "b546430bf87b4f1ee834704cd6951c36e26f108cf731788f48dc34f1678c05221c8fa7ff2f39f477\
                  e7e49ef60a4ec2c3de24312a96aa26e1cfba57563838b297f47e8510c779fd6654b143386fa639d3\
                  1edbd6c06e47d159d94362f26aeeedee0e4f49d9bf8412995415bfad56ee82d1ca7463abf085b082\
                  b09904d6d990d43cf2e062f40839d93248b1eb92cdfed5300bc148280430b6d0caa094b6ec8911ab\
                  7dc36824b824dc0af6682b0935fde7b492a14dc2f43648038da2cf79170d2d50133fd49416cb6e33\
                  bea90b8bf4559b03732a01ea290e6d074f79bb83c10e580015cc1a85b36b5501046e9c4bdcae5135\
                  690b8666bd54b7a703ea7b6f220a5469a568027e",
            mac: 0x004ac4d6,
        },
        EiaSet {
            name: "Doc 3, 5 (128-EIA3) Test Set 5",
            key: "6b8b08ee79e0b5982d6d128ea9f220cb",
            count: 0x561eb2dd,
            bearer: 0x1c,
            direction: 0,
            length: 5670,
            msg: "5bad724710ba1c56d5a315f8d40f6e093780be8e8de07b6992432018e08ed96a5734af8bad8a575d\
                  3a1f162f85045cc770925571d9f5b94e454a77c16e72936bf016ae157499f0543b5d52caa6dbeab6\
                  97d2bb73e41b8075dce79b4b86044f661d4485a543dd78606e0419e8059859d3cb2b67ce0977603f\
                  81ff839e331859544cfbc8d00fef1a4c8510fb547d6b06c611ef44f1bce107cfa45a06aab360152b\
                  28dc1ebe6f7fe09b0516f9a5b02a1bd84bb0181e2e89e19bd8125930d178682f3862dc51b636f04e\
                  720c47c3ce51ad70d94b9b2255fbae906549f499f8c6d39947ed5e5df8e2def113253e7b08d0a76b\
                  6bfc68c812f375c79b8fe5fd85976aa6d46b4a2339d8ae5147f680fbe70f978b38effd7b2f7866a2\
                  2554e193a94e98a68b74bd25bb2b3f5fb0a5fd59887f9ab68159b7178d5b7b677cb546bf41eadca2\
                  16fc10850128f8bdef5c8d89f96afa4fa8b54885565ed838a950fee5f1c3b0a4f6fb71e54dfd169e\
                  82cecc7266c850e67c5ef0ba960f5214060e71eb172a75fc1486835cbea6534465b055c96a72e410\
                  5224182325d830414b40214daa8091d2e0fb010ae15c6de90850973bdf1e423be148a237b87a0c9f\
                  34d4b47605b803d743a86a90399a4af396d3a1200a62f3d9507962e8e5bee6d3da2bb3f7237664ac\
                  7a292823900bc63503b29e80d63f6067bf8e1716ac25beba350deb62a99fe03185eb4f69937ecd38\
                  7941fda544ba67db0911774938b01827bcc69c92b3f772a9d2859ef003398b1f6bbad7b574f7989a\
                  1d10b2df798e0dbf30d6587464d24878cd00c0eaee8a1a0cc753a27979e11b41db1de3d5038afaf4\
                  9f5c682c3748d8a3a9ec54e6a371275f1683510f8e4f90938f9ab6e134c2cfdf4841cba88e0cff2b\
                  0bcc8e6adcb71109b5198fecf1bb7e5c531aca50a56a8a3b6de59862d41fa113d9cd957808f08571\
                  d9a4bb792af271f6cc6dbb8dc7ec36e36be1ed308164c31c7c0afc541c000000",
            mac: 0x0ca12792,
        },
    ];

    /// Literal transcription of Document 1's EIA3 algorithm (allocates the
    /// whole keystream and walks the bits one by one).  Used as an oracle.
    fn eia3_reference(
        key: &[u8; 16],
        count: u32,
        bearer: u8,
        direction: u8,
        m: &[u8],
        length: u32,
    ) -> u32 {
        let c = count.to_be_bytes();
        let d = (direction & 1) << 7;
        let b = (bearer & 0x1F) << 3;
        let iv = [
            c[0],
            c[1],
            c[2],
            c[3],
            b,
            0,
            0,
            0,
            c[0] ^ d,
            c[1],
            c[2],
            c[3],
            b,
            0,
            d,
            0,
        ];
        let l = (length as usize).div_ceil(32) + 2;
        let mut k = vec![0u32; l];
        Zuc::new(key, &iv).keystream(&mut k);
        let kbit = |i: usize| (k[i / 32] >> (31 - i % 32)) & 1;
        let zword = |i: usize| (0..32).fold(0u32, |acc, j| (acc << 1) | kbit(i + j));
        let mbit = |i: usize| (m[i / 8] >> (7 - i % 8)) & 1;
        let mut t = 0u32;
        for i in 0..length as usize {
            if mbit(i) == 1 {
                t ^= zword(i);
            }
        }
        t ^= zword(length as usize);
        t ^ zword(32 * (l - 1))
    }

    #[test]
    fn eia3_test_sets() {
        for set in &EIA3_SETS {
            let key = h16(set.key);
            let msg = hex(set.msg);
            assert!(
                msg.len() >= (set.length as usize).div_ceil(8),
                "{}",
                set.name
            );
            let mac = eia3(&key, set.count, set.bearer, set.direction, &msg, set.length);
            assert_eq!(mac, set.mac, "{}: got {mac:08x}", set.name);
            let r = eia3_reference(&key, set.count, set.bearer, set.direction, &msg, set.length);
            assert_eq!(r, set.mac, "{}: reference", set.name);
        }
    }

    #[test]
    fn eia3_matches_bitwise_reference_random() {
        let mut rng = XorShift(0x0123_4567_89AB_CDEF);
        let mut lengths: Vec<u32> = (0..=70).collect();
        for _ in 0..150 {
            lengths.push(rng.below(8001) as u32);
        }
        for len in lengths {
            let mut key = [0u8; 16];
            rng.fill(&mut key);
            let count = rng.next() as u32;
            let bearer = rng.below(32) as u8;
            let direction = rng.below(2) as u8;
            let mut m = vec![0u8; (len as usize).div_ceil(8) + 2];
            rng.fill(&mut m);
            let got = eia3(&key, count, bearer, direction, &m, len);
            let want = eia3_reference(&key, count, bearer, direction, &m, len);
            assert_eq!(got, want, "len {len}");
        }
    }

    #[test]
    fn eia3_ignores_bits_beyond_length() {
        let set = &EIA3_SETS[2]; // 577 bits
        let key = h16(set.key);
        let mut msg = hex(set.msg);
        let nbytes = (set.length as usize).div_ceil(8);
        msg[nbytes - 1] |= 0x7F; // bits 577..583
        for b in &mut msg[nbytes..] {
            *b = 0xFF;
        }
        msg.extend_from_slice(&[0xAB; 7]);
        assert_eq!(
            eia3(&key, set.count, set.bearer, set.direction, &msg, set.length),
            set.mac
        );
    }

    #[test]
    fn eia3_short_buffer_uses_present_bytes() {
        let set = &EIA3_SETS[3];
        let key = h16(set.key);
        let msg = hex(set.msg);
        for n in [0usize, 1, 2, 3, 4, 5, 8, 100, 259] {
            let short = &msg[..n];
            let got = eia3(
                &key,
                set.count,
                set.bearer,
                set.direction,
                short,
                set.length,
            );
            let want = eia3(
                &key,
                set.count,
                set.bearer,
                set.direction,
                short,
                8 * n as u32,
            );
            assert_eq!(got, want, "n {n}");
            let r = eia3_reference(
                &key,
                set.count,
                set.bearer,
                set.direction,
                short,
                8 * n as u32,
            );
            assert_eq!(got, r, "n {n}");
        }
        // No panic on extreme lengths.
        let _ = eia3(&key, 0, 0xFF, 0xFF, &[], u32::MAX);
        let _ = eia3(&key, 0, 0xFF, 0xFF, &[0xFF; 5], u32::MAX);
        let _ = eia3(&key, 0, 0, 0, &[], 0);
    }

    #[test]
    fn bearer_and_direction_are_masked() {
        let key = [7u8; 16];
        let m = [0x5Au8; 40];
        assert_eq!(
            eia3(&key, 9, 0x3 | 0xE0, 1 | 0xFE, &m, 300),
            eia3(&key, 9, 0x3, 1, &m, 300)
        );
        let (mut a, mut b) = ([0x33u8; 40], [0x33u8; 40]);
        eea3(&key, 9, 0x1F | 0x20, 2, &mut a, 300);
        eea3(&key, 9, 0x1F, 0, &mut b, 300);
        assert_eq!(a, b);
    }

    proptest! {
        /// Against an independent implementation (the `zuc` crate) on random keys, counts,
        /// bearers, directions, data and bit lengths that are not multiples of 8.
        #[test]
        fn eea3_and_eia3_agree_with_an_independent_implementation(
            key in proptest::array::uniform16(any::<u8>()),
            count in any::<u32>(),
            bearer in 0u8..32,
            direction in 0u8..2,
            data in proptest::collection::vec(any::<u8>(), 1..700),
            cut in any::<u32>(),
        ) {
            let bits = cut % (8 * data.len() as u32 + 1);
            let nbytes = bits.div_ceil(8) as usize;
            let mask_tail = |v: &mut Vec<u8>| {
                v.truncate(nbytes);
                if !bits.is_multiple_of(8) {
                    if let Some(last) = v.last_mut() {
                        *last &= 0xFFu8 << (8 - bits % 8);
                    }
                }
            };
            let mut ours = data.clone();
            eea3(&key, count, bearer, direction, &mut ours, bits);
            let mut theirs = data.clone();
            zuc::eea3::eea3_xor_inplace(count, bearer, direction, &key, &mut theirs, bits as usize);
            mask_tail(&mut ours);
            mask_tail(&mut theirs);
            prop_assert_eq!(ours, theirs);
            prop_assert_eq!(
                eia3(&key, count, bearer, direction, &data, bits),
                zuc::eia3::Eia3Mac::compute(count, bearer, direction, &key, &data, bits as usize)
            );
        }
    }
}
