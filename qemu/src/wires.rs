//! The wires that need the operating system, for a card's uplink: a UDP link to another
//! process — one Ethernet frame per datagram and nothing else, the encapsulation of QEMU's
//! `-netdev dgram` and `-netdev socket,udp=`, so two `fldemu` processes, or `fldemu` and a QEMU
//! guest's NIC, share a link — and a Linux TAP device, so the host's own network stack is the
//! peer. Both are non-blocking: the NIC polls them like any wire.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use fld_device::wire::Wire;

/// Frames one `sendmmsg` or `recvmmsg` call moves at most.
const UDP_BATCH: usize = 32;
/// Bytes of a receive slot: the largest UDP payload, so a frame read ahead is never cut where
/// a single `recv` into the NIC's buffer would have kept it whole.
const UDP_SLOT: usize = 1 << 16;

/// An uplink on a UDP socket: frames sent to `peer`, frames received from anyone. What a NIC
/// pass transmits leaves in `sendmmsg` calls of up to [`UDP_BATCH`] frames when the pass ends,
/// and arriving frames are read up to [`UDP_BATCH`] a `recvmmsg` call: on a UDP link the
/// system calls, not the copies, cost the most.
pub struct UdpWire {
    socket: UdpSocket,
    /// The peer's address as the kernel takes it.
    peer: (libc::sockaddr_storage, libc::socklen_t),
    /// Frames the socket refused (its buffer full): a full link drops them.
    pub dropped: u64,
    bursting: bool,
    /// The burst's frames back to back, and where each one ends.
    out: Vec<u8>,
    out_ends: Vec<usize>,
    /// Frames read ahead, one per slot of [`UDP_SLOT`] bytes, their lengths, and which slot is
    /// next of how many filled.
    slots: Vec<u8>,
    lens: [usize; UDP_BATCH],
    next: usize,
    filled: usize,
}

impl UdpWire {
    /// Binds `local` and sends to `peer`.
    pub fn new(local: SocketAddr, peer: SocketAddr) -> std::io::Result<Self> {
        let socket = UdpSocket::bind(local)?;
        socket.set_nonblocking(true)?;
        Ok(UdpWire {
            socket,
            peer: raw_address(&peer),
            dropped: 0,
            bursting: false,
            out: Vec::new(),
            out_ends: Vec::new(),
            slots: vec![0; UDP_BATCH * UDP_SLOT],
            lens: [0; UDP_BATCH],
            next: 0,
            filled: 0,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends what was transmitted — a pass's burst, or one frame outside a burst —
    /// [`UDP_BATCH`] frames a call; a frame the socket refuses is dropped and counted, and the
    /// frames after it are sent.
    fn send_burst(&mut self) {
        let mut first = 0;
        while first < self.out_ends.len() {
            let n = (self.out_ends.len() - first).min(UDP_BATCH);
            // SAFETY: all-zero iovecs and message headers are valid (null pointers, zero
            // lengths); those passed to the kernel are filled in below.
            let mut iov: [libc::iovec; UDP_BATCH] = unsafe { std::mem::zeroed() };
            let mut msgs: [libc::mmsghdr; UDP_BATCH] = unsafe { std::mem::zeroed() };
            let mut start = if first == 0 {
                0
            } else {
                self.out_ends[first - 1]
            };
            for k in 0..n {
                let end = self.out_ends[first + k];
                iov[k] = libc::iovec {
                    iov_base: self.out[start..end].as_ptr() as *mut libc::c_void,
                    iov_len: end - start,
                };
                start = end;
                let h = &mut msgs[k].msg_hdr;
                h.msg_name = &self.peer.0 as *const libc::sockaddr_storage as *mut libc::c_void;
                h.msg_namelen = self.peer.1;
                h.msg_iov = &mut iov[k];
                h.msg_iovlen = 1;
            }
            // SAFETY: the headers, the iovecs, the peer's address and the frames they point to
            // all live across the call, and the kernel only reads them (it writes `msg_len`).
            let sent = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            match usize::try_from(sent) {
                Ok(sent) if sent > 0 => first += sent,
                // The frame at `first` was refused.
                _ => {
                    self.dropped += 1;
                    first += 1;
                }
            }
        }
        self.out.clear();
        self.out_ends.clear();
    }

    /// Reads up to [`UDP_BATCH`] waiting frames into the slots. False when none was waiting.
    fn read_ahead(&mut self) -> bool {
        // SAFETY: as in `send_burst`: all-zero headers are valid, and those the kernel gets
        // are filled in below.
        let mut iov: [libc::iovec; UDP_BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; UDP_BATCH] = unsafe { std::mem::zeroed() };
        for (k, slot) in self.slots.chunks_exact_mut(UDP_SLOT).enumerate() {
            iov[k] = libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: UDP_SLOT,
            };
            msgs[k].msg_hdr.msg_iov = &mut iov[k];
            msgs[k].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: each header points at one slot of `self.slots`, which outlives the call; the
        // kernel writes at most `UDP_SLOT` bytes into each and the lengths into the headers.
        let got = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                UDP_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let Ok(got) = usize::try_from(got) else {
            return false;
        };
        for (len, m) in self.lens.iter_mut().zip(&msgs[..got]) {
            *len = m.msg_len as usize;
        }
        (self.next, self.filled) = (0, got);
        got > 0
    }
}

/// `addr` as a `sockaddr_in` or `sockaddr_in6` in a `sockaddr_storage`, and its length.
fn raw_address(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid; it is large enough and aligned for both
    // address kinds written into it.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: see above.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: see above.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

impl Wire for UdpWire {
    fn transmit(&mut self, frame: &[u8]) {
        self.out.extend_from_slice(frame);
        self.out_ends.push(self.out.len());
        if !self.bursting {
            self.send_burst();
        }
    }

    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.next == self.filled && !self.read_ahead() {
            return None;
        }
        let k = self.next;
        self.next += 1;
        // A datagram longer than `buf` is cut, as a frame over the MTU would be.
        let n = self.lens[k].min(buf.len());
        buf[..n].copy_from_slice(&self.slots[k * UDP_SLOT..k * UDP_SLOT + n]);
        Some(n)
    }

    fn begin_burst(&mut self) {
        self.bursting = true;
    }

    fn end_burst(&mut self) {
        self.bursting = false;
        if !self.out_ends.is_empty() {
            self.send_burst();
        }
    }
}

/// An uplink on a Linux TAP interface (no packet-information header): what the card sends, the
/// host stack receives on that interface, and the other way round.
pub struct TapWire {
    fd: OwnedFd,
    pub name: String,
    pub dropped: u64,
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

impl TapWire {
    /// Opens (creating it if needed) TAP interface `name`; needs CAP_NET_ADMIN.
    pub fn open(name: &str) -> std::io::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "interface name",
            ));
        }
        // SAFETY: plain system calls; every result is checked and the descriptor is owned.
        unsafe {
            let fd = libc::open(
                c"/dev/net/tun".as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(fd);
            let mut req: libc::ifreq = std::mem::zeroed();
            for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
                *d = s as libc::c_char;
            }
            req.ifr_ifru.ifru_flags = IFF_TAP | IFF_NO_PI;
            if libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(TapWire {
                fd,
                name: name.to_string(),
                dropped: 0,
            })
        }
    }
}

impl Wire for TapWire {
    fn transmit(&mut self, frame: &[u8]) {
        // SAFETY: writing a valid buffer to an owned descriptor.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
        if n < 0 {
            self.dropped += 1;
        }
    }

    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        // SAFETY: reading into a valid buffer from an owned descriptor.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        (n > 0).then_some(n as usize)
    }
}

/// A link named on the command line: `udp:LOCAL_PORT:HOST:PORT` (or `udp:LOCAL_ADDR:PORT:HOST:PORT`)
/// or `tap:NAME`.
pub fn open_link(spec: &str) -> Result<Box<dyn Wire>, String> {
    let (kind, rest) = spec
        .split_once(':')
        .ok_or_else(|| format!("{spec}: expected udp:... or tap:NAME"))?;
    match kind {
        "tap" => TapWire::open(rest)
            .map(|w| Box::new(w) as Box<dyn Wire>)
            .map_err(|e| format!("TAP {rest}: {e}")),
        "udp" => {
            let parts: Vec<&str> = rest.split(':').collect();
            let (local, remote) = match parts.as_slice() {
                [lport, rhost, rport] => (format!("0.0.0.0:{lport}"), format!("{rhost}:{rport}")),
                [lhost, lport, rhost, rport] => {
                    (format!("{lhost}:{lport}"), format!("{rhost}:{rport}"))
                }
                _ => return Err(format!("{spec}: expected udp:LOCAL_PORT:HOST:PORT")),
            };
            let resolve = |s: &str| {
                std::net::ToSocketAddrs::to_socket_addrs(s)
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| format!("{s}: not an address"))
            };
            UdpWire::new(resolve(&local)?, resolve(&remote)?)
                .map(|w| Box::new(w) as Box<dyn Wire>)
                .map_err(|e| format!("UDP link {spec}: {e}"))
        }
        _ => Err(format!("{spec}: unknown link kind {kind}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two UDP wires on loopback, each sending to the other.
    fn wire_pair() -> (UdpWire, UdpWire) {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a0 = UdpSocket::bind(any).unwrap();
        let b0 = UdpSocket::bind(any).unwrap();
        let (pa, pb) = (a0.local_addr().unwrap(), b0.local_addr().unwrap());
        drop((a0, b0));
        (UdpWire::new(pa, pb).unwrap(), UdpWire::new(pb, pa).unwrap())
    }

    #[test]
    fn a_udp_link_carries_one_frame_per_datagram_both_ways() {
        let (mut a, mut b) = wire_pair();
        let frame: Vec<u8> = (0..1514).map(|i| i as u8).collect();
        a.transmit(&frame);
        a.transmit(&frame[..60]);
        let mut buf = [0u8; 9216];
        let mut got = Vec::new();
        for _ in 0..1000 {
            if let Some(n) = b.receive(&mut buf) {
                got.push(buf[..n].to_vec());
            }
            if got.len() == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, vec![frame.clone(), frame[..60].to_vec()]);
        b.transmit(b"back");
        let n = (0..1000)
            .find_map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                a.receive(&mut buf)
            })
            .unwrap();
        assert_eq!(&buf[..n], b"back");
        assert!(open_link("udp:1").is_err());
        assert!(open_link("bogus:x").is_err());
    }

    /// Receives `want` frames from `w`, waiting up to a second.
    fn receive_frames(w: &mut UdpWire, want: usize) -> Vec<Vec<u8>> {
        let mut buf = [0u8; 9216];
        let mut got = Vec::new();
        for _ in 0..1000 {
            while let Some(n) = w.receive(&mut buf) {
                got.push(buf[..n].to_vec());
            }
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        got
    }

    #[test]
    fn a_burst_leaves_a_udp_link_when_it_ends_whole_and_in_order() {
        let (mut a, mut b) = wire_pair();
        // More frames than two calls move (few and small enough for the receiving socket's
        // buffer), a 9,000-byte one among them.
        let frames: Vec<Vec<u8>> = (0..2 * UDP_BATCH + 5)
            .map(|i| {
                let len = if i == 40 { 9000 } else { 60 + i * 8 };
                (0..len).map(|j| (i * 7 + j) as u8).collect()
            })
            .collect();
        a.begin_burst();
        for f in &frames {
            a.transmit(f);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(
            receive_frames(&mut b, 0).is_empty(),
            "nothing leaves before the burst ends"
        );
        a.end_burst();
        assert_eq!(receive_frames(&mut b, frames.len()), frames);
        assert_eq!(a.dropped, 0);
        // A receive buffer shorter than the frame cuts it, as before.
        a.transmit(&frames[40]);
        let mut short = [0u8; 100];
        let n = (0..1000)
            .find_map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                b.receive(&mut short)
            })
            .unwrap();
        assert_eq!(&short[..n], &frames[40][..100]);
    }
}
