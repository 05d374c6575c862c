//! The wires that need the operating system, for a card's uplink: a UDP link to another
//! process — one Ethernet frame per datagram and nothing else, the encapsulation of QEMU's
//! `-netdev dgram` and `-netdev socket,udp=`, so two `fldemu` processes, or `fldemu` and a QEMU
//! guest's NIC, share a link — and a Linux TAP device, so the host's own network stack is the
//! peer. Both are non-blocking: the NIC polls them like any wire.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use fld_device::wire::Wire;

/// An uplink on a UDP socket: frames sent to `peer`, frames received from anyone.
pub struct UdpWire {
    socket: UdpSocket,
    peer: SocketAddr,
    /// Frames the socket refused (its buffer full): a full link drops them.
    pub dropped: u64,
}

impl UdpWire {
    /// Binds `local` and sends to `peer`.
    pub fn new(local: SocketAddr, peer: SocketAddr) -> std::io::Result<Self> {
        let socket = UdpSocket::bind(local)?;
        socket.set_nonblocking(true)?;
        Ok(UdpWire {
            socket,
            peer,
            dropped: 0,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

impl Wire for UdpWire {
    fn transmit(&mut self, frame: &[u8]) {
        if self.socket.send_to(frame, self.peer).is_err() {
            self.dropped += 1;
        }
    }

    fn receive(&mut self, buf: &mut [u8]) -> Option<usize> {
        // A datagram longer than `buf` is cut, as a frame over the MTU would be.
        self.socket.recv(buf).ok()
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

    #[test]
    fn a_udp_link_carries_one_frame_per_datagram_both_ways() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let a0 = UdpSocket::bind(any).unwrap();
        let b0 = UdpSocket::bind(any).unwrap();
        let (pa, pb) = (a0.local_addr().unwrap(), b0.local_addr().unwrap());
        drop((a0, b0));
        let mut a = UdpWire::new(pa, pb).unwrap();
        let mut b = UdpWire::new(pb, pa).unwrap();
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
}
