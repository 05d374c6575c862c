//! The connection exchange of rdma-core's example programs (`ibv_rc_pingpong` and friends):
//! each end tells the other `LID:QPN:PSN:GID` over TCP as a 52-byte text message
//! `"%04x:%06x:%06x:%32s"` with a NUL, the GID as 32 hex digits in byte order. `fldemu
//! rc-pingpong` speaks it to the real tool, and the FLD-R control plane and client library use
//! it to set up their connections.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv6Addr, TcpStream};
use std::time::{Duration, Instant};

use super::{Context, Gid, VerbsError};

/// Why a wait on the exchange's socket ended without its result.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error("the peer did not answer")]
    Timeout,
}

/// Runs `op` on a non-blocking socket until it is done or `deadline` passes, `ctx`'s card
/// answering ARP meanwhile (the peer resolves our GID while it connects its QP).
pub fn waiting<T>(
    ctx: &mut Context,
    deadline: Instant,
    mut op: impl FnMut() -> std::io::Result<Option<T>>,
) -> Result<T, WaitError> {
    loop {
        match op() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        ctx.serve_neighbors()?;
        if Instant::now() > deadline {
            return Err(WaitError::Timeout);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Reads exactly `buf.len()` bytes from a non-blocking socket (the tools read their
/// fixed-size messages whole); the peer closing first is `UnexpectedEof`.
pub fn read_exact(
    ctx: &mut Context,
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<(), WaitError> {
    let mut got = 0;
    waiting(ctx, deadline, || {
        let n = s.read(&mut buf[got..])?;
        if n == 0 {
            return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "peer closed"));
        }
        got += n;
        Ok((got == buf.len()).then_some(()))
    })
}

/// Writes all of `data` to a non-blocking socket.
pub fn write_all(
    ctx: &mut Context,
    s: &mut TcpStream,
    data: &[u8],
    deadline: Instant,
) -> Result<(), WaitError> {
    let mut put = 0;
    waiting(ctx, deadline, || {
        put += s.write(&data[put..])?;
        Ok((put == data.len()).then_some(()))
    })
}

/// The tool's message: `"0000:000000:000000:" + 32 hex digits + NUL`.
pub const MESSAGE_LEN: usize = 52;

/// What the ends exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl Dest {
    /// The message the tool writes (`gid_to_wire_gid`: the 16 bytes as 32 hex digits in
    /// order).
    pub fn message(&self) -> [u8; MESSAGE_LEN] {
        let mut gid = String::new();
        for b in self.gid {
            gid.push_str(&format!("{b:02x}"));
        }
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        let mut m = [0u8; MESSAGE_LEN];
        m[..text.len()].copy_from_slice(text.as_bytes());
        m
    }

    /// Reads a message as the tool's `sscanf("%x:%x:%x:%s")` does.
    pub fn parse(m: &[u8]) -> Option<Dest> {
        let text = std::str::from_utf8(m.split(|b| *b == 0).next()?).ok()?;
        let mut f = text.splitn(4, ':');
        let lid = u16::from_str_radix(f.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(f.next()?, 16).ok()?;
        let psn = u32::from_str_radix(f.next()?, 16).ok()?;
        let g = f.next()?;
        if g.len() != 32 {
            return None;
        }
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Dest { lid, qpn, psn, gid })
    }

    /// As the tool prints it.
    pub fn describe(&self) -> String {
        format!(
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            Ipv6Addr::from(self.gid)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_the_tools_byte_for_byte() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: fld_abi::wire::roce::ipv4_gid([192, 168, 77, 2]),
        };
        let m = d.message();
        assert_eq!(
            &m[..],
            &b"0000:000011:abcdef:00000000000000000000ffffc0a84d02\0"[..]
        );
        assert_eq!(Dest::parse(&m), Some(d));
        assert_eq!(
            d.describe(),
            "LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:192.168.77.2"
        );
        assert_eq!(Dest::parse(b"0000:zz:0:00"), None);
    }
}
