//! StaR's security module (Pan et al., APNet '19, §3.2, Figure 4; `docs/nic-interface.md` §16.5):
//! a match-action table on every function's egress. A StaR server answers requests from the
//! packets alone and cannot check them, so the check happens where the requests start: every
//! StaR packet a function sends is matched against the entries the server's control plane
//! installed for that function. What no entry allows is dropped and counted. StaR packets are
//! blocked until a connection installs entries; every other packet passes untouched.
//!
//! An entry allows packets of some kinds to one destination address:
//! * RDPs and GDs only when all their bytes lie in the entry's bus-address range (the server's
//!   registered memory of that connection);
//! * CQEPs only for the entry's CQ.
//!
//! Only the manager function writes entries (STAR_GUARD_ADD/DEL). That is the trusted driver
//! through which the server's control plane reaches the client NIC; an application on a function
//! cannot widen its own module.
//!
//! Left out: per-connection packet rates (the paper's module checks legality, not volume), and
//! IPv6 flow labels as match keys.

use fld_abi::nic::{star_guard_kind, STAR_GUARD_ANY_CQ, STAR_GUARD_ENTRIES};
use fld_abi::wire::roce::star::{is_star_opcode, StarKind, StarPacket};
use fld_abi::wire::roce::{ipv4_gid, ROCE_V2_PORT};
use fld_abi::wire::udp;

use super::packet::{L3Kind, L4Kind, ParsedFrame};

/// One allow entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GuardEntry {
    pub id: u32,
    pub kinds: u8,
    pub dst_gid: [u8; 16],
    pub lo: u64,
    pub hi: u64,
    pub cqn: u32,
}

/// A function's egress security module.
#[derive(Clone, Debug)]
pub(crate) struct StarGuard {
    /// False only through the test knob (STAR_GUARD_ENFORCE 0).
    pub enforce: bool,
    pub entries: Vec<GuardEntry>,
    next_id: u32,
}

impl Default for StarGuard {
    fn default() -> Self {
        StarGuard {
            enforce: true,
            entries: Vec::new(),
            next_id: 1,
        }
    }
}

/// What the module made of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not a StaR packet: the module does not look at it.
    NotStar,
    Allowed,
    Blocked,
}

impl StarGuard {
    /// Adds an entry; its id, or `None` when the table is full.
    pub fn add(&mut self, mut e: GuardEntry) -> Option<u32> {
        if self.entries.len() >= STAR_GUARD_ENTRIES {
            return None;
        }
        e.id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.entries.push(e);
        Some(e.id)
    }

    pub fn remove(&mut self, id: u32) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.id != id);
        self.entries.len() != before
    }

    /// The verdict on a frame the function sends. A frame that claims to be a StaR packet (UDP
    /// to 4791, a StaR opcode) but does not parse as one is blocked: whatever a server would make
    /// of it, the module cannot vouch for it.
    pub fn check(&self, frame: &[u8], p: &ParsedFrame) -> Verdict {
        if p.l4 != L4Kind::Udp || p.dst_port != ROCE_V2_PORT {
            return Verdict::NotStar;
        }
        let ib_at = usize::from(p.l4_offset) + udp::HEADER_LEN;
        if !frame.get(ib_at).is_some_and(|op| is_star_opcode(*op)) {
            return Verdict::NotStar;
        }
        if !self.enforce {
            return Verdict::Allowed;
        }
        let ip_end = (usize::from(p.l3_offset) + usize::from(p.ip_len)).min(frame.len());
        let Some(pkt) = frame
            .get(ib_at..ip_end)
            .and_then(|b| StarPacket::parse(b).ok())
        else {
            return Verdict::Blocked;
        };
        let dst = if p.l3 == L3Kind::Ipv6 {
            p.dst_ip
        } else {
            ipv4_gid([p.dst_ip[0], p.dst_ip[1], p.dst_ip[2], p.dst_ip[3]])
        };
        let bit = star_guard_kind(pkt.kind.opcode());
        let allowed = self.entries.iter().any(|e| {
            e.dst_gid == dst
                && e.kinds & bit != 0
                && match pkt.kind {
                    StarKind::Rdp | StarKind::Gd => pkt.headers.data.is_some_and(|d| {
                        d.dma_addr
                            .checked_add(u64::from(d.length))
                            .is_some_and(|end| d.dma_addr >= e.lo && end <= e.hi)
                    }),
                    StarKind::Cqep => pkt
                        .headers
                        .cq
                        .is_some_and(|c| e.cqn == STAR_GUARD_ANY_CQ || c.cqn == e.cqn),
                    _ => true,
                }
        });
        if allowed {
            Verdict::Allowed
        } else {
            Verdict::Blocked
        }
    }
}
