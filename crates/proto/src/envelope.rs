//! The envelope (spec §5): typed fields over the object they came from, so unknown members are
//! preserved and signed. Codec, rules, sign and verify. Sealing and opening are in [`crate::seal`].

use crate::address::{Address, check_domain, check_id};
use crate::card::{AgentCard, VERSION};
use crate::crypto::{Context, SigPublic, SigningKey, hex, sha256};
use crate::error::Error;
use crate::refusal::Refusal;
use std::ops::Range;

use crate::json::{
    AlreadyCanonical, Object, Value, canonical_marking, canonical_object, field, framed_without_span, parse_marking,
};
use crate::limits;
use crate::sealed::Sealed;
use crate::sign::{Signature, Verified, verify_signature};
use crate::time::Timestamp;

/// The semantic hint of an envelope (`type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Message,
    Task,
    Result,
    Receipt,
    Intro,
}

impl Kind {
    pub fn parse(text: &str) -> Result<Kind, Error> {
        Ok(match text {
            "message" => Kind::Message,
            "task" => Kind::Task,
            "result" => Kind::Result,
            "receipt" => Kind::Receipt,
            "intro" => Kind::Intro,
            other => return Err(Refusal::BadEnvelope.because(format!("unknown envelope type {other:?}"))),
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Message => "message",
            Kind::Task => "task",
            Kind::Result => "result",
            Kind::Receipt => "receipt",
            Kind::Intro => "intro",
        }
    }
}

/// Cleartext content: a media type and a body (a string or any JSON). Any further members are
/// kept in `extra`, so they survive sealing and opening like every other unknown member.
#[derive(Debug, Clone, PartialEq)]
pub struct Content {
    pub media: String,
    pub body: Value,
    pub extra: Object,
}

impl Content {
    pub fn new(media: &str, body: Value) -> Content {
        Content { media: media.to_owned(), body, extra: Object::new() }
    }

    pub fn from_value(v: &Value) -> Result<Content, Error> {
        let o = v.as_object().ok_or_else(|| Refusal::BadEnvelope.because("`content` must be an object"))?;
        let media = field::str(o, "media")?;
        if media.is_empty() || media.len() > limits::MAX_MEDIA_LEN {
            return Err(Refusal::BadEnvelope.because("`content.media` must be 1 to 255 characters"));
        }
        let body = field::required(o, "body")?.clone();
        let extra =
            o.iter().filter(|(k, _)| *k != "media" && *k != "body").map(|(k, v)| (k.clone(), v.clone())).collect();
        Ok(Content { media: media.to_owned(), body, extra })
    }

    pub fn to_value(&self) -> Value {
        let mut o = self.extra.clone();
        o.insert("media".into(), self.media.as_str().into());
        o.insert("body".into(), self.body.clone());
        Value::Object(o)
    }
}

/// What the envelope carries: cleartext `content` or an `encrypted` payload, never both.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Clear(Content),
    Sealed(Sealed),
}

/// A paid stamp (spec §19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub house: String,
    pub amount: i64,
}

/// A proof of work (spec §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pow {
    pub bits: u32,
    pub nonce: String,
}

/// An envelope, structurally valid but not verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    id: String,
    from: Address,
    to: Vec<Address>,
    created: Timestamp,
    expires: Option<Timestamp>,
    deliver_after: Option<Timestamp>,
    thread: Option<String>,
    in_reply_to: Option<String>,
    kind: Kind,
    payload: Payload,
    stamp: Option<Stamp>,
    pow: Option<Pow>,
    /// `receipt: "delivered"` asks for a delivery acknowledgement.
    wants_delivery_receipt: bool,
    signature: Option<Signature>,
    raw: Object,
    /// The canonical text of `raw`, written once: what travels, is stored and is hashed.
    canonical: String,
    /// The bytes of `canonical` that the `signature` member takes (with its comma).
    signature_span: Option<Range<usize>>,
    /// [`Envelope::work_digest`], worked out at most once: a house checks it per recipient.
    work_digest: WorkDigest,
}

/// A lazily computed work digest. Not part of the envelope's value: it compares equal and prints
/// as nothing, so two envelopes with the same bytes stay equal.
#[derive(Clone, Default)]
struct WorkDigest(std::sync::OnceLock<String>);

impl PartialEq for WorkDigest {
    fn eq(&self, _: &WorkDigest) -> bool {
        true
    }
}

impl std::fmt::Debug for WorkDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkDigest")
    }
}

/// The fields of a new envelope. `extra` carries members such as `attachments` or `extensions`.
#[derive(Debug, Clone)]
pub struct Draft {
    pub id: String,
    pub from: Address,
    pub to: Vec<Address>,
    pub created: Timestamp,
    pub kind: Kind,
    pub content: Content,
    pub expires: Option<Timestamp>,
    pub deliver_after: Option<Timestamp>,
    pub thread: Option<String>,
    pub in_reply_to: Option<String>,
    pub extra: Object,
}

impl Draft {
    pub fn new(id: String, from: Address, to: Vec<Address>, created: Timestamp, content: Content) -> Draft {
        Draft {
            id,
            from,
            to,
            created,
            kind: Kind::Message,
            content,
            expires: None,
            deliver_after: None,
            thread: None,
            in_reply_to: None,
            extra: Object::new(),
        }
    }

    /// The unsigned envelope, in clear.
    pub fn build(self) -> Result<Envelope, Error> {
        let mut doc = self.extra;
        let members = [
            ("nyx5", VERSION.into()),
            ("id", self.id.into()),
            ("from", self.from.as_str().into()),
            ("to", Value::Array(self.to.iter().map(|a| a.as_str().into()).collect())),
            ("created", self.created.to_rfc3339().into()),
            ("expires", self.expires.map(|t| t.to_rfc3339()).into()),
            ("deliver_after", self.deliver_after.map(|t| t.to_rfc3339()).into()),
            ("thread", self.thread.into()),
            ("in_reply_to", self.in_reply_to.into()),
            ("type", self.kind.as_str().into()),
            ("content", self.content.to_value()),
        ];
        for (k, v) in members {
            doc.insert(k.to_owned(), v);
        }
        Envelope::from_object(doc)
    }
}

fn opt_time(doc: &Object, name: &str) -> Result<Option<Timestamp>, Error> {
    field::opt_str(doc, name)?.map(Timestamp::parse).transpose()
}

fn opt_ref(doc: &Object, name: &str) -> Result<Option<String>, Error> {
    let v = field::opt_str(doc, name)?;
    if let Some(id) = v {
        check_id(id)?;
    }
    Ok(v.map(str::to_owned))
}

/// The typed view of an envelope: read only, and only ever made from the envelope's own bytes
/// ([`Envelope::from_object`]), so what a check reads is what the signature covers.
impl Envelope {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn from(&self) -> &Address {
        &self.from
    }

    pub fn to(&self) -> &[Address] {
        &self.to
    }

    pub fn created(&self) -> Timestamp {
        self.created
    }

    pub fn expires(&self) -> Option<Timestamp> {
        self.expires
    }

    pub fn deliver_after(&self) -> Option<Timestamp> {
        self.deliver_after
    }

    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref()
    }

    pub fn in_reply_to(&self) -> Option<&str> {
        self.in_reply_to.as_deref()
    }

    /// The envelope's `type`.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn payload(&self) -> &Payload {
        &self.payload
    }

    pub fn stamp(&self) -> Option<&Stamp> {
        self.stamp.as_ref()
    }

    pub fn pow(&self) -> Option<&Pow> {
        self.pow.as_ref()
    }

    /// `receipt: "delivered"`: the sender asked for a delivery acknowledgement.
    pub fn wants_delivery_receipt(&self) -> bool {
        self.wants_delivery_receipt
    }

    pub fn signature(&self) -> Option<&Signature> {
        self.signature.as_ref()
    }
}

impl Envelope {
    /// Parses an envelope from bytes, refusing more than `max_bytes`.
    ///
    /// Bytes that are canonical already (as every house and agent sends them) are kept as the
    /// envelope's canonical text; anything else is written out canonically.
    pub fn parse(bytes: &[u8], max_bytes: usize) -> Result<Envelope, Error> {
        // Over `max_bytes` is the envelope's size refusal, whichever check finds it first.
        let parsed = parse_marking(bytes, max_bytes, "signature").map_err(|e| match e.refusal() {
            Some(Refusal::BodyTooLarge) => Refusal::EnvelopeTooLarge.because(e.reason),
            _ => e,
        })?;
        match parsed {
            (Value::Object(o), canonical) => {
                let env = Envelope::checked(o, canonical)?;
                env.check_size(max_bytes)?;
                Ok(env)
            }
            _ => Err(Refusal::BadEnvelope.because("an envelope is a JSON object")),
        }
    }

    /// Checks every member the protocol defines; keeps the rest untouched.
    pub fn from_object(raw: Object) -> Result<Envelope, Error> {
        Envelope::checked(raw, None)
    }

    /// [`Envelope::from_object`], with the canonical text and its signature's span when the
    /// parser found them in the input.
    fn checked(raw: Object, canonical: Option<AlreadyCanonical<'_>>) -> Result<Envelope, Error> {
        match field::str(&raw, "nyx5")? {
            VERSION => {}
            other => {
                return Err(Refusal::UnsupportedVersion.because(format!("unsupported nyx5 version {other:?}")));
            }
        }
        let id = field::str(&raw, "id")?.to_owned();
        check_id(&id)?;
        let from = Address::parse(field::str(&raw, "from")?)?;
        let to_json = field::array(&raw, "to")?;
        if to_json.is_empty() || to_json.len() > limits::MAX_RECIPIENTS {
            return Err(
                Refusal::BadEnvelope.because(format!("`to` must list 1 to {} addresses", limits::MAX_RECIPIENTS))
            );
        }
        let mut to = Vec::with_capacity(to_json.len());
        for v in to_json {
            let a = Address::parse(v.as_str().ok_or_else(|| Refusal::BadEnvelope.because("`to` lists strings"))?)?;
            if to.contains(&a) {
                return Err(Refusal::BadEnvelope.because(format!("{a} appears twice in `to`")));
            }
            to.push(a);
        }
        let created = Timestamp::parse(field::str(&raw, "created")?)?;
        let expires = opt_time(&raw, "expires")?;
        let deliver_after = opt_time(&raw, "deliver_after")?;
        if let (Some(e), Some(d)) = (expires, deliver_after)
            && e <= d
        {
            return Err(
                Refusal::BadEnvelope.because("`expires` is not after `deliver_after`: it could never be delivered")
            );
        }
        let kind = Kind::parse(field::str(&raw, "type")?)?;
        let payload = match (field::optional(&raw, "content"), field::optional(&raw, "encrypted")) {
            (Some(c), None) => Payload::Clear(Content::from_value(c)?),
            (None, Some(e)) => Payload::Sealed(Sealed::from_value(e, &to, &from)?),
            (Some(_), Some(_)) => {
                return Err(Refusal::BadEnvelope.because("`content` and `encrypted` are mutually exclusive"));
            }
            (None, None) => {
                return Err(Refusal::BadEnvelope.because("an envelope needs `content` or `encrypted`"));
            }
        };
        let stamp = field::opt_object(&raw, "stamp")?
            .map(|s| -> Result<Stamp, Error> {
                let house = field::str(s, "house")?;
                check_domain(house).map_err(|why| Refusal::BadEnvelope.because(format!("`stamp.house`: {why}")))?;
                let amount = field::integer(s, "amount")?;
                if amount <= 0 {
                    return Err(Refusal::BadEnvelope.because("`stamp.amount` must be positive"));
                }
                Ok(Stamp { house: house.to_owned(), amount })
            })
            .transpose()?;
        let pow = field::opt_object(&raw, "pow")?
            .map(|p| -> Result<Pow, Error> {
                let bits = field::integer(p, "bits")?;
                let bits = u32::try_from(bits)
                    .ok()
                    .filter(|b| *b <= limits::MAX_POW_BITS)
                    .ok_or_else(|| Refusal::BadEnvelope.because("`pow.bits` must be 0 to 32"))?;
                let nonce = field::str(p, "nonce")?;
                if nonce.is_empty() || nonce.len() > limits::MAX_POW_NONCE_LEN {
                    return Err(Refusal::BadEnvelope.because("`pow.nonce` must be 1 to 64 characters"));
                }
                Ok(Pow { bits, nonce: nonce.to_owned() })
            })
            .transpose()?;
        check_attachments(&raw)?;
        if field::opt_object(&raw, "extensions").is_err() {
            return Err(Refusal::BadEnvelope.because("`extensions` must be an object"));
        }
        let wants_delivery_receipt = field::opt_str(&raw, "receipt")? == Some("delivered");
        let signature = match raw.get("signature") {
            None => None,
            Some(_) => Some(Signature::read(&raw, "signature")?),
        };
        let (canonical, signature_span) = match canonical {
            Some(c) => (c.text.to_owned(), c.span),
            None => canonical_marking(&raw, "signature"),
        };
        Ok(Envelope {
            id,
            from,
            to,
            created,
            expires,
            deliver_after,
            thread: opt_ref(&raw, "thread")?,
            in_reply_to: opt_ref(&raw, "in_reply_to")?,
            kind,
            payload,
            stamp,
            pow,
            wants_delivery_receipt,
            signature,
            raw,
            canonical,
            signature_span,
            work_digest: WorkDigest::default(),
        })
    }

    /// The whole envelope, canonical (what travels, and what `sha256` covers).
    pub fn canonical(&self) -> Vec<u8> {
        self.canonical.as_bytes().to_vec()
    }

    /// [`Envelope::canonical`] without a copy.
    pub fn canonical_str(&self) -> &str {
        &self.canonical
    }

    /// What the signature covers: the envelope label, then the canonical envelope without its
    /// `signature` member.
    fn signed_message(&self) -> Vec<u8> {
        framed_without_span(Context::Envelope.label(), &self.canonical, self.signature_span.as_ref())
    }

    /// What a proof of work is bound to (docs/SPEC.md §9): the lower-case hex SHA-256 of the
    /// canonical envelope without its `signature` and `pow` members. It covers `from`, `to`,
    /// `id` and the sealed content, so one proof opens one mailbox for one envelope.
    pub fn work_digest(&self) -> String {
        self.work_digest
            .0
            .get_or_init(|| {
                let mut doc = self.raw.clone();
                doc.remove("signature");
                doc.remove("pow");
                hex(&sha256(&canonical_object(&doc)))
            })
            .clone()
    }

    /// Sets `pow: {bits, nonce}` (dropping any signature: sign afterwards).
    pub fn with_pow(self, bits: u32, nonce: &str) -> Result<Envelope, Error> {
        let mut raw = self.raw;
        raw.remove("signature");
        let pow = crate::json::obj([("bits", i64::from(bits).into()), ("nonce", nonce.into())]);
        raw.insert("pow".to_owned(), Value::Object(pow));
        Envelope::from_object(raw)
    }

    /// Size limits: the house's `max_bytes`, and 4 KB for an `intro` (spec §9).
    pub fn check_size(&self, max_bytes: usize) -> Result<(), Error> {
        let size = self.canonical.len();
        if size > max_bytes {
            return Err(Refusal::EnvelopeTooLarge.because(format!("envelope of {size} bytes exceeds {max_bytes}")));
        }
        if self.kind == Kind::Intro && size > limits::MAX_INTRO_BYTES {
            return Err(Refusal::IntroTooLarge
                .because(format!("an intro may be {} bytes; this is {size}", limits::MAX_INTRO_BYTES)));
        }
        Ok(())
    }

    /// Lowercase hex SHA-256 of the canonical envelope, signature included (receipts cite it).
    pub fn sha256_hex(&self) -> String {
        hex(&sha256(self.canonical.as_bytes()))
    }

    /// Whether the envelope has expired at `now` (spec §5: past `expires`, nobody delivers it).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires.is_some_and(|e| now >= e)
    }

    /// The earliest instant delivery may be attempted: `deliver_after`, else at once.
    pub fn due_at(&self, now: Timestamp) -> Timestamp {
        self.deliver_after.map_or(now, |d| d.max(now))
    }

    /// Refuses an expired envelope with 410.
    pub fn check_not_expired(&self, now: Timestamp) -> Result<(), Error> {
        if self.is_expired(now) {
            Err(Refusal::EnvelopeExpired.because(format!("envelope {} expired", self.id)))
        } else {
            Ok(())
        }
    }

    pub fn content(&self) -> Option<&Content> {
        match &self.payload {
            Payload::Clear(c) => Some(c),
            Payload::Sealed(_) => None,
        }
    }

    /// Signs the envelope (replacing any signature) with the sender's key.
    pub fn sign(self, key: &SigningKey) -> Result<Envelope, Error> {
        let signature = Signature { kid: key.public(), value: key.sign_raw(&self.signed_message()) };
        let mut raw = self.raw;
        raw.insert("signature".to_owned(), signature.to_value());
        Envelope::from_object(raw)
    }

    /// Verifies the signature against the sender's verified card at `now`: the card's address
    /// must be `from`, and the key must be its current key or a previous key in its grace period.
    pub fn verify(self, sender: &Verified<AgentCard>, now: Timestamp) -> Result<Verified<Envelope>, Error> {
        if sender.address() != self.from {
            return Err(Refusal::WrongSigner.because(format!(
                "card of {} cannot sign for {}",
                sender.address(),
                self.from
            )));
        }
        self.require_signature()?;
        verify_signature(
            &self.raw,
            "signature",
            &self.signed_message(),
            |kid| sender.accepts_key(kid, now),
            |kid, framed, signature| sender.verify_framed_by(kid, framed, signature),
        )?;
        Ok(Verified::new(self))
    }

    /// Verifies the signature against one known key (offline checks, tests).
    pub fn verify_with_key(self, key: &SigPublic) -> Result<Verified<Envelope>, Error> {
        self.require_signature()?;
        verify_signature(
            &self.raw,
            "signature",
            &self.signed_message(),
            |kid| kid == key,
            |kid, framed, signature| kid.verify_raw(framed, signature),
        )?;
        Ok(Verified::new(self))
    }

    fn require_signature(&self) -> Result<(), Error> {
        match self.signature {
            Some(_) => Ok(()),
            None => Err(Refusal::UnsignedEnvelope.because("envelope is not signed")),
        }
    }

    pub fn object(&self) -> &Object {
        &self.raw
    }

    pub fn into_object(self) -> Object {
        self.raw
    }

    pub fn to_value(&self) -> Value {
        Value::Object(self.raw.clone())
    }
}

fn check_attachments(raw: &Object) -> Result<(), Error> {
    let Some(list) = field::opt_array(raw, "attachments")? else {
        return Ok(());
    };
    if list.len() > limits::MAX_ATTACHMENTS {
        return Err(Refusal::BadEnvelope.because("too many attachments"));
    }
    for a in list {
        let a = a.as_object().ok_or_else(|| Refusal::BadEnvelope.because("each attachment is an object"))?;
        field::str(a, "url")?;
        let digest = field::str(a, "sha256")?;
        if digest.len() != 64 || !digest.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(Refusal::BadEnvelope.because("`attachments[].sha256` must be 64 lowercase hex digits"));
        }
        if field::opt_integer(a, "bytes")?.is_some_and(|b| b < 0) {
            return Err(Refusal::BadEnvelope.because("`attachments[].bytes` must not be negative"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::json::obj;

    const NOW: Timestamp = Timestamp(1_800_000_000_000);

    fn addr(text: &str) -> Address {
        Address::parse(text).unwrap()
    }

    fn draft() -> Draft {
        Draft::new(
            "m-1".into(),
            addr("ana@a.example"),
            vec![addr("bo@b.example")],
            NOW,
            Content::new("text/plain", "hola".into()),
        )
    }

    /// The envelope of [`draft`] with `members` set on its object.
    fn with(members: &[(&str, Value)]) -> Result<Envelope, Error> {
        let mut raw = draft().build().unwrap().into_object();
        for (k, v) in members {
            raw.insert((*k).to_owned(), v.clone());
        }
        Envelope::from_object(raw)
    }

    fn content(media: &str) -> Result<Content, Error> {
        Content::from_value(&Value::Object(obj([("media", media.into()), ("body", "hola".into())])))
    }

    /// A signed envelope read from its canonical bytes keeps them as they came; read from any
    /// other writing of the same document, it writes them again: the same envelope either way,
    /// the signature's span included (`PartialEq` compares every field).
    #[test]
    fn canonical_bytes_are_kept_as_they_came() {
        let env = draft().build().unwrap().sign(&SigningKey::from_seed([3; 32])).unwrap();
        let bytes = env.canonical();
        let (_, taken) = parse_marking(&bytes, limits::MAX_ENVELOPE_BYTES, "signature").unwrap();
        assert!(taken.is_some_and(|t| t.span.is_some()));
        let spaced = String::from_utf8(bytes.clone()).unwrap().replacen(',', ", ", 1);
        let from_spaced = Envelope::parse(spaced.as_bytes(), limits::MAX_ENVELOPE_BYTES).unwrap();
        let from_canonical = Envelope::parse(&bytes, limits::MAX_ENVELOPE_BYTES).unwrap();
        assert_eq!(from_canonical, env);
        assert_eq!(from_spaced, env);
        assert_eq!(from_spaced.canonical(), bytes);
        let key = SigningKey::from_seed([3; 32]).public();
        assert!(from_canonical.verify_with_key(&key).is_ok());
    }

    #[test]
    fn content_media_is_1_to_255_characters() {
        let refused = Err(Refusal::BadEnvelope.because("`content.media` must be 1 to 255 characters"));
        assert_eq!(content(""), refused);
        assert_eq!(content("m").unwrap().media, "m");
        assert_eq!(content(&"m".repeat(255)).unwrap().media, "m".repeat(255));
        assert_eq!(content(&"m".repeat(256)), refused);
    }

    #[test]
    fn content_keeps_its_unknown_members_apart_from_media_and_body() {
        let value =
            Value::Object(obj([("media", "text/plain".into()), ("body", "hola".into()), ("lang", "es".into())]));
        let content = Content::from_value(&value).unwrap();
        assert_eq!(content.media, "text/plain");
        assert_eq!(content.body, Value::from("hola"));
        assert_eq!(content.extra, obj([("lang", "es".into())]));
        assert_eq!(content.to_value(), value);
    }

    #[test]
    fn the_optional_members_read_back_as_written() {
        let mut d = draft();
        d.expires = Some(Timestamp(NOW.0 + 60_000));
        d.deliver_after = Some(Timestamp(NOW.0 + 1_000));
        d.thread = Some("t-1".into());
        d.in_reply_to = Some("m-0".into());
        d.extra.insert("stamp".into(), obj([("house", "b.example".into()), ("amount", 3.into())]).into());
        d.extra.insert("receipt".into(), "delivered".into());
        let env = d.build().unwrap();
        assert_eq!(env.expires(), Some(Timestamp(NOW.0 + 60_000)));
        assert_eq!(env.deliver_after(), Some(Timestamp(NOW.0 + 1_000)));
        assert_eq!(env.thread(), Some("t-1"));
        assert_eq!(env.in_reply_to(), Some("m-0"));
        assert_eq!(env.stamp(), Some(&Stamp { house: "b.example".into(), amount: 3 }));
        assert!(env.wants_delivery_receipt());

        let bare = draft().build().unwrap();
        assert_eq!((bare.expires(), bare.deliver_after(), bare.thread(), bare.stamp()), (None, None, None, None));
        assert!(!bare.wants_delivery_receipt());
        assert!(!with(&[("receipt", "read".into())]).unwrap().wants_delivery_receipt());
    }

    #[test]
    fn a_pow_nonce_is_1_to_64_characters() {
        let pow = |nonce: &str| with(&[("pow", obj([("bits", 8.into()), ("nonce", nonce.into())]).into())]);
        let refused = Err(Refusal::BadEnvelope.because("`pow.nonce` must be 1 to 64 characters"));
        assert_eq!(pow(""), refused);
        assert_eq!(pow("n").unwrap().pow(), Some(&Pow { bits: 8, nonce: "n".into() }));
        assert_eq!(pow(&"n".repeat(64)).unwrap().pow(), Some(&Pow { bits: 8, nonce: "n".repeat(64) }));
        assert_eq!(pow(&"n".repeat(65)), refused);
    }

    #[test]
    fn an_intro_may_be_exactly_4096_bytes() {
        let intro = |body_len: usize| {
            let mut d = draft();
            d.kind = Kind::Intro;
            d.content = Content::new("text/plain", "x".repeat(body_len).into());
            d.build().unwrap()
        };
        let overhead = intro(0).canonical_str().len();
        let fits = intro(limits::MAX_INTRO_BYTES - overhead);
        assert_eq!(fits.canonical_str().len(), limits::MAX_INTRO_BYTES);
        assert_eq!(fits.check_size(usize::MAX), Ok(()));
        assert_eq!(fits.check_size(limits::MAX_INTRO_BYTES), Ok(()));
        let over = intro(limits::MAX_INTRO_BYTES - overhead + 1);
        assert_eq!(over.check_size(usize::MAX).unwrap_err().refusal(), Some(Refusal::IntroTooLarge));
        assert_eq!(
            fits.check_size(limits::MAX_INTRO_BYTES - 1).unwrap_err().refusal(),
            Some(Refusal::EnvelopeTooLarge)
        );
    }

    #[test]
    fn an_unsigned_envelope_is_refused_as_not_signed() {
        let key = SigningKey::from_seed([3; 32]);
        let unsigned = draft().build().unwrap();
        assert_eq!(
            unsigned.clone().verify_with_key(&key.public()).unwrap_err(),
            Refusal::UnsignedEnvelope.because("envelope is not signed")
        );
        assert!(unsigned.sign(&key).unwrap().verify_with_key(&key.public()).is_ok());
    }

    fn attachment(sha256: &str, bytes: Option<i64>) -> Value {
        let mut a = obj([("url", "https://b.example/f".into()), ("sha256", sha256.into())]);
        if let Some(b) = bytes {
            a.insert("bytes".into(), b.into());
        }
        a.into()
    }

    #[test]
    fn attachments_are_at_most_64_each_with_a_lowercase_sha256_and_no_negative_size() {
        let digest = hex(&sha256(b"f"));
        let list = |items: Vec<Value>| with(&[("attachments", Value::Array(items))]).map(|_| ());
        let many = |n: usize| list(vec![attachment(&digest, Some(1)); n]);
        assert_eq!(many(0), Ok(()));
        assert_eq!(many(1), Ok(()));
        assert_eq!(many(limits::MAX_ATTACHMENTS), Ok(()));
        assert_eq!(many(limits::MAX_ATTACHMENTS + 1), Err(Refusal::BadEnvelope.because("too many attachments")));

        let bad_digest = Err(Refusal::BadEnvelope.because("`attachments[].sha256` must be 64 lowercase hex digits"));
        assert_eq!(list(vec![attachment(&digest, None)]), Ok(()));
        assert_eq!(list(vec![attachment(&digest[..63], None)]), bad_digest);
        assert_eq!(list(vec![attachment(&format!("{digest}0"), None)]), bad_digest);
        assert_eq!(list(vec![attachment(&digest.to_uppercase(), None)]), bad_digest);
        assert_eq!(list(vec![attachment(&"g".repeat(64), None)]), bad_digest);

        let negative = Err(Refusal::BadEnvelope.because("`attachments[].bytes` must not be negative"));
        assert_eq!(list(vec![attachment(&digest, Some(0))]), Ok(()));
        assert_eq!(list(vec![attachment(&digest, Some(1))]), Ok(()));
        assert_eq!(list(vec![attachment(&digest, Some(-1))]), negative);
        assert_eq!(list(vec![attachment(&digest, Some(0)), attachment(&digest, Some(-1))]), negative);
    }

    #[test]
    fn an_envelope_equals_and_prints_as_its_copy_once_its_work_digest_is_worked_out() {
        let env = draft().build().unwrap();
        let worked = env.clone();
        let digest = worked.work_digest();
        assert_eq!(worked, env);
        let printed = format!("{worked:?}");
        assert_eq!(printed, format!("{env:?}"));
        assert!(printed.contains("work_digest: WorkDigest }"), "{printed}");
        assert!(!printed.contains(&digest), "{printed}");
    }
}
