//! CoAP messages (RFC 7252 §3): a 4-byte header (version 1, type, token length, code, message
//! ID), a token of up to 8 bytes, options encoded as deltas with extended forms, and an optional
//! payload after the 0xFF marker. Checking a message walks its options once, without allocating;
//! afterwards the token, the options and the payload are plain slices.

/// CoAP's UDP port (RFC 7252 §6.1).
pub const COAP_PORT: u16 = 5683;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 4;
/// Option number of Uri-Path (RFC 7252 §5.10).
pub const OPT_URI_PATH: u16 = 11;
/// Request code POST (0.02).
pub const CODE_POST: u8 = 0x02;
/// Message types (RFC 7252 §3).
pub const TYPE_CON: u8 = 0;
pub const TYPE_NON: u8 = 1;
pub const TYPE_ACK: u8 = 2;
pub const TYPE_RST: u8 = 3;
const PAYLOAD_MARKER: u8 = 0xff;

/// Why bytes are not a CoAP message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoapError {
    /// Shorter than the 4-byte header, or version not 1.
    NotCoap,
    /// A message format error (RFC 7252 §3): token length 9..15, truncated token, reserved
    /// option nibble 15, an option running past the end, an option number above 65535, a
    /// payload marker followed by nothing, or a non-empty Empty message.
    Format,
}

/// A checked view of a CoAP message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoapMessage<T: AsRef<[u8]>> {
    buffer: T,
    /// End of the options (the payload marker, or the end of the message).
    options_end: usize,
    /// Start of the payload, if there is one (never empty).
    payload_start: Option<usize>,
}

/// Reads an option delta or length: the 4-bit nibble, extended by 1 byte (13) or 2 bytes (14).
/// Returns the value and the new position.
fn ext_value(msg: &[u8], pos: usize, nibble: u8) -> Result<(u32, usize), CoapError> {
    match nibble {
        0..=12 => Ok((u32::from(nibble), pos)),
        13 => match msg.get(pos) {
            Some(&b) => Ok((u32::from(b) + 13, pos + 1)),
            None => Err(CoapError::Format),
        },
        14 => match msg.get(pos..pos + 2) {
            Some(b) => Ok((u32::from(u16::from_be_bytes([b[0], b[1]])) + 269, pos + 2)),
            None => Err(CoapError::Format),
        },
        // 15 is reserved (the 0xFF byte is handled by the caller).
        _ => Err(CoapError::Format),
    }
}

impl<T: AsRef<[u8]>> CoapMessage<T> {
    /// Checks the header, the token and every option; never allocates, never panics.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, CoapError> {
        let msg = buffer.as_ref();
        if msg.len() < HEADER_LEN || msg[0] >> 6 != 1 {
            return Err(CoapError::NotCoap);
        }
        let tkl = usize::from(msg[0] & 0x0f);
        if tkl > 8 {
            return Err(CoapError::Format);
        }
        if msg[1] == 0 {
            // Empty message (§4.1): TKL 0 and nothing after the Message ID.
            if tkl != 0 || msg.len() != HEADER_LEN {
                return Err(CoapError::Format);
            }
            return Ok(CoapMessage {
                buffer,
                options_end: HEADER_LEN,
                payload_start: None,
            });
        }
        let mut pos = HEADER_LEN + tkl;
        if pos > msg.len() {
            return Err(CoapError::Format);
        }
        let mut number: u32 = 0;
        let (options_end, payload_start) = loop {
            let Some(&b) = msg.get(pos) else {
                break (pos, None);
            };
            if b == PAYLOAD_MARKER {
                if pos + 1 == msg.len() {
                    return Err(CoapError::Format);
                }
                break (pos, Some(pos + 1));
            }
            let (delta, p) = ext_value(msg, pos + 1, b >> 4)?;
            let (len, p) = ext_value(msg, p, b & 0x0f)?;
            number += delta;
            if number > u32::from(u16::MAX) {
                return Err(CoapError::Format);
            }
            // `len` is at most 65535 + 269, so this cannot overflow.
            let end = p + len as usize;
            if end > msg.len() {
                return Err(CoapError::Format);
            }
            pos = end;
        };
        Ok(CoapMessage {
            buffer,
            options_end,
            payload_start,
        })
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// 0 CON, 1 NON, 2 ACK, 3 RST.
    pub fn message_type(&self) -> u8 {
        (self.bytes()[0] >> 4) & 0x3
    }

    /// Code byte: class in the top 3 bits, detail in the low 5 (0x02 = 0.02 POST).
    pub fn code(&self) -> u8 {
        self.bytes()[1]
    }

    pub fn message_id(&self) -> u16 {
        u16::from_be_bytes([self.bytes()[2], self.bytes()[3]])
    }

    pub fn token(&self) -> &[u8] {
        let tkl = usize::from(self.bytes()[0] & 0x0f);
        &self.bytes()[HEADER_LEN..HEADER_LEN + tkl]
    }

    /// The raw options area (between the token and the payload marker).
    pub fn options_raw(&self) -> &[u8] {
        let start = (HEADER_LEN + self.token().len()).min(self.options_end);
        &self.bytes()[start..self.options_end]
    }

    /// Each option as (number, value), in order.
    pub fn options(&self) -> impl Iterator<Item = (u16, &[u8])> {
        let raw = self.options_raw();
        let mut pos = 0;
        let mut number = 0u32;
        core::iter::from_fn(move || {
            let &b = raw.get(pos)?;
            // The walk in `new_checked` proved every step below.
            let (delta, p) = ext_value(raw, pos + 1, b >> 4).ok()?;
            let (len, p) = ext_value(raw, p, b & 0x0f).ok()?;
            number += delta;
            let value = raw.get(p..p + len as usize)?;
            pos = p + len as usize;
            Some((number as u16, value))
        })
    }

    /// The payload after the marker (never empty), if the message has one.
    #[inline]
    pub fn payload(&self) -> Option<&[u8]> {
        self.payload_start.map(|s| &self.bytes()[s..])
    }
}

impl<'a> CoapMessage<&'a [u8]> {
    /// The token, the raw options area and the payload, borrowing from the message's buffer
    /// rather than from the view.
    pub fn split(&self) -> (&'a [u8], &'a [u8], Option<&'a [u8]>) {
        let b: &'a [u8] = self.buffer;
        let tkl = usize::from(b[0] & 0x0f);
        let token = &b[HEADER_LEN..HEADER_LEN + tkl];
        let options = &b[(HEADER_LEN + tkl).min(self.options_end)..self.options_end];
        (token, options, self.payload_start.map(|s| &b[s..]))
    }
}

/// A message to emit. Options must come in ascending number order.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoapRepr<'a> {
    pub message_type: u8,
    pub code: u8,
    pub message_id: u16,
    /// At most 8 bytes.
    pub token: &'a [u8],
    pub options: &'a [(u16, &'a [u8])],
    /// Omitted with its marker when empty, as RFC 7252 requires.
    pub payload: &'a [u8],
}

/// Bytes of a delta or length field's extension (0, 1 or 2) and its nibble.
fn nibble(v: usize) -> (u8, usize) {
    match v {
        0..=12 => (v as u8, 0),
        13..=268 => (13, 1),
        _ => (14, 2),
    }
}

impl CoapRepr<'_> {
    /// Bytes the message takes.
    #[inline]
    pub fn buffer_len(&self) -> usize {
        let mut n = HEADER_LEN + self.token.len();
        let mut last = 0u16;
        for (number, value) in self.options {
            n += 1
                + nibble(usize::from(number.saturating_sub(last))).1
                + nibble(value.len()).1
                + value.len();
            last = *number;
        }
        if !self.payload.is_empty() {
            n += 1 + self.payload.len();
        }
        n
    }

    /// Writes the message at the start of `buf` and returns its length; `None` (nothing
    /// written) when it is not encodable (a token over 8 bytes, options out of order, an option
    /// value over 65804 bytes) or `buf` is too short.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        let ordered = self.options.windows(2).all(|w| w[0].0 <= w[1].0);
        let fits = self.options.iter().all(|(_, v)| v.len() <= 65535 + 269);
        if self.token.len() > 8 || !ordered || !fits {
            return None;
        }
        let len = self.buffer_len();
        if buf.len() < len {
            return None;
        }
        buf[0] = 0x40 | (self.message_type & 3) << 4 | self.token.len() as u8;
        buf[1] = self.code;
        buf[2..4].copy_from_slice(&self.message_id.to_be_bytes());
        let mut at = HEADER_LEN;
        buf[at..at + self.token.len()].copy_from_slice(self.token);
        at += self.token.len();
        let mut last = 0u16;
        for (number, value) in self.options {
            let (dn, de) = nibble(usize::from(number - last));
            let (ln, le) = nibble(value.len());
            buf[at] = dn << 4 | ln;
            at += 1;
            for (v, ext) in [(usize::from(number - last), de), (value.len(), le)] {
                match ext {
                    1 => buf[at] = (v - 13) as u8,
                    2 => buf[at..at + 2].copy_from_slice(&((v - 269) as u16).to_be_bytes()),
                    _ => {}
                }
                at += ext;
            }
            buf[at..at + value.len()].copy_from_slice(value);
            at += value.len();
            last = *number;
        }
        if !self.payload.is_empty() {
            buf[at] = PAYLOAD_MARKER;
            buf[at + 1..at + 1 + self.payload.len()].copy_from_slice(self.payload);
        }
        Some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emit(r: &CoapRepr) -> Vec<u8> {
        let mut b = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(&mut b), Some(b.len()));
        b
    }

    #[test]
    fn round_trip_with_every_extended_form() {
        let long = vec![b'x'; 300];
        let opts: [(u16, &[u8]); 4] = [
            (OPT_URI_PATH, b"sensors"),
            (OPT_URI_PATH, &long[..20]),
            (40, &long),
            (2000, b""),
        ];
        let r = CoapRepr {
            message_type: TYPE_CON,
            code: CODE_POST,
            message_id: 0xbeef,
            token: &[1, 2, 3, 4, 5, 6, 7, 8],
            options: &opts,
            payload: b"eyJ.token",
        };
        let b = emit(&r);
        let m = CoapMessage::new_checked(&b[..]).unwrap();
        assert_eq!(
            (m.message_type(), m.code(), m.message_id()),
            (TYPE_CON, CODE_POST, 0xbeef)
        );
        assert_eq!(m.token(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(m.options().collect::<Vec<_>>(), opts.to_vec());
        assert_eq!(m.payload(), Some(&b"eyJ.token"[..]));
        // RFC 7252 §3 example shape: Ver 1, CON, TKL 8, POST.
        assert_eq!(b[0], 0x48);
        let no_payload = emit(&CoapRepr { payload: b"", ..r });
        assert_eq!(
            CoapMessage::new_checked(&no_payload[..]).unwrap().payload(),
            None
        );
    }

    #[test]
    fn format_errors() {
        let good = emit(&CoapRepr {
            code: CODE_POST,
            token: &[9],
            options: &[(OPT_URI_PATH, b"p")],
            payload: b"tok",
            ..Default::default()
        });
        assert!(CoapMessage::new_checked(&good[..]).is_ok());
        let cases: [(&[u8], CoapError); 9] = [
            (&[0x40, 2, 0], CoapError::NotCoap),
            (&[0x80, 2, 0, 0], CoapError::NotCoap),
            (&[0x49, 2, 0, 0], CoapError::Format),    // TKL 9
            (&[0x42, 2, 0, 0, 1], CoapError::Format), // truncated token
            (&[0x40, 2, 0, 0, 0xf0], CoapError::Format), // reserved delta 15
            (&[0x40, 2, 0, 0, 0x05, 1], CoapError::Format), // option past the end
            (&[0x40, 2, 0, 0, 0xff], CoapError::Format), // marker, nothing after
            (&[0x41, 0, 0, 0, 7], CoapError::Format), // non-empty Empty message
            (
                &[0x40, 2, 0, 0, 0xe0, 0xff, 0xff, 0xe0, 0xff, 0xff],
                CoapError::Format,
            ), // number > 65535
        ];
        for (i, (m, want)) in cases.iter().enumerate() {
            assert_eq!(CoapMessage::new_checked(*m).err(), Some(*want), "case {i}");
        }
        let empty = CoapMessage::new_checked(&[0x40u8, 0, 0x12, 0x34][..]).unwrap();
        assert_eq!((empty.code(), empty.payload()), (0, None));
        assert!(CoapRepr {
            token: &[0; 9],
            ..Default::default()
        }
        .emit(&mut [0; 64])
        .is_none());
        assert!(CoapRepr {
            options: &[(5, b""), (4, b"")],
            ..Default::default()
        }
        .emit(&mut [0; 64])
        .is_none());
    }
}
