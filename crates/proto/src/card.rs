//! Cards (spec §3, §4): the domain card (self-signed), the agent card (certified by the domain)
//! and the delegation a parent signs for its subagent. Build, sign, and verify the chain
//! domain key → domain card → agent card (→ parent → child).
//!
//! Every card keeps the object it was parsed from, so unknown members stay covered by the
//! signature and are written back unchanged.

use crate::address::{Address, check_domain};
use crate::crypto::{Context, EncPublic, KeyCache, SigPublic, SigningKey};
use crate::error::Error;
use crate::json::{Object, Value, canonical_without, field, obj};
use crate::limits;
use crate::refusal::Refusal;
use crate::sign::{Verified, sign_object, verify_object, verify_signature};
use crate::time::Timestamp;

/// The protocol version string of cards and envelopes.
pub const VERSION: &str = "1";

fn check_version(doc: &Object) -> Result<(), Error> {
    match field::str(doc, "nyx5")? {
        VERSION => Ok(()),
        other => Err(Refusal::UnsupportedVersion.because(format!("unsupported nyx5 version {other:?}"))),
    }
}

fn opt_time(doc: &Object, name: &str) -> Result<Option<Timestamp>, Error> {
    field::opt_str(doc, name)?.map(Timestamp::parse).transpose()
}

/// A key listed by a domain card. A key past its `until` verifies nothing (no certification,
/// relay header or notice). A previous key carries a `handover`: its own signature endorsing the
/// card's active key until `until` (see [`handover_message`]), which is what lets a peer that
/// pinned it follow the rotation.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainKey {
    pub sig: SigPublic,
    pub created: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub handover: Option<[u8; 64]>,
}

impl DomainKey {
    /// A key with no end and no handover.
    pub fn new(sig: SigPublic, created: Option<Timestamp>) -> DomainKey {
        DomainKey { sig, created, until: None, handover: None }
    }

    /// Whether this key still verifies at `now`.
    pub fn valid_at(&self, now: Timestamp) -> bool {
        self.until.is_none_or(|until| now < until)
    }
}

/// The `type` member of a handover statement: no other signed document carries it.
pub const HANDOVER_TYPE: &str = "nyx5-domain-key-handover";

/// The bytes a previous domain key signs to hand `domain` over to its new active key `to`
/// until `until`: the canonical JSON of
/// `{"domain", "from", "to", "type": "nyx5-domain-key-handover", "until"}`.
pub fn handover_message(domain: &str, from: &SigPublic, to: &SigPublic, until: Timestamp) -> Vec<u8> {
    Value::Object(obj([
        ("domain", domain.into()),
        ("from", from.to_b64().into()),
        ("to", to.to_b64().into()),
        ("type", HANDOVER_TYPE.into()),
        ("until", until.to_rfc3339().into()),
    ]))
    .canonical()
}

/// A previous domain key the house still holds, listed until `until` with a handover to the
/// active key.
#[derive(Debug, Clone)]
pub struct PreviousDomainKey {
    pub key: SigningKey,
    pub created: Option<Timestamp>,
    pub until: Timestamp,
}

/// A domain card, parsed but not yet verified.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainCard {
    domain: String,
    estafeta: String,
    /// The first is the active key; the rest are still valid during a rotation.
    keys: Vec<DomainKey>,
    policy: Object,
    extensions: Vec<String>,
    issued: Timestamp,
    raw: Object,
    prepared: KeyCache,
}

/// What a house puts in its domain card.
#[derive(Debug, Clone)]
pub struct DomainCardDraft {
    pub domain: String,
    pub estafeta: String,
    /// Keys after the signing key, kept valid during a rotation.
    pub other_keys: Vec<DomainKey>,
    /// Previous keys whose secrets the house holds: listed after the signing key with their
    /// `until` and a handover to the signing key.
    pub previous: Vec<PreviousDomainKey>,
    pub policy: Object,
    pub extensions: Vec<String>,
    pub issued: Timestamp,
}

impl DomainCardDraft {
    /// Signs the card with `key`, which becomes its first (active) key.
    pub fn sign(self, key: &SigningKey, key_created: Timestamp) -> Result<DomainCard, Error> {
        let active = key.public();
        let mut keys = vec![key_value(&DomainKey::new(active, Some(key_created)))];
        for p in &self.previous {
            let from = p.key.public();
            let handover =
                p.key.sign(Context::DomainKeyHandover, &handover_message(&self.domain, &from, &active, p.until));
            keys.push(key_value(&DomainKey {
                sig: from,
                created: p.created,
                until: Some(p.until),
                handover: Some(handover),
            }));
        }
        keys.extend(self.other_keys.iter().map(key_value));
        let mut doc = obj([
            ("nyx5", VERSION.into()),
            ("domain", self.domain.into()),
            ("estafeta", self.estafeta.into()),
            ("keys", Value::Array(keys)),
            ("policy", Value::Object(self.policy)),
            ("extensions", Value::Array(self.extensions.into_iter().map(Value::from).collect())),
            ("issued", self.issued.to_rfc3339().into()),
        ]);
        sign_object(&mut doc, "signature", Context::DomainCard, key);
        DomainCard::from_object(doc)
    }
}

fn key_value(k: &DomainKey) -> Value {
    let mut o = obj([("sig", k.sig.to_b64().into())]);
    if let Some(c) = k.created {
        o.insert("created".into(), c.to_rfc3339().into());
    }
    if let Some(u) = k.until {
        o.insert("until".into(), u.to_rfc3339().into());
    }
    if let Some(h) = &k.handover {
        o.insert("handover".into(), crate::b64::encode(h).into());
    }
    Value::Object(o)
}

/// The typed view of a domain card: read only, and only ever made from the card's own bytes
/// ([`DomainCard::from_object`]), so it cannot disagree with what was verified.
impl DomainCard {
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The estafeta's base URL, as the card gives it.
    pub fn estafeta(&self) -> &str {
        &self.estafeta
    }

    /// The first is the active key; the rest are previous keys, each valid until its `until`.
    pub fn keys(&self) -> &[DomainKey] {
        &self.keys
    }

    pub fn policy(&self) -> &Object {
        &self.policy
    }

    pub fn extensions(&self) -> &[String] {
        &self.extensions
    }

    pub fn issued(&self) -> Timestamp {
        self.issued
    }
}

impl DomainCard {
    pub fn parse(bytes: &[u8]) -> Result<DomainCard, Error> {
        DomainCard::from_object(Value::parse_object(bytes, limits::MAX_DOCUMENT_BYTES, "a domain card")?)
    }

    pub fn from_object(raw: Object) -> Result<DomainCard, Error> {
        check_version(&raw)?;
        let domain = field::str(&raw, "domain")?.to_owned();
        check_domain(&domain).map_err(|why| Refusal::BadCard.because(format!("card domain: {why}")))?;
        let estafeta = field::str(&raw, "estafeta")?.to_owned();
        let keys_json = field::array(&raw, "keys")?;
        if keys_json.is_empty() || keys_json.len() > limits::MAX_KEYS {
            return Err(Refusal::BadCard.because("`keys` must list 1 to 8 keys"));
        }
        let keys = keys_json
            .iter()
            .map(|k| {
                let k = k.as_object().ok_or_else(|| Refusal::BadCard.because("each key is an object"))?;
                let handover = field::opt_str(k, "handover")?
                    .map(|h| {
                        crate::b64::decode_array::<64>(h).ok_or_else(|| {
                            Refusal::BadCard.because("`keys[].handover` is not a 64-byte base64url signature")
                        })
                    })
                    .transpose()?;
                Ok(DomainKey {
                    sig: SigPublic::parse(field::str(k, "sig")?)?,
                    created: opt_time(k, "created")?,
                    until: opt_time(k, "until")?,
                    handover,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        if keys.iter().enumerate().any(|(i, k)| keys.iter().skip(i + 1).any(|o| o.sig == k.sig)) {
            return Err(Refusal::BadCard.because("`keys` lists a key twice"));
        }
        let policy = field::opt_object(&raw, "policy")?.cloned().unwrap_or_default();
        let extensions = field::opt_array(&raw, "extensions")?
            .unwrap_or_default()
            .iter()
            .map(|e| e.as_str().map(str::to_owned).ok_or_else(|| Refusal::BadCard.because("extensions are strings")))
            .collect::<Result<_, _>>()?;
        let issued = Timestamp::parse(field::str(&raw, "issued")?)?;
        Ok(DomainCard { domain, estafeta, keys, policy, extensions, issued, raw, prepared: KeyCache::default() })
    }

    /// Verifies the self-signature (its `kid` must be one of `keys`) and, when the resolver
    /// has one (DNS `sig`, a hosts pin, a TOFU pin), that the card is signed by `anchor`.
    pub fn verify(self, anchor: Option<&SigPublic>) -> Result<Verified<DomainCard>, Error> {
        let kid =
            verify_object(&self.raw, "signature", Context::DomainCard, |kid| self.keys.iter().any(|k| k.sig == *kid))?;
        if let Some(anchor) = anchor
            && kid != *anchor
        {
            return Err(Refusal::AnchorMismatch
                .because(format!("domain card of {} is not signed by its anchored key", self.domain)));
        }
        Ok(Verified::new(self))
    }

    /// Whether `key` is one of this domain's keys (at any time; see [`DomainCard::accepts_key`]).
    pub fn has_key(&self, key: &SigPublic) -> bool {
        self.keys.iter().any(|k| k.sig == *key)
    }

    /// Whether `key` is one of this domain's keys and still within its `until` at `now`: only
    /// such a key verifies certifications, relay headers and notices.
    pub fn accepts_key(&self, key: &SigPublic, now: Timestamp) -> bool {
        self.keys.iter().any(|k| k.sig == *key && k.valid_at(now))
    }

    /// The key that signed this card (its `signature.kid`), unchecked.
    pub fn signer(&self) -> Result<SigPublic, Error> {
        Ok(crate::sign::Signature::read(&self.raw, "signature")?.kid)
    }

    /// Verifies the card against a TOFU `pin` at `now` (docs/SPEC.md §6.1, continuity): the
    /// self-signature must verify by a key valid at `now`, and either that key is the pin, or
    /// the card lists the pin as a previous key still within its `until` with a valid handover
    /// by the pin to the signing key. Listing the pinned key alone proves nothing (anyone can
    /// copy a public key); the handover is a signature only the pinned key's holder can make.
    /// Returns the verified card and whether it continued from the pin to a new key.
    pub fn verify_continuing(self, pin: &SigPublic, now: Timestamp) -> Result<(Verified<DomainCard>, bool), Error> {
        let kid = verify_object(&self.raw, "signature", Context::DomainCard, |kid| self.accepts_key(kid, now))?;
        if kid == *pin {
            return Ok((Verified::new(self), false));
        }
        let refuse = |why: &str| {
            Err(Refusal::PinMismatch
                .because(format!("the key of {} changed since it was pinned and {why}", self.domain)))
        };
        let Some(old) = self.keys.iter().find(|k| k.sig == *pin) else {
            return refuse("the card does not list the pinned key");
        };
        let (Some(until), Some(handover)) = (old.until, old.handover.as_ref()) else {
            return refuse("the pinned key has not handed over to the new one");
        };
        if now >= until {
            return refuse("the pinned key's handover has ended");
        }
        if !pin.verify(Context::DomainKeyHandover, &handover_message(&self.domain, pin, &kid, until), handover) {
            return refuse("the handover by the pinned key does not verify");
        }
        Ok((Verified::new(self), true))
    }

    /// Verifies a signature of kind `context` by `kid`, one of this card's keys (see
    /// [`DomainCard::has_key`]), with the keys decoded once per card.
    pub(crate) fn verify_by(&self, kid: &SigPublic, context: Context, message: &[u8], signature: &[u8; 64]) -> bool {
        self.verify_framed_by(kid, &context.frame(message), signature)
    }

    /// [`DomainCard::verify_by`] for bytes already framed with their context.
    fn verify_framed_by(&self, kid: &SigPublic, framed: &[u8], signature: &[u8; 64]) -> bool {
        self.prepared.verify_raw(|| self.keys.iter().map(|k| k.sig).collect(), kid, framed, signature)
    }

    /// The largest envelope this house accepts (`policy.max_bytes`, else the default).
    pub fn max_bytes(&self) -> usize {
        self.policy
            .get("max_bytes")
            .and_then(Value::as_safe_integer)
            .and_then(|n| usize::try_from(n).ok())
            .map_or(limits::MAX_ENVELOPE_BYTES, |n| n.min(limits::MAX_ENVELOPE_BYTES))
    }

    pub fn object(&self) -> &Object {
        &self.raw
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }
}

/// A previous agent key, valid for signatures until `until`.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviousKey {
    pub sig: SigPublic,
    pub until: Timestamp,
}

/// What a delegated card allows its subagent (spec §4).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scope {
    /// Envelope types it may send; `None` = any.
    pub types: Option<Vec<String>>,
    /// Destination domains it may send to; `None` = any.
    pub to_domains: Option<Vec<String>>,
    /// Most tokens it may commit in the Libro; `None` = no cap of its own.
    pub cap: Option<i64>,
    /// How far its money-moving operations go alone (docs/SPEC.md §16b); `None` = as far as
    /// its cap.
    pub authority: Option<crate::authority::Authority>,
}

impl Scope {
    /// Reads a scope (as a delegation carries it).
    pub fn from_value(v: &Value) -> Result<Scope, Error> {
        Scope::from_object(v.as_object().ok_or_else(|| Refusal::BadCard.because("a scope is an object"))?)
    }

    fn from_object(o: &Object) -> Result<Scope, Error> {
        let strings = |name: &str| -> Result<Option<Vec<String>>, Error> {
            field::opt_array(o, name)?
                .map(|a| {
                    a.iter()
                        .map(|v| {
                            v.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| Refusal::BadCard.because(format!("`scope.{name}` lists strings")))
                        })
                        .collect()
                })
                .transpose()
        };
        let cap = field::opt_integer(o, "cap")?;
        if cap.is_some_and(|c| c < 0) {
            return Err(Refusal::BadCard.because("`scope.cap` must not be negative"));
        }
        let authority = match o.get("authority") {
            None | Some(Value::Null) => None,
            Some(v) => Some(crate::authority::Authority::from_value(v)?),
        };
        Ok(Scope { types: strings("types")?, to_domains: strings("to_domains")?, cap, authority })
    }

    pub fn to_value(&self) -> Value {
        let mut o = Object::new();
        let list = |v: &Vec<String>| Value::Array(v.iter().map(|s| Value::from(s.as_str())).collect());
        if let Some(t) = &self.types {
            o.insert("types".into(), list(t));
        }
        if let Some(d) = &self.to_domains {
            o.insert("to_domains".into(), list(d));
        }
        if let Some(c) = self.cap {
            o.insert("cap".into(), c.into());
        }
        if let Some(a) = &self.authority {
            o.insert("authority".into(), a.to_value());
        }
        Value::Object(o)
    }

    /// Whether this scope allows sending an envelope of `kind` to `domain`.
    pub fn allows_send(&self, kind: &str, domain: &str) -> bool {
        self.types.as_ref().is_none_or(|t| t.iter().any(|x| x == kind))
            && self.to_domains.as_ref().is_none_or(|d| d.iter().any(|x| x == domain))
    }

    /// Whether `self` stays within `parent`: every type and destination domain the child may
    /// use, the parent may too (a list is a subset of the parent's; "any" fits only under
    /// "any"), the child never gets more cap than its parent, and no looser authority. Checked at every link, this
    /// makes a card's own scope the intersection of its whole chain's.
    pub fn within(&self, parent: &Scope) -> bool {
        fn subset(child: Option<&Vec<String>>, parent: Option<&Vec<String>>) -> bool {
            match (child, parent) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(c), Some(p)) => c.iter().all(|x| p.contains(x)),
            }
        }
        let cap = match (self.cap, parent.cap) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(c), Some(p)) => c <= p,
        };
        let authority = match (&self.authority, &parent.authority) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(c), Some(p)) => c.within(p),
        };
        cap && authority
            && subset(self.types.as_ref(), parent.types.as_ref())
            && subset(self.to_domains.as_ref(), parent.to_domains.as_ref())
    }
}

/// The parent's signed statement that a subagent acts for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Delegation {
    pub by: Address,
    pub address: Address,
    pub sig: SigPublic,
    pub scope: Scope,
    pub valid_until: Option<Timestamp>,
    pub issued: Timestamp,
    raw: Object,
}

impl Delegation {
    /// The parent `by` (holding `parent_key`) delegates to `address` with key `sig`.
    pub fn sign(
        by: &Address,
        address: &Address,
        sig: &SigPublic,
        scope: &Scope,
        valid_until: Option<Timestamp>,
        issued: Timestamp,
        parent_key: &SigningKey,
    ) -> Result<Delegation, Error> {
        let mut doc = obj([
            ("by", by.as_str().into()),
            ("address", address.as_str().into()),
            ("sig", sig.to_b64().into()),
            ("scope", scope.to_value()),
            ("valid_until", valid_until.map(|t| t.to_rfc3339()).into()),
            ("issued", issued.to_rfc3339().into()),
        ]);
        sign_object(&mut doc, "signature", Context::Delegation, parent_key);
        Delegation::from_object(doc)
    }

    pub fn from_object(raw: Object) -> Result<Delegation, Error> {
        Ok(Delegation {
            by: Address::parse(field::str(&raw, "by")?)?,
            address: Address::parse(field::str(&raw, "address")?)?,
            sig: SigPublic::parse(field::str(&raw, "sig")?)?,
            scope: field::opt_object(&raw, "scope")?.map(Scope::from_object).transpose()?.unwrap_or_default(),
            valid_until: opt_time(&raw, "valid_until")?,
            issued: Timestamp::parse(field::str(&raw, "issued")?)?,
            raw,
        })
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }

    /// The key that signed this delegation (its `signature.kid`), unchecked.
    pub fn signer(&self) -> Result<SigPublic, Error> {
        Ok(crate::sign::Signature::read(&self.raw, "signature")?.kid)
    }
}

/// An agent card, parsed but not yet verified.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCard {
    address: Address,
    sig: SigPublic,
    enc: Option<EncPublic>,
    capabilities: Object,
    inbox: Object,
    valid_from: Timestamp,
    valid_until: Option<Timestamp>,
    previous: Vec<PreviousKey>,
    delegation: Option<Delegation>,
    raw: Object,
    prepared: KeyCache,
}

/// What a house certifies for an agent. `extra` carries any further members (e.g. `person`).
#[derive(Debug, Clone)]
pub struct AgentCardDraft {
    pub address: Address,
    pub sig: SigPublic,
    pub enc: Option<EncPublic>,
    pub capabilities: Object,
    pub inbox: Object,
    pub valid_from: Timestamp,
    pub valid_until: Option<Timestamp>,
    pub previous: Vec<PreviousKey>,
    pub delegation: Option<Delegation>,
    pub extra: Object,
}

impl AgentCardDraft {
    /// A plain card: open inbox, no capabilities, valid from `now` with no end.
    pub fn new(address: Address, sig: SigPublic, enc: Option<EncPublic>, now: Timestamp) -> Self {
        AgentCardDraft {
            address,
            sig,
            enc,
            capabilities: Object::new(),
            inbox: obj([("policy", "open".into())]),
            valid_from: now,
            valid_until: None,
            previous: Vec::new(),
            delegation: None,
            extra: Object::new(),
        }
    }

    /// The domain certifies the card with its key.
    pub fn certify(self, domain_key: &SigningKey) -> Result<AgentCard, Error> {
        let mut doc = self.extra;
        let previous = self
            .previous
            .iter()
            .map(|p| Value::Object(obj([("sig", p.sig.to_b64().into()), ("until", p.until.to_rfc3339().into())])))
            .collect();
        let members = [
            ("nyx5", VERSION.into()),
            ("address", self.address.as_str().into()),
            ("sig", self.sig.to_b64().into()),
            ("capabilities", Value::Object(self.capabilities)),
            ("inbox", Value::Object(self.inbox)),
            ("valid_from", self.valid_from.to_rfc3339().into()),
            ("valid_until", self.valid_until.map(|t| t.to_rfc3339()).into()),
            ("previous", Value::Array(previous)),
        ];
        for (k, v) in members {
            doc.insert(k.to_owned(), v);
        }
        if let Some(enc) = self.enc {
            doc.insert("enc".into(), enc.to_b64().into());
        }
        if let Some(d) = self.delegation {
            doc.insert("delegation".into(), d.to_value());
        }
        sign_object(&mut doc, "certification", Context::AgentCard, domain_key);
        AgentCard::from_object(doc)
    }
}

/// The typed view of an agent card: read only, and only ever made from the card's own bytes
/// ([`AgentCard::from_object`]), so it cannot disagree with what was verified.
impl AgentCard {
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The current signing key.
    pub fn sig(&self) -> SigPublic {
        self.sig
    }

    pub fn enc(&self) -> Option<EncPublic> {
        self.enc
    }

    pub fn capabilities(&self) -> &Object {
        &self.capabilities
    }

    pub fn inbox(&self) -> &Object {
        &self.inbox
    }

    pub fn valid_from(&self) -> Timestamp {
        self.valid_from
    }

    pub fn valid_until(&self) -> Option<Timestamp> {
        self.valid_until
    }

    /// Replaced keys, each still signing envelopes (and reading mail) until its `until`.
    pub fn previous(&self) -> &[PreviousKey] {
        &self.previous
    }

    pub fn delegation(&self) -> Option<&Delegation> {
        self.delegation.as_ref()
    }
}

impl AgentCard {
    pub fn parse(bytes: &[u8]) -> Result<AgentCard, Error> {
        AgentCard::from_object(Value::parse_object(bytes, limits::MAX_DOCUMENT_BYTES, "an agent card")?)
    }

    pub fn from_object(raw: Object) -> Result<AgentCard, Error> {
        check_version(&raw)?;
        let previous_json = field::opt_array(&raw, "previous")?.unwrap_or_default();
        if previous_json.len() > limits::MAX_PREVIOUS_KEYS {
            return Err(Refusal::BadCard.because("too many `previous` keys"));
        }
        let previous = previous_json
            .iter()
            .map(|p| {
                let p = p.as_object().ok_or_else(|| Refusal::BadCard.because("each previous key is an object"))?;
                Ok(PreviousKey {
                    sig: SigPublic::parse(field::str(p, "sig")?)?,
                    until: Timestamp::parse(field::str(p, "until")?)?,
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(AgentCard {
            address: Address::parse(field::str(&raw, "address")?)?,
            sig: SigPublic::parse(field::str(&raw, "sig")?)?,
            enc: field::opt_str(&raw, "enc")?.map(EncPublic::parse).transpose()?,
            capabilities: field::opt_object(&raw, "capabilities")?.cloned().unwrap_or_default(),
            inbox: field::opt_object(&raw, "inbox")?.cloned().unwrap_or_default(),
            valid_from: Timestamp::parse(field::str(&raw, "valid_from")?)?,
            valid_until: opt_time(&raw, "valid_until")?,
            previous,
            delegation: field::opt_object(&raw, "delegation")?.cloned().map(Delegation::from_object).transpose()?,
            raw,
            prepared: KeyCache::default(),
        })
    }

    /// Verifies the card against its (verified) domain card at `now`; a delegated card also
    /// needs its verified parent card. Checks: the address belongs to the domain, the
    /// certification is by a domain key, the validity window holds, and for a delegated card
    /// the parent's signature, the names, the key, the delegation's own validity and the cap.
    pub fn verify(
        self,
        domain: &Verified<DomainCard>,
        parent: Option<&Verified<AgentCard>>,
        now: Timestamp,
    ) -> Result<Verified<AgentCard>, Error> {
        if self.address.domain() != domain.domain {
            return Err(Refusal::NotCertifiedByDomain
                .because(format!("{} is not certified by {}", self.address, domain.domain)));
        }
        let framed = Context::AgentCard.frame(&canonical_without(&self.raw, "certification"));
        verify_signature(
            &self.raw,
            "certification",
            &framed,
            |kid| domain.accepts_key(kid, now),
            |kid, framed, signature| domain.verify_framed_by(kid, framed, signature),
        )?;
        // Clocks disagree: another house's "now" may be a little ahead of ours. Further ahead,
        // the card is not valid *yet*: a refusal time mends (our clock may be the one behind),
        // so temporary (503), never a bounce for good (issue 35: a house whose clock jumped back
        // refused mail it then took as a late copy once set right).
        if now.plus_ms(crate::limits::CLOCK_SKEW_MS) < self.valid_from {
            return Err(Refusal::CardNotYetValid.because(format!("card of {} is not valid yet", self.address)));
        }
        if self.valid_until.is_some_and(|until| now >= until) {
            return Err(Refusal::CardExpired.because(format!("card of {} has expired", self.address)));
        }
        match (&self.delegation, self.address.parent()) {
            (Some(d), _) => {
                let parent = parent.ok_or_else(|| {
                    Refusal::ParentCardRequired
                        .because(format!("delegated card of {} needs its parent's card", self.address))
                })?;
                self.check_delegation(d, parent, now)?;
            }
            // A dotted name is a subagent's: without its parent's delegation it is a forgery.
            (None, Some(p)) => {
                return Err(Refusal::SubagentWithoutDelegation
                    .because(format!("{} is a subagent of {p} but carries no delegation", self.address)));
            }
            (None, None) => {}
        }
        Ok(Verified::new(self))
    }

    fn check_delegation(&self, d: &Delegation, parent: &Verified<AgentCard>, now: Timestamp) -> Result<(), Error> {
        let refuse = |why: &str| Err(Refusal::BadDelegation.because(format!("delegation of {}: {why}", self.address)));
        if self.address.parent().as_ref() != Some(&parent.address) || d.by != parent.address {
            return refuse("the parent is not the one its name says");
        }
        if d.address != self.address || d.sig != self.sig {
            return refuse("it delegates another address or key");
        }
        verify_object(&d.raw, "signature", Context::Delegation, |kid| parent.accepts_key(kid, now))?;
        if d.valid_until.is_some_and(|until| now >= until) {
            return refuse("it has expired");
        }
        let parent_scope = parent.delegation.as_ref().map(|pd| pd.scope.clone()).unwrap_or_default();
        if !d.scope.within(&parent_scope) {
            return refuse("its scope (types, domains or cap) is wider than its parent's");
        }
        Ok(())
    }

    /// Whether `key` may sign for this agent at `now`: the current key, or a previous key still
    /// within its grace period.
    pub fn accepts_key(&self, key: &SigPublic, now: Timestamp) -> bool {
        self.sig == *key || self.previous.iter().any(|p| p.sig == *key && now < p.until)
    }

    /// Verifies a signature by `kid` over bytes already framed with their context, `kid` being
    /// one of this card's keys (see [`AgentCard::accepts_key`]), with the keys decoded once per card.
    pub(crate) fn verify_framed_by(&self, kid: &SigPublic, framed: &[u8], signature: &[u8; 64]) -> bool {
        let keys = || std::iter::once(self.sig).chain(self.previous.iter().map(|p| p.sig)).collect();
        self.prepared.verify_raw(keys, kid, framed, signature)
    }

    /// The scope a delegated card sends under (`None` for a full agent).
    pub fn scope(&self) -> Option<&Scope> {
        self.delegation.as_ref().map(|d| &d.scope)
    }

    /// Refuses (403) an envelope of `kind` to `domain` that this card's delegation does not
    /// allow. Every link of a verified chain lies within its parent's ([`Scope::within`]), so
    /// the card's own scope is the intersection of its whole chain's: checking it checks them
    /// all. The sending house checks this on `POST /outbound`, the receiving one on `/inbound`.
    pub fn check_send(&self, kind: &str, domain: &str) -> Result<(), Error> {
        match self.scope() {
            Some(scope) if !scope.allows_send(kind, domain) => Err(Refusal::OutsideDelegation
                .because(format!("the delegation of {} does not allow a {kind} to {domain}", self.address))),
            _ => Ok(()),
        }
    }

    /// Whether the card asked to be listed in the directory (`capabilities.listed: true`).
    pub fn listed(&self) -> bool {
        matches!(self.capabilities.get("listed"), Some(Value::Bool(true)))
    }

    pub fn object(&self) -> &Object {
        &self.raw
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }
}

impl AgentCard {
    /// The same card certified again by `domain_key` (every member kept as it is, only
    /// `certification` replaced): how a house moves its stored cards to a new domain key.
    pub fn recertify(self, domain_key: &SigningKey) -> Result<AgentCard, Error> {
        let mut doc = self.raw;
        sign_object(&mut doc, "certification", Context::AgentCard, domain_key);
        AgentCard::from_object(doc)
    }

    /// The domain key that certified this card (its `certification.kid`), unchecked.
    pub fn certifier(&self) -> Result<SigPublic, Error> {
        Ok(crate::sign::Signature::read(&self.raw, "certification")?.kid)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const NOW: Timestamp = Timestamp(1_788_548_400_000); // 2026-09-04T19:00:00Z

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_seed([seed; 32])
    }

    fn addr(text: &str) -> Address {
        Address::parse(text).unwrap()
    }

    /// sigo.uk's card draft with `other` further keys (seeds 10, 11, …).
    fn domain_draft(other: u8) -> DomainCardDraft {
        DomainCardDraft {
            domain: "sigo.uk".into(),
            estafeta: "https://mail.sigo.uk/e".into(),
            other_keys: (0..other).map(|i| DomainKey::new(key(10 + i).public(), None)).collect(),
            previous: vec![],
            policy: obj([("inbound", "verified".into()), ("max_bytes", 65_536.into())]),
            extensions: vec!["urn:nyx5:ext:libro".into(), "urn:nyx5:ext:pow".into()],
            issued: NOW,
        }
    }

    fn domain_card() -> DomainCard {
        domain_draft(0).sign(&key(1), NOW).unwrap()
    }

    fn agent_draft(address: &str) -> AgentCardDraft {
        AgentCardDraft::new(addr(address), key(2).public(), None, NOW)
    }

    /// The card's object with `name` set to `value`.
    fn with<T>(raw: &Object, name: &str, value: Value, parse: fn(Object) -> Result<T, Error>) -> Result<T, Error> {
        let mut raw = raw.clone();
        raw.insert(name.into(), value);
        parse(raw)
    }

    #[test]
    fn cards_of_another_nyx5_version_are_refused() {
        let refused = Refusal::UnsupportedVersion.because("unsupported nyx5 version \"2\"");
        let domain = domain_card();
        assert_eq!(with(domain.object(), "nyx5", "2".into(), DomainCard::from_object), Err(refused.clone()));
        assert!(with(domain.object(), "nyx5", "1".into(), DomainCard::from_object).is_ok());
        let agent = agent_draft("ana@sigo.uk").certify(&key(1)).unwrap();
        assert_eq!(with(agent.object(), "nyx5", "2".into(), AgentCard::from_object), Err(refused));
        assert!(with(agent.object(), "nyx5", "1".into(), AgentCard::from_object).is_ok());
        let mut bare = agent.object().clone();
        bare.remove("nyx5");
        assert_eq!(AgentCard::from_object(bare).unwrap_err().kind, crate::ErrorKind::Malformed);
    }

    #[test]
    fn domain_card_reads_back_what_was_signed() {
        let card = domain_draft(1).sign(&key(1), NOW).unwrap();
        assert_eq!(card.domain(), "sigo.uk");
        assert_eq!(card.estafeta(), "https://mail.sigo.uk/e");
        assert_eq!(card.policy(), &obj([("inbound", "verified".into()), ("max_bytes", 65_536.into())]));
        assert_eq!(card.extensions(), ["urn:nyx5:ext:libro", "urn:nyx5:ext:pow"]);
        assert_eq!(card.issued(), NOW);
        assert_eq!(card.keys().iter().map(|k| k.sig).collect::<Vec<_>>(), [key(1).public(), key(10).public()]);
        // Without `policy` and `extensions`, both read as empty.
        let mut draft = domain_draft(0);
        (draft.policy, draft.extensions) = (Object::new(), vec![]);
        let mut raw = draft.sign(&key(1), NOW).unwrap().object().clone();
        raw.remove("policy");
        raw.remove("extensions");
        let bare = DomainCard::from_object(raw).unwrap();
        assert_eq!((bare.policy(), bare.extensions()), (&Object::new(), &[][..]));
    }

    #[test]
    fn domain_card_lists_1_to_8_keys() {
        assert_eq!(limits::MAX_KEYS, 8);
        let refused = Err(Refusal::BadCard.because("`keys` must list 1 to 8 keys"));
        let eight = domain_draft(7).sign(&key(1), NOW).unwrap();
        assert_eq!(eight.keys().len(), 8);
        assert!(eight.clone().verify(Some(&key(1).public())).is_ok());
        assert_eq!(domain_draft(8).sign(&key(1), NOW), refused);
        assert_eq!(with(eight.object(), "keys", Value::Array(vec![]), DomainCard::from_object), refused);
        let one = domain_card();
        assert_eq!(one.keys().len(), 1);
    }

    #[test]
    fn domain_card_has_each_of_its_keys_and_no_other() {
        let card = domain_draft(2).sign(&key(1), NOW).unwrap();
        for seed in [1, 10, 11] {
            assert!(card.has_key(&key(seed).public()), "key {seed}");
        }
        for seed in [2, 12] {
            assert!(!card.has_key(&key(seed).public()), "key {seed}");
        }
        let single = domain_card();
        assert!(single.has_key(&key(1).public()));
        assert!(!single.has_key(&key(10).public()));
    }

    #[test]
    fn max_bytes_is_the_policy_s_up_to_the_envelope_limit() {
        let with_policy = |max: Option<Value>| {
            let mut draft = domain_draft(0);
            draft.policy = max.map(|m| obj([("max_bytes", m)])).unwrap_or_default();
            draft.sign(&key(1), NOW).unwrap().max_bytes()
        };
        let limit = limits::MAX_ENVELOPE_BYTES;
        assert_eq!(domain_card().max_bytes(), 65_536);
        assert_eq!(with_policy(Some(0.into())), 0);
        assert_eq!(with_policy(Some(1.into())), 1);
        assert_eq!(with_policy(Some(1000.into())), 1000);
        assert_eq!(with_policy(Some(Value::from(i64::try_from(limit).unwrap()))), limit);
        assert_eq!(with_policy(Some(Value::from(i64::try_from(limit).unwrap() + 1))), limit);
        assert_eq!(with_policy(None), limit);
        assert_eq!(with_policy(Some((-1).into())), limit);
        assert_eq!(with_policy(Some("1000".into())), limit);
    }

    #[test]
    fn scope_cap_may_be_zero_but_not_negative() {
        let scope = |text: &str| Scope::from_value(&Value::parse_str(text).unwrap());
        assert_eq!(scope(r#"{"cap":0}"#).unwrap().cap, Some(0));
        assert_eq!(scope(r#"{"cap":1}"#).unwrap().cap, Some(1));
        assert_eq!(scope(r#"{}"#).unwrap(), Scope::default());
        assert_eq!(scope(r#"{"cap":-1}"#), Err(Refusal::BadCard.because("`scope.cap` must not be negative")));
    }

    #[test]
    fn agent_card_reads_back_what_was_certified() {
        let child = addr("tester.ana@sigo.uk");
        let scope = Scope { cap: Some(7), ..Scope::default() };
        let until = NOW.plus_ms(3_600_000);
        let d = Delegation::sign(&addr("ana@sigo.uk"), &child, &key(3).public(), &scope, Some(until), NOW, &key(2))
            .unwrap();
        let mut draft = AgentCardDraft::new(child.clone(), key(3).public(), None, NOW);
        draft.capabilities = obj([("listed", true.into()), ("tools", "none".into())]);
        draft.inbox = obj([("policy", "contacts".into())]);
        draft.valid_until = Some(until);
        draft.delegation = Some(d.clone());
        let card = draft.certify(&key(1)).unwrap();
        assert_eq!(card.address(), &child);
        assert_eq!(card.capabilities(), &obj([("listed", true.into()), ("tools", "none".into())]));
        assert_eq!(card.inbox(), &obj([("policy", "contacts".into())]));
        assert_eq!((card.valid_from(), card.valid_until()), (NOW, Some(until)));
        assert_eq!(card.delegation(), Some(&d));
        assert_eq!(card.delegation().map(|d| (&d.by, d.scope.cap)), Some((&addr("ana@sigo.uk"), Some(7))));

        let plain = agent_draft("ana@sigo.uk").certify(&key(1)).unwrap();
        assert_eq!(plain.capabilities(), &Object::new());
        assert_eq!(plain.inbox(), &obj([("policy", "open".into())]));
        assert_eq!((plain.valid_until(), plain.delegation()), (None, None));
    }

    #[test]
    fn agent_card_lists_at_most_8_previous_keys() {
        assert_eq!(limits::MAX_PREVIOUS_KEYS, 8);
        let with_previous = |n: u8| {
            let mut draft = agent_draft("ana@sigo.uk");
            draft.previous = (0..n).map(|i| PreviousKey { sig: key(20 + i).public(), until: NOW }).collect();
            draft.certify(&key(1))
        };
        assert_eq!(with_previous(8).unwrap().previous().len(), 8);
        assert_eq!(with_previous(9), Err(Refusal::BadCard.because("too many `previous` keys")));
    }

    #[test]
    fn an_agent_is_listed_only_when_its_capabilities_say_listed_true() {
        let listed = |value: Option<Value>| {
            let mut draft = agent_draft("ana@sigo.uk");
            draft.capabilities = value.map(|v| obj([("listed", v)])).unwrap_or_default();
            draft.certify(&key(1)).unwrap().listed()
        };
        assert!(listed(Some(true.into())));
        assert!(!listed(Some(false.into())));
        assert!(!listed(Some("true".into())));
        assert!(!listed(Some(1.into())));
        assert!(!listed(None));
    }

    #[test]
    fn an_agent_card_is_valid_from_five_minutes_before_valid_from_until_just_before_valid_until() {
        let domain = domain_card().verify(Some(&key(1).public())).unwrap();
        let mut draft = agent_draft("ana@sigo.uk");
        draft.valid_until = Some(NOW.plus_ms(60_000));
        let card = draft.certify(&key(1)).unwrap();
        let at = |now: Timestamp| card.clone().verify(&domain, None, now).map(|_| ());
        assert_eq!(limits::CLOCK_SKEW_MS, 300_000);
        assert_eq!(at(NOW.plus_ms(-300_000)), Ok(()));
        let early = at(NOW.plus_ms(-300_001)).unwrap_err();
        assert_eq!((early.refusal(), early.code()), (Some(Refusal::CardNotYetValid), 503));
        assert!(early.kind.is_temporary(), "a card not valid yet is a refusal time mends");
        assert_eq!(at(NOW.plus_ms(59_999)), Ok(()));
        assert_eq!(at(NOW.plus_ms(60_000)), Err(Refusal::CardExpired.because("card of ana@sigo.uk has expired")));
    }
}
