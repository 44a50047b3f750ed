//! The relay header (spec §6; bound to the envelope in docs/SPEC.md §6): the sending house signs
//! `relay:<id>:<destination domain>:<envelope sha256>` as a relay signature, so a captured header
//! carries exactly one envelope to one house.
//!
//! `X-Nyx5-Relay: nyx51 domain=<sending domain>; kid=<domain key>; sig=<base64url signature>`

use crate::address::{check_domain, check_id};
use crate::b64;
use crate::card::DomainCard;
use crate::crypto::{Context, SigPublic, SigningKey};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::limits;
use crate::refusal::Refusal;
use crate::sign::Verified;
use crate::time::Timestamp;

/// The HTTP header that carries it.
pub const HEADER: &str = "X-Nyx5-Relay";
/// The version tag that starts the header value.
pub const TAG: &str = "nyx51";

/// The text a relay signature covers (after its [`Context::Relay`] label).
pub fn relay_message(envelope_id: &str, destination: &str, envelope_sha256: &str) -> String {
    format!("relay:{envelope_id}:{destination}:{envelope_sha256}")
}

/// A relay header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayHeader {
    pub domain: String,
    pub kid: SigPublic,
    pub sig: [u8; 64],
}

impl RelayHeader {
    /// The sending house `domain` signs the relay of `envelope` to `destination`.
    pub fn sign(domain: &str, envelope: &Envelope, destination: &str, key: &SigningKey) -> RelayHeader {
        let message = relay_message(envelope.id(), destination, &envelope.sha256_hex());
        let sig = key.sign(Context::Relay, message.as_bytes());
        RelayHeader { domain: domain.to_owned(), kid: key.public(), sig }
    }

    /// The header value.
    pub fn to_header(&self) -> String {
        format!("{TAG} domain={}; kid={}; sig={}", self.domain, self.kid.to_b64(), b64::encode(&self.sig))
    }

    /// Parses a header value. Parameters are `;`-separated `name=value` pairs after `nyx51`,
    /// each exactly once, in any order, with optional spaces.
    pub fn parse(value: &str) -> Result<RelayHeader, Error> {
        let bad = |why: &str| Refusal::BadRelayHeader.because(format!("bad {HEADER} header: {why}"));
        if value.len() > limits::MAX_HEADER_LEN {
            return Err(bad("too long"));
        }
        let rest = value.trim().strip_prefix(TAG).ok_or_else(|| bad("must start with nyx51"))?;
        if !rest.starts_with(' ') {
            return Err(bad("must start with nyx51"));
        }
        let (mut domain, mut kid, mut sig) = (None, None, None);
        for part in rest.split(';') {
            let (name, val) = part.trim().split_once('=').ok_or_else(|| bad("parameters are name=value"))?;
            let slot = match name.trim() {
                "domain" => &mut domain,
                "kid" => &mut kid,
                "sig" => &mut sig,
                _ => return Err(bad("unknown parameter")),
            };
            if slot.replace(val.trim()).is_some() {
                return Err(bad("repeated parameter"));
            }
        }
        let domain = domain.ok_or_else(|| bad("missing domain"))?;
        check_domain(domain).map_err(bad)?;
        let kid = SigPublic::parse(kid.ok_or_else(|| bad("missing kid"))?).map_err(|_| bad("kid is not a key"))?;
        let sig =
            b64::decode_array(sig.ok_or_else(|| bad("missing sig"))?).ok_or_else(|| bad("sig is not 64 bytes"))?;
        Ok(RelayHeader { domain: domain.to_owned(), kid, sig })
    }

    /// Verifies against the sending domain's verified card at `now`: same domain, a key the card
    /// lists and has not ended, and a relay signature over `relay:<id>:<destination>:<sha256>` of
    /// this very envelope.
    pub fn verify(
        &self,
        sender: &Verified<DomainCard>,
        envelope: &Envelope,
        destination: &str,
        now: Timestamp,
    ) -> Result<(), Error> {
        check_id(envelope.id())?;
        if self.domain != sender.domain() {
            return Err(Refusal::BadRelay.because("relay header names another domain"));
        }
        if !sender.accepts_key(&self.kid, now) {
            return Err(
                Refusal::RelayKeyNotValid.because("the relay key is not a key of the sending domain, or past its end")
            );
        }
        let message = relay_message(envelope.id(), destination, &envelope.sha256_hex());
        if !sender.verify_by(&self.kid, Context::Relay, message.as_bytes(), &self.sig) {
            return Err(Refusal::BadSignature.because("relay signature does not verify"));
        }
        Ok(())
    }
}
