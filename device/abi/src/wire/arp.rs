//! ARP for IPv4 over Ethernet (RFC 826): what a host stack answers so a peer can resolve its
//! IPv4 address to a MAC address — a RoCEv2 peer (Linux soft-RoCE, say) resolves the GID of
//! its destination this way.

use super::{array, be16, ethernet, ethertype, put_be16, Error, Result};

/// Bytes of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
pub const OP_REQUEST: u16 = 1;
pub const OP_REPLY: u16 = 2;
const HTYPE_ETHERNET: u16 = 1;

/// An Ethernet/IPv4 ARP request or reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    pub operation: u16,
    pub sender_mac: [u8; 6],
    pub sender_ip: [u8; 4],
    pub target_mac: [u8; 6],
    pub target_ip: [u8; 4],
}

impl ArpRepr {
    /// Reads the ARP packet at the start of `b` (after the Ethernet header); only Ethernet
    /// hardware and IPv4 protocol addresses are accepted.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..PACKET_LEN).ok_or(Error::Truncated)?;
        if be16(b, 0) != HTYPE_ETHERNET || be16(b, 2) != ethertype::IPV4 || b[4] != 6 || b[5] != 4 {
            return Err(Error::Malformed);
        }
        Ok(ArpRepr {
            operation: be16(b, 6),
            sender_mac: array(b, 8),
            sender_ip: array(b, 14),
            target_mac: array(b, 18),
            target_ip: array(b, 24),
        })
    }

    pub fn emit(&self, b: &mut [u8]) {
        let b = &mut b[..PACKET_LEN];
        put_be16(b, 0, HTYPE_ETHERNET);
        put_be16(b, 2, ethertype::IPV4);
        b[4] = 6;
        b[5] = 4;
        put_be16(b, 6, self.operation);
        b[8..14].copy_from_slice(&self.sender_mac);
        b[14..18].copy_from_slice(&self.sender_ip);
        b[18..24].copy_from_slice(&self.target_mac);
        b[24..28].copy_from_slice(&self.target_ip);
    }

    /// A whole Ethernet frame carrying this packet (requests go to the broadcast address,
    /// replies to the requester), padded to the 60-byte minimum.
    pub fn frame(&self) -> [u8; 60] {
        let mut f = [0u8; 60];
        let dst = if self.operation == OP_REQUEST {
            [0xff; 6]
        } else {
            self.target_mac
        };
        ethernet::EthernetRepr {
            src_addr: self.sender_mac,
            dst_addr: dst,
            ethertype: ethertype::ARP,
        }
        .emit(&mut ethernet::EthernetFrame::new_unchecked(&mut f[..]));
        self.emit(&mut f[ethernet::HEADER_LEN..]);
        f
    }

    /// The reply a host owning `mac` sends to this request.
    pub fn reply(&self, mac: [u8; 6]) -> ArpRepr {
        ArpRepr {
            operation: OP_REPLY,
            sender_mac: mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_and_its_reply_match_the_rfc_layout() {
        // "Who has 10.0.0.2? Tell 10.0.0.1", as tcpdump shows it captured from Linux.
        let wire: [u8; 42] = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x08, 0x06, // Ethernet
            0, 1, 0x08, 0, 6, 4, 0, 1, // Ethernet/IPv4, request
            0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, // sender
            0, 0, 0, 0, 0, 0, 10, 0, 0, 2, // target
        ];
        let req = ArpRepr::parse(&wire[14..]).unwrap();
        assert_eq!(
            req,
            ArpRepr {
                operation: OP_REQUEST,
                sender_mac: [2, 0, 0, 0, 0, 1],
                sender_ip: [10, 0, 0, 1],
                target_mac: [0; 6],
                target_ip: [10, 0, 0, 2],
            }
        );
        assert_eq!(&req.frame()[..42], &wire[..]);
        let rep = req.reply([2, 0, 0, 0, 0, 2]);
        let f = rep.frame();
        assert_eq!(&f[..6], &[2, 0, 0, 0, 0, 1], "to the requester");
        assert_eq!(ArpRepr::parse(&f[14..]).unwrap().sender_ip, [10, 0, 0, 2]);
        assert_eq!(ArpRepr::parse(&wire[14..30]).unwrap_err(), Error::Truncated);
        let mut bad = wire;
        bad[19] = 16; // IPv6-sized protocol addresses
        assert_eq!(ArpRepr::parse(&bad[14..]).unwrap_err(), Error::Malformed);
    }
}
