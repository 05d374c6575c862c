//! IoT token authentication accelerator model (FlexDriver, ASPLOS'22, §7).
//!
//! A DDoS filter placed in front of an IoT back end.  Every request arrives as
//! a CoAP message (RFC 7252) in a UDP datagram, together with a *context ID*
//! that names the tenant the datagram belongs to (in the paper the NIC's flow
//! steering supplies it; here the caller passes it).  The filter
//!
//! 1. parses the CoAP message (RFC 7252 §3),
//! 2. takes the **payload** (the bytes after the `0xFF` payload marker) as the
//!    JSON Web Token (RFC 7519) in JWS compact serialization (RFC 7515 §7.1):
//!    `base64url(header) "." base64url(claims) "." base64url(signature)`,
//!    unpadded; no CoAP option is consulted for the token,
//! 3. rejects tokens longer than a configurable limit before decoding
//!    anything ([`DEFAULT_MAX_TOKEN`] bytes by default),
//! 4. looks up the tenant's HMAC key in a linear [`KeyTable`] indexed by the
//!    context ID,
//! 5. verifies the HS256 (HMAC-SHA256) signature in constant time and the
//!    optional `exp` / `nbf` claims against a caller-provided clock,
//!
//! and then passes the message on ([`Verdict::Pass`]) or drops it with a
//! reason ([`Verdict::Drop`]); every outcome is counted in [`Stats`].
//!
//! Robustness: no input makes these functions panic, and the CoAP parser does
//! not allocate at all.  JWT verification allocates only buffers bounded by
//! the token's own length (base64 decoding and JSON parsing of at most the
//! message's bytes), never a size read from a length field.
//!
//! Check order in [`IotFilter::check`] (the first failing check names the
//! reason): CoAP framing (`NotCoap`, `CoapFormat`, `NoPayload`), token size
//! (`TokenTooLong`), key lookup (`UnknownTenant`), then [`verify_jwt`]:
//! three parts (`NotJwt`), base64url of all three parts (`Base64`), header
//! JSON (`HeaderJson`), `alg` (`AlgNotAllowed`), signature (`BadSignature`),
//! claims JSON (`PayloadJson`), `exp` (`Expired`), `nbf` (`NotYetValid`).
//! The signature is checked before the claims are parsed, so an attacker
//! without the key never gets its claims JSON parsed.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Default limit on the token (CoAP payload) length, in bytes.
pub const DEFAULT_MAX_TOKEN: usize = 1024;

/// Number of distinct drop reasons (length of [`Stats::dropped`]).
pub const REASONS: usize = 13;

/// Context IDs are 16 bits wide, so a key table never needs more slots.
pub const MAX_SLOTS: usize = 1 << 16;

use fld_abi::wire::coap::{self, CoapError, CoapMessage, CoapRepr};
pub use fld_abi::wire::coap::{CODE_POST, OPT_URI_PATH};

/// Why a message was dropped.  The discriminant is the index into
/// [`Stats::dropped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Shorter than the 4-byte CoAP header, or version field is not 1.
    NotCoap = 0,
    /// CoAP message format error (RFC 7252 §3): TKL 9..15, truncated token,
    /// reserved option nibble 15, option running past the end, option number
    /// above 65535, payload marker followed by nothing, non-empty Empty message.
    CoapFormat = 1,
    /// Well-formed CoAP message without a payload (so without a token).
    NoPayload = 2,
    /// The payload is longer than the configured token limit.
    TokenTooLong = 3,
    /// The token is not three dot-separated parts.
    NotJwt = 4,
    /// A part is not unpadded, canonical base64url.
    Base64 = 5,
    /// The header is not a JSON object, or has a bad `typ` or any `crit`.
    HeaderJson = 6,
    /// `alg` is missing or anything but `"HS256"` (including `"none"`).
    AlgNotAllowed = 7,
    /// The claims are not a JSON object, or `exp`/`nbf` is not a number.
    PayloadJson = 8,
    /// The HMAC-SHA256 signature does not match the tenant's key.
    BadSignature = 9,
    /// `exp` is present and `now_s >= exp`.
    Expired = 10,
    /// `nbf` is present and `now_s < nbf`.
    NotYetValid = 11,
    /// No key is installed for the context ID (or it is out of range).
    UnknownTenant = 12,
}

impl Reason {
    /// Every reason, in index order.
    pub const ALL: [Reason; REASONS] = [
        Reason::NotCoap,
        Reason::CoapFormat,
        Reason::NoPayload,
        Reason::TokenTooLong,
        Reason::NotJwt,
        Reason::Base64,
        Reason::HeaderJson,
        Reason::AlgNotAllowed,
        Reason::PayloadJson,
        Reason::BadSignature,
        Reason::Expired,
        Reason::NotYetValid,
        Reason::UnknownTenant,
    ];

    /// Index of this reason in [`Stats::dropped`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Short stable name, e.g. for reports.
    pub fn name(self) -> &'static str {
        match self {
            Reason::NotCoap => "not_coap",
            Reason::CoapFormat => "coap_format",
            Reason::NoPayload => "no_payload",
            Reason::TokenTooLong => "token_too_long",
            Reason::NotJwt => "not_jwt",
            Reason::Base64 => "base64",
            Reason::HeaderJson => "header_json",
            Reason::AlgNotAllowed => "alg_not_allowed",
            Reason::PayloadJson => "payload_json",
            Reason::BadSignature => "bad_signature",
            Reason::Expired => "expired",
            Reason::NotYetValid => "not_yet_valid",
            Reason::UnknownTenant => "unknown_tenant",
        }
    }
}

/// The filter's decision for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward the message to the host.
    Pass,
    /// Drop the message, for this reason.
    Drop(Reason),
}

/// Per-outcome counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages passed on.
    pub passed: u64,
    /// Messages dropped, indexed by [`Reason::index`].
    pub dropped: [u64; REASONS],
}

impl Stats {
    /// Drops counted for one reason.
    pub fn dropped_for(&self, reason: Reason) -> u64 {
        self.dropped[reason.index()]
    }

    /// All drops, whatever the reason.
    pub fn total_dropped(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// Passed plus dropped.
    pub fn total(&self) -> u64 {
        self.passed + self.total_dropped()
    }

    fn record(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Pass => self.passed += 1,
            Verdict::Drop(r) => self.dropped[r.index()] += 1,
        }
    }
}

/// Tenant keys, a linear table indexed by context ID.
#[derive(Clone, Default)]
pub struct KeyTable {
    slots: Vec<Option<Vec<u8>>>,
}

impl std::fmt::Debug for KeyTable {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyTable")
            .field("slots", &self.slots.len())
            .field("installed", &self.installed())
            .finish()
    }
}

impl KeyTable {
    /// A table for context IDs `0..slots`, all empty.  `slots` is capped at
    /// [`MAX_SLOTS`] since context IDs are 16-bit.
    pub fn new(slots: usize) -> Self {
        KeyTable {
            slots: vec![None; slots.min(MAX_SLOTS)],
        }
    }

    /// Number of slots (context IDs `0..len()`).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table has no slots at all.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Number of slots holding a key.
    pub fn installed(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Installs (or replaces) the key of `context`.  Returns false, changing
    /// nothing, if `context` is out of range or `key` is empty.
    pub fn set(&mut self, context: u16, key: &[u8]) -> bool {
        if key.is_empty() {
            return false;
        }
        match self.slots.get_mut(usize::from(context)) {
            Some(slot) => {
                *slot = Some(key.to_vec());
                true
            }
            None => false,
        }
    }

    /// Removes the key of `context` (no-op if out of range or empty).
    pub fn clear(&mut self, context: u16) {
        if let Some(slot) = self.slots.get_mut(usize::from(context)) {
            *slot = None;
        }
    }

    /// The key of `context`, if one is installed.
    pub fn get(&self, context: u16) -> Option<&[u8]> {
        self.slots
            .get(usize::from(context))
            .and_then(|s| s.as_deref())
    }
}

/// A parsed CoAP message, borrowing from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoapView<'a> {
    /// Message type: 0 CON, 1 NON, 2 ACK, 3 RST.
    pub mtype: u8,
    /// Code byte, class in the top 3 bits, detail in the low 5 (0x02 = 0.02 POST).
    pub code: u8,
    /// Message ID.
    pub message_id: u16,
    /// Token (0..=8 bytes).
    pub token: &'a [u8],
    /// Raw options area (between the token and the payload marker).
    pub options: &'a [u8],
    /// Payload (non-empty; the JWT).
    pub payload: &'a [u8],
}

/// Parses a CoAP message (RFC 7252 §3, through [`fld_abi::wire::coap`]). The payload must be
/// present and non-empty; a message that ends after its options is `NoPayload`.
/// Never allocates and never panics.
pub fn parse_coap(msg: &[u8]) -> Result<CoapView<'_>, Reason> {
    let m = CoapMessage::new_checked(msg).map_err(|e| match e {
        CoapError::NotCoap => Reason::NotCoap,
        CoapError::Format => Reason::CoapFormat,
    })?;
    let (token, options, payload) = m.split();
    Ok(CoapView {
        mtype: m.message_type(),
        code: m.code(),
        message_id: m.message_id(),
        token,
        options,
        payload: payload.ok_or(Reason::NoPayload)?,
    })
}

fn mac_for(key: &[u8]) -> Option<HmacSha256> {
    // HMAC accepts keys of any length, so this never fails in practice.
    <HmacSha256 as Mac>::new_from_slice(key).ok()
}

/// Whether `now < t` for a JSON NumericDate `t` (integer or not), exactly.
/// `None` if `t` is not a number.
fn now_before(now: u64, t: &Value) -> Option<bool> {
    let n = match t {
        Value::Number(n) => n,
        _ => return None,
    };
    if let Some(u) = n.as_u64() {
        return Some(now < u);
    }
    if n.as_i64().is_some() {
        // A negative integer: every u64 `now` is at or after it.
        return Some(false);
    }
    let f = n.as_f64()?;
    if !f.is_finite() {
        return None;
    }
    // For integer `now`: now < f  <=>  now < ceil(f).
    let c = f.ceil();
    if c <= 0.0 {
        Some(false)
    } else if c >= 18_446_744_073_709_551_616.0 {
        Some(true)
    } else {
        // `c` is integral and in (0, 2^64): the cast is exact.
        Some(now < c as u64)
    }
}

fn b64(part: &[u8]) -> Result<Vec<u8>, Reason> {
    URL_SAFE_NO_PAD.decode(part).map_err(|_| Reason::Base64)
}

/// Verifies an HS256 JWT in JWS compact serialization with `key`, checking
/// `exp` and `nbf` (if present) against `now_s` (seconds since the epoch).
///
/// Header rules: a JSON object with `"alg":"HS256"` (anything else, including
/// `"none"` or a missing `alg`, is `AlgNotAllowed`); `typ`, if present, must be
/// the string `"JWT"` (ASCII case-insensitive, RFC 7515 §4.1.9), and `crit`
/// must be absent (no extension is understood), else `HeaderJson`.
/// Claims: a JSON object; `exp`/`nbf` if present must be numbers
/// (`PayloadJson` otherwise); valid while `nbf <= now_s < exp`.  No leeway.
pub fn verify_jwt(token: &[u8], key: &[u8], now_s: u64) -> Result<(), Reason> {
    let mut parts = token.splitn(4, |&b| b == b'.');
    let (Some(h64), Some(p64), Some(s64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Reason::NotJwt);
    };

    let header = b64(h64)?;
    let claims = b64(p64)?;
    let sig = b64(s64)?;

    let header: Value = serde_json::from_slice(&header).map_err(|_| Reason::HeaderJson)?;
    let Value::Object(header) = header else {
        return Err(Reason::HeaderJson);
    };
    match header.get("typ") {
        None => {}
        Some(Value::String(t)) if t.eq_ignore_ascii_case("JWT") => {}
        Some(_) => return Err(Reason::HeaderJson),
    }
    if header.contains_key("crit") {
        return Err(Reason::HeaderJson);
    }
    match header.get("alg") {
        Some(Value::String(a)) if a == "HS256" => {}
        _ => return Err(Reason::AlgNotAllowed),
    }

    // The signing input is the token up to (not including) the second dot.
    let signing_input = &token[..h64.len() + 1 + p64.len()];
    let mut mac = mac_for(key).ok_or(Reason::BadSignature)?;
    mac.update(signing_input);
    mac.verify_slice(&sig).map_err(|_| Reason::BadSignature)?;

    let claims: Value = serde_json::from_slice(&claims).map_err(|_| Reason::PayloadJson)?;
    let Value::Object(claims) = claims else {
        return Err(Reason::PayloadJson);
    };
    if let Some(exp) = claims.get("exp") {
        match now_before(now_s, exp) {
            None => return Err(Reason::PayloadJson),
            Some(false) => return Err(Reason::Expired),
            Some(true) => {}
        }
    }
    if let Some(nbf) = claims.get("nbf") {
        match now_before(now_s, nbf) {
            None => return Err(Reason::PayloadJson),
            Some(true) => return Err(Reason::NotYetValid),
            Some(false) => {}
        }
    }
    Ok(())
}

/// The accelerator: key table, counters and token limit.
#[derive(Debug, Clone)]
pub struct IotFilter {
    keys: KeyTable,
    stats: Stats,
    max_token: usize,
}

impl IotFilter {
    /// A filter with the default token limit ([`DEFAULT_MAX_TOKEN`]).
    pub fn new(keys: KeyTable) -> Self {
        IotFilter {
            keys,
            stats: Stats::default(),
            max_token: DEFAULT_MAX_TOKEN,
        }
    }

    /// Sets the token length limit, in bytes.
    pub fn with_max_token(mut self, max_token: usize) -> Self {
        self.max_token = max_token;
        self
    }

    /// The token length limit, in bytes.
    pub fn max_token(&self) -> usize {
        self.max_token
    }

    /// Decides on one CoAP message of tenant `context` at time `now_s`, and
    /// counts the outcome.
    pub fn check(&mut self, context: u16, coap: &[u8], now_s: u64) -> Verdict {
        let verdict = match self.decide(context, coap, now_s) {
            Ok(()) => Verdict::Pass,
            Err(r) => Verdict::Drop(r),
        };
        self.stats.record(verdict);
        verdict
    }

    fn decide(&self, context: u16, coap: &[u8], now_s: u64) -> Result<(), Reason> {
        let view = parse_coap(coap)?;
        if view.payload.len() > self.max_token {
            return Err(Reason::TokenTooLong);
        }
        let key = self.keys.get(context).ok_or(Reason::UnknownTenant)?;
        verify_jwt(view.payload, key, now_s)
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
    }

    /// The key table.
    pub fn keys(&self) -> &KeyTable {
        &self.keys
    }

    /// The key table, for installing or revoking tenant keys.
    pub fn keys_mut(&mut self) -> &mut KeyTable {
        &mut self.keys
    }
}

/// Helper for tests and clients: builds an HS256 JWT from a JSON claims
/// string.  The header is `{"alg":"HS256","typ":"JWT"}`; the claims bytes are
/// encoded as given (not re-serialized), so callers may also build invalid
/// claims on purpose.  An empty key gives a token no [`KeyTable`] accepts.
pub fn sign_hs256(key: &[u8], claims_json: &str) -> String {
    let mut out = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    out.push('.');
    out.push_str(&URL_SAFE_NO_PAD.encode(claims_json.as_bytes()));
    let mut mac = mac_for(key).expect("HMAC accepts keys of any length");
    mac.update(out.as_bytes());
    let tag = mac.finalize().into_bytes();
    out.push('.');
    out.push_str(&URL_SAFE_NO_PAD.encode(tag));
    out
}

/// Helper: builds a CoAP confirmable POST (version 1, type CON, code 0.02)
/// with the given token, one Uri-Path option per non-empty `/`-separated
/// segment of `uri_path`, and the payload (marker omitted when the payload
/// is empty, as RFC 7252 requires).
///
/// # Panics
/// If `token` is longer than 8 bytes or a path segment is longer than
/// 65804 bytes (neither is encodable in CoAP).
pub fn coap_message(message_id: u16, token: &[u8], uri_path: &str, payload: &[u8]) -> Vec<u8> {
    let options: Vec<(u16, &[u8])> = uri_path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|seg| (OPT_URI_PATH, seg.as_bytes()))
        .collect();
    let repr = CoapRepr {
        message_type: coap::TYPE_CON,
        code: CODE_POST,
        message_id,
        token,
        options: &options,
        payload,
    };
    let mut out = vec![0u8; repr.buffer_len()];
    let n = repr
        .emit(&mut out)
        .expect("CoAP tokens are at most 8 bytes and option values at most 65804");
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY_A: &[u8] = b"tenant-A secret key, 32 bytes!!!";
    const KEY_B: &[u8] = b"tenant-B has another secret key.";
    const NOW: u64 = 1_700_000_000;

    /// RFC 7515 Appendix A.1 (also RFC 7519 §3.1): the JWS and its JWK `k`.
    const RFC_JWT: &str = concat!(
        "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9",
        ".",
        "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFt",
        "cGxlLmNvbS9pc19yb290Ijp0cnVlfQ",
        ".",
        "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    );
    const RFC_K: &str =
        "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow";
    const RFC_EXP: u64 = 1_300_819_380;

    fn rfc_key() -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(RFC_K).unwrap()
    }

    fn filter() -> IotFilter {
        let mut keys = KeyTable::new(16);
        assert!(keys.set(1, KEY_A));
        assert!(keys.set(2, KEY_B));
        IotFilter::new(keys)
    }

    fn msg(token: &str) -> Vec<u8> {
        coap_message(0x1234, &[0xAB, 0xCD], "/sensors/temp", token.as_bytes())
    }

    /// A token with arbitrary header and claims JSON, signed with `key`.
    fn forge(key: &[u8], header: &str, claims: &str) -> String {
        let mut t = URL_SAFE_NO_PAD.encode(header);
        t.push('.');
        t.push_str(&URL_SAFE_NO_PAD.encode(claims));
        let mut mac = HmacSha256::new_from_slice(key).unwrap();
        mac.update(t.as_bytes());
        t.push('.');
        t.push_str(&URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()));
        t
    }

    fn valid_token(key: &[u8]) -> String {
        sign_hs256(key, &format!(r#"{{"sub":"dev-7","exp":{}}}"#, NOW + 600))
    }

    // ---------------------------------------------------------------- RFC vector

    #[test]
    fn rfc7515_a1_vector_verifies() {
        let key = rfc_key();
        assert_eq!(key.len(), 64);
        assert_eq!(verify_jwt(RFC_JWT.as_bytes(), &key, RFC_EXP - 1), Ok(()));
        assert_eq!(verify_jwt(RFC_JWT.as_bytes(), &key, 0), Ok(()));
        assert_eq!(
            verify_jwt(RFC_JWT.as_bytes(), &key, RFC_EXP),
            Err(Reason::Expired)
        );
        // Through the whole filter, carried in a CoAP payload.
        let mut keys = KeyTable::new(4);
        assert!(keys.set(3, &key));
        let mut f = IotFilter::new(keys);
        let m = msg(RFC_JWT);
        assert_eq!(f.check(3, &m, RFC_EXP - 1), Verdict::Pass);
        assert_eq!(f.check(3, &m, RFC_EXP + 1), Verdict::Drop(Reason::Expired));
        assert_eq!(
            f.check(0, &m, RFC_EXP - 1),
            Verdict::Drop(Reason::UnknownTenant)
        );
    }

    #[test]
    fn rfc7515_a1_tampered_or_wrong_key() {
        let key = rfc_key();
        // Flip one character of each part (keeping base64 valid).
        for idx in [3usize, 60, RFC_JWT.len() - 5] {
            let mut t = RFC_JWT.as_bytes().to_vec();
            t[idx] = if t[idx] == b'A' { b'B' } else { b'A' };
            assert_eq!(
                verify_jwt(&t, &key, 0),
                Err(Reason::BadSignature),
                "index {idx}"
            );
        }
        assert_eq!(
            verify_jwt(RFC_JWT.as_bytes(), KEY_A, 0),
            Err(Reason::BadSignature)
        );
    }

    // ------------------------------------------------------------- sign/verify

    #[test]
    fn sign_roundtrip_and_header_shape() {
        let t = sign_hs256(KEY_A, r#"{"sub":"x"}"#);
        assert_eq!(t.split('.').count(), 3);
        assert!(!t.contains('='));
        let h = URL_SAFE_NO_PAD
            .decode(t.split('.').next().unwrap())
            .unwrap();
        assert_eq!(h, br#"{"alg":"HS256","typ":"JWT"}"#);
        assert_eq!(verify_jwt(t.as_bytes(), KEY_A, NOW), Ok(()));
        assert_eq!(
            verify_jwt(t.as_bytes(), KEY_B, NOW),
            Err(Reason::BadSignature)
        );
    }

    #[test]
    fn valid_tokens_per_tenant_pass() {
        let mut f = filter();
        assert_eq!(f.check(1, &msg(&valid_token(KEY_A)), NOW), Verdict::Pass);
        assert_eq!(f.check(2, &msg(&valid_token(KEY_B)), NOW), Verdict::Pass);
        // No exp at all is fine too.
        assert_eq!(
            f.check(1, &msg(&sign_hs256(KEY_A, r#"{"sub":"x"}"#)), NOW),
            Verdict::Pass
        );
        assert_eq!(f.stats().passed, 3);
        assert_eq!(f.stats().total_dropped(), 0);
    }

    #[test]
    fn cross_tenant_key_misuse_rejected() {
        let mut f = filter();
        assert_eq!(
            f.check(2, &msg(&valid_token(KEY_A)), NOW),
            Verdict::Drop(Reason::BadSignature)
        );
        assert_eq!(
            f.check(1, &msg(&valid_token(KEY_B)), NOW),
            Verdict::Drop(Reason::BadSignature)
        );
        assert_eq!(f.stats().dropped_for(Reason::BadSignature), 2);
    }

    #[test]
    fn unknown_tenant_and_key_management() {
        let mut f = filter();
        let m = msg(&valid_token(KEY_A));
        // In range but empty, out of range, and after revocation.
        assert_eq!(f.check(0, &m, NOW), Verdict::Drop(Reason::UnknownTenant));
        assert_eq!(f.check(999, &m, NOW), Verdict::Drop(Reason::UnknownTenant));
        f.keys_mut().clear(1);
        assert_eq!(f.check(1, &m, NOW), Verdict::Drop(Reason::UnknownTenant));
        assert!(f.keys_mut().set(1, KEY_A));
        assert_eq!(f.check(1, &m, NOW), Verdict::Pass);
        assert_eq!(f.stats().dropped_for(Reason::UnknownTenant), 3);

        let mut k = KeyTable::new(4);
        assert!(!k.set(4, KEY_A), "out of range");
        assert!(!k.set(0, b""), "empty key refused");
        assert!(k.set(0, KEY_A));
        assert_eq!(k.get(0), Some(KEY_A));
        assert_eq!(k.installed(), 1);
        k.clear(0);
        k.clear(60000); // out of range: no-op, no panic
        assert_eq!(k.get(0), None);
        assert_eq!(KeyTable::new(1 << 20).len(), MAX_SLOTS);
        assert!(!format!("{k:?}").contains("tenant"));
    }

    #[test]
    fn expiry_and_not_before() {
        let claims = |c: &str| sign_hs256(KEY_A, c);
        let v = |c: &str, now| verify_jwt(claims(c).as_bytes(), KEY_A, now);
        assert_eq!(v(r#"{"exp":100}"#, 99), Ok(()));
        assert_eq!(v(r#"{"exp":100}"#, 100), Err(Reason::Expired));
        assert_eq!(v(r#"{"exp":100}"#, 101), Err(Reason::Expired));
        assert_eq!(v(r#"{"exp":-5}"#, 0), Err(Reason::Expired));
        assert_eq!(v(r#"{"exp":100.5}"#, 100), Ok(()));
        assert_eq!(v(r#"{"exp":100.5}"#, 101), Err(Reason::Expired));
        assert_eq!(v(r#"{"exp":1e30}"#, u64::MAX), Ok(()));
        assert_eq!(v(r#"{"exp":"100"}"#, 0), Err(Reason::PayloadJson));
        assert_eq!(v(r#"{"exp":null}"#, 0), Err(Reason::PayloadJson));
        assert_eq!(v(r#"{"nbf":100}"#, 99), Err(Reason::NotYetValid));
        assert_eq!(v(r#"{"nbf":100}"#, 100), Ok(()));
        assert_eq!(v(r#"{"nbf":99.5}"#, 99), Err(Reason::NotYetValid));
        assert_eq!(v(r#"{"nbf":-1}"#, 0), Ok(()));
        assert_eq!(v(r#"{"nbf":true}"#, 0), Err(Reason::PayloadJson));
        assert_eq!(v(r#"{"nbf":100,"exp":200}"#, 150), Ok(()));
        assert_eq!(v(r#"{"nbf":100,"exp":200}"#, 250), Err(Reason::Expired));
        assert_eq!(v(r#"{"nbf":100,"exp":200}"#, 50), Err(Reason::NotYetValid));

        let mut f = filter();
        let m = msg(&valid_token(KEY_A));
        assert_eq!(f.check(1, &m, NOW + 599), Verdict::Pass);
        assert_eq!(f.check(1, &m, NOW + 600), Verdict::Drop(Reason::Expired));
        let early = msg(&claims(&format!(r#"{{"nbf":{}}}"#, NOW + 10)));
        assert_eq!(f.check(1, &early, NOW), Verdict::Drop(Reason::NotYetValid));
        assert_eq!(f.check(1, &early, NOW + 10), Verdict::Pass);
    }

    #[test]
    fn alg_rules() {
        let c = r#"{"sub":"x"}"#;
        // alg "none" with an empty signature (the classic bypass).
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(c)
        );
        assert_eq!(
            verify_jwt(none.as_bytes(), KEY_A, NOW),
            Err(Reason::AlgNotAllowed)
        );
        for h in [
            r#"{"alg":"none"}"#,
            r#"{"alg":"HS512","typ":"JWT"}"#,
            r#"{"alg":"hs256"}"#,
            r#"{"alg":"RS256"}"#,
            r#"{"alg":["HS256"]}"#,
            r#"{"typ":"JWT"}"#,
        ] {
            // Correctly MACed with the tenant key: alg is still refused.
            let t = forge(KEY_A, h, c);
            assert_eq!(
                verify_jwt(t.as_bytes(), KEY_A, NOW),
                Err(Reason::AlgNotAllowed),
                "{h}"
            );
        }
        assert_eq!(
            verify_jwt(forge(KEY_A, r#"{"alg":"HS256"}"#, c).as_bytes(), KEY_A, NOW),
            Ok(())
        );
        assert_eq!(
            verify_jwt(
                forge(KEY_A, r#"{"typ":"jwt","alg":"HS256"}"#, c).as_bytes(),
                KEY_A,
                NOW
            ),
            Ok(())
        );
    }

    #[test]
    fn header_rules() {
        let c = r#"{"sub":"x"}"#;
        for h in [
            "not json",
            "",
            r#"["alg","HS256"]"#,
            r#""HS256""#,
            r#"{"alg":"HS256""#,
            r#"{"alg":"HS256","typ":"JOSE+JSON"}"#,
            r#"{"alg":"HS256","typ":1}"#,
            r#"{"alg":"HS256","crit":["exp"],"exp":1}"#,
        ] {
            let t = forge(KEY_A, h, c);
            assert_eq!(
                verify_jwt(t.as_bytes(), KEY_A, NOW),
                Err(Reason::HeaderJson),
                "{h}"
            );
        }
        // Deeply nested JSON is refused by serde_json's recursion limit, no overflow.
        let deep = "[".repeat(5000);
        let t = forge(KEY_A, &deep, c);
        assert_eq!(
            verify_jwt(t.as_bytes(), KEY_A, NOW),
            Err(Reason::HeaderJson)
        );
    }

    #[test]
    fn payload_rules() {
        for c in [
            "not json",
            "",
            "[1,2]",
            "42",
            r#"{"exp":1"#,
            "{\"a\":\"\u{7f}\"}x",
        ] {
            let t = sign_hs256(KEY_A, c);
            assert_eq!(
                verify_jwt(t.as_bytes(), KEY_A, NOW),
                Err(Reason::PayloadJson),
                "{c}"
            );
        }
        // Invalid UTF-8 in the claims.
        let t = forge(KEY_A, r#"{"alg":"HS256"}"#, "{}");
        let p = URL_SAFE_NO_PAD.encode([b'{', b'"', 0xFF, b'"', b':', b'1', b'}']);
        let parts: Vec<&str> = t.split('.').collect();
        let unsigned = format!("{}.{}", parts[0], p);
        let mut mac = HmacSha256::new_from_slice(KEY_A).unwrap();
        mac.update(unsigned.as_bytes());
        let t = format!(
            "{unsigned}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(
            verify_jwt(t.as_bytes(), KEY_A, NOW),
            Err(Reason::PayloadJson)
        );
        // Garbage claims with a wrong signature are rejected before parsing.
        let bad = sign_hs256(KEY_B, "not json");
        assert_eq!(
            verify_jwt(bad.as_bytes(), KEY_A, NOW),
            Err(Reason::BadSignature)
        );
    }

    #[test]
    fn structure_and_base64_rules() {
        let good = valid_token(KEY_A);
        let parts: Vec<&str> = good.split('.').collect();
        let v = |t: &str| verify_jwt(t.as_bytes(), KEY_A, NOW);
        assert_eq!(v(&good), Ok(()));
        // Part counts.
        assert_eq!(
            v(&format!("{}.{}", parts[0], parts[1])),
            Err(Reason::NotJwt)
        );
        assert_eq!(v(&format!("{good}.{}", parts[2])), Err(Reason::NotJwt));
        assert_eq!(v(&format!("{good}.")), Err(Reason::NotJwt));
        assert_eq!(v("nodots"), Err(Reason::NotJwt));
        assert_eq!(v(""), Err(Reason::NotJwt));
        // Garbage base64 in each part.
        for i in 0..3 {
            let mut p = parts.clone();
            let garbage = format!("{}*!", p[i]);
            p[i] = &garbage;
            assert_eq!(v(&p.join(".")), Err(Reason::Base64), "part {i}");
        }
        // Standard (non-url) alphabet, padding, impossible length.
        assert_eq!(
            v(&format!("{}.{}.ab+/cd", parts[0], parts[1])),
            Err(Reason::Base64)
        );
        assert_eq!(
            v(&format!("{}=.{}.{}", parts[0], parts[1], parts[2])),
            Err(Reason::Base64)
        );
        assert_eq!(
            v(&format!("{}.{}.abcde", parts[0], parts[1])),
            Err(Reason::Base64)
        );
        // Non-canonical trailing bits in the signature ("...Xk" -> "...Xl").
        let key = rfc_key();
        let mut t = RFC_JWT.as_bytes().to_vec();
        *t.last_mut().unwrap() = b'l';
        assert_eq!(verify_jwt(&t, &key, 0), Err(Reason::Base64));
        // Wrong signature lengths.
        assert_eq!(
            v(&format!("{}.{}.", parts[0], parts[1])),
            Err(Reason::BadSignature)
        );
        assert_eq!(
            v(&format!("{}.{}.AAAA", parts[0], parts[1])),
            Err(Reason::BadSignature)
        );
        let long_sig = format!("{}AAAA", parts[2]);
        assert_eq!(
            v(&format!("{}.{}.{long_sig}", parts[0], parts[1])),
            Err(Reason::BadSignature)
        );
        // Non-ASCII bytes.
        assert_eq!(
            verify_jwt(b"\xff\xfe.\x00.\x80", KEY_A, NOW),
            Err(Reason::Base64)
        );
    }

    #[test]
    fn token_size_limit() {
        let mut f = filter();
        let pad = "x".repeat(1500);
        let big = sign_hs256(KEY_A, &format!(r#"{{"pad":"{pad}"}}"#));
        assert!(big.len() > DEFAULT_MAX_TOKEN);
        assert_eq!(
            f.check(1, &msg(&big), NOW),
            Verdict::Drop(Reason::TokenTooLong)
        );
        // Limit checked before the key lookup and before any decoding.
        assert_eq!(
            f.check(9, &msg(&"*".repeat(5000)), NOW),
            Verdict::Drop(Reason::TokenTooLong)
        );
        // Exactly at the limit is allowed (then judged on its merits).
        let at = "a".repeat(DEFAULT_MAX_TOKEN);
        assert_eq!(f.check(1, &msg(&at), NOW), Verdict::Drop(Reason::NotJwt));
        // A huge datagram (64 KiB payload).
        let huge = msg(&"A.B.C".repeat(13_000));
        assert_eq!(f.check(1, &huge, NOW), Verdict::Drop(Reason::TokenTooLong));
        assert_eq!(f.stats().dropped_for(Reason::TokenTooLong), 3);
        // Raising the limit lets the big token through.
        let mut f = filter().with_max_token(4096);
        assert_eq!(f.max_token(), 4096);
        assert_eq!(f.check(1, &msg(&big), NOW), Verdict::Pass);
    }

    // -------------------------------------------------------------------- CoAP

    #[test]
    fn coap_roundtrip_of_helper() {
        let m = coap_message(0xBEEF, &[1, 2, 3, 4, 5, 6, 7, 8], "/a/b", b"payload");
        assert_eq!(&m[..4], &[0x48, 0x02, 0xBE, 0xEF]);
        let v = parse_coap(&m).unwrap();
        assert_eq!(v.mtype, 0);
        assert_eq!(v.code, CODE_POST);
        assert_eq!(v.message_id, 0xBEEF);
        assert_eq!(v.token, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(v.options, &[0xB1, b'a', 0x01, b'b']);
        assert_eq!(v.payload, b"payload");
        // Extended option lengths (13 and 14 forms) in the helper and parser.
        let s13 = "s".repeat(20);
        let s14 = "t".repeat(300);
        let m = coap_message(7, &[], &format!("{s13}/{s14}"), b"p");
        assert_eq!(m[4], 0xBD);
        assert_eq!(m[5], 20 - 13);
        let v = parse_coap(&m).unwrap();
        assert_eq!(v.token, b"");
        assert_eq!(v.payload, b"p");
        assert_eq!(v.options.len(), 2 + 20 + 3 + 300);
        // Extended delta forms: options 1000 (14) then 1020 (13).
        let mut m = vec![0x50, 0x01, 0, 1];
        m.extend_from_slice(&[0xE0, 0x02, 0xDB]); // delta 269+731 = 1000, len 0
        m.extend_from_slice(&[0xD1, 7, b'z']); // delta 13+7 = 20, len 1
        m.extend_from_slice(&[0xFF, b'x']);
        let v = parse_coap(&m).unwrap();
        assert_eq!(v.mtype, 1);
        assert_eq!(v.payload, b"x");
    }

    #[test]
    fn coap_format_errors() {
        let good = coap_message(1, &[9], "/p", b"tok");
        assert!(parse_coap(&good).is_ok());
        let cases: Vec<(Vec<u8>, Reason)> = vec![
            (vec![], Reason::NotCoap),
            (vec![0x40, 0x02, 0x00], Reason::NotCoap),
            (vec![0x80, 0x02, 0, 1, 0xFF, b'x'], Reason::NotCoap), // version 2
            (vec![0x00, 0x02, 0, 1, 0xFF, b'x'], Reason::NotCoap), // version 0
            (vec![0xC0, 0x02, 0, 1, 0xFF, b'x'], Reason::NotCoap), // version 3
            (
                vec![0x49, 0x02, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xFF, b'x'],
                Reason::CoapFormat,
            ), // TKL 9
            (vec![0x4F, 0x02, 0, 1], Reason::CoapFormat),          // TKL 15
            (vec![0x44, 0x02, 0, 1, 1, 2], Reason::CoapFormat),    // token truncated
            (vec![0x40, 0x02, 0, 1, 0xF0, 0xFF, b'x'], Reason::CoapFormat), // delta 15, not marker
            (
                vec![0x40, 0x02, 0, 1, 0xF1, b'a', 0xFF, b'x'],
                Reason::CoapFormat,
            ),
            (vec![0x40, 0x02, 0, 1, 0x1F, 0xFF, b'x'], Reason::CoapFormat), // length 15
            (vec![0x40, 0x02, 0, 1, 0xD0], Reason::CoapFormat), // ext delta byte missing
            (vec![0x40, 0x02, 0, 1, 0xE0, 0x01], Reason::CoapFormat), // ext delta half missing
            (vec![0x40, 0x02, 0, 1, 0x1D], Reason::CoapFormat), // ext length byte missing
            (vec![0x40, 0x02, 0, 1, 0x1E, 0x00], Reason::CoapFormat), // ext length half missing
            (
                vec![0x40, 0x02, 0, 1, 0x1D, 0x05, b'a', b'b'],
                Reason::CoapFormat,
            ), // 18 > 2 left
            (
                vec![0x40, 0x02, 0, 1, 0x1E, 0xFF, 0xFF, 0xFF, b'x'],
                Reason::CoapFormat,
            ), // 65804
            (vec![0x40, 0x02, 0, 1, 0x13, b'a'], Reason::CoapFormat), // value past end
            (vec![0x40, 0x02, 0, 1, 0xFF], Reason::CoapFormat), // marker, empty payload
            (vec![0x41, 0x02, 0, 1, 7, 0xFF], Reason::CoapFormat),
            // Option numbers summing past 65535.
            (
                vec![
                    0x40, 0x02, 0, 1, 0xE0, 0xFE, 0xF3, 0xE0, 0x00, 0x01, 0xFF, b'x',
                ],
                Reason::CoapFormat,
            ),
            (vec![0x40, 0x00, 0, 1, 0xFF, b'x'], Reason::CoapFormat), // Empty msg with bytes
            (vec![0x41, 0x00, 0, 1, 7], Reason::CoapFormat),          // Empty msg with token
            (vec![0x40, 0x00, 0, 1], Reason::NoPayload),              // Empty message
            (vec![0x40, 0x02, 0, 1], Reason::NoPayload),              // header only
            (vec![0x42, 0x01, 0, 1, 5, 6], Reason::NoPayload),        // token, no options
            (coap_message(5, &[1], "/a/b", b""), Reason::NoPayload),  // options, no payload
        ];
        for (i, (m, want)) in cases.iter().enumerate() {
            assert_eq!(parse_coap(m), Err(*want), "case {i}: {m:02x?}");
        }
        // The same through the filter, counted per reason.
        let mut f = filter();
        for (m, want) in &cases {
            assert_eq!(f.check(1, m, NOW), Verdict::Drop(*want));
        }
        let count = |r| cases.iter().filter(|(_, w)| *w == r).count() as u64;
        for r in [Reason::NotCoap, Reason::CoapFormat, Reason::NoPayload] {
            assert_eq!(f.stats().dropped_for(r), count(r), "{r:?}");
        }
        assert_eq!(f.stats().total(), cases.len() as u64);
        assert_eq!(f.stats().passed, 0);
        // Highest legal option number (65535) is fine.
        let m = vec![0x40, 0x02, 0, 1, 0xE0, 0xFE, 0xF2, 0xFF, b'x'];
        assert_eq!(parse_coap(&m).map(|v| v.payload), Ok(&b"x"[..]));
    }

    // ------------------------------------------------------------ counting

    #[test]
    fn stats_count_every_reason() {
        let mut f = filter();
        let c = r#"{"sub":"x"}"#;
        let good = valid_token(KEY_A);
        let parts: Vec<String> = good.split('.').map(str::to_owned).collect();
        let mut inputs: Vec<(u16, Vec<u8>, Verdict)> = Vec::new();
        let mut add = |ctx: u16, m: Vec<u8>, v: Verdict| inputs.push((ctx, m, v));
        use Reason::*;
        let d = Verdict::Drop;
        for _ in 0..3 {
            add(1, msg(&good), Verdict::Pass);
        }
        add(2, msg(&valid_token(KEY_B)), Verdict::Pass);
        add(1, vec![0x80, 2, 0, 0, 0xFF, b'x'], d(NotCoap));
        add(1, vec![1, 2], d(NotCoap));
        add(1, vec![0x49, 2, 0, 0], d(CoapFormat));
        add(1, vec![0x40, 2, 0, 0, 0xFF], d(CoapFormat));
        add(1, vec![0x40, 2, 0, 0, 0xF0], d(CoapFormat));
        add(1, coap_message(1, &[], "/x", b""), d(NoPayload));
        add(1, msg(&"Q".repeat(2000)), d(TokenTooLong));
        add(1, msg("a.b"), d(NotJwt));
        add(1, msg("a.b.c.d"), d(NotJwt));
        add(1, msg(&format!("%%.{}.{}", parts[1], parts[2])), d(Base64));
        add(1, msg(&forge(KEY_A, "nope", c)), d(HeaderJson));
        add(
            1,
            msg(&forge(KEY_A, r#"{"alg":"none"}"#, c)),
            d(AlgNotAllowed),
        );
        add(
            1,
            msg(&forge(KEY_A, r#"{"alg":"HS512"}"#, c)),
            d(AlgNotAllowed),
        );
        add(1, msg(&sign_hs256(KEY_A, "[]")), d(PayloadJson));
        add(2, msg(&good), d(BadSignature));
        add(1, msg(&sign_hs256(KEY_A, r#"{"exp":5}"#)), d(Expired));
        add(
            1,
            msg(&sign_hs256(KEY_A, &format!(r#"{{"nbf":{}}}"#, NOW + 1))),
            d(NotYetValid),
        );
        add(0, msg(&good), d(UnknownTenant));
        add(7, msg(&good), d(UnknownTenant));

        for (ctx, m, want) in &inputs {
            assert_eq!(f.check(*ctx, m, NOW), *want);
        }
        let s = f.stats();
        assert_eq!(s.passed, 4);
        for r in Reason::ALL {
            let n = inputs
                .iter()
                .filter(|(_, _, v)| *v == Verdict::Drop(r))
                .count() as u64;
            assert!(n > 0, "every reason exercised: {r:?}");
            assert_eq!(s.dropped_for(r), n, "{}", r.name());
        }
        assert_eq!(s.total(), inputs.len() as u64);
        f.reset_stats();
        assert_eq!(*f.stats(), Stats::default());
    }

    #[test]
    fn reason_indices_are_dense() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        let mut names: Vec<&str> = Reason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REASONS);
    }

    // ------------------------------------------------------------ proptests

    fn base_message() -> (Vec<u8>, String) {
        let tok = valid_token(KEY_A);
        (msg(&tok), tok)
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Set(usize, u8),
        Xor(usize, u8),
        Insert(usize, u8),
        Remove(usize),
        Truncate(usize),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
            (any::<usize>(), 1..=255u8).prop_map(|(i, b)| Mutation::Xor(i, b)),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
            any::<usize>().prop_map(Mutation::Remove),
            any::<usize>().prop_map(Mutation::Truncate),
        ]
    }

    /// Applies a mutation within `lo..buf.len()` (so `lo` bytes stay intact).
    fn apply(buf: &mut Vec<u8>, lo: usize, m: &Mutation) {
        let span = buf.len() - lo;
        match *m {
            Mutation::Set(i, b) if span > 0 => buf[lo + i % span] = b,
            Mutation::Xor(i, b) if span > 0 => buf[lo + i % span] ^= b,
            Mutation::Insert(i, b) => buf.insert(lo + i % (span + 1), b),
            Mutation::Remove(i) if span > 0 => {
                buf.remove(lo + i % span);
            }
            Mutation::Truncate(i) => buf.truncate(lo + i % (span + 1)),
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_pass(bytes in proptest::collection::vec(any::<u8>(), 0..300),
                                   ctx in 0u16..4) {
            let mut f = filter();
            prop_assert_ne!(f.check(ctx, &bytes, NOW), Verdict::Pass);
            prop_assert_eq!(f.stats().total(), 1);
        }

        #[test]
        fn random_payload_in_valid_frame_never_passes(
            payload in proptest::collection::vec(any::<u8>(), 1..300)) {
            let mut f = filter();
            let m = coap_message(1, &[], "/t", &payload);
            prop_assert_ne!(f.check(1, &m, NOW), Verdict::Pass);
            let _ = verify_jwt(&payload, KEY_A, NOW);
        }

        #[test]
        fn random_jwt_shaped_tokens_never_pass(
            a in "[A-Za-z0-9_-]{0,60}", b in "[A-Za-z0-9_-]{0,60}", c in "[A-Za-z0-9_-]{0,60}") {
            let t = format!("{a}.{b}.{c}");
            prop_assert_ne!(verify_jwt(t.as_bytes(), KEY_A, NOW), Ok(()));
        }

        /// Mutations anywhere: never a panic; a pass only if the token that
        /// was checked is exactly the signed one (header, message ID, CoAP
        /// token and options are not covered by the JWT).
        #[test]
        fn mutated_message_passes_only_with_intact_token(
            muts in proptest::collection::vec(mutation(), 1..6)) {
            let (orig, tok) = base_message();
            let mut m = orig.clone();
            for mu in &muts {
                apply(&mut m, 0, mu);
            }
            let mut f = filter();
            let v = f.check(1, &m, NOW);
            if m == orig {
                prop_assert_eq!(v, Verdict::Pass);
            }
            if v == Verdict::Pass {
                prop_assert_eq!(parse_coap(&m).unwrap().payload, tok.as_bytes());
            }
            prop_assert_eq!(f.stats().total(), 1);
        }

        /// Mutations confined to the token: passes iff unmodified.
        #[test]
        fn mutated_token_never_passes_unless_unmodified(
            muts in proptest::collection::vec(mutation(), 1..6)) {
            let (orig, tok) = base_message();
            let lo = orig.len() - tok.len();
            let mut m = orig.clone();
            for mu in &muts {
                apply(&mut m, lo, mu);
            }
            let mut f = filter();
            let v = f.check(1, &m, NOW);
            prop_assert_eq!(v == Verdict::Pass, m == orig, "{:?}", v);
        }
    }
}
