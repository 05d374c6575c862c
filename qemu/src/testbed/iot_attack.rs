//! An adversary against the IoT service behind the fail-closed guard, and the invariant the card
//! must keep against it (`docs/nic-interface.md` §9.7). The property test and the fuzz target
//! on the IoT path share it.
//!
//! The adversary sends CoAP requests to the service from several tenants and a stranger, with
//! valid and invalid tokens (another tenant's key, expired, `alg: none`, garbage), whole or as
//! IPv4 fragments of any sizes in any order — interleaved with other requests' fragments, with
//! exact duplicates, a piece missing, or a piece sent again with other bytes (an overlap) — with
//! bytes after the UDP datagram inside the IP payload (legal, RFC 768), and with lying length
//! fields (UDP length past the payload or below the header, an IPv4 total length past the
//! frame, an IHL below 5).
//!
//! The invariant: what the host's queues receive is exactly the *clean, valid* requests — a
//! known tenant's valid token, no lying field, every fragment there and no overlap — each once
//! and byte for byte as sent (a fragmented one reassembled: the datagram with DF clear); a
//! valid request whose fragments overlapped may arrive at most once (RFC 5722 discards it only
//! when the overlap comes before the datagram completes); nothing else of the service reaches
//! the host, no fragment in particular, so no host reassembly can build a request the card did
//! not authenticate.

use base64::Engine as _;
use fld_abi::wire::coap::COAP_PORT;
use fld_abi::wire::{ethernet, EthIpv4UdpRepr, EthernetRepr, Ipv4Packet, Ipv4Repr, UdpRepr};
use fld_device::accel::iot::{coap_message, sign_hs256};
use fld_host::guard::FragmentPolicy;

use super::replay::{ReplayAccel, ReplayConfig, ReplayError, ReplayTenant, Replayer};

/// The service's clock (seconds since the epoch) for `exp`.
pub const NOW: u64 = 1_900_000_000;
/// The tenants: context ID, IPv4 source, HMAC key.
pub const TENANTS: [(u16, [u8; 4], &[u8]); 3] = [
    (10, [10, 0, 0, 1], b"tenant one's key, 32 bytes long."),
    (11, [10, 0, 0, 3], b"tenant two's key, 32 bytes long."),
    (12, [10, 0, 0, 5], b"tenant 3 key"),
];
/// A sender with no tenant (no key in the accelerator).
pub const STRANGER: [u8; 4] = [10, 0, 0, 9];
const SERVER: [u8; 4] = [10, 0, 0, 2];
const NET_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x01];

/// The token a request carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    /// Signed with the sender's own key, not expired.
    Valid,
    /// Signed with the next tenant's key.
    OtherTenantsKey,
    /// The sender's key, `exp` in the past.
    Expired,
    /// `alg: none`, no signature.
    Unsigned,
    /// Any bytes.
    Garbage(Vec<u8>),
}

/// A length field that lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lie {
    /// UDP length past the IP payload by this much (at least 1).
    UdpLengthPastPayload(u16),
    /// UDP length below the 8-byte header.
    UdpLengthBelowHeader(u8),
    /// The frame (or, fragmented, its first fragment) cut this many bytes short of the IPv4
    /// total length (at least 1).
    IpLengthPastFrame(u16),
    /// IHL 0..=4 (in the frame or the first fragment).
    IhlBelowFive(u8),
}

/// One request and how it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Index into [`TENANTS`]; anything beyond is the [`STRANGER`].
    pub sender: u8,
    pub token: Token,
    /// Claim padding (modulo 480, so a valid token stays under the filter's 1024-byte limit).
    pub padding: u16,
    /// Bytes after the UDP datagram inside the IP payload.
    pub trailing: Vec<u8>,
    pub lie: Option<Lie>,
    /// Fragment data sizes in units of 8 bytes (the last piece takes the rest); empty: whole.
    pub fragments: Vec<u8>,
    /// A fragment sent twice.
    pub duplicate: Option<u8>,
    /// A fragment never sent.
    pub missing: Option<u8>,
    /// A fragment sent again with the byte at this index of its data changed.
    pub overlap: Option<(u8, u16)>,
}

/// A whole attack: the requests, their frames shuffled by `order_seed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attack {
    pub requests: Vec<Request>,
    pub order_seed: u64,
    pub fragments: FragmentPolicy,
}

/// What the host may and must receive: per request, the datagrams the card could deliver for
/// it (at most one of them), and whether one must arrive.
#[derive(Debug, Default)]
pub struct Expectation {
    requests: Vec<Expected>,
}

#[derive(Debug)]
struct Expected {
    variants: Vec<Vec<u8>>,
    required: bool,
    /// How many datagrams the pieces on the wire can make at most, and how many arrived.
    datagrams: u32,
    delivered: u32,
}

/// A request's frames on the wire, every whole datagram the card could rebuild from them (the
/// datagram as sent unless a piece is missing, and with the other bytes of an overlapping piece
/// when that came first), whether it was fragmented, and how many complete datagrams its
/// pieces can make (a piece sent again after the datagram completed starts a new one, as in any
/// IP stack: the sender's duplicates are not the card's to suppress).
struct Sent {
    wire: Vec<Vec<u8>>,
    variants: Vec<Vec<u8>>,
    fragmented: bool,
    datagrams: u32,
}

impl Request {
    fn sender_ip(&self) -> [u8; 4] {
        TENANTS
            .get(usize::from(self.sender))
            .map_or(STRANGER, |t| t.1)
    }

    /// A known tenant's valid token, nothing lying.
    fn valid(&self) -> bool {
        usize::from(self.sender) < TENANTS.len() && self.token == Token::Valid && self.lie.is_none()
    }

    fn coap(&self, id: u16) -> Vec<u8> {
        let own = TENANTS
            .get(usize::from(self.sender))
            .map_or(&b"no key"[..], |t| t.2);
        let next = TENANTS[(usize::from(self.sender) + 1) % TENANTS.len()].2;
        let pad = "p".repeat(usize::from(self.padding % 480));
        let claims = |exp: u64| format!(r#"{{"sub":"{id}","exp":{exp},"pad":"{pad}"}}"#);
        let token = match &self.token {
            Token::Valid => sign_hs256(own, &claims(NOW + 60)).into_bytes(),
            Token::OtherTenantsKey => sign_hs256(next, &claims(NOW + 60)).into_bytes(),
            Token::Expired => sign_hs256(own, &claims(NOW - 1)).into_bytes(),
            Token::Unsigned => {
                let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
                format!(
                    "{}.{}.",
                    b64.encode(br#"{"alg":"none","typ":"JWT"}"#),
                    b64.encode(claims(NOW + 60))
                )
                .into_bytes()
            }
            Token::Garbage(g) => g.clone(),
        };
        coap_message(id, &id.to_be_bytes(), "up", &token)
    }

    /// The request as one frame (before fragmentation and lies): Ethernet, IPv4 with DF clear
    /// when it will be fragmented, UDP to the service, the CoAP message, the trailing bytes.
    fn frame(&self, id: u16) -> Vec<u8> {
        let coap = self.coap(id);
        let headers = EthIpv4UdpRepr {
            eth: EthernetRepr {
                src_addr: NET_MAC,
                dst_addr: HOST_MAC,
                ethertype: fld_abi::wire::ethertype::IPV4,
            },
            ip: Ipv4Repr {
                src_addr: self.sender_ip(),
                dst_addr: SERVER,
                ident: id,
                hop_limit: 64,
                dont_frag: self.fragments.is_empty(),
                ..Ipv4Repr::default()
            },
            udp: UdpRepr {
                src_port: 40000 + id,
                dst_port: COAP_PORT,
            },
        };
        let trailing = &self.trailing[..self.trailing.len().min(64)];
        let mut f = vec![0u8; EthIpv4UdpRepr::HEADER_LEN + coap.len() + trailing.len()];
        f[EthIpv4UdpRepr::HEADER_LEN..][..coap.len()].copy_from_slice(&coap);
        f[EthIpv4UdpRepr::HEADER_LEN + coap.len()..].copy_from_slice(trailing);
        headers.emit(&mut f, true);
        // The UDP datagram ends before the trailing bytes; its checksum covers it alone.
        let udp_len = (8 + coap.len()) as u16;
        set_udp_length(&mut f, udp_len);
        f
    }

    /// What goes on the wire for the request.
    fn frames(&self, id: u16) -> Sent {
        let original = self.frame(id);
        // A UDP length lies about the whole datagram, an IP header about the frame carrying it.
        let mut sent = original;
        if let Some(lie @ (Lie::UdpLengthPastPayload(_) | Lie::UdpLengthBelowHeader(_))) = self.lie
        {
            apply_lie(&mut sent, lie);
        }
        let mut pieces = if self.fragments.is_empty() {
            vec![sent.clone()]
        } else {
            fragment(&sent, &self.fragments)
        };
        if let Some(lie @ (Lie::IpLengthPastFrame(_) | Lie::IhlBelowFive(_))) = self.lie {
            apply_lie(&mut pieces[0], lie);
        }
        let n = pieces.len();
        if n == 1 {
            return Sent {
                wire: pieces,
                variants: vec![sent],
                fragmented: false,
                datagrams: 1,
            };
        }
        let missing = self.missing.map(|m| usize::from(m) % n);
        let mut wire: Vec<Vec<u8>> = (0..n)
            .filter(|i| Some(*i) != missing)
            .map(|i| pieces[i].clone())
            .collect();
        let mut variants = Vec::new();
        if missing.is_none() {
            variants.push(sent.clone());
        }
        // Copies of each piece on the wire: a reassembly completes once per full set.
        let mut copies = vec![1u32; n];
        if let Some(m) = missing {
            copies[m] = 0;
        }
        if let Some(d) = self.duplicate.map(|d| usize::from(d) % n) {
            if Some(d) != missing {
                wire.push(pieces[d].clone());
                copies[d] += 1;
            }
        }
        if let Some((k, at)) = self.overlap {
            let k = usize::from(k) % n;
            let mut other = pieces[k].clone();
            let data = ethernet::HEADER_LEN + 20;
            let at = data + usize::from(at) % (other.len() - data).max(1);
            if let Some(b) = other.get_mut(at) {
                *b ^= 0x5a;
                // The same byte of the whole datagram: the piece's offset plus its place.
                let offset = usize::from(
                    Ipv4Packet::new_unchecked(&other[ethernet::HEADER_LEN..]).frag_offset(),
                );
                let mut altered = sent.clone();
                if let Some(b) = altered.get_mut(data + offset + (at - data)) {
                    *b ^= 0x5a;
                }
                wire.push(other);
                variants.push(altered);
                copies[k] += 1;
            }
        }
        Sent {
            wire,
            variants,
            fragmented: true,
            datagrams: copies.into_iter().min().unwrap_or(0),
        }
    }

    /// Whether the card must deliver it: a tenant's valid token, nothing lying, and it can only
    /// arrive as sent (no piece missing, no overlap; fragments not refused).
    fn clean(&self, fragmented: bool, policy: FragmentPolicy) -> bool {
        self.valid()
            && !(fragmented
                && (self.missing.is_some()
                    || self.overlap.is_some()
                    || policy == FragmentPolicy::Refuse))
    }
}

/// Writes a UDP length into an Ethernet + 20-byte IPv4 frame and fixes the UDP checksum over
/// the datagram that length delimits.
fn set_udp_length(f: &mut [u8], len: u16) {
    let udp = EthIpv4UdpRepr::HEADER_LEN - 8;
    f[udp + 4..udp + 6].copy_from_slice(&len.to_be_bytes());
    f[udp + 6..udp + 8].fill(0);
    let end = (udp + usize::from(len)).min(f.len());
    let ip = Ipv4Packet::new_unchecked(&f[ethernet::HEADER_LEN..]);
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let pseudo = fld_abi::wire::checksum::pseudo_header_v4(
        &src,
        &dst,
        fld_abi::wire::ip_proto::UDP,
        u32::from(len),
    );
    let c = fld_abi::wire::internet_checksum(&f[udp..end], pseudo);
    f[udp + 6..udp + 8].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
}

/// Splits an Ethernet + 20-byte IPv4 frame into fragments whose data sizes are `sizes` × 8
/// bytes, the last taking the rest (RFC 791 §3.2).
fn fragment(frame: &[u8], sizes: &[u8]) -> Vec<Vec<u8>> {
    let hdr = ethernet::HEADER_LEN + 20;
    let data = &frame[hdr..];
    let mut out = Vec::new();
    let mut at = 0usize;
    for &s in sizes {
        let len = usize::from(s.max(1)) * 8;
        if at + len >= data.len() {
            break;
        }
        out.push(piece(frame, at, &data[at..at + len], true));
        at += len;
    }
    out.push(piece(frame, at, &data[at..], false));
    out
}

fn piece(frame: &[u8], offset: usize, data: &[u8], more: bool) -> Vec<u8> {
    let hdr = ethernet::HEADER_LEN + 20;
    let mut p = [&frame[..hdr], data].concat();
    let mut ip = Ipv4Packet::new_unchecked(&mut p[ethernet::HEADER_LEN..]);
    ip.set_total_len((20 + data.len()) as u16);
    ip.set_frag(false, more, offset as u16);
    ip.fill_checksum();
    p
}

fn apply_lie(f: &mut Vec<u8>, lie: Lie) {
    let ip = ethernet::HEADER_LEN;
    match lie {
        Lie::UdpLengthPastPayload(extra) => {
            let payload = f.len() - ip - 20;
            let len = (payload + usize::from(extra.max(1))).min(0xffff) as u16;
            f[ip + 24..ip + 26].copy_from_slice(&len.to_be_bytes());
        }
        Lie::UdpLengthBelowHeader(len) => {
            f[ip + 24..ip + 26].copy_from_slice(&u16::from(len % 8).to_be_bytes());
        }
        Lie::IpLengthPastFrame(cut) => {
            let keep = f.len().saturating_sub(usize::from(cut.max(1))).max(ip + 20);
            f.truncate(keep);
        }
        Lie::IhlBelowFive(ihl) => {
            f[ip] = 0x40 | (ihl % 5);
        }
    }
}

/// Deterministic shuffle (xorshift), so a failing case replays exactly.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    seed |= 1;
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

impl Attack {
    /// The frames on the wire, in order, and what the host may and must receive.
    pub fn frames(&self) -> (Vec<Vec<u8>>, Expectation) {
        let mut wire = Vec::new();
        let mut exp = Expectation::default();
        for (i, r) in self.requests.iter().enumerate() {
            let sent = r.frames(0x1000 + i as u16);
            exp.requests.push(Expected {
                required: r.clean(sent.fragmented, self.fragments),
                variants: sent.variants,
                datagrams: sent.datagrams,
                delivered: 0,
            });
            wire.extend(sent.wire);
        }
        shuffle(&mut wire, self.order_seed);
        (wire, exp)
    }

    /// The replay configuration: the three tenants, the clock, the fragment policy.
    pub fn config(&self) -> ReplayConfig {
        ReplayConfig {
            accel: ReplayAccel::Iot,
            host_queues: 1,
            now_s: NOW,
            iot_fragments: self.fragments,
            tenants: TENANTS
                .iter()
                .map(|&(context, src, key)| ReplayTenant {
                    context,
                    src: src.into(),
                    key: key.to_vec(),
                    refuse_fragments: false,
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Plays the attack through the card and checks the invariant; `Err` says what broke it.
    pub fn run(&self) -> Result<(), String> {
        let mut card = Replayer::new(&self.config()).map_err(|e| e.to_string())?;
        self.run_on(&mut card)
    }

    /// As [`Attack::run`], on a card already brought up for this attack's [`Attack::config`]
    /// (one kept across attacks with the same fragment policy).
    pub fn run_on(&self, card: &mut Replayer) -> Result<(), String> {
        let (wire, exp) = self.frames();
        let out = card.run(wire).map_err(|e: ReplayError| e.to_string())?;
        let delivered: Vec<Vec<u8>> = out.delivered.into_iter().map(|(_, f)| f).collect();
        exp.check(&delivered)
    }
}

impl Expectation {
    /// Checks what the host received against the invariant.
    pub fn check(mut self, delivered: &[Vec<u8>]) -> Result<(), String> {
        for f in delivered {
            let request = service_request(f)?;
            if let Some(ServiceRequest { src, coap }) = request {
                authenticated(src, coap).map_err(|why| {
                    format!("a request without a valid token ({why}) reached the host: {f:02x?}")
                })?;
            }
            let Some(e) = self
                .requests
                .iter_mut()
                .find(|e| e.delivered < e.datagrams && e.variants.iter().any(|v| v == f))
            else {
                return Err(format!(
                    "the host received a frame nobody sent, or more often than it was sent: {f:02x?}"
                ));
            };
            e.delivered += 1;
        }
        let missing = self
            .requests
            .iter()
            .filter(|e| e.required && e.delivered == 0)
            .count();
        if missing > 0 {
            return Err(format!("{missing} valid requests were not delivered"));
        }
        Ok(())
    }
}

/// Reads a frame the host received as a host IP stack would: it must be a whole, consistent
/// IPv4 datagram (a fragment or an inconsistent header is already a breach). For UDP to the
/// service: the sender and the CoAP message (the UDP payload as the UDP length delimits it).
fn service_request(f: &[u8]) -> Result<Option<ServiceRequest<'_>>, String> {
    let bad = |why: &str| Err(format!("{why} reached the host: {f:02x?}"));
    let Some(ip) = f.get(ethernet::HEADER_LEN..) else {
        return bad("a runt");
    };
    let p = Ipv4Packet::new_unchecked(ip);
    if ip.len() < 20 || p.version() != 4 || p.header_len() != 20 {
        return bad("a frame whose IPv4 header is not the one sent");
    }
    if p.is_fragment() {
        return bad("a fragment");
    }
    if usize::from(p.total_len()) != ip.len() || !p.verify_checksum() {
        return bad("an inconsistent IPv4 datagram");
    }
    if p.next_header() != fld_abi::wire::ip_proto::UDP {
        return Ok(None);
    }
    let udp = &ip[20..];
    let len = udp
        .get(4..6)
        .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])));
    let Some(len) = len.filter(|l| (8..=udp.len()).contains(l)) else {
        return bad("an inconsistent UDP datagram");
    };
    if u16::from_be_bytes([udp[2], udp[3]]) != COAP_PORT {
        return Ok(None);
    }
    Ok(Some(ServiceRequest {
        src: p.src_addr(),
        coap: &udp[8..len],
    }))
}

/// A request to the service as the host received it: its sender and its CoAP message.
struct ServiceRequest<'a> {
    src: [u8; 4],
    coap: &'a [u8],
}

/// Verifies the request's token as the service would, independently of the accelerator's code:
/// HS256 (RFC 7515 §3, RFC 7518 §3.2) with the sender's tenant key, `exp` after [`NOW`].
fn authenticated(src: [u8; 4], coap: &[u8]) -> Result<(), &'static str> {
    use hmac::{Hmac, Mac};
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let key = TENANTS.iter().find(|t| t.1 == src).ok_or("no tenant")?.2;
    let msg = fld_abi::wire::coap::CoapMessage::new_checked(coap).map_err(|_| "not CoAP")?;
    let token = msg.payload().ok_or("no payload")?;
    let mut parts = token.split(|b| *b == b'.');
    let (Some(h), Some(c), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("not a JWS");
    };
    let header = b64.decode(h).map_err(|_| "header")?;
    let header: serde_json::Value = serde_json::from_slice(&header).map_err(|_| "header")?;
    if header["alg"] != "HS256" {
        return Err("alg");
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).map_err(|_| "key")?;
    mac.update(&token[..h.len() + 1 + c.len()]);
    mac.verify_slice(&b64.decode(sig).map_err(|_| "signature")?)
        .map_err(|_| "signature")?;
    let claims: serde_json::Value =
        serde_json::from_slice(&b64.decode(c).map_err(|_| "claims")?).map_err(|_| "claims")?;
    match claims["exp"].as_u64() {
        Some(exp) if exp > NOW => Ok(()),
        _ => Err("expired"),
    }
}
